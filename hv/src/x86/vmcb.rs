//! The Virtual Machine Control Block (AMD64 APM vol. 2, appendix B): a 4 KiB
//! page per vCPU, the control area (intercepts, exit information, event
//! injection) at 0x000 and the guest state save area at 0x400.
//!
//! Only the fields this hypervisor uses are named; the rest are reserved
//! padding. Every named field's offset is checked against the APM at compile
//! time (the `const` block below), so the logic code uses field names, never
//! offsets.

use core::mem::{offset_of, size_of};

/// One segment register in the save area (selector, packed attributes,
/// limit, base).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Selector.
    pub selector: u16,
    /// Attributes, packed: type[3:0], S[4], DPL[6:5], P[7], AVL[8], L[9],
    /// D/B[10], G[11] (descriptor bits 40-47 and 52-55).
    pub attrib: u16,
    /// Limit.
    pub limit: u32,
    /// Base.
    pub base: u64,
}

/// Segment attribute bits.
pub mod attrib {
    /// Code or data (not system).
    pub const S: u16 = 1 << 4;
    /// Present.
    pub const P: u16 = 1 << 7;
    /// 64-bit code.
    pub const L: u16 = 1 << 9;
    /// 32-bit default operand size.
    pub const DB: u16 = 1 << 10;
    /// 4 KiB granularity.
    pub const G: u16 = 1 << 11;
    /// Type: execute/read code, accessed.
    pub const TYPE_CODE: u16 = 0xb;
    /// Type: read/write data, accessed.
    pub const TYPE_DATA: u16 = 0x3;
    /// Type: busy 64-bit TSS.
    pub const TYPE_TSS_BUSY: u16 = 0xb;
    /// Type: LDT.
    pub const TYPE_LDT: u16 = 0x2;
}

/// Intercept bits of [`ControlArea::intercept_misc1`] (APM table B-1,
/// offset 0x00C).
pub mod misc1 {
    /// Physical INTR.
    pub const INTR: u32 = 1 << 0;
    /// Physical NMI.
    pub const NMI: u32 = 1 << 1;
    /// Physical SMI.
    pub const SMI: u32 = 1 << 2;
    /// INIT.
    pub const INIT: u32 = 1 << 3;
    /// Virtual interrupt window.
    pub const VINTR: u32 = 1 << 4;
    /// CPUID.
    pub const CPUID: u32 = 1 << 18;
    /// IRET (intercepted only while a virtual NMI's handler runs: its IRET
    /// ends the NMI blocking).
    pub const IRET: u32 = 1 << 20;
    /// INVD.
    pub const INVD: u32 = 1 << 22;
    /// HLT.
    pub const HLT: u32 = 1 << 24;
    /// IN/OUT through the I/O permission map.
    pub const IOIO_PROT: u32 = 1 << 27;
    /// RDMSR/WRMSR through the MSR permission map.
    pub const MSR_PROT: u32 = 1 << 28;
    /// Shutdown (a triple fault in the guest).
    pub const SHUTDOWN: u32 = 1 << 31;
}

/// Intercept bits of [`ControlArea::intercept_misc2`] (offset 0x010).
pub mod misc2 {
    /// VMRUN (must be set, or VMRUN fails).
    pub const VMRUN: u32 = 1 << 0;
    /// VMMCALL.
    pub const VMMCALL: u32 = 1 << 1;
    /// VMLOAD.
    pub const VMLOAD: u32 = 1 << 2;
    /// VMSAVE.
    pub const VMSAVE: u32 = 1 << 3;
    /// STGI.
    pub const STGI: u32 = 1 << 4;
    /// CLGI.
    pub const CLGI: u32 = 1 << 5;
    /// SKINIT.
    pub const SKINIT: u32 = 1 << 6;
    /// XSETBV.
    pub const XSETBV: u32 = 1 << 13;
}

/// Fields of [`ControlArea::v_intr`] (offset 0x060).
pub mod v_intr {
    /// V_TPR: the guest's CR8 (bits 3:0), which it reads and writes without
    /// an exit under V_INTR_MASKING.
    pub const V_TPR: u64 = 0xf;
    /// V_IRQ: a virtual interrupt is pending.
    pub const V_IRQ: u64 = 1 << 8;
    /// V_INTR_PRIO shift (4 bits).
    pub const PRIO_SHIFT: u32 = 16;
    /// V_IGN_TPR: deliver regardless of the virtual TPR.
    pub const V_IGN_TPR: u64 = 1 << 20;
    /// V_INTR_MASKING: the guest's RFLAGS.IF masks only virtual interrupts;
    /// physical ones stay the host's.
    pub const V_INTR_MASKING: u64 = 1 << 24;
    /// V_INTR_VECTOR shift (8 bits).
    pub const VECTOR_SHIFT: u32 = 32;
}

