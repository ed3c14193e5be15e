//! The hypervisor image: boots on every CPU, reads the machine from the
//! firmware tables, brings up all CPUs and the interrupt controller, and idles
//! with a tick. Owns: wiring the crates together. Must not touch: register
//! layouts (gic/apic) or scheduling policy (sched).
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod heap;

#[cfg(target_os = "none")]
mod user_images;

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
mod aarch64;

#[cfg(all(target_arch = "x86_64", target_os = "none"))]
mod x86_64;

/// On a host the binary only explains itself, so `cargo clippy --workspace`
/// and `cargo test --workspace` can include this crate.
#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("hv is a bare-metal image: build it with `cargo xtask build --board qemu-virt`");
    std::process::exit(2);
}

/// The board this image was built for (`HV_BOARD` at build time).
#[cfg(target_os = "none")]
const BOARD_NAME: &str = env!("HV_BOARD");

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    log::error!("PANIC: {info}");
    platform::arch::current::cpu::park()
}
