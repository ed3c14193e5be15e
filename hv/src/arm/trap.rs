//! Decoding guest exits (ESR_EL2 syndromes) into what the hypervisor must do.
//!
//! The arch glue reads ESR_EL2, FAR_EL2 and HPFAR_EL2 after a synchronous
//! exception from EL1/EL0 and calls [`decode`]; the result is a plain [`Exit`]
//! value it acts on. Field layouts follow the Arm Architecture Reference Manual
//! (DDI 0487 I.a), section D17.2, "ESR_EL2" (and its "ISS encoding for an
//! exception from ..." subsections) and "HPFAR_EL2"; exception classes are in
//! the ESR_EL2.EC table of the same section.

use tock_registers::LocalRegisterCopy;

/// Register layouts, one `register_bitfields!` block per syndrome shape.
#[allow(missing_docs)] // the macro generates undocumented helper items
pub mod fields {
    use tock_registers::register_bitfields;

    register_bitfields! {u64,
        /// Exception Syndrome Register, EL2 (D17.2 ESR_EL2).
        pub ESR [
            /// Instruction-specific syndrome 2 (FEAT_LS64 etc.; unused here).
            ISS2 OFFSET(32) NUMBITS(24) [],
            /// Exception class: why the exception was taken.
            EC OFFSET(26) NUMBITS(6) [
                /// Unknown reason (e.g. an UNDEFINED instruction trapped by HCR_EL2).
                Unknown = 0x00,
                /// WFI, WFE, WFIT or WFET trapped (HCR_EL2.TWI/TWE).
                WfxTrap = 0x01,
                /// HVC executed in AArch64 state.
                Hvc64 = 0x16,
                /// SMC executed in AArch64 state, trapped by HCR_EL2.TSC.
                Smc64 = 0x17,
                /// MSR, MRS or system instruction in AArch64 state, trapped.
                SysReg64 = 0x18,
                /// Instruction Abort from a lower Exception level.
                InstructionAbortLowerEl = 0x20,
                /// Instruction Abort taken without a change of level (what a
                /// guest's EL1 sees for its own fetch; see `crate::arm::inject`).
                InstructionAbortSameEl = 0x21,
                /// Data Abort from a lower Exception level.
                DataAbortLowerEl = 0x24,
                /// Data Abort taken without a change of level.
                DataAbortSameEl = 0x25
            ],
            /// Instruction length: 1 = 32-bit instruction (always, in AArch64).
            IL OFFSET(25) NUMBITS(1) [],
            /// Instruction-specific syndrome; layout depends on EC.
            ISS OFFSET(0) NUMBITS(25) []
        ],

        /// ISS for a Data Abort (D17.2 ESR_EL2, "ISS encoding for an exception
        /// from a Data Abort").
        pub DATA_ABORT_ISS [
            /// Instruction syndrome valid: bits `[23:14]` hold a valid syndrome.
            ISV OFFSET(24) NUMBITS(1) [],
            /// Syndrome access size.
            SAS OFFSET(22) NUMBITS(2) [
                Byte = 0b00,
                Halfword = 0b01,
                Word = 0b10,
                Doubleword = 0b11
            ],
            /// Syndrome sign extend: the load sign-extends the value.
            SSE OFFSET(21) NUMBITS(1) [],
            /// Syndrome register transfer: Xt/Wt of the load or store (31 = XZR).
            SRT OFFSET(16) NUMBITS(5) [],
            /// Sixty-four bit general-purpose register transfer (Xt, not Wt).
            SF OFFSET(15) NUMBITS(1) [],
            /// Acquire/release semantics (LDAR, STLR, ...).
            AR OFFSET(14) NUMBITS(1) [],
            /// FAR not valid (only for synchronous external aborts).
            FNV OFFSET(10) NUMBITS(1) [],
            /// External abort type.
            EA OFFSET(9) NUMBITS(1) [],
            /// Cache maintenance: the fault came from a cache maintenance or
            /// address translation instruction.
            CM OFFSET(8) NUMBITS(1) [],
            /// Stage-2 fault on a stage-1 translation table walk.
            S1PTW OFFSET(7) NUMBITS(1) [],
            /// Write not Read.
            WNR OFFSET(6) NUMBITS(1) [],
            /// Data fault status code (see [`FSC`]).
            DFSC OFFSET(0) NUMBITS(6) []
        ],

        /// ISS for an Instruction Abort (D17.2 ESR_EL2, "ISS encoding for an
        /// exception from an Instruction Abort").
        pub INSTRUCTION_ABORT_ISS [
            /// Stage-2 fault on a stage-1 translation table walk.
            S1PTW OFFSET(7) NUMBITS(1) [],
            /// Instruction fault status code (see [`FSC`]).
            IFSC OFFSET(0) NUMBITS(6) []
        ],

        /// A data or instruction fault status code, split into its type and
        /// the translation level it names (D17.2 ESR_EL2, DFSC/IFSC tables).
        pub FSC [
            /// The kind of fault (with LEVEL for the level-encoded kinds).
            KIND OFFSET(2) NUMBITS(4) [
                AddressSize = 0b0000,
                Translation = 0b0001,
                AccessFlag = 0b0010,
                Permission = 0b0011,
                SyncExternalOnWalk = 0b0101
            ],
            /// Translation table level for the level-encoded kinds.
            LEVEL OFFSET(0) NUMBITS(2) []
        ],

        /// ISS for HVC and SMC (D17.2 ESR_EL2, "ISS encoding for an exception
        /// from HVC or SVC instruction execution", "... SMC ...").
        pub CALL_ISS [
            /// The instruction's 16-bit immediate.
            IMM16 OFFSET(0) NUMBITS(16) []
        ],

        /// ISS for WFI/WFE (D17.2 ESR_EL2, "ISS encoding for an exception
        /// from a WF* instruction").
        pub WFX_ISS [
            /// Which instruction trapped.
            TI OFFSET(0) NUMBITS(2) [
                Wfi = 0b00,
                Wfe = 0b01,
                Wfit = 0b10,
                Wfet = 0b11
            ]
        ],

        /// ISS for a trapped MSR/MRS/system instruction (D17.2 ESR_EL2, "ISS
        /// encoding for an exception from MSR, MRS, or System instruction
        /// execution in AArch64 state").
        pub SYSREG_ISS [
            /// Op0 of the instruction.
            OP0 OFFSET(20) NUMBITS(2) [],
            /// Op2 of the instruction.
            OP2 OFFSET(17) NUMBITS(3) [],
            /// Op1 of the instruction.
            OP1 OFFSET(14) NUMBITS(3) [],
            /// CRn of the instruction.
            CRN OFFSET(10) NUMBITS(4) [],
            /// The general-purpose register Xt (31 = XZR).
            RT OFFSET(5) NUMBITS(5) [],
            /// CRm of the instruction.
            CRM OFFSET(1) NUMBITS(4) [],
            /// Direction: 1 = read (MRS), 0 = write (MSR).
            DIRECTION OFFSET(0) NUMBITS(1) [
                Write = 0,
                Read = 1
            ]
        ],

        /// Hypervisor IPA Fault Address Register (D17.2 HPFAR_EL2).
        pub HPFAR [
            /// Faulting IPA bits `[51:12]` (bits `[47:12]` without FEAT_LPA; the
            /// extra bits are RES0 then).
            FIPA OFFSET(4) NUMBITS(40) []
        ],

        /// The part of FAR_EL2 that survives into the IPA: the offset within a
        /// 4 KiB page (HPFAR_EL2 gives the page).
        pub FAR [
            /// Bits `[11:0]` of the faulting virtual address.
            PAGE_OFFSET OFFSET(0) NUMBITS(12) []
        ]
    }
}

