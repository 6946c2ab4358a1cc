use core::time::Duration;

use proptest::prelude::*;

use super::*;

fn host(attempts: u32, failures: u32) -> HostStat {
    HostStat {
        attempts,
        failures,
        ejected: false,
        serving: true,
    }
}

fn params() -> OutlierParams {
    OutlierParams {
        interval: Duration::from_secs(1),
        failure_percentage_request_volume: 5,
        ..OutlierParams::default()
    }
}

const T0: Instant = Instant::ZERO;

#[test]
fn c_out_1_failure_percentage_ejects_the_failing_backend_of_three() {
    let stats = [host(20, 20), host(20, 0), host(20, 1)];
    assert_eq!(
        judge(&stats, &params()),
        vec![(0, EjectReason::FailurePercentage)]
    );
}

#[test]
fn c_out_1_failure_percentage_needs_volume_and_hosts() {
    // Below the request volume: nothing to judge.
    assert!(judge(&[host(4, 4), host(20, 0), host(20, 0)], &params()).is_empty());
    // Only one host with volume, two needed.
    assert!(judge(&[host(20, 20), host(4, 0), host(4, 0)], &params()).is_empty());
    // Just below the threshold (85 %): 16 of 19 is 84.2 %.
    assert!(judge(&[host(19, 16), host(20, 0), host(20, 0)], &params()).is_empty());
    // At the threshold: 17 of 20 is 85 %.
    assert_eq!(judge(&[host(20, 17), host(20, 0)], &params()).len(), 1);
}

#[test]
fn c_out_1_success_rate_ejects_the_backend_far_below_the_mean() {
    let p = OutlierParams {
        failure_percentage_threshold: 100,
        ..OutlierParams::default()
    };
    let stats = [
        host(200, 0),
        host(200, 2),
        host(200, 1),
        host(200, 0),
        host(200, 100),
    ];
    assert_eq!(judge(&stats, &p), vec![(4, EjectReason::SuccessRate)]);
    // Four hosts are not enough (success_rate_minimum_hosts = 5).
    assert!(judge(&stats[1..], &p).is_empty());
}

#[test]
fn c_out_2_cap_lets_a_pool_of_two_or_three_eject_one_never_the_last() {
    let p = params();
    // Two backends both failing: one is ejected, the other keeps serving.
    assert_eq!(judge(&[host(20, 20), host(20, 20)], &p).len(), 1);
    // Three failing: 50 % of 3 rounds down to 1.
    assert_eq!(
        judge(&[host(20, 20), host(20, 20), host(20, 20)], &p).len(),
        1
    );
    // Four failing: two.
    assert_eq!(judge(&[host(20, 20); 4], &p).len(), 2);
    // The other one unhealthy: ejecting the failing one would leave nothing serving.
    let mut other = host(20, 0);
    other.serving = false;
    assert!(judge(&[host(20, 20), other], &p).is_empty());
    // One already ejected in a pool of two: the cap is reached.
    let mut ejected = host(0, 0);
    ejected.ejected = true;
    assert!(judge(&[ejected, host(20, 20), host(20, 0)], &p).is_empty());
    // A pool of one never ejects.
    assert!(judge(&[host(20, 20)], &p).is_empty());
}

#[test]
fn c_out_2_ejection_time_grows_with_consecutive_ejections_up_to_the_max() {
    let p = OutlierParams::default();
    assert_eq!(p.ejection_time(1), Duration::from_secs(30));
    assert_eq!(p.ejection_time(3), Duration::from_secs(90));
    assert_eq!(p.ejection_time(11), Duration::from_secs(300));
    assert_eq!(p.ejection_time(255), Duration::from_secs(300));
}

/// Runs intervals over a pool of cells: `fails[i]` says whether backend `i` fails every one of
/// its `per` attempts in the interval.
fn interval(cells: &[OutlierCell], p: &OutlierParams, fails: &[bool], per: u32, now: Instant) {
    for (cell, &f) in cells.iter().zip(fails) {
        for _ in 0..per {
            cell.record(if f { Verdict::Failed } else { Verdict::Good });
        }
    }
    let _ = run_interval(cells.iter().map(|c| (c, true)), p, 1, now);
}

