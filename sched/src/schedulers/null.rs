//! The null scheduler, after Xen's `sched_null.c` made unit-aware: static
//! partitioning for latency-sensitive and embedded setups.
//!
//! Each resource is assigned at most one unit and runs it whenever it is
//! runnable, with no time slice (`slice_ns: None`); a blocked unit keeps its
//! resource, which then idles. Units beyond the resources wait in a FIFO and
//! take the first free resource inside their hard affinity, in arrival order.
//! While a resource's leader runs, a waiting unit of the same domain may fill a
//! spare CPU of it ([`Scheduler::pick_sibling`]); it keeps its place in the FIFO.
//!
//! Freeing a resource in `remove_unit`, `migrate`, `set_affinity` or
//! `add_resource` hands it to the first waiter at once, but those operations
//! cannot return a tickle; the resource is remembered and reported by
//! [`Scheduler::take_tickle`], which the framework calls right after them,
//! and by the next `wake`/`sleep`.

use alloc::vec;
use alloc::vec::Vec;

use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};

use super::{FifoList, Link, resource_allowed};

/// Valid pool parameters (none).
pub const POOL_PARAMS: &str = "(none)";

#[derive(Clone, Debug)]
struct Unit {
    present: bool,
    domain: DomainId,
    hard: CpuSet,
    soft: CpuSet,
    /// Master CPUs of the pool resources inside the hard affinity.
    allowed: CpuSet,
    assigned: Option<ResourceId>,
    waiting: bool,
    last_res: ResourceId,
    runnable: bool,
    running_on: Option<ResourceId>,
    last_account: Time,
    runtime_ns: Time,
    dispatches: u64,
}

impl Unit {
    const ABSENT: Unit = Unit {
        present: false,
        domain: DomainId(0),
        hard: CpuSet::new(),
        soft: CpuSet::new(),
        allowed: CpuSet::new(),
        assigned: None,
        waiting: false,
        last_res: ResourceId(0),
        runnable: false,
        running_on: None,
        last_account: 0,
        runtime_ns: 0,
        dispatches: 0,
    };
}

#[derive(Clone, Debug)]
struct Resource {
    info: ResourceInfo,
    assigned: Option<UnitId>,
    current: Option<UnitId>,
    siblings: Vec<UnitId>,
}

/// The null scheduler of one pool.
pub struct Null {
    units: Vec<Unit>,
    links: Vec<Link>,
    waitq: FifoList,
    resources: Vec<Resource>,
    res_index: Vec<u16>,
    pending_tickle: Tickle,
}

const NO_INDEX: u16 = u16::MAX;

impl Default for Null {
    fn default() -> Self {
        Self::new()
    }
}

