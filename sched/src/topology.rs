//! The machine's CPU topology as the scheduler sees it: sockets, clusters, cores,
//! threads, hardware ids and capacities. The platform builds it from a device tree
//! or ACPI tables; tests build it directly.

use alloc::vec::Vec;
use core::fmt;

use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::granularity::Granularity;

/// One logical CPU. `socket` is global; `cluster` is numbered within its socket,
/// `core` within its cluster and `thread` within its core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTopology {
    /// Logical CPU index, dense from 0 in boot order.
    pub index: usize,
    /// Hardware id: the MPIDR affinity fields on ARM, the APIC id on x86.
    pub hw_id: u64,
    /// Socket (package) number.
    pub socket: u32,
    /// Cluster number within the socket.
    pub cluster: u32,
    /// Core number within the cluster.
    pub core: u32,
    /// Thread (SMT sibling) number within the core.
    pub thread: u32,
    /// Relative performance (`capacity-dmips-mhz`, or ACPI efficiency class
    /// scaled); `None` when the firmware gives none.
    pub capacity: Option<u32>,
    /// Whether the CPU can be used (firmware-enabled and, once the platform has
    /// tried, actually started).
    pub enabled: bool,
}

/// Why a list of CPUs is not a valid topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyError {
    /// No CPU at all.
    Empty,
    /// More CPUs than [`MAX_CPUS`].
    TooManyCpus {
        /// How many were given.
        count: usize,
    },
    /// `cpus[position].index != position`.
    IndexNotDense {
        /// Where in the list.
        position: usize,
        /// The index found there.
        index: usize,
    },
    /// Two CPUs claim the same hardware id.
    DuplicateHardwareId {
        /// The second CPU with that id.
        index: usize,
        /// The id.
        hw_id: u64,
    },
    /// Two CPUs claim the same socket/cluster/core/thread position.
    DuplicatePosition {
        /// The first CPU at that position.
        first: usize,
        /// The second CPU at that position.
        second: usize,
    },
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "topology has no CPU"),
            Self::TooManyCpus { count } => {
                write!(
                    f,
                    "topology has {count} CPUs, more than the supported {MAX_CPUS}"
                )
            }
            Self::IndexNotDense { position, index } => {
                write!(
                    f,
                    "CPU at position {position} has index {index}; indices must be 0..n in order"
                )
            }
            Self::DuplicateHardwareId { index, hw_id } => {
                write!(f, "CPU {index} repeats hardware id {hw_id:#x}")
            }
            Self::DuplicatePosition { first, second } => write!(
                f,
                "CPUs {first} and {second} claim the same socket/cluster/core/thread"
            ),
        }
    }
}

/// How many of each topology level a machine has, in total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopologyCounts {
    /// Sockets (packages).
    pub sockets: usize,
    /// Clusters, over all sockets.
    pub clusters: usize,
    /// Cores, over all clusters.
    pub cores: usize,
    /// Logical CPUs (hardware threads).
    pub threads: usize,
}

/// The banner's summary line: `sockets=1 clusters=2 cores=8 threads=8`.
impl fmt::Display for TopologyCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sockets={} clusters={} cores={} threads={}",
            self.sockets, self.clusters, self.cores, self.threads
        )
    }
}

/// A validated set of CPUs and their positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    cpus: Vec<CpuTopology>,
}

impl Topology {
    /// Checks `cpus` (indices dense in order, unique hardware ids and positions).
    pub fn new(cpus: Vec<CpuTopology>) -> Result<Self, TopologyError> {
        if cpus.is_empty() {
            return Err(TopologyError::Empty);
        }
        if cpus.len() > MAX_CPUS {
            return Err(TopologyError::TooManyCpus { count: cpus.len() });
        }
        for (position, cpu) in cpus.iter().enumerate() {
            if cpu.index != position {
                return Err(TopologyError::IndexNotDense {
                    position,
                    index: cpu.index,
                });
            }
            for earlier in &cpus[..position] {
                if earlier.hw_id == cpu.hw_id {
                    return Err(TopologyError::DuplicateHardwareId {
                        index: position,
                        hw_id: cpu.hw_id,
                    });
                }
                if earlier.position() == cpu.position() {
                    return Err(TopologyError::DuplicatePosition {
                        first: earlier.index,
                        second: position,
                    });
                }
            }
        }
        Ok(Self { cpus })
    }

    /// A regular machine: `sockets x clusters x cores x threads`, hardware ids
    /// equal to the index, no capacities. For tests and the simulator.
    pub fn uniform(sockets: u32, clusters: u32, cores: u32, threads: u32) -> Self {
        let mut cpus = Vec::new();
        for socket in 0..sockets {
            for cluster in 0..clusters {
                for core in 0..cores {
                    for thread in 0..threads {
                        let index = cpus.len();
                        cpus.push(CpuTopology {
                            index,
                            hw_id: index as u64,
                            socket,
                            cluster,
                            core,
                            thread,
                            capacity: None,
                            enabled: true,
                        });
                    }
                }
            }
        }
        Self::new(cpus).expect("a uniform topology is valid by construction")
    }

    /// All CPUs, by index.
    pub fn cpus(&self) -> &[CpuTopology] {
        &self.cpus
    }

    /// One CPU.
    pub fn cpu(&self, index: usize) -> Option<&CpuTopology> {
        self.cpus.get(index)
    }

