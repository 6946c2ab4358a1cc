use http::{HeaderMap, HeaderValue};

use super::*;
use crate::flow::{AttemptError, Failure};
use crate::response::{ClientError, Reject, SyntheticResponse, Text};
use crate::retry::NoRetryReason;
use crate::select::NoBackend;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(*n, HeaderValue::from_static(v));
    }
    h
}

#[test]
fn c_grpc_3_a_grpc_request_is_told_by_its_content_type() {
    assert!(is_grpc(&headers(&[("content-type", "application/grpc")])));
    assert!(is_grpc(&headers(&[(
        "content-type",
        "application/grpc+proto"
    )])));
    assert!(is_grpc(&headers(&[(
        "content-type",
        "Application/GRPC-web"
    )])));
    assert!(!is_grpc(&headers(&[("content-type", "application/json")])));
    assert!(!is_grpc(&headers(&[("content-type", "application/grp")])));
    assert!(!is_grpc(&headers(&[])));
}

#[test]
fn c_grpc_3_weir_statuses_map_to_grpc_codes() {
    assert_eq!(code_for(503), Code::Unavailable);
    assert_eq!(code_for(502), Code::Unavailable);
    assert_eq!(code_for(429), Code::ResourceExhausted);
    assert_eq!(code_for(504), Code::DeadlineExceeded);
    assert_eq!(code_for(408), Code::DeadlineExceeded);
    for malformed in [400, 405, 414, 431] {
        assert_eq!(code_for(malformed), Code::Internal, "{malformed}");
    }
    assert_eq!(Code::Unavailable.as_u8(), 14);
    assert_eq!(Code::ResourceExhausted.as_u8(), 8);
    assert_eq!(Code::DeadlineExceeded.as_u8(), 4);
    assert_eq!(Code::Internal.as_u8(), 13);
}

#[test]
fn c_grpc_3_message_is_percent_encoded_with_the_request_id() {
    let m = Message {
        message: "100% full: caf\u{e9}",
        request_id: "req-1",
    };
    assert_eq!(m.to_string(), "100%25 full: caf%C3%A9 (request id req-1)");
}

fn header<'a>(s: &'a SyntheticResponse<'_>, name: &str) -> Option<String> {
    s.headers()
        .find(|(n, _)| *n == name)
        .map(|(_, v): (&str, Text<'a>)| v.to_string())
}

#[test]
fn c_grpc_3_no_backend_is_a_trailers_only_unavailable() {
    let s =
        SyntheticResponse::reject(&Reject::NoBackend(NoBackend::NoHealthy), "rid-7").for_grpc(true);
    assert_eq!(s.status(), 200);
    assert_eq!(s.outcome_status(), 503);
    assert!(s.body().is_empty());
    assert_eq!(
        header(&s, "content-type").as_deref(),
        Some("application/grpc")
    );
    assert_eq!(header(&s, "grpc-status").as_deref(), Some("14"));
    assert_eq!(
        header(&s, "grpc-message").as_deref(),
        Some("no backend available: no_healthy_backend (request id rid-7)")
    );
    assert_eq!(header(&s, "x-request-id").as_deref(), Some("rid-7"));
    let http = s.to_http();
    assert_eq!(http.status(), 200);
    assert_eq!(http.headers()["grpc-status"], "14");
    assert!(http.body().is_empty());
}

#[test]
fn c_grpc_3_failures_and_client_errors_take_their_codes() {
    let timeout = Failure {
        status: 504,
        cause: AttemptError::PerTryTimeout,
        no_retry: NoRetryReason::AttemptsExhausted,
        backend: 0,
        attempts: 2,
        budget_exhausted: false,
        protection: None,
    };
    let s = SyntheticResponse::failure(&timeout, "r").for_grpc(true);
    assert_eq!(header(&s, "grpc-status").as_deref(), Some("4"));
    assert_eq!(header(&s, "x-balancer-attempts").as_deref(), Some("2"));
    let refused = Failure {
        status: 502,
        cause: AttemptError::Connect,
        no_retry: NoRetryReason::AttemptsExhausted,
        backend: 0,
        attempts: 1,
        budget_exhausted: false,
        protection: None,
    };
    let s = SyntheticResponse::failure(&refused, "r").for_grpc(true);
    assert_eq!(header(&s, "grpc-status").as_deref(), Some("14"));
    let s = SyntheticResponse::client_error(&ClientError::BodyUnreadable, "r").for_grpc(true);
    assert_eq!(header(&s, "grpc-status").as_deref(), Some("13"));
}

#[test]
fn c_grpc_3_the_json_form_is_unchanged_without_grpc() {
    let s =
        SyntheticResponse::reject(&Reject::NoBackend(NoBackend::NoHealthy), "r").for_grpc(false);
    assert_eq!(s.status(), 503);
    assert_eq!(
        header(&s, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(header(&s, "grpc-status"), None);
    assert!(s.body().contains("\"code\":503"));
}

#[test]
fn c_grpc_3_only_a_trailers_only_unavailable_counts_as_a_failure() {
    let unavailable = headers(&[("grpc-status", "14")]);
    assert!(trailers_only_unavailable(&unavailable, true));
    // The same head with a body to follow: its outcome is not known yet.
    assert!(!trailers_only_unavailable(&unavailable, false));
    assert!(!trailers_only_unavailable(
        &headers(&[("grpc-status", "0")]),
        true
    ));
    assert!(!trailers_only_unavailable(
        &headers(&[("grpc-status", "13")]),
        true
    ));
    assert!(!trailers_only_unavailable(&headers(&[]), true));
}

#[test]
fn c_grpc_2_a_backends_grpc_status_is_a_bounded_code() {
    for code in 0..=16u8 {
        assert_eq!(status_code(code.to_string().as_bytes()), code);
    }
    assert_eq!(status_code(b" 4 "), 4);
    for other in [&b"17"[..], b"99", b"-1", b"", b"ok", b"007", b"1 4", b"140"] {
        assert_eq!(status_code(other), UNKNOWN, "{other:?}");
    }
}
