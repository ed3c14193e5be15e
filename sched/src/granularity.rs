//! Scheduling granularity: which CPUs form one sched resource.

use core::fmt;
use core::str::FromStr;

use crate::topology::CpuTopology;

/// How many CPUs are always scheduled together (Xen's `sched-gran=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Granularity {
    /// Every CPU is its own resource.
    Cpu,
    /// All SMT threads of a core.
    Core,
    /// All CPUs of a cluster.
    Cluster,
    /// All CPUs of a socket.
    Socket,
}

impl Granularity {
    /// Every granularity, finest first.
    pub const ALL: [Granularity; 4] = [Self::Cpu, Self::Core, Self::Cluster, Self::Socket];

    /// The name used in configs and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Core => "core",
            Self::Cluster => "cluster",
            Self::Socket => "socket",
        }
    }

    /// Whether `a` and `b` belong to the same resource at this granularity.
    pub fn same_resource(self, a: &CpuTopology, b: &CpuTopology) -> bool {
        match self {
            Self::Cpu => a.index == b.index,
            Self::Core => (a.socket, a.cluster, a.core) == (b.socket, b.cluster, b.core),
            Self::Cluster => (a.socket, a.cluster) == (b.socket, b.cluster),
            Self::Socket => a.socket == b.socket,
        }
    }
}

/// An unknown granularity name; the message lists the valid ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownGranularity;

impl fmt::Display for UnknownGranularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown granularity; valid: cpu, core, cluster, socket")
    }
}

impl FromStr for Granularity {
    type Err = UnknownGranularity;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or(UnknownGranularity)
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
