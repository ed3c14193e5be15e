//! The console on x86-64: whole lines out, and typed input in (`echo`), on
//! the 16550 at COM1 (0x3F8), which the hypervisor emulates per domain; a
//! domain without one (config `console = "none"`: COM1's ports float high)
//! prints through the `CONSOLE_WRITE` hypercall instead.

use core::arch::asm;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, Ordering};

use test_guest::line::Line;

/// COM1's data port (THR when written, RBR when read, with LCR.DLAB clear).
const COM1: u16 = 0x3f8;
/// Interrupt enable register.
const IER: u16 = COM1 + 1;
/// Scratch register: any byte written reads back on a 16550.
const SCR: u16 = COM1 + 7;
/// Modem control register.
const MCR: u16 = COM1 + 4;
/// Line status register.
const LSR: u16 = COM1 + 5;
/// LSR: data ready (the receive FIFO or holding register holds a byte).
const LSR_DATA_READY: u8 = 1 << 0;
/// LSR: transmit holding register empty.
const LSR_THR_EMPTY: u8 = 1 << 5;
/// IER.ERBFI: interrupt while received data is available.
const IER_RECEIVED_DATA: u8 = 1 << 0;
/// MCR: DTR and RTS (as every driver sets them) and OUT2, which gates the
/// UART's interrupt onto IRQ 4 on a PC.
const MCR_DTR_RTS_OUT2: u8 = 0x0B;
/// Polls of a busy transmitter before writing anyway.
const TX_SPINS: u32 = 100_000;
/// How long (TSC ticks, about a second on any host) to wait for another
/// vCPU's line before printing regardless: every byte is two exits, so a
/// line takes long under emulation, and a spin count would run out first.
const LOCK_TICKS: u64 = 4_000_000_000;

/// One line at a time, so lines of different vCPUs do not interleave.
static LOCK: AtomicBool = AtomicBool::new(false);

/// Send lines through `CONSOLE_WRITE` (no 16550 at COM1).
static USE_HYPERCALL: AtomicBool = AtomicBool::new(false);

/// Whether a 16550 answers at COM1: two patterns written to its scratch
/// register read back (an empty bus reads 0xFF). Without one, lines go
/// through `CONSOLE_WRITE` from now on; returns whether it answered.
pub fn probe() -> bool {
    let answers = [0x5a, 0xa5].into_iter().all(|pattern| {
        outb(SCR, pattern);
        inb(SCR) == pattern
    });
    USE_HYPERCALL.store(!answers, Ordering::Relaxed);
    answers
}

fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: COM1's registers; a read has no side effect beyond the UART
    // (an RBR read takes the byte it returns).
    unsafe { asm!("in al, dx", in("dx") port, out("al") value, options(nomem, nostack)) };
    value
}

fn outb(port: u16, value: u8) {
    // SAFETY: COM1's registers; the guest's only serial port.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack)) };
}

fn write_bytes(bytes: &[u8]) {
    if USE_HYPERCALL.load(Ordering::Relaxed)
        && test_guest::line::write_by_hypercall(bytes, super::hypercall)
    {
        return;
    }
    for &b in bytes {
        let mut spins = 0;
        while inb(LSR) & LSR_THR_EMPTY == 0 && spins < TX_SPINS {
            spins += 1;
            core::hint::spin_loop();
        }
        outb(COM1, b);
    }
}

/// Enables the receive interrupt (IER.ERBFI, MCR.OUT2); returns the IER
/// read back (it holds ERBFI where the UART works). The FIFO mode is left
/// as it is: changing it would drop bytes already typed, and a byte at a
/// time serves a typist. Data already waiting raises the interrupt at once.
pub fn enable_rx_interrupts() -> u8 {
    outb(MCR, MCR_DTR_RTS_OUT2);
    outb(IER, IER_RECEIVED_DATA);
    inb(IER)
}

/// Whether the IER value enables the receive interrupt.
pub fn rx_interrupt_enabled(ier: u8) -> bool {
    ier & IER_RECEIVED_DATA != 0
}

/// A received byte, if one waits.
pub fn read_byte() -> Option<u8> {
    (inb(LSR) & LSR_DATA_READY != 0).then(|| inb(COM1))
}

/// Prints one line (a newline is added).
pub fn print_line(args: fmt::Arguments<'_>) {
    let mut line = Line::new();
    // Line never fails; a too-long line is cut and marked.
    let _ = line.write_fmt(args);
    let give_up = super::now().saturating_add(LOCK_TICKS);
    let mut locked = true;
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if super::now() > give_up {
            // A vCPU died holding it: print anyway, interleaving at worst.
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
