//! Property tests of the framework: random sequences of pool create/destroy,
//! CPU add/remove/offline/online, domain create/move/destroy and vCPU
//! wake/block/pause/unpause/yield, at every granularity and placement, over
//! every scheduler `schedulers::create` knows plus the FIFO reference.
//!
//! After every step of every CPU (the lockstep machine checks after each
//! switch, rendezvous and decision): every CPU in exactly one pool or free,
//! resources partition their pools, no unit on two resources, no vCPU on two
//! CPUs, no two domains on one resource, no vCPU lost. At the end, a drain
//! phase checks that no runnable vCPU starves.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

use proptest::prelude::*;
use sched::fifo::FifoScheduler;
use sched::lockstep::Lockstep;
use sched::scheduler::SCHEDULER_NAMES;
use sched::{
    CpuContext, CpuSet, DomainId, Granularity, PartOf, Placement, PoolId, SchedError, SchedParams,
    Scheduler, System, SystemConfig, SystemError, Topology, VcpuId,
};

thread_local! {
    /// Whether allocations on this thread are being counted.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations seen while counting.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting the calls made while [`COUNTING`] is set.
struct CountingAllocator;

impl CountingAllocator {
    fn note() {
        let _ = COUNTING.try_with(|counting| {
            if counting.get() {
                let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            }
        });
    }
}

// SAFETY: every method forwards to `std::alloc::System` with the caller's
// arguments unchanged, so its guarantees carry over; counting touches only
// const-initialised thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note();
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::note();
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. `System`.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. `System`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocations made by `f` on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(Cell::get)
}

fn factory(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        other => sched::schedulers::create(other),
    }
}

/// Schedulers under test: the FIFO reference and every production one that exists yet.
fn scheduler_names() -> Vec<&'static str> {
    let mut names = vec!["fifo"];
    for name in SCHEDULER_NAMES.split(", ") {
        match sched::schedulers::create(name) {
            Ok(_) => names.push(name),
            Err(_) => eprintln!("scheduler {name} not available yet; skipped"),
        }
    }
    names
}

const TICK_NS: u64 = 2_000_000;
const EVENTS: usize = 200_000;

#[derive(Clone, Debug)]
enum Op {
    CreatePool {
        granularity: usize,
        spread: bool,
    },
    DestroyPool {
        pool: usize,
    },
    AddCpus {
        pool: usize,
        cpu: usize,
        whole: bool,
    },
    RemoveCpus {
        pool: usize,
        cpu: usize,
        whole: bool,
    },
    Offline {
        cpu: usize,
    },
    Online {
        cpu: usize,
    },
    CreateDomain {
        pool: usize,
        vcpus: u32,
    },
    MoveDomain {
        domain: usize,
        pool: usize,
    },
    DestroyDomain {
        domain: usize,
    },
    Wake {
        vcpu: usize,
    },
    Block {
        vcpu: usize,
    },
    Pause {
        vcpu: usize,
    },
    Unpause {
        vcpu: usize,
    },
    Yield {
        vcpu: usize,
    },
    /// The CPU stops handling anything until after the next tick (stuck with
    /// interrupts off), so rendezvous that need it time out.
    Stall {
        cpu: usize,
        /// Stall half-way through its next context switch instead of now.
        mid_switch: bool,
    },
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..4usize, any::<bool>()).prop_map(|(granularity, spread)| Op::CreatePool { granularity, spread }),
        1 => (0..4usize).prop_map(|pool| Op::DestroyPool { pool }),
        1 => (0..4usize, 0..8usize, any::<bool>()).prop_map(|(pool, cpu, whole)| Op::AddCpus { pool, cpu, whole }),
        1 => (0..4usize, 0..8usize, any::<bool>()).prop_map(|(pool, cpu, whole)| Op::RemoveCpus { pool, cpu, whole }),
        1 => (0..8usize).prop_map(|cpu| Op::Offline { cpu }),
        1 => (0..8usize).prop_map(|cpu| Op::Online { cpu }),
        2 => (0..4usize, 1..5u32).prop_map(|(pool, vcpus)| Op::CreateDomain { pool, vcpus }),
        1 => (0..8usize, 0..4usize).prop_map(|(domain, pool)| Op::MoveDomain { domain, pool }),
        1 => (0..8usize).prop_map(|domain| Op::DestroyDomain { domain }),
        3 => (0..32usize).prop_map(|vcpu| Op::Wake { vcpu }),
        1 => (0..32usize).prop_map(|vcpu| Op::Block { vcpu }),
        1 => (0..32usize).prop_map(|vcpu| Op::Pause { vcpu }),
        1 => (0..32usize).prop_map(|vcpu| Op::Unpause { vcpu }),
        1 => (0..32usize).prop_map(|vcpu| Op::Yield { vcpu }),
        1 => (0..8usize, any::<bool>()).prop_map(|(cpu, mid_switch)| Op::Stall { cpu, mid_switch }),
        4 => Just(Op::Tick),
    ]
}