#[test]
fn c_out_2_ejection_ends_and_the_multiplier_grows_then_decays() {
    let p = params();
    let cells: Vec<OutlierCell> = (0..3).map(|_| OutlierCell::default()).collect();
    let s = Duration::from_secs;
    interval(&cells, &p, &[true, false, false], 10, T0 + s(1));
    assert!(cells[0].is_ejected(T0 + s(1)));
    assert_eq!(
        cells[0].ejection(T0 + s(1)),
        Some(EjectReason::FailurePercentage)
    );
    assert!(cells[0].is_ejected(T0 + s(30)));
    assert!(!cells[0].is_ejected(T0 + s(31)));
    // The next boundary after its end returns it; still failing, it is ejected for 2 × 30 s.
    let events = run_interval(cells.iter().map(|c| (c, true)), &p, 1, T0 + s(31));
    assert_eq!(events[0].change, OutlierChange::Returned);
    interval(&cells, &p, &[true, false, false], 10, T0 + s(32));
    assert!(cells[0].is_ejected(T0 + s(91)));
    assert!(!cells[0].is_ejected(T0 + s(92)));
    assert_eq!(cells[0].consecutive_ejections(), 2);
    // The interval it returns in does not count as good; later good ones lower it by one each.
    interval(&cells, &p, &[false, false, false], 10, T0 + s(93));
    assert_eq!(cells[0].consecutive_ejections(), 2);
    interval(&cells, &p, &[false, false, false], 10, T0 + s(94));
    assert_eq!(cells[0].consecutive_ejections(), 1);
    interval(&cells, &p, &[false, false, false], 10, T0 + s(95));
    assert_eq!(cells[0].consecutive_ejections(), 0);
}

#[test]
fn c_out_1_failing_grpc_statuses_are_failures_and_late_ones_add_to_counted_attempts() {
    for code in [2, 13, 14, 15] {
        assert_eq!(Verdict::of_grpc_status(code), Verdict::Failed, "{code}");
    }
    for code in [0, 1, 3, 4, 5, 8, 12, 16] {
        assert_eq!(Verdict::of_grpc_status(code), Verdict::Good, "{code}");
    }
    let cell = OutlierCell::default();
    cell.record(Verdict::Good);
    cell.record(Verdict::Good);
    cell.record_late_failure();
    assert_eq!(cell.peek(), (2, 1));
    // A late failure whose attempt the previous interval took is never more than the attempts.
    let _ = cell.stat(T0, true);
    cell.record_late_failure();
    cell.record(Verdict::Good);
    cell.record_late_failure();
    let s = cell.stat(T0, true);
    assert_eq!((s.attempts, s.failures), (1, 1));
}

#[test]
fn c_out_1_ignored_attempts_are_not_counted() {
    let cell = OutlierCell::default();
    cell.record(Verdict::Ignored);
    cell.record(Verdict::Failed);
    cell.record(Verdict::Good);
    assert_eq!(cell.peek(), (2, 1));
    assert_eq!(Verdict::of_status(500), Verdict::Failed);
    assert_eq!(Verdict::of_status(429), Verdict::Good);
    assert_eq!(Verdict::of_status(404), Verdict::Good);
}

#[test]
fn c_out_1_the_clock_judges_once_per_boundary() {
    let p = params();
    let clock = OutlierClock::default();
    let ms = Duration::from_millis;
    // The first request starts the first interval.
    assert_eq!(clock.due(&p, T0 + ms(5)), None);
    assert_eq!(clock.due(&p, T0 + ms(900)), None);
    assert_eq!(clock.due(&p, T0 + ms(1005)), Some(1));
    assert_eq!(clock.due(&p, T0 + ms(1006)), None);
    // Three boundaries passed without a request.
    assert_eq!(clock.due(&p, T0 + ms(4100)), Some(3));
    assert_eq!(clock.due(&p, T0 + ms(4999)), None);
}

#[test]
fn c_out_1_params_are_validated_with_the_key_named() {
    let d = OutlierParams::default();
    assert_eq!(d.checked(), Ok(d));
    let bad = |p: OutlierParams| p.checked().unwrap_err().key();
    assert_eq!(
        bad(OutlierParams {
            interval: Duration::from_millis(50),
            ..d
        }),
        "interval"
    );
    assert_eq!(
        bad(OutlierParams {
            base_ejection_time: Duration::from_secs(600),
            ..d
        }),
        "base_ejection_time"
    );
    assert_eq!(
        bad(OutlierParams {
            max_ejection_percent: 101,
            ..d
        }),
        "max_ejection_percent"
    );
    assert_eq!(
        bad(OutlierParams {
            success_rate_request_volume: 0,
            ..d
        }),
        "success_rate_request_volume"
    );
    assert_eq!(OutlierParams::stdev_factor_milli(1.9), Some(1900));
    assert_eq!(OutlierParams::stdev_factor_milli(f64::NAN), None);
    assert_eq!(OutlierParams::stdev_factor_milli(-1.0), None);
}

