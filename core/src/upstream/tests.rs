//! Tests for upstream and probe URIs (C-PATH-5, C-HEALTH-1).

use http::Method;
use proptest::prelude::*;

use super::*;

fn base(url: &str) -> BackendBase {
    BackendBase::parse(url).expect("test backend url")
}

fn pq(b: &BackendBase, method: &Method, target: &str) -> Result<String, UpstreamUriError> {
    b.upstream_uri(method, target).map(|u| {
        assert_eq!(u.scheme(), Some(b.scheme()));
        assert_eq!(u.authority(), Some(b.authority()));
        u.path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default()
    })
}

#[test]
fn c_path_5_join_table() {
    let get = Method::GET;
    let cases: &[(&str, &str, &str)] = &[
        ("http://b:8080/base", "/x", "/base/x"),
        ("http://b:8080/base/", "/x", "/base/x"),
        ("http://b:8080/base//", "/x", "/base/x"),
        ("http://b:8080", "/x", "/x"),
        ("http://b:8080/", "/x", "/x"),
        ("http://b:8080/base", "/", "/base/"),
        ("http://b:8080", "/", "/"),
        ("http://b/base", "/a%2Fb", "/base/a%2Fb"),
        ("http://b/base", "/a/%2E%2E/b", "/base/a/%2E%2E/b"),
        ("http://b/base", "/%252F", "/base/%252F"),
        ("http://b/base", "/a/../b/./c", "/base/a/../b/./c"),
        ("http://b/base", "//x", "/base//x"),
        ("http://b/base", "/A/B", "/base/A/B"),
        (
            "http://b/base",
            "/x?a=1&b=%20&c=/d?e",
            "/base/x?a=1&b=%20&c=/d?e",
        ),
        ("http://b/base", "/x?", "/base/x?"),
        ("http://b/base", "/?q", "/base/?q"),
        ("http://b/b%2Fase", "/x", "/b%2Fase/x"),
        ("http://b/base", "/caf\u{e9}", "/base/caf\u{e9}"),
        ("http://b/base", "/{\"j\":1}", "/base/{\"j\":1}"),
        ("http://b/base", "/x#frag", "/base/x"),
        // Absolute-form: only path and query are used.
        ("http://b/base", "http://other:1/x?y", "/base/x?y"),
        ("http://b/base", "HTTPS://other/x", "/base/x"),
        ("http://b/base", "http://other", "/base/"),
        ("http://b/base", "http://other?q=1", "/base/?q=1"),
        ("http://b", "http://other?q=1", "/?q=1"),
    ];
    for (url, target, want) in cases {
        assert_eq!(
            pq(&base(url), &get, target).as_deref(),
            Ok(*want),
            "{url} + {target}"
        );
    }
}

#[test]
fn c_path_5_asterisk_and_unsupported_forms() {
    let root = base("http://b:8080");
    let pre = base("https://b/base/");
    assert_eq!(pq(&root, &Method::OPTIONS, "*").as_deref(), Ok("*"));
    assert_eq!(pq(&pre, &Method::OPTIONS, "*").as_deref(), Ok("/base"));
    assert_eq!(
        pq(&root, &Method::GET, "*"),
        Err(UpstreamUriError::AsteriskWithoutOptions)
    );
    for target in ["host:443", "", "x/y", "ftp://h/x", "http:///x", "?q"] {
        assert_eq!(
            pq(&root, &Method::GET, target),
            Err(UpstreamUriError::UnsupportedTarget),
            "{target:?}"
        );
    }
    assert_eq!(
        pq(&root, &Method::GET, "/a b"),
        Err(UpstreamUriError::Invalid)
    );
    assert_eq!(
        pq(&root, &Method::GET, "/a\u{7f}"),
        Err(UpstreamUriError::Invalid)
    );
    let long = format!("/{}", "a".repeat(MAX_PATH_AND_QUERY_BYTES));
    assert_eq!(
        pq(&root, &Method::GET, &long),
        Err(UpstreamUriError::TooLong)
    );
    let just = format!("/{}", "a".repeat(MAX_PATH_AND_QUERY_BYTES - 1));
    assert_eq!(
        pq(&root, &Method::GET, &just).map(|s| s.len()),
        Ok(MAX_PATH_AND_QUERY_BYTES)
    );
    assert!(upstream_uri(&root, &Method::GET, "/x").is_ok());
}

#[test]
fn c_path_5_backend_url_table() {
    let ok: &[(&str, &str, &str, &str)] = &[
        ("http://b:8080/base", "http", "b:8080", "/base"),
        ("HTTPS://B.example/", "https", "B.example", ""),
        ("http://[::1]:9000/a/b/", "http", "[::1]:9000", "/a/b"),
        ("http://10.0.0.1", "http", "10.0.0.1", ""),
    ];
    for (url, scheme, authority, prefix) in ok {
        let b = base(url);
        assert_eq!(
            (b.scheme().as_str(), b.authority().as_str(), b.path_prefix()),
            (*scheme, *authority, *prefix),
            "{url}"
        );
    }
    let bad: &[(&str, BackendUrlError)] = &[
        ("b:8080", BackendUrlError::Invalid),
        ("/base", BackendUrlError::Invalid),
        ("ftp://b/x", BackendUrlError::Scheme),
        ("http://u:p@b/x", BackendUrlError::UserInfo),
        ("http://b/x?q=1", BackendUrlError::QueryOrFragment),
        ("http://b/x?", BackendUrlError::QueryOrFragment),
        ("http://b/x#f", BackendUrlError::QueryOrFragment),
        ("http://b x/", BackendUrlError::Invalid),
        ("", BackendUrlError::Invalid),
    ];
    for (url, want) in bad {
        assert_eq!(
            BackendBase::parse(url).as_ref().map_err(|e| *e).err(),
            Some(*want),
            "{url}"
        );
        assert!(!want.to_string().is_empty());
    }
}

