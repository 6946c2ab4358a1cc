use http::{HeaderMap, HeaderValue};

use super::*;

fn hosts(values: &[&'static str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(http::header::HOST, HeaderValue::from_static(v));
    }
    h
}

fn agrees(authority: &str, https: bool, host: &[&'static str]) -> bool {
    host_agrees(
        &hosts(host),
        Authority {
            https,
            value: authority,
        },
    )
}

/// RFC 9113 §8.3.1 (C-PATH-12 refined): `host` must name `:authority`'s entity; equal after
/// case folding and default ports.
#[test]
fn host_and_authority_agree_after_scheme_based_normalisation() {
    assert!(agrees("example.com", false, &[]), "no host field");
    assert!(agrees("example.com", false, &["example.com"]));
    assert!(agrees("Example.COM", false, &["example.com"]), "case");
    assert!(agrees("example.com", false, &["example.com:80"]), "http default");
    assert!(agrees("example.com:443", true, &["EXAMPLE.com"]), "https default");
    assert!(agrees("example.com:", false, &["example.com"]), "empty port");
    assert!(agrees("[::1]:8080", false, &["[::1]:8080"]));
    assert!(agrees("a:8080", false, &["a:8080", "A:8080"]), "two equal");

    assert!(!agrees("example.com", false, &["evil.example"]));
    assert!(!agrees("example.com", false, &["example.com:8080"]), "port");
    assert!(!agrees("example.com", true, &["example.com:80"]), "80 is not https's");
    assert!(!agrees("a", false, &["a", "b"]), "one of two differs");
    assert!(!agrees("a", false, &["user@a"]), "userinfo");
    assert!(!agrees("a", false, &["a:99999"]), "port range");
    assert!(!agrees("a", false, &[""]), "empty host");
    assert!(!agrees("[::1]", false, &["[::2]"]));
}

