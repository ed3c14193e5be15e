//! The workloads. Every online vCPU takes part in each one, in the order the
//! configuration lists them, with a barrier before each; vCPU 0 drives the
//! ones that need a driver (ping-pong, pause, misbehaviour).

use core::arch::asm;
use core::hint::black_box;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use aarch64_cpu::asm::{sev, wfe, wfi};
use aarch64_cpu::registers::CNTKCTL_EL1;
use guest_abi::{
    Call, CallError, Granularity, HvError, PoolInfo, PoolOp, Report, SchedStats, Scheduler,
    StatsScope, Tag, Unit, function_id,
};
use test_guest::config::{Config, End, WaitKind, Workload};
use test_guest::stats::Summary;
use tock_registers::interfaces::ReadWriteable;

use super::exceptions::expect_fault;
use super::gic::{self, SGI_PING, SGI_PONG, VTIMER_PPI};
use super::{MAX_VCPUS, halt, hvc, is_online, platform, timer};
use crate::say;

/// Sleeper samples kept per vCPU.
const MAX_SAMPLES: usize = 256;
/// How long a vCPU waits at a barrier for the others.
const BARRIER_TIMEOUT_MS: u64 = 60_000;
/// How long vCPU 0 waits for a pong.
const PONG_TIMEOUT_MS: u64 = 1000;
/// How long a peer waits for a ping (vCPU 0 serves the peers in turn).
const PING_TIMEOUT_MS: u64 = 30_000;
/// How long the sleeper waits past its deadline before calling the timer dead.
const TIMER_GRACE_MS: u64 = 1000;
/// How long the paused sibling's counter is watched (each half).
const PAUSE_WATCH_MS: u64 = 50;
/// An upper bound on the sibling's counting loop.
const PAUSE_SPIN_LIMIT_MS: u64 = 30_000;
/// A call number this ABI does not define.
const UNKNOWN_CALL: u16 = 0x7F;

/// The vCPUs taking part (bit per index), set once by vCPU 0.
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

/// A reusable barrier for the participants; bounded by a timeout.
struct Barrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

impl Barrier {
    const fn new() -> Self {
        Self {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Waits until `parties` vCPUs have arrived; false after the timeout.
    fn wait(&self, parties: usize, index: usize, name: &str) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            sev();
            return true;
        }
        let deadline = timer::now() + timer::ms_to_ticks(BARRIER_TIMEOUT_MS);
        while self.generation.load(Ordering::Acquire) == generation {
            if timer::now() > deadline {
                say!("test-guest: vcpu {index} gave up waiting for the others before {name}");
                return false;
            }
            // The event stream (set up in `run`) bounds each WFE.
            wfe();
        }
        true
    }
}

fn participants() -> usize {
    PARTICIPANTS.load(Ordering::Acquire).count_ones() as usize
}

fn participates(index: usize) -> bool {
    PARTICIPANTS.load(Ordering::Acquire) & 1 << index != 0
}

/// Fixes the participants (the vCPUs online now among the first `wanted`)
/// and lets them go.
pub fn start(wanted: usize) {
    let mask = (0..wanted)
        .filter(|&i| is_online(i))
        .fold(0, |m, i| m | 1 << i);
    PARTICIPANTS.store(mask, Ordering::Release);
    STARTED.store(true, Ordering::Release);
    sev();
}

/// A secondary waits for vCPU 0 to start the workloads.
pub fn wait_start(index: usize) {
    enable_event_stream();
    let deadline = timer::now() + timer::ms_to_ticks(BARRIER_TIMEOUT_MS);
    while !STARTED.load(Ordering::Acquire) {
        if timer::now() > deadline {
            say!("test-guest: vcpu {index} never got the start signal; stopping");
            halt();
        }
        wfe();
    }
    if !participates(index) {
        say!("test-guest: vcpu {index} came online too late to take part; stopping");
        halt();
    }
}

/// Wakes WFE about every 2^(EVNTI+1) counter ticks, so no WFE waits forever
/// for an SEV that never comes.
fn enable_event_stream() {
    CNTKCTL_EL1.modify(CNTKCTL_EL1::EVNTEN::Enable + CNTKCTL_EL1::EVNTI.val(11));
}

