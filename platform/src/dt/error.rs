//! What can be wrong with a device tree: fatal errors and warnings carried in the result.

use alloc::string::String;
use core::fmt;

use sched::TopologyError;

/// What is wrong inside the structure block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StructureProblem {
    /// A token that is none of BEGIN_NODE, END_NODE, PROP, NOP, END.
    UnknownToken {
        /// The token value.
        token: u32,
    },
    /// A node name that is unterminated or not UTF-8.
    BadNodeName,
    /// A property whose value runs past the structure block.
    PropertyOverrun,
    /// A property name offset outside the strings block, or an unterminated name.
    BadPropertyName {
        /// The offset into the strings block.
        name_offset: u32,
    },
    /// A property before the root node opened.
    PropertyOutsideNode,
    /// END_NODE with no open node.
    UnbalancedEndNode,
    /// A second top-level node.
    NodeAfterRoot,
    /// END while nodes are still open, or before any node.
    EarlyEnd,
    /// The structure block ends without an END token.
    MissingEnd,
    /// Nodes nested deeper than any real tree.
    TooDeep,
    /// The memory reservation block has no terminating (0, 0) entry.
    UnterminatedReservations,
}

impl fmt::Display for StructureProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownToken { token } => write!(f, "unknown token {token:#x}"),
            Self::BadNodeName => write!(f, "node name is unterminated or not UTF-8"),
            Self::PropertyOverrun => write!(f, "property value runs past the structure block"),
            Self::BadPropertyName { name_offset } => {
                write!(
                    f,
                    "property name offset {name_offset:#x} is outside the strings block or unterminated"
                )
            }
            Self::PropertyOutsideNode => write!(f, "property outside any node"),
            Self::UnbalancedEndNode => write!(f, "END_NODE without an open node"),
            Self::NodeAfterRoot => write!(f, "a second root node"),
            Self::EarlyEnd => write!(f, "END token while nodes are still open"),
            Self::MissingEnd => write!(f, "structure block ends without an END token"),
            Self::TooDeep => write!(f, "nodes nested too deep"),
            Self::UnterminatedReservations => {
                write!(f, "memory reservation block has no (0, 0) terminator")
            }
        }
    }
}

/// Why a blob cannot be used at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtError {
    /// The blob is shorter than its header or than the header's `totalsize`.
    Truncated {
        /// Bytes the header says (or the header itself needs).
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    /// The first word is not `0xd00dfeed`.
    BadMagic {
        /// The word found.
        found: u32,
    },
    /// A layout version this reader does not understand (needs v17-compatible).
    UnsupportedVersion {
        /// `version` from the header.
        version: u32,
        /// `last_comp_version` from the header.
        last_compatible: u32,
    },
    /// A block the header points to lies outside the blob.
    BlockOutOfBounds {
        /// Which block.
        block: &'static str,
        /// Its offset.
        offset: usize,
        /// Its size.
        size: usize,
        /// The header's `totalsize`.
        total_size: usize,
    },
    /// The structure or reservation block is malformed.
    Structure {
        /// Byte offset in the blob.
        offset: usize,
        /// What is wrong there.
        problem: StructureProblem,
    },
    /// There is no `/cpus` node.
    NoCpusNode,
    /// `/cpus` has no usable `cpu@` node (enabled, with a valid `reg`).
    NoUsableCpu,
    /// The CPUs do not form a valid scheduler topology.
    Topology(TopologyError),
    /// No memory region was found (needed to boot; see `MachineDescription::check_bootable`).
    NoMemory,
    /// No supported interrupt controller was found (needed to boot).
    NoGic,
}

impl From<TopologyError> for DtError {
    fn from(error: TopologyError) -> Self {
        Self::Topology(error)
    }
}

impl fmt::Display for DtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, available } => {
                write!(
                    f,
                    "device tree truncated: needs {needed} bytes, only {available} given"
                )
            }
            Self::BadMagic { found } => write!(
                f,
                "not a device tree: magic is {found:#010x}, expected 0xd00dfeed"
            ),
            Self::UnsupportedVersion {
                version,
                last_compatible,
            } => write!(
                f,
                "device tree version {version} (last compatible {last_compatible}) is not supported; need v17"
            ),
            Self::BlockOutOfBounds {
                block,
                offset,
                size,
                total_size,
            } => write!(
                f,
                "device tree {block} block at {offset:#x} (+{size:#x}) lies outside the blob's {total_size:#x} bytes"
            ),
            Self::Structure { offset, problem } => {
                write!(f, "malformed device tree at byte {offset:#x}: {problem}")
            }
            Self::NoCpusNode => write!(f, "device tree has no /cpus node"),
            Self::NoUsableCpu => write!(
                f,
                "device tree has no usable CPU under /cpus (enabled, with a valid reg)"
            ),
            Self::Topology(error) => write!(f, "device tree CPUs: {error}"),
            Self::NoMemory => write!(f, "device tree describes no memory (/memory reg)"),
            Self::NoGic => write!(
                f,
                "device tree has no supported GIC (interrupt-controller with a GIC compatible)"
            ),
        }
    }
}

