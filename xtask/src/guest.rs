//! `cargo xtask guest`: build the test guest (`guest/test-guest`) as a flat
//! arm64 `Image`, boot it bare on QEMU (no hypervisor: QEMU starts it at EL1
//! and answers PSCI over HVC), and the `guest-bare-*` scenarios of
//! `cargo xtask test`, which check the guest itself before the hypervisor
//! runs it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use ::tests::{Expectation, Scenario};

use crate::cli::{Args, CliError};
use crate::image::{self, BuildError};
use crate::qemu::Gic;
use crate::workspace::{self, Workspace};

/// The guest's Rust target.
pub const GUEST_TARGET: &str = "aarch64-unknown-none";

/// The guest's package and binary name.
const PACKAGE: &str = "test-guest";

/// Memory QEMU gives a bare guest (guest RAM 0x4000_0000..0x5000_0000).
const BARE_MEMORY: &str = "256M";

/// The first address past a bare guest's RAM: what the misbehaviour
/// workload touches.
const BARE_RAM_END: &str = "0x50000000";

/// How long one bare boot may take under TCG on shared host cores.
pub const GUEST_TIMEOUT: Duration = Duration::from_secs(90);

const USAGE: &str = "\
usage: cargo xtask guest <command> [options]

commands:
  build [--debug]
        build the test guest and print the path of its flat image
  run   [--debug] [--gic 2|3] [--smp N] [--append BOOTARGS] [--timeout SECS]
        boot it bare on QEMU at EL1 (no hypervisor), console on stdio;
        BOOTARGS choose workloads, e.g. \"workload=compute,sleeper period_us=1000\"";

/// Runs `cargo xtask guest ...`.
pub fn run(args: &[String]) -> ExitCode {
    let rest = args.get(1..).unwrap_or_default();
    let result = match args.first().map(String::as_str) {
        Some("build") => build_command(rest),
        Some("run") => run_command(rest),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask guest: {e}");
            ExitCode::FAILURE
        }
    }
}

fn build_command(args: &[String]) -> Result<(), String> {
    let mut args = Args::new(args);
    let release = !args.flag("--debug");
    if let Some(extra) = args.finish().map_err(|e| e.to_string())?.first() {
        return Err(CliError::Unknown(extra.clone()).to_string());
    }
    let image = build(&Workspace::current(), release).map_err(|e| e.to_string())?;
    println!("{}", image.display());
    Ok(())
}

/// What `guest run` was asked for.
#[derive(Debug, PartialEq)]
struct RunRequest {
    release: bool,
    gic: Gic,
    smp: usize,
    append: Option<String>,
    timeout: Option<Duration>,
}

fn parse_run(args: &[String]) -> Result<RunRequest, String> {
    let mut args = Args::new(args);
    let text = |e: CliError| e.to_string();
    let release = !args.flag("--debug");
    let gic = match args.parsed::<u8>("--gic", "2 or 3").map_err(text)? {
        None | Some(3) => Gic::V3,
        Some(2) => Gic::V2,
        Some(other) => return Err(format!("--gic {other}: expected 2 or 3")),
    };
    let smp = args
        .parsed::<usize>("--smp", "a CPU count")
        .map_err(text)?
        .unwrap_or(4);
    if !(1..=8).contains(&smp) {
        return Err(format!("--smp {smp}: the guest runs 1 to 8 vCPUs"));
    }
    let append = args.value("--append").map_err(text)?;
    let timeout = args
        .parsed::<u64>("--timeout", "whole seconds")
        .map_err(text)?
        .map(Duration::from_secs);
    if let Some(extra) = args.finish().map_err(text)?.first() {
        return Err(CliError::Unknown(extra.clone()).to_string());
    }
    Ok(RunRequest {
        release,
        gic,
        smp,
        append,
        timeout,
    })
}

