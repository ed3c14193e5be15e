//! `cargo xtask`: build, run, test and inspect the hypervisor.
#![forbid(unsafe_code)]

fn main() {
    eprintln!("usage: cargo xtask <build|run|test|topology> ...");
    std::process::exit(2);
}
