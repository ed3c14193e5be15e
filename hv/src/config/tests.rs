//! Config tests: every validation rule with a config that breaks it, the
//! encoding's round trip and its refusal of damaged blobs, CPU lists.

use super::*;
use alloc::string::ToString;
use alloc::vec;
use proptest::prelude::*;

fn cpus(list: &str) -> CpuSet {
    parse_cpu_list(list).unwrap()
}

/// The qemu-virt layout of `boards/configs/qemu-virt.toml`.
fn sample() -> Config {
    let mut pool0 = PoolConfig::new("general", cpus("0-3"));
    pool0.scheduler_params = "ratelimit_us=500".to_string();
    let mut smt = PoolConfig::new("smt", cpus("4-5"));
    smt.granularity = "core".to_string();
    let mut rt = PoolConfig::new("realtime", cpus("7"));
    rt.scheduler = "null".to_string();
    let mut dom0 = DomainConfig::new("control", "general");
    dom0.privileged = true;
    dom0.test_hooks = true;
    dom0.fail_stop = true;
    dom0.vcpus = 2;
    let mut a = DomainConfig::new("web", "smt");
    a.vcpus = 2;
    a.params.weight = 512;
    a.soft_affinity = Some(cpus("4"));
    let mut b = DomainConfig::new("batch", "smt");
    b.vcpus = 2;
    b.params.cap_percent = 50;
    let mut rt_dom = DomainConfig::new("motor", "realtime");
    rt_dom.hard_affinity = Some(cpus("7"));
    rt_dom.bootargs = "workload=sleeper period_us=1000".to_string();
    rt_dom.devices.push(DeviceConfig {
        name: "uart1".to_string(),
        base: 0x0904_0000,
        guest_base: 0x0904_0000,
        size: 0x1000,
        interrupts: vec![40],
        compatible: vec!["arm,pl011".to_string(), "arm,primecell".to_string()],
        trigger: Some(Trigger::Level),
    });
    Config {
        pools: vec![pool0, smt, rt],
        domains: vec![dom0, a, b, rt_dom],
    }
}

/// Validates `config` and returns the one error expected, checking its message.
fn only_error(config: &Config) -> ConfigError {
    let errors = config.validate();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    errors.into_iter().next().unwrap()
}

#[test]
fn the_sample_is_valid() {
    assert_eq!(sample().validate(), vec![]);
}

#[test]
fn pool_rules() {
    // No pool: the automatic layout, whose pool names are all a domain may use.
    let mut c = sample();
    c.pools.clear();
    c.domains.clear();
    assert_eq!(c.validate(), vec![]);
    let mut c = sample();
    c.pools.clear();
    c.domains.truncate(1);
    c.domains[0].pool = "big".to_string();
    assert_eq!(c.validate(), vec![]);
    c.domains[0].pool = "general".to_string();
    let e = only_error(&c);
    assert_eq!(
        (e.field, e.problem.clone()),
        ("pool", Problem::NotAnAutomaticPool("general".to_string()))
    );
    assert!(
        e.to_string()
            .starts_with("domain 'control': pool: no pool is called 'general': a config without [[pool]] gets the automatic pools (Pool-0"),
        "{e}"
    );

    let mut c = sample();
    c.pools[1].cpus = CpuSet::new();
    let e = only_error(&c);
    assert_eq!(
        (e.item, e.field, e.problem.clone()),
        (Item::Pool(1), "cpus", Problem::NoCpus)
    );
    assert_eq!(e.to_string(), "pool 'smt': cpus: the pool has no CPU");

    let mut c = sample();
    c.pools[2].cpus = cpus("3,7");
    let e = only_error(&c);
    assert_eq!(e.item, Item::Pool(2));
    assert_eq!(
        e.to_string(),
        "pool 'realtime': cpus: CPU 3 is also in pool 'general'"
    );

    let mut c = sample();
    c.pools[1].scheduler = "bfs".to_string();
    let e = only_error(&c);
    assert_eq!(e.field, "scheduler");
    let message = e.to_string();
    for name in ["credit2", "credit", "null", "rt", "arinc653", "'bfs'"] {
        assert!(message.contains(name), "{message}");
    }

    let mut c = sample();
    c.pools[0].scheduler_params = "ratelimit_us=banana".to_string();
    let e = only_error(&c);
    assert_eq!(e.field, "scheduler_params");
    assert!(matches!(e.problem, Problem::BadSchedulerParams(_)));

    let mut c = sample();
    c.pools[1].granularity = "thread".to_string();
    let e = only_error(&c);
    assert_eq!(e.field, "granularity");
    assert!(e.to_string().contains("cpu, core, cluster, socket"), "{e}");

    let mut c = sample();
    c.pools[1].placement = "random".to_string();
    assert_eq!(only_error(&c).field, "placement");

    let mut c = sample();
    c.domains.clear();
    c.pools[2].name = "general".to_string();
    let e = only_error(&c);
    assert_eq!((e.item, e.problem), (Item::Pool(2), Problem::DuplicateName));

    let mut c = sample();
    c.pools[0].name = "has space".to_string();
    c.domains[0].pool = "has space".to_string();
    assert_eq!(only_error(&c).problem, Problem::BadName);
}

