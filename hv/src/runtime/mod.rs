//! The hypervisor's runtime, written once for both architectures and
//! host-tested: the scheduler as per-pool parts behind their locks
//! ([`SharedSystem`]), the rendezvous table,
//! each CPU's timer deadline (the scheduler's and its vCPUs' timed wake-ups,
//! handed down to [`Arch::rearm_timer`]), the per-CPU scheduling entry point
//! ([`Runtime::on_event`]), the block/wake/yield/notify protocol with its
//! lost-wake-up re-check ([`events`]), the co-residency checker's logs
//! ([`coresidency`]), pool operations and the privileged `POOL_OP`
//! hypercall ([`pool_ops`]), the hypervisor console's command runner
//! ([`console`]), the scheduler trace ([`tracing`]) and the lock's wait
//! counter ([`lockwait`]).
//!
//! What differs per architecture (the scheduling IPI, the timer, interrupt
//! masking, the CPU index, the console, whether a vCPU has an interrupt
//! waiting, what it knows about domains) is the [`Arch`] trait, implemented
//! by the binary's arch modules; each keeps one `static` [`Runtime`] over its
//! implementation. The arch code calls into the runtime; the runtime never
//! names the arch code.
//!
//! Every console command answers with lines on the console; a refused one
//! prints a single `error: ...` line and changes nothing. Every pool
//! operation, from either side, is also logged (`pools: ...`) so a test can
//! follow it.

pub mod boot;
pub mod calls;
pub mod console;
pub mod coresidency;
pub mod events;
pub mod identities;
pub mod loads;
pub mod lockwait;
pub mod pool_ops;
pub mod restart;
pub mod tracing;
pub mod wakeup;

#[cfg(test)]
mod tests;

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use log::error;
use platform::sync::{Mutex, Once};
use sched::driver::{DriveReport, SystemLock};
use sched::rendezvous::RendezvousTable;
use sched::rendezvous::{Outcome, Ticket};
use sched::{
    BlockedHints, CpuContext, CpuSet, DomainId, LockWaits, MAX_CPUS, Platform, SharedSystem,
    System, Time, VcpuId,
};

use crate::pools::PoolNames;

/// How long a move waits for the domain's vCPUs to leave their old CPUs. On
/// hardware this takes microseconds; under QEMU's TCG on a loaded host a
/// virtual CPU can go unscheduled for hundreds of milliseconds.
pub const MOVE_RELEASE_TIMEOUT_NS: u64 = 2_000_000_000;

/// How often a CPU that still holds a moved vCPU is kicked again.
pub const MOVE_REKICK_NS: u64 = 100_000_000;

/// How long a paused sibling may take to leave its CPU. Like the rendezvous
/// bound, generous because a TCG host may not run that CPU's thread for a
/// long while.
pub const PAUSE_STOP_TIMEOUT_NS: u64 = 500_000_000;

/// How long a vCPU being restarted (PSCI `CPU_ON`, an x86 STARTUP) may take
/// to leave the CPU that ran it before it went off (see above).
pub const VCPU_RELEASE_TIMEOUT_NS: u64 = 500_000_000;

/// The most domains one runtime line names.
const RUNTIME_LINE_DOMAINS: usize = 32;

/// No deadline armed.
const NO_DEADLINE: u64 = u64::MAX;

/// How long a runnable unit may wait for its turn before the watchdog says
/// so: far beyond any slice of the schedulers that promise a turn.
pub const STARVATION_NS: u64 = 1_000_000_000;

/// The most units the watchdog names per call.
const STARVATION_LINES: usize = 4;

