//! One attempt on an upstream connection (`h1::request`'s `Send`): the head (and a buffered
//! body) written on a pooled or new connection, a streamed body, the response head read with
//! interim heads relayed, the client watched for its end meanwhile (C-PATH-9).

use std::borrow::Cow;
use std::future::{Future as _, poll_fn};
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Method;
use weir_core::exchange::Input;
use weir_core::h1::{
    self, BodyFraming, ClientSide, EMPTY_HEADER, Parsed, ResponseContext, Version,
};
use weir_core::upstream::BackendBase;

use super::downstream_conn::DownstreamConn;
use super::io::{Extra, send_continue, write_all};
use super::relay::{self, Pump, Reader, RelayError};
use super::upstream_conn::{
    self, HeadInfo, KEPT_LINES, Kept, MAX_RESPONSE_HEADERS, RESPONSE_LIMITS, UpConn, UpError,
};
use crate::base::clock::Clock;
use crate::base::rt;
use crate::observe::metrics::BackendMetrics;
use crate::services::state::DataPlane;
use crate::services::upstream::{DownstreamEnds, Target};

/// Run `fut` unless the client closes first (C-PATH-9, C-LOAD-1: a queued client that leaves
/// leaves the queue): whether `fut` completed.
pub(super) async fn or_gone(
    c: &mut DownstreamConn,
    cap: usize,
    fut: impl std::future::Future<Output = ()>,
) -> bool {
    let gone = relay::until_closed(&mut c.io, &mut c.buf, cap);
    matches!(
        futures_util::future::select(pin!(fut), pin!(gone)).await,
        futures_util::future::Either::Left(_)
    )
}

/// The latest attempt's response head on its connection.
pub(super) struct Up {
    pub(super) conn: UpConn,
    pub(super) info: HeadInfo,
    pub(super) target: Arc<Target>,
    /// The streamed request body, if it was still being sent when the head came (full duplex).
    pub(super) pump: Option<Pump>,
}

/// The latest attempt's response head when its backend speaks HTTP/2 (C-GRPC-1,
/// `request::to_h2`), and what it holds of its backend.
pub(super) struct H2Up {
    pub(super) resp: http::Response<hyper::body::Incoming>,
    pub(super) lent: crate::services::upstream::Lent,
    pub(super) target: Arc<Target>,
}

/// How reading the client's streamed request body failed while an attempt sent it: the
/// client's fault in each case, never the backend's (C-PATH-9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum BodyFault {
    /// It did not fail (so far).
    #[default]
    None,
    /// The client closed or its socket broke.
    Gone,
    /// The client stopped sending and `server.read_timeout` passed (`408`).
    TimedOut,
    /// It broke its chunked coding (`400`).
    Malformed,
}

/// The parts of a request an attempt changes.
pub(super) struct Side<'r> {
    pub(super) reader: &'r mut Reader,
    pub(super) sent_continue: &'r mut bool,
    /// How the client's streamed body failed, if it did (C-PATH-9: whose fault it is).
    pub(super) body_fault: &'r mut BodyFault,
    pub(super) version: Version,
    /// The request body's bytes sent upstream so far (access log).
    pub(super) body_bytes: &'r mut u64,
    /// The client's connection, for a backend's PROXY header.
    pub(super) client: DownstreamEnds,
    /// The latest response head's parse ([`upstream_conn::poll_head`]).
    pub(super) kept: &'r mut Kept,
    /// The client's `Expect: 100-continue` was passed on: the streamed body is held until the
    /// backend's `100`, its final head, the client sending anyway, or this instant
    /// (`expect_continue_timeout`), when weir sends the client its own `100`.
    pub(super) hold: Option<std::time::Instant>,
}

/// What waiting on an attempt came to.
enum Step {
    /// A response head (interim or final).
    Head(HeadInfo),
    /// The held body may go: the client started sending it (`false`), or the
    /// `expect_continue_timeout` ran out (`true`: tell the client to send).
    Release(bool),
}

