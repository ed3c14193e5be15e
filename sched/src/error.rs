//! Errors of the pool/domain/CPU operations, and problems the system records
//! while running (diagnostics).

use core::fmt;

use crate::cpuset::CpuSet;
use crate::granularity::Granularity;
use crate::scheduler::{DomainId, ResourceId, SchedError, UnitId};
use crate::unit::{PoolId, VcpuId};

/// Why a pool, domain, vCPU or CPU operation was refused. A refused operation
/// changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemError {
    /// No such pool.
    UnknownPool(PoolId),
    /// No such domain.
    UnknownDomain(DomainId),
    /// No such vCPU.
    UnknownVcpu(VcpuId),
    /// No such CPU in the topology.
    UnknownCpu(usize),
    /// The CPU is offline.
    CpuOffline(usize),
    /// The CPU is already online.
    CpuAlreadyOnline(usize),
    /// The CPU still holds a vCPU context (it has not finished going offline).
    CpuNotIdle(usize),
    /// The CPU belongs to a pool, so it cannot be added to another.
    CpuNotFree {
        /// The CPU.
        cpu: usize,
        /// Its pool.
        pool: PoolId,
    },
    /// The CPU is not in the pool it should be removed from.
    CpuNotInPool {
        /// The CPU.
        cpu: usize,
        /// The pool.
        pool: PoolId,
    },
    /// At this granularity CPUs join and leave a pool by whole resources.
    IncompleteResource {
        /// The pool's granularity.
        granularity: Granularity,
        /// The CPUs that must be included too.
        missing: CpuSet,
    },
    /// A resource would have more CPUs than the rendezvous supports.
    ResourceTooLarge {
        /// Its CPUs.
        cpus: CpuSet,
    },
    /// A resource has fewer (online) CPUs than the pool's units have vCPUs.
    ResourceTooSmall {
        /// Its CPUs.
        cpus: CpuSet,
        /// vCPUs per unit in the pool.
        unit_size: u32,
    },
    /// The pool still has domains.
    PoolNotEmpty {
        /// The pool.
        pool: PoolId,
        /// How many domains it has.
        domains: usize,
    },
    /// Pool 0 cannot be destroyed.
    CannotDestroyPool0,
    /// Removing these CPUs would leave the pool's domains with no CPU.
    WouldStrandDomains {
        /// The pool.
        pool: PoolId,
        /// How many domains it has.
        domains: usize,
    },
    /// Pool 0 already exists.
    AlreadyBooted,
    /// [`crate::system::MAX_POOLS`] pools exist already.
    TooManyPools,
    /// A domain needs at least one vCPU.
    NoVcpus,
    /// More vCPUs than the system table allows.
    TooManyVcpus {
        /// Requested.
        requested: u32,
    },
    /// The vCPU is not paused.
    NotPaused(VcpuId),
    /// The vCPU is not paused by a test hook.
    NotTestPaused(VcpuId),
    /// The vCPU is paused by a test hook already.
    AlreadyTestPaused(VcpuId),
    /// The toolstack paused the domain already.
    DomainPaused(DomainId),
    /// The toolstack did not pause the domain.
    DomainNotPaused(DomainId),
    /// A hard affinity with no CPU of the domain's pool: it could run nowhere.
    AffinityOutsidePool {
        /// The domain.
        domain: DomainId,
        /// Its pool.
        pool: PoolId,
    },
    /// The pool's scheduler refused.
    Scheduler {
        /// The pool.
        pool: PoolId,
        /// What the scheduler said.
        error: SchedError,
    },
}

impl fmt::Display for SystemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownPool(p) => write!(f, "no cpupool {}", p.0),
            Self::UnknownDomain(d) => write!(f, "no domain {}", d.0),
            Self::UnknownVcpu(v) => write!(f, "no vcpu {}", v.0),
            Self::UnknownCpu(c) => write!(f, "no cpu {c} in the topology"),
            Self::CpuOffline(c) => write!(f, "cpu {c} is offline"),
            Self::CpuAlreadyOnline(c) => write!(f, "cpu {c} is already online"),
            Self::CpuNotIdle(c) => write!(
                f,
                "cpu {c} still holds a vcpu; it has not finished going offline"
            ),
            Self::CpuNotFree { cpu, pool } => {
                write!(f, "cpu {cpu} is in cpupool {}, not free", pool.0)
            }
            Self::CpuNotInPool { cpu, pool } => write!(f, "cpu {cpu} is not in cpupool {}", pool.0),
            Self::IncompleteResource {
                granularity,
                missing,
            } => write!(
                f,
                "at {granularity} granularity CPUs move by whole {granularity}s; also needed: cpus {missing}"
            ),
            Self::ResourceTooLarge { cpus } => {
                write!(f, "resource {cpus} has too many CPUs for one rendezvous")
            }
            Self::ResourceTooSmall { cpus, unit_size } => write!(
                f,
                "resource {cpus} has fewer CPUs than the pool's {unit_size}-vCPU units (a sibling offline?)"
            ),
            Self::PoolNotEmpty { pool, domains } => {
                write!(f, "cpupool {} still has {domains} domain(s)", pool.0)
            }
            Self::CannotDestroyPool0 => write!(f, "cpupool 0 cannot be destroyed"),
            Self::WouldStrandDomains { pool, domains } => write!(
                f,
                "removing these CPUs would leave the {domains} domain(s) of cpupool {} with no CPU",
                pool.0
            ),
            Self::AlreadyBooted => write!(f, "cpupool 0 already exists"),
            Self::NoVcpus => write!(f, "a domain needs at least one vcpu"),
            Self::TooManyVcpus { requested } => {
                write!(f, "{requested} vcpus is more than the system allows")
            }
            Self::TooManyPools => write!(f, "{} cpupools exist already", crate::system::MAX_POOLS),
            Self::NotPaused(v) => write!(f, "vcpu {} is not paused", v.0),
            Self::NotTestPaused(v) => write!(f, "vcpu {} is not paused by a test hook", v.0),
            Self::AlreadyTestPaused(v) => {
                write!(f, "vcpu {} is paused by a test hook already", v.0)
            }
            Self::DomainPaused(d) => write!(f, "domain {} is paused already", d.0),
            Self::DomainNotPaused(d) => write!(f, "domain {} is not paused", d.0),
            Self::AffinityOutsidePool { domain, pool } => write!(
                f,
                "the hard affinity of domain {} has no CPU of its cpupool {}",
                domain.0, pool.0
            ),
            Self::Scheduler { pool, error } => {
                write!(f, "scheduler of cpupool {}: {error}", pool.0)
            }
        }
    }
}

