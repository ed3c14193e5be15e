//! Unit tests of the framework, on the FIFO scheduler and the lockstep machine.

use alloc::boxed::Box;
use alloc::string::ToString;
use alloc::vec::Vec;

use super::*;
use crate::fifo::{FIFO_SLICE_NS, FifoScheduler};
use crate::lockstep::Lockstep;

fn fifo(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        _ => Err(SchedError::UnknownScheduler),
    }
}

const TIMEOUT: Time = 50_000;

/// 1 socket x 1 cluster x `cores` x `threads`, pool 0 at `granularity`.
fn machine(cores: u32, threads: u32, granularity: Granularity, placement: Placement) -> Lockstep {
    let config = SystemConfig {
        rendezvous_timeout_ns: TIMEOUT,
        retry_delay_ns: 10_000,
    };
    let system = System::new(Topology::uniform(1, 1, cores, threads), config, fifo);
    let mut m = Lockstep::new(system);
    m.check_every_step = true;
    let pool = m
        .system
        .boot_pool0("fifo", granularity, placement, &m.platform)
        .unwrap();
    assert_eq!(pool, PoolId(0));
    m.run(10_000).unwrap();
    m
}

fn start_domain(m: &mut Lockstep, pool: PoolId, vcpus: u32) -> DomainId {
    let d = m
        .system
        .domain_create(pool, vcpus, SchedParams::default(), &m.platform)
        .unwrap();
    for v in m.system.domain_vcpus(d).unwrap().to_vec() {
        m.system.vcpu_wake(v, &m.platform).unwrap();
    }
    m.run(10_000).unwrap();
    d
}

fn domain_on(m: &Lockstep, cpu: usize) -> Option<DomainId> {
    m.system
        .cpu_context(cpu)
        .and_then(CpuContext::vcpu)
        .and_then(|v| m.system.vcpu_info(v))
        .map(|i| i.domain)
}

fn tick(m: &mut Lockstep, times: usize) {
    for _ in 0..times {
        m.advance(FIFO_SLICE_NS, 100_000).unwrap();
        assert_eq!(m.violation(), None);
        m.system.check_invariants().unwrap();
    }
}

#[test]
fn boot_builds_pool0_with_every_cpu_once() {
    let m = machine(2, 2, Granularity::Core, Placement::Fixed);
    assert_eq!(
        m.system.pool_info(PoolId(0)).unwrap().cpus,
        CpuSet::first_n(4)
    );
    assert!(m.system.free_cpus().is_empty());
    assert_eq!(m.system.resources(PoolId(0)).count(), 2);
    let mut again = m;
    assert_eq!(
        again
            .system
            .boot_pool0("fifo", Granularity::Cpu, Placement::Fixed, &again.platform),
        Err(SystemError::AlreadyBooted)
    );
}

#[test]
fn unknown_scheduler_is_refused_and_named() {
    let mut m = machine(1, 1, Granularity::Cpu, Placement::Fixed);
    let err = m
        .system
        .pool_create("nope", Granularity::Cpu, Placement::Fixed)
        .unwrap_err();
    assert!(matches!(
        err,
        SystemError::Scheduler {
            error: SchedError::UnknownScheduler,
            ..
        }
    ));
    assert!(err.to_string().contains("unknown scheduler"));
}

#[test]
fn adding_part_of_a_core_names_the_missing_threads() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let core1: CpuSet = [2, 3].into_iter().collect();
    m.system
        .pool_remove_cpus(PoolId(0), core1, &m.platform)
        .unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.free_cpus(), core1);
    let pool = m
        .system
        .pool_create("fifo", Granularity::Core, Placement::Fixed)
        .unwrap();
    let err = m
        .system
        .pool_add_cpus(pool, CpuSet::single(2), &m.platform)
        .unwrap_err();
    assert_eq!(
        err,
        SystemError::IncompleteResource {
            granularity: Granularity::Core,
            missing: CpuSet::single(3)
        }
    );
    assert!(err.to_string().contains("{3}"), "{err}");
    // Nothing changed.
    assert_eq!(m.system.free_cpus(), core1);
    m.system.pool_add_cpus(pool, core1, &m.platform).unwrap();
    assert_eq!(m.system.pool_of_cpu(3), Some(pool));
    m.system.check_invariants().unwrap();
    // A CPU of another pool is not free.
    assert_eq!(
        m.system.pool_add_cpus(pool, CpuSet::single(0), &m.platform),
        Err(SystemError::CpuNotFree {
            cpu: 0,
            pool: PoolId(0)
        })
    );
    assert_eq!(
        m.system
            .pool_add_cpus(pool, CpuSet::single(99), &m.platform),
        Err(SystemError::UnknownCpu(99))
    );
}

#[test]
fn cpu_granularity_pool_takes_single_threads() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let core1: CpuSet = [2, 3].into_iter().collect();
    m.system
        .pool_remove_cpus(PoolId(0), core1, &m.platform)
        .unwrap();
    let pool = m
        .system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    m.system
        .pool_add_cpus(pool, CpuSet::single(2), &m.platform)
        .unwrap();
    assert_eq!(m.system.free_cpus(), CpuSet::single(3));
    m.system.check_invariants().unwrap();
}

