//! The discrete-event simulator: simulated CPUs on a simulated clock driving
//! the very [`System`] (and schedulers) the hypervisor runs, through the same
//! [`Platform`] trait.
//!
//! # What is simulated
//!
//! * **Time**: one clock in ns; events (IPI arrivals, timer expiries, ends of
//!   context switches, rendezvous releases, guest timers) sit in a priority
//!   queue ordered by (time, insertion order), so equal-time events run in the
//!   order they were raised and a run is a pure function of its inputs and
//!   seed.
//! * **CPUs**: each CPU is free, in a context switch (its old context stopped,
//!   the new one not yet running) or parked at a rendezvous. Kicks and timers
//!   that reach a busy CPU stay pending until it is free, as an interrupt
//!   stays pending while the hypervisor runs with interrupts masked.
//! * **Costs** ([`Costs`]): IPI delivery latency, the context-switch time, the
//!   time a scheduling decision steals from the guest, and the time between
//!   the last arrival at a rendezvous and the release of the waiting CPUs.
//! * **Guests**: each guest is a domain whose vCPUs run guest *tasks* (see
//!   [`Workload`]). A task runs only while its vCPU is loaded on a CPU and the
//!   CPU is not busy in the hypervisor; its speed comes from the SMT model
//!   ([`crate::smt`]) given what the core's other threads run and, for
//!   memory-bound tasks, the socket's memory bandwidth. The guest's own
//!   scheduler is minimal: a task that becomes runnable goes to an idle vCPU
//!   (its previous one if idle), else to the guest's FIFO run queue; a vCPU
//!   whose task sleeps takes the next queued task or blocks
//!   ([`System::vcpu_block`]), and a vCPU given a task is woken
//!   ([`System::vcpu_wake`]). Tasks are not time-sliced or migrated inside the
//!   guest.
//!
//! [`sched::lockstep::Lockstep`] delivers events with no latency and no notion
//! of work; this module keeps its rules (pending kicks, parked waits, the
//! abort on a wait past its bound) and adds latencies and guest progress.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use sched::rendezvous::{AbortResult, Outcome, Poll, RendezvousTable, Ticket};
use sched::{
    CpuContext, CpuSet, DomainId, Granularity, Placement, Platform, PoolId, SchedParams, Step,
    System, SystemConfig, SystemError, Time, Topology, VcpuId,
};

use crate::smt::{self, Class};

/// The hypervisor's costs, as parameters of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Costs {
    /// From `Platform::kick` to the IPI's handler on the target CPU, in ns.
    pub ipi_ns: Time,
    /// A full context switch from one vCPU to another (save the outgoing
    /// vCPU's state, load the incoming one's), in ns. A switch to or from
    /// idle does only one of the two and costs half of it, so the
    /// framework's path through idle (vCPU -> idle -> vCPU) costs what a
    /// direct switch does.
    pub switch_ns: Time,
    /// Guest time lost to each scheduling event (kick or timer) handled on a
    /// CPU, in ns: trap, lock, the scheduler's decision.
    pub decision_ns: Time,
    /// From the last CPU arriving at a rendezvous to the others leaving it,
    /// in ns (a rendezvous of a single CPU completes on arrival: free).
    pub rendezvous_ns: Time,
}

impl Costs {
    /// How long `cpu` takes to switch from `from` to `to`.
    pub fn switch_time(&self, from: CpuContext, to: CpuContext) -> Time {
        match (from.vcpu(), to.vcpu()) {
            (Some(a), Some(b)) if a != b => self.switch_ns,
            (Some(_), Some(_)) | (None, None) => 0,
            _ => self.switch_ns / 2,
        }
    }
}

impl Costs {
    /// Assumed costs of this hypervisor on the benchmark's class of machine:
    /// an IPI in 2 us (SGI/APIC write, exit and entry), a full vCPU switch in
    /// 3 us (GPRs, FP/SIMD, EL1 system registers, stage-2 root), 1 us per
    /// scheduling decision, 0.5 us to see a rendezvous complete. Orders of
    /// magnitude as reported for Xen on x86 and ARM; not measured here.
    pub const HYPERVISOR: Costs = Costs {
        ipi_ns: 2_000,
        switch_ns: 3_000,
        decision_ns: 1_000,
        rendezvous_ns: 500,
    };

    /// No hypervisor: the bare-metal-like configuration.
    pub const ZERO: Costs = Costs {
        ipi_ns: 0,
        switch_ns: 0,
        decision_ns: 0,
        rendezvous_ns: 0,
    };
}

