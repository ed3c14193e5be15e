//! An x86 vCPU's power state, as the local APIC's INIT and STARTUP IPIs and
//! HLT drive it (native semantics, as KVM emulates them; Intel SDM vol. 3,
//! 10.4.7.3 and 8.4, AMD APM vol. 2, 16.5):
//!
//! - A vCPU other than the first starts in **wait-for-SIPI**; a STARTUP
//!   with the paravirtual vector (`guest_abi::x86::SIPI_VECTOR`) starts it.
//! - INIT to a started vCPU puts it back in wait-for-SIPI: the glue takes it
//!   off its CPU and **holds** it with a scheduler pause (as PSCI `CPU_OFF`
//!   does on ARM, Xen's `_VPF_down`: a block alone would be undone by the
//!   next interrupt aimed at it), drops its pending interrupts and timer. A
//!   STARTUP then restarts it fresh in the boot state and drops the pause.
//!   INIT to a vCPU already waiting changes nothing; INIT to itself is
//!   refused (the sender could never be restarted by itself).
//! - STARTUP to a running vCPU is ignored, as hardware ignores a SIPI
//!   outside wait-for-SIPI.
//! - HLT with RFLAGS.IF = 0 halts until INIT or NMI: fixed interrupts stay
//!   pending in the virtual IRR and do not end it (Linux's `hlt_play_dead`).
//!   HLT with IF = 1 ends at the next interrupt. A latched NMI ends either.
//!
//! This module only decides; the arch glue carries out what it returns.

/// Where a vCPU is in its power life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Power {
    /// Waiting for its first STARTUP (a vCPU other than the first, after
    /// the domain's creation). Not scheduled: it is blocked.
    #[default]
    NotStarted,
    /// Started and running (or blocked in a HLT that interrupts end, or in
    /// the hypervisor's BLOCK call).
    Running,
    /// Started, then halted with interrupts disabled: only INIT or an NMI
    /// ends it.
    HaltedNoInterrupts,
    /// Sent INIT after it had started: off its CPU, holding one scheduler
    /// pause, until a STARTUP.
    WaitForSipi,
}

/// What an INIT to a vCPU asks the glue to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitOutcome {
    /// It was started: pause it (take it off its CPU and hold it), drop its
    /// pending interrupts and timer, log it.
    TakeOff,
    /// It already waits for STARTUP: nothing.
    AlreadyWaiting,
    /// INIT to the sending vCPU itself: refused with a warning.
    RefusedSelf,
}

/// What a STARTUP to a vCPU asks the glue to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupOutcome {
    /// Start it fresh in the boot state, once it has left the CPU that ran
    /// it; `held` says it holds the INIT pause, which the glue drops.
    Start {
        /// It was taken off by an INIT (holds a pause), not a first start.
        held: bool,
    },
    /// It is running: ignored, as hardware does.
    IgnoredRunning,
    /// Not the vector this hypervisor starts vCPUs at: ignored with a
    /// warning (see `guest_abi::x86`).
    WrongVector(u8),
}

/// What a HLT asks the glue to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HaltOutcome {
    /// IF = 1 and an interrupt is requested: HLT completes at once.
    Continue,
    /// IF = 1, nothing requested: block until an interrupt or its timer.
    BlockUntilInterrupt,
    /// IF = 0: block; interrupts do not end it, only INIT or an NMI.
    BlockUntilInit,
}

impl Power {
    /// The state of a domain's vCPU `index` at creation: the first runs.
    pub fn at_creation(index: u32) -> Self {
        if index == 0 {
            Self::Running
        } else {
            Self::NotStarted
        }
    }

    /// Whether it has started and not been sent INIT since (what
    /// `TEST_PAUSE_SIBLING` calls powered on).
    pub fn is_on(self) -> bool {
        matches!(self, Self::Running | Self::HaltedNoInterrupts)
    }

    /// Whether a fixed interrupt (an IPI, its timer) may wake it: only a
    /// started vCPU that did not halt with interrupts disabled.
    pub fn wakes_on_interrupt(self) -> bool {
        self == Self::Running
    }