/// Send the head in `c.up_out` (a pooled connection first, a new one if none takes it), stream
/// the body if `stream` (its read deadline) while reading the response head, relaying interim
/// ones: the connection, the head, and the body's [`Pump`] if there is one (still sending when
/// the head came first) into `last` (written in place, not moved out through the
/// bound and the send), the head's status returned. `now`: when the engine sent it
/// ([`Send::at`](weir_core::exchange::Send::at)), the time a pooled connection is checked
/// out at.
#[allow(clippy::too_many_arguments)]
pub(super) async fn attempt(
    data_plane: &DataPlane,
    c: &mut DownstreamConn,
    target: &Arc<Target>,
    metrics: &BackendMetrics,
    stream: Option<Option<std::time::Instant>>,
    side: &mut Side<'_>,
    rctx: ResponseContext,
    last: &mut Option<Up>,
    now: weir_core::Instant,
) -> Result<u16, UpError> {
    let mut conn = send_head(data_plane, target, metrics, &c.up_out, side.client, now).await?;
    // Full duplex: the body is sent while the response head is awaited, so a
    // backend that answers before reading it is answered at once; a body not sent whole by
    // then goes on beside the response ([`Pump`], `deliver`).
    let mut pump = stream.map(|at| Pump::new(at.map(|at| rt::Deadline::new(data_plane.rt, at))));
    let mut hold = side
        .hold
        .take()
        .filter(|_| pump.is_some())
        .map(|at| rt::Deadline::new(data_plane.rt, at));
    loop {
        let step = poll_fn(|cx| match hold.as_mut() {
            Some(until) => {
                if !c.buf.is_empty() {
                    return Poll::Ready(Ok(Step::Release(false)));
                }
                if std::pin::Pin::new(until).poll(cx).is_ready() {
                    return Poll::Ready(Ok(Step::Release(true)));
                }
                // Not sending yet: the client is watched (its first body bytes end the hold).
                wait_head(&mut conn, c, &mut None, side, cx, rctx).map(|r| r.map(Step::Head))
            }
            None => wait_head(&mut conn, c, &mut pump, side, cx, rctx).map(|r| r.map(Step::Head)),
        })
        .await?;
        let info = match step {
            Step::Head(info) => info,
            Step::Release(tell) => {
                hold = None;
                if tell {
                    send_continue(&mut c.io, side.sent_continue)
                        .await
                        .map_err(|_| UpError::ClientGone)?;
                }
                continue;
            }
        };
        if !info.interim {
            let status = info.status;
            *last = Some(Up {
                conn,
                info,
                target: Arc::clone(target),
                pump,
            });
            return Ok(status);
        }
        let swallow = info.status == 100 && *side.sent_continue;
        if !swallow && h1::relay_interim(side.version) {
            c.out.clear();
            interim_head(&conn, side.kept, rctx, &mut c.out);
            let out = std::mem::take(&mut c.out);
            let r = write_all(&mut c.io, &out).await;
            c.out = out;
            r.map_err(|_| UpError::ClientGone)?;
            *side.sent_continue |= info.status == 100;
        }
        if info.status == 100 {
            // The backend asked for the body (or sent a `100` unasked): it goes now.
            hold = None;
        }
        conn.buf.consume(info.head_len);
    }
}

/// Write `bytes` (an attempt's head, and its buffered body if it has one) on a pooled
/// connection to `target` that takes them, or else on a new one (the `client`'s PROXY header
/// first, if the backend wants one), counted in `metrics` as reused or opened: the connection.
/// `now`: when the engine sent the attempt, the time a pooled connection is checked out at.
/// Both the lone attempt ([`attempt`]) and each attempt of a hedged race (`request::hedge`)
/// start here.
pub(super) async fn send_head(
    data_plane: &DataPlane,
    target: &Arc<Target>,
    metrics: &BackendMetrics,
    bytes: &[u8],
    client: DownstreamEnds,
    now: weir_core::Instant,
) -> Result<UpConn, UpError> {
    let up = &data_plane.upstream;
    while let Some(mut pooled) = upstream_conn::checkout(up, target, now) {
        if write_all(&mut pooled.io, bytes).await.is_ok() {
            metrics.upstream_connection(true);
            return Ok(pooled);
        }
    }
    // Boxed: connecting (DNS, TLS) is a large future a pooled attempt never runs.
    let mut fresh = Box::pin(upstream_conn::connect(up, target, client)).await?;
    metrics.upstream_connection(false);
    write_all(&mut fresh.io, bytes)
        .await
        .map_err(UpError::Transport)?;
    Ok(fresh)
}

