//! The runtime against a fake architecture: boot, deadlines, the console,
//! moves, pauses, releases, and the block/notify lockstep.

use super::*;
use crate::config::{Config, DomainConfig, PoolConfig};
use crate::console_cmd;
use guest_abi::HvError;
use sched::CpuContext;
use sched::driver::CpuEvent;
use sched::{PoolId, Topology};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Arc as StdArc;
use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

std::thread_local! {
    /// The CPU the calling test thread plays.
    static CPU: Cell<usize> = const { Cell::new(0) };
}

fn play_cpu(cpu: usize) {
    CPU.with(|c| c.set(cpu));
}

/// An architecture made of records: the real clock (plus `step_ns` at
/// every read once a test sets it, so the bounded waits end quickly),
/// the kicks sent, the timer re-arms, the nudges, the console lines, and
/// the vCPUs with an interrupt pending (with a hook a lockstep test runs
/// just before the runtime looks at them).
#[derive(Default)]
struct FakeArch {
    start: std::sync::OnceLock<Instant>,
    step_ns: AtomicU64,
    skew_ns: AtomicU64,
    kicks: StdMutex<Vec<CpuSet>>,
    /// `(cpu, deadline)` of every re-arm.
    rearms: StdMutex<Vec<(usize, Option<Time>)>>,
    nudges: StdMutex<Vec<usize>>,
    pending: StdMutex<BTreeSet<u32>>,
    before_pending_check: StdMutex<Option<Box<dyn FnOnce() + Send>>>,
    lines: StdMutex<Vec<String>>,
    domains: StdMutex<Vec<(DomainId, String, bool)>>,
    /// What each CPU has loaded, kept by `switch_to` as the back-ends do.
    loads: loads::CpuLoads<16, 1024>,
}

impl Arch for FakeArch {
    fn now_ns(&self) -> Time {
        let step = self.step_ns.load(Ordering::Relaxed);
        let skew = self.skew_ns.fetch_add(step, Ordering::Relaxed) + step;
        let start = self.start.get_or_init(Instant::now);
        start.elapsed().as_nanos() as u64 + skew
    }

    fn kick(&self, cpus: &CpuSet) {
        self.kicks.lock().unwrap().push(*cpus);
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        self.loads.switch(cpu, context.vcpu(), 0);
    }

    fn cpu_index(&self) -> usize {
        CPU.with(Cell::get)
    }

    fn without_irqs<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    fn rearm_timer(&self, deadline: Option<Time>) {
        self.rearms
            .lock()
            .unwrap()
            .push((self.cpu_index(), deadline));
    }

    fn nudge(&self, cpu: usize) {
        self.nudges.lock().unwrap().push(cpu);
    }

    fn loaded_on(&self, vcpu: VcpuId) -> Option<usize> {
        self.loads.loaded_on(vcpu)
    }

    fn interrupt_pending(&self, vcpu: VcpuId) -> bool {
        let hook = self.before_pending_check.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.pending.lock().unwrap().contains(&vcpu.0)
    }

    fn switch_clock(&self) -> u64 {
        self.now_ns()
    }

    fn console_line(&self, args: fmt::Arguments<'_>) {
        self.lines.lock().unwrap().push(args.to_string());
    }

    fn domain_console_write(&self, id: DomainId, bytes: &[u8]) {
        self.lines.lock().unwrap().push(format!(
            "[dom{}] {}",
            id.0,
            String::from_utf8_lossy(bytes)
        ));
    }

    fn domain_ids(&self) -> Vec<DomainId> {
        self.domains.lock().unwrap().iter().map(|d| d.0).collect()
    }

    fn domain_summary(&self, id: DomainId) -> Option<(String, bool)> {
        let domains = self.domains.lock().unwrap();
        let d = domains.iter().find(|d| d.0 == id)?;
        Some((d.1.clone(), d.2))
    }

    fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64 {
        // Distinct per vCPU, so the listing shows whose it printed.
        7_000 + u64::from(vcpu.0) * 1_000
    }

    fn vcpu_identity(&self, vcpu: VcpuId) -> Option<(DomainId, u32)> {
        // vCPU v is vCPU v % 10 of domain v / 10 + 1.
        Some((DomainId(vcpu.0 / 10 + 1), vcpu.0 % 10))
    }
}

impl FakeArch {
    fn take_lines(&self) -> Vec<String> {
        core::mem::take(&mut *self.lines.lock().unwrap())
    }

    fn fast_clock(&self, fast: bool) {
        let step = if fast { 1_000_000 } else { 0 };
        self.step_ns.store(step, Ordering::Relaxed);
    }
}

/// `--smp 8,clusters=2,cores=2,threads=2`: pool `general` (credit2, cpu
/// granularity) on CPUs 0-3 with the one-vCPU `solo`, pool `smt`
/// (credit2, core granularity) on 4-7 with the two-vCPU `pair`, as the
/// QEMU pool scenarios run. Returns the runtime and `pair` and `solo`.
fn machine() -> (Runtime<FakeArch>, DomainId, DomainId) {
    machine_tracing(trace::ClassSet(0))
}

/// [`machine`], recording `classes` from boot.
fn machine_tracing(classes: trace::ClassSet) -> (Runtime<FakeArch>, DomainId, DomainId) {
    let glue = Runtime::new(FakeArch::default());
    glue.trace_from_boot(classes);
    let mut smt = PoolConfig::new("smt", (4..8).collect());
    smt.granularity = String::from("core");
    let mut pair = DomainConfig::new("pair", "smt");
    pair.vcpus = 2;
    let config = Config {
        pools: alloc::vec![PoolConfig::new("general", (0..4).collect()), smt],
        domains: alloc::vec![pair, DomainConfig::new("solo", "general")],
    };
    let applied = glue.boot(&Topology::uniform(1, 2, 2, 2), Some(&config));
    let (Some(pair), Some(solo)) = (applied.domains[0], applied.domains[1]) else {
        panic!(
            "the config's domains were not built: {:?}",
            applied.warnings
        );
    };
    *glue.arch().domains.lock().unwrap() = alloc::vec![
        (pair, String::from("pair"), false),
        (solo, String::from("solo"), false)
    ];
    glue.with_system(|s, p| {
        for domain in [pair, solo] {
            for &v in s.domain_vcpus(domain).unwrap().to_vec().iter() {
                s.vcpu_wake(v, p).unwrap();
            }
        }
    });
    (glue, pair, solo)
}

fn vcpus(glue: &Runtime<FakeArch>, domain: DomainId) -> Vec<VcpuId> {
    glue.with_system(|s, _| s.domain_vcpus(domain).unwrap().to_vec())
        .unwrap()
}

