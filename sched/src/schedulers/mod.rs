//! The scheduler implementations and [`create`], which builds one by name.
//!
//! Also holds the allocation-free queue building blocks the schedulers share
//! (an indexed binary heap and an intrusive FIFO list, both indexed by
//! [`UnitId`] slot and sized outside the hot path), the pool-parameter parsing
//! helpers, and the rule that decides whether a resource is inside a unit's
//! hard affinity.

pub mod arinc653;
pub mod credit;
pub mod credit2;
pub mod null;
pub mod rt;

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::cpuset::CpuSet;
use crate::scheduler::{ResourceInfo, SchedError, Scheduler, UnitId};

/// The scheduler a pool gets when its config names none (as Xen since 4.12).
pub const DEFAULT_SCHEDULER: &str = "credit2";

/// Builds the scheduler called `name` (see [`crate::scheduler::SCHEDULER_NAMES`]),
/// with its default pool parameters.
pub fn create(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "credit2" => Ok(Box::new(credit2::Credit2::new())),
        "credit" => Ok(Box::new(credit::Credit::new())),
        "null" => Ok(Box::new(null::Null::new())),
        "rt" => Ok(Box::new(rt::Rt::new())),
        "arinc653" => Ok(Box::new(arinc653::Arinc653::new())),
        _ => Err(SchedError::UnknownScheduler),
    }
}

/// Applies pool parameters written as `key=value` items separated by commas or
/// whitespace (`"ratelimit_us=500, runqueue=socket"`), in order; stops at the
/// first bad item. An item without `=` is [`SchedError::InvalidParam`].
pub fn apply_pool_params(scheduler: &mut dyn Scheduler, params: &str) -> Result<(), SchedError> {
    for item in params.split(|c: char| c == ',' || c.is_whitespace()) {
        if item.is_empty() {
            continue;
        }
        let (key, value) = item.split_once('=').ok_or(SchedError::InvalidParam {
            param: "pool parameter",
            expected: "key=value",
        })?;
        scheduler.set_pool_param(key.trim(), value.trim())?;
    }
    Ok(())
}

/// [`create`] followed by [`apply_pool_params`].
pub fn create_with_params(name: &str, params: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    let mut scheduler = create(name)?;
    apply_pool_params(scheduler.as_mut(), params)?;
    Ok(scheduler)
}

/// Whether a unit with hard affinity `hard` may run on `resource`: at least one
/// of the resource's CPUs is in the affinity (with core granularity a vCPU pinned
/// to the second thread of a core still runs on that core's resource).
pub fn resource_allowed(hard: &CpuSet, resource: &ResourceInfo) -> bool {
    hard.intersects(&resource.cpus)
}

/// Parses a decimal pool-parameter value in `min..=max`; otherwise
/// [`SchedError::InvalidParam`] with `expected` (the range, in words).
pub(crate) fn parse_in_range(
    value: &str,
    param: &'static str,
    min: u64,
    max: u64,
    expected: &'static str,
) -> Result<u64, SchedError> {
    match value.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(SchedError::InvalidParam { param, expected }),
    }
}

/// The "not in a heap" position.
pub(crate) const NOT_QUEUED: u32 = u32::MAX;

/// A binary heap of units with O(log n) push, pop and removal of any member.
///
/// Written by hand because `alloc::collections::BinaryHeap` cannot remove an
/// arbitrary element (a unit that goes to sleep or migrates) without a linear
/// rebuild. Positions live in a caller-owned slice indexed by unit slot so one
/// table serves all the heaps of a scheduler; the order is a caller-supplied
/// `before(a, b)` ("a runs before b"), which lets keys live in the caller's
/// unit table. Never allocates once [`IndexedHeap::reserve_for`] was called
/// with the number of units.
#[derive(Debug, Default)]
pub(crate) struct IndexedHeap {
    items: Vec<UnitId>,
}

impl IndexedHeap {
    /// An empty heap.
    pub(crate) const fn new() -> Self {
        Self { items: Vec::new() }
    }

    /// Makes room for `units` members, so pushes never allocate.
    pub(crate) fn reserve_for(&mut self, units: usize) {
        self.items.reserve(units.saturating_sub(self.items.len()));
    }

    /// The members, in heap order (index 0 is the best).
    pub(crate) fn items(&self) -> &[UnitId] {
        &self.items
    }

