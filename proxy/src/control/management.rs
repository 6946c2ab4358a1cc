//! The management listener (C-PATH-1: separate from the data plane), carrying out weir-core's
//! management semantics (`weir_core::mgmt`, C-MGMT-1..5, C-CONF-8).
//!
//! Per request: the request id (C-PATH-3); the caller's address resolved as on the data plane
//! (trusted proxies, C-FWD-1); authentication first (`mgmt::authorize`, C-MGMT-1), so no body is
//! read for a caller without the token; then, for methods other than `GET`/`HEAD`, at most
//! `mgmt::MAX_BODY_BYTES + 1` bytes of body and the change lock ([`reload::Control::lock`]: one
//! mutation at a time, built from the runtime in force when it is published); then
//! `mgmt::handle`, whose [`Decision`] this module carries out:
//! - `Read`: `/healthz`, `/readyz` (readiness, C-OBS-4), `/metrics` (the OpenMetrics exposition,
//!   C-OBS-1), `/api/dashboard/status` (`mgmt::status_document` with this process's facts), and
//!   `/api/dashboard/request` (below);
//! - `Reply`: the answer as core spells it (refusals included, `Cache-Control: no-store`);
//! - `RefillBucket`: the caller's bucket set to the given tokens in the store in force;
//! - `Publish`: the new runtime through [`reload::install`], the path SIGHUP uses (C-CONF-8).
//!
//! Every request is counted in `load_balancer_http_requests_total{listener="management"}`;
//! every mutation (any method but `GET`/`HEAD`) and every error is access-logged (C-MGMT-5,
//! C-OBS-3), successful reads are sampled like the data plane's.
//!
//! `/api/dashboard/request` sends one `GET /` through the real data plane: an in-process HTTP/1.1
//! connection served by the data-plane handler itself (`server::serve_in_process`) as if from
//! the caller's resolved address, so it passes the same gate, client-address resolution,
//! limiter, routing, flow and metrics as any request. It carries only the headers
//! `mgmt::dashboard_forward_headers` keeps. The answer is a JSON summary of what the data plane
//! returned (status, backend, attempts, request id, duration, response headers, the first 4 KiB
//! of the body as text).

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use weir_core::forward::resolve_client;
use weir_core::mgmt::{
    self, Access, BucketFacts, Decision, Endpoint, FieldError, MgmtRequest, Reply, StatusFacts,
};
use weir_core::rate::{ClientKey, RateParams};
use weir_core::request_id::request_id_in_force;
use weir_core::runtime::Runtime;

use crate::base::error_chain::chain;
use crate::base::exposition::Listener;
use crate::base::rt::{self, Listener as RtListener, Rt, watch};
use crate::base::worker;
use crate::control::reload;
use crate::datapath::server;
use crate::observe::access_log::{self, Line};
use crate::observe::metrics::{self, ReloadSource};
use crate::services::state::ProxyState;

mod answer;
use answer::{MgmtResponse, insert_rid, json, problem, reply};

/// How long a mutating request's body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Most bytes of the synthetic request's response body shown by `/api/dashboard/request`.
const DASHBOARD_BODY_BYTES: usize = 4096;

