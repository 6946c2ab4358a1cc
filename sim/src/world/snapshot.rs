//! Configuration reloads in the middle of requests (C-CONF-4) and the request's timers
//! (C-PATH-12, C-PATH-7, C-RETRY-5).
//!
//! A configuration reload builds the next runtime from the one in force
//! (`Runtime::build(.., previous)`, as weir-proxy's reload does) with the generation's retry
//! settings, gives every pool a new snapshot over the same backends (`Pool::new(.., previous)`,
//! state carried over) and publishes: new exchanges get it, running ones keep theirs. The world
//! remembers what it handed each exchange at creation ([`Made`]) and checks every output against
//! it (`one_snapshot`): the runtime is the same `Arc`, the pool is the one published then, and the
//! attempts and header deadlines follow that generation's `max_attempts` and `per_try_timeout`.
//!
//! Timers (`request_timers`): a buffered body must be read by `arrival + read_timeout` (a slow
//! client gets `408` exactly then), a response body must end by `arrival + write_timeout` (aborted
//! exactly then), and response headers must come by `sent + min(per_try_timeout,
//! response_header_timeout)` (the attempt times out exactly then). The connection's own timers
//! (header read, idle keep-alive) are weir-proxy's watchdog, not a core machine yet: not here.

use core::time::Duration;

use weir_core::Instant;
use weir_core::exchange::{Input, Send, Stage as XStage};
use weir_core::response::ClientError;

mod made;

pub(super) use made::Made;

use super::{Arc, Ev, World, config};
use crate::backend::uniform;
use crate::report::Invariant;
use crate::trace::Rec;

/// `server.upstream.response_header_timeout` when the scenario does not set it (the default).
const DEFAULT_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

