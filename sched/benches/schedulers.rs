//! Cost of the two hottest scheduler operations, `do_schedule` and `wake`, for
//! every scheduler `schedulers::create` knows, with 8, 64, 256 and 1024 units in a
//! pool of 8 one-CPU resources (arinc653, one resource per pool: one resource of
//! 8 CPUs). Figures and the command are recorded in `BENCHMARKS.md`.
//!
//! Run: `cargo bench -p sched --bench schedulers` (about two minutes).

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sched::scheduler::SCHEDULER_NAMES;
use sched::schedulers::create;
use sched::{
    CpuSet, DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, Time, UnitId,
    UnitInfo, WakeReason,
};

const RESOURCES: usize = 8;
const UNIT_COUNTS: [u32; 4] = [8, 64, 256, 1024];
const US: Time = 1_000;

/// A pool of `units` units, 4 per domain, all with default parameters (rt:
/// 4 ms every 10 ms, extratime), wide affinity, none awake yet.
fn pool(name: &str, units: u32, params: SchedParams) -> (Box<dyn Scheduler>, Vec<ResourceId>) {
    let mut sched = create(name).expect("a scheduler from SCHEDULER_NAMES");
    let resources: Vec<ResourceId> = if name == "arinc653" {
        let info = ResourceInfo {
            id: ResourceId(0),
            cpus: CpuSet::first_n(RESOURCES),
            socket: 0,
            cluster: 0,
            capacity: None,
            core_cpus: sched::CpuSet::new(),
        };
        sched
            .add_resource(info)
            .expect("arinc653 takes one resource");
        // Eight 1 ms windows for the first eight units (domains 0 and 1).
        let windows: Vec<String> = (0..8)
            .map(|u| format!("{}:{}:1000", u / 4, u % 4))
            .collect();
        sched
            .set_pool_param("schedule", &windows.join(";"))
            .expect("valid schedule");
        vec![ResourceId(0)]
    } else {
        for r in 0..RESOURCES {
            let info = ResourceInfo {
                id: ResourceId(r),
                cpus: CpuSet::single(r),
                socket: 0,
                cluster: (r / 4) as u32,
                capacity: None,
                core_cpus: sched::CpuSet::new(),
            };
            sched.add_resource(info).expect("add_resource");
        }
        (0..RESOURCES).map(ResourceId).collect()
    };
    for u in 0..units {
        let info = UnitInfo {
            id: UnitId(u),
            domain: DomainId(u / 4),
            index_in_domain: u % 4,
            vcpus: 1,
            params,
            hard_affinity: CpuSet::first_n(RESOURCES),
            soft_affinity: CpuSet::single(u as usize % RESOURCES),
        };
        sched.insert_unit(&info, 0).expect("insert_unit");
    }
    (sched, resources)
}

/// Every unit awake and every resource running something.
fn busy_pool(
    name: &str,
    units: u32,
    params: SchedParams,
) -> (Box<dyn Scheduler>, Vec<ResourceId>, Time) {
    let (mut sched, resources) = pool(name, units, params);
    let now = 1;
    for u in 0..units {
        sched.wake(UnitId(u), now, WakeReason::New);
    }
    for &r in &resources {
        sched.do_schedule(r, now);
    }
    (sched, resources, now)
}

/// One `do_schedule` on the next resource, 50 us after the previous decision:
/// the previous unit is accounted and re-queued, the next one picked.
fn bench_do_schedule(c: &mut Criterion, names: &[&str]) {
    let mut group = c.benchmark_group("do_schedule");
    for &name in names {
        for units in UNIT_COUNTS {
            let (mut sched, resources, mut now) = busy_pool(name, units, SchedParams::default());
            let mut next = 0;
            group.bench_function(BenchmarkId::new(name, units), |b| {
                b.iter(|| {
                    now += 50 * US;
                    next = (next + 1) % resources.len();
                    black_box(sched.do_schedule(resources[next], now))
                })
            });
        }
    }
    group.finish();
}

