//! What an exchange asks the adapter to do ([`Output`]), as plain data, and the small fixed
//! queue that holds those actions until the adapter polls them.

use core::time::Duration;
use std::borrow::Cow;
use std::net::IpAddr;

use crate::bucket::BucketParams;
use crate::flow::{Deliver, Failure};
use crate::h1::HeadError;
use crate::rate::{ClientKey, StorageKind};
use crate::response::{ClientError, ProtectionReason, Reject};
use crate::rng::Rng;
use crate::time::Instant;

/// One action for the adapter. Drain them with
/// [`Exchange::poll_output`](super::Exchange::poll_output) after every call.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Wait in the gate's queue (C-LOAD-1): feed [`Input::GateHandoff`](super::Input) when a
    /// leaving request wakes `ticket`; the wait ends at [`Exchange::poll_timeout`] at the latest.
    ///
    /// [`Exchange::poll_timeout`]: super::Exchange::poll_timeout
    GateWait {
        /// The ticket to be woken for.
        ticket: u64,
    },
    /// This request's gate slot was handed to the waiter holding `ticket`: wake it.
    GateWake {
        /// The waiter's ticket.
        ticket: u64,
    },
    /// Take one token for `key` from the shared store (C-RATE-3) and answer with
    /// `Input::StoreAnswer`. The call is bounded by `poll_timeout` (`operation_timeout`,
    /// C-RATE-5): at that deadline feed `Input::Timeout` and drop the call.
    StoreTake {
        /// The client's bucket key (C-RATE-2).
        key: ClientKey,
        /// The bucket's parameters.
        bucket: BucketParams,
    },
    /// Read the whole request body (`len` bytes) and keep it for replay (C-RETRY-1); answer
    /// `Input::BodyBuffered` or `Input::BodyUnreadable`. Bounded by `poll_timeout`
    /// (`read_timeout`).
    BufferBody {
        /// The body's length.
        len: u64,
    },
    /// Send an attempt upstream.
    Send(Send),
    /// Send the request's mirror (C-MIRROR-1) on its own, detached from the request: take it
    /// with [`Exchange::take_mirror`](super::Exchange::take_mirror), send the same method,
    /// target, headers (`Host` with `-shadow` appended to its name) and body, read the answer
    /// and discard it, and finish the mirror with its outcome. Nothing about it is ever fed
    /// back to this exchange, and nothing of this exchange waits for it.
    Mirror(MirrorSend),
    /// End attempt `attempt`'s IO unread, now (C-HEDGE-1): the other attempt in flight won, or
    /// this one's retryable head or failure ended it while the other goes on. HTTP/1: close its
    /// connection (never back to the idle pool); HTTP/2: reset its stream with `CANCEL`. Its
    /// outcome was settled already (a loser is neutral for its backend's health).
    Cancel {
        /// The attempt.
        attempt: u32,
    },
    /// Answer the client with weir's own response (C-PATH-11).
    Answer(Answer),
    /// Pass the current backend response on (C-RETRY-4, C-PATH-4); feed `Input::BodyEnd` when its
    /// body ends.
    Deliver(Delivery),
    /// The response body's `write_timeout` passed: end it now (the exchange has ended).
    AbortBody,
    /// Count a metric.
    Metric(Metric),
    /// Outlier detection ejected or returned these backends (indices in the exchange's pool,
    /// C-OUT-2): log each as a `WARN` event and count it. Emitted by the one request that
    /// judged an interval, so rarely, and shared rather than copied.
    Outliers(std::sync::Arc<[crate::outlier::OutlierEvent]>),
    /// The request's access-log record and request metric (C-OBS-1..3): emitted once, when its
    /// response head is ready, or with status `499` when the client left before that.
    Record(Record),
}

/// One attempt to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Send {
    /// Index of the backend in the exchange's pool snapshot
    /// ([`Exchange::backend`](super::Exchange::backend)).
    pub backend: usize,
    /// 1-based attempt number.
    pub attempt: u32,
    /// A retry: close the previous attempt's connection first, unread (C-RETRY-6).
    pub retry: bool,
    /// A hedge (C-HEDGE-1): the previous attempt goes on; run this one beside it and feed
    /// facts about each as [`Input::Attempt`](super::Input::Attempt).
    pub hedge: bool,
    /// No later attempt can follow (this is attempt `max_attempts`): headers and body may be
    /// moved, not copied.
    pub last: bool,
    /// A later attempt may follow one that reached the backend (the method may be retried and
    /// the body is none or buffered, C-RETRY-1): keep the whole request. When `false`, a later
    /// attempt follows only one of which nothing was sent (C-RETRY-9: a connect error, a
    /// refused stream), so the request needs keeping only until the connection exists (an
    /// HTTP/1 backend) or the stream is accepted (an HTTP/2 backend).
    pub replayable: bool,
    /// What the body of this attempt is.
    pub body: SendBody,
    /// The clock reading the engine decided to send at (its deadlines count from it; the
    /// driver checks pooled connections out at it rather than reading the clock again). After
    /// the failure it retries, a retry's `at` is later by its full-jitter backoff
    /// (C-RETRY-10): wait until then, and give the wait up when the client leaves.
    pub at: Instant,
}

