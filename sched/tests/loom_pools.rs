//! loom model of the per-pool locks ([`sched::SharedSystem`]): two pools
//! decide at the same time, each under its own part's lock, while a domain
//! moves from one to the other under the machine's lock.
//!
//! Two CPUs, each a pool of its own at CPU granularity, each running a
//! domain of one vCPU. CPU 0's and CPU 1's events (a timer, then whatever
//! kicks they were sent) run on their own threads through the real driver
//! ([`sched::driver::drive`]); the main thread moves CPU 0's domain to CPU
//! 1's pool. In every interleaving loom explores:
//!
//! * no vCPU is ever loaded on two CPUs at once (checked at every
//!   `switch_to`, from what the CPUs were told to load);
//! * nothing deadlocks (loom reports a deadlock as a failure);
//! * once every kick is delivered, the moved vCPU has left CPU 0, CPU 0
//!   (whose pool has no domain left) is idle, and every invariant holds
//!   (and with the kicks still pending dropped, some interleaving leaves
//!   it stranded: the check can fail).
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p sched --test loom_pools --release`
#![cfg(loom)]

use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicU64, Ordering};

use loom::sync::Arc;
use loom::thread;
use sched::driver::{self, CpuEvent, SystemLock};
use sched::fifo::FifoScheduler;
use sched::{
    CpuContext, CpuSet, DomainId, Granularity, Placement, Platform, PoolId, SchedError,
    SchedParams, Scheduler, SharedSystem, System, SystemConfig, Time, Topology, VcpuId,
};

const CPUS: usize = 2;

/// Records kicks, and checks at every switch that the vCPU a CPU is told to
/// load is loaded nowhere else.
struct Recording {
    clock: AtomicU64,
    pending: StdMutex<CpuSet>,
    loaded: StdMutex<[CpuContext; CPUS]>,
}

impl Platform for Recording {
    fn now_ns(&self) -> Time {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
    fn kick(&self, cpus: &CpuSet) {
        let mut pending = self.pending.lock().unwrap();
        *pending = pending.union(cpus);
    }
    fn switch_to(&self, cpu: usize, context: CpuContext) {
        let mut loaded = self.loaded.lock().unwrap();
        if let Some(v) = context.vcpu() {
            let elsewhere = (0..CPUS).find(|&c| c != cpu && loaded[c].vcpu() == Some(v));
            assert_eq!(
                elsewhere, None,
                "cpu {cpu} told to load {v:?}, still loaded on another CPU"
            );
        }
        loaded[cpu] = context;
    }
    fn set_timer(&self, _cpu: usize, _deadline_ns: Option<Time>) {}
}

impl Recording {
    fn take_kick(&self, cpu: usize) -> bool {
        let mut pending = self.pending.lock().unwrap();
        let kicked = pending.contains(cpu);
        pending.remove(cpu);
        kicked
    }
}

fn fifo(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        _ => Err(SchedError::UnknownScheduler),
    }
}

/// The driver's lock for one CPU: its part.
struct PartOfCpu<'a>(&'a SharedSystem, usize);

impl SystemLock for PartOfCpu<'_> {
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        self.0.with_cpu(self.1, &(), f)
    }
}

struct Machine {
    shared: SharedSystem,
    platform: Recording,
    moved: DomainId,
    moved_vcpu: VcpuId,
    to: PoolId,
}

/// Pool 0 on CPU 0 and pool 1 on CPU 1, a running one-vCPU domain in each.
fn build() -> Arc<Machine> {
    let platform = Recording {
        clock: AtomicU64::new(1),
        pending: StdMutex::new(CpuSet::new()),
        loaded: StdMutex::new([CpuContext::Idle; CPUS]),
    };
    let mut system = System::new(Topology::uniform(1, 1, 2, 1), SystemConfig::default(), fifo);
    system
        .boot_pool0("fifo", Granularity::Cpu, Placement::Fixed, &platform)
        .unwrap();
    let to = system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    let cpu1 = CpuSet::single(1);
    system.pool_remove_cpus(PoolId(0), cpu1, &platform).unwrap();
    system.pool_add_cpus(to, cpu1, &platform).unwrap();
    let mut domains = Vec::new();
    for pool in [PoolId(0), to] {
        let d = system
            .domain_create(pool, 1, SchedParams::default(), &platform)
            .unwrap();
        let v = system.domain_vcpus(d).unwrap()[0];
        system.vcpu_wake(v, &platform).unwrap();
        domains.push((d, v));
    }
    let machine = Machine {
        shared: SharedSystem::new(system),
        platform,
        moved: domains[0].0,
        moved_vcpu: domains[0].1,
        to,
    };
    // Settle single-threaded: each CPU loads its domain's vCPU.
    for cpu in 0..CPUS {
        events(&machine, cpu, CpuEvent::Kick);
    }
    Arc::new(machine)
}

/// CPU `cpu` handles `first`, then every kick it is sent meanwhile
/// (bounded: the model's events are few).
fn events(machine: &Machine, cpu: usize, first: CpuEvent) {
    let table = machine.shared.rendezvous_table();
    let lock = PartOfCpu(&machine.shared, cpu);
    driver::drive(&lock, &table, &machine.platform, cpu, first);
    for _ in 0..4 {
        if !machine.platform.take_kick(cpu) {
            return;
        }
        driver::drive(&lock, &table, &machine.platform, cpu, CpuEvent::Kick);
    }
}

/// Runs the model; whether some interleaving ended wrong (the moved vCPU
/// still on CPU 0, CPU 0 not idle, an invariant broken), and how many
/// interleavings loom explored. `deliver_leftovers: false` plants the
/// fault of dropping the kicks still pending when the threads are done.
fn model(deliver_leftovers: bool) -> (bool, usize) {
    let wrong = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen, counted) = (wrong.clone(), runs.clone());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        let machine = build();
        let cpus: Vec<_> = (0..CPUS)
            .map(|cpu| {
                let machine = machine.clone();
                thread::spawn(move || events(&machine, cpu, CpuEvent::Timer))
            })
            .collect();
        machine.shared.with_whole(&(), |s| {
            s.domain_move(machine.moved, machine.to, &machine.platform)
                .unwrap()
        });
        for cpu in cpus {
            cpu.join().unwrap();
        }
        if deliver_leftovers {
            // Deliver what is left, one CPU at a time.
            for _ in 0..4 {
                for cpu in 0..CPUS {
                    if machine.platform.take_kick(cpu) {
                        events(&machine, cpu, CpuEvent::Kick);
                    }
                }
            }
        }
        let right = machine.shared.with_whole(&(), |s| {
            s.check_invariants().is_ok()
                && s.cpu_context(0) == Some(CpuContext::Idle)
                && s.vcpu_running_on(machine.moved_vcpu) != Some(0)
                && s.domain_pool(machine.moved) == Some(machine.to)
        });
        if !right {
            seen.store(true, Ordering::SeqCst);
        }
    });
    (wrong.load(Ordering::SeqCst), runs.load(Ordering::SeqCst))
}

#[test]
fn two_pools_decide_while_a_domain_moves_between_them() {
    let (wrong, runs) = model(true);
    assert!(
        !wrong,
        "an interleaving ended with the moved vCPU stuck or CPU 0 busy"
    );
    eprintln!("loom_pools: {runs} interleavings");
    assert!(
        runs > 10,
        "only {runs} interleavings: the threads never raced"
    );
}

#[test]
fn dropping_the_kicks_a_move_sends_strands_the_moved_vcpu() {
    // The planted fault: the end-state check must be able to fail.
    let (wrong, _) = model(false);
    assert!(wrong, "no interleaving needed the move's kicks");
}
