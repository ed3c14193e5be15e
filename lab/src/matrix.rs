//! The experiment matrix: host configurations × guest scenarios × workloads
//! × seeds, the benchmark-style tables (Amean and Stddev with the difference
//! in % against the first column, positive = better, as MMTests prints), and
//! the targets checked with PASS/FAIL.

use std::fmt::Write as _;

use sched::{Granularity, Placement, Time, Topology};

use crate::sim::{Costs, GuestSpec, MachineSpec, Report, Sim, SimError, SimStats, Workload};
use crate::smt::Class;
use crate::workloads::{Background, Hackbench, IoServer, Kernbench, Netperf, Stream};

/// How a host is set up (the benchmark's configurations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostConfig {
    /// gran=cpu on 4 cores × 2 threads (8 CPUs).
    Ht,
    /// One thread per core: 4 CPUs.
    NoHt,
    /// gran=core, spread placement, 8 CPUs.
    Csc,
    /// gran=core with Xen's fixed units, 8 CPUs.
    CscFixed,
    /// gran=cpu on 8 CPUs without any hypervisor cost.
    BareMetal,
    /// gran=cpu with the core-scheduling machinery costed at zero (the
    /// "plain scheduler" of the compiled-in check): no rendezvous release
    /// latency. The framework's other gran=cpu step, the switch through idle
    /// on a cross-domain switch, costs what a direct switch does in the
    /// model ([`Costs::switch_time`]), so HT and HT-plain differ only if the
    /// framework makes extra decisions, kicks or multi-CPU rendezvous.
    HtPlain,
}

impl HostConfig {
    /// The columns of the main tables, the first being the baseline.
    pub const COLUMNS: [HostConfig; 5] = [
        HostConfig::Ht,
        HostConfig::NoHt,
        HostConfig::Csc,
        HostConfig::CscFixed,
        HostConfig::BareMetal,
    ];

    /// Its column name.
    pub const fn name(self) -> &'static str {
        match self {
            HostConfig::Ht => "HT",
            HostConfig::NoHt => "noHT",
            HostConfig::Csc => "csc",
            HostConfig::CscFixed => "csc-fixed",
            HostConfig::BareMetal => "BM",
            HostConfig::HtPlain => "HT-plain",
        }
    }

    /// The machine for this configuration with `scheduler` in pool 0.
    pub fn machine(self, scheduler: &str) -> MachineSpec {
        let (threads, granularity, placement, costs) = match self {
            HostConfig::Ht => (2, Granularity::Cpu, Placement::Spread, Costs::HYPERVISOR),
            HostConfig::NoHt => (1, Granularity::Cpu, Placement::Spread, Costs::HYPERVISOR),
            HostConfig::Csc => (2, Granularity::Core, Placement::Spread, Costs::HYPERVISOR),
            HostConfig::CscFixed => (2, Granularity::Core, Placement::Fixed, Costs::HYPERVISOR),
            HostConfig::BareMetal => (2, Granularity::Cpu, Placement::Spread, Costs::ZERO),
            HostConfig::HtPlain => (
                2,
                Granularity::Cpu,
                Placement::Spread,
                Costs {
                    rendezvous_ns: 0,
                    rendezvous_wide_ns: 0,
                    ..Costs::HYPERVISOR
                },
            ),
        };
        MachineSpec {
            topology: Topology::uniform(1, 1, 4, threads),
            scheduler: scheduler.to_string(),
            granularity,
            placement,
            costs,
            pool_params: String::new(),
        }
    }
}

/// The guests of a run besides the workload's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// One 8-vCPU VM.
    V8,
    /// One 4-vCPU VM.
    V4,
    /// Two 8-vCPU VMs, the second producing ~600 % background load.
    X2,
}

