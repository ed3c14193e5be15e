//! The emulated 8259A programmable interrupt controller pair each x86
//! domain sees at the PC's ports 0x20/0x21 (master) and 0xA0/0xA1 (slave),
//! as `/work/notes/contract.md` section 4 and the Intel 8259A datasheet
//! (order 231468) describe it.
//!
//! The master's inputs are the ISA IRQs 0-7 the glue drives with
//! [`Pic8259::set_irq`] (only COM1's [`COM1_IRQ`] is wired); its INTR output
//! goes to the domain's vCPU 0, as ExtINT through LINT0 in virtual wire
//! mode: the glue offers [`Pic8259::pending`]'s vector to vCPU 0, reports
//! its delivery (the INTA cycle) with [`Pic8259::acknowledge`], and the
//! guest ends it with an EOI to the PIC only, never to its local APIC. The
//! slave takes its initialization and operation commands like the master
//! but has no inputs, so it never interrupts (nothing is cascaded through
//! the master's IRQ 2).
//!
//! Modelled: the ICW1-ICW4 sequence (ICW3 only in cascade mode, ICW4 only
//! when ICW1 asks for it), edge- or level-triggered inputs (ICW1.LTIM),
//! IMR (OCW1), every OCW2 command (non-specific and specific EOI, the
//! rotations, set priority), OCW3 (read IRR or ISR, poll, special mask
//! mode), automatic EOI (ICW4.AEOI) and special fully nested mode. Not
//! modelled: the MCS-80/85 vector format (ICW4.uPM = 0 still delivers
//! 8086 vectors, with a warning) and buffered mode, which changes nothing
//! visible. Power-on state: IMR 0xFF (all masked), and no vector is
//! delivered before a first complete ICW sequence has set a vector base.
//! Every byte a guest writes is accepted; an out-of-order sequence does what
//! the datasheet makes of it (an ICW1 restarts it), never a panic.

/// The master's command port (ICW1, OCW2, OCW3; reads IRR/ISR/poll).
pub const MASTER_COMMAND: u16 = 0x20;
/// The master's data port (ICW2-ICW4, OCW1 = IMR).
pub const MASTER_DATA: u16 = 0x21;
/// The slave's command port.
pub const SLAVE_COMMAND: u16 = 0xa0;
/// The slave's data port.
pub const SLAVE_DATA: u16 = 0xa1;
/// COM1's ISA IRQ.
pub const COM1_IRQ: u8 = 4;

/// ICW1 / OCW2 / OCW3 decoding of a byte written to a command port.
mod command {
    /// Set in ICW1 (and clear in OCW2/OCW3).
    pub const ICW1: u8 = 1 << 4;
    /// Set in OCW3, clear in OCW2.
    pub const OCW3: u8 = 1 << 3;
    /// ICW1: ICW4 follows.
    pub const ICW1_IC4: u8 = 1 << 0;
    /// ICW1: single (no cascade, no ICW3).
    pub const ICW1_SNGL: u8 = 1 << 1;
    /// ICW1: level-triggered inputs.
    pub const ICW1_LTIM: u8 = 1 << 3;
    /// ICW4: 8086/8088 mode (clear: MCS-80/85).
    pub const ICW4_UPM: u8 = 1 << 0;
    /// ICW4: automatic end of interrupt.
    pub const ICW4_AEOI: u8 = 1 << 1;
    /// ICW4: special fully nested mode.
    pub const ICW4_SFNM: u8 = 1 << 4;
    /// OCW3: poll command.
    pub const OCW3_POLL: u8 = 1 << 2;
    /// OCW3: the read-register command is valid (RR).
    pub const OCW3_RR: u8 = 1 << 1;
    /// OCW3: read ISR (with RR), else IRR.
    pub const OCW3_RIS: u8 = 1 << 0;
    /// OCW3: the special-mask bit is valid (ESMM).
    pub const OCW3_ESMM: u8 = 1 << 6;
    /// OCW3: set special mask mode (with ESMM), else reset it.
    pub const OCW3_SMM: u8 = 1 << 5;
}

/// What a guest wrote that this model does not follow exactly. The glue
/// logs it; the PIC goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PicWarning {
    /// ICW4 asked for MCS-80/85 mode (uPM = 0), or ICW1 skipped ICW4 (which
    /// means the same): vectors are still delivered in the 8086 format.
    Mcs80Mode {
        /// The slave (true) or the master.
        slave: bool,
    },
}

