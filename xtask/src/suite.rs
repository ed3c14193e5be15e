//! `cargo xtask test`: every test the project has, in order, failing fast,
//! ending with the line `N passed, N failed` that CI reads.

use std::collections::BTreeMap;
use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::board;
use crate::cli::{Args, CliError};
use crate::image;
use crate::qemu;
use crate::scenarios::{self, QemuScenario};
use crate::workspace::Workspace;

/// The loom model-checking tests: (package, test target, its file). A step
/// is skipped with a note until its file exists.
const LOOM_TESTS: &[(&str, &str, &str)] = &[
    ("sched", "loom_rendezvous", "sched/tests/loom_rendezvous.rs"),
    ("sched", "loom_wake", "sched/tests/loom_wake.rs"),
    ("sched", "loom_pools", "sched/tests/loom_pools.rs"),
    ("platform", "loom_handoff", "platform/tests/loom_handoff.rs"),
];

/// What a step does.
enum Action {
    /// `cargo ARGS` (split at whitespace), with an extra environment variable.
    Cargo(&'static str, Option<(&'static str, &'static str)>),
    /// The loom model-checking tests (own target dir, `--cfg loom`).
    Loom,
    /// `cargo xtask topology` on a fixture, checked by `check`.
    Topology(&'static str, fn(&[CpuSummary]) -> Result<(), String>),
    /// A QEMU boot.
    Qemu(&'static QemuScenario),
    /// A bare QEMU boot of the test guest (no hypervisor).
    Guest(&'static crate::guest::GuestScenario),
    /// The ARM image's FP/SIMD instructions are `FpState`'s only
    /// (`fp_check`).
    FpFree,
}

/// One named step.
struct Step {
    name: &'static str,
    action: Action,
    pending: Option<&'static str>,
}

/// How a step ended.
enum Verdict {
    Passed,
    Failed(String),
    Skipped(String),
}

/// The steps, in the order they run.
fn steps() -> Vec<Step> {
    let step = |name, action| Step {
        name,
        action,
        pending: None,
    };
    let mut steps = vec![
        step("fmt", Action::Cargo("fmt --all --check", None)),
        // On the host `hv` is its logic library plus a stub binary; the real
        // image's code is checked by clippy-aarch64.
        step(
            "clippy-host",
            Action::Cargo("clippy --workspace --all-targets -- -D warnings", None),
        ),
        // The hypervisor's crates on its soft-float target, the guest's on
        // the hard-float one it is built for.
        step(
            "clippy-aarch64",
            Action::Cargo(
                "clippy -p hv -p platform -p gic -p sched -p boards \
                 --target aarch64-unknown-none-softfloat -- -D warnings",
                Some(("HV_BOARD", "qemu-virt")),
            ),
        ),
        step(
            "clippy-aarch64-guest",
            Action::Cargo(
                "clippy -p guest-abi -p test-guest --target aarch64-unknown-none -- -D warnings",
                None,
            ),
        ),
        step(
            "clippy-x86_64",
            Action::Cargo(
                "clippy -p hv -p platform -p apic -p sched -p boards -p guest-abi -p test-guest \
                 --target x86_64-unknown-none -- -D warnings",
                Some(("HV_BOARD", "qemu-x86")),
            ),
        ),
        // The UEFI test tool's application (a stub on the host).
        step(
            "clippy-uefi",
            Action::Cargo(
                "clippy -p uefi-madt-classes --target aarch64-unknown-uefi -- -D warnings",
                None,
            ),
        ),
        step("host-tests", Action::Cargo("test --workspace", None)),
        step("loom", Action::Loom),
        step(
            "topology-rpi4",
            Action::Topology("dtb/bcm2711-rpi-4-b.dtb", check_rpi4),
        ),
        step(
            "topology-rk3399",
            Action::Topology("dtb/rk3399-rockpro64.dtb", check_rk3399),
        ),
        step("fp-free-hypervisor", Action::FpFree),
    ];
    // The bare test-guest boots first: the hypervisor scenarios run that guest.
    steps.extend(crate::guest::SCENARIOS.iter().map(|s| Step {
        name: s.name,
        action: Action::Guest(s),
        pending: None,
    }));
    steps.extend(scenarios::SCENARIOS.iter().map(|s| Step {
        name: s.name,
        action: Action::Qemu(s),
        pending: s.pending,
    }));
    // Last, so that a FAIL of a lab target does not hide the other steps; the
    // lab exits non-zero when a target FAILs, which fails this step.
    steps.push(step(
        "lab-quick",
        Action::Cargo(
            "run --release --quiet -p lab -- --quick --out target/lab-quick",
            None,
        ),
    ));
    steps
}

/// Options of the test command.
struct Options {
    only: Option<String>,
    pending: bool,
    keep_going: bool,
    verbose: bool,
    list: bool,
    /// Runs of each selected step (`--repeat N`, at least 1).
    repeat: u32,
}

const USAGE: &str = "usage: cargo xtask test [--only PATTERN] [--pending] [--keep-going] [--verbose] [--list] [--repeat N]";

/// Runs the `test` command with the arguments after its name.
pub fn run(args: &[String]) -> ExitCode {
    let options = match parse(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("xtask test: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let all = steps();
    let selected: Vec<&Step> = all
        .iter()
        .filter(|s| options.only.as_deref().is_none_or(|p| s.name.contains(p)))
        .collect();
    if options.list {
        for step in &all {
            let note = step.pending.map(|p| format!("  (pending: {p})"));
            println!("{}{}", step.name, note.unwrap_or_default());
        }
        return ExitCode::SUCCESS;
    }
    if selected.is_empty() {
        eprintln!(
            "xtask test: no step matches {:?} (see --list)",
            options.only
        );
        return ExitCode::from(2);
    }

    let mut runner = Runner {
        workspace: Workspace::current(),
        images: BTreeMap::new(),
        verbose: options.verbose,
    };
    if let Err(e) = crate::toolchain::ensure_all(&runner.workspace) {
        eprintln!("xtask test: {e}");
        return ExitCode::FAILURE;
    }
    let mut results: Vec<(&str, Verdict, Duration)> = Vec::new();
    let total = selected.len();
    let mut steps_run = 0;
    for (i, step) in selected.iter().enumerate() {
        let mut failed = false;
        for run in 1..=options.repeat {
            let label = if options.repeat > 1 {
                format!("{} (run {run} of {})", step.name, options.repeat)
            } else {
                step.name.to_string()
            };
            println!("==> [{}/{total}] {label}", i + 1);
            let started = Instant::now();
            let verdict = match step.pending {
                Some(reason) if !options.pending => {
                    Verdict::Skipped(format!("pending: {reason} (run it with --pending)"))
                }
                _ => runner.run(step),
            };
            let elapsed = started.elapsed();
            let verdict = match verdict {
                // Every failed run keeps its own log: the next run overwrites
                // the scenario's.
                Verdict::Failed(why) if options.repeat > 1 => {
                    Verdict::Failed(match runner.keep_log(step.name, run) {
                        Some(kept) => format!("{why} (log: {})", kept.display()),
                        None => why,
                    })
                }
                other => other,
            };
            match &verdict {
                Verdict::Passed => {
                    println!("<== {label}: passed ({:.1} s)", elapsed.as_secs_f64())
                }
                Verdict::Failed(why) => println!("<== {label}: FAILED: {why}"),
                Verdict::Skipped(why) => println!("<== {label}: skipped: {why}"),
            }
            failed |= matches!(verdict, Verdict::Failed(_));
            let skipped = matches!(verdict, Verdict::Skipped(_));
            results.push((step.name, verdict, elapsed));
            if skipped {
                break;
            }
        }
        steps_run += 1;
        if failed && !options.keep_going {
            break;
        }
    }
    summary(&results, &selected[steps_run..], options.repeat)
}

fn parse(args: &[String]) -> Result<Options, CliError> {
    let mut args = Args::new(args);
    let options = Options {
        only: args.value("--only")?,
        pending: args.flag("--pending"),
        keep_going: args.flag("--keep-going"),
        verbose: args.flag("--verbose"),
        list: args.flag("--list"),
        repeat: args
            .parsed::<u32>("--repeat", "a number of runs")?
            .unwrap_or(1),
    };
    if options.repeat == 0 {
        return Err(CliError::BadValue {
            option: "--repeat".to_string(),
            value: "0".to_string(),
            expected: "at least 1 run",
        });
    }
    if let Some(extra) = args.finish()?.first() {
        return Err(CliError::Unknown(extra.clone()));
    }
    Ok(options)
}

/// Prints the summary table and the final `N passed, N failed` line (with
/// `--repeat`, per run, after each step's tally); `not_run` are the steps an
/// earlier failure stopped.
fn summary(results: &[(&str, Verdict, Duration)], not_run: &[&Step], repeat: u32) -> ExitCode {
    println!("\nsummary:");
    let (mut passed, mut failed) = (0, 0);
    for (name, verdict, elapsed) in results {
        let secs = elapsed.as_secs_f64();
        match verdict {
            Verdict::Passed => {
                passed += 1;
                println!("  pass     {name} ({secs:.1} s)");
            }
            // The reason again: a CI log shown only by its tail still says
            // why a step failed.
            Verdict::Failed(why) => {
                failed += 1;
                println!("  FAIL     {name} ({secs:.1} s): {}", shortened(why));
            }
            Verdict::Skipped(why) => println!("  skipped  {name}: {why}"),
        }
    }
    if repeat > 1 {
        for (name, runs) in tally(results) {
            let failures: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
            if failures.is_empty() {
                println!("  {name}: all {repeat} runs passed");
            } else {
                println!(
                    "  {name}: {} of {repeat} runs FAILED (runs {})",
                    failures.len(),
                    failures.join(", ")
                );
            }
        }
    }
    for step in not_run {
        println!(
            "  not run  {} (an earlier step failed; --keep-going runs it)",
            step.name
        );
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `why` cut to a summary line's worth (on a character boundary).
fn shortened(why: &str) -> String {
    const LIMIT: usize = 600;
    match why.char_indices().nth(LIMIT) {
        Some((at, _)) => format!("{} [...]", &why[..at]),
        None => why.to_string(),
    }
}

/// Per step, in order, the numbers (from 1) of its failed runs.
fn tally<'a>(results: &[(&'a str, Verdict, Duration)]) -> Vec<(&'a str, Vec<usize>)> {
    let mut tally: Vec<(&str, Vec<usize>, usize)> = Vec::new();
    for (name, verdict, _) in results {
        if tally.last().is_none_or(|(last, _, _)| last != name) {
            tally.push((name, Vec::new(), 0));
        }
        if let Some((_, failures, runs)) = tally.last_mut() {
            *runs += 1;
            if matches!(verdict, Verdict::Failed(_)) {
                failures.push(*runs);
            }
        }
    }
    tally
        .into_iter()
        .map(|(name, failures, _)| (name, failures))
        .collect()
}

/// State shared between steps: each board's QEMU image is built once.
struct Runner {
    workspace: Workspace,
    images: BTreeMap<(&'static str, Option<&'static str>), Result<PathBuf, String>>,
    verbose: bool,
}

impl Runner {
    /// Copies a failed run's QEMU log (`qemu-logs/NAME.log`) to
    /// `qemu-logs/NAME.failed-run-RUN.log`; `None` if the step has no log.
    fn keep_log(&self, name: &str, run: u32) -> Option<PathBuf> {
        let logs = self.workspace.target_dir.join("qemu-logs");
        let kept = logs.join(format!("{name}.failed-run-{run}.log"));
        std::fs::copy(logs.join(format!("{name}.log")), &kept).ok()?;
        Some(kept)
    }

    fn run(&mut self, step: &Step) -> Verdict {
        match &step.action {
            Action::Cargo(args, env) => {
                let args: Vec<&str> = args.split_whitespace().collect();
                let env: Vec<(&str, String)> =
                    env.iter().map(|(k, v)| (*k, v.to_string())).collect();
                self.cargo(&args, &env, None)
            }
            Action::Loom => {
                let flags = match env::var("RUSTFLAGS") {
                    Ok(flags) if !flags.is_empty() => format!("{flags} --cfg loom"),
                    _ => "--cfg loom".to_string(),
                };
                // Its own target dir: other RUSTFLAGS would rebuild everything.
                let dir = self.workspace.output("loom");
                let mut skipped = Vec::new();
                for &(package, test, file) in LOOM_TESTS {
                    if !self.workspace.root.join(file).is_file() {
                        skipped.push(format!("{file} does not exist yet"));
                        continue;
                    }
                    let verdict = self.cargo(
                        &["test", "-p", package, "--release", "--test", test],
                        &[("RUSTFLAGS", flags.clone())],
                        Some(&dir),
                    );
                    if !matches!(verdict, Verdict::Passed) {
                        return verdict;
                    }
                }
                if skipped.len() == LOOM_TESTS.len() {
                    Verdict::Skipped(skipped.join("; "))
                } else {
                    Verdict::Passed
                }
            }
            Action::Topology(fixture, check) => self.topology(fixture, *check),
            Action::Qemu(scenario) => self.qemu(scenario),
            Action::FpFree => match crate::fp_check::check(&self.workspace) {
                Ok(allowed) => {
                    println!(
                        "    {allowed} FP/SIMD instructions, all in {:?}",
                        crate::fp_check::ALLOWED_FUNCTIONS
                    );
                    Verdict::Passed
                }
                Err(why) => Verdict::Failed(why),
            },
            Action::Guest(scenario) => {
                match crate::guest::run_scenario(&self.workspace, scenario, self.verbose) {
                    Ok(()) => Verdict::Passed,
                    Err(why) => Verdict::Failed(why),
                }
            }
        }
    }

    fn cargo(&self, args: &[&str], env: &[(&str, String)], target_dir: Option<&Path>) -> Verdict {
        let mut cargo = self.workspace.cargo();
        cargo.args(args);
        for (key, value) in env {
            cargo.env(key, value);
        }
        if let Some(dir) = target_dir {
            cargo.env("CARGO_TARGET_DIR", dir);
        }
        let line = format!("cargo {}", args.join(" "));
        println!("    {line}");
        match cargo.status() {
            Ok(status) if status.success() => Verdict::Passed,
            Ok(status) => Verdict::Failed(format!("{line}: {status}")),
            Err(e) => Verdict::Failed(format!("cannot run cargo: {e}")),
        }
    }

    fn topology(&self, fixture: &str, check: fn(&[CpuSummary]) -> Result<(), String>) -> Verdict {
        // Relative to the repository root, which the command runs from.
        let path = Path::new("../shared/fixtures").join(fixture);
        if !self.workspace.root.join(&path).is_file() {
            return Verdict::Failed(format!(
                "{} is missing: the shared fixtures must sit beside the repository",
                self.workspace.root.join(&path).display()
            ));
        }
        let exe = match env::current_exe() {
            Ok(exe) => exe,
            Err(e) => return Verdict::Failed(format!("cannot find the xtask binary: {e}")),
        };
        println!("    cargo xtask topology {} --json", path.display());
        let output = match Command::new(exe)
            .arg("topology")
            .arg(&path)
            .arg("--json")
            .current_dir(&self.workspace.root)
            .output()
        {
            Ok(output) => output,
            Err(e) => return Verdict::Failed(format!("cannot run xtask topology: {e}")),
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let shown = format!(
            "\n--- stdout ---\n{stdout}--- stderr ---\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        if !output.status.success() {
            return Verdict::Failed(format!("xtask topology: {}{shown}", output.status));
        }
        match cpus_from_json(&stdout).and_then(|cpus| check(&cpus)) {
            Ok(()) => Verdict::Passed,
            Err(why) => Verdict::Failed(format!("{why}{shown}")),
        }
    }

    fn qemu(&mut self, scenario: &QemuScenario) -> Verdict {
        let board = match board::find(scenario.board) {
            Ok(board) => board,
            Err(e) => return Verdict::Failed(e.to_string()),
        };
        let workspace = &self.workspace;
        let config = scenario.config();
        let image = self.images.entry((board.name, config)).or_insert_with(|| {
            qemu::ensure_tools().map_err(|e| e.to_string())?;
            if scenario.needs_linux_guest_files() {
                crate::linux::prepare(workspace).map_err(|e| format!("Linux guest: {e}"))?;
            }
            println!("    building the {} image (release)", board.name);
            let config = config.map(|c| workspace.root.join(c));
            image::build_with_config(workspace, board, true, config.as_deref())
                .map_err(|e| e.to_string())
        });
        let image = match image {
            Ok(image) => image.clone(),
            Err(e) => return Verdict::Failed(format!("no image: {e}")),
        };
        if scenario.needs_uefi_tool()
            && let Err(e) = crate::uefi_tool::write_tool_esp(workspace, &image)
        {
            return Verdict::Failed(format!("UEFI test tool: {e}"));
        }
        let output = self.workspace.target_dir.clone();
        let harness = match scenario.prepare(board, &image, &output) {
            Ok(harness) => harness.echo(self.verbose),
            Err(e) => return Verdict::Failed(e.to_string()),
        };
        println!("    {}", harness.command_line());
        let outcome = harness.run();
        if outcome.passed() {
            match scenario.verify(&outcome.lines) {
                Ok(()) => Verdict::Passed,
                Err(why) => Verdict::Failed(why),
            }
        } else {
            println!("{}", outcome.report());
            let why = outcome
                .result
                .err()
                .map(|f| f.to_string())
                .unwrap_or_default();
            Verdict::Failed(why.lines().next().unwrap_or_default().to_string())
        }
    }
}

/// One CPU as the topology command's JSON describes it.
#[derive(Debug, PartialEq)]
pub struct CpuSummary {
    /// Socket number (0 when absent).
    pub socket: u64,
    /// Cluster number within the socket.
    pub cluster: u64,
    /// `capacity-dmips-mhz`, if any.
    pub capacity: Option<u64>,
}

/// Finds the list of CPUs in `cargo xtask topology --json` output: the first
/// array (depth first) whose items are all objects with a `cluster` field,
/// such as `{"cpus": [{"socket": 0, "cluster": 1, "capacity": 1024, …}]}`.
pub fn cpus_from_json(text: &str) -> Result<Vec<CpuSummary>, String> {
    fn find(value: &Value) -> Option<&Vec<Value>> {
        match value {
            Value::Array(items)
                if !items.is_empty()
                    && items
                        .iter()
                        .all(|i| i.get("cluster").is_some_and(Value::is_u64)) =>
            {
                Some(items)
            }
            Value::Array(items) => items.iter().find_map(find),
            Value::Object(fields) => fields.values().find_map(find),
            _ => None,
        }
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("topology --json is not JSON: {e}"))?;
    let cpus = find(&value).ok_or("no list of CPUs with `cluster` fields in the JSON")?;
    Ok(cpus
        .iter()
        .map(|cpu| CpuSummary {
            socket: cpu.get("socket").and_then(Value::as_u64).unwrap_or(0),
            cluster: cpu.get("cluster").and_then(Value::as_u64).unwrap_or(0),
            capacity: cpu.get("capacity").and_then(Value::as_u64),
        })
        .collect())
}

/// Capacities of each cluster, keyed by (socket, cluster).
fn clusters(cpus: &[CpuSummary]) -> BTreeMap<(u64, u64), Vec<Option<u64>>> {
    let mut clusters: BTreeMap<(u64, u64), Vec<Option<u64>>> = BTreeMap::new();
    for cpu in cpus {
        clusters
            .entry((cpu.socket, cpu.cluster))
            .or_default()
            .push(cpu.capacity);
    }
    clusters
}

/// Raspberry Pi 4: four CPUs, one cluster.
fn check_rpi4(cpus: &[CpuSummary]) -> Result<(), String> {
    let clusters = clusters(cpus);
    if cpus.len() != 4 || clusters.len() != 1 {
        return Err(format!(
            "rpi4: expected 4 CPUs in 1 cluster, got {} CPUs in {} clusters",
            cpus.len(),
            clusters.len()
        ));
    }
    Ok(())
}

/// RK3399: a cluster of four A53s (capacity 485) and one of two A72s (1024).
fn check_rk3399(cpus: &[CpuSummary]) -> Result<(), String> {
    // (CPUs in the cluster, distinct capacities in it) for each cluster.
    let mut shapes: Vec<(usize, Vec<Option<u64>>)> = clusters(cpus)
        .into_values()
        .map(|mut caps| {
            let count = caps.len();
            caps.sort();
            caps.dedup();
            (count, caps)
        })
        .collect();
    shapes.sort();
    let expected = vec![(2, vec![Some(1024)]), (4, vec![Some(485)])];
    if shapes != expected {
        return Err(format!(
            "rk3399: expected 2 clusters, 4 CPUs of capacity 485 and 2 of 1024; \
             got (CPUs, capacities) per cluster {shapes:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clippy steps name their targets in string literals: they must
    /// be the ones the images are built for.
    #[test]
    fn clippy_steps_check_the_targets_the_images_are_built_for() {
        let args_of = |name: &str| {
            steps()
                .into_iter()
                .find(|s| s.name == name)
                .and_then(|s| match s.action {
                    Action::Cargo(args, _) => Some(args),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("no cargo step {name}"))
        };
        let target_of = |args: &str| {
            let words: Vec<&str> = args.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "--target").unwrap();
            words[at + 1].to_string()
        };
        assert_eq!(
            target_of(args_of("clippy-aarch64")),
            boards::ARM64_HV_TARGET
        );
        assert_eq!(
            target_of(args_of("clippy-aarch64-guest")),
            crate::guest::GUEST_TARGET
        );
        assert_eq!(
            target_of(args_of("clippy-x86_64")),
            crate::guest::GUEST_TARGET_X86
        );
    }

    fn cpus(json: &str) -> Vec<CpuSummary> {
        cpus_from_json(json).unwrap()
    }

    #[test]
    fn cpu_lists_are_found_in_nested_json() {
        let json = r#"{"source": "x.dtb", "topology": {"cpus": [
            {"index": 0, "socket": 0, "cluster": 0, "capacity": null},
            {"index": 1, "socket": 0, "cluster": 1, "capacity": 1024}]}}"#;
        assert_eq!(
            cpus(json),
            [
                CpuSummary {
                    socket: 0,
                    cluster: 0,
                    capacity: None
                },
                CpuSummary {
                    socket: 0,
                    cluster: 1,
                    capacity: Some(1024)
                }
            ]
        );
        assert!(cpus_from_json("topology: 4 CPUs").is_err());
        assert!(cpus_from_json(r#"{"cpus": []}"#).is_err());
    }

    fn cpu_list(clusters: &[(u64, Option<u64>)]) -> Vec<CpuSummary> {
        clusters
            .iter()
            .map(|&(cluster, capacity)| CpuSummary {
                socket: 0,
                cluster,
                capacity,
            })
            .collect()
    }

    #[test]
    fn a_long_reason_is_shortened_on_a_character_boundary() {
        assert_eq!(shortened("no expectation met"), "no expectation met");
        let long = "é".repeat(700);
        let short = shortened(&long);
        assert!(short.ends_with(" [...]"));
        assert_eq!(short.chars().count(), 600 + " [...]".len());
    }

    #[test]
    fn rpi4_check() {
        assert!(check_rpi4(&cpu_list(&[(0, None); 4])).is_ok());
        assert!(check_rpi4(&cpu_list(&[(0, None); 3])).is_err());
        assert!(check_rpi4(&cpu_list(&[(0, None), (0, None), (1, None), (1, None)])).is_err());
    }

    #[test]
    fn rk3399_check() {
        let little = (0, Some(485));
        let big = (1, Some(1024));
        let good = [little, little, little, little, big, big];
        assert!(check_rk3399(&cpu_list(&good)).is_ok());
        let flat = [(0, Some(485)); 6];
        assert!(check_rk3399(&cpu_list(&flat)).is_err());
        let no_capacity = [
            (0, None),
            (0, None),
            (0, None),
            (0, None),
            (1, None),
            (1, None),
        ];
        assert!(check_rk3399(&cpu_list(&no_capacity)).is_err());
        let swapped = [big, big, big, big, little, little];
        assert!(check_rk3399(&cpu_list(&swapped)).is_err());
    }

    #[test]
    fn step_names_are_unique_and_cover_the_brief() {
        let steps = steps();
        for (i, step) in steps.iter().enumerate() {
            assert!(
                steps[..i].iter().all(|s| s.name != step.name),
                "{}",
                step.name
            );
        }
        for name in [
            "fmt",
            "clippy-host",
            "clippy-aarch64",
            "clippy-x86_64",
            "clippy-uefi",
            "host-tests",
            "loom",
        ] {
            assert!(steps.iter().any(|s| s.name == name), "{name}");
        }
        assert!(steps.iter().any(|s| s.name == "qemu-virt-gicv3-boot"));
        for name in ["qemu-x86-smt", "qemu-x86-two-packages", "qemu-x86-x2apic"] {
            assert!(steps.iter().any(|s| s.name == name), "{name}");
        }
    }
}
