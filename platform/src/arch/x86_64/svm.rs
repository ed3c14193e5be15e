//! AMD SVM: what CPUID says about it, and turning it on (EFER.SVME) per CPU.
//! Guests (VMCB, VMRUN, nested paging) come later, with the domain model.

use x86_64::registers::model_specific::{Efer, EferFlags};

use super::cpu;

/// SVM as CPUID describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SvmInfo {
    /// SVM revision (CPUID 0x8000000A EAX[7:0]).
    pub revision: u8,
    /// Nested page tables (CPUID 0x8000000A EDX bit 0).
    pub npt: bool,
    /// Number of ASIDs (CPUID 0x8000000A EBX).
    pub asids: u32,
    /// Intercepts save the next RIP in the VMCB (NRIPS, CPUID 0x8000000A
    /// EDX bit 3); without it the hypervisor decodes instruction lengths.
    pub nrips: bool,
}

/// Which hardware virtualization the CPU offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Virtualization {
    /// AMD SVM.
    Svm(SvmInfo),
    /// Intel VMX only (not supported yet).
    VmxOnly,
    /// Neither.
    None,
}

/// Decodes CPUID: `ext1_ecx` is 0x80000001 ECX, `leaf1_ecx` is 1 ECX, and
/// `svm_leaf` is 0x8000000A (EAX, EBX, EDX) when that leaf exists.
pub fn decode(ext1_ecx: u32, leaf1_ecx: u32, svm_leaf: Option<(u32, u32, u32)>) -> Virtualization {
    if ext1_ecx & (1 << 2) != 0 {
        let (eax, ebx, edx) = svm_leaf.unwrap_or((0, 0, 0));
        Virtualization::Svm(SvmInfo {
            revision: (eax & 0xff) as u8,
            npt: edx & 1 != 0,
            asids: ebx,
            nrips: edx & (1 << 3) != 0,
        })
    } else if leaf1_ecx & (1 << 5) != 0 {
        Virtualization::VmxOnly
    } else {
        Virtualization::None
    }
}

/// Reads the calling CPU's CPUID.
pub fn detect() -> Virtualization {
    let (_, max_ext) = cpu::max_leaves();
    let ext1_ecx = if max_ext >= 0x8000_0001 {
        cpu::cpuid(0x8000_0001, 0).ecx
    } else {
        0
    };
    let svm_leaf = (max_ext >= 0x8000_000a).then(|| {
        let r = cpu::cpuid(0x8000_000a, 0);
        (r.eax, r.ebx, r.edx)
    });
    decode(ext1_ecx, cpu::cpuid(1, 0).ecx, svm_leaf)
}

/// Why SVM could not be enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SvmError {
    /// CPUID has no SVM.
    NotPresent,
    /// EFER.SVME did not stick (firmware may have locked SVM off).
    DidNotEnable,
}

impl core::fmt::Display for SvmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotPresent => write!(f, "the CPU has no SVM"),
            Self::DidNotEnable => write!(f, "EFER.SVME did not stay set"),
        }
    }
}

/// Sets EFER.SVME on the calling CPU and checks it stuck.
///
/// VM_CR.SVMDIS is not read first: not every emulator implements that MSR,
/// and reading it would fault; a locked-off SVM shows as SVME not sticking
/// (or a #GP, reported by the exception handler).
pub fn enable_on_this_cpu() -> Result<(), SvmError> {
    if !matches!(detect(), Virtualization::Svm(_)) {
        return Err(SvmError::NotPresent);
    }
    // SAFETY: SVME only makes the SVM instructions legal; it changes no
    // paging or segmentation state.
    unsafe { Efer::update(|flags| flags.insert(EferFlags::SECURE_VIRTUAL_MACHINE_ENABLE)) };
    if Efer::read().contains(EferFlags::SECURE_VIRTUAL_MACHINE_ENABLE) {
        Ok(())
    } else {
        Err(SvmError::DidNotEnable)
    }
}
