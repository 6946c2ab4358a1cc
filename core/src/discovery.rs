//! Pools fed by DNS (C-DISC-1): what to do with each answer for a pool's name.
//!
//! The proxy asks the DNS when [`Discovery::due`] says so and hands the answer to
//! [`Discovery::on_answer`], which decides:
//!
//! - the pool's new backend set, when the addresses changed: one backend per address, id
//!   `<pool>/<address>:<port>`, in address order. Applying it is a reload of that pool (C-CONF-5):
//!   a new address starts unhealthy and takes traffic once a health check passes (then slow
//!   start), a removed one drains. Equal answers, in any order and with repeats, change nothing.
//! - nothing, when the resolution failed (timeout, SERVFAIL, ...) or came back empty (NXDOMAIN,
//!   no records): the last good set stays. DNS never empties a pool.
//! - whether to log: a WARN when the result changes to a failure (once per change of state, not
//!   once per query), an INFO when it comes back; every answer is counted by its [`Outcome`].
//!
//! The clock is the caller's: the next resolution is due `interval` after an answer.

use core::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::backend::BackendSpec;
use crate::config::{DnsSpec, ValidConfig};
use crate::time::Instant;

#[cfg(test)]
mod tests;

/// What a resolution of the name returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A and AAAA records (possibly repeated, in any order; empty means no records).
    Addresses(Vec<IpAddr>),
    /// The name does not exist.
    NxDomain,
    /// The server failed (SERVFAIL, REFUSED, a malformed answer).
    ServFail,
    /// No answer in time (every server, UDP and TCP).
    Timeout,
    /// Another error (no server reachable, ...).
    Error,
}

/// How a resolution ended, as `load_balancer_dns_resolutions_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// One address or more.
    Ok,
    /// NXDOMAIN.
    NxDomain,
    /// The name exists without A or AAAA records.
    NoRecords,
    /// SERVFAIL and the like.
    ServFail,
    /// No answer in time.
    Timeout,
    /// Any other failure.
    Error,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::NxDomain,
        Outcome::NoRecords,
        Outcome::ServFail,
        Outcome::Timeout,
        Outcome::Error,
    ];

    /// The metric label and the status document's spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::NxDomain => "nxdomain",
            Outcome::NoRecords => "no_records",
            Outcome::ServFail => "servfail",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }

    /// Whether the answer could be used.
    #[must_use]
    pub const fn is_ok(self) -> bool {
        matches!(self, Outcome::Ok)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the proxy does with one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// How the resolution ended (counted).
    pub outcome: Outcome,
    /// The pool's new backend set, when it changed.
    pub apply: Option<Vec<BackendSpec>>,
    /// Ids added and removed by `apply`.
    pub added: Vec<String>,
    /// Ids removed by `apply` (they drain).
    pub removed: Vec<String>,
    /// Log a WARN: the result changed to this failure; the last good set stays.
    pub warn: bool,
    /// Log that resolutions succeed again after a failure.
    pub recovered: bool,
}

/// The last resolution of a DNS pool, for the status document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastResolution {
    /// When it ended.
    pub at: Instant,
    /// How.
    pub outcome: Outcome,
}

/// The resolution state of one DNS pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    pool: String,
    spec: DnsSpec,
    next_at: Instant,
    /// The addresses of the last good answer, sorted, without repeats.
    good: Vec<IpAddr>,
    last: Option<LastResolution>,
}

impl Discovery {
    /// A pool `pool` fed by `spec`, currently holding `current` (the backends of the running
    /// configuration: none at start, the last good set after a reload). The first resolution is
    /// due at once.
    #[must_use]
    pub fn new(pool: &str, spec: &DnsSpec, current: &[BackendSpec], now: Instant) -> Discovery {
        let mut d = Discovery {
            pool: pool.to_owned(),
            spec: spec.clone(),
            next_at: now,
            good: Vec::new(),
            last: None,
        };
        d.reset(current);
        d
    }

    /// The pool's name.
    #[must_use]
    pub fn pool(&self) -> &str {
        &self.pool
    }

    /// The settings in force.
    #[must_use]
    pub fn spec(&self) -> &DnsSpec {
        &self.spec
    }

    /// When the next resolution is due.
    #[must_use]
    pub fn next_at(&self) -> Instant {
        self.next_at
    }

