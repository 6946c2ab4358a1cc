//! HTTP/2 backends (C-GRPC-1, C-RETRY-9): each attempt to one is a stream on one of a few
//! connections per backend. Which connection takes the stream, and when another is opened or
//! the attempt waits, is weir-core's `stream_pick` (what weir-proxy's HTTP/2 pool asks); the
//! world plays the backend's side: its `SETTINGS_MAX_CONCURRENT_STREAMS` (learnt a moment after
//! a connection opens, one stream assumed until then, as the proxy does), `REFUSED_STREAM`,
//! `GOAWAY` with a `last_stream_id`, and connections lost with their streams. What the adapter
//! reports is what weir-proxy reports: a refused stream is `SendFailure::Refused { held }`
//! (held when weir has the whole request: no body, or a body it buffered), a lost stream a
//! transport error, a wait for a stream past the connect timeout `SendFailure::Saturated`.

use weir_core::exchange::{Input, SendFailure};
use weir_core::retry::BodyKind;
use weir_core::rng::Rng;
use weir_core::stream_pick::{ConnLoad, Pick, pick};

use super::{Current, Ev, Stage, World};
use crate::backend::{Fault, H2Conn, Mode, Reply, uniform};
use crate::report::Invariant;

/// What weir-proxy assumes a new connection takes before the backend's SETTINGS arrive.
const INITIAL_STREAMS: u32 = 1;

