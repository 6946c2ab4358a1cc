//! What goes into a [`Flow`](super::Flow) and what comes out: the request's target and facts,
//! the events of an attempt (errors, body ends) and the actions the adapter carries out.

use crate::bulkhead::Bulkhead;
use crate::outcome::{ProtectionReason, Reject};
use crate::pool::Pool;
use crate::retry::{AttemptOutcome, BodyKind, NoRetryReason};
use crate::select::PickContext;
use crate::sync::Arc;
use crate::time::Instant;

/// Where a request goes: the pool snapshot its route maps to (kept for all its attempts, so
/// backend indices stay valid across a reload) and the route's bulkhead, if the route has one.
#[derive(Debug, Clone)]
pub struct FlowTarget {
    /// The pool snapshot of the matched route (C-ROUTE-1).
    pub pool: Arc<Pool>,
    /// The route's bulkhead (C-LOAD-2); `None` when the route sets no limit and nobody counts.
    pub bulkhead: Option<Arc<Bulkhead>>,
}

/// What the flow needs to know about the request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMeta {
    /// The request method (checked against `retry.methods`, C-RETRY-1).
    pub method: http::Method,
    /// The request body as far as replaying it is concerned (C-RETRY-1).
    pub body: BodyKind,
    /// The worker and affinity hash handed to the selection policy.
    pub ctx: PickContext,
}

/// How an attempt failed before a response head arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptError {
    /// The connection could not be established (refused, dial timeout, TLS handshake).
    Connect,
    /// The connection broke after it was established, before response headers.
    Transport,
    /// No response headers within `per_try_timeout` (C-RETRY-5).
    PerTryTimeout,
    /// The client went away; the attempt is cancelled (C-PATH-9).
    ClientGone,
    /// The backend's response head was unusable: a status outside 100..=599
    /// ([`valid_upstream_status`]). A failure of the backend like a broken connection.
    InvalidResponse,
    /// The backend refused the attempt before processing any of it (an HTTP/2
    /// `REFUSED_STREAM`, or a stream above a `GOAWAY`'s last stream id) and weir holds all of
    /// it still: sent again elsewhere whatever the method and body (C-RETRY-9).
    Refused,
    /// Every connection to the backend was full at `max_conns_per_host` for the whole connect
    /// timeout: nothing was sent, and it is no failure of the backend (neutral for its breaker
    /// and outlier detection); sent again elsewhere whatever the method and body (C-RETRY-9).
    Saturated,
}

impl AttemptError {
    /// Every kind, for generators and tables.
    pub const ALL: [AttemptError; 7] = [
        AttemptError::Connect,
        AttemptError::Transport,
        AttemptError::PerTryTimeout,
        AttemptError::ClientGone,
        AttemptError::InvalidResponse,
        AttemptError::Refused,
        AttemptError::Saturated,
    ];

    /// The same fact in the retry policy's terms.
    #[must_use]
    pub const fn outcome(self) -> AttemptOutcome {
        match self {
            AttemptError::Connect => AttemptOutcome::Connect,
            AttemptError::Refused => AttemptOutcome::Refused,
            AttemptError::Saturated => AttemptOutcome::Saturated,
            // An unusable response is a protocol failure of the backend: retried and counted
            // against it exactly as a connection that broke before a response (C-RETRY-1,
            // C-HEALTH-3).
            AttemptError::Transport | AttemptError::InvalidResponse => AttemptOutcome::Transport,
            AttemptError::PerTryTimeout => AttemptOutcome::PerTryTimeout,
            AttemptError::ClientGone => AttemptOutcome::ClientGone,
        }
    }

    /// A stable snake_case label for logs.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptError::Connect => "connect",
            AttemptError::Transport => "transport",
            AttemptError::PerTryTimeout => "per_try_timeout",
            AttemptError::ClientGone => "client_gone",
            AttemptError::InvalidResponse => "invalid_response",
            AttemptError::Refused => "refused",
            AttemptError::Saturated => "saturated",
        }
    }
}

/// Whether a backend's response status may be passed on: 100..=599, the five classes RFC 9110
/// §15 defines. hyper's HTTP/1 client reads any three digits (it keeps 100..=999), so a backend
/// that answers `HTTP/1.1 999 Odd` or `600` reaches the flow with that status; such a response
/// means nothing a client or a cache can act on, and nginx answers it with `502` ("upstream sent
/// invalid status"). [`Flow::handle_response_head`] turns it into
/// [`AttemptError::InvalidResponse`]: `502` (or a retry) and a passive failure of the backend.
#[must_use]
pub const fn valid_upstream_status(status: u16) -> bool {
    matches!(status, 100..=599)
}

/// How a delivered response's body (or upgraded connection, C-PATH-8) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyEnd {
    /// The body was passed on completely (or the upgraded connection closed normally).
    Complete,
    /// The backend's body broke off (reset, EOF inside a chunk, write timeout).
    Error,
    /// The client went away while the body was streaming.
    ClientGone,
}

