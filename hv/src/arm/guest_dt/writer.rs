//! A small flattened-device-tree writer (DTSpec v0.4 chapter 5).
//!
//! Why not a crate: the one well-kept FDT writer on crates.io, rust-vmm's
//! `vm-fdt` 0.3, does build without `std` (feature `alloc`), but there it pulls
//! `hashbrown` 0.14 with `ahash`, `zerocopy`, `once_cell` and `allocator-api2`
//! into the hypervisor image only to detect duplicate property names, next to
//! the `hashbrown` 0.17 already in the lock file. The format is simple and
//! fully specified; the ~200 lines below do the same checks with a `BTreeSet`.
//! The `fdt` crate the workspace already uses is a reader only.
//!
//! Layout written: 40-byte v17 header, memory reservation block (8-byte
//! aligned, terminated by a zero entry), structure block (tokens, 4-byte
//! aligned), strings block (each property name once). Everything big-endian.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// `magic` in the FDT header.
pub const FDT_MAGIC: u32 = 0xd00d_feed;
/// Header `version` written.
pub const FDT_VERSION: u32 = 17;
/// Header `last_comp_version` written (v17 is backwards compatible with v16).
pub const FDT_LAST_COMP_VERSION: u32 = 16;

const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_END: u32 = 0x9;
const HEADER_SIZE: usize = 40;
/// DTSpec 2.2.1: node names are at most 31 characters before the `@`.
const MAX_NODE_NAME: usize = 31;
/// DTSpec 2.2.4: property names are 1 to 31 characters.
const MAX_PROPERTY_NAME: usize = 31;

/// Why a tree could not be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FdtWriteError {
    /// A node name is empty (below the root), too long or has characters
    /// outside DTSpec table 2.1.
    InvalidNodeName(String),
    /// A property name is empty, too long or has characters outside DTSpec
    /// table 2.2.
    InvalidPropertyName(String),
    /// The same property was written twice in one node.
    DuplicateProperty {
        /// The property.
        name: String,
    },
    /// A property was written after the node's first child, or outside any node.
    PropertyOutOfPlace {
        /// The property.
        name: String,
    },
    /// The root node must be the first and only top-level node, named "".
    BadRoot,
    /// `end_node` without an open node.
    UnbalancedEnd,
    /// `finish` with nodes still open (how many).
    UnclosedNodes(usize),
    /// A string value holds a NUL byte.
    NulInString {
        /// The property.
        name: String,
    },
    /// The blob would not fit the header's 32-bit offsets.
    TooLarge,
}

impl fmt::Display for FdtWriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidNodeName(name) => write!(f, "invalid node name {name:?}"),
            Self::InvalidPropertyName(name) => write!(f, "invalid property name {name:?}"),
            Self::DuplicateProperty { name } => write!(f, "property {name:?} written twice"),
            Self::PropertyOutOfPlace { name } => {
                write!(
                    f,
                    "property {name:?} written after a child node or outside a node"
                )
            }
            Self::BadRoot => write!(f, "the tree must have exactly one root node, named \"\""),
            Self::UnbalancedEnd => write!(f, "end_node without an open node"),
            Self::UnclosedNodes(n) => write!(f, "{n} node(s) still open at finish"),
            Self::NulInString { name } => write!(f, "string property {name:?} holds a NUL"),
            Self::TooLarge => write!(f, "device tree larger than 4 GiB"),
        }
    }
}

/// One node being written.
struct OpenNode {
    properties: BTreeSet<String>,
    has_children: bool,
}

/// Builds a flattened device tree node by node: `begin_node("")` for the
/// root, properties, children, `end_node()`, then [`FdtWriter::finish`].
pub struct FdtWriter {
    reservations: Vec<(u64, u64)>,
    structure: Vec<u8>,
    strings: Vec<u8>,
    string_offsets: BTreeMap<String, u32>,
    open: Vec<OpenNode>,
    root_written: bool,
    boot_cpuid_phys: u32,
}

impl Default for FdtWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl FdtWriter {
    /// An empty tree with no memory reservations.
    pub fn new() -> Self {
        Self {
            reservations: Vec::new(),
            structure: Vec::new(),
            strings: Vec::new(),
            string_offsets: BTreeMap::new(),
            open: Vec::new(),
            root_written: false,
            boot_cpuid_phys: 0,
        }
    }

