//! Cpupools: created, destroyed, parameters, CPUs added and removed.

use super::*;

impl System {
    /// Creates an empty pool with the named scheduler.
    pub fn pool_create(
        &mut self,
        scheduler: &str,
        granularity: Granularity,
        placement: Placement,
    ) -> Result<PoolId, SystemError> {
        let slot = self
            .pools
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.pools.len());
        // A privileged guest's POOL_OP loop must not exhaust the heap (an
        // allocation failure under the scheduler lock would stop every CPU).
        if slot >= MAX_POOLS {
            return Err(SystemError::TooManyPools);
        }
        let id = PoolId(slot as u32);
        let scheduler = (self.factory)(scheduler)
            .map_err(|error| SystemError::Scheduler { pool: id, error })?;
        let unit_size = match placement {
            Placement::Spread => 1,
            Placement::Fixed => self
                .topology
                .groups(&self.topology.enabled(), granularity)
                .iter()
                .map(CpuSet::len)
                .min()
                .unwrap_or(1)
                .max(1) as u32,
        };
        let pool = Pool {
            scheduler,
            granularity,
            placement,
            unit_size,
            cpus: CpuSet::new(),
            resources: Vec::new(),
            domains: Vec::new(),
        };
        let slot = id.0 as usize;
        if slot == self.pools.len() {
            self.pools.push(Some(pool));
        } else {
            self.pools[slot] = Some(pool);
        }
        Ok(id)
    }

    /// Destroys an empty pool; its CPUs become free. Pool 0 stays.
    pub fn pool_destroy(&mut self, pool: PoolId, p: &dyn Platform) -> Result<(), SystemError> {
        let info = self.pool(pool)?;
        if pool.0 == 0 {
            return Err(SystemError::CannotDestroyPool0);
        }
        if !info.domains.is_empty() {
            return Err(SystemError::PoolNotEmpty {
                pool,
                domains: info.domains.len(),
            });
        }
        let cpus = info.cpus;
        if !cpus.is_empty() {
            self.pool_remove_cpus(pool, cpus, p)?;
        }
        self.pools[pool.0 as usize] = None;
        Ok(())
    }

    /// Has every resource of `pool` decide again now (after a parameter
    /// change that may change who runs where: an arinc653 schedule, a
    /// ratelimit): each is marked and kicked.
    pub fn pool_reschedule(&mut self, pool: PoolId, p: &dyn Platform) -> Result<(), SystemError> {
        let masters = self.pool(pool)?.resources.clone();
        for master in masters {
            if let Some(r) = self.resources.get_mut(master).and_then(Option::as_mut) {
                r.needs_decision = true;
                self.kick_resource(master, p);
            }
        }
        Ok(())
    }

    /// Sets a pool-wide scheduler parameter.
    pub fn pool_set_param(
        &mut self,
        pool: PoolId,
        key: &str,
        value: &str,
    ) -> Result<(), SystemError> {
        self.pool_mut(pool)?
            .scheduler
            .set_pool_param(key, value)
            .map_err(|error| SystemError::Scheduler { pool, error })
    }

    /// Adds free CPUs to a pool. At core/cluster/socket granularity `cpus` must
    /// hold whole resources; the error names the missing CPUs.
    pub fn pool_add_cpus(
        &mut self,
        pool: PoolId,
        cpus: CpuSet,
        p: &dyn Platform,
    ) -> Result<(), SystemError> {
        let granularity = self.pool(pool)?.granularity;
        let mut needed = CpuSet::new();
        for cpu in cpus.iter() {
            let c = self.cpus.get(cpu).ok_or(SystemError::UnknownCpu(cpu))?;
            if !c.online {
                return Err(SystemError::CpuOffline(cpu));
            }
            if let Some(other) = c.pool {
                return Err(SystemError::CpuNotFree { cpu, pool: other });
            }
            needed = needed.union(
                &self
                    .topology
                    .siblings(cpu, granularity)
                    .intersection(&self.online_cpus()),
            );
        }
        let missing = needed.difference(&cpus);
        if !missing.is_empty() {
            return Err(SystemError::IncompleteResource {
                granularity,
                missing,
            });
        }
        let groups = self.topology.groups(&cpus, granularity);
        if let Some(big) = groups.iter().find(|g| g.len() > MAX_RESOURCE_CPUS) {
            return Err(SystemError::ResourceTooLarge { cpus: *big });
        }
        // A unit's vCPUs must all fit: a core with a thread offline cannot take
        // 2-vCPU units (Xen likewise refuses SMT changes under core scheduling).
        let unit_size = self.pool(pool)?.unit_size as usize;
        if let Some(small) = groups.iter().find(|g| g.len() < unit_size) {
            return Err(SystemError::ResourceTooSmall {
                cpus: *small,
                unit_size: unit_size as u32,
            });
        }
        // Tell the scheduler first, so a refusal changes nothing.
        for (done, group) in groups.iter().enumerate() {
            let info = resource_info(&self.topology, *group);
            let scheduler = &mut self.pool_mut(pool)?.scheduler;
            if let Err(error) = scheduler.add_resource(info) {
                for undo in &groups[..done] {
                    let _ = scheduler.remove_resource(ResourceId(undo.first().unwrap_or(0)));
                }
                return Err(SystemError::Scheduler { pool, error });
            }
        }
        for group in &groups {
            let master = group.first().unwrap_or(0);
            let cpu_list: Vec<usize> = group.iter().collect();
            for (slot, &cpu) in cpu_list.iter().enumerate() {
                let _ = self.free.remove_resource(ResourceId(cpu));
                let c = &mut self.cpus[cpu];
                c.pool = Some(pool);
                c.resource = Some(master);
                c.slot = slot;
            }
            self.resources[master] = Some(Resource {
                pool,
                cpus: *group,
                slots: alloc::vec![Slot::default(); cpu_list.len()],
                cpu_list,
                domain: None,
                needs_decision: true,
                deadline: None,
                switching: false,
                generation: 0,
                expected: CpuSet::new(),
                reported: CpuSet::new(),
                deferred: CpuSet::new(),
            });
            let pool = self.pool_mut(pool)?;
            pool.resources.push(master);
            pool.cpus = pool.cpus.union(group);
        }
        p.kick(&cpus);
        Ok(())
    }

    /// Removes whole resources from a pool: their units move to the pool's
    /// other resources first; any rendezvous there is cancelled. Refused when
    /// the pool's domains would have no CPU left.
    pub fn pool_remove_cpus(
        &mut self,
        pool: PoolId,
        cpus: CpuSet,
        p: &dyn Platform,
    ) -> Result<(), SystemError> {
        let info = self.pool(pool)?;
        if let Some(cpu) = cpus.difference(&info.cpus).first() {
            return Err(SystemError::CpuNotInPool { cpu, pool });
        }
        let mut missing = CpuSet::new();
        let mut removed = Vec::new();
        for &master in &info.resources {
            if let Some(r) = self.resources[master].as_ref()
                && r.cpus.intersects(&cpus)
            {
                missing = missing.union(&r.cpus.difference(&cpus));
                removed.push(master);
            }
        }
        if !missing.is_empty() {
            return Err(SystemError::IncompleteResource {
                granularity: info.granularity,
                missing,
            });
        }
        if info.cpus.difference(&cpus).is_empty() && !info.domains.is_empty() {
            return Err(SystemError::WouldStrandDomains {
                pool,
                domains: info.domains.len(),
            });
        }
        let now = p.now_ns();
        let remaining: Vec<usize> = info
            .resources
            .iter()
            .copied()
            .filter(|m| !removed.contains(m))
            .collect();
        for &master in &removed {
            self.cancel_rendezvous(master, CancelReason::ResourceRemoved, p);
            self.clear_slots(master, now);
        }
        // Move every unit not running on a remaining resource: put the runnable
        // ones to sleep, let the scheduler drop what runs on the leaving
        // resources (do_schedule until idle, bounded), then migrate them all.
        let mut moved = Vec::new();
        let mut movable = Vec::new();
        for index in 0..self.units.len() {
            let Some(unit) = self.units[index].as_ref() else {
                continue;
            };
            if unit.pool != pool || unit.on.is_some_and(|m| remaining.contains(&m)) {
                continue;
            }
            let id = UnitId(index as u32);
            movable.push(id);
            if unit.runnable {
                let _ = self.pool_mut(pool)?.scheduler.sleep(id, now);
                moved.push(id);
            }
        }
        let bound = self.units.len() + 2;
        for &master in &removed {
            for _ in 0..bound {
                let scheduler = &mut self.pool_mut(pool)?.scheduler;
                let Some(extra) = scheduler.do_schedule(ResourceId(master), now).unit else {
                    break;
                };
                let _ = scheduler.sleep(extra, now);
                if !movable.contains(&extra) {
                    movable.push(extra);
                    moved.push(extra);
                }
            }
        }
        for &id in &movable {
            let scheduler = &mut self.pool_mut(pool)?.scheduler;
            let mut target = scheduler.pick_resource(id, now);
            if !remaining.contains(&target.0) {
                target = ResourceId(remaining.first().copied().unwrap_or(target.0));
            }
            scheduler.migrate(id, target, now);
        }
        for &master in &removed {
            let result = self
                .pool_mut(pool)?
                .scheduler
                .remove_resource(ResourceId(master));
            if let Err(error) = result {
                self.record(Diagnostic::SchedulerError { pool, error });
            }
            let Some(r) = self.resources[master].take() else {
                continue;
            };
            for &cpu in &r.cpu_list {
                let c = &mut self.cpus[cpu];
                c.pool = None;
                c.resource = None;
                c.slot = 0;
                if c.online {
                    let _ = self
                        .free
                        .add_resource(resource_info(&self.topology, CpuSet::single(cpu)));
                }
            }
            p.set_timer(master, None);
            p.kick(&r.cpus);
        }
        let info = self.pool_mut(pool)?;
        info.cpus = info.cpus.difference(&cpus);
        info.resources.retain(|m| !removed.contains(m));
        for id in moved {
            let tickle = self
                .pool_mut(pool)?
                .scheduler
                .wake(id, now, WakeReason::Migration);
            self.apply_tickle(tickle, p);
        }
        self.drain_tickle(pool, p);
        Ok(())
    }
}
