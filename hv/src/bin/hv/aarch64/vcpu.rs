//! vCPU contexts on ARM64 and the switch between them.
//!
//! A vCPU's registers live in a [`VcpuState`]. The exception vectors save the
//! interrupted context's general registers into a [`TrapFrame`] on the CPU's
//! stack; switching a CPU to another context means saving that frame (and the
//! EL1 system registers and the FP/SIMD registers, which the soft-float
//! hypervisor leaves in the CPU across exits) into the old vCPU and loading the
//! new vCPU into the frame, so the `eret` at the end of the handler enters the
//! new context. Idle is an EL2 loop entered the same way.
//!
//! Ownership: `sched` loads a vCPU on at most one CPU at a time (it tracks
//! `running_on` under its lock), so only the CPU running a vCPU touches its
//! state; that is the invariant every `unsafe` access below relies on.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{HCR_EL2, VMPIDR_EL2, VTTBR_EL2};
use hv::runtime::identities::VcpuIdentities;
use hv::runtime::loads::CpuLoads;
use log::error;
use platform::arch::aarch64::exceptions::{FpState, TrapFrame};
use sched::{CpuContext, MAX_CPUS, VcpuId};
use tock_registers::fields::FieldValue;
use tock_registers::interfaces::{Readable, Writeable};

use super::debug_regs::{self, DebugRegisters};
use super::sysregs::El1Registers;

/// The most vCPUs the hypervisor hosts at once.
pub const MAX_VCPUS: usize = 256;

/// SPSR for a vCPU's first entry: EL1h, all exceptions masked (Linux boot protocol).
const SPSR_EL1H_MASKED: u64 = 0x3c5;
/// SPSR for the idle loop: EL2h with interrupts unmasked.
const SPSR_EL2H: u64 = 0x9;

/// What a domain contributes to each of its vCPUs' entry.
#[derive(Clone, Copy, Debug)]
pub struct DomainContext {
    /// VTTBR_EL2: stage-2 root and VMID.
    pub vttbr: u64,
    /// The domain id, for logs.
    pub domain: u32,
}

/// Everything a vCPU needs when it is not running.
pub struct VcpuState {
    /// General registers, PC and PSTATE, as the vectors save them.
    pub frame: TrapFrame,
    /// FP/SIMD registers (they move only at a switch).
    pub fp: FpState,
    /// EL1 system registers (including the virtual timer).
    pub el1: El1Registers,
    /// VMPIDR_EL2: the MPIDR the guest reads.
    pub vmpidr: u64,
    /// The domain it belongs to.
    pub domain: DomainContext,
    /// Index within its domain.
    pub index: u32,
    /// Its GIC virtual CPU interface (list registers, VMCR, APRs) while it is
    /// not running.
    pub gic: hv::arm::vgic::VcpuInterfaceState,
    /// Its domain's vGIC generation, read without the domain's lock before
    /// an entry (see `vgic::before_entry`); set at its first full entry.
    pub vgic_generation: Option<hv::arm::vgic::PublishedGeneration>,
    /// Its debug registers (switched only once it has touched them).
    pub debug: DebugRegisters,
    /// Per guest timer (`guest_timer::GuestTimer::ALL`): the timer's
    /// current rise was already taken and ended (`guest_timer`'s
    /// `consumed_rises`).
    pub timer_rises_consumed: [bool; 2],
}

impl VcpuState {
    /// A vCPU that will start at `entry` with `x0 = arg` when first loaded.
    pub fn new(domain: DomainContext, index: u32, vmpidr: u64, entry: u64, arg: u64) -> Self {
        // SAFETY: a TrapFrame is plain integers; all-zero is a valid value.
        let mut frame: TrapFrame = unsafe { core::mem::zeroed() };
        frame.x[0] = arg;
        frame.elr = entry;
        frame.spsr = SPSR_EL1H_MASKED;
        Self {
            frame,
            fp: FpState::default(),
            el1: El1Registers::reset(),
            vmpidr,
            domain,
            index,
            gic: super::vgic::new_interface_state(),
            vgic_generation: None,
            debug: DebugRegisters::default(),
            timer_rises_consumed: [false; 2],
        }
    }
}

static VCPUS: [AtomicPtr<VcpuState>; MAX_VCPUS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_VCPUS];
/// The frame of the exception each CPU is handling (null outside handlers).
static CURRENT_FRAME: [AtomicPtr<TrapFrame>; MAX_CPUS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CPUS];
/// What each CPU has loaded, since when, and each vCPU's run time.
static LOADS: CpuLoads<MAX_CPUS, MAX_VCPUS> = CpuLoads::new();