/// [`ControlArea::event_inj`] fields (APM 15.20): vector[7:0], type[10:8],
/// error code valid[11], valid[31], error code[63:32].
pub mod event_inj {
    /// Valid.
    pub const VALID: u64 = 1 << 31;
    /// Type: external interrupt.
    pub const TYPE_INTR: u64 = 0;
    /// Type: NMI (the vector must be 2).
    pub const TYPE_NMI: u64 = 2 << 8;
    /// Type: exception.
    pub const TYPE_EXCEPTION: u64 = 3 << 8;
    /// The error code field is valid.
    pub const ERROR_CODE_VALID: u64 = 1 << 11;
}

/// Exception vectors the hypervisor intercepts ([`ControlArea::intercept_exceptions`]
/// takes one bit per vector).
pub mod vector {
    /// Debug exception.
    pub const DB: u8 = 1;
    /// Non-maskable interrupt.
    pub const NMI: u8 = 2;
    /// Breakpoint (INT3), a trap.
    pub const BP: u8 = 3;
    /// Overflow (INTO), a trap.
    pub const OF: u8 = 4;
    /// Invalid opcode.
    pub const UD: u8 = 6;
    /// General protection.
    pub const GP: u8 = 13;
    /// Alignment check.
    pub const AC: u8 = 17;
}

/// [`ControlArea::intercept_cr`]: reads of CR0-CR15 in bits 15:0, writes in
/// bits 31:16.
pub mod intercept_cr {
    /// Writes of CR4 (its reserved bits are the guest's CPUID's, which the
    /// hypervisor checks: `super::super::policy::cr4_write`).
    pub const CR4_WRITE: u32 = 1 << (16 + 4);
}

/// [`ControlArea::intercept_dr`]: reads of DR0-DR15 in bits 15:0, writes in
/// bits 31:16.
pub mod intercept_dr {
    /// Every read and write of every debug register.
    pub const ALL: u32 = 0xffff_ffff;
}

/// [`ControlArea::tlb_control`] values.
pub mod tlb_control {
    /// Do nothing.
    pub const NOTHING: u8 = 0;
    /// Flush the guest's (ASID's) TLB entries on VMRUN.
    pub const FLUSH_ASID: u8 = 3;
}

/// The control area (offsets 0x000-0x3FF).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ControlArea {
    /// Intercept CR reads (bits 15:0) and writes (bits 31:16).
    pub intercept_cr: u32,
    /// Intercept DR reads and writes.
    pub intercept_dr: u32,
    /// Intercept exception vectors (bit per vector).
    pub intercept_exceptions: u32,
    /// Instruction and event intercepts ([`misc1`]).
    pub intercept_misc1: u32,
    /// More instruction intercepts ([`misc2`]).
    pub intercept_misc2: u32,
    /// Yet more instruction intercepts.
    pub intercept_misc3: u32,
    _reserved_018: [u8; 0x24],
    /// PAUSE filter threshold.
    pub pause_filter_threshold: u16,
    /// PAUSE filter count.
    pub pause_filter_count: u16,
    /// Physical address of the 12 KiB I/O permission map.
    pub iopm_base_pa: u64,
    /// Physical address of the 8 KiB MSR permission map.
    pub msrpm_base_pa: u64,
    /// Added to the TSC the guest reads.
    pub tsc_offset: u64,
    /// Guest ASID (never 0, the host's).
    pub guest_asid: u32,
    /// TLB control on VMRUN ([`tlb_control`]).
    pub tlb_control: u8,
    _reserved_05d: [u8; 3],
    /// Virtual interrupt control ([`v_intr`]).
    pub v_intr: u64,
    /// Bit 0: the guest is in an interrupt shadow (after STI or MOV SS).
    pub interrupt_shadow: u64,
    /// Why the guest exited ([`super::exit::ExitCode`]).
    pub exit_code: u64,
    /// Exit-specific information 1.
    pub exit_info1: u64,
    /// Exit-specific information 2.
    pub exit_info2: u64,
    /// An event that was being delivered when the exit happened.
    pub exit_int_info: u64,
    /// Bit 0: nested paging enabled.
    pub np_enable: u64,
    _reserved_098: [u8; 0x10],
    /// Event to inject on the next VMRUN ([`event_inj`]).
    pub event_inj: u64,
    /// Nested page table root (host-physical).
    pub n_cr3: u64,
    /// LBR virtualization enable.
    pub lbr_virtualization: u64,
    /// VMCB clean bits (0: nothing cached, reload everything).
    pub clean_bits: u32,
    _reserved_0c4: u32,
    /// Next sequential RIP (on CPUs with NRIPS).
    pub next_rip: u64,
    /// Bytes of the guest instruction fetched (decode assists).
    pub instruction_len: u8,
    /// The instruction bytes.
    pub instruction_bytes: [u8; 15],
    _reserved_0e0: [u8; 0x320],
}

