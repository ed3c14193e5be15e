//! `sched`: hardware-independent core scheduling, as in Xen's core-scheduling series
//! but without its hangs.
//!
//! Owns: the topology model, granularity, sched resources and units, cpupools, the
//! five schedulers, the idle scheduler for free CPUs, and the rendezvous state
//! machine that makes all CPUs of a resource switch together.
//! Must not touch: hardware. It reaches CPUs only through [`platform::Platform`]
//! (kick CPUs, switch a CPU's context, read the clock), so the same code runs in
//! the hypervisor, in host tests and in the scheduling lab.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod cpuset;
pub mod granularity;
pub mod scheduler;
pub mod schedulers;
pub mod topology;

pub use cpuset::{CpuSet, MAX_CPUS};
pub use granularity::Granularity;
pub use scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};
pub use topology::{CpuTopology, Topology, TopologyError};
