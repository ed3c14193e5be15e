//! The scheduler glue the ARM and x86 hypervisors share: the one global
//! [`System`] behind a lock, the rendezvous table, each CPU's scheduling
//! deadline, the per-CPU scheduling entry point ([`Glue::on_event`]), the
//! pools' names, the privileged `POOL_OP` hypercall (a move waits, bounded,
//! for the domain's vCPUs to leave their old CPUs), the hypervisor console's
//! command runner, and the `TEST_PAUSE_SIBLING` hook.
//!
//! What differs per architecture (the scheduling IPI, the timer, interrupt
//! masking, the CPU index, the console, what it knows about domains) is the
//! small [`Arch`] trait, implemented by the binary's arch modules; each keeps
//! one `static` [`Glue`] over its implementation.
//!
//! Every console command answers with lines on the console; a refused one
//! prints a single `error: ...` line and changes nothing. Every pool
//! operation, from either side, is also logged (`pools: ...`) so a test can
//! follow it.
//!
//! A move rebuilds the domain's units in the new pool and kicks the CPUs
//! still running its vCPUs; those switch them out through the normal
//! (synchronised, for core/cluster pools) scheduling path, and the new pool's
//! CPUs only load a vCPU once its old CPU has released it. The caller then
//! waits, bounded, for the old CPUs to let go and reports how long it took.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use guest_abi::HvError;
use log::{error, info, warn};
use sched::driver::{self, CpuEvent, DriveReport, SystemLock};
use sched::rendezvous::RendezvousTable;
use sched::{
    CpuContext, CpuSet, DomainId, MAX_CPUS, Platform, PoolId, System, SystemError, Time, Topology,
    VcpuId,
};
use spin::{Mutex, Once};

use crate::config::{Applied, Config};
use crate::console_cmd::{self, Command, PoolRef};
use crate::pools::{self, PoolNames, PoolOpError};

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

/// What the shared glue needs from one architecture. Implementations are
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
    /// Reprograms the calling CPU's timer: its scheduling deadline
    /// ([`Glue::deadline`]) changed.
    fn rearm_timer(&self);
    /// Writes one console line (`args`, then a line feed) without the log
    /// prefix: the command line's answers.
    fn console_line(&self, args: fmt::Arguments<'_>);
    /// Every domain built (stopped ones included), in creation order.
    fn domain_ids(&self) -> Vec<DomainId>;
    /// Domain `id`'s name and whether it is stopped.
    fn domain_summary(&self, id: DomainId) -> Option<(String, bool)>;
    /// How long `vcpu` has run so far, in ns.
    fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64;
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
pub struct Glue<A: Arch> {
    arch: A,
    system: Mutex<Option<System>>,
    table: Once<Arc<RendezvousTable>>,
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
}

/// [`SystemLock`] for the driver: the system, which is published before the
/// rendezvous table the driver needs.
struct Locked<'a, A: Arch>(&'a Glue<A>);

impl<A: Arch> SystemLock for Locked<'_, A> {
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        self.0.arch.without_irqs(|| {
            let mut guard = self.0.system.lock();
            // `on_event` only runs once `table` is published, which happens
            // after the system is stored, and the system is never taken out.
            let system = guard
                .as_mut()
                .expect("sched: TABLE is published after SYSTEM");
            f(system)
        })
    }
}

/// The hypervisor's [`Platform`]: the architecture's kicks, clock and
/// switches; the deadlines are kept here and the arch timer re-armed.
impl<A: Arch> Platform for Glue<A> {
    fn now_ns(&self) -> Time {
        self.arch.now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        self.arch.kick(cpus);
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        self.arch.switch_to(cpu, context);
    }

    fn set_timer(&self, cpu: usize, deadline_ns: Option<Time>) {
        if let Some(slot) = self.deadlines.get(cpu) {
            slot.store(deadline_ns.unwrap_or(NO_DEADLINE), Ordering::Release);
        }
        if cpu == self.arch.cpu_index() {
            self.arch.rearm_timer();
        }
        // Another CPU's timer: it re-reads its deadline at its next interrupt;
        // `System` only arms timers for the calling CPU or kicks the target.
    }
}

