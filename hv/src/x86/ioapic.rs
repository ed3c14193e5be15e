//! The emulated I/O APIC each x86 domain sees (82093AA datasheet, order
//! 290566; version 0x20 with the EOI register, as QEMU and KVM present it):
//! 24 pins, each routed by its redirection-table entry to a vector on a
//! local APIC. The MMIO window is two registers, IOREGSEL (0x00) and IOWIN
//! (0x10), plus the EOI register (0x40).
//!
//! The glue drives the pins ([`IoApic::set_pin`]: the PIT's output on pin
//! 2, COM1 on pin 4, the SCI on pin 9), carries out the deliveries they
//! return ([`Delivery`]: the caller resolves the destination to vCPUs), and
//! forwards each local APIC EOI of a level-triggered vector
//! ([`IoApic::eoi`]), which clears the entry's Remote IRR and delivers the
//! pin again if it is still asserted. A level pin delivers once per EOI
//! (Remote IRR), an edge pin once per rising edge; a masked pin delivers
//! nothing (a level pin that is still asserted when unmasked delivers
//! then). Every access is accepted; nothing panics.

/// The I/O APIC's guest-physical MMIO base (the PC's).
pub const BASE: u64 = 0xFEC0_0000;
/// The MMIO window's size.
pub const SIZE: u64 = 0x1000;
/// Redirection-table entries (pins).
pub const PINS: usize = 24;

/// MMIO offsets.
const IOREGSEL: u64 = 0x00;
const IOWIN: u64 = 0x10;
const EOI: u64 = 0x40;

/// Register indices.
const REG_ID: u32 = 0x00;
const REG_VERSION: u32 = 0x01;
const REG_ARBITRATION: u32 = 0x02;
const REG_REDIRECTION: u32 = 0x10;

/// Version 0x20, maximum redirection entry `PINS - 1` in bits 16..24.
const VERSION: u32 = 0x20 | ((PINS as u32 - 1) << 16);

/// Redirection entry bits (low dword, and the destination's high byte).
mod entry {
    pub const VECTOR: u64 = 0xFF;
    pub const DELIVERY_MODE_SHIFT: u32 = 8;
    pub const DEST_LOGICAL: u64 = 1 << 11;
    pub const DELIVERY_STATUS: u64 = 1 << 12;
    pub const POLARITY_LOW: u64 = 1 << 13;
    pub const REMOTE_IRR: u64 = 1 << 14;
    pub const TRIGGER_LEVEL: u64 = 1 << 15;
    pub const MASKED: u64 = 1 << 16;
    pub const DESTINATION_SHIFT: u32 = 56;
    /// What a guest may write (delivery status and Remote IRR are the
    /// I/O APIC's own; bits 17..56 are reserved).
    pub const WRITABLE: u64 = 0xFF00_0000_0001_AFFF;
}

/// How a delivery reaches its local APICs (the entry's delivery mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryMode {
    /// To every destination.
    Fixed,
    /// To one destination, the lowest-priority one (any will do).
    LowestPriority,
    /// An SMI (the glue refuses it).
    Smi,
    /// An NMI.
    Nmi,
    /// An INIT.
    Init,
    /// An external interrupt: the vector comes from the 8259.
    ExtInt,
    /// A reserved encoding (5 or 7 other than ExtINT).
    Reserved(u8),
}

impl DeliveryMode {
    fn from_bits(bits: u8) -> Self {
        match bits {
            0 => Self::Fixed,
            1 => Self::LowestPriority,
            2 => Self::Smi,
            4 => Self::Nmi,
            5 => Self::Init,
            7 => Self::ExtInt,
            other => Self::Reserved(other),
        }
    }
}

/// An interrupt the I/O APIC sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The pin it came from.
    pub pin: u8,
    /// The vector.
    pub vector: u8,
    /// How it is delivered.
    pub mode: DeliveryMode,
    /// The destination field: an APIC id (physical) or a logical mask.
    pub destination: u8,
    /// Whether `destination` is logical.
    pub logical: bool,
    /// Level-triggered: the local APIC's EOI must come back ([`IoApic::eoi`]).
    pub level: bool,
}

/// One domain's I/O APIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoApic {
    id: u8,
    select: u8,
    entries: [u64; PINS],
    /// Each pin's input as driven (before polarity).
    asserted: [bool; PINS],
}

impl IoApic {
    /// At reset: every pin masked, edge, vector 0.
    pub fn new(id: u8) -> Self {
        Self {
            id,
            select: 0,
            entries: [entry::MASKED; PINS],
            asserted: [false; PINS],
        }
    }

    /// Whether `address` is in the I/O APIC's window.
    pub fn claims(address: u64) -> bool {
        (BASE..BASE + SIZE).contains(&address)
    }

    /// A 32-bit read at `offset` in the window.
    pub fn read(&self, offset: u64) -> u32 {
        match offset {
            IOREGSEL => u32::from(self.select),
            IOWIN => self.read_register(u32::from(self.select)),
            _ => 0,
        }
    }

