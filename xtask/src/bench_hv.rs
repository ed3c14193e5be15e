//! `cargo xtask bench-hv [--seconds N] [--shift S] [--no-flush]`: the cost of a plain vCPU
//! switch and of two- and four-CPU synchronised switches, measured by the
//! hypervisor itself (its `sched: switch cost` line, in counter ticks) while
//! the switch-cost scenario's domains keep every pool switching, under QEMU
//! `-icount shift=S` so the figures repeat from run to run. `--no-flush`
//! boots with `hv.speculation-flush=off`, to show what the flushes between
//! domains cost. `--trace` boots with the scheduler trace recording from
//! boot (`hv.trace=on`, rings large enough for the whole run), to show what
//! recording costs.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use ::tests::Expectation;

use crate::board;
use crate::cli::Args;
use crate::image;
use crate::scenarios::{SCENARIOS, SWITCH_COST_SCENARIO};
use crate::workspace::Workspace;

const USAGE: &str = "usage: cargo xtask bench-hv [--seconds N] [--shift S] [--no-flush] [--trace]";

/// Trace ring size for `--trace`: the switch-cost scenario records about
/// 3000 events per CPU and virtual second; the rings must not fill, or the
/// run would measure the cheaper dropping path.
const TRACE_EVENTS_PER_SECOND: u64 = 6000;

/// Virtual seconds measured by default (the line comes every 2 s).
const DEFAULT_SECONDS: u64 = 20;
/// `-icount shift`: one guest instruction per 2^S ns of virtual time.
const DEFAULT_SHIFT: u32 = 0;
/// Real time the run may take: icount runs the 8 vCPUs on one host thread.
const TIMEOUT: Duration = Duration::from_secs(900);

/// Runs the benchmark with the arguments after `bench-hv`.
pub fn run(args: &[String]) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench-hv: {e}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

fn number<T: std::str::FromStr>(
    value: Option<String>,
    default: T,
    what: &str,
) -> Result<T, String> {
    match value {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("{what}: {v:?} is not a number")),
    }
}

fn bench(args: &[String]) -> Result<(), String> {
    let mut args = Args::new(args);
    let seconds: u64 = number(
        args.value("--seconds").map_err(|e| e.to_string())?,
        DEFAULT_SECONDS,
        "--seconds",
    )?;
    let shift: u32 = number(
        args.value("--shift").map_err(|e| e.to_string())?,
        DEFAULT_SHIFT,
        "--shift",
    )?;
    let no_flush = args.flag("--no-flush");
    let traced = args.flag("--trace");
    if let Some(extra) = args.finish().map_err(|e| e.to_string())?.first() {
        return Err(format!("unknown argument {extra:?}"));
    }
    let scenario = SCENARIOS
        .iter()
        .find(|s| s.name == SWITCH_COST_SCENARIO)
        .ok_or("the switch-cost scenario is missing")?;
    let board = board::find(scenario.board).map_err(|e| e.to_string())?;
    let workspace = Workspace::current();
    crate::qemu::ensure_tools().map_err(|e| e.to_string())?;
    let config = scenario.config().map(|c| workspace.root.join(c));
    let image = image::build_with_config(&workspace, board, true, config.as_deref())
        .map_err(|e| e.to_string())?;
    // One line every two seconds of guest time; the last one covers them all.
    let lines = (seconds / 2).max(1) as usize;
    let harness = scenario
        .prepare(board, &image, &workspace.target_dir)
        .map_err(|e| e.to_string())?
        .args(["-icount".to_string(), format!("shift={shift},sleep=off")])
        .args(append_args(no_flush, traced.then_some(seconds)))
        .expect(
            Expectation::matching(r"sched: switch cost in ticks.*", lines)
                .map_err(|e| e.to_string())?,
        )
        .timeout(TIMEOUT);
    println!("    {}", harness.command_line());
    let outcome = harness.run();
    if !outcome.passed() {
        return Err(outcome.report());
    }
    let last = outcome
        .lines
        .iter()
        .rev()
        .find(|l| l.contains("sched: switch cost in ticks"))
        .ok_or("no switch-cost line")?;
    let figures = parse(last).ok_or_else(|| format!("cannot read {last:?}"))?;
    print_table(&figures, shift, seconds, outcome.log.as_deref());
    Ok(())
}