/// What the runtime needs from one architecture. Implementations are
/// the binary's arch modules: nothing here may need `unsafe`.
pub trait Arch: Sync {
    /// The monotonic clock, in ns.
    fn now_ns(&self) -> Time;
    /// Sends the scheduling IPI to every CPU of `cpus` (Xen's
    /// SCHEDULE_SOFTIRQ IPI; the calling CPU may be among them).
    fn kick(&self, cpus: &CpuSet);
    /// [`sched::Platform::switch_to`]: `cpu` (the caller) now runs `context`.
    fn switch_to(&self, cpu: usize, context: CpuContext);
    /// The calling CPU's logical index.
    fn cpu_index(&self) -> usize;
    /// Runs `f` with this CPU's interrupts masked (the locks here are also
    /// taken from interrupt handlers).
    fn without_irqs<R>(&self, f: impl FnOnce() -> R) -> R;
    /// Reprograms the calling CPU's timer for `deadline` (ns, the earliest
    /// of its scheduling deadline and its vCPUs' timed wake-ups; `None`:
    /// nothing the runtime waits for). The arch adds its own (housekeeping
    /// tick, a loaded guest's timer).
    fn rearm_timer(&self, deadline: Option<Time>);
    /// Makes `cpu` (another CPU) leave the guest it runs and look at that
    /// vCPU's interrupts again: a new one arrived for it.
    fn nudge(&self, cpu: usize);
    /// The CPU that has `vcpu` loaded, without a lock
    /// ([`loads::CpuLoads::loaded_on`]: set before the vCPU's first entry
    /// there, cleared after its last exit).
    fn loaded_on(&self, vcpu: VcpuId) -> Option<usize>;
    /// Whether an interrupt waits for `vcpu` that should end a block (WFI,
    /// HLT): the re-check that closes the lost-wake-up window
    /// ([`Runtime::block`]).
    fn interrupt_pending(&self, vcpu: VcpuId) -> bool;
    /// The clock every CPU reads alike (the generic counter, the TSC): the
    /// co-residency logs' timestamps.
    fn switch_clock(&self) -> u64;
    /// Writes one console line (`args`, then a line feed) without the log
    /// prefix: the command line's answers.
    fn console_line(&self, args: fmt::Arguments<'_>);
    /// Hands `bytes` a guest wrote with the `CONSOLE_WRITE` hypercall to
    /// domain `id`'s console (its emulated UART's line buffer, so they
    /// come out `[domN] `-prefixed like its UART output).
    fn domain_console_write(&self, id: DomainId, bytes: &[u8]);
    /// Every domain built (stopped ones included), in creation order.
    fn domain_ids(&self) -> Vec<DomainId>;
    /// Domain `id`'s name and whether it is stopped.
    fn domain_summary(&self, id: DomainId) -> Option<(String, bool)>;
    /// How long `vcpu` has run so far, in ns.
    fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64;
    /// The domain and index of installed vCPU `vcpu` (lock-free: the trace
    /// asks on the switch path).
    fn vcpu_identity(&self, vcpu: VcpuId) -> Option<(DomainId, u32)>;
    /// Stops domain `id` for good (console `destroy`): out of the scheduler
    /// at once, its memory freed once its vCPUs are off every CPU. `Err`
    /// says why it cannot (nothing changed).
    fn domain_destroy(&self, id: DomainId) -> Result<(), &'static str> {
        let _ = id;
        Err("destroy is not supported on this architecture")
    }
    /// Reloads domain `id` from its image and boots it again (console
    /// `restart`), as a guest's own reset does. `Err` says why it cannot.
    fn domain_restart(&self, id: DomainId) -> Result<(), &'static str> {
        let _ = id;
        Err("restart is not supported on this architecture")
    }
    /// The scheduler was built, not yet published: a last look at it.
    fn on_boot(&self, system: &System) {
        let _ = system;
    }
    /// A scheduling event starts on this CPU; the value comes back in
    /// [`Arch::event_done`] (switch-cost timing).
    fn event_started(&self) -> u64 {
        0
    }
    /// A scheduling event on `cpu` that started at `started` is over.
    fn event_done(&self, cpu: usize, started: u64, report: &DriveReport) {
        let _ = (cpu, started, report);
    }
}