impl World<'_> {
    /// What a request arriving now is created from.
    pub(super) fn made_now(&mut self) -> Made {
        let upload_at = self
            .s
            .timers
            .map(|t| self.now + uniform(&mut self.rng_clients, t.upload));
        Made {
            runtime: Some(Arc::clone(&self.runtime)),
            pool: None,
            generation: self.generation,
            reloads: self.stats.config_reloads,
            upload_at,
            header_deadline: None,
            write_deadline: None,
        }
    }

    /// `max_attempts` and `per_try_timeout` of generation `generation`.
    pub(super) fn generation_retry(&self, generation: usize) -> (u32, Duration) {
        match self.s.generations.get(generation) {
            Some(g) => (g.max_attempts, g.per_try_timeout),
            None => (self.s.retry.max_attempts, self.s.retry.per_try_timeout),
        }
    }

    /// Publish configuration generation `generation` (C-CONF-4).
    pub(super) fn config_reload(&mut self, generation: usize) {
        let rt = match config::reload(
            &self.s,
            generation,
            &self.base,
            self.now,
            &mut self.rng_core,
        ) {
            Ok(rt) => rt,
            Err(e) => {
                return self.fail(
                    Invariant::OneSnapshot,
                    format!("configuration generation {generation} failed to build: {e}"),
                );
            }
        };
        self.base = Arc::new(rt);
        for p in 0..self.pools.len() {
            let slot = self.pools[p];
            let old = Arc::clone(&self.snapshots[slot.snapshot].pool);
            let sims: Vec<usize> = self.snapshots[slot.snapshot]
                .tracked
                .iter()
                .map(|&t| self.tracked[t].sim)
                .collect();
            let pool = match self.new_pool(p, &sims, Some(&old)) {
                Ok(pool) => pool,
                Err(e) => {
                    return self.fail(Invariant::OneSnapshot, format!("pool {p}: {e}"));
                }
            };
            let snapshot = self.add_snapshot(pool);
            self.pools[p].snapshot = snapshot;
            if let Some(r) = self.runners.get_mut(&slot.runner) {
                r.snapshot = snapshot;
            }
        }
        self.generation = generation;
        self.stats.config_reloads += 1;
        self.publish();
        self.record(Rec::ConfigReload {
            generation: generation as u32,
        });
    }

    /// Right after creation: the exchange selects from a pool published now.
    pub(super) fn check_created(&mut self, req: usize) {
        let Some(x) = self.requests[req].x.as_ref() else {
            return;
        };
        let pool = Arc::clone(x.pool());
        let published = self
            .pools
            .iter()
            .any(|p| Arc::ptr_eq(&self.snapshots[p.snapshot].pool, &pool));
        if !published {
            self.fail(
                Invariant::OneSnapshot,
                format!("request {req} selects from a pool snapshot that is not published"),
            );
        }
        self.requests[req].made.pool = Some(pool);
    }

    /// After every call into the exchange: it still reads the runtime and pool it was made with.
    pub(super) fn check_same_snapshot(&mut self, req: usize) {
        let r = &self.requests[req];
        let (Some(x), Some(rt), Some(pool)) = (r.x.as_ref(), &r.made.runtime, &r.made.pool) else {
            return;
        };
        if !Arc::ptr_eq(x.runtime(), rt) || !Arc::ptr_eq(x.pool(), pool) {
            let generation = r.made.generation;
            self.fail(
                Invariant::OneSnapshot,
                format!("request {req} no longer reads the snapshot of generation {generation}"),
            );
        }
    }

    /// An attempt is sent: its header deadline is `now + min(per_try_timeout,
    /// response_header_timeout)` of the request's own generation (C-RETRY-5, C-CONF-4).
    pub(super) fn check_send(&mut self, req: usize, send: &Send) {
        let (_, per_try) = self.generation_retry(self.requests[req].made.generation);
        let rht = self.s.timers.map_or(DEFAULT_RESPONSE_HEADER_TIMEOUT, |t| {
            t.response_header_timeout
        });
        // C-RETRY-10: the send waits out a retry's full-jitter backoff, below
        // min(backoff_max, backoff_base × 2^(k−1)) for retry k, and none before a first attempt.
        let waited = send.at.saturating_since(self.now);
        let cap = self.requests[req].x.as_ref().map_or(Duration::ZERO, |x| {
            x.runtime().retry().backoff_cap(send.attempt - 1)
        });
        if waited > Duration::ZERO && waited >= cap {
            self.fail(
                Invariant::RequestTimers,
                format!(
                    "request {req} attempt {}: backoff {waited:?} outside [0, {cap:?})",
                    send.attempt
                ),
            );
        }
        let expected = send.at.max(self.now) + per_try.min(rht);
        let r = &mut self.requests[req];
        let deadline = r.x.as_ref().and_then(|x| x.poll_timeout());
        r.made.header_deadline = Some(expected);
        let generation = r.made.generation;
        if deadline != Some(expected) {
            let invariant = if self.s.generations.is_empty() {
                Invariant::RequestTimers
            } else {
                Invariant::OneSnapshot
            };
            self.fail(
                invariant,
                format!(
                    "request {req} attempt {}: header deadline {deadline:?}, expected {expected:?} \
                     (generation {}'s per-try {per_try:?}, response_header_timeout {rht:?})",
                    send.attempt, generation
                ),
            );
        }
    }

    /// An attempt timed out: exactly at its header deadline (`expected`, noted at its sending).
    pub(super) fn check_header_timeout(&mut self, req: usize, expected: Option<Instant>) {
        self.stats.timer_expiries += 1;
        if expected != Some(self.now) {
            self.fail(
                Invariant::RequestTimers,
                format!(
                    "request {req}: attempt timed out at {:?}, deadline {expected:?}",
                    self.now
                ),
            );
        }
    }

    /// A head arrives for the current attempt: not after its deadline.
    pub(super) fn check_head_in_time(&mut self, req: usize) {
        if let Some(d) = self.requests[req].made.header_deadline
            && self.now > d
        {
            self.fail(
                Invariant::RequestTimers,
                format!("request {req}: still waiting for headers past the deadline {d:?}"),
            );
        }
    }

    /// The exchange asks for the body to buffer: with timers, the client sends it slowly.
    pub(super) fn buffer_body(&mut self, req: usize) {
        let Some(t) = self.s.timers else {
            self.handed.push_back((req, Input::BodyBuffered));
            return;
        };
        let r = &self.requests[req];
        let expected = r.arrival + t.read_timeout;
        let deadline = r.x.as_ref().and_then(|x| x.poll_timeout());
        let at = r.made.upload_at.unwrap_or(self.now);
        if deadline != Some(expected) {
            self.fail(
                Invariant::RequestTimers,
                format!("request {req}: body read bounded by {deadline:?}, expected {expected:?}"),
            );
        }
        self.schedule(at, Ev::Uploaded { req });
    }

    /// The slow client's body is in.
    pub(super) fn uploaded(&mut self, req: usize) {
        let Some(x) = self.requests[req].x.as_ref() else {
            return;
        };
        if let XStage::Buffering { deadline } = x.stage() {
            if deadline.is_some_and(|d| self.now > d) {
                return self.fail(
                    Invariant::RequestTimers,
                    format!("request {req}: still reading its body past {deadline:?}"),
                );
            }
            self.input(req, Input::BodyBuffered);
        }
    }

    /// weir answered a client error: a body timeout comes exactly at `arrival + read_timeout`,
    /// and only when the body was not in by then.
    pub(super) fn check_client_answer(&mut self, req: usize, e: ClientError) {
        let (Some(t), ClientError::BodyTimeout) = (self.s.timers, e) else {
            return;
        };
        self.stats.timer_expiries += 1;
        let r = &self.requests[req];
        let deadline = r.arrival + t.read_timeout;
        if self.now != deadline || r.made.upload_at.is_some_and(|u| u <= deadline) {
            self.fail(
                Invariant::RequestTimers,
                format!(
                    "request {req}: 408 at {:?}; read deadline {deadline:?}, body in at {:?}",
                    self.now, r.made.upload_at
                ),
            );
        }
    }

    /// A response is delivered: its body must end by `arrival + write_timeout`.
    pub(super) fn check_delivery(&mut self, req: usize, write_deadline: Option<Instant>) {
        let r = &mut self.requests[req];
        let expected = self.s.timers.map(|t| r.arrival + t.write_timeout);
        r.made.write_deadline = expected.map(|d| d.max(self.now));
        if write_deadline != expected {
            self.fail(
                Invariant::RequestTimers,
                format!(
                    "request {req}: response body bounded by {write_deadline:?}, expected \
                     {expected:?}"
                ),
            );
        }
    }

    /// The exchange aborted the response body: exactly at its write deadline.
    pub(super) fn check_abort(&mut self, req: usize) {
        self.stats.timer_expiries += 1;
        let expected = self.requests[req].made.write_deadline;
        if expected != Some(self.now) {
            self.fail(
                Invariant::RequestTimers,
                format!(
                    "request {req}: body aborted at {:?}, deadline {expected:?}",
                    self.now
                ),
            );
        }
    }

    /// A streaming body ends or its client leaves: not after the write deadline.
    pub(super) fn check_still_writing(&mut self, req: usize) {
        if let Some(d) = self.requests[req].made.write_deadline
            && self.now > d
        {
            self.fail(
                Invariant::RequestTimers,
                format!("request {req}: its response body still streams past {d:?}"),
            );
        }
    }
}
