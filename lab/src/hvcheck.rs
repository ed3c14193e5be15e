//! The lab's side of the in-hypervisor check (`cargo xtask lab --hv`,
//! issue 7 item 6): the same cases the hypervisor runs under QEMU
//! (`boards/configs/lab/`), simulated, and the side-by-side table.
//!
//! Each case has an I/O domain whose vCPU 0 sleeps on its virtual timer with
//! a period of 1 ms and measures how late it wakes (the test guest's
//! `sleeper` workload, 200 samples, run twice: a warm-up from boot, then the
//! measured run), alone or next to a CPU-bound domain. The simulation runs
//! 400 periods and splits them the same way.
//! The simulation models that domain as an [`IoServer`] with a request every
//! millisecond and [`GUEST_WORK_NS`] of work per wake-up (the guest's own
//! bookkeeping between wake-up and the next sleep), and the CPU-bound domain
//! as a hog; costs are [`Costs::HYPERVISOR`]. The hypervisor runs under TCG,
//! whose speed has nothing to do with a real core, so absolute figures differ;
//! what is compared is the *shape*: co-run against alone, gran=core against
//! gran=cpu.

use std::fmt::Write as _;

use sched::{Granularity, Placement, Time, Topology};

use crate::matrix::percentile;
use crate::sim::{Costs, GuestSpec, MachineSpec, Sim, SimError};
use crate::smt::Class;
use crate::workloads::{Background, IoServer};

/// The sleeper's period in every case.
pub const PERIOD_NS: Time = 1_000_000;
/// Wake-ups measured per case.
pub const SAMPLES: u64 = 200;
/// Guest work per wake-up in the simulation (an assumption: reading the
/// counter, recording, re-arming the timer, going back to sleep).
pub const GUEST_WORK_NS: Time = 5_000;

/// A case, by the name `cargo xtask lab --hv` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Case name.
    pub name: &'static str,
    /// Scheduler of the pool.
    pub scheduler: &'static str,
    /// Threads of the pool's one core (1: a single pCPU).
    pub threads: u32,
    /// Pool granularity.
    pub granularity: Granularity,
    /// vCPUs of each domain.
    pub vcpus: u32,
    /// Whether the CPU-bound domain runs too.
    pub corun: bool,
}

/// The cases, in table order (`xtask/src/lab.rs` has their configurations).
pub const CASES: [Case; 6] = [
    Case {
        name: "boost-credit-alone",
        scheduler: "credit",
        threads: 1,
        granularity: Granularity::Cpu,
        vcpus: 1,
        corun: false,
    },
    Case {
        name: "boost-credit-corun",
        scheduler: "credit",
        threads: 1,
        granularity: Granularity::Cpu,
        vcpus: 1,
        corun: true,
    },
    Case {
        name: "boost-credit2-alone",
        scheduler: "credit2",
        threads: 1,
        granularity: Granularity::Cpu,
        vcpus: 1,
        corun: false,
    },
    Case {
        name: "boost-credit2-corun",
        scheduler: "credit2",
        threads: 1,
        granularity: Granularity::Cpu,
        vcpus: 1,
        corun: true,
    },
    Case {
        name: "core-gran-cpu",
        scheduler: "credit2",
        threads: 2,
        granularity: Granularity::Cpu,
        vcpus: 2,
        corun: true,
    },
    Case {
        name: "core-gran-core",
        scheduler: "credit2",
        threads: 2,
        granularity: Granularity::Core,
        vcpus: 2,
        corun: true,
    },
];

/// Wake-up latency figures of one case, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// 99th percentile.
    pub p99_us: f64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub avg_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Samples.
    pub samples: u64,
}

/// Simulates `case` with `seed`: (warm-up, measured) figures.
pub fn simulate(case: &Case, seed: u64) -> Result<(Figures, Figures), SimError> {
    let (machine, guests) = setup(case);
    let mut sim = Sim::new(&machine, guests, seed)?;
    sim.run(crate::matrix::RUN_LIMIT_NS);
    // Latencies in wake-up order; the first half of the run is the warm-up.
    let latencies = sim.report(0).latencies_ns;
    let (warmup, measured) = latencies.split_at(latencies.len() / 2);
    Ok((figures(warmup), figures(measured)))
}

/// Events per CPU a traced case keeps: its whole run.
const TRACE_EVENTS_PER_CPU: usize = 1 << 16;

