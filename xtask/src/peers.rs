//! `cargo xtask bench-peers [--no-micro-bench]`: this hypervisor next to Xen
//! 4.17 (Debian's `xen-hypervisor-4.17-arm64`, downloaded and hash-pinned like
//! the Linux guest) on the same emulated machine under `-icount`, with the
//! same guests: Debian's Linux to its ready line (bare, under this
//! hypervisor, under Xen as a dom0less domain) and kvm-unit-tests'
//! `micro-bench.flat` (round trips to the hypervisor). Prints one table with
//! each figure and its ratio to Xen; a row Xen cannot run says why.
//!
//! Xen boots from `-kernel` with a device tree made from QEMU's own
//! (`dumpdtb`) plus `xen,xen-bootargs` and one `xen,domain` node under
//! `/chosen`; each module is placed with `-device loader` (raw, so QEMU does
//! not interpret a U-Boot header itself). Xen 4.17 takes an arm64 `Image` or
//! a U-Boot `uImage`; kvm-unit-tests' `.flat` must run at the start of guest
//! RAM, which only a `uImage` with that load address gives it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use ::tests::{Expectation, Scenario};

use crate::image;
use crate::linux::{self, BENCH_TIMEOUT, LinuxGuest, Package};
use crate::workspace::Workspace;

const USAGE: &str = "usage: cargo xtask bench-peers [--no-micro-bench]";

/// Xen 4.17 for arm64 from Debian bookworm (main, point release 12.x).
pub const XEN: Package = Package {
    name: "xen-hypervisor-4.17-arm64",
    arch: "arm64",
    version: "4.17.5+72-g01140da4e8-1",
    sha256: "ae97d9bb37f765ae1a37628894ad5156d0957ca7e39e7df86221ecb46502a1a8",
};
/// The hypervisor image in the package.
const XEN_IN_PACKAGE: &str = "boot/xen-4.17-arm64";

/// Where the modules are placed in the machine's RAM (1 GiB from
/// 0x4000_0000): above Xen and the device tree QEMU puts at 128 MiB.
const KERNEL_MODULE: u64 = 0x5000_0000;
const RAMDISK_MODULE: u64 = 0x5400_0000;
const PARTIAL_DT_MODULE: u64 = 0x5300_0000;

/// Guest RAM base of a Xen domU (GUEST_RAM0_BASE), where the `.flat` must run.
const XEN_GUEST_RAM: u32 = 0x4000_0000;
/// Xen's emulated SBSA UART of a dom0less domain (`vpl011`): its flag
/// register is micro-bench's emulated MMIO read, as the vPL011's is here.
const XEN_VPL011_FLAGS: &str = "0x22000018";

/// The kvm-unit-tests image (the shared fixtures beside the repository).
const MICRO_BENCH: &str = "../shared/fixtures/kvm-unit-tests/arm64/micro-bench.flat";
/// The tests micro-bench prints a row for, in its order.
const MICRO_BENCH_ROWS: [&str; 6] = [
    "hyp_call",
    "mmio_read_user",
    "mmio_read_vgic",
    "eoi",
    "ipi",
    "timer_10ms",
];

