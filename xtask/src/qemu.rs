//! QEMU: make sure a new enough one is installed (installing it from Debian
//! bookworm-backports when running as root), and build its command line.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::board::{Board, Machine};

/// The oldest QEMU major version we run: bookworm's own 7.2 lacks `raspi4b`
/// and has older cluster/topology support.
pub const MIN_MAJOR: u32 = 9;

/// The QEMU programs and tools the project uses.
pub const PROGRAMS: &[&str] = &["qemu-system-aarch64", "qemu-system-x86_64"];

/// The Debian packages that provide them (and the edk2 firmware the UEFI
/// board boots with), installed from bookworm-backports where it has them.
pub const PACKAGES: &[&str] = &[
    "qemu-system-arm",
    "qemu-system-x86",
    "device-tree-compiler",
    UEFI_FIRMWARE_PACKAGE,
];

/// Where the derived bookworm-backports entry is written.
pub const BACKPORTS_FILE: &str = "/etc/apt/sources.list.d/bookworm-backports.sources";

/// A QEMU version, `major.minor.micro`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What is wrong with the installed QEMU.
#[derive(Debug, PartialEq, Eq)]
pub enum QemuProblem {
    /// The program is not on `PATH`.
    Missing(String),
    /// `--version` printed something we do not understand.
    Unreadable(String, String),
    /// Older than [`MIN_MAJOR`].
    TooOld(String, Version),
}

impl fmt::Display for QemuProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(program) => write!(f, "{program} is not installed"),
            Self::Unreadable(program, output) => {
                write!(f, "cannot read the version of {program} from {output:?}")
            }
            Self::TooOld(program, version) => {
                write!(f, "{program} is {version}, older than {MIN_MAJOR}")
            }
        }
    }
}

/// Reads the version out of `qemu-system-* --version` output
/// (`QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2…)`).
pub fn parse_version(output: &str) -> Option<Version> {
    let rest = output.lines().next()?.split("version ").nth(1)?;
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let micro = parts.next().flatten().unwrap_or(0);
    Some(Version(major, minor, micro))
}

/// Checks `--version` output of `program` against [`MIN_MAJOR`].
pub fn check_version(program: &str, output: &str) -> Result<Version, QemuProblem> {
    let version = parse_version(output)
        .ok_or_else(|| QemuProblem::Unreadable(program.to_string(), output.trim().to_string()))?;
    if version.0 < MIN_MAJOR {
        return Err(QemuProblem::TooOld(program.to_string(), version));
    }
    Ok(version)
}

/// Runs `program --version` and checks it.
pub fn probe(program: &str) -> Result<Version, QemuProblem> {
    match Command::new(program).arg("--version").output() {
        Ok(out) => check_version(program, &String::from_utf8_lossy(&out.stdout)),
        Err(_) => Err(QemuProblem::Missing(program.to_string())),
    }
}

/// Whether `program` runs at all (for `dtc`, which has no version floor).
fn exists(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What to do about the apt sources before installing from backports.
#[derive(Debug, PartialEq, Eq)]
pub enum BackportsPlan {
    /// A bookworm-backports entry exists already.
    Present,
    /// Write this deb822 text to [`BACKPORTS_FILE`].
    Add(String),
}

/// No bookworm entry to derive a backports entry from.
#[derive(Debug, PartialEq, Eq)]
pub struct NoBookwormSource;

impl fmt::Display for NoBookwormSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no `bookworm` entry in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources"
        )
    }
}

/// One apt source: its URI, suites and `Signed-By`.
struct Source {
    uri: String,
    suites: Vec<String>,
    signed_by: Option<String>,
}

