//! Hypercall dispatch: guest calls (see the `guest-abi` crate) to hypervisor actions.

use core::ops::Range;

/// Which guest-physical addresses (IPAs) are the domain's RAM. Hypercall
/// pointers and PSCI entry points must lie inside it.
pub trait GuestMemory {
    /// Whether all of `[ipa, ipa + len)` is guest RAM (false if it overflows).
    fn contains(&self, ipa: u64, len: u64) -> bool;
}

impl GuestMemory for Range<u64> {
    fn contains(&self, ipa: u64, len: u64) -> bool {
        match ipa.checked_add(len) {
            Some(end) => ipa >= self.start && end <= self.end,
            None => false,
        }
    }
}

impl GuestMemory for [Range<u64>] {
    fn contains(&self, ipa: u64, len: u64) -> bool {
        self.iter().any(|r| GuestMemory::contains(r, ipa, len))
    }
}
