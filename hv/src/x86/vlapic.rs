//! The virtual local APIC: the minimum a guest needs, through the x2APIC
//! MSRs (`guest_abi::x86::msr`): interrupt request/in-service state with EOI,
//! IPIs through the ICR (fixed, INIT, STARTUP), and the timer (TSC-deadline,
//! one-shot or periodic, counting TSC ticks divided by the divide register).
//!
//! The arch glue feeds it MSR exits and the TSC, asks [`VLapic::pending`]
//! which vector to inject, reports delivery with [`VLapic::acknowledge`], and
//! carries out the [`IcrCommand`]s it returns.

use guest_abi::x86::msr;

/// The version register: an integrated APIC (0x14), 6 LVT entries.
const VERSION: u64 = 0x0005_0014;
/// LVT mask bit.
const LVT_MASKED: u32 = 1 << 16;
/// LVT timer mode field (bits 18:17).
const TIMER_MODE_SHIFT: u32 = 17;
/// ICR level bit: assert (clear only in an INIT de-assert).
const ICR_LEVEL_ASSERT: u64 = 1 << 14;
/// ICR trigger mode bit: level-triggered.
const ICR_TRIGGER_LEVEL: u64 = 1 << 15;
/// SVR: APIC software enable.
const SVR_ENABLED: u32 = 1 << 8;

/// Who an IPI goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// One vCPU by x2APIC id.
    One(u32),
    /// The sender.
    Itself,
    /// Every vCPU of the domain.
    All,
    /// Every vCPU but the sender.
    AllButSelf,
}

/// What an ICR write asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcrCommand {
    /// A fixed interrupt.
    Fixed {
        /// The vector.
        vector: u8,
        /// The targets.
        to: Destination,
    },
    /// INIT, level assert (resets the target; a STARTUP follows).
    Init {
        /// The targets.
        to: Destination,
    },
    /// INIT level de-assert (level-triggered, level bit clear): the 82489DX's
    /// arbitration-ID sync, which later APICs ignore; so does this one.
    InitDeassert,
    /// STARTUP with a vector (the start page).
    Startup {
        /// The vector.
        vector: u8,
        /// The targets.
        to: Destination,
    },
}

/// What a guest MSR write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteEffect {
    /// Nothing the glue needs to act on.
    None,
    /// The timer deadline changed (re-arm the host timer).
    TimerChanged,
    /// An IPI to send.
    Icr(IcrCommand),
}

/// Why an APIC MSR access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlapicError {
    /// Not an APIC register this model has.
    UnknownRegister(u32),
    /// A read-only register was written.
    ReadOnly(u32),
    /// An ICR value this model does not implement (delivery mode, logical
    /// destination).
    UnsupportedIcr(u64),
}

impl core::fmt::Display for VlapicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::UnknownRegister(m) => write!(f, "no APIC register at MSR {m:#x}"),
            Self::ReadOnly(m) => write!(f, "APIC MSR {m:#x} is read-only"),
            Self::UnsupportedIcr(v) => write!(f, "unsupported ICR value {v:#x}"),
        }
    }
}

/// One vCPU's virtual local APIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VLapic {
    id: u32,
    irr: [u64; 4],
    isr: [u64; 4],
    tpr: u32,
    svr: u32,
    lvt_timer: u32,
    divide: u32,
    initial_count: u32,
    /// TSC value the timer fires at (0: not armed).
    deadline: u64,
    /// The TSC the one-shot/periodic count started at, for the current count.
    count_start: u64,
}

fn bit(vector: u8) -> (usize, u64) {
    (usize::from(vector / 64), 1 << (vector % 64))
}

fn highest(set: &[u64; 4]) -> Option<u8> {
    (0..4)
        .rev()
        .find(|&w| set[w] != 0)
        .map(|w| (w * 64 + 63 - set[w].leading_zeros() as usize) as u8)
}

impl VLapic {
    /// The APIC of the vCPU with x2APIC id `id`, as after reset (timer
    /// masked, software-disabled).
    pub fn new(id: u32) -> Self {
        Self {
            id,
            irr: [0; 4],
            isr: [0; 4],
            tpr: 0,
            svr: 0xff,
            lvt_timer: LVT_MASKED,
            divide: 0,
            initial_count: 0,
            deadline: 0,
            count_start: 0,
        }
    }

    /// Its x2APIC id.
    pub fn id(&self) -> u32 {
        self.id
    }

    fn timer_mode(&self) -> u32 {
        (self.lvt_timer >> TIMER_MODE_SHIFT) & 0b11
    }

