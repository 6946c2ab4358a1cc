use super::*;
use crate::time::Instant;

#[test]
fn c_rate_5_parsing_and_defaults() {
    assert_eq!(FailureMode::default(), FailureMode::LocalFallback);
    for m in [
        FailureMode::FailOpen,
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
    ] {
        assert_eq!(m.as_str().parse::<FailureMode>(), Ok(m));
        assert_eq!(m.to_string(), m.as_str());
    }
    assert_eq!(
        "fail_open".parse::<FailureMode>(),
        Err(PolicyError::FailureMode("fail_open".into()))
    );
    assert_eq!(
        PolicyError::FailureMode("x".into()).to_string(),
        "failure_mode must be fail-open, fail-closed or local-fallback, got \"x\""
    );
    for k in [
        StorageKind::Local,
        StorageKind::Redis,
        StorageKind::Postgres,
    ] {
        assert_eq!(k.label().parse::<StorageKind>(), Ok(k));
    }
    assert!("disabled".parse::<StorageKind>().is_err());
    assert_eq!(StorageKind::Disabled.label(), "disabled");
    assert!(StorageKind::Redis.is_shared() && !StorageKind::Local.is_shared());
}

#[test]
fn c_rate_5_store_failure_decisions() {
    let open = on_store_failure(FailureMode::FailOpen);
    assert_eq!(open, FailureDecision::AllowDegraded);
    assert_eq!(
        (open.status(), open.ready(), open.degraded()),
        (None, true, true)
    );
    let closed = on_store_failure(FailureMode::FailClosed);
    assert_eq!(closed, FailureDecision::Reject);
    assert_eq!(
        (closed.status(), closed.ready(), closed.degraded()),
        (Some(503), false, false)
    );
    let local = on_store_failure(FailureMode::LocalFallback);
    assert_eq!(local, FailureDecision::DecideLocally);
    assert_eq!(
        (local.status(), local.ready(), local.degraded()),
        (None, true, true)
    );
}

#[test]
fn c_rate_1_allowed_headers() {
    let b = BucketParams::new(100, 100.0).unwrap();
    let (take, _) = b.take(0, Instant::from_secs(1));
    let o = RateOutcome::from_take(take, &b, 100.0, StorageKind::Redis, false);
    assert!(o.is_allowed());
    assert_eq!(o.status(), None);
    assert_eq!(
        o.header_strings(),
        vec![
            ("x-ratelimit-limit", "100".to_string()),
            ("x-ratelimit-remaining", "99".to_string()),
            ("x-ratelimit-refill-per-second", "100".to_string()),
            ("x-ratelimit-storage", "redis".to_string()),
            ("ratelimit-policy", "\"default\";q=100;w=1".to_string()),
            ("ratelimit", "\"default\";r=99;t=1".to_string()),
        ]
    );
}

#[test]
fn c_rate_8_draft_header_values() {
    // Capacity 5 refilled at 0.1/s: a full refill takes 50 s, a token 10 s.
    let b = BucketParams::new(5, 0.1).unwrap();
    let now = Instant::from_secs(100);
    let mut tat = 0;
    let mut seen = Vec::new();
    for _ in 0..6 {
        let (take, next) = b.take(tat, now);
        tat = next;
        let o = RateOutcome::from_take(take, &b, 0.1, StorageKind::Local, false);
        let h = o.header_strings();
        let get = |name: &str| h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        assert_eq!(
            get("ratelimit-policy").as_deref(),
            Some("\"default\";q=5;w=50")
        );
        seen.push(get("ratelimit").unwrap());
    }
    assert_eq!(
        seen,
        [
            "\"default\";r=4;t=10",
            "\"default\";r=3;t=10",
            "\"default\";r=2;t=10",
            "\"default\";r=1;t=10",
            "\"default\";r=0;t=10",
            // Denied: t is the Retry-After, the time until the next whole token.
            "\"default\";r=0;t=10",
        ]
    );
    // A window below a second rounds up, never to zero.
    let fast = BucketParams::new(3, 1000.0).unwrap();
    let (take, _) = fast.take(0, now);
    let o = RateOutcome::from_take(take, &fast, 1000.0, StorageKind::Local, false);
    assert_eq!((o.window_secs(), o.next_token_secs()), (1, 1));
    assert_eq!(
        HeaderText::Draft(Draft::Limit {
            remaining: 7,
            next_secs: 2
        })
        .to_string(),
        "\"default\";r=7;t=2"
    );
}

#[test]
fn c_rate_1_denied_degraded_headers() {
    let b = BucketParams::new(1, 0.4).unwrap();
    let now = Instant::from_secs(1);
    let (_, tat) = b.take(0, now);
    let (take, _) = b.take(tat, now);
    // Local fallback decided (C-RATE-5): storage local, degraded.
    let o = RateOutcome::from_take(take, &b, 0.4, StorageKind::Local, true);
    assert_eq!(o.status(), Some(429));
    assert_eq!(o.retry_after_secs(), Some(3)); // 2.5 s rounded up
    assert_eq!(
        o.header_strings(),
        vec![
            ("x-ratelimit-limit", "1".to_string()),
            ("x-ratelimit-remaining", "0".to_string()),
            ("x-ratelimit-refill-per-second", "0.4".to_string()),
            ("x-ratelimit-storage", "local".to_string()),
            ("x-ratelimit-degraded", "true".to_string()),
            ("retry-after", "3".to_string()),
            ("ratelimit-policy", "\"default\";q=1;w=3".to_string()),
            ("ratelimit", "\"default\";r=0;t=3".to_string()),
        ]
    );
}

#[test]
fn c_rate_5_fail_open_outcome() {
    let b = BucketParams::new(10, 5.0).unwrap();
    let o = RateOutcome::fail_open(&b, 5.0, StorageKind::Postgres);
    assert!(o.is_allowed() && o.degraded);
    assert_eq!(o.remaining, 9);
    let h = o.header_strings();
    assert!(h.contains(&("x-ratelimit-storage", "postgres".into())));
    assert!(h.contains(&("x-ratelimit-degraded", "true".into())));
    assert!(!h.iter().any(|(n, _)| *n == "retry-after"));
}

#[test]
fn header_names_are_lower_case_tokens() {
    for n in [
        header::LIMIT,
        header::REMAINING,
        header::REFILL_PER_SECOND,
        header::STORAGE,
        header::DEGRADED,
        header::RETRY_AFTER,
        header::POLICY,
        header::RATELIMIT,
    ] {
        assert!(
            n.bytes().all(|c| c.is_ascii_lowercase() || c == b'-'),
            "{n}"
        );
    }
}

#[test]
fn c_rate_8_dry_run_lets_a_denial_through_without_retry_after() {
    let b = BucketParams::new(1, 0.5).unwrap();
    let now = Instant::from_secs(1);
    let (allowed, tat) = b.take(0, now);
    let allowed = RateOutcome::from_take(allowed, &b, 0.5, StorageKind::Local, false);
    assert_eq!(
        allowed.let_through(),
        allowed,
        "an allowed outcome stays as it is"
    );
    let (denied, _) = b.take(tat, now);
    let denied = RateOutcome::from_take(denied, &b, 0.5, StorageKind::Local, false);
    let through = denied.let_through();
    assert!(through.is_allowed() && through.status().is_none());
    let h = through.header_strings();
    assert!(!h.iter().any(|(n, _)| *n == "retry-after"));
    assert!(h.contains(&("x-ratelimit-remaining", "0".into())));
    assert!(h.contains(&("ratelimit", "\"default\";r=0;t=2".into())));
}
