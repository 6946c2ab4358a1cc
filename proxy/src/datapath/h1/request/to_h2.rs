//! An HTTP/1 client's request to an HTTP/2 backend (`protocol: h2c`/`h2`, C-GRPC-1: protocol
//! translation). The attempt is the same to the engine as any other (its head is fed as
//! `ResponseHead`, its failures as `SendFailed`); only the wire differs: the request goes as
//! hyper's HTTP/2 request on a shared connection (`services::upstream`), its head built from the
//! client's lines minus hop-by-hop ones, with weir's forwarding lines; the body, decoded from
//! its HTTP/1 framing, is fed to the stream as it is read. The response is written to the
//! client in HTTP/1.1: `Content-Length` when the backend's stream declared it, chunked
//! otherwise (trailers passed as chunked trailers), close-delimited for an HTTP/1.0 client.
//!
//! Not full duplex: the request body is sent whole before the response is relayed (a backend
//! that answers early is answered once the body is in).
//!
//! Sent again (C-RETRY-9): the body is read from the client only once the stream exists (a
//! connect error has consumed none of it), and what it handed to the stream is kept
//! ([`Resend`], at most [`RESEND_LIMIT`](crate::services::upstream::RESEND_LIMIT) bytes) until the backend's head came, so that a
//! stream the backend refused (`REFUSED_STREAM`, or past its `GOAWAY`'s last stream id) can be
//! sent whole to another backend.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use http_body_util::BodyExt as _;
use hyper::body::{Body as _, Incoming};
use weir_core::forward::{rewrite_forwarding, strip_hop_by_hop};
use weir_core::request_id::X_REQUEST_ID;

use super::*;
use crate::datapath::h1::relay::{self, BODY_CHUNK, RelayError};
use crate::services::upstream::{BoxError, Resend, SendError, UpBody, unindexed};

/// `grpc-status`.
const GRPC_STATUS: HeaderName = HeaderName::from_static(weir_core::grpc::STATUS);

/// Why feeding the request body to the stream stopped early.
enum PumpError {
    /// The client's fault (its read failed, timed out or broke its framing).
    Client(BodyFault),
    /// The body was in, and the client closed its connection while the attempt waited for
    /// the backend's head: the attempt is cancelled at once (C-PATH-9; the stream is reset,
    /// C-GRPC-2), not when the backend answers.
    ClientClosed,
}

