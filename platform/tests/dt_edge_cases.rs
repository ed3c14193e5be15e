//! `platform::dt` on hand-made device trees: every kind of bad input gives one
//! clear error or warning naming the node and property, and the rest goes on.

use platform::dt::{
    self, DtError, DtWarning, EnableMethod, FallbackReason, MachineDescription, StructureProblem,
    TopologySource,
};

/// A minimal FDT writer (DTSpec v0.4 ch. 5, version 17) for building test blobs.
mod fdt_writer {
    /// Builds the structure and strings blocks node by node.
    #[derive(Default)]
    pub struct Writer {
        structure: Vec<u8>,
        strings: Vec<u8>,
        pub reservations: Vec<(u64, u64)>,
    }

    impl Writer {
        fn token(&mut self, token: u32) {
            self.structure.extend_from_slice(&token.to_be_bytes());
        }

        fn pad(&mut self) {
            while !self.structure.len().is_multiple_of(4) {
                self.structure.push(0);
            }
        }

        pub fn begin(&mut self, name: &str) -> &mut Self {
            self.token(1);
            self.structure.extend_from_slice(name.as_bytes());
            self.structure.push(0);
            self.pad();
            self
        }

        pub fn end(&mut self) -> &mut Self {
            self.token(2);
            self
        }

        pub fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let offset = match self
                .strings
                .windows(name.len() + 1)
                .position(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0)
            {
                Some(offset) => offset,
                None => {
                    let offset = self.strings.len();
                    self.strings.extend_from_slice(name.as_bytes());
                    self.strings.push(0);
                    offset
                }
            };
            self.token(3);
            self.structure
                .extend_from_slice(&(value.len() as u32).to_be_bytes());
            self.structure
                .extend_from_slice(&(offset as u32).to_be_bytes());
            self.structure.extend_from_slice(value);
            self.pad();
            self
        }

        pub fn cells(&mut self, name: &str, cells: &[u32]) -> &mut Self {
            let value: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
            self.prop(name, &value)
        }

        pub fn string(&mut self, name: &str, value: &str) -> &mut Self {
            self.strings_list(name, &[value])
        }

        pub fn strings_list(&mut self, name: &str, values: &[&str]) -> &mut Self {
            let mut bytes = Vec::new();
            for value in values {
                bytes.extend_from_slice(value.as_bytes());
                bytes.push(0);
            }
            self.prop(name, &bytes)
        }

        pub fn empty(&mut self, name: &str) -> &mut Self {
            self.prop(name, &[])
        }

        /// Header, reservation block, structure block (with END), strings block.
        pub fn finish(&mut self) -> Vec<u8> {
            self.token(9);
            let header_len = 40usize;
            let rsvmap_offset = header_len;
            let rsvmap_len = (self.reservations.len() + 1) * 16;
            let struct_offset = rsvmap_offset + rsvmap_len;
            let strings_offset = struct_offset + self.structure.len();
            let total = strings_offset + self.strings.len();
            let mut blob = Vec::with_capacity(total);
            for field in [
                0xd00d_feed,
                total as u32,
                struct_offset as u32,
                strings_offset as u32,
                rsvmap_offset as u32,
                17,
                16,
                0,
                self.strings.len() as u32,
                self.structure.len() as u32,
            ] {
                blob.extend_from_slice(&u32::to_be_bytes(field));
            }
            for &(address, size) in self.reservations.iter().chain([(0, 0)].iter()) {
                blob.extend_from_slice(&address.to_be_bytes());
                blob.extend_from_slice(&size.to_be_bytes());
            }
            blob.extend_from_slice(&self.structure);
            blob.extend_from_slice(&self.strings);
            blob
        }
    }
}

use fdt_writer::Writer;

/// Knobs for the standard test machine.
struct Machine {
    gic_compatible: &'static str,
    memory: bool,
    psci_method: &'static str,
    stdout_path: &'static str,
}