    /// Adds a memory reservation block entry (`address`, `size`).
    pub fn reserve_memory(&mut self, address: u64, size: u64) {
        self.reservations.push((address, size));
    }

    /// Sets the header's `boot_cpuid_phys` (the boot CPU's `reg`); 0 by default.
    pub fn set_boot_cpuid_phys(&mut self, reg: u32) {
        self.boot_cpuid_phys = reg;
    }

    /// Opens a node; `""` for the root, which must come first and only once.
    pub fn begin_node(&mut self, name: &str) -> Result<(), FdtWriteError> {
        match self.open.last_mut() {
            None => {
                if self.root_written || !name.is_empty() {
                    return Err(FdtWriteError::BadRoot);
                }
                self.root_written = true;
            }
            Some(parent) => {
                if !valid_node_name(name) {
                    return Err(FdtWriteError::InvalidNodeName(String::from(name)));
                }
                parent.has_children = true;
            }
        }
        push_u32(&mut self.structure, FDT_BEGIN_NODE);
        self.structure.extend_from_slice(name.as_bytes());
        self.structure.push(0);
        pad4(&mut self.structure);
        self.open.push(OpenNode {
            properties: BTreeSet::new(),
            has_children: false,
        });
        Ok(())
    }

    /// Closes the innermost open node.
    pub fn end_node(&mut self) -> Result<(), FdtWriteError> {
        self.open.pop().ok_or(FdtWriteError::UnbalancedEnd)?;
        push_u32(&mut self.structure, FDT_END_NODE);
        Ok(())
    }

    /// Writes a property with a raw value to the innermost open node.
    pub fn property(&mut self, name: &str, value: &[u8]) -> Result<(), FdtWriteError> {
        if !valid_property_name(name) {
            return Err(FdtWriteError::InvalidPropertyName(String::from(name)));
        }
        let node = match self.open.last_mut() {
            Some(node) if !node.has_children => node,
            _ => {
                return Err(FdtWriteError::PropertyOutOfPlace {
                    name: String::from(name),
                });
            }
        };
        if !node.properties.insert(String::from(name)) {
            return Err(FdtWriteError::DuplicateProperty {
                name: String::from(name),
            });
        }
        let len = u32::try_from(value.len()).map_err(|_| FdtWriteError::TooLarge)?;
        let name_offset = self.string_offset(name)?;
        push_u32(&mut self.structure, FDT_PROP);
        push_u32(&mut self.structure, len);
        push_u32(&mut self.structure, name_offset);
        self.structure.extend_from_slice(value);
        pad4(&mut self.structure);
        Ok(())
    }

    /// A property with an empty value (a flag such as `interrupt-controller`).
    pub fn property_empty(&mut self, name: &str) -> Result<(), FdtWriteError> {
        self.property(name, &[])
    }

    /// One 32-bit cell.
    pub fn property_u32(&mut self, name: &str, value: u32) -> Result<(), FdtWriteError> {
        self.property(name, &value.to_be_bytes())
    }

    /// One 64-bit value (two cells).
    pub fn property_u64(&mut self, name: &str, value: u64) -> Result<(), FdtWriteError> {
        self.property(name, &value.to_be_bytes())
    }

    /// A list of 32-bit cells.
    pub fn property_cells(&mut self, name: &str, cells: &[u32]) -> Result<(), FdtWriteError> {
        let bytes: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
        self.property(name, &bytes)
    }

    /// A NUL-terminated string.
    pub fn property_string(&mut self, name: &str, value: &str) -> Result<(), FdtWriteError> {
        self.property_strings(name, &[value])
    }

    /// A string list (each string NUL-terminated, concatenated).
    pub fn property_strings(&mut self, name: &str, values: &[&str]) -> Result<(), FdtWriteError> {
        let mut bytes = Vec::new();
        for value in values {
            if value.as_bytes().contains(&0) {
                return Err(FdtWriteError::NulInString {
                    name: String::from(name),
                });
            }
            bytes.extend_from_slice(value.as_bytes());
            bytes.push(0);
        }
        self.property(name, &bytes)
    }

