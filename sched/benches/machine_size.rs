//! Does a scheduling decision cost more on a bigger machine? The same
//! workload per core (a core-granularity credit2 pool per 2-thread core, two
//! 2-vCPU CPU-bound domains in each, so every slice ends in a 2-CPU
//! synchronised switch) on machines of 8, 64 and 160 CPUs (160: a
//! two-socket Ampere Altra Max M128-30 host's order of magnitude), run on
//! the lockstep machine for one credit2 slice; the figure is the time spent
//! inside the `System` per event it handled (kick, timer, switch done,
//! rendezvous done: `Lockstep::system_work`), leaving out the lockstep's own
//! bookkeeping, which scans every CPU. With a cost independent of the
//! machine, the per-event figures are flat.
//! An event runs on its pool's part of the machine in the hypervisor (its
//! pool's lock), and this is also the time a CPU holds that lock per event.
//!
//! `cargo bench -p sched --bench machine_size`

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sched::lockstep::Lockstep;
use sched::schedulers::create;
use sched::{CpuSet, Granularity, Placement, SchedParams, System, SystemConfig, Topology};

/// Machine sizes, in CPUs (2 threads per core).
const CPU_COUNTS: [u32; 3] = [8, 64, 160];
/// One credit2 slice at its default ratelimit and more: several
/// decisions per resource.
const ADVANCE_NS: u64 = 10_000_000;

/// ns since the first call: the lockstep's clock for the `System`'s work.
fn clock_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A machine of `cpus` CPUs, a pool per core, all domains running.
fn machine(cpus: u32) -> Lockstep {
    let system = System::new(
        Topology::uniform(1, 1, cpus / 2, 2),
        SystemConfig::default(),
        create,
    );
    let mut m = Lockstep::new(system);
    // Pool 0 holds the first core; every other core gets its own pool.
    let first = m
        .system
        .boot_pool0("credit2", Granularity::Core, Placement::Fixed, &m.platform)
        .expect("boot");
    m.system
        .pool_remove_cpus(first, (2..cpus as usize).collect::<CpuSet>(), &m.platform)
        .expect("pool 0 keeps core 0");
    let mut pools = vec![first];
    for core in 1..cpus as usize / 2 {
        let pool = m
            .system
            .pool_create("credit2", Granularity::Core, Placement::Fixed)
            .expect("pool");
        m.system
            .pool_add_cpus(
                pool,
                [core * 2, core * 2 + 1].into_iter().collect(),
                &m.platform,
            )
            .expect("core");
        pools.push(pool);
    }
    for pool in pools {
        for _ in 0..2 {
            let d = m
                .system
                .domain_create(pool, 2, SchedParams::default(), &m.platform)
                .expect("domain");
            for v in m.system.domain_vcpus(d).expect("vcpus").to_vec() {
                m.system.vcpu_wake(v, &m.platform).expect("wake");
            }
        }
    }
    m.run(10_000_000).expect("settles");
    m.system_clock = Some(clock_ns);
    m
}

fn per_event(c: &mut Criterion) {
    let mut group = c.benchmark_group("event_cost_by_machine_size");
    for cpus in CPU_COUNTS {
        let mut m = machine(cpus);
        group.bench_with_input(BenchmarkId::from_parameter(cpus), &cpus, |b, _| {
            // Timed per event: machines of different sizes handle
            // different numbers of events per slice.
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let (calls, ns) = m.system_work();
                    m.advance(ADVANCE_NS, 10_000_000).expect("settles");
                    let (calls_after, ns_after) = m.system_work();
                    assert!(calls_after > calls, "every pool switches");
                    total += Duration::from_nanos((ns_after - ns) / (calls_after - calls));
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, per_event);
criterion_main!(benches);
