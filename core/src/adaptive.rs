//! Adaptive concurrency (C-LOAD-4): one machine per backend that moves the backend's slot limit
//! between `min_limit` and `max_limit` from the latencies and failures of its attempts.
//!
//! The control law is AIMD with a latency-ratio guard:
//! - at the end of every `window`, the limit grows by one when no back-off happened in the
//!   window, the attempts in flight reached at least half the limit (an idle backend earns no
//!   headroom it never used) and the window's median latency is within `rtt_tolerance` × the
//!   backend's long-run latency;
//! - a failure (transport error, timeout, `503`) multiplies the limit by `backoff_ratio`, at most
//!   once per *round*: failures of attempts that started before the last back-off were admitted
//!   under the old limit and say nothing about the new one (TCP reacts once per round trip for
//!   the same reason);
//! - a round is also a latency sample: when `max(limit, 16)` attempts that started after the
//!   round began have answered and their median is beyond tolerance, the limit *drains*: it
//!   goes to `backoff_ratio` × what the backend holds without a queue at the throughput just
//!   measured (Little's law: `limit × long-run latency / median`, the knee), in one round, and
//!   keeps doing so round after round while the round's median is not back within half the
//!   tolerance (at least an eighth, one histogram bucket) of the long-run latency. So the
//!   queue the limit built is emptied at once rather than trimmed by ten percent a round, the
//!   drain ends one back-off below the knee whatever the noise of single rounds, and a backend
//!   whose own latency stepped up is cut by the step's size.
//!
//! The long-run latency is what makes or breaks such a controller. A minimum of samples (Envoy's
//! minRTT) is pinned by one lucky sample and, measured by dropping to the minimum limit, sheds
//! on purpose; an average that follows every window (Gradient2) learns the queueing its own
//! growth causes as normal and lets the limit grow without bound. Here it is an estimate of
//! *window medians* (many samples, never one) that:
//! - falls to a window's median that is lower at once: a faster backend is believed in one
//!   window (a window median, unlike one sample, is no lucky outlier), and a long-run latency
//!   learned while the backend was slow never outlives its slowness (one that fell only a
//!   quarter of the gap per window stayed above the backend's latency once the limit passed
//!   the knee, and the limit then sat far above it);
//! - rises by a quarter of the gap per window only while the limit is at or below the limit
//!   the last drain settled on (below the knee, so without a queue), so queueing above the
//!   known-good limit is never learned;
//! - is reset to the round's median when a drain reaches `min_limit` with the latency still
//!   above it: at the minimum the latency is the backend's own, not queueing weir caused, so a
//!   backend that became slower for good is re-learned at once and the limit grows back
//!   instead of staying at the minimum forever.
//!
//! Methods: getters (`&self`), facts in ([`AdaptiveLimit::handle_attempt`],
//! [`AdaptiveLimit::handle_timeout`]) and the next window boundary out
//! ([`AdaptiveLimit::poll_timeout`]). Time never goes backwards: an earlier `now` is clamped.

use core::time::Duration;

use crate::time::Instant;

/// The parameters of `server.upstream.adaptive_concurrency` (C-LOAD-4), resolved: `max_limit`
/// is filled in from `max_concurrent_requests` when the configuration leaves it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveParams {
    /// `enabled` [false].
    pub enabled: bool,
    /// `min_limit` [3].
    pub min_limit: u32,
    /// `max_limit` [= `server.upstream.max_concurrent_requests`].
    pub max_limit: u32,
    /// `window` [1s].
    pub window: Duration,
    /// `rtt_tolerance` [1.5], in thousandths.
    pub rtt_tolerance_milli: u32,
    /// `backoff_ratio` [0.9], in thousandths.
    pub backoff_milli: u32,
}

impl Default for AdaptiveParams {
    fn default() -> AdaptiveParams {
        AdaptiveParams {
            enabled: false,
            min_limit: 3,
            max_limit: 512,
            window: Duration::from_secs(1),
            rtt_tolerance_milli: 1500,
            backoff_milli: 900,
        }
    }
}

