//! The co-residency checker: proof, from what the CPUs actually loaded, that
//! the CPUs of one core- or cluster-scheduled resource never held vCPUs of two
//! different domains at the same moment (the security promise of core
//! scheduling).
//!
//! Every CPU logs `(time, what it loaded)` at each context switch into its own
//! ring; [`find_overlaps`] replays the logs of a resource's CPUs in time order
//! and reports every moment two of them held different domains. "Loaded"
//! spans from the switch that loads a vCPU to the switch that removes it, so it
//! covers all the time the guest actually ran.

use alloc::vec::Vec;

/// One context switch on one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchEvent {
    /// Counter value (a clock shared by all CPUs) when the CPU switched.
    pub time: u64,
    /// The domain whose vCPU the CPU loaded, or `None` for idle.
    pub domain: Option<u32>,
}

/// Two CPUs of one resource holding different domains at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// When it started.
    pub time: u64,
    /// The two CPUs.
    pub cpus: (usize, usize),
    /// The domains they held.
    pub domains: (u32, u32),
}

/// Replays the switch logs of the CPUs of one resource (`logs[i]` is CPU
/// `cpus[i]`'s log, oldest first) and returns the overlaps. A CPU is idle until
/// its first logged switch. Switches with the same timestamp are applied
/// together before checking, since the clock cannot order them.
pub fn find_overlaps(cpus: &[usize], logs: &[&[SwitchEvent]]) -> Vec<Overlap> {
    let mut overlaps = Vec::new();
    let mut held: Vec<Option<u32>> = alloc::vec![None; cpus.len()];
    let mut next: Vec<usize> = alloc::vec![0; cpus.len()];
    while let Some(now) = logs
        .iter()
        .zip(&next)
        .filter_map(|(log, &i)| log.get(i).map(|e| e.time))
        .min()
    {
        for (slot, log) in logs.iter().enumerate() {
            while let Some(event) = log.get(next[slot]).filter(|e| e.time == now) {
                held[slot] = event.domain;
                next[slot] += 1;
            }
        }
        for a in 0..cpus.len() {
            for b in a + 1..cpus.len() {
                if let (Some(da), Some(db)) = (held[a], held[b])
                    && da != db
                {
                    overlaps.push(Overlap {
                        time: now,
                        cpus: (cpus[a], cpus[b]),
                        domains: (da, db),
                    });
                }
            }
        }
    }
    overlaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(time: u64, domain: Option<u32>) -> SwitchEvent {
        SwitchEvent { time, domain }
    }

    #[test]
    fn same_domain_on_siblings_is_fine() {
        let a = [ev(10, Some(1)), ev(50, None)];
        let b = [ev(12, Some(1)), ev(40, None), ev(60, Some(2))];
        assert!(find_overlaps(&[0, 1], &[&a, &b]).is_empty());
    }

    #[test]
    fn different_domains_at_once_are_reported() {
        let a = [ev(10, Some(1)), ev(50, None)];
        let b = [ev(30, Some(2)), ev(60, None)];
        let overlaps = find_overlaps(&[4, 5], &[&a, &b]);
        assert_eq!(
            overlaps,
            vec![Overlap {
                time: 30,
                cpus: (4, 5),
                domains: (1, 2)
            }]
        );
    }

    #[test]
    fn a_hand_over_at_the_same_instant_is_not_an_overlap() {
        // A releases domain 1 and B loads domain 2 at the same counter value:
        // the clock cannot order them, and the rendezvous makes B wait for A.
        let a = [ev(10, Some(1)), ev(20, None)];
        let b = [ev(20, Some(2))];
        assert!(find_overlaps(&[0, 1], &[&a, &b]).is_empty());
    }

    #[test]
    fn three_cpus_and_empty_logs() {
        let a = [ev(1, Some(7))];
        let b: [SwitchEvent; 0] = [];
        let c = [ev(5, Some(8)), ev(6, Some(7))];
        let overlaps = find_overlaps(&[0, 1, 2], &[&a, &b, &c]);
        assert_eq!(overlaps.len(), 1);
        assert_eq!(overlaps[0].domains, (7, 8));
        assert!(find_overlaps(&[], &[]).is_empty());
    }
}
