//! `rt`: the RTDS real-time scheduler, after Xen's `sched_rt.c`.
//!
//! Every unit has a budget and a period (from [`SchedParams::budget_ns`] and
//! [`SchedParams::period_ns`]). At each period boundary its budget is refilled and
//! its deadline moves to the end of the new period. The pool runs **global EDF**:
//! any resource may run any unit in its hard affinity, and the runnable units with
//! the earliest deadlines run. A unit that used its budget waits for its next
//! replenishment, unless it has `extratime`: then, as in Xen, its budget is refilled
//! at once but its *priority level* goes up by one, so it only runs when no unit at
//! a lower level (that is, with budget left in its period) wants the resource.
//!
//! Queues (all sized in `insert_unit`, so the hot path never allocates):
//! - `runq`: runnable units that are neither running nor depleted, as a binary heap
//!   ordered by `(priority level, deadline, unit)`;
//! - `replq`: every awake unit, ordered by its next replenishment (its deadline).
//!
//! There is no timer: the trait's slices stand in for Xen's replenishment timer. A
//! slice ends at the running unit's budget exhaustion or at the pool's next
//! replenishment, whichever comes first; an idle resource with awake units asks to
//! be rescheduled at that replenishment. Limitation: [`Scheduler::do_schedule`]
//! cannot tickle *other* resources, so when a decision on one resource creates a
//! replenishment earlier than another resource's slice end (a unit just depleted),
//! that other resource notices it at its own next decision, at most one budget or
//! period of its running unit later. Wakes tickle exactly (idle resource first,
//! else the resource running the latest-deadline unit).
//!
//! Sibling fill-ins ([`Scheduler::pick_sibling`]: the earliest-deadline queued
//! unit of the leader's domain placed on the resource) burn their own budget but
//! share the leader's slice, so one may overrun its budget until the next
//! decision, which charges it in full.

use alloc::vec::Vec;

use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};

/// Shortest accepted period (100 us): shorter periods would spend more time in
/// the scheduler than in the guest.
pub const MIN_PERIOD_NS: Time = 100_000;
/// Longest accepted period (10 s).
pub const MAX_PERIOD_NS: Time = 10_000_000_000;
/// Smallest accepted budget (10 us, Xen's `RTDS_MIN_BUDGET`).
pub const MIN_BUDGET_NS: Time = 10_000;

/// Checks RTDS parameters: `MIN_BUDGET_NS <= budget_ns <= period_ns` and
/// `MIN_PERIOD_NS <= period_ns <= MAX_PERIOD_NS`. Other fields are not used by rt.
pub fn validate_params(params: &SchedParams) -> Result<(), SchedError> {
    if params.period_ns < MIN_PERIOD_NS || params.period_ns > MAX_PERIOD_NS {
        return Err(SchedError::InvalidParam {
            param: "period_ns",
            expected: "100 us to 10 s (100000..=10000000000 ns)",
        });
    }
    if params.budget_ns < MIN_BUDGET_NS {
        return Err(SchedError::InvalidParam {
            param: "budget_ns",
            expected: "at least 10 us (10000 ns)",
        });
    }
    if params.budget_ns > params.period_ns {
        return Err(SchedError::InvalidParam {
            param: "budget_ns",
            expected: "at most period_ns",
        });
    }
    Ok(())
}

/// Marks an empty slot in the heap position tables and unit links.
const ABSENT: u32 = u32::MAX;
/// Marks a CPU that is not the master of one of the pool's resources.
const NO_RESOURCE: u16 = u16::MAX;

/// A binary min-heap of `(key, unit slot)` with a position table, so that any
/// unit can be removed or re-keyed in O(log n). Written by hand because
/// `alloc::collections::BinaryHeap` cannot remove an arbitrary element; unlike
/// the shared `IndexedHeap` it keeps each key *inside* its entry, so sifting
/// reads one contiguous array (24 KiB for 1024 units) instead of touching a
/// unit record (hundreds of bytes each, with their CPU sets) per comparison:
/// replenishments re-key O(units / period) entries per unit of time.
#[derive(Debug)]
struct SlotHeap<K> {
    heap: Vec<(K, u32)>,
    /// `pos[slot]` = index of `slot` in `heap`, or `ABSENT`.
    pos: Vec<u32>,
}

impl<K> Default for SlotHeap<K> {
    fn default() -> Self {
        Self {
            heap: Vec::new(),
            pos: Vec::new(),
        }
    }
}

impl<K: Ord + Copy> SlotHeap<K> {
    /// Makes room for `slot` so that `insert` never allocates.
    fn reserve_slot(&mut self, slot: usize) {
        if self.pos.len() <= slot {
            self.pos.resize(slot + 1, ABSENT);
        }
        let wanted = self.pos.len();
        if self.heap.capacity() < wanted {
            self.heap.reserve(wanted - self.heap.len());
        }
    }

    fn contains(&self, slot: u32) -> bool {
        self.pos.get(slot as usize).is_some_and(|&p| p != ABSENT)
    }

    /// The smallest entry.
    fn peek(&self) -> Option<(K, u32)> {
        self.heap.first().copied()
    }

    /// All entries, in heap order.
    fn entries(&self) -> &[(K, u32)] {
        &self.heap
    }

    /// The key `slot` is queued with.
    fn key(&self, slot: u32) -> Option<K> {
        let index = *self.pos.get(slot as usize)?;
        self.heap.get(index as usize).map(|&(key, _)| key)
    }

    /// Adds `slot` with `key`, or moves it to `key` if it is already in.
    fn insert(&mut self, slot: u32, key: K) {
        let Some(&index) = self.pos.get(slot as usize) else {
            return;
        };
        let index = if index == ABSENT {
            let index = self.heap.len();
            self.heap.push((key, slot));
            self.pos[slot as usize] = index as u32;
            index
        } else {
            self.heap[index as usize].0 = key;
            self.sift_down(index as usize)
        };
        self.sift_up(index);
    }

    fn remove(&mut self, slot: u32) -> bool {
        if !self.contains(slot) {
            return false;
        }
        let index = self.pos[slot as usize] as usize;
        let last = self.heap.len() - 1;
        self.swap(index, last);
        self.heap.pop();
        self.pos[slot as usize] = ABSENT;
        if index < self.heap.len() {
            let index = self.sift_down(index);
            self.sift_up(index);
        }
        true
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1 as usize] = a as u32;
        self.pos[self.heap[b].1 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut index: usize) {
        while index > 0 {
            let parent = (index - 1) / 2;
            if self.heap[index].0 < self.heap[parent].0 {
                self.swap(index, parent);
                index = parent;
            } else {
                break;
            }
        }
    }

    /// Returns where the entry ended up.
    fn sift_down(&mut self, mut index: usize) -> usize {
        let len = self.heap.len();
        loop {
            let left = 2 * index + 1;
            if left >= len {
                return index;
            }
            let right = left + 1;
            let smaller = if right < len && self.heap[right].0 < self.heap[left].0 {
                right
            } else {
                left
            };
            if self.heap[smaller].0 < self.heap[index].0 {
                self.swap(index, smaller);
                index = smaller;
            } else {
                return index;
            }
        }
    }
}

