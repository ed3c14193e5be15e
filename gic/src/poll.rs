//! Bounded busy-waits on GIC status bits: every wait gives up after a fixed
//! number of polls so a wedged GIC produces an error, not a hang.

/// How many times a status bit is polled before giving up. GICR_WAKER and
/// the RWP bits settle within a few hundred polls on QEMU and real parts;
/// the margin covers slow TCG emulation.
pub(crate) const POLL_LIMIT: u32 = 1_000_000;

/// Polls `done` until it returns true, at most `limit` times.
/// Returns whether it became true.
pub(crate) fn poll_until(limit: u32, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..limit {
        if done() {
            return true;
        }
        core::hint::spin_loop();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_when_condition_holds() {
        let mut polls = 0;
        assert!(poll_until(100, || {
            polls += 1;
            polls == 3
        }));
        assert_eq!(polls, 3);
    }

    #[test]
    fn gives_up_after_limit() {
        let mut polls = 0;
        assert!(!poll_until(50, || {
            polls += 1;
            false
        }));
        assert_eq!(polls, 50);
    }
}
