//! The idle upstream connection policy of one worker (C-POOL): which idle
//! connection a request reuses, which released connection is kept, when one expires.
//!
//! - reuse is last in, first out per backend (the warmest socket; the oldest expire first);
//! - an idle connection older than `timeout` is never reused: dropped at checkout (from the
//!   front, where the oldest are) and by [`IdlePool::sweep`];
//! - a released connection is kept while the backend's idle count is below its **cap** and the
//!   worker's idle total below the **total cap**, else it is handed back to be closed.
//!
//! **Adaptive caps.** A fixed cap below the steady concurrency churns: at 256 client
//! connections over 2 backends (128 concurrent requests per backend on one worker), a cap of
//! 64 closed every connection released while more than 64 were idle, and the next burst opened
//! new ones (14,740 connections opened in 24 s, against HAProxy's 439). So the cap of a backend
//! is the larger of the configured `per_host` and the backend's **demand**: the most
//! connections lent at once (checked out or newly opened and not yet released or closed) over
//! the current and the previous `window`. Keeping that many idle never holds more sockets than
//! the load itself recently used at once, so the adaptive part costs no connection that load
//! did not already open; the total cap grows the same way (the sum of the demands). When load
//! falls the demand falls with it after two windows, and the next [`IdlePool::sweep`] closes the
//! idle connections beyond the cap as it is then, oldest first (whatever `timeout` says: with
//! `idle_conn_timeout: 0s` no connection expires by age, and the trim is what brings the pool
//! back to `per_host`). `per_host: 0` or `total: 0` still turns idle keeping off.
//!
//! The pool holds the connections themselves (`C`); dropping one is closing it. Time is an
//! argument (`now`), as everywhere in weir-core.
//!
//! Methods: facts in (`handle_opened`, `handle_closed`, `release`), commands (`checkout`,
//! `sweep`, `clear`), getters.

use core::borrow::Borrow;
use core::hash::Hash;
use core::time::Duration;
use std::collections::{HashMap, VecDeque};

use foldhash::quality::FixedState;

use crate::Instant;

/// Whether a connection to a backend may be kept idle and serve another client's request: not
/// when it began with a PROXY header (`send_proxy`, the backend's `send_proxy_protocol`), which
/// names one client for the connection's whole life (docs/tls.md, "Sending the PROXY protocol
/// to backends"). Such a connection is closed after its response and never checked out.
#[must_use]
pub fn poolable(send_proxy: Option<crate::proxy_proto::Version>) -> bool {
    send_proxy.is_none()
}

/// How an upstream HTTP/1 exchange ended, as the proxy saw it: what decides whether its
/// connection goes back to the pool ([`reusable_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The response was relayed to its end (its body complete, nothing failed on either side).
    pub response_complete: bool,
    /// The response's framing and both sides' persistence leave the connection usable for
    /// another request (`h1::ResponseHead::reusable`: a delimited body, no `Connection: close`).
    pub response_reusable: bool,
    /// The request was sent whole, body included. A backend that answered before it read the
    /// whole body (full duplex, C-PATH-7) has the rest of it pending or refused.
    pub request_sent: bool,
    /// Bytes arrived after the response's end (a backend that sent more than it framed).
    pub stray_bytes: bool,
    /// The connection began with a PROXY header ([`poolable`]).
    pub send_proxy: Option<crate::proxy_proto::Version>,
}

/// Whether the connection of an exchange that `ended` so is released to the idle pool (C-POOL,
/// C-PATH-7, docs/proxy.md): only when every message on it was complete and framed, so the next
/// request starts on a clean byte stream; otherwise it is closed.
#[must_use]
pub fn reusable_after(ended: Ended) -> bool {
    ended.response_complete
        && ended.response_reusable
        && ended.request_sent
        && !ended.stray_bytes
        && poolable(ended.send_proxy)
}

/// The configured bounds (`server.upstream.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleParams {
    /// `max_idle_conns_per_host`: the cap below which a backend's demand does not matter.
    pub per_host: usize,
    /// `max_idle_conns` divided over the workers: the total cap below the summed demand.
    pub total: usize,
    /// `idle_conn_timeout` (`None`: idle connections do not expire).
    pub timeout: Option<Duration>,
    /// How long a demand peak is remembered (between one and two windows).
    pub window: Duration,
}

#[derive(Debug)]
struct Host<C> {
    /// Oldest at the front, newest at the back (reused first).
    idle: VecDeque<(C, Instant)>,
    /// Connections lent now.
    lent: usize,
    /// The most lent at once in the current window, and in the previous one.
    peak: [usize; 2],
    window_start: Instant,
}