impl Scenario {
    /// Its name, as in reference 003.
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::V8 => "HVM-v8",
            Scenario::V4 => "HVM-v4",
            Scenario::X2 => "HVMx2-v8",
        }
    }

    /// File-name form.
    pub const fn slug(self) -> &'static str {
        match self {
            Scenario::V8 => "v8",
            Scenario::V4 => "v4",
            Scenario::X2 => "x2",
        }
    }

    /// vCPUs of the measured VM.
    pub const fn vcpus(self) -> u32 {
        match self {
            Scenario::V8 | Scenario::X2 => 8,
            Scenario::V4 => 4,
        }
    }
}

/// The background VM of [`Scenario::X2`]: 8 tasks alternating compute and
/// memory work, each busy 3 ms out of 4 (8 × 75 % = 600 %).
pub fn background_load() -> Background {
    let classes = (0..8)
        .map(|i| {
            if i % 2 == 0 {
                Class::Compute
            } else {
                Class::Memory
            }
        })
        .collect();
    Background::new(classes, 3_000_000, 1_000_000)
}

/// A benchmark of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bench {
    /// STREAM-like with NR_CPUS/2 tasks.
    Stream,
    /// kernbench-like with this many jobs.
    Kernbench(usize),
    /// hackbench-like with this many groups.
    Hackbench(usize),
    /// netperf-like TCP_RR.
    Netperf,
}

/// Sizes of the workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// STREAM work per task, ns.
    pub stream_ns: Time,
    /// kernbench compile units.
    pub kernbench_units: usize,
    /// hackbench messages per sender and receiver.
    pub hackbench_loops: usize,
    /// netperf run time, ns.
    pub netperf_ns: Time,
    /// BOOST pair run time, ns.
    pub boost_ns: Time,
}

impl Scale {
    /// The full matrix.
    pub const FULL: Scale = Scale {
        stream_ns: 500_000_000,
        kernbench_units: 256,
        hackbench_loops: 100,
        netperf_ns: 500_000_000,
        boost_ns: 2_000_000_000,
    };

    /// `--quick`.
    pub const QUICK: Scale = Scale {
        stream_ns: 40_000_000,
        kernbench_units: 32,
        hackbench_loops: 10,
        netperf_ns: 40_000_000,
        boost_ns: 200_000_000,
    };
}

impl Bench {
    /// Its row name.
    pub fn name(self) -> String {
        match self {
            Bench::Stream => "stream-triad".into(),
            Bench::Kernbench(j) => format!("kernbench-elsp-{j}"),
            Bench::Hackbench(g) => format!("hackbench-{g}"),
            Bench::Netperf => "netperf-tcp-rr".into(),
        }
    }

    /// The unit of its figure.
    pub fn unit(self) -> &'static str {
        match self {
            Bench::Stream => "MB/s",
            Bench::Kernbench(_) | Bench::Hackbench(_) => "ms",
            Bench::Netperf => "trans/s",
        }
    }

    /// Whether a bigger figure is better.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Bench::Stream | Bench::Netperf)
    }

    /// The workload for a guest of `vcpus` vCPUs, from `seed`.
    pub fn build(self, vcpus: u32, scale: Scale, seed: u64) -> Box<dyn Workload> {
        let mut rng = crate::sim::Rng::new(seed ^ 0xbe7c);
        match self {
            Bench::Stream => Box::new(Stream::new(
                (vcpus as usize / 2).max(1),
                scale.stream_ns,
                1_000_000,
            )),
            Bench::Kernbench(jobs) => {
                let units = (0..scale.kernbench_units)
                    .map(|_| rng.range(1_000_000, 3_000_000))
                    .collect();
                Box::new(Kernbench::new(jobs, units))
            }
            Bench::Hackbench(groups) => Box::new(Hackbench::new(
                groups,
                8,
                scale.hackbench_loops,
                rng.range(9_000, 11_000),
                rng.range(9_000, 11_000),
            )),
            Bench::Netperf => Box::new(Netperf::new(
                scale.netperf_ns,
                rng.range(18_000, 22_000),
                rng.range(18_000, 22_000),
            )),
        }
    }
}

