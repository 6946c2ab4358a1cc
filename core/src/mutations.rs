//! Test-only switches that break weir-core on purpose (compiled only with the `mutations`
//! feature, which only weir-sim's tests enable).
//!
//! The simulator claims to catch violations of the contract's invariants. A checker that never
//! fires proves nothing, so each invariant has a matching switch here that breaks the core at
//! the one decision point that upholds it, and weir-sim's `teeth` test turns each switch on and
//! asserts that some seed of the CI range produces a violation of that invariant (mutation
//! testing by hand, in the spirit of TigerBeetle's VOPR "does the fuzzer notice a planted bug"
//! checks). docs/simulation.md has the table: switch, invariant, catching seed.
//!
//! The switches are process-wide `AtomicBool`s (std's, not the `crate::sync` facade: they must
//! be `static`, and loom builds never enable this feature). They all default to off, so a build
//! with the feature behaves exactly like one without. Each check in the core is one
//! `mutated!(NAME)` expression, a constant `false` without the feature.

use std::sync::atomic::{AtomicBool, Ordering};

/// `Breaker::admits` and `Breaker::try_acquire` let requests through an open circuit.
pub static BREAKER_ADMITS_WHILE_OPEN: AtomicBool = AtomicBool::new(false);
/// `Breaker::record` drops every failure: the circuit never opens.
pub static BREAKER_IGNORES_FAILURES: AtomicBool = AtomicBool::new(false);
/// A successful half-open trial leaves the circuit half-open instead of closing it.
pub static BREAKER_NEVER_CLOSES: AtomicBool = AtomicBool::new(false);
/// The selection driver ignores the request's `Tried` set: a retry may revisit a backend.
pub static RETRY_MAY_REUSE_BACKEND: AtomicBool = AtomicBool::new(false);
/// `RetryPolicy::decide` allows one attempt more than `max_attempts`.
pub static RETRY_ATTEMPTS_PLUS_ONE: AtomicBool = AtomicBool::new(false);
/// `RetryBudget::try_withdraw` grants every retry without taking a token.
pub static BUDGET_DISABLED: AtomicBool = AtomicBool::new(false);
/// Backends ignore `max_concurrent_requests` (availability and slot reservation).
pub static SLOT_LIMIT_IGNORED: AtomicBool = AtomicBool::new(false);
/// The GCRA bucket forgives half of its debt at every take: it refills too fast.
pub static BUCKET_FAST_REFILL: AtomicBool = AtomicBool::new(false);
/// The flow treats a per-try timeout like a client that went away: it abandons the request.
pub static FLOW_TIMEOUT_ABANDONS: AtomicBool = AtomicBool::new(false);
/// The overload gate queues past `max_queue`.
pub static GATE_QUEUE_UNBOUNDED: AtomicBool = AtomicBool::new(false);
/// The overload gate's queue never expires a waiter: neither the gate's queue nor the request
/// engine's queue deadline (`exchange`) ends a wait.
pub static GATE_NEVER_EXPIRES: AtomicBool = AtomicBool::new(false);
/// The selection driver ignores slow start: a warming backend gets its full share at once.
pub static SLOW_START_IGNORED: AtomicBool = AtomicBool::new(false);
/// The selection driver never falls back to panic routing when every circuit is open.
pub static PANIC_ROUTING_DISABLED: AtomicBool = AtomicBool::new(false);
/// Route bulkheads ignore their limit.
pub static BULKHEAD_UNLIMITED: AtomicBool = AtomicBool::new(false);
/// The shared store's circuit lets every request through as a recovery trial while the store
/// is down (`StoreCircuit::may_call` forgets that a trial is in flight).
pub static STORE_TRIALS_UNBOUNDED: AtomicBool = AtomicBool::new(false);
/// A successful recovery trial leaves the shared store's circuit down.
pub static STORE_NEVER_RECOVERS: AtomicBool = AtomicBool::new(false);
/// The request engine forgets `write_timeout`: a response body has no deadline.
pub static WRITE_TIMEOUT_IGNORED: AtomicBool = AtomicBool::new(false);
/// The connection watchdog never closes a head that is late (`read_header_timeout` forgotten).
pub static HEAD_TIMEOUT_IGNORED: AtomicBool = AtomicBool::new(false);
/// Outlier detection ignores its cap: more than `max_ejection_percent` of a pool, or its last
/// serving backend, may be ejected.
pub static OUTLIER_CAP_IGNORED: AtomicBool = AtomicBool::new(false);
/// Selection ignores a backend's pushback (`503` with `Retry-After`, C-RETRY-11).
pub static PUSHBACK_IGNORED: AtomicBool = AtomicBool::new(false);
/// HTTP/2 stream placement ignores the backend's `SETTINGS_MAX_CONCURRENT_STREAMS`: a full
/// connection takes another stream (`stream_pick`).
pub static STREAM_LIMIT_IGNORED: AtomicBool = AtomicBool::new(false);
/// A transport error counts as "nothing sent" (C-RETRY-9): an attempt whose bytes reached the
/// backend is retried whatever its method and body.
pub static TRANSPORT_COUNTS_AS_NOTHING_SENT: AtomicBool = AtomicBool::new(false);
/// The hedge is sent without taking a retry-budget token.
pub static HEDGE_SKIPS_BUDGET: AtomicBool = AtomicBool::new(false);
/// The hedge ignores `max_attempts`: it may be one attempt too many.
pub static HEDGE_BEYOND_MAX_ATTEMPTS: AtomicBool = AtomicBool::new(false);
/// Any request is hedged, whatever its method and body (a `POST`, a streamed body).
pub static HEDGE_ANY_METHOD: AtomicBool = AtomicBool::new(false);
/// The attempt that lost the race is not cancelled: its connection stays open.
pub static HEDGE_LOSER_NOT_CANCELLED: AtomicBool = AtomicBool::new(false);
/// The attempt that lost the race is recorded as a transport failure of its backend.
pub static HEDGE_LOSER_FAILS: AtomicBool = AtomicBool::new(false);
/// The backoff before a retry ignores `backoff_max` (only the doubling bounds it).
pub static BACKOFF_UNCAPPED: AtomicBool = AtomicBool::new(false);

