//! Operating gRPC backends: health checks with the gRPC health protocol and HTTP probes over
//! HTTP/2 (C-GRPC-4); TLS to backends verified against a configured CA and server name, with a
//! client certificate, and ALPN `h2` required of `h2` backends (C-GRPC-5).

use std::time::Duration;

use serde_json::{Value, json};

use super::expect_status;
use crate::client::get;
use crate::config::Config;
use crate::h2backend::{H2Backend, Health};
use crate::harness::{Binary, Proxy};
use crate::tls_backend::{TestCa, TlsBackend};
use crate::util::{eventually, secs};

/// The default pool of `backends`, all `protocol: h2c`, probed in `mode` every 100 ms, one
/// result flipping health either way.
fn probed(backends: &[&H2Backend], mode: &str) -> Config {
    let list: Vec<Value> = backends
        .iter()
        .map(|b| json!({"id": b.id(), "url": b.url(), "protocol": "h2c"}))
        .collect();
    Config::new(&[])
        .set("backends", Value::Array(list))
        .set("health_check.mode", mode)
        .set("health_check.interval", "100ms")
        .set("health_check.jitter", "0s")
        .set("health_check.timeout", "1s")
        .set("health_check.failure_threshold", 1)
        .set("health_check.success_threshold", 1)
}

/// Which backend answered `n` plain `GET`s (HTTP/1.1 client, h2c backends).
async fn answered_by(p: &Proxy, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let r = get(p.public, "/pkg.Echo/Call").await;
        expect_status(&r, 200, "a call while one backend is healthy");
        ids.push(r.backend().unwrap_or_default());
    }
    ids
}

/// C-GRPC-4: `health_check.mode: grpc` calls `grpc.health.v1.Health/Check` over HTTP/2 with
/// `grpc_service`; a backend turned `NOT_SERVING` gets no calls for as long as it stays so,
/// and comes back once it answers `SERVING` again.
pub async fn c_grpc_4_not_serving_backend_is_taken_out_until_serving(bin: Binary) {
    let a = H2Backend::start("grpc-a", None, 0).await;
    let b = H2Backend::start("grpc-b", None, 0).await;
    let cfg = probed(&[&a, &b], "grpc").set("health_check.grpc_service", "pkg.Echo");
    let p = Proxy::start(&bin, &cfg).await;
    let ids = answered_by(&p, 4).await;
    assert!(
        ids.iter().any(|i| i == "grpc-b"),
        "both serve at first: {ids:?}"
    );
    let probe = b.probes().first().cloned().expect("b was probed");
    assert_eq!(probe.path, "/grpc.health.v1.Health/Check");
    assert_eq!(probe.version, http::Version::HTTP_2);
    assert_eq!(probe.content_type.as_deref(), Some("application/grpc"));
    // The framed HealthCheckRequest { service: "pkg.Echo" }.
    assert_eq!(&probe.body[..], b"\0\0\0\0\x0a\x0a\x08pkg.Echo");

    b.set_health(Health::Status(2));
    // Two more probes of b: the first one after the switch answered NOT_SERVING.
    let seen = b.probes().len();
    eventually(secs(10), "b probed twice after NOT_SERVING", || {
        let n = b.probes().len();
        async move { (n >= seen + 2).then_some(()) }
    })
    .await;
    let calls_before = b.count();
    let start = std::time::Instant::now();
    let mut sent = 0;
    while start.elapsed() < Duration::from_secs(2) {
        let ids = answered_by(&p, 1).await;
        assert_eq!(ids, ["grpc-a"], "a NOT_SERVING backend got a call");
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sent >= 10, "calls were made over the 2 s ({sent})");
    assert_eq!(
        b.count(),
        calls_before,
        "no call reached the NOT_SERVING backend"
    );

    b.set_health(Health::Status(1));
    eventually(secs(10), "b serves again once SERVING", || {
        let p = &p;
        async move {
            answered_by(p, 2)
                .await
                .iter()
                .any(|i| i == "grpc-b")
                .then_some(())
        }
    })
    .await;
}

