//! Pure encodings of local APIC register values (Intel SDM vol. 3A ch. 11,
//! AMD APM vol. 2 ch. 16): what the driver writes, computed without touching
//! hardware so host tests check every bit.

use tock_registers::fields::FieldValue;

use crate::{ApicError, IpiTarget};

pub use fields::{ICR, LVT, SVR};

/// The register bitfields (the macro's generated items carry no docs of their own).
#[allow(non_snake_case, missing_docs)]
mod fields {
    use tock_registers::register_bitfields;

    register_bitfields! [u32,
        /// Interrupt Command Register, low word (the whole xAPIC ICR at 0x300 and
        /// bits 31:0 of the x2APIC ICR MSR 0x830).
        pub ICR [
            /// Interrupt vector.
            VECTOR OFFSET(0) NUMBITS(8) [],
            /// How the target takes it.
            DELIVERY_MODE OFFSET(8) NUMBITS(3) [
                /// The vector, as an interrupt.
                Fixed = 0,
                /// NMI (vector ignored).
                Nmi = 4,
                /// INIT (vector ignored).
                Init = 5,
                /// Start-up: the vector is the page number of the real-mode entry.
                StartUp = 6
            ],
            /// Physical (APIC id) or logical destination.
            DESTINATION_MODE OFFSET(11) NUMBITS(1) [
                /// The destination field is an APIC id.
                Physical = 0,
                /// The destination field is a logical id.
                Logical = 1
            ],
            /// Set while an xAPIC IPI is being sent (read-only; absent in x2APIC).
            DELIVERY_STATUS OFFSET(12) NUMBITS(1) [],
            /// Assert (1) or de-assert (0); everything but INIT de-assert asserts.
            LEVEL OFFSET(14) NUMBITS(1) [
                /// De-assert (only INIT level de-assert uses it).
                Deassert = 0,
                /// Assert.
                Assert = 1
            ],
            /// Edge or level trigger.
            TRIGGER_MODE OFFSET(15) NUMBITS(1) [
                /// Edge.
                Edge = 0,
                /// Level.
                Level = 1
            ],
            /// Shorthand destinations that ignore the destination field.
            SHORTHAND OFFSET(18) NUMBITS(2) [
                /// Use the destination field.
                None = 0,
                /// The sender.
                SelfOnly = 1,
                /// Everyone, sender included.
                All = 2,
                /// Everyone else.
                AllButSelf = 3
            ]
        ],
        /// A local vector table entry (timer, LINT0/1, error).
        pub LVT [
            /// Interrupt vector.
            VECTOR OFFSET(0) NUMBITS(8) [],
            /// Delivery mode (LINT0/1 only; the timer is always fixed).
            DELIVERY_MODE OFFSET(8) NUMBITS(3) [
                /// The vector, as an interrupt.
                Fixed = 0,
                /// NMI.
                Nmi = 4,
                /// External interrupt (8259 through LINT0).
                ExtInt = 7
            ],
            /// Set while the interrupt is pending delivery (read-only).
            DELIVERY_STATUS OFFSET(12) NUMBITS(1) [],
            /// Masked: the source does not interrupt.
            MASK OFFSET(16) NUMBITS(1) [],
            /// Timer mode (the timer LVT only).
            TIMER_MODE OFFSET(17) NUMBITS(2) [
                /// Count down once.
                OneShot = 0,
                /// Reload the initial count at zero.
                Periodic = 1,
                /// Fire when the TSC reaches IA32_TSC_DEADLINE.
                TscDeadline = 2
            ]
        ],
        /// Spurious-interrupt vector register: also the software enable bit.
        pub SVR [
            /// Vector delivered for spurious interrupts.
            VECTOR OFFSET(0) NUMBITS(8) [],
            /// APIC software enable.
            ENABLE OFFSET(8) NUMBITS(1) [],
            /// Suppress EOI broadcasts to I/O APICs for level interrupts.
            SUPPRESS_EOI_BROADCAST OFFSET(12) NUMBITS(1) []
        ]
    ];
}

/// Delivery mode of an IPI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// A fixed vector.
    Fixed(u8),
    /// A non-maskable interrupt.
    Nmi,
    /// INIT (assert).
    Init,
    /// INIT level de-assert (needed only by pre-Pentium-4 xAPICs; kept for completeness).
    InitDeassert,
    /// Start-up IPI: the AP starts in real mode at `page << 12`.
    StartUp(u8),
}

/// An IPI, before encoding for xAPIC or x2APIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipi {
    /// What is delivered.
    pub delivery: Delivery,
    /// To whom.
    pub target: IpiTarget,
}

