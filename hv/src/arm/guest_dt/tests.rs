//! Host tests: every blob is read back with the hypervisor's own device-tree
//! parser (`platform::dt::parse`) and, where installed, checked by `dtc`.

use super::*;
use crate::arm::vpsci::VPsci;
use alloc::vec;
use platform::dt::{
    EnableMethod, GicVersion, InterruptKind, MachineDescription, MemoryRegion, PsciMethod,
    TopologySource,
};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 256 << 20;

fn spec(vcpus: usize, gic: GuestGicVersion) -> GuestDtSpec<'static> {
    GuestDtSpec {
        vcpus,
        ..GuestDtSpec::new(RAM_BASE, RAM_SIZE, gic)
    }
}

fn parse(spec: &GuestDtSpec<'_>) -> MachineDescription {
    let blob = guest_device_tree(spec).expect("generation");
    let machine = platform::dt::parse(&blob).expect("parse back");
    assert!(machine.warnings.is_empty(), "{:?}", machine.warnings);
    machine
}

/// (cluster, core, thread) of each logical CPU, from the sched topology.
fn positions(machine: &MachineDescription) -> Vec<(u32, u32, u32)> {
    let topology = machine.topology().unwrap();
    topology
        .cpus()
        .iter()
        .map(|c| {
            assert_eq!(c.socket, 0);
            (c.cluster, c.core, c.thread)
        })
        .collect()
}

#[test]
fn gicv3_guest_reads_back() {
    let s = GuestDtSpec {
        vcpus: 4,
        model: "dom1",
        bootargs: "console=ttyAMA0 earlycon workload=spin",
        initrd: Some((RAM_BASE + 0x0400_0000, RAM_BASE + 0x0480_0000)),
        ..GuestDtSpec::new(RAM_BASE, RAM_SIZE, GuestGicVersion::V3)
    };
    let m = parse(&s);
    assert_eq!(m.model.as_deref(), Some("dom1"));
    assert_eq!(m.compatible, ["linux,dummy-virt"]);
    assert_eq!(
        m.memory,
        [MemoryRegion {
            base: RAM_BASE,
            size: RAM_SIZE
        }]
    );
    assert!(m.reserved.is_empty());

    let mpidrs: Vec<u64> = m.cpus.iter().map(|c| c.mpidr).collect();
    assert_eq!(mpidrs, VPsci::linear_mpidrs(4));
    for cpu in &m.cpus {
        assert!(cpu.available);
        assert_eq!(cpu.enable_method, EnableMethod::Psci);
        assert_eq!(cpu.compatible.as_deref(), Some("arm,armv8"));
    }

    let gic = m.gic.as_ref().expect("GIC");
    assert_eq!(gic.version, GicVersion::V3);
    assert_eq!(gic.compatible, "arm,gic-v3");
    assert_eq!(gic.path, "/intc@8000000");
    assert_eq!(
        gic.distributor(),
        Some(MemoryRegion {
            base: GICD_BASE,
            size: 0x1_0000
        })
    );
    assert_eq!(
        gic.redistributors(),
        [MemoryRegion {
            base: GICR_BASE,
            size: 0x2_0000 * 4
        }]
    );
    assert_eq!(gic.cpu_interface(), None);

    let psci = m.psci.as_ref().expect("PSCI");
    assert_eq!(psci.method, PsciMethod::Hvc);
    assert_eq!(psci.compatible, ["arm,psci-1.0", "arm,psci-0.2"]);

    let uart = m.console.as_ref().expect("console");
    assert_eq!(uart.path, "/pl011@9000000");
    assert_eq!(uart.compatible, ["arm,pl011", "arm,primecell"]);
    assert_eq!(
        uart.region,
        MemoryRegion {
            base: 0x0900_0000,
            size: 0x1000
        }
    );

    let timer = m.timer.as_ref().expect("timer");
    let ppis = [
        timer.secure_physical,
        timer.physical,
        timer.virtual_timer,
        timer.hypervisor_physical,
    ]
    .map(|i| i.expect("timer PPI"));
    assert_eq!(ppis.map(|i| i.intid()), [29, 30, 27, 26]);
    for ppi in ppis {
        assert_eq!(ppi.kind, InterruptKind::Ppi);
        assert_eq!(ppi.flags, 4, "GICv3 specifiers carry no CPU mask");
    }
    assert_eq!(timer.hypervisor_virtual, None);

    assert_eq!(
        m.bootargs.as_deref(),
        Some("console=ttyAMA0 earlycon workload=spin")
    );
    assert_eq!(
        m.initrd,
        Some(MemoryRegion {
            base: RAM_BASE + 0x0400_0000,
            size: 0x80_0000
        })
    );
    m.check_bootable().unwrap();

    // No units: one cluster of single-thread cores.
    assert_eq!(m.topology_source, TopologySource::CpuMap);
    assert_eq!(positions(&m), [(0, 0, 0), (0, 1, 0), (0, 2, 0), (0, 3, 0)]);
}

