//! Teeth: a checker that never fires proves nothing. For each invariant, turn on the core
//! mutation switch that breaks the decision upholding it (`weir_core::mutations`, compiled in
//! only for weir-sim's tests) and require that some seed of the CI range reports a violation of
//! exactly that invariant. The switches are process-wide, so this file is its own test binary
//! and runs every mutation serially in one test.

use std::sync::atomic::AtomicBool;

use weir_core::mutations;
use weir_sim::{CI_SEEDS, Invariant, Scenario, Violation};

/// Where a tooth bites: a scenario of the main world, or the hedging world
/// (`weir_sim::hedge`).
#[derive(Clone, Copy)]
enum Target {
    World(Scenario),
    Hedge,
}

impl Target {
    fn run(self, seed: u64) -> Result<(), Violation> {
        match self {
            Target::World(s) => weir_sim::run(s, seed).map(drop),
            Target::Hedge => weir_sim::hedge::run(seed).map(drop),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Target::World(s) => s.name(),
            Target::Hedge => weir_sim::hedge::NAME,
        }
    }
}

struct Tooth {
    switch: &'static str,
    flag: &'static AtomicBool,
    scenario: Target,
    expect: Invariant,
}

fn teeth() -> Vec<Tooth> {
    use Invariant as I;
    use Scenario as S;
    let t = |switch: &'static str, flag: &'static AtomicBool, scenario, expect| Tooth {
        switch,
        flag,
        scenario: Target::World(scenario),
        expect,
    };
    let hedge = |switch: &'static str, flag: &'static AtomicBool, expect| Tooth {
        switch,
        flag,
        scenario: Target::Hedge,
        expect,
    };
    vec![
        t(
            "BREAKER_ADMITS_WHILE_OPEN",
            &mutations::BREAKER_ADMITS_WHILE_OPEN,
            S::BackendCrash,
            I::CircuitOpenReached,
        ),
        t(
            "BREAKER_IGNORES_FAILURES",
            &mutations::BREAKER_IGNORES_FAILURES,
            S::BackendCrash,
            I::BreakerFollowsOutcomes,
        ),
        t(
            "RETRY_MAY_REUSE_BACKEND",
            &mutations::RETRY_MAY_REUSE_BACKEND,
            S::RetryStorm,
            I::RetryRevisits,
        ),
        t(
            "RETRY_ATTEMPTS_PLUS_ONE",
            &mutations::RETRY_ATTEMPTS_PLUS_ONE,
            S::RetryStorm,
            I::AttemptsExceedMax,
        ),
        t(
            "BUDGET_DISABLED",
            &mutations::BUDGET_DISABLED,
            S::RetryStorm,
            I::RetryBudget,
        ),
        t(
            "SLOT_LIMIT_IGNORED",
            &mutations::SLOT_LIMIT_IGNORED,
            S::OverloadSpike,
            I::BackendSlots,
        ),
        t(
            "BUCKET_FAST_REFILL",
            &mutations::BUCKET_FAST_REFILL,
            S::HotClient,
            I::RateBucket,
        ),
        t(
            "FLOW_TIMEOUT_ABANDONS",
            &mutations::FLOW_TIMEOUT_ABANDONS,
            S::BackendCrash,
            I::OneResponse,
        ),
        t(
            "GATE_QUEUE_UNBOUNDED",
            &mutations::GATE_QUEUE_UNBOUNDED,
            S::OverloadSpike,
            I::QueueBound,
        ),
        t(
            "GATE_NEVER_EXPIRES",
            &mutations::GATE_NEVER_EXPIRES,
            S::OverloadSpike,
            I::QueueTimeout,
        ),
        t(
            "SLOW_START_IGNORED",
            &mutations::SLOW_START_IGNORED,
            S::SlowStartRecovery,
            I::SlowStart,
        ),
        t(
            "BREAKER_NEVER_CLOSES",
            &mutations::BREAKER_NEVER_CLOSES,
            S::BackendCrash,
            I::Liveness,
        ),
        t(
            "PANIC_ROUTING_DISABLED",
            &mutations::PANIC_ROUTING_DISABLED,
            S::SmallPool,
            I::PoolNeverEmptied,
        ),
        t(
            "BULKHEAD_UNLIMITED",
            &mutations::BULKHEAD_UNLIMITED,
            S::BulkheadIsolation,
            I::Bulkhead,
        ),
        t(
            "STORE_TRIALS_UNBOUNDED",
            &mutations::STORE_TRIALS_UNBOUNDED,
            S::StoreOutage,
            I::StorePolicy,
        ),
        t(
            "STORE_NEVER_RECOVERS",
            &mutations::STORE_NEVER_RECOVERS,
            S::StoreOutage,
            I::StorePolicy,
        ),
        t(
            "WRITE_TIMEOUT_IGNORED",
            &mutations::WRITE_TIMEOUT_IGNORED,
            S::ConnectionTimers,
            I::RequestTimers,
        ),
        t(
            "HEAD_TIMEOUT_IGNORED",
            &mutations::HEAD_TIMEOUT_IGNORED,
            S::ConnectionTimers,
            I::ConnectionTimers,
        ),
        t(
            "OUTLIER_CAP_IGNORED",
            &mutations::OUTLIER_CAP_IGNORED,
            S::OutlierPair,
            I::OutlierCap,
        ),
        t(
            "PUSHBACK_IGNORED",
            &mutations::PUSHBACK_IGNORED,
            S::Pushback503,
            I::PushedBackReached,
        ),
        t(
            "STREAM_LIMIT_IGNORED",
            &mutations::STREAM_LIMIT_IGNORED,
            S::H2StreamLimit,
            I::StreamLimit,
        ),
        t(
            "TRANSPORT_COUNTS_AS_NOTHING_SENT",
            &mutations::TRANSPORT_COUNTS_AS_NOTHING_SENT,
            S::H2ConnLost,
            I::ReplaySafe,
        ),
        hedge(
            "HEDGE_SKIPS_BUDGET",
            &mutations::HEDGE_SKIPS_BUDGET,
            I::HedgeBudget,
        ),
        hedge(
            "HEDGE_BEYOND_MAX_ATTEMPTS",
            &mutations::HEDGE_BEYOND_MAX_ATTEMPTS,
            I::HedgeBudget,
        ),
        hedge(
            "HEDGE_ANY_METHOD",
            &mutations::HEDGE_ANY_METHOD,
            I::HedgeSafe,
        ),
        hedge(
            "HEDGE_LOSER_NOT_CANCELLED",
            &mutations::HEDGE_LOSER_NOT_CANCELLED,
            I::LoserSilent,
        ),
        hedge(
            "HEDGE_LOSER_FAILS",
            &mutations::HEDGE_LOSER_FAILS,
            I::LoserNeutral,
        ),
        hedge(
            "BACKOFF_UNCAPPED",
            &mutations::BACKOFF_UNCAPPED,
            I::BackoffBounds,
        ),
    ]
}

