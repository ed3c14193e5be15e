//! Which vCPU each CPU has loaded, since when, and how long each vCPU has
//! run: lock-free, written by the CPU that switches and read from any CPU
//! (the console's `domains`, the teardown wait, the periodic run-time line).
//! The same on both architectures; the back-ends call [`CpuLoads::switch`]
//! at every context switch.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use sched::VcpuId;

/// `CPUS` CPUs' loaded vCPUs and `VCPUS` vCPUs' run times.
pub struct CpuLoads<const CPUS: usize, const VCPUS: usize> {
    /// Per CPU: 0 = idle, n = vCPU n - 1.
    loaded: [AtomicU32; CPUS],
    /// Per CPU: when it loaded the vCPU it runs (ns).
    loaded_at: [AtomicU64; CPUS],
    /// Per vCPU: time loaded on a CPU up to its last switch-out (ns).
    runtime_ns: [AtomicU64; VCPUS],
    /// Per vCPU: 0 = not loaded, n = loaded on CPU n - 1 (the reverse of
    /// `loaded`, for [`CpuLoads::loaded_on`]).
    on_cpu: [AtomicU32; VCPUS],
}

impl<const CPUS: usize, const VCPUS: usize> CpuLoads<CPUS, VCPUS> {
    /// Every CPU idle, every run time zero.
    pub const fn new() -> Self {
        Self {
            loaded: [const { AtomicU32::new(0) }; CPUS],
            loaded_at: [const { AtomicU64::new(0) }; CPUS],
            runtime_ns: [const { AtomicU64::new(0) }; VCPUS],
            on_cpu: [const { AtomicU32::new(0) }; VCPUS],
        }
    }

    /// The vCPU `cpu` has loaded, if any.
    pub fn loaded(&self, cpu: usize) -> Option<VcpuId> {
        match self.loaded.get(cpu)?.load(Ordering::Acquire) {
            0 => None,
            n => Some(VcpuId(n - 1)),
        }
    }

    /// Whether any CPU has `vcpu` loaded.
    pub fn loaded_anywhere(&self, vcpu: VcpuId) -> bool {
        self.loaded
            .iter()
            .any(|l| l.load(Ordering::Acquire) == vcpu.0.wrapping_add(1))
    }

    /// The CPU that has `vcpu` loaded, if any. A back-end calls
    /// [`CpuLoads::switch`] after the vCPU's last exit on its old CPU and
    /// before its first entry on the new one, so a vCPU in a guest is
    /// always found here (what an interrupt for it must nudge).
    pub fn loaded_on(&self, vcpu: VcpuId) -> Option<usize> {
        match self.on_cpu.get(vcpu.0 as usize)?.load(Ordering::Acquire) {
            0 => None,
            n => Some(n as usize - 1),
        }
    }

    /// `cpu` switches at `now` from what it ran to `next` (`None`: idle).
    /// The vCPU it ran is credited with its stint. An unknown CPU is
    /// ignored (the back-ends only pass their own index).
    pub fn switch(&self, cpu: usize, next: Option<VcpuId>, now: u64) {
        let (Some(loaded), Some(loaded_at)) = (self.loaded.get(cpu), self.loaded_at.get(cpu))
        else {
            return;
        };
        let here = cpu as u32 + 1;
        if let Some(old) = self.loaded(cpu) {
            if let Some(total) = self.runtime_ns.get(old.0 as usize) {
                total.fetch_add(
                    now.saturating_sub(loaded_at.load(Ordering::Relaxed)),
                    Ordering::Relaxed,
                );
            }
            if let Some(on) = self.on_cpu.get(old.0 as usize) {
                // Only if no other CPU took it meanwhile.
                let _ = on.compare_exchange(here, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        match next {
            Some(vcpu) => {
                if let Some(on) = self.on_cpu.get(vcpu.0 as usize) {
                    on.store(here, Ordering::Release);
                }
                loaded_at.store(now, Ordering::Relaxed);
                loaded.store(vcpu.0.wrapping_add(1), Ordering::Release);
            }
            None => loaded.store(0, Ordering::Release),
        }
    }

    /// Starts `vcpu`'s run time at zero (its id may have been used before).
    pub fn reset_runtime(&self, vcpu: VcpuId) {
        if let Some(slot) = self.runtime_ns.get(vcpu.0 as usize) {
            slot.store(0, Ordering::Relaxed);
        }
    }

    /// How long `vcpu` has run at `now`, including its current stint if it
    /// is loaded (read without stopping it: a racing switch may shift a few
    /// µs).
    pub fn runtime_ns(&self, vcpu: VcpuId, now: u64) -> u64 {
        let done = self
            .runtime_ns
            .get(vcpu.0 as usize)
            .map_or(0, |r| r.load(Ordering::Relaxed));
        let current = (0..CPUS)
            .find(|&cpu| self.loaded(cpu) == Some(vcpu))
            .map_or(0, |cpu| {
                now.saturating_sub(self.loaded_at[cpu].load(Ordering::Relaxed))
            });
        done + current
    }
}

impl<const CPUS: usize, const VCPUS: usize> Default for CpuLoads<CPUS, VCPUS> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vcpu_is_credited_with_each_stint_and_its_current_one() {
        let loads = CpuLoads::<2, 4>::new();
        assert_eq!(loads.loaded(0), None);
        loads.switch(0, Some(VcpuId(3)), 100);
        assert_eq!(loads.loaded(0), Some(VcpuId(3)));
        assert!(loads.loaded_anywhere(VcpuId(3)));
        assert_eq!(loads.loaded_on(VcpuId(3)), Some(0));
        assert_eq!(loads.runtime_ns(VcpuId(3), 150), 50, "the current stint");
        // Off CPU 0 at 200, onto CPU 1 at 300 (the 100 ns between do not count).
        loads.switch(0, None, 200);
        assert_eq!(loads.runtime_ns(VcpuId(3), 250), 100);
        assert!(!loads.loaded_anywhere(VcpuId(3)));
        assert_eq!(loads.loaded_on(VcpuId(3)), None);
        loads.switch(1, Some(VcpuId(3)), 300);
        assert_eq!(loads.loaded_on(VcpuId(3)), Some(1));
        assert_eq!(loads.runtime_ns(VcpuId(3), 310), 110);
        // Straight from one vCPU to another: the first is credited.
        loads.switch(1, Some(VcpuId(0)), 400);
        assert_eq!(loads.loaded_on(VcpuId(3)), None);
        assert_eq!(loads.loaded_on(VcpuId(0)), Some(1));
        assert_eq!(loads.runtime_ns(VcpuId(3), 1000), 200);
        assert_eq!(loads.runtime_ns(VcpuId(0), 1000), 600);
        loads.reset_runtime(VcpuId(3));
        assert_eq!(loads.runtime_ns(VcpuId(3), 1000), 0);
    }

    #[test]
    fn ids_beyond_the_tables_are_ignored() {
        let loads = CpuLoads::<1, 1>::new();
        loads.switch(5, Some(VcpuId(0)), 10);
        assert_eq!(loads.loaded(5), None);
        // A vCPU id beyond the run-time table still shows as loaded but
        // accrues nothing (installing such a vCPU fails before this).
        loads.switch(0, Some(VcpuId(7)), 10);
        loads.switch(0, None, 20);
        assert_eq!(loads.runtime_ns(VcpuId(7), 30), 0);
        // A clock that went backwards credits nothing rather than wrapping.
        loads.switch(0, Some(VcpuId(0)), 50);
        loads.switch(0, None, 40);
        assert_eq!(loads.runtime_ns(VcpuId(0), 60), 0);
    }
}
