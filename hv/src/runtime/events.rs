//! Scheduling events on a CPU: the scheduler's entry point, the vCPU's
//! block/wake/yield/notify protocol (with the lost-wake-up re-check, once
//! for both architectures), bounded waits for a vCPU to leave its CPU, the
//! sibling-pause test hook, and the watchdog and run-time log lines.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::Ordering;

use guest_abi::HvError;
use log::{error, info, warn};
use sched::driver::{self, CpuEvent};
use sched::{DomainId, Platform, System, SystemError, VcpuId};
use trace::Kind;

use super::{
    Arch, Locked, NO_DEADLINE, PAUSE_STOP_TIMEOUT_NS, RUNTIME_LINE_DOMAINS, Runtime,
    STARVATION_LINES, STARVATION_NS,
};

/// The one error policy of the block/wake/yield/notify paths: a vCPU the
/// scheduler no longer knows (its domain was torn down meanwhile) is a
/// logged warning, never a stop.
fn refused(operation: &str, vcpu: VcpuId, error: SystemError) {
    warn!("sched: cannot {operation} vCPU {}: {error}", vcpu.0);
}

/// Wakes `vcpu`; whether it was blocked (a wake of a runnable vCPU changes
/// nothing, and is not traced).
fn wake_blocked(system: &mut System, vcpu: VcpuId, p: &dyn Platform) -> Result<bool, SystemError> {
    let was_blocked = system.vcpu_info(vcpu).is_some_and(|v| v.blocked);
    system.vcpu_wake(vcpu, p)?;
    Ok(was_blocked)
}