#[test]
fn teeth_every_invariant_catches_its_mutation() {
    mutations::reset();
    let all = teeth();
    assert_eq!(
        all.len(),
        mutations::ALL.len(),
        "every mutation switch has a tooth"
    );
    let mut report = Vec::new();
    let mut missed = Vec::new();
    for tooth in &all {
        mutations::set(tooth.flag, true);
        let mut first_any: Option<(u64, Invariant)> = None;
        let mut caught: Option<(u64, String)> = None;
        for seed in 0..CI_SEEDS {
            if let Err(v) = tooth.scenario.run(seed) {
                first_any.get_or_insert((seed, v.invariant));
                if v.invariant == tooth.expect {
                    caught = Some((seed, v.detail));
                    break;
                }
            }
        }
        mutations::set(tooth.flag, false);
        match caught {
            Some((seed, detail)) => report.push(format!(
                "| {} | {} ({}) | {} | {} | {}",
                tooth.switch,
                tooth.expect,
                tooth.expect.contract(),
                tooth.scenario.name(),
                seed,
                detail
            )),
            None => missed.push(format!(
                "{}: no seed of {} in 0..{CI_SEEDS} broke {} (first violation: {:?})",
                tooth.switch,
                tooth.scenario.name(),
                tooth.expect,
                first_any
            )),
        }
    }
    mutations::reset();
    eprintln!("| mutation | invariant | scenario | seed | what the simulator saw");
    for line in &report {
        eprintln!("{line}");
    }
    assert!(
        missed.is_empty(),
        "toothless checks:\n{}",
        missed.join("\n")
    );
}