use fields::{
    CALL_ISS, DATA_ABORT_ISS, ESR, FAR, FSC, HPFAR, INSTRUCTION_ABORT_ISS, SYSREG_ISS, WFX_ISS,
};

/// HPFAR_EL2.FIPA counts 4 KiB granules: the IPA is `FIPA << 12 | FAR[11:0]`
/// whatever the stage-2 granule.
const HPFAR_GRANULE_SHIFT: u32 = 12;

/// The register number that means XZR/WZR in a data abort's SRT and a system
/// register trap's Rt (reads give 0, writes are discarded).
pub const ZERO_REGISTER: u8 = 31;

/// Why a synchronous exception left the guest, decoded from ESR_EL2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exit {
    /// A load or store the hypervisor can emulate (ISV = 1): MMIO.
    DataAbort(MmioAccess),
    /// A data abort without a valid instruction syndrome (ISV = 0: e.g. LDP,
    /// STP, post-indexed or SIMD accesses), or a stage-2 fault on the guest's
    /// own page-table walk. It cannot be emulated: stop the domain with a log
    /// line naming `ipa`.
    DataAbortNoSyndrome {
        /// The faulting IPA.
        ipa: u64,
        /// A write (WnR; UNKNOWN when `stage1_walk`).
        write: bool,
        /// The fault status.
        fault: FaultStatus,
        /// The fault happened while the MMU walked the guest's stage-1 tables
        /// (S1PTW): its page tables point outside its RAM.
        stage1_walk: bool,
    },
    /// A cache maintenance or address translation instruction (DC/IC/AT) on an
    /// address without stage-2 memory behind it: skip the instruction, as KVM
    /// does (there is nothing to maintain).
    CacheMaintenanceAbort {
        /// The faulting IPA.
        ipa: u64,
    },
    /// An instruction fetch from an IPA without executable memory.
    InstructionAbort {
        /// The faulting IPA.
        ipa: u64,
        /// The fault status.
        fault: FaultStatus,
        /// Stage-2 fault on a stage-1 table walk.
        stage1_walk: bool,
    },
    /// `HVC #imm` from AArch64. ELR_EL2 already points after it.
    Hvc {
        /// The immediate (SMCCC calls use 0).
        imm: u16,
    },
    /// `SMC #imm` from AArch64, trapped by HCR_EL2.TSC. ELR_EL2 points at the
    /// SMC itself: advance it ([`Exit::pc_advance_bytes`]).
    Smc {
        /// The immediate (SMCCC calls use 0).
        imm: u16,
    },
    /// WFI: block the vCPU until it has a pending virtual interrupt.
    Wfi,
    /// WFE, WFIT or WFET: yield. (WFIT's early return is allowed by the
    /// architecture; yielding never oversleeps the guest's deadline.)
    Wfe,
    /// A trapped MSR/MRS (ID registers, GIC system registers such as an
    /// ICC_SGI1R_EL1 write).
    SysReg(SysRegAccess),
    /// Anything else: inject an UNDEFINED exception or stop the domain.
    Unknown {
        /// ESR_EL2.EC.
        ec: u8,
        /// ESR_EL2.ISS.
        iss: u32,
    },
}

