//! EL2 stage-1 identity map: descriptor encoding and the table layout built from
//! the memory map. Pure logic, host-tested; the arch code only installs the result.
//!
//! Layout: 4 KiB granule, 39-bit VA (TCR_EL2.T0SZ = 25), so translation starts at
//! level 1 (1 GiB per entry). A GiB that is all RAM or all non-RAM is one block;
//! a mixed GiB gets a level-2 table of 2 MiB blocks. RAM is Normal write-back,
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
/// Bytes of address space covered by the level-1 table (39-bit VA).
pub const ADDRESS_SPACE: u64 = LEVEL1_BLOCK * ENTRIES as u64;

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
}

impl core::fmt::Display for MmuError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfLevel2Tables { needed } => write!(
                f,
                "identity map needs {needed} level-2 tables, more than reserved"
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

/// Fills `level1` (and as many of `level2` as needed) with the identity map of
/// the whole 512 GiB space, RAM (`(base, size)` ranges, non-overlapping) as Normal.
/// `table_address` gives the physical address of a level-2 table (identity
/// mapped, so its own address on the target; tests pass a fake).
pub fn build_identity_map(
    ram: &[(u64, u64)],
    level1: &mut PageTable,
    level2: &mut [PageTable],
    table_address: impl Fn(&PageTable) -> u64,
) -> Result<usize, MmuError> {
    let needed = (0..ENTRIES)
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
    let mut used = 0;
    for (i, entry) in level1.0.iter_mut().enumerate() {
        let gib = i as u64 * LEVEL1_BLOCK;
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
        let mut l1 = PageTable::empty();
        let mut l2 = [PageTable::empty(), PageTable::empty()];
        let used =
            build_identity_map(&[(0x4000_0000, 1 << 30)], &mut l1, &mut l2, |_| 0x1000).unwrap();
        assert_eq!(used, 0);
        assert_eq!(kind_of(l1.0[0]), MemoryKind::Device);
        assert_eq!(kind_of(l1.0[1]), MemoryKind::Normal);
        assert_eq!(kind_of(l1.0[2]), MemoryKind::Device);
    }

    #[test]
    fn raspberry_pi_mixed_gib_gets_a_level2_table() {
        // Pi 4 (4 GiB): RAM 0-0x3b400000 and 0x40000000-0xfc000000; MMIO at 0xfc000000.
        let ram = [(0, 0x3b40_0000), (0x4000_0000, 0xbc00_0000)];
        let mut l1 = PageTable::empty();
        let mut l2 = [PageTable::empty(), PageTable::empty(), PageTable::empty()];
        let used = build_identity_map(&ram, &mut l1, &mut l2, |_| 0x7000).unwrap();
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
        let mut l1 = PageTable::empty();
        assert_eq!(
            build_identity_map(&ram, &mut l1, &mut [], |_| 0),
            Err(MmuError::OutOfLevel2Tables { needed: 1 })
        );
    }
}
