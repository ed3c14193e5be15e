//! A test tool's table edits: give the GICC entries of an ARM MADT
//! efficiency classes (ACPI 6.0+, the byte Windows-on-ARM laptops use to tell
//! their big cores from their LITTLE ones) and repair the table's checksum.
//!
//! QEMU virt's ACPI builder makes every CPU alike and ignores `-acpitable`,
//! so the UEFI application beside this library (`src/main.rs`) edits edk2's
//! MADT in memory and then starts the hypervisor: the hypervisor's own ACPI
//! boot path then meets a big.LITTLE machine on real firmware. Owns only
//! these byte edits and the walk from the RSDP to the MADT; it must not
//! interpret the tables beyond that (the hypervisor's parser is
//! `platform::acpi`, and the host tests check the result with it).

#![no_std]
#![forbid(unsafe_code)]

use core::fmt;

/// Every ACPI system description table's header length.
pub const HEADER_LEN: usize = 36;
/// The MADT's signature.
pub const MADT_SIGNATURE: [u8; 4] = *b"APIC";
/// The XSDT's signature.
pub const XSDT_SIGNATURE: [u8; 4] = *b"XSDT";

/// Where the MADT's interrupt controller entries start (header, local
/// interrupt controller address, flags).
const MADT_ENTRIES: usize = HEADER_LEN + 8;
/// The GIC CPU interface (GICC) entry's type.
const GICC_TYPE: u8 = 0x0B;
/// The GICC entry's efficiency class byte (ACPI 6.0: entries of 80 bytes or
/// more carry it).
const GICC_EFFICIENCY_CLASS: usize = 76;
/// The checksum byte of a table header.
const CHECKSUM: usize = 9;

/// What is wrong with a table the tool was asked to edit or walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableError {
    /// The bytes end before `needed` bytes (`have` given).
    Truncated {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes there are.
        have: usize,
    },
    /// The signature is not the expected one.
    Signature {
        /// The signature found.
        found: [u8; 4],
        /// The one expected.
        expected: [u8; 4],
    },
    /// The RSDP predates ACPI 2.0 (no XSDT).
    OldRsdp {
        /// Its revision.
        revision: u8,
    },
    /// An interrupt controller entry with a length that cannot be right.
    BadEntry {
        /// The entry's offset in the MADT.
        offset: usize,
        /// Its length byte.
        length: u8,
    },
    /// A GICC entry too short for an efficiency class (pre-ACPI 6.0).
    NoClassField {
        /// The entry's offset in the MADT.
        offset: usize,
        /// Its length.
        length: u8,
    },
    /// The MADT has no GICC entry: not an ARM machine's.
    NoGicc,
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, have } => {
                write!(f, "truncated: {have} bytes where {needed} are needed")
            }
            Self::Signature { found, expected } => write!(
                f,
                "signature {:?} where {:?} was expected",
                found.escape_ascii(),
                expected.escape_ascii()
            ),
            Self::OldRsdp { revision } => {
                write!(f, "RSDP revision {revision} has no XSDT (ACPI 1.0)")
            }
            Self::BadEntry { offset, length } => {
                write!(f, "MADT entry at {offset:#x} has length {length}")
            }
            Self::NoClassField { offset, length } => write!(
                f,
                "GICC entry at {offset:#x} is {length} bytes: too short for an efficiency class"
            ),
            Self::NoGicc => write!(f, "the MADT has no GICC entry"),
        }
    }
}

/// `bytes[at..at + N]`, or how short it is.
fn bytes_at<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], TableError> {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(TableError::Truncated {
            needed: at + N,
            have: bytes.len(),
        })
}

/// The XSDT's physical address from the first 36 bytes of an ACPI 2.0+ RSDP.
pub fn xsdt_address(rsdp: &[u8]) -> Result<u64, TableError> {
    let signature: [u8; 8] = bytes_at(rsdp, 0)?;
    if &signature != b"RSD PTR " {
        return Err(TableError::Signature {
            found: bytes_at(rsdp, 0)?,
            expected: *b"RSD ",
        });
    }
    let [revision] = bytes_at(rsdp, 15)?;
    if revision < 2 {
        return Err(TableError::OldRsdp { revision });
    }
    Ok(u64::from_le_bytes(bytes_at(rsdp, 24)?))
}

