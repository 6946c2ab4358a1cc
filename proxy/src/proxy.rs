//! The request handler: one request through weir-core's machines in the C-PATH-2 order.
//!
//! ```text
//! header limits (server.rs) → smuggling guard → /healthz, /readyz → request id → global gate
//!   → client address → rate limit → route → body (buffer or stream) → Flow::start
//!   → attempts (per-try header deadline) ⇄ retry decisions → deliver / fail / reject
//! ```
//!
//! Every decision is weir-core's: the request id ([`request_id_in_force`]), admission
//! ([`Admission`](crate::admission::Admission) over `admission::Gate`), the client address
//! ([`resolve_client`]), the rate limit ([`Limiter`](crate::ratelimit::Limiter) over
//! `rate::LocalStore`), the route and selection context ([`Runtime::target`],
//! [`Runtime::pick_context`]), every attempt, retry and final answer ([`Flow`]), the upstream
//! URI ([`BackendBase::upstream_uri`](weir_core::upstream::BackendBase::upstream_uri)), the
//! header rewrites ([`strip_hop_by_hop`], [`rewrite_forwarding`]) and every response weir makes
//! ([`SyntheticResponse`], [`delivered_headers`]). This module performs IO and copies values.
//!
//! Cancellation: hyper drops this future when the client goes away (C-PATH-9). Whatever it
//! holds is released by `Drop`: a queued gate ticket leaves the queue, the flow releases its
//! slot without recording a failure (a client cancellation is neutral, C-RETRY-8), and the
//! in-flight upstream request is dropped, which makes hyper close that upstream connection.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, EXPECT, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use weir_core::flow::{
    Action, AttemptError, BodyEnd, Deliver, Flow, RequestMeta, valid_upstream_status,
};
use weir_core::forward::{
    forwarded_proto, resolve_client, rewrite_forwarding, strip_hop_by_hop, wants_upgrade,
};
use weir_core::rate::{HeaderText, RateOutcome};
use weir_core::request_id::{RequestId, X_REQUEST_ID, request_id_in_force};
use weir_core::response::{
    ClientError, ProtectionReason, Reject, SyntheticResponse, Text, delivered_headers, header,
};
use weir_core::retry::{BodyKind, RetryPolicy};
use weir_core::upstream::BackendBase;

use crate::access_log::{self, Trace};
use crate::admission::Permit;
use crate::body::{Delivered, ResBody};
use crate::metrics::{AttemptOutcome, AttemptTimer, Listener};
use crate::ratelimit::RateCheck;
use crate::rt::{self, Elapsed};
use crate::server::{ConnCtx, RequestGuard};
use crate::upstream::{ClientBody, Conn, SendError, Target, UpBody};
use crate::worker;

/// `X-Balancer-Backend-Attempt`.
const BACKEND_ATTEMPT: HeaderName = HeaderName::from_static(header::BACKEND_ATTEMPT);

/// The hyper service function of the data plane.
pub async fn handle(
    ctx: Arc<ConnCtx>,
    req: Request<Incoming>,
) -> Result<Response<ResBody>, Infallible> {
    let guard = RequestGuard::new(&ctx);
    let started = ctx.shared.rt.now();
    let mut pending = Pending {
        ctx: &ctx,
        started,
        method: req.method().clone(),
        uri: req.uri().clone(),
        trace: Trace::default(),
        done: false,
    };
    let resp = Handler {
        ctx: &ctx,
        started,
        trace: &pending.trace,
    }
    .run(req, guard)
    .await;
    pending.finish(resp.status().as_u16());
    Ok(resp)
}

/// Counts and logs a request once its response head is ready (C-OBS-1..3), or, when hyper
/// drops the handler first (the client went away), as `499` (nginx's "client closed request").
struct Pending<'a> {
    ctx: &'a Arc<ConnCtx>,
    started: std::time::Instant,
    method: Method,
    uri: Uri,
    trace: Trace,
    done: bool,
}

