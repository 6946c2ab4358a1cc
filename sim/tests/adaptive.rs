//! The adaptive concurrency sweep (C-LOAD-4): over seeds `0..500` (or `WEIR_SIM_SEEDS`, or one
//! `WEIR_SIM_SEED`), a backend of capacity C behind the adaptive limit (sim/src/adaptive.rs):
//! the limit converges to within ±25 % of C, drops by at least 30 % within 3 windows of a 3×
//! latency step, recovers at least 90 % after it, never leaves `[min_limit, max_limit]`, and a
//! second run of every tenth seed is bit-identical.

/// The defaults (`rtt_tolerance` 1.5, `backoff_ratio` 0.9, `min_limit` 3). Bounds, replay
/// identity and the three figures must hold for every seed (docs/simulation.md has their
/// spread).
#[test]
fn adaptive_concurrency() {
    sweep(1.5);
}

fn sweep(rtt_tolerance: f64) {
    let upper = 1.25;
    let seeds = weir_sim::seeds_from_env();
    let mut failures = Vec::new();
    let mut misses: Vec<String> = Vec::new();
    let (mut miss_conv, mut miss_step, mut miss_rec) = (0usize, 0usize, 0usize);
    let (mut conv, mut step, mut rec) = (Vec::new(), Vec::new(), Vec::new());
    let (mut shed, mut answered) = (0u64, 0u64);
    for &seed in &seeds {
        let run = match weir_sim::adaptive::run(seed, rtt_tolerance) {
            Ok(r) => r,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let c = f64::from(run.capacity);
        let converged = run.converged() / c;
        let (s, r) = (run.step_share(), run.recovered_share());
        if seeds.len() == 1 {
            eprintln!("{run:?}");
        }
        if !(0.75..=upper).contains(&converged) {
            miss_conv += 1;
            misses.push(format!(
                "seed {seed}: converged to {:.1} for capacity {c} ({converged:.2} C): {:?}",
                run.converged(),
                run.limits
            ));
        }
        if s > 0.7 {
            miss_step += 1;
            misses.push(format!(
                "seed {seed}: dropped only to {s:.2} of the limit: {:?}",
                run.limits
            ));
        }
        if r < 0.9 {
            miss_rec += 1;
            misses.push(format!(
                "seed {seed}: recovered only {r:.2}: {:?}",
                run.limits
            ));
        }
        if seed % 10 == 0 && weir_sim::adaptive::run(seed, rtt_tolerance).as_ref() != Ok(&run) {
            failures.push(format!("seed {seed}: a second run differs"));
        }
        conv.push(converged);
        step.push(s);
        rec.push(r);
        shed += run.shed;
        answered += run.answered;
    }
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        format!("min {lo:.2} mean {mean:.2} max {hi:.2}")
    };
    eprintln!(
        "adaptive_concurrency (rtt_tolerance {rtt_tolerance}): {} seeds, {} failures; converged/C {}; step low/before {}; \
         recovered/converged {}; answered {answered}, shed {shed}; seeds missing a figure: \
         convergence ±25 % {miss_conv}, drop ≥ 30 % {miss_step}, recovery ≥ 90 % {miss_rec}",
        seeds.len(),
        failures.len(),
        range(&conv),
        range(&step),
        range(&rec)
    );
    // A seed that misses a figure fails the test, with its limits at every window.
    failures.extend(misses);
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}