/// Why a rendezvous was cancelled by the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// A CPU of the resource went offline.
    CpuOffline(usize),
    /// The resource left its pool.
    ResourceRemoved,
    /// Scheduling was stopped (suspend, shutdown).
    SchedulerStopped,
}

/// Something the system noticed and recovered from; kept in a small ring
/// ([`crate::system::System::diagnostics`]) for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diagnostic {
    /// A domain moved to a pool where its hard affinity has no CPU: as Xen
    /// does, its affinity was broken (reset to every CPU) so it can run.
    AffinityBroken {
        /// The domain.
        domain: DomainId,
        /// The pool it moved to.
        pool: PoolId,
    },
    /// A rendezvous wait ran past its bound; everyone who arrived went idle.
    RendezvousTimedOut {
        /// The resource.
        resource: ResourceId,
        /// The generation.
        generation: u32,
        /// The CPUs that never arrived.
        missing: CpuSet,
    },
    /// A rendezvous was cancelled.
    RendezvousCancelled {
        /// The resource.
        resource: ResourceId,
        /// The generation.
        generation: u32,
        /// Why.
        reason: CancelReason,
    },
    /// A scheduler returned a unit the framework cannot run there.
    RejectedUnit {
        /// The pool.
        pool: PoolId,
        /// The unit.
        unit: UnitId,
        /// What was wrong.
        why: &'static str,
    },
    /// A scheduler call that cannot fail did.
    SchedulerError {
        /// The pool.
        pool: PoolId,
        /// The error.
        error: SchedError,
    },
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RendezvousTimedOut {
                resource,
                generation,
                missing,
            } => write!(
                f,
                "rendezvous {generation} on resource (cpu {}) timed out: cpus {missing} did not arrive; fell back to idle",
                resource.0
            ),
            Self::RendezvousCancelled {
                resource,
                generation,
                reason,
            } => write!(
                f,
                "rendezvous {generation} on resource (cpu {}) cancelled: {reason:?}",
                resource.0
            ),
            Self::RejectedUnit { pool, unit, why } => {
                write!(
                    f,
                    "cpupool {}: scheduler picked unit {}, rejected: {why}",
                    pool.0, unit.0
                )
            }
            Self::SchedulerError { pool, error } => {
                write!(f, "cpupool {}: scheduler error: {error}", pool.0)
            }
            Self::AffinityBroken { domain, pool } => write!(
                f,
                "domain {} moved to cpupool {}, which has no CPU of its hard affinity: affinity broken (every CPU)",
                domain.0, pool.0
            ),
        }
    }
}

/// A broken invariant found by [`crate::system::System::check_invariants`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvariantViolation {
    /// A CPU is in no pool and not free, or in two places.
    CpuPlacement {
        /// The CPU.
        cpu: usize,
    },
    /// A resource's CPUs are not all in its pool, or a pool CPU is in no resource.
    ResourceMembership {
        /// The resource.
        resource: ResourceId,
    },
    /// A unit sits on the slots of two resources.
    UnitOnTwoResources {
        /// The unit.
        unit: UnitId,
    },
    /// A vCPU's context is loaded on two CPUs, or its bookkeeping disagrees.
    VcpuOnTwoCpus {
        /// The vCPU.
        vcpu: VcpuId,
    },
    /// Two CPUs of one resource hold vCPUs of different domains.
    DomainsShareResource {
        /// The resource.
        resource: ResourceId,
        /// One domain.
        first: DomainId,
        /// The other.
        second: DomainId,
    },
    /// A domain's vCPU is missing, duplicated, or in a unit of another pool.
    LostVcpu {
        /// The domain.
        domain: DomainId,
    },
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant violated: {self:?}")
    }
}
