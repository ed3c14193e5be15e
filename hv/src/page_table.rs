//! What ARM's stage-2 tables and x86's nested page tables have in common:
//! 4 KiB tables of 512 64-bit entries, and the allocator both take them
//! from (the hypervisor heap on the machine, boxed arrays in host tests).
//! The entry formats are each architecture's own ([`crate::arm::stage2`],
//! [`crate::x86::npt`]).

/// Bytes per page (the 4 KiB granule).
pub const PAGE_SIZE: u64 = 1 << 12;
/// Entries per table.
pub const ENTRIES: usize = 512;

/// One translation table.
pub type Table = [u64; ENTRIES];

/// Where translation tables come from, and the only way the stage-2 and
/// nested-paging code reads or writes them.
pub trait TableAllocator {
    /// `pages` zeroed, physically contiguous tables aligned to `pages * 4 KiB`;
    /// returns the physical address of the first. `None` when out of memory.
    fn allocate(&mut self, pages: usize) -> Option<u64>;
    /// Gives back tables from [`Self::allocate`] (same address and count).
    fn free(&mut self, address: u64, pages: usize);
    /// The table at `address` (the first or a later page of an allocation).
    fn table(&self, address: u64) -> Option<&Table>;
    /// The table at `address`, writable.
    fn table_mut(&mut self, address: u64) -> Option<&mut Table>;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::boxed::Box;
    use alloc::vec::Vec;

    /// Where the fake tables "live": far from any address the tests map.
    const TABLE_BASE: u64 = 0x7_0000_0000;

    /// A table allocator over boxed arrays, with an optional page limit (also
    /// used by the domain-memory teardown tests).
    pub(crate) struct VecAllocator {
        pages: Vec<Option<Box<Table>>>,
        limit: usize,
    }

    impl VecAllocator {
        pub(crate) fn new() -> Self {
            Self::with_limit(usize::MAX)
        }

        pub(crate) fn with_limit(limit: usize) -> Self {
            Self {
                pages: Vec::new(),
                limit,
            }
        }

        pub(crate) fn live(&self) -> usize {
            self.pages.iter().filter(|p| p.is_some()).count()
        }

        fn slot(&self, address: u64) -> Option<usize> {
            let offset = address.checked_sub(TABLE_BASE)?;
            (offset % PAGE_SIZE == 0).then_some((offset / PAGE_SIZE) as usize)
        }
    }

    impl TableAllocator for VecAllocator {
        fn allocate(&mut self, pages: usize) -> Option<u64> {
            if self.live() + pages > self.limit {
                return None;
            }
            // Aligned to the allocation's size, as the hardware needs for the root.
            let mut start = 0;
            loop {
                let run = start..start + pages;
                if run
                    .clone()
                    .all(|i| self.pages.get(i).is_none_or(Option::is_none))
                {
                    if self.pages.len() < run.end {
                        self.pages.resize_with(run.end, || None);
                    }
                    for i in run {
                        self.pages[i] = Some(Box::new([0; ENTRIES]));
                    }
                    return Some(TABLE_BASE + start as u64 * PAGE_SIZE);
                }
                start += pages;
            }
        }

        fn free(&mut self, address: u64, pages: usize) {
            let first = self.slot(address).expect("freeing a foreign address");
            for i in first..first + pages {
                assert!(
                    self.pages[i].take().is_some(),
                    "double free of {address:#x}"
                );
            }
        }

        fn table(&self, address: u64) -> Option<&Table> {
            self.pages.get(self.slot(address)?)?.as_deref()
        }

        fn table_mut(&mut self, address: u64) -> Option<&mut Table> {
            let slot = self.slot(address)?;
            self.pages.get_mut(slot)?.as_deref_mut()
        }
    }
}