#[test]
fn removal_errors_change_nothing() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let _d = start_domain(&mut m, PoolId(0), 2);
    assert!(matches!(
        m.system.pool_remove_cpus(PoolId(0), CpuSet::single(2), &m.platform),
        Err(SystemError::IncompleteResource { missing, .. }) if missing == CpuSet::single(3)
    ));
    let all = CpuSet::first_n(4);
    let err = m
        .system
        .pool_remove_cpus(PoolId(0), all, &m.platform)
        .unwrap_err();
    assert_eq!(
        err,
        SystemError::WouldStrandDomains {
            pool: PoolId(0),
            domains: 1
        }
    );
    assert!(err.to_string().contains("no CPU"));
    let other = m
        .system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    assert_eq!(
        m.system
            .pool_remove_cpus(other, CpuSet::single(0), &m.platform),
        Err(SystemError::CpuNotInPool {
            cpu: 0,
            pool: other
        })
    );
    assert_eq!(m.system.pool_info(PoolId(0)).unwrap().cpus, all);
    m.system.check_invariants().unwrap();
}

#[test]
fn pool_destroy_rules() {
    let mut m = machine(2, 1, Granularity::Cpu, Placement::Fixed);
    assert_eq!(
        m.system.pool_destroy(PoolId(0), &m.platform),
        Err(SystemError::CannotDestroyPool0)
    );
    m.system
        .pool_remove_cpus(PoolId(0), CpuSet::single(1), &m.platform)
        .unwrap();
    let pool = m
        .system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    m.system
        .pool_add_cpus(pool, CpuSet::single(1), &m.platform)
        .unwrap();
    let d = start_domain(&mut m, pool, 1);
    assert_eq!(
        m.system.pool_destroy(pool, &m.platform),
        Err(SystemError::PoolNotEmpty { pool, domains: 1 })
    );
    m.system.domain_destroy(d, &m.platform).unwrap();
    m.run(1000).unwrap();
    m.system.pool_destroy(pool, &m.platform).unwrap();
    assert_eq!(m.system.free_cpus(), CpuSet::single(1));
    assert_eq!(m.system.pool_info(pool), None);
    assert_eq!(
        m.system.pool_destroy(pool, &m.platform),
        Err(SystemError::UnknownPool(pool))
    );
    m.system.check_invariants().unwrap();
}

#[test]
fn units_group_vcpus_by_resource_size() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let d = m
        .system
        .domain_create(PoolId(0), 3, SchedParams::default(), &m.platform)
        .unwrap();
    let units = m.system.domain_units(d).unwrap().to_vec();
    assert_eq!(units.len(), 2);
    assert_eq!(m.system.unit_vcpus(units[0]).unwrap().len(), 2);
    assert_eq!(m.system.unit_vcpus(units[1]).unwrap().len(), 1);
    assert_eq!(
        m.system
            .domain_create(PoolId(0), 0, SchedParams::default(), &m.platform),
        Err(SystemError::NoVcpus)
    );

    let mut s = machine(2, 2, Granularity::Core, Placement::Spread);
    let d = s
        .system
        .domain_create(PoolId(0), 3, SchedParams::default(), &s.platform)
        .unwrap();
    assert_eq!(s.system.domain_units(d).unwrap().len(), 3);
}

#[test]
fn a_unit_runs_on_all_threads_of_a_core_together() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 2);
    assert_eq!(domain_on(&m, 0), Some(d));
    assert_eq!(domain_on(&m, 1), Some(d));
    let v = m.system.domain_vcpus(d).unwrap().to_vec();
    assert_eq!(m.system.vcpu_running_on(v[0]), Some(0));
    assert_eq!(m.system.vcpu_running_on(v[1]), Some(1));
}

#[test]
fn two_domains_alternate_on_a_core_and_never_overlap() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let a = start_domain(&mut m, PoolId(0), 2);
    let b = start_domain(&mut m, PoolId(0), 2);
    let mut seen_a = 0;
    let mut seen_b = 0;
    for _ in 0..20 {
        tick(&mut m, 1);
        let on0 = domain_on(&m, 0);
        assert_eq!(
            on0,
            domain_on(&m, 1),
            "both threads of the core run the same unit"
        );
        seen_a += usize::from(on0 == Some(a));
        seen_b += usize::from(on0 == Some(b));
    }
    assert!(
        seen_a >= 5 && seen_b >= 5,
        "round robin: a={seen_a} b={seen_b}"
    );
    assert!(
        m.rendezvous_completed() >= 10,
        "every switch between domains was a rendezvous"
    );
    assert_eq!(m.timeouts(), 0);
}

