//! x86 local APIC driver (xAPIC MMIO and x2APIC MSRs): IPIs, INIT-SIPI-SIPI, timer.
//!
//! Owns: the local APIC registers. Must not touch: scheduling policy or the
//! I/O APIC. Filled in by the x86 issue; empty until then.
#![no_std]