/// Why adaptive-concurrency parameters were refused; each names its configuration key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdaptiveError {
    /// `min_limit` is 0
    MinLimit,
    /// `min_limit` is above `max_concurrent_requests`
    MinAboveSlots {
        /// `min_limit`
        min: u32,
        /// `server.upstream.max_concurrent_requests`
        slots: u32,
    },
    /// `max_limit` is below `min_limit` or above `max_concurrent_requests`
    MaxLimit {
        /// the value given
        max: u32,
        /// `min_limit`
        min: u32,
        /// `server.upstream.max_concurrent_requests`
        slots: u32,
    },
    /// `window` is below 1ms or above 1h
    Window,
    /// `rtt_tolerance` is not within 1.01..=100
    Tolerance(f64),
    /// `backoff_ratio` is not within 0.1..=0.99
    Backoff(f64),
}

impl AdaptiveError {
    /// The key under `server.upstream.adaptive_concurrency` this error is about.
    #[must_use]
    pub const fn key(&self) -> &'static str {
        match self {
            AdaptiveError::MinLimit | AdaptiveError::MinAboveSlots { .. } => "min_limit",
            AdaptiveError::MaxLimit { .. } => "max_limit",
            AdaptiveError::Window => "window",
            AdaptiveError::Tolerance(_) => "rtt_tolerance",
            AdaptiveError::Backoff(_) => "backoff_ratio",
        }
    }
}

impl core::fmt::Display for AdaptiveError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AdaptiveError::MinLimit => f.write_str("must be at least 1"),
            AdaptiveError::MinAboveSlots { min, slots } => write!(
                f,
                "must not exceed server.upstream.max_concurrent_requests ({slots}), got {min}"
            ),
            AdaptiveError::MaxLimit { max, min, slots } => write!(
                f,
                "must be within min_limit ({min}) and server.upstream.max_concurrent_requests \
                 ({slots}), got {max}"
            ),
            AdaptiveError::Window => f.write_str("must be within 1ms..=1h"),
            AdaptiveError::Tolerance(t) => write!(f, "must be within 1.01..=100, got {t}"),
            AdaptiveError::Backoff(b) => write!(f, "must be within 0.1..=0.99, got {b}"),
        }
    }
}

impl std::error::Error for AdaptiveError {}

impl AdaptiveParams {
    /// Checked parameters; `max_limit` `None` means `slots` (`max_concurrent_requests`).
    pub fn new(
        enabled: bool,
        min_limit: u32,
        max_limit: Option<u32>,
        slots: u32,
        window: Duration,
        rtt_tolerance: f64,
        backoff_ratio: f64,
    ) -> Result<AdaptiveParams, AdaptiveError> {
        if min_limit == 0 {
            return Err(AdaptiveError::MinLimit);
        }
        let max = max_limit.unwrap_or(slots);
        let mut min_limit = min_limit;
        if max > slots || (max < min_limit && max_limit.is_some()) {
            return Err(AdaptiveError::MaxLimit {
                max,
                min: min_limit,
                slots,
            });
        }
        if max < min_limit {
            // Only the defaults can get here (a handful of slots, no max_limit): off, they
            // must not refuse a configuration that does not use them.
            if enabled {
                return Err(AdaptiveError::MinAboveSlots {
                    min: min_limit,
                    slots,
                });
            }
            min_limit = max;
        }
        if window < Duration::from_millis(1) || window > Duration::from_secs(3600) {
            return Err(AdaptiveError::Window);
        }
        if !(1.01..=100.0).contains(&rtt_tolerance) {
            return Err(AdaptiveError::Tolerance(rtt_tolerance));
        }
        if !(0.1..=0.99).contains(&backoff_ratio) {
            return Err(AdaptiveError::Backoff(backoff_ratio));
        }
        // Both are within small ranges checked above: the casts neither truncate nor wrap.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let milli = |x: f64| (x * 1000.0).round() as u32;
        Ok(AdaptiveParams {
            enabled,
            min_limit,
            max_limit: max,
            window,
            rtt_tolerance_milli: milli(rtt_tolerance),
            backoff_milli: milli(backoff_ratio),
        })
    }