impl Null {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self {
            units: Vec::new(),
            links: Vec::new(),
            waitq: FifoList::new(),
            resources: Vec::new(),
            res_index: vec![NO_INDEX; MAX_CPUS],
            pending_tickle: CpuSet::new(),
        }
    }

    /// The unit a resource is assigned to.
    pub fn assigned_unit(&self, resource: ResourceId) -> Option<UnitId> {
        self.index(resource)
            .and_then(|ri| self.resources[ri].assigned)
    }

    /// The waiting units, first come first.
    pub fn waiting(&self) -> impl Iterator<Item = UnitId> + '_ {
        self.waitq.iter(&self.links)
    }

    /// Resources that got a unit while the trait gave no way to tickle them
    /// (see the module comment); the framework should reschedule them.
    pub fn take_pending_tickle(&mut self) -> Tickle {
        core::mem::take(&mut self.pending_tickle)
    }

    fn index(&self, resource: ResourceId) -> Option<usize> {
        let i = *self.res_index.get(resource.0)?;
        (i != NO_INDEX).then_some(i as usize)
    }

    fn unit(&self, unit: UnitId) -> Option<&Unit> {
        self.units.get(unit.0 as usize).filter(|u| u.present)
    }

    fn allowed_resources(&self, hard: &CpuSet) -> CpuSet {
        self.resources
            .iter()
            .filter(|r| resource_allowed(hard, &r.info))
            .map(|r| r.info.id.0)
            .collect()
    }

    /// A free resource `u` may use, preferring its soft affinity.
    fn free_resource_for(&self, u: UnitId) -> Option<usize> {
        let unit = &self.units[u.0 as usize];
        let soft = self
            .allowed_resources(&unit.soft)
            .intersection(&unit.allowed);
        [soft, unit.allowed].into_iter().find_map(|set| {
            set.iter()
                .filter_map(|cpu| self.index(ResourceId(cpu)))
                .find(|&ri| self.resources[ri].assigned.is_none())
        })
    }

    fn assign(&mut self, u: UnitId, ri: usize) {
        let id = self.resources[ri].info.id;
        self.resources[ri].assigned = Some(u);
        self.units[u.0 as usize].assigned = Some(id);
    }

    /// Gives a free resource to the first waiter that may run there (skipping
    /// waiters lent out as siblings); true if one was found.
    fn assign_waiter(&mut self, ri: usize) -> bool {
        let id = self.resources[ri].info.id;
        let found = self.waitq.iter(&self.links).find(|w| {
            let unit = &self.units[w.0 as usize];
            unit.allowed.contains(id.0) && unit.running_on.is_none()
        });
        let Some(w) = found else { return false };
        self.waitq.remove(&mut self.links, w);
        self.units[w.0 as usize].waiting = false;
        self.assign(w, ri);
        true
    }

    /// Frees `u`'s resource (if any) and hands it to the first waiter.
    fn unassign(&mut self, u: UnitId) {
        let Some(res) = self.units[u.0 as usize].assigned.take() else {
            return;
        };
        let Some(ri) = self.index(res) else { return };
        self.resources[ri].assigned = None;
        if self.assign_waiter(ri) {
            self.pending_tickle.insert(res.0);
        }
    }

    /// Assigns `u` (not assigned, not waiting) to a free resource or queues it.
    fn place(&mut self, u: UnitId) -> Option<ResourceId> {
        match self.free_resource_for(u) {
            Some(ri) => {
                self.assign(u, ri);
                Some(self.resources[ri].info.id)
            }
            None => {
                self.units[u.0 as usize].waiting = true;
                self.waitq.push_back(&mut self.links, u);
                None
            }
        }
    }

    /// [`Self::place`], and a tickle for the resource `u` gets (none when
    /// it queues).
    fn place_and_tickle(&mut self, u: UnitId) {
        if let Some(res) = self.place(u) {
            self.pending_tickle.insert(res.0);
        }
    }

    fn account(&mut self, u: UnitId, now: Time) {
        let unit = &mut self.units[u.0 as usize];
        unit.runtime_ns += now.saturating_sub(unit.last_account);
        unit.last_account = now;
        unit.running_on = None;
    }

    fn with_pending(&mut self, tickle: Tickle) -> Tickle {
        tickle.union(&self.take_pending_tickle())
    }

    fn recompute_allowed(&mut self) {
        let all: CpuSet = self.resources.iter().map(|r| r.info.id.0).collect();
        for index in 0..self.units.len() {
            if self.units[index].present {
                let allowed = self.allowed_resources(&self.units[index].hard);
                // The last resource of its affinity left: break the affinity
                // (as Xen does) rather than strand the unit.
                self.units[index].allowed = if allowed.is_empty() { all } else { allowed };
            }
        }
    }
}

