//! A hedged request (C-HEDGE-1): the attempt, and the hedge the engine sends beside it when no
//! response head came within `retry.hedge_delay`, run at once, each in its backend's protocol:
//! on its own HTTP/1 connection, or as a stream on the backend's shared HTTP/2 connections
//! (`protocol: h2c`/`h2`, C-GRPC-1, the request translated as `request::to_h2` does), so a
//! pool that mixes both races any pair. The engine is fed each attempt's head or failure by
//! number (`Input::Attempt`) and decides the winner; the loser is dropped (`Output::Cancel`):
//! an HTTP/1 connection closed and never back in the idle pool, an HTTP/2 stream reset with
//! `CANCEL` (hyper resets a stream whose response is dropped unanswered, or whose body is
//! dropped unread), its connection kept for other streams. Only the winner's head and body
//! reach the client: an attempt's bytes stay in its own connection's buffer (or its stream)
//! until the engine delivers them.
//!
//! A hedged request's body is none or buffered (the engine hedges nothing else), so an attempt
//! is its head and body in one write (HTTP/1) or one request (HTTP/2) and the wait for its
//! head; interim heads are not passed on (two backends' `100`/`103` heads cannot both go to the
//! client, and the winner is not known yet). The client's socket is watched meanwhile
//! (C-PATH-9).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use http::Request;
use weir_core::exchange::AttemptFact;

use super::super::attempt::send_head;
use super::*;
use crate::observe::metrics::BackendMetrics;
use crate::services::upstream::{SendError, Target as UpTarget, UpBody};

/// An attempt's final head, on what carries it: its HTTP/1 connection (with the head's parse)
/// or its HTTP/2 stream. The HTTP/1 head is not boxed: it moves into the request's `last` as
/// it is (the outcome holding it is boxed once, in [`Step`]).
#[allow(clippy::large_enum_variant)]
enum Head {
    H1(Up, upstream_conn::Kept),
    H2(Box<H2Up>),
}

/// How one attempt of the race ended: what the engine is told of it, and its head if one
/// came.
type Outcome = (Input, Option<Head>);

/// One attempt in flight.
struct Leg<'a> {
    attempt: u32,
    run: Pin<Box<dyn Future<Output = Outcome> + std::marker::Send + 'a>>,
}

/// What the wait came to (an attempt's outcome boxed: it holds the connection and its head's
/// parse, and only hedged requests take this path).
enum Step {
    Gone,
    Timer,
    Leg(usize, Box<Outcome>),
}

impl<'a> Req<'a> {
    /// Whether the attempt `s` runs as a race with a hedge (C-HEDGE-1): the engine may hedge
    /// it. Either attempt may be on an HTTP/1 or an HTTP/2 backend.
    pub(super) fn races(&mut self, s: &Send) -> bool {
        !s.hedge && self.exchange().hedge_at().is_some()
    }

