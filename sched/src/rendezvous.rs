//! The lock-free barrier at the heart of synchronised switching.
//!
//! When the scheduler picks a new unit for a multi-CPU resource, every CPU of
//! the resource must leave its previous context before any of them enters the
//! new one. The deciding CPU (holding the system lock) opens a *generation* of
//! the resource's cell with [`RendezvousTable::begin`] and kicks its siblings.
//! Every CPU first saves its guest context (switches to idle), then
//! [`arrives`](RendezvousTable::arrive) outside the lock and waits until all
//! expected CPUs have arrived. Only then does it ask the system (under the
//! lock) which context to load.
//!
//! One 64-bit word per resource holds the whole state, so every transition is a
//! single compare-and-swap and there is no second counter to forget to reset
//! (the Xen series' shutdown hang: `rendezvous_in_cnt` reset but
//! `rendezvous_out_cnt` left set, siblings spinning forever in
//! `sched_context_switched`):
//!
//! ```text
//!  63            32   31        30..16        15..0
//! [ generation     | aborted | expected     | arrived ]
//! ```
//!
//! * `arrive` increments `arrived` only while the generation matches and the
//!   rendezvous is not aborted; the arrival that makes `arrived == expected`
//!   completes it.
//! * `abort` sets `aborted` only while `arrived < expected`. So a generation
//!   ends exactly one way, complete or aborted, and every CPU sees the same end.
//! * A new `begin` supersedes an old generation; CPUs still waiting on it see
//!   [`Poll::Superseded`] and ask the system again.
//!
//! Every wait is bounded ([`RendezvousTable::wait`]): past its bound the waiter
//! aborts the generation, reports which CPUs never arrived, and everyone who did
//! arrive falls back to idle. Aborting is also how the system cancels a
//! rendezvous when a CPU goes offline, a resource leaves its pool, or the
//! scheduler stops (suspend/shutdown).

use alloc::vec::Vec;

use crate::cpuset::CpuSet;
use crate::scheduler::{ResourceId, Time};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

const ARRIVED_MASK: u64 = 0xffff;
const EXPECTED_SHIFT: u32 = 16;
const EXPECTED_MASK: u64 = 0x7fff;
const ABORTED_BIT: u64 = 1 << 31;
const GENERATION_SHIFT: u32 = 32;

/// The most CPUs one resource may have (the width of the `expected` field).
pub const MAX_RESOURCE_CPUS: usize = EXPECTED_MASK as usize;

/// A CPU's admission to one generation of a resource's rendezvous. Handed out
/// by the system under its lock; used without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// The resource (its cell is at its master CPU).
    pub resource: ResourceId,
    /// The generation this ticket admits to.
    pub generation: u32,
    /// The CPU holding the ticket.
    pub cpu: usize,
    /// Every CPU expected to arrive.
    pub expected: CpuSet,
    /// How long to wait for the others before giving up, in ns.
    pub timeout_ns: Time,
}

/// The state of a generation as one CPU sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Some expected CPUs have not arrived yet.
    Waiting,
    /// Every expected CPU has arrived: all left their previous context.
    Complete,
    /// The generation was aborted (timeout, CPU offline, resource removed).
    Aborted,
    /// A newer generation replaced this one.
    Superseded,
}

/// How a bounded wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every expected CPU arrived.
    Complete,
    /// Someone else aborted the generation.
    Aborted,
    /// A newer generation replaced this one.
    Superseded,
    /// This CPU's wait ran past its bound and it aborted the generation.
    TimedOut {
        /// The expected CPUs that had not arrived.
        missing: CpuSet,
    },
}

/// What [`RendezvousTable::abort`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortResult {
    /// This call aborted the generation.
    Aborted,
    /// It had already completed; nothing to abort.
    AlreadyComplete,
    /// It had already been aborted.
    AlreadyAborted,
    /// The cell is at another generation.
    Stale,
}

fn pack(generation: u32, aborted: bool, expected: u32, arrived: u32) -> u64 {
    (u64::from(generation) << GENERATION_SHIFT)
        | if aborted { ABORTED_BIT } else { 0 }
        | ((u64::from(expected) & EXPECTED_MASK) << EXPECTED_SHIFT)
        | (u64::from(arrived) & ARRIVED_MASK)
}

#[derive(Clone, Copy)]
struct Unpacked {
    generation: u32,
    aborted: bool,
    expected: u32,
    arrived: u32,
}

