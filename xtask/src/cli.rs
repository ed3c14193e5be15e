//! A small command-line parser for the xtask commands: `--name value`,
//! `--name=value`, bare `--flag`s, and everything after `--` passed through.

use std::fmt;

/// A command-line mistake, reported with the command's usage.
#[derive(Debug, PartialEq, Eq)]
pub enum CliError {
    /// An option this command does not know.
    Unknown(String),
    /// An option that needs a value got none.
    MissingValue(String),
    /// A value that does not parse.
    BadValue {
        /// The option.
        option: String,
        /// The value given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(option) => write!(f, "unknown option {option}"),
            Self::MissingValue(option) => write!(f, "{option} needs a value"),
            Self::BadValue {
                option,
                value,
                expected,
            } => write!(f, "{option} {value}: expected {expected}"),
        }
    }
}

/// The arguments of one command, consumed option by option.
pub struct Args {
    options: Vec<String>,
    /// Everything after `--`.
    pub passthrough: Vec<String>,
}

impl Args {
    /// Splits `args` at the first `--`.
    pub fn new(args: &[String]) -> Self {
        let split = args.iter().position(|a| a == "--");
        let (options, passthrough) = match split {
            Some(at) => (args[..at].to_vec(), args[at + 1..].to_vec()),
            None => (args.to_vec(), Vec::new()),
        };
        Self {
            options,
            passthrough,
        }
    }

    /// Removes a bare `--name` flag; true if it was there.
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.options.len();
        self.options.retain(|a| a != name);
        self.options.len() != before
    }

    /// Removes `--name VALUE` or `--name=VALUE` and returns the value (the last
    /// one if given several times).
    pub fn value(&mut self, name: &str) -> Result<Option<String>, CliError> {
        let mut found = None;
        let mut i = 0;
        while i < self.options.len() {
            if self.options[i] == name {
                if i + 1 >= self.options.len() || self.options[i + 1].starts_with("--") {
                    return Err(CliError::MissingValue(name.to_string()));
                }
                found = Some(self.options.remove(i + 1));
                self.options.remove(i);
            } else if let Some(value) = self.options[i]
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('='))
            {
                found = Some(value.to_string());
                self.options.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(found)
    }

    /// Like [`Args::value`], parsed with `FromStr`.
    pub fn parsed<T: std::str::FromStr>(
        &mut self,
        name: &str,
        expected: &'static str,
    ) -> Result<Option<T>, CliError> {
        match self.value(name)? {
            None => Ok(None),
            Some(value) => value.parse().map(Some).map_err(|_| CliError::BadValue {
                option: name.to_string(),
                value,
                expected,
            }),
        }
    }

    /// Fails on anything not consumed yet.
    pub fn finish(self) -> Result<Vec<String>, CliError> {
        match self.options.into_iter().next() {
            Some(extra) => Err(CliError::Unknown(extra)),
            None => Ok(self.passthrough),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Args {
        let v: Vec<String> = text.split_whitespace().map(String::from).collect();
        Args::new(&v)
    }

    #[test]
    fn values_flags_and_passthrough() {
        let mut a = args("--board qemu-virt --release --gic=2 -- -d int --release");
        assert_eq!(a.value("--board"), Ok(Some("qemu-virt".to_string())));
        assert!(a.flag("--release"));
        assert!(!a.flag("--verbose"));
        assert_eq!(a.parsed::<u8>("--gic", "2 or 3"), Ok(Some(2)));
        assert_eq!(a.value("--smp"), Ok(None));
        assert_eq!(a.finish().unwrap(), ["-d", "int", "--release"]);
    }

    #[test]
    fn mistakes_are_reported() {
        assert_eq!(
            args("--board").value("--board"),
            Err(CliError::MissingValue("--board".into()))
        );
        assert_eq!(
            args("--board --release").value("--board"),
            Err(CliError::MissingValue("--board".into()))
        );
        assert!(matches!(
            args("--timeout soon").parsed::<u64>("--timeout", "seconds"),
            Err(CliError::BadValue { .. })
        ));
        assert_eq!(
            args("--bogus").finish(),
            Err(CliError::Unknown("--bogus".into()))
        );
    }
}
