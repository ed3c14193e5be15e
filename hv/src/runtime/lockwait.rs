//! The scheduler locks' always-on wait counter: how long CPUs spin for the
//! locks around the [`sched::SharedSystem`] (the machine lock and a pool's
//! part lock, taken together), per acquisition and per scheduling event,
//! and how much of it went on the machine lock alone. A few relaxed atomic
//! adds per acquisition; the boot CPU logs it with the other periodic lines
//! (`sched: lock wait: ...`), which `cargo xtask bench-hv` reads: the
//! figures that per-pool locks must keep flat as the machine grows.

use core::sync::atomic::{AtomicU64, Ordering};

/// Running totals of the lock's acquisitions and waits.
pub struct LockWait {
    /// Every acquisition.
    acquisitions: AtomicU64,
    /// Acquisitions that found the lock held and had to spin.
    contended: AtomicU64,
    /// Scheduling events (kicks and timers) handled.
    events: AtomicU64,
    /// ns spent spinning, all acquisitions.
    wait_ns: AtomicU64,
    /// The longest single wait, ns.
    max_wait_ns: AtomicU64,
    /// ns spent spinning for the machine lock alone.
    machine_wait_ns: AtomicU64,
}

/// A copy of the totals at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockWaitFigures {
    /// Every acquisition.
    pub acquisitions: u64,
    /// Acquisitions that had to spin.
    pub contended: u64,
    /// Scheduling events handled.
    pub events: u64,
    /// ns spent spinning in all.
    pub wait_ns: u64,
    /// The longest single wait, ns.
    pub max_wait_ns: u64,
    /// ns of `wait_ns` spent on the machine lock alone.
    pub machine_wait_ns: u64,
}

impl LockWaitFigures {
    /// Mean spin per scheduling event, ns (every acquisition's wait, also
    /// those outside events such as a vCPU's block or wake, charged to the
    /// events: what the lock costs per unit of scheduling work).
    pub fn wait_per_event_ns(&self) -> u64 {
        self.wait_ns / self.events.max(1)
    }

    /// Mean spin for the machine lock alone per scheduling event, ns.
    pub fn machine_wait_per_event_ns(&self) -> u64 {
        self.machine_wait_ns / self.events.max(1)
    }
}

impl LockWait {
    /// No acquisition yet.
    pub const fn new() -> Self {
        Self {
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            events: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            max_wait_ns: AtomicU64::new(0),
            machine_wait_ns: AtomicU64::new(0),
        }
    }

    /// The lock was taken at once.
    pub fn uncontended(&self) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
    }

    /// The lock was taken after spinning `waited_ns`.
    pub fn contended(&self, waited_ns: u64) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        self.contended.fetch_add(1, Ordering::Relaxed);
        self.wait_ns.fetch_add(waited_ns, Ordering::Relaxed);
        self.max_wait_ns.fetch_max(waited_ns, Ordering::Relaxed);
    }

    /// Of a wait already counted, `waited_ns` went on the machine lock.
    pub fn machine_waited(&self, waited_ns: u64) {
        self.machine_wait_ns.fetch_add(waited_ns, Ordering::Relaxed);
    }

    /// A scheduling event begins.
    pub fn event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn figures(&self) -> LockWaitFigures {
        LockWaitFigures {
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
            contended: self.contended.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            wait_ns: self.wait_ns.load(Ordering::Relaxed),
            max_wait_ns: self.max_wait_ns.load(Ordering::Relaxed),
            machine_wait_ns: self.machine_wait_ns.load(Ordering::Relaxed),
        }
    }
}

impl Default for LockWait {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Display for LockWaitFigures {
    /// `sched: lock wait: ` is the caller's; this is the rest of the line.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "events={} acquisitions={} contended={} wait_ns={} per_event_ns={} max_ns={} machine_per_event_ns={}",
            self.events,
            self.acquisitions,
            self.contended,
            self.wait_ns,
            self.wait_per_event_ns(),
            self.max_wait_ns,
            self.machine_wait_per_event_ns()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_add_up_per_event() {
        let w = LockWait::new();
        assert_eq!(
            w.figures().wait_per_event_ns(),
            0,
            "no event: no division by 0"
        );
        for _ in 0..4 {
            w.event();
            w.uncontended();
        }
        w.contended(300);
        w.contended(100);
        w.machine_waited(40);
        let f = w.figures();
        assert_eq!(
            f,
            LockWaitFigures {
                acquisitions: 6,
                contended: 2,
                events: 4,
                wait_ns: 400,
                max_wait_ns: 300,
                machine_wait_ns: 40,
            }
        );
        assert_eq!(f.wait_per_event_ns(), 100);
        assert_eq!(f.machine_wait_per_event_ns(), 10);
        assert_eq!(
            f.to_string(),
            "events=4 acquisitions=6 contended=2 wait_ns=400 per_event_ns=100 max_ns=300 machine_per_event_ns=10"
        );
    }
}
