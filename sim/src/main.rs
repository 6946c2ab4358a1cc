//! `weir-sim <scenario> --seed N [--out trace.jsonl]`: run one scenario for one seed, print its
//! summary (or the violation and its replay command), and write the event trace as JSON lines.

use std::io::Write;
use std::process::ExitCode;

use weir_sim::Scenario;

const USAGE: &str =
    "usage: weir-sim <scenario> [--seed N] [--out trace.jsonl]\n       weir-sim --list";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut scenario = None;
    let mut seed = 0u64;
    let mut out: Option<String> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => match args.next().and_then(|s| s.parse().ok()) {
                Some(s) => seed = s,
                None => return usage("--seed needs a number"),
            },
            "--out" => match args.next() {
                Some(p) => out = Some(p),
                None => return usage("--out needs a path"),
            },
            "--list" => {
                let mut stdout = std::io::stdout().lock();
                for s in Scenario::ALL {
                    let _ = writeln!(stdout, "{s}");
                }
                return ExitCode::SUCCESS;
            }
            "-h" | "--help" => return usage(""),
            name => match Scenario::from_name(name) {
                Some(s) => scenario = Some(s),
                None => return usage(&format!("unknown scenario {name:?} (try --list)")),
            },
        }
    }
    let Some(scenario) = scenario else {
        return usage("which scenario?");
    };
    let result = match &out {
        Some(path) => {
            let file = match std::fs::File::create(path) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("weir-sim: {path}: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut w = std::io::BufWriter::new(file);
            let r =
                weir_sim::run_traced(scenario, seed, &mut w).and_then(|r| w.flush().map(|()| r));
            match r {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("weir-sim: writing {path}: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None => weir_sim::run(scenario, seed),
    };
    let mut stdout = std::io::stdout().lock();
    match result {
        Ok(summary) => {
            let _ = writeln!(stdout, "{summary}");
            ExitCode::SUCCESS
        }
        Err(violation) => {
            let _ = writeln!(stdout, "{violation}");
            ExitCode::FAILURE
        }
    }
}

fn usage(why: &str) -> ExitCode {
    if !why.is_empty() {
        eprintln!("weir-sim: {why}");
    }
    eprintln!("{USAGE}");
    ExitCode::from(2)
}
