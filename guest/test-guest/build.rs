//! Links the bare-metal guest at its fixed guest-physical address (link.ld on
//! aarch64, link-x86_64.ld on x86-64).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=link-x86_64.ld");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if target_os == "none" {
        let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
        let script = if target_arch == "x86_64" {
            // x86_64-unknown-none links position-independent by default; the
            // hypervisor loads the flat image at its link address.
            println!("cargo:rustc-link-arg-bins=--no-pie");
            "link-x86_64.ld"
        } else {
            "link.ld"
        };
        // Only the binary: the library is linked into it, not on its own.
        println!("cargo:rustc-link-arg-bins=-T{}", dir.join(script).display());
    }
}
