//! Interrupt identifiers and their architectural ranges (IHI 0069 and
//! IHI 0048, "INTIDs").

use core::fmt;

use crate::GicError;

/// An interrupt ID that is valid in the GIC architecture.
///
/// Built only through the checked constructors, so a value from a guest or
/// a firmware table never reaches the hardware unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IntId(u32);

/// The architectural class of an [`IntId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntIdKind {
    /// Software-generated interrupt, 0-15 (banked per CPU).
    Sgi,
    /// Private peripheral interrupt, 16-31 (banked per CPU).
    Ppi,
    /// Shared peripheral interrupt, 32-1019.
    Spi,
    /// Locality-specific peripheral interrupt, 8192 and up (GICv3 only).
    Lpi,
}

impl IntId {
    /// Number of SGIs.
    pub const SGI_COUNT: u32 = 16;
    /// First PPI.
    pub const PPI_BASE: u32 = 16;
    /// First SPI.
    pub const SPI_BASE: u32 = 32;
    /// One past the last SPI (1020-1023 are special INTIDs).
    pub const SPI_END: u32 = 1020;
    /// Returned by an acknowledge when nothing is pending.
    pub const SPURIOUS: u32 = 1023;
    /// First LPI.
    pub const LPI_BASE: u32 = 8192;

    /// Checks `intid` against the SGI/PPI/SPI/LPI ranges; special
    /// (1020-1023) and extended-range INTIDs are rejected.
    pub const fn new(intid: u32) -> Result<IntId, GicError> {
        if intid < Self::SPI_END || intid >= Self::LPI_BASE {
            Ok(IntId(intid))
        } else {
            Err(GicError::InvalidIntId { intid })
        }
    }

    /// SGI number `sgi` (0..=15).
    pub const fn sgi(sgi: u8) -> Result<IntId, GicError> {
        if (sgi as u32) < Self::SGI_COUNT {
            Ok(IntId(sgi as u32))
        } else {
            Err(GicError::InvalidSgi { sgi })
        }
    }

    /// PPI number `ppi` (0..=15, INTID 16 + ppi), as device trees number them.
    pub const fn ppi(ppi: u32) -> Result<IntId, GicError> {
        if ppi < 16 {
            Ok(IntId(Self::PPI_BASE + ppi))
        } else {
            Err(GicError::InvalidIntId {
                intid: Self::PPI_BASE.saturating_add(ppi),
            })
        }
    }

    /// SPI number `spi` (INTID 32 + spi), as device trees number them.
    pub const fn spi(spi: u32) -> Result<IntId, GicError> {
        if spi < Self::SPI_END - Self::SPI_BASE {
            Ok(IntId(Self::SPI_BASE + spi))
        } else {
            Err(GicError::InvalidIntId {
                intid: Self::SPI_BASE.saturating_add(spi),
            })
        }
    }

    /// The raw INTID.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The INTID as an index into per-interrupt register arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// Which architectural range the INTID is in.
    pub const fn kind(self) -> IntIdKind {
        match self.0 {
            0..16 => IntIdKind::Sgi,
            16..32 => IntIdKind::Ppi,
            32..1020 => IntIdKind::Spi,
            _ => IntIdKind::Lpi,
        }
    }

    /// Whether the INTID is banked per CPU (SGI or PPI).
    pub const fn is_private(self) -> bool {
        self.0 < Self::SPI_BASE
    }
}

impl fmt::Display for IntId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl TryFrom<u32> for IntId {
    type Error = GicError;

    fn try_from(intid: u32) -> Result<Self, Self::Error> {
        IntId::new(intid)
    }
}

impl From<IntId> for u32 {
    fn from(intid: IntId) -> u32 {
        intid.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(IntId::new(0).unwrap().kind(), IntIdKind::Sgi);
        assert_eq!(IntId::new(15).unwrap().kind(), IntIdKind::Sgi);
        assert_eq!(IntId::new(16).unwrap().kind(), IntIdKind::Ppi);
        assert_eq!(IntId::new(31).unwrap().kind(), IntIdKind::Ppi);
        assert_eq!(IntId::new(32).unwrap().kind(), IntIdKind::Spi);
        assert_eq!(IntId::new(1019).unwrap().kind(), IntIdKind::Spi);
        assert_eq!(IntId::new(8192).unwrap().kind(), IntIdKind::Lpi);
        for special in [1020, 1021, 1022, 1023, 1024, 4096, 8191] {
            assert_eq!(
                IntId::new(special),
                Err(GicError::InvalidIntId { intid: special })
            );
        }
    }

    #[test]
    fn device_tree_numbering() {
        // A DT `interrupts = <GIC_PPI 14 ...>` is the EL1 physical timer, INTID 30.
        assert_eq!(IntId::ppi(14).unwrap().raw(), 30);
        assert_eq!(IntId::spi(1).unwrap().raw(), 33);
        assert_eq!(IntId::spi(987).unwrap().raw(), 1019);
        assert!(IntId::spi(988).is_err());
        assert!(IntId::ppi(16).is_err());
        assert_eq!(IntId::sgi(15).unwrap().raw(), 15);
        assert_eq!(IntId::sgi(16), Err(GicError::InvalidSgi { sgi: 16 }));
        assert!(IntId::sgi(3).unwrap().is_private());
        assert!(!IntId::spi(0).unwrap().is_private());
    }
}

/// An interrupt taken with `acknowledge`: pass it back unchanged to
/// `end_of_interrupt` (or `priority_drop` + `deactivate`).
///
/// It keeps the raw acknowledge value because a GICv2 needs the requesting
/// CPU interface of an SGI (GICC_IAR.CPUID) echoed in GICC_EOIR/GICC_DIR
/// (IHI 0048 §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acknowledged {
    intid: IntId,
    raw: u32,
}

impl Acknowledged {
    /// Wraps an acknowledge value whose INTID is `intid`.
    pub(crate) const fn new(intid: IntId, raw: u32) -> Acknowledged {
        Acknowledged { intid, raw }
    }

    /// The interrupt that was taken.
    pub const fn intid(self) -> IntId {
        self.intid
    }

    /// The value read from the acknowledge register, to be written back.
    pub(crate) const fn raw(self) -> u32 {
        self.raw
    }

    /// GICv2 SGIs only: the CPU interface that sent the SGI
    /// (GICC_IAR.CPUID); 0 for every other interrupt and on GICv3.
    pub const fn sgi_source_interface(self) -> u8 {
        if self.intid.0 < IntId::SGI_COUNT {
            ((self.raw >> 10) & 0x7) as u8
        } else {
            0
        }
    }
}