/// The guest state save area (offsets 0x400-0xFFF of the VMCB).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SaveArea {
    /// ES.
    pub es: Segment,
    /// CS.
    pub cs: Segment,
    /// SS.
    pub ss: Segment,
    /// DS.
    pub ds: Segment,
    /// FS (VMLOAD/VMSAVE).
    pub fs: Segment,
    /// GS (VMLOAD/VMSAVE).
    pub gs: Segment,
    /// GDTR (base and limit only).
    pub gdtr: Segment,
    /// LDTR (VMLOAD/VMSAVE).
    pub ldtr: Segment,
    /// IDTR (base and limit only).
    pub idtr: Segment,
    /// TR (VMLOAD/VMSAVE).
    pub tr: Segment,
    _reserved_0a0: [u8; 0x2b],
    /// Current privilege level.
    pub cpl: u8,
    _reserved_0cc: u32,
    /// EFER (SVME must be set).
    pub efer: u64,
    _reserved_0d8: [u8; 0x70],
    /// CR4.
    pub cr4: u64,
    /// CR3.
    pub cr3: u64,
    /// CR0.
    pub cr0: u64,
    /// DR7.
    pub dr7: u64,
    /// DR6.
    pub dr6: u64,
    /// RFLAGS.
    pub rflags: u64,
    /// RIP.
    pub rip: u64,
    _reserved_180: [u8; 0x58],
    /// RSP.
    pub rsp: u64,
    /// Shadow-stack fields (unused).
    _cet: [u64; 3],
    /// RAX.
    pub rax: u64,
    /// STAR (VMLOAD/VMSAVE).
    pub star: u64,
    /// LSTAR.
    pub lstar: u64,
    /// CSTAR.
    pub cstar: u64,
    /// SFMASK.
    pub sfmask: u64,
    /// KernelGSbase.
    pub kernel_gs_base: u64,
    /// SYSENTER_CS.
    pub sysenter_cs: u64,
    /// SYSENTER_ESP.
    pub sysenter_esp: u64,
    /// SYSENTER_EIP.
    pub sysenter_eip: u64,
    /// CR2.
    pub cr2: u64,
    _reserved_248: [u8; 0x20],
    /// The guest's PAT (used with nested paging).
    pub g_pat: u64,
    _reserved_270: [u8; 0x990],
}

/// A whole VMCB: one 4 KiB page, 4 KiB aligned (VMRUN takes its physical
/// address).
#[repr(C, align(4096))]
#[derive(Clone, Copy, Debug)]
pub struct Vmcb {
    /// Offsets 0x000-0x3FF.
    pub control: ControlArea,
    /// Offsets 0x400-0xFFF.
    pub save: SaveArea,
}