/// Why a dashboard action that needs the data plane or the store failed: the problem's
/// message is [`chain`] of it.
#[derive(Debug, thiserror::Error)]
enum DashboardError {
    /// `POST /api/dashboard/limit`: the store in force did not set the bucket.
    #[error("the rate-limit store did not answer")]
    Store(#[source] weir_storage::StoreError),
    /// `GET /api/dashboard/request`: the in-process exchange with the data plane failed.
    #[error("synthetic request")]
    Synthetic(#[source] hyper::Error),
    /// `GET /api/dashboard/request`: no answer within `management.write_timeout`.
    #[error("synthetic request timed out after {}", mgmt::format_duration(*.0))]
    TimedOut(Duration),
}

/// Serve the management listener until `shutdown`.
pub async fn serve(
    listener: Box<dyn RtListener>,
    proxy_state: Arc<ProxyState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = proxy_state.data_plane.rt;
    let mut builder = http1::Builder::new();
    builder
        .timer(rt)
        .header_read_timeout(proxy_state.data_plane.limits.read_header_timeout);
    // Its own cap (`conn_limits::MANAGEMENT_MAX_CONNECTIONS`): a flood on the data plane never takes
    // management's descriptors, nor the other way round.
    let limit = Arc::clone(&proxy_state.connections.management);
    let mut acceptor = server::accept::Acceptor::new(rt, &*listener, limit);
    while let Some((stream, peer, permit)) = acceptor.next(&mut shutdown).await {
        let Ok(stream) = rt.register(stream) else {
            continue;
        };
        let proxy_state = Arc::clone(&proxy_state);
        let conn = builder.serve_connection(
            stream,
            service_fn(move |req| {
                let proxy_state = Arc::clone(&proxy_state);
                async move { Ok::<_, Infallible>(handle(&proxy_state, peer, req).await) }
            }),
        );
        rt.spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
}

/// One management request (module doc).
pub async fn handle(
    proxy_state: &Arc<ProxyState>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> MgmtResponse {
    let started = proxy_state.data_plane.rt.now();
    let (rid, _) = worker::with_rng(|rng| request_id_in_force(req.headers(), rng));
    let (parts, body) = req.into_parts();
    let rt = proxy_state.data_plane.runtime();
    let client = resolve_client(peer.ip(), &parts.headers, rt.trusted_proxies()).client;
    let mutation = parts.method != Method::GET && parts.method != Method::HEAD;
    let endpoint = mgmt::route(&parts.method, parts.uri.path())
        .ok()
        .map(|e| e.name());

    let response = {
        let access = Access::of(&rt);
        let unauthenticated = MgmtRequest {
            method: &parts.method,
            path: parts.uri.path(),
            headers: &parts.headers,
            body: &[],
            client,
        };
        match mgmt::authorize(&unauthenticated, access.token, access.allow_insecure) {
            // C-MGMT-1: refused before anything else looks at the request; the body is not read.
            Err(e) => reply(&Reply::Refused(e), rid.as_str()),
            // The management API's own OpenAPI document.
            Ok(()) if crate::control::console::is_openapi(&parts.method, parts.uri.path()) => {
                crate::control::console::openapi_response(rid.as_str())
            }
            Ok(()) => {
                let body = if mutation {
                    read_body(proxy_state.data_plane.rt, body).await
                } else {
                    Ok(Bytes::new())
                };
                match body {
                    Err(message) => problem(400, message, Vec::new(), rid.as_str()),
                    Ok(body) => {
                        let req = Authorized {
                            parts: &parts,
                            body: &body,
                            client,
                            peer,
                            rid: rid.as_str(),
                        };
                        if mutation {
                            // One change at a time, built from the runtime in force (C-CONF-8).
                            let _one_at_a_time = proxy_state.control.lock().await;
                            let rt = proxy_state.data_plane.runtime();
                            execute(proxy_state, &rt, &req).await
                        } else {
                            execute(proxy_state, &rt, &req).await
                        }
                    }
                }
            }
        }
    };

    let seen = Seen {
        parts: &parts,
        rid: rid.as_str(),
        client,
        endpoint,
        mutation,
    };
    account(proxy_state, &rt, &seen, &response, started);
    response
}

/// What [`account`] needs of a management request.
struct Seen<'a> {
    parts: &'a http::request::Parts,
    rid: &'a str,
    client: IpAddr,
    endpoint: Option<&'static str>,
    mutation: bool,
}

/// A management request's metrics (refused mutations; C-OBS-1) and access line.
fn account(
    proxy_state: &ProxyState,
    rt: &Runtime,
    seen: &Seen<'_>,
    response: &MgmtResponse,
    started: std::time::Instant,
) {
    let status = response.status().as_u16();
    if seen.mutation && status >= 400 {
        // Every refused mutation is counted (and logged below: mutations always are).
        proxy_state
            .data_plane
            .metrics
            .rejected_mutation(seen.endpoint.unwrap_or("unknown"));
        if seen.endpoint == Some("patch_config") && status == 400 {
            proxy_state
                .data_plane
                .metrics
                .reload(ReloadSource::Management, false);
        }
    }
    let elapsed = proxy_state
        .data_plane
        .rt
        .now()
        .saturating_duration_since(started);
    proxy_state
        .data_plane
        .metrics
        .request(Listener::Management, status, elapsed, None);
    let server = &rt.config().server;
    let log = worker::with_rng(|rng| {
        access_log::should_log(status, seen.mutation, server.access_log_sample_rate, rng)
    });
    if log {
        Line {
            request_id: seen.rid,
            listener: Listener::Management,
            method: &seen.parts.method,
            path: seen.parts.uri.path(),
            include_path: server.access_log_include_path,
            status,
            duration: elapsed,
            head_duration: None,
            backend: None,
            attempts: 0,
            client: seen.client,
            endpoint: seen.endpoint,
            version: seen.parts.version,
            scheme: "http",
            host: seen
                .parts
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok()),
            route: None,
            reason: (status >= 400).then(|| crate::observe::events::management_reason(status)),
            upstream_status: None,
            grpc_status: None,
            request_bytes: None,
            response_bytes: hyper::body::Body::size_hint(response.body()).exact(),
        }
        .emit();
    }
}

/// An authenticated request, its body read.
struct Authorized<'a> {
    parts: &'a http::request::Parts,
    body: &'a [u8],
    client: IpAddr,
    peer: SocketAddr,
    rid: &'a str,
}

/// `mgmt::handle` against `rt`, and what its decision asks for.
async fn execute(
    proxy_state: &Arc<ProxyState>,
    rt: &Arc<Runtime>,
    req: &Authorized<'_>,
) -> MgmtResponse {
    let now = proxy_state.data_plane.clock.now();
    let mreq = MgmtRequest {
        method: &req.parts.method,
        path: req.parts.uri.path(),
        headers: &req.parts.headers,
        body: req.body,
        client: req.client,
    };
    let decision = worker::with_rng(|rng| mgmt::handle(&mreq, rt, now, rng));
    match decision {
        Decision::Read(endpoint) => read(proxy_state, rt, &endpoint, req).await,
        Decision::Reply(r) => reply(&r, req.rid),
        Decision::RefillBucket {
            key,
            tokens,
            reply: r,
        } => match refill(proxy_state, key, tokens, &rt.config().rate).await {
            Ok(()) => reply(&r, req.rid),
            Err(e) => problem(503, &chain(&e).to_string(), Vec::new(), req.rid),
        },
        Decision::Publish { runtime, reply: r } => {
            let result = reload::install(proxy_state, rt, *runtime).await;
            // A rejection is counted with every other refused PATCH in `handle`.
            if result.is_ok() {
                proxy_state
                    .data_plane
                    .metrics
                    .reload(ReloadSource::Management, true);
            }
            match result {
                Ok(()) => {
                    tracing::info!(
                        target: "weir::reload",
                        source = "management",
                        request_id = req.rid,
                        "configuration change applied"
                    );
                    reply(&r, req.rid)
                }
                Err(e) => {
                    reload::log_rejected("management", None, &e);
                    let errors = e
                        .errors()
                        .into_iter()
                        .map(|message| FieldError {
                            path: String::new(),
                            message,
                        })
                        .collect();
                    problem(400, "change rejected", errors, req.rid)
                }
            }
        }
    }
}

/// Which cause holds, in words and by name: core's wording, as the data plane's.
fn not_ready_message(proxy_state: &ProxyState) -> &'static str {
    proxy_state
        .data_plane
        .services
        .not_ready_reason(
            &proxy_state.data_plane.runtime(),
            proxy_state.data_plane.clock.now(),
        )
        // Became ready between the two reads.
        .map_or("not ready a moment ago (transient); retry", |c| c.message())
}

