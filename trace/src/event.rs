//! What a trace records: one [`Event`] per thing the scheduler did on one
//! CPU. Kinds are named after xentrace's `TRC_SCHED_*` records where Xen has
//! one; their numbers are the text encoding's and never change meaning.

use core::fmt;

/// The `domain` of an event that names no domain (a switch to idle).
pub const IDLE_DOMAIN: u32 = u32::MAX;

/// The `domain` of a vCPU whose domain the recorder could not tell (never
/// equal to a real domain, so the overlap check treats it as a stranger).
pub const UNKNOWN_DOMAIN: u32 = u32::MAX - 1;

/// One recorded event. Which CPU it happened on is the ring (and the trace
/// line) it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The hypervisor's monotonic clock, in ns (the same on every CPU).
    pub time_ns: u64,
    /// What happened.
    pub kind: Kind,
    /// The domain (see [`Kind`] for what each kind puts here), or
    /// [`IDLE_DOMAIN`].
    pub domain: u32,
    /// The vCPU's index in its domain (see [`Kind`]).
    pub vcpu: u32,
    /// The kind's argument (see [`Kind`]).
    pub arg: u64,
}

/// What happened. The `domain`, `vcpu` and `arg` of each are documented per
/// variant; fields a kind does not use are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// `TRC_SCHED_SWITCH`: the CPU now holds vCPU `vcpu` of `domain`
    /// (`domain` = [`IDLE_DOMAIN`]: nothing, the idle context). Recorded
    /// before the new context is loaded and after the old one stopped.
    Switch = 1,
    /// `TRC_SCHED_WAKE`: vCPU `vcpu` of `domain` was woken (from any CPU).
    Wake = 2,
    /// `TRC_SCHED_BLOCK`: vCPU `vcpu` of `domain` blocked (WFI, HLT).
    Block = 3,
    /// `TRC_SCHED_YIELD`: vCPU `vcpu` of `domain` yielded.
    Yield = 4,
    /// A scheduling IPI (Xen's SCHEDULE_SOFTIRQ kick) sent; `arg`: the
    /// kicked CPUs 0-63 as a bit mask.
    KickSent = 5,
    /// A scheduling IPI received: the scheduler runs on this CPU.
    KickReceived = 6,
    /// `TRC_SCHED_TIMER`-like: the CPU's scheduling timer fired.
    TimerFire = 7,
    /// The CPU arrived at the rendezvous of resource `domain` (its master
    /// CPU) for generation `arg` and starts waiting for its siblings.
    RendezvousArrive = 8,
    /// The CPU's wait at resource `domain`'s rendezvous ended: `vcpu` is the
    /// [`Outcome`], `arg` the ns it waited.
    RendezvousDone = 9,
    /// A pool operation: `domain` is the pool, `vcpu` the [`PoolOp`] code,
    /// `arg` the CPU or domain it concerns.
    PoolOp = 10,
    /// A guest exit (off by default): `domain`/`vcpu` the exiting vCPU,
    /// `arg` the exit class the architecture defines.
    GuestExit = 11,
}

impl Kind {
    /// Every kind, in number order.
    pub const ALL: [Kind; 11] = [
        Kind::Switch,
        Kind::Wake,
        Kind::Block,
        Kind::Yield,
        Kind::KickSent,
        Kind::KickReceived,
        Kind::TimerFire,
        Kind::RendezvousArrive,
        Kind::RendezvousDone,
        Kind::PoolOp,
        Kind::GuestExit,
    ];

    /// The kind numbered `code` in the encoding.
    pub fn from_code(code: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u8 == code)
    }

    /// The class `trace start` selects it by.
    pub fn class(self) -> Class {
        match self {
            Kind::Switch => Class::Sched,
            Kind::Wake | Kind::Block | Kind::Yield => Class::Vcpu,
            Kind::KickSent | Kind::KickReceived | Kind::TimerFire => Class::Ipi,
            Kind::RendezvousArrive | Kind::RendezvousDone => Class::Rendezvous,
            Kind::PoolOp => Class::Ops,
            Kind::GuestExit => Class::Exits,
        }
    }

    /// A short name for viewers.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Switch => "switch",
            Kind::Wake => "wake",
            Kind::Block => "block",
            Kind::Yield => "yield",
            Kind::KickSent => "kick sent",
            Kind::KickReceived => "kick received",
            Kind::TimerFire => "timer",
            Kind::RendezvousArrive => "rendezvous arrive",
            Kind::RendezvousDone => "rendezvous done",
            Kind::PoolOp => "pool op",
            Kind::GuestExit => "guest exit",
        }
    }
}

