//! The workloads, one source for every architecture: they reach the hardware
//! only through [`Machine`] (`crate::arch`). Every online vCPU takes part in
//! each one, in the order the configuration lists them, with a barrier
//! before each; vCPU 0 drives the ones that need a driver (ping-pong, pause,
//! misbehaviour, pools, cpuoff, echo).

use core::hint::black_box;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use guest_abi::{
    Call, CallError, DomainParams, Granularity, HvError, PoolInfo, PoolOp, Report, SchedStats,
    Scheduler, StatsScope, Tag, Unit, function_id,
};
use test_guest::barrier::{Barrier, VcpuSet};
use test_guest::checks::{OffWatch, PauseWatch, stalled};
use test_guest::config::{Config, End, WaitKind, Workload};
use test_guest::input::LineInput;
use test_guest::interrupt::{Interrupt, Ipi, Step, TimerRound, step};
use test_guest::pools::{Described, Outcome};
use test_guest::stats::Summary;

use crate::arch::{Arch, MAX_VCPUS, Machine};
use crate::say;

/// Sleeper samples kept per vCPU.
const MAX_SAMPLES: usize = 256;
/// How long a vCPU waits at a barrier for the others.
const BARRIER_TIMEOUT_MS: u64 = 60_000;
/// How long vCPU 0 waits for a pong.
const PONG_TIMEOUT_MS: u64 = 1000;
/// How long a peer waits for a ping (vCPU 0 serves the peers in turn).
const PING_TIMEOUT_MS: u64 = 30_000;
/// How long a wait goes on past its deadline before calling the timer dead.
const TIMER_GRACE_MS: u64 = 1000;
/// How long the paused sibling's counter is watched (each half).
const PAUSE_WATCH_MS: u64 = 50;
/// An upper bound on the sibling's counting loop.
const PAUSE_SPIN_LIMIT_MS: u64 = 30_000;
/// A call number this ABI does not define.
const UNKNOWN_CALL: u16 = 0x7F;

/// The vCPUs taking part, set once by vCPU 0.
static PARTICIPANTS: AtomicUsize = AtomicUsize::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
static BARRIER: Barrier = Barrier::new();
static COUNTERS: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];
/// Pause phases vCPU 0 has finished (the target counts until this reaches
/// the number of the phase it is in).
static PAUSE_PHASES_DONE: AtomicU64 = AtomicU64::new(0);
/// Pause phases each vCPU has entered.
static PAUSE_PHASES_SEEN: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];
static REPORTS_WORK: AtomicBool = AtomicBool::new(true);
static STRAY_INTERRUPTS: AtomicU64 = AtomicU64::new(0);
/// Wait with the BLOCK hypercall (until it fails once).
static USE_BLOCK: AtomicBool = AtomicBool::new(false);

/// Waits at the barrier until every participant has arrived; false (after
/// saying so) if they did not within the bound.
fn barrier(index: usize, name: &str) -> bool {
    let deadline = Arch::now() + Arch::ms_to_ticks(BARRIER_TIMEOUT_MS);
    let passed = BARRIER.wait(
        participants().count(),
        Arch::event_signal,
        Arch::event_wait,
        || Arch::now() > deadline,
    );
    if !passed {
        say!("test-guest: vcpu {index} gave up waiting for the others before {name}");
    }
    passed
}

fn participants() -> VcpuSet {
    VcpuSet::from_bits(PARTICIPANTS.load(Ordering::Acquire))
}

fn participates(index: usize) -> bool {
    participants().contains(index)
}

/// Fixes the participants (the vCPUs online now among the first `wanted`)
/// and lets them go.
pub fn start(wanted: usize) {
    let set = VcpuSet::of(wanted, Arch::is_online);
    PARTICIPANTS.store(set.bits(), Ordering::Release);
    STARTED.store(true, Ordering::Release);
    Arch::event_signal();
}

/// A secondary waits for vCPU 0 to start the workloads.
pub fn wait_start(index: usize) {
    let deadline = Arch::now() + Arch::ms_to_ticks(BARRIER_TIMEOUT_MS);
    while !STARTED.load(Ordering::Acquire) {
        if Arch::now() > deadline {
            say!("test-guest: vcpu {index} never got the start signal; stopping");
            Arch::halt();
        }
        Arch::event_wait();
    }
    if !participates(index) {
        say!("test-guest: vcpu {index} came online too late to take part; stopping");
        Arch::halt();
    }
}

/// Runs every configured workload on vCPU `index`, then idles or powers off.
pub fn run(index: usize, config: &Config) -> ! {
    if index == 0 && config.wait == WaitKind::Block {
        USE_BLOCK.store(true, Ordering::Relaxed);
        say!("test-guest: waiting for interrupts with BLOCK");
    }
    run_from(index, config, 0)
}

/// Goes on with the workloads from position `next` (after a workload that
/// left its call stack behind, such as `top`).
#[cfg(target_arch = "aarch64")]
pub fn resume(index: usize, config: &Config, next: usize) -> ! {
    run_from(index, config, next)
}

