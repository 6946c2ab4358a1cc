//! Clients: arrivals, each request's exchange (the request engine) and the plumbing that feeds
//! it facts and carries out its outputs (C-PATH-2, C-LOAD-1, C-RATE-1, C-ROUTE-1).

use core::time::Duration;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_core::exchange::{BodyInfo, Exchange, Head, Input};
use weir_core::retry::BodyKind;
use weir_core::rng::Rng;

use weir_core::rate::{RateOutcome, StorageKind};

use super::store::StoreView;
use super::{Arc, Ev, Request, Stage, World, method_str};
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

    /// Draw the next request of `stream`: client number, path, address, method and body, and
    /// when its client gives up.
    fn draw(&mut self, stream: usize) -> Drawn {
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
        Drawn {
            client,
            path,
            ip,
            method,
            body,
            leave_after,
        }
    }

    pub(super) fn new_request(&mut self, stream: usize) {
        let Drawn {
            client,
            path,
            ip,
            method,
            body,
            leave_after,
        } = self.draw(stream);
        let key = self.runtime.config().rate.key().key(ip);
        let req = self.requests.len();
        let made = self.made_now();
        let store = StoreView {
            up_before: self.services.circuit().is_up(),
            ..StoreView::default()
        };
        self.requests.push(Request::new(
            key,
            self.now,
            method.clone(),
            path,
            store,
            made,
        ));
        self.stats.requests += 1;
        self.live_requests += 1;
        self.record(Rec::Arrive {
            req: req as u64,
            client,
            method: method_str(&method),
            path,
        });
        self.schedule(self.now + leave_after, Ev::Disconnect { req });
        // The slow-start share is measured at the first selection, which may happen right away.
        let watches: Vec<_> = (0..self.pools.len())
            .map(|p| {
                (
                    self.pools[p].snapshot,
                    self.share_before(self.pools[p].snapshot),
                )
            })
            .collect();
        let head = Head {
            method: &method,
            path,
            target: path,
            headers: &self.no_headers,
            peer: ip,
            tls: false,
            body: match body {
                BodyKind::None => BodyInfo::Empty,
                BodyKind::Sized(n) => BodyInfo::Sized(n),
                BodyKind::Streaming => BodyInfo::Unsized,
            },
            authority: None,
        };
        let x = Exchange::new(
            Arc::clone(&self.runtime),
            Arc::clone(&self.services),
            &head,
            self.now,
            &mut self.rng_core,
        );
        // The pool snapshot the exchange selects from, for the world's own accounting.
        let snapshot = self
            .snapshots
            .iter()
            .position(|s| Arc::ptr_eq(&s.pool, x.pool()))
            .unwrap_or(0);
        let watch = watches
            .into_iter()
            .find(|(s, _)| *s == snapshot)
            .and_then(|(_, w)| w);
        let r = &mut self.requests[req];
        r.body = body;
        r.snapshot = snapshot;
        r.route = x.route();
        r.x = Some(x);
        self.check_created(req);
        self.outputs(req, watch);
    }

    /// Feed `input` to the request's exchange and carry out what it asks.
    pub(super) fn input(&mut self, req: usize, input: Input) {
        let r = &self.requests[req];
        // Before a first selection: whether it counts for the slow-start share (C-HEALTH-4).
        let watch = if r.tried.is_empty() && r.current.is_none() {
            self.share_before(r.snapshot)
        } else {
            None
        };
        let now = self.now;
        let up = self.services.circuit().is_up();
        let r = &mut self.requests[req];
        r.store.up_before = up;
        let Some(x) = r.x.as_mut() else {
            return;
        };
        x.handle_input(input, now, &mut self.rng_core);
        self.outputs(req, watch);
    }

    /// Drain the exchange's outputs, carry each out, keep the world's accounting in step with
    /// what the exchange holds, and arm a timer for its deadline.
    fn outputs(&mut self, req: usize, watch: Option<(usize, f64)>) {
        let mut out = Vec::new();
        if let Some(x) = self.requests[req].x.as_mut() {
            while let Some(o) = x.poll_output() {
                out.push(o);
            }
        }
        for o in out {
            self.exec(req, o, watch);
        }
        self.check_same_snapshot(req);
        self.track_store_wait(req);
        let Some(x) = self.requests[req].x.as_ref() else {
            return;
        };
        let (holds, done, deadline) = (x.holds_gate(), x.is_done(), x.poll_timeout());
        let rate = x.rate_outcome().map(decision);
        let r = &mut self.requests[req];
        if holds != r.holds_gate {
            r.holds_gate = holds;
            if holds {
                self.gate_holders += 1;
            } else {
                self.gate_holders = self.gate_holders.saturating_sub(1);
            }
        }
        let r = &self.requests[req];
        if !r.rate_checked && (rate.is_some() || r.rate_denied || r.store.refused) {
            let denied = r.store.denied.as_ref().map(decision);
            self.requests[req].rate_checked = true;
            if self.store.is_some() {
                let outcome = rate.or(denied);
                self.check_store_decision(req, outcome);
            } else {
                self.check_rate(req, rate.is_some());
            }
        }
        if done {
            self.complete(req);
            return;
        }
        let r = &mut self.requests[req];
        if let Some(t) = deadline
            && r.timer != Some(t)
        {
            r.timer = Some(t);
            self.schedule(t, Ev::Timer { req });
        }
    }

    /// The exchange's deadline came (early timeouts are no-ops in the exchange).
    pub(super) fn timer(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if r.timer == Some(self.now) {
            r.timer = None;
        }
        if r.x.is_none() {
            return;
        }
        if r.stage == Stage::Waiting {
            self.attempt_input(req, Input::Timeout);
        } else {
            self.input(req, Input::Timeout);
        }
    }

    /// Check the limiter's decision for the request's client key against the model (C-RATE-1,
    /// C-RATE-2).
    pub(super) fn check_rate(&mut self, req: usize, allowed: bool) {
        let Some(bucket) = self.bucket else {
            return;
        };
        let key = self.requests[req].key;
        let now = self.now;
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
        let peek = self.services.local().peek(key, &bucket, now);
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
                    "client {key}: the limiter {} a request the model {}",
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
    }

    pub(super) fn disconnect(&mut self, req: usize) {
        let r = &self.requests[req];
        if r.stage == Stage::Done || r.x.is_none() {
            return;
        }
        if self.requests[req].stage == Stage::Streaming {
            self.check_still_writing(req);
        }
        self.requests[req].client_gone = true;
        self.record(Rec::Disconnect { req: req as u64 });
        if self.requests[req].stage == Stage::Waiting {
            self.attempt_input(req, Input::ClientGone);
        } else {
            self.input(req, Input::ClientGone);
        }
    }

    /// A waiter whose ticket `id` was handed a slot by a leaving request: wake it (after this
    /// event, as an adapter's wake-up runs the waiter's task later).
    pub(super) fn hand(&mut self, id: u64) {
        match self.tickets.remove(&id) {
            Some(req) => self.handed.push_back((req, Input::GateHandoff)),
            None => self.fail(
                Invariant::GateSlots,
                format!("the gate handed a slot to ticket {id}, which nobody holds"),
            ),
        }
    }

    /// Feed the inputs that came due during the event.
    pub(super) fn drain_handed(&mut self) {
        while let Some((req, input)) = self.handed.pop_front() {
            if input == Input::GateHandoff {
                self.record(Rec::Admitted { req: req as u64 });
            }
            self.input(req, input);
        }
    }

    /// A waiter never waits past `queue_timeout` (C-LOAD-1).
    pub(super) fn check_queue_waits(&mut self) {
        let now = self.now;
        let late = self
            .requests
            .iter()
            .enumerate()
            .find_map(|(i, r)| match r.stage {
                Stage::Queued { deadline, .. } if now > deadline && r.x.is_some() => {
                    Some((i, deadline))
                }
                _ => None,
            });
        if let Some((req, deadline)) = late {
            self.fail(
                Invariant::QueueTimeout,
                format!("request {req} still waits in the gate's queue past {deadline:?}"),
            );
        }
    }

    /// Publish the world's current pool snapshots: new exchanges get them (old ones keep theirs).
    pub(super) fn publish(&mut self) {
        let mut rt: Option<weir_core::runtime::Runtime> = None;
        for p in 0..self.pools.len() {
            let pool = Arc::clone(&self.snapshots[self.pools[p].snapshot].pool);
            rt = match &rt {
                Some(r) => r.with_pool(p, pool),
                None => self.base.with_pool(p, pool),
            };
        }
        if let Some(rt) = rt {
            self.runtime = Arc::new(rt);
        }
    }
}

/// One drawn request.
struct Drawn {
    client: u32,
    path: &'static str,
    ip: IpAddr,
    method: http::Method,
    body: BodyKind,
    leave_after: Duration,
}

/// A rate outcome as the store checks compare it: allowed, degraded, which store decided.
fn decision(o: &RateOutcome) -> (bool, bool, StorageKind) {
    (o.is_allowed(), o.degraded, o.storage)
}
