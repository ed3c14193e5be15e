//! Exceptions: the expected ones (the data abort the misbehaviour workload
//! provokes, an `HVC` that is undefined because no EL2 exists) are answered;
//! anything else is printed and stops the vCPU.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use aarch64_cpu::registers::{ESR_EL1, FAR_EL1};
use guest_abi::HvError;
use tock_registers::interfaces::Readable;

use super::{MAX_VCPUS, halt, vcpu_index};

/// The registers the vector code saves (`entry.S`, FRAME_SIZE).
#[repr(C)]
pub struct Frame {
    x: [u64; 31],
    elr: u64,
    spsr: u64,
    _pad: u64,
}

/// ESR_EL1.EC of a data abort taken from the same EL.
const EC_DATA_ABORT_SAME_EL: u64 = 0x25;
/// ESR_EL1.EC of an instruction abort taken from the same EL.
const EC_INSTRUCTION_ABORT_SAME_EL: u64 = 0x21;
/// ESR_EL1.EC of an unknown/undefined instruction.
const EC_UNKNOWN: u64 = 0x00;
/// The encoding of `HVC #0`.
const HVC_0: u32 = 0xD400_0002;
/// Vector entry 4: synchronous, current EL, SP_ELx.
const SYNC_CURRENT_EL_SPX: u64 = 4;

/// A fault a vCPU provokes on purpose.
struct Probe {
    armed: AtomicBool,
    esr: AtomicU64,
    far: AtomicU64,
}

static PROBES: [Probe; MAX_VCPUS] = [const {
    Probe {
        armed: AtomicBool::new(false),
        esr: AtomicU64::new(0),
        far: AtomicU64::new(0),
    }
}; MAX_VCPUS];

/// What a provoked data abort reported.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    /// ESR_EL1.
    pub esr: u64,
    /// FAR_EL1.
    pub far: u64,
}

impl core::fmt::Display for Fault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ESR {:#x}, FAR {:#x}", self.esr, self.far)
    }
}

/// Runs `f` with a data abort on this vCPU expected: the faulting load is
/// skipped and the fault returned instead of stopping the vCPU.
pub fn expect_fault<T>(f: impl FnOnce() -> T) -> (T, Option<Fault>) {
    let probe = &PROBES[vcpu_index()];
    probe.esr.store(0, Ordering::Relaxed);
    probe.armed.store(true, Ordering::SeqCst);
    let value = f();
    let was_armed = probe.armed.swap(false, Ordering::SeqCst);
    let fault = (!was_armed).then(|| Fault {
        esr: probe.esr.load(Ordering::Relaxed),
        far: probe.far.load(Ordering::Relaxed),
    });
    (value, fault)
}

fn instruction_at(address: u64) -> u32 {
    // SAFETY: `address` is ELR_EL1 of a synchronous exception from this
    // guest's own code, which is mapped (it just executed); aligned to 4.
    unsafe { core::ptr::read_volatile(address as *const u32) }
}

/// Called by the vectors with the saved registers and the vector index.
#[unsafe(no_mangle)]
extern "C" fn guest_exception(frame: &mut Frame, kind: u64) {
    let esr = ESR_EL1.get();
    let far = FAR_EL1.get();
    let ec = esr >> 26 & 0x3F;
    if kind == SYNC_CURRENT_EL_SPX {
        let probe = &PROBES[vcpu_index()];
        if ec == EC_DATA_ABORT_SAME_EL && probe.armed.swap(false, Ordering::SeqCst) {
            probe.esr.store(esr, Ordering::Relaxed);
            probe.far.store(far, Ordering::Relaxed);
            frame.x[0] = 0;
            frame.elr += 4;
            return;
        }
        // The `top` workload's wrap to PC 0.
        if ec == EC_INSTRUCTION_ABORT_SAME_EL
            && let Some(landing) = super::top::expected_abort(frame.elr, frame.x[0])
        {
            frame.elr = landing;
            return;
        }
        // No EL2 (bare QEMU without PSCI over HVC): HVC is undefined.
        // Answer like a hypervisor that does not know the call.
        if ec == EC_UNKNOWN && instruction_at(frame.elr) == HVC_0 {
            frame.x[0] = HvError::NotSupported.to_x0();
            frame.elr += 4;
            return;
        }
    }
    crate::say!(
        "test-guest: vcpu {} Unexpected exception: vector {kind} ESR {esr:#x} ELR {:#x} FAR {far:#x}",
        vcpu_index(),
        frame.elr
    );
    halt();
}
