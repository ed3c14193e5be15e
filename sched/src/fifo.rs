//! A minimal round-robin scheduler: one queue per pool, fixed slices.
//!
//! It is the framework's reference scheduler: small enough to check by eye, so
//! the framework's own tests do not depend on the policy schedulers, and the
//! lab's baseline. It is not one of the production schedulers (`credit2`,
//! `credit`, `null`, `rt`, `arinc653`).

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::cpuset::CpuSet;
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};

/// The slice every unit gets, in ns.
pub const FIFO_SLICE_NS: Time = 1_000_000;

#[derive(Debug)]
struct FifoUnit {
    domain: DomainId,
    hard: CpuSet,
    runnable: bool,
    queued: bool,
    resource: ResourceId,
    /// Resource it is running on (as leader or sibling), if any.
    running_on: Option<ResourceId>,
    last_start: Time,
    stats: UnitStats,
}

#[derive(Debug)]
struct FifoResource {
    info: ResourceInfo,
    running: Vec<UnitId>,
    /// Kicked since its last decision (so the next wake-up kicks another one).
    tickled: bool,
}

/// Round-robin over one pool-wide queue.
#[derive(Debug, Default)]
pub struct FifoScheduler {
    units: Vec<Option<FifoUnit>>,
    resources: Vec<FifoResource>,
    queue: VecDeque<UnitId>,
}

impl FifoScheduler {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    fn unit_mut(&mut self, unit: UnitId) -> Option<&mut FifoUnit> {
        self.units.get_mut(unit.0 as usize).and_then(Option::as_mut)
    }

    fn resource_index(&self, id: ResourceId) -> Option<usize> {
        self.resources.iter().position(|r| r.info.id == id)
    }

    fn dequeue(&mut self, unit: UnitId) {
        if let Some(pos) = self.queue.iter().position(|&u| u == unit) {
            self.queue.remove(pos);
        }
        if let Some(u) = self.unit_mut(unit) {
            u.queued = false;
        }
    }

    fn enqueue(&mut self, unit: UnitId) {
        if let Some(u) = self.unit_mut(unit)
            && u.runnable
            && !u.queued
            && u.running_on.is_none()
        {
            u.queued = true;
            self.queue.push_back(unit);
        }
    }

    fn idle_resource_for(&self, hard: &CpuSet) -> Option<ResourceId> {
        self.resources
            .iter()
            .find(|r| r.running.is_empty() && !r.tickled && r.info.cpus.intersects(hard))
            .or_else(|| {
                self.resources
                    .iter()
                    .find(|r| r.running.is_empty() && r.info.cpus.intersects(hard))
            })
            .map(|r| r.info.id)
    }

    fn tickle(&mut self, resource: ResourceId) -> Tickle {
        if let Some(index) = self.resource_index(resource) {
            self.resources[index].tickled = true;
        }
        Tickle::single(resource.0)
    }

    /// Takes the first queued unit allowed on `resource` and matching `domain`.
    fn take(
        &mut self,
        resource: ResourceId,
        cpus: CpuSet,
        domain: Option<DomainId>,
        now: Time,
    ) -> Option<(UnitId, bool)> {
        let pos = self.queue.iter().position(|&id| {
            self.units
                .get(id.0 as usize)
                .and_then(Option::as_ref)
                .is_some_and(|u| u.hard.intersects(&cpus) && domain.is_none_or(|d| d == u.domain))
        })?;
        let id = self.queue.remove(pos)?;
        let u = self.unit_mut(id)?;
        u.queued = false;
        u.running_on = Some(resource);
        u.last_start = now;
        u.stats.dispatches += 1;
        let migrated = u.resource != resource;
        u.resource = resource;
        Some((id, migrated))
    }
}

impl Scheduler for FifoScheduler {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn set_pool_param(&mut self, _key: &str, _value: &str) -> Result<(), SchedError> {
        Err(SchedError::UnknownParam {
            scheduler: "fifo",
            valid: "(none)",
        })
    }

    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError> {
        self.resources.push(FifoResource {
            info,
            running: Vec::with_capacity(info.cpus.len()),
            tickled: false,
        });
        Ok(())
    }

    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError> {
        let index = self
            .resource_index(id)
            .ok_or(SchedError::UnknownResource(id))?;
        let busy = self
            .units
            .iter()
            .flatten()
            .any(|u| u.resource == id || u.running_on == Some(id));
        if busy {
            return Err(SchedError::ResourceBusy(id));
        }
        self.resources.remove(index);
        Ok(())
    }

