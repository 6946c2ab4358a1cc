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
    assert!(
        err.to_string().contains("BALANCER_ADMIN_TOKEN_FILE"),
        "{err}"
    );
    // The secret source's reason is the cause, printed after the variable's name.
    let reason = std::error::Error::source(&err).map(ToString::to_string);
    assert!(reason.is_some_and(|r| r.contains("/nope")), "{err:?}");
}

#[test]
fn the_upstream_debug_never_shows_the_token() {
    let u = Upstream {
        addr: "127.0.0.1:9090".parse().expect("addr"),
        token: Some("s3cret-token".to_owned()),
        auth: Some(weir_core::config::Secret::new("console-s3cret")),
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
