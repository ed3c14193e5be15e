//! The scheduling framework: CPUs, cpupools, sched resources, domains, vCPUs
//! and units, and the per-CPU event handlers that drive synchronised switching.
//!
//! # Model
//!
//! * Every online CPU is in exactly one **cpupool** or is **free**. Free CPUs
//!   share one [`IdleScheduler`] (one state, under the system's lock) that only
//!   ever picks idle.
//! * A pool has a scheduler instance (chosen by name through the
//!   [`SchedulerFactory`]), a [`Granularity`] and a [`Placement`]. Its CPUs are
//!   grouped into **sched resources** ([`Topology::groups`]); CPUs join and
//!   leave a pool by whole resources.
//! * A **domain** lives in one pool; its vCPUs are grouped into **units**:
//!   with [`Placement::Fixed`] (Xen's behaviour) a unit holds as many vCPUs as a
//!   resource has CPUs (the smallest resource at that granularity), vCPU *i* in
//!   slot *i*; a unit with fewer vCPUs than CPUs leaves the spare CPUs idle.
//!   With [`Placement::Spread`] each unit holds one vCPU. The vCPU→unit mapping
//!   is fixed while the domain stays in its pool; a move regroups it.
//!
//! # Spread placement
//!
//! Reference 003 shows fixed core scheduling packing the 4 busy vCPUs of a
//! guest onto 2 cores (two 2-vCPU units) while 2 cores idle. In spread mode a
//! decision on a resource asks the scheduler for a *leader* unit
//! ([`Scheduler::do_schedule`]) and fills the resource's other CPUs with
//! [`Scheduler::pick_sibling`] units *of the leader's domain only* (else idle).
//! So a domain's runnable vCPUs run one per core while cores are free (the
//! schedulers' `pick_resource` prefers fully idle resources) and share a core
//! only when every core is busy — and, by construction, no resource ever runs
//! two domains at once. The framework re-checks every unit a scheduler returns
//! (pool, domain, not already placed) and logs a [`Diagnostic`] if it must
//! reject one.
//!
//! # Switching
//!
//! A decision stores the resource's new plan (one slot per CPU) under the lock.
//! If some CPU of the resource still holds a context of another domain, the
//! decision opens a **rendezvous** ([`crate::rendezvous`]) and kicks the
//! siblings. Each CPU first switches to idle (saving its guest context and
//! releasing its vCPU — so nobody ever waits for a vCPU that is parked in a
//! barrier), then arrives and waits, outside the lock and bounded. When all
//! arrived, each CPU asks for its slot's vCPU (or idle). A CPU only ever loads a
//! vCPU if every other CPU of its resource holds idle or the same domain, which
//! is checked under the lock on every load: the security property does not
//! depend on timing. A wait past its bound aborts the rendezvous: arrived CPUs
//! go idle, the missing CPUs are reported, and the resource retries later.
//!
//! Per-vCPU ownership (`running_on`) means a vCPU is loaded on at most one CPU:
//! a CPU whose slot names a vCPU still held elsewhere stays idle and is kicked
//! when it is released. Pausing a vCPU kicks only the CPU holding it, which
//! switches it out alone; the paused vCPU's unit keeps running (the Xen series'
//! first crash: `vcpu_pause` of a sibling waiting forever for its own unit).
//!
//! # Locking
//!
//! `System` is plain `&mut self` code; the hypervisor keeps it in one spinlock
//! (one lock for everything, as the free CPUs already share one in Xen), and
//! only the rendezvous wait runs outside it. [`crate::driver::drive`] is the
//! per-CPU loop around it. No event handler allocates.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::cpuset::CpuSet;
use crate::error::{CancelReason, Diagnostic, InvariantViolation, SystemError};
use crate::granularity::Granularity;
use crate::idle::IdleScheduler;
use crate::platform::{CpuContext, Platform};
use crate::rendezvous::{MAX_RESOURCE_CPUS, Outcome, RendezvousTable, Ticket};
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, Tickle, Time, UnitId,
    UnitInfo, WakeReason,
};
use crate::topology::Topology;
use crate::unit::{PauseOutcome, Placement, PoolId, PoolInfo, ResourceView, VcpuId, VcpuInfo};