/// Every switch with its name, for the teeth test and its report.
pub static ALL: [(&str, &AtomicBool); 28] = [
    ("BREAKER_ADMITS_WHILE_OPEN", &BREAKER_ADMITS_WHILE_OPEN),
    ("BREAKER_IGNORES_FAILURES", &BREAKER_IGNORES_FAILURES),
    ("BREAKER_NEVER_CLOSES", &BREAKER_NEVER_CLOSES),
    ("RETRY_MAY_REUSE_BACKEND", &RETRY_MAY_REUSE_BACKEND),
    ("RETRY_ATTEMPTS_PLUS_ONE", &RETRY_ATTEMPTS_PLUS_ONE),
    ("BUDGET_DISABLED", &BUDGET_DISABLED),
    ("SLOT_LIMIT_IGNORED", &SLOT_LIMIT_IGNORED),
    ("BUCKET_FAST_REFILL", &BUCKET_FAST_REFILL),
    ("FLOW_TIMEOUT_ABANDONS", &FLOW_TIMEOUT_ABANDONS),
    ("GATE_QUEUE_UNBOUNDED", &GATE_QUEUE_UNBOUNDED),
    ("GATE_NEVER_EXPIRES", &GATE_NEVER_EXPIRES),
    ("SLOW_START_IGNORED", &SLOW_START_IGNORED),
    ("PANIC_ROUTING_DISABLED", &PANIC_ROUTING_DISABLED),
    ("BULKHEAD_UNLIMITED", &BULKHEAD_UNLIMITED),
    ("STORE_TRIALS_UNBOUNDED", &STORE_TRIALS_UNBOUNDED),
    ("STORE_NEVER_RECOVERS", &STORE_NEVER_RECOVERS),
    ("WRITE_TIMEOUT_IGNORED", &WRITE_TIMEOUT_IGNORED),
    ("HEAD_TIMEOUT_IGNORED", &HEAD_TIMEOUT_IGNORED),
    ("OUTLIER_CAP_IGNORED", &OUTLIER_CAP_IGNORED),
    ("PUSHBACK_IGNORED", &PUSHBACK_IGNORED),
    ("STREAM_LIMIT_IGNORED", &STREAM_LIMIT_IGNORED),
    (
        "TRANSPORT_COUNTS_AS_NOTHING_SENT",
        &TRANSPORT_COUNTS_AS_NOTHING_SENT,
    ),
    ("HEDGE_SKIPS_BUDGET", &HEDGE_SKIPS_BUDGET),
    ("HEDGE_BEYOND_MAX_ATTEMPTS", &HEDGE_BEYOND_MAX_ATTEMPTS),
    ("HEDGE_ANY_METHOD", &HEDGE_ANY_METHOD),
    ("HEDGE_LOSER_NOT_CANCELLED", &HEDGE_LOSER_NOT_CANCELLED),
    ("HEDGE_LOSER_FAILS", &HEDGE_LOSER_FAILS),
    ("BACKOFF_UNCAPPED", &BACKOFF_UNCAPPED),
];

/// Whether `switch` is on (what `mutated!` reads).
#[inline]
pub fn on(switch: &AtomicBool) -> bool {
    switch.load(Ordering::Relaxed)
}

/// Turn `switch` on or off.
pub fn set(switch: &AtomicBool, on: bool) {
    switch.store(on, Ordering::SeqCst);
}

/// Turn every switch off.
pub fn reset() {
    for (_, switch) in &ALL {
        set(switch, false);
    }
}

/// The switch named `name`.
#[must_use]
pub fn by_name(name: &str) -> Option<&'static AtomicBool> {
    ALL.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}
