//! x86-64 in long mode at CPL 0 (the SVM host): PVH boot, GDT/TSS/IDT with IST
//! stacks, the COM1 console, the TSC clock, the CMOS clock's registers, SVM
//! detection and the AP trampoline.
//!
//! The platform owns the entry points; the hypervisor provides
//! `hv_x86_primary_main(start_info_paddr)` and `hv_x86_secondary_main(cpu)`.
//! The local APIC itself is driven by the `apic` crate.

pub mod boot;
pub mod cmos;
pub mod console;
pub mod cpu;
pub mod exceptions;
pub mod serial;
pub mod svm;
pub mod timer;
