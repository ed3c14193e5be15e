//! System description table headers, checksums, the RSDP and the RSDT/XSDT walk.

use alloc::vec;
use alloc::vec::Vec;

use super::error::{AcpiError, Signature};

/// Size of the common table header.
pub const SDT_HEADER_LENGTH: usize = 36;
/// Tables longer than this are treated as corrupt (the largest real DSDTs are ~1 MiB).
pub const MAX_TABLE_LENGTH: u32 = 16 << 20;
/// The most tables an RSDT/XSDT may list before the walk stops.
pub const MAX_TABLES: usize = 1024;

pub(crate) fn bytes_at<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    bytes.get(offset..offset.checked_add(N)?)?.try_into().ok()
}

pub(crate) fn u8_at(bytes: &[u8], offset: usize) -> Option<u8> {
    bytes.get(offset).copied()
}

pub(crate) fn u16_at(bytes: &[u8], offset: usize) -> Option<u16> {
    bytes_at(bytes, offset).map(u16::from_le_bytes)
}

pub(crate) fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    bytes_at(bytes, offset).map(u32::from_le_bytes)
}

pub(crate) fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    bytes_at(bytes, offset).map(u64::from_le_bytes)
}

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |acc, &b| acc.wrapping_add(b))
}

/// The 36-byte header every system description table starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdtHeader {
    /// Table signature.
    pub signature: Signature,
    /// Length of the whole table, header included.
    pub length: u32,
    /// Table revision.
    pub revision: u8,
    /// The checksum byte.
    pub checksum: u8,
    /// OEM id.
    pub oem_id: [u8; 6],
    /// OEM table id.
    pub oem_table_id: [u8; 8],
    /// OEM revision.
    pub oem_revision: u32,
    /// Creator (ASL compiler) id.
    pub creator_id: [u8; 4],
    /// Creator revision.
    pub creator_revision: u32,
}

impl SdtHeader {
    /// Reads the header fields only (no length or checksum check beyond the 36 bytes).
    pub fn read(bytes: &[u8]) -> Result<Self, AcpiError> {
        let table = Signature::of(bytes).unwrap_or(Signature(*b"????"));
        let short = || AcpiError::TooShort {
            table,
            length: bytes.len(),
            needed: SDT_HEADER_LENGTH,
        };
        if bytes.len() < SDT_HEADER_LENGTH {
            return Err(short());
        }
        Ok(Self {
            signature: table,
            length: u32_at(bytes, 4).ok_or_else(short)?,
            revision: u8_at(bytes, 8).ok_or_else(short)?,
            checksum: u8_at(bytes, 9).ok_or_else(short)?,
            oem_id: bytes_at(bytes, 10).ok_or_else(short)?,
            oem_table_id: bytes_at(bytes, 16).ok_or_else(short)?,
            oem_revision: u32_at(bytes, 24).ok_or_else(short)?,
            creator_id: bytes_at(bytes, 28).ok_or_else(short)?,
            creator_revision: u32_at(bytes, 32).ok_or_else(short)?,
        })
    }
}

/// A validated table: its header and exactly `header.length` bytes.
#[derive(Clone, Copy, Debug)]
pub struct Sdt<'a> {
    /// The header.
    pub header: SdtHeader,
    /// The whole table, header included.
    pub bytes: &'a [u8],
}

impl<'a> Sdt<'a> {
    /// Checks the header, the length (not shorter than the header, not beyond
    /// `bytes`, not absurd), the checksum and, if given, the signature. Bytes after
    /// the header's length are ignored.
    pub fn parse(bytes: &'a [u8], expected: Option<Signature>) -> Result<Self, AcpiError> {
        let header = SdtHeader::read(bytes)?;
        let table = header.signature;
        if let Some(expected) = expected
            && expected != table
        {
            return Err(AcpiError::WrongSignature {
                expected,
                found: table,
            });
        }
        if header.length > MAX_TABLE_LENGTH {
            return Err(AcpiError::TooLarge {
                table,
                header_length: header.length,
            });
        }
        let length = header.length as usize;
        if length < SDT_HEADER_LENGTH {
            return Err(AcpiError::TooShort {
                table,
                length,
                needed: SDT_HEADER_LENGTH,
            });
        }
        let Some(bytes) = bytes.get(..length) else {
            return Err(AcpiError::Truncated {
                table,
                header_length: header.length,
                available: bytes.len(),
            });
        };
        let total = sum(bytes);
        if total != 0 {
            return Err(AcpiError::BadChecksum { table, sum: total });
        }
        Ok(Self { header, bytes })
    }

