//! The running CPU: its logical index, interrupt masking, halting and CPUID.

use core::arch::x86_64::{__cpuid_count, CpuidResult};

use x86_64::VirtAddr;
use x86_64::instructions::interrupts;
use x86_64::registers::model_specific::GsBase;

/// The logical index of the running CPU (set by [`set_index`] at boot; 0 before).
///
/// Kept in IA32_GS_BASE: nothing else uses GS in the hypervisor, and unlike a
/// table indexed by APIC id it is right even before the APIC is set up.
pub fn index() -> usize {
    GsBase::read().as_u64() as usize
}

/// Records the running CPU's logical index; called once per CPU at boot.
pub fn set_index(index: usize) {
    GsBase::write(VirtAddr::new(index as u64));
}

/// CPUID `leaf`/`subleaf` on this CPU.
pub fn cpuid(leaf: u32, subleaf: u32) -> CpuidResult {
    __cpuid_count(leaf, subleaf)
}

/// CPUID leaf 1, ECX: the processor runs under a hypervisor.
const CPUID1_ECX_HYPERVISOR: u32 = 1 << 31;

/// The vendor signature of the hypervisor this CPU runs under (CPUID leaf
/// 0x4000_0000, read only when leaf 1 says one is present): `TCGTCGTCGTCG`
/// under QEMU's TCG, `KVMKVMKVM\0\0\0` under KVM.
pub fn hypervisor_signature() -> Option<[u8; 12]> {
    if cpuid(1, 0).ecx & CPUID1_ECX_HYPERVISOR == 0 {
        return None;
    }
    let r = cpuid(0x4000_0000, 0);
    let mut signature = [0u8; 12];
    signature[..4].copy_from_slice(&r.ebx.to_le_bytes());
    signature[4..8].copy_from_slice(&r.ecx.to_le_bytes());
    signature[8..].copy_from_slice(&r.edx.to_le_bytes());
    Some(signature)
}

/// The highest basic and extended CPUID leaves.
pub fn max_leaves() -> (u32, u32) {
    (cpuid(0, 0).eax, cpuid(0x8000_0000, 0).eax)
}

/// The vendor string (`AuthenticAMD`, `GenuineIntel`, …).
pub fn vendor() -> [u8; 12] {
    let r = cpuid(0, 0);
    let mut v = [0u8; 12];
    v[..4].copy_from_slice(&r.ebx.to_le_bytes());
    v[4..8].copy_from_slice(&r.edx.to_le_bytes());
    v[8..].copy_from_slice(&r.ecx.to_le_bytes());
    v
}

/// The initial APIC id from CPUID (leaf 0xB's 32-bit x2APIC id when present,
/// else the 8 bits of leaf 1).
pub fn cpuid_apic_id() -> u32 {
    let (max, _) = max_leaves();
    if max >= 0xb {
        let r = cpuid(0xb, 0);
        if r.ebx & 0xffff != 0 {
            return r.edx;
        }
    }
    cpuid(1, 0).ebx >> 24
}

/// Unmasks interrupts (RFLAGS.IF).
pub fn enable_irqs() {
    interrupts::enable();
}

/// Runs `f` with interrupts masked, restoring the previous state afterwards.
pub fn without_irqs<T>(f: impl FnOnce() -> T) -> T {
    interrupts::without_interrupts(f)
}

/// Sleeps until an interrupt: `sti; hlt` so a pending interrupt cannot slip in
/// between unmasking and halting.
pub fn wait_for_interrupt() {
    interrupts::enable_and_hlt();
}

/// Parks this CPU forever with interrupts masked: used after a fatal error.
/// NMIs still wake `hlt`, so it loops.
pub fn park() -> ! {
    interrupts::disable();
    loop {
        x86_64::instructions::hlt();
    }
}
