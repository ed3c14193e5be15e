//! The table of built domains, one lock per domain.
//!
//! Every guest exit locks its domain (its vGIC, its devices) once or twice,
//! so one lock around all domains made every exit of every domain on every
//! CPU queue behind the others: a global lock on the hottest path of the
//! machine, worse on an 80-core host than the scheduler's. Here a domain is
//! found without a lock (its id's home slot, `id % N`, then the next ones)
//! and only its own slot is locked; exits of different domains never wait
//! for each other.
//!
//! Domain ids are never reused (the scheduler counts them up), so a slot's
//! id, read again under its lock, says whether the slot still holds the
//! domain that was looked up: a domain removed and its slot refilled
//! between the two is told apart.
//!
//! Architecture-independent and host-tested; each architecture's domain
//! module keeps one `static` table of its `Domain`.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use platform::sync::Mutex;
use sched::DomainId;

/// A slot's id while it holds no domain.
const FREE: u32 = 0;
/// A slot's id while an insertion fills it (no domain has id `u32::MAX`:
/// [`DomainTable::insert`] refuses it).
const FILLING: u32 = u32::MAX;

struct Slot<T> {
    /// The id of the domain the slot holds, [`FREE`] or [`FILLING`].
    /// Written only with the slot's lock held (but for claiming a free
    /// slot), read without it to find a domain.
    id: AtomicU32,
    domain: Mutex<Option<Box<T>>>,
}

impl<T> Slot<T> {
    const fn new() -> Self {
        Self {
            id: AtomicU32::new(FREE),
            domain: Mutex::new(None),
        }
    }
}

/// Why a domain was not added.
#[derive(Debug, PartialEq, Eq)]
pub enum InsertError {
    /// All `N` slots hold a domain.
    Full {
        /// The table's size.
        capacity: usize,
    },
    /// Id 0 or `u32::MAX`, or a domain with this id is in the table.
    BadId(DomainId),
}

impl core::fmt::Display for InsertError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Full { capacity } => write!(f, "all {capacity} domain slots are in use"),
            Self::BadId(id) => write!(f, "domain id {} is unusable or taken", id.0),
        }
    }
}

/// Up to `N` domains of type `T`, each behind its own lock.
///
/// The caller masks interrupts around every call when exit or interrupt
/// handlers may take the same lock (as with any spinlock here).
pub struct DomainTable<T, const N: usize> {
    slots: [Slot<T>; N],
}

impl<T, const N: usize> Default for DomainTable<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> DomainTable<T, N> {
    /// An empty table.
    pub const fn new() -> Self {
        Self {
            slots: [const { Slot::new() }; N],
        }
    }

    /// The slots in the order a search for `id` visits them: its home
    /// slot first.
    fn probe(&self, id: u32) -> impl Iterator<Item = &Slot<T>> {
        let home = id as usize % N;
        (0..N).map(move |step| &self.slots[(home + step) % N])
    }

