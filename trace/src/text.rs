//! The dump's text encoding: what `trace dump` prints on the hypervisor
//! console (no extra device needed) and `cargo xtask trace` decodes.
//!
//! Every line starts with `trace: ` (the decoder ignores anything before
//! it, such as a log prefix, and every line without it, such as a guest's
//! output interleaved on the same console). Numbers are lowercase hex unless
//! said otherwise.
//!
//! ```text
//! trace: begin v1 cpus=N classes=MASK origin=boot|start start=NS stop=NS
//! trace: cpu C pool=P|- resource=R|- events=E dropped=D     (one per CPU)
//! trace: d C REC;REC;...;REC *CRC                           (data lines)
//! trace: end events=TOTAL lines=DATA_LINES
//! ```
//!
//! `start`/`stop` are the session's bounds (ns). `pool`/`resource` say where
//! the CPU was when the dump was taken (its pool and the master CPU of its
//! sched resource; `-` for none). A data line holds up to
//! [`RECORDS_PER_LINE`] records of CPU `C`, in time order; the CPU's data
//! lines come in order. A record is `DT,KIND,DOMAIN,VCPU,ARG`: `DT` is the
//! time since the CPU's previous record (for its first record: the time
//! itself), `KIND` the [`Kind`] number, `DOMAIN` `-` for [`IDLE_DOMAIN`].
//! `CRC` is the CRC-32 (IEEE) of the line's bytes between `d ` and ` *`, so
//! a character lost or garbled on a serial line is caught, and named.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::event::{ClassSet, Event, IDLE_DOMAIN, Kind};
use crate::ring::Snapshot;

/// Records per data line: short enough for any terminal's line buffer.
pub const RECORDS_PER_LINE: usize = 12;

/// The prefix of every dump line.
pub const PREFIX: &str = "trace: ";

/// Where a CPU was when the trace was dumped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuPlace {
    /// Its pool, if any.
    pub pool: Option<u32>,
    /// Its sched resource (the resource's master CPU), if in a pool.
    pub resource: Option<u32>,
}

/// When the session started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Before any CPU ran a guest: every CPU starts out idle.
    Boot,
    /// On a running machine: what a CPU holds is unknown until its first
    /// switch.
    Start,
}

/// One CPU's part of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CpuTrace {
    /// Where it was at the dump.
    pub place: CpuPlace,
    /// Events it dropped (ring full): its record ends early.
    pub dropped: u64,
    /// Its events, in time order.
    pub events: Vec<Event>,
}

/// A whole decoded (or snapshotted) trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The classes recorded.
    pub classes: ClassSet,
    /// When it started.
    pub origin: Origin,
    /// The session's start, in ns.
    pub started_ns: u64,
    /// The session's end, in ns.
    pub stopped_ns: u64,
    /// Per CPU, by index.
    pub cpus: Vec<CpuTrace>,
}

impl Trace {
    /// A snapshot with the CPUs' places (`places[c]` for CPU `c`; missing:
    /// none).
    pub fn from_snapshot(snapshot: Snapshot, places: &[CpuPlace]) -> Trace {
        Trace {
            classes: snapshot.classes,
            origin: if snapshot.from_boot {
                Origin::Boot
            } else {
                Origin::Start
            },
            started_ns: snapshot.started_ns,
            stopped_ns: snapshot.stopped_ns,
            cpus: snapshot
                .cpus
                .into_iter()
                .enumerate()
                .map(|(cpu, (events, dropped))| CpuTrace {
                    place: places.get(cpu).copied().unwrap_or_default(),
                    dropped,
                    events,
                })
                .collect(),
        }
    }

    /// Every event of every CPU.
    pub fn total_events(&self) -> usize {
        self.cpus.iter().map(|c| c.events.len()).sum()
    }

    /// Every event dropped.
    pub fn total_dropped(&self) -> u64 {
        self.cpus.iter().map(|c| c.dropped).sum()
    }

