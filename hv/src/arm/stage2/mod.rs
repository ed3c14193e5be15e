//! Stage-2 translation tables: layout and descriptors for a domain's guest-physical map.
//!
//! Layout (Arm ARM D8.2, "Translation table walk" with the 4 KiB granule):
//! - 4 KiB granule, translation starts at **level 1**, so the walk is at most three
//!   levels: level 1 (1 GiB per entry), level 2 (2 MiB), level 3 (4 KiB pages).
//! - [`IpaSize::Bits40`] (the default, `VTCR_EL2.T0SZ = 24`, `SL0 = 1`): a 40-bit
//!   (1 TiB) guest-physical space. A level-1 table of 512 entries covers only
//!   39 bits, so the root is **two concatenated level-1 tables** (8 KiB, aligned
//!   to 8 KiB; Arm ARM D8.2.6 "Concatenated translation tables"): entry
//!   `IPA[39:30]` of the 1024-entry root.
//! - [`IpaSize::Bits39`] (`T0SZ = 25`, `SL0 = 1`): one 4 KiB root table, for
//!   machines whose `PARange` is below 40 bits (the IPA space must not exceed the
//!   physical one).
//!
//! Guest RAM is Normal write-back inner-shareable, read/write/execute;
//! pass-through MMIO is Device-nGnRE, read/write, execute-never. Everything not
//! mapped faults to EL2, where the trap handler emulates it (vGIC, vPL011) or
//! stops the domain. A range is mapped with the largest blocks its alignment
//! allows (1 GiB, 2 MiB), 4 KiB pages otherwise.
//!
//! Tables come from a [`TableAllocator`]: the hypervisor gives heap pages (and,
//! identity-mapped, their addresses are the physical ones the walker needs), host
//! tests give a `Vec`. This crate forbids `unsafe`, so table memory is only ever
//! touched through the allocator's safe accessors.
//!
//! Changing a live entry follows break-before-make (Arm ARM D8.16.1): the entry is
//! made invalid, the caller's `invalidate_tlb` callback runs (it must do
//! `TLBI VMALLS12E1IS; DSB ISH` for the domain's VMID), and only then is the new
//! entry written or a table freed.

use alloc::vec::Vec;
use core::fmt;

use tock_registers::interfaces::{ReadWriteable, Readable};
use tock_registers::registers::InMemoryRegister;

#[allow(missing_docs)] // the macro generates undocumented helper items
mod fields {
    use tock_registers::register_bitfields;
    register_bitfields! {u64,
        /// A stage-2 block, page or table descriptor (Arm ARM D8.3.1, D8.3.2,
        /// D8.5.5 "Stage 2 memory type and Cacheability attributes").
        pub S2_DESCRIPTOR [
            /// Valid.
            VALID OFFSET(0) NUMBITS(1) [],
            /// Levels 1-2: 0 = block, 1 = table. Level 3: must be 1 (page).
            TYPE OFFSET(1) NUMBITS(1) [Block = 0, TableOrPage = 1],
            /// MemAttr[3:0] with HCR_EL2.FWB = 0: [3:2] outer (00 = Device),
            /// [1:0] inner cacheability or, for Device, the Device type.
            MEM_ATTR OFFSET(2) NUMBITS(4) [
                DeviceNGnRnE = 0b0000,
                DeviceNGnRE = 0b0001,
                NormalNonCacheable = 0b0101,
                NormalWriteBack = 0b1111
            ],
            /// S2AP: stage-2 data access permission (bit 6 read, bit 7 write).
            S2AP OFFSET(6) NUMBITS(2) [None = 0b00, ReadOnly = 0b01, WriteOnly = 0b10, ReadWrite = 0b11],
            /// Shareability.
            SH OFFSET(8) NUMBITS(2) [NonShareable = 0, OuterShareable = 2, InnerShareable = 3],
            /// Access flag: clear would fault on first access.
            AF OFFSET(10) NUMBITS(1) [],
            /// Output address bits [47:12] (blocks use the upper part only), or the
            /// next-level table address for a table descriptor.
            OUTPUT_ADDRESS OFFSET(12) NUMBITS(36) [],
            /// XN[1] (bit 54): execute-never at EL1 and EL0. Bit 53 (XN[0], FEAT_XNX)
            /// stays 0, which is correct with and without FEAT_XNX.
            XN OFFSET(54) NUMBITS(1) [],
        ]
    }

