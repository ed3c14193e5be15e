//! Multiboot (version 1) for x86 domains, hardware-independent: an ELF32
//! kernel with a multiboot header (what kvm-unit-tests' x86 `.flat` images
//! and many hobby and test kernels are) checked, its segments placed in
//! guest RAM at their physical addresses, and the multiboot information
//! structure (memory sizes, command line, one module) written after them.
//! The boot CPU then starts in 32-bit protected mode at the ELF entry with
//! `EAX` = [`BOOTLOADER_MAGIC`] and `EBX` = the information's address
//! (Multiboot Specification 0.6.96, section 3.2): `boot::multiboot_entry_vmcb`.
//!
//! Written by hand: the loader needs only the ELF32 program headers and a
//! few fixed fields, and the `no_std` ELF crates either parse ELF64 only or
//! bring far more than this.

use core::fmt;

/// What the header's magic field holds.
pub const HEADER_MAGIC: u32 = 0x1bad_b002;
/// What `EAX` holds at the kernel's entry.
pub const BOOTLOADER_MAGIC: u32 = 0x2bad_b002;
/// The header must be in the image's first 8 KiB, 4-byte aligned.
const HEADER_SEARCH: usize = 8192;
/// Header flag bit 16: the address fields are valid (a.out kludge); not
/// needed for ELF, not supported.
const HEADER_AOUT_KLUDGE: u32 = 1 << 16;
/// Header flags this loader honours: page-aligned modules (bit 0, always
/// done) and memory information (bit 1, always given). Bit 2 (video mode)
/// is ignored, as the specification allows for a loader without graphics.
const HEADER_KNOWN_REQUIREMENTS: u32 = 0b111;

/// Information flag: `mem_lower`/`mem_upper` are valid.
const INFO_MEMORY: u32 = 1 << 0;
/// Information flag: `cmdline` is valid.
const INFO_CMDLINE: u32 = 1 << 2;
/// Information flag: `mods_count`/`mods_addr` are valid.
const INFO_MODULES: u32 = 1 << 3;
/// Size of the multiboot information structure (up to the VBE fields).
const INFO_BYTES: usize = 88;
/// Size of one module entry.
const MODULE_BYTES: usize = 16;
/// Conventional memory the information reports below 1 MiB (KiB).
const MEM_LOWER_KIB: u32 = 640;
/// Where upper memory starts.
const UPPER_MEMORY: u64 = 0x10_0000;
/// The PC's legacy hole between conventional and upper memory (video
/// memory, option ROMs, the BIOS area): not RAM to the guest, and where the
/// hypervisor puts the domain's ACPI tables (0xE0000), so nothing is loaded
/// there.
const LEGACY_HOLE: core::ops::Range<u64> = (MEM_LOWER_KIB as u64 * 1024)..UPPER_MEMORY;

/// ELF identification: 32-bit, little-endian, version 1.
const ELFCLASS32: u8 = 1;
const ELFDATA2LSB: u8 = 1;
/// An executable for the 80386.
const ET_EXEC: u16 = 2;
const EM_386: u16 = 3;
/// A loadable program header.
const PT_LOAD: u32 = 1;
/// Bytes of an ELF32 header and of one program header.
const EHDR_BYTES: usize = 52;
const PHDR_BYTES: usize = 32;
/// At most this many program headers are read.
const MAX_SEGMENTS: usize = 16;

/// Why an image cannot be booted by multiboot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultibootError {
    /// Not an ELF file, or not a 32-bit little-endian x86 executable.
    NotElf32,
    /// No multiboot header in the first 8 KiB.
    NoHeader,
    /// A header whose checksum does not add up.
    BadChecksum,
    /// The header asks for something this loader does not do (the a.out
    /// address fields, or an unknown required feature).
    UnsupportedFlags(u32),
    /// The program headers or a segment's file bytes lie outside the file.
    Truncated,
    /// More loadable segments than the loader reads.
    TooManySegments,
    /// A segment (or the information after the image) does not fit in the
    /// domain's memory.
    DoesNotFit {
        /// The first byte past what is needed.
        end: u64,
        /// The domain's memory.
        ram: u64,
    },
    /// The entry point is not inside a loaded segment.
    EntryOutsideImage(u32),
    /// A segment, or the information after the image, would be written in
    /// the PC's legacy hole (0xA0000-0xFFFFF), where the domain's ACPI
    /// tables are.
    InLegacyHole {
        /// Its first byte.
        start: u64,
        /// The first byte past it.
        end: u64,
    },
}

