//! Backends, their shared runtime state, per-backend slots, and the pool snapshot
//! (C-POOL-1, C-POOL-2, C-POOL-3, C-POOL-6, C-POOL-7).
//!
//! A [`Pool`] is an immutable snapshot: its backend list, policy and parameters never change.
//! Adapters publish a new `Arc<Pool>` atomically on reload (arc-swap); a request keeps the
//! snapshot it started with, so backend indices stay valid for all its attempts. The runtime state
//! of a backend (in-flight count, health flag, breaker, counters) lives in an `Arc<Backend>` that
//! the next snapshot takes over when the backend's id and url are unchanged (C-CONF-6), so a
//! reload never resets health or leaks a slot.
//!
//! A backend is *available* (C-POOL-3) when it is enabled, not draining, healthy by active checks,
//! its circuit admits a request, and it has a free slot below `max_concurrent_requests`. A slot is
//! reserved before an attempt and released by dropping the [`Slot`] guard (C-POOL-6); the slot
//! also carries the breaker permit, so recording the attempt's outcome and freeing the slot
//! cannot be forgotten or done twice.

use crate::breaker::{Breaker, BreakerParams, CircuitState, Outcome, Permit, Transition};
use crate::slow_start::SlowStart;
use crate::sync::{Arc, AtomicU32, AtomicU64, Ordering};
use crate::time::Instant;

/// What a backend is, as configured (C-POOL-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSpec {
    /// The operator's stable id; never derived from the host name.
    pub id: String,
    /// Base URL (`http://` or `https://` with a host). Validated by the config layer.
    pub url: String,
    /// Relative weight for `weighted_round_robin`, 1..=100 (weir's addition; default 1).
    pub weight: u32,
    /// Declaratively disabled (`disabled: true`).
    pub disabled: bool,
}

impl BackendSpec {
    /// An enabled backend of weight 1.
    #[must_use]
    pub fn new(id: impl Into<String>, url: impl Into<String>) -> BackendSpec {
        BackendSpec {
            id: id.into(),
            url: url.into(),
            weight: 1,
            disabled: false,
        }
    }
}

/// Why a backend is not available right now. Ordered from the most to the least permanent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    /// Available for a new request.
    Available,
    /// Administratively or declaratively disabled.
    Disabled,
    /// Draining: no new requests (C-POOL-7).
    Draining,
    /// Failing active health checks (or not checked yet).
    Unhealthy,
    /// Passive circuit open (C-HEALTH-3).
    CircuitOpen,
    /// `max_concurrent_requests` reached (C-POOL-6).
    Saturated,
}

/// Most slots one backend can have (24 bits of the load word).
pub const MAX_CONCURRENT_REQUESTS: u32 = (1 << 24) - 1;
const IN_FLIGHT_MASK: u64 = MAX_CONCURRENT_REQUESTS as u64;
const REQUESTS_SHIFT: u32 = 24;
/// One more slot in flight and one more attempt counted (the attempt count wraps after 2^40).
const ONE_ATTEMPT: u64 = (1 << REQUESTS_SHIFT) | 1;

const ENABLED: u32 = 1;
const DRAINING: u32 = 2;
const HEALTHY: u32 = 4;

/// The shared runtime state of one backend. See the module doc.
#[derive(Debug)]
pub struct Backend {
    id: Box<str>,
    url: Box<str>,
    weight: u32,
    flags: AtomicU32,
    /// In-flight slots (low 24 bits) and attempts ever sent (high 40 bits) in one word, so that
    /// reserving a slot and counting the attempt is a single atomic operation.
    load: AtomicU64,
    passive_failures: AtomicU64,
    /// When the backend last became eligible (enabled, not draining, healthy, circuit closed):
    /// the start of its slow-start ramp. Nanoseconds of the core clock; [`NO_RAMP`] after
    /// [`Backend::skip_initial_ramp`].
    warm_since: AtomicU64,
    breaker: Breaker,
}

