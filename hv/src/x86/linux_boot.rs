//! The Linux x86 boot protocol (`Documentation/arch/x86/boot.rst`), 64-bit
//! entry, hardware-independent: what a `bzImage` is, where its parts go in a
//! domain's RAM, and the `boot_params` ("zero page") the kernel reads: its
//! setup header copied from the image and completed by the loader, the
//! command line, the initramfs and the e820 memory map.
//!
//! Written by hand: the one Rust implementation (rust-vmm's `linux-loader`)
//! needs `std` and `vm-memory`, and the part used here is a few dozen fixed
//! offsets, each named below after the document.
//!
//! The 64-bit entry point is the protected-mode kernel's start plus 0x200,
//! entered in long mode with the ranges the kernel reads identity-mapped, a
//! GDT whose selectors [`BOOT_CS`] and [`BOOT_DS`] are flat 4 GiB code and
//! data, interrupts off and `rsi` holding the zero page's address.

use alloc::vec::Vec;
use core::fmt;

/// `boot_flag`'s value (at 0x1FE, as in a boot sector).
const BOOT_FLAG: u16 = 0xAA55;
/// The setup header's magic, "HdrS" (at 0x202).
const HEADER_MAGIC: u32 = 0x5372_6448;
/// The oldest protocol with `xloadflags` (the 64-bit entry's flag): 2.12.
pub const MIN_VERSION: u16 = 0x020C;
/// `xloadflags` bit 0: the kernel has the 64-bit entry at +0x200.
const XLF_KERNEL_64: u16 = 1 << 0;
/// `xloadflags` bit 1: kernel, zero page and initramfs may sit above 4 GiB.
const XLF_CAN_BE_LOADED_ABOVE_4G: u16 = 1 << 1;
/// `loadflags` bit 0: the protected-mode kernel loads at 0x100000 or above.
const LOADED_HIGH: u8 = 1 << 0;
/// `type_of_loader` for a loader without an assigned id.
const LOADER_UNDEFINED: u8 = 0xFF;
/// Where the 64-bit entry is, from the protected-mode kernel's start.
const ENTRY_64_OFFSET: u64 = 0x200;
/// Where a kernel without `pref_address` loads (1 MiB).
const DEFAULT_LOAD_ADDRESS: u64 = 0x10_0000;

/// Setup header fields, as offsets into the image and the zero page alike.
mod header {
    pub const SETUP_SECTS: usize = 0x1F1;
    pub const BOOT_FLAG: usize = 0x1FE;
    /// The jump at 0x200: its second byte is the header's length past 0x202.
    pub const JUMP: usize = 0x200;
    pub const MAGIC: usize = 0x202;
    pub const VERSION: usize = 0x206;
    pub const TYPE_OF_LOADER: usize = 0x210;
    pub const LOADFLAGS: usize = 0x211;
    pub const RAMDISK_IMAGE: usize = 0x218;
    pub const RAMDISK_SIZE: usize = 0x21C;
    pub const CMD_LINE_PTR: usize = 0x228;
    pub const INITRD_ADDR_MAX: usize = 0x22C;
    pub const KERNEL_ALIGNMENT: usize = 0x230;
    pub const XLOADFLAGS: usize = 0x236;
    pub const CMDLINE_SIZE: usize = 0x238;
    pub const PREF_ADDRESS: usize = 0x258;
    pub const INIT_SIZE: usize = 0x260;
    /// The fields a 2.12 header has end here (init_size is 2.10).
    pub const END_2_12: usize = 0x264;
}

/// `boot_params` fields outside the setup header.
mod zero_page {
    pub const ACPI_RSDP_ADDR: usize = 0x070;
    pub const EXT_RAMDISK_IMAGE: usize = 0x0C0;
    pub const EXT_RAMDISK_SIZE: usize = 0x0C4;
    pub const EXT_CMD_LINE_PTR: usize = 0x0C8;
    pub const E820_ENTRIES: usize = 0x1E8;
    pub const E820_TABLE: usize = 0x2D0;
    /// One entry: address (u64), size (u64), type (u32).
    pub const E820_ENTRY_BYTES: usize = 20;
    /// `E820_MAX_ENTRIES_ZEROPAGE`.
    pub const E820_MAX: usize = 128;
    pub const BYTES: usize = 4096;
}

/// The boot GDT's code selector the 64-bit entry requires (`__BOOT_CS`).
pub const BOOT_CS: u16 = 0x10;
/// The boot GDT's data selector (`__BOOT_DS`), for DS, ES and SS.
pub const BOOT_DS: u16 = 0x18;
/// A GDT with [`BOOT_CS`] (64-bit code: P, S, execute/read, L) and
/// [`BOOT_DS`] (flat 4 GiB data: P, S, read/write, D/B, G) in their slots.
pub const BOOT_GDT: [u64; 4] = [0, 0, 0x00af_9a00_0000_ffff, 0x00cf_9200_0000_ffff];

