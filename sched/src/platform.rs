//! The only way `sched` reaches hardware.
//!
//! The hypervisor implements [`Platform`] with GIC SGIs / APIC IPIs, the generic
//! or APIC timer and its vCPU context switch; host tests and the scheduling lab
//! implement it with queues and a simulated clock. `sched` itself is driven by
//! per-CPU events (see [`crate::system::System`] and [`crate::driver`]):
//! "CPU c got a kick", "CPU c's timer fired", "CPU c finished its context
//! switch", and the vCPU events (blocked, woke, paused, yielded).

use crate::cpuset::CpuSet;
use crate::rendezvous::{Outcome, Ticket};
use crate::scheduler::Time;
use crate::unit::VcpuId;

/// What a physical CPU runs: one vCPU's context, or the hypervisor's idle loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuContext {
    /// The idle loop: no guest state loaded.
    Idle,
    /// A vCPU's guest context.
    Vcpu(VcpuId),
}

impl CpuContext {
    /// The vCPU, if this is a guest context.
    pub fn vcpu(self) -> Option<VcpuId> {
        match self {
            Self::Idle => None,
            Self::Vcpu(v) => Some(v),
        }
    }
}

/// Hardware services the scheduler needs. Every method may be called from any
/// CPU, with the scheduler's lock held, so implementations must not block and
/// must not call back into the scheduler.
pub trait Platform {
    /// The monotonic clock, in ns.
    fn now_ns(&self) -> Time;

    /// Sends a scheduling IPI to every CPU of `cpus` (it may include the
    /// calling CPU: a self-IPI). The kicked CPU later calls
    /// [`crate::system::System::on_kick`] (or [`crate::driver::drive`]).
    fn kick(&self, cpus: &CpuSet);

    /// Saves the context `cpu` currently runs and loads `context`. Only ever
    /// called by `cpu` itself, from the driver loop, without the scheduler
    /// lock; afterwards the driver reports
    /// [`crate::system::System::switch_done`].
    fn switch_to(&self, cpu: usize, context: CpuContext);

    /// Arms (`Some`) or disarms (`None`) `cpu`'s one-shot scheduling timer, an
    /// absolute deadline on [`Platform::now_ns`]'s clock. On expiry the CPU calls
    /// [`crate::system::System::on_timer`].
    fn set_timer(&self, cpu: usize, deadline_ns: Option<Time>);

    /// One pause between two looks of a busy-wait (a rendezvous): the
    /// CPU's spinning hint. The hypervisor's is `yield` on AArch64, so an
    /// emulator running the CPUs in turn lets the awaited sibling run.
    fn relax(&self) {
        crate::sync::spin_hint();
    }

    /// `cpu` arrived at `ticket`'s rendezvous and starts waiting for its
    /// siblings (tracing). Returns the arrival time if the platform records
    /// it, to be handed back to [`Platform::rendezvous_ended`]; by default
    /// nothing is recorded and the clock is not even read.
    fn rendezvous_arrived(&self, cpu: usize, ticket: &Ticket) -> Option<Time> {
        let _ = (cpu, ticket);
        None
    }

    /// `cpu`'s wait at `ticket`'s rendezvous ended with `outcome`; `arrived`
    /// is what [`Platform::rendezvous_arrived`] returned (tracing; nothing by
    /// default).
    fn rendezvous_ended(
        &self,
        cpu: usize,
        ticket: &Ticket,
        outcome: &Outcome,
        arrived: Option<Time>,
    ) {
        let _ = (cpu, ticket, outcome, arrived);
    }
}
