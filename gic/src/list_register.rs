//! List registers, version-independent: the hypervisor describes a virtual
//! interrupt once as a [`ListRegister`] and encodes it for the GICv2 GICH_LR
//! (32-bit, IHI 0048 §5.3) or the GICv3 `ICH_LR<n>_EL2` (64-bit, IHI 0069
//! "`ICH_LR<n>_EL2`") layout. Pure code, tested on the host.

use tock_registers::LocalRegisterCopy;
use tock_registers::fields::FieldValue;

use crate::registers::{GICH_LR, ICH_LR_EL2};
use crate::{GicError, GicVersion, IntId};

/// State of a virtual interrupt in a list register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListRegisterState {
    /// The list register is free (or the interrupt was deactivated).
    Invalid,
    /// Pending: the guest has not acknowledged it.
    Pending,
    /// Active: acknowledged, not yet deactivated.
    Active,
    /// Active and pending again.
    PendingActive,
}

impl ListRegisterState {
    const fn from_bits(bits: u64) -> ListRegisterState {
        match bits & 0b11 {
            0 => ListRegisterState::Invalid,
            1 => ListRegisterState::Pending,
            2 => ListRegisterState::Active,
            _ => ListRegisterState::PendingActive,
        }
    }

    const fn bits(self) -> u64 {
        match self {
            ListRegisterState::Invalid => 0,
            ListRegisterState::Pending => 1,
            ListRegisterState::Active => 2,
            ListRegisterState::PendingActive => 3,
        }
    }
}

/// Where a virtual interrupt comes from, which decides what happens when
/// the guest deactivates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtualInterruptSource {
    /// Purely virtual (emulated device, virtual SGI): HW = 0.
    Software {
        /// Ask for a maintenance interrupt when the guest deactivates it (EOI bit).
        eoi_maintenance: bool,
        /// GICv2 virtual SGIs only: the CPU interface the guest sees as the
        /// sender in GICV_IAR.CPUID (0-7). Must be 0 for GICv3 and non-SGIs.
        sgi_source_cpu: u8,
    },
    /// Backed by a physical interrupt (HW = 1): the guest's deactivation
    /// also deactivates `physical_intid` (a PPI or SPI, 16-1019), which the
    /// hypervisor left active after a priority drop.
    Hardware {
        /// The physical INTID.
        physical_intid: u32,
    },
}

/// One virtual interrupt as held in a list register.
///
/// 16 bytes, aligned to 8 so a copy is two 64-bit moves: at its natural
/// alignment of 4 the soft-float, strict-alignment hypervisor build copied
/// it with a call to `memcpy`, several times on every exit and entry that
/// had an interrupt in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(align(8))]
pub struct ListRegister {
    /// The INTID the guest sees.
    pub virtual_intid: u32,
    /// Software or hardware-backed.
    pub source: VirtualInterruptSource,
    /// Virtual priority. GICv2 keeps only bits `[7:3]` (32 levels); the
    /// low bits are dropped when encoding for it.
    pub priority: u8,
    /// Group 1 (true) or Group 0.
    pub group1: bool,
    /// Pending/active state.
    pub state: ListRegisterState,
}

/// Largest vINTID the 32-bit ICH_LR field can carry with 24-bit INTIDs.
const V3_MAX_VIRTUAL_INTID: u32 = (1 << 24) - 1;

impl ListRegister {
    /// An empty list register (state Invalid, all fields zero).
    pub const EMPTY: ListRegister = ListRegister {
        virtual_intid: 0,
        source: VirtualInterruptSource::Software {
            eoi_maintenance: false,
            sgi_source_cpu: 0,
        },
        priority: 0,
        group1: false,
        state: ListRegisterState::Invalid,
    };

    /// A pending Group 1 software interrupt.
    pub const fn pending(virtual_intid: u32, priority: u8) -> ListRegister {
        ListRegister {
            virtual_intid,
            source: VirtualInterruptSource::Software {
                eoi_maintenance: false,
                sgi_source_cpu: 0,
            },
            priority,
            group1: true,
            state: ListRegisterState::Pending,
        }
    }

    /// A pending Group 1 interrupt linked to `physical_intid`.
    pub const fn pending_hardware(
        virtual_intid: u32,
        physical_intid: u32,
        priority: u8,
    ) -> ListRegister {
        ListRegister {
            virtual_intid,
            source: VirtualInterruptSource::Hardware { physical_intid },
            priority,
            group1: true,
            state: ListRegisterState::Pending,
        }
    }

    /// Whether the register holds no interrupt.
    pub const fn is_free(&self) -> bool {
        matches!(self.state, ListRegisterState::Invalid)
    }

