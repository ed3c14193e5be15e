use super::x86::SVM_WITH_NPT;
use super::*;

/// Console lines of a boot that names dom1 `pinned` and dumps a trace
/// in which dom1 runs on `cpus` (one interval each).
fn pinned_console(cpus: &[usize]) -> Vec<String> {
    let event = |time_ns, domain| trace::Event {
        time_ns,
        kind: trace::Kind::Switch,
        domain,
        vcpu: 0,
        arg: 0,
    };
    let trace = trace::Trace {
        classes: trace::ClassSet::DEFAULT,
        origin: trace::Origin::Boot,
        started_ns: 0,
        stopped_ns: 1_000,
        cpus: (0..4)
            .map(|cpu| trace::text::CpuTrace {
                events: if cpus.contains(&cpu) {
                    vec![event(10, 1), event(20, trace::IDLE_DOMAIN)]
                } else {
                    Vec::new()
                },
                ..Default::default()
            })
            .collect(),
    };
    let mut lines =
        vec!["[cpu0] INFO  domain 1 (pinned): 1 vCPUs, 32 MiB at 0x40000000".to_string()];
    trace.encode(|line| lines.push(line.to_string()));
    lines
}

#[test]
fn the_pinned_check_fails_on_a_run_outside_the_affinity_or_no_run() {
    assert_eq!(
        verify_pinned(&pinned_console(&[2]), &[("pinned", &[2])]),
        Ok(())
    );
    let outside = verify_pinned(&pinned_console(&[2, 3]), &[("pinned", &[2])]).unwrap_err();
    assert!(outside.contains("ran on cpu 3"), "{outside}");
    let never = verify_pinned(&pinned_console(&[]), &[("pinned", &[2])]).unwrap_err();
    assert!(never.contains("never ran"), "{never}");
    let unknown = verify_pinned(&pinned_console(&[2]), &[("other", &[2])]).unwrap_err();
    assert!(unknown.contains("no domain 'other'"), "{unknown}");
}

