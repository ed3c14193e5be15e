//! Hypercall dispatch: guest calls (see the `guest-abi` crate) to hypervisor actions.
//!
//! The arch glue traps `HVC #imm` ([`crate::arm::trap::Exit::Hvc`]), asks
//! [`route`] which service the call is for, and for the hypervisor's own ABI
//! calls [`dispatch`] with the caller's identity, its registers and a
//! [`HypercallHandler`] that reaches the rest of the hypervisor (console,
//! scheduler, cpupools). [`dispatch`] decodes and validates the registers with
//! `guest-abi` (so the guest's and the hypervisor's view of the ABI are the
//! same code), checks the caller's rights, calls the handler, and returns the
//! registers to write back plus what the scheduler must do. It never panics on
//! guest input: unknown ids answer NOT_SUPPORTED, bad arguments
//! INVALID_PARAMETER, missing rights DENIED.

use core::ops::Range;

use guest_abi::{
    Args, Call, ConsoleChunk, Function, HVC_IMMEDIATE, HvError, PoolOp, Regs, ReportLine,
    SchedStats, StatsScope, VERSION_MAJOR, VERSION_MINOR, WakeReason, encode_return, version_value,
};

/// The decoded, authorised call [`dispatch`] hands to the handler (the ABI's
/// own decoded form).
pub type Hypercall = Call;

/// Which guest-physical addresses (IPAs) are the domain's RAM. PSCI entry
/// points (and any future hypercall that takes a guest pointer) must lie
/// inside it. The ABI v1.0 passes console bytes inline, so no current
/// hypercall takes a pointer.
pub trait GuestRamMap {
    /// Whether all of `[ipa, ipa + len)` is guest RAM (false if it overflows).
    fn contains(&self, ipa: u64, len: u64) -> bool;
}

impl GuestRamMap for Range<u64> {
    fn contains(&self, ipa: u64, len: u64) -> bool {
        match ipa.checked_add(len) {
            Some(end) => ipa >= self.start && end <= self.end,
            None => false,
        }
    }
}

impl GuestRamMap for [Range<u64>] {
    fn contains(&self, ipa: u64, len: u64) -> bool {
        self.iter().any(|r| GuestRamMap::contains(r, ipa, len))
    }
}

/// Which service an `HVC`/`SMC` from a guest is for (SMCCC owning entities,
/// Arm DEN 0028 table 6-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// PSCI or the SMCCC architecture calls: [`crate::arm::vpsci::VPsci::call`].
    Psci,
    /// The hypervisor's own ABI: [`dispatch`].
    Hypervisor,
    /// Nothing answers it: write `x0` = NOT_SUPPORTED (-1, the same value in
    /// PSCI, SMCCC and this ABI) and resume.
    NotSupported,
}

/// Routes a trapped call by its immediate and function id (`x0`). SMCCC calls
/// use immediate 0; any other immediate is not ours.
pub fn route(imm: u16, x0: u64) -> Service {
    if imm != HVC_IMMEDIATE {
        Service::NotSupported
    } else if crate::arm::vpsci::is_psci_or_arch_call(x0) {
        Service::Psci
    } else if Function::try_from(x0).is_ok() {
        Service::Hypervisor
    } else {
        Service::NotSupported
    }
}

/// Who is calling, and what it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The calling domain's id.
    pub domain: u32,
    /// The calling vCPU's index within its domain.
    pub vcpu: u32,
    /// A privileged (control) domain: may use `POOL_OP`.
    pub privileged: bool,
    /// Configured for tests: may use the test hooks (`0x80..`).
    pub test_hooks: bool,
}

/// What the scheduler glue does after the registers are written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HypercallAction {
    /// Resume the caller.
    Resume,
    /// Resume later: give up the rest of the time slice, stay runnable.
    Yield,
    /// Block the caller until an interrupt is pending for it, something wakes
    /// it, or `timeout_ns` passes (`None`: no timeout). Its `x0` is written
    /// when it wakes, with [`wake_regs`]; the outcome's `regs` are not used.
    Block {
        /// The timeout in nanoseconds.
        timeout_ns: Option<u64>,
    },
}

