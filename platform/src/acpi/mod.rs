//! ACPI table parsing: table access (RSDP, RSDT/XSDT, headers and checksums), the
//! MADT, PPTT, FADT, SPCR and GTDT, CPUID APIC-id layouts, and the conversion of
//! MADT (+ PPTT on ARM, + CPUID on x86) to a [`sched::Topology`].
//!
//! Written by hand rather than with the `acpi` crate: its MADT entry iterator
//! (7.0.0-pre1) never advances past an entry of length 0 (an endless loop at boot),
//! reads entries by casting raw pointers without checking the entry is as long as
//! the structure, silently stops at a truncated entry instead of reporting it, has
//! no PPTT or GTDT, and reaches tables only through an `unsafe` physical-mapping
//! handler. Here every table is a byte slice checked once for length and checksum,
//! every read is bounds-checked, and bad input is an [`AcpiError`] naming the table
//! and offset, never a panic or a hang. Problems that can be worked around (an
//! unknown MADT entry type, a PPTT that cannot place every CPU) are
//! [`AcpiWarning`]s carried in the result.
//!
//! Used by the x86 boot (walk from the RSDP with a [`PhysicalMemory`] reader, then
//! [`AcpiCpus::x86`] with the CPUID layout), the ARM UEFI boot ([`AcpiCpus::arm`],
//! [`Fadt`], [`Spcr`], [`Gtdt`]) — both can take everything at once with
//! [`BootAcpi::from_tables`] — and `cargo xtask topology`.

#![forbid(unsafe_code)]

mod acpidump;
mod boot;
mod boot_tables;
mod cpuid;
mod error;
mod madt;
mod pptt;
mod sdt;
mod topology;

pub use acpidump::{DumpedTable, is_acpidump, parse_acpidump};
pub use boot::BootAcpi;
pub use boot_tables::{Fadt, Gtdt, Spcr, TimerInterrupt, UartKind};
pub use cpuid::{
    ApicIdFields, ApicIdLayout, CacheSharing, CpuidError, CpuidObservation, Disagreement,
    LevelType, TopologyLevel, ceil_log2, cross_check, decode_topology_level, layout_from_amd,
    layout_from_legacy, layout_from_topology_levels,
};
pub use error::{AcpiError, AcpiWarning, Signature};
pub use madt::{
    GicIts, Gicc, Gicd, Gicr, InterruptPolarity, InterruptSourceOverride, InterruptTrigger, IoApic,
    IsaIrqRoute, IsaRouteError, LocalApic, LocalApicNmi, Madt, NmiSource, ProcessorFlags,
};
pub use pptt::{NodeFlags, Pptt, PpttPosition, ProcessorNode};
pub use sdt::{
    AcpiTables, MAX_TABLE_LENGTH, MAX_TABLES, PhysicalMemory, RSDP_V1_LENGTH, RSDP_V2_LENGTH, Rsdp,
    SDT_HEADER_LENGTH, Sdt, SdtHeader, read_table, root_table_entries,
};
pub use topology::{
    AcpiCpu, AcpiCpus, AcpiTopologySource, CpuArch, MAX_CAPACITY, MpidrFallbackReason, NoSmtReason,
    RawPosition, SmtEvidence, capacity_for_class, infer_smt, write_topology_report,
};

/// The CPUs of a MADT: ARM when it has GICC entries ([`AcpiCpus::arm`] with the
/// PPTT), x86 otherwise ([`AcpiCpus::x86`] with the CPUID layout).
pub fn describe_cpus(
    madt: &Madt,
    pptt: Option<&Pptt>,
    layout: Option<ApicIdLayout>,
) -> Result<AcpiCpus, AcpiError> {
    if madt.giccs.is_empty() {
        AcpiCpus::x86(madt, layout)
    } else {
        AcpiCpus::arm(madt, pptt)
    }
}