impl<A: Arch> Glue<A> {
    /// The glue over `arch`, before the scheduler is built.
    pub const fn new(arch: A) -> Self {
        Self {
            arch,
            system: Mutex::new(None),
            table: Once::new(),
            deadlines: [const { AtomicU64::new(NO_DEADLINE) }; MAX_CPUS],
            last_runtime_logged: AtomicU64::new(u64::MAX),
            names: Mutex::new(PoolNames::new()),
            break_cosched: [const { AtomicBool::new(false) }; MAX_CPUS],
        }
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

    /// The architecture.
    pub fn arch(&self) -> &A {
        &self.arch
    }

    /// Runs `f` on the system, if it has been built (interrupts masked).
    pub fn with_system<R>(&self, f: impl FnOnce(&mut System, &Self) -> R) -> Option<R> {
        self.arch
            .without_irqs(|| self.system.lock().as_mut().map(|s| f(s, self)))
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

    /// Builds the scheduler once every CPU is up (Xen patch 52/60): the
    /// config's pools and domains (their vCPUs blocked), or, without a
    /// config, pool 0 with every online CPU; names the pools (pool 0 is
    /// `Pool-0`, as in Xen, without a config) and publishes it all.
    pub fn boot(&self, topology: &Topology, config: Option<&Config>) -> Applied {
        let (mut system, applied) = crate::sched_boot::build_system(topology, config, self);
        let broken: CpuSet = (0..MAX_CPUS)
            .filter(|&c| self.break_cosched[c].load(Ordering::Relaxed))
            .collect();
        if !broken.is_empty() {
            system.plant_cosched_fault(broken);
        }
        self.arch.on_boot(&system);
        self.arch.without_irqs(|| {
            let mut names = self.names.lock();
            match config {
                Some(config) => {
                    for (spec, id) in config.pools.iter().zip(&applied.pools) {
                        if let Some(id) = id {
                            names.insert(*id, &spec.name);
                        }
                    }
                }
                None => names.insert(PoolId(0), "Pool-0"),
            }
        });
        let table = system.rendezvous_table();
        self.arch
            .without_irqs(|| *self.system.lock() = Some(system));
        // Published last: event handlers only reach the system once this is set.
        self.table.call_once(|| table);
        applied
    }

    /// A scheduling kick or timer on this CPU: run the scheduler to the end.
    pub fn on_event(&self, event: CpuEvent) {
        let Some(table) = self.table.get() else {
            return;
        };
        let me = self.arch.cpu_index();
        if event == CpuEvent::Timer
            && let Some(slot) = self.deadlines.get(me)
        {
            slot.store(NO_DEADLINE, Ordering::Release);
        }
        let started = self.arch.event_started();
        let report = driver::drive(&Locked(self), table, self, me, event);
        self.arch.event_done(me, started, &report);
        if report.timeouts > 0 {
            // The latest timeout's record names the CPUs that never arrived.
            let latest = self
                .with_system(|s, _| {
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

    /// The starvation watchdog: logs a warning for every runnable unit that
    /// has waited [`STARVATION_NS`] or more for its turn (see
    /// [`System::starving_units`]), with the state of its pool's resources.
    /// At most [`STARVATION_LINES`] lines a call; called with the runtime
    /// line. A scheduler that loses a wake-up or a deadline shows here.
    pub fn log_starving(&self) {
        let now = self.arch.now_ns();
        let found = self.with_system(|s, _| {
            s.starving_units(now, STARVATION_NS)
                .into_iter()
                .take(STARVATION_LINES)
                .map(|(unit, domain, waited)| {
                    let pool = s.domain_pool(domain);
                    let state = pool.map(|p| s.describe_pool(p, now)).unwrap_or_default();
                    (unit, domain, waited, state)
                })
                .collect::<Vec<_>>()
        });
        for (unit, domain, waited, state) in found.unwrap_or_default() {
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
    /// scenario); the values are collected under the scheduler lock and
    /// formatted after it.
    pub fn log_runtimes(&self) {
        let mut runtimes = [(0u32, 0u64); RUNTIME_LINE_DOMAINS];
        let count = self
            .with_system(|s, _| {
                let mut count = 0;
                for domain in s.domains().take(RUNTIME_LINE_DOMAINS) {
                    let runtime = s
                        .domain_units(domain)
                        .unwrap_or(&[])
                        .iter()
                        .filter_map(|&u| s.unit_stats(u))
                        .map(|stats| stats.runtime_ns)
                        .sum();
                    runtimes[count] = (domain.0, runtime);
                    count += 1;
                }
                count
            })
            .unwrap_or(0);
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
                .with_system(|s, _| s.vcpu_running_on(vcpu))
                .flatten()
                .is_some();
            if !held {
                return true;
            }
            if self.arch.now_ns() >= deadline {
                return false;
            }
            core::hint::spin_loop();
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
        let same_unit = self.with_system(
            |s, _| matches!((s.vcpu_info(me), s.vcpu_info(target)), (Some(a), Some(b)) if a.unit == b.unit),
        );
        if same_unit != Some(true) {
            return Err(HvError::Denied);
        }
        if !pause {
            return match self.with_system(|s, p| s.vcpu_test_unpause(target, p)) {
                Some(Ok(())) => Ok(()),
                Some(Err(SystemError::NotTestPaused(_))) => Err(HvError::InvalidParameter),
                _ => Err(HvError::Busy),
            };
        }
        if !matches!(
            self.with_system(|s, p| s.vcpu_test_pause(target, p)),
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
        let _ = self.with_system(|s, p| s.vcpu_test_unpause(target, p));
        Err(HvError::Busy)
    }

    /// `POOL_OP` from domain `caller` (the dispatcher has checked it is
    /// privileged), through [`crate::pools`]; every change and refusal is
    /// logged. A move waits for the domain's vCPUs like the console's.
    pub fn pool_hypercall(
        &self,
        caller: DomainId,
        op: guest_abi::PoolOp,
    ) -> Result<guest_abi::Regs, HvError> {
        let result = self
            .with_pools(|s, n, p| pools::hypercall(s, n, op, p))
            .unwrap_or(Err(PoolOpError::UnknownPool(String::from(
                "(no scheduler)",
            ))));
        match (&result, op) {
            (Err(e), _) => info!("pools: dom{} POOL_OP {op:?} refused: {e}", caller.0),
            // Listing is read-only and frequent: not logged.
            (Ok(_), guest_abi::PoolOp::List { .. }) => {}
            (Ok(_), guest_abi::PoolOp::MoveDomain { domain, .. }) => {
                let released = self.wait_for_release(DomainId(domain));
                info!("pools: dom{} POOL_OP {op:?} done; {released}", caller.0);
            }
            (Ok(regs), _) => info!(
                "pools: dom{} POOL_OP {op:?} done (x1 = {})",
                caller.0, regs[1]
            ),
        }
        result.map_err(|e| e.code())
    }

    /// After a move: waits (bounded) until no vCPU of `domain` is still held
    /// by a CPU outside its new pool, and says how that went. The calling
    /// CPU is left out: it cannot switch anything out while it runs this
    /// handler, and its own kick is taken when the handler returns.
    fn wait_for_release(&self, domain: DomainId) -> String {
        let me = self.arch.cpu_index();
        let start = self.arch.now_ns();
        let deadline = start + MOVE_RELEASE_TIMEOUT_NS;
        let mut next_kick = start + MOVE_REKICK_NS;
        loop {
            let held: Option<Vec<(VcpuId, usize)>> = self.with_system(|s, _| {
                let pool_cpus = s
                    .domain_pool(domain)
                    .and_then(|p| s.pool_info(p))
                    .map(|p| p.cpus)
                    .unwrap_or_default();
                s.domain_vcpus(domain)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|&v| s.vcpu_running_on(v).map(|c| (v, c)))
                    .filter(|&(_, c)| c != me && !pool_cpus.contains(c))
                    .collect()
            });
            let held = held.unwrap_or_default();
            if held.is_empty() {
                return alloc::format!(
                    "its vCPUs left their old CPUs within {} us",
                    (self.arch.now_ns() - start) / 1000
                );
            }
            let now = self.arch.now_ns();
            if now >= deadline {
                let mut text = alloc::format!(
                    "still held after {} ms:",
                    MOVE_RELEASE_TIMEOUT_NS / 1_000_000
                );
                for (v, c) in held {
                    let _ = write!(text, " vCPU {} on cpu {c}", v.0);
                }
                warn!("pools: dom{}: {text}", domain.0);
                return text;
            }
            if now >= next_kick {
                // The move kicked these CPUs; one that still holds a vCPU long
                // after is kicked again (a kick only makes it run its
                // scheduler) and the repeat is logged: it means a kick went
                // unanswered.
                next_kick = now + MOVE_REKICK_NS;
                let cpus: CpuSet = held.iter().map(|&(_, c)| c).collect();
                warn!(
                    "pools: dom{}: CPUs {cpus} still hold its vCPUs after {} us; kicking them again",
                    domain.0,
                    (now - start) / 1000
                );
                self.arch.kick(&cpus);
            }
            core::hint::spin_loop();
        }
    }

    /// Runs one line typed at the hypervisor console (`hv> `).
    pub fn run_command(&self, line: &str) {
        let command = match console_cmd::parse(line) {
            Ok(Some(command)) => command,
            Ok(None) => return,
            Err(e) => return self.say(format_args!("error: {e}")),
        };
        let result = match command {
            Command::Help => {
                for help in console_cmd::HELP {
                    self.say(format_args!("{help}"));
                }
                Ok(())
            }
            Command::Pools => {
                self.list_pools();
                Ok(())
            }
            Command::Domains => {
                self.list_domains();
                Ok(())
            }
            Command::PoolCreate {
                name,
                scheduler,
                granularity,
            } => self.create(&name, &scheduler, &granularity),
            Command::PoolDestroy { pool } => self.destroy(&pool),
            Command::PoolAddCpu { pool, cpu } => self.add_cpu(&pool, cpu),
            Command::PoolRemoveCpu { pool, cpu } => self.remove_cpu(&pool, cpu),
            Command::Move { domain, pool } => self.move_domain(domain, &pool),
        };
        if let Err(e) = result {
            self.say(format_args!("error: {e}"));
            info!("pools: console: '{line}' refused: {e}");
        }
    }

    /// One answer line, without the log prefix (the console is interactive).
    fn say(&self, args: fmt::Arguments<'_>) {
        self.arch.console_line(args);
    }

    fn create(&self, name: &str, scheduler: &str, granularity: &str) -> Result<(), PoolOpError> {
        let id = self
            .with_pools(|s, n, _| pools::create(s, n, Some(name), scheduler, granularity))
            .ok_or_else(not_booted)??;
        self.say(format_args!(
            "created pool {} ({name}): {scheduler}, {granularity} granularity, no CPUs",
            id.0
        ));
        info!("pools: console: created pool {} ({name})", id.0);
        Ok(())
    }

    fn destroy(&self, pool: &PoolRef) -> Result<(), PoolOpError> {
        let (label, cpus) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                let label = label(n, id);
                pools::destroy(s, n, id, p).map(|cpus| (label, cpus))
            })
            .ok_or_else(not_booted)??;
        self.say(format_args!("destroyed {label}; CPUs {cpus} are free"));
        info!("pools: console: destroyed {label}");
        Ok(())
    }

    fn add_cpu(&self, pool: &PoolRef, cpu: usize) -> Result<(), PoolOpError> {
        let (label, cpus) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                pools::add_cpu(s, id, cpu, p).map(|cpus| (label(n, id), cpus))
            })
            .ok_or_else(not_booted)??;
        self.say(format_args!("added CPUs {cpus} to {label}"));
        info!("pools: console: added CPUs {cpus} to {label}");
        Ok(())
    }

    fn remove_cpu(&self, pool: &PoolRef, cpu: usize) -> Result<(), PoolOpError> {
        let (label, cpus) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                pools::remove_cpu(s, id, cpu, p).map(|cpus| (label(n, id), cpus))
            })
            .ok_or_else(not_booted)??;
        self.say(format_args!(
            "removed CPUs {cpus} from {label}; they are free"
        ));
        info!("pools: console: removed CPUs {cpus} from {label}");
        Ok(())
    }

    fn move_domain(&self, domain: u32, pool: &PoolRef) -> Result<(), PoolOpError> {
        let (from, to) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                pools::move_domain(s, domain, id, p).map(|from| (label(n, from), label(n, id)))
            })
            .ok_or_else(not_booted)??;
        let released = self.wait_for_release(DomainId(domain));
        self.say(format_args!(
            "moved dom{domain} from {from} to {to}; {released}"
        ));
        info!("pools: console: moved dom{domain} from {from} to {to}; {released}");
        Ok(())
    }

