//! What a guest's CPUID and non-APIC MSRs answer: the host's CPUID with
//! virtualization, topology and power features hidden, the hypervisor's own
//! leaves (`guest_abi::x86`), and safe defaults for MSRs.

use guest_abi::x86::{CPUID_SIGNATURE_LEAF, CPUID_TIMING_LEAF, SIGNATURE, msr};

use super::fpu::{XCR0_AVX, cpuid_leaf_0xd};
use super::vmcb::cr;

/// CPUID register values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuidRegs {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// Leaf 1 ECX: VMX.
const L1_ECX_VMX: u32 = 1 << 5;
/// Leaf 1 ECX: MONITOR/MWAIT (MWAIT is not intercepted-safe here).
const L1_ECX_MONITOR: u32 = 1 << 3;
/// Leaf 1 ECX: x2APIC (the virtual APIC has it).
const L1_ECX_X2APIC: u32 = 1 << 21;
/// Leaf 1 ECX: TSC-deadline timer (the virtual APIC has it).
const L1_ECX_TSC_DEADLINE: u32 = 1 << 24;
/// Leaf 1 ECX: XSAVE and OSXSAVE (shown when the guest is offered XSAVE;
/// OSXSAVE then mirrors its CR4.OSXSAVE).
const L1_ECX_XSAVE: u32 = 1 << 26;
/// Leaf 1 ECX: OSXSAVE.
const L1_ECX_OSXSAVE: u32 = 1 << 27;
/// Leaf 1 ECX: the features whose registers are the AVX state (AVX, FMA,
/// F16C): only with the AVX component.
const L1_ECX_AVX_STATE: u32 = (1 << 28) | (1 << 12) | (1 << 29);
/// Leaf 7 EBX: AVX2 (AVX state).
const L7_EBX_AVX2: u32 = 1 << 5;
/// Leaf 7 EBX: the AVX-512 features, whose state (opmask, ZMM) is never
/// offered.
const L7_EBX_AVX512: u32 =
    (1 << 16) | (1 << 17) | (1 << 21) | (1 << 26) | (1 << 27) | (1 << 28) | (1 << 30) | (1 << 31);
/// Leaf 7 ECX: the AVX-512 features there (VBMI, VBMI2, VNNI, BITALG,
/// VPOPCNTDQ) and the VEX/EVEX-encoded GFNI/VAES/VPCLMULQDQ forms.
const L7_ECX_AVX512: u32 = (1 << 1) | (1 << 6) | (1 << 11) | (1 << 12) | (1 << 14);
/// Leaf 1 ECX: "running under a hypervisor".
const L1_ECX_HYPERVISOR: u32 = 1 << 31;
/// Leaf 1 EDX: local APIC present.
const L1_EDX_APIC: u32 = 1 << 9;
/// Leaf 7 ECX: protection keys for user pages (PKU) and OSPKE: PKRU is not
/// switched between domains, so the guests do not get them.
const L7_ECX_PKU: u32 = (1 << 3) | (1 << 4);
/// Leaf 0x80000001 ECX: SVM.
const EXT1_ECX_SVM: u32 = 1 << 2;
/// Leaf 0x80000001 ECX: topology extensions (leaf 0x8000001E).
const EXT1_ECX_TOPOEXT: u32 = 1 << 22;
/// Leaf 0x80000001 ECX: the core performance counter extensions (six
/// counters at 0xC0010200): hidden with the rest of the PMU.
const EXT1_ECX_PERFCTR_CORE: u32 = 1 << 23;

/// The vCPU a CPUID is answered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestCpu {
    /// Its APIC id (= its index in the domain).
    pub apic_id: u32,
    /// How many vCPUs its domain has.
    pub vcpus: u32,
    /// How many of them form one core as the guest sees it (its sched unit
    /// at core granularity, whose vCPUs always run together on one core's
    /// threads); 1 elsewhere.
    pub threads_per_core: u32,
    /// The TSC frequency, kHz.
    pub tsc_khz: u32,
    /// The XSAVE components (XCR0 bits) the guest is offered; 0: no XSAVE
    /// (the host has none).
    pub xsave: u64,
    /// Its XCR0 (leaf 0xD.0 EBX depends on it).
    pub xcr0: u64,
    /// Its CR4.OSXSAVE (leaf 1 ECX's OSXSAVE mirrors it).
    pub osxsave: bool,
    /// Its local APIC is enabled in IA32_APIC_BASE (leaf 1 EDX's APIC bit
    /// follows it, as on hardware).
    pub apic_enabled: bool,
}