impl Pending<'_> {
    fn finish(&mut self, status: u16) {
        self.done = true;
        let elapsed = self
            .ctx
            .shared
            .rt
            .now()
            .saturating_duration_since(self.started);
        let shared = &self.ctx.shared;
        shared.metrics.request(Listener::Public, status, elapsed);
        let rt = shared.runtime.load();
        let server = &rt.config().server;
        let log = worker::with_rng(|rng| {
            access_log::should_log(status, false, server.access_log_sample_rate, rng)
        });
        if !log {
            return;
        }
        let backend = self.trace.backend();
        access_log::Line {
            request_id: self.trace.request_id().map_or("", RequestId::as_str),
            listener: Listener::Public,
            method: &self.method,
            path: self.uri.path(),
            include_path: server.access_log_include_path,
            status,
            duration: elapsed,
            backend: backend.as_deref().map(crate::metrics::BackendMetrics::id),
            attempts: self.trace.attempts(),
            client: self.trace.client().unwrap_or_else(|| self.ctx.peer.ip()),
            endpoint: None,
        }
        .emit();
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(499);
        }
    }
}

/// What a response needs from the request: its id and, once known, its rate-limit outcome.
struct Answer {
    rid: RequestId,
    rid_value: HeaderValue,
    rate: Option<RateOutcome>,
}

struct Handler<'a> {
    ctx: &'a Arc<ConnCtx>,
    started: std::time::Instant,
    /// What the access log needs to know (client, backend, attempts).
    trace: &'a Trace,
}

