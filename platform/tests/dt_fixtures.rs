//! `platform::dt` against real device trees from `shared/fixtures` (see its README).
//! Expectations come from the README and the dtc decodes (`*.cpus.txt`) beside each blob.

use platform::dt::{
    self, DtWarning, EnableMethod, FallbackReason, GicVersion, InterruptKind, MachineDescription,
    MemoryRegion, PsciMethod, TopologySource,
};
use sched::{Granularity, Topology};

macro_rules! fixture {
    ($path:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/",
            $path
        ))
        .as_slice()
    };
}

const RPI4: &[u8] = fixture!("dtb/bcm2711-rpi-4-b.dtb");
const RK3399: &[u8] = fixture!("dtb/rk3399-rockpro64.dtb");
const JUNO: &[u8] = fixture!("dtb/juno-r2.dtb");
const RK3588: &[u8] = fixture!("dtb/rk3588-rock-5b.dtb");
const HIP07: &[u8] = fixture!("dtb/hip07-d05.dtb");
const VIRT_SMP8: &[u8] = fixture!("qemu/qemu-virt-smp8.dtb");
const VIRT_SMT: &[u8] = fixture!("qemu/qemu-virt-smp16-smt.dtb");
const RASPI4B: &[u8] = fixture!("qemu/qemu-raspi4b-from-debian-dtb.dtb");

fn load(blob: &[u8]) -> (MachineDescription, Topology) {
    let description = dt::parse(blob).expect("fixture parses");
    let topology = description
        .topology()
        .expect("fixture converts to a topology");
    (description, topology)
}

/// `(socket, cluster, core, thread)` of every CPU, by index.
fn positions(topology: &Topology) -> Vec<(u32, u32, u32, u32)> {
    topology
        .cpus()
        .iter()
        .map(|c| (c.socket, c.cluster, c.core, c.thread))
        .collect()
}

fn hw_ids(topology: &Topology) -> Vec<u64> {
    topology.cpus().iter().map(|c| c.hw_id).collect()
}

fn region(base: u64, size: u64) -> MemoryRegion {
    MemoryRegion { base, size }
}

#[test]
fn rpi4_is_one_cluster_of_four_spin_table_cpus() {
    let (description, topology) = load(RPI4);
    assert_eq!(hw_ids(&topology), [0, 1, 2, 3]);
    assert_eq!(
        positions(&topology),
        [(0, 0, 0, 0), (0, 0, 1, 0), (0, 0, 2, 0), (0, 0, 3, 0)]
    );
    assert!(
        topology
            .cpus()
            .iter()
            .all(|c| c.capacity.is_none() && c.enabled)
    );
    assert_eq!(
        description.topology_source,
        TopologySource::MpidrFallback {
            reason: FallbackReason::NoCpuMap
        }
    );
    // cpu-release-addr = <0x00 0xd8>, <0x00 0xe0>, <0x00 0xe8>, <0x00 0xf0>
    let releases: Vec<_> = description
        .cpus
        .iter()
        .map(|c| c.enable_method.clone())
        .collect();
    assert_eq!(
        releases,
        [0xd8, 0xe0, 0xe8, 0xf0].map(|release_address| EnableMethod::SpinTable { release_address })
    );
    assert_eq!(description.cpus[2].path, "/cpus/cpu@2");
    assert_eq!(
        description.cpus[2].compatible.as_deref(),
        Some("arm,cortex-a72")
    );
}

#[test]
fn rpi4_devices_are_translated_through_soc_ranges() {
    let (description, _) = load(RPI4);
    // /soc ranges maps 0x40000000 -> 0xff800000 and 0x7e000000 -> 0xfe000000.
    let gic = description.gic.clone().expect("gic-400");
    assert_eq!(gic.compatible, "arm,gic-400");
    assert_eq!(gic.version, GicVersion::V2);
    assert_eq!(gic.path, "/soc/interrupt-controller@40041000");
    assert_eq!(gic.distributor(), Some(region(0xff84_1000, 0x1000)));
    assert_eq!(gic.cpu_interface(), Some(region(0xff84_2000, 0x2000)));
    assert_eq!(
        gic.hypervisor_interface(),
        Some(region(0xff84_4000, 0x2000))
    );
    assert_eq!(
        gic.virtual_cpu_interface(),
        Some(region(0xff84_6000, 0x2000))
    );
    assert!(gic.redistributors().is_empty());
    // stdout-path = "serial1:115200n8"; serial1 = "/soc/serial@7e215040" (the mini UART).
    let console = description.console.clone().expect("console");
    assert_eq!(console.path, "/soc/serial@7e215040");
    assert_eq!(console.compatible, ["brcm,bcm2835-aux-uart"]);
    assert_eq!(console.region, region(0xfe21_5040, 0x40));
    assert_eq!(console.options.as_deref(), Some("115200n8"));
    // /memreserve/ 0x0 0x1000
    assert_eq!(description.reserved[0].region, region(0, 0x1000));
    assert_eq!(description.reserved[0].path, None);
    // memory@0 has reg = <0 0 0>: filled in by the firmware.
    assert!(description.memory.is_empty());
    assert!(
        description
            .warnings
            .contains(&DtWarning::EmptyMemoryRegion {
                path: "/memory@0".into()
            })
    );
    assert!(description.warnings.contains(&DtWarning::NoMemoryNode));
    assert_eq!(description.check_bootable(), Err(dt::DtError::NoMemory));
    // No /psci and no CPU needs it.
    assert!(description.psci.is_none());
    assert!(!description.warnings.contains(&DtWarning::PsciMissing));
}

