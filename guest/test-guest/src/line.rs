//! A fixed-size text buffer that `write!` can fill, so a whole console line
//! is formatted first and then written at once (lines of different vCPUs do
//! not interleave). Text beyond the capacity is cut and marked with `~`.

use core::fmt;

use guest_abi::{Call, CallError, ConsoleChunk, Regs};

/// Bytes in one line buffer.
pub const LINE_CAPACITY: usize = 160;

/// One console line being formatted.
pub struct Line {
    bytes: [u8; LINE_CAPACITY],
    len: usize,
    truncated: bool,
}

impl Line {
    /// An empty line.
    pub const fn new() -> Self {
        Self {
            bytes: [0; LINE_CAPACITY],
            len: 0,
            truncated: false,
        }
    }

    /// The text so far; a cut line ends in `~`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Whether text was cut.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
}

impl Default for Line {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.truncated {
            return Ok(());
        }
        let room = LINE_CAPACITY - self.len;
        if s.len() < room {
            self.bytes[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
        } else {
            // Keep one byte for the marker.
            let keep = room - 1;
            self.bytes[self.len..self.len + keep].copy_from_slice(&s.as_bytes()[..keep]);
            self.bytes[LINE_CAPACITY - 1] = b'~';
            self.len = LINE_CAPACITY;
            self.truncated = true;
        }
        Ok(())
    }
}

/// Writes `bytes` through the `CONSOLE_WRITE` hypercall (`call` makes it),
/// a chunk at a time; false as soon as the hypervisor refuses one (the
/// caller then falls back to its UART, if it has one).
pub fn write_by_hypercall(
    mut bytes: &[u8],
    mut call: impl FnMut(&Call) -> Result<Regs, CallError>,
) -> bool {
    while !bytes.is_empty() {
        let (chunk, rest) = ConsoleChunk::split(bytes);
        if call(&Call::ConsoleWrite(chunk)).is_err() {
            return false;
        }
        bytes = rest;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn hypercall_writes_go_in_chunks_and_stop_at_a_refusal() {
        let text = [b'x'; ConsoleChunk::CAPACITY * 2 + 1];
        let mut sent = Vec::new();
        assert!(write_by_hypercall(&text, |call| {
            let Call::ConsoleWrite(chunk) = call else {
                panic!("not a console write: {call:?}")
            };
            sent.push(chunk.as_bytes().len());
            Ok([0; 4])
        }));
        assert_eq!(sent, [ConsoleChunk::CAPACITY, ConsoleChunk::CAPACITY, 1]);
        let mut calls = 0;
        let refused = write_by_hypercall(&text, |_| {
            calls += 1;
            Err(CallError::Hv(guest_abi::HvError::Denied))
        });
        assert!(!refused);
        assert_eq!(calls, 1, "nothing is sent after a refusal");
        assert!(write_by_hypercall(&[], |_| unreachable!()));
    }

    #[test]
    fn short_lines_are_kept_whole() {
        let mut line = Line::new();
        write!(line, "test-guest: vcpu {} online", 3).unwrap();
        assert_eq!(line.as_bytes(), b"test-guest: vcpu 3 online");
        assert!(!line.truncated());
    }

    #[test]
    fn long_lines_are_cut_and_marked() {
        let mut line = Line::new();
        for _ in 0..40 {
            write!(line, "abcde").unwrap();
        }
        assert_eq!(line.as_bytes().len(), LINE_CAPACITY);
        assert_eq!(line.as_bytes()[LINE_CAPACITY - 1], b'~');
        assert!(line.truncated());
        assert_eq!(line.as_bytes()[0..5], *b"abcde");
        // A line exactly one byte short of full is not cut.
        let mut line = Line::new();
        write!(line, "{}", "x".repeat(LINE_CAPACITY - 1)).unwrap();
        assert!(!line.truncated());
    }
}
