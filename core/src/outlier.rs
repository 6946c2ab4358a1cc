//! Outlier detection (C-OUT-1, C-OUT-2): backends whose answers are much worse than their pool's
//! are taken out of selection for a while, judged once per `interval` on the engine's clock.
//!
//! This is Envoy's outlier detection (`failure_percentage_*`, `success_rate_*`,
//! `base_ejection_time`, `max_ejection_time`, `max_ejection_percent`), with weir's defaults
//! argued in docs/health.md. It complements the breaker (C-HEALTH-3), which reacts to a few
//! consecutive failures within a request or two: outlier detection looks at a whole interval,
//! so it also catches a backend that answers `500` to most requests (the breaker counts a `500`
//! as an answer) or that is much worse than its peers without failing in a row.
//!
//! The work is split so that the per-request path stays cheap:
//! - each attempt adds one to its backend's interval counters ([`OutlierCell::record`]: one
//!   `fetch_add` on a word that packs attempts and failures);
//! - each request start reads the pool's next boundary ([`OutlierClock::due`]: one load); the
//!   one request that finds it passed and wins the compare-and-swap judges the interval for the
//!   whole pool ([`judge`], a pure function over the counters it swapped out) and applies the
//!   verdicts;
//! - selection reads one word per backend ([`OutlierCell::is_ejected`]).
//!
//! No wall time: the boundary and the ejections' ends are instants of the core clock that the
//! engine passes in, so the simulator replays them. An interval with no request is judged when
//! the next request comes; the intervals in between had no traffic and count as intervals
//! without ejection.

use core::time::Duration;

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};
use crate::time::Instant;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;

/// Errors in outlier-detection parameters (each names its key in the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutlierError {
    /// interval must be within 100ms..=1h
    Interval,
    /// base_ejection_time must be above 0s and at most max_ejection_time
    BaseEjectionTime,
    /// max_ejection_time must be at most 1d
    MaxEjectionTime,
    /// a percentage must be within 0..=100
    Percent(&'static str, u32),
    /// a count must be at least 1
    Zero(&'static str),
    /// success_rate_stdev_factor must be a number within 0..=10
    StdevFactor,
}

impl core::fmt::Display for OutlierError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OutlierError::Interval => write!(f, "interval must be within 100ms..=1h"),
            OutlierError::BaseEjectionTime => {
                write!(
                    f,
                    "base_ejection_time must be above 0s and at most max_ejection_time"
                )
            }
            OutlierError::MaxEjectionTime => write!(f, "max_ejection_time must be at most 1d"),
            OutlierError::Percent(key, n) => write!(f, "{key} must be within 0..=100, got {n}"),
            OutlierError::Zero(key) => write!(f, "{key} must be at least 1"),
            OutlierError::StdevFactor => {
                write!(
                    f,
                    "success_rate_stdev_factor must be a number within 0..=10"
                )
            }
        }
    }
}

impl std::error::Error for OutlierError {}

impl OutlierError {
    /// The key (under `health_check.outlier`) the error is about.
    #[must_use]
    pub const fn key(&self) -> &'static str {
        match self {
            OutlierError::Interval => "interval",
            OutlierError::BaseEjectionTime => "base_ejection_time",
            OutlierError::MaxEjectionTime => "max_ejection_time",
            OutlierError::Percent(key, _) | OutlierError::Zero(key) => key,
            OutlierError::StdevFactor => "success_rate_stdev_factor",
        }
    }
}

