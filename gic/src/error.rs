//! The crate's error type: what went wrong and on which CPU or interrupt.

use core::fmt;

use crate::GicVersion;

/// Everything the GIC drivers can report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GicError {
    /// No redistributor frame in the GICR regions has this CPU's affinity.
    RedistributorNotFound {
        /// The affinity bits of the CPU's MPIDR.
        mpidr: u64,
    },
    /// A frame in a redistributor region is not a GICv3/v4 redistributor
    /// (GICR_PIDR2.ArchRev is not 3 or 4).
    NotARedistributor {
        /// Physical address of the frame.
        address: usize,
    },
    /// GICR_WAKER.ChildrenAsleep did not clear after ProcessorSleep was cleared.
    RedistributorWakeTimeout {
        /// Logical CPU index.
        cpu: usize,
    },
    /// GICR_CTLR.RWP stayed set: a redistributor register write did not complete.
    RedistributorWriteTimeout {
        /// Logical CPU index.
        cpu: usize,
    },
    /// GICD_CTLR.RWP stayed set: a distributor register write did not complete.
    DistributorWriteTimeout,
    /// GICv2 can target only CPU interfaces 0-7 with SGIs and SPIs.
    TooManyCpusForGicV2 {
        /// Logical CPU index.
        cpu: usize,
    },
    /// A logical CPU index at or above [`crate::MAX_CPUS`].
    CpuIndexOutOfRange {
        /// Logical CPU index.
        cpu: usize,
    },
    /// GICD_ITARGETSR0-7 read as zero on a GIC with several CPU interfaces,
    /// so this CPU's interface number is unknown.
    CpuInterfaceMaskUnknown {
        /// Logical CPU index.
        cpu: usize,
    },
    /// The CPU was never brought up with `init_cpu` (or is not the
    /// calling CPU's recorded MPIDR), so it cannot be targeted.
    CpuNotInitialised {
        /// Logical CPU index.
        cpu: usize,
    },
    /// The CPU's MPIDR has Aff0 > 15 and the GIC cannot use the SGI range
    /// selector (ICC_CTLR_EL1.RSS / GICD_TYPER.RSS are 0).
    AffinityNotTargetable {
        /// The CPU's MPIDR.
        mpidr: u64,
    },
    /// `init_cpu` was called for one CPU while running on another.
    WrongCpu {
        /// Logical CPU index passed in.
        cpu: usize,
        /// MPIDR passed in.
        mpidr: u64,
        /// MPIDR of the CPU actually running.
        calling_mpidr: u64,
    },
    /// The calling CPU has not run `init_cpu`, so its redistributor is unknown.
    CallingCpuNotInitialised {
        /// The calling CPU's MPIDR affinity.
        mpidr: u64,
    },
    /// ICC_SRE_EL2.SRE stayed 0: EL3 firmware did not allow the GICv3
    /// system-register interface (ICC_SRE_EL3.Enable).
    SystemRegisterInterfaceDisabled {
        /// Logical CPU index.
        cpu: usize,
    },
    /// Two logical CPUs were given the same MPIDR.
    DuplicateMpidr {
        /// Logical CPU index of the second claimant.
        cpu: usize,
        /// The MPIDR.
        mpidr: u64,
    },
    /// An INTID outside every range the GIC architecture defines.
    InvalidIntId {
        /// The rejected value.
        intid: u32,
    },
    /// An INTID the driver cannot handle here: beyond the distributor's
    /// lines, an LPI, or an SGI where an SPI/PPI is required.
    UnsupportedIntId {
        /// The rejected value.
        intid: u32,
    },
    /// An SGI number above 15.
    InvalidSgi {
        /// The rejected value.
        sgi: u8,
    },
    /// A list-register field does not fit the layout of this GIC version.
    ListRegisterFieldOutOfRange {
        /// Which layout was being encoded.
        version: GicVersion,
        /// Name of the field.
        field: &'static str,
        /// The rejected value.
        value: u32,
    },
    /// A list register index beyond what the virtual interface implements.
    ListRegisterIndexOutOfRange {
        /// The rejected index.
        index: usize,
        /// How many list registers exist.
        available: usize,
    },
    /// An `ICH_AP<group>R<index>_EL2` register that does not exist.
    ActivePriorityRegisterOutOfRange {
        /// Interrupt group (0 or 1).
        group: usize,
        /// Register index.
        index: usize,
    },
    /// Too many redistributor regions for the fixed-size table.
    TooManyRedistributorRegions {
        /// How many were given.
        count: usize,
    },
}

