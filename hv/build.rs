//! Picks the board (env `HV_BOARD`, default `qemu-virt`) and writes the linker
//! script with that board's load address.

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=HV_BOARD");
    println!("cargo:rerun-if-changed=link.ld.in");
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
    let template = fs::read_to_string("link.ld.in").expect("hv/link.ld.in exists");
    let script = template.replace("@LOAD_ADDRESS@", &format!("{load_address:#x}"));
    fs::write(out.join("link.ld"), script).expect("OUT_DIR is writable");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "none" {
        println!("cargo:rustc-link-arg=-T{}", out.join("link.ld").display());
    }
    println!("cargo:rustc-env=HV_BOARD={board}");
}
