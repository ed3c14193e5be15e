//! `cargo xtask lab [--quick] [--seed N] [--seeds K] [--scheduler NAME] [--out DIR]`:
//! the scheduling lab. The lab is its own crate (`lab/`, a deterministic
//! simulator driving `sched`); this runs it in release mode, where the full
//! matrix takes seconds instead of minutes, and passes its exit status on
//! (non-zero when a target FAILs).

use std::path::Path;
use std::process::{Command, ExitCode};

/// Runs the lab with the arguments after `lab`.
pub fn run(args: &[String]) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let status = Command::new(cargo)
        .current_dir(root)
        .args(["run", "--release", "--quiet", "--package", "lab", "--"])
        .args(args)
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(s.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask lab: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}