#[test]
fn gicv2_guest_reads_back() {
    let m = parse(&spec(3, GuestGicVersion::V2));
    let gic = m.gic.as_ref().expect("GIC");
    assert_eq!(gic.version, GicVersion::V2);
    assert_eq!(gic.compatible, "arm,cortex-a15-gic");
    assert_eq!(gic.redistributor_regions, 0);
    assert_eq!(
        gic.regions,
        [
            MemoryRegion {
                base: 0x0800_0000,
                size: 0x1000
            },
            MemoryRegion {
                base: GICC_BASE_V2,
                size: 0x2000
            },
        ]
    );
    assert_eq!(gic.cpu_interface().map(|r| r.base), Some(0x0801_0000));
    let timer = m.timer.as_ref().expect("timer");
    let virt = timer.virtual_timer.expect("virtual timer");
    assert_eq!(virt.intid(), 27);
    assert_eq!(virt.flags, 0x704, "CPU mask for 3 vCPUs, level-high");
    assert!(virt.is_level());
    assert_eq!(m.bootargs, None, "empty bootargs are left out");
    assert_eq!(m.initrd, None);
}

#[test]
fn mpidrs_follow_the_vgic_affinity_layout() {
    let m = parse(&spec(18, GuestGicVersion::V3));
    let mpidrs: Vec<u64> = m.cpus.iter().map(|c| c.mpidr).collect();
    assert_eq!(mpidrs, VPsci::linear_mpidrs(18));
    assert_eq!(m.cpus[16].path, "/cpus/cpu@100");
    assert_eq!(m.cpus[17].mpidr, 0x101);
    for (i, cpu) in m.cpus.iter().enumerate() {
        assert_eq!(cpu.mpidr, vcpu_affinity(i).to_mpidr());
    }
    let gic = m.gic.unwrap();
    assert_eq!(gic.redistributors()[0].size, GICR_STRIDE * 18);
    // The largest GICv3 guest still fits in front of the UART.
    let m = parse(&spec(MAX_VCPUS_V3, GuestGicVersion::V3));
    assert_eq!(m.cpus.len(), MAX_VCPUS_V3);
    let end = GICR_BASE + m.gic.unwrap().redistributors()[0].size;
    assert!(end <= UART_BASE);
}

#[test]
fn units_as_threads_share_a_core() {
    // Deliberately not contiguous: the map must follow the unit lists.
    let units: &[&[usize]] = &[&[0, 2], &[1, 3], &[4]];
    let s = GuestDtSpec {
        vcpus: 5,
        topology: UnitTopology {
            units,
            shape: UnitShape::Threads,
        },
        ..spec(1, GuestGicVersion::V3)
    };
    let m = parse(&s);
    assert_eq!(m.topology_source, TopologySource::CpuMap);
    assert_eq!(
        positions(&m),
        [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1), (0, 2, 0)]
    );
    let counts = m.topology().unwrap().counts();
    assert_eq!((counts.clusters, counts.cores, counts.threads), (1, 3, 5));
}

#[test]
fn units_as_cores_share_a_cluster() {
    let units: &[&[usize]] = &[&[0, 3], &[1, 2]];
    let s = GuestDtSpec {
        vcpus: 4,
        topology: UnitTopology {
            units,
            shape: UnitShape::Cores,
        },
        ..spec(1, GuestGicVersion::V2)
    };
    let m = parse(&s);
    assert_eq!(positions(&m), [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]);
    let counts = m.topology().unwrap().counts();
    assert_eq!((counts.clusters, counts.cores, counts.threads), (2, 4, 4));
}

/// QEMU `virt`'s PL031 RTC as a domain is given it.
fn rtc() -> crate::passthrough::PlannedDevice {
    crate::passthrough::PlannedDevice {
        name: "rtc".into(),
        node_name: "pl031".into(),
        compatible: vec!["arm,pl031".into(), "arm,primecell".into()],
        host_base: 0x0901_0000,
        guest_base: 0x0901_0000,
        size: 0x1000,
        interrupts: vec![(34, crate::config::Trigger::Level)],
        host_node: None,
    }
}

