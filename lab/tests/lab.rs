//! Tests of the simulator, the SMT model's accounting, the workloads and
//! the matrix (determinism, targets, tables).

use std::cell::RefCell;
use std::rc::Rc;

use lab::matrix::{self, Bench, HostConfig, Scale, Scenario};
use lab::sim::{Costs, Ctx, GuestSpec, MachineSpec, Report, Sim, TaskIdx, Workload};
use lab::smt::{Class, SMT_FACTORS};
use lab::workloads::{Background, Hackbench, IoServer, Kernbench, Netperf, Stream};
use sched::{Granularity, Placement, Time, Topology};

fn machine(cores: u32, threads: u32, granularity: Granularity, costs: Costs) -> MachineSpec {
    MachineSpec {
        topology: Topology::uniform(1, 1, cores, threads),
        scheduler: "credit2".into(),
        granularity,
        placement: Placement::Spread,
        costs,
        pool_params: String::new(),
    }
}

fn one_guest(vcpus: u32, workload: impl Workload + 'static) -> Vec<GuestSpec> {
    vec![GuestSpec {
        vcpus,
        workload: Box::new(workload),
    }]
}

/// Shared log of what a probe workload saw.
#[derive(Default)]
struct Log {
    timers: Vec<(u64, Time)>,
    starts: Vec<(TaskIdx, Time, Time)>,
    bursts: Vec<(TaskIdx, Time)>,
}

/// One task per entry of `classes`; timers at `timers` (token, time) wake
/// task `token % tasks` with `work_ns`; finishes after `stop` bursts.
struct Probe {
    classes: Vec<Class>,
    timers: Vec<(u64, Time)>,
    work_ns: Time,
    run_at_start: bool,
    stop: usize,
    log: Rc<RefCell<Log>>,
}

impl Workload for Probe {
    fn tasks(&self) -> Vec<Class> {
        self.classes.clone()
    }
    fn start(&mut self, ctx: &mut Ctx) {
        for &(token, at) in &self.timers {
            ctx.timer(at, token);
        }
        if self.run_at_start {
            for t in 0..self.classes.len() {
                ctx.run(t, self.work_ns);
            }
        }
    }
    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        self.log.borrow_mut().bursts.push((task, ctx.now()));
        ctx.sleep(task);
    }
    fn timer(&mut self, token: u64, ctx: &mut Ctx) {
        self.log.borrow_mut().timers.push((token, ctx.now()));
        ctx.run(token as usize % self.classes.len(), self.work_ns);
    }
    fn started(&mut self, task: TaskIdx, woke_at: Time, now: Time) {
        self.log.borrow_mut().starts.push((task, woke_at, now));
    }
    fn finished(&self) -> bool {
        self.log.borrow().bursts.len() >= self.stop
    }
    fn report(&self, _now: Time) -> Report {
        Report::default()
    }
}

