//! Emulation of the distributor (GICv2/GICv3) and redistributor (GICv3)
//! register frames: decode an access, then read or update the interrupt
//! state. Offsets come from the `gic` crate's `register_structs!` layouts
//! where it has them, so they are checked against the spec once.

use core::mem::offset_of;

use gic::affinity::{IROUTER_ANY_PARTICIPATING, MPIDR_AFFINITY_MASK};
use gic::registers::{
    GICD_CTLR, GICD_ROUTER_OFFSET, GICD_TYPER, GICR_TYPER, GICR_WAKER, GicdRegisters,
    GicdRouterRegisters, GicrRdRegisters, GicrSgiRegisters, PIDR2,
};

use super::sgi::vcpu_affinity;
use super::{
    GICD_BASE, GICD_SIZE, GICR_BASE, GICR_SGI_FRAME_OFFSET, GICR_STRIDE, GuestGicVersion,
    PRIORITY_MASK, VcpuMask, Vgic, VgicError,
};

/// What the hypervisor must do after an emulated write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    /// vCPUs that now have a deliverable interrupt (or received an SGI):
    /// make them exit if they run elsewhere, wake them if they wait in WFI.
    pub kick: VcpuMask,
    /// The access hit an unknown or reserved offset for the first time.
    pub warning: Option<MmioWarning>,
    /// The guest changed the configuration or state of hardware-linked
    /// interrupts: reconcile the physical ones with [`Vgic::irq_status`].
    pub hw_changed: Option<HwChange>,
}

/// Hardware-linked interrupts touched by a write (see [`Actions::hw_changed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwChange {
    /// The bank (vCPU) for SGIs/PPIs; meaningless for SPIs.
    pub bank: usize,
    /// INTID of bit 0 of `mask`.
    pub first_intid: u32,
    /// Bit n: INTID `first_intid + n` is hardware-linked and was touched.
    pub mask: u32,
}

/// An emulated read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioRead {
    /// The value, zero-extended to 64 bits.
    pub value: u64,
    /// The access hit an unknown or reserved offset for the first time.
    pub warning: Option<MmioWarning>,
}

/// A guest access to an offset the vGIC does not implement (read as zero,
/// write ignored). Returned once per 32-bit word of a frame, so a guest
/// that polls one cannot flood the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioWarning {
    /// Offset from [`GICD_BASE`].
    pub offset: u64,
    /// The accessing vCPU.
    pub vcpu: usize,
    /// Write (true) or read.
    pub write: bool,
    /// Access size in bytes.
    pub width: usize,
    /// The value written (0 for reads).
    pub value: u64,
}

// Registers the `gic` crate's layouts do not cover (IHI 0069H, "The GIC
// Distributor register map" and "Redistributor register map"; IHI 0048B
// §4.3 table 4-1 for the GICv2 identification registers).
/// GICD_TYPER2 (GICv3).
const GICD_TYPER2: u64 = 0x000C;
/// GICD_STATUSR (GICv3).
const GICD_STATUSR: u64 = 0x0010;
/// GICR_STATUSR.
const GICR_STATUSR: u64 = offset_of!(GicrRdRegisters, statusr) as u64;
/// GICR_PROPBASER (LPIs, not implemented).
const GICR_PROPBASER: u64 = 0x0070;
/// GICR_PENDBASER (LPIs, not implemented).
const GICR_PENDBASER: u64 = 0x0078;
/// GICR_SYNCR (LPIs: reads 0 = no operation in progress).
const GICR_SYNCR: u64 = 0x00C0;
/// Identification registers, GICv3 frames: PIDR4..PIDR3, PIDR0..2, CIDR0..3.
const ID_REGS_V3: u64 = 0xFFD0;
/// Identification registers of the GICv2 distributor (4 KiB frame).
const ID_REGS_V2: u64 = 0x0FD0;
/// PIDR2 / ICPIDR2 offset inside the identification block.
const PIDR2_IN_ID_BLOCK: u64 = 0x18;
/// CIDR0 offset inside the identification block.
const CIDR0_IN_ID_BLOCK: u64 = 0x20;
/// Component ID bytes (CoreSight "PrimeCell" preamble), CIDR0..3.
const COMPONENT_ID: [u8; 4] = [0x0D, 0xF0, 0x05, 0xB1];
/// GICD_IIDR / GICR_IIDR: Implementer 0x43B (Arm, JEP106), ProductID 'H'.
const VGIC_IIDR: u32 = (b'H' as u32) << 24 | 0x43B;

