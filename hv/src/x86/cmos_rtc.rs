//! The PC's CMOS real-time clock (Motorola MC146818A) each Linux domain sees
//! at ports 0x70 (index; bit 7 is the NMI mask, ignored) and 0x71 (data):
//! the time of day and date registers, status registers A-D and the 114
//! bytes of CMOS RAM. Without it a kernel that reads the wall clock at boot
//! spins on an update-in-progress bit that an empty bus reads as set.
//!
//! Time-driven: the clock reads [`EPOCH_SECONDS`] plus the time the caller
//! passes (the hypervisor's uptime: it has no wall clock to give, so a
//! guest's date is 2000-01-01 plus how long the machine has been up). Register B's data mode (BCD or
//! binary) and hour format (12 or 24) are honoured; writes to the time
//! registers are ignored (the guest cannot move its clock), an update is
//! never in progress (register A's UIP reads 0), and no interrupt is raised.

/// The index port.
pub const INDEX_PORT: u16 = 0x70;
/// The data port.
pub const DATA_PORT: u16 = 0x71;
/// The clock's time at time 0: 2000-01-01 00:00:00 UTC.
pub const EPOCH_SECONDS: u64 = 946_684_800;

/// Register numbers (MC146818A datasheet; the century byte is the PC's,
/// the one ACPI FADTs name).
mod reg {
    pub const SECONDS: u8 = 0x00;
    pub const MINUTES: u8 = 0x02;
    pub const HOURS: u8 = 0x04;
    pub const WEEKDAY: u8 = 0x06;
    pub const DAY: u8 = 0x07;
    pub const MONTH: u8 = 0x08;
    pub const YEAR: u8 = 0x09;
    pub const A: u8 = 0x0A;
    pub const B: u8 = 0x0B;
    pub const C: u8 = 0x0C;
    pub const D: u8 = 0x0D;
    pub const CENTURY: u8 = 0x32;
}
/// Register A at reset: 32.768 kHz time base, 1024 Hz rate; UIP clear.
const A_RESET: u8 = 0x26;
/// Register B: 24-hour mode.
const B_24H: u8 = 1 << 1;
/// Register B: binary (not BCD) data.
const B_BINARY: u8 = 1 << 2;
/// Register B: the SET bit (updates stopped while the OS writes).
const B_SET: u8 = 1 << 7;
/// Register D: the battery is good (valid RAM and time).
const D_VALID: u8 = 1 << 7;
/// The hours register's PM flag in 12-hour mode.
const HOURS_PM: u8 = 1 << 7;
/// Registers past the clock: CMOS RAM.
const REGISTERS: usize = 128;

/// One domain's CMOS clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmosRtc {
    index: u8,
    ram: [u8; REGISTERS],
}

impl Default for CmosRtc {
    fn default() -> Self {
        Self::new()
    }
}

impl CmosRtc {
    /// At power-on: BCD, 24-hour mode, the battery good.
    pub fn new() -> Self {
        let mut ram = [0; REGISTERS];
        ram[usize::from(reg::A)] = A_RESET;
        ram[usize::from(reg::B)] = B_24H;
        ram[usize::from(reg::D)] = D_VALID;
        Self { index: 0, ram }
    }

    /// Whether `port` is the clock's.
    pub fn claims(port: u16) -> bool {
        port == INDEX_PORT || port == DATA_PORT
    }

    /// A byte read at `port` at time `now` (ns).
    pub fn read(&mut self, port: u16, now: u64) -> u8 {
        if port != DATA_PORT {
            // The index register is write-only on a PC; it floats high.
            return 0xFF;
        }
        let b = self.ram[usize::from(reg::B)];
        let time = DateTime::at(EPOCH_SECONDS + now / 1_000_000_000);
        let encode = |value: u8| if b & B_BINARY != 0 { value } else { bcd(value) };
        match self.index {
            reg::SECONDS => encode(time.second),
            reg::MINUTES => encode(time.minute),
            reg::HOURS if b & B_24H != 0 => encode(time.hour),
            reg::HOURS => {
                let pm = if time.hour >= 12 { HOURS_PM } else { 0 };
                let twelve = match time.hour % 12 {
                    0 => 12,
                    h => h,
                };
                encode(twelve) | pm
            }
            reg::WEEKDAY => encode(time.weekday),
            reg::DAY => encode(time.day),
            reg::MONTH => encode(time.month),
            reg::YEAR => encode((time.year % 100) as u8),
            reg::CENTURY => encode((time.year / 100) as u8),
            // Reading C acknowledges the (never raised) interrupt flags.
            reg::C => 0,
            index => self.ram[usize::from(index)],
        }
    }

