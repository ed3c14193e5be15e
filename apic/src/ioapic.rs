//! Pure encodings of I/O APIC register values (Intel 82093AA I/O APIC
//! datasheet, 3.2; the same layout every PC chipset's I/O APIC keeps): the
//! register indices behind IOREGSEL/IOWIN, the version register, and the
//! 64-bit redirection-table entries, computed without touching hardware so
//! host tests check every bit. The driver is `IoApic` (built for x86-64 only).

use tock_registers::LocalRegisterCopy;
use tock_registers::fields::FieldValue;

use crate::ApicError;

pub use fields::{IOAPICVER, IOREDTBL};

/// The register bitfields (the macro's generated items carry no docs of their own).
#[allow(non_snake_case, missing_docs)]
mod fields {
    use tock_registers::register_bitfields;

    register_bitfields! [u32,
        /// IOAPICVER (index 0x01, 82093AA 3.2.2).
        pub IOAPICVER [
            /// The implementation's version (0x11 for the 82093AA, 0x20 for
            /// the chipset I/O APICs QEMU's q35 models).
            VERSION OFFSET(0) NUMBITS(8) [],
            /// The highest redirection-table entry: the pin count minus one.
            MAX_REDIRECTION_ENTRY OFFSET(16) NUMBITS(8) []
        ]
    ];

    register_bitfields! [u64,
        /// A redirection-table entry (IOREDTBL0..23, indices 0x10 + 2n (low word)
        /// and 0x11 + 2n (high word), 82093AA 3.2.4).
        pub IOREDTBL [
            /// The vector delivered.
            VECTOR OFFSET(0) NUMBITS(8) [],
            /// How the destination takes it.
            DELIVERY_MODE OFFSET(8) NUMBITS(3) [
                /// The vector, to the destination's local APIC.
                Fixed = 0b000,
                /// The vector, to the lowest-priority CPU among the destinations.
                LowestPriority = 0b001,
                /// A system management interrupt (vector ignored, edge).
                Smi = 0b010,
                /// NMI (vector ignored, edge).
                Nmi = 0b100,
                /// INIT (vector ignored, edge).
                Init = 0b101,
                /// External interrupt: the vector comes from an 8259A (edge).
                ExtInt = 0b111
            ],
            /// Physical (APIC id) or logical destination.
            DESTINATION_MODE OFFSET(11) NUMBITS(1) [
                /// The destination field is an APIC id.
                Physical = 0,
                /// The destination field is a set of logical APIC ids.
                Logical = 1
            ],
            /// Set while the interrupt waits to be sent (read-only).
            DELIVERY_STATUS OFFSET(12) NUMBITS(1) [],
            /// The input pin's polarity.
            POLARITY OFFSET(13) NUMBITS(1) [
                /// Asserted when high.
                ActiveHigh = 0,
                /// Asserted when low.
                ActiveLow = 1
            ],
            /// Level interrupts: set once a local APIC accepted it, cleared by
            /// its EOI (read-only).
            REMOTE_IRR OFFSET(14) NUMBITS(1) [],
            /// Edge or level sensitive pin.
            TRIGGER_MODE OFFSET(15) NUMBITS(1) [
                /// Edge.
                Edge = 0,
                /// Level.
                Level = 1
            ],
            /// Masked: the pin does not interrupt.
            MASK OFFSET(16) NUMBITS(1) [],
            /// The destination: an APIC id (physical mode, 8 bits on chipsets
            /// without interrupt remapping) or a logical set.
            DESTINATION OFFSET(56) NUMBITS(8) []
        ]
    ];
}

/// The register indices written to IOREGSEL (82093AA 3.1, 3.2).
pub mod index {
    /// IOAPICID: the I/O APIC's own id in bits 27:24.
    pub const ID: u32 = 0x00;
    /// IOAPICVER: version and pin count.
    pub const VERSION: u32 = 0x01;
    /// IOAPICARB: arbitration id.
    pub const ARBITRATION: u32 = 0x02;
    /// The low word of redirection entry 0; entry n's is `0x10 + 2n`, its
    /// high word follows it.
    pub const REDIRECTION_TABLE: u32 = 0x10;

