//! A 16550 UART driven through I/O ports (COM1 on PCs). Registers are typed
//! port wrappers; line status and control bits are tock-registers bitfields.

use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;
use x86_64::instructions::port::Port;

/// COM1's I/O base.
pub const COM1: u16 = 0x3f8;

register_bitfields! [u8,
    /// Interrupt enable register.
    IER [
        /// Received data available (and, with FIFOs, character timeout).
        RX_DATA OFFSET(0) NUMBITS(1) []
    ],
    /// FIFO control register (write-only).
    FCR [
        /// FIFOs on.
        ENABLE OFFSET(0) NUMBITS(1) [],
        /// Empty the receive FIFO.
        CLEAR_RX OFFSET(1) NUMBITS(1) [],
        /// Empty the transmit FIFO.
        CLEAR_TX OFFSET(2) NUMBITS(1) [],
        /// Receive interrupt trigger level: one byte, so typed input
        /// interrupts at once rather than after the character timeout.
        RX_TRIGGER OFFSET(6) NUMBITS(2) [One = 0]
    ],
    /// Modem control register.
    MCR [
        /// Data terminal ready.
        DTR OFFSET(0) NUMBITS(1) [],
        /// Request to send.
        RTS OFFSET(1) NUMBITS(1) [],
        /// Output 2: on PCs it connects the UART's interrupt to its IRQ line.
        OUT2 OFFSET(3) NUMBITS(1) []
    ],
    /// Line status register.
    LSR [
        /// A received byte is waiting.
        DATA_READY OFFSET(0) NUMBITS(1) [],
        /// The transmit holding register can take a byte.
        THR_EMPTY OFFSET(5) NUMBITS(1) []
    ],
    /// Line control register.
    LCR [
        /// Word length: 0b11 = 8 bits.
        WORD_LENGTH OFFSET(0) NUMBITS(2) [Eight = 3],
        /// Divisor latch access: registers 0/1 become the baud divisor.
        DLAB OFFSET(7) NUMBITS(1) []
    ]
];

/// How many times the line status is polled for room before a byte is dropped
/// (a missing or wedged UART must not hang the hypervisor).
const TX_POLLS: u32 = 100_000;

/// One 16550 at an I/O base.
pub struct Uart16550 {
    data: Port<u8>,
    interrupt_enable: Port<u8>,
    fifo_control: Port<u8>,
    line_control: Port<u8>,
    modem_control: Port<u8>,
    line_status: Port<u8>,
}

impl crate::console::handoff::ConsoleUart for Uart16550 {
    fn write_byte(&mut self, byte: u8) {
        Uart16550::write_byte(self, byte);
    }
}

impl Uart16550 {
    /// The UART at `base` (registers base..base+7).
    ///
    /// # Safety
    /// `base` must be a 16550's I/O base that only this value drives (the
    /// console adds one more that only reads its receiver).
    pub const unsafe fn new(base: u16) -> Self {
        Self {
            data: Port::new(base),
            interrupt_enable: Port::new(base + 1),
            fifo_control: Port::new(base + 2),
            line_control: Port::new(base + 3),
            modem_control: Port::new(base + 4),
            line_status: Port::new(base + 5),
        }
    }

    /// 115200 baud 8N1, FIFOs on (receive trigger at one byte), interrupts
    /// off, DTR, RTS and OUT2 set.
    pub fn init(&mut self) {
        let eight = LCR::WORD_LENGTH::Eight.value;
        let fifos =
            (FCR::ENABLE::SET + FCR::CLEAR_RX::SET + FCR::CLEAR_TX::SET + FCR::RX_TRIGGER::One)
                .value;
        let modem = (MCR::DTR::SET + MCR::RTS::SET + MCR::OUT2::SET).value;
        // SAFETY: writes to this UART's own registers (the constructor's contract).
        unsafe {
            self.interrupt_enable.write(0);
            self.line_control.write(eight | LCR::DLAB::SET.value);
            // Divisor 1 = 115200 baud (DLAB set: data/IER hold the divisor).
            self.data.write(1);
            self.interrupt_enable.write(0);
            self.line_control.write(eight);
            self.fifo_control.write(fifos);
            self.modem_control.write(modem);
        }
    }

    /// Makes the UART interrupt while received data waits (IER.ERBFI; OUT2,
    /// which lets the interrupt out on a PC, is set by [`Self::init`]).
    pub fn enable_rx_interrupt(&mut self) {
        // SAFETY: this UART's interrupt enable register.
        unsafe { self.interrupt_enable.write(IER::RX_DATA::SET.value) };
    }

    fn status(&mut self) -> LocalRegisterCopy<u8, LSR::Register> {
        // SAFETY: reading the line status has no side effect.
        LocalRegisterCopy::new(unsafe { self.line_status.read() })
    }

    /// Sends one byte, waiting (bounded) for room.
    pub fn write_byte(&mut self, byte: u8) {
        for _ in 0..TX_POLLS {
            if self.status().is_set(LSR::THR_EMPTY) {
                // SAFETY: the transmit register of this UART.
                unsafe { self.data.write(byte) };
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// A received byte, if one is waiting.
    pub fn read_byte(&mut self) -> Option<u8> {
        if self.status().is_set(LSR::DATA_READY) {
            // SAFETY: the receive register of this UART.
            Some(unsafe { self.data.read() })
        } else {
            None
        }
    }
}

impl core::fmt::Write for Uart16550 {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for byte in s.bytes() {
            if byte == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(byte);
        }
        Ok(())
    }
}
