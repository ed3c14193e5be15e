//! The CPUs' own view of which of them are SMT siblings, independent of the
//! firmware topology the scheduler groups by.
//!
//! The co-residency checker must not group CPUs by the same parse of the
//! device tree or ACPI tables that the scheduler uses: a firmware table that
//! forgets a core's threads (an SMT machine whose device tree has no
//! `cpu-map`) would make the scheduler treat each thread as a core of its own,
//! and a checker that trusted the same grouping would never look at the
//! siblings that really share a core. So each CPU reads its own identity at
//! bring-up (the initial APIC ID and the CPUID topology leaves on x86, MPIDR
//! with its MT bit on ARM); this module groups the CPUs by it, compares that
//! with the firmware topology and gives the checker the union of both.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use sched::{CpuSet, Granularity, System, Topology};

/// MPIDR_EL1.MT: the lowest affinity level (Aff0) numbers the threads of a
/// multithreaded core.
const MPIDR_MT: u64 = 1 << 24;
/// MPIDR_EL1's affinity fields above Aff0 (Aff3 in 39:32, Aff2 and Aff1 in 23:8).
const MPIDR_CORE_AFFINITY: u64 = 0xff_00ff_ff00;

/// What one CPU says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// An x86 CPU: its initial APIC ID (CPUID) and the width of the SMT
    /// field in it (CPUID leaf 0xB/0x1F level 1, or the AMD leaves).
    X86 {
        /// The initial APIC ID.
        apic_id: u32,
        /// Low bits of the APIC ID that number the threads of a core.
        smt_shift: u32,
    },
    /// An ARM CPU: MPIDR_EL1 as read (MT bit included).
    Arm {
        /// The raw register.
        mpidr: u64,
    },
}

impl Identity {
    /// The core this CPU says it belongs to, or `None` when it does not name
    /// SMT threads (an ARM CPU with MPIDR.MT clear: its Aff0 is a core).
    pub fn core_of(&self) -> Option<u64> {
        match *self {
            Self::X86 { apic_id, smt_shift } => {
                Some(u64::from(apic_id).checked_shr(smt_shift).unwrap_or(0))
            }
            Self::Arm { mpidr } => (mpidr & MPIDR_MT != 0).then_some(mpidr & MPIDR_CORE_AFFINITY),
        }
    }
}

/// The groups of two or more CPUs that say they are threads of one core,
/// each sorted, in order of their first CPU. `identities[i]` is CPU `i`'s
/// (`None`: offline or never read).
pub fn sibling_groups(identities: &[Option<Identity>]) -> Vec<Vec<usize>> {
    let mut cores: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (cpu, identity) in identities.iter().enumerate() {
        if let Some(core) = identity.and_then(|i| i.core_of()) {
            cores.entry(core).or_default().push(cpu);
        }
    }
    let mut groups: Vec<Vec<usize>> = cores.into_values().filter(|g| g.len() > 1).collect();
    groups.sort();
    groups
}

/// Whether every CPU that reported an identity names its SMT threads (so
/// the CPUs' view can also say which CPUs are *not* siblings).
pub fn names_threads(identities: &[Option<Identity>]) -> bool {
    let mut reported = identities.iter().flatten().peekable();
    reported.peek().is_some() && reported.all(|i| i.core_of().is_some())
}

/// Where the CPUs' own view and the firmware topology disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disagreement {
    /// These CPUs say they are threads of one core, but the firmware puts
    /// them in different cores: the scheduler would let them run two
    /// domains at once.
    SiblingsSplit {
        /// The CPUs (sorted).
        cpus: Vec<usize>,
    },
    /// The firmware makes these CPUs one core, but they say they are not
    /// threads of one core.
    NotSiblings {
        /// The CPUs (sorted).
        cpus: Vec<usize>,
    },
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SiblingsSplit { cpus } => write!(
                f,
                "cpus {cpus:?} say they are SMT threads of one core, but the firmware topology puts them in different cores"
            ),
            Self::NotSiblings { cpus } => write!(
                f,
                "the firmware topology makes cpus {cpus:?} one core, but they do not say they are threads of one core"
            ),
        }
    }
}

