//! `cargo xtask trace [--board B] [--config FILE] [--seconds N] [--classes C]
//! [--out DIR] [--window-ms MS]`: builds the image, boots it under QEMU with
//! `hv.trace=C hv.trace-dump=N` (record from boot, dump N seconds after
//! the domains start),
//! decodes the dump from the console and writes `DIR/trace.json` (Chrome
//! trace-event format: open it in ui.perfetto.dev) and `DIR/timeline.svg` (a
//! window of the run intervals per CPU), then prints what the trace shows:
//! the sibling check, per-resource rendezvous skew and wake-to-run latency.
//!
//! The QEMU scenarios `qemu-virt-trace-*` use the same capture and checks.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ::tests::Expectation;
use plotters::prelude::*;
use trace::analysis::{self, Percentiles};
use trace::{ClassSet, Trace};

use crate::board;
use crate::cli::Args;
use crate::image;
use crate::qemu::{self, RunOptions};
use crate::workspace::Workspace;

const USAGE: &str = "usage: cargo xtask trace [--board B] [--config FILE] [--seconds N] \
                     [--classes LIST] [--events N] [--out DIR] [--window-ms MS]";

/// Seconds traced by default.
const DEFAULT_SECONDS: u32 = 3;
/// Milliseconds of the run the picture shows by default: a few slices of
/// the default config's core pool.
const DEFAULT_WINDOW_MS: u64 = 30;
/// The line that ends a dump.
pub const END_LINE: &str = "trace: end events=";

/// The kernel command line that records `classes` from boot and dumps after
/// `seconds`.
pub fn append(classes: ClassSet, seconds: u32) -> String {
    format!("hv.trace={classes} hv.trace-dump={seconds}")
}

