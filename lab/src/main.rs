//! `cargo xtask lab [--quick] [--seed N] [--seeds K] [--scheduler NAME] [--out DIR]`:
//! runs the scheduling lab's matrix, writes the tables, targets and charts,
//! prints the targets with PASS/FAIL and exits non-zero if one fails.

use std::path::PathBuf;
use std::process::ExitCode;

use lab::matrix;

const USAGE: &str =
    "usage: cargo xtask lab [--quick] [--seed N] [--seeds K] [--scheduler NAME] [--out DIR]";

struct Options {
    quick: bool,
    seed: u64,
    seeds: Option<u64>,
    scheduler: String,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        quick: false,
        seed: 1,
        seeds: None,
        scheduler: sched::schedulers::DEFAULT_SCHEDULER.to_string(),
        out: None,
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
