//! The small tables the ARM UEFI boot needs besides the MADT: FADT (PSCI conduit),
//! SPCR (console UART) and GTDT (timer interrupts). Only the fields used are read.

use super::error::{AcpiError, Signature};
use super::sdt::{Sdt, u8_at, u16_at, u32_at, u64_at};

/// What the FADT says about booting (ACPI 6.5 §5.2.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fadt {
    /// FADT revision (major).
    pub revision: u8,
    /// FADT minor version (offset 131; 0 on tables older than ACPI 5.1).
    pub minor_version: u8,
    /// Fixed feature flags (offset 112).
    pub flags: u32,
    /// ARM_BOOT_ARCH (offset 129).
    pub arm_boot_flags: u16,
    /// Where the DSDT is: X_DSDT when set, else DSDT.
    pub dsdt_address: u64,
}

impl Fadt {
    /// Parses a FADT. Tables shorter than 116 bytes (ACPI 1.0 stubs) are an error; the
    /// ARM fields and X_DSDT read as 0 when the table is too short to hold them.
    pub fn parse(bytes: &[u8]) -> Result<Self, AcpiError> {
        let table = Sdt::parse(bytes, Some(Signature::FADT))?;
        table.require(116)?;
        let b = table.bytes;
        let dsdt = u32_at(b, 40).map_or(0, u64::from);
        let x_dsdt = u64_at(b, 140).unwrap_or(0);
        Ok(Self {
            revision: table.header.revision,
            minor_version: u8_at(b, 131).unwrap_or(0),
            flags: u32_at(b, 112).unwrap_or(0),
            arm_boot_flags: u16_at(b, 129).unwrap_or(0),
            dsdt_address: if x_dsdt != 0 { x_dsdt } else { dsdt },
        })
    }

    /// ARM_BOOT_ARCH bit 0: PSCI is implemented.
    pub fn psci_compliant(&self) -> bool {
        self.arm_boot_flags & 1 != 0
    }

    /// ARM_BOOT_ARCH bit 1: PSCI calls use HVC instead of SMC.
    pub fn psci_uses_hvc(&self) -> bool {
        self.arm_boot_flags & (1 << 1) != 0
    }

    /// Flags bit 20: hardware-reduced ACPI (always on ARM).
    pub fn hardware_reduced(&self) -> bool {
        self.flags & (1 << 20) != 0
    }
}

/// The console UART kind (DBG2 serial port subtypes used by SPCR's interface type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UartKind {
    /// 0x00: full 16550.
    Ns16550,
    /// 0x01: 16550 subset (legacy x86 COM port).
    Ns16550Subset,
    /// 0x03: ARM PL011.
    Pl011,
    /// 0x0D: ARM SBSA generic UART, 32-bit accesses only (deprecated).
    SbsaGeneric32,
    /// 0x0E: ARM SBSA generic UART.
    SbsaGeneric,
    /// 0x10: BCM2835 mini UART.
    Bcm2835,
    /// 0x12: 16550 described by the base address's access size.
    Ns16550Gas,
    /// Anything else, by number.
    Other(u8),
}

impl UartKind {
    fn from_type(interface_type: u8) -> Self {
        match interface_type {
            0x00 => Self::Ns16550,
            0x01 => Self::Ns16550Subset,
            0x03 => Self::Pl011,
            0x0d => Self::SbsaGeneric32,
            0x0e => Self::SbsaGeneric,
            0x10 => Self::Bcm2835,
            0x12 => Self::Ns16550Gas,
            other => Self::Other(other),
        }
    }
}

/// The serial console from the SPCR (Microsoft SPCR spec, revision 2+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spcr {
    /// The UART kind.
    pub kind: UartKind,
    /// Generic address structure: address space (0 = memory, 1 = I/O port).
    pub address_space: u8,
    /// Access size (1 byte, 2 word, 3 dword, 4 qword; 0 undefined).
    pub access_size: u8,
    /// Register base.
    pub base_address: u64,
    /// Interrupt type bits (bit 3: GIC).
    pub interrupt_type: u8,
    /// GSIV of the UART interrupt.
    pub gsi: u32,
    /// Baud rate in bits per second; `None` for "as configured by firmware".
    pub baud_rate: Option<u32>,
}