/// The upstream's response head, the request body sent meanwhile (`pump`), the client's socket
/// watched for its end once the body is sent (C-PATH-9).
fn wait_head(
    conn: &mut UpConn,
    c: &mut DownstreamConn,
    pump: &mut Option<Pump>,
    side: &mut Side<'_>,
    cx: &mut Context<'_>,
    rctx: ResponseContext,
) -> Poll<Result<HeadInfo, UpError>> {
    let mut sending = false;
    if let Some(p) = pump.as_mut()
        && p.is_sending()
    {
        let source = (&mut c.io, &mut c.buf);
        match p.poll(source, side.reader, &mut conn.io, side.body_bytes, cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Pending => sending = true,
            // The backend stopped reading: it may have answered (its head decides) or be
            // gone (its end of stream does).
            Poll::Ready(Err(RelayError::Sink(_))) => {}
            Poll::Ready(Err(RelayError::Source(e))) => {
                *side.body_fault = if e.kind() == io::ErrorKind::TimedOut {
                    BodyFault::TimedOut
                } else {
                    BodyFault::Gone
                };
                return Poll::Ready(Err(UpError::Transport(e)));
            }
            Poll::Ready(Err(RelayError::Malformed(e))) => {
                *side.body_fault = BodyFault::Malformed;
                return Poll::Ready(Err(UpError::Transport(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e.to_string(),
                ))));
            }
        }
    }
    if let Poll::Ready(r) = upstream_conn::poll_head(conn, cx, rctx, side.kept) {
        return Poll::Ready(r);
    }
    if sending {
        // The pump reads the client; its end of stream is the pump's failure.
        return Poll::Pending;
    }
    let cap = c.cap();
    if !c.buf.is_full(cap) {
        match c.buf.poll_fill(&mut c.io, cx, cap) {
            Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(Err(UpError::ClientGone)),
            Poll::Ready(Ok(_)) => cx.waker().wake_by_ref(),
            Poll::Pending => {}
        }
    }
    Poll::Pending
}

/// The client's head for the response at the start of `conn.buf`: what to send and how, the
/// upstream body's framing, and whether the upstream connection is reusable after it.
pub(super) fn response_head(
    conn: &UpConn,
    kept: &Kept,
    rctx: ResponseContext,
    client: ClientSide,
    extra: &Extra,
    out: &mut Vec<u8>,
) -> Option<(h1::ResponseOut, BodyFraming, bool)> {
    // A kept head is written from its places in the buffer, not rebuilt first.
    if let Some(k) = kept
        && let Some(written) =
            extra.with_pairs(|pairs| k.write_response_head(conn.buf.bytes(), client, pairs, out))
    {
        return Some((written, k.body(), k.reusable()));
    }
    with_head(conn, kept, rctx, |head| {
        let written = extra.with_pairs(|pairs| h1::write_response_head(head, client, pairs, out));
        (written, head.body, head.reusable())
    })
}

/// What the engine is told of the final head in `up`: its status, and for a `503` the delay its
/// `Retry-After` asks for (C-RETRY-11; the head is parsed again only then).
pub(super) fn head_input(up: &Up, kept: &Kept, rctx: ResponseContext) -> Input {
    let status = up.info.status;
    if status != weir_core::pushback::PUSHBACK_STATUS {
        return Input::ResponseHead { status };
    }
    with_head(&up.conn, kept, rctx, |head| {
        Input::response_head(status, head.headers, false, Clock::wall())
    })
    .unwrap_or(Input::ResponseHead { status })
}

/// An interim head for the client.
pub(super) fn interim_head(conn: &UpConn, kept: &Kept, rctx: ResponseContext, out: &mut Vec<u8>) {
    with_head(conn, kept, rctx, |head| h1::write_interim(head, out));
}

/// `f` of the response head at the start of `conn.buf`: from its kept parse, or parsed again
/// when none was kept (a head of many lines).
fn with_head<R>(
    conn: &UpConn,
    kept: &Kept,
    rctx: ResponseContext,
    f: impl FnOnce(&h1::ResponseHead<'_, '_>) -> R,
) -> Option<R> {
    let buf = conn.buf.bytes();
    if let Some(kept) = kept {
        let mut lines = [EMPTY_HEADER; KEPT_LINES];
        if let Some(head) = kept.head(buf, &mut lines) {
            return Some(f(&head));
        }
    }
    let mut headers = h1::header_slots::<MAX_RESPONSE_HEADERS>();
    match h1::parse_response_in(buf, &mut headers, &RESPONSE_LIMITS, rctx) {
        Ok(Parsed::Complete(head)) => Some(f(&head)),
        _ => None,
    }
}

/// The upstream target of an attempt (C-PATH-5): the client's own bytes when the backend has no
/// path prefix, core's join otherwise.
pub(super) fn upstream_target<'t>(
    base: &BackendBase,
    method: &Method,
    pq: &'t str,
) -> Result<Cow<'t, [u8]>, ()> {
    if base.path_prefix().is_empty() && pq.starts_with('/') {
        return Ok(Cow::Borrowed(pq.as_bytes()));
    }
    let raw = if pq.is_empty() { "/" } else { pq };
    let full = base.upstream_uri(method, raw).map_err(|_| ())?;
    Ok(Cow::Owned(
        full.path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes()
            .to_vec(),
    ))
}