    /// The index of the low word of `pin`'s redirection entry (its high
    /// word is the next index). The table can hold at most 120 entries
    /// (indices up to 0xFF); `None` beyond that.
    pub fn redirection_low(pin: u32) -> Option<u32> {
        let low = pin.checked_mul(2)?.checked_add(REDIRECTION_TABLE)?;
        (low < 0xff).then_some(low)
    }
}

/// What IOAPICVER says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoApicVersion {
    /// The implementation version.
    pub version: u8,
    /// How many input pins (redirection entries) it has.
    pub pins: u32,
}

impl IoApicVersion {
    /// Decodes the IOAPICVER register.
    pub fn decode(raw: u32) -> Self {
        let reg: LocalRegisterCopy<u32, IOAPICVER::Register> = LocalRegisterCopy::new(raw);
        Self {
            version: reg.read(IOAPICVER::VERSION) as u8,
            pins: reg.read(IOAPICVER::MAX_REDIRECTION_ENTRY) + 1,
        }
    }
}

/// How a redirection entry delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDelivery {
    /// The entry's vector.
    Fixed,
    /// The entry's vector, to the lowest-priority destination.
    LowestPriority,
    /// SMI.
    Smi,
    /// NMI.
    Nmi,
    /// INIT.
    Init,
    /// ExtINT (8259A vector).
    ExtInt,
    /// A reserved encoding (0b011 or 0b110), as read back.
    Reserved(u8),
}

/// An input pin's polarity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polarity {
    /// Asserted high (ISA's default).
    ActiveHigh,
    /// Asserted low (PCI's).
    ActiveLow,
}

/// An input pin's trigger mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerMode {
    /// Edge (ISA's default).
    Edge,
    /// Level (PCI's).
    Level,
}

/// One redirection-table entry, before encoding (or as decoded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedirectionEntry {
    /// The vector (ignored for SMI, NMI, INIT, ExtINT).
    pub vector: u8,
    /// How it is delivered.
    pub delivery: IoDelivery,
    /// Logical (true) or physical destination.
    pub logical: bool,
    /// The destination field.
    pub destination: u8,
    /// The pin's polarity.
    pub polarity: Polarity,
    /// The pin's trigger mode.
    pub trigger: TriggerMode,
    /// The pin does not interrupt.
    pub masked: bool,
}

/// The lowest vector an I/O APIC may deliver as a fixed interrupt: 0-15 are
/// illegal for a local APIC and 16-31 are the CPU's exception vectors.
pub const FIRST_USABLE_VECTOR: u8 = 0x20;

impl RedirectionEntry {
    /// `vector`, fixed, to the CPU with APIC id `apic_id` (physical mode),
    /// unmasked. Physical mode without interrupt remapping names 8-bit APIC
    /// ids only; vectors below 0x20 are refused.
    pub fn fixed(
        vector: u8,
        apic_id: u32,
        polarity: Polarity,
        trigger: TriggerMode,
    ) -> Result<Self, ApicError> {
        if vector < FIRST_USABLE_VECTOR {
            return Err(ApicError::ReservedVector { vector });
        }
        let destination =
            u8::try_from(apic_id).map_err(|_| ApicError::DestinationTooLarge { apic_id })?;
        Ok(Self {
            vector,
            delivery: IoDelivery::Fixed,
            logical: false,
            destination,
            polarity,
            trigger,
            masked: false,
        })
    }

    /// A masked entry (what a pin nobody uses holds).
    pub const fn masked() -> Self {
        Self {
            vector: 0,
            delivery: IoDelivery::Fixed,
            logical: false,
            destination: 0,
            polarity: Polarity::ActiveHigh,
            trigger: TriggerMode::Edge,
            masked: true,
        }
    }

