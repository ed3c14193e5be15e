//! The hypervisor image: boots on every CPU, builds the topology and pools, runs
//! the scheduler. Owns: wiring. Must not touch: register layouts (gic/apic) or
//! scheduling policy (sched).
#![no_std]
#![no_main]

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
