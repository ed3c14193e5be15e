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

/// Port 0x61 bits.
mod port61 {
    /// Channel 2's gate (read/write).
    pub const GATE2: u8 = 1 << 0;
    /// Speaker data enable (read/write; no sound is made).
    pub const SPEAKER: u8 = 1 << 1;
    /// Channel 2's output (read-only).
    pub const OUT2: u8 = 1 << 5;
}

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
            control: 0b11_0000,
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

    fn status_byte(&self, now: u64) -> u8 {
        u8::from(self.output(now)) << 7 | u8::from(!self.loaded) << 6 | self.control
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

    fn program(&mut self, control: u8) {
        self.access = match control >> 4 & 0b11 {
            0b01 => Access::Lsb,
            0b10 => Access::Msb,
            _ => Access::LsbThenMsb,
        };
        self.mode = match control >> 1 & 0b111 {
            6 => 2,
            7 => 3,
            m => m,
        };
        self.control = control & 0x3F;
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
                let bit = |set: bool, bit: u8| if set { bit } else { 0 };
                bit(channel2.gate, port61::GATE2)
                    | bit(self.speaker, port61::SPEAKER)
                    | bit(channel2.output(now), port61::OUT2)
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
                self.speaker = value & port61::SPEAKER != 0;
                self.channels[2].set_gate(value & port61::GATE2 != 0, now);
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
        let select = value >> 6;
        if select == 0b11 {
            // Read-back: bit 5 clear latches counts, bit 4 clear statuses,
            // bits 1-3 name the channels. A second latch before a read
            // keeps the first.
            for (index, channel) in self.channels.iter_mut().enumerate() {
                if value & (1 << (index + 1)) == 0 {
                    continue;
                }
                if value & 1 << 5 == 0 && channel.latched.is_none() {
                    channel.latched = Some(channel.count(now));
                    channel.read_msb_next = false;
                }
                if value & 1 << 4 == 0 && channel.status.is_none() {
                    channel.status = Some(channel.status_byte(now));
                }
            }
            return None;
        }
        let channel = &mut self.channels[usize::from(select)];
        if value >> 4 & 0b11 == 0 {
            // Counter latch command.
            if channel.latched.is_none() {
                channel.latched = Some(channel.count(now));
                channel.read_msb_next = false;
            }
            return None;
        }
        channel.program(value);
        (value & 1 != 0).then_some(PitWarning::BcdIgnored { channel: select })
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
