//! `cargo xtask topology FILE [PPTT] [--pptt FILE] [--apic-layout SMT,CORE[,CLUSTER]] [--json]`:
//! print the topology the hypervisor would build.
//!
//! Runs the hypervisor's own parsers (`platform::dt`, `platform::acpi`) and topology
//! conversion on the host, and prints the same tree the boot banner prints (or one
//! JSON object). Accepts a DTB, a raw ACPI MADT (`*.apic.dat`, optionally with a
//! PPTT as a second file or `--pptt`), or `acpidump` text holding the MADT and PPTT.
//! x86 MADTs have no CPUID here: `--apic-layout` gives the shifts CPUID would
//! (leaf 0xB SMT and core shifts, optional cluster shift); without it SMT pairs
//! are guessed only when the APIC ids leave no doubt.

use std::process::ExitCode;

use platform::acpi::{self, AcpiTables, ApicIdLayout, Madt, Pptt, Sdt, Signature};
use platform::dt;
use sched::Topology;
use serde_json::{Value, json};

const USAGE: &str = "usage: cargo xtask topology FILE [PPTT_FILE] [--pptt FILE] \
[--apic-layout SMT,CORE[,CLUSTER]] [--json]
  FILE: a DTB, a raw ACPI MADT (APIC), or acpidump text with the MADT (and PPTT)";

/// What kind of firmware description a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirmwareKind {
    /// A flattened device tree (magic 0xd00dfeed).
    DeviceTree,
    /// `acpidump` text output.
    AcpidumpText,
    /// A raw ACPI table, by its 4-byte signature (MADT = "APIC", PPTT = "PPTT").
    Acpi([u8; 4]),
    /// Anything else.
    Unknown,
}

fn firmware_kind(bytes: &[u8]) -> FirmwareKind {
    if dt::is_fdt(bytes) {
        return FirmwareKind::DeviceTree;
    }
    if std::str::from_utf8(bytes).is_ok_and(acpi::is_acpidump) {
        return FirmwareKind::AcpidumpText;
    }
    match bytes.get(..4) {
        Some(signature)
            if [
                &b"APIC"[..],
                b"PPTT",
                b"FACP",
                b"DSDT",
                b"SRAT",
                b"SSDT",
                b"GTDT",
                b"SPCR",
            ]
            .contains(&signature) =>
        {
            FirmwareKind::Acpi([signature[0], signature[1], signature[2], signature[3]])
        }
        _ => FirmwareKind::Unknown,
    }
}

/// The result of reading the files: the topology and the text the boot banner prints.
#[derive(Debug)]
struct Inspection {
    topology: Topology,
    report: String,
    warnings: Vec<String>,
}

/// Parses `bytes` the way the hypervisor does. The error is the message the
/// hypervisor would log.
#[cfg(test)]
fn inspect(bytes: &[u8]) -> Result<Inspection, String> {
    inspect_files(&[bytes], None)
}

/// Parses one DTB, or the ACPI tables in `files` (raw tables and/or acpidump text).
fn inspect_files(files: &[&[u8]], layout: Option<ApicIdLayout>) -> Result<Inspection, String> {
    let Some(first) = files.first() else {
        return Err(String::from("no input file"));
    };
    match firmware_kind(first) {
        FirmwareKind::DeviceTree if files.len() == 1 => inspect_dtb(first),
        FirmwareKind::DeviceTree => Err(String::from(
            "a device tree takes no second file (--pptt is for ACPI MADTs)",
        )),
        FirmwareKind::Unknown => Err(String::from(
            "neither a device tree, nor an ACPI table, nor acpidump text",
        )),
        FirmwareKind::Acpi(_) | FirmwareKind::AcpidumpText => inspect_acpi(files, layout),
    }
}

fn inspect_dtb(bytes: &[u8]) -> Result<Inspection, String> {
    let description = dt::parse(bytes).map_err(|error| error.to_string())?;
    let topology = description.topology().map_err(|error| error.to_string())?;
    let mut report = String::new();
    dt::write_topology_report(&mut report, &description, &topology)
        .map_err(|_| String::from("formatting the report failed"))?;
    let warnings = description
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(Inspection {
        topology,
        report,
        warnings,
    })
}

