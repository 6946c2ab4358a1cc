//! One attempt on an upstream connection (`h1::request`'s `Send`): the head (and a buffered
//! body) written on a pooled or new connection, a streamed body, the response head read with
//! interim heads relayed, the client watched for its end meanwhile (C-PATH-9).

use std::borrow::Cow;
use std::future::poll_fn;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Method;
use weir_core::h1::{
    self, BodyFraming, ClientSide, EMPTY_HEADER, Parsed, ResponseContext, Version,
};
use weir_core::upstream::BackendBase;

use super::client::{self, HeadInfo, MAX_RESPONSE_HEADERS, RESPONSE_LIMITS, UpConn, UpError};
use super::conn::Client;
use super::relay::{self, Reader, RelayError};
use super::{Extra, write_all};
use crate::Shared;
use crate::rt;
use crate::upstream::Target;

/// Run `fut` unless the client closes first (C-PATH-9, C-LOAD-1: a queued client that leaves
/// leaves the queue): whether `fut` completed.
pub(super) async fn or_gone(
    c: &mut Client,
    cap: usize,
    fut: impl std::future::Future<Output = ()>,
) -> bool {
    let gone = relay::until_closed(&mut c.io, &mut c.buf, cap);
    matches!(
        futures_util::future::select(pin!(fut), pin!(gone)).await,
        futures_util::future::Either::Left(_)
    )
}

/// The parts of a request an attempt changes.
pub(super) struct Side<'r> {
    pub(super) reader: &'r mut Reader,
    pub(super) sent_continue: &'r mut bool,
    pub(super) client_failed: &'r mut bool,
    pub(super) version: Version,
    /// The request body's bytes sent upstream so far (access log).
    pub(super) body_bytes: &'r mut u64,
    /// The client, for a backend's PROXY header.
    pub(super) peer: std::net::SocketAddr,
}

/// Send the head in `c.up_out` (a pooled connection first, a new one if none takes it), stream
/// the body if `stream` (its read deadline), and read the response head, relaying interim ones.
pub(super) async fn attempt(
    shared: &Shared,
    c: &mut Client,
    target: &Arc<Target>,
    stream: Option<Option<std::time::Instant>>,
    side: &mut Side<'_>,
    rctx: ResponseContext,
) -> Result<(UpConn, HeadInfo), UpError> {
    let up = &shared.upstream;
    let now = shared.rt.now();
    let mut conn = None;
    while let Some(mut pooled) = client::checkout(up, target, now) {
        if write_all(&mut pooled.io, &c.up_out).await.is_ok() {
            up.count_connection(target, true);
            conn = Some(pooled);
            break;
        }
    }
    let mut conn = match conn {
        Some(conn) => conn,
        None => {
            // Boxed: connecting (DNS, TLS) is a large future a pooled attempt never runs.
            let mut fresh = Box::pin(client::connect(up, target, side.peer)).await?;
            up.count_connection(target, false);
            write_all(&mut fresh.io, &c.up_out)
                .await
                .map_err(UpError::Transport)?;
            fresh
        }
    };
    if let Some(deadline) = stream {
        let mut w = std::mem::take(&mut c.out);
        let relay = relay::relay(
            (&mut c.io, &mut c.buf),
            side.reader,
            true,
            (&mut conn.io, None),
            &mut w,
            0,
            side.body_bytes,
        );
        let r = match deadline {
            Some(at) => rt::timeout_at(shared.rt, at, relay)
                .await
                .unwrap_or_else(|_| Err(RelayError::Source(io::ErrorKind::TimedOut.into()))),
            None => relay.await,
        };
        w.clear();
        c.out = w;
        match r {
            Ok(()) => {}
            Err(RelayError::Source(e)) => {
                *side.client_failed = true;
                return Err(UpError::Transport(e));
            }
            Err(RelayError::Sink(e)) => return Err(UpError::Transport(e)),
        }
    }
    loop {
        let info = poll_fn(|cx| wait_head(&mut conn, c, cx, rctx)).await?;
        if !info.interim {
            return Ok((conn, info));
        }
        let swallow = info.status == 100 && *side.sent_continue;
        if !swallow && h1::relay_interim(side.version) {
            c.out.clear();
            interim_head(&conn, rctx, &mut c.out);
            let out = std::mem::take(&mut c.out);
            let r = write_all(&mut c.io, &out).await;
            c.out = out;
            r.map_err(|_| UpError::ClientGone)?;
            *side.sent_continue |= info.status == 100;
        }
        conn.buf.consume(info.head_len);
    }
}

/// The upstream's response head, the client's socket watched for its end (C-PATH-9).
pub(super) fn wait_head(
    conn: &mut UpConn,
    c: &mut Client,
    cx: &mut Context<'_>,
    rctx: ResponseContext,
) -> Poll<Result<HeadInfo, UpError>> {
    if let Poll::Ready(r) = client::poll_head(conn, cx, rctx) {
        return Poll::Ready(r);
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
    rctx: ResponseContext,
    client: ClientSide,
    extra: &Extra,
    out: &mut Vec<u8>,
) -> Option<(h1::ResponseOut, BodyFraming, bool)> {
    let mut headers = [EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    let Ok(Parsed::Complete(head)) =
        h1::parse_response(conn.buf.bytes(), &mut headers, &RESPONSE_LIMITS, rctx)
    else {
        return None;
    };
    let written = extra.with_pairs(|pairs| h1::write_response_head(&head, client, pairs, out));
    Some((written, head.body, head.reusable()))
}

/// An interim head for the client.
pub(super) fn interim_head(conn: &UpConn, rctx: ResponseContext, out: &mut Vec<u8>) {
    let mut headers = [EMPTY_HEADER; MAX_RESPONSE_HEADERS];
    if let Ok(Parsed::Complete(head)) =
        h1::parse_response(conn.buf.bytes(), &mut headers, &RESPONSE_LIMITS, rctx)
    {
        h1::write_interim(&head, out);
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