    /// Writes the trace as dump lines, one `emit` call per line (without
    /// the line feed). Allocates one line at a time.
    pub fn encode(&self, mut emit: impl FnMut(&str)) {
        let mut line = String::new();
        let origin = match self.origin {
            Origin::Boot => "boot",
            Origin::Start => "start",
        };
        let _ = write!(
            line,
            "{PREFIX}begin v1 cpus={} classes={:x} origin={origin} start={:x} stop={:x}",
            self.cpus.len(),
            self.classes.0,
            self.started_ns,
            self.stopped_ns
        );
        emit(&line);
        for (cpu, trace) in self.cpus.iter().enumerate() {
            line.clear();
            let _ = write!(
                line,
                "{PREFIX}cpu {cpu:x} pool={} resource={} events={:x} dropped={:x}",
                Opt(trace.place.pool),
                Opt(trace.place.resource),
                trace.events.len(),
                trace.dropped
            );
            emit(&line);
        }
        let mut lines = 0usize;
        for (cpu, trace) in self.cpus.iter().enumerate() {
            let mut previous = 0;
            for chunk in trace.events.chunks(RECORDS_PER_LINE) {
                line.clear();
                let _ = write!(line, "{PREFIX}d ");
                let body_start = line.len();
                let _ = write!(line, "{cpu:x} ");
                for (i, event) in chunk.iter().enumerate() {
                    if i > 0 {
                        line.push(';');
                    }
                    let _ = write!(
                        line,
                        "{:x},{:x},{},{:x},{:x}",
                        event.time_ns.wrapping_sub(previous),
                        event.kind as u8,
                        Opt((event.domain != IDLE_DOMAIN).then_some(event.domain)),
                        event.vcpu,
                        event.arg
                    );
                    previous = event.time_ns;
                }
                let crc = crc32fast::hash(&line.as_bytes()[body_start..]);
                let _ = write!(line, " *{crc:08x}");
                emit(&line);
                lines += 1;
            }
        }
        line.clear();
        let _ = write!(
            line,
            "{PREFIX}end events={:x} lines={lines:x}",
            self.total_events()
        );
        emit(&line);
    }

    /// Decodes the last complete dump in `text` (a console capture).
    pub fn decode(text: &str) -> Result<Trace, DecodeError> {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .filter_map(|(n, l)| l.find(PREFIX).map(|at| (n + 1, &l[at + PREFIX.len()..])))
            .collect();
        let begin = lines
            .iter()
            .rposition(|(_, l)| l.starts_with("begin "))
            .ok_or(DecodeError {
                line: 0,
                what: Problem::NoBegin,
            })?;
        let mut decoder = Decoder::default();
        for &(number, line) in &lines[begin..] {
            let at = |what| DecodeError { line: number, what };
            if decoder.line(line).map_err(at)? {
                return decoder.finish().map_err(at);
            }
        }
        Err(DecodeError {
            line: lines.last().map_or(0, |l| l.0),
            what: Problem::NoEnd,
        })
    }
}

/// An optional number: hex, or `-`.
struct Opt(Option<u32>);

impl fmt::Display for Opt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n:x}"),
            None => f.write_str("-"),
        }
    }
}

/// Why a dump could not be decoded, and on which line of the capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// The capture's line number (1-based; 0: none).
    pub line: usize,
    /// What was wrong.
    pub what: Problem,
}

/// What was wrong with a dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// No `trace: begin` line.
    NoBegin,
    /// The dump stops before its `trace: end` line.
    NoEnd,
    /// A line that does not parse (the field named).
    Malformed(&'static str),
    /// A data line's checksum does not match its records.
    Checksum {
        /// The checksum the line carries.
        carried: u32,
        /// The checksum of what arrived.
        computed: u32,
    },
    /// Fewer or more records or lines than the header or end line says.
    Count {
        /// Whose count.
        of: &'static str,
        /// Said.
        said: usize,
        /// Found.
        found: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace dump, line {}: ", self.line)?;
        match &self.what {
            Problem::NoBegin => f.write_str("no `trace: begin` line"),
            Problem::NoEnd => f.write_str("the dump ends before its `trace: end` line"),
            Problem::Malformed(field) => write!(f, "malformed {field}"),
            Problem::Checksum { carried, computed } => write!(
                f,
                "checksum {carried:08x} does not match the records ({computed:08x}): the line was garbled"
            ),
            Problem::Count { of, said, found } => {
                write!(f, "{of}: the dump says {said}, found {found}")
            }
        }
    }
}

/// The decoder's state between lines.
#[derive(Default)]
struct Decoder {
    trace: Option<Trace>,
    /// Per CPU: records promised by its header, its last time.
    said: Vec<usize>,
    last_time: Vec<u64>,
    data_lines: usize,
}

/// A `key=value` field, `value` parsed as hex.
fn field(word: Option<&str>, key: &'static str) -> Result<u64, Problem> {
    let value = word
        .and_then(|w| w.strip_prefix(key))
        .and_then(|w| w.strip_prefix('='))
        .ok_or(Problem::Malformed(key))?;
    u64::from_str_radix(value, 16).map_err(|_| Problem::Malformed(key))
}

/// A `key=value` field whose value may be `-`.
fn optional_field(word: Option<&str>, key: &'static str) -> Result<Option<u32>, Problem> {
    match word.and_then(|w| w.strip_prefix(key)) {
        Some("=-") => Ok(None),
        _ => Ok(Some(
            u32::try_from(field(word, key)?).map_err(|_| Problem::Malformed(key))?,
        )),
    }
}

