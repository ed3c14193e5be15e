//! The emulated 16550 UART each x86 domain sees at the PC's COM1 ports
//! (0x3F8-0x3FF): enough for a polled console. Transmitted bytes go through
//! the same `[domN]` line buffer as the ARM PL011
//! ([`crate::vpl011::LineBuffer`]); the transmitter is always ready, the
//! receiver always empty, and the other registers read back what was
//! written.

use crate::vpl011::LineBuffer;

/// The first port.
pub const BASE: u16 = 0x3f8;
/// Number of ports.
pub const PORTS: u16 = 8;

/// Register offsets (DLAB = 0 unless noted).
mod reg {
    /// Transmit holding (write) / receive buffer (read); divisor low with DLAB.
    pub const DATA: u16 = 0;
    /// Interrupt enable; divisor high with DLAB.
    pub const IER: u16 = 1;
    /// Interrupt identification (read) / FIFO control (write).
    pub const IIR_FCR: u16 = 2;
    /// Line control (bit 7: DLAB).
    pub const LCR: u16 = 3;
    /// Modem control.
    pub const MCR: u16 = 4;
    /// Line status.
    pub const LSR: u16 = 5;
    /// Modem status.
    pub const MSR: u16 = 6;
    /// Scratch.
    pub const SCR: u16 = 7;
}

/// LCR: divisor latch access.
const LCR_DLAB: u8 = 1 << 7;
/// LSR: transmit holding register empty and transmitter empty.
const LSR_TX_IDLE: u8 = (1 << 5) | (1 << 6);
/// IIR: no interrupt pending.
const IIR_NONE: u8 = 1;
/// MSR: clear to send, data set ready, carrier detect.
const MSR_CONNECTED: u8 = (1 << 4) | (1 << 5) | (1 << 7);

/// One domain's UART.
#[derive(Debug)]
pub struct Uart16550 {
    line: LineBuffer,
    ier: u8,
    lcr: u8,
    mcr: u8,
    scratch: u8,
    divisor: u16,
}

impl Uart16550 {
    /// The UART of domain `domain` (its lines are prefixed `[domN]`).
    pub fn new(domain: u32) -> Self {
        Self {
            line: LineBuffer::new(domain),
            ier: 0,
            lcr: 0,
            mcr: 0,
            scratch: 0,
            divisor: 1,
        }
    }

    /// Whether `port` is one of this UART's.
    pub fn claims(port: u16) -> bool {
        (BASE..BASE + PORTS).contains(&port)
    }

    /// An IN of one byte from `port` (one of this UART's).
    pub fn read(&mut self, port: u16) -> u8 {
        let dlab = self.lcr & LCR_DLAB != 0;
        match port.wrapping_sub(BASE) {
            reg::DATA if dlab => self.divisor as u8,
            reg::IER if dlab => (self.divisor >> 8) as u8,
            reg::DATA => 0,
            reg::IER => self.ier,
            reg::IIR_FCR => IIR_NONE,
            reg::LCR => self.lcr,
            reg::MCR => self.mcr,
            reg::LSR => LSR_TX_IDLE,
            reg::MSR => MSR_CONNECTED,
            reg::SCR => self.scratch,
            _ => 0xff,
        }
    }

    /// An OUT of one byte to `port`; complete lines go to `sink`.
    pub fn write(&mut self, port: u16, value: u8, sink: &mut impl FnMut(&[u8])) {
        let dlab = self.lcr & LCR_DLAB != 0;
        match port.wrapping_sub(BASE) {
            reg::DATA if dlab => self.divisor = (self.divisor & 0xff00) | u16::from(value),
            reg::IER if dlab => self.divisor = (self.divisor & 0xff) | u16::from(value) << 8,
            reg::DATA => self.line.push(value, sink),
            reg::IER => self.ier = value & 0x0f,
            reg::LCR => self.lcr = value,
            reg::MCR => self.mcr = value & 0x1f,
            reg::SCR => self.scratch = value,
            // FCR and the read-only registers.
            _ => {}
        }
    }

    /// Writes out a partial line (e.g. when the domain stops).
    pub fn flush(&mut self, sink: &mut impl FnMut(&[u8])) {
        self.line.flush(sink);
    }

    /// Bytes written through the hypercall console share the line buffer.
    pub fn console_write(&mut self, bytes: &[u8], sink: &mut impl FnMut(&[u8])) {
        self.line.push_all(bytes, sink);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;

    fn lines(uart: &mut Uart16550, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for &b in text.as_bytes() {
            uart.write(BASE, b, &mut |l: &[u8]| {
                out.push(String::from_utf8_lossy(l).into_owned())
            });
        }
        out
    }

    #[test]
    fn bytes_become_prefixed_lines() {
        let mut uart = Uart16550::new(3);
        let out = lines(&mut uart, "hello\nworld\n");
        assert_eq!(out.len(), 2);
        assert!(out[0].starts_with("[dom3] hello"), "{out:?}");
        assert!(out[1].starts_with("[dom3] world"), "{out:?}");
    }

    #[test]
    fn the_transmitter_is_always_ready_and_registers_read_back() {
        let mut uart = Uart16550::new(1);
        assert_eq!(uart.read(BASE + 5) & 0x20, 0x20);
        let mut sink = |_: &[u8]| panic!("no line expected");
        uart.write(BASE + 7, 0x5a, &mut sink);
        assert_eq!(uart.read(BASE + 7), 0x5a);
        // Divisor latch: DATA/IER are the divisor while DLAB is set, and
        // writes there are not transmitted.
        uart.write(BASE + 3, 0x83, &mut sink);
        uart.write(BASE, 0x01, &mut sink);
        uart.write(BASE + 1, 0x02, &mut sink);
        assert_eq!((uart.read(BASE), uart.read(BASE + 1)), (0x01, 0x02));
        uart.write(BASE + 3, 0x03, &mut sink);
        assert_eq!(uart.read(BASE + 2), IIR_NONE);
        assert!(Uart16550::claims(0x3ff) && !Uart16550::claims(0x400));
    }
}