#[test]
fn null_pool_must_not_be_overcommitted() {
    let mut c = sample();
    c.domains[3].vcpus = 2;
    c.domains[3].hard_affinity = None;
    let e = only_error(&c);
    assert_eq!(e.item, Item::Pool(2));
    assert_eq!(
        e.problem,
        Problem::NullPoolOvercommitted { vcpus: 2, cpus: 1 }
    );
}

#[test]
fn domain_rules() {
    let mut c = sample();
    c.domains[1].pool = "nowhere".to_string();
    let e = only_error(&c);
    assert_eq!((e.item, e.field), (Item::Domain(1), "pool"));
    assert_eq!(
        e.to_string(),
        "domain 'web': pool: no pool is called 'nowhere'"
    );

    for bad in [0, MAX_DOMAIN_VCPUS + 1] {
        let mut c = sample();
        c.domains[0].vcpus = bad;
        assert_eq!(only_error(&c).problem, Problem::BadVcpuCount(bad));
    }

    let mut c = sample();
    c.domains[0].memory_mib = 0;
    assert_eq!(only_error(&c).field, "memory_mib");
    let mut c = sample();
    c.domains[0].memory_base = 0x4000_1000;
    assert_eq!(only_error(&c).problem, Problem::BadMemory);
    let mut c = sample();
    c.domains[0].memory_base = (1 << 40) - (2 << 20);
    c.domains[0].memory_mib = 4;
    assert_eq!(only_error(&c).problem, Problem::BadMemory);

    let mut c = sample();
    c.domains[0].params.weight = 0;
    assert_eq!(only_error(&c).field, "weight");
    let mut c = sample();
    c.domains[0].params.cap_percent = 101;
    assert_eq!(only_error(&c).field, "cap");
    let mut c = sample();
    c.domains[0].params.budget_ns = c.domains[0].params.period_ns + 1;
    assert_eq!(only_error(&c).field, "budget_us");

    let mut c = sample();
    c.domains[3].hard_affinity = Some(cpus("6-7"));
    assert_eq!(only_error(&c).problem, Problem::AffinityOutsidePool);
    let mut c = sample();
    c.domains[3].hard_affinity = Some(CpuSet::new());
    assert_eq!(only_error(&c).problem, Problem::AffinityOutsidePool);
    // Soft affinity must leave the domain a CPU it may prefer.
    let mut c = sample();
    c.domains[1].soft_affinity = Some(cpus("0-3"));
    let e = only_error(&c);
    assert_eq!(
        (e.field, e.problem.clone()),
        ("soft_affinity", Problem::SoftAffinityUnusable)
    );
    let mut c = sample();
    c.domains[3].soft_affinity = Some(cpus("6"));
    assert_eq!(only_error(&c).problem, Problem::SoftAffinityUnusable);

    let mut c = sample();
    c.domains[1].image = GuestImage::Builtin("freebsd".to_string());
    let e = only_error(&c);
    assert!(e.to_string().contains("test-guest"), "{e}");
    let mut c = sample();
    c.domains[1].image = GuestImage::File {
        path: String::new(),
        initramfs: None,
    };
    assert_eq!(only_error(&c).problem, Problem::EmptyImagePath);
    c.domains[1].image = GuestImage::File {
        path: "Image".to_string(),
        initramfs: Some(String::new()),
    };
    assert_eq!(only_error(&c).problem, Problem::EmptyImagePath);

    let mut c = sample();
    c.domains[2].name = "web".to_string();
    assert_eq!(only_error(&c).problem, Problem::DuplicateName);

    let mut c = sample();
    c.domains[1].privileged = true;
    let e = only_error(&c);
    assert_eq!(
        (e.item, e.problem),
        (
            Item::Domain(1),
            Problem::SecondPrivileged("control".to_string())
        )
    );
}

