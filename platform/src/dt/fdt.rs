//! A strict, bounds-checked reader for flattened device tree blobs (DTSpec v0.4, ch. 5).
//!
//! Written by hand rather than taken from the `fdt` crate because `fdt` 0.1.5
//! panics on malformed blobs (`assert_eq!(.., FDT_BEGIN_NODE, "bad node")`,
//! `panic!("bad prop")`, `unwrap()` on truncated streams and string offsets), and a
//! panic at boot is a bug here: a corrupt blob must give a [`DtError`] naming the
//! byte offset instead. The reader checks every offset and length once, then hands
//! the rest of the module a plain tree of nodes and properties that borrow the blob.

use alloc::string::String;
use alloc::vec::Vec;

use super::error::{DtError, StructureProblem};

/// `0xd00dfeed`, big-endian, at the start of every blob.
pub const FDT_MAGIC: u32 = 0xd00d_feed;

const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_NOP: u32 = 0x4;
const FDT_END: u32 = 0x9;

/// Size of the v17 header.
const HEADER_LEN: usize = 40;
/// The oldest layout we read: v16 lacks `size_dt_struct`, which we need to bound the walk.
const MIN_VERSION: u32 = 17;
/// Nesting deeper than this is treated as corruption (real trees stay below 10).
const MAX_DEPTH: usize = 64;

/// One property: a name from the strings block and its raw big-endian value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Property<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// One node of the tree.
#[derive(Clone, Debug)]
pub(crate) struct Node<'a> {
    /// Name with unit address (`cpu@100`); empty for the root.
    pub name: &'a str,
    pub parent: Option<usize>,
    pub properties: Vec<Property<'a>>,
    pub children: Vec<usize>,
}

/// A parsed blob: nodes in document order (index 0 is the root) and the memory
/// reservation block.
#[derive(Clone, Debug)]
pub(crate) struct Tree<'a> {
    pub nodes: Vec<Node<'a>>,
    pub reservations: Vec<(u64, u64)>,
    /// `(phandle, node)` sorted by phandle, for cpu-map and interrupt-parent look-ups.
    phandles: Vec<(u32, usize)>,
}