#[test]
fn a_toolstack_pause_stops_every_vcpu_once_and_keeps_the_domains_own_pauses() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 1);
    let v = m.system.domain_vcpus(d).unwrap().to_vec();
    assert_eq!(m.system.vcpu_running_on(v[0]), Some(0));
    // vCPU 1 is off on its own (PSCI CPU_OFF holds a pause).
    m.system.vcpu_pause(v[1], &m.platform).unwrap();
    m.system.domain_pause(d, &m.platform).unwrap();
    assert_eq!(m.system.domain_paused(d), Some(true));
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[0]), None, "paused: off its CPU");
    assert_eq!(m.system.cpu_context(0), Some(CpuContext::Idle));
    // A second pause is refused and changes nothing.
    assert_eq!(
        m.system.domain_pause(d, &m.platform),
        Err(SystemError::DomainPaused(d))
    );
    m.system.domain_unpause(d, &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[0]), Some(0), "runs again");
    assert_eq!(m.system.vcpu_running_on(v[1]), None, "still off");
    assert_eq!(m.system.vcpu_info(v[1]).unwrap().pause_count, 1);
    assert_eq!(
        m.system.domain_unpause(d, &m.platform),
        Err(SystemError::DomainNotPaused(d))
    );
    assert_eq!(m.system.vcpu_info(v[0]).unwrap().pause_count, 0);
    assert_eq!(
        m.system.domain_pause(DomainId(99), &m.platform),
        Err(SystemError::UnknownDomain(DomainId(99)))
    );
    assert_eq!(m.timeouts(), 0);
}

#[test]
fn pausing_a_sibling_vcpu_of_the_running_unit_does_not_wait_for_the_unit() {
    // Xen series crash 1: vcpu_set_periodic_timer -> vcpu_pause(sibling) spun
    // forever in vcpu_sleep_sync, waiting for its own unit to be descheduled.
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 1);
    let v = m.system.domain_vcpus(d).unwrap().to_vec();
    assert_eq!(
        m.system.vcpu_pause(v[1], &m.platform),
        Ok(PauseOutcome::Running { cpu: 1 })
    );
    m.run(1000).unwrap();
    assert_eq!(
        m.system.vcpu_running_on(v[1]),
        None,
        "the paused vCPU left its CPU at once"
    );
    assert_eq!(
        m.system.vcpu_running_on(v[0]),
        Some(0),
        "the rest of its unit keeps running"
    );
    assert_eq!(m.system.cpu_context(1), Some(CpuContext::Idle));
    assert_eq!(
        m.system.vcpu_pause(v[1], &m.platform),
        Ok(PauseOutcome::Stopped)
    );
    m.system.vcpu_unpause(v[1], &m.platform).unwrap();
    m.system.vcpu_unpause(v[1], &m.platform).unwrap();
    assert_eq!(
        m.system.vcpu_unpause(v[1], &m.platform),
        Err(SystemError::NotPaused(v[1]))
    );
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[1]), Some(1));
    assert_eq!(m.timeouts(), 0);
}

#[test]
fn a_test_pause_is_kept_apart_from_the_hypervisors_pauses() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 1);
    let v = m.system.domain_vcpus(d).unwrap().to_vec();
    // The hypervisor holds it off (a power-off); a guest's unpause is
    // refused and changes nothing.
    m.system.vcpu_pause(v[1], &m.platform).unwrap();
    assert_eq!(
        m.system.vcpu_test_unpause(v[1], &m.platform),
        Err(SystemError::NotTestPaused(v[1]))
    );
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[1]), None);
    // A test pause on top, then its unpause: still held by the first.
    assert_eq!(
        m.system.vcpu_test_pause(v[1], &m.platform),
        Ok(PauseOutcome::Stopped)
    );
    assert_eq!(
        m.system.vcpu_test_pause(v[1], &m.platform),
        Err(SystemError::AlreadyTestPaused(v[1]))
    );
    m.system.vcpu_test_unpause(v[1], &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[1]), None);
    let info = m.system.vcpu_info(v[1]).unwrap();
    assert_eq!((info.pause_count, info.test_paused), (1, false));
    // The hypervisor lets it go, but a test pause alone holds it too.
    m.system.vcpu_test_pause(v[1], &m.platform).unwrap();
    m.system.vcpu_unpause(v[1], &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[1]), None);
    m.system.vcpu_test_unpause(v[1], &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.vcpu_running_on(v[1]), Some(1));
    assert_eq!(m.timeouts(), 0);
}

#[test]
fn blocking_one_vcpu_idles_its_thread_only() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 2);
    let v = m.system.domain_vcpus(d).unwrap().to_vec();
    m.system.vcpu_block(v[0], &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.cpu_context(0), Some(CpuContext::Idle));
    assert_eq!(domain_on(&m, 1), Some(d));
    m.system.vcpu_block(v[1], &m.platform).unwrap();
    tick(&mut m, 1);
    assert_eq!(m.system.cpu_context(1), Some(CpuContext::Idle));
    m.system.vcpu_wake(v[0], &m.platform).unwrap();
    tick(&mut m, 1);
    assert_eq!(domain_on(&m, 0), Some(d));
}

