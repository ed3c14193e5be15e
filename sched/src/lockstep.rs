//! A deterministic, single-threaded machine around [`System`]: every CPU's
//! events are delivered in a fixed order on a simulated clock, and rendezvous
//! waits park instead of spinning. Host tests, property tests and the lab's
//! event simulator drive the framework through it; a CPU can be *stalled*
//! (stuck with interrupts off, e.g. in `stop_machine`) to exercise the bounded
//! waits.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::fmt;

use crate::cpuset::CpuSet;
use crate::platform::{CpuContext, Platform};
use crate::rendezvous::{AbortResult, Outcome, Poll, RendezvousTable, Ticket};
use crate::scheduler::Time;
use crate::system::{PartOf, Step, System};

/// A [`Platform`] that records kicks and timers for [`Lockstep`] to deliver.
#[derive(Debug, Default)]
pub struct RecordingPlatform {
    now: Cell<Time>,
    pending_kicks: RefCell<CpuSet>,
    timers: RefCell<Vec<Option<Time>>>,
    switches: Cell<u64>,
    kicks: Cell<u64>,
}

impl RecordingPlatform {
    /// Context switches performed so far.
    pub fn switches(&self) -> u64 {
        self.switches.get()
    }

    /// Kicks sent so far (one per CPU kicked).
    pub fn kicks(&self) -> u64 {
        self.kicks.get()
    }

    /// Sets the clock (for tests that drive [`System`] by hand).
    pub fn set_now(&self, now: Time) {
        self.now.set(now);
    }

    /// The armed timer of `cpu`.
    pub fn timer(&self, cpu: usize) -> Option<Time> {
        self.timers.borrow().get(cpu).copied().flatten()
    }
}

impl Platform for RecordingPlatform {
    fn now_ns(&self) -> Time {
        self.now.get()
    }

    fn kick(&self, cpus: &CpuSet) {
        self.kicks.set(self.kicks.get() + cpus.len() as u64);
        let mut pending = self.pending_kicks.borrow_mut();
        *pending = pending.union(cpus);
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
    }
}

/// The machine did not settle within the event budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotQuiet {
    /// Events processed before giving up.
    pub events: usize,
}

impl fmt::Display for NotQuiet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine still busy after {} events (livelock?)",
            self.events
        )
    }
}

/// See the module documentation.
pub struct Lockstep {
    /// The system under test.
    pub system: System,
    /// Its platform.
    pub platform: RecordingPlatform,
    table: Arc<RendezvousTable>,
    parked: Vec<Option<(Ticket, Time)>>,
    stalled: CpuSet,
    timeouts: u64,
    completed: u64,
    /// Check [`System::check_invariants`] after every step (slow; for tests).
    pub check_every_step: bool,
    /// Finish each context switch as a separate, later event (a real switch
    /// takes time, during which the CPU still runs its old context).
    pub split_switches: bool,
    /// Deliver ready events in a pseudo-random order from this seed instead of
    /// by CPU number, to explore interleavings.
    pub shuffle_seed: Option<u64>,
    in_switch: CpuSet,
    stall_at_switch: CpuSet,
    violation: Option<crate::error::InvariantViolation>,
    /// A clock in ns to time the `System`'s own work with (benchmarks):
    /// [`Lockstep::system_work`] then sums the time spent inside its event
    /// entry points, without this harness's bookkeeping.
    pub system_clock: Option<fn() -> u64>,
    system_calls: u64,
    system_ns: u64,
    /// Run each CPU event on only its part of the machine, as the
    /// hypervisor's per-pool locks do ([`System::in_part`]).
    pub partitioned: bool,
}

impl Lockstep {
    /// Wraps `system`; the clock starts at 0.
    pub fn new(system: System) -> Self {
        let cpus = system.topology().len();
        Self {
            table: system.rendezvous_table(),
            system,
            platform: RecordingPlatform::default(),
            parked: alloc::vec![None; cpus],
            stalled: CpuSet::new(),
            timeouts: 0,
            completed: 0,
            check_every_step: false,
            split_switches: false,
            shuffle_seed: None,
            in_switch: CpuSet::new(),
            stall_at_switch: CpuSet::new(),
            violation: None,
            system_clock: None,
            system_calls: 0,
            system_ns: 0,
            partitioned: false,
        }
    }

