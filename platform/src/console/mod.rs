//! The hypervisor console: UART drivers and the `log` backend that tags each
//! line with the CPU it came from.

pub mod handoff;
pub mod mini_uart;
pub mod pl011;

use mini_uart::MiniUart;
use pl011::Pl011;

/// The console UART, whichever kind the board has.
pub enum Uart {
    /// An Arm PL011.
    Pl011(Pl011),
    /// A BCM2835-family mini UART.
    MiniUart(MiniUart),
}

impl Uart {
    /// Sends one byte, waiting (bounded) for room in the FIFO.
    pub fn write_byte(&self, byte: u8) {
        match self {
            Self::Pl011(uart) => uart.write_byte(byte),
            Self::MiniUart(uart) => uart.write_byte(byte),
        }
    }

    /// Unmasks the receive interrupt (and no other).
    pub fn enable_rx_interrupts(&self) {
        match self {
            Self::Pl011(uart) => uart.enable_rx_interrupts(),
            Self::MiniUart(uart) => uart.enable_rx_interrupts(),
        }
    }

    /// A received byte, if any.
    pub fn read_byte(&self) -> Option<u8> {
        match self {
            Self::Pl011(uart) => uart.read_byte(),
            Self::MiniUart(uart) => uart.read_byte(),
        }
    }
}

impl handoff::ConsoleUart for Uart {
    fn write_byte(&mut self, byte: u8) {
        Uart::write_byte(self, byte);
    }
}

impl core::fmt::Write for Uart {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        match self {
            Self::Pl011(uart) => uart.write_str(s),
            Self::MiniUart(uart) => uart.write_str(s),
        }
    }
}