#[test]
fn waking_a_vcpu_that_is_not_blocked_changes_nothing_and_kicks_nobody() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let hints = m.system.blocked_hints();
    let d = m
        .system
        .domain_create(PoolId(0), 2, SchedParams::default(), &m.platform)
        .unwrap();
    let v = m.system.domain_vcpus(d).unwrap().to_vec();
    // Created blocked (until started), and the hints say so.
    assert!(v.iter().all(|&v| hints.may_be_blocked(v)));
    for &vcpu in &v {
        m.system.vcpu_wake(vcpu, &m.platform).unwrap();
        assert!(!hints.may_be_blocked(vcpu));
    }
    m.run(10_000).unwrap();
    assert_eq!(domain_on(&m, 0), Some(d));
    // An interrupt for a running vCPU: no kick, no decision, no switch.
    let (kicks, switches) = (m.platform.kicks(), m.platform.switches());
    m.system.vcpu_wake(v[0], &m.platform).unwrap();
    assert_eq!(
        m.platform.kicks(),
        kicks,
        "a wake of a running vCPU kicked a CPU"
    );
    m.run(1000).unwrap();
    assert_eq!(m.platform.switches(), switches);
    // Blocking sets the hint before anything else can see the vCPU blocked;
    // a wake clears it.
    m.system.vcpu_block(v[1], &m.platform).unwrap();
    assert!(hints.may_be_blocked(v[1]));
    assert!(!hints.may_be_blocked(v[0]));
    m.system.vcpu_wake(v[1], &m.platform).unwrap();
    assert!(!hints.may_be_blocked(v[1]));
    m.run(1000).unwrap();
    assert_eq!(domain_on(&m, 1), Some(d));
    // An id the system never had may be anything.
    assert!(hints.may_be_blocked(VcpuId(u32::MAX)));
}

/// Domain `a` runs on the core; `b` becomes runnable; thread 1 is stuck (the
/// shutdown crash: a CPU in stop_machine never joins).
fn stuck_switch() -> (Lockstep, DomainId, DomainId) {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let a = start_domain(&mut m, PoolId(0), 2);
    let filler = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 1);
    let core_of_a = if domain_on(&m, 0) == Some(a) { 0 } else { 2 };
    assert_eq!(domain_on(&m, core_of_a + 1), Some(a));
    let _ = filler;
    m.stall(core_of_a + 1);
    let b = start_domain(&mut m, PoolId(0), 2);
    (m, a, b)
}

#[test]
fn a_stuck_sibling_times_out_names_itself_and_everyone_else_idles() {
    let (mut m, a, _b) = stuck_switch();
    // Drive time until a rendezvous on a's core starts and times out.
    for _ in 0..10 {
        m.advance(FIFO_SLICE_NS, 100_000).unwrap();
        assert_eq!(m.violation(), None);
        if m.timeouts() > 0 {
            break;
        }
    }
    assert!(m.timeouts() > 0, "the wait for the stuck CPU was bounded");
    let stuck = (0..4)
        .find(|&c| m.is_parked(c) || domain_on(&m, c) == Some(a))
        .unwrap();
    let report = m.system.diagnostics().find_map(|d| match d {
        Diagnostic::RendezvousTimedOut { missing, .. } => Some(missing),
        _ => None,
    });
    assert_eq!(report, Some(CpuSet::single(stuck)));
    let message = m.system.diagnostics().next().unwrap().to_string();
    assert!(message.contains("did not arrive"), "{message}");
    // The stuck CPU still runs `a` (it never left); its sibling is idle.
    assert_eq!(domain_on(&m, stuck ^ 1), None);
    m.system.check_invariants().unwrap();
    m.unstall(stuck);
    let before = m.timeouts();
    tick(&mut m, 5);
    assert_eq!(
        m.timeouts(),
        before,
        "once the CPU is back, switches complete again"
    );
    assert!(domain_on(&m, stuck).is_some(), "the core runs a unit again");
    assert_eq!(domain_on(&m, stuck), domain_on(&m, stuck ^ 1));
}

#[test]
fn cpu_offline_mid_rendezvous_cancels_it_without_a_timeout() {
    let (mut m, _a, _b) = stuck_switch();
    // Let a decision start a rendezvous that waits for the stuck CPU.
    let mut waiting = None;
    for _ in 0..10 {
        m.advance(FIFO_SLICE_NS / 4, 100_000).unwrap();
        waiting = (0..4).find(|&c| m.is_parked(c));
        if waiting.is_some() {
            break;
        }
    }
    let waiter = waiting.expect("a rendezvous is waiting for the stuck sibling");
    let stuck = waiter ^ 1;
    m.system.cpu_offline(stuck, &m.platform).unwrap();
    m.run(10_000).unwrap();
    assert!(!m.is_parked(waiter), "the waiter saw the cancel");
    assert_eq!(m.timeouts(), 0);
    assert!(m.system.diagnostics().any(|d| matches!(
        d,
        Diagnostic::RendezvousCancelled { reason: CancelReason::CpuOffline(c), .. } if c == stuck
    )));
    m.unstall(stuck);
    tick(&mut m, 3);
    assert_eq!(m.system.cpu_context(stuck), Some(CpuContext::Idle));
    assert_eq!(m.system.pool_of_cpu(stuck), None);
}

