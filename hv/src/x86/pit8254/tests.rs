use super::*;

/// ns for `ticks` of the PIT's clock (rounded up: the tick has happened).
fn ns(ticks: u64) -> u64 {
    (ticks * 1_000_000_000).div_ceil(PIT_HZ)
}

/// Linux's `pit_calibrate_tsc`: channel 2 in mode 0 through port 0x61,
/// polling OUT2 (bit 5) until the count runs out.
#[test]
fn channel_2_times_linux_calibration_loop() {
    let mut pit = Pit8254::new();
    let t0 = 5_000_000;
    let latch = (PIT_HZ / 20) as u16; // 50 ms, as CAL_MS
    let gate_on = (pit.read(0x61, t0) & !0x02) | 0x01;
    pit.write(0x61, gate_on, t0);
    assert_eq!(pit.write(0x43, 0xB0, t0), None); // ch 2, LSB+MSB, mode 0
    pit.write(0x42, latch as u8, t0);
    pit.write(0x42, (latch >> 8) as u8, t0);
    assert_eq!(pit.read(0x61, t0) & 0x20, 0, "OUT2 low while counting");
    let just_before = t0 + ns(u64::from(latch)) - 1_000;
    assert_eq!(pit.read(0x61, just_before) & 0x20, 0);
    let at = t0 + ns(u64::from(latch));
    assert_eq!(pit.read(0x61, at) & 0x20, 0x20, "terminal count");
    assert_eq!(
        pit.read(0x61, at + 1_000_000) & 0x21,
        0x21,
        "and stays high"
    );
}

/// Linux's `quick_pit_calibrate`: mode 0 from 0xFFFF, the MSB read as the
/// second of each LSB/MSB pair, falling by one every 256 ticks.
#[test]
fn live_count_reads_fall_at_the_pit_rate() {
    let mut pit = Pit8254::new();
    pit.write(0x61, 0x01, 0);
    pit.write(0x43, 0xB0, 0);
    pit.write(0x42, 0xFF, 0);
    pit.write(0x42, 0xFF, 0);
    let read = |pit: &mut Pit8254, now| {
        let lsb = pit.read(0x42, now);
        let msb = pit.read(0x42, now);
        u16::from_le_bytes([lsb, msb])
    };
    assert_eq!(read(&mut pit, 0), 0xFFFF);
    assert_eq!(read(&mut pit, ns(256)), 0xFFFF - 256);
    assert_eq!(read(&mut pit, ns(0x1000)), 0xFFFF - 0x1000);
    // Past zero a mode-0 count wraps and goes on.
    assert_eq!(read(&mut pit, ns(0xFFFF + 10)), 0xFFF6);
}

#[test]
fn a_low_gate_holds_channel_2_and_port_61_reads_back() {
    let mut pit = Pit8254::new();
    assert_eq!(pit.read(0x61, 0), 0, "gate off at power-on");
    pit.write(0x61, 0x03, 0);
    assert_eq!(pit.read(0x61, 0) & 0x03, 0x03);
    pit.write(0x43, 0xB0, 0);
    pit.write(0x42, 0x00, 0);
    pit.write(0x42, 0x10, 0); // 0x1000
    pit.write(0x61, 0x00, ns(0x100)); // gate low after 0x100 ticks
    let held = |pit: &mut Pit8254, now| {
        pit.write(0x43, 0x80, now); // latch channel 2
        u16::from_le_bytes([pit.read(0x42, now), pit.read(0x42, now)])
    };
    assert_eq!(held(&mut pit, ns(0x800)), 0x0F00, "suspended");
    pit.write(0x61, 0x01, ns(0x800));
    assert_eq!(held(&mut pit, ns(0x900)), 0x0E00, "mode 0 goes on");
    // Written with the gate low, a count waits for the gate.
    pit.write(0x61, 0x00, ns(0x900));
    pit.write(0x43, 0xB0, ns(0x900));
    pit.write(0x42, 0x00, ns(0x900));
    pit.write(0x42, 0x02, ns(0x900));
    assert_eq!(held(&mut pit, ns(0x1900)), 0x0200);
}

#[test]
fn channel_0_rate_generator_raises_irq0_every_period() {
    let mut pit = Pit8254::new();
    assert_eq!(pit.next_irq0(0), None, "nothing before a count");
    // Mode 2 at 1000 Hz (Linux's PIT clockevent, periodic).
    let latch = PIT_HZ.div_ceil(1000) as u16;
    pit.write(0x43, 0x34, 0);
    pit.write(0x40, latch as u8, 0);
    pit.write(0x40, (latch >> 8) as u8, 0);
    let first = pit.next_irq0(0).unwrap();
    assert_eq!(first, ns(u64::from(latch)));
    let second = pit.next_irq0(first).unwrap();
    assert_eq!(second, ns(2 * u64::from(latch)));
    // OUT dips for one tick at the end of each period.
    assert!(pit.irq0_level(ns(10)));
    assert!(!pit.irq0_level(ns(u64::from(latch) - 1) + 1));
    // Mode 0 (one-shot, Linux's oneshot clockevent): one edge only.
    pit.write(0x43, 0x30, first);
    pit.write(0x40, 100, first);
    pit.write(0x40, 0, first);
    let edge = pit.next_irq0(first).unwrap();
    assert_eq!(edge, first + ns(100));
    assert_eq!(pit.next_irq0(edge + 1), None);
}

#[test]
fn latches_and_read_back_status() {
    let mut pit = Pit8254::new();
    pit.write(0x43, 0x34, 0); // ch 0, LSB+MSB, mode 2
    // Status before a count: null count set, OUT high (mode 2).
    pit.write(0x43, 0xE2, 0); // read-back status of ch 0
    assert_eq!(pit.read(0x40, 0), 0x80 | 0x40 | 0x34);
    pit.write(0x40, 0x00, 0);
    pit.write(0x40, 0x01, 0); // 256
    // Latch, then time passes: the latched value is read, then live ones.
    pit.write(0x43, 0x00, ns(16));
    pit.write(0x43, 0x00, ns(32)); // a second latch keeps the first
    assert_eq!(pit.read(0x40, ns(100)), 240);
    assert_eq!(pit.read(0x40, ns(100)), 0);
    assert_eq!(pit.read(0x40, ns(100)), 156);
    // Read-back of count and status together: status first.
    pit.write(0x43, 0xC2, ns(200));
    assert_eq!(pit.read(0x40, ns(210)) & 0x7F, 0x34, "status, count loaded");
    assert_eq!(pit.read(0x40, ns(210)), 56, "then the count latched at 200");
    // LSB-only access.
    pit.write(0x43, 0x14, 0);
    pit.write(0x40, 50, 0);
    assert_eq!(pit.read(0x40, ns(5)), 45);
    assert_eq!(pit.read(0x40, ns(5)), 45);
}

#[test]
fn odd_writes_never_panic_and_bcd_is_reported() {
    let mut pit = Pit8254::new();
    assert_eq!(
        pit.write(0x43, 0x31, 0),
        Some(PitWarning::BcdIgnored { channel: 0 })
    );
    for value in 0..=255u8 {
        for port in [0x40, 0x41, 0x42, 0x43, 0x61] {
            pit.write(port, value, u64::from(value) * 1000);
            let _ = pit.read(port, u64::from(value) * 1000 + 7);
        }
    }
    assert_eq!(pit.read(0x43, 0), 0xFF, "write-only");
    assert!(Pit8254::claims(0x40) && Pit8254::claims(0x61) && !Pit8254::claims(0x44));
}
