//! Conversions between a fixed-frequency counter's ticks and nanoseconds,
//! exact and cheap on the hypervisor's hot paths (every exit samples the
//! guest's timer, every tick reads the clock and arms the next one).
//!
//! When a tick is a whole number of nanoseconds (QEMU virt's 62.5 MHz: 16 ns;
//! Ampere Altra's 25 MHz: 40 ns; 1 GHz on Armv8.6+), a conversion is one
//! multiplication or one 64-bit division; otherwise (the Raspberry Pi 4's
//! 54 MHz) the general 128-bit form. Both give the same results: the floor
//! of the exact quotient, saturated at `u64::MAX`.

/// Nanoseconds per second.
const NS_PER_SECOND: u64 = 1_000_000_000;

/// How to convert for one counter frequency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterScale {
    /// Ticks per second (at least 1).
    frequency_hz: u64,
    /// Nanoseconds per tick, when a whole number.
    ns_per_tick: Option<u64>,
}

impl CounterScale {
    /// The scale of a counter running at `frequency_hz` (0, a firmware that
    /// left CNTFRQ unset, is taken as 1 Hz rather than dividing by zero).
    pub const fn new(frequency_hz: u64) -> Self {
        let frequency_hz = if frequency_hz == 0 { 1 } else { frequency_hz };
        let ns_per_tick = if NS_PER_SECOND.is_multiple_of(frequency_hz) {
            Some(NS_PER_SECOND / frequency_hz)
        } else {
            None
        };
        Self {
            frequency_hz,
            ns_per_tick,
        }
    }

    /// `ticks` in nanoseconds (a guest's compare value can be any u64:
    /// saturates rather than wrapping into an early deadline).
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        match self.ns_per_tick {
            Some(ns) => ticks.saturating_mul(ns),
            None => {
                let ns =
                    u128::from(ticks) * u128::from(NS_PER_SECOND) / u128::from(self.frequency_hz);
                u64::try_from(ns).unwrap_or(u64::MAX)
            }
        }
    }

    /// `ns` in whole ticks (rounded down).
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        match self.ns_per_tick {
            Some(per_tick) => ns / per_tick,
            None => {
                let ticks =
                    u128::from(ns) * u128::from(self.frequency_hz) / u128::from(NS_PER_SECOND);
                u64::try_from(ticks).unwrap_or(u64::MAX)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the floor of the exact quotient, saturated.
    fn exact_ns(ticks: u64, hz: u64) -> u64 {
        u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(hz)).unwrap_or(u64::MAX)
    }

    fn exact_ticks(ns: u64, hz: u64) -> u64 {
        u64::try_from(u128::from(ns) * u128::from(hz) / 1_000_000_000).unwrap_or(u64::MAX)
    }

    #[test]
    fn both_forms_give_the_exact_floor_on_every_frequency() {
        let frequencies = [
            62_500_000,
            25_000_000,
            1_000_000_000,
            54_000_000,
            19_200_000,
            100_000_000,
            1,
            3,
        ];
        let mut values = vec![
            0,
            1,
            15,
            16,
            17,
            999,
            u64::MAX,
            u64::MAX / 16,
            u64::MAX / 16 + 1,
        ];
        // A deterministic spread over the whole range.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 64));
        }
        for hz in frequencies {
            let scale = CounterScale::new(hz);
            for &v in &values {
                assert_eq!(
                    scale.ticks_to_ns(v),
                    exact_ns(v, hz),
                    "{v} ticks at {hz} Hz"
                );
                assert_eq!(
                    scale.ns_to_ticks(v),
                    exact_ticks(v, hz),
                    "{v} ns at {hz} Hz"
                );
            }
        }
    }

    #[test]
    fn whole_nanosecond_ticks_take_the_cheap_form() {
        assert_eq!(CounterScale::new(62_500_000).ns_per_tick, Some(16));
        assert_eq!(CounterScale::new(25_000_000).ns_per_tick, Some(40));
        assert_eq!(CounterScale::new(54_000_000).ns_per_tick, None);
        assert_eq!(CounterScale::new(0), CounterScale::new(1));
    }
}
