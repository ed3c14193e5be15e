//! The PL011 registers this guest drives, for the console (at 0x0900_0000)
//! and for a second, passed-through UART (`uartloop`) alike.

use tock_registers::register_bitfields;
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

register_bitfields! [u32,
    /// Flag register.
    pub FR [
        /// Transmit FIFO full.
        TXFF OFFSET(5) NUMBITS(1) [],
        /// Receive FIFO (or, without FIFOs, holding register) empty.
        RXFE OFFSET(4) NUMBITS(1) []
    ],
    /// Line control (UARTLCR_H).
    pub LCR_H [
        /// Word length (0b11: 8 bits).
        WLEN OFFSET(5) NUMBITS(2) [],
        /// FIFOs on.
        FEN OFFSET(4) NUMBITS(1) []
    ],
    /// Control (UARTCR).
    pub CR [
        /// Receive enable.
        RXE OFFSET(9) NUMBITS(1) [],
        /// Transmit enable.
        TXE OFFSET(8) NUMBITS(1) [],
        /// Loopback: what is sent is received.
        LBE OFFSET(7) NUMBITS(1) [],
        /// UART enable.
        UARTEN OFFSET(0) NUMBITS(1) []
    ],
    /// Interrupt bits of UARTIMSC and UARTICR.
    pub INT [
        /// Receive timeout.
        RT OFFSET(6) NUMBITS(1) [],
        /// Receive.
        RX OFFSET(4) NUMBITS(1) []
    ]
];

register_structs! {
    /// The PL011 registers the guest uses.
    pub Pl011 {
        (0x00 => pub dr: ReadWrite<u32>),
        (0x04 => _reserved0),
        (0x18 => pub fr: ReadOnly<u32, FR::Register>),
        (0x1c => _reserved1),
        (0x2c => pub lcr_h: ReadWrite<u32, LCR_H::Register>),
        (0x30 => pub cr: ReadWrite<u32, CR::Register>),
        (0x34 => _reserved2),
        (0x38 => pub imsc: ReadWrite<u32, INT::Register>),
        (0x3c => _reserved3),
        (0x44 => pub icr: WriteOnly<u32, INT::Register>),
        (0x48 => @END),
    }
}
