//! Arm PL011 UART (DDI 0183): polled output and input, as the hypervisor console.

use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

#[allow(missing_docs)] // the macros generate undocumented helper items
mod fields {
    use tock_registers::register_bitfields;
    register_bitfields! {u32,
        /// Flag register (DDI 0183 3.3.3).
        pub FR [
            /// Transmit FIFO full.
            TXFF OFFSET(5) NUMBITS(1) [],
            /// Receive FIFO empty.
            RXFE OFFSET(4) NUMBITS(1) [],
            /// UART busy transmitting.
            BUSY OFFSET(3) NUMBITS(1) [],
        ],
        /// Control register (DDI 0183 3.3.8).
        pub CR [
            /// Receive enable.
            RXE OFFSET(9) NUMBITS(1) [],
            /// Transmit enable.
            TXE OFFSET(8) NUMBITS(1) [],
            /// UART enable.
            UARTEN OFFSET(0) NUMBITS(1) [],
        ],
        /// Interrupt bits shared by UARTIMSC, UARTRIS, UARTMIS and UARTICR
        /// (DDI 0183 3.3.10 - 3.3.13).
        pub INT [
            /// All defined interrupt bits.
            ALL OFFSET(0) NUMBITS(11) [],
            /// Receive timeout: data sits in the FIFO below the trigger level.
            RT OFFSET(6) NUMBITS(1) [],
            /// Receive: the FIFO reached its trigger level.
            RX OFFSET(4) NUMBITS(1) [],
        ],
    }
}
use fields::{CR, FR, INT};

register_structs! {
    /// The PL011 register block.
    pub Pl011Registers {
        (0x00 => data: ReadWrite<u32>),
        (0x04 => _reserved0),
        (0x18 => flags: ReadOnly<u32, FR::Register>),
        (0x1c => _reserved1),
        (0x30 => control: ReadWrite<u32, CR::Register>),
        (0x34 => _reserved2),
        (0x38 => interrupt_mask: ReadWrite<u32, INT::Register>),
        (0x3c => _reserved3),
        (0x44 => interrupt_clear: WriteOnly<u32, INT::Register>),
        (0x48 => @END),
    }
}

/// Spins this many flag reads at most before dropping a byte: a stuck UART must
/// not hang the hypervisor (the bound is ~1 ms of polling on a slow core).
const TX_SPIN_BOUND: u32 = 100_000;

/// A PL011 at a fixed MMIO address.
pub struct Pl011 {
    registers: &'static Pl011Registers,
}

// SAFETY: the register block is MMIO that any CPU may access; the console
// serialises each direction behind its own lock (the transmitter and control
// registers behind one, the receiver behind another).
unsafe impl Send for Pl011 {}

impl Pl011 {
    /// # Safety
    /// `base` must be the identity-mapped address of a PL011 register block that
    /// nothing else drives concurrently (callers serialise through the console lock).
    pub const unsafe fn new(base: usize) -> Self {
        // SAFETY: the caller promises `base` points at a PL011 register block that
        // stays mapped for the hypervisor's lifetime.
        let registers = unsafe { &*(base as *const Pl011Registers) };
        Self { registers }
    }

    /// Enables transmit and receive. Firmware (or QEMU) has set the baud rate.
    pub fn enable(&self) {
        self.registers
            .control
            .write(CR::UARTEN::SET + CR::TXE::SET + CR::RXE::SET);
        self.registers.interrupt_clear.write(INT::ALL::SET);
    }

    /// Unmasks the receive and receive-timeout interrupts, so the UART's
    /// interrupt line rises while input waits (both clear as
    /// [`Pl011::read_byte`] drains the FIFO); every other source stays masked.
    pub fn enable_rx_interrupts(&self) {
        self.registers
            .interrupt_mask
            .write(INT::RX::SET + INT::RT::SET);
    }

    /// Sends one byte, waiting (bounded) for room in the FIFO.
    pub fn write_byte(&self, byte: u8) {
        for _ in 0..TX_SPIN_BOUND {
            if !self.registers.flags.is_set(FR::TXFF) {
                self.registers.data.set(u32::from(byte));
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// A received byte, if any.
    pub fn read_byte(&self) -> Option<u8> {
        if self.registers.flags.is_set(FR::RXFE) {
            None
        } else {
            Some(self.registers.data.get() as u8)
        }
    }
}

impl core::fmt::Write for Pl011 {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for byte in s.bytes() {
            if byte == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(byte);
        }
        Ok(())
    }
}
