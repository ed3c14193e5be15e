//! Runtime cpupool operations on ARM64: the hypervisor console's commands
//! (typed while the hypervisor has console input, parsed by
//! `hv::console_cmd`) and the privileged domain's `POOL_OP` hypercall, both
//! run through `hv::pools` against the scheduler.
//!
//! Every console command answers with lines on the console; a refused one
//! prints a single `error: ...` line and changes nothing. Every operation,
//! from either side, is also logged (`pools: ...`) so a test can follow it.
//!
//! A move rebuilds the domain's units in the new pool and kicks the CPUs
//! still running its vCPUs; those switch them out through the normal
//! (synchronised, for core/cluster pools) scheduling path, and the new pool's
//! CPUs only load a vCPU once its old CPU has released it. The caller then
//! waits, bounded, for the old CPUs to let go and reports how long it took.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use hv::console_cmd::{self, Command, PoolRef};
use hv::pools::{self, PoolNames, PoolOpError};
use log::{info, warn};
use platform::arch::aarch64::{console, cpu, timer};
use sched::{DomainId, PoolId, System, VcpuId};
use spin::Mutex;

use super::{domain, schedule, vcpu};

/// How long a move waits for the domain's vCPUs to leave their old CPUs. On
/// hardware this takes microseconds; under QEMU's TCG on a loaded host a
/// virtual CPU can go unscheduled for hundreds of milliseconds.
const MOVE_RELEASE_TIMEOUT_NS: u64 = 2_000_000_000;

/// How often a CPU that still holds a moved vCPU is kicked again.
const MOVE_REKICK_NS: u64 = 100_000_000;

static NAMES: Mutex<PoolNames> = Mutex::new(PoolNames::new());