/// `-append` with the hypervisor options of `--no-flush` and `--trace`
/// (`Some(seconds)` run), if any.
fn append_args(no_flush: bool, traced_seconds: Option<u64>) -> Vec<String> {
    let mut words = Vec::new();
    if no_flush {
        words.push("hv.speculation-flush=off".to_string());
    }
    if let Some(seconds) = traced_seconds {
        words.push("hv.trace=on".to_string());
        // The warm-up before the first line, and slack.
        let events = (seconds + 5) * TRACE_EVENTS_PER_SECOND;
        words.push(format!("hv.trace-events={events}"));
    }
    if words.is_empty() {
        return Vec::new();
    }
    vec!["-append".to_string(), words.join(" ")]
}

/// One kind of switch as the hypervisor's line gives it.
#[derive(Debug, PartialEq)]
struct Figure {
    kind: String,
    count: u64,
    avg: u64,
    min: u64,
    max: u64,
}

/// The counter frequency and the figures of a `sched: switch cost` line.
#[derive(Debug, PartialEq)]
struct Figures {
    hz: u64,
    kinds: Vec<Figure>,
}

/// Parses `sched: switch cost in ticks of F Hz: KIND n=N avg=A min=M max=X; …`.
fn parse(line: &str) -> Option<Figures> {
    let (_, rest) = line.split_once("sched: switch cost in ticks of ")?;
    let (hz, rest) = rest.split_once(" Hz:")?;
    let hz = hz.trim().parse().ok()?;
    let mut kinds = Vec::new();
    for part in rest.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (kind, values) = part.split_once(" n=")?;
        let mut words = values.split_whitespace();
        let count = words.next()?.parse().ok()?;
        let mut field = |name: &str| words.next()?.strip_prefix(name)?.parse().ok();
        let (avg, min, max) = (field("avg=")?, field("min=")?, field("max=")?);
        kinds.push(Figure {
            kind: kind.to_string(),
            count,
            avg,
            min,
            max,
        });
    }
    Some(Figures { hz, kinds })
}

fn print_table(figures: &Figures, shift: u32, seconds: u64, log: Option<&Path>) {
    let ns = |ticks: u64| ticks as f64 * 1e9 / figures.hz.max(1) as f64;
    println!(
        "\nswitch cost, QEMU virt -icount shift={shift} ({} ns of virtual time per guest instruction), \
         {seconds} s, counter {} Hz",
        1u64 << shift,
        figures.hz
    );
    println!(
        "{:<10} {:>8} {:>10} {:>10} {:>10} {:>12}",
        "kind", "samples", "avg ticks", "min ticks", "max ticks", "avg ns"
    );
    for f in &figures.kinds {
        println!(
            "{:<10} {:>8} {:>10} {:>10} {:>10} {:>12.0}",
            f.kind,
            f.count,
            f.avg,
            f.min,
            f.max,
            ns(f.avg)
        );
    }
    if let Some(log) = log {
        println!("(console log: {})", log.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_go_on_one_command_line() {
        assert!(append_args(false, None).is_empty());
        assert_eq!(
            append_args(true, Some(5)),
            [
                "-append",
                "hv.speculation-flush=off hv.trace=on hv.trace-events=60000"
            ]
        );
    }

    #[test]
    fn the_hypervisor_line_parses() {
        let line = "[cpu0] INFO  sched: switch cost in ticks of 62500000 Hz: save+load n=900 avg=30 min=20 max=400; \
                    plain n=100 avg=200 min=90 max=900; sync2 n=0 avg=0 min=0 max=0; sync4 n=7 avg=1500 min=700 max=20000";
        let figures = parse(line).unwrap();
        assert_eq!(figures.hz, 62_500_000);
        let kinds: Vec<&str> = figures.kinds.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["save+load", "plain", "sync2", "sync4"]);
        assert_eq!(
            figures.kinds[3],
            Figure {
                kind: "sync4".into(),
                count: 7,
                avg: 1500,
                min: 700,
                max: 20000
            }
        );
        assert_eq!(
            parse("sched: switch cost in ticks of x Hz: a n=1 avg=1 min=1 max=1"),
            None
        );
        assert_eq!(
            parse("sched: switch cost in ticks of 5 Hz: a n=1 avg=1 max=1"),
            None
        );
        assert_eq!(parse("[dom1] [vcpu0] progress 3"), None);
    }
}
