//! Domains: their units built and dismantled, created, moved, destroyed, their affinity and parameters.

use super::*;

impl System {
    pub(super) fn build_units(
        &mut self,
        pool: PoolId,
        domain: DomainId,
        vcpus: &[VcpuId],
        params: SchedParams,
        (hard, soft): (CpuSet, CpuSet),
        now: Time,
    ) -> Result<Vec<UnitId>, SystemError> {
        let size = self.pool(pool)?.unit_size.max(1) as usize;
        let mut created: Vec<UnitId> = Vec::new();
        for (index, chunk) in vcpus.chunks(size).enumerate() {
            let id = UnitId(alloc_slot(
                &mut self.units,
                Unit {
                    domain,
                    pool,
                    vcpus: chunk.to_vec(),
                    runnable: false,
                    on: None,
                    since: 0,
                    rewake: false,
                },
            ) as u32);
            let info = UnitInfo {
                id,
                domain,
                index_in_domain: index as u32,
                vcpus: chunk.len() as u32,
                params,
                hard_affinity: hard,
                soft_affinity: soft,
            };
            let result = self.pool_mut(pool)?.scheduler.insert_unit(&info, now);
            if let Err(error) = result {
                self.units[id.0 as usize] = None;
                for undo in created {
                    if let Ok(p) = self.pool_mut(pool) {
                        let _ = p.scheduler.remove_unit(undo);
                    }
                    self.units[undo.0 as usize] = None;
                }
                return Err(SystemError::Scheduler { pool, error });
            }
            created.push(id);
        }
        Ok(created)
    }

    /// Takes a domain's units out of their pool's scheduler and off every
    /// resource; kicks the CPUs still holding its vCPUs.
    pub(super) fn dismantle_units(&mut self, units: &[UnitId], p: &dyn Platform) {
        let now = p.now_ns();
        for &id in units {
            let Some(unit) = self.units[id.0 as usize].take() else {
                continue;
            };
            if unit.rewake {
                self.pending_rewakes = self.pending_rewakes.saturating_sub(1);
            }
            if let Some(master) = unit.on
                && let Some(r) = self.resources[master].as_mut()
            {
                for slot in r.slots.iter_mut().filter(|s| s.unit == Some(id)) {
                    *slot = Slot::default();
                }
                r.needs_decision = true;
                self.kick_resource(master, p);
            }
            if let Ok(pool) = self.pool_mut(unit.pool) {
                if unit.runnable {
                    let _ = pool.scheduler.sleep(id, now);
                }
                if let Err(error) = pool.scheduler.remove_unit(id) {
                    let pool = unit.pool;
                    self.record(Diagnostic::SchedulerError { pool, error });
                }
            }
            // Its resource may have gone to a waiting unit (null).
            self.drain_tickle(unit.pool, p);
            for &v in &unit.vcpus {
                if let Some(cpu) = self.vcpus[v.0 as usize].as_ref().and_then(|v| v.running_on) {
                    p.kick(&CpuSet::single(cpu));
                }
            }
        }
    }