/// The read endpoints (C-MGMT-4, C-OBS-1, C-OBS-4).
async fn read(
    proxy_state: &Arc<ProxyState>,
    rt: &Runtime,
    endpoint: &Endpoint,
    req: &Authorized<'_>,
) -> MgmtResponse {
    match endpoint {
        Endpoint::Healthz => json(
            StatusCode::OK,
            Bytes::from_static(b"{\"status\":\"ok\"}"),
            req.rid,
        ),
        Endpoint::Readyz if proxy_state.data_plane.ready() => json(
            StatusCode::OK,
            Bytes::from_static(b"{\"status\":\"ready\"}"),
            req.rid,
        ),
        Endpoint::Readyz => problem(503, not_ready_message(proxy_state), Vec::new(), req.rid),
        Endpoint::Metrics => {
            let body = crate::control::scrape::render(proxy_state);
            let mut resp = Response::new(Full::new(Bytes::from(body)));
            let h = resp.headers_mut();
            h.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            h.insert(
                http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-store"),
            );
            insert_rid(h, req.rid);
            resp
        }
        Endpoint::Status => {
            let now = proxy_state.data_plane.clock.now();
            let gate = proxy_state.data_plane.admission.gate();
            let dns: Vec<mgmt::DnsFacts> = proxy_state
                .data_plane
                .metrics
                .dns_pools()
                .into_iter()
                .filter_map(|(pool, d)| {
                    let (at, result) = d.last?;
                    let at_unix_ms = at
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
                    Some(mgmt::DnsFacts {
                        pool,
                        at_unix_ms,
                        result,
                    })
                })
                .collect();
            let facts = StatusFacts {
                instance_id: proxy_state.control.instance_id(),
                ready: proxy_state.data_plane.ready(),
                client: req.client,
                bucket: bucket_facts(proxy_state, &rt.config().rate, req.client).await,
                gate_in_flight: gate.in_flight(),
                gate_queued: gate.queued(),
                dns: &dns,
            };
            let doc = mgmt::status_document(rt, &facts, now);
            match serde_json::to_vec(&doc) {
                Ok(body) => json(StatusCode::OK, Bytes::from(body), req.rid),
                Err(e) => problem(
                    500,
                    &format!("cannot encode the status: {e}"),
                    Vec::new(),
                    req.rid,
                ),
            }
        }
        Endpoint::DashboardRequest => {
            let timeout = rt.config().management.write_timeout;
            match dashboard_request(proxy_state, req, timeout).await {
                Ok(v) => json(StatusCode::OK, Bytes::from(v.to_string()), req.rid),
                Err(e) => problem(502, &chain(&e).to_string(), Vec::new(), req.rid),
            }
        }
        // `mgmt::handle` answers mutations itself; a read decision never names one.
        _ => reply(
            &Reply::Refused(weir_core::response::ManagementError::NotFound),
            req.rid,
        ),
    }
}

