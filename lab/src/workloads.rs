//! The guest workloads: scaled-down models of the benchmark's programs
//! (reference 003) and of the BOOST pair (reference 004). Each is a
//! [`Workload`]: tasks of an SMT [`Class`], bursts of work at full speed
//! between sleeps and wake-ups, and the figure the benchmark reports.

use std::collections::VecDeque;

use sched::Time;

use crate::sim::{Ctx, Report, TaskIdx, Workload};
use crate::smt::Class;

/// STREAM's model bandwidth of one thread alone on a core, in MB/s (a
/// scale for the table, so figures read like the benchmark's).
pub const STREAM_MBPS_PER_CORE: f64 = 10_000.0;

/// STREAM-like: `tasks` memory-bound tasks (NR_CPUS/2 in the benchmark),
/// each doing `work_ns` of work in `chunk_ns` bursts. Reports MB/s (higher is
/// better).
#[derive(Debug)]
pub struct Stream {
    left: Vec<Time>,
    chunk_ns: Time,
    work_ns: Time,
    running: usize,
    end: Option<Time>,
}

impl Stream {
    /// `tasks` tasks of `work_ns` each.
    pub fn new(tasks: usize, work_ns: Time, chunk_ns: Time) -> Self {
        Self {
            left: vec![work_ns; tasks.max(1)],
            chunk_ns: chunk_ns.max(1),
            work_ns,
            running: 0,
            end: None,
        }
    }

    fn next_chunk(&mut self, t: TaskIdx, ctx: &mut Ctx) {
        let chunk = self.left[t].min(self.chunk_ns);
        if chunk == 0 {
            ctx.exit(t);
            self.running -= 1;
            if self.running == 0 {
                self.end = Some(ctx.now());
            }
        } else {
            self.left[t] -= chunk;
            ctx.run(t, chunk);
        }
    }
}

impl Workload for Stream {
    fn tasks(&self) -> Vec<Class> {
        vec![Class::Memory; self.left.len()]
    }

    fn start(&mut self, ctx: &mut Ctx) {
        self.running = self.left.len();
        for t in 0..self.left.len() {
            self.next_chunk(t, ctx);
        }
    }

    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        self.next_chunk(task, ctx);
    }

    fn finished(&self) -> bool {
        self.end.is_some()
    }

    fn report(&self, now: Time) -> Report {
        let elapsed = self.end.unwrap_or(now).max(1) as f64;
        let work = (self.left.len() as f64) * self.work_ns as f64;
        Report {
            value: work / elapsed * STREAM_MBPS_PER_CORE,
            latencies_ns: Vec::new(),
        }
    }
}

/// kernbench-like: `workers` parallel jobs (make -jN) draining a queue of
/// compile units. Reports the elapsed time in ms (lower is better).
#[derive(Debug)]
pub struct Kernbench {
    units: VecDeque<Time>,
    workers: usize,
    active: usize,
    end: Option<Time>,
    done_units: usize,
}

impl Kernbench {
    /// `workers` jobs over the given compile units (ns of work each).
    pub fn new(workers: usize, units: Vec<Time>) -> Self {
        Self {
            units: units.into(),
            workers: workers.max(1),
            active: 0,
            end: None,
            done_units: 0,
        }
    }

    /// Compile units finished so far.
    pub fn done_units(&self) -> usize {
        self.done_units
    }

    fn next_unit(&mut self, w: TaskIdx, ctx: &mut Ctx) {
        match self.units.pop_front() {
            Some(work) => ctx.run(w, work),
            None => {
                ctx.exit(w);
                self.active -= 1;
                if self.active == 0 {
                    self.end = Some(ctx.now());
                }
            }
        }
    }
}

impl Workload for Kernbench {
    fn tasks(&self) -> Vec<Class> {
        vec![Class::Compute; self.workers]
    }

    fn start(&mut self, ctx: &mut Ctx) {
        self.active = self.workers;
        for w in 0..self.workers {
            self.next_unit(w, ctx);
        }
    }

    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        self.done_units += 1;
        self.next_unit(task, ctx);
    }

    fn finished(&self) -> bool {
        self.end.is_some()
    }

    fn report(&self, now: Time) -> Report {
        Report {
            value: self.end.unwrap_or(now) as f64 / 1e6,
            latencies_ns: Vec::new(),
        }
    }
}

/// hackbench-like (pipes): `groups` groups of `senders` senders and as many
/// receivers; each sender sends `loops` messages to every receiver of its
/// group, round robin, through pipes holding `capacity` messages (a sender
/// sleeps on a full pipe, a receiver on an empty one). Reports the elapsed
/// time in ms (lower is better).
#[derive(Debug)]
pub struct Hackbench {
    groups: usize,
    size: usize,
    loops: usize,
    send_ns: Time,
    recv_ns: Time,
    capacity: usize,
    /// Per receiver (indexed by task).
    inbox: Vec<usize>,
    received: Vec<usize>,
    receiver_busy: Vec<bool>,
    waiting: Vec<Vec<TaskIdx>>,
    /// Per sender (indexed by task).
    sent: Vec<usize>,
    receivers_done: usize,
    end: Option<Time>,
    latencies: Vec<Time>,
}

