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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn params() -> BreakerParams {
        BreakerParams::new(2, 1, Duration::from_secs(10), Duration::from_secs(300)).unwrap()
    }

    fn fail(b: &Breaker, p: &BreakerParams, now: Instant) -> Option<Transition> {
        let permit = b.try_acquire(p, now).expect("admitted");
        b.record(permit, Outcome::Failure, p, now)
    }

    #[test]
    fn c_health_3_opens_after_threshold_consecutive_failures() {
        let (b, p) = (Breaker::new(), params());
        let t = Instant::from_secs(1);
        assert_eq!(fail(&b, &p, t), None);
        // A success in between resets the count.
        let permit = b.try_acquire(&p, t).unwrap();
        assert_eq!(b.record(permit, Outcome::Success, &p, t), None);
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(fail(&b, &p, t), None);
        assert_eq!(
            fail(&b, &p, t),
            Some(Transition::Opened {
                cooldown: Duration::from_secs(10)
            })
        );
        assert_eq!(b.state(t), CircuitState::Open);
        assert!(
            b.try_acquire(&p, t + Duration::from_millis(9_999))
                .is_none()
        );
        assert!(!b.admits(&p, t + Duration::from_millis(9_999)));
    }

    #[test]
    fn c_health_3_half_open_admits_bounded_trials_and_success_closes() {
        let (b, p) = (Breaker::new(), params());
        let t = Instant::from_secs(1);
        fail(&b, &p, t);
        fail(&b, &p, t);
        let after = t + Duration::from_secs(10);
        assert_eq!(b.state(after), CircuitState::HalfOpen);
        let trial = b.try_acquire(&p, after).expect("one trial");
        assert!(matches!(trial, Permit::Trial { .. }));
        assert!(b.try_acquire(&p, after).is_none(), "half_open_requests = 1");
        assert_eq!(
            b.record(trial, Outcome::Success, &p, after),
            Some(Transition::Closed)
        );
        assert_eq!(b.state(after), CircuitState::Closed);
        // Escalation was reset: the next open is the base cooldown again.
        fail(&b, &p, after);
        assert_eq!(
            fail(&b, &p, after),
            Some(Transition::Opened {
                cooldown: Duration::from_secs(10)
            })
        );
    }

    #[test]
    fn c_health_3_failed_trial_reopens_with_doubled_cooldown_up_to_max() {
        let p = BreakerParams::new(1, 1, Duration::from_secs(10), Duration::from_secs(35)).unwrap();
        let b = Breaker::new();
        let mut now = Instant::from_secs(1);
        let mut seen = Vec::new();
        let first = fail(&b, &p, now);
        seen.push(first);
        for _ in 0..4 {
            now = now + Duration::from_secs(60);
            seen.push(fail(&b, &p, now));
        }
        let cooldowns: Vec<u64> = seen
            .into_iter()
            .map(|t| match t {
                Some(Transition::Opened { cooldown }) => cooldown.as_secs(),
                other => panic!("expected an open, got {other:?}"),
            })
            .collect();
        assert_eq!(cooldowns, vec![10, 20, 35, 35, 35]);
    }

    /// C-HEALTH-3: the cooldown is never cut short, also when the circuit opens between two
    /// milliseconds (the state keeps `until` in whole milliseconds). A conformance run saw a
    /// trial 399.6 ms after a 400 ms re-open when `now` was rounded up as well.
    #[test]
    fn c_health_3_never_half_open_before_the_cooldown_off_the_millisecond_grid() {
        let p =
            BreakerParams::new(1, 1, Duration::from_millis(400), Duration::from_secs(1)).unwrap();
        let b = Breaker::new();
        let opened = Instant::from_nanos(1_300_300_000); // 1,300.3 ms
        fail(&b, &p, opened);
        for early_us in [1, 100, 300, 900, 1_000] {
            let t = opened + Duration::from_millis(400) - Duration::from_micros(early_us);
            assert_eq!(b.state(t), CircuitState::Open, "{early_us} us early");
            assert!(!b.admits(&p, t), "admits {early_us} us early");
            assert!(
                b.try_acquire(&p, t).is_none(),
                "a trial {early_us} us early"
            );
        }
        let due = opened + Duration::from_millis(401);
        assert_eq!(b.state(due), CircuitState::HalfOpen);
        assert!(b.try_acquire(&p, due).is_some());
    }

    #[test]
    fn c_health_3_neutral_and_stale_outcomes_change_nothing() {
        let (b, p) = (Breaker::new(), params());
        let t = Instant::from_secs(1);
        let old = b.try_acquire(&p, t).unwrap();
        fail(&b, &p, t);
        fail(&b, &p, t);
        // An attempt admitted while closed completes after the circuit opened: ignored.
        assert_eq!(b.record(old, Outcome::Success, &p, t), None);
        assert_eq!(b.state(t), CircuitState::Open);
        // A client cancellation of a trial frees the trial slot without deciding anything.
        let later = t + Duration::from_secs(10);
        let trial = b.try_acquire(&p, later).unwrap();
        assert_eq!(b.record(trial, Outcome::Neutral, &p, later), None);
        assert_eq!(b.state(later), CircuitState::HalfOpen);
        let trial2 = b.try_acquire(&p, later).expect("the slot was released");
        // The first trial's permit is of the same epoch, but its slot was already released;
        // a second report of a released trial must not free trial2's slot twice.
        assert!(b.record(trial2, Outcome::Failure, &p, later).is_some());
        assert_eq!(b.state(later), CircuitState::Open);
    }

    #[test]
    fn params_are_validated() {
        let s = Duration::from_secs(1);
        assert!(BreakerParams::new(0, 1, s, s).is_err());
        assert!(BreakerParams::new(256, 1, s, s).is_err());
        assert!(BreakerParams::new(1, 0, s, s).is_err());
        assert!(BreakerParams::new(1, 128, s, s).is_err());
        assert!(BreakerParams::new(1, 1, Duration::ZERO, s).is_err());
        assert!(BreakerParams::new(1, 1, s * 2, s).is_err());
        assert_eq!(params().cooldown_at(40), Duration::from_secs(300));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Finish(usize, u8),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Acquire),
            4 => (any::<usize>(), 0u8..3).prop_map(|(i, o)| Op::Finish(i, o)),
            // Microseconds: instants off the millisecond grid the breaker keeps `until` on.
            2 => (0u64..30_000_000).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// C-HEALTH-3 as a state machine over arbitrary op sequences: no request is admitted while
        /// open before the cooldown; half-open trials never exceed half_open_requests; the circuit
        /// opens exactly when the consecutive failures of real traffic reach the threshold.
        #[test]
        fn c_health_3_state_machine(ops in proptest::collection::vec(op(), 1..200),
                                    threshold in 1u32..4, trials in 1u32..3) {
            let p = BreakerParams::new(threshold, trials, Duration::from_secs(1), Duration::from_secs(8)).unwrap();
            let b = Breaker::new();
            let mut now = Instant::from_secs(1);
            let mut open_until: Option<Instant> = None;
            let mut outstanding: Vec<Permit> = Vec::new();
            let mut streak = 0u32;
            for op in ops {
                match op {
                    Op::Advance(us) => now = now + Duration::from_micros(us),
                    Op::Acquire => {
                        let got = b.try_acquire(&p, now);
                        if let Some(until) = open_until && now < until {
                            prop_assert!(got.is_none(), "admitted while open");
                        }
                        if let Some(permit) = got { outstanding.push(permit); }
                    }
                    Op::Finish(i, o) if !outstanding.is_empty() => {
                        let permit = outstanding.swap_remove(i % outstanding.len());
                        let outcome = [Outcome::Success, Outcome::Failure, Outcome::Neutral][o as usize];
                        let was_closed = b.state(now) == CircuitState::Closed;
                        let t = b.record(permit, outcome, &p, now);
                        if was_closed && permit == Permit::Normal {
                            match outcome {
                                Outcome::Failure => streak += 1,
                                Outcome::Success => streak = 0,
                                Outcome::Neutral => {}
                            }
                            let opened = matches!(t, Some(Transition::Opened { .. }));
                            prop_assert_eq!(opened, streak >= threshold);
                        }
                        match t {
                            Some(Transition::Opened { cooldown }) => {
                                open_until = Some(now + cooldown);
                                streak = 0;
                                prop_assert!(cooldown <= Duration::from_secs(8));
                            }
                            Some(Transition::Closed) => { open_until = None; streak = 0; }
                            None => {}
                        }
                    }
                    Op::Finish(..) => {}
                }
                let w = b.load();
                prop_assert!(w.trials() <= u64::from(trials));
                if w.state() == HALF_OPEN {
                    let live = outstanding.iter().filter(|p| matches!(p, Permit::Trial { epoch } if u64::from(*epoch) == w.epoch())).count();
                    prop_assert!(w.trials() as usize <= live, "trial count leaked");
                }
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::Arc;

    /// Concurrent success and failure reports from two threads against a closed breaker with
    /// threshold 2, plus a third failure: every interleaving ends in a consistent state, and the
    /// circuit is open exactly when two failures were consecutive in the CAS order.
    #[test]
    fn loom_breaker_concurrent_transitions() {
        loom::model(|| {
            let p =
                BreakerParams::new(2, 1, Duration::from_secs(1), Duration::from_secs(4)).unwrap();
            let b = Arc::new(Breaker::new());
            let now = Instant::from_secs(1);
            let t1 = {
                let b = b.clone();
                loom::thread::spawn(move || {
                    let permit = b.try_acquire(&p, now);
                    permit.map(|x| b.record(x, Outcome::Failure, &p, now))
                })
            };
            let t2 = {
                let b = b.clone();
                loom::thread::spawn(move || {
                    let permit = b.try_acquire(&p, now);
                    permit.map(|x| b.record(x, Outcome::Success, &p, now))
                })
            };
            let permit = b.try_acquire(&p, now);
            let r3 = permit.map(|x| b.record(x, Outcome::Failure, &p, now));
            let r1 = t1.join().unwrap();
            let r2 = t2.join().unwrap();
            let opened = [r1, r3]
                .iter()
                .filter(|r| matches!(r, Some(Some(Transition::Opened { .. }))))
                .count();
            assert_eq!(r2.flatten(), None);
            assert!(opened <= 1, "opened twice");
            let w = b.load();
            match b.state(now) {
                CircuitState::Open => assert_eq!(opened, 1),
                CircuitState::Closed => {
                    assert_eq!(opened, 0);
                    assert!(w.failures() <= 1);
                }
                CircuitState::HalfOpen => panic!("cannot be half-open without time passing"),
            }
        });
    }

    /// Two threads race for the single half-open trial: exactly one gets it.
    #[test]
    fn loom_breaker_single_half_open_trial() {
        loom::model(|| {
            let p =
                BreakerParams::new(1, 1, Duration::from_secs(1), Duration::from_secs(4)).unwrap();
            let b = Arc::new(Breaker::new());
            let t0 = Instant::from_secs(1);
            let x = b.try_acquire(&p, t0).unwrap();
            b.record(x, Outcome::Failure, &p, t0);
            let later = t0 + Duration::from_secs(1);
            let other = {
                let b = b.clone();
                loom::thread::spawn(move || b.try_acquire(&p, later).is_some())
            };
            let mine = b.try_acquire(&p, later).is_some();
            let theirs = other.join().unwrap();
            assert!(mine ^ theirs, "exactly one trial");
        });
    }
}
