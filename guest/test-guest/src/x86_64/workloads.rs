//! The workloads on x86-64, printing the same lines as the aarch64 ones
//! (`aarch64/workloads.rs`, which the QEMU tests match): compute, sleeper
//! (TSC-deadline timer), ping-pong (x2APIC IPIs) and misbehave (an unknown
//! hypercall, then a read past the guest's RAM, which the hypervisor answers
//! by stopping the domain) and pools (list, create and destroy an empty pool;
//! `move_domain=` is not ported). Pause is not ported yet and says so.

use core::hint::black_box;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use guest_abi::{
    Call, CallError, Granularity, HvError, PoolInfo, PoolOp, Report, Scheduler, StatsScope, Tag,
    Unit, function_id,
};
use test_guest::config::{Config, Workload};
use test_guest::stats::Summary;

use super::{
    MAX_VCPUS, VECTOR_PING, VECTOR_PONG, VECTOR_TIMER, arm_timer, disarm_timer, halt, hypercall,
    is_online, ms_to_ticks, now, seen_bit, send_ipi, take_seen, us_to_ticks, wait_for_interrupt,
};
use crate::say;

/// Sleeper samples kept per vCPU.
const MAX_SAMPLES: usize = 256;
/// How long a vCPU waits at a barrier for the others.
const BARRIER_TIMEOUT_MS: u64 = 60_000;
/// How long vCPU 0 waits for a pong.
const PONG_TIMEOUT_MS: u64 = 1000;
/// How long a peer waits for a ping.
const PING_TIMEOUT_MS: u64 = 30_000;
/// How long the sleeper waits past its deadline before calling the timer dead.
const TIMER_GRACE_MS: u64 = 1000;
/// A call number this ABI does not define.
const UNKNOWN_CALL: u16 = 0x7F;

static PARTICIPANTS: AtomicUsize = AtomicUsize::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
static ARRIVED: AtomicUsize = AtomicUsize::new(0);
static GENERATION: AtomicUsize = AtomicUsize::new(0);

/// Waits until `parties` vCPUs have arrived; false after the timeout.
fn barrier(parties: usize, index: usize, name: &str) -> bool {
    let generation = GENERATION.load(Ordering::Acquire);
    if ARRIVED.fetch_add(1, Ordering::AcqRel) + 1 == parties {
        ARRIVED.store(0, Ordering::Relaxed);
        GENERATION.fetch_add(1, Ordering::Release);
        return true;
    }
    let deadline = now() + ms_to_ticks(BARRIER_TIMEOUT_MS);
    while GENERATION.load(Ordering::Acquire) == generation {
        if now() > deadline {
            say!("test-guest: vcpu {index} gave up waiting for the others before {name}");
            return false;
        }
        core::hint::spin_loop();
    }
    true
}

fn participates(index: usize) -> bool {
    PARTICIPANTS.load(Ordering::Acquire) & 1 << index != 0
}

/// Fixes the participants and lets them go.
pub fn start(wanted: usize) {
    let mask = (0..wanted)
        .filter(|&i| is_online(i))
        .fold(0, |m, i| m | 1 << i);
    PARTICIPANTS.store(mask, Ordering::Release);
    STARTED.store(true, Ordering::Release);
}

/// A secondary waits for vCPU 0 to start the workloads.
pub fn wait_start(index: usize) {
    let deadline = now() + ms_to_ticks(BARRIER_TIMEOUT_MS);
    while !STARTED.load(Ordering::Acquire) {
        if now() > deadline {
            say!("test-guest: vcpu {index} never got the start signal; stopping");
            halt();
        }
        core::hint::spin_loop();
    }
    if !participates(index) {
        say!("test-guest: vcpu {index} came online too late to take part; stopping");
        halt();
    }
}

/// Runs every configured workload on vCPU `index`, then halts.
pub fn run(index: usize, config: &Config) -> ! {
    let parties = PARTICIPANTS.load(Ordering::Acquire).count_ones() as usize;
    for &workload in config.workloads() {
        barrier(parties, index, workload.name());
        match workload {
            Workload::Compute => compute(index, config),
            Workload::Sleeper => sleeper(index, config),
            Workload::PingPong => ping_pong(index, config),
            Workload::Misbehave => misbehave(index),
            Workload::Pools => pools(index, config),
            other => {
                if index == 0 {
                    say!(
                        "test-guest: {} skipped: not ported to x86-64 yet",
                        other.name()
                    );
                }
            }
        }
    }
    barrier(parties, index, "the end");
    if index == 0 {
        match hypercall(&Call::SchedStats(StatsScope::Domain)) {
            Ok(r) => say!(
                "test-guest: sched stats runtime {} ns, {} dispatches, {} vCPUs",
                r[1],
                r[2],
                r[3]
            ),
            Err(e) => say!("test-guest: SCHED_STATS failed ({e})"),
        }
        say!("test-guest: all workloads done");
    }
    halt()
}