    /// The bytes after the header.
    pub fn body(&self) -> &'a [u8] {
        self.bytes.get(SDT_HEADER_LENGTH..).unwrap_or(&[])
    }

    /// `TooShort` unless the table has at least `needed` bytes.
    pub(crate) fn require(&self, needed: usize) -> Result<(), AcpiError> {
        if self.bytes.len() < needed {
            return Err(AcpiError::TooShort {
                table: self.header.signature,
                length: self.bytes.len(),
                needed,
            });
        }
        Ok(())
    }
}

/// One subtable of a MADT or PPTT: `type`, `length`, then its fields.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<'a> {
    pub offset: usize,
    pub entry_type: u8,
    /// The whole entry (type and length bytes included).
    pub bytes: &'a [u8],
}

impl Entry<'_> {
    /// `EntryTooShort` unless the entry has `minimum` bytes.
    pub fn require(&self, table: Signature, minimum: usize) -> Result<(), AcpiError> {
        if self.bytes.len() < minimum {
            return Err(AcpiError::EntryTooShort {
                table,
                offset: self.offset,
                entry_type: self.entry_type,
                length: self.bytes.len(),
                minimum,
            });
        }
        Ok(())
    }
}

/// Splits `table.bytes[start..]` into type/length subtables. A length below 2 or an
/// entry running past the end is an error (so the walk always advances and stays
/// in bounds).
pub(crate) fn entries<'a>(table: &Sdt<'a>, start: usize) -> Result<Vec<Entry<'a>>, AcpiError> {
    let signature = table.header.signature;
    table.require(start)?;
    let bytes = table.bytes;
    let mut offset = start;
    let mut out = Vec::new();
    while offset < bytes.len() {
        let remaining = bytes.len() - offset;
        let entry_type = bytes[offset];
        let Some(length) = u8_at(bytes, offset + 1) else {
            return Err(AcpiError::TruncatedEntry {
                table: signature,
                offset,
                entry_type,
                length: 2,
                remaining,
            });
        };
        if length < 2 {
            return Err(AcpiError::ZeroLengthEntry {
                table: signature,
                offset,
                entry_type,
                length,
            });
        }
        let length = usize::from(length);
        if length > remaining {
            return Err(AcpiError::TruncatedEntry {
                table: signature,
                offset,
                entry_type,
                length,
                remaining,
            });
        }
        out.push(Entry {
            offset,
            entry_type,
            bytes: &bytes[offset..offset + length],
        });
        offset += length;
    }
    Ok(out)
}

/// The Root System Description Pointer (ACPI 6.5 §5.2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rsdp {
    /// 0 for ACPI 1.0 (RSDT only), 2 for ACPI 2.0+ (XSDT).
    pub revision: u8,
    /// OEM id.
    pub oem_id: [u8; 6],
    /// Physical address of the RSDT.
    pub rsdt_address: u32,
    /// Physical address of the XSDT (revision 2+, non-zero).
    pub xsdt_address: Option<u64>,
}

/// Length of the ACPI 1.0 RSDP.
pub const RSDP_V1_LENGTH: usize = 20;
/// Length of the ACPI 2.0+ RSDP.
pub const RSDP_V2_LENGTH: usize = 36;

