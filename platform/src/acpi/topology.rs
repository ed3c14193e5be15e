//! MADT (+ PPTT on ARM, + CPUID on x86) → the `sched` topology, and its report.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use sched::{CpuSet, CpuTopology, Topology};

use crate::dt::{ClassKind, CpuClass, rank_classes};
use crate::position::{PlacedCpu, dense_topology};

use super::cpuid::ApicIdLayout;
use super::error::{AcpiError, AcpiWarning};
use super::madt::Madt;
use super::pptt::Pptt;

/// MPIDR_EL1 affinity fields: Aff3 (39:32), Aff2..Aff0 (23:0).
const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// The capacity of the fastest efficiency class (the Linux/DT scale).
pub const MAX_CAPACITY: u32 = 1024;

/// Which architecture's MADT entries the CPUs came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuArch {
    /// GICC entries; `hw_id` is the MPIDR affinity.
    Arm,
    /// Local APIC / x2APIC entries; `hw_id` is the APIC id.
    X86,
}

pub use crate::position::RawPosition;

/// One processor entry of the MADT that is enabled or online-capable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcpiCpu {
    /// Offset of the entry in the MADT.
    pub madt_offset: usize,
    /// ACPI processor UID.
    pub processor_uid: u32,
    /// MPIDR affinity (ARM) or APIC id (x86).
    pub hw_id: u64,
    /// Enabled: gets a logical index. Otherwise it is online-capable (hot-pluggable)
    /// and is only listed.
    pub enabled: bool,
    /// GICC efficiency class.
    pub efficiency_class: Option<u8>,
    /// Capacity from the efficiency class (see [`capacity_for_class`]).
    pub capacity: Option<u32>,
    /// Position keys.
    pub position: RawPosition,
}

/// Why an ARM topology comes from the MPIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpidrFallbackReason {
    /// No PPTT was given.
    NoPptt,
    /// The PPTT could not place every CPU (see the warnings).
    PpttUnusable,
}

/// How the x86 SMT width was guessed without CPUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtEvidence {
    /// All odd ids sit next to their even partner, and some even ids have no
    /// partner: cores with and without a second thread (hybrid parts).
    LoneEvenIds,
    /// Every odd id is paired and is listed after every even id, the order the
    /// ACPI spec asks for on SMT machines (first threads first).
    SecondThreadsListedLast,
}

/// Why the x86 SMT width could not be guessed: one thread per core is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoSmtReason {
    /// No id has bit 0 set: nothing suggests SMT.
    NoOddIds,
    /// An odd id has no even partner, so bit 0 is not a thread number.
    UnpairedOddId(u32),
    /// The ids fit both "SMT pairs" and "one thread per core".
    Ambiguous,
}

/// Where the positions came from; the report states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcpiTopologySource {
    /// ARM: the PPTT processor hierarchy.
    Pptt,
    /// ARM: from the MPIDR, like the device-tree fallback: one cluster per
    /// (Aff3, Aff2, Aff1), one core per Aff0 — except when every Aff0 is 0
    /// (`aff0_unused`), the MPIDR.MT-style numbering of Neoverse and DynamIQ cores,
    /// where Aff1 numbers cores and (Aff3, Aff2) clusters.
    Mpidr {
        /// Why not the PPTT.
        reason: MpidrFallbackReason,
        /// Clusters by Aff2, cores by Aff1.
        aff0_unused: bool,
    },
    /// x86: the APIC-id layout from CPUID.
    Cpuid(ApicIdLayout),
    /// x86 without CPUID: SMT pairs guessed from the id pattern (shift 1), one
    /// package, one cluster.
    InferredSmt(SmtEvidence),
    /// x86 without CPUID and no safe guess: one thread per core, one package.
    NoSmtInfo(NoSmtReason),
}

/// The CPUs of a MADT with their positions: what [`AcpiCpus::topology`] and
/// [`write_topology_report`] work from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcpiCpus {
    /// ARM or x86.
    pub arch: CpuArch,
    /// Enabled and online-capable processors, in MADT order.
    pub cpus: Vec<AcpiCpu>,
    /// Where positions came from.
    pub source: AcpiTopologySource,
    /// Processor entries neither enabled nor online-capable (firmware placeholders).
    pub unusable_entries: usize,
    /// Problems worked around (MADT, PPTT and topology warnings).
    pub warnings: Vec<AcpiWarning>,
}