fn running_on(glue: &Runtime<FakeArch>, vcpu: VcpuId) -> Option<usize> {
    glue.with_system(|s, _| s.vcpu_running_on(vcpu)).flatten()
}

/// Each CPU of `cpus` on its own thread runs scheduling events (as its
/// kick handler would) until `done` holds, for at most two seconds.
fn run_cpus_until(
    glue: &Runtime<FakeArch>,
    cpus: &[usize],
    done: impl Fn(&Runtime<FakeArch>) -> bool + Sync,
) {
    let until = Instant::now() + Duration::from_secs(2);
    std::thread::scope(|scope| {
        for &cpu in cpus {
            let done = &done;
            scope.spawn(move || {
                play_cpu(cpu);
                while !done(glue) && Instant::now() < until {
                    glue.on_event(CpuEvent::Kick);
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
    });
    assert!(done(glue), "the CPUs {cpus:?} did not get there in 2 s");
}

/// The machine with both of `pair`'s vCPUs and `solo`'s running.
fn running_machine() -> (Runtime<FakeArch>, DomainId, DomainId) {
    let (glue, pair, solo) = machine();
    let all: Vec<VcpuId> = [pair, solo].iter().flat_map(|&d| vcpus(&glue, d)).collect();
    run_cpus_until(&glue, &(0..8).collect::<Vec<_>>(), |g| {
        all.iter().all(|&v| running_on(g, v).is_some())
    });
    (glue, pair, solo)
}

#[test]
fn the_console_pauses_and_unpauses_a_domain_and_refuses_what_it_cannot_do() {
    let (glue, pair, solo) = running_machine();
    let arch = glue.arch();
    arch.take_lines();
    glue.run_command(&format!("pause dom{}", pair.0));
    assert_eq!(arch.take_lines(), [format!("dom{}: paused", pair.0)]);
    let cpus: Vec<usize> = (0..8).collect();
    let pair_vcpus = vcpus(&glue, pair);
    run_cpus_until(&glue, &cpus, |g| {
        pair_vcpus.iter().all(|&v| running_on(g, v).is_none())
    });
    assert!(
        vcpus(&glue, solo)
            .iter()
            .all(|&v| running_on(&glue, v).is_some()),
        "the other domain runs on"
    );
    // Refusals change nothing and say why.
    glue.run_command(&format!("pause {}", pair.0));
    assert_eq!(
        arch.take_lines(),
        [format!("error: domain {} is paused already", pair.0)]
    );
    glue.run_command(&format!("unpause {}", solo.0));
    assert_eq!(
        arch.take_lines(),
        [format!("error: domain {} is not paused", solo.0)]
    );
    glue.run_command("pause 99");
    assert_eq!(arch.take_lines(), ["error: no domain 99"]);
    glue.run_command(&format!("destroy {}", solo.0));
    assert_eq!(
        arch.take_lines(),
        ["error: destroy is not supported on this architecture"]
    );
    arch.domains.lock().unwrap()[0].2 = true;
    let stopped = arch.domains.lock().unwrap()[0].0;
    glue.run_command(&format!("restart {}", stopped.0));
    assert_eq!(
        arch.take_lines(),
        [format!("error: domain {} is stopped", stopped.0)]
    );
    arch.domains.lock().unwrap()[0].2 = false;
    glue.run_command(&format!("unpause {}", pair.0));
    assert_eq!(arch.take_lines(), [format!("dom{}: unpaused", pair.0)]);
    run_cpus_until(&glue, &cpus, |g| {
        pair_vcpus.iter().all(|&v| running_on(g, v).is_some())
    });
}

#[test]
fn destroy_and_restart_by_hypercall_go_to_the_architecture_or_are_refused() {
    let (glue, _, solo) = running_machine();
    let op = |domain| guest_abi::PoolOp::DestroyDomain { domain };
    // The fake architecture cannot: refused, the domain runs on.
    assert_eq!(
        glue.pool_hypercall(DomainId(1), op(solo.0)),
        Err(HvError::NotSupported)
    );
    assert_eq!(
        glue.pool_hypercall(DomainId(1), op(99)),
        Err(HvError::NotFound)
    );
    glue.arch().domains.lock().unwrap()[1].2 = true;
    let stopped = glue.arch().domains.lock().unwrap()[1].0;
    assert_eq!(
        glue.pool_hypercall(
            DomainId(1),
            guest_abi::PoolOp::RestartDomain { domain: stopped.0 }
        ),
        Err(HvError::Busy)
    );
    assert!(
        vcpus(&glue, solo)
            .iter()
            .all(|&v| running_on(&glue, v).is_some())
    );
}

#[test]
fn deadlines_are_kept_per_cpu_and_only_the_callers_timer_is_rearmed() {
    let glue = Runtime::new(FakeArch::default());
    play_cpu(2);
    glue.set_timer(2, Some(55));
    glue.set_timer(3, Some(66));
    assert_eq!((glue.deadline(2), glue.deadline(3)), (Some(55), Some(66)));
    assert_eq!(*glue.arch().rearms.lock().unwrap(), [(2, Some(55))]);
    glue.set_timer(2, None);
    assert_eq!(glue.deadline(2), None);
    // Out of range: ignored, no panic.
    glue.set_timer(MAX_CPUS, Some(1));
    assert_eq!(glue.deadline(MAX_CPUS), None);
    // Before boot an event does nothing (no table yet).
    glue.on_event(CpuEvent::Timer);
    assert_eq!(glue.with_system(|_, _| ()), None);
}

#[test]
fn the_timer_is_handed_the_earlier_of_the_scheduling_deadline_and_the_wake_ups() {
    let glue = Runtime::new(FakeArch::default());
    play_cpu(1);
    glue.set_timer(1, Some(500));
    glue.wake_at(1, VcpuId(7), 300);
    glue.wake_at(1, VcpuId(8), 900);
    // Another CPU's wake-up: its own timer, re-armed by that CPU's next
    // event, not this one.
    glue.wake_at(2, VcpuId(9), 100);
    assert_eq!(glue.timer_deadline(1), Some(300));
    assert_eq!(
        *glue.arch().rearms.lock().unwrap(),
        [(1, Some(500)), (1, Some(300)), (1, Some(300))]
    );
    // A re-armed wake-up of the same vCPU replaces its earlier one.
    glue.wake_at(1, VcpuId(7), 700);
    assert_eq!(glue.timer_deadline(1), Some(500));
    glue.cancel_wakeups(VcpuId(7));
    glue.set_timer(1, None);
    assert_eq!(glue.timer_deadline(1), Some(900));
    assert_eq!(glue.timer_deadline(2), Some(100));
    assert_eq!(glue.timer_deadline(3), None);
}

#[test]
fn a_due_wake_up_wakes_its_blocked_vcpu_and_only_that_one() {
    let (glue, pair, solo) = running_machine();
    let me = vcpus(&glue, solo)[0];
    let other = vcpus(&glue, pair)[0];
    let cpu = running_on(&glue, me).unwrap();
    play_cpu(cpu);
    glue.block(me);
    assert!(is_blocked(&glue, me));
    glue.wake_at(cpu, me, 1_000);
    glue.wake_at(cpu, other, 5_000);
    glue.expire_wakeups(cpu, 999);
    assert!(is_blocked(&glue, me), "woken before its deadline");
    glue.expire_wakeups(cpu, 1_000);
    assert!(!is_blocked(&glue, me));
    assert_eq!(glue.next_wakeup(cpu), Some(5_000));
}

fn is_blocked(glue: &Runtime<FakeArch>, vcpu: VcpuId) -> bool {
    glue.with_system(|s, _| s.vcpu_info(vcpu).unwrap().blocked)
        .unwrap()
}

/// Where, relative to the blocking CPU's steps, another CPU injects an
/// interrupt for the blocking vCPU (sets it pending, then notifies).
#[derive(Clone, Copy, Debug)]
enum Injection {
    /// After the caller found nothing pending, before it blocks.
    BetweenCheckAndBlock,
    /// After the block, before the runtime's second look.
    BetweenBlockAndRecheck,
    /// After the block returned.
    AfterBlock,
}

/// One lockstep run: `solo`'s vCPU, running on its CPU, finds nothing
/// pending and blocks; a CPU of the other pool injects an interrupt for it
/// at `injection`. `block` is how the blocking CPU blocks. Returns whether
/// the vCPU ends up blocked with the interrupt pending (a lost wake-up) and
/// the nudges sent.
fn lockstep(
    injection: Injection,
    block: impl FnOnce(&Runtime<FakeArch>, VcpuId),
) -> (bool, Vec<usize>) {
    let (glue, _, solo) = running_machine();
    let glue = StdArc::new(glue);
    let me = vcpus(&glue, solo)[0];
    let cpu = running_on(&glue, me).unwrap();
    let injector = 4 + (cpu + 1) % 4;
    let inject = {
        let glue = StdArc::clone(&glue);
        move || {
            play_cpu(injector);
            glue.arch().pending.lock().unwrap().insert(me.0);
            glue.notify(me);
            play_cpu(cpu);
        }
    };
    play_cpu(cpu);
    assert!(!glue.arch().interrupt_pending(me), "the caller's check");
    match injection {
        Injection::BetweenCheckAndBlock => {
            inject();
            block(&glue, me);
        }
        Injection::BetweenBlockAndRecheck => {
            *glue.arch().before_pending_check.lock().unwrap() = Some(Box::new(inject));
            block(&glue, me);
        }
        Injection::AfterBlock => {
            block(&glue, me);
            inject();
        }
    }
    let lost = is_blocked(&glue, me) && glue.arch().interrupt_pending(me);
    let nudges = glue.arch().nudges.lock().unwrap().clone();
    (lost, nudges)
}

#[test]
fn lockstep_no_injection_point_loses_the_wake_up() {
    for injection in [
        Injection::BetweenCheckAndBlock,
        Injection::BetweenBlockAndRecheck,
        Injection::AfterBlock,
    ] {
        let (lost, _) = lockstep(injection, |glue, vcpu| glue.block(vcpu));
        assert!(
            !lost,
            "{injection:?}: the vCPU sleeps on a pending interrupt"
        );
    }
}

#[test]
fn lockstep_without_the_recheck_the_wake_up_is_lost() {
    // The planted fault: a block that does not look again. The injection
    // between the caller's check and the block must then be lost, or the
    // lockstep above proves nothing.
    let (lost, nudges) = lockstep(Injection::BetweenCheckAndBlock, |glue, vcpu| {
        glue.with_system(|s, p| s.vcpu_block(vcpu, p).unwrap());
        glue.on_event(CpuEvent::Kick);
    });
    assert!(lost, "the race the re-check closes did not happen");
    // The injector saw the vCPU running on another CPU and nudged it.
    assert_eq!(nudges.len(), 1);
}

#[test]
fn notify_nudges_only_another_cpu_and_wakes_a_blocked_vcpu() {
    let (glue, _, solo) = running_machine();
    let me = vcpus(&glue, solo)[0];
    let cpu = running_on(&glue, me).unwrap();
    play_cpu(cpu);
    glue.notify(me);
    assert!(glue.arch().nudges.lock().unwrap().is_empty());
    // A running vCPU: only the nudge, without the scheduler's lock and
    // without a kick (no CPU has anything to decide).
    let (locks, kicks) = (
        glue.lock_wait().acquisitions,
        glue.arch().kicks.lock().unwrap().len(),
    );
    play_cpu(5);
    glue.notify(me);
    assert_eq!(*glue.arch().nudges.lock().unwrap(), [cpu]);
    assert_eq!(
        glue.lock_wait().acquisitions,
        locks,
        "the fast path took the lock"
    );
    assert_eq!(glue.arch().kicks.lock().unwrap().len(), kicks);
    play_cpu(cpu);
    glue.block(me);
    assert!(is_blocked(&glue, me));
    // A blocked one: the slow path wakes it.
    play_cpu(5);
    glue.notify(me);
    assert!(!is_blocked(&glue, me));
    play_cpu(cpu);
    // An unknown vCPU: a logged warning, nothing else.
    glue.notify(VcpuId(999));
    glue.block(VcpuId(999));
}

#[test]
fn boot_names_the_pools_and_the_console_lists_them() {
    let (glue, pair, solo) = running_machine();
    let arch = glue.arch();
    arch.take_lines();
    glue.run_command("pools");
    assert_eq!(
        arch.take_lines(),
        [
            format!(
                "pool 0 (general): credit2, cpu granularity, CPUs {{0-3}}, domains: dom{}",
                solo.0
            ),
            format!(
                "pool 1 (smt): credit2, core granularity, CPUs {{4-7}}, domains: dom{}",
                pair.0
            ),
            String::from("free CPUs (idle scheduler): none"),
        ]
    );
    glue.run_command("domains");
    let lines = arch.take_lines();
    let [v0, v1] = vcpus(&glue, pair)[..] else {
        panic!("pair has two vCPUs")
    };
    let (on0, on1) = (
        running_on(&glue, v0).unwrap(),
        running_on(&glue, v1).unwrap(),
    );
    assert_eq!(on0 / 2, on1 / 2, "a core-scheduled unit runs on one core");
    assert_eq!(
        lines[0],
        format!("dom{} (pair): running, pool 1 (smt)", pair.0)
    );
    assert_eq!(
        lines[1],
        format!("  vcpu 0: running on cpu {on0}, ran {} us", 7 + v0.0)
    );
    assert_eq!(
        lines[2],
        format!("  vcpu 1: running on cpu {on1}, ran {} us", 7 + v1.0)
    );
    assert_eq!(
        lines[3],
        format!("dom{} (solo): running, pool 0 (general)", solo.0)
    );
    assert_eq!(lines.len(), 5);
    glue.run_command("help");
    assert_eq!(arch.take_lines(), console_cmd::HELP);
    glue.run_command("pool-destroy nosuch");
    assert_eq!(arch.take_lines(), ["error: no pool 'nosuch'"]);
    glue.run_command("");
    assert!(arch.take_lines().is_empty());
    glue.run_command("frobnicate");
    let error = arch.take_lines();
    assert!(
        error.len() == 1 && error[0].starts_with("error: "),
        "{error:?}"
    );
}

#[test]
fn console_commands_before_the_scheduler_runs_are_refused() {
    let glue = Runtime::new(FakeArch::default());
    glue.run_command("pool-create spare credit2 cpu");
    assert_eq!(
        glue.arch().take_lines(),
        ["error: no pool (the scheduler is not running yet)"]
    );
    assert_eq!(
        glue.pool_hypercall(DomainId(1), guest_abi::PoolOp::List { from: 0 }),
        Err(HvError::NotFound)
    );
}

#[test]
fn a_move_waits_for_the_old_cpus_and_kicks_them_again_until_it_gives_up() {
    let (glue, pair, _) = running_machine();
    let arch = glue.arch();
    let held: CpuSet = vcpus(&glue, pair)
        .iter()
        .map(|&v| running_on(&glue, v).unwrap())
        .collect();
    // The old CPUs never run their scheduler: the wait gives up after
    // its bound, having kicked them again every 100 ms.
    arch.kicks.lock().unwrap().clear();
    arch.take_lines();
    arch.fast_clock(true);
    glue.run_command(&format!("move {} general", pair.0));
    arch.fast_clock(false);
    let lines = arch.take_lines();
    let expected = format!(
        "moved dom{} from pool 1 (smt) to pool 0 (general); still held after 2000 ms:",
        pair.0
    );
    assert!(
        lines.len() == 1 && lines[0].starts_with(&expected),
        "{lines:?}"
    );
    for v in vcpus(&glue, pair) {
        let on = running_on(&glue, v).unwrap();
        assert!(lines[0].contains(&format!(" vCPU {} on cpu {on}", v.0)));
    }
    let rekicks = arch
        .kicks
        .lock()
        .unwrap()
        .iter()
        .filter(|&&k| k == held)
        .count();
    assert!(
        (10..=20).contains(&rekicks),
        "{rekicks} re-kicks of {held} in 2 s"
    );
    // Once they run their scheduler they let go, and the wait says so.
    run_cpus_until(&glue, &[4, 5, 6, 7], |g| {
        vcpus(g, pair)
            .iter()
            .all(|&v| running_on(g, v).is_none_or(|c| c < 4))
    });
    let text = glue.wait_for_release(pair);
    assert!(
        text.starts_with("its vCPUs left their old CPUs within "),
        "{text}"
    );
    // The hypercall's move: refused to a missing pool; back to smt
    // (nothing to wait for: general's CPUs have not picked them up).
    let to = |pool| guest_abi::PoolOp::MoveDomain {
        domain: pair.0,
        pool,
    };
    assert_eq!(
        glue.pool_hypercall(DomainId(9), to(9)),
        Err(HvError::NotFound)
    );
    glue.with_system(|s, _| {
        for v in s.domain_vcpus(pair).unwrap().to_vec() {
            assert_eq!(s.vcpu_running_on(v), None);
        }
    });
    assert_eq!(glue.pool_hypercall(DomainId(9), to(1)), Ok([0; 4]));
    assert_eq!(
        glue.with_system(|s, _| s.domain_pool(pair)).flatten(),
        Some(PoolId(1))
    );
}

#[test]
fn pausing_a_sibling_checks_its_unit_and_waits_for_it_to_stop() {
    let (glue, pair, solo) = running_machine();
    let unit = vcpus(&glue, pair);
    let other = [unit[0], vcpus(&glue, solo)[0]];
    let pause =
        |vcpus: &[VcpuId], sibling, pause| glue.pause_sibling(pair, vcpus, 0, sibling, pause);
    assert_eq!(pause(&unit, 2, true), Err(HvError::NotFound));
    assert_eq!(pause(&other, 1, true), Err(HvError::Denied));
    let test_paused = |v| glue.with_system(|s, _| s.vcpu_info(v).unwrap().test_paused);
    // Its CPU never switches it out: Busy after the bound, pause undone.
    glue.arch().fast_clock(true);
    assert_eq!(pause(&unit, 1, true), Err(HvError::Busy));
    glue.arch().fast_clock(false);
    assert_eq!(test_paused(unit[1]), Some(false));
    assert!(running_on(&glue, unit[1]).is_some());
    // Its CPU takes the kick: the pause returns once it stopped.
    let cpu = running_on(&glue, unit[1]).unwrap();
    std::thread::scope(|scope| {
        let paused = scope.spawn(|| pause(&unit, 1, true));
        run_cpus_until(&glue, &[cpu], |g| running_on(g, unit[1]).is_none());
        assert_eq!(paused.join().unwrap(), Ok(()));
    });
    assert_eq!(test_paused(unit[1]), Some(true));
    assert_eq!(pause(&unit, 1, true), Err(HvError::Busy));
    assert_eq!(pause(&unit, 1, false), Ok(()));
    assert_eq!(test_paused(unit[1]), Some(false));
    assert_eq!(pause(&unit, 1, false), Err(HvError::InvalidParameter));
}

#[test]
fn a_guest_unpause_never_drops_the_hypervisors_pause() {
    // The race of a STARTUP replacing a vCPU's state: the hypervisor holds
    // the sibling off (INIT, PSCI CPU_OFF) while a guest loops unpause.
    let (glue, pair, _) = running_machine();
    let unit = vcpus(&glue, pair);
    let pause_count = |v| glue.with_system(|s, _| s.vcpu_info(v).unwrap().pause_count);
    glue.with_system(|s, p| s.vcpu_pause(unit[1], p).map(|_| ()))
        .unwrap()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            glue.pause_sibling(pair, &unit, 0, 1, false),
            Err(HvError::InvalidParameter)
        );
    }
    assert_eq!(pause_count(unit[1]), Some(1));
    // A test pause and unpause around it leave it held too.
    let cpu = running_on(&glue, unit[1]);
    if let Some(cpu) = cpu {
        run_cpus_until(&glue, &[cpu], |g| running_on(g, unit[1]).is_none());
    }
    assert_eq!(glue.pause_sibling(pair, &unit, 0, 1, true), Ok(()));
    assert_eq!(glue.pause_sibling(pair, &unit, 0, 1, false), Ok(()));
    assert_eq!(pause_count(unit[1]), Some(1));
    assert!(
        glue.with_system(|s, _| s.vcpu_running_on(unit[1]))
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_state_replaced_after_init_is_never_loaded_while_a_guest_loops_unpause() {
    // x86 INIT + STARTUP (ARM: CPU_OFF + CPU_ON) on a sibling, each STARTUP
    // replacing its state once its CPU let it go, while the other vCPU of
    // the unit loops TEST_UNPAUSE_SIBLING and the pool's CPUs keep
    // scheduling. The replacement window must never see it loaded.
    let (glue, pair, _) = running_machine();
    let unit = vcpus(&glue, pair);
    let target = unit[1];
    let stop = std::sync::atomic::AtomicBool::new(false);
    let violations = AtomicU64::new(0);
    /// Stops the helper threads however the main loop ends (a failed
    /// check must fail the test, not hang it).
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let result = std::thread::scope(|scope| {
        for cpu in 4..8 {
            let (glue, stop) = (&glue, &stop);
            scope.spawn(move || {
                play_cpu(cpu);
                while !stop.load(Ordering::Relaxed) {
                    glue.on_event(CpuEvent::Kick);
                    std::thread::yield_now();
                }
            });
        }
        let (glue_ref, stop_ref, unit_ref) = (&glue, &stop, &unit);
        scope.spawn(move || {
            while !stop_ref.load(Ordering::Relaxed) {
                let _ = glue_ref.pause_sibling(pair, unit_ref, 0, 1, false);
                std::thread::yield_now();
            }
        });
        let _stop = StopOnDrop(&stop);
        for round in 0..200 {
            // INIT: the hypervisor's pause holds it off.
            glue.with_system(|s, p| s.vcpu_pause(target, p))
                .ok_or("no scheduler")?
                .map_err(|e| format!("round {round}: INIT pause: {e}"))?;
            if !glue.wait_until_released(target, 2_000_000_000) {
                return Err(format!("round {round}: never released"));
            }
            // STARTUP replaces its state now: nothing may load it.
            for _ in 0..20 {
                if running_on(&glue, target).is_some() {
                    violations.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::yield_now();
            }
            glue.with_system(|s, p| s.vcpu_unpause(target, p))
                .ok_or("no scheduler")?
                .map_err(|e| format!("round {round}: STARTUP unpause: {e}"))?;
        }
        Ok::<(), String>(())
    });
    assert_eq!(result, Ok(()));
    assert_eq!(violations.load(Ordering::Relaxed), 0);
    assert_eq!(
        glue.with_system(|s, _| s.vcpu_info(target).unwrap().pause_count),
        Some(0)
    );
}

#[test]
fn waiting_for_a_release_is_bounded() {
    let (glue, pair, _) = running_machine();
    let v = vcpus(&glue, pair)[0];
    glue.arch().fast_clock(true);
    assert!(!glue.wait_until_released(v, 50_000_000));
    glue.arch().fast_clock(false);
    glue.with_system(|s, p| s.vcpu_pause(v, p).map(|_| ()))
        .unwrap()
        .unwrap();
    let cpu = running_on(&glue, v).unwrap();
    run_cpus_until(&glue, &[cpu], |g| running_on(g, v).is_none());
    assert!(glue.wait_until_released(v, 50_000_000));
}

#[test]
fn a_traced_run_dumps_lines_that_decode_to_what_the_cpus_did() {
    let (glue, pair, solo) = machine_tracing(trace::ClassSet::DEFAULT);
    let all: Vec<VcpuId> = [pair, solo].iter().flat_map(|&d| vcpus(&glue, d)).collect();
    run_cpus_until(&glue, &(0..8).collect::<Vec<_>>(), |g| {
        all.iter().all(|&v| running_on(g, v).is_some())
    });
    let placed: Vec<(VcpuId, usize)> = all
        .iter()
        .map(|&v| (v, running_on(&glue, v).unwrap()))
        .collect();
    let solo_vcpu = vcpus(&glue, solo)[0];
    let solo_cpu = running_on(&glue, solo_vcpu).unwrap();
    play_cpu(solo_cpu);
    glue.block(solo_vcpu);
    glue.wake(solo_vcpu);
    // A wake of a vCPU that is not blocked changes nothing and is not traced.
    glue.wake(solo_vcpu);
    glue.arch().take_lines();
    glue.run_command("trace dump");
    let lines = glue.arch().take_lines();
    let decoded = trace::Trace::decode(&lines.join("\n")).unwrap();
    assert_eq!(decoded.origin, trace::Origin::Boot);
    assert_eq!(decoded.cpus.len(), 8);
    assert_eq!(decoded.total_dropped(), 0);
    // Where each CPU is: the core pool's CPUs by pairs, the cpu pool's alone.
    let smt = glue
        .with_system(|s, _| s.domain_pool(pair))
        .flatten()
        .unwrap();
    for cpu in 4..8 {
        let place = decoded.cpus[cpu].place;
        assert_eq!(place.pool, Some(smt.0));
        assert_eq!(place.resource, Some((cpu & !1) as u32), "cpu {cpu}");
    }
    // FakeArch's identity: vCPU v is v % 10 of domain v / 10 + 1.
    let identity = |v: VcpuId| (v.0 / 10 + 1, v.0 % 10);
    let switched_to = |cpu: usize, v: VcpuId| {
        decoded.cpus[cpu]
            .events
            .iter()
            .any(|e| e.kind == trace::Kind::Switch && (e.domain, e.vcpu) == identity(v))
    };
    for &(v, cpu) in &placed {
        assert!(switched_to(cpu, v), "no switch to {v:?} on cpu {cpu}");
    }
    let solo_events: Vec<trace::Kind> = decoded.cpus[solo_cpu]
        .events
        .iter()
        .filter(|e| (e.domain, e.vcpu) == identity(solo_vcpu) && e.kind != trace::Kind::Switch)
        .map(|e| e.kind)
        .collect();
    assert_eq!(solo_events, [trace::Kind::Block, trace::Kind::Wake]);
    // The pair's core switched in together: no sibling held another domain.
    assert_eq!(trace::analysis::sibling_overlaps(&decoded).overlaps, []);
    // The dump stopped the session: nothing more is recorded.
    glue.block(solo_vcpu);
    glue.run_command("trace");
    assert!(
        glue.arch().take_lines()[0].starts_with("trace: stopped;"),
        "status after a dump"
    );
}

#[test]
fn trace_commands_start_stop_and_refuse_unknown_classes() {
    let (glue, _, solo) = machine();
    let solo_vcpu = vcpus(&glue, solo)[0];
    glue.arch().take_lines();
    glue.run_command("trace start sched,bogus");
    assert_eq!(
        glue.arch().take_lines(),
        ["error: no trace class 'bogus' (all, sched, vcpu, ipi, rendezvous, ops, exits)"]
    );
    // Not recording: a block leaves nothing.
    glue.block(solo_vcpu);
    glue.run_command("trace");
    assert_eq!(
        glue.arch().take_lines(),
        ["trace: stopped; 0 events held, 0 dropped"]
    );
    glue.run_command("trace start vcpu");
    assert_eq!(
        glue.arch().take_lines(),
        ["trace: recording vcpu (4096 events per CPU)"]
    );
    glue.wake(solo_vcpu);
    glue.run_command("trace stop");
    assert_eq!(
        glue.arch().take_lines(),
        ["trace: stopped; 1 events held, 0 dropped"]
    );
    glue.block(solo_vcpu);
    glue.run_command("trace dump");
    let decoded = trace::Trace::decode(&glue.arch().take_lines().join("\n")).unwrap();
    assert_eq!(decoded.origin, trace::Origin::Start);
    assert_eq!(decoded.total_events(), 1);
    // Guest exits only with their class on.
    glue.run_command("trace start");
    glue.trace_exit(solo, 0, 0x16);
    glue.run_command("trace start exits");
    glue.trace_exit(solo, 0, 0x17);
    glue.arch().take_lines();
    glue.run_command("trace dump");
    let decoded = trace::Trace::decode(&glue.arch().take_lines().join("\n")).unwrap();
    let exits: Vec<(u32, u64)> = decoded
        .cpus
        .iter()
        .flat_map(|c| &c.events)
        .map(|e| (e.domain, e.arg))
        .collect();
    assert_eq!(exits, [(solo.0, 0x17)]);
}

#[test]
fn pool_operations_from_the_console_and_the_hypercall_are_traced() {
    let (glue, _, solo) = machine();
    glue.run_command("trace start ops");
    glue.run_command("pool-create spare credit cpu");
    let created = glue
        .pool_hypercall(
            solo,
            guest_abi::PoolOp::Create {
                scheduler: guest_abi::Scheduler::Null,
                granularity: guest_abi::Granularity::Cpu,
            },
        )
        .unwrap()[1] as u32;
    glue.pool_hypercall(solo, guest_abi::PoolOp::Destroy { pool: created })
        .unwrap();
    glue.arch().take_lines();
    glue.run_command("trace dump");
    let decoded = trace::Trace::decode(&glue.arch().take_lines().join("\n")).unwrap();
    let ops: Vec<(u32, u32)> = decoded
        .cpus
        .iter()
        .flat_map(|c| &c.events)
        .filter(|e| e.kind == trace::Kind::PoolOp)
        .map(|e| (e.domain, e.vcpu))
        .collect();
    let create = trace::event::PoolOp::Create as u32;
    let destroy = trace::event::PoolOp::Destroy as u32;
    assert_eq!(ops.len(), 3, "{ops:?}");
    assert_eq!(ops[0].1, create);
    assert_eq!(&ops[1..], [(created, create), (created, destroy)]);
}

#[test]
fn boot_options_trace_from_boot_and_dump_once_the_time_after_the_domains_start_is_up() {
    let glue = Runtime::new(FakeArch::default());
    let options = crate::boot_options::BootOptions::parse(
        "hv.trace=sched hv.trace-dump=1 hv.trace-events=16",
        |unknown| panic!("{unknown}"),
    );
    glue.apply_boot_options(&options);
    glue.boot(&Topology::uniform(1, 2, 2, 2), None);
    glue.arch().take_lines();
    // Each clock read now moves 1 ms on. Building the domains may take
    // longer than the traced time: the clock runs from their start, so
    // two seconds of it before they start dump nothing.
    glue.arch().fast_clock(true);
    for _ in 0..2000 {
        glue.trace_housekeeping();
    }
    assert_eq!(
        glue.arch().take_lines(),
        Vec::<String>::new(),
        "dumped before the domains started"
    );
    glue.boot_domains_started();
    glue.trace_housekeeping();
    assert_eq!(
        glue.arch().take_lines(),
        Vec::<String>::new(),
        "dumped too early"
    );
    // The second is up within 1000 ticks.
    let mut lines = Vec::new();
    for _ in 0..2000 {
        glue.trace_housekeeping();
        lines = glue.arch().take_lines();
        if !lines.is_empty() {
            break;
        }
    }
    let decoded = trace::Trace::decode(&lines.join("\n")).unwrap();
    assert_eq!(decoded.origin, trace::Origin::Boot);
    assert_eq!(decoded.classes, trace::ClassSet::parse("sched").unwrap());
    assert_eq!(decoded.cpus.len(), 8);
    // Once only.
    glue.trace_housekeeping();
    assert_eq!(glue.arch().take_lines(), Vec::<String>::new());
    // The rings have the size asked for.
    glue.run_command("trace start");
    assert_eq!(
        glue.arch().take_lines(),
        ["trace: recording sched,vcpu,ipi,rendezvous,ops (16 events per CPU)"]
    );
}

#[test]
fn pin_moves_a_running_domain_and_refuses_cpus_outside_its_pool() {
    let (glue, _, solo) = running_machine();
    let vcpu = vcpus(&glue, solo)[0];
    let target = (running_on(&glue, vcpu).unwrap() + 1) % 4;
    glue.arch().take_lines();
    glue.run_command(&format!("pin dom{} {target}", solo.0));
    assert_eq!(
        glue.arch().take_lines(),
        [format!(
            "dom{}: hard affinity {target}, no preference",
            solo.0
        )]
    );
    run_cpus_until(&glue, &[0, 1, 2, 3], |g| {
        running_on(g, vcpu) == Some(target)
    });
    glue.run_command(&format!("pin dom{} 6", solo.0));
    let lines = glue.arch().take_lines();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains("no CPU of its cpupool"),
        "{lines:?}"
    );
    assert_eq!(
        glue.with_system(|s, _| s.domain_affinity(solo))
            .flatten()
            .map(|a| a.0),
        Some(CpuSet::single(target))
    );
}

#[test]
fn xl_style_commands_show_and_change_parameters_and_refuse_what_does_not_fit() {
    let (glue, pair, solo) = machine();
    let (pair, solo) = (pair.0, solo.0);
    glue.arch().take_lines();
    glue.run_command(&format!("sched-credit2 -d {solo}"));
    glue.run_command(&format!("sched-credit2 -d {solo} -w 512 -c 50"));
    assert_eq!(
        glue.arch().take_lines(),
        [
            format!("dom{solo} (credit2): weight 256, cap 0"),
            format!("dom{solo} (credit2): weight 512, cap 50"),
        ]
    );
    let params = glue
        .with_system(|s, _| s.domain_params(DomainId(solo)))
        .flatten()
        .unwrap();
    assert_eq!((params.weight, params.cap_percent), (512, 50));
    // Another scheduler's command, and a weight credit2 refuses: nothing changes.
    glue.run_command(&format!("sched-credit -d {solo} -w 5"));
    glue.run_command(&format!("sched-rtds -d {pair} -b 100"));
    glue.run_command(&format!("sched-credit2 -d {solo} -w 0"));
    let lines = glue.arch().take_lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].contains("is in a credit2 pool, not a credit one"),
        "{lines:?}"
    );
    assert!(lines[1].contains("not a rt one"), "{lines:?}");
    assert!(lines[2].starts_with("error: "), "{lines:?}");
    let params = glue
        .with_system(|s, _| s.domain_params(DomainId(solo)))
        .flatten()
        .unwrap();
    assert_eq!(params.weight, 512);
    // Pool parameters and names.
    glue.run_command("pool-param general ratelimit_us=1000");
    glue.run_command("pool-param general bogus=1");
    glue.run_command("pool-rename smt fast");
    glue.run_command("pool-rename fast general");
    glue.run_command("pool-rename fast bad/name");
    let lines = glue.arch().take_lines();
    assert!(lines[0].ends_with(": ratelimit_us = 1000"), "{lines:?}");
    assert!(lines[1].starts_with("error: "), "{lines:?}");
    assert_eq!(lines[2], "pool 'smt' is now 'fast'");
    assert!(
        lines[3].starts_with("error: ") && lines[3].contains("general"),
        "{lines:?}"
    );
    assert!(lines[4].starts_with("error: "), "{lines:?}");
    glue.run_command("pools");
    let pools = glue.arch().take_lines();
    assert!(pools.iter().any(|l| l.contains("fast")), "{pools:?}");
    assert!(!pools.iter().any(|l| l.contains("smt")), "{pools:?}");
}

#[test]
fn a_runtime_arinc653_pool_runs_a_moved_domain_once_given_a_schedule() {
    let (glue, _, solo) = running_machine();
    let vcpu = vcpus(&glue, solo)[0];
    for line in [
        "pool-create part arinc653 cpu",
        "pool-create wide credit2 cpu spread",
        "pool-remove-cpu general 3",
        "pool-add-cpu part 3",
    ] {
        glue.run_command(line);
    }
    let lines = glue.arch().take_lines();
    assert!(lines.iter().all(|l| !l.starts_with("error")), "{lines:?}");
    assert!(lines[1].contains("spread placement"), "{lines:?}");
    let wide = glue
        .with_pools(|s, n, _| n.find("wide").and_then(|id| s.pool_info(id)))
        .flatten()
        .unwrap();
    assert_eq!(wide.placement, sched::Placement::Spread);
    glue.run_command(&format!("move dom{} part", solo.0));
    // No schedule yet: an arinc653 pool runs only the units its windows name.
    run_cpus_until(&glue, &[0, 1, 2, 3], |g| running_on(g, vcpu).is_none());
    for _ in 0..20 {
        play_cpu(3);
        glue.on_event(CpuEvent::Kick);
    }
    assert_eq!(running_on(&glue, vcpu), None);
    glue.run_command(&format!("pool-param part schedule={}:0:1000", solo.0));
    run_cpus_until(&glue, &[3], |g| running_on(g, vcpu) == Some(3));
}

#[test]
fn pool_create_sets_its_parameters_or_creates_nothing() {
    let (glue, _, solo) = running_machine();
    glue.arch().take_lines();
    glue.run_command(&format!(
        "pool-create part arinc653 cpu schedule={}:0:1000",
        solo.0
    ));
    glue.run_command("pool-create slow credit cpu tslice_ms=5");
    let lines = glue.arch().take_lines();
    assert!(
        lines[0].starts_with("created pool 2 (part): arinc653, cpu granularity, schedule="),
        "{lines:?}"
    );
    assert!(lines[1].ends_with("tslice_ms=5, no CPUs"), "{lines:?}");
    // A refused parameter: an error line and no pool.
    glue.run_command("pool-create bad credit2 cpu nosuch=1");
    let lines = glue.arch().take_lines();
    assert!(lines[0].starts_with("error: "), "{lines:?}");
    let pools = glue
        .with_pools(|s, n, _| (s.pools().count(), n.find("bad")))
        .unwrap();
    assert_eq!(pools, (4, None));
}

#[test]
fn a_timer_event_keeps_a_future_deadline_another_cpu_just_set() {
    // cpu 5 decides for its core and arms the master's (cpu 4's) timer
    // just as cpu 4 takes its timer interrupt: cpu 4 must not erase the new
    // deadline, or nobody ever fires it (the core stops deciding: a domain
    // starved in qemu-virt-guests-restart).
    let (glue, _, _) = running_machine();
    let far = glue.arch().now_ns() + 60_000_000_000;
    play_cpu(5);
    glue.set_timer(4, Some(far));
    play_cpu(4);
    let rearms_before = glue.arch().rearms.lock().unwrap().len();
    glue.on_event(CpuEvent::Timer);
    // The event may also decide for the core (when the real clock, which
    // this fake reads, ran past the running unit's slice on a loaded host):
    // that decision then re-arms cpu 4 itself (a single unit may get no
    // deadline at all). Without one, the slot must still hold `far`.
    let decided = glue.arch().rearms.lock().unwrap()[rearms_before..]
        .iter()
        .any(|&(cpu, _)| cpu == 4);
    if !decided {
        assert_eq!(
            glue.deadline(4),
            Some(far),
            "cpu 4's timer event erased the deadline cpu 5 had just set"
        );
    }
}

#[test]
fn the_pool_layout_follows_the_cpu_classes_on_any_firmware() {
    use platform::dt::{ClassKind, CpuClass};
    let topology = Topology::uniform(1, 2, 4, 1);
    let class = |kind, cpus: &str| CpuClass {
        kind,
        cpus: crate::config::parse_cpu_list(cpus).unwrap(),
        capacity: None,
        compatible: None,
    };
    // An ACPI big.LITTLE machine (the Surface Pro X's efficiency classes)
    // or an x86 hybrid part, without a config: a pool per class.
    let classes = [
        class(ClassKind::Big, "4-7"),
        class(ClassKind::Little, "0-3"),
    ];
    let config = boot::with_pool_layout(None, &classes, &topology).unwrap();
    let pools: Vec<(&str, String)> = config
        .pools
        .iter()
        .map(|p| (p.name.as_str(), crate::config::format_cpu_list(&p.cpus)))
        .collect();
    assert_eq!(pools.len(), 2);
    assert!(pools.contains(&("big", String::from("4-7"))), "{pools:?}");
    assert!(
        pools.contains(&("LITTLE", String::from("0-3"))),
        "{pools:?}"
    );
    // A config without pools gets them too; one with pools keeps its own.
    let pool_less = Config {
        pools: alloc::vec![],
        domains: alloc::vec![DomainConfig::new("fast", "big")],
    };
    let config = boot::with_pool_layout(Some(pool_less), &classes, &topology).unwrap();
    assert_eq!(config.pools.len(), 2);
    let listed = Config {
        pools: alloc::vec![PoolConfig::new("all", topology.enabled())],
        domains: alloc::vec![],
    };
    let kept = boot::with_pool_layout(Some(listed.clone()), &classes, &topology);
    assert_eq!(kept, Some(listed));
    // One class and no config: nothing to lay out.
    let one = [class(ClassKind::Big, "0-7")];
    assert_eq!(boot::with_pool_layout(None, &one, &topology), None);
}

#[test]
fn the_images_config_is_loaded_or_replaced_by_one_pool_when_bad() {
    let topology = Topology::uniform(1, 2, 2, 2);
    assert!(
        boot::load_config(&[], &topology).is_none(),
        "no config built in"
    );
    let config = Config {
        pools: alloc::vec![PoolConfig::new("general", (0..4).collect())],
        domains: alloc::vec![DomainConfig::new("solo", "general")],
    };
    let blob = crate::config::encode(&config);
    let loaded = boot::load_config(&blob, &topology).expect("a config");
    assert_eq!(loaded.domains.len(), 1);
    assert_eq!(loaded.pools[0].name, "general");
    // A corrupt blob: one pool of every enabled CPU, no domains.
    let mut corrupt = blob.clone();
    corrupt[0] ^= 0xff;
    let fallback = boot::load_config(&corrupt, &topology).expect("a fallback");
    assert!(fallback.domains.is_empty());
    assert_eq!(fallback.pools.len(), 1);
    assert_eq!(fallback.pools[0].cpus, topology.enabled());
}

#[test]
fn a_domains_hypercalls_reach_its_console_and_its_own_vcpus() {
    use crate::hypercall::{Caller, HypercallHandler};
    let (glue, pair, solo) = machine();
    let caller = |domain: DomainId| Caller {
        domain: domain.0,
        vcpu: 0,
        privileged: false,
        test_hooks: false,
    };
    let mut calls = calls::DomainCalls::new(&glue, pair);
    calls.console_write(&caller(pair), b"hello");
    assert!(
        glue.arch
            .lines
            .lock()
            .unwrap()
            .contains(&format!("[dom{}] hello", pair.0)),
        "CONSOLE_WRITE goes to the caller's console"
    );
    let stats = calls
        .sched_stats(&caller(pair), guest_abi::StatsScope::Domain)
        .unwrap();
    assert_eq!(stats.vcpus, 2, "pair's two vCPUs, not solo's one");
    let solo_stats = calls::DomainCalls::new(&glue, solo)
        .sched_stats(&caller(solo), guest_abi::StatsScope::Domain)
        .unwrap();
    assert_eq!(solo_stats.vcpus, 1);
    let gone = DomainId(999);
    assert_eq!(
        calls::DomainCalls::new(&glue, gone)
            .sched_stats(&caller(gone), guest_abi::StatsScope::Domain),
        Err(HvError::NotSupported)
    );
}

#[test]
fn a_restarted_domain_runs_vcpu_0_and_its_secondaries_wait_paused_once() {
    let (glue, pair, solo) = running_machine();
    let cpus: Vec<usize> = (0..8).collect();
    let pair_vcpus = vcpus(&glue, pair);
    // A console pause first: it must not outlive the restart.
    glue.run_command(&format!("pause dom{}", pair.0));
    glue.pause_for_restart(&pair_vcpus).unwrap();
    run_cpus_until(&glue, &cpus, |g| {
        pair_vcpus.iter().all(|&v| running_on(g, v).is_none())
    });
    glue.resume_restarted(pair, &pair_vcpus).unwrap();
    let pauses = |v: VcpuId| {
        glue.with_system(|s, _| s.vcpu_info(v).map(|i| i.pause_count))
            .flatten()
    };
    assert_eq!(pauses(pair_vcpus[0]), Some(0), "vCPU 0 runs");
    assert_eq!(
        pauses(pair_vcpus[1]),
        Some(1),
        "a secondary waits for CPU_ON"
    );
    assert_eq!(
        glue.with_system(|s, _| s.domain_paused(pair)).flatten(),
        Some(false)
    );
    run_cpus_until(&glue, &cpus, |g| running_on(g, pair_vcpus[0]).is_some());
    assert!(running_on(&glue, pair_vcpus[1]).is_none());
    // The other domain was never touched.
    assert!(
        vcpus(&glue, solo)
            .iter()
            .all(|&v| running_on(&glue, v).is_some())
    );
}

#[test]
fn the_lock_wait_counter_times_a_cpu_that_finds_the_lock_held() {
    let (glue, _, _) = machine();
    let before = glue.lock_wait();
    play_cpu(0);
    glue.on_event(CpuEvent::Timer);
    let after_event = glue.lock_wait();
    assert_eq!(after_event.events, before.events + 1);
    assert!(after_event.acquisitions > before.acquisitions);
    assert_eq!(
        after_event.contended, before.contended,
        "nobody else held it"
    );
    // CPU 1 asks while CPU 0 holds the lock for 20 ms.
    let held = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            glue.with_system(|_, _| {
                held.wait();
                std::thread::sleep(Duration::from_millis(20));
            });
        });
        held.wait();
        glue.with_system(|_, _| ());
    });
    let after = glue.lock_wait();
    assert_eq!(after.contended, after_event.contended + 1);
    assert!(after.wait_ns >= 15_000_000, "{after:?}");
    assert!(after.max_wait_ns >= 15_000_000, "{after:?}");
}