impl Ipi {
    /// The ICR low word (x2APIC: bits 31:0 of the ICR MSR).
    pub fn low_word(&self) -> u32 {
        let (mode, vector, level, trigger) = match self.delivery {
            Delivery::Fixed(v) => (
                ICR::DELIVERY_MODE::Fixed,
                v,
                ICR::LEVEL::Assert,
                ICR::TRIGGER_MODE::Edge,
            ),
            Delivery::Nmi => (
                ICR::DELIVERY_MODE::Nmi,
                0,
                ICR::LEVEL::Assert,
                ICR::TRIGGER_MODE::Edge,
            ),
            Delivery::Init => (
                ICR::DELIVERY_MODE::Init,
                0,
                ICR::LEVEL::Assert,
                ICR::TRIGGER_MODE::Edge,
            ),
            Delivery::InitDeassert => (
                ICR::DELIVERY_MODE::Init,
                0,
                ICR::LEVEL::Deassert,
                ICR::TRIGGER_MODE::Level,
            ),
            Delivery::StartUp(page) => (
                ICR::DELIVERY_MODE::StartUp,
                page,
                ICR::LEVEL::Assert,
                ICR::TRIGGER_MODE::Edge,
            ),
        };
        let shorthand = match self.target {
            IpiTarget::Apic(_) => ICR::SHORTHAND::None,
            IpiTarget::SelfOnly => ICR::SHORTHAND::SelfOnly,
            IpiTarget::All => ICR::SHORTHAND::All,
            IpiTarget::AllButSelf => ICR::SHORTHAND::AllButSelf,
        };
        let value: FieldValue<u32, ICR::Register> = ICR::VECTOR.val(u32::from(vector))
            + mode
            + ICR::DESTINATION_MODE::Physical
            + level
            + trigger
            + shorthand;
        value.value
    }

    /// The APIC id in the destination field (0 for shorthands).
    fn destination(&self) -> u32 {
        match self.target {
            IpiTarget::Apic(id) => id,
            _ => 0,
        }
    }

    /// The xAPIC ICR as (high word at 0x310, low word at 0x300). The high word
    /// holds the 8-bit destination in bits 31:24.
    pub fn xapic(&self) -> Result<(u32, u32), ApicError> {
        let apic_id = self.destination();
        if apic_id > 0xff {
            return Err(ApicError::DestinationTooLarge { apic_id });
        }
        Ok((apic_id << 24, self.low_word()))
    }

    /// The x2APIC ICR MSR value: 32-bit destination in bits 63:32.
    pub fn x2apic(&self) -> u64 {
        (u64::from(self.destination()) << 32) | u64::from(self.low_word())
    }
}

/// How the local APIC timer counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerMode {
    /// Count down once from the initial count.
    OneShot,
    /// Count down repeatedly.
    Periodic,
    /// Fire when the TSC reaches IA32_TSC_DEADLINE.
    TscDeadline,
}

/// The timer LVT value for `vector` in `mode` (`masked`: no interrupt).
pub fn lvt_timer(vector: u8, mode: TimerMode, masked: bool) -> u32 {
    let mode = match mode {
        TimerMode::OneShot => LVT::TIMER_MODE::OneShot,
        TimerMode::Periodic => LVT::TIMER_MODE::Periodic,
        TimerMode::TscDeadline => LVT::TIMER_MODE::TscDeadline,
    };
    let value: FieldValue<u32, LVT::Register> =
        LVT::VECTOR.val(u32::from(vector)) + mode + LVT::MASK.val(u32::from(masked));
    value.value
}

/// A masked LVT entry (LINT0/1, error, thermal, performance): nothing delivered.
pub fn lvt_masked() -> u32 {
    LVT::MASK::SET.value
}

/// The spurious-interrupt vector register with the APIC software-enabled.
pub fn svr_enabled(spurious_vector: u8) -> u32 {
    (SVR::VECTOR.val(u32::from(spurious_vector)) + SVR::ENABLE::SET).value
}

/// The timer divide configuration register value for `divisor` (1, 2, 4 … 128).
/// The encoding is bits 3,1,0 of `log2(divisor) - 1`, with 1 encoded as 0b1011.
pub fn divide_config(divisor: u32) -> Option<u32> {
    let code = match divisor {
        2 => 0b000,
        4 => 0b001,
        8 => 0b010,
        16 => 0b011,
        32 => 0b100,
        64 => 0b101,
        128 => 0b110,
        1 => 0b111,
        _ => return None,
    };
    // Bit 2 of the code goes to register bit 3; register bit 2 is reserved.
    Some((code & 0b011) | ((code & 0b100) << 1))
}