/// Capacity for efficiency class `class` when the machine's classes are `classes`
/// (sorted, distinct, at least two): the classes are ranked and spread evenly up
/// to [`MAX_CAPACITY`], so two classes give 512 and 1024, three 341, 682 and
/// 1024. ACPI only orders the classes (higher = faster); the spacing is a choice.
pub fn capacity_for_class(classes: &[u8], class: u8) -> Option<u32> {
    let rank = classes.iter().position(|&c| c == class)? as u32;
    let count = classes.len() as u32;
    Some(MAX_CAPACITY * (rank + 1) / count.max(1))
}

fn mpidr_position(mpidr: u64, aff0_unused: bool) -> RawPosition {
    if aff0_unused {
        RawPosition {
            socket: 0,
            cluster: mpidr >> 16,
            core: mpidr >> 8,
            thread: 0,
        }
    } else {
        RawPosition {
            socket: 0,
            cluster: mpidr >> 8,
            core: mpidr,
            thread: 0,
        }
    }
}

impl AcpiCpus {
    /// ARM: one CPU per enabled or online-capable GICC. Positions from the PPTT
    /// when given and it places every enabled CPU (PPTT nodes without a GICC — the
    /// Ampere table describes the largest machine of its family — are ignored),
    /// else from the MPIDR. Different efficiency classes become capacities.
    pub fn arm(madt: &Madt, pptt: Option<&Pptt>) -> Result<Self, AcpiError> {
        let mut warnings = madt.warnings.clone();
        let mut cpus: Vec<AcpiCpu> = Vec::new();
        let mut unusable_entries = 0;
        for gicc in &madt.giccs {
            if !gicc.flags.enabled && !gicc.flags.online_capable {
                unusable_entries += 1;
                continue;
            }
            if gicc.mpidr & !MPIDR_AFFINITY_MASK != 0 {
                warnings.push(AcpiWarning::BadMpidr {
                    offset: gicc.offset,
                    mpidr: gicc.mpidr,
                });
                continue;
            }
            if cpus.iter().any(|cpu| cpu.hw_id == gicc.mpidr) {
                warnings.push(AcpiWarning::DuplicateId {
                    offset: gicc.offset,
                    id: gicc.mpidr,
                });
                continue;
            }
            cpus.push(AcpiCpu {
                madt_offset: gicc.offset,
                processor_uid: gicc.processor_uid,
                hw_id: gicc.mpidr,
                enabled: gicc.flags.enabled,
                efficiency_class: gicc.efficiency_class,
                capacity: None,
                position: RawPosition::default(),
            });
        }
        if !cpus.iter().any(|cpu| cpu.enabled) {
            return Err(AcpiError::NoUsableCpu { kind: "GICC" });
        }
        let pptt_positions = pptt.map(|pptt| {
            warnings.extend(pptt.warnings.iter().cloned());
            cpus.iter()
                .map(|cpu| {
                    let position = pptt.position(cpu.processor_uid).map(|p| RawPosition {
                        socket: p.package as u64,
                        cluster: p.cluster as u64,
                        core: p.core as u64,
                        thread: p.thread as u64,
                    });
                    // Only CPUs that get an index must be placed; an online-capable
                    // one the PPTT does not know keeps a dummy position.
                    match position {
                        Err(_) if !cpu.enabled => Ok(RawPosition::default()),
                        other => other,
                    }
                })
                .collect::<Result<Vec<_>, _>>()
                .and_then(|positions| {
                    let enabled = || positions.iter().zip(&cpus).filter(|(_, cpu)| cpu.enabled);
                    for (index, (position, cpu)) in enabled().enumerate() {
                        if enabled()
                            .take(index)
                            .any(|(earlier, _)| earlier == position)
                        {
                            return Err(AcpiError::PpttSharedLeaf {
                                uid: cpu.processor_uid,
                            });
                        }
                    }
                    Ok(positions)
                })
        });
        let source = match pptt_positions {
            Some(Ok(positions)) => {
                for (cpu, position) in cpus.iter_mut().zip(positions) {
                    cpu.position = position;
                }
                AcpiTopologySource::Pptt
            }
            other => {
                let reason = match other {
                    Some(Err(reason)) => {
                        warnings.push(AcpiWarning::PpttUnusable { reason });
                        MpidrFallbackReason::PpttUnusable
                    }
                    _ => MpidrFallbackReason::NoPptt,
                };
                let aff0_unused = cpus.len() > 1 && cpus.iter().all(|cpu| cpu.hw_id & 0xff == 0);
                for cpu in &mut cpus {
                    cpu.position = mpidr_position(cpu.hw_id, aff0_unused);
                }
                AcpiTopologySource::Mpidr {
                    reason,
                    aff0_unused,
                }
            }
        };
        let mut classes: Vec<u8> = cpus.iter().filter_map(|c| c.efficiency_class).collect();
        classes.sort_unstable();
        classes.dedup();
        if classes.len() > 1 {
            if cpus.iter().all(|cpu| cpu.efficiency_class.is_some()) {
                for cpu in &mut cpus {
                    cpu.capacity = cpu
                        .efficiency_class
                        .and_then(|class| capacity_for_class(&classes, class));
                }
            } else {
                warnings.push(AcpiWarning::PartialEfficiencyClass);
            }
        }
        let described = Self {
            arch: CpuArch::Arm,
            cpus,
            source,
            unusable_entries,
            warnings,
        };
        described.topology()?;
        Ok(described)
    }

