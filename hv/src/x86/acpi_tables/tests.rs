//! The tables are read back with `platform::acpi`, the parser the
//! hypervisor uses on real firmware's tables.

use super::*;
use platform::acpi::{AcpiTables, Fadt, InterruptPolarity, InterruptTrigger, Madt, Signature};

/// Where the loader puts the tables: the BIOS area.
const BASE: u64 = 0xE_0000;

fn spec(vcpus: u32) -> GuestAcpiSpec {
    GuestAcpiSpec {
        // Consecutive ids: with one SMT bit in CPUID, 2k and 2k+1 are one
        // core's threads (the domain's units as SMT siblings).
        apic_ids: (0..vcpus).collect(),
        io_apic: (vcpus as u8, 0xFEC0_0000),
    }
}

/// Walks the blob from its RSDP as an OS would, through guest memory.
fn load(acpi: &GuestAcpi) -> AcpiTables {
    let mut memory = |address: u64, buffer: &mut [u8]| {
        let Some(start) = address.checked_sub(acpi.base) else {
            return false;
        };
        let start = start as usize;
        match acpi.bytes.get(start..start + buffer.len()) {
            Some(bytes) => {
                buffer.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    };
    let tables = AcpiTables::load(&mut memory, acpi.rsdp()).unwrap();
    assert!(tables.unreadable.is_empty(), "{:?}", tables.unreadable);
    tables
}

#[test]
fn an_os_finds_every_table_from_the_rsdp() {
    let acpi = build(&spec(4), BASE).unwrap();
    assert_eq!(acpi.rsdp(), BASE);
    assert_eq!(&acpi.bytes[..8], b"RSD PTR ");
    let tables = load(&acpi);
    let found: Vec<Signature> = tables.list().map(|(s, _)| s).collect();
    assert_eq!(found, [Signature(*b"FACP"), Signature(*b"APIC")]);
    for (_, address) in tables.list() {
        assert_eq!(address % 16, 0);
        assert!(address >= BASE && address < BASE + acpi.bytes.len() as u64);
    }
}

#[test]
fn madt_names_every_vcpu_the_io_apic_and_the_isa_routes() {
    let acpi = build(&spec(4), BASE).unwrap();
    let tables = load(&acpi);
    let madt = Madt::from_sdt(&tables.get(Signature(*b"APIC")).unwrap().unwrap()).unwrap();
    assert_eq!(madt.local_apic_address, 0xFEE0_0000);
    assert_eq!(madt.flags & 1, 1, "PC-AT compatible: 8259s present");
    let cpus: Vec<(u32, u32, bool)> = madt
        .local_apics
        .iter()
        .map(|l| (l.processor_uid, l.apic_id, l.x2apic))
        .collect();
    assert_eq!(
        cpus,
        [(0, 0, false), (1, 1, false), (2, 2, false), (3, 3, false)]
    );
    assert_eq!(madt.io_apics.len(), 1);
    assert_eq!(madt.io_apics[0].id, 4);
    assert_eq!(madt.io_apics[0].address, 0xFEC0_0000);
    assert_eq!(madt.io_apics[0].gsi_base, 0);
    // The PIT's IRQ 0 arrives on GSI 2; COM1's IRQ 4 is identity-mapped,
    // edge, active high; the SCI is level.
    assert_eq!(madt.isa_irq(0).unwrap().gsi, 2);
    let com1 = madt.isa_irq(4).unwrap();
    assert_eq!(com1.gsi, 4);
    assert_eq!(com1.trigger, InterruptTrigger::Edge);
    assert_eq!(com1.polarity, InterruptPolarity::ActiveHigh);
    let sci = madt.isa_irq(SCI_IRQ).unwrap();
    assert_eq!(sci.trigger, InterruptTrigger::Level);
    assert_eq!(madt.local_apic_nmis.len(), 1);
    assert_eq!(madt.local_apic_nmis[0].lint, 1);
    assert!(madt.warnings.is_empty(), "{:?}", madt.warnings);
}

#[test]
fn fadt_points_at_the_dsdt_and_names_reset_and_power_off() {
    let acpi = build(&spec(2), BASE).unwrap();
    let tables = load(&acpi);
    let fadt_table = tables.get(Signature(*b"FACP")).unwrap().unwrap();
    let fadt = Fadt::parse(fadt_table.bytes).unwrap();
    assert_eq!(fadt.revision, 6);
    assert!(!fadt.hardware_reduced(), "a PC with legacy devices");
    assert_eq!(fadt.flags & 1 << 10, 1 << 10, "RESET_REG_SUP");
    let b = fadt_table.bytes;
    // RESET_REG: system I/O, 8 bits at 0xCF9; RESET_VALUE 6.
    assert_eq!(b[116], 1);
    assert_eq!(b[117], 8);
    assert_eq!(u16::from_le_bytes([b[120], b[121]]), 0xCF9);
    assert_eq!(b[128], 6);
    assert_eq!(u16::from_le_bytes([b[46], b[47]]), 9, "SCI_INT");
    assert_eq!(
        u32::from_le_bytes(b[64..68].try_into().unwrap()),
        u32::from(PM1A_CNT_PORT)
    );
    // IAPC_BOOT_ARCH: legacy devices (and a CMOS clock); no 8042.
    assert_eq!(u16::from_le_bytes([b[109], b[110]]), 0b1);
    // The PM timer: 4 bytes at 0x608, also as the extended GAS.
    assert_eq!(
        u32::from_le_bytes(b[76..80].try_into().unwrap()),
        u32::from(PM_TMR_PORT)
    );
    assert_eq!(b[91], 4, "PM_TMR_LEN");
    assert_eq!(b[208], 1, "X_PM_TMR_BLK in system I/O");
    assert_eq!(u16::from_le_bytes([b[212], b[213]]), PM_TMR_PORT);
    // The DSDT it names is where the blob has it, valid, with _S5_.
    let dsdt_at = (fadt.dsdt_address - BASE) as usize;
    let length = u32::from_le_bytes(acpi.bytes[dsdt_at + 4..dsdt_at + 8].try_into().unwrap());
    let dsdt = &acpi.bytes[dsdt_at..dsdt_at + length as usize];
    assert_eq!(&dsdt[..4], b"DSDT");
    assert_eq!(dsdt.iter().fold(0u8, |s, b| s.wrapping_add(*b)), 0);
    let aml = &dsdt[36..];
    assert_eq!(&aml[..5], b"\x08_S5_");
    assert_eq!(aml[5], 0x12, "a package");
    assert_eq!(
        aml[6] as usize,
        aml.len() - 6,
        "its PkgLength covers the rest"
    );
    assert_eq!((aml[8], aml[9]), (0x0A, S5_SLEEP_TYPE));
}

#[test]
fn every_table_sums_to_zero_and_corruption_is_caught() {
    let acpi = build(&spec(8), BASE).unwrap();
    let mut corrupt = acpi.clone();
    // Flip a byte of the MADT (the last table): the reader refuses it.
    let last = corrupt.bytes.len() - 1;
    corrupt.bytes[last] ^= 0xFF;
    let tables = load(&corrupt);
    assert!(tables.get(Signature(*b"APIC")).is_err());
    assert!(load(&acpi).get(Signature(*b"APIC")).unwrap().is_some());
}

#[test]
fn refuses_what_it_cannot_describe() {
    assert_eq!(build(&spec(0), BASE), Err(AcpiBuildError::NoVcpus));
    let mut wide = spec(2);
    wide.apic_ids[1] = 255;
    assert_eq!(build(&wide, BASE), Err(AcpiBuildError::ApicIdTooLarge(255)));
    assert_eq!(
        build(&spec(2), 0xFFFF_FF00),
        Err(AcpiBuildError::AddressTooHigh(0xFFFF_FF00))
    );
}
