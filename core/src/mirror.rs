//! Request mirroring (C-MIRROR-1): whether a request of a route with `mirror` is copied to a
//! backend of the mirror pool, which backend, and what its outcome does to that pool.
//!
//! The decision is the request engine's (`exchange`), taken once the request passed the gate and
//! the limiter, from the engine's random source: the route's `percent` is drawn, the body is
//! checked (none, or a `Content-Length` within `retry.body_limit` that the engine buffers; a
//! larger or unannounced body *skips* the mirror), the process-wide bound
//! `server.upstream.mirror_max_in_flight` is taken (over it the mirror is *dropped*), and a
//! backend of the mirror pool is selected by that pool's own policy, health, breaker and outlier
//! state (none available: *dropped* too). The [`Mirror`] holds the backend slot and the
//! in-flight place until the adapter finishes it; its outcome is recorded only on the mirror
//! pool's backend ([`Mirror::finish`]): the primary's pool, retry budget, rate limiter and gate
//! never see a mirror, and a mirror is never retried.
//!
//! The bound is a core counter ([`InFlight`], one per process in `exchange::Services`) rather
//! than a proxy semaphore so that the simulator bounds mirrors the same way, and so that it is
//! read per request: a reload that changes it applies to the next request.

use core::time::Duration;

use crate::backend::Slot;
use crate::breaker::Transition;
use crate::outlier::{OutlierEvent, Verdict};
use crate::pool::Pool;
use crate::retry::{AttemptOutcome, RetryPolicy};
use crate::rng::{Rng, WyRand};
use crate::select::{PickContext, Selection, Tried};
use crate::sync::{Arc, AtomicU32, Ordering};
use crate::time::Instant;

/// The mirrors in flight in the process (C-MIRROR-1's bound).
#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicU32,
}

impl InFlight {
    /// No mirror in flight.
    #[must_use]
    pub fn new() -> InFlight {
        InFlight::default()
    }

    /// Mirrors in flight now.
    #[must_use]
    pub fn current(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }

    /// One place below `max`, if there is one.
    fn take(this: &Arc<InFlight>, max: u32) -> Option<Place> {
        this.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(Arc::clone(this)))
    }
}