impl Exit {
    /// How far to move ELR_EL2 after emulating this exit (taken with
    /// syndrome `esr`), so the guest resumes after the instruction: its
    /// length (ESR_EL2.IL: 4 bytes, or 2 for a 16-bit T32 instruction of an
    /// AArch32 EL0). HVC (ELR_EL2 is already past it: Arm ARM D1, "Preferred
    /// exception return address") and aborts that will be retried once
    /// memory is mapped return 0.
    pub fn pc_advance_bytes(&self, esr: u64) -> u64 {
        match self {
            Exit::DataAbort(_)
            | Exit::CacheMaintenanceAbort { .. }
            | Exit::Smc { .. }
            | Exit::Wfi
            | Exit::Wfe
            | Exit::SysReg(_) => instruction_bytes(esr),
            _ => 0,
        }
    }
}

/// An emulatable load or store (a Data Abort with ISV = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioAccess {
    /// The IPA accessed.
    pub ipa: u64,
    /// The access size.
    pub width: AccessWidth,
    /// A store (true) or a load.
    pub write: bool,
    /// The transfer register Xt/Wt ([`ZERO_REGISTER`] = XZR/WZR).
    pub register: u8,
    /// A load that sign-extends (LDRSB, LDRSH, LDRSW).
    pub sign_extend: bool,
    /// The register is 64-bit (Xt) rather than 32-bit (Wt).
    pub sixty_four: bool,
    /// Acquire/release semantics: the emulation must be ordered (LDAR/STLR).
    pub acquire_release: bool,
    /// The fault status (usually a translation fault: no stage-2 mapping).
    pub fault: FaultStatus,
}

impl MmioAccess {
    /// The value to put in Xt for a load that read `raw` from the device: the
    /// low `width` bytes of `raw`, sign-extended if the load does so, and then
    /// limited to 32 bits for a Wt destination (writes to Wt clear bits
    /// `[63:32]`).
    pub const fn load_value(&self, raw: u64) -> u64 {
        let bits = self.width.bits();
        let value = raw & self.width.mask();
        let extended = if self.sign_extend && bits < 64 {
            // Shift the sign bit to bit 63, then back with an arithmetic shift.
            (((value << (64 - bits)) as i64) >> (64 - bits)) as u64
        } else {
            value
        };
        if self.sixty_four {
            extended
        } else {
            extended & 0xffff_ffff
        }
    }

    /// The value a store writes to the device, from Xt's contents.
    pub const fn store_value(&self, register_value: u64) -> u64 {
        register_value & self.width.mask()
    }

    /// The value a store writes, read from the guest's `x0..=x30` (`x`):
    /// [`ZERO_REGISTER`] (or any index past the slice) stores 0.
    pub fn store_value_from(&self, x: &[u64]) -> u64 {
        let register_value = x.get(usize::from(self.register)).copied().unwrap_or(0);
        self.store_value(register_value)
    }

    /// Completes a load that read `raw` from the device: writes
    /// [`MmioAccess::load_value`] into the guest's `x0..=x30` (`x`), unless
    /// the destination is [`ZERO_REGISTER`] (the value is discarded).
    pub fn complete_load(&self, x: &mut [u64], raw: u64) {
        if self.register != ZERO_REGISTER
            && let Some(slot) = x.get_mut(usize::from(self.register))
        {
            *slot = self.load_value(raw);
        }
    }
}

/// The size of a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AccessWidth {
    /// 8 bits.
    Byte = 1,
    /// 16 bits.
    Halfword = 2,
    /// 32 bits.
    Word = 4,
    /// 64 bits.
    Doubleword = 8,
}

impl AccessWidth {
    /// The access size in bytes.
    pub const fn bytes(self) -> u64 {
        self as u64
    }

    /// The access size in bits.
    pub const fn bits(self) -> u32 {
        self as u32 * 8
    }

    /// A mask of the access's low bits.
    pub const fn mask(self) -> u64 {
        match self {
            AccessWidth::Doubleword => u64::MAX,
            _ => (1u64 << self.bits()) - 1,
        }
    }

    /// The width for a size in bytes (1, 2, 4 or 8).
    pub const fn from_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            1 => Some(AccessWidth::Byte),
            2 => Some(AccessWidth::Halfword),
            4 => Some(AccessWidth::Word),
            8 => Some(AccessWidth::Doubleword),
            _ => None,
        }
    }
}

/// A trapped MSR/MRS in AArch64 state (`S<op0>_<op1>_C<crn>_C<crm>_<op2>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysRegAccess {
    /// Op0.
    pub op0: u8,
    /// Op1.
    pub op1: u8,
    /// CRn.
    pub crn: u8,
    /// CRm.
    pub crm: u8,
    /// Op2.
    pub op2: u8,
    /// The general-purpose register transferred ([`ZERO_REGISTER`] = XZR).
    pub rt: u8,
    /// MRS (read into Xt) rather than MSR (write from Xt).
    pub read: bool,
}

impl SysRegAccess {
    /// Whether this access names the register with this encoding.
    pub const fn is(&self, register: SysRegEncoding) -> bool {
        self.op0 == register.op0
            && self.op1 == register.op1
            && self.crn == register.crn
            && self.crm == register.crm
            && self.op2 == register.op2
    }
}