    /// The divide register as a divisor (1..=128).
    fn divisor(&self) -> u64 {
        let code = (self.divide & 0b11) | ((self.divide >> 1) & 0b100);
        if code == 0b111 { 1 } else { 2 << code }
    }

    /// Reads APIC MSR `number`; `tsc` is the guest's TSC now.
    pub fn read(&self, number: u32, tsc: u64) -> Result<u64, VlapicError> {
        Ok(match number {
            msr::ID => u64::from(self.id),
            msr::VERSION => VERSION,
            msr::TPR => u64::from(self.tpr),
            // Cluster = id / 16, bit id % 16 (x2APIC logical id, derived).
            msr::LDR => u64::from(((self.id >> 4) << 16) | (1 << (self.id & 0xf))),
            msr::SVR => u64::from(self.svr),
            n if (msr::ISR0..msr::ISR0 + 8).contains(&n) => {
                let i = (n - msr::ISR0) as usize;
                (self.isr[i / 2] >> (32 * (i % 2))) & 0xffff_ffff
            }
            n if (msr::IRR0..msr::IRR0 + 8).contains(&n) => {
                let i = (n - msr::IRR0) as usize;
                (self.irr[i / 2] >> (32 * (i % 2))) & 0xffff_ffff
            }
            msr::LVT_TIMER => u64::from(self.lvt_timer),
            msr::TIMER_INITIAL => u64::from(self.initial_count),
            msr::TIMER_CURRENT => {
                if self.deadline == 0 || self.timer_mode() == 2 {
                    0
                } else {
                    self.deadline.saturating_sub(tsc) / self.divisor()
                }
            }
            msr::TIMER_DIVIDE => u64::from(self.divide),
            msr::TSC_DEADLINE => {
                if self.timer_mode() == 2 {
                    self.deadline
                } else {
                    0
                }
            }
            n => return Err(VlapicError::UnknownRegister(n)),
        })
    }

    /// Writes APIC MSR `number`; `tsc` is the guest's TSC now.
    pub fn write(&mut self, number: u32, value: u64, tsc: u64) -> Result<WriteEffect, VlapicError> {
        let low = value as u32;
        match number {
            msr::TPR => self.tpr = low & 0xff,
            msr::EOI => self.eoi(),
            msr::SVR => self.svr = low & 0x1ff,
            msr::ICR => return decode_icr(value).map(WriteEffect::Icr),
            msr::LVT_TIMER => {
                let old_mode = self.timer_mode();
                self.lvt_timer = low & (0xff | LVT_MASKED | (0b11 << TIMER_MODE_SHIFT));
                if self.timer_mode() != old_mode {
                    self.deadline = 0;
                }
                return Ok(WriteEffect::TimerChanged);
            }
            msr::TIMER_INITIAL => {
                if self.timer_mode() == 2 {
                    return Ok(WriteEffect::None);
                }
                self.initial_count = low;
                self.count_start = tsc;
                self.deadline = if low == 0 {
                    0
                } else {
                    tsc.saturating_add(u64::from(low) * self.divisor()).max(1)
                };
                return Ok(WriteEffect::TimerChanged);
            }
            msr::TIMER_DIVIDE => self.divide = low & 0b1011,
            msr::TSC_DEADLINE => {
                if self.timer_mode() == 2 {
                    self.deadline = value;
                    return Ok(WriteEffect::TimerChanged);
                }
            }
            msr::ID | msr::VERSION | msr::LDR | msr::TIMER_CURRENT => {
                return Err(VlapicError::ReadOnly(number));
            }
            n if (msr::ISR0..msr::ISR0 + 8).contains(&n)
                || (msr::IRR0..msr::IRR0 + 8).contains(&n) =>
            {
                return Err(VlapicError::ReadOnly(number));
            }
            n => return Err(VlapicError::UnknownRegister(n)),
        }
        Ok(WriteEffect::None)
    }

    /// When the timer fires (guest TSC), if armed and unmasked.
    pub fn timer_deadline(&self) -> Option<u64> {
        (self.deadline != 0 && self.lvt_timer & LVT_MASKED == 0).then_some(self.deadline)
    }

