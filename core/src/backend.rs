//! Backends: what one is (C-POOL-1), its shared runtime state, its availability (C-POOL-3) and
//! per-attempt slots (C-POOL-6, C-POOL-7).
//!
//! The runtime state of a backend (in-flight count, health flag, breaker, counters) lives in an
//! `Arc<Backend>` that the next pool snapshot takes over when the backend's id and url are
//! unchanged (C-CONF-6, [`carry_over`](crate::pool::carry_over)), so a reload never resets health
//! or leaks a slot.
//!
//! A backend is *available* (C-POOL-3) when it is enabled, not draining, healthy by active checks,
//! its circuit admits a request, and it has a free slot below `max_concurrent_requests`. A slot is
//! reserved before an attempt and released by dropping the [`Slot`] guard (C-POOL-6); the slot
//! also carries the breaker permit, so recording the attempt's outcome and freeing the slot
//! cannot be forgotten or done twice.
//!
//! This module is the leaf of the pool: selection policies (`select`) read backends, and the
//! pool snapshot (`pool`) holds backends and a policy, so neither needs the other to name a
//! backend.

use core::time::Duration;

use crate::adaptive::{AdaptiveLimit, AdaptiveParams, Sample, Signal};
use crate::breaker::{Breaker, BreakerParams, CircuitState, Outcome, Permit, Transition};
use crate::outlier::{EjectReason, OutlierCell, OutlierParams, Verdict};
use crate::slow_start::SlowStart;
use crate::sync::{Arc, AtomicU32, AtomicU64, Mutex, Ordering, lock};
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
    /// `send_proxy_protocol`: the PROXY header version written at the start of each new
    /// upstream connection (`None`: off, the default; docs/tls.md).
    pub send_proxy: Option<crate::proxy_proto::Version>,
    /// `protocol`: how weir speaks HTTP to this backend (C-GRPC-1).
    pub protocol: Protocol,
}

/// How weir speaks HTTP to a backend (`backends[].protocol`, C-GRPC-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1 (the default).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over TCP (`h2c`).
    H2c,
    /// HTTP/2 over TLS, ALPN `h2` (`h2`, an `https` URL).
    H2,
}