fn report(tag: &str, value: u64, unit: Unit) {
    if let Some(tag) = Tag::new(tag) {
        let _ = hypercall(&Call::TestReport(Report { tag, value, unit }));
    }
}

fn compute(index: usize, config: &Config) {
    let mut x = index as u64 + 1;
    let mut round = 0u32;
    loop {
        for _ in 0..config.progress_every {
            x = black_box(
                x.wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407),
            );
        }
        round += 1;
        say!("[vcpu{index}] progress {round}");
        if config.yield_every != 0 && round.is_multiple_of(config.yield_every) {
            let _ = hypercall(&Call::Yield);
        }
        if config.rounds != 0 && round >= config.rounds {
            break;
        }
    }
    report("progress", round as u64, Unit::Count);
    say!("test-guest: vcpu {index} compute done after {round} rounds");
}

/// Waits (HLT) until `want` arrives or the timer reaches `deadline`; returns
/// the TSC at the wake-up, or `None` on timeout. Waiting for the timer
/// itself returns its wake-up.
fn wait_for(want: u8, deadline: u64) -> Option<u64> {
    arm_timer(deadline);
    let give_up = deadline.saturating_add(ms_to_ticks(TIMER_GRACE_MS));
    let bits = seen_bit(want) | seen_bit(VECTOR_TIMER);
    loop {
        let seen = take_seen(bits);
        let at = now();
        if seen & seen_bit(want) != 0 {
            disarm_timer();
            return Some(at);
        }
        if seen & seen_bit(VECTOR_TIMER) != 0 && at >= deadline {
            return None;
        }
        if at > give_up {
            disarm_timer();
            say!(
                "test-guest: vcpu {} timer did not fire {TIMER_GRACE_MS} ms after its deadline",
                super::vcpu_index()
            );
            return None;
        }
        wait_for_interrupt();
    }
}

fn sleeper(index: usize, config: &Config) {
    let period = us_to_ticks(config.period_us as u64).max(1);
    let wanted = (config.samples as usize).min(MAX_SAMPLES);
    let mut latencies = [0u64; MAX_SAMPLES];
    let mut taken = 0;
    let mut next = now() + period;
    while taken < wanted {
        let Some(woke) = wait_for(VECTOR_TIMER, next) else {
            break;
        };
        latencies[taken] = woke.saturating_sub(next);
        taken += 1;
        next += period;
        let now = now();
        if next <= now {
            next = now + period;
        }
    }
    match Summary::of(&mut latencies[..taken]) {
        Some(s) => {
            say!(
                "test-guest: vcpu {index} sleeper p99 {} ticks (min {} avg {} max {}, {} samples, period {period} ticks)",
                s.p99,
                s.min,
                s.avg,
                s.max,
                s.count
            );
            report("slp_p99", s.p99, Unit::Ticks);
        }
        None => say!("test-guest: vcpu {index} sleeper got no samples"),
    }
}

fn ping_pong(index: usize, config: &Config) {
    let rounds = config.pingpong_rounds;
    if index != 0 {
        for round in 0..rounds {
            let deadline = now() + ms_to_ticks(PING_TIMEOUT_MS);
            if wait_for(VECTOR_PING, deadline).is_none() {
                say!("test-guest: vcpu {index} got no ping in round {round}");
                return;
            }
            send_ipi(0, VECTOR_PONG);
        }
        return;
    }
    let peers = (1..MAX_VCPUS).filter(|&p| participates(p)).count();
    let mut answered = 0;
    for peer in (1..MAX_VCPUS).filter(|&p| participates(p)) {
        let (mut min, mut max, mut sum, mut done) = (u64::MAX, 0, 0u64, 0u32);
        for _ in 0..rounds {
            let sent = now();
            send_ipi(peer, VECTOR_PING);
            let Some(back) = wait_for(VECTOR_PONG, sent + ms_to_ticks(PONG_TIMEOUT_MS)) else {
                break;
            };
            let rtt = back - sent;
            (min, max, sum, done) = (min.min(rtt), max.max(rtt), sum + rtt, done + 1);
        }
        if done == rounds {
            answered += 1;
            say!(
                "test-guest: pingpong vcpu 0 <-> vcpu {peer}: {done} round trips, min {min} avg {} max {max} ticks",
                sum / u64::from(done.max(1))
            );
        } else {
            say!(
                "test-guest: pingpong vcpu 0 <-> vcpu {peer}: no answer after {done} of {rounds} round trips"
            );
        }
    }
    say!("test-guest: pingpong done: {answered} of {peers} peers answered");
}

