//! The hypervisor calls of `guest-abi` and the PSCI calls, through `HVC #0`
//! (PSCI through `SMC #0` when the device tree says so).

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

use guest_abi::{Args, Call, CallError, Regs, decode_return};

/// PSCI 0.2+ `CPU_ON`, SMC64.
pub const PSCI_CPU_ON: u64 = 0xC400_0003;
/// PSCI `SYSTEM_OFF`.
pub const PSCI_SYSTEM_OFF: u64 = 0x8400_0008;
/// PSCI `CPU_OFF`.
pub const PSCI_CPU_OFF: u64 = 0x8400_0002;
/// PSCI `AFFINITY_INFO` (SMC64).
pub const PSCI_AFFINITY_INFO: u64 = 0xC400_0004;
/// PSCI `SYSTEM_RESET`.
pub const PSCI_SYSTEM_RESET: u64 = 0x8400_0009;

/// PSCI goes through SMC instead of HVC.
static PSCI_SMC: AtomicBool = AtomicBool::new(false);

/// Chooses the PSCI conduit (`/psci` `method` in the device tree).
pub fn set_psci_smc(smc: bool) {
    PSCI_SMC.store(smc, Ordering::Relaxed);
}

/// `HVC #0` with `x0` and `x1..=x5`; returns `x0..=x3`.
pub fn hvc(x0: u64, args: Args) -> Regs {
    let (r0, r1, r2, r3);
    // SAFETY: HVC #0 only enters the hypervisor (or QEMU's PSCI emulation, or
    // the guest's own undefined-instruction handler, which answers
    // NOT_SUPPORTED). SMCCC lets the callee clobber x4..x17, declared here;
    // memory is not touched by any call of this ABI.
    unsafe {
        asm!(
            "hvc #0",
            inout("x0") x0 => r0,
            inout("x1") args[0] => r1,
            inout("x2") args[1] => r2,
            inout("x3") args[2] => r3,
            inout("x4") args[3] => _,
            inout("x5") args[4] => _,
            out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _,
            out("x11") _, out("x12") _, out("x13") _, out("x14") _, out("x15") _,
            out("x16") _, out("x17") _,
            options(nostack),
        );
    }
    [r0, r1, r2, r3]
}

/// `SMC #0`, as [`hvc`].
fn smc(x0: u64, args: Args) -> Regs {
    let (r0, r1, r2, r3);
    // SAFETY: as for `hvc`: a firmware call (PSCI) that touches no guest
    // memory; x4..x17 are declared clobbered.
    unsafe {
        asm!(
            "smc #0",
            inout("x0") x0 => r0,
            inout("x1") args[0] => r1,
            inout("x2") args[1] => r2,
            inout("x3") args[2] => r3,
            inout("x4") args[3] => _,
            inout("x5") args[4] => _,
            out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _,
            out("x11") _, out("x12") _, out("x13") _, out("x14") _, out("x15") _,
            out("x16") _, out("x17") _,
            options(nostack),
        );
    }
    [r0, r1, r2, r3]
}

/// Makes a `guest-abi` call.
pub fn hypercall(call: &Call) -> Result<Regs, CallError> {
    let (id, args) = call.encode();
    decode_return(hvc(id as u64, args))
}

/// A PSCI call; returns PSCI's `x0` as a signed code.
pub fn psci(function: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    let args = [a1, a2, a3, 0, 0];
    let regs = if PSCI_SMC.load(Ordering::Relaxed) {
        smc(function, args)
    } else {
        hvc(function, args)
    };
    regs[0] as i64
}