#[test]
fn raspi4b_from_qemu_has_memory_and_same_cpus() {
    let (description, topology) = load(RASPI4B);
    assert_eq!(hw_ids(&topology), [0, 1, 2, 3]);
    assert_eq!(positions(&topology), positions(&load(RPI4).1));
    // memory@0 { reg = <0x00 0x00 0x3c000000>; }
    assert_eq!(description.memory, [region(0, 0x3c00_0000)]);
    assert_eq!(description.check_bootable(), Ok(()));
}

#[test]
fn rk3399_is_big_little_with_two_clusters() {
    let (description, topology) = load(RK3399);
    assert_eq!(description.topology_source, TopologySource::CpuMap);
    assert_eq!(hw_ids(&topology), [0x0, 0x1, 0x2, 0x3, 0x100, 0x101]);
    assert_eq!(
        positions(&topology),
        [
            (0, 0, 0, 0),
            (0, 0, 1, 0),
            (0, 0, 2, 0),
            (0, 0, 3, 0),
            (0, 1, 0, 0),
            (0, 1, 1, 0)
        ]
    );
    let capacities: Vec<_> = topology.cpus().iter().map(|c| c.capacity).collect();
    assert_eq!(
        capacities,
        [Some(485); 4]
            .into_iter()
            .chain([Some(1024); 2])
            .collect::<Vec<_>>()
    );
    assert!(topology.is_heterogeneous());
    assert_eq!(
        topology
            .groups(&topology.enabled(), Granularity::Cluster)
            .len(),
        2
    );
    assert!(
        description
            .cpus
            .iter()
            .all(|c| c.enable_method == EnableMethod::Psci)
    );
    let psci = description.psci.clone().expect("psci");
    assert_eq!(psci.method, PsciMethod::Smc);
    assert_eq!(psci.compatible, ["arm,psci-1.0"]);
}

#[test]
fn rk3399_gic_v3_and_four_cell_timer() {
    let (description, _) = load(RK3399);
    let gic = description.gic.clone().expect("gic-v3");
    assert_eq!(gic.version, GicVersion::V3);
    assert_eq!(gic.distributor(), Some(region(0xfee0_0000, 0x10000)));
    assert_eq!(gic.redistributors(), [region(0xfef0_0000, 0xc0000)]);
    assert_eq!(gic.cpu_interface(), Some(region(0xfff0_0000, 0x10000)));
    assert_eq!(
        gic.hypervisor_interface(),
        Some(region(0xfff1_0000, 0x10000))
    );
    assert_eq!(
        gic.virtual_cpu_interface(),
        Some(region(0xfff2_0000, 0x10000))
    );
    // GIC maintenance interrupt: interrupts = <0x01 0x09 0x04 0x00> -> PPI 9 = INTID 25.
    assert_eq!(gic.maintenance_interrupt.map(|i| i.intid()), Some(25));
    // #interrupt-cells = 4: <1 0xd 8 0>, <1 0xe 8 0>, <1 0xb 8 0>, <1 0xa 8 0>.
    let timer = description.timer.clone().expect("timer");
    let hyp = timer.hypervisor_physical.expect("4th entry");
    assert_eq!(
        (hyp.kind, hyp.number, hyp.flags, hyp.intid()),
        (InterruptKind::Ppi, 0xa, 8, 26)
    );
    assert!(hyp.is_level());
    assert_eq!(timer.virtual_timer.map(|i| i.intid()), Some(27));
    assert_eq!(timer.physical.map(|i| i.intid()), Some(30));
    assert_eq!(timer.secure_physical.map(|i| i.intid()), Some(29));
    assert_eq!(timer.hypervisor_virtual, None);
    // stdout-path = "serial2:1500000n8"; serial2 = "/serial@ff1a0000".
    let console = description.console.clone().expect("console");
    assert_eq!(console.path, "/serial@ff1a0000");
    assert_eq!(console.region, region(0xff1a_0000, 0x100));
    assert_eq!(console.options.as_deref(), Some("1500000n8"));
}

