//! Booting pool 0 and CPUs coming online and going offline.

use super::*;

impl System {
    /// Builds pool 0 with every online free CPU, after all CPUs are up.
    pub fn boot_pool0(
        &mut self,
        scheduler: &str,
        granularity: Granularity,
        placement: Placement,
        p: &dyn Platform,
    ) -> Result<PoolId, SystemError> {
        if !self.pools.is_empty() {
            return Err(SystemError::AlreadyBooted);
        }
        let pool = self.pool_create(scheduler, granularity, placement)?;
        let cpus = self.free_cpus();
        if let Err(e) = self.pool_add_cpus(pool, cpus, p) {
            self.pools.clear();
            return Err(e);
        }
        Ok(pool)
    }

    /// Brings a CPU online as a free CPU.
    pub fn cpu_online(&mut self, cpu: usize) -> Result<(), SystemError> {
        let info = *self.topology.cpu(cpu).ok_or(SystemError::UnknownCpu(cpu))?;
        if !info.enabled {
            return Err(SystemError::CpuOffline(cpu));
        }
        let c = &mut self.cpus[cpu];
        if c.online {
            return Err(SystemError::CpuAlreadyOnline(cpu));
        }
        if c.loaded != CpuContext::Idle || c.switching.is_some() {
            // It never finished going offline (it still holds a vCPU): that
            // vCPU must not run anywhere else until this CPU lets it go.
            return Err(SystemError::CpuNotIdle(cpu));
        }
        c.online = true;
        let _ = self
            .free
            .add_resource(resource_info(&self.topology, CpuSet::single(cpu)));
        Ok(())
    }

    /// Takes a CPU offline: its whole resource leaves its pool first (Xen patch
    /// 53/60), cancelling any rendezvous in progress there, so its siblings do
    /// not wait for it. Refused when that would strand the pool's domains.
    /// The CPU runs its driver once more to switch to idle before it stops.
    pub fn cpu_offline(&mut self, cpu: usize, p: &dyn Platform) -> Result<(), SystemError> {
        let c = self.cpus.get(cpu).ok_or(SystemError::UnknownCpu(cpu))?;
        if !c.online {
            return Err(SystemError::CpuOffline(cpu));
        }
        if let (Some(pool), Some(master)) = (c.pool, c.resource) {
            self.cancel_rendezvous(master, CancelReason::CpuOffline(cpu), p);
            let cpus = self.resources[master]
                .as_ref()
                .map_or(CpuSet::single(cpu), |r| r.cpus);
            self.pool_remove_cpus(pool, cpus, p)?;
        }
        let _ = self.free.remove_resource(ResourceId(cpu));
        self.cpus[cpu].online = false;
        p.kick(&CpuSet::single(cpu));
        Ok(())
    }

    /// Stops (`false`) or restarts scheduling everywhere (suspend, shutdown).
    /// Stopping cancels every rendezvous in progress, so no CPU waits for a
    /// sibling that is parked elsewhere (the series' shutdown hang), and makes
    /// every CPU switch to idle.
    pub fn set_active(&mut self, active: bool, p: &dyn Platform) {
        self.active = active;
        if !active {
            for master in 0..self.resources.len() {
                self.cancel_rendezvous(master, CancelReason::SchedulerStopped, p);
            }
        } else {
            for master in 0..self.resources.len() {
                if let Some(r) = self.resources[master].as_mut() {
                    r.needs_decision = true;
                }
            }
        }
        p.kick(&self.online_cpus());
    }
}