struct World {
    m: Lockstep,
    /// vCPU operations run on only their part, as CPU events do with
    /// `Lockstep::partitioned` (the per-pool locks' split).
    partitioned: bool,
    scheduler: &'static str,
    stalled: Vec<usize>,
    ever_stalled: bool,
}

impl World {
    fn new(
        scheduler: &'static str,
        granularity: Granularity,
        placement: Placement,
        interleaving: Option<u64>,
    ) -> Self {
        let config = SystemConfig {
            rendezvous_timeout_ns: 100_000,
            retry_delay_ns: 50_000,
        };
        // 1 socket, 2 clusters of 2 cores of 2 threads.
        let system = System::new(Topology::uniform(1, 2, 2, 2), config, factory);
        let mut m = Lockstep::new(system);
        m.check_every_step = true;
        // With a seed: switches take time and events arrive in shuffled order.
        m.split_switches = interleaving.is_some();
        m.shuffle_seed = interleaving;
        if m.system
            .boot_pool0(scheduler, granularity, placement, &m.platform)
            .is_err()
        {
            // arinc653 takes a single resource per pool: boot on the FIFO
            // scheduler and give the scheduler under test one resource.
            m.system
                .boot_pool0("fifo", granularity, placement, &m.platform)
                .expect("pool 0 boots");
            let own = m
                .system
                .pool_create(scheduler, granularity, placement)
                .expect("scheduler exists");
            let cpus = m.system.topology().siblings(7, granularity);
            if m.system
                .pool_remove_cpus(PoolId(0), cpus, &m.platform)
                .is_ok()
            {
                m.system
                    .pool_add_cpus(own, cpus, &m.platform)
                    .expect("one resource fits any scheduler");
            }
        }
        m.run(EVENTS).expect("boot settles");
        Self {
            m,
            partitioned: false,
            scheduler,
            stalled: Vec::new(),
            ever_stalled: false,
        }
    }

    fn vcpu(&self, index: usize) -> Option<VcpuId> {
        let vcpus: Vec<VcpuId> = self
            .m
            .system
            .domains()
            .flat_map(|d| self.m.system.domain_vcpus(d).unwrap_or(&[]).to_vec())
            .collect();
        (!vcpus.is_empty()).then(|| vcpus[index % vcpus.len()])
    }