#[test]
fn juno_big_cluster_comes_first() {
    let (description, topology) = load(JUNO);
    assert_eq!(hw_ids(&topology), [0x0, 0x1, 0x100, 0x101, 0x102, 0x103]);
    assert_eq!(
        positions(&topology),
        [
            (0, 0, 0, 0),
            (0, 0, 1, 0),
            (0, 1, 0, 0),
            (0, 1, 1, 0),
            (0, 1, 2, 0),
            (0, 1, 3, 0)
        ]
    );
    let capacities: Vec<_> = topology
        .cpus()
        .iter()
        .map(|c| c.capacity.unwrap())
        .collect();
    assert_eq!(capacities, [1024, 1024, 485, 485, 485, 485]);
    let gic = description.gic.clone().expect("gic");
    // compatible = "arm,gic-400\0arm,cortex-a15-gic"
    assert_eq!(
        (gic.compatible.as_str(), gic.version),
        ("arm,gic-400", GicVersion::V2)
    );
    assert_eq!(
        gic.regions,
        [
            region(0x2c01_0000, 0x1000),
            region(0x2c02_f000, 0x2000),
            region(0x2c04_f000, 0x2000),
            region(0x2c06_f000, 0x2000)
        ]
    );
    // interrupts = <0x01 0x0a 0x3f08> as the 4th timer entry: CPU mask 0x3f, level low.
    let hyp = description
        .timer
        .clone()
        .unwrap()
        .hypervisor_physical
        .unwrap();
    assert_eq!((hyp.intid(), hyp.flags, hyp.trigger()), (26, 0x3f08, 8));
}

#[test]
fn rk3588_uses_cpu_map_not_aff1() {
    let (description, topology) = load(RK3588);
    assert_eq!(description.topology_source, TopologySource::CpuMap);
    assert_eq!(
        hw_ids(&topology),
        [0x000, 0x100, 0x200, 0x300, 0x400, 0x500, 0x600, 0x700]
    );
    assert_eq!(
        positions(&topology),
        [
            (0, 0, 0, 0),
            (0, 0, 1, 0),
            (0, 0, 2, 0),
            (0, 0, 3, 0),
            (0, 1, 0, 0),
            (0, 1, 1, 0),
            (0, 2, 0, 0),
            (0, 2, 1, 0)
        ]
    );
    let capacities: Vec<_> = topology
        .cpus()
        .iter()
        .map(|c| c.capacity.unwrap())
        .collect();
    assert_eq!(capacities, [530, 530, 530, 530, 1024, 1024, 1024, 1024]);
    // Five timer entries: the 5th is the EL2 virtual timer, PPI 12 = INTID 28.
    let timer = description.timer.clone().unwrap();
    assert_eq!(timer.hypervisor_virtual.map(|i| i.intid()), Some(28));
    let gic = description.gic.clone().unwrap();
    assert_eq!(gic.redistributors(), [region(0xfe68_0000, 0x10_0000)]);
    // No /memory in the kernel's DTB: the bootloader adds it.
    assert!(description.warnings.contains(&DtWarning::NoMemoryNode));
}

