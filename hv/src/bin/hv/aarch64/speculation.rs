//! What a CPU runs when it switches to another domain than the one it ran
//! last, so that branch predictor and history state one domain trained does
//! not steer the next (`hv::speculation::arm` decides from the CPU's MIDR
//! and the firmware's SMCCC answers), and what the guests are told of the
//! SMCCC workarounds.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

use aarch64_cpu::registers::MIDR_EL1;
use tock_registers::interfaces::Readable;

use hv::arm::vpsci::{Workarounds, function};
use hv::speculation::arm::{self, Firmware, State};
use log::info;
use platform::arch::aarch64::psci::{self, Conduit};
use platform::sync::Once;
use sched::MAX_CPUS;

/// The firmware's workarounds and its conduit, found on the boot CPU.
static FIRMWARE: Once<(Option<Conduit>, Firmware)> = Once::new();
/// Per CPU: the branch-history loop count its plan runs (0: none).
static BHB_LOOP: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];
/// Per CPU: call firmware's WORKAROUND_3 on a domain switch.
static FIRMWARE_W3: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Per CPU: call firmware's WORKAROUND_1 on a domain switch.
static FIRMWARE_W1: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Per CPU: its Spectre v2 and BHB states (as `State as u8`), for the
/// guests' answers; `u8::MAX` until the CPU came up.
static STATES: [[AtomicU8; 2]; MAX_CPUS] =
    [const { [AtomicU8::new(u8::MAX), AtomicU8::new(u8::MAX)] }; MAX_CPUS];
/// `hv.speculation-flush=off`: no flush on domain switches.
static FLUSH_OFF: AtomicBool = AtomicBool::new(false);

/// Turns the flushes between domains off (`hv.speculation-flush=off`, for
/// measuring their cost), loudly.
pub fn turn_flushes_off() {
    log::warn!(
        "speculation: flushes between domains turned OFF (hv.speculation-flush=off): domains may see each other's traces"
    );
    FLUSH_OFF.store(true, Ordering::Relaxed);
}

/// Per CPU: the domain it entered last, plus one (0: none).
static LAST_DOMAIN: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Asks the firmware (on the boot CPU) which SMCCC workarounds it implements.
pub fn init_firmware(conduit: Option<Conduit>) {
    let implemented = |f: u32| {
        conduit
            .and_then(|c| psci::smccc_arch_features(c, f))
            .is_some_and(|answer| answer == 0)
    };
    let firmware = Firmware {
        workaround_1: implemented(function::SMCCC_ARCH_WORKAROUND_1),
        workaround_2: implemented(function::SMCCC_ARCH_WORKAROUND_2),
        workaround_3: implemented(function::SMCCC_ARCH_WORKAROUND_3),
    };
    FIRMWARE.call_once(|| (conduit, firmware));
}

/// Works out this CPU's plan from its MIDR (every CPU at bring-up, after
/// [`init_firmware`] on the boot CPU) and logs it.
pub fn init_this_cpu(cpu: usize) {
    let Some(&(_, firmware)) = FIRMWARE.get() else {
        return;
    };
    let Some(states) = STATES.get(cpu) else {
        return;
    };
    let midr = MIDR_EL1.get();
    let plan = arm::plan(midr, firmware);
    BHB_LOOP[cpu].store(plan.on_switch.bhb_loop, Ordering::Relaxed);
    FIRMWARE_W3[cpu].store(plan.on_switch.firmware_workaround_3, Ordering::Relaxed);
    FIRMWARE_W1[cpu].store(plan.on_switch.firmware_workaround_1, Ordering::Relaxed);
    states[0].store(plan.spectre_v2 as u8, Ordering::Relaxed);
    states[1].store(plan.spectre_bhb as u8, Ordering::Relaxed);
    info!("{}", arm::describe(cpu, midr, &plan, firmware));
}

fn state_of(code: u8) -> Option<State> {
    [State::Unaffected, State::Mitigated, State::Vulnerable]
        .into_iter()
        .find(|&s| s as u8 == code)
}

/// What guests are told of the workarounds: the worst CPU's state (a
/// domain may run on any CPU it is later moved to), WORKAROUND_2 as the
/// firmware has it.
pub fn guest_workarounds() -> Workarounds {
    let worst = |which: usize| {
        arm::worst(
            STATES
                .iter()
                .filter_map(|s| state_of(s[which].load(Ordering::Relaxed))),
        )
    };
    let firmware = FIRMWARE.get().map(|&(_, f)| f).unwrap_or_default();
    Workarounds {
        workaround_1: arm::workaround_feature(worst(0)),
        workaround_2: if firmware.workaround_2 { 0 } else { -1 },
        workaround_3: arm::workaround_feature(worst(1)),
    }
}

/// This CPU's mitigation: firmware calls and the branch-history loop, as
/// its plan says.
pub fn flush(cpu: usize) {
    let conduit = FIRMWARE.get().and_then(|&(c, _)| c);
    if let Some(conduit) = conduit {
        if FIRMWARE_W3
            .get(cpu)
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            psci::smccc_arch_call(conduit, function::SMCCC_ARCH_WORKAROUND_3, 0);
        } else if FIRMWARE_W1
            .get(cpu)
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            psci::smccc_arch_call(conduit, function::SMCCC_ARCH_WORKAROUND_1, 0);
        }
    }
    let count = BHB_LOOP.get(cpu).map_or(0, |c| c.load(Ordering::Relaxed));
    if count > 0 {
        branch_history_loop(count);
    }
}

/// Overwrites the branch history with `count` taken branches of the
/// hypervisor's own (Linux's `spectre_bhb_loop_mitigation`).
fn branch_history_loop(count: u8) {
    // SAFETY: branches to the next instruction and a counter in a scratch
    // register; the barriers only order execution.
    unsafe {
        asm!(
            "2:",
            "b 3f",
            "3:",
            "subs {n:w}, {n:w}, #1",
            "b.ne 2b",
            "dsb nsh",
            "isb",
            n = inout(reg) u32::from(count) => _,
            options(nostack, nomem),
        );
    }
}

/// Called when `cpu` loads a vCPU of `domain`: the flush if it ran another
/// domain last (nothing on a switch within a domain, or from idle back to it).
pub fn on_entering(cpu: usize, domain: u32) {
    let Some(last) = LAST_DOMAIN.get(cpu) else {
        return;
    };
    if last.swap(domain + 1, Ordering::Relaxed) != domain + 1 && !FLUSH_OFF.load(Ordering::Relaxed)
    {
        flush(cpu);
    }
}

/// A guest's `SMCCC_ARCH_WORKAROUND_2`, forwarded to the firmware (offered
/// only where it implements it).
pub fn forward_workaround_2(enable: u64) {
    if let Some(&(Some(conduit), firmware)) = FIRMWARE.get()
        && firmware.workaround_2
    {
        psci::smccc_arch_call(conduit, function::SMCCC_ARCH_WORKAROUND_2, enable);
    }
}