const CTLR: u64 = offset_of!(GicdRegisters, ctlr) as u64;
const TYPER: u64 = offset_of!(GicdRegisters, typer) as u64;
const IIDR: u64 = offset_of!(GicdRegisters, iidr) as u64;
const IGROUPR: u64 = offset_of!(GicdRegisters, igroupr) as u64;
const ISENABLER: u64 = offset_of!(GicdRegisters, isenabler) as u64;
const ICENABLER: u64 = offset_of!(GicdRegisters, icenabler) as u64;
const ISPENDR: u64 = offset_of!(GicdRegisters, ispendr) as u64;
const ICPENDR: u64 = offset_of!(GicdRegisters, icpendr) as u64;
const ISACTIVER: u64 = offset_of!(GicdRegisters, isactiver) as u64;
const ICACTIVER: u64 = offset_of!(GicdRegisters, icactiver) as u64;
const IPRIORITYR: u64 = offset_of!(GicdRegisters, ipriorityr) as u64;
const ITARGETSR: u64 = offset_of!(GicdRegisters, itargetsr) as u64;
const ICFGR: u64 = offset_of!(GicdRegisters, icfgr) as u64;
const IGRPMODR: u64 = offset_of!(GicdRegisters, igrpmodr) as u64;
const NSACR: u64 = offset_of!(GicdRegisters, nsacr) as u64;
const SGIR: u64 = offset_of!(GicdRegisters, sgir) as u64;
const CPENDSGIR: u64 = offset_of!(GicdRegisters, cpendsgir) as u64;
const SPENDSGIR: u64 = offset_of!(GicdRegisters, spendsgir) as u64;
const IROUTER: u64 = GICD_ROUTER_OFFSET as u64 + offset_of!(GicdRouterRegisters, irouter) as u64;

const GICR_CTLR: u64 = offset_of!(GicrRdRegisters, ctlr) as u64;
const GICR_IIDR: u64 = offset_of!(GicrRdRegisters, iidr) as u64;
const GICR_TYPER_OFFSET: u64 = offset_of!(GicrRdRegisters, typer) as u64;
const GICR_WAKER_OFFSET: u64 = offset_of!(GicrRdRegisters, waker) as u64;
const SGI_IGROUPR0: u64 = offset_of!(GicrSgiRegisters, igroupr0) as u64;
const SGI_ISENABLER0: u64 = offset_of!(GicrSgiRegisters, isenabler0) as u64;
const SGI_ICENABLER0: u64 = offset_of!(GicrSgiRegisters, icenabler0) as u64;
const SGI_ISPENDR0: u64 = offset_of!(GicrSgiRegisters, ispendr0) as u64;
const SGI_ICPENDR0: u64 = offset_of!(GicrSgiRegisters, icpendr0) as u64;
const SGI_ISACTIVER0: u64 = offset_of!(GicrSgiRegisters, isactiver0) as u64;
const SGI_ICACTIVER0: u64 = offset_of!(GicrSgiRegisters, icactiver0) as u64;
const SGI_IPRIORITYR: u64 = offset_of!(GicrSgiRegisters, ipriorityr) as u64;
const SGI_ICFGR: u64 = offset_of!(GicrSgiRegisters, icfgr) as u64;
const SGI_IGRPMODR0: u64 = offset_of!(GicrSgiRegisters, igrpmodr0) as u64;
const SGI_NSACR: u64 = offset_of!(GicrSgiRegisters, nsacr) as u64;

/// Which one-bit-per-INTID register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BitKind {
    Group,
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

