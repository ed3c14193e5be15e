//! The offsets below are boot.rst's, written out again here rather than
//! taken from the module, so a wrong constant there fails a test.

use super::*;

const SETUP_SECTS: usize = 0x1F1;
const BOOT_FLAG_AT: usize = 0x1FE;
const JUMP_AT: usize = 0x200;
const HEADER_AT: usize = 0x202;
const VERSION_AT: usize = 0x206;
const TYPE_OF_LOADER_AT: usize = 0x210;
const LOADFLAGS_AT: usize = 0x211;
const RAMDISK_IMAGE_AT: usize = 0x218;
const RAMDISK_SIZE_AT: usize = 0x21C;
const CMD_LINE_PTR_AT: usize = 0x228;
const INITRD_ADDR_MAX_AT: usize = 0x22C;
const KERNEL_ALIGNMENT_AT: usize = 0x230;
const XLOADFLAGS_AT: usize = 0x236;
const CMDLINE_SIZE_AT: usize = 0x238;
const PREF_ADDRESS_AT: usize = 0x258;
const INIT_SIZE_AT: usize = 0x260;
const ACPI_RSDP_AT: usize = 0x070;
const EXT_RAMDISK_IMAGE_AT: usize = 0x0C0;
const EXT_CMD_LINE_PTR_AT: usize = 0x0C8;
const E820_ENTRIES_AT: usize = 0x1E8;
const E820_TABLE_AT: usize = 0x2D0;

const MIB: u64 = 1 << 20;

