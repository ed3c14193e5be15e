//! The real MADT/PPTT fixtures give the topologies their README and `.dsl` decodes
//! describe (expected values below come from those files, not from this parser).

use platform::acpi::{
    AcpiCpus, AcpiTopologySource, ApicIdLayout, CacheSharing, CpuArch, InterruptPolarity,
    InterruptTrigger, IsaRouteError, Madt, MpidrFallbackReason, NoSmtReason, Pptt, SmtEvidence,
    describe_cpus, layout_from_amd, write_topology_report,
};
use platform::dt::ClassKind;
use sched::{CpuTopology, Topology};

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

const AMPERE_MADT: &[u8] = fixture!("arm-ampere-altra-ava.apic.dat");
const AMPERE_PPTT: &[u8] = fixture!("arm-ampere-altra-ava.pptt.dat");
const NXP_MADT: &[u8] = fixture!("arm-nxp-lx2160a-honeycomb.apic.dat");
const NXP_PPTT: &[u8] = fixture!("arm-nxp-lx2160a-honeycomb.pptt.dat");
const QCOM_MADT: &[u8] = fixture!("arm-qcom-8cx-surface-pro-x.apic.dat");
const QCOM_PPTT: &[u8] = fixture!("arm-qcom-8cx-surface-pro-x.pptt.dat");
const Z490: &[u8] = fixture!("x86-intel-asus-z490f.apic.dat");
const X570: &[u8] = fixture!("x86-amd-asrock-x570-taichi.apic.dat");
const THINKPAD: &[u8] = fixture!("x86-intel-hybrid-thinkpad-x1yoga-g8.apic.dat");
const CLAW: &[u8] = fixture!("x86-intel-hybrid-msi-claw-a1m-x2apic.apic.dat");
const R820: &[u8] = fixture!("x86-intel-4s-dell-r820.apic.dat");

fn arm(madt: &[u8], pptt: Option<&[u8]>) -> (AcpiCpus, Topology) {
    let madt = Madt::parse(madt).expect("MADT parses");
    let pptt = pptt.map(|p| Pptt::parse(p).expect("PPTT parses"));
    let cpus = AcpiCpus::arm(&madt, pptt.as_ref()).expect("CPUs");
    let topology = cpus.topology().expect("topology");
    (cpus, topology)
}

fn x86(madt: &[u8], layout: Option<ApicIdLayout>) -> (AcpiCpus, Topology) {
    let madt = Madt::parse(madt).expect("MADT parses");
    let cpus = AcpiCpus::x86(&madt, layout).expect("CPUs");
    let topology = cpus.topology().expect("topology");
    (cpus, topology)
}

fn cpu_with_id(topology: &Topology, hw_id: u64) -> CpuTopology {
    *topology
        .cpus()
        .iter()
        .find(|c| c.hw_id == hw_id)
        .unwrap_or_else(|| panic!("no CPU with id {hw_id:#x}"))
}

fn counts(topology: &Topology) -> (usize, usize, usize, usize) {
    let c = topology.counts();
    (c.sockets, c.clusters, c.cores, c.threads)
}

/// Aff2 values of the Ampere GICCs (from the .dsl), sorted.
const AMPERE_AFF2: [u64; 16] = [
    0x08, 0x09, 0x0e, 0x0f, 0x10, 0x11, 0x16, 0x17, 0x18, 0x19, 0x1e, 0x1f, 0x20, 0x21, 0x26, 0x27,
];

fn check_ampere(topology: &Topology) {
    assert_eq!(counts(topology), (1, 16, 32, 32));
    // MADT order: the first GICC is MPIDR 0x100000 (UID 0x1000), the 17th 0x100100.
    assert_eq!(topology.cpus()[0].hw_id, 0x10_0000);
    assert_eq!(topology.cpus()[16].hw_id, 0x10_0100);
    for (cluster, aff2) in AMPERE_AFF2.iter().enumerate() {
        for aff1 in 0..2u64 {
            let cpu = cpu_with_id(topology, (aff2 << 16) | (aff1 << 8));
            assert_eq!(
                (cpu.socket, cpu.cluster, cpu.core, cpu.thread),
                (0, cluster as u32, aff1 as u32, 0),
                "MPIDR {:#x}",
                cpu.hw_id
            );
            assert_eq!(cpu.capacity, None);
        }
    }
}

