//! GIC register layouts: MMIO blocks as `tock-registers` structs (offsets
//! checked at compile time by `register_structs!`) and the bitfields of MMIO
//! and system registers, each field citing the architecture spec:
//! GICv2 = IHI 0048B ("GICv2"), GICv3/v4 = IHI 0069H ("GICv3"); GICv2
//! sections: 4.3 distributor, 4.4 CPU interface, 5.3 virtual interface control.

// Field names follow the spec's spelling; the items tock-registers' macros
// generate (the `Register` markers, `SET`/`CLEAR` values) carry no docs, so
// every field and register here has a doc line instead.
#![allow(non_snake_case, missing_docs)]

use tock_registers::register_bitfields;
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

register_bitfields! {u32,
    /// Distributor Control Register (GICv2 §4.3, GICv3 GICD_CTLR).
    pub GICD_CTLR [
        /// Bit 0. GICv2: Enable (Non-secure view: Group 1; Secure or no
        /// Security Extensions: Group 0). GICv3: EnableGrp0 (DS=1) or, in the
        /// Non-secure view, EnableGrp1.
        ENABLE_GRP0 OFFSET(0) NUMBITS(1) [],
        /// Bit 1. GICv2 Secure view: EnableGrp1. GICv3: EnableGrp1 (DS=1),
        /// or EnableGrp1A in the Non-secure view (the Non-secure Group 1 enable).
        ENABLE_GRP1 OFFSET(1) NUMBITS(1) [],
        /// Bit 4. GICv3: ARE (DS=1) or ARE_NS (Non-secure view): affinity routing enable.
        ARE OFFSET(4) NUMBITS(1) [],
        /// Bit 6. GICv3: DS, 1 = the GIC has a single Security state.
        DS OFFSET(6) NUMBITS(1) [],
        /// Bit 31. GICv3: RWP, register write pending (CTLR, ICENABLER).
        RWP OFFSET(31) NUMBITS(1) []
    ],

    /// Interrupt Controller Type Register (GICv2 §4.3, GICv3 GICD_TYPER).
    pub GICD_TYPER [
        /// `[4:0]` ITLinesNumber: the distributor has 32 * (N + 1) INTIDs (max 1020).
        ITLinesNumber OFFSET(0) NUMBITS(5) [],
        /// `[7:5]` CPUNumber: GICv2 CPU interfaces - 1 (GICv3 with ARE: reserved).
        CPUNumber OFFSET(5) NUMBITS(3) [],
        /// `[10]` SecurityExtn: the GIC implements two Security states.
        SecurityExtn OFFSET(10) NUMBITS(1) [],
        /// `[17]` LPIS (GICv3): LPIs are supported.
        LPIS OFFSET(17) NUMBITS(1) [],
        /// `[23:19]` IDbits (GICv3): INTID bits - 1.
        IDbits OFFSET(19) NUMBITS(5) [],
        /// `[26]` RSS (GICv3): SGI targets with Aff0 16-255 are supported (range selector).
        RSS OFFSET(26) NUMBITS(1) []
    ],

    /// Software Generated Interrupt Register (GICv2 §4.3).
    pub GICD_SGIR [
        /// `[3:0]` SGIINTID: the SGI number.
        SGIINTID OFFSET(0) NUMBITS(4) [],
        /// `[15]` NSATT: with Security Extensions, send only if the SGI is Group 1.
        NSATT OFFSET(15) NUMBITS(1) [],
        /// `[23:16]` CPUTargetList: bit n = CPU interface n.
        CPUTargetList OFFSET(16) NUMBITS(8) [],
        /// `[25:24]` TargetListFilter.
        TargetListFilter OFFSET(24) NUMBITS(2) [
            /// Send to the interfaces in CPUTargetList.
            TargetList = 0,
            /// Send to every interface except the requester.
            AllButSelf = 1,
            /// Send only to the requester.
            SelfOnly = 2
        ]
    ],

    /// CPU Interface Control Register (GICv2 §4.4).
    pub GICC_CTLR [
        /// `[0]` Enable (Non-secure view: EnableGrp1; Secure / no Security
        /// Extensions: EnableGrp0).
        ENABLE OFFSET(0) NUMBITS(1) [],
        /// `[9]` EOImode (Non-secure view: EOImodeNS; Secure view: EOImodeS):
        /// 1 = GICC_EOIR only drops priority, GICC_DIR deactivates.
        EOI_MODE OFFSET(9) NUMBITS(1) []
    ],

    /// Interrupt Priority Mask Register (GICv2 §4.4).
    pub GICC_PMR [
        /// `[7:0]` Priority: interrupts with a numerically lower priority are signalled.
        Priority OFFSET(0) NUMBITS(8) []
    ],

    /// Interrupt Acknowledge / End of Interrupt / Deactivate value layout
    /// (GICv2 §4.4: GICC_IAR, GICC_EOIR, GICC_DIR).
    pub GICC_IAR [
        /// `[9:0]` InterruptID.
        InterruptID OFFSET(0) NUMBITS(10) [],
        /// `[12:10]` CPUID: for SGIs, the requesting CPU interface.
        CPUID OFFSET(10) NUMBITS(3) []
    ],

    /// Redistributor Control Register (GICv3 GICR_CTLR).
    pub GICR_CTLR [
        /// `[0]` EnableLPIs.
        EnableLPIs OFFSET(0) NUMBITS(1) [],
        /// `[3]` RWP: a write to GICR_ICENABLER0 or the LPI enable is still in progress.
        RWP OFFSET(3) NUMBITS(1) [],
        /// `[31]` UWP: upstream write pending.
        UWP OFFSET(31) NUMBITS(1) []
    ],

    /// Redistributor Wake Register (GICv3 GICR_WAKER).
    pub GICR_WAKER [
        /// `[1]` ProcessorSleep: 1 = the PE is asleep; clear to wake the redistributor.
        ProcessorSleep OFFSET(1) NUMBITS(1) [],
        /// `[2]` ChildrenAsleep: reads 0 once the redistributor's interface is awake.
        ChildrenAsleep OFFSET(2) NUMBITS(1) []
    ],

    /// Peripheral ID2 Register of GICD/GICR frames (GICv3 GICD_PIDR2 and GICR_PIDR2).
    pub PIDR2 [
        /// `[7:4]` ArchRev: 0x1 GICv1, 0x2 GICv2, 0x3 GICv3, 0x4 GICv4.
        ArchRev OFFSET(4) NUMBITS(4) []
    ],

    /// Hypervisor Control Register (GICv2 §5.3).
    pub GICH_HCR [
        /// `[0]` En: enable the virtual CPU interface.
        En OFFSET(0) NUMBITS(1) [],
        /// `[1]` UIE: underflow maintenance interrupt (0 or 1 valid list registers).
        UIE OFFSET(1) NUMBITS(1) [],
        /// `[2]` LRENPIE: maintenance interrupt while EOICount is non-zero.
        LRENPIE OFFSET(2) NUMBITS(1) [],
        /// `[3]` NPIE: maintenance interrupt when no list register is pending.
        NPIE OFFSET(3) NUMBITS(1) [],
        /// `[4]` VGrp0EIE: maintenance interrupt while virtual Group 0 is enabled.
        VGrp0EIE OFFSET(4) NUMBITS(1) [],
        /// `[5]` VGrp0DIE: maintenance interrupt while virtual Group 0 is disabled.
        VGrp0DIE OFFSET(5) NUMBITS(1) [],
        /// `[6]` VGrp1EIE: maintenance interrupt while virtual Group 1 is enabled.
        VGrp1EIE OFFSET(6) NUMBITS(1) [],
        /// `[7]` VGrp1DIE: maintenance interrupt while virtual Group 1 is disabled.
        VGrp1DIE OFFSET(7) NUMBITS(1) [],
        /// `[31:27]` EOICount: EOIs that found no matching list register.
        EOICount OFFSET(27) NUMBITS(5) []
    ],

    /// VGIC Type Register (GICv2 §5.3).
    pub GICH_VTR [
        /// `[5:0]` ListRegs: number of list registers - 1.
        ListRegs OFFSET(0) NUMBITS(6) [],
        /// `[28:26]` PREbits: preemption bits - 1.
        PREbits OFFSET(26) NUMBITS(3) [],
        /// `[31:29]` PRIbits: priority bits - 1.
        PRIbits OFFSET(29) NUMBITS(3) []
    ],

    /// Virtual Machine Control Register (GICv2 §5.3): the guest's GICV_CTLR,
    /// GICV_PMR and GICV_BPR state, saved and restored on vCPU switch.
    pub GICH_VMCR [
        /// `[0]` VMGrp0En: the guest's GICV_CTLR.EnableGrp0.
        VMGrp0En OFFSET(0) NUMBITS(1) [],
        /// `[1]` VMGrp1En: the guest's GICV_CTLR.EnableGrp1.
        VMGrp1En OFFSET(1) NUMBITS(1) [],
        /// `[2]` VMAckCtl: the guest's GICV_CTLR.AckCtl.
        VMAckCtl OFFSET(2) NUMBITS(1) [],
        /// `[3]` VMFIQEn: the guest's GICV_CTLR.FIQEn.
        VMFIQEn OFFSET(3) NUMBITS(1) [],
        /// `[4]` VMCBPR: the guest's GICV_CTLR.CBPR.
        VMCBPR OFFSET(4) NUMBITS(1) [],
        /// `[9]` VEM: the guest's GICV_CTLR.EOImode.
        VEM OFFSET(9) NUMBITS(1) [],
        /// `[20:18]` VMABP: the guest's GICV_ABPR.
        VMABP OFFSET(18) NUMBITS(3) [],
        /// `[23:21]` VMBP: the guest's GICV_BPR.
        VMBP OFFSET(21) NUMBITS(3) [],
        /// `[31:27]` VMPriMask: the guest's GICV_PMR`[7:3]`.
        VMPriMask OFFSET(27) NUMBITS(5) []
    ],

    /// Maintenance Interrupt Status Register (GICv2 §5.3; GICv3 ICH_MISR_EL2
    /// has the same low bits).
    pub GICH_MISR [
        /// `[0]` EOI: some list register asks for an EOI maintenance interrupt.
        EOI OFFSET(0) NUMBITS(1) [],
        /// `[1]` U: underflow.
        U OFFSET(1) NUMBITS(1) [],
        /// `[2]` LRENP: list register entry not present (EOICount non-zero).
        LRENP OFFSET(2) NUMBITS(1) [],
        /// `[3]` NP: no list register is pending.
        NP OFFSET(3) NUMBITS(1) [],
        /// `[4]` VGrp0E: virtual Group 0 enabled.
        VGrp0E OFFSET(4) NUMBITS(1) [],
        /// `[5]` VGrp0D: virtual Group 0 disabled.
        VGrp0D OFFSET(5) NUMBITS(1) [],
        /// `[6]` VGrp1E: virtual Group 1 enabled.
        VGrp1E OFFSET(6) NUMBITS(1) [],
        /// `[7]` VGrp1D: virtual Group 1 disabled.
        VGrp1D OFFSET(7) NUMBITS(1) []
    ],

    /// List Register (GICv2 §5.3, GICH_LRn).
    pub GICH_LR [
        /// `[9:0]` VirtualID: the INTID the guest sees.
        VirtualID OFFSET(0) NUMBITS(10) [],
        /// `[19:10]` PhysicalID (HW = 1): the physical INTID deactivated with the virtual one.
        PhysicalID OFFSET(10) NUMBITS(10) [],
        /// `[12:10]` CPUID (HW = 0, SGIs): the requesting CPU the guest reads in GICV_IAR.
        CPUID OFFSET(10) NUMBITS(3) [],
        /// `[19]` EOI (HW = 0): maintenance interrupt when the guest deactivates it.
        EOI OFFSET(19) NUMBITS(1) [],
        /// `[27:23]` Priority: bits `[7:3]` of the virtual priority.
        Priority OFFSET(23) NUMBITS(5) [],
        /// `[29:28]` State.
        State OFFSET(28) NUMBITS(2) [
            /// Invalid (free).
            Invalid = 0,
            /// Pending.
            Pending = 1,
            /// Active.
            Active = 2,
            /// Pending and active.
            PendingActive = 3
        ],
        /// `[30]` Grp1: the virtual interrupt is Group 1.
        Grp1 OFFSET(30) NUMBITS(1) [],
        /// `[31]` HW: hardware interrupt, deactivates PhysicalID.
        HW OFFSET(31) NUMBITS(1) []
    ]
}

