//! QEMU integration harness: boot an image with a timeout, capture its serial
//! console, and check what it printed.
//!
//! A [`Scenario`] names a program (QEMU, or a fake in this crate's own tests),
//! its arguments, a timeout and the [`Expectation`]s the console must meet.
//! [`Scenario::run`] reads the console line by line and stops as soon as every
//! expectation is met, a failure line appears (`panic`, `PANIC`,
//! `Unexpected exception`, `ERROR`), the program exits, or the timeout passes.
//! It always ends the program it started and keeps the whole console in a log
//! file.
//!
//! Owns: process handling and console matching. Must not touch: how images are
//! built or which QEMU options a board needs (that is `xtask`).
#![forbid(unsafe_code)]

mod expect;

pub use expect::{Expectation, PatternError};

use std::fmt;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

/// Substrings that make a console line a failure unless the scenario allows it.
pub const DEFAULT_FAILURE_PATTERNS: &[&str] = &["panic", "PANIC", "Unexpected exception", "ERROR"];

/// How many lines of output a failure report shows.
pub const REPORT_TAIL_LINES: usize = 60;

/// How long to keep reading after a failure line, so the report shows what
/// followed it (a panic message, a register dump).
const AFTER_FAILURE_GRACE: Duration = Duration::from_millis(500);

/// How long to wait for the last buffered output once the program has ended.
const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// Bytes to type on the console once a line containing `after` has appeared
/// (and every earlier [`Input`] has been sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// The substring that triggers it.
    pub after: String,
    /// More substrings that must each have appeared in some line since the
    /// start, in any order, before it is typed (several guests that must all
    /// be ready).
    pub also_seen: Vec<String>,
    /// What to type.
    pub bytes: Vec<u8>,
}

/// The pause after each typed byte: a person's typing speed, so a guest that
/// drains its 32-byte UART FIFO on interrupts never sees an overrun.
pub const TYPING_PACE: Duration = Duration::from_millis(20);

/// One boot to run and check.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Name used in reports and for the log file (`<log_dir>/<name>.log`).
    pub name: String,
    /// The program to start, normally `qemu-system-aarch64`.
    pub program: PathBuf,
    /// Its arguments, without the kernel.
    pub args: Vec<String>,
    /// The image to boot; when set, `-kernel IMAGE` is appended to the
    /// arguments and a missing file fails before anything starts.
    pub kernel: Option<PathBuf>,
    /// The run fails if the expectations are not all met by then.
    pub timeout: Duration,
    /// What the console must show; all of them must be met.
    pub expectations: Vec<Expectation>,
    /// Substrings that make a line a failure.
    pub failure_patterns: Vec<String>,
    /// Substrings that exempt a line from `failure_patterns` (for scenarios
    /// that provoke an error on purpose).
    pub allowed: Vec<String>,
    /// How long to keep watching for failure lines once every expectation is
    /// met (0: stop at once).
    pub linger: Duration,
    /// Where to write `<name>.log`; no log when `None`.
    pub log_dir: Option<PathBuf>,
    /// Print every console line to stdout as it arrives.
    pub echo: bool,
    /// Console input, sent in order on the program's stdin (closed stdin
    /// when empty).
    pub inputs: Vec<Input>,
}

