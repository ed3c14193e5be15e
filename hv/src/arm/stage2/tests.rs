//! Host tests for the stage-2 tables: descriptor bits worked out by hand from the
//! Arm ARM, layouts, splits, errors, VMIDs and a property test of translate.

use super::*;
use crate::page_table::tests::VecAllocator;
use alloc::vec;
use proptest::prelude::*;

fn no_flush() -> impl FnMut() {
    || {}
}

#[test]
fn descriptors_match_the_arm_arm() {
    // Page, RAM: valid(0) + page(1) + MemAttr 0b1111 (5:2) + S2AP 0b11 (7:6)
    // + SH 0b11 (9:8) + AF (10) = 0x7ff.
    assert_eq!(
        leaf_descriptor(0x4000_0000, Attributes::RAM, 3),
        0x4000_07ff
    );
    // 2 MiB block, RAM: same without bit 1.
    assert_eq!(
        leaf_descriptor(0x4020_0000, Attributes::RAM, 2),
        0x4020_07fd
    );
    // Block, device: MemAttr 0b0001 (Device-nGnRE) = 0x4, S2AP 0xc0, SH 0, AF 0x400,
    // XN[1] = bit 54.
    assert_eq!(
        leaf_descriptor(0x0900_0000, Attributes::DEVICE, 2),
        0x0040_0000_0900_04c5
    );
    assert_eq!(
        leaf_descriptor(0x0800_0000, Attributes::DEVICE, 3),
        0x0040_0000_0800_04c7
    );
    // Read-only: S2AP 0b01.
    assert_eq!(
        leaf_descriptor(0x4000_0000, Attributes::READ_ONLY, 3),
        0x4000_077f
    );
    // RAM, not executable: XN set.
    let no_exec = Attributes {
        execute: false,
        ..Attributes::RAM
    };
    assert_eq!(
        leaf_descriptor(0x4000_0000, no_exec, 1),
        0x0040_0000_4000_07fd
    );
    assert_eq!(table_descriptor(0x4012_3000), 0x4012_3003);
    for attrs in [
        Attributes::RAM,
        Attributes::DEVICE,
        Attributes::READ_ONLY,
        no_exec,
    ] {
        assert_eq!(
            decode_leaf(leaf_descriptor(0x1234_5000, attrs, 3)),
            Some((0x1234_5000, attrs))
        );
    }
    assert_eq!(decode_leaf(0), None);
}

#[test]
fn vtcr_and_vttbr_values() {
    // T0SZ 24 (0x18) + SL0 1 (0x40) + IRGN0 1 (0x100) + ORGN0 1 (0x400)
    // + SH0 3 (0x3000) + TG0 0 + PS 2 (0x20000) + RES1 bit 31.
    assert_eq!(
        vtcr(IpaSize::Bits40, PhysicalAddressSize::Bits40),
        Ok(0x8002_3558)
    );
    // T0SZ 25, PS 5 (48 bits).
    assert_eq!(
        vtcr(IpaSize::Bits39, PhysicalAddressSize::Bits48),
        Ok(0x8005_3559)
    );
    assert_eq!(
        vtcr(IpaSize::Bits40, PhysicalAddressSize::Bits36),
        Err(Stage2Error::IpaLargerThanPa {
            ipa_bits: 40,
            pa_bits: 36
        })
    );
    assert_eq!(
        PhysicalAddressSize::from_parange(2),
        Some(PhysicalAddressSize::Bits40)
    );
    assert_eq!(
        PhysicalAddressSize::from_parange(6),
        Some(PhysicalAddressSize::Bits48)
    );
    assert_eq!(PhysicalAddressSize::from_parange(7), None);
    assert_eq!(vttbr(0x4000_2000, Vmid(5)), 0x0005_0000_4000_2000);
}