impl Default for Machine {
    fn default() -> Self {
        Self {
            gic_compatible: "arm,gic-v3",
            memory: true,
            psci_method: "smc",
            stdout_path: "serial0:115200n8",
        }
    }
}

/// Writes one cpu node.
fn cpu(w: &mut Writer, reg: u32, phandle: u32, method: &str) {
    w.begin(&format!("cpu@{reg:x}"))
        .string("device_type", "cpu")
        .string("compatible", "arm,cortex-a53")
        .cells("reg", &[reg])
        .string("enable-method", method)
        .cells("phandle", &[phandle])
        .end();
}

/// A QEMU-virt-like machine whose `/cpus` children come from `cpus`.
fn machine(options: &Machine, cpus: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::default();
    w.reservations.push((0x4800_0000, 0x1000));
    w.begin("")
        .cells("#address-cells", &[2])
        .cells("#size-cells", &[2])
        .cells("interrupt-parent", &[1]);
    w.string("model", "test machine");
    w.begin("chosen")
        .string("bootargs", "console=hvc0 quiet")
        .string("stdout-path", options.stdout_path)
        .end();
    w.begin("aliases").string("serial0", "/pl011@9000000").end();
    w.begin("psci")
        .strings_list("compatible", &["arm,psci-1.0", "arm,psci-0.2"])
        .string("method", options.psci_method)
        .end();
    if options.memory {
        w.begin("memory@40000000")
            .string("device_type", "memory")
            .cells("reg", &[0, 0x4000_0000, 0, 0x1000_0000])
            .end();
    }
    w.begin("reserved-memory")
        .cells("#address-cells", &[2])
        .cells("#size-cells", &[2])
        .empty("ranges");
    w.begin("secmon@4ff00000")
        .cells("reg", &[0, 0x4ff0_0000, 0, 0x10_0000])
        .empty("no-map")
        .end();
    w.begin("cma").cells("size", &[0, 0x100_0000]).end();
    w.end();
    w.begin("intc@8000000")
        .string("compatible", options.gic_compatible)
        .empty("interrupt-controller")
        .cells("#interrupt-cells", &[3])
        .cells(
            "reg",
            &[0, 0x800_0000, 0, 0x1_0000, 0, 0x80a_0000, 0, 0xf6_0000],
        )
        .cells("interrupts", &[1, 9, 4])
        .cells("phandle", &[1])
        .end();
    w.begin("timer")
        .string("compatible", "arm,armv8-timer")
        .cells(
            "interrupts",
            &[1, 13, 0xf04, 1, 14, 0xf04, 1, 11, 0xf04, 1, 10, 0xf04],
        );
    w.end();
    w.begin("pl011@9000000")
        .strings_list("compatible", &["arm,pl011", "arm,primecell"])
        .cells("reg", &[0, 0x900_0000, 0, 0x1000])
        .end();
    w.begin("cpus")
        .cells("#address-cells", &[1])
        .cells("#size-cells", &[0]);
    cpus(&mut w);
    w.end();
    w.end();
    w.finish()
}

fn four_cpus(w: &mut Writer) {
    for (i, reg) in [0x0, 0x1, 0x100, 0x101].into_iter().enumerate() {
        cpu(w, reg, 0x10 + i as u32, "psci");
    }
}

/// cpu-map: cluster0 = phandles 0x10, 0x11; cluster1 = `second` (two phandles).
fn cpu_map(w: &mut Writer, second: [u32; 2]) {
    w.begin("cpu-map");
    for (cluster, phandles) in [[0x10, 0x11], second].into_iter().enumerate() {
        w.begin(&format!("cluster{cluster}"));
        for (core, phandle) in phandles.into_iter().enumerate() {
            w.begin(&format!("core{core}"))
                .cells("cpu", &[phandle])
                .end();
        }
        w.end();
    }
    w.end();
}

fn parse(blob: &[u8]) -> MachineDescription {
    dt::parse(blob).unwrap_or_else(|error| panic!("parse failed: {error}"))
}