/// Builds a scheduler by name (normally [`crate::schedulers::create`]).
pub type SchedulerFactory = fn(&str) -> Result<Box<dyn Scheduler>, SchedError>;

/// The most vCPUs the system holds at once.
pub const MAX_VCPUS: usize = 1 << 16;

const DIAGNOSTIC_RING: usize = 32;

/// Tunables of the framework.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemConfig {
    /// How long a CPU waits for its siblings in a rendezvous before it gives up,
    /// reports the missing CPUs and falls back to idle, in ns.
    pub rendezvous_timeout_ns: Time,
    /// After an aborted rendezvous, how long the resource idles before it
    /// decides again, in ns.
    pub retry_delay_ns: Time,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            rendezvous_timeout_ns: 1_000_000,
            retry_delay_ns: 1_000_000,
        }
    }
}

/// What a CPU must do next, returned by every per-CPU event handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Return to the context already loaded.
    Resume,
    /// Call [`Platform::switch_to`] with this context, then
    /// [`System::switch_done`].
    Switch(CpuContext),
    /// Release the lock, wait at the rendezvous
    /// ([`RendezvousTable::wait`]), then call [`System::rendezvous_done`].
    Rendezvous(Ticket),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    unit: Option<UnitId>,
    vcpu: Option<VcpuId>,
}

#[derive(Debug)]
struct Cpu {
    online: bool,
    pool: Option<PoolId>,
    /// Master CPU of its resource, when in a pool.
    resource: Option<usize>,
    /// Its position in the resource's slots.
    slot: usize,
    /// The context it runs (confirmed by `switch_done`).
    loaded: CpuContext,
    /// A switch handed out and not yet confirmed.
    switching: Option<CpuContext>,
}

impl Cpu {
    fn holding(&self) -> CpuContext {
        self.switching.unwrap_or(self.loaded)
    }

    /// Both contexts a CPU may be executing: until its switch is confirmed it
    /// still runs the old one.
    fn contexts(&self) -> [CpuContext; 2] {
        [self.loaded, self.holding()]
    }
}

#[derive(Debug)]
struct Resource {
    pool: PoolId,
    cpus: CpuSet,
    cpu_list: Vec<usize>,
    slots: Vec<Slot>,
    domain: Option<DomainId>,
    needs_decision: bool,
    deadline: Option<Time>,
    switching: bool,
    generation: u32,
    expected: CpuSet,
    reported: CpuSet,
    /// CPUs whose slot vCPU could not be loaded yet; kicked on a release.
    deferred: CpuSet,
}

struct Pool {
    scheduler: Box<dyn Scheduler>,
    granularity: Granularity,
    placement: Placement,
    unit_size: u32,
    cpus: CpuSet,
    resources: Vec<usize>,
    domains: Vec<DomainId>,
}

#[derive(Debug)]
struct Domain {
    id: DomainId,
    pool: PoolId,
    vcpus: Vec<VcpuId>,
    units: Vec<UnitId>,
    params: SchedParams,
    /// Xen's hard affinity: the CPUs its vCPUs may run on (all by default).
    hard_affinity: CpuSet,
    /// Xen's soft affinity: the CPUs its vCPUs prefer (all: no preference).
    soft_affinity: CpuSet,
    /// Paused by the toolstack (`xl pause`): each vCPU holds one pause for it.
    controller_paused: bool,
}

#[derive(Debug)]
struct Unit {
    domain: DomainId,
    pool: PoolId,
    vcpus: Vec<VcpuId>,
    runnable: bool,
    /// Master CPU of the resource whose slots hold it.
    on: Option<usize>,
    /// When it was last placed on a resource, left one, or became
    /// runnable: while it is runnable and placed nowhere, how long it has
    /// waited for its turn ([`System::starving_units`]).
    since: Time,
    /// Its affinity changed while it ran where the new one forbids: its
    /// scheduler was told it sleeps, and it is woken again (placed inside
    /// the new affinity) once it has left that resource (Xen's
    /// `vcpu_migrate_start`/`_finish`).
    rewake: bool,
}

