//! The UEFI test tool `tests/uefi-madt-classes`: built for
//! `aarch64-unknown-uefi`, and an EFI system partition on which it boots
//! first, gives edk2's MADT two efficiency classes and then starts the
//! hypervisor (scenario `ampere-uefi-big-little`). QEMU virt builds its ACPI
//! tables itself and ignores `-acpitable`, so a big.LITTLE machine on real
//! firmware has to be made this way.

use std::fs;
use std::path::{Path, PathBuf};

use crate::image::{BuildError, write_esp};
use crate::workspace::{Workspace, run_checked};

/// The tool's target.
pub const TARGET: &str = "aarch64-unknown-uefi";
/// Its package.
const PACKAGE: &str = "uefi-madt-classes";
/// The folder (beside the hypervisor image) of the EFI system partition
/// that boots the tool.
pub const ESP_DIR: &str = "esp-madt-classes";
/// Where the tool looks for the hypervisor on its volume (`src/main.rs`).
const HYPERVISOR_ON_ESP: [&str; 3] = ["EFI", "hv", "hv.efi"];

/// Builds the tool (release); returns its `.efi`.
pub fn build(workspace: &Workspace) -> Result<PathBuf, BuildError> {
    crate::toolchain::ensure_target(workspace, TARGET)?;
    let mut cargo = workspace.cargo();
    cargo.args(["build", "--release", "-p", PACKAGE, "--bin", PACKAGE]);
    cargo.args(["--target", TARGET]);
    run_checked(&mut cargo, "cargo build -p uefi-madt-classes")?;
    Ok(workspace
        .target_dir
        .join(TARGET)
        .join("release")
        .join(format!("{PACKAGE}.efi")))
}

/// Builds the tool and writes [`ESP_DIR`] beside the hypervisor's UEFI
/// image `efi`: the tool at the removable-media boot path, the hypervisor
/// where the tool loads it from. Returns the folder.
pub fn write_tool_esp(workspace: &Workspace, efi: &Path) -> Result<PathBuf, BuildError> {
    let tool = build(workspace)?;
    let read = |path: &Path| fs::read(path).map_err(|e| BuildError::Io(path.to_path_buf(), e));
    let esp = efi.with_file_name(ESP_DIR);
    write_esp(&esp, &read(&tool)?)?;
    let hypervisor: PathBuf = HYPERVISOR_ON_ESP.iter().fold(esp.clone(), |p, c| p.join(c));
    if let Some(dir) = hypervisor.parent() {
        fs::create_dir_all(dir).map_err(|e| BuildError::Io(dir.to_path_buf(), e))?;
    }
    fs::write(&hypervisor, read(efi)?).map_err(|e| BuildError::Io(hypervisor.clone(), e))?;
    Ok(esp)
}
