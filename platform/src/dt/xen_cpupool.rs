//! Xen's boot-time cpupool binding (`docs/misc/arm/device-tree/cpupools.txt`):
//!
//! ```dts
//! chosen {
//!     cpupool_a {
//!         compatible = "xen,cpupool";
//!         cpupool-cpus = <&a53_1 &a53_2>;
//!     };
//!     cpupool_b {
//!         compatible = "xen,cpupool";
//!         cpupool-cpus = <&a72_1 &a72_2>;
//!         cpupool-sched = "credit2";
//!     };
//! };
//! ```
//!
//! Each `xen,cpupool` child of `/chosen` is a pool: `cpupool-cpus` lists cpu
//! nodes by phandle (mandatory, non-empty), `cpupool-sched` names the scheduler
//! (optional: the default one). Xen's rules, kept here: the pool holding the boot
//! CPU (logical CPU 0) becomes Pool-0 and comes first; CPUs no node assigns go to
//! one more, implicit pool (Pool-0 if it holds the boot CPU). A phandle that is
//! not an available cpu node, or a CPU listed twice, is a [`CpupoolWarning`] and
//! is left out, rather than stopping the boot as Xen does: the rest of the
//! partitioning is still usable and the log says what was dropped.
//!
//! The result is converted to the hypervisor's pool configuration by
//! `hv::config::pool_from_xen`.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use sched::CpuSet;

use super::MachineDescription;
use super::error::DtError;
use super::fdt::Tree;

/// The compatible string of a cpupool node.
pub const COMPATIBLE: &str = "xen,cpupool";

/// One pool from the device tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XenCpupool {
    /// The node name (`cpupool_a`), or `Pool-0`/`unassigned` for the implicit pool.
    pub name: String,
    /// The node path; empty for the implicit pool.
    pub path: String,
    /// The node's own phandle, which dom0less domain nodes use in `domain-cpupool`.
    pub phandle: Option<u32>,
    /// Logical CPU indices (positions in [`MachineDescription::logical_cpus`]).
    pub cpus: CpuSet,
    /// `cpupool-sched`, if given.
    pub scheduler: Option<String>,
    /// Made up for the CPUs no node assigned (no node in the tree).
    pub implicit: bool,
}

/// Something wrong in a cpupool node that was worked around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpupoolWarning {
    /// `cpupool-cpus` is missing, empty or not a list of cells: the node is skipped.
    NoCpus {
        /// The cpupool node.
        path: String,
    },
    /// A phandle that names no node.
    UnknownPhandle {
        /// The cpupool node.
        path: String,
        /// The phandle.
        phandle: u32,
    },
    /// A phandle whose node is not a usable CPU (not a cpu node, or disabled).
    NotAnAvailableCpu {
        /// The cpupool node.
        path: String,
        /// The node the phandle names.
        target: String,
    },
    /// A CPU already in an earlier pool (or twice in this one).
    CpuInTwoPools {
        /// The cpupool node.
        path: String,
        /// Logical CPU index.
        cpu: usize,
        /// The pool that keeps it.
        kept_by: String,
    },
    /// `cpupool-sched` is not a string.
    BadScheduler {
        /// The cpupool node.
        path: String,
    },
    /// A `xen,domain` node's `domain-cpupool` names no cpupool node.
    BadDomainCpupool {
        /// The domain node.
        path: String,
    },
}

impl fmt::Display for CpupoolWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCpus { path } => {
                write!(f, "{path}: cpupool-cpus missing or empty; cpupool ignored")
            }
            Self::UnknownPhandle { path, phandle } => write!(
                f,
                "{path}: cpupool-cpus: phandle {phandle:#x} names no node; left out"
            ),
            Self::NotAnAvailableCpu { path, target } => write!(
                f,
                "{path}: cpupool-cpus: {target} is not an available cpu; left out"
            ),
            Self::CpuInTwoPools { path, cpu, kept_by } => write!(
                f,
                "{path}: cpupool-cpus: CPU {cpu} is already in {kept_by}; left out"
            ),
            Self::BadScheduler { path } => write!(
                f,
                "{path}: cpupool-sched is not a string; default scheduler used"
            ),
            Self::BadDomainCpupool { path } => write!(
                f,
                "{path}: domain-cpupool names no xen,cpupool node; the domain keeps its config's pool"
            ),
        }
    }
}

/// A dom0less domain node (`xen,domain` under `/chosen`) that names its
/// cpupool with `domain-cpupool = <&pool>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XenDomainPool {
    /// The domain node's name (`domU1`): the config domain of that name is
    /// the one placed.
    pub domain: String,
    /// The node path.
    pub path: String,
    /// The name of the cpupool it names.
    pub pool: String,
}

