//! A domain's own ACPI tables, as a PC's firmware would give them to its
//! OS: RSDP, XSDT, FADT, a minimal DSDT and a MADT with the domain's vCPUs'
//! local APICs, an I/O APIC and the ISA interrupt overrides. Built into one
//! blob that the loader copies to a fixed guest-physical address (the BIOS
//! area, where an OS that scans for the RSDP finds it too); every pointer
//! in it is a guest-physical address inside the blob.
//!
//! Written by hand: the tables are a few fixed layouts (ACPI 6.4, §5.2),
//! and the tests read them back with the hypervisor's own ACPI parser
//! (`platform::acpi`, which reads real firmware's tables), so the writer
//! is checked by an independent reader.
//!
//! The power-off and reset paths the FADT names are the usual PC ones: a
//! PM1a control block (S5 with the DSDT's `_S5_` sleep type) and the reset
//! register at port 0xCF9; the emulation that acts on them is the x86
//! arch's.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// The OEM id every table carries.
const OEM_ID: &[u8; 6] = b"CSCHED";
/// The OEM table id every table carries.
const OEM_TABLE_ID: &[u8; 8] = b"CSCHEDHV";
/// Where the local APICs are (the architectural default).
pub const LOCAL_APIC_ADDRESS: u32 = 0xFEE0_0000;
/// The SCI's ISA IRQ (as on a PC).
pub const SCI_IRQ: u8 = 9;
/// The PM1a event block's I/O port (4 bytes: status, enable).
pub const PM1A_EVT_PORT: u16 = 0x600;
/// The PM1a control block's I/O port (2 bytes: SLP_TYP, SLP_EN).
pub const PM1A_CNT_PORT: u16 = 0x604;
/// The power management timer's I/O port (4 bytes, 24 bits counted).
pub const PM_TMR_PORT: u16 = 0x608;
/// The reset register's I/O port (the PC's reset control register).
pub const RESET_PORT: u16 = 0xCF9;
/// What the OS writes to [`RESET_PORT`] to reset (full reset, reset CPU).
pub const RESET_VALUE: u8 = 0x06;
/// The S5 (soft off) sleep type the DSDT's `_S5_` names: the value an OS
/// writes into PM1a_CNT's SLP_TYP field (bits 10..12) with SLP_EN (bit 13).
pub const S5_SLEEP_TYPE: u8 = 5;

const HEADER_LEN: usize = 36;
const RSDP_LEN: usize = 36;
const FADT_LEN: usize = 276;
/// FADT flags: WBINVD works (bit 0), the power button is a control method
/// (bit 4: no fixed power button), RESET_REG_SUP (bit 10).
const FADT_FLAGS: u32 = 1 << 0 | 1 << 4 | 1 << 10;
/// IA-PC boot architecture flags: legacy devices (bit 0: the UART, PIT,
/// PIC and CMOS clock at their ISA ports). Bit 1 (an 8042) stays clear:
/// only its reset command is emulated (port 0x64), and a kernel told there
/// is a keyboard controller spends seconds probing it.
const IAPC_BOOT_ARCH: u16 = 1 << 0;
/// MADT flags: PCAT_COMPAT, a dual 8259 is present (masked by the OS).
const MADT_PCAT_COMPAT: u32 = 1;
/// MPS INTI flags: active high (01), level-triggered (11 << 2).
const INTI_LEVEL_HIGH: u16 = 0b1101;
/// ACPI generic address space id of system I/O.
const GAS_SYSTEM_IO: u8 = 1;

/// What a domain's tables describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestAcpiSpec {
    /// Each vCPU's APIC id, in vCPU order (the ACPI processor UIDs are the
    /// indices). The topology the guest sees lives in these ids and the
    /// CPUID leaves that split them.
    pub apic_ids: Vec<u32>,
    /// The I/O APIC: its id and MMIO address (GSI base 0).
    pub io_apic: (u8, u32),
}

/// Why a domain's tables cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcpiBuildError {
    /// A domain with no vCPU.
    NoVcpus,
    /// More vCPUs than a MADT's type-0 entries can name in 8 bits.
    ApicIdTooLarge(u32),
    /// The blob does not fit below the 4 GiB its 32-bit pointers reach.
    AddressTooHigh(u64),
}

impl fmt::Display for AcpiBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoVcpus => write!(f, "the domain has no vCPU"),
            Self::ApicIdTooLarge(id) => write!(
                f,
                "APIC id {id} needs an x2APIC entry; the guest tables name ids up to 254"
            ),
            Self::AddressTooHigh(address) => {
                write!(f, "ACPI tables at {address:#x} must sit below 4 GiB")
            }
        }
    }
}