/// Outlier-detection parameters of a pool; defaults are the shipped configuration's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlierParams {
    /// `enabled` [true]: off, nothing is judged and no backend reads as ejected.
    pub enabled: bool,
    /// `interval` [10s].
    pub interval: Duration,
    /// `base_ejection_time` [30s].
    pub base_ejection_time: Duration,
    /// `max_ejection_time` [5m].
    pub max_ejection_time: Duration,
    /// `max_ejection_percent` [50].
    pub max_ejection_percent: u32,
    /// `failure_percentage_threshold` [85].
    pub failure_percentage_threshold: u32,
    /// `failure_percentage_minimum_hosts` [2].
    pub failure_percentage_minimum_hosts: u32,
    /// `failure_percentage_request_volume` [50].
    pub failure_percentage_request_volume: u32,
    /// `success_rate_minimum_hosts` [5].
    pub success_rate_minimum_hosts: u32,
    /// `success_rate_request_volume` [100].
    pub success_rate_request_volume: u32,
    /// `success_rate_stdev_factor` [1.9], in thousandths (Envoy's unit), so the params stay `Eq`.
    pub success_rate_stdev_factor_milli: u32,
}

impl Default for OutlierParams {
    fn default() -> OutlierParams {
        OutlierParams {
            enabled: true,
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: Duration::from_secs(300),
            max_ejection_percent: 50,
            failure_percentage_threshold: 85,
            failure_percentage_minimum_hosts: 2,
            failure_percentage_request_volume: 50,
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            success_rate_stdev_factor_milli: 1900,
        }
    }
}

impl OutlierParams {
    /// Check every field; the first error found is returned.
    pub fn checked(self) -> Result<OutlierParams, OutlierError> {
        match self.errors().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(self),
        }
    }

    /// Every rule these parameters break, in the order of the keys (a configuration lists them
    /// all, C-CONF-1).
    #[must_use]
    pub fn errors(&self) -> Vec<OutlierError> {
        let mut errors = Vec::new();
        if self.interval < Duration::from_millis(100) || self.interval > Duration::from_secs(3600) {
            errors.push(OutlierError::Interval);
        }
        if self.max_ejection_time > Duration::from_secs(86_400) {
            errors.push(OutlierError::MaxEjectionTime);
        }
        if self.base_ejection_time.is_zero() || self.base_ejection_time > self.max_ejection_time {
            errors.push(OutlierError::BaseEjectionTime);
        }
        for (key, n) in [
            ("max_ejection_percent", self.max_ejection_percent),
            (
                "failure_percentage_threshold",
                self.failure_percentage_threshold,
            ),
        ] {
            if n > 100 {
                errors.push(OutlierError::Percent(key, n));
            }
        }
        for (key, n) in [
            (
                "failure_percentage_minimum_hosts",
                self.failure_percentage_minimum_hosts,
            ),
            (
                "failure_percentage_request_volume",
                self.failure_percentage_request_volume,
            ),
            (
                "success_rate_minimum_hosts",
                self.success_rate_minimum_hosts,
            ),
            (
                "success_rate_request_volume",
                self.success_rate_request_volume,
            ),
        ] {
            if n == 0 {
                errors.push(OutlierError::Zero(key));
            }
        }
        if self.success_rate_stdev_factor_milli > 10_000 {
            errors.push(OutlierError::StdevFactor);
        }
        errors
    }

    /// The `success_rate_stdev_factor` written as a number (`1.9`), in thousandths; `None` when it
    /// is not a finite number within 0..=10.
    #[must_use]
    pub fn stdev_factor_milli(factor: f64) -> Option<u32> {
        (factor.is_finite() && (0.0..=10.0).contains(&factor))
            .then(|| (factor * 1000.0).round() as u32)
    }

    /// The length of an ejection that is the `n`-th in a row (1-based):
    /// `base_ejection_time × n`, capped at `max_ejection_time` (C-OUT-2).
    #[must_use]
    pub fn ejection_time(&self, n: u32) -> Duration {
        self.base_ejection_time
            .checked_mul(n.max(1))
            .map_or(self.max_ejection_time, |d| d.min(self.max_ejection_time))
    }

    /// How many of `hosts` backends may be ejected at once: `max_ejection_percent` of them,
    /// rounded down, but at least one in a pool of two or more (unless the percentage is 0).
    #[must_use]
    pub fn max_ejected(&self, hosts: usize) -> usize {
        if self.max_ejection_percent == 0 || hosts < 2 {
            return 0;
        }
        (hosts * self.max_ejection_percent as usize / 100).max(1)
    }
}

