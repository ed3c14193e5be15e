//! The console on x86-64: COM1 behind a lock, and a `log` backend that
//! prefixes every line with `[cpuN]` and the level (the same format as ARM).
//!
//! As on ARM, the receiver has its own handle and lock, so polling for a
//! typed byte never queues behind other CPUs' output, and the echo of typed
//! input is left to the console's holder when it is busy
//! ([`write_bytes_nowait`]).

use core::fmt::Write;

use spin::Mutex;
use spin::mutex::TicketMutex;

use super::cpu;
use super::serial::{COM1, Uart16550};
use crate::console::handoff::{self, Deferred};

/// A ticket lock, as on ARM: a CPU printing many lines cannot starve one
/// that needs a line out before it answers a sibling's rendezvous.
static CONSOLE: TicketMutex<Option<Uart16550>> = TicketMutex::new(None);
/// The receiving side of COM1 (its receive buffer and line status).
static RECEIVER: Mutex<Option<Uart16550>> = Mutex::new(None);
/// Bytes [`write_bytes_nowait`] left for the console lock's next holder.
static WAITING: Deferred<WAITING_BYTES> = Deferred::new();
/// Room in [`WAITING`]: a typed command's echo with plenty to spare.
const WAITING_BYTES: usize = 256;

/// Makes COM1 the console.
///
/// # Safety
/// COM1 must be a 16550 that only the console drives from now on.
pub unsafe fn init_com1() {
    // SAFETY: forwarded from this function's contract.
    let mut uart = unsafe { Uart16550::new(COM1) };
    uart.init();
    *CONSOLE.lock() = Some(uart);
    // SAFETY: the same UART, set up above; this handle only reads the
    // receive buffer and the line status.
    *RECEIVER.lock() = Some(unsafe { Uart16550::new(COM1) });
}

/// Runs `f` on COM1 under the console lock, with interrupts masked so an
/// interrupt handler that logs cannot deadlock against this CPU. What
/// [`write_bytes_nowait`] left goes out first, and the lock's holder looks
/// again after it unlocks (the holder's side of [`handoff`]).
fn with_console(f: impl FnOnce(&mut Uart16550)) {
    cpu::without_irqs(|| {
        if let Some(uart) = CONSOLE.lock().as_mut() {
            // First what waits: this CPU's own echo comes before its next line.
            WAITING.write_waiting(|bytes| write_raw(uart, bytes));
            f(uart);
        }
        flush_waiting();
    });
}

/// Writes what waits in [`WAITING`] if the console lock is free.
fn flush_waiting() {
    handoff::flush_if_free(
        &WAITING,
        || CONSOLE.try_lock(),
        |console, bytes| {
            if let Some(uart) = console.as_mut() {
                write_raw(uart, bytes);
            }
        },
    );
}

/// Writes `bytes`, with CR before each LF.
fn write_raw(uart: &mut Uart16550, bytes: &[u8]) {
    for &byte in bytes {
        if byte == b'\n' {
            uart.write_byte(b'\r');
        }
        uart.write_byte(byte);
    }
}

/// Writes formatted text to the console.
pub fn write_fmt(args: core::fmt::Arguments<'_>) {
    with_console(|uart| {
        let _ = uart.write_fmt(args);
    });
}

/// Writes raw bytes (a guest's whole console line) under the console lock.
pub fn write_bytes(bytes: &[u8]) {
    with_console(|uart| write_raw(uart, bytes));
}

/// Writes `bytes` now if the console is free, else leaves them to the CPU
/// holding it, which writes them before it lets go: for the echo of typed
/// input (see [`handoff`]). More than 256 bytes waiting are dropped, with a
/// note.
pub fn write_bytes_nowait(bytes: &[u8]) {
    cpu::without_irqs(|| {
        WAITING.push(bytes);
        flush_waiting();
    });
}

/// Makes COM1 interrupt while typed input waits (the caller routes its IRQ).
pub fn enable_rx_interrupts() {
    cpu::without_irqs(|| {
        if let Some(uart) = CONSOLE.lock().as_mut() {
            uart.enable_rx_interrupt();
        }
    });
}

/// A byte typed on the console, if any.
pub fn read_byte() -> Option<u8> {
    cpu::without_irqs(|| RECEIVER.lock().as_mut().and_then(Uart16550::read_byte))
}

/// Writes without taking the lock: only for the exception path, where the
/// faulting CPU may hold it already. Output may interleave with other CPUs'.
pub fn write_fmt_unlocked(args: core::fmt::Arguments<'_>) {
    // SAFETY: COM1 is only ever configured by `init_com1`; writing bytes to its
    // data port without the lock can garble text but not break memory safety.
    let mut uart = unsafe { Uart16550::new(COM1) };
    let _ = uart.write_fmt(args);
}

struct Logger;

impl log::Log for Logger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        write_fmt(format_args!(
            "[cpu{}] {:<5} {}\n",
            cpu::index(),
            record.level(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

/// Installs the console as the `log` backend (idempotent).
pub fn init_logger(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