/// Set by `hv.test-break-fpu-switch=on` ([`break_fp_switch`]).
static FP_SWITCH_BROKEN: AtomicBool = AtomicBool::new(false);

/// Plants the fault of `hv.test-break-fpu-switch=on`: from now on a switch
/// neither saves nor loads the FP/SIMD registers, so whatever one vCPU
/// leaves in them the next one on that CPU reads.
pub fn break_fp_switch() {
    log::warn!(
        "vcpu: per-vCPU FP/SIMD registers turned OFF (hv.test-break-fpu-switch=on): guests see each other's"
    );
    FP_SWITCH_BROKEN.store(true, Ordering::Relaxed);
}

/// Each installed vCPU's domain and index, readable from any CPU without
/// touching its state.
static IDENTITIES: VcpuIdentities<MAX_VCPUS> = VcpuIdentities::new();

/// The domain and index of installed vCPU `vcpu`.
pub fn identity(vcpu: VcpuId) -> Option<(sched::DomainId, u32)> {
    IDENTITIES.get(vcpu)
}
/// Starts a new vCPU's run time at zero (its id may have been used before).
pub fn reset_runtime(vcpu: VcpuId) {
    LOADS.reset_runtime(vcpu);
}

/// How long `vcpu` has run, including its current stint if it is loaded
/// now (read without stopping it: a racing switch may shift a few µs).
pub fn runtime_ns(vcpu: VcpuId) -> u64 {
    LOADS.runtime_ns(vcpu, platform::arch::aarch64::timer::now_ns())
}

/// Registers a vCPU's state under its scheduler id.
pub fn install(vcpu: VcpuId, state: VcpuState) -> bool {
    let Some(slot) = VCPUS.get(vcpu.0 as usize) else {
        error!("vcpu: id {} beyond the {MAX_VCPUS} supported", vcpu.0);
        return false;
    };
    IDENTITIES.set(vcpu, sched::DomainId(state.domain.domain), state.index);
    let new = Box::into_raw(Box::new(state));
    let old = slot.swap(new, Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the slot only ever holds pointers from Box::into_raw, and a
        // vCPU id is reused only after the scheduler released it everywhere.
        drop(unsafe { Box::from_raw(old) });
    }
    true
}

/// The CPU that has `vcpu` loaded, if any (lock-free).
pub fn loaded_on(vcpu: VcpuId) -> Option<usize> {
    LOADS.loaded_on(vcpu)
}

/// Whether any CPU has `vcpu` loaded.
pub fn loaded_anywhere(vcpu: VcpuId) -> bool {
    LOADS.loaded_anywhere(vcpu)
}

/// Why a vCPU's state was not reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetError {
    /// The id is beyond [`MAX_VCPUS`] or has no state.
    NoState,
    /// A CPU has it loaded.
    Loaded,
}

impl core::fmt::Display for ResetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoState => write!(f, "it has no state"),
            Self::Loaded => write!(f, "a CPU still has it loaded"),
        }
    }
}

/// Puts `vcpu` back in `fresh`'s state (PSCI CPU_ON after CPU_OFF),
/// overwriting it in place so nothing a CPU could still reach is freed;
/// refused while a CPU has it loaded. The caller holds the hypervisor's
/// pause on it, so no CPU loads it between that check and the write.
pub fn reset(vcpu: VcpuId, fresh: VcpuState) -> Result<(), ResetError> {
    let ptr = VCPUS
        .get(vcpu.0 as usize)
        .map_or(core::ptr::null_mut(), |s| s.load(Ordering::Acquire));
    if ptr.is_null() {
        return Err(ResetError::NoState);
    }
    if loaded_anywhere(vcpu) {
        return Err(ResetError::Loaded);
    }
    // SAFETY: the pointer came from Box::into_raw and is only freed by
    // `uninstall` (teardown, after every CPU let the vCPU go); no CPU has it
    // loaded and none can load it while the caller's pause holds (module
    // invariant: only the loading CPU touches a state), so this is the only
    // reference.
    unsafe { *ptr = fresh };
    Ok(())
}

/// Frees a vCPU's state (its domain is torn down). The scheduler must no
/// longer give the vCPU to any CPU, and no CPU may hold it.
pub fn uninstall(vcpu: VcpuId) {
    let Some(slot) = VCPUS.get(vcpu.0 as usize) else {
        return;
    };
    IDENTITIES.clear(vcpu);
    let old = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the slot only ever holds pointers from Box::into_raw, and
        // the caller guarantees no CPU uses the state any more.
        drop(unsafe { Box::from_raw(old) });
    }
}