impl Req<'_> {
    /// One attempt to an HTTP/2 `target` (module doc): the response head into `last`.
    pub(super) async fn send_h2(
        &mut self,
        c: &mut DownstreamConn,
        s: &Send,
        target: Arc<Target>,
        metrics: Arc<crate::observe::metrics::BackendMetrics>,
        last: &mut Option<Box<H2Up>>,
    ) -> Result<(), Gone> {
        let data_plane = self.data_plane;
        let Ok(path) = upstream_target(target.base(), self.log.method, self.pq) else {
            self.feed(Input::TargetTooLong);
            return Ok(());
        };
        let path = String::from_utf8_lossy(&path).into_owned();
        let headers = self.h2_headers(&target, s.at);
        let (body, feed) = match s.body {
            SendBody::Empty => (UpBody::Empty, None),
            SendBody::Buffered => (UpBody::full(self.decoded_buffer()), None),
            SendBody::Stream { read_deadline } => {
                if self.continue_body(c).await.is_err() {
                    return Err(Gone);
                }
                let (tx, rx) = async_channel::bounded(1);
                let at = read_deadline.map(|d| data_plane.clock.deadline(d));
                (UpBody::Channel(Box::pin(rx)), Some((tx, at)))
            }
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.log.method.clone();
        *req.uri_mut() = path.parse().unwrap_or_else(|_| http::Uri::from_static("/"));
        *req.headers_mut() = headers;
        let begun = data_plane.rt.now();
        let client = self.client;
        // The body is read only once a connection took the request (C-RETRY-9): a connect
        // error leaves all of it with the client.
        let made = AtomicBool::new(false);
        let cap = c.cap();
        let (body_in, sent_done) = (AtomicBool::new(feed.is_none()), AtomicBool::new(false));
        let sent = {
            let Req {
                exchange: x,
                reader,
                body_bytes,
                timer,
                resend,
                ..
            } = self;
            let Some(x) = x.as_mut() else {
                return Ok(());
            };
            let make = || {
                made.store(true, Ordering::Relaxed);
                req
            };
            let send =
                data_plane
                    .upstream
                    .send_lent_with(&target, Some(&metrics), make, begun, client);
            let made = &made;
            let (body_in, sent_done) = (&body_in, &sent_done);
            let pump = async move {
                if let Some((tx, at)) = feed {
                    std::future::poll_fn(|_| {
                        if made.load(Ordering::Relaxed) {
                            std::task::Poll::Ready(())
                        } else {
                            // Polled again after the send, which makes the request.
                            std::task::Poll::Pending
                        }
                    })
                    .await;
                    pump(data_plane, c, reader, body_bytes, resend, tx, at).await?;
                    body_in.store(true, Ordering::Relaxed);
                }
                if sent_done.load(Ordering::Relaxed) {
                    return Ok(());
                }
                // The body is in: watch the client for its end while the head is awaited.
                relay::until_closed(&mut c.io, &mut c.buf, cap).await;
                Err(PumpError::ClientClosed)
            };
            let both = pin!(send_and_pump(send, pump, (body_in, sent_done)));
            drive::bounded_in(data_plane, x, timer, both).await
        };
        let Some((sent, pumped)) = sent else {
            return Ok(());
        };
        let Some(sent) = sent else {
            // The client left: the send (and with it the stream) is dropped, which resets it.
            return Err(Gone);
        };
        if let Err(PumpError::Client(fault)) = pumped {
            self.body_fault = fault;
        }
        let result = match sent {
            Ok((resp, lent)) if self.body_fault == BodyFault::None => {
                self.resend.clear();
                let status = resp.status().as_u16();
                let end = resp.body().is_end_stream();
                let head = Input::response_head(
                    status,
                    resp.headers(),
                    end,
                    crate::base::clock::Clock::wall(),
                );
                *last = Some(Box::new(H2Up {
                    resp,
                    lent,
                    target: Arc::clone(&target),
                }));
                // The engine judges a gRPC trailers-only head by its `grpc-status` (C-GRPC-3).
                self.feed(head);
                return Ok(());
            }
            Ok(_) => Err(UpError::Transport(io::Error::other("request body failed"))),
            Err(SendError::Connect(e)) => Err(UpError::Connect(e)),
            Err(SendError::Refused(e)) if self.body_fault == BodyFault::None => {
                tracing::debug!(backend = target.id(), error = %e, "upstream stream refused");
                // The headers are made again from the client's head, a buffered body from its
                // buffer; a streamed one is whole if all of it that went is kept.
                let held = self.resend.whole();
                self.feed(Input::SendFailed(SendFailure::Refused { held }));
                return Ok(());
            }
            Err(SendError::Refused(e)) => Err(UpError::Transport(io::Error::other(e))),
            Err(SendError::Saturated) => {
                self.feed(Input::SendFailed(SendFailure::Saturated));
                return Ok(());
            }
            Err(SendError::Transport(e)) => Err(UpError::Transport(io::Error::other(e))),
        };
        self.attempt_ended(Some(result), None, &target)
    }

    /// The HTTP/2 request's fields: the client's lines minus hop-by-hop ones (C-PATH-6), weir's
    /// forwarding lines (C-FWD-1..3), the request id (C-PATH-3) and attempt (C-PATH-4).
    pub(super) fn h2_headers(&mut self, target: &Target, at: weir_core::Instant) -> HeaderMap {
        let head = self.head;
        let mut h = HeaderMap::with_capacity(head.headers.len() + 6);
        for line in head.headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(line.name.as_bytes()),
                HeaderValue::from_bytes(line.value),
            ) {
                h.append(n, v);
            }
        }
        let authority = self.log.host.authority;
        let inbound_host = h
            .get(HOST)
            .cloned()
            .or_else(|| authority.and_then(|a| HeaderValue::from_str(a).ok()));
        let x = self.exchange();
        strip_hop_by_hop(&mut h, false);
        rewrite_forwarding(&mut h, x.client(), inbound_host.clone(), x.proto());
        if let Ok(mut v) = HeaderValue::from_bytes(x.request_id().as_bytes()) {
            unindexed(&mut v);
            h.insert(X_REQUEST_ID, v);
        }
        h.insert(
            HeaderName::from_static(header::BACKEND_ATTEMPT),
            target.id_value().clone(),
        );
        // C-GRPC-2: what remains of a gRPC call's deadline replaces the client's grpc-timeout.
        if let Some(t) = x.upstream_grpc_timeout(at)
            && let Ok(mut v) = HeaderValue::from_bytes(t.to_bytes().as_bytes())
        {
            unindexed(&mut v);
            h.insert(HeaderName::from_static(weir_core::grpc::timeout::NAME), v);
        }
        h.remove(EXPECT);
        h.remove(TRANSFER_ENCODING);
        if head.body == BodyFraming::Chunked {
            h.remove(CONTENT_LENGTH);
        }
        match inbound_host {
            Some(host) => h.insert(HOST, host),
            None => h.insert(HOST, target.host_header().clone()),
        };
        h
    }

    /// The buffered body's data, its chunked framing (if any) taken off.
    pub(super) fn decoded_buffer(&self) -> Bytes {
        let Some(raw) = &self.buffered else {
            return Bytes::new();
        };
        if self.head.body != BodyFraming::Chunked {
            return Bytes::copy_from_slice(raw);
        }
        let mut buf = super::super::io::Buf::from_slice(raw);
        let mut out = Vec::with_capacity(raw.len());
        let _ = Reader::new(BodyFraming::Chunked).take(&mut buf, false, &mut out, &mut 0);
        Bytes::from(out)
    }

    /// Pass the HTTP/2 backend's response on in HTTP/1 (module doc): whether the connection
    /// stays open.
    pub(super) async fn deliver_h2(
        &mut self,
        c: &mut DownstreamConn,
        d: &Delivery,
        up: Box<H2Up>,
    ) -> bool {
        let _ = self.next();
        let keep = self.keep_alive();
        let version = self.head.version;
        let data_plane = self.data_plane;
        let H2Up { resp, lent, target } = *up;
        let (mut parts, body) = resp.into_parts();
        let status = parts.status.as_u16();
        let bodiless = self.head.is_head() || status == 204 || status == 304;
        let length = if bodiless {
            None
        } else if body.is_end_stream() {
            Some(0)
        } else {
            body.size_hint().exact()
        };
        let chunked = !bodiless && length.is_none() && version == Version::Http11;
        let keep = keep && (bodiless || length.is_some() || chunked);
        let Some(x) = self.exchange.as_mut() else {
            return false;
        };
        self.delivered = true;
        // A trailers-only gRPC answer carries its status in the head (C-GRPC-3).
        let mut grpc_status = parts.headers.get(GRPC_STATUS).cloned();
        if let (Some(line), Some(v)) = (self.line.as_mut(), grpc_status.as_ref()) {
            line.set_grpc_status(v.as_bytes());
        }
        strip_hop_by_hop(&mut parts.headers, false);
        c.out.clear();
        status_line(&mut c.out, status);
        for (name, value) in &parts.headers {
            if name != CONTENT_LENGTH {
                line(&mut c.out, name.as_str().as_bytes(), value.as_bytes());
            }
        }
        let rid = x.request_id().as_bytes();
        x.response_headers(Some(d), d.deliver.status)
            .for_each(|(name, value)| {
                let mut v = Vec::new();
                match name {
                    header::BACKEND => v.extend_from_slice(target.id().as_bytes()),
                    header::REQUEST_ID => v.extend_from_slice(rid),
                    _ => push_text(&mut v, &value),
                }
                line(&mut c.out, name.as_bytes(), &v);
            });
        if let Some(n) = length {
            line(&mut c.out, b"content-length", n.to_string().as_bytes());
        } else if chunked {
            line(&mut c.out, b"transfer-encoding", b"chunked");
        }
        connection_line(&mut c.out, keep, version);
        c.out.extend_from_slice(b"\r\n");
        let mut sent = 0;
        let end = if bodiless {
            match write_all(&mut c.io, &c.out).await {
                Ok(()) => BodyEnd::Complete,
                Err(_) => BodyEnd::ClientGone,
            }
        } else {
            let relay = relay_h2(c, body, chunked, (&mut sent, &mut grpc_status));
            stream_body(data_plane, x, pin!(relay)).await
        };
        if let (Some(line), Some(v)) = (self.line.as_mut(), grpc_status.as_ref()) {
            line.set_grpc_status(v.as_bytes());
        }
        // C-OUT-1: the call's gRPC status, for outlier detection, before its end.
        if let Some(v) = grpc_status {
            drive::feed(
                data_plane,
                x,
                Input::GrpcStatus(weir_core::grpc::status_code(v.as_bytes())),
            );
        }
        finish(data_plane, x, end);
        data_plane.upstream.release_lent(lent, data_plane.rt.now());
        self.log_line(sent);
        end == BodyEnd::Complete && keep
    }
}