    /// Whether the hardware reports the register empty (ICH_ELRSR_EL2,
    /// GICH_ELRSR): free, and not asking for an EOI maintenance interrupt
    /// (an invalid register with EOI set keeps ICH_MISR.EOI up until it
    /// is rewritten).
    pub const fn is_empty(&self) -> bool {
        self.is_free()
            && !matches!(
                self.source,
                VirtualInterruptSource::Software {
                    eoi_maintenance: true,
                    ..
                }
            )
    }

    /// Encodes for `version` (GICv2 values fit in the low 32 bits).
    pub fn encode(&self, version: GicVersion) -> Result<u64, GicError> {
        match version {
            GicVersion::V2 => self.encode_v2().map(u64::from),
            GicVersion::V3 => self.encode_v3(),
        }
    }

    /// Decodes a value read from a `version` list register.
    pub fn decode(version: GicVersion, value: u64) -> ListRegister {
        match version {
            GicVersion::V2 => ListRegister::decode_v2(value as u32),
            GicVersion::V3 => ListRegister::decode_v3(value),
        }
    }

    /// GICH_LR value (IHI 0048 §5.3).
    pub fn encode_v2(&self) -> Result<u32, GicError> {
        let out_of_range = |field, value| GicError::ListRegisterFieldOutOfRange {
            version: GicVersion::V2,
            field,
            value,
        };
        if self.virtual_intid >= IntId::SPI_END {
            return Err(out_of_range("virtual_intid", self.virtual_intid));
        }
        let source = match self.source {
            VirtualInterruptSource::Hardware { physical_intid } => {
                check_physical(physical_intid).map_err(|v| out_of_range("physical_intid", v))?;
                GICH_LR::HW::SET + GICH_LR::PhysicalID.val(physical_intid)
            }
            VirtualInterruptSource::Software {
                eoi_maintenance,
                sgi_source_cpu,
            } => {
                let is_sgi = self.virtual_intid < IntId::SGI_COUNT;
                if sgi_source_cpu > 7 || (sgi_source_cpu != 0 && !is_sgi) {
                    return Err(out_of_range("sgi_source_cpu", sgi_source_cpu.into()));
                }
                GICH_LR::CPUID.val(sgi_source_cpu.into()) + GICH_LR::EOI.val(eoi_maintenance.into())
            }
        };
        let value: FieldValue<u32, GICH_LR::Register> = GICH_LR::VirtualID.val(self.virtual_intid)
            + source
            + GICH_LR::Priority.val(u32::from(self.priority >> 3))
            + GICH_LR::State.val(self.state.bits() as u32)
            + GICH_LR::Grp1.val(self.group1.into());
        Ok(value.value)
    }

    /// Decodes a GICH_LR value. Priority comes back with bits `[2:0]` zero.
    pub fn decode_v2(value: u32) -> ListRegister {
        let lr = LocalRegisterCopy::<u32, GICH_LR::Register>::new(value);
        let source = if lr.is_set(GICH_LR::HW) {
            VirtualInterruptSource::Hardware {
                physical_intid: lr.read(GICH_LR::PhysicalID),
            }
        } else {
            VirtualInterruptSource::Software {
                eoi_maintenance: lr.is_set(GICH_LR::EOI),
                sgi_source_cpu: lr.read(GICH_LR::CPUID) as u8,
            }
        };
        ListRegister {
            virtual_intid: lr.read(GICH_LR::VirtualID),
            source,
            priority: (lr.read(GICH_LR::Priority) << 3) as u8,
            group1: lr.is_set(GICH_LR::Grp1),
            state: ListRegisterState::from_bits(lr.read(GICH_LR::State).into()),
        }
    }

    /// `ICH_LR<n>_EL2` value (IHI 0069, `ICH_LR<n>_EL2`).
    pub fn encode_v3(&self) -> Result<u64, GicError> {
        let out_of_range = |field, value| GicError::ListRegisterFieldOutOfRange {
            version: GicVersion::V3,
            field,
            value,
        };
        if IntId::new(self.virtual_intid).is_err() || self.virtual_intid > V3_MAX_VIRTUAL_INTID {
            return Err(out_of_range("virtual_intid", self.virtual_intid));
        }
        let source = match self.source {
            VirtualInterruptSource::Hardware { physical_intid } => {
                check_physical(physical_intid).map_err(|v| out_of_range("physical_intid", v))?;
                ICH_LR_EL2::HW::SET + ICH_LR_EL2::pINTID.val(physical_intid.into())
            }
            VirtualInterruptSource::Software {
                eoi_maintenance,
                sgi_source_cpu,
            } => {
                if sgi_source_cpu != 0 {
                    return Err(out_of_range("sgi_source_cpu", sgi_source_cpu.into()));
                }
                ICH_LR_EL2::EOI.val(eoi_maintenance.into())
            }
        };
        let value: FieldValue<u64, ICH_LR_EL2::Register> = ICH_LR_EL2::vINTID
            .val(self.virtual_intid.into())
            + source
            + ICH_LR_EL2::Priority.val(self.priority.into())
            + ICH_LR_EL2::State.val(self.state.bits())
            + ICH_LR_EL2::Group.val(self.group1.into());
        Ok(value.value)
    }

