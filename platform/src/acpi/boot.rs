//! One call for the boot paths: everything the hypervisor takes from the ACPI tables.

use alloc::vec::Vec;

use super::boot_tables::{Fadt, Gtdt, Spcr};
use super::cpuid::ApicIdLayout;
use super::error::{AcpiError, Signature};
use super::madt::Madt;
use super::pptt::Pptt;
use super::sdt::AcpiTables;
use super::topology::AcpiCpus;

/// What the boot uses from ACPI. Only the MADT is required: a missing or corrupt
/// PPTT, FADT, SPCR or GTDT is recorded in `problems` and boot goes on without it
/// (the CPUs then come from the MPIDR fallback, the console and timer from
/// defaults), as a serious hypervisor should rather than refuse to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootAcpi {
    /// The MADT (interrupt controllers, processors).
    pub madt: Madt,
    /// The CPUs and their positions (`cpus.topology()` gives the scheduler's view).
    pub cpus: AcpiCpus,
    /// The FADT: PSCI conduit on ARM.
    pub fadt: Option<Fadt>,
    /// The serial console.
    pub console: Option<Spcr>,
    /// The architected timer interrupts (ARM).
    pub timer: Option<Gtdt>,
    /// Tables that are present but unusable, and tables the root table listed but
    /// that could not be read.
    pub problems: Vec<AcpiError>,
}

impl BootAcpi {
    /// Reads the tables. `layout` is the x86 CPUID APIC-id layout (ignored on ARM).
    /// Errors only for a missing or corrupt MADT, or one without a usable CPU.
    pub fn from_tables(
        tables: &AcpiTables,
        layout: Option<ApicIdLayout>,
    ) -> Result<Self, AcpiError> {
        let madt_table = tables
            .get(Signature::MADT)?
            .ok_or(AcpiError::MissingTable {
                table: Signature::MADT,
            })?;
        let madt = Madt::from_sdt(&madt_table)?;
        let mut problems = tables.unreadable.clone();
        let mut optional = |signature: Signature| match tables.get(signature) {
            Ok(table) => table.map(|table| table.bytes),
            Err(error) => {
                problems.push(error);
                None
            }
        };
        let pptt = optional(Signature::PPTT);
        let fadt = optional(Signature::FADT);
        let spcr = optional(Signature::SPCR);
        let gtdt = optional(Signature::GTDT);
        let pptt: Option<Pptt> = keep(pptt.map(Pptt::parse), &mut problems);
        let fadt = keep(fadt.map(Fadt::parse), &mut problems);
        let console = keep(spcr.map(Spcr::parse), &mut problems);
        let timer = keep(gtdt.map(Gtdt::parse), &mut problems);
        let cpus = super::describe_cpus(&madt, pptt.as_ref(), layout)?;
        Ok(Self {
            madt,
            cpus,
            fadt,
            console,
            timer,
            problems,
        })
    }
}

/// The parsed table, or `None` with the error recorded.
fn keep<T>(result: Option<Result<T, AcpiError>>, problems: &mut Vec<AcpiError>) -> Option<T> {
    match result? {
        Ok(value) => Some(value),
        Err(error) => {
            problems.push(error);
            None
        }
    }
}