#[test]
fn linux_timer_counts_are_read_from_proc_interrupts() {
    let lines: Vec<String> = [
        "[dom1]            CPU0       CPU1       CPU2       CPU3       ",
        "[dom1] ~ # cat /proc/interrupts | grep arch_timer",
        "[dom1]  11:        898          0        842        661     GICv3  27 Level     arch_timer",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    let arm = LinuxPlatform::Arm(Gic::V3).timer_row_end();
    assert_eq!(linux_timer_counts(&lines, arm), Ok(vec![898, 0, 842, 661]));
    let gicv2 = vec!["[dom1]  11:   5   6   7   8     GIC-0  27 Level     arch_timer".to_string()];
    assert_eq!(linux_timer_counts(&gicv2, arm), Ok(vec![5, 6, 7, 8]));
    assert!(linux_timer_counts(&lines[..2], arm).is_err());
    let short = vec!["[dom1]  11:   5   6   GIC-0  27 Level     arch_timer".to_string()];
    assert!(linux_timer_counts(&short, arm).is_err());
    // x86: the local APIC timer's row, and the echo of a typed grep is not it.
    let x86 = vec![
        "[dom1] ~ # cat /proc/interrupts | grep 'Local timer interrupts'".to_string(),
        "[dom1] LOC:       1503       1187        902        877   Local timer interrupts"
            .to_string(),
    ];
    assert_eq!(
        linux_timer_counts(&x86, LinuxPlatform::X86.timer_row_end()),
        Ok(vec![1503, 1187, 902, 877])
    );
}

/// The console of a healthy 8-CPU boot as the hypervisor's spec describes
/// it, with `skip` lines left out.
fn healthy_log(gic: &str, topology: &str, skip: &[&str]) -> Vec<String> {
    healthy_log_of(8, gic, topology, skip)
}

/// The console of a healthy boot of `cpus` CPUs, `skip` lines left out.
fn healthy_log_of(cpus: usize, gic: &str, topology: &str, skip: &[&str]) -> Vec<String> {
    let others = cpus - 1;
    let mut lines = vec![
        format!("[cpu0] INFO  topology: {topology}"),
        format!("[cpu0] INFO  gic: {gic} distributor at 0x8000000"),
    ];
    lines.extend((0..cpus).map(|n| format!("[cpu{n}] INFO  cpu {n} online")));
    lines.push(format!("[cpu0] INFO  smp: {cpus} of {cpus} CPUs online"));
    lines.extend((1..cpus).map(|n| format!("[cpu0] INFO  ipi: cpu {n} round trip ok")));
    lines.push(format!(
        "[cpu0] INFO  ipi: {others} of {others} round trips ok"
    ));
    lines.push(format!("[cpu0] INFO  tick: all {cpus} CPUs ticking"));
    lines.push(
        "[cpu0] INFO  coresidency: the CPUs do not name SMT threads (MPIDR.MT clear); checking the firmware topology's resources only"
            .to_string(),
    );
    lines
        .into_iter()
        .filter(|l| !skip.iter().any(|s| l.ends_with(s)))
        .collect()
}

fn all_met(scenario: &QemuScenario, lines: &[String]) -> bool {
    scenario.expectations().iter().all(|e| e.is_met(lines))
}

/// Whether `scenario` asks for the co-residency line.
fn checks_coresidency(scenario: &QemuScenario) -> bool {
    let pattern = coresidency_at_least(0).to_string();
    scenario
        .expectations()
        .iter()
        .any(|e| e.to_string().contains(&pattern) || format!("{e:?}").contains("busiest"))
}

#[test]
fn every_overlap_check_states_a_bar_and_has_domains_contending_for_a_shared_pool() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for scenario in SCENARIOS {
        if !checks_coresidency(scenario) {
            assert_eq!(
                scenario.min_switches, 0,
                "{}: a bar without the check",
                scenario.name
            );
            continue;
        }
        assert!(
            scenario.min_switches > 0,
            "{}: checks overlaps but states no minimum of checked switches",
            scenario.name
        );
        let path = match scenario.config() {
            Some(path) => root.join(path),
            None => root.join(format!("boards/configs/{}.toml", scenario.board)),
        };
        // The layout only: image files (such as the Linux guest's, which
        // `cargo xtask guest-linux` writes) need not exist yet.
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", scenario.name, path.display()));
        let config = crate::config::parse(&text, None)
            .unwrap_or_else(|e| panic!("{}: {}: {e:?}", scenario.name, path.display()));
        let threads = smp_field(scenario.smp, "threads");
        let cores = smp_field(scenario.smp, "cores");
        let clusters = smp_field(scenario.smp, "clusters");
        let contended = config.pools.iter().any(|pool| {
            // CPUs per sched resource at the pool's granularity.
            // A -smp without topology fields (a board whose device tree
            // has it, as the Pi's one cluster): the pool is one resource.
            let described = scenario.smp.contains('=');
            let size = match pool.granularity.as_str() {
                "core" => threads,
                "cluster" if described => threads * cores,
                "socket" if described => threads * cores * clusters,
                "cluster" | "socket" => pool.cpus.len() as u64,
                _ => return false,
            };
            let resources = (pool.cpus.len() as u64).div_ceil(size).max(1);
            let units: u64 = config
                .domains
                .iter()
                .filter(|d| d.pool == pool.name)
                .map(|d| u64::from(d.vcpus).div_ceil(size))
                .sum();
            let domains = config
                .domains
                .iter()
                .filter(|d| d.pool == pool.name)
                .count();
            domains >= 2 && units > resources
        });
        assert!(
            contended,
            "{}: no core/cluster/socket pool of {} holds two domains with more sched units than the pool has resources: an overlap is impossible by construction, or switches are too rare to check",
            scenario.name,
            path.display()
        );
    }
}

/// A `-smp` field (`threads=2`), or 1 when it is not given.
fn smp_field(smp: &str, name: &str) -> u64 {
    smp.split(',')
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        .unwrap_or(1)
}

#[test]
fn a_healthy_boot_meets_every_boot_scenario() {
    for scenario in SCENARIOS {
        let Check::Boot { topology, cpus } = scenario.check else {
            continue;
        };
        let healthy_log =
            |gic: &str, topology: &str, skip: &[&str]| healthy_log_of(cpus, gic, topology, skip);
        let gic = if scenario.gic == Gic::V2 {
            "GICv2"
        } else {
            "GICv3"
        };
        assert!(
            all_met(scenario, &healthy_log(gic, topology, &[])),
            "{}",
            scenario.name
        );
        let other = if gic == "GICv2" { "GICv3" } else { "GICv2" };
        assert!(!all_met(scenario, &healthy_log(other, topology, &[])));
    }
}

/// Run-time lines one second apart in which dom1 and dom2 get
/// `light_ms` and `heavy_ms` of CPU time a second (after a skewed start).
fn runtime_log(light_ms: u64, heavy_ms: u64, seconds: u64) -> Vec<String> {
    let mut lines = vec!["[dom1] [vcpu0] progress 1".to_string()];
    for t in 1..=seconds {
        // The first second is boot: dom1 alone.
        let (l, h) = (500 + (t - 1) * light_ms, (t - 1) * heavy_ms);
        lines.push(format!(
            "[cpu0] INFO  sched: runtime at {} ms: dom1 {} ns, dom2 {} ns",
            t * 1000,
            l * 1_000_000,
            h * 1_000_000
        ));
    }
    lines
}