/// Why a file cannot be booted as a Linux x86 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxImageError {
    /// Shorter than its setup header (or than the setup sectors it names).
    Truncated {
        /// Bytes it would need.
        needed: usize,
        /// Bytes it has.
        len: usize,
    },
    /// No `0xAA55` boot flag or no "HdrS": not a bzImage.
    NotBzImage,
    /// A boot protocol older than 2.12 (no 64-bit entry flag).
    ProtocolTooOld(u16),
    /// Built without the 64-bit entry point (`XLF_KERNEL_64` clear).
    No64BitEntry,
    /// Not built to load at 1 MiB or above (`LOADED_HIGH` clear: a zImage).
    NotLoadedHigh,
    /// The kernel, its decompression room (`init_size`), the initramfs and
    /// the boot structures need more RAM than the domain has.
    TooBig {
        /// Bytes needed.
        needed: u64,
        /// Bytes of RAM.
        memory: u64,
    },
    /// The command line is longer than the kernel accepts (`cmdline_size`).
    CommandLineTooLong {
        /// Its length, in bytes (without the NUL).
        len: usize,
        /// The most the kernel takes.
        max: usize,
    },
    /// More memory-map entries than the zero page holds.
    TooManyE820Entries(usize),
}

impl fmt::Display for LinuxImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, len } => write!(
                f,
                "the file is truncated: {len} bytes, its header needs {needed}"
            ),
            Self::NotBzImage => write!(
                f,
                "it is not a Linux x86 bzImage (no 0xAA55 boot flag and \"HdrS\" header): give the kernel's bzImage (Debian's vmlinuz)"
            ),
            Self::ProtocolTooOld(version) => write!(
                f,
                "its boot protocol is {}.{:02}; 2.12 or newer is needed (the 64-bit entry)",
                version >> 8,
                version & 0xFF
            ),
            Self::No64BitEntry => write!(f, "the kernel has no 64-bit entry point (XLF_KERNEL_64)"),
            Self::NotLoadedHigh => write!(f, "it is a zImage (loads below 1 MiB), not a bzImage"),
            Self::TooBig { needed, memory } => write!(
                f,
                "kernel, initramfs and boot data need {} MiB but the domain has {} MiB (memory_mib)",
                needed.div_ceil(1 << 20),
                memory >> 20
            ),
            Self::CommandLineTooLong { len, max } => write!(
                f,
                "the command line has {len} bytes; the kernel takes at most {max}"
            ),
            Self::TooManyE820Entries(n) => write!(
                f,
                "{n} memory map entries; the zero page holds {}",
                zero_page::E820_MAX
            ),
        }
    }
}

fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from(read_u32(bytes, at)) | u64::from(read_u32(bytes, at + 4)) << 32
}

fn write_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn write_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// A checked bzImage: its setup header's fields and where its
/// protected-mode kernel starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BzImage<'a> {
    bytes: &'a [u8],
    /// Boot protocol version (0x020F: 2.15).
    pub version: u16,
    /// Where the protected-mode kernel starts in the file.
    pub kernel_offset: usize,
    /// Where the setup header ends in the file (the end of what the zero
    /// page copies).
    header_end: usize,
    /// Where the kernel prefers to load (its link address).
    pub pref_address: u64,
    /// The memory the kernel needs from its load address to decompress
    /// and start (more than the file).
    pub init_size: u64,
    /// The highest address an initramfs may end at (inclusive).
    pub initrd_addr_max: u64,
    /// The longest command line it takes, without the NUL.
    pub cmdline_size: usize,
    /// The header's `xloadflags`.
    pub xloadflags: u16,
}