/// C-GRPC-4: every answer but `SERVING` is a failure: `UNKNOWN`, `SERVICE_UNKNOWN`, and a
/// server without the health service (`UNIMPLEMENTED`, trailers-only).
pub async fn c_grpc_4_only_serving_is_healthy(bin: Binary) {
    let good = H2Backend::start("serving", None, 0).await;
    let mut others = Vec::new();
    for (id, health) in [
        ("unknown", Health::Status(0)),
        ("service-unknown", Health::Status(3)),
        ("unimplemented", Health::Unimplemented),
    ] {
        let b = H2Backend::start(id, None, 0).await;
        b.set_health(health);
        others.push(b);
    }
    let mut all: Vec<&H2Backend> = vec![&good];
    all.extend(others.iter());
    let p = Proxy::start(&bin, &probed(&all, "grpc")).await;
    let ids = answered_by(&p, 8).await;
    assert!(ids.iter().all(|i| i == "serving"), "{ids:?}");
    for b in &others {
        assert!(!b.probes().is_empty(), "{} was probed", b.id());
        assert_eq!(b.count(), 0, "{} got a call", b.id());
    }
}

/// C-GRPC-4: `health_check.mode: http` keeps working for an HTTP/2 backend: the `GET` of
/// `path` goes over HTTP/2 (an h2c backend speaks nothing else).
pub async fn c_grpc_4_http_probe_of_h2c_backend_goes_over_http2(bin: Binary) {
    let b = H2Backend::start("h2-http-probed", None, 0).await;
    let p = Proxy::start(&bin, &probed(&[&b], "http")).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 200, "an h2c backend probed over HTTP/2 is healthy");
    let probe = b.probes().first().cloned().expect("probed");
    assert_eq!(probe.path, "/health");
    assert_eq!(probe.version, http::Version::HTTP_2);
}

/// C-GRPC-4: gRPC health needs HTTP/2, so `mode: grpc` with an `http1` backend is a
/// configuration error naming the backend; the process does not start.
pub async fn c_grpc_4_grpc_mode_refuses_http1_backends(bin: Binary) {
    let cfg = Config::new(&[])
        .set(
            "backends",
            json!([{"id": "legacy", "url": "http://127.0.0.1:9"}]),
        )
        .set("health_check.mode", "grpc");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("weir.yaml");
    std::fs::write(&path, cfg.yaml()).expect("write config");
    let out = bin
        .command(&["check-config"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run check-config");
    assert!(!out.status.success(), "check-config accepted it");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("backends[0].protocol") && err.contains("legacy") && err.contains("HTTP/2"),
        "{err}"
    );
}

/// A default pool of one `https://127.0.0.1:<port>` backend per `(id, port)`, of `protocol`,
/// probed by TCP (so TLS failures show on the data path, as `502`).
fn https(backends: &[(&str, u16)], protocol: &str) -> Config {
    let list: Vec<Value> = backends
        .iter()
        .map(|(id, port)| {
            json!({"id": id, "url": format!("https://127.0.0.1:{port}"), "protocol": protocol})
        })
        .collect();
    Config::new(&[])
        .set("backends", Value::Array(list))
        .set("health_check.mode", "tcp")
        .set("server.retry.max_attempts", 1)
}

/// The `upstream_tls_failed` warning lines the proxy wrote so far.
fn tls_warnings(p: &Proxy) -> Vec<String> {
    p.logs()
        .stdout()
        .lines()
        .filter(|l| l.contains("upstream_tls_failed"))
        .map(str::to_string)
        .collect()
}

/// C-GRPC-5: a backend whose certificate a private CA signed is refused (`502`, the TLS reason
/// logged) against the system's roots, and served once `server.upstream.tls_ca_file` names
/// that CA.
pub async fn c_grpc_5_private_ca_backend_needs_tls_ca_file(bin: Binary) {
    let ca = TestCa::new();
    let b = TlsBackend::start("private", &ca.leaf(&["127.0.0.1"]), &[b"http/1.1"], None).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write(dir.path(), "ca.pem");

    let p = Proxy::start(&bin, &https(&[(b.id(), b.port())], "http1")).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 502, "an untrusted certificate");
    let warned = eventually(secs(5), "a TLS warning", || {
        let w = tls_warnings(&p);
        async move { (!w.is_empty()).then_some(w) }
    })
    .await;
    assert!(
        warned[0].contains("private") && warned[0].contains("UnknownIssuer"),
        "{warned:?}"
    );
    drop(p);

    let cfg = https(&[(b.id(), b.port())], "http1").set(
        "server.upstream.tls_ca_file",
        ca_file.to_str().expect("utf-8"),
    );
    let p = Proxy::start(&bin, &cfg).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 200, "the private CA is trusted");
    assert_eq!(r.text(), "secure private");
}