#[test]
fn events_fire_in_time_order_at_their_instant() {
    let log = Rc::new(RefCell::new(Log::default()));
    let probe = Probe {
        classes: vec![Class::Compute],
        // Raised out of order, two at the same instant.
        timers: vec![(3, 300_000), (1, 100_000), (2, 200_000), (4, 200_000)],
        work_ns: 10_000,
        run_at_start: false,
        // Tokens 2 and 4 wake the same task at the same instant: one burst.
        stop: 3,
        log: log.clone(),
    };
    let mut sim = Sim::new(
        &machine(1, 1, Granularity::Cpu, Costs::HYPERVISOR),
        one_guest(1, probe),
        1,
    )
    .unwrap();
    let stats = sim.run(10_000_000);
    assert!(stats.finished);
    let log = log.borrow();
    assert_eq!(
        log.timers,
        vec![(1, 100_000), (2, 200_000), (4, 200_000), (3, 300_000)],
        "by time, then in the order raised"
    );
    let times: Vec<Time> = log.bursts.iter().map(|&(_, t)| t).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[test]
fn wake_up_latency_is_ipi_plus_decision_plus_switch() {
    for costs in [
        Costs {
            ipi_ns: 7_000,
            switch_ns: 2_300,
            decision_ns: 1_100,
            rendezvous_ns: 0,
            rendezvous_wide_ns: 0,
        },
        Costs::HYPERVISOR,
        Costs::ZERO,
    ] {
        let log = Rc::new(RefCell::new(Log::default()));
        let probe = Probe {
            classes: vec![Class::Compute],
            timers: vec![(0, 1_000_000), (0, 2_000_000)],
            work_ns: 50_000,
            run_at_start: false,
            stop: 2,
            log: log.clone(),
        };
        let mut sim = Sim::new(
            &machine(1, 1, Granularity::Cpu, costs),
            one_guest(1, probe),
            1,
        )
        .unwrap();
        assert!(sim.run(10_000_000).finished);
        let log = log.borrow();
        assert_eq!(log.starts.len(), 2);
        // From idle: only the load half of a switch.
        let expected = costs.ipi_ns + costs.decision_ns + costs.switch_ns / 2;
        for &(_, woke, started) in &log.starts {
            assert_eq!(started - woke, expected, "{costs:?}");
        }
        // The burst ends its work after the start.
        assert_eq!(log.bursts[0].1, 1_000_000 + expected + 50_000);
    }
}

#[test]
fn smt_siblings_slow_each_other_by_the_table() {
    let work = 1_000_000;
    for (class, factor) in [
        (Class::Compute, SMT_FACTORS[1][1]),
        (Class::Memory, SMT_FACTORS[0][0]),
    ] {
        let log = Rc::new(RefCell::new(Log::default()));
        let probe = Probe {
            classes: vec![class, class],
            timers: vec![],
            work_ns: work,
            run_at_start: true,
            stop: 2,
            log: log.clone(),
        };
        // One core, two threads, no costs: both run together all along.
        let mut sim = Sim::new(
            &machine(1, 2, Granularity::Cpu, Costs::ZERO),
            one_guest(2, probe),
            1,
        )
        .unwrap();
        assert!(sim.run(100_000_000).finished);
        let expected = (work as f64 / factor).ceil() as Time;
        for &(_, at) in &log.borrow().bursts {
            assert!(at.abs_diff(expected) <= 1, "{class:?}: {at} vs {expected}");
        }
    }
    // Alone on its core: full speed.
    let log = Rc::new(RefCell::new(Log::default()));
    let probe = Probe {
        classes: vec![Class::Compute, Class::Compute],
        timers: vec![],
        work_ns: work,
        run_at_start: true,
        stop: 2,
        log: log.clone(),
    };
    let mut sim = Sim::new(
        &machine(2, 1, Granularity::Cpu, Costs::ZERO),
        one_guest(2, probe),
        1,
    )
    .unwrap();
    assert!(sim.run(100_000_000).finished);
    assert!(log.borrow().bursts.iter().all(|&(_, at)| at == work));
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let run = |seed| {
        let mut guests = one_guest(8, Kernbench::new(8, vec![1_500_000; 40]));
        guests.push(GuestSpec {
            vcpus: 8,
            workload: Box::new(matrix::background_load()),
        });
        let mut sim = Sim::new(&HostConfig::Csc.machine("credit2"), guests, seed).unwrap();
        let stats = sim.run(10_000_000_000);
        (stats, sim.report(0))
    };
    let (a, ra) = run(7);
    let (b, rb) = run(7);
    assert_eq!(a, b);
    assert_eq!(ra, rb);
    let (c, rc) = run(8);
    assert!(
        a != c || ra != rc,
        "the seed changes the background's phase"
    );
}

#[test]
fn core_scheduling_runs_rendezvous_and_keeps_the_invariants() {
    for config in [HostConfig::Csc, HostConfig::CscFixed] {
        let mut guests = one_guest(8, Kernbench::new(8, vec![1_500_000; 40]));
        guests.push(GuestSpec {
            vcpus: 8,
            workload: Box::new(matrix::background_load()),
        });
        let mut sim = Sim::new(&config.machine("credit2"), guests, 3).unwrap();
        sim.check_every_event = true;
        let stats = sim.run(10_000_000_000);
        assert!(stats.finished, "{config:?}");
        assert_eq!(sim.violation(), None, "{config:?}");
        assert!(
            stats.rendezvous > 0,
            "{config:?}: two domains share the cores"
        );
        assert_eq!(stats.rendezvous_timeouts, 0, "{config:?}");
    }
}

#[test]
fn stream_reports_bandwidth_from_its_work() {
    // noHT: 2 tasks alone on their cores, no costs: exactly 2 cores' worth.
    let mut sim = Sim::new(
        &machine(4, 1, Granularity::Cpu, Costs::ZERO),
        one_guest(4, Stream::new(2, 10_000_000, 1_000_000)),
        1,
    )
    .unwrap();
    assert!(sim.run(1_000_000_000).finished);
    assert_eq!(sim.now(), 10_000_000);
    let mbps = sim.report(0).value;
    assert!((mbps - 2.0 * lab::workloads::STREAM_MBPS_PER_CORE).abs() < 1e-6);
}

#[test]
fn kernbench_runs_every_unit_once_and_takes_at_least_the_critical_path() {
    let units: Vec<Time> = (1..=20).map(|k| k * 100_000).collect();
    let total: Time = units.iter().sum();
    let mut sim = Sim::new(
        &machine(4, 1, Granularity::Cpu, Costs::ZERO),
        one_guest(4, Kernbench::new(4, units)),
        1,
    )
    .unwrap();
    assert!(sim.run(1_000_000_000).finished);
    let elapsed_ms = sim.report(0).value;
    // 4 workers on 4 free CPUs: no faster than total/4, and greedy list
    // scheduling is within the largest unit of it.
    let lower = total as f64 / 4.0 / 1e6;
    assert!(
        elapsed_ms >= lower && elapsed_ms <= lower + 2.0,
        "{elapsed_ms}"
    );
}

#[test]
fn hackbench_delivers_every_message() {
    struct Counting(Hackbench, Rc<RefCell<usize>>);
    impl Workload for Counting {
        fn tasks(&self) -> Vec<Class> {
            self.0.tasks()
        }
        fn start(&mut self, ctx: &mut Ctx) {
            self.0.start(ctx)
        }
        fn burst_done(&mut self, t: TaskIdx, ctx: &mut Ctx) {
            self.0.burst_done(t, ctx);
            *self.1.borrow_mut() = self.0.received();
        }
        fn started(&mut self, t: TaskIdx, w: Time, n: Time) {
            self.0.started(t, w, n)
        }
        fn finished(&self) -> bool {
            self.0.finished()
        }
        fn report(&self, now: Time) -> Report {
            self.0.report(now)
        }
    }
    let received = Rc::new(RefCell::new(0));
    let (groups, size, loops) = (2, 3, 7);
    let mut sim = Sim::new(
        &HostConfig::Ht.machine("credit2"),
        one_guest(
            4,
            Counting(
                Hackbench::new(groups, size, loops, 5_000, 5_000),
                received.clone(),
            ),
        ),
        1,
    )
    .unwrap();
    let stats = sim.run(10_000_000_000);
    assert!(stats.finished);
    assert_eq!(*received.borrow(), groups * size * size * loops);
    assert!(
        !sim.report(0).latencies_ns.is_empty(),
        "receivers slept and woke"
    );
}

#[test]
fn netperf_round_trips_cost_the_two_bursts_without_a_hypervisor() {
    let mut sim = Sim::new(
        &machine(2, 1, Granularity::Cpu, Costs::ZERO),
        one_guest(2, Netperf::new(10_000_000, 20_000, 30_000)),
        1,
    )
    .unwrap();
    assert!(sim.run(1_000_000_000).finished);
    let r = sim.report(0);
    // 50 us per round trip: 200 of them in 10 ms.
    let tps = r.value;
    assert!((tps - 20_000.0).abs() < 200.0, "{tps}");
    assert!(r.latencies_ns.iter().all(|&l| l == 0));
    // With the hypervisor every wake-up pays IPI, decision and switch.
    let mut sim = Sim::new(
        &machine(2, 1, Granularity::Cpu, Costs::HYPERVISOR),
        one_guest(2, Netperf::new(10_000_000, 20_000, 30_000)),
        1,
    )
    .unwrap();
    assert!(sim.run(1_000_000_000).finished);
    // Both ends of a round trip wake a blocked vCPU: each wake-up pays the
    // IPI, the decision and the switch from idle (half a switch).
    let c = Costs::HYPERVISOR;
    let wake = (c.ipi_ns + c.decision_ns + c.switch_ns / 2) as f64;
    let expected = 1e9 / (50_000.0 + 2.0 * wake);
    let with_hypervisor = sim.report(0).value;
    assert!(
        (with_hypervisor - expected).abs() < expected * 0.01,
        "{with_hypervisor} trans/s, expected {expected} from {c:?}"
    );
    assert!(with_hypervisor < tps * 0.99);
}

#[test]
fn io_server_alone_serves_everything_offered() {
    let mut sim = Sim::new(
        &machine(1, 1, Granularity::Cpu, Costs::ZERO),
        one_guest(1, IoServer::new(100_000, 20_000, 50_000_000)),
        1,
    )
    .unwrap();
    assert!(sim.run(1_000_000_000).finished);
    let r = sim.report(0);
    // 499 requests (one every 100 us, the first at 100 us) of 1500 bytes in 50 ms.
    let expected = 499.0 * 1500.0 * 8.0 / 0.05 / 1e6;
    assert!((r.value - expected).abs() < 1e-9, "{}", r.value);
    assert_eq!(r.latencies_ns.len(), 499);
    assert!(r.latencies_ns.iter().all(|&l| l == 0));
}

#[test]
fn background_offers_six_cpus_and_delivers_them_on_a_big_enough_host() {
    let b = matrix::background_load();
    assert!((b.offered_cpus() - 6.0).abs() < 1e-9);
    // Its timing, with compute tasks only: alone on 8 cores every burst runs
    // at full speed. (Its memory-bound half shares the socket's memory
    // bandwidth, `smt::SOCKET_MEMORY_BANDWIDTH`, so 4 of them at once run
    // slower on any host.)
    let b = Background::new(vec![Class::Compute; 8], 3_000_000, 1_000_000);
    assert!((b.offered_cpus() - 6.0).abs() < 1e-9);
    struct Timed(Background, Time);
    impl Workload for Timed {
        fn tasks(&self) -> Vec<Class> {
            self.0.tasks()
        }
        fn start(&mut self, ctx: &mut Ctx) {
            self.0.start(ctx)
        }
        fn burst_done(&mut self, t: TaskIdx, ctx: &mut Ctx) {
            self.0.burst_done(t, ctx)
        }
        fn timer(&mut self, token: u64, ctx: &mut Ctx) {
            self.0.timer(token, ctx)
        }
        fn finished(&self) -> bool {
            false
        }
        fn report(&self, now: Time) -> Report {
            let _ = self.1;
            self.0.report(now)
        }
    }
    let mut sim = Sim::new(
        &machine(8, 1, Granularity::Cpu, Costs::ZERO),
        one_guest(8, Timed(b, 0)),
        1,
    )
    .unwrap();
    sim.run(400_000_000);
    // 8 tasks x 400 ms / 4 ms per cycle = 800 bursts, less the partial
    // first and last cycles.
    let bursts = sim.report(0).value;
    assert!((784.0..=800.0).contains(&bursts), "{bursts}");
}

#[test]
fn gains_are_positive_when_better() {
    assert_eq!(matrix::gain_percent(100.0, 110.0, true), 10.0);
    assert_eq!(matrix::gain_percent(100.0, 110.0, false), -10.0);
    assert_eq!(matrix::gain_percent(100.0, 90.0, false), 10.0);
    assert_eq!(matrix::percentile(&[1, 2, 3, 4], 50.0), 2);
    assert_eq!(matrix::percentile(&[1, 2, 3, 4], 99.0), 4);
}

fn tiny_plan(seed: u64) -> matrix::Plan {
    let mut plan = matrix::Plan::quick("credit2", seed, Some(2));
    plan.scale = Scale {
        stream_ns: 5_000_000,
        kernbench_units: 12,
        hackbench_loops: 3,
        netperf_ns: 5_000_000,
        boost_ns: 20_000_000,
    };
    plan.scenarios = vec![(
        Scenario::X2,
        vec![Bench::Kernbench(4), Bench::Netperf],
        vec![HostConfig::Ht, HostConfig::NoHt, HostConfig::Csc],
    )];
    plan.compiled_in = (Scenario::X2, vec![Bench::Kernbench(4)]);
    plan.boost.truncate(2);
    plan
}

#[test]
fn the_same_seed_gives_byte_identical_tables_and_charts() {
    let a = tiny_plan(5).run().unwrap();
    let b = tiny_plan(5).run().unwrap();
    assert_eq!(a.tables, b.tables);
    assert_eq!(a.targets_text(), b.targets_text());
    assert_eq!(a.charts, b.charts);
    let c = tiny_plan(6).run().unwrap();
    assert_ne!(a.tables, c.tables, "the seed matters");
    // Every table row and every target is there.
    assert!(a.tables.contains("Amean kernbench-elsp-4 (ms)"));
    assert!(a.tables.contains("Stddev netperf-tcp-rr (trans/s)"));
    assert!(a.tables.contains("Total rendezvous timeouts"));
    assert_eq!(a.targets.len(), 4, "overload, compiled-in, 2 x BOOST");
    assert!(
        a.targets_text()
            .lines()
            .all(|l| l.starts_with("PASS ") || l.starts_with("FAIL "))
    );
    assert!(a.charts.iter().any(|(n, _)| n == "x2-kernbench-elsp-4.svg"));
    assert!(a.charts.iter().any(|(n, _)| n == "boost-credit.svg"));
    assert!(a.charts.iter().all(|(_, svg)| svg.starts_with("<svg")));
}

#[test]
fn targets_fail_when_their_figures_say_so() {
    let cell = |v: f64| matrix::Cell {
        values: vec![v],
        failures: 0,
        rendezvous: 0,
        rendezvous_multi: 0,
        timeouts: 0,
        diagnostics: 0,
    };
    let results = |noht: f64, csc: f64| matrix::ScenarioResults {
        scenario: Scenario::X2,
        columns: vec![HostConfig::Ht, HostConfig::NoHt, HostConfig::Csc],
        rows: vec![(Bench::Stream, vec![cell(100.0), cell(noht), cell(csc)])],
    };
    assert!(matrix::overload_target(&results(100.0, 99.5)).pass);
    assert!(!matrix::overload_target(&results(100.0, 95.0)).pass);
    let boost = |alone: Vec<Time>, co: Vec<Time>, mbps: f64| matrix::BoostResult {
        scheduler: "x".into(),
        alone_mbps: 100.0,
        corun_mbps: mbps,
        alone_latencies: alone,
        corun_latencies: co,
    };
    assert!(matrix::boost_target(&boost(vec![5; 100], vec![9; 100], 95.0)).pass);
    assert!(!matrix::boost_target(&boost(vec![5; 100], vec![11; 100], 95.0)).pass);
    assert!(!matrix::boost_target(&boost(vec![5; 100], vec![9; 100], 85.0)).pass);
}

#[test]
fn gran_cpu_never_opens_a_rendezvous_of_several_cpus() {
    let mut guests = one_guest(8, Kernbench::new(8, vec![1_500_000; 40]));
    guests.push(GuestSpec {
        vcpus: 8,
        workload: Box::new(matrix::background_load()),
    });
    let mut sim = Sim::new(&HostConfig::Ht.machine("credit2"), guests, 3).unwrap();
    sim.check_every_event = true;
    let stats = sim.run(10_000_000_000);
    assert!(stats.finished);
    assert_eq!(sim.violation(), None);
    assert_eq!(stats.rendezvous_multi, 0);
    assert_eq!(stats.rendezvous_timeouts, 0);
}

#[test]
fn a_switch_through_idle_costs_what_a_direct_one_does() {
    use sched::{CpuContext, VcpuId};
    let c = Costs::HYPERVISOR;
    let (a, b) = (CpuContext::Vcpu(VcpuId(1)), CpuContext::Vcpu(VcpuId(2)));
    assert_eq!(c.switch_time(a, b), c.switch_ns);
    assert_eq!(
        c.switch_time(a, CpuContext::Idle) + c.switch_time(CpuContext::Idle, b),
        c.switch_ns
    );
    assert_eq!(c.switch_time(CpuContext::Idle, CpuContext::Idle), 0);
    assert_eq!(Costs::ZERO.switch_time(a, b), 0);
}

#[test]
fn rendezvous_latency_slows_core_scheduling_only() {
    let run = |config: HostConfig, rendezvous_ns: Time| {
        let mut guests = one_guest(8, Kernbench::new(8, vec![1_500_000; 40]));
        guests.push(GuestSpec {
            vcpus: 8,
            workload: Box::new(matrix::background_load()),
        });
        let mut machine = config.machine("credit2");
        machine.costs.rendezvous_ns = rendezvous_ns;
        machine.costs.rendezvous_wide_ns = rendezvous_ns;
        let mut sim = Sim::new(&machine, guests, 4).unwrap();
        assert!(sim.run(10_000_000_000).finished);
        sim.report(0).value
    };
    // csc waits at every cross-domain switch of a core: a slow release
    // costs the guest time.
    assert!(run(HostConfig::Csc, 200_000) > run(HostConfig::Csc, 0) * 1.02);
    // gran=cpu only has one-CPU rendezvous: no cost at all.
    assert_eq!(run(HostConfig::Ht, 200_000), run(HostConfig::Ht, 0));
}
