//! The MADT ("APIC"): x86 local APIC/x2APIC, I/O APIC, overrides and NMIs; ARM
//! GICC, GICD, GICR and ITS (ACPI 6.5 §5.2.12).

use alloc::vec::Vec;

use super::error::{AcpiError, AcpiWarning, Signature};
use super::sdt::{Entry, Sdt, entries, u8_at, u16_at, u32_at, u64_at};

/// Bytes before the first MADT entry (header, local APIC address, flags).
const MADT_ENTRIES_START: usize = 44;

/// Processor entry flags (local APIC, x2APIC and GICC share bits 0; bit 1 on x86
/// and bit 3 on GICC are Online Capable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessorFlags {
    /// The raw flags field.
    pub raw: u32,
    /// Bit 0: the processor is ready to use.
    pub enabled: bool,
    /// The processor is disabled now but can be brought online later.
    pub online_capable: bool,
}

/// A Processor Local APIC (type 0) or Local x2APIC (type 9) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalApic {
    /// Offset of the entry in the MADT.
    pub offset: usize,
    /// The ACPI processor UID.
    pub processor_uid: u32,
    /// The (x2)APIC id.
    pub apic_id: u32,
    /// Enabled / Online Capable.
    pub flags: ProcessorFlags,
    /// Type 9 (32-bit id) rather than type 0 (8-bit id).
    pub x2apic: bool,
}

impl LocalApic {
    /// 0xFF (xAPIC) or 0xFFFFFFFF (x2APIC): firmware's "no processor here".
    pub fn has_invalid_id(&self) -> bool {
        if self.x2apic {
            self.apic_id == u32::MAX
        } else {
            self.apic_id == 0xff
        }
    }
}

/// An I/O APIC entry (type 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoApic {
    /// Its APIC id.
    pub id: u8,
    /// MMIO base.
    pub address: u32,
    /// First global system interrupt it handles.
    pub gsi_base: u32,
}

/// An Interrupt Source Override entry (type 2): an ISA IRQ wired to another GSI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterruptSourceOverride {
    /// Bus (0 = ISA).
    pub bus: u8,
    /// The bus-relative IRQ.
    pub source: u8,
    /// The GSI it is wired to.
    pub gsi: u32,
    /// MPS INTI flags: polarity in bits 1:0, trigger mode in bits 3:2.
    pub flags: u16,
}

impl InterruptSourceOverride {
    /// The polarity its MPS INTI flags give (bits 1:0), if not "conforms to
    /// the bus" (0b00) or reserved (0b10).
    fn polarity(&self) -> Result<Option<InterruptPolarity>, ()> {
        match self.flags & 0b11 {
            0b00 => Ok(None),
            0b01 => Ok(Some(InterruptPolarity::ActiveHigh)),
            0b11 => Ok(Some(InterruptPolarity::ActiveLow)),
            _ => Err(()),
        }
    }

    /// The trigger mode its MPS INTI flags give (bits 3:2), as
    /// [`Self::polarity`].
    fn trigger(&self) -> Result<Option<InterruptTrigger>, ()> {
        match (self.flags >> 2) & 0b11 {
            0b00 => Ok(None),
            0b01 => Ok(Some(InterruptTrigger::Edge)),
            0b11 => Ok(Some(InterruptTrigger::Level)),
            _ => Err(()),
        }
    }
}

/// An interrupt input's polarity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptPolarity {
    /// Asserted high (the ISA bus's default).
    ActiveHigh,
    /// Asserted low.
    ActiveLow,
}

/// An interrupt input's trigger mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptTrigger {
    /// Edge (the ISA bus's default).
    Edge,
    /// Level.
    Level,
}

/// Where an ISA IRQ (COM1's 4, say) arrives on an x86 machine: the GSI the
/// MADT's interrupt source overrides map it to (itself without one), how
/// that input is triggered, and the I/O APIC input pin it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IsaIrqRoute {
    /// The ISA IRQ.
    pub irq: u8,
    /// Its global system interrupt.
    pub gsi: u32,
    /// Its polarity (ISA: active high unless an override says otherwise).
    pub polarity: InterruptPolarity,
    /// Its trigger mode (ISA: edge unless an override says otherwise).
    pub trigger: InterruptTrigger,
    /// The I/O APIC with the highest GSI base not above `gsi`. The MADT does
    /// not say how many pins it has: check `pin` against its IOAPICVER.
    pub io_apic: IoApic,
    /// The input pin: `gsi - io_apic.gsi_base`.
    pub pin: u32,
    /// An interrupt source override gave the GSI or flags.
    pub overridden: bool,
    /// The override's flags use a reserved encoding (polarity or trigger
    /// 0b10); the ISA default was taken for it.
    pub reserved_flags: bool,
}

