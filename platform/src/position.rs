//! One topology builder for every firmware description: the device tree's
//! `cpu-map` and ACPI's PPTT or MADT give each CPU sort keys for its
//! socket, cluster, core and thread; [`dense_topology`] numbers them densely
//! within their parent, the same way for both.
#![forbid(unsafe_code)]

use alloc::vec::Vec;
use core::fmt;

use sched::{CpuTopology, Topology, TopologyError};

/// Sort keys for a CPU's socket, cluster, core and thread; only their order
/// matters ([`dense_topology`] renumbers them densely within their parent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct RawPosition {
    /// Socket key.
    pub socket: u64,
    /// Cluster key (unique machine-wide).
    pub cluster: u64,
    /// Core key (unique machine-wide).
    pub core: u64,
    /// Thread key within the core.
    pub thread: u64,
}

/// One logical CPU as a firmware description places it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacedCpu {
    /// MPIDR affinity (ARM) or APIC id (x86).
    pub hw_id: u64,
    /// Its sort keys.
    pub position: RawPosition,
    /// Its capacity, if the firmware gives one.
    pub capacity: Option<u32>,
}

/// The scheduler topology of `cpus` (in logical-index order): socket,
/// cluster, core and thread renumbered densely from 0 within their parent.
pub fn dense_topology(cpus: &[PlacedCpu]) -> Result<Topology, TopologyError> {
    let sockets = sorted_distinct(cpus.iter().map(|c| c.position.socket).collect());
    let clusters = sorted_distinct(
        cpus.iter()
            .map(|c| (c.position.socket, c.position.cluster))
            .collect(),
    );
    let cores = sorted_distinct(
        cpus.iter()
            .map(|c| (c.position.socket, c.position.cluster, c.position.core))
            .collect(),
    );
    let threads = sorted_distinct(cpus.iter().map(|c| c.position).collect());
    let placed = cpus
        .iter()
        .enumerate()
        .map(|(index, cpu)| {
            let p = cpu.position;
            CpuTopology {
                index,
                hw_id: cpu.hw_id,
                socket: dense_rank(&sockets, p.socket, |_| true),
                cluster: dense_rank(&clusters, (p.socket, p.cluster), |k| k.0 == p.socket),
                core: dense_rank(&cores, (p.socket, p.cluster, p.core), |k| {
                    (k.0, k.1) == (p.socket, p.cluster)
                }),
                thread: dense_rank(&threads, p, |k| {
                    (k.socket, k.cluster, k.core) == (p.socket, p.cluster, p.core)
                }),
                capacity: cpu.capacity,
                enabled: true,
            }
        })
        .collect();
    Topology::new(placed)
}

fn sorted_distinct<K: Ord>(mut keys: Vec<K>) -> Vec<K> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Index of `key` among the sorted distinct `keys`, counted from the first key
/// that shares `key`'s parent (`same_parent`).
fn dense_rank<K: Ord + Copy>(keys: &[K], key: K, same_parent: impl Fn(&K) -> bool) -> u32 {
    let position = keys.partition_point(|k| *k < key);
    let first = keys[..position]
        .iter()
        .rposition(|k| !same_parent(k))
        .map_or(0, |p| p + 1);
    u32::try_from(position - first).unwrap_or(u32::MAX)
}

/// The first line of a topology report: `cpu topology: N CPUs, S socket(s),
/// C cluster(s), K core(s)` and `, big.LITTLE` on a heterogeneous machine;
/// the caller ends it with where the topology came from.
pub fn write_report_head<W: fmt::Write + ?Sized>(
    out: &mut W,
    topology: &Topology,
    heterogeneous: bool,
) -> fmt::Result {
    let counts = topology.counts();
    write!(
        out,
        "cpu topology: {} CPUs, {} socket(s), {} cluster(s), {} core(s)",
        counts.threads, counts.sockets, counts.clusters, counts.cores
    )?;
    if heterogeneous {
        write!(out, ", big.LITTLE")?;
    }
    Ok(())
}

/// The CPU tree of a topology report, written the same for the device tree
/// and ACPI: socket / cluster / core (with SMT) / thread headings, and one
/// line per CPU, `cpu N <id_name> 0x… capacity …`, followed by whatever
/// `columns` writes for it (enable method, ACPI UID, class…) and a newline.
pub fn write_cpu_tree<W: fmt::Write + ?Sized>(
    out: &mut W,
    topology: &Topology,
    id_name: &str,
    mut columns: impl FnMut(&mut W, &CpuTopology) -> fmt::Result,
) -> fmt::Result {
    let cpus = topology.cpus();
    let smt = topology.counts().cores != cpus.len();
    let mut order: Vec<&CpuTopology> = cpus.iter().collect();
    order.sort_by_key(|c| (c.socket, c.cluster, c.core, c.thread, c.index));
    let mut previous: Option<&CpuTopology> = None;
    for cpu in order {
        let new_socket = previous.is_none_or(|p| p.socket != cpu.socket);
        let new_cluster = new_socket || previous.is_some_and(|p| p.cluster != cpu.cluster);
        let new_core = new_cluster || previous.is_some_and(|p| p.core != cpu.core);
        if new_socket {
            writeln!(out, "socket {}", cpu.socket)?;
        }
        if new_cluster {
            writeln!(out, "  cluster {}", cpu.cluster)?;
        }
        if smt {
            if new_core {
                writeln!(out, "    core {}", cpu.core)?;
            }
            write!(out, "      thread {}: ", cpu.thread)?;
        } else {
            write!(out, "    core {}: ", cpu.core)?;
        }
        write!(out, "cpu {:<3} {id_name} {:<#10x}", cpu.index, cpu.hw_id)?;
        match cpu.capacity {
            Some(capacity) => write!(out, " capacity {capacity:<5}")?,
            None => write!(out, " capacity -    ")?,
        }
        columns(out, cpu)?;
        writeln!(out)?;
        previous = Some(cpu);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn keys_are_renumbered_densely_within_their_parent() {
        let cpu = |socket, cluster, core, thread| PlacedCpu {
            hw_id: core * 10 + thread,
            position: RawPosition {
                socket,
                cluster,
                core,
                thread,
            },
            capacity: None,
        };
        // Sparse keys (cluster 0x100, cores 7 and 9): dense positions.
        let topology = dense_topology(&[
            cpu(0, 0x100, 9, 1),
            cpu(0, 0x100, 7, 0),
            cpu(0, 0x100, 9, 0),
            cpu(1, 0x300, 2, 0),
        ])
        .unwrap();
        let places: Vec<(u32, u32, u32, u32)> = topology
            .cpus()
            .iter()
            .map(|c| (c.socket, c.cluster, c.core, c.thread))
            .collect();
        assert_eq!(
            places,
            vec![(0, 0, 1, 1), (0, 0, 0, 0), (0, 0, 1, 0), (1, 0, 0, 0)]
        );
        assert!(dense_topology(&[]).is_err());
    }
}