    register_bitfields! {u64,
        /// VTCR_EL2, Virtualization Translation Control Register (Arm ARM D17.2).
        pub VTCR [
            /// Size offset: the IPA space is 2^(64 - T0SZ) bytes.
            T0SZ OFFSET(0) NUMBITS(6) [],
            /// Starting level, with TG0 = 4 KiB: 0 = level 2, 1 = level 1, 2 = level 0.
            SL0 OFFSET(6) NUMBITS(2) [Level2 = 0, Level1 = 1, Level0 = 2],
            /// Inner cacheability of table walks.
            IRGN0 OFFSET(8) NUMBITS(2) [WriteBackWriteAllocate = 1],
            /// Outer cacheability of table walks.
            ORGN0 OFFSET(10) NUMBITS(2) [WriteBackWriteAllocate = 1],
            /// Shareability of table walks.
            SH0 OFFSET(12) NUMBITS(2) [InnerShareable = 3],
            /// Granule.
            TG0 OFFSET(14) NUMBITS(2) [Granule4KiB = 0],
            /// Physical address size of the output (ID_AA64MMFR0_EL1.PARange encoding).
            PS OFFSET(16) NUMBITS(3) [],
            /// VMID size: 0 = 8 bits.
            VS OFFSET(19) NUMBITS(1) [],
            /// Bit 31 is RES1.
            RES1 OFFSET(31) NUMBITS(1) [],
        ]
    }
}
/// The table type and allocator ARM shares with x86's nested paging.
pub use crate::page_table::{ENTRIES, PAGE_SIZE, Table, TableAllocator};
pub use fields::{S2_DESCRIPTOR, VTCR};

/// Bytes mapped by one level-1 entry.
pub const LEVEL1_BLOCK: u64 = 1 << 30;
/// Bytes mapped by one level-2 entry.
pub const LEVEL2_BLOCK: u64 = 1 << 21;

/// Largest physical address the descriptors can hold (48 bits, no FEAT_LPA).
const MAX_OUTPUT: u64 = 1 << 48;

/// Size of the guest-physical (intermediate physical) address space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpaSize {
    /// 39 bits (512 GiB), `T0SZ = 25`: one root table.
    Bits39,
    /// 40 bits (1 TiB), `T0SZ = 24`: two concatenated root tables.
    #[default]
    Bits40,
}

impl IpaSize {
    /// Address bits.
    pub const fn bits(self) -> u32 {
        match self {
            Self::Bits39 => 39,
            Self::Bits40 => 40,
        }
    }

    /// `VTCR_EL2.T0SZ`.
    pub const fn t0sz(self) -> u64 {
        64 - self.bits() as u64
    }

    /// Bytes of guest-physical space.
    pub const fn size(self) -> u64 {
        1 << self.bits()
    }

    /// Concatenated level-1 tables that make the root.
    pub const fn root_tables(self) -> usize {
        match self {
            Self::Bits39 => 1,
            Self::Bits40 => 2,
        }
    }
}

/// Output (physical) address size, as `ID_AA64MMFR0_EL1.PARange` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysicalAddressSize {
    /// 32 bits, 4 GiB.
    Bits32,
    /// 36 bits, 64 GiB.
    Bits36,
    /// 40 bits, 1 TiB.
    Bits40,
    /// 42 bits, 4 TiB.
    Bits42,
    /// 44 bits, 16 TiB.
    Bits44,
    /// 48 bits, 256 TiB.
    Bits48,
}

impl PhysicalAddressSize {
    /// From `ID_AA64MMFR0_EL1.PARange`; 52-bit ranges (FEAT_LPA) are used as 48
    /// bits since the descriptors here do not use the extra bits.
    pub const fn from_parange(parange: u8) -> Option<Self> {
        match parange {
            0 => Some(Self::Bits32),
            1 => Some(Self::Bits36),
            2 => Some(Self::Bits40),
            3 => Some(Self::Bits42),
            4 => Some(Self::Bits44),
            5 | 6 => Some(Self::Bits48),
            _ => None,
        }
    }

