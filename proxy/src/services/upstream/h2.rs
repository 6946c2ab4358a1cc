//! HTTP/2 upstreams (`protocol: h2c` or `h2`, C-GRPC-1): per backend a few connections shared
//! by every worker, each carrying many requests at once as streams.
//!
//! hyper's `client::conn::http2` speaks the protocol; this module carries out weir-core's choice
//! of connection (`stream_pick`, which the simulator drives too). Each connection counts the
//! streams weir has open on it and reads the backend's `SETTINGS_MAX_CONCURRENT_STREAMS` as its
//! connection task sees it (the value may change during the connection's life). A request goes
//! to the first connection with a stream to spare and opens another connection when every one
//! is full: h2 would otherwise queue the stream behind the others on the same connection, and
//! one slow request would hold up unrelated ones. Until the backend's first SETTINGS frame
//! arrives a connection is assumed to take one stream, so a burst before it opens more
//! connections rather than queueing.
//!
//! `server.upstream.max_conns_per_host` bounds the connections to a backend (those being
//! dialled included). At the bound with every connection full the request waits for a stream
//! to end or a connection to close, within `dial_timeout` (the time a new connection would
//! have had); past it the attempt is [`SendError::Saturated`]: nothing sent, retried elsewhere
//! whatever its method, and no failure of the backend's.
//!
//! Unlike the HTTP/1 pool, a connection has a task of its own (spawned on the runtime that
//! connected it): its streams belong to requests of many client connections and workers, so no
//! one request can drive it. A connection whose task ended (the backend closed it, sent
//! `GOAWAY` and finished its streams, or broke it) is dropped from the set at the next look;
//! one with no stream in use for `idle_conn_timeout` is closed by the sweep.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::{CONNECTION, HOST, TE, TRANSFER_ENCODING, UPGRADE};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http2;

use event_listener::Event;
use weir_core::stream_pick::{ConnLoad, Pick, pick_in};

use super::body::UpBody;
use super::error::SendError;
use super::pending::Pending;
use super::target::{PoolKey, Target};
use crate::base::rt::{Io, Rt};
use crate::observe::metrics::BackendMetrics;

/// How many streams a new connection is given before the backend's SETTINGS say how many it
/// takes (module doc).
const INITIAL_STREAMS: usize = 1;

/// Headers that are specific to one HTTP/1 connection and malformed in HTTP/2 (RFC 9113
/// §8.2.2); weir's hop-by-hop stripping leaves `Upgrade` on an upgrade request.
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// What a connection's task and its streams share.
#[derive(Debug)]
struct Shared {
    /// Streams weir has open on the connection.
    in_flight: AtomicUsize,
    /// The backend's current `SETTINGS_MAX_CONCURRENT_STREAMS` as h2 holds it.
    max: AtomicUsize,
    /// The connection's task ended.
    closed: AtomicBool,
    /// Streams ever opened (the sweep tells an idle connection from a busy one by it).
    uses: AtomicU64,
    /// The pools' signal that a stream or a connection ended (a request waiting at
    /// `max_conns_per_host` looks again).
    freed: Arc<Event>,
}

/// One HTTP/2 connection of the set.
#[derive(Debug)]
struct H2Conn {
    tx: http2::SendRequest<UpBody>,
    shared: Arc<Shared>,
    /// `uses` when the sweep last looked, and since when it has seen no new stream on an
    /// idle connection.
    seen_uses: u64,
    idle_since: Option<std::time::Instant>,
    /// The generation of the backend host name's addresses when it was made (C-DISC-2).
    host_generation: u64,
}

impl H2Conn {
    fn alive(&self) -> bool {
        !self.shared.closed.load(Ordering::Acquire) && !self.tx.is_closed()
    }
}

/// One stream's hold on its connection: dropped when the response body ends or is dropped,
/// which frees the stream for the next request.
#[derive(Debug)]
pub struct BackendStream {
    shared: Arc<Shared>,
}

impl Drop for BackendStream {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.shared.freed.notify(usize::MAX);
    }
}

