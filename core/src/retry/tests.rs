use super::*;
use proptest::prelude::*;

fn policy() -> RetryPolicy {
    RetryPolicy::default()
}

/// Facts for which every per-request condition of C-RETRY-1 holds.
fn retryable() -> RetryFacts<'static> {
    RetryFacts {
        method: "GET",
        outcome: AttemptOutcome::Status(503),
        body: BodyKind::None,
        attempts: 1,
        client_present: true,
    }
}

#[test]
fn defaults_are_the_contracts() {
    let p = policy();
    assert_eq!(p.max_attempts(), 2);
    assert_eq!(p.per_try_timeout(), Duration::from_secs(5));
    assert_eq!(p.body_limit(), 1_048_576);
    assert_eq!(p.methods(), ["GET", "HEAD", "OPTIONS"]);
    assert_eq!(p.statuses(), [502, 503, 504]);
    assert_eq!(p.budget_capacity(), 100);
    assert_eq!(p.budget_refill_per_second(), 10.0);
    assert_eq!(p.to_params(), RetryParams::default());
}

#[test]
fn c_retry_1_all_conditions_hold_retries() {
    assert_eq!(policy().decide(&retryable()), RetryVerdict::Retry);
}

/// C-RETRY-1 truth table: each condition, broken alone, blocks the retry with its reason.
#[test]
fn c_retry_1_each_condition_alone_blocks_a_retry() {
    let p = policy();
    let cases: [(RetryFacts<'static>, NoRetryReason); 8] = [
        (
            RetryFacts {
                method: "POST",
                ..retryable()
            },
            NoRetryReason::MethodNotAllowed,
        ),
        (
            RetryFacts {
                outcome: AttemptOutcome::Status(500),
                ..retryable()
            },
            NoRetryReason::OutcomeNotRetryable,
        ),
        (
            RetryFacts {
                outcome: AttemptOutcome::Status(200),
                ..retryable()
            },
            NoRetryReason::OutcomeNotRetryable,
        ),
        (
            RetryFacts {
                body: BodyKind::Streaming,
                ..retryable()
            },
            NoRetryReason::BodyNotReplayable,
        ),
        (
            RetryFacts {
                body: BodyKind::Sized(1_048_577),
                ..retryable()
            },
            NoRetryReason::BodyNotReplayable,
        ),
        (
            RetryFacts {
                attempts: 2,
                ..retryable()
            },
            NoRetryReason::AttemptsExhausted,
        ),
        (
            RetryFacts {
                client_present: false,
                ..retryable()
            },
            NoRetryReason::ClientGone,
        ),
        (
            RetryFacts {
                outcome: AttemptOutcome::ClientGone,
                ..retryable()
            },
            NoRetryReason::ClientGone,
        ),
    ];
    for (facts, reason) in cases {
        assert_eq!(p.decide(&facts), RetryVerdict::NoRetry(reason), "{facts:?}");
    }
}

#[test]
fn c_retry_1_retryable_outcomes_and_bodies() {
    let p = policy();
    for outcome in [
        AttemptOutcome::Status(502),
        AttemptOutcome::Status(503),
        AttemptOutcome::Status(504),
        AttemptOutcome::Connect,
        AttemptOutcome::Transport,
        AttemptOutcome::PerTryTimeout,
    ] {
        let f = RetryFacts {
            outcome,
            ..retryable()
        };
        assert_eq!(p.decide(&f), RetryVerdict::Retry, "{outcome:?}");
    }
    for body in [
        BodyKind::None,
        BodyKind::Sized(0),
        BodyKind::Sized(1_048_576),
    ] {
        let f = RetryFacts {
            body,
            ..retryable()
        };
        assert_eq!(p.decide(&f), RetryVerdict::Retry, "{body:?}");
    }
}

#[test]
fn c_retry_1_methods_compare_case_insensitively() {
    let p = RetryPolicy::new(RetryParams {
        methods: vec!["get".into(), "Put".into(), "GET".into()],
        ..RetryParams::default()
    })
    .unwrap();
    assert_eq!(p.methods(), ["GET", "PUT"], "normalised and deduplicated");
    for m in ["GET", "get", "gEt", "PUT", "put"] {
        assert!(p.allows_method(m), "{m}");
        let f = RetryFacts {
            method: m,
            ..retryable()
        };
        assert_eq!(p.decide(&f), RetryVerdict::Retry);
    }
    for m in ["HEAD", "POST", "", "GETX", "GE"] {
        assert!(!p.allows_method(m), "{m}");
    }
    assert!(policy().allows_method("options"));
}

#[test]
fn c_retry_1_max_attempts_bounds_retries() {
    let p = RetryPolicy::new(RetryParams {
        max_attempts: 3,
        ..RetryParams::default()
    })
    .unwrap();
    for (attempts, ok) in [(1, true), (2, true), (3, false), (4, false)] {
        let v = p.decide(&RetryFacts {
            attempts,
            ..retryable()
        });
        assert_eq!(v == RetryVerdict::Retry, ok, "attempts {attempts}");
    }
    let once = RetryPolicy::new(RetryParams {
        max_attempts: 1,
        ..RetryParams::default()
    })
    .unwrap();
    assert_eq!(
        once.decide(&retryable()),
        RetryVerdict::NoRetry(NoRetryReason::AttemptsExhausted)
    );
}

#[test]
fn c_retry_1_500_is_a_success_and_statuses_are_configurable() {
    let p = policy();
    assert_eq!(
        p.classify(AttemptOutcome::Status(500)),
        AttemptClass::Success
    );
    assert_eq!(
        p.classify(AttemptOutcome::Status(404)),
        AttemptClass::Success
    );
    assert_eq!(
        p.classify(AttemptOutcome::Status(200)),
        AttemptClass::Success
    );
    assert_eq!(
        p.classify(AttemptOutcome::Status(503)),
        AttemptClass::Failure
    );
    let q = RetryPolicy::new(RetryParams {
        statuses: vec![500, 408],
        ..RetryParams::default()
    })
    .unwrap();
    assert_eq!(q.statuses(), [408, 500]);
    assert_eq!(
        q.classify(AttemptOutcome::Status(500)),
        AttemptClass::Failure
    );
    assert_eq!(
        q.classify(AttemptOutcome::Status(503)),
        AttemptClass::Success
    );
    let f = RetryFacts {
        outcome: AttemptOutcome::Status(408),
        ..retryable()
    };
    assert_eq!(q.decide(&f), RetryVerdict::Retry);
}

#[test]
fn c_retry_8_timeouts_are_failures_client_gone_is_neutral() {
    let p = policy();
    assert_eq!(
        p.classify(AttemptOutcome::PerTryTimeout),
        AttemptClass::Failure
    );
    assert_eq!(p.classify(AttemptOutcome::Connect), AttemptClass::Failure);
    assert_eq!(p.classify(AttemptOutcome::Transport), AttemptClass::Failure);
    assert_eq!(
        p.classify(AttemptOutcome::ClientGone),
        AttemptClass::Neutral
    );
}

#[test]
fn c_retry_4_what_the_client_gets_without_a_retry() {
    assert_eq!(
        no_retry_response(AttemptOutcome::Status(503)),
        NoRetryResponse::Deliver
    );
    assert_eq!(
        no_retry_response(AttemptOutcome::Status(500)),
        NoRetryResponse::Deliver
    );
    assert_eq!(
        no_retry_response(AttemptOutcome::Connect),
        NoRetryResponse::Synthetic(502)
    );
    assert_eq!(
        no_retry_response(AttemptOutcome::Transport),
        NoRetryResponse::Synthetic(502)
    );
    assert_eq!(
        no_retry_response(AttemptOutcome::PerTryTimeout),
        NoRetryResponse::Synthetic(504)
    );
    assert_eq!(
        no_retry_response(AttemptOutcome::ClientGone),
        NoRetryResponse::Abandon
    );
}

#[test]
fn c_retry_5_header_deadline_is_per_try_timeout_after_send() {
    let p = RetryPolicy::new(RetryParams {
        per_try_timeout: Duration::from_millis(250),
        ..RetryParams::default()
    })
    .unwrap();
    assert_eq!(
        p.header_deadline(Instant::from_secs(1)),
        Instant::from_millis(1250)
    );
    assert_eq!(p.header_deadline(Instant::MAX), Instant::MAX);
}

#[test]
fn c_retry_3_budget_is_spent_only_after_a_backend_is_reserved() {
    let budget = RetryBudget::new(BucketParams::new(1, 1.0).unwrap());
    let now = Instant::from_secs(1);
    // No backend: no token spent.
    let r = reserve_then_spend(&budget, now, || None::<u32>, |_| panic!("nothing reserved"));
    assert_eq!(r, Err(NoRetryReason::NoOtherBackend));
    assert_eq!(budget.tokens(now), 1);
    // Backend reserved: the token is spent.
    let r = reserve_then_spend(&budget, now, || Some(7u32), |_| panic!("kept"));
    assert_eq!(r, Ok(7));
    assert_eq!(budget.tokens(now), 0);
    // Budget empty: the reservation is released, not kept.
    let mut released = None;
    let r = reserve_then_spend(&budget, now, || Some(8u32), |b| released = Some(b));
    assert_eq!(r, Err(NoRetryReason::BudgetExhausted));
    assert_eq!(released, Some(8));
    assert_eq!(NoRetryReason::BudgetExhausted.as_str(), "budget_exhausted");
}

#[test]
fn validation_names_the_field() {
    let bad = |f: fn(&mut RetryParams)| {
        let mut p = RetryParams::default();
        f(&mut p);
        RetryPolicy::new(p).unwrap_err()
    };
    let cases: [(RetryError, &str); 11] = [
        (bad(|p| p.max_attempts = 0), "max_attempts"),
        (bad(|p| p.max_attempts = 6), "max_attempts"),
        (
            bad(|p| p.per_try_timeout = Duration::ZERO),
            "per_try_timeout",
        ),
        (bad(|p| p.methods = vec![String::new()]), "methods"),
        (bad(|p| p.methods = vec!["GE T".into()]), "methods"),
        (bad(|p| p.methods = vec!["GET/".into()]), "methods"),
        (bad(|p| p.statuses = vec![399]), "statuses"),
        (bad(|p| p.statuses = vec![503, 600]), "statuses"),
        (bad(|p| p.budget_capacity = 0), "budget_capacity"),
        (
            bad(|p| p.budget_refill_per_second = 0.0),
            "budget_refill_per_second",
        ),
        (
            bad(|p| p.budget_refill_per_second = f64::INFINITY),
            "budget_refill_per_second",
        ),
    ];
    for (err, field) in cases {
        assert_eq!(err.field(), field, "{err}");
        assert!(err.to_string().starts_with(field), "{err}");
    }
    assert_eq!(
        bad(|p| p.budget_capacity = u64::MAX).field(),
        "budget_capacity"
    );
    // Edges that are valid.
    for p in [
        RetryParams {
            max_attempts: 1,
            ..RetryParams::default()
        },
        RetryParams {
            max_attempts: 5,
            ..RetryParams::default()
        },
        RetryParams {
            statuses: vec![400, 599],
            ..RetryParams::default()
        },
        RetryParams {
            statuses: vec![],
            methods: vec![],
            ..RetryParams::default()
        },
        RetryParams {
            per_try_timeout: Duration::from_nanos(1),
            ..RetryParams::default()
        },
    ] {
        assert!(RetryPolicy::new(p.clone()).is_ok(), "{p:?}");
    }
}

proptest! {
    /// C-RETRY-1: `decide` says Retry exactly when every per-request condition holds, and the
    /// reason otherwise names a condition that fails.
    #[test]
    fn c_retry_1_and_c_retry_9_decide_is_the_conjunction(
        method in prop::sample::select(vec!["GET", "get", "HEAD", "options", "POST", "PUT", "DELETE"]),
        outcome in prop_oneof![
            (100u16..600).prop_map(AttemptOutcome::Status),
            Just(AttemptOutcome::Connect),
            Just(AttemptOutcome::Refused),
            Just(AttemptOutcome::Transport),
            Just(AttemptOutcome::PerTryTimeout),
            Just(AttemptOutcome::ClientGone),
        ],
        body in prop_oneof![
            Just(BodyKind::None),
            Just(BodyKind::Streaming),
            (0u64..3_000_000).prop_map(BodyKind::Sized),
        ],
        attempts in 0u32..7,
        client_present in any::<bool>(),
        max_attempts in 1u32..=5,
    ) {
        let p = RetryPolicy::new(RetryParams { max_attempts, ..RetryParams::default() }).unwrap();
        let method_ok = ["GET", "HEAD", "OPTIONS"].iter().any(|m| m.eq_ignore_ascii_case(method));
        let outcome_ok = match outcome {
            AttemptOutcome::Status(s) => [502, 503, 504].contains(&s),
            AttemptOutcome::ClientGone => false,
            _ => true,
        };
        let body_ok = match body {
            BodyKind::None => true,
            BodyKind::Sized(n) => n <= 1_048_576,
            BodyKind::Streaming => false,
        };
        let gone = !client_present || outcome == AttemptOutcome::ClientGone;
        // C-RETRY-9: nothing sent, so neither the method nor the body stands in the way.
        let unsent = matches!(outcome, AttemptOutcome::Connect | AttemptOutcome::Refused);
        let (method_ok, body_ok) = (method_ok || unsent, body_ok || unsent);
        let all = method_ok && outcome_ok && body_ok && attempts < max_attempts && !gone;
        let facts = RetryFacts { method, outcome, body, attempts, client_present };
        match p.decide(&facts) {
            RetryVerdict::Retry => prop_assert!(all),
            RetryVerdict::NoRetry(r) => {
                prop_assert!(!all);
                let failing = match r {
                    NoRetryReason::ClientGone => gone,
                    NoRetryReason::OutcomeNotRetryable => !outcome_ok,
                    NoRetryReason::MethodNotAllowed => !method_ok,
                    NoRetryReason::BodyNotReplayable => !body_ok,
                    NoRetryReason::AttemptsExhausted => attempts >= max_attempts,
                    NoRetryReason::NoOtherBackend | NoRetryReason::BudgetExhausted => false,
                };
                prop_assert!(failing, "reason {:?} names a condition that holds", r);
            }
        }
    }
}

#[test]
fn c_retry_11_a_backends_429_is_never_retryable() {
    let err = RetryPolicy::new(RetryParams {
        statuses: vec![429, 503],
        ..RetryParams::default()
    })
    .unwrap_err();
    assert_eq!(err, RetryError::TooManyRequests);
    assert_eq!(err.field(), "statuses");
    let p = RetryPolicy::new(RetryParams::default()).unwrap();
    assert_eq!(
        p.classify(AttemptOutcome::Status(429)),
        crate::breaker::Outcome::Success,
        "a 429 is an answer, never a passive failure"
    );
    assert_eq!(
        crate::outlier::Verdict::of_status(429),
        crate::outlier::Verdict::Good
    );
}

/// C-RETRY-9: an attempt of which nothing was sent (a connect error, a refused stream) is
/// retried whatever the method and body, within `max_attempts`; one that reached the backend
/// (a transport error, a timeout, a status) is not, for a method or body that is not
/// replayable.
#[test]
fn c_retry_9_nothing_sent_is_retried_for_any_method_and_body() {
    let p = policy();
    for outcome in [
        AttemptOutcome::Connect,
        AttemptOutcome::Refused,
        AttemptOutcome::Saturated,
    ] {
        assert!(outcome.nothing_sent());
        for (method, body) in [
            ("POST", BodyKind::Streaming),
            ("PUT", BodyKind::Sized(10 << 20)),
            ("DELETE", BodyKind::None),
            ("GET", BodyKind::Streaming),
        ] {
            let f = RetryFacts {
                method,
                outcome,
                body,
                ..retryable()
            };
            assert_eq!(
                p.decide(&f),
                RetryVerdict::Retry,
                "{outcome:?} {method} {body:?}"
            );
            let exhausted = RetryFacts {
                attempts: p.max_attempts(),
                ..f
            };
            assert_eq!(
                p.decide(&exhausted),
                RetryVerdict::NoRetry(NoRetryReason::AttemptsExhausted),
                "max_attempts still applies"
            );
            let gone = RetryFacts {
                client_present: false,
                ..f
            };
            assert_eq!(
                p.decide(&gone),
                RetryVerdict::NoRetry(NoRetryReason::ClientGone)
            );
        }
    }
    for outcome in [
        AttemptOutcome::Transport,
        AttemptOutcome::PerTryTimeout,
        AttemptOutcome::Status(503),
    ] {
        assert!(!outcome.nothing_sent());
        let f = RetryFacts {
            method: "POST",
            outcome,
            ..retryable()
        };
        assert_eq!(
            p.decide(&f),
            RetryVerdict::NoRetry(NoRetryReason::MethodNotAllowed),
            "{outcome:?}"
        );
        let f = RetryFacts {
            body: BodyKind::Streaming,
            outcome,
            ..retryable()
        };
        assert_eq!(
            p.decide(&f),
            RetryVerdict::NoRetry(NoRetryReason::BodyNotReplayable),
            "{outcome:?}"
        );
    }
    assert_eq!(p.classify(AttemptOutcome::Refused), AttemptClass::Failure);
    assert_eq!(
        no_retry_response(AttemptOutcome::Refused),
        NoRetryResponse::Synthetic(502)
    );
}

/// C-RETRY-10: the backoff before retry k is below min(backoff_max, backoff_base × 2^(k−1)),
/// none before the first attempt or with `backoff_base` 0, and deterministic per seed.
#[test]
fn c_retry_10_backoff_caps_and_draws() {
    let p = RetryPolicy::default();
    let ms = Duration::from_millis;
    assert_eq!(p.backoff_cap(0), Duration::ZERO);
    let caps: Vec<Duration> = (1..=6).map(|k| p.backoff_cap(k)).collect();
    assert_eq!(caps, [ms(25), ms(50), ms(100), ms(200), ms(250), ms(250)]);
    assert_eq!(p.backoff_cap(u32::MAX), ms(250), "no overflow");
    let off = RetryPolicy::new(RetryParams {
        backoff_base: Duration::ZERO,
        backoff_max: Duration::ZERO,
        ..RetryParams::default()
    })
    .unwrap();
    let rng = &mut crate::rng::WyRand::new(1);
    assert_eq!(off.backoff(3, rng), Duration::ZERO);
    let err = RetryPolicy::new(RetryParams {
        backoff_base: ms(100),
        backoff_max: ms(50),
        ..RetryParams::default()
    })
    .unwrap_err();
    assert_eq!(err, RetryError::BackoffMax);
    assert_eq!(err.field(), "backoff_max");
    assert!(err.to_string().starts_with("backoff_max"));
}

proptest! {
    /// C-RETRY-10: every draw is inside its bounds, and a seed gives the same draws again.
    #[test]
    fn c_retry_10_backoff_is_within_bounds_and_deterministic(
        seed in any::<u64>(),
        base_ms in 0u64..100,
        extra_ms in 0u64..500,
        k in 1u32..8,
    ) {
        let p = RetryPolicy::new(RetryParams {
            backoff_base: Duration::from_millis(base_ms),
            backoff_max: Duration::from_millis(base_ms + extra_ms),
            ..RetryParams::default()
        })
        .unwrap();
        let cap = p.backoff_cap(k);
        prop_assert!(cap <= Duration::from_millis(base_ms + extra_ms));
        let mut a = crate::rng::WyRand::new(seed);
        let mut b = crate::rng::WyRand::new(seed);
        for _ in 0..16 {
            let d = p.backoff(k, &mut a);
            prop_assert!(d < cap || (cap.is_zero() && d.is_zero()), "{d:?} vs {cap:?}");
            prop_assert_eq!(d, p.backoff(k, &mut b));
        }
    }
}

/// A backend whose connections were all full at `max_conns_per_host` for the connect timeout:
/// nothing sent, so retried elsewhere for any method (C-RETRY-9), yet neutral for the
/// backend's breaker (it is busy, not broken), and `503` when no retry follows.
#[test]
fn c_retry_9_saturated_is_neutral_retried_and_503() {
    let p = policy();
    assert_eq!(p.classify(AttemptOutcome::Saturated), AttemptClass::Neutral);
    let f = RetryFacts {
        method: "POST",
        outcome: AttemptOutcome::Saturated,
        body: BodyKind::Streaming,
        ..retryable()
    };
    assert_eq!(p.decide(&f), RetryVerdict::Retry);
    assert_eq!(
        no_retry_response(AttemptOutcome::Saturated),
        NoRetryResponse::Synthetic(503)
    );
}
