//! Timed wake-ups of blocked vCPUs (as `arm/wakeup.rs`): a vCPU that halts
//! with its virtual APIC timer armed is blocked, and the CPU it blocked on
//! wakes it at the deadline with its APIC timer.

use alloc::vec::Vec;

use log::warn;
use platform::arch::x86_64::cpu;
use sched::{MAX_CPUS, Time, VcpuId};
use spin::Mutex;

use super::schedule;

/// Wake-ups a CPU expects at once (one per vCPU blocked on it); more still
/// work, with a reallocation.
const WAKEUPS_PER_CPU: usize = 64;

/// Pending wake-ups per CPU: `(deadline_ns, vcpu)`.
static PENDING: [Mutex<Vec<(Time, VcpuId)>>; MAX_CPUS] =
    [const { Mutex::new(Vec::new()) }; MAX_CPUS];

/// Wakes `vcpu` at `deadline_ns`, from CPU `cpu`'s timer.
pub fn add(cpu_index: usize, vcpu: VcpuId, deadline_ns: Time) {
    let Some(list) = PENDING.get(cpu_index) else {
        return;
    };
    cpu::without_irqs(|| {
        let mut list = list.lock();
        list.retain(|&(_, v)| v != vcpu);
        // Reserved once, so later WFI exits do not allocate.
        if list.capacity() == 0 {
            list.reserve(WAKEUPS_PER_CPU);
        }
        list.push((deadline_ns, vcpu));
    });
    super::rearm_timer();
}

/// The earliest pending wake-up on this CPU.
pub fn next_deadline(cpu_index: usize) -> Option<Time> {
    let list = PENDING.get(cpu_index)?;
    cpu::without_irqs(|| list.lock().iter().map(|&(d, _)| d).min())
}

/// Wakes every vCPU whose deadline has passed.
pub fn expire(cpu_index: usize, now: Time) {
    let Some(list) = PENDING.get(cpu_index) else {
        return;
    };
    loop {
        let due = cpu::without_irqs(|| {
            let mut list = list.lock();
            let position = list.iter().position(|&(d, _)| d <= now)?;
            Some(list.swap_remove(position).1)
        });
        let Some(vcpu) = due else { break };
        if let Some(Err(e)) = schedule::with_system(|s, p| s.vcpu_wake(vcpu, p)) {
            warn!("wakeup: vCPU {} could not be woken: {e}", vcpu.0);
        }
    }
}