#[test]
fn hip07_is_sixteen_clusters_of_four() {
    let (description, topology) = load(HIP07);
    assert_eq!(topology.len(), 64);
    let cluster_sizes: Vec<usize> = topology
        .groups(&topology.enabled(), Granularity::Cluster)
        .iter()
        .map(|g| g.len())
        .collect();
    assert_eq!(cluster_sizes, [4; 16]);
    // reg = <0x10000> ... <0x70303>: Aff2 in {1, 3, 5, 7}, Aff1 0..3, Aff0 0..3.
    assert_eq!(topology.cpu(0).unwrap().hw_id, 0x10000);
    assert_eq!(topology.cpu(5).unwrap().hw_id, 0x10101);
    assert_eq!(topology.cpu(63).unwrap().hw_id, 0x70303);
    assert_eq!(
        (
            topology.cpu(63).unwrap().cluster,
            topology.cpu(63).unwrap().core
        ),
        (15, 3)
    );
    let numa: Vec<_> = description
        .cpus
        .iter()
        .map(|c| c.numa_node.unwrap())
        .collect();
    assert_eq!(numa, (0..64).map(|i| i / 16).collect::<Vec<_>>());
    let gic = description.gic.clone().unwrap();
    assert_eq!(gic.redistributor_regions, 4);
    assert_eq!(
        gic.redistributors(),
        [
            region(0x4d10_0000, 0x40_0000),
            region(0x6d10_0000, 0x40_0000),
            region(0x400_4d10_0000, 0x40_0000),
            region(0x400_6d10_0000, 0x40_0000)
        ]
    );
    assert_eq!(gic.cpu_interface(), Some(region(0xfe00_0000, 0x10000)));
    assert_eq!(
        gic.virtual_cpu_interface(),
        Some(region(0xfe02_0000, 0x10000))
    );
    assert_eq!(description.psci.clone().unwrap().method, PsciMethod::Smc);
    let console = description.console.clone().unwrap();
    assert_eq!(
        (console.path.as_str(), console.region),
        ("/soc/serial@602b0000", region(0x602b_0000, 0x1000))
    );
    assert_eq!(description.memory.first(), Some(&region(0, 0x4000_0000)));
}

#[test]
fn qemu_virt_smp8_is_two_clusters_of_four() {
    let (description, topology) = load(VIRT_SMP8);
    // The RTC a domain may be given: compatible, reg and its level SPI 2.
    let rtc = description.device_at(0x901_0000).expect("pl031 node");
    assert_eq!(rtc.path, "/pl031@9010000");
    assert_eq!(rtc.base_name(), "pl031");
    assert_eq!(rtc.compatible, ["arm,pl031", "arm,primecell"]);
    assert_eq!(rtc.regions, [region(0x901_0000, 0x1000)]);
    let irq = rtc.interrupts[0];
    assert_eq!((irq.intid(), irq.is_level()), (34, true));
    // The GIC, memory and CPUs are not devices a domain can be given.
    assert!(description.device_at(0x800_0000).is_none());
    assert!(description.device_at(0x4000_0000).is_none());
    assert_eq!(hw_ids(&topology), [0, 1, 2, 3, 4, 5, 6, 7]);
    let expected: Vec<_> = (0..8).map(|i| (0, i / 4, i % 4, 0)).collect();
    assert_eq!(positions(&topology), expected);
    assert_eq!(description.memory, [region(0x4000_0000, 0x800_0000)]);
    let gic = description.gic.clone().unwrap();
    assert_eq!(
        gic.regions,
        [region(0x800_0000, 0x10000), region(0x80a_0000, 0xf6_0000)]
    );
    assert_eq!(gic.cpu_interface(), None);
    let psci = description.psci.clone().unwrap();
    assert_eq!(
        (psci.method, psci.cpu_on),
        (PsciMethod::Smc, Some(0xc400_0003))
    );
    let console = description.console.clone().unwrap();
    assert_eq!(
        (console.path.as_str(), console.region.base),
        ("/pl011@9000000", 0x900_0000)
    );
    // SPI 1, level high: INTID 33, the console's receive interrupt.
    let uart_irq = console.interrupt.unwrap();
    assert_eq!((uart_irq.intid(), uart_irq.trigger()), (33, 4));
    let hyp = description
        .timer
        .clone()
        .unwrap()
        .hypervisor_physical
        .unwrap();
    assert_eq!((hyp.intid(), hyp.trigger()), (26, 4));
    assert!(
        description.warnings.is_empty(),
        "{:?}",
        description.warnings
    );
    assert_eq!(description.check_bootable(), Ok(()));
}

#[test]
fn qemu_virt_smt_has_sockets_clusters_cores_threads() {
    let (_, topology) = load(VIRT_SMT);
    assert_eq!(hw_ids(&topology), (0..16).collect::<Vec<u64>>());
    let expected: Vec<_> = (0..16)
        .map(|i| (i / 8, (i / 4) % 2, (i / 2) % 2, i % 2))
        .collect();
    assert_eq!(positions(&topology), expected);
    let all = topology.enabled();
    assert_eq!(topology.groups(&all, Granularity::Core).len(), 8);
    assert_eq!(topology.groups(&all, Granularity::Socket).len(), 2);
    assert_eq!(
        topology
            .siblings(5, Granularity::Core)
            .iter()
            .collect::<Vec<_>>(),
        [4, 5]
    );
}