/// A mirror to send ([`Output::Mirror`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorSend {
    /// The mirror pool's index in the runtime ([`Runtime::pool`](crate::runtime::Runtime::pool)).
    pub pool: usize,
    /// The backend's index in the mirror pool.
    pub backend: usize,
    /// The body: none, or the buffered body (a mirror never streams).
    pub body: SendBody,
}

/// The request body an attempt carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendBody {
    /// No body.
    Empty,
    /// The buffered body (replayable).
    Buffered,
    /// The client's body, streamed (never replayed); reading it ends at `read_deadline`.
    Stream {
        /// `server.read_timeout` counted from the request's arrival.
        read_deadline: Option<Instant>,
    },
}

/// A response weir makes itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// `/healthz`: `200 {"status":"ok"}` (C-OBS-4).
    Live,
    /// `/readyz` while ready: `200 {"status":"ready"}` (C-OBS-4).
    Ready,
    /// A request error or `/readyz` while not ready (`response::ClientError`).
    Client(ClientError),
    /// Turned away before any attempt (gate, limiter, store, bulkhead, no backend).
    Reject(Reject),
    /// The last attempt failed without a response (`502`/`504`, C-RETRY-4).
    Failure(Failure),
}

impl Answer {
    /// The status the client gets.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Answer::Live | Answer::Ready => 200,
            Answer::Client(e) => e.status(),
            Answer::Reject(r) => r.status(),
            Answer::Failure(f) => f.status,
        }
    }

    /// The fixed body of a health answer (`None` for the others, which use
    /// `SyntheticResponse`).
    #[must_use]
    pub fn health_body(&self) -> Option<&'static str> {
        match self {
            Answer::Live => Some("{\"status\":\"ok\"}"),
            Answer::Ready => Some("{\"status\":\"ready\"}"),
            _ => None,
        }
    }
}

/// Pass a backend response on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The flow's decision (backend, attempt, status, budget exhausted).
    pub deliver: Deliver,
    /// A `101` to a request that asked for an upgrade: tunnel both ways (C-PATH-8).
    pub upgrade: bool,
    /// `server.write_timeout` counted from the request's arrival (also in `poll_timeout`);
    /// `None` for an upgrade, whose tunnel lives as long as its connections (C-PATH-8).
    pub write_deadline: Option<Instant>,
}

/// A metric increment (C-OBS-1, C-LOAD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `load_balancer_protection_events_total{reason}` (C-LOAD-3).
    Protection(ProtectionReason),
    /// `load_balancer_panic_selections_total` for this backend (C-HEALTH-3).
    PanicSelection {
        /// Index in the exchange's pool.
        backend: usize,
    },
    /// `load_balancer_upstream_attempts_total` / `_duration_seconds` for one finished attempt.
    Attempt {
        /// Index in the exchange's pool.
        backend: usize,
        /// How it ended.
        result: AttemptResult,
        /// The status of the response head it got, if it got one (for the words of
        /// [`AttemptResult::detail`]; the metric has no status label).
        status: Option<u16>,
        /// From sending to its end.
        duration: Duration,
    },
    /// A mirror was sent, dropped or skipped (`load_balancer_mirror_requests_total{result}`,
    /// C-MIRROR-1).
    Mirror(crate::mirror::MirrorResult),
    /// The rate limiter decided this request
    /// (`load_balancer_rate_limit_decisions_total{result}`, C-RATE-8).
    RateDecision(crate::rate::DecisionResult),
    /// A request left the global gate's queue (C-LOAD-1): admitted, expired or gone, after
    /// waiting this long (`load_balancer_overload_queue_wait_seconds`).
    QueueWait(Duration),
    /// One rate-limit store call of the request path ended: which store, how, and
    /// how long it took (`None` for the local store, which is in memory and not timed).
    Store {
        /// The store called (`local`, `redis`, `postgres`).
        storage: StorageKind,
        /// How it ended.
        result: StoreResult,
        /// From the call to its answer or timeout (shared stores only).
        duration: Option<Duration>,
    },
    /// `load_balancer_hedges_total{result}` (C-HEDGE-1): a hedge was sent, or its head won.
    Hedge(HedgeResult),
    /// A circuit opened or closed (C-HEALTH-3): the adapter logs it (`WARN` open, `INFO`
    /// closed) and counts it.
    Circuit {
        /// Index in the exchange's pool.
        backend: usize,
        /// Which way, and the outcome that caused it.
        transition: crate::breaker::Transition,
        /// The attempt's result that caused it.
        cause: AttemptResult,
    },
}