    fn apply(&mut self, op: &Op) {
        let pools: Vec<PoolId> = self.m.system.pools().collect();
        let domains: Vec<DomainId> = self.m.system.domains().collect();
        let vcpus: Vec<VcpuId> = (0..32).filter_map(|i| self.vcpu(i)).collect();
        let pick = |list: &[PoolId], i: usize| (!list.is_empty()).then(|| list[i % list.len()]);
        let pool_at = |i: usize| pick(&pools, i);
        let domain_at = |i: usize| (!domains.is_empty()).then(|| domains[i % domains.len()]);
        let vcpu_at = |i: usize| vcpus.get(i).copied();
        let p = &self.m.platform;
        let s = &mut self.m.system;
        let partitioned = self.partitioned;
        // A vCPU's event on its own part only (partitioned), else on the
        // whole machine.
        let on_vcpu = |s: &mut System,
                       v: VcpuId,
                       f: &dyn Fn(&mut System) -> Result<(), SystemError>|
         -> Result<(), SystemError> {
            if partitioned {
                s.in_part(PartOf::Vcpu(v), |part| f(part))
            } else {
                f(s)
            }
        };
        // Errors are allowed (and must leave things consistent); panics are not.
        let _ = match *op {
            Op::CreatePool {
                granularity,
                spread,
            } => {
                let placement = if spread {
                    Placement::Spread
                } else {
                    Placement::Fixed
                };
                s.pool_create(self.scheduler, Granularity::ALL[granularity], placement)
                    .map(drop)
            }
            Op::DestroyPool { pool } => match pool_at(pool) {
                Some(pool) => s.pool_destroy(pool, p),
                None => Ok(()),
            },
            Op::AddCpus { pool, cpu, whole } => match pool_at(pool) {
                Some(pool) => {
                    let granularity = s
                        .pool_info(pool)
                        .map_or(Granularity::Cpu, |i| i.granularity);
                    let cpus = if whole {
                        s.topology()
                            .siblings(cpu, granularity)
                            .intersection(&s.free_cpus())
                    } else {
                        CpuSet::single(cpu)
                    };
                    s.pool_add_cpus(pool, cpus, p)
                }
                None => Ok(()),
            },
            Op::RemoveCpus { pool, cpu, whole } => match pool_at(pool) {
                Some(pool) => {
                    let info = s.pool_info(pool).expect("pool exists");
                    let cpus = if whole {
                        s.topology()
                            .siblings(cpu, info.granularity)
                            .intersection(&info.cpus)
                    } else {
                        CpuSet::single(cpu)
                    };
                    s.pool_remove_cpus(pool, cpus, p)
                }
                None => Ok(()),
            },
            Op::Offline { cpu } => s.cpu_offline(cpu, p),
            Op::Online { cpu } => s.cpu_online(cpu),
            Op::CreateDomain { pool, vcpus } => match pool_at(pool) {
                Some(pool) => s
                    .domain_create(pool, vcpus, SchedParams::default(), p)
                    .map(drop),
                None => Ok(()),
            },
            Op::MoveDomain { domain, pool } => match (domain_at(domain), pool_at(pool)) {
                (Some(d), Some(pool)) => s.domain_move(d, pool, p),
                _ => Ok(()),
            },
            Op::DestroyDomain { domain } => match domain_at(domain) {
                Some(d) => s.domain_destroy(d, p),
                None => Ok(()),
            },
            Op::Wake { vcpu } => {
                vcpu_at(vcpu).map_or(Ok(()), |v| on_vcpu(s, v, &|s| s.vcpu_wake(v, p)))
            }
            Op::Block { vcpu } => {
                vcpu_at(vcpu).map_or(Ok(()), |v| on_vcpu(s, v, &|s| s.vcpu_block(v, p)))
            }
            Op::Pause { vcpu } => {
                vcpu_at(vcpu).map_or(Ok(()), |v| on_vcpu(s, v, &|s| s.vcpu_pause(v, p).map(drop)))
            }
            Op::Unpause { vcpu } => {
                vcpu_at(vcpu).map_or(Ok(()), |v| on_vcpu(s, v, &|s| s.vcpu_unpause(v, p)))
            }
            Op::Yield { vcpu } => {
                vcpu_at(vcpu).map_or(Ok(()), |v| on_vcpu(s, v, &|s| s.vcpu_yield(v, p)))
            }
            Op::Stall { cpu, mid_switch } => {
                if mid_switch {
                    self.m.stall_at_next_switch(cpu);
                } else {
                    self.m.stall(cpu);
                }
                self.stalled.push(cpu);
                self.ever_stalled = true;
                Ok(())
            }
            Op::Tick => Ok(()),
        };
        if matches!(op, Op::Tick) {
            self.m.advance(TICK_NS, EVENTS).expect("tick settles");
            for cpu in self.stalled.drain(..) {
                self.m.unstall(cpu);
            }
            self.m.run(EVENTS).expect("stalled CPUs catch up");
        } else {
            self.m.run(EVENTS).expect("operation settles");
        }
    }

    fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.m.violation(), None, "during {:?}", after);
        let checked = self.m.system.check_invariants();
        prop_assert!(checked.is_ok(), "after {:?}: {:?}", after, checked);
        prop_assert!(
            self.ever_stalled || self.m.timeouts() == 0,
            "no CPU is stuck, so no wait may time out"
        );
        Ok(())
    }

    /// Unblocks and unpauses everything, runs for a while, and checks that every
    /// vCPU of a pool with CPUs ran.
    fn drain_and_check_starvation(&mut self, ticks: usize) -> Result<(), TestCaseError> {
        for cpu in self.stalled.drain(..) {
            self.m.unstall(cpu);
        }
        let vcpus: Vec<VcpuId> = self
            .m
            .system
            .domains()
            .flat_map(|d| self.m.system.domain_vcpus(d).unwrap_or(&[]).to_vec())
            .collect();
        for &v in &vcpus {
            while self.m.system.vcpu_unpause(v, &self.m.platform).is_ok() {}
            self.m
                .system
                .vcpu_wake(v, &self.m.platform)
                .expect("vcpu exists");
        }
        self.m.run(EVENTS).expect("settles");
        let mut ran = vec![false; vcpus.len()];
        for _ in 0..ticks {
            self.m.advance(TICK_NS, EVENTS).expect("tick settles");
            for cpu in 0..self.m.system.topology().len() {
                if let Some(CpuContext::Vcpu(v)) = self.m.system.cpu_context(cpu)
                    && let Some(i) = vcpus.iter().position(|&x| x == v)
                {
                    ran[i] = true;
                }
            }
            self.check(&Op::Tick)?;
        }
        for (i, &v) in vcpus.iter().enumerate() {
            let info = self.m.system.vcpu_info(v).expect("vcpu exists");
            let pool = self
                .m
                .system
                .domain_pool(info.domain)
                .expect("domain has a pool");
            let has_cpus = self
                .m
                .system
                .pool_info(pool)
                .is_some_and(|p| !p.cpus.is_empty());
            prop_assert!(
                !has_cpus || ran[i],
                "vcpu {:?} of {:?} starved for {} ticks",
                v,
                info.domain,
                ticks
            );
        }
        Ok(())
    }
}

/// Schedulers that promise every runnable unit runs eventually (null parks
/// units without a CPU and arinc653 runs only what its schedule names, both by
/// design).
fn promises_progress(name: &str) -> bool {
    matches!(name, "fifo" | "credit" | "credit2" | "rt")
}

fn run_sequence(
    scheduler: &'static str,
    granularity: Granularity,
    spread: bool,
    interleaving: Option<u64>,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let placement = if spread {
        Placement::Spread
    } else {
        Placement::Fixed
    };
    let mut world = World::new(scheduler, granularity, placement, interleaving);
    // Two running domains to start with, so every sequence has work to disturb.
    world.apply(&Op::CreateDomain { pool: 0, vcpus: 2 });
    world.apply(&Op::CreateDomain { pool: 0, vcpus: 3 });
    for vcpu in 0..5 {
        world.apply(&Op::Wake { vcpu });
    }
    world.check(&Op::Tick)?;
    for op in ops {
        world.apply(op);
        world
            .check(op)
            .map_err(|e| TestCaseError::fail(format!("{scheduler}: {e}")))?;
    }
    if promises_progress(scheduler) {
        world
            .drain_and_check_starvation(400)
            .map_err(|e| TestCaseError::fail(format!("{scheduler}: {e}")))?;
    }
    Ok(())
}

/// What a run shows from outside: counts of switches and kicks, what each
/// CPU holds and its timer, where each vCPU runs, and the diagnostics.
fn fingerprint(world: &World) -> String {
    let m = &world.m;
    let s = &m.system;
    let cpus: Vec<_> = (0..s.topology().len())
        .map(|c| (s.cpu_context(c), m.platform.timer(c), s.pool_of_cpu(c)))
        .collect();
    let vcpus: Vec<_> = s
        .domains()
        .flat_map(|d| s.domain_vcpus(d).unwrap_or(&[]).to_vec())
        .map(|v| (v, s.vcpu_running_on(v), s.vcpu_info(v)))
        .collect();
    let diagnostics: Vec<_> = s.diagnostics().collect();
    format!(
        "switches={} kicks={} timeouts={} cpus={cpus:?} vcpus={vcpus:?} diagnostics={}:{diagnostics:?}",
        m.platform.switches(),
        m.platform.kicks(),
        m.timeouts(),
        s.diagnostics_total(),
    )
}