/// `case` simulated for `run_ns` with the run recorded in the hypervisor's
/// trace format (`lab --trace CASE`): the same JSON as `cargo xtask trace`
/// writes for the hypervisor running that case's configuration.
pub fn trace_case(case: &Case, seed: u64, run_ns: Time) -> Result<trace::Trace, SimError> {
    let (machine, guests) = setup(case);
    let mut sim = Sim::traced(&machine, guests, seed, TRACE_EVENTS_PER_CPU)?;
    sim.run(run_ns);
    Ok(sim.trace())
}

/// The machine and guests of `case`.
fn setup(case: &Case) -> (MachineSpec, Vec<GuestSpec>) {
    let machine = MachineSpec {
        topology: Topology::uniform(1, 1, 1, case.threads),
        scheduler: case.scheduler.to_string(),
        granularity: case.granularity,
        // Xen's fixed units, as the configurations ask.
        placement: Placement::Fixed,
        costs: Costs::HYPERVISOR,
        pool_params: String::new(),
    };
    let mut guests = vec![GuestSpec {
        vcpus: case.vcpus,
        workload: Box::new(IoServer::new(
            PERIOD_NS,
            GUEST_WORK_NS,
            PERIOD_NS * (2 * SAMPLES + 1),
        )),
    }];
    if case.corun {
        guests.push(GuestSpec {
            vcpus: case.vcpus,
            workload: Box::new(Background::new(
                vec![Class::Compute; case.vcpus as usize],
                10_000_000,
                0,
            )),
        });
    }
    (machine, guests)
}

fn figures(latencies: &[Time]) -> Figures {
    let mut latencies = latencies.to_vec();
    latencies.sort_unstable();
    let us = |ns: Time| ns as f64 / 1e3;
    let n = latencies.len().max(1) as f64;
    Figures {
        p99_us: us(percentile(&latencies, 99.0)),
        min_us: us(latencies.first().copied().unwrap_or(0)),
        avg_us: latencies.iter().sum::<Time>() as f64 / n / 1e3,
        max_us: us(latencies.last().copied().unwrap_or(0)),
        samples: latencies.len() as u64,
    }
}

/// One case as `cargo xtask lab --hv` measured it.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The measured (second) run.
    pub figures: Figures,
    /// The warm-up run's p99 and max, us.
    pub warmup_p99_max_us: Option<(f64, f64)>,
    /// Mean boot-time IPI round trip, us.
    pub ipi_round_trip_us: Option<f64>,
}

/// Parses `cargo xtask lab --hv`'s `measured.txt`: `# …` comments, then
/// `case p99 min avg max samples [warmup_p99 warmup_max ipi_round_trip]` or
/// `case no-result` per line.
pub fn parse_measured(text: &str) -> Vec<(String, Option<Measured>)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let name = (*words.first()?).to_string();
            let number = |i: usize| words.get(i)?.parse::<f64>().ok();
            let figures = (|| {
                Some(Figures {
                    p99_us: number(1)?,
                    min_us: number(2)?,
                    avg_us: number(3)?,
                    max_us: number(4)?,
                    samples: words.get(5)?.parse().ok()?,
                })
            })();
            let measured = figures.map(|figures| Measured {
                figures,
                warmup_p99_max_us: number(6).zip(number(7)),
                ipi_round_trip_us: number(8),
            });
            Some((name, measured))
        })
        .collect()
}