/// Why a backend was ejected (the `reason` label of `load_balancer_outlier_ejections_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EjectReason {
    /// Its failed share of the interval's attempts reached `failure_percentage_threshold`.
    FailurePercentage,
    /// Its success rate fell below the pool's mean minus `success_rate_stdev_factor` deviations.
    SuccessRate,
    /// It answered `503` with `Retry-After` (C-RETRY-11): out for as long as it asked, capped at
    /// `health_check.retry_after_max`.
    RetryAfter,
}

impl EjectReason {
    /// Every reason, in label order.
    pub const ALL: [EjectReason; 3] = [
        EjectReason::FailurePercentage,
        EjectReason::SuccessRate,
        EjectReason::RetryAfter,
    ];

    /// The metric label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            EjectReason::FailurePercentage => "failure_percentage",
            EjectReason::SuccessRate => "success_rate",
            EjectReason::RetryAfter => "retry_after",
        }
    }

    const fn code(self) -> u64 {
        match self {
            EjectReason::FailurePercentage => 1,
            EjectReason::SuccessRate => 2,
            EjectReason::RetryAfter => 3,
        }
    }

    const fn from_code(code: u64) -> Option<EjectReason> {
        match code {
            1 => Some(EjectReason::FailurePercentage),
            2 => Some(EjectReason::SuccessRate),
            3 => Some(EjectReason::RetryAfter),
            _ => None,
        }
    }
}

/// What an attempt says to outlier detection (C-OUT-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// An answer that is not a failure.
    Good,
    /// Any `5xx` (500 included), a transport error, a per-try timeout, a gRPC status
    /// `UNAVAILABLE`, `INTERNAL`, `UNKNOWN` or `DATA_LOSS` ([`Verdict::of_grpc_status`]).
    Failed,
    /// Says nothing about the backend (a client that left); not counted.
    Ignored,
}

impl Verdict {
    /// The verdict of a response head with `status`.
    #[must_use]
    pub const fn of_status(status: u16) -> Verdict {
        if status >= 500 {
            Verdict::Failed
        } else {
            Verdict::Good
        }
    }

    /// The verdict of a gRPC call's `grpc-status` `code` (C-OUT-1): `UNKNOWN` (2), `INTERNAL`
    /// (13), `UNAVAILABLE` (14) and `DATA_LOSS` (15) say the server broke, as gRPC's own
    /// outlier detection and Envoy's gRPC classification read them; every other code is an
    /// answer (`NOT_FOUND`, `INVALID_ARGUMENT`, `DEADLINE_EXCEEDED` the client chose, ...).
    /// Outlier detection only: retries and the breaker judge a trailers-only `UNAVAILABLE`
    /// alone (C-GRPC-3).
    #[must_use]
    pub const fn of_grpc_status(code: u8) -> Verdict {
        match code {
            2 | 13 | 14 | 15 => Verdict::Failed,
            _ => Verdict::Good,
        }
    }
}

/// One failure, added to an attempt already counted ([`OutlierCell::record_late_failure`]).
const FAILURE: u64 = 1;
/// One failure and one attempt, added at once.
const FAILED_ATTEMPT: u64 = (1 << 32) | 1;
/// One attempt.
const ATTEMPT: u64 = 1 << 32;

const REASON_MASK: u64 = 0b11;
const LEVEL_SHIFT: u32 = 2;
const LEVEL_MASK: u64 = 0xff;
const UNTIL_SHIFT: u32 = 10;

