//! `cargo xtask bench-hv [--seconds N] [--shift S] [--no-flush]`: the cost of a plain vCPU
//! switch and of two- and four-CPU synchronised switches, measured by the
//! hypervisor itself (its `sched: switch cost` line, in counter ticks) while
//! the switch-cost scenario's domains keep every pool switching, under QEMU
//! `-icount shift=S` so the figures repeat from run to run. `--no-flush`
//! boots with `hv.speculation-flush=off`, to show what the flushes between
//! domains cost. `--trace` boots with the scheduler trace recording from
//! boot (`hv.trace=on`, rings large enough for the whole run), to show what
//! recording costs. `--smp N` instead boots N CPUs in 2-CPU clusters, a
//! cluster-granularity pool per cluster with two 2-vCPU domains each, and
//! reports the scheduler lock's wait per scheduling event (its `sched: lock
//! wait` line): what a global lock costs as the machine grows.
//! `--write-lab-costs` writes the minima as the lab's hypervisor costs
//! (`lab/src/measured_costs.rs`, see [`lab_costs`]); it needs the default
//! `-icount shift=0`, where a ns is one instruction.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use ::tests::Expectation;

use crate::board;
use crate::cli::Args;
use crate::image;
use crate::scenarios::{SCENARIOS, SWITCH_COST_SCENARIO};
use crate::workspace::Workspace;

const USAGE: &str = "usage: cargo xtask bench-hv [--seconds N] [--shift S] [--no-flush] [--trace] [--write-lab-costs] [--smp N,N...]";

/// The hypervisor's switch-cost line (`switchcost.rs`), every 2 s.
const SWITCH_COST_LINE: &str = "sched: switch cost in ticks";
/// The scheduler lock's line (`runtime/lockwait.rs`), every 2 s.
const LOCK_WAIT_LINE: &str = "sched: lock wait: ";

/// Runs `harness` until `lines` lines containing `marker` came (one every
/// 2 s of guest time), printing its command line; its output, or why it
/// failed.
fn run_for_lines(
    harness: ::tests::Scenario,
    marker: &str,
    lines: usize,
) -> Result<::tests::Outcome, String> {
    let harness = harness.expect(
        // The markers are plain text, no regex syntax.
        Expectation::matching(&format!("{marker}.*"), lines).map_err(|e| e.to_string())?,
    );
    println!("    {}", harness.command_line());
    let outcome = harness.run();
    if outcome.passed() {
        Ok(outcome)
    } else {
        Err(outcome.report())
    }
}

/// The last console line of `outcome` containing `marker`.
fn last_line<'a>(outcome: &'a ::tests::Outcome, marker: &str) -> Option<&'a str> {
    outcome
        .lines
        .iter()
        .rev()
        .find(|l| l.contains(marker))
        .map(String::as_str)
}

/// The lab's generated costs, relative to the workspace root.
const LAB_COSTS_FILE: &str = "lab/src/measured_costs.rs";

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
    let write_lab_costs = args.flag("--write-lab-costs");
    let smp = args.value("--smp").map_err(|e| e.to_string())?;
    if write_lab_costs && (shift != DEFAULT_SHIFT || no_flush || traced) {
        return Err(
            "--write-lab-costs measures the default machine: no --shift, --no-flush or --trace"
                .into(),
        );
    }
    if let Some(extra) = args.finish().map_err(|e| e.to_string())?.first() {
        return Err(format!("unknown argument {extra:?}"));
    }
    if let Some(list) = smp {
        if write_lab_costs || no_flush || traced {
            return Err("--smp takes only --seconds and --shift".into());
        }
        let counts = smp_counts(&list)?;
        return bench_smp(&counts, seconds, shift);
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
        .timeout(TIMEOUT);
    let outcome = run_for_lines(harness, SWITCH_COST_LINE, lines)?;
    let last = last_line(&outcome, SWITCH_COST_LINE).ok_or("no switch-cost line")?;
    let figures = parse(last).ok_or_else(|| format!("cannot read {last:?}"))?;
    print_table(&figures, shift, seconds, outcome.log.as_deref());
    if write_lab_costs {
        let costs = lab_costs(&figures)?;
        let path = workspace.root.join(LAB_COSTS_FILE);
        std::fs::write(&path, lab_costs_source(last, &costs))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}: {costs:?}", path.display());
    }
    Ok(())
}