/// Per-unit RTDS state (Xen's `struct rt_unit`).
#[derive(Clone, Debug)]
struct RtUnit {
    domain: DomainId,
    budget_ns: Time,
    period_ns: Time,
    extratime: bool,
    /// Budget left in the current period; 0 = depleted.
    cur_budget_ns: Time,
    /// End of the current period: the EDF deadline and the next replenishment.
    cur_deadline: Time,
    /// 0 while the unit has budget of its own; +1 each time extratime refills it.
    priority_level: u32,
    /// When it entered the run queue: equal deadlines run first-come first-served
    /// (as Xen's list insertion does), so ties rotate instead of starving a unit.
    queued_seq: u64,
    /// When it was last put on a CPU (or last accounted).
    last_start: Time,
    /// Runnable as far as the framework is concerned (between wake and sleep).
    awake: bool,
    /// The resource it runs on, as leader or sibling fill-in.
    running_on: Option<ResourceId>,
    /// It gave up its slice; the next decision prefers another unit.
    yielded: bool,
    /// The resource it is placed on (its `unit->res`); it is on that resource's list.
    resource: ResourceId,
    /// Links in its resource's list of placed units.
    prev: u32,
    next: u32,
    hard_affinity: CpuSet,
    soft_affinity: CpuSet,
    stats: UnitStats,
}

impl RtUnit {
    /// EDF order: lower level first, then earlier deadline, then first queued.
    fn key(&self, slot: u32) -> RunqKey {
        (
            self.priority_level,
            self.cur_deadline,
            self.queued_seq,
            slot,
        )
    }

    /// Xen's `rt_update_deadline`: move to the period holding `now`, refill.
    fn replenish(&mut self, now: Time) {
        if now >= self.cur_deadline {
            let periods = (now - self.cur_deadline) / self.period_ns + 1;
            self.cur_deadline = self
                .cur_deadline
                .saturating_add(periods.saturating_mul(self.period_ns));
        }
        self.cur_budget_ns = self.budget_ns;
        self.priority_level = 0;
    }

    /// Xen's `burn_budget`: charge the time run since `last_start`.
    fn burn(&mut self, now: Time) {
        let ran = now.saturating_sub(self.last_start);
        self.last_start = now;
        self.stats.runtime_ns = self.stats.runtime_ns.saturating_add(ran);
        if ran < self.cur_budget_ns {
            self.cur_budget_ns -= ran;
        } else if self.extratime {
            self.priority_level = self.priority_level.saturating_add(1);
            self.cur_budget_ns = self.budget_ns;
        } else {
            self.cur_budget_ns = 0;
        }
    }
}

/// Per-resource state.
#[derive(Debug)]
struct RtResource {
    info: ResourceInfo,
    /// Units running here since the last decision: the leader first, then
    /// sibling fill-ins. Capacity = number of CPUs.
    running: Vec<u32>,
    /// Head of the list of units placed on this resource.
    placed_head: u32,
    placed_count: usize,
    /// Already asked to reschedule; don't pick it again for another wake.
    tickled: bool,
}

impl RtResource {
    fn leader(&self) -> Option<u32> {
        self.running.first().copied()
    }
}

/// The RTDS scheduler of one cpupool. Build it with [`Rt::new`] (or through
/// `schedulers::create("rt")`). It has no pool parameters: everything is per unit.
#[derive(Debug)]
pub struct Rt {
    units: Vec<Option<RtUnit>>,
    resources: Vec<RtResource>,
    /// Master CPU -> index in `resources`.
    resource_index: Vec<u16>,
    runq: SlotHeap<RunqKey>,
    replq: SlotHeap<Time>,
    /// Next run-queue arrival number.
    next_seq: u64,
}

impl Default for Rt {
    fn default() -> Self {
        Self::new()
    }
}

/// Run-queue order: (priority level, deadline, enqueue sequence, unit).
type RunqKey = (u32, Time, u64, u32);

impl Rt {
    /// An empty scheduler: no resources, no units.
    pub fn new() -> Self {
        Self {
            units: Vec::new(),
            resources: Vec::new(),
            resource_index: alloc::vec![NO_RESOURCE; MAX_CPUS],
            runq: SlotHeap::default(),
            replq: SlotHeap::default(),
            next_seq: 0,
        }
    }

    /// The unit's current deadline (end of its period), for tests and tools.
    pub fn deadline(&self, unit: UnitId) -> Option<Time> {
        self.unit(unit.0).map(|u| u.cur_deadline)
    }

    /// The unit's priority level: 0 with budget of its own, >0 in extratime.
    pub fn priority_level(&self, unit: UnitId) -> Option<u32> {
        self.unit(unit.0).map(|u| u.priority_level)
    }

    fn unit(&self, slot: u32) -> Option<&RtUnit> {
        self.units.get(slot as usize).and_then(Option::as_ref)
    }

    fn unit_mut(&mut self, slot: u32) -> Option<&mut RtUnit> {
        self.units.get_mut(slot as usize).and_then(Option::as_mut)
    }

    fn index_of(&self, id: ResourceId) -> Option<usize> {
        let index = *self.resource_index.get(id.0)?;
        (index != NO_RESOURCE).then_some(index as usize)
    }

    /// The unit's EDF key (the one it is queued with, if queued).
    fn runq_key(&self, slot: u32) -> RunqKey {
        self.unit(slot)
            .map_or((u32::MAX, Time::MAX, u64::MAX, slot), |u| u.key(slot))
    }

    /// Queues the unit, or re-sorts it after its key changed.
    fn runq_push(&mut self, slot: u32) {
        let key = self.runq_key(slot);
        self.runq.insert(slot, key);
    }

    fn runq_remove(&mut self, slot: u32) -> bool {
        self.runq.remove(slot)
    }

    /// Adds the unit to the replenishment queue, or re-sorts it.
    fn replq_push(&mut self, slot: u32) {
        if let Some(deadline) = self.unit(slot).map(|u| u.cur_deadline) {
            self.replq.insert(slot, deadline);
        }
    }

    fn replq_remove(&mut self, slot: u32) -> bool {
        self.replq.remove(slot)
    }

    /// Puts an awake, not running unit where it belongs: the run queue when it
    /// has budget, nowhere (waiting in `replq` only) when depleted.
    fn enqueue(&mut self, slot: u32) {
        let seq = self.next_seq;
        if let Some(u) = self.unit_mut(slot)
            && u.awake
            && u.running_on.is_none()
            && u.cur_budget_ns > 0
        {
            u.queued_seq = seq;
            self.next_seq += 1;
            self.runq_push(slot);
        }
    }

    /// Applies every replenishment due at `now` (Xen's `repl_timer_handler`).
    fn replenish_due(&mut self, now: Time) {
        while let Some((deadline, slot)) = self.replq.peek() {
            if deadline > now {
                break;
            }
            // Re-key both queues in place: the deadline moves and the level drops
            // to 0. A queued unit keeps its arrival number; a depleted one arrives now.
            let Some(unit) = self.unit_mut(slot) else {
                self.replq_remove(slot);
                continue;
            };
            unit.replenish(now);
            self.replq_push(slot);
            if self.runq.contains(slot) {
                self.runq_push(slot);
            } else {
                self.enqueue(slot);
            }
        }
    }