/// One mirror's place in [`InFlight`], given back on drop.
#[derive(Debug)]
struct Place(Arc<InFlight>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a mirror decision ended (`load_balancer_mirror_requests_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorResult {
    /// Sent to a backend of the mirror pool.
    Sent,
    /// Not sent: `mirror_max_in_flight` mirrors were in flight, or the mirror pool had no
    /// available backend.
    Dropped,
    /// Not sent: the body is not replayable (over `retry.body_limit`, or of unannounced length),
    /// or the request asked for an upgrade.
    Skipped,
}

impl MirrorResult {
    /// Every result, in label order.
    pub const ALL: [MirrorResult; 3] = [
        MirrorResult::Sent,
        MirrorResult::Dropped,
        MirrorResult::Skipped,
    ];

    /// The metric label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            MirrorResult::Sent => "sent",
            MirrorResult::Dropped => "dropped",
            MirrorResult::Skipped => "skipped",
        }
    }
}

/// What a request's body is, as far as mirroring cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorBody {
    /// No body, or one the engine buffers whole (within `retry.body_limit`).
    Replayable,
    /// Over the limit, of unannounced length, or a tunnel.
    NotReplayable,
}

/// A route's mirror, resolved against the runtime: the pool, its index and the share mirrored.
#[derive(Debug, Clone)]
pub struct Route<'a> {
    /// The mirror pool's snapshot.
    pub pool: &'a Arc<Pool>,
    /// Its index in the runtime (`Runtime::pool`).
    pub pool_index: usize,
    /// `percent`, 0..=100.
    pub percent: u8,
    /// `server.upstream.mirror_max_in_flight`.
    pub max_in_flight: u32,
}

/// What the engine does about mirroring one request.
#[derive(Debug)]
pub enum Decision {
    /// Not drawn (or the route has no mirror): nothing to count.
    No,
    /// Drawn but not sent; count it.
    NotSent(MirrorResult),
    /// Drawn and reserved: send it with the primary's first attempt.
    Send(Mirror),
}

/// Whether `percent` % of requests are drawn (from the mirror's own generator).
fn drawn(percent: u8, rng: &mut dyn Rng) -> bool {
    match percent {
        0 => false,
        100.. => true,
        p => rng.below(100) < u64::from(p),
    }
}

/// Decide the mirror of one request of a route with `route`'s mirror at `now` (module doc):
/// the draw, the body, the in-flight bound, the mirror pool's selection with `ctx` (the mirror
/// pool's own affinity context).
///
/// It takes exactly one value of the engine's `rng`, whatever happens next, and seeds the
/// mirror's own generator with it: the share's draw and the mirror pool's selection use that
/// one. So the engine's later draws (the primary's selection, backoff, sampling) never depend
/// on the mirror pool's state, and a mirror pool that hangs or dies cannot change, through the
/// random stream, which backend a primary attempt goes to (the simulator's `mirror_isolation`
/// compares runs to the draw).
pub fn decide(
    route: &Route<'_>,
    in_flight: &Arc<InFlight>,
    body: MirrorBody,
    ctx: &PickContext,
    now: Instant,
    rng: &mut dyn Rng,
) -> Decision {
    let mut own = WyRand::new(rng.next_u64());
    let rng = &mut own;
    if !drawn(route.percent, rng) {
        return Decision::No;
    }
    if body == MirrorBody::NotReplayable {
        return Decision::NotSent(MirrorResult::Skipped);
    }
    let Some(place) = InFlight::take(in_flight, route.max_in_flight) else {
        return Decision::NotSent(MirrorResult::Dropped);
    };
    // The mirror pool's outlier interval is judged by whoever uses the pool first after it
    // ended, as for a primary pool: a pool only mirrored to is judged by its mirrors.
    let outliers = route.pool.judge_outliers(now);
    match route.pool.select(ctx, &Tried::default(), now, rng) {
        Selection::Selected { index, slot } => Decision::Send(Mirror {
            pool: Arc::clone(route.pool),
            pool_index: route.pool_index,
            backend: index,
            slot,
            _place: place,
            outliers,
            sent: now,
        }),
        Selection::Unavailable(_) => Decision::NotSent(MirrorResult::Dropped),
    }
}

/// How a mirror attempt ended, as the adapter saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorEnd {
    /// A response head with this status (its body is read and discarded).
    Status(u16),
    /// The connection could not be made.
    Connect,
    /// The connection broke before a head.
    Transport,
    /// No head by [`Mirror::deadline`].
    Timeout,
    /// The process gave the mirror up (shutdown): neutral for the backend.
    Abandoned,
}

/// One mirror on its way: the mirror pool's backend slot and the in-flight place, held until
/// [`Mirror::finish`] or drop (a dropped mirror is neutral for the backend's health).
#[derive(Debug)]
pub struct Mirror {
    pool: Arc<Pool>,
    pool_index: usize,
    backend: usize,
    slot: Slot,
    _place: Place,
    outliers: Option<Vec<OutlierEvent>>,
    sent: Instant,
}

impl Mirror {
    /// The mirror pool's index in the runtime (`Runtime::pool`).
    #[must_use]
    pub fn pool_index(&self) -> usize {
        self.pool_index
    }

    /// The backend's index in the mirror pool.
    #[must_use]
    pub fn backend(&self) -> usize {
        self.backend
    }

    /// The mirror pool's snapshot.
    #[must_use]
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// The mirror pool's outlier ejections and returns judged when this mirror was decided
    /// (indices in the mirror pool), once: for the adapter's events.
    pub fn take_outlier_events(&mut self) -> Option<Vec<OutlierEvent>> {
        self.outliers.take()
    }

    /// The mirror is sent at `now` (with the primary's first attempt).
    pub fn send_at(&mut self, now: Instant) {
        self.sent = now;
    }

    /// When the mirror was sent.
    #[must_use]
    pub fn sent(&self) -> Instant {
        self.sent
    }

    /// When the mirror's head wait ends: `per_try_timeout` and the transport's
    /// `response_header_timeout` (`header_timeout`) after sending, whichever is earlier.
    #[must_use]
    pub fn deadline(&self, policy: &RetryPolicy, header_timeout: Option<Duration>) -> Instant {
        let mut wait = policy.per_try_timeout();
        if let Some(t) = header_timeout {
            wait = wait.min(t);
        }
        self.sent.saturating_add(wait)
    }

    /// Record how the mirror ended at `now` on the mirror pool's backend only (its breaker and
    /// outlier counts, classified as a primary attempt's would be under `policy`), and give the
    /// slot and the in-flight place back. The circuit transition it caused, if any.
    pub fn finish(
        mut self,
        end: MirrorEnd,
        policy: &RetryPolicy,
        now: Instant,
    ) -> Option<Transition> {
        let outcome = match end {
            MirrorEnd::Status(s) if crate::flow::valid_upstream_status(s) => {
                AttemptOutcome::Status(s)
            }
            MirrorEnd::Status(_) | MirrorEnd::Transport => AttemptOutcome::Transport,
            MirrorEnd::Connect => AttemptOutcome::Connect,
            MirrorEnd::Timeout => AttemptOutcome::PerTryTimeout,
            MirrorEnd::Abandoned => AttemptOutcome::ClientGone,
        };
        let verdict = match outcome {
            AttemptOutcome::Status(s) => Verdict::of_status(s),
            AttemptOutcome::ClientGone => Verdict::Ignored,
            _ => Verdict::Failed,
        };
        let class = policy.classify(outcome);
        self.slot
            .record_attempt(class, verdict, self.pool.params(), now)
    }
}

/// The `Host` a mirror carries: `-shadow` appended to the name part of the request's `host`,
/// its port kept (`api.example:8080` → `api.example-shadow:8080`), so that the shadow can tell
/// mirrored traffic from real traffic by name.
#[must_use]
pub fn shadow_host(host: &str) -> String {
    const SUFFIX: &str = "-shadow";
    // A port follows the last `:` unless that colon is inside an IPv6 literal's brackets.
    let port_at = host.rfind(':').filter(|&i| {
        !host[i..].contains(']') && (host.starts_with('[') || !host[..i].contains(':'))
    });
    let (name, port) = match port_at {
        Some(i) => host.split_at(i),
        None => (host, ""),
    };
    let mut out = String::with_capacity(host.len() + SUFFIX.len());
    out.push_str(name);
    out.push_str(SUFFIX);
    out.push_str(port);
    out
}

#[cfg(all(test, not(loom)))]
mod tests;
