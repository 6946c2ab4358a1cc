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
    alpn: AlpnCheck,
}

/// The ALPN protocol a client handshake must end with, if any (C-GRPC-5: an `h2` backend that
/// does not agree on `h2` is a connect failure that says so). The runtime's handshake passes
/// its error through [`handshake_error`](Self::handshake_error) and its session through
/// [`check`](Self::check).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlpnCheck {
    required: Option<&'static [u8]>,
}

impl AlpnCheck {
    /// The handshake failed with `e`: when the server refused it for want of a common ALPN
    /// protocol (its `no_application_protocol` alert), the error says which one was required.
    #[must_use]
    pub fn handshake_error(&self, e: io::Error) -> io::Error {
        let Some(required) = self.required else {
            return e;
        };
        let refused = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|r| {
                matches!(
                    r,
                    rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)
                )
            });
        if refused {
            return io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!(
                    "backend does not offer ALPN {}: it refused the handshake \
                     (no_application_protocol)",
                    String::from_utf8_lossy(required)
                ),
            );
        }
        e
    }

    /// The handshake ended with `session`: an error unless it agreed on the required protocol.
    ///
    /// # Errors
    /// The server chose another protocol, or none.
    pub fn check(&self, session: &rustls::CommonState) -> io::Result<()> {
        let Some(required) = self.required else {
            return Ok(());
        };
        match session.alpn_protocol() {
            Some(p) if p == required => Ok(()),
            chosen => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "backend did not agree on ALPN {} (it chose {})",
                    String::from_utf8_lossy(required),
                    chosen.map_or_else(|| "none".into(), String::from_utf8_lossy)
                ),
            )),
        }
    }
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
        TlsConnect {
            config,
            name,
            tcp,
            alpn: AlpnCheck::default(),
        }
    }

    /// The same handshake, which fails unless the server agrees on ALPN `protocol`.
    #[must_use]
    pub fn require_alpn(mut self, protocol: &'static [u8]) -> Self {
        self.alpn = AlpnCheck {
            required: Some(protocol),
        };
        self
    }

    /// The configuration, the name, the connection as the runtime's own type `T` (what its
    /// `register` / `connect` made), and the check of the handshake's ALPN result.
    ///
    /// # Errors
    /// The connection is another runtime's.
    pub fn into_parts<T: TcpConn>(
        self,
    ) -> io::Result<(Arc<ClientConfig>, ServerName<'static>, Box<T>, AlpnCheck)> {
        Ok((self.config, self.name, own_conn(self.tcp)?, self.alpn))
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
