//! The topology tree printed by the boot banner and by `cargo xtask topology`.

use alloc::vec::Vec;
use core::fmt;

use sched::Topology;

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
    let classes = description.cpu_classes();
    let heterogeneous = classes.len() > 1;
    if let Some(model) = &description.model {
        writeln!(out, "machine: {model}")?;
    }
    crate::position::write_report_head(out, topology, heterogeneous)?;
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
    crate::position::write_cpu_tree(out, topology, "mpidr", |out, cpu| {
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
        Ok(())
    })?;
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
