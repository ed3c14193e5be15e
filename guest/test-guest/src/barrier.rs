//! Which vCPUs take part in the workloads, and the reusable, bounded barrier
//! they meet at before each one. The waiting itself (WFE on ARM, PAUSE on
//! x86) and the clock come from the caller, so the logic runs on the host.

use core::sync::atomic::{AtomicUsize, Ordering};

/// A set of vCPU indices below `usize::BITS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuSet(usize);

impl VcpuSet {
    /// No vCPU.
    pub const EMPTY: VcpuSet = VcpuSet(0);

    /// The vCPUs below `below` for which `member` holds.
    pub fn of(below: usize, member: impl Fn(usize) -> bool) -> Self {
        let below = below.min(usize::BITS as usize);
        Self((0..below).filter(|&i| member(i)).fold(0, |m, i| m | 1 << i))
    }

    /// From a raw bitmap (bit n = vCPU n).
    pub const fn from_bits(bits: usize) -> Self {
        Self(bits)
    }

    /// The raw bitmap.
    pub const fn bits(self) -> usize {
        self.0
    }

    /// Whether vCPU `index` is in the set.
    pub fn contains(self, index: usize) -> bool {
        index < usize::BITS as usize && self.0 & 1 << index != 0
    }

    /// How many vCPUs are in the set.
    pub fn count(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The set without vCPU `index`.
    pub fn without(self, index: usize) -> Self {
        if index < usize::BITS as usize {
            Self(self.0 & !(1 << index))
        } else {
            self
        }
    }

    /// The members, lowest first.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..usize::BITS as usize).filter(move |&i| self.contains(i))
    }
}

/// A reusable barrier: every round, `parties` vCPUs arrive and the last one
/// releases the others.
pub struct Barrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Barrier {
    /// A barrier nobody has arrived at.
    pub const fn new() -> Self {
        Self {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Arrives and waits until `parties` have arrived this round: the last
    /// one calls `release` (to wake the waiters: SEV) and returns at once;
    /// the others call `pause` between looks (WFE) until released, or until
    /// `expired` says the bound has passed (then false).
    pub fn wait(
        &self,
        parties: usize,
        release: impl FnOnce(),
        mut pause: impl FnMut(),
        mut expired: impl FnMut() -> bool,
    ) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            release();
            return true;
        }
        while self.generation.load(Ordering::Acquire) == generation {
            if expired() {
                return false;
            }
            pause();
        }
        true
    }
}

impl Default for Barrier {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    #[test]
    fn vcpu_sets() {
        let set = VcpuSet::of(6, |i| i != 2);
        assert_eq!(set.bits(), 0b11_1011);
        assert_eq!(set.count(), 5);
        assert!(set.contains(0) && set.contains(5) && !set.contains(2));
        assert!(!set.contains(6) && !set.contains(1000));
        assert_eq!(set.without(0).iter().collect::<Vec<_>>(), [1, 3, 4, 5]);
        assert_eq!(set.without(99), set);
        assert_eq!(VcpuSet::EMPTY.iter().count(), 0);
        assert_eq!(VcpuSet::of(1000, |_| true).count(), usize::BITS as usize);
    }

    #[test]
    fn nobody_passes_before_everyone_arrived_in_any_round() {
        const PARTIES: usize = 4;
        const ROUNDS: u64 = 200;
        let barrier = Arc::new(Barrier::new());
        // Each party adds one per round before the barrier; after it, the
        // sum must show every party's addition for that round.
        let sum = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..PARTIES)
            .map(|_| {
                let (barrier, sum) = (barrier.clone(), sum.clone());
                std::thread::spawn(move || {
                    let give_up = Instant::now() + Duration::from_secs(60);
                    for round in 1..=ROUNDS {
                        sum.fetch_add(1, Ordering::SeqCst);
                        assert!(barrier.wait(
                            PARTIES,
                            || {},
                            std::thread::yield_now,
                            || Instant::now() > give_up
                        ));
                        assert!(sum.load(Ordering::SeqCst) >= round * PARTIES as u64);
                        // A second barrier keeps the next round's additions
                        // from racing this round's check.
                        assert!(barrier.wait(
                            PARTIES,
                            || {},
                            std::thread::yield_now,
                            || Instant::now() > give_up
                        ));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sum.load(Ordering::SeqCst), ROUNDS * PARTIES as u64);
    }

    #[test]
    fn the_last_arrival_releases_and_a_missing_party_times_out() {
        let barrier = Barrier::new();
        let mut released = false;
        assert!(barrier.wait(1, || released = true, || {}, || false));
        assert!(released);
        // Two parties, one shows up: it gives up when the bound passes.
        let mut looks = 0;
        let passed = barrier.wait(
            2,
            || panic!("nobody else arrived"),
            || {},
            || {
                looks += 1;
                looks > 3
            },
        );
        assert!(!passed);
        assert_eq!(looks, 4);
    }
}
