//! Operating bounds of every runtime value (docs/configuration.md "Bounds").
//!
//! The core constructors (`HealthParams::new`, `RetryPolicy::new`, ...) accept every value their
//! machine can work with: a 1 ns probe interval is a valid machine (the simulator and the unit
//! tests use tiny ones), it is just not a sane way to run a proxy: a `PATCH` of
//! `health_check.interval: 1ns` made weir open ~1,500 probe connections per second per backend.
//! So what an operator writes (the file, and `PATCH /api/dashboard/config`, which validates
//! through the same path, C-CONF-8) must also fall within the bounds below, chosen as an nginx,
//! HAProxy or Envoy operator would: nothing that turns a typo into a self-inflicted flood, a
//! busy loop or unbounded memory, and nothing a real deployment needs excluded. Each bound is
//! argued in docs/configuration.md; a value outside is an error naming the field path and the
//! allowed range, like every other configuration error (C-CONF-1).
//!
//! The table is data so that a test can check it against the documentation, row by row.

use core::time::Duration;

use super::Check;
use crate::config::Config;

/// A range for a duration field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// The field path.
    pub path: &'static str,
    /// Smallest value other than an allowed zero, and how the documentation writes it.
    pub min: (Duration, &'static str),
    /// Largest value, and how the documentation writes it.
    pub max: (Duration, &'static str),
    /// Whether `0s` is allowed besides `min..=max` (it then has a meaning, C-CONF-0: none,
    /// off); a range that starts at `0s` says so in `min` instead.
    pub zero: bool,
}

/// A range for an integer field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Count {
    /// The field path.
    pub path: &'static str,
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
}

/// A range for a rate (tokens per second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rate {
    /// The field path.
    pub path: &'static str,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

