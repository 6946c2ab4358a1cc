//! Connection caps (issue 21, C-PATH-12's client-side limits; docs/operations.md "Connection
//! limits"): a flood of idle connections above the cap never takes the descriptors that probes,
//! upstream connections and management need.

use std::net::SocketAddr;

use tokio::net::TcpStream;

use super::expect_status;
use crate::backend::Backend;
use crate::client::{Conn, Req, send, try_send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, metric, secs, within};

/// The child's fd limit: small enough that the flood below would exhaust it without a cap.
const NOFILE: u64 = 512;
/// Idle connections opened at once: more than the whole fd limit.
const FLOOD: usize = 700;

async fn metrics(m: SocketAddr) -> String {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let r = send(m, &Req::get("/metrics").header("authorization", &auth)).await;
    expect_status(&r, 200, "GET /metrics");
    r.text()
}

fn value(text: &str, name: &str, label: &str) -> f64 {
    metric(text, name, label).unwrap_or_else(|| panic!("no {name}{{{label}}} in:\n{text}"))
}

/// Both backends healthy and available in the status API.
async fn expect_backends_healthy(m: SocketAddr, what: &str) {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let r = send(
        m,
        &Req::get("/api/dashboard/status").header("authorization", &auth),
    )
    .await;
    expect_status(&r, 200, what);
    let v = r.json();
    let backends = v["backends"].as_array().cloned().unwrap_or_default();
    assert_eq!(backends.len(), 2, "{what}: {v}");
    for b in backends {
        assert_eq!(b["healthy"], true, "{what}: {b}");
        assert_eq!(b["available"], true, "{what}: {b}");
    }
}

/// Issue 21 (C-PATH-12, C-HEALTH-1, C-MGMT-4, C-OBS-1): started with an fd limit of 512 and no
/// `server.max_connections`, weir derives a cap below the limit; 700 idle connections fill the
/// cap (the rest wait in the listen backlog) and then: no probe fails and the status API shows
/// both backends healthy, management answers, a request on a connection accepted before the
/// flood is proxied (an upstream connect at the cap), the cap and the times it was reached are
/// in the metrics; after the flood closes, new connections are served.
pub async fn c_path_12_connection_cap_keeps_fds_for_probes_and_management(bin: Binary) {
    let a = Backend::start("cap-a").await;
    let b = Backend::start("cap-b").await;
    let cfg = Config::new(&[&a, &b])
        .management()
        .set("server.read_header_timeout", "30s")
        .set("server.overload.max_concurrent_requests", 64)
        .set("server.upstream.max_idle_conns", 16)
        .set("health_check.failure_threshold", 1);
    let p = Proxy::start_with_nofile(&bin, &cfg, NOFILE).await;
    let m = p.management.expect("management listener");
    let before = metrics(m).await;
    let cap = value(
        &before,
        "load_balancer_max_connections",
        "listener=\"public\"",
    );
    assert!(
        cap >= 1.0 && cap < NOFILE as f64,
        "derived cap {cap} for an fd limit of {NOFILE}"
    );
    let failures_before = value(
        &before,
        "load_balancer_health_checks_total",
        "result=\"failure\"",
    );

    let mut kept = Conn::open(p.public, None).await.expect("connect");
    let r = kept
        .send(&Req::get("/before"))
        .await
        .expect("first request");
    expect_status(&r, 200, "request before the flood");

    let mut flood = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        match within(secs(10), "flood connect", TcpStream::connect(p.public)).await {
            Ok(s) => flood.push(s),
            Err(e) => panic!("flood connection {i}: {e}"),
        }
    }
    // The cap is reached and holds (each flood connection waits 30 s for a first byte).
    eventually(secs(10), "public connections at the cap", || async {
        let t = metrics(m).await;
        let open = value(&t, "load_balancer_open_connections", "listener=\"public\"");
        let reached = value(
            &t,
            "load_balancer_connection_limit_reached_total",
            "listener=\"public\"",
        );
        (open == cap && reached >= 1.0).then_some(())
    })
    .await;
    // Twenty probe cycles at the cap: no probe fails, both backends stay healthy.
    tokio::time::sleep(secs(2)).await;
    let during = metrics(m).await;
    assert_eq!(
        value(
            &during,
            "load_balancer_health_checks_total",
            "result=\"failure\""
        ),
        failures_before,
        "probes failed while the data plane was at its cap"
    );
    assert_eq!(
        value(
            &during,
            "load_balancer_accept_errors_total",
            "listener=\"public\""
        ),
        0.0,
        "accept failed at the cap"
    );
    expect_backends_healthy(m, "status at the cap").await;
    let r = within(
        secs(10),
        "request at the cap",
        kept.send(&Req::get("/at-cap")),
    )
    .await
    .expect("request on an accepted connection at the cap");
    expect_status(&r, 200, "request on an accepted connection at the cap");

    drop(flood);
    eventually(
        secs(20),
        "a new connection served after the flood",
        || async {
            let r = try_send(p.public, &Req::get("/after")).await;
            r.is_ok_and(|r| r.status == 200).then_some(())
        },
    )
    .await;
    expect_backends_healthy(m, "status after the flood").await;
}