/// Collects the raw tables from every file (acpidump text is unpacked).
fn acpi_tables(files: &[&[u8]]) -> Result<AcpiTables, String> {
    let mut tables = Vec::new();
    for bytes in files {
        match firmware_kind(bytes) {
            FirmwareKind::AcpidumpText => {
                let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
                let dumped = acpi::parse_acpidump(text).map_err(|e| e.to_string())?;
                tables.extend(dumped.into_iter().map(|table| table.bytes));
            }
            FirmwareKind::Acpi(_) => tables.push(bytes.to_vec()),
            FirmwareKind::DeviceTree => {
                return Err(String::from(
                    "a device tree cannot be combined with ACPI tables",
                ));
            }
            FirmwareKind::Unknown => {
                return Err(String::from("a second file is not an ACPI table"));
            }
        }
    }
    Ok(AcpiTables::from_tables(tables))
}

fn trimmed(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .trim_matches(|c: char| c == '\0' || c.is_whitespace())
        .to_string()
}

fn inspect_acpi(files: &[&[u8]], layout: Option<ApicIdLayout>) -> Result<Inspection, String> {
    let tables = acpi_tables(files)?;
    let text = |error: acpi::AcpiError| error.to_string();
    let madt_table: Sdt<'_> = tables
        .get(Signature::MADT)
        .map_err(text)?
        .ok_or_else(|| String::from("no MADT (APIC table) given: the CPUs are listed there"))?;
    let madt = Madt::from_sdt(&madt_table).map_err(text)?;
    let pptt = match tables.get(Signature::PPTT).map_err(text)? {
        Some(table) => Some(Pptt::parse(table.bytes).map_err(text)?),
        None => None,
    };
    let cpus = acpi::describe_cpus(&madt, pptt.as_ref(), layout).map_err(text)?;
    let topology = cpus.topology().map_err(text)?;
    let header = madt_table.header;
    let mut report = format!(
        "machine: {} {} (ACPI)\n",
        trimmed(&header.oem_id),
        trimmed(&header.oem_table_id)
    );
    acpi::write_topology_report(&mut report, &cpus, &topology)
        .map_err(|_| String::from("formatting the report failed"))?;
    let warnings = cpus.warnings.iter().map(ToString::to_string).collect();
    Ok(Inspection {
        topology,
        report,
        warnings,
    })
}

/// `SMT,CORE[,CLUSTER]` shifts.
fn parse_layout(text: &str) -> Result<ApicIdLayout, String> {
    let numbers: Vec<u32> = text
        .split(',')
        .map(|part| part.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("--apic-layout '{text}': expected SMT,CORE[,CLUSTER] numbers"))?;
    let invalid = || format!("--apic-layout '{text}': need SMT <= CLUSTER <= CORE <= 32");
    match numbers[..] {
        [smt, core] => ApicIdLayout::new(smt, core).ok_or_else(invalid),
        [smt, core, cluster] => ApicIdLayout::new(smt, core)
            .and_then(|layout| layout.with_cluster_shift(cluster))
            .ok_or_else(invalid),
        _ => Err(format!(
            "--apic-layout '{text}': expected two or three numbers"
        )),
    }
}

/// The `--json` object: `{"source": ..., "cpus": [...]}`.
fn to_json(source: &str, topology: &Topology) -> Value {
    let cpus: Vec<Value> = topology
        .cpus()
        .iter()
        .map(|cpu| {
            json!({
                "index": cpu.index,
                "hw_id": format!("{:#x}", cpu.hw_id),
                "socket": cpu.socket,
                "cluster": cpu.cluster,
                "core": cpu.core,
                "thread": cpu.thread,
                "capacity": cpu.capacity,
                "enabled": cpu.enabled,
            })
        })
        .collect();
    json!({ "source": source, "cpus": cpus })
}

