//! One listener's acceptor under its connection cap (`conn_limits` module doc): a place under the
//! cap first, then `accept`; on `EMFILE`/`ENFILE` (or `ENOBUFS`/`ENOMEM`) a pause that doubles
//! up to a second instead of a retry loop; every failure counted, warnings rate-limited.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::base::rt::watch::{Wake, next_or_shutdown};
use crate::base::rt::{self, Listener, Rt, watch};
use crate::observe::conn_limits::{self, ConnLimit, ConnPermit, Warn};

/// The accepting side of one listener.
pub(crate) struct Acceptor<'a> {
    rt: Rt,
    listener: &'a dyn Listener,
    limit: Arc<ConnLimit>,
    warn: Warn,
    /// Resource failures in a row.
    failures: u32,
}

impl<'a> Acceptor<'a> {
    pub(crate) fn new(rt: Rt, listener: &'a dyn Listener, limit: Arc<ConnLimit>) -> Acceptor<'a> {
        Acceptor {
            rt,
            listener,
            limit,
            warn: Warn::default(),
            failures: 0,
        }
    }

    /// The next connection with its place under the cap; `None` once `shutdown` turns true.
    pub(crate) async fn next(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<(std::net::TcpStream, SocketAddr, ConnPermit)> {
        if shutdown.get() {
            return None;
        }
        let permit = match next_or_shutdown(shutdown, self.limit.acquire(&mut self.warn)).await {
            Wake::Shutdown => return None,
            Wake::Next(p) => p,
        };
        loop {
            match next_or_shutdown(shutdown, self.listener.accept()).await {
                Wake::Shutdown => return None,
                Wake::Next(Ok((stream, peer))) => {
                    self.failures = 0;
                    return Some((stream, peer, permit));
                }
                Wake::Next(Err(e)) => {
                    if !self.limit.accept_failed(&e, &mut self.warn) {
                        // One connection's trouble (reset before accept): the next one.
                        continue;
                    }
                    self.failures = self.failures.saturating_add(1);
                    let pause = rt::sleep(self.rt, conn_limits::backoff(self.failures));
                    if let Wake::Shutdown = next_or_shutdown(shutdown, pause).await {
                        return None;
                    }
                }
            }
        }
    }
}