fn positions(description: &MachineDescription) -> Vec<(u32, u32, u32, u32)> {
    let topology = description.topology().expect("topology");
    topology
        .cpus()
        .iter()
        .map(|c| (c.socket, c.cluster, c.core, c.thread))
        .collect()
}

#[test]
fn good_machine_parses_everything_without_warnings() {
    let description = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        cpu_map(w, [0x12, 0x13]);
    }));
    assert!(
        description.warnings.is_empty(),
        "{:?}",
        description.warnings
    );
    assert_eq!(description.topology_source, TopologySource::CpuMap);
    assert_eq!(
        positions(&description),
        [(0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 0), (0, 1, 1, 0)]
    );
    assert_eq!(description.bootargs.as_deref(), Some("console=hvc0 quiet"));
    assert_eq!(description.model.as_deref(), Some("test machine"));
    assert_eq!(
        description.memory,
        [dt::MemoryRegion {
            base: 0x4000_0000,
            size: 0x1000_0000
        }]
    );
    let reserved: Vec<_> = description
        .reserved
        .iter()
        .map(|r| (r.region.base, r.path.as_deref(), r.no_map))
        .collect();
    assert_eq!(
        reserved,
        [
            (0x4800_0000, None, false),
            (0x4ff0_0000, Some("/reserved-memory/secmon@4ff00000"), true)
        ]
    );
    assert_eq!(
        description.console.as_ref().unwrap().region.base,
        0x900_0000
    );
    assert_eq!(description.check_bootable(), Ok(()));
}

#[test]
fn cpu_without_reg_is_skipped_with_a_warning() {
    let description = parse(&machine(&Machine::default(), |w| {
        cpu(w, 0, 0x10, "psci");
        w.begin("cpu@1")
            .string("device_type", "cpu")
            .string("enable-method", "psci")
            .end();
        cpu(w, 2, 0x12, "psci");
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::CpuWithoutReg {
            path: "/cpus/cpu@1".into()
        }]
    );
    assert_eq!(
        description.warnings[0].to_string(),
        "/cpus/cpu@1: cpu node has no reg; CPU skipped"
    );
    let topology = description.topology().unwrap();
    assert_eq!(
        topology.cpus().iter().map(|c| c.hw_id).collect::<Vec<_>>(),
        [0, 2]
    );
}

#[test]
fn cpu_with_wrong_reg_size_is_skipped() {
    let description = parse(&machine(&Machine::default(), |w| {
        cpu(w, 0, 0x10, "psci");
        w.begin("cpu@1")
            .string("device_type", "cpu")
            .cells("reg", &[0, 1])
            .string("enable-method", "psci")
            .end();
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::CpuBadReg {
            path: "/cpus/cpu@1".into(),
            length: 8,
            address_cells: 1
        }]
    );
    assert_eq!(description.topology().unwrap().len(), 1);
}

#[test]
fn missing_cpu_map_phandle_falls_back_to_aff1_clusters() {
    let description = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        cpu_map(w, [0x12, 0x99]);
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::CpuMapMissingPhandle {
            path: "/cpus/cpu-map/cluster1/core1".into(),
            phandle: 0x99
        }]
    );
    let message = description.warnings[0].to_string();
    assert!(
        message.contains("/cpus/cpu-map/cluster1/core1") && message.contains("0x99"),
        "{message}"
    );
    assert_eq!(
        description.topology_source,
        TopologySource::MpidrFallback {
            reason: FallbackReason::InvalidCpuMap
        }
    );
    assert_eq!(
        positions(&description),
        [(0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 0), (0, 1, 1, 0)]
    );
}

#[test]
fn cpu_map_pointing_at_a_non_cpu_falls_back() {
    let description = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        cpu_map(w, [0x12, 0x1]); // phandle 1 is the GIC
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::CpuMapNotACpu {
            path: "/cpus/cpu-map/cluster1/core1".into(),
            target: "/intc@8000000".into()
        }]
    );
    assert!(matches!(
        description.topology_source,
        TopologySource::MpidrFallback { .. }
    ));
}