impl<A: Arch> Runtime<A> {
    /// A scheduling kick or timer on this CPU: run the scheduler to the end.
    pub fn on_event(&self, event: CpuEvent) {
        let Some(table) = self.table.get() else {
            return;
        };
        let me = self.arch.cpu_index();
        if event == CpuEvent::Timer
            && let Some(slot) = self.deadlines.get(me)
        {
            // Forget only a deadline that has passed. Another CPU (a sibling
            // deciding for this CPU's resource) may have stored a new one
            // since the interrupt: erasing that would leave the resource
            // with a deadline nobody fires, since the scheduler does not arm
            // again one that is still ahead.
            let expired = slot.load(Ordering::Acquire);
            if expired <= self.arch.now_ns() {
                let _ = slot.compare_exchange(
                    expired,
                    NO_DEADLINE,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
        }
        let kind = match event {
            CpuEvent::Kick => Kind::KickReceived,
            CpuEvent::Timer => Kind::TimerFire,
        };
        self.trace(me, kind, 0, 0, 0);
        self.lock_wait.event();
        let started = self.arch.event_started();
        let report = driver::drive(&Locked(self, me), table, self, me, event);
        self.arch.event_done(me, started, &report);
        if report.timeouts > 0 {
            // The latest timeout's record names the CPUs that never arrived.
            let latest = self
                .with_cpu(me, |s, _| {
                    s.diagnostics()
                        .filter(|d| matches!(d, sched::Diagnostic::RendezvousTimedOut { .. }))
                        .last()
                })
                .flatten();
            error!(
                "sched: cpu {me}: {} rendezvous timed out (latest: {latest:?})",
                report.timeouts
            );
        }
    }

    /// Wakes `vcpu` (a no-op if it is not blocked); see [`refused`] for a
    /// vCPU the scheduler no longer knows.
    pub fn wake(&self, vcpu: VcpuId) {
        match self.with_vcpu(vcpu, |s, p| wake_blocked(s, vcpu, p)) {
            Some(Err(e)) => refused("wake", vcpu, e),
            Some(Ok(true)) => self.trace_vcpu(Kind::Wake, vcpu),
            _ => {}
        }
    }

    /// Blocks `vcpu` (the caller's, which found nothing to deliver: WFI,
    /// HLT) and runs the scheduler on this CPU.
    ///
    /// The lost wake-up: an interrupt another CPU injects between the
    /// caller's "nothing pending" check and the block finds the vCPU still
    /// runnable, so its [`Runtime::notify`] wakes nothing; the vCPU would
    /// sleep with the interrupt pending. So after blocking, look again
    /// ([`Arch::interrupt_pending`]) and undo the block if one arrived. An
    /// injection after that second look finds the vCPU blocked and wakes it
    /// itself. `lockstep` tests put an injection at every step.
    pub fn block(&self, vcpu: VcpuId) {
        match self.with_vcpu(vcpu, |s, p| s.vcpu_block(vcpu, p)) {
            Some(Err(e)) => refused("block", vcpu, e),
            Some(Ok(())) => self.trace_vcpu(Kind::Block, vcpu),
            None => {}
        }
        if self.arch.interrupt_pending(vcpu) {
            self.wake(vcpu);
        }
        self.on_event(CpuEvent::Kick);
    }

    /// `vcpu` (the caller's) gives up the rest of its slice: the scheduler
    /// runs on this CPU and may pick another unit.
    pub fn yield_vcpu(&self, vcpu: VcpuId) {
        match self.with_vcpu(vcpu, |s, p| s.vcpu_yield(vcpu, p)) {
            Some(Err(e)) => refused("yield", vcpu, e),
            Some(Ok(())) => self.trace_vcpu(Kind::Yield, vcpu),
            None => {}
        }
        self.on_event(CpuEvent::Kick);
    }

    /// A new interrupt is pending for `vcpu` (already recorded, under the
    /// lock [`Arch::interrupt_pending`] takes, before this call): wake it if
    /// it is blocked, and nudge the CPU running it if that is another one,
    /// so its next entry delivers it.
    pub fn notify(&self, vcpu: VcpuId) {
        // Only a blocked vCPU needs the scheduler (and its lock). One that is
        // not (running, or runnable and seeing it at its next entry) gets
        // the nudge alone, as Xen's `vcpu_kick` skips `vcpu_unblock`. A vCPU
        // about to block cannot slip through: it sets its hint before it
        // looks for pending interrupts under the lock the caller recorded
        // this one under (`sched::BlockedHints`).
        let may_be_blocked = self
            .blocked_hints
            .get()
            .is_none_or(|hints| hints.may_be_blocked(vcpu));
        if may_be_blocked {
            self.wake(vcpu);
        }
        // Wherever it is loaded (a vCPU that just blocked may still be),
        // its CPU's next entry delivers the interrupt.
        if let Some(cpu) = self.arch.loaded_on(vcpu)
            && cpu != self.arch.cpu_index()
        {
            self.arch.nudge(cpu);
        }
    }

    /// The starvation watchdog: logs a warning for every runnable unit that
    /// has waited [`STARVATION_NS`] or more for its turn (see
    /// [`System::starving_units`]), with the state of its pool's resources.
    /// At most [`STARVATION_LINES`] lines a call; called with the runtime
    /// line. A scheduler that loses a wake-up or a deadline shows here.
    pub fn log_starving(&self) {
        let now = self.arch.now_ns();
        let mut found = Vec::new();
        self.for_each_part(|s, _| {
            let room = STARVATION_LINES.saturating_sub(found.len());
            found.extend(
                s.starving_units(now, STARVATION_NS)
                    .into_iter()
                    .take(room)
                    .map(|(unit, domain, waited)| {
                        let pool = s.domain_pool(domain);
                        let state = pool.map(|p| s.describe_pool(p, now)).unwrap_or_default();
                        (unit, domain, waited, state)
                    }),
            );
        });
        for (unit, domain, waited, state) in found {
            warn!(
                "sched: dom{} unit {} is runnable but has waited {} ms for its turn; its pool: {state}",
                domain.0,
                unit.0,
                waited / 1_000_000
            );
        }
    }

    /// Logs every domain's run time so far, summed over its units, as the
    /// pool schedulers account it: `sched: runtime at T ms: dom1 R1 ns, dom2
    /// R2 ns`. Tests compare CPU shares with it (`xtask`'s weights
    /// scenario); the values are collected pool by pool, each under its
    /// part's lock, and formatted after.
    pub fn log_runtimes(&self) {
        // Part by part (the whole machine need not stop for a log line),
        // then in creation order as one system lists them.
        let mut runtimes: Vec<(u32, u64)> = Vec::new();
        self.for_each_part(|s, _| {
            for domain in s.domains() {
                let runtime = s
                    .domain_units(domain)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|&u| s.unit_stats(u))
                    .map(|stats| stats.runtime_ns)
                    .sum();
                runtimes.push((domain.0, runtime));
            }
        });
        runtimes.sort_unstable_by_key(|&(domain, _)| domain);
        runtimes.truncate(RUNTIME_LINE_DOMAINS);
        let count = runtimes.len();
        let total = runtimes[..count]
            .iter()
            .fold(0u64, |sum, (_, r)| sum.wrapping_add(*r));
        if count == 0 || self.last_runtime_logged.swap(total, Ordering::Relaxed) == total {
            return;
        }
        let mut line = String::new();
        for (i, (domain, runtime)) in runtimes[..count].iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            let _ = write!(line, "{separator} dom{domain} {runtime} ns");
        }
        info!(
            "sched: runtime at {} ms:{line}",
            self.arch.now_ns() / 1_000_000
        );
    }

