//! What an ARM guest image is and where it goes in its domain's RAM: one
//! layout for the hypervisor's loader and for `cargo xtask build`, which
//! refuses a file that is not an image or does not fit before anything
//! boots.
//!
//! An arm64 `Image` (Linux `Documentation/arch/arm64/booting.rst`) loads at
//! its header's `text_offset` from the RAM base and occupies `image_size`
//! bytes (BSS included); anything else is a raw binary (kvm-unit-tests'
//! `.flat`, a bare-metal program) loaded at the RAM base and entered at its
//! first byte. The device tree takes the last [`DTB_SLOT`] bytes of RAM and
//! an initramfs sits page-aligned right below it, clear of the kernel.

use core::fmt;

/// RAM kept at the top for the guest's device tree (Linux requires it
/// 8-byte aligned and not crossing a 2 MiB boundary).
pub const DTB_SLOT: u64 = 2 << 20;
/// The granule an initramfs is placed at.
const PAGE: u64 = 4096;
/// An arm64 `Image` header's length and where its magic sits.
const ARM64_HEADER_LEN: usize = 64;
const ARM64_MAGIC_OFFSET: usize = 0x38;
const ARM64_MAGIC: &[u8; 4] = b"ARM\x64";

/// The kind of guest image a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// An arm64 `Image` with its header.
    Arm64Image {
        /// Where it loads, from the RAM base.
        text_offset: u64,
        /// Bytes it occupies from there, BSS included.
        image_size: u64,
    },
    /// A raw binary, loaded at the RAM base.
    Raw,
}

/// Why a guest image cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// The file is empty.
    Empty,
    /// An ELF file (a `vmlinux`, a linked program), not a loadable image.
    Elf,
    /// A gzip-compressed file (Debian's arm64 `vmlinuz` is one).
    Gzip,
    /// An arm64 `Image` whose `text_offset` is not 4 KiB-aligned.
    MisalignedTextOffset(u64),
    /// Image, initramfs and device tree need more RAM than the domain has.
    TooBig {
        /// Bytes needed.
        needed: u64,
        /// Bytes of RAM the domain has.
        memory: u64,
    },
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "the file is empty"),
            Self::Elf => write!(
                f,
                "it is an ELF file, not an image: give the kernel's arm64 Image, or a raw binary (objcopy -O binary)"
            ),
            Self::Gzip => write!(
                f,
                "it is gzip-compressed (as Debian's vmlinuz is): decompress it (zcat vmlinuz > Image)"
            ),
            Self::MisalignedTextOffset(offset) => {
                write!(
                    f,
                    "its arm64 Image header has text_offset {offset:#x}, not 4 KiB-aligned"
                )
            }
            Self::TooBig { needed, memory } => write!(
                f,
                "image, initramfs and device tree need {} MiB but the domain has {} MiB (memory_mib)",
                needed.div_ceil(1 << 20),
                memory >> 20
            ),
        }
    }
}

/// Reads what kind of image `bytes` is.
pub fn identify(bytes: &[u8]) -> Result<ImageKind, ImageError> {
    if bytes.is_empty() {
        return Err(ImageError::Empty);
    }
    if bytes.starts_with(b"\x7fELF") {
        return Err(ImageError::Elf);
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Err(ImageError::Gzip);
    }
    if bytes.len() < ARM64_HEADER_LEN
        || &bytes[ARM64_MAGIC_OFFSET..ARM64_MAGIC_OFFSET + ARM64_MAGIC.len()] != ARM64_MAGIC
    {
        return Ok(ImageKind::Raw);
    }
    let word = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let text_offset = word(0x8);
    if !text_offset.is_multiple_of(PAGE) {
        return Err(ImageError::MisalignedTextOffset(text_offset));
    }
    // image_size 0 (kernels before 3.17) means "unknown": the file length.
    let image_size = word(0x10).max(bytes.len() as u64);
    Ok(ImageKind::Arm64Image {
        text_offset,
        image_size,
    })
}

/// Where everything goes in a domain's RAM (offsets from its base).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Where the image is copied (and entered).
    pub image_offset: u64,
    /// Where the initramfs is copied (meaningless without one).
    pub initrd_offset: u64,
    /// Where the device tree is written.
    pub dtb_offset: u64,
}

