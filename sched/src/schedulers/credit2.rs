//! Credit2, the default scheduler, after Xen's `sched_credit2.c` made unit-aware.
//!
//! * Every unit has credit (in ns of weight-scaled run time). Running burns it at
//!   `max_weight / weight` ns per ns, so a heavier unit burns slower. The unit
//!   with the most credit runs; when the one chosen has none left, every unit of
//!   the runqueue gets [`CREDIT_INIT_NS`] more (clipped, so a sleeper cannot hoard).
//! * Runqueues group resources by cluster (default), socket, one per resource, or
//!   all together (`runqueue=`); a unit is queued in one runqueue and may run on
//!   any of its resources. Units move between runqueues when they wake and when
//!   an idle or less loaded runqueue pulls from a busier one (load balancing).
//! * Caps: a capped unit has a budget of `cap% x` [`CAP_PERIOD_NS`] per period;
//!   once spent it is parked until the next period.
//! * Ratelimit: a running unit is not preempted before `ratelimit_us`.
//! * Tickling: a wake-up reschedules an idle resource of the runqueue if there
//!   is one, else the resource running the lowest-credit unit if the woken unit
//!   has more; a per-resource "tickled" flag avoids kicking a resource twice.
//!
//! Hot path: the queued units of a runqueue are in an indexed max-heap keyed by
//! credit (O(log n) pick, insert and removal). A unit whose hard affinity does not
//! cover all resources of its runqueue is kept in a per-resource heap instead,
//! so a pick never has to skip units that cannot run here. The credit reset is
//! O(1): it bumps a per-runqueue total that every unit's credit is read against
//! (the reset is monotone, so the heaps stay ordered).

use alloc::vec;
use alloc::vec::Vec;

use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};

use super::{IndexedHeap, NOT_QUEUED, parse_in_range, resource_allowed};

/// Credit given at each reset (Xen's `CSCHED2_CREDIT_INIT`, 10 ms).
pub const CREDIT_INIT_NS: i64 = 10_000_000;
/// Most credit carried over a reset (Xen's `CSCHED2_CARRYOVER_MAX`).
pub const CARRYOVER_MAX_NS: i64 = 500_000;
/// Shortest slice handed out (Xen's `CSCHED2_MIN_TIMER`).
pub const MIN_SLICE_NS: i64 = 500_000;
/// Longest slice handed out (Xen's `CSCHED2_MAX_TIMER`).
pub const MAX_SLICE_NS: i64 = 10_000_000;
/// Budget replenishment period for caps (Xen's `CSCHED2_BDGT_REPL_PERIOD`).
pub const CAP_PERIOD_NS: Time = 10_000_000;
/// How often a busy resource looks for a busier runqueue to pull from.
pub const BALANCE_INTERVAL_NS: Time = 1_000_000;
/// Default ratelimit (Xen's `SCHED_DEFAULT_RATELIMIT_US`).
pub const DEFAULT_RATELIMIT_US: u64 = 1000;
/// Largest ratelimit accepted (Xen's `XEN_SYSCTL_SCHED_RATELIMIT_MAX`).
pub const MAX_RATELIMIT_US: u64 = 500_000;
/// Credit never exceeds this after a reset.
const CREDIT_MAX_NS: i64 = CREDIT_INIT_NS + CARRYOVER_MAX_NS;
/// Queued units a balance pass looks at in the busier runqueue (bounds its cost).
const BALANCE_SCAN: usize = 16;
/// Valid pool parameters.
pub const POOL_PARAMS: &str = "ratelimit_us, runqueue";

/// How resources are grouped into runqueues (`runqueue=` pool parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunqueueGrouping {
    /// One runqueue per resource.
    Resource,
    /// One per cluster (the default: on big.LITTLE a cluster is one capacity class).
    Cluster,
    /// One per socket.
    Socket,
    /// One for the whole pool.
    All,
}