#[test]
fn device_rules() {
    let device = |name: &str, base: u64, guest_base: u64, size: u64, spis: &[u32]| DeviceConfig {
        name: name.to_string(),
        base,
        guest_base,
        size,
        interrupts: spis.to_vec(),
        compatible: Vec::new(),
        trigger: None,
    };
    let item = Item::Device {
        domain: 1,
        device: 0,
    };

    // Guest range over the domain's RAM (0x4000_0000, 64 MiB).
    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("fb", 0x1000_0000, 0x4100_0000, 0x1000, &[]));
    let e = only_error(&c);
    assert_eq!((e.item, e.field), (item, "guest_base"));
    assert_eq!(
        e.to_string(),
        "device 'fb': guest_base: guest-physical range overlaps the domain's memory"
    );

    // The same host range in two domains.
    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("uart", 0x0904_0000, 0x0904_0000, 0x1000, &[]));
    let e = only_error(&c);
    assert_eq!(
        e.problem,
        Problem::DeviceShared {
            domain: "web".to_string(),
            device: "uart".to_string()
        }
    );
    assert_eq!(
        e.item,
        Item::Device {
            domain: 3,
            device: 0
        }
    );

    // Two devices of one domain at the same guest address.
    let mut c = sample();
    c.domains[1].devices = vec![
        device("a", 0x0a00_0000, 0x0a00_0000, 0x2000, &[]),
        device("b", 0x0b00_0000, 0x0a00_1000, 0x1000, &[]),
    ];
    let e = only_error(&c);
    assert_eq!(
        e.item,
        Item::Device {
            domain: 1,
            device: 1
        }
    );
    assert_eq!(
        e.problem,
        Problem::GuestRangeOverlap {
            other: "device 'a'".to_string()
        }
    );

    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("odd", 0x0a00_0100, 0x0a00_0100, 0x100, &[]));
    assert_eq!(only_error(&c).problem, Problem::BadDeviceRange);
    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("wrap", u64::MAX - 0xfff, 0, 0x2000, &[]));
    assert_eq!(only_error(&c).problem, Problem::BadDeviceRange);

    // A guest address inside the emulated GIC/UART window.
    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("gic", 0x0a00_0000, 0x0800_0000, 0x1000, &[]));
    let e = only_error(&c);
    assert_eq!(e.field, "guest_base");
    assert!(e.to_string().contains("emulated GIC and UART"), "{e}");

    // compatible strings: printable, bounded.
    for bad in [
        vec![String::new()],
        vec!["a b".to_string()],
        vec!["x".repeat(65)],
    ] {
        let mut c = sample();
        let mut d = device("rtc", 0x0a00_0000, 0x0a00_0000, 0x1000, &[]);
        d.compatible = bad;
        c.domains[1].devices.push(d);
        assert_eq!(only_error(&c).problem, Problem::BadCompatible);
    }

    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("ppi", 0x0a00_0000, 0x0a00_0000, 0x1000, &[27]));
    assert_eq!(only_error(&c).problem, Problem::NotAnSpi(27));

    let mut c = sample();
    c.domains[1]
        .devices
        .push(device("dup", 0x0a00_0000, 0x0a00_0000, 0x1000, &[40]));
    let e = only_error(&c);
    assert_eq!(
        (e.item, e.problem),
        (
            Item::Device {
                domain: 3,
                device: 0
            },
            Problem::SpiShared {
                intid: 40,
                domain: "web".to_string()
            }
        )
    );
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let mut c = sample();
    c.pools[1].scheduler = "bfs".to_string();
    c.domains[0].vcpus = 0;
    c.domains[2].pool = "gone".to_string();
    let fields: Vec<_> = c.validate().iter().map(|e| (e.item, e.field)).collect();
    assert_eq!(
        fields,
        [
            (Item::Pool(1), "scheduler"),
            (Item::Domain(0), "vcpus"),
            (Item::Domain(2), "pool")
        ]
    );
}

