//! The SMT throughput model, in one place.
//!
//! A hardware thread whose core sibling is idle runs at speed **1.0**. When
//! both threads of a core run busy guest code, each runs at a factor `f < 1`
//! that depends on its own workload class and its sibling's: the table
//! [`SMT_FACTORS`] below (row = this thread's class, column = the sibling's).
//! Change a number there and every figure of the lab follows.
//!
//! Sources and reasoning for the constants (none was measured by us; they are
//! assumptions chosen to match published orders of magnitude, and the lab's
//! targets are ratios that hold over a wide band of them):
//!
//! * **compute/compute 0.62**: reference 003 ("HT is, in general, known to
//!   help, at least a little" for kernbench) and Intel's usual SMT figure of a
//!   20–30 % gain for two compile-like threads on one core: 2 × 0.62 = 1.24.
//! * **memory/memory 0.52**: two STREAM-like threads share the core's L1/L2
//!   and fill buffers; a core's bandwidth barely grows with a second thread
//!   (2 × 0.52 = 1.04). Reference 003 runs STREAM with NR_CPUS/2 tasks so that
//!   ideally "we wouldn't see any difference between HT, noHT and csc".
//!   The lab's overload STREAM verdict (csc vs noHT) turns on this number:
//!   csc catches up with noHT at about 0.62 (BENCHMARKS.md, "Scheduling lab").
//! * **memory next to compute 0.80 / compute next to memory 0.75**: the
//!   threads compete for different units (load/store vs ALU), so the mix
//!   loses less than two of a kind.
//! * **communication-bound 0.75 either way**: hackbench/netperf run short
//!   bursts between wake-ups, dominated by latency (the model charges the wake
//!   and switch latencies separately, in [`crate::sim::Costs`]); their bursts
//!   lose some speed to a busy sibling, less than a compute loop.
//!
//! Socket-wide memory bandwidth, caches shared between cores and frequency
//! scaling are not modelled.

/// What kind of work a guest task does, for the SMT model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// STREAM-like: bound by the core's memory bandwidth.
    Memory = 0,
    /// kernbench-like: bound by the core's execution units.
    Compute = 1,
    /// hackbench/netperf-like: short bursts between wake-ups.
    Communication = 2,
}

impl Class {
    /// All classes, in table order.
    pub const ALL: [Class; 3] = [Class::Memory, Class::Compute, Class::Communication];

    /// A short name for tables.
    pub const fn name(self) -> &'static str {
        match self {
            Class::Memory => "memory",
            Class::Compute => "compute",
            Class::Communication => "communication",
        }
    }
}

/// `SMT_FACTORS[mine][sibling]`: the speed of a thread of class `mine` while
/// its core sibling runs busy work of class `sibling` (see the module docs
/// for the sources).
pub const SMT_FACTORS: [[f64; 3]; 3] = [
    // sibling:  memory  compute  communication
    /* memory */
    [0.52, 0.80, 0.80],
    /* compute */ [0.75, 0.62, 0.75],
    /* communication */ [0.75, 0.75, 0.75],
];

/// The speed of a thread running `mine`, given what its busy siblings run
/// (empty = alone on its core: 1.0). With more than one busy sibling the
/// factors multiply (not used by the lab's 2-thread cores).
pub fn speed(mine: Class, busy_siblings: &[Class]) -> f64 {
    busy_siblings
        .iter()
        .map(|&s| SMT_FACTORS[mine as usize][s as usize])
        .product()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_on_a_core_is_full_speed() {
        for c in Class::ALL {
            assert_eq!(speed(c, &[]), 1.0);
        }
    }

    #[test]
    fn every_factor_is_a_slowdown_but_smt_never_loses_throughput() {
        for a in Class::ALL {
            for b in Class::ALL {
                let f = SMT_FACTORS[a as usize][b as usize];
                assert!(f > 0.0 && f < 1.0, "{a:?}/{b:?}: {f}");
                // Two threads on a core do at least what one does alone.
                let g = SMT_FACTORS[b as usize][a as usize];
                assert!(f + g >= 1.0, "{a:?}/{b:?}: {f} + {g}");
            }
        }
    }

    #[test]
    fn compute_pair_matches_the_documented_smt_gain() {
        let pair = 2.0 * speed(Class::Compute, &[Class::Compute]);
        assert!((1.2..=1.3).contains(&pair), "{pair}");
        let mem = 2.0 * speed(Class::Memory, &[Class::Memory]);
        assert!((1.0..1.1).contains(&mem), "{mem}");
    }
}