// The APM's offsets, checked at compile time.
const _: () = {
    assert!(size_of::<Segment>() == 16);
    assert!(size_of::<ControlArea>() == 0x400);
    assert!(size_of::<Vmcb>() == 0x1000);
    assert!(offset_of!(ControlArea, intercept_misc1) == 0x00c);
    assert!(offset_of!(ControlArea, intercept_misc2) == 0x010);
    assert!(offset_of!(ControlArea, pause_filter_threshold) == 0x03c);
    assert!(offset_of!(ControlArea, iopm_base_pa) == 0x040);
    assert!(offset_of!(ControlArea, msrpm_base_pa) == 0x048);
    assert!(offset_of!(ControlArea, tsc_offset) == 0x050);
    assert!(offset_of!(ControlArea, guest_asid) == 0x058);
    assert!(offset_of!(ControlArea, tlb_control) == 0x05c);
    assert!(offset_of!(ControlArea, v_intr) == 0x060);
    assert!(offset_of!(ControlArea, interrupt_shadow) == 0x068);
    assert!(offset_of!(ControlArea, exit_code) == 0x070);
    assert!(offset_of!(ControlArea, exit_info1) == 0x078);
    assert!(offset_of!(ControlArea, exit_info2) == 0x080);
    assert!(offset_of!(ControlArea, exit_int_info) == 0x088);
    assert!(offset_of!(ControlArea, np_enable) == 0x090);
    assert!(offset_of!(ControlArea, event_inj) == 0x0a8);
    assert!(offset_of!(ControlArea, n_cr3) == 0x0b0);
    assert!(offset_of!(ControlArea, clean_bits) == 0x0c0);
    assert!(offset_of!(ControlArea, next_rip) == 0x0c8);
    assert!(offset_of!(ControlArea, instruction_len) == 0x0d0);
    assert!(offset_of!(Vmcb, save) == 0x400);
    assert!(0x400 + offset_of!(SaveArea, cs) == 0x410);
    assert!(0x400 + offset_of!(SaveArea, gdtr) == 0x460);
    assert!(0x400 + offset_of!(SaveArea, idtr) == 0x480);
    assert!(0x400 + offset_of!(SaveArea, tr) == 0x490);
    assert!(0x400 + offset_of!(SaveArea, cpl) == 0x4cb);
    assert!(0x400 + offset_of!(SaveArea, efer) == 0x4d0);
    assert!(0x400 + offset_of!(SaveArea, cr4) == 0x548);
    assert!(0x400 + offset_of!(SaveArea, cr3) == 0x550);
    assert!(0x400 + offset_of!(SaveArea, cr0) == 0x558);
    assert!(0x400 + offset_of!(SaveArea, dr7) == 0x560);
    assert!(0x400 + offset_of!(SaveArea, rflags) == 0x570);
    assert!(0x400 + offset_of!(SaveArea, rip) == 0x578);
    assert!(0x400 + offset_of!(SaveArea, rsp) == 0x5d8);
    assert!(0x400 + offset_of!(SaveArea, rax) == 0x5f8);
    assert!(0x400 + offset_of!(SaveArea, star) == 0x600);
    assert!(0x400 + offset_of!(SaveArea, kernel_gs_base) == 0x620);
    assert!(0x400 + offset_of!(SaveArea, cr2) == 0x640);
    assert!(0x400 + offset_of!(SaveArea, g_pat) == 0x668);
};

impl Vmcb {
    /// An all-zero VMCB (every intercept off, every field zero).
    pub const fn zeroed() -> Self {
        Self {
            control: ControlArea {
                intercept_cr: 0,
                intercept_dr: 0,
                intercept_exceptions: 0,
                intercept_misc1: 0,
                intercept_misc2: 0,
                intercept_misc3: 0,
                _reserved_018: [0; 0x24],
                pause_filter_threshold: 0,
                pause_filter_count: 0,
                iopm_base_pa: 0,
                msrpm_base_pa: 0,
                tsc_offset: 0,
                guest_asid: 0,
                tlb_control: 0,
                _reserved_05d: [0; 3],
                v_intr: 0,
                interrupt_shadow: 0,
                exit_code: 0,
                exit_info1: 0,
                exit_info2: 0,
                exit_int_info: 0,
                np_enable: 0,
                _reserved_098: [0; 0x10],
                event_inj: 0,
                n_cr3: 0,
                lbr_virtualization: 0,
                clean_bits: 0,
                _reserved_0c4: 0,
                next_rip: 0,
                instruction_len: 0,
                instruction_bytes: [0; 15],
                _reserved_0e0: [0; 0x320],
            },
            save: SaveArea {
                es: Segment::NULL,
                cs: Segment::NULL,
                ss: Segment::NULL,
                ds: Segment::NULL,
                fs: Segment::NULL,
                gs: Segment::NULL,
                gdtr: Segment::NULL,
                ldtr: Segment::NULL,
                idtr: Segment::NULL,
                tr: Segment::NULL,
                _reserved_0a0: [0; 0x2b],
                cpl: 0,
                _reserved_0cc: 0,
                efer: 0,
                _reserved_0d8: [0; 0x70],
                cr4: 0,
                cr3: 0,
                cr0: 0,
                dr7: 0,
                dr6: 0,
                rflags: 0,
                rip: 0,
                _reserved_180: [0; 0x58],
                rsp: 0,
                _cet: [0; 3],
                rax: 0,
                star: 0,
                lstar: 0,
                cstar: 0,
                sfmask: 0,
                kernel_gs_base: 0,
                sysenter_cs: 0,
                sysenter_esp: 0,
                sysenter_eip: 0,
                cr2: 0,
                _reserved_248: [0; 0x20],
                g_pat: 0,
                _reserved_270: [0; 0x990],
            },
        }
    }
}

impl Segment {
    /// A null (unusable) segment.
    pub const NULL: Self = Self {
        selector: 0,
        attrib: 0,
        limit: 0,
        base: 0,
    };
}

