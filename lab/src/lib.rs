//! The scheduling lab (`cargo xtask lab`): a deterministic discrete-event
//! simulator that runs the hypervisor's own `sched` code on simulated SMT
//! machines, with guest workloads modelled on the Xen core-scheduling
//! benchmark (reference 003) and the credit BOOST bug (reference 004).
//!
//! Owns: the simulator ([`sim`]), the SMT throughput model ([`smt`]), the
//! workloads ([`workloads`]), the experiment matrix, tables and targets
//! ([`matrix`]), the hypervisor's measured costs ([`measured_costs`],
//! generated), the SVG charts ([`svg`]) and the simulated side of the
//! in-hypervisor check ([`hvcheck`]).
//! Must not touch: scheduling policy. Every decision comes from `sched`
//! through `sched::Platform`; there is no second copy of scheduling logic.

#![forbid(unsafe_code)]

pub mod hvcheck;
pub mod matrix;
pub mod measured_costs;
pub mod sim;
pub mod smt;
pub mod svg;
pub mod workloads;
