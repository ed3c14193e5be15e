//! vCPU events: block, wake, pause, yield; the scheduler's tickles applied.

use super::*;

impl System {
    /// Re-derives a unit's runnability from its vCPUs; tells the scheduler when
    /// it changed, and kicks the CPUs whose slot contents changed.
    pub(super) fn refresh_unit(&mut self, unit: UnitId, reason: WakeReason, p: &dyn Platform) {
        let Some(u) = self.units.get(unit.0 as usize).and_then(Option::as_ref) else {
            return;
        };
        let runnable = u.vcpus.iter().any(|&v| {
            self.vcpus[v.0 as usize]
                .as_ref()
                .is_some_and(Vcpu::runnable)
        });
        let was = u.runnable;
        let pool = u.pool;
        let on = u.on;
        if runnable != was {
            let now = p.now_ns();
            if let Some(u) = self.units[unit.0 as usize].as_mut() {
                u.runnable = runnable;
                u.since = now;
            }
            if let Ok(pool) = self.pool_mut(pool) {
                let tickle = if runnable {
                    pool.scheduler.wake(unit, now, reason)
                } else {
                    pool.scheduler.sleep(unit, now)
                };
                self.apply_tickle(tickle, p);
            }
        }
        if let Some(master) = on
            && let Some(r) = self.resources[master].as_ref()
        {
            let cpus: CpuSet = r
                .slots
                .iter()
                .zip(&r.cpu_list)
                .filter(|(s, _)| s.unit == Some(unit))
                .map(|(_, &c)| c)
                .collect();
            p.kick(&cpus);
        }
    }

    pub(super) fn vcpu_changed(&mut self, vcpu: VcpuId, reason: WakeReason, p: &dyn Platform) {
        let Some(v) = self.vcpu(vcpu) else { return };
        let unit = v.unit;
        if let Some(cpu) = v.running_on {
            p.kick(&CpuSet::single(cpu));
        }
        self.refresh_unit(unit, reason, p);
    }

    /// A vCPU waits for an event (WFI, HLT, a blocking hypercall).
    pub fn vcpu_block(&mut self, vcpu: VcpuId, p: &dyn Platform) -> Result<(), SystemError> {
        self.vcpu_mut(vcpu)?.blocked = true;
        self.blocked_hints.set(vcpu, true);
        self.vcpu_changed(vcpu, WakeReason::Event, p);
        Ok(())
    }

    /// An event arrived for a vCPU (interrupt, timer, event channel). A vCPU
    /// that is not blocked is left alone: nothing about its runnability
    /// changes, so no CPU needs to decide again (delivering the event to a
    /// running vCPU is the caller's nudge, not a scheduling event).
    pub fn vcpu_wake(&mut self, vcpu: VcpuId, p: &dyn Platform) -> Result<(), SystemError> {
        let v = self.vcpu_mut(vcpu)?;
        if !v.blocked {
            return Ok(());
        }
        v.blocked = false;
        self.blocked_hints.set(vcpu, false);
        self.vcpu_changed(vcpu, WakeReason::Event, p);
        Ok(())
    }

    /// Pauses a vCPU (nestable). Never waits: the CPU holding it is kicked and
    /// switches it out on its own, while the rest of its unit keeps running.
    pub fn vcpu_pause(
        &mut self,
        vcpu: VcpuId,
        p: &dyn Platform,
    ) -> Result<PauseOutcome, SystemError> {
        let v = self.vcpu_mut(vcpu)?;
        v.pause_count += 1;
        self.vcpu_changed(vcpu, WakeReason::Unpause, p);
        Ok(match self.vcpu_running_on(vcpu) {
            Some(cpu) => PauseOutcome::Running { cpu },
            None => PauseOutcome::Stopped,
        })
    }

    /// Undoes one [`System::vcpu_pause`].
    pub fn vcpu_unpause(&mut self, vcpu: VcpuId, p: &dyn Platform) -> Result<(), SystemError> {
        let v = self.vcpu_mut(vcpu)?;
        if v.pause_count == 0 {
            return Err(SystemError::NotPaused(vcpu));
        }
        v.pause_count -= 1;
        self.vcpu_changed(vcpu, WakeReason::Unpause, p);
        Ok(())
    }

    /// Pauses every vCPU of `domain` for the toolstack (Xen's `xl pause`):
    /// one pause each, on top of any the domain holds itself (a vCPU off by
    /// PSCI `CPU_OFF` stays off after [`System::domain_unpause`]). Never
    /// waits: the CPUs running them are kicked. A second pause is refused
    /// and changes nothing.
    pub fn domain_pause(&mut self, domain: DomainId, p: &dyn Platform) -> Result<(), SystemError> {
        let d = self.domain_mut(domain)?;
        if d.controller_paused {
            return Err(SystemError::DomainPaused(domain));
        }
        d.controller_paused = true;
        for i in 0..d.vcpus.len() {
            let v = self.domain(domain)?.vcpus[i];
            self.vcpu_pause(v, p)?;
        }
        Ok(())
    }