/// The outlier state of one backend, shared by every request (lives in its `Backend`, so it
/// survives a reload with the backend):
/// - `counts`: this interval's attempts (high 32 bits) and failures (low 32 bits);
/// - `word`: the ejection: its reason (bits 0–1, 0 = none), the number of consecutive ejections
///   (bits 2–9, the multiplier of C-OUT-2) and its end in ms of the core clock (bits 10–63).
#[derive(Debug)]
pub struct OutlierCell {
    counts: AtomicU64,
    word: AtomicU64,
}

impl Default for OutlierCell {
    fn default() -> OutlierCell {
        OutlierCell {
            counts: AtomicU64::new(0),
            word: AtomicU64::new(0),
        }
    }
}

/// One backend's interval, as the judge sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostStat {
    /// Attempts counted this interval.
    pub attempts: u32,
    /// Failed ones among them.
    pub failures: u32,
    /// Ejected now (its ejection has not ended).
    pub ejected: bool,
    /// Could take traffic if it were not ejected: enabled, not draining, healthy by active
    /// checks. Ejecting the last such backend is never allowed.
    pub serving: bool,
}

impl OutlierCell {
    /// Count one attempt's verdict: a single `fetch_add`.
    pub fn record(&self, verdict: Verdict) {
        let add = match verdict {
            Verdict::Good => ATTEMPT,
            Verdict::Failed => FAILED_ATTEMPT,
            Verdict::Ignored => return,
        };
        // Wrapping is harmless: an interval never sees 2^32 attempts on one backend.
        self.counts.fetch_add(add, Ordering::Relaxed);
    }

    /// Count one more failure for an attempt already counted as good: a gRPC call whose status
    /// came after its head (in trailers, or a trailers-only head the engine judged by its
    /// HTTP status) and is a failure ([`Verdict::of_grpc_status`]). A single `fetch_add`;
    /// should the interval have ended in between, the failure lands in the next one, and the
    /// judge never counts more failures than attempts ([`OutlierCell::stat`]).
    pub fn record_late_failure(&self) {
        self.counts.fetch_add(FAILURE, Ordering::Relaxed);
    }

    /// Whether the backend is ejected at `now`: one load.
    #[must_use]
    pub fn is_ejected(&self, now: Instant) -> bool {
        let w = self.word.load(Ordering::Acquire);
        w & REASON_MASK != 0 && floor_ms(now) < w >> UNTIL_SHIFT
    }

    /// The reason of the ejection in force at `now`, if any.
    #[must_use]
    pub fn ejection(&self, now: Instant) -> Option<EjectReason> {
        let w = self.word.load(Ordering::Acquire);
        if floor_ms(now) < w >> UNTIL_SHIFT {
            EjectReason::from_code(w & REASON_MASK)
        } else {
            None
        }
    }

    /// Consecutive ejections (the multiplier of the next ejection's length, minus one).
    #[must_use]
    pub fn consecutive_ejections(&self) -> u32 {
        ((self.word.load(Ordering::Acquire) >> LEVEL_SHIFT) & LEVEL_MASK) as u32
    }

    /// This interval's counters so far, without taking them.
    #[must_use]
    pub fn peek(&self) -> (u32, u32) {
        split(self.counts.load(Ordering::Relaxed))
    }

    /// Take this interval's counters (attempts, failures), starting the next interval at zero.
    fn take(&self) -> (u32, u32) {
        split(self.counts.swap(0, Ordering::Relaxed))
    }