impl core::fmt::Display for PicWarning {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Mcs80Mode { slave } => write!(
                f,
                "8259A {}: MCS-80/85 mode is not emulated; delivering 8086 vectors",
                if *slave { "slave" } else { "master" }
            ),
        }
    }
}

/// Where the initialization sequence is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Init {
    /// Initialized (or never started): data-port writes are OCW1.
    Ready,
    /// ICW1 was written: the data port takes ICW2.
    Icw2,
    /// ICW3 next.
    Icw3,
    /// ICW4 next.
    Icw4,
}

/// One 8259A.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Chip {
    slave: bool,
    /// Interrupt request register.
    irr: u8,
    /// In-service register.
    isr: u8,
    /// Interrupt mask register.
    imr: u8,
    /// The input lines' levels (for edge detection).
    lines: u8,
    /// ICW2's vector base (bits 7:3); `None` before a first ICW2.
    vector_base: Option<u8>,
    init: Init,
    /// ICW1 asked for ICW4.
    expect_icw4: bool,
    /// ICW1.SNGL: no ICW3.
    single: bool,
    /// ICW1.LTIM.
    level_triggered: bool,
    /// ICW3 as written (master: inputs with a slave; slave: its id).
    icw3: u8,
    /// ICW4.AEOI.
    auto_eoi: bool,
    /// OCW2 "rotate in automatic EOI mode".
    rotate_on_auto_eoi: bool,
    /// ICW4.SFNM.
    special_fully_nested: bool,
    /// OCW3: reads of the command port give ISR rather than IRR.
    read_isr: bool,
    /// OCW3 poll: the next command-port read is the poll word.
    poll: bool,
    /// OCW3 special mask mode.
    special_mask: bool,
    /// The input with the highest priority (rotations move it).
    highest_priority: u8,
}

impl Chip {
    fn new(slave: bool) -> Self {
        Self {
            slave,
            irr: 0,
            isr: 0,
            imr: 0xff,
            lines: 0,
            vector_base: None,
            init: Init::Ready,
            expect_icw4: false,
            single: false,
            level_triggered: false,
            icw3: 0,
            auto_eoi: false,
            rotate_on_auto_eoi: false,
            special_fully_nested: false,
            read_isr: false,
            poll: false,
            special_mask: false,
            highest_priority: 0,
        }
    }

    /// The input of `set` that has the highest priority, if any.
    fn highest(&self, set: u8) -> Option<u8> {
        (0..8)
            .map(|rank| (self.highest_priority + rank) & 7)
            .find(|&irq| set & (1 << irq) != 0)
    }

    /// The priority rank of input `irq` (0 = highest).
    fn rank(&self, irq: u8) -> u8 {
        irq.wrapping_sub(self.highest_priority) & 7
    }

    /// The input INTR is raised for: the highest-priority unmasked request
    /// that outranks everything in service (datasheet "Interrupt Sequence";
    /// special mask mode lets masked in-service levels not block).
    fn pending(&self) -> Option<u8> {
        self.vector_base?;
        let irq = self.highest(self.irr & !self.imr)?;
        let mut in_service = self.isr;
        if self.special_mask {
            in_service &= !self.imr;
        }
        if self.special_fully_nested && !self.slave {
            // A cascade input may interrupt its own in-service level.
            in_service &= !self.icw3;
        }
        match self.highest(in_service) {
            Some(busy) if self.rank(busy) <= self.rank(irq) => None,
            _ => Some(irq),
        }
    }

    /// The INTA cycle for `irq`: its request moves to in-service (or, with
    /// automatic EOI, ends at once). Level-triggered requests stay while
    /// their line is high.
    fn acknowledge(&mut self, irq: u8) -> u8 {
        let bit = 1 << (irq & 7);
        if !self.level_triggered {
            self.irr &= !bit;
        }
        if self.auto_eoi {
            if self.rotate_on_auto_eoi {
                self.highest_priority = (irq + 1) & 7;
            }
        } else {
            self.isr |= bit;
        }
        self.vector_base.unwrap_or(0) | (irq & 7)
    }

    fn set_line(&mut self, irq: u8, level: bool) {
        let bit = 1 << (irq & 7);
        if level {
            if self.level_triggered || self.lines & bit == 0 {
                self.irr |= bit;
            }
            self.lines |= bit;
        } else {
            if self.level_triggered {
                self.irr &= !bit;
            }
            self.lines &= !bit;
        }
    }