/// Runs every configured workload on vCPU `index`, then idles or powers off.
pub fn run(index: usize, config: &Config) -> ! {
    enable_event_stream();
    if index == 0 && config.wait == WaitKind::Block {
        USE_BLOCK.store(true, Ordering::Relaxed);
        say!("test-guest: waiting for interrupts with BLOCK");
    }
    run_from(index, config, 0)
}

/// Runs the configured workloads from position `first` on, then the end.
fn run_from(index: usize, config: &Config, first: usize) -> ! {
    let parties = participants();
    for (position, &workload) in config.workloads().iter().enumerate().skip(first) {
        BARRIER.wait(parties, index, workload.name());
        match workload {
            Workload::Compute => compute(index, config),
            Workload::Sleeper => sleeper(index, config),
            Workload::PingPong => ping_pong(index, config),
            Workload::Pause => pause(index, config),
            Workload::Misbehave => misbehave(index),
            Workload::Pools => pools(index, config),
            Workload::CpuOff => cpu_off(index, config, position),
            Workload::Echo => echo(index),
        }
    }
    BARRIER.wait(parties, index, "the end");
    if index == 0 {
        print_sched_stats();
        let stray = STRAY_INTERRUPTS.load(Ordering::Relaxed);
        if stray > 0 {
            say!("test-guest: {stray} unexpected interrupts acknowledged and ignored");
        }
        say!("test-guest: all workloads done");
        match config.end {
            End::Idle => {}
            End::Off => {
                let ret = hvc::psci(hvc::PSCI_SYSTEM_OFF, 0, 0, 0);
                say!("test-guest: SYSTEM_OFF returned {ret}");
            }
            End::Reset => {
                say!("test-guest: resetting (PSCI SYSTEM_RESET)");
                let ret = hvc::psci(hvc::PSCI_SYSTEM_RESET, 0, 0, 0);
                say!("test-guest: SYSTEM_RESET returned {ret}");
            }
        }
    }
    halt()
}

