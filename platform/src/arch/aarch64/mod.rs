//! ARM64 at EL2: boot, exception vectors, MMU, PSCI, the EL2 timer, per-CPU
//! identity and the console.

pub mod boot;
pub mod console;
pub mod cpu;
pub mod efi;
pub mod exceptions;
pub mod psci;
pub mod spin_table;
pub mod timer;