impl fmt::Display for MultibootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotElf32 => f.write_str("not a 32-bit x86 ELF executable"),
            Self::NoHeader => f.write_str("no multiboot header in its first 8 KiB"),
            Self::BadChecksum => f.write_str("its multiboot header's checksum is wrong"),
            Self::UnsupportedFlags(flags) => {
                write!(
                    f,
                    "its multiboot header requires features {flags:#x} this loader lacks"
                )
            }
            Self::Truncated => {
                f.write_str("truncated: a program header or segment is past its end")
            }
            Self::TooManySegments => write!(f, "more than {MAX_SEGMENTS} loadable segments"),
            Self::DoesNotFit { end, ram } => {
                write!(
                    f,
                    "needs memory up to {end:#x}, the domain has {ram:#x} bytes"
                )
            }
            Self::EntryOutsideImage(entry) => {
                write!(f, "its entry {entry:#x} is outside its loaded segments")
            }
            Self::InLegacyHole { start, end } => write!(
                f,
                "{start:#x}-{end:#x} lies in the PC's legacy hole {:#x}-{:#x} (the domain's ACPI tables)",
                LEGACY_HOLE.start, LEGACY_HOLE.end
            ),
        }
    }
}

/// One loadable segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Where its bytes are in the file.
    pub offset: u32,
    /// Its guest-physical address.
    pub paddr: u32,
    /// Bytes from the file.
    pub file_bytes: u32,
    /// Bytes in memory (the rest zero).
    pub memory_bytes: u32,
}

/// A checked multiboot ELF image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultibootImage<'a> {
    bytes: &'a [u8],
    segments: [Segment; MAX_SEGMENTS],
    count: usize,
    /// The 32-bit entry point.
    pub entry: u32,
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> MultibootImage<'a> {
    /// Whether `bytes` starts as an ELF file does (a quick test before
    /// [`MultibootImage::parse`] says what is wrong with it).
    pub fn looks_like_elf(bytes: &[u8]) -> bool {
        bytes.starts_with(b"\x7fELF")
    }

    /// Checks `bytes`: an ELF32 x86 executable with a valid multiboot header
    /// whose loadable segments lie inside the file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, MultibootError> {
        let ident_ok = bytes.len() >= EHDR_BYTES
            && Self::looks_like_elf(bytes)
            && bytes[4] == ELFCLASS32
            && bytes[5] == ELFDATA2LSB;
        let ehdr = |at| u16_at(bytes, at).ok_or(MultibootError::NotElf32);
        if !ident_ok || ehdr(16)? != ET_EXEC || ehdr(18)? != EM_386 {
            return Err(MultibootError::NotElf32);
        }
        check_header(bytes)?;
        let entry = u32_at(bytes, 24).ok_or(MultibootError::NotElf32)?;
        let phoff = u32_at(bytes, 28).ok_or(MultibootError::NotElf32)? as usize;
        let phentsize = usize::from(ehdr(42)?);
        let phnum = usize::from(ehdr(44)?);
        if phentsize < PHDR_BYTES {
            return Err(MultibootError::NotElf32);
        }
        let mut segments = [Segment::default(); MAX_SEGMENTS];
        let mut count = 0;
        for i in 0..phnum {
            let at = phoff
                .checked_add(i.checked_mul(phentsize).ok_or(MultibootError::Truncated)?)
                .ok_or(MultibootError::Truncated)?;
            let field = |n: usize| u32_at(bytes, at + 4 * n).ok_or(MultibootError::Truncated);
            if field(0)? != PT_LOAD {
                continue;
            }
            let segment = Segment {
                offset: field(1)?,
                paddr: field(3)?,
                file_bytes: field(4)?,
                memory_bytes: field(5)?.max(field(4)?),
            };
            let file_end = u64::from(segment.offset) + u64::from(segment.file_bytes);
            if file_end > bytes.len() as u64 {
                return Err(MultibootError::Truncated);
            }
            let slot = segments
                .get_mut(count)
                .ok_or(MultibootError::TooManySegments)?;
            *slot = segment;
            count += 1;
        }
        let image = Self {
            bytes,
            segments,
            count,
            entry,
        };
        let inside = image.segments().iter().any(|s| {
            entry >= s.paddr && u64::from(entry) < u64::from(s.paddr) + u64::from(s.memory_bytes)
        });
        if !inside {
            return Err(MultibootError::EntryOutsideImage(entry));
        }
        Ok(image)
    }

    /// Its loadable segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments[..self.count]
    }

    /// The first byte past its highest segment.
    pub fn end(&self) -> u64 {
        self.segments()
            .iter()
            .map(|s| u64::from(s.paddr) + u64::from(s.memory_bytes))
            .max()
            .unwrap_or(0)
    }
}