/// A system register's encoding, to compare trapped accesses against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysRegEncoding {
    /// Op0.
    pub op0: u8,
    /// Op1.
    pub op1: u8,
    /// CRn.
    pub crn: u8,
    /// CRm.
    pub crm: u8,
    /// Op2.
    pub op2: u8,
}

impl SysRegEncoding {
    /// ICC_SGI1R_EL1 (`S3_0_C12_C11_5`, GICv3/v4 architecture specification IHI 0069).
    pub const ICC_SGI1R_EL1: Self = Self::new(3, 0, 12, 11, 5);
    /// ICC_ASGI1R_EL1 (`S3_0_C12_C11_6`).
    pub const ICC_ASGI1R_EL1: Self = Self::new(3, 0, 12, 11, 6);
    /// ICC_SGI0R_EL1 (`S3_0_C12_C11_7`).
    pub const ICC_SGI0R_EL1: Self = Self::new(3, 0, 12, 11, 7);

    /// The encoding `S<op0>_<op1>_C<crn>_C<crm>_<op2>`.
    pub const fn new(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Self {
        Self {
            op0,
            op1,
            crn,
            crm,
            op2,
        }
    }

    /// Whether this is in the ID register space trapped by HCR_EL2.TID3
    /// (`op0 = 3, op1 = 0, CRn = 0, CRm = 1..=7`, Arm ARM D17.2 "ID registers").
    pub const fn is_feature_id_register(&self) -> bool {
        self.op0 == 3 && self.op1 == 0 && self.crn == 0 && self.crm >= 1 && self.crm <= 7
    }
}

impl From<SysRegAccess> for SysRegEncoding {
    fn from(access: SysRegAccess) -> Self {
        Self::new(access.op0, access.op1, access.crn, access.crm, access.op2)
    }
}

/// A data or instruction fault status code (DFSC/IFSC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultStatus {
    /// Address size fault at this lookup level.
    AddressSize {
        /// The translation table level.
        level: u8,
    },
    /// Translation fault: no mapping (the usual MMIO case at stage 2).
    Translation {
        /// The translation table level.
        level: u8,
    },
    /// Access flag fault.
    AccessFlag {
        /// The translation table level.
        level: u8,
    },
    /// Permission fault (e.g. a write to read-only stage-2 memory).
    Permission {
        /// The translation table level.
        level: u8,
    },
    /// Synchronous external abort, not on a table walk (0b010000).
    SyncExternal,
    /// Synchronous external abort on a table walk at this level.
    SyncExternalOnWalk {
        /// The translation table level.
        level: u8,
    },
    /// Alignment fault (0b100001).
    Alignment,
    /// TLB conflict abort (0b110000).
    TlbConflict,
    /// Any other code (parity/ECC, lockdown, FEAT_LPA2 level -1 codes...).
    Other(u8),
}

impl FaultStatus {
    /// Decodes a 6-bit DFSC/IFSC.
    pub fn decode(code: u8) -> Self {
        const SYNC_EXTERNAL: u8 = 0b01_0000;
        const ALIGNMENT: u8 = 0b10_0001;
        const TLB_CONFLICT: u8 = 0b11_0000;
        match code {
            SYNC_EXTERNAL => return FaultStatus::SyncExternal,
            ALIGNMENT => return FaultStatus::Alignment,
            TLB_CONFLICT => return FaultStatus::TlbConflict,
            _ => {}
        }
        let fsc = LocalRegisterCopy::<u64, FSC::Register>::new(u64::from(code));
        let level = fsc.read(FSC::LEVEL) as u8;
        match fsc.read_as_enum(FSC::KIND) {
            Some(FSC::KIND::Value::AddressSize) => FaultStatus::AddressSize { level },
            Some(FSC::KIND::Value::Translation) => FaultStatus::Translation { level },
            Some(FSC::KIND::Value::AccessFlag) => FaultStatus::AccessFlag { level },
            Some(FSC::KIND::Value::Permission) => FaultStatus::Permission { level },
            Some(FSC::KIND::Value::SyncExternalOnWalk) => FaultStatus::SyncExternalOnWalk { level },
            None => FaultStatus::Other(code),
        }
    }
}

/// The faulting IPA of a stage-2 abort: the page from HPFAR_EL2.FIPA, the
/// offset within it from FAR_EL2`[11:0]` (D17.2 HPFAR_EL2).
pub fn fault_ipa(far: u64, hpfar: u64) -> u64 {
    (HPFAR::FIPA.read(hpfar) << HPFAR_GRANULE_SHIFT) | FAR::PAGE_OFFSET.read(far)
}

/// The length of the instruction a synchronous exception was taken on
/// (ESR_EL2.IL): 4 bytes, 2 for a 16-bit T32 instruction.
pub fn instruction_bytes(esr: u64) -> u64 {
    if LocalRegisterCopy::<u64, ESR::Register>::new(esr).is_set(ESR::IL) {
        4
    } else {
        2
    }
}

/// The exception class (ESR_EL2.EC) of a syndrome: what the trace records
/// for a guest exit.
pub fn exception_class(esr: u64) -> u64 {
    LocalRegisterCopy::<u64, ESR::Register>::new(esr).read(ESR::EC)
}

