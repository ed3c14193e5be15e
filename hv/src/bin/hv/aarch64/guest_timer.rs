//! The guests' EL1 timers: the virtual timer (CNTV) and the EL1 physical
//! timer (CNTP), both given to the running vCPU directly (CNTHCTL_EL2.EL1PCEN:
//! the hypervisor's own tick is the EL2 timer, CNTHP) and switched with its
//! other EL1 registers (`sysregs`).
//!
//! Each timer's output is a level-sensitive line into the domain's vGIC, as
//! on real hardware and under KVM: the virtual interrupt is pending exactly
//! while the timer asserts (enabled, condition met, not masked), so a guest
//! that disables, masks or re-arms its timer takes its pending interrupt
//! back. The hypervisor never touches the guest's IMASK.
//!
//! The virtual interrupt is hardware-linked to the timer's physical PPI (as
//! KVM and Xen do): when the PPI fires for the loaded vCPU the hypervisor
//! only drops its priority and leaves it active, lists the virtual
//! interrupt with the HW bit, and the guest's own deactivation deactivates
//! the PPI. One exit per tick: no maintenance exit at the guest's EOI and
//! no PPI disabled and enabled again. While the PPI is left active it
//! cannot fire again, so a line that stays high does not storm. Each exit
//! after one that raised the line samples it again (a register read), and
//! a PPI left active for a virtual interrupt that is no longer pending or
//! active (the line fell before the guest took it) is deactivated by the
//! hypervisor. On a switch the PPI's active state follows the vCPU: cleared
//! for whatever runs next, set again when a vCPU whose timer interrupt is
//! pending or active is loaded (before its first entry), so the guest's
//! deactivation always finds it active.
//!
//! The host PPIs are configured edge-triggered on GICv3 hosts where the
//! GIC lets a PPI's trigger be programmed (QEMU's does); GICv2 hosts keep
//! them level-triggered (GIC-400's are fixed).
//! With a level-triggered PPI, a guest that ends its timer interrupt
//! before it masks the timer (kvm-unit-tests does: EOIR, then IMASK)
//! deactivates the PPI while the timer still asserts, so the PPI fires
//! again at once and exits the guest a second time, which lists the
//! interrupt again: the guest takes it a second time although it masked
//! the timer meanwhile (on bare metal the pending state follows the line
//! and vanishes with the mask). Edge-triggered, the PPI fires on the
//! timer's rising edge only: one exit per expiry. For the same reason the
//! virtual line counts as low once the guest has taken and ended the
//! interrupt (sampled at the next exit): listing it again because the
//! timer still asserts would hand the guest an interrupt it may already
//! have masked without an exit (the hypervisor cannot see the mask), and
//! a guest that deliberately leaves the line high after its EOI is rare.
//! So each rise of the timer's output is delivered once: the guest masks,
//! disables or re-arms it to get the next. Xen sets IMASK in the guest's
//! timer at each expiry to the same end (one exit, but the guest sees a
//! mask it did not set, and one that re-arms by CVAL alone loses its
//! interrupts); KVM lists it again, as this did.

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

use aarch64_cpu::registers::{CNTP_CTL_EL0, CNTP_CVAL_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0};
use gic::{Acknowledged, Gic, IntId, Trigger};
use hv::arm::vgic::{Vgic, VgicError};
use sched::{DomainId, MAX_CPUS};
use tock_registers::interfaces::{Readable, Writeable};

use super::domain::Domain;
use super::vcpu;

/// One of the two EL1 timers a guest owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestTimer {
    /// CNTV_*_EL0.
    Virtual,
    /// CNTP_*_EL0.
    Physical,
}

impl GuestTimer {
    /// Both, in a fixed order (index into per-CPU tables).
    pub const ALL: [GuestTimer; 2] = [GuestTimer::Virtual, GuestTimer::Physical];

    /// The INTID guests see it on (their device tree's `arm,armv8-timer`
    /// node: PPI 11 virtual, PPI 14 non-secure physical).
    pub fn guest_intid(self) -> u32 {
        match self {
            GuestTimer::Virtual => 16 + hv::arm::guest_dt::TIMER_PPIS[2],
            GuestTimer::Physical => 16 + hv::arm::guest_dt::TIMER_PPIS[1],
        }
    }