/// What the guest's CPUID answers for `leaf`/`subleaf`, given the host's
/// answer `host`, for vCPU `cpu`.
///
/// - Leaf 1: the APIC id and logical-CPU count are the vCPU's; VMX and
///   MONITOR hidden; x2APIC, TSC-deadline and "hypervisor" set; XSAVE as
///   offered (`GuestCpu::xsave`), OSXSAVE as the guest's CR4 says, AVX (and
///   FMA, F16C, leaf 7's AVX2) only with the AVX component; AVX-512 never.
/// - Leaf 0xD: the offered components and their sizes
///   (`fpu::cpuid_leaf_0xd`).
/// - Leaves 0xB/0x1F: `threads_per_core` threads per core (the APIC id's
///   low bits), `vcpus` logical CPUs in the package.
/// - 0x80000001: SVM hidden, topology extensions shown; 0x8000000A (SVM)
///   reads as zero.
/// - AMD's topology leaves, which Linux on an AMD CPU reads instead of 0xB:
///   0x80000008 ECX (the package's `vcpus` cores), 0x8000001D (the caches
///   with their sharing: L1 and L2 per core, L3 the whole package) and
///   0x8000001E (core id and threads per core).
/// - 0x40000000/0x40000010: the hypervisor's signature and timing leaves.
pub fn cpuid(leaf: u32, subleaf: u32, host: CpuidRegs, cpu: &GuestCpu) -> CpuidRegs {
    let GuestCpu {
        apic_id,
        vcpus,
        threads_per_core,
        tsc_khz,
        xsave,
        xcr0,
        osxsave,
        apic_enabled,
    } = *cpu;
    // Bits of the APIC id that number a thread in its core, and a core's
    // threads and the package's CPUs in it.
    let bits = |count: u32| 32 - count.max(1).saturating_sub(1).leading_zeros();
    let smt_shift = bits(threads_per_core);
    let mut r = host;
    match leaf {
        1 => {
            r.ebx = (r.ebx & 0x0000_ffff) | (vcpus.min(255) << 16) | (apic_id.min(255) << 24);
            r.ecx &= !(L1_ECX_VMX | L1_ECX_MONITOR | L1_ECX_XSAVE | L1_ECX_OSXSAVE);
            r.ecx |= L1_ECX_X2APIC | L1_ECX_TSC_DEADLINE | L1_ECX_HYPERVISOR;
            if xsave != 0 {
                r.ecx |= L1_ECX_XSAVE;
            }
            if xsave != 0 && osxsave {
                r.ecx |= L1_ECX_OSXSAVE;
            }
            if xsave & XCR0_AVX == 0 {
                r.ecx &= !L1_ECX_AVX_STATE;
            }
            if apic_enabled {
                r.edx |= L1_EDX_APIC;
            } else {
                r.edx &= !L1_EDX_APIC;
            }
        }
        5 | 6 => r = CpuidRegs::default(),
        0xd => {
            let [eax, ebx, ecx, edx] = cpuid_leaf_0xd(subleaf, xsave, xcr0);
            r = CpuidRegs { eax, ebx, ecx, edx };
        }
        7 if subleaf == 0 => {
            r.ecx &= !(L7_ECX_PKU | L7_ECX_AVX512);
            r.ebx &= !L7_EBX_AVX512;
            if xsave & XCR0_AVX == 0 {
                r.ebx &= !L7_EBX_AVX2;
            }
        }
        0xb | 0x1f => {
            r = match subleaf {
                // SMT level: the core's threads.
                0 => CpuidRegs {
                    eax: smt_shift,
                    ebx: threads_per_core.max(1),
                    ecx: 1 << 8,
                    edx: apic_id,
                },
                // Core level: the package's `vcpus` logical CPUs.
                1 => CpuidRegs {
                    eax: bits(vcpus).max(smt_shift),
                    ebx: vcpus,
                    ecx: (2 << 8) | 1,
                    edx: apic_id,
                },
                _ => CpuidRegs {
                    eax: 0,
                    ebx: 0,
                    ecx: subleaf & 0xff,
                    edx: apic_id,
                },
            };
        }
        CPUID_SIGNATURE_LEAF => {
            let word = |i: usize| {
                u32::from_le_bytes([
                    SIGNATURE[i],
                    SIGNATURE[i + 1],
                    SIGNATURE[i + 2],
                    SIGNATURE[i + 3],
                ])
            };
            r = CpuidRegs {
                eax: CPUID_TIMING_LEAF,
                ebx: word(0),
                ecx: word(4),
                edx: word(8),
            };
        }
        CPUID_TIMING_LEAF => {
            r = CpuidRegs {
                eax: tsc_khz,
                ebx: super::vlapic::APIC_BUS_KHZ as u32,
                ecx: 0,
                edx: 0,
            };
        }
        0x4000_0001..=0x4000_00ff => r = CpuidRegs::default(),
        0x8000_0001 => {
            r.ecx = (r.ecx & !(EXT1_ECX_SVM | EXT1_ECX_PERFCTR_CORE)) | EXT1_ECX_TOPOEXT;
        }
        0x8000_0008 => {
            // NC (cores - 1, here logical CPUs - 1) and the APIC id bits
            // that number them.
            r.ecx = (r.ecx & !0xf0ff) | (bits(vcpus) << 12) | (vcpus.max(1) - 1).min(0xff);
        }
        0x8000_001d => {
            // The host's cache descriptors with the guest's sharing (EAX
            // 25:14, CPUs sharing it - 1); no cache (type 0) stays none.
            let level = (r.eax >> 5) & 0b111;
            if r.eax & 0x1f != 0 {
                let sharing = match level {
                    1 | 2 => threads_per_core.max(1),
                    _ => vcpus.max(1).next_power_of_two(),
                };
                r.eax = (r.eax & !(0xfff << 14)) | ((sharing - 1) << 14);
            }
        }
        0x8000_001e => {
            r = CpuidRegs {
                eax: apic_id,
                // Core id, and threads per core - 1.
                ebx: ((threads_per_core.max(1) - 1) << 8) | ((apic_id >> smt_shift) & 0xff),
                // Node 0, one node per package.
                ecx: 0,
                edx: 0,
            }
        }
        0x8000_000a => r = CpuidRegs::default(),
        _ => {}
    }
    r
}

