//! The guests' EL1 timers: the virtual timer (CNTV) and the EL1 physical
//! timer (CNTP), both given to the running vCPU directly (CNTHCTL_EL2.EL1PCEN:
//! the hypervisor's own tick is the EL2 timer, CNTHP) and switched with its
//! other EL1 registers (`sysregs`).
//!
//! Each timer's output is a level-sensitive line into the domain's vGIC, as
//! on real hardware and under KVM: the virtual interrupt is pending exactly
//! while the timer asserts (enabled, condition met, not masked), so a guest
//! that disables, masks or re-arms its timer takes its pending interrupt
//! back. The hypervisor never touches the guest's IMASK. While a loaded
//! timer asserts, its physical PPI is disabled on this CPU (it would fire
//! again at once); every exit samples the line again (the guest's EOI of
//! the level-sensitive interrupt brings a maintenance exit) and re-enables
//! the PPI once the line is low, and a switch away re-enables it for
//! whatever runs next.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use aarch64_cpu::registers::{CNTP_CTL_EL0, CNTP_CVAL_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0};
use gic::{Gic, IntId};
use sched::{DomainId, MAX_CPUS};
use tock_registers::interfaces::{Readable, Writeable};

use super::{domain, vcpu};

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

/// Per CPU and timer: its physical PPI is disabled because the loaded
/// vCPU's timer asserts.
static HOST_MASKED: [[AtomicBool; 2]; MAX_CPUS] =
    [const { [AtomicBool::new(false), AtomicBool::new(false)] }; MAX_CPUS];

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

/// `timer`'s PPI was taken on `me` (and acknowledged; the caller ends it).
/// If the loaded vCPU's timer asserts, its virtual line goes high and the
/// PPI is disabled here until the line is low again. Otherwise the PPI was
/// raised by a timer a switch earlier in the same handler replaced (that
/// vCPU's saved timer raises it again when it is next loaded): nothing to do.
pub fn on_host_interrupt(gic: &Gic, me: usize, timer: GuestTimer) {
    if vcpu::loaded(me).is_none() || !timer.asserting() {
        return;
    }
    if let Ok(ppi) = IntId::new(timer.host_ppi()) {
        let _ = gic.disable_interrupt(ppi);
    }
    HOST_MASKED[me][timer as usize].store(true, Ordering::Relaxed);
    set_line(me, timer, true);
}

/// After an exit of the vCPU loaded on `me` (its list registers folded
/// back): a line that was high is sampled again; once it is low the
/// virtual interrupt is no longer pending and the PPI is enabled again.
pub fn sample(gic: &Gic, me: usize) {
    for timer in GuestTimer::ALL {
        if !HOST_MASKED[me][timer as usize].load(Ordering::Relaxed) || timer.asserting() {
            continue;
        }
        set_line(me, timer, false);
        unmask(gic, me, timer);
    }
}

/// `me` switches away from its vCPU: the PPIs are enabled again for what
/// runs next (the vCPU's virtual lines keep their last sampled level; a
/// timer that still asserts raises its PPI again when the vCPU is loaded),
/// and for idle the timers are turned off.
pub fn on_switch_out(gic: Option<&Gic>, me: usize, to_idle: bool) {
    for timer in GuestTimer::ALL {
        if to_idle {
            timer.disable();
        }
        if let Some(gic) = gic
            && HOST_MASKED[me][timer as usize].load(Ordering::Relaxed)
        {
            unmask(gic, me, timer);
        }
    }
}

fn unmask(gic: &Gic, me: usize, timer: GuestTimer) {
    HOST_MASKED[me][timer as usize].store(false, Ordering::Relaxed);
    if let Ok(ppi) = IntId::new(timer.host_ppi()) {
        let _ = gic.enable_interrupt(ppi);
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
                log::warn!(
                    "timer: {timer:?} line of vCPU {index} of domain {}: {e}",
                    domain.0
                );
                None
            }
        }
    })
    .flatten();
    if let Some(vcpu) = target {
        super::runtime::RUNTIME.notify(vcpu);
    }
}