    /// The `PARange`/`VTCR_EL2.PS` encoding.
    pub const fn encoding(self) -> u64 {
        match self {
            Self::Bits32 => 0,
            Self::Bits36 => 1,
            Self::Bits40 => 2,
            Self::Bits42 => 3,
            Self::Bits44 => 4,
            Self::Bits48 => 5,
        }
    }

    /// Address bits.
    pub const fn bits(self) -> u32 {
        match self {
            Self::Bits32 => 32,
            Self::Bits36 => 36,
            Self::Bits40 => 40,
            Self::Bits42 => 42,
            Self::Bits44 => 44,
            Self::Bits48 => 48,
        }
    }
}

/// What went wrong building or changing a stage-2 map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage2Error {
    /// The IPA size exceeds the machine's physical address size (not allowed:
    /// Arm ARM D8.2.8, a walk with IPA > PA size faults at level 0).
    IpaLargerThanPa {
        /// IPA bits asked for.
        ipa_bits: u32,
        /// PA bits of the machine.
        pa_bits: u32,
    },
    /// Address or size not a multiple of 4 KiB, or a zero size.
    Misaligned {
        /// Guest-physical start.
        ipa: u64,
        /// Physical start.
        pa: u64,
        /// Length.
        size: u64,
    },
    /// The range leaves the guest-physical or the physical address space.
    OutOfRange {
        /// Guest-physical start.
        ipa: u64,
        /// Length.
        size: u64,
    },
    /// Part of the range is already mapped (first mapped address given).
    AlreadyMapped {
        /// First guest-physical address found mapped.
        ipa: u64,
    },
    /// The allocator has no more tables.
    OutOfTables,
    /// The allocator does not know a table address found in a descriptor.
    UnknownTable {
        /// The table's physical address.
        address: u64,
    },
    /// All 255 VMIDs are in use.
    VmidsExhausted,
    /// Releasing a VMID that is not allocated (or the reserved VMID 0).
    VmidNotAllocated(u8),
}

impl fmt::Display for Stage2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IpaLargerThanPa { ipa_bits, pa_bits } => write!(
                f,
                "stage 2: {ipa_bits}-bit IPA space exceeds the {pa_bits}-bit physical space"
            ),
            Self::Misaligned { ipa, pa, size } => write!(
                f,
                "stage 2: ipa {ipa:#x} pa {pa:#x} size {size:#x} is not a non-empty multiple of 4 KiB"
            ),
            Self::OutOfRange { ipa, size } => write!(
                f,
                "stage 2: ipa {ipa:#x} size {size:#x} leaves the address space"
            ),
            Self::AlreadyMapped { ipa } => write!(f, "stage 2: ipa {ipa:#x} is already mapped"),
            Self::OutOfTables => write!(f, "stage 2: out of translation-table pages"),
            Self::UnknownTable { address } => {
                write!(f, "stage 2: table {address:#x} is not from the allocator")
            }
            Self::VmidsExhausted => write!(f, "stage 2: all 255 VMIDs are in use"),
            Self::VmidNotAllocated(vmid) => write!(f, "stage 2: VMID {vmid} is not allocated"),
        }
    }
}

/// `VTCR_EL2` for this layout: `T0SZ` from `ipa`, start level 1, 4 KiB granule,
/// write-back inner-shareable walks, `PS` from `pa`, 8-bit VMIDs.
pub fn vtcr(ipa: IpaSize, pa: PhysicalAddressSize) -> Result<u64, Stage2Error> {
    if ipa.bits() > pa.bits() {
        return Err(Stage2Error::IpaLargerThanPa {
            ipa_bits: ipa.bits(),
            pa_bits: pa.bits(),
        });
    }
    let register = InMemoryRegister::<u64, VTCR::Register>::new(0);
    register.modify(
        VTCR::T0SZ.val(ipa.t0sz())
            + VTCR::SL0::Level1
            + VTCR::IRGN0::WriteBackWriteAllocate
            + VTCR::ORGN0::WriteBackWriteAllocate
            + VTCR::SH0::InnerShareable
            + VTCR::TG0::Granule4KiB
            + VTCR::PS.val(pa.encoding())
            + VTCR::RES1::SET,
    );
    Ok(register.get())
}