/// MSRs a guest may read and write freely: their values live in the VMCB
/// (loaded and saved by VMLOAD/VMSAVE or VMRUN), so the glue stores them
/// there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmcbMsr {
    /// IA32_EFER (SVME forced on in the VMCB, hidden from the guest).
    Efer,
    /// IA32_PAT.
    Pat,
    /// FS base.
    FsBase,
    /// GS base.
    GsBase,
    /// KernelGSbase.
    KernelGsBase,
    /// STAR.
    Star,
    /// LSTAR.
    Lstar,
    /// CSTAR.
    Cstar,
    /// SFMASK.
    Sfmask,
    /// SYSENTER_CS.
    SysenterCs,
    /// SYSENTER_ESP.
    SysenterEsp,
    /// SYSENTER_EIP.
    SysenterEip,
}

/// How the glue answers one MSR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsrClass {
    /// A register of the virtual local APIC (x2APIC range or TSC deadline).
    Apic,
    /// Kept in the VMCB.
    Vmcb(VmcbMsr),
    /// IA32_APIC_BASE: reads as x2APIC enabled at the usual base; writes
    /// that keep it so are ignored.
    ApicBase,
    /// IA32_TSC_AUX (0xC0000103): the vCPU's own, loaded on its CPU before
    /// entry (RDTSCP and RDPID read it); the upper half is reserved (#GP).
    TscAux,
    /// IA32_MISC_ENABLE (0x1A0): a register of the vCPU's own
    /// ([`misc_enable_write`]); KVM has it for guests of either vendor, and
    /// kvm-unit-tests' msr test reads and writes it.
    MiscEnable,
    /// IA32_TSC (0x10): the vCPU's TSC, the host's plus its VMCB TSC
    /// offset; a write sets the offset (each vCPU its own, as each thread
    /// has its own TSC).
    Tsc,
    /// Reads as a fixed value, writes are ignored (harmless: MTRRs, MCG, the
    /// microcode and platform-info registers a kernel probes).
    Fixed(u64),
    /// Not emulated: the glue injects #GP, as hardware does for an MSR it
    /// does not have.
    Unknown,
}

/// IA32_MISC_ENABLE's index.
const MISC_ENABLE: u32 = 0x1a0;
/// IA32_MISC_ENABLE bit 7: performance monitoring available (read-only;
/// clear: the PMU is hidden).
const MISC_ENABLE_PERF_AVAILABLE: u64 = 1 << 7;
/// IA32_MISC_ENABLE bits 11 and 12: branch trace storage and PEBS
/// unavailable (read-only, set: neither exists here).
const MISC_ENABLE_BTS_PEBS_UNAVAILABLE: u64 = (1 << 11) | (1 << 12);
/// IA32_MISC_ENABLE after reset.
pub const MISC_ENABLE_RESET: u64 = MISC_ENABLE_BTS_PEBS_UNAVAILABLE;

/// A guest's write of `value` to IA32_MISC_ENABLE holding `old`: the new
/// value, or `None` (#GP) if it changes the read-only BTS/PEBS bits; bit 7
/// (performance monitoring available) keeps its value, as KVM does.
pub fn misc_enable_write(old: u64, value: u64) -> Option<u64> {
    if (old ^ value) & MISC_ENABLE_BTS_PEBS_UNAVAILABLE != 0 {
        return None;
    }
    Some((value & !MISC_ENABLE_PERF_AVAILABLE) | (old & MISC_ENABLE_PERF_AVAILABLE))
}

/// The APIC base MSR value: base 0xFEE00000, enabled, x2APIC mode, and BSP
/// for vCPU 0.
pub fn apic_base(bsp: bool) -> u64 {
    0xfee0_0000 | (1 << 11) | (1 << 10) | if bsp { 1 << 8 } else { 0 }
}