/// The built tables: copy [`GuestAcpi::bytes`] to [`GuestAcpi::base`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestAcpi {
    /// Guest-physical address of the blob; the RSDP is its first byte.
    pub base: u64,
    /// RSDP, XSDT, FADT, DSDT and MADT, each 16-byte aligned.
    pub bytes: Vec<u8>,
}

impl GuestAcpi {
    /// The RSDP's guest-physical address (`boot_params.acpi_rsdp_addr`).
    pub fn rsdp(&self) -> u64 {
        self.base
    }
}

/// Builds `spec`'s tables for guest-physical address `base`.
pub fn build(spec: &GuestAcpiSpec, base: u64) -> Result<GuestAcpi, AcpiBuildError> {
    if spec.apic_ids.is_empty() {
        return Err(AcpiBuildError::NoVcpus);
    }
    if let Some(&id) = spec.apic_ids.iter().find(|&&id| id > 254) {
        return Err(AcpiBuildError::ApicIdTooLarge(id));
    }
    let dsdt = dsdt();
    let madt = madt(spec);
    // Offsets in the blob, each table 16-byte aligned.
    let xsdt_at = RSDP_LEN.next_multiple_of(16);
    let xsdt_len = HEADER_LEN + 2 * 8;
    let fadt_at = (xsdt_at + xsdt_len).next_multiple_of(16);
    let dsdt_at = (fadt_at + FADT_LEN).next_multiple_of(16);
    let madt_at = (dsdt_at + dsdt.len()).next_multiple_of(16);
    let end = madt_at + madt.len();
    if base.saturating_add(end as u64) > u64::from(u32::MAX) {
        return Err(AcpiBuildError::AddressTooHigh(base));
    }
    let address = |offset: usize| base + offset as u64;
    let mut bytes = vec![0u8; end];
    bytes[..RSDP_LEN].copy_from_slice(&rsdp(address(xsdt_at)));
    let mut xsdt = header(b"XSDT", xsdt_len, 1);
    xsdt.extend_from_slice(&address(fadt_at).to_le_bytes());
    xsdt.extend_from_slice(&address(madt_at).to_le_bytes());
    let fadt = fadt(address(dsdt_at));
    for (at, mut table) in [
        (xsdt_at, xsdt),
        (fadt_at, fadt),
        (dsdt_at, dsdt),
        (madt_at, madt),
    ] {
        seal(&mut table);
        bytes[at..at + table.len()].copy_from_slice(&table);
    }
    Ok(GuestAcpi { base, bytes })
}

/// A table header for `signature` of `length` bytes (checksum left 0).
fn header(signature: &[u8; 4], length: usize, revision: u8) -> Vec<u8> {
    let mut h = Vec::with_capacity(length);
    h.extend_from_slice(signature);
    h.extend_from_slice(&(length as u32).to_le_bytes());
    h.push(revision);
    h.push(0); // checksum, set by `seal`
    h.extend_from_slice(OEM_ID);
    h.extend_from_slice(OEM_TABLE_ID);
    h.extend_from_slice(&1u32.to_le_bytes()); // OEM revision
    h.extend_from_slice(b"CSHV"); // creator id
    h.extend_from_slice(&1u32.to_le_bytes()); // creator revision
    h
}

/// The byte that makes `bytes` sum to 0.
fn checksum(bytes: &[u8]) -> u8 {
    bytes
        .iter()
        .fold(0u8, |sum, b| sum.wrapping_add(*b))
        .wrapping_neg()
}

/// Sets a table's length (to what it holds) and checksum.
fn seal(table: &mut [u8]) {
    let length = table.len() as u32;
    table[4..8].copy_from_slice(&length.to_le_bytes());
    table[9] = 0;
    table[9] = checksum(table);
}

/// RSDP, ACPI 2.0 form, pointing at the XSDT only (no RSDT).
fn rsdp(xsdt: u64) -> [u8; RSDP_LEN] {
    let mut r = [0u8; RSDP_LEN];
    r[..8].copy_from_slice(b"RSD PTR ");
    r[9..15].copy_from_slice(OEM_ID);
    r[15] = 2; // revision: ACPI 2.0+
    r[20..24].copy_from_slice(&(RSDP_LEN as u32).to_le_bytes());
    r[24..32].copy_from_slice(&xsdt.to_le_bytes());
    r[8] = checksum(&r[..20]);
    r[32] = checksum(&r);
    r
}