#[test]
fn encoding_round_trips_and_loads() {
    let mut c = sample();
    c.domains[1].image = GuestImage::File {
        path: "guests/linux/Image".to_string(),
        initramfs: Some("guests/linux/rootfs.cpio".to_string()),
    };
    c.domains[3].image = GuestImage::File {
        path: "micro-bench.flat".to_string(),
        initramfs: None,
    };
    c.domains[2].console = Console::None;
    c.domains[2].params.extratime = false;
    let bytes = encode(&c);
    assert_eq!(&bytes[..4], b"HVCF");
    assert_eq!(decode(&bytes), Ok(c.clone()));
    assert_eq!(Config::load(&bytes), Ok(c));
    assert_eq!(decode(&encode(&Config::default())), Ok(Config::default()));
}

#[test]
fn damaged_blobs_are_refused() {
    let bytes = encode(&sample());
    for len in 0..bytes.len() {
        assert!(decode(&bytes[..len]).is_err(), "prefix of {len} bytes");
    }
    let mut bad = bytes.clone();
    bad[0] = b'X';
    assert_eq!(decode(&bad), Err(DecodeError::BadMagic));
    let mut bad = bytes.clone();
    bad[4] = 9;
    assert_eq!(decode(&bad), Err(DecodeError::UnsupportedVersion(9)));
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x40;
    assert_eq!(decode(&bad), Err(DecodeError::ChecksumMismatch));
    let mut bad = bytes.clone();
    bad.push(0);
    assert!(matches!(
        decode(&bad),
        Err(DecodeError::TrailingBytes { .. })
    ));

    let mut invalid = sample();
    invalid.domains[0].vcpus = 0;
    match Config::load(&encode(&invalid)) {
        Err(LoadError::Invalid(e)) => assert_eq!(e.field, "vcpus"),
        other => panic!("{other:?}"),
    }
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256), flip in any::<usize>()) {
        let _ = decode(&bytes);
        // A valid blob with one byte changed is refused (checksum or header).
        let mut blob = encode(&sample());
        let at = flip % blob.len();
        blob[at] ^= 0x5a;
        prop_assert!(decode(&blob).is_err());
    }
}

