//! `sched`: hardware-independent core scheduling, as in Xen's core-scheduling series
//! but without its hangs.
//!
//! Owns: the topology model, granularity, sched resources and units, cpupools, the
//! five schedulers, the idle scheduler for free CPUs, and the rendezvous state
//! machine that makes all CPUs of a resource switch together.
//! Must not touch: hardware. It reaches CPUs only through [`platform::Platform`]
//! (kick CPUs, switch a CPU's context, read the clock), so the same code runs in
//! the hypervisor, in host tests and in the scheduling lab.
//!
//! Entry points: [`system::System`] (the model and its event handlers),
//! [`driver::drive`] (the per-CPU loop), [`rendezvous`] (the lock-free
//! barrier), [`lockstep::Lockstep`] (a deterministic single-threaded machine for
//! tests and the lab).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod cpuset;
pub mod driver;
pub mod error;
pub mod fifo;
pub mod granularity;
pub mod idle;
pub mod lockstep;
pub mod platform;
pub mod rendezvous;
pub mod scheduler;
pub mod schedulers;
mod sync;
pub mod system;
pub mod topology;
pub mod unit;

#[cfg(test)]
mod affinity_tests;

pub use cpuset::{CpuSet, MAX_CPUS};
pub use error::{CancelReason, Diagnostic, InvariantViolation, SystemError};
pub use granularity::Granularity;
pub use platform::{CpuContext, Platform};
pub use scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};
pub use system::{
    BlockedHints, LockWaits, PartOf, SchedulerFactory, SharedSystem, Step, System, SystemConfig,
};
pub use topology::{CpuTopology, Topology, TopologyError};
pub use unit::{PauseOutcome, Placement, PoolId, PoolInfo, ResourceView, VcpuId, VcpuInfo};