/// Why an ISA IRQ has no I/O APIC input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsaRouteError {
    /// The MADT lists no I/O APIC (only the 8259 PICs, if anything).
    NoIoApic,
    /// Every I/O APIC's GSI base is above the IRQ's GSI.
    NoIoApicForGsi {
        /// The ISA IRQ.
        irq: u8,
        /// Its GSI.
        gsi: u32,
    },
}

impl core::fmt::Display for IsaRouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoIoApic => write!(f, "the MADT lists no I/O APIC"),
            Self::NoIoApicForGsi { irq, gsi } => write!(
                f,
                "no I/O APIC in the MADT handles GSI {gsi} (ISA IRQ {irq})"
            ),
        }
    }
}

/// An NMI Source entry (type 3): a GSI that is an NMI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NmiSource {
    /// MPS INTI flags.
    pub flags: u16,
    /// The GSI.
    pub gsi: u32,
}

/// A Local APIC NMI (type 4) or Local x2APIC NMI (type 0xA) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalApicNmi {
    /// The ACPI processor UID, or 0xFF / 0xFFFFFFFF for all processors.
    pub processor_uid: u32,
    /// MPS INTI flags.
    pub flags: u16,
    /// LINT0 or LINT1.
    pub lint: u8,
    /// Type 0xA.
    pub x2apic: bool,
}

impl LocalApicNmi {
    /// Whether the entry applies to every processor.
    pub fn applies_to_all(&self) -> bool {
        (!self.x2apic && self.processor_uid == 0xff) || self.processor_uid == u32::MAX
    }
}

/// A GIC CPU Interface (GICC, type 0xB) entry: one ARM processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gicc {
    /// Offset of the entry in the MADT.
    pub offset: usize,
    /// GICv2 CPU interface number.
    pub cpu_interface_number: u32,
    /// The ACPI processor UID (what the PPTT refers to).
    pub processor_uid: u32,
    /// Enabled (bit 0) / Online Capable (bit 3).
    pub flags: ProcessorFlags,
    /// Parking protocol version (0: not supported).
    pub parking_protocol_version: u32,
    /// Performance monitoring interrupt GSIV.
    pub performance_gsiv: u32,
    /// Parking protocol mailbox.
    pub parked_address: u64,
    /// GICC physical base (GICv2, or GICv3 legacy interface).
    pub gicc_base: u64,
    /// GICV: the virtual CPU interface.
    pub gicv_base: u64,
    /// GICH: the virtual interface control registers.
    pub gich_base: u64,
    /// The virtual GIC maintenance interrupt.
    pub vgic_maintenance_gsiv: u32,
    /// GICR of this CPU (GICv3+, when not given by GICR entries).
    pub gicr_base: u64,
    /// MPIDR affinity (Aff3 in 39:32, Aff2..Aff0 in 23:0).
    pub mpidr: u64,
    /// Processor power efficiency class (ACPI 6.0+ entries, 80 bytes); higher is
    /// faster.
    pub efficiency_class: Option<u8>,
    /// SPE overflow interrupt (ACPI 6.3+).
    pub spe_overflow_gsiv: Option<u16>,
}

/// A GIC Distributor (GICD, type 0xC) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gicd {
    /// GIC id.
    pub id: u32,
    /// GICD physical base.
    pub base: u64,
    /// System vector base (must be 0).
    pub gsi_base: u32,
    /// 1 = GICv1, 2 = GICv2, 3 = GICv3, 4 = GICv4, 0 = not given.
    pub version: u8,
}

/// A GIC Redistributor (GICR, type 0xE) range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gicr {
    /// First redistributor.
    pub base: u64,
    /// Length of the range.
    pub length: u32,
}

/// A GIC Interrupt Translation Service (ITS, type 0xF) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GicIts {
    /// ITS id.
    pub id: u32,
    /// Physical base.
    pub base: u64,
}

/// Everything this hypervisor uses from a MADT, in table order per kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Madt {
    /// MADT revision.
    pub revision: u8,
    /// Local APIC MMIO address (x86), or the override from a type 5 entry.
    pub local_apic_address: u64,
    /// MADT flags (bit 0: PC-AT compatible, dual 8259).
    pub flags: u32,
    /// Local APIC and x2APIC entries.
    pub local_apics: Vec<LocalApic>,
    /// I/O APICs.
    pub io_apics: Vec<IoApic>,
    /// Interrupt source overrides.
    pub overrides: Vec<InterruptSourceOverride>,
    /// NMI sources.
    pub nmi_sources: Vec<NmiSource>,
    /// Local APIC NMI lines.
    pub local_apic_nmis: Vec<LocalApicNmi>,
    /// GIC CPU interfaces (ARM processors).
    pub giccs: Vec<Gicc>,
    /// GIC distributors.
    pub gicds: Vec<Gicd>,
    /// GIC redistributor ranges.
    pub gicrs: Vec<Gicr>,
    /// GIC ITSes.
    pub its: Vec<GicIts>,
    /// Unknown entry types, skipped.
    pub warnings: Vec<AcpiWarning>,
}