    fn unlink(&mut self, slot: u32) {
        let Some(unit) = self.unit(slot) else { return };
        let (prev, next, resource) = (unit.prev, unit.next, unit.resource);
        if prev != ABSENT {
            if let Some(p) = self.unit_mut(prev) {
                p.next = next;
            }
        } else if let Some(index) = self.index_of(resource) {
            self.resources[index].placed_head = next;
        }
        if next != ABSENT
            && let Some(n) = self.unit_mut(next)
        {
            n.prev = prev;
        }
        if let Some(index) = self.index_of(resource) {
            self.resources[index].placed_count -= 1;
        }
        if let Some(unit) = self.unit_mut(slot) {
            unit.prev = ABSENT;
            unit.next = ABSENT;
        }
    }

    fn link(&mut self, slot: u32, index: usize) {
        let id = self.resources[index].info.id;
        let head = self.resources[index].placed_head;
        if let Some(unit) = self.unit_mut(slot) {
            unit.resource = id;
            unit.prev = ABSENT;
            unit.next = head;
        }
        if head != ABSENT
            && let Some(h) = self.unit_mut(head)
        {
            h.prev = slot;
        }
        self.resources[index].placed_head = slot;
        self.resources[index].placed_count += 1;
    }

    /// Moves the unit's placement to resource `index`.
    fn place(&mut self, slot: u32, index: usize) {
        if self
            .unit(slot)
            .is_some_and(|u| self.index_of(u.resource) == Some(index))
        {
            return;
        }
        self.unlink(slot);
        self.link(slot, index);
    }

    fn eligible(&self, slot: u32, index: usize) -> bool {
        self.unit(slot)
            .is_some_and(|u| u.hard_affinity.intersects(&self.resources[index].info.cpus))
    }

    /// The best queued unit for resource `index` (earliest deadline at the lowest
    /// level, within hard affinity), passing over `avoid` (a unit that yielded)
    /// unless nothing else can run.
    fn pick(&self, index: usize, avoid: Option<u32>) -> Option<u32> {
        let (_, top) = self.runq.peek()?;
        if Some(top) != avoid && self.eligible(top, index) {
            return Some(top);
        }
        // Slow path (restricted affinity, or a yield): scan the queue.
        let best = self
            .runq
            .entries()
            .iter()
            .filter(|&&(_, s)| Some(s) != avoid && self.eligible(s, index))
            .min()
            .map(|&(_, s)| s);
        best.or(avoid.filter(|&s| self.runq.contains(s) && self.eligible(s, index)))
    }

    /// Resources to reschedule for a newly queued unit (Xen's `runq_tickle`):
    /// an idle one in its affinity (its own first), else the one running the
    /// latest-deadline unit if this unit's deadline is earlier.
    fn tickle(&mut self, slot: u32) -> Tickle {
        let mut tickle = Tickle::new();
        let Some(unit) = self.unit(slot) else {
            return tickle;
        };
        if !self.runq.contains(slot) {
            return tickle;
        }
        let key = unit.key(slot);
        let own = self.index_of(unit.resource);
        let mut idle: Option<usize> = None;
        let mut latest: Option<(usize, RunqKey)> = None;
        for (index, resource) in self.resources.iter().enumerate() {
            if resource.tickled || !unit.hard_affinity.intersects(&resource.info.cpus) {
                continue;
            }
            match resource.leader() {
                None => {
                    let better = match idle {
                        None => true,
                        Some(current) => {
                            Some(current) != own
                                && (Some(index) == own
                                    || (resource.info.cpus.intersects(&unit.soft_affinity)
                                        && !self.resources[current]
                                            .info
                                            .cpus
                                            .intersects(&unit.soft_affinity)))
                        }
                    };
                    if better {
                        idle = Some(index);
                    }
                }
                Some(leader) => {
                    let leader_key = self.runq_key(leader);
                    if latest.is_none_or(|(_, k)| leader_key > k) {
                        latest = Some((index, leader_key));
                    }
                }
            }
        }
        let chosen = idle.or(latest.and_then(|(index, k)| (key < k).then_some(index)));
        if let Some(index) = chosen {
            self.resources[index].tickled = true;
            tickle.insert(self.resources[index].info.id.0);
        }
        tickle
    }

    /// Time to the pool's next replenishment, if any unit is awake.
    fn until_next_replenishment(&self, now: Time) -> Option<Time> {
        let (deadline, _) = self.replq.peek()?;
        Some(deadline.saturating_sub(now).max(1))
    }
}

