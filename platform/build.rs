//! Declares the `loom` cfg (set with `RUSTFLAGS="--cfg loom"` to model-check the console hand-off).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
