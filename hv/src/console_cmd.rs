//! The hypervisor's console command line: the line editor that collects what
//! is typed while the hypervisor has console input (Ctrl-A x3 switches to
//! it), and the parser of the commands it runs.
//!
//! The arch glue feeds every byte to [`CommandLine::feed`], writes the echo
//! it returns, and runs a finished line with [`parse`].

use alloc::string::String;
use core::fmt;

use sched::{CpuSet, Placement};
use trace::ClassSet;

/// Printed when the hypervisor takes input and after every command.
pub const PROMPT: &str = "hv> ";

/// Longest command line; further characters are dropped (not echoed).
pub const MAX_LINE: usize = 120;

/// What to write back for one typed byte (at most "\x08 \x08").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echo {
    bytes: [u8; 3],
    len: u8,
}

impl Echo {
    fn byte(byte: u8) -> Self {
        Self {
            bytes: [byte, 0, 0],
            len: 1,
        }
    }

    fn erase() -> Self {
        Self {
            bytes: *b"\x08 \x08",
            len: 3,
        }
    }

    /// The bytes to write to the console.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// What one typed byte did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineEvent {
    /// Write this back (the character, or an erase for backspace).
    Echo(Echo),
    /// Enter: the finished line (trimmed; may be empty).
    Line(String),
}

/// The line being typed.
#[derive(Clone, Debug, Default)]
pub struct CommandLine {
    text: String,
    /// The last byte was a carriage return: a line feed right after it is the
    /// same Enter (terminals send CR, pipes LF, some CR LF).
    after_cr: bool,
}

impl CommandLine {
    /// An empty line.
    pub const fn new() -> Self {
        Self {
            text: String::new(),
            after_cr: false,
        }
    }

    /// Handles one byte; `None` when it changes nothing visible.
    pub fn feed(&mut self, byte: u8) -> Option<LineEvent> {
        let after_cr = core::mem::replace(&mut self.after_cr, byte == b'\r');
        match byte {
            b'\n' if after_cr => None,
            b'\r' | b'\n' => {
                let line = String::from(self.text.trim());
                self.text.clear();
                Some(LineEvent::Line(line))
            }
            // Backspace and DEL both erase.
            0x08 | 0x7f => self.text.pop().map(|_| LineEvent::Echo(Echo::erase())),
            0x20..=0x7e if self.text.len() < MAX_LINE => {
                self.text.push(char::from(byte));
                Some(LineEvent::Echo(Echo::byte(byte)))
            }
            _ => None,
        }
    }

    /// What has been typed so far.
    pub fn pending(&self) -> &str {
        &self.text
    }
}

/// The text `help` prints, one command per line.
pub const HELP: &[&str] = &[
    "help                              this list",
    "pools                             list pools: id, name, scheduler, granularity, CPUs, domains",
    "pool-create NAME SCHED GRAN [PL] [KEY=VALUE...]  new empty pool (SCHED: credit2|credit|null|rt|arinc653; GRAN: cpu|core|cluster|socket; PL: fixed|spread; parameters as pool-param)",
    "pool-destroy POOL                 destroy a pool with no domains (its CPUs become free)",
    "pool-add-cpu POOL CPU             give a free CPU, with the rest of its sched resource, to a pool",
    "pool-remove-cpu POOL CPU          take a CPU, with the rest of its sched resource, out of a pool",
    "move DOMAIN POOL                  move a domain, running, to another pool",
    "domains                           list domains: state, pool, per-vCPU state and run time",
    "sched-credit -d DOM [-w W] [-c C]   a credit domain's weight (1-65535) and cap (% of a CPU, 0 = none); alone: show them",
    "sched-credit2 -d DOM [-w W] [-c C]  the same for credit2",
    "sched-rtds -d DOM [-p P] [-b B] [-e 0|1]  an rt domain's period and budget (us) and extratime",
    "pool-param POOL KEY=VALUE         a pool scheduler parameter (credit2 ratelimit_us, credit tslice_ms, ...)",
    "pool-rename POOL NAME             rename a pool",
    "pause DOMAIN                      stop every vCPU of a domain until unpause (memory and state kept)",
    "unpause DOMAIN                    let a paused domain run again",
    "destroy DOMAIN                    stop a domain for good and free its memory",
    "restart DOMAIN                    reload a domain from its image and boot it again (also: reboot)",
    "pin DOMAIN HARD [SOFT]            set a domain's hard (never outside) and soft (preferred) affinity: CPU lists such as 4-5 or 2,6",
    "trace start [CLASSES]             record scheduler events (CLASSES: all or sched,vcpu,ipi,rendezvous,ops,exits; default all but exits)",
    "trace stop                        stop recording (the buffers keep what they hold)",
    "trace dump                        stop, then print the buffers as checksummed `trace:` lines (cargo xtask trace reads them)",
    "trace                             say whether it records, and how much it holds",
    "Ctrl-A three times                switch console input to the next domain / the hypervisor",
];

