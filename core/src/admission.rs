//! The global overload gate (C-LOAD-1): at most `max_concurrent_requests` requests in flight, a
//! bounded FIFO of waiters for the rest, each waiting at most `queue_timeout`.
//!
//! This is HAProxy's `maxconn` + `timeout queue` (excess requests wait in a queue for a bounded
//! time, then get `503`) with the waiter discipline of tokio's `batch_semaphore`: a slot freed
//! while someone waits is *handed* to the head of the queue instead of being put back for anyone
//! to grab, so a newcomer can never overtake a waiter and a waiter's position is a promise. The
//! queue is deliberately short-lived (50 ms by default): it absorbs bursts, not sustained
//! overload; beyond that the client gets `503` + `Retry-After: 1` + `X-Balancer-Overloaded: true`
//! and no rate-limit token is spent (the gate runs before the limiter, C-PATH-2).
//!
//! Concurrency shape (docs/architecture.md, "Shared hot-path state": no lock shared by all
//! requests on the hot path):
//! - one `AtomicU64` holds both counts, in-flight in the low 32 bits and waiters in the high 32.
//!   While nobody waits, `enter` and `leave` are a single CAS on it and never touch the lock;
//! - the queue sits behind a mutex that is taken only when the gate is full or waiters exist.
//!   Every change of the waiter count happens under that mutex *in the same CAS* that observes the
//!   in-flight count, so "the gate is full, so I queue" and "I left, is anyone waiting?" cannot
//!   miss each other: a waiter is never stranded while a slot is free. Invariant (checked by the
//!   state-machine proptest and the loom model): waiters > 0 implies in-flight = max.
//!
//! Time never advances by itself: deadlines are reported by [`Gate::poll_timeout`] and enforced
//! whenever the gate is called with a `now` at or past them. A waiter is never admitted at or
//! after its deadline.
//!
//! The protocol an adapter follows is in [`Gate`]'s doc; the behaviour is in docs/admission.md.

mod queue;

#[cfg(all(test, not(loom)))]
mod tests;

use core::fmt;
use core::time::Duration;

use crate::sync::{AtomicU64, Mutex, Ordering, lock};
use crate::time::{Instant, duration_nanos};
use queue::{Queue, State};

/// Default for `overload.max_concurrent_requests` (C-LOAD-1).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 2048;
/// Default for `overload.queue_timeout` (C-LOAD-1).
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_millis(50);
/// Largest `overload.max_queue` accepted. The queue reserves its memory up front (about 48 bytes
/// per allowed waiter), and a million requests parked in one process is far past useful.
pub const MAX_QUEUE: u32 = 1 << 20;

/// Bit layout of the gate's state word.
const IN_FLIGHT_MASK: u64 = 0xFFFF_FFFF;
const ONE_QUEUED: u64 = 1 << 32;

fn in_flight_of(word: u64) -> u32 {
    (word & IN_FLIGHT_MASK) as u32
}

fn queued_of(word: u64) -> u32 {
    (word >> 32) as u32
}

/// Why gate parameters were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateError {
    /// max_concurrent_requests must be at least 1
    ZeroConcurrency,
    /// max_queue is above [`MAX_QUEUE`]
    QueueTooLarge(u32),
}

impl fmt::Display for GateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GateError::ZeroConcurrency => write!(f, "max_concurrent_requests must be at least 1"),
            GateError::QueueTooLarge(n) => {
                write!(f, "max_queue must be at most {MAX_QUEUE}, got {n}")
            }
        }
    }
}

impl std::error::Error for GateError {}

/// The gate's limits (`server.overload`, C-LOAD-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateParams {
    max_concurrent_requests: u32,
    max_queue: u32,
    queue_timeout: Duration,
}

impl Default for GateParams {
    /// 2048 in flight, 2048 waiters, 50 ms wait.
    fn default() -> GateParams {
        GateParams {
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_queue: DEFAULT_MAX_CONCURRENT_REQUESTS,
            queue_timeout: DEFAULT_QUEUE_TIMEOUT,
        }
    }
}

