//! The ARM side of `sched`: one global [`System`] behind a spinlock, the
//! [`Platform`] implementation (SGI kicks, the EL2 timer as scheduling timer,
//! context switches on the exception frame), and the per-CPU entry points the
//! interrupt handler calls.

use core::sync::atomic::{AtomicU64, Ordering};

use gic::SgiTarget;
use hv::config::{Applied, Config};
use log::{error, info};
use platform::arch::aarch64::{cpu, timer};
use sched::driver::{self, CpuEvent, SystemLock};
use sched::rendezvous::RendezvousTable;
use sched::{CpuContext, CpuSet, MAX_CPUS, Platform, System, Time, Topology};
use spin::{Mutex, Once};

use super::GIC;

/// The SGI that asks a CPU to run its scheduler (Xen's SCHEDULE_SOFTIRQ IPI).
pub const SGI_KICK: u8 = 0;

/// No deadline armed.
const NO_DEADLINE: u64 = u64::MAX;

static SYSTEM: Mutex<Option<System>> = Mutex::new(None);
static TABLE: Once<alloc::sync::Arc<RendezvousTable>> = Once::new();
/// Each CPU's scheduling timer deadline (ns), or [`NO_DEADLINE`].
static SCHED_DEADLINE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(NO_DEADLINE) }; MAX_CPUS];

/// The hypervisor's [`Platform`]: GIC SGIs, the EL2 timer, vCPU switches.
pub struct ArmPlatform;

impl Platform for ArmPlatform {
    fn now_ns(&self) -> Time {
        timer::now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        let Some(gic) = GIC.get() else { return };
        for cpu in cpus.iter() {
            if let Err(e) = gic.send_sgi(SGI_KICK, SgiTarget::Cpu(cpu)) {
                error!("sched: cannot kick cpu {cpu}: {e}");
            }
        }
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        super::vcpu::switch_to(cpu, context);
    }

    fn set_timer(&self, cpu: usize, deadline_ns: Option<Time>) {
        if let Some(slot) = SCHED_DEADLINE.get(cpu) {
            slot.store(deadline_ns.unwrap_or(NO_DEADLINE), Ordering::Release);
        }
        if cpu == cpu::index() {
            super::rearm_timer();
        }
        // Another CPU's timer: it re-reads its deadline at its next interrupt;
        // `System` only arms timers for the calling CPU or kicks the target.
    }
}

struct GlobalLock;

impl SystemLock for GlobalLock {
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        cpu::without_irqs(|| {
            let mut guard = SYSTEM.lock();
            // `on_event` only runs once `TABLE` is published, which happens
            // after the system is stored, and the system is never taken out.
            let system = guard
                .as_mut()
                .expect("sched: TABLE is published after SYSTEM");
            f(system)
        })
    }
}

/// Runs `f` on the system, if it has been built.
pub fn with_system<R>(f: impl FnOnce(&mut System, &ArmPlatform) -> R) -> Option<R> {
    cpu::without_irqs(|| SYSTEM.lock().as_mut().map(|s| f(s, &ArmPlatform)))
}

/// The CPU's scheduling deadline, if any.
pub fn deadline(cpu: usize) -> Option<Time> {
    match SCHED_DEADLINE.get(cpu)?.load(Ordering::Acquire) {
        NO_DEADLINE => None,
        d => Some(d),
    }
}

/// Builds the scheduler once every CPU is up (Xen patch 52/60): the config's
/// pools and domains (their vCPUs blocked), or, without a config, pool 0 with
/// every online CPU.
pub fn boot(topology: &Topology, config: Option<&Config>) -> Applied {
    let (system, applied) = hv::sched_boot::build_system(topology, config, &ArmPlatform);
    for pool in system.pools().collect::<alloc::vec::Vec<_>>() {
        for resource in system.resources(pool) {
            for cpu in resource.cpus.iter() {
                super::switchcost::set_resource_size(cpu, resource.cpus.len());
            }
        }
    }
    let table = system.rendezvous_table();
    *SYSTEM.lock() = Some(system);
    // Published last: event handlers only reach the system once this is set.
    TABLE.call_once(|| table);
    applied
}

/// A scheduling kick or timer on this CPU: run the scheduler to the end.
pub fn on_event(event: CpuEvent) {
    let Some(table) = TABLE.get() else { return };
    let me = cpu::index();
    if event == CpuEvent::Timer {
        SCHED_DEADLINE[me].store(NO_DEADLINE, Ordering::Release);
    }
    let started = super::switchcost::start();
    let report = driver::drive(&GlobalLock, table, &ArmPlatform, me, event);
    super::switchcost::event_done(me, started, &report);
    if report.timeouts > 0 {
        // The latest timeout's record names the CPUs that never arrived.
        let latest = with_system(|s, _| {
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

/// The most domains one runtime line names.
const RUNTIME_LINE_DOMAINS: usize = 32;

/// Logs every domain's run time so far, summed over its units, as the pool
/// schedulers account it: `sched: runtime at T ms: dom1 R1 ns, dom2 R2 ns`.
/// Tests compare CPU shares with it (`xtask`'s weights scenario); the values
/// are collected under the scheduler lock and formatted after it.
pub fn log_runtimes() {
    let mut runtimes = [(0u32, 0u64); RUNTIME_LINE_DOMAINS];
    let count = with_system(|s, _| {
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
    if count == 0 {
        return;
    }
    let mut line = alloc::string::String::new();
    for (i, (domain, runtime)) in runtimes[..count].iter().enumerate() {
        let separator = if i == 0 { "" } else { "," };
        let _ = core::fmt::Write::write_fmt(
            &mut line,
            format_args!("{separator} dom{domain} {runtime} ns"),
        );
    }
    info!(
        "sched: runtime at {} ms:{line}",
        timer::now_ns() / 1_000_000
    );
}
