use super::*;
use proptest::prelude::*;

fn params() -> AdaptiveParams {
    AdaptiveParams {
        enabled: true,
        max_limit: 200,
        ..AdaptiveParams::default()
    }
}

const MS: u64 = 1_000_000;

/// A saturated backend that serves `capacity` at a time in `service` each: with `limit` in
/// flight every answer takes `service × max(1, limit / capacity)`. Feeds one latency's worth of
/// answers per step until `until`; returns the limits seen at each window's end.
fn drive(
    m: &mut AdaptiveLimit,
    p: &AdaptiveParams,
    mut now: Instant,
    until: Instant,
    capacity: u32,
    service: u64,
) -> (Instant, Vec<u32>) {
    let mut limits = Vec::new();
    let mut boundary = m.poll_timeout(p);
    while now < until {
        let limit = m.limit(p);
        let latency = service * u64::from(limit.max(capacity)) / u64::from(capacity);
        now = now + Duration::from_nanos(latency);
        for _ in 0..limit {
            let sample = Sample {
                started: now - Duration::from_nanos(latency),
                signal: Signal::Answer,
                in_flight: limit,
            };
            m.handle_attempt(p, sample, now);
        }
        while now >= boundary {
            limits.push(m.limit(p));
            boundary = boundary + p.window;
        }
    }
    (now, limits)
}

#[test]
fn c_load_4_starts_at_min_and_grows_by_one_per_window_while_latency_holds() {
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    assert_eq!(m.limit(&p), 3);
    let (_, limits) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(8),
        100,
        20 * MS,
    );
    // The first window only learns the long-run latency; each later one adds one.
    assert_eq!(limits[..8], [3, 4, 5, 6, 7, 8, 9, 10]);
    assert!(m.baseline().unwrap() > Duration::from_millis(19));
}

#[test]
fn c_load_4_converges_near_a_backends_capacity_and_stays_within_bounds() {
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    let (_, limits) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(120),
        16,
        10 * MS,
    );
    let tail = &limits[limits.len() - 40..];
    let mean = tail.iter().sum::<u32>() as f64 / tail.len() as f64;
    assert!(
        (16.0 * 0.75..=16.0 * 1.5).contains(&mean),
        "mean limit {mean} over the last 40 windows, limits {tail:?}"
    );
    assert!(limits.iter().all(|&l| (3..=200).contains(&l)));
    // Never learned the queueing above the knee as normal (no unbounded growth): the top of the
    // saw-tooth is the first limit whose latency is beyond tolerance, 1.5 × 16 + 1.
    assert!(*tail.iter().max().unwrap() <= 25, "{tail:?}");
}

#[test]
fn c_load_4_a_drain_cuts_to_below_the_knee_in_one_round() {
    // Little's law: at the top of the climb the backend holds `capacity` without a queue, and
    // the first back-off takes the limit to `backoff_ratio` × that, not ten percent down.
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    let (_, limits) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(120),
        16,
        10 * MS,
    );
    let tail = &limits[40..];
    let drops: Vec<(u32, u32)> = tail
        .windows(2)
        .filter(|w| w[1] < w[0])
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(!drops.is_empty(), "{tail:?}");
    for (top, after) in drops {
        assert!(
            top >= 22,
            "a drain only from the top of the climb: {tail:?}"
        );
        assert!(
            (13..=15).contains(&after),
            "one round from {top} to 0.9 × 16, got {after}: {tail:?}"
        );
    }
}

#[test]
fn c_load_4_a_faster_backend_is_believed_within_a_window_so_the_limit_comes_back_to_its_knee() {
    // A 3x slowdown drains to the minimum and is re-learned there; when the backend is fast
    // again, one window of it is enough for the long-run latency, so the saw-tooth after is the
    // one before (a long-run latency left at the slow one would let the limit sit far above
    // the knee).
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    let (now, before) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(60),
        16,
        10 * MS,
    );
    let (now, _) = drive(&mut m, &p, now, now + Duration::from_secs(10), 16, 30 * MS);
    assert!(m.baseline().unwrap() > Duration::from_millis(25), "{m:?}");
    let (_, after) = drive(&mut m, &p, now, now + Duration::from_secs(60), 16, 10 * MS);
    assert!(m.baseline().unwrap() < Duration::from_millis(11), "{m:?}");
    let top = |xs: &[u32]| *xs[xs.len() - 20..].iter().max().unwrap();
    assert_eq!(
        top(&after),
        top(&before),
        "before {before:?}, after {after:?}"
    );
}

