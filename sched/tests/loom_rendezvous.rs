//! loom models of synchronised switching: real threads as the CPUs of one core
//! (2 or 3 threads), each running [`sched::driver::drive`] against the system
//! in a loom mutex and the rendezvous on loom atomics, while another thread
//! does what broke the Xen series:
//!
//! * pausing (and unpausing, as `vcpu_set_periodic_timer` does) a vCPU of the
//!   running unit from its sibling — crash 1, `vcpu_pause` waiting forever;
//! * stopping the scheduler or taking a CPU offline mid-rendezvous — crash 2,
//!   siblings spinning forever in `sched_context_switched`;
//! * destroying or moving a domain whose unit is mid-switch;
//! * removing the core from its pool mid-switch and giving it to a pool of
//!   another granularity.
//!
//! Every model checks, in every interleaving: no thread hangs (all waits are
//! bounded), no two domains ever execute on the core at once (checked at each
//! `switch_to`), and the framework's invariants hold at the end.
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p sched --test loom_rendezvous --release`
#![cfg(loom)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use loom::sync::{Arc, Mutex};
use loom::thread;
use sched::driver::{CpuEvent, SystemLock, drive};
use sched::fifo::FifoScheduler;
use sched::lockstep::Lockstep;
use sched::rendezvous::RendezvousTable;
use sched::{
    CpuContext, CpuSet, DomainId, Granularity, Placement, Platform, PoolId, SchedError,
    SchedParams, Scheduler, System, SystemConfig, Time, Topology, VcpuId,
};

/// The FIFO test scheduler, and the real ones by name (credit2, credit...).
fn schedulers(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        other => sched::schedulers::create(other),
    }
}

/// Loom runs one thread at a time, so plain std atomics are exact here and add
/// no branch points; only the mutex and the rendezvous atomics are explored.
struct ModelPlatform {
    clock: AtomicU64,
    /// Domain id + 1 executing on each CPU (0 = idle).
    running: Vec<AtomicU32>,
    /// Domain of each vCPU slot.
    vcpu_domain: Vec<u32>,
    core: CpuSet,
    overlap: AtomicBool,
    /// Kicks not yet handled.
    pending: Vec<AtomicBool>,
    /// The operation thread has finished.
    op_done: AtomicBool,
}

impl Platform for ModelPlatform {
    fn now_ns(&self) -> Time {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn kick(&self, cpus: &CpuSet) {
        for cpu in cpus.iter() {
            if let Some(flag) = self.pending.get(cpu) {
                flag.store(true, Ordering::SeqCst);
            }
        }
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        let mine = match context {
            CpuContext::Idle => 0,
            CpuContext::Vcpu(v) => self.vcpu_domain[v.0 as usize] + 1,
        };
        self.running[cpu].store(mine, Ordering::SeqCst);
        if mine != 0 && self.core.contains(cpu) {
            for other in self.core.iter().filter(|&c| c != cpu) {
                let theirs = self.running[other].load(Ordering::SeqCst);
                if theirs != 0 && theirs != mine {
                    self.overlap.store(true, Ordering::SeqCst);
                }
            }
        }
    }

    fn set_timer(&self, _cpu: usize, _deadline_ns: Option<Time>) {}
}

struct Shared {
    system: Mutex<System>,
    table: std::sync::Arc<RendezvousTable>,
    platform: ModelPlatform,
    domains: Vec<DomainId>,
}

impl SystemLock for Shared {
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R {
        f(&mut self.system.lock().expect("not poisoned"))
    }
}

impl Shared {
    fn vcpus(&self, domain: usize) -> Vec<VcpuId> {
        self.with_system(|s| {
            s.domain_vcpus(self.domains[domain])
                .expect("domain")
                .to_vec()
        })
    }
}

#[derive(Clone, Copy)]
struct Setup {
    /// Threads per core (CPUs per resource).
    threads: u32,
    /// Pool 0 holds both cores (else core 1 is in a cpu-granularity pool 1).
    pool0_both_cores: bool,
    /// Start a switch on core 0 (its running domain yields to the next).
    pending_switch: bool,
    /// The pools' scheduler.
    scheduler: &'static str,
}

/// Builds the machine single-threaded (lockstep), then hands it to the threads.
fn build(setup: Setup) -> Arc<Shared> {
    let config = SystemConfig {
        rendezvous_timeout_ns: 6,
        retry_delay_ns: 1_000_000,
    };
    let topology = Topology::uniform(1, 1, 2, setup.threads);
    let mut m = Lockstep::new(System::new(topology, config, schedulers));
    // The observer's view of core 0, independent of the scheduler's
    // grouping: `uniform` numbers a core's threads consecutively.
    let core0: CpuSet = (0..setup.threads as usize).collect();
    let core1 = CpuSet::first_n(2 * setup.threads as usize).difference(&core0);
    m.system
        .boot_pool0(
            setup.scheduler,
            Granularity::Core,
            Placement::Fixed,
            &m.platform,
        )
        .expect("boot");
    let pool1 = m
        .system
        .pool_create(setup.scheduler, Granularity::Cpu, Placement::Fixed)
        .expect("pool 1");
    if !setup.pool0_both_cores {
        m.system
            .pool_remove_cpus(PoolId(0), core1, &m.platform)
            .expect("remove core 1");
        m.system
            .pool_add_cpus(pool1, core1, &m.platform)
            .expect("add core 1");
    }
    let count = if setup.pool0_both_cores { 3 } else { 2 };
    let mut domains = Vec::new();
    for _ in 0..count {
        let d = m
            .system
            .domain_create(
                PoolId(0),
                setup.threads,
                SchedParams::default(),
                &m.platform,
            )
            .expect("domain");
        for v in m.system.domain_vcpus(d).expect("vcpus").to_vec() {
            m.system.vcpu_wake(v, &m.platform).expect("wake");
        }
        domains.push(d);
        m.run(10_000).expect("settles");
    }
    // Domain 0 runs on core 0.
    let on_core0 = m
        .system
        .cpu_context(0)
        .and_then(CpuContext::vcpu)
        .and_then(|v| m.system.vcpu_info(v));
    assert_eq!(
        on_core0.map(|i| i.domain),
        Some(domains[0]),
        "setup: domain 0 runs on core 0"
    );
    if setup.pending_switch {
        let v0 = m.system.domain_vcpus(domains[0]).expect("vcpus")[0];
        m.system.vcpu_yield(v0, &m.platform).expect("yield");
    }
    let system = m.system;
    let cpus = system.topology().len();
    let mut vcpu_domain = vec![u32::MAX; 64];
    for &d in &domains {
        for &v in system.domain_vcpus(d).expect("vcpus") {
            vcpu_domain[v.0 as usize] = d.0;
        }
    }
    let running: Vec<AtomicU32> = (0..cpus)
        .map(|c| {
            AtomicU32::new(
                system
                    .cpu_context(c)
                    .and_then(CpuContext::vcpu)
                    .map_or(0, |v| vcpu_domain[v.0 as usize] + 1),
            )
        })
        .collect();
    Arc::new(Shared {
        table: system.rendezvous_table(),
        platform: ModelPlatform {
            clock: AtomicU64::new(0),
            running,
            vcpu_domain,
            core: core0,
            overlap: AtomicBool::new(false),
            pending: (0..cpus).map(|_| AtomicBool::new(true)).collect(),
            op_done: AtomicBool::new(false),
        },
        system: Mutex::new(system),
        domains,
    })
}

/// Runs core 0's CPUs as threads (each handles a kick, and one more if the
/// first left it mid-way), plus `op` on its own thread; then checks safety.
fn run(setup: Setup, drivers: &[usize], op: Option<fn(&Shared)>, check: fn(&Shared)) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(if setup.threads == 2 { 2 } else { 1 });
    builder.max_branches = 20_000;
    let drivers = drivers.to_vec();
    builder.check(move || {
        let shared = build(setup);
        let mut handles = Vec::new();
        for &cpu in &drivers {
            let shared = shared.clone();
            handles.push(thread::spawn(move || {
                // Handle kicks until the operation is over and none is left.
                for _ in 0..6 {
                    if shared.platform.pending[cpu].swap(false, Ordering::SeqCst) {
                        let report = drive(
                            &*shared,
                            &shared.table,
                            &shared.platform,
                            cpu,
                            CpuEvent::Kick,
                        );
                        assert!(!report.step_limit_hit, "cpu {cpu} ran out of steps");
                    } else if shared.platform.op_done.load(Ordering::SeqCst) {
                        break;
                    } else {
                        thread::yield_now();
                    }
                }
            }));
        }
        if let Some(op) = op {
            let shared = shared.clone();
            handles.push(thread::spawn(move || {
                op(&shared);
                shared.platform.op_done.store(true, Ordering::SeqCst);
            }));
        } else {
            shared.platform.op_done.store(true, Ordering::SeqCst);
        }
        for h in handles {
            h.join().expect("no thread panicked");
        }
        assert!(
            !shared.platform.overlap.load(Ordering::SeqCst),
            "two domains executed on core 0 at once"
        );
        shared
            .with_system(|s| s.check_invariants())
            .expect("invariants hold");
        check(&shared);
    });
}

/// After the threads are done, every CPU of core 0 handles its outstanding
/// kicks (serially: a rendezvous then waits out its bound and falls back).
fn finish_pending(shared: &Shared) {
    for _ in 0..3 {
        for cpu in shared.platform.core.iter() {
            if shared.platform.pending[cpu].swap(false, Ordering::SeqCst) {
                drive(shared, &shared.table, &shared.platform, cpu, CpuEvent::Kick);
            }
        }
    }
    assert!(
        !shared.platform.overlap.load(Ordering::SeqCst),
        "two domains executed on core 0 at once"
    );
    shared
        .with_system(|s| s.check_invariants())
        .expect("invariants hold");
}

fn core0(threads: u32) -> Vec<usize> {
    (0..threads as usize).collect()
}

fn domain_on(shared: &Shared, cpu: usize) -> Option<DomainId> {
    shared.with_system(|s| {
        s.cpu_context(cpu)
            .and_then(CpuContext::vcpu)
            .and_then(|v| s.vcpu_info(v))
            .map(|i| i.domain)
    })
}

fn switch_completes_or_times_out(threads: u32) {
    switch_completes_or_times_out_with(threads, "fifo");
}

fn switch_completes_or_times_out_with(threads: u32, scheduler: &'static str) {
    let setup = Setup {
        threads,
        pool0_both_cores: false,
        pending_switch: true,
        scheduler,
    };
    run(setup, &core0(threads), None, |shared| {
        let timed_out = shared.with_system(|s| {
            s.diagnostics()
                .any(|d| matches!(d, sched::Diagnostic::RendezvousTimedOut { .. }))
        });
        let on: Vec<Option<DomainId>> = (0..shared.platform.core.len())
            .map(|c| domain_on(shared, c))
            .collect();
        assert!(
            timed_out || on.iter().all(|&d| d == Some(shared.domains[1])),
            "without a timeout every thread switched to the next domain: {on:?}"
        );
    });
}

#[test]
fn switch_2_cpus() {
    switch_completes_or_times_out(2);
}

#[test]
fn switch_3_cpus() {
    switch_completes_or_times_out(3);
}

/// The real schedulers' decisions, not only FIFO's, under the same
/// interleavings and the same independent observer.
#[test]
fn switch_2_cpus_credit2() {
    switch_completes_or_times_out_with(2, "credit2");
}

#[test]
fn switch_2_cpus_credit() {
    switch_completes_or_times_out_with(2, "credit");
}

/// Crash 1: a vCPU pauses its sibling (as `vcpu_set_periodic_timer` does) and
/// waits, bounded, for it to stop; the sibling's CPU handles its kick alone.
fn pause_sibling(threads: u32, pending_switch: bool) {
    pause_sibling_with(threads, pending_switch, "fifo");
}

fn pause_sibling_with(threads: u32, pending_switch: bool, scheduler: &'static str) {
    let setup = Setup {
        threads,
        pool0_both_cores: false,
        pending_switch,
        scheduler,
    };
    let op: fn(&Shared) = |shared| {
        let sibling = shared.vcpus(0)[1];
        shared
            .with_system(|s| s.vcpu_pause(sibling, &shared.platform))
            .expect("pause");
    };
    // cpu 0 is busy in the hypercall (the op thread) and stays there; the
    // sibling CPUs drive, and finish their kicks after the threads are done.
    let drivers: Vec<usize> = (1..threads as usize).collect();
    run(setup, &drivers, Some(op), |shared| {
        for cpu in 1..shared.platform.core.len() {
            for _ in 0..3 {
                if shared.platform.pending[cpu].swap(false, Ordering::SeqCst) {
                    drive(shared, &shared.table, &shared.platform, cpu, CpuEvent::Kick);
                }
            }
        }
        let sibling = shared.vcpus(0)[1];
        assert_eq!(
            shared.with_system(|s| s.vcpu_running_on(sibling)),
            None,
            "the paused sibling left its CPU while cpu 0 never left its hypercall"
        );
        shared
            .with_system(|s| s.check_invariants())
            .expect("invariants hold");
        assert!(!shared.platform.overlap.load(Ordering::SeqCst));
    });
}

#[test]
fn pause_sibling_2_cpus() {
    pause_sibling(2, false);
}

#[test]
fn pause_sibling_during_switch_2_cpus() {
    pause_sibling(2, true);
}

#[test]
fn pause_sibling_3_cpus() {
    pause_sibling(3, false);
}

#[test]
fn pause_sibling_during_switch_2_cpus_credit2() {
    pause_sibling_with(2, true, "credit2");
}

#[test]
fn pause_sibling_during_switch_2_cpus_credit() {
    pause_sibling_with(2, true, "credit");
}

/// Crash 2: the last CPU of the core stops scheduling (shutdown/suspend) and
/// never joins; the others must not wait for it forever.
fn scheduler_stops(threads: u32) {
    let setup = Setup {
        threads,
        pool0_both_cores: false,
        pending_switch: true,
        scheduler: "fifo",
    };
    let drivers: Vec<usize> = (0..threads as usize - 1).collect();
    let op: fn(&Shared) = |shared| shared.with_system(|s| s.set_active(false, &shared.platform));
    run(setup, &drivers, Some(op), |shared| {
        for cpu in 0..shared.platform.core.len() - 1 {
            assert_eq!(
                domain_on(shared, cpu),
                None,
                "cpu {cpu} idles once scheduling stopped"
            );
        }
    });
}

#[test]
fn scheduler_stops_2_cpus() {
    scheduler_stops(2);
}

#[test]
fn scheduler_stops_3_cpus() {
    scheduler_stops(3);
}

/// A CPU of the switching core goes offline instead of joining.
fn cpu_offline(threads: u32) {
    let setup = Setup {
        threads,
        pool0_both_cores: true,
        pending_switch: true,
        scheduler: "fifo",
    };
    let drivers: Vec<usize> = (0..threads as usize - 1).collect();
    let op: fn(&Shared) = |shared| {
        let last = shared.platform.core.len() - 1;
        shared
            .with_system(|s| s.cpu_offline(last, &shared.platform))
            .expect("offline");
    };
    run(setup, &drivers, Some(op), |shared| {
        let last = shared.platform.core.len() - 1;
        shared.with_system(|s| {
            assert_eq!(s.pool_of_cpu(last), None);
            assert!(!s.online_cpus().contains(last));
        });
    });
}

#[test]
fn cpu_offline_2_cpus() {
    cpu_offline(2);
}

#[test]
fn cpu_offline_3_cpus() {
    cpu_offline(3);
}

/// The domain being switched in is destroyed mid-switch.
fn destroy_mid_switch(threads: u32) {
    let setup = Setup {
        threads,
        pool0_both_cores: false,
        pending_switch: true,
        scheduler: "fifo",
    };
    let op: fn(&Shared) = |shared| {
        let d = shared.domains[1];
        shared
            .with_system(|s| s.domain_destroy(d, &shared.platform))
            .expect("destroy");
    };
    let drivers: Vec<usize> = if threads == 2 { core0(2) } else { vec![0, 1] };
    run(setup, &drivers, Some(op), |shared| {
        finish_pending(shared);
        for cpu in 0..shared.platform.core.len() {
            assert_ne!(
                domain_on(shared, cpu),
                Some(shared.domains[1]),
                "a destroyed domain runs nowhere"
            );
        }
    });
}

#[test]
fn destroy_mid_switch_2_cpus() {
    destroy_mid_switch(2);
}

#[test]
fn destroy_mid_switch_3_cpus() {
    destroy_mid_switch(3);
}

/// The domain being switched in moves to the cpu-granularity pool mid-switch.
fn move_mid_switch(threads: u32) {
    let setup = Setup {
        threads,
        pool0_both_cores: false,
        pending_switch: true,
        scheduler: "fifo",
    };
    let op: fn(&Shared) = |shared| {
        let d = shared.domains[1];
        shared
            .with_system(|s| s.domain_move(d, PoolId(1), &shared.platform))
            .expect("move");
    };
    let drivers: Vec<usize> = if threads == 2 { core0(2) } else { vec![0, 1] };
    run(setup, &drivers, Some(op), |shared| {
        finish_pending(shared);
        let d = shared.domains[1];
        shared.with_system(|s| {
            assert_eq!(s.domain_pool(d), Some(PoolId(1)));
            assert_eq!(
                s.domain_units(d).map(<[_]>::len),
                Some(s.domain_vcpus(d).map_or(0, <[_]>::len))
            );
        });
        for cpu in 0..shared.platform.core.len() {
            assert_ne!(
                domain_on(shared, cpu),
                Some(d),
                "moved away from core 0's pool"
            );
        }
    });
}

#[test]
fn move_mid_switch_2_cpus() {
    move_mid_switch(2);
}

#[test]
fn move_mid_switch_3_cpus() {
    move_mid_switch(3);
}

/// Core 0 leaves pool 0 mid-switch and joins the cpu-granularity pool.
fn remove_core_mid_switch(threads: u32) {
    let setup = Setup {
        threads,
        pool0_both_cores: true,
        pending_switch: true,
        scheduler: "fifo",
    };
    let op: fn(&Shared) = |shared| {
        let core = shared.platform.core;
        shared.with_system(|s| {
            s.pool_remove_cpus(PoolId(0), core, &shared.platform)
                .expect("remove core 0");
            s.pool_add_cpus(PoolId(1), core, &shared.platform)
                .expect("add to the cpu pool");
        });
    };
    let drivers: Vec<usize> = if threads == 2 { core0(2) } else { vec![0, 1] };
    run(setup, &drivers, Some(op), |shared| {
        shared.with_system(|s| {
            assert_eq!(s.pool_of_cpu(0), Some(PoolId(1)));
            assert_eq!(
                s.pool_info(PoolId(0)).map(|p| p.domains),
                Some(3),
                "no domain lost"
            );
        });
    });
}

#[test]
fn remove_core_mid_switch_2_cpus() {
    remove_core_mid_switch(2);
}

#[test]
fn remove_core_mid_switch_3_cpus() {
    remove_core_mid_switch(3);
}
