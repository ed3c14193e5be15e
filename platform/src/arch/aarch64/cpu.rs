//! The running CPU: its logical index, MPIDR, interrupt masking and waiting.

use aarch64_cpu::asm;
use aarch64_cpu::registers::{
    CNTHCTL_EL2, CNTVOFF_EL2, CPTR_EL2, DAIF, HCR_EL2, ID_AA64MMFR0_EL1, MDCR_EL2, MPIDR_EL1, SP,
    TPIDR_EL2, VTCR_EL2,
};
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};
use tock_registers::register_bitfields;

// aarch64-cpu's CPTR_EL2 has only TAM; these are the fields of its
// non-VHE layout (Arm ARM D19.2.31) this hypervisor sets.
register_bitfields! {u64,
    CptrEl2 [
        /// RES1 bits 7:0.
        RES1_LOW OFFSET(0) NUMBITS(8) [],
        /// Trap SVE (RES1 without FEAT_SVE).
        TZ OFFSET(8) NUMBITS(1) [],
        /// RES1.
        RES1_9 OFFSET(9) NUMBITS(1) [],
        /// Trap FP/SIMD.
        TFP OFFSET(10) NUMBITS(1) [],
        /// Trap SME (RES1 without FEAT_SME).
        TSM OFFSET(12) NUMBITS(1) [],
        /// RES1.
        RES1_13 OFFSET(13) NUMBITS(1) []
    ]
}

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
/// bits only), guests own the EL1 physical counter and timer
/// (CNTHCTL_EL2.EL1PCTEN, EL1PCEN: the hypervisor's tick is the EL2 timer,
/// and the switch saves and restores the EL1 timers), virtual counter offset
/// 0. Guests' PMU accesses trap (the hypervisor hides the PMU), and so do
/// their debug, OS-lock and ROM-table accesses until the hypervisor hands a
/// vCPU its debug registers ([`trap_guest_debug`]).
pub fn configure_for_guests(vtcr: u64) {
    // FP/SIMD reach the guest untrapped (the switch saves and restores
    // them); SVE and SME, which guests are not offered, trap.
    let cptr = CptrEl2::RES1_LOW.val(0xff)
        + CptrEl2::TZ::SET
        + CptrEl2::RES1_9::SET
        + CptrEl2::TFP::CLEAR
        + CptrEl2::TSM::SET
        + CptrEl2::RES1_13::SET;
    MDCR_EL2.modify(
        MDCR_EL2::TPM::SET
            + MDCR_EL2::TPMCR::SET
            + MDCR_EL2::TDA::SET
            + MDCR_EL2::TDOSA::SET
            + MDCR_EL2::TDRA::SET
            + MDCR_EL2::TDE::CLEAR,
    );
    CNTHCTL_EL2.write(CNTHCTL_EL2::EL1PCTEN::SET + CNTHCTL_EL2::EL1PCEN::SET);
    CNTVOFF_EL2.set(0);
    VTCR_EL2.set(vtcr);
    CPTR_EL2.set(cptr.value);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// Whether guest accesses to the debug and OS-lock registers trap to EL2
/// (MDCR_EL2.TDA, TDOSA): on while the loaded vCPU has not touched them, off
/// once it owns them (its values are then loaded on this CPU).
pub fn trap_guest_debug(trap: bool) {
    if trap {
        MDCR_EL2.modify(MDCR_EL2::TDA::SET + MDCR_EL2::TDOSA::SET);
    } else {
        MDCR_EL2.modify(MDCR_EL2::TDA::CLEAR + MDCR_EL2::TDOSA::CLEAR);
    }
}

/// `ID_AA64MMFR0_EL1.PARange`: the physical address size this CPU supports.
pub fn physical_address_range() -> u8 {
    ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::PARange) as u8
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

/// The `yield` hint: this CPU is busy-waiting (`crate::sync::cpu_relax`).
#[inline(always)]
pub fn spin_yield() {
    // SAFETY: `yield` is a hint with no architectural effect on registers,
    // memory or flags; it only tells the core (or the emulator) that this
    // CPU is spinning.
    unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
}

/// Parks this CPU forever with interrupts masked: used after a fatal error.
pub fn park() -> ! {
    DAIF.write(DAIF::I::Masked + DAIF::F::Masked);
    loop {
        asm::wfe();
    }
}
