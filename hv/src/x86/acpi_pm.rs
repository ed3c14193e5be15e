//! A Linux domain's fixed ACPI hardware and the PC's reset ports, at the
//! I/O ports its FADT names (`super::acpi_tables`): the PM1a event block
//! (status and enable, 0x600), the PM1a control block (0x604: SCI_EN, and
//! the sleep type and enable that put the machine in S5), the power
//! management timer (0x608: 24 bits at 3.579545 MHz, what Linux calibrates
//! its TSC against when the PIT is too slow to read, and a clocksource),
//! the reset register (0xCF9) and the keyboard controller's reset line
//! (0x64, command 0xFE). ACPI spec 6.4, 4.8; a PC's chipset for the rest.
//!
//! Time-driven like the PIT: the caller passes the domain clock (ns). A
//! write that turns the machine off or resets it is returned for the caller
//! to act on (stop or restart only this domain, as PSCI does on ARM).

use super::acpi_tables::{PM_TMR_PORT, PM1A_CNT_PORT, PM1A_EVT_PORT, RESET_PORT, S5_SLEEP_TYPE};

/// The PM timer's frequency, Hz.
pub const PM_TIMER_HZ: u64 = 3_579_545;
/// The keyboard controller's command port.
pub const KBC_COMMAND_PORT: u16 = 0x64;
/// The keyboard controller command that pulses the CPU reset line.
const KBC_PULSE_RESET: u8 = 0xFE;
/// PM1 control: SCI_EN (the machine is in ACPI mode).
const SCI_EN: u16 = 1 << 0;
/// PM1 control: sleep type field (bits 12:10).
const SLP_TYP_SHIFT: u16 = 10;
/// PM1 control: sleep enable (write-only).
const SLP_EN: u16 = 1 << 13;
/// The reset register's bit that asks for a reset (the FADT's RESET_VALUE
/// has it beside the system-reset bit).
const CF9_RESET_CPU: u8 = 1 << 2;

/// What a write asks of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    /// Soft off (S5): stop the domain.
    PowerOff,
    /// Reset: restart the domain from its image.
    Reset,
}

/// One domain's PM1a registers and reset ports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcpiPm {
    status: u16,
    enable: u16,
    control: u16,
}

impl AcpiPm {
    /// After reset: already in ACPI mode (there is no SMI command port to
    /// switch), nothing enabled.
    pub fn new() -> Self {
        Self {
            control: SCI_EN,
            ..Self::default()
        }
    }

    /// Whether `port` is one of its registers (each byte of them).
    pub fn claims(port: u16) -> bool {
        (PM1A_EVT_PORT..PM1A_EVT_PORT + 4).contains(&port)
            || (PM1A_CNT_PORT..PM1A_CNT_PORT + 2).contains(&port)
            || (PM_TMR_PORT..PM_TMR_PORT + 4).contains(&port)
            || port == RESET_PORT
            || port == KBC_COMMAND_PORT
    }

    /// A read of `size` bytes at `port` at domain time `now` (ns).
    pub fn read(&self, port: u16, size: u8, now: u64) -> u32 {
        let (base, value) = match port {
            p if (PM1A_EVT_PORT..PM1A_EVT_PORT + 2).contains(&p) => {
                (PM1A_EVT_PORT, u32::from(self.status))
            }
            p if (PM1A_EVT_PORT + 2..PM1A_EVT_PORT + 4).contains(&p) => {
                (PM1A_EVT_PORT + 2, u32::from(self.enable))
            }
            p if (PM1A_CNT_PORT..PM1A_CNT_PORT + 2).contains(&p) => {
                (PM1A_CNT_PORT, u32::from(self.control))
            }
            p if (PM_TMR_PORT..PM_TMR_PORT + 4).contains(&p) => (PM_TMR_PORT, timer_value(now)),
            // The reset register reads 0; the controller's status: input
            // buffer empty, nothing to read.
            _ => (port, 0),
        };
        let shifted = value >> (8 * u32::from(port - base));
        match size {
            1 => shifted & 0xff,
            2 => shifted & 0xffff,
            _ => shifted,
        }
    }