/// The CPU counts of `--smp 8,32,64`: even (2-CPU clusters), at least 4
/// (two pools), at most 128 (QEMU virt's GICv3 redistributor region).
fn smp_counts(list: &str) -> Result<Vec<usize>, String> {
    list.split(',')
        .map(|n| {
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| format!("--smp: {n:?} is not a CPU count"))?;
            if !(4..=128).contains(&n) || !n.is_multiple_of(2) {
                return Err(format!(
                    "--smp: {n} CPUs: an even count from 4 to 128 (2-CPU clusters)"
                ));
            }
            Ok(n)
        })
        .collect()
}

/// Guest memory per domain of the `--smp` machines (64 CPUs: 64 domains;
/// the hypervisor gives guests about 480 MiB of QEMU virt's RAM).
const SMP_DOMAIN_MIB: u64 = 4;

/// The `--smp` machine's config: a cluster-granularity credit2 pool per
/// 2-CPU cluster, two CPU-bound 2-vCPU domains in each, so every pool
/// switches (a 2-CPU rendezvous) at every slice, all at once.
fn smp_config(cpus: usize) -> String {
    let mut toml = format!(
        "# Generated by `cargo xtask bench-hv --smp {cpus}`: {} pools of one\n\
         # 2-CPU cluster, two CPU-bound 2-vCPU domains each.\n",
        cpus / 2
    );
    for cluster in 0..cpus / 2 {
        let first = cluster * 2;
        toml.push_str(&format!(
            "\n[[pool]]\nname = \"c{cluster}\"\ncpus = \"{first}-{}\"\nscheduler = \"credit2\"\n\
             granularity = \"cluster\"\nplacement = \"fixed\"\n",
            first + 1
        ));
        for side in ["a", "b"] {
            toml.push_str(&format!(
                "\n[[domain]]\nname = \"c{cluster}-{side}\"\nimage = \"test-guest\"\npool = \"c{cluster}\"\n\
                 vcpus = 2\nmemory_mib = {SMP_DOMAIN_MIB}\nconsole = \"none\"\n\
                 bootargs = \"workload=compute rounds=0 progress_every=20000000\"\n"
            ));
        }
    }
    toml
}

/// What one `--smp` run measured.
#[derive(Debug)]
struct SmpRow {
    cpus: usize,
    lock: BTreeMap<String, u64>,
    sync2: Option<Figure>,
    /// `rendezvous timed out` lines.
    timeouts: usize,
}

/// Boots each CPU count of `counts` under `-icount` for `seconds` of
/// virtual time and prints the lock wait per scheduling event.
fn bench_smp(counts: &[usize], seconds: u64, shift: u32) -> Result<(), String> {
    let workspace = Workspace::current();
    let board = board::find("qemu-virt").map_err(|e| e.to_string())?;
    crate::qemu::ensure_tools().map_err(|e| e.to_string())?;
    let dir = workspace.target_dir.join("bench-smp");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut rows = Vec::new();
    for &cpus in counts {
        let config = dir.join(format!("smp{cpus}.toml"));
        std::fs::write(&config, smp_config(cpus))
            .map_err(|e| format!("{}: {e}", config.display()))?;
        let image = image::build_with_config(&workspace, board, true, Some(&config))
            .map_err(|e| e.to_string())?;
        let options = crate::qemu::RunOptions {
            smp: format!("{cpus},sockets=1,clusters={},cores=2,threads=1", cpus / 2),
            memory: "2G".to_string(),
            extra: vec!["-icount".to_string(), format!("shift={shift},sleep=off")],
            ..crate::qemu::RunOptions::for_board(board)
        };
        let (program, args) =
            crate::qemu::command(board, &options).ok_or("qemu-virt has no QEMU machine")?;
        // The lock line comes with the runtime line, every 2 s of guest time.
        let lines = (seconds / 2).max(1) as usize;
        let harness = ::tests::Scenario::new(format!("bench-smp{cpus}"), program)
            .args(args)
            .kernel(&image)
            .log_dir(workspace.target_dir.join("qemu-logs"))
            // Under -icount QEMU runs the vCPUs one after another, so a
            // sibling can miss a rendezvous' bound on a big machine: a
            // figure of the run (the table counts them), not a failure.
            .allow("rendezvous timed out")
            .timeout(TIMEOUT);
        let outcome = run_for_lines(harness, LOCK_WAIT_LINE, lines)?;
        let timeouts = outcome
            .lines
            .iter()
            .filter(|l| l.contains("rendezvous timed out"))
            .count();

        let lock = last_line(&outcome, LOCK_WAIT_LINE)
            .and_then(parse_lock_wait)
            .ok_or("no readable lock-wait line")?;
        let sync2 = last_line(&outcome, SWITCH_COST_LINE)
            .and_then(parse)
            .and_then(|f| f.kinds.into_iter().find(|k| k.kind == "sync2"));
        rows.push(SmpRow {
            cpus,
            lock,
            sync2,
            timeouts,
        });
    }
    print_smp_table(&rows, shift, seconds);
    Ok(())
}