fn arb_host() -> impl Strategy<Value = HostStat> {
    (
        0u32..300,
        0u32..300,
        any::<bool>(),
        prop::bool::weighted(0.9),
    )
        .prop_map(|(attempts, f, ejected, serving)| HostStat {
            attempts,
            failures: f.min(attempts),
            ejected,
            serving,
        })
}

fn arb_params() -> impl Strategy<Value = OutlierParams> {
    (
        0u32..=100,
        0u32..=100,
        1u32..6,
        1u32..200,
        1u32..8,
        1u32..200,
        0u32..3000,
    )
        .prop_map(|(pct, thr, fph, fpv, srh, srv, k)| OutlierParams {
            max_ejection_percent: pct,
            failure_percentage_threshold: thr,
            failure_percentage_minimum_hosts: fph,
            failure_percentage_request_volume: fpv,
            success_rate_minimum_hosts: srh,
            success_rate_request_volume: srv,
            success_rate_stdev_factor_milli: k,
            ..OutlierParams::default()
        })
}

proptest! {
    /// C-OUT-2: whatever the stats, the judgment stays within the cap, never ejects an ejected
    /// backend again, never leaves a pool with a serving backend without one, and only ejects
    /// backends with the volume of a rule.
    #[test]
    fn c_out_2_judgment_respects_the_cap(
        stats in prop::collection::vec(arb_host(), 0..12),
        p in arb_params(),
    ) {
        let out = judge(&stats, &p);
        let already = stats.iter().filter(|s| s.ejected).count();
        prop_assert!(out.is_empty() || already + out.len() <= p.max_ejected(stats.len()));
        let serving_before = stats.iter().filter(|s| s.serving && !s.ejected).count();
        let serving_after = stats
            .iter()
            .enumerate()
            .filter(|(i, s)| s.serving && !s.ejected && !out.iter().any(|(j, _)| j == i))
            .count();
        prop_assert!(serving_before == 0 || serving_after >= 1);
        for (i, reason) in &out {
            let s = &stats[*i];
            prop_assert!(!s.ejected);
            prop_assert!(out.iter().filter(|(j, _)| j == i).count() == 1);
            let volume = match reason {
                EjectReason::FailurePercentage => p.failure_percentage_request_volume,
                EjectReason::SuccessRate => p.success_rate_request_volume,
                EjectReason::RetryAfter => {
                    return Err(TestCaseError::fail("a judgment never ejects for retry_after"));
                }
            };
            prop_assert!(s.attempts >= volume);
        }
    }

    /// C-RETRY-11 within C-OUT-2: a pushback is admitted only within the cap, never for one
    /// already ejected, and never leaves a pool that had a serving backend without one.
    #[test]
    fn c_retry_11_pushback_is_admitted_only_within_the_cap(
        stats in prop::collection::vec(arb_host(), 0..12),
        p in arb_params(),
        index in 0usize..12,
    ) {
        if admits_push_back(&stats, index, &p) {
            let s = &stats[index];
            prop_assert!(!s.ejected);
            let ejected = stats.iter().filter(|s| s.ejected).count();
            prop_assert!(ejected < p.max_ejected(stats.len()));
            let serving = stats.iter().filter(|s| s.serving && !s.ejected).count();
            prop_assert!(!s.serving || serving >= 2);
        }
    }

    /// C-OUT-1: deterministic, and a backend with no failures is never ejected by failure
    /// percentage unless the threshold is 0.
    #[test]
    fn c_out_1_judgment_is_deterministic(
        stats in prop::collection::vec(arb_host(), 0..12),
        p in arb_params(),
    ) {
        let out = judge(&stats, &p);
        prop_assert_eq!(&out, &judge(&stats, &p));
        for (i, reason) in &out {
            if *reason == EjectReason::FailurePercentage && p.failure_percentage_threshold > 0 {
                prop_assert!(stats[*i].failures > 0);
            }
        }
    }

    /// C-OUT-2: an ejection lasts between the base and the max, and lengthens with the count.
    #[test]
    fn c_out_2_ejection_time_is_bounded_and_monotone(n in 1u32..1000) {
        let p = OutlierParams::default();
        let t = p.ejection_time(n);
        prop_assert!(t >= p.base_ejection_time && t <= p.max_ejection_time);
        prop_assert!(p.ejection_time(n + 1) >= t);
    }
}
