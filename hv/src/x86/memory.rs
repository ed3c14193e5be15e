//! What an SVM domain holds of the machine's memory — its RAM, its nested
//! page tables and its ASID — taken together and given back together, as
//! [`crate::domain_memory`] does for ARM's RAM, stage 2 and VMID.
//!
//! Building takes the three in order and, if one fails, returns what it had
//! already taken. Teardown frees the tables, then releases the ASID to the
//! free list and the RAM. A released ASID is handed out again; its stale TLB
//! entries are flushed by the first `VMRUN` of each new vCPU (the VMCB's
//! `TLB_CONTROL`, see the x86 run loop), so the allocator hands out the
//! lowest free ASID without any flush of its own.

use alloc::vec::Vec;

use crate::domain_memory::RamAllocator;
use crate::page_table::TableAllocator;

use super::npt::{LARGE_PAGE, Npt, NptError};

/// Hands out ASIDs `1..limit` (0 is the host's), lowest free first, and
/// takes them back.
#[derive(Debug)]
pub struct AsidAllocator {
    /// One past the highest ASID the CPU supports (CPUID 0x8000000A EBX).
    limit: u32,
    /// The ASIDs in use.
    used: Vec<u32>,
}

impl AsidAllocator {
    /// An allocator for a CPU with `limit` ASIDs (ASID 0 included).
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            used: Vec::new(),
        }
    }

    /// The lowest free ASID, or `None` when all are taken.
    pub fn allocate(&mut self) -> Option<u32> {
        let asid = (1..self.limit).find(|a| !self.used.contains(a))?;
        self.used.push(asid);
        Some(asid)
    }

    /// Gives `asid` back; `false` if it was not in use.
    pub fn release(&mut self, asid: u32) -> bool {
        let Some(at) = self.used.iter().position(|&a| a == asid) else {
            return false;
        };
        self.used.swap_remove(at);
        true
    }

    /// How many ASIDs are in use.
    pub fn in_use(&self) -> usize {
        self.used.len()
    }
}

/// Why a domain's memory could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryError {
    /// No RAM of that size is free.
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The nested page tables could not be built.
    Npt(NptError),
    /// Every ASID is taken.
    NoAsid,
}

impl core::fmt::Display for MemoryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfMemory { bytes } => {
                write!(f, "not enough memory for its {} MiB of RAM", bytes >> 20)
            }
            Self::Npt(e) => write!(f, "nested page tables: {e}"),
            Self::NoAsid => write!(f, "no ASID left"),
        }
    }
}

/// A domain's RAM (at guest-physical 0), nested page tables and ASID.
#[derive(Debug)]
pub struct DomainMemory {
    /// Host-physical base of its RAM.
    pub ram_pa: u64,
    /// Size of its RAM in bytes (a multiple of 2 MiB).
    pub ram_bytes: u64,
    /// Its nested page tables.
    pub npt: Npt,
    /// The ASID tagging its TLB entries.
    pub asid: u32,
}

/// What a teardown gave back (for the log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// RAM bytes freed.
    pub ram_bytes: u64,
    /// Nested page tables freed (the root included).
    pub tables: usize,
    /// The ASID released.
    pub asid: u32,
}

impl DomainMemory {
    /// Takes `ram_bytes` (rounded up to 2 MiB) of RAM, maps it at
    /// guest-physical 0 and allocates an ASID. On failure everything taken
    /// so far is given back.
    pub fn build(
        ram_bytes: u64,
        ram: &mut dyn RamAllocator,
        tables: &mut dyn TableAllocator,
        asids: &mut AsidAllocator,
    ) -> Result<Self, MemoryError> {
        let ram_bytes = ram_bytes.next_multiple_of(LARGE_PAGE);
        let ram_pa = ram
            .allocate(ram_bytes)
            .ok_or(MemoryError::OutOfMemory { bytes: ram_bytes })?;
        let mut npt = match Npt::new(tables) {
            Ok(npt) => npt,
            Err(e) => {
                ram.free(ram_pa, ram_bytes);
                return Err(MemoryError::Npt(e));
            }
        };
        if let Err(e) = npt.map(tables, 0, ram_pa, ram_bytes) {
            npt.destroy(tables);
            ram.free(ram_pa, ram_bytes);
            return Err(MemoryError::Npt(e));
        }
        let Some(asid) = asids.allocate() else {
            npt.destroy(tables);
            ram.free(ram_pa, ram_bytes);
            return Err(MemoryError::NoAsid);
        };
        Ok(Self {
            ram_pa,
            ram_bytes,
            npt,
            asid,
        })
    }

