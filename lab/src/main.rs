//! `cargo xtask lab [--quick] [--seed N] [--seeds K] [--scheduler NAME] [--out DIR]`:
//! runs the scheduling lab's matrix, writes the tables, targets and charts,
//! prints the targets with PASS/FAIL and exits non-zero if one fails.
//!
//! `--trace CASE [--out DIR]`: simulates one in-hypervisor case
//! (`lab::hvcheck::CASES`) and writes `DIR/trace.json` in the format `cargo
//! xtask trace` writes for the hypervisor (default `lab/results/trace/CASE/`).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use lab::matrix;

const USAGE: &str = "usage: cargo xtask lab [--quick] [--seed N] [--seeds K] [--scheduler NAME] [--out DIR]\n       cargo xtask lab --hv   (in-hypervisor check under QEMU; runs --hv-compare MEASURED --out DIR)\n       cargo xtask lab --trace CASE [--out DIR]   (one in-hypervisor case simulated, as Perfetto JSON)";

/// Simulated time of a `--trace` run.
const TRACE_RUN_NS: u64 = 200_000_000;

struct Options {
    quick: bool,
    seed: u64,
    seeds: Option<u64>,
    scheduler: String,
    out: Option<PathBuf>,
    /// `--hv-compare FILE`: the side-by-side table of the in-hypervisor check.
    hv_compare: Option<PathBuf>,
    /// `--trace CASE`: simulate that in-hypervisor case with tracing on.
    trace: Option<String>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        quick: false,
        seed: 1,
        seeds: None,
        scheduler: sched::schedulers::DEFAULT_SCHEDULER.to_string(),
        out: None,
        hv_compare: None,
        trace: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--quick" => o.quick = true,
            "--seed" => {
                o.seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed: expected an unsigned integer".to_string())?
            }
            "--seeds" => {
                let k: u64 = value("--seeds")?
                    .parse()
                    .map_err(|_| "--seeds: expected an unsigned integer".to_string())?;
                if k == 0 {
                    return Err("--seeds: at least 1".into());
                }
                o.seeds = Some(k);
            }
            "--scheduler" => {
                let name = value("--scheduler")?;
                sched::schedulers::create(&name).map_err(|_| {
                    format!(
                        "--scheduler {name}: expected one of {}",
                        sched::scheduler::SCHEDULER_NAMES
                    )
                })?;
                o.scheduler = name;
            }
            "--out" => o.out = Some(PathBuf::from(value("--out")?)),
            "--trace" => o.trace = Some(value("--trace")?),
            "--hv-compare" => o.hv_compare = Some(PathBuf::from(value("--hv-compare")?)),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("lab: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(measured) = &options.hv_compare {
        return hv_compare(measured, options.out.as_deref());
    }
    if let Some(case) = &options.trace {
        return trace_case(case, options.seed, options.out.as_deref());
    }
    let plan = if options.quick {
        matrix::Plan::quick(&options.scheduler, options.seed, options.seeds)
    } else {
        matrix::Plan::full(&options.scheduler, options.seed, options.seeds)
    };
    let out = options.out.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("results")
            .join(if options.quick { "quick" } else { "full" })
    });
    let outcome = match plan.run() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", outcome.tables);
    println!();
    for t in &outcome.targets {
        println!("{}", t.line());
    }
    if let Err(e) = outcome.write(&out) {
        eprintln!("lab: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("lab: results in {}", out.display());
    if outcome.targets.iter().all(|t| t.pass) {
        ExitCode::SUCCESS
    } else {
        eprintln!("lab: some targets FAIL (see above)");
        ExitCode::FAILURE
    }
}

/// Writes `table.txt` next to the measured figures (or in `out`): the
/// in-hypervisor cases simulated and measured side by side.
fn hv_compare(measured: &std::path::Path, out: Option<&std::path::Path>) -> ExitCode {
    let text = match std::fs::read_to_string(measured) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("lab: {}: {e}", measured.display());
            return ExitCode::FAILURE;
        }
    };
    let header: String = text
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let table = match lab::hvcheck::compare(&lab::hvcheck::parse_measured(&text)) {
        Ok(table) => table,
        Err(e) => {
            eprintln!("lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = out
        .map(PathBuf::from)
        .or_else(|| measured.parent().map(PathBuf::from))
        .unwrap_or_default();
    let file = dir.join("table.txt");
    let body = format!(
        "# In-hypervisor check: simulated (lab, seed 1) vs measured (QEMU -icount)\n{header}\n{table}"
    );
    print!("{body}");
    if let Err(e) = std::fs::write(&file, body) {
        eprintln!("lab: {}: {e}", file.display());
        return ExitCode::FAILURE;
    }
    println!("lab: table in {}", file.display());
    ExitCode::SUCCESS
}

/// `--trace CASE`: writes the simulated case's `trace.json` and prints what
/// it shows.
fn trace_case(name: &str, seed: u64, out: Option<&std::path::Path>) -> ExitCode {
    let Some(case) = lab::hvcheck::CASES.iter().find(|c| c.name == name) else {
        let names: Vec<&str> = lab::hvcheck::CASES.iter().map(|c| c.name).collect();
        eprintln!(
            "lab: --trace {name}: no such case (cases: {})",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    let trace = match lab::hvcheck::trace_case(case, seed, TRACE_RUN_NS) {
        Ok(trace) => trace,
        Err(e) => {
            eprintln!("lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = out.map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("results")
                .join("trace")
                .join(name)
        },
        PathBuf::from,
    );
    let json = trace::chrome::to_json(&trace, &Default::default());
    let path = dir.join("trace.json");
    if let Err(e) =
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, json.to_string()))
    {
        eprintln!("lab: writing {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    let check = trace::analysis::sibling_overlaps(&trace);
    println!(
        "lab: {name} simulated {} ms: {} events, {} handovers on shared resources, {} overlaps; wrote {}",
        TRACE_RUN_NS / 1_000_000,
        trace.total_events(),
        check.handovers,
        check.overlaps.len(),
        path.display()
    );
    ExitCode::SUCCESS
}
