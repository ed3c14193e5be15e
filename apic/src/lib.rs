//! x86 APIC drivers: the local APIC (xAPIC MMIO and x2APIC MSRs: IPIs,
//! INIT-SIPI-SIPI, timer) and the I/O APIC (routing a device's pin to a CPU).
//!
//! Owns: the local APIC and I/O APIC registers and the encodings of what is
//! written to them (ICR, LVT, spurious-vector and divide values, host-tested
//! in [`encode`]; I/O APIC redirection entries in [`ioapic`]). Must not
//! touch: scheduling policy, deciding which CPUs or I/O APICs exist and how
//! a device is wired (the platform reads that from ACPI).
//!
//! Usage: pick the mode once on the boot CPU with [`LocalApic::detect`] (x2APIC
//! when CPUID says the CPU has it, unless told otherwise), then call
//! [`LocalApic::enable`] on every CPU, including each AP as it comes up. The
//! same `LocalApic` value works on every CPU: each CPU sees its own local APIC
//! behind the same MMIO page or MSRs.
#![cfg_attr(not(test), no_std)]

pub mod encode;
pub mod ioapic;

#[cfg(target_arch = "x86_64")]
mod hw;
#[cfg(target_arch = "x86_64")]
mod ioapic_hw;
#[cfg(target_arch = "x86_64")]
pub use hw::*;
#[cfg(target_arch = "x86_64")]
pub use ioapic_hw::*;

use core::fmt;

/// What went wrong talking to a local APIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApicError {
    /// An xAPIC in physical destination mode addresses at most APIC id 0xff.
    DestinationTooLarge {
        /// The APIC id asked for.
        apic_id: u32,
    },
    /// The previous IPI was still pending delivery after the bounded wait.
    DeliveryTimeout {
        /// The ICR low word read last.
        icr_low: u32,
    },
    /// The CPU has no x2APIC but x2APIC mode was asked for.
    X2ApicUnsupported,
    /// The CPU has no local APIC at all (CPUID.1:EDX.APIC clear).
    NoApic,
    /// A timer period does not fit the 32-bit initial count.
    TimerPeriodTooLong {
        /// The count it would need.
        count: u64,
    },
    /// Calibration measured no progress of the APIC timer.
    TimerDidNotCount,
    /// The startup IPI vector must name a page below 1 MiB (vector = page number).
    BadStartupPage {
        /// The physical address given.
        address: u64,
    },
    /// An I/O APIC pin beyond the ones it has (IOAPICVER).
    NoSuchPin {
        /// The pin asked for.
        pin: u32,
        /// How many it has.
        pins: u32,
    },
    /// A vector an interrupt source may not use (0-31: illegal or the
    /// CPU's exceptions).
    ReservedVector {
        /// The vector asked for.
        vector: u8,
    },
}

impl fmt::Display for ApicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DestinationTooLarge { apic_id } => write!(
                f,
                "APIC id {apic_id:#x} cannot be addressed in xAPIC mode (x2APIC needed)"
            ),
            Self::DeliveryTimeout { icr_low } => write!(
                f,
                "the previous IPI is still pending (ICR low {icr_low:#x})"
            ),
            Self::X2ApicUnsupported => write!(f, "this CPU has no x2APIC"),
            Self::NoApic => write!(f, "this CPU has no local APIC"),
            Self::TimerPeriodTooLong { count } => {
                write!(f, "timer period needs count {count}, more than 32 bits")
            }
            Self::TimerDidNotCount => write!(f, "the APIC timer did not count during calibration"),
            Self::BadStartupPage { address } => write!(
                f,
                "startup code at {address:#x} is not a 4 KiB page below 1 MiB"
            ),
            Self::NoSuchPin { pin, pins } => {
                write!(f, "I/O APIC pin {pin} does not exist (it has {pins})")
            }
            Self::ReservedVector { vector } => {
                write!(f, "vector {vector:#x} is reserved (below 0x20)")
            }
        }
    }
}

/// Which interface to the local APIC is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApicMode {
    /// Memory-mapped registers at the APIC base (8-bit APIC ids).
    XApic,
    /// MSRs 0x800.. (32-bit APIC ids, one-write ICR).
    X2Apic,
}

impl fmt::Display for ApicMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::XApic => "xAPIC",
            Self::X2Apic => "x2APIC",
        })
    }
}

/// Who an IPI goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpiTarget {
    /// One CPU by APIC id (physical destination mode).
    Apic(u32),
    /// The sending CPU itself.
    SelfOnly,
    /// Every CPU including the sender.
    All,
    /// Every CPU but the sender.
    AllButSelf,
}