/// `warm_since` of a backend whose present availability needs no ramp.
const NO_RAMP: u64 = u64::MAX;

impl Backend {
    /// A new backend: unhealthy until its first successful check (C-HEALTH-1).
    #[must_use]
    pub fn new(spec: &BackendSpec, now: Instant) -> Backend {
        let flags = if spec.disabled { 0 } else { ENABLED };
        Backend {
            id: spec.id.as_str().into(),
            url: spec.url.as_str().into(),
            weight: spec.weight,
            flags: AtomicU32::new(flags),
            load: AtomicU64::new(0),
            passive_failures: AtomicU64::new(0),
            warm_since: AtomicU64::new(now.as_nanos()),
            breaker: Breaker::new(),
        }
    }

    /// The configured id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The configured base URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The configured weight.
    #[must_use]
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Requests in flight on this backend (slots held).
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        (self.load.load(Ordering::Relaxed) & IN_FLIGHT_MASK) as u32
    }

    /// Attempts sent to this backend since it was created.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.load.load(Ordering::Relaxed) >> REQUESTS_SHIFT
    }

    /// Attempts that counted as passive failures.
    #[must_use]
    pub fn passive_failures(&self) -> u64 {
        self.passive_failures.load(Ordering::Relaxed)
    }

    /// Whether the backend is enabled.
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.flags.load(Ordering::Acquire) & ENABLED != 0
    }

    /// Whether the backend is draining.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.flags.load(Ordering::Acquire) & DRAINING != 0
    }

    /// Whether the last active checks found the backend healthy.
    #[must_use]
    pub fn is_healthy(&self) -> bool {
        self.flags.load(Ordering::Acquire) & HEALTHY != 0
    }

    /// The breaker's state at `now`.
    #[must_use]
    pub fn circuit_state(&self, now: Instant) -> CircuitState {
        self.breaker.state(now)
    }

    /// The breaker, for reports.
    #[must_use]
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The slow-start share (permille) the backend receives at `now`.
    #[must_use]
    pub fn slow_start_permille(&self, slow_start: &SlowStart, now: Instant) -> u32 {
        match self.warm_since.load(Ordering::Relaxed) {
            NO_RAMP => 1000,
            since => slow_start.share_permille(Instant::from_nanos(since), now),
        }
    }

    /// The backend's present availability needs no slow-start ramp: it was available when the
    /// proxy started (its first health cycle ran before the listeners opened), so no traffic has
    /// gone anywhere yet and every backend is equally cold; ramping them all would only perturb
    /// the policy's order (C-HEALTH-4 as refined in docs/health.md; HAProxy never applies
    /// slowstart at start-up either). The next time the backend becomes eligible, its ramp runs
    /// as usual. Does nothing to a backend that is not eligible now. Returns whether it applied.
    pub fn skip_initial_ramp(&self) -> bool {
        let eligible = Backend::eligible(self.flags.load(Ordering::Acquire));
        if eligible {
            self.warm_since.store(NO_RAMP, Ordering::Relaxed);
        }
        eligible
    }

    /// Availability for a new request at `now` (C-POOL-3). No side effect.
    #[must_use]
    pub fn availability(&self, params: &PoolParams, now: Instant) -> Availability {
        let flags = self.flags.load(Ordering::Acquire);
        if flags & ENABLED == 0 {
            Availability::Disabled
        } else if flags & DRAINING != 0 {
            Availability::Draining
        } else if flags & HEALTHY == 0 {
            Availability::Unhealthy
        } else if !self.breaker.admits(&params.breaker, now) {
            Availability::CircuitOpen
        } else if self.in_flight() >= params.max_concurrent_requests
            && !mutated!(SLOT_LIMIT_IGNORED)
        {
            Availability::Saturated
        } else {
            Availability::Available
        }
    }

    fn eligible(flags: u32) -> bool {
        flags & (ENABLED | DRAINING | HEALTHY) == ENABLED | HEALTHY
    }

    /// Set `set` and clear `clear` in the flags; when that makes the backend eligible for traffic,
    /// its slow-start ramp starts at `now` (C-HEALTH-4). Returns whether anything changed.
    fn update_flags(&self, set: u32, clear: u32, now: Instant) -> bool {
        let old = self
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                Some((f | set) & !clear)
            })
            .unwrap_or_else(|f| f); // the closure always returns Some
        let new = (old | set) & !clear;
        if !Backend::eligible(old) && Backend::eligible(new) {
            self.warm_since.store(now.as_nanos(), Ordering::Relaxed);
        }
        old != new
    }

    /// Record the verdict of active health checks (C-HEALTH-2). Returns whether it changed.
    pub fn set_healthy(&self, healthy: bool, now: Instant) -> bool {
        if healthy {
            self.update_flags(HEALTHY, 0, now)
        } else {
            self.update_flags(0, HEALTHY, now)
        }
    }

    /// Enable or disable the backend. Enabling also clears a drain (C-MGMT-4).
    pub fn set_enabled(&self, enabled: bool, now: Instant) -> bool {
        if enabled {
            self.update_flags(ENABLED, DRAINING, now)
        } else {
            self.update_flags(0, ENABLED, now)
        }
    }

    /// Start draining: no new requests; in-flight ones finish and stay counted (C-POOL-7).
    pub fn start_drain(&self, now: Instant) -> bool {
        self.update_flags(DRAINING, 0, now)
    }

    /// Reserve a slot for one attempt: a free slot below `max_concurrent_requests` (C-POOL-6) and a
    /// breaker permit (C-HEALTH-3). With `panic`, the breaker is bypassed (see `select.rs`).
    /// Never blocks; an unavailable backend is reported, not waited on.
    pub fn try_reserve(
        this: &Arc<Backend>,
        params: &PoolParams,
        now: Instant,
        panic: bool,
    ) -> Result<Slot, Availability> {
        let max = u64::from(params.max_concurrent_requests)
            .max(IN_FLIGHT_MASK * u64::from(mutated!(SLOT_LIMIT_IGNORED)));
        let reserved = this
            .load
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & IN_FLIGHT_MASK < max).then_some(w.wrapping_add(ONE_ATTEMPT))
            });
        if reserved.is_err() {
            return Err(Availability::Saturated);
        }
        let permit = if panic {
            Some(Permit::Panic)
        } else {
            this.breaker.try_acquire(&params.breaker, now)
        };
        let Some(permit) = permit else {
            // Give the slot back; the attempt was never sent, so uncount it too.
            this.load.fetch_sub(ONE_ATTEMPT, Ordering::AcqRel);
            return Err(Availability::CircuitOpen);
        };
        Ok(Slot {
            backend: Arc::clone(this),
            permit,
            recorded: false,
            sent: true,
        })
    }
}

