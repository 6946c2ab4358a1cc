//! Operating bounds of runtime values over the management API of the real binary (C-CONF-8,
//! C-MGMT-4): a `PATCH` of `health_check.interval: 1ns` (which used to be applied and
//! made weir probe each backend ~1,480 times a second) is a `400` naming the field and its range,
//! and changes nothing; a value within range is applied.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy};

/// The binary under test: `weir` here; `weir-smol` when adapter-smol's tests include this file.
fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

fn patch(body: &str) -> Req {
    Req::new("PATCH", "/api/dashboard/config")
        .header("authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .header("x-balancer-csrf", "1")
        .header("content-type", "application/json")
        .body(body)
}

async fn health_check(m: SocketAddr) -> Value {
    let r = send(
        m,
        &Req::get("/api/dashboard/status")
            .header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    r.json()["health_check"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_8_patch_of_a_1ns_probe_interval_is_400_naming_the_field() {
    let b = Backend::start("bd-a").await;
    let cfg = Config::new(&[&b])
        .management()
        .set("management.runtime_mutations", true)
        .set("health_check.interval", "500ms");
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let before = health_check(m).await;
    assert_eq!(before["interval"], "500ms");

    let r = send(m, &patch(r#"{"health_check": {"interval": "1ns"}}"#)).await;
    assert_eq!(r.status, 400, "{}", r.summary());
    let body = r.json();
    let errors = body["errors"].as_array().expect("errors").clone();
    assert_eq!(errors.len(), 1, "{body}");
    assert_eq!(errors[0]["path"], "health_check.interval");
    assert_eq!(errors[0]["message"], "must be within 100ms..=1h, got 1ns");
    assert_eq!(
        health_check(m).await,
        before,
        "a rejected PATCH changed something"
    );

    // Nothing changed in practice either: the probes keep their 500ms pace (a liveness bound:
    // at 1ns there were hundreds per second).
    let probes = b.probe_count();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let during = b.probe_count() - probes;
    assert!(during <= 4, "{during} probes in 1 s at a 500ms interval");

    // The lowest interval allowed is applied.
    let r = send(m, &patch(r#"{"health_check": {"interval": "100ms"}}"#)).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let deadline = Instant::now() + Duration::from_secs(5);
    while health_check(m).await["interval"] != "100ms" {
        assert!(Instant::now() < deadline, "100ms not applied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
