//! One HTTP/1 request: the IO around its exchange (`weir_core::exchange`, docs/request-flow.md),
//! from the raw head. The engine is created from the parsed head and decides everything (request
//! id, health answers, gate, client address, rate limit, route, body policy, retries, deadlines,
//! response mapping); this module performs its outputs: park at the gate, call the store, read
//! the body for replay, send an attempt on a pooled or new upstream connection ([`super::upstream_conn`]),
//! answer, deliver the response as it arrives ([`super::relay`]) or tunnel an upgrade.
//!
//! Upstream heads are written by `weir_core::h1::write_upstream_request` into one buffer and sent
//! with one write (with a buffered body, in the same write); response heads are rewritten by
//! `write_response_head` and sent with the first body bytes read.
//!
//! Cancellation (C-PATH-9): while an attempt waits for its response head the client socket is
//! read too; its end of stream ends the request. The drop guard ([`Req`]'s `Drop`) feeds the
//! engine `Input::ClientGone` and performs what follows; the upstream connection is dropped
//! (closed) with the request.

use std::borrow::Cow;
use std::io;
use std::pin::pin;
use std::sync::Arc;

use http::Method;
use weir_core::exchange::{
    Answer, BodyInfo, Delivery, Head, Input, Output, Send, SendBody, SendFailure, Stage,
};
use weir_core::flow::BodyEnd;
use weir_core::h1::{
    self, BodyFraming, BodyOut, ClientSide, HeadError, Parsed, RequestHead, ResponseContext,
    UpstreamRequest, Version,
};
use weir_core::response::{ClientError, header};

use super::attempt::{
    BodyFault, H2Up, Side, Up, attempt, head_input, or_gone, response_head, upstream_target,
};
use super::downstream_conn::{DownstreamConn, MAX_HEADERS};
use super::io::{Extra, push_text, send_continue, write_all};
use super::relay::{self, Pump, PumpSide, Reader};
use super::respond::{connection_line, finish, line, read_body, status_line, stream_body, tunnel};
use super::upstream_conn::{self, UpError};
use crate::base::rt::{self, watch};
use crate::base::worker;
use crate::datapath::downstream::DownstreamCtx;
use crate::datapath::effects::{PendingLine, RequestBytes};
use crate::datapath::{drive, effects};
use crate::services::snapshot::Bound;
use crate::services::state::DataPlane;
use crate::services::upstream::{DownstreamEnds, Target};

mod hedge;
mod reply;
mod to_h2;

/// How [`serve`] ended.
#[derive(Debug)]
pub enum Served {
    /// The request was answered: whether the connection stays open after it, and the clock's
    /// reading at the response's end if its last write did not wait (the connection's idle
    /// time counts from it).
    Done(bool, Option<weir_core::Instant>),
    /// The head breaks a parsing rule (nothing consumed; the connection refuses it).
    Refused(HeadError),
    /// `c.head` holds no whole head (nothing consumed).
    Partial,
}

/// Parse the head whose bytes `c.head` holds (a prefix of `c.buf`, the head at least), consume
/// it from `c.buf` and serve the request. `timer` is the connection's request timer
/// (`drive::bounded_in`); `now`, the clock read as the head began to be served, if it was
/// (else the exchange reads it).
pub async fn serve(
    ctx: &Arc<DownstreamCtx>,
    c: &mut DownstreamConn,
    timer: &mut rt::TimerSlot,
    shutdown: &watch::Receiver<bool>,
    now: Option<weir_core::Instant>,
) -> Served {
    let raw = std::mem::take(&mut c.head);
    // One future for the head's parse and the request (not one wrapped in another).
    let mut headers = h1::header_slots::<MAX_HEADERS>();
    let served = match h1::parse_request_in(&raw, &mut headers, &c.limits) {
        Ok(Parsed::Complete(head)) => {
            c.buf.consume(head.head_len);
            let (keep, ended) = serve_parsed(ctx, c, &head, timer, shutdown, now).await;
            Served::Done(keep, ended)
        }
        Ok(Parsed::Partial) => Served::Partial,
        Err(e) => Served::Refused(e),
    };
    c.head = raw;
    served
}

