//! `cargo xtask build`: compile `hv` for a board and turn the ELF into the
//! image the board boots.

use std::env;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use hv::config::GuestImage;

use crate::board::{Board, ImageFormat};
use crate::workspace::{CommandError, Workspace, output_of, run_checked};

/// Why an image could not be built.
#[derive(Debug)]
pub enum BuildError {
    /// A tool could not be started, or ran and failed.
    Command(CommandError),
    /// A tool of the `llvm-tools` component is not where rustup puts it.
    NoLlvmTool(PathBuf),
    /// The toolchain has no standard library for this target, and rustup
    /// could not add it.
    MissingTarget(String),
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// The flat image is not a valid arm64 `Image`.
    BadImage(PathBuf, HeaderError),
    /// The Linux guest could not be prepared.
    Linux(crate::linux::LinuxError),
    /// An x86 Linux kernel that is no bootable bzImage, or does not fit the
    /// domain named (with its initramfs) by the boot protocol's layout.
    BadBzImage(String, hv::x86::linux_boot::LinuxImageError),
    /// A Linux domain's RAM cannot hold its kernel and initramfs.
    LinuxDoesNotFit(String, hv::guest_image::ImageError),
    /// The image is not a valid UEFI application.
    BadEfi(PathBuf, PeError),
    /// A position-independent image has relocations its entry code cannot apply.
    BadRelocations(PathBuf, String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command(e) => write!(f, "{e}"),
            Self::NoLlvmTool(path) => write!(
                f,
                "{} not found: add the llvm-tools component (rust-toolchain.toml lists it)",
                path.display()
            ),
            Self::MissingTarget(target) => write!(
                f,
                "the toolchain has no {target} standard library: run `rustup target add {target}` in the repository"
            ),
            Self::Io(path, e) => write!(f, "{}: {e}", path.display()),
            Self::BadImage(path, e) => write!(f, "{}: {e}", path.display()),
            Self::BadBzImage(what, e) => write!(f, "Linux x86 kernel, {what}: {e}"),
            Self::Linux(e) => write!(f, "Linux guest: {e}"),
            Self::LinuxDoesNotFit(domain, e) => write!(f, "domain '{domain}': {e}"),
            Self::BadEfi(path, e) => {
                write!(f, "{}: not a valid UEFI application: {e}", path.display())
            }
            Self::BadRelocations(path, types) => write!(
                f,
                "{}: relocations other than R_AARCH64_RELATIVE ({types}): boot.S applies only those",
                path.display()
            ),
        }
    }
}

impl From<CommandError> for BuildError {
    fn from(e: CommandError) -> Self {
        Self::Command(e)
    }
}

/// `llvm-objcopy` from the toolchain's `llvm-tools` component.
pub fn objcopy(workspace: &Workspace) -> Result<PathBuf, BuildError> {
    llvm_tool(workspace, "llvm-objcopy")
}