/// The one-bit-per-INTID registers in offset order (same order in the
/// GICD and in the redistributor's SGI frame), 0x80 bytes apart.
const BIT_KINDS: [BitKind; 7] = [
    BitKind::Group,
    BitKind::SetEnable,
    BitKind::ClearEnable,
    BitKind::SetPending,
    BitKind::ClearPending,
    BitKind::SetActive,
    BitKind::ClearActive,
];

// `bit_register` relies on the seven one-bit-per-INTID registers being
// 0x80 bytes apart, in `BIT_KINDS` order, in both frames.
const _: () = {
    let gicd = [
        IGROUPR, ISENABLER, ICENABLER, ISPENDR, ICPENDR, ISACTIVER, ICACTIVER,
    ];
    let sgi = [
        SGI_IGROUPR0,
        SGI_ISENABLER0,
        SGI_ICENABLER0,
        SGI_ISPENDR0,
        SGI_ICPENDR0,
        SGI_ISACTIVER0,
        SGI_ICACTIVER0,
    ];
    let mut i = 0;
    while i < BIT_KINDS.len() {
        assert!(gicd[i] == IGROUPR + 0x80 * i as u64);
        assert!(sgi[i] == SGI_IGROUPR0 + 0x80 * i as u64);
        i += 1;
    }
};

/// A decoded register. `bank` is the vCPU whose SGIs/PPIs are meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reg {
    /// Reserved for this configuration but defined by the architecture
    /// (e.g. LPI registers without LPIs): RAZ/WI, nothing to report.
    Quiet,
    /// Not a register the vGIC knows: RAZ/WI and a warning.
    Unknown,
    /// A read-only constant.
    Constant(u64),
    DistCtlr,
    Bits {
        kind: BitKind,
        bank: usize,
        first: u32,
    },
    Priority {
        bank: usize,
        first: u32,
    },
    Targets {
        bank: usize,
        first: u32,
    },
    Config {
        bank: usize,
        first: u32,
    },
    Sgir,
    SgiPending {
        set: bool,
        bank: usize,
        first: u32,
    },
    Router {
        intid: u32,
        high_half: bool,
    },
    RedistTyper {
        vcpu: usize,
    },
    RedistWaker {
        vcpu: usize,
    },
}

/// Where an offset lands.
#[derive(Clone, Copy, Debug)]
enum Frame {
    Distributor(u64),
    RedistRd(usize, u64),
    RedistSgi(usize, u64),
}

/// Sizes allowed for a register (IHI 0048B §4.1.4, IHI 0069H "GIC memory
/// access"): byte-accessible ones take 8 or 32 bits, 64-bit ones 32 (either
/// half) or 64, everything else 32; unknown offsets take any size.
fn width_ok(reg: &Reg, width: usize) -> bool {
    match reg {
        Reg::Quiet | Reg::Unknown => true,
        Reg::Priority { .. } | Reg::Targets { .. } | Reg::SgiPending { .. } => {
            matches!(width, 1 | 4)
        }
        Reg::Router { .. } | Reg::RedistTyper { .. } => matches!(width, 4 | 8),
        _ => width == 4,
    }
}

impl Vgic {
    fn locate(&self, offset: u64) -> Result<Frame, VgicError> {
        if offset < GICD_SIZE {
            return Ok(Frame::Distributor(offset));
        }
        if self.config.version == GuestGicVersion::V3 {
            let gicr_start = GICR_BASE - GICD_BASE;
            let gicr_end = gicr_start + GICR_STRIDE * self.vcpus.len() as u64;
            if (gicr_start..gicr_end).contains(&offset) {
                let inner = offset - gicr_start;
                let vcpu = (inner / GICR_STRIDE) as usize;
                let inner = inner % GICR_STRIDE;
                return Ok(if inner < GICR_SGI_FRAME_OFFSET {
                    Frame::RedistRd(vcpu, inner)
                } else {
                    Frame::RedistSgi(vcpu, inner - GICR_SGI_FRAME_OFFSET)
                });
            }
        }
        Err(VgicError::OutsideRegion { offset })
    }

