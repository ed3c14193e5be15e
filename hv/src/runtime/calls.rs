//! The hypervisor's side of the hypercalls for one calling domain, written
//! once for both back-ends: each decodes its registers
//! (`hv::hypercall::dispatch`) and hands the authorised call to a
//! [`DomainCalls`].

use alloc::vec::Vec;

use guest_abi::{HvError, PoolOp, Regs, ReportLine, SchedStats, StatsScope};
use log::info;
use sched::{DomainId, VcpuId};

use super::{Arch, Runtime};
use crate::hypercall::{self, Caller, HypercallHandler};

/// Domain `domain`'s hypercalls, carried out on `runtime`.
pub struct DomainCalls<'a, A: Arch> {
    runtime: &'a Runtime<A>,
    domain: DomainId,
}

impl<'a, A: Arch> DomainCalls<'a, A> {
    /// The calls of `domain`.
    pub fn new(runtime: &'a Runtime<A>, domain: DomainId) -> Self {
        Self { runtime, domain }
    }

    /// The domain's vCPUs, by index (empty if the scheduler no longer
    /// knows it).
    fn vcpus(&self) -> Vec<VcpuId> {
        self.runtime
            .with_domain(self.domain, |s, _| {
                s.domain_vcpus(self.domain).map(<[VcpuId]>::to_vec)
            })
            .flatten()
            .unwrap_or_default()
    }
}

impl<A: Arch> HypercallHandler for DomainCalls<'_, A> {
    fn console_write(&mut self, _caller: &Caller, bytes: &[u8]) {
        self.runtime.arch.domain_console_write(self.domain, bytes);
    }

    fn sched_stats(&mut self, _caller: &Caller, _scope: StatsScope) -> Result<SchedStats, HvError> {
        self.runtime
            .with_domain(self.domain, |s, _| {
                s.domain_vcpus(self.domain)
                    .map(|vcpus| hypercall::domain_sched_stats(s, vcpus))
            })
            .flatten()
            .ok_or(HvError::NotSupported)
    }

    fn pool_op(&mut self, _caller: &Caller, op: PoolOp) -> Result<Regs, HvError> {
        self.runtime.pool_hypercall(self.domain, op)
    }

    fn test_report(&mut self, line: &ReportLine) {
        info!("dom{} report: {line}", self.domain.0);
    }

    fn pause_sibling(&mut self, caller: &Caller, sibling: u32, pause: bool) -> Result<(), HvError> {
        let vcpus = self.vcpus();
        self.runtime
            .pause_sibling(self.domain, &vcpus, caller.vcpu, sibling, pause)
    }
}
