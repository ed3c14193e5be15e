//! GIC drivers: GICv2 (distributor + memory-mapped CPU interface) and GICv3
//! (distributor, redistributors, system-register CPU interface).
//!
//! Owns: the GIC's registers. Must not touch: scheduling policy or vGIC
//! emulation state (the hypervisor's job).
//!
//! # Layout
//! - [`GicVersion`] picks the driver from a device-tree `compatible` or the
//!   ACPI MADT; [`Gic`] dispatches to [`GicV2`] or [`GicV3`].
//! - Everything that is an *encoding* (SGI register values, affinity
//!   routing, list registers, CPU-interface masks) is a pure function in
//!   [`sgi`], [`affinity`] and [`list_register`], tested on the host.
//! - MMIO register blocks are `tock-registers` structs in [`registers`];
//!   GICv3 system registers are reached only through [`sysreg`], the one
//!   module with an architecture switch (on the host it is a register model
//!   so the drivers can be unit-tested).
//!
//! # Usage (boot CPU, then every CPU)
//! ```ignore
//! // DT `compatible` -> version; `reg` regions -> addresses (identity-mapped).
//! let gic = match GicVersion::from_compatible(compatible) {
//!     Some(GicVersion::V2) => Gic::V2(unsafe { GicV2::with_virtual_interface(gicd, gicc, gich) }),
//!     Some(GicVersion::V3) => Gic::V3(unsafe { GicV3::new(gicd, gicr, gicr_size) }),
//!     None => { log::warn!("unknown GIC compatible {compatible}"); return; }
//! };
//! gic.init_distributor()?;              // boot CPU, once
//! gic.init_cpu(cpu_index, mpidr)?;      // every CPU, running on that CPU
//! gic.send_sgi(KICK_SGI, SgiTarget::List(&[1, 2, 3]))?;
//! // IRQ handler:
//! while let Some(irq) = gic.acknowledge() {
//!     handle(irq.intid());
//!     gic.end_of_interrupt(irq);        // or priority_drop + a guest's HW deactivation
//! }
//! ```
//! The CPU interface runs with split EOI (EOImode = 1): `end_of_interrupt`
//! does both the priority drop and the deactivation; `priority_drop` alone
//! leaves a physical interrupt active for a hardware-linked list register.
//!
//! `examples/qemu_smoke.rs` (run by `gic/qemu-smoke.sh`) drives all of this
//! on QEMU `virt` at EL2 with 4 CPUs, for both GIC versions.
#![cfg_attr(not(test), no_std)]

pub mod affinity;
mod distributor;
mod error;
mod intid;
pub mod list_register;
mod poll;
pub mod registers;
pub mod sgi;
pub mod sysreg;
#[cfg(test)]
mod testing;
mod v2;
mod v3;
mod version;
pub mod virt;

pub use error::GicError;
pub use intid::{Acknowledged, IntId, IntIdKind};
pub use list_register::{ListRegister, ListRegisterState, VirtualInterruptSource};
pub use sgi::SgiTarget;
pub use v2::GicV2;
pub use v3::{GicV3, MAX_REDISTRIBUTOR_REGIONS, RedistributorRegion};
pub use version::GicVersion;
pub use virt::VirtualCpuInterface;

/// The largest number of logical CPUs the drivers keep per-CPU state for
/// (matches `sched::MAX_CPUS`: two-socket Ampere Altra Max has 256 CPUs).
pub const MAX_CPUS: usize = 512;

/// Priority given to every interrupt by `init_distributor`/`init_cpu`
/// (the middle of the range, as Linux' `GICD_INT_DEF_PRI`), so that a
/// priority mask of [`DEFAULT_PRIORITY_MASK`] lets it through.
pub const DEFAULT_PRIORITY: u8 = 0xA0;

/// Value written to the CPU interface's priority mask: every priority
/// numerically below it is signalled (Linux' `DEFAULT_PMR_VALUE`).
pub const DEFAULT_PRIORITY_MASK: u8 = 0xF0;

/// How an interrupt is triggered (GICD_ICFGR, IHI 0048 §4.3 and IHI 0069).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Level-sensitive: pending while the line is asserted.
    Level,
    /// Edge-triggered: pending on a rising edge.
    Edge,
}

