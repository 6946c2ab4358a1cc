//! What a TLS handshake takes and gives across the seam: [`TlsConnect`] (client), [`TlsAccept`]
//! and [`TlsAccepted`] (server). The handshake itself is the runtime's ([`super::Runtime`]).

use std::fmt;
use std::io;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};

use super::stream::{SyncIo, TcpConn};

/// What a TLS client handshake needs: the configuration, the server name, and the TCP
/// connection (one of the runtime's own, from [`Runtime::connect`]).
pub struct TlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    tcp: Box<dyn TcpConn>,
}

impl fmt::Debug for TlsConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnect")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TlsConnect {
    /// A handshake of `name` over `tcp` with `config`.
    #[must_use]
    pub fn new(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        tcp: Box<dyn TcpConn>,
    ) -> Self {
        TlsConnect { config, name, tcp }
    }

    /// The configuration, the name, and the connection as the runtime's own type `T` (what its
    /// `register` / `connect` made).
    ///
    /// # Errors
    /// The connection is another runtime's.
    pub fn into_parts<T: TcpConn>(
        self,
    ) -> io::Result<(Arc<ClientConfig>, ServerName<'static>, Box<T>)> {
        Ok((self.config, self.name, own_conn(self.tcp)?))
    }
}

/// `tcp` as the runtime's own connection type `T`.
fn own_conn<T: TcpConn>(tcp: Box<dyn TcpConn>) -> io::Result<Box<T>> {
    tcp.into_any()
        .downcast::<T>()
        .map_err(|_| io::Error::other("a TCP connection of another runtime"))
}

/// What a TLS server handshake needs: the listener's configuration (its certificate resolver
/// is swapped on reload, C-TLS-2) and the accepted connection (one of the runtime's own, from
/// [`Runtime::register`]).
pub struct TlsAccept {
    config: Arc<ServerConfig>,
    tcp: Box<dyn TcpConn>,
}

impl fmt::Debug for TlsAccept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAccept").finish_non_exhaustive()
    }
}

impl TlsAccept {
    /// A server handshake over `tcp` with `config`.
    #[must_use]
    pub fn new(config: Arc<ServerConfig>, tcp: Box<dyn TcpConn>) -> Self {
        TlsAccept { config, tcp }
    }

    /// The configuration and the connection as the runtime's own type `T`.
    ///
    /// # Errors
    /// The connection is another runtime's.
    pub fn into_parts<T: TcpConn>(self) -> io::Result<(Arc<ServerConfig>, Box<T>)> {
        Ok((self.config, own_conn(self.tcp)?))
    }
}

/// A finished server handshake: the decrypted stream and what was negotiated.
pub struct TlsAccepted {
    /// The stream (application data).
    pub io: Box<dyn SyncIo>,
    /// The ALPN protocol agreed (`h2`, `http/1.1`), if any.
    pub alpn: Option<Vec<u8>>,
    /// The TLS version agreed.
    pub version: Option<rustls::ProtocolVersion>,
}

impl TlsAccepted {
    /// The decrypted stream `io` of `session`, with what `session` negotiated: the end of both
    /// adapters' `tls_accept` (read `session` from the stream before boxing it, it is borrowed
    /// from the stream).
    #[must_use]
    pub fn new(io: Box<dyn SyncIo>, session: Negotiated) -> TlsAccepted {
        TlsAccepted {
            io,
            alpn: session.alpn,
            version: session.version,
        }
    }
}

/// What a server handshake agreed, copied out of the rustls session (which the stream owns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    alpn: Option<Vec<u8>>,
    version: Option<rustls::ProtocolVersion>,
}

impl Negotiated {
    /// ALPN protocol and version of `session`.
    #[must_use]
    pub fn of(session: &rustls::ServerConnection) -> Negotiated {
        Negotiated {
            alpn: session.alpn_protocol().map(<[u8]>::to_vec),
            version: session.protocol_version(),
        }
    }
}

impl fmt::Debug for TlsAccepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAccepted")
            .field("alpn", &self.alpn)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}
