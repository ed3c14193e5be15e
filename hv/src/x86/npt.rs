//! Nested page tables (AMD64 APM vol. 2, 15.25): a domain's guest-physical to
//! host-physical map, in the ordinary 4-level long-mode format.
//!
//! Guest RAM is mapped with 2 MiB pages (the RAM is 2 MiB aligned on both
//! sides); nothing else is mapped, so any other guest-physical access is a
//! nested page fault the hypervisor sees. Nested walks are user-mode
//! accesses (APM 15.25.5), so every level sets U/S.
//!
//! Tables come from a [`TableAllocator`] (heap pages in the hypervisor, a
//! `Vec` in host tests), as for the ARM stage-2 tables.

use crate::page_table::TableAllocator;

/// Present.
const P: u64 = 1 << 0;
/// Writable.
const RW: u64 = 1 << 1;
/// User (required at every level of a nested walk).
const US: u64 = 1 << 2;
/// Large page (in a PDE: 2 MiB).
const PS: u64 = 1 << 7;
/// Bits 51:12 of an entry: the next table or the page.
const ADDRESS: u64 = 0x000f_ffff_ffff_f000;

/// One 2 MiB page.
pub const LARGE_PAGE: u64 = 2 << 20;

/// Why a nested map could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NptError {
    /// No memory for a table.
    OutOfMemory,
    /// An address or size is not 2 MiB aligned.
    Misaligned,
    /// The guest-physical range is beyond 48 bits.
    TooHigh,
    /// The range is already (partly) mapped.
    AlreadyMapped(u64),
}

impl core::fmt::Display for NptError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfMemory => write!(f, "no memory for a nested page table"),
            Self::Misaligned => write!(f, "range not 2 MiB aligned"),
            Self::TooHigh => write!(f, "guest-physical range beyond 48 bits"),
            Self::AlreadyMapped(gpa) => write!(f, "guest-physical {gpa:#x} is already mapped"),
        }
    }
}

/// A domain's nested page tables.
#[derive(Debug)]
pub struct Npt {
    root: u64,
}

fn index(gpa: u64, level: u32) -> usize {
    ((gpa >> (12 + 9 * level)) & 0x1ff) as usize
}

impl Npt {
    /// An empty map (every access faults).
    pub fn new(alloc: &mut dyn TableAllocator) -> Result<Self, NptError> {
        let root = alloc.allocate(1).ok_or(NptError::OutOfMemory)?;
        Ok(Self { root })
    }

    /// The host-physical address of the PML4 (the VMCB's `n_cr3`).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Maps `size` bytes of guest-physical `gpa` to host-physical `hpa`,
    /// read/write/execute, with 2 MiB pages.
    pub fn map(
        &mut self,
        alloc: &mut dyn TableAllocator,
        gpa: u64,
        hpa: u64,
        size: u64,
    ) -> Result<(), NptError> {
        if !(gpa | hpa | size).is_multiple_of(LARGE_PAGE) {
            return Err(NptError::Misaligned);
        }
        let end = gpa.checked_add(size).ok_or(NptError::TooHigh)?;
        if end > 1 << 48 {
            return Err(NptError::TooHigh);
        }
        let mut offset = 0;
        while offset < size {
            self.map_large(alloc, gpa + offset, hpa + offset)?;
            offset += LARGE_PAGE;
        }
        Ok(())
    }

    /// The table entry `slot` of `table` points to, created if missing
    /// (`gpa` names the mapping in errors).
    fn next_table(
        alloc: &mut dyn TableAllocator,
        table: u64,
        slot: usize,
        gpa: u64,
    ) -> Result<u64, NptError> {
        let entry = alloc.table(table).ok_or(NptError::OutOfMemory)?[slot];
        if entry & P != 0 {
            if entry & PS != 0 {
                return Err(NptError::AlreadyMapped(gpa));
            }
            return Ok(entry & ADDRESS);
        }
        let new = alloc.allocate(1).ok_or(NptError::OutOfMemory)?;
        alloc.table_mut(table).ok_or(NptError::OutOfMemory)?[slot] = new | P | RW | US;
        Ok(new)
    }

    fn map_large(
        &mut self,
        alloc: &mut dyn TableAllocator,
        gpa: u64,
        hpa: u64,
    ) -> Result<(), NptError> {
        let pdpt = Self::next_table(alloc, self.root, index(gpa, 3), gpa)?;
        let pd = Self::next_table(alloc, pdpt, index(gpa, 2), gpa)?;
        let table = alloc.table_mut(pd).ok_or(NptError::OutOfMemory)?;
        let slot = &mut table[index(gpa, 1)];
        if *slot & P != 0 {
            return Err(NptError::AlreadyMapped(gpa));
        }
        *slot = hpa | P | RW | US | PS;
        Ok(())
    }

