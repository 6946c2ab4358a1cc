//! What one probe found, shared by the HTTP/1.1 and HTTP/2 probe executors.

use core::fmt;
use std::io;

use weir_core::grpc::health::ServingStatus;

/// The `User-Agent` of HTTP(S) probes.
pub(crate) const PROBE_USER_AGENT: &str = concat!("weir-health-check/", env!("CARGO_PKG_VERSION"));

/// What one probe found. Only [`is_success`](Self::is_success) feeds the schedule; the rest is
/// for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// TCP: the connection was accepted.
    Connected,
    /// HTTP(S): the backend answered with an expected status.
    Status(u16),
    /// HTTP(S): the backend answered with a status outside `expected_statuses`.
    UnexpectedStatus(u16),
    /// gRPC: the health service answered `SERVING` (C-GRPC-4).
    Serving,
    /// gRPC: the health service answered, with another status (`NOT_SERVING`, `UNKNOWN`,
    /// `SERVICE_UNKNOWN`).
    NotServing(ServingStatus),
    /// gRPC: the call failed (a `grpc-status` other than OK, an HTTP status other than `200`,
    /// a malformed answer).
    Grpc(Box<str>),
    /// The TCP connect failed (refused, unreachable, name not resolved...).
    Connect(io::ErrorKind),
    /// The TLS handshake failed (untrusted or mismatched certificate, protocol error...).
    Tls(Box<str>),
    /// The HTTP exchange failed before a status line arrived (closed, reset, malformed).
    Http(Box<str>),
    /// Nothing conclusive before the deadline (C-HEALTH-6).
    TimedOut,
}

impl ProbeOutcome {
    /// Whether the probe succeeded: a TCP connect, or an expected HTTP status.
    #[must_use]
    pub const fn is_success(&self) -> bool {
        matches!(
            self,
            ProbeOutcome::Connected | ProbeOutcome::Status(_) | ProbeOutcome::Serving
        )
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeOutcome::Connected => write!(f, "connected"),
            ProbeOutcome::Status(s) => write!(f, "status {s}"),
            ProbeOutcome::UnexpectedStatus(s) => write!(f, "unexpected status {s}"),
            ProbeOutcome::Serving => write!(f, "grpc health: SERVING"),
            ProbeOutcome::NotServing(s) => write!(f, "grpc health: {s}"),
            ProbeOutcome::Grpc(e) => write!(f, "grpc health check failed: {e}"),
            ProbeOutcome::Connect(kind) => write!(f, "connect failed: {kind}"),
            ProbeOutcome::Tls(e) => write!(f, "tls handshake failed: {e}"),
            ProbeOutcome::Http(e) => write!(f, "http exchange failed: {e}"),
            ProbeOutcome::TimedOut => write!(f, "timed out"),
        }
    }
}
