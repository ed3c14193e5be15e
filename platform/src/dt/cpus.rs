//! `/cpus`: cpu nodes, `cpu-map`, the MPIDR fallback and the conversion to a `sched` topology.

use alloc::string::String;
use alloc::vec::Vec;

use crate::position::{PlacedCpu, dense_topology};

use sched::Topology;

use super::error::{DtError, DtWarning};
use super::fdt::{Tree, join_cells};
use super::{
    CpuNode, EnableMethod, FallbackReason, MachineDescription, RawPosition, TopologySource,
};

/// MPIDR_EL1 affinity fields: Aff3 (39:32), Aff2 (23:16), Aff1 (15:8), Aff0 (7:0).
const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

fn is_cpu_node(tree: &Tree<'_>, node: usize) -> bool {
    match tree.str_property(node, "device_type") {
        Some(kind) => kind == "cpu",
        None => tree.base_name(node) == "cpu",
    }
}

/// `#address-cells` of `node` (2 when absent, per DTSpec 2.3.5).
pub(super) fn address_cells(tree: &Tree<'_>, node: usize) -> u32 {
    tree.u32_property(node, "#address-cells").unwrap_or(2)
}

/// Reads the cpu nodes and their positions.
pub(super) fn parse_cpus(
    tree: &Tree<'_>,
    warnings: &mut Vec<DtWarning>,
) -> Result<(Vec<CpuNode>, TopologySource), DtError> {
    let cpus_node = tree.find("/cpus").ok_or(DtError::NoCpusNode)?;
    let cells = address_cells(tree, cpus_node);
    let mut cpus: Vec<CpuNode> = Vec::new();
    // Tree node of each entry in `cpus`, for cpu-map phandle look-ups.
    let mut nodes: Vec<usize> = Vec::new();
    let children = tree
        .nodes
        .get(cpus_node)
        .map(|n| n.children.as_slice())
        .unwrap_or(&[]);
    for &node in children.iter().filter(|&&node| is_cpu_node(tree, node)) {
        let path = tree.path(node);
        let Some(reg) = tree
            .cells(node, "reg")
            .or_else(|| tree.property(node, "reg").map(|_| Vec::new()))
        else {
            warnings.push(DtWarning::CpuWithoutReg { path });
            continue;
        };
        let mpidr = if (1..=2).contains(&cells) && reg.len() == cells as usize {
            join_cells(&reg)
        } else {
            None
        };
        let Some(mpidr) = mpidr else {
            let length = tree.property(node, "reg").map_or(0, <[u8]>::len);
            warnings.push(DtWarning::CpuBadReg {
                path,
                length,
                address_cells: cells,
            });
            continue;
        };
        if mpidr & !MPIDR_AFFINITY_MASK != 0 {
            warnings.push(DtWarning::CpuBadMpidr { path, value: mpidr });
            continue;
        }
        if let Some(first) = cpus.iter().find(|cpu| cpu.mpidr == mpidr) {
            warnings.push(DtWarning::DuplicateMpidr {
                path,
                first: first.path.clone(),
                mpidr,
            });
            continue;
        }
        let enable_method = enable_method(tree, node, &path, warnings);
        cpus.push(CpuNode {
            enable_method,
            mpidr,
            capacity: tree.u32_property(node, "capacity-dmips-mhz"),
            compatible: tree.str_property(node, "compatible").map(String::from),
            available: tree.is_available(node),
            numa_node: tree.u32_property(node, "numa-node-id"),
            position: fallback_position(mpidr),
            path,
        });
        nodes.push(node);
    }
    let available = cpus.iter().filter(|cpu| cpu.available).count();
    if available == 0 {
        return Err(DtError::NoUsableCpu);
    }
    if available > 1 {
        for cpu in cpus
            .iter()
            .filter(|cpu| cpu.available && cpu.enable_method == EnableMethod::Missing)
        {
            warnings.push(DtWarning::MissingEnableMethod {
                path: cpu.path.clone(),
            });
        }
    }
    if cpus
        .iter()
        .any(|cpu| cpu.available && cpu.capacity.is_some())
    {
        for cpu in cpus
            .iter()
            .filter(|cpu| cpu.available && cpu.capacity.is_none())
        {
            warnings.push(DtWarning::PartialCapacity {
                path: cpu.path.clone(),
            });
        }
    }
    let source = match tree.find("/cpus/cpu-map") {
        None => TopologySource::MpidrFallback {
            reason: FallbackReason::NoCpuMap,
        },
        Some(map) => match read_cpu_map(tree, map, cpus_node, &cpus, &nodes) {
            Ok(positions) => {
                for (cpu, position) in positions {
                    cpus[cpu].position = position;
                }
                TopologySource::CpuMap
            }
            Err(warning) => {
                warnings.push(warning);
                TopologySource::MpidrFallback {
                    reason: FallbackReason::InvalidCpuMap,
                }
            }
        },
    };
    Ok((cpus, source))
}