async fn serve_parsed(
    ctx: &Arc<DownstreamCtx>,
    c: &mut DownstreamConn,
    head: &RequestHead<'_, '_>,
    timer: &mut rt::TimerSlot,
    shutdown: &watch::Receiver<bool>,
    now: Option<weir_core::Instant>,
) -> (bool, Option<weir_core::Instant>) {
    let absolute =
        (!head.target.starts_with('/') && head.target != "*" && head.method != "CONNECT")
            .then(|| head.target.parse::<http::Uri>().ok())
            .flatten();
    let (path, pq) = match &absolute {
        Some(u) => (u.path(), u.path_and_query().map_or("/", |p| p.as_str())),
        None if head.method == "CONNECT" => ("", ""),
        // The path is the target up to its `?` (a byte search: no `char` searcher per request).
        None => {
            let t = head.target;
            let end = t.bytes().position(|b| b == b'?').unwrap_or(t.len());
            (&t[..end], t)
        }
    };
    let Ok(method) = Method::from_bytes(head.method.as_bytes()) else {
        return (false, None);
    };
    // The access log's host, read as text only when a line is written.
    let host = Host {
        header: head.host(),
        authority: absolute
            .as_ref()
            .and_then(|u| u.authority())
            .map(|a| a.as_str()),
    };
    let version = match head.version {
        Version::Http10 => http::Version::HTTP_10,
        Version::Http11 => http::Version::HTTP_11,
    };
    let body = match head.body {
        BodyFraming::Empty | BodyFraming::Length(0) | BodyFraming::UntilClose => BodyInfo::Empty,
        BodyFraming::Length(n) => BodyInfo::Sized(n),
        BodyFraming::Chunked => BodyInfo::Unsized,
    };
    let data_plane = &ctx.data_plane;
    let mut r = Req {
        data_plane,
        client: ctx.downstream_ends(),
        exchange: None,
        delivered: false,
        log: Log {
            method: &method,
            path,
            version,
            host,
        },
        pq,
        head,
        reader: Reader::new(head.body),
        buffered: None,
        sent_continue: false,
        body_fault: BodyFault::None,
        body_bytes: 0,
        kept: None,
        resend: crate::services::upstream::Resend::default(),
        line: None,
        held: None,
        timer,
        shutdown,
        ended: None,
    };
    {
        // The engine reads the flat header list by name (`weir_core::headers`): no map.
        let engine_head = Head {
            method: &method,
            path,
            target: pq,
            headers: head.headers,
            peer: ctx.peer().ip(),
            tls: ctx.tls,
            body,
            // HTTP/1's `Host` rules are the codec's (`h1::parse_request`).
            authority: None,
        };
        // Built in the request's slot, not returned (the exchange is 1.5 KB).
        let place = &mut r.exchange;
        worker::with_rng(|rng| {
            let services = Arc::clone(&data_plane.services);
            let now = now.unwrap_or_else(|| data_plane.clock.now());
            Bound::new_in(
                place,
                data_plane.snapshot.load_full(),
                services,
                &engine_head,
                now,
                rng,
            );
        });
    }
    let keep = r.run(c).await;
    (keep, r.ended)
}

/// What the access-log line needs of the request.
#[derive(Clone, Copy)]
struct Log<'a> {
    method: &'a Method,
    path: &'a str,
    version: http::Version,
    host: Host<'a>,
}

/// Where the access log's host comes from: the `Host` header's bytes, or the target's authority.
#[derive(Clone, Copy)]
struct Host<'a> {
    header: Option<&'a [u8]>,
    authority: Option<&'a str>,
}

impl<'a> Host<'a> {
    /// The `Host` header when it is text, else the target's authority.
    fn text(self) -> Option<&'a str> {
        self.header
            .and_then(|h| std::str::from_utf8(h).ok())
            .or(self.authority)
    }
}

impl<'a> Log<'a> {
    fn request(&self) -> effects::Request<'a> {
        effects::Request {
            method: self.method,
            path: self.path,
            version: self.version,
            host: self.host.text(),
        }
    }
}