    /// Identification block (PIDRn, CIDRn) of any frame, if `off` is in it.
    fn id_register(&self, block: u64, off: u64) -> Option<Reg> {
        let inner = off.checked_sub(block).filter(|inner| *inner < 0x30)?;
        let arch_rev = match self.config.version {
            GuestGicVersion::V2 => 2,
            GuestGicVersion::V3 => 3,
        };
        let value = if inner == PIDR2_IN_ID_BLOCK {
            // JEP106 bits [3:0] = 0xB as Arm's GICs report (GIC-400: 0x2B).
            PIDR2::ArchRev.val(arch_rev).value | 0xB
        } else if inner >= CIDR0_IN_ID_BLOCK {
            u32::from(COMPONENT_ID[((inner - CIDR0_IN_ID_BLOCK) / 4) as usize])
        } else {
            0
        };
        Some(Reg::Constant(value.into()))
    }

    /// One-bit-per-INTID registers in `[base, base + 7 * 0x80)`.
    fn bit_register(off: u64, base: u64) -> Option<(BitKind, u32)> {
        let inner = off.checked_sub(base)?;
        let kind = *BIT_KINDS.get((inner / 0x80) as usize)?;
        Some((kind, ((inner % 0x80) / 4) as u32))
    }

    fn decode_distributor(&self, vcpu: usize, off: u64) -> Reg {
        let v3 = self.config.version == GuestGicVersion::V3;
        let implemented = |intid: u32| intid < self.num_intids();
        // With affinity routing (always on for v3) the GICD's SGI/PPI
        // fields are RAZ/WI: they live in the redistributors.
        let banked_ok = |first: u32| !(v3 && first < 32);
        match off {
            CTLR => Reg::DistCtlr,
            TYPER => Reg::Constant(self.dist_typer().into()),
            IIDR => Reg::Constant(VGIC_IIDR.into()),
            GICD_TYPER2 | GICD_STATUSR if v3 => Reg::Quiet,
            _ if (IGROUPR..IPRIORITYR).contains(&off) => {
                let Some((kind, word)) = Self::bit_register(off, IGROUPR) else {
                    return Reg::Unknown;
                };
                let first = word * 32;
                if banked_ok(first) && implemented(first) {
                    Reg::Bits {
                        kind,
                        bank: vcpu,
                        first,
                    }
                } else {
                    Reg::Quiet
                }
            }
            _ if (IPRIORITYR..IPRIORITYR + 1020).contains(&off) => {
                let first = (off - IPRIORITYR) as u32;
                if banked_ok(first) && implemented(first) {
                    Reg::Priority { bank: vcpu, first }
                } else {
                    Reg::Quiet
                }
            }
            _ if (ITARGETSR..ITARGETSR + 1020).contains(&off) => {
                let first = (off - ITARGETSR) as u32;
                if v3 {
                    Reg::Quiet
                } else if implemented(first) {
                    Reg::Targets { bank: vcpu, first }
                } else {
                    Reg::Quiet
                }
            }
            _ if (ICFGR..IGRPMODR).contains(&off) => {
                let first = ((off - ICFGR) / 4) as u32 * 16;
                if banked_ok(first) && implemented(first) {
                    Reg::Config { bank: vcpu, first }
                } else {
                    Reg::Quiet
                }
            }
            // DS = 1 (v3) / no Security Extensions (v2): group modifiers
            // and Non-secure access control are RAZ/WI.
            _ if v3 && (IGRPMODR..IGRPMODR + 0x80).contains(&off) => Reg::Quiet,
            _ if (NSACR..SGIR).contains(&off) => Reg::Quiet,
            SGIR if !v3 => Reg::Sgir,
            _ if !v3 && (CPENDSGIR..SPENDSGIR + 16).contains(&off) => {
                let set = off >= SPENDSGIR;
                let base = if set { SPENDSGIR } else { CPENDSGIR };
                Reg::SgiPending {
                    set,
                    bank: vcpu,
                    first: (off - base) as u32,
                }
            }
            _ if v3 && (IROUTER..IROUTER + 8 * 1020).contains(&off) => {
                let intid = ((off - IROUTER) / 8) as u32;
                if intid >= 32 && implemented(intid) {
                    Reg::Router {
                        intid,
                        high_half: off % 8 == 4,
                    }
                } else {
                    Reg::Quiet
                }
            }
            _ => {
                let block = if v3 { ID_REGS_V3 } else { ID_REGS_V2 };
                self.id_register(block, off).unwrap_or(Reg::Unknown)
            }
        }
    }

