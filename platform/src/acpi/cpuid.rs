//! x86 APIC-id layouts from CPUID, decoded from raw register values.
//!
//! The boot code runs `cpuid` and passes `(eax, ebx, ecx, edx)` in, so the decoding
//! is pure and host-tested. Decoded by hand rather than through `raw-cpuid`: that
//! crate's types are built by executing CPUID through its reader, while the values
//! here are recorded on each CPU at bring-up and decoded later (and on the host for
//! tests); the few bit fields involved are below, with their SDM/APM references.

use alloc::vec::Vec;
use core::fmt;

/// How an APIC id splits into package, cluster, core and thread fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApicIdLayout {
    /// Low bits that number the thread within its core (leaf 0xB SMT-level shift).
    pub smt_shift: u32,
    /// Bits below the package id: `package = id >> core_shift` (the shift leaf 0xB
    /// reports at its core level, or AMD's ApicIdCoreIdSize).
    pub core_shift: u32,
    /// Bits below the cluster id, when CPUID names a group between core and package
    /// (a leaf 0x1F module/tile/die level, or the sharing width of the L3 from leaf 4
    /// or 0x8000001D); `None` makes the package one cluster.
    pub cluster_shift: Option<u32>,
}

/// `(1 << bits) - 1` for `bits` up to 32, without overflow.
fn mask(bits: u32) -> u64 {
    (1u64 << bits.min(32)) - 1
}

/// Smallest `s` with `1 << s >= n` (0 for n <= 1).
pub fn ceil_log2(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// An APIC id split by an [`ApicIdLayout`]: raw field values, not dense numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApicIdFields {
    /// Package id.
    pub package: u32,
    /// Cluster id within the package (0 without a cluster level).
    pub cluster: u32,
    /// Core id within the cluster.
    pub core: u32,
    /// Thread id within the core.
    pub thread: u32,
}

impl ApicIdLayout {
    /// A layout with `smt_shift <= core_shift <= 32`, else `None`.
    pub fn new(smt_shift: u32, core_shift: u32) -> Option<Self> {
        (smt_shift <= core_shift && core_shift <= 32).then_some(Self {
            smt_shift,
            core_shift,
            cluster_shift: None,
        })
    }

    /// Adds a cluster level (`smt_shift <= cluster_shift <= core_shift`), else `None`.
    pub fn with_cluster_shift(self, cluster_shift: u32) -> Option<Self> {
        (self.smt_shift <= cluster_shift && cluster_shift <= self.core_shift).then_some(Self {
            cluster_shift: Some(cluster_shift),
            ..self
        })
    }

    /// Splits `apic_id`. Shifts out of order are clamped so nothing overflows.
    pub fn split(&self, apic_id: u32) -> ApicIdFields {
        let id = u64::from(apic_id);
        let core_shift = self.core_shift.min(32);
        let smt_shift = self.smt_shift.min(core_shift);
        let cluster_shift = self
            .cluster_shift
            .unwrap_or(core_shift)
            .clamp(smt_shift, core_shift);
        let field = |low: u32, high: u32| ((id & mask(high)) >> low) as u32;
        ApicIdFields {
            package: (id >> core_shift) as u32,
            cluster: field(cluster_shift, core_shift),
            core: field(smt_shift, cluster_shift),
            thread: field(0, smt_shift),
        }
    }
}

impl fmt::Display for ApicIdLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "smt shift {}, core shift {}",
            self.smt_shift, self.core_shift
        )?;
        if let Some(cluster) = self.cluster_shift {
            write!(f, ", cluster shift {cluster}")?;
        }
        Ok(())
    }
}

/// The level type of a leaf 0xB / 0x1F subleaf (ECX bits 15:8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelType {
    /// 1: SMT.
    Smt,
    /// 2: core.
    Core,
    /// 3: module (leaf 0x1F).
    Module,
    /// 4: tile (leaf 0x1F).
    Tile,
    /// 5: die (leaf 0x1F).
    Die,
    /// Another non-zero type.
    Other(u8),
}

/// One subleaf of CPUID leaf 0xB or 0x1F (Intel SDM vol. 2A, CPUID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopologyLevel {
    /// Level number (ECX 7:0), equal to the subleaf.
    pub number: u8,
    /// Level type.
    pub level_type: LevelType,
    /// Bits to shift the x2APIC id right to get the next level's id (EAX 4:0).
    pub shift: u32,
    /// Logical processors at this level (EBX 15:0; informational only).
    pub logical_processors: u32,
    /// This CPU's x2APIC id (EDX).
    pub x2apic_id: u32,
}