    fn write_command(&mut self, value: u8) {
        if value & command::ICW1 != 0 {
            self.icw1(value);
        } else if value & command::OCW3 != 0 {
            self.ocw3(value);
        } else {
            self.ocw2(value);
        }
    }

    /// ICW1 (datasheet "Initialization Command Words"): the edge sense
    /// latches and the IMR are cleared, IR7 gets the lowest priority,
    /// special mask mode ends, status reads give IRR, and ICW4's functions
    /// reset if no ICW4 will follow.
    fn icw1(&mut self, value: u8) {
        self.level_triggered = value & command::ICW1_LTIM != 0;
        self.single = value & command::ICW1_SNGL != 0;
        self.expect_icw4 = value & command::ICW1_IC4 != 0;
        self.irr = if self.level_triggered { self.lines } else { 0 };
        self.isr = 0;
        self.imr = 0;
        self.highest_priority = 0;
        self.special_mask = false;
        self.read_isr = false;
        self.poll = false;
        self.auto_eoi = false;
        self.rotate_on_auto_eoi = false;
        self.special_fully_nested = false;
        self.init = Init::Icw2;
    }

    /// OCW2: the EOI and rotation commands (R, SL, EOI in bits 7:5, the
    /// level in bits 2:0).
    fn ocw2(&mut self, value: u8) {
        let level = value & 7;
        match value >> 5 {
            // Non-specific EOI, and rotate on non-specific EOI.
            0b001 | 0b101 => {
                let mut in_service = self.isr;
                if self.special_mask {
                    in_service &= !self.imr;
                }
                if let Some(irq) = self.highest(in_service) {
                    self.isr &= !(1 << irq);
                    if value >> 5 == 0b101 {
                        self.highest_priority = (irq + 1) & 7;
                    }
                }
            }
            // Specific EOI.
            0b011 => self.isr &= !(1 << level),
            // Rotate on specific EOI.
            0b111 => {
                self.isr &= !(1 << level);
                self.highest_priority = (level + 1) & 7;
            }
            // Set priority: `level` becomes the lowest.
            0b110 => self.highest_priority = (level + 1) & 7,
            0b100 => self.rotate_on_auto_eoi = true,
            0b000 => self.rotate_on_auto_eoi = false,
            // 0b010: no operation.
            _ => {}
        }
    }

    fn ocw3(&mut self, value: u8) {
        if value & command::OCW3_ESMM != 0 {
            self.special_mask = value & command::OCW3_SMM != 0;
        }
        if value & command::OCW3_RR != 0 {
            self.read_isr = value & command::OCW3_RIS != 0;
        }
        self.poll = value & command::OCW3_POLL != 0;
    }

    fn write_data(&mut self, value: u8) -> Option<PicWarning> {
        match self.init {
            Init::Ready => self.imr = value,
            Init::Icw2 => {
                self.vector_base = Some(value & 0xf8);
                return self.after(if self.single { Init::Icw4 } else { Init::Icw3 });
            }
            Init::Icw3 => {
                self.icw3 = value;
                return self.after(Init::Icw4);
            }
            Init::Icw4 => {
                self.auto_eoi = value & command::ICW4_AEOI != 0;
                self.special_fully_nested = value & command::ICW4_SFNM != 0;
                self.init = Init::Ready;
                if value & command::ICW4_UPM == 0 {
                    return Some(PicWarning::Mcs80Mode { slave: self.slave });
                }
            }
        }
        None
    }

    /// Moves on to `next`, skipping ICW4 when ICW1 did not ask for it (then
    /// the chip is in MCS-80/85 mode, which this model does not emulate).
    fn after(&mut self, next: Init) -> Option<PicWarning> {
        if next == Init::Icw4 && !self.expect_icw4 {
            self.init = Init::Ready;
            return Some(PicWarning::Mcs80Mode { slave: self.slave });
        }
        self.init = next;
        None
    }

    fn read_command(&mut self) -> u8 {
        if core::mem::take(&mut self.poll) {
            // The poll word: bit 7 set and the level, acknowledging it, or
            // 0 when nothing is requested.
            return match self.pending() {
                Some(irq) => {
                    self.acknowledge(irq);
                    0x80 | irq
                }
                None => 0,
            };
        }
        if self.read_isr { self.isr } else { self.irr }
    }
}