    /// The `System` event calls made so far (kick, timer, switch done,
    /// rendezvous done) and, with a [`Lockstep::system_clock`], the ns
    /// spent in them.
    pub fn system_work(&self) -> (u64, u64) {
        (self.system_calls, self.system_ns)
    }

    /// Runs one of the `System`'s event entry points, counted and timed.
    fn system_call(
        &mut self,
        cpu: usize,
        call: impl FnOnce(&mut System, &RecordingPlatform) -> Step,
    ) -> Step {
        let started = self.system_clock.map(|clock| clock());
        let step = if self.partitioned {
            let platform = &self.platform;
            self.system
                .in_part(PartOf::Cpu(cpu), |part| call(part, platform))
        } else {
            call(&mut self.system, &self.platform)
        };
        if let (Some(clock), Some(started)) = (self.system_clock, started) {
            self.system_ns += clock().saturating_sub(started);
        }
        self.system_calls += 1;
        step
    }

    /// The simulated clock.
    pub fn now(&self) -> Time {
        self.platform.now.get()
    }

    /// Rendezvous waits that ran past their bound so far.
    pub fn timeouts(&self) -> u64 {
        self.timeouts
    }

    /// Rendezvous that completed (counted once per CPU that got through).
    pub fn rendezvous_completed(&self) -> u64 {
        self.completed
    }

    /// The first invariant violation seen by [`Lockstep::check_every_step`].
    pub fn violation(&self) -> Option<crate::error::InvariantViolation> {
        self.violation
    }

    fn check(&mut self) {
        if self.check_every_step && self.violation.is_none() {
            self.violation = self.system.check_invariants().err();
        }
    }

    /// Stops delivering anything to `cpu` (it is stuck with interrupts off).
    pub fn stall(&mut self, cpu: usize) {
        self.stalled.insert(cpu);
    }

    /// Stalls `cpu` in the middle of its next context switch (it keeps running
    /// its old context until [`Lockstep::unstall`]).
    pub fn stall_at_next_switch(&mut self, cpu: usize) {
        self.stall_at_switch.insert(cpu);
    }

    /// Lets `cpu` run again.
    pub fn unstall(&mut self, cpu: usize) {
        self.stalled.remove(cpu);
        self.stall_at_switch.remove(cpu);
    }

    /// Whether `cpu` is waiting at a rendezvous.
    pub fn is_parked(&self, cpu: usize) -> bool {
        self.parked.get(cpu).is_some_and(Option::is_some)
    }

    fn process(&mut self, cpu: usize, mut step: Step) {
        for _ in 0..crate::driver::MAX_STEPS_PER_EVENT {
            self.check();
            step = match step {
                Step::Resume => return,
                Step::Switch(context) => {
                    self.platform.switch_to(cpu, context);
                    if self.stall_at_switch.contains(cpu) {
                        // Stuck half-way: the old context still runs.
                        self.stall_at_switch.remove(cpu);
                        self.stalled.insert(cpu);
                        self.in_switch.insert(cpu);
                        return;
                    }
                    if self.split_switches {
                        self.in_switch.insert(cpu);
                        return;
                    }
                    self.system_call(cpu, |s, p| s.switch_done(cpu, p))
                }
                // The planted fault (`System::plant_cosched_fault`), as
                // `driver::drive` does it: arrive, but go on at once.
                Step::Rendezvous(ticket) if self.system.cosched_fault(cpu) => {
                    self.table.arrive(&ticket);
                    self.system_call(cpu, |s, p| {
                        s.rendezvous_done(cpu, &ticket, Outcome::Complete, p)
                    })
                }
                Step::Rendezvous(ticket) => match self.table.arrive(&ticket) {
                    Poll::Waiting => {
                        self.parked[cpu] = Some((ticket, self.now()));
                        return;
                    }
                    poll => {
                        if poll == Poll::Complete {
                            self.completed += 1;
                        }
                        let outcome = outcome_of(poll);
                        self.system_call(cpu, |s, p| s.rendezvous_done(cpu, &ticket, outcome, p))
                    }
                },
            };
        }
    }

