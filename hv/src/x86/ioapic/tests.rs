use super::*;
use apic::ioapic::IoDelivery;

/// Programs pin `pin`'s entry through the MMIO window, as Linux does
/// (high dword first, then the low one).
fn program(io: &mut IoApic, pin: u32, low: u32, high: u32) -> Option<Delivery> {
    io.write(0x00, 0x10 + 2 * pin + 1);
    io.write(0x10, high);
    io.write(0x00, 0x10 + 2 * pin);
    io.write(0x10, low)
}

fn read_register(io: &mut IoApic, index: u32) -> u32 {
    io.write(0x00, index);
    io.read(0x10)
}

const LEVEL: u32 = 1 << 15;
const MASKED: u32 = 1 << 16;
const REMOTE_IRR: u32 = 1 << 14;

#[test]
fn identification_registers() {
    let mut io = IoApic::new(8);
    assert_eq!(read_register(&mut io, 0x00), 8 << 24);
    assert_eq!(
        read_register(&mut io, 0x01),
        0x0017_0020,
        "24 pins, version 0x20"
    );
    io.write(0x00, 0x00);
    io.write(0x10, 3 << 24);
    assert_eq!(read_register(&mut io, 0x00), 3 << 24);
    assert_eq!(io.read(0x00), 0x00, "IOREGSEL reads back");
    // Every entry starts masked.
    for pin in 0..24 {
        assert_eq!(read_register(&mut io, 0x10 + 2 * pin) & MASKED, MASKED);
    }
    assert_eq!(read_register(&mut io, 0x10 + 48), 0, "past the last entry");
    assert!(IoApic::claims(0xFEC0_0010) && !IoApic::claims(0xFEC0_1000));
}

#[test]
fn an_edge_pin_delivers_once_per_rising_edge() {
    let mut io = IoApic::new(0);
    // COM1 on pin 4: vector 0x24, fixed, physical, to APIC id 1.
    assert_eq!(program(&mut io, 4, 0x24, 1 << 24), None);
    let delivery = io.set_pin(4, true).unwrap();
    assert_eq!(
        delivery,
        Delivery {
            pin: 4,
            vector: 0x24,
            mode: IoDelivery::Fixed,
            destination: 1,
            logical: false,
            level: false,
        }
    );
    assert_eq!(io.set_pin(4, true), None, "still high: no new edge");
    assert_eq!(io.set_pin(4, false), None);
    assert!(io.set_pin(4, true).is_some());
    // Masked: nothing.
    program(&mut io, 4, 0x24 | MASKED, 0);
    io.set_pin(4, false);
    assert_eq!(io.set_pin(4, true), None);
}

#[test]
fn a_level_pin_waits_for_its_eoi() {
    let mut io = IoApic::new(0);
    // The SCI on pin 9: vector 0x29, level, logical destination 0x01.
    program(&mut io, 9, 0x29 | LEVEL | 1 << 11 | 1 << 13, 0x01 << 24);
    assert!(io.active_low(9));
    let first = io.set_pin(9, true).unwrap();
    assert!(first.level && first.logical);
    assert_eq!(read_register(&mut io, 0x10 + 18) & REMOTE_IRR, REMOTE_IRR);
    // Still asserted: nothing more until the EOI, which delivers again.
    assert_eq!(io.set_pin(9, true), None);
    assert_eq!(io.eoi(0x28), None, "another vector's EOI");
    assert_eq!(io.eoi(0x29), Some(first));
    // Released for good once the device lets go.
    io.set_pin(9, false);
    assert_eq!(io.eoi(0x29), None);
    assert_eq!(read_register(&mut io, 0x10 + 18) & REMOTE_IRR, 0);
    // The EOI register (version 0x20) does the same.
    io.set_pin(9, true);
    io.set_pin(9, false);
    assert_eq!(io.write(0x40, 0x29), None);
    assert_eq!(read_register(&mut io, 0x10 + 18) & REMOTE_IRR, 0);
}

#[test]
fn unmasking_an_asserted_level_pin_delivers() {
    let mut io = IoApic::new(0);
    program(&mut io, 2, 0x30 | LEVEL | MASKED, 0);
    assert_eq!(io.set_pin(2, true), None, "masked");
    let delivery = program(&mut io, 2, 0x30 | LEVEL, 0).unwrap();
    assert_eq!(delivery.vector, 0x30);
}

#[test]
fn the_guest_cannot_write_the_ioapics_own_bits() {
    let mut io = IoApic::new(0);
    program(&mut io, 1, 0x41 | 1 << 12 | REMOTE_IRR | 0xFF << 17, 0);
    let low = read_register(&mut io, 0x12);
    assert_eq!(
        low, 0x41,
        "delivery status, Remote IRR and reserved bits stay clear"
    );
    // Delivery modes are reported as programmed, reserved ones too.
    for (bits, mode) in [
        (1, IoDelivery::LowestPriority),
        (2, IoDelivery::Smi),
        (4, IoDelivery::Nmi),
        (5, IoDelivery::Init),
        (7, IoDelivery::ExtInt),
        (3, IoDelivery::Reserved(3)),
    ] {
        program(&mut io, 1, 0x41 | bits << 8, 0);
        io.set_pin(1, false);
        assert_eq!(io.set_pin(1, true).unwrap().mode, mode);
    }
}

#[test]
fn odd_accesses_never_panic() {
    let mut io = IoApic::new(0);
    for select in [0u32, 1, 2, 3, 0x0F, 0x10, 0x3F, 0x40, 0xFF, 0x1234] {
        io.write(0x00, select);
        io.write(0x10, u32::MAX);
        let _ = io.read(0x10);
    }
    for offset in [0x04, 0x20, 0x44, 0xFFC] {
        io.write(offset, 7);
        assert_eq!(io.read(offset), 0);
    }
    assert_eq!(io.set_pin(24, true), None, "no pin 24");
    assert_eq!(io.set_pin(usize::MAX, true), None);
}