/// Names the pools the config built (pool 0 is `Pool-0`, as in Xen, when
/// there is no config).
pub fn init_names(config: Option<&hv::config::Config>, applied: &hv::config::Applied) {
    cpu::without_irqs(|| {
        let mut names = NAMES.lock();
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

/// Runs one typed line.
pub fn run(line: &str) {
    let command = match console_cmd::parse(line) {
        Ok(Some(command)) => command,
        Ok(None) => return,
        Err(e) => return say(format_args!("error: {e}")),
    };
    let result = match command {
        Command::Help => {
            for help in console_cmd::HELP {
                say(format_args!("{help}"));
            }
            Ok(())
        }
        Command::Pools => {
            list_pools();
            Ok(())
        }
        Command::Domains => {
            list_domains();
            Ok(())
        }
        Command::PoolCreate {
            name,
            scheduler,
            granularity,
        } => create(&name, &scheduler, &granularity),
        Command::PoolDestroy { pool } => destroy(&pool),
        Command::PoolAddCpu { pool, cpu } => add_cpu(&pool, cpu),
        Command::PoolRemoveCpu { pool, cpu } => remove_cpu(&pool, cpu),
        Command::Move { domain, pool } => move_domain(domain, &pool),
    };
    if let Err(e) = result {
        say(format_args!("error: {e}"));
        info!("pools: console: '{line}' refused: {e}");
    }
}

/// One answer line, without the log prefix (the console is interactive).
fn say(args: core::fmt::Arguments<'_>) {
    console::write_fmt(format_args!("{args}\n"));
}

/// Runs `f` with the scheduler and the pool names (IRQs off, scheduler lock
/// then names lock).
fn with_pools<R>(
    f: impl FnOnce(&mut System, &mut PoolNames, &schedule::ArmPlatform) -> R,
) -> Option<R> {
    schedule::with_system(|system, platform| f(system, &mut NAMES.lock(), platform))
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

fn create(name: &str, scheduler: &str, granularity: &str) -> Result<(), PoolOpError> {
    let id = with_pools(|s, n, _| pools::create(s, n, Some(name), scheduler, granularity))
        .ok_or_else(not_booted)??;
    say(format_args!(
        "created pool {} ({name}): {scheduler}, {granularity} granularity, no CPUs",
        id.0
    ));
    info!("pools: console: created pool {} ({name})", id.0);
    Ok(())
}

fn destroy(pool: &PoolRef) -> Result<(), PoolOpError> {
    let (label, cpus) = with_pools(|s, n, p| {
        let id = resolve(s, n, pool)?;
        let label = label(n, id);
        pools::destroy(s, n, id, p).map(|cpus| (label, cpus))
    })
    .ok_or_else(not_booted)??;
    say(format_args!("destroyed {label}; CPUs {cpus} are free"));
    info!("pools: console: destroyed {label}");
    Ok(())
}

fn add_cpu(pool: &PoolRef, cpu: usize) -> Result<(), PoolOpError> {
    let (label, cpus) = with_pools(|s, n, p| {
        let id = resolve(s, n, pool)?;
        pools::add_cpu(s, id, cpu, p).map(|cpus| (label(n, id), cpus))
    })
    .ok_or_else(not_booted)??;
    say(format_args!("added CPUs {cpus} to {label}"));
    info!("pools: console: added CPUs {cpus} to {label}");
    Ok(())
}

fn remove_cpu(pool: &PoolRef, cpu: usize) -> Result<(), PoolOpError> {
    let (label, cpus) = with_pools(|s, n, p| {
        let id = resolve(s, n, pool)?;
        pools::remove_cpu(s, id, cpu, p).map(|cpus| (label(n, id), cpus))
    })
    .ok_or_else(not_booted)??;
    say(format_args!(
        "removed CPUs {cpus} from {label}; they are free"
    ));
    info!("pools: console: removed CPUs {cpus} from {label}");
    Ok(())
}

fn move_domain(domain: u32, pool: &PoolRef) -> Result<(), PoolOpError> {
    let (from, to) = with_pools(|s, n, p| {
        let id = resolve(s, n, pool)?;
        pools::move_domain(s, domain, id, p).map(|from| (label(n, from), label(n, id)))
    })
    .ok_or_else(not_booted)??;
    let released = wait_for_release(DomainId(domain));
    say(format_args!(
        "moved dom{domain} from {from} to {to}; {released}"
    ));
    info!("pools: console: moved dom{domain} from {from} to {to}; {released}");
    Ok(())
}

/// After a move: waits (bounded) until no vCPU of `domain` is still held by
/// a CPU outside its new pool, and says how that went. The calling CPU is
/// left out: it cannot switch anything out while it runs this handler, and
/// its own kick is taken when the handler returns.
fn wait_for_release(domain: DomainId) -> String {
    let me = cpu::index();
    let start = timer::now_ns();
    let deadline = start + MOVE_RELEASE_TIMEOUT_NS;
    let mut next_kick = start + MOVE_REKICK_NS;
    loop {
        let held: Option<Vec<(VcpuId, usize)>> = schedule::with_system(|s, _| {
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
                (timer::now_ns() - start) / 1000
            );
        }
        let now = timer::now_ns();
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
            // after is kicked again (a kick only makes it run its scheduler)
            // and the repeat is logged: it means a kick went unanswered.
            next_kick = now + MOVE_REKICK_NS;
            let cpus: sched::CpuSet = held.iter().map(|&(_, c)| c).collect();
            warn!(
                "pools: dom{}: CPUs {cpus} still hold its vCPUs after {} us; kicking them again",
                domain.0,
                (now - start) / 1000
            );
            <schedule::ArmPlatform as sched::Platform>::kick(&schedule::ArmPlatform, &cpus);
        }
        core::hint::spin_loop();
    }
}

/// `pools`: one line per pool.
fn list_pools() {
    let lines = with_pools(|s, n, _| {
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
        say(format_args!("{line}"));
    }
}

/// `domains`: one line per domain, then one per vCPU.
fn list_domains() {
    for id in domain::ids() {
        let Some((name, stopped)) = domain::with_domain(id, |d| (d.name.clone(), d.stopped)) else {
            continue;
        };
        // vCPU ids, states and the pool, read in one go.
        let view = with_pools(|s, n, _| {
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
        say(format_args!(
            "dom{} ({name}): {state}, {}",
            id.0,
            pool.as_deref().unwrap_or("no pool")
        ));
        for (index, (v, state, on)) in vcpus.iter().enumerate() {
            let runtime_us = vcpu::runtime_ns(*v) / 1000;
            match on {
                Some(cpu) => say(format_args!(
                    "  vcpu {index}: {state} on cpu {cpu}, ran {runtime_us} us"
                )),
                None => say(format_args!("  vcpu {index}: {state}, ran {runtime_us} us")),
            }
        }
    }
}

/// `POOL_OP` from domain `caller` (the dispatcher has checked it is
/// privileged). A move waits for the domain's vCPUs like the console's.
pub fn pool_hypercall(
    caller: DomainId,
    op: guest_abi::PoolOp,
) -> Result<guest_abi::Regs, guest_abi::HvError> {
    let result = with_pools(|s, n, p| pools::hypercall(s, n, op, p)).unwrap_or(Err(
        PoolOpError::UnknownPool(String::from("(no scheduler)")),
    ));
    match (&result, op) {
        (Err(e), _) => info!("pools: dom{} POOL_OP {op:?} refused: {e}", caller.0),
        // Listing is read-only and frequent: not logged.
        (Ok(_), guest_abi::PoolOp::List { .. }) => {}
        (Ok(_), guest_abi::PoolOp::MoveDomain { domain, .. }) => {
            let released = wait_for_release(DomainId(domain));
            info!("pools: dom{} POOL_OP {op:?} done; {released}", caller.0);
        }
        (Ok(regs), _) => info!(
            "pools: dom{} POOL_OP {op:?} done (x1 = {})",
            caller.0, regs[1]
        ),
    }
    result.map_err(|e| e.code())
}