impl GateParams {
    /// At most `max_concurrent_requests` (≥ 1) in flight; at most `max_queue` waiters (`None`:
    /// as many as `max_concurrent_requests`, capped at [`MAX_QUEUE`]; `Some(0)`: no queue);
    /// each waits at most `queue_timeout` (zero: no wait, a full gate rejects at once).
    pub fn new(
        max_concurrent_requests: u32,
        max_queue: Option<u32>,
        queue_timeout: Duration,
    ) -> Result<GateParams, GateError> {
        if max_concurrent_requests == 0 {
            return Err(GateError::ZeroConcurrency);
        }
        let max_queue = match max_queue {
            None => max_concurrent_requests.min(MAX_QUEUE),
            Some(n) if n > MAX_QUEUE => return Err(GateError::QueueTooLarge(n)),
            Some(n) => n,
        };
        Ok(GateParams {
            max_concurrent_requests,
            max_queue,
            queue_timeout,
        })
    }

    /// Requests allowed in flight at once.
    #[must_use]
    pub fn max_concurrent_requests(&self) -> u32 {
        self.max_concurrent_requests
    }

    /// Waiters allowed in the queue at once.
    #[must_use]
    pub fn max_queue(&self) -> u32 {
        self.max_queue
    }

    /// The longest a waiter waits.
    #[must_use]
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// Does a full gate queue at all? (No when `max_queue` or `queue_timeout` is zero.)
    #[must_use]
    pub fn queues(&self) -> bool {
        self.max_queue > 0 && duration_nanos(self.queue_timeout) > 0
    }
}

/// Why the gate turned a request away: `503` with `Retry-After: 1` and
/// `X-Balancer-Overloaded: true`, protection reason `overload` (C-LOAD-1, C-LOAD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overloaded {
    /// The gate is full and so is the queue.
    QueueFull,
    /// The gate is full and the queue is off (`max_queue: 0` or `queue_timeout: 0s`).
    NoWait,
}

/// A place in the queue. `deadline` is when the wait ends (`now + queue_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Identifies the waiter to [`Gate::cancel`] and in [`Gate::leave`]/[`Gate::expire`] wake-ups.
    pub id: u64,
    /// Past this instant the waiter is never admitted; its owner should then call `cancel`.
    pub deadline: Instant,
}

/// The answer to [`Gate::enter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an admitted request holds a slot until it calls leave()"]
pub enum Entry {
    /// A slot is taken: go on, and call `leave` when the request is done.
    Admitted,
    /// The gate is full: wait for a wake-up or the deadline, then call `cancel`.
    Queued(Ticket),
    /// Turned away: answer `503` (C-LOAD-1).
    Rejected(Overloaded),
}

/// The answer to [`Gate::cancel`]: how the wait of a ticket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "AlreadyAdmitted means the caller owns a slot and must leave() it"]
pub enum Cancel {
    /// It was still waiting, before its deadline, and has left the queue (a disconnected client).
    Removed,
    /// A leaving request handed it a slot first: the caller owns the slot, goes on with the
    /// request (or, if the client is gone, calls `leave` at once).
    AlreadyAdmitted,
    /// Its deadline passed before a slot was free: answer `503` (C-LOAD-1).
    Expired,
    /// No such ticket, or it was already settled by an earlier `cancel`.
    Unknown,
}