    /// Adds domain `id` (boxed by the caller: a domain is large, and the
    /// table keeps it where it was allocated). Refused (the domain handed
    /// back) when the table is full or the id is unusable or already
    /// present.
    pub fn insert(&self, id: DomainId, domain: Box<T>) -> Result<(), (InsertError, Box<T>)> {
        if id.0 == FREE || id.0 == FILLING || self.contains(id) {
            return Err((InsertError::BadId(id), domain));
        }
        for slot in self.probe(id.0) {
            if slot
                .id
                .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let mut held = slot.domain.lock();
                *held = Some(domain);
                slot.id.store(id.0, Ordering::Release);
                return Ok(());
            }
        }
        Err((InsertError::Full { capacity: N }, domain))
    }

    /// Whether domain `id` is in the table.
    pub fn contains(&self, id: DomainId) -> bool {
        self.probe(id.0)
            .any(|slot| slot.id.load(Ordering::Acquire) == id.0)
    }

    /// Runs `f` on domain `id` with its lock held; `None` if there is no
    /// such domain (never built, or removed).
    pub fn with<R>(&self, id: DomainId, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.with_between(id, || {}, f)
    }

    /// [`DomainTable::with`], running `between` after the slot was found
    /// and before it is locked: the window the tests fill with a removal.
    /// Inlined: every guest exit calls it two or three times, and out of
    /// line its frame and argument moves cost about 40 instructions an
    /// exit (micro-bench under a TB-counting plugin).
    #[inline(always)]
    fn with_between<R>(
        &self,
        id: DomainId,
        between: impl FnOnce(),
        f: impl FnOnce(&mut T) -> R,
    ) -> Option<R> {
        let slot = self
            .probe(id.0)
            .find(|slot| slot.id.load(Ordering::Acquire) == id.0)?;
        between();
        let mut held = slot.domain.lock();
        // Removed (and perhaps the slot refilled) since it was found.
        if slot.id.load(Ordering::Relaxed) != id.0 {
            return None;
        }
        held.as_deref_mut().map(f)
    }

    /// Takes domain `id` out of the table.
    pub fn remove(&self, id: DomainId) -> Option<T> {
        let slot = self
            .probe(id.0)
            .find(|slot| slot.id.load(Ordering::Acquire) == id.0)?;
        let mut held = slot.domain.lock();
        if slot.id.load(Ordering::Relaxed) != id.0 {
            return None;
        }
        let domain = held.take();
        slot.id.store(FREE, Ordering::Release);
        domain.map(|boxed| *boxed)
    }

    /// The ids of the domains in the table, in creation order (ids count
    /// up).
    pub fn ids(&self) -> Vec<DomainId> {
        let mut ids: Vec<DomainId> = self
            .slots
            .iter()
            .map(|slot| slot.id.load(Ordering::Acquire))
            .filter(|&id| id != FREE && id != FILLING)
            .map(DomainId)
            .collect();
        ids.sort_unstable_by_key(|id| id.0);
        ids
    }

    /// `f` on every domain, one lock at a time, in creation order; the
    /// results collected.
    pub fn map_each<R>(&self, mut f: impl FnMut(&mut T) -> R) -> Vec<R> {
        self.ids()
            .into_iter()
            .filter_map(|id| self.with(id, &mut f))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_found_by_id_and_removed() {
        let table: DomainTable<&str, 4> = DomainTable::new();
        assert_eq!(table.insert(DomainId(1), Box::new("one")), Ok(()));
        assert_eq!(table.insert(DomainId(2), Box::new("two")), Ok(()));
        assert_eq!(table.with(DomainId(1), |d| *d), Some("one"));
        assert_eq!(table.with(DomainId(3), |d| *d), None);
        assert_eq!(table.ids(), [DomainId(1), DomainId(2)]);
        assert_eq!(table.remove(DomainId(1)), Some("one"));
        assert_eq!(table.with(DomainId(1), |d| *d), None);
        assert_eq!(table.remove(DomainId(1)), None);
        assert_eq!(table.ids(), [DomainId(2)]);
    }

    #[test]
    fn ids_sharing_a_home_slot_both_fit_and_a_full_table_refuses() {
        let table: DomainTable<u32, 2> = DomainTable::new();
        // 1 and 3 share home slot 1.
        assert_eq!(table.insert(DomainId(1), Box::new(1)), Ok(()));
        assert_eq!(table.insert(DomainId(3), Box::new(3)), Ok(()));
        assert_eq!(table.with(DomainId(3), |d| *d), Some(3));
        assert_eq!(
            table.insert(DomainId(5), Box::new(5)),
            Err((InsertError::Full { capacity: 2 }, Box::new(5)))
        );
        // A freed slot is used again, and a domain further along its
        // probe is still found past it.
        assert_eq!(table.remove(DomainId(1)), Some(1));
        assert_eq!(table.with(DomainId(3), |d| *d), Some(3));
        assert_eq!(table.insert(DomainId(5), Box::new(5)), Ok(()));
        assert_eq!(table.ids(), [DomainId(3), DomainId(5)]);
        assert_eq!(table.map_each(|d| *d * 10), [30, 50]);
    }

    #[test]
    fn unusable_and_duplicate_ids_are_refused() {
        let table: DomainTable<u32, 4> = DomainTable::new();
        for id in [0, u32::MAX] {
            assert_eq!(
                table.insert(DomainId(id), Box::new(7)),
                Err((InsertError::BadId(DomainId(id)), Box::new(7)))
            );
        }
        assert_eq!(table.insert(DomainId(2), Box::new(2)), Ok(()));
        assert_eq!(
            table.insert(DomainId(2), Box::new(9)),
            Err((InsertError::BadId(DomainId(2)), Box::new(9)))
        );
        assert_eq!(table.with(DomainId(2), |d| *d), Some(2));
    }

    #[test]
    fn a_domain_removed_between_lookup_and_lock_is_not_the_one_run() {
        let table: DomainTable<u32, 1> = DomainTable::new();
        table.insert(DomainId(1), Box::new(1)).unwrap();
        let refill = || {
            assert_eq!(table.remove(DomainId(1)), Some(1));
            table.insert(DomainId(2), Box::new(2)).unwrap();
        };
        assert_eq!(table.with_between(DomainId(1), refill, |d| *d), None);
        assert_eq!(table.with(DomainId(2), |d| *d), Some(2));
    }

    /// Lookups racing removals and refills of the same slots never run
    /// `f` on another domain than the one asked for, and two domains'
    /// locks are held at once (the point of the table).
    #[test]
    fn racing_lookups_only_ever_see_the_domain_they_asked_for() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;

        // Two slots: every new id lands in a slot another id just left.
        let table: Arc<DomainTable<u32, 2>> = Arc::new(DomainTable::new());
        table.insert(DomainId(1), Box::new(1)).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let churn = {
            let (table, done) = (Arc::clone(&table), Arc::clone(&done));
            std::thread::spawn(move || {
                for id in 2..20_000u32 {
                    table.insert(DomainId(id), Box::new(id)).unwrap();
                    assert_eq!(table.remove(DomainId(id)), Some(id));
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut seen = 0u64;
        while !done.load(Ordering::Acquire) {
            for id in [1u32, 2, 3, 1000, 5000] {
                if let Some(value) = table.with(DomainId(id), |d| *d) {
                    assert_eq!(value, id, "looked up {id}, ran on {value}");
                    seen += 1;
                }
            }
            // Domain 1's lock held while another slot's is taken.
            table.with(DomainId(1), |_| {
                let _ = table.with(DomainId(2), |d| *d);
            });
        }
        churn.join().unwrap();
        assert!(seen > 0);
    }
}