/// A small deterministic PRNG (SplitMix64): the lab must give the same bytes
/// for the same seed on every host, which rules out OS entropy and keeps the
/// dependency list empty.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in `[lo, hi)` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next_u64() % (hi - lo)
        }
    }
}

/// The [`Platform`] the simulator gives `sched`: it records kicks, timer
/// changes and switches for the event loop to turn into events.
#[derive(Debug, Default)]
pub struct SimPlatform {
    now: Cell<Time>,
    kicks: RefCell<Vec<usize>>,
    timers: RefCell<Vec<Option<Time>>>,
    timer_changes: RefCell<Vec<(usize, Time)>>,
    switches: Cell<u64>,
    kicks_sent: Cell<u64>,
}

impl Platform for SimPlatform {
    fn now_ns(&self) -> Time {
        self.now.get()
    }

    fn kick(&self, cpus: &CpuSet) {
        self.kicks_sent
            .set(self.kicks_sent.get() + cpus.len() as u64);
        self.kicks.borrow_mut().extend(cpus.iter());
    }

    fn switch_to(&self, _cpu: usize, _context: CpuContext) {
        self.switches.set(self.switches.get() + 1);
    }

    fn set_timer(&self, cpu: usize, deadline_ns: Option<Time>) {
        let mut timers = self.timers.borrow_mut();
        if timers.len() <= cpu {
            timers.resize(cpu + 1, None);
        }
        timers[cpu] = deadline_ns;
        if let Some(d) = deadline_ns {
            self.timer_changes.borrow_mut().push((cpu, d));
        }
    }
}

/// A guest task, numbered within its guest.
pub type TaskIdx = usize;

/// What a workload asks the guest to do (see [`Ctx`]).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Action {
    Run(TaskIdx, f64),
    Sleep(TaskIdx),
    Exit(TaskIdx),
    Timer(Time, u64),
}

/// A workload's handle on its guest during a callback.
pub struct Ctx<'a> {
    now: Time,
    rng: &'a mut Rng,
    actions: Vec<Action>,
}

impl Ctx<'_> {
    /// The simulated clock, in ns.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The run's random numbers.
    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }

    /// Gives `task` a burst of `work_ns` (ns of work at full speed): a
    /// sleeping task becomes runnable; a running one goes on.
    pub fn run(&mut self, task: TaskIdx, work_ns: Time) {
        self.actions.push(Action::Run(task, work_ns as f64));
    }

    /// `task` sleeps until a later [`Ctx::run`].
    pub fn sleep(&mut self, task: TaskIdx) {
        self.actions.push(Action::Sleep(task));
    }

    /// `task` is finished.
    pub fn exit(&mut self, task: TaskIdx) {
        self.actions.push(Action::Exit(task));
    }

    /// Calls [`Workload::timer`] with `token` at `at` (a device interrupt,
    /// a sleep's end).
    pub fn timer(&mut self, at: Time, token: u64) {
        self.actions.push(Action::Timer(at, token));
    }
}

/// What a workload measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The headline figure (its unit and direction are the workload's).
    pub value: f64,
    /// Wake-up latencies it measured, in ns (from a task becoming runnable to
    /// it running), in the order measured.
    pub latencies_ns: Vec<Time>,
}

