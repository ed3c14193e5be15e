//! MPIDR affinity fields and the GIC registers that hold them: GICR_TYPER
//! (IHI 0069), `GICD_IROUTER<n>` (IHI 0069), GICD_ITARGETSR (IHI 0048 §4.3).

/// Bits of MPIDR_EL1 that are affinity (Aff3 `[39:32]`, Aff2 `[23:16]`,
/// Aff1 `[15:8]`, Aff0 `[7:0]`); the rest (RES1 bit 31, U, MT) is ignored
/// when matching CPUs to GIC structures.
pub const MPIDR_AFFINITY_MASK: u64 = 0xFF_00FF_FFFF;

/// The four affinity levels of an MPIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Affinity {
    /// Aff0: usually the thread (SMT) or core.
    pub aff0: u8,
    /// Aff1: usually the core (DynamIQ) or cluster.
    pub aff1: u8,
    /// Aff2: cluster or die (Ampere Altra: the two-core cluster).
    pub aff2: u8,
    /// Aff3: socket on multi-socket servers.
    pub aff3: u8,
}

impl Affinity {
    /// Splits an MPIDR_EL1 value.
    pub const fn from_mpidr(mpidr: u64) -> Affinity {
        Affinity {
            aff0: mpidr as u8,
            aff1: (mpidr >> 8) as u8,
            aff2: (mpidr >> 16) as u8,
            aff3: (mpidr >> 32) as u8,
        }
    }

    /// The affinity bits in MPIDR layout (everything else zero).
    pub const fn to_mpidr(self) -> u64 {
        self.aff0 as u64
            | (self.aff1 as u64) << 8
            | (self.aff2 as u64) << 16
            | (self.aff3 as u64) << 32
    }

    /// The 32-bit `Aff3.Aff2.Aff1.Aff0` packing used by GICR_TYPER`[63:32]`.
    pub const fn to_packed32(self) -> u32 {
        self.aff0 as u32
            | (self.aff1 as u32) << 8
            | (self.aff2 as u32) << 16
            | (self.aff3 as u32) << 24
    }

    /// Inverse of [`Affinity::to_packed32`].
    pub const fn from_packed32(packed: u32) -> Affinity {
        Affinity {
            aff0: packed as u8,
            aff1: (packed >> 8) as u8,
            aff2: (packed >> 16) as u8,
            aff3: (packed >> 24) as u8,
        }
    }
}

/// The affinity a redistributor reports in GICR_TYPER (bits `[63:32]`).
pub const fn gicr_typer_affinity(gicr_typer: u64) -> Affinity {
    Affinity::from_packed32((gicr_typer >> 32) as u32)
}

/// `GICD_IROUTER<n>` value routing an SPI to exactly the PE with this MPIDR
/// (Interrupt_Routing_Mode = 0). The register's layout equals MPIDR's
/// affinity layout: Aff3 `[39:32]`, IRM `[31]`, Aff2 `[23:16]`, Aff1 `[15:8]`, Aff0 `[7:0]`.
pub const fn irouter_for_mpidr(mpidr: u64) -> u64 {
    mpidr & MPIDR_AFFINITY_MASK
}

/// `GICD_IROUTER<n>` value letting the GIC deliver an SPI to any one
/// participating PE (Interrupt_Routing_Mode = 1, bit 31).
pub const IROUTER_ANY_PARTICIPATING: u64 = 1 << 31;

/// The CPU-interface bit of the calling CPU from the eight read-only
/// GICD_ITARGETSR0-7 words (the SGI/PPI targets, which each CPU reads as
/// its own interface mask; IHI 0048 §4.3).
///
/// Returns the first non-zero byte, as Linux' `gic_get_cpumask` does;
/// `None` when all read as zero (uniprocessor GICs make them RAZ).
pub fn cpu_interface_mask_from_itargetsr(words: [u32; 8]) -> Option<u8> {
    words
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .find(|&byte| byte != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpidr_fields() {
        // Bit 31 is RES1 in MPIDR_EL1 and must not leak into affinity.
        let mpidr = 0x8000_0000 | 0x12_0034_0506;
        let aff = Affinity::from_mpidr(mpidr);
        assert_eq!(
            aff,
            Affinity {
                aff0: 0x06,
                aff1: 0x05,
                aff2: 0x34,
                aff3: 0x12
            }
        );
        assert_eq!(aff.to_mpidr(), 0x12_0034_0506);
        assert_eq!(aff.to_packed32(), 0x1234_0506);
        assert_eq!(Affinity::from_packed32(0x1234_0506), aff);
    }

    #[test]
    fn gicr_typer_holds_packed_affinity() {
        // GICR_TYPER for Altra's CPU with MPIDR 0x1E0100: Aff2=0x1E, Aff1=1.
        // Low bits (Last = bit 4, Processor_Number [23:8]) must be ignored.
        let typer = (0x001E_0100u64 << 32) | (7 << 8) | (1 << 4);
        let aff = gicr_typer_affinity(typer);
        assert_eq!(aff, Affinity::from_mpidr(0x8000_0000 | 0x1E_0100));
    }

    #[test]
    fn irouter_values() {
        assert_eq!(irouter_for_mpidr(0x8000_0003), 0x3);
        assert_eq!(irouter_for_mpidr(0x8000_0700), 0x700);
        assert_eq!(irouter_for_mpidr(0x8100_0000 | 0x27_0100), 0x27_0100);
        // Socket 1 of a two-socket machine: Aff3 goes to bits [39:32].
        assert_eq!(
            irouter_for_mpidr(0x01_8000_0000 | 0x08_0000),
            0x01_0008_0000
        );
        // The MT/U bits (24, 30) are not affinity.
        assert_eq!(irouter_for_mpidr(0x4100_0001), 0x1);
        assert_eq!(IROUTER_ANY_PARTICIPATING, 0x8000_0000);
    }

    #[test]
    fn itargetsr_mask() {
        // CPU interface 2 reads 0x04 in every byte of ITARGETSR0-7.
        assert_eq!(
            cpu_interface_mask_from_itargetsr([0x0404_0404; 8]),
            Some(0x04)
        );
        // Some implementations leave SGI bytes zero but report PPIs.
        let mut words = [0u32; 8];
        words[4] = 0x8000_0000;
        assert_eq!(cpu_interface_mask_from_itargetsr(words), Some(0x80));
        assert_eq!(cpu_interface_mask_from_itargetsr([0; 8]), None);
    }
}
