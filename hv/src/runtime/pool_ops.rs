//! Pool operations from the privileged `POOL_OP` hypercall and the
//! console (through [`crate::pools`]): every change and refusal logged, and
//! a move that waits, bounded, for the domain's vCPUs to leave their old
//! CPUs.
//!
//! A move rebuilds the domain's units in the new pool and kicks the CPUs
//! still running its vCPUs; those switch them out through the normal
//! (synchronised, for core/cluster pools) scheduling path, and the new pool's
//! CPUs only load a vCPU once its old CPU has released it. The caller then
//! waits, bounded, for the old CPUs to let go and reports how long it took.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use guest_abi::HvError;
use log::{info, warn};
use sched::{CpuSet, DomainId, Placement, PoolId, System, VcpuId};

use super::{Arch, MOVE_REKICK_NS, MOVE_RELEASE_TIMEOUT_NS, Runtime};
use crate::console_cmd::PoolRef;
use crate::pools::{self, PoolNames, PoolOpError};
use trace::event::PoolOp as TracedOp;

impl<A: Arch> Runtime<A> {
    /// `POOL_OP` from domain `caller` (the dispatcher has checked it is
    /// privileged), through [`crate::pools`]; every change and refusal is
    /// logged. A move waits for the domain's vCPUs like the console's.
    pub fn pool_hypercall(
        &self,
        caller: DomainId,
        op: guest_abi::PoolOp,
    ) -> Result<guest_abi::Regs, HvError> {
        if let guest_abi::PoolOp::DestroyDomain { domain }
        | guest_abi::PoolOp::RestartDomain { domain } = op
        {
            return self.domain_hypercall(caller, op, DomainId(domain));
        }
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
        if let Ok(regs) = &result {
            use guest_abi::PoolOp as Op;
            let traced = match op {
                Op::List { .. } => None,
                Op::Create { .. } => Some((regs[1] as u32, TracedOp::Create, 0)),
                Op::Destroy { pool } => Some((pool, TracedOp::Destroy, 0)),
                Op::AddCpu { pool, cpu } => Some((pool, TracedOp::AddCpu, cpu)),
                Op::RemoveCpu { pool, cpu } => Some((pool, TracedOp::RemoveCpu, cpu)),
                Op::MoveDomain { domain, pool } => Some((pool, TracedOp::MoveDomain, domain)),
                // Pool operations only: a domain's affinity and pauses show
                // in its switches.
                Op::PinDomain { .. }
                | Op::PauseDomain { .. }
                | Op::UnpauseDomain { .. }
                | Op::GetDomainParams { .. }
                | Op::SetDomainParams { .. }
                | Op::DestroyDomain { .. }
                | Op::RestartDomain { .. } => None,
            };
            if let Some((pool, what, arg)) = traced {
                self.trace_pool_op(PoolId(pool), what, u64::from(arg));
            }
        }
        result.map_err(|e| e.code())
    }

    /// `POOL_OP` `DestroyDomain`/`RestartDomain`: the architecture's, as
    /// the console's `destroy`/`restart`; refused for an unknown or stopped
    /// domain, or where the architecture cannot (nothing changes).
    fn domain_hypercall(
        &self,
        caller: DomainId,
        op: guest_abi::PoolOp,
        id: DomainId,
    ) -> Result<guest_abi::Regs, HvError> {
        let result = self.live_domain(id).and_then(|()| {
            match op {
                guest_abi::PoolOp::RestartDomain { .. } => self.arch.domain_restart(id),
                _ => self.arch.domain_destroy(id),
            }
            .map_err(PoolOpError::NotSupported)
        });
        match &result {
            Ok(()) => info!("pools: dom{} POOL_OP {op:?} done", caller.0),
            Err(e) => info!("pools: dom{} POOL_OP {op:?} refused: {e}", caller.0),
        }
        result.map(|()| [0; 4]).map_err(|e| e.code())
    }

    /// `Ok` if domain `id` exists and is not stopped: what the toolstack's
    /// domain operations (console and hypercall) need before they act.
    pub(super) fn live_domain(&self, id: DomainId) -> Result<(), PoolOpError> {
        match self.arch.domain_summary(id) {
            None => Err(PoolOpError::UnknownDomain(id.0)),
            Some((_, true)) => Err(PoolOpError::DomainStopped(id.0)),
            Some(_) => Ok(()),
        }
    }