/// A guest's tasks and their behaviour. Callbacks run at simulated instants
/// and act through [`Ctx`]; a task whose burst ends and that is given
/// nothing to do sleeps.
pub trait Workload {
    /// The class of each task (their number is the task count).
    fn tasks(&self) -> Vec<Class>;
    /// Starts the workload at time 0.
    fn start(&mut self, ctx: &mut Ctx);
    /// `task` finished the burst it was given.
    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx);
    /// A timer set with [`Ctx::timer`] fired.
    fn timer(&mut self, _token: u64, _ctx: &mut Ctx) {}
    /// `task`, runnable since `woke_at`, started running at `now`.
    fn started(&mut self, _task: TaskIdx, _woke_at: Time, _now: Time) {}
    /// Whether the measurement is over (only the first guest's is asked).
    fn finished(&self) -> bool;
    /// The measurement.
    fn report(&self, now: Time) -> Report;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Kick(usize),
    Timer(usize),
    SwitchDone(usize),
    RendezvousRelease(usize),
    RendezvousTimeout(usize, u32),
    Guest(usize, u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CpuState {
    Free,
    Switching(CpuContext),
    Parked { ticket: Ticket, released: bool },
}

#[derive(Debug)]
struct SimCpu {
    state: CpuState,
    /// The context loaded (last switch finished).
    loaded: CpuContext,
    /// The vCPU whose guest code this CPU executes (switch finished).
    running: Option<VcpuId>,
    /// Guest code makes no progress before this instant (hypervisor work).
    busy_until: Time,
    kick_in_flight: bool,
    pending_kick: bool,
    pending_timer: bool,
    /// CPUs of the same core (SMT siblings), this one excluded.
    siblings: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskState {
    Sleeping,
    Queued,
    OnVcpu(usize),
    Done,
}

#[derive(Debug)]
struct Task {
    class: Class,
    remaining: f64,
    state: TaskState,
    last_vcpu: Option<usize>,
    woke_at: Option<Time>,
}

struct Guest {
    vcpus: Vec<VcpuId>,
    vcpu_task: Vec<Option<TaskIdx>>,
    runq: VecDeque<TaskIdx>,
    tasks: Vec<Task>,
    workload: Box<dyn Workload>,
}

/// One guest of a run: its vCPU count and what it runs.
pub struct GuestSpec {
    /// vCPUs of the domain.
    pub vcpus: u32,
    /// Its workload.
    pub workload: Box<dyn Workload>,
}

/// The machine and hypervisor of a run.
#[derive(Clone, Debug)]
pub struct MachineSpec {
    /// The host's topology.
    pub topology: Topology,
    /// Scheduler of pool 0 (see `sched::schedulers::create`).
    pub scheduler: String,
    /// Pool 0's granularity.
    pub granularity: Granularity,
    /// Pool 0's placement.
    pub placement: Placement,
    /// The hypervisor's costs.
    pub costs: Costs,
    /// Pool 0's scheduler parameters, `key=value` items separated by commas
    /// (e.g. `ratelimit_us=0`); empty for the defaults.
    pub pool_params: String,
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Simulated time at the end, in ns.
    pub end_ns: Time,
    /// Whether the first guest's workload finished before the time limit.
    pub finished: bool,
    /// Context switches.
    pub switches: u64,
    /// Kicks (IPIs) sent.
    pub kicks: u64,
    /// Rendezvous that completed (counted once, by the last CPU to arrive).
    pub rendezvous: u64,
    /// Of those, rendezvous of more than one CPU.
    pub rendezvous_multi: u64,
    /// Rendezvous waits that passed their bound.
    pub rendezvous_timeouts: u64,
    /// Diagnostics `sched` logged.
    pub diagnostics: u64,
    /// Events processed.
    pub events: u64,
}

/// Why a simulation could not be set up.
#[derive(Debug)]
pub enum SimError {
    /// `sched` refused the configuration.
    System(SystemError),
    /// A chart could not be drawn.
    Chart(crate::svg::ChartError),
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SimError::System(e) => write!(f, "sched refused the configuration: {e:?}"),
            SimError::Chart(e) => write!(f, "{e}"),
        }
    }
}

impl From<SystemError> for SimError {
    fn from(e: SystemError) -> Self {
        SimError::System(e)
    }
}

const MAX_STEPS_PER_EVENT: u32 = sched::driver::MAX_STEPS_PER_EVENT;
/// A burst with less work than this left is finished (float rounding).
const DONE_EPSILON: f64 = 1e-6;

/// See the module documentation.
pub struct Sim {
    system: System,
    platform: SimPlatform,
    table: Arc<RendezvousTable>,
    costs: Costs,
    cpus: Vec<SimCpu>,
    guests: Vec<Guest>,
    /// vCPU id → (guest, vCPU index in the guest).
    vcpu_owner: Vec<Option<(usize, usize)>>,
    queue: BinaryHeap<Reverse<(Time, u64, Event)>>,
    seq: u64,
    rng: Rng,
    stats: SimStats,
    /// Check [`System::check_invariants`] after every event (slow; tests).
    pub check_every_event: bool,
    violation: Option<sched::InvariantViolation>,
    /// The run recorded as the hypervisor records it ([`Sim::traced`]).
    trace: Option<trace::Rings>,
    /// When each CPU arrived at its current rendezvous (for the trace).
    arrived_at: Vec<Time>,
}

impl Sim {
    /// Boots `machine` with `guests` (their domains created in pool 0, in
    /// order) and starts every workload at time 0.
    pub fn new(machine: &MachineSpec, guests: Vec<GuestSpec>, seed: u64) -> Result<Self, SimError> {
        Self::build(machine, guests, seed, None)
    }

    /// [`Sim::new`], recording the run from time 0 in the hypervisor's
    /// trace format (`events_per_cpu` per CPU; [`Sim::trace`] reads it), so a
    /// simulation and a hypervisor capture open side by side in one viewer.
    pub fn traced(
        machine: &MachineSpec,
        guests: Vec<GuestSpec>,
        seed: u64,
        events_per_cpu: usize,
    ) -> Result<Self, SimError> {
        Self::build(machine, guests, seed, Some(events_per_cpu))
    }

