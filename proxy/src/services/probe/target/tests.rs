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

#[test]
fn c_grpc_4_grpc_target_asks_the_health_service_over_the_backends_protocol() {
    let t = ProbeTarget::new("a", "http://b:9000/prefix", ProbeMode::Grpc, "/health")
        .unwrap()
        .with_protocol(weir_core::backend::Protocol::H2c)
        .with_grpc_service("pkg.Echo");
    assert_eq!(
        t.uri().map(ToString::to_string).as_deref(),
        Some("http://b:9000/prefix/grpc.health.v1.Health/Check")
    );
    assert_eq!(t.grpc_service(), "pkg.Echo");
    assert!(t.protocol().is_h2());
    assert!(!t.is_tls());
    // A protocol change is a new backend for the schedule, as for the pool.
    let h1 = ProbeTarget::new("a", "http://b:9000/prefix", ProbeMode::Grpc, "/health").unwrap();
    assert_ne!(t.schedule_id(), h1.schedule_id());
}

#[test]
fn c_grpc_5_server_name_replaces_the_host_only_over_tls() {
    let name = ServerName::try_from("api.internal").unwrap().to_owned();
    let tls = ProbeTarget::new("a", "https://10.0.0.1:8443", ProbeMode::Http, "/h")
        .unwrap()
        .with_server_name(Some(name.clone()));
    assert_eq!(tls.server_name(), Some(&name));
    let plain = ProbeTarget::new("a", "http://10.0.0.1:8080", ProbeMode::Http, "/h")
        .unwrap()
        .with_server_name(Some(name));
    assert_eq!(plain.server_name(), None, "no TLS, no name");
}