/// C-HEALTH-1: the probe is the backend URL's path joined with `health_check.path`.
#[test]
fn c_health_1_probe_uri() {
    let cases: &[(&str, &str, &str)] = &[
        ("http://b:8080/base", "/health", "http://b:8080/base/health"),
        (
            "http://b:8080/base/",
            "/health",
            "http://b:8080/base/health",
        ),
        ("http://b:8080", "/health", "http://b:8080/health"),
        ("https://b", "health", "https://b/health"),
        (
            "http://b/base",
            "/health?full=1",
            "http://b/base/health?full=1",
        ),
        ("http://b/base", "/", "http://b/base/"),
    ];
    for (url, path, want) in cases {
        assert_eq!(
            base(url).probe_uri(path).map(|u| u.to_string()).as_deref(),
            Ok(*want)
        );
    }
    assert_eq!(
        base("http://b").probe_uri("/a b"),
        Err(UpstreamUriError::Invalid)
    );
}

/// Bytes the `http` crate keeps verbatim (RFC 3986 pchar and `/`, plus the bytes it tolerates:
/// `"{}|^\[]` in a path, `` `{}|^\[] `` in a query), and `%` escapes from the strategy.
const PATH_CHARS: &str = "[A-Za-z0-9._~!$&'()*+,;=:@/\"{}|^\\\\\\[\\]-]";
const QUERY_CHARS: &str = "[A-Za-z0-9._~!$&'()*+,;=:@/?{}|^`\\\\\\[\\]-]";

fn escape() -> impl Strategy<Value = String> {
    prop_oneof![
        "%[0-9A-Fa-f]{2}",
        Just("%2F".to_owned()),
        Just("%2f".to_owned()),
        Just("%2E".to_owned()),
        Just("%252F".to_owned()),
        Just("%".to_owned()),
        Just("..".to_owned()),
        Just("é".to_owned()),
    ]
}

fn piece(chars: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![4 => chars.prop_map(|s: String| s), 1 => escape()],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

fn origin_target() -> impl Strategy<Value = (String, Option<String>)> {
    (piece(PATH_CHARS), prop::option::of(piece(QUERY_CHARS)))
        .prop_map(|(path, query)| (format!("/{path}"), query))
}

fn backend() -> impl Strategy<Value = (String, String)> {
    (
        prop::collection::vec("[a-z0-9%._-]{1,6}", 0..3),
        prop::sample::select(vec!["", "/", "//"]),
    )
        .prop_map(|(segments, trailing)| {
            let prefix: String = segments.iter().map(|s| format!("/{s}")).collect();
            (format!("http://backend:8080{prefix}{trailing}"), prefix)
        })
}

proptest! {
    /// C-PATH-5: the upstream path and query is the backend's prefix followed by the client's
    /// raw target, byte for byte; the query is unchanged.
    #[test]
    fn c_path_5_path_and_query_are_kept_byte_for_byte(
        (url, prefix) in backend(),
        (path, query) in origin_target(),
    ) {
        let target = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        let b = BackendBase::parse(&url).expect("generated backend url");
        prop_assert_eq!(b.path_prefix(), prefix.as_str());
        let uri = b.upstream_uri(&Method::GET, &target);
        prop_assert!(uri.is_ok(), "{:?}: {:?}", target, uri);
        let uri = uri.expect("checked above");
        let pq = uri.path_and_query().expect("path");
        prop_assert_eq!(pq.as_str(), format!("{prefix}{target}"));
        prop_assert_eq!(uri.path(), format!("{prefix}{path}"));
        prop_assert_eq!(uri.query(), query.as_deref());
        prop_assert_eq!(uri.to_string(), format!("http://backend:8080{prefix}{target}"));
        // The absolute form of the same target gives the same upstream URI.
        let absolute = format!("http://client.example{target}");
        prop_assert_eq!(b.upstream_uri(&Method::GET, &absolute).expect("valid"), uri);
    }

    /// C-PATH-5: arbitrary strings never panic; a success always starts with the prefix.
    #[test]
    fn c_path_5_arbitrary_targets_never_panic(target in "\\PC{0,40}", (url, prefix) in backend()) {
        let b = BackendBase::parse(&url).expect("generated backend url");
        if let Ok(uri) = b.upstream_uri(&Method::OPTIONS, &target) {
            let pq = uri.path_and_query().expect("path").as_str().to_owned();
            prop_assert!(pq.starts_with(&prefix) || pq == "*", "{}", pq);
        }
    }
}
