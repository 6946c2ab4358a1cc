//! Reproduction: determinism (a seed run twice gives the same event log), the per-scenario
//! summary (printed, identical across runs), the pinned regression seeds, and the JSON-lines
//! trace of the `weir-sim` binary.

use weir_sim::{Scenario, Summary};

/// The seed the determinism checks use (`WEIR_SIM_SEED` overrides it).
fn probe_seed() -> u64 {
    std::env::var("WEIR_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(7)
}

fn run_ok(scenario: Scenario, seed: u64) -> Summary {
    weir_sim::run(scenario, seed).unwrap_or_else(|v| panic!("{v}"))
}

/// madsim's `check_determinism`: the same seed twice gives the same event-log hash (and so the
/// same everything), for every scenario.
#[test]
fn determinism_same_seed_same_event_log_hash() {
    let seed = probe_seed();
    for scenario in Scenario::ALL {
        let a = run_ok(scenario, seed);
        let b = run_ok(scenario, seed);
        assert_eq!(
            a.trace_hash, b.trace_hash,
            "{scenario} seed {seed}: two runs logged different events"
        );
        assert_eq!(a, b, "{scenario} seed {seed}: two runs differ");
        let other = run_ok(scenario, seed + 1);
        assert_ne!(
            a.trace_hash,
            other.trace_hash,
            "{scenario}: seeds {seed} and {} logged the same events (the seed is not used?)",
            seed + 1
        );
    }
}

/// The summary of each scenario (requests, success rate, retries, ejections, virtual p99) is
/// printed and identical across two runs of the same seed.
#[test]
fn summary_of_each_scenario_is_identical_across_runs() {
    for scenario in Scenario::ALL {
        let first = run_ok(scenario, 0);
        let second = run_ok(scenario, 0);
        eprintln!("{first}");
        assert_eq!(first.to_string(), second.to_string());
        assert!(first.requests > 0, "{scenario}: no traffic");
    }
}

/// Every seed in sim/regressions.txt passes.
#[test]
fn regressions() {
    let list = include_str!("../regressions.txt");
    let mut failures = Vec::new();
    let mut count = 0;
    for (n, line) in list.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(name), Some(seed), None) = (parts.next(), parts.next(), parts.next()) else {
            panic!("regressions.txt:{}: expected `<scenario> <seed>`", n + 1);
        };
        let scenario = Scenario::from_name(name)
            .unwrap_or_else(|| panic!("regressions.txt:{}: unknown scenario {name}", n + 1));
        let seed: u64 = seed
            .parse()
            .unwrap_or_else(|_| panic!("regressions.txt:{}: bad seed {seed}", n + 1));
        count += 1;
        if let Err(v) = weir_sim::run(scenario, seed) {
            failures.push(v.to_string());
        }
    }
    assert!(count > 0, "regressions.txt lists no seed");
    assert!(failures.is_empty(), "regressions:\n{}", failures.join("\n"));
}

/// The trace is JSON lines: a header, then records with non-decreasing `t_ns`; writing it does
/// not change the run.
#[test]
fn trace_is_json_lines_and_does_not_change_the_run() {
    let scenario = Scenario::BackendCrash;
    let seed = probe_seed();
    let mut out = Vec::new();
    let traced = weir_sim::run_traced(scenario, seed, &mut out)
        .expect("writing to a Vec")
        .unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(traced, run_ok(scenario, seed));
    let text = String::from_utf8(out).expect("utf-8");
    let mut lines = text.lines();
    let header: serde_json::Value =
        serde_json::from_str(lines.next().expect("a header")).expect("json");
    assert_eq!(header["kind"], "header");
    assert_eq!(header["scenario"], scenario.name());
    assert_eq!(header["seed"], seed);
    let mut last = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        let t = v["t_ns"].as_u64().expect("t_ns");
        assert!(t >= last, "time went backwards in the trace");
        last = t;
        kinds.insert(v["kind"].as_str().expect("kind").to_owned());
    }
    for k in [
        "arrive", "attempt", "head", "respond", "probe", "health", "fault", "traffic",
    ] {
        assert!(kinds.contains(k), "no {k} record in the trace ({kinds:?})");
    }
}