/// The timer count for `period_ns`, given that it counted `counted` in
/// `measured_ns` during calibration.
pub fn timer_count_for(counted: u64, measured_ns: u64, period_ns: u64) -> Result<u32, ApicError> {
    if counted == 0 || measured_ns == 0 {
        return Err(ApicError::TimerDidNotCount);
    }
    let count = u128::from(counted) * u128::from(period_ns) / u128::from(measured_ns);
    let count = u64::try_from(count).unwrap_or(u64::MAX).max(1);
    u32::try_from(count).map_err(|_| ApicError::TimerPeriodTooLong { count })
}

/// The SIPI vector for real-mode start-up code at `address`: its page number,
/// which must be below 1 MiB and page aligned. Page 0 is refused: it holds
/// the real-mode interrupt vector table.
pub fn startup_vector(address: u64) -> Result<u8, ApicError> {
    if address == 0 || address >= 0x10_0000 || address & 0xfff != 0 {
        return Err(ApicError::BadStartupPage { address });
    }
    Ok((address >> 12) as u8)
}

/// x2APIC register MSRs (0x800 + xAPIC offset / 16).
pub mod x2apic_msr {
    /// Local APIC id (32 bits).
    pub const ID: u32 = 0x802;
    /// Version.
    pub const VERSION: u32 = 0x803;
    /// Task priority.
    pub const TPR: u32 = 0x808;
    /// End of interrupt (write 0).
    pub const EOI: u32 = 0x80b;
    /// Spurious-interrupt vector.
    pub const SVR: u32 = 0x80f;
    /// Error status.
    pub const ESR: u32 = 0x828;
    /// Interrupt command (64 bits).
    pub const ICR: u32 = 0x830;
    /// Timer LVT.
    pub const LVT_TIMER: u32 = 0x832;
    /// Thermal LVT.
    pub const LVT_THERMAL: u32 = 0x833;
    /// Performance-counter LVT.
    pub const LVT_PERF: u32 = 0x834;
    /// LINT0 LVT.
    pub const LVT_LINT0: u32 = 0x835;
    /// LINT1 LVT.
    pub const LVT_LINT1: u32 = 0x836;
    /// Error LVT.
    pub const LVT_ERROR: u32 = 0x837;
    /// Timer initial count.
    pub const TIMER_INITIAL: u32 = 0x838;
    /// Timer current count.
    pub const TIMER_CURRENT: u32 = 0x839;
    /// Timer divide configuration.
    pub const TIMER_DIVIDE: u32 = 0x83e;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fixed_ipi_to_one_cpu() {
        let ipi = Ipi {
            delivery: Delivery::Fixed(0x41),
            target: IpiTarget::Apic(3),
        };
        // Vector 0x41, fixed, physical, assert (bit 14), edge.
        assert_eq!(ipi.low_word(), 0x4041);
        assert_eq!(ipi.xapic(), Ok((0x0300_0000, 0x4041)));
        assert_eq!(ipi.x2apic(), 0x0000_0003_0000_4041);
    }

    #[test]
    fn shorthands() {
        let all_but_self = Ipi {
            delivery: Delivery::Fixed(0x30),
            target: IpiTarget::AllButSelf,
        };
        assert_eq!(all_but_self.low_word(), 0x000c_4030);
        assert_eq!(all_but_self.x2apic(), 0x000c_4030);
        let to_self = Ipi {
            delivery: Delivery::Fixed(0x30),
            target: IpiTarget::SelfOnly,
        };
        assert_eq!(to_self.low_word(), 0x0004_4030);
        let all = Ipi {
            delivery: Delivery::Nmi,
            target: IpiTarget::All,
        };
        assert_eq!(all.low_word(), 0x0008_4400);
    }

    #[test]
    fn init_and_startup() {
        // The SDM's example values: INIT 0x000C4500 to all-but-self, SIPI 0x000C46XX.
        let init = Ipi {
            delivery: Delivery::Init,
            target: IpiTarget::AllButSelf,
        };
        assert_eq!(init.low_word(), 0x000c_4500);
        let sipi = Ipi {
            delivery: Delivery::StartUp(0x08),
            target: IpiTarget::AllButSelf,
        };
        assert_eq!(sipi.low_word(), 0x000c_4608);
        let one = Ipi {
            delivery: Delivery::StartUp(0x08),
            target: IpiTarget::Apic(0x11),
        };
        assert_eq!(one.xapic(), Ok((0x1100_0000, 0x4608)));
        let deassert = Ipi {
            delivery: Delivery::InitDeassert,
            target: IpiTarget::All,
        };
        assert_eq!(deassert.low_word(), 0x0008_8500);
    }

