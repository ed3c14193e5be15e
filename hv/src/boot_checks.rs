//! The checks both architectures make once every CPU is up, before any guest
//! runs: a ping from the boot CPU to each other CPU that must come back (an
//! SGI on ARM, a fixed APIC IPI on x86), and a few ticks on every CPU. The
//! architecture sends the IPIs and reads the clock; the counters here are
//! bumped by its interrupt handlers.
//!
//! Every wait is bounded; a CPU that does not answer is named in an
//! `error!` line and the boot goes on.

use alloc::vec::Vec;
use core::fmt::Display;
use core::sync::atomic::{AtomicU32, Ordering};

use log::{error, info};
use sched::{CpuSet, MAX_CPUS};

/// How long a pinged CPU may take to answer.
pub const IPI_TIMEOUT_NS: u64 = 1_000_000_000;
/// How long every CPU may take to show [`TICKS_EXPECTED`] ticks.
pub const TICK_TIMEOUT_NS: u64 = 5_000_000_000;
/// The ticks each CPU must have taken for its timer to count as working.
pub const TICKS_EXPECTED: u32 = 3;

/// What the interrupt handlers count for the checks.
pub struct BootCounters {
    /// Pings each CPU received.
    pings: [AtomicU32; MAX_CPUS],
    /// Answers the boot CPU received (from any CPU).
    pongs: AtomicU32,
    /// Ticks each CPU took.
    ticks: [AtomicU32; MAX_CPUS],
}

impl BootCounters {
    /// All zero.
    pub const fn new() -> Self {
        Self {
            pings: [const { AtomicU32::new(0) }; MAX_CPUS],
            pongs: AtomicU32::new(0),
            ticks: [const { AtomicU32::new(0) }; MAX_CPUS],
        }
    }