#[test]
fn aligned_gib_is_one_level1_block() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    assert_eq!(alloc.live(), 2, "40-bit root is two concatenated tables");
    assert_eq!(s2.root() % (2 * PAGE_SIZE), 0, "root aligned to its size");
    s2.map(
        &mut alloc,
        0x4000_0000,
        0x8000_0000,
        1 << 30,
        Attributes::RAM,
    )
    .unwrap();
    assert_eq!(s2.table_count(&alloc), 0);
    assert_eq!(alloc.table(s2.root()).unwrap()[1], 0x8000_07fd);
    let t = s2.translate(&alloc, 0x4123_4567).unwrap();
    assert_eq!(t.pa, 0x8123_4567);
    assert_eq!(t.level, 1);
    assert_eq!(t.attrs, Attributes::RAM);
    assert_eq!(s2.translate(&alloc, 0x3fff_ffff), None);
    assert_eq!(s2.translate(&alloc, 0x8000_0000), None);
}

#[test]
fn mixed_alignment_uses_2mib_blocks_then_pages() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    // 2 MiB + 4 KiB, both aligned to 2 MiB: one level-2 block and one page.
    s2.map(
        &mut alloc,
        0x4020_0000,
        0x9020_0000,
        LEVEL2_BLOCK + PAGE_SIZE,
        Attributes::RAM,
    )
    .unwrap();
    assert_eq!(s2.table_count(&alloc), 2, "a level-2 and a level-3 table");
    assert_eq!(s2.translate(&alloc, 0x4020_0000).unwrap().level, 2);
    let page = s2.translate(&alloc, 0x4040_0fff).unwrap();
    assert_eq!((page.pa, page.level), (0x9040_0fff, 3));
    assert_eq!(s2.translate(&alloc, 0x4040_1000), None);
}

#[test]
fn offsets_that_differ_below_2mib_force_pages() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    // IPA 2 MiB-aligned, PA only 4 KiB-aligned: 4 MiB of pages = 2 level-3 tables.
    s2.map(
        &mut alloc,
        0x4000_0000,
        0x8000_1000,
        4 << 20,
        Attributes::RAM,
    )
    .unwrap();
    assert_eq!(s2.table_count(&alloc), 3);
    let t = s2.translate(&alloc, 0x403f_f000).unwrap();
    assert_eq!((t.pa, t.level), (0x8040_0000, 3));
}

#[test]
fn forty_bit_space_uses_the_second_root_table() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    let ipa = 512u64 << 30; // first GiB beyond 39 bits
    s2.map(&mut alloc, ipa, 0x1_0000_0000, 1 << 30, Attributes::RAM)
        .unwrap();
    assert_eq!(
        alloc.table(s2.root() + PAGE_SIZE).unwrap()[0],
        0x1_0000_07fd
    );
    assert_eq!(
        s2.translate(&alloc, ipa + 5).map(|t| t.pa),
        Some(0x1_0000_0005)
    );
    assert_eq!(s2.translate(&alloc, 5), None);
    assert_eq!(
        s2.map(
            &mut alloc,
            (1 << 40) - PAGE_SIZE,
            0,
            2 * PAGE_SIZE,
            Attributes::RAM
        ),
        Err(Stage2Error::OutOfRange {
            ipa: (1 << 40) - PAGE_SIZE,
            size: 2 * PAGE_SIZE
        })
    );

    let mut small = Stage2::new(IpaSize::Bits39, &mut alloc).unwrap();
    assert_eq!(
        small.map(&mut alloc, ipa, 0, PAGE_SIZE, Attributes::RAM),
        Err(Stage2Error::OutOfRange {
            ipa,
            size: PAGE_SIZE
        })
    );
}

#[test]
fn devices_are_device_memory_and_never_executable() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    s2.map(
        &mut alloc,
        0x0900_0000,
        0x0900_0000,
        0x1000,
        Attributes::DEVICE,
    )
    .unwrap();
    let t = s2.translate(&alloc, 0x0900_0018).unwrap();
    assert_eq!(t.pa, 0x0900_0018);
    assert_eq!(t.attrs.memory, MemoryType::Device);
    assert!(!t.attrs.execute);
    // The GIC distributor next to it stays unmapped: it faults to the vGIC.
    assert_eq!(s2.translate(&alloc, 0x0800_0000), None);
}