fn hex(text: &str, what: &'static str) -> Result<u64, Problem> {
    u64::from_str_radix(text, 16).map_err(|_| Problem::Malformed(what))
}

impl Decoder {
    /// Takes one line (without the prefix); true once the end was read.
    fn line(&mut self, line: &str) -> Result<bool, Problem> {
        let mut words = line.split(' ');
        match words.next() {
            Some("begin") => {
                if words.next() != Some("v1") {
                    return Err(Problem::Malformed("version"));
                }
                let cpus = field(words.next(), "cpus")? as usize;
                let classes = ClassSet(field(words.next(), "classes")? as u32);
                let origin = match words.next() {
                    Some("origin=boot") => Origin::Boot,
                    Some("origin=start") => Origin::Start,
                    _ => return Err(Problem::Malformed("origin")),
                };
                let started_ns = field(words.next(), "start")?;
                let stopped_ns = field(words.next(), "stop")?;
                if cpus > 4096 {
                    return Err(Problem::Malformed("cpus"));
                }
                self.trace = Some(Trace {
                    classes,
                    origin,
                    started_ns,
                    stopped_ns,
                    cpus: alloc::vec![CpuTrace::default(); cpus],
                });
                self.said = alloc::vec![0; cpus];
                self.last_time = alloc::vec![0; cpus];
                Ok(false)
            }
            Some("cpu") => {
                let trace = self.trace.as_mut().ok_or(Problem::NoBegin)?;
                let cpu = hex(words.next().unwrap_or(""), "cpu")? as usize;
                let slot = trace.cpus.get_mut(cpu).ok_or(Problem::Malformed("cpu"))?;
                slot.place.pool = optional_field(words.next(), "pool")?;
                slot.place.resource = optional_field(words.next(), "resource")?;
                self.said[cpu] = field(words.next(), "events")? as usize;
                slot.dropped = field(words.next(), "dropped")?;
                Ok(false)
            }
            Some("d") => {
                let rest = line.strip_prefix("d ").unwrap_or("");
                let (body, crc) = rest
                    .rsplit_once(" *")
                    .ok_or(Problem::Malformed("checksum"))?;
                let carried = hex(crc, "checksum")? as u32;
                let computed = crc32fast::hash(body.as_bytes());
                if carried != computed {
                    return Err(Problem::Checksum { carried, computed });
                }
                let trace = self.trace.as_mut().ok_or(Problem::NoBegin)?;
                let (cpu, records) = body.split_once(' ').ok_or(Problem::Malformed("record"))?;
                let cpu = hex(cpu, "cpu")? as usize;
                let slot = trace.cpus.get_mut(cpu).ok_or(Problem::Malformed("cpu"))?;
                for record in records.split(';') {
                    let mut parts = record.split(',');
                    let mut next = |what| parts.next().ok_or(Problem::Malformed(what));
                    let dt = hex(next("time")?, "time")?;
                    let kind = Kind::from_code(hex(next("kind")?, "kind")? as u8)
                        .ok_or(Problem::Malformed("kind"))?;
                    let domain = match next("domain")? {
                        "-" => IDLE_DOMAIN,
                        d => u32::try_from(hex(d, "domain")?)
                            .map_err(|_| Problem::Malformed("domain"))?,
                    };
                    let vcpu = u32::try_from(hex(next("vcpu")?, "vcpu")?)
                        .map_err(|_| Problem::Malformed("vcpu"))?;
                    let arg = hex(next("arg")?, "arg")?;
                    if parts.next().is_some() {
                        return Err(Problem::Malformed("record"));
                    }
                    let time_ns = self.last_time[cpu].wrapping_add(dt);
                    self.last_time[cpu] = time_ns;
                    slot.events.push(Event {
                        time_ns,
                        kind,
                        domain,
                        vcpu,
                        arg,
                    });
                }
                self.data_lines += 1;
                Ok(false)
            }
            Some("end") => {
                let trace = self.trace.as_ref().ok_or(Problem::NoBegin)?;
                let events = field(words.next(), "events")? as usize;
                let lines = field(words.next(), "lines")? as usize;
                let found = trace.total_events();
                if events != found {
                    return Err(Problem::Count {
                        of: "events",
                        said: events,
                        found,
                    });
                }
                if lines != self.data_lines {
                    return Err(Problem::Count {
                        of: "data lines",
                        said: lines,
                        found: self.data_lines,
                    });
                }
                Ok(true)
            }
            _ => Err(Problem::Malformed("line kind")),
        }
    }

