//! The minimal scheduler of free CPUs (those in no cpupool), as patch 54/60 of
//! the Xen series: one instance, one state for all free CPUs (patch 51/60's
//! single lock: the system's), and it only ever picks idle.

use crate::cpuset::CpuSet;
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};

/// Picks idle for every free CPU; holds no unit, ever.
#[derive(Debug, Default)]
pub struct IdleScheduler {
    cpus: CpuSet,
}

impl IdleScheduler {
    /// The free-CPU scheduler with no CPU.
    pub const fn new() -> Self {
        Self {
            cpus: CpuSet::new(),
        }
    }

    /// The CPUs it currently runs (the free CPUs).
    pub fn cpus(&self) -> CpuSet {
        self.cpus
    }
}

impl Scheduler for IdleScheduler {
    fn name(&self) -> &'static str {
        "idle"
    }

    fn set_pool_param(&mut self, _key: &str, _value: &str) -> Result<(), SchedError> {
        Err(SchedError::UnknownParam {
            scheduler: "idle",
            valid: "(none)",
        })
    }

    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError> {
        self.cpus = self.cpus.union(&info.cpus);
        Ok(())
    }

    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError> {
        if !self.cpus.contains(id.0) {
            return Err(SchedError::UnknownResource(id));
        }
        self.cpus.remove(id.0);
        Ok(())
    }

    fn insert_unit(&mut self, _info: &UnitInfo, _now: Time) -> Result<ResourceId, SchedError> {
        Err(SchedError::Full)
    }

    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError> {
        Err(SchedError::UnknownUnit(unit))
    }

    fn wake(&mut self, _unit: UnitId, _now: Time, _reason: WakeReason) -> Tickle {
        Tickle::new()
    }

    fn sleep(&mut self, _unit: UnitId, _now: Time) -> Tickle {
        Tickle::new()
    }

    fn yield_unit(&mut self, _unit: UnitId, _now: Time) {}

    fn pick_resource(&mut self, _unit: UnitId, _now: Time) -> ResourceId {
        ResourceId(self.cpus.first().unwrap_or(0))
    }

    fn migrate(&mut self, _unit: UnitId, _to: ResourceId, _now: Time) {}

    fn do_schedule(&mut self, _resource: ResourceId, _now: Time) -> TaskSlice {
        TaskSlice::IDLE
    }

    fn pick_sibling(
        &mut self,
        _resource: ResourceId,
        _domain: DomainId,
        _now: Time,
    ) -> Option<UnitId> {
        None
    }

    fn set_unit_params(&mut self, unit: UnitId, _params: &SchedParams) -> Result<(), SchedError> {
        Err(SchedError::UnknownUnit(unit))
    }

    fn set_affinity(
        &mut self,
        unit: UnitId,
        _hard: CpuSet,
        _soft: CpuSet,
    ) -> Result<(), SchedError> {
        Err(SchedError::UnknownUnit(unit))
    }

    fn stats(&self, _unit: UnitId) -> Option<UnitStats> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ever_picks_idle_and_takes_no_unit() {
        let mut idle = IdleScheduler::new();
        let info = ResourceInfo {
            id: ResourceId(3),
            cpus: CpuSet::single(3),
            socket: 0,
            cluster: 0,
            capacity: None,
            core_cpus: crate::CpuSet::new(),
        };
        idle.add_resource(info).unwrap();
        assert_eq!(idle.do_schedule(ResourceId(3), 5), TaskSlice::IDLE);
        let unit = UnitInfo {
            id: UnitId(0),
            domain: DomainId(1),
            index_in_domain: 0,
            vcpus: 1,
            params: SchedParams::default(),
            hard_affinity: CpuSet::single(3),
            soft_affinity: CpuSet::single(3),
        };
        assert_eq!(idle.insert_unit(&unit, 0), Err(SchedError::Full));
        assert_eq!(idle.remove_resource(ResourceId(3)), Ok(()));
        assert_eq!(
            idle.remove_resource(ResourceId(3)),
            Err(SchedError::UnknownResource(ResourceId(3)))
        );
    }
}