/// Parses deb822 `.sources` text (stanzas of `Key: value` lines).
fn deb822_sources(text: &str) -> Vec<Source> {
    let mut sources = Vec::new();
    for stanza in text.split("\n\n") {
        let mut types = String::new();
        let mut uris = String::new();
        let mut suites = String::new();
        let mut signed_by = None;
        let mut enabled = true;
        for line in stanza.lines() {
            if line.starts_with('#') || line.starts_with(' ') || line.starts_with('\t') {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim().to_string();
            match key.trim().to_ascii_lowercase().as_str() {
                "types" => types = value,
                "uris" => uris = value,
                "suites" => suites = value,
                "signed-by" => signed_by = Some(value).filter(|v| !v.is_empty()),
                "enabled" => enabled = value != "no",
                _ => {}
            }
        }
        let Some(uri) = uris.split_whitespace().next() else {
            continue;
        };
        if enabled && types.split_whitespace().any(|t| t == "deb") {
            sources.push(Source {
                uri: uri.to_string(),
                suites: suites.split_whitespace().map(String::from).collect(),
                signed_by,
            });
        }
    }
    sources
}

/// Parses one-line `sources.list` text (`deb [opts] URI SUITE COMPONENTS…`).
fn one_line_sources(text: &str) -> Vec<Source> {
    let mut sources = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("deb ") else {
            continue;
        };
        let mut rest = rest.trim_start();
        let mut signed_by = None;
        if let Some(options) = rest.strip_prefix('[') {
            let Some((options, after)) = options.split_once(']') else {
                continue;
            };
            signed_by = options
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by="))
                .map(String::from);
            rest = after.trim_start();
        }
        let mut words = rest.split_whitespace();
        if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
            sources.push(Source {
                uri: uri.to_string(),
                suites: vec![suite.to_string()],
                signed_by,
            });
        }
    }
    sources
}

/// Decides how to get a bookworm-backports entry from the machine's apt source
/// files, given as `(path, text)`: `.sources` files are deb822, others one-line.
/// The new entry uses the same archive URI (and key) as the bookworm entry.
pub fn backports_plan(files: &[(PathBuf, String)]) -> Result<BackportsPlan, NoBookwormSource> {
    let sources: Vec<Source> = files
        .iter()
        .flat_map(|(path, text)| {
            if path.extension().is_some_and(|e| e == "sources") {
                deb822_sources(text)
            } else {
                one_line_sources(text)
            }
        })
        .collect();
    if sources
        .iter()
        .any(|s| s.suites.iter().any(|x| x == "bookworm-backports"))
    {
        return Ok(BackportsPlan::Present);
    }
    let base = sources
        .iter()
        .find(|s| s.suites.iter().any(|x| x == "bookworm"))
        .ok_or(NoBookwormSource)?;
    let mut entry = format!(
        "Types: deb\nURIs: {}\nSuites: bookworm-backports\nComponents: main\n",
        base.uri
    );
    if let Some(key) = &base.signed_by {
        entry.push_str(&format!("Signed-By: {key}\n"));
    }
    Ok(BackportsPlan::Add(entry))
}

/// Reads `/etc/apt/sources.list` and `/etc/apt/sources.list.d/*.{list,sources}`.
fn read_apt_sources() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
            .collect();
        more.sort();
        paths.extend(more);
    }
    paths
        .into_iter()
        .filter_map(|p| fs::read_to_string(&p).ok().map(|text| (p, text)))
        .collect()
}

/// Whether this process runs as root (uid 0), read from `/proc/self/status`.
pub(crate) fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            == Some("0")
    })
}

/// Whether the machine is Debian bookworm (`VERSION_CODENAME=bookworm`).
fn is_bookworm() -> bool {
    fs::read_to_string("/etc/os-release").is_ok_and(|text| {
        text.lines()
            .any(|l| l.trim() == "VERSION_CODENAME=bookworm")
    })
}

/// The shell commands that install QEMU and dtc, given the backports plan.
pub fn install_commands(plan: &BackportsPlan) -> Vec<String> {
    let mut commands = Vec::new();
    if let BackportsPlan::Add(entry) = plan {
        commands.push(format!(
            "printf '{}' > {BACKPORTS_FILE}",
            entry.replace('\n', "\\n")
        ));
    }
    commands.push("apt-get update".to_string());
    commands.push(format!(
        "apt-get install -y --no-install-recommends -t bookworm-backports {}",
        PACKAGES.join(" ")
    ));
    commands
}

