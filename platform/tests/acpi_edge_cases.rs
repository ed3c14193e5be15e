//! Bad and unusual ACPI input, synthetic tables, RSDP walking, the boot tables,
//! acpidump text and the CPUID decoders.

use std::collections::BTreeMap;

use platform::acpi::{
    AcpiCpus, AcpiError, AcpiTables, AcpiTopologySource, AcpiWarning, ApicIdLayout, BootAcpi,
    CpuidError, CpuidObservation, Disagreement, Fadt, Gtdt, InterruptPolarity, InterruptTrigger,
    IsaRouteError, LevelType, Madt, MpidrFallbackReason, NoSmtReason, PhysicalMemory, Pptt, Rsdp,
    Signature, SmtEvidence, Spcr, UartKind, capacity_for_class, cross_check, decode_topology_level,
    infer_smt, is_acpidump, layout_from_amd, layout_from_legacy, layout_from_topology_levels,
    parse_acpidump, root_table_entries, write_topology_report,
};

const NXP_MADT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/acpi/arm-nxp-lx2160a-honeycomb.apic.dat"
));
const QCOM_PPTT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/acpi/arm-qcom-8cx-surface-pro-x.pptt.dat"
));

/// A table with a correct header length and checksum.
fn table(signature: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(signature);
    bytes.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
    bytes.push(revision);
    bytes.push(0);
    bytes.extend_from_slice(b"TESTOE");
    bytes.extend_from_slice(b"TESTTABL");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(b"TEST");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(body);
    fix_checksum(&mut bytes);
    bytes
}

fn fix_checksum(bytes: &mut [u8]) {
    bytes[9] = 0;
    let sum = bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[9] = 0u8.wrapping_sub(sum);
}

fn madt(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = vec![0u8; 8];
    for entry in entries {
        body.extend_from_slice(entry);
    }
    table(b"APIC", 5, &body)
}

/// An 80-byte GICC (76 bytes, ACPI 5.1, when `class` is `None`).
fn gicc(uid: u32, mpidr: u64, flags: u32, class: Option<u8>) -> Vec<u8> {
    let mut e = vec![0u8; 80];
    e[0] = 0xb;
    e[1] = 80;
    e[8..12].copy_from_slice(&uid.to_le_bytes());
    e[12..16].copy_from_slice(&flags.to_le_bytes());
    e[56..60].copy_from_slice(&25u32.to_le_bytes());
    e[68..76].copy_from_slice(&mpidr.to_le_bytes());
    match class {
        Some(class) => e[76] = class,
        None => {
            e.truncate(76);
            e[1] = 76;
        }
    }
    e
}

fn local_apic(uid: u8, id: u8, flags: u32) -> Vec<u8> {
    let mut e = vec![0, 8, uid, id];
    e.extend_from_slice(&flags.to_le_bytes());
    e
}

fn x2apic(uid: u32, id: u32, flags: u32) -> Vec<u8> {
    let mut e = vec![9, 16, 0, 0];
    e.extend_from_slice(&id.to_le_bytes());
    e.extend_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&uid.to_le_bytes());
    e
}

fn io_apic(id: u8, address: u32, gsi_base: u32) -> Vec<u8> {
    let mut e = vec![1, 12, id, 0];
    e.extend_from_slice(&address.to_le_bytes());
    e.extend_from_slice(&gsi_base.to_le_bytes());
    e
}

fn source_override(source: u8, gsi: u32, flags: u16) -> Vec<u8> {
    let mut e = vec![2, 10, 0, source];
    e.extend_from_slice(&gsi.to_le_bytes());
    e.extend_from_slice(&flags.to_le_bytes());
    e
}

