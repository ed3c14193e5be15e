//! The hypercall ABI between guests and the hypervisor: call numbers, argument
//! and return conventions, error codes. Shared by `hv` and the guests so both
//! sides agree by construction.
//!
//! Owns: numbers and encodings only. Must not touch: hardware or policy.
#![no_std]
#![forbid(unsafe_code)]
