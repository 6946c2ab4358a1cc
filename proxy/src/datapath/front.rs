//! The accept hook: what happens to a new connection before HTTP (docs/tls.md).
//!
//! 1. **PROXY protocol** (when `server.proxy_protocol` is on): a peer outside
//!    `server.proxy_protocol_trusted` is closed at once; from a trusted one the header is read
//!    under `server.read_header_timeout`, bounded by weir-core's parser
//!    ([`weir_core::proxy_proto`]), and its source address becomes the peer (C-TLS-3). The
//!    socket is peeked and then exactly the header's bytes are consumed, so the client's first
//!    bytes (a ClientHello, a request) stay in the socket for what follows.
//! 2. **TLS** (when `server.tls` has certificates): the runtime's server handshake under
//!    `server.tls.handshake_timeout`; ALPN says whether HTTP/2 follows (C-TLS-1).
//!
//! Every refusal closes the connection, is counted (`metrics`) and logged; the listener goes
//! on serving.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Instant;

use hyper::rt::{Read, ReadBuf};
use weir_core::proxy_proto::{self, Accept, MAX_LEN, Parse};

use crate::base::rt::{self, SyncIo, TcpConn, TlsAccept};
use crate::observe::listener_tls::tls_metrics::{HandshakeFailure, ProxyRefusal};
use crate::services::state::ProxyState;

/// What the listener learnt of a connection before HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownstreamInfo {
    /// The client as C-FWD-1 sees it: the socket peer, or the PROXY header's source.
    pub peer: SocketAddr,
    /// The address the client connected to: the socket's local address, or the PROXY
    /// header's destination.
    pub local: SocketAddr,
    /// The TLS session, when the connection came over weir's TLS.
    pub tls: Option<TlsInfo>,
}

/// What a TLS handshake negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsInfo {
    /// ALPN chose `h2`.
    pub h2: bool,
}

/// Run the front of `proxy_state` on a new connection (module doc). `None`: the connection was
/// refused (and is dropped, so closed).
pub async fn prepare(
    proxy_state: &ProxyState,
    mut stream: Box<dyn TcpConn>,
    peer: SocketAddr,
    local: SocketAddr,
) -> Option<(Box<dyn TcpConn>, DownstreamInfo)> {
    let front = &proxy_state.front;
    let rt = proxy_state.data_plane.rt;
    let mut info = DownstreamInfo {
        peer,
        local,
        tls: None,
    };
    if let Some(accept) = front.proxy_protocol {
        let refused = |reason: ProxyRefusal, detail: &dyn std::fmt::Display| {
            front.metrics.proxy_refused(reason);
            tracing::info!(
                target: "weir::front",
                peer = %peer,
                reason = ?reason,
                detail = %detail,
                "PROXY protocol: connection closed"
            );
        };
        if !front.proxy_trusted(peer.ip()) {
            refused(
                ProxyRefusal::Untrusted,
                &"peer not in server.proxy_protocol_trusted",
            );
            return None;
        }
        let deadline = rt.now() + proxy_state.data_plane.limits.read_header_timeout;
        match read_proxy_header(rt, &mut stream, accept, deadline).await {
            Ok(addresses) => {
                front.metrics.proxy_accepted();
                if let Some((source, destination)) = addresses {
                    info.peer = source;
                    info.local = destination;
                }
            }
            Err(Refusal(reason, detail)) => {
                refused(reason, &detail);
                return None;
            }
        }
    }
    if let Some(tls) = &front.tls {
        let handshake = rt.tls_accept(TlsAccept::new(std::sync::Arc::clone(&tls.config), stream));
        let result = rt::timeout(rt, tls.settings.handshake_timeout, handshake).await;
        let accepted = match result {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                let reason = HandshakeFailure::of(&e);
                front.metrics.handshake_failed(reason);
                tracing::debug!(target: "weir::front", peer = %info.peer, reason = reason.as_str(), error = %e, "TLS handshake failed");
                return None;
            }
            Err(rt::Elapsed) => {
                front.metrics.handshake_failed(HandshakeFailure::Timeout);
                tracing::debug!(target: "weir::front", peer = %info.peer, "TLS handshake timed out");
                return None;
            }
        };
        front.metrics.handshake(accepted.version);
        info.tls = Some(TlsInfo {
            h2: accepted.alpn.as_deref() == Some(b"h2"),
        });
        stream = Box::new(TlsConn(accepted.io));
    }
    Some((stream, info))
}

/// A refused PROXY header: the reason and what was wrong.
struct Refusal(ProxyRefusal, String);

/// Read one PROXY header from `stream` (module doc): the source and destination it carries
/// (`None`: keep the socket's addresses).
async fn read_proxy_header(
    rt: rt::Rt,
    stream: &mut Box<dyn TcpConn>,
    accept: Accept,
    deadline: Instant,
) -> Result<Option<(SocketAddr, SocketAddr)>, Refusal> {
    let mut buf = vec![0u8; MAX_LEN];
    let mut filled = 0;
    let io_err = |e: io::Error| Refusal(ProxyRefusal::Io, e.to_string());
    loop {
        let peek = std::future::poll_fn(|cx| stream.poll_peek(cx, &mut buf[filled..]));
        let n = match rt::timeout_at(rt, deadline, peek).await {
            Err(rt::Elapsed) => {
                return Err(Refusal(
                    ProxyRefusal::Timeout,
                    "no whole header within server.read_header_timeout".into(),
                ));
            }
            Ok(Err(e)) => return Err(io_err(e)),
            Ok(Ok(0)) => return Err(Refusal(ProxyRefusal::Io, "closed before the header".into())),
            Ok(Ok(n)) => n,
        };
        match proxy_proto::parse(&buf[..filled + n], accept) {
            Err(e) => return Err(Refusal(ProxyRefusal::Malformed, e.to_string())),
            Ok(Parse::Complete(h)) => {
                consume(stream, &mut buf[filled..h.len])
                    .await
                    .map_err(io_err)?;
                return Ok(h.source.zip(h.destination));
            }
            // Every byte so far is the header's: take them off the socket and look again.
            Ok(Parse::Incomplete) => {
                consume(stream, &mut buf[filled..filled + n])
                    .await
                    .map_err(io_err)?;
                filled += n;
            }
        }
    }
}

/// Read exactly `buf.len()` bytes (already seen by a peek, so they are there).
async fn consume(stream: &mut Box<dyn TcpConn>, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let mut rb = ReadBuf::new(&mut buf[done..]);
        std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_read(cx, rb.unfilled())).await?;
        let n = rb.filled().len();
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
    }
    Ok(())
}

/// A TLS stream where the server expects a TCP connection. It cannot be peeked: the server
/// chooses HTTP/2 by ALPN for TLS connections and never parks them, the two places it peeks.
struct TlsConn(Box<dyn SyncIo>);

crate::hyper_io_newtype!(TlsConn);

impl TcpConn for TlsConn {
    fn poll_peek(
        &self,
        _cx: &mut std::task::Context<'_>,
        _buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::task::Poll::Ready(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a TLS stream cannot be peeked",
        )))
    }

    /// Set on the TCP connection before the handshake (`server::worker_main`).
    fn set_nodelay(&self, _on: bool) -> io::Result<()> {
        Ok(())
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}