/// The caller's bucket, read without taking a token from the store in force (C-MGMT-4). A
/// store that cannot answer reads as empty, marked degraded.
async fn bucket_facts(proxy_state: &ProxyState, rate: &RateParams, client: IpAddr) -> BucketFacts {
    if !rate.enabled() {
        return BucketFacts::default();
    }
    let key = rate.key().key(client);
    let degraded = proxy_state.data_plane.rate_limit_status().degraded;
    match proxy_state
        .data_plane
        .limiter
        .peek(key, rate, proxy_state.data_plane.clock.now())
        .await
    {
        Ok(milli) => BucketFacts {
            tokens: milli / 1000,
            degraded,
        },
        Err(_) => BucketFacts {
            tokens: 0,
            degraded: true,
        },
    }
}

/// `POST /api/dashboard/limit`: make `key`'s bucket hold `tokens` tokens in the store in force
/// (and the local one). A shared-store failure answers `503` with what happened.
async fn refill(
    proxy_state: &ProxyState,
    key: ClientKey,
    tokens: u64,
    rate: &RateParams,
) -> Result<(), DashboardError> {
    proxy_state
        .data_plane
        .limiter
        .set_tokens(key, rate, tokens, proxy_state.data_plane.clock.now())
        .await
        .map_err(DashboardError::Store)
}

