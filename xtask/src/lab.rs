//! `cargo xtask lab [--quick] [--seed N] [--seeds K] [--scheduler NAME] [--out DIR]`:
//! the scheduling lab. The lab is its own crate (`lab/`, a deterministic
//! simulator driving `sched`); this runs it in release mode, where the full
//! matrix takes seconds instead of minutes, and passes its exit status on
//! (non-zero when a target FAILs).
//!
//! `cargo xtask lab --hv`: the in-hypervisor check. Boots the real hypervisor
//! under QEMU with `-icount` for each configuration of [`HV_CASES`]
//! (`boards/configs/lab/`), reads the I/O domain's two sleeper lines (wake-up
//! latency in its own virtual time: a warm-up run from boot, then the
//! measured run) and the hypervisor's boot-time IPI round trips, writes the
//! measured figures to
//! `lab/results/hv/measured.txt` and has the lab simulate the same cases and
//! write the side-by-side table `lab/results/hv/table.txt`. Not part of
//! `cargo xtask test`: six image builds and boots take minutes.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use ::tests::{Expectation, Scenario};

use crate::board;
use crate::image;
use crate::qemu::{self, RunOptions};
use crate::workspace::Workspace;

/// One in-hypervisor case: its name (shared with the lab's simulation of
/// it, `lab::hvcheck`) and its image configuration.
pub struct HvCase {
    /// Case name, as in `lab/results/hv/`.
    pub name: &'static str,
    /// Configuration file, relative to the workspace.
    pub config: &'static str,
}

/// The cases `--hv` runs: the BOOST pair alone and co-run under credit and
/// credit2 (one pCPU), and one core with a sleeper domain next to a compute
/// domain at gran=core and gran=cpu.
pub const HV_CASES: [HvCase; 6] = [
    HvCase {
        name: "boost-credit-alone",
        config: "boards/configs/lab/boost-credit-alone.toml",
    },
    HvCase {
        name: "boost-credit-corun",
        config: "boards/configs/lab/boost-credit-corun.toml",
    },
    HvCase {
        name: "boost-credit2-alone",
        config: "boards/configs/lab/boost-credit2-alone.toml",
    },
    HvCase {
        name: "boost-credit2-corun",
        config: "boards/configs/lab/boost-credit2-corun.toml",
    },
    HvCase {
        name: "core-gran-cpu",
        config: "boards/configs/lab/core-gran-cpu.toml",
    },
    HvCase {
        name: "core-gran-core",
        config: "boards/configs/lab/core-gran-core.toml",
    },
];

/// `-smp` of every case: one socket, one cluster, 2 cores x 2 threads.
pub const HV_SMP: &str = "4,sockets=1,clusters=1,cores=2,threads=2";

/// `-icount`: the virtual clock advances 2^0 ns per instruction and skips
/// idle time, so the guests' virtual-time figures repeat from run to run.
pub const HV_ICOUNT: &str = "shift=0,sleep=off";

/// How long one case may take (host time).
const HV_TIMEOUT: Duration = Duration::from_secs(240);

/// What the sleeper prints (see `guest/test-guest/src/main.rs`).
const SLEEPER_LINE: &str = "test-guest: vcpu 0 sleeper p99 ";

/// What one case printed.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// The measured (second) sleeper run.
    pub measured: SleeperFigures,
    /// The warm-up (first) sleeper run, from boot.
    pub warmup: SleeperFigures,
    /// Mean of the hypervisor's boot-time IPI round trips, us (QEMU's
    /// round-robin TCG under `-icount` makes these slow).
    pub ipi_round_trip_us: Option<f64>,
}

/// Parses `ipi: cpu N round trip ok (X us)`.
pub fn parse_ipi_round_trip(line: &str) -> Option<f64> {
    let rest = &line[line.find("round trip ok (")? + "round trip ok (".len()..];
    rest.strip_suffix(" us)")?.trim().parse().ok()
}

/// Runs the lab with the arguments after `lab`.
pub fn run(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--hv") {
        return run_hv(args);
    }
    cargo_lab(args)
}

fn cargo_lab(args: &[String]) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["run", "--release", "--quiet", "--package", "lab", "--"])
        .args(args)
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask lab: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The sleeper's figures, in microseconds of the guest's virtual time.
#[derive(Clone, Debug, PartialEq)]
pub struct SleeperFigures {
    /// 99th percentile of the wake-up latency.
    pub p99_us: f64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub avg_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Samples taken.
    pub samples: u64,
}

