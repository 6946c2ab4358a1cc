//! The probe executor over real sockets on 127.0.0.1 (C-HEALTH-1, C-HEALTH-6).

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustls::ClientConfig;
use weir_core::health::{HealthParams, HealthSpec};

#[path = "support/probe_backend.rs"]
#[allow(dead_code)]
mod probe_backend;

use probe_backend::{CLOSE, HANG, http_server, https_server, test_pki};
use weir_tokio::services::probe::{ProbeMode, ProbeOutcome, ProbeTarget, client_tls};

/// The probe executor on tokio.
async fn probe(
    target: &ProbeTarget,
    tls: &Arc<ClientConfig>,
    params: &HealthParams,
    timeout: Duration,
) -> ProbeOutcome {
    weir_tokio::services::probe::probe(weir_tokio::rt(), target, tls, params, timeout).await
}

/// Generous: only the hung-backend tests wait for it.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A probe of a backend that never answers: only its deadline can end it, so it returning at
/// all (within a bound far above any deadline here) shows the deadline worked; how soon after
/// the deadline is not asserted (a loaded machine stretches it).
async fn returns(probe: impl Future<Output = ProbeOutcome>) -> ProbeOutcome {
    tokio::time::timeout(Duration::from_secs(30), probe)
        .await
        .expect("a probe of a hung backend never returned: no deadline")
}

fn params(statuses: &[u16]) -> HealthParams {
    HealthParams::new(&HealthSpec {
        expected_statuses: statuses.to_vec(),
        ..HealthSpec::default()
    })
    .unwrap()
}

fn no_roots() -> Arc<ClientConfig> {
    client_tls::client_config(rustls::RootCertStore::empty()).unwrap()
}

fn target(url: &str, mode: ProbeMode, path: &str) -> ProbeTarget {
    ProbeTarget::new("b", url, mode, path).unwrap()
}

#[tokio::test]
async fn c_health_1_http_200_and_204_are_healthy_and_the_request_is_a_get_of_the_joined_path() {
    let p = params(&[200, 204]);
    for status in [200, 204] {
        let server = http_server(status).await;
        let t = target(
            &format!("{}/base/", server.url("http")),
            ProbeMode::Http,
            "/health?deep=1",
        );
        let outcome = probe(&t, &no_roots(), &p, TIMEOUT).await;
        assert_eq!(outcome, ProbeOutcome::Status(status));
        assert!(outcome.is_success());
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let head = requests[0].to_ascii_lowercase();
        assert!(
            head.starts_with("get /base/health?deep=1 http/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\nhost: {}\r\n", server.addr)),
            "{head}"
        );
        assert!(
            head.contains("\r\nuser-agent: weir-health-check/"),
            "{head}"
        );
        assert!(server.wait_closed(0).await);
    }
}

#[tokio::test]
async fn c_health_1_503_and_statuses_outside_expected_are_failures() {
    let server = http_server(503).await;
    let t = target(&server.url("http"), ProbeMode::Http, "/health");
    let outcome = probe(&t, &no_roots(), &params(&[200, 204]), TIMEOUT).await;
    assert_eq!(outcome, ProbeOutcome::UnexpectedStatus(503));
    assert!(!outcome.is_success());
    // 200 is not a success when only 204 is expected; 301 is never followed.
    server.set_status(200);
    let outcome = probe(&t, &no_roots(), &params(&[204]), TIMEOUT).await;
    assert_eq!(outcome, ProbeOutcome::UnexpectedStatus(200));
    server.set_status(301);
    let outcome = probe(&t, &no_roots(), &params(&[200]), TIMEOUT).await;
    assert_eq!(outcome, ProbeOutcome::UnexpectedStatus(301));
    // A configured 503 is a success: the set decides, not the class.
    server.set_status(503);
    let outcome = probe(&t, &no_roots(), &params(&[503]), TIMEOUT).await;
    assert_eq!(outcome, ProbeOutcome::Status(503));
}

#[tokio::test]
async fn c_health_6_hung_backend_fails_at_the_deadline_and_its_socket_is_closed() {
    let server = http_server(HANG).await;
    let t = target(&server.url("http"), ProbeMode::Http, "/health");
    let timeout = Duration::from_millis(300);
    let started = tokio::time::Instant::now();
    let outcome = returns(probe(&t, &no_roots(), &params(&[200]), timeout)).await;
    let took = started.elapsed();
    assert_eq!(outcome, ProbeOutcome::TimedOut);
    assert!(took >= timeout, "{took:?}");
    assert_eq!(server.requests().len(), 1, "the request was sent");
    assert!(
        server.wait_closed(1).await,
        "the probe closed its connection"
    );
}