    /// The best member.
    pub(crate) fn peek(&self) -> Option<UnitId> {
        self.items.first().copied()
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Adds `unit` (which must not be in any heap sharing `pos`).
    pub(crate) fn push(
        &mut self,
        unit: UnitId,
        pos: &mut [u32],
        before: &impl Fn(UnitId, UnitId) -> bool,
    ) {
        debug_assert!(
            self.items.len() < self.items.capacity(),
            "heap push would allocate"
        );
        let index = self.items.len();
        self.items.push(unit);
        pos[unit.0 as usize] = index as u32;
        self.sift_up(index, pos, before);
    }

    /// Removes `unit`; false if it is not a member of this heap.
    pub(crate) fn remove(
        &mut self,
        unit: UnitId,
        pos: &mut [u32],
        before: &impl Fn(UnitId, UnitId) -> bool,
    ) -> bool {
        let Some(&index) = pos.get(unit.0 as usize) else {
            return false;
        };
        let index = index as usize;
        if self.items.get(index) != Some(&unit) {
            return false;
        }
        let last = self.items.len() - 1;
        self.items.swap(index, last);
        self.items.pop();
        pos[unit.0 as usize] = NOT_QUEUED;
        if index < self.items.len() {
            pos[self.items[index].0 as usize] = index as u32;
            self.sift_down(index, pos, before);
            self.sift_up(index, pos, before);
        }
        true
    }

    fn swap(&mut self, a: usize, b: usize, pos: &mut [u32]) {
        self.items.swap(a, b);
        pos[self.items[a].0 as usize] = a as u32;
        pos[self.items[b].0 as usize] = b as u32;
    }

    fn sift_up(
        &mut self,
        mut index: usize,
        pos: &mut [u32],
        before: &impl Fn(UnitId, UnitId) -> bool,
    ) {
        while index > 0 {
            let parent = (index - 1) / 2;
            if !before(self.items[index], self.items[parent]) {
                break;
            }
            self.swap(index, parent, pos);
            index = parent;
        }
    }

    fn sift_down(
        &mut self,
        mut index: usize,
        pos: &mut [u32],
        before: &impl Fn(UnitId, UnitId) -> bool,
    ) {
        let len = self.items.len();
        loop {
            let mut best = index;
            for child in [2 * index + 1, 2 * index + 2] {
                if child < len && before(self.items[child], self.items[best]) {
                    best = child;
                }
            }
            if best == index {
                break;
            }
            self.swap(index, best, pos);
            index = best;
        }
    }
}

/// The "no unit" link value.
pub(crate) const NIL: u32 = u32::MAX;

/// A unit's links in an intrusive list; one per unit slot, owned by the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    next: u32,
    prev: u32,
}

impl Link {
    /// Not in any list.
    pub(crate) const UNLINKED: Link = Link {
        next: NIL,
        prev: NIL,
    };
}

/// An intrusive doubly-linked FIFO of units: O(1) push, pop and removal, and no
/// allocation ever (the links are the caller's per-unit table). A unit is in at
/// most one list of a link table at a time; the caller tracks which.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FifoList {
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for FifoList {
    fn default() -> Self {
        Self::new()
    }
}

impl FifoList {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The oldest member.
    pub(crate) fn front(&self) -> Option<UnitId> {
        (self.head != NIL).then_some(UnitId(self.head))
    }

    /// Appends `unit` (which must not be in a list of `links`).
    pub(crate) fn push_back(&mut self, links: &mut [Link], unit: UnitId) {
        let u = unit.0;
        links[u as usize] = Link {
            next: NIL,
            prev: self.tail,
        };
        if self.tail == NIL {
            self.head = u;
        } else {
            links[self.tail as usize].next = u;
        }
        self.tail = u;
        self.len += 1;
    }

    /// Removes `unit`, which the caller knows to be a member.
    pub(crate) fn remove(&mut self, links: &mut [Link], unit: UnitId) {
        let u = unit.0;
        let Link { next, prev } = links[u as usize];
        if prev == NIL {
            self.head = next;
        } else {
            links[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            links[next as usize].prev = prev;
        }
        links[u as usize] = Link::UNLINKED;
        self.len -= 1;
    }

    /// The members, oldest first.
    pub(crate) fn iter<'a>(&self, links: &'a [Link]) -> FifoIter<'a> {
        FifoIter {
            links,
            next: self.head,
        }
    }
}