/// What the toolstack does to a whole domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DomainAction {
    /// Every vCPU stops until `unpause` (its memory and state stay).
    Pause,
    /// Undoes `pause`.
    Unpause,
    /// Stops it for good and frees its memory.
    Destroy,
    /// Reloads it from its image and starts it again.
    Restart,
}

impl DomainAction {
    /// How the command is typed.
    pub const fn usage(self) -> &'static str {
        match self {
            Self::Pause => "pause DOMAIN",
            Self::Unpause => "unpause DOMAIN",
            Self::Destroy => "destroy DOMAIN",
            Self::Restart => "restart DOMAIN",
        }
    }
}

/// A parsed console command. Pools and domains are named by number (`3`,
/// `pool3`, `dom3`) or, for pools, by name (resolved by the caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `help`.
    Help,
    /// `pools`.
    Pools,
    /// `domains`.
    Domains,
    /// `pool-create NAME SCHED GRAN`.
    PoolCreate {
        /// The new pool's name.
        name: String,
        /// Scheduler name.
        scheduler: String,
        /// Granularity name.
        granularity: String,
        /// Where a unit's vCPUs go (default fixed).
        placement: Placement,
        /// Scheduler parameters (`KEY=VALUE`, as `pool-param` takes them),
        /// set before the pool is announced: one refused, no pool.
        params: alloc::vec::Vec<(String, String)>,
    },
    /// `pool-destroy POOL`.
    PoolDestroy {
        /// The pool.
        pool: PoolRef,
    },
    /// `pool-add-cpu POOL CPU`.
    PoolAddCpu {
        /// The pool.
        pool: PoolRef,
        /// The CPU.
        cpu: usize,
    },
    /// `pool-remove-cpu POOL CPU`.
    PoolRemoveCpu {
        /// The pool.
        pool: PoolRef,
        /// The CPU.
        cpu: usize,
    },
    /// `move DOMAIN POOL`.
    Move {
        /// The domain id.
        domain: u32,
        /// The pool.
        pool: PoolRef,
    },
    /// `pause`, `unpause`, `destroy`, `restart DOMAIN` (Xen's `xl pause`,
    /// `unpause`, `destroy`, `reboot`).
    Domain {
        /// What to do.
        action: DomainAction,
        /// The domain id.
        domain: u32,
    },
    /// `sched-credit`, `sched-credit2`, `sched-rtds` (Xen's `xl`): show or
    /// change a domain's parameters; fields left `None` stay as they are.
    SchedDomain {
        /// The scheduler the command is for (`credit`, `credit2`, `rt`).
        scheduler: &'static str,
        /// The domain id.
        domain: u32,
        /// `-w`: weight.
        weight: Option<u16>,
        /// `-c`: cap, percent of one CPU.
        cap: Option<u16>,
        /// `-p`: rt period, µs.
        period_us: Option<u64>,
        /// `-b`: rt budget, µs.
        budget_us: Option<u64>,
        /// `-e`: rt extratime.
        extratime: Option<bool>,
    },
    /// `pool-param POOL KEY=VALUE`.
    PoolParam {
        /// The pool.
        pool: PoolRef,
        /// The parameter.
        key: String,
        /// Its new value.
        value: String,
    },
    /// `pool-rename POOL NAME`.
    PoolRename {
        /// The pool.
        pool: PoolRef,
        /// Its new name.
        name: String,
    },
    /// `pin DOMAIN HARD [SOFT]`: Xen's `xl vcpu-pin` for every vCPU.
    Pin {
        /// The domain id.
        domain: u32,
        /// Its hard affinity.
        hard: CpuSet,
        /// Its soft affinity (`None`: no preference).
        soft: Option<CpuSet>,
    },
    /// `trace start [CLASSES]`.
    TraceStart {
        /// The classes to record.
        classes: ClassSet,
    },
    /// `trace stop`.
    TraceStop,
    /// `trace dump`.
    TraceDump,
    /// `trace`: the status.
    TraceStatus,
}

