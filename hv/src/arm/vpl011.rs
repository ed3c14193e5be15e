//! The emulated PL011 UART each domain sees.
//!
//! [`VPl011`] is the register model of an Arm PrimeCell UART (PL011), Arm DDI
//! 0183 (r1p5), enough for Linux's `amba-pl011` driver and its earlycon and for
//! simple polled guests: the arch glue turns a data abort in the UART's 4 KiB
//! MMIO window into [`VPl011::read`]/[`VPl011::write`], feeds console input
//! with [`VPl011::receive`], and sets the UART's level-sensitive SPI in the
//! vGIC to [`VPl011::irq_level`] after every call. Transmission is instant
//! (the TX FIFO is always empty), and output goes, a line at a time, prefixed
//! `[domN] `, to a sink the caller provides.
//!
//! # The input path (ARM64, `hv/src/bin/hv/aarch64/input.rs`)
//! The host PL011's RX/RT interrupt (its SPI from the host DT, routed to the
//! boot CPU) is drained into [`crate::console_switch::ConsoleSwitch::feed`]. Input starts with the
//! first domain that has a console (config `console = "vpl011"`), then Ctrl-A
//! x3 cycles through the others and the hypervisor's command line; each
//! switch logs [`crate::console_switch::Announcement`] (`*** console input now goes to dom2 ...`).
//! Bytes for a domain go to [`VPl011::receive`] (so a guest sees UARTFR.RXFE
//! clear, reads UARTDR, gets RXRIS/RTRIS in UARTRIS/UARTMIS and overrun when
//! the FIFO is full), then the domain's vGIC line for the UART's SPI (INTID
//! 33, `interrupts = <0 1 4>` in the guest DT) is set to
//! [`VPl011::irq_level`]; the vCPU it targets is woken or kicked. A guest
//! that masks the interrupts can still poll UARTFR/UARTDR. Under `cargo xtask
//! run` QEMU's `mon:stdio` eats one Ctrl-A per pair: type each Ctrl-A twice.

use core::fmt;

use tock_registers::LocalRegisterCopy;

use crate::arm::trap::{AccessWidth, MmioAccess};

/// Register layouts (DDI 0183, chapter 3 "Programmers Model").
#[allow(missing_docs)] // the macro generates undocumented helper items
pub mod fields {
    use tock_registers::register_bitfields;

    register_bitfields! {u32,
        /// Data register, as read (3.3.1 UARTDR): the byte and its receive errors.
        pub DR [
            /// Overrun error: data arrived while the FIFO was full.
            OE OFFSET(11) NUMBITS(1) [],
            /// Break error.
            BE OFFSET(10) NUMBITS(1) [],
            /// Parity error.
            PE OFFSET(9) NUMBITS(1) [],
            /// Framing error.
            FE OFFSET(8) NUMBITS(1) [],
            /// The character.
            DATA OFFSET(0) NUMBITS(8) []
        ],
        /// Receive status / error clear register (3.3.2 UARTRSR/UARTECR).
        pub RSR [
            /// Overrun error.
            OE OFFSET(3) NUMBITS(1) [],
            /// Break error.
            BE OFFSET(2) NUMBITS(1) [],
            /// Parity error.
            PE OFFSET(1) NUMBITS(1) [],
            /// Framing error.
            FE OFFSET(0) NUMBITS(1) []
        ],
        /// Flag register (3.3.3 UARTFR).
        pub FR [
            /// Ring indicator.
            RI OFFSET(8) NUMBITS(1) [],
            /// Transmit FIFO empty.
            TXFE OFFSET(7) NUMBITS(1) [],
            /// Receive FIFO full.
            RXFF OFFSET(6) NUMBITS(1) [],
            /// Transmit FIFO full.
            TXFF OFFSET(5) NUMBITS(1) [],
            /// Receive FIFO empty.
            RXFE OFFSET(4) NUMBITS(1) [],
            /// UART busy transmitting.
            BUSY OFFSET(3) NUMBITS(1) [],
            /// Data carrier detect.
            DCD OFFSET(2) NUMBITS(1) [],
            /// Data set ready.
            DSR OFFSET(1) NUMBITS(1) [],
            /// Clear to send.
            CTS OFFSET(0) NUMBITS(1) []
        ],
        /// Integer baud rate divisor (3.3.6 UARTIBRD).
        pub IBRD [
            /// The divisor.
            DIVINT OFFSET(0) NUMBITS(16) []
        ],
        /// Fractional baud rate divisor (3.3.7 UARTFBRD).
        pub FBRD [
            /// The divisor.
            DIVFRAC OFFSET(0) NUMBITS(6) []
        ],
        /// Line control register (3.3.7 UARTLCR_H).
        pub LCR_H [
            /// All defined bits.
            ALL OFFSET(0) NUMBITS(8) [],
            /// Stick parity select.
            SPS OFFSET(7) NUMBITS(1) [],
            /// Word length.
            WLEN OFFSET(5) NUMBITS(2) [],
            /// FIFO enable: 32-entry FIFOs instead of 1-byte holding registers.
            FEN OFFSET(4) NUMBITS(1) [],
            /// Two stop bits.
            STP2 OFFSET(3) NUMBITS(1) [],
            /// Even parity select.
            EPS OFFSET(2) NUMBITS(1) [],
            /// Parity enable.
            PEN OFFSET(1) NUMBITS(1) [],
            /// Send break.
            BRK OFFSET(0) NUMBITS(1) []
        ],
        /// Control register (3.3.8 UARTCR).
        pub CR [
            /// All defined bits (CTSEn .. UARTEN), as the register stores them.
            ALL OFFSET(0) NUMBITS(16) [],
            /// Receive enable.
            RXE OFFSET(9) NUMBITS(1) [],
            /// Transmit enable.
            TXE OFFSET(8) NUMBITS(1) [],
            /// Loopback enable.
            LBE OFFSET(7) NUMBITS(1) [],
            /// UART enable.
            UARTEN OFFSET(0) NUMBITS(1) []
        ],
        /// Interrupt FIFO level select (3.3.9 UARTIFLS).
        pub IFLS [
            /// All defined bits.
            ALL OFFSET(0) NUMBITS(6) [],
            /// Receive interrupt FIFO level.
            RXIFLSEL OFFSET(3) NUMBITS(3) [
                OneEighth = 0b000,
                OneQuarter = 0b001,
                Half = 0b010,
                ThreeQuarters = 0b011,
                SevenEighths = 0b100
            ],
            /// Transmit interrupt FIFO level.
            TXIFLSEL OFFSET(0) NUMBITS(3) []
        ],
        /// The interrupt bits shared by UARTIMSC, UARTRIS, UARTMIS and UARTICR
        /// (3.3.10 - 3.3.13).
        pub INT [
            /// All defined interrupt bits.
            ALL OFFSET(0) NUMBITS(11) [],
            /// Overrun error.
            OE OFFSET(10) NUMBITS(1) [],
            /// Break error.
            BE OFFSET(9) NUMBITS(1) [],
            /// Parity error.
            PE OFFSET(8) NUMBITS(1) [],
            /// Framing error.
            FE OFFSET(7) NUMBITS(1) [],
            /// Receive timeout.
            RT OFFSET(6) NUMBITS(1) [],
            /// Transmit.
            TX OFFSET(5) NUMBITS(1) [],
            /// Receive.
            RX OFFSET(4) NUMBITS(1) []
        ],
        /// DMA control register (3.3.14 UARTDMACR): stored, no DMA is done.
        pub DMACR [
            /// All defined bits.
            ALL OFFSET(0) NUMBITS(3) []
        ],
        /// IrDA low-power counter (3.3.5 UARTILPR).
        pub ILPR [
            /// The divisor.
            ILPDVSR OFFSET(0) NUMBITS(8) []
        ]
    }
}