/// The simulated time after which a run is abandoned (a livelock would
/// otherwise run forever).
pub const RUN_LIMIT_NS: Time = 60_000_000_000;

/// One simulated run: `bench` in `scenario` on `config`.
pub fn run_one(
    config: HostConfig,
    scenario: Scenario,
    bench: Bench,
    scheduler: &str,
    scale: Scale,
    seed: u64,
) -> Result<(Report, SimStats), SimError> {
    let mut guests = vec![GuestSpec {
        vcpus: scenario.vcpus(),
        workload: bench.build(scenario.vcpus(), scale, seed),
    }];
    if scenario == Scenario::X2 {
        guests.push(GuestSpec {
            vcpus: 8,
            workload: Box::new(background_load()),
        });
    }
    let mut sim = Sim::new(&config.machine(scheduler), guests, seed)?;
    let stats = sim.run(RUN_LIMIT_NS);
    Ok((sim.report(0), stats))
}

/// The figures of one cell over its seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// One figure per seed.
    pub values: Vec<f64>,
    /// Runs that hit [`RUN_LIMIT_NS`] or that sched refused.
    pub failures: usize,
    /// Rendezvous completed over all seeds.
    pub rendezvous: u64,
    /// Of those, rendezvous of more than one CPU.
    pub rendezvous_multi: u64,
    /// Rendezvous waits that passed their bound, over all seeds.
    pub timeouts: u64,
    /// Diagnostics `sched` logged, over all seeds.
    pub diagnostics: u64,
}

impl Cell {
    /// The arithmetic mean.
    pub fn mean(&self) -> f64 {
        if self.values.is_empty() {
            return f64::NAN;
        }
        self.values.iter().sum::<f64>() / self.values.len() as f64
    }

