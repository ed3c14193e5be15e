//! The co-residency checker on this architecture: every CPU logs its context
//! switches (the TSC as the shared clock) into [`hv::coresidency::SwitchLogs`],
//! and the boot CPU periodically checks the logs of every shared resource of
//! the scheduler and logs the result. The QEMU tests read that line.

use hv::coresidency::{SwitchLogs, shared_resources};
use platform::arch::x86_64::timer;
use sched::MAX_CPUS;
use spin::Once;

use super::schedule;

static LOGS: Once<SwitchLogs> = Once::new();

/// Allocates the logs; call once on the boot CPU before guests run.
pub fn init(cpus: usize) {
    LOGS.call_once(|| SwitchLogs::new(cpus.min(MAX_CPUS)));
}

/// Logs that `cpu` now holds `domain` (or idle). Only `cpu` itself calls this.
pub fn record(cpu: usize, domain: Option<u32>) {
    if let Some(logs) = LOGS.get() {
        logs.record(cpu, timer::tsc(), domain);
    }
}

/// Checks the switches logged since the last check and logs the totals.
pub fn check() {
    let Some(logs) = LOGS.get() else { return };
    let groups = schedule::with_system(|s, _| shared_resources(s)).unwrap_or_default();
    logs.check_and_log(&groups);
}