/// Decodes a synchronous exception from a lower EL: `esr` = ESR_EL2,
/// `far` = FAR_EL2, `hpfar` = HPFAR_EL2 (the last two only matter for aborts).
/// Total: every input gives an [`Exit`], never a panic.
pub fn decode(esr: u64, far: u64, hpfar: u64) -> Exit {
    let syndrome = LocalRegisterCopy::<u64, ESR::Register>::new(esr);
    let iss = syndrome.read(ESR::ISS);
    match syndrome.read_as_enum(ESR::EC) {
        Some(ESR::EC::Value::DataAbortLowerEl) => decode_data_abort(iss, fault_ipa(far, hpfar)),
        Some(ESR::EC::Value::InstructionAbortLowerEl) => {
            let iss = LocalRegisterCopy::<u64, INSTRUCTION_ABORT_ISS::Register>::new(iss);
            Exit::InstructionAbort {
                ipa: fault_ipa(far, hpfar),
                fault: FaultStatus::decode(iss.read(INSTRUCTION_ABORT_ISS::IFSC) as u8),
                stage1_walk: iss.is_set(INSTRUCTION_ABORT_ISS::S1PTW),
            }
        }
        Some(ESR::EC::Value::Hvc64) => Exit::Hvc {
            imm: CALL_ISS::IMM16.read(iss) as u16,
        },
        Some(ESR::EC::Value::Smc64) => Exit::Smc {
            imm: CALL_ISS::IMM16.read(iss) as u16,
        },
        Some(ESR::EC::Value::WfxTrap) => {
            match LocalRegisterCopy::<u64, WFX_ISS::Register>::new(iss).read_as_enum(WFX_ISS::TI) {
                Some(WFX_ISS::TI::Value::Wfi) => Exit::Wfi,
                _ => Exit::Wfe,
            }
        }
        Some(ESR::EC::Value::SysReg64) => {
            let iss = LocalRegisterCopy::<u64, SYSREG_ISS::Register>::new(iss);
            Exit::SysReg(SysRegAccess {
                op0: iss.read(SYSREG_ISS::OP0) as u8,
                op1: iss.read(SYSREG_ISS::OP1) as u8,
                crn: iss.read(SYSREG_ISS::CRN) as u8,
                crm: iss.read(SYSREG_ISS::CRM) as u8,
                op2: iss.read(SYSREG_ISS::OP2) as u8,
                rt: iss.read(SYSREG_ISS::RT) as u8,
                read: iss.matches_all(SYSREG_ISS::DIRECTION::Read),
            })
        }
        // Same-EL aborts are EL2's own, never a guest's exit: unknown here.
        Some(
            ESR::EC::Value::Unknown
            | ESR::EC::Value::InstructionAbortSameEl
            | ESR::EC::Value::DataAbortSameEl,
        )
        | None => Exit::Unknown {
            ec: syndrome.read(ESR::EC) as u8,
            iss: iss as u32,
        },
    }
}

fn decode_data_abort(iss: u64, ipa: u64) -> Exit {
    let iss = LocalRegisterCopy::<u64, DATA_ABORT_ISS::Register>::new(iss);
    let write = iss.is_set(DATA_ABORT_ISS::WNR);
    let fault = FaultStatus::decode(iss.read(DATA_ABORT_ISS::DFSC) as u8);
    // Cache maintenance reports WnR = 1 and ISV = 0 (D17.2, CM field).
    if iss.is_set(DATA_ABORT_ISS::CM) {
        return Exit::CacheMaintenanceAbort { ipa };
    }
    let stage1_walk = iss.is_set(DATA_ABORT_ISS::S1PTW);
    if stage1_walk || !iss.is_set(DATA_ABORT_ISS::ISV) {
        return Exit::DataAbortNoSyndrome {
            ipa,
            write,
            fault,
            stage1_walk,
        };
    }
    let width = match iss.read_as_enum(DATA_ABORT_ISS::SAS) {
        Some(DATA_ABORT_ISS::SAS::Value::Byte) => AccessWidth::Byte,
        Some(DATA_ABORT_ISS::SAS::Value::Halfword) => AccessWidth::Halfword,
        Some(DATA_ABORT_ISS::SAS::Value::Word) => AccessWidth::Word,
        // SAS is two bits and all four values are named: this is 0b11.
        Some(DATA_ABORT_ISS::SAS::Value::Doubleword) | None => AccessWidth::Doubleword,
    };
    Exit::DataAbort(MmioAccess {
        ipa,
        width,
        write,
        register: iss.read(DATA_ABORT_ISS::SRT) as u8,
        sign_extend: iss.is_set(DATA_ABORT_ISS::SSE),
        sixty_four: iss.is_set(DATA_ABORT_ISS::SF),
        acquire_release: iss.is_set(DATA_ABORT_ISS::AR),
        fault,
    })
}

#[cfg(test)]
mod tests {
    //! ESR values below are assembled by hand, field by field, from the
    //! ESR_EL2 layouts in the Arm ARM (not produced by this decoder):
    //! EC `[31:26]`, IL `[25]`, ISS `[24:0]`.
    use super::*;

    /// A guest VA whose page offset is 0x018, and the HPFAR_EL2 value for IPA
    /// page 0x0900_0000 (FIPA = IPA >> 12 = 0x9000, at bits `[43:4]`).
    const FAR_VA: u64 = 0xffff_8000_1234_5018;
    const HPFAR_PL011: u64 = 0x9000 << 4;
    const IPA: u64 = 0x0900_0018;

    fn mmio(esr: u64) -> MmioAccess {
        match decode(esr, FAR_VA, HPFAR_PL011) {
            Exit::DataAbort(access) => access,
            other => panic!("expected an emulatable data abort, got {other:?}"),
        }
    }

