//! loom model of the lock-free wake-up fast path ([`sched::BlockedHints`])
//! against a vCPU that blocks: the hypervisor's `Runtime::notify` and
//! `Runtime::block`, written out over the real [`System`] (in a loom mutex,
//! the scheduler's lock) and a loom mutex standing for the lock its
//! interrupt state lives under (the vGIC's domain lock, the virtual APIC's).
//!
//! The notifier records an interrupt under the interrupt lock, then reads the
//! vCPU's hint: clear, it only nudges (nothing to model); set, it takes the
//! scheduler's lock and wakes the vCPU. The blocker blocks under the
//! scheduler's lock, then looks for a pending interrupt under the interrupt
//! lock and wakes itself if one is there. In every interleaving and memory
//! order loom explores, the vCPU never ends blocked with the interrupt
//! pending (a lost wake-up).
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p sched --test loom_wake --release`
#![cfg(loom)]

use std::sync::atomic::{AtomicU64, Ordering};

use loom::sync::{Arc, Mutex};
use loom::thread;
use sched::fifo::FifoScheduler;
use sched::{
    BlockedHints, CpuContext, CpuSet, Granularity, Placement, Platform, PoolId, SchedError,
    SchedParams, Scheduler, System, SystemConfig, Time, Topology, VcpuId,
};

/// A platform that only keeps time: kicks and switches are not what this
/// model is about (the lockstep and rendezvous models cover them).
struct Quiet {
    clock: AtomicU64,
}

impl Platform for Quiet {
    fn now_ns(&self) -> Time {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
    fn kick(&self, _cpus: &CpuSet) {}
    fn switch_to(&self, _cpu: usize, _context: CpuContext) {}
    fn set_timer(&self, _cpu: usize, _deadline_ns: Option<Time>) {}
}

fn fifo(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        _ => Err(SchedError::UnknownScheduler),
    }
}

struct Shared {
    platform: Quiet,
    system: Mutex<System>,
    hints: BlockedHints,
    /// The vCPU's interrupt state: whether one is pending.
    interrupt: Mutex<bool>,
    vcpu: VcpuId,
}

/// One running vCPU on a one-CPU machine.
fn build() -> Arc<Shared> {
    let platform = Quiet {
        clock: AtomicU64::new(1),
    };
    let mut system = System::new(Topology::uniform(1, 1, 1, 1), SystemConfig::default(), fifo);
    system
        .boot_pool0("fifo", Granularity::Cpu, Placement::Fixed, &platform)
        .unwrap();
    let domain = system
        .domain_create(PoolId(0), 1, SchedParams::default(), &platform)
        .unwrap();
    let vcpu = system.domain_vcpus(domain).unwrap()[0];
    system.vcpu_wake(vcpu, &platform).unwrap();
    let hints = system.blocked_hints();
    Arc::new(Shared {
        platform,
        system: Mutex::new(system),
        hints,
        interrupt: Mutex::new(false),
        vcpu,
    })
}

/// `Runtime::notify` after the caller recorded the interrupt;
/// `hint_first` plants the fault of reading the hint before recording.
fn inject(shared: &Shared, hint_first: bool) {
    let clear = if hint_first {
        let clear = !shared.hints.may_be_blocked(shared.vcpu);
        *shared.interrupt.lock().unwrap() = true;
        clear
    } else {
        *shared.interrupt.lock().unwrap() = true;
        !shared.hints.may_be_blocked(shared.vcpu)
    };
    if clear {
        return; // the fast path: a nudge at most
    }
    let mut system = shared.system.lock().unwrap();
    system.vcpu_wake(shared.vcpu, &shared.platform).unwrap();
}

/// `Runtime::block`: block, then look again; `recheck: false` plants the
/// fault the look is there for.
fn block(shared: &Shared, recheck: bool) {
    shared
        .system
        .lock()
        .unwrap()
        .vcpu_block(shared.vcpu, &shared.platform)
        .unwrap();
    if recheck && *shared.interrupt.lock().unwrap() {
        let mut system = shared.system.lock().unwrap();
        system.vcpu_wake(shared.vcpu, &shared.platform).unwrap();
    }
}

/// Whether the run ended with the vCPU asleep on a pending interrupt.
fn lost(shared: &Shared) -> bool {
    let blocked = shared
        .system
        .lock()
        .unwrap()
        .vcpu_info(shared.vcpu)
        .unwrap()
        .blocked;
    blocked && *shared.interrupt.lock().unwrap()
}

/// Whether any interleaving lost the wake-up.
fn model(recheck: bool, hint_first: bool) -> bool {
    let any_lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = any_lost.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let shared = build();
        let notifier = {
            let shared = shared.clone();
            thread::spawn(move || inject(&shared, hint_first))
        };
        block(&shared, recheck);
        notifier.join().unwrap();
        if lost(&shared) {
            seen.store(true, Ordering::SeqCst);
        }
    });
    any_lost.load(Ordering::SeqCst)
}

#[test]
fn the_fast_path_never_loses_a_wake_up() {
    assert!(!model(true, false), "a vCPU slept on a pending interrupt");
}

#[test]
fn without_the_blockers_second_look_the_fast_path_loses_one() {
    // The planted fault: the model must be able to see a lost wake-up, or
    // the test above proves nothing.
    assert!(model(false, false), "no interleaving lost the wake-up");
}

#[test]
fn reading_the_hint_before_recording_the_interrupt_loses_one() {
    // The order the fast path depends on, planted the wrong way round.
    assert!(model(true, true), "no interleaving lost the wake-up");
}
