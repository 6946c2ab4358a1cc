use super::*;

/// C-PATH-5: the fast path (client target reused as is) equals core's join for a backend
/// without a path prefix, byte for byte, for awkward targets too.
#[test]
fn c_path_5_fast_path_matches_core() {
    let base = BackendBase::parse("http://127.0.0.1:9000").expect("base");
    let prefixed = BackendBase::parse("http://127.0.0.1:9000/base/").expect("base");
    for target in [
        "/",
        "/a/%2F/b?x=%2E%2e&y",
        "//double//slash",
        "/a/../b",
        "/%252F?q=1#frag",
        "/?",
    ] {
        let uri: Uri = target.parse().expect("uri");
        let fast = upstream_uri(&base, &Method::GET, &uri).expect("fast");
        let core = base
            .upstream_uri(
                &Method::GET,
                uri.path_and_query().map_or("/", |p| p.as_str()),
            )
            .expect("core");
        assert_eq!(
            fast.path_and_query().map(|p| p.as_str()),
            core.path_and_query().map(|p| p.as_str()),
            "{target}"
        );
        let joined = upstream_uri(&prefixed, &Method::GET, &uri).expect("joined");
        assert!(
            joined
                .path_and_query()
                .is_some_and(|p| p.as_str().starts_with("/base/")),
            "{target}"
        );
        assert!(joined.scheme().is_none() && joined.authority().is_none());
    }
    // Absolute-form (and HTTP/2's scheme + authority) become origin-form upstream.
    let abs: Uri = "http://client.example/p?q=1".parse().expect("uri");
    let up = upstream_uri(&base, &Method::GET, &abs).expect("abs");
    assert_eq!(up.to_string(), "/p?q=1");
}