use fields::{CR, DMACR, DR, FBRD, FR, IBRD, IFLS, ILPR, INT, LCR_H, RSR};

/// The size of the UART's MMIO window.
pub const MMIO_SIZE: u64 = 0x1000;

/// Depth of each FIFO when LCR_H.FEN is set (DDI 0183 r1p5: 32 entries).
pub const FIFO_DEPTH: usize = 32;

/// The bytes of text one output line holds before it is flushed anyway.
pub const LINE_CAPACITY: usize = 120;

/// The PrimeCell identification registers at 0xFE0..=0xFFC (DDI 0183 3.3.15,
/// 3.3.16), low byte of each word: UARTPeriphID0..3 = 0x11, 0x10, 0x14, 0x00
/// (part number 0x011, designer 0x41 = Arm, revision 1, configuration 0),
/// UARTPCellID0..3 = 0x0D, 0xF0, 0x05, 0xB1 (the PrimeCell preamble). Linux's AMBA bus reads these to
/// match the `arm,pl011` driver (peripheral id 0x00041011 under mask
/// 0x000fffff) before it probes the UART.
const PERIPH_ID: [u8; 4] = [0x11, 0x10, 0x14, 0x00];
const CELL_ID: [u8; 4] = [0x0D, 0xF0, 0x05, 0xB1];

/// The registers by offset (DDI 0183 table 3-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Register {
    Data,
    ReceiveStatus,
    Flags,
    IrdaLowPower,
    IntegerBaud,
    FractionalBaud,
    LineControl,
    Control,
    FifoLevelSelect,
    InterruptMask,
    RawInterruptStatus,
    MaskedInterruptStatus,
    InterruptClear,
    DmaControl,
    PeriphId(usize),
    CellId(usize),
}

impl Register {
    fn at(offset: u64) -> Option<Self> {
        Some(match offset {
            0x000 => Self::Data,
            0x004 => Self::ReceiveStatus,
            0x018 => Self::Flags,
            0x020 => Self::IrdaLowPower,
            0x024 => Self::IntegerBaud,
            0x028 => Self::FractionalBaud,
            0x02C => Self::LineControl,
            0x030 => Self::Control,
            0x034 => Self::FifoLevelSelect,
            0x038 => Self::InterruptMask,
            0x03C => Self::RawInterruptStatus,
            0x040 => Self::MaskedInterruptStatus,
            0x044 => Self::InterruptClear,
            0x048 => Self::DmaControl,
            0xFE0..=0xFEC => Self::PeriphId(((offset - 0xFE0) / 4) as usize),
            0xFF0..=0xFFC => Self::CellId(((offset - 0xFF0) / 4) as usize),
            _ => return None,
        })
    }
}

/// Why a guest's UART access was refused. The glue logs it and treats the
/// access as RAZ/WI (reads give 0, writes are dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pl011Error {
    /// No register at this offset (reserved, or outside the window).
    UnknownRegister {
        /// Offset within the window.
        offset: u64,
    },
    /// Not at the start of a 32-bit register.
    Unaligned {
        /// Offset within the window.
        offset: u64,
    },
    /// A 64-bit access: the PL011 has 32-bit registers.
    BadWidth {
        /// Offset within the window.
        offset: u64,
    },
    /// A write to a read-only register (UARTFR, RIS, MIS, IDs).
    ReadOnly {
        /// Offset within the window.
        offset: u64,
    },
    /// A read of the write-only UARTICR.
    WriteOnly {
        /// Offset within the window.
        offset: u64,
    },
}

impl fmt::Display for Pl011Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownRegister { offset } => write!(f, "no PL011 register at {offset:#x}"),
            Self::Unaligned { offset } => write!(f, "unaligned PL011 access at {offset:#x}"),
            Self::BadWidth { offset } => write!(f, "64-bit PL011 access at {offset:#x}"),
            Self::ReadOnly { offset } => write!(f, "write to read-only PL011 register {offset:#x}"),
            Self::WriteOnly { offset } => {
                write!(f, "read of write-only PL011 register {offset:#x}")
            }
        }
    }
}