impl Hackbench {
    /// See the type's documentation; `send_ns`/`recv_ns` are the work per message.
    pub fn new(groups: usize, size: usize, loops: usize, send_ns: Time, recv_ns: Time) -> Self {
        let tasks = groups.max(1) * 2 * size.max(1);
        Self {
            groups: groups.max(1),
            size: size.max(1),
            loops: loops.max(1),
            send_ns,
            recv_ns,
            capacity: 16,
            inbox: vec![0; tasks],
            received: vec![0; tasks],
            receiver_busy: vec![false; tasks],
            waiting: vec![Vec::new(); tasks],
            sent: vec![0; tasks],
            receivers_done: 0,
            end: None,
            latencies: Vec::new(),
        }
    }

    /// Messages received so far, over all receivers.
    pub fn received(&self) -> usize {
        self.received.iter().sum()
    }

    fn is_sender(&self, t: TaskIdx) -> bool {
        t % (2 * self.size) < self.size
    }

    fn target(&self, sender: TaskIdx) -> TaskIdx {
        let base = sender - sender % (2 * self.size);
        base + self.size + self.sent[sender] % self.size
    }
}

impl Workload for Hackbench {
    fn tasks(&self) -> Vec<Class> {
        vec![Class::Communication; self.groups * 2 * self.size]
    }

    fn start(&mut self, ctx: &mut Ctx) {
        for t in 0..self.groups * 2 * self.size {
            if self.is_sender(t) {
                ctx.run(t, self.send_ns);
            }
        }
    }

    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        if self.is_sender(task) {
            let r = self.target(task);
            self.inbox[r] += 1;
            if !self.receiver_busy[r] {
                self.receiver_busy[r] = true;
                ctx.run(r, self.recv_ns);
            }
            self.sent[task] += 1;
            if self.sent[task] == self.loops * self.size {
                ctx.exit(task);
                return;
            }
            let next = self.target(task);
            if self.inbox[next] >= self.capacity {
                self.waiting[next].push(task);
                ctx.sleep(task);
            } else {
                ctx.run(task, self.send_ns);
            }
        } else {
            self.inbox[task] -= 1;
            self.received[task] += 1;
            for s in std::mem::take(&mut self.waiting[task]) {
                ctx.run(s, self.send_ns);
            }
            if self.received[task] == self.loops * self.size {
                ctx.exit(task);
                self.receivers_done += 1;
                if self.receivers_done == self.groups * self.size {
                    self.end = Some(ctx.now());
                }
            } else if self.inbox[task] > 0 {
                ctx.run(task, self.recv_ns);
            } else {
                self.receiver_busy[task] = false;
                ctx.sleep(task);
            }
        }
    }

    fn started(&mut self, _task: TaskIdx, woke_at: Time, now: Time) {
        self.latencies.push(now - woke_at);
    }

    fn finished(&self) -> bool {
        self.end.is_some()
    }

    fn report(&self, now: Time) -> Report {
        Report {
            value: self.end.unwrap_or(now) as f64 / 1e6,
            latencies_ns: self.latencies.clone(),
        }
    }
}

/// netperf-like TCP_RR: a client and a server task ping-pong a request and a
/// response, each doing a little work per message, for `duration_ns`.
/// Reports transactions per second (higher is better) and the wake-up
/// latencies.
#[derive(Debug)]
pub struct Netperf {
    duration_ns: Time,
    client_ns: Time,
    server_ns: Time,
    transactions: u64,
    end: Option<Time>,
    latencies: Vec<Time>,
}

const CLIENT: TaskIdx = 0;
const SERVER: TaskIdx = 1;

impl Netperf {
    /// A run of `duration_ns` with the given work per request and response.
    pub fn new(duration_ns: Time, client_ns: Time, server_ns: Time) -> Self {
        Self {
            duration_ns,
            client_ns,
            server_ns,
            transactions: 0,
            end: None,
            latencies: Vec::new(),
        }
    }

    /// Round trips completed so far.
    pub fn transactions(&self) -> u64 {
        self.transactions
    }
}

impl Workload for Netperf {
    fn tasks(&self) -> Vec<Class> {
        vec![Class::Communication; 2]
    }

    fn start(&mut self, ctx: &mut Ctx) {
        ctx.run(CLIENT, self.client_ns);
    }

    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        if task == CLIENT {
            if ctx.now() >= self.duration_ns {
                self.end = Some(ctx.now());
                ctx.exit(CLIENT);
                ctx.exit(SERVER);
                return;
            }
            ctx.run(SERVER, self.server_ns);
            ctx.sleep(CLIENT);
        } else {
            self.transactions += 1;
            ctx.run(CLIENT, self.client_ns);
            ctx.sleep(SERVER);
        }
    }

    fn started(&mut self, _task: TaskIdx, woke_at: Time, now: Time) {
        self.latencies.push(now - woke_at);
    }

    fn finished(&self) -> bool {
        self.end.is_some()
    }

    fn report(&self, now: Time) -> Report {
        let elapsed = self.end.unwrap_or(now).max(1) as f64 / 1e9;
        Report {
            value: self.transactions as f64 / elapsed,
            latencies_ns: self.latencies.clone(),
        }
    }
}