#[test]
fn bad_ranges_are_refused_and_change_nothing() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    assert!(matches!(
        s2.map(&mut alloc, 0x1000, 0x2000, 0x800, Attributes::RAM),
        Err(Stage2Error::Misaligned { .. })
    ));
    assert!(matches!(
        s2.map(&mut alloc, 0x1001, 0x2000, 0x1000, Attributes::RAM),
        Err(Stage2Error::Misaligned { .. })
    ));
    assert!(matches!(
        s2.map(&mut alloc, 0x1000, 0x2000, 0, Attributes::RAM),
        Err(Stage2Error::Misaligned { .. })
    ));
    s2.map(
        &mut alloc,
        0x4000_0000,
        0x8000_0000,
        0x20_0000,
        Attributes::RAM,
    )
    .unwrap();
    let before = alloc.live();
    assert_eq!(
        s2.map(
            &mut alloc,
            0x3ff0_0000,
            0x1000_0000,
            0x20_0000,
            Attributes::RAM
        ),
        Err(Stage2Error::AlreadyMapped { ipa: 0x4000_0000 })
    );
    assert_eq!(alloc.live(), before);
    assert_eq!(s2.translate(&alloc, 0x3ff0_0000), None);
}

#[test]
fn partial_unmap_splits_blocks_with_break_before_make() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    s2.map(
        &mut alloc,
        0x4000_0000,
        0x8000_0000,
        1 << 30,
        Attributes::RAM,
    )
    .unwrap();
    let mut flushes = 0;
    let hole = 0x4012_3000;
    let unmapped = s2
        .unmap(&mut alloc, hole, PAGE_SIZE, &mut || flushes += 1)
        .unwrap();
    assert_eq!(unmapped, PAGE_SIZE);
    // Two splits (1 GiB -> 2 MiB, 2 MiB -> 4 KiB), each with a flush between
    // break and make, plus the final one.
    assert_eq!(flushes, 3);
    assert_eq!(s2.translate(&alloc, hole), None);
    let below = s2.translate(&alloc, hole - 1).unwrap();
    assert_eq!((below.pa, below.level), (0x8012_2fff, 3));
    let above = s2.translate(&alloc, hole + PAGE_SIZE).unwrap();
    assert_eq!((above.pa, above.level), (0x8012_4000, 3));
    let far = s2.translate(&alloc, 0x7000_0000).unwrap();
    assert_eq!((far.pa, far.level), (0xb000_0000, 2));
    assert_eq!(s2.table_count(&alloc), 2);

    // Unmapping the rest frees the tables that became empty.
    let rest = s2
        .unmap(&mut alloc, 0x4000_0000, 1 << 30, &mut no_flush())
        .unwrap();
    assert_eq!(rest, (1 << 30) - PAGE_SIZE);
    assert_eq!(s2.table_count(&alloc), 0);
    assert_eq!(alloc.live(), 2, "only the root is left");
    assert_eq!(s2.first_mapped(&alloc, 0, 1 << 40), None);
}

#[test]
fn remap_moves_a_range() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    s2.map(
        &mut alloc,
        0x4000_0000,
        0x8000_0000,
        0x40_0000,
        Attributes::RAM,
    )
    .unwrap();
    let mut flushed = false;
    s2.remap(
        &mut alloc,
        0x4020_0000,
        0x9000_0000,
        0x20_0000,
        Attributes::READ_ONLY,
        &mut || flushed = true,
    )
    .unwrap();
    assert!(flushed);
    let t = s2.translate(&alloc, 0x4020_0010).unwrap();
    assert_eq!((t.pa, t.attrs), (0x9000_0010, Attributes::READ_ONLY));
    assert_eq!(s2.translate(&alloc, 0x4000_0010).unwrap().pa, 0x8000_0010);
}