/// A request the master raises INTR for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PicInterrupt {
    /// The master input (ISA IRQ 0-7).
    pub irq: u8,
    /// The vector its INTA cycle gives (ICW2 base + input).
    pub vector: u8,
}

/// One domain's 8259A pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pic8259 {
    master: Chip,
    slave: Chip,
}

impl Default for Pic8259 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pic8259 {
    /// Both chips as after power-on: everything masked, no vector base.
    pub fn new() -> Self {
        Self {
            master: Chip::new(false),
            slave: Chip::new(true),
        }
    }

    /// Whether `port` is one of the pair's four.
    pub fn claims(port: u16) -> bool {
        matches!(
            port,
            MASTER_COMMAND | MASTER_DATA | SLAVE_COMMAND | SLAVE_DATA
        )
    }

    /// An IN of one byte from `port` (one of [`Self::claims`]'): IRR, ISR
    /// or the poll word from a command port, the IMR from a data port.
    pub fn read(&mut self, port: u16) -> u8 {
        match port {
            MASTER_COMMAND => self.master.read_command(),
            MASTER_DATA => self.master.imr,
            SLAVE_COMMAND => self.slave.read_command(),
            SLAVE_DATA => self.slave.imr,
            _ => 0xff,
        }
    }

    /// An OUT of one byte to `port`.
    pub fn write(&mut self, port: u16, value: u8) -> Option<PicWarning> {
        match port {
            MASTER_COMMAND => self.master.write_command(value),
            MASTER_DATA => return self.master.write_data(value),
            SLAVE_COMMAND => self.slave.write_command(value),
            SLAVE_DATA => return self.slave.write_data(value),
            _ => {}
        }
        None
    }

    /// Drives master input `irq` (ISA IRQ 0-7; anything else is ignored:
    /// nothing is wired to the slave).
    pub fn set_irq(&mut self, irq: u8, level: bool) {
        if irq < 8 {
            self.master.set_line(irq, level);
        }
    }

    /// The request INTR is raised for, if any.
    pub fn pending(&self) -> Option<PicInterrupt> {
        let irq = self.master.pending()?;
        Some(PicInterrupt {
            irq,
            vector: self.master.vector_base.unwrap_or(0) | irq,
        })
    }

    /// Whether INTR is raised.
    pub fn intr(&self) -> bool {
        self.pending().is_some()
    }

