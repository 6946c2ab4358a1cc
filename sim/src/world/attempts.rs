//! The exchange's outputs carried out as an adapter does (C-RETRY-1..6, C-POOL-6, C-PATH-9):
//! gate waits and wake-ups, attempts to the simulated backends, responses; the facts about an
//! attempt fed back with the breaker checked around each (C-HEALTH-3); the end of a request.

use weir_core::Instant;
use weir_core::breaker::Outcome;
use weir_core::exchange::{Answer, AttemptResult, Input, Metric, Output, SendFailure};
use weir_core::flow::{Attempt, BodyEnd};
use weir_core::response::Reject;
use weir_core::retry::NoRetryReason;
use weir_core::select::NoBackend;

use super::{Arc, Current, Ev, Permit, Stage, World, no_backend_label};
use crate::backend::Reply;
use crate::report::Invariant;
use crate::trace::Rec;

impl World<'_> {
    pub(super) fn reply(&mut self, req: usize, attempt: u32, reply: Reply) {
        let r = &self.requests[req];
        if r.stage != Stage::Waiting || r.current.is_none_or(|c| c.n != attempt) {
            return; // a closed connection's late answer
        }
        self.check_head_in_time(req);
        let input = match reply {
            Reply::Refused => {
                if let Some(c) = self.requests[req].current.as_mut() {
                    c.sent = false;
                }
                Input::SendFailed(SendFailure::Connect)
            }
            Reply::RefusedStream => self.refused_stream(req),
            Reply::Broken => Input::SendFailed(SendFailure::Transport {
                client_body_failed: false,
            }),
            Reply::Head { status, body } => {
                if let Some(c) = self.requests[req].current.as_mut() {
                    c.body = body;
                }
                Input::ResponseHead { status }
            }
            Reply::PushBack { secs, date } => {
                if let Some(c) = self.requests[req].current.as_mut() {
                    c.body = Some(core::time::Duration::from_millis(1));
                }
                // Read as the proxy reads it: the header through core's parser, a date
                // against the wall clock.
                let wall = self.wall();
                let value = if date {
                    weir_core::pushback::imf_fixdate_of(wall.as_secs() + secs)
                } else {
                    secs.to_string()
                };
                let mut headers = http::HeaderMap::new();
                if let Ok(v) = http::HeaderValue::from_str(&value) {
                    headers.insert(http::header::RETRY_AFTER, v);
                }
                Input::response_head(503, &headers, false, wall)
            }
        };
        self.attempt_input(req, input);
    }

    /// Feed a fact about the current attempt, checking the breaker's response to the outcome the
    /// exchange records (C-HEALTH-3).
    pub(super) fn attempt_input(&mut self, req: usize, input: Input) {
        let Some(cur) = self.requests[req].current else {
            return self.input(req, input);
        };
        let arc = Arc::clone(&self.tracked[cur.tracked].arc);
        let before = (
            arc.circuit_state(self.now),
            arc.breaker().consecutive_failures(),
        );
        self.requests[req].last_result = None;
        let header_deadline = self.requests[req].made.header_deadline;
        self.input(req, input);
        // No attempt metric: the fact changed nothing (an early timeout).
        let Some(result) = self.requests[req].last_result.take() else {
            return;
        };
        if result == AttemptResult::Timeout {
            self.check_header_timeout(req, header_deadline);
        }
        let backend = cur.sim as u32;
        let class = match (input, result) {
            (Input::ResponseHead { status } | Input::PushbackHead { status, .. }, _) => {
                self.record(Rec::Head {
                    req: req as u64,
                    backend,
                    status,
                });
                if self.s.retry.statuses.contains(&status) {
                    Outcome::Failure
                } else {
                    Outcome::Success
                }
            }
            (_, r) => {
                let error = match r {
                    AttemptResult::ConnectError => "connect",
                    AttemptResult::TransportError => "transport",
                    AttemptResult::Timeout => "per_try_timeout",
                    _ => "client_gone",
                };
                self.record(Rec::AttemptError {
                    req: req as u64,
                    backend,
                    error,
                });
                if r == AttemptResult::Cancelled
                    || input == Input::SendFailed(SendFailure::Saturated)
                {
                    Outcome::Neutral
                } else {
                    Outcome::Failure
                }
            }
        };
        let after = (
            arc.circuit_state(self.now),
            arc.breaker().consecutive_failures(),
        );
        self.check_breaker(req, cur, class, before, after);
        if cur.permit == Permit::Trial && class == Outcome::Success && self.now >= self.s.fault_end
        {
            self.tracked[cur.tracked].trial_successes += 1;
        }
    }

    pub(super) fn end_body(&mut self, req: usize, end: BodyEnd) {
        self.record(Rec::BodyEnd {
            req: req as u64,
            end: match end {
                BodyEnd::Complete => "complete",
                BodyEnd::Error => "error",
                BodyEnd::ClientGone => "client_gone",
            },
        });
        self.input(req, Input::BodyEnd(end));
    }

    /// Carry out one output of the request's exchange, as an adapter does.
    pub(super) fn exec(&mut self, req: usize, output: Output, watch: Option<(usize, f64)>) {
        match output {
            Output::GateWait { ticket } => self.queued(req, ticket),
            Output::GateWake { ticket } => self.hand(ticket),
            Output::StoreTake { .. } => self.store_take(req),
            // The simulated client sends its body (at once, or slowly with timers).
            Output::BufferBody { .. } => self.buffer_body(req),
            Output::Send(s) => {
                self.check_send(req, &s);
                if s.retry {
                    self.check_replay(req, s.attempt);
                    self.release_current(req);
                    self.stats.retries += 1;
                    self.budget_grants += 1;
                    if !self.budget_model.take(self.now) {
                        self.fail(
                            Invariant::RetryBudget,
                            format!(
                                "request {req}: retry {} granted while the budget model holds \
                                 {} milli-tokens",
                                s.attempt,
                                self.budget_model.tokens_milli(self.now)
                            ),
                        );
                    }
                }
                let panic = core::mem::take(&mut self.requests[req].panic_next);
                if s.attempt == 1 {
                    self.share_after(watch, s.backend);
                    self.take_bulkhead(req);
                }
                self.send(req, s.backend, s.attempt, panic, s.at);
            }
            Output::Metric(Metric::PanicSelection { .. }) => {
                self.requests[req].panic_next = true;
            }
            Output::Metric(Metric::Attempt { result, .. }) => {
                self.requests[req].last_result = Some(result);
            }
            // The simulated pools run no hedging (`hedge_delay` 0s): nothing is ever cancelled.
            Output::Cancel { .. } => {}
            Output::Metric(
                Metric::Protection(_)
                | Metric::Hedge(_)
                | Metric::Circuit { .. }
                | Metric::QueueWait(_)
                | Metric::RateDecision(_)
                | Metric::Mirror(_)
                | Metric::Store { .. },
            ) => {}
            // No route of the world mirrors (sim/src/mirror.rs is the mirroring scenario).
            Output::Mirror(_) => {}
            Output::Outliers(events) => self.check_outliers(req, &events),
            Output::AbortBody => self.check_abort(req),
            Output::Answer(answer) => self.answered(req, answer),
            Output::Deliver(d) => {
                self.check_delivery(req, d.write_deadline);
                let d = d.deliver;
                if d.budget_exhausted {
                    self.stats.budget_refusals += 1;
                }
                self.respond(req, d.status, "backend", d.attempt, d.budget_exhausted);
                let r = &mut self.requests[req];
                r.stage = Stage::Streaming;
                // A body that never ends (`None`) hangs until the client gives up.
                if let Some(cur) = r.current
                    && let Some(body) = cur.body
                {
                    let attempt = cur.n;
                    self.schedule(self.now + body, Ev::BodyEnd { req, attempt });
                }
            }
            Output::Record(record) => {
                if record.status == 499 && !self.requests[req].responded {
                    if !self.requests[req].client_gone {
                        self.fail(
                            Invariant::OneResponse,
                            format!(
                                "request {req} was abandoned while its client was still waiting"
                            ),
                        );
                    }
                    self.abandon(req);
                }
            }
        }
    }

    /// The exchange waits in the gate's queue (C-LOAD-1).
    fn queued(&mut self, req: usize, ticket: u64) {
        let limit = self.requests[req].arrival + self.s.gate.queue_timeout();
        let deadline = self.requests[req].x.as_ref().and_then(|x| x.poll_timeout());
        if deadline.is_some_and(|d| d > limit) {
            self.fail(
                Invariant::QueueTimeout,
                format!("request {req} queued until {deadline:?}, past arrival + queue_timeout = {limit:?}"),
            );
        }
        self.requests[req].stage = Stage::Queued {
            ticket,
            deadline: limit,
        };
        self.tickets.insert(ticket, req);
        self.record(Rec::Queued { req: req as u64 });
    }

    /// The route's bulkhead permit is held from the first attempt (C-LOAD-2).
    fn take_bulkhead(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if let Some(route) = r.route
            && self.runtime.bulkhead(route).is_some()
            && !r.holds_bulkhead
        {
            r.holds_bulkhead = true;
            self.bulkhead_holders[route] += 1;
        }
    }

    /// weir answered the request itself.
    fn answered(&mut self, req: usize, answer: Answer) {
        if let Stage::Queued { ticket, .. } = self.requests[req].stage {
            self.tickets.remove(&ticket);
        }
        match answer {
            Answer::Failure(f) => {
                if f.budget_exhausted {
                    self.stats.budget_refusals += 1;
                }
                if f.no_retry == NoRetryReason::NoOtherBackend {
                    self.check_never_emptied(req, "a retry found no other backend");
                }
                self.respond(req, f.status, "failure", f.attempts, f.budget_exhausted);
            }
            Answer::Reject(reject) => {
                let what = match reject {
                    Reject::BulkheadFull(_) => "bulkhead_full",
                    Reject::NoBackend(why) => {
                        self.check_never_emptied(req, why.as_str());
                        // Before the first reload a pool may legitimately have no healthy
                        // backend yet (`success_threshold` > 1 after the first cycle).
                        let reloading = self.s.reloads.first().is_some_and(|r| self.now >= r.at);
                        if self.s.checks.reload_no_gap
                            && reloading
                            && matches!(why, NoBackend::NoHealthy | NoBackend::EmptyPool)
                        {
                            self.fail(
                                Invariant::ReloadNoGap,
                                format!(
                                    "request {req} found no healthy backend ({})",
                                    why.as_str()
                                ),
                            );
                        }
                        no_backend_label(why)
                    }
                    Reject::Overloaded(_) => "overload",
                    Reject::RateLimited(outcome) => {
                        self.requests[req].rate_denied = true;
                        self.requests[req].store.denied = Some(outcome);
                        "rate_limited"
                    }
                    Reject::StoreUnavailable => {
                        self.requests[req].store.refused = true;
                        "store_unavailable"
                    }
                };
                self.respond(req, reject.status(), what, 0, false);
            }
            Answer::Client(e) => {
                self.check_client_answer(req, e);
                self.respond(req, e.status(), "client_error", 0, false);
            }
            Answer::Live | Answer::Ready => self.respond(req, 200, "health", 0, false),
        }
    }

    /// Send attempt `attempt` of the request to backend `index` of its pool: checks, then the
    /// simulated reply.
    /// Attempt `attempt` of `req` on backend `index`, sent at `at` (now, or after a retry's
    /// backoff, C-RETRY-10: the simulated adapter waits until then).
    pub(super) fn send(
        &mut self,
        req: usize,
        index: usize,
        attempt: u32,
        panic: bool,
        at: Instant,
    ) {
        let snapshot = self.requests[req].snapshot;
        let Some(&tracked) = self.snapshots[snapshot].tracked.get(index) else {
            self.fail(
                Invariant::RetryRevisits,
                format!("request {req}: attempt on backend index {index} outside its pool"),
            );
            return;
        };
        let deadline = self.requests[req].x.as_ref().and_then(|x| x.poll_timeout());
        let a = Attempt {
            backend: index,
            attempt,
            header_deadline: deadline.unwrap_or(weir_core::Instant::MAX),
            panic,
            at,
        };
        let sim = self.tracked[tracked].sim;
        let permit = self.check_attempt(req, &a, tracked);
        self.tracked[tracked].slots += 1;
        self.backends[sim].conns.insert((req, attempt));
        let h2 = self.backends[sim].h2.is_some();
        let r = &mut self.requests[req];
        r.tried.push(index);
        r.stage = Stage::Waiting;
        r.current = Some(Current {
            n: attempt,
            tracked,
            sim,
            permit,
            body: None,
            sent: !h2,
            unprocessed: false,
            stream: None,
            waiting: false,
        });
        self.record(Rec::Attempt {
            req: req as u64,
            attempt,
            backend: sim as u32,
            panic,
            trial: permit == Permit::Trial,
        });
        if h2 {
            // The stream is placed when the adapter sends, after the backoff.
            self.schedule(at.max(self.now), Ev::StreamOpen { req, attempt });
            return;
        }
        let (_, per_try) = self.generation_retry(self.requests[req].made.generation);
        let plan = self.backends[sim].plan_attempt(per_try, &mut self.rng_backends);
        self.schedule(
            at.max(self.now) + plan.after,
            Ev::Reply {
                req,
                attempt,
                reply: plan.reply,
            },
        );
    }

    /// The current attempt's slot and connection are gone (retry, failure, end).
    pub(super) fn release_current(&mut self, req: usize) {
        if let Some(cur) = self.requests[req].current.take() {
            let t = &mut self.tracked[cur.tracked];
            t.slots = t.slots.saturating_sub(1);
            self.backends[cur.sim].conns.remove(&(req, cur.n));
            self.release_stream(req, cur);
        }
    }

    /// The client gets its response (head). Exactly once (C-RETRY-4).
    pub(super) fn respond(
        &mut self,
        req: usize,
        status: u16,
        what: &'static str,
        attempts: u32,
        budget_exhausted: bool,
    ) {
        let r = &mut self.requests[req];
        if r.responded || r.abandoned {
            self.fail(
                Invariant::OneResponse,
                format!("request {req} got a second response ({status} {what})"),
            );
            return;
        }
        r.responded = true;
        let latency = self.now.as_nanos().saturating_sub(r.arrival.as_nanos()) / 1000;
        self.latencies_us.push(latency);
        match what {
            "backend" if status < 500 => self.stats.succeeded += 1,
            "backend" => self.stats.delivered_5xx += 1,
            "failure" => self.stats.failed += 1,
            "overload" => self.stats.overloaded += 1,
            "rate_limited" => self.stats.rate_limited += 1,
            _ => self.stats.rejected += 1,
        }
        let path = r.path;
        if let Some(prefix) = self.s.checks.isolated_prefix
            && path.starts_with(prefix)
            && matches!(what, "bulkhead_full" | "overload")
        {
            self.fail(
                Invariant::Bulkhead,
                format!(
                    "request {req} on {path} was turned away ({what}) while another route is saturated"
                ),
            );
        }
        self.record(Rec::Respond {
            req: req as u64,
            status,
            what,
            attempts,
            budget_exhausted,
        });
    }

    pub(super) fn abandon(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if r.responded || r.abandoned {
            return;
        }
        r.abandoned = true;
        self.stats.abandoned += 1;
        self.record(Rec::Abandon { req: req as u64 });
    }

    /// The exchange is over and holds nothing: release the world's accounting of it.
    pub(super) fn complete(&mut self, req: usize) {
        self.release_current(req);
        let r = &mut self.requests[req];
        if let Stage::Queued { ticket, .. } = r.stage {
            self.tickets.remove(&ticket);
        }
        let r = &mut self.requests[req];
        r.x = None;
        if r.holds_bulkhead {
            r.holds_bulkhead = false;
            if let Some(route) = r.route {
                self.bulkhead_holders[route] = self.bulkhead_holders[route].saturating_sub(1);
            }
        }
        if core::mem::take(&mut r.holds_gate) {
            self.gate_holders = self.gate_holders.saturating_sub(1);
        }
        r.stage = Stage::Done;
        if r.made.reloads < self.stats.config_reloads {
            self.stats.reloaded_mid += 1;
        }
        self.settle(req);
    }

    /// Count the request as finished, once, when it has its answer and holds nothing.
    pub(super) fn settle(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if !r.settled
            && r.stage == Stage::Done
            && (r.responded || r.abandoned)
            && !r.holds_gate
            && r.x.is_none()
            && r.current.is_none()
        {
            r.settled = true;
            self.live_requests = self.live_requests.saturating_sub(1);
        }
    }
}
