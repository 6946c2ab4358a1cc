//! JSON access logs through `tracing` (C-OBS-3, C-MGMT-5).
//!
//! One event per logged request, target `weir::access`, level `INFO`, message `access`, with
//! the fields `request_id`, `listener`, `method`, `path`, `status`, `duration_ms`, `backend`,
//! `attempts`, `client` (and `endpoint` on the management listener). The process's subscriber
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http::Method;
use weir_core::Rng;
use weir_core::request_id::RequestId;

use crate::metrics::{BackendMetrics, Listener};

/// The `path` field when paths are not logged.
pub const REDACTED: &str = "[redacted]";

/// Whether a request with `status` is logged: errors and mutations always, successes with
/// probability `sample_rate` (C-OBS-3).
pub fn should_log(status: u16, mutation: bool, sample_rate: f64, rng: &mut dyn Rng) -> bool {
    if status >= 400 || mutation {
        return true;
    }
    sampled(sample_rate, rng)
}

/// A draw with probability `rate` (clamped to 0..=1).
pub fn sampled(rate: f64, rng: &mut dyn Rng) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate.is_nan() || rate <= 0.0 {
        return false;
    }
    // `rate` in (0, 1): compare a uniform u64 with rate × 2^64.
    let threshold = (rate * 18_446_744_073_709_551_616.0) as u64;
    rng.next_u64() < threshold
}

/// What the request handler learns along the way that the log line needs: the resolved client
/// address (C-FWD-1) and the last backend attempted with its attempt number. Written by the
/// handler, read once when the response head is ready. Thread-safe because the handler's
/// future must be `Send`; nothing else touches it, so its lock is never contended.
#[derive(Debug, Default)]
pub struct Trace {
    request_id: OnceLock<RequestId>,
    client: OnceLock<IpAddr>,
    backend: Mutex<Option<Arc<BackendMetrics>>>,
    attempts: AtomicU32,
}

impl Trace {
    /// The request id in force (C-PATH-3).
    pub fn set_request_id(&self, id: RequestId) {
        let _ = self.request_id.set(id);
    }

    /// The request id in force, once known.
    #[must_use]
    pub fn request_id(&self) -> Option<&RequestId> {
        self.request_id.get()
    }

    /// The client address resolved for this request.
    pub fn set_client(&self, client: IpAddr) {
        let _ = self.client.set(client);
    }

    /// An attempt to `backend` started (number `attempt`, 1-based).
    pub fn set_attempt(&self, backend: Option<Arc<BackendMetrics>>, attempt: u32) {
        *self
            .backend
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = backend;
        self.attempts.store(attempt, Ordering::Relaxed);
    }

    /// The resolved client, if the request got that far.
    #[must_use]
    pub fn client(&self) -> Option<IpAddr> {
        self.client.get().copied()
    }

    /// The last backend attempted.
    #[must_use]
    pub fn backend(&self) -> Option<Arc<BackendMetrics>> {
        self.backend
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Attempts made (0: none).
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Relaxed)
    }
}

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
    /// From the request head to the response head.
    pub duration: Duration,
    /// The backend that answered (or was last attempted).
    pub backend: Option<&'a str>,
    /// Attempts made (0: none).
    pub attempts: u32,
    /// The client address (resolved through trusted proxies when known, else the peer).
    pub client: IpAddr,
    /// Management only: the endpoint's name (`mgmt::Endpoint::name`, never an id).
    pub endpoint: Option<&'static str>,
}

impl Line<'_> {
    /// Write the line (C-OBS-3).
    pub fn emit(&self) {
        let path = if self.include_path {
            self.path
        } else {
            REDACTED
        };
        tracing::info!(
            target: "weir::access",
            request_id = self.request_id,
            listener = self.listener.as_str(),
            method = self.method.as_str(),
            path,
            status = self.status,
            duration_ms = self.duration.as_secs_f64() * 1000.0,
            backend = self.backend,
            attempts = self.attempts,
            client = %self.client,
            endpoint = self.endpoint,
            "access"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::WyRand;

    /// C-OBS-3: errors and mutations always; successes at the sample rate.
    #[test]
    fn c_obs_3_sampling() {
        let mut rng = WyRand::new(7);
        assert!(should_log(500, false, 0.0, &mut rng));
        assert!(should_log(404, false, 0.0, &mut rng));
        assert!(should_log(200, true, 0.0, &mut rng));
        assert!(!should_log(200, false, 0.0, &mut rng));
        assert!(should_log(200, false, 1.0, &mut rng));
        let hits = (0..100_000)
            .filter(|_| should_log(200, false, 0.01, &mut rng))
            .count();
        assert!((700..1300).contains(&hits), "{hits}");
        assert!(!sampled(f64::NAN, &mut rng));
    }
}
