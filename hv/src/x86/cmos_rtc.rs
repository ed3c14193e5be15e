//! The PC's CMOS real-time clock (Motorola MC146818A) each Linux domain sees
//! at ports 0x70 (index; bit 7 is the NMI mask, ignored) and 0x71 (data):
//! the time of day and date registers, status registers A-D and the 114
//! bytes of CMOS RAM. Without it a kernel that reads the wall clock at boot
//! spins on an update-in-progress bit that an empty bus reads as set.
//!
//! Time-driven: the clock reads its start (the wall-clock time at the
//! hypervisor's time 0: what the host's own CMOS clock said at boot,
//! [`read_host_clock`], else [`EPOCH_SECONDS`]) plus the time the caller
//! passes (the hypervisor's uptime). Register B's data mode (BCD or
//! binary) and hour format (12 or 24) are honoured; writes to the time
//! registers are ignored (the guest cannot move its clock), an update is
//! never in progress (register A's UIP reads 0), and no interrupt is raised.

/// The index port.
pub const INDEX_PORT: u16 = 0x70;
/// The data port.
pub const DATA_PORT: u16 = 0x71;
/// The clock's time at time 0 when the host's clock could not be read:
/// 2000-01-01 00:00:00 UTC.
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
    /// Seconds since 1970-01-01 UTC at time 0.
    start: u64,
}

impl CmosRtc {
    /// At power-on: BCD, 24-hour mode, the battery good; the time is
    /// `start` (seconds since 1970-01-01 UTC) at time 0.
    pub fn new(start: u64) -> Self {
        let mut ram = [0; REGISTERS];
        ram[usize::from(reg::A)] = A_RESET;
        ram[usize::from(reg::B)] = B_24H;
        ram[usize::from(reg::D)] = D_VALID;
        Self {
            index: 0,
            ram,
            start,
        }
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
        let time = DateTime::at(self.start + now / 1_000_000_000);
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

/// The UTC date (year, month, day) `seconds` after 1970-01-01 00:00:00
/// UTC, as a domain's clock shows it.
pub fn civil_date(seconds: u64) -> (u32, u8, u8) {
    let t = DateTime::at(seconds);
    (t.year, t.month, t.day)
}

/// Two BCD digits as a number (`None` if a digit is not decimal).
fn from_bcd(value: u8) -> Option<u8> {
    let (high, low) = (value >> 4, value & 0xF);
    (high < 10 && low < 10).then_some(high * 10 + low)
}

/// How often [`read_host_clock`] polls register A for the end of an update
/// (an update takes under 2 ms; each poll is two port accesses, about a
/// microsecond on hardware).
const UIP_POLLS: u32 = 100_000;
/// How often it reads the clock before two reads agree.
const READ_ATTEMPTS: u32 = 5;

/// Why the host's clock gave no time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostClockError {
    /// Register A kept its update-in-progress bit set.
    AlwaysUpdating,
    /// Two reads in a row never agreed.
    Unstable,
    /// A field was out of range (e.g. a non-BCD digit, month 13): no clock,
    /// or a dead battery.
    Invalid,
}

impl core::fmt::Display for HostClockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::AlwaysUpdating => write!(f, "its update never ended ({UIP_POLLS} polls)"),
            Self::Unstable => write!(f, "{READ_ATTEMPTS} reads in a row disagreed"),
            Self::Invalid => write!(f, "it holds no valid date"),
        }
    }
}

/// Reads the host machine's own MC146818 clock, through `register` (a read
/// of CMOS register n at ports 0x70/0x71), as Linux's `mc146818_get_time`
/// does: wait for no update in progress (bounded), read every field, and
/// read again until two reads agree. The time in seconds since 1970-01-01,
/// taken as UTC (as QEMU's `-rtc base=utc`, its default, and Linux keep it).
pub fn read_host_clock(mut register: impl FnMut(u8) -> u8) -> Result<u64, HostClockError> {
    let mut previous = None;
    for _ in 0..READ_ATTEMPTS {
        if !(0..UIP_POLLS).any(|_| register(reg::A) & 0x80 == 0) {
            return Err(HostClockError::AlwaysUpdating);
        }
        let fields = [
            reg::SECONDS,
            reg::MINUTES,
            reg::HOURS,
            reg::DAY,
            reg::MONTH,
            reg::YEAR,
            reg::CENTURY,
            reg::B,
        ]
        .map(&mut register);
        if previous == Some(fields) {
            return host_clock_seconds(fields);
        }
        previous = Some(fields);
    }
    Err(HostClockError::Unstable)
}