/// Decodes one subleaf of leaf 0xB/0x1F; `None` for the terminating invalid level
/// (type 0).
pub fn decode_topology_level(eax: u32, ebx: u32, ecx: u32, edx: u32) -> Option<TopologyLevel> {
    let level_type = match (ecx >> 8) as u8 {
        0 => return None,
        1 => LevelType::Smt,
        2 => LevelType::Core,
        3 => LevelType::Module,
        4 => LevelType::Tile,
        5 => LevelType::Die,
        other => LevelType::Other(other),
    };
    Some(TopologyLevel {
        number: ecx as u8,
        level_type,
        shift: eax & 0x1f,
        logical_processors: ebx & 0xffff,
        x2apic_id: edx,
    })
}

/// Why CPUID values do not give a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuidError {
    /// No valid level at all (leaf 0xB/0x1F not supported).
    NoLevels,
    /// Shifts do not grow from one level to the next.
    ShiftsOutOfOrder {
        /// The level number where the shift shrinks.
        level: u8,
    },
}

impl fmt::Display for CpuidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLevels => write!(f, "CPUID topology leaf has no valid level"),
            Self::ShiftsOutOfOrder { level } => {
                write!(
                    f,
                    "CPUID topology level {level} has a smaller shift than the one below"
                )
            }
        }
    }
}

/// The layout from the decoded subleaves of leaf 0xB or 0x1F, in subleaf order
/// (stop at the first `None` from [`decode_topology_level`]). The SMT level gives
/// `smt_shift`; the last level's shift is the package shift; when a level sits
/// between core and package (module, tile, die), the core level's shift starts the
/// cluster id.
pub fn layout_from_topology_levels(levels: &[TopologyLevel]) -> Result<ApicIdLayout, CpuidError> {
    let last = levels.last().ok_or(CpuidError::NoLevels)?;
    for pair in levels.windows(2) {
        if pair[1].shift < pair[0].shift {
            return Err(CpuidError::ShiftsOutOfOrder {
                level: pair[1].number,
            });
        }
    }
    let smt_shift = levels
        .iter()
        .find(|level| level.level_type == LevelType::Smt)
        .map_or(0, |level| level.shift);
    let cluster_shift = levels
        .iter()
        .find(|level| level.level_type == LevelType::Core)
        .filter(|core| core.shift < last.shift && core.number < last.number)
        .map(|core| core.shift);
    let layout = ApicIdLayout {
        smt_shift: smt_shift.min(last.shift),
        core_shift: last.shift,
        cluster_shift,
    };
    Ok(layout)
}

/// AMD: the layout from leaf 0x8000_0008 ECX (NC in 7:0, ApicIdCoreIdSize in 15:12)
/// and, when supported, leaf 0x8000_001E EBX (ThreadsPerCore - 1 in 15:8) (AMD APM
/// vol. 3, appendix E.4).
pub fn layout_from_amd(leaf_8000_0008_ecx: u32, leaf_8000_001e_ebx: Option<u32>) -> ApicIdLayout {
    let id_size = (leaf_8000_0008_ecx >> 12) & 0xf;
    let logical = (leaf_8000_0008_ecx & 0xff) + 1;
    let core_shift = if id_size != 0 {
        id_size
    } else {
        ceil_log2(logical)
    };
    let threads = leaf_8000_001e_ebx.map_or(1, |ebx| ((ebx >> 8) & 0xff) + 1);
    ApicIdLayout {
        smt_shift: ceil_log2(threads).min(core_shift),
        core_shift,
        cluster_shift: None,
    }
}

/// Pre-leaf-0xB Intel CPUs: leaf 1 EBX (logical processors per package in 23:16)
/// and leaf 4 subleaf 0 EAX (cores per package - 1 in 31:26).
pub fn layout_from_legacy(leaf_1_ebx: u32, leaf_4_eax: u32) -> ApicIdLayout {
    let logical = ((leaf_1_ebx >> 16) & 0xff).max(1);
    let cores = ((leaf_4_eax >> 26) & 0x3f) + 1;
    let core_shift = ceil_log2(logical);
    ApicIdLayout {
        smt_shift: ceil_log2(logical.div_ceil(cores)).min(core_shift),
        core_shift,
        cluster_shift: None,
    }
}

/// One cache from leaf 4 (Intel) or 0x8000_001D (AMD), EAX only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSharing {
    /// Cache level (EAX 7:5).
    pub level: u8,
    /// 1 data, 2 instruction, 3 unified, 0 no more caches (EAX 4:0).
    pub cache_type: u8,
    /// Maximum logical processors sharing it (EAX 25:14, plus one).
    pub logical_processors: u32,
}