#[derive(Debug)]
struct Vcpu {
    domain: DomainId,
    index: u32,
    unit: UnitId,
    blocked: bool,
    /// The hypervisor's own pauses (power-off, a move, a reset), counted.
    pause_count: u32,
    /// A test hook's pause (`TEST_PAUSE_SIBLING`): a flag of its own, so a
    /// guest's unpause can never drop a pause the hypervisor took.
    test_paused: bool,
    running_on: Option<usize>,
    dead: bool,
}

impl Vcpu {
    fn runnable(&self) -> bool {
        !self.dead && !self.blocked && self.pause_count == 0 && !self.test_paused
    }
}

/// The most cpupools that exist at once (pool 0 included): as many as
/// CPUs, since a pool without CPUs runs nothing.
pub const MAX_POOLS: usize = crate::cpuset::MAX_CPUS;

/// The whole scheduling state of the machine. See the module documentation.
pub struct System {
    topology: Topology,
    config: SystemConfig,
    factory: SchedulerFactory,
    table: Arc<RendezvousTable>,
    next_generation: u32,
    next_domain: u32,
    active: bool,
    cpus: Vec<Cpu>,
    resources: Vec<Option<Resource>>,
    pools: Vec<Option<Pool>>,
    free: IdleScheduler,
    domains: Vec<Domain>,
    units: Vec<Option<Unit>>,
    vcpus: Vec<Option<Vcpu>>,
    diagnostics: [Option<Diagnostic>; DIAGNOSTIC_RING],
    diagnostics_total: u64,
    /// CPUs with the core-scheduling fault planted
    /// ([`System::plant_cosched_fault`]); empty outside the test that
    /// proves the co-residency checker can fail.
    cosched_broken: CpuSet,
    /// Units with [`Unit::rewake`] set: while 0, a decision does not look.
    pending_rewakes: usize,
}

/// The CPUs of every core that `cpus` touches.
fn core_cpus(topology: &Topology, cpus: &CpuSet) -> CpuSet {
    cpus.iter().fold(CpuSet::new(), |all, cpu| {
        all.union(&topology.siblings(cpu, Granularity::Core))
    })
}

fn resource_info(topology: &Topology, cpus: CpuSet) -> ResourceInfo {
    let master = cpus.first().unwrap_or(0);
    let cpu = topology.cpu(master);
    ResourceInfo {
        id: ResourceId(master),
        cpus,
        socket: cpu.map_or(0, |c| c.socket),
        cluster: cpu.map_or(0, |c| c.cluster),
        capacity: cpu.and_then(|c| c.capacity),
        core_cpus: core_cpus(topology, &cpus),
    }
}

fn alloc_slot<T>(table: &mut Vec<Option<T>>, value: T) -> usize {
    match table.iter().position(Option::is_none) {
        Some(index) => {
            table[index] = Some(value);
            index
        }
        None => {
            table.push(Some(value));
            table.len() - 1
        }
    }
}

impl System {
    /// A system with every enabled CPU online and free, and no pool. Call
    /// [`System::boot_pool0`] once all CPUs are up (Xen patch 52/60).
    pub fn new(topology: Topology, config: SystemConfig, factory: SchedulerFactory) -> Self {
        let count = topology.len();
        let cpus = topology
            .cpus()
            .iter()
            .map(|c| Cpu {
                online: c.enabled,
                pool: None,
                resource: None,
                slot: 0,
                loaded: CpuContext::Idle,
                switching: None,
            })
            .collect();
        let mut free = IdleScheduler::new();
        for cpu in topology.enabled().iter() {
            let _ = free.add_resource(resource_info(&topology, CpuSet::single(cpu)));
        }
        Self {
            table: Arc::new(RendezvousTable::new(count)),
            topology,
            config,
            factory,
            next_generation: 0,
            next_domain: 1,
            active: true,
            cpus,
            resources: (0..count).map(|_| None).collect(),
            pools: Vec::new(),
            free,
            domains: Vec::new(),
            units: Vec::new(),
            vcpus: Vec::new(),
            diagnostics: [None; DIAGNOSTIC_RING],
            diagnostics_total: 0,
            cosched_broken: CpuSet::new(),
            pending_rewakes: 0,
        }
    }

    /// The rendezvous cells, shared with the CPUs that wait on them outside the lock.
    pub fn rendezvous_table(&self) -> Arc<RendezvousTable> {
        Arc::clone(&self.table)
    }