fn run_command(args: &[String]) -> Result<(), String> {
    let request = parse_run(args)?;
    crate::qemu::ensure_tools().map_err(|e| e.to_string())?;
    let image = build(&Workspace::current(), request.release).map_err(|e| e.to_string())?;
    let qemu_args = bare_qemu_args(request.gic, request.smp, request.append.as_deref());
    eprintln!(
        "xtask: qemu-system-aarch64 {} -kernel {}  (quit: Ctrl-A X)",
        qemu_args.join(" "),
        image.display()
    );
    let mut child = Command::new("qemu-system-aarch64")
        .args(&qemu_args)
        .arg("-kernel")
        .arg(&image)
        .spawn()
        .map_err(|e| format!("cannot start qemu-system-aarch64: {e}"))?;
    match crate::wait_with_timeout(&mut child, request.timeout) {
        Ok(Some(status)) if status.success() => Ok(()),
        Ok(Some(status)) => Err(format!("qemu-system-aarch64 ended: {status}")),
        Ok(None) => {
            eprintln!("\nxtask guest run: stopped QEMU after the timeout");
            Ok(())
        }
        Err(e) => Err(format!("waiting for qemu-system-aarch64: {e}")),
    }
}

/// QEMU arguments (without `-kernel`) that boot the guest bare: no
/// `virtualization=on`, so QEMU starts it at EL1 and provides PSCI over HVC.
pub fn bare_qemu_args(gic: Gic, smp: usize, append: Option<&str>) -> Vec<String> {
    let gic = match gic {
        Gic::V2 => 2,
        Gic::V3 => 3,
    };
    let mut args: Vec<String> = [
        "-machine",
        &format!("virt,gic-version={gic}"),
        "-cpu",
        "cortex-a72",
        "-smp",
        &smp.to_string(),
        "-m",
        BARE_MEMORY,
        "-nographic",
        "-serial",
        "mon:stdio",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(append) = append {
        args.extend(["-append".to_string(), append.to_string()]);
    }
    args
}

/// Where cargo puts the guest's ELF.
pub fn elf_path(workspace: &Workspace, release: bool) -> PathBuf {
    let profile = if release { "release" } else { "debug" };
    workspace
        .target_dir
        .join(GUEST_TARGET)
        .join(profile)
        .join(PACKAGE)
}

/// Builds the test guest and returns its flat image,
/// `<target>/images/guest/test-guest.bin`, checked to be an arm64 `Image`.
pub fn build(workspace: &Workspace, release: bool) -> Result<PathBuf, BuildError> {
    crate::toolchain::ensure_target(workspace, GUEST_TARGET)?;
    let mut cargo = workspace.cargo();
    cargo.args([
        "build",
        "-p",
        PACKAGE,
        "--bin",
        PACKAGE,
        "--target",
        GUEST_TARGET,
    ]);
    if release {
        cargo.arg("--release");
    }
    workspace::run_checked(&mut cargo, "cargo build -p test-guest")?;
    let elf = elf_path(workspace, release);
    let dir = workspace.output("images").join("guest");
    fs::create_dir_all(&dir).map_err(|e| BuildError::Io(dir.clone(), e))?;
    let flat = dir.join(format!("{PACKAGE}.bin"));
    workspace::run_checked(
        Command::new(image::objcopy(workspace)?)
            .args(["-O", "binary"])
            .arg(&elf)
            .arg(&flat),
        "llvm-objcopy -O binary",
    )?;
    let bytes = fs::read(&flat).map_err(|e| BuildError::Io(flat.clone(), e))?;
    image::check_arm64_header(&bytes).map_err(|e| BuildError::BadImage(flat.clone(), e))?;
    Ok(flat)
}

/// The test guest's target on x86-64 boards.
pub const GUEST_TARGET_X86: &str = "x86_64-unknown-none";

/// Builds the x86-64 test guest and returns its flat image,
/// `<target>/images/guest/test-guest-x86_64.bin` (loaded by the hypervisor at
/// guest-physical 0x8000, `guest_abi::x86::IMAGE_BASE`).
pub fn build_x86(workspace: &Workspace, release: bool) -> Result<PathBuf, BuildError> {
    crate::toolchain::ensure_target(workspace, GUEST_TARGET_X86)?;
    let mut cargo = workspace.cargo();
    cargo.args([
        "build",
        "-p",
        PACKAGE,
        "--bin",
        PACKAGE,
        "--target",
        GUEST_TARGET_X86,
    ]);
    if release {
        cargo.arg("--release");
    }
    workspace::run_checked(&mut cargo, "cargo build -p test-guest (x86-64)")?;
    let profile = if release { "release" } else { "debug" };
    let elf = workspace
        .target_dir
        .join(GUEST_TARGET_X86)
        .join(profile)
        .join(PACKAGE);
    let dir = workspace.output("images").join("guest");
    fs::create_dir_all(&dir).map_err(|e| BuildError::Io(dir.clone(), e))?;
    let flat = dir.join(format!("{PACKAGE}-x86_64.bin"));
    workspace::run_checked(
        Command::new(image::objcopy(workspace)?)
            .args(["-O", "binary"])
            .arg(&elf)
            .arg(&flat),
        "llvm-objcopy -O binary",
    )?;
    Ok(flat)
}

/// What a bare-guest scenario checks.
#[derive(Debug)]
pub enum GuestCheck {
    /// The built-in workloads (no boot arguments): every vCPU online, each
    /// one's progress counter rising to `rounds`, a sleeper summary from each,
    /// every ping-pong peer answering, and the bare-mode answers to the hooks
    /// and the misbehaviour.
    Full {
        /// Progress lines each vCPU prints (the guest's default `rounds`).
        rounds: u32,
    },
    /// Workloads chosen by `-append` reach the guest through the device
    /// tree's `/chosen/bootargs`: only the sleeper, the misbehaviour and the
    /// pool listing (refused: no hypervisor) run,
    /// on the first `vcpus` vCPUs, with `samples` samples each.
    Bootargs {
        /// `vcpus=` given.
        vcpus: usize,
        /// `samples=` given.
        samples: u32,
    },
    /// No device tree: the guest says so, assumes QEMU virt's layout, finds
    /// its vCPUs by probing with PSCI `CPU_ON`, and runs the built-in
    /// workloads.
    NoDeviceTree,
}

/// One bare boot of the test guest and what its console must show.
#[derive(Debug)]
pub struct GuestScenario {
    /// Step name, as `cargo xtask test --only` matches it.
    pub name: &'static str,
    /// GIC version of the machine.
    pub gic: Gic,
    /// CPUs QEMU gives the guest.
    pub smp: usize,
    /// Boot arguments (`-append`).
    pub append: Option<&'static str>,
    /// Boot the ELF instead of the flat `Image`: QEMU then passes no device
    /// tree (x0 = 0), as a loader without one would.
    pub elf: bool,
    /// What it checks.
    pub check: GuestCheck,
    /// Text that must not appear (a line containing it fails the run).
    pub forbidden: &'static [&'static str],
}

