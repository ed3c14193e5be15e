//! Per-architecture platform code and firmware-table parsing.
//!
//! Owns: boot, exception vectors, the EL2 MMU, per-CPU data, timers and CPU
//! bring-up (under `arch`), and the device-tree/ACPI parsers that build the
//! `sched` topology (host-compiled too, so `cargo xtask topology` and host tests
//! run the same code as the hypervisor). Must not touch: scheduling policy.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod acpi;
pub mod arch;
pub mod console;
pub mod counter;
pub mod dt;
pub mod memory;
pub mod mmu;
pub mod position;
pub mod sync;
pub mod uefi;
