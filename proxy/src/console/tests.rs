use super::*;
use weir_core::config::MapSecrets;

#[test]
fn token_from_env_wins_over_the_file() {
    let s = MapSecrets::new()
        .with_env(TOKEN_ENV, "from-env")
        .with_env("BALANCER_ADMIN_TOKEN_FILE", "/nope");
    assert_eq!(
        token_from(&s, TOKEN_ENV).expect("ok").as_deref(),
        Some("from-env")
    );
    assert_eq!(token_from(&MapSecrets::new(), TOKEN_ENV).expect("ok"), None);
    let missing = MapSecrets::new().with_env("BALANCER_ADMIN_TOKEN_FILE", "/nope");
    let err = token_from(&missing, TOKEN_ENV).expect_err("unreadable file");
    assert!(err.contains("BALANCER_ADMIN_TOKEN_FILE"), "{err}");
}

#[test]
fn the_upstream_debug_never_shows_the_token() {
    let u = Upstream {
        addr: "127.0.0.1:9090".parse().expect("addr"),
        token: Some("s3cret-token".to_owned()),
    };
    let shown = format!("{u:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn content_types_of_the_bundle() {
    assert_eq!(content_type("/index.html"), "text/html; charset=utf-8");
    assert_eq!(
        content_type("/assets/index-abc.js"),
        "text/javascript; charset=utf-8"
    );
    assert_eq!(content_type("/assets/x.wasm"), "application/wasm");
    assert_eq!(content_type("/x"), "application/octet-stream");
}

#[test]
fn files_answer_get_only_and_unknown_paths_404() {
    let r = file(&Method::POST, "/");
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let r = file(&Method::GET, "/no-such-file.txt");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = file(&Method::GET, "/");
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn secure_headers_carry_the_csp() {
    let mut h = HeaderMap::new();
    secure(&mut h);
    let csp = h["content-security-policy"].to_str().expect("ascii");
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
}

#[test]
fn the_openapi_document_is_json_and_names_every_management_endpoint() {
    let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("valid JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    for p in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/dashboard/status",
        "/api/dashboard/request",
        "/api/dashboard/backends",
        "/api/dashboard/backends/{id}",
        "/api/dashboard/backends/{id}/drain",
        "/api/dashboard/limit",
        "/api/dashboard/config",
        OPENAPI_PATH,
    ] {
        assert!(paths.contains_key(p), "{p} is documented");
    }
    assert!(is_openapi(&Method::GET, OPENAPI_PATH));
    assert!(!is_openapi(&Method::POST, OPENAPI_PATH));
}

fn req(host: Option<&str>, extra: &[(&str, &str)]) -> Request<()> {
    let mut b = Request::builder().uri("/api/dashboard/status");
    if let Some(h) = host {
        b = b.header("host", h);
    }
    for (n, v) in extra {
        b = b.header(*n, *v);
    }
    b.body(()).expect("a request")
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
        assert_eq!(refusal(&req(Some(ok), &[]), true), None, "{ok}");
    }
    assert_eq!(
        refusal(&req(None, &[]), true),
        None,
        "HTTP/1.0 without Host"
    );
    for bad in [
        "rebind.attacker.example:3000",
        "localhost.attacker.example",
        "x y",
        "",
    ] {
        let got = refusal(&req(Some(bad), &[]), true).map(|(s, _)| s);
        assert_eq!(got, Some(StatusCode::MISDIRECTED_REQUEST), "{bad:?}");
        // The bundle's files too: nothing is served to a rebound name.
        let got = refusal(&req(Some(bad), &[]), false).map(|(s, _)| s);
        assert_eq!(got, Some(StatusCode::MISDIRECTED_REQUEST), "{bad:?}");
    }
    let two = Request::builder()
        .uri("/")
        .header("host", "127.0.0.1")
        .header("host", "evil.example")
        .body(())
        .expect("a request");
    assert_eq!(
        refusal(&two, false).map(|(s, _)| s),
        Some(StatusCode::BAD_REQUEST)
    );
    let absolute = Request::builder()
        .uri("http://evil.example/api/dashboard/status")
        .header("host", "127.0.0.1:3000")
        .body(())
        .expect("a request");
    assert_eq!(
        refusal(&absolute, true).map(|(s, _)| s),
        Some(StatusCode::MISDIRECTED_REQUEST)
    );
}

/// ... and only API calls from its own page: another site's form post, `<img>` or fetch is
/// refused before the token is added.
#[test]
fn c_mgmt_2_a_cross_site_api_call_is_refused_before_the_token_is_added() {
    let h = Some("127.0.0.1:3000");
    assert_eq!(
        refusal(&req(h, &[("sec-fetch-site", "same-origin")]), true),
        None
    );
    assert_eq!(
        refusal(&req(h, &[("origin", "http://127.0.0.1:3000")]), true),
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
        let got = refusal(&req(h, &[(n, v)]), true).map(|(s, _)| s);
        assert_eq!(got, Some(StatusCode::FORBIDDEN), "{n}: {v}");
    }
    // A link followed from elsewhere still opens the page itself.
    assert_eq!(
        refusal(&req(h, &[("sec-fetch-site", "cross-site")]), false),
        None
    );
}
