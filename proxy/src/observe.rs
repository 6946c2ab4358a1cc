//! The second layer: what the proxy tells operators. Connection caps and their counters
//! (`limits`), the request-path metrics (`metrics`: per-backend counters and histograms),
//! access logs (`access_log`), operator events (`events`: circuit, health, protection
//! warnings), and the public listener's TLS: certificates, their expiry and metrics
//! (`listener_tls`). Imports only from `base`.

pub mod access_log;
pub mod conn_limits;
pub mod events;
pub mod listener_tls;
pub mod metrics;
