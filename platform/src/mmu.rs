//! EL2 stage-1 identity map: descriptor encoding and the table layout built from
//! the memory map. Pure logic, host-tested; the arch code only installs the result.
//!
//! Layout: 4 KiB granule, 48-bit VA (TCR_EL2.T0SZ = 16), so translation starts at
//! level 0 (512 GiB per entry, always a table): ACPI servers put MMIO far up
//! (Ampere Altra's GIC is at 16 TiB). Each 512 GiB region below the CPU's
//! physical address size gets a level-1 table (1 GiB per entry). A GiB that is
//! all RAM or all non-RAM is one block; a mixed GiB gets a level-2 table of
//! 2 MiB blocks. RAM is Normal write-back,
//! everything else Device-nGnRE and execute-never, so MMIO is never cached or
//! speculatively read. Arm ARM D8.3 (translation table descriptor formats).

use tock_registers::interfaces::{ReadWriteable, Readable};
use tock_registers::registers::InMemoryRegister;

#[allow(missing_docs)] // the macro generates undocumented helper items
mod fields {
    use tock_registers::register_bitfields;
    register_bitfields! {u64,
        /// A level-1/2 block or table descriptor (Arm ARM D8.3.1, D8.3.2).
        pub DESCRIPTOR [
            /// Valid.
            VALID OFFSET(0) NUMBITS(1) [],
            /// 0 = block, 1 = table (levels 1 and 2).
            TYPE OFFSET(1) NUMBITS(1) [Block = 0, Table = 1],
            /// Index into MAIR_EL2.
            ATTR_INDEX OFFSET(2) NUMBITS(3) [Normal = 0, Device = 1],
            /// AP[1]: RES1 in the single-privilege EL2 regime.
            AP_EL0 OFFSET(6) NUMBITS(1) [],
            /// AP[2]: read-only.
            READ_ONLY OFFSET(7) NUMBITS(1) [],
            /// Shareability.
            SHAREABILITY OFFSET(8) NUMBITS(2) [NonShareable = 0, OuterShareable = 2, InnerShareable = 3],
            /// Access flag: must be set or the first access faults.
            ACCESSED OFFSET(10) NUMBITS(1) [],
            /// Output address bits [47:12] (block descriptors use the upper part only).
            OUTPUT_ADDRESS OFFSET(12) NUMBITS(36) [],
            /// Execute-never.
            EXECUTE_NEVER OFFSET(54) NUMBITS(1) [],
        ]
    }
}
pub use fields::DESCRIPTOR;

/// Entries per table with a 4 KiB granule.
pub const ENTRIES: usize = 512;
/// Bytes mapped by one level-1 entry.
pub const LEVEL1_BLOCK: u64 = 1 << 30;
/// Bytes mapped by one level-2 entry.
pub const LEVEL2_BLOCK: u64 = 1 << 21;
/// Bytes mapped by one level-0 entry (one level-1 table).
pub const LEVEL0_REGION: u64 = LEVEL1_BLOCK * ENTRIES as u64;
/// Bytes of address space covered by the level-0 table (48-bit VA).
pub const ADDRESS_SPACE: u64 = LEVEL0_REGION * ENTRIES as u64;
/// Bytes of address space the boot map (boot.S) covers: the first 512 GiB.
pub const BOOT_ADDRESS_SPACE: u64 = LEVEL0_REGION;

/// One translation table, aligned as the hardware requires.
#[repr(C, align(4096))]
#[derive(Clone)]
pub struct PageTable(pub [u64; ENTRIES]);

impl PageTable {
    /// A table of invalid entries.
    pub const fn empty() -> Self {
        Self([0; ENTRIES])
    }
}

/// How a range is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// RAM: cacheable, executable.
    Normal,
    /// MMIO or nothing: Device-nGnRE, execute-never.
    Device,
}