impl<'a> BzImage<'a> {
    /// Checks that `bytes` is a bzImage with the 64-bit entry point.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LinuxImageError> {
        let truncated = |needed| LinuxImageError::Truncated {
            needed,
            len: bytes.len(),
        };
        if bytes.len() < header::MAGIC + 4 {
            // Too short to say what it is: a bzImage cut short, or no kernel.
            return Err(
                if bytes.len() > header::BOOT_FLAG + 1
                    && read_u16(bytes, header::BOOT_FLAG) == BOOT_FLAG
                {
                    truncated(header::END_2_12)
                } else {
                    LinuxImageError::NotBzImage
                },
            );
        }
        if read_u16(bytes, header::BOOT_FLAG) != BOOT_FLAG
            || read_u32(bytes, header::MAGIC) != HEADER_MAGIC
        {
            return Err(LinuxImageError::NotBzImage);
        }
        if bytes.len() < header::END_2_12 {
            return Err(truncated(header::END_2_12));
        }
        let version = read_u16(bytes, header::VERSION);
        if version < MIN_VERSION {
            return Err(LinuxImageError::ProtocolTooOld(version));
        }
        if bytes[header::LOADFLAGS] & LOADED_HIGH == 0 {
            return Err(LinuxImageError::NotLoadedHigh);
        }
        let xloadflags = read_u16(bytes, header::XLOADFLAGS);
        if xloadflags & XLF_KERNEL_64 == 0 {
            return Err(LinuxImageError::No64BitEntry);
        }
        // setup_sects 0 means 4 (boot.rst); plus the boot sector itself.
        let setup_sects = match bytes[header::SETUP_SECTS] {
            0 => 4,
            n => usize::from(n),
        };
        let kernel_offset = (setup_sects + 1) * 512;
        let header_end = (header::MAGIC + usize::from(bytes[header::JUMP + 1]))
            .clamp(header::END_2_12, kernel_offset);
        // The header must also lie within the setup sectors it names.
        if bytes.len() <= kernel_offset {
            return Err(truncated(kernel_offset + 1));
        }
        let pref_address = match read_u64(bytes, header::PREF_ADDRESS) {
            0 => DEFAULT_LOAD_ADDRESS,
            address => address,
        };
        let payload = (bytes.len() - kernel_offset) as u64;
        Ok(Self {
            bytes,
            version,
            kernel_offset,
            header_end,
            pref_address,
            init_size: u64::from(read_u32(bytes, header::INIT_SIZE)).max(payload),
            initrd_addr_max: u64::from(read_u32(bytes, header::INITRD_ADDR_MAX)),
            cmdline_size: read_u32(bytes, header::CMDLINE_SIZE) as usize,
            xloadflags,
        })
    }

    /// The protected-mode kernel: what is copied to [`LinuxLayout::kernel`].
    pub fn kernel(&self) -> &'a [u8] {
        &self.bytes[self.kernel_offset..]
    }

    /// The kernel's required alignment (`kernel_alignment`, at least 4 KiB).
    pub fn kernel_alignment(&self) -> u64 {
        u64::from(read_u32(self.bytes, header::KERNEL_ALIGNMENT)).max(4096)
    }

    /// The setup header as the image has it, at its zero-page offset.
    fn setup_header(&self) -> &'a [u8] {
        &self.bytes[header::SETUP_SECTS..self.header_end]
    }
}

/// Where a Linux guest's parts go (guest-physical addresses; RAM starts at 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinuxLayout {
    /// The zero page (`rsi` at entry).
    pub boot_params: u64,
    /// The command line (NUL-terminated).
    pub cmdline: u64,
    /// Where the protected-mode kernel is copied.
    pub kernel: u64,
    /// The 64-bit entry point.
    pub entry: u64,
    /// Where the initramfs is copied and its length, if there is one.
    pub initrd: Option<(u64, u64)>,
}

/// Below this the boot structures (GDT, page tables, zero page, command
/// line) sit, in the first 64 KiB; the e820 map keeps the BIOS area
/// (640 KiB..1 MiB) reserved, as on a PC.
pub const BOOT_PARAMS: u64 = 0x7000;
/// The command line's page.
pub const CMDLINE: u64 = 0x8000;
/// The longest command line the layout has room for (a page, NUL included).
const CMDLINE_ROOM: usize = 4096;
/// Where conventional memory ends (the EBDA and BIOS area above it).
const LOW_RAM_END: u64 = 0x9_F000;
/// Where memory above the BIOS area starts.
const HIGH_RAM: u64 = 0x10_0000;

