//! What switching costs, in ticks of the system counter (CNTPCT): always-on
//! counters (a few atomic adds per switch) that the boot CPU logs every few
//! seconds as one line, which `cargo xtask bench-hv` reads.
//!
//! Five figures:
//! * **save+load**: `vcpu::switch_to` alone: saving the old context (general
//!   and EL1 system registers) and loading the new one, on one CPU.
//! * **plain**: one whole scheduling event, from the kick or timer to the
//!   return into the new context, that switched without waiting for another
//!   CPU: the decision under the lock, the switch(es), on a one-CPU resource
//!   (its rendezvous has only itself to wait for) or with no rendezvous.
//! * **sync2 / sync4**: one whole scheduling event on a CPU of a two- or
//!   four-CPU resource that switched through a completed rendezvous: the
//!   decision, the switch to idle, the wait for the siblings (the
//!   synchronised part), the load of the new vCPU. Every CPU of the resource
//!   contributes its own event, so the average mixes the deciding CPU's and
//!   the kicked siblings' views.
//!
//! * **ipi**: from sending the scheduling SGI (a kick; nudges have their own
//!   SGI and are not timed) to its acknowledge on the target CPU: the
//!   interrupt's delivery latency plus whatever the target was doing with
//!   interrupts masked. A kick sent while
//!   an earlier one to the same CPU is still in flight is not timed.
//!
//! Events whose rendezvous timed out or was abandoned are left out.
//! `cargo xtask bench-hv --write-lab-costs` turns the minima into the lab's
//! hypervisor costs.

use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use log::info;
use platform::arch::aarch64::timer;
use sched::MAX_CPUS;
use sched::driver::DriveReport;

/// One figure's running totals.
struct Figure {
    count: AtomicU64,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

impl Figure {
    const fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        }
    }

    fn add(&self, ticks: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(ticks, Ordering::Relaxed);
        self.min.fetch_min(ticks, Ordering::Relaxed);
        self.max.fetch_max(ticks, Ordering::Relaxed);
    }
}

/// The figures, in the order they are logged.
static SAVE_LOAD: Figure = Figure::new();
static EVENTS: [Figure; 3] = [Figure::new(), Figure::new(), Figure::new()];
/// The resource sizes [`EVENTS`] are kept for: plain (1), sync2, sync4.
const EVENT_SIZES: [u8; 3] = [1, 2, 4];
/// Kick deliveries (SGI sent to SGI acknowledged).
static IPI: Figure = Figure::new();
/// When the kick in flight to each CPU was sent (0: none in flight).
static KICK_SENT: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// CPUs in each CPU's sched resource (0: in no pool).
static RESOURCE_CPUS: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];

/// Records that `cpu`'s sched resource has `cpus` CPUs (boot, pool changes).
pub fn set_resource_size(cpu: usize, cpus: usize) {
    if let Some(slot) = RESOURCE_CPUS.get(cpu) {
        slot.store(cpus.min(usize::from(u8::MAX)) as u8, Ordering::Relaxed);
    }
}

/// The counter now (the start of a measured interval).
pub fn start() -> u64 {
    timer::counter()
}

/// A `vcpu::switch_to` that began at `started` has finished.
pub fn save_load_done(started: u64) {
    SAVE_LOAD.add(timer::counter().saturating_sub(started));
}

/// A scheduling event on `cpu` that began at `started` has finished with
/// `report`; counted if it switched and no rendezvous of it failed.
pub fn event_done(cpu: usize, started: u64, report: &DriveReport) {
    if report.switches == 0 || report.abandoned > 0 || report.step_limit_hit {
        return;
    }
    let ticks = timer::counter().saturating_sub(started);
    let size = match report.rendezvous {
        0 => 1,
        _ => RESOURCE_CPUS
            .get(cpu)
            .map_or(0, |s| s.load(Ordering::Relaxed)),
    };
    if let Some(i) = EVENT_SIZES.iter().position(|&s| s == size) {
        EVENTS[i].add(ticks);
    }
}

/// The scheduling SGI is being sent to `cpu`: its delivery is timed unless
/// one sent earlier has not arrived yet (the GIC merges the two).
pub fn kick_sent(cpu: usize) {
    if let Some(slot) = KICK_SENT.get(cpu) {
        // 0 means "none in flight"; a counter reading of 0 is only possible
        // at reset, and 1 tick later is as good.
        let now = timer::counter().max(1);
        let _ = slot.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// `cpu` has acknowledged the scheduling SGI.
pub fn kick_received(cpu: usize) {
    let Some(slot) = KICK_SENT.get(cpu) else {
        return;
    };
    let sent = slot.swap(0, Ordering::Relaxed);
    if sent != 0 {
        IPI.add(timer::counter().saturating_sub(sent));
    }
}

/// The switch count the last line showed (so an unchanged line is not repeated).
static LAST_LOGGED: AtomicU64 = AtomicU64::new(u64::MAX);

/// Logs the figures so far (boot CPU, every few seconds), if anything switched.
pub fn log() {
    if SAVE_LOAD.count.load(Ordering::Relaxed) == 0 {
        return;
    }
    let figure = |f: &Figure| {
        let count = f.count.load(Ordering::Relaxed);
        let sum = f.sum.load(Ordering::Relaxed);
        let min = f.min.load(Ordering::Relaxed);
        (
            count,
            sum / count.max(1),
            if count == 0 { 0 } else { min },
            f.max.load(Ordering::Relaxed),
        )
    };
    let (n, avg, min, max) = figure(&SAVE_LOAD);
    let (n1, avg1, min1, max1) = figure(&EVENTS[0]);
    let (n2, avg2, min2, max2) = figure(&EVENTS[1]);
    let (n4, avg4, min4, max4) = figure(&EVENTS[2]);
    let (ni, avgi, mini, maxi) = figure(&IPI);
    // A machine with nothing left to switch would repeat the same line forever.
    let switches = n + n1 + n2 + n4;
    if LAST_LOGGED.swap(switches, Ordering::Relaxed) == switches {
        return;
    }
    info!(
        "sched: switch cost in ticks of {} Hz: save+load n={n} avg={avg} min={min} max={max}; \
         plain n={n1} avg={avg1} min={min1} max={max1}; sync2 n={n2} avg={avg2} min={min2} max={max2}; \
         sync4 n={n4} avg={avg4} min={min4} max={max4}; ipi n={ni} avg={avgi} min={mini} max={maxi}",
        timer::frequency_hz()
    );
}