#[test]
fn cpu_lists() {
    assert_eq!(
        parse_cpu_list("0-3, 7").unwrap().iter().collect::<Vec<_>>(),
        [0, 1, 2, 3, 7]
    );
    assert_eq!(format_cpu_list(&cpus("7,0-3,5,6")), "0-3,5-7");
    assert_eq!(format_cpu_list(&CpuSet::new()), "");
    assert_eq!(parse_cpu_list(""), Err(CpuListError::Empty));
    assert_eq!(parse_cpu_list("1,,2"), Err(CpuListError::Empty));
    assert_eq!(parse_cpu_list("a"), Err(CpuListError::NotANumber));
    assert_eq!(
        parse_cpu_list("3-1"),
        Err(CpuListError::Reversed { first: 3, last: 1 })
    );
    assert_eq!(parse_cpu_list("512"), Err(CpuListError::TooLarge(512)));
}

#[test]
fn a_domain_becomes_its_stage2_map() {
    use crate::arm::stage2::{Attributes, IpaSize, Stage2, TableAllocator};
    /// Tables in a Vec, at fake addresses from 0x10_0000_0000.
    struct Tables(Vec<crate::arm::stage2::Table>);
    impl TableAllocator for Tables {
        fn allocate(&mut self, pages: usize) -> Option<u64> {
            while !self.0.len().is_multiple_of(pages) {
                self.0.push([0; 512]);
            }
            let first = self.0.len();
            self.0.extend((0..pages).map(|_| [0; 512]));
            Some(0x10_0000_0000 + first as u64 * 4096)
        }
        fn free(&mut self, _: u64, _: usize) {}
        fn table(&self, address: u64) -> Option<&crate::arm::stage2::Table> {
            self.0.get(((address - 0x10_0000_0000) / 4096) as usize)
        }
        fn table_mut(&mut self, address: u64) -> Option<&mut crate::arm::stage2::Table> {
            self.0.get_mut(((address - 0x10_0000_0000) / 4096) as usize)
        }
    }
    let config = sample();
    let motor = &config.domains[3];
    let mut tables = Tables(Vec::new());
    // Its device as the boot plans it (checked against a host that keeps
    // only its RAM).
    let host = crate::passthrough::HostMachine {
        interrupt_limit: 288,
        ..Default::default()
    };
    let uart = crate::passthrough::plan(&motor.devices[0], Some(&host)).unwrap();
    let regions = [motor.ram_region(0x9000_0000), uart.stage2_region()];
    let map = Stage2::with_regions(IpaSize::Bits40, &regions, &mut tables).unwrap();
    let ram = map.translate(&tables, 0x4000_1234).unwrap();
    assert_eq!((ram.pa, ram.attrs), (0x9000_1234, Attributes::RAM));
    assert_eq!(map.translate(&tables, 0x4000_0000 + (64 << 20)), None);
    let uart = map.translate(&tables, 0x0904_0010).unwrap();
    assert_eq!((uart.pa, uart.attrs), (0x0904_0010, Attributes::DEVICE));
}

#[test]
fn a_board_without_a_config_gets_one_pool() {
    let config = Config::single_pool(cpus("0-3"));
    assert_eq!(config.validate(), vec![]);
    assert_eq!(config.pools[0].scheduler, "credit2");
}

#[test]
fn xen_cpupools_become_pool_configs() {
    let xen = platform::dt::xen_cpupool::XenCpupool {
        name: "cpupool_b".to_string(),
        path: "/chosen/cpupool_b".to_string(),
        phandle: None,
        cpus: cpus("2-3"),
        scheduler: Some("null".to_string()),
        implicit: false,
    };
    let pool = pool_from_xen(&xen);
    assert_eq!(pool.name, "cpupool_b");
    assert_eq!(pool.scheduler, "null");
    assert_eq!(pool.cpus, cpus("2-3"));
    assert_eq!(pool.granularity(), Some(Granularity::Cpu));
    let default = pool_from_xen(&platform::dt::xen_cpupool::XenCpupool {
        scheduler: None,
        ..xen
    });
    assert_eq!(default.scheduler, "credit2");
    let config = Config {
        pools: vec![pool, default],
        domains: vec![],
    };
    // Same name twice (and the same CPUs): the shared validator catches it.
    assert_eq!(config.validate().len(), 3);
}