    /// CPU `cpu`'s ping handler ran (it then answers the boot CPU).
    pub fn ping_received(&self, cpu: usize) {
        if let Some(pings) = self.pings.get(cpu) {
            pings.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The boot CPU's answer handler ran.
    pub fn pong_received(&self) {
        self.pongs.fetch_add(1, Ordering::AcqRel);
    }

    /// CPU `cpu` took a tick; returns its tick count so far.
    pub fn tick(&self, cpu: usize) -> u32 {
        self.ticks
            .get(cpu)
            .map_or(0, |t| t.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn pings(&self, cpu: usize) -> u32 {
        self.pings.get(cpu).map_or(0, |p| p.load(Ordering::Acquire))
    }

    fn ticks(&self, cpu: usize) -> u32 {
        self.ticks.get(cpu).map_or(0, |t| t.load(Ordering::Relaxed))
    }
}

impl Default for BootCounters {
    fn default() -> Self {
        Self::new()
    }
}

/// Spins until `done` or until `timeout_ns` have passed on `now_ns`; true if
/// `done` held (checked once more at the end, so a late answer counts).
pub fn wait_until(
    now_ns: &impl Fn() -> u64,
    timeout_ns: u64,
    mut done: impl FnMut() -> bool,
) -> bool {
    let deadline = now_ns().saturating_add(timeout_ns);
    while now_ns() < deadline {
        if done() {
            return true;
        }
        platform::sync::cpu_relax();
    }
    done()
}

/// How the round trips went.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RoundTrips {
    /// CPUs that answered.
    pub answered: Vec<usize>,
    /// CPUs that did not answer within [`IPI_TIMEOUT_NS`].
    pub silent: Vec<usize>,
    /// CPUs the ping could not be sent to.
    pub unsent: Vec<usize>,
}

/// Pings each CPU of `others` in turn with `send` and waits, bounded, for it
/// to count the ping and for an answer to reach the boot CPU; logs each
/// result and the total (`ipi: N of M round trips ok`).
pub fn ipi_round_trips<E: Display>(
    counters: &BootCounters,
    others: &[usize],
    now_ns: impl Fn() -> u64,
    mut send: impl FnMut(usize) -> Result<(), E>,
) -> RoundTrips {
    let mut trips = RoundTrips::default();
    for &target in others {
        let pongs_before = counters.pongs.load(Ordering::Acquire);
        let pings_before = counters.pings(target);
        let start = now_ns();
        if let Err(e) = send(target) {
            error!("ipi: cannot send to cpu {target}: {e}");
            trips.unsent.push(target);
            continue;
        }
        let answered = wait_until(&now_ns, IPI_TIMEOUT_NS, || {
            counters.pongs.load(Ordering::Acquire) > pongs_before
                && counters.pings(target) > pings_before
        });
        if answered {
            info!(
                "ipi: cpu {target} round trip ok ({} us)",
                now_ns().saturating_sub(start) / 1000
            );
            trips.answered.push(target);
        } else {
            error!(
                "ipi: cpu {target} did not answer within {} s (pings seen {})",
                IPI_TIMEOUT_NS / 1_000_000_000,
                counters.pings(target)
            );
            trips.silent.push(target);
        }
    }
    info!(
        "ipi: {} of {} round trips ok",
        trips.answered.len(),
        others.len()
    );
    trips
}

/// Sends one ping to all of `targets` at once with `send` (a set or a
/// broadcast, named `kind` in the log) and waits, bounded, until each has
/// counted it and at least one answer came back (answers arriving together
/// may merge into one interrupt). Returns the targets that did not count it.
pub fn ipi_broadcast<E: Display>(
    counters: &BootCounters,
    kind: &str,
    targets: &[usize],
    now_ns: impl Fn() -> u64,
    send: impl FnOnce() -> Result<(), E>,
) -> Result<Vec<usize>, E> {
    let pongs_before = counters.pongs.load(Ordering::Acquire);
    let pings_before: Vec<u32> = targets.iter().map(|&c| counters.pings(c)).collect();
    if let Err(e) = send() {
        error!("ipi: {kind} of {} CPUs: {e}", targets.len());
        return Err(e);
    }
    let counted = |(&cpu, &before): (&usize, &u32)| counters.pings(cpu) > before;
    let answered = wait_until(&now_ns, IPI_TIMEOUT_NS, || {
        counters.pongs.load(Ordering::Acquire) > pongs_before
            && targets.iter().zip(&pings_before).all(counted)
    });
    if answered {
        info!("ipi: {kind} ping of {} CPUs ok {targets:?}", targets.len());
        return Ok(Vec::new());
    }
    let silent: Vec<usize> = targets
        .iter()
        .zip(&pings_before)
        .filter(|pair| !counted(*pair))
        .map(|(&c, _)| c)
        .collect();
    error!(
        "ipi: {kind} ping: CPUs {silent:?} did not answer within {} s",
        IPI_TIMEOUT_NS / 1_000_000_000
    );
    Ok(silent)
}

/// Waits, bounded, until every CPU of `online` has taken
/// [`TICKS_EXPECTED`] ticks; logs the outcome and returns the CPUs that did
/// not.
pub fn wait_for_ticks(
    counters: &BootCounters,
    online: &CpuSet,
    tick_ns: u64,
    now_ns: impl Fn() -> u64,
) -> Vec<usize> {
    let ticking = |c: usize| counters.ticks(c) >= TICKS_EXPECTED;
    if wait_until(&now_ns, TICK_TIMEOUT_NS, || online.iter().all(ticking)) {
        info!(
            "tick: all {} CPUs ticking every {} ms",
            online.len(),
            tick_ns / 1_000_000
        );
        return Vec::new();
    }
    let silent: Vec<usize> = online.iter().filter(|&c| !ticking(c)).collect();
    error!(
        "tick: CPUs {silent:?} took no tick within {} s",
        TICK_TIMEOUT_NS / 1_000_000_000
    );
    silent
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    /// A clock that moves 1 ms on every reading, so a bounded wait ends.
    fn stepping_clock() -> impl Fn() -> u64 {
        let now = Cell::new(0u64);
        move || {
            now.set(now.get() + 1_000_000);
            now.get()
        }
    }

    #[test]
    fn every_answering_cpu_is_counted_and_a_silent_one_is_named() {
        let counters = BootCounters::new();
        // CPU 2 takes the ping but its answer never arrives; CPU 3 cannot be
        // sent to; CPU 1 answers.
        let trips = ipi_round_trips(&counters, &[1, 2, 3], stepping_clock(), |cpu| {
            match cpu {
                3 => return Err("no APIC id"),
                1 => counters.pong_received(),
                _ => {}
            }
            counters.ping_received(cpu);
            Ok(())
        });
        assert_eq!(
            trips,
            RoundTrips {
                answered: vec![1],
                silent: vec![2],
                unsent: vec![3],
            }
        );
    }

    #[test]
    fn an_answer_from_before_the_ping_does_not_count() {
        let counters = BootCounters::new();
        // A stale answer and ping: only counts taken after this send count.
        counters.pong_received();
        counters.ping_received(1);
        let trips = ipi_round_trips(&counters, &[1], stepping_clock(), |_| Ok::<(), &str>(()));
        assert_eq!(trips.silent, vec![1]);
    }

    #[test]
    fn a_broadcast_names_the_targets_that_did_not_count_it() {
        let counters = BootCounters::new();
        let silent = ipi_broadcast(&counters, "set", &[1, 2, 3], stepping_clock(), || {
            counters.ping_received(1);
            counters.ping_received(3);
            counters.pong_received();
            Ok::<(), &str>(())
        });
        assert_eq!(silent, Ok(vec![2]));
        let all = ipi_broadcast(&counters, "all", &[1, 3], stepping_clock(), || {
            counters.ping_received(1);
            counters.ping_received(3);
            counters.pong_received();
            Ok::<(), &str>(())
        });
        assert_eq!(all, Ok(vec![]));
        let unsent = ipi_broadcast(&counters, "all", &[1], stepping_clock(), || Err("refused"));
        assert_eq!(unsent, Err("refused"));
    }

    #[test]
    fn a_cpu_without_ticks_is_named() {
        let counters = BootCounters::new();
        for _ in 0..TICKS_EXPECTED {
            counters.tick(0);
            counters.tick(2);
        }
        counters.tick(1);
        let online: CpuSet = [0, 1, 2].into_iter().collect();
        assert_eq!(
            wait_for_ticks(&counters, &online, 10_000_000, stepping_clock()),
            vec![1]
        );
        counters.tick(1);
        counters.tick(1);
        assert!(wait_for_ticks(&counters, &online, 10_000_000, stepping_clock()).is_empty());
    }
}
