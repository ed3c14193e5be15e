//! Console output that does not wait for the console: [`Deferred`] keeps
//! bytes for whoever holds the console lock next.
//!
//! Why: the console is one UART behind a fair (ticket) lock. When guests keep
//! it busy, a CPU that wants it waits for every CPU queued before it, each
//! writing a whole line. The boot CPU echoes every byte typed on the
//! hypervisor's command line from its UART interrupt; waiting in that queue
//! once per typed byte took the time of the vCPU loaded there (seconds, while
//! a command was being typed on a busy console). A few bytes that can go out
//! a little later go in here instead.
//!
//! The protocol, for a writer that must not wait:
//! 1. [`Deferred::push`] its bytes, then [`flush_if_free`]: if bytes wait,
//!    try the console lock; if it is free, write them.
//! 2. Every holder of the console lock calls [`Deferred::write_waiting`]
//!    before its own output (so a CPU's echo precedes its next line) and
//!    [`flush_if_free`] after it unlocks (for what was pushed meanwhile).
//!
//! Nothing is left behind when the last holder leaves. The writer's push and
//! the unlocker's look are both read-modify-writes of one flag, `waiting`,
//! so one of them comes second in its modification order and sees the
//! other: either the unlocker sees the bytes (and writes them, or finds the
//! lock taken by a later holder, who will), or the writer's push
//! synchronises with the unlocker's look, which came after its unlock, and
//! the writer finds the lock free. (A plain store and load, even with
//! `SeqCst` fences, is the store-buffering pattern loom cannot check.)
//! `platform/tests/loom_handoff.rs` checks this in every interleaving.

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[cfg(not(loom))]
use crate::sync::Mutex;
#[cfg(not(loom))]
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How many times [`flush_if_free`] takes the lock before it leaves the rest
/// to the writers still pushing (each of which runs it after its push).
const MAX_HANDOFFS: usize = 4;

/// Bytes waiting for the console, at most `N`; more are counted and dropped.
pub struct Deferred<const N: usize> {
    buffer: Mutex<Buffer<N>>,
    /// Bytes wait in `buffer` (read without its lock by every unlocker).
    waiting: AtomicBool,
    /// Bytes dropped because `buffer` was full, not yet reported.
    dropped: AtomicUsize,
}

struct Buffer<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Buffer<N> {
    const EMPTY: Self = Self {
        bytes: [0; N],
        len: 0,
    };
}

impl<const N: usize> Deferred<N> {
    /// Nothing waiting.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            buffer: Mutex::new(Buffer::EMPTY),
            waiting: AtomicBool::new(false),
            dropped: AtomicUsize::new(0),
        }
    }

    /// Nothing waiting (loom's mutex has no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            buffer: Mutex::new(Buffer::EMPTY),
            waiting: AtomicBool::new(false),
            dropped: AtomicUsize::new(0),
        }
    }

    /// Queues `bytes` for the next holder of the console; what does not fit
    /// is dropped and counted (the next write says how many).
    pub fn push(&self, bytes: &[u8]) {
        let mut buffer = lock(&self.buffer);
        let start = buffer.len;
        let taken = bytes.len().min(N - start);
        buffer.bytes[start..start + taken].copy_from_slice(&bytes[..taken]);
        buffer.len += taken;
        if taken < bytes.len() {
            self.dropped
                .fetch_add(bytes.len() - taken, Ordering::Relaxed);
        }
        // A read-modify-write, not a store: see the module comment.
        self.waiting.swap(true, Ordering::AcqRel);
    }

    /// Whether bytes wait.
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// Whether bytes wait, as a read-modify-write that orders this look
    /// after everything the caller did before (its unlock).
    fn look(&self) -> bool {
        self.waiting.fetch_or(false, Ordering::AcqRel)
    }

    /// Writes what waits through `write`; the caller holds the console lock.
    /// The bytes are copied out first, so a writer pushing meanwhile never
    /// waits for the UART.
    pub fn write_waiting(&self, mut write: impl FnMut(&[u8])) {
        if !self.waiting.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut out = [0u8; N];
        let len = {
            let mut buffer = lock(&self.buffer);
            let len = buffer.len;
            out[..len].copy_from_slice(&buffer.bytes[..len]);
            buffer.len = 0;
            len
        };
        write(&out[..len]);
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let mut note = NoteBuffer::default();
            let _ = core::fmt::write(
                &mut note,
                format_args!("\n[console: {dropped} bytes of console output dropped]\n"),
            );
            write(note.as_bytes());
        }
    }
}

impl<const N: usize> Default for Deferred<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes what waits in `deferred` if the console lock is free; leaves it to
/// the holder otherwise (who writes it before unlocking, or finds it here
/// after). Call after a push and after every unlock.
pub fn flush_if_free<G, const N: usize>(
    deferred: &Deferred<N>,
    mut try_lock: impl FnMut() -> Option<G>,
    mut write: impl FnMut(&mut G, &[u8]),
) {
    for _ in 0..MAX_HANDOFFS {
        if !deferred.look() {
            return;
        }
        let Some(mut guard) = try_lock() else {
            return;
        };
        deferred.write_waiting(|bytes| write(&mut guard, bytes));
        drop(guard);
    }
}

/// A UART the console writes one byte at a time.
pub trait ConsoleUart: core::fmt::Write {
    /// Sends one byte (a bounded wait for room, as the drivers do).
    fn write_byte(&mut self, byte: u8);
}

/// Room in a [`SharedConsole`]'s [`Deferred`]: a typed command's echo with
/// plenty to spare.
pub const WAITING_BYTES: usize = 256;

