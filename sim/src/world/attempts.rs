//! Attempts: the facts fed to the flow machine and the actions it returns, carried out as an
//! adapter does (C-RETRY-1..6, C-POOL-6, C-PATH-9), and the end of a request.

use weir_core::breaker::Outcome;
use weir_core::flow::{Action, AttemptError, BodyEnd, Flow};
use weir_core::response::Reject;
use weir_core::retry::NoRetryReason;
use weir_core::select::NoBackend;

use super::{Arc, Current, Ev, Fact, Permit, Stage, World, no_backend_label};
use crate::backend::Reply;
use crate::report::Invariant;
use crate::trace::Rec;

impl World<'_> {
    pub(super) fn reply(&mut self, req: usize, attempt: u32, reply: Reply) {
        let r = &self.requests[req];
        if r.stage != Stage::Waiting || r.current.is_none_or(|c| c.n != attempt) {
            return; // a closed connection's late answer
        }
        match reply {
            Reply::Refused => self.feed(req, Fact::Error(AttemptError::Connect)),
            Reply::Broken => self.feed(req, Fact::Error(AttemptError::Transport)),
            Reply::Head { status, body } => {
                if let Some(c) = self.requests[req].current.as_mut() {
                    c.body = body;
                }
                self.feed(req, Fact::Head(status));
            }
        }
    }

    /// Feed a fact about the current attempt to the flow, checking the breaker's response to the
    /// outcome it records (C-HEALTH-3).
    pub(super) fn feed(&mut self, req: usize, fact: Fact) {
        let Some(cur) = self.requests[req].current else {
            return;
        };
        let arc = Arc::clone(&self.tracked[cur.tracked].arc);
        let before = (
            arc.circuit_state(self.now),
            arc.breaker().consecutive_failures(),
        );
        let now = self.now;
        let backend = cur.sim as u32;
        let action = {
            let r = &mut self.requests[req];
            let Some(flow) = r.flow.as_mut() else {
                return;
            };
            match fact {
                Fact::Head(status) => flow.handle_response_head(status, now, &mut self.rng_core),
                Fact::Error(e) => flow.handle_error(e, now, &mut self.rng_core),
                Fact::Timeout => flow.handle_timeout(now, &mut self.rng_core),
            }
        };
        let class = match fact {
            Fact::Timeout if action == Action::Nothing => return, // early: nothing recorded
            Fact::Head(status) => {
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
            Fact::Error(e) => {
                self.record(Rec::AttemptError {
                    req: req as u64,
                    backend,
                    error: e.as_str(),
                });
                if e == AttemptError::ClientGone {
                    Outcome::Neutral
                } else {
                    Outcome::Failure
                }
            }
            Fact::Timeout => {
                self.record(Rec::AttemptError {
                    req: req as u64,
                    backend,
                    error: AttemptError::PerTryTimeout.as_str(),
                });
                Outcome::Failure
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
        self.apply(req, action);
    }

    pub(super) fn end_body(&mut self, req: usize, end: BodyEnd) {
        let now = self.now;
        if let Some(flow) = self.requests[req].flow.as_mut() {
            let _ = flow.handle_body_end(end, now);
        }
        self.record(Rec::BodyEnd {
            req: req as u64,
            end: match end {
                BodyEnd::Complete => "complete",
                BodyEnd::Error => "error",
                BodyEnd::ClientGone => "client_gone",
            },
        });
        self.complete(req);
    }

    /// Carry out the flow's action, as an adapter does.
    pub(super) fn apply(&mut self, req: usize, action: Action) {
        match action {
            Action::Attempt(a) | Action::Retry(a) => {
                let retry = matches!(action, Action::Retry(_));
                if retry {
                    self.release_current(req);
                    self.stats.retries += 1;
                    self.budget_grants += 1;
                    if !self.budget_model.take(self.now) {
                        self.fail(
                            Invariant::RetryBudget,
                            format!(
                                "request {req}: retry {} granted while the budget model holds \
                                 {} milli-tokens",
                                a.attempt,
                                self.budget_model.tokens_milli(self.now)
                            ),
                        );
                    }
                }
                self.send(req, a);
            }
            Action::Deliver(d) => {
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
            Action::Fail(f) => {
                if f.budget_exhausted {
                    self.stats.budget_refusals += 1;
                }
                if f.no_retry == NoRetryReason::NoOtherBackend {
                    self.check_never_emptied(req, "a retry found no other backend");
                }
                self.respond(req, f.status, "failure", f.attempts, f.budget_exhausted);
                self.complete(req);
            }
            Action::Reject(reject) => {
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
                    Reject::RateLimited(_) => "rate_limited",
                    Reject::StoreUnavailable => "store_unavailable",
                };
                self.respond(req, reject.status(), what, 0, false);
                self.complete(req);
            }
            Action::Abandon => {
                if !self.requests[req].client_gone {
                    self.fail(
                        Invariant::OneResponse,
                        format!("request {req} was abandoned while its client was still waiting"),
                    );
                }
                self.abandon(req);
                self.complete(req);
            }
            Action::Nothing => {}
        }
    }

    /// Send attempt `a` of the request to its backend: checks, then the simulated reply.
    pub(super) fn send(&mut self, req: usize, a: weir_core::flow::Attempt) {
        let snapshot = self.requests[req].snapshot;
        let Some(&tracked) = self.snapshots[snapshot].tracked.get(a.backend) else {
            self.fail(
                Invariant::RetryRevisits,
                format!(
                    "request {req}: attempt on backend index {} outside its pool",
                    a.backend
                ),
            );
            return;
        };
        let sim = self.tracked[tracked].sim;
        let permit = self.check_attempt(req, &a, tracked);
        self.tracked[tracked].slots += 1;
        self.backends[sim].conns.insert((req, a.attempt));
        let plan =
            self.backends[sim].plan_attempt(self.s.retry.per_try_timeout, &mut self.rng_backends);
        let r = &mut self.requests[req];
        r.tried.push(a.backend);
        r.current = Some(Current {
            n: a.attempt,
            tracked,
            sim,
            permit,
            body: None,
        });
        let deadline = r.flow.as_ref().and_then(Flow::poll_timeout);
        self.record(Rec::Attempt {
            req: req as u64,
            attempt: a.attempt,
            backend: sim as u32,
            panic: a.panic,
            trial: permit == Permit::Trial,
        });
        self.schedule(
            self.now + plan.after,
            Ev::Reply {
                req,
                attempt: a.attempt,
                reply: plan.reply,
            },
        );
        if let Some(deadline) = deadline {
            self.schedule(deadline, Ev::FlowTimer { req });
        }
    }

    /// The current attempt's slot and connection are gone (retry, failure, end).
    pub(super) fn release_current(&mut self, req: usize) {
        if let Some(cur) = self.requests[req].current.take() {
            let t = &mut self.tracked[cur.tracked];
            t.slots = t.slots.saturating_sub(1);
            self.backends[cur.sim].conns.remove(&(req, cur.n));
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

    /// The request is finished and holds nothing but maybe its gate slot: release all.
    pub(super) fn complete(&mut self, req: usize) {
        self.release_current(req);
        let r = &mut self.requests[req];
        r.flow = None; // drops the slot and the bulkhead permit if anything still held them
        if r.holds_bulkhead {
            r.holds_bulkhead = false;
            if let Some(route) = r.route {
                self.bulkhead_holders[route] = self.bulkhead_holders[route].saturating_sub(1);
            }
        }
        let held = core::mem::take(&mut r.holds_gate);
        r.stage = Stage::Done;
        if held {
            self.gate_holders = self.gate_holders.saturating_sub(1);
            if let Some(id) = self.gate.leave(self.now) {
                self.hand(id);
            }
            self.arm_gate_timer();
        }
        self.settle(req);
    }

    /// The request is over without ever holding a gate slot (overload, or it left the queue).
    pub(super) fn done(&mut self, req: usize) {
        self.requests[req].stage = Stage::Done;
        self.settle(req);
    }

    /// Count the request as finished, once, when it has its answer and holds nothing.
    pub(super) fn settle(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if !r.settled
            && r.stage == Stage::Done
            && (r.responded || r.abandoned)
            && !r.holds_gate
            && r.flow.is_none()
            && r.current.is_none()
        {
            r.settled = true;
            self.live_requests = self.live_requests.saturating_sub(1);
        }
    }
}