#[tokio::test]
async fn backend_closing_without_an_answer_is_a_failure() {
    let server = http_server(CLOSE).await;
    let t = target(&server.url("http"), ProbeMode::Http, "/health");
    let outcome = probe(&t, &no_roots(), &params(&[200]), TIMEOUT).await;
    assert!(matches!(outcome, ProbeOutcome::Http(_)), "{outcome:?}");
}

#[tokio::test]
async fn c_health_1_tcp_probe_is_a_connect() {
    let server = http_server(HANG).await;
    let t = target(&server.url("http"), ProbeMode::Tcp, "/ignored");
    let outcome = probe(&t, &no_roots(), &params(&[200]), TIMEOUT).await;
    assert_eq!(outcome, ProbeOutcome::Connected);
    assert!(server.wait_closed(1).await, "the connection is closed");
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    assert!(server.requests().is_empty(), "nothing is sent");

    // A port nobody listens on: bind one, then free it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    for mode in [ProbeMode::Tcp, ProbeMode::Http] {
        let t = target(&format!("http://{addr}"), mode, "/health");
        let outcome = probe(&t, &no_roots(), &params(&[200]), TIMEOUT).await;
        assert_eq!(
            outcome,
            ProbeOutcome::Connect(io::ErrorKind::ConnectionRefused)
        );
    }
}

#[tokio::test]
async fn c_health_1_https_with_a_certificate_from_a_trusted_ca_is_healthy() {
    let pki = test_pki();
    let tls = client_tls::client_config(pki.roots.clone()).unwrap();
    let server = https_server(204, Arc::clone(&pki.server)).await;
    let port = server.addr.port();
    let cases = [
        // Host name (SNI localhost) and IP address (matched against the IP SAN).
        (format!("https://localhost:{port}/app"), ProbeMode::Http),
        (format!("https://127.0.0.1:{port}"), ProbeMode::Https),
        // `https` mode speaks TLS to an http:// URL too.
        (format!("http://127.0.0.1:{port}"), ProbeMode::Https),
    ];
    for (url, mode) in &cases {
        let t = target(url, *mode, "health");
        let outcome = probe(&t, &tls, &params(&[200, 204]), TIMEOUT).await;
        assert_eq!(outcome, ProbeOutcome::Status(204), "{url}");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].starts_with("GET /app/health HTTP/1.1\r\n"));
    assert!(requests[1].starts_with("GET /health HTTP/1.1\r\n"));
    // A TCP probe of a TLS backend is only a connect.
    let t = target(&format!("https://127.0.0.1:{port}"), ProbeMode::Tcp, "/");
    assert_eq!(
        probe(&t, &tls, &params(&[200]), TIMEOUT).await,
        ProbeOutcome::Connected
    );
}

#[tokio::test]
async fn c_health_1_https_validates_certificates_normally() {
    let pki = test_pki();
    let tls = client_tls::client_config(pki.roots.clone()).unwrap();
    let p = params(&[200]);
    // Self-signed: not trusted, even though the names match.
    let server = https_server(200, Arc::clone(&pki.self_signed)).await;
    let t = target(&server.url("https"), ProbeMode::Https, "/health");
    let outcome = probe(&t, &tls, &p, TIMEOUT).await;
    assert!(
        matches!(&outcome, ProbeOutcome::Tls(e) if e.contains("certificate")),
        "{outcome:?}"
    );
    assert!(
        server.requests().is_empty(),
        "no request over an untrusted connection"
    );
    // Signed by the trusted CA but for another name.
    let server = https_server(200, Arc::clone(&pki.wrong_name)).await;
    let t = target(&server.url("https"), ProbeMode::Https, "/health");
    let outcome = probe(&t, &tls, &p, TIMEOUT).await;
    assert!(matches!(outcome, ProbeOutcome::Tls(_)), "{outcome:?}");
    // The production roots do not trust the test CA either.
    let server = https_server(200, Arc::clone(&pki.server)).await;
    let t = target(&server.url("https"), ProbeMode::Https, "/health");
    let native = client_tls::native_client_config().unwrap();
    let outcome = probe(&t, &native, &p, TIMEOUT).await;
    assert!(matches!(outcome, ProbeOutcome::Tls(_)), "{outcome:?}");
}

#[tokio::test]
async fn c_health_6_hung_tls_handshake_fails_at_the_deadline() {
    // A TCP listener that accepts and never speaks TLS.
    let server = http_server(HANG).await;
    let pki = test_pki();
    let tls = client_tls::client_config(pki.roots.clone()).unwrap();
    let t = target(&server.url("http"), ProbeMode::Https, "/health");
    let timeout = Duration::from_millis(200);
    let started = tokio::time::Instant::now();
    let outcome = returns(probe(&t, &tls, &params(&[200]), timeout)).await;
    assert_eq!(outcome, ProbeOutcome::TimedOut);
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
}