    /// The sample standard deviation (0 for one value).
    pub fn stddev(&self) -> f64 {
        let n = self.values.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// Runs `config` × `seeds` for one bench and scenario.
pub fn run_cell(
    config: HostConfig,
    scenario: Scenario,
    bench: Bench,
    scheduler: &str,
    scale: Scale,
    seeds: &[u64],
) -> Cell {
    let mut cell = Cell {
        values: Vec::new(),
        failures: 0,
        rendezvous: 0,
        rendezvous_multi: 0,
        timeouts: 0,
        diagnostics: 0,
    };
    for &seed in seeds {
        match run_one(config, scenario, bench, scheduler, scale, seed) {
            Ok((report, stats)) if stats.finished => {
                cell.values.push(report.value);
                cell.rendezvous += stats.rendezvous;
                cell.rendezvous_multi += stats.rendezvous_multi;
                cell.timeouts += stats.rendezvous_timeouts;
                cell.diagnostics += stats.diagnostics;
            }
            _ => cell.failures += 1,
        }
    }
    cell
}

/// The difference of `value` against `base` in %, positive when better.
pub fn gain_percent(base: f64, value: f64, higher_is_better: bool) -> f64 {
    if base == 0.0 {
        return 0.0;
    }
    if higher_is_better {
        (value - base) / base * 100.0
    } else {
        (base - value) / base * 100.0
    }
}

/// One scenario's results: rows (benches) × columns (configs).
#[derive(Clone, Debug)]
pub struct ScenarioResults {
    /// The scenario.
    pub scenario: Scenario,
    /// Column configurations, the first the baseline.
    pub columns: Vec<HostConfig>,
    /// (bench, one cell per column).
    pub rows: Vec<(Bench, Vec<Cell>)>,
}

impl ScenarioResults {
    /// The cell of `bench` under `config`.
    pub fn cell(&self, bench: Bench, config: HostConfig) -> Option<&Cell> {
        let col = self.columns.iter().position(|&c| c == config)?;
        self.rows
            .iter()
            .find(|(b, _)| *b == bench)
            .map(|(_, cells)| &cells[col])
    }

    /// The table in the benchmark's own form.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "{:<28}", self.scenario.name());
        for c in &self.columns {
            let _ = write!(out, " {:>22}", c.name());
        }
        out.push('\n');
        for stat in ["Amean", "Stddev"] {
            for (bench, cells) in &self.rows {
                let label = format!("{stat} {} ({})", bench.name(), bench.unit());
                let _ = write!(out, "{label:<28}");
                let base = &cells[0];
                for cell in cells {
                    let (v, b) = if stat == "Amean" {
                        (cell.mean(), base.mean())
                    } else {
                        (cell.stddev(), base.stddev())
                    };
                    let diff = if stat == "Amean" {
                        gain_percent(b, v, bench.higher_is_better())
                    } else {
                        // A smaller spread is better.
                        gain_percent(b, v, false)
                    };
                    // `*` marks a difference larger than the two spreads.
                    let significant = stat == "Amean"
                        && (cell.mean() - base.mean()).abs() > cell.stddev() + base.stddev()
                        && !std::ptr::eq(cell, base);
                    let mark = if significant { '*' } else { ' ' };
                    let shown = if cell.failures > 0 {
                        format!("FAILED({})", cell.failures)
                    } else {
                        format!("{v:.2}")
                    };
                    let _ = write!(out, " {shown:>11} {mark}{diff:>7.2}%{mark}");
                }
                out.push('\n');
            }
        }
        // How the framework got there, summed over every row and seed.
        type Total = fn(&Cell) -> u64;
        let sums: [(&str, Total); 4] = [
            ("rendezvous", |c| c.rendezvous),
            ("rendezvous of 2+ CPUs", |c| c.rendezvous_multi),
            ("rendezvous timeouts", |c| c.timeouts),
            ("sched diagnostics", |c| c.diagnostics),
        ];
        for (label, get) in sums {
            let _ = write!(out, "{:<28}", format!("Total {label}"));
            for col in 0..self.columns.len() {
                let total: u64 = self.rows.iter().map(|(_, cells)| get(&cells[col])).sum();
                let _ = write!(out, " {total:>22}");
            }
            out.push('\n');
        }
        out
    }
}

/// Runs one scenario's table.
pub fn run_scenario(
    scenario: Scenario,
    benches: &[Bench],
    columns: &[HostConfig],
    scheduler: &str,
    scale: Scale,
    seeds: &[u64],
) -> ScenarioResults {
    let rows = benches
        .iter()
        .map(|&bench| {
            let cells = columns
                .iter()
                .map(|&c| run_cell(c, scenario, bench, scheduler, scale, seeds))
                .collect();
            (bench, cells)
        })
        .collect();
    ScenarioResults {
        scenario,
        columns: columns.to_vec(),
        rows,
    }
}

/// The BOOST pair of reference 004 on one pCPU, alone or next to a CPU hog.
#[derive(Clone, Debug, PartialEq)]
pub struct BoostResult {
    /// The scheduler.
    pub scheduler: String,
    /// Throughput alone, Mbps.
    pub alone_mbps: f64,
    /// Throughput co-run, Mbps.
    pub corun_mbps: f64,
    /// Wake-up latencies alone, ns, sorted.
    pub alone_latencies: Vec<Time>,
    /// Wake-up latencies co-run, ns, sorted.
    pub corun_latencies: Vec<Time>,
}

/// The I/O request period of the BOOST pair (10 000 requests/s).
pub const BOOST_PERIOD_NS: Time = 100_000;
/// The work per I/O request.
pub const BOOST_HANDLE_NS: Time = 20_000;

/// Runs the BOOST pair under `scheduler`: the I/O VM alone, then next to a
/// CPU-bound VM, both on one pCPU.
pub fn run_boost(
    scheduler: &str,
    pool_params: &str,
    scale: Scale,
    seed: u64,
) -> Result<BoostResult, SimError> {
    let machine = MachineSpec {
        pool_params: pool_params.to_string(),
        topology: Topology::uniform(1, 1, 1, 1),
        scheduler: scheduler.to_string(),
        granularity: Granularity::Cpu,
        placement: Placement::Spread,
        costs: Costs::HYPERVISOR,
    };
    let io = || GuestSpec {
        vcpus: 1,
        workload: Box::new(IoServer::new(
            BOOST_PERIOD_NS,
            BOOST_HANDLE_NS,
            scale.boost_ns,
        )),
    };
    let mut alone = Sim::new(&machine, vec![io()], seed)?;
    alone.run(RUN_LIMIT_NS);
    let hog = GuestSpec {
        vcpus: 1,
        workload: Box::new(Background::new(vec![Class::Compute], 10_000_000, 0)),
    };
    let mut corun = Sim::new(&machine, vec![io(), hog], seed)?;
    corun.run(RUN_LIMIT_NS);
    let (a, c) = (alone.report(0), corun.report(0));
    let sorted = |mut v: Vec<Time>| {
        v.sort_unstable();
        v
    };
    Ok(BoostResult {
        scheduler: if pool_params.is_empty() {
            scheduler.to_string()
        } else {
            format!("{scheduler} ({pool_params})")
        },
        alone_mbps: a.value,
        corun_mbps: c.value,
        alone_latencies: sorted(a.latencies_ns),
        corun_latencies: sorted(c.latencies_ns),
    })
}

/// The `p`-th percentile (0..=100) of sorted values (nearest rank).
pub fn percentile(sorted: &[Time], p: f64) -> Time {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl BoostResult {
    /// The table rows for this scheduler.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let lat = |v: &[Time]| {
            format!(
                "p50 {:>8.1} us  p99 {:>8.1} us  p99.9 {:>8.1} us  max {:>8.1} us",
                percentile(v, 50.0) as f64 / 1e3,
                percentile(v, 99.0) as f64 / 1e3,
                percentile(v, 99.9) as f64 / 1e3,
                v.last().copied().unwrap_or(0) as f64 / 1e3
            )
        };
        let _ = writeln!(
            out,
            "{:<28} alone   {:>8.2} Mbps  {}",
            self.scheduler,
            self.alone_mbps,
            lat(&self.alone_latencies)
        );
        let _ = writeln!(
            out,
            "{:<28} co-run  {:>8.2} Mbps  {}  ({:+.2}% throughput)",
            self.scheduler,
            self.corun_mbps,
            lat(&self.corun_latencies),
            gain_percent(self.alone_mbps, self.corun_mbps, true)
        );
        out
    }
}