/// A reserved slot on one backend for one attempt. Dropping it releases the slot; a half-open
/// trial that is dropped without an outcome is released as [`Outcome::Neutral`].
#[derive(Debug)]
pub struct Slot {
    backend: Arc<Backend>,
    permit: Permit,
    recorded: bool,
    sent: bool,
}

impl Slot {
    /// The backend this slot is on.
    #[must_use]
    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// Give the slot back without sending anything on it (for example when the retry budget
    /// refuses the retry it was reserved for, C-RETRY-3): it is not counted as an attempt.
    pub fn cancel(mut self) {
        self.sent = false;
    }

    /// Whether this slot was granted by panic routing.
    #[must_use]
    pub fn is_panic(&self) -> bool {
        self.permit == Permit::Panic
    }

    /// Record the attempt's outcome for passive health (C-HEALTH-3). The slot stays held until it
    /// is dropped (a response body may still be streaming, C-POOL-6). Only the first call counts.
    /// A circuit that closes restarts the backend's slow-start ramp (C-HEALTH-4).
    pub fn record(
        &mut self,
        outcome: Outcome,
        params: &PoolParams,
        now: Instant,
    ) -> Option<Transition> {
        if self.recorded {
            return None;
        }
        self.recorded = true;
        if outcome == Outcome::Failure {
            self.backend
                .passive_failures
                .fetch_add(1, Ordering::Relaxed);
        }
        let t = self
            .backend
            .breaker
            .record(self.permit, outcome, &params.breaker, now);
        if t == Some(Transition::Closed) {
            self.backend
                .warm_since
                .store(now.as_nanos(), Ordering::Relaxed);
        }
        t
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.recorded && matches!(self.permit, Permit::Trial { .. }) {
            // Only the trial count is touched by a neutral outcome; parameters do not matter.
            let _ = self.backend.breaker.record(
                self.permit,
                Outcome::Neutral,
                &BreakerParams::default(),
                Instant::ZERO,
            );
        }
        let release = if self.sent { 1 } else { ONE_ATTEMPT };
        self.backend.load.fetch_sub(release, Ordering::AcqRel);
    }
}