/// The client went away while the request waited (C-PATH-9).
struct Gone;

/// One request and its exchange; dropping it before the end tells the engine the client left.
struct Req<'a> {
    data_plane: &'a Arc<DataPlane>,
    /// The client's connection (C-FWD-1 peer, and where it connected): a backend's PROXY
    /// header names both.
    client: DownstreamEnds,
    /// `None` before the exchange is made and once it moved into a tunnel.
    exchange: Option<Bound>,
    /// The exchange is the response's (being delivered): dropping the request drops it without
    /// a word, as the response would.
    delivered: bool,
    log: Log<'a>,
    /// The origin-form target (path and query) as received.
    pq: &'a str,
    head: &'a RequestHead<'a, 'a>,
    /// Where the client's request body stands.
    reader: Reader,
    /// The body, read whole for replay (C-RETRY-1), framing included.
    buffered: Option<Vec<u8>>,
    /// weir already sent the client a `100 Continue`.
    sent_continue: bool,
    /// How reading the client's streamed body failed, if it did (C-PATH-9).
    body_fault: BodyFault,
    /// The request body's own bytes read (buffered) or sent on (streamed), chunk framing not
    /// included.
    body_bytes: u64,
    /// The latest response head's parse, kept to write it from.
    kept: upstream_conn::Kept,
    /// What the streamed body handed to an HTTP/2 stream not answered yet (C-RETRY-9).
    resend: crate::services::upstream::Resend,
    /// The access-log line once the engine's record says to log, written when the
    /// response has been sent (`effects::PendingLine`).
    line: Option<Box<PendingLine>>,
    /// An output a hedged attempt's race took from the engine and left for [`Req::run`]
    /// (C-HEDGE-1).
    held: Option<Output>,
    /// The connection's request timer.
    timer: &'a mut rt::TimerSlot,
    shutdown: &'a watch::Receiver<bool>,
    /// The clock's reading at the response's end, when its last write did not wait.
    ended: Option<weir_core::Instant>,
}

impl Drop for Req<'_> {
    fn drop(&mut self) {
        if self.delivered {
            return;
        }
        let Some(x) = self.exchange.as_mut() else {
            return;
        };
        if !x.is_done() {
            drive::feed(self.data_plane, x, Input::ClientGone);
        }
        effects::drain(self.data_plane, x, Some(self.log.request()));
    }
}

#[cold]
fn unreachable_exchange() -> ! {
    unreachable!("the exchange was used after it moved into the response")
}