#[test]
fn ampere_madt_has_32_gicc_gicv3_gicr_and_8_its() {
    let madt = Madt::parse(AMPERE_MADT).unwrap();
    assert_eq!(madt.giccs.len(), 32);
    assert!(madt.giccs.iter().all(|g| g.flags.enabled));
    assert_eq!(madt.gic_version(), 3);
    assert_eq!(madt.gicds[0].base, 0x1001_0000_0000);
    assert_eq!(madt.gicrs.len(), 1);
    assert_eq!(madt.gicrs[0].base, 0x1001_0014_0000);
    assert_eq!(madt.its.len(), 8);
    let first = &madt.giccs[0];
    assert_eq!(
        (first.offset, first.processor_uid, first.mpidr),
        (0x2c, 0x1000, 0x10_0000)
    );
    assert_eq!(first.vgic_maintenance_gsiv, 0x19);
    assert_eq!(first.performance_gsiv, 0x17);
    assert_eq!(first.efficiency_class, Some(0));
    assert_eq!(first.spe_overflow_gsiv, Some(0x15));
    assert!(madt.warnings.is_empty(), "{:?}", madt.warnings);
    assert!(madt.local_apics.is_empty());
}

#[test]
fn ampere_pptt_places_the_32_cpus_of_the_160_leaf_table() {
    let pptt = Pptt::parse(AMPERE_PPTT).unwrap();
    let leaves = pptt.nodes.iter().filter(|n| pptt.is_leaf(n)).count();
    assert_eq!(leaves, 160);
    let (cpus, topology) = arm(AMPERE_MADT, Some(AMPERE_PPTT));
    assert_eq!(cpus.source, AcpiTopologySource::Pptt);
    assert!(cpus.warnings.is_empty(), "{:?}", cpus.warnings);
    check_ampere(&topology);
}

#[test]
fn ampere_without_pptt_uses_aff2_clusters() {
    let (cpus, topology) = arm(AMPERE_MADT, None);
    assert_eq!(
        cpus.source,
        AcpiTopologySource::Mpidr {
            reason: MpidrFallbackReason::NoPptt,
            aff0_unused: true
        }
    );
    check_ampere(&topology);
}

#[test]
fn nxp_lx2160a_has_8_clusters_of_2_with_or_without_pptt() {
    for pptt in [Some(NXP_PPTT), None] {
        let (cpus, topology) = arm(NXP_MADT, pptt);
        assert_eq!(cpus.arch, CpuArch::Arm);
        assert_eq!(counts(&topology), (1, 8, 16, 16), "pptt {}", pptt.is_some());
        for (index, cpu) in topology.cpus().iter().enumerate() {
            let mpidr = (((index / 2) as u64) << 8) | (index % 2) as u64;
            assert_eq!(cpu.hw_id, mpidr);
            assert_eq!(
                (cpu.cluster, cpu.core, cpu.thread),
                ((index / 2) as u32, (index % 2) as u32, 0)
            );
        }
        if pptt.is_some() {
            // The leaf flag is clear in this revision-1 table: leaves are found structurally.
            assert_eq!(cpus.source, AcpiTopologySource::Pptt);
        }
    }
}

