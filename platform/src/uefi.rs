//! What the UEFI entry hands to the hypervisor, and the UEFI memory map: pure
//! logic, host-tested. The entry itself (boot services, ExitBootServices) is
//! `arch::aarch64::efi`.
//!
//! Types and constants come from `uefi-raw` (the raw bindings of the `uefi`
//! project). The `uefi` crate itself does not fit: it wants to own the entry
//! point, the panic handler and the allocator of an `*-unknown-uefi` target
//! whose linker writes the PE file, while this image is one `aarch64-unknown-none-softfloat`
//! ELF that is at once an arm64 Linux `Image` and a PE application with a
//! hand-written header (boot.S), and that must keep running after boot services
//! are gone.

use alloc::vec::Vec;
use core::fmt;

pub use uefi_raw::table::boot::MemoryType;

/// Bytes reserved for the memory map in the hand-off (about 680 descriptors of
/// 48 bytes; real servers report a few hundred).
pub const MAX_MEMORY_MAP_BYTES: usize = 32 * 1024;

/// Marks a filled-in hand-off (a DTB boot leaves it zero).
pub const HANDOFF_MAGIC: u64 = u64::from_le_bytes(*b"HVUEFI01");

/// Bytes of a UEFI page.
pub const PAGE_BYTES: u64 = 4096;

/// What the UEFI entry learnt before it left boot services. Lives in the
/// image's `.data`, so it survives the jump to the Image entry (which clears
/// `.bss`).
#[repr(C, align(8))]
pub struct UefiHandoff {
    /// [`HANDOFF_MAGIC`] once complete.
    pub magic: u64,
    /// Physical address of the ACPI 2.0 RSDP from the configuration table.
    pub rsdp: u64,
    /// Bytes of the memory map in `map`.
    pub map_size: u64,
    /// Bytes per memory descriptor (the firmware's, often more than 40).
    pub descriptor_size: u64,
    /// Memory descriptor version (1).
    pub descriptor_version: u32,
    /// How many ExitBootServices calls it took (a stale map key costs one).
    pub exit_attempts: u32,
    /// The memory map the final ExitBootServices call was made with.
    pub map: [u8; MAX_MEMORY_MAP_BYTES],
}

impl UefiHandoff {
    /// An empty hand-off (not a UEFI boot).
    pub const EMPTY: Self = Self {
        magic: 0,
        rsdp: 0,
        map_size: 0,
        descriptor_size: 0,
        descriptor_version: 0,
        exit_attempts: 0,
        map: [0; MAX_MEMORY_MAP_BYTES],
    };

    /// Whether the UEFI entry filled this in.
    pub fn is_complete(&self) -> bool {
        self.magic == HANDOFF_MAGIC
    }

    /// The memory map.
    pub fn memory_map(&self) -> Result<MemoryMap<'_>, MemoryMapError> {
        let size = usize::try_from(self.map_size).unwrap_or(usize::MAX);
        let bytes = self
            .map
            .get(..size)
            .ok_or(MemoryMapError::TooLarge { size })?;
        MemoryMap::new(bytes, usize::try_from(self.descriptor_size).unwrap_or(0))
    }
}

/// Why a memory map cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryMapError {
    /// The descriptor size is smaller than a version-1 descriptor (40 bytes).
    DescriptorTooSmall {
        /// The size the firmware gave.
        size: usize,
    },
    /// The map is not a whole number of descriptors.
    Ragged {
        /// Map bytes.
        size: usize,
        /// Descriptor bytes.
        descriptor_size: usize,
    },
    /// The map does not fit the hand-off buffer.
    TooLarge {
        /// Map bytes.
        size: usize,
    },
}

impl fmt::Display for MemoryMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DescriptorTooSmall { size } => write!(
                f,
                "memory descriptor size {size} is below the 40 bytes of a version-1 descriptor"
            ),
            Self::Ragged {
                size,
                descriptor_size,
            } => write!(
                f,
                "memory map of {size} bytes is not a whole number of {descriptor_size}-byte descriptors"
            ),
            Self::TooLarge { size } => write!(
                f,
                "memory map of {size} bytes is larger than the {MAX_MEMORY_MAP_BYTES} bytes reserved for it"
            ),
        }
    }
}

/// Size of the fields of a version-1 `EFI_MEMORY_DESCRIPTOR`.
const DESCRIPTOR_V1_BYTES: usize = 40;

