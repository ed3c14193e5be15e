//! Fixed-size CPU bitmaps: the scheduler's hot path passes these by value and never allocates.

use core::fmt;

/// The largest number of logical CPUs the hypervisor supports (Ampere Altra Max
/// in a two-socket server has 256; the margin is for bigger boards).
pub const MAX_CPUS: usize = 512;

const WORDS: usize = MAX_CPUS / 64;

/// A set of logical CPU indices (`0..MAX_CPUS`), stored as a bitmap.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    words: [u64; WORDS],
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self { words: [0; WORDS] }
    }

    /// A set holding exactly `cpu`.
    pub fn single(cpu: usize) -> Self {
        let mut set = Self::new();
        set.insert(cpu);
        set
    }

    /// The set `0..count`.
    pub fn first_n(count: usize) -> Self {
        let mut set = Self::new();
        for cpu in 0..count.min(MAX_CPUS) {
            set.insert(cpu);
        }
        set
    }

    /// Adds `cpu`; returns false when it is out of range (`>= MAX_CPUS`).
    pub fn insert(&mut self, cpu: usize) -> bool {
        if cpu >= MAX_CPUS {
            return false;
        }
        self.words[cpu / 64] |= 1 << (cpu % 64);
        true
    }

    /// Removes `cpu` (no-op when absent or out of range).
    pub fn remove(&mut self, cpu: usize) {
        if cpu < MAX_CPUS {
            self.words[cpu / 64] &= !(1 << (cpu % 64));
        }
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.words[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The lowest CPU in the set.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// Set union.
    pub fn union(&self, other: &Self) -> Self {
        let mut out = *self;
        out.union_with(other);
        out
    }

    /// Adds every CPU of `other`, in place.
    pub fn union_with(&mut self, other: &Self) {
        for (a, b) in self.words.iter_mut().zip(other.words.iter()) {
            *a |= *b;
        }
    }

    /// Set intersection.
    pub fn intersection(&self, other: &Self) -> Self {
        let mut out = *self;
        for (a, b) in out.words.iter_mut().zip(other.words.iter()) {
            *a &= *b;
        }
        out
    }

    /// CPUs in `self` and not in `other`.
    pub fn difference(&self, other: &Self) -> Self {
        let mut out = *self;
        for (a, b) in out.words.iter_mut().zip(other.words.iter()) {
            *a &= !*b;
        }
        out
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &Self) -> bool {
        self.difference(other).is_empty()
    }

    /// Whether the two sets share a CPU.
    pub fn intersects(&self, other: &Self) -> bool {
        !self.intersection(other).is_empty()
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> CpuSetIter {
        CpuSetIter {
            set: *self,
            word: 0,
        }
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut set = Self::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

/// Ascending iterator over a [`CpuSet`]'s members.
pub struct CpuSetIter {
    set: CpuSet,
    word: usize,
}

impl Iterator for CpuSetIter {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.word < WORDS {
            let bits = self.set.words[self.word];
            if bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                self.set.words[self.word] &= bits - 1;
                return Some(self.word * 64 + bit);
            }
            self.word += 1;
        }
        None
    }
}

/// Prints ranges like Xen's cpumask printing: `{0-3,6}`.
impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        f.write_str("}")
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let a: CpuSet = [0, 1, 2, 70].into_iter().collect();
        let b: CpuSet = [2, 3, 70].into_iter().collect();
        assert_eq!(a.len(), 4);
        assert!(a.contains(70));
        assert!(!a.contains(3));
        assert_eq!(a.intersection(&b).iter().collect::<Vec<_>>(), vec![2, 70]);
        assert_eq!(a.union(&b).len(), 5);
        assert_eq!(a.difference(&b).iter().collect::<Vec<_>>(), vec![0, 1]);
        assert!(!a.is_subset(&b));
        assert!(a.intersection(&b).is_subset(&b));
        assert!(!CpuSet::single(MAX_CPUS - 1).is_empty());
        assert!(!CpuSet::new().insert(MAX_CPUS));
    }

    #[test]
    fn debug_prints_ranges() {
        let a: CpuSet = [0, 1, 2, 3, 6, 8, 9].into_iter().collect();
        assert_eq!(format!("{a:?}"), "{0-3,6,8-9}");
        assert_eq!(format!("{:?}", CpuSet::new()), "{}");
    }
}