/// A generic address structure for `bits` bits of system I/O at `port`.
fn io_gas(port: u16, bits: u8) -> [u8; 12] {
    let mut g = [0u8; 12];
    g[0] = GAS_SYSTEM_IO;
    g[1] = bits;
    g[3] = match bits {
        8 => 1,
        16 => 2,
        _ => 3,
    };
    g[4..6].copy_from_slice(&port.to_le_bytes());
    g
}

/// FADT (revision 6): the DSDT, the SCI, the PM1a blocks, the reset register.
fn fadt(dsdt: u64) -> Vec<u8> {
    let mut f = header(b"FACP", FADT_LEN, 6);
    f.resize(FADT_LEN, 0);
    f[40..44].copy_from_slice(&(dsdt as u32).to_le_bytes());
    f[46..48].copy_from_slice(&u16::from(SCI_IRQ).to_le_bytes());
    // SMI_CMD 0: no SMM, the machine is always in ACPI mode.
    f[56..60].copy_from_slice(&u32::from(PM1A_EVT_PORT).to_le_bytes());
    f[64..68].copy_from_slice(&u32::from(PM1A_CNT_PORT).to_le_bytes());
    f[76..80].copy_from_slice(&u32::from(PM_TMR_PORT).to_le_bytes());
    f[88] = 4; // PM1_EVT_LEN
    f[89] = 2; // PM1_CNT_LEN
    f[91] = 4; // PM_TMR_LEN
    f[109..111].copy_from_slice(&IAPC_BOOT_ARCH.to_le_bytes());
    f[112..116].copy_from_slice(&FADT_FLAGS.to_le_bytes());
    f[116..128].copy_from_slice(&io_gas(RESET_PORT, 8));
    f[128] = RESET_VALUE;
    f[131] = 4; // minor version: ACPI 6.4
    f[140..148].copy_from_slice(&dsdt.to_le_bytes());
    f[148..160].copy_from_slice(&io_gas(PM1A_EVT_PORT, 32));
    f[172..184].copy_from_slice(&io_gas(PM1A_CNT_PORT, 16));
    f[208..220].copy_from_slice(&io_gas(PM_TMR_PORT, 32));
    f
}

/// DSDT: `Name (_S5, Package () { 5, 5, 0, 0 })`, the soft-off sleep type.
fn dsdt() -> Vec<u8> {
    let mut d = header(b"DSDT", 0, 2);
    d.extend_from_slice(&[
        0x08,
        b'_',
        b'S',
        b'5',
        b'_', // NameOp "_S5_"
        0x12,
        0x08,
        0x04, // PackageOp, PkgLength 8, 4 elements
        0x0A,
        S5_SLEEP_TYPE, // BytePrefix SLP_TYPa
        0x0A,
        S5_SLEEP_TYPE, // BytePrefix SLP_TYPb
        0x00,
        0x00, // Zero, Zero (reserved)
    ]);
    d
}

/// MADT: the local APICs, the I/O APIC, IRQ 0 on GSI 2 (the PIT, as on
/// every PC), the SCI level-triggered, and LINT1 as NMI on every CPU.
fn madt(spec: &GuestAcpiSpec) -> Vec<u8> {
    let mut m = header(b"APIC", 0, 5);
    m.extend_from_slice(&LOCAL_APIC_ADDRESS.to_le_bytes());
    m.extend_from_slice(&MADT_PCAT_COMPAT.to_le_bytes());
    for (uid, &apic_id) in spec.apic_ids.iter().enumerate() {
        // Type 0, length 8, UID, APIC id, flags: enabled.
        m.extend_from_slice(&[0, 8, uid as u8, apic_id as u8]);
        m.extend_from_slice(&1u32.to_le_bytes());
    }
    let (id, address) = spec.io_apic;
    m.extend_from_slice(&[1, 12, id, 0]);
    m.extend_from_slice(&address.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    for (source, gsi, flags) in [
        (0u8, 2u32, 0u16),
        (SCI_IRQ, u32::from(SCI_IRQ), INTI_LEVEL_HIGH),
    ] {
        m.extend_from_slice(&[2, 10, 0, source]);
        m.extend_from_slice(&gsi.to_le_bytes());
        m.extend_from_slice(&flags.to_le_bytes());
    }
    // Type 4: all processors (0xFF), default flags, LINT1.
    m.extend_from_slice(&[4, 6, 0xFF, 0, 0, 1]);
    m
}

#[cfg(test)]
mod tests;