impl Handler<'_> {
    async fn run(&self, mut req: Request<Incoming>, guard: RequestGuard) -> Response<ResBody> {
        let shared = &self.ctx.shared;
        let clock = shared.clock;

        // C-PATH-3: the id in force, needed by every answer from here on.
        let (rid, origin) = worker::with_rng(|rng| request_id_in_force(req.headers(), rng));
        self.trace.set_request_id(rid);
        let rid_value = if origin.is_kept() {
            req.headers()
                .get(&X_REQUEST_ID)
                .cloned()
                .unwrap_or_else(|| rid.to_header_value())
        } else {
            rid.to_header_value()
        };
        let mut answer = Answer {
            rid,
            rid_value,
            rate: None,
        };

        // C-PATH-12: an ambiguous framing or Host → 400 and close, nothing upstream.
        if let Err(e) = self.ctx.framing_verdict() {
            return client_error(ClientError::Framing(e), &answer, guard);
        }

        // TRACE → 405 unless `server.allow_trace` (weir_core::method, docs/proxy.md).
        let allow_trace = shared.runtime.load().config().server.allow_trace;
        if let Err(refused) = weir_core::method::check(req.method(), allow_trace) {
            return client_error(refused, &answer, guard);
        }

        // C-PATH-1, C-OBS-4: served here, past neither the gate nor the limiter (C-PATH-2).
        match req.uri().path() {
            "/healthz" => return status_json(StatusCode::OK, "ok", &answer, guard),
            "/readyz" => {
                return if shared.ready() {
                    status_json(StatusCode::OK, "ready", &answer, guard)
                } else {
                    client_error(ClientError::NotReady, &answer, guard)
                };
            }
            _ => {}
        }

        // C-LOAD-1: the global gate, before anything that costs (the store call included).
        let permit = match shared.admission.admit().await {
            Ok(p) => p,
            Err(why) => {
                return self.reject(&Reject::Overloaded(why), &answer, guard);
            }
        };

        // C-FWD-1: the client address; C-FWD-2: the scheme a trusted peer reported.
        let (resolution, rate_params, proto) = {
            let rt = shared.runtime.load();
            let r = resolve_client(self.ctx.peer.ip(), req.headers(), rt.trusted_proxies());
            let proto = forwarded_proto(r.peer_trusted, req.headers());
            (r, rt.config().rate.clone(), proto)
        };
        self.trace.set_client(resolution.client);

        // C-RATE-1, C-RATE-2: one token, after the gate so an overload 503 costs none.
        let check = shared
            .limiter
            .check(&rate_params, resolution.client, || clock.now())
            .await;
        match check {
            RateCheck::Off => {}
            RateCheck::Outcome(o) if o.is_allowed() => answer.rate = Some(o),
            RateCheck::Outcome(o) => return self.reject(&Reject::RateLimited(o), &answer, guard),
            RateCheck::StoreUnavailable => {
                return self.reject(&Reject::StoreUnavailable, &answer, guard);
            }
        }

        // Targets that cannot be proxied (authority-form, `*` without OPTIONS): 400.
        let method = req.method().clone();
        let raw_target = req
            .uri()
            .path_and_query()
            .map_or("", http::uri::PathAndQuery::as_str);
        if !raw_target.starts_with('/')
            && let Err(e) = validation_base().upstream_uri(&method, raw_target)
        {
            let error = match e {
                weir_core::upstream::UpstreamUriError::AsteriskWithoutOptions => {
                    ClientError::AsteriskWithoutOptions
                }
                _ => ClientError::UnsupportedTarget,
            };
            return client_error(error, &answer, guard);
        }

        // C-ROUTE-1: route on the raw path; the selection context for the route's pool.
        let (flow_target, pick, retry, budget) = {
            let rt = shared.runtime.load();
            let (target, m) = rt.target(req.uri().path());
            let pick = rt.pick_context(m.pool, worker::index(), resolution.client, req.headers());
            (
                target,
                pick,
                Arc::clone(rt.retry()),
                Arc::clone(rt.budget()),
            )
        };

        // C-PATH-8: keep the client's upgrade handle before the request is taken apart.
        let upgrading = wants_upgrade(req.headers());
        let client_upgrade = upgrading.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();

        // C-RETRY-1: a body with a Content-Length within `body_limit` is buffered (replayable)
        // when the method may be retried; any other body streams.
        let read_deadline = shared.limits.read_timeout.map(|t| self.started + t);
        // Raised when reading the client's streamed body fails (only streamed bodies need it).
        let mut client_failed: Option<Arc<AtomicBool>> = None;
        let mut watch_client = || Arc::clone(client_failed.get_or_insert_with(Arc::default));
        let (body_kind, source) = if body.is_end_stream() {
            (BodyKind::None, Source::Empty)
        } else if let Some(n) = body.size_hint().exact() {
            if n <= retry.body_limit() && retry.allows_method(method.as_str()) {
                match buffer(shared.rt, body, read_deadline).await {
                    Ok(bytes) => (BodyKind::Sized(n), Source::Full(bytes)),
                    Err(error) => return client_error(error, &answer, guard),
                }
            } else {
                (
                    BodyKind::Sized(n),
                    Source::Stream(Some(ClientBody::new(
                        shared.rt,
                        body,
                        watch_client(),
                        read_deadline,
                    ))),
                )
            }
        } else {
            (
                BodyKind::Streaming,
                Source::Stream(Some(ClientBody::new(
                    shared.rt,
                    body,
                    watch_client(),
                    read_deadline,
                ))),
            )
        };

        // C-PATH-6, C-FWD-2, C-PATH-3: the upstream headers, once for every attempt.
        let inbound_host = parts.headers.get(HOST).cloned().or_else(|| {
            parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        let mut headers = std::mem::take(&mut parts.headers);
        strip_hop_by_hop(&mut headers, upgrading);
        rewrite_forwarding(&mut headers, resolution.client, inbound_host.clone(), proto);
        headers.insert(X_REQUEST_ID, answer.rid_value.clone());
        // The body is already accepted from the client; the backend gets it as it is.
        headers.remove(EXPECT);
        if !headers.contains_key(HOST)
            && let Some(host) = inbound_host
        {
            headers.insert(HOST, host);
        }

        let meta = RequestMeta {
            method: method.clone(),
            body: body_kind,
            ctx: pick,
        };
        // The request's own start: its deadlines count from its arrival.
        let (flow, action) = worker::with_rng(|rng| {
            Flow::start(
                flow_target,
                &retry,
                &budget,
                meta,
                clock.at(self.started),
                rng,
            )
        });
        let replayable = retry.allows_method(method.as_str()) && retry.body_replayable(body_kind);
        let attempts = Attempts {
            handler: self,
            method,
            uri: parts.uri,
            headers: Some(headers),
            source,
            client_failed,
            replayable,
            max_attempts: retry.max_attempts(),
            retry,
        };
        attempts
            .run(flow, action, answer, permit, guard, client_upgrade)
            .await
    }

    fn reject(&self, reject: &Reject, answer: &Answer, guard: RequestGuard) -> Response<ResBody> {
        count_protection(&self.ctx.shared, reject.protection_reason());
        synthetic(
            &SyntheticResponse::reject(reject, answer.rid.as_str()),
            answer,
            guard,
        )
    }
}

/// The request body as the attempts send it.
enum Source {
    Empty,
    Full(Bytes),
    Stream(Option<ClientBody>),
}

/// Everything the attempt loop needs.
struct Attempts<'h, 'a> {
    handler: &'h Handler<'a>,
    method: Method,
    uri: Uri,
    headers: Option<HeaderMap>,
    source: Source,
    client_failed: Option<Arc<AtomicBool>>,
    /// Whether a retry is possible at all (method and body, C-RETRY-1).
    replayable: bool,
    max_attempts: u32,
    /// Classifies attempt outcomes for the metrics (`retry.statuses`).
    retry: Arc<RetryPolicy>,
}

impl Attempts<'_, '_> {
    /// Perform the flow's actions until a final one (C-RETRY-1..6).
    async fn run(
        mut self,
        mut flow: Flow,
        mut action: Action,
        answer: Answer,
        permit: Permit,
        guard: RequestGuard,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ResBody> {
        let shared = &self.handler.ctx.shared;
        let clock = shared.clock;
        let mut last: Option<(Response<Incoming>, Conn, Arc<Target>)> = None;
        loop {
            match action {
                Action::Attempt(a) | Action::Retry(a) => {
                    // C-RETRY-6: the previous response is dropped unread; hyper closes its
                    // connection, and its slot was already released by the flow.
                    last = None;
                    let (Some(id), Some(url)) = (flow.backend_id(), flow.backend_url()) else {
                        return internal_error(&answer, guard);
                    };
                    // C-OBS-1: the backend's pre-built handles (no lock, no label hashing).
                    let metrics = shared.metrics.backend(id);
                    if a.panic
                        && let Some(m) = &metrics
                    {
                        m.panic_selection();
                    }
                    self.handler.trace.set_attempt(metrics.clone(), a.attempt);
                    let target = match shared.upstream.target(id, url) {
                        Ok(t) => t,
                        Err(_) => {
                            if let Some(m) = &metrics {
                                m.attempt(AttemptOutcome::ConnectError, Duration::ZERO);
                            }
                            let now = clock.now();
                            action = worker::with_rng(|rng| {
                                flow.handle_error(AttemptError::Connect, now, rng)
                            });
                            continue;
                        }
                    };
                    let last_attempt = !self.replayable || a.attempt >= self.max_attempts;
                    let req = match self.request(&target, last_attempt) {
                        Ok(r) => r,
                        Err(error) => return client_error(error, &answer, guard),
                    };
                    let begun = shared.rt.now();
                    let mut deadline = clock.deadline(a.header_deadline);
                    if let Some(t) = shared.response_header_timeout {
                        deadline = deadline.min(begun + t);
                    }
                    let timer = AttemptTimer::start(shared.rt, metrics, begun);
                    let sent = rt::timeout_at(
                        shared.rt,
                        deadline,
                        shared.upstream.send(&target, req, begun),
                    )
                    .await;
                    let ended = shared.rt.now();
                    let now = clock.at(ended);
                    timer.finish(self.outcome(&sent), ended);
                    action = match sent {
                        Ok(Ok((resp, conn))) => {
                            let status = resp.status().as_u16();
                            last = Some((resp, conn, target));
                            worker::with_rng(|rng| flow.handle_response_head(status, now, rng))
                        }
                        Ok(Err(e)) => {
                            let kind = match e {
                                SendError::Connect(_) => AttemptError::Connect,
                                SendError::Transport(_)
                                    if self
                                        .client_failed
                                        .as_ref()
                                        .is_some_and(|f| f.load(Ordering::Relaxed)) =>
                                {
                                    AttemptError::ClientGone
                                }
                                SendError::Transport(_) => AttemptError::Transport,
                            };
                            tracing::debug!(backend = target.id(), error = %e, "upstream attempt failed");
                            worker::with_rng(|rng| flow.handle_error(kind, now, rng))
                        }
                        Err(_elapsed) => worker::with_rng(|rng| {
                            match flow.handle_timeout(now, rng) {
                                // The transport-level header timeout fired first.
                                Action::Nothing => {
                                    flow.handle_error(AttemptError::PerTryTimeout, now, rng)
                                }
                                a => a,
                            }
                        }),
                    };
                }
                Action::Deliver(d) => {
                    count_protection(shared, d.protection);
                    let Some((resp, conn, target)) = last.take() else {
                        return internal_error(&answer, guard);
                    };
                    return self.deliver(
                        d,
                        flow,
                        resp,
                        conn,
                        &target,
                        answer,
                        permit,
                        guard,
                        client_upgrade,
                    );
                }
                Action::Fail(f) => {
                    count_protection(shared, f.protection);
                    let s = SyntheticResponse::failure(&f, answer.rid.as_str());
                    return synthetic(&s, &answer, guard);
                }
                Action::Reject(r) => {
                    count_protection(shared, r.protection_reason());
                    let s = SyntheticResponse::reject(&r, answer.rid.as_str());
                    return synthetic(&s, &answer, guard);
                }
                Action::Abandon | Action::Nothing => {
                    // Abandon: the client is gone and nobody reads this. Nothing cannot follow
                    // an attempt; answer rather than loop.
                    return internal_error(&answer, guard);
                }
            }
        }
    }

    /// The metrics outcome of one attempt (C-OBS-1): what the flow is told, by the same rules.
    fn outcome(
        &self,
        sent: &Result<Result<(Response<Incoming>, Conn), SendError>, Elapsed>,
    ) -> AttemptOutcome {
        match sent {
            // A status outside 100..=599: the flow fails the attempt as an invalid response.
            Ok(Ok((resp, _))) if !valid_upstream_status(resp.status().as_u16()) => {
                AttemptOutcome::TransportError
            }
            Ok(Ok((resp, _))) if self.retry.is_retryable_status(resp.status().as_u16()) => {
                AttemptOutcome::FailureStatus
            }
            Ok(Ok(_)) => AttemptOutcome::Success,
            Ok(Err(SendError::Connect(_))) => AttemptOutcome::ConnectError,
            Ok(Err(SendError::Transport(_)))
                if self
                    .client_failed
                    .as_ref()
                    .is_some_and(|f| f.load(Ordering::Relaxed)) =>
            {
                AttemptOutcome::Cancelled
            }
            Ok(Err(SendError::Transport(_))) => AttemptOutcome::TransportError,
            Err(_) => AttemptOutcome::Timeout,
        }
    }

    /// The upstream request of one attempt to `target` (C-PATH-4, C-PATH-5).
    fn request(
        &mut self,
        target: &Target,
        last_attempt: bool,
    ) -> Result<Request<UpBody>, ClientError> {
        let uri = upstream_uri(target.base(), &self.method, &self.uri)?;
        let mut headers = if last_attempt {
            self.headers.take().unwrap_or_default()
        } else {
            self.headers.clone().unwrap_or_default()
        };
        headers.insert(BACKEND_ATTEMPT, target.id_value().clone());
        if !headers.contains_key(HOST) {
            headers.insert(HOST, target.host_header().clone());
        }
        let body = match &mut self.source {
            Source::Empty => UpBody::Empty,
            Source::Full(b) => UpBody::full(b.clone()),
            // A streamed body is never replayed (C-RETRY-1), so it is taken once.
            Source::Stream(s) => s.take().map_or(UpBody::Empty, UpBody::Stream),
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        Ok(req)
    }

    /// Pass a backend response on (C-RETRY-4, C-PATH-4, C-PATH-6, C-PATH-7) or tunnel an
    /// upgrade (C-PATH-8).
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &self,
        d: Deliver,
        mut flow: Flow,
        mut resp: Response<Incoming>,
        conn: Conn,
        target: &Target,
        answer: Answer,
        permit: Permit,
        guard: RequestGuard,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ResBody> {
        let shared = &self.handler.ctx.shared;
        let clock = shared.clock;
        let switching = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
        let backend_upgrade = switching.then(|| hyper::upgrade::on(&mut resp));
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers, switching);
        for (name, value) in delivered_headers(&d, target.id(), answer.rid.as_str()) {
            let value = match name {
                header::BACKEND => Some(target.id_value().clone()),
                header::REQUEST_ID => Some(answer.rid_value.clone()),
                _ => header_value(value),
            };
            if let Some(v) = value {
                parts.headers.insert(HeaderName::from_static(name), v);
            }
        }
        add_rate_headers(&mut parts.headers, answer.rate.as_ref());

        if let Some(backend_upgrade) = backend_upgrade {
            let Some(client_upgrade) = client_upgrade else {
                // A 101 the client did not ask for cannot be passed on.
                drop(flow);
                return client_error(ClientError::UnrequestedUpgrade, &answer, guard);
            };
            // C-PATH-12: the client's bytes are the tunnel's from now on, not requests.
            self.handler.ctx.framing_upgraded();
            let alive = self.handler.ctx.alive();
            shared.rt.spawn(async move {
                let _alive = alive;
                let _permit = permit;
                // The backend side upgrades when its connection future runs to the hand-over.
                let backend_side = async move {
                    if let Some(driver) = conn.into_driver() {
                        let _ = driver.await;
                    }
                    backend_upgrade.await
                };
                let end = match futures_util::future::try_join(client_upgrade, backend_side).await {
                    Ok((mut client, mut backend)) => {
                        match rt::copy_bidirectional(&mut client, &mut backend).await {
                            Ok(_) => BodyEnd::Complete,
                            Err(_) => BodyEnd::Error,
                        }
                    }
                    Err(_) => BodyEnd::Error,
                };
                // C-PATH-8: the slot is held until the tunnel closes.
                let _ = flow.handle_body_end(end, clock.now());
            });
            return Response::from_parts(parts, ResBody::empty(Some(guard)));
        }

        if body.is_end_stream() {
            // Nothing to stream (HEAD, 204, 304, empty): settle now.
            let now = shared.rt.now();
            let _ = flow.handle_body_end(BodyEnd::Complete, clock.at(now));
            shared.upstream.release(conn, now);
            drop(permit);
            return Response::from_parts(parts, ResBody::empty(Some(guard)));
        }
        let write_deadline = shared
            .limits
            .write_timeout
            .map(|t| self.handler.started + t);
        let delivered = Delivered::new(
            body,
            flow,
            conn,
            Arc::clone(&shared.upstream),
            clock,
            Some(permit),
            write_deadline,
        );
        Response::from_parts(parts, ResBody::upstream(delivered, Some(guard)))
    }
}

/// The origin-form URI of an attempt (C-PATH-5). For a backend without a path prefix and an
/// origin-form target this is the client's target itself (what [`BackendBase::upstream_uri`]
/// returns for it, byte for byte; checked by a test), without an allocation; otherwise core
/// joins the prefix and the raw target.
fn upstream_uri(base: &BackendBase, method: &Method, uri: &Uri) -> Result<Uri, ClientError> {
    let pq = uri.path_and_query();
    let raw = pq.map_or("/", http::uri::PathAndQuery::as_str);
    if base.path_prefix().is_empty() && raw.starts_with('/') {
        if uri.scheme().is_none() && uri.authority().is_none() {
            return Ok(uri.clone());
        }
        if let Some(pq) = pq {
            return Ok(Uri::from(pq.clone()));
        }
    }
    let full = base
        .upstream_uri(method, raw)
        .map_err(|_| ClientError::TargetTooLong)?;
    Ok(full
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone())))
}

