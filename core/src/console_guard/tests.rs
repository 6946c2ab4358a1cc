use http::{HeaderMap, StatusCode};

use super::refusal;

fn req(host: Option<&str>, extra: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in host
        .map(|h| ("host", h))
        .into_iter()
        .chain(extra.iter().copied())
    {
        h.append(
            http::HeaderName::from_bytes(n.as_bytes()).expect("a name"),
            http::HeaderValue::from_str(v).expect("a value"),
        );
    }
    h
}

/// The status of the refusal of `headers` (origin-form target).
fn refusal_of(headers: &HeaderMap, api: bool) -> Option<StatusCode> {
    refusal(headers, None, api).map(|r| r.status)
}

/// C-MGMT-1, C-MGMT-2: the console adds the admin token, so it acts only for requests addressed
/// to it by address or as localhost (a DNS-rebinding page sends its own name) ...
#[test]
fn c_mgmt_1_a_request_for_another_host_name_is_refused() {
    for ok in [
        "127.0.0.1:3000",
        "[::1]:3000",
        "localhost:3000",
        "LOCALHOST",
        "10.1.2.3",
    ] {
        assert_eq!(refusal_of(&req(Some(ok), &[]), true), None, "{ok}");
    }
    assert_eq!(
        refusal_of(&req(None, &[]), true),
        None,
        "HTTP/1.0 without Host"
    );
    for bad in [
        "rebind.attacker.example:3000",
        "localhost.attacker.example",
        "x y",
        "",
    ] {
        let got = refusal_of(&req(Some(bad), &[]), true);
        assert_eq!(got, Some(StatusCode::MISDIRECTED_REQUEST), "{bad:?}");
        // The bundle's files too: nothing is served to a rebound name.
        let got = refusal_of(&req(Some(bad), &[]), false);
        assert_eq!(got, Some(StatusCode::MISDIRECTED_REQUEST), "{bad:?}");
    }
    let two = req(Some("127.0.0.1"), &[("host", "evil.example")]);
    assert_eq!(refusal_of(&two, false), Some(StatusCode::BAD_REQUEST));
    // An absolute-form target names the host too (`http://evil.example/api/...`).
    let absolute = req(Some("127.0.0.1:3000"), &[]);
    assert_eq!(
        refusal(&absolute, Some("evil.example"), true).map(|r| r.status),
        Some(StatusCode::MISDIRECTED_REQUEST)
    );
    assert_eq!(refusal(&absolute, Some("127.0.0.1:3000"), true), None);
}

/// ... and only API calls from its own page: another site's form post, `<img>` or fetch is
/// refused before the token is added.
#[test]
fn c_mgmt_2_a_cross_site_api_call_is_refused_before_the_token_is_added() {
    let h = Some("127.0.0.1:3000");
    assert_eq!(
        refusal_of(&req(h, &[("sec-fetch-site", "same-origin")]), true),
        None
    );
    assert_eq!(
        refusal_of(&req(h, &[("origin", "http://127.0.0.1:3000")]), true),
        None
    );
    for (n, v) in [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("sec-fetch-site", "none"),
        ("origin", "http://evil.example"),
        ("origin", "null"),
        ("origin", "http://127.0.0.1:3001"),
    ] {
        let got = refusal_of(&req(h, &[(n, v)]), true);
        assert_eq!(got, Some(StatusCode::FORBIDDEN), "{n}: {v}");
    }
    // A link followed from elsewhere still opens the page itself.
    assert_eq!(
        refusal_of(&req(h, &[("sec-fetch-site", "cross-site")]), false),
        None
    );
}

/// C-MGMT-1 (refined, docs/console.md): beyond loopback the console needs `--allow-remote` or
/// its own token; the refusal names the safe options.
#[test]
fn listening_beyond_loopback_needs_a_protection() {
    let at = |s: &str| s.parse::<std::net::SocketAddr>().expect("addr");
    for local in [
        "127.0.0.1:3000",
        "127.0.0.2:0",
        "[::1]:3000",
        "[::ffff:127.0.0.1]:3000",
    ] {
        assert_eq!(
            super::listen_refusal(at(local), false, false),
            None,
            "{local}"
        );
    }
    for remote in ["0.0.0.0:3000", "[::]:3000", "192.0.2.1:3000"] {
        let why = super::listen_refusal(at(remote), false, false).expect(remote);
        for option in ["loopback", "--auth-token-env", "--allow-remote"] {
            assert!(why.contains(option), "{why}");
        }
        assert_eq!(super::listen_refusal(at(remote), true, false), None);
        assert_eq!(super::listen_refusal(at(remote), false, true), None);
    }
}

/// The console's own bearer token: exactly one `Authorization: Bearer <token>`.
#[test]
fn the_console_token_is_a_bearer_token() {
    let token = weir_core_secret("console-s3cret");
    let ok = |v: &[&str]| {
        let mut h = HeaderMap::new();
        for v in v {
            h.append(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        super::authenticated(&h, &token)
    };
    assert!(ok(&["Bearer console-s3cret"]));
    assert!(ok(&["bearer console-s3cret"]));
    assert!(!ok(&[]));
    assert!(!ok(&["Bearer console-s3cre"]));
    assert!(!ok(&["Basic console-s3cret"]));
    assert!(!ok(&["Bearer console-s3cret", "Bearer console-s3cret"]));
}

fn weir_core_secret(v: &str) -> crate::config::Secret {
    crate::config::Secret::new(v)
}