/// The global overload gate (C-LOAD-1), shared by all request tasks (every method takes `&self`).
///
/// Kinds of methods: getters (`params`, `in_flight`, `queued`); commands from request tasks
/// (`enter`, `leave`, `cancel`); the timer's facts in (`expire`) and action out (`poll_timeout`).
///
/// Protocol for an adapter:
/// 1. `enter(now)`. `Admitted`: proceed and call `leave(now)` exactly once when done (a guard's
///    `Drop`). `Rejected`: `503`. `Queued(ticket)`: wait for a wake-up for `ticket.id`, the
///    deadline, or the client going away, whichever comes first; then:
/// 2. `cancel(ticket.id, now)` — exactly once per ticket, *also after a wake-up*: it settles the
///    ticket and its answer is the ticket's fate (`AlreadyAdmitted`: proceed as if admitted;
///    `Expired`: `503`; `Removed`: the client is gone). Wake-ups are hints only, so a wake-up that
///    is lost, arrives before the waiter registered, or races its timer costs nothing.
/// 3. `leave(now)` may return the id of a waiter that it handed its slot to: wake that waiter.
/// 4. Optionally, a timer task sleeps until `poll_timeout()` and calls `expire(now, wake)` to wake
///    waiters whose deadline passed (if waiters time themselves out, this only frees the queue
///    places of expired waiters sooner).
///
/// A ticket that is never settled keeps a small record in the queue forever.
pub struct Gate {
    params: GateParams,
    /// In-flight requests (low 32 bits) and waiting waiters (high 32 bits). The waiter half only
    /// changes under `queue`'s lock.
    state: AtomicU64,
    queue: Mutex<Queue>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("params", &self.params)
            .field("in_flight", &self.in_flight())
            .field("queued", &self.queued())
            .finish()
    }
}

impl Gate {
    /// An open gate. Reserves the queue's memory now (twice `max_queue` records) so that no
    /// `enter`/`leave`/`cancel` allocates later.
    #[must_use]
    pub fn new(params: GateParams) -> Gate {
        Gate {
            params,
            state: AtomicU64::new(0),
            queue: Mutex::new(Queue::with_capacity(2 * params.max_queue as usize)),
        }
    }

    /// The gate's limits.
    #[must_use]
    pub fn params(&self) -> &GateParams {
        &self.params
    }

