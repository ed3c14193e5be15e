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

use apic::ioapic::{IOAPICVER, IOREDTBL, IoDelivery, RedirectionEntry, TriggerMode, index};
use tock_registers::LocalRegisterCopy;
use tock_registers::fields::FieldValue;

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

/// The implementation version QEMU's and KVM's I/O APICs report (it has
/// the EOI register).
const IMPLEMENTATION: u32 = 0x20;

type Entry = LocalRegisterCopy<u64, IOREDTBL::Register>;

/// The bits of an entry the guest may write: all but delivery status,
/// Remote IRR (the I/O APIC's own) and the reserved bits 17..56.
fn writable() -> FieldValue<u64, IOREDTBL::Register> {
    IOREDTBL::VECTOR.val(0xFF)
        + IOREDTBL::DELIVERY_MODE.val(0b111)
        + IOREDTBL::DESTINATION_MODE.val(1)
        + IOREDTBL::POLARITY.val(1)
        + IOREDTBL::TRIGGER_MODE.val(1)
        + IOREDTBL::MASK.val(1)
        + IOREDTBL::DESTINATION.val(0xFF)
}

/// An interrupt the I/O APIC sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The pin it came from.
    pub pin: u8,
    /// The vector.
    pub vector: u8,
    /// How it is delivered.
    pub mode: IoDelivery,
    /// The destination field: an APIC id (physical) or a logical mask.
    pub destination: u8,
    /// Whether `destination` is logical.
    pub logical: bool,
    /// Level-triggered: the local APIC's EOI must come back ([`IoApic::eoi`]).
    pub level: bool,
}

/// One domain's I/O APIC.
#[derive(Clone, Debug)]
pub struct IoApic {
    id: u8,
    select: u8,
    entries: [Entry; PINS],
    /// Each pin's input as driven (before polarity).
    asserted: [bool; PINS],
}

impl IoApic {
    /// At reset: every pin masked, edge, vector 0.
    pub fn new(id: u8) -> Self {
        Self {
            id,
            select: 0,
            entries: [Entry::new(RedirectionEntry::masked().encode()); PINS],
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

    fn read_register(&self, register: u32) -> u32 {
        match register {
            index::ID | index::ARBITRATION => u32::from(self.id & 0x0F) << 24,
            index::VERSION => {
                let version = IOAPICVER::VERSION.val(IMPLEMENTATION)
                    + IOAPICVER::MAX_REDIRECTION_ENTRY.val(PINS as u32 - 1);
                version.value
            }
            _ => match Self::entry_index(register) {
                Some((pin, high)) => {
                    let value = self.entries[pin].get();
                    (if high { value >> 32 } else { value }) as u32
                }
                None => 0,
            },
        }
    }

    fn write_register(&mut self, register: u32, value: u32) -> Option<Delivery> {
        if register == index::ID {
            self.id = (value >> 24) as u8 & 0x0F;
            return None;
        }
        let (pin, high) = Self::entry_index(register)?;
        let old = self.entries[pin];
        let written = if high {
            (old.get() & 0xFFFF_FFFF) | u64::from(value) << 32
        } else {
            (old.get() & !0xFFFF_FFFF) | u64::from(value)
        };
        let mut new = Entry::new(written & writable().mask());
        // Remote IRR is the I/O APIC's own, and only meaningful for level
        // entries.
        if old.is_set(IOREDTBL::REMOTE_IRR) && new.is_set(IOREDTBL::TRIGGER_MODE) {
            new.modify(IOREDTBL::REMOTE_IRR::SET);
        }
        self.entries[pin] = new;
        self.service(pin)
    }

    /// The pin and dword of redirection register `index`.
    fn entry_index(register: u32) -> Option<(usize, bool)> {
        let offset = register.checked_sub(index::REDIRECTION_TABLE)? as usize;
        (offset < 2 * PINS).then_some((offset / 2, offset % 2 == 1))
    }

    /// Drives pin `pin`: `asserted` is the device's request, whatever the
    /// line's electrical polarity (a guest programs the entry's polarity to
    /// match the MADT; [`IoApic::active_low`] reports it). An edge pin
    /// delivers when the request starts; a level pin while it lasts, once
    /// per EOI.
    pub fn set_pin(&mut self, pin: usize, asserted: bool) -> Option<Delivery> {
        let was = core::mem::replace(self.asserted.get_mut(pin)?, asserted);
        let entry = self.entries[pin];
        if entry.is_set(IOREDTBL::TRIGGER_MODE) {
            return self.service(pin);
        }
        if asserted && !was && !entry.is_set(IOREDTBL::MASK) {
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
            let entry = self.entries[pin];
            if entry.is_set(IOREDTBL::REMOTE_IRR) && entry.read(IOREDTBL::VECTOR) as u8 == vector {
                self.entries[pin].modify(IOREDTBL::REMOTE_IRR::CLEAR);
                again = again.or(self.service(pin));
            }
        }
        again
    }

    /// A level pin's delivery, if it is due now: asserted, unmasked, not
    /// waiting for an EOI.
    fn service(&mut self, pin: usize) -> Option<Delivery> {
        let entry = self.entries[pin];
        let due = entry.is_set(IOREDTBL::TRIGGER_MODE)
            && self.asserted[pin]
            && !entry.is_set(IOREDTBL::MASK)
            && !entry.is_set(IOREDTBL::REMOTE_IRR);
        if !due {
            return None;
        }
        self.entries[pin].modify(IOREDTBL::REMOTE_IRR::SET);
        Some(self.delivery(pin))
    }

    fn delivery(&self, pin: usize) -> Delivery {
        let entry = RedirectionEntry::decode(self.entries[pin].get());
        Delivery {
            pin: pin as u8,
            vector: entry.vector,
            mode: entry.delivery,
            destination: entry.destination,
            logical: entry.logical,
            level: entry.trigger == TriggerMode::Level,
        }
    }

    /// Whether pin `pin`'s entry is programmed active-low (for the glue's
    /// report; the model takes inputs as asserted/deasserted).
    pub fn active_low(&self, pin: usize) -> bool {
        self.entries
            .get(pin)
            .is_some_and(|e| e.is_set(IOREDTBL::POLARITY))
    }
}

#[cfg(test)]
mod tests;