/// The result of one hypercall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HypercallOutcome {
    /// The values for the caller's `x0..=x3`.
    pub regs: Regs,
    /// What to do next.
    pub action: HypercallAction,
}

/// The registers for a vCPU woken from [`HypercallAction::Block`].
pub const fn wake_regs(reason: WakeReason) -> Regs {
    [reason.value(), 0, 0, 0]
}

/// The parts of the hypervisor a hypercall reaches. The glue implements it;
/// tests implement it with a recorder.
pub trait HypercallHandler {
    /// Writes `bytes` to the caller's console (its `[domN]` line buffer).
    fn console_write(&mut self, caller: &Caller, bytes: &[u8]);
    /// Scheduling statistics of the calling vCPU or its domain.
    fn sched_stats(&mut self, caller: &Caller, scope: StatsScope) -> Result<SchedStats, HvError>;
    /// A cpupool operation (the caller is privileged); returns `x0..=x3`.
    fn pool_op(&mut self, caller: &Caller, op: PoolOp) -> Result<Regs, HvError>;
    /// Logs one test report line.
    fn test_report(&mut self, line: &ReportLine);
    /// Pauses (`pause`) or unpauses the caller's sibling vCPU `sibling`; must
    /// answer [`HvError::Denied`] if it is not in the caller's sched unit.
    fn pause_sibling(&mut self, caller: &Caller, sibling: u32, pause: bool) -> Result<(), HvError>;
}

/// `SCHED_STATS` for a domain: the run time and dispatches of the sched
/// units of `vcpus` (a unit's figures count once per vCPU asked about, as
/// the vCPUs of a unit run together), and the vCPU count. Shared by the
/// arch glue's [`HypercallHandler::sched_stats`].
pub fn domain_sched_stats(system: &sched::System, vcpus: &[sched::VcpuId]) -> SchedStats {
    let mut total = SchedStats::default();
    for &v in vcpus {
        if let Some(info) = system.vcpu_info(v)
            && let Some(unit) = system.unit_stats(info.unit)
        {
            total.runtime_ns += unit.runtime_ns;
            total.dispatches += unit.dispatches;
        }
    }
    total.vcpus = vcpus.len() as u64;
    total
}

/// Checks that `caller` may use `function` at all (before its arguments are
/// looked at, so an unprivileged domain learns nothing about them).
pub fn authorise(caller: &Caller, function: Function) -> Result<(), HvError> {
    match function {
        Function::PoolOp if !caller.privileged => Err(HvError::Denied),
        f if f.is_test_hook() && !caller.test_hooks => Err(HvError::Denied),
        _ => Ok(()),
    }
}

/// Decodes a trapped call's `x0` and `x1..=x5` into an authorised
/// [`Hypercall`]: [`HvError::NotSupported`] for an unknown id,
/// [`HvError::Denied`] for a call the caller may not make,
/// [`HvError::InvalidParameter`] for bad or non-zero reserved arguments
/// (e.g. a console length above 24).
pub fn decode(caller: &Caller, x0: u64, args: Args) -> Result<Hypercall, HvError> {
    let function = Function::try_from(x0)?;
    authorise(caller, function)?;
    let call = Call::decode(x0, args)?;
    if let Call::TestPauseSibling { vcpu } | Call::TestUnpauseSibling { vcpu } = call {
        // A vCPU is not its own sibling (pausing oneself would never return).
        if vcpu == caller.vcpu {
            return Err(HvError::Denied);
        }
    }
    Ok(call)
}

