//! EL2 exceptions: the vector table, the saved-register frame, and dispatch to
//! the IRQ handler the hypervisor registers. An exception nobody expects prints
//! ESR/ELR/FAR and the CPU, then parks that CPU (the others go on).

use aarch64_cpu::registers::{ESR_EL2, FAR_EL2, VBAR_EL2};
use core::sync::atomic::{AtomicUsize, Ordering};
use tock_registers::interfaces::{Readable, Writeable};

use super::{console, cpu};

core::arch::global_asm!(include_str!("vectors.S"), options(raw));

unsafe extern "C" {
    static exception_vectors: u8;
}

/// The registers saved on exception entry, in the order `vectors.S` stores them.
#[repr(C)]
#[derive(Debug)]
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

const _: () = assert!(core::mem::size_of::<TrapFrame>() == 34 * 8);

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
    /// Anything else (FIQ, SError, AArch32, SP_EL0 vectors).
    Other(u64),
}

impl ExceptionKind {
    fn from_vector(vector: u64) -> Self {
        match vector {
            4 => Self::CurrentSync,
            5 => Self::CurrentIrq,
            8 => Self::LowerSync,
            9 => Self::LowerIrq,
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

#[unsafe(no_mangle)]
extern "C" fn exception_dispatch(vector: u64, frame: &mut TrapFrame) {
    match ExceptionKind::from_vector(vector) {
        ExceptionKind::CurrentIrq | ExceptionKind::LowerIrq => {
            let handler = IRQ_HANDLER.load(Ordering::Acquire);
            if handler != 0 {
                // SAFETY: the only value ever stored is a `fn(&mut TrapFrame)`.
                let handler: fn(&mut TrapFrame) = unsafe { core::mem::transmute(handler) };
                handler(frame);
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