/// A vCPU's domain context and virtual MPIDR (to restart it with PSCI CPU_ON).
pub fn domain_context_of(vcpu: VcpuId) -> Option<(DomainContext, u64)> {
    let ptr = VCPUS.get(vcpu.0 as usize)?.load(Ordering::Acquire);
    // SAFETY: reading two fields that never change after `install`; the state
    // is not freed while its domain exists.
    unsafe { ptr.as_ref() }.map(|s| (s.domain, s.vmpidr))
}

/// The vCPU this CPU has loaded, if any.
pub fn loaded(cpu: usize) -> Option<VcpuId> {
    LOADS.loaded(cpu)
}

/// Runs `f` on the state of the vCPU this CPU runs.
pub fn with_loaded<R>(cpu: usize, f: impl FnOnce(&mut VcpuState) -> R) -> Option<R> {
    let vcpu = loaded(cpu)?;
    let ptr = VCPUS.get(vcpu.0 as usize)?.load(Ordering::Acquire);
    // SAFETY: the vCPU is loaded on this CPU, so no other CPU touches its state
    // (module invariant), and the pointer came from Box::into_raw.
    unsafe { ptr.as_mut() }.map(f)
}

/// Marks the start of exception handling on this CPU: `frame` is what the
/// handler will return into.
pub fn enter_handler(cpu: usize, frame: &mut TrapFrame) {
    if let Some(slot) = CURRENT_FRAME.get(cpu) {
        slot.store(frame, Ordering::Relaxed);
    }
}

/// Marks the end of exception handling on this CPU. When the handler
/// returns into a guest, the co-residency checker learns which domain the
/// CPU really enters: the owner of the VMID in VTTBR_EL2, as loaded.
pub fn leave_handler(cpu: usize) {
    let Some(slot) = CURRENT_FRAME.get(cpu) else {
        return;
    };
    let frame = slot.swap(core::ptr::null_mut(), Ordering::Relaxed);
    // SAFETY: set by `enter_handler` on this CPU for the exception being
    // handled; the frame lives on this CPU's stack until the handler returns.
    if let Some(frame) = unsafe { frame.as_ref() }
        && frame.returns_to_guest()
    {
        super::runtime::RUNTIME.entering(cpu, u32::from(loaded_vmid()));
    }
}

/// The VMID of the stage 2 this CPU has loaded.
fn loaded_vmid() -> u8 {
    // Our VMIDs are 8-bit (VTCR_EL2.VS = 0): the upper byte of the field is 0.
    VTTBR_EL2.read(VTTBR_EL2::VMID) as u8
}

/// Where a CPU switched to idle resumes, at EL2 with `x0` = the idle loop's
/// stack pointer (`super::idle_stack`). The `eret` that gets here leaves SP
/// where the replaced context had it: for a vCPU entered from the idle loop,
/// inside that loop's old frames, so without the reset every vCPU-to-idle
/// switch would sink the stack a little further, until it overflowed into
/// the heap (the EL2 jumps to 0x0 and 0x11 of issue 14's contended Linux run).
/// Naked: no Rust code may run on the old stack pointer first.
#[unsafe(naked)]
extern "C" fn idle_entry() -> ! {
    core::arch::naked_asm!(
        // 0: the CPU has no recorded idle stack (it never reached its idle
        // loop); stay on the current one.
        "cbz x0, 1f",
        "mov sp, x0",
        "1:",
        "b {idle}",
        idle = sym idle_on_fresh_stack,
    )
}

extern "C" fn idle_on_fresh_stack() -> ! {
    super::idle()
}

/// [`sched::Platform::switch_to`]: saves what `cpu` runs, loads `context`
/// (timed for the switch-cost figures).
pub fn switch_to(cpu: usize, context: CpuContext) {
    let started = super::switchcost::start();
    save_and_load(cpu, context);
    super::switchcost::save_load_done(started);
}

/// Makes the handler's `eret` enter the idle loop, on its own stack.
fn enter_idle(cpu: usize, frame: &mut TrapFrame) {
    frame.x[0] = super::idle_stack(cpu);
    frame.elr = idle_entry as *const () as u64;
    frame.spsr = SPSR_EL2H;
}