/// Collects a domain's output into lines `[domN] text\n`. Shared by the
/// emulated UART and the `CONSOLE_WRITE` hypercall so both paths make whole,
/// prefixed lines that never interleave mid-line with other domains' output.
#[derive(Clone, Debug)]
pub struct LineBuffer {
    buffer: [u8; Self::BUFFER_BYTES],
    prefix_len: usize,
    len: usize,
}

impl LineBuffer {
    /// `[dom4294967295] ` is 16 bytes; the text, then `\n`.
    const BUFFER_BYTES: usize = 16 + LINE_CAPACITY + 1;

    /// An empty buffer for domain `domain`.
    pub fn new(domain: u32) -> Self {
        let mut buffer = [0; Self::BUFFER_BYTES];
        let mut cursor = Cursor {
            buffer: &mut buffer,
            len: 0,
        };
        // Cannot fail: the buffer has room for the longest prefix.
        let _ = fmt::write(&mut cursor, format_args!("[dom{domain}] "));
        let prefix_len = cursor.len;
        Self {
            buffer,
            prefix_len,
            len: prefix_len,
        }
    }

    /// Adds one byte; a newline, or a full line, sends the line to `sink`.
    /// Carriage returns are dropped (the console adds its own line endings).
    pub fn push(&mut self, byte: u8, sink: &mut impl FnMut(&[u8])) {
        match byte {
            b'\n' => self.flush_line(sink),
            b'\r' => {}
            _ => {
                self.buffer[self.len] = byte;
                self.len += 1;
                if self.len - self.prefix_len == LINE_CAPACITY {
                    self.flush_line(sink);
                }
            }
        }
    }

    /// Adds every byte of `bytes`.
    pub fn push_all(&mut self, bytes: &[u8], sink: &mut impl FnMut(&[u8])) {
        for &byte in bytes {
            self.push(byte, sink);
        }
    }

    /// Sends a partial line, if any (e.g. before the domain stops).
    pub fn flush(&mut self, sink: &mut impl FnMut(&[u8])) {
        if self.len > self.prefix_len {
            self.flush_line(sink);
        }
    }

    /// Bytes of text waiting for a newline.
    pub fn pending(&self) -> usize {
        self.len - self.prefix_len
    }

    fn flush_line(&mut self, sink: &mut impl FnMut(&[u8])) {
        self.buffer[self.len] = b'\n';
        sink(&self.buffer[..=self.len]);
        self.len = self.prefix_len;
    }
}

/// `fmt::Write` into a byte array (for the prefix, without allocating).
struct Cursor<'a> {
    buffer: &'a mut [u8],
    len: usize,
}

impl fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let target = self.buffer.get_mut(self.len..end).ok_or(fmt::Error)?;
        target.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The receive FIFO: data plus the DR error bits of each entry.
#[derive(Clone, Debug)]
struct RxFifo {
    entries: [u16; FIFO_DEPTH],
    head: usize,
    len: usize,
}

impl RxFifo {
    const fn new() -> Self {
        Self {
            entries: [0; FIFO_DEPTH],
            head: 0,
            len: 0,
        }
    }

    fn push(&mut self, entry: u16) {
        self.entries[(self.head + self.len) % FIFO_DEPTH] = entry;
        self.len += 1;
    }

    fn pop(&mut self) -> Option<u16> {
        if self.len == 0 {
            return None;
        }
        let entry = self.entries[self.head];
        self.head = (self.head + 1) % FIFO_DEPTH;
        self.len -= 1;
        Some(entry)
    }

    fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

/// One domain's emulated PL011.
#[derive(Clone, Debug)]
pub struct VPl011 {
    line: LineBuffer,
    rx: RxFifo,
    /// The next received character carries DR.OE (an overrun happened).
    overrun_pending: bool,
    receive_status: LocalRegisterCopy<u32, RSR::Register>,
    irda_low_power: LocalRegisterCopy<u32, ILPR::Register>,
    integer_baud: LocalRegisterCopy<u32, IBRD::Register>,
    fractional_baud: LocalRegisterCopy<u32, FBRD::Register>,
    line_control: LocalRegisterCopy<u32, LCR_H::Register>,
    control: LocalRegisterCopy<u32, CR::Register>,
    fifo_level: LocalRegisterCopy<u32, IFLS::Register>,
    interrupt_mask: LocalRegisterCopy<u32, INT::Register>,
    raw_interrupts: LocalRegisterCopy<u32, INT::Register>,
    dma_control: LocalRegisterCopy<u32, DMACR::Register>,
}

impl VPl011 {
    /// The UART of domain `domain`, in its reset state except that it is
    /// enabled (UARTCR = UARTEN | TXE | RXE), as firmware would leave the
    /// console for the OS: polled guests that never touch UARTCR still get
    /// input.
    pub fn new(domain: u32) -> Self {
        let mut uart = Self {
            line: LineBuffer::new(domain),
            rx: RxFifo::new(),
            overrun_pending: false,
            receive_status: LocalRegisterCopy::new(0),
            irda_low_power: LocalRegisterCopy::new(0),
            integer_baud: LocalRegisterCopy::new(0),
            fractional_baud: LocalRegisterCopy::new(0),
            line_control: LocalRegisterCopy::new(0),
            control: LocalRegisterCopy::new(0),
            fifo_level: LocalRegisterCopy::new(0),
            interrupt_mask: LocalRegisterCopy::new(0),
            raw_interrupts: LocalRegisterCopy::new(0),
            dma_control: LocalRegisterCopy::new(0),
        };
        uart.control
            .write(CR::UARTEN::SET + CR::TXE::SET + CR::RXE::SET);
        // Reset value 0x12: both triggers at half full (3.3.9).
        uart.fifo_level
            .write(IFLS::RXIFLSEL::Half + IFLS::TXIFLSEL.val(0b010));
        uart
    }