/// Parses `... vcpu 0 sleeper p99 P ticks (min A avg B max C, S samples,
/// period T ticks)`; `period_us` converts ticks to microseconds (the guest
/// prints its period in ticks of its virtual counter).
pub fn parse_sleeper(line: &str, period_us: f64) -> Option<SleeperFigures> {
    let rest = &line[line.find(SLEEPER_LINE)? + SLEEPER_LINE.len()..];
    let words: Vec<&str> = rest
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    // P ticks min A avg B max C S samples period T ticks
    let number = |i: usize| words.get(i)?.parse::<u64>().ok();
    if words.get(1) != Some(&"ticks")
        || words.get(2) != Some(&"min")
        || words.get(4) != Some(&"avg")
        || words.get(6) != Some(&"max")
        || words.get(9) != Some(&"samples")
        || words.get(10) != Some(&"period")
    {
        return None;
    }
    let period_ticks = number(11).filter(|&t| t > 0)? as f64;
    let us = |ticks: u64| ticks as f64 * period_us / period_ticks;
    Some(SleeperFigures {
        p99_us: us(number(0)?),
        min_us: us(number(3)?),
        avg_us: us(number(5)?),
        max_us: us(number(7)?),
        samples: number(8)?,
    })
}

/// The sleeper period every case's I/O domain uses (`period_us=` in its
/// bootargs).
const HV_PERIOD_US: f64 = 1000.0;

