//! The request handler: an IO loop around weir-core's request engine (`weir_core::exchange`,
//! docs/request-flow.md). It parses nothing the engine needs beyond hyper's head, feeds the
//! engine facts ([`Input`]) and performs its actions ([`Output`]): park at the gate, call the
//! rate-limit store, read the body for replay, send an attempt on a pooled or new upstream
//! connection, answer, deliver or stream a response, tunnel an upgrade, count metrics and write
//! the access log. Every wait is bounded by the engine's `poll_timeout`; every decision (request
//! id, health answers, gate, client address, rate limit, route, body policy,
//! retries, deadlines, outcome classification, response mapping) is the engine's.
//!
//! What this module still does with values: the upstream request's header rewrites as core
//! spells them ([`strip_hop_by_hop`], [`rewrite_forwarding`]), the upstream URI
//! ([`upstream_uri`], core's join with a copy-free fast path), and header values.
//!
//! Hedging (C-HEDGE-1): an attempt the engine may hedge runs as a race with its hedge
//! (`hedge`), each attempt on its own backend in its protocol.
//!
//! Cancellation: hyper drops this future when the client goes away (C-PATH-9). Its drop guard
//! feeds the engine `Input::ClientGone` and performs what follows (the attempt counted as
//! cancelled, the `499` record, a gate slot handed to the next waiter and announced); the
//! in-flight upstream request is dropped, which makes hyper close that upstream connection.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, EXPECT, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use weir_core::bucket::BucketParams;
use weir_core::exchange::{
    Answer, BodyInfo, Delivery, Head, Input, Output, Send, SendBody, SendFailure,
};
use weir_core::flow::BodyEnd;
use weir_core::forward::{rewrite_forwarding, strip_hop_by_hop};
use weir_core::rate::ClientKey;
use weir_core::request_id::X_REQUEST_ID;
use weir_core::response::{ClientError, SyntheticResponse, Text, header};

use crate::base::rt;
use crate::base::uri::upstream_uri;
use crate::base::worker;
use crate::datapath::downstream::{DownstreamCtx, DownstreamState, RequestGuard};
use crate::datapath::effects::{BodyTally, PendingLine, RequestBytes};
use crate::datapath::response_body::{Delivered, ResBody};
use crate::datapath::{drive, effects};
use crate::services::snapshot::Bound;
use crate::services::upstream::{
    ClientBody, Lent, Resumable, SendError, Taken, Target, UpBody, unindexed,
};

mod hedge;

/// `X-Balancer-Backend-Attempt`.
const BACKEND_ATTEMPT: HeaderName = HeaderName::from_static(header::BACKEND_ATTEMPT);
/// `grpc-status`.
const GRPC_STATUS: HeaderName = HeaderName::from_static(weir_core::grpc::STATUS);
/// `grpc-timeout`.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static(weir_core::grpc::timeout::NAME);

/// The hyper service function of the data plane.
pub async fn handle(
    ctx: Arc<DownstreamCtx>,
    state: Arc<DownstreamState>,
    mut req: Request<Incoming>,
) -> Result<Response<ResBody>, Infallible> {
    let guard = RequestGuard::new(&ctx, &state);
    let mut io = Io::new(&ctx, &req);
    // C-PATH-8: keep the client's upgrade handle before the request is taken apart.
    let client_upgrade = io
        .x()
        .upgrade_requested()
        .then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let mut up = Outgoing {
        headers: Some(parts.headers),
        prepared: false,
        body: Some(body),
        buffered: None,
        trailers: None,
        tally: None,
        handed: None,
        taken: None,
    };
    Ok(io.run(&mut up, guard, client_upgrade).await)
}