    /// The level of the UART's interrupt line (UARTINTR = any bit of
    /// UARTMIS): the vGIC should hold the SPI at this level.
    pub fn irq_level(&self) -> bool {
        self.masked_interrupts() != 0
    }

    /// Free entries in the receive FIFO (what [`VPl011::receive`] can take
    /// without an overrun).
    pub fn rx_space(&self) -> usize {
        self.rx_depth() - self.rx.len
    }

    /// A byte arrives from the console. Returns false if it was not taken:
    /// the receiver is disabled (UARTCR.UARTEN or RXE clear), or the FIFO is
    /// full, which is an overrun as on the hardware (UARTRSR.OE, the OE
    /// interrupt, and DR.OE on the next character).
    pub fn receive(&mut self, byte: u8) -> bool {
        if !(self.control.is_set(CR::UARTEN) && self.control.is_set(CR::RXE)) {
            return false;
        }
        if self.rx.len >= self.rx_depth() {
            self.receive_status.modify(RSR::OE::SET);
            self.raw_interrupts.modify(INT::OE::SET);
            self.overrun_pending = true;
            return false;
        }
        let mut entry = LocalRegisterCopy::<u32, DR::Register>::new(0);
        entry.write(DR::DATA.val(u32::from(byte)));
        if self.overrun_pending {
            entry.modify(DR::OE::SET);
            self.overrun_pending = false;
        }
        self.rx.push(entry.get() as u16);
        self.update_rx_interrupts();
        true
    }

    /// Output that did not come through the UART registers (the
    /// `CONSOLE_WRITE` hypercall), merged into the same lines.
    pub fn console_write(&mut self, bytes: &[u8], sink: &mut impl FnMut(&[u8])) {
        self.line.push_all(bytes, sink);
    }

    /// Sends any partial output line to `sink`.
    pub fn flush(&mut self, sink: &mut impl FnMut(&[u8])) {
        self.line.flush(sink);
    }

    /// A guest read of `width` at `offset` in the MMIO window.
    pub fn read(&mut self, offset: u64, width: AccessWidth) -> Result<u32, Pl011Error> {
        let register = Self::register(offset, width)?;
        let value = match register {
            Register::Data => self.read_data(),
            Register::ReceiveStatus => self.receive_status.get(),
            Register::Flags => self.flags(),
            Register::IrdaLowPower => self.irda_low_power.get(),
            Register::IntegerBaud => self.integer_baud.get(),
            Register::FractionalBaud => self.fractional_baud.get(),
            Register::LineControl => self.line_control.get(),
            Register::Control => self.control.get(),
            Register::FifoLevelSelect => self.fifo_level.get(),
            Register::InterruptMask => self.interrupt_mask.get(),
            Register::RawInterruptStatus => self.raw_interrupts.get(),
            Register::MaskedInterruptStatus => self.masked_interrupts(),
            Register::InterruptClear => return Err(Pl011Error::WriteOnly { offset }),
            Register::DmaControl => self.dma_control.get(),
            Register::PeriphId(i) => u32::from(PERIPH_ID[i]),
            Register::CellId(i) => u32::from(CELL_ID[i]),
        };
        Ok(value & width.mask() as u32)
    }

    /// A guest write of `value` (`width` bytes) at `offset`; transmitted text
    /// goes to `sink` a line at a time.
    pub fn write(
        &mut self,
        offset: u64,
        width: AccessWidth,
        value: u64,
        sink: &mut impl FnMut(&[u8]),
    ) -> Result<(), Pl011Error> {
        let register = Self::register(offset, width)?;
        let value = (value & width.mask()) as u32;
        match register {
            Register::Data => {
                // Transmission is instant: the TX FIFO drains at once, so it is
                // at or below any trigger level and the TX interrupt asserts
                // (3.4.3 UARTTXINTR); writing more data or UARTICR clears it.
                self.line.push(DR::DATA.read(value) as u8, sink);
                self.raw_interrupts.modify(INT::TX::SET);
            }
            Register::ReceiveStatus => self.receive_status.set(0),
            Register::IrdaLowPower => self.irda_low_power.set(ILPR::ILPDVSR.read(value)),
            Register::IntegerBaud => self.integer_baud.set(IBRD::DIVINT.read(value)),
            Register::FractionalBaud => self.fractional_baud.set(FBRD::DIVFRAC.read(value)),
            Register::LineControl => {
                let was_fifo = self.line_control.is_set(LCR_H::FEN);
                self.line_control.set(LCR_H::ALL.read(value));
                if was_fifo != self.line_control.is_set(LCR_H::FEN) {
                    // Switching between FIFO and holding-register mode empties
                    // the receive side (as QEMU's model does).
                    self.rx.clear();
                    self.update_rx_interrupts();
                }
            }
            Register::Control => {
                self.control.set(CR::ALL.read(value));
            }
            Register::FifoLevelSelect => {
                self.fifo_level.set(IFLS::ALL.read(value));
                self.update_rx_interrupts();
            }
            Register::InterruptMask => self.interrupt_mask.set(INT::ALL.read(value)),
            Register::InterruptClear => {
                let cleared = INT::ALL.read(value);
                self.raw_interrupts
                    .set(self.raw_interrupts.get() & !cleared);
            }
            Register::DmaControl => self.dma_control.set(DMACR::ALL.read(value)),
            Register::Flags
            | Register::RawInterruptStatus
            | Register::MaskedInterruptStatus
            | Register::PeriphId(_)
            | Register::CellId(_) => return Err(Pl011Error::ReadOnly { offset }),
        }
        Ok(())
    }

