//! The x86 side of `sched`: one global [`System`] behind a spinlock, the
//! [`Platform`] implementation (APIC IPI kicks, the APIC timer as scheduling
//! timer, switches that the per-CPU run loop enters), and the per-CPU entry
//! point the run loop calls. Mirrors `arm/schedule.rs`.

use core::sync::atomic::{AtomicU64, Ordering};

use hv::config::{Applied, Config};
use hv::pools::{self, PoolNames, PoolOpError};
use log::{error, info};
use platform::arch::x86_64::{cpu, timer};
use sched::driver::{self, CpuEvent, SystemLock};
use sched::rendezvous::RendezvousTable;
use sched::{CpuContext, CpuSet, DomainId, MAX_CPUS, Platform, PoolId, System, Time, Topology};
use spin::{Mutex, Once};

/// The IPI vector that asks a CPU to run its scheduler (Xen's
/// SCHEDULE_SOFTIRQ IPI).
pub const VECTOR_KICK: u8 = 0x43;

/// No deadline armed.
const NO_DEADLINE: u64 = u64::MAX;

static SYSTEM: Mutex<Option<System>> = Mutex::new(None);
static TABLE: Once<alloc::sync::Arc<RendezvousTable>> = Once::new();
/// Each CPU's scheduling timer deadline (ns), or [`NO_DEADLINE`].
static SCHED_DEADLINE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(NO_DEADLINE) }; MAX_CPUS];

/// The hypervisor's [`Platform`]: APIC IPIs, the APIC timer, vCPU switches.
pub struct X86Platform;

impl Platform for X86Platform {
    fn now_ns(&self) -> Time {
        timer::now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        for cpu in cpus.iter() {
            super::send_ipi(cpu, VECTOR_KICK);
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
pub fn with_system<R>(f: impl FnOnce(&mut System, &X86Platform) -> R) -> Option<R> {
    cpu::without_irqs(|| SYSTEM.lock().as_mut().map(|s| f(s, &X86Platform)))
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
    let (system, applied) = hv::sched_boot::build_system(topology, config, &X86Platform);
    init_pool_names(config, &applied);
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
    let report = driver::drive(&GlobalLock, table, &X86Platform, me, event);
    if report.timeouts > 0 {
        error!(
            "sched: cpu {me}: {} rendezvous timed out (see diagnostics)",
            report.timeouts
        );
    }
}

/// The pools' names (`POOL_OP` create names new ones `poolN`).
static POOL_NAMES: Mutex<PoolNames> = Mutex::new(PoolNames::new());

/// Names the pools the config built (pool 0 is `Pool-0`, as in Xen, when
/// there is no config), as `arm/commands.rs` does.
fn init_pool_names(config: Option<&Config>, applied: &Applied) {
    cpu::without_irqs(|| {
        let mut names = POOL_NAMES.lock();
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
}

/// One `POOL_OP` from domain `caller` (already authorised as privileged by
/// the shared dispatcher), through the shared [`hv::pools`] layer; logs
/// every change and every refusal.
pub fn pool_hypercall(
    caller: DomainId,
    op: guest_abi::PoolOp,
) -> Result<guest_abi::Regs, guest_abi::HvError> {
    let result =
        with_system(|s, p| pools::hypercall(s, &mut POOL_NAMES.lock(), op, p)).unwrap_or(Err(
            PoolOpError::UnknownPool(alloc::string::String::from("(no scheduler)")),
        ));
    match (&result, op) {
        (Err(e), _) => info!("pools: dom{} POOL_OP {op:?} refused: {e}", caller.0),
        // Listing is read-only and frequent: not logged.
        (Ok(_), guest_abi::PoolOp::List { .. }) => {}
        (Ok(regs), _) => info!(
            "pools: dom{} POOL_OP {op:?} done (x1 = {})",
            caller.0, regs[1]
        ),
    }
    result.map_err(|e| e.code())
}