/// Runs the benchmark with the arguments after `bench-peers`.
pub fn run(args: &[String]) -> ExitCode {
    let micro_bench = match args {
        [] => true,
        [flag] if flag == "--no-micro-bench" => false,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    match bench(&Workspace::current(), micro_bench) {
        Ok(table) => {
            println!("\n{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask bench-peers: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One measured quantity: bare (where it exists), here, under Xen.
struct Row {
    /// What is measured, and its unit.
    name: String,
    bare: Option<f64>,
    ours: Result<f64, String>,
    xen: Result<f64, String>,
}

fn bench(workspace: &Workspace, micro_bench: bool) -> Result<String, String> {
    let guest = linux::prepare(workspace).map_err(|e| e.to_string())?;
    let xen = xen_image(workspace)?;
    let logs = workspace.output("qemu-logs");
    let dir = workspace.output("peers");
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;

    let bare = linux::run_to_ready(&linux::bare_bench_scenario(&guest, &logs))?;
    let ours = linux::run_to_ready(&linux::hosted_bench_scenario(workspace, &logs)?);
    let under_xen = linux_under_xen(&xen, &guest, &dir, &logs)
        .and_then(|scenario| linux::run_to_ready(&scenario));
    let mut rows = vec![Row {
        name: format!("Linux {} boot to ready (s)", guest.release),
        bare: Some(bare),
        ours,
        xen: under_xen,
    }];
    if micro_bench {
        let ours = micro_bench_here(workspace, &logs);
        let xen = micro_bench_under_xen(workspace, &xen, &dir, &logs);
        for name in MICRO_BENCH_ROWS {
            let pick = |run: &Result<Vec<(String, f64)>, String>| match run {
                Ok(rows) => rows
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|&(_, avg)| avg)
                    .ok_or_else(|| format!("no {name} row")),
                Err(why) => Err(why.clone()),
            };
            rows.push(Row {
                name: format!("micro-bench {name} (ns)"),
                bare: None,
                ours: pick(&ours),
                xen: pick(&xen),
            });
        }
    }
    Ok(table(&rows))
}

/// The table: one line per row, then each failure's reason in full.
fn table(rows: &[Row]) -> String {
    let figure = |value: &Result<f64, String>| match value {
        Ok(v) => format!("{v:.2}"),
        Err(_) => "n/a".to_string(),
    };
    let mut out = format!(
        "| {:<44} | {:>8} | {:>12} | {:>8} | {:>12} |\n|{}|{}|{}|{}|{}|\n",
        "figure (-icount shift=0,sleep=off)",
        "bare",
        "this hv",
        "Xen 4.17",
        "this hv / Xen",
        "-".repeat(46),
        "-".repeat(9) + ":",
        "-".repeat(13) + ":",
        "-".repeat(9) + ":",
        "-".repeat(13) + ":",
    );
    let mut reasons = Vec::new();
    for row in rows {
        let ratio = match (&row.ours, &row.xen) {
            (Ok(ours), Ok(xen)) if *xen > 0.0 => format!("{:.2}", ours / xen),
            _ => "n/a".to_string(),
        };
        out.push_str(&format!(
            "| {:<44} | {:>8} | {:>12} | {:>8} | {:>12} |\n",
            row.name,
            row.bare.map_or("-".to_string(), |b| format!("{b:.2}")),
            figure(&row.ours),
            figure(&row.xen),
            ratio
        ));
        for (who, result) in [("this hypervisor", &row.ours), ("Xen", &row.xen)] {
            if let Err(why) = result {
                let first = why.lines().next().unwrap_or_default();
                let line = format!("{}: not measured under {who}: {first}", row.name);
                if !reasons.contains(&line) {
                    reasons.push(line);
                }
            }
        }
    }
    for reason in reasons {
        out.push_str(&format!("\n{reason}"));
    }
    out
}

/// The Xen image from the pinned package (downloaded once, hash-checked).
fn xen_image(workspace: &Workspace) -> Result<PathBuf, String> {
    let cache = linux::cache_dir(workspace);
    fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let deb = linux::fetch(&cache, &XEN).map_err(|e| e.to_string())?;
    let unpacked = workspace.output("peers").join("xen-package");
    fs::create_dir_all(&unpacked).map_err(|e| format!("{}: {e}", unpacked.display()))?;
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&unpacked)
        .status()
        .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
    if !status.success() {
        return Err(format!("dpkg-deb -x {} failed", deb.display()));
    }
    let xen = unpacked.join(XEN_IN_PACKAGE);
    let bytes = fs::read(&xen).map_err(|e| format!("{}: {e}", xen.display()))?;
    image::check_arm64_header(&bytes).map_err(|e| format!("{}: {e}", xen.display()))?;
    Ok(xen)
}

/// A dom0less domain for [`xen_device_tree`].
struct XenDomain<'a> {
    vcpus: u32,
    memory_mib: u32,
    kernel: &'a Path,
    bootargs: &'a str,
    ramdisk: Option<&'a Path>,
    /// A partial device tree whose `/passthrough` nodes Xen copies into the
    /// domain's (`multiboot,device-tree`).
    partial_dt: Option<&'a Path>,
    /// Whether the guest prints through Xen's console (its vPL011): Xen
    /// shows a guest's output only at `guest_loglvl=all`, which also logs
    /// every unknown hypercall, so a guest with its own UART runs without it.
    console_through_xen: bool,
}

/// QEMU's device tree for the benchmark machine with Xen's boot arguments
/// and `domain` as a dom0less domain; and the `-device loader` arguments
/// that place its modules.
fn xen_device_tree(
    domain: &XenDomain,
    dir: &Path,
    name: &str,
) -> Result<(PathBuf, Vec<String>), String> {
    let size = |path: &Path| {
        fs::metadata(path)
            .map(|m| m.len())
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let mut modules = vec![format!(
        "module@{KERNEL_MODULE:x} {{ compatible = \"multiboot,kernel\", \"multiboot,module\"; reg = <0x0 {KERNEL_MODULE:#x} {:#x}>; bootargs = \"{}\"; }};",
        size(domain.kernel)?,
        domain.bootargs
    )];
    let mut loaders = vec![(KERNEL_MODULE, domain.kernel)];
    if let Some(ramdisk) = domain.ramdisk {
        modules.push(format!(
            "module@{RAMDISK_MODULE:x} {{ compatible = \"multiboot,ramdisk\", \"multiboot,module\"; reg = <0x0 {RAMDISK_MODULE:#x} {:#x}>; }};",
            size(ramdisk)?
        ));
        loaders.push((RAMDISK_MODULE, ramdisk));
    }
    if let Some(partial) = domain.partial_dt {
        modules.push(format!(
            "module@{PARTIAL_DT_MODULE:x} {{ compatible = \"multiboot,device-tree\", \"multiboot,module\"; reg = <0x0 {PARTIAL_DT_MODULE:#x} {:#x}>; }};",
            size(partial)?
        ));
        loaders.push((PARTIAL_DT_MODULE, partial));
    }
    // dtc merges this into QEMU's /chosen. The domain node's cells are
    // Xen's binding: two address cells, one size cell for the modules.
    let edit = format!(
        "/ {{ chosen {{
            #address-cells = <2>;
            #size-cells = <2>;
            xen,xen-bootargs = \"console=dtuart dtuart=serial0 bootscrub=0{}\";
            domU1 {{
                compatible = \"xen,domain\";
                #address-cells = <2>;
                #size-cells = <1>;
                memory = <0x0 {:#x}>;
                cpus = <{}>;
                vpl011;
                {}
            }};
        }}; }};",
        if domain.console_through_xen {
            " guest_loglvl=all"
        } else {
            ""
        },
        domain.memory_mib * 1024,
        domain.vcpus,
        modules.join("\n                ")
    );
    let (board, options) = linux::bench_machine()?;
    let dtb = crate::scenarios::edited_dtb(board, &options, &edit, dir, name)
        .map_err(|e| e.to_string())?;
    let args = loaders
        .iter()
        .flat_map(|(address, file)| {
            [
                "-device".to_string(),
                format!(
                    "loader,file={},addr={address:#x},force-raw=on",
                    file.display()
                ),
            ]
        })
        .collect();
    Ok((dtb, args))
}

