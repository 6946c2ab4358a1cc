//! JSON access logs through `tracing` (C-OBS-3, C-MGMT-5).
//!
//! One event per logged request, target `weir::access`, level `INFO`, message `access`, with
//! the fields `request_id`, `listener`, `method`, `path`, `status`, `reason`, `upstream_status`,
//! `duration_us`, `duration_ms`, `head_us`, `request_bytes`, `response_bytes`, `backend`,
//! `attempts`, `client`, `protocol`, `scheme`, `host`, `route` (and `endpoint` on the management
//! listener); docs/operations.md lists them. A data-plane line is written when the response
//! body ends (`effects::PendingLine`), so `duration_us` is the whole exchange and the byte
//! counts are what went each way. The process's subscriber
//! (`weir run`: tracing-subscriber's JSON formatter on stdout) writes it as one JSON line.
//!
//! What is logged:
//! - every error (status ≥ 400) and every management mutation (any method but `GET`/`HEAD`),
//!   always;
//! - successes, sampled at `server.access_log_sample_rate` (0 logs none, 1 logs every one); the
//!   decision is drawn from the adapter's per-worker random generator, never a global one.
//!
//! What is never logged: the query string (only the URI's path is ever read), any header (so no
//! token, cookie or credential can reach the log), any body. The path itself is `[redacted]`
//! unless `server.access_log_include_path: true`, because paths carry identifiers and reset
//! tokens. Metrics count every request whatever the sampling (C-OBS-2).

use std::net::IpAddr;
use std::time::Duration;

use http::Method;

use crate::base::exposition::Listener;

/// The `path` field when paths are not logged.
pub const REDACTED: &str = "[redacted]";

/// Whether a request is logged and the sampling draw (C-OBS-3): core's rules, which the request
/// engine applies to the data plane's records and the management listener to its own.
pub use weir_core::exchange::{sampled, should_log};

/// One access-log line.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    /// The request id in force (C-PATH-3).
    pub request_id: &'a str,
    /// Which listener answered.
    pub listener: Listener,
    /// The method.
    pub method: &'a Method,
    /// The URI's path (never the query); logged only when `include_path`.
    pub path: &'a str,
    /// Log the path instead of [`REDACTED`] (`server.access_log_include_path`).
    pub include_path: bool,
    /// The status answered.
    pub status: u16,
    /// From the request head to the end of the response body (the management plane: to the
    /// response head, its bodies are small and written at once).
    pub duration: Duration,
    /// From the request head to the response head, when the line is written later.
    pub head_duration: Option<Duration>,
    /// The backend that answered (or was last attempted).
    pub backend: Option<&'a str>,
    /// Attempts made (0: none).
    pub attempts: u32,
    /// The client address (resolved through trusted proxies when known, else the peer).
    pub client: IpAddr,
    /// Management only: the endpoint's name (`mgmt::Endpoint::name`, never an id).
    pub endpoint: Option<&'static str>,
    /// The request's HTTP version (`HTTP/1.1`, `HTTP/2`).
    pub version: http::Version,
    /// The scheme the client used (`http`, or `https` said by a trusted proxy).
    pub scheme: &'static str,
    /// The `Host` header (or the target's authority), as sent.
    pub host: Option<&'a str>,
    /// The prefix of the route that matched; `None`: the default pool.
    pub route: Option<&'a str>,
    /// Why weir answered itself (`Record::reason`); `None`: a backend's response.
    pub reason: Option<&'a str>,
    /// The latest backend response head's status, if any.
    pub upstream_status: Option<u16>,
    /// A gRPC call's status (0-16): weir's own answer's, or the backend's from its
    /// trailers-only head or its trailers; absent for other requests.
    pub grpc_status: Option<u8>,
    /// Request body bytes read from the client (and passed upstream).
    pub request_bytes: Option<u64>,
    /// Response body bytes passed to the client.
    pub response_bytes: Option<u64>,
}

/// `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`, ... without Debug formatting.
#[must_use]
pub fn version_str(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "other",
    }
}

fn whole_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Line<'_> {
    /// Write the line (C-OBS-3).
    pub fn emit(&self) {
        let path = if self.include_path {
            self.path
        } else {
            REDACTED
        };
        // Whole microseconds; `duration_ms` is the same value with exactly three decimals.
        let micros = whole_micros(self.duration);
        let head_us = self.head_duration.map(whole_micros);
        tracing::info!(
            target: "weir::access",
            request_id = self.request_id,
            listener = self.listener.as_str(),
            method = self.method.as_str(),
            path,
            status = self.status,
            reason = self.reason,
            upstream_status = self.upstream_status,
            grpc_status = self.grpc_status,
            duration_us = micros,
            duration_ms = micros as f64 / 1000.0,
            head_us,
            request_bytes = self.request_bytes,
            response_bytes = self.response_bytes,
            backend = self.backend,
            attempts = self.attempts,
            client = %self.client,
            protocol = version_str(self.version),
            scheme = self.scheme,
            host = self.host,
            route = self.route,
            endpoint = self.endpoint,
            "access"
        );
    }
}

#[cfg(test)]
mod tests;