    /// Undoes [`System::domain_pause`]; refused (nothing changes) when the
    /// toolstack did not pause it.
    pub fn domain_unpause(
        &mut self,
        domain: DomainId,
        p: &dyn Platform,
    ) -> Result<(), SystemError> {
        let d = self.domain_mut(domain)?;
        if !d.controller_paused {
            return Err(SystemError::DomainNotPaused(domain));
        }
        d.controller_paused = false;
        for i in 0..d.vcpus.len() {
            let v = self.domain(domain)?.vcpus[i];
            self.vcpu_unpause(v, p)?;
        }
        Ok(())
    }

    /// Whether the toolstack paused `domain` ([`System::domain_pause`]).
    pub fn domain_paused(&self, domain: DomainId) -> Option<bool> {
        self.domain(domain).ok().map(|d| d.controller_paused)
    }

    /// Pauses a vCPU for a test hook (`TEST_PAUSE_SIBLING`). Kept apart from
    /// [`System::vcpu_pause`]: a flag, not a count, that only
    /// [`System::vcpu_test_unpause`] clears, so a guest can never undo a
    /// pause the hypervisor holds. Never waits, as `vcpu_pause`.
    pub fn vcpu_test_pause(
        &mut self,
        vcpu: VcpuId,
        p: &dyn Platform,
    ) -> Result<PauseOutcome, SystemError> {
        let v = self.vcpu_mut(vcpu)?;
        if v.test_paused {
            return Err(SystemError::AlreadyTestPaused(vcpu));
        }
        v.test_paused = true;
        self.vcpu_changed(vcpu, WakeReason::Unpause, p);
        Ok(match self.vcpu_running_on(vcpu) {
            Some(cpu) => PauseOutcome::Running { cpu },
            None => PauseOutcome::Stopped,
        })
    }

    /// Undoes [`System::vcpu_test_pause`]; the hypervisor's own pauses stay.
    pub fn vcpu_test_unpause(&mut self, vcpu: VcpuId, p: &dyn Platform) -> Result<(), SystemError> {
        let v = self.vcpu_mut(vcpu)?;
        if !v.test_paused {
            return Err(SystemError::NotTestPaused(vcpu));
        }
        v.test_paused = false;
        self.vcpu_changed(vcpu, WakeReason::Unpause, p);
        Ok(())
    }

    /// Plants the core-scheduling fault on `cpus` (tests only: the one that
    /// proves the co-residency checker reports an overlap): these CPUs load
    /// their slot's vCPU whatever their siblings still hold, and the driver
    /// ([`crate::driver::drive`]) lets them go on from a rendezvous without
    /// waiting for the siblings. The promise of core scheduling no longer
    /// holds on their resources.
    pub fn plant_cosched_fault(&mut self, cpus: CpuSet) {
        self.cosched_broken = cpus;
    }

    /// Whether `cpu` has the core-scheduling fault planted.
    pub fn cosched_fault(&self, cpu: usize) -> bool {
        self.cosched_broken.contains(cpu)
    }

    /// A running vCPU gives up the rest of its unit's slice.
    pub fn vcpu_yield(&mut self, vcpu: VcpuId, p: &dyn Platform) -> Result<(), SystemError> {
        let unit = self.vcpu(vcpu).ok_or(SystemError::UnknownVcpu(vcpu))?.unit;
        let Some(u) = self.unit(unit) else {
            return Ok(());
        };
        let (pool, on) = (u.pool, u.on);
        let now = p.now_ns();
        self.pool_mut(pool)?.scheduler.yield_unit(unit, now);
        if let Some(master) = on
            && let Some(r) = self.resources[master].as_mut()
        {
            r.needs_decision = true;
            self.kick_resource(master, p);
        }
        Ok(())
    }

    /// Reschedules what a change without a tickle of its own left to
    /// reschedule in `pool` ([`Scheduler::take_tickle`]).
    pub(super) fn drain_tickle(&mut self, pool: PoolId, p: &dyn Platform) {
        if let Ok(pool) = self.pool_mut(pool) {
            let tickle = pool.scheduler.take_tickle();
            self.apply_tickle(tickle, p);
        }
    }

    pub(super) fn apply_tickle(&mut self, tickle: Tickle, p: &dyn Platform) {
        for master in tickle.iter() {
            if let Some(r) = self.resources.get_mut(master).and_then(Option::as_mut) {
                r.needs_decision = true;
                self.kick_resource(master, p);
            }
        }
    }
}