/// `VTTBR_EL2`: the root table's address (BADDR, bits 47:1; the root is aligned
/// to its size so the low bits are 0) and the VMID in bits 55:48.
pub fn vttbr(root: u64, vmid: Vmid) -> u64 {
    (u64::from(vmid.0) << 48) | (root & (MAX_OUTPUT - 1))
}

/// Memory type of a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryType {
    /// RAM: Normal, write-back, inner shareable.
    Normal,
    /// MMIO: Device-nGnRE (no gathering, no reordering, early write ack).
    Device,
}

/// Type and permissions of a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// Memory type.
    pub memory: MemoryType,
    /// The guest may read.
    pub read: bool,
    /// The guest may write.
    pub write: bool,
    /// The guest may execute (never for Device).
    pub execute: bool,
}

impl Attributes {
    /// Guest RAM: Normal WB, read/write/execute.
    pub const RAM: Attributes = Attributes {
        memory: MemoryType::Normal,
        read: true,
        write: true,
        execute: true,
    };
    /// Read-only guest memory (a shared image, a ROM), executable.
    pub const READ_ONLY: Attributes = Attributes {
        memory: MemoryType::Normal,
        read: true,
        write: false,
        execute: true,
    };
    /// Pass-through MMIO: Device-nGnRE, read/write, execute-never.
    pub const DEVICE: Attributes = Attributes {
        memory: MemoryType::Device,
        read: true,
        write: true,
        execute: false,
    };
}

/// A leaf descriptor (block at levels 1-2, page at level 3) mapping `pa` with `attrs`.
/// `pa` must be aligned to the level's block size.
pub fn leaf_descriptor(pa: u64, attrs: Attributes, level: u8) -> u64 {
    let d = InMemoryRegister::<u64, S2_DESCRIPTOR::Register>::new(0);
    d.modify(
        S2_DESCRIPTOR::VALID::SET
            + S2_DESCRIPTOR::AF::SET
            + S2_DESCRIPTOR::OUTPUT_ADDRESS.val((pa & (MAX_OUTPUT - 1)) >> 12),
    );
    if level == 3 {
        d.modify(S2_DESCRIPTOR::TYPE::TableOrPage);
    }
    match attrs.memory {
        MemoryType::Normal => {
            d.modify(S2_DESCRIPTOR::MEM_ATTR::NormalWriteBack + S2_DESCRIPTOR::SH::InnerShareable)
        }
        // Device memory is treated as Outer Shareable whatever SH says; leave it 0.
        MemoryType::Device => d.modify(S2_DESCRIPTOR::MEM_ATTR::DeviceNGnRE),
    }
    let s2ap = match (attrs.read, attrs.write) {
        (false, false) => S2_DESCRIPTOR::S2AP::None,
        (true, false) => S2_DESCRIPTOR::S2AP::ReadOnly,
        (false, true) => S2_DESCRIPTOR::S2AP::WriteOnly,
        (true, true) => S2_DESCRIPTOR::S2AP::ReadWrite,
    };
    d.modify(s2ap);
    if !attrs.execute || attrs.memory == MemoryType::Device {
        d.modify(S2_DESCRIPTOR::XN::SET);
    }
    d.get()
}

/// A table descriptor pointing at the next-level table at `address`.
pub fn table_descriptor(address: u64) -> u64 {
    let d = InMemoryRegister::<u64, S2_DESCRIPTOR::Register>::new(0);
    d.modify(
        S2_DESCRIPTOR::VALID::SET
            + S2_DESCRIPTOR::TYPE::TableOrPage
            + S2_DESCRIPTOR::OUTPUT_ADDRESS.val((address & (MAX_OUTPUT - 1)) >> 12),
    );
    d.get()
}

/// Decodes a valid leaf descriptor: the output address and attributes.
/// `None` for an invalid entry or an attribute encoding this module never writes.
pub fn decode_leaf(descriptor: u64) -> Option<(u64, Attributes)> {
    let d = InMemoryRegister::<u64, S2_DESCRIPTOR::Register>::new(descriptor);
    if !d.is_set(S2_DESCRIPTOR::VALID) {
        return None;
    }
    let memory = match d.read_as_enum(S2_DESCRIPTOR::MEM_ATTR)? {
        S2_DESCRIPTOR::MEM_ATTR::Value::NormalWriteBack => MemoryType::Normal,
        S2_DESCRIPTOR::MEM_ATTR::Value::DeviceNGnRE => MemoryType::Device,
        _ => return None,
    };
    let s2ap = d.read(S2_DESCRIPTOR::S2AP);
    Some((
        d.read(S2_DESCRIPTOR::OUTPUT_ADDRESS) << 12,
        Attributes {
            memory,
            read: s2ap & 1 != 0,
            write: s2ap & 2 != 0,
            execute: !d.is_set(S2_DESCRIPTOR::XN),
        },
    ))
}

