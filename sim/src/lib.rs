//! weir-sim: deterministic chaos simulation of the real weir-core (docs/simulation.md; the third
//! layer of docs/architecture.md, "Tests, by layer").
//!
//! A discrete-event world (`world.rs`) drives the same core machines an adapter drives — the
//! overload gate, the rate limiter's local store (or a virtual shared store behind the
//! store circuit), the route table and bulkheads, the pool
//! snapshot and its selection policies, the probe schedule, the breaker (through the flow's
//! slots), the retry budget and the per-request flow machine, and pool swaps as a reload does —
//! against simulated clients and backends with a fault library. Virtual time jumps from event to
//! event; one seed decides everything. After every event the world checks the contract's
//! invariants ([`Invariant`]); a broken one stops the run with a [`Violation`] that names the
//! scenario, the seed and the command that replays it.
//!
//! The design follows quinn's `Pair::step` (a loop that advances a virtual clock to the next
//! deadline), TigerBeetle's VOPR (faults derived from the seed, invariants after each step, then
//! a fault-free phase that must converge) and madsim's `check_determinism` (run a seed twice,
//! compare the event log). See docs/simulation.md.

pub mod adaptive;
pub mod backend;
pub mod hedge;
pub mod mirror;
pub mod model;
pub mod report;
pub mod scenario;
pub mod trace;
mod world;

pub use report::{H2Counts, Invariant, Millis, Summary, Violation};
pub use scenario::Scenario;

/// The number of seeds each scenario runs in CI (`cargo test`), unless `WEIR_SIM_SEEDS` says
/// otherwise.
pub const CI_SEEDS: u64 = 500;

/// Run `scenario` for `seed`: its summary, or the first invariant it broke.
///
/// # Panics
/// Never on a valid scenario; a scenario whose setup the core rejects is a bug in the scenario
/// and is reported as a panic with the core's message.
pub fn run(scenario: Scenario, seed: u64) -> Result<Summary, Violation> {
    match world::World::new(scenario, seed, None) {
        Ok(w) => w.run().0,
        Err(e) => panic!("scenario {scenario} seed {seed}: invalid setup: {e}"),
    }
}

/// [`run`], also writing the event log as JSON lines to `out` (see [`trace`]).
///
/// # Errors
/// A write error on `out`.
pub fn run_traced(
    scenario: Scenario,
    seed: u64,
    out: &mut dyn std::io::Write,
) -> std::io::Result<Result<Summary, Violation>> {
    let world = world::World::new(scenario, seed, Some(out)).map_err(std::io::Error::other)?;
    let (result, error) = world.run();
    match error {
        Some(e) => Err(e),
        None => Ok(result),
    }
}

/// The seeds a scenario test runs: only `WEIR_SIM_SEED` when it is set (a replay), otherwise
/// `0..WEIR_SIM_SEEDS` (default [`CI_SEEDS`]).
#[must_use]
pub fn seeds_from_env() -> Vec<u64> {
    if let Some(seed) = std::env::var("WEIR_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        return vec![seed];
    }
    let n = std::env::var("WEIR_SIM_SEEDS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(CI_SEEDS);
    (0..n).collect()
}