/// Read at most `mgmt::MAX_BODY_BYTES + 1` bytes of a body (C-MGMT-2: one byte more shows an
/// oversized body without reading it to the end).
async fn read_body(rt: Rt, mut body: Incoming) -> Result<Bytes, &'static str> {
    let limit = mgmt::MAX_BODY_BYTES + 1;
    let mut out = BytesMut::new();
    let read = async {
        while out.len() < limit {
            match body.frame().await {
                None => break,
                Some(Err(_)) => return Err("request body could not be read"),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let room = limit - out.len();
                        out.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
            }
        }
        Ok(())
    };
    match rt::timeout(rt, BODY_TIMEOUT, read).await {
        Ok(Ok(())) => Ok(out.freeze()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("request body timed out"),
    }
}

/// `GET /api/dashboard/request` (module doc).
async fn dashboard_request(
    proxy_state: &Arc<ProxyState>,
    req: &Authorized<'_>,
    timeout: Duration,
) -> Result<serde_json::Value, DashboardError> {
    let rt = proxy_state.data_plane.rt;
    let (near, far) = rt::duplex(64 * 1024);
    let as_from = SocketAddr::new(req.client, req.peer.port());
    let server = rt::spawn_handle(
        rt,
        server::serve_in_process(Arc::clone(&proxy_state.data_plane), as_from, far),
    );
    let exchange = async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(near)
            .await
            .map_err(DashboardError::Synthetic)?;
        let conn = rt::spawn_handle(rt, conn);
        let mut synthetic = Request::new(Empty::<Bytes>::new());
        *synthetic.uri_mut() = http::Uri::from_static("/");
        // HTTP/1.0: a request without `Host` (HTTP/1.1 requires one, C-PATH-12), so the backend
        // gets its own authority as `Host`, as for any client that sent none.
        *synthetic.version_mut() = http::Version::HTTP_10;
        *synthetic.headers_mut() = mgmt::dashboard_forward_headers(&req.parts.headers);
        let started = rt.now();
        let resp = sender
            .send_request(synthetic)
            .await
            .map_err(DashboardError::Synthetic)?;
        let head_after = rt.now().saturating_duration_since(started);
        let (parts, mut body) = resp.into_parts();
        let mut text = BytesMut::new();
        let mut truncated = false;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data() {
                let room = DASHBOARD_BODY_BYTES - text.len();
                if data.len() > room {
                    text.extend_from_slice(&data[..room]);
                    truncated = true;
                    break;
                }
                text.extend_from_slice(&data);
            }
        }
        drop(sender);
        drop(conn);
        Ok::<_, DashboardError>(summary(&parts, head_after, &text, truncated))
    };
    let result = rt::timeout(rt, timeout, exchange).await;
    drop(server);
    match result {
        Ok(r) => r,
        Err(_) => Err(DashboardError::TimedOut(timeout)),
    }
}

/// The JSON answer of `/api/dashboard/request`.
fn summary(
    parts: &http::response::Parts,
    head_after: Duration,
    body: &[u8],
    truncated: bool,
) -> serde_json::Value {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut headers = serde_json::Map::new();
    for name in parts.headers.keys() {
        if name == http::header::SET_COOKIE {
            continue;
        }
        let values: Vec<&str> = parts
            .headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        headers.insert(name.as_str().to_owned(), values.join(", ").into());
    }
    serde_json::json!({
        "status": parts.status.as_u16(),
        "backend": header("x-balancer-backend"),
        "attempts": header("x-balancer-attempts").and_then(|a| a.parse::<u32>().ok()),
        "request_id": header("x-request-id"),
        "duration_ms": head_after.as_secs_f64() * 1000.0,
        "headers": headers,
        "body": String::from_utf8_lossy(body),
        "body_truncated": truncated,
    })
}
