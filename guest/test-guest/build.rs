//! Links the bare-metal guest at its fixed guest-physical address (link.ld).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=link.ld");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "none" {
        let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
        // Only the binary: the library is linked into it, not on its own.
        println!(
            "cargo:rustc-link-arg-bins=-T{}",
            dir.join("link.ld").display()
        );
    }
}