/// The scheduler and everything around it, for one architecture `A`.
pub struct Runtime<A: Arch> {
    arch: A,
    /// The scheduler, one part per pool each behind its own lock
    /// ([`sched::SharedSystem`]).
    system: Once<SharedSystem>,
    table: Once<Arc<RendezvousTable>>,
    /// Which vCPUs may be blocked, read without the system's lock by
    /// [`Runtime::notify`]'s fast path.
    blocked_hints: Once<BlockedHints>,
    /// Each CPU's scheduling timer deadline (ns), or [`NO_DEADLINE`].
    deadlines: [AtomicU64; MAX_CPUS],
    /// The run time the last `runtime at` line added up to: a machine whose
    /// domains no longer run does not repeat the line.
    last_runtime_logged: AtomicU64,
    /// The pools' names (the config's; `POOL_OP` create names new ones
    /// `poolN`). Locked after the system, never before it.
    names: Mutex<PoolNames>,
    /// `hv.test-break-cosched=CPU,...`: the CPUs that skip their rendezvous
    /// waits (a fault planted to prove the co-residency checker reports it).
    break_cosched: [AtomicBool; MAX_CPUS],
    /// Blocked vCPUs' timed wake-ups, per CPU.
    wakeups: wakeup::WakeupLists,
    /// The co-residency checker, once the boot CPU knows how many CPUs
    /// there are.
    checker: Once<coresidency::Checker>,
    /// The trace rings, built at boot ([`tracing`]).
    trace: Once<trace::Rings>,
    /// `hv.trace=CLASSES`: the classes to record from boot (0: none).
    trace_at_boot: AtomicU32,
    /// `hv.trace-dump=SECONDS`: the boot session's length in ns (0: until
    /// `trace dump`).
    trace_dump_after_ns: AtomicU64,
    /// When the boot session is dumped (ns; 0: never), set from
    /// `trace_dump_after_ns` when the boot's domains start.
    trace_dump_at: AtomicU64,
    /// `hv.trace-events=N`: each ring's size (0: the default).
    trace_capacity: AtomicUsize,
    /// How long CPUs spin for `system`'s lock (always on).
    lock_wait: lockwait::LockWait,
    /// The event count the last `sched: lock wait` line showed.
    last_lock_wait_logged: AtomicU64,
}

/// [`SystemLock`] for the driver on CPU `.1`: that CPU's part of the
/// system, which is published before the rendezvous table the driver needs.
struct Locked<'a, A: Arch>(&'a Runtime<A>, usize);

impl<A: Arch> SystemLock for Locked<'_, A> {
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        // `on_event` only runs once `table` is published, which happens
        // after the system is stored.
        let system = self
            .0
            .system
            .get()
            .expect("sched: TABLE is published after SYSTEM");
        self.0
            .arch
            .without_irqs(|| system.with_cpu(self.1, &Waits(self.0), f))
    }
}

/// [`LockWaits`] for the scheduler's locks: the arch clock, the always-on
/// wait counter.
struct Waits<'a, A: Arch>(&'a Runtime<A>);

impl<A: Arch> LockWaits for Waits<'_, A> {
    fn now_ns(&self) -> Time {
        self.0.arch.now_ns()
    }

    fn acquired(&self, waited_ns: Option<Time>) {
        match waited_ns {
            None => self.0.lock_wait.uncontended(),
            Some(ns) => self.0.lock_wait.contended(ns),
        }
    }

    fn machine_waited(&self, waited_ns: Time) {
        self.0.lock_wait.machine_waited(waited_ns);
    }

    fn relax(&self) {
        platform::sync::cpu_relax();
    }
}

/// The hypervisor's [`Platform`]: the architecture's kicks, clock and
/// switches; the deadlines are kept here and the arch timer re-armed.
impl<A: Arch> Platform for Runtime<A> {
    fn now_ns(&self) -> Time {
        self.arch.now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        self.trace_kick(cpus);
        self.arch.kick(cpus);
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        // Recorded before the new context is loaded, and after the old one
        // stopped (the CPU is in the hypervisor): the trace's run intervals
        // cover all the time a guest could run.
        self.trace_switch(cpu, context);
        self.arch.switch_to(cpu, context);
    }

    fn relax(&self) {
        platform::sync::cpu_relax();
    }

    fn rendezvous_arrived(&self, cpu: usize, ticket: &Ticket) -> Option<Time> {
        if !self.tracing(trace::Kind::RendezvousArrive) {
            return None;
        }
        let now = self.arch.now_ns();
        self.trace(
            cpu,
            trace::Kind::RendezvousArrive,
            ticket.resource.0 as u32,
            0,
            u64::from(ticket.generation),
        );
        Some(now)
    }

