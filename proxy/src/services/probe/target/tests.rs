use super::*;

#[test]
fn c_health_1_http_target_joins_the_url_path_with_the_health_path() {
    let t = ProbeTarget::new(
        "a",
        "http://127.0.0.1:8081/base/",
        ProbeMode::Http,
        "/health",
    )
    .unwrap();
    assert_eq!(t.uri().unwrap().path(), "/base/health");
    assert_eq!(t.host_header().unwrap().as_str(), "127.0.0.1:8081");
    assert_eq!(t.addr(), ("127.0.0.1", 8081));
    assert!(!t.is_tls());
    assert_eq!(t.key(), "a");
    assert_eq!(t.url(), "http://127.0.0.1:8081/base/");
    let t = ProbeTarget::new("a", "http://b", ProbeMode::Http, "status?full=1").unwrap();
    assert_eq!(t.uri().unwrap().path_and_query().unwrap(), "/status?full=1");
    assert_eq!(t.addr(), ("b", 80));
}

#[test]
fn c_health_1_transport_follows_mode_and_scheme() {
    let https = ProbeTarget::new("a", "https://svc.local", ProbeMode::Http, "/h").unwrap();
    assert!(https.is_tls());
    assert_eq!(https.addr(), ("svc.local", 443));
    assert_eq!(
        https.server_name(),
        Some(&ServerName::try_from("svc.local").unwrap())
    );
    let forced = ProbeTarget::new("a", "http://[::1]:8443", ProbeMode::Https, "/h").unwrap();
    assert!(forced.is_tls());
    assert_eq!(forced.addr(), ("::1", 8443));
    assert!(matches!(
        forced.server_name(),
        Some(ServerName::IpAddress(_))
    ));
    let forced = ProbeTarget::new("a", "http://b", ProbeMode::Https, "/h").unwrap();
    assert_eq!(forced.addr(), ("b", 443));
    let tcp = ProbeTarget::new("a", "https://b", ProbeMode::Tcp, "/h").unwrap();
    assert!(!tcp.is_tls() && tcp.uri().is_none());
    assert_eq!(tcp.addr(), ("b", 443));
    assert_eq!(tcp.mode(), ProbeMode::Tcp);
}

#[test]
fn bad_urls_and_paths_are_reported() {
    assert_eq!(
        ProbeTarget::new("a", "ftp://b", ProbeMode::Http, "/h").unwrap_err(),
        ProbeTargetError::Url(BackendUrlError::Scheme)
    );
    assert!(matches!(
        ProbeTarget::new("a", "http://b", ProbeMode::Http, "/a b").unwrap_err(),
        ProbeTargetError::Path(_)
    ));
    // A TCP probe ignores the path.
    assert!(ProbeTarget::new("a", "http://b", ProbeMode::Tcp, "/a b").is_ok());
}

#[test]
fn schedule_id_names_key_and_url() {
    let a = ProbeTarget::new("a", "http://b:1", ProbeMode::Http, "/").unwrap();
    let moved = ProbeTarget::new("a", "http://b:2", ProbeMode::Http, "/").unwrap();
    let same = ProbeTarget::new("a", "http://b:1", ProbeMode::Tcp, "/x").unwrap();
    assert_ne!(a.schedule_id(), moved.schedule_id());
    assert_eq!(a.schedule_id(), same.schedule_id());
}