/// Runs `cargo xtask trace` with the arguments after `trace`.
pub fn run(args: &[String]) -> ExitCode {
    match capture(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask trace: {e}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

fn capture(args: &[String]) -> Result<(), String> {
    let mut args = Args::new(args);
    let board_name = args
        .value("--board")
        .map_err(|e| e.to_string())?
        .unwrap_or_else(|| "qemu-virt".to_string());
    let config = args.value("--config").map_err(|e| e.to_string())?;
    let seconds: u32 = args
        .parsed("--seconds", "a number of seconds")
        .map_err(|e| e.to_string())?
        .unwrap_or(DEFAULT_SECONDS);
    let window_ms: u64 = args
        .parsed("--window-ms", "a number of milliseconds")
        .map_err(|e| e.to_string())?
        .unwrap_or(DEFAULT_WINDOW_MS);
    let events: Option<u64> = args
        .parsed("--events", "a number of events")
        .map_err(|e| e.to_string())?;
    let classes = match args.value("--classes").map_err(|e| e.to_string())? {
        None => ClassSet::DEFAULT,
        Some(list) => {
            ClassSet::parse(&list).map_err(|bad| format!("--classes: no class {bad:?}"))?
        }
    };
    let workspace = Workspace::current();
    let out = args
        .value("--out")
        .map_err(|e| e.to_string())?
        .map_or_else(|| workspace.target_dir.join("trace"), PathBuf::from);
    if let Some(extra) = args.finish().map_err(|e| e.to_string())?.first() {
        return Err(format!("unknown argument {extra:?}"));
    }
    let board = board::find(&board_name).map_err(|e| e.to_string())?;
    qemu::ensure_tools().map_err(|e| e.to_string())?;
    let config = config.map(|c| workspace.root.join(c));
    let image = image::build_with_config(&workspace, board, true, config.as_deref())
        .map_err(|e| e.to_string())?;
    let mut options = RunOptions::for_board(board);
    let mut command_line = append(classes, seconds);
    if let Some(events) = events {
        command_line.push_str(&format!(" hv.trace-events={events}"));
    }
    options.extra = vec!["-append".to_string(), command_line];
    let Some((program, qemu_args)) = qemu::command(board, &options) else {
        return Err(format!("{} has no QEMU machine", board.name));
    };
    let mut harness = ::tests::Scenario::new("trace", program)
        .args(qemu_args)
        .timeout(Duration::from_secs(120 + 10 * u64::from(seconds)))
        .log_dir(workspace.target_dir.join("qemu-logs"))
        .expect(Expectation::contains(END_LINE));
    harness = match board.qemu {
        Some((_, crate::board::Machine::VirtUefi)) => harness.args(qemu::uefi_drive_args(&image)),
        _ => harness.kernel(&image),
    };
    println!("    {}", harness.command_line());
    let outcome = harness.run();
    if !outcome.passed() {
        return Err(outcome.report());
    }
    let trace = Trace::decode(&outcome.lines.join("\n")).map_err(|e| e.to_string())?;
    let names = domain_names(&outcome.lines);
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let json_path = out.join("trace.json");
    let json = trace::chrome::to_json(&trace, &names);
    fs::write(&json_path, json.to_string()).map_err(|e| format!("{}: {e}", json_path.display()))?;
    let svg_path = out.join("timeline.svg");
    let window = default_window(&trace, window_ms * 1_000_000);
    let svg = timeline_svg(&trace, &names, window)?;
    fs::write(&svg_path, svg).map_err(|e| format!("{}: {e}", svg_path.display()))?;
    let class_name = if board
        .qemu
        .is_some_and(|(_, machine)| machine == board::Machine::X86Q35)
    {
        svm_exit_name
    } else {
        arm_exception_class_name
    };
    for line in summary(&trace)
        .into_iter()
        .chain(exit_summary(&trace, &names, class_name))
    {
        println!("{line}");
    }
    println!("wrote {} and {}", json_path.display(), svg_path.display());
    Ok(())
}

/// One line per domain with its guest exits by class, most frequent first
/// (only when the trace recorded exits): which traps a guest's run cost.
pub fn exit_summary(
    trace: &Trace,
    names: &BTreeMap<u32, String>,
    class_name: fn(u64) -> Option<&'static str>,
) -> Vec<String> {
    if !trace.classes.contains(trace::Class::Exits) {
        return Vec::new();
    }
    analysis::exits_by_class(trace)
        .into_iter()
        .map(|(domain, classes)| {
            let total: u64 = classes.values().sum();
            let mut by_count: Vec<(u64, u64)> = classes.into_iter().collect();
            by_count.sort_by_key(|&(class, count)| (core::cmp::Reverse(count), class));
            let parts: Vec<String> = by_count
                .iter()
                .map(|&(class, count)| match class_name(class) {
                    Some(name) => format!("{name} {count}"),
                    None => format!("class {class:#x} {count}"),
                })
                .collect();
            let name = names
                .get(&domain)
                .map_or(String::new(), |n| format!(" ({n})"));
            format!(
                "guest exits, dom{domain}{name}: {total} ({})",
                parts.join(", ")
            )
        })
        .collect()
}

/// The ARM exception classes (ESR_ELx.EC) a guest exit can have.
fn arm_exception_class_name(class: u64) -> Option<&'static str> {
    Some(match class {
        0x01 => "WFI/WFE",
        0x07 => "FP/SIMD access",
        0x16 => "HVC",
        0x17 => "SMC",
        0x18 => "system register",
        0x20 => "instruction abort",
        0x24 => "data abort (MMIO)",
        _ => return None,
    })
}

/// The SVM exit codes (AMD APM vol. 2, appendix C) an x86 guest exit can have.
fn svm_exit_name(code: u64) -> Option<&'static str> {
    Some(match code {
        0x60 => "INTR",
        0x61 => "NMI",
        0x72 => "CPUID",
        0x78 => "HLT",
        0x7b => "IOIO",
        0x7c => "MSR",
        0x7f => "shutdown",
        0x81 => "VMMCALL",
        0x8d => "XSETBV",
        0x400 => "nested page fault",
        _ => return None,
    })
}

/// Domain names from the boot log (`domain 2 (web): ...`).
pub fn domain_names(lines: &[String]) -> BTreeMap<u32, String> {
    lines
        .iter()
        .filter_map(|line| {
            let (_, rest) = line.split_once("INFO  domain ")?;
            let (id, rest) = rest.split_once(" (")?;
            let (name, _) = rest.split_once("):")?;
            Some((id.parse().ok()?, name.to_string()))
        })
        .collect()
}

