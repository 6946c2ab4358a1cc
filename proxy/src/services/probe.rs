//! Active health checks (C-HEALTH-1, C-HEALTH-2, C-HEALTH-5, C-HEALTH-6): the probe
//! executors (HTTP, HTTPS, TCP) and the driver task that runs weir-core's
//! [`ProbeSchedule`](weir_core::health::ProbeSchedule).
//!
//! The split follows the project's rule that the adapter decides nothing: which backend to probe,
//! when, how many at once, what a late answer means and when a backend flips are all decided by
//! the schedule; this module only opens sockets and reports what happened.
//!
//! - [`ProbeTarget`]: one backend as a probe sees it (address, TLS server name, request URI),
//!   built once from the backend URL and `health_check.mode` / `path`.
//! - [`probe`] / [`probe_until`]: one probe, bounded by its deadline, giving a
//!   [`ProbeOutcome`]. Probes never reuse connections: each one opens its own socket and closes
//!   it when it returns or is cancelled, so a probe sees exactly what a new client would (as
//!   Envoy's and HAProxy's checks do by default) and nothing can leak between probes.
//! - [`client_tls`]: the rustls client configuration (ring provider only, TLS 1.2+, normal chain and
//!   host-name validation against the native roots, webpki-roots as fallback).
//! - [`HealthDriver`]: the task that owns the schedule, spawns probes (never more than
//!   `max_concurrency` at once, because the schedule hands out no more), sleeps until the
//!   schedule's next deadline, reports flips through a callback, publishes the number of
//!   completed cycles (listeners open after the first, C-HEALTH-1), takes reloads and shuts down
//!   cleanly.
//!
//! Probes read time from the process clock ([`crate::base::clock::Clock`]), which the data plane
//! shares so both speak the same time.

pub mod client_tls;
mod driver;
mod exec;
mod outcome;
mod target;

pub use driver::{DriverStopped, HealthDriver, HealthReloader, OnChange, ProbeFn};
pub use exec::{probe, probe_until};
pub use outcome::ProbeOutcome;
pub use target::{ProbeTarget, ProbeTargetError};
pub use weir_core::config::ProbeMode;
