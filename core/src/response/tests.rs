//! Tests of the response mapping: every outcome's status, headers and body (C-PATH-11, C-PATH-4,
//! C-LOAD-1, C-LOAD-3, C-RATE-1, C-MGMT-1..4).

use core::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::admission::Overloaded;
use crate::bulkhead::BulkheadFull;
use crate::flow::AttemptError;
use crate::h1::FramingError;
use crate::rate::{RateDecision, RateOutcome, StorageKind};
use crate::retry::NoRetryReason;

fn strings(r: &SyntheticResponse<'_>) -> Vec<(&'static str, String)> {
    r.headers().map(|(n, v)| (n, v.to_string())).collect()
}

fn json(r: &SyntheticResponse<'_>) -> serde_json::Value {
    serde_json::from_str(&r.body()).expect("the body is json")
}

fn denied() -> RateOutcome {
    RateOutcome {
        decision: RateDecision::Denied {
            retry_after: Duration::from_millis(1500),
        },
        limit: 100,
        remaining: 0,
        refill_per_second: 0.5,
        storage: StorageKind::Redis,
        degraded: true,
    }
}

fn failure(cause: AttemptError, status: u16, budget_exhausted: bool) -> Failure {
    Failure {
        status,
        cause,
        no_retry: NoRetryReason::AttemptsExhausted,
        backend: 0,
        attempts: 2,
        budget_exhausted,
        protection: budget_exhausted.then_some(ProtectionReason::RetryBudgetExhausted),
    }
}

/// Every outcome weir answers itself, with its expected status.
fn every_outcome() -> Vec<(SyntheticResponse<'static>, u16)> {
    let id = "abc-123";
    let mut all = vec![
        (
            SyntheticResponse::reject(&Reject::Overloaded(Overloaded::QueueFull), id),
            503,
        ),
        (
            SyntheticResponse::reject(&Reject::RateLimited(denied()), id),
            429,
        ),
        (
            SyntheticResponse::reject(&Reject::StoreUnavailable, id),
            503,
        ),
        (
            SyntheticResponse::reject(&Reject::BulkheadFull(BulkheadFull { limit: 4 }), id),
            503,
        ),
        (
            SyntheticResponse::failure(&failure(AttemptError::Connect, 502, false), id),
            502,
        ),
        (
            SyntheticResponse::failure(&failure(AttemptError::Transport, 502, true), id),
            502,
        ),
        (
            SyntheticResponse::failure(&failure(AttemptError::PerTryTimeout, 504, false), id),
            504,
        ),
        (
            SyntheticResponse::failure(&failure(AttemptError::InvalidResponse, 502, false), id),
            502,
        ),
    ];
    for nb in [
        NoBackend::EmptyPool,
        NoBackend::AllTried,
        NoBackend::NoHealthy,
        NoBackend::AllOpen,
        NoBackend::AllSaturated,
    ] {
        all.push((SyntheticResponse::reject(&Reject::NoBackend(nb), id), 503));
    }
    for (m, status) in [
        (ManagementError::Unauthorized, 401),
        (ManagementError::CrossSite, 403),
        (ManagementError::CsrfHeader, 403),
        (ManagementError::MutationsDisabled, 403),
        (ManagementError::UnsupportedMediaType, 415),
        (ManagementError::PayloadTooLarge, 413),
        (ManagementError::BadRequest, 400),
        (ManagementError::NotFound, 404),
        (
            ManagementError::MethodNotAllowed { allow: "GET, HEAD" },
            405,
        ),
    ] {
        all.push((SyntheticResponse::management(&m, id), status));
    }
    for (e, status) in [
        (ClientError::AsteriskWithoutOptions, 400),
        (ClientError::UnsupportedTarget, 400),
        (ClientError::BodyTimeout, 408),
        (ClientError::BodyUnreadable, 400),
        (ClientError::TargetTooLong, 414),
        (ClientError::NotReady(NotReady::NoBackendAvailable), 503),
        (ClientError::UnrequestedUpgrade, 502),
        (ClientError::Incomplete, 502),
        (ClientError::MethodNotAllowed, 405),
    ] {
        all.push((SyntheticResponse::client_error(&e, id), status));
    }
    for (e, status) in [
        (HeadError::Malformed("invalid header name"), 400),
        (HeadError::Framing(FramingError::HostMissing), 400),
        (HeadError::Target, 400),
        (HeadError::RequestLineTooLong, 414),
        (HeadError::HeadTooLarge, 431),
        (HeadError::TooManyHeaders, 431),
    ] {
        all.push((SyntheticResponse::refused_head(&e, id), status));
    }
    all
}