impl Req<'_> {
    fn exchange(&mut self) -> &mut Bound {
        match &mut self.exchange {
            Some(x) => x,
            None => unreachable_exchange(),
        }
    }

    fn feed(&mut self, input: Input) {
        let data_plane = self.data_plane;
        drive::feed(data_plane, self.exchange(), input);
    }

    /// The next output that is not a side effect (those are performed on the way; a logged
    /// record becomes the pending access-log line).
    fn next(&mut self) -> Option<Output> {
        if let Some(out) = self.held.take() {
            return Some(out);
        }
        let x = self.exchange.as_mut()?;
        while let Some(out) = x.poll_output() {
            // The side effects are matched here, each performed from its own value, rather than
            // every output moved through `effects::perform` and back; what they do
            // is `perform`'s.
            match out {
                Output::Record(r) => {
                    if effects::needs_line(&r) {
                        effects::record_later(self.data_plane, &r);
                        let request = self.log.request();
                        self.line = Some(effects::pending_line(self.data_plane, x, &r, request));
                    } else {
                        effects::record(self.data_plane, &r);
                    }
                }
                Output::Metric(m) => effects::metric(self.data_plane, x, m),
                Output::Outliers(events) => effects::outliers(x, &events),
                Output::GateWake { ticket } => self.data_plane.admission.wake(ticket),
                out => return Some(out),
            }
        }
        None
    }

    /// Write the pending access-log line: the response's body was `response_bytes` long.
    fn log_line(&mut self, response_bytes: u64) {
        if let Some(mut line) = self.line.take() {
            line.set_request_bytes(RequestBytes::Known(self.body_bytes));
            line.finish(response_bytes);
        }
    }

    /// Perform the engine's outputs to the end of the response: whether the connection stays.
    async fn run(&mut self, c: &mut DownstreamConn) -> bool {
        let mut last: Option<Up> = None;
        // The latest attempt's response when its backend speaks HTTP/2 (C-GRPC-1).
        let mut last_h2: Option<Box<H2Up>> = None;
        loop {
            let Some(out) = self.next() else {
                return self
                    .answer(c, Answer::Client(ClientError::Incomplete))
                    .await;
            };
            match out {
                Output::GateWait { ticket } => {
                    let (data_plane, cap) = (self.data_plane, c.cap());
                    let wait = drive::gate_wait(data_plane, self.exchange(), ticket);
                    if !or_gone(c, cap, wait).await {
                        return false;
                    }
                }
                Output::StoreTake { key, bucket } => {
                    let (data_plane, cap) = (self.data_plane, c.cap());
                    let take = drive::store_take(data_plane, self.exchange(), key, bucket);
                    if !or_gone(c, cap, take).await {
                        return false;
                    }
                }
                Output::BufferBody { .. } => self.buffer(c).await,
                Output::Mirror(m) => self.mirror(m),
                // A hedge is run by the race of the attempt it goes beside (C-HEDGE-1).
                Output::Send(s) if s.hedge => {}
                Output::Send(s) => {
                    // C-RETRY-6: the previous response is dropped unread (its connection closes),
                    // in place (`take` copied the 180-byte `Up` out to drop it).
                    last = None;
                    last_h2 = None;
                    let sent = if self.races(&s) {
                        // Boxed: the race's future does not grow the unhedged request's.
                        Box::pin(self.race(c, &s, &mut last, &mut last_h2)).await
                    } else {
                        self.send(c, &s, &mut last, &mut last_h2).await
                    };
                    if let Err(Gone) = sent {
                        return false;
                    }
                }
                Output::Answer(a) => return self.answer(c, a).await,
                // Lent, not moved into the delivery's future.
                Output::Deliver(d) => {
                    if let Some(up) = last_h2.take() {
                        return self.deliver_h2(c, &d, up).await;
                    }
                    return self.deliver(c, &d, &mut last).await;
                }
                _ => {}
            }
        }
    }

    /// `100 Continue`, once, when the client waits for it before sending its body.
    async fn continue_body(&mut self, c: &mut DownstreamConn) -> io::Result<()> {
        if !self.head.expect_continue() || self.reader.is_done() || !c.buf.is_empty() {
            return Ok(());
        }
        send_continue(&mut c.io, &mut self.sent_continue).await
    }

    /// C-RETRY-1: read the whole body for replay, bounded by `read_timeout`.
    async fn buffer(&mut self, c: &mut DownstreamConn) {
        if self.continue_body(c).await.is_err() {
            return self.feed(Input::BodyUnreadable);
        }
        let mut body = Vec::new();
        let data_plane = self.data_plane;
        let read = {
            let Req {
                exchange: x,
                reader,
                timer,
                body_bytes,
                ..
            } = self;
            let Some(x) = x.as_mut() else {
                return;
            };
            let read = pin!(read_body(c, reader, &mut body, body_bytes));
            drive::bounded_in(data_plane, x, timer, read).await
        };
        match read {
            Some(Ok(())) => {
                self.buffered = Some(body);
                self.feed(Input::BodyBuffered);
            }
            Some(Err(_)) => self.feed(Input::BodyUnreadable),
            None => {}
        }
    }

    /// C-MIRROR-1: the mirror goes on its own task with the headers an HTTP/2 attempt would
    /// carry and the decoded buffered body (`datapath::mirror`); nothing here waits for it.
    fn mirror(&mut self, m: weir_core::exchange::MirrorSend) {
        let data_plane = self.data_plane;
        let target = self
            .exchange()
            .snapshot()
            .backend(m.pool, m.backend)
            .and_then(|h| h.target.clone());
        let headers = match &target {
            Some(t) => self.h2_headers(t, data_plane.clock.now()),
            None => http::HeaderMap::new(),
        };
        let body = match m.body {
            SendBody::Buffered => self.decoded_buffer(),
            _ => bytes::Bytes::new(),
        };
        let Ok(uri) = self.pq.parse::<http::Uri>() else {
            return;
        };
        let copy = crate::datapath::mirror::Copy {
            method: self.log.method,
            uri: &uri,
            headers,
            body,
            client: self.client,
        };
        crate::datapath::mirror::spawn(data_plane, self.exchange(), m, copy);
    }

    /// One attempt: the head (and a buffered body) in one write on a pooled or new connection,
    /// a streamed body, the response head (interim ones relayed): the head and its connection
    /// into `last` (written there by the attempt, not returned).
    async fn send(
        &mut self,
        c: &mut DownstreamConn,
        s: &Send,
        last: &mut Option<Up>,
        last_h2: &mut Option<Box<H2Up>>,
    ) -> Result<(), Gone> {
        let data_plane = self.data_plane;
        wait_backoff(data_plane, c, s).await?;
        // The request's snapshot, indexed by the engine's backend index (C-POOL-2).
        let handles = self.exchange().handles(s.backend);
        let Some((target, metrics)) =
            handles.and_then(|h| Some((h.target.clone()?, Arc::clone(&h.metrics))))
        else {
            self.feed(Input::SendFailed(SendFailure::Connect));
            return Ok(());
        };
        if target.protocol().is_h2() {
            // Boxed: the HTTP/1 attempt's future does not grow by the HTTP/2 one.
            return Box::pin(self.send_h2(c, s, target, metrics, last_h2)).await;
        }
        let Ok(upstream_target) = upstream_target(target.base(), self.log.method, self.pq) else {
            self.feed(Input::TargetTooLong);
            return Ok(());
        };
        let wait = data_plane.upstream.config().expect_continue_timeout;
        let streamed = matches!(s.body, SendBody::Stream { .. });
        let expect = self.head.expect_upstream(
            streamed,
            !c.buf.is_empty(),
            self.sent_continue || self.reader.is_done(),
            wait,
        );
        self.write_head(c, &target, &upstream_target, (s.body, s.at), expect);
        let stream = match s.body {
            SendBody::Stream { read_deadline } => {
                // With the expectation passed on, the backend's `100` (or the timer) decides
                // when the client is told to send (`attempt`).
                if !expect && self.continue_body(c).await.is_err() {
                    return Err(Gone);
                }
                Some(read_deadline.map(|d| data_plane.clock.deadline(d)))
            }
            SendBody::Empty | SendBody::Buffered => None,
        };
        let hold = expect.then(|| data_plane.rt.now() + wait);
        let rctx = ResponseContext {
            head: self.head.is_head(),
            upgrade: self.exchange().upgrade_requested(),
        };
        let version = self.head.version;
        let client = self.client;
        let sent = {
            let Req {
                exchange: x,
                reader,
                sent_continue,
                body_fault,
                body_bytes,
                timer,
                kept,
                ..
            } = self;
            let Some(x) = x.as_mut() else {
                return Ok(());
            };
            let mut side = Side {
                reader,
                sent_continue,
                body_fault,
                version,
                body_bytes,
                client,
                kept,
                hold,
            };
            let attempt = pin!(attempt(
                data_plane, c, &target, &metrics, stream, &mut side, rctx, last, s.at
            ));
            drive::bounded_in(data_plane, x, timer, attempt).await
        };
        let head = match (&sent, last.as_ref()) {
            (Some(Ok(_)), Some(up)) => Some(head_input(up, &self.kept, rctx)),
            _ => None,
        };
        self.attempt_ended(sent, head, &target)
    }

    /// Tell the engine how the attempt to `target` ended (`None`: its deadline came first, and
    /// the engine was told already): whose fault a failure is, the client's or the backend's.
    fn attempt_ended(
        &mut self,
        sent: Option<Result<u16, UpError>>,
        head: Option<Input>,
        target: &Target,
    ) -> Result<(), Gone> {
        match sent {
            // The attempt writes `last` only as it completes: a deadline that came first left
            // it empty.
            None => Ok(()),
            Some(Ok(status)) => {
                self.feed(head.unwrap_or(Input::ResponseHead { status }));
                Ok(())
            }
            Some(Err(UpError::ClientGone)) => Err(Gone),
            Some(Err(UpError::Bad(h1::BadResponse::Status(status)))) => {
                // The engine classifies a status outside 100..=599 (an invalid response); the
                // connection that carried it is dropped.
                self.feed(Input::ResponseHead { status });
                Ok(())
            }
            Some(Err(_)) if self.body_fault == BodyFault::Malformed => {
                // The client's error, not the backend's: `400`; the upstream connection the
                // body was written to was dropped with the attempt.
                self.feed(Input::BodyUnreadable);
                Ok(())
            }
            Some(Err(_)) if self.body_fault == BodyFault::TimedOut => {
                // The client stopped sending its body: `408`, the backend not blamed.
                self.feed(Input::BodyTimeout);
                Ok(())
            }
            Some(Err(e)) => {
                tracing::debug!(backend = target.id(), error = %e, "upstream attempt failed");
                let failure = match e {
                    UpError::Connect(_) => SendFailure::Connect,
                    _ => SendFailure::Transport {
                        client_body_failed: self.body_fault != BodyFault::None,
                    },
                };
                self.feed(Input::SendFailed(failure));
                Ok(())
            }
        }
    }

    /// The upstream head of an attempt into `c.up_out` (C-PATH-3..6, C-FWD-1..3), with
    /// `Expect: 100-continue` when `expect` (`RequestHead::expect_upstream`), followed by the
    /// buffered body when the attempt sends it.
    fn write_head(
        &mut self,
        c: &mut DownstreamConn,
        target: &Target,
        upstream_target: &[u8],
        (body, at): (SendBody, weir_core::Instant),
        expect: bool,
    ) {
        let head = self.head;
        let x = self.exchange();
        // C-GRPC-2: what remains of a gRPC call's deadline replaces the client's grpc-timeout.
        let timeout = x.upstream_grpc_timeout(at).map(|t| t.to_bytes());
        // weir's lines borrow their values where they are (not copied into the
        // scratch first); their names are distinct, so nothing is replaced.
        let mut pairs: [(&str, &[u8]); 5] = [
            (header::REQUEST_ID, x.request_id().as_bytes()),
            (header::BACKEND_ATTEMPT, target.id().as_bytes()),
            ("", b""),
            ("", b""),
            ("", b""),
        ];
        let mut n = 2;
        if let Some(t) = &timeout {
            pairs[n] = (weir_core::grpc::timeout::NAME, t.as_bytes());
            n += 1;
        }
        if expect {
            pairs[n] = ("expect", b"100-continue");
            n += 1;
        }
        if head.host().is_none() {
            pairs[n] = ("host", target.host_header().as_bytes());
            n += 1;
        }
        c.up_out.clear();
        let req = UpstreamRequest {
            target: upstream_target,
            client: x.client(),
            proto: x.proto(),
            extra: &pairs[..n],
        };
        h1::write_upstream_request(head, &req, &mut c.up_out);
        if matches!(body, SendBody::Buffered)
            && let Some(b) = &self.buffered
        {
            c.up_out.extend_from_slice(b);
        }
    }
}

/// C-RETRY-10: a retry (or a hedge) waits out its backoff until `s.at`, unless the client leaves.
async fn wait_backoff(
    data_plane: &DataPlane,
    c: &mut DownstreamConn,
    s: &Send,
) -> Result<(), Gone> {
    let at = data_plane.clock.deadline(s.at);
    if at > data_plane.rt.now() {
        let cap = c.cap();
        let sleep = data_plane.rt.sleep_until(at);
        if !or_gone(c, cap, sleep).await {
            return Err(Gone);
        }
    }
    Ok(())
}