const T: Signature = Signature::MADT;

fn flags(raw: u32, online_capable_bit: u32) -> ProcessorFlags {
    ProcessorFlags {
        raw,
        enabled: raw & 1 != 0,
        online_capable: raw & online_capable_bit != 0,
    }
}

/// Reads a field the entry's minimum-length check already covered.
fn field<V: Default>(value: Option<V>) -> V {
    value.unwrap_or_default()
}

impl Madt {
    /// Parses a MADT. A bad checksum, a truncated table or entry, or an entry with
    /// length below 2 is an error; unknown entry types are skipped with a warning.
    pub fn parse(bytes: &[u8]) -> Result<Self, AcpiError> {
        let table = Sdt::parse(bytes, Some(T))?;
        Self::from_sdt(&table)
    }

    /// Parses an already validated MADT.
    pub fn from_sdt(table: &Sdt<'_>) -> Result<Self, AcpiError> {
        table.require(MADT_ENTRIES_START)?;
        let b = table.bytes;
        let mut madt = Self {
            revision: table.header.revision,
            local_apic_address: u64::from(field(u32_at(b, 36))),
            flags: field(u32_at(b, 40)),
            ..Self::default()
        };
        for entry in entries(table, MADT_ENTRIES_START)? {
            madt.add(&entry)?;
        }
        Ok(madt)
    }

    fn add(&mut self, entry: &Entry<'_>) -> Result<(), AcpiError> {
        let e = entry.bytes;
        match entry.entry_type {
            0x0 => {
                entry.require(T, 8)?;
                self.local_apics.push(LocalApic {
                    offset: entry.offset,
                    processor_uid: u32::from(e[2]),
                    apic_id: u32::from(e[3]),
                    flags: flags(field(u32_at(e, 4)), 1 << 1),
                    x2apic: false,
                });
            }
            0x1 => {
                entry.require(T, 12)?;
                self.io_apics.push(IoApic {
                    id: e[2],
                    address: field(u32_at(e, 4)),
                    gsi_base: field(u32_at(e, 8)),
                });
            }
            0x2 => {
                entry.require(T, 10)?;
                self.overrides.push(InterruptSourceOverride {
                    bus: e[2],
                    source: e[3],
                    gsi: field(u32_at(e, 4)),
                    flags: field(u16_at(e, 8)),
                });
            }
            0x3 => {
                entry.require(T, 8)?;
                self.nmi_sources.push(NmiSource {
                    flags: field(u16_at(e, 2)),
                    gsi: field(u32_at(e, 4)),
                });
            }
            0x4 => {
                entry.require(T, 6)?;
                self.local_apic_nmis.push(LocalApicNmi {
                    processor_uid: u32::from(e[2]),
                    flags: field(u16_at(e, 3)),
                    lint: e[5],
                    x2apic: false,
                });
            }
            0x5 => {
                entry.require(T, 12)?;
                self.local_apic_address = field(u64_at(e, 4));
            }
            0x9 => {
                entry.require(T, 16)?;
                self.local_apics.push(LocalApic {
                    offset: entry.offset,
                    apic_id: field(u32_at(e, 4)),
                    flags: flags(field(u32_at(e, 8)), 1 << 1),
                    processor_uid: field(u32_at(e, 12)),
                    x2apic: true,
                });
            }
            0xa => {
                entry.require(T, 12)?;
                self.local_apic_nmis.push(LocalApicNmi {
                    flags: field(u16_at(e, 2)),
                    processor_uid: field(u32_at(e, 4)),
                    lint: e[8],
                    x2apic: true,
                });
            }
            0xb => {
                // ACPI 5.1 entries (76 bytes) are the oldest with an MPIDR.
                entry.require(T, 76)?;
                self.giccs.push(Gicc {
                    offset: entry.offset,
                    cpu_interface_number: field(u32_at(e, 4)),
                    processor_uid: field(u32_at(e, 8)),
                    flags: flags(field(u32_at(e, 12)), 1 << 3),
                    parking_protocol_version: field(u32_at(e, 16)),
                    performance_gsiv: field(u32_at(e, 20)),
                    parked_address: field(u64_at(e, 24)),
                    gicc_base: field(u64_at(e, 32)),
                    gicv_base: field(u64_at(e, 40)),
                    gich_base: field(u64_at(e, 48)),
                    vgic_maintenance_gsiv: field(u32_at(e, 56)),
                    gicr_base: field(u64_at(e, 60)),
                    mpidr: field(u64_at(e, 68)),
                    efficiency_class: u8_at(e, 76),
                    spe_overflow_gsiv: u16_at(e, 78),
                });
            }
            0xc => {
                entry.require(T, 24)?;
                self.gicds.push(Gicd {
                    id: field(u32_at(e, 4)),
                    base: field(u64_at(e, 8)),
                    gsi_base: field(u32_at(e, 16)),
                    version: e[20],
                });
            }
            0xe => {
                entry.require(T, 16)?;
                self.gicrs.push(Gicr {
                    base: field(u64_at(e, 4)),
                    length: field(u32_at(e, 12)),
                });
            }
            0xf => {
                entry.require(T, 20)?;
                self.its.push(GicIts {
                    id: field(u32_at(e, 4)),
                    base: field(u64_at(e, 8)),
                });
            }
            // Known, not used here: I/O SAPIC, local SAPIC, platform interrupt
            // sources (Itanium), GIC MSI frame, multiprocessor wakeup.
            0x6 | 0x7 | 0x8 | 0xd | 0x10 => {}
            entry_type => self.warnings.push(AcpiWarning::UnknownEntry {
                table: T,
                offset: entry.offset,
                entry_type,
            }),
        }
        Ok(())
    }