    fn insert_unit(&mut self, info: &UnitInfo, _now: Time) -> Result<ResourceId, SchedError> {
        let resource = self
            .idle_resource_for(&info.hard_affinity)
            .or_else(|| {
                self.resources
                    .iter()
                    .find(|r| r.info.cpus.intersects(&info.hard_affinity))
                    .map(|r| r.info.id)
            })
            .ok_or(SchedError::NoResourceInAffinity(info.id))?;
        let slot = info.id.0 as usize;
        if self.units.len() <= slot {
            self.units.resize_with(slot + 1, || None);
        }
        self.units[slot] = Some(FifoUnit {
            domain: info.domain,
            hard: info.hard_affinity,
            runnable: false,
            queued: false,
            resource,
            running_on: None,
            last_start: 0,
            stats: UnitStats::default(),
        });
        self.queue.reserve(1);
        Ok(resource)
    }

    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError> {
        self.dequeue(unit);
        let u = self
            .units
            .get_mut(unit.0 as usize)
            .and_then(Option::take)
            .ok_or(SchedError::UnknownUnit(unit))?;
        if let Some(r) = u.running_on
            && let Some(index) = self.resource_index(r)
        {
            self.resources[index].running.retain(|&id| id != unit);
        }
        Ok(())
    }

    fn wake(&mut self, unit: UnitId, _now: Time, _reason: WakeReason) -> Tickle {
        let Some(u) = self.unit_mut(unit) else {
            return Tickle::new();
        };
        u.runnable = true;
        let hard = u.hard;
        let running = u.running_on;
        self.enqueue(unit);
        match running.or_else(|| self.idle_resource_for(&hard)) {
            Some(r) => self.tickle(r),
            None => Tickle::new(),
        }
    }

    fn sleep(&mut self, unit: UnitId, _now: Time) -> Tickle {
        self.dequeue(unit);
        let Some(u) = self.unit_mut(unit) else {
            return Tickle::new();
        };
        u.runnable = false;
        u.running_on
            .map(|r| Tickle::single(r.0))
            .unwrap_or_default()
    }

    fn yield_unit(&mut self, _unit: UnitId, _now: Time) {}

    fn pick_resource(&mut self, unit: UnitId, _now: Time) -> ResourceId {
        let Some(u) = self.units.get(unit.0 as usize).and_then(Option::as_ref) else {
            return ResourceId(0);
        };
        let hard = u.hard;
        let current = u.resource;
        self.idle_resource_for(&hard)
            .or_else(|| {
                self.resources
                    .iter()
                    .find(|r| r.info.cpus.intersects(&hard))
                    .map(|r| r.info.id)
            })
            .unwrap_or(current)
    }

    fn migrate(&mut self, unit: UnitId, to: ResourceId, _now: Time) {
        if let Some(u) = self.unit_mut(unit) {
            u.resource = to;
        }
    }

    fn do_schedule(&mut self, resource: ResourceId, now: Time) -> TaskSlice {
        let Some(index) = self.resource_index(resource) else {
            return TaskSlice::IDLE;
        };
        let cpus = self.resources[index].info.cpus;
        self.resources[index].tickled = false;
        let previous = core::mem::take(&mut self.resources[index].running);
        for &id in &previous {
            if let Some(u) = self.unit_mut(id) {
                u.stats.runtime_ns += now.saturating_sub(u.last_start);
                u.running_on = None;
            }
            self.enqueue(id);
        }
        let mut running = previous;
        running.clear();
        let picked = self.take(resource, cpus, None, now);
        if let Some((id, _)) = picked {
            running.push(id);
        }
        self.resources[index].running = running;
        match picked {
            Some((id, migrated)) => TaskSlice {
                unit: Some(id),
                slice_ns: Some(FIFO_SLICE_NS),
                migrated,
            },
            None => TaskSlice::IDLE,
        }
    }

    fn pick_sibling(
        &mut self,
        resource: ResourceId,
        domain: DomainId,
        now: Time,
    ) -> Option<UnitId> {
        let index = self.resource_index(resource)?;
        let cpus = self.resources[index].info.cpus;
        if self.resources[index].running.len() >= cpus.len() {
            return None;
        }
        let (id, _) = self.take(resource, cpus, Some(domain), now)?;
        self.resources[index].running.push(id);
        Some(id)
    }

    fn set_unit_params(&mut self, unit: UnitId, _params: &SchedParams) -> Result<(), SchedError> {
        self.unit_mut(unit)
            .map(|_| ())
            .ok_or(SchedError::UnknownUnit(unit))
    }

    fn set_affinity(
        &mut self,
        unit: UnitId,
        hard: CpuSet,
        _soft: CpuSet,
    ) -> Result<(), SchedError> {
        let u = self.unit_mut(unit).ok_or(SchedError::UnknownUnit(unit))?;
        u.hard = hard;
        Ok(())
    }

    fn stats(&self, unit: UnitId) -> Option<UnitStats> {
        self.units
            .get(unit.0 as usize)
            .and_then(Option::as_ref)
            .map(|u| u.stats)
    }
}