/// Iterator over a [`FifoList`].
pub(crate) struct FifoIter<'a> {
    links: &'a [Link],
    next: u32,
}

impl Iterator for FifoIter<'_> {
    type Item = UnitId;

    fn next(&mut self) -> Option<UnitId> {
        if self.next == NIL {
            return None;
        }
        let unit = UnitId(self.next);
        self.next = self.links[self.next as usize].next;
        Some(unit)
    }
}

#[cfg(test)]
pub(crate) mod sim {
    //! A discrete-event simulator that drives a scheduler with a simulated clock:
    //! it honours slices and tickles like the pool framework would, runs hog and
    //! periodic (I/O-like) units, and checks every decision it is handed.

    use alloc::vec;
    use alloc::vec::Vec;

    use crate::cpuset::CpuSet;
    use crate::scheduler::{
        DomainId, ResourceId, ResourceInfo, SchedParams, Scheduler, TaskSlice, Tickle, Time,
        UnitId, UnitInfo, WakeReason,
    };

    use super::resource_allowed;

    /// A one-CPU resource on `cpu`.
    pub(crate) fn resource(cpu: usize, socket: u32, cluster: u32) -> ResourceInfo {
        ResourceInfo {
            id: ResourceId(cpu),
            cpus: CpuSet::single(cpu),
            socket,
            cluster,
            capacity: None,
            core_cpus: crate::CpuSet::new(),
        }
    }

    /// A one-vCPU unit.
    pub(crate) fn unit(id: u32, domain: u32, weight: u16, hard: CpuSet) -> UnitInfo {
        UnitInfo {
            id: UnitId(id),
            domain: DomainId(domain),
            index_in_domain: 0,
            vcpus: 1,
            params: SchedParams {
                weight,
                ..SchedParams::default()
            },
            hard_affinity: hard,
            soft_affinity: hard,
        }
    }