    /// Where ISA IRQ `irq` arrives (ACPI 6.5 5.2.12.5): the first
    /// interrupt source override for bus 0 and this source gives its GSI and
    /// flags ("conforms to the bus" meaning ISA's active-high edge);
    /// without one the IRQ is the GSI of the same number, active high, edge.
    pub fn isa_irq(&self, irq: u8) -> Result<IsaIrqRoute, IsaRouteError> {
        if self.io_apics.is_empty() {
            return Err(IsaRouteError::NoIoApic);
        }
        let mut route = IsaIrqRoute {
            irq,
            gsi: u32::from(irq),
            polarity: InterruptPolarity::ActiveHigh,
            trigger: InterruptTrigger::Edge,
            io_apic: self.io_apics[0],
            pin: 0,
            overridden: false,
            reserved_flags: false,
        };
        if let Some(o) = self
            .overrides
            .iter()
            .find(|o| o.bus == 0 && o.source == irq)
        {
            route.gsi = o.gsi;
            route.overridden = true;
            match o.polarity() {
                Ok(Some(polarity)) => route.polarity = polarity,
                Ok(None) => {}
                Err(()) => route.reserved_flags = true,
            }
            match o.trigger() {
                Ok(Some(trigger)) => route.trigger = trigger,
                Ok(None) => {}
                Err(()) => route.reserved_flags = true,
            }
        }
        let io_apic = self
            .io_apics
            .iter()
            .filter(|a| a.gsi_base <= route.gsi)
            .max_by_key(|a| a.gsi_base)
            .ok_or(IsaRouteError::NoIoApicForGsi {
                irq,
                gsi: route.gsi,
            })?;
        route.io_apic = *io_apic;
        route.pin = route.gsi - io_apic.gsi_base;
        Ok(route)
    }

    /// The GIC version from the first GICD entry (0 when absent or not given).
    pub fn gic_version(&self) -> u8 {
        self.gicds.first().map_or(0, |gicd| gicd.version)
    }

    /// The GICv3/v4 redistributor regions as sorted, merged `(base, size)`
    /// ranges: the GICR entries when there are any (ACPI 6.5 §5.2.12.17: then
    /// the GICCs' GICR base is to be ignored), else each enabled GICC's own
    /// redistributor (one frame pair of 128 KiB on GICv3, two pairs, 256 KiB,
    /// on GICv4 with its VLPI frames). Adjacent per-CPU frames merge, so a
    /// machine with one contiguous block gets one region however many CPUs it has.
    pub fn redistributor_regions(&self) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = if self.gicrs.is_empty() {
            let frame = if self.gic_version() >= 4 {
                0x4_0000
            } else {
                0x2_0000
            };
            self.giccs
                .iter()
                .filter(|gicc| gicc.flags.enabled && gicc.gicr_base != 0)
                .map(|gicc| (gicc.gicr_base, gicc.gicr_base.saturating_add(frame)))
                .collect()
        } else {
            self.gicrs
                .iter()
                .filter(|gicr| gicr.length != 0)
                .map(|gicr| (gicr.base, gicr.base.saturating_add(u64::from(gicr.length))))
                .collect()
        };
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
            .into_iter()
            .map(|(start, end)| (start, end - start))
            .collect()
    }
}
