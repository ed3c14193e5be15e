//! The hardware-independent part of the test guest: the boot-argument parser
//! that picks the workloads, the device-tree reader, the latency statistics and a fixed-size line
//! buffer for formatting without a heap. Host-tested; the bare-metal binary
//! (`main.rs`) uses it.
//!
//! Owns: parsing and arithmetic. Must not touch: hardware.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod config;
pub mod devicetree;
pub mod line;
pub mod stats;