    /// The host's PPI for it (Arm BSA: 27 virtual, 30 physical; an ACPI
    /// boot takes the GTDT's).
    pub fn host_ppi(self) -> u32 {
        HOST_PPIS[self as usize].load(Ordering::Relaxed)
    }

    /// Sets the host's PPI for it (ACPI: from the GTDT).
    pub fn set_host_ppi(self, ppi: u32) {
        HOST_PPIS[self as usize].store(ppi, Ordering::Relaxed);
    }

    /// Whether the loaded timer asserts its interrupt now: enabled,
    /// condition met, not masked.
    pub fn asserting(self) -> bool {
        let (enabled, status, masked) = match self {
            GuestTimer::Virtual => {
                let ctl = CNTV_CTL_EL0.extract();
                (
                    ctl.is_set(CNTV_CTL_EL0::ENABLE),
                    ctl.is_set(CNTV_CTL_EL0::ISTATUS),
                    ctl.is_set(CNTV_CTL_EL0::IMASK),
                )
            }
            GuestTimer::Physical => {
                let ctl = CNTP_CTL_EL0.extract();
                (
                    ctl.is_set(CNTP_CTL_EL0::ENABLE),
                    ctl.is_set(CNTP_CTL_EL0::ISTATUS),
                    ctl.is_set(CNTP_CTL_EL0::IMASK),
                )
            }
        };
        enabled && status && !masked
    }

    /// The compare value the loaded timer will assert at, if it is enabled
    /// and not masked (in ticks of its counter).
    pub fn armed_deadline(self) -> Option<u64> {
        match self {
            GuestTimer::Virtual => {
                let ctl = CNTV_CTL_EL0.extract();
                (ctl.is_set(CNTV_CTL_EL0::ENABLE) && !ctl.is_set(CNTV_CTL_EL0::IMASK))
                    .then(|| CNTV_CVAL_EL0.get())
            }
            GuestTimer::Physical => {
                let ctl = CNTP_CTL_EL0.extract();
                (ctl.is_set(CNTP_CTL_EL0::ENABLE) && !ctl.is_set(CNTP_CTL_EL0::IMASK))
                    .then(|| CNTP_CVAL_EL0.get())
            }
        }
    }

    /// Turns the loaded timer off (the CPU goes idle; the vCPU's own value
    /// was saved by the switch).
    fn disable(self) {
        match self {
            GuestTimer::Virtual => CNTV_CTL_EL0.set(0),
            GuestTimer::Physical => CNTP_CTL_EL0.set(0),
        }
    }
}

/// The host PPIs of [`GuestTimer::ALL`].
static HOST_PPIS: [AtomicU32; 2] = [AtomicU32::new(27), AtomicU32::new(30)];

/// Per CPU and timer: the physical PPI was left active (priority drop
/// only) for the loaded vCPU's hardware-linked virtual interrupt.
static PHYS_ACTIVE: [[AtomicBool; 2]; MAX_CPUS] =
    [const { [AtomicBool::new(false), AtomicBool::new(false)] }; MAX_CPUS];

/// Per CPU and timer: the loaded vCPU's virtual line is high, so every
/// exit samples the timer again.
static LINE_HIGH: [[AtomicBool; 2]; MAX_CPUS] =
    [const { [AtomicBool::new(false), AtomicBool::new(false)] }; MAX_CPUS];

/// Per CPU and timer: the loaded vCPU has taken and ended the interrupt
/// of its timer's current rise while the timer still asserts, so the line
/// counts as low until the next rise (see the module's doc). Moves with
/// the vCPU ([`consumed_rises`], [`restore_consumed_rises`]).
static CONSUMED: [[AtomicBool; 2]; MAX_CPUS] =
    [const { [AtomicBool::new(false), AtomicBool::new(false)] }; MAX_CPUS];

/// Per CPU: what the next entry of the loaded vCPU has to do for its
/// timers before its list registers are flushed ([`ENTRY_FIRST`],
/// [`GuestTimer::entry_raise`]). One byte, so an entry with nothing to do
/// pays one load (every exit's return looks). Only its own CPU touches it,
/// with interrupts masked.
static ENTRY_WORK: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];