#[test]
fn the_weights_check_computes_the_share_over_its_window() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-guests-weights")
        .unwrap();
    assert_eq!(scenario.config(), Some("boards/configs/tests/weights.toml"));
    assert!(all_met(scenario, &runtime_log(333, 667, 14)));
    assert!(!all_met(scenario, &runtime_log(333, 667, 13)));
    assert!(scenario.verify(&runtime_log(333, 667, 14)).is_ok());
    // 1:1.9 is within 10 % of 1:2; 1:1.7 and 1:1 are not; dom1's skewed
    // first second is outside the window.
    assert!(scenario.verify(&runtime_log(345, 655, 14)).is_ok());
    let err = scenario.verify(&runtime_log(370, 630, 14)).unwrap_err();
    assert!(err.contains("dom2/dom1 CPU time 1.70"), "{err}");
    assert!(scenario.verify(&runtime_log(500, 500, 14)).is_err());
    assert!(scenario.verify(&runtime_log(333, 667, 5)).is_err());
    assert!(scenario.verify(&runtime_log(0, 667, 14)).is_err());
    // Other checks have nothing to verify.
    assert!(SCENARIOS[0].verify(&[]).is_ok());
}

#[test]
fn a_teardown_must_give_the_heap_back_its_ram() {
    let line = |before: u64, after: u64| {
        format!(
            "[cpu0] INFO  domain 3 (quitter): torn down: 64 MiB of RAM, 4 stage-2 tables and VMID 3 freed; heap in use {before} -> {after} KiB"
        )
    };
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-guests-reset")
        .unwrap();
    assert_eq!(scenario.config(), Some("boards/configs/tests/reset.toml"));
    assert!(scenario.verify(&[line(200_000, 134_000)]).is_ok());
    assert!(scenario.verify(&[line(200_000, 190_000)]).is_err());
    assert!(scenario.verify(&[line(200_000, 210_000)]).is_err());
    assert!(
        scenario
            .verify(&["domain 3: torn down: lots of RAM".to_string()])
            .is_err()
    );
    assert!(
        scenario
            .verify(&["[dom1] [vcpu0] progress 3".to_string()])
            .is_ok()
    );
}

#[test]
fn a_restart_needs_a_second_start_after_it() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-guests-reset")
        .unwrap();
    let Check::GuestsInOrder {
        expect, sequences, ..
    } = scenario.check
    else {
        panic!("not a sequence check");
    };
    let mut lines: Vec<String> = expect.iter().map(|l| l.to_string()).collect();
    for sequence in sequences {
        lines.extend(sequence.iter().map(|l| l.to_string()));
    }
    lines.push("coresidency: 100000 switches checked on 2 shared resources (busiest: 100000 on cpus 4-7), 0 overlaps".into());
    assert!(all_met(scenario, &lines));
    // Started once only: the banner before the restart does not count twice.
    let second_start = lines
        .iter()
        .rposition(|l| l == "[dom2] test-guest: started at EL1")
        .unwrap();
    let mut once = lines.clone();
    once.remove(second_start);
    assert!(!all_met(scenario, &once));
    // No progress after the teardown.
    let mut stalled = lines.clone();
    let torn = stalled
        .iter()
        .position(|l| l.contains("torn down"))
        .unwrap();
    stalled.truncate(torn + 2);
    stalled.extend(expect.iter().map(|l| l.to_string()));
    assert!(!all_met(scenario, &stalled));
}

#[test]
fn the_panic_scenario_needs_progress_after_the_panic() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-linux-panic")
        .unwrap();
    let progress = |n: u32| {
        vec![
            format!("[dom2] [vcpu0] progress {n}"),
            format!("[dom2] [vcpu1] progress {n}"),
            format!("[dom3] [vcpu0] progress {n}"),
            "[cpu0] INFO  coresidency: 100000 switches checked on 1 shared resources (busiest: 100000 on cpus 4-7), 0 overlaps"
                .to_string(),
            format!("[cpu0] INFO  sched: runtime at {n} ms: dom1 1 ns"),
        ]
    };
    let mut before: Vec<String> =
        vec!["[dom1] [    0.79] GICv3: CPU1: found redistributor 1 region 0:0x80c0000".into()];
    before.extend(progress(1));
    before.extend(progress(2));
    before.push("[dom1] [    8.54] Kernel panic - not syncing: VFS: no root".into());
    before.push("[dom1] [    8.72] ---[ end Kernel panic - not syncing: VFS: no root ]---".into());
    // Everything stops with Linux: not met.
    assert!(!all_met(scenario, &before));
    // One period after the panic is not enough.
    let mut one = before.clone();
    one.extend(progress(3));
    assert!(!all_met(scenario, &one));
    // Two periods, with the co-residency checker finding no overlap: met.
    let mut two = one.clone();
    two.extend(progress(4));
    assert!(all_met(scenario, &two));
    // An overlap reported after the panic does not count.
    let overlapping: Vec<String> = two
        .iter()
        .map(|l| l.replace(", 0 overlaps", ", 1 overlaps"))
        .collect();
    assert!(!all_met(scenario, &overlapping));
}