    /// Number of CPUs (enabled or not).
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// Always false: a topology has at least one CPU.
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// The enabled CPUs.
    pub fn enabled(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.enabled)
            .map(|c| c.index)
            .collect()
    }

    /// Marks a CPU as not usable (e.g. it failed to start).
    pub fn disable(&mut self, index: usize) {
        if let Some(cpu) = self.cpus.get_mut(index) {
            cpu.enabled = false;
        }
    }

    /// The CPUs that share `cpu`'s resource at `granularity` (including `cpu`),
    /// enabled or not.
    pub fn siblings(&self, cpu: usize, granularity: Granularity) -> CpuSet {
        let Some(me) = self.cpus.get(cpu) else {
            return CpuSet::new();
        };
        self.cpus
            .iter()
            .filter(|other| granularity.same_resource(me, other))
            .map(|other| other.index)
            .collect()
    }

    /// Partitions `cpus` into the resources of `granularity`, ordered by their
    /// lowest CPU. Each group only holds CPUs from `cpus`.
    pub fn groups(&self, cpus: &CpuSet, granularity: Granularity) -> Vec<CpuSet> {
        let mut groups: Vec<CpuSet> = Vec::new();
        let mut seen = CpuSet::new();
        for cpu in cpus.iter() {
            if seen.contains(cpu) {
                continue;
            }
            let group = self.siblings(cpu, granularity).intersection(cpus);
            seen = seen.union(&group);
            groups.push(group);
        }
        groups
    }

    /// Totals as `(sockets, clusters, cores, threads)`, counting every CPU.
    pub fn counts(&self) -> TopologyCounts {
        let mut clusters: Vec<(u32, u32)> =
            self.cpus.iter().map(|c| (c.socket, c.cluster)).collect();
        clusters.sort_unstable();
        clusters.dedup();
        let mut cores: Vec<(u32, u32, u32)> = self
            .cpus
            .iter()
            .map(|c| (c.socket, c.cluster, c.core))
            .collect();
        cores.sort_unstable();
        cores.dedup();
        let mut sockets: Vec<u32> = self.cpus.iter().map(|c| c.socket).collect();
        sockets.sort_unstable();
        sockets.dedup();
        TopologyCounts {
            sockets: sockets.len(),
            clusters: clusters.len(),
            cores: cores.len(),
            threads: self.cpus.len(),
        }
    }

    /// Whether the machine has more than one capacity class (big.LITTLE).
    pub fn is_heterogeneous(&self) -> bool {
        let mut caps = self.cpus.iter().map(|c| c.capacity);
        let first = caps.next().flatten();
        caps.any(|c| c != first)
    }
}

impl CpuTopology {
    fn position(&self) -> (u32, u32, u32, u32) {
        (self.socket, self.cluster, self.core, self.thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_groups_by_granularity() {
        let topo = Topology::uniform(1, 2, 2, 2);
        let all = topo.enabled();
        assert_eq!(topo.groups(&all, Granularity::Cpu).len(), 8);
        let cores = topo.groups(&all, Granularity::Core);
        assert_eq!(cores.len(), 4);
        assert_eq!(cores[1].iter().collect::<Vec<_>>(), vec![2, 3]);
        let clusters = topo.groups(&all, Granularity::Cluster);
        assert_eq!(clusters.len(), 2);
        assert_eq!(clusters[1].iter().collect::<Vec<_>>(), vec![4, 5, 6, 7]);
        assert_eq!(topo.groups(&all, Granularity::Socket).len(), 1);
    }

    #[test]
    fn counts_every_level() {
        let counts = Topology::uniform(2, 2, 2, 2).counts();
        assert_eq!(
            (
                counts.sockets,
                counts.clusters,
                counts.cores,
                counts.threads
            ),
            (2, 4, 8, 16)
        );
        assert_eq!(
            Topology::uniform(1, 2, 4, 1).counts().to_string(),
            "sockets=1 clusters=2 cores=8 threads=8"
        );
    }

    #[test]
    fn rejects_bad_lists() {
        assert_eq!(Topology::new(Vec::new()), Err(TopologyError::Empty));
        let mut cpus = Topology::uniform(1, 1, 2, 1).cpus().to_vec();
        cpus[1].hw_id = cpus[0].hw_id;
        assert_eq!(
            Topology::new(cpus.clone()),
            Err(TopologyError::DuplicateHardwareId { index: 1, hw_id: 0 })
        );
        cpus[1].hw_id = 7;
        cpus[1].core = 0;
        assert_eq!(
            Topology::new(cpus.clone()),
            Err(TopologyError::DuplicatePosition {
                first: 0,
                second: 1
            })
        );
        cpus[1].index = 5;
        assert!(matches!(
            Topology::new(cpus),
            Err(TopologyError::IndexNotDense {
                position: 1,
                index: 5
            })
        ));
    }

    #[test]
    fn heterogeneous_when_capacities_differ() {
        let mut cpus = Topology::uniform(1, 2, 1, 1).cpus().to_vec();
        assert!(!Topology::new(cpus.clone()).unwrap().is_heterogeneous());
        cpus[0].capacity = Some(485);
        cpus[1].capacity = Some(1024);
        assert!(Topology::new(cpus).unwrap().is_heterogeneous());
    }
}