/// Why the map could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmuError {
    /// More mixed GiB ranges than level-2 tables were provided.
    OutOfLevel2Tables {
        /// How many tables the layout needs.
        needed: usize,
    },
    /// More 512 GiB regions than level-1 tables were provided.
    OutOfLevel1Tables {
        /// How many tables the layout needs.
        needed: usize,
    },
}

impl core::fmt::Display for MmuError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfLevel2Tables { needed } => write!(
                f,
                "identity map needs {needed} level-2 tables, more than reserved"
            ),
            Self::OutOfLevel1Tables { needed } => write!(
                f,
                "identity map needs {needed} level-1 tables, more than reserved"
            ),
        }
    }
}

/// A block descriptor mapping `address` (aligned to its block size) as `kind`.
pub fn block_descriptor(address: u64, kind: MemoryKind) -> u64 {
    let descriptor = InMemoryRegister::<u64, DESCRIPTOR::Register>::new(0);
    descriptor.modify(
        DESCRIPTOR::VALID::SET
            + DESCRIPTOR::TYPE::Block
            + DESCRIPTOR::AP_EL0::SET
            + DESCRIPTOR::ACCESSED::SET
            + DESCRIPTOR::OUTPUT_ADDRESS.val(address >> 12),
    );
    match kind {
        MemoryKind::Normal => descriptor
            .modify(DESCRIPTOR::ATTR_INDEX::Normal + DESCRIPTOR::SHAREABILITY::InnerShareable),
        MemoryKind::Device => {
            descriptor.modify(DESCRIPTOR::ATTR_INDEX::Device + DESCRIPTOR::EXECUTE_NEVER::SET)
        }
    }
    descriptor.get()
}

/// A table descriptor pointing at the next-level table at `address`.
pub fn table_descriptor(address: u64) -> u64 {
    let descriptor = InMemoryRegister::<u64, DESCRIPTOR::Register>::new(0);
    descriptor.modify(
        DESCRIPTOR::VALID::SET
            + DESCRIPTOR::TYPE::Table
            + DESCRIPTOR::OUTPUT_ADDRESS.val(address >> 12),
    );
    descriptor.get()
}

/// How much of `[start, start + size)` the RAM ranges cover.
fn coverage(ram: &[(u64, u64)], start: u64, size: u64) -> Coverage {
    let end = start + size;
    let covered: u64 = ram
        .iter()
        .map(|&(base, len)| {
            let lo = base.max(start);
            let hi = base.saturating_add(len).min(end);
            hi.saturating_sub(lo)
        })
        .sum();
    match covered {
        0 => Coverage::None,
        c if c >= size => Coverage::Full,
        _ => Coverage::Partial,
    }
}

enum Coverage {
    None,
    Partial,
    Full,
}

/// How many 512 GiB regions a CPU with a `pa_bits`-bit physical address
/// space has (at least 1, at most 512).
pub fn regions_for(pa_bits: u32) -> usize {
    let regions = 1u64 << pa_bits.clamp(39, 48).saturating_sub(39);
    regions as usize
}