#[test]
fn cpu_map_listing_a_cpu_twice_or_missing_one_falls_back() {
    let twice = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        cpu_map(w, [0x12, 0x12]);
    }));
    assert_eq!(
        twice.warnings,
        [DtWarning::CpuMapDuplicate {
            path: "/cpus/cpu-map/cluster1/core1".into(),
            cpu: "/cpus/cpu@100".into()
        }]
    );
    let missing = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        cpu(w, 0x102, 0x14, "psci");
        cpu_map(w, [0x12, 0x13]);
    }));
    assert_eq!(
        missing.warnings,
        [DtWarning::CpuMapIncomplete {
            cpu: "/cpus/cpu@102".into()
        }]
    );
    // Fallback: cpu@102 joins the Aff1 = 1 cluster.
    assert_eq!(positions(&missing)[4], (0, 1, 2, 0));
}

#[test]
fn malformed_cpu_map_core_falls_back() {
    let description = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        w.begin("cpu-map")
            .begin("cluster0")
            .begin("core0")
            .end()
            .end()
            .end();
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::CpuMapMalformed {
            path: "/cpus/cpu-map/cluster0/core0".into(),
            problem: "core has neither a cpu property nor thread nodes"
        }]
    );
}

#[test]
fn nested_clusters_flatten_to_the_innermost() {
    let description = parse(&machine(&Machine::default(), |w| {
        four_cpus(w);
        w.begin("cpu-map").begin("cluster0");
        for (inner, phandles) in [[0x10, 0x11], [0x12, 0x13]].into_iter().enumerate() {
            w.begin(&format!("cluster{inner}"));
            for (core, phandle) in phandles.into_iter().enumerate() {
                w.begin(&format!("core{core}"))
                    .cells("cpu", &[phandle])
                    .end();
            }
            w.end();
        }
        w.end().end();
    }));
    assert!(
        description.warnings.is_empty(),
        "{:?}",
        description.warnings
    );
    assert_eq!(
        positions(&description),
        [(0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 0), (0, 1, 1, 0)]
    );
}

#[test]
fn dynamiq_cpu_map_overrides_aff1_and_threads_are_numbered() {
    // Aff1 = core (DynamIQ), all in one cluster, two threads per core.
    let description = parse(&machine(&Machine::default(), |w| {
        for (i, reg) in [0x000, 0x001, 0x100, 0x101].into_iter().enumerate() {
            cpu(w, reg, 0x10 + i as u32, "psci");
        }
        w.begin("cpu-map").begin("socket0").begin("cluster0");
        for core in 0..2u32 {
            w.begin(&format!("core{core}"));
            for thread in 0..2u32 {
                w.begin(&format!("thread{thread}"))
                    .cells("cpu", &[0x10 + core * 2 + thread])
                    .end();
            }
            w.end();
        }
        w.end().end().end();
    }));
    assert!(
        description.warnings.is_empty(),
        "{:?}",
        description.warnings
    );
    assert_eq!(
        positions(&description),
        [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 1, 1)]
    );
}