impl Scenario {
    /// A scenario that runs `program` with no arguments, a 60 s timeout, the
    /// default failure patterns and no expectations yet.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            kernel: None,
            timeout: Duration::from_secs(60),
            expectations: Vec::new(),
            failure_patterns: DEFAULT_FAILURE_PATTERNS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            allowed: Vec::new(),
            linger: Duration::ZERO,
            log_dir: None,
            echo: false,
            inputs: Vec::new(),
        }
    }

    /// Types `bytes` on the console once a line containing `after` appears
    /// (after the inputs added before this one), [`TYPING_PACE`] per byte.
    pub fn input_after(mut self, after: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        self.inputs.push(Input {
            after: after.into(),
            also_seen: Vec::new(),
            bytes: bytes.into(),
        });
        self
    }

    /// Types `bytes` once every one of `seen` has appeared in some line
    /// since the start, in any order (after the inputs added before this
    /// one): say, the ready lines of several guests that boot at once.
    pub fn input_after_all(mut self, seen: &[&str], bytes: impl Into<Vec<u8>>) -> Self {
        let mut seen = seen.iter().map(|s| s.to_string());
        let after = seen.next().unwrap_or_default();
        self.inputs.push(Input {
            after,
            also_seen: seen.collect(),
            bytes: bytes.into(),
        });
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the image booted with `-kernel`.
    pub fn kernel(mut self, image: impl Into<PathBuf>) -> Self {
        self.kernel = Some(image.into());
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds an expectation.
    pub fn expect(mut self, expectation: Expectation) -> Self {
        self.expectations.push(expectation);
        self
    }

    /// Exempts lines containing `text` from the failure patterns.
    pub fn allow(mut self, text: impl Into<String>) -> Self {
        self.allowed.push(text.into());
        self
    }

    /// Keeps watching for failure lines this long after every expectation is met.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Writes the console log to `<dir>/<name>.log`.
    pub fn log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self
    }

    /// Prints console lines as they arrive.
    pub fn echo(mut self, echo: bool) -> Self {
        self.echo = echo;
        self
    }

    /// The full argument list given to the program.
    pub fn command_args(&self) -> Vec<String> {
        let mut args = self.args.clone();
        if let Some(kernel) = &self.kernel {
            args.push("-kernel".to_string());
            args.push(kernel.display().to_string());
        }
        args
    }

    /// The command line as one shell-like string, for logs and reports.
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.command_args())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The failure pattern `line` hits, if any and the line is not allowed.
    pub fn failure_in(&self, line: &str) -> Option<&str> {
        if self.allowed.iter().any(|a| line.contains(a.as_str())) {
            return None;
        }
        self.failure_patterns
            .iter()
            .find(|p| line.contains(p.as_str()))
            .map(String::as_str)
    }

    /// Starts the program, watches its console and ends it. Never waits longer
    /// than `timeout` plus a second or so.
    pub fn run(&self) -> Outcome {
        let started = Instant::now();
        let mut outcome = Outcome {
            scenario: self.name.clone(),
            result: Ok(()),
            lines: Vec::new(),
            elapsed: Duration::ZERO,
            log: None,
        };
        let mut log = self.open_log(&mut outcome);

        if let Some(kernel) = &self.kernel
            && !kernel.is_file()
        {
            outcome.result = Err(Failure::MissingKernel(kernel.clone()));
            outcome.finish(started, log.as_mut());
            return outcome;
        }

        let stdin = if self.inputs.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        };
        let mut child = match Command::new(&self.program)
            .args(self.command_args())
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(error) => {
                outcome.result = Err(Failure::Spawn {
                    program: self.program.clone(),
                    error: error.to_string(),
                });
                outcome.finish(started, log.as_mut());
                return outcome;
            }
        };

        let (sender, receiver) = mpsc::channel();
        let mut open_streams = 0;
        if let Some(stdout) = child.stdout.take() {
            spawn_reader(stdout, Stream::Stdout, sender.clone());
            open_streams += 1;
        }
        if let Some(stderr) = child.stderr.take() {
            spawn_reader(stderr, Stream::Stderr, sender.clone());
            open_streams += 1;
        }
        drop(sender);
        let typist = child.stdin.take().map(spawn_typist);

        let mut watch = Watch {
            scenario: self,
            receiver,
            open_streams,
            lines: Vec::new(),
            log: log.as_mut(),
            typist,
            inputs_sent: 0,
            stopped: false,
        };
        let result = watch.run(&mut child, started + self.timeout);
        stop(&mut child);
        watch.stopped = true;
        watch.drain(Instant::now() + DRAIN_GRACE);
        outcome.lines = watch.lines;
        outcome.result = result;
        outcome.finish(started, log.as_mut());
        outcome
    }

    fn open_log(&self, outcome: &mut Outcome) -> Option<File> {
        let dir = self.log_dir.as_ref()?;
        let path = dir.join(format!("{}.log", self.name));
        let file = fs::create_dir_all(dir).and_then(|()| File::create(&path));
        match file {
            Ok(mut file) => {
                // A log that cannot be written is not a test failure.
                let _ = writeln!(file, "# scenario: {}", self.name);
                let _ = writeln!(file, "# command: {}", self.command_line());
                outcome.log = Some(path);
                Some(file)
            }
            Err(error) => {
                eprintln!("warning: cannot write {}: {error}", path.display());
                None
            }
        }
    }
}

/// Which output of the program a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

enum Event {
    /// A line of output; `complete` is false for the text after the last
    /// newline when the stream ended (the program stopped mid-line).
    Line {
        stream: Stream,
        text: String,
        complete: bool,
    },
    Closed,
}

/// Reads `source` line by line into `sender` until it ends. The thread is not
/// joined: if a grandchild keeps the pipe open it just stays blocked.
fn spawn_reader(source: impl Read + Send + 'static, stream: Stream, sender: Sender<Event>) {
    thread::spawn(move || {
        let mut reader = BufReader::new(source);
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            match reader.read_until(b'\n', &mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let complete = buffer.ends_with(b"\n");
                    let text = String::from_utf8_lossy(&buffer);
                    let text = text.trim_end_matches(['\n', '\r']).to_string();
                    let event = Event::Line {
                        stream,
                        text,
                        complete,
                    };
                    if sender.send(event).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sender.send(Event::Closed);
    });
}

/// Writes what it is sent to `stdin`, one byte per [`TYPING_PACE`], in its
/// own thread so the console keeps being read meanwhile. Ends when the sender
/// is dropped or the program stops reading.
fn spawn_typist(mut stdin: std::process::ChildStdin) -> Sender<Vec<u8>> {
    let (sender, receiver) = mpsc::channel::<Vec<u8>>();
    thread::spawn(move || {
        for bytes in receiver {
            for byte in bytes {
                if stdin
                    .write_all(&[byte])
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    return;
                }
                thread::sleep(TYPING_PACE);
            }
        }
    });
    sender
}

