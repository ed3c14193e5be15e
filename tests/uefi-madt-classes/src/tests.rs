//! The edits checked with the hypervisor's own ACPI parser on real boards'
//! tables, and refused on tables they cannot be made to.

extern crate std;

use std::vec::Vec;

use platform::acpi::{AcpiCpus, Madt, Pptt};
use platform::dt::ClassKind;
use sched::CpuSet;

use super::*;

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/acpi/",
            $name
        ))
        .as_slice()
    };
}

const AMPERE_MADT: &[u8] = fixture!("arm-ampere-altra-ava.apic.dat");
const AMPERE_PPTT: &[u8] = fixture!("arm-ampere-altra-ava.pptt.dat");

#[test]
fn an_ampere_altra_becomes_half_little_half_big_for_the_hypervisors_parser() {
    let mut madt = AMPERE_MADT.to_vec();
    let before = Madt::parse(AMPERE_MADT).expect("the fixture parses");
    let alike = AcpiCpus::arm(&before, Some(&Pptt::parse(AMPERE_PPTT).unwrap())).unwrap();
    assert_eq!(alike.cpu_classes(&alike.topology().unwrap()).len(), 1);

    let giccs = set_efficiency_classes(&mut madt, little_then_big).unwrap();

    assert_eq!(giccs, before.giccs.len());
    // The parser checks the checksum: the edited table must pass it.
    let after = Madt::parse(&madt).expect("the edited MADT parses");
    let cpus = AcpiCpus::arm(&after, Some(&Pptt::parse(AMPERE_PPTT).unwrap())).unwrap();
    let classes = cpus.cpu_classes(&cpus.topology().unwrap());
    assert_eq!(classes.len(), 2, "{classes:?}");
    let half = cpus.cpus.len() / 2;
    let big = classes.iter().find(|c| c.kind == ClassKind::Big).unwrap();
    let little = classes
        .iter()
        .find(|c| c.kind == ClassKind::Little)
        .unwrap();
    assert_eq!(little.cpus, (0..half).collect::<CpuSet>());
    assert_eq!(big.cpus, (half..cpus.cpus.len()).collect::<CpuSet>());
    // Nothing but the class bytes and the checksum changed.
    let changed: Vec<usize> = (0..madt.len())
        .filter(|&i| madt[i] != AMPERE_MADT[i])
        .collect();
    let class_bytes: Vec<usize> = before.giccs[half..]
        .iter()
        .map(|gicc| gicc.offset + GICC_EFFICIENCY_CLASS)
        .collect();
    assert_eq!(changed[0], CHECKSUM);
    assert_eq!(&changed[1..], class_bytes.as_slice());
}

#[test]
fn the_surface_pro_x_order_is_what_little_then_big_gives() {
    // The real big.LITTLE laptop lists its four LITTLE cores first.
    let madt = Madt::parse(fixture!("arm-qcom-8cx-surface-pro-x.apic.dat")).unwrap();
    let count = madt.giccs.len();
    let real: Vec<Option<u8>> = madt.giccs.iter().map(|g| g.efficiency_class).collect();
    let ours: Vec<Option<u8>> = (0..count)
        .map(|i| Some(little_then_big(i, count)))
        .collect();
    assert_eq!(real, ours);
}

#[test]
fn tables_that_cannot_take_classes_are_left_alone() {
    let refuse = |mut table: Vec<u8>, expected: TableError| {
        let original = table.clone();
        assert_eq!(
            set_efficiency_classes(&mut table, little_then_big),
            Err(expected)
        );
        assert_eq!(table, original, "a refused table must not change");
    };
    // An x86 machine's MADT: no GICC.
    refuse(
        fixture!("x86-amd-asrock-x570-taichi.apic.dat").to_vec(),
        TableError::NoGicc,
    );
    // Cut inside its entries: the header's length runs past the bytes.
    let cut = AMPERE_MADT[..200].to_vec();
    refuse(
        cut,
        TableError::Truncated {
            needed: AMPERE_MADT.len(),
            have: 200,
        },
    );
    // Not a MADT.
    let mut pptt = AMPERE_PPTT.to_vec();
    pptt.truncate(64);
    refuse(
        pptt,
        TableError::Signature {
            found: *b"PPTT",
            expected: MADT_SIGNATURE,
        },
    );
    // An entry of length 0 would loop forever in a naive walk.
    let mut zero = AMPERE_MADT.to_vec();
    zero[MADT_ENTRIES + 1] = 0;
    refuse(
        zero,
        TableError::BadEntry {
            offset: MADT_ENTRIES,
            length: 0,
        },
    );
    // An ACPI 5.1 GICC (76 bytes) has no class byte: the first entry shrunk,
    // the rest shifted (the table one entry shorter, as firmware would
    // write it).
    let first = Madt::parse(AMPERE_MADT).unwrap().giccs[0].offset;
    let mut old = AMPERE_MADT.to_vec();
    old[first + 1] = 76;
    old.drain(first + 76..first + 80);
    let length = (old.len() as u32).to_le_bytes();
    old[4..8].copy_from_slice(&length);
    refuse(
        old,
        TableError::NoClassField {
            offset: first,
            length: 76,
        },
    );
}

/// An ACPI 2.0 RSDP pointing at `xsdt`.
fn rsdp(revision: u8, xsdt: u64) -> Vec<u8> {
    let mut rsdp = Vec::from(*b"RSD PTR ");
    rsdp.extend([0; 7]);
    rsdp.push(revision);
    rsdp.extend([0; 4]); // RSDT address
    rsdp.extend(36u32.to_le_bytes());
    rsdp.extend(xsdt.to_le_bytes());
    rsdp.extend([0; 4]);
    rsdp
}

/// An XSDT listing `tables`.
fn xsdt(tables: &[u64]) -> Vec<u8> {
    let mut xsdt = Vec::from(XSDT_SIGNATURE);
    xsdt.extend(((HEADER_LEN + 8 * tables.len()) as u32).to_le_bytes());
    xsdt.resize(HEADER_LEN, 0);
    for table in tables {
        xsdt.extend(table.to_le_bytes());
    }
    xsdt
}

#[test]
fn the_walk_reads_the_xsdt_from_an_acpi_2_rsdp() {
    assert_eq!(xsdt_address(&rsdp(2, 0x4321_0000)), Ok(0x4321_0000));
    assert_eq!(
        xsdt_address(&rsdp(0, 0x4321_0000)),
        Err(TableError::OldRsdp { revision: 0 })
    );
    assert_eq!(
        xsdt_address(&rsdp(2, 1)[..20]),
        Err(TableError::Truncated {
            needed: 32,
            have: 20
        })
    );
    assert!(matches!(
        xsdt_address(b"RSD PTX 0123456789012345678901234567"),
        Err(TableError::Signature { .. })
    ));

    let listed = xsdt(&[0x1000, 0x2000, 0xdead_0000]);
    assert_eq!(table_length(&listed), Ok(listed.len()));
    let tables: Vec<u64> = xsdt_entries(&listed).unwrap().collect();
    assert_eq!(tables, [0x1000, 0x2000, 0xdead_0000]);
    // An XSDT whose length runs past its bytes, or that is an RSDT.
    assert!(matches!(
        xsdt_entries(&listed[..50]),
        Err(TableError::Truncated { .. })
    ));
    let mut rsdt = listed.clone();
    rsdt[..4].copy_from_slice(b"RSDT");
    assert!(matches!(
        xsdt_entries(&rsdt),
        Err(TableError::Signature { .. })
    ));
}
