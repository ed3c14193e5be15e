//! `cargo xtask topology FILE [--json]`: print the topology the hypervisor would build.

use std::process::ExitCode;

/// Runs the `topology` command with the arguments after its name.
pub fn run(_args: &[String]) -> ExitCode {
    eprintln!("topology: not built yet");
    ExitCode::FAILURE
}