    /// End an ejection whose time is over at `now`; returns whether one ended. The multiplier
    /// stays until good intervals lower it.
    fn end_if_over(&self, now: Instant) -> bool {
        let w = self.word.load(Ordering::Acquire);
        if w & REASON_MASK == 0 || floor_ms(now) < w >> UNTIL_SHIFT {
            return false;
        }
        let next = w & (LEVEL_MASK << LEVEL_SHIFT);
        self.word
            .compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Lower the multiplier by `by` (intervals without ejection) while not ejected.
    fn decay(&self, by: u64) {
        let w = self.word.load(Ordering::Acquire);
        if w & REASON_MASK != 0 || by == 0 {
            return;
        }
        let level = ((w >> LEVEL_SHIFT) & LEVEL_MASK).saturating_sub(by);
        let _ = self.word.compare_exchange(
            w,
            level << LEVEL_SHIFT,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Eject at `now` for `reason`: the `n`-th consecutive ejection lasts
    /// [`OutlierParams::ejection_time`]`(n)`. Returns how long.
    fn eject(&self, reason: EjectReason, params: &OutlierParams, now: Instant) -> Duration {
        let w = self.word.load(Ordering::Acquire);
        let level = ((w >> LEVEL_SHIFT) & LEVEL_MASK) + 1;
        let time = params.ejection_time(level as u32);
        let until = ceil_ms(now + time);
        let next = reason.code() | (level.min(LEVEL_MASK) << LEVEL_SHIFT) | (until << UNTIL_SHIFT);
        self.word.store(next, Ordering::Release);
        time
    }

    /// Take the backend out until `now + time` for its own `Retry-After` (C-RETRY-11). Unlike
    /// an ejection by judgment this is the backend's request, not a verdict on it: the
    /// multiplier of consecutive ejections is left as it is.
    fn push_back(&self, time: Duration, now: Instant) {
        let w = self.word.load(Ordering::Acquire);
        let until = ceil_ms(now.saturating_add(time)).min(u64::MAX >> UNTIL_SHIFT);
        let next = EjectReason::RetryAfter.code()
            | (w & (LEVEL_MASK << LEVEL_SHIFT))
            | (until << UNTIL_SHIFT);
        self.word.store(next, Ordering::Release);
    }

    fn stat(&self, now: Instant, serving: bool) -> HostStat {
        let (attempts, failures) = self.take();
        HostStat {
            attempts,
            // A late failure whose attempt was counted in the interval before.
            failures: failures.min(attempts),
            ejected: self.is_ejected(now),
            serving,
        }
    }
}

fn split(w: u64) -> (u32, u32) {
    ((w >> 32) as u32, w as u32)
}

fn ceil_ms(t: Instant) -> u64 {
    t.as_nanos().div_ceil(1_000_000)
}

fn floor_ms(t: Instant) -> u64 {
    t.as_nanos() / 1_000_000
}

/// The pool's next interval boundary, shared by its requests (and carried across reloads).
#[derive(Debug)]
pub struct OutlierClock {
    /// The next boundary in ns of the core clock; 0 = not started.
    next: AtomicU64,
    /// Held while ejecting: an interval's judgment and a backend's pushback (C-RETRY-11) may
    /// happen at once on two workers, and each must count the other's ejection against the cap.
    /// Both are rare (once per interval; a `503` with `Retry-After`), never on a pick.
    ejecting: Mutex<()>,
}

impl Default for OutlierClock {
    fn default() -> OutlierClock {
        OutlierClock {
            next: AtomicU64::new(0),
            ejecting: Mutex::new(()),
        }
    }
}

impl OutlierClock {
    /// Hold the pool's ejections still while deciding one (see the field's doc).
    pub fn ejecting(&self) -> MutexGuard<'_, ()> {
        crate::sync::lock(&self.ejecting)
    }

    /// Whether an interval ended at `now` and this caller is the one to judge it: then the
    /// number of whole intervals that passed (≥ 1). One load unless a boundary passed.
    pub fn due(&self, params: &OutlierParams, now: Instant) -> Option<u64> {
        let next = self.next.load(Ordering::Acquire);
        let now_ns = now.as_nanos();
        if next != 0 && now_ns < next {
            return None;
        }
        let interval = crate::time::duration_nanos(params.interval).max(1);
        let (intervals, following) = if next == 0 {
            (0, now_ns.saturating_add(interval))
        } else {
            let n = (now_ns - next) / interval + 1;
            (n, next.saturating_add(n.saturating_mul(interval)))
        };
        self.next
            .compare_exchange(next, following.max(1), Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        (intervals > 0).then_some(intervals)
    }
}

/// One change of a backend's ejection, for the adapter's WARN event and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutlierChange {
    /// Ejected for this long.
    Ejected {
        /// Why.
        reason: EjectReason,
        /// For how long.
        duration: Duration,
    },
    /// Its ejection ended: back in selection.
    Returned,
}

/// A change of one backend (by its index in the pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlierEvent {
    /// The backend's index in the pool snapshot.
    pub backend: usize,
    /// What happened.
    pub change: OutlierChange,
}

/// Judge one interval of a pool (C-OUT-1), within the cap of C-OUT-2: which backends to eject
/// and why, worst first. Pure: the same stats give the same answer.
///
/// Candidates are the backends not ejected now whose failure percentage reaches the threshold
/// (with enough hosts of enough volume), then those below the success-rate bound; among them,
/// the ones with the highest failed share go first. A candidate is ejected while the number
/// ejected stays within [`OutlierParams::max_ejected`] and at least one other backend keeps
/// serving.
#[must_use]
pub fn judge(stats: &[HostStat], params: &OutlierParams) -> Vec<(usize, EjectReason)> {
    let mut candidates: Vec<(usize, EjectReason)> = Vec::new();
    let fp_volume = params.failure_percentage_request_volume;
    let fp_hosts = stats.iter().filter(|s| s.attempts >= fp_volume).count();
    if fp_hosts >= params.failure_percentage_minimum_hosts as usize {
        for (i, s) in stats.iter().enumerate() {
            if !s.ejected
                && s.attempts >= fp_volume
                && u64::from(s.failures) * 100
                    >= u64::from(params.failure_percentage_threshold) * u64::from(s.attempts)
            {
                candidates.push((i, EjectReason::FailurePercentage));
            }
        }
    }
    if let Some(bound) = success_rate_bound(stats, params) {
        for (i, s) in stats.iter().enumerate() {
            if !s.ejected
                && s.attempts >= params.success_rate_request_volume
                && success_rate(s) < bound
                && !candidates.iter().any(|(j, _)| *j == i)
            {
                candidates.push((i, EjectReason::SuccessRate));
            }
        }
    }
    // Worst first; the index breaks ties, so the order is total and deterministic.
    candidates.sort_by(|a, b| {
        let (sa, sb) = (&stats[a.0], &stats[b.0]);
        let share_b = u64::from(sb.failures) * u64::from(sa.attempts.max(1));
        let share_a = u64::from(sa.failures) * u64::from(sb.attempts.max(1));
        share_b.cmp(&share_a).then(a.0.cmp(&b.0))
    });
    let cap = if mutated!(OUTLIER_CAP_IGNORED) {
        stats.len()
    } else {
        params.max_ejected(stats.len())
    };
    let mut ejected = stats.iter().filter(|s| s.ejected).count();
    let mut serving = stats.iter().filter(|s| s.serving && !s.ejected).count();
    let mut out = Vec::new();
    for (i, reason) in candidates {
        if ejected >= cap {
            break;
        }
        let s = &stats[i];
        if s.serving && serving <= 1 && !mutated!(OUTLIER_CAP_IGNORED) {
            continue;
        }
        ejected += 1;
        if s.serving {
            serving -= 1;
        }
        out.push((i, reason));
    }
    out
}

/// Whether backend `index` may be pushed back (C-RETRY-11) within C-OUT-2's cap: it is not
/// ejected already, fewer than [`OutlierParams::max_ejected`] backends are, and another backend
/// keeps serving if it serves. `stats` need only `ejected` and `serving`.
#[must_use]
pub fn admits_push_back(stats: &[HostStat], index: usize, params: &OutlierParams) -> bool {
    let Some(s) = stats.get(index) else {
        return false;
    };
    if s.ejected {
        return false;
    }
    if mutated!(OUTLIER_CAP_IGNORED) {
        return true;
    }
    let ejected = stats.iter().filter(|s| s.ejected).count();
    let serving = stats.iter().filter(|s| s.serving && !s.ejected).count();
    ejected < params.max_ejected(stats.len()) && !(s.serving && serving <= 1)
}

/// Eject `cell` for `time` on its own `Retry-After` (C-RETRY-11), once
/// [`admits_push_back`] said it may, under [`OutlierClock::ejecting`].
pub fn push_back(cell: &OutlierCell, backend: usize, time: Duration, now: Instant) -> OutlierEvent {
    cell.push_back(time, now);
    OutlierEvent {
        backend,
        change: OutlierChange::Ejected {
            reason: EjectReason::RetryAfter,
            duration: time,
        },
    }
}

/// End the ejections that are over at `now`, without judging (outlier detection off, pushback
/// on). Returns the returns, in backend order.
pub fn end_ejections<'a>(
    cells: impl Iterator<Item = &'a OutlierCell>,
    now: Instant,
) -> Vec<OutlierEvent> {
    cells
        .enumerate()
        .filter(|(_, cell)| cell.end_if_over(now))
        .map(|(backend, _)| OutlierEvent {
            backend,
            change: OutlierChange::Returned,
        })
        .collect()
}