/// The side-by-side table: simulated (seed 1) and measured, per case, the
/// warm-up runs, and the ratios that matter (co-run p99 against alone,
/// gran=core against gran=cpu) with the target (co-run p99 at most
/// 2x alone).
pub fn compare(measured: &[(String, Option<Measured>)]) -> Result<String, SimError> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>40}   {:>40}",
        "wake-up latency (us)", "simulated: p99 / avg / max (n)", "measured: p99 / avg / max (n)"
    );
    let row = |f: &Figures| {
        format!(
            "{:>8.1} / {:>7.1} / {:>8.1} ({:>3})",
            f.p99_us, f.avg_us, f.max_us, f.samples
        )
    };
    let mut sims = Vec::new();
    for case in &CASES {
        let (warmup, sim) = simulate(case, 1)?;
        let real = measured
            .iter()
            .find(|(n, _)| n == case.name)
            .and_then(|(_, m)| m.clone());
        let _ = writeln!(
            out,
            "{:<22} {:>40}   {:>40}",
            case.name,
            row(&sim),
            real.as_ref()
                .map_or("no result".to_string(), |m| row(&m.figures))
        );
        sims.push((case.name, warmup, sim, real));
    }
    let _ = writeln!(
        out,
        "\nwarm-up run (from boot)  simulated: p99 / max        measured: p99 / max    boot IPI round trip (measured)"
    );
    for (name, warmup, _, real) in &sims {
        let _ = writeln!(
            out,
            "{:<22} {:>12.1} / {:>8.1}     {:>21}    {:>10}",
            name,
            warmup.p99_us,
            warmup.max_us,
            real.as_ref()
                .and_then(|m| m.warmup_p99_max_us)
                .map_or("-".to_string(), |(p, m)| format!("{p:.1} / {m:.1}")),
            real.as_ref()
                .and_then(|m| m.ipi_round_trip_us)
                .map_or("-".to_string(), |us| format!("{us:.0} us")),
        );
    }
    let find = |name: &str| sims.iter().find(|(n, _, _, _)| *n == name);
    let _ = writeln!(out);
    for (what, base, other, limit) in [
        (
            "credit co-run / alone p99",
            "boost-credit-alone",
            "boost-credit-corun",
            Some(2.0),
        ),
        (
            "credit2 co-run / alone p99",
            "boost-credit2-alone",
            "boost-credit2-corun",
            Some(2.0),
        ),
        (
            "gran=core / gran=cpu p99",
            "core-gran-cpu",
            "core-gran-core",
            None,
        ),
    ] {
        let (Some(b), Some(o)) = (find(base), find(other)) else {
            continue;
        };
        let ratio = |x: &Figures, y: &Figures| y.p99_us / x.p99_us.max(f64::MIN_POSITIVE);
        let sim = ratio(&b.2, &o.2);
        let real = match (&b.3, &o.3) {
            (Some(x), Some(y)) => Some(ratio(&x.figures, &y.figures)),
            _ => None,
        };
        let verdict = |r: f64| match limit {
            Some(l) if r <= l => " PASS",
            Some(_) => " FAIL",
            None => "",
        };
        let _ = writeln!(
            out,
            "{:<28} simulated {:>7.2}x{:<5}   measured {}{}",
            what,
            sim,
            verdict(sim),
            real.map_or("no result".to_string(), |r| format!("{r:>7.2}x")),
            real.map_or("", verdict),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traced_core_case_keeps_the_promise_and_survives_the_text_encoding() {
        let case = CASES.iter().find(|c| c.name == "core-gran-core").unwrap();
        let trace = trace_case(case, 1, 50_000_000).unwrap();
        let check = trace::analysis::sibling_overlaps(&trace);
        assert_eq!(check.resources, 1);
        assert!(check.handovers > 20, "{check:?}");
        assert_eq!(check.overlaps, []);
        assert!(!trace::analysis::rendezvous_skews(&trace).is_empty());
        assert!(!trace::analysis::wake_to_run(&trace).is_empty());
        let mut text = String::new();
        trace.encode(|line| {
            text.push_str(line);
            text.push('\n');
        });
        assert_eq!(trace::Trace::decode(&text), Ok(trace));
    }

    #[test]
    fn measured_files_parse_and_missing_results_stay_missing() {
        let text = "# header\nboost-credit-alone 10.0 5.0 6.0 20.0 200 11.0 30.0 2400\n\
                    core-gran-core no-result\nboost-credit-corun 1 1 1 1 5\n";
        let m = parse_measured(text);
        assert_eq!(m.len(), 3);
        let first = m[0].1.as_ref().unwrap();
        assert_eq!(first.figures.samples, 200);
        assert_eq!(first.warmup_p99_max_us, Some((11.0, 30.0)));
        assert_eq!(first.ipi_round_trip_us, Some(2400.0));
        assert!(m[1].1.is_none());
        assert_eq!(m[2].1.as_ref().unwrap().warmup_p99_max_us, None);
    }

    #[test]
    fn the_simulated_boost_pair_meets_the_target() {
        for (alone, corun) in [(0, 1), (2, 3)] {
            let a = simulate(&CASES[alone], 1).unwrap().1;
            let c = simulate(&CASES[corun], 1).unwrap().1;
            assert!(a.samples >= SAMPLES - 1, "{a:?}");
            assert!(c.p99_us <= 2.0 * a.p99_us, "{c:?} vs {a:?}");
        }
    }
}