/// The bare-guest scenarios, in the order they run.
pub const SCENARIOS: &[GuestScenario] = &[
    GuestScenario {
        name: "guest-bare-gicv3",
        gic: Gic::V3,
        smp: 4,
        append: None,
        elf: false,
        check: GuestCheck::Full { rounds: 5 },
        forbidden: &["did not come online", "gave up waiting", "did not fire"],
    },
    GuestScenario {
        name: "guest-bare-gicv2",
        gic: Gic::V2,
        smp: 4,
        append: None,
        elf: false,
        check: GuestCheck::Full { rounds: 5 },
        forbidden: &["did not come online", "gave up waiting", "did not fire"],
    },
    GuestScenario {
        name: "guest-bare-bootargs",
        gic: Gic::V3,
        smp: 4,
        append: Some("workload=sleeper,misbehave,pools samples=7 vcpus=2 end=off"),
        elf: false,
        check: GuestCheck::Bootargs {
            vcpus: 2,
            samples: 7,
        },
        // Compute did not run and vCPUs 2 and 3 were not started.
        forbidden: &[
            "] progress ",
            "vcpu 2 online",
            "vcpu 3 online",
            "bad boot arguments",
        ],
    },
    GuestScenario {
        name: "guest-bare-no-dtb",
        gic: Gic::V3,
        smp: 3,
        append: None,
        elf: true,
        check: GuestCheck::NoDeviceTree,
        forbidden: &["vcpu 3 online", "did not come online", "gave up waiting"],
    },
];