/// QEMU booting Xen on the benchmark machine with `dtb` and its modules.
fn xen_scenario(
    name: &str,
    xen: &Path,
    dtb: &Path,
    loaders: Vec<String>,
    logs: &Path,
) -> Result<Scenario, String> {
    let (board, options) = linux::bench_machine()?;
    let (program, args) = crate::qemu::command(board, &options).ok_or("qemu-virt has no QEMU")?;
    Ok(Scenario::new(name, program)
        .args(args)
        .args(["-dtb".to_string(), dtb.display().to_string()])
        .args(loaders)
        .kernel(xen)
        .timeout(BENCH_TIMEOUT)
        .log_dir(logs))
}

/// Linux as a 4-vCPU, 256 MiB dom0less domain of Xen (as `linux-bench.toml`
/// gives it here); its console is Xen's SBSA UART.
fn linux_under_xen(
    xen: &Path,
    guest: &LinuxGuest,
    dir: &Path,
    logs: &Path,
) -> Result<Scenario, String> {
    let domain = XenDomain {
        vcpus: 4,
        memory_mib: 256,
        kernel: &guest.image,
        bootargs: "console=ttyAMA0",
        ramdisk: Some(&guest.initramfs),
        partial_dt: None,
        console_through_xen: true,
    };
    let (dtb, loaders) = xen_device_tree(&domain, dir, "xen-linux")?;
    Ok(xen_scenario("linux-bench-xen", xen, &dtb, loaders, logs)?
        .expect(Expectation::contains(linux::READY_LINE)))
}

