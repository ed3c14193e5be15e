//! `cargo xtask topology FILE [--json]`: print the topology the hypervisor would build.
//!
//! Runs the hypervisor's own parser (`platform::dt`) and topology conversion on the
//! host, and prints the same tree the boot banner prints (or one JSON object).

use std::process::ExitCode;

use platform::dt;
use sched::Topology;
use serde_json::{Value, json};

const USAGE: &str = "usage: cargo xtask topology FILE [--json]";

/// What kind of firmware description a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirmwareKind {
    /// A flattened device tree (magic 0xd00dfeed).
    DeviceTree,
    /// An ACPI table, by its 4-byte signature (MADT = "APIC", PPTT = "PPTT").
    Acpi([u8; 4]),
    /// Anything else.
    Unknown,
}

fn firmware_kind(bytes: &[u8]) -> FirmwareKind {
    if dt::is_fdt(bytes) {
        return FirmwareKind::DeviceTree;
    }
    match bytes.get(..4) {
        Some(signature)
            if [&b"APIC"[..], b"PPTT", b"FACP", b"DSDT", b"SRAT"].contains(&signature) =>
        {
            FirmwareKind::Acpi([signature[0], signature[1], signature[2], signature[3]])
        }
        _ => FirmwareKind::Unknown,
    }
}

/// The result of reading one file: the topology and the text the boot banner prints.
#[derive(Debug)]
struct Inspection {
    topology: Topology,
    report: String,
    warnings: Vec<String>,
}

/// Parses `bytes` the way the hypervisor does. The error is the message the
/// hypervisor would log.
fn inspect(bytes: &[u8]) -> Result<Inspection, String> {
    match firmware_kind(bytes) {
        FirmwareKind::DeviceTree => {
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
        // Extension point: the ACPI parser (MADT + PPTT, and CPUID on x86) plugs in
        // here and returns the same `Inspection`.
        FirmwareKind::Acpi(signature) => Err(format!(
            "ACPI table \"{}\" is not supported yet (ACPI support comes with the x86/Ampere issues)",
            String::from_utf8_lossy(&signature)
        )),
        FirmwareKind::Unknown => Err(String::from(
            "not a device tree (ACPI support comes with the x86/Ampere issues)",
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
    let mut file: Option<&str> = None;
    for arg in args {
        match arg.as_str() {
            "--json" => json_output = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other if other.starts_with('-') || file.is_some() => {
                eprintln!("topology: unexpected argument '{other}'\n{USAGE}");
                return ExitCode::from(2);
            }
            other => file = Some(other),
        }
    }
    let Some(file) = file else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let bytes = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(error) => {
            eprintln!("topology: cannot read {file}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let inspection = match inspect(&bytes) {
        Ok(inspection) => inspection,
        Err(message) => {
            eprintln!("topology: {file}: {message}");
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
    fn non_dtb_files_are_rejected_with_the_acpi_hint() {
        let madt = std::fs::read(fixture("acpi/arm-ampere-altra-ava.apic.dat")).unwrap();
        let error = inspect(&madt).unwrap_err();
        assert!(
            error.contains("ACPI support comes with the x86/Ampere issues"),
            "{error}"
        );
        let error = inspect(b"hello, world, this is not firmware").unwrap_err();
        assert!(error.starts_with("not a device tree"), "{error}");
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
        assert_eq!(
            run(&args(&[&fixture("acpi/arm-ampere-altra-ava.apic.dat")])),
            ExitCode::FAILURE
        );
        assert_eq!(run(&args(&["/nonexistent/file.dtb"])), ExitCode::FAILURE);
        assert_eq!(run(&args(&[])), ExitCode::from(2));
    }
}
