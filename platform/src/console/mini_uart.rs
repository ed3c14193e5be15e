//! Broadcom BCM2835-family "mini UART" (AUX UART1; BCM2711 ARM Peripherals,
//! section 2.2): polled output and input, as the hypervisor console on a
//! Raspberry Pi whose PL011 drives Bluetooth.
//!
//! The register block starts at `AUX_MU_IO` (the device tree's `reg`, e.g.
//! 0xfe21_5040 on the Pi 4). The firmware (`enable_uart=1`) has already set
//! `AUX_ENABLES`, the GPIO function and the baud divisor; the baud rate follows
//! the VPU core clock, which is why the Pi's `config.txt` pins that clock.

use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::register_structs;
use tock_registers::registers::ReadWrite;

#[allow(missing_docs)] // the macros generate undocumented helper items
mod fields {
    use tock_registers::register_bitfields;
    register_bitfields! {u32,
        /// Line control (`AUX_MU_LCR_REG`).
        pub LCR [
            /// Data size: 0 = 7 bits, 3 = 8 bits (bit 1 is undocumented but
            /// needed for 8 bits, as every driver and the firmware set it).
            DATA_SIZE OFFSET(0) NUMBITS(2) [
                SevenBit = 0,
                EightBit = 3,
            ],
        ],
        /// Line status (`AUX_MU_LSR_REG`).
        pub LSR [
            /// The transmit FIFO can accept at least one byte.
            TX_EMPTY OFFSET(5) NUMBITS(1) [],
            /// The receive FIFO holds at least one byte.
            DATA_READY OFFSET(0) NUMBITS(1) [],
        ],
        /// Interrupt enable (`AUX_MU_IER_REG`; the datasheet swaps the two
        /// bits, its errata and Linux's 8250 driver agree on these).
        pub IER [
            /// Interrupt while the receive FIFO holds data.
            RX_DATA OFFSET(0) NUMBITS(1) [],
            /// Interrupt while the transmit FIFO is empty.
            TX_EMPTY OFFSET(1) NUMBITS(1) [],
        ],
        /// Extra control (`AUX_MU_CNTL_REG`).
        pub CNTL [
            /// Transmitter enable.
            TX_ENABLE OFFSET(1) NUMBITS(1) [],
            /// Receiver enable.
            RX_ENABLE OFFSET(0) NUMBITS(1) [],
        ],
    }
}
use fields::{CNTL, IER, LCR, LSR};

register_structs! {
    /// The mini UART register block, from `AUX_MU_IO_REG`.
    pub MiniUartRegisters {
        (0x00 => io: ReadWrite<u32>),
        (0x04 => interrupt_enable: ReadWrite<u32, IER::Register>),
        (0x08 => _interrupt_identify),
        (0x0c => line_control: ReadWrite<u32, LCR::Register>),
        (0x10 => _modem_control),
        (0x14 => line_status: ReadWrite<u32, LSR::Register>),
        (0x18 => _modem_status_scratch),
        (0x20 => control: ReadWrite<u32, CNTL::Register>),
        (0x24 => _status_baud),
        (0x2c => @END),
    }
}

/// Spins this many status reads at most before dropping a byte: a stuck or
/// unclocked UART must not hang the hypervisor.
const TX_SPIN_BOUND: u32 = 100_000;

/// A mini UART at a fixed MMIO address.
pub struct MiniUart {
    registers: &'static MiniUartRegisters,
}

// SAFETY: the register block is MMIO that any CPU may access; the console
// serialises each direction behind its own lock (the transmitter and control
// registers behind one, the receiver behind another).
unsafe impl Send for MiniUart {}

impl MiniUart {
    /// # Safety
    /// `base` must be the identity-mapped address of a mini UART's `AUX_MU_IO`
    /// register (the device tree's `reg`) that nothing else drives concurrently
    /// and that stays mapped for the hypervisor's lifetime.
    pub const unsafe fn new(base: usize) -> Self {
        // SAFETY: forwarded from this function's contract.
        let registers = unsafe { &*(base as *const MiniUartRegisters) };
        Self { registers }
    }