/// C-GRPC-5: `server.upstream.tls_server_name` is the name checked (and sent as SNI) instead of
/// the URL's host: a certificate for `api.internal` verifies for a backend reached by address.
pub async fn c_grpc_5_tls_server_name_verifies_another_name(bin: Binary) {
    let ca = TestCa::new();
    let b = TlsBackend::start("named", &ca.leaf(&["api.internal"]), &[b"http/1.1"], None).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let base = https(&[(b.id(), b.port())], "http1").set(
        "server.upstream.tls_ca_file",
        ca_file.to_str().expect("utf-8"),
    );

    let p = Proxy::start(&bin, &base).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 502, "the certificate does not name 127.0.0.1");
    drop(p);

    let p = Proxy::start(
        &bin,
        &base.set("server.upstream.tls_server_name", "api.internal"),
    )
    .await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 200, "the certificate names tls_server_name");
    assert_eq!(r.text(), "secure named");
}

/// C-GRPC-5: mutual TLS: a backend that requires a client certificate from its CA accepts
/// weir's `tls_cert_file`/`tls_key_file` and refuses weir without one (`502`).
pub async fn c_grpc_5_client_certificate_for_mutual_tls(bin: Binary) {
    let server_ca = TestCa::new();
    let client_ca = TestCa::new();
    let b = TlsBackend::start(
        "mtls",
        &server_ca.leaf(&["127.0.0.1"]),
        &[b"http/1.1"],
        Some(&client_ca),
    )
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = server_ca.write(dir.path(), "ca.pem");
    let (cert, key) = client_ca.leaf(&["weir.client"]).write(dir.path(), "client");
    let base = https(&[(b.id(), b.port())], "http1").set(
        "server.upstream.tls_ca_file",
        ca_file.to_str().expect("utf-8"),
    );

    let p = Proxy::start(&bin, &base).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 502, "no client certificate");
    assert_eq!(b.handshakes(), 0, "the backend accepted no handshake");
    drop(p);

    let cfg = base
        .set(
            "server.upstream.tls_cert_file",
            cert.to_str().expect("utf-8"),
        )
        .set("server.upstream.tls_key_file", key.to_str().expect("utf-8"));
    let p = Proxy::start(&bin, &cfg).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 200, "weir's client certificate is accepted");
    assert_eq!(r.text(), "secure mtls");
    assert!(b.handshakes() >= 1);
}

/// C-GRPC-5: a `protocol: h2` backend whose TLS offers only `http/1.1` in ALPN is a connect
/// failure (`502`), and the reason logged names ALPN `h2`.
pub async fn c_grpc_5_h2_backend_without_alpn_h2_is_a_connect_failure(bin: Binary) {
    let ca = TestCa::new();
    let b = TlsBackend::start("h1-only", &ca.leaf(&["127.0.0.1"]), &[b"http/1.1"], None).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let cfg = https(&[(b.id(), b.port())], "h2").set(
        "server.upstream.tls_ca_file",
        ca_file.to_str().expect("utf-8"),
    );
    let p = Proxy::start(&bin, &cfg).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 502, "no ALPN h2");
    let warned = eventually(secs(5), "a TLS warning", || {
        let w = tls_warnings(&p);
        async move { (!w.is_empty()).then_some(w) }
    })
    .await;
    assert!(warned[0].contains("ALPN h2"), "{warned:?}");
    // The access line is written once the answer is done.
    eventually(secs(5), "the access log says connect error", || {
        let seen = p.logs().stdout().contains("upstream_connect_error");
        async move { seen.then_some(()) }
    })
    .await;
}