/// What happened to a hedge (`result` label of `load_balancer_hedges_total`, C-HEDGE-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HedgeResult {
    /// A hedge was sent beside an attempt that had no head after `hedge_delay`.
    Sent,
    /// The hedge's response head won: it is the one delivered.
    Won,
}

impl HedgeResult {
    /// Every result, in label order.
    pub const ALL: [HedgeResult; 2] = [HedgeResult::Sent, HedgeResult::Won];

    /// The metric label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            HedgeResult::Sent => "sent",
            HedgeResult::Won => "won",
        }
    }
}

/// How one call of the request path to a rate-limit store ended (`result` label of
/// `load_balancer_rate_limit_store_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreResult {
    /// The store answered (a token taken or refused).
    Ok,
    /// The store answered with an error or the connection failed (C-RATE-6).
    Error,
    /// Only the part of the store holding the key failed (one Redis Cluster master).
    Partial,
    /// No answer within `rate_limit.operation_timeout` (C-RATE-5).
    Timeout,
}

impl StoreResult {
    /// Every result, in label order.
    pub const ALL: [StoreResult; 4] = [
        StoreResult::Ok,
        StoreResult::Error,
        StoreResult::Partial,
        StoreResult::Timeout,
    ];

    /// The metric label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            StoreResult::Ok => "ok",
            StoreResult::Error => "error",
            StoreResult::Partial => "partial",
            StoreResult::Timeout => "timeout",
        }
    }
}

/// How an attempt ended, for the attempt metric (classified by the same rules the flow uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptResult {
    /// A head whose status is a success for retries and the breaker (500 included).
    Success,
    /// A head whose status is in `retry.statuses`.
    FailureStatus,
    /// The connection could not be established.
    ConnectError,
    /// The connection broke before a head.
    TransportError,
    /// No head in time (C-RETRY-5).
    Timeout,
    /// The client went away (C-PATH-9).
    Cancelled,
}

impl AttemptResult {
    /// Every result, in label order.
    pub const ALL: [AttemptResult; 6] = [
        AttemptResult::Success,
        AttemptResult::FailureStatus,
        AttemptResult::ConnectError,
        AttemptResult::TransportError,
        AttemptResult::Timeout,
        AttemptResult::Cancelled,
    ];

    /// The metric label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Success => "success",
            AttemptResult::FailureStatus => "failure_status",
            AttemptResult::ConnectError => "connect_error",
            AttemptResult::TransportError => "transport_error",
            AttemptResult::Timeout => "timeout",
            AttemptResult::Cancelled => "cancelled",
        }
    }

    /// How an attempt ended, in words for a request log (the console demo's): the metric
    /// label, except for an attempt that got a response head with `status`. A `500` is a
    /// success for retries and the breaker (C-RETRY-1) and counted as one, but a reader of the
    /// log would take `success` for a good answer: a head is `success` only when its status is
    /// not an error (below 400), `answered <status>` otherwise (a status in `retry.statuses`
    /// included), `invalid status <status>` outside 100..=599.
    #[must_use]
    pub fn detail(self, status: Option<u16>) -> Cow<'static, str> {
        match status {
            Some(s) if !crate::flow::valid_upstream_status(s) => {
                Cow::Owned(format!("invalid status {s}"))
            }
            Some(s) if self == AttemptResult::Success && s < 400 => Cow::Borrowed(self.as_str()),
            Some(s) => Cow::Owned(format!("answered {s}")),
            None => Cow::Borrowed(self.as_str()),
        }
    }
}

/// The request's record for the access log and the request metric (C-OBS-1..3). The request id
/// is [`Exchange::request_id`](super::Exchange::request_id); method and path are the adapter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The status the client got (`499`: it left first).
    pub status: u16,
    /// From arrival to the response head.
    pub duration: Duration,
    /// The resolved client address (C-FWD-1).
    pub client: IpAddr,
    /// The backend of the latest attempt, if any (index in the exchange's pool).
    pub backend: Option<usize>,
    /// Attempts made.
    pub attempts: u32,
    /// Write the access-log line (errors always, successes sampled, C-OBS-3).
    pub log: bool,
    /// Whether the line shows the path (`server.access_log_include_path`).
    pub include_path: bool,
    /// Why weir answered itself (`overload`, `store_unavailable`, `no_healthy_backend`,
    /// `upstream_timeout`, ...); for a backend's response passed on, `dry_run_limited` when
    /// rate limiting in dry run let it through over the limit (C-RATE-8), else `None`.
    pub reason: Option<&'static str>,
    /// The status of the latest backend response head, if any.
    pub upstream_status: Option<u16>,
    /// Where the request's gRPC status comes from (the access log's `grpc_status`, the request
    /// metric's `grpc_status` label): none, known now, or the backend's response (C-GRPC-3).
    pub grpc_status: crate::grpc::StatusSource,
}