    #[test]
    fn ipa_from_hpfar_and_far() {
        assert_eq!(fault_ipa(FAR_VA, HPFAR_PL011), 0x0900_0018);
        // A 48-bit IPA, HPFAR_EL2.NS (bit 63) and FAR's upper bits ignored.
        let hpfar = (1 << 63) | (0xf_ffff_ffff << 4) | 0xf;
        assert_eq!(fault_ipa(u64::MAX, hpfar), 0xffff_ffff_ffff);
        // A 52-bit IPA (FEAT_LPA): FIPA reaches bit 43.
        assert_eq!(fault_ipa(0x123, 0xff_ffff_ffff << 4), 0xf_ffff_ffff_f123);
    }

    #[test]
    fn str_w1_32_bit_store() {
        // STR w1, [x0]: EC 0x24 (0x9000_0000) | IL (0x0200_0000) |
        // ISV (0x0100_0000) | SAS=0b10 word (0x0080_0000) | SRT=1 (0x0001_0000) |
        // WnR (0x40) | DFSC=0b000101 translation fault level 1 (0x05).
        let access = mmio(0x9381_0045);
        assert_eq!(
            access,
            MmioAccess {
                ipa: IPA,
                width: AccessWidth::Word,
                write: true,
                register: 1,
                sign_extend: false,
                sixty_four: false,
                acquire_release: false,
                fault: FaultStatus::Translation { level: 1 },
            }
        );
        assert_eq!(access.store_value(0xdead_beef_1234_5678), 0x1234_5678);
        assert_eq!(
            decode(0x9381_0045, FAR_VA, HPFAR_PL011).pc_advance_bytes(0x9381_0045),
            4
        );
    }

    #[test]
    fn ldrb_8_bit_load() {
        // LDRB w2, [x3]: EC 0x24 | IL | ISV | SAS=0b00 byte | SRT=2 (0x0002_0000)
        // | WnR=0 | DFSC=0b000110 translation level 2 (0x06).
        let access = mmio(0x9302_0006);
        assert_eq!(access.width, AccessWidth::Byte);
        assert!(!access.write);
        assert_eq!(access.register, 2);
        assert!(!access.sign_extend && !access.sixty_four);
        assert_eq!(access.fault, FaultStatus::Translation { level: 2 });
        // Only the low byte reaches w2; the rest of x2 is cleared.
        assert_eq!(access.load_value(0xffff_ff80), 0x80);
    }

    #[test]
    fn ldrsb_x5_sign_extends_to_64_bits() {
        // LDRSB x5, [x0]: ISV | SAS=byte | SSE (0x0020_0000) | SRT=5
        // (0x0005_0000) | SF (0x8000) | DFSC level 3 translation (0x07).
        let access = mmio(0x9325_8007);
        assert!(access.sign_extend && access.sixty_four);
        assert_eq!(access.register, 5);
        assert_eq!(access.load_value(0x80), 0xffff_ffff_ffff_ff80);
        assert_eq!(access.load_value(0x7f), 0x7f);
    }

    #[test]
    fn ldrsh_w6_sign_extends_to_32_bits() {
        // LDRSH w6, [x0]: ISV | SAS=0b01 (0x0040_0000) | SSE | SRT=6 | SF=0.
        let access = mmio(0x9366_0007);
        assert_eq!(access.width, AccessWidth::Halfword);
        assert_eq!(access.load_value(0x1234_8001), 0xffff_8001);
    }

    #[test]
    fn stlr_x7_acquire_release_64_bit_store() {
        // STLR x7, [x0]: ISV | SAS=0b11 (0x00c0_0000) | SRT=7 (0x0007_0000) |
        // SF (0x8000) | AR (0x4000) | WnR (0x40) | DFSC 0x07.
        let access = mmio(0x93c7_c047);
        assert_eq!(access.width, AccessWidth::Doubleword);
        assert!(access.write && access.sixty_four && access.acquire_release);
        assert_eq!(access.register, 7);
        assert_eq!(access.store_value(u64::MAX), u64::MAX);
    }

    #[test]
    fn store_of_xzr_names_register_31() {
        // STR wzr, [x0]: ISV | SAS=word | SRT=31 (0x001f_0000) | WnR | DFSC 0x07.
        assert_eq!(mmio(0x939f_0047).register, ZERO_REGISTER);
    }

    #[test]
    fn register_file_helpers_honour_xzr() {
        let mut x = [0u64; 31];
        x[1] = 0x1122_3344_5566_7788;
        // STR w1: the low word of x1.
        assert_eq!(mmio(0x9381_0045).store_value_from(&x), 0x5566_7788);
        // STR wzr stores 0 even though x has no slot 31.
        assert_eq!(mmio(0x939f_0047).store_value_from(&x), 0);
        // LDRSB x5 writes x5, sign-extended; nothing else changes.
        mmio(0x9325_8007).complete_load(&mut x, 0xfe);
        assert_eq!(x[5], 0xffff_ffff_ffff_fffe);
        assert_eq!(x[1], 0x1122_3344_5566_7788);
        // A load into XZR (SRT = 31, LDR wzr) is discarded.
        let before = x;
        mmio(0x939f_0007).complete_load(&mut x, 0x1234);
        assert_eq!(x, before);
    }