#[test]
fn stopping_the_scheduler_mid_rendezvous_releases_every_waiter() {
    let (mut m, _a, _b) = stuck_switch();
    let mut waiting = None;
    for _ in 0..10 {
        m.advance(FIFO_SLICE_NS / 4, 100_000).unwrap();
        waiting = (0..4).find(|&c| m.is_parked(c));
        if waiting.is_some() {
            break;
        }
    }
    let waiter = waiting.expect("a rendezvous is in progress");
    m.system.set_active(false, &m.platform);
    m.run(10_000).unwrap();
    assert!(!m.is_parked(waiter));
    assert_eq!(m.timeouts(), 0);
    for cpu in 0..4 {
        if cpu != waiter ^ 1 {
            assert_eq!(
                m.system.cpu_context(cpu),
                Some(CpuContext::Idle),
                "cpu {cpu}"
            );
        }
    }
    m.unstall(waiter ^ 1);
    m.run(10_000).unwrap();
    assert_eq!(m.system.cpu_context(waiter ^ 1), Some(CpuContext::Idle));
    m.system.set_active(true, &m.platform);
    tick(&mut m, 3);
    assert!((0..4).any(|c| domain_on(&m, c).is_some()));
}

#[test]
fn destroying_a_domain_mid_switch_leaves_nothing_behind() {
    let (mut m, _a, b) = stuck_switch();
    for _ in 0..10 {
        m.advance(FIFO_SLICE_NS / 4, 100_000).unwrap();
        if (0..4).any(|c| m.is_parked(c)) {
            break;
        }
    }
    m.system.domain_destroy(b, &m.platform).unwrap();
    m.run(10_000).unwrap();
    for c in 0..4 {
        m.unstall(c);
    }
    tick(&mut m, 4);
    assert!((0..4).all(|c| domain_on(&m, c) != Some(b)));
    assert_eq!(
        m.system.domain_destroy(b, &m.platform),
        Err(SystemError::UnknownDomain(b))
    );
    m.system.check_invariants().unwrap();
}

#[test]
fn moving_a_domain_mid_switch_to_a_pool_of_other_granularity_regroups_it() {
    let (mut m, a, b) = stuck_switch();
    for _ in 0..10 {
        m.advance(FIFO_SLICE_NS / 4, 100_000).unwrap();
        if (0..4).any(|c| m.is_parked(c)) {
            break;
        }
    }
    let stuck = (0..4).find(|&c| m.is_parked(c)).map(|c| c ^ 1).unwrap();
    let free_core: CpuSet = if stuck < 2 {
        [2, 3].into_iter().collect()
    } else {
        [0, 1].into_iter().collect()
    };
    // Make room: a cpu-granularity pool on the other core.
    let other = m
        .system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    m.system.domain_move(a, other, &m.platform).unwrap_err();
    m.system
        .pool_remove_cpus(PoolId(0), free_core, &m.platform)
        .unwrap();
    m.system
        .pool_add_cpus(other, free_core, &m.platform)
        .unwrap();
    m.system.domain_move(b, other, &m.platform).unwrap();
    assert_eq!(
        m.system.domain_units(b).unwrap().len(),
        2,
        "one vCPU per unit at cpu granularity"
    );
    m.unstall(stuck);
    tick(&mut m, 4);
    assert!(
        (0..4)
            .filter(|c| free_core.contains(*c))
            .all(|c| domain_on(&m, c) == Some(b))
    );
    assert_eq!(m.system.domain_pool(b), Some(other));
    m.system.check_invariants().unwrap();
}

#[test]
fn a_refused_move_leaves_the_domain_as_it_was() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 4);
    let units = m.system.domain_units(d).unwrap().to_vec();
    let empty = m
        .system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    let err = m.system.domain_move(d, empty, &m.platform).unwrap_err();
    assert!(matches!(
        err,
        SystemError::Scheduler {
            error: SchedError::NoResourceInAffinity(_),
            ..
        }
    ));
    assert_eq!(m.system.domain_units(d).unwrap(), units.as_slice());
    assert_eq!(m.system.domain_pool(d), Some(PoolId(0)));
    m.system.check_invariants().unwrap();
    tick(&mut m, 2);
    assert!((0..4).all(|c| domain_on(&m, c) == Some(d)));
}

#[test]
fn removing_a_core_moves_its_units_to_the_rest_of_the_pool() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 1);
    let core: CpuSet = if domain_on(&m, 0) == Some(d) {
        [0, 1].into_iter().collect()
    } else {
        [2, 3].into_iter().collect()
    };
    m.system
        .pool_remove_cpus(PoolId(0), core, &m.platform)
        .unwrap();
    tick(&mut m, 2);
    for c in core.iter() {
        assert_eq!(
            m.system.cpu_context(c),
            Some(CpuContext::Idle),
            "free cpu {c} runs idle"
        );
    }
    let rest = CpuSet::first_n(4).difference(&core);
    assert!(rest.iter().all(|c| domain_on(&m, c) == Some(d)));
}