/// What is missing on this machine: QEMU problems, and the other tools that
/// are absent (dtc, the UEFI firmware), described.
fn problems() -> (Vec<QemuProblem>, Vec<String>) {
    let qemu = PROGRAMS.iter().filter_map(|p| probe(p).err()).collect();
    let mut missing = Vec::new();
    if !exists("dtc") {
        missing.push("dtc (device-tree-compiler) is not installed".to_string());
    }
    if uefi_firmware().is_none() {
        missing.push(format!(
            "no edk2 firmware for QEMU virt ({UEFI_FIRMWARE_PACKAGE}: {})",
            UEFI_FIRMWARE.join(" or ")
        ));
    }
    (qemu, missing)
}

/// Why the tools cannot be made ready.
#[derive(Debug)]
pub struct SetupError(pub String);

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Makes sure QEMU ≥ [`MIN_MAJOR`] (both programs) and dtc are installed.
/// As root on Debian bookworm it installs them from bookworm-backports;
/// otherwise it stops and says exactly what to run.
pub fn ensure_tools() -> Result<(), SetupError> {
    let (qemu, missing) = problems();
    if qemu.is_empty() && missing.is_empty() {
        return Ok(());
    }
    let mut why: Vec<String> = qemu.iter().map(ToString::to_string).collect();
    why.extend(missing);
    let why = why.join("; ");
    if !is_bookworm() {
        return Err(SetupError(format!(
            "{why}.\nInstall QEMU >= {MIN_MAJOR} ({}), dtc and the edk2 firmware for QEMU virt with your system's package manager.",
            PROGRAMS.join(", ")
        )));
    }
    let plan =
        backports_plan(&read_apt_sources()).map_err(|e| SetupError(format!("{why}; {e}")))?;
    let commands = install_commands(&plan);
    if !is_root() {
        return Err(SetupError(format!(
            "{why}.\nRun as root:\n  {}",
            commands.join("\n  ")
        )));
    }
    eprintln!("xtask: {why}; installing from bookworm-backports");
    if let BackportsPlan::Add(entry) = &plan {
        fs::write(BACKPORTS_FILE, entry)
            .map_err(|e| SetupError(format!("cannot write {BACKPORTS_FILE}: {e}")))?;
    }
    let mut install = vec![
        "install",
        "-y",
        "--no-install-recommends",
        "-t",
        "bookworm-backports",
    ];
    install.extend(PACKAGES);
    for args in [vec!["update"], install] {
        eprintln!("xtask: apt-get {}", args.join(" "));
        let status = Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| SetupError(format!("cannot run apt-get: {e}")))?;
        if !status.success() {
            return Err(SetupError(format!("apt-get {} failed: {status}", args[0])));
        }
    }
    let (qemu, missing) = problems();
    match (qemu.first(), missing.first()) {
        (Some(problem), _) => Err(SetupError(format!("after installing: {problem}"))),
        (None, Some(missing)) => Err(SetupError(format!("after installing: {missing}"))),
        (None, None) => Ok(()),
    }
}

/// The GIC version QEMU's `virt` machine emulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gic {
    /// GICv2 with the virtualization extensions.
    V2,
    /// GICv3 (the default).
    V3,
}

/// Default `-smp`: one socket, two clusters of two cores of two SMT threads,
/// so the default config's core-scheduled pool (CPUs 4-5: one core) shows
/// siblings switching together.
pub const DEFAULT_SMP: &str = "8,sockets=1,clusters=2,cores=2,threads=2";

/// One socket, two clusters of four single-threaded cores: the boot and
/// device-tree scenarios' machine (the default before SMT was).
pub const FLAT_SMP: &str = "8,sockets=1,clusters=2,cores=4,threads=1";

/// Default `-smp` on x86: one socket, four cores of two threads (SMT in the
/// MADT and CPUID leaf 0xB).
pub const X86_DEFAULT_SMP: &str = "8,sockets=1,cores=4,threads=2";

/// Default `-cpu` on x86: an AMD model with SVM and nested paging, which TCG
/// emulates.
pub const X86_DEFAULT_CPU: &str = "EPYC,+svm,+npt";

/// The device tree `-machine raspi4b` boots with, relative to the repository:
/// QEMU makes none for it, so it gets the real Pi 4's, as the firmware passes
/// on the board (QEMU fills in `/memory` and disables what it does not
/// emulate). CI has `shared/` beside the repository.
pub const RASPI4B_DTB: &str = "../shared/fixtures/dtb/bcm2711-rpi-4-b.dtb";

