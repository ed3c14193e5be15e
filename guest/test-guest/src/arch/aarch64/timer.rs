//! The virtual counter and the EL1 virtual timer.

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{CNTFRQ_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0, CNTVCT_EL0};
use tock_registers::interfaces::{Readable, Writeable};

/// The virtual counter now (after an ISB, so it is not read early).
pub fn now() -> u64 {
    barrier::isb(barrier::SY);
    CNTVCT_EL0.get()
}

/// Counter ticks per second.
pub fn frequency() -> u64 {
    CNTFRQ_EL0.get()
}

/// Ticks in `us` microseconds.
pub fn us_to_ticks(us: u64) -> u64 {
    (us as u128 * frequency() as u128 / 1_000_000) as u64
}

/// Ticks in `ms` milliseconds.
pub fn ms_to_ticks(ms: u64) -> u64 {
    us_to_ticks(ms * 1000)
}

/// Fires the virtual timer (PPI 27) when the counter reaches `deadline`.
pub fn arm(deadline: u64) {
    CNTV_CVAL_EL0.set(deadline);
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
    barrier::isb(barrier::SY);
}

/// Stops the virtual timer (its level interrupt drops).
pub fn disarm() {
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::CLEAR + CNTV_CTL_EL0::IMASK::SET);
    barrier::isb(barrier::SY);
}

/// Spins until `ticks` have passed.
pub fn delay(ticks: u64) {
    let end = now().saturating_add(ticks);
    while now() < end {
        core::hint::spin_loop();
    }
}