/// Runs the configured workloads from position `first` on, then the end.
fn run_from(index: usize, config: &Config, first: usize) -> ! {
    for (position, &workload) in config.workloads().iter().enumerate().skip(first) {
        barrier(index, workload.name());
        match workload {
            Workload::Compute => compute(index, config),
            Workload::Sleeper => sleeper(index, config),
            Workload::PingPong => ping_pong(index, config),
            Workload::Pause => pause(index, config),
            Workload::Misbehave => misbehave(index, config),
            Workload::Pools => pools(index, config),
            Workload::CpuOff => cpu_off(index, config, position),
            Workload::Restart => restart(index, config, position),
            Workload::Traps => traps(index, config),
            Workload::Top => {
                if index == 0 && Arch::trap_at_top(position + 1).is_none() {
                    say!("test-guest: top skipped: not on this architecture yet");
                }
            }
            Workload::Echo => echo(index),
            Workload::DebugLeak => debug_leak(index),
            Workload::SimdLeak => simd_leak(index),
            Workload::UartLoop => uart_loop(index),
            Workload::TimerLevel => timer_level(index),
        }
    }
    barrier(index, "the end");
    if index == 0 {
        print_sched_stats();
        let stray = STRAY_INTERRUPTS.load(Ordering::Relaxed);
        if stray > 0 {
            say!("test-guest: {stray} unexpected interrupts acknowledged and ignored");
        }
        say!("test-guest: all workloads done");
        if config.end != End::Idle {
            Arch::end(config.end);
        }
    }
    Arch::halt()
}

/// Reports a value with TEST_REPORT; after the first failure, stops trying
/// (the console line printed beside it is the fallback).
fn report(tag: &str, value: u64, unit: Unit) {
    if !REPORTS_WORK.load(Ordering::Relaxed) {
        return;
    }
    let Some(tag) = Tag::new(tag) else {
        say!("test-guest: bad report tag {tag:?}");
        return;
    };
    match Arch::hypercall(&Call::TestReport(Report { tag, value, unit })) {
        Ok(_) => {}
        Err(e) => {
            if REPORTS_WORK.swap(false, Ordering::Relaxed) {
                say!("test-guest: TEST_REPORT failed ({e}): results on the console only");
            }
        }
    }
}

fn compute(index: usize, config: &Config) {
    let mut x = index as u64 + 1;
    let mut round = 0u32;
    loop {
        for _ in 0..config.progress_every {
            // A 64-bit LCG step the compiler cannot fold away.
            x = black_box(
                x.wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407),
            );
        }
        round += 1;
        COUNTERS[index].store(round as u64, Ordering::Relaxed);
        say!("[vcpu{index}] progress {round}");
        if config.yield_every != 0 && round.is_multiple_of(config.yield_every) {
            yield_once(index);
        }
        if config.rounds != 0 && round >= config.rounds {
            break;
        }
    }
    report("progress", round as u64, Unit::Count);
    say!("test-guest: vcpu {index} compute done after {round} rounds");
}

/// YIELD; says once per vCPU if the hypervisor refuses it.
fn yield_once(index: usize) {
    static REFUSED: [AtomicBool; MAX_VCPUS] = [const { AtomicBool::new(false) }; MAX_VCPUS];
    if REFUSED[index].load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = Arch::hypercall(&Call::Yield) {
        REFUSED[index].store(true, Ordering::Relaxed);
        say!("test-guest: vcpu {index} YIELD failed ({e}); not yielding again");
    }
}