#[test]
fn spread_runs_busy_vcpus_one_per_core_before_sharing() {
    // Reference 003: 4 busy vCPUs on 4 two-thread cores.
    let mut fixed = machine(4, 2, Granularity::Core, Placement::Fixed);
    let d = start_domain(&mut fixed, PoolId(0), 4);
    tick(&mut fixed, 3);
    let cores_used = |m: &Lockstep| {
        (0..4)
            .filter(|core| (0..2).any(|t| domain_on(m, core * 2 + t) == Some(d)))
            .count()
    };
    assert_eq!(
        cores_used(&fixed),
        2,
        "fixed units pack 4 vCPUs onto 2 cores"
    );

    let mut spread = machine(4, 2, Granularity::Core, Placement::Spread);
    let d2 = start_domain(&mut spread, PoolId(0), 4);
    tick(&mut spread, 3);
    let used: Vec<usize> = (0..8)
        .filter(|&c| domain_on(&spread, c) == Some(d2))
        .collect();
    assert_eq!(used.len(), 4, "all four vCPUs run: {used:?}");
    let cores: Vec<usize> = used.iter().map(|c| c / 2).collect();
    let mut distinct = cores.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "one per core: {used:?}");

    // Eight busy vCPUs: every core busy, so siblings fill.
    let mut full = machine(4, 2, Granularity::Core, Placement::Spread);
    let d3 = start_domain(&mut full, PoolId(0), 8);
    tick(&mut full, 4);
    assert_eq!(
        (0..8).filter(|&c| domain_on(&full, c) == Some(d3)).count(),
        8
    );
}

#[test]
fn spread_never_mixes_domains_on_a_core() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Spread);
    let a = start_domain(&mut m, PoolId(0), 3);
    let b = start_domain(&mut m, PoolId(0), 3);
    for _ in 0..30 {
        tick(&mut m, 1);
        for core in 0..2 {
            let (x, y) = (domain_on(&m, core * 2), domain_on(&m, core * 2 + 1));
            assert!(
                x.is_none() || y.is_none() || x == y,
                "core {core}: {x:?} {y:?}"
            );
        }
    }
    assert!(
        (0..4).any(|c| domain_on(&m, c) == Some(a)) || (0..4).any(|c| domain_on(&m, c) == Some(b))
    );
}

#[test]
fn offline_then_online_cpu_returns_free() {
    let mut m = machine(2, 1, Granularity::Cpu, Placement::Fixed);
    m.system.cpu_offline(1, &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(
        m.system.cpu_offline(1, &m.platform),
        Err(SystemError::CpuOffline(1))
    );
    assert_eq!(m.system.pool_of_cpu(1), None);
    assert!(!m.system.free_cpus().contains(1));
    m.system.cpu_online(1).unwrap();
    assert_eq!(
        m.system.cpu_online(1),
        Err(SystemError::CpuAlreadyOnline(1))
    );
    assert!(m.system.free_cpus().contains(1));
    m.system
        .pool_add_cpus(PoolId(0), CpuSet::single(1), &m.platform)
        .unwrap();
    m.system.check_invariants().unwrap();
    // The last CPU of a pool with domains cannot go.
    let _d = start_domain(&mut m, PoolId(0), 1);
    m.system.cpu_offline(1, &m.platform).unwrap();
    assert_eq!(
        m.system.cpu_offline(0, &m.platform),
        Err(SystemError::WouldStrandDomains {
            pool: PoolId(0),
            domains: 1
        })
    );
}

#[test]
fn yield_reschedules_the_resource() {
    let mut m = machine(1, 1, Granularity::Cpu, Placement::Fixed);
    let a = start_domain(&mut m, PoolId(0), 1);
    let b = start_domain(&mut m, PoolId(0), 1);
    tick(&mut m, 1);
    let running = domain_on(&m, 0).unwrap();
    let v = m.system.domain_vcpus(running).unwrap()[0];
    m.system.vcpu_yield(v, &m.platform).unwrap();
    m.run(1000).unwrap();
    let other = if running == a { b } else { a };
    assert_eq!(domain_on(&m, 0), Some(other));
}

#[test]
fn a_sibling_still_switching_out_of_another_domain_blocks_the_switch_in() {
    // Found by the stress test: a CPU told to switch to idle still executes its
    // old vCPU until it confirms, so after an aborted rendezvous the retry must
    // not let its sibling load another domain in that window.
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let a = start_domain(&mut m, PoolId(0), 2);
    let b = start_domain(&mut m, PoolId(0), 2);
    tick(&mut m, 1);
    let running = domain_on(&m, 0).unwrap();
    let other = if running == a { b } else { a };
    let table = m.system.rendezvous_table();
    let p = &m.platform;
    m.system
        .vcpu_yield(m.system.domain_vcpus(running).unwrap()[0], p)
        .unwrap();
    // cpu 0 decides, leaves its vCPU and waits at the rendezvous.
    assert_eq!(m.system.on_kick(0, p), Step::Switch(CpuContext::Idle));
    let Step::Rendezvous(ticket) = m.system.switch_done(0, p) else {
        panic!("cpu 0 waits")
    };
    // cpu 1 is told to leave its vCPU but has not done it yet.
    assert_eq!(m.system.on_kick(1, p), Step::Switch(CpuContext::Idle));
    // cpu 0 gives up waiting; later its retry timer fires.
    let mut clock = 0;
    let outcome = table.wait(
        &ticket,
        &mut || {
            clock += TIMEOUT;
            clock
        },
        &crate::sync::spin_hint,
    );
    assert!(matches!(outcome, Outcome::TimedOut { .. }));
    assert_eq!(
        m.system.rendezvous_done(0, &ticket, outcome, p),
        Step::Resume
    );
    // The domain that ran stops being runnable, so the retry picks the other.
    for v in m.system.domain_vcpus(running).unwrap().to_vec() {
        m.system.vcpu_block(v, p).unwrap();
    }
    p.set_now(p.now_ns() + 1_000_000);
    let step = m.system.on_timer(0, p);
    let loads_other = matches!(step, Step::Switch(CpuContext::Vcpu(x))
        if m.system.vcpu_info(x).map(|i| i.domain) == Some(other));
    assert!(
        !loads_other,
        "cpu 0 must wait for cpu 1 to leave {running:?}: {step:?}"
    );
    assert!(
        matches!(step, Step::Rendezvous(_)),
        "a rendezvous, not a local switch: {step:?}"
    );
    m.system.check_invariants().unwrap();
}

#[test]
fn a_core_with_a_thread_offline_cannot_take_two_vcpu_units() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    m.system.cpu_offline(3, &m.platform).unwrap();
    m.run(1000).unwrap();
    assert_eq!(m.system.free_cpus(), CpuSet::single(2));
    let err = m
        .system
        .pool_add_cpus(PoolId(0), CpuSet::single(2), &m.platform)
        .unwrap_err();
    assert_eq!(
        err,
        SystemError::ResourceTooSmall {
            cpus: CpuSet::single(2),
            unit_size: 2
        }
    );
    assert!(err.to_string().contains("fewer CPUs"));
    // A cpu-granularity pool takes it.
    let pool = m
        .system
        .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    m.system
        .pool_add_cpus(pool, CpuSet::single(2), &m.platform)
        .unwrap();
    m.system.check_invariants().unwrap();
}