register_bitfields! {u64,
    /// Redistributor Type Register (GICv3 GICR_TYPER).
    pub GICR_TYPER [
        /// `[0]` PLPIS: physical LPIs supported.
        PLPIS OFFSET(0) NUMBITS(1) [],
        /// `[1]` VLPIS: virtual LPIs supported (GICv4: two more 64 KiB frames per redistributor).
        VLPIS OFFSET(1) NUMBITS(1) [],
        /// `[4]` Last: the last redistributor in this contiguous region.
        Last OFFSET(4) NUMBITS(1) [],
        /// `[23:8]` Processor_Number: the PE's number for ITS target addresses.
        Processor_Number OFFSET(8) NUMBITS(16) [],
        /// `[63:32]` Affinity_Value: Aff3.Aff2.Aff1.Aff0 of the PE this redistributor serves.
        Affinity_Value OFFSET(32) NUMBITS(32) []
    ],

    /// SGI Group 1 Register (GICv3 ICC_SGI1R_EL1).
    pub ICC_SGI1R_EL1 [
        /// `[15:0]` TargetList: bit n = the PE with Aff0 = RS * 16 + n.
        TargetList OFFSET(0) NUMBITS(16) [],
        /// `[23:16]` Aff1 of the targets.
        Aff1 OFFSET(16) NUMBITS(8) [],
        /// `[27:24]` INTID: the SGI number.
        INTID OFFSET(24) NUMBITS(4) [],
        /// `[39:32]` Aff2 of the targets.
        Aff2 OFFSET(32) NUMBITS(8) [],
        /// `[40]` IRM: Interrupt Routing Mode.
        IRM OFFSET(40) NUMBITS(1) [
            /// Send to Aff3.Aff2.Aff1.<TargetList>.
            AffinityList = 0,
            /// Send to every PE except the requester.
            AllButSelf = 1
        ],
        /// `[47:44]` RS: range selector, which 16 Aff0 values TargetList covers.
        RS OFFSET(44) NUMBITS(4) [],
        /// `[55:48]` Aff3 of the targets.
        Aff3 OFFSET(48) NUMBITS(8) []
    ],

    /// Interrupt Controller Control Register EL1 (GICv3 ICC_CTLR_EL1).
    pub ICC_CTLR_EL1 [
        /// `[0]` CBPR: common binary point register.
        CBPR OFFSET(0) NUMBITS(1) [],
        /// `[1]` EOImode: 1 = ICC_EOIR1_EL1 only drops priority, ICC_DIR_EL1 deactivates.
        EOImode OFFSET(1) NUMBITS(1) [],
        /// `[10:8]` PRIbits: priority bits - 1.
        PRIbits OFFSET(8) NUMBITS(3) [],
        /// `[13:11]` IDbits: 0 = 16-bit INTIDs, 1 = 24-bit.
        IDbits OFFSET(11) NUMBITS(3) [],
        /// `[18]` RSS: the CPU interface supports SGI targets with Aff0 16-255.
        RSS OFFSET(18) NUMBITS(1) []
    ],

    /// Interrupt Acknowledge / EOI / Deactivate value (GICv3 ICC_IAR1_EL1,
    /// ICC_EOIR1_EL1, ICC_DIR_EL1).
    pub ICC_IAR1_EL1 [
        /// `[23:0]` INTID.
        INTID OFFSET(0) NUMBITS(24) []
    ],

    /// Interrupt Controller List Register (GICv3 `ICH_LR<n>_EL2`).
    pub ICH_LR_EL2 [
        /// `[31:0]` vINTID: the INTID the guest sees.
        vINTID OFFSET(0) NUMBITS(32) [],
        /// `[44:32]` pINTID (HW = 1): the physical INTID deactivated with the virtual one.
        pINTID OFFSET(32) NUMBITS(13) [],
        /// `[41]` EOI (HW = 0): maintenance interrupt when the guest deactivates it.
        EOI OFFSET(41) NUMBITS(1) [],
        /// `[55:48]` Priority.
        Priority OFFSET(48) NUMBITS(8) [],
        /// `[59]` NMI (FEAT_GICv3_NMI): the virtual interrupt has superpriority.
        NMI OFFSET(59) NUMBITS(1) [],
        /// `[60]` Group: 1 = Group 1.
        Group OFFSET(60) NUMBITS(1) [],
        /// `[61]` HW: hardware interrupt, deactivates pINTID.
        HW OFFSET(61) NUMBITS(1) [],
        /// `[63:62]` State.
        State OFFSET(62) NUMBITS(2) [
            /// Invalid (free).
            Invalid = 0,
            /// Pending.
            Pending = 1,
            /// Active.
            Active = 2,
            /// Pending and active.
            PendingActive = 3
        ]
    ],

    /// Virtual Machine Control Register (GICv3 ICH_VMCR_EL2).
    pub ICH_VMCR_EL2 [
        /// `[0]` VENG0: the guest's ICC_IGRPEN0_EL1.
        VENG0 OFFSET(0) NUMBITS(1) [],
        /// `[1]` VENG1: the guest's ICC_IGRPEN1_EL1.
        VENG1 OFFSET(1) NUMBITS(1) [],
        /// `[2]` VAckCtl (legacy only).
        VAckCtl OFFSET(2) NUMBITS(1) [],
        /// `[3]` VFIQEn (legacy only).
        VFIQEn OFFSET(3) NUMBITS(1) [],
        /// `[4]` VCBPR: the guest's ICC_CTLR_EL1.CBPR.
        VCBPR OFFSET(4) NUMBITS(1) [],
        /// `[9]` VEOIM: the guest's ICC_CTLR_EL1.EOImode.
        VEOIM OFFSET(9) NUMBITS(1) [],
        /// `[20:18]` VBPR1: the guest's ICC_BPR1_EL1.
        VBPR1 OFFSET(18) NUMBITS(3) [],
        /// `[23:21]` VBPR0: the guest's ICC_BPR0_EL1.
        VBPR0 OFFSET(21) NUMBITS(3) [],
        /// `[31:24]` VPMR: the guest's ICC_PMR_EL1.
        VPMR OFFSET(24) NUMBITS(8) []
    ]
}