impl BackendStream {
    fn lend(shared: &Arc<Shared>) -> BackendStream {
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        shared.uses.fetch_add(1, Ordering::Relaxed);
        BackendStream {
            shared: Arc::clone(shared),
        }
    }
}

/// The connections to one backend.
#[derive(Debug, Default)]
struct Conns {
    list: Vec<H2Conn>,
    /// Connections being dialled: they count against `max_conns_per_host`.
    connecting: usize,
}

impl Conns {
    /// What weir-core's `stream_pick` weighs: each live connection's streams in use and its
    /// limit, and each connection being dialled (no stream yet, but it counts against the bound).
    fn loads(&self) -> impl Iterator<Item = ConnLoad> + '_ {
        self.list
            .iter()
            .filter(|c| c.alive())
            .map(|c| ConnLoad {
                streams: u32::try_from(c.shared.in_flight.load(Ordering::Acquire))
                    .unwrap_or(u32::MAX),
                max_streams: u32::try_from(c.shared.max.load(Ordering::Acquire))
                    .unwrap_or(u32::MAX),
                accepting: true,
            })
            .chain((0..self.connecting).map(|_| ConnLoad {
                streams: 0,
                max_streams: 0,
                accepting: false,
            }))
    }
}

/// A connection being dialled, counted until it joins the list or fails.
struct Dialling<'p> {
    pools: &'p H2Pools,
    key: PoolKey,
}

impl Drop for Dialling<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.pools.lock().get_mut(&self.key) {
            c.connecting = c.connecting.saturating_sub(1);
        }
        self.pools.freed.notify(usize::MAX);
    }
}

/// What [`H2Pools::checkout`] found.
enum Checkout<'p> {
    /// A stream on a live connection.
    Stream(http2::SendRequest<UpBody>, BackendStream),
    /// No room: dial another connection (counted while it is dialled).
    Open(Dialling<'p>),
    /// No room, and `max_conns_per_host` connections already.
    Full,
}

/// The HTTP/2 connections of every backend (module doc).
pub(super) struct H2Pools {
    conns: Mutex<HashMap<PoolKey, Conns>>,
    builder: http2::Builder<Rt>,
    rt: Rt,
    /// `max_conns_per_host` (`None`: unlimited).
    max_conns: Option<u32>,
    /// How long a request waits for room at the bound (`dial_timeout`).
    wait: Duration,
    /// A stream or a connection ended.
    freed: Arc<Event>,
}

impl std::fmt::Debug for H2Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Pools").finish_non_exhaustive()
    }
}

