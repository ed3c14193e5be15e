//! Console input, shared by the ARM64 and x86-64 glue: where each byte typed
//! on the physical console goes.
//!
//! [`ConsoleInput`] holds the Ctrl-A x3 input switch
//! ([`crate::console_switch::ConsoleSwitch`]) and the hypervisor's command line
//! ([`crate::console_cmd::CommandLine`]). The glue takes bytes from its UART
//! (an interrupt, or polling), feeds each one to [`ConsoleInput::feed`]
//! under its lock, then, with the lock released, carries the result out
//! with [`Routed::carry_out`] through its [`InputSink`]: writing to the
//! console, logging the switch, delivering bytes to a domain's emulated
//! UART, running a finished command line. The lock is not held while a
//! command runs (a command may take long and may change the rotation).
//!
//! [`InputQueue`] is the fixed-size byte queue a glue can put between its
//! UART interrupt and the code that routes (x86 drains COM1 in the
//! interrupt and routes from the boot CPU's run loop).

use alloc::string::String;

use crate::console_cmd::{CommandLine, Echo, LineEvent, PROMPT};
use crate::console_switch::{ConsoleSwitch, InputBytes, InputOwner, SwitchEvent};

/// What one typed byte turned into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routed {
    /// Nothing visible (a held Ctrl-A, a byte the command line ignores).
    Nothing,
    /// Input moved to a new owner.
    Switched(InputOwner),
    /// Bytes for a domain's UART.
    ToDomain {
        /// The domain.
        domain: u32,
        /// The bytes, oldest first.
        bytes: InputBytes,
    },
    /// The command line echoes this.
    Echo(Echo),
    /// Enter at the command line: this finished line (trimmed, maybe empty).
    Command(String),
}

/// What the glue does with [`Routed`] results.
pub trait InputSink {
    /// Writes raw bytes to the physical console.
    fn write(&mut self, bytes: &[u8]);
    /// Logs that input now goes to `to` (the [`crate::console_switch::Announcement`]
    /// line, through the glue's logger so it carries the CPU prefix).
    fn announce(&mut self, to: InputOwner);
    /// Puts `bytes` into domain `domain`'s emulated UART and raises its
    /// interrupt as the UART says.
    fn deliver(&mut self, domain: u32, bytes: &[u8]);
    /// Runs one command line (its answer lines go to the console).
    fn run_command(&mut self, line: &str);
}

impl Routed {
    /// Does what the byte asked for, in the order the console shows it: a
    /// switch starts a new line before its announcement (it must not join a
    /// half-typed one) and prompts when the hypervisor takes input; a
    /// command starts a new line and prompts again once it is done.
    pub fn carry_out(self, sink: &mut impl InputSink) {
        match self {
            Self::Nothing => {}
            Self::Switched(to) => {
                sink.write(b"\n");
                sink.announce(to);
                if to == InputOwner::Hypervisor {
                    sink.write(PROMPT.as_bytes());
                }
            }
            Self::ToDomain { domain, bytes } => sink.deliver(domain, bytes.as_slice()),
            Self::Echo(echo) => sink.write(echo.as_bytes()),
            Self::Command(line) => {
                sink.write(b"\n");
                sink.run_command(&line);
                sink.write(PROMPT.as_bytes());
            }
        }
    }
}

/// Who gets console input, and the command line being typed.
#[derive(Clone, Debug)]
pub struct ConsoleInput {
    switch: ConsoleSwitch,
    line: CommandLine,
}

impl ConsoleInput {
    /// Input starts with the first of `domains` (the hypervisor if none).
    pub fn new(domains: &[u32]) -> Self {
        Self {
            switch: ConsoleSwitch::new(domains),
            line: CommandLine::new(),
        }
    }

    /// Puts `domains` in the rotation (replacing it) and gives input to the
    /// first of them; returns the new owner, to announce.
    pub fn start(&mut self, domains: &[u32]) -> InputOwner {
        self.switch = ConsoleSwitch::new(domains);
        self.switch.owner()
    }

    /// Who gets input now.
    pub fn owner(&self) -> InputOwner {
        self.switch.owner()
    }

    /// Takes a stopped domain out of the rotation; if it had input, returns
    /// the new owner, to announce.
    pub fn remove_domain(&mut self, domain: u32) -> Option<InputOwner> {
        match self.switch.remove_domain(domain)? {
            SwitchEvent::Switched { to } => Some(to),
            _ => None,
        }
    }

    /// Routes one typed byte.
    pub fn feed(&mut self, byte: u8) -> Routed {
        match self.switch.feed(byte) {
            SwitchEvent::Held => Routed::Nothing,
            SwitchEvent::Switched { to } => Routed::Switched(to),
            SwitchEvent::Deliver {
                to: InputOwner::Domain(domain),
                bytes,
            } => Routed::ToDomain { domain, bytes },
            SwitchEvent::Deliver {
                to: InputOwner::Hypervisor,
                bytes,
            } => {
                // Held Ctrl-As come first and the command line ignores
                // them (they are not printable), so only the last byte can
                // echo or end a line; each still goes through the editor.
                let mut last = None;
                for &b in bytes.as_slice() {
                    last = self.line.feed(b);
                }
                match last {
                    Some(LineEvent::Echo(echo)) => Routed::Echo(echo),
                    Some(LineEvent::Line(line)) => Routed::Command(line),
                    None => Routed::Nothing,
                }
            }
        }
    }
}

