//! The I/O APIC itself: its two MMIO registers (IOREGSEL, IOWIN) through a
//! tock-registers struct, and the indirect registers behind them.

use tock_registers::interfaces::{Readable, Writeable};

use crate::ApicError;
use crate::ioapic::{IoApicVersion, RedirectionEntry, RedirectionStatus, index};

/// The MMIO layout (a module so the macro's items may go undocumented).
#[allow(missing_docs)]
mod layout {
    use tock_registers::register_structs;
    use tock_registers::registers::ReadWrite;

    register_structs! {
        /// The I/O APIC's window (82093AA 3.1): write an index to IOREGSEL,
        /// then read or write that register through IOWIN.
        pub IoApicRegisters {
            (0x00 => pub select: ReadWrite<u32>),
            (0x04 => _reserved0),
            (0x10 => pub window: ReadWrite<u32>),
            (0x14 => @END),
        }
    }
}
pub use layout::IoApicRegisters;

/// One I/O APIC. Its index/data pair is not atomic, so one owner drives it
/// (`&mut self`); keep it behind a lock if several CPUs must.
#[derive(Debug)]
pub struct IoApic {
    base: usize,
    version: IoApicVersion,
}

impl IoApic {
    /// The I/O APIC whose registers are at `base` (the MADT's address);
    /// reads its version and pin count.
    ///
    /// # Safety
    /// `base` must be an I/O APIC's register page, identity-mapped uncached,
    /// and driven by nothing else while the value lives.
    pub unsafe fn new(base: usize) -> Self {
        let mut ioapic = Self {
            base,
            version: IoApicVersion::decode(0),
        };
        ioapic.version = IoApicVersion::decode(ioapic.read(index::VERSION));
        ioapic
    }

    fn regs(&self) -> &IoApicRegisters {
        // SAFETY: the caller of `new` promised `base` is this I/O APIC's
        // mapped register page and that nothing else drives it.
        unsafe { &*(self.base as *const IoApicRegisters) }
    }

    fn read(&mut self, register: u32) -> u32 {
        let regs = self.regs();
        regs.select.set(register);
        regs.window.get()
    }

    fn write(&mut self, register: u32, value: u32) {
        let regs = self.regs();
        regs.select.set(register);
        regs.window.set(value);
    }

    /// The register page's address.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Its id (IOAPICID bits 27:24).
    pub fn id(&mut self) -> u8 {
        ((self.read(index::ID) >> 24) & 0x0f) as u8
    }

    /// Version and pin count, as read at construction.
    pub fn version(&self) -> IoApicVersion {
        self.version
    }

    fn indices(&self, pin: u32) -> Result<(u32, u32), ApicError> {
        let pins = self.version.pins;
        match index::redirection_low(pin) {
            Some(low) if pin < pins => Ok((low, low + 1)),
            _ => Err(ApicError::NoSuchPin { pin, pins }),
        }
    }

    fn read_raw(&mut self, pin: u32) -> Result<u64, ApicError> {
        let (low, high) = self.indices(pin)?;
        let low = self.read(low);
        let high = self.read(high);
        Ok((u64::from(high) << 32) | u64::from(low))
    }

    /// `pin`'s redirection entry.
    pub fn entry(&mut self, pin: u32) -> Result<RedirectionEntry, ApicError> {
        self.read_raw(pin).map(RedirectionEntry::decode)
    }

    /// `pin`'s status bits (delivery pending, remote IRR).
    pub fn status(&mut self, pin: u32) -> Result<RedirectionStatus, ApicError> {
        self.read_raw(pin).map(RedirectionStatus::decode)
    }

    /// Programs `pin`: masked first, then the destination, then the low
    /// word, so no half-written entry can fire.
    pub fn set_entry(&mut self, pin: u32, entry: &RedirectionEntry) -> Result<(), ApicError> {
        let (low, high) = self.indices(pin)?;
        let raw = entry.encode();
        self.write(low, entry.masked_low_word());
        self.write(high, (raw >> 32) as u32);
        self.write(low, raw as u32);
        Ok(())
    }

    /// Masks every pin (what the hypervisor starts from: nothing it did not
    /// route may interrupt).
    pub fn mask_all(&mut self) {
        for pin in 0..self.version.pins {
            // In range by construction.
            let _ = self.set_entry(pin, &RedirectionEntry::masked());
        }
    }
}