/// Ends the child (if it is still running) and reaps it.
fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // Killing fails only if it exited in between; wait() reaps it either way.
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// The state of one run while the console is being read.
struct Watch<'a> {
    scenario: &'a Scenario,
    receiver: Receiver<Event>,
    open_streams: usize,
    lines: Vec<String>,
    log: Option<&'a mut File>,
    /// Where console input goes (`None` without inputs).
    typist: Option<Sender<Vec<u8>>>,
    /// How many of the scenario's inputs have been sent.
    inputs_sent: usize,
    /// The harness has stopped the program (what still comes is drained).
    stopped: bool,
}

impl Watch<'_> {
    /// Sends the next input if `line` is what it waits for.
    fn type_after(&mut self, line_number: usize) {
        let Some(input) = self.scenario.inputs.get(self.inputs_sent) else {
            return;
        };
        let seen = |text: &str| self.lines[..line_number].iter().any(|l| l.contains(text));
        let line = &self.lines[line_number - 1];
        let wanted = core::iter::once(&input.after).chain(&input.also_seen);
        // Only a line with one of them can complete the set: look back then.
        let ready = if input.also_seen.is_empty() {
            line.contains(input.after.as_str())
        } else {
            wanted.clone().any(|t| line.contains(t.as_str())) && wanted.into_iter().all(|t| seen(t))
        };
        if !ready {
            return;
        }
        self.inputs_sent += 1;
        if let Some(typist) = &self.typist {
            // A typist that stopped (the program closed stdin) loses input;
            // the expectations then say what is missing.
            let _ = typist.send(input.bytes.clone());
        }
    }

    /// Reads lines until the verdict is known.
    fn run(&mut self, child: &mut Child, deadline: Instant) -> Result<(), Failure> {
        let expectations = &self.scenario.expectations;
        let mut all_met_by: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if let Some(until) = all_met_by
                && now >= until
            {
                return Ok(());
            }
            if now >= deadline {
                return Err(Failure::TimedOut {
                    after: self.scenario.timeout,
                    unmet: self.unmet(),
                });
            }
            let wait_until = all_met_by.map_or(deadline, |until| until.min(deadline));
            match self.receiver.recv_timeout(wait_until - now) {
                Ok(Event::Line { stream, text, .. }) => {
                    let line_number = self.push(stream, text);
                    let line = &self.lines[line_number - 1];
                    if let Some(pattern) = self.scenario.failure_in(line) {
                        let failure = Failure::FailureLine {
                            line_number,
                            line: line.clone(),
                            pattern: pattern.to_string(),
                        };
                        // Keep what follows (the rest of a panic message).
                        self.drain(Instant::now() + AFTER_FAILURE_GRACE);
                        return Err(failure);
                    }
                    self.type_after(line_number);
                    if all_met_by.is_none() && expectations.iter().all(|e| e.is_met(&self.lines)) {
                        all_met_by = Some(Instant::now() + self.scenario.linger);
                    }
                }
                Ok(Event::Closed) => {
                    self.open_streams -= 1;
                    if self.open_streams == 0 {
                        return self.exited(child);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return self.exited(child),
            }
        }
    }

    /// The program closed its output: it has ended (or is about to).
    fn exited(&mut self, child: &mut Child) -> Result<(), Failure> {
        let status = wait_briefly(child);
        let unmet = self.unmet();
        if unmet.is_empty() {
            Ok(())
        } else {
            Err(Failure::Exited { status, unmet })
        }
    }

    fn unmet(&self) -> Vec<Expectation> {
        self.scenario
            .expectations
            .iter()
            .flat_map(|e| e.unmet(&self.lines))
            .collect()
    }

    /// Writes `text` to the log (and the echo) without recording it as a line.
    fn log_only(&mut self, text: &str) {
        if self.scenario.echo {
            println!("{text}");
        }
        if let Some(log) = self.log.as_mut() {
            let _ = writeln!(log, "{text}");
        }
    }

    /// Records a line; returns its 1-based number.
    fn push(&mut self, stream: Stream, text: String) -> usize {
        let text = match stream {
            Stream::Stdout => text,
            Stream::Stderr => format!("[stderr] {text}"),
        };
        self.log_only(&text);
        self.lines.push(text);
        self.lines.len()
    }

    /// Collects whatever output is still coming, until both streams close or
    /// `until` passes.
    fn drain(&mut self, until: Instant) {
        while self.open_streams > 0 {
            let now = Instant::now();
            if now >= until {
                break;
            }
            match self.receiver.recv_timeout(until - now) {
                Ok(Event::Line {
                    stream,
                    text,
                    complete,
                }) => {
                    if complete || !self.stopped {
                        self.push(stream, text);
                    } else {
                        // Cut by the harness's own kill: what the program
                        // was still writing is not a line it wrote (a check
                        // parsing it would fail on a run that passed).
                        self.log_only(&format!("{text} [cut off: the run was stopped here]"));
                    }
                }
                Ok(Event::Closed) => self.open_streams -= 1,
                Err(_) => break,
            }
        }
    }
}

