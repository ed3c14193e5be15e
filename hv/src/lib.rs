//! The hypervisor's hardware-independent logic, host-tested: guest-facing
//! emulation (virtual GIC, PSCI, PL011), stage-2 table layout, hypercall ABI,
//! domain configuration.
//!
//! Owns: what a domain sees and how its requests are decoded. Must not touch:
//! hardware registers (the binary's arch modules do that) or scheduling policy
//! (`sched`).
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod boot_checks;
pub mod boot_options;
pub mod config;
pub mod console_cmd;
pub mod console_input;
pub mod domain_memory;
pub mod guest_dt;
pub mod guest_image;
pub mod hypercall;
pub mod idregs;
pub mod inject;
pub mod passthrough;
pub mod pools;
pub mod ratelimit;
pub mod runtime;
pub mod sibling_view;
pub mod speculation;
pub mod stage2;
pub mod svm;
pub mod trap;
pub mod vgic;
pub mod vpl011;
pub mod vpsci;