/// A base used only to check request targets that are not origin-form.
fn validation_base() -> &'static BackendBase {
    static BASE: std::sync::OnceLock<Option<BackendBase>> = std::sync::OnceLock::new();
    // "http://validation.invalid" always parses; the fallback is never used.
    BASE.get_or_init(|| BackendBase::parse("http://validation.invalid").ok())
        .as_ref()
        .unwrap_or_else(|| unreachable_base())
}

#[cold]
fn unreachable_base() -> &'static BackendBase {
    static FALLBACK: std::sync::OnceLock<BackendBase> = std::sync::OnceLock::new();
    FALLBACK.get_or_init(|| match BackendBase::parse("http://localhost") {
        Ok(b) => b,
        Err(_) => std::process::abort(),
    })
}

/// Read a body of known length completely (it fits `retry.body_limit`), within `deadline`.
async fn buffer(
    rt: rt::Rt,
    body: Incoming,
    deadline: Option<std::time::Instant>,
) -> Result<Bytes, ClientError> {
    let collect = body.collect();
    let collected = match deadline {
        Some(d) => match rt::timeout_at(rt, d, collect).await {
            Ok(r) => r,
            Err(_) => return Err(ClientError::BodyTimeout),
        },
        None => collect.await,
    };
    collected
        .map(http_body_util::Collected::to_bytes)
        .map_err(|_| ClientError::BodyUnreadable)
}