register_structs! {
    /// Distributor registers common to GICv2 and GICv3 (GICv2 §4.1 and the
    /// GICv3 distributor memory map): the first 4 KiB of the GICD frame.
    pub GicdRegisters {
        /// GICD_CTLR.
        (0x000 => pub ctlr: ReadWrite<u32, GICD_CTLR::Register>),
        /// GICD_TYPER.
        (0x004 => pub typer: ReadOnly<u32, GICD_TYPER::Register>),
        /// GICD_IIDR.
        (0x008 => pub iidr: ReadOnly<u32>),
        (0x00C => _reserved0),
        /// `GICD_IGROUPR<n>`: 1 bit per INTID, 1 = Group 1.
        (0x080 => pub igroupr: [ReadWrite<u32>; 32]),
        /// `GICD_ISENABLER<n>`: write 1 to enable.
        (0x100 => pub isenabler: [ReadWrite<u32>; 32]),
        /// `GICD_ICENABLER<n>`: write 1 to disable.
        (0x180 => pub icenabler: [ReadWrite<u32>; 32]),
        /// `GICD_ISPENDR<n>`: write 1 to set pending.
        (0x200 => pub ispendr: [ReadWrite<u32>; 32]),
        /// `GICD_ICPENDR<n>`: write 1 to clear pending.
        (0x280 => pub icpendr: [ReadWrite<u32>; 32]),
        /// `GICD_ISACTIVER<n>`: write 1 to set active.
        (0x300 => pub isactiver: [ReadWrite<u32>; 32]),
        /// `GICD_ICACTIVER<n>`: write 1 to clear active.
        (0x380 => pub icactiver: [ReadWrite<u32>; 32]),
        /// GICD_IPRIORITYR: one byte per INTID (byte-accessible).
        (0x400 => pub ipriorityr: [ReadWrite<u8>; 1020]),
        (0x7FC => _reserved1),
        /// GICD_ITARGETSR (GICv2, or GICv3 without ARE): one byte per INTID,
        /// bit n = CPU interface n; bytes 0-31 are read-only.
        (0x800 => pub itargetsr: [ReadWrite<u8>; 1020]),
        (0xBFC => _reserved2),
        /// `GICD_ICFGR<n>`: 2 bits per INTID, bit 1 set = edge-triggered.
        (0xC00 => pub icfgr: [ReadWrite<u32>; 64]),
        /// `GICD_IGRPMODR<n>` (GICv3): group modifier.
        (0xD00 => pub igrpmodr: [ReadWrite<u32>; 32]),
        (0xD80 => _reserved3),
        /// `GICD_NSACR<n>`: Non-secure access control.
        (0xE00 => pub nsacr: [ReadWrite<u32>; 64]),
        /// GICD_SGIR (GICv2, or GICv3 without ARE).
        (0xF00 => pub sgir: WriteOnly<u32, GICD_SGIR::Register>),
        (0xF04 => _reserved4),
        /// GICD_CPENDSGIR: clear pending SGIs, one byte per SGI.
        (0xF10 => pub cpendsgir: [ReadWrite<u8>; 16]),
        /// GICD_SPENDSGIR: set pending SGIs, one byte per SGI.
        (0xF20 => pub spendsgir: [ReadWrite<u8>; 16]),
        (0xF30 => _reserved5),
        (0x1000 => @END),
    },

    /// GICv3 distributor routing registers, at GICD base + [`GICD_ROUTER_OFFSET`]
    /// (GICv3 `GICD_IROUTER<n>` at 0x6000 + 8n, n = 32..1019).
    pub GicdRouterRegisters {
        /// `GICD_IROUTER<n>`, indexed by INTID; entries 0-31 are reserved.
        (0x0000 => pub irouter: [ReadWrite<u64>; 1020]),
        (0x1FE0 => _reserved0),
        (0x2000 => @END),
    },

    /// The RD_base frame of a GICv3 redistributor (GICv3 redistributor memory map).
    pub GicrRdRegisters {
        /// GICR_CTLR.
        (0x0000 => pub ctlr: ReadWrite<u32, GICR_CTLR::Register>),
        /// GICR_IIDR.
        (0x0004 => pub iidr: ReadOnly<u32>),
        /// GICR_TYPER.
        (0x0008 => pub typer: ReadOnly<u64, GICR_TYPER::Register>),
        /// GICR_STATUSR.
        (0x0010 => pub statusr: ReadWrite<u32>),
        /// GICR_WAKER.
        (0x0014 => pub waker: ReadWrite<u32, GICR_WAKER::Register>),
        (0x0018 => _reserved0),
        /// GICR_PIDR2.
        (0xFFE8 => pub pidr2: ReadOnly<u32, PIDR2::Register>),
        (0xFFEC => _reserved1),
        (0x10000 => @END),
    },

    /// The SGI_base frame of a GICv3 redistributor: SGI and PPI configuration
    /// of its PE (GICv3 redistributor memory map).
    pub GicrSgiRegisters {
        (0x0000 => _reserved0),
        /// GICR_IGROUPR0.
        (0x0080 => pub igroupr0: ReadWrite<u32>),
        (0x0084 => _reserved1),
        /// GICR_ISENABLER0.
        (0x0100 => pub isenabler0: ReadWrite<u32>),
        (0x0104 => _reserved2),
        /// GICR_ICENABLER0.
        (0x0180 => pub icenabler0: ReadWrite<u32>),
        (0x0184 => _reserved3),
        /// GICR_ISPENDR0.
        (0x0200 => pub ispendr0: ReadWrite<u32>),
        (0x0204 => _reserved4),
        /// GICR_ICPENDR0.
        (0x0280 => pub icpendr0: ReadWrite<u32>),
        (0x0284 => _reserved5),
        /// GICR_ISACTIVER0.
        (0x0300 => pub isactiver0: ReadWrite<u32>),
        (0x0304 => _reserved6),
        /// GICR_ICACTIVER0.
        (0x0380 => pub icactiver0: ReadWrite<u32>),
        (0x0384 => _reserved7),
        /// GICR_IPRIORITYR: one byte per SGI/PPI.
        (0x0400 => pub ipriorityr: [ReadWrite<u8>; 32]),
        (0x0420 => _reserved8),
        /// GICR_ICFGR0 (SGIs, read-only edge) and GICR_ICFGR1 (PPIs).
        (0x0C00 => pub icfgr: [ReadWrite<u32>; 2]),
        (0x0C08 => _reserved9),
        /// GICR_IGRPMODR0.
        (0x0D00 => pub igrpmodr0: ReadWrite<u32>),
        (0x0D04 => _reserved10),
        /// GICR_NSACR.
        (0x0E00 => pub nsacr: ReadWrite<u32>),
        (0x0E04 => _reserved11),
        (0x1000 => @END),
    },

    /// One GICv3 redistributor: RD_base then SGI_base (GICv3 redistributor memory map). GICv4
    /// redistributors with GICR_TYPER.VLPIS add two more 64 KiB frames.
    pub GicrRegisters {
        /// RD_base frame.
        (0x00000 => pub rd: GicrRdRegisters),
        /// SGI_base frame.
        (0x10000 => pub sgi: GicrSgiRegisters),
        (0x11000 => @END),
    },

    /// GICv2 CPU interface (GICv2 §4.1).
    pub GiccRegisters {
        /// GICC_CTLR.
        (0x0000 => pub ctlr: ReadWrite<u32, GICC_CTLR::Register>),
        /// GICC_PMR.
        (0x0004 => pub pmr: ReadWrite<u32, GICC_PMR::Register>),
        /// GICC_BPR.
        (0x0008 => pub bpr: ReadWrite<u32>),
        /// GICC_IAR.
        (0x000C => pub iar: ReadOnly<u32, GICC_IAR::Register>),
        /// GICC_EOIR.
        (0x0010 => pub eoir: WriteOnly<u32, GICC_IAR::Register>),
        /// GICC_RPR.
        (0x0014 => pub rpr: ReadOnly<u32>),
        /// GICC_HPPIR.
        (0x0018 => pub hppir: ReadOnly<u32, GICC_IAR::Register>),
        /// GICC_ABPR.
        (0x001C => pub abpr: ReadWrite<u32>),
        /// GICC_AIAR.
        (0x0020 => pub aiar: ReadOnly<u32, GICC_IAR::Register>),
        /// GICC_AEOIR.
        (0x0024 => pub aeoir: WriteOnly<u32, GICC_IAR::Register>),
        /// GICC_AHPPIR.
        (0x0028 => pub ahppir: ReadOnly<u32, GICC_IAR::Register>),
        (0x002C => _reserved0),
        /// `GICC_APR<n>`.
        (0x00D0 => pub apr: [ReadWrite<u32>; 4]),
        /// `GICC_NSAPR<n>`.
        (0x00E0 => pub nsapr: [ReadWrite<u32>; 4]),
        (0x00F0 => _reserved1),
        /// GICC_IIDR.
        (0x00FC => pub iidr: ReadOnly<u32>),
        (0x0100 => _reserved2),
        /// GICC_DIR (second 4 KiB page).
        (0x1000 => pub dir: WriteOnly<u32, GICC_IAR::Register>),
        (0x1004 => _reserved3),
        (0x2000 => @END),
    },

    /// GICv2 virtual interface control registers, GICH (GICv2 §5.3).
    pub GichRegisters {
        /// GICH_HCR.
        (0x000 => pub hcr: ReadWrite<u32, GICH_HCR::Register>),
        /// GICH_VTR.
        (0x004 => pub vtr: ReadOnly<u32, GICH_VTR::Register>),
        /// GICH_VMCR.
        (0x008 => pub vmcr: ReadWrite<u32, GICH_VMCR::Register>),
        (0x00C => _reserved0),
        /// GICH_MISR.
        (0x010 => pub misr: ReadOnly<u32, GICH_MISR::Register>),
        (0x014 => _reserved1),
        /// GICH_EISR0/1: bit n = list register n asks for an EOI maintenance interrupt.
        (0x020 => pub eisr: [ReadOnly<u32>; 2]),
        (0x028 => _reserved2),
        /// GICH_ELRSR0/1: bit n = list register n is empty (usable).
        (0x030 => pub elrsr: [ReadOnly<u32>; 2]),
        (0x038 => _reserved3),
        /// GICH_APR: active priorities of the virtual CPU interface.
        (0x0F0 => pub apr: ReadWrite<u32>),
        (0x0F4 => _reserved4),
        /// GICH_LR0-63.
        (0x100 => pub lr: [ReadWrite<u32, GICH_LR::Register>; 64]),
        (0x200 => @END),
    }
}