/// Runs the `topology` command with the arguments after its name.
pub fn run(args: &[String]) -> ExitCode {
    let mut json_output = false;
    let mut files: Vec<&str> = Vec::new();
    let mut layout = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--json" => json_output = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            option @ ("--pptt" | "--apic-layout") => {
                let Some(value) = iter.next() else {
                    eprintln!("topology: {option} needs a value\n{USAGE}");
                    return ExitCode::from(2);
                };
                if option == "--pptt" {
                    files.push(value);
                } else {
                    match parse_layout(value) {
                        Ok(parsed) => layout = Some(parsed),
                        Err(message) => {
                            eprintln!("topology: {message}");
                            return ExitCode::from(2);
                        }
                    }
                }
            }
            other if other.starts_with('-') || files.len() == 2 => {
                eprintln!("topology: unexpected argument '{other}'\n{USAGE}");
                return ExitCode::from(2);
            }
            other => files.push(other),
        }
    }
    let Some(&file) = files.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut contents = Vec::new();
    for path in &files {
        match std::fs::read(path) {
            Ok(bytes) => contents.push(bytes),
            Err(error) => {
                eprintln!("topology: cannot read {path}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let slices: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
    let inspection = match inspect_files(&slices, layout) {
        Ok(inspection) => inspection,
        Err(message) => {
            eprintln!("topology: {}: {message}", files.join(" + "));
            return ExitCode::FAILURE;
        }
    };
    if json_output {
        for warning in &inspection.warnings {
            eprintln!("warning: {warning}");
        }
        println!("{}", to_json(file, &inspection.topology));
    } else {
        print!("{}", inspection.report);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        format!(
            "{}/../../shared/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    fn json_for(name: &str) -> Value {
        let path = fixture(name);
        let bytes = std::fs::read(&path).expect("fixture is readable");
        let inspection = inspect(&bytes).expect("fixture parses");
        // Round-trip through text, as a user of `--json` would read it.
        serde_json::from_str(&to_json(&path, &inspection.topology).to_string()).expect("valid JSON")
    }

    fn field(cpu: &Value, name: &str) -> u64 {
        cpu[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} missing in {cpu}"))
    }

    #[test]
    fn rk3399_json_has_two_clusters_with_capacities() {
        let value = json_for("dtb/rk3399-rockpro64.dtb");
        assert!(
            value["source"]
                .as_str()
                .unwrap()
                .ends_with("rk3399-rockpro64.dtb")
        );
        assert_eq!(
            value.as_object().unwrap().len(),
            2,
            "exactly source and cpus: {value}"
        );
        let cpus = value["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 6);
        let hw_ids: Vec<&str> = cpus.iter().map(|c| c["hw_id"].as_str().unwrap()).collect();
        assert_eq!(hw_ids, ["0x0", "0x1", "0x2", "0x3", "0x100", "0x101"]);
        for (index, cpu) in cpus.iter().enumerate() {
            assert_eq!(field(cpu, "index"), index as u64);
            assert_eq!(field(cpu, "socket"), 0);
            assert_eq!(field(cpu, "thread"), 0);
            assert_eq!(cpu["enabled"], Value::Bool(true));
        }
        let clusters: Vec<u64> = cpus.iter().map(|c| field(c, "cluster")).collect();
        assert_eq!(clusters, [0, 0, 0, 0, 1, 1]);
        let cores: Vec<u64> = cpus.iter().map(|c| field(c, "core")).collect();
        assert_eq!(cores, [0, 1, 2, 3, 0, 1]);
        let capacities: Vec<u64> = cpus.iter().map(|c| field(c, "capacity")).collect();
        assert_eq!(capacities, [485, 485, 485, 485, 1024, 1024]);
    }

    #[test]
    fn rpi4_json_capacity_is_null() {
        let value = json_for("dtb/bcm2711-rpi-4-b.dtb");
        let cpus = value["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 4);
        for (index, cpu) in cpus.iter().enumerate() {
            assert!(cpu["capacity"].is_null(), "{cpu}");
            assert_eq!(cpu["hw_id"], Value::String(format!("{index:#x}")));
            assert_eq!(field(cpu, "cluster"), 0);
            assert_eq!(field(cpu, "core"), index as u64);
        }
    }

    #[test]
    fn smt_json_has_threads_and_sockets() {
        let value = json_for("qemu/qemu-virt-smp16-smt.dtb");
        let cpus = value["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 16);
        // cpu-map: socket{0,1}/cluster{0,1}/core{0,1}/thread{0,1} point at cpu@0..cpu@15 in order.
        for (index, cpu) in cpus.iter().enumerate() {
            let i = index as u64;
            assert_eq!(
                [
                    field(cpu, "socket"),
                    field(cpu, "cluster"),
                    field(cpu, "core"),
                    field(cpu, "thread")
                ],
                [i / 8, (i / 4) % 2, (i / 2) % 2, i % 2],
                "cpu {index}"
            );
        }
    }

    #[test]
    fn text_report_marks_big_and_little() {
        let bytes = std::fs::read(fixture("dtb/juno-r2.dtb")).unwrap();
        let report = inspect(&bytes).unwrap().report;
        assert!(report.contains("big.LITTLE"), "{report}");
        let line = |mpidr: &str| {
            report
                .lines()
                .find(|l| l.contains(&format!("mpidr {mpidr} ")))
                .unwrap_or_else(|| panic!("{report}"))
        };
        assert!(line("0x0").contains(" big "), "{report}");
        assert!(line("0x103").contains(" LITTLE "), "{report}");
        assert!(line("0x103").contains("capacity 485"), "{report}");
    }

    #[test]
    fn unknown_files_are_rejected() {
        let error = inspect(b"hello, world, this is not firmware").unwrap_err();
        assert!(error.starts_with("neither a device tree"), "{error}");
        let fadt_only = inspect(b"FACP and nothing else, far too short").unwrap_err();
        assert!(fadt_only.contains("no MADT"), "{fadt_only}");
    }

    fn read(name: &str) -> Vec<u8> {
        std::fs::read(fixture(name)).expect("fixture is readable")
    }

    fn acpi_json(files: &[&[u8]], layout: Option<ApicIdLayout>) -> Value {
        let inspection = inspect_files(files, layout).expect("tables parse");
        serde_json::from_str(&to_json("acpi", &inspection.topology).to_string())
            .expect("valid JSON")
    }

    #[test]
    fn ampere_madt_and_pptt_json() {
        let madt = read("acpi/arm-ampere-altra-ava.apic.dat");
        let pptt = read("acpi/arm-ampere-altra-ava.pptt.dat");
        // Either order: files are told apart by signature.
        for files in [[&madt[..], &pptt[..]], [&pptt[..], &madt[..]]] {
            let value = acpi_json(&files, None);
            let cpus = value["cpus"].as_array().unwrap();
            assert_eq!(cpus.len(), 32);
            // The first GICC in the .dsl: MPIDR 0x100000.
            assert_eq!(cpus[0]["hw_id"], Value::String(String::from("0x100000")));
            assert_eq!(cpus[16]["hw_id"], Value::String(String::from("0x100100")));
            let mut clusters: Vec<u64> = cpus.iter().map(|c| field(c, "cluster")).collect();
            clusters.sort_unstable();
            clusters.dedup();
            assert_eq!(clusters, (0..16).collect::<Vec<u64>>());
            for cpu in cpus {
                assert_eq!(field(cpu, "socket"), 0);
                assert_eq!(field(cpu, "thread"), 0);
                assert!(cpu["capacity"].is_null());
                let mpidr = u64::from_str_radix(&cpu["hw_id"].as_str().unwrap()[2..], 16).unwrap();
                assert_eq!(field(cpu, "core"), (mpidr >> 8) & 0xff, "{cpu}");
            }
        }
        let report = inspect_files(&[&madt, &pptt], None).unwrap().report;
        assert!(
            report.starts_with("machine: Ampere Altra (ACPI)\n"),
            "{report}"
        );
        assert!(
            report.contains("16 cluster(s), 32 core(s); ACPI MADT, from the PPTT"),
            "{report}"
        );
    }

    #[test]
    fn x86_madt_json_has_apic_ids_and_threads() {
        let madt = read("acpi/x86-intel-asus-z490f.apic.dat");
        let value = acpi_json(&[&madt], None);
        let cpus = value["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 20);
        // The .dsl lists APIC ids 0, 2, ..., 18, then 1, 3, ..., 19.
        for (index, cpu) in cpus.iter().enumerate() {
            let (id, core, thread) = if index < 10 {
                (2 * index, index, 0)
            } else {
                (2 * (index - 10) + 1, index - 10, 1)
            };
            assert_eq!(cpu["hw_id"], Value::String(format!("{id:#x}")));
            assert_eq!(
                (field(cpu, "core"), field(cpu, "thread")),
                (core as u64, thread)
            );
        }
        let report = inspect_files(&[&madt], None).unwrap().report;
        assert!(
            report.contains("      thread 1: cpu 10  apic 0x1"),
            "{report}"
        );
    }

    #[test]
    fn apic_layout_option_splits_sockets() {
        let madt = read("acpi/x86-intel-4s-dell-r820.apic.dat");
        let value = acpi_json(&[&madt], Some(parse_layout("1,5").unwrap()));
        let cpus = value["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 80);
        let sockets: Vec<u64> = cpus[..4].iter().map(|c| field(c, "socket")).collect();
        assert_eq!(sockets, [0, 1, 2, 3]);
        assert!(parse_layout("5,1").is_err());
        assert!(parse_layout("1").is_err());
        assert!(parse_layout("1,x").is_err());
        assert_eq!(parse_layout("1,7,3").unwrap().cluster_shift, Some(3));
    }

    /// The text `acpidump` prints (same layout as the niyas-sait/acpi logs).
    fn acpidump_text(tables: &[(&str, &[u8])]) -> String {
        let mut text = String::new();
        for (name, bytes) in tables {
            text += &format!("{name} @ 0x0000000000000000\n");
            for (row, chunk) in bytes.chunks(16).enumerate() {
                let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02X}")).collect();
                let ascii: String = chunk
                    .iter()
                    .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
                    .collect();
                text += &format!("    {:04X}: {:<47}  {ascii}\n", row * 16, hex.join(" "));
            }
            text += "\n";
        }
        text
    }

    #[test]
    fn acpidump_text_gives_the_same_topology_as_the_raw_tables() {
        let madt = read("acpi/arm-nxp-lx2160a-honeycomb.apic.dat");
        let pptt = read("acpi/arm-nxp-lx2160a-honeycomb.pptt.dat");
        let text = acpidump_text(&[
            ("MCFG", b"MCFG not parsed"),
            ("APIC", &madt),
            ("PPTT", &pptt),
        ]);
        assert_eq!(firmware_kind(text.as_bytes()), FirmwareKind::AcpidumpText);
        let from_text = acpi_json(&[text.as_bytes()], None);
        assert_eq!(from_text, acpi_json(&[&madt, &pptt], None));
        let cpus = from_text["cpus"].as_array().unwrap();
        assert_eq!(cpus.len(), 16);
        for (index, cpu) in cpus.iter().enumerate() {
            assert_eq!(field(cpu, "cluster"), index as u64 / 2);
            assert_eq!(field(cpu, "core"), index as u64 % 2);
        }
        // A damaged hex line is reported with its line number.
        let damaged = text.replacen("    0010: ", "    0013: ", 2);
        let error = inspect(damaged.as_bytes()).unwrap_err();
        assert!(error.starts_with("acpidump text line"), "{error}");
    }

    #[test]
    fn bad_acpi_tables_report_the_parser_error() {
        let mut madt = read("acpi/arm-qcom-8cx-surface-pro-x.apic.dat");
        madt[60] = madt[60].wrapping_add(1);
        let error = inspect(&madt).unwrap_err();
        assert_eq!(error, Madt::parse(&madt).unwrap_err().to_string());
        assert!(error.contains("APIC: bad checksum"), "{error}");
        let madt = read("acpi/arm-qcom-8cx-surface-pro-x.apic.dat");
        let mut pptt = read("acpi/arm-qcom-8cx-surface-pro-x.pptt.dat");
        pptt.truncate(200);
        let error = inspect_files(&[&madt, &pptt], None).unwrap_err();
        assert!(
            error.starts_with("PPTT:") && error.contains("truncated"),
            "{error}"
        );
        let dtb = read("dtb/juno-r2.dtb");
        assert!(inspect_files(&[&madt, &dtb], None).is_err());
        assert!(inspect_files(&[&dtb, &madt], None).is_err());
    }

    #[test]
    fn corrupt_dtb_reports_the_parser_error() {
        let mut bytes = std::fs::read(fixture("dtb/juno-r2.dtb")).unwrap();
        bytes.truncate(1000);
        let error = inspect(&bytes).unwrap_err();
        assert_eq!(error, dt::parse(&bytes).unwrap_err().to_string());
        assert!(error.contains("truncated"), "{error}");
    }

    #[test]
    fn run_exit_codes() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            run(&args(&[&fixture("dtb/rk3399-rockpro64.dtb"), "--json"])),
            ExitCode::SUCCESS
        );
        let madt = fixture("acpi/arm-ampere-altra-ava.apic.dat");
        let pptt = fixture("acpi/arm-ampere-altra-ava.pptt.dat");
        assert_eq!(run(&args(&[&madt])), ExitCode::SUCCESS);
        assert_eq!(run(&args(&[&madt, &pptt, "--json"])), ExitCode::SUCCESS);
        assert_eq!(run(&args(&[&madt, "--pptt", &pptt])), ExitCode::SUCCESS);
        assert_eq!(
            run(&args(&[
                &fixture("acpi/x86-intel-4s-dell-r820.apic.dat"),
                "--apic-layout",
                "1,5"
            ])),
            ExitCode::SUCCESS
        );
        assert_eq!(
            run(&args(&[&madt, "--apic-layout", "9,1"])),
            ExitCode::from(2)
        );
        assert_eq!(run(&args(&[&madt, "--pptt"])), ExitCode::from(2));
        assert_eq!(run(&args(&[&madt, &pptt, &pptt])), ExitCode::from(2));
        // A PPTT alone has no CPUs.
        assert_eq!(run(&args(&[&pptt])), ExitCode::FAILURE);
        assert_eq!(run(&args(&["/nonexistent/file.dtb"])), ExitCode::FAILURE);
        assert_eq!(run(&args(&[])), ExitCode::from(2));
    }
}