/// Fills `level0` with the identity map of the first `level1.len()` 512 GiB
/// regions (the caller passes one level-1 table per region below the CPU's
/// physical address size, [`regions_for`]), RAM (`(base, size)` ranges,
/// non-overlapping) as Normal, everything else Device; uses as many of `level2`
/// as there are GiB that mix RAM and MMIO. `table_address` gives the physical
/// address of a table (identity mapped, so its own address on the target;
/// tests pass a fake). Returns how many level-2 tables it used.
pub fn build_identity_map(
    ram: &[(u64, u64)],
    level0: &mut PageTable,
    level1: &mut [PageTable],
    level2: &mut [PageTable],
    table_address: impl Fn(&PageTable) -> u64,
) -> Result<usize, MmuError> {
    if level1.is_empty() || level1.len() > ENTRIES {
        return Err(MmuError::OutOfLevel1Tables { needed: 1 });
    }
    let mapped = level1.len() as u64 * LEVEL0_REGION;
    let needed_level1 = ram
        .iter()
        .filter(|&&(_, size)| size > 0)
        .map(|&(base, size)| base.saturating_add(size - 1) / LEVEL0_REGION + 1)
        .max()
        .unwrap_or(1) as usize;
    if ram
        .iter()
        .any(|&(base, size)| size > 0 && base.saturating_add(size) > mapped)
    {
        return Err(MmuError::OutOfLevel1Tables {
            needed: needed_level1,
        });
    }
    let needed = (0..level1.len() * ENTRIES)
        .filter(|&i| {
            matches!(
                coverage(ram, i as u64 * LEVEL1_BLOCK, LEVEL1_BLOCK),
                Coverage::Partial
            )
        })
        .count();
    if needed > level2.len() {
        return Err(MmuError::OutOfLevel2Tables { needed });
    }
    level0.0 = [0; ENTRIES];
    let mut used = 0;
    for (region, table) in level1.iter_mut().enumerate() {
        let region_base = region as u64 * LEVEL0_REGION;
        for (i, entry) in table.0.iter_mut().enumerate() {
            let gib = region_base + i as u64 * LEVEL1_BLOCK;
            *entry = match coverage(ram, gib, LEVEL1_BLOCK) {
                Coverage::Full => block_descriptor(gib, MemoryKind::Normal),
                Coverage::None => block_descriptor(gib, MemoryKind::Device),
                Coverage::Partial => {
                    let table = &mut level2[used];
                    used += 1;
                    for (j, slot) in table.0.iter_mut().enumerate() {
                        let block = gib + j as u64 * LEVEL2_BLOCK;
                        // A 2 MiB block only partly RAM stays Device: never cache MMIO.
                        let kind = match coverage(ram, block, LEVEL2_BLOCK) {
                            Coverage::Full => MemoryKind::Normal,
                            _ => MemoryKind::Device,
                        };
                        *slot = block_descriptor(block, kind);
                    }
                    table_descriptor(table_address(table))
                }
            };
        }
        level0.0[region] = table_descriptor(table_address(table));
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(descriptor: u64) -> MemoryKind {
        let reg = InMemoryRegister::<u64, DESCRIPTOR::Register>::new(descriptor);
        if reg.read(DESCRIPTOR::ATTR_INDEX) == 0 {
            MemoryKind::Normal
        } else {
            MemoryKind::Device
        }
    }

    #[test]
    fn descriptors_match_the_architecture() {
        // Values worked out by hand from Arm ARM D8.3: block, AttrIndx, AP[1], SH, AF.
        assert_eq!(
            block_descriptor(0x4000_0000, MemoryKind::Normal),
            0x4000_0741
        );
        assert_eq!(
            block_descriptor(0x0800_0000, MemoryKind::Device),
            0x0040_0000_0800_0445
        );
        assert_eq!(table_descriptor(0x4012_3000), 0x4012_3003);
    }

    #[test]
    fn qemu_virt_one_gib_of_ram() {
        let mut l0 = PageTable::empty();
        let mut l1 = [PageTable::empty()];
        let mut l2 = [PageTable::empty(), PageTable::empty()];
        let used = build_identity_map(&[(0x4000_0000, 1 << 30)], &mut l0, &mut l1, &mut l2, |_| {
            0x1000
        })
        .unwrap();
        assert_eq!(used, 0);
        assert_eq!(l0.0[0], table_descriptor(0x1000));
        assert_eq!(l0.0[1], 0, "no table, no mapping");
        assert_eq!(kind_of(l1[0].0[0]), MemoryKind::Device);
        assert_eq!(kind_of(l1[0].0[1]), MemoryKind::Normal);
        assert_eq!(kind_of(l1[0].0[2]), MemoryKind::Device);
    }

    #[test]
    fn altra_mmio_at_16_tib_and_ram_above_512_gib_are_mapped() {
        // Ampere Altra: GICD at 0x1001_0000_0000 (16 TiB + 4 GiB, level-0
        // entry 32), RAM at 2 GiB and at 0x80_0000_0000 (512 GiB, entry 1).
        let ram = [(0x8000_0000, 0x8000_0000), (0x80_0000_0000, 1 << 36)];
        let mut l0 = PageTable::empty();
        let mut l1 = vec![PageTable::empty(); regions_for(48)];
        assert_eq!(l1.len(), 512);
        let used = build_identity_map(&ram, &mut l0, &mut l1, &mut [], |t| {
            t.0.as_ptr() as u64 & !0xfff
        })
        .unwrap();
        assert_eq!(used, 0);
        assert!(
            l0.0.iter().all(|&entry| entry & 3 == 3),
            "every region has a table"
        );
        assert_eq!(kind_of(l1[0].0[2]), MemoryKind::Normal, "2 GiB is RAM");
        assert_eq!(kind_of(l1[1].0[0]), MemoryKind::Normal, "512 GiB is RAM");
        let gicd = 0x1001_0000_0000u64;
        let (region, gib) = (
            (gicd / LEVEL0_REGION) as usize,
            ((gicd % LEVEL0_REGION) / LEVEL1_BLOCK) as usize,
        );
        assert_eq!((region, gib), (32, 4));
        assert_eq!(
            l1[region].0[gib],
            block_descriptor(0x1001_0000_0000, MemoryKind::Device)
        );
    }

    #[test]
    fn ram_beyond_the_tables_given_is_an_error() {
        let mut l0 = PageTable::empty();
        let mut l1 = [PageTable::empty()];
        assert_eq!(
            build_identity_map(
                &[(0x80_0000_0000, 1 << 30)],
                &mut l0,
                &mut l1,
                &mut [],
                |_| 0
            ),
            Err(MmuError::OutOfLevel1Tables { needed: 2 })
        );
        assert_eq!(regions_for(44), 32);
        assert_eq!(regions_for(32), 1);
        assert_eq!(regions_for(52), 512);
    }

    #[test]
    fn raspberry_pi_mixed_gib_gets_a_level2_table() {
        // Pi 4 (4 GiB): RAM 0-0x3b400000 and 0x40000000-0xfc000000; MMIO at 0xfc000000.
        let ram = [(0, 0x3b40_0000), (0x4000_0000, 0xbc00_0000)];
        let mut l0 = PageTable::empty();
        let mut l1 = [PageTable::empty()];
        let mut l2 = [PageTable::empty(), PageTable::empty(), PageTable::empty()];
        let used = build_identity_map(&ram, &mut l0, &mut l1, &mut l2, |_| 0x7000).unwrap();
        let l1 = &l1[0];
        assert_eq!(used, 2, "GiB 0 and GiB 3 are mixed");
        assert_eq!(l1.0[0] & 3, 3, "table descriptor");
        assert_eq!(kind_of(l2[0].0[0]), MemoryKind::Normal);
        assert_eq!(kind_of(l2[0].0[0x3b4 / 2 - 1]), MemoryKind::Normal);
        assert_eq!(kind_of(l2[0].0[0x3b4 / 2]), MemoryKind::Device);
        assert_eq!(kind_of(l1.0[1]), MemoryKind::Normal);
        assert_eq!(
            kind_of(l2[1].0[0x1e0 - 1]),
            MemoryKind::Normal,
            "0xfbe00000 is RAM"
        );
        assert_eq!(
            kind_of(l2[1].0[0x1e0]),
            MemoryKind::Device,
            "0xfc000000 is MMIO"
        );
    }

    #[test]
    fn too_few_level2_tables_is_an_error() {
        let ram = [(0, 0x1000_0000)];
        let mut l0 = PageTable::empty();
        let mut l1 = [PageTable::empty()];
        assert_eq!(
            build_identity_map(&ram, &mut l0, &mut l1, &mut [], |_| 0),
            Err(MmuError::OutOfLevel2Tables { needed: 1 })
        );
    }
}