    /// The 64-bit register value (high word: index `0x11 + 2n`, low word:
    /// `0x10 + 2n`).
    pub fn encode(&self) -> u64 {
        let delivery = match self.delivery {
            IoDelivery::Fixed => IOREDTBL::DELIVERY_MODE::Fixed,
            IoDelivery::LowestPriority => IOREDTBL::DELIVERY_MODE::LowestPriority,
            IoDelivery::Smi => IOREDTBL::DELIVERY_MODE::Smi,
            IoDelivery::Nmi => IOREDTBL::DELIVERY_MODE::Nmi,
            IoDelivery::Init => IOREDTBL::DELIVERY_MODE::Init,
            IoDelivery::ExtInt => IOREDTBL::DELIVERY_MODE::ExtInt,
            IoDelivery::Reserved(raw) => IOREDTBL::DELIVERY_MODE.val(u64::from(raw & 0b111)),
        };
        let polarity = match self.polarity {
            Polarity::ActiveHigh => IOREDTBL::POLARITY::ActiveHigh,
            Polarity::ActiveLow => IOREDTBL::POLARITY::ActiveLow,
        };
        let trigger = match self.trigger {
            TriggerMode::Edge => IOREDTBL::TRIGGER_MODE::Edge,
            TriggerMode::Level => IOREDTBL::TRIGGER_MODE::Level,
        };
        let value: FieldValue<u64, IOREDTBL::Register> = IOREDTBL::VECTOR
            .val(u64::from(self.vector))
            + delivery
            + IOREDTBL::DESTINATION_MODE.val(u64::from(self.logical))
            + polarity
            + trigger
            + IOREDTBL::MASK.val(u64::from(self.masked))
            + IOREDTBL::DESTINATION.val(u64::from(self.destination));
        value.value
    }

    /// Decodes a register value (the read-only status bits are dropped:
    /// see [`RedirectionStatus`]).
    pub fn decode(raw: u64) -> Self {
        let reg: LocalRegisterCopy<u64, IOREDTBL::Register> = LocalRegisterCopy::new(raw);
        let delivery = match reg.read(IOREDTBL::DELIVERY_MODE) as u8 {
            0b000 => IoDelivery::Fixed,
            0b001 => IoDelivery::LowestPriority,
            0b010 => IoDelivery::Smi,
            0b100 => IoDelivery::Nmi,
            0b101 => IoDelivery::Init,
            0b111 => IoDelivery::ExtInt,
            other => IoDelivery::Reserved(other),
        };
        Self {
            vector: reg.read(IOREDTBL::VECTOR) as u8,
            delivery,
            logical: reg.is_set(IOREDTBL::DESTINATION_MODE),
            destination: reg.read(IOREDTBL::DESTINATION) as u8,
            polarity: if reg.is_set(IOREDTBL::POLARITY) {
                Polarity::ActiveLow
            } else {
                Polarity::ActiveHigh
            },
            trigger: if reg.is_set(IOREDTBL::TRIGGER_MODE) {
                TriggerMode::Level
            } else {
                TriggerMode::Edge
            },
            masked: reg.is_set(IOREDTBL::MASK),
        }
    }

    /// The low word with the mask bit forced on: written first when an entry
    /// changes, so a half-written entry never fires.
    pub fn masked_low_word(&self) -> u32 {
        (self.encode() | IOREDTBL::MASK::SET.value) as u32
    }
}

/// The read-only status bits of a redirection entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedirectionStatus {
    /// Waiting to be sent.
    pub delivery_pending: bool,
    /// A level interrupt is in service (no EOI yet).
    pub remote_irr: bool,
}