    #[test]
    fn xapic_refuses_wide_ids() {
        let ipi = Ipi {
            delivery: Delivery::Fixed(0x40),
            target: IpiTarget::Apic(0x100),
        };
        assert_eq!(
            ipi.xapic(),
            Err(ApicError::DestinationTooLarge { apic_id: 0x100 })
        );
        assert_eq!(ipi.x2apic() >> 32, 0x100);
    }

    #[test]
    fn lvt_and_svr() {
        assert_eq!(lvt_timer(0xef, TimerMode::OneShot, false), 0xef);
        assert_eq!(lvt_timer(0xef, TimerMode::Periodic, false), 0x2_00ef);
        assert_eq!(lvt_timer(0xef, TimerMode::TscDeadline, false), 0x4_00ef);
        assert_eq!(lvt_timer(0xef, TimerMode::Periodic, true), 0x3_00ef);
        assert_eq!(lvt_masked(), 0x1_0000);
        assert_eq!(svr_enabled(0xff), 0x1ff);
    }

    #[test]
    fn divide_values() {
        assert_eq!(divide_config(1), Some(0b1011));
        assert_eq!(divide_config(2), Some(0b0000));
        assert_eq!(divide_config(16), Some(0b0011));
        assert_eq!(divide_config(32), Some(0b1000));
        assert_eq!(divide_config(128), Some(0b1010));
        assert_eq!(divide_config(3), None);
        assert_eq!(divide_config(256), None);
    }

    #[test]
    fn timer_counts() {
        // 1 GHz / 16 counted 625_000 in 10 ms: 10 ms needs 625_000.
        assert_eq!(
            timer_count_for(625_000, 10_000_000, 10_000_000),
            Ok(625_000)
        );
        assert_eq!(timer_count_for(625_000, 10_000_000, 1_000_000), Ok(62_500));
        assert_eq!(
            timer_count_for(0, 10_000_000, 1),
            Err(ApicError::TimerDidNotCount)
        );
        assert_eq!(timer_count_for(1, 0, 1), Err(ApicError::TimerDidNotCount));
        assert!(matches!(
            timer_count_for(u32::MAX.into(), 1_000, 10_000),
            Err(ApicError::TimerPeriodTooLong { .. })
        ));
        // Never zero: a zero initial count stops the timer.
        assert_eq!(timer_count_for(1, 1_000_000, 1), Ok(1));
    }

    #[test]
    fn startup_vectors() {
        assert_eq!(startup_vector(0x8000), Ok(0x08));
        assert_eq!(startup_vector(0x9f000), Ok(0x9f));
        for bad in [0, 0x8001, 0x10_0000, 0x20_0000] {
            assert_eq!(
                startup_vector(bad),
                Err(ApicError::BadStartupPage { address: bad })
            );
        }
    }

    proptest! {
        #[test]
        fn x2apic_icr_is_destination_and_low_word(vector in 0u8..=255, dest in any::<u32>()) {
            let ipi = Ipi { delivery: Delivery::Fixed(vector), target: IpiTarget::Apic(dest) };
            let icr = ipi.x2apic();
            prop_assert_eq!((icr >> 32) as u32, dest);
            prop_assert_eq!(icr as u32 & 0xff, u32::from(vector));
            prop_assert_eq!((icr >> 8) & 0x7, 0); // fixed
            prop_assert_eq!((icr >> 18) & 0x3, 0); // no shorthand
            prop_assert_eq!((icr >> 11) & 1, 0); // physical
            match ipi.xapic() {
                Ok((high, low)) => {
                    prop_assert!(dest <= 0xff);
                    prop_assert_eq!(high >> 24, dest);
                    prop_assert_eq!(high & 0x00ff_ffff, 0);
                    prop_assert_eq!(low, icr as u32);
                }
                Err(_) => prop_assert!(dest > 0xff),
            }
        }

        #[test]
        fn timer_count_scales_linearly(counted in 1u64..1_000_000_000, measured in 1u64..1_000_000_000) {
            // Twice the period needs (about) twice the count, when it fits.
            if let (Ok(one), Ok(two)) = (
                timer_count_for(counted, measured, 10_000_000),
                timer_count_for(counted, measured, 20_000_000),
            ) {
                prop_assert!(two >= one);
                prop_assert!(u64::from(two) <= 2 * u64::from(one) + 1);
            }
        }
    }
}
