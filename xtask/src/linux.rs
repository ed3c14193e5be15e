//! `cargo xtask guest-linux`: the Linux guest, built from Debian's archive.
//!
//! Downloads Debian bookworm's arm64 kernel package and `busybox-static` with
//! `apt-get download` into a cache folder outside git (kept between runs),
//! checks them against the SHA-256 hashes pinned below, unpacks them with
//! `dpkg-deb -x`, and writes `target/linux-guest/Image` (the kernel's plain
//! arm64 `Image`, gunzipped if the package ships it compressed) and
//! `target/linux-guest/initramfs.cpio` (a newc archive: BusyBox and an `/init`
//! that mounts proc/sys/devtmpfs, prints [`READY_LINE`] with `nproc` and
//! `uname -r`, and runs a shell on the console). Nothing of the packages is
//! committed.

use std::env;
use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use sha2::{Digest, Sha256};

use crate::image::{self, HeaderError};
use crate::workspace::Workspace;

/// A Debian package pinned by version and hash.
#[derive(Clone, Copy, Debug)]
pub struct Package {
    /// Package name.
    pub name: &'static str,
    /// Debian architecture (`arm64`, `amd64`).
    pub arch: &'static str,
    /// Exact Debian version.
    pub version: &'static str,
    /// SHA-256 of the `.deb`, lower-case hex.
    pub sha256: &'static str,
}

/// Debian bookworm's arm64 kernel (bookworm main, point release 12.x).
pub const KERNEL: Package = Package {
    name: "linux-image-6.1.0-50-arm64",
    arch: "arm64",
    version: "6.1.176-1",
    sha256: "914f75b57a8e165d85fb910c3e2dcc7000a05a9fea3f42f90b26e8dd590d5f06",
};

/// BusyBox, statically linked (no libc needed in the initramfs).
pub const BUSYBOX: Package = Package {
    name: "busybox-static",
    arch: "arm64",
    version: "1:1.35.0-4+deb12u1+b1",
    sha256: "732c9135564fc71337e0e05fb4da4d11e6c28c1834bce3e405e575afef2a52f5",
};

/// Debian bookworm's amd64 kernel, the same release as [`KERNEL`]: a
/// bzImage with `CONFIG_PVH`, `CONFIG_X86_X2APIC` and the 8250 console.
pub const KERNEL_X86: Package = Package {
    name: "linux-image-6.1.0-50-amd64-unsigned",
    arch: "amd64",
    version: "6.1.176-1",
    sha256: "439422e41d2dbb840b60b81e3bf5e5955bfa56b7a8c268aec83c9ff882d421e6",
};

/// BusyBox for the x86 guest's initramfs.
pub const BUSYBOX_X86: Package = Package {
    name: "busybox-static",
    arch: "amd64",
    version: "1:1.35.0-4+deb12u1+b1",
    sha256: "3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744",
};

/// Which of the two Linux guests: Debian's arm64 kernel or its amd64 one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestArch {
    /// arm64 `Image`, for the ARM boards.
    Arm64,
    /// amd64 bzImage, for the x86 board's SVM domains.
    X86,
}

impl GuestArch {
    /// The pinned kernel and BusyBox packages.
    fn packages(self) -> [Package; 2] {
        match self {
            Self::Arm64 => [KERNEL, BUSYBOX],
            Self::X86 => [KERNEL_X86, BUSYBOX_X86],
        }
    }

    /// The folder under the target directory the outputs go to, and the
    /// kernel's file name there.
    fn output(self) -> (&'static str, &'static str) {
        match self {
            Self::Arm64 => ("linux-guest", "Image"),
            Self::X86 => ("linux-guest-x86", "bzImage"),
        }
    }
}

/// The start of the line `/init` prints once the guest is up, followed by
/// `nproc=N kernel=RELEASE uptime=SECONDS date=YYYY-MM-DD` (guest-visible
/// time since boot, and the UTC date its clock shows).
pub const READY_LINE: &str = "linux-guest ready:";