    /// x86: one CPU per enabled or online-capable local APIC / x2APIC entry
    /// (duplicates and the 0xFF / 0xFFFFFFFF placeholders are left out). With a
    /// CPUID layout the ids split into package/cluster/core/thread; without one, SMT
    /// pairs are guessed only when the id pattern leaves no doubt (see
    /// [`SmtEvidence`]), else every CPU is its own core.
    pub fn x86(madt: &Madt, layout: Option<ApicIdLayout>) -> Result<Self, AcpiError> {
        let mut warnings = madt.warnings.clone();
        let mut cpus: Vec<AcpiCpu> = Vec::new();
        let mut unusable_entries = 0;
        for apic in &madt.local_apics {
            if !apic.flags.enabled && !apic.flags.online_capable {
                unusable_entries += 1;
                continue;
            }
            if apic.has_invalid_id() {
                warnings.push(AcpiWarning::InvalidApicId {
                    offset: apic.offset,
                    id: apic.apic_id,
                });
                continue;
            }
            let id = u64::from(apic.apic_id);
            if cpus.iter().any(|cpu| cpu.hw_id == id) {
                warnings.push(AcpiWarning::DuplicateId {
                    offset: apic.offset,
                    id,
                });
                continue;
            }
            cpus.push(AcpiCpu {
                madt_offset: apic.offset,
                processor_uid: apic.processor_uid,
                hw_id: id,
                enabled: apic.flags.enabled,
                efficiency_class: None,
                capacity: None,
                position: RawPosition::default(),
            });
        }
        if !cpus.iter().any(|cpu| cpu.enabled) {
            return Err(AcpiError::NoUsableCpu {
                kind: "local APIC/x2APIC",
            });
        }
        let (source, layout) = match layout {
            Some(layout) => (AcpiTopologySource::Cpuid(layout), layout),
            None => {
                let ids: Vec<u32> = cpus
                    .iter()
                    .filter(|c| c.enabled)
                    .map(|c| c.hw_id as u32)
                    .collect();
                match infer_smt(&ids) {
                    Ok(evidence) => (
                        AcpiTopologySource::InferredSmt(evidence),
                        ApicIdLayout {
                            smt_shift: 1,
                            core_shift: 32,
                            cluster_shift: None,
                        },
                    ),
                    Err(reason) => (
                        AcpiTopologySource::NoSmtInfo(reason),
                        ApicIdLayout {
                            smt_shift: 0,
                            core_shift: 32,
                            cluster_shift: None,
                        },
                    ),
                }
            }
        };
        for cpu in &mut cpus {
            let fields = layout.split(cpu.hw_id as u32);
            let package = u64::from(fields.package);
            let cluster = (package << 32) | u64::from(fields.cluster);
            cpu.position = RawPosition {
                socket: package,
                cluster,
                core: (cluster << 32) | u64::from(fields.core),
                thread: u64::from(fields.thread),
            };
        }
        let described = Self {
            arch: CpuArch::X86,
            cpus,
            source,
            unusable_entries,
            warnings,
        };
        described.topology()?;
        Ok(described)
    }

