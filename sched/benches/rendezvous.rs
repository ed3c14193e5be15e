//! Cost of one full synchronised-switch decision: the resource's timer fires,
//! the scheduler picks the next unit, the rendezvous opens, both threads of the
//! core leave their old unit, meet, and load the new one. Measured with 8, 64,
//! 256 and 1024 runnable units in the pool (each unit a different domain, so
//! every decision is a real domain change), on the lockstep machine with the
//! FIFO reference scheduler. Also the raw barrier (begin + 2 arrivals).
//!
//! `cargo bench -p sched --bench rendezvous`

use criterion::{BenchmarkId, Criterion, criterion_main};
use sched::fifo::{FIFO_SLICE_NS, FifoScheduler};
use sched::lockstep::Lockstep;
use sched::rendezvous::{RendezvousTable, Ticket};
use sched::{
    CpuSet, Granularity, Placement, ResourceId, SchedError, SchedParams, Scheduler, System,
    SystemConfig, Topology,
};
use std::hint::black_box;

fn fifo(name: &str) -> Result<Box<dyn Scheduler>, SchedError> {
    match name {
        "fifo" => Ok(Box::new(FifoScheduler::new())),
        _ => Err(SchedError::UnknownScheduler),
    }
}

fn machine(units: u32) -> Lockstep {
    let system = System::new(Topology::uniform(1, 1, 1, 2), SystemConfig::default(), fifo);
    let mut m = Lockstep::new(system);
    let pool = m
        .system
        .boot_pool0("fifo", Granularity::Core, Placement::Fixed, &m.platform)
        .expect("boot");
    for _ in 0..units {
        let d = m
            .system
            .domain_create(pool, 2, SchedParams::default(), &m.platform)
            .expect("domain");
        for v in m.system.domain_vcpus(d).expect("vcpus").to_vec() {
            m.system.vcpu_wake(v, &m.platform).expect("wake");
        }
    }
    m.run(1_000_000).expect("settles");
    m
}

fn decision(c: &mut Criterion) {
    let mut group = c.benchmark_group("rendezvous_decision");
    for units in [8u32, 64, 256, 1024] {
        let mut m = machine(units);
        group.bench_with_input(BenchmarkId::from_parameter(units), &units, |b, _| {
            b.iter(|| {
                let before = m.rendezvous_completed();
                m.advance(FIFO_SLICE_NS, 10_000).expect("settles");
                assert!(
                    m.rendezvous_completed() > before,
                    "each tick is a rendezvous"
                );
            });
        });
    }
    group.finish();
}

fn barrier(c: &mut Criterion) {
    let table = RendezvousTable::new(2);
    let expected: CpuSet = [0, 1].into_iter().collect();
    let mut generation = 0u32;
    c.bench_function("rendezvous_barrier_2_cpus", |b| {
        b.iter(|| {
            generation = generation.wrapping_add(1).max(1);
            table.begin(ResourceId(0), generation, 2);
            for cpu in 0..2 {
                let ticket = Ticket {
                    resource: ResourceId(0),
                    generation,
                    cpu,
                    expected,
                    timeout_ns: 1,
                };
                black_box(table.arrive(&ticket));
            }
        });
    });
}

mod group {
    #![allow(missing_docs)] // criterion_group! generates an undocumented function.
    use super::{barrier, decision};
    criterion::criterion_group!(benches, decision, barrier);
}
criterion_main!(group::benches);
