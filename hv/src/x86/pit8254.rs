//! The emulated 8254 programmable interval timer each x86 domain sees at
//! the PC's ports 0x40-0x43, with the speaker/gate port 0x61 (Intel 8254
//! datasheet, order 231164): what Linux calibrates its TSC against
//! (channel 2 through port 0x61) and the PC's IRQ 0 (channel 0).
//!
//! Time-driven rather than ticking, as QEMU's and KVM's PITs are: a
//! channel keeps the count it was loaded with and when; its count and
//! output at any moment follow from the elapsed time at the PIT's input
//! clock ([`PIT_HZ`]). The caller passes the domain's clock (ns) with
//! every access, and asks [`Pit8254::next_irq0`] when channel 0's output
//! next rises, to raise IRQ 0 then.
//!
//! Modelled: the six modes (6 and 7 alias 2 and 3), the four access modes
//! (counter latch, LSB, MSB, LSB then MSB, with the read and write
//! flip-flops), the read-back command (count and status latches), the
//! null-count flag, channel 2's gate and output on port 0x61, a gate held
//! low suspending the count (modes 0, 2, 3, 4) or a rising gate
//! restarting it (modes 1, 2, 3, 5). Not modelled: BCD counting (a BCD
//! control word is taken as binary, with a warning), channel 1 (DRAM
//! refresh: it counts like the others, driving nothing), the speaker's
//! sound, and port 0x61's refresh toggle (bit 4), which reads 0.
//! Every byte a guest writes is accepted; nothing panics.

/// The PIT's input clock, Hz.
pub const PIT_HZ: u64 = 1_193_182;
/// Channel 0's data port; 1 and 2 follow.
pub const CHANNEL0: u16 = 0x40;
/// Channel 2's data port.
pub const CHANNEL2: u16 = 0x42;
/// The control word port.
pub const CONTROL: u16 = 0x43;
/// The NMI status and control port (speaker gate and channel 2's output).
pub const PORT_61: u16 = 0x61;

const NS_PER_SECOND: u64 = 1_000_000_000;

/// The PIT's and port 0x61's register layouts (the generated items carry
/// no docs of their own).
#[allow(non_snake_case, missing_docs)]
mod fields {
    use tock_registers::register_bitfields;

    register_bitfields! [u8,
        /// The control word (port 0x43, 8254 datasheet "Control Word Format").
        pub CONTROL_WORD [
            /// BCD (1) or binary (0) counting.
            BCD OFFSET(0) NUMBITS(1) [],
            /// The counter's mode (6 and 7 alias 2 and 3).
            MODE OFFSET(1) NUMBITS(3) [],
            /// Read/write access: 0 latches the count.
            ACCESS OFFSET(4) NUMBITS(2) [
                Latch = 0b00,
                Lsb = 0b01,
                Msb = 0b10,
                LsbThenMsb = 0b11
            ],
            /// The counter (3: the read-back command).
            SELECT OFFSET(6) NUMBITS(2) [
                ReadBack = 0b11
            ]
        ],
        /// The read-back command (a control word with SELECT = 3).
        pub READ_BACK [
            /// Counters 0, 1 and 2 (bits 1, 2, 3).
            COUNTERS OFFSET(1) NUMBITS(3) [],
            /// Clear: latch the statuses.
            NO_STATUS OFFSET(4) NUMBITS(1) [],
            /// Clear: latch the counts.
            NO_COUNT OFFSET(5) NUMBITS(1) []
        ],
        /// A counter's status byte (read-back).
        pub STATUS [
            /// The control word's low six bits.
            CONTROL OFFSET(0) NUMBITS(6) [],
            /// No count loaded since the control word.
            NULL_COUNT OFFSET(6) NUMBITS(1) [],
            /// The OUT pin.
            OUTPUT OFFSET(7) NUMBITS(1) []
        ],
        /// Port 0x61 (NMI status and control), the bits the PIT drives.
        pub PORT61 [
            /// Channel 2's gate (read/write).
            GATE2 OFFSET(0) NUMBITS(1) [],
            /// Speaker data enable (read/write; no sound is made).
            SPEAKER OFFSET(1) NUMBITS(1) [],
            /// Channel 2's output (read-only).
            OUT2 OFFSET(5) NUMBITS(1) []
        ]
    ];
}