#[test]
fn qcom_8cx_efficiency_classes_become_capacities() {
    for pptt in [Some(QCOM_PPTT), None] {
        let (_, topology) = arm(QCOM_MADT, pptt);
        assert_eq!(counts(&topology), (1, 1, 8, 8));
        assert!(topology.is_heterogeneous());
        for (index, cpu) in topology.cpus().iter().enumerate() {
            assert_eq!(cpu.hw_id, (index as u64) << 8);
            let expected = if index < 4 { 512 } else { 1024 };
            assert_eq!(cpu.capacity, Some(expected), "cpu {index}");
            assert_eq!(cpu.core, index as u32);
        }
    }
    let (cpus, topology) = arm(QCOM_MADT, Some(QCOM_PPTT));
    let mut report = String::new();
    write_topology_report(&mut report, &cpus, &topology).unwrap();
    assert!(report.contains("big.LITTLE"), "{report}");
    let line = |id: &str| {
        report
            .lines()
            .find(|l| l.contains(&format!("mpidr {id} ")))
            .unwrap_or_else(|| panic!("{report}"))
            .to_string()
    };
    assert!(line("0x0").ends_with(" LITTLE"), "{report}");
    assert!(line("0x700").ends_with(" big"), "{report}");
    // The classes the automatic pool layout splits on an ACPI boot.
    let classes: Vec<String> = cpus
        .cpu_classes(&topology)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        classes,
        [
            "big: CPUs 4-7, capacity 1024",
            "LITTLE: CPUs 0-3, capacity 512"
        ]
    );
    assert!(
        report.contains("big.LITTLE: LITTLE: CPUs 0-3, capacity 512\n"),
        "{report}"
    );
}

#[test]
fn z490_pairs_even_and_odd_ids() {
    for layout in [None, ApicIdLayout::new(1, 5)] {
        let (cpus, topology) = x86(Z490, layout);
        assert_eq!(counts(&topology), (1, 1, 10, 20));
        if layout.is_none() {
            assert_eq!(
                cpus.source,
                AcpiTopologySource::InferredSmt(SmtEvidence::SecondThreadsListedLast)
            );
        }
        for core in 0..10u64 {
            let first = cpu_with_id(&topology, 2 * core);
            let second = cpu_with_id(&topology, 2 * core + 1);
            assert_eq!(first.index, core as usize);
            assert_eq!(second.index, 10 + core as usize);
            assert_eq!((first.core, first.thread), (core as u32, 0));
            assert_eq!((second.core, second.thread), (core as u32, 1));
        }
    }
}

#[test]
fn x570_has_24_enabled_cpus_and_4_ccx_with_the_l3_layout() {
    let (cpus, topology) = x86(X570, None);
    // Every core has two threads: not hybrid, one class.
    assert_eq!(cpus.cpu_classes(&topology).len(), 1);
    assert_eq!(cpus.unusable_entries, 8);
    assert_eq!(counts(&topology), (1, 1, 12, 24));
    // Leaf 0x8000001D subleaf 3 EAX: unified L3 (type 3, level 3) shared by 8 ids.
    let l3 = CacheSharing::decode(0x0001_c063).unwrap();
    assert_eq!((l3.level, l3.cache_type, l3.logical_processors), (3, 3, 8));
    let layout = layout_from_amd(0x7017, Some(0x0100))
        .with_cluster_shift(l3.shift())
        .unwrap();
    assert_eq!((layout.smt_shift, layout.core_shift), (1, 7));
    let (_, topology) = x86(X570, Some(layout));
    assert_eq!(counts(&topology), (1, 4, 12, 24));
    for (ccx, base) in [0x00u64, 0x08, 0x10, 0x18].into_iter().enumerate() {
        for core in 0..3u64 {
            for thread in 0..2u64 {
                let cpu = cpu_with_id(&topology, base + 2 * core + thread);
                assert_eq!(
                    (cpu.cluster, cpu.core, cpu.thread),
                    (ccx as u32, core as u32, thread as u32)
                );
            }
        }
    }
}

/// The two classes of a hybrid part: the P-cores' threads (`p_cores` are
/// the first thread's APIC ids) big, the E-cores LITTLE.
fn check_hybrid_classes(cpus: &AcpiCpus, topology: &Topology, p_cores: &[u64], e_cores: &[u64]) {
    let classes = cpus.cpu_classes(topology);
    assert_eq!(classes.len(), 2, "{classes:?}");
    let indices = |ids: &mut dyn Iterator<Item = u64>| {
        let mut set: Vec<usize> = ids.map(|id| cpu_with_id(topology, id).index).collect();
        set.sort_unstable();
        set
    };
    let big = indices(&mut p_cores.iter().flat_map(|&id| [id, id + 1]));
    let little = indices(&mut e_cores.iter().copied());
    assert_eq!(classes[0].kind, ClassKind::Big);
    assert_eq!(classes[0].cpus.iter().collect::<Vec<_>>(), big);
    assert_eq!(classes[1].kind, ClassKind::Little);
    assert_eq!(classes[1].cpus.iter().collect::<Vec<_>>(), little);
}

