//! `platform::acpi` never panics or hangs: every fixture truncated at many lengths
//! and with bytes changed at many offsets (checksum repaired, so the entry walk and
//! the topology code see the damage), deterministic so a failure reproduces.

use platform::acpi::{
    AcpiCpus, AcpiTables, ApicIdLayout, BootAcpi, Fadt, Gtdt, Madt, Pptt, Rsdp, Spcr,
    describe_cpus, parse_acpidump, root_table_entries, write_topology_report,
};

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/acpi/",
            $name
        ))
        .as_slice()
    };
}

/// `(name, MADT, PPTT)`.
type Fixture = (&'static str, &'static [u8], Option<&'static [u8]>);

const FIXTURES: &[Fixture] = &[
    (
        "ampere",
        fixture!("arm-ampere-altra-ava.apic.dat"),
        Some(fixture!("arm-ampere-altra-ava.pptt.dat")),
    ),
    (
        "nxp",
        fixture!("arm-nxp-lx2160a-honeycomb.apic.dat"),
        Some(fixture!("arm-nxp-lx2160a-honeycomb.pptt.dat")),
    ),
    (
        "qcom",
        fixture!("arm-qcom-8cx-surface-pro-x.apic.dat"),
        Some(fixture!("arm-qcom-8cx-surface-pro-x.pptt.dat")),
    ),
    ("z490", fixture!("x86-intel-asus-z490f.apic.dat"), None),
    (
        "x570",
        fixture!("x86-amd-asrock-x570-taichi.apic.dat"),
        None,
    ),
    (
        "thinkpad",
        fixture!("x86-intel-hybrid-thinkpad-x1yoga-g8.apic.dat"),
        None,
    ),
    (
        "claw",
        fixture!("x86-intel-hybrid-msi-claw-a1m-x2apic.apic.dat"),
        None,
    ),
    ("r820", fixture!("x86-intel-4s-dell-r820.apic.dat"), None),
];

/// Everything the boot path and xtask do with a MADT (and PPTT). Returns whether the
/// MADT parsed and gave a topology.
fn exercise(madt: &[u8], pptt: Option<&[u8]>) -> bool {
    let tables =
        AcpiTables::from_tables([Some(madt), pptt].into_iter().flatten().map(<[u8]>::to_vec));
    if let Err(error) = BootAcpi::from_tables(&tables, None) {
        assert!(!error.to_string().is_empty());
    }
    let madt = match Madt::parse(madt) {
        Ok(madt) => madt,
        Err(error) => {
            assert!(!error.to_string().is_empty());
            return false;
        }
    };
    let pptt = pptt.and_then(|bytes| match Pptt::parse(bytes) {
        Ok(pptt) => Some(pptt),
        Err(error) => {
            assert!(!error.to_string().is_empty());
            None
        }
    });
    if let Some(pptt) = &pptt {
        for node in &pptt.nodes {
            let _ = pptt.position(node.acpi_processor_id);
        }
    }
    let layouts = [
        None,
        ApicIdLayout::new(1, 5),
        ApicIdLayout::new(1, 7).and_then(|l| l.with_cluster_shift(3)),
    ];
    let mut ok = false;
    for layout in layouts {
        match describe_cpus(&madt, pptt.as_ref(), layout) {
            Ok(cpus) => {
                let topology = cpus.topology().expect("a described machine has a topology");
                assert_eq!(topology.len(), cpus.logical_cpus().count());
                let mut report = String::new();
                write_topology_report(&mut report, &cpus, &topology).expect("report");
                for warning in &cpus.warnings {
                    assert!(!warning.to_string().is_empty());
                }
                ok = true;
            }
            Err(error) => assert!(!error.to_string().is_empty()),
        }
    }
    // Both builders on every MADT, whatever it holds.
    let _ = AcpiCpus::arm(&madt, pptt.as_ref());
    let _ = AcpiCpus::x86(&madt, None);
    ok
}

fn set_length_and_checksum(bytes: &mut [u8], length: usize) {
    if bytes.len() >= 10 {
        if bytes.len() >= 8 {
            bytes[4..8].copy_from_slice(&(length as u32).to_le_bytes());
        }
        bytes[9] = 0;
        let sum = bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b));
        bytes[9] = 0u8.wrapping_sub(sum);
    }
}

fn fix_checksum(bytes: &mut [u8]) {
    let length = bytes.len();
    set_length_and_checksum(bytes, length);
}

/// xorshift64: a fixed seed per fixture keeps failures reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