/// A fixed-size FIFO of input bytes (no allocation: it is filled in
/// interrupt handlers). A byte that finds it full is dropped and counted.
#[derive(Clone, Debug)]
pub struct InputQueue<const N: usize> {
    bytes: [u8; N],
    head: usize,
    len: usize,
    dropped: u64,
}

impl<const N: usize> Default for InputQueue<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> InputQueue<N> {
    /// An empty queue.
    pub const fn new() -> Self {
        Self {
            bytes: [0; N],
            head: 0,
            len: 0,
            dropped: 0,
        }
    }

    /// Adds `byte`; false (and counted in [`Self::dropped`]) when full.
    pub fn push(&mut self, byte: u8) -> bool {
        if self.len == N {
            self.dropped += 1;
            return false;
        }
        self.bytes[(self.head + self.len) % N] = byte;
        self.len += 1;
        true
    }

    /// The oldest byte.
    pub fn pop(&mut self) -> Option<u8> {
        if self.len == 0 {
            return None;
        }
        let byte = self.bytes[self.head];
        self.head = (self.head + 1) % N;
        self.len -= 1;
        Some(byte)
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;
    use alloc::vec::Vec;

    /// Records what the glue was asked to do, as one transcript.
    #[derive(Default)]
    struct Transcript {
        console: String,
        delivered: Vec<(u32, Vec<u8>)>,
        commands: Vec<String>,
    }

    impl InputSink for Transcript {
        fn write(&mut self, bytes: &[u8]) {
            self.console.push_str(&String::from_utf8_lossy(bytes));
        }
        fn announce(&mut self, to: InputOwner) {
            self.console
                .push_str(&format!("<{}>\n", crate::console_switch::Announcement(to)));
        }
        fn deliver(&mut self, domain: u32, bytes: &[u8]) {
            self.delivered.push((domain, bytes.to_vec()));
        }
        fn run_command(&mut self, line: &str) {
            self.commands.push(line.to_string());
            self.console.push_str("(ran)\n");
        }
    }

    fn type_in(input: &mut ConsoleInput, text: &[u8], sink: &mut Transcript) {
        for &b in text {
            input.feed(b).carry_out(sink);
        }
    }

    #[test]
    fn bytes_go_to_the_owner_and_ctrl_a_x3_moves_on() {
        let mut input = ConsoleInput::new(&[1, 2]);
        let mut t = Transcript::default();
        type_in(&mut input, b"hi\x01\x01\x01x\x01\x01\x01help\r\n", &mut t);
        assert_eq!(
            t.delivered,
            vec![(1, b"h".to_vec()), (1, b"i".to_vec()), (2, b"x".to_vec())]
        );
        assert_eq!(t.commands, ["help"]);
        assert_eq!(
            t.console,
            "\n<*** console input now goes to dom2 (type Ctrl-A three times to switch)>\n\
             \n<*** console input now goes to the hypervisor (type Ctrl-A three times to switch)>\n\
             hv> help\n(ran)\nhv> "
        );
    }

    #[test]
    fn ctrl_a_before_a_key_at_the_command_line() {
        let mut input = ConsoleInput::new(&[]);
        assert_eq!(input.owner(), InputOwner::Hypervisor);
        // Two Ctrl-As then Enter: the Enter still ends the line.
        input.feed(b'p');
        assert_eq!(input.feed(0x01), Routed::Nothing);
        assert_eq!(input.feed(0x01), Routed::Nothing);
        assert_eq!(input.feed(b'\r'), Routed::Command("p".to_string()));
        // A Ctrl-A then a letter: the letter is echoed, the Ctrl-A dropped.
        input.feed(0x01);
        assert!(matches!(input.feed(b'q'), Routed::Echo(e) if e.as_bytes() == b"q"));
        // CR then a held Ctrl-A and LF: the LF is a second (empty) line, as
        // the editor sees CR, Ctrl-A, LF.
        input.feed(b'\r');
        input.feed(0x01);
        assert_eq!(input.feed(b'\n'), Routed::Command(String::new()));
    }

    #[test]
    fn a_domain_gets_held_ctrl_as_with_the_key() {
        let mut input = ConsoleInput::new(&[4]);
        let mut t = Transcript::default();
        type_in(&mut input, b"\x01\x01c", &mut t);
        assert_eq!(t.delivered, vec![(4, vec![0x01, 0x01, b'c'])]);
        assert!(t.console.is_empty());
    }

    #[test]
    fn starting_and_removing_domains() {
        let mut input = ConsoleInput::new(&[]);
        assert_eq!(input.start(&[3, 5]), InputOwner::Domain(3));
        assert_eq!(input.remove_domain(5), None, "not the owner");
        assert_eq!(input.remove_domain(3), Some(InputOwner::Hypervisor));
        assert_eq!(input.remove_domain(3), None);
    }

    #[test]
    fn input_queue_is_fifo_and_counts_drops() {
        let mut queue: InputQueue<4> = InputQueue::new();
        assert!(queue.is_empty());
        for b in 0..4 {
            assert!(queue.push(b));
        }
        assert!(!queue.push(9));
        assert_eq!(queue.dropped(), 1);
        assert_eq!(queue.pop(), Some(0));
        assert!(queue.push(4));
        let rest: Vec<u8> = core::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(rest, [1, 2, 3, 4]);
        assert_eq!(queue.len(), 0);
    }
}