/// [`ENTRY_WORK`]: a vCPU was loaded and has not entered yet; its first
/// entry settles its timers' lines and PPIs ([`before_entry_locked`]).
const ENTRY_FIRST: u8 = 0b001;

impl GuestTimer {
    /// [`ENTRY_WORK`]: `on_host_interrupt` found the loaded vCPU's timer
    /// asserting and left its line to rise at the entry, under the lock
    /// the entry's flush takes anyway (one domain-locked section fewer per
    /// tick). Dropped at a switch-out: the vCPU's next load samples its
    /// timers.
    const fn entry_raise(self) -> u8 {
        match self {
            GuestTimer::Virtual => 0b010,
            GuestTimer::Physical => 0b100,
        }
    }
}

/// Whether `bits` of this CPU's [`ENTRY_WORK`] are set.
fn entry_work(me: usize, bits: u8) -> bool {
    ENTRY_WORK[me].load(Ordering::Relaxed) & bits != 0
}

/// Adds `bits` to this CPU's [`ENTRY_WORK`] (a load and a store: only this
/// CPU writes it, with interrupts masked).
fn add_entry_work(me: usize, bits: u8) {
    let work = ENTRY_WORK[me].load(Ordering::Relaxed);
    ENTRY_WORK[me].store(work | bits, Ordering::Relaxed);
}

/// The guest timer whose host PPI is `intid`, if any.
pub fn by_host_ppi(intid: u32) -> Option<GuestTimer> {
    GuestTimer::ALL.into_iter().find(|t| t.host_ppi() == intid)
}

/// Configures both timers' PPIs on this CPU edge-triggered where the GIC
/// allows it (see the module's doc), and enables them (bring-up). The boot
/// CPU logs which trigger they got.
pub fn enable_host_ppis(gic: &Gic, log: bool) {
    for timer in GuestTimer::ALL {
        let Ok(ppi) = IntId::new(timer.host_ppi()) else {
            continue;
        };
        // GICv3 only. `before_first_entry` clears a PPI's latched edge,
        // and QEMU's GICv2 model clears a PPI's pending bit on every CPU
        // at a GICD_ICPENDR write (hw/intc/arm_gic.c says so), not only
        // the writer's: another CPU's fresh expiry would be lost. (Its
        // timerlevel runs with edge PPIs had also missed expiries, but
        // that workload then gave up on a pending interrupt when its
        // vCPU stalled, so those runs prove nothing either way.) GIC-400's
        // PPIs are level-only anyway.
        if matches!(gic, Gic::V3(_)) {
            let _ = gic.set_trigger(ppi, Trigger::Edge);
        }
        let trigger = gic.trigger(ppi).unwrap_or(Trigger::Level);
        if log {
            match trigger {
                Trigger::Edge => log::info!(
                    "timer: guest {timer:?} timer's PPI {} edge-triggered (one exit per expiry)",
                    timer.host_ppi()
                ),
                Trigger::Level => log::info!(
                    "timer: guest {timer:?} timer's PPI {} stays level-triggered: \
                     a guest that ends the interrupt before masking its timer exits twice per expiry",
                    timer.host_ppi()
                ),
            }
        }
        let _ = gic.enable_interrupt(ppi);
    }
}

/// Links both timers' virtual interrupts to their physical PPIs in a new
/// domain's vGIC (every vCPU's bank).
pub fn link(vgic: &mut Vgic) -> Result<(), VgicError> {
    for timer in GuestTimer::ALL {
        vgic.link_hardware(timer.guest_intid(), Some(timer.host_ppi()))?;
    }
    Ok(())
}