    #[test]
    fn data_abort_without_syndrome() {
        // LDP x0, x1, [x2]: ISV=0 | WnR=0 | DFSC 0x07: not emulatable.
        assert_eq!(
            decode(0x9200_0007, FAR_VA, HPFAR_PL011),
            Exit::DataAbortNoSyndrome {
                ipa: IPA,
                write: false,
                fault: FaultStatus::Translation { level: 3 },
                stage1_walk: false,
            }
        );
        // A stage-2 fault on a stage-1 walk (S1PTW 0x80), even with ISV set.
        assert_eq!(
            decode(0x9381_00c5, FAR_VA, HPFAR_PL011),
            Exit::DataAbortNoSyndrome {
                ipa: IPA,
                write: true,
                fault: FaultStatus::Translation { level: 1 },
                stage1_walk: true,
            }
        );
        // Permission fault (0b001111, level 3) on a store without syndrome.
        assert!(matches!(
            decode(0x9200_004f, FAR_VA, HPFAR_PL011),
            Exit::DataAbortNoSyndrome {
                write: true,
                fault: FaultStatus::Permission { level: 3 },
                ..
            }
        ));
    }

    #[test]
    fn cache_maintenance_abort() {
        // DC CIVAC on an unmapped IPA: CM (0x100) | WnR | DFSC 0x07.
        let exit = decode(0x9200_0147, FAR_VA, HPFAR_PL011);
        assert_eq!(exit, Exit::CacheMaintenanceAbort { ipa: IPA });
        assert_eq!(exit.pc_advance_bytes(0x9200_0147), 4);
    }

    #[test]
    fn instruction_abort() {
        // EC 0x20 (0x8000_0000) | IL | IFSC 0b000111 translation level 3.
        let exit = decode(0x8200_0007, 0x4000_0abc, 0x4_0000 << 4);
        assert_eq!(
            exit,
            Exit::InstructionAbort {
                ipa: 0x4000_0abc,
                fault: FaultStatus::Translation { level: 3 },
                stage1_walk: false,
            }
        );
        assert_eq!(
            exit.pc_advance_bytes(0x8200_0007),
            0,
            "retried, not skipped"
        );
    }

    #[test]
    fn hvc_and_smc() {
        // HVC #0: EC 0x16 (0x5800_0000) | IL.
        let hvc = decode(0x5a00_0000, 0, 0);
        assert_eq!(hvc, Exit::Hvc { imm: 0 });
        assert_eq!(
            hvc.pc_advance_bytes(0x5a00_0000),
            0,
            "ELR already follows the HVC"
        );
        assert_eq!(decode(0x5a00_4242, 0, 0), Exit::Hvc { imm: 0x4242 });
        // SMC #0: EC 0x17 (0x5c00_0000) | IL; trapped SMC returns to itself.
        let smc = decode(0x5e00_0000, 0, 0);
        assert_eq!(smc, Exit::Smc { imm: 0 });
        assert_eq!(smc.pc_advance_bytes(0x5e00_0000), 4);
    }

    #[test]
    fn wfi_and_wfe() {
        // WFI: EC 0x01 (0x0400_0000) | IL | CV=1 (0x0100_0000) | COND=0b1110
        // (0x00e0_0000) | TI=0b00.
        assert_eq!(decode(0x07e0_0000, 0, 0), Exit::Wfi);
        assert_eq!(decode(0x0600_0000, 0, 0), Exit::Wfi, "CV/COND don't matter");
        // WFE: TI=0b01; WFIT TI=0b10, WFET TI=0b11 yield too.
        assert_eq!(decode(0x07e0_0001, 0, 0), Exit::Wfe);
        assert_eq!(decode(0x07e0_0002, 0, 0), Exit::Wfe);
        assert_eq!(decode(0x07e0_0003, 0, 0), Exit::Wfe);
        assert_eq!(Exit::Wfi.pc_advance_bytes(0x07e0_0000), 4);
        // A 16-bit T32 WFI of an AArch32 EL0 (IL clear): 2 bytes.
        assert_eq!(decode(0x05e0_0000, 0, 0), Exit::Wfi);
        assert_eq!(Exit::Wfi.pc_advance_bytes(0x05e0_0000), 2);
    }

    #[test]
    fn msr_icc_sgi1r_el1() {
        // MSR ICC_SGI1R_EL1, x1 (S3_0_C12_C11_5): EC 0x18 (0x6000_0000) | IL |
        // Op0=3 (0x0030_0000) | Op2=5 (0x000a_0000) | Op1=0 | CRn=12 (0x3000)
        // | Rt=1 (0x20) | CRm=11 (0x16) | Direction=0 (write).
        let exit = decode(0x623a_3036, 0, 0);
        let Exit::SysReg(access) = exit else {
            panic!("expected a system register trap, got {exit:?}");
        };
        assert_eq!(
            access,
            SysRegAccess {
                op0: 3,
                op1: 0,
                crn: 12,
                crm: 11,
                op2: 5,
                rt: 1,
                read: false
            }
        );
        assert!(access.is(SysRegEncoding::ICC_SGI1R_EL1));
        assert!(!access.is(SysRegEncoding::ICC_ASGI1R_EL1));
        assert!(!SysRegEncoding::from(access).is_feature_id_register());
        assert_eq!(exit.pc_advance_bytes(0x623a_3036), 4);
    }