fn each(template: &str, values: std::ops::Range<usize>) -> Expectation {
    Expectation::each(template, values).expect("templates are escaped, so they compile")
}

impl GuestScenario {
    /// What the console must show.
    pub fn expectations(&self) -> Vec<Expectation> {
        let gic = match self.gic {
            Gic::V2 => "test-guest: gic GICv2",
            Gic::V3 => "test-guest: gic GICv3",
        };
        let mut all = vec![
            Expectation::contains(gic),
            Expectation::contains("no hypervisor ABI (VERSION returned -1)"),
        ];
        match self.check {
            GuestCheck::Full { rounds } => all.extend(full_expectations(self.smp, rounds)),
            GuestCheck::NoDeviceTree => {
                let n = self.smp;
                all.extend([
                    Expectation::contains("device tree not used (none passed (x0 = 0))"),
                    Expectation::contains("probing with PSCI CPU_ON"),
                    each("test-guest: vcpu {} online", 0..n),
                    Expectation::contains(format!("test-guest: {n} of {n} vCPUs online")),
                    each("test-guest: vcpu {} sleeper p99", 0..n),
                    Expectation::contains(format!(
                        "test-guest: pingpong done: {0} of {0} peers answered",
                        n - 1
                    )),
                ]);
            }
            GuestCheck::Bootargs { vcpus, samples } => {
                let append = self.append.unwrap_or_default();
                all.extend([
                    Expectation::contains(format!("test-guest: bootargs {append:?}")),
                    Expectation::contains(format!("test-guest: {vcpus} of {vcpus} vCPUs online")),
                    each("test-guest: vcpu {} sleeper p99", 0..vcpus),
                    Expectation::matching(
                        &format!(
                            r"vcpu \d+ sleeper p99 \d+ ticks \(min \d+ avg \d+ max \d+, {samples} samples"
                        ),
                        vcpus,
                    )
                    .expect("the pattern compiles"),
                    Expectation::contains("test-guest: bad hypercall returned -1 (NOT_SUPPORTED)"),
                    Expectation::contains("test-guest: POOL_OP list failed (NOT_SUPPORTED (-1))"),
                ]);
            }
        }
        all.push(Expectation::contains("test-guest: all workloads done"));
        all
    }

    /// The harness scenario that boots `kernel` (the flat image, or the ELF
    /// when `elf` is set), logging under `output`.
    pub fn prepare(&self, kernel: &Path, output: &Path) -> Scenario {
        let mut scenario = Scenario::new(self.name, "qemu-system-aarch64")
            .args(bare_qemu_args(self.gic, self.smp, self.append))
            .kernel(kernel)
            .timeout(GUEST_TIMEOUT)
            .log_dir(output.join("qemu-logs"));
        for expectation in self.expectations() {
            scenario = scenario.expect(expectation);
        }
        scenario
            .failure_patterns
            .extend(self.forbidden.iter().map(|f| f.to_string()));
        scenario
    }
}