    /// Decodes an `ICH_LR<n>_EL2` value (the NMI bit is ignored).
    pub fn decode_v3(value: u64) -> ListRegister {
        let lr = LocalRegisterCopy::<u64, ICH_LR_EL2::Register>::new(value);
        let source = if lr.is_set(ICH_LR_EL2::HW) {
            VirtualInterruptSource::Hardware {
                physical_intid: lr.read(ICH_LR_EL2::pINTID) as u32,
            }
        } else {
            VirtualInterruptSource::Software {
                eoi_maintenance: lr.is_set(ICH_LR_EL2::EOI),
                sgi_source_cpu: 0,
            }
        };
        ListRegister {
            virtual_intid: lr.read(ICH_LR_EL2::vINTID) as u32,
            source,
            priority: lr.read(ICH_LR_EL2::Priority) as u8,
            group1: lr.is_set(ICH_LR_EL2::Group),
            state: ListRegisterState::from_bits(lr.read(ICH_LR_EL2::State)),
        }
    }
}

/// A hardware-linked list register must name a PPI or SPI (16-1019): SGIs
/// cannot be deactivated through it and 1020+ are special or LPIs.
const fn check_physical(physical_intid: u32) -> Result<(), u32> {
    if physical_intid >= IntId::PPI_BASE && physical_intid < IntId::SPI_END {
        Ok(())
    } else {
        Err(physical_intid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn software(eoi: bool, source: u8) -> VirtualInterruptSource {
        VirtualInterruptSource::Software {
            eoi_maintenance: eoi,
            sgi_source_cpu: source,
        }
    }

    #[test]
    fn empty_is_what_elrsr_reports() {
        assert!(ListRegister::EMPTY.is_empty());
        let mut finished = ListRegister::pending(33, 0x80);
        finished.state = ListRegisterState::Invalid;
        assert!(finished.is_empty());
        finished.source = software(true, 0);
        assert!(
            finished.is_free() && !finished.is_empty(),
            "EOI maintenance pending"
        );
        assert!(!ListRegister::pending(33, 0x80).is_empty());
        let mut hw = ListRegister::pending_hardware(27, 27, 0xA0);
        hw.state = ListRegisterState::Invalid;
        assert!(hw.is_empty());
    }

    #[test]
    fn v2_field_placement() {
        // IHI 0048 §5.3: VirtualID [9:0], PhysicalID [19:10], CPUID [12:10],
        // EOI [19], Priority [27:23], State [29:28], Grp1 [30], HW [31].
        assert_eq!(
            ListRegister::pending(27, 0).encode_v2().unwrap(),
            0x5000_001B
        );
        assert_eq!(
            ListRegister::pending_hardware(27, 30, 0xA0)
                .encode_v2()
                .unwrap(),
            0x8000_0000 | 0x4000_0000 | 0x1000_0000 | (0xA0 >> 3) << 23 | 30 << 10 | 27
        );
        let sgi = ListRegister {
            virtual_intid: 3,
            source: software(true, 5),
            priority: 0xF8,
            group1: false,
            state: ListRegisterState::PendingActive,
        };
        assert_eq!(
            sgi.encode_v2().unwrap(),
            0x3000_0000 | 0x1F << 23 | 1 << 19 | 5 << 10 | 3
        );
        assert_eq!(ListRegister::EMPTY.encode_v2().unwrap(), 0);
    }

    #[test]
    fn v3_field_placement() {
        // IHI 0069 ICH_LR<n>_EL2: vINTID [31:0], pINTID [44:32], EOI [41],
        // Priority [55:48], Group [60], HW [61], State [63:62].
        assert_eq!(
            ListRegister::pending(27, 0xA0).encode_v3().unwrap(),
            0x5000_0000_0000_0000 | 0xA0 << 48 | 27
        );
        assert_eq!(
            ListRegister::pending_hardware(27, 30, 0x80)
                .encode_v3()
                .unwrap(),
            1 << 62 | 1 << 61 | 1 << 60 | 0x80 << 48 | 30 << 32 | 27
        );
        let active_lpi = ListRegister {
            virtual_intid: 8192 + 5,
            source: software(true, 0),
            priority: 0x10,
            group1: true,
            state: ListRegisterState::Active,
        };
        assert_eq!(
            active_lpi.encode_v3().unwrap(),
            2 << 62 | 1 << 60 | 0x10 << 48 | 1 << 41 | 8197
        );
    }

    #[test]
    fn round_trips() {
        let samples = [
            ListRegister::EMPTY,
            ListRegister::pending(1, 0x08),
            ListRegister::pending_hardware(30, 27, 0xF8),
            ListRegister::pending_hardware(1019, 1019, 0),
            ListRegister {
                virtual_intid: 15,
                source: software(true, 0),
                priority: 0x40,
                group1: false,
                state: ListRegisterState::Active,
            },
            ListRegister {
                virtual_intid: 33,
                source: software(false, 0),
                priority: 0x88,
                group1: true,
                state: ListRegisterState::PendingActive,
            },
        ];
        for lr in samples {
            for version in [GicVersion::V2, GicVersion::V3] {
                let raw = lr.encode(version).unwrap();
                assert_eq!(ListRegister::decode(version, raw), lr, "{version} {raw:#x}");
            }
        }
        // The v2 SGI source survives a v2 round trip.
        let sgi = ListRegister {
            source: software(false, 7),
            ..ListRegister::pending(2, 0x10)
        };
        assert_eq!(ListRegister::decode_v2(sgi.encode_v2().unwrap()), sgi);
        // LPIs and large INTIDs only fit v3.
        let lpi = ListRegister::pending(0x00FF_FFFF, 0x20);
        assert_eq!(ListRegister::decode_v3(lpi.encode_v3().unwrap()), lpi);
    }

    #[test]
    fn v2_priority_keeps_top_five_bits() {
        let lr = ListRegister::pending(40, 0xA7);
        let decoded = ListRegister::decode_v2(lr.encode_v2().unwrap());
        assert_eq!(decoded.priority, 0xA0);
    }

    #[test]
    fn fields_that_do_not_fit_are_rejected() {
        let v2_err = |field, value| {
            Err(GicError::ListRegisterFieldOutOfRange {
                version: GicVersion::V2,
                field,
                value,
            })
        };
        let v3_err = |field, value| {
            Err(GicError::ListRegisterFieldOutOfRange {
                version: GicVersion::V3,
                field,
                value,
            })
        };
        assert_eq!(
            ListRegister::pending(1020, 0).encode_v2(),
            v2_err("virtual_intid", 1020)
        );
        assert_eq!(
            ListRegister::pending(8192, 0).encode_v2(),
            v2_err("virtual_intid", 8192)
        );
        assert_eq!(
            ListRegister::pending(1023, 0).encode_v3(),
            v3_err("virtual_intid", 1023)
        );
        assert_eq!(
            ListRegister::pending(1 << 24, 0).encode_v3(),
            v3_err("virtual_intid", 1 << 24)
        );
        for version in [GicVersion::V2, GicVersion::V3] {
            for physical in [0, 15, 1020, 8192] {
                let err = ListRegister::pending_hardware(40, physical, 0)
                    .encode(version)
                    .unwrap_err();
                assert_eq!(
                    err,
                    GicError::ListRegisterFieldOutOfRange {
                        version,
                        field: "physical_intid",
                        value: physical
                    }
                );
            }
        }
        let sgi_from_8 = ListRegister {
            source: software(false, 8),
            ..ListRegister::pending(1, 0)
        };
        assert_eq!(sgi_from_8.encode_v2(), v2_err("sgi_source_cpu", 8));
        let spi_with_source = ListRegister {
            source: software(false, 1),
            ..ListRegister::pending(40, 0)
        };
        assert_eq!(spi_with_source.encode_v2(), v2_err("sgi_source_cpu", 1));
        let v3_sgi_source = ListRegister {
            source: software(false, 1),
            ..ListRegister::pending(1, 0)
        };
        assert_eq!(v3_sgi_source.encode_v3(), v3_err("sgi_source_cpu", 1));
    }

    #[test]
    fn decode_hardware_ignores_eoi_alias() {
        // With HW = 1, bit 41 (v3) / bit 19 (v2) are part of pINTID/PhysicalID.
        let v3 = 1u64 << 61 | (0x200 << 32) | 40;
        assert_eq!(
            ListRegister::decode_v3(v3).source,
            VirtualInterruptSource::Hardware {
                physical_intid: 0x200
            }
        );
        let v2 = 1u32 << 31 | (0x200 << 10) | 40;
        assert_eq!(
            ListRegister::decode_v2(v2).source,
            VirtualInterruptSource::Hardware {
                physical_intid: 0x200
            }
        );
    }
}