    fn build(
        machine: &MachineSpec,
        guests: Vec<GuestSpec>,
        seed: u64,
        trace_events: Option<usize>,
    ) -> Result<Self, SimError> {
        let topology = machine.topology.clone();
        let cpus = (0..topology.len())
            .map(|c| {
                let me = topology.cpu(c).copied();
                let siblings = topology
                    .cpus()
                    .iter()
                    .filter(|o| {
                        me.is_some_and(|m| {
                            o.index != m.index
                                && o.socket == m.socket
                                && o.cluster == m.cluster
                                && o.core == m.core
                        })
                    })
                    .map(|o| o.index)
                    .collect();
                SimCpu {
                    state: CpuState::Free,
                    loaded: CpuContext::Idle,
                    running: None,
                    busy_until: 0,
                    kick_in_flight: false,
                    pending_kick: false,
                    pending_timer: false,
                    siblings,
                }
            })
            .collect();
        let mut system = System::new(topology, SystemConfig::default(), sched::schedulers::create);
        let platform = SimPlatform::default();
        system.boot_pool0(
            &machine.scheduler,
            machine.granularity,
            machine.placement,
            &platform,
        )?;
        for item in machine.pool_params.split(',').map(str::trim) {
            if let Some((key, value)) = item.split_once('=') {
                system.pool_set_param(PoolId(0), key.trim(), value.trim())?;
            }
        }
        let mut sim_guests = Vec::new();
        let mut vcpu_owner: Vec<Option<(usize, usize)>> = Vec::new();
        for (g, spec) in guests.into_iter().enumerate() {
            let domain: DomainId =
                system.domain_create(PoolId(0), spec.vcpus, SchedParams::default(), &platform)?;
            let vcpus = system
                .domain_vcpus(domain)
                .map(<[VcpuId]>::to_vec)
                .unwrap_or_default();
            for (i, v) in vcpus.iter().enumerate() {
                let slot = v.0 as usize;
                if vcpu_owner.len() <= slot {
                    vcpu_owner.resize(slot + 1, None);
                }
                vcpu_owner[slot] = Some((g, i));
            }
            let tasks = spec
                .workload
                .tasks()
                .into_iter()
                .map(|class| Task {
                    class,
                    remaining: 0.0,
                    state: TaskState::Sleeping,
                    last_vcpu: None,
                    woke_at: None,
                })
                .collect();
            sim_guests.push(Guest {
                vcpu_task: vec![None; vcpus.len()],
                vcpus,
                runq: VecDeque::new(),
                tasks,
                workload: spec.workload,
            });
        }
        let mut sim = Self {
            table: system.rendezvous_table(),
            system,
            platform,
            costs: machine.costs,
            cpus,
            guests: sim_guests,
            vcpu_owner,
            queue: BinaryHeap::new(),
            seq: 0,
            rng: Rng::new(seed),
            stats: SimStats::default(),
            check_every_event: false,
            violation: None,
            trace: None,
            arrived_at: Vec::new(),
        };
        if let Some(events) = trace_events {
            let rings = trace::Rings::new(sim.cpus.len(), events);
            rings.start(trace::ClassSet::ALL, 0, true);
            sim.trace = Some(rings);
            sim.arrived_at = vec![0; sim.cpus.len()];
        }
        for g in 0..sim.guests.len() {
            sim.call(g, |w, ctx| w.start(ctx));
        }
        sim.after();
        Ok(sim)
    }

    /// Records an event on `cpu` now, if the run is traced.
    fn trace_event(&self, cpu: usize, kind: trace::Kind, domain: u32, vcpu: u32, arg: u64) {
        if let Some(rings) = &self.trace {
            rings.record(
                cpu,
                trace::Event {
                    time_ns: self.now(),
                    kind,
                    domain,
                    vcpu,
                    arg,
                },
            );
        }
    }

    /// Records `kind` for `vcpu` on `cpu` (`None`: the CPU running it, or
    /// CPU 0 for a wake from outside, as a device interrupt would come).
    fn trace_vcpu(&self, cpu: Option<usize>, kind: trace::Kind, vcpu: VcpuId) {
        if self.trace.is_none() {
            return;
        }
        let Some(info) = self.system.vcpu_info(vcpu) else {
            return;
        };
        let cpu = cpu.or(info.running_on).unwrap_or(0);
        self.trace_event(cpu, kind, info.domain.0, info.index, 0);
    }