#[test]
fn xen_cpupools_replace_the_automatic_layout_but_not_listed_pools() {
    use platform::dt::xen_cpupool::{XenCpupool, XenCpupools, XenDomainPool};
    let xen = XenCpupools {
        pools: vec![
            XenCpupool {
                name: "a53".to_string(),
                path: "/chosen/a53".to_string(),
                phandle: Some(0x40),
                cpus: cpus("0-3"),
                scheduler: Some("null".to_string()),
                implicit: false,
            },
            XenCpupool {
                name: "unassigned".to_string(),
                path: String::new(),
                phandle: None,
                cpus: cpus("4-7"),
                scheduler: None,
                implicit: true,
            },
        ],
        domains: vec![XenDomainPool {
            domain: "fast".to_string(),
            path: "/chosen/fast".to_string(),
            pool: "unassigned".to_string(),
        }],
        warnings: vec![],
    };
    // No nodes: nothing changes.
    let (same, lines) = with_xen_cpupools(None, &XenCpupools::default());
    assert_eq!((same, lines.len()), (None, 0));
    // No config: the nodes' pools.
    let (config, lines) = with_xen_cpupools(None, &xen);
    let config = config.unwrap();
    let names: Vec<&str> = config.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a53", "unassigned"]);
    assert_eq!(config.pools[0].scheduler, "null");
    assert_eq!(
        lines[0],
        "config: pool 'a53' (cpupool-sched) with CPUs 0-3, null (from /chosen/a53)"
    );
    assert!(
        lines[1].ends_with("(from CPUs no xen,cpupool node names)"),
        "{}",
        lines[1]
    );
    // A config without pools: its domains placed by domain-cpupool.
    let mut fast = DomainConfig::new("fast", "Pool-0");
    fast.vcpus = 2;
    let slow = DomainConfig::new("slow", "a53");
    let without_pools = Config {
        pools: vec![],
        domains: vec![fast, slow],
    };
    let (config, lines) = with_xen_cpupools(Some(without_pools), &xen);
    let config = config.unwrap();
    assert_eq!(config.domains[0].pool, "unassigned");
    assert_eq!(config.domains[1].pool, "a53");
    assert!(lines.iter().any(|l| l
        == "config: domain 'fast' goes to pool 'unassigned' (/chosen/fast domain-cpupool; the config said 'Pool-0')"));
    assert_eq!(config.validate(), vec![]);
    // A config with pools keeps them.
    let listed = sample();
    let (kept, lines) = with_xen_cpupools(Some(listed.clone()), &xen);
    assert_eq!(kept, Some(listed));
    assert_eq!(
        lines,
        [
            "config: the image's config lists 3 pool(s); the device tree's 1 xen,cpupool node(s) are ignored"
        ]
    );
}

mod applying {
    use super::*;
    use sched::lockstep::RecordingPlatform;
    use sched::{PoolId, System, SystemConfig, Topology};

    /// `--smp 8,clusters=2,cores=2,threads=2`, or 4 CPUs of one cluster.
    fn system(cpus: usize) -> System {
        let topology = if cpus == 8 {
            Topology::uniform(1, 2, 2, 2)
        } else {
            Topology::uniform(1, 1, 2, 2)
        };
        System::new(topology, SystemConfig::default(), sched::schedulers::create)
    }