/// Per-pool parameters that apply to every backend in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolParams {
    /// Slots per backend (`server.upstream.max_concurrent_requests`, [512]).
    pub max_concurrent_requests: u32,
    /// Passive circuit breaker.
    pub breaker: BreakerParams,
    /// Slow-start ramp for new and recovered backends.
    pub slow_start: SlowStart,
}

impl Default for PoolParams {
    fn default() -> PoolParams {
        PoolParams {
            max_concurrent_requests: 512,
            breaker: BreakerParams::default(),
            slow_start: SlowStart::default(),
        }
    }
}

/// Errors building a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// two backends share an id
    DuplicateId(String),
    /// a backend id is empty
    EmptyId,
    /// a weight is outside 1..=100
    Weight(String, u32),
    /// max_concurrent_requests must be within 1..=16777215
    Concurrency(u32),
}

impl core::fmt::Display for PoolError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PoolError::DuplicateId(id) => write!(f, "duplicate backend id {id:?}"),
            PoolError::EmptyId => write!(f, "backend id must not be empty"),
            PoolError::Weight(id, w) => {
                write!(f, "backend {id:?}: weight must be within 1..=100, got {w}")
            }
            PoolError::Concurrency(n) => write!(
                f,
                "max_concurrent_requests must be within 1..={MAX_CONCURRENT_REQUESTS}, got {n}"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// Build the backend list of a new snapshot, taking over the runtime state of every backend of
/// `previous` with the same id and url (C-CONF-6). A declarative `disabled` replaces the runtime
/// enabled state and cancels an administrative drain; other state (health, breaker, counters,
/// slots) carries over untouched.
pub fn carry_over(
    specs: &[BackendSpec],
    previous: &[Arc<Backend>],
    params: &PoolParams,
    now: Instant,
) -> Result<Vec<Arc<Backend>>, PoolError> {
    if !(1..=MAX_CONCURRENT_REQUESTS).contains(&params.max_concurrent_requests) {
        return Err(PoolError::Concurrency(params.max_concurrent_requests));
    }
    let mut out: Vec<Arc<Backend>> = Vec::with_capacity(specs.len());
    for spec in specs {
        if spec.id.is_empty() {
            return Err(PoolError::EmptyId);
        }
        if !(1..=100).contains(&spec.weight) {
            return Err(PoolError::Weight(spec.id.clone(), spec.weight));
        }
        if out.iter().any(|b| *b.id == *spec.id) {
            return Err(PoolError::DuplicateId(spec.id.clone()));
        }
        let kept = previous
            .iter()
            .find(|b| *b.id == *spec.id && *b.url == *spec.url && b.weight == spec.weight);
        let backend = match kept {
            Some(b) => {
                b.set_enabled(!spec.disabled, now);
                Arc::clone(b)
            }
            None => Arc::new(Backend::new(spec, now)),
        };
        out.push(backend);
    }
    Ok(out)
}

/// One immutable pool snapshot: backends in config order, the selection policy over them and
/// the pool's parameters (C-POOL-2). Selection lives in `select.rs`.
#[derive(Debug)]
pub struct Pool {
    pub(crate) backends: Box<[Arc<Backend>]>,
    pub(crate) params: PoolParams,
    pub(crate) policy: crate::select::AnyPolicy,
}

impl Pool {
    /// Build a snapshot from `specs`, taking over the state of `previous`'s backends with the same
    /// id and url (C-CONF-6). `rng` seeds the policy (round-robin start index, C-POOL-4).
    pub fn new(
        specs: &[BackendSpec],
        policy: crate::select::PolicyKind,
        params: PoolParams,
        previous: Option<&Pool>,
        now: Instant,
        rng: &mut dyn crate::rng::Rng,
    ) -> Result<Pool, PoolError> {
        let previous: &[Arc<Backend>] = previous.map_or(&[], |p| &p.backends);
        let backends = carry_over(specs, previous, &params, now)?.into_boxed_slice();
        let policy = crate::select::AnyPolicy::new(policy, &backends, rng);
        Ok(Pool {
            backends,
            params,
            policy,
        })
    }

    /// The backends in config order.
    #[must_use]
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// The pool's parameters.
    #[must_use]
    pub fn params(&self) -> &PoolParams {
        &self.params
    }

    /// The backend with this id.
    #[must_use]
    pub fn find(&self, id: &str) -> Option<(usize, &Arc<Backend>)> {
        self.backends.iter().enumerate().find(|(_, b)| b.id() == id)
    }
}

/// The maximum number of attempts per request the `Tried` set can remember.
pub const MAX_TRIED: usize = 8;

/// The backends (pool indices) a request has already tried: a retry never revisits one
/// (C-RETRY-2). Fixed size, no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tried {
    len: u8,
    items: [u32; MAX_TRIED],
}