impl Spcr {
    /// Parses an SPCR (80 bytes or more).
    pub fn parse(bytes: &[u8]) -> Result<Self, AcpiError> {
        let table = Sdt::parse(bytes, Some(Signature::SPCR))?;
        table.require(80)?;
        let b = table.bytes;
        let baud_rate = match u8_at(b, 58).unwrap_or(0) {
            3 => Some(9600),
            4 => Some(19200),
            6 => Some(57600),
            7 => Some(115_200),
            _ => None,
        };
        Ok(Self {
            kind: UartKind::from_type(u8_at(b, 36).unwrap_or(0)),
            address_space: u8_at(b, 40).unwrap_or(0),
            access_size: u8_at(b, 43).unwrap_or(0),
            base_address: u64_at(b, 44).unwrap_or(0),
            interrupt_type: u8_at(b, 52).unwrap_or(0),
            gsi: u32_at(b, 54).unwrap_or(0),
            baud_rate,
        })
    }

    /// Whether the base address is MMIO (not an x86 I/O port).
    pub fn is_mmio(&self) -> bool {
        self.address_space == 0
    }

    /// Whether the UART's interrupt is an ARM GIC interrupt (`gsi` an
    /// INTID): SPCR's Interrupt Type bit 3.
    pub fn interrupt_is_gic(&self) -> bool {
        /// SPCR Interrupt Type: "ARMH GIC interrupt".
        const ARM_GIC: u8 = 0b1000;
        self.interrupt_type & ARM_GIC != 0
    }
}

/// One architected timer interrupt from the GTDT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerInterrupt {
    /// The GSIV (a PPI INTID, 16..31), 0 when not provided.
    pub gsiv: u32,
    /// Flags: bit 0 edge-triggered, bit 1 active-low, bit 2 always-on.
    pub flags: u32,
}

impl TimerInterrupt {
    /// Flags bit 0.
    pub fn edge_triggered(&self) -> bool {
        self.flags & 1 != 0
    }

    /// Flags bit 1.
    pub fn active_low(&self) -> bool {
        self.flags & (1 << 1) != 0
    }
}

/// The architected timer interrupts (ACPI 6.5 §5.2.25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gtdt {
    /// CntControlBase (0xFFFF_FFFF_FFFF_FFFF when not provided).
    pub cnt_control_base: u64,
    /// Secure EL1 physical timer.
    pub secure_el1: TimerInterrupt,
    /// Non-secure EL1 physical timer.
    pub non_secure_el1: TimerInterrupt,
    /// EL1 virtual timer (the guests').
    pub virtual_el1: TimerInterrupt,
    /// Non-secure EL2 physical timer: the hypervisor's own tick.
    pub el2: TimerInterrupt,
    /// EL2 virtual timer (GTDT revision 3+ with a non-zero GSIV, VHE).
    pub virtual_el2: Option<TimerInterrupt>,
}

impl Gtdt {
    /// Parses a GTDT (80 bytes or more).
    pub fn parse(bytes: &[u8]) -> Result<Self, AcpiError> {
        let table = Sdt::parse(bytes, Some(Signature::GTDT))?;
        table.require(80)?;
        let b = table.bytes;
        let timer = |offset: usize| TimerInterrupt {
            gsiv: u32_at(b, offset).unwrap_or(0),
            flags: u32_at(b, offset + 4).unwrap_or(0),
        };
        let virtual_el2 = (table.header.revision >= 3 && b.len() >= 104)
            .then(|| timer(96))
            .filter(|timer| timer.gsiv != 0);
        Ok(Self {
            cnt_control_base: u64_at(b, 36).unwrap_or(0),
            secure_el1: timer(48),
            non_secure_el1: timer(56),
            virtual_el1: timer(64),
            el2: timer(72),
            virtual_el2,
        })
    }
}