/// A table's length from its header (the first [`HEADER_LEN`] bytes).
pub fn table_length(header: &[u8]) -> Result<usize, TableError> {
    let length = u32::from_le_bytes(bytes_at(header, 4)?) as usize;
    if length < HEADER_LEN {
        return Err(TableError::Truncated {
            needed: HEADER_LEN,
            have: length,
        });
    }
    Ok(length)
}

/// A table's signature from its header.
pub fn signature(header: &[u8]) -> Result<[u8; 4], TableError> {
    bytes_at(header, 0)
}

/// The physical addresses the XSDT lists, in order.
pub fn xsdt_entries(xsdt: &[u8]) -> Result<impl Iterator<Item = u64> + '_, TableError> {
    let found = signature(xsdt)?;
    if found != XSDT_SIGNATURE {
        return Err(TableError::Signature {
            found,
            expected: XSDT_SIGNATURE,
        });
    }
    let length = table_length(xsdt)?;
    let entries = xsdt.get(HEADER_LEN..length).ok_or(TableError::Truncated {
        needed: length,
        have: xsdt.len(),
    })?;
    Ok(entries
        .chunks_exact(8)
        .map(|entry| u64::from_le_bytes(entry.try_into().unwrap_or_default())))
}

/// The class [`set_efficiency_classes`] gives the GICC entry `index` of
/// `count`: the first half LITTLE (class 0), the rest big (class 1), as the
/// Surface Pro X's MADT lists its Snapdragon's cores.
pub fn little_then_big(index: usize, count: usize) -> u8 {
    u8::from(index >= count / 2)
}

/// Gives every GICC entry of `madt` (the whole table) the efficiency class
/// `class_of(index, count)` and repairs the checksum; returns how many GICC
/// entries there are. Nothing is written unless every entry can take a class.
pub fn set_efficiency_classes(
    madt: &mut [u8],
    class_of: impl Fn(usize, usize) -> u8,
) -> Result<usize, TableError> {
    let found = signature(madt)?;
    if found != MADT_SIGNATURE {
        return Err(TableError::Signature {
            found,
            expected: MADT_SIGNATURE,
        });
    }
    let length = table_length(madt)?;
    if madt.len() < length {
        return Err(TableError::Truncated {
            needed: length,
            have: madt.len(),
        });
    }
    let count = checked_gicc_count(&madt[..length])?;
    let mut offset = MADT_ENTRIES;
    let mut index = 0;
    // The entries were checked: each has a length of at least 2 and lies
    // inside the table.
    while let Some((kind, length)) = entry_at(&madt[..length], offset) {
        if kind == GICC_TYPE {
            madt[offset + GICC_EFFICIENCY_CLASS] = class_of(index, count);
            index += 1;
        }
        offset += usize::from(length);
    }
    madt[CHECKSUM] = 0;
    let sum = madt[..length]
        .iter()
        .fold(0u8, |sum, &byte| sum.wrapping_add(byte));
    madt[CHECKSUM] = sum.wrapping_neg();
    Ok(count)
}

/// The `(type, length)` of the interrupt controller entry at `offset`, if
/// one starts there.
fn entry_at(madt: &[u8], offset: usize) -> Option<(u8, u8)> {
    bytes_at(madt, offset)
        .ok()
        .map(|[kind, length]| (kind, length))
}

/// How many GICC entries `madt` has, once every entry's length is checked
/// (inside the table, at least its own two bytes) and every GICC is long
/// enough to hold an efficiency class.
fn checked_gicc_count(madt: &[u8]) -> Result<usize, TableError> {
    let mut offset = MADT_ENTRIES;
    let mut giccs = 0;
    while let Some((kind, length)) = entry_at(madt, offset) {
        let size = usize::from(length);
        if length < 2 || offset + size > madt.len() {
            return Err(TableError::BadEntry { offset, length });
        }
        if kind == GICC_TYPE {
            if size <= GICC_EFFICIENCY_CLASS {
                return Err(TableError::NoClassField { offset, length });
            }
            giccs += 1;
        }
        offset += size;
    }
    match giccs {
        0 => Err(TableError::NoGicc),
        count => Ok(count),
    }
}

#[cfg(test)]
mod tests;