    /// Fires the timer if its deadline has passed: its vector becomes
    /// pending; a periodic timer re-arms. Returns whether it fired.
    pub fn poll_timer(&mut self, tsc: u64) -> bool {
        if self.deadline == 0 || tsc < self.deadline {
            return false;
        }
        let vector = (self.lvt_timer & 0xff) as u8;
        let masked = self.lvt_timer & LVT_MASKED != 0;
        self.deadline = if self.timer_mode() == 1 && self.initial_count != 0 {
            let period = u64::from(self.initial_count) * self.divisor();
            // Skip missed periods instead of firing a burst.
            let missed = (tsc - self.deadline) / period;
            self.deadline + (missed + 1) * period
        } else {
            0
        };
        if masked {
            return false;
        }
        self.accept(vector);
        true
    }

    /// Makes `vector` pending (an IPI or a device interrupt). Vectors below
    /// 16 are illegal and dropped.
    pub fn accept(&mut self, vector: u8) {
        if vector < 16 {
            return;
        }
        let (word, mask) = bit(vector);
        self.irr[word] |= mask;
    }

    /// The vector to deliver now: the highest requested one whose priority
    /// class is above both the in-service one and the TPR's.
    pub fn pending(&self) -> Option<u8> {
        let candidate = highest(&self.irr)?;
        let in_service = highest(&self.isr).map_or(0, |v| v >> 4);
        let class = candidate >> 4;
        (class > in_service && u32::from(class) > self.tpr >> 4).then_some(candidate)
    }

    /// Whether any interrupt is requested (whatever its priority): what wakes
    /// a halted vCPU.
    pub fn has_requested(&self) -> bool {
        self.irr.iter().any(|&w| w != 0)
    }

    /// The guest took `vector`: requested becomes in service.
    pub fn acknowledge(&mut self, vector: u8) {
        let (word, mask) = bit(vector);
        self.irr[word] &= !mask;
        self.isr[word] |= mask;
    }

    /// End of interrupt: the highest in-service vector is done.
    pub fn eoi(&mut self) {
        if let Some(vector) = highest(&self.isr) {
            let (word, mask) = bit(vector);
            self.isr[word] &= !mask;
        }
    }

    /// Whether the guest enabled its APIC (SVR bit 8).
    pub fn enabled(&self) -> bool {
        self.svr & SVR_ENABLED != 0
    }
}