/// Places `image` (and an initramfs of `initrd_len` bytes, a command line
/// of `cmdline_len` bytes) in `ram_bytes` of RAM: the kernel at its
/// preferred address (it needs `init_size` from there), the initramfs as
/// high as the kernel allows, page-aligned and clear of the kernel.
pub fn layout(
    image: &BzImage<'_>,
    ram_bytes: u64,
    initrd_len: Option<u64>,
    cmdline_len: usize,
) -> Result<LinuxLayout, LinuxImageError> {
    let max = image.cmdline_size.min(CMDLINE_ROOM - 1);
    if cmdline_len > max {
        return Err(LinuxImageError::CommandLineTooLong {
            len: cmdline_len,
            max,
        });
    }
    let kernel = image
        .pref_address
        .max(HIGH_RAM)
        .next_multiple_of(image.kernel_alignment());
    let kernel_end = kernel.saturating_add(image.init_size);
    let too_big = |needed| LinuxImageError::TooBig {
        needed,
        memory: ram_bytes,
    };
    if kernel_end > ram_bytes {
        return Err(too_big(kernel_end.saturating_add(initrd_len.unwrap_or(0))));
    }
    let initrd = match initrd_len {
        None => None,
        Some(len) => {
            // initrd_addr_max is the last byte's address; above 4 GiB only
            // when the kernel says it can (and then up to the RAM's end).
            let limit = if image.xloadflags & XLF_CAN_BE_LOADED_ABOVE_4G != 0 {
                ram_bytes
            } else {
                ram_bytes.min(image.initrd_addr_max.saturating_add(1))
            };
            let start = limit.checked_sub(len).map(|s| s & !0xFFF);
            match start {
                Some(start) if start >= kernel_end => Some((start, len)),
                _ => return Err(too_big(kernel_end.saturating_add(len))),
            }
        }
    };
    Ok(LinuxLayout {
        boot_params: BOOT_PARAMS,
        cmdline: CMDLINE,
        kernel,
        entry: kernel + ENTRY_64_OFFSET,
        initrd,
    })
}

/// One e820 memory-map entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E820Entry {
    /// First byte.
    pub address: u64,
    /// Length in bytes.
    pub size: u64,
    /// What it is.
    pub kind: E820Kind,
}

/// The e820 types a domain's map uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum E820Kind {
    /// Usable RAM.
    Ram = 1,
    /// Reserved (the BIOS area, devices).
    Reserved = 2,
    /// ACPI tables, reclaimable once read.
    Acpi = 3,
}

/// A domain's memory map: conventional memory, the BIOS area reserved
/// (where a PC's EBDA and ROMs are; `acpi` tables, if given, are marked as
/// such there), and the rest of its `ram_bytes` of RAM from 1 MiB.
pub fn e820_map(ram_bytes: u64, acpi: Option<(u64, u64)>) -> Vec<E820Entry> {
    let mut map = Vec::with_capacity(4);
    let mut push = |address, end: u64, kind| {
        if end > address {
            map.push(E820Entry {
                address,
                size: end - address,
                kind,
            });
        }
    };
    push(0, LOW_RAM_END.min(ram_bytes), E820Kind::Ram);
    match acpi {
        Some((start, len)) if start >= LOW_RAM_END && start + len <= HIGH_RAM => {
            push(LOW_RAM_END, start, E820Kind::Reserved);
            push(start, start + len, E820Kind::Acpi);
            push(start + len, HIGH_RAM, E820Kind::Reserved);
        }
        _ => push(LOW_RAM_END, HIGH_RAM, E820Kind::Reserved),
    }
    push(HIGH_RAM, ram_bytes, E820Kind::Ram);
    map
}

/// Fills `page` as `image`'s zero page for `layout`: the image's setup
/// header, completed with the loader's fields (loader type, command line,
/// initramfs), the e820 map and, if given, the ACPI RSDP's address (read by
/// kernels of protocol 2.14 and newer; older ones scan the BIOS area).
pub fn write_boot_params(
    page: &mut [u8; zero_page::BYTES],
    image: &BzImage<'_>,
    layout: &LinuxLayout,
    e820: &[E820Entry],
    rsdp: Option<u64>,
) -> Result<(), LinuxImageError> {
    if e820.len() > zero_page::E820_MAX {
        return Err(LinuxImageError::TooManyE820Entries(e820.len()));
    }
    page.fill(0);
    let setup = image.setup_header();
    page[header::SETUP_SECTS..header::SETUP_SECTS + setup.len()].copy_from_slice(setup);
    page[header::TYPE_OF_LOADER] = LOADER_UNDEFINED;
    // The 64-bit fields' high halves go in the ext_ fields.
    let (cmd_low, cmd_high) = split(layout.cmdline);
    write_u32(page, header::CMD_LINE_PTR, cmd_low);
    write_u32(page, zero_page::EXT_CMD_LINE_PTR, cmd_high);
    if let Some((address, len)) = layout.initrd {
        let (image_low, image_high) = split(address);
        let (size_low, size_high) = split(len);
        write_u32(page, header::RAMDISK_IMAGE, image_low);
        write_u32(page, header::RAMDISK_SIZE, size_low);
        write_u32(page, zero_page::EXT_RAMDISK_IMAGE, image_high);
        write_u32(page, zero_page::EXT_RAMDISK_SIZE, size_high);
    }
    if let Some(rsdp) = rsdp {
        write_u64(page, zero_page::ACPI_RSDP_ADDR, rsdp);
    }
    page[zero_page::E820_ENTRIES] = e820.len() as u8;
    for (index, entry) in e820.iter().enumerate() {
        let at = zero_page::E820_TABLE + index * zero_page::E820_ENTRY_BYTES;
        write_u64(page, at, entry.address);
        write_u64(page, at + 8, entry.size);
        write_u32(page, at + 16, entry.kind as u32);
    }
    Ok(())
}

