//! A hedged request from an HTTP/2 client (C-HEDGE-1): the attempt, and the hedge the engine
//! sends beside it when no response head came within `retry.hedge_delay`, run at once, each on
//! its own backend in that backend's protocol (an HTTP/1 connection, or a stream on the
//! backend's shared HTTP/2 connections). The engine is fed each attempt's head or failure by
//! number (`Input::Attempt`) and decides the winner; the loser is dropped (`Output::Cancel`):
//! its HTTP/1 connection closed, never back in the idle pool, or its HTTP/2 stream reset with
//! `CANCEL`, the connection kept. Only the winner's response reaches the client.
//!
//! A hedged request's body is none or buffered (the engine hedges nothing else), so each
//! attempt is made from the request's prepared headers and buffered body, copied. hyper drops
//! this future when the client goes away (C-PATH-9): both attempts end with it.

use std::future::poll_fn;
use std::task::Poll;

use weir_core::exchange::{AttemptFact, Stage};

use super::*;

/// How one attempt of the race ended: what the engine is told of it, and its head if one
/// came.
type Outcome = (Input, Last);

/// One attempt in flight.
struct Leg<'a> {
    attempt: u32,
    run: Pin<Box<dyn Future<Output = Outcome> + std::marker::Send + 'a>>,
}

/// What the wait came to.
enum Step {
    Timer,
    Leg(usize, Box<Outcome>),
}

impl<'a> Io<'a> {
    /// Whether the attempt `s` runs as a race with a hedge (C-HEDGE-1): the engine may hedge
    /// it.
    pub(super) fn races(&self, s: &Send) -> bool {
        !s.hedge && self.x().hedge_at().is_some()
    }

    /// Run attempt `s` and the hedge the engine may send beside it until the engine decides:
    /// the winner's response head (for the delivery), the engine's next output kept for
    /// [`Io::next`].
    pub(super) async fn race(&mut self, s: Send, up: &mut Outgoing) -> Last {
        let ctx = self.ctx;
        let data_plane = &ctx.data_plane;
        // C-RETRY-10: a retry waits out its backoff first.
        let at = data_plane.clock.deadline(s.at);
        if at > data_plane.rt.now() {
            data_plane.rt.sleep_until(at).await;
        }
        if !up.prepared {
            self.prepare(up);
        }
        let mut legs: Vec<Leg<'a>> = Vec::with_capacity(2);
        self.start_leg(&s, up, &mut legs);
        // The head of the attempt the engine was just told about, until it decides on it.
        let mut won: Option<(u32, Last)> = None;
        loop {
            while let Some(out) = self.next() {
                match out {
                    Output::Send(h) if h.hedge => self.start_leg(&h, up, &mut legs),
                    Output::Cancel { attempt } => {
                        // C-HEDGE-1: the loser is dropped here: its HTTP/1 connection closed,
                        // its HTTP/2 stream reset with `CANCEL`.
                        legs.retain(|l| l.attempt != attempt);
                        if won.as_ref().is_some_and(|(a, _)| *a == attempt) {
                            won = None;
                        }
                    }
                    Output::Deliver(d) => {
                        let last = won
                            .take()
                            .filter(|(a, _)| *a == d.deliver.attempt)
                            .and_then(|(_, last)| last);
                        self.held = Some(Output::Deliver(d));
                        return last;
                    }
                    other => {
                        self.held = Some(other);
                        return None;
                    }
                }
            }
            won = None;
            if legs.is_empty() && !matches!(self.x().stage(), Stage::Awaiting { .. }) {
                return None;
            }
            let step = {
                let deadline = self
                    .x()
                    .poll_timeout()
                    .map(|d| data_plane.clock.deadline(d));
                let mut timer = deadline.map(|at| data_plane.rt.sleep_until(at));
                poll_fn(|cx| {
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
                Step::Timer => self.feed(Input::Timeout),
                Step::Leg(i, outcome) => {
                    let leg = legs.swap_remove(i);
                    let (input, last) = *outcome;
                    won = Some((leg.attempt, last));
                    if let Some(fact) = AttemptFact::of(input) {
                        self.feed(fact.about(leg.attempt));
                    }
                }
            }
        }
    }

    /// Start attempt `s` of the race on its backend, or tell the engine why it cannot be sent.
    fn start_leg(&mut self, s: &Send, up: &mut Outgoing, legs: &mut Vec<Leg<'a>>) {
        let ctx: &'a Arc<DownstreamCtx> = self.ctx;
        let data_plane = &ctx.data_plane;
        let handles = self.x().handles(s.backend);
        let Some((target, metrics)) =
            handles.and_then(|h| Some((h.target.clone()?, Arc::clone(&h.metrics))))
        else {
            self.feed(AttemptFact::Failed(SendFailure::Connect).about(s.attempt));
            return;
        };
        let Ok(uri) = upstream_uri(target.base(), &self.method, &self.uri) else {
            self.feed(Input::TargetTooLong);
            return;
        };
        // The headers and the buffered body are copied: the other attempt, or a retry, needs
        // them too.
        let mut req = request(data_plane, self.method.clone(), uri, &target, s, up, false);
        // C-GRPC-2: the backend is told what remains of the call's deadline.
        if let Some(v) = self
            .x()
            .upstream_grpc_timeout(s.at)
            .and_then(|t| HeaderValue::from_bytes(t.to_bytes().as_bytes()).ok())
        {
            // New on every call: kept out of the HPACK table, as the plain attempt's is.
            let mut v = v;
            unindexed(&mut v);
            req.headers_mut().insert(GRPC_TIMEOUT, v);
        }
        let client = ctx.downstream_ends();
        let begun = data_plane.rt.now();
        let run = async move {
            let sent = data_plane
                .upstream
                .send_lent_with(&target, Some(&metrics), move || req, begun, client)
                .await;
            let failure = match sent {
                Ok((resp, lent)) => {
                    let end = resp.body().is_end_stream();
                    let input = Input::response_head(
                        resp.status().as_u16(),
                        resp.headers(),
                        end,
                        crate::base::clock::Clock::wall(),
                    );
                    return (input, Some((resp, lent, target)));
                }
                Err(SendError::Connect(_)) => SendFailure::Connect,
                Err(SendError::Saturated) => SendFailure::Saturated,
                // The request is made again from the prepared headers and buffered body.
                Err(SendError::Refused(_)) => SendFailure::Refused { held: true },
                Err(SendError::Transport(_)) => SendFailure::Transport {
                    client_body_failed: false,
                },
            };
            tracing::debug!(backend = target.id(), failure = ?failure, "upstream attempt failed");
            (Input::SendFailed(failure), None)
        };
        legs.push(Leg {
            attempt: s.attempt,
            run: Box::pin(run),
        });
    }
}
