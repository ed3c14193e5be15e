//! The framework's invariants, checked after every step by the tests.

use super::*;

impl System {
    /// Checks the framework's invariants: every online CPU in exactly one pool
    /// or free; resources partition their pools; no unit on two resources; no
    /// vCPU on two CPUs; no resource holding two domains; no vCPU lost. For
    /// tests, the lab and debug builds.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mut in_pools = CpuSet::new();
        for (index, pool) in self.pools.iter().enumerate() {
            let Some(pool) = pool else { continue };
            if pool.cpus.intersects(&in_pools) {
                let cpu = pool.cpus.intersection(&in_pools).first().unwrap_or(0);
                return Err(InvariantViolation::CpuPlacement { cpu });
            }
            in_pools = in_pools.union(&pool.cpus);
            let mut covered = CpuSet::new();
            for &m in &pool.resources {
                let Some(r) = self.resources[m].as_ref() else {
                    return Err(InvariantViolation::ResourceMembership {
                        resource: ResourceId(m),
                    });
                };
                if r.pool.0 as usize != index
                    || !r.cpus.is_subset(&pool.cpus)
                    || r.cpus.intersects(&covered)
                {
                    return Err(InvariantViolation::ResourceMembership {
                        resource: ResourceId(m),
                    });
                }
                covered = covered.union(&r.cpus);
            }
            if covered != pool.cpus {
                let cpu = pool.cpus.difference(&covered).first().unwrap_or(0);
                return Err(InvariantViolation::CpuPlacement { cpu });
            }
        }
        for (cpu, c) in self.cpus.iter().enumerate() {
            let pooled = in_pools.contains(cpu);
            let ok = match c.pool {
                Some(p) => c.online && pooled && self.pool(p).is_ok_and(|p| p.cpus.contains(cpu)),
                None => !pooled,
            };
            if !ok {
                return Err(InvariantViolation::CpuPlacement { cpu });
            }
        }
        // Units on at most one resource.
        let mut seen_on: Vec<Option<usize>> = alloc::vec![None; self.units.len()];
        for (m, r) in self.resources.iter().enumerate() {
            let Some(r) = r else { continue };
            for slot in &r.slots {
                if let Some(u) = slot.unit {
                    let entry = seen_on.get_mut(u.0 as usize);
                    match entry {
                        Some(Some(other)) if *other != m => {
                            return Err(InvariantViolation::UnitOnTwoResources { unit: u });
                        }
                        Some(e) => *e = Some(m),
                        None => return Err(InvariantViolation::UnitOnTwoResources { unit: u }),
                    }
                }
            }
            // Security: one domain per resource at any moment.
            let mut domain: Option<DomainId> = None;
            for &cpu in &r.cpu_list {
                for ctx in [self.cpus[cpu].loaded, self.cpus[cpu].holding()] {
                    if let Some(d) = self.domain_of(ctx) {
                        match domain {
                            Some(first) if first != d => {
                                return Err(InvariantViolation::DomainsShareResource {
                                    resource: ResourceId(m),
                                    first,
                                    second: d,
                                });
                            }
                            _ => domain = Some(d),
                        }
                    }
                }
            }
        }
        // vCPUs on at most one CPU, matching their bookkeeping.
        let mut holder: Vec<Option<usize>> = alloc::vec![None; self.vcpus.len()];
        for (cpu, c) in self.cpus.iter().enumerate() {
            for ctx in [c.loaded, c.holding()] {
                if let Some(v) = ctx.vcpu() {
                    let entry = holder
                        .get_mut(v.0 as usize)
                        .ok_or(InvariantViolation::VcpuOnTwoCpus { vcpu: v })?;
                    if entry.is_some_and(|other| other != cpu) {
                        return Err(InvariantViolation::VcpuOnTwoCpus { vcpu: v });
                    }
                    *entry = Some(cpu);
                    let recorded = self.vcpus[v.0 as usize].as_ref().and_then(|x| x.running_on);
                    if recorded.is_some_and(|r| r != cpu)
                        || recorded.is_none() && c.holding() == ctx
                    {
                        return Err(InvariantViolation::VcpuOnTwoCpus { vcpu: v });
                    }
                }
            }
        }
        // Nothing lost.
        let mut counted = 0usize;
        for d in &self.domains {
            let lost = InvariantViolation::LostVcpu { domain: d.id };
            let pool = self.pool(d.pool).map_err(|_| lost)?;
            if !pool.domains.contains(&d.id) {
                return Err(lost);
            }
            let mut from_units = 0usize;
            for &u in &d.units {
                let unit = self.unit(u).ok_or(lost)?;
                if unit.domain != d.id
                    || unit.pool != d.pool
                    || unit.vcpus.len() > pool.unit_size as usize
                {
                    return Err(lost);
                }
                for &v in &unit.vcpus {
                    let vcpu = self.vcpu(v).ok_or(lost)?;
                    if vcpu.unit != u || vcpu.domain != d.id || !d.vcpus.contains(&v) {
                        return Err(lost);
                    }
                    from_units += 1;
                }
            }
            if from_units != d.vcpus.len() {
                return Err(lost);
            }
            counted += from_units;
        }
        let live = self.vcpus.iter().flatten().filter(|v| !v.dead).count();
        if live != counted {
            let domain = self
                .vcpus
                .iter()
                .flatten()
                .find(|v| !v.dead)
                .map_or(DomainId(0), |v| v.domain);
            return Err(InvariantViolation::LostVcpu { domain });
        }
        let units_live = self.units.iter().flatten().count();
        let units_owned: usize = self.domains.iter().map(|d| d.units.len()).sum();
        if units_live != units_owned {
            return Err(InvariantViolation::LostVcpu {
                domain: DomainId(0),
            });
        }
        Ok(())
    }
}