#[test]
fn out_of_tables_rolls_back() {
    // Root (2 pages) + a level-2 table; a page also needs a level-3 table.
    let mut alloc = VecAllocator::with_limit(3);
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    assert_eq!(
        s2.map(
            &mut alloc,
            0x4000_0000,
            0x8000_0000,
            PAGE_SIZE,
            Attributes::RAM
        ),
        Err(Stage2Error::OutOfTables)
    );
    assert_eq!(alloc.live(), 2, "the half-built level-2 table was freed");
    assert_eq!(s2.translate(&alloc, 0x4000_0000), None);
    // A 2 MiB block needs only the level-2 table.
    s2.map(
        &mut alloc,
        0x4000_0000,
        0x8000_0000,
        0x20_0000,
        Attributes::RAM,
    )
    .unwrap();
    // The second 2 MiB block is mapped, the page after it is not: all rolled back.
    assert_eq!(
        s2.map(
            &mut alloc,
            0x4020_0000,
            0x8020_0000,
            0x20_0000 + PAGE_SIZE,
            Attributes::RAM
        ),
        Err(Stage2Error::OutOfTables)
    );
    assert_eq!(s2.translate(&alloc, 0x4020_0000), None);
    assert!(s2.translate(&alloc, 0x4000_0000).is_some());
    assert_eq!(
        Stage2::new(IpaSize::Bits40, &mut VecAllocator::with_limit(1)).err(),
        Some(Stage2Error::OutOfTables)
    );
}

#[test]
fn destroy_frees_every_table() {
    let mut alloc = VecAllocator::new();
    let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
    s2.map(
        &mut alloc,
        0x4000_1000,
        0x8000_1000,
        0x30_0000,
        Attributes::RAM,
    )
    .unwrap();
    s2.map(
        &mut alloc,
        0x0900_0000,
        0x0900_0000,
        0x1000,
        Attributes::DEVICE,
    )
    .unwrap();
    assert!(alloc.live() > 2);
    s2.destroy(&mut alloc);
    assert_eq!(alloc.live(), 0);
}

#[test]
fn vmids_are_reused_and_run_out() {
    let mut vmids = VmidAllocator::new();
    let all: Vec<Vmid> = (0..255).map(|_| vmids.allocate().unwrap()).collect();
    assert_eq!(all.first(), Some(&Vmid(1)));
    assert_eq!(all.last(), Some(&Vmid(255)));
    assert_eq!(vmids.in_use(), 255);
    assert_eq!(vmids.allocate(), Err(Stage2Error::VmidsExhausted));
    vmids.release(Vmid(7)).unwrap();
    assert_eq!(
        vmids.release(Vmid(7)),
        Err(Stage2Error::VmidNotAllocated(7))
    );
    assert_eq!(
        vmids.release(Vmid(0)),
        Err(Stage2Error::VmidNotAllocated(0))
    );
    assert_eq!(vmids.allocate(), Ok(Vmid(7)));
    let mut fresh = VmidAllocator::default();
    assert_eq!(fresh.allocate(), Ok(Vmid(1)), "VMID 0 stays reserved");
}