fn enable_method(
    tree: &Tree<'_>,
    node: usize,
    path: &str,
    warnings: &mut Vec<DtWarning>,
) -> EnableMethod {
    match tree.str_property(node, "enable-method") {
        None => EnableMethod::Missing,
        Some("psci") => EnableMethod::Psci,
        Some("spin-table") => {
            let release =
                tree.cells(node, "cpu-release-addr")
                    .and_then(|cells| match cells.len() {
                        1 | 2 => join_cells(&cells),
                        _ => None,
                    });
            match release {
                Some(release_address) => EnableMethod::SpinTable { release_address },
                None => {
                    warnings.push(DtWarning::SpinTableWithoutReleaseAddress {
                        path: String::from(path),
                    });
                    EnableMethod::Unsupported(String::from("spin-table"))
                }
            }
        }
        Some(other) => {
            warnings.push(DtWarning::UnknownEnableMethod {
                path: String::from(path),
                method: String::from(other),
            });
            EnableMethod::Unsupported(String::from(other))
        }
    }
}

/// One cluster per (Aff3, Aff2, Aff1), one core per Aff0, one socket. Right for
/// classic big.LITTLE (RK3399, Juno, Raspberry Pi); wrong for DynamIQ (Aff1 = core),
/// whose device trees carry a cpu-map.
fn fallback_position(mpidr: u64) -> RawPosition {
    RawPosition {
        socket: 0,
        cluster: mpidr >> 8,
        core: mpidr,
        thread: 0,
    }
}

/// Walks `cpu-map` (Documentation/devicetree/bindings/cpu/cpu-topology.yaml):
/// `socketN` (optional) / `clusterN` (nested clusters allowed; the innermost one that
/// holds cores is the cluster) / `coreN` / `threadN` (optional), leaves with a `cpu`
/// phandle. Returns `(index into cpus, position)` or the first problem found.
fn read_cpu_map(
    tree: &Tree<'_>,
    map: usize,
    cpus_node: usize,
    cpus: &[CpuNode],
    nodes: &[usize],
) -> Result<Vec<(usize, RawPosition)>, DtWarning> {
    let mut walker = MapWalker {
        tree,
        cpus_node,
        nodes,
        found: Vec::new(),
    };
    let children = walker.children(map);
    if children.is_empty() {
        return Err(walker.malformed(map, "cpu-map has no socket or cluster nodes"));
    }
    for &child in children {
        let name = tree.base_name(child);
        if name.starts_with("socket") {
            let clusters = walker.children(child);
            if clusters.is_empty() {
                return Err(walker.malformed(child, "socket has no cluster nodes"));
            }
            for &cluster in clusters {
                if !tree.base_name(cluster).starts_with("cluster") {
                    return Err(
                        walker.malformed(cluster, "expected a clusterN node under a socket")
                    );
                }
                walker.cluster(cluster, child as u64)?;
            }
        } else if name.starts_with("cluster") {
            walker.cluster(child, map as u64)?;
        } else {
            return Err(walker.malformed(child, "expected a socketN or clusterN node"));
        }
    }
    let found = walker.found;
    for (position, &(cpu, _, leaf)) in found.iter().enumerate() {
        if found[..position]
            .iter()
            .any(|&(earlier, _, _)| earlier == cpu)
        {
            return Err(DtWarning::CpuMapDuplicate {
                path: tree.path(leaf),
                cpu: cpus[cpu].path.clone(),
            });
        }
    }
    for (index, cpu) in cpus.iter().enumerate() {
        if cpu.available && !found.iter().any(|&(listed, _, _)| listed == index) {
            return Err(DtWarning::CpuMapIncomplete {
                cpu: cpu.path.clone(),
            });
        }
    }
    Ok(found
        .into_iter()
        .map(|(cpu, position, _)| (cpu, position))
        .collect())
}