    /// `limit` within `[min_limit, max_limit]`.
    #[must_use]
    pub fn clamp(&self, limit: u32) -> u32 {
        limit.clamp(self.min_limit, self.max_limit.max(self.min_limit))
    }

    /// Whether `latency` is beyond tolerance of `baseline` (both in nanoseconds).
    fn beyond(&self, latency: u64, baseline: u64) -> bool {
        u128::from(latency) * 1000 > u128::from(baseline) * u128::from(self.rtt_tolerance_milli)
    }
}

/// How one attempt ended, as adaptive concurrency sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// A response head other than `503`: its latency is a sample.
    Answer,
    /// A transport error, a timeout or a `503`: back off.
    Failure,
    /// Says nothing about the backend (the client went away, or weir's own connection bound
    /// held the attempt back).
    Ignored,
}

impl Signal {
    /// The signal of an attempt outcome.
    #[must_use]
    pub fn of(outcome: crate::retry::AttemptOutcome) -> Signal {
        use crate::retry::AttemptOutcome as O;
        match outcome {
            O::Status(503) => Signal::Failure,
            O::Status(_) => Signal::Answer,
            O::Connect | O::Refused | O::Transport | O::PerTryTimeout => Signal::Failure,
            // Waiting at weir's own connection bound (`max_conns_per_host`) sent nothing: it
            // says nothing about the backend's latency.
            O::ClientGone | O::Saturated => Signal::Ignored,
        }
    }
}

/// One finished attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When its slot was reserved.
    pub started: Instant,
    /// How it ended.
    pub signal: Signal,
    /// Attempts in flight on the backend when it finished, itself included.
    pub in_flight: u32,
}

/// Sub-buckets per power of two: medians within about 3 % of the true value (coarser buckets
/// moved the limit's saw-tooth by a slot between runs of one backend).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Latencies up to 2^41 ns (about 37 minutes); longer ones share the last bucket.
const MAX_EXP: u32 = 40;
const BUCKETS: usize = (MAX_EXP as usize - 1) * SUB;

/// A log-bucketed latency histogram: fixed size, no allocation per sample, a deterministic
/// median.
#[derive(Clone, PartialEq, Eq)]
struct Histogram {
    count: u32,
    buckets: [u32; BUCKETS],
}

impl core::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count)
            .field("median", &self.median())
            .finish()
    }
}

impl Histogram {
    const fn new() -> Histogram {
        Histogram {
            count: 0,
            buckets: [0; BUCKETS],
        }
    }

    fn index(ns: u64) -> usize {
        if ns < SUB as u64 {
            return ns as usize;
        }
        let exp = (63 - ns.leading_zeros()).min(MAX_EXP);
        if exp == MAX_EXP {
            return BUCKETS - 1;
        }
        let sub = (ns >> (exp - SUB_BITS)) as usize & (SUB - 1);
        (exp - SUB_BITS + 1) as usize * SUB + sub
    }

    /// The middle of bucket `i`, in nanoseconds.
    fn value(i: usize) -> u64 {
        if i < SUB {
            return i as u64;
        }
        let exp = (i / SUB) as u32 + SUB_BITS - 1;
        let sub = (i % SUB) as u64;
        let width = 1u64 << (exp - SUB_BITS);
        ((SUB as u64 + sub) << (exp - SUB_BITS)) + width / 2
    }

    fn add(&mut self, ns: u64) {
        let i = Histogram::index(ns);
        self.buckets[i] = self.buckets[i].saturating_add(1);
        self.count = self.count.saturating_add(1);
    }

    fn median(&self) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = self.count.div_ceil(2);
        let mut seen = 0u32;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return Some(Histogram::value(i));
            }
        }
        None
    }

    fn clear(&mut self) {
        if self.count != 0 {
            self.buckets.fill(0);
            self.count = 0;
        }
    }
}