impl Scheduler for Rt {
    fn name(&self) -> &'static str {
        "rt"
    }

    fn set_pool_param(&mut self, _key: &str, _value: &str) -> Result<(), SchedError> {
        Err(SchedError::UnknownParam {
            scheduler: "rt",
            valid: "none (rt takes budget_ns, period_ns and extratime per unit)",
        })
    }

    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError> {
        if info.id.0 >= MAX_CPUS || info.cpus.is_empty() {
            return Err(SchedError::UnknownResource(info.id));
        }
        if self.index_of(info.id).is_some() {
            return Err(SchedError::InvalidParam {
                param: "resource",
                expected: "a resource not already in the pool",
            });
        }
        self.resource_index[info.id.0] = self.resources.len() as u16;
        self.resources.push(RtResource {
            info,
            running: Vec::with_capacity(info.cpus.len()),
            placed_head: ABSENT,
            placed_count: 0,
            tickled: false,
        });
        Ok(())
    }

    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError> {
        let index = self.index_of(id).ok_or(SchedError::UnknownResource(id))?;
        let resource = &self.resources[index];
        if resource.placed_count > 0 || !resource.running.is_empty() {
            return Err(SchedError::ResourceBusy(id));
        }
        self.resources.swap_remove(index);
        self.resource_index[id.0] = NO_RESOURCE;
        if let Some(moved) = self.resources.get(index) {
            self.resource_index[moved.info.id.0] = index as u16;
        }
        Ok(())
    }

    fn insert_unit(&mut self, info: &UnitInfo, now: Time) -> Result<ResourceId, SchedError> {
        validate_params(&info.params)?;
        let slot = info.id.0;
        if slot == ABSENT {
            return Err(SchedError::InvalidParam {
                param: "unit",
                expected: "a unit slot below u32::MAX",
            });
        }
        if self.unit(slot).is_some() {
            return Err(SchedError::InvalidParam {
                param: "unit",
                expected: "a unit not already in the pool",
            });
        }
        let index = self
            .resources
            .iter()
            .position(|r| r.info.cpus.intersects(&info.hard_affinity))
            .ok_or(SchedError::NoResourceInAffinity(info.id))?;
        if self.units.len() <= slot as usize {
            self.units.resize(slot as usize + 1, None);
        }
        self.runq.reserve_slot(slot as usize);
        self.replq.reserve_slot(slot as usize);
        self.units[slot as usize] = Some(RtUnit {
            domain: info.domain,
            budget_ns: info.params.budget_ns,
            period_ns: info.params.period_ns,
            extratime: info.params.extratime,
            cur_budget_ns: info.params.budget_ns,
            cur_deadline: now.saturating_add(info.params.period_ns),
            priority_level: 0,
            queued_seq: 0,
            last_start: now,
            awake: false,
            running_on: None,
            yielded: false,
            resource: self.resources[index].info.id,
            prev: ABSENT,
            next: ABSENT,
            hard_affinity: info.hard_affinity,
            soft_affinity: info.soft_affinity,
            stats: UnitStats::default(),
        });
        self.link(slot, index);
        let chosen = self.pick_resource(info.id, now);
        if let Some(to) = self.index_of(chosen) {
            self.place(slot, to);
        }
        Ok(chosen)
    }

    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError> {
        let slot = unit.0;
        let running_on = self
            .unit(slot)
            .ok_or(SchedError::UnknownUnit(unit))?
            .running_on;
        if let Some(index) = running_on.and_then(|r| self.index_of(r)) {
            self.resources[index].running.retain(|&s| s != slot);
        }
        self.runq_remove(slot);
        self.replq_remove(slot);
        self.unlink(slot);
        self.units[slot as usize] = None;
        Ok(())
    }

    fn wake(&mut self, unit: UnitId, now: Time, _reason: WakeReason) -> Tickle {
        // RTDS gives no wake-up boost: the deadline alone decides.
        let slot = unit.0;
        match self.unit(slot) {
            Some(u) if !u.awake => {}
            _ => return Tickle::new(),
        }
        self.replenish_due(now);
        if let Some(u) = self.unit_mut(slot) {
            u.awake = true;
            if now >= u.cur_deadline {
                u.replenish(now);
            }
        }
        self.replq_push(slot);
        // Still on a CPU (slept and woke before its resource rescheduled): the
        // next decision there re-queues it.
        self.enqueue(slot);
        self.tickle(slot)
    }

    fn sleep(&mut self, unit: UnitId, _now: Time) -> Tickle {
        let slot = unit.0;
        let mut tickle = Tickle::new();
        let Some(u) = self.unit_mut(slot) else {
            return tickle;
        };
        if !u.awake {
            return tickle;
        }
        u.awake = false;
        if let Some(resource) = u.running_on {
            tickle.insert(resource.0);
        }
        self.runq_remove(slot);
        self.replq_remove(slot);
        tickle
    }

    fn yield_unit(&mut self, unit: UnitId, _now: Time) {
        if let Some(u) = self.unit_mut(unit.0)
            && u.running_on.is_some()
        {
            u.yielded = true;
        }
    }

    fn pick_resource(&mut self, unit: UnitId, _now: Time) -> ResourceId {
        let Some(u) = self.unit(unit.0) else {
            return ResourceId(0);
        };
        let own = self.index_of(u.resource);
        let mut best: Option<(usize, (bool, bool, bool))> = None;
        for (index, resource) in self.resources.iter().enumerate() {
            if !resource.info.cpus.intersects(&u.hard_affinity) {
                continue;
            }
            // Prefer an idle resource, then soft affinity, then staying put.
            let score = (
                resource.running.is_empty(),
                resource.info.cpus.intersects(&u.soft_affinity),
                Some(index) == own,
            );
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((index, score));
            }
        }
        best.map_or(u.resource, |(index, _)| self.resources[index].info.id)
    }

    fn migrate(&mut self, unit: UnitId, to: ResourceId, _now: Time) {
        if let Some(index) = self.index_of(to)
            && self.unit(unit.0).is_some()
        {
            self.place(unit.0, index);
        }
    }

    fn do_schedule(&mut self, resource: ResourceId, now: Time) -> TaskSlice {
        let Some(index) = self.index_of(resource) else {
            return TaskSlice::IDLE;
        };
        // Account every unit that ran here and put the runnable ones back.
        let mut yielder = None;
        for position in 0..self.resources[index].running.len() {
            let slot = self.resources[index].running[position];
            if let Some(u) = self.unit_mut(slot) {
                u.burn(now);
                u.running_on = None;
                if core::mem::take(&mut u.yielded) {
                    yielder = Some(slot);
                }
            }
            self.enqueue(slot);
        }
        self.resources[index].running.clear();
        self.resources[index].tickled = false;
        self.replenish_due(now);

        let Some(slot) = self.pick(index, yielder) else {
            return TaskSlice {
                unit: None,
                slice_ns: self.until_next_replenishment(now),
                migrated: false,
            };
        };
        self.runq_remove(slot);
        let migrated = self.unit(slot).is_some_and(|u| u.resource != resource);
        self.place(slot, index);
        self.resources[index].running.push(slot);
        let until_replenishment = self.until_next_replenishment(now);
        let Some(u) = self.unit_mut(slot) else {
            return TaskSlice::IDLE;
        };
        u.running_on = Some(resource);
        u.last_start = now;
        u.stats.dispatches += 1;
        let slice = until_replenishment.map_or(u.cur_budget_ns, |r| r.min(u.cur_budget_ns));
        TaskSlice {
            unit: Some(UnitId(slot)),
            slice_ns: Some(slice),
            migrated,
        }
    }

    fn pick_sibling(
        &mut self,
        resource: ResourceId,
        domain: DomainId,
        now: Time,
    ) -> Option<UnitId> {
        let index = self.index_of(resource)?;
        let res = &self.resources[index];
        if res.running.len() >= res.info.cpus.len() {
            return None;
        }
        // Security: never mix domains on one resource.
        if let Some(leader) = res.leader()
            && self.unit(leader).is_none_or(|u| u.domain != domain)
        {
            return None;
        }
        let mut best: Option<u32> = None;
        let mut cursor = res.placed_head;
        while cursor != ABSENT {
            let Some(u) = self.unit(cursor) else { break };
            if u.domain == domain
                && self.runq.contains(cursor)
                && u.hard_affinity.intersects(&res.info.cpus)
                && best.is_none_or(|b| self.runq.key(cursor) < self.runq.key(b))
            {
                best = Some(cursor);
            }
            cursor = u.next;
        }
        let slot = best?;
        self.runq_remove(slot);
        self.resources[index].running.push(slot);
        let u = self.unit_mut(slot)?;
        u.running_on = Some(resource);
        u.last_start = now;
        u.stats.dispatches += 1;
        Some(UnitId(slot))
    }

    fn set_unit_params(&mut self, unit: UnitId, params: &SchedParams) -> Result<(), SchedError> {
        validate_params(params)?;
        let slot = unit.0;
        let queued = self.runq.contains(slot);
        let u = self.unit_mut(slot).ok_or(SchedError::UnknownUnit(unit))?;
        // The new period takes effect at the next replenishment; the budget left
        // in this period never grows past the new budget.
        u.budget_ns = params.budget_ns;
        u.period_ns = params.period_ns;
        u.extratime = params.extratime;
        u.cur_budget_ns = u.cur_budget_ns.min(params.budget_ns);
        let waiting = u.awake && u.running_on.is_none();
        if waiting && queued && u.priority_level > 0 && !u.extratime {
            // Running on extratime it no longer has: depleted until replenished.
            u.cur_budget_ns = 0;
            u.priority_level = 0;
            self.runq_remove(slot);
        } else if waiting && !queued && u.cur_budget_ns == 0 && u.extratime {
            u.priority_level += 1;
            u.cur_budget_ns = u.budget_ns;
            self.enqueue(slot);
        }
        Ok(())
    }

    fn set_affinity(&mut self, unit: UnitId, hard: CpuSet, soft: CpuSet) -> Result<(), SchedError> {
        if !self.resources.iter().any(|r| r.info.cpus.intersects(&hard)) {
            return Err(SchedError::NoResourceInAffinity(unit));
        }
        let u = self.unit_mut(unit.0).ok_or(SchedError::UnknownUnit(unit))?;
        u.hard_affinity = hard;
        u.soft_affinity = soft;
        Ok(())
    }

    fn stats(&self, unit: UnitId) -> Option<UnitStats> {
        let u = self.unit(unit.0)?;
        Some(UnitStats {
            credit: i64::try_from(u.cur_budget_ns).unwrap_or(i64::MAX),
            ..u.stats
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: Time = 1_000;
    const MS: Time = 1_000_000;

    fn resource(master: usize, cpus: usize) -> ResourceInfo {
        ResourceInfo {
            id: ResourceId(master),
            cpus: (master..master + cpus).collect(),
            socket: 0,
            cluster: 0,
            capacity: None,
            core_cpus: crate::CpuSet::new(),
        }
    }

    fn params(budget_ns: Time, period_ns: Time, extratime: bool) -> SchedParams {
        SchedParams {
            budget_ns,
            period_ns,
            extratime,
            ..SchedParams::default()
        }
    }

    fn unit_info(id: u32, domain: u32, params: SchedParams) -> UnitInfo {
        UnitInfo {
            id: UnitId(id),
            domain: DomainId(domain),
            index_in_domain: id,
            vcpus: 1,
            params,
            hard_affinity: CpuSet::first_n(64),
            soft_affinity: CpuSet::first_n(64),
        }
    }

    /// `resources` resources of one CPU each (masters 0, 1, ...).
    fn pool(resources: usize) -> Rt {
        let mut rt = Rt::new();
        for master in 0..resources {
            rt.add_resource(resource(master, 1)).unwrap();
        }
        rt
    }

    fn add(rt: &mut Rt, id: u32, budget_ns: Time, period_ns: Time, extratime: bool) {
        rt.insert_unit(
            &unit_info(id, id, params(budget_ns, period_ns, extratime)),
            0,
        )
        .unwrap();
    }

    fn ran(slice: TaskSlice) -> Option<u32> {
        slice.unit.map(|u| u.0)
    }

    #[test]
    fn earliest_deadline_runs_first() {
        let mut rt = pool(1);
        add(&mut rt, 0, MS, 10 * MS, false);
        add(&mut rt, 1, MS, 5 * MS, false);
        add(&mut rt, 2, MS, 20 * MS, false);
        for id in [0, 2, 1] {
            rt.wake(UnitId(id), 0, WakeReason::New);
        }
        let r = ResourceId(0);
        let first = rt.do_schedule(r, 0);
        assert_eq!((ran(first), first.slice_ns), (Some(1), Some(MS)));
        let second = rt.do_schedule(r, MS);
        assert_eq!((ran(second), second.slice_ns), (Some(0), Some(MS)));
        let third = rt.do_schedule(r, 2 * MS);
        assert_eq!((ran(third), third.slice_ns), (Some(2), Some(MS)));
        // Everyone is depleted: idle until unit 1's replenishment at 5 ms.
        let idle = rt.do_schedule(r, 3 * MS);
        assert_eq!((idle.unit, idle.slice_ns), (None, Some(2 * MS)));
    }

    #[test]
    fn global_edf_runs_the_earliest_deadlines_on_all_resources() {
        let mut rt = pool(2);
        add(&mut rt, 0, MS, 30 * MS, false);
        add(&mut rt, 1, MS, 10 * MS, false);
        add(&mut rt, 2, MS, 20 * MS, false);
        for id in 0..3 {
            rt.wake(UnitId(id), 0, WakeReason::New);
        }
        let a = ran(rt.do_schedule(ResourceId(0), 0));
        let b = ran(rt.do_schedule(ResourceId(1), 0));
        assert_eq!((a, b), (Some(1), Some(2)));
        // After unit 1 runs out, resource 0 takes unit 0.
        assert_eq!(ran(rt.do_schedule(ResourceId(0), MS)), Some(0));
    }

    #[test]
    fn budget_is_enforced_and_replenished_each_period() {
        let mut rt = pool(1);
        add(&mut rt, 0, 2 * MS, 10 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        let r = ResourceId(0);
        for period in 0..5 {
            let start = period * 10 * MS;
            let slice = rt.do_schedule(r, start);
            assert_eq!(
                (ran(slice), slice.slice_ns),
                (Some(0), Some(2 * MS)),
                "period {period}"
            );
            assert_eq!(rt.deadline(UnitId(0)), Some(start + 10 * MS));
            // Budget gone: idle until the next period, even though runnable.
            let idle = rt.do_schedule(r, start + 2 * MS);
            assert_eq!(
                (idle.unit, idle.slice_ns),
                (None, Some(8 * MS)),
                "period {period}"
            );
            assert_eq!(rt.stats(UnitId(0)).unwrap().credit, 0);
        }
        let stats = rt.stats(UnitId(0)).unwrap();
        assert_eq!((stats.runtime_ns, stats.dispatches), (10 * MS, 5));
    }

    #[test]
    fn slices_stop_at_replenishment_and_overruns_are_charged() {
        let mut rt = pool(1);
        add(&mut rt, 0, 5 * MS, 10 * MS, false);
        add(&mut rt, 1, 2 * MS, 3 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        let r = ResourceId(0);
        assert_eq!(rt.do_schedule(r, 0).slice_ns, Some(5 * MS));
        // Unit 1 wakes with deadline 3 ms, earlier than unit 0's 10 ms: preemption.
        let tickle = rt.wake(UnitId(1), 1_500 * US, WakeReason::Event);
        assert!(tickle.contains(0), "an earlier deadline preempts");
        let slice = rt.do_schedule(r, 1_500 * US);
        assert_eq!(
            (ran(slice), slice.slice_ns),
            (Some(1), Some(1_500 * US)),
            "ends at its replenishment"
        );
        assert_eq!(rt.stats(UnitId(0)).unwrap().credit, (3_500 * US) as i64);
        // The framework comes back 2 ms late: unit 1 is charged all 2 ms (its whole
        // budget) and then replenished for the period ending at 6 ms.
        let slice = rt.do_schedule(r, 3_500 * US);
        assert_eq!((ran(slice), slice.slice_ns), (Some(1), Some(2 * MS)));
        assert_eq!(rt.deadline(UnitId(1)), Some(6 * MS));
        assert_eq!(rt.stats(UnitId(1)).unwrap().runtime_ns, 2 * MS);
        // Depleted again: unit 0 runs, but only up to unit 1's next replenishment.
        let slice = rt.do_schedule(r, 5_500 * US);
        assert_eq!((ran(slice), slice.slice_ns), (Some(0), Some(500 * US)));
        assert_eq!(ran(rt.do_schedule(r, 6 * MS)), Some(1));
        assert_eq!(rt.deadline(UnitId(1)), Some(9 * MS));
    }

    #[test]
    fn extratime_runs_only_in_idle_time() {
        let mut rt = pool(1);
        add(&mut rt, 0, 2 * MS, 8 * MS, true);
        add(&mut rt, 1, 5 * MS, 10 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        rt.wake(UnitId(1), 0, WakeReason::New);
        let r = ResourceId(0);
        assert_eq!(ran(rt.do_schedule(r, 0)), Some(0));
        // Unit 0 used its budget: it drops a level and unit 1 (with budget) runs
        // even though unit 0's deadline is earlier.
        let slice = rt.do_schedule(r, 2 * MS);
        assert_eq!((ran(slice), slice.slice_ns), (Some(1), Some(5 * MS)));
        assert_eq!(rt.priority_level(UnitId(0)), Some(1));
        // Unit 1 depleted: the resource would idle, so unit 0 runs on extratime
        // until its own replenishment at 8 ms.
        let slice = rt.do_schedule(r, 7 * MS);
        assert_eq!((ran(slice), slice.slice_ns), (Some(0), Some(MS)));
        let slice = rt.do_schedule(r, 8 * MS);
        assert_eq!(ran(slice), Some(0));
        assert_eq!(
            (rt.priority_level(UnitId(0)), rt.deadline(UnitId(0))),
            (Some(0), Some(16 * MS))
        );
        assert_eq!(rt.stats(UnitId(0)).unwrap().runtime_ns, 3 * MS);
    }

    #[test]
    fn without_extratime_a_depleted_unit_idles_the_resource() {
        let mut rt = pool(1);
        add(&mut rt, 0, 2 * MS, 8 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        let r = ResourceId(0);
        assert_eq!(ran(rt.do_schedule(r, 0)), Some(0));
        assert_eq!(rt.do_schedule(r, 2 * MS).unit, None);
        // Turning extratime on lets it use the idle time at once.
        rt.set_unit_params(UnitId(0), &params(2 * MS, 8 * MS, true))
            .unwrap();
        assert_eq!(ran(rt.do_schedule(r, 3 * MS)), Some(0));
        assert_eq!(rt.priority_level(UnitId(0)), Some(1));
        // And turning it off again makes it wait for its replenishment.
        rt.yield_unit(UnitId(0), 3 * MS);
        let slice = rt.do_schedule(r, 3 * MS + 100 * US);
        assert_eq!(
            ran(slice),
            Some(0),
            "yield alone does not idle the resource"
        );
        rt.sleep(UnitId(0), 4 * MS);
        rt.do_schedule(r, 4 * MS);
        rt.set_unit_params(UnitId(0), &params(2 * MS, 8 * MS, false))
            .unwrap();
        rt.wake(UnitId(0), 4 * MS, WakeReason::Event);
        let slice = rt.do_schedule(r, 4 * MS);
        assert_eq!(
            ran(slice),
            Some(0),
            "extratime budget left from before is kept"
        );
        assert_eq!(rt.do_schedule(r, 6 * MS).unit, None);
    }

    #[test]
    fn extratime_unit_is_preempted_by_a_waking_unit_with_budget() {
        let mut rt = pool(1);
        add(&mut rt, 0, MS, 100 * MS, true);
        add(&mut rt, 1, MS, 200 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        let r = ResourceId(0);
        rt.do_schedule(r, 0);
        assert_eq!(ran(rt.do_schedule(r, MS)), Some(0));
        assert_eq!(rt.priority_level(UnitId(0)), Some(1));
        // Unit 1's deadline (201 ms) is later, but it has budget: it wins.
        assert!(
            rt.wake(UnitId(1), MS + 10 * US, WakeReason::Event)
                .contains(0)
        );
        assert_eq!(ran(rt.do_schedule(r, MS + 10 * US)), Some(1));
    }

    #[test]
    fn overload_does_not_starve_anyone() {
        // Three units each asking for 60% of one CPU: deadlines are missed, but
        // equal deadlines rotate, so every unit gets close to a third.
        let mut rt = pool(1);
        for id in 0..3 {
            add(&mut rt, id, 6 * MS, 10 * MS, false);
            rt.wake(UnitId(id), 0, WakeReason::New);
        }
        let mut now = 0;
        while now < 1_000 * MS {
            let slice = rt.do_schedule(ResourceId(0), now);
            now += slice
                .slice_ns
                .expect("someone always has a replenishment pending");
        }
        rt.do_schedule(ResourceId(0), now);
        let runtimes: Vec<Time> = (0..3)
            .map(|id| rt.stats(UnitId(id)).unwrap().runtime_ns)
            .collect();
        assert_eq!(
            runtimes.iter().sum::<Time>(),
            now,
            "never idle while overloaded"
        );
        for (id, runtime) in runtimes.iter().enumerate() {
            assert!(
                *runtime >= 300 * MS,
                "unit {id} got only {runtime} ns of 1 s: {runtimes:?}"
            );
        }
    }

    #[test]
    fn a_hog_that_misses_deadlines_does_not_starve_a_short_period_unit() {
        let mut rt = pool(1);
        add(&mut rt, 0, 10 * MS, 10 * MS, true);
        add(&mut rt, 1, MS, 5 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        rt.wake(UnitId(1), 0, WakeReason::New);
        let mut now = 0;
        while now < 1_000 * MS {
            now += rt.do_schedule(ResourceId(0), now).slice_ns.unwrap();
        }
        rt.do_schedule(ResourceId(0), now);
        let small = rt.stats(UnitId(1)).unwrap().runtime_ns;
        let hog = rt.stats(UnitId(0)).unwrap().runtime_ns;
        // Under overload EDF misses deadlines; ties go first-come first-served, so
        // the small unit gets half its reservation (1 ms per 10 ms), never nothing.
        assert!(small >= 99 * MS, "short-period unit got {small} ns");
        assert!(hog >= 800 * MS, "hog got {hog} ns");
        assert_eq!(small + hog, now);
    }

    #[test]
    fn wake_tickles_idle_resource_then_latest_deadline() {
        let mut rt = pool(2);
        add(&mut rt, 0, MS, 20 * MS, false);
        add(&mut rt, 1, MS, 30 * MS, false);
        add(&mut rt, 2, MS, 10 * MS, false);
        add(&mut rt, 3, MS, 40 * MS, false);
        let first = rt.wake(UnitId(0), 0, WakeReason::New);
        assert_eq!(first.len(), 1);
        let second = rt.wake(UnitId(1), 0, WakeReason::New);
        assert_eq!(second.len(), 1);
        assert!(
            !first.intersects(&second),
            "two wakes do not tickle the same idle resource"
        );
        let on0 = ran(rt.do_schedule(ResourceId(0), 0)).unwrap();
        let on1 = ran(rt.do_schedule(ResourceId(1), 0)).unwrap();
        let latest = if on0 == 1 { 0 } else { 1 };
        assert_eq!([on0, on1].iter().filter(|&&u| u == 1).count(), 1);
        // Deadline 10 ms beats the running 30 ms unit.
        let tickle = rt.wake(UnitId(2), 0, WakeReason::Event);
        assert_eq!(tickle.iter().collect::<Vec<_>>(), vec![latest]);
        // Deadline 40 ms beats nobody.
        assert!(rt.wake(UnitId(3), 0, WakeReason::Event).is_empty());
        assert_eq!(ran(rt.do_schedule(ResourceId(latest), 10 * US)), Some(2));
    }

    #[test]
    fn sleeping_units_are_never_picked_and_running_ones_tickle_on_sleep() {
        let mut rt = pool(1);
        add(&mut rt, 0, MS, 10 * MS, false);
        add(&mut rt, 1, MS, 20 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        rt.wake(UnitId(1), 0, WakeReason::New);
        assert_eq!(ran(rt.do_schedule(ResourceId(0), 0)), Some(0));
        assert!(rt.sleep(UnitId(0), 10 * US).contains(0));
        assert!(
            rt.sleep(UnitId(1), 10 * US).is_empty(),
            "a queued unit needs no reschedule"
        );
        assert_eq!(rt.do_schedule(ResourceId(0), 20 * US), TaskSlice::IDLE);
        assert_eq!(rt.stats(UnitId(0)).unwrap().runtime_ns, 20 * US);
    }

    #[test]
    fn yield_lets_a_later_deadline_run() {
        let mut rt = pool(1);
        add(&mut rt, 0, 5 * MS, 10 * MS, false);
        add(&mut rt, 1, 5 * MS, 20 * MS, false);
        rt.wake(UnitId(0), 0, WakeReason::New);
        rt.wake(UnitId(1), 0, WakeReason::New);
        assert_eq!(ran(rt.do_schedule(ResourceId(0), 0)), Some(0));
        rt.yield_unit(UnitId(0), MS);
        assert_eq!(ran(rt.do_schedule(ResourceId(0), MS)), Some(1));
        assert_eq!(
            ran(rt.do_schedule(ResourceId(0), 2 * MS)),
            Some(0),
            "yield lasts one decision"
        );
    }

    #[test]
    fn hard_affinity_is_respected() {
        let mut rt = pool(2);
        let mut info = unit_info(0, 0, params(MS, 10 * MS, false));
        info.hard_affinity = CpuSet::single(1);
        assert_eq!(rt.insert_unit(&info, 0), Ok(ResourceId(1)));
        add(&mut rt, 1, MS, 20 * MS, false);
        assert_eq!(
            rt.wake(UnitId(0), 0, WakeReason::New)
                .iter()
                .collect::<Vec<_>>(),
            vec![1]
        );
        rt.wake(UnitId(1), 0, WakeReason::New);
        // Resource 0 may not take unit 0 even though its deadline is earlier.
        assert_eq!(ran(rt.do_schedule(ResourceId(0), 0)), Some(1));
        let slice = rt.do_schedule(ResourceId(1), 0);
        assert_eq!((ran(slice), slice.migrated), (Some(0), false));
        info.hard_affinity = CpuSet::single(7);
        assert_eq!(
            rt.insert_unit(
                &UnitInfo {
                    id: UnitId(5),
                    ..info
                },
                0
            ),
            Err(SchedError::NoResourceInAffinity(UnitId(5)))
        );
        assert_eq!(
            rt.set_affinity(UnitId(0), CpuSet::single(9), CpuSet::new()),
            Err(SchedError::NoResourceInAffinity(UnitId(0)))
        );
    }

    #[test]
    fn pick_sibling_fills_spare_cpus_with_the_same_domain_only() {
        let mut rt = Rt::new();
        rt.add_resource(resource(0, 2)).unwrap();
        for (id, domain) in [(0, 1), (1, 1), (2, 2), (3, 1)] {
            rt.insert_unit(
                &unit_info(id, domain, params(MS, (10 + id as Time) * MS, false)),
                0,
            )
            .unwrap();
        }
        for id in 0..3 {
            rt.wake(UnitId(id), 0, WakeReason::New);
        }
        let r = ResourceId(0);
        assert_eq!(ran(rt.do_schedule(r, 0)), Some(0));
        assert_eq!(
            rt.pick_sibling(r, DomainId(2), 0),
            None,
            "another domain never shares the resource"
        );
        assert_eq!(rt.pick_sibling(r, DomainId(1), 0), Some(UnitId(1)));
        assert_eq!(
            rt.pick_sibling(r, DomainId(1), 0),
            None,
            "both CPUs are busy"
        );
        // Both ran; both are accounted at the next decision.
        assert_eq!(ran(rt.do_schedule(r, 100 * US)), Some(0));
        assert_eq!(rt.stats(UnitId(1)).unwrap().runtime_ns, 100 * US);
        // Unit 1 goes to sleep and unit 3 never woke: no sibling.
        rt.sleep(UnitId(1), 100 * US);
        assert_eq!(rt.pick_sibling(r, DomainId(1), 100 * US), None);
        assert_eq!(rt.pick_sibling(ResourceId(5), DomainId(1), 100 * US), None);
    }

    #[test]
    fn parameters_are_validated() {
        let invalid = |param| {
            Err(SchedError::InvalidParam {
                param,
                expected: "",
            })
        };
        let check = |p: SchedParams| {
            validate_params(&p).map_err(|e| match e {
                SchedError::InvalidParam { param, .. } => SchedError::InvalidParam {
                    param,
                    expected: "",
                },
                other => other,
            })
        };
        assert_eq!(check(params(MS, 10 * MS, false)), Ok(()));
        assert_eq!(check(params(100 * US, 100 * US, false)), Ok(()));
        assert_eq!(check(params(11 * MS, 10 * MS, false)), invalid("budget_ns"));
        assert_eq!(check(params(9 * US, 10 * MS, false)), invalid("budget_ns"));
        assert_eq!(check(params(0, 10 * MS, false)), invalid("budget_ns"));
        assert_eq!(check(params(10 * US, 99 * US, false)), invalid("period_ns"));
        assert_eq!(check(params(MS, 11_000 * MS, false)), invalid("period_ns"));
        let mut rt = pool(1);
        let bad = unit_info(0, 0, params(2 * MS, MS, false));
        assert!(matches!(
            rt.insert_unit(&bad, 0),
            Err(SchedError::InvalidParam {
                param: "budget_ns",
                ..
            })
        ));
        add(&mut rt, 0, MS, 10 * MS, false);
        assert!(matches!(
            rt.set_unit_params(UnitId(0), &params(MS, 50 * US, false)),
            Err(SchedError::InvalidParam {
                param: "period_ns",
                ..
            })
        ));
        assert_eq!(
            rt.set_unit_params(UnitId(9), &params(MS, 10 * MS, false)),
            Err(SchedError::UnknownUnit(UnitId(9)))
        );
        assert!(matches!(
            rt.set_pool_param("ratelimit_us", "100"),
            Err(SchedError::UnknownParam {
                scheduler: "rt",
                ..
            })
        ));
        assert!(
            rt.insert_unit(&unit_info(0, 0, params(MS, 10 * MS, false)), 0)
                .is_err(),
            "duplicate unit"
        );
    }

    #[test]
    fn resources_with_units_cannot_leave() {
        let mut rt = pool(2);
        add(&mut rt, 0, MS, 10 * MS, false);
        let placed = rt.pick_resource(UnitId(0), 0);
        assert_eq!(
            rt.remove_resource(placed),
            Err(SchedError::ResourceBusy(placed))
        );
        let other = ResourceId(1 - placed.0);
        rt.migrate(UnitId(0), other, 0);
        assert_eq!(rt.remove_resource(placed), Ok(()));
        assert_eq!(
            rt.remove_resource(placed),
            Err(SchedError::UnknownResource(placed))
        );
        rt.wake(UnitId(0), 0, WakeReason::New);
        assert_eq!(ran(rt.do_schedule(other, 0)), Some(0));
        rt.sleep(UnitId(0), MS);
        rt.do_schedule(other, MS);
        rt.remove_unit(UnitId(0)).unwrap();
        assert_eq!(rt.remove_resource(other), Ok(()));
        assert_eq!(rt.stats(UnitId(0)), None);
    }

    /// Runs `hogs` (4 ms every 10 ms) and two I/O-like units (1 ms of work every
    /// 5 ms, reserved 1.5 ms every 5 ms) on 2 CPUs for 1 s in the shared simulator.
    fn reservations_in_simulation(hog_extratime: bool) -> (Vec<Time>, Vec<(Time, Time)>) {
        use crate::schedulers::sim::{Load, Sim, resource as sim_resource, unit as sim_unit};
        let mut rt = Rt::new();
        let resources = [sim_resource(0, 0, 0), sim_resource(1, 0, 0)];
        let mut sim = Sim::new(&mut rt, &resources);
        let all = CpuSet::first_n(2);
        for id in 0..2 {
            let mut info = sim_unit(id, id, 256, all);
            info.params = params(4 * MS, 10 * MS, hog_extratime);
            sim.add(info, Load::Hog);
        }
        for id in 2..4 {
            let mut info = sim_unit(id, id, 256, all);
            info.params = params(1_500 * US, 5 * MS, false);
            sim.add(
                info,
                Load::Periodic {
                    period_ns: 5 * MS,
                    work_ns: MS,
                },
            );
        }
        sim.run_until(1_000 * MS);
        let hogs = (0..2).map(|u| sim.unit(UnitId(u)).ran_ns).collect();
        let io = (2..4)
            .map(|u| {
                (
                    sim.unit(UnitId(u)).work_requested_ns,
                    sim.unit(UnitId(u)).work_done_ns,
                )
            })
            .collect();
        (hogs, io)
    }

    #[test]
    fn reservations_hold_in_simulation() {
        let (hogs, io) = reservations_in_simulation(false);
        for (u, ran) in hogs.iter().enumerate() {
            // Exactly its budget every period: 100 periods of 4 ms.
            assert!(
                (396 * MS..=400 * MS).contains(ran),
                "hog {u} ran {ran} ns, reserved 400 ms"
            );
        }
        for (u, (requested, done)) in io.iter().enumerate() {
            assert!(
                *done + MS >= *requested,
                "I/O unit {u}: {done} of {requested} ns done"
            );
        }
        // With extratime the hogs also soak up the idle time, and the I/O units
        // still get all their work done.
        let (hogs, io) = reservations_in_simulation(true);
        for (u, ran) in hogs.iter().enumerate() {
            assert!(*ran >= 700 * MS, "hog {u} with extratime ran only {ran} ns");
        }
        for (u, (requested, done)) in io.iter().enumerate() {
            assert!(
                *done + MS >= *requested,
                "I/O unit {u} with busy hogs: {done} of {requested} ns done"
            );
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Wake(u32),
        Sleep(u32),
        Yield(u32),
        Schedule(usize),
        Sibling(usize, u32),
        Migrate(u32, usize),
        PickResource(u32),
        SetParams(u32, Time, bool),
        Advance(Time),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0..10u32).prop_map(Op::Wake),
            1 => (0..10u32).prop_map(Op::Sleep),
            1 => (0..10u32).prop_map(Op::Yield),
            3 => (0..4usize).prop_map(Op::Schedule),
            1 => (0..4usize, 0..3u32).prop_map(|(r, d)| Op::Sibling(r, d)),
            1 => (0..10u32, 0..4usize).prop_map(|(u, r)| Op::Migrate(u, r)),
            1 => (0..10u32).prop_map(Op::PickResource),
            1 => (0..10u32, 1..20 as Time, any::<bool>()).prop_map(|(u, b, e)| Op::SetParams(u, b * 100 * US, e)),
            1 => (0..3 * MS).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Whatever the sequence of operations, only awake, known units that are
        /// not running elsewhere are picked, siblings are of the asked domain, and
        /// no unit runs twice.
        #[test]
        fn never_picks_a_sleeping_unknown_or_running_unit(ops in proptest::collection::vec(op(), 1..200)) {
            let mut rt = Rt::new();
            // Three resources of two CPUs (masters 0, 2, 4); `Schedule(3)` names none.
            let masters = [0usize, 2, 4, 6];
            for &m in &masters[..3] {
                rt.add_resource(resource(m, 2)).unwrap();
            }
            // Units 0..8 exist (8 and 9 never do), in domains 0..3.
            for id in 0..8u32 {
                let mut info = unit_info(id, id % 3, params(MS, (2 + id as Time) * MS, id % 2 == 0));
                if id == 5 {
                    info.hard_affinity = CpuSet::single(3);
                }
                rt.insert_unit(&info, 0).unwrap();
            }
            let mut awake = [false; 10];
            let mut running: [Option<usize>; 10] = [None; 10];
            let mut now = 0;
            for op in ops {
                match op {
                    Op::Wake(u) => {
                        let tickle = rt.wake(UnitId(u), now, WakeReason::Event);
                        prop_assert!(tickle.iter().all(|c| masters[..3].contains(&c)));
                        if u < 8 { awake[u as usize] = true; }
                    }
                    Op::Sleep(u) => {
                        let tickle = rt.sleep(UnitId(u), now);
                        if u < 8 && awake[u as usize] {
                            prop_assert_eq!(tickle.first(), running[u as usize].map(|r| masters[r]));
                            awake[u as usize] = false;
                        }
                    }
                    Op::Yield(u) => rt.yield_unit(UnitId(u), now),
                    Op::Schedule(r) => {
                        for slot in running.iter_mut() {
                            if *slot == Some(r) { *slot = None; }
                        }
                        let slice = rt.do_schedule(ResourceId(masters[r]), now);
                        if let Some(u) = slice.unit {
                            let u = u.0 as usize;
                            prop_assert!(r < 3, "picked on an unknown resource");
                            prop_assert!(u < 8, "unknown unit {u} picked");
                            prop_assert!(awake[u], "sleeping unit {u} picked");
                            prop_assert_eq!(running[u], None, "unit {} already running", u);
                            prop_assert!(u != 5 || r == 1, "hard affinity broken");
                            prop_assert!(slice.slice_ns.is_some_and(|s| s > 0));
                            running[u] = Some(r);
                        }
                    }
                    Op::Sibling(r, domain) => {
                        let leader_domain = (0..8).find(|&u| running[u] == Some(r)).map(|u| u as u32 % 3);
                        if let Some(u) = rt.pick_sibling(ResourceId(masters[r]), DomainId(domain), now) {
                            let u = u.0 as usize;
                            prop_assert!(u < 8 && awake[u] && running[u].is_none());
                            prop_assert_eq!(u as u32 % 3, domain);
                            prop_assert!(leader_domain.is_none_or(|d| d == domain));
                            running[u] = Some(r);
                        }
                    }
                    Op::Migrate(u, r) => {
                        if u < 8 && running[u as usize].is_none() && r < 3 && (u != 5 || r == 1) {
                            rt.migrate(UnitId(u), ResourceId(masters[r]), now);
                        }
                    }
                    Op::PickResource(u) => {
                        let picked = rt.pick_resource(UnitId(u), now);
                        if u < 8 {
                            prop_assert!(masters[..3].contains(&picked.0));
                            prop_assert!(u != 5 || picked == ResourceId(2));
                        }
                    }
                    Op::SetParams(u, budget, extratime) => {
                        let result = rt.set_unit_params(UnitId(u), &params(budget, 2 * MS, extratime));
                        prop_assert_eq!(result.is_ok(), u < 8);
                    }
                    Op::Advance(dt) => now += dt,
                }
            }
        }
    }
}