const fn span(
    path: &'static str,
    min: (Duration, &'static str),
    max: (Duration, &'static str),
    zero: bool,
) -> Span {
    Span {
        path,
        min,
        max,
        zero,
    }
}

/// Every bounded duration, in documentation order.
pub(crate) const SPANS: &[Span] = &[
    span(
        "server.read_header_timeout",
        (ms(100), "100ms"),
        (secs(HOUR), "1h"),
        false,
    ),
    span(
        "server.read_timeout",
        (ms(100), "100ms"),
        (secs(DAY), "24h"),
        true,
    ),
    span(
        "server.write_timeout",
        (ms(100), "100ms"),
        (secs(DAY), "24h"),
        true,
    ),
    span(
        "server.idle_timeout",
        (ms(100), "100ms"),
        (secs(DAY), "24h"),
        false,
    ),
    span(
        "server.shutdown_delay",
        (ms(0), "0s"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "server.shutdown_timeout",
        (ms(0), "0s"),
        (secs(HOUR), "1h"),
        false,
    ),
    span(
        "server.tls.handshake_timeout",
        (ms(100), "100ms"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "server.upstream.dial_timeout",
        (ms(10), "10ms"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "server.upstream.tls_handshake_timeout",
        (ms(10), "10ms"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "server.upstream.response_header_timeout",
        (ms(10), "10ms"),
        (secs(HOUR), "1h"),
        true,
    ),
    span(
        "server.upstream.expect_continue_timeout",
        (ms(0), "0s"),
        (secs(MINUTE), "1m"),
        false,
    ),
    span(
        "server.upstream.idle_conn_timeout",
        (ms(100), "100ms"),
        (secs(DAY), "24h"),
        true,
    ),
    span(
        "server.retry.per_try_timeout",
        (ms(10), "10ms"),
        (secs(HOUR), "1h"),
        false,
    ),
    span(
        "server.retry.backoff_base",
        (ms(1), "1ms"),
        (secs(MINUTE), "1m"),
        true,
    ),
    span(
        "server.retry.backoff_max",
        (ms(0), "0s"),
        (secs(MINUTE), "1m"),
        false,
    ),
    span(
        "server.retry.hedge_delay",
        (ms(1), "1ms"),
        (secs(MINUTE), "1m"),
        true,
    ),
    span(
        "server.overload.queue_timeout",
        (ms(0), "0s"),
        (secs(MINUTE), "1m"),
        false,
    ),
    span(
        "health_check.interval",
        (ms(100), "100ms"),
        (secs(HOUR), "1h"),
        false,
    ),
    span(
        "health_check.timeout",
        (ms(10), "10ms"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "health_check.jitter",
        (ms(0), "0s"),
        (secs(HOUR), "1h"),
        false,
    ),
    span(
        "health_check.cooldown",
        (ms(100), "100ms"),
        (secs(HOUR), "1h"),
        false,
    ),
    span(
        "health_check.max_cooldown",
        (ms(100), "100ms"),
        (secs(DAY), "24h"),
        false,
    ),
    span(
        "health_check.slow_start",
        (ms(100), "100ms"),
        (secs(HOUR), "1h"),
        true,
    ),
    span(
        "health_check.retry_after_max",
        (secs(1), "1s"),
        (secs(HOUR), "1h"),
        true,
    ),
    span(
        "rate_limit.operation_timeout",
        (ms(1), "1ms"),
        (secs(10), "10s"),
        false,
    ),
    span(
        "rate_limit.cleanup_interval",
        (secs(1), "1s"),
        (secs(7 * DAY), "168h"),
        false,
    ),
    span(
        "rate_limit.retention",
        (secs(0), "0s"),
        (secs(30 * DAY), "720h"),
        false,
    ),
    span(
        "redis.dial_timeout",
        (ms(10), "10ms"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "redis.read_timeout",
        (ms(1), "1ms"),
        (secs(MINUTE), "1m"),
        false,
    ),
    span(
        "redis.write_timeout",
        (ms(1), "1ms"),
        (secs(MINUTE), "1m"),
        false,
    ),
    span(
        "database.connect_timeout",
        (ms(10), "10ms"),
        (secs(5 * MINUTE), "5m"),
        false,
    ),
    span(
        "management.write_timeout",
        (ms(100), "100ms"),
        (secs(HOUR), "1h"),
        false,
    ),
];

/// Every bounded integer that no core constructor bounds already, in documentation order.
pub(crate) const COUNTS: &[Count] = &[
    Count {
        path: "server.upstream.max_idle_conns",
        min: 0,
        max: 1_000_000,
    },
    Count {
        path: "server.upstream.max_idle_conns_per_host",
        min: 0,
        max: 1_000_000,
    },
    Count {
        path: "server.upstream.max_conns_per_host",
        min: 0,
        max: 1_000_000,
    },
    Count {
        path: "server.retry.body_limit",
        min: 0,
        max: 64 << 20,
    },
    Count {
        path: "server.retry.budget_capacity",
        min: 1,
        max: 1_000_000,
    },
    Count {
        path: "server.overload.max_concurrent_requests",
        min: 1,
        max: 1_000_000,
    },
    Count {
        path: "health_check.success_threshold",
        min: 1,
        max: 255,
    },
    Count {
        path: "health_check.max_concurrency",
        min: 1,
        max: 1024,
    },
    Count {
        path: "rate_limit.capacity",
        min: 1,
        max: 1_000_000_000,
    },
    Count {
        path: "redis.pool_size",
        min: 1,
        max: 10_000,
    },
    Count {
        path: "database.max_open_connections",
        min: 1,
        max: 10_000,
    },
];

/// Every bounded rate, in documentation order.
pub(crate) const RATES: &[Rate] = &[
    Rate {
        path: "server.retry.budget_refill_per_second",
        min: 0.001,
        max: 1_000_000.0,
    },
    Rate {
        path: "rate_limit.refill_per_second",
        min: 0.001,
        max: 1_000_000_000.0,
    },
];

/// The value of the duration at `path` in `cfg`.
fn duration(cfg: &Config, path: &str) -> Option<Duration> {
    let (s, u, h, r) = (
        &cfg.server,
        &cfg.server.upstream,
        &cfg.health_check,
        &cfg.rate_limit,
    );
    Some(match path {
        "server.read_header_timeout" => s.read_header_timeout,
        "server.read_timeout" => s.read_timeout,
        "server.write_timeout" => s.write_timeout,
        "server.idle_timeout" => s.idle_timeout,
        "server.shutdown_delay" => s.shutdown_delay,
        "server.shutdown_timeout" => s.shutdown_timeout,
        "server.upstream.dial_timeout" => u.dial_timeout,
        "server.upstream.tls_handshake_timeout" => u.tls_handshake_timeout,
        "server.upstream.response_header_timeout" => u.response_header_timeout,
        "server.upstream.expect_continue_timeout" => u.expect_continue_timeout,
        "server.upstream.idle_conn_timeout" => u.idle_conn_timeout,
        "server.retry.per_try_timeout" => s.retry.per_try_timeout,
        "server.retry.backoff_base" => s.retry.backoff_base,
        "server.retry.backoff_max" => s.retry.backoff_max,
        "server.retry.hedge_delay" => s.retry.hedge_delay,
        "server.overload.queue_timeout" => s.overload.queue_timeout,
        "server.tls.handshake_timeout" => s.tls.handshake_timeout,
        "health_check.interval" => h.interval,
        "health_check.timeout" => h.timeout,
        "health_check.jitter" => h.jitter,
        "health_check.cooldown" => h.cooldown,
        "health_check.max_cooldown" => h.max_cooldown,
        "health_check.slow_start" => h.slow_start,
        "health_check.retry_after_max" => h.retry_after_max,
        "rate_limit.operation_timeout" => r.operation_timeout,
        "rate_limit.cleanup_interval" => r.cleanup_interval,
        "rate_limit.retention" => r.retention,
        "redis.dial_timeout" => cfg.redis.dial_timeout,
        "redis.read_timeout" => cfg.redis.read_timeout,
        "redis.write_timeout" => cfg.redis.write_timeout,
        "database.connect_timeout" => cfg.database.connect_timeout,
        "management.write_timeout" => cfg.management.write_timeout,
        _ => return None,
    })
}

/// The value of the integer at `path` in `cfg`.
fn count(cfg: &Config, path: &str) -> Option<u64> {
    let (s, u) = (&cfg.server, &cfg.server.upstream);
    Some(match path {
        "server.upstream.max_idle_conns" => u.max_idle_conns.into(),
        "server.upstream.max_idle_conns_per_host" => u.max_idle_conns_per_host.into(),
        "server.upstream.max_conns_per_host" => u.max_conns_per_host.into(),
        "server.retry.body_limit" => s.retry.body_limit,
        "server.retry.budget_capacity" => s.retry.budget_capacity,
        "server.overload.max_concurrent_requests" => s.overload.max_concurrent_requests.into(),
        "health_check.success_threshold" => cfg.health_check.success_threshold.into(),
        "health_check.max_concurrency" => cfg.health_check.max_concurrency.into(),
        "rate_limit.capacity" => cfg.rate_limit.capacity,
        "redis.pool_size" => cfg.redis.pool_size.into(),
        "database.max_open_connections" => cfg.database.max_open_connections.into(),
        _ => return None,
    })
}

/// The value of the rate at `path` in `cfg`.
fn rate(cfg: &Config, path: &str) -> Option<f64> {
    match path {
        "server.retry.budget_refill_per_second" => Some(cfg.server.retry.budget_refill_per_second),
        "rate_limit.refill_per_second" => Some(cfg.rate_limit.refill_per_second),
        _ => None,
    }
}

impl Span {
    /// The allowed range in words, as the documentation writes it.
    pub(crate) fn text(&self) -> String {
        let range = format!("{}..={}", self.min.1, self.max.1);
        if self.zero {
            format!("0s or {range}")
        } else {
            range
        }
    }

    fn allows(&self, d: Duration) -> bool {
        (self.zero && d.is_zero()) || (self.min.0..=self.max.0).contains(&d)
    }
}

impl Count {
    /// The allowed range, as the documentation writes it.
    pub(crate) fn text(&self) -> String {
        format!("{}..={}", self.min, self.max)
    }
}

impl Rate {
    /// The allowed range, as the documentation writes it.
    pub(crate) fn text(&self) -> String {
        format!("{}..={}", self.min, self.max)
    }
}

/// Check every bounded field of `cfg`; one error per field outside its range, naming the range
/// and the value written. Runs before the core constructors, whose own errors for the same field
/// are then not repeated (`Check::core_err`).
pub(super) fn check(cfg: &Config, c: &mut Check<'_>) {
    for b in SPANS {
        if let Some(d) = duration(cfg, b.path)
            && !b.allows(d)
        {
            let got = crate::config::format_duration(d);
            c.err(b.path, format!("must be within {}, got {got}", b.text()));
        }
    }
    for b in COUNTS {
        if let Some(n) = count(cfg, b.path)
            && !(b.min..=b.max).contains(&n)
        {
            c.err(b.path, format!("must be within {}, got {n}", b.text()));
        }
    }
    for b in RATES {
        if let Some(r) = rate(cfg, b.path)
            && !(b.min..=b.max).contains(&r)
        {
            c.err(b.path, format!("must be within {}, got {r}", b.text()));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