    /// Creates a domain with `vcpus` vCPUs in `pool`; its vCPUs start blocked
    /// (call [`System::vcpu_wake`] to start them).
    pub fn domain_create(
        &mut self,
        pool: PoolId,
        vcpus: u32,
        params: SchedParams,
        p: &dyn Platform,
    ) -> Result<DomainId, SystemError> {
        self.pool(pool)?;
        if vcpus == 0 {
            return Err(SystemError::NoVcpus);
        }
        let live = self.vcpus.iter().filter(|v| v.is_some()).count();
        if live + vcpus as usize > MAX_VCPUS {
            return Err(SystemError::TooManyVcpus { requested: vcpus });
        }
        let id = DomainId(self.next_domain);
        let now = p.now_ns();
        // Reserve vCPU slots (bound to a placeholder unit until units exist).
        let mut ids = Vec::with_capacity(vcpus as usize);
        for index in 0..vcpus {
            let vcpu = Vcpu {
                domain: id,
                index,
                unit: UnitId(u32::MAX),
                blocked: true,
                pause_count: 0,
                test_paused: false,
                running_on: None,
                dead: false,
            };
            let vcpu_id = VcpuId(alloc_slot(&mut self.vcpus, vcpu) as u32);
            self.blocked_hints.set(vcpu_id, true);
            ids.push(vcpu_id);
        }
        let all = CpuSet::first_n(self.topology.len());
        let units = match self.build_units(pool, id, &ids, params, (all, all), now) {
            Ok(units) => units,
            Err(e) => {
                for v in &ids {
                    self.vcpus[v.0 as usize] = None;
                }
                return Err(e);
            }
        };
        self.bind_vcpus(&units);
        self.next_domain += 1;
        self.domains.push(Domain {
            id,
            pool,
            vcpus: ids,
            units,
            params,
            hard_affinity: all,
            soft_affinity: all,
            controller_paused: false,
        });
        self.pool_mut(pool)?.domains.push(id);
        Ok(id)
    }

    /// A domain's scheduling parameters.
    pub fn domain_params(&self, domain: DomainId) -> Option<SchedParams> {
        self.domain(domain).ok().map(|d| d.params)
    }

    /// A domain's hard and soft affinity.
    pub fn domain_affinity(&self, domain: DomainId) -> Option<(CpuSet, CpuSet)> {
        let d = self.domain(domain).ok()?;
        Some((d.hard_affinity, d.soft_affinity))
    }

    /// Sets a domain's affinity with Xen's meaning: its vCPUs never run
    /// outside `hard`, and prefer `soft` (empty: no preference) when the
    /// scheduler has a choice. `hard` must hold a CPU of the domain's pool.
    /// Takes effect at once: each runnable unit is taken off its queue (and
    /// its CPU, if it runs outside `hard`) and placed again, as a wake-up
    /// after a migration.
    pub fn domain_set_affinity(
        &mut self,
        domain: DomainId,
        hard: CpuSet,
        soft: CpuSet,
        p: &dyn Platform,
    ) -> Result<(), SystemError> {
        let (pool, units) = {
            let d = self.domain(domain)?;
            (d.pool, d.units.clone())
        };
        if !hard.intersects(&self.pool(pool)?.cpus) {
            return Err(SystemError::AffinityOutsidePool { domain, pool });
        }
        let soft = if soft.is_empty() {
            CpuSet::first_n(self.topology.len())
        } else {
            soft
        };
        let now = p.now_ns();
        for &unit in &units {
            let Some(u) = self.unit(unit) else {
                continue;
            };
            let (runnable, on) = (u.runnable, u.on);
            // Running where the new affinity forbids: it sleeps now (its
            // resource decides again) and wakes once it has left.
            let evicted = on.is_some_and(|master| {
                self.resources[master]
                    .as_ref()
                    .is_some_and(|r| !hard.intersects(&r.cpus))
            });
            if runnable && (evicted || on.is_none()) {
                let tickle = self.pool_mut(pool)?.scheduler.sleep(unit, now);
                self.apply_tickle(tickle, p);
            }
            let result = self
                .pool_mut(pool)?
                .scheduler
                .set_affinity(unit, hard, soft);
            self.drain_tickle(pool, p);
            if runnable && evicted {
                if let Some(u) = self.units[unit.0 as usize].as_mut()
                    && !u.rewake
                {
                    u.rewake = true;
                    self.pending_rewakes += 1;
                }
            } else if runnable && on.is_none() {
                let tickle = self
                    .pool_mut(pool)?
                    .scheduler
                    .wake(unit, now, WakeReason::Migration);
                self.apply_tickle(tickle, p);
            }
            result.map_err(|error| SystemError::Scheduler { pool, error })?;
        }
        if let Ok(d) = self.domain_mut(domain) {
            d.hard_affinity = hard;
            d.soft_affinity = soft;
        }
        Ok(())
    }