impl Rsdp {
    /// Parses an RSDP: signature "RSD PTR ", the v1 checksum over 20 bytes and, for
    /// revision 2+, the extended checksum over its length field's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, AcpiError> {
        if bytes.get(..8) != Some(b"RSD PTR ".as_slice()) {
            return Err(AcpiError::BadRsdp {
                problem: "signature is not \"RSD PTR \"",
            });
        }
        let v1 = bytes.get(..RSDP_V1_LENGTH).ok_or(AcpiError::BadRsdp {
            problem: "shorter than 20 bytes",
        })?;
        if sum(v1) != 0 {
            return Err(AcpiError::BadRsdp {
                problem: "bad checksum over the first 20 bytes",
            });
        }
        let revision = v1[15];
        let oem_id = bytes_at(v1, 9).unwrap_or_default();
        let rsdt_address = u32_at(v1, 16).unwrap_or_default();
        if revision < 2 {
            return Ok(Self {
                revision,
                oem_id,
                rsdt_address,
                xsdt_address: None,
            });
        }
        let short = AcpiError::BadRsdp {
            problem: "revision 2 but shorter than 36 bytes",
        };
        let length = u32_at(bytes, 20).ok_or(short.clone())? as usize;
        if length < RSDP_V2_LENGTH {
            return Err(AcpiError::BadRsdp {
                problem: "revision 2 with a length field below 36",
            });
        }
        let extended = bytes.get(..length).ok_or(short)?;
        if sum(extended) != 0 {
            return Err(AcpiError::BadRsdp {
                problem: "bad extended checksum",
            });
        }
        let xsdt = u64_at(extended, 24).unwrap_or_default();
        Ok(Self {
            revision,
            oem_id,
            rsdt_address,
            xsdt_address: (xsdt != 0).then_some(xsdt),
        })
    }

    /// Finds a valid RSDP in `region` on a 16-byte boundary (the BIOS way: the
    /// first KiB of the EBDA, then 0xE0000..0xFFFFF). Returns its offset in `region`.
    pub fn scan(region: &[u8]) -> Option<(usize, Self)> {
        (0..region.len()).step_by(16).find_map(|offset| {
            let candidate = region.get(offset..)?;
            if !candidate.starts_with(b"RSD PTR ") {
                return None;
            }
            Self::parse(candidate).ok().map(|rsdp| (offset, rsdp))
        })
    }

    /// The root table to walk: the XSDT when there is one, else the RSDT.
    pub fn root_table(&self) -> (Signature, u64) {
        match self.xsdt_address {
            Some(address) => (Signature::XSDT, address),
            None => (Signature::RSDT, u64::from(self.rsdt_address)),
        }
    }
}

/// The table addresses listed by an RSDT (32-bit entries) or XSDT (64-bit entries).
pub fn root_table_entries(bytes: &[u8]) -> Result<Vec<u64>, AcpiError> {
    let signature = Signature::of(bytes).unwrap_or(Signature(*b"????"));
    let width = match signature {
        Signature::RSDT => 4,
        Signature::XSDT => 8,
        found => {
            return Err(AcpiError::WrongSignature {
                expected: Signature::XSDT,
                found,
            });
        }
    };
    let table = Sdt::parse(bytes, Some(signature))?;
    Ok(table
        .body()
        .chunks_exact(width)
        .take(MAX_TABLES)
        .map(|chunk| match width {
            4 => u32_at(chunk, 0).map_or(0, u64::from),
            _ => u64_at(chunk, 0).unwrap_or(0),
        })
        .filter(|&address| address != 0)
        .collect())
}

/// Reads `length` bytes of physical memory at `address` into the buffer, or fails.
/// The boot code implements it over its identity map (x86) or the UEFI memory map.
pub trait PhysicalMemory {
    /// Fills `buffer` from physical address `address`; `false` if the range cannot be read.
    fn read(&mut self, address: u64, buffer: &mut [u8]) -> bool;
}

impl<F: FnMut(u64, &mut [u8]) -> bool> PhysicalMemory for F {
    fn read(&mut self, address: u64, buffer: &mut [u8]) -> bool {
        self(address, buffer)
    }
}