/// The request's exchange and what the IO around it needs; dropping it early (hyper dropped the
/// request: the client left) tells the engine so and performs what follows.
struct Io<'a> {
    ctx: &'a Arc<DownstreamCtx>,
    /// `None` once the exchange moved into the response body or a tunnel. Boxed: it moves
    /// into the response body, and the request's future would otherwise carry and copy it.
    x: Option<Box<Bound>>,
    method: Method,
    uri: Uri,
    /// `X-Request-ID` as sent on (the client's own value when kept, C-PATH-3).
    rid_value: HeaderValue,
    /// The HTTP version and `Host`, for the access log.
    version: http::Version,
    host: Option<HeaderValue>,
    /// The access-log line once the engine's record says to log, handed to the
    /// response body, which writes it at its end; and where its request bytes come from.
    line: Option<Box<PendingLine>>,
    body_bytes: Option<RequestBytes>,
    /// An output a hedged attempt's race took from the engine and left for [`Io::run`]
    /// (C-HEDGE-1).
    held: Option<Output>,
}

/// The upstream request being prepared, attempt after attempt.
struct Outgoing {
    headers: Option<HeaderMap>,
    prepared: bool,
    body: Option<Incoming>,
    buffered: Option<Bytes>,
    /// The buffered body's trailers, sent after it on every attempt.
    trailers: Option<Box<HeaderMap>>,
    /// The client's streamed body as read: bytes, and whether reading it failed (C-PATH-9).
    tally: Option<Arc<BodyTally>>,
    /// The streamed body handed to an HTTP/2 stream that may still be refused (C-RETRY-9).
    handed: Option<Resumable>,
    /// The streamed body taken back from a refused stream, for the next attempt.
    taken: Option<Taken>,
}

/// What the access-log line needs of the request (`effects::Request`).
fn log_request<'b>(
    method: &'b Method,
    uri: &'b Uri,
    version: http::Version,
    host: Option<&'b HeaderValue>,
) -> effects::Request<'b> {
    effects::Request {
        method,
        path: uri.path(),
        version,
        host: host.and_then(|h| h.to_str().ok()),
    }
}

/// The latest attempt's response head, its connection and its target.
type Last = Option<(Response<Incoming>, Lent, Arc<Target>)>;

impl Drop for Io<'_> {
    fn drop(&mut self) {
        let Some(x) = self.x.as_mut() else {
            return;
        };
        if !x.is_done() {
            let now = self.ctx.data_plane.clock.now();
            worker::with_rng(|rng| x.handle_input(Input::ClientGone, now, rng));
        }
        let request = log_request(&self.method, &self.uri, self.version, self.host.as_ref());
        effects::drain(&self.ctx.data_plane, x, Some(request));
    }
}

