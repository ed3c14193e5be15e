//! Where the workspace is, and running the tools `cargo xtask` drives
//! (cargo, rustc, objcopy, QEMU's helpers) with their failures as values.
//! Every other xtask module builds on this one; it depends on none.

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the workspace is and where cargo puts its output.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// The repository root (the workspace `Cargo.toml`'s directory).
    pub root: PathBuf,
    /// `CARGO_TARGET_DIR` if set, else `<root>/target`.
    pub target_dir: PathBuf,
}

impl Workspace {
    /// The workspace xtask was built in.
    pub fn current() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in a workspace subdirectory")
            .to_path_buf();
        let target_dir = match env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                // Cargo reads a relative CARGO_TARGET_DIR from the current directory.
                env::current_dir().map(|cwd| cwd.join(&dir)).unwrap_or(dir)
            }
            None => root.join("target"),
        };
        Self { root, target_dir }
    }

    /// A `cargo` command run from the workspace root.
    pub fn cargo(&self) -> Command {
        let mut command = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        command.current_dir(&self.root);
        command
    }

    /// The directory for generated files of one kind (`images`, `qemu-logs`…).
    pub fn output(&self, kind: &str) -> PathBuf {
        self.target_dir.join(kind)
    }
}

/// A tool that could not be started, or ran and failed.
#[derive(Debug)]
pub enum CommandError {
    /// The tool could not be started.
    Spawn(String, std::io::Error),
    /// The tool ran and exited with a failure.
    Failed(String, std::process::ExitStatus),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn(what, e) => write!(f, "cannot run {what}: {e}"),
            Self::Failed(what, status) => write!(f, "{what} failed: {status}"),
        }
    }
}

/// Runs `command`, failing on a non-zero exit.
pub fn run_checked(command: &mut Command, what: &str) -> Result<(), CommandError> {
    let status = command
        .status()
        .map_err(|e| CommandError::Spawn(what.to_string(), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(CommandError::Failed(what.to_string(), status))
    }
}

/// Runs `command` and returns its stdout, failing on a non-zero exit.
pub fn output_of(command: &mut Command, what: &str) -> Result<String, CommandError> {
    let out = command
        .output()
        .map_err(|e| CommandError::Spawn(what.to_string(), e))?;
    if !out.status.success() {
        return Err(CommandError::Failed(what.to_string(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