/// Something wrong that the parser worked around; the boot log prints each one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DtWarning {
    /// A cpu node without `reg`: skipped.
    CpuWithoutReg {
        /// The node.
        path: String,
    },
    /// A cpu node whose `reg` does not match `#address-cells` of `/cpus`: skipped.
    CpuBadReg {
        /// The node.
        path: String,
        /// Length of `reg` in bytes.
        length: usize,
        /// `#address-cells` of `/cpus`.
        address_cells: u32,
    },
    /// A cpu node whose `reg` has bits outside the MPIDR affinity fields: skipped.
    CpuBadMpidr {
        /// The node.
        path: String,
        /// The value of `reg`.
        value: u64,
    },
    /// Two cpu nodes with the same MPIDR: the later one is skipped.
    DuplicateMpidr {
        /// The skipped node.
        path: String,
        /// The node that has it first.
        first: String,
        /// The MPIDR affinity value.
        mpidr: u64,
    },
    /// An `enable-method` other than "psci" and "spin-table": the CPU cannot be started.
    UnknownEnableMethod {
        /// The node.
        path: String,
        /// The method named.
        method: String,
    },
    /// No `enable-method`: only usable as the boot CPU.
    MissingEnableMethod {
        /// The node.
        path: String,
    },
    /// `enable-method = "spin-table"` without a valid `cpu-release-addr`.
    SpinTableWithoutReleaseAddress {
        /// The node.
        path: String,
    },
    /// Some CPUs have `capacity-dmips-mhz` and some do not.
    PartialCapacity {
        /// A node without it.
        path: String,
    },
    /// A `cpu-map` entry's `cpu` names no node.
    CpuMapMissingPhandle {
        /// The cpu-map node.
        path: String,
        /// The phandle.
        phandle: u32,
    },
    /// A `cpu-map` entry's `cpu` names a node that is not a usable CPU.
    CpuMapNotACpu {
        /// The cpu-map node.
        path: String,
        /// The node it points at.
        target: String,
    },
    /// A CPU listed twice in `cpu-map`.
    CpuMapDuplicate {
        /// The second cpu-map node.
        path: String,
        /// The CPU.
        cpu: String,
    },
    /// A CPU that `cpu-map` does not list.
    CpuMapIncomplete {
        /// The CPU.
        cpu: String,
    },
    /// A `cpu-map` node that breaks the binding (e.g. a core without `cpu` or threads).
    CpuMapMalformed {
        /// The node.
        path: String,
        /// What is wrong.
        problem: &'static str,
    },
    /// No `/memory` node with a usable `reg`.
    NoMemoryNode,
    /// A memory region of size 0 (often filled in by the bootloader): skipped.
    EmptyMemoryRegion {
        /// The node.
        path: String,
    },
    /// A `reg` (or `ranges`) that cannot be decoded or translated to a CPU address.
    BadReg {
        /// The node.
        path: String,
        /// The property.
        property: &'static str,
    },
    /// An interrupt controller whose compatible is not a GIC we support.
    UnknownGic {
        /// The node.
        path: String,
        /// Its compatible strings, `;`-separated.
        compatible: String,
    },
    /// No GIC found.
    NoGic,
    /// A GIC with fewer `reg` regions than its version needs.
    GicMissingRegions {
        /// The node.
        path: String,
        /// How many regions it has.
        found: usize,
        /// How many are needed (GICD + GICC or GICD + GICR).
        needed: usize,
    },
    /// `/psci` with a `method` other than "smc" or "hvc".
    PsciBadMethod {
        /// The node.
        path: String,
        /// What `method` says (empty if absent).
        method: String,
    },
    /// A CPU uses PSCI but there is no `/psci` node.
    PsciMissing,
    /// `/chosen/stdout-path` names no node (or an unknown alias).
    ConsoleNotFound {
        /// The stdout-path value.
        stdout_path: String,
    },
    /// No console UART could be found.
    NoConsole,
    /// The architected timer's `interrupts` cannot be decoded.
    TimerBadInterrupts {
        /// The node.
        path: String,
    },
    /// No `arm,armv8-timer` node.
    NoTimer,
}