impl Protocol {
    /// The configuration's spellings, in order.
    pub const NAMES: [&'static str; 3] = ["http1", "h2c", "h2"];

    /// The protocol a configuration value names.
    #[must_use]
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "http1" => Some(Protocol::Http1),
            "h2c" => Some(Protocol::H2c),
            "h2" => Some(Protocol::H2),
            _ => None,
        }
    }

    /// The configuration's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::H2c => "h2c",
            Protocol::H2 => "h2",
        }
    }

    /// Whether requests go to the backend as HTTP/2.
    #[must_use]
    pub fn is_h2(self) -> bool {
        self != Protocol::Http1
    }
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
            send_proxy: None,
            protocol: Protocol::Http1,
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
    /// Ejected by outlier detection (C-OUT-1, C-OUT-2).
    Ejected,
    /// `max_concurrent_requests` reached (C-POOL-6), or the adaptive limit (C-LOAD-4).
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
    send_proxy: Option<crate::proxy_proto::Version>,
    protocol: Protocol,
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
    outlier: OutlierCell,
    /// The adaptive concurrency limit (C-LOAD-4) for lock-free reads on the selection path; 0
    /// until the machine below first ran.
    adaptive_limit: AtomicU32,
    /// The adaptive concurrency machine, made on the first finished attempt while it is on.
    adaptive: Mutex<Option<Box<AdaptiveLimit>>>,
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
            send_proxy: spec.send_proxy,
            protocol: spec.protocol,
            flags: AtomicU32::new(flags),
            load: AtomicU64::new(0),
            passive_failures: AtomicU64::new(0),
            warm_since: AtomicU64::new(now.as_nanos()),
            breaker: Breaker::new(),
            outlier: OutlierCell::default(),
            adaptive_limit: AtomicU32::new(0),
            adaptive: Mutex::new(None),
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

    /// The PROXY header version sent to this backend (`None`: off).
    #[must_use]
    pub fn send_proxy(&self) -> Option<crate::proxy_proto::Version> {
        self.send_proxy
    }

    /// How weir speaks HTTP to this backend (C-GRPC-1).
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.protocol
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

    /// The slots this backend has now: `max_concurrent_requests`, or with adaptive concurrency
    /// on, its adaptive limit (C-LOAD-4, never above `max_concurrent_requests`).
    #[must_use]
    pub fn slot_limit(&self, params: &PoolParams) -> u32 {
        match self.concurrency_limit(params) {
            Some(limit) => limit.min(params.max_concurrent_requests),
            None => params.max_concurrent_requests,
        }
    }

    /// The adaptive concurrency limit (C-LOAD-4), `None` while adaptive concurrency is off. A
    /// backend no attempt has finished on yet is at `min_limit`.
    #[must_use]
    pub fn concurrency_limit(&self, params: &PoolParams) -> Option<u32> {
        let p = &params.adaptive;
        if !p.enabled {
            return None;
        }
        match self.adaptive_limit.load(Ordering::Relaxed) {
            0 => Some(p.min_limit),
            n => Some(p.clamp(n)),
        }
    }

    /// Whether the backend's adaptive limit is below `max_concurrent_requests`, so that a
    /// reservation it refused as saturated was refused by the adaptive limit, not the static
    /// one (C-LOAD-4). Asked after the refusal: it does not read the attempts in flight again,
    /// which attempts ending on other workers change in between.
    #[must_use]
    pub fn at_adaptive_limit(&self, params: &PoolParams) -> bool {
        self.slot_limit(params) < params.max_concurrent_requests
    }

    /// Feed one finished attempt to the adaptive machine (C-LOAD-4) and publish its limit.
    fn sample(&self, params: &AdaptiveParams, sample: Sample, now: Instant) {
        let mut guard = lock(&self.adaptive);
        let machine = guard.get_or_insert_with(|| Box::new(AdaptiveLimit::new(params, now)));
        machine.handle_attempt(params, sample, now);
        self.adaptive_limit
            .store(machine.limit(params), Ordering::Relaxed);
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

    /// The outlier-detection state (C-OUT-1, C-OUT-2).
    #[must_use]
    pub fn outlier(&self) -> &OutlierCell {
        &self.outlier
    }

    /// Whether the backend is ejected at `now`: by outlier detection (never while it is off),
    /// or pushed back by its own `Retry-After` (never while pushback is off, C-RETRY-11).
    #[must_use]
    pub fn is_ejected(&self, params: &PoolParams, now: Instant) -> bool {
        match self.outlier.ejection(now) {
            None => false,
            Some(EjectReason::RetryAfter) => {
                !params.retry_after_max.is_zero() && !mutated!(PUSHBACK_IGNORED)
            }
            Some(_) => params.outlier.enabled,
        }
    }

    /// Enabled, not draining and healthy by active checks: it could take traffic if neither its
    /// circuit nor outlier detection kept it out.
    #[must_use]
    pub fn is_serving(&self) -> bool {
        Backend::eligible(self.flags.load(Ordering::Acquire))
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
        } else if self.is_ejected(params, now) {
            Availability::Ejected
        } else if self.in_flight() >= self.slot_limit(params) && !mutated!(SLOT_LIMIT_IGNORED) {
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
        let max = u64::from(this.slot_limit(params))
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
            sampled: false,
            sent: true,
            reserved_at: now,
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
    /// Whether the attempt was fed to adaptive concurrency (C-LOAD-4).
    sampled: bool,
    sent: bool,
    /// When the slot was reserved: the start of the attempt's latency.
    reserved_at: Instant,
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
        let verdict = match outcome {
            Outcome::Success => Verdict::Good,
            Outcome::Failure => Verdict::Failed,
            Outcome::Neutral => Verdict::Ignored,
        };
        self.record_attempt(outcome, verdict, params, now)
    }

    /// Feed the attempt's end to the backend's adaptive concurrency limit (C-LOAD-4): its
    /// latency since the slot was reserved and how it ended. Only the first call counts; a
    /// no-op while adaptive concurrency is off. Health probes hold no slot, so they never feed it.
    pub fn record_load(&mut self, signal: Signal, params: &PoolParams, now: Instant) {
        if self.sampled || !params.adaptive.enabled {
            return;
        }
        self.sampled = true;
        let sample = Sample {
            started: self.reserved_at,
            signal,
            in_flight: self.backend.in_flight(),
        };
        self.backend.sample(&params.adaptive, sample, now);
    }

    /// A late outlier failure of this slot's attempt, recorded good at its head: its gRPC
    /// status, seen when the body ended, is a failure (C-OUT-1). Outlier detection only: the
    /// breaker and passive failures keep the head's judgment.
    pub fn record_late_failure(&self, params: &PoolParams) {
        if self.recorded && params.outlier.enabled {
            self.backend.outlier.record_late_failure();
        }
    }

    /// [`Slot::record`] with the attempt's verdict for outlier detection given apart, since the
    /// two judge differently (a `500` is an answer to the breaker, a failure to outlier
    /// detection, C-OUT-1). Only the first call of either counts.
    pub fn record_attempt(
        &mut self,
        outcome: Outcome,
        verdict: Verdict,
        params: &PoolParams,
        now: Instant,
    ) -> Option<Transition> {
        if self.recorded {
            return None;
        }
        self.recorded = true;
        if params.outlier.enabled {
            self.backend.outlier.record(verdict);
        }
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
    /// Outlier detection (C-OUT-1, C-OUT-2).
    pub outlier: OutlierParams,
    /// The longest a backend's `503` with `Retry-After` keeps it out of selection
    /// (`health_check.retry_after_max` [30s]); zero turns pushback off (C-RETRY-11).
    pub retry_after_max: Duration,
    /// Adaptive concurrency (C-LOAD-4).
    pub adaptive: AdaptiveParams,
}

impl Default for PoolParams {
    fn default() -> PoolParams {
        PoolParams {
            max_concurrent_requests: 512,
            breaker: BreakerParams::default(),
            slow_start: SlowStart::default(),
            outlier: OutlierParams::default(),
            retry_after_max: DEFAULT_RETRY_AFTER_MAX,
            adaptive: AdaptiveParams::default(),
        }
    }
}

/// `health_check.retry_after_max`'s default.
pub const DEFAULT_RETRY_AFTER_MAX: Duration = Duration::from_secs(30);

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