/// A region for the property test: start page, length in pages, PA delta, kind.
fn regions() -> impl Strategy<Value = Vec<(u64, u64, u64, bool)>> {
    // Starts on a 2 MiB grid half the time so blocks get used; lengths up to
    // 1.5 GiB; PA deltas on a 1 GiB grid or any page.
    let start = prop_oneof![
        (0u64..(1 << 28)).prop_map(|p| p),
        (0u64..(1 << 19)).prop_map(|b| b * 512),
        (0u64..1024).prop_map(|g| g * 512 * 512),
    ];
    let pages = prop_oneof![
        1u64..600,
        500u64..2000,
        (1u64..4).prop_map(|g| g * 262_144 + 3)
    ];
    let delta = prop_oneof![
        (0u64..64).prop_map(|g| g << 30),
        (0u64..(1 << 20)).prop_map(|p| p << 12)
    ];
    prop::collection::vec((start, pages, delta, any::<bool>()), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn translate_matches_random_regions(raw in regions(), probes in prop::collection::vec(any::<u64>(), 32)) {
        // Keep the regions that do not overlap an earlier one.
        let mut placed: Vec<(u64, u64, u64, Attributes)> = Vec::new();
        for (start, pages, delta, device) in raw {
            let ipa = start << 12;
            let size = pages << 12;
            if ipa + size > 1 << 40 || placed.iter().any(|&(i, s, _, _)| ipa < i + s && i < ipa + size) {
                continue;
            }
            let pa = ((ipa + delta) % (1 << 44)) & !(PAGE_SIZE - 1);
            if pa + size > 1 << 44 {
                continue;
            }
            let attrs = if device { Attributes::DEVICE } else { Attributes::RAM };
            placed.push((ipa, size, pa, attrs));
        }
        let mut alloc = VecAllocator::new();
        let mut s2 = Stage2::new(IpaSize::Bits40, &mut alloc).unwrap();
        for &(ipa, size, pa, attrs) in &placed {
            s2.map(&mut alloc, ipa, pa, size, attrs).unwrap();
        }
        let expect = |addr: u64| placed
            .iter()
            .find(|&&(i, s, _, _)| (i..i + s).contains(&addr))
            .map(|&(i, _, p, a)| (p + (addr - i), a));
        let mut points = vec![];
        for &(ipa, size, _, _) in &placed {
            points.extend([ipa, ipa + size - 1, ipa + size, ipa.saturating_sub(1), ipa + size / 2]);
        }
        points.extend(probes.iter().map(|p| p % (1 << 40)));
        for &addr in &points {
            let got = s2.translate(&alloc, addr).map(|t| (t.pa, t.attrs));
            prop_assert_eq!(got, expect(addr), "ipa {:#x}", addr);
        }
        // Unmap every other region; the rest must be untouched, and tables of
        // the removed ones freed.
        let kept: Vec<_> = placed.iter().copied().enumerate().filter(|(i, _)| i % 2 == 1).map(|(_, r)| r).collect();
        for &(ipa, size, _, _) in placed.iter().step_by(2) {
            prop_assert_eq!(s2.unmap(&mut alloc, ipa, size, &mut no_flush()).unwrap(), size);
        }
        for &addr in &points {
            let want = kept
                .iter()
                .find(|&&(i, s, _, _)| (i..i + s).contains(&addr))
                .map(|&(i, _, p, a)| (p + (addr - i), a));
            prop_assert_eq!(s2.translate(&alloc, addr).map(|t| (t.pa, t.attrs)), want, "after unmap, ipa {:#x}", addr);
        }
        for &(ipa, size, _, _) in &kept {
            s2.unmap(&mut alloc, ipa, size, &mut no_flush()).unwrap();
        }
        prop_assert_eq!(alloc.live(), 2, "all tables but the root freed");
    }
}

#[test]
fn a_domain_map_from_regions() {
    let mut alloc = VecAllocator::new();
    let regions = [
        Region {
            ipa: 0x4000_0000,
            pa: 0x8000_0000,
            size: 64 << 20,
            attrs: Attributes::RAM,
        },
        Region {
            ipa: 0x0904_0000,
            pa: 0x0904_0000,
            size: 0x1000,
            attrs: Attributes::DEVICE,
        },
    ];
    let s2 = Stage2::with_regions(IpaSize::Bits40, &regions, &mut alloc).unwrap();
    assert_eq!(
        s2.translate(&alloc, 0x43ff_ffff).map(|t| t.pa),
        Some(0x83ff_ffff)
    );
    assert_eq!(s2.translate(&alloc, 0x4400_0000), None);
    assert_eq!(
        s2.translate(&alloc, 0x0904_0004).map(|t| t.attrs),
        Some(Attributes::DEVICE)
    );
    // The vGIC distributor and the vPL011 stay unmapped: they trap.
    assert_eq!(s2.translate(&alloc, 0x0800_0000), None);
    assert_eq!(s2.translate(&alloc, 0x0900_0000), None);
    s2.destroy(&mut alloc);

    // Overlapping regions: refused, and nothing is leaked.
    let overlapping = [
        regions[0],
        Region {
            ipa: 0x43ff_f000,
            ..regions[1]
        },
    ];
    assert_eq!(
        Stage2::with_regions(IpaSize::Bits40, &overlapping, &mut alloc).err(),
        Some(Stage2Error::AlreadyMapped { ipa: 0x43ff_f000 })
    );
    assert_eq!(alloc.live(), 0);
}