/// Lays out an image of kind `kind` and `image_len` bytes and an initramfs
/// of `initrd_len` bytes (0: none) in `memory` bytes of RAM.
pub fn layout(
    kind: ImageKind,
    image_len: u64,
    initrd_len: u64,
    memory: u64,
) -> Result<Layout, ImageError> {
    let (image_offset, image_span) = match kind {
        ImageKind::Arm64Image {
            text_offset,
            image_size,
        } => (text_offset, image_size.max(image_len)),
        ImageKind::Raw => (0, image_len),
    };
    let initrd_span = initrd_len.div_ceil(PAGE) * PAGE;
    let needed = image_offset
        .saturating_add(image_span)
        .saturating_add(initrd_span)
        .saturating_add(DTB_SLOT);
    if needed > memory {
        return Err(ImageError::TooBig { needed, memory });
    }
    let dtb_offset = memory - DTB_SLOT;
    Ok(Layout {
        image_offset,
        initrd_offset: dtb_offset - initrd_span,
        dtb_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn arm64_image(text_offset: u64, image_size: u64, len: usize) -> alloc::vec::Vec<u8> {
        let mut image = alloc::vec![0u8; len];
        image[0x8..0x10].copy_from_slice(&text_offset.to_le_bytes());
        image[0x10..0x18].copy_from_slice(&image_size.to_le_bytes());
        image[0x38..0x3c].copy_from_slice(ARM64_MAGIC);
        image
    }

    #[test]
    fn kinds_are_told_apart() {
        assert_eq!(identify(&[]), Err(ImageError::Empty));
        assert_eq!(identify(b"\x7fELF\x02\x01\x01"), Err(ImageError::Elf));
        assert_eq!(identify(&[0x1f, 0x8b, 8, 0]), Err(ImageError::Gzip));
        // A kvm-unit-tests .flat begins with code, no header.
        assert_eq!(identify(&[0x1f, 0x20, 0x03, 0xd5]), Ok(ImageKind::Raw));
        assert_eq!(
            identify(&arm64_image(0x8_0000, 30 * MIB, 4096)),
            Ok(ImageKind::Arm64Image {
                text_offset: 0x8_0000,
                image_size: 30 * MIB
            })
        );
        // image_size 0: the file's length.
        assert_eq!(
            identify(&arm64_image(0, 0, 8192)),
            Ok(ImageKind::Arm64Image {
                text_offset: 0,
                image_size: 8192
            })
        );
        assert_eq!(
            identify(&arm64_image(0x123, 0, 4096)),
            Err(ImageError::MisalignedTextOffset(0x123))
        );
        // Too short for a header: raw, whatever it holds.
        assert_eq!(identify(&[0u8; 63]), Ok(ImageKind::Raw));
    }

    #[test]
    fn layout_puts_the_initrd_between_kernel_and_device_tree() {
        let kernel = ImageKind::Arm64Image {
            text_offset: 0,
            image_size: 40 * MIB,
        };
        let layout = layout(kernel, 30 * MIB, 5 * MIB + 1, 256 * MIB).unwrap();
        assert_eq!(layout.image_offset, 0);
        assert_eq!(layout.dtb_offset, 254 * MIB);
        assert_eq!(layout.initrd_offset, 254 * MIB - (5 * MIB + PAGE));
        // A raw binary loads at the RAM base.
        assert_eq!(layout_raw(MIB).image_offset, 0);
    }

    fn layout_raw(len: u64) -> Layout {
        layout(ImageKind::Raw, len, 0, 16 * MIB).unwrap()
    }

    #[test]
    fn too_big_says_how_much_is_needed() {
        let kernel = ImageKind::Arm64Image {
            text_offset: 0x20_0000,
            image_size: 40 * MIB,
        };
        assert_eq!(
            layout(kernel, 40 * MIB, 30 * MIB, 64 * MIB),
            Err(ImageError::TooBig {
                needed: 2 * MIB + 40 * MIB + 30 * MIB + DTB_SLOT,
                memory: 64 * MIB
            })
        );
        // Exactly full fits.
        assert!(layout(ImageKind::Raw, 14 * MIB, 0, 16 * MIB).is_ok());
        assert!(layout(ImageKind::Raw, 14 * MIB + 1, 0, 16 * MIB).is_err());
        // Saturating: a huge header cannot wrap around.
        let huge = ImageKind::Arm64Image {
            text_offset: u64::MAX - PAGE + 1,
            image_size: u64::MAX,
        };
        assert!(layout(huge, 1, 0, 16 * MIB).is_err());
    }
}
