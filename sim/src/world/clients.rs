//! Clients: arrivals, the overload gate and its queue, the rate limiter and the route, up to
//! `Flow::start` (C-PATH-2, C-LOAD-1, C-RATE-1, C-ROUTE-1).

use core::time::Duration;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_core::admission::{Cancel, Entry};
use weir_core::bucket::{BucketParams, Take};
use weir_core::flow::{Action, AttemptError, BodyEnd, Flow, FlowTarget, RequestMeta};
use weir_core::rate::ClientKey;
use weir_core::retry::BodyKind;
use weir_core::rng::Rng;
use weir_core::select::{PickContext, hash_key};

use super::{Arc, Ev, Fact, Request, Stage, WORKERS, World, method_str};
use crate::backend::uniform;
use crate::model::BucketModel;
use crate::report::Invariant;
use crate::trace::Rec;

impl World<'_> {
    /// Open the listeners once every pool finished a check cycle (C-HEALTH-1).
    pub(super) fn maybe_listen(&mut self) {
        if self.listening {
            return;
        }
        let ready = self.pools.iter().all(|p| {
            self.runners
                .get(&p.runner)
                .is_some_and(|r| r.schedule.cycles_completed() >= 1)
        });
        if !ready {
            return;
        }
        self.listening = true;
        self.traffic_on = self.now < self.traffic_end;
        self.record(Rec::Traffic { on: true });
        for stream in 0..self.s.streams.len() {
            self.schedule(
                self.now,
                Ev::Arrival {
                    stream,
                    arrive: false,
                },
            );
        }
    }

    pub(super) fn arrival(&mut self, stream: usize, arrive: bool) {
        if !self.traffic_on {
            return;
        }
        let rate = self.s.streams[stream].rate_at(self.now);
        let change = self.s.streams[stream].next_change(self.now);
        if rate == 0 {
            if let Some(t) = change {
                self.schedule(
                    t,
                    Ev::Arrival {
                        stream,
                        arrive: false,
                    },
                );
            }
        } else {
            // Exponential gaps: a Poisson process at the current rate.
            let u = (self.rng_arrivals.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let gap_ns = (-(1.0 - u).ln() * 1e9 / f64::from(rate)) as u64;
            let next = self.now + Duration::from_nanos(gap_ns.max(1));
            match change {
                Some(t) if t < next => self.schedule(
                    t,
                    Ev::Arrival {
                        stream,
                        arrive: false,
                    },
                ),
                _ => self.schedule(
                    next,
                    Ev::Arrival {
                        stream,
                        arrive: true,
                    },
                ),
            }
        }
        if arrive {
            self.new_request(stream);
        }
    }

    pub(super) fn new_request(&mut self, stream: usize) {
        let st = &self.s.streams[stream];
        let span = u64::from(st.clients.end - st.clients.start);
        let client = st.clients.start + self.rng_clients.below(span) as u32;
        let path = st.paths[self.rng_clients.below(st.paths.len() as u64) as usize];
        let ip = if st.v6 {
            // One /64, a fresh interface id per request (privacy addresses, C-RATE-2).
            let iid = self.rng_clients.next_u64();
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_0007_0001u128 << 64) | u128::from(iid),
            ))
        } else {
            let [_, b, c, d] = client.to_be_bytes();
            IpAddr::V4(Ipv4Addr::new(10, b, c, d))
        };
        let key = ClientKey::new(ip, &self.key_params);
        let hash = match ip {
            IpAddr::V4(v4) => hash_key(&v4.octets()),
            IpAddr::V6(v6) => hash_key(&v6.octets()),
        };
        let (method, body) = match self.rng_clients.below(100) {
            0..=69 => (http::Method::GET, BodyKind::None),
            70..=74 => (http::Method::HEAD, BodyKind::None),
            75..=76 => (http::Method::OPTIONS, BodyKind::None),
            77..=86 => (
                http::Method::POST,
                BodyKind::Sized(1 + self.rng_clients.below(4096)),
            ),
            87..=93 => (
                http::Method::PUT,
                BodyKind::Sized(100 + self.rng_clients.below(128 * 1024)),
            ),
            _ => (http::Method::PUT, BodyKind::Streaming),
        };
        let leave_after = if self.rng_clients.chance_permille(self.s.disconnect_permille) {
            Duration::from_millis(1) + uniform(&mut self.rng_clients, Duration::from_secs(3))
        } else {
            self.s.patience
        };
        let req = self.requests.len();
        self.requests.push(Request {
            key,
            hash,
            arrival: self.now,
            method: method.clone(),
            body,
            path,
            stage: Stage::Done,
            flow: None,
            snapshot: 0,
            route: None,
            current: None,
            tried: Vec::new(),
            client_gone: false,
            holds_gate: false,
            holds_bulkhead: false,
            responded: false,
            abandoned: false,
            settled: false,
        });
        self.stats.requests += 1;
        self.live_requests += 1;
        self.record(Rec::Arrive {
            req: req as u64,
            client,
            method: method_str(&method),
            path,
        });
        self.schedule(self.now + leave_after, Ev::Disconnect { req });
        // C-PATH-2: the gate first.
        match self.gate.enter(self.now) {
            Entry::Admitted => {
                self.requests[req].holds_gate = true;
                self.gate_holders += 1;
                self.proceed(req);
            }
            Entry::Queued(ticket) => {
                let limit = self.now + self.s.gate.queue_timeout();
                if ticket.deadline > limit {
                    self.fail(
                        Invariant::QueueTimeout,
                        format!(
                            "request {req} queued until {:?}, past now + queue_timeout = {:?}",
                            ticket.deadline, limit
                        ),
                    );
                }
                self.requests[req].stage = Stage::Queued { ticket: ticket.id };
                self.tickets.insert(ticket.id, req);
                self.schedule(ticket.deadline, Ev::QueueDeadline { req });
                self.record(Rec::Queued { req: req as u64 });
            }
            Entry::Rejected(_) => {
                self.respond(req, 503, "overload", 0, false);
                self.done(req);
            }
        }
        self.arm_gate_timer();
    }

    /// The request holds a gate slot: rate limit, route, flow (C-PATH-2).
    pub(super) fn proceed(&mut self, req: usize) {
        if self.requests[req].client_gone {
            // Handed a slot after its client left: give it back at once.
            self.abandon(req);
            self.complete(req);
            return;
        }
        if let Some(bucket) = self.bucket
            && !self.rate_limit(req, bucket)
        {
            self.respond(req, 429, "rate_limited", 0, false);
            self.complete(req);
            return;
        }
        let found = self.routes.lookup(self.requests[req].path);
        let slot = &self.pools[found.pool];
        let snapshot = slot.snapshot;
        let bulkhead = found
            .route
            .and_then(|r| self.bulkheads.get(r).cloned().flatten());
        let target = FlowTarget {
            pool: Arc::clone(&self.snapshots[snapshot].pool),
            bulkhead,
        };
        let r = &self.requests[req];
        let meta = RequestMeta {
            method: r.method.clone(),
            body: r.body,
            ctx: PickContext {
                worker: req % WORKERS,
                hash: Some(r.hash),
            },
        };
        let watch = self.share_before(snapshot);
        let (flow, action) = Flow::start(
            target,
            &self.policy,
            &self.budget,
            meta,
            self.now,
            &mut self.rng_core,
        );
        let r = &mut self.requests[req];
        r.flow = Some(flow);
        r.snapshot = snapshot;
        r.route = found.route;
        r.stage = Stage::Waiting;
        if let Action::Attempt(a) = action {
            if let Some(route) = found.route
                && self.bulkheads.get(route).is_some_and(Option::is_some)
            {
                r.holds_bulkhead = true;
                self.bulkhead_holders[route] += 1;
            }
            self.share_after(watch, a.backend);
        }
        self.apply(req, action);
    }

    /// Take a rate-limit token for the request's client key; checks the bucket against the
    /// model (C-RATE-1, C-RATE-2). Returns whether it was allowed.
    pub(super) fn rate_limit(&mut self, req: usize, bucket: BucketParams) -> bool {
        let key = self.requests[req].key;
        let now = self.now;
        let take = self.store.take(key, &bucket, now);
        let allowed = matches!(take, Take::Allowed { .. });
        let entry = self.rate_models.entry(key).or_insert_with(|| {
            (
                now,
                0,
                BucketModel::new(bucket.capacity(), bucket.interval()),
            )
        });
        let model_allows = entry.2.take(now);
        if allowed {
            entry.1 += 1;
        }
        let (first, grants, model) = *entry;
        let peek = self.store.peek(key, &bucket, now);
        let bound = model.max_grants(first, now);
        if grants > bound {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "client {key}: {grants} grants since {:?}, more than capacity + refill x \
                     elapsed = {bound}",
                    first
                ),
            );
        }
        if allowed != model_allows {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "client {key}: the store {} a take the model {}",
                    if allowed { "allowed" } else { "denied" },
                    if model_allows { "allows" } else { "denies" }
                ),
            );
        }
        if peek > bucket.capacity() * 1000 || peek != model.tokens_milli(now) {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "client {key}: {peek} milli-tokens, model {} (capacity {})",
                    model.tokens_milli(now),
                    bucket.capacity()
                ),
            );
        }
        allowed
    }

    pub(super) fn disconnect(&mut self, req: usize) {
        let stage = self.requests[req].stage;
        if stage == Stage::Done {
            return;
        }
        self.requests[req].client_gone = true;
        self.record(Rec::Disconnect { req: req as u64 });
        match stage {
            Stage::Queued { ticket } => {
                self.tickets.remove(&ticket);
                match self.gate.cancel(ticket, self.now) {
                    Cancel::Removed => {
                        self.abandon(req);
                        self.done(req);
                    }
                    Cancel::Expired => {
                        self.respond(req, 503, "overload", 0, false);
                        self.done(req);
                    }
                    Cancel::AlreadyAdmitted => {
                        self.requests[req].holds_gate = true;
                        self.gate_holders += 1;
                        self.abandon(req);
                        self.complete(req);
                    }
                    Cancel::Unknown => self.fail(
                        Invariant::QueueTimeout,
                        format!("request {req}: its ticket {ticket} is unknown to the gate"),
                    ),
                }
                self.arm_gate_timer();
            }
            Stage::Waiting => self.feed(req, Fact::Error(AttemptError::ClientGone)),
            Stage::Streaming => self.end_body(req, BodyEnd::ClientGone),
            Stage::Admitted | Stage::Done => {}
        }
    }

    pub(super) fn queue_deadline(&mut self, req: usize) {
        let Stage::Queued { ticket } = self.requests[req].stage else {
            return;
        };
        self.tickets.remove(&ticket);
        match self.gate.cancel(ticket, self.now) {
            Cancel::Expired => {
                self.respond(req, 503, "overload", 0, false);
                self.done(req);
            }
            other => self.fail(
                Invariant::QueueTimeout,
                format!(
                    "request {req}: at its queue deadline the gate settles its ticket as \
                     {other:?}, not Expired (it waits past queue_timeout)"
                ),
            ),
        }
        self.arm_gate_timer();
    }

    pub(super) fn gate_timer_fired(&mut self, generation: u64) {
        if generation != self.gate_timer_gen {
            return;
        }
        self.gate_timer = None;
        let mut woken = Vec::new();
        let _ = self.gate.expire(self.now, |id| woken.push(id));
        for id in woken {
            let Some(req) = self.tickets.remove(&id) else {
                continue;
            };
            match self.gate.cancel(id, self.now) {
                Cancel::Expired => {
                    self.respond(req, 503, "overload", 0, false);
                    self.done(req);
                }
                other => self.fail(
                    Invariant::QueueTimeout,
                    format!("request {req}: expire() woke it but cancel says {other:?}"),
                ),
            }
        }
        self.arm_gate_timer();
    }

    pub(super) fn arm_gate_timer(&mut self) {
        let next = self.gate.poll_timeout();
        if next == self.gate_timer {
            return;
        }
        self.gate_timer = next;
        self.gate_timer_gen += 1;
        if let Some(t) = next {
            let generation = self.gate_timer_gen;
            self.schedule(t, Ev::GateTimer { generation });
        }
    }

    /// A waiter whose ticket `id` was handed a slot by a leaving request: settle it and go on.
    pub(super) fn hand(&mut self, id: u64) {
        let Some(req) = self.tickets.remove(&id) else {
            self.fail(
                Invariant::GateSlots,
                format!("the gate handed a slot to ticket {id}, which nobody holds"),
            );
            return;
        };
        let deadline_ok = match self.gate.cancel(id, self.now) {
            Cancel::AlreadyAdmitted => true,
            other => {
                self.fail(
                    Invariant::QueueTimeout,
                    format!("request {req}: handed a slot, but cancel says {other:?}"),
                );
                false
            }
        };
        if deadline_ok {
            self.requests[req].holds_gate = true;
            self.gate_holders += 1;
            self.requests[req].stage = Stage::Admitted;
            self.record(Rec::Admitted { req: req as u64 });
            self.handed.push_back(req);
        }
    }

    pub(super) fn drain_handed(&mut self) {
        while let Some(req) = self.handed.pop_front() {
            self.proceed(req);
        }
    }
}