#[test]
fn c_load_4_a_latency_step_drains_the_limit_and_it_recovers() {
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    let (now, _) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(60),
        16,
        10 * MS,
    );
    let before = m.limit(&p);
    let (now, slow) = drive(&mut m, &p, now, now + Duration::from_secs(3), 16, 30 * MS);
    assert!(
        f64::from(*slow.last().unwrap()) <= f64::from(before) * 0.7,
        "before {before}, during the step {slow:?}"
    );
    let (_, after) = drive(&mut m, &p, now, now + Duration::from_secs(60), 16, 10 * MS);
    assert!(
        after
            .iter()
            .any(|&l| f64::from(l) >= f64::from(before) * 0.9),
        "before {before}, after {after:?}"
    );
}

#[test]
fn c_load_4_a_lasting_slowdown_is_relearned_instead_of_pinning_the_minimum() {
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    let (now, _) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(40),
        16,
        10 * MS,
    );
    let (_, slow) = drive(&mut m, &p, now, now + Duration::from_secs(60), 16, 30 * MS);
    assert!(slow.iter().rev().take(10).all(|&l| l >= 10), "{slow:?}");
}

#[test]
fn c_load_4_failures_back_off_once_per_round() {
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    let (now, _) = drive(
        &mut m,
        &p,
        Instant::ZERO,
        Instant::from_secs(30),
        100,
        10 * MS,
    );
    let before = m.limit(&p);
    let fail = |started| Sample {
        started,
        signal: Signal::Failure,
        in_flight: 1,
    };
    let t = now + Duration::from_millis(1);
    assert_eq!(m.handle_attempt(&p, fail(now), t), Some(Change::BackedOff));
    assert_eq!(m.limit(&p), before * 9 / 10);
    // Started before the back-off: admitted under the old limit, ignored.
    assert_eq!(
        m.handle_attempt(&p, fail(now), t + Duration::from_millis(1)),
        None
    );
    assert_eq!(m.limit(&p), before * 9 / 10);
    // Started after it: a new signal.
    let t2 = t + Duration::from_millis(5);
    assert_eq!(m.handle_attempt(&p, fail(t2), t2), Some(Change::BackedOff));
    assert_eq!(m.limit(&p), before * 9 / 10 * 9 / 10);
    // Client gone: nothing.
    let gone = Sample {
        signal: Signal::Ignored,
        ..fail(t2)
    };
    assert_eq!(m.handle_attempt(&p, gone, t2), None);
}

#[test]
fn c_load_4_an_idle_backend_does_not_grow() {
    let p = params();
    let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
    for s in 0..30u64 {
        let now = Instant::from_secs(s) + Duration::from_millis(500);
        let sample = Sample {
            started: now - Duration::from_millis(10),
            signal: Signal::Answer,
            in_flight: 1,
        };
        m.handle_attempt(&p, sample, now);
    }
    assert_eq!(m.limit(&p), 3);
}

#[test]
fn c_load_4_signals_of_outcomes() {
    use crate::retry::AttemptOutcome as O;
    assert_eq!(Signal::of(O::Status(200)), Signal::Answer);
    assert_eq!(Signal::of(O::Status(500)), Signal::Answer);
    assert_eq!(Signal::of(O::Status(503)), Signal::Failure);
    assert_eq!(Signal::of(O::Transport), Signal::Failure);
    assert_eq!(Signal::of(O::PerTryTimeout), Signal::Failure);
    assert_eq!(Signal::of(O::Connect), Signal::Failure);
    assert_eq!(Signal::of(O::ClientGone), Signal::Ignored);
}

#[test]
fn c_load_4_parameters_are_checked_naming_their_key() {
    let ok = |min, max, tol, back| {
        AdaptiveParams::new(true, min, max, 512, Duration::from_secs(1), tol, back)
    };
    let p = ok(3, None, 1.5, 0.9).unwrap();
    assert_eq!(
        (p.max_limit, p.rtt_tolerance_milli, p.backoff_milli),
        (512, 1500, 900)
    );
    assert_eq!(ok(0, None, 1.5, 0.9).unwrap_err().key(), "min_limit");
    assert_eq!(ok(10, Some(5), 1.5, 0.9).unwrap_err().key(), "max_limit");
    assert_eq!(ok(3, Some(513), 1.5, 0.9).unwrap_err().key(), "max_limit");
    assert_eq!(ok(3, None, 1.0, 0.9).unwrap_err().key(), "rtt_tolerance");
    assert_eq!(ok(3, None, 1.5, 1.0).unwrap_err().key(), "backoff_ratio");
    // Off, the defaults never refuse a backend with fewer slots than min_limit.
    let off = AdaptiveParams::new(false, 3, None, 1, Duration::from_secs(1), 1.5, 0.9).unwrap();
    assert_eq!((off.min_limit, off.max_limit), (1, 1));
    let on = AdaptiveParams::new(true, 3, None, 1, Duration::from_secs(1), 1.5, 0.9);
    assert_eq!(on.unwrap_err().key(), "min_limit");
    let w = AdaptiveParams::new(true, 3, None, 512, Duration::ZERO, 1.5, 0.9);
    assert_eq!(w.unwrap_err().key(), "window");
}

