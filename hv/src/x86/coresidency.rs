//! The co-residency checker on x86 (as `arm/coresidency.rs`, with the TSC as
//! the shared clock): each CPU logs every context switch (TSC, loaded domain) into its own ring, and the boot CPU
//! periodically replays the logs of every multi-CPU resource of a core-,
//! cluster- or socket-granularity pool through [`hv::coresidency`] and logs
//! the result. The QEMU tests read that line.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hv::coresidency::{SwitchEvent, find_overlaps};
use log::{error, info};
use platform::arch::x86_64::timer;
use sched::{Granularity, MAX_CPUS};
use spin::Once;

use super::schedule;

/// Switches each CPU keeps: enough for the switching between two checks
/// (each check consumes the new ones); older ones are overwritten and counted.
const RING: usize = 8192;
/// "Idle" in the packed domain word.
const IDLE: u64 = 0;

struct Ring {
    /// Number of events ever written.
    head: AtomicUsize,
    /// `(time, domain + 1 or IDLE)` pairs.
    slots: [[AtomicU64; 2]; RING],
}

/// One ring per CPU, allocated at boot for the CPUs the machine has.
static RINGS: Once<Vec<Ring>> = Once::new();

/// Allocates the rings; call once on the boot CPU before guests run.
pub fn init(cpus: usize) {
    RINGS.call_once(|| {
        (0..cpus.min(MAX_CPUS))
            .map(|_| Ring {
                head: AtomicUsize::new(0),
                slots: [const { [AtomicU64::new(0), AtomicU64::new(0)] }; RING],
            })
            .collect()
    });
}

fn ring(cpu: usize) -> Option<&'static Ring> {
    RINGS.get()?.get(cpu)
}

/// How far each CPU's ring has been checked.
static CHECKED: [AtomicUsize; MAX_CPUS] = [const { AtomicUsize::new(0) }; MAX_CPUS];
static TOTAL_SWITCHES: AtomicU64 = AtomicU64::new(0);
static TOTAL_OVERLAPS: AtomicU64 = AtomicU64::new(0);

/// Logs that `cpu` now holds `domain` (or idle). Only `cpu` itself calls this.
pub fn record(cpu: usize, domain: Option<u32>) {
    let Some(ring) = ring(cpu) else { return };
    let head = ring.head.load(Ordering::Relaxed);
    let slot = &ring.slots[head % RING];
    slot[0].store(timer::tsc(), Ordering::Relaxed);
    slot[1].store(domain.map_or(IDLE, |d| u64::from(d) + 1), Ordering::Relaxed);
    ring.head.store(head + 1, Ordering::Release);
}

fn events_since(cpu: usize, from: usize, to: usize) -> Vec<SwitchEvent> {
    let Some(ring) = ring(cpu) else {
        return Vec::new();
    };
    (from.max(to.saturating_sub(RING))..to)
        .map(|i| {
            let slot = &ring.slots[i % RING];
            let packed = slot[1].load(Ordering::Relaxed);
            SwitchEvent {
                time: slot[0].load(Ordering::Relaxed),
                domain: (packed != IDLE).then(|| (packed - 1) as u32),
            }
        })
        .collect()
}

/// Replays the switches logged since the last check for every resource of a
/// pool that schedules several CPUs together, and logs the totals.
pub fn check() {
    let groups: Vec<Vec<usize>> = schedule::with_system(|s, _| {
        let pools: Vec<_> = s.pools().collect();
        pools
            .into_iter()
            .filter(|&p| {
                s.pool_info(p)
                    .is_some_and(|i| i.granularity != Granularity::Cpu)
            })
            .flat_map(|p| {
                s.resources(p)
                    .map(|r| r.cpus.iter().collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            })
            .filter(|cpus| cpus.len() > 1)
            .collect()
    })
    .unwrap_or_default();
    if groups.is_empty() {
        return;
    }
    let mut switches = 0;
    let mut overlaps = 0;
    let mut lost = 0;
    for cpus in &groups {
        // Each CPU's log up to a snapshot of its head; the previous check's
        // last event is replayed again so a CPU's state carries over.
        let heads: Vec<usize> = cpus
            .iter()
            .map(|&c| ring(c).map_or(0, |r| r.head.load(Ordering::Acquire)))
            .collect();
        let logs: Vec<Vec<SwitchEvent>> = cpus
            .iter()
            .zip(&heads)
            .map(|(&c, &head)| {
                events_since(
                    c,
                    CHECKED[c].load(Ordering::Relaxed).saturating_sub(1),
                    head,
                )
            })
            .collect();
        let slices: Vec<&[SwitchEvent]> = logs.iter().map(Vec::as_slice).collect();
        for overlap in find_overlaps(cpus, &slices) {
            overlaps += 1;
            error!(
                "coresidency: OVERLAP at counter {}: cpu {} ran dom{} while cpu {} ran dom{}",
                overlap.time, overlap.cpus.0, overlap.domains.0, overlap.cpus.1, overlap.domains.1
            );
        }
        for (&c, &head) in cpus.iter().zip(&heads) {
            let previous = CHECKED[c].swap(head, Ordering::Relaxed);
            if head - previous > RING {
                lost += head - previous - RING;
            }
            switches += head - previous;
        }
    }
    let total = TOTAL_SWITCHES.fetch_add(switches as u64, Ordering::Relaxed) + switches as u64;
    let total_overlaps = TOTAL_OVERLAPS.fetch_add(overlaps, Ordering::Relaxed) + overlaps;
    if lost > 0 {
        error!("coresidency: {lost} switches were overwritten before they could be checked");
    }
    info!(
        "coresidency: {total} switches checked on {} shared resources, {total_overlaps} overlaps",
        groups.len()
    );
}