impl RunqueueGrouping {
    fn key(self, info: &ResourceInfo) -> (u64, u64) {
        match self {
            Self::Resource => (info.id.0 as u64, 0),
            Self::Cluster => (u64::from(info.socket), u64::from(info.cluster)),
            Self::Socket => (u64::from(info.socket), 0),
            Self::All => (0, 0),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    None,
    /// In the shared heap of this runqueue.
    Shared(usize),
    /// In the local heap of this (dense) resource.
    Local(usize),
}

#[derive(Clone, Debug)]
struct Unit {
    present: bool,
    domain: DomainId,
    weight: u16,
    cap_percent: u16,
    hard: CpuSet,
    soft: CpuSet,
    /// Master CPUs of the pool resources inside the hard affinity.
    allowed: CpuSet,
    /// The resource the unit is assigned to (queued on, or last ran on).
    res: ResourceId,
    /// Runqueue of `res`.
    rq: usize,
    runnable: bool,
    running_on: Option<ResourceId>,
    queue: Queue,
    parked: bool,
    in_parked_list: bool,
    yielded: bool,
    /// Credit as of `snapshot` (the runqueue's reset total when last updated).
    credit: i64,
    snapshot: i64,
    budget_ns: i64,
    budget_epoch: u64,
    run_since: Time,
    last_account: Time,
    seq: u64,
    runtime_ns: Time,
    dispatches: u64,
}

impl Unit {
    const ABSENT: Unit = Unit {
        present: false,
        domain: DomainId(0),
        weight: 256,
        cap_percent: 0,
        hard: CpuSet::new(),
        soft: CpuSet::new(),
        allowed: CpuSet::new(),
        res: ResourceId(0),
        rq: 0,
        runnable: false,
        running_on: None,
        queue: Queue::None,
        parked: false,
        in_parked_list: false,
        yielded: false,
        credit: CREDIT_INIT_NS,
        snapshot: 0,
        budget_ns: 0,
        budget_epoch: 0,
        run_since: 0,
        last_account: 0,
        seq: 0,
        runtime_ns: 0,
        dispatches: 0,
    };

    /// Credit now, given the runqueue's reset total.
    fn credit_at(&self, reset_total: i64) -> i64 {
        (self.credit + (reset_total - self.snapshot)).min(CREDIT_MAX_NS)
    }

    fn full_budget(&self) -> i64 {
        (CAP_PERIOD_NS as i64) * i64::from(self.cap_percent) / 100
    }
}

#[derive(Clone, Debug)]
struct Resource {
    info: ResourceInfo,
    rq: usize,
    current: Option<UnitId>,
    siblings: Vec<UnitId>,
    tickled: bool,
}

#[derive(Clone, Debug)]
struct Runqueue {
    key: (u64, u64),
    /// Master CPUs of its resources.
    resources: CpuSet,
    nres: usize,
    /// Runnable units assigned to it (queued, running or parked).
    load: usize,
    reset_total: i64,
    last_balance: Time,
}

/// The credit2 scheduler of one pool.
pub struct Credit2 {
    ratelimit_ns: Time,
    grouping: RunqueueGrouping,
    units: Vec<Unit>,
    heap_pos: Vec<u32>,
    unit_count: usize,
    max_weight: u16,
    resources: Vec<Resource>,
    res_index: Vec<u16>,
    rqs: Vec<Runqueue>,
    shared: Vec<IndexedHeap>,
    local: Vec<IndexedHeap>,
    parked: Vec<UnitId>,
    cap_epoch: u64,
    seq: u64,
}

const NO_INDEX: u16 = u16::MAX;

/// "a runs before b": more credit first, then first queued.
fn runs_before(units: &[Unit], reset_total: i64, a: UnitId, b: UnitId) -> bool {
    let (ua, ub) = (&units[a.0 as usize], &units[b.0 as usize]);
    let (ca, cb) = (ua.credit_at(reset_total), ub.credit_at(reset_total));
    ca > cb || (ca == cb && ua.seq < ub.seq)
}

fn cap_epoch(now: Time) -> u64 {
    now / CAP_PERIOD_NS
}

impl Default for Credit2 {
    fn default() -> Self {
        Self::new()
    }
}

impl Credit2 {
    /// An empty scheduler with Xen's defaults (ratelimit 1 ms, runqueue per cluster).
    pub fn new() -> Self {
        Self {
            ratelimit_ns: DEFAULT_RATELIMIT_US * 1000,
            grouping: RunqueueGrouping::Cluster,
            units: Vec::new(),
            heap_pos: Vec::new(),
            unit_count: 0,
            max_weight: 1,
            resources: Vec::new(),
            res_index: vec![NO_INDEX; MAX_CPUS],
            rqs: Vec::new(),
            shared: Vec::new(),
            local: Vec::new(),
            parked: Vec::new(),
            cap_epoch: 0,
            seq: 0,
        }
    }

    /// The runqueue grouping in force.
    pub fn grouping(&self) -> RunqueueGrouping {
        self.grouping
    }

    /// Number of runqueues.
    pub fn runqueue_count(&self) -> usize {
        self.rqs.len()
    }

    /// Index of the runqueue a resource belongs to.
    pub fn runqueue_of(&self, resource: ResourceId) -> Option<usize> {
        self.index(resource).map(|ri| self.resources[ri].rq)
    }

    /// The resource a unit is assigned to (queued on, or last ran on).
    pub fn assigned_resource(&self, unit: UnitId) -> Option<ResourceId> {
        self.unit(unit).map(|u| u.res)
    }

    fn index(&self, resource: ResourceId) -> Option<usize> {
        let i = *self.res_index.get(resource.0)?;
        (i != NO_INDEX).then_some(i as usize)
    }

    fn unit(&self, unit: UnitId) -> Option<&Unit> {
        self.units.get(unit.0 as usize).filter(|u| u.present)
    }

    fn credit_of(&self, u: UnitId) -> i64 {
        let unit = &self.units[u.0 as usize];
        unit.credit_at(self.rqs.get(unit.rq).map_or(0, |rq| rq.reset_total))
    }

    /// Credit of a running unit including what it burnt since its last accounting.
    fn live_credit(&self, u: UnitId, now: Time) -> i64 {
        let unit = &self.units[u.0 as usize];
        self.credit_of(u) - self.burn(unit.weight, now.saturating_sub(unit.last_account))
    }

    fn burn(&self, weight: u16, delta: Time) -> i64 {
        let burnt = u128::from(delta) * u128::from(self.max_weight) / u128::from(weight.max(1));
        burnt.min(i64::MAX as u128) as i64
    }

    /// Time a unit of `weight` takes to burn `credit`.
    fn credit_to_time(&self, weight: u16, credit: i64) -> i64 {
        (i128::from(credit) * i128::from(weight) / i128::from(self.max_weight.max(1))) as i64
    }

    /// Brings the stored credit up to the runqueue's resets.
    fn normalize(&mut self, u: UnitId) {
        let total = self
            .rqs
            .get(self.units[u.0 as usize].rq)
            .map_or(0, |rq| rq.reset_total);
        let unit = &mut self.units[u.0 as usize];
        unit.credit = unit.credit_at(total);
        unit.snapshot = total;
    }

    fn recompute_max_weight(&mut self) {
        self.max_weight = self
            .units
            .iter()
            .filter(|u| u.present)
            .map(|u| u.weight)
            .max()
            .unwrap_or(1)
            .max(1);
    }

    fn allowed_resources(&self, hard: &CpuSet) -> CpuSet {
        self.resources
            .iter()
            .filter(|r| resource_allowed(hard, &r.info))
            .map(|r| r.info.id.0)
            .collect()
    }

    fn is_idle(&self, ri: usize) -> bool {
        let r = &self.resources[ri];
        r.current.is_none() && !r.tickled
    }

    /// Moves a (not queued) unit's assignment to `res`, keeping its credit and
    /// the runqueue loads right.
    fn assign(&mut self, u: UnitId, res: ResourceId) {
        let Some(ri) = self.index(res) else { return };
        let new_rq = self.resources[ri].rq;
        self.normalize(u);
        let unit = &mut self.units[u.0 as usize];
        let old_rq = unit.rq;
        unit.res = res;
        if old_rq != new_rq {
            unit.rq = new_rq;
            unit.snapshot = self.rqs[new_rq].reset_total;
            if unit.runnable {
                if let Some(rq) = self.rqs.get_mut(old_rq) {
                    rq.load -= 1;
                }
                self.rqs[new_rq].load += 1;
            }
        }
    }

    /// Where a unit should go: an idle allowed resource (its own first, then its
    /// runqueue's, then any, preferring soft affinity), else a less loaded
    /// runqueue, else where it is.
    fn choose_resource(&self, u: UnitId) -> ResourceId {
        let unit = &self.units[u.0 as usize];
        let own = self
            .index(unit.res)
            .filter(|_| unit.allowed.contains(unit.res.0));
        if let Some(ri) = own
            && self.is_idle(ri)
        {
            return unit.res;
        }
        let preferred = self
            .allowed_resources(&unit.soft)
            .intersection(&unit.allowed);
        let own_rq_resources = self
            .rqs
            .get(unit.rq)
            .map(|rq| rq.resources)
            .unwrap_or_default();
        for set in [
            preferred.intersection(&own_rq_resources),
            unit.allowed.intersection(&own_rq_resources),
            preferred,
            unit.allowed,
        ] {
            for cpu in set.iter() {
                if let Some(ri) = self.index(ResourceId(cpu))
                    && self.is_idle(ri)
                {
                    return ResourceId(cpu);
                }
            }
        }
        // No idle resource: the least loaded runqueue (per resource) we may use.
        let mut best: Option<(usize, ResourceId)> = None;
        for (index, rq) in self.rqs.iter().enumerate() {
            let Some(first) = rq.resources.intersection(&unit.allowed).first() else {
                continue;
            };
            let candidate = if index == unit.rq && own.is_some() {
                unit.res
            } else {
                ResourceId(first)
            };
            let lighter = match best {
                None => true,
                Some((b, _)) => {
                    self.load_with(index, u) * self.rqs[b].nres < self.load_with(b, u) * rq.nres
                }
            };
            if lighter {
                best = Some((index, candidate));
            }
        }
        match (own, best) {
            (Some(ri), Some((b, candidate))) if b != self.resources[ri].rq => {
                // Move only if that runqueue is lighter by at least one unit.
                let mine_rq = self.resources[ri].rq;
                let (mine, theirs) = (self.load_with(mine_rq, u), self.load_with(b, u));
                if theirs * self.rqs[mine_rq].nres + self.rqs[b].nres <= mine * self.rqs[b].nres {
                    candidate
                } else {
                    unit.res
                }
            }
            (Some(_), _) => unit.res,
            (None, Some((_, candidate))) => candidate,
            (None, None) => self.resources.first().map_or(unit.res, |r| r.info.id),
        }
    }

    /// Load of runqueue `rq` if `u` (runnable) were in it.
    fn load_with(&self, rq: usize, u: UnitId) -> usize {
        let unit = &self.units[u.0 as usize];
        self.rqs[rq].load + usize::from(!(unit.rq == rq && unit.runnable))
    }

    /// Queues a runnable, not running, not parked unit on its resource.
    fn enqueue(&mut self, u: UnitId) {
        let unit = &self.units[u.0 as usize];
        debug_assert!(unit.runnable && unit.running_on.is_none() && unit.queue == Queue::None);
        if !unit.allowed.contains(unit.res.0) || self.index(unit.res).is_none() {
            let res = self.choose_resource(u);
            self.assign(u, res);
        }
        let Some(ri) = self.index(self.units[u.0 as usize].res) else {
            return;
        };
        let rq = self.resources[ri].rq;
        self.normalize(u);
        self.seq += 1;
        let unit = &mut self.units[u.0 as usize];
        unit.seq = self.seq;
        let total = self.rqs[rq].reset_total;
        let units = &self.units;
        let before = |a, b| runs_before(units, total, a, b);
        if self.rqs[rq]
            .resources
            .is_subset(&units[u.0 as usize].allowed)
        {
            self.shared[rq].push(u, &mut self.heap_pos, &before);
            self.units[u.0 as usize].queue = Queue::Shared(rq);
        } else {
            self.local[ri].push(u, &mut self.heap_pos, &before);
            self.units[u.0 as usize].queue = Queue::Local(ri);
        }
    }

    fn dequeue(&mut self, u: UnitId) {
        let queue = self.units[u.0 as usize].queue;
        let (heap, rq) = match queue {
            Queue::None => return,
            Queue::Shared(rq) => (&mut self.shared[rq], rq),
            Queue::Local(ri) => (&mut self.local[ri], self.resources[ri].rq),
        };
        let total = self.rqs[rq].reset_total;
        let units = &self.units;
        let removed = heap.remove(u, &mut self.heap_pos, &|a, b| {
            runs_before(units, total, a, b)
        });
        debug_assert!(removed);
        self.units[u.0 as usize].queue = Queue::None;
    }

    /// Refills a capped unit's budget for the periods since it was last topped up.
    fn refill(&mut self, u: UnitId, epoch: u64) {
        let unit = &mut self.units[u.0 as usize];
        if unit.cap_percent == 0 || unit.budget_epoch >= epoch {
            return;
        }
        let full = unit.full_budget();
        let periods = (epoch - unit.budget_epoch).min(1 << 20) as i64;
        unit.budget_ns = (unit.budget_ns + full * periods).min(full);
        unit.budget_epoch = epoch;
    }

    /// Puts a runnable unit that is not running back in play: queued, or parked
    /// when its cap budget is spent.
    fn requeue(&mut self, u: UnitId, now: Time) {
        self.refill(u, cap_epoch(now));
        let unit = &mut self.units[u.0 as usize];
        if unit.cap_percent != 0 && unit.budget_ns <= 0 {
            unit.parked = true;
            if !unit.in_parked_list {
                unit.in_parked_list = true;
                debug_assert!(self.parked.len() < self.parked.capacity());
                self.parked.push(u);
            }
            return;
        }
        self.enqueue(u);
    }

    /// At a new cap period, gives parked units their budget back.
    fn unpark(&mut self, now: Time) {
        let epoch = cap_epoch(now);
        if self.parked.is_empty() || epoch <= self.cap_epoch {
            return;
        }
        self.cap_epoch = epoch;
        let mut i = 0;
        while i < self.parked.len() {
            let u = self.parked[i];
            let unit = &self.units[u.0 as usize];
            if !unit.present || !unit.parked {
                self.units[u.0 as usize].in_parked_list = false;
                self.parked.swap_remove(i);
                continue;
            }
            self.refill(u, epoch);
            if self.units[u.0 as usize].budget_ns > 0 {
                let unit = &mut self.units[u.0 as usize];
                unit.parked = false;
                unit.in_parked_list = false;
                let ready = unit.runnable && unit.running_on.is_none();
                self.parked.swap_remove(i);
                if ready {
                    self.enqueue(u);
                }
                continue;
            }
            i += 1;
        }
    }

    /// Charges a running unit for the time since it was last charged.
    fn account(&mut self, u: UnitId, now: Time) {
        let start = self.units[u.0 as usize].last_account;
        let delta = now.saturating_sub(start);
        self.normalize(u);
        let burnt = self.burn(self.units[u.0 as usize].weight, delta);
        self.refill(u, cap_epoch(start));
        let unit = &mut self.units[u.0 as usize];
        unit.credit = unit.credit.saturating_sub(burnt);
        unit.runtime_ns += delta;
        unit.last_account = now;
        if unit.cap_percent != 0 {
            unit.budget_ns -= delta as i64;
        }
    }

    /// The best queued unit resource `ri` may run.
    fn best_candidate(&self, ri: usize) -> Option<UnitId> {
        let rq = self.resources[ri].rq;
        let total = self.rqs[rq].reset_total;
        match (self.shared[rq].peek(), self.local[ri].peek()) {
            (Some(a), Some(b)) => Some(if runs_before(&self.units, total, a, b) {
                a
            } else {
                b
            }),
            (a, b) => a.or(b),
        }
    }

    /// Pulls one unit from the busiest runqueue if it is busier than ours by
    /// more than one unit (per resource).
    fn balance(&mut self, ri: usize, now: Time) {
        let rq = self.resources[ri].rq;
        self.rqs[rq].last_balance = now;
        let here = self.resources[ri].info.id;
        let (my_load, my_n) = (self.rqs[rq].load, self.rqs[rq].nres);
        let mut busiest: Option<usize> = None;
        for (index, other) in self.rqs.iter().enumerate() {
            if index == rq || other.nres == 0 || self.shared[index].len() == 0 {
                continue;
            }
            // other.load / other.nres > (my_load + 1) / my_n
            if other.load * my_n <= (my_load + 1) * other.nres {
                continue;
            }
            match busiest {
                Some(b) if self.rqs[b].load * other.nres >= other.load * self.rqs[b].nres => {}
                _ => busiest = Some(index),
            }
        }
        let Some(from) = busiest else { return };
        let pick = self.shared[from]
            .items()
            .iter()
            .take(BALANCE_SCAN)
            .copied()
            .find(|u| self.units[u.0 as usize].allowed.contains(here.0));
        if let Some(u) = pick {
            self.dequeue(u);
            self.assign(u, here);
            self.enqueue(u);
        }
    }

    /// Slice for `u` about to run on `ri`: until its credit falls to the next
    /// candidate's, within the min/max slice, at least the ratelimit left, and
    /// never beyond its cap budget or the cap period.
    fn slice_for(&self, u: UnitId, ri: usize, now: Time) -> Time {
        let unit = &self.units[u.0 as usize];
        let credit = self.credit_of(u);
        let margin = match self.best_candidate(ri) {
            Some(next) => credit - self.credit_of(next),
            None => credit,
        };
        let mut slice = self
            .credit_to_time(unit.weight, margin)
            .clamp(MIN_SLICE_NS, MAX_SLICE_NS);
        if self.ratelimit_ns > 0 {
            let ran = now.saturating_sub(unit.run_since);
            slice = slice.max(self.ratelimit_ns.saturating_sub(ran) as i64);
        }
        if unit.cap_percent != 0 {
            let period_left = (CAP_PERIOD_NS - now % CAP_PERIOD_NS) as i64;
            slice = slice.min(unit.budget_ns.max(1)).min(period_left);
        }
        slice.max(1) as Time
    }

    fn tickle_set(&mut self, ri: usize) -> Tickle {
        self.resources[ri].tickled = true;
        CpuSet::single(self.resources[ri].info.id.0)
    }

    /// Resources to reschedule for a unit just queued: an idle one it may run
    /// on, else the one running the lowest-credit unit if ours has more.
    fn tickle(&mut self, u: UnitId, now: Time) -> Tickle {
        let unit = &self.units[u.0 as usize];
        let candidates = match unit.queue {
            Queue::Shared(rq) => self.rqs[rq].resources.intersection(&unit.allowed),
            Queue::Local(ri) => CpuSet::single(self.resources[ri].info.id.0),
            Queue::None => return CpuSet::new(),
        };
        if let Some(ri) = self.index(unit.res)
            && candidates.contains(unit.res.0)
            && self.is_idle(ri)
        {
            return self.tickle_set(ri);
        }
        let mut lowest: Option<(usize, i64)> = None;
        for cpu in candidates.iter() {
            let Some(ri) = self.index(ResourceId(cpu)) else {
                continue;
            };
            let r = &self.resources[ri];
            if r.tickled {
                continue;
            }
            match r.current {
                None => return self.tickle_set(ri),
                Some(cur) => {
                    let credit = self.live_credit(cur, now);
                    if lowest.is_none_or(|(_, c)| credit < c) {
                        lowest = Some((ri, credit));
                    }
                }
            }
        }
        match lowest {
            Some((ri, credit)) if self.credit_of(u) > credit => self.tickle_set(ri),
            _ => CpuSet::new(),
        }
    }

    /// Regroups runqueues and re-sorts every queued unit (resources or grouping
    /// changed). Not on the hot path: it may allocate.
    fn rebuild(&mut self) {
        let mut requeue = Vec::new();
        for index in 0..self.units.len() {
            if !self.units[index].present {
                continue;
            }
            let u = UnitId(index as u32);
            self.normalize(u);
            if self.units[index].queue != Queue::None {
                self.dequeue(u);
                requeue.push(u);
            }
        }
        self.rqs.clear();
        for index in 0..self.resources.len() {
            let key = self.grouping.key(&self.resources[index].info);
            let id = self.resources[index].info.id.0;
            let rq = match self.rqs.iter().position(|rq| rq.key == key) {
                Some(rq) => rq,
                None => {
                    self.rqs.push(Runqueue {
                        key,
                        resources: CpuSet::new(),
                        nres: 0,
                        load: 0,
                        reset_total: 0,
                        last_balance: 0,
                    });
                    self.rqs.len() - 1
                }
            };
            self.rqs[rq].resources.insert(id);
            self.rqs[rq].nres += 1;
            self.resources[index].rq = rq;
        }
        self.shared.resize_with(self.rqs.len(), IndexedHeap::new);
        self.shared.truncate(self.rqs.len());
        self.local
            .resize_with(self.resources.len(), IndexedHeap::new);
        self.local.truncate(self.resources.len());
        let all: CpuSet = self.resources.iter().map(|r| r.info.id.0).collect();
        for index in 0..self.units.len() {
            if !self.units[index].present {
                continue;
            }
            let mut allowed = self.allowed_resources(&self.units[index].hard);
            if allowed.is_empty() {
                // The last resource of its affinity left: like Xen, break the
                // affinity rather than strand the unit.
                allowed = all;
            }
            let res = self.units[index].res;
            let rq = self.index(res).map_or(0, |ri| self.resources[ri].rq);
            let unit = &mut self.units[index];
            unit.allowed = allowed;
            unit.rq = rq;
            unit.snapshot = 0;
            if unit.runnable
                && let Some(q) = self.rqs.get_mut(rq)
            {
                q.load += 1;
            }
        }
        self.reserve();
        for u in requeue {
            self.enqueue(u);
        }
    }

    /// Sizes every table so the hot path never allocates.
    fn reserve(&mut self) {
        let slots = self.units.len();
        for heap in self.shared.iter_mut().chain(self.local.iter_mut()) {
            heap.reserve_for(slots);
        }
        self.parked.reserve(slots.saturating_sub(self.parked.len()));
        for r in &mut self.resources {
            let want = r.info.cpus.len().max(1);
            r.siblings.reserve(want.saturating_sub(r.siblings.len()));
        }
    }

    fn check_params(params: &SchedParams) -> Result<(), SchedError> {
        if params.weight == 0 {
            return Err(SchedError::InvalidParam {
                param: "weight",
                expected: "1..=65535",
            });
        }
        if params.cap_percent > 100 {
            return Err(SchedError::InvalidParam {
                param: "cap_percent",
                expected: "0 (uncapped) or 1..=100",
            });
        }
        Ok(())
    }
}

impl Scheduler for Credit2 {
    fn name(&self) -> &'static str {
        "credit2"
    }

    fn set_pool_param(&mut self, key: &str, value: &str) -> Result<(), SchedError> {
        match key {
            "ratelimit_us" => {
                let us = parse_in_range(
                    value,
                    "ratelimit_us",
                    0,
                    MAX_RATELIMIT_US,
                    "0 (off) or 100..=500000",
                )?;
                if us != 0 && us < 100 {
                    return Err(SchedError::InvalidParam {
                        param: "ratelimit_us",
                        expected: "0 (off) or 100..=500000",
                    });
                }
                self.ratelimit_ns = us * 1000;
                Ok(())
            }
            "runqueue" => {
                self.grouping = match value {
                    "resource" => RunqueueGrouping::Resource,
                    "cluster" => RunqueueGrouping::Cluster,
                    "socket" => RunqueueGrouping::Socket,
                    "all" => RunqueueGrouping::All,
                    _ => {
                        return Err(SchedError::InvalidParam {
                            param: "runqueue",
                            expected: "resource, cluster, socket or all",
                        });
                    }
                };
                self.rebuild();
                Ok(())
            }
            _ => Err(SchedError::UnknownParam {
                scheduler: "credit2",
                valid: POOL_PARAMS,
            }),
        }
    }

    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError> {
        if info.id.0 >= MAX_CPUS || info.cpus.is_empty() {
            return Err(SchedError::UnknownResource(info.id));
        }
        if self.index(info.id).is_some() {
            return Err(SchedError::ResourceBusy(info.id));
        }
        self.res_index[info.id.0] = self.resources.len() as u16;
        self.resources.push(Resource {
            info,
            rq: 0,
            current: None,
            siblings: Vec::new(),
            tickled: false,
        });
        self.rebuild();
        Ok(())
    }

    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError> {
        let ri = self.index(id).ok_or(SchedError::UnknownResource(id))?;
        let busy = self.resources[ri].current.is_some()
            || !self.resources[ri].siblings.is_empty()
            || self
                .units
                .iter()
                .any(|u| u.present && (u.res == id || u.running_on == Some(id)));
        if busy {
            return Err(SchedError::ResourceBusy(id));
        }
        // Take every queued unit out while the dense indices are still valid.
        let mut requeue = Vec::new();
        for index in 0..self.units.len() {
            if self.units[index].present && self.units[index].queue != Queue::None {
                self.normalize(UnitId(index as u32));
                self.dequeue(UnitId(index as u32));
                requeue.push(UnitId(index as u32));
            }
        }
        self.resources.remove(ri);
        self.local.remove(ri);
        self.res_index.fill(NO_INDEX);
        for (index, r) in self.resources.iter().enumerate() {
            self.res_index[r.info.id.0] = index as u16;
        }
        self.rebuild();
        for u in requeue {
            self.enqueue(u);
        }
        Ok(())
    }

    fn insert_unit(&mut self, info: &UnitInfo, now: Time) -> Result<ResourceId, SchedError> {
        Self::check_params(&info.params)?;
        let slot = info.id.0 as usize;
        if self.unit(info.id).is_some() {
            return Err(SchedError::InvalidParam {
                param: "unit",
                expected: "a unit id not already in the pool",
            });
        }
        let allowed = self.allowed_resources(&info.hard_affinity);
        if allowed.is_empty() {
            return Err(SchedError::NoResourceInAffinity(info.id));
        }
        if self.units.len() <= slot {
            self.units.resize(slot + 1, Unit::ABSENT);
            self.heap_pos.resize(slot + 1, NOT_QUEUED);
        }
        let first = ResourceId(allowed.first().unwrap_or(0));
        let rq = self.index(first).map_or(0, |ri| self.resources[ri].rq);
        self.units[slot] = Unit {
            present: true,
            domain: info.domain,
            weight: info.params.weight,
            cap_percent: info.params.cap_percent,
            hard: info.hard_affinity,
            soft: info.soft_affinity,
            allowed,
            res: first,
            rq,
            snapshot: self.rqs.get(rq).map_or(0, |q| q.reset_total),
            budget_epoch: cap_epoch(now),
            last_account: now,
            run_since: now,
            ..Unit::ABSENT
        };
        self.units[slot].budget_ns = self.units[slot].full_budget();
        let res = self.choose_resource(info.id);
        self.assign(info.id, res);
        self.unit_count += 1;
        self.recompute_max_weight();
        self.reserve();
        Ok(self.units[slot].res)
    }

    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError> {
        if self.unit(unit).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        self.dequeue(unit);
        if let Some(res) = self.units[unit.0 as usize].running_on
            && let Some(ri) = self.index(res)
        {
            // The framework should have descheduled it; forget it here anyway.
            let r = &mut self.resources[ri];
            if r.current == Some(unit) {
                r.current = None;
            }
            r.siblings.retain(|&s| s != unit);
        }
        let u = &mut self.units[unit.0 as usize];
        if u.runnable
            && let Some(rq) = self.rqs.get_mut(u.rq)
        {
            rq.load -= 1;
        }
        u.present = false;
        u.runnable = false;
        u.parked = false;
        self.unit_count -= 1;
        self.recompute_max_weight();
        Ok(())
    }

    fn wake(&mut self, unit: UnitId, now: Time, _reason: WakeReason) -> Tickle {
        // Credit2 has no boost: a woken unit competes with the credit it has,
        // which is what fixes the I/O latency problem of reference 004.
        let Some(u) = self.unit(unit) else {
            return CpuSet::new();
        };
        if u.runnable {
            // Already runnable (e.g. requeued by a migrate just before): just
            // make sure someone looks at it.
            return if u.queue != Queue::None {
                self.tickle(unit, now)
            } else {
                CpuSet::new()
            };
        }
        let rq = u.rq;
        self.units[unit.0 as usize].runnable = true;
        if let Some(q) = self.rqs.get_mut(rq) {
            q.load += 1;
        }
        if self.units[unit.0 as usize].running_on.is_some() {
            return CpuSet::new();
        }
        self.refill(unit, cap_epoch(now));
        let u = &self.units[unit.0 as usize];
        if u.cap_percent != 0 && u.budget_ns <= 0 {
            self.requeue(unit, now);
            return CpuSet::new();
        }
        let res = self.choose_resource(unit);
        self.assign(unit, res);
        self.enqueue(unit);
        self.tickle(unit, now)
    }

    fn sleep(&mut self, unit: UnitId, _now: Time) -> Tickle {
        let Some(u) = self.unit(unit) else {
            return CpuSet::new();
        };
        let (was_runnable, rq, running_on) = (u.runnable, u.rq, u.running_on);
        if was_runnable && let Some(q) = self.rqs.get_mut(rq) {
            q.load -= 1;
        }
        let u = &mut self.units[unit.0 as usize];
        u.runnable = false;
        u.parked = false;
        self.dequeue(unit);
        match running_on.and_then(|r| self.index(r)) {
            Some(ri) => self.tickle_set(ri),
            None => CpuSet::new(),
        }
    }

    fn yield_unit(&mut self, unit: UnitId, _now: Time) {
        if let Some(u) = self.units.get_mut(unit.0 as usize)
            && u.present
            && u.running_on.is_some()
        {
            u.yielded = true;
        }
    }

    fn pick_resource(&mut self, unit: UnitId, _now: Time) -> ResourceId {
        match self.unit(unit) {
            Some(u) if u.running_on.is_none() => self.choose_resource(unit),
            Some(u) => u.running_on.unwrap_or(u.res),
            None => self.resources.first().map_or(ResourceId(0), |r| r.info.id),
        }
    }

    fn migrate(&mut self, unit: UnitId, to: ResourceId, now: Time) {
        let Some(u) = self.unit(unit) else { return };
        if self.index(to).is_none() || u.running_on.is_some() {
            return;
        }
        let queued = u.queue != Queue::None;
        self.dequeue(unit);
        self.assign(unit, to);
        if queued {
            self.requeue(unit, now);
        }
    }

    fn do_schedule(&mut self, resource: ResourceId, now: Time) -> TaskSlice {
        let Some(ri) = self.index(resource) else {
            return TaskSlice::IDLE;
        };
        self.resources[ri].tickled = false;
        self.unpark(now);

        // Account and requeue every unit that ran here since the last decision.
        while let Some(s) = self.resources[ri].siblings.pop() {
            self.account(s, now);
            self.units[s.0 as usize].running_on = None;
            if self.units[s.0 as usize].runnable {
                self.requeue(s, now);
            }
        }
        let prev = self.resources[ri].current.take();
        let mut keep = None;
        let mut yielded = None;
        if let Some(p) = prev {
            self.account(p, now);
            let unit = &mut self.units[p.0 as usize];
            unit.running_on = None;
            let was_yield = core::mem::take(&mut unit.yielded);
            if unit.runnable {
                self.refill(p, cap_epoch(now));
                let unit = &self.units[p.0 as usize];
                let over_budget = unit.cap_percent != 0 && unit.budget_ns <= 0;
                let may_stay = unit.allowed.contains(resource.0) && !over_budget;
                if may_stay
                    && !was_yield
                    && self.ratelimit_ns > 0
                    && now.saturating_sub(unit.run_since) < self.ratelimit_ns
                {
                    keep = Some(p);
                } else if may_stay && was_yield {
                    yielded = Some(p);
                } else {
                    self.requeue(p, now);
                }
            }
        }

        let rq = self.resources[ri].rq;
        if keep.is_none()
            && (now.saturating_sub(self.rqs[rq].last_balance) >= BALANCE_INTERVAL_NS
                || self.best_candidate(ri).is_none())
        {
            self.balance(ri, now);
        }

        let next = keep.or_else(|| self.best_candidate(ri)).or(yielded);
        if let Some(y) = yielded
            && next != Some(y)
        {
            self.requeue(y, now);
        }
        let Some(n) = next else {
            let slice = (!self.parked.is_empty()).then(|| CAP_PERIOD_NS - now % CAP_PERIOD_NS);
            return TaskSlice {
                unit: None,
                slice_ns: slice,
                migrated: false,
            };
        };
        self.dequeue(n);
        let credit = self.credit_of(n);
        if credit <= 0 {
            // The best unit is out of credit: everyone in the runqueue gets more.
            let times = 1 + if credit < -CREDIT_INIT_NS {
                -credit / CREDIT_INIT_NS
            } else {
                0
            };
            self.rqs[rq].reset_total += times * CREDIT_INIT_NS;
        }
        let unit = &mut self.units[n.0 as usize];
        let migrated = unit.res != resource;
        unit.res = resource;
        unit.running_on = Some(resource);
        unit.last_account = now;
        unit.dispatches += 1;
        if prev != Some(n) {
            unit.run_since = now;
        }
        self.resources[ri].current = Some(n);
        let slice = self.slice_for(n, ri, now);
        TaskSlice {
            unit: Some(n),
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
        let ri = self.index(resource)?;
        let r = &self.resources[ri];
        // Security: only the running leader's domain may fill its siblings.
        let leader = r.current?;
        // Each sibling needs a CPU of its own besides the leader's.
        if self.units[leader.0 as usize].domain != domain
            || r.siblings.len() + 1 >= r.info.cpus.len()
        {
            return None;
        }
        let rq = r.rq;
        let total = self.rqs[rq].reset_total;
        let mut best: Option<UnitId> = None;
        for &u in self.shared[rq].items().iter().chain(self.local[ri].items()) {
            let unit = &self.units[u.0 as usize];
            if unit.domain == domain
                && unit.allowed.contains(resource.0)
                && best.is_none_or(|b| runs_before(&self.units, total, u, b))
            {
                best = Some(u);
            }
        }
        let u = best?;
        self.dequeue(u);
        self.assign(u, resource);
        let unit = &mut self.units[u.0 as usize];
        unit.running_on = Some(resource);
        unit.last_account = now;
        unit.run_since = now;
        unit.dispatches += 1;
        self.resources[ri].siblings.push(u);
        Some(u)
    }

    fn set_unit_params(&mut self, unit: UnitId, params: &SchedParams) -> Result<(), SchedError> {
        if self.unit(unit).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        Self::check_params(params)?;
        let queued = self.units[unit.0 as usize].queue != Queue::None;
        self.dequeue(unit);
        let u = &mut self.units[unit.0 as usize];
        u.weight = params.weight;
        if u.cap_percent != params.cap_percent {
            u.cap_percent = params.cap_percent;
            u.budget_ns = u.full_budget();
        }
        let unpark = u.parked && (u.cap_percent == 0 || u.budget_ns > 0);
        if unpark {
            u.parked = false;
        }
        self.recompute_max_weight();
        let u = &self.units[unit.0 as usize];
        if (queued || unpark) && u.runnable && u.running_on.is_none() {
            let when = u.last_account;
            self.requeue(unit, when);
        }
        Ok(())
    }

    fn set_affinity(&mut self, unit: UnitId, hard: CpuSet, soft: CpuSet) -> Result<(), SchedError> {
        if self.unit(unit).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        let allowed = self.allowed_resources(&hard);
        if allowed.is_empty() {
            return Err(SchedError::NoResourceInAffinity(unit));
        }
        let queued = self.units[unit.0 as usize].queue != Queue::None;
        self.dequeue(unit);
        let u = &mut self.units[unit.0 as usize];
        u.hard = hard;
        u.soft = soft;
        u.allowed = allowed;
        if queued {
            // enqueue() re-places it if its resource is no longer allowed.
            self.enqueue(unit);
        }
        Ok(())
    }

    fn stats(&self, unit: UnitId) -> Option<UnitStats> {
        let u = self.unit(unit)?;
        Some(UnitStats {
            runtime_ns: u.runtime_ns,
            dispatches: u.dispatches,
            credit: self.credit_of(unit),
        })
    }
}