/// A successful walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// The physical address `ipa` maps to.
    pub pa: u64,
    /// The mapping's attributes.
    pub attrs: Attributes,
    /// The level of the leaf (1 = 1 GiB block, 2 = 2 MiB block, 3 = page).
    pub level: u8,
}

/// Bytes covered by one entry at `level` (1..=3).
const fn entry_size(level: u8) -> u64 {
    1 << (12 + 9 * (3 - level as u32))
}

fn is_valid(descriptor: u64) -> bool {
    descriptor & 1 != 0
}

fn is_table(descriptor: u64, level: u8) -> bool {
    level < 3 && descriptor & 0b11 == 0b11
}

fn next_table(descriptor: u64) -> u64 {
    descriptor & (MAX_OUTPUT - 1) & !(PAGE_SIZE - 1)
}

/// One range of a domain's guest-physical map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Guest-physical start.
    pub ipa: u64,
    /// Host-physical start.
    pub pa: u64,
    /// Length in bytes.
    pub size: u64,
    /// Type and permissions.
    pub attrs: Attributes,
}

/// One domain's stage-2 map.
#[derive(Debug)]
pub struct Stage2 {
    root: u64,
    ipa: IpaSize,
}

impl Stage2 {
    /// An empty map (every access faults) with a root from `alloc`.
    pub fn new(ipa: IpaSize, alloc: &mut dyn TableAllocator) -> Result<Self, Stage2Error> {
        let root = alloc
            .allocate(ipa.root_tables())
            .ok_or(Stage2Error::OutOfTables)?;
        Ok(Self { root, ipa })
    }

    /// A map of exactly `regions` (guest RAM and pass-through devices);
    /// everything else faults. On failure every table is given back.
    pub fn with_regions(
        ipa: IpaSize,
        regions: &[Region],
        alloc: &mut dyn TableAllocator,
    ) -> Result<Self, Stage2Error> {
        let mut map = Self::new(ipa, alloc)?;
        for region in regions {
            if let Err(e) = map.map(alloc, region.ipa, region.pa, region.size, region.attrs) {
                map.destroy(alloc);
                return Err(e);
            }
        }
        Ok(map)
    }

    /// Physical address of the root, for [`vttbr`].
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The guest-physical space size.
    pub fn ipa_size(&self) -> IpaSize {
        self.ipa
    }

    /// The table and index holding the level-1 entry for `ipa` (across the
    /// concatenated root tables).
    fn root_slot(&self, ipa: u64) -> (u64, usize) {
        let index = (ipa >> 30) as usize;
        (
            self.root + (index / ENTRIES) as u64 * PAGE_SIZE,
            index % ENTRIES,
        )
    }

    fn read(alloc: &dyn TableAllocator, table: u64, index: usize) -> Result<u64, Stage2Error> {
        alloc
            .table(table)
            .map(|t| t[index])
            .ok_or(Stage2Error::UnknownTable { address: table })
    }

    fn write(
        alloc: &mut dyn TableAllocator,
        table: u64,
        index: usize,
        value: u64,
    ) -> Result<(), Stage2Error> {
        let t = alloc
            .table_mut(table)
            .ok_or(Stage2Error::UnknownTable { address: table })?;
        t[index] = value;
        Ok(())
    }

    fn check_range(&self, ipa: u64, pa: u64, size: u64) -> Result<(), Stage2Error> {
        if size == 0 || (ipa | pa | size) & (PAGE_SIZE - 1) != 0 {
            return Err(Stage2Error::Misaligned { ipa, pa, size });
        }
        let ipa_end = ipa.checked_add(size);
        let pa_end = pa.checked_add(size);
        if ipa_end.is_none_or(|end| end > self.ipa.size()) || pa_end.is_none_or(|e| e > MAX_OUTPUT)
        {
            return Err(Stage2Error::OutOfRange { ipa, size });
        }
        Ok(())
    }