/// `timer`'s PPI was taken on `me` (`acknowledged`; this ends it). If the
/// loaded vCPU's timer asserts, the PPI is left active for the guest to
/// deactivate (priority drop only) and its virtual line goes high at the
/// entry ([`before_entry_locked`]).
/// Otherwise (no vCPU loaded, one loaded but not entered yet, or a timer
/// that no longer asserts: a switch earlier in the same handler replaced
/// the one that raised it) the PPI is simply ended: a vCPU's load samples
/// its timers before its first entry.
///
/// Out of line: inlined, it grew `handle_irq` and its register pressure,
/// and the IPI's receiving path (which never comes here) paid for it
/// (micro-bench ipi 2312 -> 2328 under `-icount`).
#[inline(never)]
pub fn on_host_interrupt(gic: &Gic, me: usize, timer: GuestTimer, acknowledged: Acknowledged) {
    // Loaded earlier in this handler and not entered yet: the edge is most
    // likely its timer's restore, and a rise the vCPU already took must not
    // come back as a new one. Its first entry samples the timer and
    // delivers whatever is not consumed (`before_first_entry`); a consumed
    // rise cannot have fallen and risen again while the guest ran nothing.
    if vcpu::loaded(me).is_none() || entry_work(me, ENTRY_FIRST) || !timer.asserting() {
        gic.end_of_interrupt(acknowledged);
        return;
    }
    gic.priority_drop(acknowledged);
    CONSUMED[me][timer as usize].store(false, Ordering::Relaxed);
    PHYS_ACTIVE[me][timer as usize].store(true, Ordering::Relaxed);
    LINE_HIGH[me][timer as usize].store(true, Ordering::Relaxed);
    add_entry_work(me, timer.entry_raise());
}

/// Whether [`after_exit_locked`] has anything to do on `me` (a line that
/// was high, a PPI left active): without, an exit need not lock the domain
/// for the timers.
#[inline(always)]
pub fn exit_work_pending(me: usize) -> bool {
    GuestTimer::ALL.into_iter().any(|timer| {
        let t = timer as usize;
        LINE_HIGH[me][t].load(Ordering::Relaxed) || PHYS_ACTIVE[me][t].load(Ordering::Relaxed)
    })
}

/// Whether the next entry of the vCPU loaded on `me` has work for its
/// timers ([`before_entry_locked`]): its first since its load, or a timer
/// line to raise.
#[inline(always)]
pub fn entry_work_pending(me: usize) -> bool {
    ENTRY_WORK[me].load(Ordering::Relaxed) != 0
}

/// After an exit of vCPU `index` of `domain`, loaded on `me` (its list
/// registers just folded back, the domain locked): a line that was high
/// goes low if the timer no longer asserts or the guest has taken and
/// ended its interrupt (the PPI left active for it no longer is), and a
/// PPI left active for a virtual interrupt that is now neither pending
/// nor active is deactivated. Two atomic loads per timer when neither
/// applies, inlined: this runs on every exit that is not quiet.
///
/// It must run before the exit's handler acknowledges the timer's PPI: it
/// reads the PPI's active and pending states as the guest left them, and
/// an acknowledged fresh rise would look like a PPI the guest still owes.
#[inline(always)]
pub fn after_exit_locked(gic: &Gic, me: usize, domain: &mut Domain, index: usize) {
    if exit_work_pending(me) {
        after_exit_locked_work(gic, me, domain, index);
    }
}

/// [`after_exit_locked`]'s work, for a timer whose line was high or whose
/// PPI was left active.
#[inline(never)]
fn after_exit_locked_work(gic: &Gic, me: usize, domain: &mut Domain, index: usize) {
    for timer in GuestTimer::ALL {
        let t = timer as usize;
        let line_high = LINE_HIGH[me][t].load(Ordering::Relaxed);
        let phys_active = PHYS_ACTIVE[me][t].load(Ordering::Relaxed);
        if !line_high && !phys_active {
            continue;
        }
        // The PPI left active for the guest is no longer: the guest took
        // and ended the virtual interrupt (its deactivation reached the
        // PPI through the list register's HW bit). The vGIC cannot tell
        // that apart from a pending state the still-high line keeps up.
        let ended_by_guest = phys_active
            && IntId::new(timer.host_ppi())
                .and_then(|ppi| gic.is_active(ppi))
                .is_ok_and(|active| !active);
        if ended_by_guest {
            PHYS_ACTIVE[me][t].store(false, Ordering::Relaxed);
        }
        // Falling, or the rise taken and ended (each rise is delivered
        // once: see the module's doc). Lowering never makes an interrupt
        // deliverable.
        if line_high && (ended_by_guest || !timer.asserting()) {
            LINE_HIGH[me][t].store(false, Ordering::Relaxed);
            // Still asserting from the rise it took, unless the line fell
            // and rose again meanwhile without an exit (Linux re-arms for a
            // deadline already past before its EOI): that rise latched an
            // edge the guest has not had yet.
            let consumed = timer.asserting() && !edge_latched(gic, timer);
            CONSUMED[me][t].store(consumed, Ordering::Relaxed);
            if let Err(e) = domain.vgic.set_level(index, timer.guest_intid(), false) {
                warn_once(timer, index, domain.id, e);
            }
        }
        // After the lowering: the line fell before the guest took the
        // interrupt (or its deactivation did not reach the PPI).
        if phys_active && !ended_by_guest && !held(domain, index, timer) {
            deactivate(gic, me, timer);
        }
    }
}