fn success_rate(s: &HostStat) -> f64 {
    f64::from(s.attempts - s.failures.min(s.attempts)) / f64::from(s.attempts.max(1))
}

/// `mean − factor × stdev` of the success rates of the backends with enough volume, when there
/// are enough of them (population deviation, as Envoy computes it).
fn success_rate_bound(stats: &[HostStat], params: &OutlierParams) -> Option<f64> {
    let rates: Vec<f64> = stats
        .iter()
        .filter(|s| s.attempts >= params.success_rate_request_volume)
        .map(success_rate)
        .collect();
    if rates.is_empty() || rates.len() < params.success_rate_minimum_hosts as usize {
        return None;
    }
    let n = rates.len() as f64;
    let mean = rates.iter().sum::<f64>() / n;
    let var = rates.iter().map(|r| (r - mean) * (r - mean)).sum::<f64>() / n;
    let factor = f64::from(params.success_rate_stdev_factor_milli) / 1000.0;
    Some(mean - factor * var.sqrt())
}

/// Run one interval boundary over a pool's backends at `now`: end the ejections that are over,
/// take the counters, judge, eject, and lower the multipliers of the backends that went
/// `intervals` intervals without ejection. `cells` yields each backend's cell and whether it is
/// serving (see [`HostStat::serving`]). Returns the changes, in backend order.
pub fn run_interval<'a>(
    cells: impl Iterator<Item = (&'a OutlierCell, bool)>,
    params: &OutlierParams,
    intervals: u64,
    now: Instant,
) -> Vec<OutlierEvent> {
    let mut events = Vec::new();
    let cells: Vec<(&OutlierCell, bool)> = cells.collect();
    let mut stats = Vec::with_capacity(cells.len());
    // A backend out during the interval that just ended does not have its multiplier lowered.
    let mut was_out = Vec::with_capacity(cells.len());
    for (i, (cell, serving)) in cells.iter().enumerate() {
        was_out.push(cell.word.load(Ordering::Acquire) & REASON_MASK != 0);
        if cell.end_if_over(now) {
            events.push(OutlierEvent {
                backend: i,
                change: OutlierChange::Returned,
            });
        }
        stats.push(cell.stat(now, *serving));
    }
    let verdicts = judge(&stats, params);
    for (i, (cell, _)) in cells.iter().enumerate() {
        match verdicts.iter().find(|(j, _)| *j == i) {
            Some(&(_, reason)) => {
                let duration = cell.eject(reason, params, now);
                events.push(OutlierEvent {
                    backend: i,
                    change: OutlierChange::Ejected { reason, duration },
                });
            }
            None if was_out[i] => cell.decay(intervals - 1),
            None => cell.decay(intervals),
        }
    }
    events
}