    /// Walks the tables for `ipa`.
    pub fn translate(&self, alloc: &dyn TableAllocator, ipa: u64) -> Option<Translation> {
        if ipa >= self.ipa.size() {
            return None;
        }
        let (mut table, mut index) = self.root_slot(ipa);
        let mut level = 1u8;
        loop {
            let descriptor = alloc.table(table)?[index];
            if !is_valid(descriptor) {
                return None;
            }
            if is_table(descriptor, level) {
                table = next_table(descriptor);
                level += 1;
                index = ((ipa >> (12 + 9 * (3 - level as u32))) as usize) % ENTRIES;
                continue;
            }
            if level < 3 && descriptor & 0b10 != 0 {
                return None;
            }
            let (base, attrs) = decode_leaf(descriptor)?;
            let offset = ipa & (entry_size(level) - 1);
            return Some(Translation {
                pa: base + offset,
                attrs,
                level,
            });
        }
    }

    /// The first mapped address in `[ipa, ipa + size)`, if any.
    pub fn first_mapped(&self, alloc: &dyn TableAllocator, ipa: u64, size: u64) -> Option<u64> {
        let end = ipa.saturating_add(size).min(self.ipa.size());
        let mut at = ipa;
        while at < end {
            if self.translate(alloc, at).is_some() {
                return Some(at);
            }
            // Skip the whole unmapped entry at the deepest level reached.
            at = (at | (self.hole_size(alloc, at) - 1)) + 1;
        }
        None
    }

    /// Size of the unmapped entry that holds `ipa` (4 KiB at least).
    fn hole_size(&self, alloc: &dyn TableAllocator, ipa: u64) -> u64 {
        let (mut table, mut index) = self.root_slot(ipa);
        let mut level = 1u8;
        loop {
            let Some(descriptor) = alloc.table(table).map(|t| t[index]) else {
                return PAGE_SIZE;
            };
            if !is_table(descriptor, level) {
                return entry_size(level);
            }
            table = next_table(descriptor);
            level += 1;
            index = ((ipa >> (12 + 9 * (3 - level as u32))) as usize) % ENTRIES;
        }
    }

    /// Maps `[ipa, ipa + size)` to `[pa, pa + size)` with `attrs`, using 1 GiB and
    /// 2 MiB blocks where both addresses are aligned. Fails, changing nothing,
    /// if any part is already mapped.
    pub fn map(
        &mut self,
        alloc: &mut dyn TableAllocator,
        ipa: u64,
        pa: u64,
        size: u64,
        attrs: Attributes,
    ) -> Result<(), Stage2Error> {
        self.check_range(ipa, pa, size)?;
        if let Some(mapped) = self.first_mapped(alloc, ipa, size) {
            return Err(Stage2Error::AlreadyMapped { ipa: mapped });
        }
        let mut done = 0;
        while done < size {
            let (at, to, left) = (ipa + done, pa + done, size - done);
            let level = if (at | to) & (LEVEL1_BLOCK - 1) == 0 && left >= LEVEL1_BLOCK {
                1
            } else if (at | to) & (LEVEL2_BLOCK - 1) == 0 && left >= LEVEL2_BLOCK {
                2
            } else {
                3
            };
            if let Err(e) = self.map_one(alloc, at, to, attrs, level) {
                // Roll back what this call mapped (the range was unmapped before,
                // so the failing chunk's half-built tables go too); the unmap
                // frees the tables that became empty.
                let _ = self.unmap(alloc, ipa, done + entry_size(level), &mut || {});
                return Err(e);
            }
            done += entry_size(level);
        }
        Ok(())
    }

