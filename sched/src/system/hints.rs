//! Which vCPUs may be blocked, readable without the system's lock: the fast
//! path of an interrupt for a vCPU that is running or runnable (most of
//! them), which then needs no scheduling work at all, as Xen's `vcpu_kick`
//! skips `vcpu_unblock` when `_VPF_blocked` is clear.

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::MAX_VCPUS;
use crate::sync::{AtomicBool, Ordering};
use crate::unit::VcpuId;

/// How many vCPUs have a flag: every id the system hands out, but a few
/// under loom, whose tracked atomics are costly (a vCPU beyond them only
/// takes the slow path).
const FLAGS: usize = if cfg!(loom) { 16 } else { MAX_VCPUS };

/// Per vCPU, whether it may be blocked, shared with the hypervisor's
/// interrupt paths. A flag is set (under the system's lock) whenever its
/// vCPU blocks or is created (blocked until started), and cleared only when
/// a wake makes it runnable; so a clear flag means the vCPU is not blocked.
///
/// The race with a vCPU about to block: the blocker sets the flag, then
/// looks for pending interrupts under the lock that guards them; the
/// notifier records the interrupt under that same lock, then reads the flag.
/// Whichever takes that lock second sees the other's write: the blocker the
/// interrupt (it wakes itself), or the notifier the flag (it takes the slow
/// path and wakes the vCPU).
#[derive(Clone, Debug)]
pub struct BlockedHints {
    flags: Arc<[AtomicBool]>,
}

impl BlockedHints {
    pub(super) fn new() -> Self {
        let flags: Vec<AtomicBool> = (0..FLAGS).map(|_| AtomicBool::new(false)).collect();
        Self {
            flags: flags.into(),
        }
    }

    pub(super) fn set(&self, vcpu: VcpuId, blocked: bool) {
        if let Some(flag) = self.flags.get(vcpu.0 as usize) {
            flag.store(blocked, Ordering::Release);
        }
    }

    /// Whether `vcpu` may be blocked: `false` only if it is not (an id
    /// beyond the table may be anything).
    pub fn may_be_blocked(&self, vcpu: VcpuId) -> bool {
        self.flags
            .get(vcpu.0 as usize)
            .is_none_or(|flag| flag.load(Ordering::Acquire))
    }
}