    fn rendezvous_ended(
        &self,
        cpu: usize,
        ticket: &Ticket,
        outcome: &Outcome,
        arrived: Option<Time>,
    ) {
        // Only a wait whose arrival was recorded has an end worth recording.
        let Some(arrived) = arrived else {
            return;
        };
        let waited_ns = self.arch.now_ns().saturating_sub(arrived);
        let outcome = match outcome {
            Outcome::Complete => trace::Outcome::Complete,
            Outcome::TimedOut { .. } => trace::Outcome::TimedOut,
            Outcome::Aborted => trace::Outcome::Aborted,
            Outcome::Superseded => trace::Outcome::Superseded,
        };
        self.trace(
            cpu,
            trace::Kind::RendezvousDone,
            ticket.resource.0 as u32,
            outcome as u32,
            waited_ns,
        );
    }

    fn set_timer(&self, cpu: usize, deadline_ns: Option<Time>) {
        if let Some(slot) = self.deadlines.get(cpu) {
            slot.store(deadline_ns.unwrap_or(NO_DEADLINE), Ordering::Release);
        }
        if cpu == self.arch.cpu_index() {
            self.rearm_timer();
        }
        // Another CPU's timer: it re-reads its deadline at its next interrupt;
        // `System` only arms timers for the calling CPU or kicks the target.
    }
}

impl<A: Arch> Runtime<A> {
    /// The glue over `arch`, before the scheduler is built.
    pub const fn new(arch: A) -> Self {
        Self {
            arch,
            system: Once::new(),
            table: Once::new(),
            blocked_hints: Once::new(),
            deadlines: [const { AtomicU64::new(NO_DEADLINE) }; MAX_CPUS],
            last_runtime_logged: AtomicU64::new(u64::MAX),
            names: Mutex::new(PoolNames::new()),
            break_cosched: [const { AtomicBool::new(false) }; MAX_CPUS],
            wakeups: wakeup::WakeupLists::new(),
            checker: Once::new(),
            trace: Once::new(),
            trace_at_boot: AtomicU32::new(0),
            trace_dump_after_ns: AtomicU64::new(0),
            trace_dump_at: AtomicU64::new(0),
            trace_capacity: AtomicUsize::new(0),
            lock_wait: lockwait::LockWait::new(),
            last_lock_wait_logged: AtomicU64::new(u64::MAX),
        }
    }

    /// The scheduler lock's wait figures so far.
    pub fn lock_wait(&self) -> lockwait::LockWaitFigures {
        self.lock_wait.figures()
    }

    /// Logs `sched: lock wait: ...` (boot CPU, periodically) if any event
    /// happened since the last line.
    pub fn log_lock_wait(&self) {
        let figures = self.lock_wait.figures();
        if self
            .last_lock_wait_logged
            .swap(figures.events, Ordering::Relaxed)
            == figures.events
        {
            return;
        }
        log::info!("sched: lock wait: {figures}");
    }

