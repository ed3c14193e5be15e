//! The co-residency checker on this architecture: every CPU logs the VMID it
//! enters a guest with and its context switches (the counter as the shared
//! clock) into [`hv::coresidency::Checker`], and the boot CPU periodically
//! checks the logs and logs the result. The QEMU tests read that line.

use alloc::vec::Vec;

use hv::coresidency::Checker;
use hv::sibling_view::Identity;
use platform::arch::aarch64::timer;
use sched::{MAX_CPUS, Topology};
use spin::Once;

use super::schedule;

static CHECKER: Once<Checker> = Once::new();

/// Allocates the logs; call once on the boot CPU before guests run.
pub fn init(cpus: usize) {
    CHECKER.call_once(|| Checker::new(cpus.min(MAX_CPUS)));
}

/// Hands the checker each CPU's raw MPIDR (`None`: not online), compared
/// with the firmware `topology`.
pub fn set_identities(mpidrs: &[Option<u64>], topology: &Topology) {
    if let Some(checker) = CHECKER.get() {
        let ids: Vec<Option<Identity>> = mpidrs
            .iter()
            .map(|m| m.map(|mpidr| Identity::Arm { mpidr }))
            .collect();
        checker.set_identities(ids, topology);
    }
}

/// `vmid` now belongs to `domain`.
pub fn vmid_given(vmid: u8, domain: u32) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.tag_given(u32::from(vmid), domain);
    }
}

/// `vmid` is free again.
pub fn vmid_returned(vmid: u8) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.tag_returned(u32::from(vmid));
    }
}

/// `cpu` is about to return into a guest whose stage 2 is tagged `vmid`.
pub fn entering(cpu: usize, vmid: u8) {
    if let Some(checker) = CHECKER.get() {
        checker
            .logs
            .entering(cpu, timer::counter(), u32::from(vmid));
    }
}

/// `cpu` made a context switch: it holds nothing until it enters again.
pub fn switched(cpu: usize) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.switched(cpu, timer::counter());
    }
}

/// Checks the switches logged since the last check and logs the totals.
pub fn check() {
    let Some(checker) = CHECKER.get() else { return };
    let groups = schedule::with_system(|s, _| checker.groups(s)).unwrap_or_default();
    checker.logs.check_and_log(&groups);
}