/// Before an entry of vCPU `index` of `domain`, loaded on `me` (locked, its
/// list registers about to be flushed): does its timers' [`ENTRY_WORK`].
/// At its first entry since its load, its virtual lines follow its timers
/// as restored ([`before_first_entry`]); after a timer's interrupt, that
/// timer's line rises (a PPI targets the vCPU's own bank, so nothing else
/// is woken: the vCPU runs next).
pub fn before_entry_locked(gic: &Gic, me: usize, domain: &mut Domain, index: usize) {
    let work = ENTRY_WORK[me].load(Ordering::Relaxed);
    if work == 0 {
        return;
    }
    ENTRY_WORK[me].store(0, Ordering::Relaxed);
    if work & ENTRY_FIRST != 0 {
        // Alone: `on_host_interrupt` raises nothing for a vCPU that has
        // not entered since its load.
        before_first_entry(gic, me, domain, index);
        return;
    }
    for timer in GuestTimer::ALL {
        if work & timer.entry_raise() != 0
            && let Err(e) = domain.vgic.set_level(index, timer.guest_intid(), true)
        {
            warn_once(timer, index, domain.id, e);
        }
    }
}

/// The first entry of the vCPU just loaded on `me` (vCPU `index` of
/// `domain`, locked): its virtual lines follow its timers as restored,
/// and each PPI is left active exactly when its virtual interrupt is
/// pending or active (KVM's `kvm_timer_vcpu_load`), so a timer that
/// expired while the vCPU was out is delivered at this entry without an
/// exit of its own.
///
/// Out of line: it runs after a switch only, and inlined into
/// [`before_entry_locked`] it lengthened the timer interrupt's raise path
/// (micro-bench timer_10ms 1168 -> 1186 under `-icount`).
#[inline(never)]
fn before_first_entry(gic: &Gic, me: usize, domain: &mut Domain, index: usize) {
    for timer in GuestTimer::ALL {
        let t = timer as usize;
        // An edge the restore of its timer latched in the PPI (the line
        // rose from the previous context's level), or one a previous
        // context left, is the state sampled next, delivered below through
        // the vGIC: the PPI must not bring it again once the guest
        // deactivates it. Cleared before the sample, so a rise between the
        // two latches again; and once more after a sample that found the
        // timer asserting, since that sample delivers such a rise too (the
        // PPI would bring it a second time). No further rise can follow:
        // the line cannot fall while the guest runs nothing. A sample that
        // found it low keeps a later edge: that rise is new.
        let clear_edge = || {
            if let Ok(ppi) = IntId::new(timer.host_ppi()) {
                let _ = gic.clear_pending(ppi);
            }
        };
        clear_edge();
        let timer_asserts = timer.asserting();
        if timer_asserts {
            clear_edge();
        }
        // A rise it took and ended before it left is not a new one: its
        // timer was frozen meanwhile, so it still asserts from that rise.
        let asserting = timer_asserts && !CONSUMED[me][t].load(Ordering::Relaxed);
        // Rising for the vCPU about to enter: this entry lists it.
        if let Err(e) = domain.vgic.set_level(index, timer.guest_intid(), asserting) {
            warn_once(timer, index, domain.id, e);
        }
        LINE_HIGH[me][t].store(asserting, Ordering::Relaxed);
        let status = domain.vgic.irq_status(index, timer.guest_intid());
        let active = status.as_ref().is_ok_and(|s| s.active);
        let held = status.is_ok_and(|s| s.pending || s.active);
        if held
            && let Ok(ppi) = IntId::new(timer.host_ppi())
            && gic.set_active(ppi, true).is_ok()
        {
            PHYS_ACTIVE[me][t].store(true, Ordering::Relaxed);
            // The guest is inside its handler (the interrupt is active) and
            // the timer asserts: the rise it is handling, or a new one it
            // raised there and whose edge the clear above took (Linux
            // re-arms for a deadline already past before its EOI; the
            // switch came in between). Its deactivation cannot tell them
            // apart, so the PPI is left pending as well: the deactivation
            // re-raises it, the exit sees an edge (not consumed), and
            // `on_host_interrupt` delivers it if the timer still asserts.
            // A duplicate at worst, for a guest that ends before it masks
            // and was switched out in between; never a lost rise. (It
            // cannot fail: `set_active` just took the same PPI.)
            if asserting && active {
                let _ = gic.set_pending(ppi);
            }
        }
    }
}

