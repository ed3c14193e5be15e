//! Picks the board (env `HV_BOARD`, default `qemu-virt`) and writes the linker
//! script with that board's load address (`link.ld.in` for ARM64 boards,
//! `link-x86.ld.in` for x86-64 ones).

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=HV_BOARD");
    println!("cargo:rerun-if-changed=link.ld.in");
    println!("cargo:rerun-if-changed=link-x86.ld.in");
    let board = env::var("HV_BOARD").unwrap_or_else(|_| "qemu-virt".to_string());
    let Some(description) = boards::by_name(&board) else {
        let known: Vec<_> = boards::ALL.iter().map(|b| b.name).collect();
        panic!(
            "HV_BOARD={board}: unknown board (known: {})",
            known.join(", ")
        );
    };
    let load_address = description.load_address;
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let x86 = description.target.starts_with("x86_64");
    let template_name = if x86 { "link-x86.ld.in" } else { "link.ld.in" };
    let template = fs::read_to_string(template_name).expect("hv's linker templates exist");
    let script = template.replace("@LOAD_ADDRESS@", &format!("{load_address:#x}"));
    fs::write(out.join("link.ld"), script).expect("OUT_DIR is writable");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if target_os == "none" && !description.target.starts_with(target_arch.as_str()) {
        panic!(
            "HV_BOARD={board} is built for {}, not {target_arch}: set HV_BOARD to a board of this target",
            description.target
        );
    }
    if target_os == "none" {
        println!("cargo:rustc-link-arg=-T{}", out.join("link.ld").display());
        if description.relocatable {
            // A static PIE: lld emits R_AARCH64_RELATIVE relocations that
            // boot.S applies for the load address UEFI chose. `-z notext`
            // lets them patch read-only data (vtables, the code is compiled
            // for the static model): the image is one RWX PE section anyway.
            println!("cargo:rustc-link-arg=-pie");
            println!("cargo:rustc-link-arg=-znotext");
            println!("cargo:rustc-link-arg=--no-dynamic-linker");
        }
        if x86 {
            // x86_64-unknown-none links position-independent by default, and
            // lld leaves RELA targets zero: the PVH loader applies no
            // relocations, so link at the fixed address instead (the 32-bit
            // entry code uses absolute addresses anyway).
            println!("cargo:rustc-link-arg=--no-pie");
        }
    }
    println!("cargo:rustc-env=HV_BOARD={board}");

    // The test guest, embedded so the whole system is one image (unikernel
    // style). xtask builds it first and names it in HV_GUEST_IMAGE; without
    // it the image carries no guest and boots to idle.
    println!("cargo:rerun-if-env-changed=HV_GUEST_IMAGE");
    let guest = out.join("guest.bin");
    match env::var("HV_GUEST_IMAGE") {
        Ok(path) if !path.is_empty() => {
            println!("cargo:rerun-if-changed={path}");
            fs::copy(&path, &guest).unwrap_or_else(|e| panic!("HV_GUEST_IMAGE={path}: {e}"));
        }
        _ => fs::write(&guest, []).expect("OUT_DIR is writable"),
    }

    // The Linux guest (kernel `Image` and initramfs), embedded only when the
    // config runs it: xtask names them in HV_LINUX_IMAGE / HV_LINUX_INITRAMFS.
    for (var, file) in [
        ("HV_LINUX_IMAGE", "linux-image.bin"),
        ("HV_LINUX_INITRAMFS", "linux-initramfs.cpio"),
    ] {
        println!("cargo:rerun-if-env-changed={var}");
        let dest = out.join(file);
        match env::var(var) {
            Ok(path) if !path.is_empty() => {
                println!("cargo:rerun-if-changed={path}");
                copy_if_changed(&path, &dest).unwrap_or_else(|e| panic!("{var}={path}: {e}"));
            }
            _ => fs::write(&dest, []).expect("OUT_DIR is writable"),
        }
    }

    // Images the config names by file (`image = { file = "PATH" }`): xtask
    // lists them in HV_USER_IMAGES, one `NAME<TAB>ABSOLUTE PATH` per line,
    // NAME as the config wrote it; each is embedded and found by NAME.
    println!("cargo:rerun-if-env-changed=HV_USER_IMAGES");
    let mut table = String::from(
        "/// The images the config names by file, by the name it gives them.\n\
         pub static USER_IMAGES: &[(&str, &[u8])] = &[\n",
    );
    for line in env::var("HV_USER_IMAGES").unwrap_or_default().lines() {
        let Some((name, path)) = line.split_once('\t') else {
            panic!("HV_USER_IMAGES: {line:?} is not NAME<TAB>PATH");
        };
        println!("cargo:rerun-if-changed={path}");
        table.push_str(&format!("    ({name:?}, include_bytes!({path:?})),\n"));
    }
    table.push_str("];\n");
    fs::write(out.join("user_images.rs"), table).expect("OUT_DIR is writable");

    // The domain/cpupool configuration, checked and encoded by xtask
    // (`cargo xtask config check`); without one the hypervisor boots with one
    // pool and no domains.
    println!("cargo:rerun-if-env-changed=HV_CONFIG");
    let config = out.join("config.hvcfg");
    match env::var("HV_CONFIG") {
        Ok(path) if !path.is_empty() => {
            println!("cargo:rerun-if-changed={path}");
            fs::copy(&path, &config).unwrap_or_else(|e| panic!("HV_CONFIG={path}: {e}"));
        }
        _ => fs::write(&config, []).expect("OUT_DIR is writable"),
    }
}

/// Copies `from` to `to` unless `to` already holds the same bytes.
fn copy_if_changed(from: &str, to: &std::path::Path) -> std::io::Result<()> {
    let bytes = fs::read(from)?;
    if fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    fs::write(to, bytes)
}