/// Offset of [`GicdRouterRegisters`] from the GICv3 distributor base.
pub const GICD_ROUTER_OFFSET: usize = 0x6000;

/// Size of a GICv3 redistributor (RD_base + SGI_base frames).
pub const GICR_FRAME_STRIDE_V3: usize = 0x2_0000;

/// Size of a GICv4 redistributor with virtual LPI support (adds VLPI_base
/// and a reserved frame).
pub const GICR_FRAME_STRIDE_V4: usize = 0x4_0000;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    // register_structs! already refuses to compile on a wrong offset; these
    // cross-check the struct sizes and a few offsets against the spec tables.
    #[test]
    fn distributor_layout() {
        assert_eq!(size_of::<GicdRegisters>(), 0x1000);
        assert_eq!(offset_of!(GicdRegisters, igroupr), 0x080);
        assert_eq!(offset_of!(GicdRegisters, ipriorityr), 0x400);
        assert_eq!(offset_of!(GicdRegisters, itargetsr), 0x800);
        assert_eq!(offset_of!(GicdRegisters, icfgr), 0xC00);
        assert_eq!(offset_of!(GicdRegisters, sgir), 0xF00);
        assert_eq!(size_of::<GicdRouterRegisters>(), 0x2000);
        // GICD_IROUTER32 is at 0x6100.
        assert_eq!(GICD_ROUTER_OFFSET + 32 * 8, 0x6100);
    }

    #[test]
    fn redistributor_layout() {
        assert_eq!(size_of::<GicrRdRegisters>(), 0x10000);
        assert_eq!(offset_of!(GicrRdRegisters, typer), 0x0008);
        assert_eq!(offset_of!(GicrRdRegisters, waker), 0x0014);
        assert_eq!(offset_of!(GicrRdRegisters, pidr2), 0xFFE8);
        assert_eq!(offset_of!(GicrRegisters, sgi), 0x10000);
        assert_eq!(
            offset_of!(GicrRegisters, sgi) + offset_of!(GicrSgiRegisters, isenabler0),
            0x10100
        );
        assert_eq!(offset_of!(GicrSgiRegisters, ipriorityr), 0x0400);
        assert_eq!(offset_of!(GicrSgiRegisters, icfgr), 0x0C00);
        assert!(size_of::<GicrRegisters>() <= GICR_FRAME_STRIDE_V3);
    }

    #[test]
    fn cpu_and_virtual_interface_layout() {
        assert_eq!(size_of::<GiccRegisters>(), 0x2000);
        assert_eq!(offset_of!(GiccRegisters, iar), 0x00C);
        assert_eq!(offset_of!(GiccRegisters, eoir), 0x010);
        assert_eq!(offset_of!(GiccRegisters, dir), 0x1000);
        assert_eq!(size_of::<GichRegisters>(), 0x200);
        assert_eq!(offset_of!(GichRegisters, misr), 0x010);
        assert_eq!(offset_of!(GichRegisters, eisr), 0x020);
        assert_eq!(offset_of!(GichRegisters, elrsr), 0x030);
        assert_eq!(offset_of!(GichRegisters, apr), 0x0F0);
        assert_eq!(offset_of!(GichRegisters, lr), 0x100);
    }
}
