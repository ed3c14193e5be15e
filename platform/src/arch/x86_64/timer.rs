//! The clock: the TSC, calibrated at boot against PIT channel 2 (the one
//! reference every PC has and QEMU emulates), for timestamps and bounded waits.

use core::sync::atomic::{AtomicU64, Ordering};

use x86_64::instructions::port::Port;

/// PIT input clock in Hz.
const PIT_HZ: u64 = 1_193_182;
/// Calibration window.
const CALIBRATION_MS: u64 = 10;
/// TSC frequency assumed if calibration fails (logged by the caller).
pub const FALLBACK_TSC_HZ: u64 = 1_000_000_000;
/// TSC cycles to wait for the PIT before calling it broken (about 10 s at 4 GHz).
const PIT_WAIT_LIMIT: u64 = 40_000_000_000;

static TSC_HZ: AtomicU64 = AtomicU64::new(FALLBACK_TSC_HZ);

/// The time stamp counter.
pub fn tsc() -> u64 {
    // SAFETY: RDTSC has no side effects and is allowed at CPL 0.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// TSC ticks per second, as calibrated.
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Nanoseconds since the TSC started.
pub fn now_ns() -> u64 {
    ((u128::from(tsc()) * 1_000_000_000) / u128::from(tsc_hz().max(1))) as u64
}

/// The TSC value `delta_ns` from now.
pub fn tsc_after_ns(delta_ns: u64) -> u64 {
    let ticks = (u128::from(delta_ns) * u128::from(tsc_hz()) / 1_000_000_000) as u64;
    tsc().saturating_add(ticks.max(1))
}

/// Busy-waits at least `us` microseconds.
pub fn delay_us(us: u64) {
    let end = tsc_after_ns(us.saturating_mul(1000));
    while tsc() < end {
        core::hint::spin_loop();
    }
}

/// Why calibration fell back to [`FALLBACK_TSC_HZ`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalibrationError {
    /// PIT channel 2's output never went high.
    PitSilent,
    /// The TSC did not advance.
    TscStopped,
}

impl core::fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::PitSilent => write!(f, "PIT channel 2 never signalled the end of the window"),
            Self::TscStopped => write!(f, "the TSC did not advance"),
        }
    }
}

/// Measures the TSC against a 10 ms PIT channel 2 one-shot and records the
/// frequency. On failure the fallback frequency stays in force.
pub fn calibrate() -> Result<u64, CalibrationError> {
    let mut gate: Port<u8> = Port::new(0x61);
    let mut command: Port<u8> = Port::new(0x43);
    let mut channel2: Port<u8> = Port::new(0x42);
    let count = PIT_HZ * CALIBRATION_MS / 1000;
    // SAFETY: ports 0x61 (NMI status/speaker gate), 0x43 and 0x42 (PIT) are
    // the PC's; only channel 2, which drives nothing but the speaker, changes.
    let (start, end, fired) = unsafe {
        // Gate on, speaker off.
        let value = gate.read();
        gate.write((value & !0x02) | 0x01);
        // Channel 2, lobyte/hibyte, mode 0 (interrupt on terminal count), binary.
        command.write(0b1011_0000);
        channel2.write((count & 0xff) as u8);
        channel2.write((count >> 8) as u8);
        let start = tsc();
        let mut fired = false;
        while tsc().wrapping_sub(start) < PIT_WAIT_LIMIT {
            if gate.read() & 0x20 != 0 {
                fired = true;
                break;
            }
            core::hint::spin_loop();
        }
        (start, tsc(), fired)
    };
    if !fired {
        return Err(CalibrationError::PitSilent);
    }
    let elapsed = end.wrapping_sub(start);
    if elapsed == 0 {
        return Err(CalibrationError::TscStopped);
    }
    let hz = elapsed * 1000 / CALIBRATION_MS;
    TSC_HZ.store(hz, Ordering::Relaxed);
    Ok(hz)
}