/// micro-bench as this hypervisor's only domain (2 vCPUs, its config in
/// BENCHMARKS.md), on the benchmark machine.
fn micro_bench_here(workspace: &Workspace, logs: &Path) -> Result<Vec<(String, f64)>, String> {
    let (board, options) = linux::bench_machine()?;
    let config = workspace
        .root
        .join("boards/configs/tests/kvm-unit-tests-micro-bench.toml");
    let image = image::build_with_config(workspace, board, true, Some(&config))
        .map_err(|e| e.to_string())?;
    let (program, args) = crate::qemu::command(board, &options).ok_or("qemu-virt has no QEMU")?;
    let scenario = Scenario::new("micro-bench-hv", program)
        .args(args)
        .kernel(&image)
        .timeout(BENCH_TIMEOUT)
        .log_dir(logs);
    run_micro_bench(scenario)
}

/// micro-bench as a 2-vCPU dom0less domain of Xen: loaded at the start of
/// its RAM from a `uImage`, the emulated MMIO read on Xen's vPL011, and
/// what the image needs that Xen's generated device tree lacks, from a
/// partial device tree ([`MICRO_BENCH_PASSTHROUGH`]) and an initrd (its
/// environment: without one, Xen's placeholder `linux,initrd-*` properties
/// read as an empty initrd the image refuses).
fn micro_bench_under_xen(
    workspace: &Workspace,
    xen: &Path,
    dir: &Path,
    logs: &Path,
) -> Result<Vec<(String, f64)>, String> {
    let flat_path = workspace.root.join(MICRO_BENCH);
    let flat = fs::read(&flat_path).map_err(|e| format!("{}: {e}", flat_path.display()))?;
    let kernel = dir.join("micro-bench.uImage");
    fs::write(&kernel, uimage(&flat, XEN_GUEST_RAM, "micro-bench"))
        .map_err(|e| format!("{}: {e}", kernel.display()))?;
    let environment = dir.join("micro-bench.env");
    fs::write(&environment, "BENCH=xen\n")
        .map_err(|e| format!("{}: {e}", environment.display()))?;
    let partial = compile_dts(
        MICRO_BENCH_PASSTHROUGH,
        &dir.join("micro-bench-passthrough"),
    )?;
    let bootargs = format!("mmio-addr={XEN_VPL011_FLAGS}");
    let domain = XenDomain {
        vcpus: 2,
        memory_mib: 32,
        kernel: &kernel,
        bootargs: &bootargs,
        ramdisk: Some(&environment),
        partial_dt: Some(&partial),
        console_through_xen: false,
    };
    let (dtb, loaders) = xen_device_tree(&domain, dir, "xen-micro-bench")?;
    run_micro_bench(xen_scenario("micro-bench-xen", xen, &dtb, loaders, logs)?)
}