    /// The machine's topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The framework's tunables.
    pub fn config(&self) -> SystemConfig {
        self.config
    }

    // ----- diagnostics -------------------------------------------------------

    fn record(&mut self, diagnostic: Diagnostic) {
        let index = (self.diagnostics_total % DIAGNOSTIC_RING as u64) as usize;
        self.diagnostics[index] = Some(diagnostic);
        self.diagnostics_total += 1;
    }

    /// The most recent diagnostics (at most 32), oldest first.
    pub fn diagnostics(&self) -> impl Iterator<Item = Diagnostic> + '_ {
        let total = self.diagnostics_total;
        let kept = total.min(DIAGNOSTIC_RING as u64);
        (total - kept..total)
            .filter_map(move |i| self.diagnostics[(i % DIAGNOSTIC_RING as u64) as usize])
    }

    /// How many diagnostics were ever recorded.
    pub fn diagnostics_total(&self) -> u64 {
        self.diagnostics_total
    }

    // ----- views -------------------------------------------------------------

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

    // ----- internal lookups --------------------------------------------------

    fn pool(&self, pool: PoolId) -> Result<&Pool, SystemError> {
        self.pools
            .get(pool.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(SystemError::UnknownPool(pool))
    }

    fn pool_mut(&mut self, pool: PoolId) -> Result<&mut Pool, SystemError> {
        self.pools
            .get_mut(pool.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(SystemError::UnknownPool(pool))
    }

    fn domain(&self, domain: DomainId) -> Result<&Domain, SystemError> {
        self.domains
            .iter()
            .find(|d| d.id == domain)
            .ok_or(SystemError::UnknownDomain(domain))
    }

    fn domain_mut(&mut self, domain: DomainId) -> Result<&mut Domain, SystemError> {
        self.domains
            .iter_mut()
            .find(|d| d.id == domain)
            .ok_or(SystemError::UnknownDomain(domain))
    }

    fn unit(&self, unit: UnitId) -> Option<&Unit> {
        self.units.get(unit.0 as usize).and_then(Option::as_ref)
    }

    fn vcpu(&self, vcpu: VcpuId) -> Option<&Vcpu> {
        self.vcpus
            .get(vcpu.0 as usize)
            .and_then(Option::as_ref)
            .filter(|v| !v.dead)
    }

    fn vcpu_mut(&mut self, vcpu: VcpuId) -> Result<&mut Vcpu, SystemError> {
        self.vcpus
            .get_mut(vcpu.0 as usize)
            .and_then(Option::as_mut)
            .filter(|v| !v.dead)
            .ok_or(SystemError::UnknownVcpu(vcpu))
    }

    fn domain_of(&self, context: CpuContext) -> Option<DomainId> {
        context
            .vcpu()
            .and_then(|v| self.vcpus.get(v.0 as usize))
            .and_then(Option::as_ref)
            .map(|v| v.domain)
    }

    /// The CPU of a resource that gets its timer and its kicks.
    fn timer_cpu(&self, master: usize) -> Option<usize> {
        let r = self.resources.get(master)?.as_ref()?;
        r.cpu_list.iter().copied().find(|&c| self.cpus[c].online)
    }

    fn kick_resource(&self, master: usize, p: &dyn Platform) {
        if let Some(cpu) = self.timer_cpu(master) {
            p.kick(&CpuSet::single(cpu));
        }
    }

    // ----- boot and CPUs -----------------------------------------------------

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

    // ----- pools ---------------------------------------------------------------

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

    // ----- domains -----------------------------------------------------------

    fn build_units(
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
    fn dismantle_units(&mut self, units: &[UnitId], p: &dyn Platform) {
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
            ids.push(VcpuId(alloc_slot(&mut self.vcpus, vcpu) as u32));
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

    fn bind_vcpus(&mut self, units: &[UnitId]) {
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
    fn wake_units(&mut self, units: &[UnitId], p: &dyn Platform) {
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

    // ----- vCPU events ---------------------------------------------------------

    /// Re-derives a unit's runnability from its vCPUs; tells the scheduler when
    /// it changed, and kicks the CPUs whose slot contents changed.
    fn refresh_unit(&mut self, unit: UnitId, reason: WakeReason, p: &dyn Platform) {
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

    fn vcpu_changed(&mut self, vcpu: VcpuId, reason: WakeReason, p: &dyn Platform) {
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
        self.vcpu_changed(vcpu, WakeReason::Event, p);
        Ok(())
    }

    /// An event arrived for a vCPU (interrupt, timer, event channel).
    pub fn vcpu_wake(&mut self, vcpu: VcpuId, p: &dyn Platform) -> Result<(), SystemError> {
        self.vcpu_mut(vcpu)?.blocked = false;
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
    fn drain_tickle(&mut self, pool: PoolId, p: &dyn Platform) {
        if let Ok(pool) = self.pool_mut(pool) {
            let tickle = pool.scheduler.take_tickle();
            self.apply_tickle(tickle, p);
        }
    }

    fn apply_tickle(&mut self, tickle: Tickle, p: &dyn Platform) {
        for master in tickle.iter() {
            if let Some(r) = self.resources.get_mut(master).and_then(Option::as_mut) {
                r.needs_decision = true;
                self.kick_resource(master, p);
            }
        }
    }

    // ----- per-CPU events --------------------------------------------------------

    /// CPU `cpu` received a scheduling kick (IPI).
    pub fn on_kick(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        self.evaluate(cpu, p)
    }

    /// CPU `cpu`'s scheduling timer fired.
    pub fn on_timer(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        self.evaluate(cpu, p)
    }

    /// CPU `cpu` finished the switch it was told to make.
    pub fn switch_done(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        let Some(c) = self.cpus.get_mut(cpu) else {
            return Step::Resume;
        };
        let Some(context) = c.switching.take() else {
            return self.evaluate(cpu, p);
        };
        let old = core::mem::replace(&mut c.loaded, context);
        let master = c.resource;
        if let Some(w) = old.vcpu()
            && old != context
        {
            self.release(w, cpu, p);
        }
        if let Some(master) = master {
            self.kick_deferred(master, cpu, p);
        }
        self.evaluate(cpu, p)
    }

    /// CPU `cpu` is back from waiting at the rendezvous of `ticket`.
    pub fn rendezvous_done(
        &mut self,
        cpu: usize,
        ticket: &Ticket,
        outcome: Outcome,
        p: &dyn Platform,
    ) -> Step {
        if let Outcome::TimedOut { missing } = outcome {
            self.record(Diagnostic::RendezvousTimedOut {
                resource: ticket.resource,
                generation: ticket.generation,
                missing,
            });
        }
        let master = ticket.resource.0;
        let current = self.cpus.get(cpu).and_then(|c| c.resource) == Some(master)
            && self.resources[master]
                .as_ref()
                .is_some_and(|r| r.switching && r.generation == ticket.generation);
        if current {
            if outcome == Outcome::Complete {
                if let Some(r) = self.resources[master].as_mut() {
                    r.switching = false;
                    r.reported.insert(cpu);
                }
                // Everyone left the old contexts: the others may load now.
                if let Some(r) = self.resources[master].as_ref() {
                    let mut others = r.cpus;
                    others.remove(cpu);
                    p.kick(&others);
                }
            } else {
                self.settle_idle(master, p);
            }
        }
        self.evaluate(cpu, p)
    }

    fn release(&mut self, vcpu: VcpuId, cpu: usize, p: &dyn Platform) {
        let Some(slot) = self.vcpus.get_mut(vcpu.0 as usize) else {
            return;
        };
        let Some(v) = slot.as_mut() else { return };
        if v.running_on == Some(cpu) {
            v.running_on = None;
        }
        if v.dead {
            if v.running_on.is_none() {
                *slot = None;
            }
            return;
        }
        let unit = v.unit;
        if let Some(master) = self.unit(unit).and_then(|u| u.on) {
            self.kick_deferred(master, cpu, p);
        }
    }

    fn kick_deferred(&mut self, master: usize, except: usize, p: &dyn Platform) {
        if let Some(r) = self.resources[master].as_mut() {
            let mut deferred = core::mem::take(&mut r.deferred);
            deferred.remove(except);
            if !deferred.is_empty() {
                p.kick(&deferred);
            }
        }
    }

    /// Ends the resource's rendezvous without a switch: every slot goes idle,
    /// and the resource decides again after the retry delay.
    fn settle_idle(&mut self, master: usize, p: &dyn Platform) {
        let now = p.now_ns();
        let delay = self.config.retry_delay_ns;
        self.clear_slots(master, now);
        if let Some(r) = self.resources[master].as_mut() {
            r.switching = false;
            r.domain = None;
            r.needs_decision = false;
            r.deadline = Some(now.saturating_add(delay));
            let deadline = r.deadline;
            if let Some(cpu) = self.timer_cpu(master) {
                p.set_timer(cpu, deadline);
            }
        }
    }

    fn cancel_rendezvous(&mut self, master: usize, reason: CancelReason, p: &dyn Platform) {
        let Some(r) = self.resources.get(master).and_then(Option::as_ref) else {
            return;
        };
        if !r.switching {
            return;
        }
        let generation = r.generation;
        let expected = r.expected;
        self.table.abort(ResourceId(master), generation);
        self.record(Diagnostic::RendezvousCancelled {
            resource: ResourceId(master),
            generation,
            reason,
        });
        self.settle_idle(master, p);
        if let Some(r) = self.resources[master].as_mut() {
            r.needs_decision = true;
        }
        p.kick(&expected);
    }

    /// Wakes again, inside their new affinity, the units
    /// [`System::domain_set_affinity`] evicted that have left their
    /// resource. Only runs while some wait (an administrative change), so a
    /// scan of the unit table here costs nothing in steady state.
    fn rewake_released(&mut self, now: Time, p: &dyn Platform) {
        for index in 0..self.units.len() {
            let Some(unit) = self.units[index].as_mut() else {
                continue;
            };
            if !unit.rewake || unit.on.is_some() {
                continue;
            }
            unit.rewake = false;
            self.pending_rewakes = self.pending_rewakes.saturating_sub(1);
            let (pool, runnable) = (unit.pool, unit.runnable);
            let id = UnitId(index as u32);
            if !runnable {
                continue;
            }
            let Ok(pool) = self.pool_mut(pool) else {
                continue;
            };
            // Asleep for its scheduler since the change (a wake while it
            // still ran left it so): a sleep and a wake queue it afresh.
            let _ = pool.scheduler.sleep(id, now);
            let tickle = pool.scheduler.wake(id, now, WakeReason::Migration);
            self.apply_tickle(tickle, p);
        }
    }

    fn clear_slots(&mut self, master: usize, now: Time) {
        let Some(r) = self.resources.get_mut(master).and_then(Option::as_mut) else {
            return;
        };
        for slot in r.slots.iter_mut() {
            if let Some(u) = slot.unit
                && let Some(unit) = self.units.get_mut(u.0 as usize).and_then(Option::as_mut)
                && unit.on == Some(master)
            {
                unit.on = None;
                unit.since = now;
            }
            *slot = Slot::default();
        }
        r.domain = None;
    }

    fn hand_out(&mut self, cpu: usize, context: CpuContext) -> Step {
        self.cpus[cpu].switching = Some(context);
        if let Some(v) = context.vcpu()
            && let Some(vcpu) = self.vcpus[v.0 as usize].as_mut()
        {
            vcpu.running_on = Some(cpu);
        }
        Step::Switch(context)
    }

    fn settle_on(&mut self, cpu: usize, target: CpuContext) -> Step {
        if self.cpus[cpu].loaded == target {
            Step::Resume
        } else {
            self.hand_out(cpu, target)
        }
    }

    /// What `cpu` may load from its slot right now (idle when the slot is
    /// empty, its vCPU cannot run, is still held elsewhere, or a sibling still
    /// holds another domain).
    fn slot_target(&mut self, master: usize, cpu: usize) -> CpuContext {
        let Some(r) = self.resources[master].as_ref() else {
            return CpuContext::Idle;
        };
        if r.switching {
            return CpuContext::Idle;
        }
        let slot = r
            .slots
            .get(self.cpus[cpu].slot)
            .copied()
            .unwrap_or_default();
        let Some(v) = slot.vcpu else {
            return CpuContext::Idle;
        };
        let Some(vcpu) = self.vcpu(v) else {
            return CpuContext::Idle;
        };
        let runnable = vcpu.runnable()
            && Some(vcpu.unit) == slot.unit
            && Some(vcpu.domain) == r.domain
            && self.unit(vcpu.unit).is_some_and(|u| u.on == Some(master));
        if !runnable {
            return CpuContext::Idle;
        }
        let domain = vcpu.domain;
        let held_elsewhere = vcpu.running_on.is_some_and(|c| c != cpu);
        // The planted fault ignores what the siblings hold.
        let conflict = !self.cosched_broken.contains(cpu)
            && r.cpu_list.iter().filter(|&&s| s != cpu).any(|&s| {
                self.cpus[s]
                    .contexts()
                    .iter()
                    .any(|&c| self.domain_of(c).is_some_and(|d| d != domain))
            });
        if held_elsewhere || conflict {
            if let Some(r) = self.resources[master].as_mut() {
                r.deferred.insert(cpu);
            }
            return CpuContext::Idle;
        }
        CpuContext::Vcpu(v)
    }

    /// The per-CPU decision procedure behind every event.
    fn evaluate(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        let Some(c) = self.cpus.get(cpu) else {
            return Step::Resume;
        };
        if let Some(context) = c.switching {
            return Step::Switch(context);
        }
        let master = match c.resource {
            Some(m) if c.online && self.active && self.resources[m].is_some() => m,
            _ => {
                let target = if c.online {
                    // Free CPUs: the idle scheduler only ever picks idle.
                    let slice = self.free.do_schedule(ResourceId(cpu), p.now_ns());
                    debug_assert!(slice.unit.is_none());
                    CpuContext::Idle
                } else {
                    CpuContext::Idle
                };
                return self.settle_on(cpu, target);
            }
        };
        let now = p.now_ns();
        let loaded = c.loaded;
        for _ in 0..2 {
            let Some(r) = self.resources[master].as_ref() else {
                break;
            };
            if r.switching && r.expected.contains(cpu) && !r.reported.contains(cpu) {
                if loaded != CpuContext::Idle {
                    return self.hand_out(cpu, CpuContext::Idle);
                }
                return Step::Rendezvous(Ticket {
                    resource: ResourceId(master),
                    generation: r.generation,
                    cpu,
                    expected: r.expected,
                    timeout_ns: self.config.rendezvous_timeout_ns,
                });
            }
            let due = r.needs_decision || r.deadline.is_some_and(|d| d <= now);
            if !r.switching && due {
                self.decide(master, cpu, now, p);
                continue;
            }
            break;
        }
        let target = self.slot_target(master, cpu);
        self.settle_on(cpu, target)
    }

    /// Asks the pool's scheduler what runs next on the resource and stores the
    /// plan; opens a rendezvous if a sibling still holds another domain.
    fn decide(&mut self, master: usize, caller: usize, now: Time, p: &dyn Platform) {
        self.clear_slots(master, now);
        let Some(r) = self.resources[master].as_mut() else {
            return;
        };
        r.needs_decision = false;
        let pool_id = r.pool;
        let Some(pool) = self
            .pools
            .get_mut(pool_id.0 as usize)
            .and_then(Option::as_mut)
        else {
            return;
        };
        let slice = pool.scheduler.do_schedule(ResourceId(master), now);
        let placement = pool.placement;
        if self.pending_rewakes > 0 {
            self.rewake_released(now, p);
        }
        let mut leader = slice.unit;
        if let Some(u) = leader {
            let why = match self.units.get(u.0 as usize).and_then(Option::as_ref) {
                None => Some("no such unit"),
                Some(unit) if unit.pool != pool_id => Some("unit of another pool"),
                Some(unit) if unit.on.is_some() => Some("unit already placed on a resource"),
                Some(_) => None,
            };
            if let Some(why) = why {
                self.record(Diagnostic::RejectedUnit {
                    pool: pool_id,
                    unit: u,
                    why,
                });
                leader = None;
            }
        }
        let domain = leader.and_then(|u| self.unit(u)).map(|u| u.domain);
        if let (Some(u), Some(d)) = (leader, domain) {
            let slot_count = self.resources[master].as_ref().map_or(0, |r| r.slots.len());
            match placement {
                Placement::Fixed => {
                    let vcpus_len = self.unit(u).map_or(0, |x| x.vcpus.len());
                    for i in 0..slot_count.min(vcpus_len) {
                        let v = self.unit(u).map(|x| x.vcpus[i]);
                        if let Some(r) = self.resources[master].as_mut() {
                            r.slots[i] = Slot {
                                unit: Some(u),
                                vcpu: v,
                            };
                        }
                    }
                    self.mark_on(u, master, now);
                }
                Placement::Spread => {
                    let mut placed_leader = false;
                    for i in 0..slot_count {
                        let cpu = self.resources[master].as_ref().map_or(0, |r| r.cpu_list[i]);
                        if !self.cpus[cpu].online {
                            continue;
                        }
                        let unit = if placed_leader {
                            // Share a resource only when every other one is busy.
                            if self.pool_has_idle_resource(pool_id, master) {
                                break;
                            }
                            let Some(pool) = self.pools[pool_id.0 as usize].as_mut() else {
                                break;
                            };
                            let Some(s) = pool.scheduler.pick_sibling(ResourceId(master), d, now)
                            else {
                                break;
                            };
                            let why = match self.unit(s) {
                                None => Some("no such unit"),
                                Some(x) if x.pool != pool_id => Some("unit of another pool"),
                                Some(x) if x.domain != d => Some("sibling of another domain"),
                                Some(x) if x.on.is_some() => {
                                    Some("unit already placed on a resource")
                                }
                                Some(_) => None,
                            };
                            if let Some(why) = why {
                                self.record(Diagnostic::RejectedUnit {
                                    pool: pool_id,
                                    unit: s,
                                    why,
                                });
                                break;
                            }
                            s
                        } else {
                            placed_leader = true;
                            u
                        };
                        let v = self.unit(unit).and_then(|x| x.vcpus.first().copied());
                        if let Some(r) = self.resources[master].as_mut() {
                            r.slots[i] = Slot {
                                unit: Some(unit),
                                vcpu: v,
                            };
                        }
                        self.mark_on(unit, master, now);
                    }
                }
            }
        }
        let generation = self.next_generation.wrapping_add(1).max(1);
        let online_cpus = self.online_cpus();
        let holders_of_other_domains = {
            let Some(r) = self.resources[master].as_ref() else {
                return;
            };
            r.cpu_list.iter().any(|&s| {
                self.cpus[s]
                    .contexts()
                    .iter()
                    .any(|&c| self.domain_of(c).is_some_and(|x| Some(x) != domain))
            })
        };
        let Some(r) = self.resources[master].as_mut() else {
            return;
        };
        r.domain = domain;
        r.deadline = slice.slice_ns.map(|s| now.saturating_add(s));
        let deadline = r.deadline;
        let mut others = r.cpus.intersection(&online_cpus);
        if domain.is_some() && holders_of_other_domains {
            self.next_generation = generation;
            r.switching = true;
            r.generation = generation;
            r.expected = r.cpus.intersection(&online_cpus);
            r.reported = CpuSet::new();
            self.table
                .begin(ResourceId(master), generation, r.expected.len());
        }
        others.remove(caller);
        if let Some(cpu) = self.timer_cpu(master) {
            p.set_timer(cpu, deadline);
        }
        if !others.is_empty() {
            p.kick(&others);
        }
    }

    /// Whether a resource of the pool other than `except` runs nothing and is
    /// not switching (spread placement fills siblings only when none is).
    fn pool_has_idle_resource(&self, pool: PoolId, except: usize) -> bool {
        let Ok(pool) = self.pool(pool) else {
            return false;
        };
        pool.resources.iter().any(|&m| {
            m != except
                && self.resources[m]
                    .as_ref()
                    .is_some_and(|r| !r.switching && r.domain.is_none())
                && self.timer_cpu(m).is_some()
        })
    }

    fn mark_on(&mut self, unit: UnitId, master: usize, now: Time) {
        if let Some(u) = self.units.get_mut(unit.0 as usize).and_then(Option::as_mut) {
            u.on = Some(master);
            u.since = now;
        }
    }

    // ----- invariants ------------------------------------------------------------

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

#[cfg(test)]
#[path = "system_tests.rs"]
mod tests;