/// Seconds since 1970-01-01 for the clock fields `[seconds, minutes, hours,
/// day, month, year, century, register B]`.
fn host_clock_seconds(fields: [u8; 8]) -> Result<u64, HostClockError> {
    let [second, minute, hour, day, month, year, century, b] = fields;
    let number = |v: u8| {
        if b & B_BINARY != 0 {
            Some(v)
        } else {
            from_bcd(v)
        }
    };
    let invalid = HostClockError::Invalid;
    let pm = b & B_24H == 0 && hour & HOURS_PM != 0;
    let hour = number(hour & !HOURS_PM).ok_or(invalid)?;
    let hour = match (b & B_24H != 0, pm, hour) {
        (true, _, h) => h,
        (false, false, 12) => 0,
        (false, true, 12) => 12,
        (false, pm, h) => h + if pm { 12 } else { 0 },
    };
    let year = u64::from(number(year).ok_or(invalid)?);
    // A clock without the century byte (it reads 0 or garbage) is taken to
    // be in this century, as Linux does.
    let century = number(century)
        .filter(|c| (19..=21).contains(c))
        .unwrap_or(20);
    let year = u64::from(century) * 100 + year;
    let (month, day) = (number(month).ok_or(invalid)?, number(day).ok_or(invalid)?);
    let (minute, second) = (
        number(minute).ok_or(invalid)?,
        number(second).ok_or(invalid)?,
    );
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
        || year < 1970
    {
        return Err(invalid);
    }
    Ok(days_from_civil(year, month, day) * 86_400
        + u64::from(hour) * 3600
        + u64::from(minute) * 60
        + u64::from(second))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of
/// [`DateTime::at`]'s, Howard Hinnant's days-from-civil), for years from 1970.
fn days_from_civil(year: u64, month: u8, day: u8) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let month = u64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + u64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
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

    /// A host clock's registers, as `read_host_clock` reads them.
    fn host_clock(fields: &[(u8, u8)]) -> impl FnMut(u8) -> u8 + '_ {
        |index| {
            fields
                .iter()
                .find(|&&(i, _)| i == index)
                .map_or(0, |&(_, v)| v)
        }
    }

    #[test]
    fn the_hosts_clock_is_read_in_bcd_or_binary_and_12_or_24_hours() {
        // 2026-12-04 17:30:36 UTC, BCD, 24-hour, as QEMU's clock reads.
        let qemu = [
            (reg::SECONDS, 0x36),
            (reg::MINUTES, 0x30),
            (reg::HOURS, 0x17),
            (reg::DAY, 0x04),
            (reg::MONTH, 0x12),
            (reg::YEAR, 0x26),
            (reg::CENTURY, 0x20),
            (reg::B, B_24H),
        ];
        let seconds = read_host_clock(host_clock(&qemu)).unwrap();
        assert_eq!(seconds, 1_796_405_436);
        let t = DateTime::at(seconds);
        assert_eq!(
            (t.year, t.month, t.day, t.hour, t.minute, t.second),
            (2026, 12, 4, 17, 30, 36)
        );
        // Binary, 12-hour: 5 PM; no century byte.
        let binary = [
            (reg::SECONDS, 36),
            (reg::MINUTES, 30),
            (reg::HOURS, HOURS_PM | 5),
            (reg::DAY, 4),
            (reg::MONTH, 12),
            (reg::YEAR, 26),
            (reg::B, B_BINARY),
        ];
        assert_eq!(read_host_clock(host_clock(&binary)), Ok(seconds));
        // 12 AM is midnight.
        let midnight = [
            (reg::HOURS, 0x12),
            (reg::DAY, 1),
            (reg::MONTH, 1),
            (reg::YEAR, 0x70),
            (reg::CENTURY, 0x19),
        ];
        assert_eq!(read_host_clock(host_clock(&midnight)), Ok(0));
        // Every leap-year rule round trips through the calendar.
        for seconds in [0, EPOCH_SECONDS + 59 * 86_400, 4_107_542_400, seconds] {
            let t = DateTime::at(seconds);
            assert_eq!(
                days_from_civil(u64::from(t.year), t.month, t.day) * 86_400
                    + u64::from(t.hour) * 3600
                    + u64::from(t.minute) * 60
                    + u64::from(t.second),
                seconds
            );
        }
    }

    #[test]
    fn a_missing_or_broken_host_clock_is_refused_within_its_bounds() {
        // No clock: the bus reads all ones (UIP forever).
        assert_eq!(
            read_host_clock(|_| 0xFF),
            Err(HostClockError::AlwaysUpdating)
        );
        // All zeros: month 0.
        assert_eq!(read_host_clock(|_| 0), Err(HostClockError::Invalid));
        // A BCD digit out of range.
        let bad = [
            (reg::SECONDS, 0x6A),
            (reg::DAY, 1),
            (reg::MONTH, 1),
            (reg::YEAR, 0x26),
        ];
        assert_eq!(
            read_host_clock(host_clock(&bad)),
            Err(HostClockError::Invalid)
        );
        // Seconds that tick between every two reads never agree.
        let mut reads = 0u8;
        let ticking = |index: u8| {
            if index == reg::SECONDS {
                reads += 1;
                reads
            } else if index == reg::A {
                0
            } else {
                1
            }
        };
        assert_eq!(read_host_clock(ticking), Err(HostClockError::Unstable));
    }

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
        let mut rtc = CmosRtc::new(EPOCH_SECONDS);
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
        let mut rtc = CmosRtc::new(EPOCH_SECONDS);
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