impl<C> Host<C> {
    fn new(now: Instant) -> Host<C> {
        Host {
            idle: VecDeque::new(),
            lent: 0,
            peak: [0; 2],
            window_start: now,
        }
    }

    fn demand(&self) -> usize {
        self.peak[0].max(self.peak[1])
    }

    fn roll(&mut self, now: Instant, window: Spans) {
        let elapsed = u128::from(now.as_nanos().saturating_sub(self.window_start.as_nanos()));
        if elapsed >= window.window {
            self.peak = if elapsed >= window.double {
                [self.lent, 0]
            } else {
                [self.lent, self.peak[0]]
            };
            self.window_start = now;
        }
    }

    fn lend(&mut self) {
        self.lent += 1;
        self.peak[0] = self.peak[0].max(self.lent);
    }
}

/// `params`' spans in nanoseconds, so that the per-request checks compare integers and never
/// divide a nanosecond count into a `Duration`. `u128`: a `Duration`'s whole range.
#[derive(Debug, Clone, Copy)]
struct Spans {
    /// `window`.
    window: u128,
    /// `window * 2` (saturating, as `Duration::saturating_mul`).
    double: u128,
    /// `timeout`.
    timeout: Option<u128>,
}

impl Spans {
    fn of(params: &IdleParams) -> Spans {
        Spans {
            window: params.window.as_nanos(),
            double: params.window.saturating_mul(2).as_nanos(),
            timeout: params.timeout.map(|t| t.as_nanos()),
        }
    }
}

/// Whether `span` (nanoseconds) has passed from `since` to `now`: `now.saturating_since(since)
/// >= span` without making a `Duration`.
fn passed(now: Instant, since: Instant, span: u128) -> bool {
    u128::from(now.as_nanos().saturating_sub(since.as_nanos())) >= span
}

/// The idle connections of one worker, per backend (module doc), each backend known by a key
/// `K` (its URL by default; the proxy's is a URL with its hash made once per backend, so that a
/// request's look-ups do not hash the URL's bytes). Keys equal as `K` are one
/// backend.
#[derive(Debug)]
pub struct IdlePool<C, K = Box<str>> {
    params: IdleParams,
    spans: Spans,
    hosts: HashMap<K, Host<C>, FixedState>,
    idle_total: usize,
}

impl<C, K: Hash + Eq> IdlePool<C, K> {
    /// An empty pool.
    #[must_use]
    pub fn new(params: IdleParams) -> IdlePool<C, K> {
        IdlePool {
            params,
            spans: Spans::of(&params),
            hosts: HashMap::with_hasher(FixedState::default()),
            idle_total: 0,
        }
    }

    /// The bounds.
    #[must_use]
    pub fn params(&self) -> &IdleParams {
        &self.params
    }

    /// Idle connections held.
    #[must_use]
    pub fn idle_count(&self) -> usize {
        self.idle_total
    }

    /// Idle connections held for `host`.
    #[must_use]
    pub fn idle_for<Q: Hash + Eq + ?Sized>(&self, host: &Q) -> usize
    where
        K: Borrow<Q>,
    {
        self.hosts.get(host).map_or(0, |h| h.idle.len())
    }

    /// The cap `host` has now: `per_host`, or its demand when that is larger (module doc).
    #[must_use]
    pub fn cap_for<Q: Hash + Eq + ?Sized>(&self, host: &Q) -> usize
    where
        K: Borrow<Q>,
    {
        let demand = self.hosts.get(host).map_or(0, Host::demand);
        self.params.per_host.max(demand)
    }

    fn host<Q: Hash + Eq + ?Sized>(&mut self, host: &Q, now: Instant) -> &mut Host<C>
    where
        K: Borrow<Q> + for<'q> From<&'q Q>,
    {
        if !self.hosts.contains_key(host) {
            self.hosts.insert(K::from(host), Host::new(now));
        }
        let h = self.hosts.get_mut(host).expect("inserted above");
        h.roll(now, self.spans);
        h
    }

    /// The newest idle connection to `host` that has not expired at `now`, lent to the caller
    /// (give it back with [`Self::release`] or report it with [`Self::handle_closed`]).
    /// Expired ones met on the way are dropped (closed).
    pub fn checkout<Q: Hash + Eq + ?Sized>(&mut self, host: &Q, now: Instant) -> Option<C>
    where
        K: Borrow<Q>,
    {
        let spans = self.spans;
        let h = self.hosts.get_mut(host)?;
        h.roll(now, spans);
        let before = h.idle.len();
        while h
            .idle
            .front()
            .is_some_and(|(_, since)| spans.timeout.is_some_and(|t| passed(now, *since, t)))
        {
            h.idle.pop_front();
        }
        let found = h.idle.pop_back().map(|(c, _)| c);
        if found.is_some() {
            h.lend();
        }
        self.idle_total -= before - h.idle.len();
        found
    }