    /// After a move: waits (bounded) until no vCPU of `domain` is still held
    /// by a CPU outside its new pool, and says how that went. The calling
    /// CPU is left out: it cannot switch anything out while it runs this
    /// handler, and its own kick is taken when the handler returns.
    pub(super) fn wait_for_release(&self, domain: DomainId) -> String {
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
            platform::sync::cpu_relax();
        }
    }

    /// Records a console pool operation in the trace.
    fn trace_pool_op(&self, pool: PoolId, op: TracedOp, arg: u64) {
        self.trace(
            self.arch.cpu_index(),
            trace::Kind::PoolOp,
            pool.0,
            op as u32,
            arg,
        );
    }

    pub(super) fn create(
        &self,
        name: &str,
        scheduler: &str,
        granularity: &str,
        placement: Placement,
        params: &[(String, String)],
    ) -> Result<(), PoolOpError> {
        let id = self
            .with_pools(|s, n, p| {
                let id = pools::create_with(s, n, Some(name), scheduler, granularity, placement)?;
                // Its parameters before anyone sees it: a refused one takes
                // the new, empty pool away again.
                for (key, value) in params {
                    if let Err(e) = s.pool_set_param(id, key, value) {
                        let _ = pools::destroy(s, n, id, p);
                        return Err(PoolOpError::System(e));
                    }
                }
                Ok(id)
            })
            .ok_or_else(not_booted)??;
        let spread = if placement == Placement::Spread {
            ", spread placement"
        } else {
            ""
        };
        let mut settings = String::new();
        for (key, value) in params {
            let _ = write!(settings, ", {key}={value}");
        }
        self.say(format_args!(
            "created pool {} ({name}): {scheduler}, {granularity} granularity{spread}{settings}, no CPUs",
            id.0
        ));
        info!("pools: console: created pool {} ({name})", id.0);
        self.trace_pool_op(id, TracedOp::Create, 0);
        Ok(())
    }

    pub(super) fn destroy(&self, pool: &PoolRef) -> Result<(), PoolOpError> {
        let (id, label, cpus) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                let label = label(n, id);
                pools::destroy(s, n, id, p).map(|cpus| (id, label, cpus))
            })
            .ok_or_else(not_booted)??;
        self.say(format_args!("destroyed {label}; CPUs {cpus} are free"));
        info!("pools: console: destroyed {label}");
        self.trace_pool_op(id, TracedOp::Destroy, 0);
        Ok(())
    }

    pub(super) fn add_cpu(&self, pool: &PoolRef, cpu: usize) -> Result<(), PoolOpError> {
        let (id, label, cpus) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                pools::add_cpu(s, id, cpu, p).map(|cpus| (id, label(n, id), cpus))
            })
            .ok_or_else(not_booted)??;
        self.say(format_args!("added CPUs {cpus} to {label}"));
        info!("pools: console: added CPUs {cpus} to {label}");
        self.trace_pool_op(id, TracedOp::AddCpu, cpu as u64);
        Ok(())
    }

    pub(super) fn remove_cpu(&self, pool: &PoolRef, cpu: usize) -> Result<(), PoolOpError> {
        let (id, label, cpus) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                pools::remove_cpu(s, id, cpu, p).map(|cpus| (id, label(n, id), cpus))
            })
            .ok_or_else(not_booted)??;
        self.trace_pool_op(id, TracedOp::RemoveCpu, cpu as u64);
        self.say(format_args!(
            "removed CPUs {cpus} from {label}; they are free"
        ));
        info!("pools: console: removed CPUs {cpus} from {label}");
        Ok(())
    }

    pub(super) fn move_domain(&self, domain: u32, pool: &PoolRef) -> Result<(), PoolOpError> {
        let (id, from, to) = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                pools::move_domain(s, domain, id, p).map(|from| (id, label(n, from), label(n, id)))
            })
            .ok_or_else(not_booted)??;
        self.trace_pool_op(id, TracedOp::MoveDomain, u64::from(domain));
        let released = self.wait_for_release(DomainId(domain));
        self.say(format_args!(
            "moved dom{domain} from {from} to {to}; {released}"
        ));
        info!("pools: console: moved dom{domain} from {from} to {to}; {released}");
        Ok(())
    }
}

pub(super) fn resolve(
    system: &System,
    names: &PoolNames,
    pool: &PoolRef,
) -> Result<PoolId, PoolOpError> {
    match pool {
        PoolRef::Id(id) => pools::existing(system, PoolId(*id)),
        PoolRef::Name(name) => pools::by_name(names, system, name),
    }
}

pub(super) fn not_booted() -> PoolOpError {
    PoolOpError::UnknownPool(String::from("(the scheduler is not running yet)"))
}

pub(super) fn label(names: &PoolNames, id: PoolId) -> String {
    match names.name(id) {
        Some(name) => alloc::format!("pool {} ({name})", id.0),
        None => alloc::format!("pool {}", id.0),
    }
}