impl CacheSharing {
    /// Decodes EAX of a cache subleaf; `None` for type 0 (no more caches).
    pub fn decode(eax: u32) -> Option<Self> {
        let cache_type = (eax & 0x1f) as u8;
        (cache_type != 0).then_some(Self {
            level: ((eax >> 5) & 0x7) as u8,
            cache_type,
            logical_processors: ((eax >> 14) & 0xfff) + 1,
        })
    }

    /// APIC-id bits below the id of the group sharing this cache: a cluster shift
    /// when the cache is the L3 of an AMD CCX.
    pub fn shift(&self) -> u32 {
        ceil_log2(self.logical_processors)
    }
}

/// What one CPU reported when it ran CPUID at bring-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuidObservation {
    /// The APIC id of the MADT entry the boot code started.
    pub madt_apic_id: u32,
    /// The id the CPU read from CPUID (leaf 0xB EDX, or leaf 1 EBX 31:24).
    pub cpuid_apic_id: u32,
    /// The layout the CPU decoded, if it could.
    pub layout: Option<ApicIdLayout>,
}

/// Where the MADT and what the CPUs report disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disagreement {
    /// The CPU started for a MADT entry reports another id.
    IdMismatch {
        /// The MADT's id.
        madt_apic_id: u32,
        /// The CPU's own.
        cpuid_apic_id: u32,
    },
    /// A CPU reports an id no enabled MADT entry has.
    NotInMadt {
        /// The CPU's id.
        cpuid_apic_id: u32,
    },
    /// Two CPUs report the same id.
    ReportedTwice {
        /// The id.
        cpuid_apic_id: u32,
    },
    /// An enabled MADT entry for which no CPU reported.
    Silent {
        /// The MADT's id.
        madt_apic_id: u32,
    },
    /// A CPU decodes a different layout than the first CPU did.
    LayoutDiffers {
        /// The CPU's id.
        cpuid_apic_id: u32,
        /// Its layout.
        layout: ApicIdLayout,
        /// The first CPU's layout.
        first: ApicIdLayout,
    },
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IdMismatch {
                madt_apic_id,
                cpuid_apic_id,
            } => write!(
                f,
                "CPU started for MADT APIC id {madt_apic_id:#x} reports id {cpuid_apic_id:#x}"
            ),
            Self::NotInMadt { cpuid_apic_id } => {
                write!(f, "APIC id {cpuid_apic_id:#x} is not an enabled MADT entry")
            }
            Self::ReportedTwice { cpuid_apic_id } => {
                write!(f, "two CPUs report APIC id {cpuid_apic_id:#x}")
            }
            Self::Silent { madt_apic_id } => {
                write!(f, "no CPU reported for MADT APIC id {madt_apic_id:#x}")
            }
            Self::LayoutDiffers {
                cpuid_apic_id,
                layout,
                first,
            } => write!(
                f,
                "APIC id {cpuid_apic_id:#x} decodes layout ({layout}), the first CPU ({first})"
            ),
        }
    }
}

/// Compares the enabled MADT APIC ids with what each started CPU reported.
pub fn cross_check(madt_apic_ids: &[u32], observations: &[CpuidObservation]) -> Vec<Disagreement> {
    let mut found = Vec::new();
    let first_layout = observations.iter().find_map(|o| o.layout);
    for (position, observation) in observations.iter().enumerate() {
        let id = observation.cpuid_apic_id;
        if observation.madt_apic_id != id {
            found.push(Disagreement::IdMismatch {
                madt_apic_id: observation.madt_apic_id,
                cpuid_apic_id: id,
            });
        }
        if !madt_apic_ids.contains(&id) {
            found.push(Disagreement::NotInMadt { cpuid_apic_id: id });
        }
        if observations[..position]
            .iter()
            .any(|earlier| earlier.cpuid_apic_id == id)
        {
            found.push(Disagreement::ReportedTwice { cpuid_apic_id: id });
        }
        if let (Some(layout), Some(first)) = (observation.layout, first_layout)
            && layout != first
        {
            found.push(Disagreement::LayoutDiffers {
                cpuid_apic_id: id,
                layout,
                first,
            });
        }
    }
    for &madt_apic_id in madt_apic_ids {
        if !observations.iter().any(|o| o.cpuid_apic_id == madt_apic_id) {
            found.push(Disagreement::Silent { madt_apic_id });
        }
    }
    found
}