    /// A write of `value` (`size` bytes) at `port`; what it asks of the
    /// machine, if anything.
    pub fn write(&mut self, port: u16, size: u8, value: u32) -> Option<PowerAction> {
        let low16 = if size == 1 {
            value & 0xff
        } else {
            value & 0xffff
        } as u16;
        match port {
            // Status bits are write-one-to-clear.
            p if p == PM1A_EVT_PORT => self.status &= !low16,
            p if p == PM1A_EVT_PORT + 2 => self.enable = low16,
            p if p == PM1A_CNT_PORT => {
                let sleep_type = (low16 >> SLP_TYP_SHIFT) & 0b111;
                self.control = (low16 & !SLP_EN) | SCI_EN;
                if low16 & SLP_EN != 0 && sleep_type == u16::from(S5_SLEEP_TYPE) {
                    return Some(PowerAction::PowerOff);
                }
            }
            // RESET_VALUE (0x06) and 0x0E both have the bit.
            RESET_PORT if value as u8 & CF9_RESET_CPU != 0 => return Some(PowerAction::Reset),
            KBC_COMMAND_PORT if value as u8 == KBC_PULSE_RESET => {
                return Some(PowerAction::Reset);
            }
            _ => {}
        }
        None
    }
}

/// The PM timer's 24-bit count at domain time `now` (ns).
pub fn timer_value(now: u64) -> u32 {
    let ticks = u128::from(now) * u128::from(PM_TIMER_HZ) / 1_000_000_000;
    (ticks as u32) & 0x00FF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timer_counts_at_3_58_mhz_and_wraps_at_24_bits() {
        assert_eq!(timer_value(0), 0);
        assert_eq!(timer_value(1_000_000_000), (PM_TIMER_HZ & 0xFF_FFFF) as u32);
        assert_eq!(timer_value(1_000_000), 3579);
        // 2^24 ticks are 4.687 s: at 4.69 s it has wrapped once.
        assert_eq!(timer_value(4_690_000_000), 16_788_066 - (1 << 24));
        let pm = AcpiPm::new();
        assert_eq!(pm.read(PM_TMR_PORT, 4, 1_000_000), 3579);
        // A byte read of the second byte.
        assert_eq!(pm.read(PM_TMR_PORT + 1, 1, 1_000_000), 3579 >> 8);
    }

    /// Linux's acpi_enter_sleep_state(S5) writes SLP_TYP then SLP_EN.
    #[test]
    fn s5_powers_off_and_reset_ports_reset() {
        let mut pm = AcpiPm::new();
        assert_eq!(pm.read(PM1A_CNT_PORT, 2, 0) as u16 & SCI_EN, SCI_EN);
        let typ = u32::from(S5_SLEEP_TYPE) << 10;
        assert_eq!(pm.write(PM1A_CNT_PORT, 2, typ), None);
        assert_eq!(
            pm.write(PM1A_CNT_PORT, 2, typ | u32::from(SLP_EN)),
            Some(PowerAction::PowerOff)
        );
        // S1 (another type) is not an off.
        assert_eq!(
            pm.write(PM1A_CNT_PORT, 2, 1 << 10 | u32::from(SLP_EN)),
            None
        );
        assert_eq!(pm.write(RESET_PORT, 1, 0x06), Some(PowerAction::Reset));
        assert_eq!(pm.write(RESET_PORT, 1, 0x02), None);
        assert_eq!(
            pm.write(KBC_COMMAND_PORT, 1, 0xFE),
            Some(PowerAction::Reset)
        );
        assert_eq!(pm.write(KBC_COMMAND_PORT, 1, 0xAD), None);
        // Enable and write-one-to-clear status.
        pm.write(PM1A_EVT_PORT + 2, 2, 0x0121);
        assert_eq!(pm.read(PM1A_EVT_PORT + 2, 2, 0), 0x0121);
        assert!(AcpiPm::claims(0x60B) && !AcpiPm::claims(0x60C) && AcpiPm::claims(0xCF9));
    }
}