#[test]
fn pass_through_devices_are_described() {
    let devices = [
        rtc(),
        crate::passthrough::PlannedDevice {
            name: "door".into(),
            node_name: "door".into(),
            compatible: vec!["vendor,door".into()],
            guest_base: 0x0a00_0000,
            interrupts: vec![(40, crate::config::Trigger::Edge)],
            ..rtc()
        },
    ];
    // Without a console: the AMBA RTC still gets its apb-pclk.
    let blob = guest_device_tree(&GuestDtSpec {
        devices: &devices,
        console: false,
        ..spec(1, GuestGicVersion::V3)
    })
    .unwrap();
    assert!(blob.windows(8).any(|w| w == b"apb-pclk"));
    let m = platform::dt::parse(&blob).unwrap();
    assert_eq!(m.warnings, [platform::dt::DtWarning::NoConsole]);
    let rtc = m.device_at(0x0901_0000).expect("rtc node");
    assert_eq!(rtc.path, "/pl031@9010000");
    assert_eq!(rtc.compatible, ["arm,pl031", "arm,primecell"]);
    assert_eq!(rtc.regions[0].size, 0x1000);
    assert_eq!(
        (rtc.interrupts[0].intid(), rtc.interrupts[0].is_level()),
        (34, true)
    );
    let door = m.device_at(0x0a00_0000).expect("door node");
    assert_eq!(door.path, "/door@a000000");
    assert_eq!(
        (door.interrupts[0].intid(), door.interrupts[0].is_level()),
        (40, false)
    );
}

#[test]
fn validated_by_dtc_when_installed() {
    let units: &[&[usize]] = &[&[0, 1], &[2, 3]];
    let devices = [rtc()];
    for gic in [GuestGicVersion::V2, GuestGicVersion::V3] {
        let s = GuestDtSpec {
            devices: &devices,
            vcpus: 4,
            bootargs: "console=ttyAMA0",
            initrd: Some((RAM_BASE + 0x100_0000, RAM_BASE + 0x200_0000)),
            topology: UnitTopology {
                units,
                shape: UnitShape::Threads,
            },
            ..spec(1, gic)
        };
        let blob = guest_device_tree(&s).unwrap();
        let path =
            std::env::temp_dir().join(format!("hv-guest-dt-{}-{gic:?}.dtb", std::process::id()));
        std::fs::write(&path, &blob).unwrap();
        let output = std::process::Command::new("dtc")
            .args(["-I", "dtb", "-O", "dts"])
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let output = match output {
            Ok(output) => output,
            Err(e) => {
                std::println!("note: dtc not runnable ({e}); skipping the dtc check");
                return;
            }
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "dtc failed: {stderr}");
        assert!(!stderr.contains("arning"), "dtc warnings: {stderr}");
        let dts = String::from_utf8_lossy(&output.stdout);
        for expected in [
            "compatible = \"linux,dummy-virt\";",
            "memory@40000000 {",
            "reg = <0x00 0x40000000 0x00 0x10000000>;",
            "thread1 {",
            "method = \"hvc\";",
            "stdout-path = \"/pl011@9000000\";",
            "serial0 = \"/pl011@9000000\";",
            "clock-frequency = <0x16e3600>;",
            "bootargs = \"console=ttyAMA0\";",
            "linux,initrd-start = <0x00 0x41000000>;",
            "pl031@9010000 {",
            "interrupts = <0x00 0x02 0x04>;",
        ] {
            assert!(dts.contains(expected), "{expected:?} missing from\n{dts}");
        }
    }
}

#[test]
fn domain_config_gives_the_spec() {
    use crate::config::{Console, DomainConfig};
    let mut domain = DomainConfig::new("dom1", "pool0");
    domain.vcpus = 2;
    domain.memory_mib = 128;
    domain.memory_base = 0x8000_0000;
    domain.bootargs = "workload=compute".into();
    let units: &[&[usize]] = &[&[0, 1]];
    let topology = UnitTopology {
        units,
        shape: UnitShape::Threads,
    };
    let m = parse(&GuestDtSpec::for_domain(
        &domain,
        GuestGicVersion::V3,
        topology,
    ));
    assert_eq!(m.cpus.len(), 2);
    assert_eq!(
        m.memory,
        [MemoryRegion {
            base: 0x8000_0000,
            size: 128 << 20
        }]
    );
    assert_eq!(m.bootargs.as_deref(), Some("workload=compute"));
    assert_eq!(positions(&m), [(0, 0, 0), (0, 0, 1)]);
    assert!(m.console.is_some());

    // A domain without a console gets no UART node and no stdout-path.
    domain.console = Console::None;
    let spec = GuestDtSpec::for_domain(&domain, GuestGicVersion::V2, UnitTopology::FLAT);
    assert!(!spec.console);
    let blob = guest_device_tree(&spec).unwrap();
    let m = platform::dt::parse(&blob).unwrap();
    assert_eq!(m.warnings, [platform::dt::DtWarning::NoConsole]);
    assert_eq!(m.console, None);
    assert!(!blob.windows(5).any(|w| w == b"pl011"));
    assert!(!blob.windows(11).any(|w| w == b"stdout-path"));

    // A size that overflows bytes is rejected, not wrapped.
    domain.memory_mib = u64::MAX;
    let spec = GuestDtSpec::for_domain(&domain, GuestGicVersion::V3, UnitTopology::FLAT);
    assert!(matches!(
        guest_device_tree(&spec),
        Err(GuestDtError::BadRam { .. })
    ));
}