    /// `pools`: one line per pool.
    fn list_pools(&self) {
        let lines = self
            .with_pools(|s, n, _| {
                let mut lines = Vec::new();
                let ids: Vec<PoolId> = s.pools().collect();
                for id in ids {
                    let Some(info) = s.pool_info(id) else {
                        continue;
                    };
                    let mut line = alloc::format!(
                        "{}: {}, {} granularity, CPUs {}, domains:",
                        label(n, id),
                        info.scheduler,
                        info.granularity,
                        info.cpus
                    );
                    let mut any = false;
                    for d in s.domains().filter(|&d| s.domain_pool(d) == Some(id)) {
                        let _ = write!(line, " dom{}", d.0);
                        any = true;
                    }
                    if !any {
                        line.push_str(" none");
                    }
                    lines.push(line);
                }
                let free = s.free_cpus();
                lines.push(alloc::format!(
                    "free CPUs (idle scheduler): {}",
                    if free.is_empty() {
                        String::from("none")
                    } else {
                        alloc::format!("{free}")
                    }
                ));
                lines
            })
            .unwrap_or_default();
        for line in lines {
            self.say(format_args!("{line}"));
        }
    }

    /// `domains`: one line per domain, then one per vCPU.
    fn list_domains(&self) {
        for id in self.arch.domain_ids() {
            let Some((name, stopped)) = self.arch.domain_summary(id) else {
                continue;
            };
            // vCPU ids, states and the pool, read in one go.
            let view = self.with_pools(|s, n, _| {
                let pool = s.domain_pool(id).map(|p| label(n, p));
                let vcpus: Vec<(VcpuId, &'static str, Option<usize>)> = s
                    .domain_vcpus(id)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|&v| {
                        let info = s.vcpu_info(v)?;
                        let state = if info.running_on.is_some() {
                            "running"
                        } else if info.pause_count > 0 {
                            "paused"
                        } else if info.blocked {
                            "blocked"
                        } else {
                            "runnable"
                        };
                        Some((v, state, info.running_on))
                    })
                    .collect();
                (pool, vcpus)
            });
            let (pool, vcpus) = view.unwrap_or_default();
            let state = if stopped {
                "stopped"
            } else if vcpus.iter().any(|v| v.1 == "running") {
                "running"
            } else {
                "idle"
            };
            self.say(format_args!(
                "dom{} ({name}): {state}, {}",
                id.0,
                pool.as_deref().unwrap_or("no pool")
            ));
            for (index, (v, state, on)) in vcpus.iter().enumerate() {
                let runtime_us = self.arch.vcpu_runtime_ns(*v) / 1000;
                match on {
                    Some(cpu) => self.say(format_args!(
                        "  vcpu {index}: {state} on cpu {cpu}, ran {runtime_us} us"
                    )),
                    None => self.say(format_args!("  vcpu {index}: {state}, ran {runtime_us} us")),
                }
            }
        }
    }
}