impl World<'_> {
    /// The current attempt of `req` is attempt `attempt` to an HTTP/2 backend and has no stream
    /// and no place in a wait queue yet.
    fn unplaced(&self, req: usize, attempt: u32) -> bool {
        let r = &self.requests[req];
        r.stage == Stage::Waiting
            && r.current
                .is_some_and(|c| c.n == attempt && c.stream.is_none() && !c.waiting && !c.sent)
    }

    /// The adapter sends the attempt: a stream where `stream_pick` says, or a wait.
    pub(super) fn stream_open(&mut self, req: usize, attempt: u32) {
        if !self.unplaced(req, attempt) {
            return;
        }
        if !self.place(req) {
            let Some(cur) = self.requests[req].current.as_mut() else {
                return;
            };
            cur.waiting = true;
            let sim = cur.sim;
            if let Some(h2) = self.backends[sim].h2.as_mut() {
                h2.waiters.push_back((req, attempt));
            }
            self.stats.h2.waits += 1;
            let wait = self
                .s
                .h2
                .map_or(core::time::Duration::ZERO, |h| h.connect_timeout);
            self.schedule(self.now + wait, Ev::StreamWaitEnd { req, attempt });
        }
    }

    /// Place the current attempt of `req` as core's `stream_pick` says: `false` when the
    /// backend is full (every connection at its limit, `max_conns_per_host` of them).
    fn place(&mut self, req: usize) -> bool {
        let Some(cur) = self.requests[req].current else {
            return true;
        };
        let sim = cur.sim;
        let max_conns = self.s.h2.and_then(|h| h.max_conns_per_host);
        let Some(h2) = self.backends[sim].h2.as_ref() else {
            return true;
        };
        let loads: Vec<ConnLoad> = h2
            .conns
            .iter()
            .map(|c| ConnLoad {
                streams: c.streams.len() as u32,
                max_streams: c.known_max,
                accepting: c.goaway.is_none(),
            })
            .collect();
        match pick(&loads, max_conns) {
            Pick::Use(i) => {
                let id = h2.conns[i].id;
                self.open_stream(req, sim, id);
                true
            }
            Pick::Open => {
                if self.backends[sim].mode == Mode::Down {
                    // The connection is refused: nothing was sent.
                    let after = core::time::Duration::from_micros(200)
                        + uniform(&mut self.rng_backends, core::time::Duration::from_millis(2));
                    let attempt = cur.n;
                    self.schedule(
                        self.now + after,
                        Ev::Reply {
                            req,
                            attempt,
                            reply: Reply::Refused,
                        },
                    );
                    return true;
                }
                let settings_after = self
                    .s
                    .h2
                    .map_or(core::time::Duration::ZERO, |h| h.settings_after);
                let Some(h2) = self.backends[sim].h2.as_mut() else {
                    return true;
                };
                let id = h2.next_conn;
                h2.next_conn += 1;
                h2.conns.push(H2Conn {
                    id,
                    streams: std::collections::BTreeMap::new(),
                    next_stream: 1,
                    known_max: INITIAL_STREAMS,
                    goaway: None,
                });
                let open = h2.conns.len();
                self.stats.h2.conns += 1;
                if let Some(max) = max_conns
                    && open > max as usize
                {
                    let detail = format!(
                        "backend {}: {open} HTTP/2 connections, max_conns_per_host {max}",
                        self.backends[sim].id
                    );
                    self.fail(Invariant::StreamLimit, detail);
                }
                self.schedule(
                    self.now + settings_after,
                    Ev::H2Settings {
                        backend: sim,
                        conn: id,
                    },
                );
                self.open_stream(req, sim, id);
                true
            }
            Pick::Full => false,
        }
    }

    /// Open the attempt's stream on connection `conn` of backend `sim` and plan its fate.
    fn open_stream(&mut self, req: usize, sim: usize, conn: u32) {
        let Some(h2) = self.backends[sim].h2.as_mut() else {
            return;
        };
        let limit = h2.max_streams;
        let Some(c) = h2.conn_mut(conn) else {
            return;
        };
        let sid = c.next_stream;
        c.next_stream += 2;
        let Some(cur) = self.requests[req].current.as_mut() else {
            return;
        };
        c.streams.insert(sid, (req, cur.n));
        let open = c.streams.len();
        cur.stream = Some((conn, sid));
        cur.sent = true;
        let attempt = cur.n;
        self.stats.h2.streams += 1;
        if open > limit as usize {
            let detail = format!(
                "backend {} connection {conn}: {open} streams open, the backend's \
                 SETTINGS_MAX_CONCURRENT_STREAMS is {limit}",
                self.backends[sim].id
            );
            self.fail(Invariant::StreamLimit, detail);
        }
        let (_, per_try) = self.generation_retry(self.requests[req].made.generation);
        let plan = self.backends[sim].plan_attempt(per_try, &mut self.rng_backends);
        self.schedule(
            self.now + plan.after,
            Ev::Reply {
                req,
                attempt,
                reply: plan.reply,
            },
        );
    }

    /// A new connection learnt the backend's SETTINGS: it takes more streams.
    pub(super) fn h2_settings(&mut self, backend: usize, conn: u32) {
        let Some(h2) = self.backends[backend].h2.as_mut() else {
            return;
        };
        let max = h2.max_streams;
        if let Some(c) = h2.conn_mut(conn) {
            c.known_max = max;
            self.wake(backend);
        }
    }

    /// Place the waiters of backend `sim`, oldest first, while there is room.
    fn wake(&mut self, sim: usize) {
        loop {
            let Some(&(req, attempt)) = self.backends[sim]
                .h2
                .as_ref()
                .and_then(|h| h.waiters.front())
            else {
                return;
            };
            let waiting = self.requests[req]
                .current
                .is_some_and(|c| c.n == attempt && c.waiting && c.sim == sim);
            if !waiting {
                if let Some(h2) = self.backends[sim].h2.as_mut() {
                    h2.waiters.pop_front();
                }
                continue;
            }
            if let Some(c) = self.requests[req].current.as_mut() {
                c.waiting = false;
            }
            if self.place(req) {
                if let Some(h2) = self.backends[sim].h2.as_mut() {
                    h2.waiters.pop_front();
                }
            } else {
                if let Some(c) = self.requests[req].current.as_mut() {
                    c.waiting = true;
                }
                return;
            }
        }
    }

    /// The connect timeout passed while the attempt waited for a stream: saturated, nothing
    /// sent (C-RETRY-9), no fault of the backend's.
    pub(super) fn stream_wait_end(&mut self, req: usize, attempt: u32) {
        let r = &self.requests[req];
        let Some(cur) = r.current else {
            return;
        };
        if r.stage != Stage::Waiting || cur.n != attempt || !cur.waiting {
            return;
        }
        if let Some(h2) = self.backends[cur.sim].h2.as_mut() {
            h2.waiters.retain(|&w| w != (req, attempt));
        }
        if let Some(c) = self.requests[req].current.as_mut() {
            c.waiting = false;
        }
        self.stats.h2.wait_timeouts += 1;
        self.attempt_input(req, Input::SendFailed(SendFailure::Saturated));
    }

    /// The backend refused the current attempt's stream: what the adapter reports.
    pub(super) fn refused_stream(&mut self, req: usize) -> Input {
        let held = self.held(req);
        if let Some(c) = self.requests[req].current.as_mut() {
            c.unprocessed = true;
        }
        self.stats.h2.refused += 1;
        Input::SendFailed(SendFailure::Refused { held })
    }

    /// Whether the adapter holds the whole request to send it again: no body, or a sized body
    /// within `body_limit` (buffered); a streamed body is gone once sent.
    fn held(&self, req: usize) -> bool {
        match self.requests[req].body {
            BodyKind::None => true,
            BodyKind::Sized(n) => n <= self.s.retry.body_limit,
            BodyKind::Streaming => false,
        }
    }

    /// A retry (attempt `attempt`) follows the current attempt: if bytes of it left weir, the
    /// call must be replayable (its method allowed, its body replayable), unless the backend
    /// processed none of it and weir holds all of it (C-RETRY-1, C-RETRY-9).
    pub(super) fn check_replay(&mut self, req: usize, attempt: u32) {
        let Some(prev) = self.requests[req].current else {
            return;
        };
        let r = &self.requests[req];
        let method = r.method.as_str();
        let replayable = self
            .s
            .retry
            .methods
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method))
            && match r.body {
                BodyKind::None => true,
                BodyKind::Sized(n) => n <= self.s.retry.body_limit,
                BodyKind::Streaming => false,
            };
        let resendable = prev.unprocessed && self.held(req);
        if prev.sent && !resendable && !replayable {
            let detail = format!(
                "request {req} ({method}, body {:?}): attempt {attempt} retries attempt {} whose \
                 bytes reached the backend{}",
                r.body,
                prev.n,
                if prev.unprocessed {
                    " (refused, but weir no longer holds the streamed body)"
                } else {
                    ""
                }
            );
            self.fail(Invariant::ReplaySafe, detail);
        }
    }

    /// The attempt `cur` of `req` is over: its stream ends (a connection after `GOAWAY`
    /// closes with its last stream), or it leaves the wait queue; waiters get the room.
    pub(super) fn release_stream(&mut self, req: usize, cur: Current) {
        let Some(h2) = self.backends[cur.sim].h2.as_mut() else {
            return;
        };
        if cur.waiting {
            h2.waiters.retain(|&w| w != (req, cur.n));
        }
        if let Some((conn, sid)) = cur.stream {
            if let Some(c) = h2.conn_mut(conn) {
                c.streams.remove(&sid);
            }
            h2.conns
                .retain(|c| c.goaway.is_none() || !c.streams.is_empty());
        }
        self.wake(cur.sim);
    }

    /// A fault of an HTTP/2 backend: `GOAWAY`, a lost connection, a crash (every connection
    /// lost), a refusal (a graceful `GOAWAY`: every open stream finishes). Returns whether
    /// the fault was handled here.
    pub(super) fn h2_fault(&mut self, backend: usize, fault: Fault) -> bool {
        if self.backends[backend].h2.is_none() {
            return false;
        }
        match fault {
            Fault::GoAway => self.goaway(backend, false),
            Fault::Refuse => self.goaway(backend, true),
            Fault::LoseConn => {
                let busiest = self.backends[backend].h2.as_ref().and_then(|h| {
                    h.conns
                        .iter()
                        .enumerate()
                        .max_by_key(|(i, c)| (c.streams.len(), usize::MAX - i))
                        .map(|(i, _)| i)
                });
                if let Some(i) = busiest {
                    self.lose(backend, i);
                }
            }
            Fault::Crash => {
                while self.backends[backend]
                    .h2
                    .as_ref()
                    .is_some_and(|h| !h.conns.is_empty())
                {
                    self.lose(backend, 0);
                }
            }
            _ => return false,
        }
        true
    }

    /// `GOAWAY` on every connection of `backend`: a `last_stream_id` at or above every stream
    /// that got its response head (all of them when `graceful`); the streams above it were not
    /// processed and are refused.
    fn goaway(&mut self, backend: usize, graceful: bool) {
        let n = self.backends[backend]
            .h2
            .as_ref()
            .map_or(0, |h| h.conns.len());
        let mut refused = Vec::new();
        for i in 0..n {
            let Some(c) = self.backends[backend].h2.as_ref().map(|h| &h.conns[i]) else {
                continue;
            };
            if c.goaway.is_some() {
                continue;
            }
            let top = c.streams.keys().next_back().copied().unwrap_or(0);
            let answered = c
                .streams
                .iter()
                .filter(|&(_, &(req, attempt))| {
                    let r = &self.requests[req];
                    !(r.stage == Stage::Waiting && r.current.is_some_and(|c| c.n == attempt))
                })
                .map(|(&sid, _)| sid)
                .max()
                .unwrap_or(0);
            let last = if graceful || top <= answered {
                top
            } else {
                answered + self.rng_backends.below(u64::from(top - answered) + 1) as u32
            };
            let above: Vec<(usize, u32, u32)> = self.backends[backend]
                .h2
                .as_ref()
                .map(|h| {
                    h.conns[i]
                        .streams
                        .range(last + 1..)
                        .map(|(&sid, &(req, attempt))| (req, attempt, sid))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(c) = self.backends[backend].h2.as_mut().map(|h| &mut h.conns[i]) {
                c.goaway = Some(last);
            }
            refused.extend(above);
        }
        if let Some(h2) = self.backends[backend].h2.as_mut() {
            h2.conns
                .retain(|c| c.goaway.is_none() || !c.streams.is_empty());
        }
        self.stats.h2.goaways += 1;
        for (req, attempt, _) in refused {
            let r = &self.requests[req];
            if r.stage == Stage::Waiting && r.current.is_some_and(|c| c.n == attempt) {
                self.stats.h2.above_goaway += 1;
                let input = self.refused_stream(req);
                self.attempt_input(req, input);
            }
        }
        self.wake(backend);
    }

    /// Connection `index` of `backend` is lost with every stream on it: an attempt awaiting its
    /// head fails as a transport error, a streaming body breaks.
    fn lose(&mut self, backend: usize, index: usize) {
        let Some(conn) = self.backends[backend]
            .h2
            .as_mut()
            .map(|h| h.conns.remove(index))
        else {
            return;
        };
        self.stats.h2.lost += 1;
        for (&sid, &(req, attempt)) in &conn.streams {
            let r = &self.requests[req];
            if r.current
                .is_none_or(|c| c.n != attempt || c.stream != Some((conn.id, sid)))
            {
                continue;
            }
            self.stats.h2.lost_streams += 1;
            match r.stage {
                Stage::Waiting => self.attempt_input(
                    req,
                    Input::SendFailed(SendFailure::Transport {
                        client_body_failed: false,
                    }),
                ),
                Stage::Streaming => self.end_body(req, weir_core::flow::BodyEnd::Error),
                _ => {}
            }
        }
        self.wake(backend);
    }
}
