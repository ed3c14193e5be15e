//! Console input switching, the same on every architecture:
//! [`ConsoleSwitch`] decides which domain (or the hypervisor) gets the bytes
//! typed on the physical console. Input starts with the first domain that
//! has a console, then Ctrl-A three times moves it on through the others and
//! the hypervisor's command line; each switch logs an [`Announcement`]
//! (`*** console input now goes to dom2 ...`). Where the bytes then go is
//! [`crate::console_input`]'s.

use alloc::vec::Vec;
use core::fmt;

/// Who receives the bytes typed on the physical console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputOwner {
    /// A domain, by id.
    Domain(u32),
    /// The hypervisor's own console (debug keys).
    Hypervisor,
}

impl fmt::Display for InputOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Domain(id) => write!(f, "dom{id}"),
            Self::Hypervisor => f.write_str("the hypervisor"),
        }
    }
}

/// The line the console prints when input changes owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announcement(pub InputOwner);

impl fmt::Display for Announcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "*** console input now goes to {} (type Ctrl-A three times to switch)",
            self.0
        )
    }
}

/// Up to three bytes to hand to the input owner (held Ctrl-As plus the byte
/// that showed they were not a switch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputBytes {
    bytes: [u8; ConsoleSwitch::PRESSES],
    len: u8,
}

impl InputBytes {
    /// The bytes, oldest first.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// What one console byte turned into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchEvent {
    /// Give these bytes to `to`.
    Deliver {
        /// The current owner.
        to: InputOwner,
        /// The bytes.
        bytes: InputBytes,
    },
    /// A Ctrl-A was held back: it may be part of a switch.
    Held,
    /// Input now goes to `to`: print [`Announcement`].
    Switched {
        /// The new owner.
        to: InputOwner,
    },
}

/// Routes console input: every byte goes to the current owner, except that
/// Ctrl-A pressed three times in a row moves input to the next domain, and
/// after the last domain to the hypervisor, then round again (as Xen's
/// console). A Ctrl-A followed by another key reaches the owner unchanged.
#[derive(Clone, Debug)]
pub struct ConsoleSwitch {
    /// The domains, then the hypervisor last.
    owners: Vec<InputOwner>,
    current: usize,
    held_ctrl_a: u8,
}

impl ConsoleSwitch {
    /// Ctrl-A.
    pub const CTRL_A: u8 = 0x01;
    /// Presses in a row that switch.
    pub const PRESSES: usize = 3;

    /// Input starts with the first of `domains` (the hypervisor if there are
    /// none).
    pub fn new(domains: &[u32]) -> Self {
        let mut owners: Vec<InputOwner> = domains.iter().map(|&d| InputOwner::Domain(d)).collect();
        owners.push(InputOwner::Hypervisor);
        Self {
            owners,
            current: 0,
            held_ctrl_a: 0,
        }
    }

    /// Who gets input now.
    pub fn owner(&self) -> InputOwner {
        self.owners[self.current]
    }

    /// Handles one byte from the console.
    pub fn feed(&mut self, byte: u8) -> SwitchEvent {
        if byte == Self::CTRL_A {
            self.held_ctrl_a += 1;
            if usize::from(self.held_ctrl_a) < Self::PRESSES {
                return SwitchEvent::Held;
            }
            self.held_ctrl_a = 0;
            self.current = (self.current + 1) % self.owners.len();
            return SwitchEvent::Switched { to: self.owner() };
        }
        let mut bytes = InputBytes {
            bytes: [Self::CTRL_A; Self::PRESSES],
            len: self.held_ctrl_a + 1,
        };
        bytes.bytes[usize::from(self.held_ctrl_a)] = byte;
        self.held_ctrl_a = 0;
        SwitchEvent::Deliver {
            to: self.owner(),
            bytes,
        }
    }

    /// Adds a domain (created at run time) to the rotation, before the
    /// hypervisor.
    pub fn add_domain(&mut self, domain: u32) {
        if self.owners.contains(&InputOwner::Domain(domain)) {
            return;
        }
        let hypervisor = self.owners.len() - 1;
        self.owners.insert(hypervisor, InputOwner::Domain(domain));
        if self.current >= hypervisor {
            self.current += 1;
        }
    }