/// Copies the table at `address` out of physical memory: its header first, then as
/// many bytes as the header's length says (bounded by [`MAX_TABLE_LENGTH`]). The
/// checksum is not checked here: [`AcpiTables::get`] checks it when the table is used.
pub fn read_table(
    memory: &mut dyn PhysicalMemory,
    address: u64,
    expected: Signature,
) -> Result<Vec<u8>, AcpiError> {
    let mut header = [0u8; SDT_HEADER_LENGTH];
    if !memory.read(address, &mut header) {
        return Err(AcpiError::MemoryRead {
            table: expected,
            address,
            length: SDT_HEADER_LENGTH,
        });
    }
    let parsed = SdtHeader::read(&header)?;
    if parsed.length > MAX_TABLE_LENGTH {
        return Err(AcpiError::TooLarge {
            table: parsed.signature,
            header_length: parsed.length,
        });
    }
    let length = (parsed.length as usize).max(SDT_HEADER_LENGTH);
    let mut table = vec![0u8; length];
    if !memory.read(address, &mut table) {
        return Err(AcpiError::MemoryRead {
            table: parsed.signature,
            address,
            length,
        });
    }
    Ok(table)
}

/// A set of raw tables, found by walking the RSDP or given as byte slices.
#[derive(Clone, Debug, Default)]
pub struct AcpiTables {
    tables: Vec<(u64, Vec<u8>)>,
    /// Tables listed by the root table that could not be read; the walk went on.
    pub unreadable: Vec<AcpiError>,
}

impl AcpiTables {
    /// Tables already in memory (from files, or copied by UEFI code). Addresses are 0.
    pub fn from_tables(tables: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self {
            tables: tables.into_iter().map(|t| (0, t)).collect(),
            unreadable: Vec::new(),
        }
    }

    /// Walks RSDP → XSDT (or RSDT) → every listed table. A bad RSDP or root table is
    /// an error; a listed table that cannot be read is recorded in `unreadable`.
    pub fn load(memory: &mut dyn PhysicalMemory, rsdp_address: u64) -> Result<Self, AcpiError> {
        let mut rsdp = [0u8; RSDP_V2_LENGTH];
        let mut length = RSDP_V2_LENGTH;
        if !memory.read(rsdp_address, &mut rsdp) {
            // An ACPI 1.0 RSDP may sit at the very end of a readable range.
            length = RSDP_V1_LENGTH;
            if !memory.read(rsdp_address, &mut rsdp[..RSDP_V1_LENGTH]) {
                return Err(AcpiError::MemoryRead {
                    table: Signature::RSDP,
                    address: rsdp_address,
                    length: RSDP_V1_LENGTH,
                });
            }
        }
        let rsdp = Rsdp::parse(&rsdp[..length])?;
        Self::load_from_rsdp(memory, &rsdp)
    }

    /// Like [`Self::load`] with an RSDP already parsed (UEFI hands over its contents).
    pub fn load_from_rsdp(memory: &mut dyn PhysicalMemory, rsdp: &Rsdp) -> Result<Self, AcpiError> {
        let (signature, address) = rsdp.root_table();
        let root = read_table(memory, address, signature)?;
        let mut tables = Self::default();
        for address in root_table_entries(&root)? {
            match read_table(memory, address, Signature(*b"????")) {
                Ok(bytes) => tables.tables.push((address, bytes)),
                Err(error) => tables.unreadable.push(error),
            }
        }
        Ok(tables)
    }

    /// The first table with `signature`, validated (length and checksum).
    /// `Ok(None)` when there is none.
    pub fn get(&self, signature: Signature) -> Result<Option<Sdt<'_>>, AcpiError> {
        match self
            .tables
            .iter()
            .find(|(_, bytes)| Signature::of(bytes) == Some(signature))
        {
            Some((_, bytes)) => Sdt::parse(bytes, Some(signature)).map(Some),
            None => Ok(None),
        }
    }

    /// Signature and physical address of every table held, in root-table order.
    pub fn list(&self) -> impl Iterator<Item = (Signature, u64)> + '_ {
        self.tables.iter().map(|(address, bytes)| {
            (
                Signature::of(bytes).unwrap_or(Signature(*b"????")),
                *address,
            )
        })
    }
}