/// A partial device tree for Xen (`/passthrough`, copied into the guest's
/// before Xen's own nodes):
/// - QEMU's PL011 at its own address, no interrupt: the image prints there
///   before it reads its device tree (as on QEMU), and then uses the first
///   `arm,pl011`;
/// - a timer node listing four PPIs (secure, non-secure, virtual,
///   hypervisor, Xen's numbers): kvm-unit-tests requires at least four
///   (`lib/arm/timer.c`), Xen 4.17's own node lists three, and the image
///   takes the first `arm,armv8-timer` node. 65000 is the phandle Xen gives
///   the guest's GIC for partial device trees.
const MICRO_BENCH_PASSTHROUGH: &str = r#"/dts-v1/;
/ {
    #address-cells = <2>;
    #size-cells = <2>;
    passthrough {
        compatible = "simple-bus";
        ranges;
        #address-cells = <2>;
        #size-cells = <2>;
        timer {
            compatible = "arm,armv8-timer";
            interrupt-parent = <65000>;
            interrupts = <1 13 0xf08>, <1 14 0xf08>, <1 11 0xf08>, <1 10 0xf08>;
        };
        pl011@9000000 {
            compatible = "arm,pl011", "arm,primecell";
            reg = <0x0 0x9000000 0x0 0x1000>;
            xen,reg = <0x0 0x9000000 0x0 0x1000 0x0 0x9000000>;
            xen,force-assign-without-iommu;
        };
    };
};
"#;

/// `source` compiled by dtc to `<stem>.dtb`.
fn compile_dts(source: &str, stem: &Path) -> Result<PathBuf, String> {
    let dts = stem.with_extension("dts");
    let dtb = stem.with_extension("dtb");
    fs::write(&dts, source).map_err(|e| format!("{}: {e}", dts.display()))?;
    let out = Command::new("dtc")
        .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
        .arg(&dtb)
        .arg(&dts)
        .output()
        .map_err(|e| format!("cannot run dtc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dtc {}: {}",
            dts.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(dtb)
}

/// Runs micro-bench to its `EXIT:` line; its rows `(name, avg ns)`, or why
/// it did not finish (the first line the image marks as failed).
fn run_micro_bench(mut scenario: Scenario) -> Result<Vec<(String, f64)>, String> {
    scenario = scenario.expect(Expectation::contains("EXIT: STATUS=1"));
    // The image's own failures end the run at once.
    scenario
        .failure_patterns
        .extend(["assert failed", "EXIT: STATUS=", "Unhandled vector"].map(String::from));
    scenario.allowed.push("EXIT: STATUS=1".to_string());
    println!("    {}", scenario.command_line());
    let outcome = scenario.run();
    if !outcome.passed() {
        let why = outcome
            .lines
            .iter()
            .find(|line| scenario.failure_in(line).is_some())
            .cloned()
            .unwrap_or_else(|| outcome.report());
        return Err(format!("micro-bench did not finish: {why}"));
    }
    let rows = micro_bench_rows(&outcome.lines);
    println!("{}: {} rows", scenario.name, rows.len());
    Ok(rows)
}

/// micro-bench's result rows, `(name, avg ns)`: a known test's name followed
/// by its total and average (`hyp_call  340969.123  5202.936`), after any
/// console prefix.
fn micro_bench_rows(lines: &[String]) -> Vec<(String, f64)> {
    lines
        .iter()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words.iter().position(|w| MICRO_BENCH_ROWS.contains(w))?;
            let [total, avg] = words.get(at + 1..at + 3)? else {
                return None;
            };
            // Both figures must be numbers: a row, not a mention.
            total.parse::<f64>().ok()?;
            Some((words[at].to_string(), avg.parse().ok()?))
        })
        .collect()
}

