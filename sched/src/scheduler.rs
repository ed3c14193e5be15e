//! The interface every scheduler (credit2, credit, null, rt, arinc653) implements.
//!
//! A scheduler instance belongs to one cpupool. It sees *units* (a domain's vCPUs
//! that always run together) and *resources* (the CPUs that are always scheduled
//! together); it never sees CPUs, vCPU contexts or hardware. The pool framework
//! (`pool.rs`) owns the units and resources and calls these operations with the
//! pool's lock held, so implementations are plain `&mut self` code.
//!
//! Hot-path operations (`wake`, `sleep`, `yield_unit`, `do_schedule`,
//! `pick_resource`, `pick_sibling`) must not allocate: size every table in
//! `insert_unit`/`add_resource`.

use core::fmt;

use crate::cpuset::CpuSet;

/// Time in nanoseconds, from the platform's monotonic clock (or the simulator's).
pub type Time = u64;

/// A unit, by its slot in the framework's unit table. Stable while the unit exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitId(pub u32);

/// A domain (VM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainId(pub u32);

/// A sched resource, named by its master (lowest) CPU, as Xen's `sr->master_cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId(pub usize);

/// What a scheduler knows about a resource of its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The resource's id (its master CPU).
    pub id: ResourceId,
    /// Its CPUs.
    pub cpus: CpuSet,
    /// Socket of its CPUs (credit2 groups runqueues by socket or cluster).
    pub socket: u32,
    /// Cluster (within the socket) of its master CPU.
    pub cluster: u32,
    /// Capacity of its CPUs, when the firmware gives one.
    pub capacity: Option<u32>,
    /// Every CPU of the core(s) its CPUs belong to, SMT siblings included
    /// (equal to `cpus` when the resource is a whole core or more; empty when
    /// unknown). Lets a scheduler at `cpu` granularity prefer a CPU whose
    /// sibling threads are idle too, as Xen's credit2 does with `smt_idle`.
    pub core_cpus: CpuSet,
}

/// Per-unit scheduling parameters, copied from the domain's. Each scheduler
/// reads the fields it uses and checks them in [`Scheduler::set_unit_params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedParams {
    /// Proportional share (credit, credit2). Xen's default is 256; valid 1..=65535.
    pub weight: u16,
    /// Upper bound in percent of one CPU per vCPU (credit, credit2); 0 = uncapped.
    pub cap_percent: u16,
    /// RTDS budget per period, in ns.
    pub budget_ns: u64,
    /// RTDS period, in ns.
    pub period_ns: u64,
    /// RTDS: may run beyond its budget when the resource would otherwise idle.
    pub extratime: bool,
}

impl Default for SchedParams {
    fn default() -> Self {
        Self {
            weight: 256,
            cap_percent: 0,
            budget_ns: 4_000_000,
            period_ns: 10_000_000,
            extratime: true,
        }
    }
}

/// What a scheduler is told about a unit when it joins the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitInfo {
    /// The unit.
    pub id: UnitId,
    /// Its domain.
    pub domain: DomainId,
    /// Its index among its domain's units (arinc653 names units by domain+index).
    pub index_in_domain: u32,
    /// Number of vCPUs in the unit.
    pub vcpus: u32,
    /// Scheduling parameters.
    pub params: SchedParams,
    /// Hard affinity (CPUs it may run on); never empty within the pool.
    pub hard_affinity: CpuSet,
    /// Soft affinity (CPUs it prefers).
    pub soft_affinity: CpuSet,
}

/// Why a unit woke up. Only a genuine event (I/O, timer, IPI) may earn a
/// priority boost: a unit woken because it was migrated, unpaused or kicked
/// away from its resource must not be boosted (the credit BOOST bug,
/// reference 004).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeReason {
    /// An event for the guest: interrupt, timer expiry, event channel.
    Event,
    /// First wake after creation or after a move into the pool.
    New,
    /// Re-queued after a migration between resources.
    Migration,
    /// Unpaused (e.g. after a sibling pause inside its unit or an admin pause).
    Unpause,
}

/// The scheduler's answer to "what runs next on this resource".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskSlice {
    /// The unit to run, or `None` for the idle unit.
    pub unit: Option<UnitId>,
    /// How long until the resource must be rescheduled; `None` = until an event.
    pub slice_ns: Option<Time>,
    /// Whether the unit comes from another resource (the framework moves it).
    pub migrated: bool,
}

impl TaskSlice {
    /// Run idle until something happens.
    pub const IDLE: TaskSlice = TaskSlice {
        unit: None,
        slice_ns: None,
        migrated: false,
    };
}

/// Resources (by master CPU) whose scheduler must run soon: the tickle mask.
pub type Tickle = CpuSet;

/// Errors a scheduler returns; every message says what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// No scheduler of this name; valid names are listed in the message.
    UnknownScheduler,
    /// A pool parameter the scheduler does not have.
    UnknownParam {
        /// The scheduler.
        scheduler: &'static str,
        /// The valid parameter names, comma-separated.
        valid: &'static str,
    },
    /// A parameter with a value outside its range.
    InvalidParam {
        /// Parameter name.
        param: &'static str,
        /// The valid range or form.
        expected: &'static str,
    },
    /// The unit is not in this scheduler.
    UnknownUnit(UnitId),
    /// The resource is not in this scheduler.
    UnknownResource(ResourceId),
    /// No resource of the pool is in the unit's hard affinity.
    NoResourceInAffinity(UnitId),
    /// The scheduler cannot take the unit (null: never happens, units wait;
    /// arinc653: the schedule has no room).
    Full,
    /// The resource still has units assigned.
    ResourceBusy(ResourceId),
}