impl Tried {
    /// Nothing tried yet.
    #[must_use]
    pub const fn new() -> Tried {
        Tried {
            len: 0,
            items: [0; MAX_TRIED],
        }
    }

    /// Whether backend `index` was tried.
    #[must_use]
    pub fn contains(&self, index: usize) -> bool {
        self.items[..usize::from(self.len)]
            .iter()
            .any(|&i| i as usize == index)
    }

    /// Remember backend `index`. Returns false when the set is full (more attempts than
    /// [`MAX_TRIED`], which `retry.max_attempts` ≤ 5 rules out).
    pub fn insert(&mut self, index: usize) -> bool {
        if self.contains(index) {
            return true;
        }
        let Ok(i) = u32::try_from(index) else {
            return false;
        };
        if usize::from(self.len) == MAX_TRIED {
            return false;
        }
        self.items[usize::from(self.len)] = i;
        self.len += 1;
        true
    }

    /// How many backends were tried.
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether none was tried.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use core::time::Duration;

    fn healthy(spec: &BackendSpec, now: Instant) -> Arc<Backend> {
        let b = Arc::new(Backend::new(spec, now));
        b.set_healthy(true, now);
        b
    }

    #[test]
    fn c_health_4_no_ramp_for_backends_available_at_start_but_after_a_recovery() {
        let ss = SlowStart::new(Duration::from_secs(30), 10).unwrap();
        let t0 = Instant::from_secs(1);
        let up = healthy(&BackendSpec::new("a", "http://a"), t0);
        let down = Arc::new(Backend::new(&BackendSpec::new("b", "http://b"), t0));
        // The first cycle: `a` passed, `b` did not.
        assert!(up.skip_initial_ramp());
        assert!(
            !down.skip_initial_ramp(),
            "an unavailable backend keeps its ramp"
        );
        assert_eq!(up.slow_start_permille(&ss, t0), 1000, "no ramp at start-up");
        // `b` passes later: it ramps from the minimum.
        let t1 = t0 + Duration::from_secs(5);
        down.set_healthy(true, t1);
        assert_eq!(down.slow_start_permille(&ss, t1), 100);
        // `a` fails and recovers: the ramp runs again.
        up.set_healthy(false, t1);
        up.set_healthy(true, t1);
        assert_eq!(up.slow_start_permille(&ss, t1), 100);
        assert_eq!(
            up.slow_start_permille(&ss, t1 + Duration::from_secs(15)),
            550
        );
    }