fn unpack(word: u64) -> Unpacked {
    Unpacked {
        generation: (word >> GENERATION_SHIFT) as u32,
        aborted: word & ABORTED_BIT != 0,
        expected: ((word >> EXPECTED_SHIFT) & EXPECTED_MASK) as u32,
        arrived: (word & ARRIVED_MASK) as u32,
    }
}

impl Unpacked {
    fn poll(self, generation: u32) -> Poll {
        if self.generation != generation {
            Poll::Superseded
        } else if self.aborted {
            Poll::Aborted
        } else if self.arrived >= self.expected {
            Poll::Complete
        } else {
            Poll::Waiting
        }
    }
}

/// One rendezvous cell per possible resource master CPU, and one arrival
/// record per CPU (to name the CPUs that did not arrive). Sized once at boot;
/// nothing here allocates afterwards.
pub struct RendezvousTable {
    cells: Vec<AtomicU64>,
    arrived_generation: Vec<AtomicU32>,
}

impl RendezvousTable {
    /// A table for CPUs `0..cpus`. Generation 0 is never used, so a fresh cell
    /// matches no ticket.
    pub fn new(cpus: usize) -> Self {
        Self {
            cells: (0..cpus).map(|_| AtomicU64::new(0)).collect(),
            arrived_generation: (0..cpus).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn cell(&self, resource: ResourceId) -> Option<&AtomicU64> {
        self.cells.get(resource.0)
    }

    /// Opens `generation` on `resource` for `expected` CPUs, superseding
    /// whatever the cell held. Called by the system under its lock.
    pub fn begin(&self, resource: ResourceId, generation: u32, expected: usize) {
        if let Some(cell) = self.cell(resource) {
            let expected = expected.min(MAX_RESOURCE_CPUS) as u32;
            cell.store(pack(generation, false, expected, 0), Ordering::SeqCst);
        }
    }

    /// Records that `ticket.cpu` has left its previous context. Never waits.
    pub fn arrive(&self, ticket: &Ticket) -> Poll {
        let Some(cell) = self.cell(ticket.resource) else {
            return Poll::Aborted;
        };
        let mut word = cell.load(Ordering::SeqCst);
        loop {
            let state = unpack(word);
            match state.poll(ticket.generation) {
                Poll::Waiting => {}
                other => return other,
            }
            let next = pack(state.generation, false, state.expected, state.arrived + 1);
            match cell.compare_exchange(word, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    if let Some(slot) = self.arrived_generation.get(ticket.cpu) {
                        slot.store(ticket.generation, Ordering::SeqCst);
                    }
                    return unpack(next).poll(ticket.generation);
                }
                Err(current) => word = current,
            }
        }
    }

    /// The generation's state, without changing it.
    pub fn poll(&self, ticket: &Ticket) -> Poll {
        match self.cell(ticket.resource) {
            Some(cell) => unpack(cell.load(Ordering::SeqCst)).poll(ticket.generation),
            None => Poll::Aborted,
        }
    }

    /// Aborts `generation` on `resource` unless it already completed.
    pub fn abort(&self, resource: ResourceId, generation: u32) -> AbortResult {
        let Some(cell) = self.cell(resource) else {
            return AbortResult::Stale;
        };
        let mut word = cell.load(Ordering::SeqCst);
        loop {
            let state = unpack(word);
            match state.poll(generation) {
                Poll::Superseded => return AbortResult::Stale,
                Poll::Aborted => return AbortResult::AlreadyAborted,
                Poll::Complete => return AbortResult::AlreadyComplete,
                Poll::Waiting => {}
            }
            let next = word | ABORTED_BIT;
            match cell.compare_exchange(word, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return AbortResult::Aborted,
                Err(current) => word = current,
            }
        }
    }

    /// The expected CPUs of `ticket` that have not arrived at its generation.
    pub fn missing(&self, ticket: &Ticket) -> CpuSet {
        ticket
            .expected
            .iter()
            .filter(|&cpu| {
                self.arrived_generation
                    .get(cpu)
                    .is_none_or(|slot| slot.load(Ordering::SeqCst) != ticket.generation)
            })
            .collect()
    }

    /// Arrives, then busy-waits until the generation completes, is aborted or
    /// superseded, or `ticket.timeout_ns` passes on `now` (then aborts it and
    /// reports the CPUs that never arrived). Never waits longer than the bound.
    /// `relax` runs between two looks (the platform's spinning hint).
    pub fn wait(
        &self,
        ticket: &Ticket,
        now: &mut dyn FnMut() -> Time,
        relax: &dyn Fn(),
    ) -> Outcome {
        let start = now();
        let mut state = self.arrive(ticket);
        loop {
            match state {
                Poll::Complete => return Outcome::Complete,
                Poll::Aborted => return Outcome::Aborted,
                Poll::Superseded => return Outcome::Superseded,
                Poll::Waiting => {}
            }
            if now().saturating_sub(start) >= ticket.timeout_ns {
                return match self.abort(ticket.resource, ticket.generation) {
                    AbortResult::Aborted => Outcome::TimedOut {
                        missing: self.missing(ticket),
                    },
                    AbortResult::AlreadyComplete => Outcome::Complete,
                    AbortResult::AlreadyAborted => Outcome::Aborted,
                    AbortResult::Stale => Outcome::Superseded,
                };
            }
            relax();
            state = self.poll(ticket);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ticket(cpu: usize, generation: u32, expected: &[usize]) -> Ticket {
        Ticket {
            resource: ResourceId(0),
            generation,
            cpu,
            expected: expected.iter().copied().collect(),
            timeout_ns: 10,
        }
    }

    #[test]
    fn completes_when_all_arrive() {
        let table = RendezvousTable::new(4);
        table.begin(ResourceId(0), 1, 2);
        assert_eq!(table.arrive(&ticket(0, 1, &[0, 1])), Poll::Waiting);
        assert_eq!(
            table
                .missing(&ticket(0, 1, &[0, 1]))
                .iter()
                .collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(table.arrive(&ticket(1, 1, &[0, 1])), Poll::Complete);
        assert_eq!(table.poll(&ticket(0, 1, &[0, 1])), Poll::Complete);
        assert_eq!(table.abort(ResourceId(0), 1), AbortResult::AlreadyComplete);
    }

    #[test]
    fn abort_is_final_and_late_arrivals_see_it() {
        let table = RendezvousTable::new(4);
        table.begin(ResourceId(0), 7, 3);
        assert_eq!(table.arrive(&ticket(0, 7, &[0, 1, 2])), Poll::Waiting);
        assert_eq!(table.abort(ResourceId(0), 7), AbortResult::Aborted);
        assert_eq!(table.abort(ResourceId(0), 7), AbortResult::AlreadyAborted);
        assert_eq!(table.arrive(&ticket(1, 7, &[0, 1, 2])), Poll::Aborted);
        assert_eq!(table.poll(&ticket(0, 7, &[0, 1, 2])), Poll::Aborted);
    }

    #[test]
    fn new_generation_supersedes_old_tickets() {
        let table = RendezvousTable::new(2);
        table.begin(ResourceId(0), 1, 2);
        table.arrive(&ticket(0, 1, &[0, 1]));
        table.begin(ResourceId(0), 2, 2);
        assert_eq!(table.poll(&ticket(0, 1, &[0, 1])), Poll::Superseded);
        assert_eq!(table.arrive(&ticket(1, 1, &[0, 1])), Poll::Superseded);
        assert_eq!(table.abort(ResourceId(0), 1), AbortResult::Stale);
    }

    #[test]
    fn bounded_wait_times_out_and_names_missing_cpus() {
        let table = RendezvousTable::new(4);
        table.begin(ResourceId(0), 3, 3);
        table.arrive(&ticket(1, 3, &[0, 1, 2]));
        let mut clock = 0;
        let outcome = table.wait(
            &ticket(0, 3, &[0, 1, 2]),
            &mut || {
                clock += 1;
                clock
            },
            &crate::sync::spin_hint,
        );
        assert_eq!(
            outcome,
            Outcome::TimedOut {
                missing: CpuSet::single(2)
            }
        );
        // The straggler arrives late and sees the abort instead of hanging.
        assert_eq!(table.arrive(&ticket(2, 3, &[0, 1, 2])), Poll::Aborted);
    }

    #[test]
    fn single_cpu_resource_completes_on_arrival() {
        let table = RendezvousTable::new(1);
        table.begin(ResourceId(0), 9, 1);
        let mut clock = 0;
        assert_eq!(
            table.wait(
                &ticket(0, 9, &[0]),
                &mut || {
                    clock += 1;
                    clock
                },
                &crate::sync::spin_hint,
            ),
            Outcome::Complete
        );
    }

    #[test]
    fn out_of_range_resource_is_aborted_not_a_panic() {
        let table = RendezvousTable::new(1);
        let mut t = ticket(0, 1, &[0]);
        t.resource = ResourceId(5);
        table.begin(t.resource, 1, 1);
        assert_eq!(table.arrive(&t), Poll::Aborted);
        assert_eq!(table.abort(t.resource, 1), AbortResult::Stale);
    }
}