    /// The host-physical address `gpa` maps to, if any.
    pub fn translate(&self, alloc: &dyn TableAllocator, gpa: u64) -> Option<u64> {
        if gpa >= 1 << 48 {
            return None;
        }
        let mut table = self.root;
        for level in (1..=3).rev() {
            let entry = alloc.table(table)?[index(gpa, level)];
            if entry & P == 0 {
                return None;
            }
            if level == 1 {
                if entry & PS == 0 {
                    return None;
                }
                return Some((entry & ADDRESS) + (gpa & (LARGE_PAGE - 1)));
            }
            table = entry & ADDRESS;
        }
        None
    }

    /// Frees every table; returns how many (the root included).
    pub fn destroy(self, alloc: &mut dyn TableAllocator) -> usize {
        let mut freed = 0;
        let mut pdpts = alloc::vec::Vec::new();
        if let Some(root) = alloc.table(self.root) {
            pdpts.extend(root.iter().filter(|&&e| e & P != 0).map(|e| e & ADDRESS));
        }
        for pdpt in pdpts {
            let pds: alloc::vec::Vec<u64> = alloc
                .table(pdpt)
                .map(|t| {
                    t.iter()
                        .filter(|&&e| e & P != 0 && e & PS == 0)
                        .map(|e| e & ADDRESS)
                        .collect()
                })
                .unwrap_or_default();
            for pd in pds {
                alloc.free(pd, 1);
                freed += 1;
            }
            alloc.free(pdpt, 1);
            freed += 1;
        }
        alloc.free(self.root, 1);
        freed + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_table::Table;
    use alloc::boxed::Box;
    use alloc::collections::BTreeMap;

    /// Tables in a map keyed by fake page-aligned addresses.
    #[derive(Default)]
    struct Pages {
        tables: BTreeMap<u64, Box<Table>>,
        next: u64,
        limit: Option<usize>,
    }

    impl TableAllocator for Pages {
        fn allocate(&mut self, pages: usize) -> Option<u64> {
            assert_eq!(pages, 1);
            if self.limit.is_some_and(|l| self.tables.len() >= l) {
                return None;
            }
            self.next += 0x1000;
            self.tables.insert(self.next, Box::new([0; 512]));
            Some(self.next)
        }
        fn free(&mut self, address: u64, _pages: usize) {
            assert!(self.tables.remove(&address).is_some(), "double free");
        }
        fn table(&self, address: u64) -> Option<&Table> {
            self.tables.get(&address).map(|b| &**b)
        }
        fn table_mut(&mut self, address: u64) -> Option<&mut Table> {
            self.tables.get_mut(&address).map(|b| &mut **b)
        }
    }

    #[test]
    fn ram_is_mapped_and_nothing_else() {
        let mut pages = Pages::default();
        let mut npt = Npt::new(&mut pages).unwrap();
        npt.map(&mut pages, 0, 0x4000_0000, 32 << 20).unwrap();
        assert_eq!(npt.translate(&pages, 0), Some(0x4000_0000));
        assert_eq!(npt.translate(&pages, 0x12_3456), Some(0x4012_3456));
        assert_eq!(npt.translate(&pages, (32 << 20) - 1), Some(0x4200_0000 - 1));
        assert_eq!(npt.translate(&pages, 32 << 20), None);
        assert_eq!(npt.translate(&pages, 0xfee0_0000), None);
        assert_eq!(npt.translate(&pages, u64::MAX), None);
        // Every level is present, writable and user.
        let root = pages.table(npt.root()).unwrap()[0];
        assert_eq!(root & 0b111, 0b111);
        // PML4, PDPT and PD (2 MiB pages need no page tables).
        assert_eq!(npt.destroy(&mut pages), 3);
        assert!(pages.tables.is_empty());
    }

    #[test]
    fn bad_ranges_are_refused() {
        let mut pages = Pages::default();
        let mut npt = Npt::new(&mut pages).unwrap();
        assert_eq!(
            npt.map(&mut pages, 0x1000, 0, LARGE_PAGE),
            Err(NptError::Misaligned)
        );
        assert_eq!(
            npt.map(&mut pages, 1 << 48, 0, LARGE_PAGE),
            Err(NptError::TooHigh)
        );
        npt.map(&mut pages, 0, 0, LARGE_PAGE).unwrap();
        assert_eq!(
            npt.map(&mut pages, 0, LARGE_PAGE, LARGE_PAGE),
            Err(NptError::AlreadyMapped(0))
        );
        let mut starved = Pages {
            limit: Some(2),
            ..Pages::default()
        };
        let mut npt = Npt::new(&mut starved).unwrap();
        assert_eq!(
            npt.map(&mut starved, 0, 0, LARGE_PAGE),
            Err(NptError::OutOfMemory)
        );
    }
}