fn be32(blob: &[u8], offset: usize) -> Option<u32> {
    let bytes = blob.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn be64(blob: &[u8], offset: usize) -> Option<u64> {
    let high = be32(blob, offset)?;
    let low = be32(blob, offset.checked_add(4)?)?;
    Some((u64::from(high) << 32) | u64::from(low))
}

/// Whether `blob` starts with the FDT magic (for tools that must tell a DTB from
/// other firmware tables).
pub fn is_fdt(blob: &[u8]) -> bool {
    be32(blob, 0) == Some(FDT_MAGIC)
}

/// Reads a NUL-terminated string starting at `offset` in `block`; `None` if it is
/// unterminated or not UTF-8.
fn c_string(block: &[u8], offset: usize) -> Option<&str> {
    let rest = block.get(offset..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    core::str::from_utf8(&rest[..end]).ok()
}

fn align4(offset: usize) -> Option<usize> {
    offset.checked_add(3).map(|v| v & !3)
}

impl<'a> Tree<'a> {
    /// Checks the header and every block, and builds the node tree.
    pub fn parse(blob: &'a [u8]) -> Result<Self, DtError> {
        if blob.len() < HEADER_LEN {
            return Err(DtError::Truncated {
                needed: HEADER_LEN,
                available: blob.len(),
            });
        }
        let field = |index: usize| be32(blob, index * 4).unwrap_or(0);
        let magic = field(0);
        if magic != FDT_MAGIC {
            return Err(DtError::BadMagic { found: magic });
        }
        let total_size = field(1) as usize;
        let (off_struct, off_strings, off_rsvmap) =
            (field(2) as usize, field(3) as usize, field(4) as usize);
        let (version, last_compatible) = (field(5), field(6));
        let (size_strings, size_struct) = (field(8) as usize, field(9) as usize);
        if version < MIN_VERSION || last_compatible > MIN_VERSION {
            return Err(DtError::UnsupportedVersion {
                version,
                last_compatible,
            });
        }
        if total_size > blob.len() {
            return Err(DtError::Truncated {
                needed: total_size,
                available: blob.len(),
            });
        }
        if total_size < HEADER_LEN {
            return Err(DtError::BlockOutOfBounds {
                block: "header",
                offset: 0,
                size: HEADER_LEN,
                total_size,
            });
        }
        let blob = &blob[..total_size];
        let block = |name: &'static str, offset: usize, size: usize| -> Result<&'a [u8], DtError> {
            offset
                .checked_add(size)
                .filter(|&end| offset >= HEADER_LEN && end <= total_size)
                .map(|end| &blob[offset..end])
                .ok_or(DtError::BlockOutOfBounds {
                    block: name,
                    offset,
                    size,
                    total_size,
                })
        };
        let structure = block("structure", off_struct, size_struct)?;
        let strings = block("strings", off_strings, size_strings)?;
        let rsvmap = block(
            "memory reservation",
            off_rsvmap,
            total_size.saturating_sub(off_rsvmap),
        )?;
        let reservations = parse_reservations(rsvmap, off_rsvmap)?;
        let nodes = parse_structure(structure, strings, off_struct)?;
        let mut phandles: Vec<(u32, usize)> = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            let phandle = node
                .properties
                .iter()
                .find(|p| p.name == "phandle" || p.name == "linux,phandle")
                .and_then(|p| {
                    if p.value.len() == 4 {
                        be32(p.value, 0)
                    } else {
                        None
                    }
                });
            if let Some(phandle) = phandle {
                phandles.push((phandle, index));
            }
        }
        phandles.sort_unstable();
        Ok(Self {
            nodes,
            reservations,
            phandles,
        })
    }

    /// The node with this phandle (the first one, if a broken blob repeats it).
    pub fn by_phandle(&self, phandle: u32) -> Option<usize> {
        let start = self.phandles.partition_point(|&(p, _)| p < phandle);
        self.phandles
            .get(start)
            .filter(|&&(p, _)| p == phandle)
            .map(|&(_, node)| node)
    }

    /// The full path of a node, for messages (`/cpus/cpu@100`).
    pub fn path(&self, node: usize) -> String {
        let mut names: Vec<&str> = Vec::new();
        let mut current = Some(node);
        while let Some(index) = current {
            let Some(n) = self.nodes.get(index) else {
                break;
            };
            if n.parent.is_some() {
                names.push(n.name);
            }
            current = n.parent;
        }
        if names.is_empty() {
            return String::from("/");
        }
        let mut path = String::new();
        for name in names.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
        path
    }

    /// Finds a node by absolute path; a component without a unit address matches a
    /// node whose name has one (`/memory` finds `memory@0`) when no exact match exists.
    pub fn find(&self, path: &str) -> Option<usize> {
        let mut current = 0usize;
        if self.nodes.is_empty() || !path.starts_with('/') {
            return None;
        }
        for component in path.split('/').filter(|c| !c.is_empty()) {
            let children = &self.nodes.get(current)?.children;
            let exact = children
                .iter()
                .copied()
                .find(|&c| self.nodes[c].name == component);
            current = match exact {
                Some(child) => child,
                None => children.iter().copied().find(|&c| {
                    !component.contains('@')
                        && self.nodes[c].name.split('@').next() == Some(component)
                })?,
            };
        }
        Some(current)
    }

    /// The raw value of a property.
    pub fn property(&self, node: usize, name: &str) -> Option<&'a [u8]> {
        self.nodes
            .get(node)?
            .properties
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value)
    }

    /// A one-cell property.
    pub fn u32_property(&self, node: usize, name: &str) -> Option<u32> {
        self.property(node, name)
            .filter(|v| v.len() == 4)
            .and_then(|v| be32(v, 0))
    }

    /// A string property (the first string of a string list).
    pub fn str_property(&self, node: usize, name: &str) -> Option<&'a str> {
        self.property(node, name).and_then(|v| c_string(v, 0))
    }

    /// All strings of a string-list property (invalid UTF-8 entries are skipped).
    pub fn strings(&self, node: usize, name: &str) -> Vec<&'a str> {
        let Some(value) = self.property(node, name) else {
            return Vec::new();
        };
        value
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .filter_map(|s| core::str::from_utf8(s).ok())
            .collect()
    }

    /// Whether `compatible` lists `wanted` (without allocating: scans run over every node).
    pub fn is_compatible(&self, node: usize, wanted: &str) -> bool {
        self.property(node, "compatible")
            .is_some_and(|value| value.split(|&b| b == 0).any(|s| s == wanted.as_bytes()))
    }

    /// `status` is absent, "okay" or "ok".
    pub fn is_available(&self, node: usize) -> bool {
        matches!(
            self.str_property(node, "status"),
            None | Some("okay") | Some("ok")
        )
    }

    /// The node name without its unit address.
    pub fn base_name(&self, node: usize) -> &'a str {
        self.nodes
            .get(node)
            .map_or("", |n| n.name.split('@').next().unwrap_or(""))
    }

    /// Reads a property's value as big-endian cells.
    pub fn cells(&self, node: usize, name: &str) -> Option<Vec<u32>> {
        let value = self.property(node, name)?;
        if value.len() % 4 != 0 {
            return None;
        }
        Some(
            value
                .chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

/// Joins `count` cells (at most two significant) into one number; `None` if a
/// higher cell is non-zero or `count` is absurd.
pub(crate) fn join_cells(cells: &[u32]) -> Option<u64> {
    if cells.len() > 4 {
        return None;
    }
    let mut value: u64 = 0;
    for &cell in cells {
        if value >> 32 != 0 {
            return None;
        }
        value = (value << 32) | u64::from(cell);
    }
    Some(value)
}

fn parse_reservations(block: &[u8], base: usize) -> Result<Vec<(u64, u64)>, DtError> {
    let mut reservations = Vec::new();
    let mut offset = 0usize;
    loop {
        let (Some(address), Some(size)) = (be64(block, offset), be64(block, offset + 8)) else {
            return Err(DtError::Structure {
                offset: base + offset,
                problem: StructureProblem::UnterminatedReservations,
            });
        };
        if address == 0 && size == 0 {
            return Ok(reservations);
        }
        reservations.push((address, size));
        offset += 16;
    }
}

fn parse_structure<'a>(
    structure: &'a [u8],
    strings: &'a [u8],
    base: usize,
) -> Result<Vec<Node<'a>>, DtError> {
    let error = |offset: usize, problem| DtError::Structure {
        offset: base + offset,
        problem,
    };
    let mut nodes: Vec<Node<'a>> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut offset = 0usize;
    let mut root_closed = false;
    loop {
        let Some(token) = be32(structure, offset) else {
            return Err(error(offset, StructureProblem::MissingEnd));
        };
        let token_offset = offset;
        offset += 4;
        match token {
            FDT_BEGIN_NODE => {
                if root_closed {
                    return Err(error(token_offset, StructureProblem::NodeAfterRoot));
                }
                let name = c_string(structure, offset)
                    .ok_or(error(offset, StructureProblem::BadNodeName))?;
                offset = align4(offset + name.len() + 1)
                    .ok_or(error(offset, StructureProblem::BadNodeName))?;
                if stack.len() >= MAX_DEPTH {
                    return Err(error(token_offset, StructureProblem::TooDeep));
                }
                let parent = stack.last().copied();
                if parent.is_none() && !nodes.is_empty() {
                    return Err(error(token_offset, StructureProblem::NodeAfterRoot));
                }
                let index = nodes.len();
                if let Some(parent) = parent {
                    nodes[parent].children.push(index);
                }
                nodes.push(Node {
                    name,
                    parent,
                    properties: Vec::new(),
                    children: Vec::new(),
                });
                stack.push(index);
            }
            FDT_END_NODE => {
                if stack.pop().is_none() {
                    return Err(error(token_offset, StructureProblem::UnbalancedEndNode));
                }
                root_closed = stack.is_empty();
            }
            FDT_PROP => {
                let Some(&current) = stack.last() else {
                    return Err(error(token_offset, StructureProblem::PropertyOutsideNode));
                };
                let (Some(len), Some(name_offset)) =
                    (be32(structure, offset), be32(structure, offset + 4))
                else {
                    return Err(error(offset, StructureProblem::PropertyOverrun));
                };
                let start = offset + 8;
                let value = start
                    .checked_add(len as usize)
                    .and_then(|end| structure.get(start..end))
                    .ok_or(error(token_offset, StructureProblem::PropertyOverrun))?;
                let name = c_string(strings, name_offset as usize).ok_or(error(
                    token_offset,
                    StructureProblem::BadPropertyName { name_offset },
                ))?;
                offset = align4(start + value.len())
                    .ok_or(error(token_offset, StructureProblem::PropertyOverrun))?;
                nodes[current].properties.push(Property { name, value });
            }
            FDT_NOP => {}
            FDT_END => {
                if !stack.is_empty() || nodes.is_empty() {
                    return Err(error(token_offset, StructureProblem::EarlyEnd));
                }
                return Ok(nodes);
            }
            other => {
                return Err(error(
                    token_offset,
                    StructureProblem::UnknownToken { token: other },
                ));
            }
        }
    }
}