/// A checked target.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// What is checked.
    pub name: String,
    /// Whether it holds.
    pub pass: bool,
    /// The figures behind the verdict.
    pub detail: String,
}

impl Target {
    /// `PASS name: detail` / `FAIL ...`.
    pub fn line(&self) -> String {
        format!(
            "{} {}: {}",
            if self.pass { "PASS" } else { "FAIL" },
            self.name,
            self.detail
        )
    }
}

/// How much worse than noHT csc may be in overload and still "never be
/// worse" (seed-to-seed noise of the model).
pub const OVERLOAD_TOLERANCE_PERCENT: f64 = 1.0;
/// How much worse than HT csc may be under load.
pub const UNDERLOAD_TOLERANCE_PERCENT: f64 = 5.0;
/// gran=cpu with and without the core-scheduling costs: "within noise".
pub const COMPILED_IN_TOLERANCE_PERCENT: f64 = 1.0;

fn compare(
    results: &ScenarioResults,
    base: HostConfig,
    other: HostConfig,
    min_gain: f64,
    max_gain: f64,
) -> (bool, String) {
    let mut pass = true;
    let mut detail = Vec::new();
    for (bench, _) in &results.rows {
        let (Some(b), Some(o)) = (results.cell(*bench, base), results.cell(*bench, other)) else {
            continue;
        };
        let gain = gain_percent(b.mean(), o.mean(), bench.higher_is_better());
        let ok = b.failures == 0 && o.failures == 0 && gain >= min_gain && gain <= max_gain;
        pass &= ok;
        // The seed-to-seed spread of both, to judge a verdict near the line.
        let spread = |c: &Cell| 100.0 * c.stddev() / c.mean().abs().max(f64::MIN_POSITIVE);
        detail.push(format!(
            "{} {:+.2}%{} (spread {:.1}%/{:.1}%)",
            bench.name(),
            gain,
            if ok { "" } else { " (!)" },
            spread(o),
            spread(b),
        ));
    }
    (pass, detail.join(", "))
}