/// Whether a drain's round median is back at the long-run latency: within half the tolerance
/// above it, and at least an eighth (one bucket of the histogram: two medians of the same
/// latency differ by up to that much).
fn settled(params: &AdaptiveParams, median: u64, baseline: u64) -> bool {
    let margin = u128::from(params.rtt_tolerance_milli.saturating_sub(1000) / 2).max(125);
    u128::from(median) * 1000 <= u128::from(baseline) * (1000 + margin)
}

/// The fewest answers a round judges by: a median of fewer moves with every sample's noise.
const ROUND_MIN: u32 = 16;

/// What the last call changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The limit grew by one at a window's end.
    Grew,
    /// The limit backed off.
    BackedOff,
}

/// The adaptive limit of one backend. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdaptiveLimit {
    limit: u32,
    /// The start of the current window.
    window_start: Instant,
    window: Histogram,
    /// Most attempts in flight seen by a finishing attempt this window.
    peak: u32,
    /// Whether the limit backed off this window (then it does not grow at its end).
    backed_off: bool,
    /// Attempts that started before this do not count in the round.
    round_start: Instant,
    round: Histogram,
    /// Backing off round after round until the latency is back at the long-run latency.
    draining: bool,
    /// The limit the last drain settled on: the long-run latency learns upward only at or below it.
    settled: u32,
    /// The long-run latency in nanoseconds, once a window had a sample.
    baseline: Option<u64>,
    now: Instant,
}

impl AdaptiveLimit {
    /// A new backend's machine: it starts at `min_limit` and earns the rest.
    #[must_use]
    pub fn new(params: &AdaptiveParams, now: Instant) -> AdaptiveLimit {
        AdaptiveLimit {
            limit: params.min_limit,
            window_start: now,
            window: Histogram::new(),
            peak: 0,
            backed_off: false,
            round_start: now,
            round: Histogram::new(),
            draining: false,
            settled: params.min_limit,
            baseline: None,
            now,
        }
    }

    /// The current limit, within the parameters' `[min_limit, max_limit]`.
    #[must_use]
    pub fn limit(&self, params: &AdaptiveParams) -> u32 {
        params.clamp(self.limit)
    }

