//! The per-CPU loop around [`System`]: the one piece of code the hypervisor,
//! the stress test and the loom models all run on a CPU when it is kicked or
//! its timer fires.
//!
//! ```text
//! event ─▶ lock { on_kick / on_timer } ─▶ Step
//!   Switch(ctx)     ─▶ platform.switch_to(ctx) ─▶ lock { switch_done }    ─▶ Step
//!   Rendezvous(t)   ─▶ table.wait(t) (no lock)  ─▶ lock { rendezvous_done } ─▶ Step
//!   Resume          ─▶ return to the loaded context
//! ```

use crate::platform::Platform;
use crate::rendezvous::{Outcome, RendezvousTable};
use crate::system::{Step, System};

/// However a user keeps the [`System`] (a spinlock in the hypervisor, a
/// `std::sync::Mutex` in tests, a loom mutex in models), it runs `f` on it
/// exclusively.
pub trait SystemLock {
    /// Runs `f` with the system locked.
    fn with_system<R>(&self, f: impl FnOnce(&mut System) -> R) -> R;
}

/// Which event woke the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuEvent {
    /// A scheduling IPI.
    Kick,
    /// The scheduling timer.
    Timer,
}

/// The most steps one event may take before the CPU returns to what it has
/// loaded (always safe: the system only lets a CPU load what may run there).
pub const MAX_STEPS_PER_EVENT: u32 = 64;

/// What one [`drive`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveReport {
    /// Context switches made.
    pub switches: u32,
    /// Rendezvous waited at.
    pub rendezvous: u32,
    /// Rendezvous this CPU gave up on (its wait passed the bound).
    pub timeouts: u32,
    /// Rendezvous that ended without a switch (aborted or superseded).
    pub abandoned: u32,
    /// The event ran out of steps ([`MAX_STEPS_PER_EVENT`]).
    pub step_limit_hit: bool,
}

/// Handles one event on `cpu` to the end: switches, rendezvous waits (bounded,
/// outside the lock), and the follow-up steps.
///
/// On a CPU with the core-scheduling fault planted
/// ([`System::plant_cosched_fault`], tests only) a rendezvous is arrived at
/// but not waited for.
pub fn drive<L: SystemLock + ?Sized>(
    lock: &L,
    table: &RendezvousTable,
    platform: &dyn Platform,
    cpu: usize,
    event: CpuEvent,
) -> DriveReport {
    let mut report = DriveReport::default();
    let (mut step, broken) = lock.with_system(|s| {
        let step = match event {
            CpuEvent::Kick => s.on_kick(cpu, platform),
            CpuEvent::Timer => s.on_timer(cpu, platform),
        };
        (step, s.cosched_fault(cpu))
    });
    for _ in 0..MAX_STEPS_PER_EVENT {
        step = match step {
            Step::Resume => return report,
            Step::Switch(context) => {
                platform.switch_to(cpu, context);
                report.switches += 1;
                lock.with_system(|s| s.switch_done(cpu, platform))
            }
            Step::Rendezvous(ticket) => {
                report.rendezvous += 1;
                let arrived = platform.rendezvous_arrived(cpu, &ticket);
                let outcome = if broken {
                    // Counted as arrived, so the siblings are not held up,
                    // but gone on without them.
                    table.arrive(&ticket);
                    Outcome::Complete
                } else {
                    table.wait(&ticket, &mut || platform.now_ns(), &|| platform.relax())
                };
                platform.rendezvous_ended(cpu, &ticket, &outcome, arrived);
                match outcome {
                    Outcome::Complete => {}
                    Outcome::TimedOut { .. } => {
                        report.timeouts += 1;
                        report.abandoned += 1;
                    }
                    Outcome::Aborted | Outcome::Superseded => report.abandoned += 1,
                }
                let next = lock.with_system(|s| s.rendezvous_done(cpu, &ticket, outcome, platform));
                if report.timeouts > 0 && matches!(next, Step::Rendezvous(_)) {
                    // Do not wait again within the same event after giving up
                    // once: return to idle (what this CPU holds now) and let
                    // the pending kick or the timer bring it back.
                    return report;
                }
                next
            }
        };
    }
    report.step_limit_hit = true;
    report
}
