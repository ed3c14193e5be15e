//! The topology tree printed by the boot banner and by `cargo xtask topology`.

use alloc::vec::Vec;
use core::fmt;

use sched::{CpuTopology, Topology};

use super::{CpuNode, FallbackReason, MachineDescription, TopologySource};

/// Writes the machine's CPU tree (socket / cluster / core / thread, each CPU's
/// index, MPIDR, capacity, enable-method and big/LITTLE class), one
/// `big.LITTLE: <class>: CPUs <list>, capacity <n>, <compatible>` line per
/// capacity class when there is more than one, the CPUs left out, and every
/// warning. `topology` must come from `description.topology()`.
pub fn write_topology_report<W: fmt::Write + ?Sized>(
    out: &mut W,
    description: &MachineDescription,
    topology: &Topology,
) -> fmt::Result {
    let logical: Vec<&CpuNode> = description.logical_cpus().collect();
    let cpus = topology.cpus();
    let count = |key: fn(&CpuTopology) -> (u32, u32, u32, u32)| {
        let mut keys: Vec<_> = cpus.iter().map(key).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.len()
    };
    let sockets = count(|c| (c.socket, 0, 0, 0));
    let clusters = count(|c| (c.socket, c.cluster, 0, 0));
    let cores = count(|c| (c.socket, c.cluster, c.core, 0));
    let smt = cores != cpus.len();
    let classes = description.cpu_classes();
    let heterogeneous = classes.len() > 1;
    if let Some(model) = &description.model {
        writeln!(out, "machine: {model}")?;
    }
    write!(
        out,
        "cpu topology: {} CPUs, {sockets} socket(s), {clusters} cluster(s), {cores} core(s)",
        cpus.len()
    )?;
    if heterogeneous {
        write!(out, ", big.LITTLE")?;
    }
    match description.topology_source {
        TopologySource::CpuMap => writeln!(out, "; from /cpus/cpu-map")?,
        TopologySource::MpidrFallback {
            reason: FallbackReason::NoCpuMap,
        } => writeln!(out, "; no cpu-map: one cluster per MPIDR Aff1 value")?,
        TopologySource::MpidrFallback {
            reason: FallbackReason::InvalidCpuMap,
        } => writeln!(
            out,
            "; cpu-map invalid (see warnings): one cluster per MPIDR Aff1 value"
        )?,
    }
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
        write!(out, "cpu {:<3} mpidr {:<#10x}", cpu.index, cpu.hw_id)?;
        match cpu.capacity {
            Some(capacity) => write!(out, " capacity {capacity:<5}")?,
            None => write!(out, " capacity -    ")?,
        }
        let node = logical.get(cpu.index);
        write!(out, " {:<10}", node.map_or("?", |n| n.enable_method.name()))?;
        if heterogeneous {
            match classes.iter().find(|c| c.cpus.contains(cpu.index)) {
                Some(class) => write!(out, " {:<6}", class.kind)?,
                None => write!(out, " {:<6}", "?")?,
            }
        }
        if let Some(compatible) = node.and_then(|n| n.compatible.as_deref()) {
            write!(out, " {compatible}")?;
        }
        writeln!(out)?;
        previous = Some(cpu);
    }
    // One line per class, fastest first: what the default pool layout splits.
    if heterogeneous {
        for class in &classes {
            writeln!(out, "big.LITTLE: {class}")?;
        }
    }
    for cpu in description.cpus.iter().filter(|cpu| !cpu.available) {
        writeln!(
            out,
            "not available (status): {} mpidr {:#x}",
            cpu.path, cpu.mpidr
        )?;
    }
    for warning in &description.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}