    /// The trace, once every CPU's count is checked.
    fn finish(self) -> Result<Trace, Problem> {
        let trace = self.trace.ok_or(Problem::NoBegin)?;
        for (cpu, said) in trace.cpus.iter().zip(self.said) {
            if cpu.events.len() != said {
                return Err(Problem::Count {
                    of: "a CPU's events",
                    said,
                    found: cpu.events.len(),
                });
            }
        }
        Ok(trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use proptest::prelude::*;

    fn encoded(trace: &Trace) -> String {
        let mut text = String::new();
        trace.encode(|line| {
            text.push_str(line);
            text.push('\n');
        });
        text
    }

    fn sample() -> Trace {
        let event = |time_ns, kind, domain| Event {
            time_ns,
            kind,
            domain,
            vcpu: 1,
            arg: 0x1234,
        };
        Trace {
            classes: ClassSet::DEFAULT,
            origin: Origin::Boot,
            started_ns: 100,
            stopped_ns: 900,
            cpus: alloc::vec![
                CpuTrace {
                    place: CpuPlace {
                        pool: Some(1),
                        resource: Some(0),
                    },
                    dropped: 3,
                    events: (0..30)
                        .map(|i| event(200 + i * 10, Kind::Switch, i as u32 % 3))
                        .collect(),
                },
                CpuTrace::default(),
                CpuTrace {
                    place: CpuPlace::default(),
                    dropped: 0,
                    events: alloc::vec![event(150, Kind::Wake, IDLE_DOMAIN)],
                },
            ],
        }
    }

    #[test]
    fn a_dump_round_trips_through_a_noisy_console() {
        let trace = sample();
        // Log prefixes and guest lines interleaved with the dump.
        let noisy: String = encoded(&trace)
            .lines()
            .enumerate()
            .map(|(i, l)| alloc::format!("[dom1] tick {i}\n[  1.0] {l}\n"))
            .collect();
        assert_eq!(Trace::decode(&noisy), Ok(trace));
    }

    #[test]
    fn a_garbled_record_is_caught_by_its_checksum_and_named() {
        let text = encoded(&sample());
        let garbled = text.replacen(",1,", ",7,", 1);
        let error = Trace::decode(&garbled).unwrap_err();
        assert!(matches!(error.what, Problem::Checksum { .. }), "{error}");
        assert!(error.to_string().contains("line"), "{error}");
    }

    #[test]
    fn a_lost_data_line_or_a_cut_dump_is_refused() {
        let text = encoded(&sample());
        let without_second_data_line: String = text
            .lines()
            .filter(|l| !l.starts_with("trace: d 0 a,"))
            .map(|l| alloc::format!("{l}\n"))
            .collect();
        assert_ne!(without_second_data_line, text, "the test must drop a line");
        assert!(matches!(
            Trace::decode(&without_second_data_line).unwrap_err().what,
            Problem::Count { .. }
        ));
        let cut = &text[..text.find("trace: end").unwrap()];
        assert_eq!(Trace::decode(cut).unwrap_err().what, Problem::NoEnd);
        assert_eq!(Trace::decode("hello").unwrap_err().what, Problem::NoBegin);
    }

    #[test]
    fn the_last_of_two_dumps_is_decoded() {
        let first = encoded(&sample());
        let mut second = sample();
        second.stopped_ns = 1000;
        let text = first + &encoded(&second);
        assert_eq!(Trace::decode(&text), Ok(second));
    }

    fn any_event() -> impl Strategy<Value = Event> {
        (
            0u64..1 << 50,
            proptest::sample::select(Kind::ALL.to_vec()),
            prop_oneof![Just(IDLE_DOMAIN), 0u32..1000],
            0u32..0x00ff_ffff,
            any::<u64>(),
        )
            .prop_map(|(time_ns, kind, domain, vcpu, arg)| Event {
                time_ns,
                kind,
                domain,
                vcpu,
                arg,
            })
    }

    proptest! {
        #[test]
        fn any_trace_round_trips(
            cpus in proptest::collection::vec(
                (proptest::collection::vec(any_event(), 0..40), any::<u64>(),
                 proptest::option::of(0u32..64), proptest::option::of(0u32..64)),
                0..6),
            classes in 0u32..64,
            boot in any::<bool>(),
            started_ns in any::<u64>(),
            stopped_ns in any::<u64>(),
        ) {
            let trace = Trace {
                classes: ClassSet(classes),
                origin: if boot { Origin::Boot } else { Origin::Start },
                started_ns,
                stopped_ns,
                cpus: cpus.into_iter().map(|(mut events, dropped, pool, resource)| {
                    events.sort_by_key(|e| e.time_ns);
                    CpuTrace { place: CpuPlace { pool, resource }, dropped, events }
                }).collect(),
            };
            prop_assert_eq!(Trace::decode(&encoded(&trace)), Ok(trace));
        }
    }
}
