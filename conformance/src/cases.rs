//! The suite: one `pub async fn` per case, named by the contract id it checks (docs/contract.md).
//! Every case starts its own backends and its own proxy, so cases run in parallel. The list of cases (which the
//! [`crate::suite!`] macro turns into tests) is [`crate::CASES`].

mod body;
mod conn;
mod console;
mod deadline;
mod disc;
mod fault;
mod fwd;
mod grpc;
mod grpc_ops;
mod h2;
mod health;
mod hedge;
mod load;
mod mirror;
mod obs;
mod outlier;
mod path;
mod pool;
mod protocol;
mod pushback;
mod rate;
mod retry;
mod shutdown;
mod status;
mod tls;

pub use body::*;
pub use conn::*;
pub use console::*;
pub use deadline::*;
pub use disc::*;
pub use fault::*;
pub use fwd::*;
pub use grpc::*;
pub use grpc_ops::*;
pub use h2::*;
pub use health::*;
pub use hedge::*;
pub use load::*;
pub use mirror::*;
pub use obs::*;
pub use outlier::*;
pub use path::*;
pub use pool::*;
pub use protocol::*;
pub use pushback::*;
pub use rate::*;
pub use retry::*;
pub use shutdown::*;
pub use status::*;
pub use tls::*;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::backend::Backend;
use crate::client::{Req, Resp, send, try_send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::Proxy;
use crate::util::{eventually, metric, secs};

/// Asserts a status, printing the response.
#[track_caller]
pub(crate) fn expect_status(r: &Resp, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: got {}", r.summary());
}

/// Asserts `r` is one of weir's own errors (C-PATH-11): status `status`, `Content-Type:
/// application/json`, body `{"code", "message", "request_id"}` with `code` = status and
/// `request_id` = the `X-Request-ID` header.
#[track_caller]
pub(crate) fn expect_weir_error(r: &Resp, status: u16, what: &str) {
    expect_status(r, status, what);
    let ct = r.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("application/json"),
        "{what}: content-type {ct:?}, want application/json"
    );
    let v = r.json();
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{what}: body is not an object: {v}"));
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["code", "message", "request_id"],
        "{what}: body keys of {v}"
    );
    assert_eq!(
        v["code"].as_u64(),
        Some(u64::from(status)),
        "{what}: code in {v}"
    );
    assert!(
        v["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: message in {v}"
    );
    let rid = r.header("x-request-id");
    assert!(rid.is_some(), "{what}: no X-Request-ID on a weir error");
    assert_eq!(
        v["request_id"].as_str(),
        rid.as_deref(),
        "{what}: request_id in body vs header"
    );
}

/// 32 lower- or upper-case hex characters (a generated request id, C-PATH-3).
pub(crate) fn is_hex32(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Sends in the background.
pub(crate) fn spawn_send(addr: SocketAddr, req: Req) -> JoinHandle<Result<Resp, String>> {
    tokio::spawn(async move { try_send(addr, &req).await })
}

/// Waits for a background request's response.
pub(crate) async fn join(h: JoinHandle<Result<Resp, String>>, what: &str) -> Resp {
    match tokio::time::timeout(Duration::from_secs(20), h).await {
        Ok(Ok(Ok(r))) => r,
        Ok(Ok(Err(e))) => panic!("{what}: {e}"),
        Ok(Err(e)) => panic!("{what}: task failed: {e}"),
        Err(_) => panic!("{what}: no response within 20s"),
    }
}

/// A proxy over `primary` and `other` for a client that stalls its request body (C-PATH-9):
/// `primary` takes every request (`pick_first`), one failure would open its circuit for 30 s,
/// the body's deadline (`read_timeout`, 500 ms) comes long before the attempt's (30 s). So a
/// stalled body that counted against the backend, or was retried, shows on `other`.
pub(crate) fn stalled_body_config(primary: &Backend, other: &Backend) -> Config {
    Config::new(&[primary, other])
        .policy("pick_first")
        .set("health_check.failure_threshold", 1)
        .set("health_check.cooldown", "30s")
        .set("health_check.max_cooldown", "30s")
        .set("server.read_timeout", "500ms")
        .set("server.retry.per_try_timeout", "30s")
}

/// Requests received per backend.
pub(crate) fn counts(backends: &[&Backend]) -> Vec<usize> {
    backends.iter().map(|b| b.count()).collect()
}

/// One sample of the proxy's metrics (its management listener must be on): the first line of
/// family `name` whose labels contain `label` (`""` for any).
pub(crate) async fn sample(p: &Proxy, name: &str, label: &str) -> Option<f64> {
    let m = p.management.expect("management listener");
    let r = send(
        m,
        &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    expect_status(&r, 200, "GET /metrics");
    metric(&r.text(), name, label)
}

/// Waits (30 s at most) until the proxy counts `n` requests holding a slot of `backend`
/// (`load_balancer_backend_inflight_requests`). A client reads a response before the proxy
/// has released its slot, so a case that needs the slots of earlier requests to be free
/// before its next pick waits for this rather than for time to pass.
pub(crate) async fn wait_backend_in_flight(p: &Proxy, backend: &str, n: usize) {
    let label = format!("backend=\"{backend}\"");
    eventually(
        secs(30),
        &format!("{n} request(s) holding a slot of {backend}"),
        || async {
            let v = sample(p, "load_balancer_backend_inflight_requests", &label).await;
            (v == Some(n as f64)).then_some(())
        },
    )
    .await;
}