/// One memory map entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// What the firmware uses it for.
    pub kind: MemoryType,
    /// Physical start (page aligned).
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
    /// Attribute bits (`EFI_MEMORY_WB` = 0x8, `EFI_MEMORY_RUNTIME` = 1 << 63, ...).
    pub attribute: u64,
}

impl MemoryRegion {
    /// RAM the hypervisor may map as Normal memory: everything but MMIO,
    /// reserved, unusable and unaccepted memory.
    pub fn is_ram(&self) -> bool {
        matches!(
            self.kind,
            MemoryType::LOADER_CODE
                | MemoryType::LOADER_DATA
                | MemoryType::BOOT_SERVICES_CODE
                | MemoryType::BOOT_SERVICES_DATA
                | MemoryType::RUNTIME_SERVICES_CODE
                | MemoryType::RUNTIME_SERVICES_DATA
                | MemoryType::CONVENTIONAL
                | MemoryType::ACPI_RECLAIM
                | MemoryType::ACPI_NON_VOLATILE
                | MemoryType::PERSISTENT_MEMORY
        )
    }

    /// RAM that is free once boot services are gone: conventional memory and
    /// what boot services used. Loader memory (this image, the shell's loader
    /// data) and everything runtime services or ACPI keep stays out.
    pub fn is_free(&self) -> bool {
        matches!(
            self.kind,
            MemoryType::CONVENTIONAL
                | MemoryType::BOOT_SERVICES_CODE
                | MemoryType::BOOT_SERVICES_DATA
        )
    }
}

/// A UEFI memory map as GetMemoryMap returned it.
#[derive(Clone, Copy, Debug)]
pub struct MemoryMap<'a> {
    bytes: &'a [u8],
    descriptor_size: usize,
}

impl<'a> MemoryMap<'a> {
    /// Checks the sizes; descriptors are read as [`MemoryMap::regions`] walks them.
    pub fn new(bytes: &'a [u8], descriptor_size: usize) -> Result<Self, MemoryMapError> {
        if descriptor_size < DESCRIPTOR_V1_BYTES {
            return Err(MemoryMapError::DescriptorTooSmall {
                size: descriptor_size,
            });
        }
        if !bytes.len().is_multiple_of(descriptor_size) {
            return Err(MemoryMapError::Ragged {
                size: bytes.len(),
                descriptor_size,
            });
        }
        Ok(Self {
            bytes,
            descriptor_size,
        })
    }

    /// The entries in map order. An entry whose end overflows 64 bits is left out.
    pub fn regions(&self) -> impl Iterator<Item = MemoryRegion> + 'a {
        self.bytes
            .chunks_exact(self.descriptor_size)
            .filter_map(|d| {
                let u64_at = |offset: usize| {
                    let mut word = [0; 8];
                    word.copy_from_slice(&d[offset..offset + 8]);
                    u64::from_le_bytes(word)
                };
                let kind = MemoryType(u32::from_le_bytes([d[0], d[1], d[2], d[3]]));
                let base = u64_at(8);
                let size = u64_at(24).checked_mul(PAGE_BYTES)?;
                base.checked_add(size)?;
                Some(MemoryRegion {
                    kind,
                    base,
                    size,
                    attribute: u64_at(32),
                })
            })
    }

    /// All RAM ([`MemoryRegion::is_ram`]) as sorted, merged `(base, size)` ranges:
    /// what the identity map makes Normal.
    pub fn ram(&self) -> Vec<(u64, u64)> {
        merge(self.regions().filter(MemoryRegion::is_ram))
    }

    /// Free RAM ([`MemoryRegion::is_free`]) as sorted, merged `(base, size)`
    /// ranges: where the heap may go.
    pub fn free(&self) -> Vec<(u64, u64)> {
        merge(self.regions().filter(MemoryRegion::is_free))
    }
}