/// Classifies MSR `number`.
pub fn classify_msr(number: u32) -> MsrClass {
    match number {
        msr::APIC_BASE => MsrClass::ApicBase,
        msr::TSC_DEADLINE | 0x800..=0x8ff => MsrClass::Apic,
        0x10 => MsrClass::Tsc,
        MISC_ENABLE => MsrClass::MiscEnable,
        0xc000_0080 => MsrClass::Vmcb(VmcbMsr::Efer),
        0x277 => MsrClass::Vmcb(VmcbMsr::Pat),
        0xc000_0100 => MsrClass::Vmcb(VmcbMsr::FsBase),
        0xc000_0101 => MsrClass::Vmcb(VmcbMsr::GsBase),
        0xc000_0102 => MsrClass::Vmcb(VmcbMsr::KernelGsBase),
        0xc000_0081 => MsrClass::Vmcb(VmcbMsr::Star),
        0xc000_0082 => MsrClass::Vmcb(VmcbMsr::Lstar),
        0xc000_0083 => MsrClass::Vmcb(VmcbMsr::Cstar),
        0xc000_0084 => MsrClass::Vmcb(VmcbMsr::Sfmask),
        0x174 => MsrClass::Vmcb(VmcbMsr::SysenterCs),
        0x175 => MsrClass::Vmcb(VmcbMsr::SysenterEsp),
        0x176 => MsrClass::Vmcb(VmcbMsr::SysenterEip),
        0xc000_0103 => MsrClass::TscAux,
        // MTRRcap (no variable ranges), MTRRdefType, fixed/variable MTRRs,
        // MCG_CAP/STATUS, microcode revision, VM_CR (SVM disabled and locked).
        0xfe | 0x2ff | 0x200..=0x26f | 0x179 | 0x17a | 0x8b => MsrClass::Fixed(0),
        0xc001_0114 => MsrClass::Fixed(0x18),
        // AMD NB_CFG: Linux's amd_bus_cpu_online reads and writes it
        // unguarded (the extended PCI config bit, meaningless here).
        0xc001_001f => MsrClass::Fixed(0),
        // AMD's four legacy performance counters and their event selects,
        // which every AMD CPU has and no CPUID bit announces: the PMU is
        // hidden, so they read 0 and ignore writes (as KVM without a PMU);
        // kvm-unit-tests' setup clears them unguarded.
        0xc001_0000..=0xc001_0007 => MsrClass::Fixed(0),
        _ => MsrClass::Unknown,
    }
}

/// The EFER value the guest reads for the VMCB's `efer` (SVME hidden).
pub fn guest_visible_efer(vmcb_efer: u64) -> u64 {
    vmcb_efer & !cr::EFER_SVME
}

/// Whether the guest may write `value` to `msr`, as hardware checks it
/// (false: #GP). The address MSRs must be canonical (48-bit): the host
/// loads them with VMLOAD before VMRUN, where a non-canonical base could
/// fault in the hypervisor rather than in the guest. Each PAT entry must be a
/// defined memory type (0, 1, 4, 5, 6 or 7).
pub fn vmcb_msr_write_allowed(msr: VmcbMsr, value: u64) -> bool {
    let canonical = {
        let top = value >> 47;
        top == 0 || top == (1 << 17) - 1
    };
    match msr {
        VmcbMsr::FsBase
        | VmcbMsr::GsBase
        | VmcbMsr::KernelGsBase
        | VmcbMsr::Lstar
        | VmcbMsr::Cstar
        | VmcbMsr::SysenterEsp
        | VmcbMsr::SysenterEip => canonical,
        VmcbMsr::Pat => value
            .to_le_bytes()
            .iter()
            .all(|&t| matches!(t, 0 | 1 | 4 | 5 | 6 | 7)),
        VmcbMsr::Efer | VmcbMsr::Star | VmcbMsr::Sfmask | VmcbMsr::SysenterCs => true,
    }
}

/// The VMCB EFER for a guest write of `value`: SVME stays set (VMRUN
/// requires it), LMA is the hardware's to set.
pub fn efer_from_guest(value: u64, vmcb_efer: u64) -> u64 {
    (value & !(cr::EFER_SVME | cr::EFER_LMA)) | cr::EFER_SVME | (vmcb_efer & cr::EFER_LMA)
}

/// Where the guest's CPUID shows the feature a CR4 bit needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cr4Needs {
    /// Nothing (CR4.PCE).
    Always,
    /// Leaf 1 EDX bits.
    Leaf1Edx(u32),
    /// Leaf 1 ECX bits.
    Leaf1Ecx(u32),
    /// Leaf 7.0 EBX bits.
    Leaf7Ebx(u32),
    /// Leaf 7.0 ECX bits.
    Leaf7Ecx(u32),
}