#[test]
fn c_path_11_every_synthetic_response_has_the_json_body_and_content_type() {
    for (r, status) in every_outcome() {
        assert_eq!(r.status(), status, "{r:?}");
        let body = json(&r);
        assert_eq!(body["code"], u64::from(status), "{body}");
        assert_eq!(body["message"], r.message());
        assert_eq!(body["request_id"], "abc-123");
        assert_eq!(body.as_object().map(|o| o.len()), Some(3), "{body}");
        let h = strings(&r);
        assert_eq!(h[0], (header::CONTENT_TYPE, "application/json".into()));
        assert_eq!(h[1], (header::REQUEST_ID, "abc-123".into()), "C-PATH-3");
        assert!(!r.message().is_empty());
        let http = r.to_http();
        assert_eq!(http.status().as_u16(), status);
        assert_eq!(
            http.headers().len(),
            h.len(),
            "every header is valid: {h:?}"
        );
        assert_eq!(http.body(), &r.body());
    }
}

#[test]
fn c_load_1_overload_has_retry_after_and_the_overloaded_header() {
    for why in [Overloaded::QueueFull, Overloaded::NoWait] {
        let reject = Reject::Overloaded(why);
        let r = SyntheticResponse::reject(&reject, "r");
        assert_eq!(r.status(), 503);
        let h = strings(&r);
        assert!(h.contains(&(header::RETRY_AFTER, "1".into())), "{h:?}");
        assert!(h.contains(&(header::OVERLOADED, "true".into())), "{h:?}");
        assert_eq!(reject.protection_reason(), Some(ProtectionReason::Overload));
    }
}

#[test]
fn c_rate_1_a_denied_request_gets_429_with_retry_after_and_the_rate_headers() {
    let reject = Reject::RateLimited(denied());
    let r = SyntheticResponse::reject(&reject, "r");
    assert_eq!(r.status(), 429);
    assert_eq!(
        reject.protection_reason(),
        Some(ProtectionReason::RateLimited)
    );
    let h = strings(&r);
    for expected in [
        ("x-ratelimit-limit", "100"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-refill-per-second", "0.5"),
        ("x-ratelimit-storage", "redis"),
        ("x-ratelimit-degraded", "true"),
        ("retry-after", "2"),
        ("ratelimit-policy", "\"default\";q=100;w=200"),
        ("ratelimit", "\"default\";r=0;t=2"),
    ] {
        assert!(
            h.contains(&(expected.0, expected.1.to_string())),
            "{expected:?} in {h:?}"
        );
    }
    assert_eq!(
        h.len(),
        10,
        "content-type, request id, six rate headers and the two IETF draft ones (C-RATE-8)"
    );
}

#[test]
fn c_load_3_rejections_count_their_protection_reason() {
    let cases = [
        (Reject::Overloaded(Overloaded::NoWait), Some("overload")),
        (Reject::RateLimited(denied()), Some("rate_limited")),
        (
            Reject::BulkheadFull(BulkheadFull { limit: 1 }),
            Some("bulkhead_full"),
        ),
        (
            Reject::NoBackend(NoBackend::AllSaturated),
            Some("backend_saturated"),
        ),
        (
            Reject::NoBackend(NoBackend::AdaptiveLimit),
            Some("backend_saturated"),
        ),
        (Reject::NoBackend(NoBackend::NoHealthy), None),
        (Reject::NoBackend(NoBackend::AllOpen), None),
        (Reject::StoreUnavailable, None),
    ];
    for (reject, label) in cases {
        assert_eq!(
            reject.protection_reason().map(ProtectionReason::as_str),
            label,
            "{reject:?}"
        );
    }
    let labels: Vec<&str> = ProtectionReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        labels,
        [
            "overload",
            "bulkhead_full",
            "backend_saturated",
            "retry_budget_exhausted",
            "rate_limited"
        ]
    );
}