    #[test]
    fn the_sample_builds_its_pools_and_domains() {
        let config = sample();
        let mut sys = system(8);
        let platform = RecordingPlatform::default();
        let applied = apply(&config, &mut sys, &platform);
        assert_eq!(applied.warnings, vec![]);
        assert_eq!(
            applied.pools,
            [Some(PoolId(0)), Some(PoolId(1)), Some(PoolId(2))]
        );
        let smt = sys.pool_info(PoolId(1)).unwrap();
        assert_eq!(smt.granularity, Granularity::Core);
        assert_eq!(smt.cpus, cpus("4-5"));
        assert_eq!(smt.unit_size, 2, "fixed placement: a unit per core");
        let rt = sys.pool_info(PoolId(2)).unwrap();
        assert_eq!(rt.scheduler, "null");
        assert_eq!(rt.cpus, cpus("7"));
        assert_eq!(sys.pool_of_cpu(6), None, "CPU 6 stays free");
        for (index, domain) in config.domains.iter().enumerate() {
            let id = applied.domains[index].unwrap();
            let (pool_index, _) = config.pool(&domain.pool).unwrap();
            assert_eq!(sys.domain_pool(id), applied.pools[pool_index]);
            assert_eq!(sys.domain_vcpus(id).unwrap().len(), domain.vcpus as usize);
        }
        // The affinities are the scheduler's, not only the config's.
        let (web, motor) = (applied.domains[1].unwrap(), applied.domains[3].unwrap());
        assert_eq!(sys.domain_affinity(web).map(|a| a.1), Some(cpus("4")));
        assert_eq!(sys.domain_affinity(motor).map(|a| a.0), Some(cpus("7")));
        sys.check_invariants().unwrap();
    }

    #[test]
    fn a_config_without_pools_gets_pool_0_of_every_cpu() {
        let mut config = sample();
        config.pools.clear();
        config.domains.truncate(2);
        for domain in &mut config.domains {
            domain.pool = "Pool-0".to_string();
        }
        config.domains[1].pool = "big".to_string();
        assert_eq!(config.validate(), vec![]);
        let mut sys = system(8);
        let platform = RecordingPlatform::default();
        let applied = apply(&config, &mut sys, &platform);
        assert_eq!(applied.pools, [Some(PoolId(0))]);
        assert_eq!(sys.pool_info(PoolId(0)).unwrap().cpus, cpus("0-7"));
        assert!(applied.domains[0].is_some());
        // No big pool on a machine of one class: that domain is left out.
        assert_eq!(
            applied.warnings,
            [ApplyWarning::DomainWithoutPool { domain: 1 }]
        );
        sys.check_invariants().unwrap();
    }

    #[test]
    fn missing_cpus_and_refused_pools_are_warnings() {
        // Four CPUs: the smt and realtime pools have none of theirs.
        let config = sample();
        let mut sys = system(4);
        let platform = RecordingPlatform::default();
        let applied = apply(&config, &mut sys, &platform);
        assert_eq!(applied.pools, [Some(PoolId(0)), None, None]);
        assert_eq!(
            applied.warnings,
            [
                ApplyWarning::MissingCpus {
                    pool: 1,
                    cpus: cpus("4-5")
                },
                ApplyWarning::MissingCpus {
                    pool: 2,
                    cpus: cpus("7")
                },
                ApplyWarning::DomainWithoutPool { domain: 1 },
                ApplyWarning::DomainWithoutPool { domain: 2 },
                ApplyWarning::DomainWithoutPool { domain: 3 },
            ]
        );
        assert!(applied.domains[0].is_some());
        let text = Describe(&config, &applied.warnings[0]).to_string();
        assert_eq!(text, "pool 'smt': CPUs 4-5 are not online; left out");

        // Half a core in a core-granularity pool: sched refuses it.
        let mut config = sample();
        config.pools[1].cpus = cpus("4");
        let mut sys = system(8);
        let applied = apply(&config, &mut sys, &platform);
        assert_eq!(applied.pools[1], None);
        assert!(matches!(
            applied.warnings[0],
            ApplyWarning::PoolFailed {
                pool: 1,
                error: sched::SystemError::IncompleteResource { .. }
            }
        ));
        assert_eq!(sys.pool_of_cpu(4), None, "the refused pool's CPU is free");
        let text = Describe(&config, &applied.warnings[0]).to_string();
        assert!(text.starts_with("pool 'smt' not created: "), "{text}");
        sys.check_invariants().unwrap();
    }
}
