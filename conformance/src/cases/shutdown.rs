//! C-PATH-10 with `server.shutdown_delay`: the phases of a rolling update's SIGTERM, one case
//! each. (1) `/readyz` turns `503` at once on both listeners while `/healthz` stays `200`; (2) the
//! listeners keep accepting and serving, new and kept-alive connections alike, for the delay;
//! (3) then they close and what is in flight, including a request accepted during the delay,
//! finishes within `shutdown_timeout`. A second signal cuts the delay short.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpStream;

use super::{expect_status, join, spawn_send};
use crate::backend::{Backend, Mode};
use crate::client::{Conn, Req, Resp, get, send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs};

/// Waits until `/readyz` at `addr` answers `503` (the signal has been handled).
async fn readyz_503(addr: SocketAddr, what: &str) {
    eventually(secs(5), what, || async {
        (get(addr, "/readyz").await.status == 503).then_some(())
    })
    .await;
}

/// Waits until `addr` refuses new connections.
async fn refused(addr: SocketAddr, within: std::time::Duration) {
    eventually(
        within,
        "the public listener to refuse new connections",
        || async { TcpStream::connect(addr).await.is_err().then_some(()) },
    )
    .await;
}

/// `GET path` on the management listener with the token (C-MGMT-1).
async fn mgmt_get(addr: SocketAddr, path: &str) -> Resp {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    send(addr, &Req::get(path).header("authorization", &auth)).await
}

/// C-PATH-10, phase 1: on SIGTERM `/readyz` answers `503` at once on the public and the
/// management listener, `/healthz` stays `200` (a liveness probe must not restart a pod that is
/// draining); a second SIGTERM ends the delay and the process exits 0.
pub async fn c_path_10_sigterm_turns_readyz_503_at_once(bin: Binary) {
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b])
        .management()
        .set("server.shutdown_delay", "5m");
    let mut p = Proxy::start(&bin, &cfg).await;
    let mgmt = p.management.expect("management listener");
    expect_status(
        &get(p.public, "/readyz").await,
        200,
        "public /readyz before",
    );
    expect_status(
        &mgmt_get(mgmt, "/readyz").await,
        200,
        "management /readyz before",
    );
    p.signal("TERM");
    readyz_503(p.public, "public /readyz to answer 503 after SIGTERM").await;
    expect_status(&mgmt_get(mgmt, "/readyz").await, 503, "management /readyz");
    expect_status(&get(p.public, "/healthz").await, 200, "public /healthz");
    expect_status(
        &mgmt_get(mgmt, "/healthz").await,
        200,
        "management /healthz",
    );
    assert!(p.try_exit().is_none(), "exited during shutdown_delay");
    p.signal("TERM");
    let st = p
        .wait_exit(secs(10))
        .await
        .expect("a second SIGTERM cuts shutdown_delay short");
    assert_eq!(st.code(), Some(0), "exit status {st}");
}

/// C-PATH-10, phase 2: during `shutdown_delay` new connections are accepted and served, and a
/// kept-alive connection keeps serving; after it the listener refuses, and the exit is not
/// before the delay.
pub async fn c_path_10_listeners_accept_during_shutdown_delay(bin: Binary) {
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b]).set("server.shutdown_delay", "4s");
    let mut p = Proxy::start(&bin, &cfg).await;
    let mut kept = Conn::open(p.public, None).await.expect("connect");
    expect_status(
        &kept.send(&Req::get("/before")).await.expect("before"),
        200,
        "before SIGTERM",
    );
    let start = Instant::now();
    p.signal("TERM");
    readyz_503(p.public, "/readyz to answer 503 after SIGTERM").await;
    let r = get(p.public, "/during").await;
    expect_status(&r, 200, "a new connection during shutdown_delay");
    assert_eq!(r.backend().as_deref(), Some("b-1"), "{}", r.summary());
    let r = kept
        .send(&Req::get("/during-kept"))
        .await
        .expect("the kept-alive connection serves during shutdown_delay");
    expect_status(&r, 200, "kept-alive connection during shutdown_delay");
    refused(p.public, secs(15)).await;
    let st = p
        .wait_exit(secs(10))
        .await
        .expect("process exits after the delay");
    assert_eq!(st.code(), Some(0), "exit status {st}");
    assert!(
        start.elapsed() >= ms(3500),
        "exited after {:?}, before shutdown_delay",
        start.elapsed()
    );
}

/// C-PATH-10, phase 3: once `shutdown_delay` has passed the listener closes, and a request
/// accepted during the delay and still in flight finishes (within `shutdown_timeout`) before
/// the process exits 0.
pub async fn c_path_10_in_flight_finish_after_shutdown_delay(bin: Binary) {
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b])
        .set("server.shutdown_delay", "1s")
        .set("server.shutdown_timeout", "20s")
        .set("server.retry.per_try_timeout", "30s");
    let mut p = Proxy::start(&bin, &cfg).await;
    b.set_mode(Mode::Hold);
    p.signal("TERM");
    readyz_503(p.public, "/readyz to answer 503 after SIGTERM").await;
    let in_flight = spawn_send(p.public, Req::get("/accepted-during-delay"));
    b.wait_in_flight(1, secs(5)).await;
    refused(p.public, secs(10)).await;
    assert!(
        p.try_exit().is_none(),
        "exited with a request still in flight"
    );
    b.release_all();
    let r = join(in_flight, "the request accepted during the delay").await;
    expect_status(
        &r,
        200,
        "in-flight request finishes after the listener closed",
    );
    assert_eq!(r.text(), "backend b-1\n");
    let st = p
        .wait_exit(secs(10))
        .await
        .expect("process exits once the in-flight request finished");
    assert_eq!(st.code(), Some(0), "exit status {st}");
}