    /// Delivers pending kicks and finishes rendezvous until nothing is left to
    /// do, or `max_events` events were processed.
    pub fn run(&mut self, max_events: usize) -> Result<usize, NotQuiet> {
        for events in 0..max_events {
            let waiter = self.ready_waiter();
            let switching = self.in_switch.difference(&self.stalled);
            let pending = *self.platform.pending_kicks.borrow();
            let kickable = pending
                .difference(&self.stalled)
                .difference(&self.in_switch)
                .iter()
                .filter(|&c| !self.is_parked(c))
                .collect::<CpuSet>();
            let choices = usize::from(waiter.is_some()) + switching.len() + kickable.len();
            if choices == 0 {
                return Ok(events);
            }
            let timed_out = matches!(waiter, Some((_, _, Outcome::TimedOut { .. })));
            let pick = match self.shuffle_seed.as_mut() {
                // A wait that just gave up (and aborted) is handled at once.
                Some(_) if timed_out => 0,
                Some(seed) => {
                    *seed ^= *seed << 13;
                    *seed ^= *seed >> 7;
                    *seed ^= *seed << 17;
                    (*seed % choices as u64) as usize
                }
                None => 0,
            };
            if let Some((cpu, ticket, outcome)) = waiter.filter(|_| pick == 0) {
                self.parked[cpu] = None;
                if let Outcome::TimedOut { .. } = outcome {
                    self.timeouts += 1;
                }
                if outcome == Outcome::Complete {
                    self.completed += 1;
                }
                let step =
                    self.system_call(cpu, |s, p| s.rendezvous_done(cpu, &ticket, outcome, p));
                self.process(cpu, step);
                continue;
            }
            let pick = pick - usize::from(waiter.is_some());
            if let Some(cpu) = switching.iter().nth(pick) {
                self.in_switch.remove(cpu);
                let step = self.system_call(cpu, |s, p| s.switch_done(cpu, p));
                self.process(cpu, step);
                continue;
            }
            let Some(cpu) = kickable.iter().nth(pick - switching.len()) else {
                return Ok(events);
            };
            self.platform.pending_kicks.borrow_mut().remove(cpu);
            let step = self.system_call(cpu, |s, p| s.on_kick(cpu, p));
            self.process(cpu, step);
        }
        Err(NotQuiet { events: max_events })
    }

    /// The first parked CPU whose rendezvous has ended or whose wait is past
    /// its bound (then this aborts the generation, as the waiting CPU would).
    fn ready_waiter(&mut self) -> Option<(usize, Ticket, Outcome)> {
        let now = self.now();
        for cpu in 0..self.parked.len() {
            if self.stalled.contains(cpu) {
                continue;
            }
            let Some((ticket, since)) = self.parked[cpu] else {
                continue;
            };
            match self.table.poll(&ticket) {
                Poll::Waiting if now.saturating_sub(since) >= ticket.timeout_ns => {
                    let outcome = match self.table.abort(ticket.resource, ticket.generation) {
                        AbortResult::Aborted => Outcome::TimedOut {
                            missing: self.table.missing(&ticket),
                        },
                        AbortResult::AlreadyComplete => Outcome::Complete,
                        AbortResult::AlreadyAborted => Outcome::Aborted,
                        AbortResult::Stale => Outcome::Superseded,
                    };
                    return Some((cpu, ticket, outcome));
                }
                Poll::Waiting => {}
                poll => return Some((cpu, ticket, outcome_of(poll))),
            }
        }
        None
    }

    /// Moves the clock forward by `ns`, firing due timers, and runs to quiet.
    pub fn advance(&mut self, ns: Time, max_events: usize) -> Result<usize, NotQuiet> {
        let mut events = self.run(max_events)?;
        self.platform.now.set(self.now().saturating_add(ns));
        let cpus = self.parked.len();
        for cpu in 0..cpus {
            let due = self.platform.timer(cpu).is_some_and(|t| t <= self.now());
            if due
                && !self.stalled.contains(cpu)
                && !self.is_parked(cpu)
                && !self.in_switch.contains(cpu)
            {
                self.platform.set_timer(cpu, None);
                let step = self.system_call(cpu, |s, p| s.on_timer(cpu, p));
                self.process(cpu, step);
                events += self.run(max_events)?;
            }
        }
        Ok(events + self.run(max_events)?)
    }
}

fn outcome_of(poll: Poll) -> Outcome {
    match poll {
        Poll::Complete => Outcome::Complete,
        Poll::Aborted | Poll::Waiting => Outcome::Aborted,
        Poll::Superseded => Outcome::Superseded,
    }
}
