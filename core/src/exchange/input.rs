//! What an exchange is created from ([`Head`]) and the facts fed to it ([`Input`]).

use std::net::IpAddr;

use http::HeaderMap;

use crate::bucket::Take;
use crate::flow::BodyEnd;

/// The parsed request head an exchange is created from, borrowed from the adapter for the
/// duration of [`Exchange::new`](super::Exchange::new): the exchange keeps only the few values
/// its decisions need (request id, client address, affinity hash, body kind).
///
/// The headers are anything the engine can look up by name ([`HeaderLines`](crate::headers::HeaderLines)): an
/// `http::HeaderMap` (the default), or the flat list weir's HTTP/1 codec parsed.
#[derive(Debug)]
pub struct Head<'h, H: ?Sized = HeaderMap> {
    /// The request method.
    pub method: &'h http::Method,
    /// The URI's path (routing and `/healthz`, C-ROUTE-1, C-OBS-4).
    pub path: &'h str,
    /// The raw request target as received, path and query (empty for authority-form).
    pub target: &'h str,
    /// The request headers as received.
    pub headers: &'h H,
    /// The socket peer (or the PROXY protocol's address, C-TLS-3).
    pub peer: IpAddr,
    /// The request arrived over weir's own TLS: the backend is told `X-Forwarded-Proto: https`
    /// whoever the peer is (C-TLS-1).
    pub tls: bool,
    /// What the codec knows of the body's length.
    pub body: BodyInfo,
    /// An HTTP/2 request's `:scheme` and `:authority`, when it has an `:authority`: its `host`
    /// fields must name the same entity (RFC 9113 §8.3.1). `None` for HTTP/1, whose codec
    /// checks `Host` itself (C-PATH-12).
    pub authority: Option<crate::h2::Authority<'h>>,
}

impl<H: ?Sized> Clone for Head<'_, H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H: ?Sized> Copy for Head<'_, H> {}

/// The request body as its framing describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyInfo {
    /// No body (or `Content-Length: 0`).
    Empty,
    /// A body of exactly this many bytes (`Content-Length`, or an HTTP/2 stream that said so).
    Sized(u64),
    /// A body of unknown length (chunked, or HTTP/2 without a length): never replayable.
    Unsized,
}

/// How a shared-store call failed (the details are the adapter's, for its log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreFailure {
    /// The store answered with an error (connection lost, `maxmemory`, C-RATE-6).
    Error,
    /// Only the part of the store holding this key failed (one Redis Cluster master of
    /// several): the failure policy decides this request, but the store stays up, so the
    /// other keys keep their shared state and `/readyz` stays ready (C-RATE-5). A
    /// whole outage is found by the store's health probe.
    Partial,
}

/// How sending an attempt failed before a response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendFailure {
    /// The connection could not be established (refused, dial timeout, TLS): nothing of the
    /// request was written, and the adapter still holds all of it (C-RETRY-9).
    Connect,
    /// The backend refused the attempt before processing any of it: an HTTP/2 stream reset with
    /// `REFUSED_STREAM`, or a stream above the `last_stream_id` of the backend's `GOAWAY`
    /// (RFC 9113 §8.7). `held`: the adapter still holds the whole request (headers, and every
    /// body byte it handed to the stream), so it can send it again (C-RETRY-9); when it does
    /// not, the refusal counts as a transport error.
    Refused {
        /// The adapter can send the whole request again.
        held: bool,
    },
    /// Every connection to the backend is full at `server.upstream.max_conns_per_host` and no
    /// stream or connection freed up within the connect timeout: nothing was sent, and the
    /// backend did nothing wrong (neutral for its breaker and outlier detection). Sent again
    /// elsewhere whatever the method and body (C-RETRY-9); `503` when it cannot be.
    Saturated,
    /// The connection broke after it was established. `client_body_failed`: reading the
    /// client's streamed body failed first, so the client is the one who went away (C-PATH-9).
    Transport {
        /// The client's streamed request body broke off before the upstream connection did.
        client_body_failed: bool,
    },
}