/// What the trace shows, as lines for humans.
pub fn summary(trace: &Trace) -> Vec<String> {
    let mut lines = vec![format!(
        "trace: {} CPUs, {:.3} s, {} events, {} dropped",
        trace.cpus.len(),
        trace.stopped_ns.saturating_sub(trace.started_ns) as f64 / 1e9,
        trace.total_events(),
        trace.total_dropped()
    )];
    let check = analysis::sibling_overlaps(trace);
    lines.push(format!(
        "siblings: {} shared resources, {} run intervals, {} domain handovers, {} overlaps",
        check.resources,
        check.intervals,
        check.handovers,
        check.overlaps.len()
    ));
    for overlap in check.overlaps.iter().take(5) {
        lines.push(format!(
            "  OVERLAP on resource {}: cpu {} held dom{} and cpu {} dom{} for {} ns from {} ns",
            overlap.resource,
            overlap.cpus.0,
            overlap.domains.0,
            overlap.cpus.1,
            overlap.domains.1,
            overlap.end_ns - overlap.start_ns,
            overlap.start_ns
        ));
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    let describe = |p: Percentiles| {
        format!(
            "n={} p50={:.1} us p90={:.1} us p99={:.1} us max={:.1} us",
            p.count,
            us(p.p50),
            us(p.p90),
            us(p.p99),
            us(p.max)
        )
    };
    for (resource, skews) in analysis::rendezvous_skews(trace) {
        lines.push(format!(
            "rendezvous skew, resource {resource}: {}",
            describe(Percentiles::of(skews))
        ));
    }
    lines.push(format!(
        "wake-to-run latency: {}",
        describe(Percentiles::of(analysis::wake_to_run(trace)))
    ));
    lines
}

/// The picture's window: the `span_ns` with the most domain handovers (a
/// CPU switching to another domain than it last ran) on CPUs that share a
/// sched resource, or failing any, the most switches on any CPU; within the
/// time every CPU's record is complete. Guests of the default config finish
/// their workloads, so the end of a trace may show nothing at all.
fn default_window(trace: &Trace, span_ns: u64) -> (u64, u64) {
    let complete = (0..trace.cpus.len())
        .map(|cpu| analysis::known_until(trace, cpu))
        .min()
        .unwrap_or(trace.stopped_ns);
    let mut sharers: BTreeMap<u32, usize> = BTreeMap::new();
    for cpu in &trace.cpus {
        if let Some(resource) = cpu.place.resource {
            *sharers.entry(resource).or_default() += 1;
        }
    }
    let mut handovers = Vec::new();
    let mut switches = Vec::new();
    for cpu in &trace.cpus {
        let shared = cpu
            .place
            .resource
            .is_some_and(|r| sharers.get(&r).is_some_and(|&n| n > 1));
        let mut last_domain = None;
        for event in cpu.events.iter().filter(|e| e.kind == trace::Kind::Switch) {
            if event.time_ns > complete {
                break;
            }
            switches.push(event.time_ns);
            if event.domain == trace::IDLE_DOMAIN {
                continue;
            }
            if shared && last_domain.is_some_and(|d| d != event.domain) {
                handovers.push(event.time_ns);
            }
            last_domain = Some(event.domain);
        }
    }
    let mut times = if handovers.is_empty() {
        switches
    } else {
        handovers
    };
    times.sort_unstable();
    let (mut best, mut best_count, mut first) = (None, 0, 0);
    for (last, &time) in times.iter().enumerate() {
        while time - times[first] > span_ns {
            first += 1;
        }
        if last + 1 - first > best_count {
            best_count = last + 1 - first;
            best = Some(times[first]);
        }
    }
    let start = best
        .map_or(complete.saturating_sub(span_ns), |t| {
            t.saturating_sub(span_ns / 10)
        })
        .max(trace.started_ns);
    (start, (start + span_ns).min(complete))
}

/// Distinct, printable colours for domains.
const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The run intervals of `window` (ns) as an SVG timeline: one row per CPU
/// (labelled with its pool and resource), one bar per interval coloured by
/// domain.
pub fn timeline_svg(
    trace: &Trace,
    names: &BTreeMap<u32, String>,
    (from, to): (u64, u64),
) -> Result<String, String> {
    let err = |e: &dyn std::fmt::Debug| format!("timeline.svg: {e:?}");
    let ms = |ns: u64| ns.saturating_sub(from) as f64 / 1e6;
    let rows = trace.cpus.len().max(1);
    let mut svg = String::new();
    {
        let height = 110 + 36 * rows as u32;
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "run intervals per CPU: {:.0} ms from {:.1} ms after the trace began",
                    ms(to),
                    from.saturating_sub(trace.started_ns) as f64 / 1e6
                ),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(150)
            // A free row on top for the legend.
            .build_cartesian_2d(0.0..ms(to), 0.0..rows as f64 + 1.0)
            .map_err(|e| err(&e))?;
        let label = |y: &f64| {
            let cpu = *y as usize;
            trace.cpus.get(cpu).map_or(String::new(), |c| {
                let pool = c.place.pool.map_or("-".to_string(), |p| p.to_string());
                format!("cpu {cpu} (pool {pool})")
            })
        };
        chart
            .configure_mesh()
            .x_desc("ms")
            .y_labels(rows * 2 + 3)
            .y_label_formatter(&|y| {
                if (y.fract() - 0.5).abs() < 0.01 {
                    label(y)
                } else {
                    String::new()
                }
            })
            .disable_y_mesh()
            .draw()
            .map_err(|e| err(&e))?;
        let intervals = analysis::run_intervals(trace);
        let mut domains: Vec<u32> = intervals.iter().flatten().map(|i| i.domain).collect();
        domains.sort_unstable();
        domains.dedup();
        for (index, domain) in domains.iter().enumerate() {
            let color = COLORS[index % COLORS.len()];
            let bars = intervals
                .iter()
                .flatten()
                .filter(|i| i.domain == *domain && i.end_ns > from && i.start_ns < to)
                .map(|i| {
                    let y = i.cpu as f64;
                    Rectangle::new(
                        [
                            (ms(i.start_ns.max(from)), y + 0.15),
                            (ms(i.end_ns.min(to)), y + 0.85),
                        ],
                        color.filled(),
                    )
                });
            let name = names
                .get(domain)
                .map_or(format!("dom{domain}"), |n| format!("dom{domain} ({n})"));
            chart
                .draw_series(bars)
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::text::{CpuPlace, CpuTrace, Origin};
    use trace::{Event, IDLE_DOMAIN, Kind};

    fn sample() -> Trace {
        let switch = |time_ns, domain| Event {
            time_ns,
            kind: Kind::Switch,
            domain,
            vcpu: 0,
            arg: 0,
        };
        let place = CpuPlace {
            pool: Some(1),
            resource: Some(0),
        };
        Trace {
            classes: ClassSet::DEFAULT,
            origin: Origin::Boot,
            started_ns: 0,
            stopped_ns: 10_000_000,
            cpus: vec![
                CpuTrace {
                    place,
                    dropped: 0,
                    events: vec![
                        switch(1_000_000, 1),
                        switch(4_000_000, IDLE_DOMAIN),
                        switch(4_100_000, 2),
                    ],
                },
                CpuTrace {
                    place,
                    dropped: 0,
                    events: vec![
                        switch(1_000_000, 1),
                        switch(4_050_000, IDLE_DOMAIN),
                        switch(4_100_000, 2),
                    ],
                },
            ],
        }
    }

    #[test]
    fn domain_names_come_from_the_boot_log() {
        let lines = vec![
            "[cpu0] INFO  domain 2 (web): 2 vCPUs, 64 MiB at 0x4c000000, vmid 2, pool smt"
                .to_string(),
            "[dom2] test-guest: started".to_string(),
        ];
        assert_eq!(
            domain_names(&lines),
            BTreeMap::from([(2, "web".to_string())])
        );
    }

    #[test]
    fn exits_are_summarised_per_domain_by_class_when_recorded() {
        let mut trace = sample();
        let exit = |domain, class| trace::Event {
            time_ns: 2_000_000,
            kind: trace::Kind::GuestExit,
            domain,
            vcpu: 0,
            arg: class,
        };
        trace.cpus[0]
            .events
            .extend([exit(1, 0x24), exit(1, 0x18), exit(1, 0x24), exit(1, 0x3f)]);
        let names = BTreeMap::from([(1, "linux".to_string())]);
        assert_eq!(
            exit_summary(&trace, &names, arm_exception_class_name),
            Vec::<String>::new(),
            "exits are not in the recorded classes"
        );
        trace.classes = ClassSet::ALL;
        assert_eq!(
            exit_summary(&trace, &names, arm_exception_class_name),
            ["guest exits, dom1 (linux): 4 (data abort (MMIO) 2, system register 1, class 0x3f 1)"]
        );
    }

    #[test]
    fn the_summary_names_the_check_and_the_figures() {
        let lines = summary(&sample());
        assert!(lines[1].contains("1 shared resources"), "{lines:?}");
        assert!(lines[1].contains("2 domain handovers") && lines[1].ends_with("0 overlaps"));
        assert!(
            lines
                .last()
                .unwrap()
                .starts_with("wake-to-run latency: n=0")
        );
    }

    #[test]
    fn the_timeline_has_a_bar_per_interval_in_the_window_and_a_legend() {
        let names = BTreeMap::from([(1, "web".to_string())]);
        let svg = timeline_svg(&sample(), &names, (0, 10_000_000)).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("dom1 (web)") && svg.contains("dom2"));
        // Outside the window: no bars at all, but still a picture.
        let empty = timeline_svg(&sample(), &names, (20_000_000, 30_000_000)).unwrap();
        assert!(empty.matches("<rect").count() < svg.matches("<rect").count());
    }

    #[test]
    fn the_window_is_the_busiest_span_where_every_cpu_is_still_known() {
        let mut trace = sample();
        // The handovers (dom1 -> dom2 on both CPUs at 4.1 ms), from a tenth
        // of the span before.
        assert_eq!(default_window(&trace, 3_000_000), (3_800_000, 6_800_000));
        // cpu 1 is only known up to 4.1 ms.
        trace.cpus[1].dropped = 1;
        assert_eq!(default_window(&trace, 3_000_000), (3_800_000, 4_100_000));
    }

    #[test]
    fn the_append_line_names_both_options() {
        assert_eq!(
            append(ClassSet::parse("sched,rendezvous").unwrap(), 4),
            "hv.trace=sched,rendezvous hv.trace-dump=4"
        );
    }
}