    /// Waits (bounded by `timeout_ns`) until no CPU holds `vcpu` any more:
    /// its state may then be replaced. True if it was released in time.
    pub fn wait_until_released(&self, vcpu: VcpuId, timeout_ns: u64) -> bool {
        let deadline = self.arch.now_ns().saturating_add(timeout_ns);
        loop {
            let held = self
                .with_vcpu(vcpu, |s, _| s.vcpu_running_on(vcpu))
                .flatten()
                .is_some();
            if !held {
                return true;
            }
            if self.arch.now_ns() >= deadline {
                return false;
            }
            platform::sync::cpu_relax();
        }
    }

    /// `TEST_PAUSE_SIBLING` / `TEST_UNPAUSE_SIBLING` from vCPU `caller` of
    /// `domain` (whose vCPUs, by index, are `vcpus`) on its vCPU `sibling`.
    /// Only a sibling of the caller's own sched unit (the case that hung
    /// Xen: a vCPU pausing a sibling it must rendezvous with). The pause is
    /// the scheduler's test pause (`System::vcpu_test_pause`), kept apart
    /// from the hypervisor's own: an unpause here never drops the pause that
    /// holds a powered-off vCPU, whatever races with it. A pause returns once
    /// the sibling no longer runs, bounded by [`PAUSE_STOP_TIMEOUT_NS`] (then
    /// undone, and `Busy`); pausing a paused sibling is `Busy`, unpausing one
    /// that is not is `InvalidParameter` (guest_abi).
    pub fn pause_sibling(
        &self,
        domain: DomainId,
        vcpus: &[VcpuId],
        caller: u32,
        sibling: u32,
        pause: bool,
    ) -> Result<(), HvError> {
        let (Some(&me), Some(&target)) = (vcpus.get(caller as usize), vcpus.get(sibling as usize))
        else {
            return Err(HvError::NotFound);
        };
        // Both of one domain: one part holds them.
        let same_unit = self.with_vcpu(
            me,
            |s, _| matches!((s.vcpu_info(me), s.vcpu_info(target)), (Some(a), Some(b)) if a.unit == b.unit),
        );
        if same_unit != Some(true) {
            return Err(HvError::Denied);
        }
        if !pause {
            return match self.with_vcpu(target, |s, p| s.vcpu_test_unpause(target, p)) {
                Some(Ok(())) => Ok(()),
                Some(Err(SystemError::NotTestPaused(_))) => Err(HvError::InvalidParameter),
                _ => Err(HvError::Busy),
            };
        }
        if !matches!(
            self.with_vcpu(target, |s, p| s.vcpu_test_pause(target, p)),
            Some(Ok(_))
        ) {
            return Err(HvError::Busy);
        }
        // The ABI returns once the sibling has stopped: its CPU was kicked and
        // switches it out on its own; wait for that, bounded, without holding
        // the scheduler lock (that CPU needs it).
        if self.wait_until_released(target, PAUSE_STOP_TIMEOUT_NS) {
            return Ok(());
        }
        warn!(
            "domain {}: vCPU {sibling} did not stop within {} ms of its pause",
            domain.0,
            PAUSE_STOP_TIMEOUT_NS / 1_000_000
        );
        let _ = self.with_vcpu(target, |s, p| s.vcpu_test_unpause(target, p));
        Err(HvError::Busy)
    }
}