    /// A 32-bit write at `offset` in the window; the deliveries it causes
    /// (an entry unmasked, or changed, while its level pin is asserted).
    pub fn write(&mut self, offset: u64, value: u32) -> Option<Delivery> {
        match offset {
            IOREGSEL => {
                self.select = value as u8;
                None
            }
            IOWIN => self.write_register(u32::from(self.select), value),
            EOI => self.eoi(value as u8),
            _ => None,
        }
    }

    fn read_register(&self, index: u32) -> u32 {
        match index {
            REG_ID => u32::from(self.id & 0x0F) << 24,
            REG_VERSION => VERSION,
            REG_ARBITRATION => u32::from(self.id & 0x0F) << 24,
            _ => match Self::entry_index(index) {
                Some((pin, high)) => {
                    let value = self.entries[pin];
                    (if high { value >> 32 } else { value }) as u32
                }
                None => 0,
            },
        }
    }

    fn write_register(&mut self, index: u32, value: u32) -> Option<Delivery> {
        if index == REG_ID {
            self.id = (value >> 24) as u8 & 0x0F;
            return None;
        }
        let (pin, high) = Self::entry_index(index)?;
        let old = self.entries[pin];
        let written = if high {
            (old & 0xFFFF_FFFF) | u64::from(value) << 32
        } else {
            (old & !0xFFFF_FFFF) | u64::from(value)
        };
        let own = entry::DELIVERY_STATUS | entry::REMOTE_IRR;
        let mut new = (written & entry::WRITABLE) | (old & own);
        if new & entry::TRIGGER_LEVEL == 0 {
            // Remote IRR is only meaningful for level entries.
            new &= !entry::REMOTE_IRR;
        }
        self.entries[pin] = new;
        self.service(pin)
    }

    /// The pin and dword of redirection register `index`.
    fn entry_index(index: u32) -> Option<(usize, bool)> {
        let offset = index.checked_sub(REG_REDIRECTION)? as usize;
        (offset < 2 * PINS).then_some((offset / 2, offset % 2 == 1))
    }

    /// Drives pin `pin`: `asserted` is the device's request, whatever the
    /// line's electrical polarity (a guest programs the entry's polarity to
    /// match the MADT; [`IoApic::active_low`] reports it). An edge pin
    /// delivers when the request starts; a level pin while it lasts, once
    /// per EOI.
    pub fn set_pin(&mut self, pin: usize, asserted: bool) -> Option<Delivery> {
        let was = core::mem::replace(self.asserted.get_mut(pin)?, asserted);
        let value = self.entries[pin];
        if value & entry::TRIGGER_LEVEL != 0 {
            return self.service(pin);
        }
        if asserted && !was && value & entry::MASKED == 0 {
            return Some(self.delivery(pin));
        }
        None
    }

    /// A local APIC finished `vector` (an EOI of a level-triggered
    /// interrupt, broadcast, or a write to the EOI register): every level
    /// entry with that vector waiting for it is released, and delivers
    /// again if its pin is still asserted (the first such, if several).
    pub fn eoi(&mut self, vector: u8) -> Option<Delivery> {
        let mut again = None;
        for pin in 0..PINS {
            let value = self.entries[pin];
            if value & entry::REMOTE_IRR != 0 && (value & entry::VECTOR) as u8 == vector {
                self.entries[pin] &= !entry::REMOTE_IRR;
                again = again.or(self.service(pin));
            }
        }
        again
    }

    /// A level pin's delivery, if it is due now: asserted, unmasked, not
    /// waiting for an EOI.
    fn service(&mut self, pin: usize) -> Option<Delivery> {
        let value = self.entries[pin];
        let level = value & entry::TRIGGER_LEVEL != 0;
        if !level || !self.asserted[pin] || value & (entry::MASKED | entry::REMOTE_IRR) != 0 {
            return None;
        }
        self.entries[pin] |= entry::REMOTE_IRR;
        Some(self.delivery(pin))
    }

    fn delivery(&self, pin: usize) -> Delivery {
        let value = self.entries[pin];
        Delivery {
            pin: pin as u8,
            vector: (value & entry::VECTOR) as u8,
            mode: DeliveryMode::from_bits((value >> entry::DELIVERY_MODE_SHIFT) as u8 & 0b111),
            destination: (value >> entry::DESTINATION_SHIFT) as u8,
            logical: value & entry::DEST_LOGICAL != 0,
            level: value & entry::TRIGGER_LEVEL != 0,
        }
    }

    /// Whether pin `pin`'s entry is programmed active-low (for the glue's
    /// report; the model takes inputs as asserted/deasserted).
    pub fn active_low(&self, pin: usize) -> bool {
        self.entries
            .get(pin)
            .is_some_and(|v| v & entry::POLARITY_LOW != 0)
    }
}

#[cfg(test)]
mod tests;
