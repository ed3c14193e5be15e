//! The console on ARM64: one UART (a PL011 or a BCM2835 mini UART, as the
//! board says) behind a lock, and a `log` backend that prefixes every line
//! with `[cpuN]` and the level.
//!
//! The UART is driven through two handles: the transmitter and the control
//! registers behind [`CONSOLE`], the receiver behind its own lock (only the
//! boot CPU's input interrupt reads it), so reading a typed byte never queues
//! behind other CPUs' output. Both UARTs keep the two directions in separate
//! FIFOs behind separate registers.

use core::fmt::Write;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::Mutex;

use super::cpu;
use crate::console::Uart;
use crate::console::handoff::SharedConsole;
use crate::console::mini_uart::MiniUart;
use crate::console::pl011::Pl011;

/// The console (see [`SharedConsole`]: a ticket lock, and typed input's echo
/// handed to the lock's holder when it is busy).
static CONSOLE: SharedConsole<Uart> = SharedConsole::new();
/// The receiving side of the console UART (see the module comment).
static RECEIVER: Mutex<Option<Uart>> = Mutex::new(None);
/// MMIO base of the console UART (0 before one is set up).
static BASE: AtomicUsize = AtomicUsize::new(0);

/// The console UART's MMIO base, once [`init_pl011`] or [`init_mini_uart`]
/// has set one up: what the device tree's UART nodes are matched against.
pub fn base() -> Option<usize> {
    match BASE.load(Ordering::Acquire) {
        0 => None,
        base => Some(base),
    }
}

/// Makes the PL011 at `base` the console.
///
/// # Safety
/// `base` must be the identity-mapped address of a PL011 that only the console
/// drives from now on.
pub unsafe fn init_pl011(base: usize) {
    // SAFETY: forwarded from this function's contract.
    let uart = unsafe { Pl011::new(base) };
    uart.enable();
    CONSOLE.set(Uart::Pl011(uart));
    // SAFETY: the same UART; this handle only reads the receiver.
    *RECEIVER.lock() = Some(Uart::Pl011(unsafe { Pl011::new(base) }));
    BASE.store(base, Ordering::Release);
}

/// Makes the BCM2835 mini UART whose `AUX_MU_IO` register is at `base` the
/// console (Raspberry Pi UART1).
///
/// # Safety
/// `base` must be the identity-mapped address of a mini UART that only the
/// console drives from now on.
pub unsafe fn init_mini_uart(base: usize) {
    // SAFETY: forwarded from this function's contract.
    let uart = unsafe { MiniUart::new(base) };
    uart.enable();
    CONSOLE.set(Uart::MiniUart(uart));
    // SAFETY: the same UART; this handle only reads the receiver.
    *RECEIVER.lock() = Some(Uart::MiniUart(unsafe { MiniUart::new(base) }));
    BASE.store(base, Ordering::Release);
}

/// Makes the UART at `base` the console without touching its control
/// register: an Arm SBSA generic UART has only the PL011's data and flag
/// registers, set up by the firmware (an ACPI SPCR names such UARTs).
///
/// # Safety
/// As [`init_pl011`].
pub unsafe fn init_pl011_as_configured(base: usize) {
    // SAFETY: forwarded from this function's contract.
    let uart = unsafe { Pl011::new(base) };
    CONSOLE.set(Uart::Pl011(uart));
    // SAFETY: the same UART; this handle only reads the receiver.
    *RECEIVER.lock() = Some(Uart::Pl011(unsafe { Pl011::new(base) }));
    BASE.store(base, Ordering::Release);
}

/// Writes formatted text to the console. IRQs are masked while the lock is
/// held so an interrupt handler that logs cannot deadlock against this CPU.
pub fn write_fmt(args: core::fmt::Arguments<'_>) {
    cpu::without_irqs(|| {
        CONSOLE.with(|uart| {
            let _ = uart.write_fmt(args);
        })
    });
}

/// Writes raw bytes (a guest's console line) to the console.
pub fn write_bytes(bytes: &[u8]) {
    cpu::without_irqs(|| CONSOLE.write_bytes(bytes));
}

/// Writes `bytes` now if the console is free, else leaves them to the CPU
/// holding it, which writes them before it lets go: for the echo of typed
/// input, which must not make the CPU wait behind other CPUs' output (see
/// [`crate::console::handoff`]).
pub fn write_bytes_nowait(bytes: &[u8]) {
    cpu::without_irqs(|| CONSOLE.write_nowait(bytes));
}

/// A byte typed on the console, if any. Reads the receiver only, without
/// the console lock.
pub fn read_byte() -> Option<u8> {
    cpu::without_irqs(|| RECEIVER.lock().as_ref().and_then(Uart::read_byte))
}

/// Unmasks the console UART's receive interrupts (the caller routes and
/// enables its GIC interrupt and drains input with [`read_byte`]).
pub fn enable_rx_interrupts() {
    cpu::without_irqs(|| CONSOLE.with(|uart| uart.enable_rx_interrupts()));
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
