//! The interrupts the workloads wait for, named by what they mean rather than
//! by a GIC INTID or an x86 vector (each architecture maps its numbers to
//! these), how a wait treats each one it takes, and the pending set the x86
//! interrupt handler records them in.

use core::sync::atomic::{AtomicU8, Ordering};

/// An interrupt a workload waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// This vCPU's timer reached the deadline it was armed with.
    Timer,
    /// vCPU 0 pings a peer (ping-pong).
    Ping,
    /// A peer answers vCPU 0's ping.
    Pong,
    /// The console's receiver holds input (echo).
    ConsoleRx,
    /// A passed-through UART's receiver holds a byte (uartloop).
    DeviceRx,
}

/// The interrupts one vCPU sends another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipi {
    /// See [`Interrupt::Ping`].
    Ping,
    /// See [`Interrupt::Pong`].
    Pong,
}

impl From<Ipi> for Interrupt {
    fn from(ipi: Ipi) -> Self {
        match ipi {
            Ipi::Ping => Self::Ping,
            Ipi::Pong => Self::Pong,
        }
    }
}

/// One interrupt taken (acknowledged and ended) by the architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// One the workloads know.
    Known(Interrupt),
    /// Anything else: counted and ignored.
    Unknown,
}

/// What a wait for one interrupt does with an interrupt it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The awaited interrupt: the wait ends with it.
    Wanted,
    /// The timer at or past the deadline: the wait ends without the awaited
    /// interrupt (unless it is already pending too).
    TimedOut,
    /// A timer interrupt before the deadline: left over from an earlier wait
    /// (it fired just before being disarmed); the timer is armed again.
    Stale,
    /// Anything else: counted and ignored.
    Stray,
}

/// One round of `timerlevel`: the timer's interrupt taken and ended (EOI)
/// while its line was still high, then the timer masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerRound {
    /// Taken once: nothing was pending after the mask (bare metal).
    Once,
    /// Pending a second time after the mask dropped the line.
    Again,
    /// The timer never fired within the bound.
    Missed,
}

/// How a wait for `want`, bounded by the timer at `deadline`, treats
/// `taken`, taken when the clock read `at`. The timer only ever fires at or
/// after the deadline it was armed with, so a timer interrupt before it
/// comes from an earlier arming.
pub fn step(taken: Taken, want: Interrupt, at: u64, deadline: u64) -> Step {
    match taken {
        Taken::Known(Interrupt::Timer) if at < deadline => Step::Stale,
        Taken::Known(kind) if kind == want => Step::Wanted,
        Taken::Known(Interrupt::Timer) => Step::TimedOut,
        Taken::Known(_) | Taken::Unknown => Step::Stray,
    }
}

/// Interrupts an interrupt handler has seen and no wait has taken yet, one
/// bit per kind (the x86 guest's handlers record here; its waits take from
/// here). Lock-free: a handler may record while the vCPU takes.
pub struct Pending(AtomicU8);

impl Pending {
    const UNKNOWN: u8 = 1 << 7;

    /// Nothing pending.
    pub const fn new() -> Self {
        Self(AtomicU8::new(0))
    }

    fn bit(kind: Interrupt) -> u8 {
        match kind {
            Interrupt::Timer => 1 << 0,
            Interrupt::Ping => 1 << 1,
            Interrupt::Pong => 1 << 2,
            Interrupt::ConsoleRx => 1 << 3,
            Interrupt::DeviceRx => 1 << 4,
        }
    }

    /// Records `taken` (a kind seen twice before being taken counts once, as
    /// an interrupt requested twice before it is serviced is delivered once).
    pub fn record(&self, taken: Taken) {
        let bit = match taken {
            Taken::Known(kind) => Self::bit(kind),
            Taken::Unknown => Self::UNKNOWN,
        };
        self.0.fetch_or(bit, Ordering::AcqRel);
    }