    /// vCPU 0 took the vector [`Self::pending`] offered for `irq` (the INTA
    /// cycle): the request goes in service. Returns the vector.
    pub fn acknowledge(&mut self, irq: u8) -> u8 {
        self.master.acknowledge(irq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::uart16550::{self, Uart16550};
    use alloc::vec::Vec;

    /// What the x86 test guest (and Linux, with base 0x30) does: ICW1 edge,
    /// cascade, ICW4; ICW2 base; ICW3; ICW4 8086 mode.
    fn program(pic: &mut Pic8259, master_base: u8, slave_base: u8, icw4: u8) {
        assert_eq!(pic.write(MASTER_COMMAND, 0x11), None);
        assert_eq!(pic.write(SLAVE_COMMAND, 0x11), None);
        assert_eq!(pic.write(MASTER_DATA, master_base), None);
        assert_eq!(pic.write(SLAVE_DATA, slave_base), None);
        assert_eq!(pic.write(MASTER_DATA, 1 << 2), None);
        assert_eq!(pic.write(SLAVE_DATA, 2), None);
        assert_eq!(pic.write(MASTER_DATA, icw4), None);
        assert_eq!(pic.write(SLAVE_DATA, icw4), None);
    }

    const READ_IRR: u8 = 0x0a;
    const READ_ISR: u8 = 0x0b;
    const EOI: u8 = 0x20;

    #[test]
    fn power_on_masks_everything_and_delivers_nothing() {
        let mut pic = Pic8259::new();
        assert_eq!(pic.read(MASTER_DATA), 0xff);
        assert_eq!(pic.read(SLAVE_DATA), 0xff);
        pic.set_irq(COM1_IRQ, true);
        assert_eq!(pic.pending(), None);
        // Unmasking without an ICW sequence: still no vector base, no INTR.
        pic.write(MASTER_DATA, 0);
        assert_eq!(pic.read(MASTER_COMMAND), 1 << COM1_IRQ, "IRR latched");
        assert!(!pic.intr());
    }

    #[test]
    fn com1_interrupt_cycle_with_non_specific_eoi() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        // ICW1 cleared the IMR; the guest masks all but IRQ 4.
        assert_eq!(pic.read(MASTER_DATA), 0);
        pic.write(MASTER_DATA, !(1 << COM1_IRQ));
        assert_eq!(pic.read(MASTER_DATA), 0xef);
        pic.set_irq(3, true);
        assert_eq!(pic.pending(), None, "IRQ 3 masked");
        pic.set_irq(COM1_IRQ, true);
        assert_eq!(
            pic.pending(),
            Some(PicInterrupt {
                irq: 4,
                vector: 0x24
            })
        );
        assert_eq!(pic.acknowledge(4), 0x24);
        // In service: IRR cleared (edge), ISR set, INTR low until the EOI.
        pic.write(MASTER_COMMAND, READ_ISR);
        assert_eq!(pic.read(MASTER_COMMAND), 1 << 4);
        pic.write(MASTER_COMMAND, READ_IRR);
        assert_eq!(pic.read(MASTER_COMMAND), 1 << 3, "only the masked IRQ 3");
        assert!(!pic.intr());
        // The line stays high: no new edge, nothing more after the EOI.
        pic.write(MASTER_COMMAND, EOI);
        pic.write(MASTER_COMMAND, READ_ISR);
        assert_eq!(pic.read(MASTER_COMMAND), 0);
        assert!(!pic.intr());
        // A new edge (the guest drained the UART, then a byte came).
        pic.set_irq(COM1_IRQ, false);
        pic.set_irq(COM1_IRQ, true);
        assert_eq!(pic.pending().map(|p| p.vector), Some(0x24));
    }

    #[test]
    fn an_edge_while_in_service_waits_for_the_eoi() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        pic.set_irq(4, true);
        pic.acknowledge(4);
        pic.set_irq(4, false);
        pic.set_irq(4, true);
        assert!(!pic.intr(), "same level in service");
        pic.write(MASTER_COMMAND, EOI);
        assert_eq!(pic.pending().map(|p| p.irq), Some(4));
    }

