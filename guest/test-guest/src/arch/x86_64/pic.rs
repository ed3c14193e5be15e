//! The 8259A interrupt controllers (master at 0x20/0x21, slave at
//! 0xA0/0xA1) as `guest_abi::x86` describes the hypervisor's emulation: the
//! master's INTR reaches vCPU 0 in virtual wire mode, so its vectors end
//! with a PIC EOI and no local-APIC EOI. Only COM1's IRQ 4 is ever
//! unmasked (the `echo` workload). Command words per the Intel 8259A data
//! sheet (ICW1-4, OCW1-3).

use core::arch::asm;

/// The master's command port (ICW1, OCW2, OCW3).
const MASTER_COMMAND: u16 = 0x20;
/// The master's data port (ICW2-4, then OCW1 = the IMR).
const MASTER_DATA: u16 = 0x21;
/// The slave's command port.
const SLAVE_COMMAND: u16 = 0xA0;
/// The slave's data port.
const SLAVE_DATA: u16 = 0xA1;

/// ICW1: bit 4 starts initialisation, bit 0 says an ICW4 follows (edge
/// triggered, cascaded: ICW3 follows too).
const ICW1_INIT_WITH_ICW4: u8 = 0x11;
/// ICW3 of the master: a slave on IRQ 2.
const ICW3_MASTER_SLAVE_ON_IRQ2: u8 = 1 << 2;
/// ICW3 of the slave: its cascade identity, 2.
const ICW3_SLAVE_IDENTITY: u8 = 2;
/// ICW4: 8086/8088 mode, normal (not automatic) EOI.
const ICW4_8086: u8 = 0x01;
/// OCW2: non-specific EOI.
const OCW2_NON_SPECIFIC_EOI: u8 = 0x20;
/// OCW3: the next read of the command port returns the ISR.
const OCW3_READ_ISR: u8 = 0x0B;
/// Every IRQ masked.
const ALL_MASKED: u8 = 0xFF;

/// The master's vector base (contract: 0x20-0x27; COM1's IRQ 4 is 0x24).
pub const MASTER_VECTOR_BASE: u8 = 0x20;
/// The slave's vector base (it stays masked; no gates are installed).
const SLAVE_VECTOR_BASE: u8 = 0x28;
/// COM1's ISA IRQ.
pub const COM1_IRQ: u8 = 4;

fn outb(port: u16, value: u8) {
    // SAFETY: the 8259A ports, which the hypervisor emulates (or, without
    // one, ignores); writing them changes only interrupt routing.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack)) };
}

fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: reading the 8259A's IMR or the register OCW3 selected has no
    // side effects.
    unsafe { asm!("in al, dx", in("dx") port, out("al") value, options(nomem, nostack)) };
    value
}

/// The IRQ of master vector `vector`, if it is one.
pub fn irq_of(vector: u8) -> Option<u8> {
    vector
        .checked_sub(MASTER_VECTOR_BASE)
        .filter(|&irq| irq < 8)
}

/// Initialises both controllers (master vectors from
/// [`MASTER_VECTOR_BASE`], the slave masked) and unmasks master IRQ `irq`
/// alone. Err with the IMR read back if it does not hold what was written
/// (no 8259A there).
pub fn init_with_only(irq: u8) -> Result<(), u8> {
    outb(MASTER_COMMAND, ICW1_INIT_WITH_ICW4);
    outb(MASTER_DATA, MASTER_VECTOR_BASE);
    outb(MASTER_DATA, ICW3_MASTER_SLAVE_ON_IRQ2);
    outb(MASTER_DATA, ICW4_8086);
    outb(SLAVE_COMMAND, ICW1_INIT_WITH_ICW4);
    outb(SLAVE_DATA, SLAVE_VECTOR_BASE);
    outb(SLAVE_DATA, ICW3_SLAVE_IDENTITY);
    outb(SLAVE_DATA, ICW4_8086);
    outb(SLAVE_DATA, ALL_MASKED);
    let imr = ALL_MASKED & !(1 << irq);
    outb(MASTER_DATA, imr);
    match inb(MASTER_DATA) {
        read if read == imr => Ok(()),
        read => Err(read),
    }
}

/// Whether master IRQ `irq` is in service (OCW3: read the ISR).
pub fn in_service(irq: u8) -> bool {
    outb(MASTER_COMMAND, OCW3_READ_ISR);
    inb(MASTER_COMMAND) & 1 << irq != 0
}

/// Ends the master's interrupt in service (non-specific EOI).
pub fn eoi() {
    outb(MASTER_COMMAND, OCW2_NON_SPECIFIC_EOI);
}
