//! A downstream (client) connection's IO state while it is awake: the socket, what was read of
//! it, and the write and scratch buffers, lent to each request in turn. A connection is *awake*
//! while a task serves it with these buffers; a parked one holds only its socket (`serve`).

use weir_core::h1;

use super::io::{AWAKE_BUF, Buf, Scratch};
use crate::base::rt::Io;

/// Header lines a request may carry (`431` beyond).
pub const MAX_HEADERS: usize = h1::DEFAULT_MAX_HEADERS;

/// A client connection's IO state, lent to each request in turn.
pub struct DownstreamConn {
    /// The socket (TCP or TLS).
    pub io: Box<dyn Io>,
    /// Bytes read and not used yet.
    pub buf: Buf,
    /// The head of the request being served, copied out of `buf`.
    pub head: Vec<u8>,
    /// The write buffer towards the client.
    pub out: Vec<u8>,
    /// The write buffer towards the upstream.
    pub up_out: Vec<u8>,
    /// Scratch for extra header lines and their values.
    pub scratch: Scratch,
    /// The codec's limits.
    pub limits: h1::Limits,
}

impl std::fmt::Debug for DownstreamConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DownstreamConn")
            .field("buffered", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl DownstreamConn {
    /// The most bytes the read buffer holds: one head at its limit.
    #[must_use]
    pub fn cap(&self) -> usize {
        self.limits.max_head_bytes.saturating_add(1).max(16 * 1024)
    }

    /// An awake period's state around `io` and what was read of it (`buf`): the write and
    /// scratch buffers start with room for a common head ([`AWAKE_BUF`]) and are dropped
    /// with the awake period.
    pub(super) fn new(io: Box<dyn Io>, buf: Buf, limits: h1::Limits) -> DownstreamConn {
        DownstreamConn {
            io,
            buf,
            head: Vec::with_capacity(AWAKE_BUF),
            out: Vec::with_capacity(AWAKE_BUF),
            up_out: Vec::with_capacity(AWAKE_BUF),
            scratch: Scratch::for_awake(),
            limits,
        }
    }

    /// The socket and what was read ahead; the other buffers are freed.
    pub(super) fn into_parts(self) -> (Box<dyn Io>, Buf) {
        (self.io, self.buf)
    }
}
