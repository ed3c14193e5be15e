//! The `pools` workload's wording: pool descriptions and the outcome of one
//! `POOL_OP` against what it should give, as the console lines say them.

use core::fmt;

use guest_abi::{CallError, Granularity, HvError, PoolInfo, Regs, Scheduler};

/// The scheduler's name as configs spell it.
pub fn scheduler_name(s: Scheduler) -> &'static str {
    match s {
        Scheduler::Credit2 => "credit2",
        Scheduler::Credit => "credit",
        Scheduler::Null => "null",
        Scheduler::Rt => "rt",
        Scheduler::Arinc653 => "arinc653",
    }
}

/// The granularity's name as configs spell it.
pub fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::Cpu => "cpu",
        Granularity::Core => "core",
        Granularity::Cluster => "cluster",
        Granularity::Socket => "socket",
    }
}

/// One pool as the list prints it:
/// `pool ID: SCHED GRAN granularity, N CPUs (bitmap 0x..), D domains`.
pub struct Described(pub PoolInfo);

impl fmt::Display for Described {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = &self.0;
        write!(
            f,
            "pool {}: {} {} granularity, {} CPUs (bitmap {:#x}), {} domains",
            info.id,
            scheduler_name(info.scheduler),
            granularity_name(info.granularity),
            info.cpus,
            info.cpu_bitmap,
            info.domains
        )
    }
}

/// How one operation went, against the error it had to give (if any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It had to succeed and did.
    Done,
    /// It had to be refused with this error and was.
    RefusedAsExpected(HvError),
    /// It had to be refused with this error but succeeded.
    SucceededUnexpectedly(HvError),
    /// It failed, with another error than the one it had to give (or when it
    /// had to succeed).
    Failed(CallError),
}

impl Outcome {
    /// Judges `result` against `expect` (None: it must succeed).
    pub fn of(result: &Result<Regs, CallError>, expect: Option<HvError>) -> Self {
        match (result, expect) {
            (Ok(_), None) => Self::Done,
            (Err(CallError::Hv(e)), Some(want)) if *e == want => Self::RefusedAsExpected(want),
            (Ok(_), Some(want)) => Self::SucceededUnexpectedly(want),
            (Err(e), _) => Self::Failed(*e),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Done => write!(f, "ok"),
            Self::RefusedAsExpected(e) => write!(f, "refused ({e}), as expected"),
            Self::SucceededUnexpectedly(want) => write!(f, "succeeded, expected {want}"),
            Self::Failed(e) => write!(f, "failed ({e})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_against_what_was_expected() {
        let ok: Result<Regs, CallError> = Ok([0; 4]);
        let busy = Err(CallError::Hv(HvError::Busy));
        let odd = Err(CallError::Unknown(-99));
        assert_eq!(Outcome::of(&ok, None), Outcome::Done);
        assert_eq!(Outcome::of(&ok, None).to_string(), "ok");
        let refused = Outcome::of(&busy, Some(HvError::Busy));
        assert_eq!(refused, Outcome::RefusedAsExpected(HvError::Busy));
        assert_eq!(refused.to_string(), "refused (BUSY (-5)), as expected");
        let wrong = Outcome::of(&busy, Some(HvError::NotFound));
        assert_eq!(wrong.to_string(), "failed (BUSY (-5))");
        assert_eq!(Outcome::of(&busy, None).to_string(), "failed (BUSY (-5))");
        assert_eq!(
            Outcome::of(&ok, Some(HvError::NotFound)).to_string(),
            "succeeded, expected NOT_FOUND (-4)"
        );
        assert_eq!(
            Outcome::of(&odd, None).to_string(),
            "failed (unknown error (-99))"
        );
    }

    #[test]
    fn a_pool_described_as_the_tests_match_it() {
        let info = PoolInfo {
            id: 2,
            scheduler: Scheduler::Credit2,
            granularity: Granularity::Core,
            cpus: 2,
            domains: 1,
            cpu_bitmap: 0xc0,
        };
        assert_eq!(
            Described(info).to_string(),
            "pool 2: credit2 core granularity, 2 CPUs (bitmap 0xc0), 1 domains"
        );
        let names: Vec<_> = [
            Scheduler::Credit2,
            Scheduler::Credit,
            Scheduler::Null,
            Scheduler::Rt,
            Scheduler::Arinc653,
        ]
        .into_iter()
        .map(scheduler_name)
        .collect();
        assert_eq!(names, ["credit2", "credit", "null", "rt", "arinc653"]);
        let names: Vec<_> = [
            Granularity::Cpu,
            Granularity::Core,
            Granularity::Cluster,
            Granularity::Socket,
        ]
        .into_iter()
        .map(granularity_name)
        .collect();
        assert_eq!(names, ["cpu", "core", "cluster", "socket"]);
    }
}
