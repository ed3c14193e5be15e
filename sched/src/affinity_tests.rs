//! Hard and soft affinity through [`System`] on the real schedulers
//! (credit, credit2, null, rt), on the lockstep machine: Xen's meaning, hard
//! is never left, soft is preferred, a change takes effect at once, and a
//! move to a pool that cannot honour it breaks it (as Xen does) instead of
//! stranding the domain.

use alloc::vec::Vec;

use crate::lockstep::Lockstep;
use crate::{
    CpuContext, CpuSet, Diagnostic, DomainId, Granularity, Placement, PoolId, SchedParams, System,
    SystemConfig, SystemError, Time, Topology,
};

/// Schedulers that place units by affinity.
const SCHEDULERS: [&str; 4] = ["credit", "credit2", "null", "rt"];

/// How far the clock moves per step: a few of any scheduler's slices.
const STEP_NS: Time = 3_000_000;

/// 1 socket x 1 cluster x `cores` x `threads`, pool 0 running `scheduler`.
fn machine(scheduler: &str, cores: u32, threads: u32, granularity: Granularity) -> Lockstep {
    let config = SystemConfig {
        rendezvous_timeout_ns: 50_000,
        retry_delay_ns: 10_000,
    };
    let system = System::new(
        Topology::uniform(1, 1, cores, threads),
        config,
        crate::schedulers::create,
    );
    let mut m = Lockstep::new(system);
    m.check_every_step = true;
    m.system
        .boot_pool0(scheduler, granularity, Placement::Fixed, &m.platform)
        .unwrap();
    m.run(10_000).unwrap();
    m
}

fn create(m: &mut Lockstep, vcpus: u32) -> DomainId {
    m.system
        .domain_create(PoolId(0), vcpus, SchedParams::default(), &m.platform)
        .unwrap()
}

fn wake_all(m: &mut Lockstep, domain: DomainId) {
    for v in m.system.domain_vcpus(domain).unwrap().to_vec() {
        m.system.vcpu_wake(v, &m.platform).unwrap();
    }
    m.run(10_000).unwrap();
}

/// The CPUs running a vCPU of `domain` now.
fn cpus_of(m: &Lockstep, domain: DomainId) -> CpuSet {
    (0..m.system.topology().len())
        .filter(|&cpu| {
            m.system
                .cpu_context(cpu)
                .and_then(CpuContext::vcpu)
                .and_then(|v| m.system.vcpu_info(v))
                .is_some_and(|i| i.domain == domain)
        })
        .collect()
}

/// Runs `steps` steps; after each, `check` sees the machine.
fn run_checking(m: &mut Lockstep, steps: usize, mut check: impl FnMut(&Lockstep)) {
    for _ in 0..steps {
        m.advance(STEP_NS, 100_000).unwrap();
        assert_eq!(m.violation(), None);
        check(m);
    }
}

fn set(cpus: &[usize]) -> CpuSet {
    cpus.iter().copied().collect()
}

#[test]
fn a_pinned_domain_never_runs_outside_its_hard_affinity_under_contention() {
    for scheduler in SCHEDULERS {
        let mut m = machine(scheduler, 4, 1, Granularity::Cpu);
        let pinned = create(&mut m, 1);
        m.system
            .domain_set_affinity(pinned, set(&[2]), CpuSet::new(), &m.platform)
            .unwrap();
        let others: Vec<DomainId> = (0..4).map(|_| create(&mut m, 1)).collect();
        wake_all(&mut m, pinned);
        for &d in &others {
            wake_all(&mut m, d);
        }
        let mut ran = false;
        run_checking(&mut m, 40, |m| {
            let on = cpus_of(m, pinned);
            assert!(
                on.is_subset(&set(&[2])),
                "{scheduler}: pinned domain on {on}"
            );
            ran |= !on.is_empty();
        });
        assert!(ran, "{scheduler}: the pinned domain never ran");
    }
}

#[test]
fn a_new_hard_affinity_moves_a_running_domain_at_once() {
    for scheduler in SCHEDULERS {
        let mut m = machine(scheduler, 4, 1, Granularity::Cpu);
        let domain = create(&mut m, 1);
        m.system
            .domain_set_affinity(domain, set(&[0]), CpuSet::new(), &m.platform)
            .unwrap();
        wake_all(&mut m, domain);
        m.advance(STEP_NS, 100_000).unwrap();
        assert_eq!(cpus_of(&m, domain), set(&[0]), "{scheduler}");
        m.system
            .domain_set_affinity(domain, set(&[3]), CpuSet::new(), &m.platform)
            .unwrap();
        m.run(10_000).unwrap();
        m.advance(STEP_NS, 100_000).unwrap();
        assert_eq!(cpus_of(&m, domain), set(&[3]), "{scheduler}");
        assert_eq!(
            m.system.domain_affinity(domain),
            Some((set(&[3]), CpuSet::first_n(4)))
        );
    }
}

#[test]
fn soft_affinity_is_preferred_when_the_cpus_are_free() {
    // rt, like Xen's RTDS, tickles the unit's own idle resource first and
    // uses soft affinity only to break ties.
    for scheduler in ["credit", "credit2", "null"] {
        let mut m = machine(scheduler, 4, 1, Granularity::Cpu);
        let domain = create(&mut m, 1);
        m.system
            .domain_set_affinity(domain, CpuSet::first_n(4), set(&[1]), &m.platform)
            .unwrap();
        wake_all(&mut m, domain);
        run_checking(&mut m, 10, |m| {
            assert_eq!(cpus_of(m, domain), set(&[1]), "{scheduler}");
        });
    }
}