/// A PPTT of processor nodes `(flags, parent index, uid)`, 20 bytes each.
fn pptt(revision: u8, nodes: &[(u32, Option<usize>, u32)]) -> Vec<u8> {
    let mut body = Vec::new();
    for &(flags, parent, uid) in nodes {
        body.extend_from_slice(&[0, 20, 0, 0]);
        body.extend_from_slice(&flags.to_le_bytes());
        let parent = parent.map_or(0, |p| 36 + 20 * p as u32);
        body.extend_from_slice(&parent.to_le_bytes());
        body.extend_from_slice(&uid.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
    }
    table(b"PPTT", revision, &body)
}

const PACKAGE: u32 = 1;
const ID_VALID: u32 = 2;
const THREAD: u32 = 4;
const LEAF: u32 = 8;

#[test]
fn bad_checksum_names_the_table() {
    let mut bytes = NXP_MADT.to_vec();
    bytes[100] = bytes[100].wrapping_add(0x10);
    let error = Madt::parse(&bytes).unwrap_err();
    assert!(matches!(
        error,
        AcpiError::BadChecksum {
            table: Signature::MADT,
            sum: 0x10
        }
    ));
    let message = error.to_string();
    assert!(
        message.contains("APIC") && message.contains("checksum"),
        "{message}"
    );
    let mut pptt = QCOM_PPTT.to_vec();
    pptt[50] = pptt[50].wrapping_add(1);
    assert!(
        Pptt::parse(&pptt)
            .unwrap_err()
            .to_string()
            .starts_with("PPTT: bad checksum")
    );
}

#[test]
fn truncated_table_and_truncated_entry_are_errors() {
    let error = Madt::parse(&NXP_MADT[..NXP_MADT.len() - 1]).unwrap_err();
    assert!(
        matches!(
            error,
            AcpiError::Truncated {
                table: Signature::MADT,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("truncated"));
    assert!(matches!(
        Madt::parse(&NXP_MADT[..20]),
        Err(AcpiError::TooShort { needed: 36, .. })
    ));
    // Cut the table in the middle of the second GICC (offset 0x2c + 80) and fix the
    // header so only the entry walk can notice.
    let cut = 0x2c + 80 + 30;
    let mut bytes = NXP_MADT[..cut].to_vec();
    bytes[4..8].copy_from_slice(&(cut as u32).to_le_bytes());
    fix_checksum(&mut bytes);
    let error = Madt::parse(&bytes).unwrap_err();
    assert_eq!(
        error,
        AcpiError::TruncatedEntry {
            table: Signature::MADT,
            offset: 0x2c + 80,
            entry_type: 0xb,
            length: 80,
            remaining: 30
        }
    );
    assert!(error.to_string().contains("offset 0x7c"), "{error}");
}

#[test]
fn unknown_entry_type_is_skipped_with_a_warning() {
    let bytes = madt(&[
        gicc(0, 0, 1, Some(0)),
        vec![0x7f, 6, 1, 2, 3, 4],
        gicc(1, 1, 1, Some(0)),
    ]);
    let parsed = Madt::parse(&bytes).unwrap();
    assert_eq!(parsed.giccs.len(), 2);
    assert_eq!(
        parsed.warnings,
        [AcpiWarning::UnknownEntry {
            table: Signature::MADT,
            offset: 44 + 80,
            entry_type: 0x7f
        }]
    );
    assert_eq!(
        parsed.warnings[0].to_string(),
        "APIC: unknown entry type 0x7f at offset 0x7c skipped"
    );
    let cpus = AcpiCpus::arm(&parsed, None).unwrap();
    assert_eq!(cpus.topology().unwrap().len(), 2);
    assert_eq!(cpus.warnings, parsed.warnings);
}

#[test]
fn entry_length_zero_or_one_is_an_error_not_a_hang() {
    for length in [0u8, 1] {
        let bytes = madt(&[gicc(0, 0, 1, Some(0)), vec![0xb, length, 0, 0]]);
        assert_eq!(
            Madt::parse(&bytes).unwrap_err(),
            AcpiError::ZeroLengthEntry {
                table: Signature::MADT,
                offset: 44 + 80,
                entry_type: 0xb,
                length
            }
        );
    }
    let bytes = pptt(2, &[(PACKAGE, None, 0)]);
    let mut bytes = [bytes, vec![0, 0]].concat();
    let length = bytes.len() as u32;
    bytes[4..8].copy_from_slice(&length.to_le_bytes());
    fix_checksum(&mut bytes);
    assert!(matches!(
        Pptt::parse(&bytes),
        Err(AcpiError::ZeroLengthEntry { offset: 56, .. })
    ));
}

#[test]
fn known_entry_shorter_than_its_fields_is_an_error() {
    let mut short = gicc(0, 0, 1, None);
    short.truncate(40);
    short[1] = 40;
    assert!(matches!(
        Madt::parse(&madt(&[short])),
        Err(AcpiError::EntryTooShort {
            entry_type: 0xb,
            length: 40,
            minimum: 76,
            offset: 44,
            ..
        })
    ));
    assert!(matches!(
        Madt::parse(&madt(&[vec![0, 6, 0, 0, 1, 0]])),
        Err(AcpiError::EntryTooShort {
            entry_type: 0,
            minimum: 8,
            ..
        })
    ));
}

#[test]
fn pptt_parent_cycles_are_detected_and_the_mpidr_fallback_is_used() {
    // Two cluster nodes that are each other's parent, a leaf under one of them.
    let cyclic = pptt(
        2,
        &[
            (0, Some(1), 0),
            (0, Some(0), 0),
            (ID_VALID | LEAF, Some(0), 7),
        ],
    );
    let parsed = Pptt::parse(&cyclic).unwrap();
    assert_eq!(parsed.position(7), Err(AcpiError::PpttCycle { offset: 76 }));
    // A node that is its own parent.
    let selfish = pptt(2, &[(ID_VALID | LEAF, Some(0), 7)]);
    assert_eq!(
        Pptt::parse(&selfish).unwrap().position(7),
        Err(AcpiError::PpttCycle { offset: 36 })
    );
    let madt = Madt::parse(&madt(&[gicc(7, 0x100, 1, Some(0))])).unwrap();
    let cpus = AcpiCpus::arm(&madt, Some(&parsed)).unwrap();
    assert_eq!(
        cpus.source,
        AcpiTopologySource::Mpidr {
            reason: MpidrFallbackReason::PpttUnusable,
            aff0_unused: false
        }
    );
    assert_eq!(
        cpus.warnings,
        [AcpiWarning::PpttUnusable {
            reason: AcpiError::PpttCycle { offset: 76 }
        }]
    );
    assert!(cpus.warnings[0].to_string().contains("cycle"));
}

#[test]
fn pptt_bad_parent_and_missing_processor() {
    let dangling = pptt(2, &[(PACKAGE, None, 0), (ID_VALID | LEAF, Some(5), 3)]);
    assert_eq!(
        Pptt::parse(&dangling).unwrap().position(3),
        Err(AcpiError::PpttBadParent {
            offset: 56,
            parent: 36 + 100
        })
    );
    let fine = pptt(2, &[(PACKAGE, None, 0), (ID_VALID | LEAF, Some(0), 3)]);
    let parsed = Pptt::parse(&fine).unwrap();
    assert_eq!(
        parsed.position(4),
        Err(AcpiError::PpttMissingProcessor { uid: 4 })
    );
    // A GICC the PPTT does not know makes the whole PPTT unusable (no half-PPTT topology).
    let madt = Madt::parse(&madt(&[gicc(3, 0, 1, None), gicc(4, 1, 1, None)])).unwrap();
    let cpus = AcpiCpus::arm(&madt, Some(&parsed)).unwrap();
    assert!(matches!(cpus.source, AcpiTopologySource::Mpidr { .. }));
    assert_eq!(
        cpus.warnings,
        [AcpiWarning::PpttUnusable {
            reason: AcpiError::PpttMissingProcessor { uid: 4 }
        }]
    );
}

#[test]
fn gicc_uids_sharing_a_pptt_leaf_make_the_pptt_unusable() {
    let parsed = Pptt::parse(&pptt(
        2,
        &[(PACKAGE, None, 0), (ID_VALID | LEAF, Some(0), 3)],
    ))
    .unwrap();
    let shared = Madt::parse(&madt(&[gicc(3, 0, 1, None), gicc(3, 1, 1, None)])).unwrap();
    let cpus = AcpiCpus::arm(&shared, Some(&parsed)).unwrap();
    assert_eq!(
        cpus.warnings,
        [AcpiWarning::PpttUnusable {
            reason: AcpiError::PpttSharedLeaf { uid: 3 }
        }]
    );
    assert_eq!(cpus.topology().unwrap().len(), 2);
    // An online-capable GICC the PPTT does not know does not spoil it.
    let hotplug = Madt::parse(&madt(&[gicc(3, 0, 1, None), gicc(9, 1, 0b1000, None)])).unwrap();
    let cpus = AcpiCpus::arm(&hotplug, Some(&parsed)).unwrap();
    assert_eq!(cpus.source, AcpiTopologySource::Pptt);
    assert!(cpus.warnings.is_empty());
}

#[test]
fn local_apic_address_override_replaces_the_32_bit_address() {
    let mut entry = vec![5, 12, 0, 0];
    entry.extend_from_slice(&0x1_fee0_0000u64.to_le_bytes());
    let mut bytes = madt(&[local_apic(0, 0, 1), entry]);
    bytes[36..40].copy_from_slice(&0xfee0_0000u32.to_le_bytes());
    bytes[40] = 1;
    let length = bytes.len();
    bytes[9] = 0;
    let sum = bytes[..length].iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[9] = 0u8.wrapping_sub(sum);
    let parsed = Madt::parse(&bytes).unwrap();
    assert_eq!(
        (parsed.local_apic_address, parsed.flags),
        (0x1_fee0_0000, 1)
    );
}

#[test]
fn pptt_threads_share_their_core() {
    // package / cluster / core / 2 threads, twice: 1 socket, 1 cluster, 2 cores x 2.
    let nodes = [
        (PACKAGE, None, 0),
        (0, Some(0), 0),
        (0, Some(1), 0),
        (ID_VALID | THREAD | LEAF, Some(2), 10),
        (ID_VALID | THREAD | LEAF, Some(2), 11),
        (0, Some(1), 0),
        (ID_VALID | THREAD | LEAF, Some(5), 12),
        (ID_VALID | THREAD | LEAF, Some(5), 13),
    ];
    let parsed = Pptt::parse(&pptt(2, &nodes)).unwrap();
    let entries: Vec<Vec<u8>> = (0..4)
        .map(|i| gicc(10 + i, u64::from(i) * 0x100, 1, Some(0)))
        .collect();
    let madt = Madt::parse(&madt(&entries)).unwrap();
    let cpus = AcpiCpus::arm(&madt, Some(&parsed)).unwrap();
    assert_eq!(cpus.source, AcpiTopologySource::Pptt);
    let topology = cpus.topology().unwrap();
    let positions: Vec<_> = topology
        .cpus()
        .iter()
        .map(|c| (c.socket, c.cluster, c.core, c.thread))
        .collect();
    assert_eq!(
        positions,
        [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 1, 1)]
    );
    let mut report = String::new();
    write_topology_report(&mut report, &cpus, &topology).unwrap();
    assert!(
        report.contains("      thread 1: cpu 1   mpidr 0x100"),
        "{report}"
    );
}

#[test]
fn disabled_online_capable_and_duplicate_processors() {
    let bytes = madt(&[
        local_apic(0, 0, 1),
        local_apic(1, 2, 0b10), // online-capable, not enabled
        local_apic(2, 0, 0),    // placeholder
        local_apic(3, 0, 1),    // duplicate id 0
        local_apic(4, 0xff, 1), // enabled with the invalid id
        x2apic(5, 0x100, 1),
    ]);
    let parsed = Madt::parse(&bytes).unwrap();
    let cpus = AcpiCpus::x86(&parsed, None).unwrap();
    assert_eq!(cpus.unusable_entries, 1);
    assert_eq!(
        cpus.warnings,
        [
            AcpiWarning::DuplicateId {
                offset: 44 + 24,
                id: 0
            },
            AcpiWarning::InvalidApicId {
                offset: 44 + 32,
                id: 0xff
            }
        ]
    );
    let topology = cpus.topology().unwrap();
    let ids: Vec<u64> = topology.cpus().iter().map(|c| c.hw_id).collect();
    assert_eq!(ids, [0, 0x100]);
    assert_eq!(
        cpus.source,
        AcpiTopologySource::NoSmtInfo(NoSmtReason::NoOddIds)
    );
    let mut report = String::new();
    write_topology_report(&mut report, &cpus, &topology).unwrap();
    assert!(
        report.contains("online-capable, not enabled: uid 0x1 apic 0x2"),
        "{report}"
    );
    assert!(report.contains("1 MADT processor entries neither enabled nor online-capable"));
    assert!(report.contains("one thread per core"), "{report}");
    // Nothing enabled at all.
    let none = Madt::parse(&madt(&[local_apic(0, 0, 0)])).unwrap();
    assert_eq!(
        AcpiCpus::x86(&none, None).unwrap_err(),
        AcpiError::NoUsableCpu {
            kind: "local APIC/x2APIC"
        }
    );
    let none = Madt::parse(&madt(&[gicc(0, 0, 0, None)])).unwrap();
    assert!(AcpiCpus::arm(&none, None).is_err());
    // GICC online capable is bit 3.
    let arm = Madt::parse(&madt(&[gicc(0, 0, 1, None), gicc(1, 1, 0b1000, None)])).unwrap();
    let cpus = AcpiCpus::arm(&arm, None).unwrap();
    assert_eq!(cpus.cpus.len(), 2);
    assert_eq!(cpus.topology().unwrap().len(), 1);
    // An MPIDR with bits outside the affinity fields.
    let bad = Madt::parse(&madt(&[gicc(0, 0, 1, None), gicc(1, 1 << 30, 1, None)])).unwrap();
    let cpus = AcpiCpus::arm(&bad, None).unwrap();
    assert!(matches!(
        cpus.warnings[..],
        [AcpiWarning::BadMpidr {
            mpidr: 0x4000_0000,
            ..
        }]
    ));
}

#[test]
fn efficiency_classes_map_to_ranked_capacities() {
    assert_eq!(capacity_for_class(&[0, 1], 0), Some(512));
    assert_eq!(capacity_for_class(&[0, 1], 1), Some(1024));
    let three: Vec<_> = [2, 5, 9]
        .iter()
        .map(|&c| capacity_for_class(&[2, 5, 9], c))
        .collect();
    assert_eq!(three, [Some(341), Some(682), Some(1024)]);
    assert_eq!(capacity_for_class(&[0, 1], 7), None);
    // Same class everywhere: no capacity. Missing on some: warning, no capacity.
    let same = Madt::parse(&madt(&[gicc(0, 0, 1, Some(3)), gicc(1, 1, 1, Some(3))])).unwrap();
    let cpus = AcpiCpus::arm(&same, None).unwrap();
    assert!(cpus.cpus.iter().all(|c| c.capacity.is_none()));
    let partial = Madt::parse(&madt(&[
        gicc(0, 0, 1, Some(1)),
        gicc(1, 1, 1, None),
        gicc(2, 2, 1, Some(0)),
    ]))
    .unwrap();
    let cpus = AcpiCpus::arm(&partial, None).unwrap();
    assert!(cpus.cpus.iter().all(|c| c.capacity.is_none()));
    assert_eq!(cpus.warnings, [AcpiWarning::PartialEfficiencyClass]);
}

#[test]
fn smt_inference_only_when_unambiguous() {
    assert_eq!(infer_smt(&[0, 1, 2, 3]), Err(NoSmtReason::Ambiguous));
    assert_eq!(
        infer_smt(&[0, 2, 1, 3]),
        Ok(SmtEvidence::SecondThreadsListedLast)
    );
    assert_eq!(infer_smt(&[0, 1, 4]), Ok(SmtEvidence::LoneEvenIds));
    assert_eq!(infer_smt(&[0, 1, 3]), Err(NoSmtReason::UnpairedOddId(3)));
    assert_eq!(infer_smt(&[0, 2, 4]), Err(NoSmtReason::NoOddIds));
    let ambiguous = Madt::parse(&madt(&[
        local_apic(0, 0, 1),
        local_apic(1, 1, 1),
        local_apic(2, 2, 1),
        local_apic(3, 3, 1),
    ]))
    .unwrap();
    let cpus = AcpiCpus::x86(&ambiguous, None).unwrap();
    let topology = cpus.topology().unwrap();
    assert_eq!(topology.counts().cores, 4);
    let mut report = String::new();
    write_topology_report(&mut report, &cpus, &topology).unwrap();
    assert!(
        report.contains("SMT cannot be told from the ids"),
        "{report}"
    );
}

#[test]
fn qemu_leaf_0b_values_give_smt_shift_1_and_core_shift_3() {
    // QEMU -smp 8,sockets=1,cores=4,threads=2, on the CPU with x2APIC id 5.
    let smt = decode_topology_level(1, 2, 0x100, 5).unwrap();
    assert_eq!(smt.level_type, LevelType::Smt);
    assert_eq!(
        (smt.shift, smt.logical_processors, smt.x2apic_id),
        (1, 2, 5)
    );
    let core = decode_topology_level(3, 8, 0x201, 5).unwrap();
    assert_eq!(
        (core.level_type, core.shift, core.logical_processors),
        (LevelType::Core, 3, 8)
    );
    assert_eq!(decode_topology_level(0, 0, 2, 5), None);
    let layout = layout_from_topology_levels(&[smt, core]).unwrap();
    assert_eq!(layout, ApicIdLayout::new(1, 3).unwrap());
    let fields = layout.split(5);
    assert_eq!(
        (fields.package, fields.cluster, fields.core, fields.thread),
        (0, 0, 2, 1)
    );
    assert_eq!(layout.split(9).package, 1);
}

#[test]
fn leaf_1f_module_level_becomes_the_cluster() {
    let levels = [
        decode_topology_level(1, 2, 0x100, 0).unwrap(),
        decode_topology_level(3, 8, 0x201, 0).unwrap(),
        decode_topology_level(6, 32, 0x302, 0).unwrap(),
    ];
    assert_eq!(levels[2].level_type, LevelType::Module);
    let layout = layout_from_topology_levels(&levels).unwrap();
    assert_eq!(
        (layout.smt_shift, layout.cluster_shift, layout.core_shift),
        (1, Some(3), 6)
    );
    let fields = layout.split(0b101_101);
    assert_eq!(
        (fields.package, fields.cluster, fields.core, fields.thread),
        (0, 5, 2, 1)
    );
    assert_eq!(layout_from_topology_levels(&[]), Err(CpuidError::NoLevels));
    let backwards = [levels[1], levels[0]];
    assert_eq!(
        layout_from_topology_levels(&backwards),
        Err(CpuidError::ShiftsOutOfOrder { level: 0 })
    );
}

#[test]
fn amd_and_legacy_layouts() {
    // ApicIdCoreIdSize 4, 2 threads per core.
    assert_eq!(
        layout_from_amd(0x400f, Some(0x0100)),
        ApicIdLayout::new(1, 4).unwrap()
    );
    // ApicIdCoreIdSize 0: NC + 1 = 6 logical → 3 bits; no 0x8000001E: no SMT.
    assert_eq!(
        layout_from_amd(0x0005, None),
        ApicIdLayout::new(0, 3).unwrap()
    );
    // 16 logical per package (leaf 1 EBX 23:16), 8 cores (leaf 4 EAX 31:26 = 7).
    assert_eq!(
        layout_from_legacy(16 << 16, 7 << 26),
        ApicIdLayout::new(1, 4).unwrap()
    );
    assert!(ApicIdLayout::new(3, 2).is_none());
    assert!(ApicIdLayout::new(1, 33).is_none());
    assert!(
        ApicIdLayout::new(1, 4)
            .unwrap()
            .with_cluster_shift(5)
            .is_none()
    );
    // Extreme layouts never overflow.
    let wide = ApicIdLayout {
        smt_shift: 40,
        core_shift: 99,
        cluster_shift: Some(7),
    };
    let _ = wide.split(u32::MAX);
    let full = ApicIdLayout::new(32, 32).unwrap().split(u32::MAX);
    assert_eq!((full.package, full.core, full.thread), (0, 0, u32::MAX));
}

#[test]
fn cross_check_lists_every_disagreement() {
    let layout = ApicIdLayout::new(1, 3);
    let other = ApicIdLayout::new(1, 4);
    let seen = |madt_apic_id, cpuid_apic_id, layout| CpuidObservation {
        madt_apic_id,
        cpuid_apic_id,
        layout,
    };
    assert!(cross_check(&[0, 1], &[seen(0, 0, layout), seen(1, 1, layout)]).is_empty());
    let found = cross_check(
        &[0, 1, 2, 3],
        &[
            seen(0, 0, layout),
            seen(1, 9, layout),
            seen(2, 2, other),
            seen(3, 2, layout),
        ],
    );
    assert_eq!(
        found,
        [
            Disagreement::IdMismatch {
                madt_apic_id: 1,
                cpuid_apic_id: 9
            },
            Disagreement::NotInMadt { cpuid_apic_id: 9 },
            Disagreement::LayoutDiffers {
                cpuid_apic_id: 2,
                layout: other.unwrap(),
                first: layout.unwrap()
            },
            Disagreement::IdMismatch {
                madt_apic_id: 3,
                cpuid_apic_id: 2
            },
            Disagreement::ReportedTwice { cpuid_apic_id: 2 },
            Disagreement::Silent { madt_apic_id: 1 },
            Disagreement::Silent { madt_apic_id: 3 },
        ]
    );
    assert!(found.iter().all(|d| !d.to_string().is_empty()));
}

/// Physical memory for the RSDP walk: a few regions.
#[derive(Default)]
struct Memory(BTreeMap<u64, Vec<u8>>);

impl PhysicalMemory for Memory {
    fn read(&mut self, address: u64, buffer: &mut [u8]) -> bool {
        for (&base, bytes) in &self.0 {
            if address >= base
                && let Some(source) = bytes.get((address - base) as usize..)
                && let Some(source) = source.get(..buffer.len())
            {
                buffer.copy_from_slice(source);
                return true;
            }
        }
        false
    }
}

fn rsdp(revision: u8, rsdt: u32, xsdt: u64) -> Vec<u8> {
    let mut bytes = b"RSD PTR ".to_vec();
    bytes.push(0);
    bytes.extend_from_slice(b"TESTOE");
    bytes.push(revision);
    bytes.extend_from_slice(&rsdt.to_le_bytes());
    let sum = bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    bytes[8] = 0u8.wrapping_sub(sum);
    if revision >= 2 {
        bytes.extend_from_slice(&36u32.to_le_bytes());
        bytes.extend_from_slice(&xsdt.to_le_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 0]);
        let sum = bytes.iter().fold(0u8, |a, &b| a.wrapping_add(b));
        bytes[32] = 0u8.wrapping_sub(sum);
    }
    bytes
}

#[test]
fn rsdp_v2_walks_the_xsdt_and_checks_checksums_on_use() {
    let mut memory = Memory::default();
    let madt_bytes = NXP_MADT.to_vec();
    let mut broken_pptt = QCOM_PPTT.to_vec();
    broken_pptt[40] ^= 1;
    memory.0.insert(0x1000, rsdp(2, 0, 0x2000));
    let mut xsdt_body = Vec::new();
    for address in [0x3000u64, 0x8000, 0x9_0000] {
        xsdt_body.extend_from_slice(&address.to_le_bytes());
    }
    memory.0.insert(0x2000, table(b"XSDT", 1, &xsdt_body));
    memory.0.insert(0x3000, madt_bytes.clone());
    memory.0.insert(0x8000, broken_pptt);
    let tables = AcpiTables::load(&mut memory, 0x1000).unwrap();
    // 0x90000 is not readable: recorded, the walk went on.
    assert_eq!(
        tables.unreadable,
        [AcpiError::MemoryRead {
            table: Signature(*b"????"),
            address: 0x9_0000,
            length: 36
        }]
    );
    let found: Vec<(Signature, u64)> = tables.list().collect();
    assert_eq!(
        found,
        [(Signature::MADT, 0x3000), (Signature::PPTT, 0x8000)]
    );
    let madt = tables.get(Signature::MADT).unwrap().unwrap();
    assert_eq!(madt.bytes, &madt_bytes[..]);
    assert!(matches!(
        tables.get(Signature::PPTT),
        Err(AcpiError::BadChecksum {
            table: Signature::PPTT,
            ..
        })
    ));
    assert!(tables.get(Signature::GTDT).unwrap().is_none());
}

#[test]
fn rsdp_scan_finds_the_first_valid_pointer_on_a_16_byte_boundary() {
    let mut region = vec![0u8; 0x400];
    // A stale copy with a bad checksum, one off the 16-byte grid, then the real one.
    let mut stale = rsdp(2, 1, 0x2000);
    stale[8] ^= 1;
    region[0x40..0x40 + 36].copy_from_slice(&stale);
    region[0x101..0x101 + 36].copy_from_slice(&rsdp(2, 1, 0x3000));
    region[0x200..0x200 + 36].copy_from_slice(&rsdp(2, 1, 0x4000));
    let (offset, found) = Rsdp::scan(&region).unwrap();
    assert_eq!((offset, found.xsdt_address), (0x200, Some(0x4000)));
    assert_eq!(Rsdp::scan(&region[..0x200]), None);
    // A v1 RSDP in the last 20 bytes of the region.
    let mut end = vec![0u8; 0x40];
    end[0x2c..].copy_from_slice(&rsdp(0, 0x5000, 0));
    assert_eq!(Rsdp::scan(&end), None, "0x2c is not on the 16-byte grid");
    end = vec![0u8; 0x40];
    end[0x20..0x34].copy_from_slice(&rsdp(0, 0x5000, 0));
    assert_eq!(Rsdp::scan(&end[..0x34]).unwrap().1.rsdt_address, 0x5000);
}

#[test]
fn rsdp_v1_uses_the_rsdt_and_bad_rsdps_are_errors() {
    let mut memory = Memory::default();
    memory.0.insert(0xe0000, rsdp(0, 0x5000, 0));
    memory
        .0
        .insert(0x5000, table(b"RSDT", 1, &0x6000u32.to_le_bytes()));
    memory.0.insert(0x6000, NXP_MADT.to_vec());
    let tables = AcpiTables::load(&mut memory, 0xe0000).unwrap();
    assert!(tables.get(Signature::MADT).unwrap().is_some());
    let parsed = Rsdp::parse(&rsdp(0, 0x5000, 0)).unwrap();
    assert_eq!(parsed.root_table(), (Signature::RSDT, 0x5000));
    assert_eq!(
        Rsdp::parse(&rsdp(2, 1, 0x2000)).unwrap().root_table(),
        (Signature::XSDT, 0x2000)
    );
    let mut bad = rsdp(2, 1, 0x2000);
    bad[30] ^= 1;
    assert_eq!(
        Rsdp::parse(&bad),
        Err(AcpiError::BadRsdp {
            problem: "bad extended checksum"
        })
    );
    bad = rsdp(0, 1, 0);
    bad[17] ^= 1;
    assert!(
        Rsdp::parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("checksum")
    );
    assert!(Rsdp::parse(b"RSD PTX ").is_err());
    assert!(Rsdp::parse(&rsdp(2, 1, 2)[..30]).is_err());
    assert!(AcpiTables::load(&mut Memory::default(), 0).is_err());
    // A root table with a wrong signature, and a bad checksum.
    assert!(root_table_entries(NXP_MADT).is_err());
    let mut xsdt = table(b"XSDT", 1, &0x1234u64.to_le_bytes());
    assert_eq!(root_table_entries(&xsdt).unwrap(), [0x1234]);
    xsdt[40] ^= 1;
    assert!(matches!(
        root_table_entries(&xsdt),
        Err(AcpiError::BadChecksum { .. })
    ));
}

#[test]
fn fadt_gives_the_psci_conduit() {
    let mut body = vec![0u8; 276 - 36];
    body[112 - 36..116 - 36].copy_from_slice(&(1u32 << 20).to_le_bytes());
    body[129 - 36] = 0b11; // PSCI compliant, use HVC
    body[131 - 36] = 3;
    body[140 - 36..148 - 36].copy_from_slice(&0x8000_0000u64.to_le_bytes());
    let fadt = Fadt::parse(&table(b"FACP", 6, &body)).unwrap();
    assert!(fadt.psci_compliant() && fadt.psci_uses_hvc() && fadt.hardware_reduced());
    assert_eq!((fadt.minor_version, fadt.dsdt_address), (3, 0x8000_0000));
    body[129 - 36] = 0b01;
    let fadt = Fadt::parse(&table(b"FACP", 6, &body)).unwrap();
    assert!(fadt.psci_compliant() && !fadt.psci_uses_hvc());
    assert!(matches!(
        Fadt::parse(&table(b"FACP", 1, &[0; 40])),
        Err(AcpiError::TooShort { needed: 116, .. })
    ));
    assert!(matches!(
        Fadt::parse(NXP_MADT),
        Err(AcpiError::WrongSignature { .. })
    ));
}

#[test]
fn spcr_gives_the_console_uart() {
    let mut body = vec![0u8; 80 - 36];
    body[0] = 0x03; // PL011
    body[4] = 0; // memory space
    body[5] = 32;
    body[7] = 3; // dword access
    body[8..16].copy_from_slice(&0x1_0000_0000u64.to_le_bytes());
    body[52 - 36] = 8; // GIC interrupt
    body[54 - 36..58 - 36].copy_from_slice(&97u32.to_le_bytes());
    body[58 - 36] = 7;
    let spcr = Spcr::parse(&table(b"SPCR", 2, &body)).unwrap();
    assert_eq!(spcr.kind, UartKind::Pl011);
    assert_eq!(
        (spcr.base_address, spcr.gsi, spcr.baud_rate),
        (0x1_0000_0000, 97, Some(115_200))
    );
    assert!(spcr.is_mmio());
    assert!(spcr.interrupt_is_gic());
    assert_eq!(spcr.access_size, 3);
    body[0] = 0x0e;
    body[52 - 36] = 1; // a PC-AT 8259 IRQ: not a GIC INTID
    assert!(
        !Spcr::parse(&table(b"SPCR", 2, &body))
            .unwrap()
            .interrupt_is_gic()
    );
    body[58 - 36] = 0;
    let spcr = Spcr::parse(&table(b"SPCR", 2, &body)).unwrap();
    assert_eq!((spcr.kind, spcr.baud_rate), (UartKind::SbsaGeneric, None));
    assert!(Spcr::parse(&table(b"SPCR", 2, &body[..20])).is_err());
}

#[test]
fn gtdt_gives_the_el2_timer() {
    fn put_at(body: &mut [u8], offset: usize, value: u32) {
        body[offset - 36..offset - 32].copy_from_slice(&value.to_le_bytes());
    }
    let mut body = vec![0u8; 104 - 36];
    for (offset, value) in [
        (48, 29),
        (56, 30),
        (64, 27),
        (72, 26),
        (76, 0b10),
        (96, 28),
        (100, 0b1),
    ] {
        put_at(&mut body, offset, value);
    }
    let gtdt = Gtdt::parse(&table(b"GTDT", 3, &body)).unwrap();
    assert_eq!(
        (
            gtdt.secure_el1.gsiv,
            gtdt.non_secure_el1.gsiv,
            gtdt.virtual_el1.gsiv
        ),
        (29, 30, 27)
    );
    assert_eq!(gtdt.el2.gsiv, 26);
    assert!(gtdt.el2.active_low() && !gtdt.el2.edge_triggered());
    let virtual_el2 = gtdt.virtual_el2.unwrap();
    assert_eq!(virtual_el2.gsiv, 28);
    assert!(virtual_el2.edge_triggered());
    // Revision 3 with GSIV 0 (as on the Ampere Altra): not provided.
    put_at(&mut body, 96, 0);
    assert_eq!(
        Gtdt::parse(&table(b"GTDT", 3, &body)).unwrap().virtual_el2,
        None
    );
    // Revision 2 (96 bytes): no EL2 virtual timer.
    assert_eq!(
        Gtdt::parse(&table(b"GTDT", 2, &body[..60]))
            .unwrap()
            .virtual_el2,
        None
    );
    assert!(matches!(
        Gtdt::parse(&table(b"GTDT", 2, &body[..40])),
        Err(AcpiError::TooShort { needed: 80, .. })
    ));
}

/// Formats tables the way `acpidump` does.
fn acpidump(tables: &[(&str, u64, &[u8])]) -> String {
    let mut text = String::new();
    for (name, address, bytes) in tables {
        text += &format!("{name} @ 0x{address:016x}\n");
        for (row, chunk) in bytes.chunks(16).enumerate() {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02X}")).collect();
            let ascii: String = chunk
                .iter()
                .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
                .collect();
            text += &format!("    {:04X}: {:<47}  {ascii}\n", row * 16, hex.join(" "));
        }
        text += "\n";
    }
    text
}