struct MapWalker<'t, 'a> {
    tree: &'t Tree<'a>,
    cpus_node: usize,
    nodes: &'t [usize],
    /// `(index into cpus, position, cpu-map leaf node)`.
    found: Vec<(usize, RawPosition, usize)>,
}

impl<'t> MapWalker<'t, '_> {
    fn children(&self, node: usize) -> &'t [usize] {
        self.tree
            .nodes
            .get(node)
            .map(|n| n.children.as_slice())
            .unwrap_or(&[])
    }

    fn malformed(&self, node: usize, problem: &'static str) -> DtWarning {
        DtWarning::CpuMapMalformed {
            path: self.tree.path(node),
            problem,
        }
    }

    fn cluster(&mut self, cluster: usize, socket: u64) -> Result<(), DtWarning> {
        let children = self.children(cluster);
        if children.is_empty() {
            return Err(self.malformed(cluster, "cluster has no core or cluster nodes"));
        }
        for &child in children {
            let name = self.tree.base_name(child);
            if name.starts_with("cluster") {
                // Tree depth is bounded by the reader, so this recursion is too.
                self.cluster(child, socket)?;
            } else if name.starts_with("core") {
                self.core(child, socket, cluster as u64)?;
            } else {
                return Err(
                    self.malformed(child, "expected a coreN or clusterN node under a cluster")
                );
            }
        }
        Ok(())
    }

    fn core(&mut self, core: usize, socket: u64, cluster: u64) -> Result<(), DtWarning> {
        let position = RawPosition {
            socket,
            cluster,
            core: core as u64,
            thread: 0,
        };
        let threads = self.children(core);
        let has_cpu = self.tree.property(core, "cpu").is_some();
        match (has_cpu, threads.is_empty()) {
            (true, true) => self.leaf(core, position),
            (false, true) => {
                Err(self.malformed(core, "core has neither a cpu property nor thread nodes"))
            }
            (true, false) => {
                Err(self.malformed(core, "core has both a cpu property and child nodes"))
            }
            (false, false) => {
                for &thread in threads {
                    if !self.tree.base_name(thread).starts_with("thread") {
                        return Err(self.malformed(thread, "expected a threadN node under a core"));
                    }
                    self.leaf(
                        thread,
                        RawPosition {
                            thread: thread as u64,
                            ..position
                        },
                    )?;
                }
                Ok(())
            }
        }
    }

    fn leaf(&mut self, node: usize, position: RawPosition) -> Result<(), DtWarning> {
        let Some(phandle) = self.tree.u32_property(node, "cpu") else {
            return Err(self.malformed(node, "cpu property is missing or not one phandle cell"));
        };
        let Some(target) = self.tree.by_phandle(phandle) else {
            return Err(DtWarning::CpuMapMissingPhandle {
                path: self.tree.path(node),
                phandle,
            });
        };
        if let Some(cpu) = self.nodes.iter().position(|&n| n == target) {
            self.found.push((cpu, position, node));
            return Ok(());
        }
        let is_skipped_cpu = self.tree.nodes.get(target).and_then(|n| n.parent)
            == Some(self.cpus_node)
            && is_cpu_node(self.tree, target);
        if is_skipped_cpu {
            // Already warned about (no reg, bad reg, duplicate MPIDR): leave it out.
            return Ok(());
        }
        Err(DtWarning::CpuMapNotACpu {
            path: self.tree.path(node),
            target: self.tree.path(target),
        })
    }
}

/// See [`MachineDescription::topology`].
pub(super) fn build_topology(description: &MachineDescription) -> Result<Topology, DtError> {
    let logical: Vec<&CpuNode> = description.logical_cpus().collect();
    if logical.is_empty() {
        return Err(DtError::NoUsableCpu);
    }
    let placed: Vec<PlacedCpu> = logical
        .iter()
        .map(|cpu| PlacedCpu {
            hw_id: cpu.mpidr,
            position: cpu.position,
            capacity: cpu.capacity,
        })
        .collect();
    Ok(dense_topology(&placed)?)
}
