//! The running CPU: its logical index, MPIDR, interrupt masking and waiting.

use aarch64_cpu::asm;
use aarch64_cpu::registers::{DAIF, HCR_EL2, MPIDR_EL1, SP, TPIDR_EL2};
use tock_registers::interfaces::{Readable, Writeable};

/// Affinity fields of MPIDR_EL1 (Aff3 in bits 39:32, Aff2..0 in 23:0): the
/// value device trees and PSCI use as a CPU's hardware id.
pub const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// The logical index of the running CPU (set by [`set_index`] at boot).
pub fn index() -> usize {
    TPIDR_EL2.get() as usize
}

/// The running code's stack pointer.
pub fn stack_pointer() -> u64 {
    SP.get()
}

/// Records the running CPU's logical index; called once per CPU at boot.
pub fn set_index(index: usize) {
    TPIDR_EL2.set(index as u64);
}

/// The running CPU's MPIDR affinity.
pub fn mpidr() -> u64 {
    MPIDR_EL1.get() & MPIDR_AFFINITY_MASK
}

/// The running CPU's MPIDR_EL1 as read, MT bit and RES1 bit 31 included:
/// what the CPU says about its own place in the machine.
pub fn mpidr_raw() -> u64 {
    MPIDR_EL1.get()
}

/// Routes physical IRQs, FIQs and SErrors to EL2 (HCR_EL2.IMO/FMO/AMO): without
/// them an interrupt targets EL1 and stays masked while the hypervisor runs.
/// Lower ELs run AArch64 (RW).
pub fn route_interrupts_to_el2() {
    HCR_EL2.write(
        HCR_EL2::RW::EL1IsAarch64 + HCR_EL2::IMO::SET + HCR_EL2::FMO::SET + HCR_EL2::AMO::SET,
    );
}

/// Prepares this CPU's EL2 controls for running guests: stage-2 format
/// (`vtcr`, from the stage-2 module), FP/SIMD not trapped (CPTR_EL2 = its RES1
/// bits only), and guests get the physical counter but not the physical timer
/// (CNTHCTL_EL2.EL1PCTEN = 1, EL1PCEN = 0), which the hypervisor does not
/// context-switch; guests use the virtual timer. Virtual counter offset 0.
/// PMU and debug register accesses of guests trap (MDCR_EL2).
pub fn configure_for_guests(vtcr: u64) {
    const CPTR_EL2_RES1: u64 = 0x33ff;
    const CNTHCTL_EL1PCTEN: u64 = 1 << 0;
    // MDCR_EL2: guests' PMU (TPM, TPMCR) and debug/OS-lock/ROM-table (TDA,
    // TDOSA, TDRA) accesses trap, and the hypervisor makes them read as zero
    // and ignores writes: it switches none of that state between guests, and
    // hides the PMU in ID_AA64DFR0_EL1. HPMN (bits 4:0) keeps its reset value.
    const MDCR_TRAPS: u64 = (1 << 5) | (1 << 6) | (1 << 9) | (1 << 10) | (1 << 11);
    let mut mdcr: u64;
    // SAFETY: reading MDCR_EL2 has no side effects.
    unsafe { core::arch::asm!("mrs {}, mdcr_el2", out(reg) mdcr) };
    mdcr |= MDCR_TRAPS;
    // SAFETY: only changes which EL1/EL0 debug and PMU accesses trap to EL2.
    unsafe { core::arch::asm!("msr mdcr_el2, {}", in(reg) mdcr) };
    // SAFETY: these registers only shape how lower ELs run; no guest runs yet
    // on this CPU, and the hypervisor's own execution does not depend on them.
    unsafe {
        core::arch::asm!(
            "msr vtcr_el2, {vtcr}",
            "msr cptr_el2, {cptr}",
            "msr cnthctl_el2, {cnthctl}",
            "msr cntvoff_el2, xzr",
            "isb",
            vtcr = in(reg) vtcr,
            cptr = in(reg) CPTR_EL2_RES1,
            cnthctl = in(reg) CNTHCTL_EL1PCTEN,
        )
    };
}

/// `ID_AA64MMFR0_EL1.PARange`: the physical address size this CPU supports.
pub fn physical_address_range() -> u8 {
    let value: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe { core::arch::asm!("mrs {}, id_aa64mmfr0_el1", out(reg) value) };
    (value & 0xf) as u8
}

/// The physical address size in bits (ID_AA64MMFR0_EL1.PARange decoded).
pub fn physical_address_bits() -> u32 {
    match physical_address_range() {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    }
}

/// Unmasks IRQs at EL2.
pub fn enable_irqs() {
    DAIF.write(DAIF::I::Unmasked + DAIF::F::Unmasked + DAIF::A::Unmasked + DAIF::D::Masked);
}

/// Runs `f` with IRQs masked, restoring the previous mask afterwards.
pub fn without_irqs<T>(f: impl FnOnce() -> T) -> T {
    let saved = DAIF.get();
    DAIF.write(DAIF::I::Masked + DAIF::F::Masked);
    let result = f();
    DAIF.set(saved);
    result
}

/// Sleeps until an interrupt (or a spurious wake-up).
pub fn wait_for_interrupt() {
    asm::wfi();
}

/// Parks this CPU forever with interrupts masked: used after a fatal error.
pub fn park() -> ! {
    DAIF.write(DAIF::I::Masked + DAIF::F::Masked);
    loop {
        asm::wfe();
    }
}