use fields::{CONTROL_WORD, PORT61, READ_BACK, STATUS};
use tock_registers::LocalRegisterCopy;

/// How a channel's data port is read and written (control word bits 5-4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Lsb,
    Msb,
    LsbThenMsb,
}

/// A guest did something the model takes in a simplified way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PitWarning {
    /// A control word asked for BCD counting; the channel counts in binary.
    BcdIgnored {
        /// The channel.
        channel: u8,
    },
}

impl core::fmt::Display for PitWarning {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BcdIgnored { channel } => write!(
                f,
                "channel {channel} asked for BCD counting; it counts in binary"
            ),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Channel {
    /// 0-5.
    mode: u8,
    access: Access,
    /// The count it was loaded with (1..=65536; 0 written means 65536).
    reload: u32,
    /// A count is loaded and counting (cleared by a control word).
    loaded: bool,
    /// When counting (re)started, ns; meaningless while `!loaded`.
    start_ns: u64,
    /// The count ticks elapsed before a low gate suspended it.
    suspended_ticks: Option<u64>,
    gate: bool,
    /// The counter latch: a count held for reading, and whether its MSB
    /// is next (LSB then MSB access).
    latched: Option<u16>,
    /// The status latch (read-back command), read before any count.
    status: Option<u8>,
    /// The next read of a live count returns its MSB (LSB then MSB).
    read_msb_next: bool,
    /// The LSB of a count being written, waiting for its MSB.
    write_lsb: Option<u8>,
    /// The control word's low 6 bits, for the status byte.
    control: u8,
}

impl Channel {
    fn new(gate: bool) -> Self {
        Self {
            mode: 0,
            access: Access::LsbThenMsb,
            reload: 0x1_0000,
            loaded: false,
            start_ns: 0,
            suspended_ticks: None,
            gate,
            latched: None,
            status: None,
            read_msb_next: false,
            write_lsb: None,
            control: (CONTROL_WORD::ACCESS::LsbThenMsb).value,
        }
    }

    /// Input clock ticks counted at `now` since counting started.
    fn ticks(&self, now: u64) -> u64 {
        if let Some(ticks) = self.suspended_ticks {
            return ticks;
        }
        let elapsed = u128::from(now.saturating_sub(self.start_ns));
        (elapsed * u128::from(PIT_HZ) / u128::from(NS_PER_SECOND)) as u64
    }

    /// The counting element's value at `now`.
    fn count(&self, now: u64) -> u16 {
        if !self.loaded {
            return 0;
        }
        let reload = u64::from(self.reload);
        let d = self.ticks(now);
        let value = match self.mode {
            // Periodic: reload..1 (mode 3 counts down by two).
            2 => reload - d % reload,
            3 => (reload - (2 * d) % reload) & !1,
            // One-shot: down through 0, then wrapping at 0x10000.
            _ => reload.wrapping_sub(d) & 0xFFFF,
        };
        value as u16
    }

    /// The OUT pin at `now`.
    fn output(&self, now: u64) -> bool {
        if !self.loaded {
            // After a control word: low in mode 0, high otherwise.
            return self.mode != 0;
        }
        let reload = u64::from(self.reload);
        let d = self.ticks(now);
        match self.mode {
            0 | 1 => d >= reload,
            2 => d % reload != reload - 1,
            3 => d % reload < reload.div_ceil(2),
            _ => d != reload,
        }
    }

