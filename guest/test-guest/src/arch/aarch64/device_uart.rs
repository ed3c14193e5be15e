//! A second PL011, passed through to the domain (`uartloop`): found in the
//! device tree, driven in loopback mode (UARTCR.LBE) so the guest both sends
//! and receives, and takes the receive interrupt through the hypervisor.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use tock_registers::interfaces::{Readable, Writeable};

use super::gic;
use super::pl011::{CR, FR, INT, LCR_H, Pl011};

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
