//! The passive circuit breaker of one backend (C-HEALTH-3): closed → open → half-open.
//!
//! A failed attempt of real traffic (transport error, per-try timeout, a status in
//! `retry.statuses`) increments a consecutive-failure counter that any successful attempt resets.
//! At `failure_threshold` consecutive failures the circuit opens for `cooldown`, doubled on each
//! consecutive re-open up to `max_cooldown` (Envoy's outlier detection ejects for
//! `base_ejection_time × times ejected` and decays the multiplier; weir doubles and resets on the
//! first success, which is easier to reason about and to test). After the cooldown the circuit is
//! half-open: at most `half_open_requests` real requests at a time are let through as trials; a
//! successful trial closes the circuit and resets the escalation, a failed one re-opens it.
//! Active health checks never touch the breaker: only real traffic closes a circuit.
//!
//! The whole state is one `AtomicU64`, so every transition is a single compare-and-swap and a
//! reader never sees a torn state (no lock, one loom model covers it):
//!
//! | bits  | field     | meaning                                                        |
//! |-------|-----------|----------------------------------------------------------------|
//! | 0–1   | state     | 0 closed, 1 open, 2 half-open                                  |
//! | 2–9   | failures  | consecutive failures while closed (saturates at 255)          |
//! | 10–14 | level     | consecutive opens since the last close (the escalation)        |
//! | 15–21 | trials    | half-open trials in flight                                     |
//! | 22–25 | epoch     | bumped on each entry to half-open; a trial permit from an older epoch releases nothing |
//! | 26–63 | until     | when an open circuit may turn half-open, ms since the clock origin (8.7 years) |
//!
//! Methods take `&self` (the state is shared by all request tasks); parameters are passed in, so a
//! reload changes them without touching the state. A stale outcome (an attempt admitted while the
//! circuit was closed that completes after it opened, or a trial that completes after another
//! trial already decided) changes nothing.

use core::time::Duration;

use crate::sync::{AtomicU64, Ordering};
use crate::time::Instant;

/// Errors in breaker parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakerError {
    /// failure_threshold must be within 1..=255
    FailureThreshold(u32),
    /// half_open_requests must be within 1..=127
    HalfOpenRequests(u32),
    /// cooldown must be above zero and at most max_cooldown
    Cooldown,
}

impl core::fmt::Display for BreakerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BreakerError::FailureThreshold(n) => {
                write!(f, "failure_threshold must be within 1..=255, got {n}")
            }
            BreakerError::HalfOpenRequests(n) => {
                write!(f, "half_open_requests must be within 1..=127, got {n}")
            }
            BreakerError::Cooldown => {
                write!(f, "cooldown must be above 0s and at most max_cooldown")
            }
        }
    }
}

impl std::error::Error for BreakerError {}

/// Breaker parameters; defaults are the shipped configuration's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerParams {
    failure_threshold: u8,
    half_open_requests: u8,
    cooldown: Duration,
    max_cooldown: Duration,
}

impl Default for BreakerParams {
    fn default() -> BreakerParams {
        BreakerParams {
            failure_threshold: 2,
            half_open_requests: 1,
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(300),
        }
    }
}

impl BreakerParams {
    /// Validated parameters.
    pub fn new(
        failure_threshold: u32,
        half_open_requests: u32,
        cooldown: Duration,
        max_cooldown: Duration,
    ) -> Result<BreakerParams, BreakerError> {
        let failure_threshold = u8::try_from(failure_threshold)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or(BreakerError::FailureThreshold(failure_threshold))?;
        let half_open_requests = u8::try_from(half_open_requests)
            .ok()
            .filter(|n| (1..=MAX_TRIALS as u8).contains(n))
            .ok_or(BreakerError::HalfOpenRequests(half_open_requests))?;
        if cooldown.is_zero() || cooldown > max_cooldown {
            return Err(BreakerError::Cooldown);
        }
        Ok(BreakerParams {
            failure_threshold,
            half_open_requests,
            cooldown,
            max_cooldown,
        })
    }

    /// The cooldown after the `level`-th consecutive open (0 = first): `cooldown × 2^level`,
    /// capped at `max_cooldown`.
    #[must_use]
    pub fn cooldown_at(&self, level: u32) -> Duration {
        let factor = 1u32.checked_shl(level.min(31)).unwrap_or(u32::MAX);
        self.cooldown
            .checked_mul(factor)
            .map_or(self.max_cooldown, |d| d.min(self.max_cooldown))
    }

    /// Consecutive failures that open the circuit.
    #[must_use]
    pub const fn failure_threshold(&self) -> u8 {
        self.failure_threshold
    }
}

