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

use spin::Mutex;
use spin::mutex::TicketMutex;

use super::cpu;
use crate::console::Uart;
use crate::console::handoff::{self, Deferred};
use crate::console::mini_uart::MiniUart;
use crate::console::pl011::Pl011;

/// A ticket lock: CPUs take the console in the order they asked for it, so
/// one that prints a long run of lines (a trace dump, a listing) cannot
/// starve a CPU that needs one line out before it can answer a scheduling
/// IPI (a sibling's rendezvous waits for it). An unfair spinlock let the
/// printing CPU take it back first every time.
static CONSOLE: TicketMutex<Option<Uart>> = TicketMutex::new(None);
/// The receiving side of the console UART (see the module comment).
static RECEIVER: Mutex<Option<Uart>> = Mutex::new(None);
/// Bytes [`write_bytes_nowait`] left for the console lock's next holder.
static WAITING: Deferred<WAITING_BYTES> = Deferred::new();
/// Room in [`WAITING`]: a typed command's echo with plenty to spare.
const WAITING_BYTES: usize = 256;
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
    *CONSOLE.lock() = Some(Uart::Pl011(uart));
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
    *CONSOLE.lock() = Some(Uart::MiniUart(uart));
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
    *CONSOLE.lock() = Some(Uart::Pl011(uart));
    // SAFETY: the same UART; this handle only reads the receiver.
    *RECEIVER.lock() = Some(Uart::Pl011(unsafe { Pl011::new(base) }));
    BASE.store(base, Ordering::Release);
}

/// Runs `f` on the console UART under its lock, with IRQs masked so an
/// interrupt handler that logs cannot deadlock against this CPU. What
/// [`write_bytes_nowait`] left goes out first, and the lock's holder looks
/// again after it unlocks (the holder's side of [`handoff`]).
fn with_console(f: impl FnOnce(&mut Uart)) {
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
fn write_raw(uart: &mut Uart, bytes: &[u8]) {
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

/// Writes raw bytes (a guest's console line) to the console.
pub fn write_bytes(bytes: &[u8]) {
    with_console(|uart| write_raw(uart, bytes));
}

/// Writes `bytes` now if the console is free, else leaves them to the CPU
/// holding it, which writes them before it lets go: for the echo of typed
/// input, which must not make the CPU wait behind other CPUs' output (see
/// [`handoff`]). More than 256 bytes waiting are dropped, with a note.
pub fn write_bytes_nowait(bytes: &[u8]) {
    cpu::without_irqs(|| {
        WAITING.push(bytes);
        flush_waiting();
    });
}

/// A byte typed on the console, if any. Reads the receiver only, without
/// the console lock.
pub fn read_byte() -> Option<u8> {
    cpu::without_irqs(|| RECEIVER.lock().as_ref().and_then(Uart::read_byte))
}

/// Unmasks the console UART's receive interrupts (the caller routes and
/// enables its GIC interrupt and drains input with [`read_byte`]).
pub fn enable_rx_interrupts() {
    cpu::without_irqs(|| {
        if let Some(uart) = CONSOLE.lock().as_ref() {
            uart.enable_rx_interrupts();
        }
    });
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
