//! The loaded guest's EL1 virtual timer (CNTV_*_EL0), as this CPU holds it
//! while a vCPU is loaded (the switch saves and restores it with the other
//! EL1 registers, `sysregs`).

use aarch64_cpu::registers::{CNTV_CTL_EL0, CNTV_CVAL_EL0};
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

/// Whether the loaded timer asserts its interrupt now: enabled, condition
/// met, not masked. A virtual-timer PPI taken when this is false was raised
/// by a timer no longer loaded (a switch earlier in the same handler
/// replaced it; that vCPU's saved timer raises it again when it is next
/// loaded), and must not reach the vCPU loaded now.
pub fn asserting() -> bool {
    let ctl = CNTV_CTL_EL0.extract();
    ctl.is_set(CNTV_CTL_EL0::ENABLE)
        && ctl.is_set(CNTV_CTL_EL0::ISTATUS)
        && !ctl.is_set(CNTV_CTL_EL0::IMASK)
}

/// Sets IMASK so the loaded timer stops asserting its interrupt: the guest
/// sees it set, as if its own handler had set it, and clears it when it
/// reprograms the timer.
pub fn mask() {
    CNTV_CTL_EL0.modify(CNTV_CTL_EL0::IMASK::SET);
}

/// Turns the timer off (the CPU goes idle: a timer left behind must not keep
/// interrupting; the vCPU's own value was saved by the switch).
pub fn disable() {
    CNTV_CTL_EL0.set(0);
}

/// The compare value the loaded timer will fire at, if it is enabled and
/// not masked (in counter ticks).
pub fn armed_deadline() -> Option<u64> {
    let ctl = CNTV_CTL_EL0.extract();
    (ctl.is_set(CNTV_CTL_EL0::ENABLE) && !ctl.is_set(CNTV_CTL_EL0::IMASK))
        .then(|| CNTV_CVAL_EL0.get())
}