    /// When OUT next rises after `now`, ns (`None`: never without a new
    /// count, or while the gate holds it).
    fn next_rise(&self, now: u64) -> Option<u64> {
        if !self.loaded || self.suspended_ticks.is_some() {
            return None;
        }
        let reload = u64::from(self.reload);
        let d = self.ticks(now);
        let tick = match self.mode {
            0 | 1 if d < reload => reload,
            0 | 1 => return None,
            // Rate generator: high again at the next period's start.
            2 | 3 => (d / reload + 1) * reload,
            4 | 5 if d <= reload => reload + 1,
            _ => return None,
        };
        let ns = u128::from(tick) * u128::from(NS_PER_SECOND);
        Some(self.start_ns + ns.div_ceil(u128::from(PIT_HZ)) as u64)
    }

    fn set_gate(&mut self, high: bool, now: u64) {
        if high == self.gate {
            return;
        }
        self.gate = high;
        if !self.loaded {
            return;
        }
        match (high, self.mode) {
            // Low: modes 0, 2, 3 and 4 stop counting.
            (false, 0 | 2 | 3 | 4) => self.suspended_ticks = Some(self.ticks(now)),
            (false, _) => {}
            // High again: 0 and 4 go on; 1, 2, 3 and 5 restart (trigger).
            (true, 0 | 4) => {
                if let Some(ticks) = self.suspended_ticks.take() {
                    let ns = u128::from(ticks) * u128::from(NS_PER_SECOND) / u128::from(PIT_HZ);
                    self.start_ns = now.saturating_sub(ns as u64);
                }
            }
            (true, _) => {
                self.suspended_ticks = None;
                self.start_ns = now;
            }
        }
    }

    /// The counter latch command: holds the count for reading, unless a
    /// latched count is still unread.
    fn latch(&mut self, now: u64) {
        if self.latched.is_none() {
            self.latched = Some(self.count(now));
            self.read_msb_next = false;
        }
    }

    fn status_byte(&self, now: u64) -> u8 {
        (STATUS::OUTPUT.val(u8::from(self.output(now)))
            + STATUS::NULL_COUNT.val(u8::from(!self.loaded))
            + STATUS::CONTROL.val(self.control))
        .value
    }

    fn read(&mut self, now: u64) -> u8 {
        if let Some(status) = self.status.take() {
            return status;
        }
        let (value, from_latch) = match self.latched {
            Some(value) => (value, true),
            None => (self.count(now), false),
        };
        let [lsb, msb] = value.to_le_bytes();
        let (byte, done) = match self.access {
            Access::Lsb => (lsb, true),
            Access::Msb => (msb, true),
            Access::LsbThenMsb if self.read_msb_next => (msb, true),
            Access::LsbThenMsb => (lsb, false),
        };
        self.read_msb_next = !done;
        if from_latch && done {
            self.latched = None;
        }
        byte
    }

    fn write(&mut self, value: u8, now: u64) {
        let count = match (self.access, self.write_lsb.take()) {
            (Access::Lsb, _) => u16::from(value),
            (Access::Msb, _) => u16::from(value) << 8,
            (Access::LsbThenMsb, None) => {
                self.write_lsb = Some(value);
                return;
            }
            (Access::LsbThenMsb, Some(lsb)) => u16::from_le_bytes([lsb, value]),
        };
        self.reload = match count {
            0 => 0x1_0000,
            // A rate generator or square wave cannot divide by one.
            1 if matches!(self.mode, 2 | 3) => 2,
            n => u32::from(n),
        };
        self.loaded = true;
        self.start_ns = now;
        self.suspended_ticks = (!self.gate && self.mode != 1 && self.mode != 5).then_some(0);
    }

