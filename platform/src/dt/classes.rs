//! Capacity classes (big.LITTLE): CPUs grouped by how fast they are, from
//! `capacity-dmips-mhz` or, when the device tree gives no capacities, from the
//! cpu nodes' `compatible`.
//!
//! The boot banner names each class and the hypervisor's default pool layout
//! puts each class in its own cpupool (a vCPU that migrates between a big and
//! a LITTLE core changes speed under its scheduler's feet: Xen refuses such
//! machines unless told `hmp-unsafe`).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use sched::CpuSet;

use super::MachineDescription;

/// Cores Arm sells as its "efficiency" (in-order) designs: when a device tree
/// mixes core types without `capacity-dmips-mhz`, these are the LITTLE ones.
const EFFICIENCY_CORES: &[&str] = &[
    "arm,cortex-a5",
    "arm,cortex-a7",
    "arm,cortex-a32",
    "arm,cortex-a34",
    "arm,cortex-a35",
    "arm,cortex-a53",
    "arm,cortex-a55",
    "arm,cortex-a510",
    "arm,cortex-a520",
];

/// How a class ranks against the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassKind {
    /// The fastest class.
    Big,
    /// The slowest class.
    Little,
    /// Neither the fastest nor the slowest (three or more classes); `n` counts
    /// from 1 for the fastest of them.
    Mid(usize),
    /// The device tree mixes core types that cannot be ranked (no capacities,
    /// no known efficiency core): `n` counts from 1 in device-tree order.
    Unranked(usize),
}

impl fmt::Display for ClassKind {
    /// The name; honours width and alignment (`{:<6}` in the report's columns).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Big => f.pad("big"),
            Self::Little => f.pad("LITTLE"),
            Self::Mid(n) => f.pad(&alloc::format!("mid{n}")),
            Self::Unranked(n) => f.pad(&alloc::format!("class{n}")),
        }
    }
}

/// One capacity class: CPUs of equal capacity (or, without capacities, of
/// equal `compatible`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuClass {
    /// Its rank, which is also its name (`big`, `LITTLE`, ...).
    pub kind: ClassKind,
    /// Logical CPU indices.
    pub cpus: CpuSet,
    /// `capacity-dmips-mhz` of its CPUs, if the device tree gives it.
    pub capacity: Option<u32>,
    /// The `compatible` of its first CPU.
    pub compatible: Option<String>,
}

impl fmt::Display for CpuClass {
    /// `big: CPUs 4-5, capacity 1024, arm,cortex-a72`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: CPUs ", self.kind)?;
        write_cpu_list(f, &self.cpus)?;
        if let Some(capacity) = self.capacity {
            write!(f, ", capacity {capacity}")?;
        }
        if let Some(compatible) = &self.compatible {
            write!(f, ", {compatible}")?;
        }
        Ok(())
    }
}

/// Writes `set` as ranges (`0-3,6`), the form configs use.
pub fn write_cpu_list<W: fmt::Write + ?Sized>(out: &mut W, set: &CpuSet) -> fmt::Result {
    let mut cpus = set.iter().peekable();
    let mut first_item = true;
    while let Some(first) = cpus.next() {
        let mut last = first;
        while cpus.peek() == Some(&(last + 1)) {
            last += 1;
            cpus.next();
        }
        if !first_item {
            write!(out, ",")?;
        }
        first_item = false;
        if first == last {
            write!(out, "{first}")?;
        } else {
            write!(out, "{first}-{last}")?;
        }
    }
    Ok(())
}

/// What sets a CPU's class apart.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClassKey {
    Capacity(Option<u32>),
    Compatible(Option<String>),
}

impl MachineDescription {
    /// The CPUs' capacity classes, fastest first; one class (kind
    /// [`ClassKind::Big`]) when every CPU is alike. CPUs are logical indices,
    /// as in [`Self::topology`].
    ///
    /// Classes come from `capacity-dmips-mhz` when any CPU has it (a CPU
    /// without it, which the parser already warns about, is a class of its
    /// own, ranked last); otherwise from `compatible`, with Arm's efficiency
    /// cores ([`EFFICIENCY_CORES`]) ranked LITTLE.
    pub fn cpu_classes(&self) -> Vec<CpuClass> {
        let by_capacity = self.logical_cpus().any(|cpu| cpu.capacity.is_some());
        let mut classes: Vec<(ClassKey, CpuClass)> = Vec::new();
        for (index, cpu) in self.logical_cpus().enumerate() {
            let key = if by_capacity {
                ClassKey::Capacity(cpu.capacity)
            } else {
                ClassKey::Compatible(cpu.compatible.clone())
            };
            match classes.iter_mut().find(|(k, _)| *k == key) {
                Some((_, class)) => {
                    class.cpus.insert(index);
                }
                None => classes.push((
                    key,
                    CpuClass {
                        kind: ClassKind::Big,
                        cpus: CpuSet::single(index),
                        capacity: cpu.capacity,
                        compatible: cpu.compatible.clone(),
                    },
                )),
            }
        }
        // Rank: higher capacity first; without capacities, performance cores
        // before efficiency cores. The sort is stable, so equal ranks stay in
        // device-tree order.
        let rank = |key: &ClassKey| -> u64 {
            match key {
                ClassKey::Capacity(capacity) => capacity.map_or(0, |c| u64::from(c) + 1),
                ClassKey::Compatible(compatible) => {
                    let efficient = compatible
                        .as_deref()
                        .is_some_and(|c| EFFICIENCY_CORES.contains(&c));
                    u64::from(!efficient)
                }
            }
        };
        rank_classes(
            classes
                .into_iter()
                .map(|(key, class)| (rank(&key), class))
                .collect(),
        )
    }
}

