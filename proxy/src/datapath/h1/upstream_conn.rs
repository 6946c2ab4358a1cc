//! Upstream HTTP/1.1 connections of weir's own (C-PATH-7, C-PATH-9, C-RETRY-5, C-RETRY-6): a
//! `Box<dyn Io>` and a read buffer, lent to one request at a time and driven in that request's
//! task (no connection task, no dispatch channel).
//!
//! Pooling: one `weir_core::idle_pool::IdlePool` per worker thread and [`Upstream`] (the idle
//! policy, its adaptive caps and expiry are core's). A connection goes back to the pool only
//! when its response was read to the end, the upstream did not ask to close, and its read
//! buffer holds no byte more (a body on a HEAD/204/304 answer, or garbage after a response,
//! makes it unusable). A pooled connection is checked before reuse: if the upstream closed it
//! or sent anything while it was idle, it is dropped. A connection that began with a PROXY
//! header (`send_proxy_protocol`) names one client and is never pooled.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use weir_core::h1::{self, BadResponse, Parsed, ResponseContext};
use weir_core::idle_pool::IdlePool;

use super::io::Buf;
use crate::base::rt::Io;
use crate::services::dns;
use crate::services::upstream::{DownstreamEnds, PoolKey, Target, Upstream};

/// Header lines an upstream response may carry.
pub const MAX_RESPONSE_HEADERS: usize = 128;

/// The largest upstream response head.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// The limits of an upstream response head.
pub const RESPONSE_LIMITS: h1::Limits = h1::Limits {
    max_request_line: MAX_RESPONSE_HEAD,
    max_head_bytes: MAX_RESPONSE_HEAD,
};

/// An upstream connection.
pub struct UpConn {
    /// The socket (TCP or TLS).
    pub io: Box<dyn Io>,
    /// Bytes read and not used yet.
    pub buf: Buf,
    target: Arc<Target>,
    /// The pool (its `Upstream`'s id) this connection is lent from, while lent.
    lent: Option<u64>,
    /// The generation of the backend host name's addresses when it was made (C-DISC-2).
    host_generation: u64,
}

impl std::fmt::Debug for UpConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpConn")
            .field("backend", &self.target.id())
            .finish_non_exhaustive()
    }
}

impl Drop for UpConn {
    fn drop(&mut self) {
        let Some(id) = self.lent.take() else {
            return;
        };
        let _ = POOLS.try_with(|pools| {
            if let Ok(mut pools) = pools.try_borrow_mut()
                && let Some((_, pool)) = pools.iter_mut().find(|(i, _)| *i == id)
            {
                pool.handle_closed(self.target.pool_key());
            }
        });
    }
}

/// A worker's idle connections to one [`Upstream`]'s backends.
type Pool = IdlePool<UpConn, PoolKey>;

thread_local! {
    static POOLS: RefCell<Vec<(u64, Pool)>> = const { RefCell::new(Vec::new()) };
}

fn with_pool<R>(up: &Upstream, f: impl FnOnce(&mut Pool) -> R) -> R {
    POOLS.with(|pools| {
        let mut pools = pools.borrow_mut();
        let i = match pools.iter().position(|(id, _)| *id == up.id()) {
            Some(i) => i,
            None => {
                pools.push((up.id(), IdlePool::new(up.idle_params())));
                pools.len() - 1
            }
        };
        f(&mut pools[i].1)
    })
}

/// How an attempt failed before its response head.
#[derive(Debug)]
pub enum UpError {
    /// No connection (DNS, refused, dial or TLS timeout, handshake).
    Connect(io::Error),
    /// The connection broke, or the upstream answered with a defect (then it is not reused).
    Transport(io::Error),
    /// The response head broke a parsing rule (`502`).
    Bad(BadResponse),
    /// The client went away while the attempt was out (C-PATH-9).
    ClientGone,
}

impl std::fmt::Display for UpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpError::Connect(e) => write!(f, "connect: {e}"),
            UpError::Transport(e) => write!(f, "transport: {e}"),
            UpError::Bad(e) => write!(f, "invalid response: {e}"),
            UpError::ClientGone => f.write_str("client went away"),
        }
    }
}

/// Whether an idle connection is still usable: nothing to read (not closed, no stray bytes).
fn still_idle(conn: &mut UpConn) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    conn.buf.is_empty() && matches!(conn.buf.poll_fill(&mut conn.io, &mut cx, 1), Poll::Pending)
}