#[test]
fn acpidump_text_round_trips() {
    let text = acpidump(&[
        ("APIC", 0xf000_0000, NXP_MADT),
        ("PPTT", 0xf001_0000, QCOM_PPTT),
    ]);
    assert!(is_acpidump(&text));
    assert!(!is_acpidump("hello\nworld"));
    let tables = parse_acpidump(&format!("# comment line\n{text}")).unwrap();
    assert_eq!(tables.len(), 2);
    assert_eq!(
        (tables[0].name.as_str(), tables[0].address),
        ("APIC", 0xf000_0000)
    );
    assert_eq!(tables[0].bytes, NXP_MADT);
    assert_eq!(tables[1].bytes, QCOM_PPTT);
    // A missing line breaks the offsets; a bad byte is named by its line.
    let broken: String = text
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    assert_eq!(
        parse_acpidump(&broken),
        Err(AcpiError::Acpidump {
            line: 4,
            problem: "offset does not follow the previous line"
        })
    );
    let bad = text.replacen("    0000: 41", "    0000: 4G", 1);
    assert_eq!(
        parse_acpidump(&bad),
        Err(AcpiError::Acpidump {
            line: 2,
            problem: "bad hex byte"
        })
    );
}

#[test]
fn boot_acpi_needs_only_the_madt_and_records_the_rest() {
    let mut fadt_body = vec![0u8; 276 - 36];
    fadt_body[129 - 36] = 0b11;
    let fadt = table(b"FACP", 6, &fadt_body);
    let mut bad_pptt = QCOM_PPTT.to_vec();
    bad_pptt[40] ^= 1;
    let short_spcr = table(b"SPCR", 2, &[3, 0, 0, 0]);
    let tables = AcpiTables::from_tables([fadt, bad_pptt, short_spcr, NXP_MADT.to_vec()]);
    let boot = BootAcpi::from_tables(&tables, None).unwrap();
    assert!(boot.fadt.unwrap().psci_uses_hvc());
    assert_eq!((boot.console, boot.timer), (None, None));
    assert!(matches!(
        boot.problems[..],
        [
            AcpiError::BadChecksum {
                table: Signature::PPTT,
                ..
            },
            AcpiError::TooShort {
                table: Signature::SPCR,
                needed: 80,
                ..
            }
        ]
    ));
    assert_eq!(
        boot.cpus.source,
        AcpiTopologySource::Mpidr {
            reason: MpidrFallbackReason::NoPptt,
            aff0_unused: false
        }
    );
    assert_eq!(boot.cpus.topology().unwrap().counts().clusters, 8);
    assert_eq!(boot.madt.giccs.len(), 16);
    // Without a MADT, or with a broken one, there is nothing to boot.
    let none = AcpiTables::from_tables([QCOM_PPTT.to_vec()]);
    assert_eq!(
        BootAcpi::from_tables(&none, None).unwrap_err(),
        AcpiError::MissingTable {
            table: Signature::MADT
        }
    );
    let mut broken = NXP_MADT.to_vec();
    broken[50] ^= 4;
    let broken = AcpiTables::from_tables([broken]);
    assert!(matches!(
        BootAcpi::from_tables(&broken, None),
        Err(AcpiError::BadChecksum {
            table: Signature::MADT,
            ..
        })
    ));
}

