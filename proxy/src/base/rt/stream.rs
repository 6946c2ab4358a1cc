//! The byte streams of the runtime seam: what hyper and weir's HTTP/1 read and write ([`Io`]),
//! and a runtime's TCP connection ([`TcpConn`]).

use std::any::Any;
use std::io;
use std::task::{Context, Poll};

use hyper::rt::{Read, Write};

/// A byte stream hyper can serve or drive: a TCP connection, or TLS over one.
pub trait Io: Read + Write + Send + Unpin + 'static {}

impl<T: Read + Write + Send + Unpin + 'static> Io for T {}

/// An [`Io`] that is also `Sync`: a server-side TLS stream (what a connection's handler keeps).
pub trait SyncIo: Io + Sync {}

impl<T: Io + Sync> SyncIo for T {}

/// A TCP connection of a runtime.
pub trait TcpConn: Io + Sync {
    /// Poll for bytes to read without consuming them (the protocol sniff).
    fn poll_peek(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;

    /// Set `TCP_NODELAY`.
    ///
    /// # Errors
    /// The socket option could not be set.
    fn set_nodelay(&self, on: bool) -> io::Result<()>;

    /// The connection as `Any`, so that its runtime can take its own type back (TLS).
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}
