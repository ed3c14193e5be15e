//! `cargo xtask`: build, run, test and inspect the hypervisor.
#![forbid(unsafe_code)]

mod topology;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("topology") => topology::run(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <build|run|test|topology> ...");
            ExitCode::from(2)
        }
    }
}