impl RedirectionStatus {
    /// Reads them from a register value.
    pub fn decode(raw: u64) -> Self {
        let reg: LocalRegisterCopy<u64, IOREDTBL::Register> = LocalRegisterCopy::new(raw);
        Self {
            delivery_pending: reg.is_set(IOREDTBL::DELIVERY_STATUS),
            remote_irr: reg.is_set(IOREDTBL::REMOTE_IRR),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn register_indices() {
        assert_eq!(index::redirection_low(0), Some(0x10));
        assert_eq!(index::redirection_low(4), Some(0x18));
        assert_eq!(index::redirection_low(23), Some(0x3e));
        assert_eq!(index::redirection_low(119), Some(0xfe));
        assert_eq!(index::redirection_low(120), None);
        assert_eq!(index::redirection_low(u32::MAX), None);
    }

    #[test]
    fn version_register() {
        // QEMU's q35 I/O APIC: version 0x20, 24 pins (max entry 0x17).
        assert_eq!(
            IoApicVersion::decode(0x0017_0020),
            IoApicVersion {
                version: 0x20,
                pins: 24
            }
        );
        // The 82093AA: version 0x11, 24 pins; reserved bits ignored.
        assert_eq!(
            IoApicVersion::decode(0xff17_ff11),
            IoApicVersion {
                version: 0x11,
                pins: 24
            }
        );
    }

    #[test]
    fn isa_serial_entry_bits() {
        // COM1 (ISA IRQ 4): edge, active high, vector 0x45 to APIC id 0.
        let entry =
            RedirectionEntry::fixed(0x45, 0, Polarity::ActiveHigh, TriggerMode::Edge).unwrap();
        assert_eq!(entry.encode(), 0x0000_0000_0000_0045);
        // A PCI-style pin: level (bit 15), active low (bit 13), to APIC id 3
        // (bits 63:56).
        let pci =
            RedirectionEntry::fixed(0x51, 3, Polarity::ActiveLow, TriggerMode::Level).unwrap();
        assert_eq!(pci.encode(), 0x0300_0000_0000_a051);
        assert_eq!(pci.masked_low_word(), 0x0001_a051);
        assert_eq!(RedirectionEntry::masked().encode(), 0x0001_0000);
        // What firmware leaves after reset: masked, everything else zero.
        assert_eq!(
            RedirectionEntry::decode(0x0001_0000),
            RedirectionEntry::masked()
        );
    }

    #[test]
    fn other_delivery_modes_and_logical_destinations() {
        let mut entry = RedirectionEntry::masked();
        entry.masked = false;
        for (delivery, bits) in [
            (IoDelivery::LowestPriority, 0x100),
            (IoDelivery::Smi, 0x200),
            (IoDelivery::Nmi, 0x400),
            (IoDelivery::Init, 0x500),
            (IoDelivery::ExtInt, 0x700),
        ] {
            entry.delivery = delivery;
            assert_eq!(entry.encode(), bits, "{delivery:?}");
            assert_eq!(RedirectionEntry::decode(bits), entry);
        }
        entry.delivery = IoDelivery::Fixed;
        entry.logical = true;
        entry.destination = 0x0f;
        assert_eq!(entry.encode(), 0x0f00_0000_0000_0800);
        assert_eq!(
            RedirectionEntry::decode(0x300).delivery,
            IoDelivery::Reserved(0b011)
        );
    }

    #[test]
    fn refused_entries() {
        assert_eq!(
            RedirectionEntry::fixed(0x1f, 0, Polarity::ActiveHigh, TriggerMode::Edge),
            Err(ApicError::ReservedVector { vector: 0x1f })
        );
        assert_eq!(
            RedirectionEntry::fixed(0x40, 0x100, Polarity::ActiveHigh, TriggerMode::Edge),
            Err(ApicError::DestinationTooLarge { apic_id: 0x100 })
        );
    }

    #[test]
    fn status_bits() {
        assert_eq!(
            RedirectionStatus::decode(0x1000),
            RedirectionStatus {
                delivery_pending: true,
                remote_irr: false
            }
        );
        assert_eq!(
            RedirectionStatus::decode(0x4000),
            RedirectionStatus {
                delivery_pending: false,
                remote_irr: true
            }
        );
        // The status bits are not part of the entry.
        assert_eq!(
            RedirectionEntry::decode(0x5045).encode(),
            0x45,
            "delivery status and remote IRR dropped"
        );
    }

    proptest! {
        #[test]
        fn fixed_entries_round_trip(
            vector in FIRST_USABLE_VECTOR..=255u8,
            apic_id in 0u32..=0xff,
            low in any::<bool>(),
            level in any::<bool>(),
            masked in any::<bool>(),
        ) {
            let polarity = if low { Polarity::ActiveLow } else { Polarity::ActiveHigh };
            let trigger = if level { TriggerMode::Level } else { TriggerMode::Edge };
            let mut entry = RedirectionEntry::fixed(vector, apic_id, polarity, trigger).unwrap();
            entry.masked = masked;
            let raw = entry.encode();
            prop_assert_eq!(RedirectionEntry::decode(raw), entry);
            prop_assert_eq!(raw as u8, vector);
            prop_assert_eq!((raw >> 56) as u32, apic_id);
            prop_assert_eq!((raw >> 13) & 1, u64::from(low));
            prop_assert_eq!((raw >> 15) & 1, u64::from(level));
            prop_assert_eq!((raw >> 16) & 1, u64::from(masked));
            // Reserved bits 55:17 and the read-only bits stay clear.
            prop_assert_eq!(raw & 0x00ff_ffff_fffe_5000, 0);
            prop_assert_eq!(entry.masked_low_word() & (1 << 16), 1 << 16);
        }
    }
}
