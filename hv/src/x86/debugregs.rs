//! A guest's debug registers, emulated: every `MOV` to or from DR0-DR7 is
//! intercepted and served from this per-vCPU copy, and the hardware runs
//! every guest with DR7 = 0x400 (no breakpoint armed). DR0-DR3 are not in
//! the VMCB, so without the intercept one domain would read another's (or
//! the host's) breakpoint addresses, and arm breakpoints on them; hardware
//! breakpoints are therefore not offered to guests yet (a guest reading
//! back what it wrote, and single-stepping with RFLAGS.TF, still work).
//! The rules are the SDM's (vol. 3, 18.2): DR4/DR5 alias DR6/DR7 unless
//! CR4.DE, which makes them #UD; only CPL 0 may access them; the upper half
//! of DR6 and DR7 must be zero (#GP); DR8-DR15 do not exist (#UD).

/// DR6 after reset: every reserved bit that reads as one.
pub const DR6_RESET: u64 = 0xffff_0ff0;
/// DR7 after reset: bit 10 reads as one, no breakpoint enabled.
pub const DR7_RESET: u64 = 0x400;
/// DR6.BS: the `#DB` was a single-step trap.
pub const DR6_BS: u64 = 1 << 14;
/// The DR6 status bits a `#DB` sets (B0-B3, BD, BS, BT): what an intercepted
/// `#DB` carries over into the guest's copy.
pub const DR6_STATUS: u64 = 0xf | (1 << 13) | (1 << 14) | (1 << 15);

/// What the guest gets instead of the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugFault {
    /// Invalid opcode (DR4/DR5 with CR4.DE, DR8 and up).
    Ud,
    /// General protection (CPL above 0, a set upper half of DR6/DR7).
    Gp,
}

/// One vCPU's debug registers as the guest sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugRegisters {
    /// DR0-DR3: breakpoint addresses.
    pub address: [u64; 4],
    /// DR6: status.
    pub dr6: u64,
    /// DR7: control.
    pub dr7: u64,
}

impl Default for DebugRegisters {
    fn default() -> Self {
        Self::RESET
    }
}

impl DebugRegisters {
    /// The state after reset.
    pub const RESET: Self = Self {
        address: [0; 4],
        dr6: DR6_RESET,
        dr7: DR7_RESET,
    };

    /// Which register `dr` names, after the DR4/DR5 aliases; `None` if the
    /// access raises #UD.
    fn resolve(dr: u8, cr4_de: bool) -> Option<u8> {
        match dr {
            0..=3 | 6 | 7 => Some(dr),
            4 | 5 if !cr4_de => Some(dr + 2),
            _ => None,
        }
    }

    /// `MOV reg, DRdr` at privilege `cpl`.
    pub fn read(&self, dr: u8, cpl: u8, cr4_de: bool) -> Result<u64, DebugFault> {
        let dr = Self::resolve(dr, cr4_de).ok_or(DebugFault::Ud)?;
        if cpl != 0 {
            return Err(DebugFault::Gp);
        }
        Ok(match dr {
            6 => self.dr6,
            7 => self.dr7,
            n => self.address[usize::from(n & 3)],
        })
    }

    /// `MOV DRdr, value` at privilege `cpl`.
    pub fn write(&mut self, dr: u8, value: u64, cpl: u8, cr4_de: bool) -> Result<(), DebugFault> {
        let dr = Self::resolve(dr, cr4_de).ok_or(DebugFault::Ud)?;
        if cpl != 0 {
            return Err(DebugFault::Gp);
        }
        match dr {
            6 | 7 if value >> 32 != 0 => return Err(DebugFault::Gp),
            6 => self.dr6 = value | DR6_RESET,
            7 => self.dr7 = value | DR7_RESET,
            n => self.address[usize::from(n & 3)] = value,
        }
        Ok(())
    }

    /// An intercepted `#DB` left `hardware_dr6` in the VMCB: its status bits
    /// go into the guest's DR6 (they are sticky there, as in hardware).
    pub fn note_debug_exception(&mut self, hardware_dr6: u64) {
        self.dr6 |= hardware_dr6 & DR6_STATUS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_aliases_follow_cr4_de() {
        let mut d = DebugRegisters::RESET;
        d.write(0, 0xffff_8000_1234_5678, 0, false).unwrap();
        d.write(3, 0x1000, 0, false).unwrap();
        assert_eq!(d.read(0, 0, false), Ok(0xffff_8000_1234_5678));
        assert_eq!(d.read(3, 0, true), Ok(0x1000));
        d.write(7, 0x1, 0, false).unwrap();
        assert_eq!(d.read(7, 0, false), Ok(0x401));
        assert_eq!(d.read(5, 0, false), Ok(0x401), "DR5 aliases DR7");
        assert_eq!(d.read(4, 0, false), Ok(DR6_RESET), "DR4 aliases DR6");
        assert_eq!(d.read(4, 0, true), Err(DebugFault::Ud));
        assert_eq!(d.write(5, 0, 0, true), Err(DebugFault::Ud));
        assert_eq!(d.read(8, 0, false), Err(DebugFault::Ud));
    }

    #[test]
    fn user_mode_and_upper_halves_fault_without_a_change() {
        let mut d = DebugRegisters::RESET;
        assert_eq!(d.read(0, 3, false), Err(DebugFault::Gp));
        assert_eq!(d.write(1, 5, 3, false), Err(DebugFault::Gp));
        assert_eq!(d.write(7, 1 << 32, 0, false), Err(DebugFault::Gp));
        assert_eq!(d.write(6, 1 << 40, 0, false), Err(DebugFault::Gp));
        assert_eq!(d, DebugRegisters::RESET);
    }

    #[test]
    fn a_debug_exception_sets_only_status_bits() {
        let mut d = DebugRegisters::RESET;
        // Single step (BS) as the VMCB leaves it, plus junk in reserved bits.
        d.note_debug_exception(DR6_RESET | (1 << 14) | (1 << 40));
        assert_eq!(d.dr6, DR6_RESET | (1 << 14));
        // Sticky until the guest clears them.
        d.note_debug_exception(DR6_RESET | 0b1);
        assert_eq!(d.dr6, DR6_RESET | (1 << 14) | 0b1);
        d.write(6, 0, 0, false).unwrap();
        assert_eq!(d.dr6, DR6_RESET);
    }
}