/// Waits until `want` is taken or the timer reaches `deadline`; returns the
/// counter when it was taken, or `None` on timeout. Waiting for the timer
/// itself (`want == Interrupt::Timer`) returns its wake-up.
fn wait_for_interrupt(want: Interrupt, deadline: u64) -> Option<u64> {
    Arch::arm_timer(deadline);
    let give_up = deadline.saturating_add(Arch::ms_to_ticks(TIMER_GRACE_MS));
    loop {
        wait();
        let mut timed_out = false;
        while let Some(taken) = Arch::take_interrupt() {
            let at = Arch::now();
            match step(taken, want, at, deadline) {
                Step::Wanted => {
                    Arch::disarm_timer();
                    return Some(at);
                }
                // The timer came back disarmed; what else is pending is
                // still taken first, in case it is the awaited one.
                Step::TimedOut => timed_out = true,
                Step::Stale => Arch::arm_timer(deadline),
                Step::Stray => {
                    STRAY_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if timed_out {
            return None;
        }
        if Arch::now() > give_up {
            Arch::disarm_timer();
            say!(
                "test-guest: vcpu {} {} did not fire {TIMER_GRACE_MS} ms after its deadline",
                Arch::vcpu_index(),
                Arch::TIMER_NAME
            );
            return None;
        }
    }
}

/// Waits for an interrupt: [`Machine::idle`], or BLOCK when configured and
/// supported.
fn wait() {
    if USE_BLOCK.load(Ordering::Relaxed) {
        match Arch::hypercall(&Call::Block { timeout_ns: 0 }) {
            Ok(_) => return,
            Err(e) => {
                if USE_BLOCK.swap(false, Ordering::Relaxed) {
                    say!(
                        "test-guest: BLOCK failed ({e}); waiting with {}",
                        Arch::IDLE_NAME
                    );
                }
            }
        }
    }
    Arch::idle();
}

/// Whether interrupts can be used; vCPU 0 says so once per skipped workload.
fn interrupts_usable(index: usize, workload: &str) -> bool {
    if Arch::interrupts_usable() {
        return true;
    }
    if index == 0 {
        say!("test-guest: {workload} skipped: no usable interrupt controller");
    }
    false
}

fn sleeper(index: usize, config: &Config) {
    if !interrupts_usable(index, "sleeper") {
        return;
    }
    let period = Arch::us_to_ticks(config.period_us as u64).max(1);
    // It sleeps every period it is asked for (a contender for minutes), and
    // keeps the latencies of the first MAX_SAMPLES.
    let wanted = config.samples as usize;
    let mut latencies = [0u64; MAX_SAMPLES];
    let mut slept = 0;
    let mut next = Arch::now() + period;
    while slept < wanted {
        let Some(woke) = wait_for_interrupt(Interrupt::Timer, next) else {
            break;
        };
        if let Some(slot) = latencies.get_mut(slept) {
            *slot = woke.saturating_sub(next);
        }
        slept += 1;
        // Periodic; after an overrun the next period starts from now.
        next += period;
        let now = Arch::now();
        if next <= now {
            next = now + period;
        }
    }
    let kept = slept.min(MAX_SAMPLES);
    match Summary::of(&mut latencies[..kept]) {
        Some(s) => {
            say!(
                "test-guest: vcpu {index} sleeper p99 {} ticks (min {} avg {} max {}, {} samples, period {period} ticks)",
                s.p99,
                s.min,
                s.avg,
                s.max,
                s.count
            );
            if slept > kept {
                say!("test-guest: vcpu {index} sleeper slept {slept} periods in all");
            }
            report("slp_min", s.min, Unit::Ticks);
            report("slp_avg", s.avg, Unit::Ticks);
            report("slp_p99", s.p99, Unit::Ticks);
        }
        None => say!("test-guest: vcpu {index} sleeper got no samples"),
    }
}

fn ping_pong(index: usize, config: &Config) {
    if !interrupts_usable(index, "pingpong") {
        return;
    }
    let rounds = config.pingpong_rounds;
    if index != 0 {
        for round in 0..rounds {
            let deadline = Arch::now() + Arch::ms_to_ticks(PING_TIMEOUT_MS);
            if wait_for_interrupt(Interrupt::Ping, deadline).is_none() {
                say!("test-guest: vcpu {index} got no ping in round {round}");
                return;
            }
            Arch::send_ipi(0, Ipi::Pong);
        }
        return;
    }
    let peers = participants().without(0);
    let mut answered = 0;
    for peer in peers.iter() {
        let (mut min, mut max, mut sum, mut done) = (u64::MAX, 0, 0u64, 0u32);
        for _ in 0..rounds {
            let sent = Arch::now();
            Arch::send_ipi(peer, Ipi::Ping);
            let deadline = sent + Arch::ms_to_ticks(PONG_TIMEOUT_MS);
            let Some(back) = wait_for_interrupt(Interrupt::Pong, deadline) else {
                break;
            };
            let rtt = back - sent;
            (min, max, sum, done) = (min.min(rtt), max.max(rtt), sum + rtt, done + 1);
        }
        if done == rounds {
            answered += 1;
            say!(
                "test-guest: pingpong vcpu 0 <-> vcpu {peer}: {done} round trips, min {min} avg {} max {max} ticks",
                sum / done.max(1) as u64
            );
            report("pp_avg", sum / done.max(1) as u64, Unit::Ticks);
        } else {
            say!(
                "test-guest: pingpong vcpu 0 <-> vcpu {peer}: no answer after {done} of {rounds} round trips"
            );
        }
    }
    say!(
        "test-guest: pingpong done: {answered} of {} peers answered",
        peers.count()
    );
}

fn pause(index: usize, config: &Config) {
    let target = config.pause_target as usize;
    if target >= MAX_VCPUS || !participates(target) {
        if index == 0 {
            say!("test-guest: pause skipped: vcpu {target} is not running");
        }
        return;
    }
    let phase = PAUSE_PHASES_SEEN[index].fetch_add(1, Ordering::Relaxed) + 1;
    if index == 0 {
        pause_driver(target);
    } else if index == target {
        let limit = Arch::now() + Arch::ms_to_ticks(PAUSE_SPIN_LIMIT_MS);
        while PAUSE_PHASES_DONE.load(Ordering::Acquire) < phase && Arch::now() < limit {
            COUNTERS[target].fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn pause_driver(target: usize) {
    let watch = Arch::ms_to_ticks(PAUSE_WATCH_MS);
    let counter = || COUNTERS[target].load(Ordering::Relaxed);
    let vcpu = target as u32;
    Arch::delay(watch);
    match Arch::hypercall(&Call::TestPauseSibling { vcpu }) {
        Err(CallError::Hv(HvError::NotSupported)) => {
            say!("test-guest: pause sibling not supported (-1), skipped");
        }
        Err(e) => say!("test-guest: pause sibling {target} refused: {e}"),
        Ok(_) => {
            let paused_at = counter();
            Arch::delay(watch);
            let while_paused = counter();
            if let Err(e) = Arch::hypercall(&Call::TestUnpauseSibling { vcpu }) {
                say!("test-guest: unpause sibling {target} refused: {e}");
            }
            Arch::delay(watch);
            let after = counter();
            let watched = PauseWatch {
                paused_at,
                while_paused,
                after,
            };
            if watched.held() {
                say!(
                    "test-guest: pause sibling {target} ok: counter held at {while_paused} while paused, rose to {after}"
                );
            } else {
                say!(
                    "test-guest: pause sibling {target} did not hold: {paused_at} -> {while_paused} while paused, {after} after"
                );
            }
        }
    }
    PAUSE_PHASES_DONE.fetch_add(1, Ordering::Release);
}

fn misbehave(index: usize, config: &Config) {
    if index != 0 {
        return;
    }
    let regs = Arch::raw_call(function_id(UNKNOWN_CALL) as u64, [0; 5]);
    let code = regs[0] as i64;
    if code == HvError::NotSupported.code() {
        say!("test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected");
    } else {
        say!("test-guest: bad hypercall returned {code}, expected -1");
    }
    let probe = config.probe;
    let address = if probe == 0 { Arch::ram_end() } else { probe };
    if probe == 0 {
        say!(
            "test-guest: reading {address:#x}, outside its RAM{}",
            Arch::ram_end_note()
        );
    } else {
        say!("test-guest: reading {address:#x} (probe=)");
    }
    match Arch::probe_load(address) {
        (_, Some(fault)) => say!("test-guest: bad access at {address:#x} faulted ({fault})"),
        (value, None) => {
            say!("test-guest: bad access at {address:#x} read {value:#x} without a fault")
        }
    }
}

/// Pools listed at most (a bound on the `List` loop).
const MAX_POOLS_LISTED: usize = 64;

/// Lists the pools, then creates and destroys an empty one; with
/// `move_domain=N`, also moves domain N, running, to a new pool and checks
/// that bad operations are refused with the right codes.
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
    match Arch::hypercall(&Call::PoolOp(create)) {
        Ok(regs) => {
            let pool = regs[1] as u32;
            say!("test-guest: created empty pool {pool}");
            match Arch::hypercall(&Call::PoolOp(PoolOp::Destroy { pool })) {
                Ok(_) => say!("test-guest: destroyed pool {pool}"),
                Err(e) => say!("test-guest: destroying pool {pool} failed ({e})"),
            }
        }
        Err(e) => say!("test-guest: POOL_OP create failed ({e})"),
    }
    if config.move_domain != 0 {
        move_domain(config.move_domain, config.move_from, config.move_cpu);
        list_pools();
    }
    if config.destroy_domain != 0 {
        let domain = config.destroy_domain;
        pool_op("destroy a domain", PoolOp::DestroyDomain { domain }, None);
    }
}

/// Prints every pool; false if listing failed.
fn list_pools() -> bool {
    let mut from = 0u32;
    let mut listed = 0;
    while listed < MAX_POOLS_LISTED {
        let regs = match Arch::hypercall(&Call::PoolOp(PoolOp::List { from })) {
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
        say!("test-guest: {}", Described(info));
        listed += 1;
        let Some(next) = info.id.checked_add(1) else {
            break;
        };
        from = next;
    }
    say!("test-guest: {listed} pools listed");
    true
}

/// One pool operation; says what happened. `expect` is the error the
/// operation must give (None: it must succeed). Returns its registers if it
/// succeeded as it had to.
fn pool_op(what: &str, op: PoolOp, expect: Option<HvError>) -> Option<[u64; 4]> {
    let result = Arch::hypercall(&Call::PoolOp(op));
    let outcome = Outcome::of(&result, expect);
    say!("test-guest: POOL_OP {what} {outcome}");
    match (outcome, result) {
        (Outcome::Done, Ok(regs)) => Some(regs),
        _ => None,
    }
}

/// Builds a pool out of `cpu`'s core (taken from pool `from`) and moves
/// `domain` there, with bad operations before and after that must change
/// nothing.
fn move_domain(domain: u32, from: u32, cpu: u32) {
    pool_op(
        "move to a missing pool",
        PoolOp::MoveDomain { domain, pool: 999 },
        Some(HvError::NotFound),
    );
    let create = PoolOp::Create {
        scheduler: Scheduler::Credit2,
        granularity: Granularity::Core,
    };
    let Some(regs) = pool_op("create a core pool", create, None) else {
        return;
    };
    let pool = regs[1] as u32;
    pool_op(
        "move to a pool without CPUs",
        PoolOp::MoveDomain { domain, pool },
        Some(HvError::Busy),
    );
    if pool_op(
        "take a core from the source pool",
        PoolOp::RemoveCpu { pool: from, cpu },
        None,
    )
    .is_none()
    {
        return;
    }
    if pool_op(
        "give the core to the new pool",
        PoolOp::AddCpu { pool, cpu },
        None,
    )
    .is_none()
    {
        return;
    }
    if pool_op("move the domain", PoolOp::MoveDomain { domain, pool }, None).is_some() {
        say!("test-guest: moved dom{domain} to pool {pool}");
    }
    pool_op(
        "remove the last core of a pool with a domain",
        PoolOp::RemoveCpu { pool, cpu },
        Some(HvError::Busy),
    );
    pool_op(
        "destroy a pool with a domain",
        PoolOp::Destroy { pool },
        Some(HvError::Busy),
    );
    // The toolstack's other domain operations on the moved domain: pinned
    // to its new pool's CPUs (soft: the first), refused outside it; paused
    // and unpaused, a second pause refused.
    let bitmap = match Arch::hypercall(&Call::PoolOp(PoolOp::List { from: pool })) {
        Ok(regs) => PoolInfo::from_regs(regs).map_or(0, |info| info.cpu_bitmap),
        Err(_) => 0,
    };
    if bitmap != 0 {
        let soft = bitmap & bitmap.wrapping_neg();
        pool_op(
            "pin the domain to its pool",
            PoolOp::PinDomain {
                domain,
                hard: bitmap,
                soft,
            },
            None,
        );
        pool_op(
            "pin the domain outside its pool",
            PoolOp::PinDomain {
                domain,
                hard: !bitmap & 0xff,
                soft: 0,
            },
            Some(HvError::InvalidParameter),
        );
    }
    pool_op("pause the domain", PoolOp::PauseDomain { domain }, None);
    pool_op(
        "pause it twice",
        PoolOp::PauseDomain { domain },
        Some(HvError::Busy),
    );
    pool_op("unpause the domain", PoolOp::UnpauseDomain { domain }, None);
    // Its scheduling parameters, read, changed and read back (xl sched-credit2).
    let Some(regs) = pool_op(
        "read the domain's parameters",
        PoolOp::GetDomainParams { domain },
        None,
    ) else {
        return;
    };
    let Ok(mut params) = DomainParams::from_words([regs[1], regs[2]]) else {
        say!("test-guest: POOL_OP returned bad parameters");
        return;
    };
    params.weight = 512;
    pool_op(
        "set weight 512",
        PoolOp::SetDomainParams { domain, params },
        None,
    );
    let zero = DomainParams {
        weight: 0,
        ..params
    };
    pool_op(
        "set weight 0",
        PoolOp::SetDomainParams {
            domain,
            params: zero,
        },
        Some(HvError::InvalidParameter),
    );
    if let Some(regs) = pool_op("read them back", PoolOp::GetDomainParams { domain }, None)
        && let Ok(back) = DomainParams::from_words([regs[1], regs[2]])
    {
        say!(
            "test-guest: dom{domain} weight {} cap {}",
            back.weight,
            back.cap
        );
    }
}

/// How long `echo` waits for input before giving up.
const ECHO_IDLE_MS: u64 = 60_000;
/// Longest line `echo` collects; the rest of a longer line is dropped.
const ECHO_LINE: usize = 100;

/// vCPU 0 takes console input on the console's receive interrupt and
/// prints every line.
fn echo(index: usize) {
    if index != 0 || !interrupts_usable(index, "echo") {
        return;
    }
    if !Arch::console_rx_enable() {
        say!(
            "test-guest: echo: cannot enable {}",
            Arch::CONSOLE_INTERRUPT_NAME
        );
        return;
    }
    say!("test-guest: echo ready (type a line; quit ends)");
    let mut input = LineInput::<ECHO_LINE>::new();
    let mut interrupts = 0u64;
    loop {
        let deadline = Arch::now() + Arch::ms_to_ticks(ECHO_IDLE_MS);
        if wait_for_interrupt(Interrupt::ConsoleRx, deadline).is_none() {
            say!("test-guest: echo: no input for {ECHO_IDLE_MS} ms; stopping");
            return;
        }
        interrupts += 1;
        let mut quit = false;
        while let Some(byte) = Arch::console_read_byte() {
            let Some(line) = input.push(byte) else {
                continue;
            };
            let text = core::str::from_utf8(line).unwrap_or("(not UTF-8)");
            say!(
                "test-guest: echo: \"{text}\" ({} bytes, {interrupts} interrupts so far)",
                line.len()
            );
            if text == "quit" {
                quit = true;
                break;
            }
        }
        Arch::console_rx_done();
        if quit {
            return;
        }
    }
}

/// Bytes `uartloop` sends, one at a time.
const UART_LOOP_BYTES: &[u8] = b"passthrough";
/// How long one byte may take to come back.
const UART_LOOP_WAIT_MS: u64 = 1000;

/// The `uartloop` workload (see [`Workload::UartLoop`]), on vCPU 0.
fn uart_loop(index: usize) {
    if index != 0 || !interrupts_usable(index, "uartloop") {
        return;
    }
    let Some((base, intid)) = Arch::device_uart() else {
        say!("test-guest: uartloop skipped: no second PL011 in the device tree");
        return;
    };
    if !Arch::device_uart_start() {
        say!("test-guest: uartloop: cannot enable INTID {intid}");
        return;
    }
    say!("test-guest: uartloop: PL011 at {base:#x}, INTID {intid}, loopback");
    let mut back = 0;
    for &sent in UART_LOOP_BYTES {
        Arch::device_uart_send(sent);
        let deadline = Arch::now() + Arch::ms_to_ticks(UART_LOOP_WAIT_MS);
        if wait_for_interrupt(Interrupt::DeviceRx, deadline).is_none() {
            say!(
                "test-guest: uartloop: no receive interrupt for {sent:#x} in {UART_LOOP_WAIT_MS} ms"
            );
            break;
        }
        match Arch::device_uart_read() {
            Some(byte) if byte == sent => back += 1,
            Some(byte) => {
                say!("test-guest: uartloop: sent {sent:#x}, received {byte:#x}");
                break;
            }
            None => {
                say!("test-guest: uartloop: interrupt for {sent:#x} but the receiver is empty");
                break;
            }
        }
    }
    say!(
        "test-guest: uartloop: {back}/{} bytes came back through the receive interrupt",
        UART_LOOP_BYTES.len()
    );
}

fn print_sched_stats() {
    match Arch::hypercall(&Call::SchedStats(StatsScope::Domain)) {
        Ok(regs) => {
            let s = SchedStats::from_regs(regs);
            say!(
                "test-guest: sched stats runtime {} ns, {} dispatches, {} vCPUs",
                s.runtime_ns,
                s.dispatches,
                s.vcpus
            );
        }
        Err(e) => say!("test-guest: SCHED_STATS failed ({e})"),
    }
}

/// How long vCPU 0 watches the others while the `cpuoff` target is off.
const OFF_WATCH_MS: u64 = 100;
/// How long the target may take to be reported off, and to come back on.
const OFF_TIMEOUT_MS: u64 = 5000;

/// Set by vCPU 0 when the `cpuoff` check is over (the others stop counting).
static CPUOFF_DONE: AtomicBool = AtomicBool::new(false);
/// Set by the `cpuoff` target just before it goes off (vCPU 0 takes it).
static GOING_OFF: AtomicBool = AtomicBool::new(false);
/// Set by a `cpuoff` target whose power-off returned (it must not).
static OFF_RETURNED: AtomicBool = AtomicBool::new(false);
/// How often each `cpuoff` target woke up while it should have stayed off
/// (x86: a HLT with interrupts masked that ended without INIT).
static OFF_WAKES: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];
/// Where a vCPU restarted in `cpuoff` resumes: the position of the next
/// workload, plus one (0: no restart expected).
static REJOIN_AT: [AtomicUsize; MAX_VCPUS] = [const { AtomicUsize::new(0) }; MAX_VCPUS];

/// A secondary entered through its start call: if vCPU 0 restarted it in
/// `cpuoff`, it says so and goes on with the workloads after that one;
/// otherwise this returns and the vCPU starts normally.
pub fn rejoin_if_restarted(index: usize, config: &Config) {
    if let Some(slot) = RESTART_AT.get(index) {
        let next = slot.load(Ordering::Acquire);
        if next != 0 {
            // A new life of the `restart` target: its part again, then on.
            restart_target(index);
            slot.store(0, Ordering::Release);
            run_from(index, config, next)
        }
    }
    let Some(slot) = REJOIN_AT.get(index) else {
        return;
    };
    let next = slot.swap(0, Ordering::AcqRel);
    if next == 0 {
        return;
    }
    say!(
        "test-guest: vcpu {index} back on after {}",
        Arch::POWER_ON_NAME
    );
    COUNTERS[index].fetch_add(1, Ordering::Release);
    run_from(index, config, next - 1)
}

/// The `cpuoff` workload (see [`Workload::CpuOff`]).
fn cpu_off(index: usize, config: &Config, position: usize) {
    let target = config.off_target as usize;
    if target == 0 || target >= MAX_VCPUS || !participates(target) {
        if index == 0 {
            say!("test-guest: cpuoff skipped: vcpu {target} is not running");
        }
        return;
    }
    if index == target {
        REJOIN_AT[index].store(position + 2, Ordering::Release);
        Arch::disarm_timer();
        GOING_OFF.store(true, Ordering::Release);
        let ret = Arch::power_off_self(&OFF_WAKES[index]);
        // Powering off does not return on success; vCPU 0 reports this.
        OFF_RETURNED.store(true, Ordering::Release);
        REJOIN_AT[index].store(0, Ordering::Release);
        say!(
            "test-guest: vcpu {index} {} returned {ret}",
            Arch::POWER_OFF_NAME
        );
    } else if index == 0 {
        cpu_off_driver(target);
    } else {
        let limit = Arch::now() + Arch::ms_to_ticks(PAUSE_SPIN_LIMIT_MS);
        while !CPUOFF_DONE.load(Ordering::Acquire) && Arch::now() < limit {
            COUNTERS[index].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The vCPU that restarts the target in `restart` (in another sched unit
/// than vCPUs 0 and 1 when units have two vCPUs).
const RESTART_DRIVER: usize = 2;
/// `restart`: set while vCPU `i` is the target, so that a restart re-enters
/// its part; the position of the next workload (0: none).
static RESTART_AT: [AtomicUsize; MAX_VCPUS] = [const { AtomicUsize::new(0) }; MAX_VCPUS];
/// `restart`: every life of the target adds one.
static LIVES: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];
/// `restart`: set by the driver right before the last restart: the life
/// that restart starts goes on with the workloads. (The life it ends must
/// not see this: it keeps waiting for its INIT, or it would leave its part
/// before the restart and the restart would catch it elsewhere.)
static FINAL_RESTART: AtomicBool = AtomicBool::new(false);
/// `restart`: set by the driver once the restarts are over, done or failed
/// (a target still waiting goes on, and vCPU 0 stops its unpause loop).
static RESTARTS_DONE: AtomicBool = AtomicBool::new(false);
/// `restart`: set by the driver once its count is final.
static RESTART_DRIVER_FINISHED: AtomicBool = AtomicBool::new(false);
/// `restart`: restarts the driver saw the target come back from.
static RESTARTS_COMPLETED: AtomicU64 = AtomicU64::new(0);
/// `restart`: why the driver stopped early (a [`RestartFailure`] as u64; 0: it did not).
static RESTART_FAILURE: AtomicU64 = AtomicU64::new(0);

/// Why the `restart` driver stopped before the last round.
#[derive(Clone, Copy)]
enum RestartFailure {
    /// The target did not go off (ARM) within the timeout.
    NotOff = 1,
    /// The power-on call failed.
    PowerOn = 2,
    /// The target did not come back within the timeout.
    NotBack = 3,
    /// The target never entered its part of the workload.
    NeverStarted = 4,
}

impl RestartFailure {
    fn describe(code: u64) -> &'static str {
        match code {
            1 => "it did not go off",
            2 => "the power-on call failed",
            3 => "it did not come back",
            4 => "it never started its part",
            _ => "",
        }
    }
}

/// The `restart` workload (see [`Workload::Restart`]).
fn restart(index: usize, config: &Config, position: usize) {
    let target = config.off_target as usize;
    if target == 0
        || target == RESTART_DRIVER
        || target >= MAX_VCPUS
        || !participates(target)
        || !participates(RESTART_DRIVER)
    {
        if index == 0 {
            say!("test-guest: restart skipped: it needs vcpus 0, {target} and {RESTART_DRIVER}");
        }
        return;
    }
    if index == target {
        RESTART_AT[index].store(position + 1, Ordering::Release);
        restart_target(index);
        RESTART_AT[index].store(0, Ordering::Release);
    } else if index == RESTART_DRIVER {
        restart_driver(target, config.restarts);
    } else if index == 0 {
        unpause_loop(target);
    }
}

/// One life of the `restart` target: counts itself, then waits to be
/// restarted (x86: runs until INIT; ARM: powers itself off), bounded.
fn restart_target(index: usize) {
    LIVES[index].fetch_add(1, Ordering::Release);
    if FINAL_RESTART.load(Ordering::Acquire) || RESTARTS_DONE.load(Ordering::Acquire) {
        return;
    }
    if Arch::RESTARTS_RUNNING {
        let limit = Arch::now() + Arch::ms_to_ticks(PAUSE_SPIN_LIMIT_MS);
        while !RESTARTS_DONE.load(Ordering::Acquire) && Arch::now() < limit {
            COUNTERS[index].fetch_add(1, Ordering::Relaxed);
        }
    } else {
        Arch::disarm_timer();
        let ret = Arch::power_off_self(&OFF_WAKES[index]);
        say!(
            "test-guest: vcpu {index} {} returned {ret}",
            Arch::POWER_OFF_NAME
        );
    }
}

/// The `restart` driver: restarts `target` `restarts` times, each time
/// waiting (bounded) for it to come back.
fn restart_driver(target: usize, restarts: u32) {
    // The target must be inside its part (its restart slot set) before the
    // first restart: a restart that catches it earlier (still in the
    // barrier before this workload) sends it back through that barrier,
    // which the others have left, and it never counts a life.
    if !wait_for(OFF_TIMEOUT_MS, || LIVES[target].load(Ordering::Acquire) > 0) {
        RESTART_FAILURE.store(RestartFailure::NeverStarted as u64, Ordering::Release);
        RESTARTS_DONE.store(true, Ordering::Release);
        RESTART_DRIVER_FINISHED.store(true, Ordering::Release);
        return;
    }
    for round in 0..restarts {
        let lives = LIVES[target].load(Ordering::Acquire);
        if !Arch::RESTARTS_RUNNING && !wait_for(OFF_TIMEOUT_MS, || Arch::is_off(target)) {
            RESTART_FAILURE.store(RestartFailure::NotOff as u64, Ordering::Release);
            break;
        }
        if round + 1 == restarts {
            FINAL_RESTART.store(true, Ordering::Release);
        }
        if Arch::power_on(target) != 0 {
            RESTART_FAILURE.store(RestartFailure::PowerOn as u64, Ordering::Release);
            break;
        }
        if !wait_for(OFF_TIMEOUT_MS, || {
            LIVES[target].load(Ordering::Acquire) > lives
        }) {
            RESTART_FAILURE.store(RestartFailure::NotBack as u64, Ordering::Release);
            break;
        }
        RESTARTS_COMPLETED.fetch_add(1, Ordering::Release);
    }
    RESTARTS_DONE.store(true, Ordering::Release);
    RESTART_DRIVER_FINISHED.store(true, Ordering::Release);
}

/// vCPU 0 in `restart`: `TEST_UNPAUSE_SIBLING` on the target, over and
/// over, until the driver is done (bounded); then says how it went.
fn unpause_loop(target: usize) {
    let vcpu = target as u32;
    let (mut invalid, mut other) = (0u64, 0u64);
    let limit = Arch::now() + Arch::ms_to_ticks(PAUSE_SPIN_LIMIT_MS);
    while !RESTARTS_DONE.load(Ordering::Acquire) && Arch::now() < limit {
        match Arch::hypercall(&Call::TestUnpauseSibling { vcpu }) {
            Err(CallError::Hv(HvError::InvalidParameter)) => invalid += 1,
            _ => other += 1,
        }
    }
    // The last restart may still be counting.
    wait_for(OFF_TIMEOUT_MS, || {
        RESTART_DRIVER_FINISHED.load(Ordering::Acquire)
    });
    let completed = RESTARTS_COMPLETED.load(Ordering::Acquire);
    let failure = RestartFailure::describe(RESTART_FAILURE.load(Ordering::Acquire));
    let verdict = if failure.is_empty() && RESTARTS_DONE.load(Ordering::Acquire) {
        "ok"
    } else {
        "FAILED"
    };
    say!(
        "test-guest: restart vcpu {target} {verdict}: {completed} restarts by {}; unpause loop: {invalid} INVALID_PARAMETER, {other} other{}{failure}",
        Arch::POWER_ON_NAME,
        if failure.is_empty() {
            ""
        } else {
            "; stopped: "
        }
    );
}

/// The `traps` workload (see [`Workload::Traps`]), on vCPU 0.
fn traps(index: usize, config: &Config) {
    if index != 0 {
        return;
    }
    let Some(taken) = Arch::single_steps(config.steps) else {
        say!("test-guest: traps skipped: not on this architecture yet");
        return;
    };
    let verdict = if taken >= u64::from(config.steps) {
        "ok"
    } else {
        "FAILED"
    };
    say!(
        "test-guest: traps {verdict}: {taken} debug exceptions for {} single steps",
        config.steps
    );
    match Arch::debug_registers_round_trip() {
        Some(Ok(())) => say!("test-guest: traps ok: DR0-DR3 and DR7 read back what was written"),
        Some(Err((dr, written, read))) => {
            say!("test-guest: traps FAILED: DR{dr} read {read:#x} after {written:#x} was written")
        }
        None => {}
    }
}

/// Rounds of `timerlevel`.
const TIMER_LEVEL_ROUNDS: u32 = 20;

/// The `timerlevel` workload (see [`Workload::TimerLevel`]), on vCPU 0.
fn timer_level(index: usize) {
    if index != 0 {
        return;
    }
    let (mut once, mut again, mut missed) = (0, 0, 0);
    let mut first_again = None;
    for round in 0..TIMER_LEVEL_ROUNDS {
        match Arch::timer_eoi_before_mask() {
            None => {
                say!("test-guest: timerlevel skipped: not on this architecture yet");
                return;
            }
            Some(TimerRound::Once) => once += 1,
            Some(TimerRound::Again) => {
                again += 1;
                first_again.get_or_insert(round);
            }
            Some(TimerRound::Missed) => missed += 1,
        }
    }
    if once == TIMER_LEVEL_ROUNDS {
        say!("test-guest: timerlevel ok: {once} expiries, each taken once (EOI before the mask)");
    } else {
        say!(
            "test-guest: timerlevel FAILED: of {TIMER_LEVEL_ROUNDS} expiries {again} were pending again after the timer was masked (the first in round {first_again:?}), {missed} never fired"
        );
    }
}

/// How long `debugleak` reads its value back.
const DEBUG_LEAK_MS: u64 = 3000;
/// The DBGBVR bits a value may use (VA[47:2]: higher bits are a sign
/// extension, the lowest two are RES0).
const DEBUG_VALUE_MASK: u64 = 0x0000_7fff_ffff_fffc;

/// The `debugleak` workload (see [`Workload::DebugLeak`]), on vCPU 0.
fn debug_leak(index: usize) {
    if index != 0 {
        return;
    }
    // Different in every domain: the counter at this moment, scrambled.
    let own = (Arch::now().wrapping_mul(0x9e37_79b9_7f4a_7c15) & DEBUG_VALUE_MASK) | 0x100;
    register_leak(
        "debugleak",
        "DBGBVR0",
        own,
        Arch::debug_register_write,
        Arch::debug_register_read,
    );
}

/// The `simdleak` workload (see [`Workload::SimdLeak`]), on vCPU 0.
fn simd_leak(index: usize) {
    if index != 0 {
        return;
    }
    let own = Arch::now().wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    register_leak(
        "simdleak",
        Arch::SIMD_LEAK_REGISTER,
        own,
        Arch::simd_register_write,
        Arch::simd_register_read,
    );
}

/// Writes `own` into a register with `write` (false: skipped here) and
/// reads it back with `read` for [`DEBUG_LEAK_MS`]: another value means
/// another domain's register reached this vCPU.
fn register_leak(name: &str, register: &str, own: u64, write: fn(u64) -> bool, read: fn() -> u64) {
    if !write(own) {
        say!("test-guest: {name} skipped: not on this architecture yet");
        return;
    }
    let deadline = Arch::now() + Arch::ms_to_ticks(DEBUG_LEAK_MS);
    let mut reads: u64 = 0;
    let mut leaked = false;
    while Arch::now() < deadline {
        let seen = read();
        reads += 1;
        if seen != own && !leaked {
            say!(
                "test-guest: {name} FAILED: {register} read {seen:#x} after {reads} reads, this vCPU wrote {own:#x}"
            );
            leaked = true;
        }
        // After a leak, go on contending until the deadline all the same:
        // the other domain's switches on this core must not depend on how
        // soon the leak showed.
        core::hint::spin_loop();
    }
    if !leaked {
        say!(
            "test-guest: {name} ok: {reads} reads over {DEBUG_LEAK_MS} ms kept this vCPU's own value"
        );
    }
}

/// Waits, bounded, until `done()`; true if it became done.
fn wait_for(timeout_ms: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Arch::now() + Arch::ms_to_ticks(timeout_ms);
    while Arch::now() < deadline {
        if done() {
            return true;
        }
        core::hint::spin_loop();
    }
    done()
}

fn cpu_off_driver(target: usize) {
    let returned = || OFF_RETURNED.load(Ordering::Acquire);
    let said_so = wait_for(OFF_TIMEOUT_MS, || {
        GOING_OFF.load(Ordering::Acquire) || returned()
    });
    // From here on the target must not wake up, whatever it is sent.
    let wakes_before = OFF_WAKES[target].load(Ordering::Acquire);
    if said_so && !returned() {
        GOING_OFF.store(false, Ordering::Relaxed);
        Arch::take_off(target);
    }
    let went_off = said_so && wait_for(OFF_TIMEOUT_MS, || Arch::is_off(target) || returned());
    if !went_off || returned() {
        say!(
            "test-guest: cpuoff vcpu {target} failed: it did not go off ({})",
            Arch::off_state(target)
        );
        CPUOFF_DONE.store(true, Ordering::Release);
        return;
    }
    // An interrupt must not bring an off vCPU back.
    if Arch::interrupts_usable() {
        Arch::send_ipi(target, Ipi::Ping);
    }
    let snapshot =
        || core::array::from_fn::<u64, MAX_VCPUS, _>(|i| COUNTERS[i].load(Ordering::Acquire));
    let others = participants().without(0).without(target);
    let before = snapshot();
    // vCPU 0 is a sibling too: it counts its own loop while the target is
    // off, for at least OFF_WATCH_MS and until every other vCPU has counted
    // (other units compete for the pool's cores, so they may wait a few
    // slices), bounded by OFF_TIMEOUT_MS.
    let mut own = 0u64;
    let start = Arch::now();
    let (watch, limit) = (
        start + Arch::ms_to_ticks(OFF_WATCH_MS),
        start + Arch::ms_to_ticks(OFF_TIMEOUT_MS),
    );
    loop {
        let now = Arch::now();
        if now >= limit || (now >= watch && stalled(&before, &snapshot(), others) == 0) {
            break;
        }
        own = black_box(own + 1);
    }
    let after = snapshot();
    let still_off = Arch::is_off(target) && !returned();
    let target_frozen = after[target] == before[target]
        && OFF_WAKES[target].load(Ordering::Acquire) == wakes_before;
    let power_on = Arch::power_on(target);
    let back = power_on == 0
        && wait_for(OFF_TIMEOUT_MS, || {
            COUNTERS[target].load(Ordering::Acquire) > after[target]
        });
    let watched = OffWatch {
        still_off,
        target_frozen,
        others: others.count(),
        stalled: stalled(&before, &after, others),
        own_loops: own,
        power_on,
        back,
    };
    if watched.ok() {
        say!(
            "test-guest: cpuoff vcpu {target} ok: off through {} while vcpu 0 and {} others ran; back after {}",
            Arch::IPI_NAME,
            watched.others,
            Arch::POWER_ON_NAME
        );
    } else {
        say!(
            "test-guest: cpuoff vcpu {target} failed: still off {still_off}, frozen {target_frozen}, {} of {} others stalled, vcpu 0 loops {own}, {} {power_on}, back {back}",
            watched.stalled,
            watched.others,
            Arch::POWER_ON_NAME
        );
    }
    CPUOFF_DONE.store(true, Ordering::Release);
}