#[test]
fn unknown_enable_method_is_a_warning_naming_the_cpu() {
    let description = parse(&machine(&Machine::default(), |w| {
        cpu(w, 0, 0x10, "psci");
        cpu(w, 1, 0x11, "acme,magic-wand");
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::UnknownEnableMethod {
            path: "/cpus/cpu@1".into(),
            method: "acme,magic-wand".into()
        }]
    );
    assert_eq!(
        description.cpus[1].enable_method,
        EnableMethod::Unsupported("acme,magic-wand".into())
    );
    assert!(
        description.warnings[0]
            .to_string()
            .contains("\"acme,magic-wand\"")
    );
}

#[test]
fn spin_table_without_release_address_is_a_warning() {
    let description = parse(&machine(&Machine::default(), |w| {
        cpu(w, 0, 0x10, "spin-table");
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::SpinTableWithoutReleaseAddress {
            path: "/cpus/cpu@0".into()
        }]
    );
}

#[test]
fn duplicate_mpidr_skips_the_second_cpu() {
    let description = parse(&machine(&Machine::default(), |w| {
        cpu(w, 0, 0x10, "psci");
        cpu(w, 1, 0x11, "psci");
        w.begin("cpu@2")
            .string("device_type", "cpu")
            .cells("reg", &[1])
            .string("enable-method", "psci")
            .end();
    }));
    assert_eq!(
        description.warnings,
        [DtWarning::DuplicateMpidr {
            path: "/cpus/cpu@2".into(),
            first: "/cpus/cpu@1".into(),
            mpidr: 1
        }]
    );
    assert_eq!(description.topology().unwrap().len(), 2);
}

#[test]
fn disabled_cpus_get_no_index() {
    let description = parse(&machine(&Machine::default(), |w| {
        cpu(w, 0, 0x10, "psci");
        w.begin("cpu@1")
            .string("device_type", "cpu")
            .cells("reg", &[1])
            .string("enable-method", "psci")
            .string("status", "disabled")
            .end();
        cpu(w, 2, 0x12, "psci");
    }));
    let topology = description.topology().unwrap();
    assert_eq!(
        topology
            .cpus()
            .iter()
            .map(|c| (c.index, c.hw_id, c.core))
            .collect::<Vec<_>>(),
        [(0, 0, 0), (1, 2, 1)]
    );
    let mut report = String::new();
    dt::write_topology_report(&mut report, &description, &topology).unwrap();
    assert!(
        report.contains("not available (status): /cpus/cpu@1 mpidr 0x1"),
        "{report}"
    );
}

#[test]
fn two_cell_reg_keeps_aff3() {
    let mut w = Writer::default();
    w.begin("")
        .begin("cpus")
        .cells("#address-cells", &[2])
        .cells("#size-cells", &[0]);
    w.begin("cpu@100000000")
        .string("device_type", "cpu")
        .cells("reg", &[1, 0])
        .string("enable-method", "psci")
        .end();
    w.begin("cpu@ff00000000")
        .string("device_type", "cpu")
        .cells("reg", &[0xff01, 0])
        .string("enable-method", "psci")
        .end();
    w.end().end();
    let description = parse(&w.finish());
    assert_eq!(
        description.cpus.iter().map(|c| c.mpidr).collect::<Vec<_>>(),
        [0x1_0000_0000]
    );
    assert_eq!(
        description.warnings[0],
        DtWarning::CpuBadMpidr {
            path: "/cpus/cpu@ff00000000".into(),
            value: 0xff01_0000_0000
        }
    );
}

#[test]
fn unknown_gic_is_named_and_blocks_boot() {
    let options = Machine {
        gic_compatible: "arm,gic-v9000",
        ..Machine::default()
    };
    let description = parse(&machine(&options, four_cpus));
    assert_eq!(
        description.warnings,
        [DtWarning::UnknownGic {
            path: "/intc@8000000".into(),
            compatible: "arm,gic-v9000".into()
        }]
    );
    assert!(description.gic.is_none());
    assert_eq!(description.check_bootable(), Err(DtError::NoGic));
    // The timer still decodes: #interrupt-cells comes from the (unknown) controller.
    assert_eq!(
        description
            .timer
            .unwrap()
            .hypervisor_physical
            .unwrap()
            .intid(),
        26
    );
}

#[test]
fn no_memory_is_a_warning_and_blocks_boot() {
    let description = parse(&machine(
        &Machine {
            memory: false,
            ..Machine::default()
        },
        four_cpus,
    ));
    assert_eq!(description.warnings, [DtWarning::NoMemoryNode]);
    assert_eq!(description.check_bootable(), Err(DtError::NoMemory));
    assert_eq!(
        DtError::NoMemory.to_string(),
        "device tree describes no memory (/memory reg)"
    );
}

#[test]
fn bad_psci_method_and_missing_console_are_warnings() {
    let options = Machine {
        psci_method: "carrier-pigeon",
        stdout_path: "serial7",
        ..Machine::default()
    };
    let description = parse(&machine(&options, four_cpus));
    assert_eq!(
        description.warnings,
        [
            DtWarning::PsciBadMethod {
                path: "/psci".into(),
                method: "carrier-pigeon".into()
            },
            DtWarning::PsciMissing,
            DtWarning::ConsoleNotFound {
                stdout_path: "serial7".into()
            },
        ]
    );
    // Falls back to the first arm,pl011.
    assert_eq!(description.console.unwrap().path, "/pl011@9000000");
}

#[test]
fn untranslatable_reg_is_reported() {
    let mut w = Writer::default();
    w.begin("")
        .cells("#address-cells", &[1])
        .cells("#size-cells", &[1]);
    w.begin("cpus")
        .cells("#address-cells", &[1])
        .cells("#size-cells", &[0]);
    cpu(&mut w, 0, 0x10, "psci");
    w.end();
    // A bus without `ranges`: its children's addresses are not CPU addresses.
    w.begin("bus")
        .cells("#address-cells", &[1])
        .cells("#size-cells", &[1]);
    w.begin("serial@1000")
        .string("compatible", "arm,pl011")
        .cells("reg", &[0x1000, 0x100])
        .end();
    w.end().end();
    let description = parse(&w.finish());
    assert!(
        description.warnings.contains(&DtWarning::BadReg {
            path: "/bus/serial@1000".into(),
            property: "reg"
        }),
        "{:?}",
        description.warnings
    );
    assert!(description.console.is_none());
}

#[test]
fn fatal_errors() {
    let good = machine(&Machine::default(), four_cpus);
    assert_eq!(
        dt::parse(&good[..20]),
        Err(DtError::Truncated {
            needed: 40,
            available: 20
        })
    );
    assert_eq!(
        dt::parse(&good[..good.len() - 1]),
        Err(DtError::Truncated {
            needed: good.len(),
            available: good.len() - 1
        })
    );
    let mut bad_magic = good.clone();
    bad_magic[0] = 0x7f;
    assert_eq!(
        dt::parse(&bad_magic),
        Err(DtError::BadMagic { found: 0x7f0d_feed })
    );
    let mut old = good.clone();
    old[20..24].copy_from_slice(&1u32.to_be_bytes());
    assert!(matches!(
        dt::parse(&old),
        Err(DtError::UnsupportedVersion { version: 1, .. })
    ));
    // Replace the root's BEGIN_NODE token (first structure word) with a bogus one.
    let struct_offset = u32::from_be_bytes(good[8..12].try_into().unwrap()) as usize;
    let mut bad_token = good.clone();
    bad_token[struct_offset..struct_offset + 4].copy_from_slice(&7u32.to_be_bytes());
    let error = dt::parse(&bad_token).unwrap_err();
    assert_eq!(
        error,
        DtError::Structure {
            offset: struct_offset,
            problem: StructureProblem::UnknownToken { token: 7 }
        }
    );
    assert!(error.to_string().contains("unknown token 0x7"), "{error}");
    // A longer buffer than totalsize is fine (the loader may pass a whole page).
    let mut padded = good.clone();
    padded.extend_from_slice(&[0xff; 100]);
    assert!(dt::parse(&padded).is_ok());
}

#[test]
fn no_cpus_or_no_usable_cpu_is_fatal() {
    let mut w = Writer::default();
    w.begin("").begin("memory@0").end().end();
    assert_eq!(dt::parse(&w.finish()), Err(DtError::NoCpusNode));
    let only_disabled = machine(&Machine::default(), |w| {
        w.begin("cpu@0")
            .string("device_type", "cpu")
            .cells("reg", &[0])
            .string("status", "disabled")
            .end();
    });
    assert_eq!(dt::parse(&only_disabled), Err(DtError::NoUsableCpu));
}