    /// Run attempt `s` and the hedge the engine may send beside it, until the engine decides:
    /// the winner's head and what carries it into `last` (HTTP/1) or `last_h2` (HTTP/2), and
    /// the engine's next output (the delivery, an answer, a retry) kept for [`Req::next`].
    pub(super) async fn race(
        &mut self,
        c: &mut DownstreamConn,
        s: &Send,
        last: &mut Option<Up>,
        last_h2: &mut Option<Box<H2Up>>,
    ) -> Result<(), Gone> {
        let data_plane = self.data_plane;
        wait_backoff(data_plane, c, s).await?;
        let rctx = ResponseContext {
            head: self.head.is_head(),
            upgrade: self.exchange().upgrade_requested(),
        };
        let mut legs: Vec<Leg<'a>> = Vec::with_capacity(2);
        self.start_leg(c, s, rctx, &mut legs);
        // The head of the attempt the engine was just told about, until it decides on it.
        let mut won: Option<(u32, Head)> = None;
        loop {
            while let Some(out) = self.next() {
                match out {
                    Output::Send(h) if h.hedge => self.start_leg(c, &h, rctx, &mut legs),
                    Output::Cancel { attempt } => {
                        // C-HEDGE-1: the loser is dropped here: its HTTP/1 connection closed
                        // unread, its HTTP/2 stream reset with `CANCEL`.
                        legs.retain(|l| l.attempt != attempt);
                        if won.as_ref().is_some_and(|(a, _)| *a == attempt) {
                            won = None;
                        }
                    }
                    Output::Deliver(d) => {
                        if let Some((attempt, head)) = won.take()
                            && attempt == d.deliver.attempt
                        {
                            match head {
                                Head::H1(up, kept) => {
                                    *last = Some(up);
                                    self.kept = kept;
                                }
                                Head::H2(up) => *last_h2 = Some(up),
                            }
                        }
                        self.held = Some(Output::Deliver(d));
                        return Ok(());
                    }
                    other => {
                        self.held = Some(other);
                        return Ok(());
                    }
                }
            }
            won = None;
            if legs.is_empty() && !matches!(self.exchange().stage(), Stage::Awaiting { .. }) {
                return Ok(());
            }
            let step = {
                let deadline = self
                    .exchange()
                    .poll_timeout()
                    .map(|d| data_plane.clock.deadline(d));
                let mut timer = deadline.map(|at| data_plane.rt.sleep_until(at));
                let cap = c.cap();
                let mut gone = pin!(relay::until_closed(&mut c.io, &mut c.buf, cap));
                poll_fn(|cx| {
                    if gone.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Step::Gone);
                    }
                    for (i, leg) in legs.iter_mut().enumerate() {
                        if let Poll::Ready(r) = leg.run.as_mut().poll(cx) {
                            return Poll::Ready(Step::Leg(i, Box::new(r)));
                        }
                    }
                    let fired = timer
                        .as_mut()
                        .is_some_and(|t| t.as_mut().poll(cx).is_ready());
                    if fired {
                        Poll::Ready(Step::Timer)
                    } else {
                        Poll::Pending
                    }
                })
                .await
            };
            match step {
                // The drop guard tells the engine; both attempts end with `legs` (connection
                // closed, stream reset).
                Step::Gone => return Err(Gone),
                Step::Timer => self.feed(Input::Timeout),
                Step::Leg(i, outcome) => {
                    let leg = legs.swap_remove(i);
                    let (input, head) = *outcome;
                    won = head.map(|h| (leg.attempt, h));
                    if let Some(fact) = AttemptFact::of(input) {
                        self.feed(fact.about(leg.attempt));
                    }
                }
            }
        }
    }

    /// Start attempt `s` of the race on its backend, in its protocol, or tell the engine why it
    /// cannot be sent.
    fn start_leg(
        &mut self,
        c: &mut DownstreamConn,
        s: &Send,
        rctx: ResponseContext,
        legs: &mut Vec<Leg<'a>>,
    ) {
        let data_plane: &'a DataPlane = self.data_plane;
        let handles = self.exchange().handles(s.backend);
        let Some((target, metrics)) =
            handles.and_then(|h| Some((h.target.clone()?, Arc::clone(&h.metrics))))
        else {
            self.feed(AttemptFact::Failed(SendFailure::Connect).about(s.attempt));
            return;
        };
        let Ok(upstream_target) = upstream_target(target.base(), self.log.method, self.pq) else {
            self.feed(Input::TargetTooLong);
            return;
        };
        let client = self.client;
        let run: Pin<Box<dyn Future<Output = Outcome> + std::marker::Send + 'a>> =
            if target.protocol().is_h2() {
                let path = String::from_utf8_lossy(&upstream_target).into_owned();
                let mut req = Request::new(match s.body {
                    SendBody::Buffered => UpBody::full(self.decoded_buffer()),
                    SendBody::Empty | SendBody::Stream { .. } => UpBody::Empty,
                });
                *req.method_mut() = self.log.method.clone();
                *req.uri_mut() = path.parse().unwrap_or_else(|_| http::Uri::from_static("/"));
                *req.headers_mut() = self.h2_headers(&target, s.at);
                Box::pin(one_h2(data_plane, target, metrics, req, client))
            } else {
                self.write_head(c, &target, &upstream_target, (s.body, s.at), false);
                let bytes = c.up_out.clone();
                Box::pin(one(data_plane, target, metrics, bytes, client, rctx, s.at))
            };
        legs.push(Leg {
            attempt: s.attempt,
            run,
        });
    }
}