/// `send` to its end, with `pump` feeding the request body beside it and then watching the
/// client; a body not fed whole by the time the response head came is fed to its end before
/// the head is returned. When the send failed the feed stops where it is (the body has nowhere
/// to go; the client connection closes after the answer, its body unread). `None` for the send:
/// the client closed its connection first (`PumpError::ClientClosed`), and the send was
/// dropped. `body_in`: the pump has fed the whole body; `sent_done` is set here once the send
/// ended, so that a pump still feeding stops after the body rather than watch the client.
async fn send_and_pump<S, P, T, E>(
    send: S,
    pump: P,
    (body_in, sent_done): (&AtomicBool, &AtomicBool),
) -> (Option<Result<T, E>>, Result<(), PumpError>)
where
    S: Future<Output = Result<T, E>>,
    P: Future<Output = Result<(), PumpError>>,
{
    let mut send = pin!(send);
    let mut pump = pin!(pump);
    let mut pumped = None;
    let sent = std::future::poll_fn(|cx| {
        // The send first: it makes the request the pump waits for.
        let sent = send.as_mut().poll(cx);
        if pumped.is_none()
            && let std::task::Poll::Ready(r) = pump.as_mut().poll(cx)
        {
            pumped = Some(r);
        }
        if let std::task::Poll::Ready(r) = sent {
            return std::task::Poll::Ready(Some(r));
        }
        if matches!(pumped, Some(Err(PumpError::ClientClosed))) {
            return std::task::Poll::Ready(None);
        }
        std::task::Poll::Pending
    })
    .await;
    let Some(sent) = sent else {
        return (None, Ok(()));
    };
    sent_done.store(true, Ordering::Relaxed);
    let pumped = match pumped {
        Some(r) => r,
        None if sent.is_err() || body_in.load(Ordering::Relaxed) => Ok(()),
        None => pump.await,
    };
    (Some(sent), pumped)
}

