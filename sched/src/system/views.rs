//! What the system holds, read-only: pools, CPUs, domains, vCPUs, units.

use super::*;

impl System {
    /// The pools that exist.
    pub fn pools(&self) -> impl Iterator<Item = PoolId> + '_ {
        self.pools
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .map(|(i, _)| PoolId(i as u32))
    }

    /// The units that are runnable, placed on no resource and have waited
    /// `threshold_ns` or more for their turn, with how long, in pools whose
    /// scheduler promises every runnable unit a turn (not `null`, which
    /// leaves units beyond its CPUs waiting by design, nor `arinc653`, whose
    /// schedule may leave a domain out). A scheduler that loses a wake-up or
    /// a timer shows here; the hypervisor logs them.
    pub fn starving_units(&self, now: Time, threshold_ns: Time) -> Vec<(UnitId, DomainId, Time)> {
        self.units
            .iter()
            .enumerate()
            .filter_map(|(i, u)| Some((UnitId(i as u32), u.as_ref()?)))
            .filter(|(_, u)| u.runnable && u.on.is_none())
            .filter(|(_, u)| {
                self.pool(u.pool)
                    .is_ok_and(|p| !matches!(p.scheduler.name(), "null" | "arinc653"))
            })
            .map(|(id, u)| (id, u.domain, now.saturating_sub(u.since)))
            .filter(|&(_, _, waited)| waited >= threshold_ns)
            .collect()
    }

    /// One line on the state of the resources of `pool` and their CPUs, for
    /// a diagnostic (the starvation watchdog's): per resource its CPUs,
    /// deadline (relative to `now`), pending decision or switch, and what
    /// each CPU holds and is switching to.
    pub fn describe_pool(&self, pool: PoolId, now: Time) -> String {
        let mut out = String::new();
        let Ok(p) = self.pool(pool) else {
            return out;
        };
        for &master in &p.resources {
            let Some(r) = self.resources.get(master).and_then(Option::as_ref) else {
                continue;
            };
            let deadline = match r.deadline {
                Some(d) if d >= now => alloc::format!("in {} us", (d - now) / 1000),
                Some(d) => alloc::format!("{} us ago", (now - d) / 1000),
                None => "none".to_string(),
            };
            let _ = write!(
                out,
                "[cpus {}: deadline {deadline}, decide {}, switching {} (gen {}, reported {}), deferred {};",
                r.cpus, r.needs_decision, r.switching, r.generation, r.reported, r.deferred
            );
            for &cpu in &r.cpu_list {
                let c = &self.cpus[cpu];
                let _ = write!(
                    out,
                    " cpu{cpu} {:?}{}",
                    c.loaded,
                    c.switching
                        .map_or(String::new(), |s| alloc::format!("->{s:?}"))
                );
            }
            out.push_str("] ");
        }
        out
    }

    /// A pool's description.
    pub fn pool_info(&self, pool: PoolId) -> Option<PoolInfo> {
        let p = self.pool(pool).ok()?;
        Some(PoolInfo {
            id: pool,
            scheduler: p.scheduler.name(),
            granularity: p.granularity,
            placement: p.placement,
            cpus: p.cpus,
            unit_size: p.unit_size,
            domains: p.domains.len(),
        })
    }

    /// The pool of `cpu`; `None` when it is free or offline.
    pub fn pool_of_cpu(&self, cpu: usize) -> Option<PoolId> {
        self.cpus.get(cpu).and_then(|c| c.pool)
    }

    /// The online CPUs in no pool.
    pub fn free_cpus(&self) -> CpuSet {
        self.cpus
            .iter()
            .enumerate()
            .filter(|(_, c)| c.online && c.pool.is_none())
            .map(|(i, _)| i)
            .collect()
    }

    /// The online CPUs.
    pub fn online_cpus(&self) -> CpuSet {
        self.cpus
            .iter()
            .enumerate()
            .filter(|(_, c)| c.online)
            .map(|(i, _)| i)
            .collect()
    }

    /// The context `cpu` runs (as last confirmed by [`System::switch_done`]).
    pub fn cpu_context(&self, cpu: usize) -> Option<CpuContext> {
        self.cpus.get(cpu).map(|c| c.loaded)
    }

    /// The resources of a pool.
    pub fn resources(&self, pool: PoolId) -> impl Iterator<Item = ResourceView> + '_ {
        let masters: &[usize] = self
            .pool(pool)
            .map(|p| p.resources.as_slice())
            .unwrap_or(&[]);
        masters.iter().filter_map(move |&m| {
            self.resources[m].as_ref().map(|r| ResourceView {
                id: ResourceId(m),
                cpus: r.cpus,
                domain: r.domain,
                switching: r.switching,
            })
        })
    }

    /// The domains that exist.
    pub fn domains(&self) -> impl Iterator<Item = DomainId> + '_ {
        self.domains.iter().map(|d| d.id)
    }

    /// A domain's pool.
    pub fn domain_pool(&self, domain: DomainId) -> Option<PoolId> {
        self.domain(domain).ok().map(|d| d.pool)
    }

    /// A domain's vCPUs, in order.
    pub fn domain_vcpus(&self, domain: DomainId) -> Option<&[VcpuId]> {
        self.domain(domain).ok().map(|d| d.vcpus.as_slice())
    }

    /// A domain's units, in order.
    pub fn domain_units(&self, domain: DomainId) -> Option<&[UnitId]> {
        self.domain(domain).ok().map(|d| d.units.as_slice())
    }

    /// The vCPUs of a unit, in slot order.
    pub fn unit_vcpus(&self, unit: UnitId) -> Option<&[VcpuId]> {
        self.unit(unit).map(|u| u.vcpus.as_slice())
    }

    /// A vCPU's state.
    pub fn vcpu_info(&self, vcpu: VcpuId) -> Option<VcpuInfo> {
        let v = self.vcpu(vcpu)?;
        Some(VcpuInfo {
            domain: v.domain,
            index: v.index,
            unit: v.unit,
            blocked: v.blocked,
            pause_count: v.pause_count,
            test_paused: v.test_paused,
            running_on: v.running_on,
        })
    }

    /// The CPU whose context holds `vcpu` (loaded or being loaded), if any.
    pub fn vcpu_running_on(&self, vcpu: VcpuId) -> Option<usize> {
        self.vcpus
            .get(vcpu.0 as usize)
            .and_then(Option::as_ref)
            .and_then(|v| v.running_on)
    }

    /// The accounting of a unit, from its pool's scheduler.
    pub fn unit_stats(&self, unit: UnitId) -> Option<crate::scheduler::UnitStats> {
        let u = self.unit(unit)?;
        self.pool(u.pool).ok()?.scheduler.stats(unit)
    }
}