    /// Polled mode, 8 data bits, transmitter and receiver on. The baud rate
    /// is left as the firmware set it.
    pub fn enable(&self) {
        self.registers.interrupt_enable.set(0);
        self.registers.line_control.write(LCR::DATA_SIZE::EightBit);
        self.registers
            .control
            .write(CNTL::TX_ENABLE::SET + CNTL::RX_ENABLE::SET);
    }

    /// Unmasks the receive interrupt only, so the AUX interrupt line rises
    /// while input waits (it clears as [`MiniUart::read_byte`] drains the FIFO).
    pub fn enable_rx_interrupts(&self) {
        self.registers.interrupt_enable.write(IER::RX_DATA::SET);
    }

    /// Sends one byte, waiting (bounded) for room in the FIFO.
    pub fn write_byte(&self, byte: u8) {
        for _ in 0..TX_SPIN_BOUND {
            if self.registers.line_status.is_set(LSR::TX_EMPTY) {
                self.registers.io.set(u32::from(byte));
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// A received byte, if any.
    pub fn read_byte(&self) -> Option<u8> {
        if self.registers.line_status.is_set(LSR::DATA_READY) {
            Some(self.registers.io.get() as u8)
        } else {
            None
        }
    }
}

impl core::fmt::Write for MiniUart {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake register block in ordinary memory, laid out like the hardware.
    #[repr(C, align(4))]
    struct Fake([u32; 11]);

    const IO: usize = 0;
    const IER_WORD: usize = 1; // offset 0x04
    const LCR_WORD: usize = 0x0c / 4;
    const LSR_WORD: usize = 0x14 / 4;
    const CNTL_WORD: usize = 0x20 / 4;

    /// A leaked fake block (never freed: the driver keeps a `'static`
    /// reference) and the driver over it.
    fn fake_uart(words: [u32; 11]) -> (MiniUart, *mut u32) {
        let fake = Box::into_raw(Box::new(Fake(words)));
        // SAFETY: the fake is a leaked, correctly sized and aligned block that
        // only this test uses.
        let uart = unsafe { MiniUart::new(fake as usize) };
        (uart, fake.cast::<u32>())
    }

    #[test]
    fn register_offsets_match_the_datasheet() {
        assert_eq!(core::mem::size_of::<MiniUartRegisters>(), 0x2c);
        assert_eq!(core::mem::offset_of!(MiniUartRegisters, line_status), 0x14);
        assert_eq!(core::mem::offset_of!(MiniUartRegisters, control), 0x20);
    }

    #[test]
    fn enable_sets_8_bits_and_both_directions() {
        let (uart, words) = fake_uart([0; 11]);
        uart.enable();
        // SAFETY: reading the leaked fake after the driver wrote it.
        let (lcr, cntl) = unsafe { (*words.add(LCR_WORD), *words.add(CNTL_WORD)) };
        assert_eq!(lcr & 0b11, 0b11);
        assert_eq!(cntl & 0b11, 0b11);
    }

    #[test]
    fn only_the_receive_interrupt_is_unmasked() {
        let (uart, words) = fake_uart([0xff; 11]);
        uart.enable();
        // SAFETY: reading the leaked fake after the driver wrote it.
        assert_eq!(unsafe { *words.add(IER_WORD) }, 0);
        uart.enable_rx_interrupts();
        // SAFETY: as above.
        assert_eq!(unsafe { *words.add(IER_WORD) }, 0b01);
    }

    #[test]
    fn bytes_go_out_only_when_the_fifo_has_room() {
        let mut fake_words = [0; 11];
        fake_words[LSR_WORD] = 1 << 5;
        let (uart, words) = fake_uart(fake_words);
        uart.write_byte(b'A');
        // SAFETY: as above.
        assert_eq!(unsafe { *words.add(IO) }, u32::from(b'A'));
        // SAFETY: as above.
        unsafe { *words.add(LSR_WORD) = 0 };
        uart.write_byte(b'B'); // full: dropped after the bound, no hang
        // SAFETY: as above.
        assert_eq!(unsafe { *words.add(IO) }, u32::from(b'A'));
        assert_eq!(uart.read_byte(), None);
        // SAFETY: as above.
        unsafe {
            *words.add(LSR_WORD) = 1;
            *words.add(IO) = u32::from(b'z');
        }
        assert_eq!(uart.read_byte(), Some(b'z'));
    }
}
