//! Gives the bare-metal QEMU smoke example its memory layout; the library
//! itself needs no build step.

fn main() {
    println!("cargo:rerun-if-changed=examples/qemu_smoke.ld");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target == "aarch64-unknown-none" {
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
        println!("cargo:rustc-link-arg-examples=-T{dir}/examples/qemu_smoke.ld");
    }
}
