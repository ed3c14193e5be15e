//! What a domain holds of the machine's memory — its RAM, its stage-2 tables
//! and its VMID — taken together and given back together.
//!
//! Building takes the three in order and, if one fails, returns what it had
//! already taken (a half-built domain leaks nothing). Teardown frees the
//! tables, invalidates the VMID's TLB entries (through the caller, which owns
//! the `TLBI`), then releases the VMID and the RAM. The arch code supplies the
//! allocators (the hypervisor heap); host tests supply counting ones, so "a
//! stopped domain gives back every page" is checked here.

use alloc::vec::Vec;

use crate::arm::stage2::{self, IpaSize, Region, Stage2, TableAllocator, Vmid, VmidAllocator};

/// Guest RAM comes in 2 MiB-aligned blocks, so stage 2 can map it with blocks.
pub const RAM_ALIGN: u64 = 2 << 20;

/// Where guest RAM comes from.
pub trait RamAllocator {
    /// `bytes` of zeroed RAM aligned to [`RAM_ALIGN`]; its physical address,
    /// or `None` when there is not enough.
    fn allocate(&mut self, bytes: u64) -> Option<u64>;
    /// Gives back an allocation from [`Self::allocate`] (same address and size).
    fn free(&mut self, pa: u64, bytes: u64);
}

/// Why a domain's memory could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainMemoryError {
    /// No RAM of that size is free.
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The stage-2 map (or a VMID) could not be made.
    Stage2(stage2::Stage2Error),
}

impl core::fmt::Display for DomainMemoryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfMemory { bytes } => {
                write!(f, "not enough memory for its {} MiB of RAM", bytes >> 20)
            }
            Self::Stage2(e) => write!(f, "stage 2: {e}"),
        }
    }
}

/// A domain's RAM, stage-2 map and VMID.
#[derive(Debug)]
pub struct DomainMemory {
    /// Host-physical base of its RAM.
    pub ram_pa: u64,
    /// Size of its RAM in bytes.
    pub ram_bytes: u64,
    /// Its stage-2 map.
    pub stage2: Stage2,
    /// The VMID tagging its TLB entries.
    pub vmid: Vmid,
}

/// What a teardown gave back (for the log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// RAM bytes freed.
    pub ram_bytes: u64,
    /// Stage-2 tables freed below the root (the root is freed too).
    pub tables: usize,
    /// The VMID released.
    pub vmid: Vmid,
}

impl DomainMemory {
    /// Takes `ram_bytes` of RAM, builds a stage-2 map of the regions
    /// `regions(ram_pa)` returns (its RAM and devices) and allocates a VMID.
    /// On failure everything taken so far is given back.
    pub fn build(
        ram_bytes: u64,
        ipa: IpaSize,
        regions: impl FnOnce(u64) -> Vec<Region>,
        ram: &mut dyn RamAllocator,
        tables: &mut dyn TableAllocator,
        vmids: &mut VmidAllocator,
    ) -> Result<Self, DomainMemoryError> {
        let ram_pa = ram
            .allocate(ram_bytes)
            .ok_or(DomainMemoryError::OutOfMemory { bytes: ram_bytes })?;
        let stage2 = match Stage2::with_regions(ipa, &regions(ram_pa), tables) {
            Ok(map) => map,
            Err(e) => {
                ram.free(ram_pa, ram_bytes);
                return Err(DomainMemoryError::Stage2(e));
            }
        };
        let vmid = match vmids.allocate() {
            Ok(vmid) => vmid,
            Err(e) => {
                stage2.destroy(tables);
                ram.free(ram_pa, ram_bytes);
                return Err(DomainMemoryError::Stage2(e));
            }
        };
        Ok(Self {
            ram_pa,
            ram_bytes,
            stage2,
            vmid,
        })
    }

    /// Gives everything back. No CPU may run the domain any more: the caller
    /// checks that its vCPUs have left every CPU. `invalidate_tlb` must remove
    /// the VMID's stage-1 and stage-2 TLB entries on every CPU (`TLBI
    /// VMALLS12E1IS` with that VMID) before the VMID can be handed out again.
    pub fn release(
        self,
        ram: &mut dyn RamAllocator,
        tables: &mut dyn TableAllocator,
        vmids: &mut VmidAllocator,
        invalidate_tlb: &mut dyn FnMut(Vmid),
    ) -> Released {
        let table_count = self.stage2.table_count(tables);
        self.stage2.destroy(tables);
        invalidate_tlb(self.vmid);
        // A VMID that is not allocated cannot be released twice: the error
        // only says it was already free, which changes nothing here.
        let _ = vmids.release(self.vmid);
        ram.free(self.ram_pa, self.ram_bytes);
        Released {
            ram_bytes: self.ram_bytes,
            tables: table_count,
            vmid: self.vmid,
        }
    }
}

#[cfg(test)]
/// Test support shared by the ARM and x86 domain-memory tests.
pub(crate) mod testing {
    use super::{RAM_ALIGN, RamAllocator};
    use alloc::vec::Vec;

    /// RAM handed out from a fake range, with every live allocation counted.
    pub struct CountingRam {
        next: u64,
        end: u64,
        live: Vec<(u64, u64)>,
    }

