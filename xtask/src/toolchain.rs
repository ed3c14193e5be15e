//! What the pinned toolchain must have before an image can be built: the
//! bare-metal targets and `llvm-tools`. rustup installs a toolchain file's
//! targets and components only when it installs the toolchain itself, so a
//! machine that already had the pinned version (or runs with
//! `RUSTUP_AUTO_INSTALL=0`) lacks them and `cargo build --target
//! aarch64-unknown-none` fails with "can't find crate for `core`". The
//! README's first command must work there too: add what is missing, with
//! rustup, saying so.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use crate::image::BuildError;
use crate::workspace::{Workspace, output_of, run_checked};

/// The active toolchain's sysroot (`rustc --print sysroot`, run in the
/// workspace so `rust-toolchain.toml` picks the toolchain).
fn sysroot(workspace: &Workspace) -> Result<PathBuf, BuildError> {
    let mut rustc = Command::new(env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
    rustc
        .current_dir(&workspace.root)
        .args(["--print", "sysroot"]);
    let sysroot = output_of(&mut rustc, "rustc --print sysroot")?;
    Ok(PathBuf::from(sysroot.trim()))
}

/// Runs `rustup <args>` in the workspace (its pinned toolchain).
fn rustup(workspace: &Workspace, args: &[&str]) -> Result<(), BuildError> {
    let what = format!("rustup {}", args.join(" "));
    eprintln!("xtask: {what}");
    run_checked(
        Command::new("rustup")
            .current_dir(&workspace.root)
            .args(args),
        &what,
    )?;
    Ok(())
}

/// Makes sure the pinned toolchain has the standard library of `target`,
/// adding it with rustup when it does not.
pub fn ensure_target(workspace: &Workspace, target: &str) -> Result<(), BuildError> {
    let present = |workspace: &Workspace| -> Result<bool, BuildError> {
        Ok(sysroot(workspace)?
            .join("lib/rustlib")
            .join(target)
            .join("lib")
            .is_dir())
    };
    if present(workspace)? {
        return Ok(());
    }
    eprintln!("xtask: the pinned toolchain has no {target} standard library; adding it");
    rustup(workspace, &["target", "add", target])?;
    if present(workspace)? {
        Ok(())
    } else {
        Err(BuildError::MissingTarget(target.to_string()))
    }
}

/// Adds the `llvm-tools` component (for `llvm-objcopy`) with rustup.
pub fn add_llvm_tools(workspace: &Workspace) -> Result<(), BuildError> {
    eprintln!("xtask: the pinned toolchain has no llvm-tools; adding them");
    rustup(workspace, &["component", "add", "llvm-tools"])
}

/// Makes sure the pinned toolchain has `components` (rustup's names, as
/// `rust-toolchain.toml` lists them), adding the missing ones. Without
/// rustup there is nothing to ask: the build says what is missing.
pub fn ensure_components(workspace: &Workspace, components: &[&str]) -> Result<(), BuildError> {
    let Ok(output) = Command::new("rustup")
        .current_dir(&workspace.root)
        .args(["component", "list", "--installed"])
        .output()
    else {
        return Ok(());
    };
    let installed = String::from_utf8_lossy(&output.stdout).into_owned();
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| {
            !installed
                .lines()
                .any(|l| l == *c || l.starts_with(&format!("{c}-")))
        })
        .collect();
    if missing.is_empty() || !output.status.success() {
        return Ok(());
    }
    eprintln!(
        "xtask: the pinned toolchain lacks {}; adding them",
        missing.join(", ")
    );
    let mut args = vec!["component", "add"];
    args.extend(missing);
    rustup(workspace, &args)
}

/// Everything `cargo xtask test` builds with: the bare-metal targets (the
/// ARM hypervisor's soft-float one, its guests', x86's), the UEFI test
/// tool's target and the components `rust-toolchain.toml` lists.
pub fn ensure_all(workspace: &Workspace) -> Result<(), BuildError> {
    ensure_components(workspace, &["rust-src", "llvm-tools", "clippy", "rustfmt"])?;
    for target in [
        boards::ARM64_HV_TARGET,
        crate::guest::GUEST_TARGET,
        "x86_64-unknown-none",
        crate::uefi_tool::TARGET,
    ] {
        ensure_target(workspace, target)?;
    }
    Ok(())
}
