//! The scheduler's side of a domain restart (console `restart`, a guest's
//! own reset, `POOL_OP RestartDomain`), the same on both architectures:
//! every vCPU held off its CPU while the back-end rebuilds the domain, then
//! vCPU 0 running and the others holding the one pause a powered-off
//! secondary holds (PSCI `CPU_OFF` on ARM, an INIT on x86), so only their
//! guest's `CPU_ON` or STARTUP starts them.

use log::{error, info};
use sched::{DomainId, SystemError, VcpuId};

use super::{Arch, Runtime};

impl<A: Arch> Runtime<A> {
    /// Pauses every vCPU of a domain about to be restarted; the CPUs
    /// running them are kicked and switch them out.
    pub fn pause_for_restart(&self, vcpus: &[VcpuId]) -> Result<(), SystemError> {
        self.with_system(|s, p| {
            vcpus
                .iter()
                .try_for_each(|&v| s.vcpu_pause(v, p).map(|_| ()))
        })
        .unwrap_or(Ok(()))
    }

    /// After the back-end rebuilt domain `id` (its vCPUs, by index, in
    /// `vcpus`): a console pause and any test pause do not outlive the
    /// restart (as `xl reboot`), secondaries keep exactly one pause, and
    /// vCPU 0 is woken.
    ///
    /// The restart is logged first: once vCPU 0 is woken its guest may
    /// print at once, and the log's order must be the order things happened
    /// in (a reader, or the console scenarios' ordered checks, sees the
    /// restart before the guest's first line).
    pub fn start_restarted(&self, id: DomainId, name: &str, vcpus: &[VcpuId]) {
        info!("domain {} ({name}): restarted from its image", id.0);
        if let Err(e) = self.resume_restarted(id, vcpus) {
            error!("domain {}: restart: cannot start vCPU 0: {e}", id.0);
        }
    }

    /// [`Runtime::start_restarted`] without its log lines (the back-ends
    /// call that one, so a restart is never started unlogged).
    pub(super) fn resume_restarted(
        &self,
        id: DomainId,
        vcpus: &[VcpuId],
    ) -> Result<(), SystemError> {
        self.with_system(|s, p| {
            if s.domain_paused(id) == Some(true) {
                s.domain_unpause(id, p)?;
            }
            for (index, &v) in vcpus.iter().enumerate() {
                let keep = u32::from(index != 0);
                let held = s.vcpu_info(v).map_or(0, |i| i.pause_count);
                for _ in keep..held {
                    s.vcpu_unpause(v, p)?;
                }
                if s.vcpu_info(v).is_some_and(|i| i.test_paused) {
                    s.vcpu_test_unpause(v, p)?;
                }
            }
            match vcpus.first() {
                Some(&first) => s.vcpu_wake(first, p),
                None => Ok(()),
            }
        })
        .unwrap_or(Ok(()))
    }
}