/// [`RASPI4B_DTB`] from this workspace.
pub fn raspi4b_dtb() -> PathBuf {
    crate::workspace::Workspace::current()
        .root
        .join(RASPI4B_DTB)
}

/// Default `-cpu` of the UEFI board: Ampere Altra's core.
pub const UEFI_DEFAULT_CPU: &str = "neoverse-n1";

/// Default `-smp` of the UEFI board: a small Altra, 16 cores in clusters of
/// two without SMT, as Altra's (QEMU's PPTT describes the clusters).
pub const UEFI_DEFAULT_SMP: &str = "16,sockets=1,clusters=8,cores=2,threads=1";

/// The ARM `-cpu` default of [`RunOptions`].
const ARM_DEFAULT_CPU: &str = "cortex-a72";

/// What `xtask run` and the scenarios choose about a QEMU run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// GIC version.
    pub gic: Gic,
    /// `-smp` value.
    pub smp: String,
    /// `-cpu` model.
    pub cpu: String,
    /// `-m` value.
    pub memory: String,
    /// A device tree to pass instead of QEMU's own.
    pub dtb: Option<PathBuf>,
    /// Extra arguments appended at the end.
    pub extra: Vec<String>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            gic: Gic::V3,
            smp: DEFAULT_SMP.to_string(),
            cpu: "cortex-a72".to_string(),
            memory: "1G".to_string(),
            dtb: None,
            extra: Vec::new(),
        }
    }
}

impl RunOptions {
    /// The defaults for `board`: [`RunOptions::default`] (ARM) or, for x86
    /// boards, [`X86_DEFAULT_CPU`] and [`X86_DEFAULT_SMP`].
    pub fn for_board(board: &Board) -> Self {
        let mut options = Self::default();
        if let Some((_, Machine::X86Q35)) = board.qemu {
            options.cpu = X86_DEFAULT_CPU.to_string();
            options.smp = X86_DEFAULT_SMP.to_string();
        }
        if let Some((_, Machine::VirtUefi)) = board.qemu {
            options.cpu = UEFI_DEFAULT_CPU.to_string();
            options.smp = UEFI_DEFAULT_SMP.to_string();
            options.memory = "2G".to_string();
        }
        options
    }

    /// `-cpu` and `-smp` for `machine`: an ARM default left in place on an x86
    /// machine (callers that start from [`RunOptions::default`]) means "not
    /// chosen", so the x86 default is used instead.
    fn cpu_and_smp(&self, machine: Machine) -> (String, String) {
        match machine {
            Machine::AarchVirt | Machine::VirtUefi | Machine::Raspi4b => {
                (self.cpu.clone(), self.smp.clone())
            }
            Machine::X86Q35 => {
                let cpu = if self.cpu == ARM_DEFAULT_CPU {
                    X86_DEFAULT_CPU
                } else {
                    &self.cpu
                };
                let smp = if self.smp == DEFAULT_SMP {
                    X86_DEFAULT_SMP
                } else {
                    &self.smp
                };
                (cpu.to_string(), smp.to_string())
            }
        }
    }
}

/// The `-machine` value for `options` (with `extra` appended, e.g. `dumpdtb=…`).
fn machine(machine: Machine, options: &RunOptions, extra: &str) -> String {
    match machine {
        Machine::X86Q35 => format!("q35{extra}"),
        Machine::Raspi4b => format!("raspi4b{extra}"),
        Machine::AarchVirt | Machine::VirtUefi => {
            let gic = match options.gic {
                Gic::V2 => 2,
                Gic::V3 => 3,
            };
            format!("virt,virtualization=on,gic-version={gic}{extra}")
        }
    }
}

