use super::*;
use crate::response::{ClientError, SyntheticResponse, header};

#[test]
fn trace_is_refused_with_405_and_allow_unless_configured() {
    assert_eq!(
        check(&Method::TRACE, false).map_err(ClientError::from),
        Err(ClientError::MethodNotAllowed)
    );
    assert_eq!(check(&Method::TRACE, true), Ok(()));
    let r = SyntheticResponse::client_error(&ClientError::MethodNotAllowed, "rid");
    assert_eq!(r.status(), 405);
    let allow: Vec<String> = r
        .headers()
        .filter(|(n, _)| *n == header::ALLOW)
        .map(|(_, v)| v.to_string())
        .collect();
    assert_eq!(allow, [ALLOW]);
    assert!(!ALLOW.contains("TRACE"));
    let http = r.to_http();
    assert_eq!(http.status(), 405);
    assert!(http.headers().contains_key("allow"));
}

#[test]
fn every_other_method_is_proxied() {
    for m in [
        "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "PROPFIND", "trace",
    ] {
        let method = Method::from_bytes(m.as_bytes()).expect("a method token");
        // Methods are case-sensitive (RFC 9110 §9.1): `trace` is an extension method.
        assert_eq!(check(&method, false), Ok(()), "{m}");
    }
}
