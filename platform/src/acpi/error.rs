//! What can go wrong reading ACPI tables, and what is worked around.

use core::fmt;

use sched::TopologyError;

/// A table signature ("APIC", "PPTT", ...), printed as text.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Signature(pub [u8; 4]);

impl Signature {
    /// MADT.
    pub const MADT: Self = Self(*b"APIC");
    /// PPTT.
    pub const PPTT: Self = Self(*b"PPTT");
    /// FADT.
    pub const FADT: Self = Self(*b"FACP");
    /// SPCR.
    pub const SPCR: Self = Self(*b"SPCR");
    /// GTDT.
    pub const GTDT: Self = Self(*b"GTDT");
    /// RSDT.
    pub const RSDT: Self = Self(*b"RSDT");
    /// XSDT.
    pub const XSDT: Self = Self(*b"XSDT");
    /// Not a table: used in errors about the RSDP.
    pub const RSDP: Self = Self(*b"RSD ");

    /// The signature of `bytes`, if it has four bytes.
    pub fn of(bytes: &[u8]) -> Option<Self> {
        bytes.get(..4)?.try_into().ok().map(Self)
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &byte in &self.0 {
            let c = if byte.is_ascii_graphic() || byte == b' ' {
                char::from(byte)
            } else {
                '?'
            };
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Why a table (or the RSDP, or an acpidump text) cannot be used. Every variant
/// names the table and, where there is one, the byte offset inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcpiError {
    /// Fewer bytes than the structure needs.
    TooShort {
        /// The table.
        table: Signature,
        /// Bytes available.
        length: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// The header's length is larger than the bytes given.
    Truncated {
        /// The table.
        table: Signature,
        /// The header's length field.
        header_length: u32,
        /// Bytes available.
        available: usize,
    },
    /// The header's length is absurd (over [`super::MAX_TABLE_LENGTH`]).
    TooLarge {
        /// The table.
        table: Signature,
        /// The header's length field.
        header_length: u32,
    },
    /// The bytes of the table do not sum to zero.
    BadChecksum {
        /// The table.
        table: Signature,
        /// The sum of all bytes (0 when valid).
        sum: u8,
    },
    /// A table with a different signature than the one asked for.
    WrongSignature {
        /// What was asked for.
        expected: Signature,
        /// What was found.
        found: Signature,
    },
    /// The RSDP is malformed.
    BadRsdp {
        /// What is wrong.
        problem: &'static str,
    },
    /// A subtable whose length field is below 2 (it would never advance).
    ZeroLengthEntry {
        /// The table.
        table: Signature,
        /// Offset of the entry in the table.
        offset: usize,
        /// The entry type.
        entry_type: u8,
        /// Its length field.
        length: u8,
    },
    /// A subtable that runs past the end of its table.
    TruncatedEntry {
        /// The table.
        table: Signature,
        /// Offset of the entry in the table.
        offset: usize,
        /// The entry type.
        entry_type: u8,
        /// Its length field.
        length: usize,
        /// Bytes left in the table from `offset`.
        remaining: usize,
    },
    /// A subtable shorter than its type's fixed fields.
    EntryTooShort {
        /// The table.
        table: Signature,
        /// Offset of the entry in the table.
        offset: usize,
        /// The entry type.
        entry_type: u8,
        /// Its length field.
        length: usize,
        /// The smallest length this parser can read.
        minimum: usize,
    },
    /// A PPTT node's parent offset does not point at a processor hierarchy node.
    PpttBadParent {
        /// Offset of the node.
        offset: usize,
        /// Its parent field.
        parent: u32,
    },
    /// Following PPTT parent links from `offset` comes back to a node already seen.
    PpttCycle {
        /// The node the walk started from.
        offset: usize,
    },
    /// No PPTT leaf node carries this ACPI processor UID.
    PpttMissingProcessor {
        /// The ACPI processor UID (from the MADT).
        uid: u32,
    },
    /// Two enabled processors land on the same PPTT leaf (their GICCs share a UID).
    PpttSharedLeaf {
        /// The ACPI processor UID.
        uid: u32,
    },
    /// The physical-memory callback could not read a range.
    MemoryRead {
        /// What was being read.
        table: Signature,
        /// Physical address.
        address: u64,
        /// Bytes asked for.
        length: usize,
    },
    /// A table the boot cannot do without is not there.
    MissingTable {
        /// The table.
        table: Signature,
    },
    /// The MADT describes no enabled processor of the kind asked for.
    NoUsableCpu {
        /// "GICC" or "local APIC/x2APIC".
        kind: &'static str,
    },
    /// The CPUs do not form a valid topology.
    Topology(TopologyError),
    /// A line of `acpidump` text cannot be read.
    Acpidump {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: &'static str,
    },
}

impl From<TopologyError> for AcpiError {
    fn from(error: TopologyError) -> Self {
        Self::Topology(error)
    }
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort {
                table,
                length,
                needed,
            } => write!(
                f,
                "{table}: only {length} bytes, at least {needed} needed (truncated)"
            ),
            Self::Truncated {
                table,
                header_length,
                available,
            } => write!(
                f,
                "{table}: header says {header_length} bytes but only {available} are there (truncated)"
            ),
            Self::TooLarge {
                table,
                header_length,
            } => write!(f, "{table}: implausible table length {header_length}"),
            Self::BadChecksum { table, sum } => write!(
                f,
                "{table}: bad checksum (bytes sum to {sum:#04x}, must be 0)"
            ),
            Self::WrongSignature { expected, found } => {
                write!(f, "expected table {expected}, found {found}")
            }
            Self::BadRsdp { problem } => write!(f, "RSDP: {problem}"),
            Self::ZeroLengthEntry {
                table,
                offset,
                entry_type,
                length,
            } => write!(
                f,
                "{table}: entry type {entry_type:#04x} at offset {offset:#x} has length {length}"
            ),
            Self::TruncatedEntry {
                table,
                offset,
                entry_type,
                length,
                remaining,
            } => write!(
                f,
                "{table}: entry type {entry_type:#04x} at offset {offset:#x} is {length} bytes but \
                 only {remaining} remain (truncated)"
            ),
            Self::EntryTooShort {
                table,
                offset,
                entry_type,
                length,
                minimum,
            } => write!(
                f,
                "{table}: entry type {entry_type:#04x} at offset {offset:#x} is {length} bytes, \
                 shorter than its {minimum} fixed bytes (truncated)"
            ),
            Self::PpttBadParent { offset, parent } => write!(
                f,
                "PPTT: node at offset {offset:#x} has parent {parent:#x}, which is not a processor node"
            ),
            Self::PpttCycle { offset } => write!(
                f,
                "PPTT: parent links from the node at offset {offset:#x} form a cycle"
            ),
            Self::PpttMissingProcessor { uid } => write!(
                f,
                "PPTT: no leaf processor node has ACPI processor UID {uid:#x}"
            ),
            Self::PpttSharedLeaf { uid } => write!(
                f,
                "PPTT: more than one enabled GICC maps to the leaf of ACPI processor UID {uid:#x}"
            ),
            Self::MemoryRead {
                table,
                address,
                length,
            } => write!(
                f,
                "{table}: cannot read {length} bytes of physical memory at {address:#x}"
            ),
            Self::MissingTable { table } => write!(f, "no {table} table"),
            Self::NoUsableCpu { kind } => write!(f, "APIC: no enabled {kind} entry"),
            Self::Topology(error) => write!(f, "topology: {error}"),
            Self::Acpidump { line, problem } => write!(f, "acpidump text line {line}: {problem}"),
        }
    }
}

/// Something wrong in a table that was worked around. Each names the table and offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcpiWarning {
    /// A subtable type this parser does not know; skipped.
    UnknownEntry {
        /// The table.
        table: Signature,
        /// Offset of the entry.
        offset: usize,
        /// Its type.
        entry_type: u8,
    },
    /// An enabled processor entry repeats an id already seen; the later one is ignored.
    DuplicateId {
        /// Offset of the ignored entry in the MADT.
        offset: usize,
        /// The MPIDR or APIC id.
        id: u64,
    },
    /// A GICC MPIDR with bits outside the affinity fields; the entry is ignored.
    BadMpidr {
        /// Offset of the entry in the MADT.
        offset: usize,
        /// The value.
        mpidr: u64,
    },
    /// The PPTT could not place every CPU; the MPIDR fallback was used.
    PpttUnusable {
        /// Why.
        reason: AcpiError,
    },
    /// An enabled x2APIC/local APIC entry with an id that marks "not present" (0xFF/0xFFFFFFFF); ignored.
    InvalidApicId {
        /// Offset of the entry in the MADT.
        offset: usize,
        /// The id.
        id: u32,
    },
    /// Efficiency classes are given for some CPUs only; capacities are left out.
    PartialEfficiencyClass,
}

impl fmt::Display for AcpiWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownEntry {
                table,
                offset,
                entry_type,
            } => write!(
                f,
                "{table}: unknown entry type {entry_type:#04x} at offset {offset:#x} skipped"
            ),
            Self::DuplicateId { offset, id } => write!(
                f,
                "APIC: entry at offset {offset:#x} repeats processor id {id:#x}; ignored"
            ),
            Self::BadMpidr { offset, mpidr } => write!(
                f,
                "APIC: GICC at offset {offset:#x} has MPIDR {mpidr:#x} with non-affinity bits; ignored"
            ),
            Self::PpttUnusable { reason } => {
                write!(f, "{reason}; PPTT ignored, topology from MPIDR")
            }
            Self::InvalidApicId { offset, id } => write!(
                f,
                "APIC: enabled entry at offset {offset:#x} has the invalid APIC id {id:#x}; ignored"
            ),
            Self::PartialEfficiencyClass => write!(
                f,
                "APIC: GICC efficiency class missing on some CPUs; capacities left out"
            ),
        }
    }
}