/// [`gicc`] with its GICR base address (offset 60).
fn gicc_with_gicr(uid: u32, mpidr: u64, flags: u32, gicr: u64) -> Vec<u8> {
    let mut e = gicc(uid, mpidr, flags, Some(0));
    e[60..68].copy_from_slice(&gicr.to_le_bytes());
    e
}

/// A GICD entry (type 0xC) of this GIC version.
fn gicd(base: u64, version: u8) -> Vec<u8> {
    let mut e = vec![0u8; 24];
    e[0] = 0xc;
    e[1] = 24;
    e[8..16].copy_from_slice(&base.to_le_bytes());
    e[20] = version;
    e
}

#[test]
fn redistributors_from_gicc_entries_merge_and_skip_disabled_cpus() {
    // Four CPUs with back-to-back 128 KiB GICv3 redistributors, one more far
    // away, and a disabled CPU whose frame must not be used.
    let bytes = madt(&[
        gicd(0x800_0000, 3),
        gicc_with_gicr(0, 0x0, 1, 0x80a_0000),
        gicc_with_gicr(1, 0x1, 1, 0x80c_0000),
        gicc_with_gicr(2, 0x2, 1, 0x80e_0000),
        gicc_with_gicr(3, 0x3, 1, 0x810_0000),
        gicc_with_gicr(4, 0x100, 1, 0x900_0000),
        gicc_with_gicr(5, 0x101, 0, 0x902_0000),
    ]);
    let madt = Madt::parse(&bytes).unwrap();
    assert_eq!(
        madt.redistributor_regions(),
        [(0x80a_0000, 0x8_0000), (0x900_0000, 0x2_0000)]
    );
}