/// rt only: `do_schedule` with 10 s periods, so that no replenishment falls in
/// the measurement and the figure is the EDF decision alone. (With the default
/// 10 ms periods every decision also does its share of the pool's
/// replenishments: `units x 50 us / 10 ms` of them, each O(log n).)
fn bench_rt_without_replenishment(c: &mut Criterion) {
    let mut group = c.benchmark_group("do_schedule_no_replenishment");
    let params = SchedParams {
        budget_ns: 4_000_000_000,
        period_ns: 10_000_000_000,
        ..SchedParams::default()
    };
    for units in UNIT_COUNTS {
        let (mut sched, resources, mut now) = busy_pool("rt", units, params);
        let mut next = 0;
        group.bench_function(BenchmarkId::new("rt", units), |b| {
            b.iter(|| {
                now += 50 * US;
                next = (next + 1) % resources.len();
                black_box(sched.do_schedule(resources[next], now))
            })
        });
    }
    group.finish();
}

/// One `wake` (with its tickle) of a sleeping unit in a pool where every other
/// unit is awake. Between timed batches, untimed: every resource reschedules
/// (clearing tickles) and a batch of not running units goes to sleep.
fn bench_wake(c: &mut Criterion, names: &[&str]) {
    let mut group = c.benchmark_group("wake");
    for &name in names {
        for units in UNIT_COUNTS {
            let (mut sched, resources, mut now) = busy_pool(name, units, SchedParams::default());
            let mut running = vec![false; units as usize];
            let mut cursor = 0u32;
            let batch = (units / 2).max(1) as usize;
            let mut sleepers: Vec<UnitId> = Vec::with_capacity(batch);
            group.bench_function(BenchmarkId::new(name, units), |b| {
                b.iter_custom(|iters| {
                    let mut elapsed = Duration::ZERO;
                    let mut done = 0;
                    while done < iters {
                        now += 50 * US;
                        running.fill(false);
                        for &r in &resources {
                            if let Some(u) = sched.do_schedule(r, now).unit {
                                running[u.0 as usize] = true;
                            }
                        }
                        sleepers.clear();
                        let idle_units = running.iter().filter(|&&r| !r).count();
                        let wanted = batch.min(idle_units).min((iters - done) as usize);
                        while sleepers.len() < wanted {
                            cursor = (cursor + 1) % units;
                            if !running[cursor as usize] {
                                sched.sleep(UnitId(cursor), now);
                                sleepers.push(UnitId(cursor));
                            }
                        }
                        if sleepers.is_empty() {
                            // Every unit runs (8 units on 8 resources): the closest
                            // thing is to wake a unit that just went to sleep running.
                            sched.sleep(UnitId(0), now);
                            sleepers.push(UnitId(0));
                        }
                        let start = Instant::now();
                        for &u in &sleepers {
                            black_box(sched.wake(u, now, WakeReason::Event));
                        }
                        elapsed += start.elapsed();
                        done += sleepers.len() as u64;
                    }
                    elapsed
                })
            });
        }
    }
    group.finish();
}

fn schedulers(c: &mut Criterion) {
    // Only the schedulers that exist in this build (a missing one is reported).
    let names: Vec<&str> = SCHEDULER_NAMES
        .split(", ")
        .filter(|name| match create(name) {
            Ok(_) => true,
            Err(SchedError::UnknownScheduler) => {
                eprintln!("note: scheduler {name} is not built yet; not benchmarked");
                false
            }
            Err(e) => panic!("create({name}): {e}"),
        })
        .collect();
    bench_do_schedule(c, &names);
    bench_wake(c, &names);
    bench_rt_without_replenishment(c);
}

criterion_group! {
    name = benches;
    // Short runs: 5 schedulers x 4 sizes x 2 operations stay within ~2 minutes.
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(900));
    targets = schedulers
}
criterion_main!(benches);
