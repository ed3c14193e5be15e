//! Identifiers and small value types of the scheduling model: vCPUs, cpupools,
//! placement, and the read-only views the system hands out.

use core::fmt;

use crate::cpuset::CpuSet;
use crate::granularity::Granularity;
use crate::scheduler::{DomainId, ResourceId, UnitId};

/// A vCPU, by its slot in the system's vCPU table. Stable while the vCPU exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VcpuId(pub u32);

/// A cpupool. Pool 0 is built at boot and cannot be destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub u32);

/// How a pool groups a domain's vCPUs into units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Xen's behaviour: a unit holds as many vCPUs as a resource has CPUs
    /// (vCPU i of the domain goes to unit i / size, slot i % size).
    Fixed,
    /// One vCPU per unit; a resource runs a leader unit and fills its spare
    /// CPUs with units of the *same* domain ([`crate::Scheduler::pick_sibling`]),
    /// so a domain's busy vCPUs spread one per core before sharing a core.
    Spread,
}

impl Placement {
    /// The name used in configs.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Spread => "spread",
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for Placement {
    type Err = UnknownPlacement;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fixed" => Ok(Self::Fixed),
            "spread" => Ok(Self::Spread),
            _ => Err(UnknownPlacement),
        }
    }
}

/// An unknown placement name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownPlacement;

impl fmt::Display for UnknownPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown placement; valid: fixed, spread")
    }
}

/// What a pool looks like from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// The pool.
    pub id: PoolId,
    /// Its scheduler's name.
    pub scheduler: &'static str,
    /// Its granularity.
    pub granularity: Granularity,
    /// Its placement.
    pub placement: Placement,
    /// Its CPUs.
    pub cpus: CpuSet,
    /// vCPUs per unit.
    pub unit_size: u32,
    /// Number of domains in it.
    pub domains: usize,
}

/// What a vCPU looks like from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuInfo {
    /// Its domain.
    pub domain: DomainId,
    /// Its index within the domain.
    pub index: u32,
    /// Its unit.
    pub unit: UnitId,
    /// Blocked (waiting for an event).
    pub blocked: bool,
    /// The hypervisor's pause count (runnable only at 0).
    pub pause_count: u32,
    /// Paused by a test hook (runnable only when not).
    pub test_paused: bool,
    /// The CPU whose context holds it, if any.
    pub running_on: Option<usize>,
}

/// Result of [`crate::system::System::vcpu_pause`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseOutcome {
    /// The vCPU holds no CPU: it is stopped.
    Stopped,
    /// The vCPU's context is still loaded on `cpu`, which has been kicked and
    /// will switch it out without waiting for anyone (not even the rest of its
    /// unit). A caller that needs it stopped polls
    /// [`crate::system::System::vcpu_running_on`] with a bound.
    Running {
        /// The CPU holding it.
        cpu: usize,
    },
}

/// A resource as seen from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceView {
    /// Its id (master CPU).
    pub id: ResourceId,
    /// Its CPUs.
    pub cpus: CpuSet,
    /// The domain it currently runs, if any.
    pub domain: Option<DomainId>,
    /// Whether a rendezvous is in progress.
    pub switching: bool,
}