/// The CR4 bits a guest may set (SDM vol. 3, 2.5; APM vol. 2, 3.1.3), each
/// with the CPUID feature that makes it exist. Every other bit is reserved
/// and a MOV to CR4 setting it raises #GP: VMXE and SMXE (no VMX or SMX on
/// AMD), bit 15, and what the guest's CPUID does not show.
const CR4_BITS: [(u64, Cr4Needs); 20] = [
    (cr::CR4_VME, Cr4Needs::Leaf1Edx(1 << 1)),
    (cr::CR4_PVI, Cr4Needs::Leaf1Edx(1 << 1)),
    (cr::CR4_TSD, Cr4Needs::Leaf1Edx(1 << 4)),
    (cr::CR4_DE, Cr4Needs::Leaf1Edx(1 << 2)),
    (cr::CR4_PSE, Cr4Needs::Leaf1Edx(1 << 3)),
    (cr::CR4_PAE, Cr4Needs::Leaf1Edx(1 << 6)),
    (cr::CR4_MCE, Cr4Needs::Leaf1Edx(1 << 7)),
    (cr::CR4_PGE, Cr4Needs::Leaf1Edx(1 << 13)),
    (cr::CR4_PCE, Cr4Needs::Always),
    (cr::CR4_OSFXSR, Cr4Needs::Leaf1Edx(1 << 24)),
    (cr::CR4_OSXMMEXCPT, Cr4Needs::Leaf1Edx(1 << 25)),
    (cr::CR4_UMIP, Cr4Needs::Leaf7Ecx(1 << 2)),
    (cr::CR4_LA57, Cr4Needs::Leaf7Ecx(1 << 16)),
    (cr::CR4_FSGSBASE, Cr4Needs::Leaf7Ebx(1 << 0)),
    (cr::CR4_PCIDE, Cr4Needs::Leaf1Ecx(1 << 17)),
    (cr::CR4_OSXSAVE, Cr4Needs::Leaf1Ecx(L1_ECX_XSAVE)),
    (cr::CR4_SMEP, Cr4Needs::Leaf7Ebx(1 << 7)),
    (cr::CR4_SMAP, Cr4Needs::Leaf7Ebx(1 << 20)),
    // PKU, which `cpuid` hides (PKRU is not switched): reserved for guests.
    (cr::CR4_PKE, Cr4Needs::Leaf7Ecx(1 << 3)),
    (cr::CR4_CET, Cr4Needs::Leaf7Ecx(1 << 7)),
];

/// CR3's PCID field (bits 11:0 with CR4.PCIDE).
const CR3_PCID: u64 = 0xfff;

/// What a vCPU's MOV to CR4 is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cr4Context {
    /// Its CPUID leaf 1 (as [`cpuid`] answers it).
    pub leaf1: CpuidRegs,
    /// Its CPUID leaf 7.0.
    pub leaf7: CpuidRegs,
    /// EFER.LMA: long mode is active.
    pub long_mode: bool,
    /// Its CR3 (PCIDE may only be set while its PCID bits are 0).
    pub cr3: u64,
}

/// Why a MOV to CR4 raises #GP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cr4Fault {
    /// Bits the guest's CPU does not have (these).
    Reserved(u64),
    /// PAE cleared, or LA57 changed, in long mode.
    LongModePaging,
    /// PCIDE set outside long mode or with CR3's PCID bits not 0.
    Pcid,
}

impl core::fmt::Display for Cr4Fault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Reserved(bits) => write!(f, "reserved bits {bits:#x}"),
            Self::LongModePaging => write!(f, "PAE cleared or LA57 changed in long mode"),
            Self::Pcid => write!(f, "PCIDE set outside long mode or with CR3[11:0] not 0"),
        }
    }
}