    #[test]
    fn c_pool_3_availability_checks_every_condition() {
        let p = PoolParams {
            max_concurrent_requests: 1,
            ..PoolParams::default()
        };
        let t = Instant::from_secs(1);
        let b = Arc::new(Backend::new(&BackendSpec::new("a", "http://a"), t));
        assert_eq!(
            b.availability(&p, t),
            Availability::Unhealthy,
            "starts unhealthy (C-HEALTH-1)"
        );
        b.set_healthy(true, t);
        assert_eq!(b.availability(&p, t), Availability::Available);
        let slot = Backend::try_reserve(&b, &p, t, false).unwrap();
        assert_eq!(b.availability(&p, t), Availability::Saturated);
        assert_eq!(
            Backend::try_reserve(&b, &p, t, false).unwrap_err(),
            Availability::Saturated
        );
        drop(slot);
        assert_eq!(b.in_flight(), 0);
        b.start_drain(t);
        assert_eq!(b.availability(&p, t), Availability::Draining);
        b.set_enabled(false, t);
        assert_eq!(b.availability(&p, t), Availability::Disabled);
        b.set_enabled(true, t);
        assert_eq!(
            b.availability(&p, t),
            Availability::Available,
            "enabling clears a drain"
        );
        for _ in 0..2 {
            let mut s = Backend::try_reserve(&b, &p, t, false).unwrap();
            s.record(Outcome::Failure, &p, t);
        }
        assert_eq!(b.availability(&p, t), Availability::CircuitOpen);
        assert_eq!(b.passive_failures(), 2);
        assert_eq!(b.requests(), 3);
    }

    #[test]
    fn c_pool_6_a_cancelled_slot_is_released_and_not_counted() {
        let p = PoolParams::default();
        let t = Instant::from_secs(1);
        let b = healthy(&BackendSpec::new("a", "http://a"), t);
        Backend::try_reserve(&b, &p, t, false).unwrap().cancel();
        assert_eq!((b.in_flight(), b.requests()), (0, 0));
        drop(Backend::try_reserve(&b, &p, t, false).unwrap());
        assert_eq!((b.in_flight(), b.requests()), (0, 1));
    }