impl fmt::Display for GicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GicError::RedistributorNotFound { mpidr } => {
                write!(f, "no GICv3 redistributor for MPIDR {mpidr:#x}")
            }
            GicError::NotARedistributor { address } => {
                write!(f, "frame at {address:#x} is not a GICv3/v4 redistributor")
            }
            GicError::RedistributorWakeTimeout { cpu } => write!(
                f,
                "CPU {cpu}: redistributor did not wake (GICR_WAKER.ChildrenAsleep stayed set)"
            ),
            GicError::RedistributorWriteTimeout { cpu } => write!(
                f,
                "CPU {cpu}: redistributor write did not complete (GICR_CTLR.RWP stayed set)"
            ),
            GicError::DistributorWriteTimeout => {
                write!(
                    f,
                    "distributor write did not complete (GICD_CTLR.RWP stayed set)"
                )
            }
            GicError::TooManyCpusForGicV2 { cpu } => {
                write!(f, "CPU {cpu}: a GICv2 supports at most 8 CPU interfaces")
            }
            GicError::CpuIndexOutOfRange { cpu } => write!(
                f,
                "CPU index {cpu} is beyond the {} CPUs the GIC driver supports",
                crate::MAX_CPUS
            ),
            GicError::CpuInterfaceMaskUnknown { cpu } => write!(
                f,
                "CPU {cpu}: GICD_ITARGETSR0-7 read as zero, CPU interface number unknown"
            ),
            GicError::CpuNotInitialised { cpu } => {
                write!(f, "CPU {cpu} has not been initialised in the GIC")
            }
            GicError::AffinityNotTargetable { mpidr } => write!(
                f,
                "MPIDR {mpidr:#x} has Aff0 > 15 and the GIC has no SGI range selector"
            ),
            GicError::WrongCpu {
                cpu,
                mpidr,
                calling_mpidr,
            } => write!(
                f,
                "CPU {cpu} (MPIDR {mpidr:#x}) initialised from the CPU with MPIDR {calling_mpidr:#x}"
            ),
            GicError::CallingCpuNotInitialised { mpidr } => write!(
                f,
                "the calling CPU (MPIDR {mpidr:#x}) has not been initialised in the GIC"
            ),
            GicError::SystemRegisterInterfaceDisabled { cpu } => write!(
                f,
                "CPU {cpu}: GICv3 system-register interface disabled by firmware (ICC_SRE_EL2.SRE stays 0)"
            ),
            GicError::DuplicateMpidr { cpu, mpidr } => {
                write!(
                    f,
                    "CPU {cpu}: MPIDR {mpidr:#x} is already used by another CPU"
                )
            }
            GicError::InvalidIntId { intid } => write!(f, "invalid interrupt ID {intid}"),
            GicError::UnsupportedIntId { intid } => {
                write!(f, "interrupt ID {intid} is not supported here")
            }
            GicError::InvalidSgi { sgi } => write!(f, "invalid SGI number {sgi} (0-15)"),
            GicError::ListRegisterFieldOutOfRange {
                version,
                field,
                value,
            } => write!(
                f,
                "list register field {field} = {value:#x} does not fit the {version} layout"
            ),
            GicError::ListRegisterIndexOutOfRange { index, available } => write!(
                f,
                "list register {index} does not exist ({available} implemented)"
            ),
            GicError::ActivePriorityRegisterOutOfRange { group, index } => {
                write!(f, "ICH_AP{group}R{index}_EL2 is not implemented")
            }
            GicError::TooManyRedistributorRegions { count } => write!(
                f,
                "{count} redistributor regions, at most {} supported",
                crate::v3::MAX_REDISTRIBUTOR_REGIONS
            ),
        }
    }
}

impl core::error::Error for GicError {}