#[test]
fn report_shows_tree_and_fallback_reason() {
    let (description, topology) = load(RPI4);
    let mut text = String::new();
    dt::write_topology_report(&mut text, &description, &topology).unwrap();
    assert!(
        text.contains("no cpu-map: one cluster per MPIDR Aff1 value"),
        "{text}"
    );
    assert!(text.contains("spin-table"), "{text}");
    assert!(!text.contains("big.LITTLE"), "{text}");
    assert!(
        text.contains("warning: /memory@0: memory region of size 0 skipped"),
        "{text}"
    );

    let (description, topology) = load(VIRT_SMT);
    let mut text = String::new();
    dt::write_topology_report(&mut text, &description, &topology).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("socket ")).count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("thread 1: cpu"))
            .count(),
        8,
        "{text}"
    );
    assert!(text.contains("from /cpus/cpu-map"), "{text}");
}

/// Each class as the banner prints it (`big.LITTLE: ...` without the prefix).
fn class_lines(blob: &[u8]) -> Vec<String> {
    let (description, _) = load(blob);
    description
        .cpu_classes()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn big_little_classes_of_the_real_boards() {
    // RK3399: the LITTLE cluster comes first in the device tree.
    assert_eq!(
        class_lines(RK3399),
        [
            "big: CPUs 4-5, capacity 1024, arm,cortex-a72",
            "LITTLE: CPUs 0-3, capacity 485, arm,cortex-a53"
        ]
    );
    // Juno r2: the big cluster comes first.
    assert_eq!(
        class_lines(JUNO),
        [
            "big: CPUs 0-1, capacity 1024, arm,cortex-a72",
            "LITTLE: CPUs 2-5, capacity 485, arm,cortex-a53"
        ]
    );
    // RK3588: two A76 clusters of equal capacity are one class.
    assert_eq!(
        class_lines(RK3588),
        [
            "big: CPUs 4-7, capacity 1024, arm,cortex-a76",
            "LITTLE: CPUs 0-3, capacity 530, arm,cortex-a55"
        ]
    );
    // Homogeneous machines have one class.
    for blob in [RPI4, HIP07, VIRT_SMP8] {
        assert_eq!(load(blob).0.cpu_classes().len(), 1);
    }
    assert_eq!(class_lines(RPI4), ["big: CPUs 0-3, arm,cortex-a72"]);
}

#[test]
fn the_report_names_big_and_little_cpus() {
    let (description, topology) = load(RK3399);
    let mut text = String::new();
    dt::write_topology_report(&mut text, &description, &topology).unwrap();
    assert!(text.contains(", big.LITTLE;"), "{text}");
    assert!(
        text.contains("big.LITTLE: big: CPUs 4-5, capacity 1024, arm,cortex-a72\n"),
        "{text}"
    );
    assert!(
        text.contains("big.LITTLE: LITTLE: CPUs 0-3, capacity 485, arm,cortex-a53\n"),
        "{text}"
    );
    let cpu_line = |index: usize| {
        text.lines()
            .find(|l| l.contains(&format!("cpu {index:<3} mpidr")))
            .unwrap_or_else(|| panic!("cpu {index} in {text}"))
            .to_string()
    };
    assert!(cpu_line(0).contains(" LITTLE "), "{}", cpu_line(0));
    assert!(cpu_line(5).contains(" big "), "{}", cpu_line(5));
    // A homogeneous machine prints no class.
    let (description, topology) = load(RPI4);
    let mut text = String::new();
    dt::write_topology_report(&mut text, &description, &topology).unwrap();
    assert!(!text.contains("big"), "{text}");
}

#[test]
fn secondaries_start_by_spin_table_on_the_pi_and_by_psci_where_the_dt_says_psci() {
    let (pi, _) = load(RPI4);
    for (mpidr, release_address) in [(1, 0xe0), (2, 0xe8), (3, 0xf0)] {
        assert_eq!(
            pi.start_method(mpidr),
            dt::StartMethod::SpinTable { release_address }
        );
    }
    let (rk3399, _) = load(RK3399);
    assert_eq!(
        rk3399.start_method(0x101),
        dt::StartMethod::Psci(PsciMethod::Smc)
    );
    let (virt, _) = load(VIRT_SMP8);
    // virtualization=on: QEMU answers PSCI at EL3, through SMC.
    assert_eq!(virt.start_method(7), dt::StartMethod::Psci(PsciMethod::Smc));
    // No such CPU, and a psci CPU without /psci: named, not guessed.
    assert!(matches!(
        virt.start_method(0x100),
        dt::StartMethod::Unstartable(_)
    ));
    let mut no_psci = rk3399.clone();
    no_psci.psci = None;
    let dt::StartMethod::Unstartable(why) = no_psci.start_method(0x101) else {
        panic!("started without /psci");
    };
    assert!(why.contains("no usable /psci node"), "{why}");
}
