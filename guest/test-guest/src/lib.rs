//! The hardware-independent part of the test guest: the boot-argument parser
//! that picks the workloads, the device-tree reader, the latency statistics,
//! a fixed-size line buffer for formatting without a heap, and the pieces of
//! the workloads that need no hardware (the barrier and vCPU sets, the
//! interrupt kinds and how a wait treats them, typed-line input, the pools
//! wording, the pause and CPU-off verdicts). Host-tested; the bare-metal
//! binary (`main.rs`) uses it.
//!
//! Owns: parsing, arithmetic and the workloads' decisions. Must not touch:
//! hardware.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

pub mod barrier;
pub mod checks;
pub mod config;
pub mod devicetree;
pub mod input;
pub mod interrupt;
pub mod line;
pub mod pools;
pub mod stats;