    fn decode_redist_rd(&self, vcpu: usize, off: u64) -> Reg {
        match off {
            // No LPIs: EnableLPIs RAZ/WI, RWP/UWP never set.
            GICR_CTLR | GICR_STATUSR | GICR_SYNCR => Reg::Quiet,
            GICR_PROPBASER | GICR_PENDBASER => Reg::Quiet,
            GICR_IIDR => Reg::Constant(VGIC_IIDR.into()),
            _ if (GICR_TYPER_OFFSET..GICR_TYPER_OFFSET + 8).contains(&off) => {
                Reg::RedistTyper { vcpu }
            }
            GICR_WAKER_OFFSET => Reg::RedistWaker { vcpu },
            _ => self.id_register(ID_REGS_V3, off).unwrap_or(Reg::Unknown),
        }
    }

    fn decode_redist_sgi(vcpu: usize, off: u64) -> Reg {
        if (SGI_IGROUPR0..SGI_IPRIORITYR).contains(&off) {
            return match Self::bit_register(off, SGI_IGROUPR0) {
                Some((kind, 0)) => Reg::Bits {
                    kind,
                    bank: vcpu,
                    first: 0,
                },
                _ => Reg::Unknown,
            };
        }
        if (SGI_IPRIORITYR..SGI_IPRIORITYR + 32).contains(&off) {
            return Reg::Priority {
                bank: vcpu,
                first: (off - SGI_IPRIORITYR) as u32,
            };
        }
        if (SGI_ICFGR..SGI_ICFGR + 8).contains(&off) {
            return Reg::Config {
                bank: vcpu,
                first: ((off - SGI_ICFGR) / 4) as u32 * 16,
            };
        }
        match off {
            SGI_IGRPMODR0 | SGI_NSACR => Reg::Quiet,
            _ => Reg::Unknown,
        }
    }

    fn decode(&self, vcpu: usize, offset: u64, width: usize) -> Result<Reg, VgicError> {
        self.check_vcpu(vcpu)?;
        if !matches!(width, 1 | 2 | 4 | 8) {
            return Err(VgicError::BadWidth { offset, width });
        }
        if !offset.is_multiple_of(width as u64) {
            return Err(VgicError::Misaligned { offset, width });
        }
        // Decode at the 32-bit word (or 64-bit register) holding the access.
        let reg = match self.locate(offset)? {
            Frame::Distributor(off) => self.decode_distributor(vcpu, off),
            Frame::RedistRd(owner, off) => self.decode_redist_rd(owner, off),
            Frame::RedistSgi(owner, off) => Self::decode_redist_sgi(owner, off),
        };
        if !width_ok(&reg, width) {
            return Err(VgicError::BadWidth { offset, width });
        }
        Ok(reg)
    }

    /// Returns a warning the first time the word at `offset` is hit.
    fn warn_once(
        &mut self,
        vcpu: usize,
        offset: u64,
        width: usize,
        write: Option<u64>,
    ) -> Option<MmioWarning> {
        let (bitmap, word) = match self.locate(offset).ok()? {
            Frame::Distributor(off) => (&mut self.warned_gicd, off / 4),
            Frame::RedistRd(_, off) => (&mut self.warned_gicr, off / 4),
            Frame::RedistSgi(_, off) => (&mut self.warned_gicr, (off + GICR_SGI_FRAME_OFFSET) / 4),
        };
        let (index, bit) = ((word / 64) as usize, word % 64);
        let slot = bitmap.get_mut(index)?;
        if *slot & (1 << bit) != 0 {
            return None;
        }
        *slot |= 1 << bit;
        Some(MmioWarning {
            offset,
            vcpu,
            write: write.is_some(),
            width,
            value: write.unwrap_or(0),
        })
    }

