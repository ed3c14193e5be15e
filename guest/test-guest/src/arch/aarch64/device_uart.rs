//! A second PL011, passed through to the domain (`uartloop`): found in the
//! device tree, driven in loopback mode (UARTCR.LBE) so the guest both sends
//! and receives, and takes the receive interrupt through the hypervisor.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::register_bitfields;
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

use super::gic;

register_bitfields! [u32,
    /// Flag register.
    FR [
        /// Receive FIFO (holding register) empty.
        RXFE OFFSET(4) NUMBITS(1) []
    ],
    /// Line control.
    LCR_H [
        /// Word length (0b11: 8 bits).
        WLEN OFFSET(5) NUMBITS(2) [],
        /// FIFOs on (off here: one byte, one interrupt).
        FEN OFFSET(4) NUMBITS(1) []
    ],
    /// Control.
    CR [
        /// Receive enable.
        RXE OFFSET(9) NUMBITS(1) [],
        /// Transmit enable.
        TXE OFFSET(8) NUMBITS(1) [],
        /// Loopback: what is sent is received.
        LBE OFFSET(7) NUMBITS(1) [],
        /// UART enable.
        UARTEN OFFSET(0) NUMBITS(1) []
    ],
    /// Interrupt mask set/clear, and the clear register.
    INT [
        /// Receive.
        RX OFFSET(4) NUMBITS(1) []
    ]
];

register_structs! {
    /// The PL011 registers `uartloop` uses.
    Pl011 {
        (0x00 => dr: ReadWrite<u32>),
        (0x04 => _reserved0),
        (0x18 => fr: ReadOnly<u32, FR::Register>),
        (0x1c => _reserved1),
        (0x2c => lcr_h: ReadWrite<u32, LCR_H::Register>),
        (0x30 => cr: ReadWrite<u32, CR::Register>),
        (0x34 => _reserved2),
        (0x38 => imsc: ReadWrite<u32, INT::Register>),
        (0x3c => _reserved3),
        (0x44 => icr: WriteOnly<u32, INT::Register>),
        (0x48 => @END),
    }
}

static BASE: AtomicUsize = AtomicUsize::new(0);
static INTID: AtomicU32 = AtomicU32::new(0);

/// Records the second PL011 the device tree describes.
pub fn init(base: u64, intid: u32) {
    BASE.store(base as usize, Ordering::Relaxed);
    INTID.store(intid, Ordering::Relaxed);
}

/// Its base and INTID, once found.
pub fn found() -> Option<(u64, u32)> {
    let base = BASE.load(Ordering::Relaxed);
    (base != 0).then(|| (base as u64, INTID.load(Ordering::Relaxed)))
}

/// Its INTID, once found.
pub fn intid() -> Option<u32> {
    found().map(|(_, intid)| intid)
}

fn uart() -> Option<&'static Pl011> {
    let base = BASE.load(Ordering::Relaxed);
    // SAFETY: the device tree names a PL011 at `base` (a device passed
    // through to this domain), in the first gigabyte the identity map makes
    // Device memory; its registers are only accessed through the volatile
    // tock-registers types.
    (base != 0).then(|| unsafe { &*(base as *const Pl011) })
}

/// Loopback, 8 bits, no FIFOs, receive interrupt unmasked and enabled at
/// the GIC for vCPU `index`.
pub fn start(index: usize) -> bool {
    let (Some(uart), Some(intid)) = (uart(), intid()) else {
        return false;
    };
    uart.cr.set(0);
    uart.lcr_h.write(LCR_H::WLEN.val(0b11));
    uart.icr.write(INT::RX::SET);
    uart.imsc.write(INT::RX::SET);
    uart.cr
        .write(CR::UARTEN::SET + CR::TXE::SET + CR::RXE::SET + CR::LBE::SET);
    gic::enable_spi(intid, index)
}

/// Sends one byte.
pub fn send(byte: u8) {
    if let Some(uart) = uart() {
        uart.dr.set(u32::from(byte));
    }
}

/// A received byte, if one waits (reading it clears the receive interrupt).
pub fn read() -> Option<u8> {
    let uart = uart()?;
    if uart.fr.is_set(FR::RXFE) {
        None
    } else {
        Some(uart.dr.get() as u8)
    }
}