    /// Gives everything back. No CPU may run the domain any more: the caller
    /// checks that its vCPUs have left every CPU, and makes the first entry
    /// of any later user of the ASID flush it.
    pub fn release(
        self,
        ram: &mut dyn RamAllocator,
        tables: &mut dyn TableAllocator,
        asids: &mut AsidAllocator,
    ) -> Released {
        let table_count = self.npt.destroy(tables);
        // An ASID not in use cannot be released twice: `false` only says it
        // was already free, which changes nothing here.
        let _ = asids.release(self.asid);
        ram.free(self.ram_pa, self.ram_bytes);
        Released {
            ram_bytes: self.ram_bytes,
            tables: table_count,
            asid: self.asid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain_memory::testing::CountingRam;
    use crate::page_table::tests::VecAllocator;

    const MIB: u64 = 1 << 20;

    #[test]
    fn teardown_gives_back_every_page_ram_and_the_asid() {
        let mut ram = CountingRam::new(256 * MIB);
        let mut tables = VecAllocator::new();
        let mut asids = AsidAllocator::new(16);
        let first = DomainMemory::build(32 * MIB, &mut ram, &mut tables, &mut asids).unwrap();
        // 63 MiB rounds up to 64.
        let second = DomainMemory::build(63 * MIB, &mut ram, &mut tables, &mut asids).unwrap();
        assert_eq!((first.asid, second.asid), (1, 2));
        assert_eq!(ram.live_bytes(), 96 * MIB);
        assert_eq!(second.npt.translate(&tables, 0), Some(second.ram_pa));
        let all_tables = tables.live();
        let released = first.release(&mut ram, &mut tables, &mut asids);
        // PML4, PDPT and one PD.
        assert_eq!(
            released,
            Released {
                ram_bytes: 32 * MIB,
                tables: 3,
                asid: 1
            }
        );
        assert_eq!(ram.live_bytes(), 64 * MIB);
        assert_eq!(tables.live(), all_tables - 3);
        assert_eq!(asids.in_use(), 1);
        // The freed ASID is the next one handed out.
        let third = DomainMemory::build(2 * MIB, &mut ram, &mut tables, &mut asids).unwrap();
        assert_eq!(third.asid, 1);
        second.release(&mut ram, &mut tables, &mut asids);
        third.release(&mut ram, &mut tables, &mut asids);
        assert_eq!((ram.live_bytes(), tables.live(), asids.in_use()), (0, 0, 0));
    }

    #[test]
    fn a_failed_build_leaks_nothing() {
        // No RAM.
        let mut ram = CountingRam::new(16 * MIB);
        let mut tables = VecAllocator::new();
        let mut asids = AsidAllocator::new(3);
        assert_eq!(
            DomainMemory::build(32 * MIB, &mut ram, &mut tables, &mut asids).unwrap_err(),
            MemoryError::OutOfMemory { bytes: 32 * MIB }
        );
        // Room for the root only: the RAM goes back.
        let mut ram = CountingRam::new(256 * MIB);
        let mut few_tables = VecAllocator::with_limit(1);
        assert_eq!(
            DomainMemory::build(32 * MIB, &mut ram, &mut few_tables, &mut asids).unwrap_err(),
            MemoryError::Npt(NptError::OutOfMemory)
        );
        assert_eq!((ram.live_bytes(), few_tables.live()), (0, 0));
        // ASIDs 1 and 2 only: the third build gives its tables and RAM back.
        let a = DomainMemory::build(2 * MIB, &mut ram, &mut tables, &mut asids).unwrap();
        let b = DomainMemory::build(2 * MIB, &mut ram, &mut tables, &mut asids).unwrap();
        let (live_ram, live_tables) = (ram.live_bytes(), tables.live());
        assert_eq!(
            DomainMemory::build(2 * MIB, &mut ram, &mut tables, &mut asids).unwrap_err(),
            MemoryError::NoAsid
        );
        assert_eq!((ram.live_bytes(), tables.live()), (live_ram, live_tables));
        a.release(&mut ram, &mut tables, &mut asids);
        b.release(&mut ram, &mut tables, &mut asids);
        assert_eq!(asids.in_use(), 0);
        // Releasing a free ASID changes nothing.
        assert!(!asids.release(1));
    }
}
