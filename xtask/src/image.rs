//! `cargo xtask build`: compile `hv` for a board and turn the ELF into the
//! image the board boots.

use std::env;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use hv::config::GuestImage;

use crate::board::{Board, ImageFormat};

/// Where the workspace is and where cargo puts its output.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// The repository root (the workspace `Cargo.toml`'s directory).
    pub root: PathBuf,
    /// `CARGO_TARGET_DIR` if set, else `<root>/target`.
    pub target_dir: PathBuf,
}

impl Workspace {
    /// The workspace xtask was built in.
    pub fn current() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in a workspace subdirectory")
            .to_path_buf();
        let target_dir = match env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                // Cargo reads a relative CARGO_TARGET_DIR from the current directory.
                env::current_dir().map(|cwd| cwd.join(&dir)).unwrap_or(dir)
            }
            None => root.join("target"),
        };
        Self { root, target_dir }
    }

    /// A `cargo` command run from the workspace root.
    pub fn cargo(&self) -> Command {
        let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command.current_dir(&self.root);
        command
    }

    /// The directory for generated files of one kind (`images`, `qemu-logs`…).
    pub fn output(&self, kind: &str) -> PathBuf {
        self.target_dir.join(kind)
    }
}

/// Why an image could not be built.
#[derive(Debug)]
pub enum BuildError {
    /// A tool could not be started.
    Spawn(String, std::io::Error),
    /// A tool ran and failed.
    Failed(String, std::process::ExitStatus),
    /// `llvm-objcopy` is not where rustup puts it.
    NoObjcopy(PathBuf),
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// The flat image is not a valid arm64 `Image`.
    BadImage(PathBuf, HeaderError),
    /// The Linux guest could not be prepared.
    Linux(crate::linux::LinuxError),
    /// A Linux domain's RAM cannot hold its kernel and initramfs.
    LinuxDoesNotFit(String, crate::linux::DoesNotFit),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn(what, e) => write!(f, "cannot run {what}: {e}"),
            Self::Failed(what, status) => write!(f, "{what} failed: {status}"),
            Self::NoObjcopy(path) => write!(
                f,
                "{} not found: add the llvm-tools component (rust-toolchain.toml lists it)",
                path.display()
            ),
            Self::Io(path, e) => write!(f, "{}: {e}", path.display()),
            Self::BadImage(path, e) => write!(f, "{}: {e}", path.display()),
            Self::Linux(e) => write!(f, "Linux guest: {e}"),
            Self::LinuxDoesNotFit(domain, e) => write!(f, "domain '{domain}': {e}"),
        }
    }
}

/// Runs `command`, failing on a non-zero exit.
pub fn run_checked(command: &mut Command, what: &str) -> Result<(), BuildError> {
    let status = command
        .status()
        .map_err(|e| BuildError::Spawn(what.to_string(), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Failed(what.to_string(), status))
    }
}

/// Runs `command` and returns its stdout, failing on a non-zero exit.
fn output_of(command: &mut Command, what: &str) -> Result<String, BuildError> {
    let out = command
        .output()
        .map_err(|e| BuildError::Spawn(what.to_string(), e))?;
    if !out.status.success() {
        return Err(BuildError::Failed(what.to_string(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `llvm-objcopy` from the toolchain's `llvm-tools` component.
pub fn objcopy(workspace: &Workspace) -> Result<PathBuf, BuildError> {
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
        .join("bin/llvm-objcopy");
    if path.is_file() {
        Ok(path)
    } else {
        Err(BuildError::NoObjcopy(path))
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
    let mut cargo = workspace.cargo();
    cargo
        .args(["build", "-p", "hv", "--target", board.target])
        .env("HV_BOARD", board.name);
    if release {
        cargo.arg("--release");
    }
    let mut linux_domains = Vec::new();
    if let Some((blob, parsed)) = crate::config::prepare_for_build(workspace, board, config)? {
        cargo.env("HV_CONFIG", blob);
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
            let guest = crate::linux::prepare(workspace).map_err(BuildError::Linux)?;
            check_linux_fits(&guest, &linux_domains)?;
            (
                guest.image.display().to_string(),
                guest.initramfs.display().to_string(),
            )
        }
    };
    cargo
        .env("HV_LINUX_IMAGE", linux_image)
        .env("HV_LINUX_INITRAMFS", linux_initramfs);
    // Unikernel style: the test guest is built first and embedded in the image.
    if board.target == "aarch64-unknown-none" {
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
        ImageFormat::Arm64Image => {
            let image = dir.join("hv.bin");
            run_checked(
                Command::new(objcopy(workspace)?)
                    .args(["-O", "binary"])
                    .arg(&elf)
                    .arg(&image),
                "llvm-objcopy -O binary",
            )?;
            let bytes = fs::read(&image).map_err(|e| BuildError::Io(image.clone(), e))?;
            check_arm64_header(&bytes).map_err(|e| BuildError::BadImage(image.clone(), e))?;
            Ok(image)
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
    let header = crate::linux::image_header(&kernel)
        .map_err(|e| BuildError::BadImage(guest.image.clone(), e))?;
    let initramfs = fs::metadata(&guest.initramfs)
        .map_err(|e| BuildError::Io(guest.initramfs.clone(), e))?
        .len();
    for domain in domains {
        crate::linux::check_fits(header, initramfs, domain.memory_mib << 20)
            .map_err(|e| BuildError::LinuxDoesNotFit(domain.name.clone(), e))?;
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
