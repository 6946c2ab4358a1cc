//! A hedged request (C-HEDGE-1): the attempt, and the hedge the engine sends beside it when no
//! response head came within `retry.hedge_delay`, run at once on their own connections. The
//! engine is fed each attempt's head or failure by number (`Input::Attempt`) and decides the
//! winner; the loser's connection is dropped, so closed and never back in the idle pool
//! (`Output::Cancel`). Only the winner's head and body reach the client: an attempt's bytes stay
//! in its own connection's buffer until the engine delivers them.
//!
//! A hedged request's body is none or buffered (the engine hedges nothing else), so an attempt
//! is its head and body in one write and the wait for its head; interim heads are not passed on
//! (two backends' `100`/`103` heads cannot both go to the client, and the winner is not known
//! yet). The client's socket is watched meanwhile (C-PATH-9).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use weir_core::exchange::AttemptFact;

use super::*;
use crate::observe::metrics::BackendMetrics;
use crate::services::upstream::Target as UpTarget;

/// How one attempt of the race ended: its final head on its connection, or why not.
type Outcome = Result<
    (
        upstream_conn::UpConn,
        upstream_conn::HeadInfo,
        upstream_conn::Kept,
    ),
    UpError,
>;

/// One attempt in flight.
struct Leg<'a> {
    attempt: u32,
    target: Arc<UpTarget>,
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
    /// Whether the attempt `s` runs as a race with a hedge (C-HEDGE-1): the engine may hedge it,
    /// and its backend speaks HTTP/1 (an HTTP/2 backend's attempt runs alone, unhedged).
    pub(super) fn races(&mut self, s: &Send) -> bool {
        if s.hedge || self.exchange().hedge_at().is_none() {
            return false;
        }
        let h1 = self
            .exchange()
            .handles(s.backend)
            .and_then(|h| h.target.as_ref())
            .is_some_and(|t| !t.protocol().is_h2());
        if !h1 {
            self.exchange().forgo_hedging();
        }
        h1
    }

    /// Run attempt `s` and the hedge the engine may send beside it, until the engine decides:
    /// the winner's head and connection into `last` and the engine's next output (the
    /// delivery, an answer, a retry) kept for [`Req::next`].
    pub(super) async fn race(
        &mut self,
        c: &mut DownstreamConn,
        s: &Send,
        last: &mut Option<Up>,
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
        let mut won: Option<(u32, Up, upstream_conn::Kept)> = None;
        loop {
            while let Some(out) = self.next() {
                match out {
                    Output::Send(h) if h.hedge => self.start_leg(c, &h, rctx, &mut legs),
                    Output::Cancel { attempt } => {
                        // C-HEDGE-1: the loser's connection is dropped here, closed unread.
                        legs.retain(|l| l.attempt != attempt);
                        if won.as_ref().is_some_and(|(a, _, _)| *a == attempt) {
                            won = None;
                        }
                    }
                    Output::Deliver(d) => {
                        if let Some((attempt, up, kept)) = won.take()
                            && attempt == d.deliver.attempt
                        {
                            *last = Some(up);
                            self.kept = kept;
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
                // The drop guard tells the engine; both attempts' connections close with `legs`.
                Step::Gone => return Err(Gone),
                Step::Timer => self.feed(Input::Timeout),
                Step::Leg(i, outcome) => {
                    let leg = legs.swap_remove(i);
                    let input = match *outcome {
                        Ok((conn, info, kept)) => {
                            let up = Up {
                                conn,
                                info,
                                target: leg.target,
                                pump: None,
                            };
                            let input = head_input(&up, &kept, rctx);
                            won = Some((leg.attempt, up, kept));
                            input
                        }
                        Err(UpError::Bad(h1::BadResponse::Status(status))) => {
                            Input::ResponseHead { status }
                        }
                        Err(UpError::Connect(e)) => {
                            tracing::debug!(backend = leg.target.id(), error = %e, "upstream attempt failed");
                            Input::SendFailed(SendFailure::Connect)
                        }
                        Err(e) => {
                            tracing::debug!(backend = leg.target.id(), error = %e, "upstream attempt failed");
                            Input::SendFailed(SendFailure::Transport {
                                client_body_failed: false,
                            })
                        }
                    };
                    if let Some(fact) = AttemptFact::of(input) {
                        self.feed(fact.about(leg.attempt));
                    }
                }
            }
        }
    }

    /// Start attempt `s` of the race on its backend, or tell the engine why it cannot be sent.
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
        if target.protocol().is_h2() {
            // A hedge on an HTTP/2 backend of a mixed pool is not run here: the first attempt
            // goes on, and the engine gives the hedge up when that one ends or at its header
            // deadline.
            tracing::debug!(backend = target.id(), "hedge to an HTTP/2 backend not run");
            return;
        }
        let Ok(upstream_target) = upstream_target(target.base(), self.log.method, self.pq) else {
            self.feed(Input::TargetTooLong);
            return;
        };
        self.write_head(c, &target, &upstream_target, (s.body, s.at), false);
        let bytes = c.up_out.clone();
        let (client, at) = (self.client, s.at);
        let run = one(
            data_plane,
            Arc::clone(&target),
            metrics,
            bytes,
            client,
            rctx,
            at,
        );
        legs.push(Leg {
            attempt: s.attempt,
            target,
            run: Box::pin(run),
        });
    }
}

/// One attempt of a race: the request's `bytes` on a pooled or new connection to `target`,
/// then its final head (interim ones dropped).
async fn one(
    data_plane: &DataPlane,
    target: Arc<UpTarget>,
    metrics: Arc<BackendMetrics>,
    bytes: Vec<u8>,
    client: DownstreamEnds,
    rctx: ResponseContext,
    now: weir_core::Instant,
) -> Outcome {
    let up = &data_plane.upstream;
    let mut conn = None;
    while let Some(mut pooled) = upstream_conn::checkout(up, &target, now) {
        if write_all(&mut pooled.io, &bytes).await.is_ok() {
            metrics.upstream_connection(true);
            conn = Some(pooled);
            break;
        }
    }
    let mut conn = match conn {
        Some(conn) => conn,
        None => {
            let mut fresh = upstream_conn::connect(up, &target, client).await?;
            metrics.upstream_connection(false);
            write_all(&mut fresh.io, &bytes)
                .await
                .map_err(UpError::Transport)?;
            fresh
        }
    };
    let mut kept = None;
    loop {
        let info = poll_fn(|cx| upstream_conn::poll_head(&mut conn, cx, rctx, &mut kept)).await?;
        if !info.interim {
            return Ok((conn, info, kept));
        }
        conn.buf.consume(info.head_len);
    }
}