#[test]
fn gicv4_redistributors_from_gicc_entries_are_256_kib() {
    let bytes = madt(&[
        gicd(0x800_0000, 4),
        gicc_with_gicr(0, 0x0, 1, 0x80a_0000),
        gicc_with_gicr(1, 0x1, 1, 0x80e_0000),
    ]);
    let madt = Madt::parse(&bytes).unwrap();
    assert_eq!(madt.redistributor_regions(), [(0x80a_0000, 0x8_0000)]);
}

#[test]
fn a_gicc_with_enabled_clear_is_not_a_cpu_but_online_capable_is_kept_disabled() {
    let bytes = madt(&[
        gicd(0x800_0000, 3),
        gicc_with_gicr(0, 0x0, 1, 0x80a_0000),
        gicc_with_gicr(1, 0x1, 0, 0x80c_0000),
        gicc_with_gicr(2, 0x2, 1 << 3, 0x80e_0000),
        gicc_with_gicr(3, 0x3, 1, 0x810_0000),
    ]);
    let madt = Madt::parse(&bytes).unwrap();
    let cpus = AcpiCpus::arm(&madt, None).unwrap();
    let ids: Vec<(u64, bool)> = cpus.cpus.iter().map(|c| (c.hw_id, c.enabled)).collect();
    assert_eq!(ids, [(0x0, true), (0x2, false), (0x3, true)]);
    assert_eq!(cpus.unusable_entries, 1);
    let topology = cpus.topology().unwrap();
    assert_eq!(topology.enabled().len(), 2);
}