    /// Writes one leaf at `level`, creating intermediate tables.
    fn map_one(
        &mut self,
        alloc: &mut dyn TableAllocator,
        ipa: u64,
        pa: u64,
        attrs: Attributes,
        target: u8,
    ) -> Result<(), Stage2Error> {
        let (mut table, mut index) = self.root_slot(ipa);
        let mut level = 1u8;
        while level < target {
            let descriptor = Self::read(alloc, table, index)?;
            let next = if is_table(descriptor, level) {
                next_table(descriptor)
            } else {
                // `map` checked the range is unmapped, so the entry is invalid.
                let new = alloc.allocate(1).ok_or(Stage2Error::OutOfTables)?;
                Self::write(alloc, table, index, table_descriptor(new))?;
                new
            };
            table = next;
            level += 1;
            index = ((ipa >> (12 + 9 * (3 - level as u32))) as usize) % ENTRIES;
        }
        Self::write(alloc, table, index, leaf_descriptor(pa, attrs, level))
    }

    /// Unmaps `[ipa, ipa + size)`; unmapped holes inside are fine. Blocks only
    /// partly inside are split (break-before-make). `invalidate_tlb` runs after
    /// entries were invalidated and before any table is freed or an entry
    /// replaced. Returns the bytes that were mapped.
    pub fn unmap(
        &mut self,
        alloc: &mut dyn TableAllocator,
        ipa: u64,
        size: u64,
        invalidate_tlb: &mut dyn FnMut(),
    ) -> Result<u64, Stage2Error> {
        self.check_range(ipa, 0, size)?;
        let mut freed = Vec::new();
        let mut unmapped = 0;
        let end = ipa + size;
        let mut at = ipa;
        while at < end {
            let (table, index) = self.root_slot(at);
            let entry_end = ((at >> 30) + 1) << 30;
            let chunk_end = entry_end.min(end);
            unmapped += Self::unmap_entry(
                alloc,
                table,
                index,
                1,
                at,
                chunk_end,
                &mut freed,
                invalidate_tlb,
            )?;
            at = chunk_end;
        }
        if unmapped > 0 || !freed.is_empty() {
            invalidate_tlb();
        }
        for table in freed {
            alloc.free(table, 1);
        }
        Ok(unmapped)
    }

    /// Unmaps `[start, end)` (inside one entry at `level`) from the entry
    /// `table[index]`; tables that become empty are invalidated and queued on `freed`.
    #[allow(clippy::too_many_arguments)]
    fn unmap_entry(
        alloc: &mut dyn TableAllocator,
        table: u64,
        index: usize,
        level: u8,
        start: u64,
        end: u64,
        freed: &mut Vec<u64>,
        invalidate_tlb: &mut dyn FnMut(),
    ) -> Result<u64, Stage2Error> {
        let descriptor = Self::read(alloc, table, index)?;
        if !is_valid(descriptor) {
            return Ok(0);
        }
        let size = entry_size(level);
        let entry_start = start & !(size - 1);
        let whole = start == entry_start && end == entry_start + size;
        if !is_table(descriptor, level) {
            if whole {
                Self::write(alloc, table, index, 0)?;
                return Ok(size);
            }
            // Split the block into a table of the next level holding the same
            // mapping, then unmap the part inside the range from it.
            let (base, attrs) = decode_leaf(descriptor).ok_or(Stage2Error::UnknownTable {
                address: next_table(descriptor),
            })?;
            let child = alloc.allocate(1).ok_or(Stage2Error::OutOfTables)?;
            let child_size = entry_size(level + 1);
            {
                let t = alloc
                    .table_mut(child)
                    .ok_or(Stage2Error::UnknownTable { address: child })?;
                for (i, slot) in t.iter_mut().enumerate() {
                    *slot = leaf_descriptor(base + i as u64 * child_size, attrs, level + 1);
                }
            }
            // Break-before-make: never two live translations for one address.
            Self::write(alloc, table, index, 0)?;
            invalidate_tlb();
            Self::write(alloc, table, index, table_descriptor(child))?;
            return Self::unmap_entry(
                alloc,
                table,
                index,
                level,
                start,
                end,
                freed,
                invalidate_tlb,
            );
        }
        let child = next_table(descriptor);
        let child_size = entry_size(level + 1);
        let mut unmapped = 0;
        let mut at = start;
        while at < end {
            let child_index = ((at / child_size) % ENTRIES as u64) as usize;
            let chunk_end = ((at / child_size + 1) * child_size).min(end);
            unmapped += Self::unmap_entry(
                alloc,
                child,
                child_index,
                level + 1,
                at,
                chunk_end,
                freed,
                invalidate_tlb,
            )?;
            at = chunk_end;
        }
        let empty = alloc
            .table(child)
            .ok_or(Stage2Error::UnknownTable { address: child })?
            .iter()
            .all(|&d| !is_valid(d));
        if empty {
            Self::write(alloc, table, index, 0)?;
            freed.push(child);
        }
        Ok(unmapped)
    }