    fn dist_typer(&self) -> u32 {
        let it_lines = self.num_intids() / 32 - 1;
        let cpus = self.vcpus.len().min(8) as u32 - 1;
        let mut value = GICD_TYPER::ITLinesNumber.val(it_lines) + GICD_TYPER::CPUNumber.val(cpus);
        if self.config.version == GuestGicVersion::V3 {
            // 10 INTID bits would do, but 16 is the minimum the spec allows
            // for IDbits; no LPIs, no RSS (every vCPU has Aff0 < 16).
            value += GICD_TYPER::IDbits.val(15);
        }
        value.value
    }

    fn dist_ctlr(&self) -> u32 {
        let mut value = GICD_CTLR::ENABLE_GRP0.val(self.enable_grp0.into())
            + GICD_CTLR::ENABLE_GRP1.val(self.enable_grp1.into());
        if self.config.version == GuestGicVersion::V3 {
            // Affinity routing on and a single Security state: both RAO/WI.
            value += GICD_CTLR::ARE::SET + GICD_CTLR::DS::SET;
        }
        value.value
    }

    fn redist_typer(&self, vcpu: usize) -> u64 {
        let last = vcpu + 1 == self.vcpus.len();
        (GICR_TYPER::Affinity_Value.val(vcpu_affinity(vcpu).to_packed32().into())
            + GICR_TYPER::Processor_Number.val(vcpu as u64)
            + GICR_TYPER::Last.val(last.into()))
        .value
    }

    /// Emulates a guest read of `width` bytes (1, 2, 4 or 8) at `offset`
    /// from [`GICD_BASE`] by `vcpu`. Unknown offsets read as zero and
    /// return a warning the first time.
    pub fn mmio_read(
        &mut self,
        vcpu: usize,
        offset: u64,
        width: usize,
    ) -> Result<MmioRead, VgicError> {
        let reg = self.decode(vcpu, offset, width)?;
        let value = match reg {
            Reg::Quiet => 0,
            Reg::Unknown => {
                let warning = self.warn_once(vcpu, offset, width, None);
                return Ok(MmioRead { value: 0, warning });
            }
            Reg::Constant(value) => value,
            Reg::DistCtlr => self.dist_ctlr().into(),
            Reg::Bits { kind, bank, first } => self.read_bits(kind, bank, first).into(),
            Reg::Priority { bank, first } => {
                self.read_bytes(bank, first, width, |_, irq| irq.priority)
            }
            Reg::Targets { bank, first } => self.read_bytes(bank, first, width, |intid, irq| {
                if intid < 32 {
                    1 << bank
                } else {
                    irq.route as u8
                }
            }),
            Reg::Config { bank, first } => self.read_config(bank, first).into(),
            Reg::Sgir => 0,
            Reg::SgiPending { bank, first, .. } => {
                self.read_bytes(bank, first, width, |_, irq| irq.sgi_sources)
            }
            Reg::Router { intid, high_half } => {
                let route = self.irq(vcpu, intid).map_or(0, |irq| irq.route);
                if high_half { route >> 32 } else { route }
            }
            Reg::RedistTyper { vcpu: owner } => {
                let typer = self.redist_typer(owner);
                if offset % 8 == 4 { typer >> 32 } else { typer }
            }
            Reg::RedistWaker { vcpu: owner } => {
                let sleep = self.vcpus[owner].processor_sleep;
                // ChildrenAsleep follows ProcessorSleep at once: there is
                // no interface to quiesce.
                (GICR_WAKER::ProcessorSleep.val(sleep.into())
                    + GICR_WAKER::ChildrenAsleep.val(sleep.into()))
                .value
                .into()
            }
        };
        // Byte-granular registers were read from the addressed byte on;
        // sub-word reads elsewhere only hit RAZ offsets.
        let value = match width {
            8 => value,
            4 => value & 0xFFFF_FFFF,
            _ => value & 0xFF,
        };
        Ok(MmioRead {
            value,
            warning: None,
        })
    }

