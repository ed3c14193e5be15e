//! The vGIC on the running system: list registers filled before every guest
//! entry and folded back after every exit, interrupts injected into domains,
//! and the vCPUs they target woken or kicked.
//!
//! GICv3 hosts use the ICH_* system-register interface, GICv2 hosts the GICH
//! register block (banked per CPU); both behind
//! `hv::arm::vgic::VcpuInterfaceRegisters`.

use core::sync::atomic::{AtomicBool, Ordering};

use gic::virt::{v2::GichV2, v3::IchV3};
use gic::{Gic, GicError};
use hv::arm::vgic::{self, VcpuInterfaceState};
use log::warn;
use platform::arch::aarch64::exceptions::TrapFrame;
use sched::DomainId;

use super::{GIC, domain, vcpu};

static REPORTED_ERROR: AtomicBool = AtomicBool::new(false);

fn report(what: core::fmt::Arguments<'_>) {
    if !REPORTED_ERROR.swap(true, Ordering::Relaxed) {
        warn!("vgic: {what} (further vGIC errors are not logged)");
    }
}

/// This CPU's GIC virtual CPU interface.
enum Interface {
    V2(GichV2),
    V3(IchV3),
}

impl Interface {
    /// The calling CPU's interface, if the host GIC has one.
    fn current() -> Option<Interface> {
        match GIC.get()? {
            Gic::V2(gic) => gic.virtual_interface().map(Interface::V2),
            Gic::V3(gic) => Some(Interface::V3(gic.virtual_interface())),
        }
    }

    // One method per `vgic` call, each matching on the version, rather
    // than a `&dyn VcpuInterfaceRegisters`: with the concrete interface
    // the list register accesses inline (every entry and exit that lists
    // anything runs through these).

    /// `vgic::exit` on this interface.
    fn exit(&self, state: &mut VcpuInterfaceState) -> Result<(), GicError> {
        match self {
            Interface::V2(gich) => vgic::exit(state, gich),
            Interface::V3(ich) => vgic::exit(state, ich),
        }
    }

    /// `vgic::enter` on this interface.
    fn enter(&self, state: &mut VcpuInterfaceState) -> Result<(), GicError> {
        match self {
            Interface::V2(gich) => vgic::enter(state, gich),
            Interface::V3(ich) => vgic::enter(state, ich),
        }
    }

    /// `vgic::put` on this interface.
    fn put(&self, state: &mut VcpuInterfaceState) -> Result<(), GicError> {
        match self {
            Interface::V2(gich) => vgic::put(state, gich),
            Interface::V3(ich) => vgic::put(state, ich),
        }
    }
}

/// Whether guests get virtual interrupts on this host.
pub fn delivers_interrupts() -> bool {
    Interface::current().is_some()
}

/// A fresh interface state for a new vCPU.
pub fn new_interface_state() -> VcpuInterfaceState {
    let lrs = GIC.get().map_or(0, Gic::num_list_registers);
    VcpuInterfaceState::new(lrs)
}

/// The guest version a domain's vGIC presents: the host's.
pub fn guest_version() -> vgic::GuestGicVersion {
    match GIC.get() {
        Some(Gic::V2(_)) => vgic::GuestGicVersion::V2,
        _ => vgic::GuestGicVersion::V3,
    }
}

/// After an exit from the guest on `me`: read back the list registers the
/// guest may have changed (`vgic::exit`), fold them back into
/// the domain's vGIC, then sample the lines that follow devices (its
/// pass-through SPIs, its timers).
///
/// A quiet exit (most of them: nothing was listed, so nothing comes back,
/// and no timer or pass-through line needs sampling) only looks: the
/// check is inlined and the work out of line, so the look does not pay
/// the work's register saves (this runs on every exit).
#[inline(always)]
pub fn after_exit(me: usize) {
    if exit_needs_fold_back(me) {
        fold_back(me);
    }
}

/// Whether the exit of the vCPU loaded on `me` has something to fold back
/// or sample ([`fold_back`]); not when no vCPU is loaded.
#[inline(always)]
pub fn exit_needs_fold_back(me: usize) -> bool {
    vcpu::with_loaded(me, |state| {
        !state.gic.nothing_in_flight()
            || super::guest_timer::exit_work_pending(me)
            || super::passthrough::samples_lines(state.domain.domain)
    }) == Some(true)
}

/// [`after_exit`]'s work, for an exit that is not quiet.
#[inline(never)]
pub fn fold_back(me: usize) {
    fold_back_and::<false>(me);
}

