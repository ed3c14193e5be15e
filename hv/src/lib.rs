//! The hypervisor's hardware-independent logic, host-tested: the one
//! runtime ([`runtime`]), the guest machines in two symmetric wings ([`arm`]:
//! vGIC, PSCI, PL011, stage-2 tables, trap decoding; [`x86`]: VMCB, nested
//! paging, local APIC, 8259, 16550), hypercall ABI, domain configuration and
//! the table of built domains ([`domain_table`]: a lock per domain).
//! The bare-metal binary that drives it lives in `src/bin/hv/`.
//!
//! Owns: what a domain sees and how its requests are decoded. Must not touch:
//! hardware registers (the binary's arch modules do that) or scheduling policy
//! (`sched`).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod arm;
pub mod boot_checks;
pub mod boot_options;
pub mod config;
pub mod console_cmd;
pub mod console_input;
pub mod console_switch;
pub mod domain_memory;
pub mod domain_table;
pub mod guest_image;
pub mod hypercall;
pub mod page_table;
pub mod passthrough;
pub mod pools;
pub mod ratelimit;
pub mod runtime;
pub mod sibling_view;
pub mod speculation;
pub mod x86;