    /// Emulates a guest write of `width` bytes at `offset` from
    /// [`GICD_BASE`] by `vcpu`. Unknown offsets and read-only registers
    /// ignore the write (unknown ones return a warning the first time).
    pub fn mmio_write(
        &mut self,
        vcpu: usize,
        offset: u64,
        width: usize,
        value: u64,
    ) -> Result<Actions, VgicError> {
        let reg = self.decode(vcpu, offset, width)?;
        let mut actions = Actions::default();
        match reg {
            Reg::Quiet | Reg::Constant(_) | Reg::RedistTyper { .. } => {}
            Reg::Unknown => actions.warning = self.warn_once(vcpu, offset, width, Some(value)),
            Reg::DistCtlr => {
                let ctlr = value as u32;
                // The group enables decide what is deliverable.
                self.changing();
                self.enable_grp0 = GICD_CTLR::ENABLE_GRP0.is_set(ctlr);
                self.enable_grp1 = GICD_CTLR::ENABLE_GRP1.is_set(ctlr);
                for target in 0..self.vcpus.len() {
                    if self.has_deliverable(target)? {
                        actions.kick.insert(target);
                    }
                }
            }
            Reg::Bits { kind, bank, first } => {
                self.write_bits(kind, bank, first, value as u32, &mut actions)
            }
            Reg::Priority { bank, first } => {
                for (i, byte) in value.to_le_bytes()[..width].iter().enumerate() {
                    let intid = first + i as u32;
                    if let Some(irq) = self.irq_mut(bank, intid) {
                        irq.priority = byte & PRIORITY_MASK;
                        note_hw(&mut actions, bank, intid, irq.hw.is_some());
                    }
                }
            }
            Reg::Targets { first, .. } => {
                let valid = ((1u32 << self.vcpus.len()) - 1) as u8;
                for (i, byte) in value.to_le_bytes()[..width].iter().enumerate() {
                    let intid = first + i as u32;
                    if intid < 32 {
                        continue; // SGI/PPI targets are read-only.
                    }
                    let target = byte & valid;
                    let new_target = (target != 0).then(|| target.trailing_zeros() as u16);
                    self.route_spi(intid, u64::from(target), new_target, &mut actions);
                }
            }
            Reg::Config { bank, first } => {
                self.write_config(bank, first, value as u32, &mut actions)
            }
            Reg::Sgir => {
                let delivery = self.send_sgi_v2(vcpu, value as u32);
                actions.kick.union_with(delivery.kick);
            }
            Reg::SgiPending { set, bank, first } => {
                let valid = ((1u32 << self.vcpus.len()) - 1) as u8;
                for (i, byte) in value.to_le_bytes()[..width].iter().enumerate() {
                    let sgi = first + i as u32;
                    let sources = byte & valid;
                    if set {
                        for source in 0..8 {
                            if sources & (1 << source) != 0
                                && let Some(target) = self.inject_sgi_v2(bank, sgi, source)
                            {
                                actions.kick.insert(target);
                            }
                        }
                    } else if let Some(irq) = self.irq_mut(bank, sgi) {
                        irq.sgi_sources &= !sources;
                        if irq.sgi_sources == 0 && irq.latch {
                            irq.clear_pending_latch();
                        }
                    }
                }
            }
            Reg::Router { intid, high_half } => {
                let old = self.irq(vcpu, intid).map_or(0, |irq| irq.route);
                let merged = match (width, high_half) {
                    (8, _) => value,
                    (_, true) => (old & 0xFFFF_FFFF) | (value << 32),
                    (_, false) => (old & !0xFFFF_FFFF) | (value & 0xFFFF_FFFF),
                };
                let route = merged & (MPIDR_AFFINITY_MASK | IROUTER_ANY_PARTICIPATING);
                let target = if route & IROUTER_ANY_PARTICIPATING != 0 {
                    // "Any participating PE": vCPU 0 always participates.
                    Some(0)
                } else {
                    super::vcpu_from_affinity(
                        gic::affinity::Affinity::from_mpidr(route),
                        self.vcpus.len(),
                    )
                    .map(|v| v as u16)
                };
                self.route_spi(intid, route, target, &mut actions);
            }
            Reg::RedistWaker { vcpu: owner } => {
                self.vcpus[owner].processor_sleep = GICR_WAKER::ProcessorSleep.is_set(value as u32);
            }
        }
        Ok(actions)
    }

