//! The EL2 physical timer (CNTHP, Arm ARM D11): the hypervisor's tick.

use aarch64_cpu::registers::{CNTFRQ_EL0, CNTHP_CTL_EL2, CNTPCT_EL0};
use core::arch::asm;

use crate::counter::CounterScale;
use tock_registers::interfaces::{Readable, Writeable};

/// Counter frequency in Hz.
pub fn frequency_hz() -> u64 {
    CNTFRQ_EL0.get()
}

/// How this machine's counter converts to nanoseconds (CNTFRQ_EL0 is fixed
/// by firmware before any EL2 code runs, so it is read once).
fn scale() -> CounterScale {
    static SCALE: crate::sync::Once<CounterScale> = crate::sync::Once::new();
    *SCALE.call_once(|| CounterScale::new(frequency_hz()))
}

/// The physical counter.
pub fn counter() -> u64 {
    CNTPCT_EL0.get()
}

/// Nanoseconds since the counter started.
pub fn now_ns() -> u64 {
    counter_to_ns(counter())
}

/// Converts a counter value to nanoseconds since the counter started
/// (saturating: a guest's compare value can be any u64).
pub fn counter_to_ns(count: u64) -> u64 {
    scale().ticks_to_ns(count)
}

/// Arms the EL2 timer to fire `delta_ns` from now.
pub fn arm_in_ns(delta_ns: u64) {
    let ticks = scale().ns_to_ticks(delta_ns);
    let deadline = counter().wrapping_add(ticks.max(1));
    // SAFETY: CNTHP_CVAL_EL2 only sets when this CPU's EL2 timer fires; aarch64-cpu
    // has no accessor for it.
    unsafe { asm!("msr cnthp_cval_el2, {}", in(reg) deadline) };
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::SET + CNTHP_CTL_EL2::IMASK::CLEAR);
}

/// Stops the EL2 timer.
pub fn disable() {
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::CLEAR);
}