    /// Emulates a trapped access `access` at `offset` in the window against
    /// the guest's `x0..=x30` (`x`): a store takes its value from Xt, a load
    /// completes into Xt (XZR handled). A refused access still completes: a
    /// load reads as zero, a store is dropped (RAZ/WI); the error is returned
    /// for the caller to log.
    pub fn emulate(
        &mut self,
        offset: u64,
        access: &MmioAccess,
        x: &mut [u64],
        sink: &mut impl FnMut(&[u8]),
    ) -> Result<(), Pl011Error> {
        if access.write {
            self.write(offset, access.width, access.store_value_from(x), sink)
        } else {
            let result = self.read(offset, access.width);
            access.complete_load(x, u64::from(*result.as_ref().unwrap_or(&0)));
            result.map(|_| ())
        }
    }

    fn register(offset: u64, width: AccessWidth) -> Result<Register, Pl011Error> {
        if width == AccessWidth::Doubleword {
            return Err(Pl011Error::BadWidth { offset });
        }
        if offset >= MMIO_SIZE {
            return Err(Pl011Error::UnknownRegister { offset });
        }
        if !offset.is_multiple_of(4) {
            return Err(Pl011Error::Unaligned { offset });
        }
        Register::at(offset).ok_or(Pl011Error::UnknownRegister { offset })
    }

    fn read_data(&mut self) -> u32 {
        let Some(entry) = self.rx.pop() else {
            return 0;
        };
        // UARTRSR's FE/PE/BE would describe this character; the emulation
        // never produces them. Its OE is sticky until an ECR write (3.3.2).
        self.update_rx_interrupts();
        u32::from(entry)
    }

    fn flags(&self) -> u32 {
        let mut flags = LocalRegisterCopy::<u32, FR::Register>::new(0);
        // Transmission is instant: TX FIFO always empty, never busy or full.
        flags.modify(FR::TXFE::SET);
        if self.rx.len == 0 {
            flags.modify(FR::RXFE::SET);
        }
        if self.rx.len >= self.rx_depth() {
            flags.modify(FR::RXFF::SET);
        }
        flags.get()
    }

    fn masked_interrupts(&self) -> u32 {
        self.raw_interrupts.get() & self.interrupt_mask.get()
    }

    fn rx_depth(&self) -> usize {
        if self.line_control.is_set(LCR_H::FEN) {
            FIFO_DEPTH
        } else {
            1
        }
    }

    /// Entries at which the receive interrupt asserts (3.4.3 UARTRXINTR): the
    /// IFLS level with FIFOs, one character in holding-register mode.
    fn rx_trigger(&self) -> usize {
        if !self.line_control.is_set(LCR_H::FEN) {
            return 1;
        }
        match self.fifo_level.read_as_enum(IFLS::RXIFLSEL) {
            Some(IFLS::RXIFLSEL::Value::OneEighth) => FIFO_DEPTH / 8,
            Some(IFLS::RXIFLSEL::Value::OneQuarter) => FIFO_DEPTH / 4,
            Some(IFLS::RXIFLSEL::Value::Half) | None => FIFO_DEPTH / 2,
            Some(IFLS::RXIFLSEL::Value::ThreeQuarters) => FIFO_DEPTH * 3 / 4,
            Some(IFLS::RXIFLSEL::Value::SevenEighths) => FIFO_DEPTH * 7 / 8,
        }
    }

    /// The receive interrupt follows the FIFO level against the trigger; the
    /// receive timeout stands for "data below the trigger and nothing more
    /// arriving": console input comes in bursts far apart compared with 32 bit
    /// periods, so it asserts as soon as data sits below the trigger, and
    /// clears when the FIFO empties (3.4.3 UARTRTINTR).
    fn update_rx_interrupts(&mut self) {
        let level = self.rx.len;
        let mut raw = self.raw_interrupts;
        if level >= self.rx_trigger() {
            raw.modify(INT::RX::SET);
        } else {
            raw.modify(INT::RX::CLEAR);
            if level > 0 {
                raw.modify(INT::RT::SET);
            }
        }
        if level == 0 {
            raw.modify(INT::RT::CLEAR);
        }
        self.raw_interrupts = raw;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccessWidth::{Byte, Halfword, Word};
    use alloc::string::String;
    use alloc::vec;

    // Offsets and bits from DDI 0183 table 3-1 and 3.3.x, written out by hand.
    const DR: u64 = 0x00;
    const RSR: u64 = 0x04;
    const FR: u64 = 0x18;
    const IBRD: u64 = 0x24;
    const FBRD: u64 = 0x28;
    const LCR_H: u64 = 0x2C;
    const CR: u64 = 0x30;
    const IFLS: u64 = 0x34;
    const IMSC: u64 = 0x38;
    const RIS: u64 = 0x3C;
    const MIS: u64 = 0x40;
    const ICR: u64 = 0x44;
    const FR_RXFE: u32 = 1 << 4;
    const FR_TXFF: u32 = 1 << 5;
    const FR_RXFF: u32 = 1 << 6;
    const FR_TXFE: u32 = 1 << 7;
    const FR_BUSY: u32 = 1 << 3;
    const INT_RX: u32 = 1 << 4;
    const INT_TX: u32 = 1 << 5;
    const INT_RT: u32 = 1 << 6;
    const INT_OE: u32 = 1 << 10;
    const LCR_H_FEN: u64 = 1 << 4;
    const LCR_H_WLEN_8: u64 = 0b11 << 5;

    #[derive(Default)]
    struct Lines(Vec<String>);

    impl Lines {
        fn sink(&mut self) -> impl FnMut(&[u8]) + '_ {
            |line: &[u8]| self.0.push(String::from_utf8_lossy(line).into_owned())
        }
    }

    fn write(uart: &mut VPl011, offset: u64, value: u64, lines: &mut Lines) {
        uart.write(offset, Word, value, &mut lines.sink()).unwrap();
    }