/// Finds and checks the multiboot header.
fn check_header(bytes: &[u8]) -> Result<(), MultibootError> {
    let search = &bytes[..bytes.len().min(HEADER_SEARCH)];
    let at = (0..search.len().saturating_sub(11))
        .step_by(4)
        .find(|&at| u32_at(search, at) == Some(HEADER_MAGIC))
        .ok_or(MultibootError::NoHeader)?;
    let flags = u32_at(search, at + 4).ok_or(MultibootError::NoHeader)?;
    let checksum = u32_at(search, at + 8).ok_or(MultibootError::NoHeader)?;
    if HEADER_MAGIC.wrapping_add(flags).wrapping_add(checksum) != 0 {
        return Err(MultibootError::BadChecksum);
    }
    let unsupported = (flags & 0xffff & !HEADER_KNOWN_REQUIREMENTS) | (flags & HEADER_AOUT_KLUDGE);
    if unsupported != 0 {
        return Err(MultibootError::UnsupportedFlags(unsupported));
    }
    Ok(())
}

/// Where the loader put things.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The 32-bit entry point.
    pub entry: u32,
    /// The multiboot information structure (`EBX` at entry).
    pub info: u32,
}

/// Where [`write_memory`] puts the multiboot information, the command line
/// and the module after the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    info: u64,
    cmdline_at: u64,
    module_entry: u64,
    module_at: u64,
    /// The first byte past the module.
    end: u64,
}

/// Places the information after `image` (from its next page) for a command
/// line of `cmdline_len` bytes and a module of `module_len`, and checks that
/// the image and all that fit in `ram_bytes` of RAM outside the PC's legacy
/// hole.
fn place(
    image: &MultibootImage<'_>,
    cmdline_len: usize,
    module_len: u64,
    ram_bytes: u64,
) -> Result<Placement, MultibootError> {
    let page = |x: u64| x.div_ceil(0x1000) * 0x1000;
    let info = page(image.end());
    let cmdline_at = info + INFO_BYTES as u64;
    let module_entry = (cmdline_at + cmdline_len as u64 + 1).div_ceil(16) * 16;
    let module_at = page(module_entry + MODULE_BYTES as u64);
    let end = module_at + module_len;
    let in_hole = |start: u64, end: u64| start < LEGACY_HOLE.end && end > LEGACY_HOLE.start;
    for s in image.segments() {
        let start = u64::from(s.paddr);
        let memory_end = start + u64::from(s.memory_bytes);
        if in_hole(start, memory_end) {
            return Err(MultibootError::InLegacyHole {
                start,
                end: memory_end,
            });
        }
        if memory_end > ram_bytes {
            return Err(MultibootError::DoesNotFit {
                end: memory_end,
                ram: ram_bytes,
            });
        }
    }
    if in_hole(info, end) {
        return Err(MultibootError::InLegacyHole { start: info, end });
    }
    if end > ram_bytes.min(u64::from(u32::MAX)) {
        return Err(MultibootError::DoesNotFit {
            end,
            ram: ram_bytes,
        });
    }
    Ok(Placement {
        info,
        cmdline_at,
        module_entry,
        module_at,
        end,
    })
}