/// A pool as typed: its id or its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolRef {
    /// By id (`2` or `pool2`).
    Id(u32),
    /// By name.
    Name(String),
}

impl fmt::Display for PoolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Id(id) => write!(f, "pool {id}"),
            Self::Name(name) => write!(f, "pool '{name}'"),
        }
    }
}

/// Why a line is not a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The first word is no command.
    UnknownCommand(String),
    /// Wrong number of arguments; the usage line.
    Usage(&'static str),
    /// An argument that should be a number (or `domN`) is not.
    BadNumber(String),
    /// `trace start` names a class that does not exist.
    UnknownTraceClass(String),
    /// A CPU list that does not parse.
    BadCpuList(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownCommand(word) => {
                write!(f, "unknown command '{word}' (type help)")
            }
            Self::Usage(usage) => write!(f, "usage: {usage}"),
            Self::BadNumber(word) => write!(f, "'{word}' is not a number"),
            Self::BadCpuList(word) => {
                write!(f, "'{word}' is not a CPU list (such as 4-5 or 2,6)")
            }
            Self::UnknownTraceClass(word) => write!(
                f,
                "no trace class '{word}' (all, sched, vcpu, ipi, rendezvous, ops, exits)"
            ),
        }
    }
}

fn number(word: &str, prefix: &str) -> Result<u32, ParseError> {
    let digits = word.strip_prefix(prefix).unwrap_or(word);
    digits
        .parse()
        .map_err(|_| ParseError::BadNumber(String::from(word)))
}

fn pool_ref(word: &str) -> PoolRef {
    match number(word, "pool") {
        Ok(id) => PoolRef::Id(id),
        Err(_) => PoolRef::Name(String::from(word)),
    }
}

/// `sched-credit[2] -d DOM [-w W] [-c C]` or (`rt`) `sched-rtds -d DOM [-p P]
/// [-b B] [-e 0|1]`, in any order.
fn sched_domain(scheduler: &'static str, args: &[&str], rt: bool) -> Result<Command, ParseError> {
    let usage = if rt {
        "sched-rtds -d DOM [-p PERIOD_US] [-b BUDGET_US] [-e 0|1]"
    } else if scheduler == "credit" {
        "sched-credit -d DOM [-w WEIGHT] [-c CAP]"
    } else {
        "sched-credit2 -d DOM [-w WEIGHT] [-c CAP]"
    };
    let (mut domain, mut weight, mut cap) = (None, None, None);
    let (mut period_us, mut budget_us, mut extratime) = (None, None, None);
    let mut words = args.iter();
    while let Some(&flag) = words.next() {
        let value = *words.next().ok_or(ParseError::Usage(usage))?;
        let bad = || ParseError::BadNumber(String::from(value));
        let small = || u16::try_from(number(value, "")?).map_err(|_| bad());
        match (flag, rt) {
            ("-d", _) => domain = Some(number(value, "dom")?),
            ("-w", false) => weight = Some(small()?),
            ("-c", false) => cap = Some(small()?),
            ("-p", true) => period_us = Some(u64::from(number(value, "")?)),
            ("-b", true) => budget_us = Some(u64::from(number(value, "")?)),
            ("-e", true) => {
                extratime = Some(match value {
                    "0" => false,
                    "1" => true,
                    _ => return Err(bad()),
                })
            }
            _ => return Err(ParseError::Usage(usage)),
        }
    }
    Ok(Command::SchedDomain {
        scheduler,
        domain: domain.ok_or(ParseError::Usage(usage))?,
        weight,
        cap,
        period_us,
        budget_us,
        extratime,
    })
}

