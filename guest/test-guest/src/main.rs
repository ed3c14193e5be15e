//! The test guest: a bare-metal ARM64 program that runs as a domain (or
//! directly on QEMU at EL1) and reports what it sees. Built by
//! `cargo xtask guest build` as a flat arm64 `Image` linked at 0x4008_0000.
//!
//! It runs its workloads (compute, timer sleeper, SGI ping-pong, sibling
//! pause, misbehaviour; see `test_guest::config`) on every vCPU and prints one
//! `test-guest: ...` line per event for the tests to match.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod aarch64;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("test-guest is a bare-metal image: `cargo xtask guest build` builds it");
    std::process::exit(2);
}

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    say!(
        "test-guest: panic on vcpu {}: {info}",
        aarch64::vcpu_index()
    );
    aarch64::halt()
}