/// Compares the CPUs' sibling groups with the firmware `topology`'s cores.
/// Cores of the firmware whose CPUs disagree are only reported when every
/// CPU names its threads (otherwise the CPUs cannot say who is not a sibling).
pub fn disagreements(identities: &[Option<Identity>], topology: &Topology) -> Vec<Disagreement> {
    let groups = sibling_groups(identities);
    let mut found: Vec<Disagreement> = groups
        .iter()
        .filter(|g| {
            let core = topology.siblings(g[0], Granularity::Core);
            g.iter().any(|&c| !core.contains(c))
        })
        .map(|g| Disagreement::SiblingsSplit { cpus: g.clone() })
        .collect();
    if names_threads(identities) {
        let mut seen = CpuSet::new();
        for cpu in 0..identities.len().min(topology.len()) {
            if identities[cpu].is_none() || seen.contains(cpu) {
                continue;
            }
            let core: Vec<usize> = topology
                .siblings(cpu, Granularity::Core)
                .iter()
                .filter(|&c| identities.get(c).is_some_and(Option::is_some))
                .collect();
            seen = seen.union(&core.iter().copied().collect());
            let cores: Vec<Option<u64>> = core
                .iter()
                .map(|&c| identities[c].and_then(|i| i.core_of()))
                .collect();
            if cores.windows(2).any(|w| w[0] != w[1]) {
                found.push(Disagreement::NotSiblings { cpus: core });
            }
        }
    }
    found
}

/// The CPU groups the co-residency checker replays: every multi-CPU
/// resource of a pool scheduled at core, cluster or socket granularity (the
/// firmware's view, see [`crate::runtime::coresidency::shared_resources`]), and every
/// group of CPUs that say they are threads of one core, as far as they sit
/// in such pools (the CPUs' view: `siblings`, from [`sibling_groups`], which
/// never change after bring-up). A group that one resource already covers
/// is not repeated.
pub fn checked_groups(system: &System, siblings: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut groups = GroupsBuilder::default();
    groups.add(system);
    groups.finish(siblings)
}

/// [`checked_groups`] gathered from the parts of a partitioned system, one
/// part at a time (each knows only its own pools and CPUs).
#[derive(Default)]
pub struct GroupsBuilder {
    shared: Vec<Vec<usize>>,
    core_scheduled: sched::CpuSet,
}

impl GroupsBuilder {
    /// Adds what `system` (the whole machine or one part) knows.
    pub fn add(&mut self, system: &System) {
        self.shared
            .extend(crate::runtime::coresidency::shared_resources(system));
        for pool in system.pools() {
            if let Some(info) = system.pool_info(pool)
                && info.granularity != Granularity::Cpu
            {
                self.core_scheduled = self.core_scheduled.union(&info.cpus);
            }
        }
    }

    /// The groups to replay, given each core's threads (`siblings`).
    pub fn finish(self, siblings: &[Vec<usize>]) -> Vec<Vec<usize>> {
        let mut groups = self.shared;
        let core_scheduled = |cpu: usize| self.core_scheduled.contains(cpu);
        extend_with_siblings(&mut groups, siblings, core_scheduled);
        groups
    }
}