    #[test]
    fn priorities_nesting_and_specific_eoi() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x08, 0x70, 0x01);
        pic.set_irq(4, true);
        pic.set_irq(6, true);
        assert_eq!(pic.pending().map(|p| p.irq), Some(4), "lower input first");
        pic.acknowledge(4);
        assert!(!pic.intr(), "6 is below 4 in service");
        pic.set_irq(1, true);
        assert_eq!(pic.pending().map(|p| (p.irq, p.vector)), Some((1, 0x09)));
        pic.acknowledge(1);
        // Non-specific EOI ends the highest in service (1), then 4.
        pic.write(MASTER_COMMAND, EOI);
        pic.write(MASTER_COMMAND, READ_ISR);
        assert_eq!(pic.read(MASTER_COMMAND), 1 << 4);
        // Specific EOI of 4 (0x60 | 4).
        pic.write(MASTER_COMMAND, 0x64);
        assert_eq!(pic.read(MASTER_COMMAND), 0);
        assert_eq!(pic.pending().map(|p| p.irq), Some(6));
    }

    #[test]
    fn rotation_and_set_priority() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        // Set priority: IRQ 4 lowest, so 5 is highest.
        pic.write(MASTER_COMMAND, 0xc4);
        pic.set_irq(4, true);
        pic.set_irq(5, true);
        assert_eq!(pic.pending().map(|p| p.irq), Some(5));
        pic.acknowledge(5);
        // Rotate on non-specific EOI: 5 ends and becomes lowest, so 6 is
        // highest and 4 (still requested) comes next.
        pic.write(MASTER_COMMAND, 0xa0);
        assert_eq!(pic.pending().map(|p| p.irq), Some(4));
        pic.acknowledge(4);
        // Rotate on specific EOI of 4.
        pic.write(MASTER_COMMAND, 0xe4);
        pic.write(MASTER_COMMAND, READ_ISR);
        assert_eq!(pic.read(MASTER_COMMAND), 0);
        pic.set_irq(5, false);
        pic.set_irq(5, true);
        pic.set_irq(0, true);
        assert_eq!(pic.pending().map(|p| p.irq), Some(5), "4 lowest: 5 first");
    }

    #[test]
    fn automatic_eoi_and_its_rotation() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x03); // 8086 | AEOI
        pic.set_irq(4, true);
        assert_eq!(pic.acknowledge(4), 0x24);
        pic.write(MASTER_COMMAND, READ_ISR);
        assert_eq!(pic.read(MASTER_COMMAND), 0, "ended at INTA");
        pic.write(MASTER_COMMAND, 0x80); // rotate in AEOI mode
        pic.set_irq(2, true);
        pic.acknowledge(2);
        pic.set_irq(1, true);
        pic.set_irq(3, true);
        assert_eq!(pic.pending().map(|p| p.irq), Some(3), "2 became lowest");
        pic.write(MASTER_COMMAND, 0x00); // stop rotating
        pic.acknowledge(3);
        assert_eq!(pic.pending().map(|p| p.irq), Some(1));
    }

    #[test]
    fn level_triggered_requests_follow_the_line() {
        let mut pic = Pic8259::new();
        pic.write(MASTER_COMMAND, 0x19); // LTIM | IC4
        pic.write(MASTER_DATA, 0x20);
        pic.write(MASTER_DATA, 0x04);
        pic.write(MASTER_DATA, 0x01);
        pic.set_irq(4, true);
        pic.acknowledge(4);
        pic.write(MASTER_COMMAND, READ_IRR);
        assert_eq!(pic.read(MASTER_COMMAND), 1 << 4, "IRR stays while high");
        pic.write(MASTER_COMMAND, EOI);
        assert!(pic.intr(), "still high after the EOI: again");
        pic.set_irq(4, false);
        assert!(!pic.intr());
        assert_eq!(pic.read(MASTER_COMMAND), 0);
    }

    #[test]
    fn poll_command_acknowledges() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        pic.write(MASTER_COMMAND, 0x0c); // OCW3 poll
        assert_eq!(pic.read(MASTER_COMMAND), 0, "nothing requested");
        pic.set_irq(4, true);
        pic.write(MASTER_COMMAND, 0x0c);
        assert_eq!(pic.read(MASTER_COMMAND), 0x84);
        // The poll was the acknowledge: in service, no more INTR.
        assert!(!pic.intr());
        assert_eq!(pic.read(MASTER_COMMAND), 0, "back to IRR reads");
    }

    #[test]
    fn special_mask_mode_lets_lower_levels_in() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        pic.set_irq(1, true);
        pic.acknowledge(1);
        pic.set_irq(4, true);
        assert!(!pic.intr());
        // Mask the in-service 1 and enter special mask mode (OCW3 0x68).
        pic.write(MASTER_DATA, 1 << 1);
        pic.write(MASTER_COMMAND, 0x68);
        assert_eq!(pic.pending().map(|p| p.irq), Some(4));
        pic.write(MASTER_COMMAND, 0x48); // reset special mask
        assert!(!pic.intr());
    }

    #[test]
    fn the_slave_is_programmable_but_silent() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        pic.write(SLAVE_DATA, 0x00);
        assert_eq!(pic.read(SLAVE_DATA), 0);
        pic.write(SLAVE_COMMAND, READ_ISR);
        assert_eq!(pic.read(SLAVE_COMMAND), 0);
        pic.set_irq(12, true);
        pic.write(MASTER_DATA, 0);
        assert!(!pic.intr(), "nothing reaches the cascade input");
    }

    #[test]
    fn mcs80_mode_and_odd_sequences_are_survived() {
        let mut pic = Pic8259::new();
        // ICW1 without IC4, single: ICW2 ends the sequence, MCS-80 mode.
        pic.write(MASTER_COMMAND, 0x12);
        assert_eq!(
            pic.write(MASTER_DATA, 0x20),
            Some(PicWarning::Mcs80Mode { slave: false })
        );
        assert_eq!(pic.write(MASTER_DATA, 0xef), None, "OCW1 now");
        assert_eq!(pic.read(MASTER_DATA), 0xef);
        // ICW4 with uPM clear.
        pic.write(SLAVE_COMMAND, 0x11);
        pic.write(SLAVE_DATA, 0x28);
        pic.write(SLAVE_DATA, 0x02);
        assert_eq!(
            pic.write(SLAVE_DATA, 0x00),
            Some(PicWarning::Mcs80Mode { slave: true })
        );
        // An ICW1 in the middle of a sequence restarts it.
        pic.write(MASTER_COMMAND, 0x11);
        pic.write(MASTER_COMMAND, 0x11);
        pic.write(MASTER_DATA, 0x40);
        pic.write(MASTER_DATA, 0x04);
        pic.write(MASTER_DATA, 0x01);
        pic.write(MASTER_DATA, 0x00);
        pic.set_irq(4, true);
        assert_eq!(pic.pending().map(|p| p.vector), Some(0x44));
        // An EOI with nothing in service and a no-op OCW2 change nothing.
        pic.acknowledge(4);
        pic.write(MASTER_COMMAND, 0x20);
        pic.write(MASTER_COMMAND, 0x20);
        pic.write(MASTER_COMMAND, 0x40);
        assert_eq!(pic.read(MASTER_COMMAND), 0);
        assert!(Pic8259::claims(0x20) && Pic8259::claims(0xa1));
        assert!(!Pic8259::claims(0x22) && !Pic8259::claims(0x4d0));
        assert_eq!(pic.read(0x22), 0xff);
    }

    #[test]
    fn icw1_clears_edge_latches_but_keeps_lines() {
        let mut pic = Pic8259::new();
        program(&mut pic, 0x20, 0x28, 0x01);
        pic.set_irq(4, true);
        program(&mut pic, 0x20, 0x28, 0x01);
        assert!(!pic.intr(), "the latched edge was cleared");
        pic.set_irq(4, true);
        assert!(!pic.intr(), "still high: no new edge");
        pic.set_irq(4, false);
        pic.set_irq(4, true);
        assert!(pic.intr());
    }

    /// The 16550 of COM1 wired to IRQ 4, as the x86 glue wires them.
    #[test]
    fn com1_receive_reaches_vector_0x24() {
        let mut pic = Pic8259::new();
        let mut uart = Uart16550::new(1);
        let mut sink = |_: &[u8]| {};
        program(&mut pic, 0x20, 0x28, 0x01);
        pic.write(MASTER_DATA, !(1 << COM1_IRQ));
        uart.write(uart16550::BASE + 1, 0x01, &mut sink); // IER.ERBFI
        uart.write(uart16550::BASE + 4, 0x08, &mut sink); // MCR.OUT2
        pic.set_irq(COM1_IRQ, uart.irq_level());
        assert!(!pic.intr());
        // The guest leaves the FIFOs off: one byte waits on the wire.
        for &b in b"hi" {
            assert!(uart.receive(b));
        }
        pic.set_irq(COM1_IRQ, uart.irq_level());
        let request = pic.pending().unwrap();
        assert_eq!(request.vector, 0x24);
        pic.acknowledge(request.irq);
        let mut got = Vec::new();
        while uart.read(uart16550::BASE + 5) & 1 != 0 {
            got.push(uart.read(uart16550::BASE));
            pic.set_irq(COM1_IRQ, uart.irq_level());
        }
        assert_eq!(got, b"hi");
        pic.write(MASTER_COMMAND, EOI);
        assert!(!pic.intr());
    }

    proptest::proptest! {
        /// Any sequence of port writes, reads, line changes and INTA cycles
        /// never panics, and INTR only ever names an unmasked request with
        /// the programmed vector base.
        #[test]
        fn random_guests_never_break_it(
            ops in proptest::collection::vec((0u8..5, 0u8..4, proptest::num::u8::ANY), 0..400)
        ) {
            let ports = [MASTER_COMMAND, MASTER_DATA, SLAVE_COMMAND, SLAVE_DATA];
            let mut pic = Pic8259::new();
            for (kind, port, value) in ops {
                let port = ports[usize::from(port)];
                match kind {
                    0 => { pic.write(port, value); }
                    1 => { pic.read(port); }
                    2 => pic.set_irq(value & 0xf, value & 0x10 != 0),
                    3 => {
                        if let Some(request) = pic.pending() {
                            proptest::prop_assert_eq!(pic.acknowledge(request.irq), request.vector);
                        }
                    }
                    _ => { pic.write(MASTER_COMMAND, EOI); }
                }
                if let Some(request) = pic.pending() {
                    proptest::prop_assert!(request.irq < 8);
                    proptest::prop_assert_eq!(pic.master.imr & (1 << request.irq), 0);
                    proptest::prop_assert_eq!(pic.master.irr & (1 << request.irq), 1 << request.irq);
                    proptest::prop_assert_eq!(
                        request.vector,
                        pic.master.vector_base.unwrap() | request.irq
                    );
                }
            }
        }
    }
}
