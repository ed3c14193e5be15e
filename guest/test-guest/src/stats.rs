//! Latency statistics over a fixed buffer of samples (no heap).

/// Minimum, mean and 99th percentile of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// How many samples.
    pub count: usize,
    /// The smallest.
    pub min: u64,
    /// The mean, rounded down.
    pub avg: u64,
    /// The 99th percentile, nearest-rank: the smallest sample that at least
    /// 99 % of the samples do not exceed.
    pub p99: u64,
    /// The largest.
    pub max: u64,
}

impl Summary {
    /// Summarises `samples`, sorting them in place; `None` when empty.
    pub fn of(samples: &mut [u64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let count = samples.len();
        let sum: u128 = samples.iter().map(|&s| s as u128).sum();
        // Nearest rank: ceil(0.99 * n), 1-based.
        let rank = (count * 99).div_ceil(100).max(1);
        Some(Self {
            count,
            min: samples[0],
            avg: (sum / count as u128) as u64,
            p99: samples[rank - 1],
            max: samples[count - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let mut samples: Vec<u64> = (1..=100).rev().collect();
        let s = Summary::of(&mut samples).unwrap();
        assert_eq!((s.count, s.min, s.avg, s.p99, s.max), (100, 1, 50, 99, 100));
        let mut one = [7];
        let s = Summary::of(&mut one).unwrap();
        assert_eq!((s.min, s.avg, s.p99, s.max), (7, 7, 7, 7));
        assert_eq!(Summary::of(&mut []), None);
    }

    #[test]
    fn p99_of_a_small_set_is_its_maximum_and_outliers_show() {
        let mut samples = [10u64; 50];
        samples[3] = 1000;
        let s = Summary::of(&mut samples).unwrap();
        assert_eq!((s.p99, s.max, s.min), (1000, 1000, 10));
        let mut samples = [10u64; 200];
        samples[0] = 1000;
        samples[1] = 900;
        let s = Summary::of(&mut samples).unwrap();
        // Two outliers in 200 samples are the top 1 %: p99 does not see them.
        assert_eq!((s.p99, s.max), (10, 1000));
    }

    #[test]
    fn huge_samples_do_not_overflow_the_mean() {
        let mut samples = [u64::MAX, u64::MAX];
        assert_eq!(Summary::of(&mut samples).unwrap().avg, u64::MAX);
    }
}
