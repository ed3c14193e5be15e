//! The hypervisor image: boots on every CPU, reads the machine from the
//! firmware tables, brings up all CPUs and the interrupt controller, and idles
//! with a tick. Owns: wiring the crates together. Must not touch: register
//! layouts (gic/apic) or scheduling policy (sched).
#![no_std]
#![no_main]

extern crate alloc;

mod heap;

#[cfg(target_arch = "aarch64")]
mod arm;

/// The board this image was built for (`HV_BOARD` at build time).
const BOARD_NAME: &str = env!("HV_BOARD");

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    log::error!("PANIC: {info}");
    #[cfg(target_arch = "aarch64")]
    platform::arch::aarch64::cpu::park();
    #[cfg(not(target_arch = "aarch64"))]
    loop {
        core::hint::spin_loop();
    }
}