    /// An INIT IPI to this vCPU; `from_itself`: the sender is this vCPU.
    pub fn init(&mut self, from_itself: bool) -> InitOutcome {
        if from_itself {
            return InitOutcome::RefusedSelf;
        }
        match self {
            Self::Running | Self::HaltedNoInterrupts => {
                *self = Self::WaitForSipi;
                InitOutcome::TakeOff
            }
            Self::NotStarted | Self::WaitForSipi => InitOutcome::AlreadyWaiting,
        }
    }

    /// A STARTUP IPI with `vector` to this vCPU; `required`: the only
    /// vector its domain's boot ABI takes (the test guest's paravirtual
    /// [`guest_abi::x86::SIPI_VECTOR`]), `None` when any vector is a real-mode start page.
    pub fn startup(&mut self, vector: u8, required: Option<u8>) -> StartupOutcome {
        if required.is_some_and(|r| r != vector) {
            return StartupOutcome::WrongVector(vector);
        }
        match self {
            Self::NotStarted => {
                *self = Self::Running;
                StartupOutcome::Start { held: false }
            }
            Self::WaitForSipi => {
                *self = Self::Running;
                StartupOutcome::Start { held: true }
            }
            Self::Running | Self::HaltedNoInterrupts => StartupOutcome::IgnoredRunning,
        }
    }

    /// An NMI was latched for this vCPU: whether it is to be woken (it runs
    /// or halted, whatever its RFLAGS.IF; a halt with interrupts disabled
    /// ends). Not before its STARTUP, as on hardware, where wait-for-SIPI
    /// blocks NMIs.
    pub fn nmi(&mut self) -> bool {
        match self {
            Self::Running => true,
            Self::HaltedNoInterrupts => {
                *self = Self::Running;
                true
            }
            Self::NotStarted | Self::WaitForSipi => false,
        }
    }

