//! EL2 exceptions: the vector table, the saved-register frame, and dispatch to
//! the IRQ handler the hypervisor registers. An exception nobody expects prints
//! ESR/ELR/FAR and the CPU, then parks that CPU (the others go on).

use aarch64_cpu::registers::{ESR_EL2, FAR_EL2, SPSR_EL2, VBAR_EL2};
use core::sync::atomic::{AtomicUsize, Ordering};
use tock_registers::interfaces::{Readable, Writeable};

use super::{console, cpu};

core::arch::global_asm!(include_str!("vectors.S"), options(raw));

unsafe extern "C" {
    static exception_vectors: u8;
}

/// The registers saved on exception entry, in the order `vectors.S` stores them.
#[repr(C, align(16))]
#[derive(Clone, Debug)]
pub struct TrapFrame {
    /// x0..x30.
    pub x: [u64; 31],
    /// ELR_EL2: where the exception returns to.
    pub elr: u64,
    /// SPSR_EL2: the interrupted PSTATE.
    pub spsr: u64,
    /// Padding to keep the frame 16-byte aligned.
    pub _pad: u64,
}

impl TrapFrame {
    /// Whether the exception returns to a guest (EL0 or EL1, by the mode in
    /// the saved SPSR), not to the hypervisor's own EL2 code.
    pub fn returns_to_guest(&self) -> bool {
        let mode = SPSR_EL2::M.read(self.spsr);
        mode != SPSR_EL2::M::EL2t.value && mode != SPSR_EL2::M::EL2h.value
    }
}

// Must match FRAME_SIZE in vectors.S.
const _: () = assert!(core::mem::size_of::<TrapFrame>() == 34 * 8);

/// A vCPU's FP/SIMD registers while it is not on a CPU.
///
/// The hypervisor is built soft-float: no code of its own uses these
/// registers, so a guest's values stay in the CPU across its exits (the
/// vectors do not save them) and move only when the CPU switches to another
/// context: [`FpState::save`] for the vCPU that leaves, [`FpState::load`]
/// for the one that arrives. Every register is loaded, so nothing the
/// previous vCPU left reaches the next.
#[repr(C, align(16))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FpState {
    /// q0..q31 as little-endian 128-bit values.
    pub q: [u128; 32],
    /// FPCR.
    pub fpcr: u64,
    /// FPSR.
    pub fpsr: u64,
}

// The offsets `save` and `load` use.
const _: () = assert!(core::mem::offset_of!(FpState, fpcr) == 512);
const _: () = assert!(core::mem::offset_of!(FpState, fpsr) == 520);

impl FpState {
    /// Copies this CPU's FP/SIMD registers into `self`.
    ///
    /// Never inlined: `cargo xtask test`'s `fp-free-hypervisor` step checks
    /// that the image's FP/SIMD instructions are all in this function and
    /// [`FpState::load`], which it finds by name.
    #[inline(never)]
    pub fn save(&mut self) {
        // SAFETY: stores 528 bytes into `*self`, which is exactly that large
        // and 16-byte aligned (asserted above); reads registers only.
        // `.arch_extension`: the soft-float target assembles no FP/SIMD
        // instruction without it (it applies to this block only).
        unsafe {
            core::arch::asm!(
                ".arch_extension fp",
                ".arch_extension simd",
                "stp q0, q1, [{p}, #0]",
                "stp q2, q3, [{p}, #32]",
                "stp q4, q5, [{p}, #64]",
                "stp q6, q7, [{p}, #96]",
                "stp q8, q9, [{p}, #128]",
                "stp q10, q11, [{p}, #160]",
                "stp q12, q13, [{p}, #192]",
                "stp q14, q15, [{p}, #224]",
                "stp q16, q17, [{p}, #256]",
                "stp q18, q19, [{p}, #288]",
                "stp q20, q21, [{p}, #320]",
                "stp q22, q23, [{p}, #352]",
                "stp q24, q25, [{p}, #384]",
                "stp q26, q27, [{p}, #416]",
                "stp q28, q29, [{p}, #448]",
                "stp q30, q31, [{p}, #480]",
                "mrs {cr}, fpcr",
                "mrs {sr}, fpsr",
                "str {cr}, [{p}, #512]",
                "str {sr}, [{p}, #520]",
                p = in(reg) core::ptr::from_mut(self),
                cr = out(reg) _,
                sr = out(reg) _,
                options(nostack, preserves_flags),
            );
        }
    }

    /// Loads `self` into this CPU's FP/SIMD registers, all of them.
    /// Never inlined (see [`FpState::save`]).
    #[inline(never)]
    pub fn load(&self) {
        // SAFETY: reads 528 bytes of `*self` (see `save`); the registers it
        // writes belong to the guest about to be entered, never to the
        // soft-float hypervisor, so no code of ours depends on their values.
        unsafe {
            core::arch::asm!(
                ".arch_extension fp",
                ".arch_extension simd",
                "ldp q0, q1, [{p}, #0]",
                "ldp q2, q3, [{p}, #32]",
                "ldp q4, q5, [{p}, #64]",
                "ldp q6, q7, [{p}, #96]",
                "ldp q8, q9, [{p}, #128]",
                "ldp q10, q11, [{p}, #160]",
                "ldp q12, q13, [{p}, #192]",
                "ldp q14, q15, [{p}, #224]",
                "ldp q16, q17, [{p}, #256]",
                "ldp q18, q19, [{p}, #288]",
                "ldp q20, q21, [{p}, #320]",
                "ldp q22, q23, [{p}, #352]",
                "ldp q24, q25, [{p}, #384]",
                "ldp q26, q27, [{p}, #416]",
                "ldp q28, q29, [{p}, #448]",
                "ldp q30, q31, [{p}, #480]",
                "ldr {cr}, [{p}, #512]",
                "ldr {sr}, [{p}, #520]",
                "msr fpcr, {cr}",
                "msr fpsr, {sr}",
                p = in(reg) core::ptr::from_ref(self),
                cr = out(reg) _,
                sr = out(reg) _,
                options(nostack, preserves_flags, readonly),
            );
        }
    }
}