#[test]
fn histogram_median_is_close() {
    let mut h = Histogram::new();
    assert_eq!(h.median(), None);
    for ms in [10u64, 20, 30, 40, 1000] {
        h.add(ms * MS);
    }
    let m = h.median().unwrap() as f64;
    assert!((m / (30.0 * MS as f64) - 1.0).abs() < 0.07, "{m}");
    for ns in [0u64, 1, 7, 8, 9, 1000, u64::MAX] {
        let v = Histogram::value(Histogram::index(ns));
        if ns < 8 {
            assert_eq!(v, ns);
        } else if ns < 1 << 40 {
            assert!((v as f64 / ns as f64 - 1.0).abs() < 0.07, "{ns} -> {v}");
        }
    }
}

fn signal() -> impl Strategy<Value = Signal> {
    prop_oneof![
        6 => Just(Signal::Answer),
        1 => Just(Signal::Failure),
        1 => Just(Signal::Ignored),
    ]
}

proptest! {
    /// C-LOAD-4: whatever the samples, the limit stays within [min_limit, max_limit], and the
    /// same inputs give the same limits.
    #[test]
    fn c_load_4_limit_stays_within_bounds_and_is_deterministic(
        min in 1u32..10,
        span in 0u32..50,
        tol in 1.01f64..4.0,
        back in 0.1f64..0.99,
        steps in proptest::collection::vec((0u64..300, 0u64..2000, signal(), 0u32..80), 1..300),
    ) {
        let p = AdaptiveParams::new(
            true, min, Some(min + span), min + span, Duration::from_millis(100), tol, back,
        ).unwrap();
        let mut a = AdaptiveLimit::new(&p, Instant::ZERO);
        let mut b = a.clone();
        let mut now = Instant::ZERO;
        for (gap, latency, signal, in_flight) in steps {
            now = now + Duration::from_millis(gap);
            let sample = Sample {
                started: now.saturating_sub(Duration::from_millis(latency)),
                signal,
                in_flight,
            };
            let ca = a.handle_attempt(&p, sample, now);
            let cb = b.handle_attempt(&p, sample, now);
            prop_assert_eq!(ca, cb);
            prop_assert!((p.min_limit..=p.max_limit).contains(&a.limit(&p)));
            prop_assert!(a.limit >= p.min_limit && a.limit <= p.max_limit);
        }
        prop_assert_eq!(a, b);
    }

    /// Each window grows the limit by at most one.
    #[test]
    fn c_load_4_grows_at_most_one_per_window(
        latencies in proptest::collection::vec(1u64..50, 1..400),
    ) {
        let p = AdaptiveParams { enabled: true, ..AdaptiveParams::default() };
        let mut m = AdaptiveLimit::new(&p, Instant::ZERO);
        let mut now = Instant::ZERO;
        let mut last = (m.window_start, m.limit(&p));
        for ms in latencies {
            now = now + Duration::from_millis(ms);
            let sample = Sample {
                started: now - Duration::from_millis(ms),
                signal: Signal::Answer,
                in_flight: 512,
            };
            m.handle_attempt(&p, sample, now);
            if m.window_start != last.0 {
                prop_assert!(m.limit(&p) <= last.1 + 1);
                last = (m.window_start, m.limit(&p));
            }
            prop_assert!(m.limit(&p) <= last.1);
        }
    }
}

/// C-LOAD-4: every worker feeds the same machine with its own reading of the clock, so an
/// attempt's end may arrive with a `now` a little older than the last one: it is clamped, never
/// a panic, and the limit stays within its bounds.
#[test]
fn c_load_4_an_older_now_from_another_worker_is_clamped() {
    let p = params();
    let t0 = Instant::from_secs(10);
    let mut m = AdaptiveLimit::new(&p, t0);
    let later = t0 + Duration::from_millis(5);
    let answer = |started| Sample {
        started,
        signal: Signal::Answer,
        in_flight: 1,
    };
    m.handle_attempt(&p, answer(t0), later);
    // Another worker read its clock 2 ms earlier.
    m.handle_attempt(&p, answer(t0), later - Duration::from_millis(2));
    let _ = m.handle_timeout(&p, t0);
    let limit = m.limit(&p);
    assert!((p.min_limit..=p.max_limit).contains(&limit), "{limit}");
}