#[test]
fn the_switch_cost_scenario_needs_every_kind_of_switch() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == SWITCH_COST_SCENARIO)
        .unwrap();
    let line = |n4: u64| {
        vec![
            format!(
                "[cpu0] INFO  sched: switch cost in ticks of 62500000 Hz: save+load n=900 avg=30 min=20 max=400; \
                 plain n=100 avg=200 min=90 max=900; sync2 n=50 avg=700 min=300 max=9000; \
                 sync4 n={n4} avg=1500 min=700 max=20000; ipi n={n4} avg=90 min=20 max=500"
            ),
            "[cpu0] INFO  coresidency: 100000 switches checked on 3 shared resources (busiest: 100000 on cpus 4-7), 0 overlaps"
                .to_string(),
        ]
    };
    assert!(all_met(scenario, &line(20)));
    assert!(!all_met(scenario, &line(0)));
}

#[test]
fn runtime_lines_parse_and_others_do_not() {
    assert_eq!(
        parse_runtime_line("[cpu0] INFO  sched: runtime at 2000 ms: dom1 5 ns, dom3 70 ns"),
        Some(RuntimeLine {
            at_ms: 2000,
            domains: vec![(1, 5), (3, 70)]
        })
    );
    for bad in [
        "[dom1] [vcpu0] progress 3",
        "sched: runtime at x ms: dom1 5 ns",
        "sched: runtime at 5 ms: dom1 5 us",
        "sched: runtime at 5 ms: vm1 5 ns",
        "sched: runtime at 5 ms: dom1",
    ] {
        assert_eq!(parse_runtime_line(bad), None, "{bad}");
    }
}

#[test]
fn each_missing_line_is_noticed() {
    let scenario = &SCENARIOS[0];
    let topology = "sockets=1 clusters=2 cores=8 threads=8";
    for missing in [
        "topology: sockets=1 clusters=2 cores=8 threads=8",
        "cpu 0 online",
        "cpu 7 online",
        "smp: 8 of 8 CPUs online",
        "ipi: cpu 1 round trip ok",
        "ipi: cpu 7 round trip ok",
        "ipi: 7 of 7 round trips ok",
        "tick: all 8 CPUs ticking",
    ] {
        let lines = healthy_log("GICv3", topology, &[missing]);
        assert!(!all_met(scenario, &lines), "{missing} not required");
    }
    // The SMT scenario needs its own core count.
    assert!(!all_met(
        &SCENARIOS[2],
        &healthy_log("GICv3", topology, &[])
    ));
}

#[test]
fn the_pi_boot_needs_four_cpus_the_gic_400_and_its_topology() {
    let pi = SCENARIOS
        .iter()
        .find(|s| s.name == "rpi4-raspi4b-boot")
        .unwrap();
    let topology = "sockets=1 clusters=1 cores=4 threads=4";
    let Check::BootWithGuests { expect, .. } = pi.check else {
        panic!("the Pi scenario runs guests");
    };
    let with_guests = |skip: &[&str]| {
        let mut lines = healthy_log_of(4, "GICv2", topology, skip);
        lines.extend(
            expect
                .iter()
                .filter(|e| !skip.contains(e))
                .map(|e| format!("[cpu0] INFO  {e} ...")),
        );
        lines
    };
    assert!(all_met(pi, &with_guests(&[])));
    // The guests are required, and so is the GIC's virtualization interface.
    for missing in expect {
        assert!(!all_met(pi, &with_guests(&[missing])), "{missing}");
    }
    assert!(!all_met(pi, &healthy_log_of(4, "GICv2", topology, &[])));
    for missing in [
        "smp: 4 of 4 CPUs online",
        "cpu 3 online",
        "ipi: 3 of 3 round trips ok",
        "tick: all 4 CPUs ticking",
    ] {
        let lines = with_guests(&[missing]);
        assert!(!all_met(pi, &lines), "{missing} not required");
    }
    // Only the boot CPU up (the spin table not used): a failure.
    let alone = [
        format!("[cpu0] INFO  topology: {topology}"),
        "[cpu0] INFO  gic: GICv2 driver up".to_string(),
        "[cpu0] INFO  cpu 0 online".to_string(),
        "[cpu0] INFO  smp: 1 of 4 CPUs online".to_string(),
        "[cpu0] INFO  ipi: 0 of 0 round trips ok".to_string(),
        "[cpu0] INFO  tick: all 1 CPUs ticking".to_string(),
    ];
    assert!(!all_met(pi, &alone));
    let mut gicv3 = with_guests(&[]);
    for line in &mut gicv3 {
        *line = line.replace("GICv2", "GICv3");
    }
    assert!(!all_met(pi, &gicv3));
    let (program, args) =
        qemu::command(crate::board::find("rpi4").unwrap(), &pi.options()).unwrap();
    assert_eq!(program, "qemu-system-aarch64");
    assert!(args.join(" ").contains("-machine raspi4b "));
}