    /// Replaces whatever maps `[ipa, ipa + size)` with a mapping to `pa` with
    /// `attrs` (break-before-make: unmap, `invalidate_tlb`, map).
    pub fn remap(
        &mut self,
        alloc: &mut dyn TableAllocator,
        ipa: u64,
        pa: u64,
        size: u64,
        attrs: Attributes,
        invalidate_tlb: &mut dyn FnMut(),
    ) -> Result<(), Stage2Error> {
        self.check_range(ipa, pa, size)?;
        self.unmap(alloc, ipa, size, invalidate_tlb)?;
        self.map(alloc, ipa, pa, size, attrs)
    }

    /// Frees every table, the root last. The caller invalidates the VMID's TLB
    /// entries before handing the VMID out again.
    pub fn destroy(self, alloc: &mut dyn TableAllocator) {
        let mut tables = Vec::new();
        for page in 0..self.ipa.root_tables() {
            Self::collect_tables(alloc, self.root + page as u64 * PAGE_SIZE, 1, &mut tables);
        }
        for table in tables {
            alloc.free(table, 1);
        }
        alloc.free(self.root, self.ipa.root_tables());
    }

    fn collect_tables(alloc: &dyn TableAllocator, table: u64, level: u8, out: &mut Vec<u64>) {
        let Some(entries) = alloc.table(table) else {
            return;
        };
        let children: Vec<u64> = entries
            .iter()
            .filter(|&&d| is_table(d, level))
            .map(|&d| next_table(d))
            .collect();
        for child in children {
            Self::collect_tables(alloc, child, level + 1, out);
            out.push(child);
        }
    }

    /// Number of tables below the root (for tests and the memory report).
    pub fn table_count(&self, alloc: &dyn TableAllocator) -> usize {
        let mut tables = Vec::new();
        for page in 0..self.ipa.root_tables() {
            Self::collect_tables(alloc, self.root + page as u64 * PAGE_SIZE, 1, &mut tables);
        }
        tables.len()
    }
}

/// An 8-bit stage-2 VMID (tags the domain's TLB entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vmid(pub u8);

/// Hands out VMIDs 1..=255; VMID 0 is never given (Xen reserves it as well, so a
/// stale or zeroed VTTBR never matches a live domain). The lowest free VMID is
/// reused after [`VmidAllocator::release`]; the caller must have invalidated
/// its TLB entries (`TLBI VMALLS12E1IS` with that VMID) before.
#[derive(Clone, Debug, Default)]
pub struct VmidAllocator {
    used: [u64; 4],
}

impl VmidAllocator {
    /// No VMID in use.
    pub const fn new() -> Self {
        Self { used: [1, 0, 0, 0] }
    }

    fn is_used(&self, vmid: u8) -> bool {
        self.used[usize::from(vmid / 64)] & (1 << (vmid % 64)) != 0
    }

    /// The lowest free VMID.
    pub fn allocate(&mut self) -> Result<Vmid, Stage2Error> {
        // `Default` gives all-zero bits: keep 0 reserved either way.
        self.used[0] |= 1;
        let vmid = (1..=u8::MAX)
            .find(|&v| !self.is_used(v))
            .ok_or(Stage2Error::VmidsExhausted)?;
        self.used[usize::from(vmid / 64)] |= 1 << (vmid % 64);
        Ok(Vmid(vmid))
    }

    /// Gives a VMID back (domain destroyed).
    pub fn release(&mut self, vmid: Vmid) -> Result<(), Stage2Error> {
        if vmid.0 == 0 || !self.is_used(vmid.0) {
            return Err(Stage2Error::VmidNotAllocated(vmid.0));
        }
        self.used[usize::from(vmid.0 / 64)] &= !(1 << (vmid.0 % 64));
        Ok(())
    }

    /// VMIDs in use.
    pub fn in_use(&self) -> usize {
        (1..=u8::MAX).filter(|&v| self.is_used(v)).count()
    }
}

#[cfg(test)]
pub(crate) mod tests;