/// Count a protection event (C-LOAD-3) in `load_balancer_protection_events_total{reason}`.
fn count_protection(shared: &crate::Shared, reason: Option<ProtectionReason>) {
    if let Some(reason) = reason {
        shared.metrics.protection(reason);
    }
}

/// A response weir makes itself, as core spells it (C-PATH-11), with `X-Request-ID` and the
/// rate headers of an allowed request (C-RATE-1).
fn synthetic(s: &SyntheticResponse<'_>, answer: &Answer, guard: RequestGuard) -> Response<ResBody> {
    let mut resp = Response::new(ResBody::full(Bytes::from(s.body()), Some(guard)));
    *resp.status_mut() =
        StatusCode::from_u16(s.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    for (name, value) in s.headers() {
        let value = if name == header::REQUEST_ID {
            Some(answer.rid_value.clone())
        } else {
            value.to_header_value()
        };
        if let Some(v) = value {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    if s.status() != 429 {
        add_rate_headers(headers, answer.rate.as_ref());
    }
    resp
}

/// The C-RATE-1 headers of an allowed request.
fn add_rate_headers(headers: &mut HeaderMap, rate: Option<&RateOutcome>) {
    if let Some(rate) = rate {
        for (name, value) in rate.headers() {
            let value = match value {
                HeaderText::Static(s) => Some(HeaderValue::from_static(s)),
                other => header_value(Text::from(other)),
            };
            if let Some(v) = value {
                headers.insert(HeaderName::from_static(name), v);
            }
        }
    }
}

/// A header value as core's [`Text`] spells it; small integers (attempt numbers) and fixed
/// tokens come from static storage instead of a fresh allocation.
fn header_value(text: Text<'_>) -> Option<HeaderValue> {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match text {
        Text::Int(n) if n < 10 => Some(HeaderValue::from_static(SMALL[n as usize])),
        other => other.to_header_value(),
    }
}

/// An error of the request that no flow outcome covers, as core spells it (C-PATH-11).
fn client_error(error: ClientError, answer: &Answer, guard: RequestGuard) -> Response<ResBody> {
    synthetic(
        &SyntheticResponse::client_error(&error, answer.rid.as_str()),
        answer,
        guard,
    )
}

fn internal_error(answer: &Answer, guard: RequestGuard) -> Response<ResBody> {
    client_error(ClientError::Incomplete, answer, guard)
}

/// `/healthz` and `/readyz` when all is well.
fn status_json(
    status: StatusCode,
    word: &'static str,
    answer: &Answer,
    guard: RequestGuard,
) -> Response<ResBody> {
    let body = match word {
        "ok" => Bytes::from_static(b"{\"status\":\"ok\"}"),
        _ => Bytes::from_static(b"{\"status\":\"ready\"}"),
    };
    let mut resp = Response::new(ResBody::full(body, Some(guard)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(X_REQUEST_ID, answer.rid_value.clone());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C-PATH-5: the fast path (client target reused as is) equals core's join for a backend
    /// without a path prefix, byte for byte, for awkward targets too.
    #[test]
    fn c_path_5_fast_path_matches_core() {
        let base = BackendBase::parse("http://127.0.0.1:9000").expect("base");
        let prefixed = BackendBase::parse("http://127.0.0.1:9000/base/").expect("base");
        for target in [
            "/",
            "/a/%2F/b?x=%2E%2e&y",
            "//double//slash",
            "/a/../b",
            "/%252F?q=1#frag",
            "/?",
        ] {
            let uri: Uri = target.parse().expect("uri");
            let fast = upstream_uri(&base, &Method::GET, &uri).expect("fast");
            let core = base
                .upstream_uri(
                    &Method::GET,
                    uri.path_and_query().map_or("/", |p| p.as_str()),
                )
                .expect("core");
            assert_eq!(
                fast.path_and_query().map(|p| p.as_str()),
                core.path_and_query().map(|p| p.as_str()),
                "{target}"
            );
            let joined = upstream_uri(&prefixed, &Method::GET, &uri).expect("joined");
            assert!(
                joined
                    .path_and_query()
                    .is_some_and(|p| p.as_str().starts_with("/base/")),
                "{target}"
            );
            assert!(joined.scheme().is_none() && joined.authority().is_none());
        }
        // Absolute-form (and HTTP/2's scheme + authority) become origin-form upstream.
        let abs: Uri = "http://client.example/p?q=1".parse().expect("uri");
        let up = upstream_uri(&base, &Method::GET, &abs).expect("abs");
        assert_eq!(up.to_string(), "/p?q=1");
    }

    #[test]
    fn validation_base_rejects_connect_targets() {
        assert!(
            validation_base()
                .upstream_uri(&Method::CONNECT, "example.com:443")
                .is_err()
        );
        assert!(validation_base().upstream_uri(&Method::GET, "*").is_err());
        assert!(
            validation_base()
                .upstream_uri(&Method::OPTIONS, "*")
                .is_ok()
        );
    }
}