#[test]
fn c_pool_5_no_backend_names_its_reason_in_the_message() {
    for nb in [
        NoBackend::EmptyPool,
        NoBackend::AllTried,
        NoBackend::NoHealthy,
        NoBackend::AllOpen,
        NoBackend::AllSaturated,
    ] {
        let r = SyntheticResponse::reject(&Reject::NoBackend(nb), "r");
        assert_eq!(r.status(), 503);
        assert!(r.message().ends_with(nb.as_str()), "{}", r.message());
        assert_eq!(strings(&r).len(), 2);
    }
}

/// C-LOAD-4: every backend at its adaptive limit: `503` at once, the reason in the message,
/// `Retry-After: 1`.
#[test]
fn c_load_4_adaptive_limit_is_a_503_with_its_reason_and_retry_after() {
    let r = SyntheticResponse::reject(&Reject::NoBackend(NoBackend::AdaptiveLimit), "r");
    assert_eq!(r.status(), 503);
    assert!(
        r.message().starts_with("adaptive concurrency limit"),
        "{}",
        r.message()
    );
    assert!(
        strings(&r).contains(&("retry-after", "1".to_owned())),
        "{:?}",
        strings(&r)
    );
    assert_eq!(json(&r)["code"], 503);
}

#[test]
fn c_retry_4_failures_are_502_or_504_with_attempts_and_no_backend_header() {
    let r = SyntheticResponse::failure(&failure(AttemptError::PerTryTimeout, 504, false), "r");
    let h = strings(&r);
    assert!(h.contains(&(header::ATTEMPTS, "2".into())));
    assert!(!h.iter().any(|(n, _)| *n == header::BACKEND));
    assert!(!h.iter().any(|(n, _)| *n == header::RETRY_BUDGET));
    let r = SyntheticResponse::failure(&failure(AttemptError::Connect, 502, true), "r");
    assert!(strings(&r).contains(&(header::RETRY_BUDGET, "exhausted".into())));
}

#[test]
fn c_path_4_delivered_and_upstream_headers() {
    let d = Deliver {
        backend: 1,
        attempt: 2,
        status: 503,
        budget_exhausted: false,
        protection: None,
    };
    let h: Vec<(&str, String)> = delivered_headers(
        &d,
        "api-2",
        &crate::request_id::RequestId::parse(b"req-9").unwrap(),
    )
    .map(|(n, v)| (n, v.to_string()))
    .collect();
    assert_eq!(
        h,
        [
            (header::BACKEND, "api-2".to_string()),
            (header::ATTEMPTS, "2".to_string()),
            (header::REQUEST_ID, "req-9".to_string()),
        ]
    );
    let exhausted = Deliver {
        budget_exhausted: true,
        protection: Some(ProtectionReason::RetryBudgetExhausted),
        ..d
    };
    let h: Vec<(&str, String)> = delivered_headers(
        &exhausted,
        "api-2",
        &crate::request_id::RequestId::parse(b"req-9").unwrap(),
    )
    .map(|(n, v)| (n, v.to_string()))
    .collect();
    assert_eq!(
        h.last(),
        Some(&(header::RETRY_BUDGET, "exhausted".to_string()))
    );
    let (name, value) = upstream_attempt_header("api-2");
    assert_eq!(
        (name, value.to_string().as_str()),
        ("x-balancer-backend-attempt", "api-2")
    );
}

#[test]
fn c_mgmt_2_management_errors_are_not_cached_and_carry_their_extras() {
    let r = SyntheticResponse::management(&ManagementError::Unauthorized, "r");
    let h = strings(&r);
    assert!(h.contains(&(header::CACHE_CONTROL, "no-store".into())));
    assert!(h.contains(&(header::WWW_AUTHENTICATE, "Bearer".into())));
    let r = SyntheticResponse::management(
        &ManagementError::MethodNotAllowed { allow: "GET, HEAD" },
        "r",
    );
    assert!(strings(&r).contains(&(header::ALLOW, "GET, HEAD".into())));
}

