//! Console output: whole lines, on the PL011 at 0x0900_0000 (the hypervisor
//! emulates one there per domain) or through `CONSOLE_WRITE`.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, Ordering};

use test_guest::line::Line;
use tock_registers::interfaces::{Readable, Writeable};

use super::hvc;
use super::pl011::{FR, INT, LCR_H, Pl011};

/// The PL011's guest-physical address on QEMU virt and in every domain.
pub const PL011_BASE: usize = 0x0900_0000;

/// Spins a full transmit FIFO may take before a byte is written anyway.
const TX_SPINS: u32 = 100_000;

/// Spins to wait for another vCPU's line before printing regardless.
const LOCK_SPINS: u32 = 10_000_000;

/// One line at a time, so lines of different vCPUs do not interleave.
static LOCK: AtomicBool = AtomicBool::new(false);

/// Send lines through `CONSOLE_WRITE` (until it fails once).
static USE_HYPERCALL: AtomicBool = AtomicBool::new(false);

/// Asks for lines to go through the hypercall console.
pub fn use_hypercall(enable: bool) {
    USE_HYPERCALL.store(enable, Ordering::Relaxed);
}

fn pl011() -> &'static Pl011 {
    // SAFETY: the PL011 sits at PL011_BASE on QEMU virt and in every domain,
    // the identity map makes it Device memory, and its registers are only
    // accessed through the volatile tock-registers types.
    unsafe { &*(PL011_BASE as *const Pl011) }
}

fn pl011_write(bytes: &[u8]) {
    let uart = pl011();
    for &b in bytes {
        let mut spins = 0;
        while uart.fr.is_set(FR::TXFF) && spins < TX_SPINS {
            spins += 1;
            core::hint::spin_loop();
        }
        uart.dr.set(b as u32);
    }
}

/// The PL011's interrupt (SPI 1, as in QEMU virt's and the hypervisor's
/// device trees).
pub const PL011_INTID: u32 = 33;

/// Turns on the receive FIFO and unmasks the receive and receive-timeout
/// interrupts, so typed input raises the PL011's interrupt.
pub fn enable_rx_interrupts() {
    let uart = pl011();
    uart.lcr_h.write(LCR_H::WLEN.val(0b11) + LCR_H::FEN::SET);
    uart.imsc.write(INT::RX::SET + INT::RT::SET);
}

/// A received byte, if one waits.
pub fn read_byte() -> Option<u8> {
    let uart = pl011();
    if uart.fr.is_set(FR::RXFE) {
        None
    } else {
        Some(uart.dr.get() as u8)
    }
}

fn write_bytes(bytes: &[u8]) {
    if USE_HYPERCALL.load(Ordering::Relaxed) {
        if test_guest::line::write_by_hypercall(bytes, hvc::hypercall) {
            return;
        }
        USE_HYPERCALL.store(false, Ordering::Relaxed);
        pl011_write(b"test-guest: CONSOLE_WRITE failed, back to the PL011\n");
    }
    pl011_write(bytes);
}

/// Prints one line (a newline is added).
pub fn print_line(args: fmt::Arguments<'_>) {
    let mut line = Line::new();
    // Line never fails; a too-long line is cut and marked.
    let _ = line.write_fmt(args);
    let mut spins = 0;
    let mut locked = true;
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins == LOCK_SPINS {
            // A vCPU died holding it (or prints from an exception handler
            // interrupting itself): print anyway, interleaving at worst.
            locked = false;
            break;
        }
        core::hint::spin_loop();
    }
    write_bytes(line.as_bytes());
    write_bytes(b"\n");
    if locked {
        LOCK.store(false, Ordering::Release);
    }
}