fn check_hybrid(topology: &Topology, p_cores: &[u64], e_cores: &[u64]) {
    assert_eq!(
        counts(topology),
        (
            1,
            1,
            p_cores.len() + e_cores.len(),
            2 * p_cores.len() + e_cores.len()
        )
    );
    for &id in p_cores {
        let first = cpu_with_id(topology, id);
        let second = cpu_with_id(topology, id + 1);
        assert_eq!(first.core, second.core, "{id:#x}");
        assert_eq!((first.thread, second.thread), (0, 1));
    }
    for &id in e_cores {
        let cpu = cpu_with_id(topology, id);
        assert_eq!(cpu.thread, 0);
        assert_eq!(
            topology
                .cpus()
                .iter()
                .filter(|c| c.core == cpu.core)
                .count(),
            1,
            "E-core {id:#x} is alone on its core"
        );
    }
}

#[test]
fn thinkpad_hybrid_has_4_smt_p_cores_and_8_e_cores() {
    let (cpus, topology) = x86(THINKPAD, None);
    assert_eq!(
        cpus.source,
        AcpiTopologySource::InferredSmt(SmtEvidence::LoneEvenIds)
    );
    assert_eq!(cpus.unusable_entries, 16);
    let (p, e) = (
        [0x00, 0x08, 0x10, 0x18],
        [0x20, 0x22, 0x24, 0x26, 0x28, 0x2a, 0x2c, 0x2e],
    );
    check_hybrid(&topology, &p, &e);
    check_hybrid_classes(&cpus, &topology, &p, &e);
}

#[test]
fn msi_claw_x2apic_hybrid_has_22_cpus() {
    let madt = Madt::parse(CLAW).unwrap();
    assert_eq!(madt.local_apics.len(), 48);
    assert!(madt.local_apics.iter().all(|a| a.x2apic));
    let (cpus, topology) = x86(CLAW, None);
    assert_eq!(cpus.unusable_entries, 26);
    assert_eq!(
        cpus.source,
        AcpiTopologySource::InferredSmt(SmtEvidence::LoneEvenIds)
    );
    let (p, e) = (
        [0x10, 0x18, 0x20, 0x28, 0x30, 0x38],
        [0x0, 0x2, 0x4, 0x6, 0x8, 0xa, 0xc, 0xe, 0x40, 0x42],
    );
    check_hybrid(&topology, &p, &e);
    check_hybrid_classes(&cpus, &topology, &p, &e);
}

#[test]
fn dell_r820_has_4_sockets_with_the_cpuid_layout() {
    let (cpus, topology) = x86(R820, None);
    assert_eq!(cpus.unusable_entries, 16);
    // Without CPUID the package bits are unknown: one socket, SMT pairs only.
    assert_eq!(counts(&topology), (1, 1, 40, 80));
    // 10 cores need 4 id bits above the SMT bit: leaf 0xB core-level shift 5.
    let (_, topology) = x86(R820, ApicIdLayout::new(1, 5));
    assert_eq!(counts(&topology), (4, 4, 40, 80));
    // Entries are round-robin over the sockets.
    let sockets: Vec<u32> = topology.cpus()[..8].iter().map(|c| c.socket).collect();
    assert_eq!(sockets, [0, 1, 2, 3, 0, 1, 2, 3]);
    for socket in 0..4u64 {
        for core in [0u64, 1, 2, 3, 4, 8, 9, 10, 11, 12] {
            let first = cpu_with_id(&topology, (socket << 5) | (core << 1));
            let second = cpu_with_id(&topology, (socket << 5) | (core << 1) | 1);
            assert_eq!(
                (first.socket, second.socket),
                (socket as u32, socket as u32)
            );
            assert_eq!(first.core, second.core);
            assert_eq!((first.thread, second.thread), (0, 1));
        }
    }
}