#[test]
fn bad_specs_are_rejected() {
    let base = spec(2, GuestGicVersion::V3);
    let cases: Vec<(GuestDtSpec<'_>, GuestDtError)> = vec![
        (GuestDtSpec { vcpus: 0, ..base }, GuestDtError::NoVcpus),
        (
            spec(9, GuestGicVersion::V2),
            GuestDtError::TooManyVcpus {
                vcpus: 9,
                max: 8,
                gic: GuestGicVersion::V2,
            },
        ),
        (
            spec(MAX_VCPUS_V3 + 1, GuestGicVersion::V3),
            GuestDtError::TooManyVcpus {
                vcpus: MAX_VCPUS_V3 + 1,
                max: MAX_VCPUS_V3,
                gic: GuestGicVersion::V3,
            },
        ),
        (
            GuestDtSpec {
                ram_size: 0,
                ..base
            },
            GuestDtError::BadRam {
                base: RAM_BASE,
                size: 0,
            },
        ),
        (
            GuestDtSpec {
                ram_base: 0,
                ram_size: 0x1000_0000,
                ..base
            },
            GuestDtError::BadRam {
                base: 0,
                size: 0x1000_0000,
            },
        ),
        (
            GuestDtSpec {
                ram_base: u64::MAX - 0xfff,
                ram_size: 0x2000,
                ..base
            },
            GuestDtError::BadRam {
                base: u64::MAX - 0xfff,
                size: 0x2000,
            },
        ),
        (
            GuestDtSpec {
                initrd: Some((RAM_BASE + RAM_SIZE - 0x1000, RAM_BASE + RAM_SIZE + 0x1000)),
                ..base
            },
            GuestDtError::BadInitrd {
                start: RAM_BASE + RAM_SIZE - 0x1000,
                end: RAM_BASE + RAM_SIZE + 0x1000,
            },
        ),
        (
            GuestDtSpec {
                initrd: Some((RAM_BASE + 0x2000, RAM_BASE + 0x2000)),
                ..base
            },
            GuestDtError::BadInitrd {
                start: RAM_BASE + 0x2000,
                end: RAM_BASE + 0x2000,
            },
        ),
        (
            GuestDtSpec {
                topology: UnitTopology {
                    units: &[&[0, 2]],
                    shape: UnitShape::Threads,
                },
                ..base
            },
            GuestDtError::UnitVcpuOutOfRange { unit: 0, vcpu: 2 },
        ),
        (
            GuestDtSpec {
                topology: UnitTopology {
                    units: &[&[0, 1], &[1]],
                    shape: UnitShape::Cores,
                },
                ..base
            },
            GuestDtError::VcpuInTwoUnits { vcpu: 1 },
        ),
        (
            GuestDtSpec {
                topology: UnitTopology {
                    units: &[&[1]],
                    shape: UnitShape::Cores,
                },
                ..base
            },
            GuestDtError::VcpuInNoUnit { vcpu: 0 },
        ),
        (
            GuestDtSpec {
                topology: UnitTopology {
                    units: &[&[0, 1], &[]],
                    shape: UnitShape::Threads,
                },
                ..base
            },
            GuestDtError::EmptyUnit { unit: 1 },
        ),
        (
            GuestDtSpec {
                bootargs: "a\0b",
                ..base
            },
            GuestDtError::Encoding(FdtWriteError::NulInString {
                name: "bootargs".into(),
            }),
        ),
    ];
    for (bad, expected) in cases {
        let got = guest_device_tree(&bad);
        assert_eq!(got.as_ref().err(), Some(&expected), "{bad:?}");
        assert!(expected.to_string().starts_with("guest device tree: "));
    }

    let long = "x".repeat(MAX_BOOTARGS + 1);
    let err = guest_device_tree(&GuestDtSpec {
        bootargs: &long,
        ..base
    })
    .unwrap_err();
    assert_eq!(
        err,
        GuestDtError::BootargsTooLong {
            len: MAX_BOOTARGS + 1
        }
    );
    assert!(err.to_string().contains("2048 bytes"));
    let longest = "y".repeat(MAX_BOOTARGS);
    let m = parse(&GuestDtSpec {
        bootargs: &longest,
        ..base
    });
    assert_eq!(m.bootargs.as_deref(), Some(longest.as_str()));
    // Exactly at the limits is fine.
    parse(&spec(MAX_VCPUS_V2, GuestGicVersion::V2));
    parse(&GuestDtSpec {
        initrd: Some((RAM_BASE, RAM_BASE + RAM_SIZE)),
        ..base
    });
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any partition of any vCPU count into units reads back with each
        /// unit as exactly one core (threads) or one cluster (cores).
        #[test]
        fn every_partition_round_trips(
            vcpus in 1usize..=40,
            seed in proptest::collection::vec(0usize..8, 40),
            threads in any::<bool>(),
        ) {
            // Unit of vCPU i: seed[i] folded into the units already used, so
            // units are nonempty and numbered densely.
            let mut units: Vec<Vec<usize>> = Vec::new();
            for (vcpu, &pick) in seed.iter().enumerate().take(vcpus) {
                let u = pick % (units.len() + 1);
                if u == units.len() {
                    units.push(Vec::new());
                }
                units[u].push(vcpu);
            }
            let refs: Vec<&[usize]> = units.iter().map(Vec::as_slice).collect();
            let shape = if threads { UnitShape::Threads } else { UnitShape::Cores };
            let s = GuestDtSpec {
                vcpus,
                topology: UnitTopology { units: &refs, shape },
                ..spec(1, GuestGicVersion::V3)
            };
            let m = parse(&s);
            let pos = positions(&m);
            for (u, unit) in units.iter().enumerate() {
                for (k, &vcpu) in unit.iter().enumerate() {
                    let (cluster, core, thread) = pos[vcpu];
                    let group = if threads { core } else { cluster };
                    let member = if threads { thread } else { core };
                    prop_assert_eq!(group as usize, u);
                    prop_assert_eq!(member as usize, k);
                    prop_assert_eq!(if threads { cluster } else { thread }, 0);
                }
            }
        }
    }
}