/// A GIC of either version, as the platform code holds it.
///
/// Every method acts on the GIC of the calling CPU where the architecture
/// has per-CPU state (SGIs, PPIs, the CPU interface).
// One instance lives in a static for the whole run and there is no heap to
// box the GICv3's per-CPU tables into, so the size difference is accepted.
#[allow(clippy::large_enum_variant)]
pub enum Gic {
    /// A GICv2 (QEMU `virt` with `gic-version=2`, GIC-400 on the Pi 4).
    V2(GicV2),
    /// A GICv3 or GICv4 (QEMU `virt` with `gic-version=3`, Ampere Altra).
    V3(GicV3),
}

impl Gic {
    /// Which architecture version this driver talks to.
    pub fn version(&self) -> GicVersion {
        match self {
            Gic::V2(_) => GicVersion::V2,
            Gic::V3(_) => GicVersion::V3,
        }
    }

    /// Configures the distributor once, on the boot CPU: disables it, makes
    /// every SPI group 1 (v3), level-triggered, priority [`DEFAULT_PRIORITY`],
    /// disabled and routed to the boot CPU, then enables it (with affinity
    /// routing on v3).
    pub fn init_distributor(&self) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.init_distributor(),
            Gic::V3(gic) => gic.init_distributor(),
        }
    }

    /// Brings up the calling CPU's part of the GIC; call on every CPU
    /// (including the boot CPU, after [`Gic::init_distributor`]).
    /// `cpu` is the logical CPU index used by [`SgiTarget`], `mpidr` its
    /// `MPIDR_EL1` value.
    pub fn init_cpu(&self, cpu: usize, mpidr: u64) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.init_cpu(cpu, mpidr),
            Gic::V3(gic) => gic.init_cpu(cpu, mpidr),
        }
    }

    /// Number of interrupt IDs the distributor implements (SGIs, PPIs and
    /// SPIs; at most 1020).
    pub fn num_interrupts(&self) -> u32 {
        match self {
            Gic::V2(gic) => gic.num_interrupts(),
            Gic::V3(gic) => gic.num_interrupts(),
        }
    }

    /// Lets `intid` be signalled (SGIs and PPIs: on the calling CPU).
    pub fn enable_interrupt(&self, intid: IntId) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.enable_interrupt(intid),
            Gic::V3(gic) => gic.enable_interrupt(intid),
        }
    }

    /// Stops `intid` from being signalled (SGIs and PPIs: on the calling CPU).
    pub fn disable_interrupt(&self, intid: IntId) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.disable_interrupt(intid),
            Gic::V3(gic) => gic.disable_interrupt(intid),
        }
    }

    /// Sets or clears the active state of `intid` (SGIs and PPIs: on the
    /// calling CPU): a hypervisor that left a physical interrupt active for
    /// a guest's hardware-linked list register ([`Gic::priority_drop`])
    /// settles it here when that guest is switched out or its line fell
    /// before the guest took it.
    pub fn set_active(&self, intid: IntId, active: bool) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.set_active(intid, active),
            Gic::V3(gic) => gic.set_active(intid, active),
        }
    }

    /// Whether an SPI, or an SGI/PPI of the calling CPU, is active.
    pub fn is_active(&self, intid: IntId) -> Result<bool, GicError> {
        match self {
            Gic::V2(gic) => gic.is_active(intid),
            Gic::V3(gic) => gic.is_active(intid),
        }
    }

    /// Clears the latched pending state of an SPI, or of a PPI of the
    /// calling CPU (a level-sensitive line still asserted stays pending).
    pub fn clear_pending(&self, intid: IntId) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.clear_pending(intid),
            Gic::V3(gic) => gic.clear_pending(intid),
        }
    }

    /// Latches an SPI, or a PPI of the calling CPU, pending, as an edge
    /// would (SGIs too on GICv3; GICv2 ignores the write for them).
    pub fn set_pending(&self, intid: IntId) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.set_pending(intid),
            Gic::V3(gic) => gic.set_pending(intid),
        }
    }

    /// Whether an SPI, or an SGI/PPI of the calling CPU, is pending (an
    /// edge latched and not yet acknowledged, or a level line up).
    pub fn is_pending(&self, intid: IntId) -> Result<bool, GicError> {
        match self {
            Gic::V2(gic) => gic.is_pending(intid),
            Gic::V3(gic) => gic.is_pending(intid),
        }
    }

    /// Whether SPI `intid` is pending at the distributor (a level-sensitive
    /// SPI: its line is asserted, even while the SPI is disabled).
    pub fn spi_pending(&self, intid: IntId) -> Result<bool, GicError> {
        match self {
            Gic::V2(gic) => gic.spi_pending(intid),
            Gic::V3(gic) => gic.spi_pending(intid),
        }
    }

    /// Sets the priority of `intid` (lower value = more urgent).
    pub fn set_priority(&self, intid: IntId, priority: u8) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.set_priority(intid, priority),
            Gic::V3(gic) => gic.set_priority(intid, priority),
        }
    }

    /// Sets whether an SPI or PPI is level- or edge-triggered.
    pub fn set_trigger(&self, intid: IntId, trigger: Trigger) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.set_trigger(intid, trigger),
            Gic::V3(gic) => gic.set_trigger(intid, trigger),
        }
    }

    /// Whether an SPI or PPI is level- or edge-triggered, as the GIC
    /// reports it (PPIs may have a fixed configuration).
    pub fn trigger(&self, intid: IntId) -> Result<Trigger, GicError> {
        match self {
            Gic::V2(gic) => gic.trigger(intid),
            Gic::V3(gic) => gic.trigger(intid),
        }
    }

    /// Acknowledges the highest-priority pending interrupt; `None` when it
    /// was spurious (INTID 1023).
    pub fn acknowledge(&self) -> Option<Acknowledged> {
        match self {
            Gic::V2(gic) => gic.acknowledge(),
            Gic::V3(gic) => gic.acknowledge(),
        }
    }

    /// The highest-priority pending interrupt, without acknowledging it;
    /// `None` when there is none.
    pub fn highest_pending(&self) -> Option<IntId> {
        match self {
            Gic::V2(gic) => gic.highest_pending(),
            Gic::V3(gic) => gic.highest_pending(),
        }
    }

    /// Finishes handling of an acknowledged interrupt: priority drop and
    /// deactivation.
    pub fn end_of_interrupt(&self, interrupt: Acknowledged) {
        match self {
            Gic::V2(gic) => gic.end_of_interrupt(interrupt),
            Gic::V3(gic) => gic.end_of_interrupt(interrupt),
        }
    }

    /// Priority drop only: the interrupt stays active until
    /// [`Gic::deactivate`] or until a guest deactivates it through a
    /// hardware-linked list register.
    pub fn priority_drop(&self, interrupt: Acknowledged) {
        match self {
            Gic::V2(gic) => gic.priority_drop(interrupt),
            Gic::V3(gic) => gic.priority_drop(interrupt),
        }
    }

    /// Deactivates an interrupt whose priority was dropped earlier.
    pub fn deactivate(&self, interrupt: Acknowledged) {
        match self {
            Gic::V2(gic) => gic.deactivate(interrupt),
            Gic::V3(gic) => gic.deactivate(interrupt),
        }
    }

    /// Routes SPI `intid` to logical CPU `cpu` (which must have run
    /// [`Gic::init_cpu`]).
    pub fn route_spi(&self, intid: IntId, cpu: usize) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.route_spi(intid, cpu),
            Gic::V3(gic) => gic.route_spi(intid, cpu),
        }
    }

    /// Sends software-generated interrupt `sgi` (0..=15) to `target`.
    pub fn send_sgi(&self, sgi: u8, target: SgiTarget<'_>) -> Result<(), GicError> {
        match self {
            Gic::V2(gic) => gic.send_sgi(sgi, target),
            Gic::V3(gic) => gic.send_sgi(sgi, target),
        }
    }

    /// Number of list registers of the virtual CPU interface (GICH_VTR /
    /// ICH_VTR_EL2 `ListRegs` + 1); 0 for a GICv2 given no GICH region.
    pub fn num_list_registers(&self) -> usize {
        match self {
            Gic::V2(gic) => gic
                .virtual_interface()
                .map_or(0, |gich| gich.num_list_registers()),
            Gic::V3(gic) => gic.virtual_interface().num_list_registers(),
        }
    }
}