/// Feed the client's body, decoded, to `tx` until its end (within `deadline`, the engine's
/// read deadline), first what an earlier, refused stream was handed (`resend`), keeping what
/// goes in `resend`; a stream that went away ends the feed quietly (the attempt's own result
/// says why).
async fn pump(
    data_plane: &DataPlane,
    c: &mut DownstreamConn,
    reader: &mut Reader,
    body_bytes: &mut u64,
    resend: &mut Resend,
    tx: async_channel::Sender<Result<Bytes, BoxError>>,
    deadline: Option<std::time::Instant>,
) -> Result<(), PumpError> {
    let fail = |tx: &async_channel::Sender<Result<Bytes, BoxError>>, fault: BodyFault| {
        let _ = tx.try_send(Err("client request body failed".into()));
        Err(PumpError::Client(fault))
    };
    for chunk in resend.chunks.clone() {
        if tx.send(Ok(chunk)).await.is_err() {
            return Ok(());
        }
    }
    loop {
        let mut out = Vec::new();
        let done = match reader.take(&mut c.buf, false, &mut out, body_bytes) {
            Ok(done) => done,
            Err(_) => return fail(&tx, BodyFault::Malformed),
        };
        if !out.is_empty() {
            let chunk = Bytes::from(out);
            resend.keep(&chunk);
            if tx.send(Ok(chunk)).await.is_err() {
                return Ok(());
            }
        }
        if done {
            return Ok(());
        }
        let fill = std::future::poll_fn(|cx| c.buf.poll_fill(&mut c.io, cx, BODY_CHUNK));
        let n = match deadline {
            Some(at) => match rt::timeout_at(data_plane.rt, at, fill).await {
                Ok(n) => n,
                Err(_) => return fail(&tx, BodyFault::TimedOut),
            },
            None => fill.await,
        };
        if !matches!(n, Ok(n) if n > 0) {
            return fail(&tx, BodyFault::Gone);
        }
    }
}