/// A guest's MOV of `value` to CR4 (now `old`): the new CR4, or the #GP
/// hardware would raise. Under SVM a reserved bit would instead make the
/// next VMRUN fail (or be accepted where the host has a feature the guest
/// was not shown), so the hypervisor intercepts the write and checks it.
pub fn cr4_write(value: u64, old: u64, guest: &Cr4Context) -> Result<u64, Cr4Fault> {
    let shown = |needs: Cr4Needs| match needs {
        Cr4Needs::Always => true,
        Cr4Needs::Leaf1Edx(bits) => guest.leaf1.edx & bits == bits,
        Cr4Needs::Leaf1Ecx(bits) => guest.leaf1.ecx & bits == bits,
        Cr4Needs::Leaf7Ebx(bits) => guest.leaf7.ebx & bits == bits,
        Cr4Needs::Leaf7Ecx(bits) => guest.leaf7.ecx & bits == bits,
    };
    let allowed = CR4_BITS
        .iter()
        .filter(|&&(_, needs)| shown(needs))
        .fold(0, |mask, &(bit, _)| mask | bit);
    let reserved = value & !allowed;
    if reserved != 0 {
        return Err(Cr4Fault::Reserved(reserved));
    }
    if guest.long_mode && (value & cr::CR4_PAE == 0 || (value ^ old) & cr::CR4_LA57 != 0) {
        return Err(Cr4Fault::LongModePaging);
    }
    let pcid_set = value & cr::CR4_PCIDE != 0 && old & cr::CR4_PCIDE == 0;
    if pcid_set && (!guest.long_mode || guest.cr3 & CR3_PCID != 0) {
        return Err(Cr4Fault::Pcid);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vCPU with one thread per core.
    fn guest(apic_id: u32, vcpus: u32, tsc_khz: u32) -> GuestCpu {
        GuestCpu {
            apic_id,
            vcpus,
            threads_per_core: 1,
            tsc_khz,
            xsave: 0,
            xcr0: 1,
            osxsave: false,
            apic_enabled: true,
        }
    }

    #[test]
    fn cr4_writes_are_checked_against_the_guests_cpuid_and_mode() {
        // A host with PAE, PGE, FXSR, SSE, XSAVE, SMEP, FSGSBASE, PCID.
        let host1 = CpuidRegs {
            edx: (1 << 6) | (1 << 13) | (1 << 24) | (1 << 25) | (1 << 3) | (1 << 2),
            ecx: L1_ECX_XSAVE | (1 << 17),
            ..CpuidRegs::default()
        };
        let host7 = CpuidRegs {
            ebx: 1 | (1 << 7),
            ecx: L7_ECX_PKU,
            ..CpuidRegs::default()
        };
        let mut vcpu = guest(0, 1, 1_000_000);
        let context = |vcpu: &GuestCpu, long_mode: bool, cr3: u64| Cr4Context {
            leaf1: cpuid(1, 0, host1, vcpu),
            leaf7: cpuid(7, 0, host7, vcpu),
            long_mode,
            cr3,
        };
        let linux = cr::CR4_PAE | cr::CR4_PGE | cr::CR4_OSFXSR | cr::CR4_OSXMMEXCPT;
        let long = context(&vcpu, true, 0x1000);
        assert_eq!(cr4_write(linux, cr::CR4_PAE, &long), Ok(linux));
        assert_eq!(
            cr4_write(linux | cr::CR4_SMEP | cr::CR4_FSGSBASE, linux, &long),
            Ok(linux | cr::CR4_SMEP | cr::CR4_FSGSBASE)
        );
        // kvm-unit-tests' idt_test: every low bit set.
        assert_eq!(
            cr4_write(0xffff_ffff, linux, &long),
            Err(Cr4Fault::Reserved(
                0xffff_ffff
                    & !(linux
                        | cr::CR4_PSE
                        | cr::CR4_DE
                        | cr::CR4_PCE
                        | cr::CR4_FSGSBASE
                        | cr::CR4_PCIDE
                        | cr::CR4_SMEP)
            ))
        );
        // VMXE; PKE (PKU is hidden from guests); OSXSAVE without XSAVE.
        assert!(cr4_write(linux | (1 << 13), linux, &long).is_err());
        assert_eq!(
            cr4_write(linux | cr::CR4_PKE, linux, &long),
            Err(Cr4Fault::Reserved(cr::CR4_PKE))
        );
        assert!(cr4_write(linux | cr::CR4_OSXSAVE, linux, &long).is_err());
        vcpu.xsave = 0b11;
        let long = context(&vcpu, true, 0x1000);
        assert!(cr4_write(linux | cr::CR4_OSXSAVE, linux, &long).is_ok());
        // Long mode: PAE stays, LA57 does not change; PCIDE needs PCID 0
        // in CR3 and long mode.
        assert_eq!(
            cr4_write(cr::CR4_PGE, linux, &long),
            Err(Cr4Fault::LongModePaging)
        );
        assert!(cr4_write(linux | cr::CR4_PCIDE, linux, &long).is_ok());
        assert_eq!(
            cr4_write(linux | cr::CR4_PCIDE, linux, &context(&vcpu, true, 0x1001)),
            Err(Cr4Fault::Pcid)
        );
        assert_eq!(
            cr4_write(cr::CR4_PCIDE, 0, &context(&vcpu, false, 0)),
            Err(Cr4Fault::Pcid)
        );
        // Outside long mode PAE may go.
        assert_eq!(cr4_write(0, linux, &context(&vcpu, false, 0)), Ok(0));
    }

    #[test]
    fn pkru_and_tsc_aux_are_not_shared_between_domains() {
        let host = CpuidRegs {
            ecx: L7_ECX_PKU | 1,
            ..CpuidRegs::default()
        };
        assert_eq!(
            cpuid(7, 0, host, &guest(0, 1, 1)).ecx,
            1,
            "PKU and OSPKE hidden"
        );
        assert_eq!(classify_msr(0xc000_0103), MsrClass::TscAux);
    }

    #[test]
    fn address_msrs_must_be_canonical_and_pat_entries_defined() {
        for msr in [VmcbMsr::FsBase, VmcbMsr::Lstar, VmcbMsr::KernelGsBase] {
            assert!(vmcb_msr_write_allowed(msr, 0x0000_7fff_ffff_f000));
            assert!(vmcb_msr_write_allowed(msr, 0xffff_8000_0000_0000));
            assert!(!vmcb_msr_write_allowed(msr, 0x0000_8000_0000_0000));
            assert!(!vmcb_msr_write_allowed(msr, 0x8000_0000_0000_0000));
        }
        assert!(vmcb_msr_write_allowed(VmcbMsr::Pat, 0x0007_0406_0007_0406));
        assert!(!vmcb_msr_write_allowed(VmcbMsr::Pat, 0x0007_0406_0007_0402));
        assert!(!vmcb_msr_write_allowed(VmcbMsr::Pat, 0x0800_0000_0000_0000));
        assert!(vmcb_msr_write_allowed(VmcbMsr::Star, u64::MAX));
    }

    const HOST: CpuidRegs = CpuidRegs {
        eax: 0x00a0_0f11,
        ebx: 0x0808_0800,
        ecx: 0xfeda_3223 | L1_ECX_VMX | L1_ECX_XSAVE,
        edx: 0x178b_fbff,
    };

    #[test]
    fn virtualization_is_hidden_and_the_apic_is_the_vcpus() {
        let r = cpuid(1, 0, HOST, &guest(3, 4, 1_000_000));
        assert_eq!(r.ebx >> 24, 3);
        assert_eq!((r.ebx >> 16) & 0xff, 4);
        assert_eq!(r.ecx & (L1_ECX_VMX | L1_ECX_XSAVE), 0);
        assert_ne!(r.ecx & L1_ECX_X2APIC, 0);
        assert_ne!(r.ecx & L1_ECX_TSC_DEADLINE, 0);
        assert_ne!(r.ecx & L1_ECX_HYPERVISOR, 0);
        assert_ne!(r.edx & L1_EDX_APIC, 0);
        let disabled = GuestCpu {
            apic_enabled: false,
            ..guest(3, 4, 1_000_000)
        };
        assert_eq!(
            cpuid(1, 0, HOST, &disabled).edx & L1_EDX_APIC,
            0,
            "APIC_BASE.EN clear"
        );
        let ext = CpuidRegs {
            ecx: EXT1_ECX_SVM | EXT1_ECX_TOPOEXT | 1,
            ..HOST
        };
        assert_eq!(
            cpuid(0x8000_0001, 0, ext, &guest(0, 1, 1)).ecx,
            EXT1_ECX_TOPOEXT | 1
        );
        let perf = CpuidRegs {
            ecx: EXT1_ECX_PERFCTR_CORE | 1,
            ..HOST
        };
        assert_eq!(
            cpuid(0x8000_0001, 0, perf, &guest(0, 1, 1)).ecx,
            EXT1_ECX_TOPOEXT | 1,
            "no core performance counters"
        );
        assert_eq!(classify_msr(0xc001_0004), MsrClass::Fixed(0));
        assert_eq!(classify_msr(0x10), MsrClass::Tsc);
        assert_eq!(classify_msr(0x1a0), MsrClass::MiscEnable);
        // kvm-unit-tests' msr: its value with the read-only bits kept.
        let value = (0x4_00c5_0809 & !0x1880) | (MISC_ENABLE_RESET & 0x1880);
        assert_eq!(misc_enable_write(MISC_ENABLE_RESET, value), Some(value));
        assert_eq!(
            misc_enable_write(MISC_ENABLE_RESET, 0),
            None,
            "BTS/PEBS read-only"
        );
        assert_eq!(
            misc_enable_write(MISC_ENABLE_RESET, MISC_ENABLE_RESET | 0x80),
            Some(MISC_ENABLE_RESET),
            "bit 7 ignored"
        );
        assert_eq!(classify_msr(0xc001_0200), MsrClass::Unknown);
        assert_eq!(
            cpuid(0x8000_000a, 0, HOST, &guest(0, 1, 1)),
            CpuidRegs::default()
        );
    }

    #[test]
    fn xsave_and_avx_are_shown_as_offered() {
        let avx = 1 << 28;
        let offered = |xsave, xcr0, osxsave| GuestCpu {
            xsave,
            xcr0,
            osxsave,
            ..guest(0, 1, 1)
        };
        let host = CpuidRegs {
            ecx: HOST.ecx | avx | L1_ECX_OSXSAVE,
            ..HOST
        };
        let none = cpuid(1, 0, host, &offered(0, 1, false));
        assert_eq!(
            none.ecx & (L1_ECX_XSAVE | L1_ECX_OSXSAVE | L1_ECX_AVX_STATE),
            0
        );
        assert_eq!(
            cpuid(0xd, 0, host, &offered(0, 1, false)),
            CpuidRegs::default()
        );
        let off = cpuid(1, 0, host, &offered(0b111, 1, false));
        assert_eq!(
            off.ecx & (L1_ECX_XSAVE | L1_ECX_OSXSAVE | avx),
            L1_ECX_XSAVE | avx
        );
        let on = cpuid(1, 0, host, &offered(0b111, 0b111, true));
        assert_eq!(on.ecx & L1_ECX_OSXSAVE, L1_ECX_OSXSAVE);
        let leaf = cpuid(0xd, 0, host, &offered(0b111, 0b111, true));
        assert_eq!((leaf.eax, leaf.ebx, leaf.ecx), (0b111, 832, 832));
        // Without the AVX component: no AVX, FMA, F16C or AVX2.
        let sse = cpuid(1, 0, host, &offered(0b011, 0b011, true));
        assert_eq!(sse.ecx & L1_ECX_AVX_STATE, 0);
        let l7 = CpuidRegs {
            ebx: L7_EBX_AVX2 | L7_EBX_AVX512 | 1,
            ecx: L7_ECX_AVX512 | 1 << 7,
            ..CpuidRegs::default()
        };
        let with_avx = cpuid(7, 0, l7, &offered(0b111, 0b111, true));
        assert_eq!((with_avx.ebx, with_avx.ecx), (L7_EBX_AVX2 | 1, 1 << 7));
        assert_eq!(cpuid(7, 0, l7, &offered(0b011, 0b011, true)).ebx, 1);
    }

    #[test]
    fn the_hypervisor_leaves_give_signature_and_tsc_frequency() {
        let r = cpuid(CPUID_SIGNATURE_LEAF, 0, HOST, &guest(0, 1, 1));
        let mut name = [0u8; 12];
        name[..4].copy_from_slice(&r.ebx.to_le_bytes());
        name[4..8].copy_from_slice(&r.ecx.to_le_bytes());
        name[8..].copy_from_slice(&r.edx.to_le_bytes());
        assert_eq!(name, SIGNATURE);
        assert_eq!(r.eax, CPUID_TIMING_LEAF);
        let timing = cpuid(CPUID_TIMING_LEAF, 0, HOST, &guest(0, 1, 2_500_000));
        assert_eq!(timing.eax, 2_500_000, "the TSC's kHz");
        assert_eq!(timing.ebx, 100_000, "the APIC timer's bus kHz");
    }

    #[test]
    fn the_topology_leaf_shows_one_thread_per_vcpu() {
        let smt = cpuid(0xb, 0, HOST, &guest(2, 4, 1));
        assert_eq!((smt.eax, smt.ebx, smt.edx), (0, 1, 2));
        let core = cpuid(0xb, 1, HOST, &guest(2, 4, 1));
        assert_eq!((core.eax, core.ebx), (2, 4));
        assert_eq!(cpuid(0xb, 1, HOST, &guest(0, 3, 1)).eax, 2);
        assert_eq!(cpuid(0xb, 2, HOST, &guest(0, 3, 1)).ebx, 0);
    }

    /// A core-scheduled domain's units of two vCPUs are SMT pairs: vCPUs
    /// 2 and 3 are core 1's threads 0 and 1.
    #[test]
    fn the_topology_leaf_shows_the_units_as_smt_siblings() {
        let cpu = |apic_id| GuestCpu {
            apic_id,
            vcpus: 4,
            threads_per_core: 2,
            tsc_khz: 1,
            xsave: 0,
            xcr0: 1,
            osxsave: false,
            apic_enabled: true,
        };
        let smt = cpuid(0xb, 0, HOST, &cpu(3));
        assert_eq!((smt.eax, smt.ebx, smt.edx), (1, 2, 3));
        let core = cpuid(0xb, 1, HOST, &cpu(3));
        assert_eq!((core.eax, core.ebx, core.ecx >> 8 & 0xff), (2, 4, 2));
        // AMD's leaves say the same: core 1, two threads per core; 4
        // logical CPUs in the package; L2 per core, L3 for all.
        let amd = cpuid(0x8000_001e, 0, HOST, &cpu(3));
        assert_eq!((amd.eax, amd.ebx & 0xff, amd.ebx >> 8 & 0xff), (3, 1, 1));
        let cores = cpuid(0x8000_0008, 0, HOST, &cpu(3));
        assert_eq!((cores.ecx & 0xff, cores.ecx >> 12 & 0xf), (3, 2));
        let l2 = CpuidRegs {
            eax: 0x0000_4143 | (7 << 14),
            ..CpuidRegs::default()
        };
        let l3 = CpuidRegs {
            eax: 0x0000_0163 | (15 << 14),
            ..CpuidRegs::default()
        };
        let sharing = |r: CpuidRegs| (r.eax >> 14) & 0xfff;
        assert_eq!(sharing(cpuid(0x8000_001d, 2, l2, &cpu(3))), 1);
        assert_eq!(sharing(cpuid(0x8000_001d, 3, l3, &cpu(3))), 3);
        assert_eq!(
            cpuid(0x8000_001d, 4, CpuidRegs::default(), &cpu(3)),
            CpuidRegs::default(),
            "no more caches"
        );
        // Two threads in a 2-vCPU domain: the core level spans the same bit.
        let pair = GuestCpu { vcpus: 2, ..cpu(1) };
        assert_eq!(cpuid(0xb, 1, HOST, &pair).eax, 1);
    }

    #[test]
    fn msrs_are_classified_and_efer_keeps_svme_hidden() {
        assert_eq!(classify_msr(0x830), MsrClass::Apic);
        assert_eq!(classify_msr(0x6e0), MsrClass::Apic);
        assert_eq!(classify_msr(0x1b), MsrClass::ApicBase);
        assert_eq!(classify_msr(0xc000_0080), MsrClass::Vmcb(VmcbMsr::Efer));
        assert_eq!(classify_msr(0xc001_0114), MsrClass::Fixed(0x18));
        assert_eq!(classify_msr(0x1234_5678), MsrClass::Unknown);
        let vmcb = cr::EFER_LME | cr::EFER_LMA | cr::EFER_SVME;
        assert_eq!(guest_visible_efer(vmcb), cr::EFER_LME | cr::EFER_LMA);
        let written = efer_from_guest(cr::EFER_LME | cr::EFER_NXE, vmcb);
        assert_eq!(
            written,
            cr::EFER_LME | cr::EFER_NXE | cr::EFER_SVME | cr::EFER_LMA
        );
        assert_eq!(apic_base(true) & (1 << 8), 1 << 8);
        assert_eq!(apic_base(false) & (3 << 10), 3 << 10);
    }
}