/// The built-in workloads' lines on `n` vCPUs.
fn full_expectations(n: usize, rounds: u32) -> Vec<Expectation> {
    let peers = n - 1;
    let progress = (0..n)
        .map(|v| {
            let line = format!("[vcpu{v}] progress {{}}");
            Expectation::InOrder(vec![
                Expectation::each(&line, [1]).expect("escaped template"),
                Expectation::each(&line, [rounds]).expect("escaped template"),
            ])
        })
        .collect();
    vec![
        each("test-guest: vcpu {} online", 0..n),
        Expectation::contains(format!("test-guest: {n} of {n} vCPUs online")),
        Expectation::AllOf(progress),
        each("test-guest: vcpu {} compute done", 0..n),
        each("test-guest: vcpu {} sleeper p99", 0..n),
        Expectation::InOrder(vec![
            each("test-guest: pingpong vcpu 0 <-> vcpu {}:", 1..n),
            Expectation::contains(format!(
                "test-guest: pingpong done: {peers} of {peers} peers answered"
            )),
        ]),
        Expectation::contains("test-guest: pause sibling not supported (-1), skipped"),
        Expectation::contains("test-guest: bad hypercall returned -1 (NOT_SUPPORTED)"),
        Expectation::contains(format!("test-guest: bad access at {BARE_RAM_END} faulted")),
    ]
}