/// Handles one hypercall from `caller` with registers `x0` and `x1..=x5`.
pub fn dispatch(
    caller: &Caller,
    x0: u64,
    args: Args,
    handler: &mut impl HypercallHandler,
) -> HypercallOutcome {
    let resume = |result: Result<Regs, HvError>| HypercallOutcome {
        regs: encode_return(result),
        action: HypercallAction::Resume,
    };
    let call = match decode(caller, x0, args) {
        Ok(call) => call,
        Err(error) => return resume(Err(error)),
    };
    match call {
        Call::Version => resume(Ok([version_value(VERSION_MAJOR, VERSION_MINOR), 0, 0, 0])),
        Call::ConsoleWrite(chunk) => resume(Ok(console_write(caller, &chunk, handler))),
        Call::Yield => HypercallOutcome {
            regs: [0; 4],
            action: HypercallAction::Yield,
        },
        Call::Block { timeout_ns } => HypercallOutcome {
            regs: [0; 4],
            action: HypercallAction::Block {
                timeout_ns: (timeout_ns != 0).then_some(timeout_ns),
            },
        },
        Call::SchedStats(scope) => resume(handler.sched_stats(caller, scope).map(|s| s.to_regs())),
        Call::PoolOp(op) => resume(handler.pool_op(caller, op).and_then(|regs| {
            // A handler bug must not hand the guest a success that reads as
            // an error code.
            if (regs[0] as i64) < 0 {
                Err(HvError::InvalidParameter)
            } else {
                Ok(regs)
            }
        })),
        Call::TestReport(report) => {
            handler.test_report(&ReportLine {
                domain: caller.domain,
                vcpu: caller.vcpu,
                report,
            });
            resume(Ok([0; 4]))
        }
        Call::TestPauseSibling { vcpu } => {
            resume(handler.pause_sibling(caller, vcpu, true).map(|()| [0; 4]))
        }
        Call::TestUnpauseSibling { vcpu } => {
            resume(handler.pause_sibling(caller, vcpu, false).map(|()| [0; 4]))
        }
    }
}