/// Reports a value with TEST_REPORT; after the first NOT_SUPPORTED, stops
/// trying (the console line printed beside it is the fallback).
fn report(tag: &str, value: u64, unit: Unit) {
    if !REPORTS_WORK.load(Ordering::Relaxed) {
        return;
    }
    let Some(tag) = Tag::new(tag) else {
        say!("test-guest: bad report tag {tag:?}");
        return;
    };
    match hvc::hypercall(&Call::TestReport(Report { tag, value, unit })) {
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
    if let Err(e) = hvc::hypercall(&Call::Yield) {
        REFUSED[index].store(true, Ordering::Relaxed);
        say!("test-guest: vcpu {index} YIELD failed ({e}); not yielding again");
    }
}

/// Waits with WFI until `want` is acknowledged or the virtual timer reaches
/// `deadline`; returns the counter at the wake-up, or `None` on timeout.
/// Waiting for the timer itself (`want == VTIMER_PPI`) returns its wake-up.
fn wait_for_interrupt(want: u32, deadline: u64) -> Option<u64> {
    timer::arm(deadline);
    let give_up = deadline.saturating_add(timer::ms_to_ticks(TIMER_GRACE_MS));
    loop {
        wait();
        while let Some(acked) = gic::ack() {
            let at = timer::now();
            if acked.intid == VTIMER_PPI {
                timer::disarm();
                gic::eoi(acked);
                return (want == VTIMER_PPI).then_some(at);
            }
            gic::eoi(acked);
            if acked.intid == want {
                timer::disarm();
                return Some(at);
            }
            STRAY_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
        }
        if timer::now() > give_up {
            timer::disarm();
            say!(
                "test-guest: vcpu {} virtual timer did not fire {TIMER_GRACE_MS} ms after its deadline",
                super::vcpu_index()
            );
            return None;
        }
    }
}

/// Waits for an interrupt: `WFI`, or BLOCK when configured and supported.
fn wait() {
    if USE_BLOCK.load(Ordering::Relaxed) {
        match hvc::hypercall(&Call::Block { timeout_ns: 0 }) {
            Ok(_) => return,
            Err(e) => {
                if USE_BLOCK.swap(false, Ordering::Relaxed) {
                    say!("test-guest: BLOCK failed ({e}); waiting with WFI");
                }
            }
        }
    }
    wfi();
}

/// Whether interrupts can be used; vCPU 0 says so once per skipped workload.
fn interrupts_usable(index: usize, workload: &str) -> bool {
    if gic::present() {
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
    let period = timer::us_to_ticks(config.period_us as u64).max(1);
    let wanted = (config.samples as usize).min(MAX_SAMPLES);
    let mut latencies = [0u64; MAX_SAMPLES];
    let mut taken = 0;
    let mut next = timer::now() + period;
    while taken < wanted {
        let Some(woke) = wait_for_interrupt(VTIMER_PPI, next) else {
            break;
        };
        latencies[taken] = woke.saturating_sub(next);
        taken += 1;
        // Periodic; after an overrun the next period starts from now.
        next += period;
        let now = timer::now();
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
            let deadline = timer::now() + timer::ms_to_ticks(PING_TIMEOUT_MS);
            if wait_for_interrupt(SGI_PING, deadline).is_none() {
                say!("test-guest: vcpu {index} got no ping in round {round}");
                return;
            }
            gic::send_sgi(0, SGI_PONG);
        }
        return;
    }
    let peers: usize = (1..MAX_VCPUS).filter(|&p| participates(p)).count();
    let mut answered = 0;
    for peer in (1..MAX_VCPUS).filter(|&p| participates(p)) {
        let (mut min, mut max, mut sum, mut done) = (u64::MAX, 0, 0u64, 0u32);
        for _ in 0..rounds {
            let sent = timer::now();
            gic::send_sgi(peer, SGI_PING);
            let deadline = sent + timer::ms_to_ticks(PONG_TIMEOUT_MS);
            let Some(back) = wait_for_interrupt(SGI_PONG, deadline) else {
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
    say!("test-guest: pingpong done: {answered} of {peers} peers answered");
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
        let limit = timer::now() + timer::ms_to_ticks(PAUSE_SPIN_LIMIT_MS);
        while PAUSE_PHASES_DONE.load(Ordering::Acquire) < phase && timer::now() < limit {
            COUNTERS[target].fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn pause_driver(target: usize) {
    let watch = timer::ms_to_ticks(PAUSE_WATCH_MS);
    let counter = || COUNTERS[target].load(Ordering::Relaxed);
    let vcpu = target as u32;
    timer::delay(watch);
    match hvc::hypercall(&Call::TestPauseSibling { vcpu }) {
        Err(CallError::Hv(HvError::NotSupported)) => {
            say!("test-guest: pause sibling not supported (-1), skipped");
        }
        Err(e) => say!("test-guest: pause sibling {target} refused: {e}"),
        Ok(_) => {
            let paused_at = counter();
            timer::delay(watch);
            let while_paused = counter();
            if let Err(e) = hvc::hypercall(&Call::TestUnpauseSibling { vcpu }) {
                say!("test-guest: unpause sibling {target} refused: {e}");
            }
            timer::delay(watch);
            let after = counter();
            if paused_at == while_paused && after > while_paused {
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

/// One 64-bit load from `address` into x0 (the exception handler zeroes x0
/// and skips the load if it faults).
fn probe_load(address: u64) -> u64 {
    let value: u64;
    // SAFETY: deliberately reads an address outside the guest's RAM; the
    // address is identity-mapped (Device or Normal), so any abort comes from
    // the hypervisor or the platform and is caught by `expect_fault`. The
    // value lands in x0, which the handler sets on a fault.
    unsafe {
        asm!("ldr x0, [{a}]", a = in(reg) address, out("x0") value, options(nostack, readonly));
    }
    value
}

fn misbehave(index: usize) {
    if index != 0 {
        return;
    }
    let regs = hvc::hvc(function_id(UNKNOWN_CALL) as u64, [0; 5]);
    let code = regs[0] as i64;
    if code == HvError::NotSupported.code() {
        say!("test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected");
    } else {
        say!("test-guest: bad hypercall returned {code}, expected -1");
    }
    let address = platform().ram_end;
    let assumed = if platform().cpus_guessed {
        " (RAM size assumed: no device tree)"
    } else {
        ""
    };
    say!("test-guest: reading {address:#x}, outside its RAM{assumed}");
    let (value, fault) = expect_fault(|| probe_load(address));
    match fault {
        Some(f) => say!(
            "test-guest: bad access at {address:#x} faulted (ESR {:#x}, FAR {:#x})",
            f.esr,
            f.far
        ),
        None => say!("test-guest: bad access at {address:#x} read {value:#x} without a fault"),
    }
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
    match hvc::hypercall(&Call::PoolOp(create)) {
        Ok(regs) => {
            let pool = regs[1] as u32;
            say!("test-guest: created empty pool {pool}");
            match hvc::hypercall(&Call::PoolOp(PoolOp::Destroy { pool })) {
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
}

/// Prints every pool; false if listing failed.
fn list_pools() -> bool {
    let mut from = 0u32;
    let mut listed = 0;
    while listed < MAX_POOLS_LISTED {
        let regs = match hvc::hypercall(&Call::PoolOp(PoolOp::List { from })) {
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

/// One pool operation; says what happened. `expect` is the error the
/// operation must give (None: it must succeed).
fn pool_op(what: &str, op: PoolOp, expect: Option<HvError>) -> Option<[u64; 4]> {
    match (hvc::hypercall(&Call::PoolOp(op)), expect) {
        (Ok(regs), None) => {
            say!("test-guest: POOL_OP {what} ok");
            Some(regs)
        }
        (Err(CallError::Hv(e)), Some(want)) if e == want => {
            say!("test-guest: POOL_OP {what} refused ({e}), as expected");
            None
        }
        (Ok(_), Some(want)) => {
            say!("test-guest: POOL_OP {what} succeeded, expected {want}");
            None
        }
        (Err(e), _) => {
            say!("test-guest: POOL_OP {what} failed ({e})");
            None
        }
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
}

/// How long `echo` waits for input before giving up.
const ECHO_IDLE_MS: u64 = 60_000;
/// Longest line `echo` collects; the rest of a longer line is dropped.
const ECHO_LINE: usize = 100;

/// vCPU 0 takes console input on the PL011 interrupt and prints every line.
fn echo(index: usize) {
    if index != 0 || !interrupts_usable(index, "echo") {
        return;
    }
    super::console::enable_rx_interrupts();
    if !gic::enable_spi(super::console::PL011_INTID, index) {
        say!("test-guest: echo: cannot enable the PL011 interrupt");
        return;
    }
    say!("test-guest: echo ready (type a line; quit ends)");
    let mut line = [0u8; ECHO_LINE];
    let mut len = 0;
    let mut interrupts = 0u64;
    loop {
        let deadline = timer::now() + timer::ms_to_ticks(ECHO_IDLE_MS);
        if wait_for_interrupt(super::console::PL011_INTID, deadline).is_none() {
            say!("test-guest: echo: no input for {ECHO_IDLE_MS} ms; stopping");
            return;
        }
        interrupts += 1;
        while let Some(byte) = super::console::read_byte() {
            match byte {
                // CR LF (or an empty line): nothing to print.
                b'\r' | b'\n' if len == 0 => {}
                b'\r' | b'\n' => {
                    let text = core::str::from_utf8(&line[..len]).unwrap_or("(not UTF-8)");
                    say!(
                        "test-guest: echo: \"{text}\" ({len} bytes, {interrupts} interrupts so far)"
                    );
                    if text == "quit" {
                        return;
                    }
                    len = 0;
                }
                _ if len < ECHO_LINE => {
                    line[len] = byte;
                    len += 1;
                }
                _ => {}
            }
        }
    }
}

fn print_sched_stats() {
    match hvc::hypercall(&Call::SchedStats(StatsScope::Domain)) {
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
/// PSCI `AFFINITY_INFO`'s answer for a powered-off vCPU.
const AFFINITY_OFF: i64 = 1;

/// Set by vCPU 0 when the `cpuoff` check is over (the others stop counting).
static CPUOFF_DONE: AtomicBool = AtomicBool::new(false);
/// Set by a `cpuoff` target whose `CPU_OFF` returned (it must not).
static OFF_RETURNED: AtomicBool = AtomicBool::new(false);
/// Where a vCPU restarted by `CPU_ON` in `cpuoff` resumes: the position of
/// the next workload, plus one (0: no restart expected).
static REJOIN_AT: [AtomicUsize; MAX_VCPUS] = [const { AtomicUsize::new(0) }; MAX_VCPUS];

/// A secondary entered through `CPU_ON`: if vCPU 0 restarted it in `cpuoff`,
/// it says so and goes on with the workloads after that one; otherwise this
/// returns and the vCPU starts normally.
pub fn rejoin_if_restarted(index: usize, config: &Config) {
    let Some(slot) = REJOIN_AT.get(index) else {
        return;
    };
    let next = slot.swap(0, Ordering::AcqRel);
    if next == 0 {
        return;
    }
    enable_event_stream();
    say!("test-guest: vcpu {index} back on after CPU_ON");
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
        timer::disarm();
        let ret = hvc::psci(hvc::PSCI_CPU_OFF, 0, 0, 0);
        // CPU_OFF does not return on success; vCPU 0 reports this.
        OFF_RETURNED.store(true, Ordering::Release);
        REJOIN_AT[index].store(0, Ordering::Release);
        say!("test-guest: vcpu {index} CPU_OFF returned {ret}");
    } else if index == 0 {
        cpu_off_driver(target);
    } else {
        let limit = timer::now() + timer::ms_to_ticks(PAUSE_SPIN_LIMIT_MS);
        while !CPUOFF_DONE.load(Ordering::Acquire) && timer::now() < limit {
            COUNTERS[index].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// PSCI `AFFINITY_INFO` of one vCPU (lowest affinity level).
fn affinity_info(mpidr: u64) -> i64 {
    hvc::psci(hvc::PSCI_AFFINITY_INFO, mpidr, 0, 0)
}

/// Waits, bounded, until `done()`; true if it became done.
fn wait_for(timeout_ms: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = timer::now() + timer::ms_to_ticks(timeout_ms);
    while timer::now() < deadline {
        if done() {
            return true;
        }
        core::hint::spin_loop();
    }
    done()
}

fn cpu_off_driver(target: usize) {
    let mpidr = platform().mpidrs[target];
    let went_off = wait_for(OFF_TIMEOUT_MS, || {
        affinity_info(mpidr) == AFFINITY_OFF || OFF_RETURNED.load(Ordering::Acquire)
    });
    if !went_off || OFF_RETURNED.load(Ordering::Acquire) {
        say!(
            "test-guest: cpuoff vcpu {target} failed: it did not go off (AFFINITY_INFO {})",
            affinity_info(mpidr)
        );
        CPUOFF_DONE.store(true, Ordering::Release);
        return;
    }
    // An interrupt must not bring a powered-off vCPU back.
    if gic::present() {
        gic::send_sgi(target, SGI_PING);
    }
    let snapshot =
        || core::array::from_fn::<u64, MAX_VCPUS, _>(|i| COUNTERS[i].load(Ordering::Acquire));
    let before = snapshot();
    let others_rose = || {
        (1..MAX_VCPUS)
            .filter(|&i| i != target && participates(i))
            .all(|i| COUNTERS[i].load(Ordering::Acquire) > before[i])
    };
    // vCPU 0 is a sibling too: it counts its own loop while the target is
    // off, for at least OFF_WATCH_MS and until every other vCPU has counted
    // (other units compete for the pool's cores, so they may wait a few
    // slices), bounded by OFF_TIMEOUT_MS.
    let mut own = 0u64;
    let start = timer::now();
    let (watch, limit) = (
        start + timer::ms_to_ticks(OFF_WATCH_MS),
        start + timer::ms_to_ticks(OFF_TIMEOUT_MS),
    );
    loop {
        let now = timer::now();
        if now >= limit || (now >= watch && others_rose()) {
            break;
        }
        own = black_box(own + 1);
    }
    let after = snapshot();
    let still_off = affinity_info(mpidr) == AFFINITY_OFF && !OFF_RETURNED.load(Ordering::Acquire);
    let computing: usize = (1..MAX_VCPUS)
        .filter(|&i| i != target && participates(i))
        .count();
    let stalled = (1..MAX_VCPUS)
        .filter(|&i| i != target && participates(i) && after[i] <= before[i])
        .count();
    let target_frozen = after[target] == before[target];
    let entry = super::secondary_entry as *const () as u64;
    let ret = hvc::psci(hvc::PSCI_CPU_ON, mpidr, entry, target as u64);
    let back = ret == 0
        && wait_for(OFF_TIMEOUT_MS, || {
            COUNTERS[target].load(Ordering::Acquire) > after[target]
        });
    if still_off && target_frozen && stalled == 0 && own > 0 && back {
        say!(
            "test-guest: cpuoff vcpu {target} ok: off through an SGI while vcpu 0 and {computing} others ran; back after CPU_ON"
        );
    } else {
        say!(
            "test-guest: cpuoff vcpu {target} failed: still off {still_off}, frozen {target_frozen}, {stalled} of {computing} others stalled, vcpu 0 loops {own}, CPU_ON {ret}, back {back}"
        );
    }
    CPUOFF_DONE.store(true, Ordering::Release);
}