/// The tool `name` (`llvm-objcopy`, `llvm-objdump`...) from the toolchain's
/// `llvm-tools` component, added when missing.
pub fn llvm_tool(workspace: &Workspace, name: &str) -> Result<PathBuf, BuildError> {
    let rustc = || {
        let mut c = Command::new(env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
        c.current_dir(&workspace.root);
        c
    };
    let sysroot = output_of(
        rustc().args(["--print", "sysroot"]),
        "rustc --print sysroot",
    )?;
    let version = output_of(rustc().arg("-vV"), "rustc -vV")?;
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or("x86_64-unknown-linux-gnu");
    let path = Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(name);
    if !path.is_file() {
        crate::toolchain::add_llvm_tools(workspace)?;
    }
    if path.is_file() {
        Ok(path)
    } else {
        Err(BuildError::NoLlvmTool(path))
    }
}

/// Builds `hv` for `board` and returns the path of its bootable image
/// (`<target>/images/<board>/hv.bin`, or `hv.elf` for ELF boards).
pub fn build(workspace: &Workspace, board: &Board, release: bool) -> Result<PathBuf, BuildError> {
    build_with_config(workspace, board, release, None)
}

/// Like [`build`], with the domain/cpupool config from `config` instead of the
/// board's default (the image then lands in `images/<board>/<config stem>/`).
pub fn build_with_config(
    workspace: &Workspace,
    board: &Board,
    release: bool,
    config: Option<&Path>,
) -> Result<PathBuf, BuildError> {
    crate::toolchain::ensure_target(workspace, board.target)?;
    let mut cargo = workspace.cargo();
    cargo
        .args(["build", "-p", "hv", "--target", board.target])
        .env("HV_BOARD", board.name);
    if release {
        cargo.arg("--release");
    }
    let mut linux_domains = Vec::new();
    let mut user_images = String::new();
    if let Some((blob, parsed)) = crate::config::prepare_for_build(workspace, board, config)? {
        cargo.env("HV_CONFIG", blob);
        let config_path = crate::config::path_for_build(workspace, board, config);
        let x86 = board.target == crate::guest::GUEST_TARGET_X86;
        user_images = crate::config::user_images(&config_path, &parsed, x86)?;
        linux_domains = parsed
            .domains
            .into_iter()
            .filter(|d| d.image == GuestImage::Builtin(hv::config::LINUX_IMAGE.to_string()))
            .collect();
    }
    // The Linux guest (Debian's kernel + BusyBox initramfs) only goes into
    // images whose config runs it: it is ~35 MB.
    let (linux_image, linux_initramfs) = match linux_domains.is_empty() {
        true => (String::new(), String::new()),
        false => {
            let guest = if board.target == crate::guest::GUEST_TARGET_X86 {
                let guest = crate::linux::prepare_for(workspace, crate::linux::GuestArch::X86)
                    .map_err(BuildError::Linux)?;
                check_x86_linux_fits(&guest, &linux_domains)?;
                guest
            } else {
                let guest = crate::linux::prepare(workspace).map_err(BuildError::Linux)?;
                check_linux_fits(&guest, &linux_domains)?;
                guest
            };
            (
                guest.image.display().to_string(),
                guest.initramfs.display().to_string(),
            )
        }
    };
    cargo
        .env("HV_USER_IMAGES", user_images)
        .env("HV_LINUX_IMAGE", linux_image)
        .env("HV_LINUX_INITRAMFS", linux_initramfs);
    // Unikernel style: the test guest is built first and embedded in the image.
    if board.target == boards::ARM64_HV_TARGET {
        let guest = crate::guest::build(workspace, true)?;
        cargo.env("HV_GUEST_IMAGE", guest);
    } else if board.target == crate::guest::GUEST_TARGET_X86 {
        let guest = crate::guest::build_x86(workspace, true)?;
        cargo.env("HV_GUEST_IMAGE", guest);
    }
    run_checked(&mut cargo, "cargo build -p hv")?;

    let profile = if release { "release" } else { "debug" };
    let elf = workspace
        .target_dir
        .join(board.target)
        .join(profile)
        .join("hv");
    let mut dir = workspace.output("images").join(board.name);
    if let Some(stem) = config.and_then(Path::file_stem) {
        dir = dir.join(stem);
    }
    fs::create_dir_all(&dir).map_err(|e| BuildError::Io(dir.clone(), e))?;
    match board.image {
        ImageFormat::Elf => {
            let image = dir.join("hv.elf");
            fs::copy(&elf, &image).map_err(|e| BuildError::Io(elf.clone(), e))?;
            Ok(image)
        }
        ImageFormat::Arm64Image => flat_image(workspace, &elf, &dir),
        ImageFormat::EfiApplication => {
            check_relocations(workspace, &elf)?;
            let image = flat_image(workspace, &elf, &dir)?;
            let bytes = fs::read(&image).map_err(|e| BuildError::Io(image.clone(), e))?;
            let efi = dir.join("hv.efi");
            check_pe_header(&bytes).map_err(|e| BuildError::BadEfi(efi.clone(), e))?;
            fs::write(&efi, &bytes).map_err(|e| BuildError::Io(efi.clone(), e))?;
            write_esp(&dir.join("esp"), &bytes)?;
            Ok(efi)
        }
    }
}

/// Checks that each Linux domain's RAM holds the kernel (with its BSS), the
/// initramfs and the device tree, before anything boots.
fn check_linux_fits(
    guest: &crate::linux::LinuxGuest,
    domains: &[hv::config::DomainConfig],
) -> Result<(), BuildError> {
    let kernel = fs::read(&guest.image).map_err(|e| BuildError::Io(guest.image.clone(), e))?;
    check_arm64_header(&kernel).map_err(|e| BuildError::BadImage(guest.image.clone(), e))?;
    let initramfs = fs::metadata(&guest.initramfs)
        .map_err(|e| BuildError::Io(guest.initramfs.clone(), e))?
        .len();
    // The hypervisor's own loader layout (`hv::guest_image`).
    let kind = hv::guest_image::identify(&kernel)
        .map_err(|e| BuildError::LinuxDoesNotFit(guest.image.display().to_string(), e))?;
    for domain in domains {
        hv::guest_image::layout(
            kind,
            kernel.len() as u64,
            initramfs,
            domain.memory_mib << 20,
        )
        .map_err(|e| BuildError::LinuxDoesNotFit(domain.name.clone(), e))?;
    }
    Ok(())
}

/// Checks that each x86 Linux domain's RAM holds the bzImage's kernel with
/// its decompression room, the initramfs and the boot data, as the
/// hypervisor's loader will lay them out (`hv::x86::linux_boot::layout`).
fn check_x86_linux_fits(
    guest: &crate::linux::LinuxGuest,
    domains: &[hv::config::DomainConfig],
) -> Result<(), BuildError> {
    use hv::x86::linux_boot::{BzImage, layout};
    let kernel = fs::read(&guest.image).map_err(|e| BuildError::Io(guest.image.clone(), e))?;
    let bz_image = BzImage::parse(&kernel)
        .map_err(|e| BuildError::BadBzImage(guest.image.display().to_string(), e))?;
    let initramfs = fs::metadata(&guest.initramfs)
        .map_err(|e| BuildError::Io(guest.initramfs.clone(), e))?
        .len();
    for domain in domains {
        layout(
            &bz_image,
            domain.memory_mib << 20,
            Some(initramfs),
            domain.bootargs.len(),
        )
        .map_err(|e| BuildError::BadBzImage(domain.name.clone(), e))?;
    }
    Ok(())
}

/// The UEFI shell script in [`write_esp`]'s folder: the shell runs
/// `startup.nsh` from the first file system after a short countdown.
pub const STARTUP_NSH: &str = "\\EFI\\BOOT\\BOOTAA64.EFI\r\n";

/// Writes an EFI system partition tree for `image` into `esp`: the image at the
/// removable-media boot path `EFI/BOOT/BOOTAA64.EFI` (firmware boots it with
/// no boot entry), and `startup.nsh` for the UEFI shell. QEMU serves the
/// folder as a FAT drive; on a server, copy it onto a FAT partition.
pub fn write_esp(esp: &Path, image: &[u8]) -> Result<(), BuildError> {
    let boot = esp.join("EFI").join("BOOT");
    fs::create_dir_all(&boot).map_err(|e| BuildError::Io(boot.clone(), e))?;
    let loader = boot.join("BOOTAA64.EFI");
    fs::write(&loader, image).map_err(|e| BuildError::Io(loader, e))?;
    let script = esp.join("startup.nsh");
    fs::write(&script, STARTUP_NSH).map_err(|e| BuildError::Io(script, e))
}

/// `llvm-objcopy -O binary` of `elf` to `dir/hv.bin`, header checked.
fn flat_image(workspace: &Workspace, elf: &Path, dir: &Path) -> Result<PathBuf, BuildError> {
    let image = dir.join("hv.bin");
    run_checked(
        Command::new(objcopy(workspace)?)
            .args(["-O", "binary"])
            .arg(elf)
            .arg(&image),
        "llvm-objcopy -O binary",
    )?;
    let bytes = fs::read(&image).map_err(|e| BuildError::Io(image.clone(), e))?;
    check_arm64_header(&bytes).map_err(|e| BuildError::BadImage(image.clone(), e))?;
    Ok(image)
}

/// A position-independent image must carry only `R_AARCH64_RELATIVE`
/// relocations: the only kind its entry code applies (boot.S). Read with the
/// toolchain's `llvm-readobj`, beside `llvm-objcopy`.
fn check_relocations(workspace: &Workspace, elf: &Path) -> Result<(), BuildError> {
    let readobj = objcopy(workspace)?.with_file_name("llvm-readobj");
    let listing = output_of(
        Command::new(&readobj).arg("--relocs").arg(elf),
        "llvm-readobj --relocs",
    )?;
    let others = other_relocation_types(&listing);
    if others.is_empty() {
        Ok(())
    } else {
        Err(BuildError::BadRelocations(
            elf.to_path_buf(),
            others.join(", "),
        ))
    }
}

/// The relocation types in an `llvm-readobj --relocs` listing other than
/// `R_AARCH64_RELATIVE`, each once.
fn other_relocation_types(listing: &str) -> Vec<String> {
    let mut types: Vec<String> = listing
        .split_whitespace()
        .filter(|word| word.starts_with("R_AARCH64_") && *word != "R_AARCH64_RELATIVE")
        .map(str::to_string)
        .collect();
    types.sort();
    types.dedup();
    types
}

/// What is wrong with the PE/COFF header of an EFI image.
#[derive(Debug, PartialEq, Eq)]
pub enum PeError {
    /// The file ends inside the header.
    Truncated,
    /// No "MZ" at offset 0.
    NoDosSignature,
    /// No "PE\0\0" where offset 0x3c points.
    NoPeSignature(u32),
    /// Not an ARM64 image.
    Machine(u16),
    /// Not a PE32+ optional header.
    OptionalMagic(u16),
    /// Not an EFI application (subsystem 10).
    Subsystem(u16),
    /// The sections do not cover the file after the headers exactly, with file
    /// offsets equal to image offsets (the flat image is its own memory layout).
    SectionsDoNotCoverFile {
        /// Where the headers end.
        headers: u32,
        /// Where the last section's raw data ends.
        sections_end: u64,
        /// The file's length.
        file: usize,
    },
    /// SizeOfImage is smaller than the file.
    ImageSmallerThanFile(u32),
    /// The entry point is outside the sections.
    EntryOutside(u32),
}

impl fmt::Display for PeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => write!(f, "the file ends inside the PE header"),
            Self::NoDosSignature => write!(f, "no MZ signature at offset 0"),
            Self::NoPeSignature(at) => write!(f, "no PE signature at {at:#x} (offset 0x3c)"),
            Self::Machine(m) => write!(f, "machine {m:#x}, not ARM64 (0xaa64)"),
            Self::OptionalMagic(m) => write!(f, "optional header magic {m:#x}, not PE32+ (0x20b)"),
            Self::Subsystem(s) => write!(f, "subsystem {s}, not an EFI application (10)"),
            Self::SectionsDoNotCoverFile {
                headers,
                sections_end,
                file,
            } => write!(
                f,
                "sections cover {headers:#x}..{sections_end:#x}, the file is {file:#x} bytes"
            ),
            Self::ImageSmallerThanFile(size) => {
                write!(f, "SizeOfImage {size:#x} is below the file size")
            }
            Self::EntryOutside(entry) => {
                write!(f, "entry point {entry:#x} is outside the sections")
            }
        }
    }
}