/// Names of the schedulers [`crate::schedulers::create`] knows.
pub const SCHEDULER_NAMES: &str = "credit2, credit, null, rt, arinc653";

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownScheduler => write!(f, "unknown scheduler; valid: {SCHEDULER_NAMES}"),
            Self::UnknownParam { scheduler, valid } => {
                write!(f, "unknown parameter for {scheduler}; valid: {valid}")
            }
            Self::InvalidParam { param, expected } => {
                write!(f, "invalid value for {param}; expected {expected}")
            }
            Self::UnknownUnit(u) => write!(f, "unit {} is not in this scheduler", u.0),
            Self::UnknownResource(r) => {
                write!(f, "resource (cpu {}) is not in this scheduler", r.0)
            }
            Self::NoResourceInAffinity(u) => {
                write!(
                    f,
                    "no resource of the pool is in the hard affinity of unit {}",
                    u.0
                )
            }
            Self::Full => write!(f, "the scheduler has no room for another unit"),
            Self::ResourceBusy(r) => write!(f, "resource (cpu {}) still has units", r.0),
        }
    }
}

/// Accounting a scheduler keeps per unit (read by the guests' statistics hypercall).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitStats {
    /// Total time the unit has run, in ns.
    pub runtime_ns: Time,
    /// Times it was picked by `do_schedule`.
    pub dispatches: u64,
    /// Scheduler-specific credit/budget left (credit, credit2, rt); 0 otherwise.
    pub credit: i64,
}

/// One scheduler instance, owning the policy of one cpupool.
pub trait Scheduler: Send {
    /// The scheduler's name as used in configs (`credit2`, ...).
    fn name(&self) -> &'static str;

    /// Sets a pool-wide parameter (e.g. credit2 `ratelimit_us`). Unknown keys
    /// get [`SchedError::UnknownParam`] listing the valid ones.
    fn set_pool_param(&mut self, key: &str, value: &str) -> Result<(), SchedError>;

    /// A resource joins the pool.
    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError>;

    /// A resource leaves the pool. The framework first migrates its units;
    /// fails with [`SchedError::ResourceBusy`] if some are still assigned
    /// (null: if one still runs there; one only assigned there is placed
    /// anew, with a tickle for the resource it gets).
    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError>;

    /// A unit joins the pool, not runnable; returns the resource it is placed on.
    fn insert_unit(&mut self, info: &UnitInfo, now: Time) -> Result<ResourceId, SchedError>;

    /// A unit leaves the pool (it is not running: the framework deschedules it first).
    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError>;

    /// The resources a change that returns no tickle (`remove_unit`,
    /// `migrate`, `set_affinity`, `add_resource`, `do_schedule`) left to
    /// reschedule: null hands a resource freed there to a waiting unit, and
    /// credit2 a unit a decision unparked at a new cap period to its
    /// resource, whose CPU may be idle with nothing else to wake it (Xen's
    /// `null_unit_remove` raises SCHEDULE_SOFTIRQ there, its credit2's
    /// `unpark_parked_units` tickles). The framework asks right after those
    /// calls. Default: none.
    fn take_tickle(&mut self) -> Tickle {
        Tickle::new()
    }

    /// The unit became runnable; returns the resources to reschedule.
    fn wake(&mut self, unit: UnitId, now: Time, reason: WakeReason) -> Tickle;

    /// The unit stopped being runnable; returns the resources to reschedule
    /// (the one it runs on, if any).
    fn sleep(&mut self, unit: UnitId, now: Time) -> Tickle;

    /// The running unit gives up the rest of its slice.
    fn yield_unit(&mut self, unit: UnitId, now: Time);

    /// The resource the unit should run on next (within its hard affinity).
    fn pick_resource(&mut self, unit: UnitId, now: Time) -> ResourceId;

    /// Moves the unit's queue membership to `to` (it is not running).
    fn migrate(&mut self, unit: UnitId, to: ResourceId, now: Time);

    /// Decides what runs next on `resource`. Every unit that ran on it since the
    /// last decision (the leader and any [`Scheduler::pick_sibling`] fill-ins) is
    /// accounted up to `now` and re-queued if it is still runnable.
    fn do_schedule(&mut self, resource: ResourceId, now: Time) -> TaskSlice;

    /// Spread placement: a runnable, not running unit of `domain` queued on
    /// `resource`, to fill a spare CPU of the resource while its leader unit
    /// runs. Security: only units of the leader's domain are ever asked for.
    fn pick_sibling(&mut self, resource: ResourceId, domain: DomainId, now: Time)
    -> Option<UnitId>;

    /// Changes a unit's parameters (validated).
    fn set_unit_params(&mut self, unit: UnitId, params: &SchedParams) -> Result<(), SchedError>;

    /// Changes a unit's affinity; it takes effect at its next placement. The
    /// framework never leaves a running unit where the new affinity forbids:
    /// it puts such a unit to sleep first and wakes it once it has left
    /// ([`crate::System::domain_set_affinity`], as Xen's `vcpu_set_affinity`
    /// migrates it), so a scheduler need not tickle for it here.
    fn set_affinity(&mut self, unit: UnitId, hard: CpuSet, soft: CpuSet) -> Result<(), SchedError>;

    /// The unit's accounting.
    fn stats(&self, unit: UnitId) -> Option<UnitStats>;
}
