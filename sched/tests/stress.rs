//! Stress test of synchronised switching on real OS threads: one thread per
//! CPU (3 cores x 2 threads), channels as IPIs, a wall clock, and the system in
//! the hypervisor's per-pool locks ([`sched::SharedSystem`]: each CPU's events
//! and each vCPU's calls on its pool's part only, pool and domain operations
//! on the whole machine). A controller thread makes random vCPU wake/block/
//! pause/unpause/yield calls, moves domains between a fixed and a spread pool,
//! takes cores out of pools and puts them back, and destroys/recreates
//! domains; CPU threads now and then stall (as with interrupts off) so some
//! rendezvous time out.
//!
//! Fails on: two domains executing on the threads of one core at once (checked
//! at every `switch_to`), any event that takes longer than a second to handle
//! (a hang), a pause that never takes effect, an invariant violation, or too
//! few switches. Bounded: about 4 s of load, well under 20 s on 2 cores.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sched::driver::{CpuEvent, SystemLock, drive};
use sched::fifo::FifoScheduler;
use sched::rendezvous::RendezvousTable;
use sched::{
    CpuContext, CpuSet, DomainId, Granularity, LockWaits, PauseOutcome, Placement, Platform,
    PoolId, SchedError, SchedParams, Scheduler, SharedSystem, System, SystemConfig, Time, Topology,
    VcpuId,
};

const CORES: u32 = 3;
const THREADS: u32 = 2;
const CPUS: usize = (CORES * THREADS) as usize;
const LOAD: Duration = Duration::from_secs(2);
const HANG: Duration = Duration::from_secs(1);

fn factory(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        other => sched::schedulers::create(other),
    }
}

/// A tiny deterministic PRNG (xorshift64*), so failures can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

struct ThreadPlatform {
    start: Instant,
    ipis: Vec<Mutex<Sender<()>>>,
    timers: Vec<AtomicU64>,
    /// Domain id + 1 executing on each CPU, 0 = idle.
    running: Vec<AtomicU32>,
    /// Domain id + 1 of each vCPU slot.
    vcpu_domain: Vec<AtomicU32>,
    overlaps: AtomicU64,
    switches: AtomicU64,
}

impl Platform for ThreadPlatform {
    fn now_ns(&self) -> Time {
        self.start.elapsed().as_nanos() as Time
    }

    fn kick(&self, cpus: &CpuSet) {
        for cpu in cpus.iter() {
            if let Some(ipi) = self.ipis.get(cpu) {
                let _ = ipi.lock().expect("ipi").send(());
            }
        }
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        self.switches.fetch_add(1, Ordering::SeqCst);
        let mine = match context {
            CpuContext::Idle => 0,
            CpuContext::Vcpu(v) => self.vcpu_domain[v.0 as usize].load(Ordering::SeqCst),
        };
        self.running[cpu].store(mine, Ordering::SeqCst);
        if mine != 0 {
            let core = cpu / THREADS as usize;
            for sibling in core * THREADS as usize..(core + 1) * THREADS as usize {
                let theirs = self.running[sibling].load(Ordering::SeqCst);
                if sibling != cpu && theirs != 0 && theirs != mine {
                    self.overlaps.fetch_add(1, Ordering::SeqCst);
                    eprintln!(
                        "overlap on core {core}: cpu {cpu} runs d{} while cpu {sibling} runs d{}",
                        mine - 1,
                        theirs - 1
                    );
                }
            }
        }
    }

    fn set_timer(&self, cpu: usize, deadline_ns: Option<Time>) {
        self.timers[cpu].store(deadline_ns.map_or(0, |d| d.max(1)), Ordering::SeqCst);
    }
}

struct Machine {
    system: SharedSystem,
    table: Arc<RendezvousTable>,
    platform: ThreadPlatform,
    stop: AtomicBool,
    /// Longest time one event took to handle, in µs.
    longest_event_us: AtomicU64,
}

impl Machine {
    /// A pool or domain operation: the whole machine.
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        self.system.with_whole(&Yield, f)
    }

    /// A vCPU's own call: its pool's part.
    fn with_vcpu<R>(&self, vcpu: VcpuId, f: impl FnOnce(&mut System) -> R) -> R {
        self.system.with_vcpu(vcpu, &Yield, f)
    }
}

/// The CPU threads share two host cores with the controller: a thread that
/// finds a lock held yields to the holder rather than spin its time away.
struct Yield;

impl LockWaits for Yield {
    fn now_ns(&self) -> Time {
        0
    }
    fn acquired(&self, _: Option<Time>) {}
    fn relax(&self) {
        thread::yield_now();
    }
}

/// The driver's lock on one CPU: its pool's part.
struct CpuPart<'a>(&'a Machine, usize);

impl SystemLock for CpuPart<'_> {
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        self.0.system.with_cpu(self.1, &Yield, f)
    }
}

