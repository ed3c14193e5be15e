//! The recording side: one fixed-size ring of event slots per CPU, written
//! lock-free and without allocating, read into a [`Snapshot`] for a dump.
//!
//! Like xentrace's per-CPU buffers, a full ring drops new events and counts
//! them rather than overwriting old ones: a dump is then a prefix of what
//! happened on that CPU, never a mix of two windows, and the analysis knows
//! exactly where that CPU's knowledge ends.
//!
//! A slot is reserved with one `fetch_add`, so any CPU (or an interrupt
//! nested in a recording) may write into any ring. Its `stamp` (the
//! recording session's epoch and the slot's index) is written last with
//! release ordering; a reader takes only slots whose stamp matches, so a
//! slot still being written, or one a recorder from an earlier session
//! wrote after `start` began a new one, is never read as an event (it
//! counts as dropped).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::event::{ClassSet, Event, Kind};

/// One event slot.
struct Slot {
    /// `epoch << 32 | index + 1` once written; anything else: not an event
    /// of this session.
    stamp: AtomicU64,
    time_ns: AtomicU64,
    /// `kind << 56 | vcpu << 32 | domain`: the vCPU index keeps 24 bits.
    ids: AtomicU64,
    arg: AtomicU64,
}

impl Slot {
    fn new() -> Self {
        Self {
            stamp: AtomicU64::new(0),
            time_ns: AtomicU64::new(0),
            ids: AtomicU64::new(0),
            arg: AtomicU64::new(0),
        }
    }
}

/// The most vCPU index bits a slot keeps.
const VCPU_MASK: u32 = 0x00ff_ffff;

/// One CPU's ring.
struct Ring {
    /// Slots reserved so far in this session (may pass the capacity: those
    /// recordings were dropped).
    reserved: AtomicUsize,
    /// Events dropped because the ring was full.
    dropped: AtomicU64,
    slots: Box<[Slot]>,
}

/// Every CPU's ring and the recording switch.
pub struct Rings {
    rings: Box<[Ring]>,
    /// The classes recorded now ([`ClassSet`] bits); 0 when stopped. The only
    /// thing an event costs while tracing is off is loading this.
    enabled: AtomicU32,
    /// The recording session; bumped by every [`Rings::start`].
    epoch: AtomicU32,
    /// The classes the current (or last) session records.
    session_classes: AtomicU32,
    /// When the session started and stopped (0: not stopped).
    started_ns: AtomicU64,
    stopped_ns: AtomicU64,
    /// Whether the session started before any CPU ran a guest (every CPU
    /// then starts out idle).
    from_boot: AtomicU32,
}

/// What the rings held at one moment, per CPU in time order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// The session's classes.
    pub classes: ClassSet,
    /// When it started, in ns.
    pub started_ns: u64,
    /// When it stopped (or when the snapshot was taken, if it still runs).
    pub stopped_ns: u64,
    /// Whether it started at boot.
    pub from_boot: bool,
    /// Per CPU: its events, oldest first, and how many it dropped.
    pub cpus: Vec<(Vec<Event>, u64)>,
}

impl Rings {
    /// Rings of `capacity` events for `cpus` CPUs, not recording. Allocates
    /// (at boot): recording never does.
    /// Host tools only: the hypervisor uses [`Rings::try_new`].
    pub fn new(cpus: usize, capacity: usize) -> Self {
        Self::try_new(cpus, capacity).expect("trace rings: out of memory")
    }

    /// [`Rings::new`], or `None` if the memory cannot be had (a size asked
    /// for on a command line must not take the machine down).
    pub fn try_new(cpus: usize, capacity: usize) -> Option<Self> {
        let mut rings = Vec::new();
        rings.try_reserve_exact(cpus).ok()?;
        for _ in 0..cpus {
            let mut slots = Vec::new();
            slots.try_reserve_exact(capacity).ok()?;
            slots.extend((0..capacity).map(|_| Slot::new()));
            rings.push(Ring {
                reserved: AtomicUsize::new(0),
                dropped: AtomicU64::new(0),
                slots: slots.into_boxed_slice(),
            });
        }
        Some(Self {
            rings: rings.into_boxed_slice(),
            enabled: AtomicU32::new(0),
            epoch: AtomicU32::new(0),
            session_classes: AtomicU32::new(0),
            started_ns: AtomicU64::new(0),
            stopped_ns: AtomicU64::new(0),
            from_boot: AtomicU32::new(0),
        })
    }

    /// How many CPUs have a ring.
    pub fn cpus(&self) -> usize {
        self.rings.len()
    }

    /// Events each ring holds.
    pub fn capacity(&self) -> usize {
        self.rings.first().map_or(0, |r| r.slots.len())
    }