/// The exit status of a child whose output has closed, waiting at most a second.
fn wait_briefly(child: &mut Child) -> String {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(10)),
            Ok(None) => return "output closed, still running".to_string(),
            Err(error) => return format!("unknown ({error})"),
        }
    }
}

/// Why a scenario failed.
#[derive(Clone, Debug)]
pub enum Failure {
    /// The image to boot does not exist.
    MissingKernel(PathBuf),
    /// The program could not be started.
    Spawn {
        /// The program.
        program: PathBuf,
        /// The operating system's error.
        error: String,
    },
    /// A console line hit a failure pattern.
    FailureLine {
        /// 1-based line number in the console output.
        line_number: usize,
        /// The line.
        line: String,
        /// The pattern it contains.
        pattern: String,
    },
    /// The timeout passed before every expectation was met.
    TimedOut {
        /// The timeout.
        after: Duration,
        /// What was still missing.
        unmet: Vec<Expectation>,
    },
    /// The program ended before every expectation was met.
    Exited {
        /// Its exit status.
        status: String,
        /// What was still missing.
        unmet: Vec<Expectation>,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingKernel(path) => write!(f, "image {} does not exist", path.display()),
            Self::Spawn { program, error } => {
                write!(f, "cannot start {}: {error}", program.display())
            }
            Self::FailureLine {
                line_number,
                line,
                pattern,
            } => write!(f, "line {line_number} contains {pattern:?}: {line}"),
            Self::TimedOut { after, unmet } => {
                write!(f, "timed out after {} s", after.as_secs_f64())?;
                write_unmet(f, unmet)
            }
            Self::Exited { status, unmet } => {
                write!(f, "program ended ({status}) too early")?;
                write_unmet(f, unmet)
            }
        }
    }
}

fn write_unmet(f: &mut fmt::Formatter<'_>, unmet: &[Expectation]) -> fmt::Result {
    for e in unmet {
        write!(f, "\n  not met: {e}")?;
    }
    Ok(())
}

/// What happened in one run.
#[derive(Debug)]
pub struct Outcome {
    /// The scenario's name.
    pub scenario: String,
    /// `Ok` if it passed.
    pub result: Result<(), Failure>,
    /// Every console line read (stderr lines prefixed with `[stderr] `).
    pub lines: Vec<String>,
    /// How long the run took.
    pub elapsed: Duration,
    /// The log file, if one was written.
    pub log: Option<PathBuf>,
}

impl Outcome {
    /// Whether the scenario passed.
    pub fn passed(&self) -> bool {
        self.result.is_ok()
    }

    /// A report for humans: the verdict and, on failure, what was not met and
    /// the last [`REPORT_TAIL_LINES`] lines of output.
    pub fn report(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        let mut text = match &self.result {
            Ok(()) => format!("{}: passed in {secs:.1} s", self.scenario),
            Err(failure) => format!("{}: FAILED after {secs:.1} s: {failure}", self.scenario),
        };
        if self.result.is_err() {
            let skip = self.lines.len().saturating_sub(REPORT_TAIL_LINES);
            let log = self.log.as_deref().map(Path::display);
            text.push_str(&format!(
                "\n--- last {} of {} lines of output{} ---",
                self.lines.len() - skip,
                self.lines.len(),
                log.map(|p| format!(" (full log: {p})")).unwrap_or_default()
            ));
            for line in &self.lines[skip..] {
                text.push('\n');
                text.push_str(line);
            }
            text.push_str("\n--- end of output ---");
        }
        text
    }

    fn finish(&mut self, started: Instant, log: Option<&mut File>) {
        self.elapsed = started.elapsed();
        if let Some(log) = log {
            let verdict = match &self.result {
                Ok(()) => "passed".to_string(),
                Err(failure) => format!("FAILED: {failure}"),
            };
            let _ = writeln!(log, "# result: {verdict}");
        }
    }
}

#[cfg(test)]
mod tests;