    fn route_spi(&mut self, intid: u32, route: u64, target: Option<u16>, actions: &mut Actions) {
        let Some(irq) = self.irq_mut(0, intid) else {
            return;
        };
        irq.route = route;
        irq.target = target;
        note_hw(actions, 0, intid, irq.hw.is_some());
        if let Some(vcpu) = self.kick_target(0, intid) {
            actions.kick.insert(vcpu);
        }
    }

    fn read_bits(&self, kind: BitKind, bank: usize, first: u32) -> u32 {
        let mut value = 0;
        for bit in 0..32 {
            let Some(irq) = self.irq(bank, first + bit) else {
                break;
            };
            let set = match kind {
                BitKind::Group => irq.group1,
                BitKind::SetEnable | BitKind::ClearEnable => irq.enabled,
                BitKind::SetPending | BitKind::ClearPending => irq.pending_view(),
                BitKind::SetActive | BitKind::ClearActive => irq.active_view(),
            };
            value |= u32::from(set) << bit;
        }
        value
    }

    fn write_bits(
        &mut self,
        kind: BitKind,
        bank: usize,
        first: u32,
        value: u32,
        actions: &mut Actions,
    ) {
        let v2 = self.config.version == GuestGicVersion::V2;
        for bit in 0..32 {
            let intid = first + bit;
            let one = value & (1 << bit) != 0;
            if !one && kind != BitKind::Group {
                continue;
            }
            let sequence = self.next_sequence();
            let Some(irq) = self.irq_mut(bank, intid) else {
                break;
            };
            match kind {
                BitKind::Group => irq.group1 = one,
                BitKind::SetEnable => irq.enabled = true,
                BitKind::ClearEnable => irq.enabled = false,
                // GICv2 SGIs: set/clear through GICD_[SC]PENDSGIR only
                // (IHI 0048B §4.3.7, §4.3.8).
                BitKind::SetPending | BitKind::ClearPending if v2 && intid < 16 => continue,
                BitKind::SetPending => irq.set_pending_latch(sequence),
                BitKind::ClearPending => irq.clear_pending_latch(),
                BitKind::SetActive => irq.write_active(true),
                BitKind::ClearActive => irq.write_active(false),
            }
            note_hw(actions, bank, intid, irq.hw.is_some());
            if matches!(
                kind,
                BitKind::Group | BitKind::SetEnable | BitKind::SetPending
            ) && let Some(target) = self.kick_target(bank, intid)
            {
                actions.kick.insert(target);
            }
        }
    }

    fn read_bytes(
        &self,
        bank: usize,
        first: u32,
        width: usize,
        field: impl Fn(u32, &super::irq::Irq) -> u8,
    ) -> u64 {
        let mut value = 0;
        for i in 0..width as u32 {
            if let Some(irq) = self.irq(bank, first + i) {
                value |= u64::from(field(first + i, irq)) << (8 * i);
            }
        }
        value
    }

    fn read_config(&self, bank: usize, first: u32) -> u32 {
        let mut value = 0;
        for i in 0..16 {
            if let Some(irq) = self.irq(bank, first + i) {
                value |= u32::from(irq.edge) << (2 * i + 1);
            }
        }
        value
    }

    fn write_config(&mut self, bank: usize, first: u32, value: u32, actions: &mut Actions) {
        for i in 0..16 {
            let intid = first + i;
            if intid < 16 {
                continue; // SGIs are always edge-triggered.
            }
            if let Some(irq) = self.irq_mut(bank, intid) {
                irq.edge = value & (1 << (2 * i + 1)) != 0;
                note_hw(actions, bank, intid, irq.hw.is_some());
            }
        }
    }
}

/// Records that hardware-linked `intid` was touched.
fn note_hw(actions: &mut Actions, bank: usize, intid: u32, hardware: bool) {
    if !hardware {
        return;
    }
    let change = actions.hw_changed.get_or_insert(HwChange {
        bank,
        first_intid: intid & !31,
        mask: 0,
    });
    if change.first_intid == intid & !31 {
        change.mask |= 1 << (intid % 32);
    }
}