/// Control register bits the guest's initial state uses.
pub mod cr {
    /// CR0.PE: protected mode.
    pub const CR0_PE: u64 = 1 << 0;
    /// CR0.MP.
    pub const CR0_MP: u64 = 1 << 1;
    /// CR0.ET (always 1).
    pub const CR0_ET: u64 = 1 << 4;
    /// CR0.NE: native FPU errors.
    pub const CR0_NE: u64 = 1 << 5;
    /// CR0.WP.
    pub const CR0_WP: u64 = 1 << 16;
    /// CR0.NW: not write-through (set at reset).
    pub const CR0_NW: u64 = 1 << 29;
    /// CR0.CD: cache disable (set at reset).
    pub const CR0_CD: u64 = 1 << 30;
    /// CR0.PG: paging.
    pub const CR0_PG: u64 = 1 << 31;
    /// CR4.VME: virtual-8086 mode extensions.
    pub const CR4_VME: u64 = 1 << 0;
    /// CR4.PVI: protected-mode virtual interrupts.
    pub const CR4_PVI: u64 = 1 << 1;
    /// CR4.TSD: RDTSC at CPL 0 only.
    pub const CR4_TSD: u64 = 1 << 2;
    /// CR4.DE: debug extensions (DR4/DR5 no longer alias DR6/DR7).
    pub const CR4_DE: u64 = 1 << 3;
    /// CR4.PSE: 4 MiB pages in 32-bit paging.
    pub const CR4_PSE: u64 = 1 << 4;
    /// CR4.PAE.
    pub const CR4_PAE: u64 = 1 << 5;
    /// CR4.MCE: machine-check exceptions.
    pub const CR4_MCE: u64 = 1 << 6;
    /// CR4.PGE: global pages.
    pub const CR4_PGE: u64 = 1 << 7;
    /// CR4.PCE: RDPMC at any CPL.
    pub const CR4_PCE: u64 = 1 << 8;
    /// CR4.OSFXSR: FXSAVE/FXRSTOR and SSE.
    pub const CR4_OSFXSR: u64 = 1 << 9;
    /// CR4.OSXMMEXCPT: unmasked SIMD exceptions.
    pub const CR4_OSXMMEXCPT: u64 = 1 << 10;
    /// CR4.UMIP: user-mode instruction prevention.
    pub const CR4_UMIP: u64 = 1 << 11;
    /// CR4.LA57: five-level paging.
    pub const CR4_LA57: u64 = 1 << 12;
    /// CR4.FSGSBASE: the RD/WR FS/GS BASE instructions.
    pub const CR4_FSGSBASE: u64 = 1 << 16;
    /// CR4.PCIDE: process-context identifiers.
    pub const CR4_PCIDE: u64 = 1 << 17;
    /// CR4.OSXSAVE: XSAVE and XCR0 enabled.
    pub const CR4_OSXSAVE: u64 = 1 << 18;
    /// CR4.SMEP: supervisor-mode execution prevention.
    pub const CR4_SMEP: u64 = 1 << 20;
    /// CR4.SMAP: supervisor-mode access prevention.
    pub const CR4_SMAP: u64 = 1 << 21;
    /// CR4.PKE: protection keys for user pages.
    pub const CR4_PKE: u64 = 1 << 22;
    /// CR4.CET: control-flow enforcement.
    pub const CR4_CET: u64 = 1 << 23;
    /// EFER.LME.
    pub const EFER_LME: u64 = 1 << 8;
    /// EFER.LMA.
    pub const EFER_LMA: u64 = 1 << 10;
    /// EFER.NXE.
    pub const EFER_NXE: u64 = 1 << 11;
    /// EFER.SVME (must be set in the guest's VMCB EFER; hidden from it).
    pub const EFER_SVME: u64 = 1 << 12;
    /// RFLAGS bit 1 (always 1).
    pub const RFLAGS_FIXED: u64 = 1 << 1;
    /// RFLAGS.TF: single-step.
    pub const RFLAGS_TF: u64 = 1 << 8;
    /// RFLAGS.IF.
    pub const RFLAGS_IF: u64 = 1 << 9;
    /// RFLAGS.RF: resume (set in the image a fault pushes).
    pub const RFLAGS_RF: u64 = 1 << 16;
}

/// The PAT after reset (WB, WT, UC-, UC, repeated).
pub const RESET_PAT: u64 = 0x0007_0406_0007_0406;

/// Size of the I/O permission map (three pages: 64 Ki ports + 1 bit).
pub const IOPM_BYTES: usize = 3 * 4096;

/// Size of the MSR permission map (two pages).
pub const MSRPM_BYTES: usize = 2 * 4096;