/// Checks that a flat image is also a loadable PE/COFF EFI application.
pub fn check_pe_header(image: &[u8]) -> Result<(), PeError> {
    let u16_at = |at: usize| -> Result<u16, PeError> {
        let bytes = image.get(at..at + 2).ok_or(PeError::Truncated)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    };
    let u32_at = |at: usize| -> Result<u32, PeError> {
        let bytes = image.get(at..at + 4).ok_or(PeError::Truncated)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    };
    if image.get(..2) != Some(b"MZ") {
        return Err(PeError::NoDosSignature);
    }
    let pe = u32_at(0x3c)?;
    let at = pe as usize;
    if image.get(at..at + 4) != Some(b"PE\0\0") {
        return Err(PeError::NoPeSignature(pe));
    }
    let coff = at + 4;
    let machine = u16_at(coff)?;
    if machine != 0xaa64 {
        return Err(PeError::Machine(machine));
    }
    let sections = usize::from(u16_at(coff + 2)?);
    let optional = coff + 20;
    let optional_size = usize::from(u16_at(coff + 16)?);
    let magic = u16_at(optional)?;
    if magic != 0x20b {
        return Err(PeError::OptionalMagic(magic));
    }
    let entry = u32_at(optional + 16)?;
    let size_of_image = u32_at(optional + 56)?;
    let headers = u32_at(optional + 60)?;
    let subsystem = u16_at(optional + 68)?;
    if subsystem != 10 {
        return Err(PeError::Subsystem(subsystem));
    }
    let table = optional + optional_size;
    let mut expected_start = u64::from(headers);
    let mut entry_inside = false;
    for index in 0..sections {
        let section = table + index * 40;
        let virtual_size = u32_at(section + 8)?;
        let virtual_address = u32_at(section + 12)?;
        let raw_size = u32_at(section + 16)?;
        let raw_pointer = u32_at(section + 20)?;
        if raw_pointer != virtual_address || u64::from(raw_pointer) != expected_start {
            break;
        }
        expected_start += u64::from(raw_size);
        entry_inside |=
            (virtual_address..virtual_address.saturating_add(virtual_size)).contains(&entry);
    }
    if expected_start != image.len() as u64 || sections == 0 {
        return Err(PeError::SectionsDoNotCoverFile {
            headers,
            sections_end: expected_start,
            file: image.len(),
        });
    }
    if (size_of_image as usize) < image.len() {
        return Err(PeError::ImageSmallerThanFile(size_of_image));
    }
    if !entry_inside {
        return Err(PeError::EntryOutside(entry));
    }
    Ok(())
}