    fn read(uart: &mut VPl011, offset: u64) -> u32 {
        uart.read(offset, Word).unwrap()
    }

    #[test]
    fn primecell_ids_match_linux_amba_probe() {
        let mut uart = VPl011::new(1);
        // drivers/amba/bus.c reads the four PID words then the four CID words,
        // low byte of each, from size - 0x20.
        let pid = (0..4).fold(0u32, |acc, i| {
            acc | (read(&mut uart, 0xFE0 + 4 * i) & 0xff) << (8 * i)
        });
        let cid = (0..4).fold(0u32, |acc, i| {
            acc | (read(&mut uart, 0xFF0 + 4 * i) & 0xff) << (8 * i)
        });
        assert_eq!(cid, 0xB105_F00D, "AMBA_CID");
        assert_eq!(pid, 0x0014_1011);
        // amba-pl011's id table: { .id = 0x00041011, .mask = 0x000fffff }.
        assert_eq!(pid & 0x000f_ffff, 0x0004_1011);
        // The ID registers are read-only.
        let mut lines = Lines::default();
        assert_eq!(
            uart.write(0xFE0, Word, 0, &mut lines.sink()),
            Err(Pl011Error::ReadOnly { offset: 0xFE0 })
        );
    }

    #[test]
    fn linux_style_setup_sequence() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        // pl011_hwinit: clear errors and interrupts, save IMSC.
        uart.write(RSR, Halfword, 0, &mut lines.sink()).unwrap();
        uart.write(ICR, Halfword, 0x7ff, &mut lines.sink()).unwrap();
        assert_eq!(uart.read(IMSC, Halfword), Ok(0));
        // pl011_startup: IFLS, CR, baud, LCR_H with FIFOs, then RX interrupts.
        write(&mut uart, IFLS, 0x12, &mut lines);
        write(&mut uart, CR, 0x301, &mut lines);
        write(&mut uart, IBRD, 0x27, &mut lines); // 24 MHz / (16 * 38400) = 39.06
        write(&mut uart, FBRD, 0x4, &mut lines);
        write(&mut uart, LCR_H, LCR_H_WLEN_8 | LCR_H_FEN, &mut lines);
        write(&mut uart, IMSC, u64::from(INT_RX | INT_RT), &mut lines);
        assert_eq!(read(&mut uart, IBRD), 0x27);
        assert_eq!(read(&mut uart, FBRD), 0x4);
        assert_eq!(read(&mut uart, LCR_H), 0x70);
        assert_eq!(read(&mut uart, CR), 0x301);
        assert_eq!(read(&mut uart, IFLS), 0x12);
        assert_eq!(read(&mut uart, IMSC), INT_RX | INT_RT);
        // Idle: TX empty, RX empty, nothing pending.
        let flags = read(&mut uart, FR);
        assert_eq!(flags & (FR_TXFE | FR_RXFE), FR_TXFE | FR_RXFE);
        assert_eq!(flags & (FR_TXFF | FR_RXFF | FR_BUSY), 0);
        assert!(!uart.irq_level());
        // Out-of-range values are truncated to the register widths.
        write(&mut uart, FBRD, 0xff, &mut lines);
        assert_eq!(read(&mut uart, FBRD), 0x3f);
        write(&mut uart, IMSC, 0xffff_ffff, &mut lines);
        assert_eq!(read(&mut uart, IMSC), 0x7ff);
    }

    #[test]
    fn reset_values() {
        let mut uart = VPl011::new(0);
        assert_eq!(read(&mut uart, CR), 0x301, "enabled, as firmware leaves it");
        assert_eq!(read(&mut uart, IFLS), 0x12);
        assert_eq!(read(&mut uart, FR), FR_TXFE | FR_RXFE);
        assert_eq!(read(&mut uart, RIS), 0);
    }

    #[test]
    fn tx_lines_carry_the_domain_prefix() {
        let mut uart = VPl011::new(3);
        let mut lines = Lines::default();
        for &b in b"hello\r\nworld" {
            uart.write(DR, Byte, u64::from(b), &mut lines.sink())
                .unwrap();
        }
        assert_eq!(lines.0, ["[dom3] hello\n"]);
        // The rest comes out on flush (e.g. when the domain stops).
        uart.flush(&mut lines.sink());
        assert_eq!(lines.0, ["[dom3] hello\n", "[dom3] world\n"]);
        uart.flush(&mut lines.sink());
        assert_eq!(lines.0.len(), 2, "nothing left to flush");
        // Only DR[7:0] is the character.
        write(&mut uart, DR, 0xf00 | u64::from(b'x'), &mut lines);
        write(&mut uart, DR, u64::from(b'\n'), &mut lines);
        assert_eq!(lines.0[2], "[dom3] x\n");
    }

    #[test]
    fn long_lines_are_split_when_the_buffer_fills() {
        let mut uart = VPl011::new(12);
        let mut lines = Lines::default();
        let text = vec![b'a'; LINE_CAPACITY + 5];
        for &b in &text {
            write(&mut uart, DR, u64::from(b), &mut lines);
        }
        assert_eq!(lines.0.len(), 1);
        assert_eq!(lines.0[0].len(), "[dom12] ".len() + LINE_CAPACITY + 1);
        uart.flush(&mut lines.sink());
        assert_eq!(lines.0[1], "[dom12] aaaaa\n");
    }

    #[test]
    fn hypercall_output_joins_the_same_line() {
        let mut uart = VPl011::new(u32::MAX);
        let mut lines = Lines::default();
        write(&mut uart, DR, u64::from(b'A'), &mut lines);
        uart.console_write(b"BC\nD", &mut lines.sink());
        assert_eq!(lines.0, ["[dom4294967295] ABC\n"]);
        assert_eq!(uart.line.pending(), 1);
    }