    /// A new connection to `host` was opened for a request (it is lent).
    pub fn handle_opened<Q: Hash + Eq + ?Sized>(&mut self, host: &Q, now: Instant)
    where
        K: Borrow<Q> + for<'q> From<&'q Q>,
    {
        self.host(host, now).lend();
    }

    /// A lent connection to `host` was closed (or kept by a tunnel) instead of released.
    pub fn handle_closed<Q: Hash + Eq + ?Sized>(&mut self, host: &Q)
    where
        K: Borrow<Q>,
    {
        if let Some(h) = self.hosts.get_mut(host) {
            h.lent = h.lent.saturating_sub(1);
        }
    }

    /// A lent connection comes back at `now`, reusable. Kept when the caps allow it, else
    /// returned to be closed.
    pub fn release<Q: Hash + Eq + ?Sized>(&mut self, host: &Q, conn: C, now: Instant) -> Option<C>
    where
        K: Borrow<Q> + for<'q> From<&'q Q>,
    {
        let (per_host, total) = (self.params.per_host, self.params.total);
        // The summed demand matters only once the idle total reaches `total` (the cap is the
        // larger of the two): summed then, not on every release.
        let idle_total = self.idle_total;
        let over_total = idle_total >= total
            && idle_total >= self.hosts.values().map(Host::demand).sum::<usize>();
        // One look-up when the host is known (every release but its first), not two.
        let window = self.spans;
        let h = match self.hosts.get_mut(host) {
            Some(h) => h,
            None => self
                .hosts
                .entry(K::from(host))
                .or_insert_with(|| Host::new(now)),
        };
        h.roll(now, window);
        h.lent = h.lent.saturating_sub(1);
        if per_host == 0 || total == 0 {
            return Some(conn);
        }
        let cap = per_host.max(h.demand());
        if h.idle.len() >= cap || over_total {
            return Some(conn);
        }
        h.idle.push_back((conn, now));
        self.idle_total += 1;
        None
    }

    /// Drops idle connections expired at `now` or that `alive` says are dead; rolls the demand
    /// windows, and closes the idle connections beyond the caps as they are now, oldest first
    /// (the worker's periodic sweep). The trim is what brings an adaptive cap back once load
    /// falls, whatever the timeout: with `timeout: None` (`idle_conn_timeout: 0s`) nothing
    /// expires by age, so without it a burst's connections would stay idle forever.
    pub fn sweep(&mut self, now: Instant, mut alive: impl FnMut(&mut C) -> bool) {
        let (per_host, total) = (self.params.per_host, self.params.total);
        let spans = self.spans;
        let mut held = 0;
        let mut demand_total = 0;
        for h in self.hosts.values_mut() {
            h.roll(now, spans);
            h.idle.retain_mut(|(c, since)| {
                spans.timeout.is_none_or(|t| !passed(now, *since, t)) && alive(c)
            });
            let cap = if per_host == 0 || total == 0 {
                0
            } else {
                per_host.max(h.demand())
            };
            let excess = h.idle.len().saturating_sub(cap);
            h.idle.drain(..excess);
            held += h.idle.len();
            demand_total += h.demand();
        }
        // The total cap the same way: the oldest idle connection of any backend goes first.
        let total_cap = total.max(demand_total);
        while held > total_cap {
            let oldest = self
                .hosts
                .values_mut()
                .filter_map(|h| {
                    let since = h.idle.front()?.1;
                    Some((since, h))
                })
                .min_by_key(|(since, _)| *since);
            let Some((_, h)) = oldest else { break };
            h.idle.pop_front();
            held -= 1;
        }
        self.idle_total = held;
    }

    /// Drops every idle connection (shutdown).
    pub fn clear(&mut self) {
        for h in self.hosts.values_mut() {
            h.idle.clear();
        }
        self.idle_total = 0;
    }

    /// When the oldest idle connection expires, if any does.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.params.timeout?;
        self.hosts
            .values()
            .filter_map(|h| h.idle.front().map(|(_, since)| since.saturating_add(t)))
            .min()
    }
}

#[cfg(test)]
mod tests;