    /// Ends the structure block and lays out the blob.
    pub fn finish(mut self) -> Result<Vec<u8>, FdtWriteError> {
        if !self.open.is_empty() {
            return Err(FdtWriteError::UnclosedNodes(self.open.len()));
        }
        if !self.root_written {
            return Err(FdtWriteError::BadRoot);
        }
        push_u32(&mut self.structure, FDT_END);

        let rsvmap_offset = HEADER_SIZE; // 40: already 8-byte aligned.
        let rsvmap_size = (self.reservations.len() + 1) * 16;
        let struct_offset = rsvmap_offset + rsvmap_size;
        let strings_offset = struct_offset + self.structure.len();
        let total = strings_offset + self.strings.len();
        let to_u32 = |v: usize| u32::try_from(v).map_err(|_| FdtWriteError::TooLarge);

        let mut blob = Vec::with_capacity(total);
        for field in [
            FDT_MAGIC,
            to_u32(total)?,
            to_u32(struct_offset)?,
            to_u32(strings_offset)?,
            to_u32(rsvmap_offset)?,
            FDT_VERSION,
            FDT_LAST_COMP_VERSION,
            self.boot_cpuid_phys,
            to_u32(self.strings.len())?,
            to_u32(self.structure.len())?,
        ] {
            push_u32(&mut blob, field);
        }
        for &(address, size) in self.reservations.iter().chain([&(0, 0)]) {
            blob.extend_from_slice(&address.to_be_bytes());
            blob.extend_from_slice(&size.to_be_bytes());
        }
        blob.extend_from_slice(&self.structure);
        blob.extend_from_slice(&self.strings);
        Ok(blob)
    }

    /// Offset of `name` in the strings block, adding it the first time.
    fn string_offset(&mut self, name: &str) -> Result<u32, FdtWriteError> {
        if let Some(&offset) = self.string_offsets.get(name) {
            return Ok(offset);
        }
        let offset = u32::try_from(self.strings.len()).map_err(|_| FdtWriteError::TooLarge)?;
        self.strings.extend_from_slice(name.as_bytes());
        self.strings.push(0);
        self.string_offsets.insert(String::from(name), offset);
        Ok(offset)
    }
}

fn push_u32(buffer: &mut Vec<u8>, value: u32) {
    buffer.extend_from_slice(&value.to_be_bytes());
}

fn pad4(buffer: &mut Vec<u8>) {
    while !buffer.len().is_multiple_of(4) {
        buffer.push(0);
    }
}

/// DTSpec table 2.1 for the name, hex-ish text for the unit address.
fn valid_node_name(name: &str) -> bool {
    let (base, unit) = match name.split_once('@') {
        Some((base, unit)) => (base, Some(unit)),
        None => (name, None),
    };
    let base_ok = !base.is_empty()
        && base.len() <= MAX_NODE_NAME
        && base.starts_with(|c: char| c.is_ascii_alphabetic())
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ',' | '.' | '_' | '+' | '-'));
    let unit_ok = unit.is_none_or(|u| {
        !u.is_empty()
            && u.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ',' | '.' | '_' | '+' | '-'))
    });
    base_ok && unit_ok
}