/// The big.LITTLE edit applied with dtc to QEMU's own virt device tree
/// (the fixture QEMU 10 made with this scenario's `-smp`) gives the
/// classes the scenario expects, through the hypervisor's own parser.
#[test]
fn the_big_little_edit_makes_two_capacity_classes() {
    if Command::new("dtc").arg("--version").output().is_err() {
        eprintln!("note: no dtc here; `cargo xtask setup` installs it");
        return;
    }
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-big-little")
        .unwrap();
    let Check::BootWithGuests {
        dtb_edit: Some(edit),
        expect,
        config: Some(config),
        ..
    } = scenario.check
    else {
        panic!("qemu-virt-big-little edits the device tree");
    };
    assert_eq!(scenario.smp, qemu::FLAT_SMP);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fixture = root.join("../shared/fixtures/qemu/qemu-virt-smp8.dtb");
    let dir = std::env::temp_dir().join(format!("xtask-biglittle-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let dts = Command::new("dtc")
        .args(["-q", "-I", "dtb", "-O", "dts"])
        .arg(&fixture)
        .output()
        .unwrap();
    let source = dir.join("edited.dts");
    let mut text = String::from_utf8(dts.stdout).unwrap();
    text.push_str(edit);
    fs::write(&source, text).unwrap();
    let edited = dir.join("edited.dtb");
    let status = Command::new("dtc")
        .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
        .arg(&edited)
        .arg(&source)
        .status()
        .unwrap();
    assert!(status.success());
    let machine = platform::dt::parse(&fs::read(&edited).unwrap()).unwrap();
    let topology = machine.topology().unwrap();
    let mut report = String::new();
    platform::dt::write_topology_report(&mut report, &machine, &topology).unwrap();
    let class_lines: Vec<&str> = expect
        .iter()
        .copied()
        .filter(|e| e.starts_with("big.LITTLE: "))
        .collect();
    assert_eq!(class_lines.len(), 2);
    for line in class_lines {
        assert!(report.contains(line), "{line} not in\n{report}");
    }
    // The config has no pools and names the automatic ones.
    let config = crate::config::load(&root.join(config)).unwrap();
    assert!(config.pools.is_empty());
    let pools = hv::config::automatic_pools(&machine.cpu_classes(), &topology.enabled());
    for domain in &config.domains {
        assert!(
            pools.iter().any(|p| p.name == domain.pool),
            "{}",
            domain.pool
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_ipi_summary_must_come_after_the_round_trips() {
    let mut lines = healthy_log("GICv3", "sockets=1 clusters=2 cores=8 threads=8", &[]);
    let summary = lines
        .iter()
        .position(|l| l.contains("7 of 7 round trips"))
        .unwrap();
    let moved = lines.remove(summary);
    lines.insert(0, moved);
    assert!(!all_met(&SCENARIOS[0], &lines));
}

#[test]
fn names_are_unique_and_bad_dtb_expects_a_complaint() {
    for (i, s) in SCENARIOS.iter().enumerate() {
        assert!(SCENARIOS[..i].iter().all(|o| o.name != s.name));
        assert!(s.name.starts_with(&format!("{}-", s.board)), "{}", s.name);
        assert!(crate::board::find(s.board).is_ok(), "{}", s.name);
    }
    let bad = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-bad-dtb")
        .unwrap();
    let complaint = ["[cpu0] ERROR device tree: no interrupt controller; stopping".to_string()];
    assert!(all_met(bad, &complaint));
    assert!(!all_met(bad, &["[cpu0] INFO  device tree: ok".to_string()]));
}

/// The console of a healthy x86 boot of `cpus` CPUs, `skip` lines left out.
fn healthy_x86_log(
    apic: &str,
    svm: &str,
    topology: &str,
    cpus: usize,
    skip: &[&str],
) -> Vec<String> {
    let mut lines = vec![
        format!("[cpu0] INFO  apic: {apic} driver up (boot CPU apic id 0x0)"),
        format!("[cpu0] INFO  {svm}, …)"),
        format!("[cpu0] INFO  topology: {topology}"),
    ];
    lines.extend((0..cpus).map(|n| format!("[cpu{n}] INFO  cpu {n} online (apic id {n:#x})")));
    lines.push(format!("[cpu0] INFO  smp: {cpus} of {cpus} CPUs online"));
    lines.extend((1..cpus).map(|n| format!("[cpu0] INFO  ipi: cpu {n} round trip ok (40 us)")));
    let others = cpus - 1;
    lines.push(format!(
        "[cpu0] INFO  ipi: {others} of {others} round trips ok"
    ));
    lines.push(format!(
        "[cpu0] INFO  ipi: set ping of {} CPUs ok",
        cpus / 2
    ));
    lines.push(format!(
        "[cpu0] INFO  ipi: all-but-self ping of {others} CPUs ok"
    ));
    lines.push(format!(
        "[cpu0] INFO  tick: all {cpus} CPUs ticking every 10 ms"
    ));
    lines.push(
        "[cpu0] INFO  coresidency: the CPUs' own view of their SMT siblings agrees with the firmware topology"
            .to_string(),
    );
    lines
        .into_iter()
        .filter(|l| !skip.iter().any(|s| l.contains(s)))
        .collect()
}

#[test]
fn x86_scenarios_need_their_apic_mode_topology_and_every_cpu() {
    let x86: Vec<&QemuScenario> = SCENARIOS
        .iter()
        .filter(|s| matches!(s.check, Check::X86Boot { .. }))
        .collect();
    assert_eq!(x86.len(), 4);
    assert!(x86.iter().all(|s| s.board == "qemu-x86"));
    for scenario in x86 {
        let Check::X86Boot {
            topology,
            cpus,
            apic,
            svm,
        } = scenario.check
        else {
            panic!("{} is not an x86 boot", scenario.name);
        };
        assert!(
            all_met(scenario, &healthy_x86_log(apic, svm, topology, cpus, &[])),
            "{}",
            scenario.name
        );
        let other = if apic == "xAPIC" { "x2APIC" } else { "xAPIC" };
        assert!(
            !all_met(scenario, &healthy_x86_log(other, svm, topology, cpus, &[])),
            "{}",
            scenario.name
        );
        for missing in [
            format!("topology: {topology}"),
            format!("cpu {} online", cpus - 1),
            format!("ipi: cpu {} round trip ok", cpus - 1),
            format!("smp: {cpus} of {cpus}"),
            "tick: all".to_string(),
            svm.to_string(),
            "set ping".to_string(),
            "all-but-self ping".to_string(),
        ] {
            let lines = healthy_x86_log(apic, svm, topology, cpus, &[&missing]);
            assert!(
                !all_met(scenario, &lines),
                "{}: {missing} not required",
                scenario.name
            );
        }
    }
    let smt = SCENARIOS.iter().find(|s| s.name == "qemu-x86-smt").unwrap();
    // The two-package topology is not the SMT one.
    assert!(!all_met(
        smt,
        &healthy_x86_log(
            "xAPIC",
            SVM_WITH_NPT,
            "sockets=2 clusters=2 cores=4 threads=4",
            8,
            &[]
        )
    ));
    // A CPU without SVM does not pass for one with it.
    let smt_topology = "sockets=1 clusters=1 cores=4 threads=8";
    let no_svm = healthy_x86_log("xAPIC", "svm: not available", smt_topology, 8, &[]);
    assert!(!all_met(smt, &no_svm));
    let x2apic = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-x86-x2apic")
        .unwrap();
    assert_eq!(x2apic.options().cpu, "EPYC,+svm,+npt,+x2apic");
    assert_eq!(smt.options().cpu, "EPYC,+svm,+npt");
    assert_eq!(smt.options().smp, "8,sockets=1,cores=4,threads=2");
}

#[test]
fn the_exception_report_must_name_vector_cr2_and_cpu() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-x86-exception-report")
        .unwrap();
    let report = |line: &str| {
        vec![
            "[cpu0] INFO  tick: all 2 CPUs ticking every 10 ms".to_string(),
            "[cpu0] WARN  test: reading 0x1000000000 on purpose (hv.fault-test=page-fault)"
                .to_string(),
            line.to_string(),
        ]
    };
    let good = "[cpu0] ERROR Unexpected exception 14 (page fault): error code 0x0 \
                RIP=0x2129cc CR2=0x1000000000 RSP=0x78fa30 RFLAGS=0x10206; parking this CPU";
    assert!(all_met(scenario, &report(good)));
    for bad in [
        good.replace("CR2=0x1000000000", "CR2=0x0"),
        good.replace(
            "exception 14 (page fault)",
            "exception 13 (general protection)",
        ),
        good.replace("[cpu0]", "[cpu1]"),
        good.replace("; parking this CPU", ""),
    ] {
        assert!(!all_met(scenario, &report(&bad)), "{bad}");
    }
    let prepared = prepared_on(scenario, "qemu-x86");
    let command = prepared.command_line();
    assert!(
        command.contains("-append hv.fault-test=page-fault"),
        "{command}"
    );
    // The report itself is allowed; any other exception is not.
    assert!(prepared.failure_in(good).is_none());
    assert!(
        prepared
            .failure_in("[cpu1] ERROR Unexpected exception 13 (general protection)")
            .is_some()
    );
}

#[test]
fn the_silent_ap_scenario_needs_the_cpu_left_out_and_the_rest_running() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-x86-silent-ap")
        .unwrap();
    let Check::X86SilentAp { expect, .. } = scenario.check else {
        panic!("qemu-x86-silent-ap is not a silent-AP check");
    };
    let left_out =
        "[cpu0] ERROR smp: cpu 3 (apic id 0x3) did not come online within 5 s; leaving it out";
    let mut log: Vec<String> = [
        left_out,
        "[cpu0] INFO  smp: 3 of 4 CPUs online",
        "[cpu0] INFO  ipi: 2 of 2 round trips ok",
        "[cpu0] INFO  tick: all 3 CPUs ticking every 10 ms",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    log.extend(expect.iter().map(|e| format!("[cpu0] INFO  {e}")));
    assert!(all_met(scenario, &log));
    for wrong in [
        left_out,
        "[cpu0] INFO  smp: 3 of 4 CPUs online",
        "[cpu0] INFO  tick: all 3 CPUs ticking every 10 ms",
    ] {
        let without: Vec<String> = log.iter().filter(|l| *l != wrong).cloned().collect();
        assert!(!all_met(scenario, &without), "met without {wrong}");
    }
    // All four CPUs up means the hook did not work.
    let all_up: Vec<String> = log
        .iter()
        .map(|l| l.replace("3 of 4 CPUs", "4 of 4 CPUs"))
        .collect();
    assert!(!all_met(scenario, &all_up));
    let prepared = prepared_on(scenario, "qemu-x86");
    let command = prepared.command_line();
    assert!(command.contains("-append hv.test-silent-ap=3"), "{command}");
    assert!(prepared.failure_in(left_out).is_none());
    assert!(
        prepared
            .failure_in("[cpu0] ERROR smp: cpu 2 (apic id 0x2) failed")
            .is_some()
    );
}

/// `scenario` prepared for `board` with a placeholder image and log
/// directory: enough to read its command line and failure patterns.
fn prepared_on(scenario: &QemuScenario, board: &str) -> Scenario {
    scenario
        .prepare(
            crate::board::find(board).unwrap(),
            Path::new("hv.elf"),
            Path::new("/tmp"),
        )
        .unwrap()
}

/// A hand-assembled arm64 `Image` that prints `text` on the PL011 at
/// 0x0900_0000 and spins: enough to check QEMU, `-kernel` and the console
/// pipe without the hypervisor.
fn tiny_image(text: &str) -> Vec<u8> {
    let code: [u32; 8] = [
        0xD2A1_2001, // movz x1, #0x0900, lsl #16   (PL011 data register)
        0x1000_00E2, // adr  x2, text               (0x60)
        0x3840_1443, // ldrb w3, [x2], #1
        0x3400_0063, // cbz  w3, done
        0x3900_0023, // strb w3, [x1]
        0x17FF_FFFD, // b    the ldrb
        0x1400_0000, // done: b .
        0xD503_201F, // nop
    ];
    let mut body: Vec<u8> = code.iter().flat_map(|c| c.to_le_bytes()).collect();
    body.extend(text.as_bytes());
    body.push(0);
    let size = 0x40 + body.len() as u64;
    let mut image = Vec::new();
    image.extend(0x1400_0010u32.to_le_bytes()); // b 0x40
    image.extend(0u32.to_le_bytes());
    image.extend(0x8_0000u64.to_le_bytes()); // text_offset
    image.extend(size.to_le_bytes()); // image_size
    image.extend([0u8; 32]); // flags, reserved
    image.extend(b"ARM\x64");
    image.extend(0u32.to_le_bytes());
    image.extend(body);
    image
}

#[test]
fn the_harness_reads_a_real_qemu_console() {
    if crate::qemu::probe("qemu-system-aarch64").is_err() {
        eprintln!("note: no QEMU >= 9 here; `cargo xtask setup` installs it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("xtask-smoke-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let image = dir.join("tiny.bin");
    let bytes = tiny_image("[cpu0] INFO  gic: GICv3 (tiny image)\n");
    crate::image::check_arm64_header(&bytes).unwrap();
    fs::write(&image, bytes).unwrap();
    let board = crate::board::find("qemu-virt").unwrap();
    let (program, args) = qemu::command(board, &SCENARIOS[0].options()).unwrap();
    let outcome = Scenario::new("smoke", program)
        .args(args)
        .kernel(&image)
        .timeout(Duration::from_secs(30))
        .expect(Expectation::contains("gic: GICv3 (tiny image)"))
        .run();
    assert!(outcome.passed(), "{}", outcome.report());
    // The same image cannot satisfy a real boot scenario.
    let outcome = Scenario::new("smoke-fails", program)
        .args(qemu::command(board, &SCENARIOS[0].options()).unwrap().1)
        .kernel(&image)
        .timeout(Duration::from_secs(3))
        .expect(Expectation::contains("smp: 8 of 8 CPUs online"))
        .run();
    assert!(
        matches!(outcome.result, Err(::tests::Failure::TimedOut { .. })),
        "{}",
        outcome.report()
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_bad_dtb_scenario_boots_with_an_edited_tree() {
    if crate::qemu::probe("qemu-system-aarch64").is_err() {
        eprintln!("note: no QEMU >= 9 here; `cargo xtask setup` installs it");
        return;
    }
    let dir = std::env::temp_dir().join(format!("xtask-baddtb-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let image = dir.join("tiny.bin");
    let complaint = "[cpu0] ERROR device tree: no interrupt controller; stopping\n";
    fs::write(&image, tiny_image(complaint)).unwrap();
    let board = crate::board::find("qemu-virt").unwrap();
    let bad = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-bad-dtb")
        .unwrap();
    let scenario = bad.prepare(board, &image, &dir).unwrap();
    let dtb = dir.join("dtb/qemu-virt-bad-dtb.dtb");
    assert!(
        scenario
            .command_line()
            .contains(&format!("-dtb {}", dtb.display()))
    );
    let dts = Command::new("dtc")
        .args(["-q", "-I", "dtb", "-O", "dts"])
        .arg(&dtb)
        .output()
        .unwrap();
    let dts = String::from_utf8_lossy(&dts.stdout);
    assert!(dts.contains("cpu-map") && !dts.contains("intc@8000000"));
    let outcome = scenario.timeout(Duration::from_secs(30)).run();
    assert!(outcome.passed(), "{}", outcome.report());
    fs::remove_dir_all(&dir).unwrap();
}

/// A Linux scenario ends at the first sign of a stuck CPU, whichever RCU
/// flavour the kernel runs, not at its timeout (these are the lines of a
/// real `qemu-virt-user-images` hang, a guest timer interrupt lost).
#[test]
fn linux_scenarios_fail_at_an_rcu_stall_of_any_flavour() {
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == "qemu-virt-user-images")
        .unwrap();
    let prepared = prepared_on(scenario, "qemu-virt");
    for stall in [
        "[dom1] [   26.949110] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:",
        "[dom1] [   26.949110] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
        "[dom1] [   27.020893] rcu: rcu_sched kthread timer wakeup didn't happen for 5254 jiffies! g-1095 f0x0 RCU_GP_WAIT_FQS(5) ->state=0x402",
        "[dom1] [   30.000000] rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: { 2-... } 5252 jiffies s: 93 root: 0x4/.",
        "[dom1] [   30.000000] rcu: INFO: rcu_sched self-detected stall on CPU",
    ] {
        assert!(
            prepared.failure_in(stall).is_some(),
            "not a failure: {stall}"
        );
    }
    for boot in [
        "[dom1] [    0.000000] rcu: Hierarchical RCU implementation.",
        "[dom1] [    0.000000] rcu: RCU calculated value of scheduler-enlistment delay is 25 jiffies.",
        "[dom1] [    0.273491] rcu: Hierarchical SRCU implementation.",
    ] {
        assert!(prepared.failure_in(boot).is_none(), "a failure: {boot}");
    }
}