    /// Takes a destroyed domain out of the rotation. If it owned input, input
    /// moves to the next owner and the switch is returned for announcing.
    pub fn remove_domain(&mut self, domain: u32) -> Option<SwitchEvent> {
        let index = self
            .owners
            .iter()
            .position(|&o| o == InputOwner::Domain(domain))?;
        self.owners.remove(index);
        if index < self.current {
            self.current -= 1;
            None
        } else if index == self.current {
            self.current %= self.owners.len();
            self.held_ctrl_a = 0;
            Some(SwitchEvent::Switched { to: self.owner() })
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn delivered(event: SwitchEvent) -> (InputOwner, Vec<u8>) {
        match event {
            SwitchEvent::Deliver { to, bytes } => (to, bytes.as_slice().to_vec()),
            other => panic!("expected a delivery, got {other:?}"),
        }
    }

    #[test]
    fn console_switch_rotates_through_domains_and_the_hypervisor() {
        let mut switch = ConsoleSwitch::new(&[0, 1]);
        assert_eq!(switch.owner(), InputOwner::Domain(0));
        assert_eq!(
            delivered(switch.feed(b'a')),
            (InputOwner::Domain(0), vec![b'a'])
        );
        assert_eq!(switch.feed(0x01), SwitchEvent::Held);
        assert_eq!(switch.feed(0x01), SwitchEvent::Held);
        assert_eq!(
            switch.feed(0x01),
            SwitchEvent::Switched {
                to: InputOwner::Domain(1)
            }
        );
        assert_eq!(
            delivered(switch.feed(b'b')),
            (InputOwner::Domain(1), vec![b'b'])
        );
        for _ in 0..2 {
            switch.feed(0x01);
        }
        assert_eq!(
            switch.feed(0x01),
            SwitchEvent::Switched {
                to: InputOwner::Hypervisor
            }
        );
        for _ in 0..2 {
            switch.feed(0x01);
        }
        assert_eq!(
            switch.feed(0x01),
            SwitchEvent::Switched {
                to: InputOwner::Domain(0)
            }
        );
        assert_eq!(
            Announcement(InputOwner::Domain(1)).to_string(),
            "*** console input now goes to dom1 (type Ctrl-A three times to switch)"
        );
        assert_eq!(InputOwner::Hypervisor.to_string(), "the hypervisor");
    }

    #[test]
    fn ctrl_a_followed_by_another_key_passes_through() {
        let mut switch = ConsoleSwitch::new(&[5]);
        // Ctrl-A, 'c' (e.g. a screen/tmux prefix inside the guest).
        assert_eq!(switch.feed(0x01), SwitchEvent::Held);
        assert_eq!(
            delivered(switch.feed(b'c')),
            (InputOwner::Domain(5), vec![0x01, b'c'])
        );
        // Two Ctrl-As and a key: all three delivered, no switch.
        switch.feed(0x01);
        switch.feed(0x01);
        assert_eq!(
            delivered(switch.feed(b'x')),
            (InputOwner::Domain(5), vec![0x01, 0x01, b'x'])
        );
        assert_eq!(switch.owner(), InputOwner::Domain(5));
        // The count restarted: three more switch.
        switch.feed(0x01);
        switch.feed(0x01);
        assert_eq!(
            switch.feed(0x01),
            SwitchEvent::Switched {
                to: InputOwner::Hypervisor
            }
        );
    }

    #[test]
    fn console_switch_with_no_domains_and_domain_changes() {
        let mut switch = ConsoleSwitch::new(&[]);
        assert_eq!(switch.owner(), InputOwner::Hypervisor);
        assert_eq!(delivered(switch.feed(b'h')).0, InputOwner::Hypervisor);
        switch.add_domain(7);
        switch.add_domain(7);
        assert_eq!(
            switch.owner(),
            InputOwner::Hypervisor,
            "adding does not steal input"
        );
        for _ in 0..3 {
            switch.feed(0x01);
        }
        assert_eq!(switch.owner(), InputOwner::Domain(7));
        switch.add_domain(8);
        assert_eq!(
            switch.remove_domain(7),
            Some(SwitchEvent::Switched {
                to: InputOwner::Domain(8)
            })
        );
        assert_eq!(switch.remove_domain(7), None);
        assert_eq!(
            switch.remove_domain(8),
            Some(SwitchEvent::Switched {
                to: InputOwner::Hypervisor
            })
        );
        assert_eq!(switch.owner(), InputOwner::Hypervisor);
    }
}