/// Which L2 node (by phandle) each vCPU's `next-level-cache` names.
fn l2_of_each_vcpu(spec: &GuestDtSpec<'_>) -> Vec<u32> {
    let blob = guest_device_tree(spec).expect("generation");
    // An independent reader (the `fdt` crate), not the hypervisor's own.
    let fdt = fdt::Fdt::new(&blob).expect("parse back");
    (0..spec.vcpus)
        .map(|vcpu| {
            let mpidr = vcpu_affinity(vcpu).to_mpidr();
            let cpu = fdt
                .find_node(&format!("/cpus/cpu@{mpidr:x}"))
                .expect("cpu node");
            let l2 = cpu
                .property("next-level-cache")
                .and_then(|p| p.as_usize())
                .expect("L2 link") as u32;
            let node = fdt.find_phandle(l2).expect("L2 node exists");
            assert_eq!(
                node.property("compatible").and_then(|p| p.as_str()),
                Some("cache")
            );
            assert_eq!(
                node.property("cache-level").and_then(|p| p.as_usize()),
                Some(2)
            );
            l2
        })
        .collect()
}

#[test]
fn l2_caches_are_shared_per_cluster() {
    // Threads: one cluster, so one L2 for every vCPU (Linux's multi-core
    // domain then contains each core's SMT siblings).
    let units: &[&[usize]] = &[&[0, 1], &[2, 3]];
    let threads = GuestDtSpec {
        vcpus: 4,
        topology: UnitTopology {
            units,
            shape: UnitShape::Threads,
        },
        ..spec(1, GuestGicVersion::V3)
    };
    let l2 = l2_of_each_vcpu(&threads);
    assert!(l2.iter().all(|&c| c == l2[0]), "{l2:?}");
    // Cores: each unit is a cluster with its own L2.
    let units: &[&[usize]] = &[&[0, 3], &[1, 2]];
    let cores = GuestDtSpec {
        vcpus: 4,
        topology: UnitTopology {
            units,
            shape: UnitShape::Cores,
        },
        ..spec(1, GuestGicVersion::V2)
    };
    let l2 = l2_of_each_vcpu(&cores);
    assert_eq!(l2[0], l2[3]);
    assert_eq!(l2[1], l2[2]);
    assert_ne!(l2[0], l2[1]);
}
