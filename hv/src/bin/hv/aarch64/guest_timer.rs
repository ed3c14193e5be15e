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

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use aarch64_cpu::registers::{CNTP_CTL_EL0, CNTP_CVAL_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0};
use gic::{Acknowledged, Gic, IntId};
use hv::arm::vgic::{Vgic, VgicError};
use sched::{DomainId, MAX_CPUS};
use tock_registers::interfaces::{Readable, Writeable};

use super::domain::{self, Domain};
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

/// Per CPU: a vCPU was loaded and has not entered yet; its first entry
/// settles its timers' lines and PPIs ([`before_first_entry`]).
static FRESH_LOAD: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// The guest timer whose host PPI is `intid`, if any.
pub fn by_host_ppi(intid: u32) -> Option<GuestTimer> {
    GuestTimer::ALL.into_iter().find(|t| t.host_ppi() == intid)
}

/// Enables both timers' PPIs on this CPU (bring-up).
pub fn enable_host_ppis(gic: &Gic) {
    for timer in GuestTimer::ALL {
        if let Ok(ppi) = IntId::new(timer.host_ppi()) {
            let _ = gic.enable_interrupt(ppi);
        }
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
/// loaded vCPU's timer asserts, its virtual line goes high and the PPI is
/// left active for the guest to deactivate (priority drop only).
/// Otherwise the PPI was raised by a timer a switch earlier in the same
/// handler replaced (that vCPU's saved timer raises it again when it is
/// next loaded): it is simply ended.
pub fn on_host_interrupt(gic: &Gic, me: usize, timer: GuestTimer, acknowledged: Acknowledged) {
    if vcpu::loaded(me).is_none() || !timer.asserting() {
        gic.end_of_interrupt(acknowledged);
        return;
    }
    gic.priority_drop(acknowledged);
    PHYS_ACTIVE[me][timer as usize].store(true, Ordering::Relaxed);
    LINE_HIGH[me][timer as usize].store(true, Ordering::Relaxed);
    set_line(me, timer, true);
}

/// Whether [`after_exit_locked`] has anything to do on `me` (a line that
/// was high, a PPI left active): without, an exit need not lock the domain
/// for the timers.
pub fn exit_work_pending(me: usize) -> bool {
    GuestTimer::ALL.into_iter().any(|timer| {
        let t = timer as usize;
        LINE_HIGH[me][t].load(Ordering::Relaxed) || PHYS_ACTIVE[me][t].load(Ordering::Relaxed)
    })
}

/// Whether the vCPU loaded on `me` has not entered yet since its load
/// ([`before_first_entry`] still has to settle its timers).
pub fn first_entry_pending(me: usize) -> bool {
    FRESH_LOAD[me].load(Ordering::Relaxed)
}

/// After an exit of vCPU `index` of `domain`, loaded on `me` (its list
/// registers just folded back, the domain locked): a line that was high is
/// sampled again, and a PPI left active for a virtual interrupt that is
/// now neither pending nor active is deactivated. Two atomic loads per
/// timer when neither applies: this runs on every exit.
pub fn after_exit_locked(gic: &Gic, me: usize, domain: &mut Domain, index: usize) {
    for timer in GuestTimer::ALL {
        let t = timer as usize;
        if LINE_HIGH[me][t].load(Ordering::Relaxed) && !timer.asserting() {
            LINE_HIGH[me][t].store(false, Ordering::Relaxed);
            // Falling: never makes an interrupt deliverable.
            if let Err(e) = domain.vgic.set_level(index, timer.guest_intid(), false) {
                warn_once(timer, index, domain.id, e);
            }
        }
        if PHYS_ACTIVE[me][t].load(Ordering::Relaxed) && !held(domain, index, timer) {
            deactivate(gic, me, timer);
        }
    }
}

/// Before the first entry of the vCPU just loaded on `me` (vCPU `index` of
/// `domain`, locked): its virtual lines follow its timers as restored,
/// and each PPI is left active exactly when its virtual interrupt is
/// pending or active (KVM's `kvm_timer_vcpu_load`), so a timer that
/// expired while the vCPU was out is delivered at this entry without an
/// exit of its own.
pub fn before_first_entry(gic: &Gic, me: usize, domain: &mut Domain, index: usize) {
    if !FRESH_LOAD[me].swap(false, Ordering::Relaxed) {
        return;
    }
    for timer in GuestTimer::ALL {
        let t = timer as usize;
        let asserting = timer.asserting();
        // Rising for the vCPU about to enter: this entry lists it.
        if let Err(e) = domain.vgic.set_level(index, timer.guest_intid(), asserting) {
            warn_once(timer, index, domain.id, e);
        }
        LINE_HIGH[me][t].store(asserting, Ordering::Relaxed);
        if held(domain, index, timer)
            && let Ok(ppi) = IntId::new(timer.host_ppi())
            && gic.set_active(ppi, true).is_ok()
        {
            PHYS_ACTIVE[me][t].store(true, Ordering::Relaxed);
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
        }
        LINE_HIGH[me][timer as usize].store(false, Ordering::Relaxed);
        if let Some(gic) = gic
            && PHYS_ACTIVE[me][timer as usize].load(Ordering::Relaxed)
        {
            deactivate(gic, me, timer);
        }
    }
    FRESH_LOAD[me].store(!to_idle, Ordering::Relaxed);
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

/// Drives `timer`'s virtual line of the vCPU loaded on `me`.
fn set_line(me: usize, timer: GuestTimer, level: bool) {
    let Some((domain, index)) = vcpu::with_loaded(me, |s| (DomainId(s.domain.domain), s.index))
    else {
        return;
    };
    let target = domain::with_domain(domain, |d| {
        match d.vgic.set_level(index as usize, timer.guest_intid(), level) {
            Ok(Some(target)) => d.vcpus.get(target).copied(),
            Ok(None) => None,
            Err(e) => {
                warn_once(timer, index as usize, domain, e);
                None
            }
        }
    })
    .flatten();
    // The loaded vCPU itself (a PPI targets its own bank): it runs guest
    // code, so it is not blocked (a vCPU blocks only in an exit handler,
    // which runs with interrupts masked and switches it out before they are
    // taken again), and this CPU's next entry lists the interrupt. Skipping
    // `notify` spares the scheduler lock on every tick (micro-bench
    // timer_10ms under -icount: 6112 -> 4620 ns).
    if let Some(vcpu) = target
        && Some(vcpu) != vcpu::loaded(me)
    {
        super::runtime::RUNTIME.notify(vcpu);
    }
}