/// The cpupools of a device tree and what was wrong in them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XenCpupools {
    /// Pools, Pool-0 (the one with the boot CPU) first. Empty when the tree has
    /// no cpupool node (the hypervisor then uses its own config).
    pub pools: Vec<XenCpupool>,
    /// Domain nodes with a `domain-cpupool`, in tree order.
    pub domains: Vec<XenDomainPool>,
    /// Problems worked around, in tree order.
    pub warnings: Vec<CpupoolWarning>,
}

/// Reads the `xen,cpupool` nodes under `/chosen` of `blob`; `machine` is the
/// description [`super::parse`] gave for the same blob (its CPUs give the
/// logical indices).
pub fn parse(blob: &[u8], machine: &MachineDescription) -> Result<XenCpupools, DtError> {
    let tree = Tree::parse(blob)?;
    let mut result = XenCpupools::default();
    let Some(chosen) = tree.find("/chosen") else {
        return Ok(result);
    };
    let children = tree
        .nodes
        .get(chosen)
        .map(|n| n.children.clone())
        .unwrap_or_default();
    for &node in &children {
        if !tree.is_compatible(node, COMPATIBLE) || !tree.is_available(node) {
            continue;
        }
        let path = tree.path(node);
        let phandles = tree
            .cells(node, "cpupool-cpus")
            .filter(|cells| !cells.is_empty());
        let Some(phandles) = phandles else {
            result.warnings.push(CpupoolWarning::NoCpus { path });
            continue;
        };
        let mut cpus = CpuSet::new();
        for phandle in phandles {
            let Some(target) = tree.by_phandle(phandle) else {
                result.warnings.push(CpupoolWarning::UnknownPhandle {
                    path: path.clone(),
                    phandle,
                });
                continue;
            };
            let target_path = tree.path(target);
            let Some(cpu) = machine
                .logical_cpus()
                .position(|cpu| cpu.path == target_path)
            else {
                result.warnings.push(CpupoolWarning::NotAnAvailableCpu {
                    path: path.clone(),
                    target: target_path,
                });
                continue;
            };
            let kept_by = if cpus.contains(cpu) {
                Some(path.clone())
            } else {
                result
                    .pools
                    .iter()
                    .find(|p| p.cpus.contains(cpu))
                    .map(|p| p.path.clone())
            };
            if let Some(kept_by) = kept_by {
                result.warnings.push(CpupoolWarning::CpuInTwoPools {
                    path: path.clone(),
                    cpu,
                    kept_by,
                });
                continue;
            }
            cpus.insert(cpu);
        }
        if cpus.is_empty() {
            result.warnings.push(CpupoolWarning::NoCpus { path });
            continue;
        }
        let scheduler = match tree.property(node, "cpupool-sched") {
            None => None,
            Some(_) => match tree.str_property(node, "cpupool-sched") {
                Some(name) if !name.is_empty() => Some(String::from(name)),
                _ => {
                    result
                        .warnings
                        .push(CpupoolWarning::BadScheduler { path: path.clone() });
                    None
                }
            },
        };
        result.pools.push(XenCpupool {
            name: String::from(tree.nodes[node].name),
            path,
            phandle: tree.u32_property(node, "phandle"),
            cpus,
            scheduler,
            implicit: false,
        });
    }
    if result.pools.is_empty() {
        return Ok(result);
    }
    let assigned = result
        .pools
        .iter()
        .fold(CpuSet::new(), |all, p| all.union(&p.cpus));
    let mut unassigned = CpuSet::new();
    for cpu in 0..machine.logical_cpus().count() {
        if !assigned.contains(cpu) {
            unassigned.insert(cpu);
        }
    }
    if !unassigned.is_empty() {
        let name = if unassigned.contains(0) {
            "Pool-0"
        } else {
            "unassigned"
        };
        result.pools.push(XenCpupool {
            name: String::from(name),
            path: String::new(),
            phandle: None,
            cpus: unassigned,
            scheduler: None,
            implicit: true,
        });
    }
    // The pool with the boot CPU is Pool-0; the others keep tree order.
    if let Some(boot) = result.pools.iter().position(|p| p.cpus.contains(0)) {
        let pool0 = result.pools.remove(boot);
        result.pools.insert(0, pool0);
    }
    for &node in &children {
        if !tree.is_compatible(node, "xen,domain") || !tree.is_available(node) {
            continue;
        }
        let Some(phandle) = tree.u32_property(node, "domain-cpupool") else {
            continue;
        };
        let path = tree.path(node);
        match result.pools.iter().find(|p| p.phandle == Some(phandle)) {
            Some(pool) => result.domains.push(XenDomainPool {
                domain: String::from(tree.nodes[node].name),
                path,
                pool: pool.name.clone(),
            }),
            None => result
                .warnings
                .push(CpupoolWarning::BadDomainCpupool { path }),
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// A minimal FDT writer (DTSpec v0.4 ch. 5, version 17), as in
    /// `tests/dt_edge_cases.rs` (integration-test code cannot be shared with
    /// unit tests).
    #[derive(Default)]
    struct Writer {
        structure: Vec<u8>,
        strings: Vec<u8>,
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
        fn begin(&mut self, name: &str) -> &mut Self {
            self.token(1);
            self.structure.extend_from_slice(name.as_bytes());
            self.structure.push(0);
            self.pad();
            self
        }
        fn end(&mut self) -> &mut Self {
            self.token(2);
            self
        }
        fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let offset = self.strings.len();
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            self.token(3);
            self.structure
                .extend_from_slice(&(value.len() as u32).to_be_bytes());
            self.structure
                .extend_from_slice(&(offset as u32).to_be_bytes());
            self.structure.extend_from_slice(value);
            self.pad();
            self
        }
        fn cells(&mut self, name: &str, cells: &[u32]) -> &mut Self {
            let value: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
            self.prop(name, &value)
        }
        fn string(&mut self, name: &str, value: &str) -> &mut Self {
            let mut bytes = Vec::from(value.as_bytes());
            bytes.push(0);
            self.prop(name, &bytes)
        }
        fn finish(&mut self) -> Vec<u8> {
            self.token(9);
            let struct_offset = 40 + 16;
            let strings_offset = struct_offset + self.structure.len();
            let total = strings_offset + self.strings.len();
            let mut blob = Vec::new();
            for field in [
                0xd00d_feed,
                total as u32,
                struct_offset as u32,
                strings_offset as u32,
                40,
                17,
                16,
                0,
                self.strings.len() as u32,
                self.structure.len() as u32,
            ] {
                blob.extend_from_slice(&u32::to_be_bytes(field));
            }
            blob.extend_from_slice(&[0; 16]);
            blob.extend_from_slice(&self.structure);
            blob.extend_from_slice(&self.strings);
            blob
        }
    }

    /// A machine of `cpus` CPUs (phandle 0x10 + i, MPIDR i; `disabled` has
    /// status = "disabled"), then `/chosen` filled by `chosen`.
    fn machine(cpus: u32, disabled: Option<u32>, chosen: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::default();
        w.begin("")
            .cells("#address-cells", &[2])
            .cells("#size-cells", &[2]);
        w.begin("cpus")
            .cells("#address-cells", &[1])
            .cells("#size-cells", &[0]);
        for i in 0..cpus {
            w.begin(&alloc::format!("cpu@{i}"))
                .string("device_type", "cpu")
                .string("compatible", "arm,cortex-a53")
                .cells("reg", &[i])
                .string("enable-method", "psci")
                .cells("phandle", &[0x10 + i]);
            if disabled == Some(i) {
                w.string("status", "disabled");
            }
            w.end();
        }
        w.end();
        w.begin("memory@40000000")
            .string("device_type", "memory")
            .cells("reg", &[0, 0x4000_0000, 0, 0x4000_0000])
            .end();
        w.begin("uart@9000000")
            .string("compatible", "arm,pl011")
            .cells("reg", &[0, 0x0900_0000, 0, 0x1000])
            .cells("phandle", &[0x99])
            .end();
        w.begin("chosen");
        chosen(&mut w);
        w.end().end();
        w.finish()
    }

    fn parse_both(blob: &[u8]) -> XenCpupools {
        let description = super::super::parse(blob).expect("test machine parses");
        parse(blob, &description).expect("cpupools parse")
    }

    #[test]
    fn two_pools_by_phandle_with_scheduler() {
        let blob = machine(4, None, |w| {
            w.begin("cpupool_a")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x10, 0x11])
                .cells("phandle", &[0x50])
                .end();
            w.begin("cpupool_b")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x12, 0x13])
                .string("cpupool-sched", "null")
                .end();
        });
        let pools = parse_both(&blob);
        assert_eq!(pools.warnings, vec![]);
        assert_eq!(pools.pools.len(), 2);
        let a = &pools.pools[0];
        assert_eq!(a.name, "cpupool_a");
        assert_eq!(a.path, "/chosen/cpupool_a");
        assert_eq!(a.phandle, Some(0x50));
        assert_eq!(a.cpus.iter().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(a.scheduler, None);
        let b = &pools.pools[1];
        assert_eq!(b.cpus.iter().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(b.scheduler.as_deref(), Some("null"));
        assert!(!b.implicit);
    }

    #[test]
    fn boot_cpu_pool_comes_first_and_leftovers_get_a_pool() {
        let blob = machine(4, None, |w| {
            w.begin("rt")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x13])
                .string("cpupool-sched", "rt")
                .end();
            w.begin("main")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x11, 0x10])
                .end();
        });
        let pools = parse_both(&blob);
        let names: Vec<_> = pools.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["main", "rt", "unassigned"]);
        assert_eq!(
            pools.pools[2].cpus.iter().collect::<Vec<_>>(),
            vec![2],
            "CPU 2 was in no pool"
        );
        assert!(pools.pools[2].implicit);

        // Boot CPU unassigned: the implicit pool is Pool-0 and first.
        let blob = machine(3, None, |w| {
            w.begin("p")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x12])
                .end();
        });
        let pools = parse_both(&blob);
        assert_eq!(pools.pools[0].name, "Pool-0");
        assert_eq!(pools.pools[0].cpus.iter().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(pools.pools[1].name, "p");
    }

    #[test]
    fn bad_phandles_are_warned_about_and_left_out() {
        // CPU 1 disabled: logical CPUs are 0 (cpu@0), 1 (cpu@2), 2 (cpu@3).
        let blob = machine(4, Some(1), |w| {
            w.begin("pool")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x10, 0x77, 0x99, 0x11, 0x12, 0x10])
                .end();
            w.begin("empty")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[])
                .end();
            w.begin("stolen")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x12])
                .end();
            w.begin("not-a-pool")
                .string("compatible", "xen,domain")
                .cells("cpupool-cpus", &[0x13])
                .end();
        });
        let pools = parse_both(&blob);
        assert_eq!(
            pools.warnings,
            vec![
                CpupoolWarning::UnknownPhandle {
                    path: "/chosen/pool".into(),
                    phandle: 0x77
                },
                CpupoolWarning::NotAnAvailableCpu {
                    path: "/chosen/pool".into(),
                    target: "/uart@9000000".into()
                },
                CpupoolWarning::NotAnAvailableCpu {
                    path: "/chosen/pool".into(),
                    target: "/cpus/cpu@1".into()
                },
                CpupoolWarning::CpuInTwoPools {
                    path: "/chosen/pool".into(),
                    cpu: 0,
                    kept_by: "/chosen/pool".into()
                },
                CpupoolWarning::NoCpus {
                    path: "/chosen/empty".into()
                },
                CpupoolWarning::CpuInTwoPools {
                    path: "/chosen/stolen".into(),
                    cpu: 1,
                    kept_by: "/chosen/pool".into()
                },
                CpupoolWarning::NoCpus {
                    path: "/chosen/stolen".into()
                },
            ]
        );
        let names: Vec<_> = pools.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["pool", "unassigned"]);
        assert_eq!(pools.pools[0].cpus.iter().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(pools.pools[1].cpus.iter().collect::<Vec<_>>(), vec![2]);
        for warning in &pools.warnings {
            assert!(alloc::format!("{warning}").starts_with("/chosen/"));
        }
    }

    #[test]
    fn dom0less_domains_name_their_pool() {
        let blob = machine(4, None, |w| {
            w.begin("fast")
                .string("compatible", COMPATIBLE)
                .cells("cpupool-cpus", &[0x12, 0x13])
                .cells("phandle", &[0x40])
                .end();
            w.begin("domU1")
                .string("compatible", "xen,domain")
                .cells("domain-cpupool", &[0x40])
                .end();
            w.begin("domU2")
                .string("compatible", "xen,domain")
                .cells("domain-cpupool", &[0x41])
                .end();
            w.begin("domU3").string("compatible", "xen,domain").end();
        });
        let pools = parse_both(&blob);
        assert_eq!(
            pools.domains,
            vec![XenDomainPool {
                domain: "domU1".into(),
                path: "/chosen/domU1".into(),
                pool: "fast".into(),
            }]
        );
        assert_eq!(
            pools.warnings,
            vec![CpupoolWarning::BadDomainCpupool {
                path: "/chosen/domU2".into()
            }]
        );
    }

    #[test]
    fn no_cpupool_nodes_means_no_pools() {
        let blob = machine(2, None, |w| {
            w.string("bootargs", "console=hvc0");
        });
        assert_eq!(parse_both(&blob), XenCpupools::default());
        let mut corrupt = blob.clone();
        corrupt.truncate(30);
        let description = super::super::parse(&blob).unwrap();
        assert!(parse(&corrupt, &description).is_err());
    }
}