fn save_and_load(cpu: usize, context: CpuContext) {
    // Whatever this CPU entered is no longer loaded; what it enters next is
    // logged when it does (`leave_handler`).
    super::runtime::RUNTIME.switched(cpu);
    let Some(frame_ptr) = CURRENT_FRAME.get(cpu).map(|f| f.load(Ordering::Relaxed)) else {
        return;
    };
    // SAFETY: set by `enter_handler` on this CPU for the exception being handled;
    // the frame lives on this CPU's stack until the handler returns.
    let Some(frame) = (unsafe { frame_ptr.as_mut() }) else {
        error!("vcpu: cpu {cpu} asked to switch outside an exception handler; ignored");
        return;
    };
    let now = platform::arch::aarch64::timer::now_ns();
    let mut old_debug = None;
    if let Some(old) = loaded(cpu) {
        let ptr = VCPUS[old.0 as usize].load(Ordering::Acquire);
        // SAFETY: `old` is loaded on this CPU (module invariant).
        if let Some(state) = unsafe { ptr.as_mut() } {
            state.frame = frame.clone();
            if !FP_SWITCH_BROKEN.load(Ordering::Relaxed) {
                state.fp.save();
            }
            state.timer_rises_consumed = super::guest_timer::consumed_rises(super::GIC.get(), cpu);
            state.el1.save();
            super::vgic::put(&mut state.gic);
            old_debug = Some(&mut state.debug);
        }
    }
    match context {
        CpuContext::Idle => {
            super::guest_timer::on_switch_out(super::GIC.get(), cpu, true);
            debug_regs::switch(old_debug, None);
            enter_idle(cpu, frame);
            LOADS.switch(cpu, None, now);
        }
        CpuContext::Vcpu(new) => {
            let ptr = VCPUS
                .get(new.0 as usize)
                .map_or(core::ptr::null_mut(), |s| s.load(Ordering::Acquire));
            // SAFETY: the scheduler gives `new` to this CPU only (module invariant).
            let Some(state) = (unsafe { ptr.as_mut() }) else {
                error!(
                    "vcpu: cpu {cpu} told to run vCPU {} that has no state; staying idle",
                    new.0
                );
                debug_regs::switch(old_debug, None);
                enter_idle(cpu, frame);
                LOADS.switch(cpu, None, now);
                return;
            };
            super::guest_timer::on_switch_out(super::GIC.get(), cpu, false);
            super::guest_timer::restore_consumed_rises(cpu, state.timer_rises_consumed);
            debug_regs::switch(old_debug, Some(&state.debug));
            *frame = state.frame.clone();
            if !FP_SWITCH_BROKEN.load(Ordering::Relaxed) {
                state.fp.load();
            }
            // SAFETY: we are in the handler that enters this vCPU next.
            unsafe {
                state.el1.restore();
                enter_guest_regime(state.domain.vttbr, state.vmpidr);
            }
            super::speculation::on_entering(cpu, state.domain.domain);
            LOADS.switch(cpu, Some(new), now);
        }
    }
}

/// HCR_EL2 while a guest runs: stage 2 on (VM), physical interrupts to EL2
/// (IMO/FMO/AMO, which also enables virtual interrupts), WFI/WFE trapped (so an
/// idle vCPU gives up its CPU), SMC trapped (PSCI over SMC is emulated), ID
/// group 3 registers trapped (TID3: the guest reads them sanitised, see
/// `hv::arm::idregs`), implementation-defined registers trapped (TIDCP), barriers
/// upgraded to inner-shareable (BSU, FB), EL1 is AArch64 (RW).
fn hcr_guest() -> FieldValue<u64, HCR_EL2::Register> {
    HCR_EL2::VM::Enable
        + HCR_EL2::SWIO::SET
        + HCR_EL2::FMO::EnableVirtualFIQ
        + HCR_EL2::IMO::EnableVirtualIRQ
        + HCR_EL2::AMO::SET
        + HCR_EL2::FB::SET
        + HCR_EL2::BSU::InnerShareable
        + HCR_EL2::TWI::SET
        + HCR_EL2::TWE::SET
        + HCR_EL2::TID3::SET
        + HCR_EL2::TSC::EnableTrapEl1SmcToEl2
        + HCR_EL2::TIDCP::SET
        + HCR_EL2::RW::EL1IsAarch64
}

/// # Safety
/// Call only right before entering the vCPU these values belong to.
unsafe fn enter_guest_regime(vttbr: u64, vmpidr: u64) {
    // Unsafe as a whole, though each write is a safe call: from here EL1
    // translates through the stage-2 tables behind `vttbr`, which must be
    // this vCPU's domain's (the caller's promise) and stay alive while it
    // runs.
    VTTBR_EL2.set(vttbr);
    VMPIDR_EL2.set(vmpidr);
    HCR_EL2.write(hcr_guest());
    barrier::isb(barrier::SY);
}