/// Sorts regions and merges touching or overlapping ones.
fn merge(regions: impl Iterator<Item = MemoryRegion>) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = regions
        .filter(|r| r.size > 0)
        .map(|r| (r.base, r.base + r.size))
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
        .into_iter()
        .map(|(start, end)| (start, end - start))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One descriptor in the firmware's layout, padded to `size` bytes.
    fn descriptor(kind: MemoryType, base: u64, pages: u64, size: usize) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&kind.0.to_le_bytes());
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&base.to_le_bytes());
        d.extend_from_slice(&0u64.to_le_bytes());
        d.extend_from_slice(&pages.to_le_bytes());
        d.extend_from_slice(&0xfu64.to_le_bytes());
        d.resize(size, 0xaa);
        d
    }

    /// A map like edk2's on QEMU virt with 2 GiB: 48-byte descriptors, RAM at
    /// 1 GiB cut into many pieces, MMIO for the flash and a runtime region.
    fn qemu_like_map() -> Vec<u8> {
        let entries = [
            (MemoryType::MMIO, 0x0400_0000, 0x4000),
            (MemoryType::CONVENTIONAL, 0x4000_0000, 0x80),
            (MemoryType::LOADER_CODE, 0x4008_0000, 0x200),
            (MemoryType::CONVENTIONAL, 0x4028_0000, 0x3_0000),
            (MemoryType::ACPI_RECLAIM, 0x7028_0000, 0x10),
            (MemoryType::BOOT_SERVICES_DATA, 0x7029_0000, 0x1000),
            (MemoryType::RUNTIME_SERVICES_DATA, 0x7129_0000, 0x100),
            (MemoryType::BOOT_SERVICES_CODE, 0x7139_0000, 0xec70),
            (MemoryType::RESERVED, 0xc000_0000, 0x10),
        ];
        entries
            .iter()
            .flat_map(|&(kind, base, pages)| descriptor(kind, base, pages, 48))
            .collect()
    }

    #[test]
    fn ram_merges_every_ram_kind_and_leaves_mmio_and_reserved_out() {
        let bytes = qemu_like_map();
        let map = MemoryMap::new(&bytes, 48).unwrap();
        assert_eq!(map.regions().count(), 9);
        // 0x7139_0000 + 0xec70 pages ends at 2 GiB: RAM is 1 GiB..2 GiB in one piece.
        assert_eq!(map.ram(), [(0x4000_0000, 0x4000_0000)]);
    }

    #[test]
    fn free_excludes_the_loader_runtime_and_acpi_regions() {
        let bytes = qemu_like_map();
        let map = MemoryMap::new(&bytes, 48).unwrap();
        assert_eq!(
            map.free(),
            [
                (0x4000_0000, 0x8_0000),
                (0x4028_0000, 0x3000_0000),
                (0x7029_0000, 0x100_0000),
                (0x7139_0000, 0xec70 * PAGE_BYTES),
            ]
        );
    }

    #[test]
    fn bad_sizes_are_errors() {
        let bytes = qemu_like_map();
        assert_eq!(
            MemoryMap::new(&bytes, 24).unwrap_err(),
            MemoryMapError::DescriptorTooSmall { size: 24 }
        );
        assert_eq!(
            MemoryMap::new(&bytes[..47], 48).unwrap_err(),
            MemoryMapError::Ragged {
                size: 47,
                descriptor_size: 48
            }
        );
        let mut handoff = alloc::boxed::Box::new(UefiHandoff::EMPTY);
        assert!(!handoff.is_complete());
        handoff.map_size = MAX_MEMORY_MAP_BYTES as u64 + 48;
        handoff.descriptor_size = 48;
        assert!(matches!(
            handoff.memory_map(),
            Err(MemoryMapError::TooLarge { .. })
        ));
    }

    #[test]
    fn an_overflowing_entry_is_left_out() {
        let mut bytes = descriptor(MemoryType::CONVENTIONAL, u64::MAX - 0xfff, 2, 40);
        bytes.extend(descriptor(MemoryType::CONVENTIONAL, 0x1000, u64::MAX, 40));
        bytes.extend(descriptor(MemoryType::CONVENTIONAL, 0x8000_0000, 1, 40));
        let map = MemoryMap::new(&bytes, 40).unwrap();
        assert_eq!(map.ram(), [(0x8000_0000, 0x1000)]);
    }

    #[test]
    fn handoff_reads_its_map() {
        let mut handoff = alloc::boxed::Box::new(UefiHandoff::EMPTY);
        let bytes = qemu_like_map();
        handoff.map[..bytes.len()].copy_from_slice(&bytes);
        handoff.map_size = bytes.len() as u64;
        handoff.descriptor_size = 48;
        handoff.magic = HANDOFF_MAGIC;
        assert!(handoff.is_complete());
        assert_eq!(handoff.memory_map().unwrap().regions().count(), 9);
    }
}