impl H2Pools {
    pub(super) fn new(rt: Rt, max_conns: Option<u32>, wait: Duration) -> H2Pools {
        let mut builder = http2::Builder::new(rt);
        builder
            .timer(rt)
            .initial_max_send_streams(INITIAL_STREAMS)
            // A backend connection is long-lived and shared: a dead peer is noticed by PING.
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .max_header_list_size(1 << 20);
        H2Pools {
            conns: Mutex::new(HashMap::new()),
            builder,
            rt,
            max_conns,
            wait,
            freed: Arc::new(Event::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Conns>> {
        // A panic while the map was held leaves it consistent (every change is one call).
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the next stream to `target` goes, as weir-core's `stream_pick` says, dropping
    /// dead connections first.
    fn checkout(&self, target: &Target) -> Checkout<'_> {
        let current = crate::services::dns::host_generation(target.host());
        let mut map = self.lock();
        let key = target.pool_key();
        let conns = match map.get_mut(key) {
            Some(c) => c,
            None => map.entry(key.clone()).or_default(),
        };
        // C-DISC-2: a connection made before the host name's addresses changed takes no new
        // stream; dropping its sender here ends it once its streams are done.
        conns
            .list
            .retain(|c| c.alive() && c.host_generation == current);
        match pick_in(conns.loads(), self.max_conns) {
            Pick::Use(i) => match conns.list.get(i) {
                Some(conn) => Checkout::Stream(conn.tx.clone(), BackendStream::lend(&conn.shared)),
                None => Checkout::Full,
            },
            Pick::Open => {
                conns.connecting += 1;
                Checkout::Open(Dialling {
                    pools: self,
                    key: key.clone(),
                })
            }
            Pick::Full => Checkout::Full,
        }
    }

    /// Connections to all backends (tests, status).
    pub(super) fn count(&self) -> usize {
        self.lock().values().map(|c| c.list.len()).sum()
    }

    /// Drop dead connections, and live ones that had no stream in use for `idle` (none:
    /// kept), at `now`. Dropping a connection's last sender ends it gracefully.
    pub(super) fn sweep(&self, now: std::time::Instant, idle: Option<Duration>) {
        let mut map = self.lock();
        for conns in map.values_mut() {
            conns.list.retain_mut(|c| {
                if !c.alive() {
                    return false;
                }
                let uses = c.shared.uses.load(Ordering::Relaxed);
                if uses != c.seen_uses || c.shared.in_flight.load(Ordering::Acquire) > 0 {
                    c.seen_uses = uses;
                    c.idle_since = None;
                    return true;
                }
                let since = *c.idle_since.get_or_insert(now);
                idle.is_none_or(|idle| now.saturating_duration_since(since) < idle)
            });
        }
        map.retain(|_, c| !c.list.is_empty() || c.connecting > 0);
        drop(map);
        // A connection closed by the sweep frees room at the bound.
        self.freed.notify(usize::MAX);
    }

    /// Drop every connection (shutdown).
    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    /// A new connection to `target` with one stream taken: `io` (TCP, and TLS with ALPN `h2`),
    /// the HTTP/2 handshake, its task spawned.
    async fn connect(
        &self,
        target: &Arc<Target>,
        io: impl Future<Output = io::Result<Box<dyn Io>>>,
        dialling: Dialling<'_>,
    ) -> Result<(http2::SendRequest<UpBody>, BackendStream), SendError> {
        let host_generation = crate::services::dns::host_generation(target.host());
        let io = io.await.map_err(SendError::Connect)?;
        let (tx, conn) = self
            .builder
            .handshake(io)
            .await
            .map_err(|e| SendError::Connect(io::Error::other(e)))?;
        let shared = Arc::new(Shared {
            in_flight: AtomicUsize::new(0),
            max: AtomicUsize::new(INITIAL_STREAMS),
            closed: AtomicBool::new(false),
            uses: AtomicU64::new(0),
            freed: Arc::clone(&self.freed),
        });
        let task = Arc::clone(&shared);
        let mut conn = Box::pin(conn);
        self.rt.spawn(async move {
            let _ = std::future::poll_fn(|cx| {
                let polled = conn.as_mut().poll(cx);
                // SETTINGS are read while the connection is polled: their limit is current
                // after every poll. A higher one is room for a request waiting at the bound.
                let max = conn.current_max_send_streams();
                if task.max.swap(max, Ordering::AcqRel) < max {
                    task.freed.notify(usize::MAX);
                }
                polled
            })
            .await;
            task.closed.store(true, Ordering::Release);
            task.freed.notify(usize::MAX);
        });
        let stream = BackendStream::lend(&shared);
        let mut map = self.lock();
        let conns = map.entry(target.pool_key().clone()).or_default();
        conns.list.push(H2Conn {
            tx: tx.clone(),
            shared,
            seen_uses: 0,
            idle_since: None,
            host_generation,
        });
        drop(map);
        // In the list now: it no longer counts as being dialled, and waiters may take its
        // other streams.
        drop(dialling);
        Ok((tx, stream))
    }

    /// Send the request `make` makes to `target` as a stream on a connection with room, or on
    /// a new one over `connect`'s byte stream (counted in `metrics` as reused or opened): the
    /// response head and the stream's hold. The request is made once a connection exists: a
    /// connect error leaves it unmade (C-RETRY-9).
    pub(super) async fn send<F>(
        &self,
        target: &Arc<Target>,
        metrics: Option<&BackendMetrics>,
        make: impl FnOnce() -> Request<UpBody>,
        connect: impl FnOnce() -> F,
    ) -> Result<(Response<Incoming>, BackendStream), SendError>
    where
        F: Future<Output = io::Result<Box<dyn Io>>>,
    {
        let mut pending = Pending::Make(make);
        let mut deadline: Option<std::time::Instant> = None;
        let dialling = loop {
            let (mut tx, stream) = match self.checkout(target) {
                Checkout::Stream(tx, stream) => (tx, stream),
                Checkout::Open(dialling) => break dialling,
                Checkout::Full => {
                    self.wait_for_room(target, &mut deadline).await?;
                    continue;
                }
            };
            match tx
                .try_send_request(pending.made(|r| for_h2(r, target)))
                .await
            {
                Ok(resp) => {
                    if let Some(m) = metrics {
                        m.upstream_connection(true);
                    }
                    return Ok((resp, stream));
                }
                Err(mut e) => match e.take_message() {
                    // Never sent: the connection closed under us. Try another.
                    Some(back) => {
                        stream.shared.closed.store(true, Ordering::Release);
                        pending = Pending::Made(back);
                    }
                    None => return Err(SendError::of_h2(e.into_error())),
                },
            }
        };
        // Boxed: connecting is a large future that a request on a shared connection never runs.
        let (mut tx, stream) = Box::pin(self.connect(target, connect(), dialling)).await?;
        if let Some(m) = metrics {
            m.upstream_connection(false);
        }
        match tx.send_request(pending.made(|r| for_h2(r, target))).await {
            Ok(resp) => Ok((resp, stream)),
            Err(e) => Err(SendError::of_h2(e)),
        }
    }
}

impl H2Pools {
    /// Every connection to `target` is full at `max_conns_per_host`: wait until a stream or a
    /// connection ends, until `deadline` (set on the first wait, `dial_timeout` from then).
    async fn wait_for_room(
        &self,
        target: &Target,
        deadline: &mut Option<std::time::Instant>,
    ) -> Result<(), SendError> {
        let until = *deadline.get_or_insert_with(|| self.rt.now() + self.wait);
        let listener = self.freed.listen();
        // Room may have come between the look and the listening: look again first.
        if !self.is_full(target) {
            return Ok(());
        }
        match crate::base::rt::timeout_at(self.rt, until, listener).await {
            Ok(()) => Ok(()),
            Err(_) => Err(SendError::Saturated),
        }
    }

    /// Whether `target` has no room and may open no connection.
    fn is_full(&self, target: &Target) -> bool {
        let map = self.lock();
        let Some(conns) = map.get(target.pool_key()) else {
            return false;
        };
        pick_in(conns.loads(), self.max_conns) == Pick::Full
    }
}

/// `req` as an HTTP/2 request to `target`: `:scheme` and `:authority` from the target and the
/// request's `Host` (which HTTP/2 carries as `:authority`), and no connection-specific header
/// (RFC 9113 §8.2.2: `TE` only as `trailers`).
fn for_h2(req: Request<UpBody>, target: &Target) -> Request<UpBody> {
    let (mut parts, body) = req.into_parts();
    let headers = &mut parts.headers;
    let host = headers.remove(HOST);
    let authority = host
        .as_ref()
        .and_then(|h| Authority::try_from(h.as_bytes()).ok())
        .or_else(|| Authority::try_from(target.host_header().as_bytes()).ok());
    let scheme = if target.tls.is_some() {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    };
    let mut uri = http::uri::Parts::from(std::mem::take(&mut parts.uri));
    uri.scheme = Some(scheme);
    uri.authority = authority;
    if uri.path_and_query.is_none() {
        uri.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    parts.uri = Uri::from_parts(uri).unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = http::Version::HTTP_2;
    strip_connection_headers(headers);
    Request::from_parts(parts, body)
}

/// Remove what HTTP/2 forbids in a request's fields.
fn strip_connection_headers(headers: &mut HeaderMap) {
    // One pass over the names first: most requests carry none of these, and a gRPC request's
    // single `te: trailers` is already what HTTP/2 allows, so nothing is removed or rewritten.
    let (mut strip, mut te) = (false, false);
    for name in headers.keys() {
        if name == CONNECTION
            || name == UPGRADE
            || name == TRANSFER_ENCODING
            || name == KEEP_ALIVE
            || name == PROXY_CONNECTION
        {
            strip = true;
        } else if name == TE {
            te = true;
        }
    }
    if strip {
        for name in [
            CONNECTION,
            UPGRADE,
            TRANSFER_ENCODING,
            KEEP_ALIVE,
            PROXY_CONNECTION,
        ] {
            headers.remove(name);
        }
    }
    if !te {
        return;
    }
    let already_trailers = {
        let mut values = headers.get_all(TE).iter();
        // Left as it is only when it is byte for byte what the rewrite would insert (a
        // sensitive value keeps being sent never-indexed, so it is rewritten as before).
        matches!((values.next(), values.next()),
            (Some(v), None) if v == "trailers" && !v.is_sensitive())
    };
    if already_trailers {
        return;
    }
    let trailers = headers.get_all(TE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    });
    headers.remove(TE);
    if trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONTENT_TYPE;

    #[test]
    fn c_grpc_1_request_as_h2_has_authority_and_no_connection_headers() {
        let target = Target::new("a", "http://127.0.0.1:9001").expect("target");
        let mut req = Request::new(UpBody::Empty);
        *req.uri_mut() = Uri::from_static("/pkg.Svc/Call?x=1");
        let h = req.headers_mut();
        h.insert(HOST, HeaderValue::from_static("api.example"));
        h.insert(TE, HeaderValue::from_static("trailers, deflate"));
        h.insert(CONNECTION, HeaderValue::from_static("keep-alive"));
        h.insert(KEEP_ALIVE, HeaderValue::from_static("timeout=5"));
        h.insert(UPGRADE, HeaderValue::from_static("websocket"));
        let req = for_h2(req, &target);
        assert_eq!(req.uri(), "http://api.example/pkg.Svc/Call?x=1");
        let h = req.headers();
        assert_eq!(h.get(TE).map(HeaderValue::as_bytes), Some(&b"trailers"[..]));
        for name in [HOST, CONNECTION, KEEP_ALIVE, UPGRADE] {
            assert!(!h.contains_key(&name), "{name}");
        }
        let mut req = Request::new(UpBody::Empty);
        *req.uri_mut() = Uri::from_static("/");
        req.headers_mut()
            .insert(TE, HeaderValue::from_static("gzip"));
        let req = for_h2(req, &target);
        assert_eq!(req.uri(), "http://127.0.0.1:9001/");
        assert!(!req.headers().contains_key(TE));
    }

    /// The TE rewrite's cases: a lone `te: trailers` kept, anything else made into one
    /// `trailers` or dropped, the other fields untouched.
    #[test]
    fn c_grpc_1_te_is_trailers_once_or_nothing() {
        let te = |values: &[&'static str], sensitive: bool| {
            let mut h = HeaderMap::new();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            for v in values {
                let mut v = HeaderValue::from_static(v);
                v.set_sensitive(sensitive);
                h.append(TE, v);
            }
            strip_connection_headers(&mut h);
            assert_eq!(
                h.get(CONTENT_TYPE).map(|v| v.as_bytes()),
                Some(&b"application/grpc"[..])
            );
            let out: Vec<_> = h
                .get_all(TE)
                .iter()
                .map(|v| (v.as_bytes().to_vec(), v.is_sensitive()))
                .collect();
            out
        };
        let trailers = vec![(b"trailers".to_vec(), false)];
        assert_eq!(te(&["trailers"], false), trailers);
        assert_eq!(te(&["trailers"], true), trailers);
        assert_eq!(te(&["Trailers"], false), trailers);
        assert_eq!(te(&["gzip", "trailers"], false), trailers);
        assert_eq!(te(&["trailers", "trailers"], false), trailers);
        assert_eq!(te(&["gzip"], false), vec![]);
        assert_eq!(te(&[], false), vec![]);
    }
}