impl fmt::Display for DtWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CpuWithoutReg { path } => write!(f, "{path}: cpu node has no reg; CPU skipped"),
            Self::CpuBadReg {
                path,
                length,
                address_cells,
            } => write!(
                f,
                "{path}: reg is {length} bytes but /cpus #address-cells is {address_cells}; CPU skipped"
            ),
            Self::CpuBadMpidr { path, value } => write!(
                f,
                "{path}: reg {value:#x} has bits outside the MPIDR affinity fields (mask 0xff00ffffff); CPU skipped"
            ),
            Self::DuplicateMpidr { path, first, mpidr } => {
                write!(
                    f,
                    "{path}: MPIDR {mpidr:#x} already used by {first}; CPU skipped"
                )
            }
            Self::UnknownEnableMethod { path, method } => {
                write!(
                    f,
                    "{path}: unknown enable-method \"{method}\"; the CPU cannot be started"
                )
            }
            Self::MissingEnableMethod { path } => {
                write!(
                    f,
                    "{path}: no enable-method; the CPU can only be the boot CPU"
                )
            }
            Self::SpinTableWithoutReleaseAddress { path } => {
                write!(
                    f,
                    "{path}: enable-method \"spin-table\" without a valid cpu-release-addr"
                )
            }
            Self::PartialCapacity { path } => write!(
                f,
                "{path}: no capacity-dmips-mhz while other CPUs have one; capacities are incomplete"
            ),
            Self::CpuMapMissingPhandle { path, phandle } => write!(
                f,
                "{path}: cpu = <{phandle:#x}> names no node; cpu-map ignored, clustering by MPIDR Aff1"
            ),
            Self::CpuMapNotACpu { path, target } => write!(
                f,
                "{path}: cpu points at {target}, which is not a usable cpu node; cpu-map ignored, clustering by MPIDR Aff1"
            ),
            Self::CpuMapDuplicate { path, cpu } => write!(
                f,
                "{path}: {cpu} is listed twice in cpu-map; cpu-map ignored, clustering by MPIDR Aff1"
            ),
            Self::CpuMapIncomplete { cpu } => write!(
                f,
                "{cpu}: not listed in /cpus/cpu-map; cpu-map ignored, clustering by MPIDR Aff1"
            ),
            Self::CpuMapMalformed { path, problem } => {
                write!(
                    f,
                    "{path}: {problem}; cpu-map ignored, clustering by MPIDR Aff1"
                )
            }
            Self::NoMemoryNode => write!(
                f,
                "no /memory node with a usable reg (the bootloader may add one)"
            ),
            Self::EmptyMemoryRegion { path } => {
                write!(f, "{path}: memory region of size 0 skipped")
            }
            Self::BadReg { path, property } => {
                write!(
                    f,
                    "{path}: {property} cannot be decoded or translated to a CPU address"
                )
            }
            Self::UnknownGic { path, compatible } => {
                write!(
                    f,
                    "{path}: interrupt controller \"{compatible}\" is not a supported GIC"
                )
            }
            Self::NoGic => write!(
                f,
                "no GIC (arm,gic-v3, arm,gic-400, arm,cortex-a15-gic, ...) found"
            ),
            Self::GicMissingRegions {
                path,
                found,
                needed,
            } => {
                write!(
                    f,
                    "{path}: GIC has {found} reg regions, needs at least {needed}"
                )
            }
            Self::PsciBadMethod { path, method } => {
                write!(
                    f,
                    "{path}: method \"{method}\" is neither \"smc\" nor \"hvc\"; PSCI unusable"
                )
            }
            Self::PsciMissing => write!(
                f,
                "CPUs use enable-method \"psci\" but there is no usable /psci node"
            ),
            Self::ConsoleNotFound { stdout_path } => {
                write!(f, "/chosen: stdout-path \"{stdout_path}\" names no node")
            }
            Self::NoConsole => write!(f, "no console UART found (no stdout-path, no arm,pl011)"),
            Self::TimerBadInterrupts { path } => {
                write!(f, "{path}: interrupts cannot be decoded as GIC PPIs")
            }
            Self::NoTimer => write!(f, "no arm,armv8-timer node"),
        }
    }
}