/// Writes a Linux guest's boot memory into `ram` (the domain's RAM from
/// guest-physical 0): the identity-mapping page tables and [`BOOT_GDT`]
/// (`super::boot`'s addresses), the zero page with its e820 map, the
/// command line, the protected-mode kernel, the initramfs, and the ACPI
/// tables at their own address (in the BIOS area, marked ACPI in the map).
/// Returns where everything went; the boot vCPU then starts at
/// [`LinuxLayout::entry`] (`super::boot::linux_entry_vmcb`) with `rsi` =
/// [`LinuxLayout::boot_params`].
pub fn write_linux_memory(
    ram: &mut [u8],
    image: &BzImage<'_>,
    initrd: Option<&[u8]>,
    cmdline: &str,
    acpi: Option<&super::acpi_tables::GuestAcpi>,
) -> Result<LinuxLayout, LinuxImageError> {
    let ram_bytes = ram.len() as u64;
    let layout = layout(
        image,
        ram_bytes,
        initrd.map(|i| i.len() as u64),
        cmdline.len(),
    )?;
    let acpi_range = acpi.map(|a| (a.base, a.bytes.len() as u64));
    if let Some((base, len)) = acpi_range
        && (base < LOW_RAM_END || base + len > HIGH_RAM)
    {
        // The tables go in the BIOS area, which the e820 map reserves.
        return Err(LinuxImageError::TooBig {
            needed: base + len,
            memory: ram_bytes,
        });
    }
    // Everything below 1 MiB starts clean (no stale boot data).
    ram[..HIGH_RAM as usize].fill(0);
    super::boot::write_identity_map(ram);
    super::boot::write_gdt(ram, &BOOT_GDT);
    let mut page = [0u8; zero_page::BYTES];
    let map = e820_map(ram_bytes, acpi_range);
    write_boot_params(&mut page, image, &layout, &map, acpi.map(|a| a.rsdp()))?;
    let at = |address: u64| address as usize;
    ram[at(layout.boot_params)..at(layout.boot_params) + page.len()].copy_from_slice(&page);
    let cmdline_at = at(layout.cmdline);
    ram[cmdline_at..cmdline_at + cmdline.len()].copy_from_slice(cmdline.as_bytes());
    ram[cmdline_at + cmdline.len()] = 0;
    let kernel = image.kernel();
    ram[at(layout.kernel)..at(layout.kernel) + kernel.len()].copy_from_slice(kernel);
    if let (Some(bytes), Some((address, _))) = (initrd, layout.initrd) {
        ram[at(address)..at(address) + bytes.len()].copy_from_slice(bytes);
    }
    if let Some(acpi) = acpi {
        ram[at(acpi.base)..at(acpi.base) + acpi.bytes.len()].copy_from_slice(&acpi.bytes);
    }
    Ok(layout)
}

/// The command line a Linux domain boots with: the config's `bootargs`,
/// plus `tsc_early_khz=` with the TSC frequency the hypervisor measured,
/// unless the config sets it. Linux on an AMD CPU has no CPUID leaf for
/// the TSC's frequency and calibrates it against the PIT or the ACPI PM
/// timer with tight bounds on how long one read may take, which an
/// emulated port (one exit per read) misses; without a frequency it
/// marks its TSC unstable and cannot use the TSC-deadline timer. The
/// kernel parameter exists for platforms whose calibration is unreliable.
pub fn command_line(bootargs: &str, tsc_khz: u64) -> alloc::string::String {
    let given = bootargs
        .split_whitespace()
        .any(|arg| arg.starts_with("tsc_early_khz="));
    match (given, bootargs.trim().is_empty()) {
        (true, _) => bootargs.into(),
        (false, true) => alloc::format!("tsc_early_khz={tsc_khz}"),
        (false, false) => alloc::format!("{} tsc_early_khz={tsc_khz}", bootargs.trim_end()),
    }
}

/// A 64-bit value's low and high 32 bits.
fn split(value: u64) -> (u32, u32) {
    (value as u32, (value >> 32) as u32)
}

#[cfg(test)]
mod tests;
