//! Reading figures back from a console: pinned vCPUs, shares, traces,
//! teardown and switch-cost lines.

/// [`Check::Trace`]'s `pinned`: each named domain ran, and only on its CPUs.
pub(super) fn verify_pinned(lines: &[String], pinned: &[(&str, &[usize])]) -> Result<(), String> {
    if pinned.is_empty() {
        return Ok(());
    }
    let trace = trace::Trace::decode(&lines.join("\n")).map_err(|e| e.to_string())?;
    let intervals = trace::analysis::run_intervals(&trace);
    for &(name, cpus) in pinned {
        let domain = domain_named(lines, name)?;
        let runs: Vec<&trace::analysis::RunInterval> = intervals
            .iter()
            .flatten()
            .filter(|i| i.domain == domain)
            .collect();
        if let Some(outside) = runs.iter().find(|i| !cpus.contains(&i.cpu)) {
            return Err(format!(
                "dom{domain} ({name}) ran on cpu {} for {} ns; its hard affinity is cpus {cpus:?}",
                outside.cpu,
                outside.end_ns - outside.start_ns
            ));
        }
        if runs.is_empty() {
            return Err(format!("dom{domain} ({name}) never ran in the trace"));
        }
        println!(
            "    dom{domain} ({name}): {} run intervals, all on cpus {cpus:?}",
            runs.len()
        );
    }
    Ok(())
}

/// The id of the domain the boot log names `name`.
pub(super) fn domain_named(lines: &[String], name: &str) -> Result<u32, String> {
    crate::trace_capture::domain_names(lines)
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(id, _)| id)
        .ok_or_else(|| format!("no domain '{name}' in the boot log"))
}

/// [`Check::Trace`]'s `sharing`: how much of domain `name`'s run time two
/// of its vCPUs held one sched resource, against what its placement must
/// give (`spread`: one per resource while any is free).
pub(super) fn verify_sharing(lines: &[String], name: &str, spread: bool) -> Result<(), String> {
    let trace = trace::Trace::decode(&lines.join("\n")).map_err(|e| e.to_string())?;
    let domain = domain_named(lines, name)?;
    let sharing = trace::analysis::resource_sharing(&trace, domain);
    if sharing.run_ns == 0 {
        return Err(format!("dom{domain} ({name}) never ran in the trace"));
    }
    let percent = sharing.shared_ns as f64 * 100.0 / sharing.run_ns as f64;
    let summary = format!(
        "dom{domain} ({name}): two of its vCPUs on one core for {} of {} ms run ({percent:.1} %)",
        sharing.shared_ns / 1_000_000,
        sharing.run_ns / 1_000_000
    );
    let ok = if spread {
        percent < 1.0
    } else {
        percent > 25.0
    };
    if ok {
        println!("    {summary}: ok");
        Ok(())
    } else if spread {
        Err(format!(
            "{summary}: spread placement must keep them one per core"
        ))
    } else {
        Err(format!(
            "{summary}: fixed placement packs a unit onto one core"
        ))
    }
}

/// [`Check::Trace`]: the dump decodes, and the trace alone shows the
/// promise kept over `min_handovers` handovers or more (`broken`: broken).
pub(super) fn verify_trace(
    lines: &[String],
    broken: bool,
    min_handovers: usize,
) -> Result<(), String> {
    let trace = trace::Trace::decode(&lines.join("\n")).map_err(|e| e.to_string())?;
    for line in crate::trace_capture::summary(&trace) {
        println!("    {line}");
    }
    let check = trace::analysis::sibling_overlaps(&trace);
    if broken {
        return match check.overlaps.len() {
            0 => Err(format!(
                "the planted fault left no overlap in the trace ({} handovers on {} shared resources): \
                 the trace check cannot see a broken promise",
                check.handovers, check.resources
            )),
            _ => Ok(()),
        };
    }
    if let Some(overlap) = check.overlaps.first() {
        return Err(format!(
            "{} overlaps in the trace, the first: cpus {:?} held dom{} and dom{} for {} ns",
            check.overlaps.len(),
            overlap.cpus,
            overlap.domains.0,
            overlap.domains.1,
            overlap.end_ns - overlap.start_ns
        ));
    }
    if check.handovers < min_handovers {
        return Err(format!(
            "only {} handovers on shared resources in the trace (at least {min_handovers} needed \
             for the 0 overlaps to mean something)",
            check.handovers
        ));
    }
    Ok(())
}

/// A domain teardown line (`hv/src/bin/hv/aarch64/domain.rs`, `hv/src/bin/hv/x86_64/domain.rs`:
/// `… torn down: N MiB of RAM, … heap in use A -> B KiB`) must show the
/// heap shrinking by at least the domain's RAM; other lines pass.
pub(super) fn check_teardown_line(line: &str) -> Result<(), String> {
    let Some((_, rest)) = line.split_once("torn down: ") else {
        return Ok(());
    };
    let number = |text: &str| text.trim().parse::<u64>().ok();
    let parsed = (|| {
        let (ram_mib, rest) = rest.split_once(" MiB of RAM")?;
        let (_, heap) = rest.split_once("heap in use ")?;
        let (before, after) = heap.trim_end_matches(" KiB").split_once(" -> ")?;
        Some((number(ram_mib)?, number(before)?, number(after)?))
    })();
    let Some((ram_mib, before_kib, after_kib)) = parsed else {
        return Err(format!("a teardown line that does not parse: {line}"));
    };
    if before_kib.saturating_sub(after_kib) < ram_mib << 10 {
        return Err(format!(
            "the heap shrank by {} KiB, less than the {ram_mib} MiB of RAM freed: {line}",
            before_kib.saturating_sub(after_kib)
        ));
    }
    Ok(())
}