/// The overload target: in [`Scenario::X2`], csc never worse than noHT.
pub fn overload_target(x2: &ScenarioResults) -> Target {
    let (pass, detail) = compare(
        x2,
        HostConfig::NoHt,
        HostConfig::Csc,
        -OVERLOAD_TOLERANCE_PERCENT,
        f64::INFINITY,
    );
    Target {
        name: format!(
            "overload (2 x 8-vCPU VMs): csc never worse than noHT (tolerance {OVERLOAD_TOLERANCE_PERCENT}%)"
        ),
        pass,
        detail: format!("csc vs noHT: {detail}"),
    }
}

/// The under-load target: in [`Scenario::V4`], csc within 5 % of HT.
pub fn underload_target(v4: &ScenarioResults) -> Target {
    let (pass, detail) = compare(
        v4,
        HostConfig::Ht,
        HostConfig::Csc,
        -UNDERLOAD_TOLERANCE_PERCENT,
        f64::INFINITY,
    );
    let (_, fixed) = compare(
        v4,
        HostConfig::Ht,
        HostConfig::CscFixed,
        f64::NEG_INFINITY,
        f64::INFINITY,
    );
    Target {
        name: format!(
            "under-load (one 4-vCPU VM): csc within {UNDERLOAD_TOLERANCE_PERCENT}% of HT"
        ),
        pass,
        detail: format!("csc vs HT: {detail}; for reference csc-fixed vs HT: {fixed}"),
    }
}

/// The compiled-in target: gran=cpu equals the plain scheduler within noise
/// and never opens a rendezvous.
pub fn compiled_in_target(results: &ScenarioResults) -> Target {
    let (mut pass, detail) = compare(
        results,
        HostConfig::HtPlain,
        HostConfig::Ht,
        -COMPILED_IN_TOLERANCE_PERCENT,
        COMPILED_IN_TOLERANCE_PERCENT,
    );
    let cells: Vec<&Cell> = results
        .rows
        .iter()
        .filter_map(|(b, _)| results.cell(*b, HostConfig::Ht))
        .collect();
    let single: u64 = cells
        .iter()
        .map(|c| c.rendezvous - c.rendezvous_multi)
        .sum();
    let multi: u64 = cells.iter().map(|c| c.rendezvous_multi).sum();
    let timeouts: u64 = cells.iter().map(|c| c.timeouts).sum();
    pass &= multi == 0 && timeouts == 0;
    Target {
        name: format!(
            "gran=cpu with core scheduling compiled in equals the plain scheduler (within {COMPILED_IN_TOLERANCE_PERCENT}%)"
        ),
        pass,
        detail: format!(
            "{} HT vs HT-plain: {detail}; rendezvous at gran=cpu: {multi} of 2+ CPUs, {single} of one CPU (cross-domain switches), {timeouts} timeouts",
            results.scenario.name()
        ),
    }
}

