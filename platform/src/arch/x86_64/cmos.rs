//! The PC's CMOS registers (the MC146818 clock and its RAM) at I/O ports
//! 0x70 (index) and 0x71 (data). Only the boot CPU reads them, once, for the
//! wall-clock time (`hv::x86::cmos_rtc::read_host_clock` decides what the
//! bytes mean).

use x86_64::instructions::port::Port;

/// The index port (bit 7: the NMI mask, left clear).
const INDEX: u16 = 0x70;
/// The data port.
const DATA: u16 = 0x71;

/// Reads CMOS register `index` (0-127).
pub fn read_register(index: u8) -> u8 {
    let mut select: Port<u8> = Port::new(INDEX);
    let mut data: Port<u8> = Port::new(DATA);
    // SAFETY: ports 0x70/0x71 are the PC's CMOS; selecting a register and
    // reading it changes nothing but the selection (register C's flags,
    // never selected here, would be cleared by a read). The boot CPU alone
    // uses them, before any other CPU runs hypervisor code.
    unsafe {
        select.write(index & 0x7F);
        data.read()
    }
}