/// [`fold_back`] and then [`before_entry`]'s work, for an exit that returns
/// into the same vCPU with nothing handled in between but nudges (the exit
/// itself was their point): the vCPU and its domain are looked up and
/// locked once, not twice. No switch came between, and no timer's
/// interrupt, so its timers have no entry work.
#[inline(never)]
pub fn fold_back_then_enter(me: usize) {
    fold_back_and::<true>(me);
}

/// Reads back the loaded vCPU's list registers, folds them into its domain
/// and samples its device lines; with `THEN_ENTER` also flushes and loads
/// its list registers for the entry, under the same look-up and lock.
#[inline(always)]
fn fold_back_and<const THEN_ENTER: bool>(me: usize) {
    let Some(hw) = Interface::current() else {
        return;
    };
    let raised = vcpu::with_loaded(me, |state| {
        if let Err(e) = hw.exit(&mut state.gic) {
            report(format_args!("save: {e}"));
        }
        let index = state.index as usize;
        let domain = DomainId(state.domain.domain);
        let raised = domain::with_domain(domain, |d| {
            if let Err(e) = d.vgic.sync_state(index, &mut state.gic) {
                report(format_args!("sync: {e}"));
            }
            let raised = GIC.get().map(|gic| {
                super::guest_timer::after_exit_locked(gic, me, d, index);
                // The device lines of its pass-through SPIs, now that the
                // guest's EOIs are folded in.
                super::passthrough::sample(gic, d)
            });
            if THEN_ENTER {
                // Only nudges came between: no switch, no timer's interrupt.
                debug_assert!(!super::guest_timer::entry_work_pending(me));
                flush_locked(state, d);
            }
            raised.unwrap_or_default()
        });
        if THEN_ENTER {
            load(state, &hw);
        }
        (domain, raised.unwrap_or_default())
    });
    if let Some((domain, raised)) = raised
        && !raised.is_empty()
    {
        super::exit::notify_all(domain, raised);
    }
}

/// Before returning into `frame`: if it enters a guest, fill its list
/// registers (after a switch, once its timers' lines are settled; after a
/// timer's interrupt, once its line has risen).
///
/// Nothing in flight, no timer line waiting to rise and the domain's vGIC
/// unchanged since a flush that listed nothing: a flush would list nothing
/// again and write nothing (an interrupt recorded after this look comes
/// with a nudge, whose exit looks again), so the entry only looks;
/// inlined, as [`after_exit`]'s look.
#[inline(always)]
pub fn before_entry(me: usize, frame: &TrapFrame) {
    if !frame.returns_to_guest() {
        return;
    }
    let quiet = !super::guest_timer::entry_work_pending(me)
        && vcpu::with_loaded(me, |state| {
            state
                .vgic_generation
                .as_ref()
                .is_some_and(|generation| state.gic.is_quiet_at(generation.get()))
        }) != Some(false);
    if !quiet {
        before_entry_work(me);
    }
}

/// [`before_entry`]'s work, for an entry that may list something.
#[inline(never)]
fn before_entry_work(me: usize) {
    let Some(hw) = Interface::current() else {
        return;
    };
    vcpu::with_loaded(me, |state| {
        let index = state.index as usize;
        domain::with_domain(DomainId(state.domain.domain), |d| {
            if let Some(gic) = GIC.get() {
                super::guest_timer::before_entry_locked(gic, me, d, index);
            }
            flush_locked(state, d);
        });
        load(state, &hw);
    });
}

/// Fills the list register images of the vCPU whose interface is `state`
/// from its domain `d` (locked), and notes the generation the flush saw.
#[inline(always)]
fn flush_locked(state: &mut vcpu::VcpuState, d: &mut domain::Domain) {
    let index = state.index as usize;
    if let Err(e) = d.vgic.flush_state(index, &mut state.gic) {
        report(format_args!("flush: {e}"));
    }
    if !state
        .vgic_generation
        .as_ref()
        .is_some_and(|generation| generation.is_of(&d.vgic, index))
    {
        state.vgic_generation = d.vgic.published(index);
    }
}

/// Writes the images [`flush_locked`] filled to the hardware.
#[inline(always)]
fn load(state: &mut vcpu::VcpuState, hw: &Interface) {
    if let Err(e) = hw.enter(&mut state.gic) {
        report(format_args!("restore: {e}"));
    }
}

/// The vCPU whose interface is `state` leaves this CPU: its active
/// priorities and VMCR are saved and the interface turned off (the list
/// registers were read back at the exit).
pub fn put(state: &mut VcpuInterfaceState) {
    let Some(hw) = Interface::current() else {
        return;
    };
    if let Err(e) = hw.put(state) {
        report(format_args!("put: {e}"));
    }
}