/// Decodes an x2APIC ICR write (Intel SDM 10.12.9): vector[7:0], delivery
/// mode[10:8], level[14], trigger mode[15], shorthand[19:18],
/// destination[63:32]; physical destinations only.
pub fn decode_icr(value: u64) -> Result<IcrCommand, VlapicError> {
    let vector = value as u8;
    let mode = (value >> 8) & 0b111;
    let logical = value & (1 << 11) != 0;
    let to = match (value >> 18) & 0b11 {
        0 if logical => return Err(VlapicError::UnsupportedIcr(value)),
        0 => Destination::One((value >> 32) as u32),
        1 => Destination::Itself,
        2 => Destination::All,
        _ => Destination::AllButSelf,
    };
    match mode {
        0b000 => Ok(IcrCommand::Fixed { vector, to }),
        0b101 if value & ICR_LEVEL_ASSERT == 0 && value & ICR_TRIGGER_LEVEL != 0 => {
            Ok(IcrCommand::InitDeassert)
        }
        0b101 => Ok(IcrCommand::Init { to }),
        0b110 => Ok(IcrCommand::Startup { vector, to }),
        _ => Err(VlapicError::UnsupportedIcr(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_are_delivered_by_priority_and_ended_by_eoi() {
        let mut apic = VLapic::new(3);
        assert_eq!(apic.pending(), None);
        apic.accept(0x31);
        apic.accept(0x52);
        assert_eq!(apic.pending(), Some(0x52));
        apic.acknowledge(0x52);
        // 0x31 is of a lower class than the one in service.
        assert_eq!(apic.pending(), None);
        assert!(apic.has_requested());
        apic.accept(0x61);
        assert_eq!(apic.pending(), Some(0x61));
        apic.acknowledge(0x61);
        apic.eoi();
        apic.eoi();
        assert_eq!(apic.pending(), Some(0x31));
        apic.acknowledge(0x31);
        apic.eoi();
        assert_eq!(apic.pending(), None);
        assert!(!apic.has_requested());
        // Illegal vectors are dropped; the TPR holds back low classes.
        apic.accept(3);
        assert!(!apic.has_requested());
        apic.write(msr::TPR, 0x40, 0).unwrap();
        apic.accept(0x45);
        assert_eq!(apic.pending(), None);
        apic.accept(0x50);
        assert_eq!(apic.pending(), Some(0x50));
    }

    #[test]
    fn registers_read_back_and_read_only_ones_refuse_writes() {
        let mut apic = VLapic::new(5);
        assert_eq!(apic.read(msr::ID, 0), Ok(5));
        assert_eq!(apic.read(msr::LDR, 0), Ok(1 << 5));
        assert_eq!(
            apic.write(msr::ID, 1, 0),
            Err(VlapicError::ReadOnly(msr::ID))
        );
        assert_eq!(
            apic.write(0x8ff, 1, 0),
            Err(VlapicError::UnknownRegister(0x8ff))
        );
        apic.write(msr::SVR, 0x1ff, 0).unwrap();
        assert!(apic.enabled());
        apic.accept(0x40);
        assert_eq!(apic.read(msr::IRR0 + 2, 0), Ok(1));
        apic.acknowledge(0x40);
        assert_eq!(apic.read(msr::ISR0 + 2, 0), Ok(1));
        assert_eq!(apic.read(msr::IRR0 + 2, 0), Ok(0));
    }

    #[test]
    fn the_tsc_deadline_timer_fires_once() {
        let mut apic = VLapic::new(0);
        // Deadline mode, vector 0x30, unmasked.
        let effect = apic.write(msr::LVT_TIMER, 0x30 | (2 << 17), 0).unwrap();
        assert_eq!(effect, WriteEffect::TimerChanged);
        apic.write(msr::TSC_DEADLINE, 1000, 0).unwrap();
        assert_eq!(apic.timer_deadline(), Some(1000));
        assert_eq!(apic.read(msr::TSC_DEADLINE, 0), Ok(1000));
        assert!(!apic.poll_timer(999));
        assert!(apic.poll_timer(1000));
        assert_eq!(apic.pending(), Some(0x30));
        assert_eq!(apic.timer_deadline(), None);
        assert!(!apic.poll_timer(5000));
    }

    #[test]
    fn one_shot_and_periodic_timers_count_divided_tsc_ticks() {
        let mut apic = VLapic::new(0);
        apic.write(msr::TIMER_DIVIDE, 0b0011, 0).unwrap(); // divide by 16
        apic.write(msr::LVT_TIMER, 0x31, 0).unwrap(); // one-shot
        apic.write(msr::TIMER_INITIAL, 10, 100).unwrap();
        assert_eq!(apic.timer_deadline(), Some(260));
        assert_eq!(apic.read(msr::TIMER_CURRENT, 180), Ok(5));
        assert!(apic.poll_timer(260));
        assert_eq!(apic.timer_deadline(), None);
        apic.write(msr::LVT_TIMER, 0x31 | (1 << 17), 0).unwrap(); // periodic
        apic.write(msr::TIMER_INITIAL, 10, 0).unwrap();
        assert!(apic.poll_timer(160));
        assert_eq!(apic.timer_deadline(), Some(320));
        // Late by two periods: the next deadline is the next period boundary.
        assert!(apic.poll_timer(500));
        assert_eq!(apic.timer_deadline(), Some(640));
        // Masked: no interrupt, still counts.
        apic.write(msr::LVT_TIMER, 0x31 | (1 << 17) | u64::from(LVT_MASKED), 0)
            .unwrap();
        assert_eq!(apic.timer_deadline(), None);
    }

    #[test]
    fn icr_values_decode_into_commands() {
        assert_eq!(
            decode_icr(0x0000_0002_0000_00f0),
            Ok(IcrCommand::Fixed {
                vector: 0xf0,
                to: Destination::One(2)
            })
        );
        assert_eq!(
            decode_icr(0x4500 | (1 << 32)),
            Ok(IcrCommand::Init {
                to: Destination::One(1)
            })
        );
        assert_eq!(
            decode_icr(0x0608 | (3 << 32)),
            Ok(IcrCommand::Startup {
                vector: 8,
                to: Destination::One(3)
            })
        );
        assert_eq!(
            decode_icr(0x40 | (3 << 18)),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::AllButSelf
            })
        );
        assert_eq!(
            decode_icr(0x40 | (1 << 18)),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::Itself
            })
        );
        // INIT: asserted (edge or level) is an INIT; the level de-assert
        // that old start-up sequences send after it is told apart.
        assert_eq!(
            decode_icr(0xc500 | (2 << 32)),
            Ok(IcrCommand::Init {
                to: Destination::One(2)
            })
        );
        assert_eq!(decode_icr(0x8500 | (2 << 32)), Ok(IcrCommand::InitDeassert));
        // Logical destinations and NMI/SMI delivery are not modelled.
        assert!(decode_icr(0x40 | (1 << 11)).is_err());
        assert!(decode_icr(0x400).is_err());
    }
}