/// C-GRPC-5: a CA, certificate or key file that does not load is a configuration error naming
/// the key and the file (`check-config`), and `weir run` does not start with it.
pub async fn c_grpc_5_bad_upstream_tls_files_are_config_errors(bin: Binary) {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let missing = dir.path().join("missing.pem");
    let ca = TestCa::new();
    let (cert, _) = ca.leaf(&["weir.client"]).write(dir.path(), "client");
    let (_, other_key) = ca.leaf(&["other"]).write(dir.path(), "other");
    let cases = [
        (
            "tls_ca_file",
            Config::new(&[]).set(
                "server.upstream.tls_ca_file",
                missing.to_str().expect("utf-8"),
            ),
            missing.clone(),
        ),
        (
            "tls_ca_file",
            Config::new(&[]).set(
                "server.upstream.tls_ca_file",
                garbage.to_str().expect("utf-8"),
            ),
            garbage.clone(),
        ),
        (
            "tls_key_file",
            Config::new(&[])
                .set(
                    "server.upstream.tls_cert_file",
                    cert.to_str().expect("utf-8"),
                )
                .set(
                    "server.upstream.tls_key_file",
                    other_key.to_str().expect("utf-8"),
                ),
            other_key.clone(),
        ),
    ];
    for (key, cfg, file) in cases {
        let cfg = cfg.set(
            "backends",
            json!([{"id": "a", "url": "https://127.0.0.1:9"}]),
        );
        let path = dir.path().join("weir.yaml");
        std::fs::write(&path, cfg.yaml()).expect("write config");
        let out = bin
            .command(&["check-config"])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run check-config");
        assert!(!out.status.success(), "{key}: check-config accepted it");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("server.upstream.{key}"))
                && err.contains(file.to_str().expect("utf-8")),
            "{key}: {err}"
        );
        let mut child = bin
            .command(&["run", "--config"])
            .arg(&path)
            .args(["--public-bind", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run weir");
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break Some(s);
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let out = child.wait_with_output().expect("output");
        assert!(
            status.is_some_and(|s| !s.success()),
            "{key}: weir started with it"
        );
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            all.contains(&format!("server.upstream.{key}")),
            "{key}: {all}"
        );
    }
}

/// C-GRPC-5: a reload whose `tls_ca_file` does not load is rejected as a whole, naming the key
/// and the file: the backend list it also changed stays as it was, and requests keep working.
pub async fn c_grpc_5_reload_with_a_bad_tls_file_changes_nothing(bin: Binary) {
    let ca = TestCa::new();
    let b = TlsBackend::start("before", &ca.leaf(&["127.0.0.1"]), &[b"http/1.1"], None).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write(dir.path(), "ca.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let cfg = https(&[(b.id(), b.port())], "http1").set(
        "server.upstream.tls_ca_file",
        ca_file.to_str().expect("utf-8"),
    );
    let p = Proxy::start(&bin, &cfg).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 200, "before the reload");
    assert_eq!(r.backend().as_deref(), Some("before"));

    let bad = https(&[("after", b.port())], "http1").set(
        "server.upstream.tls_ca_file",
        garbage.to_str().expect("utf-8"),
    );
    std::fs::write(p.dir().join("weir.yaml"), bad.yaml()).expect("rewrite config");
    p.signal("HUP");
    let line = eventually(secs(10), "the reload is rejected", || {
        let line = p
            .logs()
            .stdout()
            .lines()
            .find(|l| l.contains("configuration reload rejected"))
            .map(str::to_string);
        async move { line }
    })
    .await;
    assert!(
        line.contains("server.upstream.tls_ca_file") && line.contains("garbage.pem"),
        "{line}"
    );
    let r = get(p.public, "/x").await;
    expect_status(&r, 200, "after the rejected reload");
    assert_eq!(
        r.backend().as_deref(),
        Some("before"),
        "the backends did not change"
    );
}