    fn program(&mut self, control: LocalRegisterCopy<u8, CONTROL_WORD::Register>) {
        self.access = match control.read_as_enum(CONTROL_WORD::ACCESS) {
            Some(CONTROL_WORD::ACCESS::Value::Lsb) => Access::Lsb,
            Some(CONTROL_WORD::ACCESS::Value::Msb) => Access::Msb,
            _ => Access::LsbThenMsb,
        };
        self.mode = match control.read(CONTROL_WORD::MODE) {
            6 => 2,
            7 => 3,
            m => m,
        };
        self.control = control.get() & STATUS::CONTROL.mask;
        self.loaded = false;
        self.suspended_ticks = None;
        self.latched = None;
        self.status = None;
        self.read_msb_next = false;
        self.write_lsb = None;
    }
}

/// One domain's PIT.
#[derive(Clone, Debug)]
pub struct Pit8254 {
    channels: [Channel; 3],
    /// Port 0x61's speaker data enable bit.
    speaker: bool,
}

impl Default for Pit8254 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pit8254 {
    /// At power-on: every channel unprogrammed, channels 0 and 1 gated on,
    /// channel 2's gate off (port 0x61 reads 0).
    pub fn new() -> Self {
        Self {
            channels: [Channel::new(true), Channel::new(true), Channel::new(false)],
            speaker: false,
        }
    }

    /// Whether `port` is the PIT's (0x40-0x43, 0x61).
    pub fn claims(port: u16) -> bool {
        (CHANNEL0..=CONTROL).contains(&port) || port == PORT_61
    }

    /// A byte read from `port` at `now` (ns).
    pub fn read(&mut self, port: u16, now: u64) -> u8 {
        match port {
            PORT_61 => {
                let channel2 = &self.channels[2];
                (PORT61::GATE2.val(u8::from(channel2.gate))
                    + PORT61::SPEAKER.val(u8::from(self.speaker))
                    + PORT61::OUT2.val(u8::from(channel2.output(now))))
                .value
            }
            CHANNEL0..CONTROL => self.channels[usize::from(port - CHANNEL0)].read(now),
            // The control word port is write-only.
            _ => 0xFF,
        }
    }

    /// A byte written to `port` at `now` (ns).
    pub fn write(&mut self, port: u16, value: u8, now: u64) -> Option<PitWarning> {
        match port {
            PORT_61 => {
                let value: LocalRegisterCopy<u8, PORT61::Register> = LocalRegisterCopy::new(value);
                self.speaker = value.is_set(PORT61::SPEAKER);
                self.channels[2].set_gate(value.is_set(PORT61::GATE2), now);
                None
            }
            CHANNEL0..CONTROL => {
                self.channels[usize::from(port - CHANNEL0)].write(value, now);
                None
            }
            CONTROL => self.control(value, now),
            _ => None,
        }
    }

    fn control(&mut self, value: u8, now: u64) -> Option<PitWarning> {
        let word: LocalRegisterCopy<u8, CONTROL_WORD::Register> = LocalRegisterCopy::new(value);
        if word.matches_all(CONTROL_WORD::SELECT::ReadBack) {
            // A second latch before a read keeps the first.
            let read_back: LocalRegisterCopy<u8, READ_BACK::Register> =
                LocalRegisterCopy::new(value);
            let counters = read_back.read(READ_BACK::COUNTERS);
            for (index, channel) in self.channels.iter_mut().enumerate() {
                if counters & (1 << index) == 0 {
                    continue;
                }
                if !read_back.is_set(READ_BACK::NO_COUNT) {
                    channel.latch(now);
                }
                if !read_back.is_set(READ_BACK::NO_STATUS) && channel.status.is_none() {
                    channel.status = Some(channel.status_byte(now));
                }
            }
            return None;
        }
        let select = word.read(CONTROL_WORD::SELECT);
        let channel = &mut self.channels[usize::from(select)];
        if word.matches_all(CONTROL_WORD::ACCESS::Latch) {
            channel.latch(now);
            return None;
        }
        channel.program(word);
        word.is_set(CONTROL_WORD::BCD)
            .then_some(PitWarning::BcdIgnored { channel: select })
    }

    /// When channel 0's output next rises after `now` (ns): IRQ 0's next
    /// edge, for the caller's timer. `None`: not before a new count.
    pub fn next_irq0(&self, now: u64) -> Option<u64> {
        self.channels[0].next_rise(now)
    }

    /// Channel 0's output at `now`: IRQ 0's line.
    pub fn irq0_level(&self, now: u64) -> bool {
        self.channels[0].output(now)
    }
}

#[cfg(test)]
mod tests;
