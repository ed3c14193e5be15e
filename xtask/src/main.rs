//! `cargo xtask`: build, run, test and inspect the hypervisor.
#![forbid(unsafe_code)]

mod bench_hv;
mod board;
mod cli;
mod config;
mod fp_check;
mod guest;
mod image;
mod lab;
mod linux;
mod peers;
mod qemu;
mod rpi;
mod scenarios;
mod suite;
mod toolchain;
mod topology;
mod trace_capture;
mod uefi_tool;
mod workspace;

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use cli::{Args, CliError};
use qemu::{Gic, RunOptions};
use workspace::Workspace;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  build    [--board NAME] [--release] [--config FILE]
           build the hypervisor image for a board (with the domains and pools
           of FILE, and the guest images it names by file) and print its path
           (Pi boards: also the SD card boot folder, images/<board>/boot/)
  flash    [--board rpi4] [--release] (--to MOUNTED_BOOT_PARTITION | --device /dev/sdX --yes)
           build, then copy the Pi boot folder onto the SD card's boot partition
  run      [--board NAME] [--release] [--gic 2|3] [--smp SPEC] [--cpu MODEL]
           [--dtb FILE] [--config FILE] [--timeout SECS] [-- EXTRA QEMU ARGS]
           build, then boot the image on QEMU with the serial console on stdio
  test     [--only PATTERN] [--pending] [--keep-going] [--verbose] [--list] [--repeat N]
           run every test (fmt, clippy, host tests, loom, topology, QEMU boots)
  bench-hv [--seconds N] [--shift S] [--no-flush] [--trace] [--write-lab-costs] [--smp N,N...]
           the hypervisor's switch costs (plain, 2- and 4-CPU synchronised,
           kick delivery) under QEMU -icount, as BENCHMARKS.md records them;
           --write-lab-costs makes them the lab's costs; --smp: the scheduler
           lock's wait per event on machines of N CPUs
  bench-peers [--no-micro-bench]
           this hypervisor beside Xen 4.17 (Debian's package) on the same QEMU
           machine under -icount: Linux boot time (bare, here, Xen) and
           kvm-unit-tests micro-bench, with the ratio to Xen
  trace    [--board NAME] [--config FILE] [--seconds N] [--classes LIST] [--events N] [--out DIR] [--window-ms MS]
           boot with the scheduler trace on, dump it after N s and write
           DIR/trace.json (Perfetto) and DIR/timeline.svg (default target/trace/);
           with --classes all, each domain's guest exits by class (--events: ring size per CPU)
  setup    install QEMU >= 9 and dtc if missing (as root on Debian bookworm),
           then fetch the Linux guests' packages (as guest-linux [--x86] does)
  topology FILE [--json]
           print the CPU topology the hypervisor would build from a DTB
  guest    build [--debug] | run [--gic 2|3] [--smp N] [--append ARGS] [--timeout SECS]
           build the test guest image, or boot it bare on QEMU at EL1
  guest-linux [--x86 | --bench]
           download (cached, hash-checked) Debian's arm64 kernel and
           busybox-static; write target/linux-guest/Image and initramfs.cpio
           (--x86: the amd64 ones, target/linux-guest-x86/bzImage)
  config   check FILE [--out BLOB]
           check a pool/domain config (boards/configs/*.toml), print its
           layout, optionally write the binary form the image embeds

boards: qemu-virt (default), qemu-x86, rpi4, rpi4-mini-uart, ampere";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    match args.first().map(String::as_str) {
        Some("build") => report(build(rest)),
        Some("run") => run(rest),
        Some("flash") => rpi::run(rest),
        Some("test") => suite::run(rest),
        Some("lab") => lab::run(rest),
        Some("bench-hv") => bench_hv::run(rest),
        Some("bench-peers") => peers::run(rest),
        Some("trace") => trace_capture::run(rest),
        Some("setup") => report(setup()),
        Some("topology") => topology::run(&args[1..]),
        Some("guest") => guest::run(rest),
        Some("guest-linux") => linux::run(rest),
        Some("config") => config::run(rest),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `cargo xtask setup`: QEMU and dtc, then the Linux guest's packages (kept
/// in their cache, so later runs download nothing).
fn setup() -> Result<(), String> {
    qemu::ensure_tools().map_err(|e| e.to_string())?;
    let workspace = Workspace::current();
    for arch in [linux::GuestArch::Arm64, linux::GuestArch::X86] {
        let guest =
            linux::prepare_for(&workspace, arch).map_err(|e| format!("Linux guest: {e}"))?;
        println!("Linux guest: kernel {} ready", guest.release);
    }
    Ok(())
}

/// Prints an error and fails, or succeeds.
fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Board and profile, shared by `build` and `run`.
struct BuildChoice {
    board: &'static board::Board,
    release: bool,
}

fn build_choice(args: &mut Args) -> Result<BuildChoice, String> {
    let name = args
        .value("--board")
        .map_err(|e| e.to_string())?
        .unwrap_or_else(|| "qemu-virt".to_string());
    let board = board::find(&name).map_err(|e| e.to_string())?;
    Ok(BuildChoice {
        board,
        release: args.flag("--release"),
    })
}

fn build(args: &[String]) -> Result<(), String> {
    let mut args = Args::new(args);
    let choice = build_choice(&mut args)?;
    let config = args
        .value("--config")
        .map_err(|e| e.to_string())?
        .map(PathBuf::from);
    if let Some(extra) = args.finish().map_err(|e| e.to_string())?.first() {
        return Err(CliError::Unknown(extra.clone()).to_string());
    }
    let image = image::build_with_config(
        &Workspace::current(),
        choice.board,
        choice.release,
        config.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    println!("{}", image.display());
    if let Some(console) = rpi::console_of(choice.board.name) {
        let folder = rpi::write_boot_folder(&image, choice.board.name, console)
            .map_err(|e| e.to_string())?;
        println!("{}", folder.display());
    }
    Ok(())
}

/// What `run` was asked to do.
struct RunRequest {
    choice: BuildChoice,
    /// A config other than the board's default (`--config FILE`).
    config: Option<PathBuf>,
    options: RunOptions,
    timeout: Option<Duration>,
}

fn parse_run(args: &[String]) -> Result<RunRequest, String> {
    let mut args = Args::new(args);
    let choice = build_choice(&mut args)?;
    let mut options = RunOptions::for_board(choice.board);
    let text = |e: CliError| e.to_string();
    match args.parsed::<u8>("--gic", "2 or 3").map_err(text)? {
        None | Some(3) => {}
        Some(2) => options.gic = Gic::V2,
        Some(other) => return Err(format!("--gic {other}: expected 2 or 3")),
    }
    if let Some(smp) = args.value("--smp").map_err(text)? {
        options.smp = smp;
    }
    if let Some(cpu) = args.value("--cpu").map_err(text)? {
        options.cpu = cpu;
    }
    if let Some(dtb) = args.value("--dtb").map_err(text)? {
        let dtb = PathBuf::from(dtb);
        if !dtb.is_file() {
            return Err(format!("--dtb {}: no such file", dtb.display()));
        }
        options.dtb = Some(dtb);
    }
    let config = args.value("--config").map_err(text)?.map(PathBuf::from);
    let timeout = args
        .parsed::<u64>("--timeout", "whole seconds")
        .map_err(text)?
        .map(Duration::from_secs);
    options.extra = args.finish().map_err(text)?;
    Ok(RunRequest {
        choice,
        config,
        options,
        timeout,
    })
}

fn run(args: &[String]) -> ExitCode {
    let request = match parse_run(args) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("xtask run: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let board = request.choice.board;
    let Some((program, qemu_args)) = qemu::command(board, &request.options) else {
        eprintln!("xtask run: board {} does not run on QEMU", board.name);
        return ExitCode::FAILURE;
    };
    if let Err(e) = qemu::ensure_tools() {
        eprintln!("xtask run: {e}");
        return ExitCode::FAILURE;
    }
    let image = match image::build_with_config(
        &Workspace::current(),
        board,
        request.choice.release,
        request.config.as_deref(),
    ) {
        Ok(image) => image,
        Err(e) => {
            eprintln!("xtask run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = Command::new(program);
    // UEFI boards boot their image from a FAT drive, the others with -kernel.
    let image_args = match board.qemu {
        Some((_, board::Machine::VirtUefi)) => qemu::uefi_drive_args(&image),
        _ => vec!["-kernel".to_string(), image.display().to_string()],
    };
    command.args(&qemu_args).args(&image_args);
    eprintln!(
        "xtask: {program} {} {}{}",
        qemu_args.join(" "),
        image_args.join(" "),
        if program.contains("aarch64") {
            "  (quit: Ctrl-A X)"
        } else {
            ""
        }
    );
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("xtask run: cannot start {program}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match wait_with_timeout(&mut child, request.timeout) {
        Ok(Some(status)) if status.success() => ExitCode::SUCCESS,
        Ok(Some(status)) => {
            eprintln!("xtask run: {program} ended: {status}");
            ExitCode::FAILURE
        }
        Ok(None) => {
            eprintln!(
                "\nxtask run: stopped QEMU after the {} s timeout",
                request.timeout.unwrap_or_default().as_secs()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask run: waiting for {program}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Waits for `child`; with a timeout, ends it when the timeout passes and
/// returns `None`. QEMU gets SIGTERM first so it can restore the terminal.
fn wait_with_timeout(
    child: &mut Child,
    timeout: Option<Duration>,
) -> std::io::Result<Option<ExitStatus>> {
    let Some(timeout) = timeout else {
        return child.wait().map(Some);
    };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        thread::sleep(Duration::from_millis(50));
    }
    // SIGTERM by pid through kill(1): std has only SIGKILL.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let grace = Instant::now() + Duration::from_secs(3);
    while Instant::now() < grace {
        if child.try_wait()?.is_some() {
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(50));
    }
    child.kill()?;
    child.wait()?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn run_options_are_parsed() {
        let request = parse_run(&words(
            "--board qemu-virt --gic 2 --smp 8,clusters=2,cores=2,threads=2 --timeout 5 -- -d int",
        ))
        .unwrap();
        assert_eq!(request.options.gic, Gic::V2);
        assert_eq!(request.options.smp, "8,clusters=2,cores=2,threads=2");
        assert_eq!(request.timeout, Some(Duration::from_secs(5)));
        assert_eq!(request.options.extra, ["-d", "int"]);
        assert!(!request.choice.release);
        let defaults = parse_run(&[]).unwrap();
        assert_eq!(defaults.choice.board.name, "qemu-virt");
        assert_eq!(defaults.options.gic, Gic::V3);
        assert_eq!(defaults.timeout, None);
    }

    #[test]
    fn bad_run_options_are_refused() {
        for bad in [
            "--gic 4",
            "--board rpi5",
            "--timeout soon",
            "--dtb /nonexistent.dtb",
            "--bogus",
        ] {
            assert!(parse_run(&words(bad)).is_err(), "{bad}");
        }
        let ampere = parse_run(&words("--board ampere")).unwrap();
        assert_eq!(ampere.choice.board.name, "ampere");
        // The board's own defaults: Altra's core, 16 CPUs in clusters of two.
        assert_eq!(ampere.options.cpu, qemu::UEFI_DEFAULT_CPU);
        assert_eq!(ampere.options.smp, qemu::UEFI_DEFAULT_SMP);
    }

    #[test]
    fn the_timeout_ends_a_running_program() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let started = Instant::now();
        let result = wait_with_timeout(&mut child, Some(Duration::from_millis(300))).unwrap();
        assert_eq!(result, None);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(child.try_wait().unwrap().is_some(), "child still running");

        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let result = wait_with_timeout(&mut child, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(result.and_then(|s| s.code()), Some(3));
    }
}
