//! GIC drivers: GICv2 (distributor + memory-mapped CPU interface) and GICv3
//! (distributor, redistributors, system-register CPU interface).
//!
//! Owns: the GIC's registers. Must not touch: scheduling policy or vGIC
//! emulation state (the hypervisor's job).
#![no_std]