/// `me` switches away from its vCPU: a PPI left active for it is
/// deactivated for whatever runs next (the vCPU's virtual lines keep their
/// last sampled level and its interrupts their state; its next load sets
/// the PPI active again if needed). For idle the timers are turned off;
/// for a vCPU, its first entry settles its timers.
pub fn on_switch_out(gic: Option<&Gic>, me: usize, to_idle: bool) {
    for timer in GuestTimer::ALL {
        if to_idle {
            timer.disable();
            CONSUMED[me][timer as usize].store(false, Ordering::Relaxed);
        }
        LINE_HIGH[me][timer as usize].store(false, Ordering::Relaxed);
        if let Some(gic) = gic
            && PHYS_ACTIVE[me][timer as usize].load(Ordering::Relaxed)
        {
            deactivate(gic, me, timer);
        }
    }
    // A line left to rise is dropped: the next load samples the timers.
    let work = if to_idle { 0 } else { ENTRY_FIRST };
    ENTRY_WORK[me].store(work, Ordering::Relaxed);
}

/// Which of its timers' current rises the vCPU loaded on `me` has already
/// taken and ended (to be kept with its state when it leaves; read while
/// its timers are still loaded and IRQs masked: a rise whose timer no
/// longer asserts is over).
pub fn consumed_rises(gic: Option<&Gic>, me: usize) -> [bool; 2] {
    // Loaded and switched out again before its first entry: the guest ran
    // nothing, and a latched edge is its timer's restore, not a new rise.
    let entered = !entry_work(me, ENTRY_FIRST);
    GuestTimer::ALL.map(|timer| {
        CONSUMED[me][timer as usize].load(Ordering::Relaxed)
            && timer.asserting()
            // A rise since (the guest masked or re-armed and the timer
            // expired again without an exit) latched an edge this switch
            // leaves to the next context's load to clear: that rise is
            // not consumed, and its next load must deliver it.
            && !(entered && gic.is_some_and(|gic| edge_latched(gic, timer)))
    })
}

/// Whether `timer`'s PPI has an edge latched on this CPU and not yet
/// acknowledged: the timer rose since the hypervisor last took the PPI.
fn edge_latched(gic: &Gic, timer: GuestTimer) -> bool {
    IntId::new(timer.host_ppi())
        .and_then(|ppi| gic.is_pending(ppi))
        .unwrap_or(false)
}

/// The vCPU just loaded on `me` had taken and ended these rises
/// ([`consumed_rises`] when it left).
pub fn restore_consumed_rises(me: usize, consumed: [bool; 2]) {
    for (slot, value) in CONSUMED[me].iter().zip(consumed) {
        slot.store(value, Ordering::Relaxed);
    }
}

/// Whether `timer`'s virtual interrupt of vCPU `index` is pending or
/// active: the guest still owes the PPI's deactivation.
fn held(domain: &Domain, index: usize, timer: GuestTimer) -> bool {
    domain
        .vgic
        .irq_status(index, timer.guest_intid())
        .is_ok_and(|s| s.pending || s.active)
}

fn deactivate(gic: &Gic, me: usize, timer: GuestTimer) {
    PHYS_ACTIVE[me][timer as usize].store(false, Ordering::Relaxed);
    if let Ok(ppi) = IntId::new(timer.host_ppi()) {
        let _ = gic.set_active(ppi, false);
    }
}

fn warn_once(timer: GuestTimer, index: usize, domain: DomainId, error: VgicError) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "timer: {timer:?} line of vCPU {index} of domain {}: {error} (not logged again)",
            domain.0
        );
    }
}
