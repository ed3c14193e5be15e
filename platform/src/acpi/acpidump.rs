//! Reading the text `acpidump` prints: blocks of
//!
//! ```text
//! APIC @ 0x0000000000000000
//!     0000: 41 50 49 43 F4 0A 00 00 05 60 41 6D 70 65 72 65  APIC.....`Ampere
//! ```
//!
//! separated by blank lines, back into raw tables.

use alloc::string::String;
use alloc::vec::Vec;

use super::error::AcpiError;
use super::sdt::MAX_TABLE_LENGTH;

/// One table from an acpidump text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpedTable {
    /// The name on the block's first line ("APIC", "SSDT", ...).
    pub name: String,
    /// The physical address after `@`.
    pub address: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Whether `text` looks like acpidump output (some line is `NAME @ 0x...`).
pub fn is_acpidump(text: &str) -> bool {
    text.lines().any(|line| header(line).is_some())
}

fn header(line: &str) -> Option<(&str, u64)> {
    let (name, address) = line.trim().split_once(" @ ")?;
    let address = address.trim().strip_prefix("0x")?;
    let address = u64::from_str_radix(address, 16).ok()?;
    (!name.is_empty()
        && name.len() <= 8
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then_some((name, address))
}

/// Parses every block. Lines outside blocks (banners, comments) are ignored; inside
/// a block, each line's offset must continue the bytes so far.
pub fn parse_acpidump(text: &str) -> Result<Vec<DumpedTable>, AcpiError> {
    let mut tables: Vec<DumpedTable> = Vec::new();
    let mut current: Option<DumpedTable> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let error = |problem| AcpiError::Acpidump {
            line: number,
            problem,
        };
        if let Some((name, address)) = header(line) {
            tables.extend(current.take());
            current = Some(DumpedTable {
                name: String::from(name),
                address,
                bytes: Vec::new(),
            });
            continue;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            tables.extend(current.take());
            continue;
        }
        let Some(table) = current.as_mut() else {
            continue;
        };
        let (offset, rest) = trimmed
            .split_once(':')
            .ok_or(error("expected \"OFFSET: HEX BYTES\""))?;
        let offset = usize::from_str_radix(offset.trim(), 16).map_err(|_| error("bad offset"))?;
        if offset != table.bytes.len() {
            return Err(error("offset does not follow the previous line"));
        }
        // The hex column ends at the double space before the ASCII column.
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let hex = rest.split("  ").next().unwrap_or("");
        let mut count = 0;
        for token in hex.split(' ').filter(|t| !t.is_empty()) {
            if token.len() != 2 || count == 16 {
                return Err(error("expected at most 16 two-digit hex bytes"));
            }
            let byte = u8::from_str_radix(token, 16).map_err(|_| error("bad hex byte"))?;
            table.bytes.push(byte);
            count += 1;
        }
        if count == 0 {
            return Err(error("line without bytes"));
        }
        if table.bytes.len() > MAX_TABLE_LENGTH as usize {
            return Err(error("table larger than the maximum table length"));
        }
    }
    tables.extend(current);
    Ok(tables)
}