impl Record {
    /// The record of an HTTP/1 head the codec refused before any exchange began (C-OBS-2,
    /// C-OBS-3, C-PATH-12): `error`'s status and reason, no attempt, `duration` from the head's
    /// first byte to the refusal, the connection's peer as the client (no header was read, so
    /// no forwarded address can be trusted). Always logged, as every error is; never with a
    /// path (the target may be what was refused).
    #[must_use]
    pub const fn refused_head(error: &HeadError, duration: Duration, client: IpAddr) -> Record {
        Record {
            status: error.status(),
            duration,
            client,
            backend: None,
            attempts: 0,
            log: true,
            include_path: false,
            reason: Some(error.reason()),
            upstream_status: None,
            grpc_status: crate::grpc::StatusSource::NotGrpc,
        }
    }
}

/// Whether a request with `status` is logged: errors and management mutations always,
/// successes with probability `sample_rate` (C-OBS-3).
pub fn should_log(status: u16, mutation: bool, sample_rate: f64, rng: &mut dyn Rng) -> bool {
    if status >= 400 || mutation {
        return true;
    }
    sampled(sample_rate, rng)
}

/// A draw with probability `rate` (clamped to 0..=1).
pub fn sampled(rate: f64, rng: &mut dyn Rng) -> bool {
    if rate >= 1.0 {
        return true;
    }
    if rate.is_nan() || rate <= 0.0 {
        return false;
    }
    // `rate` in (0, 1): compare a uniform u64 with rate × 2^64.
    let threshold = (rate * 18_446_744_073_709_551_616.0) as u64;
    rng.next_u64() < threshold
}

/// Most outputs one call can leave queued (a failed last attempt: attempt metric, protection,
/// answer, record, gate wake-up), with room to spare. No allocation per request.
const OUTBOX: usize = 10;

/// A fixed FIFO of outputs: `items[head..end]`, in order. The adapter drains after every call,
/// so the queue is almost always empty when a push comes: both indices then go back to the
/// start, and a push or a pop is an index bump (no ring arithmetic, whose `% 10` was a
/// multiplication and a few shifts per output). A push that finds the end of the array
/// taken while earlier slots are free moves the queued outputs to the front first (cold).
#[derive(Debug)]
pub(super) struct Outbox {
    items: [Option<Output>; OUTBOX],
    head: usize,
    end: usize,
}

impl Outbox {
    pub(super) fn new() -> Outbox {
        Outbox {
            // Element by element: only each slot's discriminant is written (a constant array
            // was copied whole, 800 bytes, into every new exchange).
            items: core::array::from_fn(|_| None),
            head: 0,
            end: 0,
        }
    }

    /// Queue `o`. The adapter drains after every call, so the queue never fills; if it did, the
    /// new output would be dropped (debug builds panic).
    pub(super) fn push(&mut self, o: Output) {
        if self.end == OUTBOX && !self.compact() {
            debug_assert!(
                false,
                "exchange outbox full: the adapter must drain after each call"
            );
            return;
        }
        self.items[self.end] = Some(o);
        self.end += 1;
    }

    /// Move the queued outputs to the front of the array: whether room was made.
    #[cold]
    fn compact(&mut self) -> bool {
        if self.head == 0 {
            return false;
        }
        self.items.rotate_left(self.head);
        self.end -= self.head;
        self.head = 0;
        true
    }

    pub(super) fn pop(&mut self) -> Option<Output> {
        if self.head == self.end {
            return None;
        }
        let o = self.items[self.head].take();
        self.head += 1;
        if self.head == self.end {
            self.head = 0;
            self.end = 0;
        }
        o
    }
}

#[cfg(all(test, not(loom)))]
mod outbox_tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::{OUTBOX, Outbox, Output};

    proptest! {
        /// The outbox is the FIFO of at most `OUTBOX` outputs that the ring it replaced was: any
        /// run of pushes and pops within the capacity gives the same outputs, in the same order,
        /// as a `VecDeque`.
        #[test]
        fn outbox_is_a_bounded_fifo(ops in proptest::collection::vec(any::<bool>(), 0..200)) {
            let mut outbox = Outbox::new();
            let mut model = VecDeque::new();
            let mut ticket = 0u64;
            for push in ops {
                if push && model.len() < OUTBOX {
                    ticket += 1;
                    outbox.push(Output::GateWake { ticket });
                    model.push_back(Output::GateWake { ticket });
                } else {
                    prop_assert_eq!(outbox.pop(), model.pop_front());
                }
            }
            while let Some(o) = model.pop_front() {
                prop_assert_eq!(outbox.pop(), Some(o));
            }
            prop_assert_eq!(outbox.pop(), None);
        }
    }
}