fn cpu_thread(machine: Arc<Machine>, cpu: usize, ipi: Receiver<()>, seed: u64) {
    let mut rng = Rng(seed);
    while !machine.stop.load(Ordering::SeqCst) {
        let event = match ipi.recv_timeout(Duration::from_micros(200)) {
            Ok(()) => Some(CpuEvent::Kick),
            Err(RecvTimeoutError::Timeout) => {
                let deadline = machine.platform.timers[cpu].load(Ordering::SeqCst);
                (deadline != 0 && deadline <= machine.platform.now_ns()).then(|| {
                    machine.platform.timers[cpu].store(0, Ordering::SeqCst);
                    CpuEvent::Timer
                })
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(event) = event else { continue };
        // Now and then the CPU is stuck with interrupts off (SMI, long
        // critical section) and joins late, past the rendezvous bound.
        if rng.below(400) == 0 {
            thread::sleep(Duration::from_millis(4));
        }
        let started = Instant::now();
        drive(
            &CpuPart(&machine, cpu),
            &machine.table,
            &machine.platform,
            cpu,
            event,
        );
        let took = started.elapsed();
        machine
            .longest_event_us
            .fetch_max(took.as_micros() as u64, Ordering::SeqCst);
        assert!(
            took < HANG,
            "cpu {cpu} spent {took:?} handling one event: a hang"
        );
    }
}

fn create_domain(machine: &Machine, pool: PoolId, vcpus: u32) -> Option<DomainId> {
    machine.with_system(|s| {
        let d = s
            .domain_create(pool, vcpus, SchedParams::default(), &machine.platform)
            .ok()?;
        let list = s.domain_vcpus(d)?.to_vec();
        for &v in &list {
            machine.platform.vcpu_domain[v.0 as usize].store(d.0 + 1, Ordering::SeqCst);
        }
        for v in list {
            s.vcpu_wake(v, &machine.platform).ok()?;
        }
        Some(d)
    })
}

fn all_vcpus(machine: &Machine) -> Vec<VcpuId> {
    machine.with_system(|s| {
        s.domains()
            .flat_map(|d| s.domain_vcpus(d).unwrap_or(&[]).to_vec())
            .collect()
    })
}

/// Pool 0's decisions by each scheduler in turn, one run after the other (the
/// CPU threads of two runs at once would starve each other on a small host).
#[test]
fn rendezvous_under_load_never_hangs_and_never_mixes_domains() {
    for scheduler in ["fifo", "credit2", "credit"] {
        under_load(scheduler);
    }
}

/// The load, with pool 0 (most of the machine) under `pool0_scheduler`.
fn under_load(pool0_scheduler: &str) {
    let config = SystemConfig {
        rendezvous_timeout_ns: 2_000_000,
        retry_delay_ns: 500_000,
    };
    let mut system = System::new(Topology::uniform(1, 1, CORES, THREADS), config, factory);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..CPUS {
        let (tx, rx) = channel();
        senders.push(Mutex::new(tx));
        receivers.push(rx);
    }
    let platform = ThreadPlatform {
        start: Instant::now(),
        ipis: senders,
        timers: (0..CPUS).map(|_| AtomicU64::new(0)).collect(),
        running: (0..CPUS).map(|_| AtomicU32::new(0)).collect(),
        vcpu_domain: (0..4096).map(|_| AtomicU32::new(0)).collect(),
        overlaps: AtomicU64::new(0),
        switches: AtomicU64::new(0),
    };
    system
        .boot_pool0(
            pool0_scheduler,
            Granularity::Core,
            Placement::Fixed,
            &platform,
        )
        .expect("boot");
    // Pool 1: the last core, spread placement, credit2 when it exists.
    let pool1_scheduler = if sched::schedulers::create("credit2").is_ok() {
        "credit2"
    } else {
        "fifo"
    };
    let pool1 = system
        .pool_create(pool1_scheduler, Granularity::Core, Placement::Spread)
        .expect("pool 1");
    let last_core = system.topology().siblings(CPUS - 1, Granularity::Core);
    system
        .pool_remove_cpus(PoolId(0), last_core, &platform)
        .expect("free the last core");
    system
        .pool_add_cpus(pool1, last_core, &platform)
        .expect("pool 1 gets it");
    let machine = Arc::new(Machine {
        table: system.rendezvous_table(),
        system: SharedSystem::new(system),
        platform,
        stop: AtomicBool::new(false),
        longest_event_us: AtomicU64::new(0),
    });

    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(cpu, rx)| {
            let machine = Arc::clone(&machine);
            thread::spawn(move || cpu_thread(machine, cpu, rx, 0x9e37_79b9_7f4a_7c15 ^ cpu as u64))
        })
        .collect();

    let mut domains: Vec<DomainId> = Vec::new();
    for vcpus in [2, 2, 3, 4] {
        domains.extend(create_domain(&machine, PoolId(0), vcpus));
    }
    domains.extend(create_domain(&machine, pool1, 2));

    let mut rng = Rng(0x5eed);
    let pools = [PoolId(0), pool1];
    let mut pauses = 0u32;
    let started = Instant::now();
    while started.elapsed() < LOAD {
        thread::sleep(Duration::from_micros(300));
        let p = &machine.platform;
        let vcpus = all_vcpus(&machine);
        let pick = |rng: &mut Rng| vcpus.get(rng.below(vcpus.len())).copied();
        match rng.below(100) {
            0..=24 => {
                if let Some(v) = pick(&mut rng) {
                    let _ = machine.with_vcpu(v, |s| s.vcpu_wake(v, p));
                }
            }
            25..=34 => {
                if let Some(v) = pick(&mut rng) {
                    let _ = machine.with_vcpu(v, |s| s.vcpu_block(v, p));
                }
            }
            35..=49 => {
                // Pause, wait (bounded) for it to stop, unpause: what
                // vcpu_set_periodic_timer does to another vCPU.
                if let Some(v) = pick(&mut rng)
                    && let Ok(outcome) = machine.with_vcpu(v, |s| s.vcpu_pause(v, p))
                {
                    if let PauseOutcome::Running { cpu } = outcome {
                        let waited = Instant::now();
                        while machine.with_vcpu(v, |s| s.vcpu_running_on(v)).is_some() {
                            assert!(
                                waited.elapsed() < HANG,
                                "pause of vcpu {v:?} on cpu {cpu} never took effect"
                            );
                            thread::sleep(Duration::from_micros(50));
                        }
                    }
                    pauses += 1;
                    let _ = machine.with_vcpu(v, |s| s.vcpu_unpause(v, p));
                }
            }
            50..=59 => {
                if let Some(v) = pick(&mut rng) {
                    let _ = machine.with_vcpu(v, |s| s.vcpu_yield(v, p));
                }
            }
            60..=74 => {
                if !domains.is_empty() {
                    let d = domains[rng.below(domains.len())];
                    let to = pools[rng.below(2)];
                    let _ = machine.with_system(|s| s.domain_move(d, to, p));
                }
            }
            75..=84 => {
                // A core leaves its pool and joins the other one.
                let core = rng.below(CORES as usize);
                let cpus = machine.with_system(|s| {
                    s.topology()
                        .siblings(core * THREADS as usize, Granularity::Core)
                });
                let from = machine.with_system(|s| s.pool_of_cpu(core * THREADS as usize));
                if let Some(from) = from {
                    let to = if from == pools[0] { pools[1] } else { pools[0] };
                    let moved = machine.with_system(|s| {
                        s.pool_remove_cpus(from, cpus, p)
                            .and_then(|()| s.pool_add_cpus(to, cpus, p))
                    });
                    if moved.is_err() {
                        // Refused (it would strand domains) or half done: put it back if free.
                        let _ = machine.with_system(|s| {
                            if cpus.is_subset(&s.free_cpus()) {
                                s.pool_add_cpus(from, cpus, p)
                            } else {
                                Ok(())
                            }
                        });
                    }
                }
            }
            85..=89 => {
                if domains.len() > 2 {
                    let d = domains.remove(rng.below(domains.len()));
                    let _ = machine.with_system(|s| s.domain_destroy(d, p));
                }
            }
            90..=94 => {
                let pool = pools[rng.below(2)];
                domains.extend(create_domain(&machine, pool, 1 + rng.below(4) as u32));
            }
            _ => {
                machine
                    .with_system(|s| s.check_invariants())
                    .expect("invariants hold under load");
            }
        }
        assert_eq!(
            machine.platform.overlaps.load(Ordering::SeqCst),
            0,
            "two domains shared a core"
        );
    }
    machine.stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().expect("no CPU thread panicked");
    }
    let switches = machine.platform.switches.load(Ordering::SeqCst);
    let (timeouts, diagnostics) = machine.with_system(|s| {
        s.check_invariants().expect("invariants hold at the end");
        let recent = s
            .diagnostics()
            .filter(|d| matches!(d, sched::Diagnostic::RendezvousTimedOut { .. }))
            .count();
        (recent, s.diagnostics_total())
    });
    eprintln!(
        "stress ({pool0_scheduler}): {switches} switches, {pauses} pauses, {diagnostics} diagnostics ({timeouts} of the last 32 were timeouts), longest event {} µs",
        machine.longest_event_us.load(Ordering::SeqCst)
    );
    assert_eq!(
        machine.platform.overlaps.load(Ordering::SeqCst),
        0,
        "two domains shared a core"
    );
    assert!(
        switches >= 2_000,
        "{pool0_scheduler}: only {switches} switches: the load did not exercise the rendezvous"
    );
    assert!(pauses >= 100, "only {pauses} pauses");
}