/// Write the head in `c.out`, then the HTTP/2 response body as it arrives (chunked when
/// `chunked`, its trailers as chunked trailers), counting its bytes in `sent` and keeping the
/// trailers' `grpc-status` in `grpc_status` (the access log's and the metric's, C-GRPC-3).
async fn relay_h2(
    c: &mut DownstreamConn,
    mut body: Incoming,
    chunked: bool,
    (sent, grpc_status): (&mut u64, &mut Option<HeaderValue>),
) -> Result<(), RelayError> {
    let sink = |e: io::Error| RelayError::Sink(e);
    let mut out = std::mem::take(&mut c.out);
    loop {
        let Some(frame) = body.frame().await else {
            if chunked {
                out.extend_from_slice(b"0\r\n\r\n");
            }
            break;
        };
        let frame = frame.map_err(|e| RelayError::Source(io::Error::other(e)))?;
        match frame.into_data() {
            // An empty chunk would end a chunked body: nothing to write.
            Ok(data) if data.is_empty() => continue,
            Ok(data) => {
                *sent += data.len() as u64;
                if chunked {
                    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                    out.extend_from_slice(&data);
                    out.extend_from_slice(b"\r\n");
                } else {
                    out.extend_from_slice(&data);
                }
            }
            Err(frame) => {
                let Ok(trailers) = frame.into_trailers() else {
                    continue;
                };
                if let Some(v) = trailers.get(GRPC_STATUS) {
                    *grpc_status = Some(v.clone());
                }
                if chunked {
                    out.extend_from_slice(b"0\r\n");
                    for (name, value) in &trailers {
                        line(&mut out, name.as_str().as_bytes(), value.as_bytes());
                    }
                    out.extend_from_slice(b"\r\n");
                    write_all(&mut c.io, &out).await.map_err(sink)?;
                    out.clear();
                    c.out = out;
                    return Ok(());
                }
            }
        }
        write_all(&mut c.io, &out).await.map_err(sink)?;
        out.clear();
    }
    write_all(&mut c.io, &out).await.map_err(sink)?;
    out.clear();
    c.out = out;
    Ok(())
}