/// One fact about the exchange, as plain data (record, replay, fuzz).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Time passed: the deadline of [`Exchange::poll_timeout`](super::Exchange::poll_timeout)
    /// may have come. Early or spurious timeouts are no-ops.
    Timeout,
    /// The gate handed this request's ticket a slot (the adapter was woken for it).
    GateHandoff,
    /// The shared store answered the [`Output::StoreTake`](super::Output::StoreTake).
    StoreAnswer(Result<Take, StoreFailure>),
    /// The request body asked for by [`Output::BufferBody`](super::Output::BufferBody) is read.
    BodyBuffered,
    /// The request body could not be read: while buffering it, or, while an attempt streams
    /// it, because it broke its framing (a malformed chunk). Either way `400`; a
    /// streaming attempt is cancelled (neutral for the backend's health) and not retried.
    BodyUnreadable,
    /// While an attempt streamed the request body, the client stopped sending it and
    /// `server.read_timeout` passed (nginx's `client_body_timeout`): the client's fault, `408`;
    /// the attempt is cancelled (neutral for the backend's health and breaker) and not retried.
    BodyTimeout,
    /// The current attempt's response head arrived.
    ResponseHead {
        /// Its status.
        status: u16,
    },
    /// The current attempt's response head arrived and is a gRPC trailers-only answer of
    /// `UNAVAILABLE` (`grpc-status: 14` in a head that ends the stream): judged as a `503` for
    /// retries and the breaker, passed on as it is when not retried (C-GRPC-3). Build it with
    /// [`Input::response_head`].
    UnavailableHead {
        /// Its HTTP status.
        status: u16,
    },
    /// The current attempt's response head arrived and is a `503` whose `Retry-After` asks its
    /// backend to be left alone for `after` (C-RETRY-11): the backend is pushed back (within
    /// `retry_after_max` and C-OUT-2's cap), then the head is judged as a
    /// [`Input::ResponseHead`]. Build it with [`Input::response_head`].
    PushbackHead {
        /// Its status (`503`).
        status: u16,
        /// How long it asked for, not capped yet.
        after: core::time::Duration,
    },
    /// The current attempt failed before a response head.
    SendFailed(SendFailure),
    /// A fact about attempt `attempt` in particular: what an adapter running two attempts at
    /// once (a hedge, C-HEDGE-1) feeds. The facts without a number are about the earlier
    /// attempt awaiting its head.
    Attempt {
        /// The attempt ([`Send::attempt`](super::Send::attempt)).
        attempt: u32,
        /// What happened to it.
        fact: AttemptFact,
    },
    /// The backend's path prefix and the target make an upstream target too long to send.
    TargetTooLong,
    /// The delivered response's body ended (or the upgraded connection closed, C-PATH-8).
    BodyEnd(BodyEnd),
    /// The delivered response's `grpc-status` ([`crate::grpc::status_code`]), in its trailers
    /// or its trailers-only head; fed just before [`Input::BodyEnd`]. A failing status counts
    /// for outlier detection alone (C-OUT-1).
    GrpcStatus(u8),
    /// The client went away (C-PATH-9, C-LOAD-1: a queued client leaves the queue at once).
    ClientGone,
}

/// What happened to one attempt ([`Input::Attempt`]): the attempt facts of [`Input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptFact {
    /// [`Input::ResponseHead`].
    Head {
        /// Its status.
        status: u16,
    },
    /// [`Input::UnavailableHead`].
    UnavailableHead {
        /// Its HTTP status.
        status: u16,
    },
    /// [`Input::PushbackHead`].
    PushbackHead {
        /// Its status (`503`).
        status: u16,
        /// How long it asked for, not capped yet.
        after: core::time::Duration,
    },
    /// [`Input::SendFailed`].
    Failed(SendFailure),
}

impl AttemptFact {
    /// The fact of `input`, if it is one about an attempt's head or failure.
    #[must_use]
    pub const fn of(input: Input) -> Option<AttemptFact> {
        Some(match input {
            Input::ResponseHead { status } => AttemptFact::Head { status },
            Input::UnavailableHead { status } => AttemptFact::UnavailableHead { status },
            Input::PushbackHead { status, after } => AttemptFact::PushbackHead { status, after },
            Input::SendFailed(f) => AttemptFact::Failed(f),
            Input::Attempt { fact, .. } => fact,
            _ => return None,
        })
    }

    /// This fact as the input about attempt `attempt`.
    #[must_use]
    pub const fn about(self, attempt: u32) -> Input {
        Input::Attempt {
            attempt,
            fact: self,
        }
    }
}

impl Input {
    /// The input for a response head of `status` with `headers`, whose stream ended with the
    /// head when `end_stream`, received at wall-clock time `wall` (since the Unix epoch: a
    /// `Retry-After` date is read against it). C-GRPC-3: a trailers-only `grpc-status: 14` is
    /// [`Input::UnavailableHead`]; C-RETRY-11: a `503` with a `Retry-After` delay is
    /// [`Input::PushbackHead`]; any other head is [`Input::ResponseHead`].
    #[must_use]
    pub fn response_head<H: crate::headers::HeaderLines + ?Sized>(
        status: u16,
        headers: &H,
        end_stream: bool,
        wall: core::time::Duration,
    ) -> Input {
        if crate::grpc::trailers_only_unavailable(headers, end_stream) {
            Input::UnavailableHead { status }
        } else if let Some(after) = crate::pushback::requested(status, headers, wall) {
            Input::PushbackHead { status, after }
        } else {
            Input::ResponseHead { status }
        }
    }
}