/// The BOOST targets for one scheduler.
pub fn boost_target(r: &BoostResult) -> Target {
    let p99_alone = percentile(&r.alone_latencies, 99.0);
    let p99_co = percentile(&r.corun_latencies, 99.0);
    let lat_ok = p99_co <= 2 * p99_alone && !r.corun_latencies.is_empty();
    let tput_ok = r.corun_mbps >= 0.9 * r.alone_mbps;
    Target {
        name: format!(
            "BOOST pair ({}): co-run wake-up p99 <= 2x alone and throughput >= 90% of alone",
            r.scheduler
        ),
        pass: lat_ok && tput_ok,
        detail: format!(
            "p99 {:.1} us vs {:.1} us alone ({:.2}x){}; {:.2} vs {:.2} Mbps ({:.1}%){}",
            p99_co as f64 / 1e3,
            p99_alone as f64 / 1e3,
            p99_co as f64 / p99_alone.max(1) as f64,
            if lat_ok { "" } else { " (!)" },
            r.corun_mbps,
            r.alone_mbps,
            r.corun_mbps / r.alone_mbps.max(f64::MIN_POSITIVE) * 100.0,
            if tput_ok { "" } else { " (!)" },
        ),
    }
}

/// What `cargo xtask lab` runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Scheduler of the matrix (the BOOST pair always runs credit and credit2).
    pub scheduler: String,
    /// Seeds of every cell.
    pub seeds: Vec<u64>,
    /// Workload sizes.
    pub scale: Scale,
    /// The tables: scenario, rows, columns (the first the baseline).
    pub scenarios: Vec<(Scenario, Vec<Bench>, Vec<HostConfig>)>,
    /// The compiled-in check: HT-plain vs HT in this scenario (two domains,
    /// so that cross-domain switches happen).
    pub compiled_in: (Scenario, Vec<Bench>),
    /// BOOST pair runs: (scheduler, pool parameters, whether a target).
    pub boost: Vec<(&'static str, &'static str, bool)>,
    /// The command that reproduces it, for the files' headers.
    pub command: String,
}

fn seeds(first: u64, count: u64) -> Vec<u64> {
    (0..count).map(|k| first.wrapping_add(k)).collect()
}

const BOOST_RUNS: [(&str, &str, bool); 4] = [
    ("credit", "", true),
    ("credit2", "", true),
    ("credit", "ratelimit_us=0", false),
    ("credit2", "ratelimit_us=0", false),
];

impl Plan {
    /// The whole matrix (every scenario, workload and configuration).
    pub fn full(scheduler: &str, seed: u64, count: Option<u64>) -> Self {
        let benches = vec![
            Bench::Stream,
            Bench::Kernbench(2),
            Bench::Kernbench(4),
            Bench::Kernbench(8),
            Bench::Kernbench(16),
            Bench::Hackbench(1),
            Bench::Hackbench(4),
            Bench::Netperf,
        ];
        let columns = HostConfig::COLUMNS.to_vec();
        Self {
            scheduler: scheduler.to_string(),
            seeds: seeds(seed, count.unwrap_or(8)),
            scale: Scale::FULL,
            scenarios: [Scenario::V8, Scenario::V4, Scenario::X2]
                .into_iter()
                .map(|s| (s, benches.clone(), columns.clone()))
                .collect(),
            compiled_in: (Scenario::X2, benches),
            boost: BOOST_RUNS.to_vec(),
            command: format!("cargo xtask lab --seed {seed} --scheduler {scheduler}"),
        }
    }

    /// The CI subset: the two scenarios with targets, four workloads, no BM.
    pub fn quick(scheduler: &str, seed: u64, count: Option<u64>) -> Self {
        let benches = vec![
            Bench::Stream,
            Bench::Kernbench(4),
            Bench::Hackbench(1),
            Bench::Netperf,
        ];
        let columns = HostConfig::COLUMNS[..4].to_vec();
        Self {
            scheduler: scheduler.to_string(),
            seeds: seeds(seed, count.unwrap_or(4)),
            scale: Scale::QUICK,
            scenarios: [Scenario::V4, Scenario::X2]
                .into_iter()
                .map(|s| (s, benches.clone(), columns.clone()))
                .collect(),
            compiled_in: (Scenario::X2, benches),
            boost: BOOST_RUNS.to_vec(),
            command: format!("cargo xtask lab --quick --seed {seed} --scheduler {scheduler}"),
        }
    }