/// One attempt of a race on an HTTP/1 backend: the request's `bytes` on a pooled or new
/// connection to `target` ([`send_head`], as a lone attempt sends), then its final head
/// (interim ones dropped).
async fn one(
    data_plane: &DataPlane,
    target: Arc<UpTarget>,
    metrics: Arc<BackendMetrics>,
    bytes: Vec<u8>,
    client: DownstreamEnds,
    rctx: ResponseContext,
    now: weir_core::Instant,
) -> Outcome {
    let head = async {
        let mut conn = send_head(data_plane, &target, &metrics, &bytes, client, now).await?;
        let mut kept = None;
        loop {
            let info =
                poll_fn(|cx| upstream_conn::poll_head(&mut conn, cx, rctx, &mut kept)).await?;
            if !info.interim {
                return Ok::<_, UpError>((conn, info, kept));
            }
            conn.buf.consume(info.head_len);
        }
    };
    let failure = match head.await {
        Ok((conn, info, kept)) => {
            let up = Up {
                conn,
                info,
                target,
                pump: None,
            };
            let input = head_input(&up, &kept, rctx);
            return (input, Some(Head::H1(up, kept)));
        }
        Err(UpError::Bad(h1::BadResponse::Status(status))) => {
            return (Input::ResponseHead { status }, None);
        }
        Err(UpError::Connect(e)) => (SendFailure::Connect, e.to_string()),
        Err(e) => (
            SendFailure::Transport {
                client_body_failed: false,
            },
            e.to_string(),
        ),
    };
    tracing::debug!(backend = target.id(), error = %failure.1, "upstream attempt failed");
    (Input::SendFailed(failure.0), None)
}

/// One attempt of a race on an HTTP/2 backend: `req` as a stream on one of its connections
/// (a new one if none has room), then its head. Dropped before its head (it lost), the stream
/// is reset with `CANCEL`; its connection stays for other streams.
async fn one_h2(
    data_plane: &DataPlane,
    target: Arc<UpTarget>,
    metrics: Arc<BackendMetrics>,
    req: Request<UpBody>,
    client: DownstreamEnds,
) -> Outcome {
    let begun = data_plane.rt.now();
    let sent = data_plane
        .upstream
        .send_lent_with(&target, Some(&metrics), move || req, begun, client)
        .await;
    let failure = match sent {
        Ok((resp, lent)) => {
            let end = hyper::body::Body::is_end_stream(resp.body());
            let input = Input::response_head(
                resp.status().as_u16(),
                resp.headers(),
                end,
                crate::base::clock::Clock::wall(),
            );
            let up = H2Up { resp, lent, target };
            return (input, Some(Head::H2(Box::new(up))));
        }
        Err(SendError::Connect(e)) => (SendFailure::Connect, e.to_string()),
        // The request is made again from the client's head and its buffered body.
        Err(SendError::Refused(e)) => (SendFailure::Refused { held: true }, e.to_string()),
        Err(SendError::Saturated) => (SendFailure::Saturated, "saturated".to_string()),
        Err(SendError::Transport(e)) => (
            SendFailure::Transport {
                client_body_failed: false,
            },
            e.to_string(),
        ),
    };
    tracing::debug!(backend = target.id(), error = %failure.1, "upstream attempt failed");
    (Input::SendFailed(failure.0), None)
}
