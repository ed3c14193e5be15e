//! The verdicts of the workloads that watch other vCPUs' counters (`pause`,
//! `cpuoff`): what the counters must show for the check to pass.

use crate::barrier::VcpuSet;

/// A paused sibling's counter, read when the pause took effect, after
/// watching it paused, and after watching it unpaused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseWatch {
    /// When the pause call returned.
    pub paused_at: u64,
    /// At the end of the paused watch.
    pub while_paused: u64,
    /// At the end of the watch after the unpause.
    pub after: u64,
}

impl PauseWatch {
    /// The sibling did not count while paused and counted again afterwards.
    pub fn held(&self) -> bool {
        self.paused_at == self.while_paused && self.after > self.while_paused
    }
}

/// How many of `others` did not count between the two snapshots (indexed
/// by vCPU; a vCPU missing from either counts as stalled).
pub fn stalled(before: &[u64], after: &[u64], others: VcpuSet) -> usize {
    others
        .iter()
        .filter(|&i| match (before.get(i), after.get(i)) {
            (Some(b), Some(a)) => a <= b,
            _ => true,
        })
        .count()
}

/// What vCPU 0 saw while the `cpuoff` target was off, and after it asked
/// for it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffWatch {
    /// The platform still said the target was off at the end of the watch.
    pub still_off: bool,
    /// The target's counter did not move while it was off.
    pub target_frozen: bool,
    /// How many other vCPUs (besides vCPU 0 and the target) computed.
    pub others: usize,
    /// How many of them did not count during the watch.
    pub stalled: usize,
    /// vCPU 0's own loop count during the watch.
    pub own_loops: u64,
    /// The power-on call's result (0: accepted).
    pub power_on: i64,
    /// The target counted again after the power-on.
    pub back: bool,
}

impl OffWatch {
    /// The target stayed off while everyone else ran, and came back.
    pub fn ok(&self) -> bool {
        self.still_off
            && self.target_frozen
            && self.stalled == 0
            && self.own_loops > 0
            && self.power_on == 0
            && self.back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_holds_only_if_the_counter_stopped_and_went_on() {
        let held = PauseWatch {
            paused_at: 10,
            while_paused: 10,
            after: 11,
        };
        assert!(held.held());
        assert!(
            !PauseWatch {
                while_paused: 12,
                ..held
            }
            .held()
        );
        assert!(!PauseWatch { after: 10, ..held }.held());
    }

    #[test]
    fn stalled_counts_the_others_that_did_not_count() {
        let before = [5, 1, 7, 3];
        let after = [9, 1, 8, 3];
        let others = VcpuSet::of(4, |i| i != 0);
        assert_eq!(stalled(&before, &after, others), 2);
        assert_eq!(stalled(&before, &after, others.without(1).without(3)), 0);
        // Out of the snapshots: stalled.
        assert_eq!(stalled(&before, &after, VcpuSet::from_bits(1 << 9)), 1);
    }

    #[test]
    fn cpuoff_passes_only_when_every_part_held() {
        let good = OffWatch {
            still_off: true,
            target_frozen: true,
            others: 2,
            stalled: 0,
            own_loops: 1000,
            power_on: 0,
            back: true,
        };
        assert!(good.ok());
        assert!(
            !OffWatch {
                still_off: false,
                ..good
            }
            .ok()
        );
        assert!(
            !OffWatch {
                target_frozen: false,
                ..good
            }
            .ok()
        );
        assert!(!OffWatch { stalled: 1, ..good }.ok());
        assert!(
            !OffWatch {
                own_loops: 0,
                ..good
            }
            .ok()
        );
        assert!(
            !OffWatch {
                power_on: -2,
                ..good
            }
            .ok()
        );
        assert!(
            !OffWatch {
                back: false,
                ..good
            }
            .ok()
        );
    }
}