fn resolve(system: &System, names: &PoolNames, pool: &PoolRef) -> Result<PoolId, PoolOpError> {
    match pool {
        PoolRef::Id(id) => pools::existing(system, PoolId(*id)),
        PoolRef::Name(name) => pools::by_name(names, system, name),
    }
}

fn not_booted() -> PoolOpError {
    PoolOpError::UnknownPool(String::from("(the scheduler is not running yet)"))
}

fn label(names: &PoolNames, id: PoolId) -> String {
    match names.name(id) {
        Some(name) => alloc::format!("pool {} ({name})", id.0),
        None => alloc::format!("pool {}", id.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DomainConfig, PoolConfig};
    use std::cell::Cell;
    use std::sync::Mutex as StdMutex;
    use std::time::{Duration, Instant};

    std::thread_local! {
        /// The CPU the calling test thread plays.
        static CPU: Cell<usize> = const { Cell::new(0) };
    }

    fn play_cpu(cpu: usize) {
        CPU.with(|c| c.set(cpu));
    }

    /// An architecture made of records: the real clock (plus `step_ns` at
    /// every read once a test sets it, so the bounded waits end quickly),
    /// the kicks sent, the timer re-arms, the console lines.
    #[derive(Default)]
    struct FakeArch {
        start: std::sync::OnceLock<Instant>,
        step_ns: AtomicU64,
        skew_ns: AtomicU64,
        kicks: StdMutex<Vec<CpuSet>>,
        rearms: StdMutex<Vec<usize>>,
        lines: StdMutex<Vec<String>>,
        domains: StdMutex<Vec<(DomainId, String, bool)>>,
    }

    impl Arch for FakeArch {
        fn now_ns(&self) -> Time {
            let step = self.step_ns.load(Ordering::Relaxed);
            let skew = self.skew_ns.fetch_add(step, Ordering::Relaxed) + step;
            let start = self.start.get_or_init(Instant::now);
            start.elapsed().as_nanos() as u64 + skew
        }

        fn kick(&self, cpus: &CpuSet) {
            self.kicks.lock().unwrap().push(*cpus);
        }

        fn switch_to(&self, _cpu: usize, _context: CpuContext) {}

        fn cpu_index(&self) -> usize {
            CPU.with(Cell::get)
        }

        fn without_irqs<R>(&self, f: impl FnOnce() -> R) -> R {
            f()
        }

        fn rearm_timer(&self) {
            self.rearms.lock().unwrap().push(self.cpu_index());
        }

        fn console_line(&self, args: fmt::Arguments<'_>) {
            self.lines.lock().unwrap().push(args.to_string());
        }

        fn domain_ids(&self) -> Vec<DomainId> {
            self.domains.lock().unwrap().iter().map(|d| d.0).collect()
        }

        fn domain_summary(&self, id: DomainId) -> Option<(String, bool)> {
            let domains = self.domains.lock().unwrap();
            let d = domains.iter().find(|d| d.0 == id)?;
            Some((d.1.clone(), d.2))
        }

        fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64 {
            // Distinct per vCPU, so the listing shows whose it printed.
            7_000 + u64::from(vcpu.0) * 1_000
        }
    }

    impl FakeArch {
        fn take_lines(&self) -> Vec<String> {
            core::mem::take(&mut *self.lines.lock().unwrap())
        }

        fn fast_clock(&self, fast: bool) {
            let step = if fast { 1_000_000 } else { 0 };
            self.step_ns.store(step, Ordering::Relaxed);
        }
    }

    /// `--smp 8,clusters=2,cores=2,threads=2`: pool `general` (credit2, cpu
    /// granularity) on CPUs 0-3 with the one-vCPU `solo`, pool `smt`
    /// (credit2, core granularity) on 4-7 with the two-vCPU `pair`, as the
    /// QEMU pool scenarios run. Returns the glue and `pair` and `solo`.
    fn machine() -> (Glue<FakeArch>, DomainId, DomainId) {
        let glue = Glue::new(FakeArch::default());
        let mut smt = PoolConfig::new("smt", (4..8).collect());
        smt.granularity = String::from("core");
        let mut pair = DomainConfig::new("pair", "smt");
        pair.vcpus = 2;
        let config = Config {
            pools: alloc::vec![PoolConfig::new("general", (0..4).collect()), smt],
            domains: alloc::vec![pair, DomainConfig::new("solo", "general")],
        };
        let applied = glue.boot(&Topology::uniform(1, 2, 2, 2), Some(&config));
        let (Some(pair), Some(solo)) = (applied.domains[0], applied.domains[1]) else {
            panic!(
                "the config's domains were not built: {:?}",
                applied.warnings
            );
        };
        *glue.arch().domains.lock().unwrap() = alloc::vec![
            (pair, String::from("pair"), false),
            (solo, String::from("solo"), false)
        ];
        glue.with_system(|s, p| {
            for domain in [pair, solo] {
                for &v in s.domain_vcpus(domain).unwrap().to_vec().iter() {
                    s.vcpu_wake(v, p).unwrap();
                }
            }
        });
        (glue, pair, solo)
    }

    fn vcpus(glue: &Glue<FakeArch>, domain: DomainId) -> Vec<VcpuId> {
        glue.with_system(|s, _| s.domain_vcpus(domain).unwrap().to_vec())
            .unwrap()
    }

    fn running_on(glue: &Glue<FakeArch>, vcpu: VcpuId) -> Option<usize> {
        glue.with_system(|s, _| s.vcpu_running_on(vcpu)).flatten()
    }

    /// Each CPU of `cpus` on its own thread runs scheduling events (as its
    /// kick handler would) until `done` holds, for at most two seconds.
    fn run_cpus_until(
        glue: &Glue<FakeArch>,
        cpus: &[usize],
        done: impl Fn(&Glue<FakeArch>) -> bool + Sync,
    ) {
        let until = Instant::now() + Duration::from_secs(2);
        std::thread::scope(|scope| {
            for &cpu in cpus {
                let done = &done;
                scope.spawn(move || {
                    play_cpu(cpu);
                    while !done(glue) && Instant::now() < until {
                        glue.on_event(CpuEvent::Kick);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
            }
        });
        assert!(done(glue), "the CPUs {cpus:?} did not get there in 2 s");
    }

    /// The machine with both of `pair`'s vCPUs and `solo`'s running.
    fn running_machine() -> (Glue<FakeArch>, DomainId, DomainId) {
        let (glue, pair, solo) = machine();
        let all: Vec<VcpuId> = [pair, solo].iter().flat_map(|&d| vcpus(&glue, d)).collect();
        run_cpus_until(&glue, &(0..8).collect::<Vec<_>>(), |g| {
            all.iter().all(|&v| running_on(g, v).is_some())
        });
        (glue, pair, solo)
    }

    #[test]
    fn deadlines_are_kept_per_cpu_and_only_the_callers_timer_is_rearmed() {
        let glue = Glue::new(FakeArch::default());
        play_cpu(2);
        glue.set_timer(2, Some(55));
        glue.set_timer(3, Some(66));
        assert_eq!((glue.deadline(2), glue.deadline(3)), (Some(55), Some(66)));
        assert_eq!(*glue.arch().rearms.lock().unwrap(), [2]);
        glue.set_timer(2, None);
        assert_eq!(glue.deadline(2), None);
        // Out of range: ignored, no panic.
        glue.set_timer(MAX_CPUS, Some(1));
        assert_eq!(glue.deadline(MAX_CPUS), None);
        // Before boot an event does nothing (no table yet).
        glue.on_event(CpuEvent::Timer);
        assert_eq!(glue.with_system(|_, _| ()), None);
    }

    #[test]
    fn boot_names_the_pools_and_the_console_lists_them() {
        let (glue, pair, solo) = running_machine();
        let arch = glue.arch();
        arch.take_lines();
        glue.run_command("pools");
        assert_eq!(
            arch.take_lines(),
            [
                format!(
                    "pool 0 (general): credit2, cpu granularity, CPUs {{0-3}}, domains: dom{}",
                    solo.0
                ),
                format!(
                    "pool 1 (smt): credit2, core granularity, CPUs {{4-7}}, domains: dom{}",
                    pair.0
                ),
                String::from("free CPUs (idle scheduler): none"),
            ]
        );
        glue.run_command("domains");
        let lines = arch.take_lines();
        let [v0, v1] = vcpus(&glue, pair)[..] else {
            panic!("pair has two vCPUs")
        };
        let (on0, on1) = (
            running_on(&glue, v0).unwrap(),
            running_on(&glue, v1).unwrap(),
        );
        assert_eq!(on0 / 2, on1 / 2, "a core-scheduled unit runs on one core");
        assert_eq!(
            lines[0],
            format!("dom{} (pair): running, pool 1 (smt)", pair.0)
        );
        assert_eq!(
            lines[1],
            format!("  vcpu 0: running on cpu {on0}, ran {} us", 7 + v0.0)
        );
        assert_eq!(
            lines[2],
            format!("  vcpu 1: running on cpu {on1}, ran {} us", 7 + v1.0)
        );
        assert_eq!(
            lines[3],
            format!("dom{} (solo): running, pool 0 (general)", solo.0)
        );
        assert_eq!(lines.len(), 5);
        glue.run_command("help");
        assert_eq!(arch.take_lines(), console_cmd::HELP);
        glue.run_command("pool-destroy nosuch");
        assert_eq!(arch.take_lines(), ["error: no pool 'nosuch'"]);
        glue.run_command("");
        assert!(arch.take_lines().is_empty());
        glue.run_command("frobnicate");
        let error = arch.take_lines();
        assert!(
            error.len() == 1 && error[0].starts_with("error: "),
            "{error:?}"
        );
    }

    #[test]
    fn console_commands_before_the_scheduler_runs_are_refused() {
        let glue = Glue::new(FakeArch::default());
        glue.run_command("pool-create spare credit2 cpu");
        assert_eq!(
            glue.arch().take_lines(),
            ["error: no pool (the scheduler is not running yet)"]
        );
        assert_eq!(
            glue.pool_hypercall(DomainId(1), guest_abi::PoolOp::List { from: 0 }),
            Err(HvError::NotFound)
        );
    }

    #[test]
    fn a_move_waits_for_the_old_cpus_and_kicks_them_again_until_it_gives_up() {
        let (glue, pair, _) = running_machine();
        let arch = glue.arch();
        let held: CpuSet = vcpus(&glue, pair)
            .iter()
            .map(|&v| running_on(&glue, v).unwrap())
            .collect();
        // The old CPUs never run their scheduler: the wait gives up after
        // its bound, having kicked them again every 100 ms.
        arch.kicks.lock().unwrap().clear();
        arch.take_lines();
        arch.fast_clock(true);
        glue.run_command(&format!("move {} general", pair.0));
        arch.fast_clock(false);
        let lines = arch.take_lines();
        let expected = format!(
            "moved dom{} from pool 1 (smt) to pool 0 (general); still held after 2000 ms:",
            pair.0
        );
        assert!(
            lines.len() == 1 && lines[0].starts_with(&expected),
            "{lines:?}"
        );
        for v in vcpus(&glue, pair) {
            let on = running_on(&glue, v).unwrap();
            assert!(lines[0].contains(&format!(" vCPU {} on cpu {on}", v.0)));
        }
        let rekicks = arch
            .kicks
            .lock()
            .unwrap()
            .iter()
            .filter(|&&k| k == held)
            .count();
        assert!(
            (10..=20).contains(&rekicks),
            "{rekicks} re-kicks of {held} in 2 s"
        );
        // Once they run their scheduler they let go, and the wait says so.
        run_cpus_until(&glue, &[4, 5, 6, 7], |g| {
            vcpus(g, pair)
                .iter()
                .all(|&v| running_on(g, v).is_none_or(|c| c < 4))
        });
        let text = glue.wait_for_release(pair);
        assert!(
            text.starts_with("its vCPUs left their old CPUs within "),
            "{text}"
        );
        // The hypercall's move: refused to a missing pool; back to smt
        // (nothing to wait for: general's CPUs have not picked them up).
        let to = |pool| guest_abi::PoolOp::MoveDomain {
            domain: pair.0,
            pool,
        };
        assert_eq!(
            glue.pool_hypercall(DomainId(9), to(9)),
            Err(HvError::NotFound)
        );
        glue.with_system(|s, _| {
            for v in s.domain_vcpus(pair).unwrap().to_vec() {
                assert_eq!(s.vcpu_running_on(v), None);
            }
        });
        assert_eq!(glue.pool_hypercall(DomainId(9), to(1)), Ok([0; 4]));
        assert_eq!(
            glue.with_system(|s, _| s.domain_pool(pair)).flatten(),
            Some(PoolId(1))
        );
    }

    #[test]
    fn pausing_a_sibling_checks_its_unit_and_waits_for_it_to_stop() {
        let (glue, pair, solo) = running_machine();
        let unit = vcpus(&glue, pair);
        let other = [unit[0], vcpus(&glue, solo)[0]];
        let pause =
            |vcpus: &[VcpuId], sibling, pause| glue.pause_sibling(pair, vcpus, 0, sibling, pause);
        assert_eq!(pause(&unit, 2, true), Err(HvError::NotFound));
        assert_eq!(pause(&other, 1, true), Err(HvError::Denied));
        let test_paused = |v| glue.with_system(|s, _| s.vcpu_info(v).unwrap().test_paused);
        // Its CPU never switches it out: Busy after the bound, pause undone.
        glue.arch().fast_clock(true);
        assert_eq!(pause(&unit, 1, true), Err(HvError::Busy));
        glue.arch().fast_clock(false);
        assert_eq!(test_paused(unit[1]), Some(false));
        assert!(running_on(&glue, unit[1]).is_some());
        // Its CPU takes the kick: the pause returns once it stopped.
        let cpu = running_on(&glue, unit[1]).unwrap();
        std::thread::scope(|scope| {
            let paused = scope.spawn(|| pause(&unit, 1, true));
            run_cpus_until(&glue, &[cpu], |g| running_on(g, unit[1]).is_none());
            assert_eq!(paused.join().unwrap(), Ok(()));
        });
        assert_eq!(test_paused(unit[1]), Some(true));
        assert_eq!(pause(&unit, 1, true), Err(HvError::Busy));
        assert_eq!(pause(&unit, 1, false), Ok(()));
        assert_eq!(test_paused(unit[1]), Some(false));
        assert_eq!(pause(&unit, 1, false), Err(HvError::InvalidParameter));
    }

    #[test]
    fn a_guest_unpause_never_drops_the_hypervisors_pause() {
        // The race of a STARTUP replacing a vCPU's state: the hypervisor holds
        // the sibling off (INIT, PSCI CPU_OFF) while a guest loops unpause.
        let (glue, pair, _) = running_machine();
        let unit = vcpus(&glue, pair);
        let pause_count = |v| glue.with_system(|s, _| s.vcpu_info(v).unwrap().pause_count);
        glue.with_system(|s, p| s.vcpu_pause(unit[1], p).map(|_| ()))
            .unwrap()
            .unwrap();
        for _ in 0..3 {
            assert_eq!(
                glue.pause_sibling(pair, &unit, 0, 1, false),
                Err(HvError::InvalidParameter)
            );
        }
        assert_eq!(pause_count(unit[1]), Some(1));
        // A test pause and unpause around it leave it held too.
        let cpu = running_on(&glue, unit[1]);
        if let Some(cpu) = cpu {
            run_cpus_until(&glue, &[cpu], |g| running_on(g, unit[1]).is_none());
        }
        assert_eq!(glue.pause_sibling(pair, &unit, 0, 1, true), Ok(()));
        assert_eq!(glue.pause_sibling(pair, &unit, 0, 1, false), Ok(()));
        assert_eq!(pause_count(unit[1]), Some(1));
        assert!(
            glue.with_system(|s, _| s.vcpu_running_on(unit[1]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_state_replaced_after_init_is_never_loaded_while_a_guest_loops_unpause() {
        // x86 INIT + STARTUP (ARM: CPU_OFF + CPU_ON) on a sibling, each STARTUP
        // replacing its state once its CPU let it go, while the other vCPU of
        // the unit loops TEST_UNPAUSE_SIBLING and the pool's CPUs keep
        // scheduling. The replacement window must never see it loaded.
        let (glue, pair, _) = running_machine();
        let unit = vcpus(&glue, pair);
        let target = unit[1];
        let stop = std::sync::atomic::AtomicBool::new(false);
        let violations = AtomicU64::new(0);
        /// Stops the helper threads however the main loop ends (a failed
        /// check must fail the test, not hang it).
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let result = std::thread::scope(|scope| {
            for cpu in 4..8 {
                let (glue, stop) = (&glue, &stop);
                scope.spawn(move || {
                    play_cpu(cpu);
                    while !stop.load(Ordering::Relaxed) {
                        glue.on_event(CpuEvent::Kick);
                        std::thread::yield_now();
                    }
                });
            }
            let (glue_ref, stop_ref, unit_ref) = (&glue, &stop, &unit);
            scope.spawn(move || {
                while !stop_ref.load(Ordering::Relaxed) {
                    let _ = glue_ref.pause_sibling(pair, unit_ref, 0, 1, false);
                    std::thread::yield_now();
                }
            });
            let _stop = StopOnDrop(&stop);
            for round in 0..200 {
                // INIT: the hypervisor's pause holds it off.
                glue.with_system(|s, p| s.vcpu_pause(target, p))
                    .ok_or("no scheduler")?
                    .map_err(|e| format!("round {round}: INIT pause: {e}"))?;
                if !glue.wait_until_released(target, 2_000_000_000) {
                    return Err(format!("round {round}: never released"));
                }
                // STARTUP replaces its state now: nothing may load it.
                for _ in 0..20 {
                    if running_on(&glue, target).is_some() {
                        violations.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::yield_now();
                }
                glue.with_system(|s, p| s.vcpu_unpause(target, p))
                    .ok_or("no scheduler")?
                    .map_err(|e| format!("round {round}: STARTUP unpause: {e}"))?;
            }
            Ok::<(), String>(())
        });
        assert_eq!(result, Ok(()));
        assert_eq!(violations.load(Ordering::Relaxed), 0);
        assert_eq!(
            glue.with_system(|s, _| s.vcpu_info(target).unwrap().pause_count),
            Some(0)
        );
    }

    #[test]
    fn waiting_for_a_release_is_bounded() {
        let (glue, pair, _) = running_machine();
        let v = vcpus(&glue, pair)[0];
        glue.arch().fast_clock(true);
        assert!(!glue.wait_until_released(v, 50_000_000));
        glue.arch().fast_clock(false);
        glue.with_system(|s, p| s.vcpu_pause(v, p).map(|_| ()))
            .unwrap()
            .unwrap();
        let cpu = running_on(&glue, v).unwrap();
        run_cpus_until(&glue, &[cpu], |g| running_on(g, v).is_none());
        assert!(glue.wait_until_released(v, 50_000_000));
    }
}