    /// What a simulated unit does.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Load {
        /// Always runnable.
        Hog,
        /// Wakes (with [`WakeReason::Event`]) every `period_ns`, needs `work_ns` of
        /// CPU, then sleeps: an I/O server answering requests.
        Periodic { period_ns: Time, work_ns: Time },
    }

    /// A simulated unit and what happened to it.
    #[derive(Clone, Debug)]
    pub(crate) struct SimUnit {
        pub(crate) load: Load,
        pub(crate) hard: CpuSet,
        pub(crate) runnable: bool,
        pub(crate) remaining_ns: Time,
        pub(crate) next_wake: Option<Time>,
        pub(crate) ran_ns: Time,
        pub(crate) woke_at: Option<Time>,
        pub(crate) latencies: u64,
        pub(crate) max_latency_ns: Time,
        pub(crate) work_requested_ns: Time,
        pub(crate) work_done_ns: Time,
    }

    /// A simulated resource.
    #[derive(Clone, Debug)]
    pub(crate) struct SimResource {
        pub(crate) info: ResourceInfo,
        pub(crate) current: Option<UnitId>,
        pub(crate) deadline: Option<Time>,
    }

    /// The simulator. Unit ids are dense from 0 in the order they are added.
    pub(crate) struct Sim<'a> {
        pub(crate) sched: &'a mut dyn Scheduler,
        pub(crate) now: Time,
        pub(crate) resources: Vec<SimResource>,
        pub(crate) units: Vec<SimUnit>,
        /// Emulates Xen's `_VPF_migrating` kick-away of reference 004: every
        /// unit preempted while still runnable is put through sleep + wake
        /// with this reason (`Migration` is what a correct framework says;
        /// `Event` reproduces the bug, the hog being treated as a real wake).
        pub(crate) rewake_preempted: Option<WakeReason>,
        pub(crate) dispatches: u64,
    }

    impl<'a> Sim<'a> {
        /// A simulator over `sched` with `resources` added.
        pub(crate) fn new(sched: &'a mut dyn Scheduler, resources: &[ResourceInfo]) -> Self {
            let mut sim = Sim {
                sched,
                now: 0,
                resources: Vec::new(),
                units: Vec::new(),
                rewake_preempted: None,
                dispatches: 0,
            };
            for info in resources {
                sim.sched.add_resource(*info).unwrap();
                sim.resources.push(SimResource {
                    info: *info,
                    current: None,
                    deadline: None,
                });
            }
            for index in 0..sim.resources.len() {
                sim.schedule(index);
            }
            sim
        }

        /// Adds a unit; a hog wakes at once, a periodic unit at its first period.
        pub(crate) fn add(&mut self, info: UnitInfo, load: Load) -> UnitId {
            assert_eq!(
                info.id.0 as usize,
                self.units.len(),
                "sim unit ids are dense"
            );
            self.sched.insert_unit(&info, self.now).unwrap();
            self.units.push(SimUnit {
                load,
                hard: info.hard_affinity,
                runnable: false,
                remaining_ns: 0,
                next_wake: None,
                ran_ns: 0,
                woke_at: None,
                latencies: 0,
                max_latency_ns: 0,
                work_requested_ns: 0,
                work_done_ns: 0,
            });
            match load {
                Load::Hog => {
                    self.units[info.id.0 as usize].runnable = true;
                    let tickle = self.sched.wake(info.id, self.now, WakeReason::New);
                    self.handle(tickle);
                }
                Load::Periodic { period_ns, .. } => {
                    self.units[info.id.0 as usize].next_wake = Some(self.now + period_ns)
                }
            }
            info.id
        }

        /// Changes a unit's hard affinity in the scheduler and in the checks.
        pub(crate) fn set_affinity(&mut self, u: UnitId, hard: CpuSet) {
            self.sched.set_affinity(u, hard, hard).unwrap();
            self.units[u.0 as usize].hard = hard;
        }

        /// Forgets what was measured so far (after a warm-up).
        pub(crate) fn reset_stats(&mut self) {
            for unit in &mut self.units {
                unit.ran_ns = 0;
                unit.latencies = 0;
                unit.max_latency_ns = 0;
                unit.work_requested_ns = unit.remaining_ns;
                unit.work_done_ns = 0;
            }
        }

        /// Unit `u`'s record.
        pub(crate) fn unit(&self, u: UnitId) -> &SimUnit {
            &self.units[u.0 as usize]
        }

        /// Runs the simulation until `end`.
        pub(crate) fn run_until(&mut self, end: Time) {
            let mut steps = 0u64;
            while self.now < end {
                steps += 1;
                assert!(
                    steps < 20_000_000,
                    "simulation makes no progress at {}",
                    self.now
                );
                let mut next = end;
                for r in &self.resources {
                    if let Some(deadline) = r.deadline {
                        next = next.min(deadline);
                    }
                    if let Some(u) = r.current {
                        let unit = &self.units[u.0 as usize];
                        if matches!(unit.load, Load::Periodic { .. }) && unit.runnable {
                            next = next.min(self.now + unit.remaining_ns);
                        }
                    }
                }
                for unit in &self.units {
                    if let Some(wake) = unit.next_wake {
                        next = next.min(wake);
                    }
                }
                let dt = next.max(self.now) - self.now;
                for r in &self.resources {
                    if let Some(u) = r.current {
                        let unit = &mut self.units[u.0 as usize];
                        unit.ran_ns += dt;
                        if matches!(unit.load, Load::Periodic { .. }) {
                            let done = dt.min(unit.remaining_ns);
                            unit.remaining_ns -= done;
                            unit.work_done_ns += done;
                        }
                    }
                }
                self.now = next.max(self.now);
                for index in 0..self.resources.len() {
                    let Some(u) = self.resources[index].current else {
                        continue;
                    };
                    let unit = &mut self.units[u.0 as usize];
                    if matches!(unit.load, Load::Periodic { .. })
                        && unit.runnable
                        && unit.remaining_ns == 0
                    {
                        unit.runnable = false;
                        let tickle = self.sched.sleep(u, self.now);
                        assert!(
                            tickle.contains(self.resources[index].info.id.0),
                            "sleep of a running unit must tickle its resource"
                        );
                        self.handle(tickle);
                    }
                }
                for index in 0..self.units.len() {
                    let unit = &mut self.units[index];
                    let (Some(wake), Load::Periodic { period_ns, work_ns }) =
                        (unit.next_wake, unit.load)
                    else {
                        continue;
                    };
                    if wake > self.now {
                        continue;
                    }
                    unit.next_wake = Some(wake + period_ns);
                    unit.work_requested_ns += work_ns;
                    unit.remaining_ns += work_ns;
                    if !unit.runnable {
                        unit.runnable = true;
                        unit.woke_at = Some(self.now);
                        let tickle =
                            self.sched
                                .wake(UnitId(index as u32), self.now, WakeReason::Event);
                        self.handle(tickle);
                    }
                }
                for index in 0..self.resources.len() {
                    if self.resources[index]
                        .deadline
                        .is_some_and(|d| d <= self.now)
                    {
                        self.schedule(index);
                    }
                }
            }
        }

        /// Runs the scheduler of every resource in `tickle` (and of those they tickle).
        pub(crate) fn handle(&mut self, tickle: Tickle) {
            let mut pending = tickle;
            let mut rounds = 0;
            while let Some(cpu) = pending.first() {
                pending.remove(cpu);
                rounds += 1;
                assert!(rounds < 10_000, "tickles never settle");
                let index = self
                    .resources
                    .iter()
                    .position(|r| r.info.id.0 == cpu)
                    .unwrap_or_else(|| {
                        panic!("tickle names cpu {cpu}, not a resource of the pool")
                    });
                if let Some(more) = self.schedule(index) {
                    pending = pending.union(&more);
                }
            }
        }

        /// Runs `do_schedule` for resource `index` and checks its answer.
        pub(crate) fn schedule(&mut self, index: usize) -> Option<Tickle> {
            let id = self.resources[index].info.id;
            let prev = self.resources[index].current.take();
            let slice = self.sched.do_schedule(id, self.now);
            if let Some(u) = slice.unit {
                let unit = &mut self.units[u.0 as usize];
                assert!(unit.runnable, "unit {} picked while asleep", u.0);
                assert!(
                    resource_allowed(&unit.hard, &self.resources[index].info),
                    "unit {} picked outside its hard affinity {:?} on {:?} at {}",
                    u.0,
                    unit.hard,
                    id,
                    self.now
                );
                if let Some(woke) = unit.woke_at.take() {
                    unit.latencies += 1;
                    unit.max_latency_ns = unit.max_latency_ns.max(self.now - woke);
                }
                self.dispatches += 1;
                for (other, r) in self.resources.iter().enumerate() {
                    assert!(
                        other == index || r.current != Some(u),
                        "unit {} runs on two resources",
                        u.0
                    );
                }
                self.resources[index].current = Some(u);
            }
            if let Some(ns) = slice.slice_ns {
                assert!(ns > 0, "zero-length slice");
            }
            self.resources[index].deadline = slice.slice_ns.map(|ns| self.now + ns);
            // What the decision left to reschedule (credit2's unparked units).
            let mut tickle = self.sched.take_tickle();
            if let (Some(p), Some(reason)) = (prev, self.rewake_preempted)
                && slice.unit != Some(p)
                && self.units[p.0 as usize].runnable
            {
                tickle = tickle.union(&self.sched.sleep(p, self.now));
                tickle = tickle.union(&self.sched.wake(p, self.now, reason));
            }
            (!tickle.is_empty()).then_some(tickle)
        }
    }

    /// One step of a random workload for [`check_random_ops`].
    #[derive(Clone, Debug)]
    pub(crate) enum Op {
        /// Wake unit (reason index 0..4).
        Wake(usize, usize),
        /// Sleep unit.
        Sleep(usize),
        /// Yield unit (if it runs).
        Yield(usize),
        /// Advance the clock by `us` and run `do_schedule` on a resource.
        Schedule(usize, u64),
        /// Ask a resource for a sibling of its leader's domain.
        Sibling(usize),
        /// `pick_resource` + `migrate` for a unit that is not running.
        Migrate(usize),
        /// New hard affinity: a bit mask over the CPUs.
        Affinity(usize, u8),
        /// New weight and cap.
        Params(usize, u16, u16),
    }

    /// Resources of the random tests: 3 resources of 2 CPUs, in 2 clusters.
    pub(crate) fn random_pool() -> [ResourceInfo; 3] {
        let res = |i: usize, cluster| ResourceInfo {
            id: ResourceId(2 * i),
            cpus: [2 * i, 2 * i + 1].into_iter().collect(),
            socket: 0,
            cluster,
            capacity: None,
            core_cpus: crate::CpuSet::new(),
        };
        [res(0, 0), res(1, 0), res(2, 1)]
    }

    /// Number of units in the random tests.
    pub(crate) const RANDOM_UNITS: usize = 6;

    /// Hard affinity from a bit mask over CPUs 0..6 (never empty).
    pub(crate) fn mask_to_set(mask: u8) -> CpuSet {
        let set: CpuSet = (0..6).filter(|cpu| mask & (1 << cpu) != 0).collect();
        if set.is_empty() {
            CpuSet::first_n(6)
        } else {
            set
        }
    }

    /// Drives `sched` with `ops` and checks after every decision that the unit
    /// handed out is in the pool, runnable, inside its hard affinity and not
    /// running elsewhere, and that siblings share the leader's domain. Then
    /// wakes everyone and runs `settle_ns` honouring slices and tickles; with
    /// `starvation_bound_ns`, every unit must have run in each such window.
    pub(crate) fn check_random_ops(
        sched: &mut dyn Scheduler,
        affinities: &[u8],
        ops: &[Op],
        starvation_bound_ns: Option<Time>,
    ) {
        const REASONS: [WakeReason; 4] = [
            WakeReason::Event,
            WakeReason::New,
            WakeReason::Migration,
            WakeReason::Unpause,
        ];
        let pool = random_pool();
        for info in pool {
            sched.add_resource(info).unwrap();
        }
        let all: CpuSet = CpuSet::first_n(6);
        let mut hard = Vec::new();
        for (u, &mask) in affinities.iter().enumerate().take(RANDOM_UNITS) {
            let info = unit(u as u32, (u % 3) as u32, 256, mask_to_set(mask));
            let placed = sched.insert_unit(&info, 0).unwrap();
            assert!(
                pool.iter()
                    .any(|r| r.id == placed && resource_allowed(&info.hard_affinity, r))
            );
            hard.push(info.hard_affinity);
        }
        let units = hard.len();
        let mut runnable = vec![false; units];
        // Units an affinity change evicted from the resource they ran on: as
        // `System::domain_set_affinity` does, they were put to sleep and are
        // woken again once they have left (the framework's contract: a
        // scheduler never sees a running unit's affinity exclude its resource).
        let mut rewake = vec![false; units];
        let mut running: Vec<Option<usize>> = vec![None; units];
        let mut leader: [Option<usize>; 3] = [None; 3];
        let mut now: Time = 0;
        let check_tickle = |t: &Tickle| {
            for cpu in t.iter() {
                assert!(
                    pool.iter().any(|r| r.id.0 == cpu),
                    "tickle of cpu {cpu}, not a resource"
                );
            }
        };
        let dispatch = |sched: &mut dyn Scheduler,
                        r: usize,
                        now: Time,
                        runnable: &[bool],
                        running: &mut [Option<usize>],
                        leader: &mut [Option<usize>; 3],
                        hard: &[CpuSet]|
         -> (TaskSlice, Tickle) {
            for slot in running.iter_mut() {
                if *slot == Some(r) {
                    *slot = None;
                }
            }
            leader[r] = None;
            let slice = sched.do_schedule(pool[r].id, now);
            if let Some(ns) = slice.slice_ns {
                assert!(ns > 0, "zero slice");
            }
            let tickle = sched.take_tickle();
            check_tickle(&tickle);
            assert!(
                !tickle.contains(pool[r].id.0),
                "a decision tickles its own resource"
            );

            if let Some(u) = slice.unit {
                let u = u.0 as usize;
                assert!(u < runnable.len(), "unknown unit {u} returned");
                assert!(runnable[u], "unit {u} returned while asleep");
                assert!(
                    resource_allowed(&hard[u], &pool[r]),
                    "unit {u} outside its affinity on {r}"
                );
                assert_eq!(running[u], None, "unit {u} already runs elsewhere");
                running[u] = Some(r);
                leader[r] = Some(u);
            }
            (slice, tickle)
        };
        // Wakes, with the tickle honoured through `deadline`, the evicted units
        // that have left their resource (`System::rewake_released`).
        let release_rewakes = |sched: &mut dyn Scheduler,
                               now: Time,
                               running: &[Option<usize>],
                               runnable: &mut [bool],
                               rewake: &mut [bool]|
         -> Tickle {
            let mut tickle = Tickle::new();
            for u in 0..rewake.len() {
                if rewake[u] && running[u].is_none() {
                    rewake[u] = false;
                    let t = sched.wake(UnitId(u as u32), now, WakeReason::Migration);
                    check_tickle(&t);
                    tickle = tickle.union(&t);
                    runnable[u] = true;
                }
            }
            tickle
        };
        for op in ops {
            match *op {
                Op::Wake(u, reason) => {
                    let u = u % units;
                    if rewake[u] {
                        // Woken already once it has left.
                        continue;
                    }
                    let t = sched.wake(UnitId(u as u32), now, REASONS[reason % 4]);
                    check_tickle(&t);
                    runnable[u] = true;
                }
                Op::Sleep(u) => {
                    let u = u % units;
                    let t = sched.sleep(UnitId(u as u32), now);
                    check_tickle(&t);
                    if let Some(r) = running[u] {
                        assert!(
                            t.contains(pool[r].id.0),
                            "sleep of a running unit must tickle its resource"
                        );
                    }
                    runnable[u] = false;
                    rewake[u] = false;
                }
                Op::Yield(u) => {
                    let u = u % units;
                    if running[u].is_some() {
                        sched.yield_unit(UnitId(u as u32), now);
                    }
                }
                Op::Schedule(r, us) => {
                    now += us * 1000;
                    dispatch(
                        sched,
                        r % 3,
                        now,
                        &runnable,
                        &mut running,
                        &mut leader,
                        &hard,
                    );
                    release_rewakes(sched, now, &running, &mut runnable, &mut rewake);
                }
                Op::Sibling(r) => {
                    let r = r % 3;
                    let Some(l) = leader[r] else { continue };
                    let domain = DomainId((l % 3) as u32);
                    if let Some(s) = sched.pick_sibling(pool[r].id, domain, now) {
                        let s = s.0 as usize;
                        assert_eq!(s % 3, l % 3, "sibling of another domain");
                        assert!(runnable[s], "sibling {s} asleep");
                        assert!(
                            resource_allowed(&hard[s], &pool[r]),
                            "sibling {s} outside its affinity"
                        );
                        assert_eq!(running[s], None, "sibling {s} already runs");
                        let on_r = running.iter().filter(|x| **x == Some(r)).count();
                        assert!(
                            on_r < pool[r].cpus.len(),
                            "more units than CPUs on resource {r}"
                        );
                        running[s] = Some(r);
                    }
                    // Another domain never gets a sibling slot.
                    let other = DomainId(((l + 1) % 3) as u32);
                    assert_eq!(sched.pick_sibling(pool[r].id, other, now), None);
                }
                Op::Migrate(u) => {
                    let u = u % units;
                    if running[u].is_none() {
                        let to = sched.pick_resource(UnitId(u as u32), now);
                        let target = pool
                            .iter()
                            .find(|r| r.id == to)
                            .expect("pick_resource outside the pool");
                        assert!(
                            resource_allowed(&hard[u], target),
                            "pick_resource outside the affinity"
                        );
                        sched.migrate(UnitId(u as u32), to, now);
                    }
                }
                Op::Affinity(u, mask) => {
                    let u = u % units;
                    let set = mask_to_set(mask);
                    let evicted = running[u].is_some_and(|r| !resource_allowed(&set, &pool[r]));
                    if evicted && runnable[u] {
                        check_tickle(&sched.sleep(UnitId(u as u32), now));
                        runnable[u] = false;
                        rewake[u] = true;
                    }
                    sched.set_affinity(UnitId(u as u32), set, all).unwrap();
                    hard[u] = set;
                }
                Op::Params(u, weight, cap) => {
                    let u = u % units;
                    let params = SchedParams {
                        weight: weight.max(1),
                        cap_percent: cap % 101,
                        ..SchedParams::default()
                    };
                    sched.set_unit_params(UnitId(u as u32), &params).unwrap();
                }
            }
        }
        let Some(bound) = starvation_bound_ns else {
            return;
        };
        // Settle: everyone runnable, slices and tickles honoured.
        for (u, flag) in runnable.iter_mut().enumerate() {
            if !*flag && !rewake[u] {
                check_tickle(&sched.wake(UnitId(u as u32), now, WakeReason::Event));
                *flag = true;
            }
        }
        // Every resource decides at once first.
        let mut deadline = [now; 3];
        let mut last_ran = vec![now; units];
        let end = now + 4 * bound;
        while now < end {
            now = deadline.iter().copied().min().unwrap_or(Time::MAX).min(end);
            let mut tickled = Tickle::new();
            for (r, slot) in deadline.iter_mut().enumerate() {
                for (u, at) in last_ran.iter_mut().enumerate() {
                    if running[u].is_some() {
                        *at = now;
                    }
                }
                if *slot <= now {
                    let (slice, tickle) =
                        dispatch(sched, r, now, &runnable, &mut running, &mut leader, &hard);
                    *slot = slice.slice_ns.map_or(Time::MAX, |ns| now + ns);
                    tickled = tickled.union(&tickle);
                }
            }
            tickled = tickled.union(&release_rewakes(
                sched,
                now,
                &running,
                &mut runnable,
                &mut rewake,
            ));
            for (r, slot) in deadline.iter_mut().enumerate() {
                if tickled.contains(pool[r].id.0) {
                    *slot = now;
                }
            }
            for (u, at) in last_ran.iter_mut().enumerate() {
                if running[u].is_some() {
                    *at = now;
                }
                assert!(now - *at <= bound, "unit {u} starved for {} ns", now - *at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::SCHEDULER_NAMES;

    #[test]
    fn create_knows_the_names_and_lists_them_otherwise() {
        for name in ["credit2", "credit", "null"] {
            assert_eq!(create(name).unwrap().name(), name);
        }
        assert_eq!(create(DEFAULT_SCHEDULER).unwrap().name(), "credit2");
        let err = create("bfs").err().unwrap();
        assert_eq!(err, SchedError::UnknownScheduler);
        let message = alloc::format!("{err}");
        for name in SCHEDULER_NAMES.split(", ") {
            assert!(message.contains(name), "{message} lacks {name}");
        }
    }

    #[test]
    fn pool_params_are_parsed_and_checked() {
        let mut sched = create_with_params("credit2", "ratelimit_us=500, runqueue=socket").unwrap();
        assert_eq!(
            apply_pool_params(sched.as_mut(), "ratelimit_us"),
            Err(SchedError::InvalidParam {
                param: "pool parameter",
                expected: "key=value"
            })
        );
        let err = apply_pool_params(sched.as_mut(), "bogus=1").unwrap_err();
        assert!(matches!(
            err,
            SchedError::UnknownParam {
                scheduler: "credit2",
                ..
            }
        ));
        assert!(alloc::format!("{err}").contains("ratelimit_us"));
        assert!(create_with_params("credit", "tslice_ms=0").is_err());
        assert!(create_with_params("nope", "").is_err());
    }

    #[test]
    fn heap_orders_and_removes_anywhere() {
        let keys = [5u32, 3, 9, 1, 7, 9, 2, 8];
        let before = |a: UnitId, b: UnitId| (keys[a.0 as usize], b.0) > (keys[b.0 as usize], a.0);
        let mut pos = alloc::vec![NOT_QUEUED; keys.len()];
        let mut heap = IndexedHeap::new();
        heap.reserve_for(keys.len());
        for u in 0..keys.len() as u32 {
            heap.push(UnitId(u), &mut pos, &before);
        }
        assert!(heap.remove(UnitId(2), &mut pos, &before));
        assert!(!heap.remove(UnitId(2), &mut pos, &before));
        assert_eq!(pos[2], NOT_QUEUED);
        let mut order = Vec::new();
        while let Some(top) = heap.peek() {
            assert!(heap.remove(top, &mut pos, &before));
            order.push(top.0);
        }
        assert_eq!(order, alloc::vec![5, 7, 4, 0, 1, 6, 3]);
        assert_eq!(heap.len(), 0);
    }

    #[test]
    fn fifo_list_keeps_order_and_removes_anywhere() {
        let mut links = alloc::vec![Link::UNLINKED; 6];
        let mut list = FifoList::new();
        for u in [3, 1, 4, 0, 5] {
            list.push_back(&mut links, UnitId(u));
        }
        list.remove(&mut links, UnitId(4));
        list.remove(&mut links, UnitId(3));
        list.remove(&mut links, UnitId(5));
        list.push_back(&mut links, UnitId(2));
        assert_eq!(
            list.iter(&links).map(|u| u.0).collect::<Vec<_>>(),
            alloc::vec![1, 0, 2]
        );
        assert_eq!(list.front(), Some(UnitId(1)));
        list.remove(&mut links, UnitId(1));
        assert_eq!(list.len(), 2);
        assert!(!list.is_empty());
    }
}