#[test]
fn unknown_ids_and_parameters_are_refused() {
    let mut m = machine(2, 1, Granularity::Cpu, Placement::Fixed);
    let p = &m.platform;
    let ghost_pool = PoolId(9);
    let ghost_domain = DomainId(99);
    let ghost_vcpu = VcpuId(999);
    assert_eq!(
        m.system.pool_add_cpus(ghost_pool, CpuSet::single(0), p),
        Err(SystemError::UnknownPool(ghost_pool))
    );
    assert_eq!(
        m.system.pool_remove_cpus(ghost_pool, CpuSet::single(0), p),
        Err(SystemError::UnknownPool(ghost_pool))
    );
    assert_eq!(
        m.system.pool_destroy(ghost_pool, p),
        Err(SystemError::UnknownPool(ghost_pool))
    );
    assert_eq!(
        m.system
            .domain_create(ghost_pool, 1, SchedParams::default(), p),
        Err(SystemError::UnknownPool(ghost_pool))
    );
    assert_eq!(
        m.system.domain_move(ghost_domain, PoolId(0), p),
        Err(SystemError::UnknownDomain(ghost_domain))
    );
    assert_eq!(
        m.system.domain_destroy(ghost_domain, p),
        Err(SystemError::UnknownDomain(ghost_domain))
    );
    assert_eq!(
        m.system.vcpu_wake(ghost_vcpu, p),
        Err(SystemError::UnknownVcpu(ghost_vcpu))
    );
    assert_eq!(
        m.system.vcpu_block(ghost_vcpu, p),
        Err(SystemError::UnknownVcpu(ghost_vcpu))
    );
    assert_eq!(
        m.system.vcpu_pause(ghost_vcpu, p),
        Err(SystemError::UnknownVcpu(ghost_vcpu))
    );
    assert_eq!(
        m.system.vcpu_yield(ghost_vcpu, p),
        Err(SystemError::UnknownVcpu(ghost_vcpu))
    );
    assert_eq!(
        m.system.cpu_offline(42, p),
        Err(SystemError::UnknownCpu(42))
    );
    let err = m
        .system
        .pool_set_param(PoolId(0), "ratelimit_us", "5")
        .unwrap_err();
    assert!(matches!(
        err,
        SystemError::Scheduler {
            error: SchedError::UnknownParam { .. },
            ..
        }
    ));
    assert!(err.to_string().contains("cpupool 0"), "{err}");
    // Parameters go through the scheduler; the FIFO accepts any.
    let d = start_domain(&mut m, PoolId(0), 1);
    m.system
        .domain_set_params(
            d,
            SchedParams {
                weight: 512,
                ..SchedParams::default()
            },
        )
        .unwrap();
    assert_eq!(
        m.system
            .domain_set_params(ghost_domain, SchedParams::default()),
        Err(SystemError::UnknownDomain(ghost_domain))
    );
}

