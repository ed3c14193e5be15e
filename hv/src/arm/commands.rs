//! The hypervisor console's commands (typed while the hypervisor has console
//! input): parsed by `hv::console_cmd`, run here against the scheduler and
//! the domains. Every command answers with lines on the console; a failure
//! is one `error: ...` line and changes nothing.

use hv::console_cmd::{self, Command};
use platform::arch::aarch64::console;

/// Runs one typed line.
pub fn run(line: &str) {
    match console_cmd::parse(line) {
        Ok(None) => {}
        Ok(Some(Command::Help)) => {
            for help in console_cmd::HELP {
                say(format_args!("{help}"));
            }
        }
        Ok(Some(_)) => say(format_args!("error: not available yet")),
        Err(e) => say(format_args!("error: {e}")),
    }
}

/// One answer line, without the log prefix (the console is interactive).
fn say(args: core::fmt::Arguments<'_>) {
    console::write_fmt(format_args!("{args}\n"));
}