fn console_write(
    caller: &Caller,
    chunk: &ConsoleChunk,
    handler: &mut impl HypercallHandler,
) -> Regs {
    let bytes = chunk.as_bytes();
    handler.console_write(caller, bytes);
    [bytes.len() as u64, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};
    use alloc::vec;
    use alloc::vec::Vec;
    use guest_abi::{Granularity, PoolOpCode, Scheduler, Tag, Unit};

    #[derive(Default)]
    struct Recorder {
        console: Vec<u8>,
        reports: Vec<String>,
        pool_ops: Vec<PoolOp>,
        pauses: Vec<(u32, bool)>,
        /// vCPUs in the caller's unit.
        unit: Vec<u32>,
    }

    impl HypercallHandler for Recorder {
        fn console_write(&mut self, _caller: &Caller, bytes: &[u8]) {
            self.console.extend_from_slice(bytes);
        }
        fn sched_stats(
            &mut self,
            _caller: &Caller,
            scope: StatsScope,
        ) -> Result<SchedStats, HvError> {
            Ok(SchedStats {
                runtime_ns: 1000,
                dispatches: 7,
                vcpus: if scope == StatsScope::Vcpu { 1 } else { 4 },
            })
        }
        fn pool_op(&mut self, _caller: &Caller, op: PoolOp) -> Result<Regs, HvError> {
            self.pool_ops.push(op);
            match op {
                PoolOp::Create { .. } => Ok([0, 3, 0, 0]),
                PoolOp::Destroy { pool: 0 } => Err(HvError::Busy),
                _ => Ok([0; 4]),
            }
        }
        fn test_report(&mut self, line: &ReportLine) {
            self.reports.push(line.to_string());
        }
        fn pause_sibling(
            &mut self,
            _caller: &Caller,
            sibling: u32,
            pause: bool,
        ) -> Result<(), HvError> {
            if !self.unit.contains(&sibling) {
                return Err(HvError::Denied);
            }
            self.pauses.push((sibling, pause));
            Ok(())
        }
    }

    const GUEST: Caller = Caller {
        domain: 2,
        vcpu: 1,
        privileged: false,
        test_hooks: false,
    };
    const CONTROL: Caller = Caller {
        domain: 0,
        vcpu: 0,
        privileged: true,
        test_hooks: false,
    };
    const TESTER: Caller = Caller {
        domain: 3,
        vcpu: 0,
        privileged: false,
        test_hooks: true,
    };

    fn run(caller: &Caller, call: Call, handler: &mut Recorder) -> HypercallOutcome {
        let (w0, args) = call.encode();
        dispatch(caller, w0 as u64, args, handler)
    }

    fn error(e: HvError) -> HypercallOutcome {
        HypercallOutcome {
            regs: [e.to_x0(), 0, 0, 0],
            action: HypercallAction::Resume,
        }
    }

    #[test]
    fn version() {
        let out = run(&GUEST, Call::Version, &mut Recorder::default());
        assert_eq!(out.regs, [0x0001_0000, 0, 0, 0]);
        assert_eq!(out.action, HypercallAction::Resume);
    }

    #[test]
    fn console_write_passes_bytes_and_returns_the_count() {
        let mut rec = Recorder::default();
        let (chunk, rest) = ConsoleChunk::split(b"hello from a guest, with more than 24 bytes");
        let out = run(&GUEST, Call::ConsoleWrite(chunk), &mut rec);
        assert_eq!(out.regs, [24, 0, 0, 0]);
        assert_eq!(rec.console, b"hello from a guest, with");
        let (chunk, _) = ConsoleChunk::split(rest);
        assert_eq!(run(&GUEST, Call::ConsoleWrite(chunk), &mut rec).regs[0], 19);
        assert_eq!(rec.console, b"hello from a guest, with more than 24 bytes");
    }

    #[test]
    fn console_write_length_bound_and_garbage_past_the_length() {
        let mut rec = Recorder::default();
        let id = Function::ConsoleWrite.id() as u64;
        // Length 25: more than three registers hold.
        assert_eq!(
            dispatch(&GUEST, id, [25, 0, 0, 0, 0], &mut rec),
            error(HvError::InvalidParameter)
        );
        assert_eq!(
            dispatch(&GUEST, id, [u64::MAX, 0, 0, 0, 0], &mut rec),
            error(HvError::InvalidParameter)
        );
        // Length 1 but a second byte present.
        assert_eq!(
            dispatch(&GUEST, id, [1, 0x4241, 0, 0, 0], &mut rec),
            error(HvError::InvalidParameter)
        );
        assert!(rec.console.is_empty(), "nothing written on a bad call");
        // Length 0 is a valid no-op.
        assert_eq!(dispatch(&GUEST, id, [0; 5], &mut rec).regs, [0; 4]);
    }

    #[test]
    fn yield_and_block() {
        let mut rec = Recorder::default();
        assert_eq!(
            run(&GUEST, Call::Yield, &mut rec).action,
            HypercallAction::Yield
        );
        assert_eq!(
            run(&GUEST, Call::Block { timeout_ns: 0 }, &mut rec).action,
            HypercallAction::Block { timeout_ns: None }
        );
        assert_eq!(
            run(&GUEST, Call::Block { timeout_ns: 5_000 }, &mut rec).action,
            HypercallAction::Block {
                timeout_ns: Some(5_000)
            }
        );
        assert_eq!(wake_regs(WakeReason::Timeout), [2, 0, 0, 0]);
        // Reserved argument of YIELD not zero.
        let id = Function::Yield.id() as u64;
        assert_eq!(
            dispatch(&GUEST, id, [0, 0, 0, 0, 1], &mut rec),
            error(HvError::InvalidParameter)
        );
    }

    #[test]
    fn sched_stats() {
        let mut rec = Recorder::default();
        let out = run(&GUEST, Call::SchedStats(StatsScope::Domain), &mut rec);
        assert_eq!(out.regs, [0, 1000, 7, 4]);
        let id = Function::SchedStats.id() as u64;
        assert_eq!(
            dispatch(&GUEST, id, [9, 0, 0, 0, 0], &mut rec),
            error(HvError::InvalidParameter)
        );
    }

    #[test]
    fn pool_op_is_privileged() {
        let mut rec = Recorder::default();
        let create = Call::PoolOp(PoolOp::Create {
            scheduler: Scheduler::Credit2,
            granularity: Granularity::Core,
        });
        assert_eq!(run(&GUEST, create, &mut rec), error(HvError::Denied));
        assert_eq!(run(&TESTER, create, &mut rec), error(HvError::Denied));
        // Denied before the arguments are even looked at.
        let id = Function::PoolOp.id() as u64;
        assert_eq!(
            dispatch(&GUEST, id, [99, 0, 0, 0, 0], &mut rec),
            error(HvError::Denied)
        );
        assert!(rec.pool_ops.is_empty());
        assert_eq!(run(&CONTROL, create, &mut rec).regs, [0, 3, 0, 0]);
        assert_eq!(
            run(
                &CONTROL,
                Call::PoolOp(PoolOp::Destroy { pool: 0 }),
                &mut rec
            ),
            error(HvError::Busy)
        );
        assert_eq!(rec.pool_ops.len(), 2);
        // Bad arguments from a privileged caller.
        assert_eq!(
            dispatch(
                &CONTROL,
                id,
                [PoolOpCode::Create.value(), 77, 0, 0, 0],
                &mut rec
            ),
            error(HvError::InvalidParameter)
        );
        assert_eq!(
            dispatch(
                &CONTROL,
                id,
                [PoolOpCode::Destroy.value(), 1 << 32, 0, 0, 0],
                &mut rec
            ),
            error(HvError::InvalidParameter)
        );
    }

    #[test]
    fn pool_op_handler_returning_a_negative_success_is_caught() {
        struct Bad;
        impl HypercallHandler for Bad {
            fn console_write(&mut self, _: &Caller, _: &[u8]) {}
            fn sched_stats(&mut self, _: &Caller, _: StatsScope) -> Result<SchedStats, HvError> {
                Err(HvError::NotFound)
            }
            fn pool_op(&mut self, _: &Caller, _: PoolOp) -> Result<Regs, HvError> {
                Ok([u64::MAX, 0, 0, 0])
            }
            fn test_report(&mut self, _: &ReportLine) {}
            fn pause_sibling(&mut self, _: &Caller, _: u32, _: bool) -> Result<(), HvError> {
                Ok(())
            }
        }
        let (w0, args) = Call::PoolOp(PoolOp::List { from: 0 }).encode();
        assert_eq!(
            dispatch(&CONTROL, w0 as u64, args, &mut Bad),
            error(HvError::InvalidParameter)
        );
        let (w0, args) = Call::SchedStats(StatsScope::Vcpu).encode();
        assert_eq!(
            dispatch(&GUEST, w0 as u64, args, &mut Bad),
            error(HvError::NotFound)
        );
    }

    #[test]
    fn test_hooks_need_a_test_domain() {
        let mut rec = Recorder {
            unit: vec![0, 1],
            ..Recorder::default()
        };
        let report = Call::TestReport(guest_abi::Report {
            tag: Tag::new("lat_p99").unwrap(),
            value: 1234,
            unit: Unit::Ticks,
        });
        assert_eq!(run(&GUEST, report, &mut rec), error(HvError::Denied));
        assert_eq!(run(&CONTROL, report, &mut rec), error(HvError::Denied));
        assert_eq!(run(&TESTER, report, &mut rec).regs, [0; 4]);
        assert_eq!(
            rec.reports,
            ["test-report: dom=3 vcpu=0 tag=lat_p99 value=1234 unit=ticks"]
        );
        assert_eq!(
            run(&GUEST, Call::TestPauseSibling { vcpu: 0 }, &mut rec),
            error(HvError::Denied)
        );
        assert_eq!(
            run(&TESTER, Call::TestPauseSibling { vcpu: 1 }, &mut rec).regs,
            [0; 4]
        );
        assert_eq!(
            run(&TESTER, Call::TestUnpauseSibling { vcpu: 1 }, &mut rec).regs,
            [0; 4]
        );
        assert_eq!(rec.pauses, [(1, true), (1, false)]);
        // Not in the unit (the handler says so) and oneself (refused here).
        assert_eq!(
            run(&TESTER, Call::TestPauseSibling { vcpu: 5 }, &mut rec),
            error(HvError::Denied)
        );
        assert_eq!(
            run(&TESTER, Call::TestPauseSibling { vcpu: 0 }, &mut rec),
            error(HvError::Denied)
        );
        assert_eq!(rec.pauses.len(), 2);
        // A bad tag.
        let id = Function::TestReport.id() as u64;
        assert_eq!(
            dispatch(
                &TESTER,
                id,
                [u64::from_le_bytes(*b"BAD\0\0\0\0\0"), 1, 0, 0, 0],
                &mut rec
            ),
            error(HvError::InvalidParameter)
        );
    }

    #[test]
    fn unknown_numbers_are_not_supported() {
        let mut rec = Recorder::default();
        for x0 in [
            0xC600_0006,
            0xC600_007F,
            0xC600_FFFF,
            0xC700_0000,
            0x8600_0000,
            0,
            u64::MAX,
        ] {
            assert_eq!(
                dispatch(&CONTROL, x0, [0; 5], &mut rec),
                error(HvError::NotSupported),
                "{x0:#x}"
            );
        }
        // x0 = -1 for NOT_SUPPORTED, as PSCI.
        assert_eq!(error(HvError::NotSupported).regs[0], u64::MAX);
    }

    #[test]
    fn routing() {
        use crate::arm::vpsci::function::{CPU_ON_64, PSCI_VERSION, SMCCC_VERSION};
        assert_eq!(route(0, PSCI_VERSION as u64), Service::Psci);
        assert_eq!(route(0, CPU_ON_64 as u64), Service::Psci);
        assert_eq!(route(0, SMCCC_VERSION as u64), Service::Psci);
        assert_eq!(
            route(0, Function::ConsoleWrite.id() as u64),
            Service::Hypervisor
        );
        // The SVE hint bit and the upper half of x0 are ignored.
        assert_eq!(route(0, 0xFFFF_0000_C601_0002), Service::Hypervisor);
        assert_eq!(route(0, 0xC600_0099), Service::NotSupported);
        assert_eq!(route(1, PSCI_VERSION as u64), Service::NotSupported);
        assert_eq!(route(0, 0x8200_0000), Service::NotSupported);
    }

    #[test]
    fn guest_memory_bounds() {
        let ram = 0x4000_0000..0x4000_1000u64;
        assert!(GuestRamMap::contains(&ram, 0x4000_0000, 0x1000));
        assert!(!GuestRamMap::contains(&ram, 0x4000_0001, 0x1000));
        assert!(!GuestRamMap::contains(&ram, 0x3fff_ffff, 2));
        assert!(!GuestRamMap::contains(&ram, u64::MAX, 2), "overflow");
        let banks = [0x1000..0x2000u64, 0x8000..0x9000];
        assert!(GuestRamMap::contains(&banks[..], 0x8ff0, 0x10));
        assert!(
            !GuestRamMap::contains(&banks[..], 0x1ff0, 0x20),
            "not across a hole"
        );
    }

    #[test]
    fn sched_stats_add_up_the_domains_units() {
        use sched::lockstep::Lockstep;
        use sched::{Granularity, Placement, SchedParams, System, SystemConfig, Topology, VcpuId};
        let system = System::new(
            Topology::uniform(1, 1, 2, 2),
            SystemConfig::default(),
            sched::schedulers::create,
        );
        let mut m = Lockstep::new(system);
        m.system
            .boot_pool0("credit2", Granularity::Cpu, Placement::Fixed, &m.platform)
            .unwrap();
        let pool = m.system.pools().next().unwrap();
        let domain = m
            .system
            .domain_create(pool, 2, SchedParams::default(), &m.platform)
            .unwrap();
        let vcpus = m.system.domain_vcpus(domain).unwrap().to_vec();
        let idle = domain_sched_stats(&m.system, &vcpus);
        assert_eq!((idle.vcpus, idle.runtime_ns, idle.dispatches), (2, 0, 0));
        for &v in &vcpus {
            m.system.vcpu_wake(v, &m.platform).unwrap();
        }
        m.advance(50_000_000, 10_000).unwrap();
        let busy = domain_sched_stats(&m.system, &vcpus);
        assert_eq!(busy.vcpus, 2);
        assert!(busy.dispatches >= 2, "{busy:?}");
        assert!(busy.runtime_ns > 0, "{busy:?}");
        // vCPUs the scheduler does not know add nothing but are counted.
        let unknown = domain_sched_stats(&m.system, &[VcpuId(200)]);
        assert_eq!((unknown.vcpus, unknown.dispatches), (1, 0));
    }
}