    /// Records the end of `cpu`'s wait at `ticket`'s rendezvous.
    fn trace_rendezvous_done(&self, cpu: usize, ticket: &Ticket, outcome: &Outcome) {
        let code = match outcome {
            Outcome::Complete => trace::Outcome::Complete,
            Outcome::TimedOut { .. } => trace::Outcome::TimedOut,
            Outcome::Aborted => trace::Outcome::Aborted,
            Outcome::Superseded => trace::Outcome::Superseded,
        };
        let waited = self
            .now()
            .saturating_sub(self.arrived_at.get(cpu).copied().unwrap_or(0));
        self.trace_event(
            cpu,
            trace::Kind::RendezvousDone,
            ticket.resource.0 as u32,
            code as u32,
            waited,
        );
    }

    /// The recorded run (empty if not [`Sim::traced`]), with each CPU's
    /// pool and resource now.
    pub fn trace(&self) -> trace::Trace {
        let Some(rings) = &self.trace else {
            return trace::Trace::from_snapshot(trace::Snapshot::default(), &[]);
        };
        let places: Vec<trace::CpuPlace> = (0..self.cpus.len())
            .map(|cpu| {
                let pool = self.system.pool_of_cpu(cpu);
                trace::CpuPlace {
                    pool: pool.map(|p| p.0),
                    resource: pool.and_then(|p| {
                        self.system
                            .resources(p)
                            .find(|r| r.cpus.contains(cpu))
                            .map(|r| r.id.0 as u32)
                    }),
                }
            })
            .collect();
        trace::Trace::from_snapshot(rings.snapshot(self.now()), &places)
    }

    /// Runs a callback of guest `g`'s workload and applies what it asked.
    fn call(&mut self, g: usize, f: impl FnOnce(&mut dyn Workload, &mut Ctx)) {
        let mut ctx = Ctx {
            now: self.platform.now.get(),
            rng: &mut self.rng,
            actions: Vec::new(),
        };
        f(self.guests[g].workload.as_mut(), &mut ctx);
        let actions = ctx.actions;
        self.apply(g, actions);
    }

    /// The simulated clock.
    pub fn now(&self) -> Time {
        self.platform.now.get()
    }

    /// The system under simulation.
    pub fn system(&self) -> &System {
        &self.system
    }

    /// The counters so far.
    pub fn stats(&self) -> SimStats {
        let mut s = self.stats;
        s.end_ns = self.now();
        s.switches = self.platform.switches.get();
        s.kicks = self.platform.kicks_sent.get();
        s.diagnostics = self.system.diagnostics_total();
        s
    }

    /// The first invariant violation seen with [`Sim::check_every_event`].
    pub fn violation(&self) -> Option<sched::InvariantViolation> {
        self.violation
    }

    /// Guest `g`'s measurement now.
    pub fn report(&self, g: usize) -> Report {
        self.guests[g].workload.report(self.now())
    }