/// C-PATH-12's refusals (`Connection: close`) are the HTTP/1 codec's own answers; the
/// engine's client errors leave the connection to the adapter's keep-alive rules.
#[test]
fn client_errors_do_not_close_the_connection_themselves() {
    for e in [
        ClientError::BodyTimeout,
        ClientError::NotReady(NotReady::ShuttingDown),
    ] {
        let r = SyntheticResponse::client_error(&e, "r");
        assert!(
            !strings(&r).iter().any(|(n, _)| *n == header::CONNECTION),
            "{e:?}"
        );
    }
}

#[test]
fn header_names_are_valid_lower_case_http_names() {
    for name in [
        header::BACKEND,
        header::ATTEMPTS,
        header::REQUEST_ID,
        header::RETRY_BUDGET,
        header::BACKEND_ATTEMPT,
        header::OVERLOADED,
        header::RETRY_AFTER,
        header::CONTENT_TYPE,
        header::CACHE_CONTROL,
        header::ALLOW,
        header::WWW_AUTHENTICATE,
        header::CONNECTION,
    ] {
        assert!(
            http::HeaderName::from_bytes(name.as_bytes()).is_ok(),
            "{name}"
        );
        assert_eq!(name, name.to_ascii_lowercase());
    }
}

#[test]
fn an_invalid_request_id_is_escaped_in_the_body_and_left_out_of_the_headers() {
    let nasty = "a\"b\\c\n\u{7f}";
    let r = SyntheticResponse::reject(&Reject::StoreUnavailable, nasty);
    assert_eq!(json(&r)["request_id"], nasty);
    let http = r.to_http();
    assert!(http.headers().get(header::REQUEST_ID).is_none());
    assert_eq!(
        http.headers().get(header::CONTENT_TYPE).unwrap(),
        "application/json"
    );
}

proptest! {
    /// C-PATH-11: for any request id and any rate outcome, the body is valid JSON with exactly
    /// `code`, `message` and `request_id`, and `code` equals the status.
    #[test]
    fn c_path_11_body_is_always_valid_json(
        id in ".{0,64}",
        remaining in 0u64..1000,
        retry_ms in 0u64..100_000,
        refill in 0.001f64..1e6,
    ) {
        let outcome = RateOutcome {
            decision: RateDecision::Denied { retry_after: Duration::from_millis(retry_ms) },
            limit: 1000,
            remaining,
            refill_per_second: refill,
            storage: StorageKind::Local,
            degraded: false,
        };
        let r = SyntheticResponse::reject(&Reject::RateLimited(outcome), &id);
        let body: serde_json::Value = serde_json::from_str(&r.body()).unwrap();
        prop_assert_eq!(&body["code"], &serde_json::Value::from(429u16));
        prop_assert_eq!(&body["request_id"], &serde_json::Value::from(id.as_str()));
        prop_assert_eq!(body.as_object().map(|o| o.len()), Some(3));
        let retry_after: Vec<String> = r
            .headers()
            .filter(|(n, _)| *n == header::RETRY_AFTER)
            .map(|(_, v)| v.to_string())
            .collect();
        prop_assert_eq!(retry_after.len(), 1);
        prop_assert!(retry_after[0].parse::<u64>().unwrap() >= 1, "C-RATE-1: at least 1");
    }
}

#[test]
fn c_retry_11_weirs_own_429_and_gate_and_bulkhead_503_carry_retry_after() {
    let id = "abc-123";
    let retry_after = |r: &SyntheticResponse<'_>| {
        strings(r)
            .into_iter()
            .find(|(n, _)| *n == "retry-after")
            .map(|(_, v)| v)
    };
    let full = SyntheticResponse::reject(&Reject::BulkheadFull(BulkheadFull { limit: 4 }), id);
    assert_eq!(retry_after(&full).as_deref(), Some("1"));
    let gate = SyntheticResponse::reject(&Reject::Overloaded(Overloaded::QueueFull), id);
    assert_eq!(retry_after(&gate).as_deref(), Some("1"));
    let limited = SyntheticResponse::reject(&Reject::RateLimited(denied()), id);
    let secs: u64 = retry_after(&limited).unwrap().parse().unwrap();
    assert!(secs >= 1);
    // No backend: nothing says when one will be back.
    let none = SyntheticResponse::reject(&Reject::NoBackend(NoBackend::NoHealthy), id);
    assert_eq!(retry_after(&none), None);
}