/// A bzImage as Debian's 6.1 amd64 kernel has it (protocol 2.15, 64-bit
/// entry, loadable above 4 GiB, relocatable to 2 MiB, preferring 16 MiB),
/// with 28 setup sectors and `payload` bytes of kernel.
fn bzimage(payload: usize) -> Vec<u8> {
    let setup_sects = 28;
    let mut image = vec![0u8; (setup_sects + 1) * 512 + payload];
    image[SETUP_SECTS] = setup_sects as u8;
    image[BOOT_FLAG_AT..BOOT_FLAG_AT + 2].copy_from_slice(&0xAA55u16.to_le_bytes());
    // `jmp` over the header: it ends at 0x202 + 0x6A = 0x26C (2.15).
    image[JUMP_AT] = 0xEB;
    image[JUMP_AT + 1] = 0x6A;
    image[HEADER_AT..HEADER_AT + 4].copy_from_slice(b"HdrS");
    image[VERSION_AT..VERSION_AT + 2].copy_from_slice(&0x020Fu16.to_le_bytes());
    image[LOADFLAGS_AT] = 0x01;
    image[INITRD_ADDR_MAX_AT..INITRD_ADDR_MAX_AT + 4]
        .copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
    image[KERNEL_ALIGNMENT_AT..KERNEL_ALIGNMENT_AT + 4]
        .copy_from_slice(&(2 * MIB as u32).to_le_bytes());
    image[XLOADFLAGS_AT..XLOADFLAGS_AT + 2].copy_from_slice(&0x7Fu16.to_le_bytes());
    image[CMDLINE_SIZE_AT..CMDLINE_SIZE_AT + 4].copy_from_slice(&2047u32.to_le_bytes());
    image[PREF_ADDRESS_AT..PREF_ADDRESS_AT + 8].copy_from_slice(&(16 * MIB).to_le_bytes());
    image[INIT_SIZE_AT..INIT_SIZE_AT + 4].copy_from_slice(&(40 * MIB as u32).to_le_bytes());
    image
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

#[test]
fn reads_a_debian_like_header() {
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    assert_eq!(image.version, 0x020F);
    assert_eq!(image.kernel_offset, 29 * 512);
    assert_eq!(image.kernel().len(), 4096);
    assert_eq!(image.pref_address, 16 * MIB);
    assert_eq!(image.init_size, 40 * MIB);
    assert_eq!(image.kernel_alignment(), 2 * MIB);
    assert_eq!(image.cmdline_size, 2047);
    assert_eq!(image.initrd_addr_max, 0x7FFF_FFFF);
}

#[test]
fn refuses_what_is_not_a_64_bit_bzimage() {
    let good = bzimage(4096);
    assert_eq!(BzImage::parse(&[]), Err(LinuxImageError::NotBzImage));
    assert_eq!(
        BzImage::parse(b"\x7fELF\x02\x01\x01"),
        Err(LinuxImageError::NotBzImage),
        "a vmlinux"
    );
    assert_eq!(
        BzImage::parse(&[0u8; 8192]),
        Err(LinuxImageError::NotBzImage)
    );
    // An arm64 Image is no bzImage.
    let mut arm64 = vec![0u8; 8192];
    arm64[0x38..0x3C].copy_from_slice(b"ARM\x64");
    assert_eq!(BzImage::parse(&arm64), Err(LinuxImageError::NotBzImage));
    // Cut inside the header, and inside the setup sectors.
    assert_eq!(
        BzImage::parse(&good[..0x240]),
        Err(LinuxImageError::Truncated {
            needed: 0x264,
            len: 0x240
        })
    );
    assert_eq!(
        BzImage::parse(&good[..0x200]),
        Err(LinuxImageError::Truncated {
            needed: 0x264,
            len: 0x200
        })
    );
    assert_eq!(
        BzImage::parse(&good[..29 * 512]),
        Err(LinuxImageError::Truncated {
            needed: 29 * 512 + 1,
            len: 29 * 512
        })
    );
    let mut old = good.clone();
    old[VERSION_AT..VERSION_AT + 2].copy_from_slice(&0x020Au16.to_le_bytes());
    assert_eq!(
        BzImage::parse(&old),
        Err(LinuxImageError::ProtocolTooOld(0x020A))
    );
    let mut no64 = good.clone();
    no64[XLOADFLAGS_AT] &= !1;
    assert_eq!(BzImage::parse(&no64), Err(LinuxImageError::No64BitEntry));
    let mut zimage = good.clone();
    zimage[LOADFLAGS_AT] = 0;
    assert_eq!(BzImage::parse(&zimage), Err(LinuxImageError::NotLoadedHigh));
    // Every refusal says what is wrong.
    assert!(
        LinuxImageError::NotBzImage
            .to_string()
            .contains("not a Linux x86 bzImage")
    );
    assert!(
        LinuxImageError::ProtocolTooOld(0x020A)
            .to_string()
            .contains("2.10")
    );
}

#[test]
fn setup_sects_zero_means_four() {
    let mut bytes = bzimage(0);
    bytes[SETUP_SECTS] = 0;
    let image = BzImage::parse(&bytes).unwrap();
    assert_eq!(image.kernel_offset, 5 * 512);
}

#[test]
fn kernel_at_its_preferred_address_initrd_at_the_top_below_its_limit() {
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    let layout = layout(&image, 256 * MIB, Some(3 * MIB + 5), 40).unwrap();
    assert_eq!(layout.kernel, 16 * MIB);
    assert_eq!(layout.entry, 16 * MIB + 0x200);
    assert_eq!(layout.boot_params, 0x7000);
    assert_eq!(layout.cmdline, 0x8000);
    let (initrd, len) = layout.initrd.unwrap();
    assert_eq!(len, 3 * MIB + 5);
    assert_eq!(initrd % 4096, 0);
    assert!(initrd + len <= 256 * MIB && initrd >= 256 * MIB - 4 * MIB);
    assert!(initrd >= 16 * MIB + 40 * MIB, "clear of init_size");
    // No initramfs.
    assert_eq!(layout_of(&image, 64 * MIB, None).unwrap().initrd, None);
}

fn layout_of(
    image: &BzImage<'_>,
    ram: u64,
    initrd: Option<u64>,
) -> Result<LinuxLayout, LinuxImageError> {
    layout(image, ram, initrd, 0)
}

#[test]
fn initrd_stays_below_initrd_addr_max_without_the_above_4g_flag() {
    let mut bytes = bzimage(4096);
    bytes[XLOADFLAGS_AT] &= !2;
    bytes[INITRD_ADDR_MAX_AT..INITRD_ADDR_MAX_AT + 4]
        .copy_from_slice(&(128 * MIB as u32 - 1).to_le_bytes());
    let image = BzImage::parse(&bytes).unwrap();
    let layout = layout_of(&image, 512 * MIB, Some(MIB)).unwrap();
    let (initrd, len) = layout.initrd.unwrap();
    assert!(initrd + len <= 128 * MIB);
}

#[test]
fn refuses_what_does_not_fit() {
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    // 16 MiB + 40 MiB of init_size need 56 MiB.
    assert_eq!(
        layout_of(&image, 48 * MIB, None),
        Err(LinuxImageError::TooBig {
            needed: 56 * MIB,
            memory: 48 * MIB
        })
    );
    assert_eq!(
        layout_of(&image, 60 * MIB, Some(8 * MIB)),
        Err(LinuxImageError::TooBig {
            needed: 64 * MIB,
            memory: 60 * MIB
        })
    );
    assert_eq!(
        layout(&image, 256 * MIB, None, 2048),
        Err(LinuxImageError::CommandLineTooLong {
            len: 2048,
            max: 2047
        })
    );
}

#[test]
fn e820_keeps_the_bios_area_and_marks_acpi_tables() {
    let map = e820_map(256 * MIB, Some((0xE_0000, 0x1000)));
    let entries: Vec<(u64, u64, u32)> = map
        .iter()
        .map(|e| (e.address, e.size, e.kind as u32))
        .collect();
    assert_eq!(
        entries,
        [
            (0, 0x9_F000, 1),
            (0x9_F000, 0xE_0000 - 0x9_F000, 2),
            (0xE_0000, 0x1000, 3),
            (0xE_1000, 0x10_0000 - 0xE_1000, 2),
            (0x10_0000, 255 * MIB, 1),
        ]
    );
    let plain = e820_map(64 * MIB, None);
    assert_eq!(plain.len(), 3);
    assert_eq!(plain[1].kind, E820Kind::Reserved);
}

#[test]
fn zero_page_has_the_header_and_the_loaders_fields() {
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    let layout = layout(&image, 256 * MIB, Some(2 * MIB), 30).unwrap();
    let map = e820_map(256 * MIB, Some((0xE_0000, 0x1000)));
    let mut page = [0xA5u8; 4096];
    write_boot_params(&mut page, &image, &layout, &map, Some(0xE_0000)).unwrap();
    // The setup header is copied from 0x1F1 to its end (0x26C); what
    // follows is zero.
    assert_eq!(&page[0x202..0x206], b"HdrS");
    assert_eq!(page[SETUP_SECTS], 28);
    assert_eq!(u64_at(&page, PREF_ADDRESS_AT), 16 * MIB);
    assert!(page[0x26C..E820_TABLE_AT].iter().all(|&b| b == 0));
    assert!(
        page[..ACPI_RSDP_AT].iter().all(|&b| b == 0),
        "screen_info etc. zeroed"
    );
    // The loader's fields.
    assert_eq!(page[TYPE_OF_LOADER_AT], 0xFF);
    assert_eq!(u32_at(&page, CMD_LINE_PTR_AT), 0x8000);
    assert_eq!(u32_at(&page, EXT_CMD_LINE_PTR_AT), 0);
    let (initrd, len) = layout.initrd.unwrap();
    assert_eq!(u64::from(u32_at(&page, RAMDISK_IMAGE_AT)), initrd);
    assert_eq!(u64::from(u32_at(&page, RAMDISK_SIZE_AT)), len);
    assert_eq!(u32_at(&page, EXT_RAMDISK_IMAGE_AT), 0);
    assert_eq!(u64_at(&page, ACPI_RSDP_AT), 0xE_0000);
    // The e820 map.
    assert_eq!(page[E820_ENTRIES_AT], 5);
    let entry = |i: usize| {
        let at = E820_TABLE_AT + 20 * i;
        (
            u64_at(&page, at),
            u64_at(&page, at + 8),
            u32_at(&page, at + 16),
        )
    };
    assert_eq!(entry(0), (0, 0x9_F000, 1));
    assert_eq!(entry(2), (0xE_0000, 0x1000, 3));
    assert_eq!(entry(4), (MIB, 255 * MIB, 1));
    assert_eq!(entry(5), (0, 0, 0));
}

#[test]
fn an_initrd_above_4g_uses_the_ext_fields() {
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    let ram = 6u64 << 30;
    let layout = layout_of(&image, ram, Some(MIB)).unwrap();
    let (initrd, _) = layout.initrd.unwrap();
    assert!(initrd >= 4 << 30, "XLF_CAN_BE_LOADED_ABOVE_4G: at the top");
    let mut page = [0u8; 4096];
    write_boot_params(&mut page, &image, &layout, &e820_map(ram, None), None).unwrap();
    assert_eq!(u32_at(&page, EXT_RAMDISK_IMAGE_AT), (initrd >> 32) as u32);
    assert_eq!(u32_at(&page, RAMDISK_IMAGE_AT), initrd as u32);
}

#[test]
fn refuses_more_e820_entries_than_the_page_holds() {
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    let layout = layout_of(&image, 64 * MIB, None).unwrap();
    let many = vec![
        E820Entry {
            address: 0,
            size: 4096,
            kind: E820Kind::Ram
        };
        129
    ];
    let mut page = [0u8; 4096];
    assert_eq!(
        write_boot_params(&mut page, &image, &layout, &many, None),
        Err(LinuxImageError::TooManyE820Entries(129))
    );
}

#[test]
fn boot_gdt_has_flat_code_and_data_at_the_boot_selectors() {
    let code = BOOT_GDT[usize::from(BOOT_CS / 8)];
    let data = BOOT_GDT[usize::from(BOOT_DS / 8)];
    // Present, code segment (type 0xA: execute/read), L set, D clear.
    assert_eq!(code >> 40 & 0xFF, 0x9A);
    assert_eq!(code >> 53 & 1, 1);
    assert_eq!(code >> 54 & 1, 0);
    // Present, data (type 0x2: read/write), 4 KiB granularity, limit 0xFFFFF.
    assert_eq!(data >> 40 & 0xFF, 0x92);
    assert_eq!(data >> 55 & 1, 1);
    assert_eq!((data & 0xFFFF) | (data >> 48 & 0xF) << 16, 0xF_FFFF);
}

#[test]
fn boot_memory_holds_everything_where_the_zero_page_says() {
    use crate::x86::acpi_tables::{GuestAcpiSpec, build};
    let bytes = bzimage(4096);
    let image = BzImage::parse(&bytes).unwrap();
    let mut ram = vec![0xEEu8; 64 << 20];
    let initrd = vec![0x5Au8; 10_000];
    let acpi = build(
        &GuestAcpiSpec {
            apic_ids: vec![0, 1],
            io_apic: (2, 0xFEC0_0000),
        },
        0xE_0000,
    )
    .unwrap();
    let cmdline = "console=ttyS0 nokaslr";
    let layout = write_linux_memory(&mut ram, &image, Some(&initrd), cmdline, Some(&acpi)).unwrap();
    let page = &ram[0x7000..0x8000];
    assert_eq!(&page[0x202..0x206], b"HdrS");
    assert_eq!(u32_at(page, CMD_LINE_PTR_AT), 0x8000);
    assert_eq!(&ram[0x8000..0x8000 + cmdline.len()], cmdline.as_bytes());
    assert_eq!(ram[0x8000 + cmdline.len()], 0, "NUL-terminated");
    let kernel = layout.kernel as usize;
    assert_eq!(&ram[kernel..kernel + 4096], image.kernel());
    let initrd_at = u32_at(page, RAMDISK_IMAGE_AT) as usize;
    assert_eq!(&ram[initrd_at..initrd_at + initrd.len()], &initrd[..]);
    assert_eq!(u64_at(page, ACPI_RSDP_AT), 0xE_0000);
    assert_eq!(&ram[0xE_0000..0xE_0008], b"RSD PTR ");
    // The protocol's GDT, at the boot GDT's address.
    assert_eq!(u64_at(&ram, 0x800 + 0x10), BOOT_GDT[2]);
    assert_eq!(u64_at(&ram, 0x800 + 0x18), BOOT_GDT[3]);
    // The page tables map the kernel's entry 1:1 (PML4 at 0x1000).
    let pml4e = u64_at(&ram, 0x1000);
    let pdpte = u64_at(&ram, (pml4e & !0xFFF) as usize);
    let pde = u64_at(
        &ram,
        (pdpte & !0xFFF) as usize + 8 * (layout.entry as usize >> 21),
    );
    assert_eq!(
        pde & !0x1F_FFFF & 0xF_FFFF_FFFF_FFFF,
        layout.entry & !0x1F_FFFF
    );
    // ACPI tables outside the BIOS area are refused.
    let mut low = acpi.clone();
    low.base = 0x1_0000;
    assert!(write_linux_memory(&mut ram, &image, None, "", Some(&low)).is_err());
}

#[test]
fn the_command_line_tells_the_tsc_frequency_unless_the_config_does() {
    assert_eq!(
        command_line("console=ttyS0", 2_600_000),
        "console=ttyS0 tsc_early_khz=2600000"
    );
    assert_eq!(command_line("", 1000), "tsc_early_khz=1000");
    assert_eq!(
        command_line("tsc_early_khz=5 quiet", 1000),
        "tsc_early_khz=5 quiet"
    );
}