/// The initramfs `/init`. PID 1 must never exit (the kernel would panic), so
/// the shell is restarted when it ends; `poweroff -f` / `reboot -f` reach PSCI.
const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
set -- $(cat /proc/uptime)
echo "linux-guest ready: nproc=$(nproc) kernel=$(uname -r) uptime=$1 date=$(date -u +%F)"
while true; do
    setsid cttyhack sh
done
"#;

/// What `guest-linux` produced.
#[derive(Clone, Debug)]
pub struct LinuxGuest {
    /// The plain arm64 `Image`.
    pub image: PathBuf,
    /// The newc initramfs.
    pub initramfs: PathBuf,
    /// The kernel release (`uname -r`), e.g. `6.1.0-50-arm64`.
    pub release: String,
}

/// Why the Linux guest could not be prepared.
#[derive(Debug)]
pub enum LinuxError {
    /// dpkg does not know this (foreign) architecture, and xtask may not add it.
    NoArchitecture(&'static str),
    /// A tool could not be started.
    Spawn(&'static str, std::io::Error),
    /// `apt-get download` failed: the package or version is not in the
    /// configured archive.
    MissingPackage {
        /// Package name.
        name: &'static str,
        /// Version asked for.
        version: &'static str,
        /// apt's own message.
        detail: String,
    },
    /// A downloaded or cached `.deb` does not have the pinned hash.
    HashMismatch {
        /// Package name.
        name: &'static str,
        /// The file.
        path: PathBuf,
        /// The pinned hash.
        expected: &'static str,
        /// What the file hashes to.
        actual: String,
    },
    /// `dpkg-deb -x` failed.
    Unpack(PathBuf),
    /// The kernel package holds no `boot/vmlinuz-*`.
    NoKernel(PathBuf),
    /// The package holds no `bin/busybox`.
    NoBusybox(PathBuf),
    /// The kernel is not a valid arm64 `Image`.
    BadImage(PathBuf, HeaderError),
    /// The kernel is not a bzImage the x86 domains can boot.
    BadBzImage(PathBuf, hv::x86::linux_boot::LinuxImageError),
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
}

impl fmt::Display for LinuxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoArchitecture(arch) => write!(
                f,
                "dpkg has no {arch} architecture, so apt cannot download {arch} packages.\nRun as root:\n  dpkg --add-architecture {arch}\n  apt-get update"
            ),
            Self::Spawn(tool, e) => write!(f, "cannot run {tool}: {e}"),
            Self::MissingPackage {
                name,
                version,
                detail,
            } => write!(
                f,
                "package {name} version {version} could not be downloaded (is it in the configured Debian archive? try apt-get update): {detail}"
            ),
            Self::HashMismatch {
                name,
                path,
                expected,
                actual,
            } => write!(
                f,
                "package {name}: {} has SHA-256 {actual}, the repository pins {expected}",
                path.display()
            ),
            Self::Unpack(path) => write!(f, "dpkg-deb -x {} failed", path.display()),
            Self::NoKernel(dir) => write!(f, "no boot/vmlinuz-* in {}", dir.display()),
            Self::NoBusybox(dir) => write!(f, "no bin/busybox in {}", dir.display()),
            Self::BadImage(path, e) => write!(f, "kernel {}: {e}", path.display()),
            Self::BadBzImage(path, e) => write!(f, "kernel {}: {e}", path.display()),
            Self::Io(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

const USAGE: &str = "\
usage: cargo xtask guest-linux [--x86] [--bench]
       download (cached) Debian's arm64 kernel and busybox-static, check their
       pinned hashes, write target/linux-guest/Image and initramfs.cpio;
       --x86: the amd64 ones instead, into target/linux-guest-x86/bzImage and
       initramfs.cpio;
       --bench: then boot it under QEMU -icount bare (EL1, 4 CPUs) and as the
       only domain of the hypervisor (boards/configs/tests/linux-bench.toml),
       and print the guest-visible time to the ready line of both; with --x86
       the same for the amd64 kernel on qemu-x86 (bare: QEMU -kernel on the
       same EPYC CPU model; hosted: boards/configs/tests/x86-linux-bench.toml)";

/// Runs `cargo xtask guest-linux`.
pub fn run(args: &[String]) -> ExitCode {
    let mut bench = false;
    let mut arch = GuestArch::Arm64;
    for arg in args {
        match arg.as_str() {
            "--bench" => bench = true,
            "--x86" => arch = GuestArch::X86,
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if bench {
        let workspace = Workspace::current();
        let result = match arch {
            GuestArch::Arm64 => benchmark(&workspace),
            GuestArch::X86 => benchmark_x86(&workspace),
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask guest-linux --bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match prepare_for(&Workspace::current(), arch) {
        Ok(guest) => {
            println!("{}", guest.image.display());
            println!("{}", guest.initramfs.display());
            println!("kernel {}", guest.release);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask guest-linux: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `-icount` for the benchmark: one instruction per virtual nanosecond, and
/// idle CPUs skip ahead instead of sleeping, so the guest-visible time is a
/// count of instructions and repeats from run to run.
pub const BENCH_ICOUNT: &str = "shift=0,sleep=off";

/// How long one benchmark boot may take (single-threaded TCG under -icount).
pub const BENCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(900);

/// Boots the Linux guest bare and under the hypervisor with `-icount` and
/// prints the guest-visible seconds to the ready line (`/proc/uptime`) of each
/// and their ratio.
fn benchmark(workspace: &Workspace) -> Result<(), String> {
    let guest = prepare(workspace).map_err(|e| e.to_string())?;
    let logs = workspace.output("qemu-logs");
    let bare = bare_bench_scenario(&guest, &logs);
    let hosted = hosted_bench_scenario(workspace, &logs)?;
    let mut seconds = Vec::new();
    for scenario in [bare, hosted] {
        seconds.push(run_to_ready(&scenario)?);
    }
    println!(
        "Linux {} boot to its ready line, -icount {BENCH_ICOUNT}: bare {:.2} s, under the hypervisor {:.2} s, ratio {:.2}",
        guest.release,
        seconds[0],
        seconds[1],
        seconds[1] / seconds[0]
    );
    Ok(())
}

/// [`benchmark`] for the amd64 kernel: bare on `qemu-system-x86_64 -cpu
/// EPYC` with 4 CPUs and 256 MiB, and as the only domain of the
/// hypervisor on qemu-x86 (4 vCPUs in a core-scheduled pool of two SMT
/// cores), both under `-icount`.
fn benchmark_x86(workspace: &Workspace) -> Result<(), String> {
    let guest = prepare_for(workspace, GuestArch::X86).map_err(|e| e.to_string())?;
    let logs = workspace.output("qemu-logs");
    let bare = ::tests::Scenario::new("linux-x86-bench-bare", "qemu-system-x86_64")
        .args([
            "-machine",
            "q35",
            "-cpu",
            crate::qemu::X86_DEFAULT_CPU,
            "-smp",
            "4",
            "-m",
            "256M",
            "-nographic",
            "-serial",
            "mon:stdio",
            "-no-reboot",
            "-icount",
            BENCH_ICOUNT,
            "-append",
            "console=ttyS0",
            "-initrd",
        ])
        .args([guest.initramfs.display().to_string()])
        .kernel(&guest.image)
        .timeout(BENCH_TIMEOUT)
        .log_dir(&logs)
        .expect(::tests::Expectation::contains(READY_LINE));
    let board = crate::board::find("qemu-x86").map_err(|e| e.to_string())?;
    let options = crate::qemu::RunOptions {
        extra: vec!["-icount".to_string(), BENCH_ICOUNT.to_string()],
        ..crate::qemu::RunOptions::for_board(board)
    };
    let config = workspace
        .root
        .join("boards/configs/tests/x86-linux-bench.toml");
    let image = image::build_with_config(workspace, board, true, Some(&config))
        .map_err(|e| e.to_string())?;
    let (program, args) = crate::qemu::command(board, &options).ok_or("qemu-x86 has no QEMU")?;
    let hosted = ::tests::Scenario::new("linux-x86-bench-hv", program)
        .args(args)
        .kernel(&image)
        .timeout(BENCH_TIMEOUT)
        .log_dir(&logs)
        .expect(::tests::Expectation::contains(READY_LINE));
    let mut seconds = Vec::new();
    for scenario in [bare, hosted] {
        seconds.push(run_to_ready(&scenario)?);
    }
    println!(
        "Linux {} (x86-64) boot to its ready line, -icount {BENCH_ICOUNT}: bare {:.2} s, under the hypervisor {:.2} s, ratio {:.2}",
        guest.release,
        seconds[0],
        seconds[1],
        seconds[1] / seconds[0]
    );
    Ok(())
}

/// The guest booted bare by QEMU at EL1 under `-icount` (4 CPUs, 256 MiB,
/// as the benchmark domain): the reference the hosted boots are compared to.
pub fn bare_bench_scenario(guest: &LinuxGuest, logs: &Path) -> ::tests::Scenario {
    ::tests::Scenario::new("linux-bench-bare", "qemu-system-aarch64")
        .args([
            "-machine",
            "virt,gic-version=3",
            "-cpu",
            "cortex-a72",
            "-smp",
            "4",
            "-m",
            "256M",
            "-nographic",
            "-serial",
            "mon:stdio",
            "-icount",
            BENCH_ICOUNT,
            "-append",
            "console=ttyAMA0",
            "-initrd",
        ])
        .args([guest.initramfs.display().to_string()])
        .kernel(&guest.image)
        .timeout(BENCH_TIMEOUT)
        .log_dir(logs)
        .expect(::tests::Expectation::contains(READY_LINE))
}

/// The QEMU machine every hosted benchmark boot runs on (this hypervisor's
/// and a peer's): QEMU virt with EL2, GICv3, Cortex-A72, two clusters of two
/// SMT cores, under `-icount`.
pub fn bench_machine() -> Result<(&'static crate::board::Board, crate::qemu::RunOptions), String> {
    let board = crate::board::find("qemu-virt").map_err(|e| e.to_string())?;
    let options = crate::qemu::RunOptions {
        smp: "8,clusters=2,cores=2,threads=2".to_string(),
        extra: vec!["-icount".to_string(), BENCH_ICOUNT.to_string()],
        ..crate::qemu::RunOptions::for_board(board)
    };
    Ok((board, options))
}

/// The guest as this hypervisor's only domain ([`bench_machine`], config
/// `linux-bench.toml`: 4 vCPUs, 256 MiB, a core-scheduled pool).
pub fn hosted_bench_scenario(
    workspace: &Workspace,
    logs: &Path,
) -> Result<::tests::Scenario, String> {
    let (board, options) = bench_machine()?;
    let config = workspace.root.join("boards/configs/tests/linux-bench.toml");
    let image = image::build_with_config(workspace, board, true, Some(&config))
        .map_err(|e| e.to_string())?;
    let (program, args) = crate::qemu::command(board, &options).ok_or("qemu-virt has no QEMU")?;
    Ok(::tests::Scenario::new("linux-bench-hv", program)
        .args(args)
        .kernel(&image)
        .timeout(BENCH_TIMEOUT)
        .log_dir(logs)
        .expect(::tests::Expectation::contains(READY_LINE)))
}

/// Runs a benchmark boot and returns the guest-visible seconds of its ready
/// line; the failure report if it does not get there.
pub fn run_to_ready(scenario: &::tests::Scenario) -> Result<f64, String> {
    println!("    {}", scenario.command_line());
    let outcome = scenario.run();
    if !outcome.passed() {
        return Err(outcome.report());
    }
    let uptime = outcome
        .lines
        .iter()
        .find_map(|l| ready_uptime(l))
        .ok_or("no uptime in the ready line")?;
    println!("{}: ready at {uptime:.2} s guest time", scenario.name);
    Ok(uptime)
}

/// The `uptime=` seconds of a ready line.
fn ready_uptime(line: &str) -> Option<f64> {
    let (_, rest) = line.split_once(READY_LINE)?;
    rest.split_whitespace()
        .find_map(|field| field.strip_prefix("uptime="))?
        .parse()
        .ok()
}

/// The download cache: `$HV_LINUX_CACHE`, else `$XDG_CACHE_HOME/hv-linux-guest`,
/// else `~/.cache/hv-linux-guest`, else `<target>/linux-cache`.
pub fn cache_dir(workspace: &Workspace) -> PathBuf {
    if let Some(dir) = env::var_os("HV_LINUX_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("hv-linux-guest");
    }
    match env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache/hv-linux-guest"),
        None => workspace.target_dir.join("linux-cache"),
    }
}

/// Downloads (or finds in the cache) both arm64 packages and writes the
/// guest's `Image` and initramfs under `<target>/linux-guest/`.
pub fn prepare(workspace: &Workspace) -> Result<LinuxGuest, LinuxError> {
    prepare_for(workspace, GuestArch::Arm64)
}

/// Like [`prepare`] for either guest: the x86 one is the amd64 bzImage as
/// Debian ships it (checked as the x86 loader will read it) and the same
/// initramfs with amd64 BusyBox, under `<target>/linux-guest-x86/`.
pub fn prepare_for(workspace: &Workspace, arch: GuestArch) -> Result<LinuxGuest, LinuxError> {
    let cache = cache_dir(workspace);
    fs::create_dir_all(&cache).map_err(|e| LinuxError::Io(cache.clone(), e))?;
    let [kernel_package, busybox_package] = arch.packages();
    let kernel_deb = fetch(&cache, &kernel_package)?;
    let busybox_deb = fetch(&cache, &busybox_package)?;
    let (folder, kernel_name) = arch.output();
    let out = workspace.output(folder);
    // Per process: two xtask runs (a test and a build) may prepare at once.
    let unpacked = out.join(format!("unpacked-{}", std::process::id()));
    if unpacked.exists() {
        fs::remove_dir_all(&unpacked).map_err(|e| LinuxError::Io(unpacked.clone(), e))?;
    }
    fs::create_dir_all(&unpacked).map_err(|e| LinuxError::Io(unpacked.clone(), e))?;
    for deb in [&kernel_deb, &busybox_deb] {
        let status = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(&unpacked)
            .status()
            .map_err(|e| LinuxError::Spawn("dpkg-deb", e))?;
        if !status.success() {
            return Err(LinuxError::Unpack(deb.clone()));
        }
    }
    let (vmlinuz, release) = find_vmlinuz(&unpacked.join("boot"))?;
    let shipped = fs::read(&vmlinuz).map_err(|e| LinuxError::Io(vmlinuz.clone(), e))?;
    let kernel = match arch {
        GuestArch::Arm64 => {
            let kernel = plain_image(&shipped).map_err(|e| LinuxError::Io(vmlinuz.clone(), e))?;
            image::check_arm64_header(&kernel)
                .map_err(|e| LinuxError::BadImage(vmlinuz.clone(), e))?;
            kernel
        }
        // A bzImage decompresses itself.
        GuestArch::X86 => {
            hv::x86::linux_boot::BzImage::parse(&shipped)
                .map_err(|e| LinuxError::BadBzImage(vmlinuz.clone(), e))?;
            shipped
        }
    };
    let busybox_path = unpacked.join("bin/busybox");
    let busybox = fs::read(&busybox_path).map_err(|_| LinuxError::NoBusybox(unpacked.clone()))?;
    let initramfs = initramfs(&busybox);
    let image_path = out.join(kernel_name);
    let initramfs_path = out.join("initramfs.cpio");
    write_if_changed(&image_path, &kernel)?;
    write_if_changed(&initramfs_path, &initramfs)?;
    // The unpacked tree is 300 MB of modules; only the two outputs are needed.
    fs::remove_dir_all(&unpacked).map_err(|e| LinuxError::Io(unpacked.clone(), e))?;
    Ok(LinuxGuest {
        image: image_path,
        initramfs: initramfs_path,
        release,
    })
}

/// The cached `.deb` of `package`, downloaded first if missing or corrupt.
pub fn fetch(cache: &Path, package: &Package) -> Result<PathBuf, LinuxError> {
    let file = cache.join(format!(
        "{}_{}_{}.deb",
        package.name,
        package.version.replace(':', "%3a"),
        package.arch
    ));
    if file.is_file() && check_hash(&file, package).is_ok() {
        return Ok(file);
    }
    ensure_architecture(package.arch)?;
    eprintln!(
        "xtask: downloading {}:{} {} into {}",
        package.name,
        package.arch,
        package.version,
        cache.display()
    );
    // apt-get download names the file after the package; a scratch folder
    // makes it easy to find whatever name it chose.
    let scratch = cache.join(format!("download-{}", package.name));
    if scratch.exists() {
        fs::remove_dir_all(&scratch).map_err(|e| LinuxError::Io(scratch.clone(), e))?;
    }
    fs::create_dir_all(&scratch).map_err(|e| LinuxError::Io(scratch.clone(), e))?;
    let out = Command::new("apt-get")
        .arg("download")
        .arg(format!(
            "{}:{}={}",
            package.name, package.arch, package.version
        ))
        .current_dir(&scratch)
        .output()
        .map_err(|e| LinuxError::Spawn("apt-get", e))?;
    let downloaded = fs::read_dir(&scratch)
        .map_err(|e| LinuxError::Io(scratch.clone(), e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"));
    let Some(downloaded) = downloaded.filter(|_| out.status.success()) else {
        let detail = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("E:"))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(LinuxError::MissingPackage {
            name: package.name,
            version: package.version,
            detail,
        });
    };
    fs::rename(&downloaded, &file).map_err(|e| LinuxError::Io(file.clone(), e))?;
    let _ = fs::remove_dir_all(&scratch);
    check_hash(&file, package)?;
    Ok(file)
}

/// Checks `file` against the pinned hash of `package`.
fn check_hash(file: &Path, package: &Package) -> Result<(), LinuxError> {
    let bytes = fs::read(file).map_err(|e| LinuxError::Io(file.to_path_buf(), e))?;
    let actual = sha256_hex(&bytes);
    if actual == package.sha256 {
        Ok(())
    } else {
        Err(LinuxError::HashMismatch {
            name: package.name,
            path: file.to_path_buf(),
            expected: package.sha256,
            actual,
        })
    }
}

/// SHA-256 as lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Makes sure apt can download `arch` packages: the machine's own
/// architecture always can; a foreign one (arm64 on an amd64 host) is added
/// to dpkg when running as root (needed once per machine), else says how.
fn ensure_architecture(arch: &'static str) -> Result<(), LinuxError> {
    let listed = |flag: &str| -> Result<bool, LinuxError> {
        let out = Command::new("dpkg")
            .arg(flag)
            .output()
            .map_err(|e| LinuxError::Spawn("dpkg", e))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == arch))
    };
    if listed("--print-architecture")? || listed("--print-foreign-architectures")? {
        return Ok(());
    }
    if !crate::qemu::is_root() {
        return Err(LinuxError::NoArchitecture(arch));
    }
    eprintln!("xtask: dpkg --add-architecture {arch} && apt-get update");
    for (tool, args) in [
        ("dpkg", &["--add-architecture", arch][..]),
        ("apt-get", &["update"][..]),
    ] {
        let status = Command::new(tool)
            .args(args)
            .status()
            .map_err(|e| LinuxError::Spawn(tool, e))?;
        if !status.success() {
            return Err(LinuxError::NoArchitecture(arch));
        }
    }
    Ok(())
}

/// `boot/vmlinuz-RELEASE` in an unpacked kernel package, and RELEASE.
fn find_vmlinuz(boot: &Path) -> Result<(PathBuf, String), LinuxError> {
    let entries = fs::read_dir(boot).map_err(|_| LinuxError::NoKernel(boot.to_path_buf()))?;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(release) = name.strip_prefix("vmlinuz-") {
            return Ok((entry.path(), release.to_string()));
        }
    }
    Err(LinuxError::NoKernel(boot.to_path_buf()))
}

/// The plain `Image` from a `vmlinuz`: gunzipped when it starts with the gzip
/// magic (arm64 kernels are often shipped compressed; the boot protocol needs
/// them plain), else as is.
pub fn plain_image(vmlinuz: &[u8]) -> std::io::Result<Vec<u8>> {
    const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
    if !vmlinuz.starts_with(&GZIP_MAGIC) {
        return Ok(vmlinuz.to_vec());
    }
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(vmlinuz).read_to_end(&mut plain)?;
    Ok(plain)
}

/// Writes `bytes` to `path` unless it already holds exactly them (so the
/// hypervisor build, which embeds the file, is not redone for nothing).
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), LinuxError> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| LinuxError::Io(dir.to_path_buf(), e))?;
    }
    fs::write(path, bytes).map_err(|e| LinuxError::Io(path.to_path_buf(), e))
}

/// The initramfs: BusyBox, `/init`, the directories it mounts on and
/// `/dev/console` (the kernel opens it for init before devtmpfs is mounted).
pub fn initramfs(busybox: &[u8]) -> Vec<u8> {
    let mut cpio = CpioWriter::default();
    for dir in [
        "bin", "dev", "proc", "sys", "sbin", "usr", "usr/bin", "usr/sbin", "tmp", "root",
    ] {
        cpio.directory(dir);
    }
    // Character device 5:1 is /dev/console.
    cpio.char_device("dev/console", 5, 1);
    cpio.file("bin/busybox", 0o755, busybox);
    cpio.file("init", 0o755, INIT_SCRIPT.as_bytes());
    cpio.finish()
}

/// File type bits of a cpio `mode` (as in `stat`).
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFCHR: u32 = 0o020000;

/// A writer of the `newc` cpio format the kernel unpacks into its initramfs
/// (Linux `Documentation/driver-api/early-userspace/buffer-format.rst`).
/// Written here because it is ~40 lines and no maintained crate writes
/// device nodes without touching the host file system.
#[derive(Default)]
pub struct CpioWriter {
    out: Vec<u8>,
    next_inode: u32,
}

impl CpioWriter {
    /// Adds a directory (mode 0755).
    pub fn directory(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, (0, 0), &[]);
    }

    /// Adds a regular file.
    pub fn file(&mut self, name: &str, permissions: u32, data: &[u8]) {
        self.entry(name, S_IFREG | permissions, (0, 0), data);
    }

    /// Adds a character device node (mode 0600).
    pub fn char_device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, S_IFCHR | 0o600, (major, minor), &[]);
    }