    /// This vCPU executed HLT with RFLAGS.IF = `interrupts_on`;
    /// `requested`: an interrupt is pending in its APIC; `nmi`: an NMI is
    /// latched. An INIT that raced with the HLT's exit wins: the vCPU stays
    /// in wait-for-SIPI (blocked, and held by its pause).
    pub fn halt(&mut self, interrupts_on: bool, requested: bool, nmi: bool) -> HaltOutcome {
        if *self != Self::Running {
            return HaltOutcome::BlockUntilInit;
        }
        if nmi {
            return HaltOutcome::Continue;
        }
        match (interrupts_on, requested) {
            (false, _) => {
                *self = Self::HaltedNoInterrupts;
                HaltOutcome::BlockUntilInit
            }
            (true, true) => HaltOutcome::Continue,
            (true, false) => HaltOutcome::BlockUntilInterrupt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_abi::x86::SIPI_VECTOR;

    #[test]
    fn the_first_vcpu_runs_and_the_others_wait_for_their_first_startup() {
        assert_eq!(Power::at_creation(0), Power::Running);
        let mut ap = Power::at_creation(3);
        assert_eq!(ap, Power::NotStarted);
        assert!(!ap.is_on() && !ap.wakes_on_interrupt());
        // The INIT of INIT-SIPI-SIPI changes nothing; the first STARTUP
        // starts it (no pause to drop), the second is ignored.
        assert_eq!(ap.init(false), InitOutcome::AlreadyWaiting);
        assert_eq!(
            ap.startup(SIPI_VECTOR, Some(SIPI_VECTOR)),
            StartupOutcome::Start { held: false }
        );
        assert_eq!(
            ap.startup(SIPI_VECTOR, Some(SIPI_VECTOR)),
            StartupOutcome::IgnoredRunning
        );
        assert!(ap.is_on() && ap.wakes_on_interrupt());
    }

    #[test]
    fn init_takes_a_started_vcpu_off_until_startup_restarts_it() {
        let mut vcpu = Power::Running;
        assert_eq!(vcpu.init(true), InitOutcome::RefusedSelf);
        assert_eq!(vcpu, Power::Running, "a refused INIT changes nothing");
        assert_eq!(vcpu.init(false), InitOutcome::TakeOff);
        assert_eq!(vcpu, Power::WaitForSipi);
        assert!(!vcpu.is_on() && !vcpu.wakes_on_interrupt());
        assert_eq!(vcpu.init(false), InitOutcome::AlreadyWaiting);
        // A STARTUP at another vector is not ours: it stays off.
        assert_eq!(
            vcpu.startup(0x9a, Some(SIPI_VECTOR)),
            StartupOutcome::WrongVector(0x9a)
        );
        assert_eq!(vcpu, Power::WaitForSipi);
        assert_eq!(
            vcpu.startup(SIPI_VECTOR, Some(SIPI_VECTOR)),
            StartupOutcome::Start { held: true }
        );
        assert_eq!(vcpu, Power::Running);
    }

    /// A PC's STARTUP (a Linux domain): any vector is a start page.
    #[test]
    fn a_real_startup_takes_any_vector() {
        let mut ap = Power::at_creation(1);
        assert_eq!(
            ap.startup(0x9a, None),
            StartupOutcome::Start { held: false }
        );
        assert_eq!(ap, Power::Running);
        assert_eq!(ap.startup(0x9a, None), StartupOutcome::IgnoredRunning);
    }

    #[test]
    fn an_nmi_ends_any_halt_but_not_wait_for_sipi() {
        let mut vcpu = Power::Running;
        assert_eq!(vcpu.halt(false, false, true), HaltOutcome::Continue);
        assert_eq!(vcpu.halt(false, false, false), HaltOutcome::BlockUntilInit);
        assert!(vcpu.nmi(), "an NMI wakes a halt with interrupts disabled");
        assert_eq!(vcpu, Power::Running);
        assert!(vcpu.nmi());
        let mut ap = Power::at_creation(1);
        assert!(!ap.nmi());
        assert_eq!(ap, Power::NotStarted);
    }

    #[test]
    fn hlt_with_interrupts_disabled_is_ended_only_by_init() {
        let mut vcpu = Power::Running;
        assert_eq!(vcpu.halt(true, true, false), HaltOutcome::Continue);
        assert_eq!(
            vcpu.halt(true, false, false),
            HaltOutcome::BlockUntilInterrupt
        );
        assert_eq!(vcpu, Power::Running);
        // `cli; hlt` with an interrupt already pending still halts.
        assert_eq!(vcpu.halt(false, true, false), HaltOutcome::BlockUntilInit);
        assert_eq!(vcpu, Power::HaltedNoInterrupts);
        assert!(vcpu.is_on(), "halted is still on (it may be paused)");
        assert!(!vcpu.wakes_on_interrupt());
        assert_eq!(
            vcpu.startup(SIPI_VECTOR, Some(SIPI_VECTOR)),
            StartupOutcome::IgnoredRunning
        );
        assert_eq!(vcpu.init(false), InitOutcome::TakeOff);
        assert_eq!(
            vcpu.startup(SIPI_VECTOR, Some(SIPI_VECTOR)),
            StartupOutcome::Start { held: true }
        );
        assert!(vcpu.wakes_on_interrupt());
    }

    #[test]
    fn an_init_racing_with_a_hlt_exit_wins() {
        // INIT arrives while the target's HLT exit is being handled: the
        // HLT must not turn wait-for-SIPI back into a halt STARTUP ignores.
        for interrupts_on in [false, true] {
            let mut vcpu = Power::Running;
            assert_eq!(vcpu.init(false), InitOutcome::TakeOff);
            assert_eq!(
                vcpu.halt(interrupts_on, true, true),
                HaltOutcome::BlockUntilInit
            );
            assert_eq!(vcpu, Power::WaitForSipi);
            assert_eq!(
                vcpu.startup(SIPI_VECTOR, Some(SIPI_VECTOR)),
                StartupOutcome::Start { held: true }
            );
        }
    }
}