fn run_hv(args: &[String]) -> ExitCode {
    let extra: Vec<&String> = args.iter().filter(|a| *a != "--hv").collect();
    if !extra.is_empty() {
        eprintln!("xtask lab --hv: takes no other arguments (got {extra:?})");
        return ExitCode::from(2);
    }
    let workspace = Workspace::current();
    let board = match board::find("qemu-virt") {
        Ok(board) => board,
        Err(e) => {
            eprintln!("xtask lab --hv: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = qemu::ensure_tools() {
        eprintln!("xtask lab --hv: {e}");
        return ExitCode::FAILURE;
    }
    let out = workspace.root.join("lab").join("results").join("hv");
    if let Err(e) = fs::create_dir_all(&out) {
        eprintln!("xtask lab --hv: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let mut options = RunOptions::for_board(board);
    options.smp = HV_SMP.to_string();
    options.extra = vec!["-icount".to_string(), HV_ICOUNT.to_string()];
    let mut measured = String::new();
    let _ = writeln!(
        measured,
        "# cargo xtask lab --hv: QEMU {} -smp {HV_SMP} -icount {HV_ICOUNT}\n\
         # case p99_us min_us avg_us max_us samples warmup_p99_us warmup_max_us ipi_round_trip_us\n\
         # (guest virtual time; the warm-up is the first sleeper run, from boot)",
        options.cpu
    );
    let mut failed = 0;
    for case in &HV_CASES {
        println!("lab --hv: {}: building {}", case.name, case.config);
        let config = workspace.root.join(case.config);
        let image = match image::build_with_config(&workspace, board, true, Some(&config)) {
            Ok(image) => image,
            Err(e) => {
                eprintln!("lab --hv: {}: {e}", case.name);
                failed += 1;
                continue;
            }
        };
        match run_case(board, &options, case, &image, &workspace.target_dir) {
            Ok(r) => {
                let f = &r.measured;
                println!(
                    "lab --hv: {}: p99 {:.1} us (min {:.1} avg {:.1} max {:.1}, {} samples); \
                     warm-up p99 {:.1} max {:.1}",
                    case.name,
                    f.p99_us,
                    f.min_us,
                    f.avg_us,
                    f.max_us,
                    f.samples,
                    r.warmup.p99_us,
                    r.warmup.max_us
                );
                let _ = writeln!(
                    measured,
                    "{} {:.1} {:.1} {:.1} {:.1} {} {:.1} {:.1} {}",
                    case.name,
                    f.p99_us,
                    f.min_us,
                    f.avg_us,
                    f.max_us,
                    f.samples,
                    r.warmup.p99_us,
                    r.warmup.max_us,
                    r.ipi_round_trip_us
                        .map_or("-".to_string(), |us| format!("{us:.0}"))
                );
            }
            Err(e) => {
                eprintln!("lab --hv: {}: {e}", case.name);
                let _ = writeln!(measured, "{} no-result", case.name);
                failed += 1;
            }
        }
    }
    let file = out.join("measured.txt");
    if let Err(e) = fs::write(&file, &measured) {
        eprintln!("lab --hv: {}: {e}", file.display());
        return ExitCode::FAILURE;
    }
    println!("lab --hv: measured figures in {}", file.display());
    // The simulated side and the table come from the lab itself.
    let compare = [
        "--hv-compare".to_string(),
        file.display().to_string(),
        "--out".to_string(),
        out.display().to_string(),
    ];
    let status = cargo_lab(&compare);
    if failed > 0 {
        eprintln!("lab --hv: {failed} case(s) gave no figures");
        return ExitCode::FAILURE;
    }
    status
}

fn run_case(
    board: &board::Board,
    options: &RunOptions,
    case: &HvCase,
    image: &Path,
    target: &Path,
) -> Result<CaseResult, String> {
    let Some((program, args)) = qemu::command(board, options) else {
        return Err("qemu-virt has no QEMU command".into());
    };
    let scenario = Scenario::new(format!("lab-hv-{}", case.name), program)
        .args(args)
        .kernel(image)
        .timeout(HV_TIMEOUT)
        .log_dir(target.join("qemu-logs"))
        // Two runs: the warm-up and the measured one (no regex metacharacters
        // in the line's text).
        .expect(Expectation::matching(SLEEPER_LINE, 2).map_err(|e| e.to_string())?);
    let outcome = scenario.run();
    let runs: Vec<SleeperFigures> = outcome
        .lines
        .iter()
        .filter_map(|l| parse_sleeper(l, HV_PERIOD_US))
        .collect();
    let trips: Vec<f64> = outcome
        .lines
        .iter()
        .filter_map(|l| parse_ipi_round_trip(l))
        .collect();
    let ipi_round_trip_us =
        (!trips.is_empty()).then(|| trips.iter().sum::<f64>() / trips.len() as f64);
    match runs.as_slice() {
        [warmup, measured] => {
            if let Err(f) = &outcome.result {
                // The figures are there; say what else went wrong.
                eprintln!("lab --hv: {}: note: {f}", case.name);
            }
            Ok(CaseResult {
                measured: measured.clone(),
                warmup: warmup.clone(),
                ipi_round_trip_us,
            })
        }
        _ => Err(format!(
            "{} sleeper lines, expected 2 ({}; log: {})",
            runs.len(),
            outcome
                .result
                .err()
                .map_or("ended".to_string(), |f| f.to_string()),
            outcome
                .log
                .as_deref()
                .map_or(PathBuf::from("-"), Path::to_path_buf)
                .display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeper_lines_parse_into_microseconds() {
        let line = "[dom1] test-guest: vcpu 0 sleeper p99 1250 ticks (min 500 avg 700 max 2500, 200 samples, period 62500 ticks)";
        let f = parse_sleeper(line, 1000.0).unwrap();
        assert_eq!(f.samples, 200);
        assert!((f.p99_us - 20.0).abs() < 1e-9);
        assert!((f.min_us - 8.0).abs() < 1e-9);
        assert!((f.max_us - 40.0).abs() < 1e-9);
        for bad in [
            "test-guest: vcpu 0 sleeper got no samples",
            "test-guest: vcpu 0 sleeper p99 x ticks (min 1 avg 1 max 1, 2 samples, period 3 ticks)",
            "test-guest: vcpu 0 sleeper p99 1 ticks (min 1 avg 1 max 1, 2 samples, period 0 ticks)",
        ] {
            assert_eq!(parse_sleeper(bad, 1000.0), None, "{bad}");
        }
    }

    #[test]
    fn ipi_round_trips_parse() {
        assert_eq!(
            parse_ipi_round_trip("[cpu0] INFO  ipi: cpu 1 round trip ok (2418 us)"),
            Some(2418.0)
        );
        assert_eq!(
            parse_ipi_round_trip("[cpu0] INFO  ipi: 3 of 3 round trips ok"),
            None
        );
    }

    #[test]
    fn every_case_has_its_config_file() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for case in &HV_CASES {
            assert!(root.join(case.config).is_file(), "{}", case.config);
        }
    }
}
