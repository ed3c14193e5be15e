//! The console on x86-64: COM1 behind a lock, and a `log` backend that
//! prefixes every line with `[cpuN]` and the level (the same format as ARM).
//!
//! As on ARM, the receiver has its own handle and lock, so polling for a
//! typed byte never queues behind other CPUs' output, and the echo of typed
//! input is left to the console's holder when it is busy
//! ([`write_bytes_nowait`]).

use core::fmt::Write;

use crate::sync::Mutex;

use super::cpu;
use super::serial::{COM1, Uart16550};
use crate::console::handoff::SharedConsole;

/// The console, as on ARM (see [`SharedConsole`]).
static CONSOLE: SharedConsole<Uart16550> = SharedConsole::new();
/// The receiving side of COM1 (its receive buffer and line status).
static RECEIVER: Mutex<Option<Uart16550>> = Mutex::new(None);

/// Makes COM1 the console.
///
/// # Safety
/// COM1 must be a 16550 that only the console drives from now on.
pub unsafe fn init_com1() {
    // SAFETY: forwarded from this function's contract.
    let mut uart = unsafe { Uart16550::new(COM1) };
    uart.init();
    CONSOLE.set(uart);
    // SAFETY: the same UART, set up above; this handle only reads the
    // receive buffer and the line status.
    *RECEIVER.lock() = Some(unsafe { Uart16550::new(COM1) });
}

/// Writes formatted text to the console. Interrupts are masked while the lock
/// is held so an interrupt handler that logs cannot deadlock against this CPU.
pub fn write_fmt(args: core::fmt::Arguments<'_>) {
    cpu::without_irqs(|| {
        CONSOLE.with(|uart| {
            let _ = uart.write_fmt(args);
        })
    });
}

/// Writes raw bytes (a guest's whole console line) under the console lock.
pub fn write_bytes(bytes: &[u8]) {
    cpu::without_irqs(|| CONSOLE.write_bytes(bytes));
}

/// Writes `bytes` now if the console is free, else leaves them to the CPU
/// holding it, which writes them before it lets go: for the echo of typed
/// input (see [`crate::console::handoff`]).
pub fn write_bytes_nowait(bytes: &[u8]) {
    cpu::without_irqs(|| CONSOLE.write_nowait(bytes));
}

/// Makes COM1 interrupt while typed input waits (the caller routes its IRQ).
pub fn enable_rx_interrupts() {
    cpu::without_irqs(|| CONSOLE.with(Uart16550::enable_rx_interrupt));
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