    /// Runs it.
    pub fn run(&self) -> Result<Outcome, SimError> {
        let mut tables = String::new();
        let mut targets = Vec::new();
        let mut charts = Vec::new();
        let _ = writeln!(tables, "# Scheduling lab: {}", self.command);
        let _ = writeln!(
            tables,
            "# scheduler {}, seeds {:?}, host 1 socket x 4 cores x 2 threads, costs {:?}",
            self.scheduler,
            self.seeds,
            Costs::HYPERVISOR
        );
        let _ = writeln!(
            tables,
            "# Amean/Stddev over seeds; (x%) = difference against the first column, positive = better; * = larger than both spreads\n"
        );
        for (scenario, benches, columns) in &self.scenarios {
            let r = run_scenario(
                *scenario,
                benches,
                columns,
                &self.scheduler,
                self.scale,
                &self.seeds,
            );
            tables.push_str(&r.table());
            tables.push('\n');
            for (bench, svg) in crate::svg::bar_charts(&r).map_err(SimError::Chart)? {
                charts.push((format!("{}-{bench}.svg", scenario.slug()), svg));
            }
            match scenario {
                Scenario::X2 => targets.push(overload_target(&r)),
                Scenario::V4 => targets.push(underload_target(&r)),
                Scenario::V8 => {}
            }
        }
        let (scenario, benches) = &self.compiled_in;
        let r = run_scenario(
            *scenario,
            benches,
            &[HostConfig::HtPlain, HostConfig::Ht],
            &self.scheduler,
            self.scale,
            &self.seeds,
        );
        let _ = writeln!(
            tables,
            "gran=cpu, core scheduling compiled in (HT) vs its costs zeroed (HT-plain)"
        );
        tables.push_str(&r.table());
        tables.push('\n');
        targets.push(compiled_in_target(&r));
        let _ = writeln!(
            tables,
            "BOOST pair (reference 004): I/O VM (a {} us request every {} us) alone / next to a CPU hog, one pCPU",
            BOOST_HANDLE_NS / 1000,
            BOOST_PERIOD_NS / 1000
        );
        let seed = self.seeds.first().copied().unwrap_or(1);
        for &(scheduler, params, is_target) in &self.boost {
            let b = run_boost(scheduler, params, self.scale, seed)?;
            tables.push_str(&b.table());
            if is_target {
                targets.push(boost_target(&b));
            }
            let svg = crate::svg::latency_cdf(
                &format!("BOOST pair, {}: I/O wake-up latency CDF", b.scheduler),
                &[
                    ("alone".to_string(), &b.alone_latencies),
                    ("co-run with a CPU hog".to_string(), &b.corun_latencies),
                ],
            )
            .map_err(SimError::Chart)?;
            let slug = if params.is_empty() {
                scheduler.to_string()
            } else {
                format!("{scheduler}-{}", params.replace(['=', ','], "-"))
            };
            charts.push((format!("boost-{slug}.svg"), svg));
        }
        Ok(Outcome {
            tables,
            targets,
            charts,
        })
    }
}

/// The results of a [`Plan`].
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Every table, as printed.
    pub tables: String,
    /// The targets.
    pub targets: Vec<Target>,
    /// (file name, SVG text).
    pub charts: Vec<(String, String)>,
}

impl Outcome {
    /// The targets as printed.
    pub fn targets_text(&self) -> String {
        self.targets.iter().map(|t| t.line() + "\n").collect()
    }

    /// Writes `tables.txt`, `targets.txt` and the charts into `dir`.
    pub fn write(&self, dir: &std::path::Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("tables.txt"), &self.tables)?;
        std::fs::write(dir.join("targets.txt"), self.targets_text())?;
        for (name, svg) in &self.charts {
            std::fs::write(dir.join(name), svg)?;
        }
        Ok(())
    }
}
