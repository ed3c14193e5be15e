//! Timed wake-ups of blocked vCPUs: a vCPU that waits (WFI, HLT, BLOCK) with
//! its virtual timer armed is blocked, and the CPU it blocked on wakes it at
//! the deadline with its own timer. One list per CPU ([`WakeupLists`]); the
//! runtime adds the interrupt masking (each call takes a spinlock an
//! interrupt handler on the same CPU may also take), the timer re-arm and
//! the scheduler's wake-up.

use alloc::vec::Vec;

use platform::sync::Mutex;
use sched::{MAX_CPUS, Time, VcpuId};

use super::{Arch, Runtime};

impl<A: Arch> Runtime<A> {
    /// Wakes `vcpu` at `deadline_ns`, from CPU `cpu`'s timer (replacing an
    /// earlier wake-up of it there), and re-arms that timer if `cpu` is the
    /// caller.
    pub fn wake_at(&self, cpu: usize, vcpu: VcpuId, deadline_ns: Time) {
        self.arch
            .without_irqs(|| self.wakeups.add(cpu, vcpu, deadline_ns));
        if cpu == self.arch.cpu_index() {
            self.rearm_timer();
        }
    }

    /// The earliest pending wake-up on `cpu`.
    pub fn next_wakeup(&self, cpu: usize) -> Option<Time> {
        self.arch.without_irqs(|| self.wakeups.next_deadline(cpu))
    }

    /// Wakes every vCPU whose wake-up on `cpu` is due at `now`.
    pub fn expire_wakeups(&self, cpu: usize, now: Time) {
        while let Some(vcpu) = self.arch.without_irqs(|| self.wakeups.take_due(cpu, now)) {
            self.wake(vcpu);
        }
    }

    /// Forgets every pending wake-up of `vcpu` (its domain is torn down or
    /// restarted, and its id may be handed out again).
    pub fn cancel_wakeups(&self, vcpu: VcpuId) {
        self.arch.without_irqs(|| self.wakeups.cancel(vcpu));
    }
}

/// Wake-ups a CPU expects at once (one per vCPU blocked on it); more still
/// work, with a reallocation.
const WAKEUPS_PER_CPU: usize = 64;

/// Pending wake-ups per CPU: `(deadline_ns, vcpu)`.
pub struct WakeupLists {
    lists: [Mutex<Vec<(Time, VcpuId)>>; MAX_CPUS],
}

impl Default for WakeupLists {
    fn default() -> Self {
        Self::new()
    }
}

impl WakeupLists {
    /// No wake-ups pending.
    pub const fn new() -> Self {
        Self {
            lists: [const { Mutex::new(Vec::new()) }; MAX_CPUS],
        }
    }

    /// Wakes `vcpu` at `deadline_ns` from CPU `cpu`'s timer (replacing an
    /// earlier wake-up of it on that CPU). Call with interrupts masked.
    pub fn add(&self, cpu: usize, vcpu: VcpuId, deadline_ns: Time) {
        let Some(list) = self.lists.get(cpu) else {
            return;
        };
        let mut list = list.lock();
        list.retain(|&(_, v)| v != vcpu);
        // Reserved once, so later waits do not allocate.
        if list.capacity() == 0 {
            list.reserve(WAKEUPS_PER_CPU);
        }
        list.push((deadline_ns, vcpu));
    }

    /// The earliest pending wake-up on `cpu`. Call with interrupts masked.
    pub fn next_deadline(&self, cpu: usize) -> Option<Time> {
        self.lists.get(cpu)?.lock().iter().map(|&(d, _)| d).min()
    }

    /// Takes one vCPU whose deadline on `cpu` is at or before `now`. Call
    /// with interrupts masked, and again until it returns `None`.
    pub fn take_due(&self, cpu: usize, now: Time) -> Option<VcpuId> {
        let mut list = self.lists.get(cpu)?.lock();
        let position = list.iter().position(|&(d, _)| d <= now)?;
        Some(list.swap_remove(position).1)
    }

    /// Forgets every pending wake-up of `vcpu` on every CPU (its domain is
    /// torn down or restarted). Call with interrupts masked.
    pub fn cancel(&self, vcpu: VcpuId) {
        for list in &self.lists {
            list.lock().retain(|&(_, v)| v != vcpu);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_wakeups_come_out_and_later_ones_stay() {
        let lists = WakeupLists::new();
        lists.add(1, VcpuId(4), 300);
        lists.add(1, VcpuId(5), 100);
        lists.add(2, VcpuId(6), 50);
        assert_eq!(lists.next_deadline(1), Some(100));
        assert_eq!(lists.take_due(1, 99), None);
        assert_eq!(lists.take_due(1, 200), Some(VcpuId(5)));
        assert_eq!(lists.take_due(1, 200), None);
        assert_eq!(lists.next_deadline(1), Some(300));
        assert_eq!(lists.next_deadline(2), Some(50));
        assert_eq!(lists.next_deadline(0), None);
    }

    #[test]
    fn a_new_wakeup_replaces_the_old_one_and_cancel_forgets_all() {
        let lists = WakeupLists::new();
        lists.add(0, VcpuId(1), 500);
        lists.add(0, VcpuId(1), 200);
        assert_eq!(lists.take_due(0, 1000), Some(VcpuId(1)));
        assert_eq!(lists.take_due(0, 1000), None, "only the latest is kept");
        lists.add(0, VcpuId(2), 10);
        lists.add(3, VcpuId(2), 20);
        lists.cancel(VcpuId(2));
        assert_eq!(lists.next_deadline(0), None);
        assert_eq!(lists.next_deadline(3), None);
        // CPUs beyond the table are ignored, not a panic.
        lists.add(MAX_CPUS, VcpuId(9), 1);
        assert_eq!(lists.take_due(MAX_CPUS, 5), None);
    }
}