    /// Appends the `TRAILER!!!` entry and returns the archive.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.next_inode += 1;
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            self.next_inode,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: fixed, so the archive is reproducible
            data.len() as u32,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1, // namesize, NUL included
            0,                     // check (newc: unused)
        ];
        self.out.extend_from_slice(b"070701");
        for field in fields {
            self.out
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    /// Header + name, and data, are each padded to 4 bytes.
    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_image(text_offset: u64, image_size: u64) -> Vec<u8> {
        let mut image = vec![0u8; 4096];
        image[0x8..0x10].copy_from_slice(&text_offset.to_le_bytes());
        image[0x10..0x18].copy_from_slice(&image_size.to_le_bytes());
        image[0x38..0x3c].copy_from_slice(b"ARM\x64");
        image
    }

    #[test]
    fn cpio_entries_are_newc_and_aligned() {
        let mut cpio = CpioWriter::default();
        cpio.file("init", 0o755, b"#!/bin/sh\n");
        cpio.char_device("dev/console", 5, 1);
        let archive = cpio.finish();
        assert!(archive.len().is_multiple_of(4));
        // First header: magic, inode 1, mode regular 0755, file size 10.
        assert_eq!(&archive[..6], b"070701");
        let field = |n: usize| {
            let at = 6 + n * 8;
            u32::from_str_radix(std::str::from_utf8(&archive[at..at + 8]).unwrap(), 16).unwrap()
        };
        assert_eq!(field(0), 1);
        assert_eq!(field(1), S_IFREG | 0o755);
        assert_eq!(field(6), 10);
        assert_eq!(field(11), 5); // "init" + NUL
        // Name right after the 110-byte header; data 4-aligned after it.
        assert_eq!(&archive[110..115], b"init\0");
        assert_eq!(&archive[116..126], b"#!/bin/sh\n");
        let text = String::from_utf8_lossy(&archive);
        assert!(text.contains("dev/console\0"));
        assert!(text.contains("TRAILER!!!\0"));
        // The console's rdev: major 5, minor 1.
        let console = text.find("dev/console").unwrap() - 110;
        let rdev_major = &archive[console + 6 + 9 * 8..console + 6 + 10 * 8];
        assert_eq!(rdev_major, b"00000005");
    }

    #[test]
    fn initramfs_has_init_and_busybox() {
        let archive = initramfs(b"BUSYBOX");
        let text = String::from_utf8_lossy(&archive);
        for needed in ["init\0", "bin/busybox\0", "BUSYBOX", READY_LINE, "proc\0"] {
            assert!(text.contains(needed), "{needed} missing");
        }
    }

    #[test]
    fn plain_image_gunzips_and_passes_plain_through() {
        use std::io::Write;
        let image = fake_image(0, 0x10000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&image).unwrap();
        let compressed = gz.finish().unwrap();
        assert_eq!(plain_image(&compressed).unwrap(), image);
        assert_eq!(plain_image(&image).unwrap(), image);
        // A truncated gzip stream is an error, not a short kernel.
        assert!(plain_image(&compressed[..compressed.len() / 2]).is_err());
    }

    /// A package the archive does not have: `fetch` names it and stops. Runs
    /// only where apt can download arm64 packages (it never changes the
    /// machine's dpkg architectures from a test).
    #[test]
    fn a_missing_package_is_named() {
        let arm64 = Command::new("dpkg")
            .arg("--print-foreign-architectures")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("arm64"));
        if !arm64 {
            println!("note: no dpkg arm64 architecture; skipping");
            return;
        }
        let cache =
            std::env::temp_dir().join(format!("xtask-linux-missing-{}", std::process::id()));
        fs::create_dir_all(&cache).unwrap();
        let missing = Package {
            name: "hv-test-no-such-package",
            arch: "arm64",
            version: "1.0",
            sha256: "00",
        };
        let err = fetch(&cache, &missing).unwrap_err();
        fs::remove_dir_all(&cache).unwrap();
        assert!(
            matches!(
                err,
                LinuxError::MissingPackage {
                    name: "hv-test-no-such-package",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("hv-test-no-such-package version 1.0")
        );
    }

    /// A cached file that does not match its pinned hash is reported with both
    /// hashes.
    #[test]
    fn a_corrupt_download_is_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-linux-hash-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("busybox.deb");
        fs::write(&file, b"not a deb").unwrap();
        let err = check_hash(&file, &BUSYBOX).unwrap_err();
        fs::remove_dir_all(&dir).unwrap();
        let text = err.to_string();
        assert!(text.contains(BUSYBOX.sha256), "{text}");
        assert!(text.contains(&sha256_hex(b"not a deb")), "{text}");
    }

    #[test]
    fn ready_line_uptime_is_parsed() {
        assert_eq!(
            ready_uptime("[dom1] linux-guest ready: nproc=4 kernel=6.1.0-50-arm64 uptime=32.03"),
            Some(32.03)
        );
        assert_eq!(ready_uptime("linux-guest ready: nproc=4"), None);
        assert_eq!(ready_uptime("uptime=3.0"), None);
    }

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