/// The circuit's state as reported to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Traffic flows; failures are counted.
    Closed,
    /// Ejected until the cooldown ends.
    Open,
    /// Cooldown over: a bounded number of trial requests decide.
    HalfOpen,
}

impl CircuitState {
    /// The lower-case name used in the status API and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }
}

/// What an attempt's result means for the backend's passive health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The backend answered with a status that is not a retryable failure (500 included).
    Success,
    /// Transport error, per-try timeout, or a status in `retry.statuses` (C-HEALTH-3, C-RETRY-8).
    Failure,
    /// Says nothing about the backend: the client went away (C-PATH-9).
    Neutral,
}

/// The right to send one request through the breaker, taken by [`Breaker::try_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// The circuit was closed.
    Normal,
    /// A half-open trial of the given epoch.
    Trial {
        /// The half-open epoch the trial belongs to.
        epoch: u8,
    },
    /// Panic routing: every eligible backend's circuit was open and the pool sends traffic anyway
    /// (see `select.rs`); the outcome is recorded like a normal one.
    Panic,
}

/// A transition caused by an outcome, for logs, metrics and slow start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The circuit opened (or re-opened) for this long.
    Opened {
        /// How long the backend is ejected.
        cooldown: Duration,
    },
    /// A half-open trial succeeded; the backend is back.
    Closed,
}

const STATE_MASK: u64 = 0b11;
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const FAIL_SHIFT: u32 = 2;
const FAIL_MASK: u64 = 0xff;
const LEVEL_SHIFT: u32 = 10;
const LEVEL_MASK: u64 = 0x1f;
const TRIAL_SHIFT: u32 = 15;
const TRIAL_MASK: u64 = 0x7f;
const MAX_TRIALS: u64 = TRIAL_MASK;
const EPOCH_SHIFT: u32 = 22;
const EPOCH_MASK: u64 = 0xf;
const UNTIL_SHIFT: u32 = 26;
const UNTIL_MASK: u64 = (1 << 38) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn state(self) -> u64 {
        self.0 & STATE_MASK
    }
    fn failures(self) -> u64 {
        (self.0 >> FAIL_SHIFT) & FAIL_MASK
    }
    fn level(self) -> u64 {
        (self.0 >> LEVEL_SHIFT) & LEVEL_MASK
    }
    fn trials(self) -> u64 {
        (self.0 >> TRIAL_SHIFT) & TRIAL_MASK
    }
    fn epoch(self) -> u64 {
        (self.0 >> EPOCH_SHIFT) & EPOCH_MASK
    }
    fn until_ms(self) -> u64 {
        self.0 >> UNTIL_SHIFT
    }
    fn pack(state: u64, failures: u64, level: u64, trials: u64, epoch: u64, until: u64) -> Word {
        Word(
            (state & STATE_MASK)
                | (failures.min(FAIL_MASK) << FAIL_SHIFT)
                | (level.min(LEVEL_MASK) << LEVEL_SHIFT)
                | (trials.min(TRIAL_MASK) << TRIAL_SHIFT)
                | ((epoch & EPOCH_MASK) << EPOCH_SHIFT)
                | (until.min(UNTIL_MASK) << UNTIL_SHIFT),
        )
    }
    fn with_trials(self, trials: u64) -> Word {
        Word::pack(
            self.state(),
            self.failures(),
            self.level(),
            trials,
            self.epoch(),
            self.until_ms(),
        )
    }
    /// The open state entered at `now` after `level` previous consecutive opens.
    fn opened(self, params: &BreakerParams, now: Instant) -> (Word, Duration) {
        let cooldown = params.cooldown_at(self.level() as u32);
        let until = ceil_ms(now + cooldown);
        let next = Word::pack(OPEN, 0, self.level() + 1, 0, self.epoch(), until);
        (next, cooldown)
    }
}

/// Milliseconds since the origin, rounded up so that a circuit never turns half-open early.
fn ceil_ms(t: Instant) -> u64 {
    t.as_nanos().div_ceil(1_000_000)
}

/// Milliseconds since the origin, rounded down: compared with a `until` rounded up, an open
/// circuit turns half-open at least the whole cooldown after it opened, at most 1 ms later.
fn floor_ms(t: Instant) -> u64 {
    t.as_nanos() / 1_000_000
}

/// The circuit breaker of one backend. See the module doc.
#[derive(Debug)]
pub struct Breaker {
    word: AtomicU64,
}

impl Default for Breaker {
    fn default() -> Breaker {
        Breaker::new()
    }
}

impl Breaker {
    /// A closed circuit with no failures.
    #[must_use]
    pub fn new() -> Breaker {
        Breaker {
            word: AtomicU64::new(0),
        }
    }

    fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    fn cas(&self, old: Word, new: Word) -> Result<(), Word> {
        self.word
            .compare_exchange_weak(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(Word)
    }

    /// The state at `now` as an operator sees it: an open circuit whose cooldown is over reads as
    /// half-open even before a trial has been let through.
    #[must_use]
    pub fn state(&self, now: Instant) -> CircuitState {
        let w = self.load();
        match w.state() {
            OPEN if floor_ms(now) >= w.until_ms() => CircuitState::HalfOpen,
            OPEN => CircuitState::Open,
            HALF_OPEN => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }

    /// Consecutive failures counted while closed.
    #[must_use]
    pub fn consecutive_failures(&self) -> u32 {
        self.load().failures() as u32
    }

    /// Whether [`Breaker::try_acquire`] would currently grant a permit (no side effect).
    #[must_use]
    pub fn admits(&self, params: &BreakerParams, now: Instant) -> bool {
        if mutated!(BREAKER_ADMITS_WHILE_OPEN) {
            return true;
        }
        let w = self.load();
        match w.state() {
            CLOSED => true,
            OPEN => floor_ms(now) >= w.until_ms(),
            _ => w.trials() < u64::from(params.half_open_requests),
        }
    }

    /// Take the right to send one request: always when closed; a trial when half-open (or open
    /// with its cooldown over) and fewer than `half_open_requests` trials are in flight.
    pub fn try_acquire(&self, params: &BreakerParams, now: Instant) -> Option<Permit> {
        let mut w = self.load();
        loop {
            let next = match w.state() {
                CLOSED => return Some(Permit::Normal),
                OPEN if floor_ms(now) < w.until_ms() => {
                    return mutated!(BREAKER_ADMITS_WHILE_OPEN).then_some(Permit::Normal);
                }
                OPEN => Word::pack(HALF_OPEN, 0, w.level(), 1, w.epoch() + 1, 0),
                _ if w.trials() >= u64::from(params.half_open_requests) => return None,
                _ => w.with_trials(w.trials() + 1),
            };
            match self.cas(w, next) {
                Ok(()) => {
                    return Some(Permit::Trial {
                        epoch: next.epoch() as u8,
                    });
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// Record the outcome of a request sent under `permit`. Returns the transition it caused.
    pub fn record(
        &self,
        permit: Permit,
        outcome: Outcome,
        params: &BreakerParams,
        now: Instant,
    ) -> Option<Transition> {
        if mutated!(BREAKER_IGNORES_FAILURES) && outcome == Outcome::Failure {
            return None;
        }
        let mut w = self.load();
        loop {
            let is_trial = matches!(permit, Permit::Trial { epoch } if w.state() == HALF_OPEN
                && u64::from(epoch) == w.epoch());
            let (next, transition) = match (w.state(), outcome) {
                (HALF_OPEN, _) if !is_trial => return None,
                (HALF_OPEN, Outcome::Success) if mutated!(BREAKER_NEVER_CLOSES) => {
                    (w.with_trials(w.trials().saturating_sub(1)), None)
                }
                (HALF_OPEN, Outcome::Success) => (
                    Word::pack(CLOSED, 0, 0, 0, w.epoch(), 0),
                    Some(Transition::Closed),
                ),
                (HALF_OPEN, Outcome::Failure) => {
                    let (next, cooldown) = w.opened(params, now);
                    (next, Some(Transition::Opened { cooldown }))
                }
                (HALF_OPEN, Outcome::Neutral) => {
                    (w.with_trials(w.trials().saturating_sub(1)), None)
                }
                // A trial that outlived its half-open episode says nothing about the new state.
                (CLOSED, _) if matches!(permit, Permit::Trial { .. }) => return None,
                (CLOSED, Outcome::Success) if w.failures() == 0 => return None,
                (CLOSED, Outcome::Success) => {
                    (Word::pack(CLOSED, 0, w.level(), 0, w.epoch(), 0), None)
                }
                (CLOSED, Outcome::Failure)
                    if w.failures() + 1 >= u64::from(params.failure_threshold) =>
                {
                    let (next, cooldown) = w.opened(params, now);
                    (next, Some(Transition::Opened { cooldown }))
                }
                (CLOSED, Outcome::Failure) => (
                    Word::pack(CLOSED, w.failures() + 1, w.level(), 0, w.epoch(), 0),
                    None,
                ),
                // Neutral outcomes, and stale outcomes while open, change nothing.
                _ => return None,
            };
            match self.cas(w, next) {
                Ok(()) => return transition,
                Err(actual) => w = actual,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
