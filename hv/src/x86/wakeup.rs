//! Timed wake-ups of blocked vCPUs on this architecture: the lists are
//! [`hv::wakeup::WakeupLists`]; this adds interrupt masking, the timer
//! re-arm and the scheduler's wake-up.

use hv::wakeup::WakeupLists;
use log::warn;
use platform::arch::x86_64::cpu;
use sched::{Time, VcpuId};

use super::schedule;

static PENDING: WakeupLists = WakeupLists::new();

/// Wakes `vcpu` at `deadline_ns`, from CPU `cpu`'s timer.
pub fn add(cpu_index: usize, vcpu: VcpuId, deadline_ns: Time) {
    cpu::without_irqs(|| PENDING.add(cpu_index, vcpu, deadline_ns));
    super::rearm_timer();
}

/// The earliest pending wake-up on this CPU.
pub fn next_deadline(cpu_index: usize) -> Option<Time> {
    cpu::without_irqs(|| PENDING.next_deadline(cpu_index))
}

/// Wakes every vCPU whose deadline has passed.
pub fn expire(cpu_index: usize, now: Time) {
    while let Some(vcpu) = cpu::without_irqs(|| PENDING.take_due(cpu_index, now)) {
        if let Some(Err(e)) = schedule::with_system(|s, p| s.vcpu_wake(vcpu, p)) {
            warn!("wakeup: vCPU {} could not be woken: {e}", vcpu.0);
        }
    }
}

/// Forgets `vcpu`'s pending wake-ups (its domain is torn down, and its id
/// may be handed out again).
pub fn cancel(vcpu: VcpuId) {
    cpu::without_irqs(|| PENDING.cancel(vcpu));
}