/// Which vector was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExceptionKind {
    /// Synchronous exception at EL2 (a hypervisor bug).
    CurrentSync,
    /// IRQ while at EL2.
    CurrentIrq,
    /// Synchronous exception from a guest (trap, hypercall, abort).
    LowerSync,
    /// IRQ while a guest ran.
    LowerIrq,
    /// A physical FIQ while a guest ran (HCR_EL2.FMO routes them here).
    LowerFiq,
    /// A physical SError while a guest ran (HCR_EL2.AMO), typically the
    /// asynchronous abort of an access the guest made.
    LowerSError,
    /// Anything else (FIQ or SError at EL2, AArch32, SP_EL0 vectors).
    Other(u64),
}

impl ExceptionKind {
    fn from_vector(vector: u64) -> Self {
        match vector {
            4 => Self::CurrentSync,
            5 => Self::CurrentIrq,
            8 => Self::LowerSync,
            9 => Self::LowerIrq,
            10 => Self::LowerFiq,
            11 => Self::LowerSError,
            other => Self::Other(other),
        }
    }
}

/// Installs this CPU's vector table.
pub fn install_vectors() {
    let base = core::ptr::addr_of!(exception_vectors) as u64;
    VBAR_EL2.set(base);
}

/// The hypervisor's interrupt handler, called for every IRQ taken at EL2.
static IRQ_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Registers the function that handles IRQs.
pub fn set_irq_handler(handler: fn(&mut TrapFrame)) {
    IRQ_HANDLER.store(handler as usize, Ordering::Release);
}

/// The hypervisor's handler for synchronous exits from a guest (traps,
/// hypercalls, stage-2 faults).
static GUEST_EXIT_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Registers the function that handles synchronous exits from guests.
pub fn set_guest_exit_handler(handler: fn(&mut TrapFrame)) {
    GUEST_EXIT_HANDLER.store(handler as usize, Ordering::Release);
}

/// An asynchronous exception taken from a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestAsync {
    /// A physical FIQ (the hypervisor uses none).
    Fiq,
    /// A physical SError.
    SError,
}

/// The hypervisor's handler for FIQs and SErrors taken while a guest ran:
/// without one they park the CPU like any unexpected exception.
static GUEST_ASYNC_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Registers the function that handles FIQs and SErrors taken from guests
/// (it stops the domain that ran instead of parking the CPU).
pub fn set_guest_async_handler(handler: fn(&mut TrapFrame, GuestAsync)) {
    GUEST_ASYNC_HANDLER.store(handler as usize, Ordering::Release);
}

fn call_async(frame: &mut TrapFrame, what: GuestAsync) -> bool {
    let handler = GUEST_ASYNC_HANDLER.load(Ordering::Acquire);
    if handler == 0 {
        return false;
    }
    // SAFETY: the only values ever stored are `fn(&mut TrapFrame, GuestAsync)`s.
    let handler: fn(&mut TrapFrame, GuestAsync) = unsafe { core::mem::transmute(handler) };
    handler(frame, what);
    true
}

fn call(handler: &AtomicUsize, frame: &mut TrapFrame) -> bool {
    let handler = handler.load(Ordering::Acquire);
    if handler == 0 {
        return false;
    }
    // SAFETY: the only values ever stored are `fn(&mut TrapFrame)`s.
    let handler: fn(&mut TrapFrame) = unsafe { core::mem::transmute(handler) };
    handler(frame);
    true
}

#[unsafe(no_mangle)]
extern "C" fn exception_dispatch(vector: u64, frame: &mut TrapFrame) {
    match ExceptionKind::from_vector(vector) {
        ExceptionKind::CurrentIrq | ExceptionKind::LowerIrq => {
            call(&IRQ_HANDLER, frame);
        }
        ExceptionKind::LowerSync => {
            if !call(&GUEST_EXIT_HANDLER, frame) {
                unexpected(ExceptionKind::LowerSync, frame);
            }
        }
        kind @ (ExceptionKind::LowerFiq | ExceptionKind::LowerSError) => {
            let what = if kind == ExceptionKind::LowerFiq {
                GuestAsync::Fiq
            } else {
                GuestAsync::SError
            };
            if !call_async(frame, what) {
                unexpected(kind, frame);
            }
        }
        kind => unexpected(kind, frame),
    }
}

fn unexpected(kind: ExceptionKind, frame: &TrapFrame) -> ! {
    let esr = ESR_EL2.get();
    console::write_fmt(format_args!(
        "[cpu{}] ERROR Unexpected exception {:?}: ESR_EL2={:#x} (EC {:#x}) ELR_EL2={:#x} FAR_EL2={:#x} SPSR={:#x}; parking this CPU\n",
        cpu::index(),
        kind,
        esr,
        (esr >> 26) & 0x3f,
        frame.elr,
        FAR_EL2.get(),
        frame.spsr,
    ));
    cpu::park()
}