impl Scheduler for Null {
    fn name(&self) -> &'static str {
        "null"
    }

    fn set_pool_param(&mut self, _key: &str, _value: &str) -> Result<(), SchedError> {
        Err(SchedError::UnknownParam {
            scheduler: "null",
            valid: POOL_PARAMS,
        })
    }

    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError> {
        if info.id.0 >= MAX_CPUS || info.cpus.is_empty() {
            return Err(SchedError::UnknownResource(info.id));
        }
        if self.index(info.id).is_some() {
            return Err(SchedError::ResourceBusy(info.id));
        }
        self.res_index[info.id.0] = self.resources.len() as u16;
        let spare = info.cpus.len();
        self.resources.push(Resource {
            info,
            assigned: None,
            current: None,
            siblings: Vec::with_capacity(spare),
        });
        self.recompute_allowed();
        let ri = self.resources.len() - 1;
        if self.assign_waiter(ri) {
            self.pending_tickle.insert(info.id.0);
        }
        Ok(())
    }

    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError> {
        let ri = self.index(id).ok_or(SchedError::UnknownResource(id))?;
        let r = &self.resources[ri];
        if r.current.is_some() || !r.siblings.is_empty() {
            return Err(SchedError::ResourceBusy(id));
        }
        // A unit assigned here but not running is placed anew once the
        // resource is gone (Xen's null moves it to another free pCPU or the
        // waitqueue). The framework's migrations cannot keep it off: moving
        // one unit frees its old resource for the first waiter, and a unit
        // whose target is taken goes to any free resource, both of which
        // may be one that is leaving.
        let orphan = r.assigned;
        self.resources.remove(ri);
        self.res_index.fill(NO_INDEX);
        for (index, r) in self.resources.iter().enumerate() {
            self.res_index[r.info.id.0] = index as u16;
        }
        self.pending_tickle.remove(id.0);
        self.recompute_allowed();
        if let Some(u) = orphan {
            self.units[u.0 as usize].assigned = None;
            self.place_and_tickle(u);
        }
        Ok(())
    }

    fn insert_unit(&mut self, info: &UnitInfo, now: Time) -> Result<ResourceId, SchedError> {
        if info.params.weight == 0 {
            return Err(SchedError::InvalidParam {
                param: "weight",
                expected: "1..=65535",
            });
        }
        if self.unit(info.id).is_some() {
            return Err(SchedError::InvalidParam {
                param: "unit",
                expected: "a unit id not already in the pool",
            });
        }
        let allowed = self.allowed_resources(&info.hard_affinity);
        let Some(first) = allowed.first() else {
            return Err(SchedError::NoResourceInAffinity(info.id));
        };
        let slot = info.id.0 as usize;
        if self.units.len() <= slot {
            self.units.resize(slot + 1, Unit::ABSENT);
            self.links.resize(slot + 1, Link::UNLINKED);
        }
        self.units[slot] = Unit {
            present: true,
            domain: info.domain,
            hard: info.hard_affinity,
            soft: info.soft_affinity,
            allowed,
            last_res: ResourceId(first),
            last_account: now,
            ..Unit::ABSENT
        };
        let placed = self.place(info.id).unwrap_or(ResourceId(first));
        // What the framework is told is where it believes the unit is.
        self.units[slot].last_res = placed;
        Ok(placed)
    }

    fn take_tickle(&mut self) -> Tickle {
        self.take_pending_tickle()
    }

    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError> {
        if self.unit(unit).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        if let Some(res) = self.units[unit.0 as usize].running_on
            && let Some(ri) = self.index(res)
        {
            let r = &mut self.resources[ri];
            if r.current == Some(unit) {
                r.current = None;
            }
            r.siblings.retain(|&s| s != unit);
        }
        if self.units[unit.0 as usize].waiting {
            self.waitq.remove(&mut self.links, unit);
        }
        self.unassign(unit);
        self.units[unit.0 as usize] = Unit::ABSENT;
        Ok(())
    }

    fn wake(&mut self, unit: UnitId, _now: Time, _reason: WakeReason) -> Tickle {
        let Some(u) = self.unit(unit) else {
            return self.take_pending_tickle();
        };
        let (running, assigned, waiting) = (u.running_on.is_some(), u.assigned, u.waiting);
        self.units[unit.0 as usize].runnable = true;
        let mut tickle = CpuSet::new();
        if !running {
            if let Some(res) = assigned {
                tickle.insert(res.0);
            } else if waiting && let Some(ri) = self.free_resource_for(unit) {
                self.waitq.remove(&mut self.links, unit);
                self.units[unit.0 as usize].waiting = false;
                self.assign(unit, ri);
                tickle.insert(self.resources[ri].info.id.0);
            }
        }
        self.with_pending(tickle)
    }

    fn sleep(&mut self, unit: UnitId, _now: Time) -> Tickle {
        let Some(u) = self.unit(unit) else {
            return self.take_pending_tickle();
        };
        let running = u.running_on;
        self.units[unit.0 as usize].runnable = false;
        let mut tickle = CpuSet::new();
        if let Some(res) = running {
            tickle.insert(res.0);
        }
        self.with_pending(tickle)
    }

    fn yield_unit(&mut self, _unit: UnitId, _now: Time) {
        // The resource belongs to the unit: there is no one to yield to.
    }

    fn pick_resource(&mut self, unit: UnitId, _now: Time) -> ResourceId {
        let Some(u) = self.unit(unit) else {
            return self.resources.first().map_or(ResourceId(0), |r| r.info.id);
        };
        if let Some(res) = u.assigned {
            return res;
        }
        if let Some(ri) = self.free_resource_for(unit) {
            return self.resources[ri].info.id;
        }
        if u.allowed.contains(u.last_res.0) {
            u.last_res
        } else {
            ResourceId(u.allowed.first().unwrap_or(u.last_res.0))
        }
    }

    fn migrate(&mut self, unit: UnitId, to: ResourceId, _now: Time) {
        let Some(u) = self.unit(unit) else { return };
        let Some(to_index) = self.index(to) else {
            return;
        };
        if u.running_on.is_some() || u.assigned == Some(to) {
            return;
        }
        self.units[unit.0 as usize].last_res = to;
        let u = &self.units[unit.0 as usize];
        let target_ok = u.allowed.contains(to.0) && self.resources[to_index].assigned.is_none();
        if !target_ok && u.waiting {
            return; // Keep its place in the FIFO rather than queue again.
        }
        self.unassign(unit);
        if self.units[unit.0 as usize].waiting {
            self.waitq.remove(&mut self.links, unit);
            self.units[unit.0 as usize].waiting = false;
        }
        if target_ok {
            self.assign(unit, to_index);
            self.pending_tickle.insert(to.0);
        } else {
            self.place_and_tickle(unit);
        }
    }

    fn do_schedule(&mut self, resource: ResourceId, now: Time) -> TaskSlice {
        let Some(ri) = self.index(resource) else {
            return TaskSlice::IDLE;
        };
        while let Some(s) = self.resources[ri].siblings.pop() {
            self.account(s, now);
            // It was skipped by resources freed while it was lent out.
            if let Some(free) = self.free_resource_for(s).filter(|&free| free != ri) {
                self.waitq.remove(&mut self.links, s);
                self.units[s.0 as usize].waiting = false;
                self.assign(s, free);
                self.pending_tickle.insert(self.resources[free].info.id.0);
            }
        }
        if let Some(prev) = self.resources[ri].current.take() {
            self.account(prev, now);
        }
        if let Some(u) = self.resources[ri].assigned
            && !self.units[u.0 as usize].allowed.contains(resource.0)
        {
            // Its affinity changed while it ran here: place it anew.
            self.unassign(u);
            self.place_and_tickle(u);
        }
        if self.resources[ri].assigned.is_none() {
            self.assign_waiter(ri);
        }
        self.pending_tickle.remove(resource.0);
        let Some(u) = self.resources[ri].assigned else {
            return TaskSlice::IDLE;
        };
        let unit = &mut self.units[u.0 as usize];
        if !unit.runnable {
            return TaskSlice::IDLE;
        }
        let migrated = unit.last_res != resource;
        unit.last_res = resource;
        unit.running_on = Some(resource);
        unit.last_account = now;
        unit.dispatches += 1;
        self.resources[ri].current = Some(u);
        TaskSlice {
            unit: Some(u),
            slice_ns: None,
            migrated,
        }
    }

    fn pick_sibling(
        &mut self,
        resource: ResourceId,
        domain: DomainId,
        now: Time,
    ) -> Option<UnitId> {
        let ri = self.index(resource)?;
        let r = &self.resources[ri];
        let leader = r.current?;
        if self.units[leader.0 as usize].domain != domain
            || r.siblings.len() + 1 >= r.info.cpus.len()
        {
            return None;
        }
        let found = self.waitq.iter(&self.links).find(|w| {
            let unit = &self.units[w.0 as usize];
            unit.domain == domain
                && unit.runnable
                && unit.running_on.is_none()
                && unit.allowed.contains(resource.0)
        })?;
        let unit = &mut self.units[found.0 as usize];
        unit.running_on = Some(resource);
        unit.last_res = resource;
        unit.last_account = now;
        unit.dispatches += 1;
        self.resources[ri].siblings.push(found);
        Some(found)
    }

    fn set_unit_params(&mut self, unit: UnitId, params: &SchedParams) -> Result<(), SchedError> {
        if self.unit(unit).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        if params.weight == 0 {
            return Err(SchedError::InvalidParam {
                param: "weight",
                expected: "1..=65535",
            });
        }
        // Null has no per-unit parameters to apply.
        Ok(())
    }

    fn set_affinity(&mut self, unit: UnitId, hard: CpuSet, soft: CpuSet) -> Result<(), SchedError> {
        if self.unit(unit).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        let allowed = self.allowed_resources(&hard);
        if allowed.is_empty() {
            return Err(SchedError::NoResourceInAffinity(unit));
        }
        let u = &mut self.units[unit.0 as usize];
        u.hard = hard;
        u.soft = soft;
        u.allowed = allowed;
        let (assigned, running, waiting) = (u.assigned, u.running_on.is_some(), u.waiting);
        let soft_allowed = self.allowed_resources(&soft).intersection(&allowed);
        // Outside the new soft affinity while a free resource inside it
        // could take the unit: move there too (a null unit keeps its
        // resource for good, so placement is the only chance to prefer).
        let better_soft = assigned.is_some_and(|res| {
            !soft_allowed.contains(res.0)
                && soft_allowed.iter().any(|cpu| {
                    self.index(ResourceId(cpu))
                        .is_some_and(|ri| self.resources[ri].assigned.is_none())
                })
        });
        if let Some(res) = assigned
            && (!allowed.contains(res.0) || better_soft)
            && !running
        {
            self.unassign(unit);
            self.place_and_tickle(unit);
        } else if waiting
            && !running
            && let Some(ri) = self.free_resource_for(unit)
        {
            self.waitq.remove(&mut self.links, unit);
            self.units[unit.0 as usize].waiting = false;
            self.assign(unit, ri);
            self.pending_tickle.insert(self.resources[ri].info.id.0);
        }
        Ok(())
    }

    fn stats(&self, unit: UnitId) -> Option<UnitStats> {
        let u = self.unit(unit)?;
        Some(UnitStats {
            runtime_ns: u.runtime_ns,
            dispatches: u.dispatches,
            credit: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use alloc::format;
    use alloc::vec::Vec;

    use proptest::prelude::*;

    use super::*;
    use crate::schedulers::sim::{self, Load, Op, Sim, resource, unit};

    const MS: Time = 1_000_000;

    fn waiting(s: &Null) -> Vec<u32> {
        s.waiting().map(|u| u.0).collect()
    }

    #[test]
    fn one_unit_per_resource_and_a_fifo_for_the_rest() {
        let mut s = Null::new();
        s.add_resource(resource(0, 0, 0)).unwrap();
        let all = CpuSet::first_n(1);
        for i in 0..3 {
            assert_eq!(s.insert_unit(&unit(i, i, 256, all), 0), Ok(ResourceId(0)));
            s.wake(UnitId(i), 0, WakeReason::New);
        }
        assert_eq!(s.assigned_unit(ResourceId(0)), Some(UnitId(0)));
        assert_eq!(waiting(&s), [1, 2]);
        let slice = s.do_schedule(ResourceId(0), 0);
        assert_eq!(
            slice,
            TaskSlice {
                unit: Some(UnitId(0)),
                slice_ns: None,
                migrated: false
            }
        );
        // A blocked unit keeps its resource; the resource idles.
        assert_eq!(s.sleep(UnitId(0), MS), CpuSet::single(0));
        assert_eq!(s.do_schedule(ResourceId(0), MS), TaskSlice::IDLE);
        assert_eq!(s.assigned_unit(ResourceId(0)), Some(UnitId(0)));
        // Removing it hands the resource to the first waiter, and asks for a
        // reschedule of that resource.
        s.remove_unit(UnitId(0)).unwrap();
        assert_eq!(s.assigned_unit(ResourceId(0)), Some(UnitId(1)));
        assert_eq!(waiting(&s), [2]);
        assert_eq!(s.take_pending_tickle(), CpuSet::single(0));
        assert_eq!(s.do_schedule(ResourceId(0), 2 * MS).unit, Some(UnitId(1)));
        assert_eq!(s.stats(UnitId(1)).unwrap().dispatches, 1);
    }

    #[test]
    fn never_time_slices() {
        let mut s = Null::new();
        let mut sim = Sim::new(&mut s, &[resource(0, 0, 0), resource(1, 0, 0)]);
        let all = CpuSet::first_n(2);
        let a = sim.add(unit(0, 0, 256, all), Load::Hog);
        let b = sim.add(unit(1, 1, 256, all), Load::Hog);
        let c = sim.add(unit(2, 2, 256, all), Load::Hog);
        sim.run_until(1000 * MS);
        assert_eq!(sim.unit(a).ran_ns, 1000 * MS);
        assert_eq!(sim.unit(b).ran_ns, 1000 * MS);
        assert_eq!(sim.unit(c).ran_ns, 0, "the third waits: no time slicing");
        assert!(sim.resources.iter().all(|r| r.deadline.is_none()));
        assert_eq!(sim.dispatches, 2);
    }

    #[test]
    fn waiters_respect_affinity_and_keep_their_order() {
        let mut s = Null::new();
        s.add_resource(resource(0, 0, 0)).unwrap();
        s.add_resource(resource(1, 0, 0)).unwrap();
        let both = CpuSet::first_n(2);
        s.insert_unit(&unit(0, 0, 256, both), 0).unwrap();
        s.insert_unit(&unit(1, 1, 256, both), 0).unwrap();
        // Waiters: 2 may only use resource 1, 3 and 4 either.
        s.insert_unit(&unit(2, 2, 256, CpuSet::single(1)), 0)
            .unwrap();
        s.insert_unit(&unit(3, 3, 256, both), 0).unwrap();
        s.insert_unit(&unit(4, 4, 256, both), 0).unwrap();
        assert_eq!(waiting(&s), [2, 3, 4]);
        let r0_owner = s.assigned_unit(ResourceId(0)).unwrap();
        s.remove_unit(r0_owner).unwrap();
        assert_eq!(
            s.assigned_unit(ResourceId(0)),
            Some(UnitId(3)),
            "2 cannot use resource 0"
        );
        assert_eq!(waiting(&s), [2, 4]);
        let r1_owner = s.assigned_unit(ResourceId(1)).unwrap();
        s.remove_unit(r1_owner).unwrap();
        assert_eq!(s.assigned_unit(ResourceId(1)), Some(UnitId(2)));
        assert_eq!(waiting(&s), [4]);
        // The pending tickles come back with the next wake.
        let t = s.wake(UnitId(4), MS, WakeReason::Event);
        assert_eq!(t, CpuSet::first_n(2));
    }

    #[test]
    fn wake_of_a_waiter_takes_a_free_resource() {
        let mut s = Null::new();
        s.add_resource(resource(0, 0, 0)).unwrap();
        s.insert_unit(&unit(0, 0, 256, CpuSet::first_n(4)), 0)
            .unwrap();
        s.insert_unit(&unit(1, 1, 256, CpuSet::first_n(4)), 0)
            .unwrap();
        assert_eq!(waiting(&s), [1]);
        // A resource joins; it is handed to the waiter at once.
        s.add_resource(resource(2, 0, 0)).unwrap();
        assert_eq!(s.assigned_unit(ResourceId(2)), Some(UnitId(1)));
        assert_eq!(s.wake(UnitId(1), 0, WakeReason::New), CpuSet::single(2));
        assert_eq!(s.do_schedule(ResourceId(2), 0).unit, Some(UnitId(1)));
        // Moving unit 0 to the busy resource 2 cannot queue it behind unit 1:
        // it keeps (gets back) a free resource instead of waiting.
        s.migrate(UnitId(0), ResourceId(2), 0);
        assert_eq!(s.assigned_unit(ResourceId(0)), Some(UnitId(0)));
        assert!(waiting(&s).is_empty());
        assert_eq!(s.pick_resource(UnitId(0), 0), ResourceId(0));
    }

    #[test]
    fn pick_sibling_lends_a_waiter_of_the_leader_domain() {
        let mut s = Null::new();
        let core = ResourceInfo {
            id: ResourceId(0),
            cpus: CpuSet::first_n(2),
            socket: 0,
            cluster: 0,
            capacity: None,
            core_cpus: crate::CpuSet::new(),
        };
        s.add_resource(core).unwrap();
        for (i, domain) in [(0, 5), (1, 6), (2, 5)] {
            s.insert_unit(&unit(i, domain, 256, core.cpus), 0).unwrap();
            s.wake(UnitId(i), 0, WakeReason::New);
        }
        assert_eq!(s.do_schedule(core.id, 0).unit, Some(UnitId(0)));
        assert_eq!(
            s.pick_sibling(core.id, DomainId(6), 0),
            None,
            "other domain"
        );
        assert_eq!(s.pick_sibling(core.id, DomainId(5), 0), Some(UnitId(2)));
        assert_eq!(
            s.pick_sibling(core.id, DomainId(5), 0),
            None,
            "no spare CPU left"
        );
        assert_eq!(waiting(&s), [1, 2], "a lent waiter keeps its place");
        s.do_schedule(core.id, 4 * MS);
        assert_eq!(s.stats(UnitId(2)).unwrap().runtime_ns, 4 * MS);
    }

    #[test]
    fn error_paths() {
        let mut s = Null::new();
        let err = s.set_pool_param("tslice_ms", "1").unwrap_err();
        assert_eq!(
            err,
            SchedError::UnknownParam {
                scheduler: "null",
                valid: POOL_PARAMS
            }
        );
        assert!(format!("{err}").contains("valid: (none)"));
        let u = unit(0, 0, 256, CpuSet::single(0));
        assert_eq!(
            s.insert_unit(&u, 0),
            Err(SchedError::NoResourceInAffinity(UnitId(0)))
        );
        s.add_resource(resource(0, 0, 0)).unwrap();
        assert_eq!(
            s.add_resource(resource(0, 0, 0)),
            Err(SchedError::ResourceBusy(ResourceId(0)))
        );
        let mut bad = u;
        bad.params.weight = 0;
        assert!(matches!(
            s.insert_unit(&bad, 0),
            Err(SchedError::InvalidParam {
                param: "weight",
                ..
            })
        ));
        s.insert_unit(&u, 0).unwrap();
        assert!(s.insert_unit(&u, 0).is_err());
        let ghost = UnitId(4);
        assert_eq!(s.remove_unit(ghost), Err(SchedError::UnknownUnit(ghost)));
        assert_eq!(
            s.set_unit_params(ghost, &SchedParams::default()),
            Err(SchedError::UnknownUnit(ghost))
        );
        assert_eq!(
            s.set_affinity(ghost, CpuSet::single(0), CpuSet::new()),
            Err(SchedError::UnknownUnit(ghost))
        );
        assert_eq!(
            s.set_affinity(UnitId(0), CpuSet::single(1), CpuSet::new()),
            Err(SchedError::NoResourceInAffinity(UnitId(0)))
        );
        assert_eq!(s.stats(ghost), None);
        assert_eq!(s.do_schedule(ResourceId(3), 0), TaskSlice::IDLE);
        assert_eq!(
            s.remove_resource(ResourceId(3)),
            Err(SchedError::UnknownResource(ResourceId(3)))
        );
        s.wake(UnitId(0), 0, WakeReason::New);
        assert_eq!(s.do_schedule(ResourceId(0), 0).unit, Some(UnitId(0)));
        assert_eq!(
            s.remove_resource(ResourceId(0)),
            Err(SchedError::ResourceBusy(ResourceId(0))),
            "a unit runs there"
        );
        s.remove_unit(UnitId(0)).unwrap();
        s.remove_resource(ResourceId(0)).unwrap();
    }

    #[test]
    fn a_leaving_resource_s_idle_unit_is_placed_anew() {
        // The property test's case: the framework's migrations while a
        // resource left the pool put a unit back on the leaving resource,
        // which then refused to go; its later tickles named a resource of
        // another pool.
        let mut s = Null::new();
        for r in 0..3 {
            s.add_resource(resource(r, 0, 0)).unwrap();
        }
        let all = CpuSet::first_n(3);
        for i in 0..2 {
            s.insert_unit(&unit(i, i, 256, all), 0).unwrap();
        }
        assert_eq!(s.assigned_unit(ResourceId(0)), Some(UnitId(0)));
        s.take_pending_tickle();
        // Unit 0 is assigned to resource 0 but not running: it moves to the
        // free resource 2, which is asked to decide.
        s.remove_resource(ResourceId(0)).unwrap();
        assert_eq!(s.assigned_unit(ResourceId(2)), Some(UnitId(0)));
        assert_eq!(s.take_pending_tickle(), CpuSet::single(2));
        // With no free resource left it waits, and takes the next one freed.
        s.remove_resource(ResourceId(2)).unwrap();
        assert_eq!(waiting(&s), [0]);
        assert_eq!(s.take_pending_tickle(), CpuSet::new());
        s.remove_unit(UnitId(1)).unwrap();
        assert_eq!(s.assigned_unit(ResourceId(1)), Some(UnitId(0)));
        assert_eq!(s.take_pending_tickle(), CpuSet::single(1));
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8usize, 0..4usize).prop_map(|(u, r)| Op::Wake(u, r)),
            (0..8usize).prop_map(Op::Sleep),
            (0..8usize).prop_map(Op::Yield),
            (0..3usize, 0..3000u64).prop_map(|(r, us)| Op::Schedule(r, us)),
            (0..3usize).prop_map(Op::Sibling),
            (0..8usize).prop_map(Op::Migrate),
            (0..8usize, any::<u8>()).prop_map(|(u, m)| Op::Affinity(u, m)),
        ]
    }

    /// Checks null's own invariants: one unit per resource, inside its
    /// affinity, and no resource left free while a waiter could use it.
    fn check_assignment(s: &Null) {
        let mut seen = Vec::new();
        for r in &s.resources {
            if let Some(u) = r.assigned {
                assert!(!seen.contains(&u), "unit {} assigned twice", u.0);
                seen.push(u);
                assert_eq!(s.units[u.0 as usize].assigned, Some(r.info.id));
            } else {
                let blocked = s.waiting().any(|w| {
                    let unit = &s.units[w.0 as usize];
                    unit.allowed.contains(r.info.id.0) && unit.running_on.is_none()
                });
                assert!(
                    !blocked,
                    "resource {} free while a waiter could use it",
                    r.info.id.0
                );
            }
        }
        for w in s.waiting() {
            assert!(s.units[w.0 as usize].assigned.is_none());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn random_operations_keep_the_invariants(
            affinities in proptest::collection::vec(any::<u8>(), sim::RANDOM_UNITS),
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let mut s = Null::new();
            sim::check_random_ops(&mut s, &affinities, &ops, None);
            check_assignment(&s);
        }

        #[test]
        fn fifo_order_survives_insertions_and_removals(
            script in proptest::collection::vec((any::<bool>(), 0..12u32), 1..80),
        ) {
            let mut s = Null::new();
            s.add_resource(resource(0, 0, 0)).unwrap();
            s.add_resource(resource(1, 0, 0)).unwrap();
            let mut expected: Vec<u32> = Vec::new();
            let mut present: Vec<u32> = Vec::new();
            for (insert, id) in script {
                if insert && !present.contains(&id) {
                    s.insert_unit(&unit(id, id, 256, CpuSet::first_n(2)), 0).unwrap();
                    present.push(id);
                    if !(0..2).any(|r| s.assigned_unit(ResourceId(r)) == Some(UnitId(id))) {
                        expected.push(id);
                    }
                } else if !insert && present.contains(&id) {
                    let freed = (0..2).find(|&r| s.assigned_unit(ResourceId(r)) == Some(UnitId(id)));
                    s.remove_unit(UnitId(id)).unwrap();
                    present.retain(|&p| p != id);
                    expected.retain(|&e| e != id);
                    if let Some(r) = freed && !expected.is_empty() {
                        // The first waiter gets the freed resource.
                        let first = expected.remove(0);
                        prop_assert_eq!(s.assigned_unit(ResourceId(r)), Some(UnitId(first)));
                    }
                }
                prop_assert_eq!(waiting(&s), expected.clone());
                check_assignment(&s);
            }
        }
    }
}