    /// The long-run latency, once known.
    #[must_use]
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline.map(Duration::from_nanos)
    }

    /// Whether the limit is backing off round after round.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// The end of the current window: [`AdaptiveLimit::handle_timeout`] is due then.
    #[must_use]
    pub fn poll_timeout(&self, params: &AdaptiveParams) -> Instant {
        self.window_start.saturating_add(params.window)
    }

    /// Close the windows that ended by `now` (a no-op before the next boundary).
    pub fn handle_timeout(&mut self, params: &AdaptiveParams, now: Instant) -> Option<Change> {
        let now = self.clamp_now(now);
        self.limit = params.clamp(self.limit);
        let window = crate::time::duration_nanos(params.window).max(1);
        let elapsed = now.saturating_since(self.window_start).as_nanos();
        if elapsed < u128::from(window) {
            return None;
        }
        let change = self.close_window(params);
        let windows = u64::try_from(elapsed / u128::from(window)).unwrap_or(u64::MAX);
        self.window_start = Instant::from_nanos(
            self.window_start
                .as_nanos()
                .saturating_add(windows.saturating_mul(window)),
        );
        change
    }

    /// An attempt on this backend finished at `now`.
    pub fn handle_attempt(
        &mut self,
        params: &AdaptiveParams,
        sample: Sample,
        now: Instant,
    ) -> Option<Change> {
        let rolled = self.handle_timeout(params, now);
        let now = self.now;
        self.peak = self.peak.max(sample.in_flight);
        let latency = now.saturating_since(sample.started);
        let latency = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let in_round = sample.started >= self.round_start;
        let change = match sample.signal {
            Signal::Ignored => None,
            Signal::Failure if in_round => {
                self.back_off(params, now);
                Some(Change::BackedOff)
            }
            Signal::Failure => None,
            Signal::Answer => {
                self.window.add(latency);
                if in_round {
                    self.round.add(latency);
                    self.close_round_if_full(params, now)
                } else {
                    None
                }
            }
        };
        change.or(rolled)
    }

    /// The machine is shared by every worker, and each reads its clock a moment apart: a `now`
    /// a little older than the last one seen is normal, not a bug, and is clamped.
    fn clamp_now(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    fn back_off(&mut self, params: &AdaptiveParams, now: Instant) {
        let next = u64::from(self.limit) * u64::from(params.backoff_milli) / 1000;
        self.limit = params.clamp(u32::try_from(next).unwrap_or(u32::MAX));
        self.backed_off = true;
        self.start_round(now);
    }

    fn start_round(&mut self, now: Instant) {
        self.round.clear();
        self.round_start = now;
    }

    /// A round holds as many answers as the limit allows in flight (about one latency's worth),
    /// and at least [`ROUND_MIN`].
    fn close_round_if_full(&mut self, params: &AdaptiveParams, now: Instant) -> Option<Change> {
        if self.round.count < self.limit.max(ROUND_MIN) {
            return None;
        }
        let (Some(median), Some(baseline)) = (self.round.median(), self.baseline) else {
            self.start_round(now);
            return None;
        };
        let congested = if self.draining {
            // The drain ends when the latency is back near the long-run one (`settled`): a
            // strict comparison read a median one bucket up, or a long-run latency that
            // settled a little low, as a queue, and drained far below the knee.
            !settled(params, median, baseline)
        } else {
            params.beyond(median, baseline)
        };
        if !congested {
            if self.draining {
                self.draining = false;
                self.settled = self.limit;
            }
            self.start_round(now);
            return None;
        }
        if self.limit <= params.min_limit {
            // At the minimum the latency is the backend's own: learn it rather than stay here.
            self.baseline = Some(median);
            self.draining = false;
            self.settled = self.limit;
            self.start_round(now);
            return None;
        }
        self.draining = true;
        self.drain(params, median, baseline, now);
        Some(Change::BackedOff)
    }

    /// One round of a drain: the limit goes to `backoff_ratio` × what the backend holds without
    /// a queue at the throughput just measured (Little's law: `limit × long-run / median`), and
    /// at least by `backoff_ratio` (a median at or below the long-run latency, which a drain
    /// round can see when the backend got faster meanwhile, still backs off).
    /// At the end of a climb that is one back-off below the knee in one step, whatever the
    /// noise of single rounds; after a step in the backend's own latency it is a cut by the
    /// step's size.
    fn drain(&mut self, params: &AdaptiveParams, median: u64, baseline: u64, now: Instant) {
        let median = u128::from(median.max(1));
        let knee = (u128::from(self.limit) * u128::from(baseline) + median / 2) / median;
        let knee = u32::try_from(knee).unwrap_or(u32::MAX).min(self.limit);
        self.limit = knee;
        self.back_off(params, now);
    }

    fn close_window(&mut self, params: &AdaptiveParams) -> Option<Change> {
        let median = self.window.median();
        let peak = self.peak;
        let backed_off = self.backed_off;
        self.window.clear();
        self.peak = 0;
        self.backed_off = false;
        let median = median?;
        let Some(baseline) = self.baseline else {
            self.baseline = Some(median);
            return None;
        };
        let grow = !backed_off
            && !self.draining
            && u64::from(peak) * 2 >= u64::from(self.limit)
            && !params.beyond(median, baseline)
            && self.limit < params.max_limit;
        self.baseline = Some(if median < baseline {
            median
        } else if median > baseline && self.limit <= self.settled {
            baseline + (median - baseline).div_ceil(4)
        } else {
            baseline
        });
        if grow {
            self.limit += 1;
            Some(Change::Grew)
        } else {
            None
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