    impl CountingRam {
        /// A fake RAM of `bytes`.
        pub fn new(bytes: u64) -> Self {
            Self {
                next: 0x8000_0000,
                end: 0x8000_0000 + bytes,
                live: Vec::new(),
            }
        }

        /// Bytes allocated and not yet freed.
        pub fn live_bytes(&self) -> u64 {
            self.live.iter().map(|&(_, b)| b).sum()
        }
    }

    impl RamAllocator for CountingRam {
        fn allocate(&mut self, bytes: u64) -> Option<u64> {
            let pa = self.next.next_multiple_of(RAM_ALIGN);
            if pa + bytes > self.end {
                return None;
            }
            self.next = pa + bytes;
            self.live.push((pa, bytes));
            Some(pa)
        }

        fn free(&mut self, pa: u64, bytes: u64) {
            let at = self
                .live
                .iter()
                .position(|&l| l == (pa, bytes))
                .expect("freeing what was not allocated");
            self.live.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::CountingRam;
    use super::*;
    use crate::arm::stage2::Attributes;
    use crate::page_table::tests::VecAllocator;

    const MIB: u64 = 1 << 20;

    /// RAM at 0x4000_0000 plus a pass-through device page and a 4 KiB-aligned
    /// one that needs level-3 tables.
    fn regions(ram_bytes: u64) -> impl FnOnce(u64) -> Vec<Region> {
        move |pa| {
            vec![
                Region {
                    ipa: 0x4000_0000,
                    pa,
                    size: ram_bytes,
                    attrs: Attributes::RAM,
                },
                Region {
                    ipa: 0x0a00_3000,
                    pa: 0x0a00_3000,
                    size: 0x1000,
                    attrs: Attributes::DEVICE,
                },
            ]
        }
    }

    #[test]
    fn teardown_gives_back_every_page_ram_and_the_vmid() {
        let mut ram = CountingRam::new(256 * MIB);
        let mut tables = VecAllocator::new();
        let mut vmids = VmidAllocator::new();
        let first = DomainMemory::build(
            32 * MIB,
            IpaSize::Bits40,
            regions(32 * MIB),
            &mut ram,
            &mut tables,
            &mut vmids,
        )
        .unwrap();
        let second = DomainMemory::build(
            64 * MIB,
            IpaSize::Bits40,
            regions(64 * MIB),
            &mut ram,
            &mut tables,
            &mut vmids,
        )
        .unwrap();
        assert_eq!(ram.live_bytes(), 96 * MIB);
        assert_eq!(vmids.in_use(), 2);
        let tables_of_second = tables.live();
        let mut invalidated = Vec::new();
        let released = first.release(&mut ram, &mut tables, &mut vmids, &mut |v| {
            invalidated.push(v)
        });
        assert_eq!(released.ram_bytes, 32 * MIB);
        assert!(released.tables >= 2, "{released:?}");
        assert_eq!(invalidated, [released.vmid]);
        // Only the first domain's share went back.
        assert_eq!(ram.live_bytes(), 64 * MIB);
        assert_eq!(vmids.in_use(), 1);
        assert!(tables.live() < tables_of_second);
        second.release(&mut ram, &mut tables, &mut vmids, &mut |v| {
            invalidated.push(v)
        });
        assert_eq!((ram.live_bytes(), tables.live(), vmids.in_use()), (0, 0, 0));
        // The VMID is handed out again once released.
        assert_eq!(vmids.allocate(), Ok(Vmid(1)));
    }

    #[test]
    fn a_failed_build_leaks_nothing() {
        // No RAM.
        let mut ram = CountingRam::new(16 * MIB);
        let mut tables = VecAllocator::new();
        let mut vmids = VmidAllocator::new();
        assert_eq!(
            DomainMemory::build(
                32 * MIB,
                IpaSize::Bits40,
                regions(32 * MIB),
                &mut ram,
                &mut tables,
                &mut vmids
            )
            .unwrap_err(),
            DomainMemoryError::OutOfMemory { bytes: 32 * MIB }
        );
        // Not enough tables: the RAM goes back.
        let mut ram = CountingRam::new(256 * MIB);
        let mut few_tables = VecAllocator::with_limit(2);
        let e = DomainMemory::build(
            32 * MIB,
            IpaSize::Bits40,
            regions(32 * MIB),
            &mut ram,
            &mut few_tables,
            &mut vmids,
        )
        .unwrap_err();
        assert!(matches!(e, DomainMemoryError::Stage2(_)), "{e:?}");
        assert_eq!((ram.live_bytes(), few_tables.live()), (0, 0));
        // No VMID left: tables and RAM go back.
        while vmids.allocate().is_ok() {}
        let e = DomainMemory::build(
            32 * MIB,
            IpaSize::Bits40,
            regions(32 * MIB),
            &mut ram,
            &mut tables,
            &mut vmids,
        )
        .unwrap_err();
        assert_eq!(
            e,
            DomainMemoryError::Stage2(stage2::Stage2Error::VmidsExhausted)
        );
        assert_eq!((ram.live_bytes(), tables.live()), (0, 0));
    }
}
