//! The ARM guest machine, decoded and emulated here (host-tested); the
//! binary's `aarch64` back-end only moves registers in and out of it.

pub mod guest_dt;
pub mod idregs;
pub mod inject;
pub mod stage2;
pub mod trap;
pub mod vgic;
pub mod vpl011;
pub mod vpsci;
