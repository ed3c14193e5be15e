//! The PPTT: processor hierarchy nodes and their parent links (ACPI 6.5 §5.2.30).
//! Cache and ID nodes are skipped.

use alloc::vec::Vec;

use super::error::{AcpiError, AcpiWarning, Signature};
use super::sdt::{SDT_HEADER_LENGTH, Sdt, entries, u32_at};

/// Processor hierarchy node flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeFlags(pub u32);

impl NodeFlags {
    /// Bit 0: this node is a physical package (socket).
    pub fn physical_package(self) -> bool {
        self.0 & 1 != 0
    }
    /// Bit 1: `acpi_processor_id` is meaningful.
    pub fn processor_id_valid(self) -> bool {
        self.0 & (1 << 1) != 0
    }
    /// Bit 2: the node is a hardware thread (PPTT revision 2+).
    pub fn is_thread(self) -> bool {
        self.0 & (1 << 2) != 0
    }
    /// Bit 3: the node is a leaf (PPTT revision 2+; some firmware leaves it clear).
    pub fn is_leaf(self) -> bool {
        self.0 & (1 << 3) != 0
    }
    /// Bit 4: every child is the same implementation.
    pub fn identical(self) -> bool {
        self.0 & (1 << 4) != 0
    }
}

/// One processor hierarchy node (type 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessorNode {
    /// Offset in the table (what `parent` fields refer to).
    pub offset: usize,
    /// Flags.
    pub flags: NodeFlags,
    /// Offset of the parent node, 0 for none.
    pub parent: u32,
    /// ACPI processor UID (valid when the flag says so).
    pub acpi_processor_id: u32,
    /// Number of private resources (caches) listed.
    pub private_resources: u32,
}

/// Where a processor sits: the nodes that make its package, cluster, core and
/// thread (table offsets, usable as sort keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PpttPosition {
    /// The physical-package node (or the root when none is flagged).
    pub package: usize,
    /// The core's parent when it is below the package; the package otherwise.
    pub cluster: usize,
    /// The core node (the leaf, or the leaf's parent when the leaf is a thread).
    pub core: usize,
    /// The leaf node for a thread; equal to `core` otherwise.
    pub thread: usize,
}

/// A parsed PPTT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pptt {
    /// Table revision (leaf and thread flags exist from 2).
    pub revision: u8,
    /// The processor hierarchy nodes, by offset.
    pub nodes: Vec<ProcessorNode>,
    /// Unknown node types, skipped.
    pub warnings: Vec<AcpiWarning>,
    /// `has_children[i]`: some node names `nodes[i]` as its parent.
    has_children: Vec<bool>,
}

const T: Signature = Signature::PPTT;

impl Pptt {
    /// Parses a PPTT. Bad checksum, truncation and zero-length nodes are errors;
    /// parent links are checked when a position is asked for.
    pub fn parse(bytes: &[u8]) -> Result<Self, AcpiError> {
        let table = Sdt::parse(bytes, Some(T))?;
        let mut pptt = Self {
            revision: table.header.revision,
            nodes: Vec::new(),
            warnings: Vec::new(),
            has_children: Vec::new(),
        };
        for entry in entries(&table, SDT_HEADER_LENGTH)? {
            match entry.entry_type {
                0 => {
                    entry.require(T, 20)?;
                    let e = entry.bytes;
                    pptt.nodes.push(ProcessorNode {
                        offset: entry.offset,
                        flags: NodeFlags(u32_at(e, 4).unwrap_or_default()),
                        parent: u32_at(e, 8).unwrap_or_default(),
                        acpi_processor_id: u32_at(e, 12).unwrap_or_default(),
                        private_resources: u32_at(e, 16).unwrap_or_default(),
                    });
                }
                // Cache type and ID structures: not needed for the topology.
                1 | 2 => {}
                entry_type => pptt.warnings.push(AcpiWarning::UnknownEntry {
                    table: T,
                    offset: entry.offset,
                    entry_type,
                }),
            }
        }
        pptt.has_children = alloc::vec![false; pptt.nodes.len()];
        for node in &pptt.nodes {
            if let Some(parent) = pptt.index_of(node.parent as usize) {
                pptt.has_children[parent] = true;
            }
        }
        Ok(pptt)
    }

    fn index_of(&self, offset: usize) -> Option<usize> {
        self.nodes.binary_search_by_key(&offset, |n| n.offset).ok()
    }

    /// The node at `offset`, if it is a processor node. Nodes are in offset order.
    pub fn node(&self, offset: usize) -> Option<&ProcessorNode> {
        self.index_of(offset).and_then(|i| self.nodes.get(i))
    }

    /// Whether `node` is a leaf: flagged so (revision 2+), or no node names it as
    /// parent (for tables like the LX2160A's that leave the flag clear).
    pub fn is_leaf(&self, node: &ProcessorNode) -> bool {
        (self.revision >= 2 && node.flags.is_leaf())
            || self
                .index_of(node.offset)
                .is_some_and(|i| !self.has_children.get(i).copied().unwrap_or(false))
    }

    /// The leaf node with a valid ACPI processor id equal to `uid`.
    pub fn leaf_for(&self, uid: u32) -> Option<&ProcessorNode> {
        self.nodes.iter().find(|node| {
            node.flags.processor_id_valid() && node.acpi_processor_id == uid && self.is_leaf(node)
        })
    }

    /// `node` and its ancestors, nearest first. A parent that is not a processor
    /// node, or a cycle, is an error; the walk is bounded by the node count.
    pub fn ancestry(&self, node: &ProcessorNode) -> Result<Vec<ProcessorNode>, AcpiError> {
        let mut chain = Vec::new();
        let mut current = *node;
        loop {
            if chain.len() > self.nodes.len()
                || chain
                    .iter()
                    .any(|n: &ProcessorNode| n.offset == current.offset)
            {
                return Err(AcpiError::PpttCycle {
                    offset: node.offset,
                });
            }
            chain.push(current);
            if current.parent == 0 {
                return Ok(chain);
            }
            current = *self
                .node(current.parent as usize)
                .ok_or(AcpiError::PpttBadParent {
                    offset: current.offset,
                    parent: current.parent,
                })?;
        }
    }

    /// The package/cluster/core/thread nodes of the processor with ACPI UID `uid`.
    pub fn position(&self, uid: u32) -> Result<PpttPosition, AcpiError> {
        let leaf = self
            .leaf_for(uid)
            .ok_or(AcpiError::PpttMissingProcessor { uid })?;
        let chain = self.ancestry(leaf)?;
        // A thread's core is its parent (if it has one).
        let core_index = usize::from(leaf.flags.is_thread() && chain.len() > 1);
        let above_core = &chain[core_index + 1..];
        let package = above_core
            .iter()
            .find(|n| n.flags.physical_package())
            .or(above_core.last())
            .map_or(chain[core_index].offset, |n| n.offset);
        let cluster = above_core.first().map_or(package, |n| n.offset);
        Ok(PpttPosition {
            package,
            cluster,
            core: chain[core_index].offset,
            thread: leaf.offset,
        })
    }
}