/// `payload` as a U-Boot legacy image (`uImage`): an arm64 Linux kernel,
/// uncompressed, loaded and entered at `load` (header fields big-endian,
/// CRC-32 of the header and of the payload).
fn uimage(payload: &[u8], load: u32, name: &str) -> Vec<u8> {
    const MAGIC: u32 = 0x2705_1956;
    const OS_LINUX: u8 = 5;
    const ARCH_ARM64: u8 = 22;
    const TYPE_KERNEL: u8 = 2;
    const COMPRESSION_NONE: u8 = 0;
    let mut name_field = [0u8; 32];
    for (slot, byte) in name_field.iter_mut().zip(name.bytes().take(31)) {
        *slot = byte;
    }
    let header = |header_crc: u32| {
        let mut h = Vec::with_capacity(64);
        h.extend(MAGIC.to_be_bytes());
        h.extend(header_crc.to_be_bytes());
        h.extend(0u32.to_be_bytes()); // time
        h.extend((payload.len() as u32).to_be_bytes());
        h.extend(load.to_be_bytes());
        h.extend(load.to_be_bytes()); // entry point
        h.extend(crc32fast::hash(payload).to_be_bytes());
        h.extend([OS_LINUX, ARCH_ARM64, TYPE_KERNEL, COMPRESSION_NONE]);
        h.extend(name_field);
        h
    };
    let mut image = header(crc32fast::hash(&header(0)));
    image.extend_from_slice(payload);
    image
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_bench_rows_are_read_after_any_console_prefix() {
        let lines: Vec<String> = [
            "[dom1] name                                total ns                avg ns",
            "[dom1] hyp_call                       340969.123       5202.936",
            "(XEN) DOM1: ipi                       797032.1         12161.8",
            "[dom1] eoi                              1376.0            21.0",
            "[dom1] hyp_call test skipped",
            "[dom1] lpi test skipped",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            micro_bench_rows(&lines),
            [
                ("hyp_call".to_string(), 5202.936),
                ("ipi".to_string(), 12161.8),
                ("eoi".to_string(), 21.0)
            ]
        );
    }

    #[test]
    fn a_uimage_header_is_what_u_boot_and_xen_read() {
        let image = uimage(b"payload!", 0x4000_0000, "micro-bench");
        assert_eq!(image.len(), 64 + 8);
        assert_eq!(&image[0..4], &[0x27, 0x05, 0x19, 0x56]);
        assert_eq!(&image[12..16], &8u32.to_be_bytes());
        assert_eq!(&image[16..20], &0x4000_0000u32.to_be_bytes());
        assert_eq!(&image[20..24], &0x4000_0000u32.to_be_bytes());
        assert_eq!(&image[24..28], &crc32fast::hash(b"payload!").to_be_bytes());
        assert_eq!(image[29], 22, "arm64");
        assert_eq!(&image[32..43], b"micro-bench");
        // The header CRC covers the header with its own field zeroed.
        let mut zeroed = image[..64].to_vec();
        zeroed[4..8].fill(0);
        assert_eq!(&image[4..8], &crc32fast::hash(&zeroed).to_be_bytes());
        assert_eq!(&image[64..], b"payload!");
    }

    #[test]
    fn the_table_gives_ratios_to_xen_and_says_why_a_row_is_missing() {
        let rows = [
            Row {
                name: "Linux boot to ready (s)".into(),
                bare: Some(0.78),
                ours: Ok(0.97),
                xen: Ok(0.90),
            },
            Row {
                name: "micro-bench hyp_call (ns)".into(),
                bare: None,
                ours: Ok(5203.0),
                xen: Err("micro-bench did not finish: timer.c: assert failed".into()),
            },
        ];
        let text = table(&rows);
        assert!(
            text.contains("| 0.78 |") || text.contains(" 0.78 |"),
            "{text}"
        );
        assert!(text.contains("1.08"), "{text}");
        assert!(
            text.contains(
                "micro-bench hyp_call (ns): not measured under Xen: micro-bench did not finish: timer.c: assert failed"
            ),
            "{text}"
        );
    }
}