/// The console both architectures share: its UART behind a ticket lock (CPUs
/// take it in the order they asked, so one printing many lines cannot starve
/// one that needs a line out before it answers a sibling's rendezvous), and
/// the bytes [`SharedConsole::write_nowait`] left for the lock's next holder.
/// The caller masks interrupts around every call (an interrupt handler that
/// logs must not deadlock against its own CPU).
#[cfg(not(loom))]
pub struct SharedConsole<U> {
    uart: spin::mutex::TicketMutex<Option<U>, crate::sync::CpuRelax>,
    waiting: Deferred<WAITING_BYTES>,
}

#[cfg(not(loom))]
impl<U: ConsoleUart> SharedConsole<U> {
    /// No UART yet: writes go nowhere.
    pub const fn new() -> Self {
        Self {
            uart: spin::mutex::TicketMutex::<_, crate::sync::CpuRelax>::new(None),
            waiting: Deferred::new(),
        }
    }

    /// Makes `uart` the console's UART.
    pub fn set(&self, uart: U) {
        *self.uart.lock() = Some(uart);
        self.flush_waiting();
    }

    /// Runs `f` on the UART under the lock. What waits goes out first (a
    /// CPU's own echo comes before its next line), and the lock's holder
    /// looks again after it unlocks (the holder's side of the protocol).
    pub fn with(&self, f: impl FnOnce(&mut U)) {
        if let Some(uart) = self.uart.lock().as_mut() {
            self.waiting.write_waiting(|bytes| write_raw(uart, bytes));
            f(uart);
        }
        self.flush_waiting();
    }

    /// Writes `bytes` (CR before each LF) under the lock.
    pub fn write_bytes(&self, bytes: &[u8]) {
        self.with(|uart| write_raw(uart, bytes));
    }

    /// Writes `bytes` now if the console is free, else leaves them to the
    /// CPU holding it, which writes them before it lets go. More than
    /// [`WAITING_BYTES`] waiting are dropped, with a note.
    pub fn write_nowait(&self, bytes: &[u8]) {
        self.waiting.push(bytes);
        self.flush_waiting();
    }

    fn flush_waiting(&self) {
        flush_if_free(
            &self.waiting,
            || self.uart.try_lock(),
            |console, bytes| {
                if let Some(uart) = console.as_mut() {
                    write_raw(uart, bytes);
                }
            },
        );
    }
}

#[cfg(not(loom))]
impl<U: ConsoleUart> Default for SharedConsole<U> {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes `bytes`, with CR before each LF.
#[cfg(not(loom))]
fn write_raw(uart: &mut impl ConsoleUart, bytes: &[u8]) {
    for &byte in bytes {
        if byte == b'\n' {
            uart.write_byte(b'\r');
        }
        uart.write_byte(byte);
    }
}

#[cfg(not(loom))]
fn lock<T>(mutex: &Mutex<T>) -> crate::sync::MutexGuard<'_, T> {
    mutex.lock()
}

#[cfg(loom)]
fn lock<T>(mutex: &Mutex<T>) -> loom::sync::MutexGuard<'_, T> {
    mutex.lock().expect("no thread panics holding it")
}

/// Room for the dropped-bytes note, formatted without allocating.
struct NoteBuffer {
    bytes: [u8; 64],
    len: usize,
}

impl Default for NoteBuffer {
    fn default() -> Self {
        Self {
            bytes: [0; 64],
            len: 0,
        }
    }
}

impl NoteBuffer {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl core::fmt::Write for NoteBuffer {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.bytes.len() - self.len;
        let taken = s.len().min(room);
        self.bytes[self.len..self.len + taken].copy_from_slice(&s.as_bytes()[..taken]);
        self.len += taken;
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn pushed_bytes_are_written_once_by_the_next_holder() {
        let deferred = Deferred::<8>::new();
        deferred.push(b"ab");
        deferred.push(b"c");
        assert!(deferred.is_waiting());
        let mut out = Vec::new();
        deferred.write_waiting(|b| out.extend_from_slice(b));
        assert_eq!(out, b"abc");
        assert!(!deferred.is_waiting());
        deferred.write_waiting(|b| out.extend_from_slice(b));
        assert_eq!(out, b"abc", "nothing is written twice");
    }

    #[test]
    fn a_full_buffer_drops_and_says_how_much() {
        let deferred = Deferred::<4>::new();
        deferred.push(b"abcdef");
        let mut out = Vec::new();
        deferred.write_waiting(|b| out.extend_from_slice(b));
        assert_eq!(out, b"abcd\n[console: 2 bytes of console output dropped]\n");
        // The count was reported once.
        deferred.push(b"x");
        out.clear();
        deferred.write_waiting(|b| out.extend_from_slice(b));
        assert_eq!(out, b"x");
    }

    #[test]
    fn flush_writes_when_the_lock_is_free_and_leaves_it_otherwise() {
        let console = crate::sync::Mutex::new(Vec::new());
        let deferred = Deferred::<8>::new();
        // Held: the bytes stay for the holder.
        let held = console.lock();
        deferred.push(b"ab");
        flush_if_free(
            &deferred,
            || console.try_lock(),
            |g, b| g.extend_from_slice(b),
        );
        assert!(deferred.is_waiting());
        drop(held);
        // Free: written now.
        flush_if_free(
            &deferred,
            || console.try_lock(),
            |g, b| g.extend_from_slice(b),
        );
        assert!(!deferred.is_waiting());
        assert_eq!(*console.lock(), b"ab");
    }
}
