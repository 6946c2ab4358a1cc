//! The CI sweep: every scenario over seeds `0..500` (or `WEIR_SIM_SEEDS`), or one seed with
//! `WEIR_SIM_SEED=<seed>` (the replay command a failure prints). Each test is named after its
//! scenario, so `cargo test -p weir-sim <scenario>` selects it.

use weir_sim::{Scenario, Summary, Violation};

/// Run `scenario` over the seeds, print a summary (every seed's when replaying one seed, the
/// totals otherwise), and fail listing every violation with its replay command.
fn sweep(scenario: Scenario) {
    let seeds = weir_sim::seeds_from_env();
    let mut violations: Vec<Violation> = Vec::new();
    let mut summaries: Vec<Summary> = Vec::new();
    for &seed in &seeds {
        match weir_sim::run(scenario, seed) {
            Ok(s) => summaries.push(s),
            Err(v) => violations.push(v),
        }
    }
    if seeds.len() == 1 {
        for s in &summaries {
            eprintln!("{s}");
        }
    } else {
        let total = |f: fn(&Summary) -> u64| summaries.iter().map(f).sum::<u64>();
        let requests = total(|s| s.requests);
        let ok = total(|s| s.succeeded);
        let p99_max = summaries.iter().map(|s| s.p99_us).max().unwrap_or(0);
        eprintln!(
            "{scenario}: {} seeds, {} violations; requests={requests} success={:.1}% \
             retries={} ejections={} panic={} worst p99={}.{:03}ms events={}{}",
            seeds.len(),
            violations.len(),
            if requests == 0 {
                0.0
            } else {
                ok as f64 * 100.0 / requests as f64
            },
            total(|s| s.retries),
            total(|s| s.ejections),
            total(|s| s.panic_selections),
            p99_max / 1000,
            p99_max % 1000,
            total(|s| s.events),
            weir_sim::H2Counts {
                streams: total(|s| s.h2.streams),
                conns: total(|s| s.h2.conns),
                refused: total(|s| s.h2.refused),
                above_goaway: total(|s| s.h2.above_goaway),
                goaways: total(|s| s.h2.goaways),
                lost: total(|s| s.h2.lost),
                lost_streams: total(|s| s.h2.lost_streams),
                waits: total(|s| s.h2.waits),
                wait_timeouts: total(|s| s.h2.wait_timeouts),
            },
        );
    }
    if !violations.is_empty() {
        let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
        panic!(
            "{} of {} seeds of {scenario} broke an invariant:\n{}",
            violations.len(),
            seeds.len(),
            list.join("\n")
        );
    }
}

#[test]
fn backend_crash() {
    sweep(Scenario::BackendCrash);
}

#[test]
fn flapping_backend() {
    sweep(Scenario::FlappingBackend);
}

#[test]
fn slow_start_recovery() {
    sweep(Scenario::SlowStartRecovery);
}

#[test]
fn retry_storm() {
    sweep(Scenario::RetryStorm);
}

#[test]
fn all_down_then_back() {
    sweep(Scenario::AllDownThenBack);
}

#[test]
fn overload_spike() {
    sweep(Scenario::OverloadSpike);
}

#[test]
fn hot_client() {
    sweep(Scenario::HotClient);
}

#[test]
fn reload_warmup() {
    sweep(Scenario::ReloadWarmup);
}

#[test]
fn small_pool() {
    sweep(Scenario::SmallPool);
}

#[test]
fn bulkhead_isolation() {
    sweep(Scenario::BulkheadIsolation);
}

#[test]
fn store_outage() {
    sweep(Scenario::StoreOutage);
}

#[test]
fn reload_mid_request() {
    sweep(Scenario::ReloadMidRequest);
}

#[test]
fn connection_timers() {
    sweep(Scenario::ConnectionTimers);
}

#[test]
fn outlier_500() {
    sweep(Scenario::Outlier500);
}

#[test]
fn outlier_six() {
    sweep(Scenario::OutlierSix);
}

#[test]
fn outlier_pair() {
    sweep(Scenario::OutlierPair);
}

#[test]
fn pushback_503() {
    sweep(Scenario::Pushback503);
}

/// C-HEDGE-1: a pool with hedging on and a backend that turns slow, through a world that runs
/// two attempts of a request at once (docs/simulation.md, `hedge_slow`).
#[test]
fn hedge_slow() {
    let seeds = weir_sim::seeds_from_env();
    let mut failures = Vec::new();
    let mut t = weir_sim::hedge::HedgeSummary::default();
    for &seed in &seeds {
        match weir_sim::hedge::run(seed) {
            Ok(s) => {
                if seeds.len() == 1 {
                    eprintln!("{s:?}");
                }
                t.requests += s.requests;
                t.attempts += s.attempts;
                t.retries += s.retries;
                t.hedges += s.hedges;
                t.hedges_won += s.hedges_won;
                t.cancelled += s.cancelled;
                t.delivered += s.delivered;
                t.answered += s.answered;
                t.left += s.left;
                t.events += s.events;
            }
            Err(v) => failures.push(v.to_string()),
        }
    }
    eprintln!(
        "hedge_slow: {} seeds, {} violations; requests={} attempts={} retries={} hedges={} \
         (won {}) cancelled={} delivered={} answered={} left={} events={}",
        seeds.len(),
        failures.len(),
        t.requests,
        t.attempts,
        t.retries,
        t.hedges,
        t.hedges_won,
        t.cancelled,
        t.delivered,
        t.answered,
        t.left,
        t.events
    );
    assert!(
        failures.is_empty(),
        "{} of {} seeds of hedge_slow broke an invariant:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}

/// C-MIRROR-1: a mirror pool that answers, hangs or dies gives every primary request the same
/// response at the same instant (docs/simulation.md, `mirror_isolation`).
#[test]
fn mirror_isolation() {
    let seeds = weir_sim::seeds_from_env();
    let mut failures = Vec::new();
    let (mut requests, mut mirrors) = (0, [[0u64; 3]; 3]);
    for &seed in &seeds {
        match weir_sim::mirror::mirror_isolation(seed) {
            Ok(s) => {
                requests += s.requests;
                for (total, run) in mirrors.iter_mut().zip(s.mirrors) {
                    for (t, n) in total.iter_mut().zip(run) {
                        *t += n;
                    }
                }
            }
            Err(e) => failures.push(format!(
                "{e}\n  replay: WEIR_SIM_SEED={seed} cargo test -p weir-sim mirror_isolation"
            )),
        }
    }
    eprintln!(
        "mirror_isolation: {} seeds, {} violations; requests={requests} per fate; \
         [sent, dropped, skipped] healthy={:?} hangs={:?} dies={:?}",
        seeds.len(),
        failures.len(),
        mirrors[0],
        mirrors[1],
        mirrors[2]
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn h2_stream_limit() {
    sweep(Scenario::H2StreamLimit);
}

#[test]
fn h2_refused_goaway() {
    sweep(Scenario::H2RefusedGoaway);
}

#[test]
fn h2_conn_lost() {
    sweep(Scenario::H2ConnLost);
}

#[test]
fn dns_changes() {
    sweep(Scenario::DnsChanges);
}

#[test]
fn dns_flapping() {
    sweep(Scenario::DnsFlapping);
}