#[test]
fn isa_irq_routes_follow_overrides_and_gsi_bases() {
    let cpu = local_apic(0, 0, 1);
    // No I/O APIC at all: only polling is left.
    let bare = Madt::parse(&madt(std::slice::from_ref(&cpu))).unwrap();
    assert_eq!(bare.isa_irq(4), Err(IsaRouteError::NoIoApic));
    // IRQ 4 moved to GSI 40 (active low, level) on the second of two I/O
    // APICs, listed out of order; the first override for a source wins.
    let two = Madt::parse(&madt(&[
        cpu.clone(),
        io_apic(9, 0xfec1_0000, 24),
        io_apic(8, 0xfec0_0000, 0),
        source_override(4, 40, 0b1111),
        source_override(4, 5, 0),
        source_override(3, 3, 0b0110),
    ]))
    .unwrap();
    let com1 = two.isa_irq(4).unwrap();
    assert_eq!((com1.gsi, com1.io_apic.id, com1.pin), (40, 9, 16));
    assert_eq!(com1.polarity, InterruptPolarity::ActiveLow);
    assert_eq!(com1.trigger, InterruptTrigger::Level);
    assert!(com1.overridden && !com1.reserved_flags);
    // Reserved encodings (polarity 0b10, trigger 0b01 here: 0b0110) keep
    // the ISA default where reserved and say so.
    let com2 = two.isa_irq(3).unwrap();
    assert!(com2.reserved_flags);
    assert_eq!(com2.polarity, InterruptPolarity::ActiveHigh);
    assert_eq!(com2.trigger, InterruptTrigger::Edge);
    assert_eq!((com2.io_apic.id, com2.pin), (8, 3));
    // Without an override IRQ n is GSI n.
    assert_eq!(two.isa_irq(7).unwrap().gsi, 7);
    // An I/O APIC whose GSI base is above the IRQ's GSI cannot take it.
    let high = Madt::parse(&madt(&[cpu, io_apic(1, 0xfec0_0000, 16)])).unwrap();
    assert_eq!(
        high.isa_irq(4),
        Err(IsaRouteError::NoIoApicForGsi { irq: 4, gsi: 4 })
    );
}