fn extend_with_siblings(
    groups: &mut Vec<Vec<usize>>,
    siblings: &[Vec<usize>],
    core_scheduled: impl Fn(usize) -> bool,
) {
    for siblings in siblings {
        let siblings: Vec<usize> = siblings
            .iter()
            .copied()
            .filter(|&c| core_scheduled(c))
            .collect();
        let covered = groups
            .iter()
            .any(|g| siblings.iter().all(|c| g.contains(c)));
        if siblings.len() > 1 && !covered {
            groups.push(siblings);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn x86(apic_id: u32) -> Option<Identity> {
        Some(Identity::X86 {
            apic_id,
            smt_shift: 1,
        })
    }

    #[test]
    fn x86_threads_are_grouped_by_their_apic_id() {
        let ids = [x86(0), x86(1), x86(2), x86(3), None, x86(5)];
        assert_eq!(sibling_groups(&ids), vec![vec![0, 1], vec![2, 3]]);
        assert!(names_threads(&ids));
        // A shift past the id's width puts every CPU in core 0.
        let wide = Identity::X86 {
            apic_id: 9,
            smt_shift: 40,
        };
        assert_eq!(wide.core_of(), Some(0));
    }

    #[test]
    fn arm_cpus_name_threads_only_with_mpidr_mt() {
        let thread = |aff1: u64, aff0: u64| {
            Some(Identity::Arm {
                mpidr: MPIDR_MT | (1 << 31) | (aff1 << 8) | aff0,
            })
        };
        let ids = [thread(0, 0), thread(0, 1), thread(1, 0), thread(1, 1)];
        assert_eq!(sibling_groups(&ids), vec![vec![0, 1], vec![2, 3]]);
        let cores = [
            Some(Identity::Arm { mpidr: 1 << 31 }),
            Some(Identity::Arm {
                mpidr: (1 << 31) | 1,
            }),
        ];
        assert!(sibling_groups(&cores).is_empty());
        assert!(!names_threads(&cores));
        assert!(!names_threads(&[None, None]));
    }

    #[test]
    fn a_firmware_without_threads_disagrees_with_smt_cpus() {
        // Four CPUs the firmware calls four cores; the CPUs say two cores.
        let flat = Topology::uniform(1, 1, 4, 1);
        let ids = [x86(0), x86(1), x86(2), x86(3)];
        let found = disagreements(&ids, &flat);
        assert_eq!(
            found,
            vec![
                Disagreement::SiblingsSplit { cpus: vec![0, 1] },
                Disagreement::SiblingsSplit { cpus: vec![2, 3] },
            ]
        );
        assert!(found[0].to_string().contains("different cores"));
        // The firmware that agrees.
        let smt = Topology::uniform(1, 1, 2, 2);
        assert!(disagreements(&ids, &smt).is_empty());
        // A firmware that pairs the wrong threads: both directions.
        let shifted = [x86(1), x86(2), x86(3), x86(4)];
        let found = disagreements(&shifted, &smt);
        assert!(found.contains(&Disagreement::SiblingsSplit { cpus: vec![1, 2] }));
        assert!(found.contains(&Disagreement::NotSiblings { cpus: vec![0, 1] }));
    }

    #[test]
    fn cpus_that_do_not_name_threads_cannot_contradict_firmware_cores() {
        let smt = Topology::uniform(1, 1, 2, 2);
        let ids: Vec<Option<Identity>> = (0..4)
            .map(|i| Some(Identity::Arm { mpidr: 1 << 31 | i }))
            .collect();
        assert!(disagreements(&ids, &smt).is_empty());
    }

    /// A firmware that forgets the threads (four "cores") under a core pool
    /// of CPUs 0-3 and a cpu pool of 4-7: the scheduler has no multi-CPU
    /// resource to check, so the checker replays the pairs the CPUs name,
    /// and only where core scheduling is promised.
    #[test]
    fn the_checker_replays_the_cpus_siblings_the_firmware_forgot() {
        use sched::lockstep::RecordingPlatform;
        use sched::{Placement, SystemConfig};
        let platform = RecordingPlatform::default();
        let mut system = System::new(
            Topology::uniform(1, 1, 8, 1),
            SystemConfig::default(),
            sched::schedulers::create,
        );
        let core = system
            .pool_create("credit2", Granularity::Core, Placement::Fixed)
            .unwrap();
        system
            .pool_add_cpus(core, (0..4).collect(), &platform)
            .unwrap();
        let cpu = system
            .pool_create("credit2", Granularity::Cpu, Placement::Fixed)
            .unwrap();
        system
            .pool_add_cpus(cpu, (4..8).collect(), &platform)
            .unwrap();
        assert!(crate::runtime::coresidency::shared_resources(&system).is_empty());
        let ids: Vec<Option<Identity>> = (0..8).map(x86).collect();
        assert_eq!(
            checked_groups(&system, &sibling_groups(&ids)),
            vec![vec![0, 1], vec![2, 3]]
        );
        // With the firmware's threads the resources already cover them.
        let mut system = System::new(
            Topology::uniform(1, 1, 4, 2),
            SystemConfig::default(),
            sched::schedulers::create,
        );
        system
            .boot_pool0("credit2", Granularity::Core, Placement::Fixed, &platform)
            .unwrap();
        let groups = checked_groups(&system, &sibling_groups(&ids));
        assert_eq!(groups.len(), 4);
        assert!(groups.contains(&vec![6, 7]));
    }
}