/// The same sequence on the whole machine and through its parts (every CPU
/// and vCPU event on only the part the hypervisor's per-pool locks give
/// it) must look the same after every operation: no event needs state
/// outside its part. Returns the most parts the partitioned run was in.
fn run_partitioned_beside_whole(
    scheduler: &'static str,
    granularity: Granularity,
    spread: bool,
    interleaving: Option<u64>,
    ops: &[Op],
) -> Result<usize, TestCaseError> {
    let placement = if spread {
        Placement::Spread
    } else {
        Placement::Fixed
    };
    let mut whole = World::new(scheduler, granularity, placement, interleaving);
    let mut parted = World::new(scheduler, granularity, placement, interleaving);
    parted.partitioned = true;
    parted.m.partitioned = true;
    let start = [
        Op::CreatePool {
            granularity: Granularity::ALL
                .iter()
                .position(|&g| g == granularity)
                .unwrap_or(0),
            spread,
        },
        Op::RemoveCpus {
            pool: 0,
            cpu: 6,
            whole: true,
        },
        Op::AddCpus {
            pool: 1,
            cpu: 6,
            whole: true,
        },
        Op::CreateDomain { pool: 0, vcpus: 2 },
        Op::CreateDomain { pool: 1, vcpus: 2 },
        Op::CreateDomain { pool: 0, vcpus: 3 },
    ];
    let wakes = (0..7).map(|vcpu| Op::Wake { vcpu });
    let mut most_parts = 0;
    for op in start
        .iter()
        .cloned()
        .chain(wakes)
        .chain(ops.iter().cloned())
    {
        whole.apply(&op);
        parted.apply(&op);
        prop_assert_eq!(
            fingerprint(&whole),
            fingerprint(&parted),
            "{}: after {:?}",
            scheduler,
            op
        );
        most_parts = most_parts.max(parted.m.system.part_count());
    }
    Ok(most_parts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 500, ..ProptestConfig::default() })]

    #[test]
    fn events_on_their_part_match_the_whole_machine(
        granularity in 0..4usize,
        spread in any::<bool>(),
        interleaving in proptest::option::of(1..u64::MAX),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        for name in scheduler_names() {
            let parts = run_partitioned_beside_whole(name, Granularity::ALL[granularity], spread, interleaving, &ops)?;
            // The free CPUs' part and one per pool with domains: a run that
            // never split is no test of the split.
            prop_assert!(parts >= 3, "{}: never more than {} parts", name, parts);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_every_invariant(
        granularity in 0..4usize,
        spread in any::<bool>(),
        interleaving in proptest::option::of(1..u64::MAX),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        for name in scheduler_names() {
            run_sequence(name, Granularity::ALL[granularity], spread, interleaving, &ops)?;
        }
    }
}

#[test]
fn every_scheduler_name_builds_a_pool() {
    for name in scheduler_names() {
        let world = World::new(name, Granularity::Core, Placement::Fixed, None);
        let schedulers: Vec<&str> = world
            .m
            .system
            .pools()
            .filter_map(|p| world.m.system.pool_info(p))
            .map(|i| i.scheduler)
            .collect();
        assert!(schedulers.contains(&name), "{name}: {schedulers:?}");
        world
            .m
            .system
            .check_invariants()
            .expect("consistent after boot");
    }
}

/// The framework's hot path (per-CPU events, rendezvous, vCPU events) does not
/// allocate, with every scheduler, at core granularity in both placements.
#[test]
fn event_handlers_do_not_allocate() {
    for name in scheduler_names() {
        for placement in [Placement::Fixed, Placement::Spread] {
            let mut world = World::new(name, Granularity::Core, placement, None);
            world.m.check_every_step = false;
            // More domains than cores, so cores switch between domains.
            for vcpus in [2, 3, 1, 2, 2, 4, 2] {
                world.apply(&Op::CreateDomain { pool: 0, vcpus });
            }
            for vcpu in 0..32 {
                world.apply(&Op::Wake { vcpu });
            }
            // Warm up: every lazily sized table reaches its size.
            for _ in 0..50 {
                world.m.advance(TICK_NS, EVENTS).expect("settles");
            }
            let vcpus: Vec<VcpuId> = (0..21).filter_map(|i| world.vcpu(i)).collect();
            let before = world.m.rendezvous_completed();
            let m = &mut world.m;
            let count = allocations_in(|| {
                for round in 0..40 {
                    let v = vcpus[round % vcpus.len()];
                    let p = &m.platform;
                    match round % 5 {
                        0 => drop(m.system.vcpu_block(v, p)),
                        1 => drop(m.system.vcpu_wake(v, p)),
                        2 => drop(m.system.vcpu_pause(v, p)),
                        3 => drop(m.system.vcpu_unpause(v, p)),
                        _ => drop(m.system.vcpu_yield(v, p)),
                    }
                    m.advance(TICK_NS, EVENTS).expect("settles");
                }
            });
            assert_eq!(
                count, 0,
                "{name}/{placement}: the scheduling hot path allocated"
            );
            // null pins units to CPUs and arinc653 follows its fixed schedule: they
            // need not switch here.
            assert!(
                !promises_progress(name) || m.rendezvous_completed() > before,
                "{name}/{placement}: no rendezvous happened"
            );
        }
    }
}
