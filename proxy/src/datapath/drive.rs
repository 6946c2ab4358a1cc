//! The waits of a request's exchange that every data path performs the same way (HTTP/1 in
//! `h1::request`, HTTP/2 in `proxy`): feed a fact, bound a future by the engine's deadline,
//! park at the gate, call the rate-limit store. The engine decides; these wait.

use std::future::Future;
use std::pin::Pin;

use weir_core::bucket::BucketParams;
use weir_core::exchange::{Exchange, Input, Stage, StoreFailure};
use weir_core::rate::ClientKey;

use crate::base::{rt, worker};
use crate::services::ratelimit::StoreError;
use crate::services::state::DataPlane;

/// Feed `input` now.
pub fn feed(data_plane: &DataPlane, x: &mut Exchange, input: Input) {
    feed_at(x, input, data_plane.clock.now());
}

/// Feed `input` at `now`, a reading of the clock the caller took just before and uses for
/// something else too (one reading, not two).
pub fn feed_at(x: &mut Exchange, input: Input, now: weir_core::Instant) {
    worker::with_rng(|rng| x.handle_input(input, now, rng));
}

/// `fut`, bounded by the engine's deadline: `None` when the deadline came and the engine moved
/// on (its `Input::Timeout` was fed); a timer that fired early waits again.
pub async fn bounded<F: Future>(
    data_plane: &DataPlane,
    x: &mut Exchange,
    fut: Pin<&mut F>,
) -> Option<F::Output> {
    bounded_in(data_plane, x, &mut None, fut).await
}

/// [`bounded`] with the timer kept in `slot` across calls (the HTTP/1 path: one per
/// connection, so that a request boxes no timer).
pub async fn bounded_in<F: Future>(
    data_plane: &DataPlane,
    x: &mut Exchange,
    slot: &mut rt::TimerSlot,
    mut fut: Pin<&mut F>,
) -> Option<F::Output> {
    loop {
        let stage = x.stage();
        let Some(deadline) = x.poll_timeout() else {
            return Some(fut.await);
        };
        let at = data_plane.clock.deadline(deadline);
        match rt::timeout_at_in(data_plane.rt, at, slot, fut.as_mut()).await {
            Ok(v) => return Some(v),
            Err(_) => {
                feed(data_plane, x, Input::Timeout);
                if x.stage() != stage {
                    return None;
                }
            }
        }
    }
}

/// C-LOAD-1: park until the slot is handed over or the queue deadline comes.
pub async fn gate_wait(data_plane: &DataPlane, x: &mut Exchange, ticket: u64) {
    while matches!(x.stage(), Stage::Queued { .. }) {
        let deadline = x.poll_timeout();
        let woken = data_plane.admission.wait(ticket, deadline).await;
        feed(
            data_plane,
            x,
            if woken {
                Input::GateHandoff
            } else {
                Input::Timeout
            },
        );
    }
}

/// C-RATE-3, C-RATE-5: one take from the shared store, bounded by `operation_timeout`.
pub async fn store_take(
    data_plane: &DataPlane,
    x: &mut Exchange,
    key: ClientKey,
    bucket: BucketParams,
) {
    let limiter = data_plane.limiter.inner();
    let now = data_plane.clock.now();
    // Boxed: the store clients' futures are kilobytes that a local-store request never runs.
    let mut call = Box::pin(limiter.take(key, &bucket, now));
    match bounded(data_plane, x, call.as_mut()).await {
        Some(answer) => {
            let failure = |e: StoreError| {
                if e.is_partial() {
                    StoreFailure::Partial
                } else {
                    StoreFailure::Error
                }
            };
            feed(data_plane, x, Input::StoreAnswer(answer.map_err(failure)));
        }
        None => {
            let limit = x.runtime().config().rate.operation_timeout();
            limiter.note_error(StoreError::Timeout(limit));
        }
    }
}