    /// The CPUs' capacity classes, fastest first, as
    /// [`crate::dt::MachineDescription::cpu_classes`] gives them for a device
    /// tree: on ARM by GICC efficiency class (the Surface Pro X's 4+4), on
    /// x86 by core shape on a hybrid part (two-thread P-cores, one-thread
    /// E-cores: the MADT's SMT pairs, or CPUID's layout). One class when the
    /// CPUs are alike.
    pub fn cpu_classes(&self, topology: &Topology) -> Vec<CpuClass> {
        let cpus = topology.cpus();
        // (rank, what tells the class apart) of each logical CPU.
        let keys: Vec<(u64, &'static str)> = match self.arch {
            // GICC efficiency classes, as capacities: higher is faster.
            CpuArch::Arm => cpus
                .iter()
                .map(|cpu| (cpu.capacity.map_or(0, |c| u64::from(c) + 1), ""))
                .collect(),
            // Hybrid Intel parts (Alder Lake on): P-cores have two threads,
            // E-cores one. Only a machine with both kinds is hybrid: SMT
            // off everywhere (or a part without SMT) is one class.
            CpuArch::X86 => {
                let threads = |core: &CpuTopology| {
                    cpus.iter()
                        .filter(|c| {
                            (c.socket, c.cluster, c.core) == (core.socket, core.cluster, core.core)
                        })
                        .count()
                };
                let shapes: Vec<bool> = cpus.iter().map(|cpu| threads(cpu) > 1).collect();
                let hybrid = shapes.contains(&true) && shapes.contains(&false);
                shapes
                    .iter()
                    .map(|&smt| match (hybrid, smt) {
                        (false, _) => (0, ""),
                        (true, true) => (1, "x86 P-core (two threads)"),
                        (true, false) => (0, "x86 E-core (one thread)"),
                    })
                    .collect()
            }
        };
        let mut classes: Vec<(u64, CpuClass)> = Vec::new();
        for (cpu, &(rank, what)) in cpus.iter().zip(&keys) {
            match classes.iter_mut().find(|(r, _)| *r == rank) {
                Some((_, class)) => {
                    class.cpus.insert(cpu.index);
                }
                None => classes.push((
                    rank,
                    CpuClass {
                        kind: ClassKind::Big,
                        cpus: CpuSet::single(cpu.index),
                        capacity: cpu.capacity,
                        compatible: (!what.is_empty()).then(|| String::from(what)),
                    },
                )),
            }
        }
        rank_classes(classes)
    }

    /// The CPUs that get a logical index (the enabled ones), in index order.
    pub fn logical_cpus(&self) -> impl Iterator<Item = &AcpiCpu> {
        self.cpus.iter().filter(|cpu| cpu.enabled)
    }

    /// The scheduler topology: one CPU per enabled entry, indices in MADT order
    /// (ACPI lists the boot processor first, so it is CPU 0 on conforming firmware),
    /// positions renumbered densely from 0 within their parent.
    pub fn topology(&self) -> Result<Topology, AcpiError> {
        let logical: Vec<&AcpiCpu> = self.logical_cpus().collect();
        let placed: Vec<PlacedCpu> = logical
            .iter()
            .map(|cpu| PlacedCpu {
                hw_id: cpu.hw_id,
                position: cpu.position,
                capacity: cpu.capacity,
            })
            .collect();
        Ok(dense_topology(&placed)?)
    }
}

/// Guesses SMT pairs (shift 1) from enabled APIC ids in MADT order; see [`SmtEvidence`].
pub fn infer_smt(ids: &[u32]) -> Result<SmtEvidence, NoSmtReason> {
    let has = |id: u32| ids.contains(&id);
    let odd: Vec<u32> = ids.iter().copied().filter(|id| id & 1 == 1).collect();
    if odd.is_empty() {
        return Err(NoSmtReason::NoOddIds);
    }
    if let Some(&lone) = odd.iter().find(|&&id| !has(id & !1)) {
        return Err(NoSmtReason::UnpairedOddId(lone));
    }
    if ids.iter().any(|&id| id & 1 == 0 && !has(id | 1)) {
        return Ok(SmtEvidence::LoneEvenIds);
    }
    let last_even = ids.iter().rposition(|id| id & 1 == 0);
    let first_odd = ids.iter().position(|id| id & 1 == 1);
    match (last_even, first_odd) {
        (Some(even), Some(odd)) if even < odd => Ok(SmtEvidence::SecondThreadsListedLast),
        _ => Err(NoSmtReason::Ambiguous),
    }
}