/// The per-CPU counts of the `arch_timer` line of Linux's `/proc/interrupts`
/// (`[dom1]  11:  898  676  842  661  GICv3  27 Level  arch_timer`).
pub(super) fn linux_timer_counts(lines: &[String], row_end: &str) -> Result<Vec<u64>, String> {
    let counts = |line: &String| -> Vec<u64> {
        line.split_whitespace()
            .skip(2) // "[dom1]" and the IRQ number
            .map_while(|field| field.parse().ok())
            .collect()
    };
    // The shell's echo of a typed command may end in the row's name too:
    // take the line whose fields after the IRQ number are counts.
    let mut timer_lines = lines.iter().filter(|l| {
        l.starts_with("[dom1]")
            && l.trim_end().ends_with(row_end)
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|irq| irq.ends_with(':'))
    });
    let line = timer_lines
        .next()
        .ok_or_else(|| format!("no line ending in {row_end:?} from /proc/interrupts"))?;
    let counts = counts(line);
    if counts.len() == 4 {
        Ok(counts)
    } else {
        Err(format!("expected 4 per-vCPU counts in {line:?}"))
    }
}

/// A `sched: switch cost` line (`hv/src/bin/hv/aarch64/switchcost.rs`) with at least one
/// sample of every kind.
pub(super) const SWITCH_COST_ALL_KINDS: &str = r"sched: switch cost in ticks of \d+ Hz: save\+load n=[1-9]\d* .*; plain n=[1-9]\d* .*; sync2 n=[1-9]\d* .*; sync4 n=[1-9]\d* .*; ipi n=[1-9]\d* ";

/// The hypervisor's periodic run-time line (`hv/src/runtime/events.rs`, `log_runtimes`).
pub(super) const RUNTIME_LINE_PATTERN: &str = r"sched: runtime at \d+ ms:";

/// One `sched: runtime at T ms: domN R ns, …` line.
#[derive(Debug, PartialEq)]
pub(super) struct RuntimeLine {
    pub(super) at_ms: u64,
    /// `(domain, run time in ns)`.
    pub(super) domains: Vec<(u32, u64)>,
}

/// Parses a run-time line; `None` for any other line.
pub(super) fn parse_runtime_line(line: &str) -> Option<RuntimeLine> {
    let (_, rest) = line.split_once("sched: runtime at ")?;
    let (at, rest) = rest.split_once(" ms:")?;
    let at_ms = at.trim().parse().ok()?;
    let mut domains = Vec::new();
    for entry in rest.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut words = entry.split_whitespace();
        let domain = words.next()?.strip_prefix("dom")?.parse().ok()?;
        let runtime = words.next()?.parse().ok()?;
        if words.next() != Some("ns") {
            return None;
        }
        domains.push((domain, runtime));
    }
    Some(RuntimeLine { at_ms, domains })
}

/// CPU time two domains got over a window of run-time lines.
#[derive(Debug)]
pub(super) struct Share {
    pub(super) ratio: f64,
    pub(super) window_ms: u64,
    pub(super) light_ns: u64,
    pub(super) heavy_ns: u64,
}

/// `heavy`'s run time over `light`'s between run-time line `warmup` and line
/// `warmup + window` (counted from 0).
pub(super) fn share_ratio(
    lines: &[String],
    light: u32,
    heavy: u32,
    warmup: usize,
    window: usize,
) -> Result<Share, String> {
    let samples: Vec<RuntimeLine> = lines.iter().filter_map(|l| parse_runtime_line(l)).collect();
    let (Some(first), Some(last)) = (samples.get(warmup), samples.get(warmup + window)) else {
        return Err(format!(
            "{} run-time lines, {} needed",
            samples.len(),
            warmup + window + 1
        ));
    };
    let runtime = |sample: &RuntimeLine, domain: u32| {
        sample
            .domains
            .iter()
            .find(|&&(d, _)| d == domain)
            .map(|&(_, r)| r)
            .ok_or_else(|| format!("dom{domain} missing at {} ms", sample.at_ms))
    };
    let light_ns = runtime(last, light)?.saturating_sub(runtime(first, light)?);
    let heavy_ns = runtime(last, heavy)?.saturating_sub(runtime(first, heavy)?);
    if light_ns == 0 {
        return Err(format!(
            "dom{light} got no CPU time between {} and {} ms",
            first.at_ms, last.at_ms
        ));
    }
    Ok(Share {
        ratio: heavy_ns as f64 / light_ns as f64,
        window_ms: last.at_ms.saturating_sub(first.at_ms),
        light_ns,
        heavy_ns,
    })
}