#[test]
fn x86_madts_have_ioapics_and_overrides() {
    for bytes in [Z490, X570, THINKPAD, CLAW, R820] {
        let madt = Madt::parse(bytes).unwrap();
        assert!(!madt.io_apics.is_empty());
        assert!(madt.giccs.is_empty());
        assert!(madt.warnings.is_empty(), "{:?}", madt.warnings);
    }
    let z490 = Madt::parse(Z490).unwrap();
    // ISA IRQ 0 → GSI 2 is on every PC.
    assert!(z490.overrides.iter().any(|o| o.source == 0 && o.gsi == 2));
    assert!(!z490.local_apic_nmis.is_empty());
    assert_eq!(z490.local_apic_address, 0xfee0_0000);
}

#[test]
fn describe_cpus_picks_the_architecture() {
    let arm = describe_cpus(&Madt::parse(NXP_MADT).unwrap(), None, None).unwrap();
    assert_eq!(arm.arch, CpuArch::Arm);
    let x86 = describe_cpus(&Madt::parse(Z490).unwrap(), None, None).unwrap();
    assert_eq!(x86.arch, CpuArch::X86);
    assert!(!matches!(
        x86.source,
        AcpiTopologySource::NoSmtInfo(NoSmtReason::Ambiguous)
    ));
}

#[test]
fn ampere_redistributors_come_from_its_one_gicr_range() {
    // The .dsl decode: GICR base 0x100100140000, length 0x1000000; the GICCs'
    // own redistributor bases are 0 (to be ignored when a GICR entry exists).
    let madt = Madt::parse(AMPERE_MADT).unwrap();
    assert!(madt.giccs.iter().all(|g| g.gicr_base == 0));
    assert_eq!(
        madt.redistributor_regions(),
        [(0x1001_0014_0000, 0x100_0000)]
    );
}

#[test]
fn isa_irqs_route_through_the_real_overrides() {
    // x570.dsl: I/O APICs 0x19 at 0xFEC00000 (GSI 0) and 0x1A at 0xFEC01000
    // (GSI 0x18); overrides IRQ 0 -> GSI 2 (flags 0) and IRQ 9 -> GSI 9
    // (flags 0xF: active low, level).
    let x570 = Madt::parse(X570).unwrap();
    let com1 = x570.isa_irq(4).unwrap();
    assert_eq!((com1.gsi, com1.pin), (4, 4));
    assert_eq!((com1.io_apic.id, com1.io_apic.address), (0x19, 0xfec0_0000));
    assert_eq!(com1.polarity, InterruptPolarity::ActiveHigh);
    assert_eq!(com1.trigger, InterruptTrigger::Edge);
    assert!(!com1.overridden && !com1.reserved_flags);
    let timer = x570.isa_irq(0).unwrap();
    assert_eq!((timer.gsi, timer.pin, timer.overridden), (2, 2, true));
    assert_eq!(timer.trigger, InterruptTrigger::Edge);
    let sci = x570.isa_irq(9).unwrap();
    assert_eq!(sci.gsi, 9);
    assert_eq!(sci.polarity, InterruptPolarity::ActiveLow);
    assert_eq!(sci.trigger, InterruptTrigger::Level);
    // z490.dsl: IRQ 9 flags 0xD: active high, level.
    let z490 = Madt::parse(Z490).unwrap();
    let sci = z490.isa_irq(9).unwrap();
    assert_eq!(sci.polarity, InterruptPolarity::ActiveHigh);
    assert_eq!(sci.trigger, InterruptTrigger::Level);
    assert_eq!(z490.isa_irq(4).unwrap().pin, 4);
    // r820.dsl: five I/O APICs (GSI bases 0, 0x20, 0x40, 0x60, 0x80): the
    // ISA IRQs are all on the first.
    let r820 = Madt::parse(R820).unwrap();
    assert_eq!(r820.io_apics.len(), 5);
    let com1 = r820.isa_irq(4).unwrap();
    assert_eq!((com1.io_apic.address, com1.pin), (0xfec0_0000, 4));
    // The ARM MADTs have no I/O APIC.
    assert_eq!(
        Madt::parse(NXP_MADT).unwrap().isa_irq(4),
        Err(IsaRouteError::NoIoApic)
    );
}
