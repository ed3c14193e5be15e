//! Which domain and index each installed vCPU has, readable lock-free from
//! any CPU (the co-residency checker and the interrupt-pending check ask
//! while another CPU may hold the vCPU's state).

use core::sync::atomic::{AtomicU64, Ordering};

use sched::{DomainId, VcpuId};

/// A table of `N` vCPU ids' owners: `domain << 32 | index + 1`, 0 for none.
pub struct VcpuIdentities<const N: usize> {
    slots: [AtomicU64; N],
}

impl<const N: usize> VcpuIdentities<N> {
    /// A table with no vCPU installed.
    pub const fn new() -> Self {
        Self {
            slots: [const { AtomicU64::new(0) }; N],
        }
    }

    /// Records that `vcpu` is `domain`'s vCPU `index`; an id beyond the
    /// table is ignored (installing it fails before this matters).
    pub fn set(&self, vcpu: VcpuId, domain: DomainId, index: u32) {
        if let Some(slot) = self.slots.get(vcpu.0 as usize) {
            let packed = (u64::from(domain.0) << 32) | u64::from(index.wrapping_add(1));
            slot.store(packed, Ordering::Release);
        }
    }

    /// Forgets `vcpu` (uninstalled).
    pub fn clear(&self, vcpu: VcpuId) {
        if let Some(slot) = self.slots.get(vcpu.0 as usize) {
            slot.store(0, Ordering::Release);
        }
    }

    /// The domain and index of `vcpu`, if installed.
    pub fn get(&self, vcpu: VcpuId) -> Option<(DomainId, u32)> {
        match self.slots.get(vcpu.0 as usize)?.load(Ordering::Acquire) {
            0 => None,
            packed => Some((
                DomainId((packed >> 32) as u32),
                (packed as u32).wrapping_sub(1),
            )),
        }
    }
}

impl<const N: usize> Default for VcpuIdentities<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_clear_round_trip_including_index_zero_and_large_domains() {
        let table = VcpuIdentities::<4>::new();
        assert_eq!(table.get(VcpuId(1)), None);
        table.set(VcpuId(1), DomainId(7), 0);
        table.set(VcpuId(2), DomainId(u32::MAX), 3);
        assert_eq!(table.get(VcpuId(1)), Some((DomainId(7), 0)));
        assert_eq!(table.get(VcpuId(2)), Some((DomainId(u32::MAX), 3)));
        table.clear(VcpuId(1));
        assert_eq!(table.get(VcpuId(1)), None);
        assert_eq!(table.get(VcpuId(2)), Some((DomainId(u32::MAX), 3)));
    }

    #[test]
    fn ids_beyond_the_table_are_never_installed() {
        let table = VcpuIdentities::<2>::new();
        table.set(VcpuId(9), DomainId(1), 0);
        assert_eq!(table.get(VcpuId(9)), None);
        table.clear(VcpuId(9));
    }
}