/// Builds the guest and runs one scenario (a `cargo xtask test` step).
pub fn run_scenario(
    workspace: &Workspace,
    scenario: &GuestScenario,
    verbose: bool,
) -> Result<(), String> {
    crate::qemu::ensure_tools().map_err(|e| e.to_string())?;
    let image = build(workspace, true).map_err(|e| format!("no guest image: {e}"))?;
    let kernel = if scenario.elf {
        elf_path(workspace, true)
    } else {
        image
    };
    let harness = scenario
        .prepare(&kernel, &workspace.target_dir)
        .echo(verbose);
    println!("    {}", harness.command_line());
    let outcome = harness.run();
    if outcome.passed() {
        return Ok(());
    }
    println!("{}", outcome.report());
    let why = outcome
        .result
        .err()
        .map(|f| f.to_string())
        .unwrap_or_default();
    Err(why.lines().next().unwrap_or_default().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console of a healthy bare run with `n` vCPUs, minus lines
    /// containing any of `skip`.
    fn healthy(gic: &str, n: usize, rounds: u32, skip: &[&str]) -> Vec<String> {
        let mut lines = vec![
            "test-guest: started at EL1, dtb at 0x48000000".to_string(),
            "test-guest: no hypervisor ABI (VERSION returned -1): bare mode, console only".into(),
            format!("test-guest: gic {gic} from device tree (distributor 0x8000000)"),
        ];
        lines.extend((0..n).map(|v| format!("test-guest: vcpu {v} online (mpidr {v:#x})")));
        lines.push(format!("test-guest: {n} of {n} vCPUs online"));
        for round in 1..=rounds {
            lines.extend((0..n).map(|v| format!("[vcpu{v}] progress {round}")));
        }
        lines.extend(
            (0..n).map(|v| format!("test-guest: vcpu {v} compute done after {rounds} rounds")),
        );
        lines.extend((0..n).map(|v| {
            format!("test-guest: vcpu {v} sleeper p99 900 ticks (min 5 avg 40 max 900, 50 samples)")
        }));
        lines.extend((1..n).map(|p| {
            format!(
                "test-guest: pingpong vcpu 0 <-> vcpu {p}: 20 round trips, min 1 avg 2 max 3 ticks"
            )
        }));
        lines.push(format!(
            "test-guest: pingpong done: {0} of {0} peers answered",
            n - 1
        ));
        lines.push("test-guest: pause sibling not supported (-1), skipped".into());
        lines.push("test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected".into());
        lines.push(format!(
            "test-guest: bad access at {BARE_RAM_END} faulted (ESR 0x96000010, FAR {BARE_RAM_END})"
        ));
        lines.push("test-guest: all workloads done".into());
        lines
            .into_iter()
            .filter(|l| !skip.iter().any(|s| l.contains(s)))
            .collect()
    }

    fn met(scenario: &GuestScenario, lines: &[String]) -> bool {
        scenario.expectations().iter().all(|e| e.is_met(lines))
    }

    #[test]
    fn a_healthy_run_meets_each_scenario_and_not_the_other_gic() {
        let v3 = &SCENARIOS[0];
        let v2 = &SCENARIOS[1];
        assert!(met(v3, &healthy("GICv3", 4, 5, &[])));
        assert!(met(v2, &healthy("GICv2", 4, 5, &[])));
        assert!(!met(v3, &healthy("GICv2", 4, 5, &[])));
        assert!(!met(v2, &healthy("GICv3", 4, 5, &[])));
    }

    #[test]
    fn each_missing_line_fails_the_scenario() {
        let scenario = &SCENARIOS[0];
        for missing in [
            "vcpu 3 online",
            "4 of 4 vCPUs online",
            "[vcpu2] progress 5",
            "[vcpu0] progress 1",
            "vcpu 1 compute done",
            "vcpu 2 sleeper p99",
            "vcpu 0 <-> vcpu 3",
            "3 of 3 peers answered",
            "pause sibling",
            "bad hypercall",
            "bad access",
            "all workloads done",
        ] {
            assert!(
                !met(scenario, &healthy("GICv3", 4, 5, &[missing])),
                "{missing} is not required"
            );
        }
        // Three vCPUs cannot pass a four-vCPU scenario.
        assert!(!met(scenario, &healthy("GICv3", 3, 5, &[])));
        // A counter that stops early does not count as rising to the end.
        assert!(!met(scenario, &healthy("GICv3", 4, 4, &[])));
    }

    #[test]
    fn progress_must_rise_in_order() {
        let scenario = &SCENARIOS[0];
        let mut lines = healthy("GICv3", 4, 5, &[]);
        let last = lines
            .iter()
            .position(|l| l == "[vcpu1] progress 5")
            .unwrap();
        let moved = lines.remove(last);
        lines.insert(0, moved);
        assert!(!met(scenario, &lines));
    }

    #[test]
    fn a_failed_peer_or_a_wrong_error_code_is_caught() {
        let scenario = &SCENARIOS[0];
        let mut lines = healthy("GICv3", 4, 5, &["bad hypercall"]);
        lines.push("test-guest: bad hypercall returned -2, expected -1".into());
        assert!(!met(scenario, &lines));
        let mut lines = healthy("GICv3", 4, 5, &["peers answered"]);
        lines.push("test-guest: pingpong done: 2 of 3 peers answered".into());
        assert!(!met(scenario, &lines));
    }

    #[test]
    fn bare_qemu_runs_at_el1_without_virtualization() {
        let args = bare_qemu_args(Gic::V2, 4, Some("workload=compute end=off"));
        let line = args.join(" ");
        assert!(line.contains("-machine virt,gic-version=2 "));
        assert!(!line.contains("virtualization"));
        assert!(line.contains("-smp 4") && line.contains("-m 256M"));
        assert!(line.ends_with("-append workload=compute end=off"));
        assert!(!bare_qemu_args(Gic::V3, 1, None).contains(&"-append".to_string()));
    }

    #[test]
    fn run_options_are_parsed_and_checked() {
        let words = |t: &str| t.split_whitespace().map(String::from).collect::<Vec<_>>();
        let request = parse_run(&words("--gic 2 --smp 2 --timeout 9 --debug")).unwrap();
        assert_eq!(
            request,
            RunRequest {
                release: false,
                gic: Gic::V2,
                smp: 2,
                append: None,
                timeout: Some(Duration::from_secs(9)),
            }
        );
        let defaults = parse_run(&[]).unwrap();
        assert_eq!(
            (defaults.gic, defaults.smp, defaults.release),
            (Gic::V3, 4, true)
        );
        for bad in ["--gic 4", "--smp 0", "--smp 9", "--timeout soon", "--bogus"] {
            assert!(parse_run(&words(bad)).is_err(), "{bad}");
        }
    }

    fn bootargs_run(samples: u32) -> Vec<String> {
        let append = SCENARIOS[2].append.unwrap();
        let mut lines = vec![
            "test-guest: started at EL1, dtb at 0x48000000".to_string(),
            format!("test-guest: bootargs {append:?}"),
            "test-guest: no hypervisor ABI (VERSION returned -1): bare mode, console only".into(),
            "test-guest: gic GICv3 from device tree arm,gic-v3 (distributor 0x8000000)".into(),
            "test-guest: vcpu 0 online (mpidr 0x0)".into(),
            "test-guest: vcpu 1 online (mpidr 0x1)".into(),
            "test-guest: 2 of 2 vCPUs online".into(),
        ];
        lines.extend((0..2).map(|v| {
            format!(
                "test-guest: vcpu {v} sleeper p99 10 ticks (min 1 avg 5 max 10, {samples} samples, period 62500 ticks)"
            )
        }));
        lines.push("test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected".into());
        lines.push("test-guest: POOL_OP list failed (NOT_SUPPORTED (-1))".into());
        lines.push("test-guest: all workloads done".into());
        lines
    }

    #[test]
    fn boot_arguments_must_reach_the_guest() {
        let scenario = &SCENARIOS[2];
        assert!(scenario.append.unwrap().contains("samples=7"));
        assert!(met(scenario, &bootargs_run(7)));
        // The built-in default (50 samples) means the arguments were lost.
        assert!(!met(scenario, &bootargs_run(50)));
        let without_line: Vec<String> = bootargs_run(7)
            .into_iter()
            .filter(|l| !l.contains("bootargs"))
            .collect();
        assert!(!met(scenario, &without_line));
        // A full default run must not pass for it: its lines are forbidden.
        let harness = scenario.prepare(Path::new("/nonexistent"), Path::new("/tmp"));
        assert!(harness.failure_in("[vcpu0] progress 1").is_some());
        assert!(
            harness
                .failure_in("test-guest: vcpu 2 online (mpidr 0x2)")
                .is_some()
        );
        assert!(
            harness
                .failure_in("test-guest: vcpu 1 online (mpidr 0x1)")
                .is_none()
        );
        assert!(
            harness
                .command_line()
                .contains("-append workload=sleeper,misbehave,pools samples=7 vcpus=2 end=off")
        );
    }

    #[test]
    fn full_runs_forbid_timeouts() {
        let harness = SCENARIOS[0].prepare(Path::new("/nonexistent"), Path::new("/tmp"));
        assert!(
            harness
                .failure_in("test-guest: vcpu 2 gave up waiting for the others before pingpong")
                .is_some()
        );
        assert!(
            harness
                .failure_in("test-guest: vcpu 1 online (mpidr 0x1)")
                .is_none()
        );
        assert!(
            harness
                .failure_in("test-guest: panic on vcpu 0: oops")
                .is_some()
        );
    }

    #[test]
    fn the_no_dtb_run_must_probe_its_vcpus() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "guest-bare-no-dtb")
            .unwrap();
        assert!(scenario.elf);
        let mut lines = healthy("GICv3", 3, 5, &[]);
        lines.insert(
            1,
            "test-guest: device tree not used (none passed (x0 = 0)); assuming QEMU virt".into(),
        );
        lines.insert(
            2,
            "test-guest: no device tree CPUs: probing with PSCI CPU_ON".into(),
        );
        assert!(met(scenario, &lines));
        // With a device tree (the normal run) it does not pass.
        assert!(!met(scenario, &healthy("GICv3", 3, 5, &[])));
        // Finding only the boot vCPU does not pass.
        let mut alone = healthy("GICv3", 1, 5, &[]);
        alone.insert(
            1,
            "test-guest: device tree not used (none passed (x0 = 0)); assuming QEMU virt".into(),
        );
        alone.insert(
            2,
            "test-guest: no device tree CPUs: probing with PSCI CPU_ON".into(),
        );
        assert!(!met(scenario, &alone));
        let harness = scenario.prepare(Path::new("/x/test-guest"), Path::new("/tmp"));
        assert!(harness.command_line().ends_with("-kernel /x/test-guest"));
    }

    #[test]
    fn scenario_names_are_unique_and_prefixed() {
        for (i, s) in SCENARIOS.iter().enumerate() {
            assert!(s.name.starts_with("guest-bare-"));
            assert!(SCENARIOS[..i].iter().all(|o| o.name != s.name));
        }
    }
}