#[test]
fn a_core_unit_pinned_to_one_thread_runs_on_that_core() {
    for scheduler in ["credit", "credit2", "null"] {
        let mut m = machine(scheduler, 2, 2, Granularity::Core);
        let domain = create(&mut m, 2);
        // CPU 3 is the second thread of core 1: the unit runs on core 1.
        m.system
            .domain_set_affinity(domain, set(&[3]), CpuSet::new(), &m.platform)
            .unwrap();
        let other = create(&mut m, 2);
        wake_all(&mut m, domain);
        wake_all(&mut m, other);
        let mut ran = false;
        run_checking(&mut m, 20, |m| {
            let on = cpus_of(m, domain);
            assert!(on.is_subset(&set(&[2, 3])), "{scheduler}: on {on}");
            ran |= !on.is_empty();
        });
        assert!(ran, "{scheduler}");
    }
}

#[test]
fn an_affinity_outside_the_pool_is_refused_and_changes_nothing() {
    let mut m = machine("credit2", 4, 1, Granularity::Cpu);
    m.system
        .pool_remove_cpus(PoolId(0), set(&[3]), &m.platform)
        .unwrap();
    let domain = create(&mut m, 1);
    let before = m.system.domain_affinity(domain);
    let error = m
        .system
        .domain_set_affinity(domain, set(&[3]), CpuSet::new(), &m.platform)
        .unwrap_err();
    assert_eq!(
        error,
        SystemError::AffinityOutsidePool {
            domain,
            pool: PoolId(0)
        }
    );
    assert!(
        error.to_string().contains("no CPU of its cpupool 0"),
        "{error}"
    );
    assert_eq!(m.system.domain_affinity(domain), before);
}

#[test]
fn a_move_to_a_pool_outside_the_affinity_breaks_it_and_the_domain_runs() {
    let mut m = machine("credit2", 4, 1, Granularity::Cpu);
    m.system
        .pool_remove_cpus(PoolId(0), set(&[3]), &m.platform)
        .unwrap();
    let other = m
        .system
        .pool_create("credit2", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    m.system
        .pool_add_cpus(other, set(&[3]), &m.platform)
        .unwrap();
    let domain = create(&mut m, 1);
    m.system
        .domain_set_affinity(domain, set(&[1]), CpuSet::new(), &m.platform)
        .unwrap();
    wake_all(&mut m, domain);
    m.system.domain_move(domain, other, &m.platform).unwrap();
    m.run(10_000).unwrap();
    m.advance(STEP_NS, 100_000).unwrap();
    assert_eq!(cpus_of(&m, domain), set(&[3]));
    assert_eq!(
        m.system.domain_affinity(domain),
        Some((CpuSet::first_n(4), CpuSet::first_n(4)))
    );
    assert!(m.system.diagnostics().any(|d| d
        == Diagnostic::AffinityBroken {
            domain,
            pool: other
        }));
}

#[test]
fn a_move_keeps_an_affinity_the_new_pool_can_honour() {
    let mut m = machine("credit2", 4, 1, Granularity::Cpu);
    m.system
        .pool_remove_cpus(PoolId(0), set(&[2, 3]), &m.platform)
        .unwrap();
    let other = m
        .system
        .pool_create("credit", Granularity::Cpu, Placement::Fixed)
        .unwrap();
    m.system
        .pool_add_cpus(other, set(&[2, 3]), &m.platform)
        .unwrap();
    let domain = create(&mut m, 1);
    m.system
        .domain_set_affinity(domain, set(&[0, 3]), CpuSet::new(), &m.platform)
        .unwrap();
    wake_all(&mut m, domain);
    m.system.domain_move(domain, other, &m.platform).unwrap();
    m.run(10_000).unwrap();
    run_checking(&mut m, 5, |m| assert_eq!(cpus_of(m, domain), set(&[3])));
    assert_eq!(
        m.system.domain_affinity(domain).map(|a| a.0),
        Some(set(&[0, 3]))
    );
}

#[test]
fn null_gives_a_destroyed_domains_cpus_to_its_waiting_units_at_once() {
    // Two CPUs, both held by "resident"; "waiter" queues. As in Xen's null,
    // a paused unit keeps its CPU; its destruction hands the CPU to the
    // queue, and that CPU (idle, with no timer under null) must be kicked
    // to run the waiter: qemu-virt-null-queue found it never was.
    let mut m = machine("null", 2, 1, Granularity::Cpu);
    let resident = create(&mut m, 2);
    wake_all(&mut m, resident);
    let waiter = create(&mut m, 2);
    wake_all(&mut m, waiter);
    run_checking(&mut m, 5, |m| {
        assert_eq!(cpus_of(m, resident), set(&[0, 1]));
        assert!(cpus_of(m, waiter).is_empty());
    });
    m.system.domain_pause(resident, &m.platform).unwrap();
    run_checking(&mut m, 5, |m| {
        assert!(cpus_of(m, resident).is_empty(), "paused");
        assert!(cpus_of(m, waiter).is_empty(), "a paused unit keeps its CPU");
    });
    m.system.domain_destroy(resident, &m.platform).unwrap();
    m.run(10_000).unwrap();
    assert_eq!(cpus_of(&m, waiter), set(&[0, 1]));
}