#[test]
fn fixtures_parse_unmodified() {
    for (name, madt, pptt) in FIXTURES {
        assert!(exercise(madt, *pptt), "{name}");
    }
}

#[test]
fn truncated_fixtures_never_panic() {
    for (name, madt, pptt) in FIXTURES {
        for table in [Some(*madt), *pptt].into_iter().flatten() {
            let is_madt = table == *madt;
            let lengths = (0..=80).chain((0..table.len()).step_by((table.len() / 300).max(1)));
            for length in lengths {
                let cut = &table[..length];
                // Shorter than the header says: always an error.
                if is_madt {
                    assert!(!exercise(cut, *pptt), "{name} cut to {length} parsed");
                } else {
                    assert!(
                        Pptt::parse(cut).is_err(),
                        "{name} PPTT cut to {length} parsed"
                    );
                }
                // The header agrees with the cut: the entry walk must catch it.
                let mut consistent = cut.to_vec();
                fix_checksum(&mut consistent);
                if is_madt {
                    exercise(&consistent, *pptt);
                } else {
                    exercise(madt, Some(&consistent));
                }
            }
        }
    }
}

#[test]
fn corrupted_fixtures_never_panic() {
    for (seed, (name, madt, pptt)) in FIXTURES.iter().enumerate() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed as u64 + 1));
        for round in 0..1500 {
            let target_pptt = pptt.is_some() && round % 3 == 2;
            let mut copy = if target_pptt {
                pptt.unwrap().to_vec()
            } else {
                madt.to_vec()
            };
            let changes = if round % 5 == 0 { 8 } else { 1 };
            for _ in 0..changes {
                // Mostly the entries; sometimes the header.
                let offset = if round % 4 == 0 {
                    rng.below(44)
                } else {
                    rng.below(copy.len())
                };
                let offset = offset.min(copy.len() - 1);
                copy[offset] = match round % 3 {
                    0 => copy[offset] ^ (1 << rng.below(8)),
                    1 => 0xff,
                    _ => rng.next() as u8,
                };
            }
            if round % 7 != 0 {
                let length = copy.len();
                set_length_and_checksum(&mut copy, length);
            }
            if target_pptt {
                exercise(madt, Some(&copy));
            } else {
                exercise(&copy, *pptt);
            }
        }
        assert!(exercise(madt, *pptt), "{name}: the original still parses");
    }
}

#[test]
fn random_tables_behind_valid_headers_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let signatures: [&[u8; 4]; 8] = [
        b"APIC", b"PPTT", b"FACP", b"SPCR", b"GTDT", b"XSDT", b"RSDT", b"RSD ",
    ];
    for round in 0..4000 {
        let length = 36 + rng.below(300);
        let mut bytes: Vec<u8> = (0..length).map(|_| rng.next() as u8).collect();
        bytes[..4].copy_from_slice(signatures[round % signatures.len()]);
        // Entries with small lengths are the interesting case for the walks.
        if round % 2 == 0 {
            for index in (44..length).step_by(7) {
                bytes[index] = (rng.below(12)) as u8;
            }
        }
        fix_checksum(&mut bytes);
        if Madt::parse(&bytes).is_ok() {
            exercise(&bytes, None);
        }
        if let Ok(pptt) = Pptt::parse(&bytes) {
            for node in &pptt.nodes {
                let _ = pptt.position(node.acpi_processor_id);
            }
        }
        let _ = Fadt::parse(&bytes);
        let _ = Spcr::parse(&bytes);
        let _ = Gtdt::parse(&bytes);
        let _ = root_table_entries(&bytes);
        let _ = Rsdp::parse(&bytes);
        let mut rsdp = bytes.clone();
        rsdp[..8].copy_from_slice(b"RSD PTR ");
        let _ = Rsdp::parse(&rsdp);
        let _ = Rsdp::scan(&rsdp);
        let _ = Rsdp::scan(&bytes);
    }
}

#[test]
fn random_acpidump_text_never_panics() {
    let mut rng = Rng(0xfeed_f00d_dead_beef);
    let alphabet = b"APIC @ 0x0123456789abcdefABCDEF:  \n\n    0000: ";
    for _ in 0..3000 {
        let length = rng.below(200);
        let text: String = (0..length)
            .map(|_| alphabet[rng.below(alphabet.len())] as char)
            .collect();
        let _ = parse_acpidump(&text);
        let _ = parse_acpidump(&format!("APIC @ 0x0\n    0000: {text}"));
    }
}