    /// Whether a resolution is due at `now`.
    #[must_use]
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next_at
    }

    /// The addresses of the last good answer (sorted).
    #[must_use]
    pub fn addresses(&self) -> &[IpAddr] {
        &self.good
    }

    /// The last resolution, if any.
    #[must_use]
    pub fn last(&self) -> Option<LastResolution> {
        self.last
    }

    /// The pool's backends for the last good answer.
    #[must_use]
    pub fn backends(&self) -> Vec<BackendSpec> {
        backends_for(&self.pool, &self.spec, &self.good)
    }

    /// The backends in force are `current` after all (applying the last decision's set failed,
    /// or a reload changed it): the next answer is compared with them.
    pub fn reset(&mut self, current: &[BackendSpec]) {
        let mut good: Vec<IpAddr> = current
            .iter()
            .filter_map(|b| address_of(&self.pool, &b.id))
            .map(|a| a.ip())
            .collect();
        good.sort_unstable();
        good.dedup();
        self.good = good;
    }

    /// Take new settings (a reload): the next resolution is due at once when the name, the
    /// port, the scheme or the protocol changed, else at the new interval's end. The last good
    /// set stays until an answer replaces it.
    pub fn set_spec(&mut self, spec: &DnsSpec, now: Instant) {
        if *spec == self.spec {
            return;
        }
        let same_name = spec.name == self.spec.name;
        let since = self.last.map_or(now, |l| l.at);
        self.spec = spec.clone();
        self.next_at = if same_name {
            since.saturating_add(spec.interval)
        } else {
            now
        };
    }

    /// Decide what `answer`, received at `now`, does to the pool. See the module doc.
    pub fn on_answer(&mut self, answer: Answer, now: Instant) -> Decision {
        self.next_at = now.saturating_add(self.spec.interval);
        let previous = self.last.map(|l| l.outcome);
        let (outcome, addresses) = match answer {
            Answer::Addresses(a) if a.is_empty() => (Outcome::NoRecords, None),
            Answer::Addresses(mut a) => {
                a.sort_unstable();
                a.dedup();
                (Outcome::Ok, Some(a))
            }
            Answer::NxDomain => (Outcome::NxDomain, None),
            Answer::ServFail => (Outcome::ServFail, None),
            Answer::Timeout => (Outcome::Timeout, None),
            Answer::Error => (Outcome::Error, None),
        };
        self.last = Some(LastResolution { at: now, outcome });
        let mut decision = Decision {
            outcome,
            apply: None,
            added: Vec::new(),
            removed: Vec::new(),
            warn: !outcome.is_ok() && previous != Some(outcome),
            recovered: outcome.is_ok() && previous.is_some_and(|p| !p.is_ok()),
        };
        if let Some(addresses) = addresses
            && addresses != self.good
        {
            let id = |a: &IpAddr| backend_id(&self.pool, SocketAddr::new(*a, self.spec.port));
            decision.added = addresses
                .iter()
                .filter(|a| self.good.binary_search(a).is_err())
                .map(id)
                .collect();
            decision.removed = self
                .good
                .iter()
                .filter(|a| addresses.binary_search(a).is_err())
                .map(id)
                .collect();
            self.good = addresses;
            decision.apply = Some(self.backends());
        }
        decision
    }
}

/// The id of the backend at `addr` in `pool`: `<pool>/<address>:<port>` (`[v6]:port` for IPv6).
#[must_use]
pub fn backend_id(pool: &str, addr: SocketAddr) -> String {
    format!("{pool}/{addr}")
}

/// The address of a backend id made by [`backend_id`] for `pool`.
#[must_use]
pub fn address_of(pool: &str, id: &str) -> Option<SocketAddr> {
    id.strip_prefix(pool)?.strip_prefix('/')?.parse().ok()
}

/// One backend per address, in the given order.
#[must_use]
pub fn backends_for(pool: &str, spec: &DnsSpec, addresses: &[IpAddr]) -> Vec<BackendSpec> {
    let scheme = if spec.https { "https" } else { "http" };
    addresses
        .iter()
        .map(|ip| {
            let addr = SocketAddr::new(*ip, spec.port);
            BackendSpec {
                id: backend_id(pool, addr),
                url: format!("{scheme}://{addr}"),
                weight: 1,
                disabled: false,
                send_proxy: None,
                protocol: spec.protocol,
            }
        })
        .collect()
}

/// Carry the discovered backends over a change of configuration (a reload, a `PATCH`): a DNS
/// pool of `next` that has no backends yet takes the addresses of the same-named DNS pool of
/// `previous`, rebuilt with `next`'s port, scheme and protocol, so a reload never empties a
/// pool that DNS filled (C-DISC-1). The next answer replaces them.
pub fn carry_over(previous: &ValidConfig, next: &mut ValidConfig) {
    for pool in &mut next.pools {
        let Some(spec) = &pool.dns else { continue };
        if !pool.backends.is_empty() {
            continue;
        }
        let Some(before) = previous
            .pools
            .iter()
            .find(|p| p.name == pool.name && p.dns.is_some())
        else {
            continue;
        };
        let mut addresses: Vec<IpAddr> = before
            .backends
            .iter()
            .filter_map(|b| address_of(&pool.name, &b.id))
            .map(|a| a.ip())
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        pool.backends = backends_for(&pool.name, spec, &addresses);
    }
}