    /// Takes one recorded interrupt (the awaited kinds before the unknown
    /// ones, in [`Interrupt`] order), if any.
    pub fn take(&self) -> Option<Taken> {
        let kinds = [
            Interrupt::Timer,
            Interrupt::Ping,
            Interrupt::Pong,
            Interrupt::ConsoleRx,
            Interrupt::DeviceRx,
        ];
        let seen = self.0.load(Ordering::Acquire);
        let taken = kinds
            .into_iter()
            .find(|&k| seen & Self::bit(k) != 0)
            .map(Taken::Known)
            .or((seen & Self::UNKNOWN != 0).then_some(Taken::Unknown))?;
        let bit = match taken {
            Taken::Known(kind) => Self::bit(kind),
            Taken::Unknown => Self::UNKNOWN,
        };
        // Only this vCPU clears bits, so the one found is still set.
        self.0.fetch_and(!bit, Ordering::AcqRel);
        Some(taken)
    }
}

impl Default for Pending {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_awaited_interrupt_ends_the_wait_and_others_are_strays() {
        let ping = Taken::Known(Interrupt::Ping);
        assert_eq!(step(ping, Interrupt::Ping, 5, 10), Step::Wanted);
        assert_eq!(step(ping, Interrupt::Pong, 5, 10), Step::Stray);
        assert_eq!(step(Taken::Unknown, Interrupt::Pong, 5, 10), Step::Stray);
        let rx = Taken::Known(Interrupt::ConsoleRx);
        assert_eq!(step(rx, Interrupt::ConsoleRx, 50, 10), Step::Wanted);
    }

    #[test]
    fn the_timer_counts_only_from_its_deadline_on() {
        let timer = Taken::Known(Interrupt::Timer);
        // Waiting for something else: the deadline ends the wait.
        assert_eq!(step(timer, Interrupt::Pong, 10, 10), Step::TimedOut);
        assert_eq!(step(timer, Interrupt::Pong, 11, 10), Step::TimedOut);
        // Waiting for the timer itself: it is the awaited interrupt.
        assert_eq!(step(timer, Interrupt::Timer, 10, 10), Step::Wanted);
        // Before the deadline it is left over from an earlier arming.
        assert_eq!(step(timer, Interrupt::Timer, 9, 10), Step::Stale);
        assert_eq!(step(timer, Interrupt::Pong, 9, 10), Step::Stale);
    }

    #[test]
    fn pending_takes_each_recorded_kind_once() {
        let pending = Pending::new();
        assert_eq!(pending.take(), None);
        pending.record(Taken::Unknown);
        pending.record(Taken::Known(Interrupt::Pong));
        pending.record(Taken::Known(Interrupt::Timer));
        pending.record(Taken::Known(Interrupt::Timer));
        assert_eq!(pending.take(), Some(Taken::Known(Interrupt::Timer)));
        assert_eq!(pending.take(), Some(Taken::Known(Interrupt::Pong)));
        assert_eq!(pending.take(), Some(Taken::Unknown));
        assert_eq!(pending.take(), None);
        pending.record(Taken::Known(Interrupt::ConsoleRx));
        assert_eq!(pending.take(), Some(Taken::Known(Interrupt::ConsoleRx)));
        assert_eq!(pending.take(), None);
        // Every kind has a bit of its own.
        pending.record(Taken::Known(Interrupt::DeviceRx));
        pending.record(Taken::Unknown);
        assert_eq!(pending.take(), Some(Taken::Known(Interrupt::DeviceRx)));
        assert_eq!(pending.take(), Some(Taken::Unknown));
        assert_eq!(pending.take(), None);
    }

    #[test]
    fn a_record_while_taking_is_not_lost() {
        let pending = std::sync::Arc::new(Pending::new());
        let recorder = {
            let pending = pending.clone();
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    pending.record(Taken::Known(Interrupt::Ping));
                }
                pending.record(Taken::Known(Interrupt::Pong));
            })
        };
        // A take that cleared more than its own bit would lose the pong.
        let count_pong = |taken| u32::from(taken == Some(Taken::Known(Interrupt::Pong)));
        let mut pongs = 0;
        while !recorder.is_finished() {
            pongs += count_pong(pending.take());
        }
        recorder.join().unwrap();
        while let Some(taken) = pending.take() {
            pongs += count_pong(Some(taken));
        }
        assert_eq!(pongs, 1);
    }
}
