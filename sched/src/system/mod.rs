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
//! `System` is plain `&mut self` code. The hypervisor keeps it as a
//! [`SharedSystem`]: split into one part per cpupool (and one for the free
//! CPUs, which share one idle scheduler as in Xen), each a `System` of its
//! own behind its own lock, so CPUs of different pools decide at the same
//! time; pool and domain operations take the machine lock exclusively and
//! run on the parts joined again ([`partition`] says how, and why a vCPU
//! still loaded in another pool joins two pools' parts until it leaves).
//! Only the rendezvous wait runs outside the locks.
//! [`crate::driver::drive`] is the per-CPU loop around it. No event handler
//! allocates. One piece of state is
//! readable without the lock: [`BlockedHints`], whether each vCPU may be
//! blocked, so an interrupt for a running vCPU needs neither the lock nor a
//! decision (`sched/tests/loom_wake.rs` models its protocol).

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

mod cpus;
mod domains;
mod hints;
mod invariants;
mod partition;
mod pools;
mod switching;
mod vcpu_events;
mod views;

pub use hints::BlockedHints;
pub use partition::{LockWaits, PartOf, SharedSystem};

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
    /// Shared by every part of a partitioned system ([`partition`]).
    topology: Arc<Topology>,
    /// Which vCPUs may be blocked, for lock-free readers.
    blocked_hints: BlockedHints,
    config: SystemConfig,
    factory: SchedulerFactory,
    table: Arc<RendezvousTable>,
    /// The last rendezvous generation handed out, machine-wide (shared by
    /// every part of a partitioned system).
    generations: Arc<crate::sync::AtomicU32>,
    next_domain: u32,
    active: bool,
    cpus: Vec<Cpu>,
    resources: Vec<Option<Resource>>,
    pools: Vec<Option<Pool>>,
    free: IdleScheduler,
    domains: Vec<Domain>,
    units: Vec<Option<Unit>>,
    vcpus: Vec<Option<Vcpu>>,
    /// The latest diagnostics recorded here, each with its number in the
    /// machine-wide sequence (`diagnostic_sequence`), so the rings of a
    /// partitioned system's parts merge in the order things happened.
    diagnostics: [Option<(u64, Diagnostic)>; DIAGNOSTIC_RING],
    /// How many diagnostics this part recorded (its ring's write position).
    diagnostics_recorded: u64,
    /// How many diagnostics the machine ever recorded, shared by every part.
    diagnostic_sequence: Arc<crate::sync::AtomicU64>,
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
            blocked_hints: BlockedHints::new(),
            topology: Arc::new(topology),
            config,
            factory,
            generations: Arc::new(crate::sync::AtomicU32::new(0)),
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
            diagnostics_recorded: 0,
            diagnostic_sequence: Arc::new(crate::sync::AtomicU64::new(0)),
            cosched_broken: CpuSet::new(),
            pending_rewakes: 0,
        }
    }

    /// Which vCPUs may be blocked, readable without this system's lock (see
    /// [`BlockedHints`] for the protocol a reader must follow).
    pub fn blocked_hints(&self) -> BlockedHints {
        self.blocked_hints.clone()
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
        let sequence = self
            .diagnostic_sequence
            .fetch_add(1, crate::sync::Ordering::Relaxed);
        let index = (self.diagnostics_recorded % DIAGNOSTIC_RING as u64) as usize;
        self.diagnostics[index] = Some((sequence, diagnostic));
        self.diagnostics_recorded += 1;
    }

    /// The most recent diagnostics (at most 32) recorded here, oldest first.
    /// (Of a partitioned system's part: those of its own pools' events.)
    pub fn diagnostics(&self) -> impl Iterator<Item = Diagnostic> + '_ {
        let mut ordered = self.diagnostics;
        ordered.sort_unstable_by_key(|d| d.map(|(sequence, _)| sequence));
        ordered.into_iter().flatten().map(|(_, d)| d)
    }

    /// How many diagnostics the machine ever recorded.
    pub fn diagnostics_total(&self) -> u64 {
        self.diagnostic_sequence
            .load(crate::sync::Ordering::Relaxed)
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
}

#[cfg(test)]
mod tests;