    /// Requests holding a slot now, including slots handed to waiters that have not settled yet.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        in_flight_of(self.state.load(Ordering::Acquire))
    }

    /// Waiters in the queue now (at most `max_queue`). A waiter whose deadline passed counts until
    /// a call at or after its deadline notices.
    #[must_use]
    pub fn queued(&self) -> u32 {
        queued_of(self.state.load(Ordering::Acquire))
    }

    /// A request arrives (C-LOAD-1). Lock-free while nobody waits and a slot is free; never
    /// overtakes a waiter; never allocates.
    pub fn enter(&self, now: Instant) -> Entry {
        let max = self.params.max_concurrent_requests;
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            if queued_of(word) > 0 {
                break;
            }
            if in_flight_of(word) >= max {
                if !self.params.queues() {
                    return Entry::Rejected(Overloaded::NoWait);
                }
                break;
            }
            match self.state.compare_exchange_weak(
                word,
                word + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Entry::Admitted,
                Err(seen) => word = seen,
            }
        }
        self.enter_queue(now)
    }

    /// The slow path of `enter`, under the lock.
    fn enter_queue(&self, now: Instant) -> Entry {
        let max = self.params.max_concurrent_requests;
        let mut q = lock(&self.queue);
        let now = q.observe(now);
        self.expire_locked(&mut q, now);
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            // Under the lock the waiter half of `word` is ours alone and equals `q.live()`.
            let waiting = queued_of(word);
            let admit = waiting == 0 && in_flight_of(word) < max;
            if !admit && !self.params.queues() {
                return Entry::Rejected(Overloaded::NoWait);
            }
            if !admit && waiting >= self.params.max_queue && !mutated!(GATE_QUEUE_UNBOUNDED) {
                return Entry::Rejected(Overloaded::QueueFull);
            }
            let next = if admit { word + 1 } else { word + ONE_QUEUED };
            match self
                .state
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if admit => return Entry::Admitted,
                Ok(_) => {
                    let deadline = now + self.params.queue_timeout;
                    let id = q.push(deadline);
                    return Entry::Queued(Ticket { id, deadline });
                }
                Err(seen) => word = seen,
            }
        }
    }

    /// A request that held a slot is done (C-LOAD-1). If a waiter is queued and not expired, the
    /// slot passes to the first one (FIFO) and its id is returned: wake it. Otherwise the slot is
    /// freed. Lock-free while nobody waits; never allocates. A `leave` without a slot held is
    /// ignored when the gate is empty and otherwise miscounts: call it once per slot.
    pub fn leave(&self, now: Instant) -> Option<u64> {
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            if queued_of(word) > 0 {
                return self.leave_queue(now);
            }
            if in_flight_of(word) == 0 {
                return None;
            }
            match self.state.compare_exchange_weak(
                word,
                word - 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return None,
                Err(seen) => word = seen,
            }
        }
    }

    /// The slow path of `leave`, under the lock.
    fn leave_queue(&self, now: Instant) -> Option<u64> {
        let mut q = lock(&self.queue);
        let now = q.observe(now);
        self.expire_locked(&mut q, now);
        if let Some(id) = q.admit_head() {
            // The slot changes hands: in-flight stays, one waiter fewer.
            self.state.fetch_sub(ONE_QUEUED, Ordering::AcqRel);
            return Some(id);
        }
        // Nobody waits any more, so the fast paths run again: decrement by CAS, not below zero.
        let mut word = self.state.load(Ordering::Acquire);
        while in_flight_of(word) > 0 {
            match self.state.compare_exchange_weak(
                word,
                word - 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(seen) => word = seen,
            }
        }
        None
    }

    /// Settle a ticket: the waiter's client went away, its own timer fired, or it was woken
    /// (C-LOAD-1: a client that disconnects while queued leaves the queue at once). Call it exactly
    /// once per ticket; the answer says whether the caller now owns a slot. O(log n), no allocation.
    pub fn cancel(&self, id: u64, now: Instant) -> Cancel {
        let mut q = lock(&self.queue);
        let now = q.observe(now);
        self.expire_locked(&mut q, now);
        match q.settle(id) {
            Some(State::Waiting) => {
                self.state.fetch_sub(ONE_QUEUED, Ordering::AcqRel);
                Cancel::Removed
            }
            Some(State::Admitted) => Cancel::AlreadyAdmitted,
            Some(State::Expired) => Cancel::Expired,
            Some(State::Gone) | None => Cancel::Unknown,
        }
    }

    /// Time has come to `now`: waiters whose deadline is at or before it leave the queue and will
    /// never be admitted. `wake` is called (under the gate's lock: it must not call the gate) with
    /// the id of each such waiter not reported before; returns how many. Each still settles its
    /// ticket with `cancel` (answer `Expired`). Calling it before any deadline is a no-op.
    pub fn expire(&self, now: Instant, wake: impl FnMut(u64)) -> usize {
        let mut q = lock(&self.queue);
        let now = q.observe(now);
        self.expire_locked(&mut q, now);
        q.report_expired(wake)
    }

    /// When `expire` next has something to do: the earliest waiter deadline, or an instant
    /// already past if expired waiters wait to be reported. `None` when nobody waits.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        lock(&self.queue).next_deadline()
    }

    /// Expire waiters at `now` and drop them from the waiter count. Called with the lock held.
    fn expire_locked(&self, q: &mut Queue, now: Instant) {
        let expired = q.advance(now) as u64;
        if expired > 0 {
            self.state.fetch_sub(expired * ONE_QUEUED, Ordering::AcqRel);
        }
    }

    /// Check the word against the queue; returns (records stored, capacity). Tests only.
    #[cfg(all(test, not(loom)))]
    fn check_consistent(&self) -> (usize, usize) {
        let q = lock(&self.queue);
        let word = self.state.load(Ordering::Acquire);
        assert_eq!(
            queued_of(word) as usize,
            q.live(),
            "waiter count matches the queue"
        );
        (q.stored(), q.capacity())
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