/// Parses a finished line; `Ok(None)` for an empty one.
pub fn parse(line: &str) -> Result<Option<Command>, ParseError> {
    let mut words = line.split_whitespace();
    let Some(command) = words.next() else {
        return Ok(None);
    };
    let args: alloc::vec::Vec<&str> = words.collect();
    let expect = |n: usize, usage: &'static str| {
        if args.len() == n {
            Ok(())
        } else {
            Err(ParseError::Usage(usage))
        }
    };
    let command = match command {
        "help" | "?" => {
            expect(0, "help")?;
            Command::Help
        }
        "pools" => {
            expect(0, "pools")?;
            Command::Pools
        }
        "domains" => {
            expect(0, "domains")?;
            Command::Domains
        }
        "pool-create" => {
            let usage = "pool-create NAME SCHED GRAN [fixed|spread] [KEY=VALUE...]";
            if args.len() < 3 {
                return Err(ParseError::Usage(usage));
            }
            let mut placement = None;
            let mut params = alloc::vec::Vec::new();
            for word in &args[3..] {
                match word.split_once('=') {
                    Some((key, value)) if !key.is_empty() => {
                        params.push((String::from(key), String::from(value)));
                    }
                    None if placement.is_none() && params.is_empty() => {
                        placement = Some(word.parse().map_err(|_| ParseError::Usage(usage))?);
                    }
                    _ => return Err(ParseError::Usage(usage)),
                }
            }
            Command::PoolCreate {
                name: String::from(args[0]),
                scheduler: String::from(args[1]),
                granularity: String::from(args[2]),
                placement: placement.unwrap_or(Placement::Fixed),
                params,
            }
        }
        "pool-destroy" => {
            expect(1, "pool-destroy POOL")?;
            Command::PoolDestroy {
                pool: pool_ref(args[0]),
            }
        }
        "pool-add-cpu" => {
            expect(2, "pool-add-cpu POOL CPU")?;
            Command::PoolAddCpu {
                pool: pool_ref(args[0]),
                cpu: number(args[1], "cpu")? as usize,
            }
        }
        "pool-remove-cpu" => {
            expect(2, "pool-remove-cpu POOL CPU")?;
            Command::PoolRemoveCpu {
                pool: pool_ref(args[0]),
                cpu: number(args[1], "cpu")? as usize,
            }
        }
        "move" => {
            expect(2, "move DOMAIN POOL")?;
            Command::Move {
                domain: number(args[0], "dom")?,
                pool: pool_ref(args[1]),
            }
        }
        "pause" | "unpause" | "destroy" | "restart" | "reboot" => {
            let action = match command {
                "pause" => DomainAction::Pause,
                "unpause" => DomainAction::Unpause,
                "destroy" => DomainAction::Destroy,
                _ => DomainAction::Restart,
            };
            let [domain] = args.as_slice() else {
                return Err(ParseError::Usage(action.usage()));
            };
            Command::Domain {
                action,
                domain: number(domain, "dom")?,
            }
        }
        "sched-credit" => sched_domain("credit", &args, false)?,
        "sched-credit2" => sched_domain("credit2", &args, false)?,
        "sched-rtds" => sched_domain("rt", &args, true)?,
        "pool-param" => {
            let usage = ParseError::Usage("pool-param POOL KEY=VALUE");
            let [pool, setting] = args.as_slice() else {
                return Err(usage);
            };
            let (key, value) = setting.split_once('=').ok_or(usage)?;
            Command::PoolParam {
                pool: pool_ref(pool),
                key: String::from(key),
                value: String::from(value),
            }
        }
        "pool-rename" => {
            expect(2, "pool-rename POOL NAME")?;
            Command::PoolRename {
                pool: pool_ref(args[0]),
                name: String::from(args[1]),
            }
        }
        "pin" => {
            let cpus = |word: &str| {
                crate::config::parse_cpu_list(word)
                    .map_err(|_| ParseError::BadCpuList(String::from(word)))
            };
            match args.as_slice() {
                [domain, hard] => Command::Pin {
                    domain: number(domain, "dom")?,
                    hard: cpus(hard)?,
                    soft: None,
                },
                [domain, hard, soft] => Command::Pin {
                    domain: number(domain, "dom")?,
                    hard: cpus(hard)?,
                    soft: Some(cpus(soft)?),
                },
                _ => return Err(ParseError::Usage("pin DOMAIN HARD [SOFT]")),
            }
        }
        "trace" => match args.as_slice() {
            [] => Command::TraceStatus,
            ["start"] => Command::TraceStart {
                classes: ClassSet::DEFAULT,
            },
            ["start", list] => Command::TraceStart {
                classes: ClassSet::parse(list)
                    .map_err(|bad| ParseError::UnknownTraceClass(String::from(bad)))?,
            },
            ["stop"] => Command::TraceStop,
            ["dump"] => Command::TraceDump,
            _ => return Err(ParseError::Usage("trace [start [CLASSES] | stop | dump]")),
        },
        other => return Err(ParseError::UnknownCommand(String::from(other))),
    };
    Ok(Some(command))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn type_all(line: &mut CommandLine, bytes: &[u8]) -> Vec<LineEvent> {
        bytes.iter().filter_map(|&b| line.feed(b)).collect()
    }

    #[test]
    fn xl_style_scheduler_commands_parse_their_flags() {
        assert_eq!(
            parse("sched-credit2 -d 2 -w 512 -c 50"),
            Ok(Some(Command::SchedDomain {
                scheduler: "credit2",
                domain: 2,
                weight: Some(512),
                cap: Some(50),
                period_us: None,
                budget_us: None,
                extratime: None
            }))
        );
        assert_eq!(
            parse("sched-rtds -b 2000 -d dom3 -e 0"),
            Ok(Some(Command::SchedDomain {
                scheduler: "rt",
                domain: 3,
                weight: None,
                cap: None,
                period_us: None,
                budget_us: Some(2000),
                extratime: Some(false)
            }))
        );
        assert!(matches!(
            parse("sched-credit -d 1"),
            Ok(Some(Command::SchedDomain {
                weight: None,
                cap: None,
                ..
            }))
        ));
        // A flag of another scheduler, no domain, a weight too large.
        assert!(matches!(
            parse("sched-credit -d 1 -p 5"),
            Err(ParseError::Usage(_))
        ));
        assert!(matches!(
            parse("sched-credit2 -w 5"),
            Err(ParseError::Usage(_))
        ));
        assert!(matches!(
            parse("sched-credit2 -d 1 -w 70000"),
            Err(ParseError::BadNumber(_))
        ));
        assert_eq!(
            parse("pool-param fast ratelimit_us=500"),
            Ok(Some(Command::PoolParam {
                pool: PoolRef::Name(String::from("fast")),
                key: String::from("ratelimit_us"),
                value: String::from("500")
            }))
        );
        assert!(matches!(
            parse("pool-param fast 500"),
            Err(ParseError::Usage(_))
        ));
        assert_eq!(
            parse("pool-rename 1 batch"),
            Ok(Some(Command::PoolRename {
                pool: PoolRef::Id(1),
                name: String::from("batch")
            }))
        );
    }

    #[test]
    fn pool_create_takes_an_optional_placement() {
        assert!(matches!(
            parse("pool-create wide credit2 core spread"),
            Ok(Some(Command::PoolCreate {
                placement: Placement::Spread,
                ..
            }))
        ));
        assert!(matches!(
            parse("pool-create wide credit2 core sideways"),
            Err(ParseError::Usage(_))
        ));
        let Ok(Some(Command::PoolCreate {
            placement, params, ..
        })) = parse("pool-create rt1 rt cpu spread period_us=100 budget_us=20")
        else {
            panic!("pool-create with parameters")
        };
        assert_eq!(placement, Placement::Spread);
        assert_eq!(
            params,
            [
                (String::from("period_us"), String::from("100")),
                (String::from("budget_us"), String::from("20"))
            ]
        );
        let Ok(Some(Command::PoolCreate {
            placement, params, ..
        })) = parse("pool-create part arinc653 cpu schedule=1:0:5000")
        else {
            panic!("pool-create with a schedule")
        };
        assert_eq!((placement, params.len()), (Placement::Fixed, 1));
        // The placement comes first, once; a bare word after a parameter is no placement.
        assert!(matches!(
            parse("pool-create p credit2 cpu ratelimit_us=5 spread"),
            Err(ParseError::Usage(_))
        ));
        assert!(matches!(
            parse("pool-create p credit2 cpu =5"),
            Err(ParseError::Usage(_))
        ));
    }

    #[test]
    fn pin_takes_a_domain_and_one_or_two_cpu_lists() {
        let set = |cpus: &[usize]| cpus.iter().copied().collect::<CpuSet>();
        assert_eq!(
            parse("pin dom2 4-5"),
            Ok(Some(Command::Pin {
                domain: 2,
                hard: set(&[4, 5]),
                soft: None
            }))
        );
        assert_eq!(
            parse("pin 3 0-3 2"),
            Ok(Some(Command::Pin {
                domain: 3,
                hard: set(&[0, 1, 2, 3]),
                soft: Some(set(&[2]))
            }))
        );
        assert_eq!(
            parse("pin 3 x"),
            Err(ParseError::BadCpuList(String::from("x")))
        );
        assert!(matches!(parse("pin 3"), Err(ParseError::Usage(_))));
    }

    #[test]
    fn domain_actions() {
        for (line, action) in [
            ("pause dom2", DomainAction::Pause),
            ("unpause 2", DomainAction::Unpause),
            ("destroy 2", DomainAction::Destroy),
            ("restart 2", DomainAction::Restart),
            ("reboot dom2", DomainAction::Restart),
        ] {
            assert_eq!(
                parse(line),
                Ok(Some(Command::Domain { action, domain: 2 })),
                "{line}"
            );
        }
        assert_eq!(parse("pause"), Err(ParseError::Usage("pause DOMAIN")));
        assert_eq!(
            parse("destroy 1 2"),
            Err(ParseError::Usage("destroy DOMAIN"))
        );
        assert_eq!(
            parse("restart web"),
            Err(ParseError::BadNumber(String::from("web")))
        );
    }

    #[test]
    fn trace_commands_parse_with_their_classes() {
        assert_eq!(parse("trace"), Ok(Some(Command::TraceStatus)));
        assert_eq!(
            parse("trace start"),
            Ok(Some(Command::TraceStart {
                classes: ClassSet::DEFAULT
            }))
        );
        assert_eq!(
            parse("trace start sched,rendezvous"),
            Ok(Some(Command::TraceStart {
                classes: ClassSet::parse("sched,rendezvous").unwrap()
            }))
        );
        assert_eq!(parse("trace stop"), Ok(Some(Command::TraceStop)));
        assert_eq!(parse("trace dump"), Ok(Some(Command::TraceDump)));
        assert_eq!(
            parse("trace start sched,nope"),
            Err(ParseError::UnknownTraceClass(String::from("nope")))
        );
        assert!(matches!(parse("trace dump now"), Err(ParseError::Usage(_))));
    }

    #[test]
    fn typing_echoes_and_enter_gives_the_line() {
        let mut line = CommandLine::new();
        let events = type_all(&mut line, b"po");
        assert_eq!(
            events,
            [
                LineEvent::Echo(Echo::byte(b'p')),
                LineEvent::Echo(Echo::byte(b'o'))
            ]
        );
        assert_eq!(line.pending(), "po");
        assert_eq!(
            type_all(&mut line, b"ols \r\n"),
            [
                LineEvent::Echo(Echo::byte(b'o')),
                LineEvent::Echo(Echo::byte(b'l')),
                LineEvent::Echo(Echo::byte(b's')),
                LineEvent::Echo(Echo::byte(b' ')),
                LineEvent::Line(String::from("pools")),
            ],
            "CR LF is one Enter"
        );
        assert_eq!(line.pending(), "");
        assert_eq!(
            type_all(&mut line, b"\n\n"),
            [
                LineEvent::Line(String::new()),
                LineEvent::Line(String::new())
            ]
        );
    }

    #[test]
    fn backspace_erases_and_control_bytes_are_ignored() {
        let mut line = CommandLine::new();
        type_all(&mut line, b"hex");
        assert_eq!(line.feed(0x7f), Some(LineEvent::Echo(Echo::erase())));
        assert_eq!(Echo::erase().as_bytes(), b"\x08 \x08");
        assert_eq!(line.feed(0x08).map(|_| ()), Some(()));
        assert_eq!(line.feed(0x1b), None, "escape is dropped");
        assert_eq!(line.feed(0x01), None);
        type_all(&mut line, b"elp");
        assert_eq!(line.pending(), "help");
        let mut empty = CommandLine::new();
        assert_eq!(empty.feed(0x7f), None, "nothing to erase");
    }

    #[test]
    fn long_lines_stop_growing() {
        let mut line = CommandLine::new();
        let typed = [b'a'; MAX_LINE + 10];
        assert_eq!(type_all(&mut line, &typed).len(), MAX_LINE);
        assert_eq!(line.pending().len(), MAX_LINE);
    }

    #[test]
    fn commands_parse() {
        assert_eq!(parse("   "), Ok(None));
        assert_eq!(parse("help"), Ok(Some(Command::Help)));
        assert_eq!(parse("pools"), Ok(Some(Command::Pools)));
        assert_eq!(parse("domains"), Ok(Some(Command::Domains)));
        assert_eq!(
            parse("pool-create batch credit cpu"),
            Ok(Some(Command::PoolCreate {
                name: String::from("batch"),
                scheduler: String::from("credit"),
                granularity: String::from("cpu"),
                placement: Placement::Fixed,
                params: alloc::vec::Vec::new(),
            }))
        );
        assert_eq!(
            parse("pool-destroy pool4"),
            Ok(Some(Command::PoolDestroy {
                pool: PoolRef::Id(4)
            }))
        );
        assert_eq!(
            parse("pool-add-cpu batch 3"),
            Ok(Some(Command::PoolAddCpu {
                pool: PoolRef::Name(String::from("batch")),
                cpu: 3
            }))
        );
        assert_eq!(
            parse("pool-remove-cpu 0 cpu2"),
            Ok(Some(Command::PoolRemoveCpu {
                pool: PoolRef::Id(0),
                cpu: 2
            }))
        );
        assert_eq!(
            parse("move dom2 1"),
            Ok(Some(Command::Move {
                domain: 2,
                pool: PoolRef::Id(1)
            }))
        );
    }

    #[test]
    fn bad_commands_say_why() {
        assert_eq!(
            parse("frobnicate"),
            Err(ParseError::UnknownCommand(String::from("frobnicate")))
        );
        assert_eq!(parse("move 1"), Err(ParseError::Usage("move DOMAIN POOL")));
        assert_eq!(parse("pools extra"), Err(ParseError::Usage("pools")));
        assert_eq!(
            parse("move x 1"),
            Err(ParseError::BadNumber(String::from("x")))
        );
        assert_eq!(
            parse("pool-add-cpu 1 many"),
            Err(ParseError::BadNumber(String::from("many")))
        );
        assert_eq!(
            ParseError::UnknownCommand(String::from("x")).to_string(),
            "unknown command 'x' (type help)"
        );
    }
}