    pub(super) fn bind_vcpus(&mut self, units: &[UnitId]) {
        for &u in units {
            let vcpus = self.units[u.0 as usize]
                .as_ref()
                .map(|u| u.vcpus.clone())
                .unwrap_or_default();
            for v in vcpus {
                if let Some(vcpu) = self.vcpus[v.0 as usize].as_mut() {
                    vcpu.unit = u;
                }
            }
        }
    }

    /// Wakes (as [`WakeReason::New`]) every unit of `units` with a runnable vCPU.
    pub(super) fn wake_units(&mut self, units: &[UnitId], p: &dyn Platform) {
        for &u in units {
            self.refresh_unit(u, WakeReason::New, p);
        }
    }

    /// Destroys a domain. Its vCPUs leave every CPU (the CPUs holding them are
    /// kicked; a vCPU's slot is freed once its CPU has switched away), even when
    /// one of its units is in the middle of a rendezvous.
    pub fn domain_destroy(
        &mut self,
        domain: DomainId,
        p: &dyn Platform,
    ) -> Result<(), SystemError> {
        let index = self
            .domains
            .iter()
            .position(|d| d.id == domain)
            .ok_or(SystemError::UnknownDomain(domain))?;
        let d = self.domains.remove(index);
        self.dismantle_units(&d.units, p);
        for v in &d.vcpus {
            let slot = &mut self.vcpus[v.0 as usize];
            if let Some(vcpu) = slot.as_mut() {
                vcpu.dead = true;
                if vcpu.running_on.is_none() {
                    *slot = None;
                }
            }
        }
        if let Ok(pool) = self.pool_mut(d.pool) {
            pool.domains.retain(|&x| x != domain);
        }
        Ok(())
    }

    /// Moves a domain to another pool, regrouping its vCPUs into that pool's
    /// unit size. If the target scheduler refuses, nothing changes.
    pub fn domain_move(
        &mut self,
        domain: DomainId,
        to: PoolId,
        p: &dyn Platform,
    ) -> Result<(), SystemError> {
        self.pool(to)?;
        let (from, vcpus, old_units, params, mut affinity) = {
            let d = self.domain(domain)?;
            let affinity = (d.hard_affinity, d.soft_affinity);
            (d.pool, d.vcpus.clone(), d.units.clone(), d.params, affinity)
        };
        if from == to {
            return Ok(());
        }
        // Xen breaks an affinity the new pool cannot honour rather than
        // refuse the move (the domain would run nowhere).
        let broken = !affinity.0.intersects(&self.pool(to)?.cpus);
        if broken {
            let all = CpuSet::first_n(self.topology.len());
            affinity = (all, all);
        }
        let now = p.now_ns();
        let new_units = self.build_units(to, domain, &vcpus, params, affinity, now)?;
        self.dismantle_units(&old_units, p);
        self.bind_vcpus(&new_units);
        if let Ok(pool) = self.pool_mut(from) {
            pool.domains.retain(|&x| x != domain);
        }
        self.pool_mut(to)?.domains.push(domain);
        if let Ok(d) = self.domain_mut(domain) {
            d.pool = to;
            d.units = new_units.clone();
            (d.hard_affinity, d.soft_affinity) = affinity;
        }
        if broken {
            self.record(Diagnostic::AffinityBroken { domain, pool: to });
        }
        self.wake_units(&new_units, p);
        Ok(())
    }

    /// Changes a domain's scheduling parameters (checked by its scheduler).
    pub fn domain_set_params(
        &mut self,
        domain: DomainId,
        params: SchedParams,
    ) -> Result<(), SystemError> {
        let (pool, units) = {
            let d = self.domain(domain)?;
            (d.pool, d.units.clone())
        };
        let scheduler = &mut self.pool_mut(pool)?.scheduler;
        for &u in &units {
            scheduler
                .set_unit_params(u, &params)
                .map_err(|error| SystemError::Scheduler { pool, error })?;
        }
        if let Ok(d) = self.domain_mut(domain) {
            d.params = params;
        }
        Ok(())
    }
}