    /// Plants the fault of `hv.test-break-cosched=CPU,...`: each of `cpus`
    /// stops waiting for its siblings at every rendezvous, so whichever of
    /// them decides a switch loads the new domain while its siblings still
    /// run the old one. Said loudly: a machine booted with it breaks the
    /// core-scheduling promise on purpose.
    pub fn break_cosched(&self, cpus: &[usize]) {
        for &cpu in cpus {
            let Some(flag) = self.break_cosched.get(cpu) else {
                error!(
                    "TEST: hv.test-break-cosched names cpu {cpu}, beyond the {MAX_CPUS} supported"
                );
                continue;
            };
            error!(
                "TEST: cpu {cpu} skips the core-scheduling rendezvous and ignores what its siblings hold \
                 (hv.test-break-cosched): they may run another domain at the same moment; \
                 the co-residency checker must report OVERLAPs"
            );
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// What the command line asks of the runtime: the planted
    /// core-scheduling fault and the trace from boot (before
    /// [`Runtime::boot`]; the arch applies its own options).
    pub fn apply_boot_options(&self, options: &crate::boot_options::BootOptions) {
        if !options.break_cosched.as_slice().is_empty() {
            self.break_cosched(options.break_cosched.as_slice());
        }
        if options.trace.0 != 0 {
            self.trace_from_boot(options.trace);
        }
        if let Some(seconds) = options.trace_dump_seconds {
            self.trace_dump_after(seconds);
        }
        if let Some(events) = options.trace_events {
            self.trace_ring_size(events);
        }
    }

    /// The architecture.
    pub fn arch(&self) -> &A {
        &self.arch
    }

    /// Runs `f` on the whole system, if it has been built (interrupts
    /// masked): every pool's part stops meanwhile, so this is for what
    /// spans pools (pool and domain operations, moves, machine-wide
    /// views), never for a CPU's or a vCPU's own events.
    pub fn with_system<R>(&self, f: impl FnOnce(&mut System, &Self) -> R) -> Option<R> {
        let system = self.system.get()?;
        Some(
            self.arch
                .without_irqs(|| system.with_whole(&Waits(self), |s| f(s, self))),
        )
    }

    /// Runs `f` on the part of the system that holds `vcpu` (its pool's),
    /// if it has been built (interrupts masked): a vCPU's own events.
    pub fn with_vcpu<R>(&self, vcpu: VcpuId, f: impl FnOnce(&mut System, &Self) -> R) -> Option<R> {
        let system = self.system.get()?;
        Some(
            self.arch
                .without_irqs(|| system.with_vcpu(vcpu, &Waits(self), |s| f(s, self))),
        )
    }

    /// Runs `f` on the part of the system that holds `domain`, if it has
    /// been built (interrupts masked): questions about one domain.
    pub fn with_domain<R>(
        &self,
        domain: DomainId,
        f: impl FnOnce(&mut System, &Self) -> R,
    ) -> Option<R> {
        let system = self.system.get()?;
        Some(
            self.arch
                .without_irqs(|| system.with_domain(domain, &Waits(self), |s| f(s, self))),
        )
    }

    /// Runs `f` on every part of the system in turn, each under its own
    /// lock (interrupts masked): the periodic machine-wide views, which
    /// need not stop every pool at once.
    pub fn for_each_part(&self, mut f: impl FnMut(&mut System, &Self)) {
        if let Some(system) = self.system.get() {
            self.arch
                .without_irqs(|| system.for_each_part(&Waits(self), |s| f(s, self)));
        }
    }

    /// Runs `f` on the part of the system that holds CPU `cpu`, if it has
    /// been built (interrupts masked).
    pub fn with_cpu<R>(&self, cpu: usize, f: impl FnOnce(&mut System, &Self) -> R) -> Option<R> {
        let system = self.system.get()?;
        Some(
            self.arch
                .without_irqs(|| system.with_cpu(cpu, &Waits(self), |s| f(s, self))),
        )
    }

    /// Runs `f` with the scheduler and the pool names (interrupts masked,
    /// scheduler lock then names lock).
    fn with_pools<R>(&self, f: impl FnOnce(&mut System, &mut PoolNames, &Self) -> R) -> Option<R> {
        self.with_system(|system, platform| f(system, &mut self.names.lock(), platform))
    }

    /// The CPU's scheduling deadline, if any.
    pub fn deadline(&self, cpu: usize) -> Option<Time> {
        match self.deadlines.get(cpu)?.load(Ordering::Acquire) {
            NO_DEADLINE => None,
            d => Some(d),
        }
    }

    /// What the calling CPU's timer must fire for: the earlier of its
    /// scheduling deadline and its vCPUs' timed wake-ups.
    pub fn timer_deadline(&self, cpu: usize) -> Option<Time> {
        [self.deadline(cpu), self.next_wakeup(cpu)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Re-arms the calling CPU's timer for [`Runtime::timer_deadline`]:
    /// after a deadline or a wake-up changed, or after the arch's own
    /// timer work.
    pub fn rearm_timer(&self) {
        let me = self.arch.cpu_index();
        self.arch.rearm_timer(self.timer_deadline(me));
    }
}