    /// Whether `kind` is being recorded now: callers that must compute an
    /// event's fields (a lookup) ask first.
    #[inline]
    pub fn wants(&self, kind: Kind) -> bool {
        ClassSet(self.enabled.load(Ordering::Relaxed)).contains(kind.class())
    }

    /// Events the rings hold and events they dropped, over every CPU,
    /// without copying them out (recorders may be writing: an estimate).
    pub fn counts(&self) -> (usize, u64) {
        self.rings.iter().fold((0, 0), |(held, dropped), ring| {
            let reserved = ring.reserved.load(Ordering::Relaxed);
            (
                held + reserved.min(ring.slots.len()),
                dropped + ring.dropped.load(Ordering::Relaxed),
            )
        })
    }

    /// The classes being recorded (empty: stopped).
    pub fn recording(&self) -> ClassSet {
        ClassSet(self.enabled.load(Ordering::Relaxed))
    }

    /// Records `event` in `cpu`'s ring, if its class is on. Lock-free,
    /// allocation-free; a full ring counts it as dropped. A CPU without a
    /// ring is ignored.
    #[inline]
    pub fn record(&self, cpu: usize, event: Event) {
        if !self.wants(event.kind) {
            return;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let Some(ring) = self.rings.get(cpu) else {
            return;
        };
        let index = ring.reserved.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = ring.slots.get(index) else {
            ring.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let ids = (u64::from(event.kind as u8) << 56)
            | (u64::from(event.vcpu & VCPU_MASK) << 32)
            | u64::from(event.domain);
        slot.time_ns.store(event.time_ns, Ordering::Relaxed);
        slot.ids.store(ids, Ordering::Relaxed);
        slot.arg.store(event.arg, Ordering::Relaxed);
        slot.stamp.store(stamp(epoch, index), Ordering::Release);
    }

    /// Starts a new session recording `classes` at `now_ns`: the rings are
    /// emptied and their drop counts cleared. `from_boot`: no CPU has run a
    /// guest yet.
    pub fn start(&self, classes: ClassSet, now_ns: u64, from_boot: bool) {
        self.enabled.store(0, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for ring in &self.rings {
            ring.reserved.store(0, Ordering::Relaxed);
            ring.dropped.store(0, Ordering::Relaxed);
        }
        self.started_ns.store(now_ns, Ordering::Relaxed);
        self.stopped_ns.store(0, Ordering::Relaxed);
        self.from_boot
            .store(u32::from(from_boot), Ordering::Relaxed);
        self.session_classes.store(classes.0, Ordering::Relaxed);
        self.enabled.store(classes.0, Ordering::Release);
    }

    /// Stops recording at `now_ns` (the rings keep what they hold). A no-op
    /// when not recording.
    pub fn stop(&self, now_ns: u64) {
        if self.enabled.swap(0, Ordering::AcqRel) != 0 {
            self.stopped_ns.store(now_ns, Ordering::Relaxed);
        }
    }

    /// What the rings hold now, each CPU's events sorted by time (a
    /// recording interrupted by a nested one may take its slot after it).
    /// Taken while recording, the end is `now_ns`. Allocates: not for the
    /// hot path.
    pub fn snapshot(&self, now_ns: u64) -> Snapshot {
        let epoch = self.epoch.load(Ordering::Acquire);
        let stopped = match self.stopped_ns.load(Ordering::Relaxed) {
            0 => now_ns,
            t => t,
        };
        let cpus = self
            .rings
            .iter()
            .map(|ring| {
                let reserved = ring.reserved.load(Ordering::Acquire).min(ring.slots.len());
                let mut torn = 0;
                let mut events = Vec::with_capacity(reserved);
                for (index, slot) in ring.slots[..reserved].iter().enumerate() {
                    if slot.stamp.load(Ordering::Acquire) != stamp(epoch, index) {
                        torn += 1;
                        continue;
                    }
                    let ids = slot.ids.load(Ordering::Relaxed);
                    let Some(kind) = Kind::from_code((ids >> 56) as u8) else {
                        torn += 1;
                        continue;
                    };
                    events.push(Event {
                        time_ns: slot.time_ns.load(Ordering::Relaxed),
                        kind,
                        domain: ids as u32,
                        vcpu: (ids >> 32) as u32 & VCPU_MASK,
                        arg: slot.arg.load(Ordering::Relaxed),
                    });
                }
                events.sort_by_key(|e| e.time_ns);
                (events, ring.dropped.load(Ordering::Relaxed) + torn)
            })
            .collect();
        Snapshot {
            classes: ClassSet(self.session_classes.load(Ordering::Relaxed)),
            started_ns: self.started_ns.load(Ordering::Relaxed),
            stopped_ns: stopped,
            from_boot: self.from_boot.load(Ordering::Relaxed) != 0,
            cpus,
        }
    }
}

/// The stamp of slot `index` in session `epoch`.
fn stamp(epoch: u32, index: usize) -> u64 {
    (u64::from(epoch) << 32) | (index as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::IDLE_DOMAIN;
    use alloc::vec::Vec;

    fn switch(time_ns: u64, domain: u32) -> Event {
        Event {
            time_ns,
            kind: Kind::Switch,
            domain,
            vcpu: 0,
            arg: 0,
        }
    }

    #[test]
    fn nothing_is_recorded_until_started_or_after_stop() {
        let rings = Rings::new(2, 4);
        rings.record(0, switch(1, 1));
        rings.start(ClassSet::DEFAULT, 10, false);
        rings.record(0, switch(11, 1));
        rings.stop(12);
        rings.record(0, switch(13, 2));
        let snap = rings.snapshot(20);
        assert_eq!(snap.cpus[0].0, [switch(11, 1)]);
        assert_eq!((snap.started_ns, snap.stopped_ns), (10, 12));
    }

    #[test]
    fn a_full_ring_drops_and_counts_new_events_and_keeps_the_oldest() {
        let rings = Rings::new(1, 3);
        rings.start(ClassSet::DEFAULT, 0, true);
        for t in 1..=5 {
            rings.record(0, switch(t, 1));
        }
        let snap = rings.snapshot(9);
        let times: Vec<u64> = snap.cpus[0].0.iter().map(|e| e.time_ns).collect();
        assert_eq!(times, [1, 2, 3]);
        assert_eq!(snap.cpus[0].1, 2);
        assert!(snap.from_boot);
    }

    #[test]
    fn a_new_session_forgets_the_old_one_and_its_drops() {
        let rings = Rings::new(1, 2);
        rings.start(ClassSet::DEFAULT, 0, false);
        for t in 1..=4 {
            rings.record(0, switch(t, 1));
        }
        rings.start(ClassSet::DEFAULT, 10, false);
        rings.record(0, switch(11, IDLE_DOMAIN));
        let snap = rings.snapshot(12);
        assert_eq!(snap.cpus[0], (alloc::vec![switch(11, IDLE_DOMAIN)], 0));
    }

    #[test]
    fn classes_not_started_are_not_recorded() {
        let rings = Rings::new(1, 4);
        rings.start(ClassSet::parse("vcpu").unwrap(), 0, false);
        rings.record(0, switch(1, 1));
        rings.record(
            0,
            Event {
                kind: Kind::Wake,
                ..switch(2, 1)
            },
        );
        let snap = rings.snapshot(3);
        assert_eq!(snap.cpus[0].0.len(), 1);
        assert_eq!(snap.cpus[0].0[0].kind, Kind::Wake);
    }

    #[test]
    fn events_recorded_out_of_order_come_back_sorted_and_large_fields_survive() {
        let rings = Rings::new(1, 4);
        rings.start(ClassSet::ALL, 0, false);
        let late = Event {
            time_ns: 9,
            kind: Kind::GuestExit,
            domain: u32::MAX - 1,
            vcpu: VCPU_MASK,
            arg: u64::MAX,
        };
        rings.record(0, late);
        rings.record(0, switch(4, 2));
        assert_eq!(rings.snapshot(10).cpus[0].0, [switch(4, 2), late]);
    }

    #[test]
    fn a_size_that_cannot_be_allocated_is_refused_not_fatal() {
        assert!(Rings::try_new(2, usize::MAX / 4).is_none());
        let rings = Rings::try_new(2, 8).unwrap();
        assert_eq!((rings.cpus(), rings.capacity()), (2, 8));
    }

    #[test]
    fn cpus_without_a_ring_are_ignored() {
        let rings = Rings::new(1, 1);
        rings.start(ClassSet::DEFAULT, 0, false);
        rings.record(5, switch(1, 1));
        assert_eq!(rings.snapshot(2).cpus.len(), 1);
    }

    #[test]
    fn concurrent_recorders_on_one_ring_lose_nothing_below_capacity() {
        let rings = std::sync::Arc::new(Rings::new(1, 4000));
        rings.start(ClassSet::DEFAULT, 0, false);
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let rings = rings.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        rings.record(0, switch(i, t));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let snap = rings.snapshot(2000);
        assert_eq!(snap.cpus[0].0.len(), 4000);
        assert_eq!(snap.cpus[0].1, 0);
        for t in 0..4 {
            assert_eq!(
                snap.cpus[0].0.iter().filter(|e| e.domain == t).count(),
                1000
            );
        }
    }
}