/// The `key=value` fields of a `sched: lock wait: ...` line.
fn parse_lock_wait(line: &str) -> Option<BTreeMap<String, u64>> {
    let (_, rest) = line.split_once("sched: lock wait: ")?;
    rest.split_whitespace()
        .map(|field| {
            let (key, value) = field.split_once('=')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn print_smp_table(rows: &[SmpRow], shift: u32, seconds: u64) {
    println!(
        "\nscheduler lock wait, QEMU virt GICv3 -icount shift={shift}, {seconds} s, 2-CPU cluster pools of two 2-vCPU domains"
    );
    println!(
        "{:>5} {:>10} {:>13} {:>10} {:>14} {:>18} {:>12} {:>16} {:>9}",
        "CPUs",
        "events",
        "acquisitions",
        "contended",
        "wait/event ns",
        "machine/event ns",
        "max wait ns",
        "sync2 avg ticks",
        "timeouts"
    );
    for row in rows {
        let field = |k: &str| row.lock.get(k).copied().unwrap_or(0);
        println!(
            "{:>5} {:>10} {:>13} {:>10} {:>14} {:>18} {:>12} {:>16} {:>9}",
            row.cpus,
            field("events"),
            field("acquisitions"),
            field("contended"),
            field("per_event_ns"),
            field("machine_per_event_ns"),
            field("max_ns"),
            row.sync2
                .as_ref()
                .map_or("-".to_string(), |f| f.avg.to_string()),
            row.timeouts
        );
    }
}

/// The lab's hypervisor costs (`lab::sim::Costs`), in ns.
#[derive(Debug, PartialEq)]
struct LabCosts {
    ipi_ns: u64,
    switch_ns: u64,
    decision_ns: u64,
    rendezvous_ns: u64,
    rendezvous_wide_ns: u64,
}

/// The lab's costs from the minima of a switch-cost line: the minimum is
/// the code's own cost, the averages mostly QEMU's round-robin (see
/// BENCHMARKS.md).
/// * switch: a save+load;
/// * decision: a plain event (trap to return, one full switch through idle)
///   less its switch;
/// * rendezvous (2 CPUs) / wide (4): a synchronised event less a plain one:
///   what waiting for the siblings adds when the CPU arrives last;
/// * ipi: a kick's delivery.
fn lab_costs(figures: &Figures) -> Result<LabCosts, String> {
    let min_ns = |kind: &str| -> Result<u64, String> {
        let f = figures
            .kinds
            .iter()
            .find(|f| f.kind == kind)
            .ok_or_else(|| format!("the switch-cost line has no {kind:?} figure"))?;
        if f.count == 0 {
            return Err(format!("no {kind:?} event was measured"));
        }
        Ok(f.min * 1_000_000_000 / figures.hz.max(1))
    };
    let (switch, plain) = (min_ns("save+load")?, min_ns("plain")?);
    let (sync2, sync4) = (min_ns("sync2")?, min_ns("sync4")?);
    Ok(LabCosts {
        ipi_ns: min_ns("ipi")?,
        switch_ns: switch,
        decision_ns: plain.saturating_sub(switch),
        rendezvous_ns: sync2.saturating_sub(plain),
        rendezvous_wide_ns: sync4.saturating_sub(plain),
    })
}

/// `lab/src/measured_costs.rs` for `costs`, measured from `line`.
fn lab_costs_source(line: &str, costs: &LabCosts) -> String {
    let line = line
        .split_once("sched: switch cost")
        .map_or(line, |(_, rest)| rest);
    format!(
        "//! This hypervisor's costs for the lab, measured: generated by `cargo xtask\n\
         //! bench-hv --write-lab-costs` (do not edit; rerun it) from the minima of the\n\
         //! hypervisor's switch-cost line under QEMU virt `-icount shift=0` (a ns of\n\
         //! virtual time is one guest instruction), derived as `lab_costs` in\n\
         //! `xtask/src/bench_hv.rs` says.\n\
         //!\n\
         //! Measured line: `sched: switch cost{line}`\n\
         \n\
         use crate::sim::Costs;\n\
         \n\
         /// The measured costs.\n\
         pub const MEASURED: Costs = Costs {{\n\
         \x20   ipi_ns: {},\n\
         \x20   switch_ns: {},\n\
         \x20   decision_ns: {},\n\
         \x20   rendezvous_ns: {},\n\
         \x20   rendezvous_wide_ns: {},\n\
         }};\n",
        costs.ipi_ns,
        costs.switch_ns,
        costs.decision_ns,
        costs.rendezvous_ns,
        costs.rendezvous_wide_ns
    )
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

    #[test]
    fn smp_counts_are_even_cluster_counts() {
        assert_eq!(smp_counts("8,32, 64").unwrap(), [8, 32, 64]);
        for bad in ["7", "2", "130", "x", "8,"] {
            assert!(smp_counts(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_smp_config_is_a_valid_machine_of_cluster_pools() {
        let text = smp_config(8);
        let config = crate::config::parse(&text, None).unwrap();
        assert!(config.validate().is_empty(), "{:?}", config.validate());
        assert_eq!(config.pools.len(), 4);
        assert_eq!(config.domains.len(), 8);
        assert!(config.domains.iter().all(|d| d.vcpus == 2));
        assert_eq!(config.pools[3].name, "c3");
    }

    #[test]
    fn the_lock_wait_line_parses() {
        let line = "[cpu0] INFO  sched: lock wait: events=4 acquisitions=6 contended=2 wait_ns=400 per_event_ns=100 max_ns=300";
        let fields = parse_lock_wait(line).unwrap();
        assert_eq!(fields["per_event_ns"], 100);
        assert_eq!(fields["events"], 4);
        assert_eq!(parse_lock_wait("sched: lock wait: events=x"), None);
    }

    const LINE: &str = "[cpu0] INFO  sched: switch cost in ticks of 62500000 Hz: save+load n=900 avg=30 min=33 max=400; \
                        plain n=100 avg=200 min=91 max=900; sync2 n=50 avg=700 min=136 max=9000; \
                        sync4 n=7 avg=1500 min=156 max=20000; ipi n=40 avg=90 min=20 max=500";

    #[test]
    fn lab_costs_come_from_the_minima() {
        let costs = lab_costs(&parse(LINE).unwrap()).unwrap();
        assert_eq!(
            costs,
            LabCosts {
                ipi_ns: 320,
                switch_ns: 528,
                decision_ns: 1456 - 528,
                rendezvous_ns: 2176 - 1456,
                rendezvous_wide_ns: 2496 - 1456,
            }
        );
        let no_ipi = LINE.replace("ipi n=40", "ipi n=0");
        assert!(lab_costs(&parse(&no_ipi).unwrap()).is_err());
        let older = LINE.split("; ipi").next().unwrap();
        assert!(lab_costs(&parse(older).unwrap()).is_err());
    }

    /// The committed file is what the generator makes of the line it names:
    /// not edited by hand, and its numbers follow from a real measurement.
    #[test]
    fn the_committed_lab_costs_regenerate_from_their_line() {
        let committed = include_str!("../../lab/src/measured_costs.rs");
        let line = committed
            .lines()
            .find_map(|l| l.strip_prefix("//! Measured line: `"))
            .and_then(|l| l.strip_suffix('`'))
            .expect("the file names its measured line");
        let costs = lab_costs(&parse(line).unwrap()).unwrap();
        assert_eq!(lab_costs_source(line, &costs), committed);
    }
}