/// How a rendezvous wait ended ([`Kind::RendezvousDone`]'s `vcpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Outcome {
    /// Every sibling arrived.
    Complete = 0,
    /// The wait passed its bound.
    TimedOut = 1,
    /// The switch was called off.
    Aborted = 2,
    /// A newer generation replaced it.
    Superseded = 3,
}

impl Outcome {
    /// The outcome numbered `code`.
    pub fn from_code(code: u32) -> Option<Outcome> {
        [
            Outcome::Complete,
            Outcome::TimedOut,
            Outcome::Aborted,
            Outcome::Superseded,
        ]
        .into_iter()
        .find(|o| *o as u32 == code)
    }
}

/// Pool operation codes ([`Kind::PoolOp`]'s `vcpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PoolOp {
    /// A pool was created.
    Create = 1,
    /// A pool was destroyed.
    Destroy = 2,
    /// CPU `arg` joined the pool.
    AddCpu = 3,
    /// CPU `arg` left the pool.
    RemoveCpu = 4,
    /// Domain `arg` moved into the pool.
    MoveDomain = 5,
}

/// The groups of kinds `trace start` turns on and off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// Context switches.
    Sched = 0,
    /// Wake, block, yield.
    Vcpu = 1,
    /// Kicks sent and received, timer fires.
    Ipi = 2,
    /// Rendezvous arrivals and ends.
    Rendezvous = 3,
    /// Pool operations.
    Ops = 4,
    /// Guest exits (many: off by default).
    Exits = 5,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 6] = [
        Class::Sched,
        Class::Vcpu,
        Class::Ipi,
        Class::Rendezvous,
        Class::Ops,
        Class::Exits,
    ];

    /// Its name on the console (`trace start sched,vcpu`).
    pub fn name(self) -> &'static str {
        match self {
            Class::Sched => "sched",
            Class::Vcpu => "vcpu",
            Class::Ipi => "ipi",
            Class::Rendezvous => "rendezvous",
            Class::Ops => "ops",
            Class::Exits => "exits",
        }
    }
}

/// A set of [`Class`]es, as the bit mask the rings test on every event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClassSet(pub u32);

impl ClassSet {
    /// Every class but [`Class::Exits`]: what `trace start` alone records.
    pub const DEFAULT: ClassSet = ClassSet(0b1_1111);
    /// Every class.
    pub const ALL: ClassSet = ClassSet(0b11_1111);

    /// Whether `class` is in the set.
    pub fn contains(self, class: Class) -> bool {
        self.0 & (1 << class as u8) != 0
    }

    /// Parses `all`, `default` or a comma-separated list of class names;
    /// the unknown name on failure.
    pub fn parse(list: &str) -> Result<ClassSet, &str> {
        match list {
            "all" => return Ok(ClassSet::ALL),
            "default" | "on" => return Ok(ClassSet::DEFAULT),
            _ => {}
        }
        let mut set = ClassSet(0);
        for name in list.split(',') {
            let class = Class::ALL
                .into_iter()
                .find(|c| c.name() == name)
                .ok_or(name)?;
            set.0 |= 1 << class as u8;
        }
        Ok(set)
    }
}

impl fmt::Display for ClassSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for class in Class::ALL.into_iter().filter(|c| self.contains(*c)) {
            if !first {
                f.write_str(",")?;
            }
            f.write_str(class.name())?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn every_kind_round_trips_its_code_and_has_a_class() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_code(kind as u8), Some(kind));
        }
        assert_eq!(Kind::from_code(0), None);
        assert_eq!(Kind::from_code(12), None);
    }

    #[test]
    fn class_lists_parse_and_print_back() {
        let set = ClassSet::parse("sched,rendezvous").unwrap();
        assert!(set.contains(Class::Sched) && set.contains(Class::Rendezvous));
        assert!(!set.contains(Class::Vcpu));
        assert_eq!(set.to_string(), "sched,rendezvous");
        assert_eq!(ClassSet::parse("sched,bogus"), Err("bogus"));
        assert!(!ClassSet::parse("default").unwrap().contains(Class::Exits));
        assert!(ClassSet::parse("all").unwrap().contains(Class::Exits));
        assert_eq!(ClassSet(0).to_string(), "none");
    }
}