    /// A byte written at `port`.
    pub fn write(&mut self, port: u16, value: u8) {
        match port {
            INDEX_PORT => self.index = value & 0x7F,
            _ => match self.index {
                // The clock keeps its time; C and D are read-only.
                reg::SECONDS..=reg::YEAR | reg::C | reg::D | reg::CENTURY => {}
                // UIP (bit 7) is the clock's.
                reg::A => self.ram[usize::from(reg::A)] = value & 0x7F,
                reg::B => self.ram[usize::from(reg::B)] = value & !B_SET,
                index => self.ram[usize::from(index)] = value,
            },
        }
    }
}

/// Two decimal digits as BCD.
fn bcd(value: u8) -> u8 {
    ((value / 10) << 4) | (value % 10)
}

/// A UTC time of day and date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DateTime {
    year: u32,
    month: u8,
    day: u8,
    /// 1 = Sunday .. 7 = Saturday.
    weekday: u8,
    hour: u8,
    minute: u8,
    second: u8,
}

impl DateTime {
    /// `seconds` since 1970-01-01 00:00:00 UTC, by the proleptic Gregorian
    /// calendar (Howard Hinnant's days-to-civil algorithm).
    fn at(seconds: u64) -> Self {
        let days = seconds / 86_400;
        let rest = seconds % 86_400;
        let z = days + 719_468;
        let era = z / 146_097;
        let day_of_era = z - era * 146_097;
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_index = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * month_index + 2) / 5 + 1;
        let month = if month_index < 10 {
            month_index + 3
        } else {
            month_index - 9
        };
        let year = year_of_era + era * 400 + u64::from(month <= 2);
        Self {
            year: year as u32,
            month: month as u8,
            day: day as u8,
            // 1970-01-01 was a Thursday (5).
            weekday: ((days + 4) % 7 + 1) as u8,
            hour: (rest / 3600) as u8,
            minute: (rest / 60 % 60) as u8,
            second: (rest % 60) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(rtc: &mut CmosRtc, index: u8, now: u64) -> u8 {
        rtc.write(INDEX_PORT, index);
        rtc.read(DATA_PORT, now)
    }

    #[test]
    fn dates_follow_the_calendar() {
        let t = DateTime::at(EPOCH_SECONDS);
        assert_eq!(
            (t.year, t.month, t.day, t.weekday),
            (2000, 1, 1, 7),
            "a Saturday"
        );
        // 2000 was a leap year: 29 February, then 1 March.
        let feb29 = DateTime::at(EPOCH_SECONDS + 59 * 86_400);
        assert_eq!((feb29.month, feb29.day), (2, 29));
        let t = DateTime::at(1_764_850_000);
        assert_eq!(
            (t.year, t.month, t.day, t.hour, t.minute, t.second),
            (2025, 12, 4, 12, 6, 40)
        );
    }

    /// Linux's mc146818_get_time: UIP clear, then the registers in BCD
    /// (register B's default) with the century byte.
    #[test]
    fn linux_reads_a_bcd_clock_that_is_never_updating() {
        let mut rtc = CmosRtc::new();
        let now = (3600 + 2 * 60 + 5) * 1_000_000_000;
        assert_eq!(
            read(&mut rtc, reg::A, now) & 0x80,
            0,
            "no update in progress"
        );
        assert_eq!(read(&mut rtc, reg::SECONDS, now), 0x05);
        assert_eq!(read(&mut rtc, reg::MINUTES, now), 0x02);
        assert_eq!(read(&mut rtc, reg::HOURS, now), 0x01);
        assert_eq!(read(&mut rtc, reg::DAY, now), 0x01);
        assert_eq!(read(&mut rtc, reg::MONTH, now), 0x01);
        assert_eq!(read(&mut rtc, reg::YEAR, now), 0x00);
        assert_eq!(read(&mut rtc, reg::CENTURY, now), 0x20);
        assert_eq!(read(&mut rtc, reg::D, now), D_VALID);
        // The NMI mask bit in the index is ignored.
        assert_eq!(read(&mut rtc, 0x80 | reg::SECONDS, now), 0x05);
    }

    #[test]
    fn binary_and_12_hour_modes_and_ram() {
        let mut rtc = CmosRtc::new();
        rtc.write(INDEX_PORT, reg::B);
        rtc.write(DATA_PORT, B_BINARY);
        let afternoon = 15 * 3600 * 1_000_000_000;
        assert_eq!(read(&mut rtc, reg::HOURS, afternoon), HOURS_PM | 3);
        assert_eq!(read(&mut rtc, reg::HOURS, 0), 12, "midnight is 12 AM");
        // Time writes are ignored; RAM keeps what is written.
        rtc.write(INDEX_PORT, reg::SECONDS);
        rtc.write(DATA_PORT, 0x30);
        assert_eq!(read(&mut rtc, reg::SECONDS, 0), 0);
        rtc.write(INDEX_PORT, 0x40);
        rtc.write(DATA_PORT, 0xAB);
        assert_eq!(read(&mut rtc, 0x40, 0), 0xAB);
        assert_eq!(rtc.read(INDEX_PORT, 0), 0xFF);
    }
}