    fn push(&mut self, at: Time, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, event)));
    }

    /// Runs until the first guest's workload has finished or the clock
    /// reaches `limit_ns`; returns the counters.
    pub fn run(&mut self, limit_ns: Time) -> SimStats {
        loop {
            if self.guests.first().is_some_and(|g| g.workload.finished()) {
                self.stats.finished = true;
                break;
            }
            let next_event = self.queue.peek().map(|Reverse((t, _, _))| *t);
            let next_done = self.next_completion();
            let t = match (next_event, next_done) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if t > limit_ns {
                self.advance_to(limit_ns);
                break;
            }
            self.advance_to(t);
            self.stats.events += 1;
            if !self.complete_bursts() {
                let Some(Reverse((_, _, event))) = self.queue.pop() else {
                    break;
                };
                self.handle(event);
            }
            self.after();
            if self.check_every_event && self.violation.is_none() {
                self.violation = self.system.check_invariants().err();
            }
        }
        self.stats()
    }

    /// The task a CPU executes now, if it makes progress.
    fn executing(&self, cpu: usize) -> Option<(usize, TaskIdx)> {
        let v = self.cpus[cpu].running?;
        let (g, i) = self.vcpu_owner.get(v.0 as usize).copied().flatten()?;
        let t = self.guests[g].vcpu_task[i]?;
        (self.guests[g].tasks[t].remaining > DONE_EPSILON).then_some((g, t))
    }

    /// The speed of `class` work on `cpu`: the SMT model's factor for what
    /// its siblings run, and for memory-bound work its share of the socket's
    /// memory bandwidth ([`smt::socket_bandwidth_scale`]).
    fn speed(&self, cpu: usize, class: Class) -> f64 {
        let core = self.core_speed(cpu, class);
        if class != Class::Memory {
            return core;
        }
        let demand: f64 = (0..self.cpus.len())
            .filter(|&c| {
                self.executing(c)
                    .is_some_and(|(g, t)| self.guests[g].tasks[t].class == Class::Memory)
            })
            .map(|c| self.core_speed(c, Class::Memory))
            .sum();
        core * smt::socket_bandwidth_scale(demand)
    }

    fn core_speed(&self, cpu: usize, class: Class) -> f64 {
        let mut siblings = [Class::Memory; 4];
        let mut n = 0;
        for &s in &self.cpus[cpu].siblings {
            if let Some((g, t)) = self.executing(s)
                && n < siblings.len()
            {
                siblings[n] = self.guests[g].tasks[t].class;
                n += 1;
            }
        }
        smt::speed(class, &siblings[..n])
    }

    fn next_completion(&self) -> Option<Time> {
        let now = self.now();
        (0..self.cpus.len())
            .filter_map(|c| {
                let (g, t) = self.executing(c)?;
                let task = &self.guests[g].tasks[t];
                let rate = self.speed(c, task.class);
                let start = now.max(self.cpus[c].busy_until);
                Some(start + (task.remaining / rate).ceil().max(1.0) as Time)
            })
            .min()
    }

    fn advance_to(&mut self, t: Time) {
        let now = self.now();
        if t > now {
            let progress: Vec<_> = (0..self.cpus.len())
                .filter_map(|c| {
                    let (g, task) = self.executing(c)?;
                    let rate = self.speed(c, self.guests[g].tasks[task].class);
                    let start = now.max(self.cpus[c].busy_until);
                    Some((g, task, t.saturating_sub(start) as f64 * rate))
                })
                .collect();
            for (g, task, done) in progress {
                self.guests[g].tasks[task].remaining -= done;
            }
        }
        self.platform.now.set(t.max(now));
    }

    /// Ends every burst that has run out of work; whether there was one.
    fn complete_bursts(&mut self) -> bool {
        let mut any = false;
        for c in 0..self.cpus.len() {
            let Some(v) = self.cpus[c].running else {
                continue;
            };
            let Some((g, i)) = self.vcpu_owner.get(v.0 as usize).copied().flatten() else {
                continue;
            };
            let Some(t) = self.guests[g].vcpu_task[i] else {
                continue;
            };
            if self.guests[g].tasks[t].remaining > DONE_EPSILON {
                continue;
            }
            any = true;
            self.guests[g].tasks[t].remaining = 0.0;
            self.call(g, |w, ctx| w.burst_done(t, ctx));
            if self.guests[g].tasks[t].state == TaskState::OnVcpu(i)
                && self.guests[g].tasks[t].remaining <= DONE_EPSILON
            {
                // Given nothing to do: it sleeps.
                self.apply(g, vec![Action::Sleep(t)]);
            }
        }
        any
    }

    fn apply(&mut self, g: usize, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Run(t, work) => {
                    let now = self.now();
                    let task = &mut self.guests[g].tasks[t];
                    task.remaining = work.max(0.0);
                    if task.state == TaskState::Sleeping {
                        task.woke_at = Some(now);
                        self.place(g, t);
                    }
                }
                Action::Sleep(t) => self.stop_task(g, t, TaskState::Sleeping),
                Action::Exit(t) => self.stop_task(g, t, TaskState::Done),
                Action::Timer(at, token) => {
                    let at = at.max(self.now());
                    self.push(at, Event::Guest(g, token));
                }
            }
        }
    }

    /// The guest scheduler: an idle vCPU (the task's last one first), else
    /// the run queue.
    fn place(&mut self, g: usize, t: TaskIdx) {
        let guest = &mut self.guests[g];
        let idle = guest.tasks[t]
            .last_vcpu
            .filter(|&v| guest.vcpu_task[v].is_none())
            .or_else(|| guest.vcpu_task.iter().position(Option::is_none));
        match idle {
            Some(v) => {
                guest.vcpu_task[v] = Some(t);
                guest.tasks[t].state = TaskState::OnVcpu(v);
                guest.tasks[t].last_vcpu = Some(v);
                let vcpu = guest.vcpus[v];
                let _ = self.system.vcpu_wake(vcpu, &self.platform);
                self.trace_vcpu(None, trace::Kind::Wake, vcpu);
            }
            None => {
                guest.tasks[t].state = TaskState::Queued;
                guest.runq.push_back(t);
            }
        }
    }

    fn stop_task(&mut self, g: usize, t: TaskIdx, to: TaskState) {
        let guest = &mut self.guests[g];
        let state = guest.tasks[t].state;
        guest.tasks[t].state = to;
        guest.tasks[t].woke_at = None;
        match state {
            TaskState::OnVcpu(v) => {
                let next = guest.runq.pop_front();
                guest.vcpu_task[v] = next;
                if let Some(n) = next {
                    guest.tasks[n].state = TaskState::OnVcpu(v);
                    guest.tasks[n].last_vcpu = Some(v);
                } else {
                    let vcpu = guest.vcpus[v];
                    let _ = self.system.vcpu_block(vcpu, &self.platform);
                    self.trace_vcpu(None, trace::Kind::Block, vcpu);
                }
            }
            TaskState::Queued => guest.runq.retain(|&q| q != t),
            TaskState::Sleeping | TaskState::Done => {}
        }
    }

    fn handle(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::Kick(cpu) => {
                self.cpus[cpu].kick_in_flight = false;
                if self.cpus[cpu].state == CpuState::Free {
                    self.charge_decision(cpu);
                    let step = self.system.on_kick(cpu, &self.platform);
                    self.process(cpu, step);
                } else {
                    self.cpus[cpu].pending_kick = true;
                }
            }
            Event::Timer(cpu) => {
                let due = self.platform.timers.borrow().get(cpu).copied().flatten();
                if due.is_some_and(|d| d <= now) {
                    self.platform.timers.borrow_mut()[cpu] = None;
                    if self.cpus[cpu].state == CpuState::Free {
                        self.charge_decision(cpu);
                        let step = self.system.on_timer(cpu, &self.platform);
                        self.process(cpu, step);
                    } else {
                        self.cpus[cpu].pending_timer = true;
                    }
                }
            }
            Event::SwitchDone(cpu) => {
                if let CpuState::Switching(context) = self.cpus[cpu].state {
                    self.cpus[cpu].state = CpuState::Free;
                    self.cpus[cpu].loaded = context;
                    self.cpus[cpu].running = context.vcpu();
                    let step = self.system.switch_done(cpu, &self.platform);
                    self.process(cpu, step);
                }
            }
            Event::RendezvousRelease(cpu) => {
                if let CpuState::Parked { ticket, .. } = self.cpus[cpu].state {
                    let outcome = outcome_of(self.table.poll(&ticket));
                    self.cpus[cpu].state = CpuState::Free;
                    self.trace_rendezvous_done(cpu, &ticket, &outcome);
                    let step = self
                        .system
                        .rendezvous_done(cpu, &ticket, outcome, &self.platform);
                    self.process(cpu, step);
                }
            }
            Event::RendezvousTimeout(cpu, generation) => {
                if let CpuState::Parked {
                    ticket,
                    released: false,
                } = self.cpus[cpu].state
                    && ticket.generation == generation
                    && self.table.poll(&ticket) == Poll::Waiting
                {
                    // The wait passed its bound: abort, as the waiting CPU
                    // would (same rule as `Lockstep`).
                    let outcome = match self.table.abort(ticket.resource, ticket.generation) {
                        AbortResult::Aborted => {
                            self.stats.rendezvous_timeouts += 1;
                            Outcome::TimedOut {
                                missing: self.table.missing(&ticket),
                            }
                        }
                        AbortResult::AlreadyComplete => Outcome::Complete,
                        AbortResult::AlreadyAborted => Outcome::Aborted,
                        AbortResult::Stale => Outcome::Superseded,
                    };
                    self.cpus[cpu].state = CpuState::Free;
                    self.trace_rendezvous_done(cpu, &ticket, &outcome);
                    let step = self
                        .system
                        .rendezvous_done(cpu, &ticket, outcome, &self.platform);
                    self.process(cpu, step);
                }
            }
            Event::Guest(g, token) => {
                self.call(g, |w, ctx| w.timer(token, ctx));
            }
        }
    }

    fn charge_decision(&mut self, cpu: usize) {
        let now = self.now();
        let c = &mut self.cpus[cpu];
        c.busy_until = c.busy_until.max(now) + self.costs.decision_ns;
    }

    fn process(&mut self, cpu: usize, mut step: Step) {
        let now = self.now();
        for _ in 0..MAX_STEPS_PER_EVENT {
            step = match step {
                Step::Resume => {
                    let c = &mut self.cpus[cpu];
                    if c.pending_kick {
                        c.pending_kick = false;
                        self.charge_decision(cpu);
                        self.system.on_kick(cpu, &self.platform)
                    } else if c.pending_timer {
                        c.pending_timer = false;
                        self.charge_decision(cpu);
                        self.system.on_timer(cpu, &self.platform)
                    } else {
                        return;
                    }
                }
                Step::Switch(context) => {
                    self.platform.switch_to(cpu, context);
                    match context.vcpu() {
                        Some(vcpu) => self.trace_vcpu(Some(cpu), trace::Kind::Switch, vcpu),
                        None => {
                            self.trace_event(cpu, trace::Kind::Switch, trace::IDLE_DOMAIN, 0, 0)
                        }
                    }
                    self.cpus[cpu].running = None;
                    let took = self.costs.switch_time(self.cpus[cpu].loaded, context);
                    if took == 0 {
                        self.cpus[cpu].loaded = context;
                        self.cpus[cpu].running = context.vcpu();
                        self.system.switch_done(cpu, &self.platform)
                    } else {
                        self.cpus[cpu].state = CpuState::Switching(context);
                        // The switch starts once the decision is made.
                        let start = now.max(self.cpus[cpu].busy_until);
                        self.push(start + took, Event::SwitchDone(cpu));
                        return;
                    }
                }
                Step::Rendezvous(ticket) => {
                    self.cpus[cpu].running = None;
                    self.trace_event(
                        cpu,
                        trace::Kind::RendezvousArrive,
                        ticket.resource.0 as u32,
                        0,
                        u64::from(ticket.generation),
                    );
                    if let Some(at) = self.arrived_at.get_mut(cpu) {
                        *at = now;
                    }
                    let poll = self.table.arrive(&ticket);
                    let single = ticket.expected.len() <= 1;
                    if poll == Poll::Complete {
                        self.stats.rendezvous += 1;
                        self.stats.rendezvous_multi += u64::from(!single);
                    }
                    if poll != Poll::Waiting && (self.costs.rendezvous_ns == 0 || single) {
                        self.trace_rendezvous_done(cpu, &ticket, &outcome_of(poll));
                        self.system
                            .rendezvous_done(cpu, &ticket, outcome_of(poll), &self.platform)
                    } else {
                        self.cpus[cpu].state = CpuState::Parked {
                            ticket,
                            released: false,
                        };
                        self.push(
                            now + ticket.timeout_ns,
                            Event::RendezvousTimeout(cpu, ticket.generation),
                        );
                        return;
                    }
                }
            };
        }
    }

    /// Turns what `sched` asked of the platform into events, releases the
    /// CPUs whose rendezvous ended, and reports tasks that started running.
    fn after(&mut self) {
        let now = self.now();
        // Tasks that got a CPU since they became runnable.
        for c in 0..self.cpus.len() {
            let Some(v) = self.cpus[c].running else {
                continue;
            };
            let Some((g, i)) = self.vcpu_owner.get(v.0 as usize).copied().flatten() else {
                continue;
            };
            let Some(t) = self.guests[g].vcpu_task[i] else {
                continue;
            };
            if let Some(woke) = self.guests[g].tasks[t].woke_at.take() {
                // Guest code resumes once the hypervisor's work on this CPU
                // is done.
                let start = now.max(self.cpus[c].busy_until);
                self.guests[g].workload.started(t, woke, start);
            }
        }
        let kicks: Vec<usize> = self.platform.kicks.borrow_mut().drain(..).collect();
        for cpu in kicks {
            if cpu < self.cpus.len() && !self.cpus[cpu].kick_in_flight {
                self.cpus[cpu].kick_in_flight = true;
                self.push(now + self.costs.ipi_ns, Event::Kick(cpu));
            }
        }
        let timers: Vec<(usize, Time)> =
            self.platform.timer_changes.borrow_mut().drain(..).collect();
        for (cpu, deadline) in timers {
            self.push(deadline.max(now), Event::Timer(cpu));
        }
        for cpu in 0..self.cpus.len() {
            if let CpuState::Parked {
                ticket,
                released: false,
            } = self.cpus[cpu].state
                && self.table.poll(&ticket) != Poll::Waiting
            {
                self.cpus[cpu].state = CpuState::Parked {
                    ticket,
                    released: true,
                };
                self.push(
                    now + self.costs.rendezvous_ns,
                    Event::RendezvousRelease(cpu),
                );
            }
        }
    }
}

fn outcome_of(poll: Poll) -> Outcome {
    match poll {
        Poll::Complete => Outcome::Complete,
        Poll::Aborted | Poll::Waiting => Outcome::Aborted,
        Poll::Superseded => Outcome::Superseded,
    }
}