/// The QEMU program and arguments (without `-kernel`) that run `board`.
pub fn command(board: &Board, options: &RunOptions) -> Option<(&'static str, Vec<String>)> {
    let (program, kind) = board.qemu?;
    if kind == Machine::Raspi4b {
        return Some((program, raspi4b_command(board, options)));
    }
    let (cpu, smp) = options.cpu_and_smp(kind);
    let mut args: Vec<String> = [
        "-machine",
        &machine(kind, options, ""),
        "-cpu",
        &cpu,
        "-smp",
        &smp,
        "-m",
        &options.memory,
        "-nographic",
        "-serial",
        "mon:stdio",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if kind == Machine::X86Q35 {
        // A triple fault resets the PC: make it end the run instead.
        args.push("-no-reboot".to_string());
    }
    if let Some(dtb) = &options.dtb {
        args.extend(["-dtb".to_string(), dtb.display().to_string()]);
    }
    if kind == Machine::VirtUefi {
        // No network card: edk2 would try PXE before the disk.
        args.extend(["-nic".to_string(), "none".to_string()]);
        let firmware = uefi_firmware().unwrap_or_else(|| PathBuf::from(UEFI_FIRMWARE[0]));
        args.extend(["-bios".to_string(), firmware.display().to_string()]);
    }
    args.extend(options.extra.iter().cloned());
    Some((program, args))
}

/// Where Debian's `qemu-efi-aarch64` puts the edk2 firmware for QEMU `virt`
/// (older releases: `QEMU_EFI.fd`; bookworm and later: `AAVMF_CODE.fd`).
pub const UEFI_FIRMWARE: &[&str] = &[
    "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd",
    "/usr/share/AAVMF/AAVMF_CODE.fd",
];

/// The Debian package that holds [`UEFI_FIRMWARE`].
pub const UEFI_FIRMWARE_PACKAGE: &str = "qemu-efi-aarch64";

/// The first of [`UEFI_FIRMWARE`] that exists.
pub fn uefi_firmware() -> Option<PathBuf> {
    UEFI_FIRMWARE
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

/// How a UEFI board's image is handed to QEMU: a FAT drive (QEMU's vvfat)
/// made of the image's `esp/` folder (`xtask build` writes it), which edk2
/// boots from its removable-media path `\EFI\BOOT\BOOTAA64.EFI`.
pub fn uefi_drive_args(image: &Path) -> Vec<String> {
    esp_drive_args(&image.with_file_name("esp"))
}

/// The QEMU arguments that serve the folder `esp` as a FAT drive.
pub fn esp_drive_args(esp: &Path) -> Vec<String> {
    vec![
        "-drive".to_string(),
        format!("if=virtio,format=raw,file=fat:rw:{}", esp.display()),
    ]
}

/// `-machine raspi4b`: the board fixes the CPUs (4x Cortex-A72) and RAM
/// (2 GiB; QEMU refuses any other `-m`), so `-cpu`, `-smp` and `-m` are left
/// out; the device tree is [`RASPI4B_DTB`] unless `options` names another.
/// QEMU wires its first `-serial` to the PL011 (UART0) and its second to the
/// mini UART (UART1): a board whose console is the mini UART gets the
/// terminal on the second.
fn raspi4b_command(board: &Board, options: &RunOptions) -> Vec<String> {
    let dtb = options.dtb.clone().unwrap_or_else(raspi4b_dtb);
    let serial: &[&str] = match boards::by_name(board.name).map(|b| b.early_uart) {
        Some(boards::EarlyUart::MiniUart(_)) => &["-serial", "null", "-serial", "mon:stdio"],
        _ => &["-serial", "mon:stdio"],
    };
    let mut args: Vec<String> = ["-machine", "raspi4b", "-nographic"]
        .iter()
        .chain(serial)
        .map(|s| s.to_string())
        .collect();
    args.extend(["-dtb".to_string(), dtb.display().to_string()]);
    args.extend(options.extra.iter().cloned());
    args
}

/// Has QEMU write the device tree it would give `board` with `options` to `out`.
pub fn dump_dtb(board: &Board, options: &RunOptions, out: &Path) -> Result<(), SetupError> {
    let Some((program, kind)) = board.qemu else {
        return Err(SetupError(format!("{} does not run on QEMU", board.name)));
    };
    if kind == Machine::X86Q35 {
        return Err(SetupError(format!(
            "{} boots with ACPI tables, not a device tree",
            board.name
        )));
    }
    if kind == Machine::Raspi4b {
        return Err(SetupError(format!(
            "QEMU makes no device tree for {}: it boots {RASPI4B_DTB}",
            board.name
        )));
    }
    let dump = format!(",dumpdtb={}", out.display());
    let output = Command::new(program)
        .args(["-machine", &machine(kind, options, &dump)])
        .args(["-cpu", &options.cpu, "-smp", &options.smp])
        .args(["-m", &options.memory, "-nographic"])
        .output()
        .map_err(|e| SetupError(format!("cannot run {program}: {e}")))?;
    if !output.status.success() || !out.is_file() {
        return Err(SetupError(format!(
            "{program} did not dump a device tree: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board;

    #[test]
    fn versions_are_read_and_checked() {
        let debian = "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\n\
                      Copyright (c) 2003-2025 Fabrice Bellard";
        assert_eq!(parse_version(debian), Some(Version(10, 0, 2)));
        assert_eq!(check_version("q", debian), Ok(Version(10, 0, 2)));
        assert_eq!(
            check_version("q", "QEMU emulator version 9.0.0\n"),
            Ok(Version(9, 0, 0))
        );
        let bookworm = "QEMU emulator version 7.2.15 (Debian 1:7.2+dfsg-7+deb12u12)";
        assert_eq!(
            check_version("q", bookworm),
            Err(QemuProblem::TooOld("q".into(), Version(7, 2, 15)))
        );
        assert_eq!(
            check_version("q", "QEMU emulator version 8.2\n"),
            Err(QemuProblem::TooOld("q".into(), Version(8, 2, 0)))
        );
        assert!(matches!(
            check_version("q", "command not found"),
            Err(QemuProblem::Unreadable(..))
        ));
        assert!(matches!(
            check_version("q", ""),
            Err(QemuProblem::Unreadable(..))
        ));
        assert!(Version(10, 0, 0) > Version(9, 2, 4));
    }

    #[test]
    fn backports_entry_copies_the_bookworm_uri_and_key() {
        let debian = "Types: deb\n# comment\nURIs: http://mirror.example/debian\n\
                      Suites: bookworm bookworm-updates\nComponents: main\n\
                      Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                      Types: deb\nURIs: http://security.example/debian-security\n\
                      Suites: bookworm-security\nComponents: main\n";
        let files = vec![(PathBuf::from("/x/debian.sources"), debian.to_string())];
        assert_eq!(
            backports_plan(&files),
            Ok(BackportsPlan::Add(
                "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm-backports\n\
                 Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
                    .to_string()
            ))
        );
        let mut with_backports = files.clone();
        with_backports.push((
            PathBuf::from("/x/bp.sources"),
            "Types: deb\nURIs: http://m/debian\nSuites: bookworm-backports\n".to_string(),
        ));
        assert_eq!(backports_plan(&with_backports), Ok(BackportsPlan::Present));
    }

    #[test]
    fn backports_entry_from_a_one_line_sources_list() {
        let list = "# deb-src http://old/debian bookworm main\n\
                    deb [arch=amd64 signed-by=/k.gpg] http://cloud.example/debian bookworm main\n\
                    deb http://cloud.example/debian-security bookworm-security main\n";
        let files = vec![(PathBuf::from("/etc/apt/sources.list"), list.to_string())];
        let Ok(BackportsPlan::Add(entry)) = backports_plan(&files) else {
            panic!("no entry");
        };
        assert!(
            entry.contains("URIs: http://cloud.example/debian\n"),
            "{entry}"
        );
        assert!(entry.contains("Signed-By: /k.gpg\n"), "{entry}");
        let commands = install_commands(&BackportsPlan::Add(entry));
        assert!(commands[0].ends_with(BACKPORTS_FILE));
        assert!(commands[2].contains("-t bookworm-backports qemu-system-arm qemu-system-x86"));
    }

    #[test]
    fn no_bookworm_no_entry() {
        let files = vec![(
            PathBuf::from("/x/debian.sources"),
            "Types: deb\nURIs: http://m/debian\nSuites: trixie\n".to_string(),
        )];
        assert_eq!(backports_plan(&files), Err(NoBookwormSource));
        let disabled = "Types: deb\nURIs: http://m/debian\nSuites: bookworm\nEnabled: no\n";
        let files = vec![(PathBuf::from("/x/d.sources"), disabled.to_string())];
        assert_eq!(backports_plan(&files), Err(NoBookwormSource));
    }

    #[test]
    fn the_virt_command_line() {
        let virt = board::find("qemu-virt").unwrap();
        let (program, args) = command(virt, &RunOptions::default()).unwrap();
        assert_eq!(program, "qemu-system-aarch64");
        assert_eq!(
            args.join(" "),
            "-machine virt,virtualization=on,gic-version=3 -cpu cortex-a72 \
             -smp 8,sockets=1,clusters=2,cores=2,threads=2 -m 1G -nographic -serial mon:stdio"
        );
        let options = RunOptions {
            gic: Gic::V2,
            smp: "8,clusters=2,cores=2,threads=2".into(),
            dtb: Some("bad.dtb".into()),
            extra: vec!["-d".into(), "int".into()],
            ..RunOptions::default()
        };
        let (_, args) = command(virt, &options).unwrap();
        let args = args.join(" ");
        assert!(args.contains("gic-version=2 "), "{args}");
        assert!(
            args.contains("-smp 8,clusters=2,cores=2,threads=2 "),
            "{args}"
        );
        assert!(args.ends_with("-dtb bad.dtb -d int"), "{args}");
    }

    #[test]
    fn the_raspi4b_command_line() {
        let pi = board::find("rpi4").unwrap();
        let (program, args) = command(pi, &RunOptions::for_board(pi)).unwrap();
        assert_eq!(program, "qemu-system-aarch64");
        let args = args.join(" ");
        assert!(
            args.starts_with("-machine raspi4b -nographic -serial mon:stdio -dtb "),
            "{args}"
        );
        assert!(
            args.ends_with("/../shared/fixtures/dtb/bcm2711-rpi-4-b.dtb"),
            "{args}"
        );
        assert!(raspi4b_dtb().is_file(), "{}", raspi4b_dtb().display());
        // The mini UART board's console is QEMU's second serial port.
        let mini = board::find("rpi4-mini-uart").unwrap();
        let (_, mini_args) = command(mini, &RunOptions::for_board(mini)).unwrap();
        assert!(
            mini_args
                .join(" ")
                .starts_with("-machine raspi4b -nographic -serial null -serial mon:stdio -dtb "),
            "{mini_args:?}"
        );
        // raspi4b refuses -m other than 2G and has a fixed CPU set.
        for fixed in ["-m ", "-smp ", "-cpu "] {
            assert!(!args.contains(fixed), "{args}");
        }
        let options = RunOptions {
            dtb: Some("edited.dtb".into()),
            extra: vec!["-d".into(), "int".into()],
            ..RunOptions::default()
        };
        let (_, args) = command(pi, &options).unwrap();
        assert!(args.join(" ").ends_with("-dtb edited.dtb -d int"));
        assert!(dump_dtb(pi, &options, Path::new("/nonexistent")).is_err());
    }

    #[test]
    fn the_q35_command_line() {
        let x86 = board::find("qemu-x86").unwrap();
        let expected = "-machine q35 -cpu EPYC,+svm,+npt -smp 8,sockets=1,cores=4,threads=2 \
                        -m 1G -nographic -serial mon:stdio -no-reboot";
        let (program, args) = command(x86, &RunOptions::for_board(x86)).unwrap();
        assert_eq!(program, "qemu-system-x86_64");
        assert_eq!(args.join(" "), expected);
        // Starting from the ARM defaults (as `xtask run` does) gives the same.
        let (_, args) = command(x86, &RunOptions::default()).unwrap();
        assert_eq!(args.join(" "), expected);
        let options = RunOptions {
            smp: "4,sockets=2,cores=2,threads=1".into(),
            cpu: "EPYC,+svm,+npt,+x2apic".into(),
            ..RunOptions::for_board(x86)
        };
        let (_, args) = command(x86, &options).unwrap();
        let args = args.join(" ");
        assert!(args.contains("-cpu EPYC,+svm,+npt,+x2apic "), "{args}");
        assert!(
            args.contains("-smp 4,sockets=2,cores=2,threads=1 "),
            "{args}"
        );
        assert!(!args.contains("gic"), "{args}");
        assert!(dump_dtb(x86, &options, Path::new("/nonexistent")).is_err());
    }
}
