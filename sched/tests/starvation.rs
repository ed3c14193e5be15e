//! A runnable unit must get its turn: the ARM restart scenario's shape on
//! the lockstep machine with the real schedulers. Two SMT cores at core
//! granularity, fixed placement; a 4-vCPU domain (units {0,1} and {2,3})
//! and a 2-vCPU one. vCPU 1 is powered off (paused) while it runs, at many
//! different moments; vCPU 0 stays runnable and must keep running.

use sched::lockstep::Lockstep;
use sched::{
    CpuContext, DomainId, Granularity, Placement, SchedParams, System, SystemConfig, Topology,
    VcpuId,
};

const MS: u64 = 1_000_000;

fn machine(scheduler: &str) -> (Lockstep, DomainId, DomainId) {
    let config = SystemConfig {
        rendezvous_timeout_ns: 100 * MS,
        retry_delay_ns: MS,
    };
    let system = System::new(
        Topology::uniform(1, 1, 2, 2),
        config,
        sched::schedulers::create,
    );
    let mut m = Lockstep::new(system);
    m.check_every_step = true;
    let pool = m
        .system
        .boot_pool0(scheduler, Granularity::Core, Placement::Fixed, &m.platform)
        .unwrap();
    m.run(10_000).unwrap();
    let mut start = |vcpus| {
        let d = m
            .system
            .domain_create(pool, vcpus, SchedParams::default(), &m.platform)
            .unwrap();
        for v in m.system.domain_vcpus(d).unwrap().to_vec() {
            m.system.vcpu_wake(v, &m.platform).unwrap();
        }
        m.run(10_000).unwrap();
        d
    };
    let restarter = start(4);
    let neighbour = start(2);
    (m, restarter, neighbour)
}

fn vcpus(m: &Lockstep, d: DomainId) -> Vec<VcpuId> {
    m.system.domain_vcpus(d).unwrap().to_vec()
}

/// Advances `ms` milliseconds in 100 µs steps and counts the steps after
/// which `vcpu` was on a CPU.
fn steps_running(m: &mut Lockstep, vcpu: VcpuId, ms: u64) -> u64 {
    let mut ran = 0;
    for _ in 0..ms * 10 {
        m.advance(MS / 10, 100_000).unwrap();
        assert_eq!(m.violation(), None);
        if m.system.vcpu_running_on(vcpu).is_some() {
            ran += 1;
        }
    }
    ran
}

fn a_paused_sibling_does_not_starve_its_unit(scheduler: &str) {
    for offset_100us in 0..40 {
        let (mut m, restarter, _) = machine(scheduler);
        let r = vcpus(&m, restarter);
        steps_running(&mut m, r[0], 20 + offset_100us / 10);
        // Power vCPU 1 off the way PSCI CPU_OFF does.
        m.system.vcpu_pause(r[1], &m.platform).unwrap();
        m.run(10_000).unwrap();
        let ran = steps_running(&mut m, r[0], 500);
        assert!(
            ran > 500,
            "{scheduler}, pause at offset {offset_100us}: vCPU 0 ran in only {ran} of 5000 steps; cpus: {:?}",
            (0..4)
                .map(|c| m.system.cpu_context(c))
                .collect::<Vec<Option<CpuContext>>>()
        );
        m.system.check_invariants().unwrap();
    }
}

#[test]
fn credit2_a_paused_sibling_does_not_starve_its_unit() {
    a_paused_sibling_does_not_starve_its_unit("credit2");
}

#[test]
fn credit_a_paused_sibling_does_not_starve_its_unit() {
    a_paused_sibling_does_not_starve_its_unit("credit");
}

/// The whole restart protocol: vCPU 1 powers itself off a while after each
/// start, vCPU 2 (the other unit) powers it on again whenever it runs and
/// finds it off and released, vCPU 0 and 3 and the neighbour never stop.
/// Unit {0,1} must never wait long for its turn.
fn restart_protocol_never_starves_a_unit(scheduler: &str) {
    for life_100us in [1, 2, 3, 5, 8, 13] {
        let (mut m, restarter, _) = machine(scheduler);
        let r = vcpus(&m, restarter);
        let mut alive_steps = 0;
        let mut restarts = 0;
        let (mut waited, mut longest_wait) = (0u64, 0u64);
        for _ in 0..50_000 {
            m.advance(MS / 10, 100_000).unwrap();
            assert_eq!(m.violation(), None);
            let paused = m.system.vcpu_info(r[1]).is_some_and(|i| i.pause_count > 0);
            if m.system.vcpu_running_on(r[1]).is_some() {
                alive_steps += 1;
                if alive_steps >= life_100us {
                    m.system.vcpu_pause(r[1], &m.platform).unwrap();
                    alive_steps = 0;
                }
            }
            if paused
                && m.system.vcpu_running_on(r[2]).is_some()
                && m.system.vcpu_running_on(r[1]).is_none()
            {
                m.system.vcpu_unpause(r[1], &m.platform).unwrap();
                restarts += 1;
            }
            m.run(100_000).unwrap();
            assert_eq!(m.system.starving_units(m.now(), 200 * MS), vec![]);
            if m.system.vcpu_running_on(r[0]).is_some() {
                waited = 0;
            } else {
                waited += 1;
                longest_wait = longest_wait.max(waited);
            }
        }
        m.system.check_invariants().unwrap();
        assert!(
            longest_wait < 2_000,
            "{scheduler}, lives of {life_100us} steps: unit {{0,1}} waited {longest_wait} steps (100 µs) for its turn after {restarts} restarts"
        );
        assert!(restarts > 100, "{scheduler}: only {restarts} restarts");
    }
}

#[test]
fn credit2_restart_protocol_never_starves_a_unit() {
    restart_protocol_never_starves_a_unit("credit2");
}

#[test]
fn credit_restart_protocol_never_starves_a_unit() {
    restart_protocol_never_starves_a_unit("credit");
}

/// The watchdog the hypervisor logs from: a resource whose CPU stops taking
/// its timer (stalled) leaves the other domain's runnable unit waiting, and
/// `starving_units` names it once it has waited past the threshold.
#[test]
fn a_unit_left_waiting_is_reported_as_starving() {
    let (mut m, restarter, neighbour) = machine("credit2");
    let first = vcpus(&m, restarter)[0];
    steps_running(&mut m, first, 50);
    assert_eq!(m.system.starving_units(m.now(), 200 * MS), vec![]);
    // Stall every CPU: nothing decides any more, and whichever units were
    // waiting stay waiting.
    for cpu in 0..4 {
        m.stall(cpu);
    }
    for _ in 0..3000 {
        m.advance(MS / 10, 100_000).unwrap();
    }
    let starving = m.system.starving_units(m.now(), 200 * MS);
    assert!(!starving.is_empty(), "three units for two cores: one waits");
    for &(_, domain, waited) in &starving {
        assert!(domain == restarter || domain == neighbour);
        assert!(waited >= 200 * MS);
    }
    assert_eq!(m.system.starving_units(m.now(), 10_000 * MS), vec![]);
}
