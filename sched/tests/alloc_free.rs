//! Proof that the schedulers' hot path never allocates: a counting global
//! allocator watches `wake`, `sleep`, `yield_unit`, `do_schedule`,
//! `pick_resource`, `pick_sibling` and `migrate` of every scheduler
//! [`sched::schedulers::create`] knows, with 1024 units on 8 resources, after
//! setup (`create`, `add_resource`, `set_pool_param`, `insert_unit`).
//!
//! `sched` itself forbids `unsafe`; this test is its own crate and needs one
//! `unsafe impl GlobalAlloc` to count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sched::scheduler::SCHEDULER_NAMES;
use sched::schedulers::create;
use sched::{
    CpuSet, DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, Time, UnitId,
    UnitInfo, WakeReason,
};

thread_local! {
    /// Whether allocations on this thread are being counted (tests run on
    /// several threads; only the measuring thread's allocations matter).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations (alloc, alloc_zeroed, realloc) seen while counting.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting the calls made while [`COUNTING`] is set.
struct CountingAllocator;

impl CountingAllocator {
    fn note() {
        // `try_with`: the thread-locals may already be gone while a thread exits.
        let _ = COUNTING.try_with(|counting| {
            if counting.get() {
                let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
            }
        });
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees carry over; counting touches only
// const-initialised thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note();
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::note();
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Runs `f` and returns how many allocations it made on this thread.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (R, u64) {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    let result = f();
    COUNTING.with(|c| c.set(false));
    (result, ALLOCATIONS.with(Cell::get))
}

const UNITS: u32 = 1024;
const RESOURCES: usize = 8;
const UNITS_PER_DOMAIN: u32 = 4;
const US: Time = 1_000;

#[test]
fn the_counter_sees_allocations() {
    let (_, n) = allocations_in(|| std::hint::black_box(vec![1u8; 64]));
    assert!(n >= 1, "the counting allocator must notice a Vec");
    let (_, n) = allocations_in(|| std::hint::black_box(1 + 1));
    assert_eq!(n, 0);
}

/// Builds `name` with 8 one-CPU resources (arinc653, one per pool: one resource
/// of 8 CPUs and a 64-window schedule) and 1024 units, 4 per domain.
fn set_up(name: &str) -> Box<dyn Scheduler> {
    let mut sched = create(name).unwrap_or_else(|e| panic!("create({name}): {e}"));
    for r in 0..RESOURCES {
        let info = ResourceInfo {
            id: ResourceId(r),
            cpus: CpuSet::single(r),
            socket: 0,
            cluster: (r / 4) as u32,
            capacity: None,
            core_cpus: sched::CpuSet::new(),
        };
        match sched.add_resource(info) {
            Ok(()) => {}
            Err(SchedError::InvalidParam {
                param: "resources", ..
            }) if r > 0 => {}
            Err(e) => panic!("{name}: add_resource({r}): {e}"),
        }
    }
    if name == "arinc653" {
        sched.remove_resource(ResourceId(0)).unwrap();
        let whole = ResourceInfo {
            id: ResourceId(0),
            cpus: CpuSet::first_n(RESOURCES),
            socket: 0,
            cluster: 0,
            capacity: None,
            core_cpus: sched::CpuSet::new(),
        };
        sched.add_resource(whole).unwrap();
        let windows: Vec<String> = (0..64)
            .map(|w| format!("{}:{}:100", w * 3, w % UNITS_PER_DOMAIN))
            .collect();
        sched
            .set_pool_param("schedule", &windows.join(";"))
            .unwrap();
    }
    let all = CpuSet::first_n(RESOURCES);
    for u in 0..UNITS {
        let info = UnitInfo {
            id: UnitId(u),
            domain: DomainId(u / UNITS_PER_DOMAIN),
            index_in_domain: u % UNITS_PER_DOMAIN,
            vcpus: 1,
            params: SchedParams {
                budget_ns: 500 * US,
                period_ns: 2_000 * US,
                ..SchedParams::default()
            },
            // A quarter of the units are pinned to one CPU (slow paths included).
            hard_affinity: if u % 4 == 3 {
                CpuSet::single(u as usize % RESOURCES)
            } else {
                all
            },
            soft_affinity: CpuSet::single(u as usize % RESOURCES),
        };
        sched
            .insert_unit(&info, 0)
            .unwrap_or_else(|e| panic!("{name}: insert_unit({u}): {e}"));
    }
    sched
}

/// Drives every hot-path operation many times. Returns the number of
/// decisions that picked a unit, so the test can check the work was real.
fn hot_path(sched: &mut dyn Scheduler, resources: &[ResourceId]) -> u64 {
    let mut picked = 0;
    // Where each unit runs (resource index + 1; 0 = not running).
    let mut running_on = [0usize; UNITS as usize];
    let mut awake = [false; UNITS as usize];
    let mut now: Time = 1;
    for u in 0..UNITS {
        sched.wake(UnitId(u), now, WakeReason::New);
        awake[u as usize] = true;
    }
    for round in 0..300u32 {
        now += 37 * US;
        for (index, &r) in resources.iter().enumerate() {
            // Everything that ran on `r` (leader and fill-ins) is decided anew.
            for on in running_on.iter_mut().filter(|on| **on == index + 1) {
                *on = 0;
            }
            let slice = sched.do_schedule(r, now);
            if let Some(unit) = slice.unit {
                picked += 1;
                running_on[unit.0 as usize] = index + 1;
                if let Some(sibling) =
                    sched.pick_sibling(r, DomainId(unit.0 / UNITS_PER_DOMAIN), now)
                {
                    // One-CPU resources have no spare CPU; the 8-CPU one does.
                    running_on[sibling.0 as usize] = index + 1;
                    sched.yield_unit(sibling, now);
                }
                if round % 5 == 0 {
                    sched.yield_unit(unit, now);
                }
            }
        }
        // Sleep and wake a rotating tenth of the units, some of them running.
        for u in (round % 10..UNITS).step_by(10) {
            let unit = UnitId(u);
            if awake[u as usize] {
                sched.sleep(unit, now);
            } else {
                sched.wake(
                    unit,
                    now,
                    if u % 2 == 0 {
                        WakeReason::Event
                    } else {
                        WakeReason::Unpause
                    },
                );
            }
            awake[u as usize] = !awake[u as usize];
        }
        // Re-place some units that are not running.
        for u in (round % 16..UNITS).step_by(16) {
            if running_on[u as usize] == 0 {
                let to = sched.pick_resource(UnitId(u), now);
                sched.migrate(UnitId(u), to, now);
            }
        }
    }
    picked
}

fn check(name: &str) {
    let mut sched = set_up(name);
    let resources: Vec<ResourceId> = if name == "arinc653" {
        vec![ResourceId(0)]
    } else {
        (0..RESOURCES).map(ResourceId).collect()
    };
    let (picked, allocations) = allocations_in(|| hot_path(sched.as_mut(), &resources));
    assert_eq!(
        allocations, 0,
        "{name}: the hot path allocated {allocations} times"
    );
    assert!(
        picked > 50,
        "{name}: only {picked} decisions ran a unit; the workload is not exercised"
    );
    // Sibling fill-ins and sleeps were accounted: the scheduler still answers.
    assert!(sched.stats(UnitId(0)).is_some());
}

#[test]
fn every_scheduler_hot_path_is_allocation_free() {
    let names: Vec<&str> = SCHEDULER_NAMES.split(", ").collect();
    assert_eq!(names, ["credit2", "credit", "null", "rt", "arinc653"]);
    for name in names {
        check(name);
    }
}