#[test]
fn every_error_message_says_what_and_where() {
    let cases = [
        (SystemError::UnknownPool(PoolId(3)), "cpupool 3"),
        (
            SystemError::CpuNotFree {
                cpu: 5,
                pool: PoolId(1),
            },
            "cpu 5",
        ),
        (
            SystemError::CpuNotInPool {
                cpu: 6,
                pool: PoolId(2),
            },
            "cpupool 2",
        ),
        (
            SystemError::PoolNotEmpty {
                pool: PoolId(4),
                domains: 2,
            },
            "2 domain",
        ),
        (SystemError::CpuNotIdle(7), "cpu 7"),
        (
            SystemError::ResourceTooLarge {
                cpus: CpuSet::first_n(2),
            },
            "{0-1}",
        ),
        (SystemError::TooManyVcpus { requested: 70_000 }, "70000"),
    ];
    for (error, needle) in cases {
        let text = error.to_string();
        assert!(text.contains(needle), "{text:?} should mention {needle:?}");
    }
    let diag = Diagnostic::RendezvousTimedOut {
        resource: ResourceId(4),
        generation: 9,
        missing: CpuSet::single(5),
    };
    assert!(diag.to_string().contains("cpus {5} did not arrive"));
}

#[test]
fn the_pool_table_has_a_bound_and_a_full_table_changes_nothing() {
    let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
    let before = m.system.pools().count();
    for _ in before..crate::system::MAX_POOLS {
        m.system
            .pool_create("fifo", Granularity::Cpu, Placement::Fixed)
            .unwrap();
    }
    assert_eq!(
        m.system
            .pool_create("fifo", Granularity::Cpu, Placement::Fixed),
        Err(SystemError::TooManyPools)
    );
    assert_eq!(m.system.pools().count(), crate::system::MAX_POOLS);
}

#[test]
fn a_planted_cosched_fault_lets_siblings_hold_two_domains_and_nothing_else_does() {
    // Two domains of one two-vCPU unit each on one two-thread core, switched
    // at every slice with a CPU stalled mid-switch now and then: the
    // invariant check after every step must see two domains on the core only
    // once the fault is planted on both threads.
    let run = |broken: bool| {
        let mut m = machine(1, 2, Granularity::Core, Placement::Fixed);
        m.split_switches = true;
        m.shuffle_seed = Some(7);
        if broken {
            m.system.plant_cosched_fault([0, 1].into_iter().collect());
        }
        start_domain(&mut m, PoolId(0), 2);
        start_domain(&mut m, PoolId(0), 2);
        for _ in 0..40 {
            let _ = m.advance(FIFO_SLICE_NS, 100_000);
            if m.violation().is_some() {
                break;
            }
        }
        m.violation()
    };
    assert_eq!(
        run(false),
        None,
        "core scheduling kept the threads on one domain"
    );
    assert!(
        run(true).is_some(),
        "the planted fault must be able to mix domains on a core"
    );
}

/// Two pools with a domain each are three parts (the free CPUs' too); a
/// domain moved while its vCPU is still loaded on a CPU of its old pool
/// ties the two pools into one part until that CPU has switched away.
#[test]
fn a_moved_domain_ties_its_pools_together_until_its_vcpus_leave() {
    let mut m = machine(2, 2, Granularity::Core, Placement::Fixed);
    let pool1 = m
        .system
        .pool_create("fifo", Granularity::Core, Placement::Fixed)
        .unwrap();
    let core1 = CpuSet::from_iter([2, 3]);
    m.system
        .pool_remove_cpus(PoolId(0), core1, &m.platform)
        .unwrap();
    m.system.pool_add_cpus(pool1, core1, &m.platform).unwrap();
    m.run(10_000).unwrap();
    let a = start_domain(&mut m, PoolId(0), 2);
    let _b = start_domain(&mut m, pool1, 2);
    assert_eq!(domain_on(&m, 0), Some(a));
    assert_eq!(m.system.part_count(), 3);

    // CPU 0 is stuck mid-switch: it still runs `a`'s vCPU after the move.
    m.split_switches = true;
    m.stall_at_next_switch(0);
    m.system.domain_move(a, pool1, &m.platform).unwrap();
    m.run(10_000).unwrap();
    assert!(m.system.cpu_context(0).and_then(CpuContext::vcpu).is_some());
    assert_eq!(
        m.system.part_count(),
        2,
        "pool 0's CPU still holds pool 1's vCPU"
    );

    m.unstall(0);
    m.run(10_000).unwrap();
    assert_eq!(m.system.cpu_context(0), Some(CpuContext::Idle));
    assert_eq!(
        m.system.part_count(),
        3,
        "released: the pools are apart again"
    );
}