/// Size of one I/O request of the BOOST pair, in bytes (a full Ethernet frame).
pub const IO_REQUEST_BYTES: f64 = 1500.0;

/// The I/O side of the BOOST pair (reference 004): one task that sleeps
/// until a request arrives (a fixed rate, one every `period_ns`, for
/// `duration_ns`), then handles it in `handle_ns`; requests arriving while it
/// is busy queue. Reports the served throughput in Mbps and the wake-up
/// latency of every request that found it asleep (arrival to running).
#[derive(Debug)]
pub struct IoServer {
    period_ns: Time,
    handle_ns: Time,
    duration_ns: Time,
    pending: usize,
    busy: bool,
    offered: u64,
    served: u64,
    ended: bool,
    latencies: Vec<Time>,
}

impl IoServer {
    /// See the type's documentation.
    pub fn new(period_ns: Time, handle_ns: Time, duration_ns: Time) -> Self {
        Self {
            period_ns: period_ns.max(1),
            handle_ns,
            duration_ns,
            pending: 0,
            busy: false,
            offered: 0,
            served: 0,
            ended: false,
            latencies: Vec::new(),
        }
    }

    /// Requests (offered, served) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.offered, self.served)
    }
}

impl Workload for IoServer {
    fn tasks(&self) -> Vec<Class> {
        vec![Class::Communication]
    }

    fn start(&mut self, ctx: &mut Ctx) {
        ctx.timer(self.period_ns, 0);
    }

    fn timer(&mut self, _token: u64, ctx: &mut Ctx) {
        if ctx.now() >= self.duration_ns {
            self.ended = true;
            return;
        }
        self.offered += 1;
        self.pending += 1;
        ctx.timer(ctx.now() + self.period_ns, 0);
        if !self.busy {
            self.busy = true;
            ctx.run(0, self.handle_ns);
        }
    }

    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        self.served += 1;
        self.pending -= 1;
        if self.pending > 0 {
            ctx.run(task, self.handle_ns);
        } else {
            self.busy = false;
            ctx.sleep(task);
        }
    }

    fn started(&mut self, _task: TaskIdx, woke_at: Time, now: Time) {
        self.latencies.push(now - woke_at);
    }

    fn finished(&self) -> bool {
        self.ended
    }

    fn report(&self, _now: Time) -> Report {
        let seconds = self.duration_ns.max(1) as f64 / 1e9;
        Report {
            value: self.served as f64 * IO_REQUEST_BYTES * 8.0 / seconds / 1e6,
            latencies_ns: self.latencies.clone(),
        }
    }
}

/// Background load: `classes.len()` tasks, each busy for `busy_ns` then
/// asleep for `idle_ns`, forever (start times staggered by the seed). With
/// `idle_ns == 0` a task never sleeps (a CPU hog). Never finishes.
#[derive(Debug)]
pub struct Background {
    classes: Vec<Class>,
    busy_ns: Time,
    idle_ns: Time,
    /// Bursts completed, per task.
    pub bursts: Vec<u64>,
}

impl Background {
    /// See the type's documentation.
    pub fn new(classes: Vec<Class>, busy_ns: Time, idle_ns: Time) -> Self {
        let n = classes.len();
        Self {
            classes,
            busy_ns: busy_ns.max(1),
            idle_ns,
            bursts: vec![0; n],
        }
    }

    /// The load it offers, in CPUs (600 % = 6.0).
    pub fn offered_cpus(&self) -> f64 {
        self.classes.len() as f64 * self.busy_ns as f64 / (self.busy_ns + self.idle_ns) as f64
    }
}

impl Workload for Background {
    fn tasks(&self) -> Vec<Class> {
        self.classes.clone()
    }

    fn start(&mut self, ctx: &mut Ctx) {
        for t in 0..self.classes.len() {
            if self.idle_ns == 0 {
                ctx.run(t, self.busy_ns);
            } else {
                let at = ctx.rng().range(0, self.busy_ns + self.idle_ns);
                ctx.timer(at, t as u64);
            }
        }
    }

    fn burst_done(&mut self, task: TaskIdx, ctx: &mut Ctx) {
        self.bursts[task] += 1;
        if self.idle_ns == 0 {
            ctx.run(task, self.busy_ns);
        } else {
            ctx.sleep(task);
            ctx.timer(ctx.now() + self.idle_ns, task as u64);
        }
    }

    fn timer(&mut self, token: u64, ctx: &mut Ctx) {
        ctx.run(token as TaskIdx, self.busy_ns);
    }

    fn finished(&self) -> bool {
        false
    }

    fn report(&self, _now: Time) -> Report {
        Report {
            value: self.bursts.iter().sum::<u64>() as f64,
            latencies_ns: Vec::new(),
        }
    }
}
