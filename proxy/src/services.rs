//! The third layer: what the data path calls on and the control plane manages. Upstream
//! connection pools and targets (`upstream`), the proxy-side snapshot (`snapshot`), the wait at
//! the global gate (`admission`), the rate limiter over its store (`ratelimit`), active health
//! probes (`probe`), the DNS client (`dns`), parked keep-alive connections (`park`), and the
//! proxy's state (`state`).
//! Imports only from `base` and `observe`.

pub mod admission;
pub mod dns;
pub mod park;
pub mod probe;
pub mod ratelimit;
pub mod snapshot;
pub mod state;
pub mod upstream;
pub mod upstream_tls;
