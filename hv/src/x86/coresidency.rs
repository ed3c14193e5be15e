//! The co-residency checker on this architecture: every CPU logs the ASID of
//! the VMCB it runs and its context switches (the TSC as the shared clock) into [`hv::coresidency::Checker`], and the boot CPU periodically
//! checks the logs and logs the result. The QEMU tests read that line.

use alloc::vec::Vec;

use hv::coresidency::Checker;
use hv::sibling_view::Identity;
use platform::arch::x86_64::timer;
use sched::{MAX_CPUS, Topology};
use spin::Once;

use super::schedule;

static CHECKER: Once<Checker> = Once::new();

/// Allocates the logs; call once on the boot CPU before guests run.
pub fn init(cpus: usize) {
    CHECKER.call_once(|| Checker::new(cpus.min(MAX_CPUS)));
}

/// Hands the checker what each CPU read from CPUID (`None`: not online):
/// its initial APIC ID and the SMT width of its topology leaves, compared
/// with the firmware `topology`.
pub fn set_identities(ids: &[Option<(u32, u32)>], topology: &Topology) {
    if let Some(checker) = CHECKER.get() {
        let ids: Vec<Option<Identity>> = ids
            .iter()
            .map(|id| id.map(|(apic_id, smt_shift)| Identity::X86 { apic_id, smt_shift }))
            .collect();
        checker.set_identities(ids, topology);
    }
}

/// `asid` now belongs to `domain`.
pub fn asid_given(asid: u32, domain: u32) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.tag_given(asid, domain);
    }
}

/// `asid` is free again.
pub fn asid_returned(asid: u32) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.tag_returned(asid);
    }
}

/// `cpu` is about to VMRUN a VMCB whose guest ASID is `asid`.
pub fn entering(cpu: usize, asid: u32) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.entering(cpu, timer::tsc(), asid);
    }
}

/// `cpu` made a context switch: it holds nothing until it enters again.
pub fn switched(cpu: usize) {
    if let Some(checker) = CHECKER.get() {
        checker.logs.switched(cpu, timer::tsc());
    }
}

/// Checks the switches logged since the last check and logs the totals.
pub fn check() {
    let Some(checker) = CHECKER.get() else { return };
    let groups = schedule::with_system(|s, _| checker.groups(s)).unwrap_or_default();
    checker.logs.check_and_log(&groups);
}