/// DTSpec table 2.2.
fn valid_property_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PROPERTY_NAME
        && name.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, ',' | '.' | '_' | '+' | '?' | '#' | '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(blob: &[u8], offset: usize) -> u32 {
        u32::from_be_bytes(blob[offset..offset + 4].try_into().unwrap())
    }

    #[test]
    fn header_layout_and_deduplicated_strings() {
        let mut w = FdtWriter::new();
        w.reserve_memory(0x4000_0000, 0x1000);
        w.begin_node("").unwrap();
        w.property_u32("#address-cells", 2).unwrap();
        w.begin_node("a@1").unwrap();
        w.property_u32("#address-cells", 1).unwrap();
        w.property_strings("compatible", &["x,y", "z"]).unwrap();
        w.end_node().unwrap();
        w.end_node().unwrap();
        let blob = w.finish().unwrap();

        assert_eq!(be32(&blob, 0), FDT_MAGIC);
        assert_eq!(be32(&blob, 4) as usize, blob.len());
        assert_eq!(be32(&blob, 16), 40, "rsvmap right after the header");
        assert_eq!(be32(&blob, 20), 17);
        assert_eq!(be32(&blob, 24), 16);
        let off_struct = be32(&blob, 8) as usize;
        let off_strings = be32(&blob, 12) as usize;
        assert_eq!(off_struct, 40 + 2 * 16, "one entry plus the terminator");
        assert_eq!(off_struct + be32(&blob, 36) as usize, off_strings);
        let strings = &blob[off_strings..off_strings + be32(&blob, 32) as usize];
        assert_eq!(strings, b"#address-cells\0compatible\0");
        // The reservation entry, then the all-zero terminator.
        assert_eq!(&blob[40..48], &0x4000_0000u64.to_be_bytes());
        assert_eq!(&blob[48..56], &0x1000u64.to_be_bytes());
        assert!(blob[56..72].iter().all(|&b| b == 0));
        assert_eq!(be32(&blob, off_strings - 4), FDT_END);
        // Structure: root, its property, the child named with NUL padding,
        // the repeated name reusing offset 0, the string list.
        let s = &blob[off_struct..off_strings];
        assert_eq!(be32(s, 0), 1); // FDT_BEGIN_NODE ""
        assert_eq!(be32(s, 8), 3); // FDT_PROP
        assert_eq!((be32(s, 12), be32(s, 16), be32(s, 20)), (4, 0, 2));
        assert_eq!(be32(s, 24), 1);
        assert_eq!(&s[28..32], b"a@1\0");
        assert_eq!(
            (be32(s, 32), be32(s, 36), be32(s, 40), be32(s, 44)),
            (3, 4, 0, 1)
        );
        assert_eq!((be32(s, 48), be32(s, 52), be32(s, 56)), (3, 6, 15));
        assert_eq!(&s[60..68], b"x,y\0z\0\0\0");
        assert_eq!((be32(s, 68), be32(s, 72), be32(s, 76)), (2, 2, 9));
        assert_eq!(s.len(), 80);
    }

    #[test]
    fn misuse_is_an_error() {
        let mut w = FdtWriter::new();
        assert_eq!(
            w.property_u32("x", 1),
            Err(FdtWriteError::PropertyOutOfPlace { name: "x".into() })
        );
        assert_eq!(w.begin_node("root"), Err(FdtWriteError::BadRoot));
        w.begin_node("").unwrap();
        w.property_u32("x", 1).unwrap();
        assert_eq!(
            w.property_u32("x", 2),
            Err(FdtWriteError::DuplicateProperty { name: "x".into() })
        );
        assert!(matches!(
            w.property_u32("", 1),
            Err(FdtWriteError::InvalidPropertyName(_))
        ));
        assert!(matches!(
            w.property_u32("a b", 1),
            Err(FdtWriteError::InvalidPropertyName(_))
        ));
        assert!(matches!(
            w.begin_node(""),
            Err(FdtWriteError::InvalidNodeName(_))
        ));
        assert!(matches!(
            w.begin_node("1abc"),
            Err(FdtWriteError::InvalidNodeName(_))
        ));
        assert!(matches!(
            w.begin_node("a@"),
            Err(FdtWriteError::InvalidNodeName(_))
        ));
        assert!(matches!(
            w.property_string("s", "a\0b"),
            Err(FdtWriteError::NulInString { .. })
        ));
        w.begin_node("child").unwrap();
        w.end_node().unwrap();
        assert_eq!(
            w.property_u32("y", 1),
            Err(FdtWriteError::PropertyOutOfPlace { name: "y".into() })
        );
        w.end_node().unwrap();
        assert_eq!(w.end_node(), Err(FdtWriteError::UnbalancedEnd));
        assert_eq!(w.begin_node(""), Err(FdtWriteError::BadRoot));

        let mut open = FdtWriter::new();
        open.begin_node("").unwrap();
        open.begin_node("a").unwrap();
        assert_eq!(open.finish(), Err(FdtWriteError::UnclosedNodes(2)));
        assert_eq!(FdtWriter::new().finish(), Err(FdtWriteError::BadRoot));
    }
}