/// The most recently idle usable connection to `target` at `now` (expired and stale ones are
/// closed).
#[must_use]
pub fn checkout(up: &Upstream, target: &Target, now: weir_core::Instant) -> Option<UpConn> {
    if !target.poolable() {
        return None;
    }
    let current = dns::host_generation(target.host());
    loop {
        let mut conn = with_pool(up, |pool| pool.checkout(target.pool_key(), now))?;
        conn.lent = Some(up.id());
        // C-DISC-2: a connection made before the host name's addresses changed is closed.
        if conn.host_generation == current && still_idle(&mut conn) {
            return Some(conn);
        }
    }
}

/// A new connection to `target` for `client`'s request.
///
/// # Errors
/// The connection could not be made.
pub async fn connect(
    up: &Upstream,
    target: &Arc<Target>,
    client: DownstreamEnds,
) -> Result<UpConn, UpError> {
    let host_generation = dns::host_generation(target.host());
    let io = up
        .connect_io(target, client)
        .await
        .map_err(UpError::Connect)?;
    with_pool(up, |pool| {
        pool.handle_opened(target.pool_key(), up.now());
    });
    Ok(UpConn {
        io,
        buf: Buf::new(),
        target: Arc::clone(target),
        lent: Some(up.id()),
        host_generation,
    })
}

/// Give a connection back after its response ended at `now` (the caller asked core whether
/// it may be reused: `idle_pool::reusable_after`); dropped (closed) if the idle policy does not
/// keep it.
pub fn release(up: &Upstream, mut conn: UpConn, now: weir_core::Instant) {
    conn.lent = None;
    conn.buf.release();
    let target = Arc::clone(&conn.target);
    let refused = with_pool(up, |pool| pool.release(target.pool_key(), conn, now));
    drop(refused);
}

/// Close idle connections past `idle_conn_timeout` or closed by their backend.
pub fn sweep(up: &Upstream) {
    let now = up.now();
    with_pool(up, |pool| pool.sweep(now, still_idle));
}

/// Drop every idle connection of this worker (shutdown).
pub fn clear(up: &Upstream) {
    with_pool(up, Pool::clear);
}

/// Idle connections this worker holds (tests).
#[must_use]
pub fn idle_count(up: &Upstream) -> usize {
    with_pool(up, |pool| pool.idle_count())
}

/// Header lines of a response head kept from its first parse ([`HeadInfo::kept`]); a head with
/// more is parsed again when it is written.
pub const KEPT_LINES: usize = 24;

/// A response head at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadInfo {
    /// Its status.
    pub status: u16,
    /// Its bytes.
    pub head_len: usize,
    /// 1xx other than `101`.
    pub interim: bool,
}

/// A response head's parse, kept to write the head from without parsing it again:
/// a slot in the request (not moved with every [`HeadInfo`]).
pub type Kept = Option<h1::KeptHead<KEPT_LINES>>;

/// Whether `buf` starts with a whole response head (then its parse is in `kept`, if it has at
/// most [`KEPT_LINES`] lines).
///
/// # Errors
/// The head breaks a parsing rule.
pub fn peek_head(
    buf: &Buf,
    ctx: ResponseContext,
    kept: &mut Kept,
) -> Result<Option<HeadInfo>, BadResponse> {
    let mut headers = h1::header_slots::<MAX_RESPONSE_HEADERS>();
    match h1::parse_response_in(buf.bytes(), &mut headers, &RESPONSE_LIMITS, ctx)? {
        Parsed::Partial => Ok(None),
        Parsed::Complete(h) => {
            h.keep_in(kept);
            Ok(Some(HeadInfo {
                status: h.status,
                head_len: h.head_len,
                interim: h.is_interim(),
            }))
        }
    }
}

/// Read until a whole response head is buffered (its parse kept in `kept`).
pub fn poll_head(
    conn: &mut UpConn,
    cx: &mut Context<'_>,
    ctx: ResponseContext,
    kept: &mut Kept,
) -> Poll<Result<HeadInfo, UpError>> {
    loop {
        if !conn.buf.is_empty()
            && let Some(info) = peek_head(&conn.buf, ctx, kept).map_err(UpError::Bad)?
        {
            return Poll::Ready(Ok(info));
        }
        match conn.buf.poll_fill(&mut conn.io, cx, MAX_RESPONSE_HEAD + 1) {
            Poll::Ready(Ok(0)) => {
                return Poll::Ready(Err(UpError::Transport(io::Error::from(
                    io::ErrorKind::UnexpectedEof,
                ))));
            }
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(UpError::Transport(e))),
            Poll::Pending => return Poll::Pending,
        }
    }
}