    #[test]
    fn tx_interrupt_asserts_after_a_write_and_clears_with_icr() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, IMSC, u64::from(INT_TX), &mut lines);
        assert!(!uart.irq_level());
        write(&mut uart, DR, u64::from(b'a'), &mut lines);
        assert_eq!(read(&mut uart, RIS) & INT_TX, INT_TX);
        assert_eq!(read(&mut uart, MIS), INT_TX);
        assert!(uart.irq_level());
        write(&mut uart, ICR, u64::from(INT_TX), &mut lines);
        assert!(!uart.irq_level());
        // Masked: raw status set, line low.
        write(&mut uart, IMSC, 0, &mut lines);
        write(&mut uart, DR, u64::from(b'b'), &mut lines);
        assert_eq!(read(&mut uart, RIS) & INT_TX, INT_TX);
        assert_eq!(read(&mut uart, MIS), 0);
        assert!(!uart.irq_level());
    }

    #[test]
    fn rx_with_fifo_and_interrupts() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, LCR_H, LCR_H_WLEN_8 | LCR_H_FEN, &mut lines);
        write(&mut uart, IMSC, u64::from(INT_RX | INT_RT), &mut lines);
        // One byte, below the half-full trigger (16): receive timeout.
        assert!(uart.receive(b'x'));
        assert_eq!(read(&mut uart, RIS) & (INT_RX | INT_RT), INT_RT);
        assert!(uart.irq_level());
        assert_eq!(read(&mut uart, FR) & FR_RXFE, 0);
        assert_eq!(read(&mut uart, DR), u32::from(b'x'));
        assert_eq!(read(&mut uart, FR) & FR_RXFE, FR_RXFE);
        assert!(!uart.irq_level(), "drained: timeout clears");
        // Sixteen bytes reach the trigger: RX.
        for b in 0..16u8 {
            assert!(uart.receive(b'a' + b));
        }
        assert_eq!(read(&mut uart, MIS) & INT_RX, INT_RX);
        // Reading one takes the level below the trigger: RX drops, RT stays.
        assert_eq!(read(&mut uart, DR), u32::from(b'a'));
        assert_eq!(read(&mut uart, RIS) & (INT_RX | INT_RT), INT_RT);
        for b in 1..16u8 {
            assert_eq!(read(&mut uart, DR), u32::from(b'a' + b), "FIFO order");
        }
        assert!(!uart.irq_level());
        // Reading an empty FIFO gives 0 and changes nothing.
        assert_eq!(read(&mut uart, DR), 0);
    }

    #[test]
    fn rx_trigger_levels_follow_ifls() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, LCR_H, LCR_H_FEN, &mut lines);
        write(&mut uart, IFLS, 0b000 << 3, &mut lines); // 1/8 = 4 entries
        for _ in 0..3 {
            uart.receive(b'.');
        }
        assert_eq!(read(&mut uart, RIS) & INT_RX, 0);
        uart.receive(b'.');
        assert_eq!(read(&mut uart, RIS) & INT_RX, INT_RX);
        // Raising the trigger to 7/8 (28) with 4 queued drops RX.
        write(&mut uart, IFLS, 0b100 << 3, &mut lines);
        assert_eq!(read(&mut uart, RIS) & INT_RX, 0);
    }

    #[test]
    fn rx_overrun_and_fifo_full() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, LCR_H, LCR_H_FEN, &mut lines);
        write(&mut uart, IMSC, u64::from(INT_OE), &mut lines);
        for i in 0..FIFO_DEPTH {
            assert!(uart.receive(i as u8));
        }
        assert_eq!(uart.rx_space(), 0);
        assert_eq!(read(&mut uart, FR) & FR_RXFF, FR_RXFF);
        assert!(!uart.receive(0xEE), "full: overrun");
        assert_eq!(read(&mut uart, RIS) & INT_OE, INT_OE);
        assert!(uart.irq_level());
        // The overrun shows in DR.OE of the next character that gets in.
        assert_eq!(read(&mut uart, DR), 0);
        assert!(uart.receive(b'n'));
        for i in 1..FIFO_DEPTH {
            assert_eq!(read(&mut uart, DR), i as u32);
        }
        assert_eq!(read(&mut uart, DR), 1 << 11 | u32::from(b'n'));
        assert_eq!(read(&mut uart, RSR), 1 << 3, "RSR.OE sticky until ECR");
        write(&mut uart, RSR, 0, &mut lines);
        assert_eq!(read(&mut uart, RSR), 0, "ECR write clears");
        write(&mut uart, ICR, u64::from(INT_OE), &mut lines);
        assert!(!uart.irq_level());
    }

    #[test]
    fn rx_without_fifo_holds_one_character() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, IMSC, u64::from(INT_RX), &mut lines);
        assert!(uart.receive(b'1'));
        assert_eq!(read(&mut uart, FR) & FR_RXFF, FR_RXFF);
        assert!(uart.irq_level(), "trigger is one character");
        assert!(!uart.receive(b'2'));
        assert_eq!(read(&mut uart, DR), u32::from(b'1'));
        assert!(!uart.irq_level());
    }

    #[test]
    fn rx_disabled_receiver_takes_nothing() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, CR, 0x101, &mut lines); // UARTEN | TXE, RXE clear
        assert!(!uart.receive(b'a'));
        assert_eq!(read(&mut uart, FR) & FR_RXFE, FR_RXFE);
        assert_eq!(read(&mut uart, RSR), 0, "not an overrun");
        write(&mut uart, CR, 0x300, &mut lines); // UARTEN clear
        assert!(!uart.receive(b'a'));
    }

    #[test]
    fn toggling_fifo_mode_empties_rx() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        write(&mut uart, LCR_H, LCR_H_FEN, &mut lines);
        write(&mut uart, IMSC, u64::from(INT_RT), &mut lines);
        uart.receive(b'a');
        assert!(uart.irq_level());
        write(&mut uart, LCR_H, 0, &mut lines);
        assert_eq!(read(&mut uart, FR) & FR_RXFE, FR_RXFE);
        assert!(!uart.irq_level());
    }

    #[test]
    fn bad_accesses_are_refused() {
        let mut uart = VPl011::new(1);
        let mut lines = Lines::default();
        assert_eq!(
            uart.read(0x08, Word),
            Err(Pl011Error::UnknownRegister { offset: 0x08 })
        );
        assert_eq!(
            uart.read(0x4C, Word),
            Err(Pl011Error::UnknownRegister { offset: 0x4C })
        );
        assert_eq!(
            uart.read(0x1000, Word),
            Err(Pl011Error::UnknownRegister { offset: 0x1000 })
        );
        assert_eq!(
            uart.read(0x19, Byte),
            Err(Pl011Error::Unaligned { offset: 0x19 })
        );
        assert_eq!(
            uart.read(0x18, AccessWidth::Doubleword),
            Err(Pl011Error::BadWidth { offset: 0x18 })
        );
        assert_eq!(
            uart.read(ICR, Word),
            Err(Pl011Error::WriteOnly { offset: ICR })
        );
        for offset in [FR, RIS, MIS] {
            assert_eq!(
                uart.write(offset, Word, 0xffff, &mut lines.sink()),
                Err(Pl011Error::ReadOnly { offset })
            );
        }
        // The refused write to RIS set nothing.
        assert_eq!(read(&mut uart, RIS), 0);
        assert!(lines.0.is_empty());
    }

    #[test]
    fn narrow_reads_are_masked() {
        let mut uart = VPl011::new(1);
        assert_eq!(uart.read(CR, Byte), Ok(0x01));
        assert_eq!(uart.read(CR, Halfword), Ok(0x301));
        assert_eq!(uart.read(0xFFC, Byte), Ok(0xB1));
    }

    proptest::proptest! {
        /// Random guest accesses and console input never panic, keep the FIFO
        /// within its depth, keep FR consistent with it, and keep the IRQ line
        /// equal to "some unmasked raw interrupt".
        #[test]
        fn random_accesses_keep_the_model_consistent(
            ops in proptest::collection::vec(
                (
                    0u8..4,
                    proptest::prop_oneof![
                        proptest::sample::select(vec![DR, RSR, FR, LCR_H, CR, IFLS, IMSC, RIS, MIS, ICR]),
                        0u64..0x1004,
                    ],
                    0u8..4,
                    proptest::num::u64::ANY,
                ),
                0..300,
            )
        ) {
            let mut uart = VPl011::new(9);
            let mut lines = Lines::default();
            for (kind, offset, width, value) in ops {
                let width = [Byte, Halfword, Word, AccessWidth::Doubleword][usize::from(width)];
                match kind {
                    0 => { let _ = uart.read(offset & !3, width); }
                    1 => { let _ = uart.write(offset & !3, width, value, &mut lines.sink()); }
                    2 => { uart.receive(value as u8); }
                    _ => { let _ = uart.read(offset, width); }
                }
                proptest::prop_assert!(uart.rx.len <= uart.rx_depth());
                let flags = uart.flags();
                proptest::prop_assert_eq!(flags & FR_RXFE != 0, uart.rx.len == 0);
                proptest::prop_assert_eq!(flags & FR_RXFF != 0, uart.rx.len == uart.rx_depth());
                proptest::prop_assert_eq!(uart.rx_space(), uart.rx_depth() - uart.rx.len);
                let mis = uart.read(MIS, Word).unwrap();
                let ris = uart.read(RIS, Word).unwrap();
                let imsc = uart.read(IMSC, Word).unwrap();
                proptest::prop_assert_eq!(mis, ris & imsc);
                proptest::prop_assert_eq!(uart.irq_level(), mis != 0);
            }
            for line in &lines.0 {
                proptest::prop_assert!(line.starts_with("[dom9] ") && line.ends_with('\n'));
            }
        }
    }

    #[test]
    fn emulate_trapped_accesses_through_the_register_file() {
        use crate::arm::trap::{Exit, decode};
        let access = |esr: u64, offset: u64| match decode(esr, offset, 0x9000 << 4) {
            Exit::DataAbort(access) => access,
            other => panic!("{other:?}"),
        };
        let mut uart = VPl011::new(2);
        let mut lines = Lines::default();
        let mut x = [0u64; 31];
        // STRB w1, [x0] at DR (ESR: ISV | SAS byte | SRT 1 | WnR | DFSC 0x07).
        for &b in b"ok\n" {
            x[1] = 0xabcd_ff00 | u64::from(b);
            uart.emulate(DR, &access(0x9301_0047, DR), &mut x, &mut lines.sink())
                .unwrap();
        }
        assert_eq!(lines.0, ["[dom2] ok\n"]);
        // LDR w3, [x0, #0x18] reads FR into x3 (ISV | SAS word | SRT 3).
        x[3] = u64::MAX;
        uart.emulate(FR, &access(0x9383_0007, FR), &mut x, &mut lines.sink())
            .unwrap();
        assert_eq!(x[3], u64::from(FR_TXFE | FR_RXFE));
        // LDRH w4 of a reserved offset: refused, reads as zero.
        x[4] = 7;
        assert_eq!(
            uart.emulate(0x08, &access(0x9344_0007, 0x08), &mut x, &mut lines.sink()),
            Err(Pl011Error::UnknownRegister { offset: 0x08 })
        );
        assert_eq!(x[4], 0);
        // STR wzr to IMSC clears it.
        uart.write(IMSC, Word, 0x7ff, &mut lines.sink()).unwrap();
        uart.emulate(IMSC, &access(0x939f_0047, IMSC), &mut x, &mut lines.sink())
            .unwrap();
        assert_eq!(read(&mut uart, IMSC), 0);
    }
}