    #[test]
    fn c_pool_7_draining_backend_keeps_in_flight_visible() {
        let p = PoolParams::default();
        let t = Instant::from_secs(1);
        let b = healthy(&BackendSpec::new("a", "http://a"), t);
        let slot = Backend::try_reserve(&b, &p, t, false).unwrap();
        b.start_drain(t);
        assert_eq!(b.in_flight(), 1);
        assert_eq!(b.availability(&p, t), Availability::Draining);
        drop(slot);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    fn c_pool_6_trial_slot_dropped_without_outcome_frees_the_trial() {
        let p = PoolParams::default();
        let t = Instant::from_secs(1);
        let b = healthy(&BackendSpec::new("a", "http://a"), t);
        for _ in 0..2 {
            Backend::try_reserve(&b, &p, t, false)
                .unwrap()
                .record(Outcome::Failure, &p, t);
        }
        let later = t + Duration::from_secs(10);
        let trial = Backend::try_reserve(&b, &p, later, false).unwrap();
        assert_eq!(
            Backend::try_reserve(&b, &p, later, false).unwrap_err(),
            Availability::CircuitOpen
        );
        drop(trial); // client went away
        let mut again = Backend::try_reserve(&b, &p, later, false).expect("trial released");
        assert_eq!(
            again.record(Outcome::Success, &p, later),
            Some(Transition::Closed)
        );
        assert_eq!(
            b.slow_start_permille(&p.slow_start, later),
            100,
            "a closed circuit restarts slow start (C-HEALTH-4)"
        );
    }

    #[test]
    fn c_conf_6_carry_over_keeps_state_when_id_and_url_are_unchanged() {
        let p = PoolParams::default();
        let t = Instant::from_secs(1);
        let a = BackendSpec::new("a", "http://a");
        let b = BackendSpec::new("b", "http://b");
        let first = carry_over(&[a.clone(), b.clone()], &[], &p, t).unwrap();
        first[0].set_healthy(true, t);
        let held = Backend::try_reserve(&first[0], &p, t, false).unwrap();
        first[1].start_drain(t);
        let moved = BackendSpec::new("b", "http://b2");
        let mut disabled_a = a.clone();
        disabled_a.disabled = true;
        let second = carry_over(&[disabled_a, moved], &first, &p, t).unwrap();
        assert!(Arc::ptr_eq(&first[0], &second[0]));
        assert_eq!(second[0].in_flight(), 1, "in-flight survives the swap");
        assert!(!second[0].is_enabled(), "declarative disabled wins");
        assert!(
            !Arc::ptr_eq(&first[1], &second[1]),
            "a new url is a new backend"
        );
        assert!(!second[1].is_healthy());
        drop(held);
        assert_eq!(second[0].in_flight(), 0);
        // A declarative enable cancels an administrative drain.
        let third = carry_over(&[a.clone(), b.clone()], &first, &p, t).unwrap();
        assert!(third[1].is_enabled() && !third[1].is_draining());
    }

    #[test]
    fn c_pool_1_ids_are_unique_and_weights_bounded() {
        let p = PoolParams::default();
        let t = Instant::ZERO;
        let a = BackendSpec::new("a", "http://a");
        assert_eq!(
            carry_over(&[a.clone(), a.clone()], &[], &p, t).unwrap_err(),
            PoolError::DuplicateId("a".into())
        );
        let mut heavy = a.clone();
        heavy.weight = 101;
        assert!(matches!(
            carry_over(&[heavy], &[], &p, t),
            Err(PoolError::Weight(..))
        ));
        assert_eq!(
            carry_over(&[BackendSpec::new("", "http://x")], &[], &p, t).unwrap_err(),
            PoolError::EmptyId
        );
    }

    #[test]
    fn tried_is_a_bounded_set() {
        let mut t = Tried::new();
        assert!(t.is_empty());
        for i in 0..MAX_TRIED {
            assert!(t.insert(i * 3));
        }
        assert!(t.insert(3), "already present");
        assert!(!t.insert(1000), "full");
        assert!(t.contains(21) && !t.contains(1));
        assert_eq!(t.len(), MAX_TRIED);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// Three threads race for two slots on one backend while it is being drained: never more
    /// than two slots are held at once, and every slot is returned (no leak).
    #[test]
    fn loom_slot_reservation_never_over_admits_or_leaks() {
        loom::model(|| {
            let p = PoolParams {
                max_concurrent_requests: 2,
                ..PoolParams::default()
            };
            let t = Instant::from_secs(1);
            let b = Arc::new(Backend::new(&BackendSpec::new("a", "http://a"), t));
            b.set_healthy(true, t);
            let peak = Arc::new(AtomicU32::new(0));
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (b, peak) = (b.clone(), peak.clone());
                    loom::thread::spawn(move || {
                        if let Ok(slot) = Backend::try_reserve(&b, &p, t, false) {
                            peak.fetch_max(b.in_flight(), Ordering::AcqRel);
                            drop(slot);
                        }
                    })
                })
                .collect();
            let mine = Backend::try_reserve(&b, &p, t, false);
            b.start_drain(t);
            assert!(b.in_flight() <= 2);
            drop(mine);
            for h in handles {
                h.join().unwrap();
            }
            assert!(peak.load(Ordering::Acquire) <= 2);
            assert_eq!(b.in_flight(), 0, "a slot leaked");
            assert_eq!(b.availability(&p, t), Availability::Draining);
        });
    }
}