impl fmt::Display for AcpiTopologySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pptt => write!(f, "from the PPTT"),
            Self::Mpidr {
                reason,
                aff0_unused,
            } => {
                let reason = match reason {
                    MpidrFallbackReason::NoPptt => "no PPTT",
                    MpidrFallbackReason::PpttUnusable => "PPTT unusable (see warnings)",
                };
                if *aff0_unused {
                    write!(
                        f,
                        "{reason}: MPIDR Aff0 unused, one cluster per Aff2 value, one core per Aff1"
                    )
                } else {
                    write!(f, "{reason}: one cluster per MPIDR Aff1 value")
                }
            }
            Self::Cpuid(layout) => write!(f, "APIC ids split by the CPUID layout ({layout})"),
            Self::InferredSmt(SmtEvidence::LoneEvenIds) => write!(
                f,
                "no CPUID: SMT pairs guessed from the APIC ids (ids 2n/2n+1 pair, some cores single-threaded); one package"
            ),
            Self::InferredSmt(SmtEvidence::SecondThreadsListedLast) => write!(
                f,
                "no CPUID: SMT pairs guessed from the APIC ids (ids 2n/2n+1 pair, second threads listed last); one package"
            ),
            Self::NoSmtInfo(reason) => {
                write!(f, "no CPUID: one thread per core, one package (")?;
                match reason {
                    NoSmtReason::NoOddIds => write!(f, "no odd APIC id")?,
                    NoSmtReason::UnpairedOddId(id) => {
                        write!(f, "APIC id {id:#x} has no even partner")?
                    }
                    NoSmtReason::Ambiguous => write!(f, "SMT cannot be told from the ids")?,
                }
                write!(f, ")")
            }
        }
    }
}

/// Writes the CPU tree in the format of [`crate::dt::write_topology_report`]
/// (socket / cluster / core / thread, each CPU's index, MPIDR or APIC id, capacity,
/// ACPI UID and big/LITTLE class), the online-capable CPUs left out, and every
/// warning. `topology` must come from `cpus.topology()`.
pub fn write_topology_report<W: fmt::Write + ?Sized>(
    out: &mut W,
    cpus: &AcpiCpus,
    topology: &Topology,
) -> fmt::Result {
    let logical: Vec<&AcpiCpu> = cpus.logical_cpus().collect();
    let heterogeneous = topology.is_heterogeneous();
    crate::position::write_report_head(out, topology, heterogeneous)?;
    writeln!(out, "; ACPI MADT, {}", cpus.source)?;
    let id_name = match cpus.arch {
        CpuArch::Arm => "mpidr",
        CpuArch::X86 => "apic",
    };
    let capacities = topology.cpus().iter().filter_map(|c| c.capacity);
    let (smallest, largest) = (capacities.clone().min(), capacities.max());
    crate::position::write_cpu_tree(out, topology, id_name, |out, cpu| {
        if let Some(entry) = logical.get(cpu.index) {
            write!(out, " uid {:#x}", entry.processor_uid)?;
        }
        if heterogeneous {
            let class = match cpu.capacity {
                None => "?",
                capacity if capacity == largest => "big",
                capacity if capacity == smallest => "LITTLE",
                _ => "mid",
            };
            write!(out, " {class}")?;
        }
        Ok(())
    })?;
    // One line per class, fastest first: what the default pool layout splits.
    let classes = cpus.cpu_classes(topology);
    if classes.len() > 1 {
        for class in &classes {
            writeln!(out, "big.LITTLE: {class}")?;
        }
    }
    for cpu in cpus.cpus.iter().filter(|cpu| !cpu.enabled) {
        writeln!(
            out,
            "online-capable, not enabled: uid {:#x} {id_name} {:#x}",
            cpu.processor_uid, cpu.hw_id
        )?;
    }
    if cpus.unusable_entries > 0 {
        writeln!(
            out,
            "{} MADT processor entries neither enabled nor online-capable",
            cpus.unusable_entries
        )?;
    }
    for warning in &cpus.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}