fn misbehave(index: usize) {
    if index != 0 {
        return;
    }
    let regs = super::vmmcall(u64::from(function_id(UNKNOWN_CALL)), [0; 5]);
    let code = regs[0] as i64;
    if code == HvError::NotSupported.code() {
        say!("test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected");
    } else {
        say!("test-guest: bad hypercall returned {code}, expected -1");
    }
    let address = super::ram_end();
    say!("test-guest: reading {address:#x}, outside its RAM");
    // SAFETY: deliberately reads guest-physical memory the domain does not
    // have (identity-mapped by the boot page tables): the hypervisor takes
    // the nested page fault and stops the domain, so this never returns a
    // value; if it does, the value is only printed.
    let value = unsafe { core::ptr::read_volatile(address as *const u64) };
    say!("test-guest: bad access at {address:#x} read {value:#x} without a fault");
}

/// Pools listed at most (a bound on the `List` loop).
const MAX_POOLS_LISTED: usize = 64;

fn scheduler_name(s: Scheduler) -> &'static str {
    match s {
        Scheduler::Credit2 => "credit2",
        Scheduler::Credit => "credit",
        Scheduler::Null => "null",
        Scheduler::Rt => "rt",
        Scheduler::Arinc653 => "arinc653",
    }
}

fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::Cpu => "cpu",
        Granularity::Core => "core",
        Granularity::Cluster => "cluster",
        Granularity::Socket => "socket",
    }
}

/// Lists the pools, then creates and destroys an empty one (the same lines
/// as aarch64's `pools`); `move_domain=` is not ported and says so.
fn pools(index: usize, config: &Config) {
    if index != 0 {
        return;
    }
    if !list_pools() {
        return;
    }
    let create = PoolOp::Create {
        scheduler: Scheduler::Credit2,
        granularity: Granularity::Cpu,
    };
    match hypercall(&Call::PoolOp(create)) {
        Ok(regs) => {
            let pool = regs[1] as u32;
            say!("test-guest: created empty pool {pool}");
            match hypercall(&Call::PoolOp(PoolOp::Destroy { pool })) {
                Ok(_) => say!("test-guest: destroyed pool {pool}"),
                Err(e) => say!("test-guest: destroying pool {pool} failed ({e})"),
            }
        }
        Err(e) => say!("test-guest: POOL_OP create failed ({e})"),
    }
    if config.move_domain != 0 {
        say!("test-guest: move_domain skipped: not ported to x86-64 yet");
    }
    list_pools();
}

/// Prints every pool; false if listing failed.
fn list_pools() -> bool {
    let mut from = 0u32;
    let mut listed = 0;
    while listed < MAX_POOLS_LISTED {
        let regs = match hypercall(&Call::PoolOp(PoolOp::List { from })) {
            Ok(regs) => regs,
            Err(CallError::Hv(HvError::NotFound)) => break,
            Err(e) => {
                say!("test-guest: POOL_OP list failed ({e})");
                return false;
            }
        };
        let info = match PoolInfo::from_regs(regs) {
            Ok(info) => info,
            Err(e) => {
                say!("test-guest: POOL_OP list returned a bad pool description ({e})");
                return false;
            }
        };
        say!(
            "test-guest: pool {}: {} {} granularity, {} CPUs (bitmap {:#x}), {} domains",
            info.id,
            scheduler_name(info.scheduler),
            granularity_name(info.granularity),
            info.cpus,
            info.cpu_bitmap,
            info.domains
        );
        listed += 1;
        let Some(next) = info.id.checked_add(1) else {
            break;
        };
        from = next;
    }
    say!("test-guest: {listed} pools listed");
    true
}