/// Offset of the `ARM\x64` magic in an arm64 `Image` header
/// (Linux `Documentation/arch/arm64/booting.rst`).
const ARM64_MAGIC_OFFSET: usize = 0x38;
/// The magic, little-endian `0x644d5241`.
const ARM64_MAGIC: &[u8; 4] = b"ARM\x64";
/// Size of the header.
const ARM64_HEADER_LEN: usize = 64;

/// What is wrong with an arm64 `Image` header.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than the 64-byte header (an empty image: no loadable sections).
    TooShort(usize),
    /// No `ARM\x64` magic at offset 0x38: QEMU and bootloaders would not treat
    /// it as a kernel image.
    NoMagic,
    /// `image_size` in the header is smaller than the file.
    SizeTooSmall {
        /// The header's `image_size`.
        header: u64,
        /// The file's length.
        file: usize,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort(len) => write!(f, "only {len} bytes: not an arm64 Image"),
            Self::NoMagic => write!(f, "no arm64 Image header (magic ARM\\x64 at 0x38)"),
            Self::SizeTooSmall { header, file } => write!(
                f,
                "header image_size {header:#x} is smaller than the file ({file:#x} bytes)"
            ),
        }
    }
}

/// Checks the arm64 `Image` header at the start of a flat image.
pub fn check_arm64_header(image: &[u8]) -> Result<(), HeaderError> {
    if image.len() < ARM64_HEADER_LEN {
        return Err(HeaderError::TooShort(image.len()));
    }
    if &image[ARM64_MAGIC_OFFSET..ARM64_MAGIC_OFFSET + 4] != ARM64_MAGIC {
        return Err(HeaderError::NoMagic);
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&image[0x10..0x18]);
    let header = u64::from_le_bytes(size);
    // 0 means "unknown" for old kernels; otherwise it must cover the file.
    if header != 0 && header < image.len() as u64 {
        return Err(HeaderError::SizeTooSmall {
            header,
            file: image.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(image_size: u64) -> Vec<u8> {
        let mut image = vec![0u8; 4096];
        image[0x10..0x18].copy_from_slice(&image_size.to_le_bytes());
        image[ARM64_MAGIC_OFFSET..ARM64_MAGIC_OFFSET + 4].copy_from_slice(ARM64_MAGIC);
        image
    }

    #[test]
    fn arm64_header_checks() {
        assert_eq!(check_arm64_header(&header(0x10000)), Ok(()));
        assert_eq!(check_arm64_header(&header(0)), Ok(()));
        assert_eq!(
            check_arm64_header(&header(0x100)),
            Err(HeaderError::SizeTooSmall {
                header: 0x100,
                file: 4096
            })
        );
        assert_eq!(check_arm64_header(&[]), Err(HeaderError::TooShort(0)));
        assert_eq!(check_arm64_header(&[0; 128]), Err(HeaderError::NoMagic));
    }
}
