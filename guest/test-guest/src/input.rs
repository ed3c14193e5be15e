//! Typed console input gathered into lines (the `echo` workload): a line ends
//! at CR or LF, empty lines (the LF of a CR LF) are dropped, and bytes past
//! the capacity are dropped until the line ends.

/// A line being typed, at most `N` bytes kept.
pub struct LineInput<const N: usize> {
    bytes: [u8; N],
    len: usize,
    /// The last byte ended a line: the next one starts a new line.
    ended: bool,
}

impl<const N: usize> LineInput<N> {
    /// Nothing typed yet.
    pub const fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
            ended: false,
        }
    }

    /// Takes one typed byte; returns the line it ends, if it ends one that
    /// is not empty.
    pub fn push(&mut self, byte: u8) -> Option<&[u8]> {
        if self.ended {
            self.len = 0;
            self.ended = false;
        }
        match byte {
            b'\r' | b'\n' if self.len == 0 => None,
            b'\r' | b'\n' => {
                self.ended = true;
                Some(&self.bytes[..self.len])
            }
            _ => {
                if self.len < N {
                    self.bytes[self.len] = byte;
                    self.len += 1;
                }
                None
            }
        }
    }
}

impl<const N: usize> Default for LineInput<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines<const N: usize>(typed: &[u8]) -> Vec<Vec<u8>> {
        let mut input = LineInput::<N>::new();
        typed
            .iter()
            .filter_map(|&b| input.push(b).map(<[u8]>::to_vec))
            .collect()
    }

    #[test]
    fn lines_end_at_cr_or_lf_and_empty_ones_are_dropped() {
        assert_eq!(
            lines::<16>(b"hello dom1\r\nquit\n\n\rx"),
            [b"hello dom1".to_vec(), b"quit".to_vec()]
        );
        assert!(lines::<16>(b"\r\n\r\n").is_empty());
        // Unfinished input is not a line.
        assert!(lines::<16>(b"abc").is_empty());
    }

    #[test]
    fn a_long_line_keeps_its_first_bytes_and_the_next_starts_clean() {
        assert_eq!(
            lines::<4>(b"abcdefgh\nxy\n"),
            [b"abcd".to_vec(), b"xy".to_vec()]
        );
    }
}