impl<'a> Io<'a> {
    fn new(ctx: &'a Arc<DownstreamCtx>, req: &Request<Incoming>) -> Io<'a> {
        let data_plane = &ctx.data_plane;
        let now = data_plane.clock.now();
        let uri = req.uri();
        let head = Head {
            method: req.method(),
            path: uri.path(),
            target: uri
                .path_and_query()
                .map_or("", http::uri::PathAndQuery::as_str),
            headers: req.headers(),
            peer: ctx.peer().ip(),
            tls: ctx.tls,
            body: body_info(req.body()),
            // Only HTTP/2 requests come here (HTTP/1 is weir's own codec): hyper's URI carries
            // `:scheme` and `:authority` (RFC 9113 §8.3.1, checked by the engine).
            authority: uri.authority().map(|a| weir_core::h2::Authority {
                https: uri.scheme() == Some(&http::uri::Scheme::HTTPS),
                value: a.as_str(),
            }),
        };
        let x = worker::with_rng(|rng| {
            let services = Arc::clone(&data_plane.services);
            Box::new(Bound::new(
                data_plane.snapshot.load_full(),
                services,
                &head,
                now,
                rng,
            ))
        });
        let mut rid_value = x
            .request_id_kept()
            .then(|| req.headers().get(&X_REQUEST_ID).cloned())
            .flatten()
            .unwrap_or_else(|| x.request_id().to_header_value());
        unindexed(&mut rid_value);
        Io {
            ctx,
            x: Some(x),
            method: req.method().clone(),
            uri: uri.clone(),
            rid_value,
            version: req.version(),
            host: req.headers().get(HOST).cloned().or_else(|| {
                uri.authority()
                    .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            }),
            line: None,
            body_bytes: None,
            held: None,
        }
    }

    /// The exchange (present until it moves into the response).
    fn x(&self) -> &Bound {
        match &self.x {
            Some(x) => x,
            None => unreachable_exchange(),
        }
    }

    /// Feed `input` now.
    fn feed(&mut self, input: Input) {
        let now = self.ctx.data_plane.clock.now();
        if let Some(x) = self.x.as_mut() {
            worker::with_rng(|rng| x.handle_input(input, now, rng));
        }
    }

    /// The next output that is not a side effect (those are performed on the way).
    fn next(&mut self) -> Option<Output> {
        if let Some(out) = self.held.take() {
            return Some(out);
        }
        let data_plane = &self.ctx.data_plane;
        let request = log_request(&self.method, &self.uri, self.version, self.host.as_ref());
        let x = self.x.as_mut()?;
        while let Some(out) = x.poll_output() {
            match effects::perform(data_plane, x, out, Some(request)) {
                Some(Output::Record(r)) => {
                    let mut line = effects::pending_line(data_plane, x, &r, request);
                    if let Some(bytes) = self.body_bytes.take() {
                        line.set_request_bytes(bytes);
                    }
                    self.line = Some(line);
                }
                Some(out) => return Some(out),
                None => {}
            }
        }
        None
    }

    /// Perform the engine's outputs until the response head.
    async fn run(
        &mut self,
        up: &mut Outgoing,
        guard: RequestGuard,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ResBody> {
        let mut last: Last = None;
        loop {
            let Some(out) = self.next() else {
                // The engine always ends in an answer or a delivery; answer rather than hang.
                return self.answer(Answer::Client(ClientError::Incomplete), guard);
            };
            match out {
                Output::GateWait { ticket } => self.gate_wait(ticket).await,
                Output::StoreTake { key, bucket } => self.store_take(key, bucket).await,
                Output::BufferBody { .. } => self.buffer(up).await,
                // A hedge is run by the race of the attempt it goes beside (C-HEDGE-1).
                Output::Send(s) if s.hedge => {}
                Output::Send(s) => {
                    // C-RETRY-6: the previous response is dropped unread (its connection closes).
                    drop(last.take());
                    last = if self.races(&s) {
                        // Boxed: the race's future does not grow the unhedged request's.
                        Box::pin(self.race(s, up)).await
                    } else {
                        self.send(s, up).await
                    };
                }
                Output::Mirror(m) => self.mirror(m, up),
                Output::Answer(a) => return self.answer(a, guard),
                Output::Deliver(d) => return self.deliver(&d, last.take(), guard, client_upgrade),
                _ => {}
            }
        }
    }

    /// `fut`, bounded by the engine's deadline (`drive::bounded`).
    async fn bounded<F: Future>(&mut self, fut: Pin<&mut F>) -> Option<F::Output> {
        let ctx = self.ctx;
        match self.x.as_mut() {
            Some(x) => drive::bounded(&ctx.data_plane, x, fut).await,
            None => unreachable_exchange(),
        }
    }

    /// C-LOAD-1: park until the slot is handed over or the queue deadline comes.
    async fn gate_wait(&mut self, ticket: u64) {
        let ctx = self.ctx;
        if let Some(x) = self.x.as_mut() {
            drive::gate_wait(&ctx.data_plane, x, ticket).await;
        }
    }

    /// C-RATE-3, C-RATE-5: one take from the shared store, bounded by `operation_timeout`.
    async fn store_take(&mut self, key: ClientKey, bucket: BucketParams) {
        let ctx = self.ctx;
        if let Some(x) = self.x.as_mut() {
            drive::store_take(&ctx.data_plane, x, key, bucket).await;
        }
    }

    /// C-RETRY-1: read the whole body for replay, bounded by `read_timeout`.
    async fn buffer(&mut self, up: &mut Outgoing) {
        let Some(body) = up.body.take() else {
            return self.feed(Input::BodyUnreadable);
        };
        let mut collect = pin!(body.collect());
        match self.bounded(collect.as_mut()).await {
            Some(Ok(c)) => {
                up.trailers = c.trailers().cloned().map(Box::new);
                let body = c.to_bytes();
                self.body_bytes = Some(RequestBytes::Known(body.len() as u64));
                up.buffered = Some(body);
                self.feed(Input::BodyBuffered);
            }
            Some(Err(_)) => self.feed(Input::BodyUnreadable),
            None => {}
        }
    }

    /// One attempt: a pooled or new connection to the engine's backend, the request, the head.
    /// The request is made once a connection takes it, so a connect error leaves its headers
    /// and body here for the next attempt (C-RETRY-9).
    async fn send(&mut self, s: Send, up: &mut Outgoing) -> Last {
        let ctx = self.ctx;
        let data_plane = &ctx.data_plane;
        // C-RETRY-10: a retry waits out its backoff first (hyper drops this future if the
        // client leaves meanwhile, C-PATH-9).
        let at = data_plane.clock.deadline(s.at);
        if at > data_plane.rt.now() {
            data_plane.rt.sleep_until(at).await;
        }
        // The request's snapshot, indexed by the engine's backend index (C-POOL-2).
        let handles = self.x().handles(s.backend);
        let Some((target, metrics)) =
            handles.and_then(|h| Some((h.target.clone()?, Arc::clone(&h.metrics))))
        else {
            self.feed(Input::SendFailed(SendFailure::Connect));
            return None;
        };
        if !up.prepared {
            self.prepare(up);
        }
        let Ok(uri) = upstream_uri(target.base(), &self.method, &self.uri) else {
            self.feed(Input::TargetTooLong);
            return None;
        };
        // The headers are given away, not copied, when no later attempt can need them: after
        // the last attempt; and, to an HTTP/1 backend, for a request that is not replayable,
        // whose only later attempt follows a connect error (C-RETRY-9), before they are
        // handed over. An HTTP/2 backend may refuse a stream it was handed (C-RETRY-9): they
        // are kept for it.
        let give = s.last || (!s.replayable && !target.protocol().is_h2());
        let begun = data_plane.rt.now();
        let client = ctx.downstream_ends();
        let method = self.method.clone();
        // C-GRPC-2: the backend is told what remains of the call's deadline, not the client's
        // whole timeout.
        let grpc_timeout = self
            .x()
            .upstream_grpc_timeout(s.at)
            .and_then(|t| HeaderValue::from_bytes(t.to_bytes().as_bytes()).ok())
            .map(|mut v| {
                unindexed(&mut v);
                v
            });
        let sent = {
            let make = || {
                let mut req = request(data_plane, method, uri, &target, &s, up, give);
                if let Some(v) = grpc_timeout {
                    req.headers_mut().insert(GRPC_TIMEOUT, v);
                }
                req
            };
            let mut sent = pin!(data_plane.upstream.send_lent_with(
                &target,
                Some(&metrics),
                make,
                begun,
                client
            ));
            self.bounded(sent.as_mut()).await
        };
        if let Some(t) = &up.tally {
            self.body_bytes = Some(RequestBytes::Streamed(Arc::clone(t)));
        }
        match sent? {
            Ok((resp, conn)) => {
                if let Some(handed) = up.handed.take() {
                    handed.answered();
                }
                let status = resp.status().as_u16();
                let end = resp.body().is_end_stream();
                self.feed(Input::response_head(
                    status,
                    resp.headers(),
                    end,
                    crate::base::clock::Clock::wall(),
                ));
                Some((resp, conn, target))
            }
            Err(_) if up.tally.as_ref().is_some_and(|t| t.timed_out()) => {
                // The client stopped sending its body: `408`, the backend not blamed.
                self.feed(Input::BodyTimeout);
                None
            }
            Err(e) => {
                tracing::debug!(backend = target.id(), error = %e, "upstream attempt failed");
                let failure = match e {
                    SendError::Connect(_) => SendFailure::Connect,
                    SendError::Saturated => SendFailure::Saturated,
                    // A streamed body handed to the refused stream is taken back, when what
                    // went to it was kept (at most `RESEND_LIMIT`); the refusal can be sent
                    // again only with the headers and the whole body still here.
                    SendError::Refused(_) => {
                        let body = match s.body {
                            SendBody::Stream { .. } => {
                                up.taken = up.handed.take().and_then(Resumable::take);
                                up.taken.is_some()
                            }
                            _ => true,
                        };
                        SendFailure::Refused {
                            held: up.headers.is_some() && body,
                        }
                    }
                    SendError::Transport(_) => SendFailure::Transport {
                        client_body_failed: up.tally.as_ref().is_some_and(|t| t.failed()),
                    },
                };
                self.feed(Input::SendFailed(failure));
                None
            }
        }
    }

    /// C-MIRROR-1: the mirror goes on its own task with a copy of the upstream headers and the
    /// buffered body (`datapath::mirror`); nothing here waits for it.
    fn mirror(&mut self, m: weir_core::exchange::MirrorSend, up: &mut Outgoing) {
        if !up.prepared {
            self.prepare(up);
        }
        let ctx = self.ctx;
        let copy = crate::datapath::mirror::Copy {
            method: &self.method,
            uri: &self.uri,
            headers: up.headers.clone().unwrap_or_default(),
            body: match m.body {
                SendBody::Buffered => up.buffered.clone().unwrap_or_default(),
                _ => Bytes::new(),
            },
            client: ctx.downstream_ends(),
        };
        let Some(x) = self.x.as_mut() else {
            return;
        };
        crate::datapath::mirror::spawn(&ctx.data_plane, x, m, copy);
    }

    /// C-PATH-6, C-FWD-1..3, C-PATH-3: the upstream headers, once for every attempt, from the
    /// engine's client address and scheme.
    fn prepare(&self, up: &mut Outgoing) {
        up.prepared = true;
        let Some(headers) = up.headers.as_mut() else {
            return;
        };
        let x = self.x();
        let inbound_host = headers.get(HOST).cloned().or_else(|| {
            self.uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        strip_hop_by_hop(headers, x.upgrade_requested());
        rewrite_forwarding(headers, x.client(), inbound_host.clone(), x.proto());
        headers.insert(X_REQUEST_ID, self.rid_value.clone());
        // The body is already accepted from the client; the backend gets it as it is.
        headers.remove(EXPECT);
        if !headers.contains_key(HOST)
            && let Some(host) = inbound_host
        {
            headers.insert(HOST, host);
        }
    }

    /// weir's own response (C-PATH-11, C-OBS-4), with `X-Request-ID` and the rate headers of an
    /// allowed request (C-RATE-1).
    fn answer(&mut self, a: Answer, guard: RequestGuard) -> Response<ResBody> {
        let x = self.x();
        let status = a.status();
        // On the wire, the synthetic response's own status (`200` in the gRPC form, C-GRPC-3).
        let mut wire = status;
        let mut resp = match (a.health_body(), x.synthetic(&a)) {
            (Some(body), _) => {
                let mut r = Response::new(ResBody::full(Bytes::from_static(body.as_bytes()), None));
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            (None, Some(s)) => {
                wire = s.status();
                synthetic(&s, &self.rid_value)
            }
            (None, None) => Response::new(ResBody::empty(None)),
        };
        *resp.status_mut() = StatusCode::from_u16(wire).unwrap_or(StatusCode::BAD_GATEWAY);
        let headers = resp.headers_mut();
        headers.insert(X_REQUEST_ID, self.rid_value.clone());
        add_headers(headers, x.response_headers(None, status));
        let (parts, body) = resp.into_parts();
        // The rest of the engine's outputs (record, gate hand-off) are side effects.
        let _ = self.next();
        let body = body.with_guard(guard).with_line(self.line.take());
        Response::from_parts(parts, body)
    }

    /// Pass a backend response on (C-RETRY-4, C-PATH-4, C-PATH-6, C-PATH-7) or tunnel an
    /// upgrade (C-PATH-8).
    fn deliver(
        &mut self,
        d: &Delivery,
        last: Last,
        guard: RequestGuard,
        client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    ) -> Response<ResBody> {
        let _ = self.next();
        let (Some((mut resp, conn, target)), Some(mut x)) = (last, self.x.take()) else {
            return self.answer(Answer::Client(ClientError::Incomplete), guard);
        };
        let data_plane = &self.ctx.data_plane;
        let backend_upgrade = d.upgrade.then(|| hyper::upgrade::on(&mut resp));
        let (mut parts, body) = resp.into_parts();
        // A trailers-only gRPC answer carries its status in the head (C-GRPC-3).
        let grpc_status = parts.headers.get(GRPC_STATUS).map(|v| {
            if let Some(line) = self.line.as_mut() {
                line.set_grpc_status(v.as_bytes());
            }
            weir_core::grpc::status_code(v.as_bytes())
        });
        strip_hop_by_hop(&mut parts.headers, d.upgrade);
        for (name, value) in x.response_headers(Some(d), d.deliver.status) {
            let value = match name {
                header::BACKEND => Some(target.id_value().clone()),
                header::REQUEST_ID => Some(self.rid_value.clone()),
                _ => header_value(value),
            };
            if let Some(v) = value {
                parts.headers.insert(HeaderName::from_static(name), v);
            }
        }
        if let (Some(backend_upgrade), Some(client_upgrade)) = (backend_upgrade, client_upgrade) {
            tunnel(self.ctx, x, conn, backend_upgrade, client_upgrade);
            let body = ResBody::empty(Some(guard)).with_line(self.line.take());
            return Response::from_parts(parts, body);
        }
        if body.is_end_stream() {
            // Nothing to stream (HEAD, 204, 304, empty): settle now.
            let now = data_plane.rt.now();
            let at = data_plane.clock.at(now);
            worker::with_rng(|rng| {
                // C-OUT-1: a trailers-only call's gRPC status, for outlier detection.
                if let Some(code) = grpc_status {
                    x.handle_input(Input::GrpcStatus(code), at, rng);
                }
                x.handle_input(Input::BodyEnd(BodyEnd::Complete), at, rng);
            });
            effects::drain(data_plane, &mut x, None);
            data_plane.upstream.release_lent(conn, now);
            let body = ResBody::empty(Some(guard)).with_line(self.line.take());
            return Response::from_parts(parts, body);
        }
        let delivered = Delivered::new(body, x, conn, Arc::clone(data_plane));
        let body = ResBody::upstream(delivered, Some(guard)).with_line(self.line.take());
        Response::from_parts(parts, body)
    }
}

/// The upstream request of attempt `s` to `target` at `uri` (C-PATH-4, C-PATH-5), made once a
/// connection takes it; its headers moved out of `up` when `give`, copied otherwise.
fn request(
    data_plane: &crate::services::state::DataPlane,
    method: Method,
    uri: Uri,
    target: &Target,
    s: &Send,
    up: &mut Outgoing,
    give: bool,
) -> Request<UpBody> {
    let mut headers = if give {
        up.headers.take().unwrap_or_default()
    } else {
        up.headers.clone().unwrap_or_default()
    };
    headers.insert(BACKEND_ATTEMPT, target.id_value().clone());
    if !headers.contains_key(HOST) {
        headers.insert(HOST, target.host_header().clone());
    }
    let body = match s.body {
        SendBody::Empty => UpBody::Empty,
        SendBody::Buffered => match &up.trailers {
            // Only HTTP/2 carries request trailers after a body of declared length.
            Some(t) if target.protocol().is_h2() => {
                UpBody::Trailed(up.buffered.clone(), Some(t.clone()))
            }
            _ => up.buffered.clone().map_or(UpBody::Empty, UpBody::full),
        },
        // A streamed body is taken once: by the first attempt a connection takes (one that
        // failed to connect never made its request, C-RETRY-9), or again by the attempt after
        // a refused stream that handed it back.
        SendBody::Stream { read_deadline } => match (up.taken.take(), up.body.take()) {
            (Some(taken), _) => streamed(data_plane, up, Err(taken), read_deadline, target, give),
            (None, Some(body)) => streamed(data_plane, up, Ok(body), read_deadline, target, give),
            (None, None) => UpBody::Empty,
        },
    };
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    req
}

/// The client's streamed body for an attempt to `target`: fresh (`Ok`) or taken back from a
/// refused stream (`Err`). To an HTTP/2 backend, unless no attempt can follow (`give`), it stays
/// resumable, and `up` holds it: a refused stream hands it back, with what went to that stream
/// kept, for the next attempt (C-RETRY-9).
fn streamed(
    data_plane: &crate::services::state::DataPlane,
    up: &mut Outgoing,
    source: Result<Incoming, Taken>,
    read_deadline: Option<weir_core::Instant>,
    target: &Target,
    give: bool,
) -> UpBody {
    let failed = Arc::clone(up.tally.get_or_insert_with(Arc::default));
    let deadline = read_deadline.map(|d| data_plane.clock.deadline(d));
    let rt = data_plane.rt;
    UpBody::Stream(match source {
        _ if target.protocol().is_h2() && !give => {
            let (body, handed) = ClientBody::resumable(rt, source, failed, deadline);
            up.handed = Some(handed);
            body
        }
        Ok(body) => ClientBody::new(rt, body, failed, deadline),
        Err(taken) => ClientBody::resumed(rt, taken, failed, deadline),
    })
}

/// C-PATH-8: tunnel both ways; the exchange (and with it the backend slot and the gate slot) is
/// held until the tunnel closes.
fn tunnel(
    ctx: &Arc<DownstreamCtx>,
    mut x: Box<Bound>,
    conn: Lent,
    backend_upgrade: hyper::upgrade::OnUpgrade,
    client_upgrade: hyper::upgrade::OnUpgrade,
) {
    let alive = ctx.alive();
    let data_plane = Arc::clone(&ctx.data_plane);
    ctx.data_plane.rt.spawn(async move {
        let _alive = alive;
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
        let now = data_plane.clock.now();
        worker::with_rng(|rng| x.handle_input(Input::BodyEnd(end), now, rng));
        effects::drain(&data_plane, &mut x, None);
    });
}

#[cold]
fn unreachable_exchange() -> ! {
    // The exchange leaves `Io` only in `deliver`, which ends the request's IO. Were it reached,
    // the panic ends this connection's task only (hyper isolates it; panic = "unwind").
    unreachable!("the exchange was used after it moved into the response")
}

/// What the codec knows of the request body's length.
fn body_info(body: &Incoming) -> BodyInfo {
    if body.is_end_stream() {
        BodyInfo::Empty
    } else {
        body.size_hint()
            .exact()
            .map_or(BodyInfo::Unsized, BodyInfo::Sized)
    }
}

/// A synthetic response as core spells it (C-PATH-11).
fn synthetic(s: &SyntheticResponse<'_>, rid_value: &HeaderValue) -> Response<ResBody> {
    let mut resp = Response::new(ResBody::full(Bytes::from(s.body()), None));
    let headers = resp.headers_mut();
    for (name, value) in s.headers() {
        let value = if name == header::REQUEST_ID {
            Some(rid_value.clone())
        } else {
            value.to_header_value()
        };
        if let Some(v) = value {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    resp
}

/// Headers the engine sets, as values.
fn add_headers<'t>(headers: &mut HeaderMap, set: impl Iterator<Item = (&'static str, Text<'t>)>) {
    for (name, value) in set {
        if let Some(v) = header_value(value) {
            headers.insert(HeaderName::from_static(name), v);
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