    #[test]
    fn mrs_id_aa64pfr0_el1() {
        // MRS x2, ID_AA64PFR0_EL1 (S3_0_C0_C4_0): EC 0x18 | IL | Op0=3 |
        // CRn=0 | Rt=2 (0x40) | CRm=4 (0x08) | Direction=1 (read).
        let Exit::SysReg(access) = decode(0x6230_0049, 0, 0) else {
            panic!("expected a system register trap");
        };
        assert!(access.read);
        assert_eq!(access.rt, 2);
        assert!(access.is(SysRegEncoding::new(3, 0, 0, 4, 0)));
        assert!(SysRegEncoding::from(access).is_feature_id_register());
    }

    #[test]
    fn unknown_classes() {
        // EC 0 (unknown reason), IL set.
        assert_eq!(decode(0x0200_0000, 0, 0), Exit::Unknown { ec: 0, iss: 0 });
        // EC 0x07 (SVE/SIMD/FP access trap) with ISS 0x1e0_0000.
        assert_eq!(
            decode(0x1fe0_0000, 0, 0),
            Exit::Unknown {
                ec: 0x07,
                iss: 0x01e0_0000
            }
        );
        // EC 0x12 (HVC from AArch32) is not an AArch64 HVC.
        assert_eq!(
            decode(0x4a00_0000, 0, 0),
            Exit::Unknown { ec: 0x12, iss: 0 }
        );
        // EC 0x3f and garbage in ESR's RES0/ISS2 bits never panic.
        assert!(matches!(
            decode(u64::MAX, u64::MAX, u64::MAX),
            Exit::Unknown { ec: 0x3f, .. }
        ));
    }

    #[test]
    fn fault_status_codes() {
        assert_eq!(
            FaultStatus::decode(0b00_0100),
            FaultStatus::Translation { level: 0 }
        );
        assert_eq!(
            FaultStatus::decode(0b00_1010),
            FaultStatus::AccessFlag { level: 2 }
        );
        assert_eq!(
            FaultStatus::decode(0b00_0001),
            FaultStatus::AddressSize { level: 1 }
        );
        assert_eq!(FaultStatus::decode(0b01_0000), FaultStatus::SyncExternal);
        assert_eq!(
            FaultStatus::decode(0b01_0111),
            FaultStatus::SyncExternalOnWalk { level: 3 }
        );
        assert_eq!(FaultStatus::decode(0b10_0001), FaultStatus::Alignment);
        assert_eq!(FaultStatus::decode(0b11_0000), FaultStatus::TlbConflict);
        assert_eq!(
            FaultStatus::decode(0b10_1011),
            FaultStatus::Other(0b10_1011)
        );
    }

    #[test]
    fn every_esr_decodes_without_panic() {
        // Walk every EC with a spread of ISS patterns.
        for ec in 0..64u64 {
            for iss in [0, 1, 0x1ff_ffff, 0x0155_5555, 0x00aa_aaaa] {
                let _ = decode(ec << 26 | 1 << 25 | iss, u64::MAX, u64::MAX);
            }
        }
    }

    proptest::proptest! {
        /// Any register values decode without panicking, and every abort's
        /// IPA keeps FAR's page offset and HPFAR's page.
        #[test]
        fn decode_is_total_and_keeps_the_page_offset(esr: u64, far: u64, hpfar: u64) {
            match decode(esr, far, hpfar) {
                Exit::DataAbort(MmioAccess { ipa, .. })
                | Exit::DataAbortNoSyndrome { ipa, .. }
                | Exit::CacheMaintenanceAbort { ipa }
                | Exit::InstructionAbort { ipa, .. } => {
                    proptest::prop_assert_eq!(ipa & 0xfff, far & 0xfff);
                    proptest::prop_assert_eq!(ipa >> 12, (hpfar >> 4) & 0xff_ffff_ffff);
                }
                _ => {}
            }
        }

        /// Loads agree with what the CPU does, computed with Rust's own
        /// integer casts: LDRB/LDRH/LDR Wt zero-extend, LDRSB/LDRSH/LDRSW
        /// sign-extend to Xt, or to Wt with bits [63:32] cleared.
        #[test]
        fn load_values_match_native_extension(raw: u64, sixty_four: bool) {
            let access = |width, sign_extend| MmioAccess {
                ipa: 0,
                width,
                write: false,
                register: 0,
                sign_extend,
                sixty_four,
                acquire_release: false,
                fault: FaultStatus::Translation { level: 3 },
            };
            let to_register = |value: i64| if sixty_four { value as u64 } else { value as u32 as u64 };
            proptest::prop_assert_eq!(access(AccessWidth::Byte, false).load_value(raw), raw as u8 as u64);
            proptest::prop_assert_eq!(access(AccessWidth::Halfword, false).load_value(raw), raw as u16 as u64);
            proptest::prop_assert_eq!(access(AccessWidth::Byte, true).load_value(raw), to_register(raw as i8 as i64));
            proptest::prop_assert_eq!(access(AccessWidth::Halfword, true).load_value(raw), to_register(raw as i16 as i64));
            proptest::prop_assert_eq!(access(AccessWidth::Word, true).load_value(raw), to_register(raw as i32 as i64));
            proptest::prop_assert_eq!(access(AccessWidth::Word, false).load_value(raw), raw as u32 as u64);
        }
    }

    #[test]
    fn access_width_helpers() {
        assert_eq!(AccessWidth::from_bytes(2), Some(AccessWidth::Halfword));
        assert_eq!(AccessWidth::from_bytes(3), None);
        assert_eq!(AccessWidth::Word.mask(), 0xffff_ffff);
        assert_eq!(AccessWidth::Doubleword.bits(), 64);
        assert_eq!(AccessWidth::Byte.bytes(), 1);
    }
}