/// Send one attempt upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The backend's index in the flow's pool snapshot ([`Flow::backend`] gives id and url).
    pub backend: usize,
    /// The attempt number, 1-based (`X-Balancer-Attempts` if this attempt's response is delivered).
    pub attempt: u32,
    /// The wait for response headers ends here (`per_try_timeout` after sending, C-RETRY-5); the
    /// flow reports it through [`Flow::poll_timeout`] too.
    pub header_deadline: Instant,
    /// The slot was granted by panic routing (every eligible circuit open; see `select.rs`).
    pub panic: bool,
    /// When to send it: now, or after the full-jitter backoff before a retry (C-RETRY-10);
    /// `header_deadline` counts from it.
    pub at: Instant,
}

/// Pass the current backend response to the client as it was (C-RETRY-4), with the C-PATH-4
/// headers (`response::delivered_headers`). The slot stays held until [`Flow::handle_body_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deliver {
    /// The index of the backend that produced the response.
    pub backend: usize,
    /// The attempt that produced it (`X-Balancer-Attempts`).
    pub attempt: u32,
    /// Its status.
    pub status: u16,
    /// The retry budget stopped a retry: add `X-Balancer-Retry-Budget: exhausted` (C-PATH-4).
    pub budget_exhausted: bool,
    /// The protection event this outcome counts, if any (C-LOAD-3).
    pub protection: Option<ProtectionReason>,
}

/// The last attempt failed without a response and no retry follows: answer with a synthetic
/// `502` (connect or transport error) or `504` (per-try timeout), C-RETRY-4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// `502` or `504`.
    pub status: u16,
    /// What went wrong with the last attempt (never [`AttemptError::ClientGone`]).
    pub cause: AttemptError,
    /// Why no further attempt was made.
    pub no_retry: NoRetryReason,
    /// The index of the backend of the last attempt (for logs, not for `X-Balancer-Backend`: no
    /// backend produced this response).
    pub backend: usize,
    /// Attempts made (`X-Balancer-Attempts`).
    pub attempts: u32,
    /// The retry budget stopped a retry: add `X-Balancer-Retry-Budget: exhausted`.
    pub budget_exhausted: bool,
    /// The protection event this outcome counts, if any (C-LOAD-3).
    pub protection: Option<ProtectionReason>,
}

/// What the adapter does next. `Deliver`, `Fail`, `Reject` and `Abandon` are final: exactly one
/// of them ends every flow that runs to completion, and nothing but `Nothing` follows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Send the first attempt.
    Attempt(Attempt),
    /// Close the current attempt's connection without reading its body (C-RETRY-6) and send this
    /// attempt instead. The previous slot is already released.
    Retry(Attempt),
    /// Send this attempt beside the one awaiting its head, which goes on (C-HEDGE-1): the
    /// first head that is not retryable wins.
    Hedge(Attempt),
    /// Pass the response on; call [`Flow::handle_body_end`] when its body ends.
    Deliver(Deliver),
    /// Answer with a synthetic error (`response::SyntheticResponse::failure`). Everything is
    /// released.
    Fail(Failure),
    /// Turn the request away before any attempt (`response::SyntheticResponse::reject`).
    Reject(Reject),
    /// The client is gone: answer nobody, drop the attempt (C-PATH-9). Everything is released.
    Abandon,
    /// Nothing to do: an early timeout, or an event that does not apply in the current phase
    /// (ignored, with no effect).
    Nothing,
}

impl Action {
    /// Whether this action ends the request's decision (Deliver, Fail, Reject, Abandon).
    #[must_use]
    pub const fn is_final(&self) -> bool {
        matches!(
            self,
            Action::Deliver(_) | Action::Fail(_) | Action::Reject(_) | Action::Abandon
        )
    }

    /// The protection event to count for this action (C-LOAD-3). Each action is returned once, so
    /// counting every action's reason counts every event exactly once.
    #[must_use]
    pub fn protection_reason(&self) -> Option<ProtectionReason> {
        match self {
            Action::Deliver(d) => d.protection,
            Action::Fail(f) => f.protection,
            Action::Reject(r) => r.protection_reason(),
            Action::Attempt(_)
            | Action::Retry(_)
            | Action::Hedge(_)
            | Action::Abandon
            | Action::Nothing => None,
        }
    }
}

/// Where a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// An attempt is out; waiting for its response head (the header deadline is armed).
    AwaitingHead,
    /// A response was delivered; its body is streaming and the slot is held (C-POOL-6).
    Streaming,
    /// Done: nothing is held.
    Finished,
}

/// One input of a flow, as plain data (for [`Flow::handle`], recording, replay and fuzzing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowEvent {
    /// [`Flow::handle_response_head`].
    ResponseHead(u16),
    /// [`Flow::handle_error`].
    Error(AttemptError),
    /// [`Flow::handle_timeout`].
    Timeout,
    /// [`Flow::handle_body_end`].
    BodyEnd(BodyEnd),
}
