//! Board descriptions as data: per board, the console UART, GIC version hints,
//! memory layout and the default cpupool/domain configuration.
//!
//! Owns: constants that differ between boards. Must not touch: hardware
//! (no `unsafe`, no MMIO); the platform reads these tables.
#![no_std]
#![forbid(unsafe_code)]