/// Sorts `(rank, class)` pairs fastest first (a higher rank is faster; the
/// sort is stable, so equal ranks keep their order) and names each class by
/// its place: `big`, `mid1`..., `LITTLE`; `class1`... when two classes share
/// a rank and cannot be told apart. Shared by the device-tree and ACPI
/// descriptions.
pub fn rank_classes(mut classes: Vec<(u64, CpuClass)>) -> Vec<CpuClass> {
    classes.sort_by_key(|&(rank, _)| core::cmp::Reverse(rank));
    let count = classes.len();
    let ranked = classes.windows(2).all(|pair| pair[0].0 != pair[1].0);
    for (position, (_, class)) in classes.iter_mut().enumerate() {
        class.kind = if !ranked {
            ClassKind::Unranked(position + 1)
        } else if position == 0 {
            ClassKind::Big
        } else if position + 1 == count {
            ClassKind::Little
        } else {
            ClassKind::Mid(position)
        };
    }
    classes.into_iter().map(|(_, class)| class).collect()
}

#[cfg(test)]
mod tests {
    use alloc::format;
    use alloc::string::ToString;

    use super::*;
    use crate::dt::{CpuNode, EnableMethod, RawPosition, TopologySource};

    fn machine(cpus: &[(Option<u32>, &str)]) -> MachineDescription {
        MachineDescription {
            model: None,
            compatible: Vec::new(),
            cpus: cpus
                .iter()
                .enumerate()
                .map(|(i, &(capacity, compatible))| CpuNode {
                    path: format!("/cpus/cpu@{i}"),
                    mpidr: i as u64,
                    enable_method: EnableMethod::Psci,
                    capacity,
                    compatible: Some(compatible.to_string()),
                    available: true,
                    numa_node: None,
                    position: RawPosition::default(),
                })
                .collect(),
            topology_source: TopologySource::CpuMap,
            memory: Vec::new(),
            reserved: Vec::new(),
            gic: None,
            psci: None,
            console: None,
            timer: None,
            bootargs: None,
            initrd: None,
            devices: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn names(classes: &[CpuClass]) -> Vec<String> {
        classes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn class_names_pad_like_strings() {
        assert_eq!(format!("[{:<6}]", ClassKind::Big), "[big   ]");
        assert_eq!(format!("[{:<6}]", ClassKind::Mid(2)), "[mid2  ]");
    }

    #[test]
    fn equal_cpus_are_one_big_class() {
        let classes = machine(&[(None, "arm,cortex-a72"); 4]).cpu_classes();
        assert_eq!(names(&classes), ["big: CPUs 0-3, arm,cortex-a72"]);
    }

    #[test]
    fn capacities_rank_the_classes_fastest_first() {
        let classes = machine(&[
            (Some(485), "arm,cortex-a53"),
            (Some(485), "arm,cortex-a53"),
            (Some(1024), "arm,cortex-a72"),
            (Some(700), "arm,cortex-a73"),
        ])
        .cpu_classes();
        assert_eq!(
            names(&classes),
            [
                "big: CPUs 2, capacity 1024, arm,cortex-a72",
                "mid1: CPUs 3, capacity 700, arm,cortex-a73",
                "LITTLE: CPUs 0-1, capacity 485, arm,cortex-a53",
            ]
        );
    }

    #[test]
    fn without_capacities_the_compatible_decides() {
        let classes = machine(&[
            (None, "arm,cortex-a55"),
            (None, "arm,cortex-a76"),
            (None, "arm,cortex-a55"),
        ])
        .cpu_classes();
        assert_eq!(
            names(&classes),
            [
                "big: CPUs 1, arm,cortex-a76",
                "LITTLE: CPUs 0,2, arm,cortex-a55"
            ]
        );
        // Two performance cores: no way to say which is faster.
        let classes = machine(&[(None, "arm,cortex-a76"), (None, "arm,cortex-a78")]).cpu_classes();
        assert_eq!(
            names(&classes),
            [
                "class1: CPUs 0, arm,cortex-a76",
                "class2: CPUs 1, arm,cortex-a78"
            ]
        );
    }

    #[test]
    fn a_cpu_without_capacity_ranks_last() {
        let classes =
            machine(&[(Some(1024), "arm,cortex-a72"), (None, "arm,cortex-a72")]).cpu_classes();
        assert_eq!(
            names(&classes),
            [
                "big: CPUs 0, capacity 1024, arm,cortex-a72",
                "LITTLE: CPUs 1, arm,cortex-a72"
            ]
        );
    }
}