/// Whether [`write_memory`] can load `image` with a command line of
/// `cmdline_len` bytes and a module of `module_len` into `ram_bytes` of
/// RAM (the build's check of a configured domain, before the hypervisor
/// meets it).
pub fn check_fits(
    image: &MultibootImage<'_>,
    cmdline_len: usize,
    module_len: u64,
    ram_bytes: u64,
) -> Result<(), MultibootError> {
    place(image, cmdline_len, module_len, ram_bytes).map(|_| ())
}

/// Writes `image`'s segments into `ram` (guest-physical 0 onwards; bytes
/// past a segment's file part zeroed), then, from the next page after the
/// image, the multiboot information with `cmdline` and `module` (the
/// kvm-unit-tests environment, for one) and each's string. Nothing is
/// written unless all of it fits ([`check_fits`]).
pub fn write_memory(
    ram: &mut [u8],
    image: &MultibootImage<'_>,
    cmdline: &str,
    module: Option<&[u8]>,
) -> Result<Layout, MultibootError> {
    let ram_bytes = ram.len() as u64;
    let Placement {
        info,
        cmdline_at,
        module_entry,
        module_at,
        end,
    } = place(
        image,
        cmdline.len(),
        module.map_or(0, |m| m.len() as u64),
        ram_bytes,
    )?;
    for s in image.segments() {
        let start = u64::from(s.paddr);
        let memory_end = start + u64::from(s.memory_bytes);
        let (start, file) = (start as usize, s.file_bytes as usize);
        let from = s.offset as usize;
        ram[start..start + file].copy_from_slice(&image.bytes[from..from + file]);
        ram[start + file..memory_end as usize].fill(0);
    }
    let mut info_bytes = [0u8; INFO_BYTES];
    let mut put =
        |at: usize, value: u32| info_bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    let mut flags = INFO_MEMORY | INFO_CMDLINE;
    put(4, MEM_LOWER_KIB);
    put(
        8,
        ((ram_bytes.saturating_sub(UPPER_MEMORY)) / 1024).min(u64::from(u32::MAX)) as u32,
    );
    put(16, cmdline_at as u32);
    if module.is_some() {
        flags |= INFO_MODULES;
        put(20, 1);
        put(24, module_entry as u32);
    }
    put(0, flags);
    let info_at = info as usize;
    ram[info_at..info_at + INFO_BYTES].copy_from_slice(&info_bytes);
    let cmdline_at = cmdline_at as usize;
    ram[cmdline_at..cmdline_at + cmdline.len()].copy_from_slice(cmdline.as_bytes());
    ram[cmdline_at + cmdline.len()] = 0;
    if let Some(module) = module {
        let entry = module_entry as usize;
        let fields = [module_at as u32, end as u32, 0, 0];
        for (i, value) in fields.iter().enumerate() {
            ram[entry + 4 * i..entry + 4 * i + 4].copy_from_slice(&value.to_le_bytes());
        }
        ram[module_at as usize..end as usize].copy_from_slice(module);
    }
    Ok(Layout {
        entry: image.entry,
        info: info as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// An ELF32 multiboot image: a header at 0x60 with `flags`, a text
    /// segment of `text` at 0x100000 (file offset 0x1000), and a bss of
    /// `bss` bytes after it; entry at the text's start.
    fn image(flags: u32, text: &[u8], bss: u32) -> Vec<u8> {
        let mut f = vec![0u8; 0x1000 + text.len()];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = ELFCLASS32;
        f[5] = ELFDATA2LSB;
        f[6] = 1;
        let put16 =
            |f: &mut Vec<u8>, at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |f: &mut Vec<u8>, at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put16(&mut f, 16, ET_EXEC);
        put16(&mut f, 18, EM_386);
        put32(&mut f, 24, 0x10_0000);
        put32(&mut f, 28, 0x34);
        put16(&mut f, 42, PHDR_BYTES as u16);
        put16(&mut f, 44, 1);
        // Program header at 0x34.
        put32(&mut f, 0x34, PT_LOAD);
        put32(&mut f, 0x38, 0x1000);
        put32(&mut f, 0x3c, 0x10_0000);
        put32(&mut f, 0x40, 0x10_0000);
        put32(&mut f, 0x44, text.len() as u32);
        put32(&mut f, 0x48, text.len() as u32 + bss);
        // Multiboot header at 0x60.
        put32(&mut f, 0x60, HEADER_MAGIC);
        put32(&mut f, 0x64, flags);
        put32(
            &mut f,
            0x68,
            0u32.wrapping_sub(HEADER_MAGIC.wrapping_add(flags)),
        );
        f[0x1000..].copy_from_slice(text);
        f
    }

    fn u32_in(ram: &[u8], at: u32) -> u32 {
        u32_at(ram, at as usize).unwrap()
    }

    #[test]
    fn an_image_is_loaded_and_the_information_describes_memory_cmdline_and_module() {
        let file = image(0b11, &[0xf4, 0xeb, 0xfd], 0x2000);
        let parsed = MultibootImage::parse(&file).unwrap();
        assert_eq!(parsed.entry, 0x10_0000);
        assert_eq!(parsed.end(), 0x10_2003);
        let mut ram = vec![0xaau8; 16 << 20];
        let layout = write_memory(&mut ram, &parsed, "smp 2", Some(b"NR_CPUS=2\n")).unwrap();
        assert_eq!(layout.entry, 0x10_0000);
        assert_eq!(layout.info, 0x10_3000);
        assert_eq!(&ram[0x10_0000..0x10_0003], &[0xf4, 0xeb, 0xfd]);
        assert!(
            ram[0x10_0003..0x10_2003].iter().all(|&b| b == 0),
            "bss zeroed"
        );
        let info = layout.info;
        assert_eq!(
            u32_in(&ram, info),
            INFO_MEMORY | INFO_CMDLINE | INFO_MODULES
        );
        assert_eq!(u32_in(&ram, info + 4), 640);
        assert_eq!(u32_in(&ram, info + 8), (16 << 10) - 1024);
        let cmdline = u32_in(&ram, info + 16) as usize;
        assert_eq!(&ram[cmdline..cmdline + 6], b"smp 2\0");
        assert_eq!(u32_in(&ram, info + 20), 1);
        let entry = u32_in(&ram, info + 24);
        let (start, end) = (u32_in(&ram, entry), u32_in(&ram, entry + 4));
        assert_eq!(start % 0x1000, 0, "modules page-aligned");
        assert_eq!(&ram[start as usize..end as usize], b"NR_CPUS=2\n");
    }

    #[test]
    fn without_a_module_the_flag_says_so() {
        let file = image(0, &[0x90], 0);
        let parsed = MultibootImage::parse(&file).unwrap();
        let mut ram = vec![0u8; 4 << 20];
        let layout = write_memory(&mut ram, &parsed, "", None).unwrap();
        assert_eq!(u32_in(&ram, layout.info), INFO_MEMORY | INFO_CMDLINE);
        assert_eq!(u32_in(&ram, layout.info + 20), 0);
    }

    #[test]
    fn bad_images_are_refused_with_what_is_wrong() {
        let good = image(0b11, &[0x90], 0);
        assert_eq!(
            MultibootImage::parse(b"MZ not elf"),
            Err(MultibootError::NotElf32)
        );
        let mut elf64 = good.clone();
        elf64[4] = 2;
        assert_eq!(MultibootImage::parse(&elf64), Err(MultibootError::NotElf32));
        let mut arm = good.clone();
        arm[18] = 0xb7;
        assert_eq!(MultibootImage::parse(&arm), Err(MultibootError::NotElf32));
        let mut no_header = good.clone();
        no_header[0x60..0x64].fill(0);
        assert_eq!(
            MultibootImage::parse(&no_header),
            Err(MultibootError::NoHeader)
        );
        let mut checksum = good.clone();
        checksum[0x68] ^= 1;
        assert_eq!(
            MultibootImage::parse(&checksum),
            Err(MultibootError::BadChecksum)
        );
        let aout = image(HEADER_AOUT_KLUDGE, &[0x90], 0);
        assert_eq!(
            MultibootImage::parse(&aout),
            Err(MultibootError::UnsupportedFlags(HEADER_AOUT_KLUDGE))
        );
        let truncated = &good[..0x1000];
        assert_eq!(
            MultibootImage::parse(truncated),
            Err(MultibootError::Truncated)
        );
        let mut entry = good.clone();
        entry[24..28].copy_from_slice(&0x20_0000u32.to_le_bytes());
        assert_eq!(
            MultibootImage::parse(&entry),
            Err(MultibootError::EntryOutsideImage(0x20_0000))
        );
        // Every prefix is refused or parsed, never a panic.
        for len in 0..good.len() {
            let _ = MultibootImage::parse(&good[..len]);
        }
    }

    #[test]
    fn an_image_larger_than_the_domain_is_refused() {
        let file = image(0, &[0x90], 0x40_0000);
        let parsed = MultibootImage::parse(&file).unwrap();
        let mut ram = vec![0u8; 2 << 20];
        assert!(matches!(
            write_memory(&mut ram, &parsed, "", None),
            Err(MultibootError::DoesNotFit { ram: 0x20_0000, .. })
        ));
    }

    #[test]
    fn nothing_is_loaded_over_the_legacy_hole_and_its_acpi_tables() {
        // The segment (and entry) moved to 0xE0000.
        let mut file = image(0, &[0x90], 0);
        for at in [24, 0x3c, 0x40] {
            file[at..at + 4].copy_from_slice(&0xE_0000u32.to_le_bytes());
        }
        let parsed = MultibootImage::parse(&file).unwrap();
        let mut ram = vec![0u8; 4 << 20];
        assert_eq!(
            write_memory(&mut ram, &parsed, "", None),
            Err(MultibootError::InLegacyHole {
                start: 0xE_0000,
                end: 0xE_0001
            })
        );
        assert!(ram.iter().all(|&b| b == 0), "nothing written");
        // Below the hole, its information would follow it into the hole.
        for at in [24, 0x3c, 0x40] {
            file[at..at + 4].copy_from_slice(&0x9_F000u32.to_le_bytes());
        }
        let parsed = MultibootImage::parse(&file).unwrap();
        assert!(matches!(
            write_memory(&mut ram, &parsed, "", None),
            Err(MultibootError::InLegacyHole {
                start: 0xA_0000,
                ..
            })
        ));
    }

    macro_rules! kvm_unit_test {
        ($name:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/fixtures/kvm-unit-tests/x86_64/",
                $name
            ))
            .as_slice()
        };
    }

    #[test]
    fn the_kvm_unit_tests_images_load() {
        for (name, bytes) in [
            ("smptest", kvm_unit_test!("smptest.flat")),
            ("tsc", kvm_unit_test!("tsc.flat")),
            ("msr", kvm_unit_test!("msr.flat")),
            ("vmexit", kvm_unit_test!("vmexit.flat")),
            ("apic", kvm_unit_test!("apic.flat")),
        ] {
            let parsed = MultibootImage::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                parsed.segments()[0].paddr / 0x1000,
                0x400,
                "{name}: linked at 4 MiB"
            );
            let mut ram = vec![0u8; 64 << 20];
            let layout = write_memory(&mut ram, &parsed, "", Some(b"NR_CPUS=2\n"))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(u64::from(layout.info) >= parsed.end(), "{name}");
        }
    }
}
