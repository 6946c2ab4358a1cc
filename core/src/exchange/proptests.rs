//! The engine's contract under any sequence of inputs: several
//! exchanges at once over one gate, budget, bulkhead and set of backends; arbitrary facts in any
//! order (store answers and failures, timeouts, response heads and send errors, body ends, client
//! cancellation, out-of-stage facts), time steps forwards and backwards, reloads (new exchanges
//! get the new snapshot, running ones keep theirs) and exchanges dropped mid-way. After every
//! step and at the end it checks the contract (docs/contract.md):
//!
//! - exactly one final response per exchange (an answer or a delivery), or none when the client
//!   left first, and exactly one record (C-PATH-11, C-OBS-3);
//! - attempts ≤ `max_attempts`, no backend tried twice (C-RETRY-1, C-RETRY-2);
//! - no retry of a request whose method or body is not replayable (C-RETRY-1), unless nothing
//!   of the failed attempt was sent (C-RETRY-9);
//! - retries never exceed the budget: capacity + refill × elapsed (C-RETRY-7);
//! - gate slots, bulkhead permits and backend slots held exactly as the exchanges say, so each is
//!   released exactly once; at the end nothing is held, no ticket waits, no store trial is open
//!   (C-LOAD-1, C-LOAD-2, C-POOL-6, C-RATE-5);
//! - an exchange keeps the snapshot it was created with, and sends only to its backends.

use http::Method;
use proptest::prelude::*;

use super::tests::{Fixture, Req, at, drain, runtime};
use super::*;
use crate::bucket::Take;
use crate::flow::BodyEnd;
use crate::rng::WyRand;

#[derive(Debug, Clone)]
struct Setup {
    backends: usize,
    healthy: Vec<bool>,
    per_backend: u32,
    max_attempts: u32,
    budget: u64,
    gate: u32,
    queue_ms: u64,
    rate: Option<(u64, &'static str)>,
    shared: bool,
    route_limit: u32,
    header_timeout_ms: Option<u64>,
}

impl Setup {
    fn yaml(&self, generation: usize) -> String {
        let mut y = String::from("server:\n");
        y += &format!(
            "  overload:\n    max_concurrent_requests: {}\n    queue_timeout: {}ms\n",
            self.gate, self.queue_ms
        );
        y += &format!(
            "  upstream:\n    max_concurrent_requests: {}\n",
            self.per_backend
        );
        if let Some(t) = self.header_timeout_ms {
            y += &format!("    response_header_timeout: {t}ms\n");
        }
        y += &format!(
            "  retry:\n    max_attempts: {}\n    per_try_timeout: 400ms\n    body_limit: 100\n    \
             budget_capacity: {}\n    budget_refill_per_second: 0.001\n",
            self.max_attempts, self.budget
        );
        if let Some((capacity, mode)) = self.rate {
            y += &format!(
                "rate_limit:\n  enabled: true\n  capacity: {capacity}\n  refill_per_second: 1\n  \
                 failure_mode: {mode}\n"
            );
        }
        y += &format!(
            "routes:\n  - prefix: /r\n    pool: default\n    max_concurrent_requests: {}\n",
            self.route_limit
        );
        y += "backends:\n";
        // A reload replaces the last backend with a new one (a new id and url).
        for i in 0..self.backends {
            let id = if i + 1 == self.backends {
                i + 10 * generation
            } else {
                i
            };
            y += &format!("  - id: b{id}\n    url: http://10.0.0.{}:80\n", id + 1);
        }
        y
    }
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1usize..=4,
        proptest::collection::vec(prop::bool::weighted(0.8), 4),
        1u32..=3,
        1u32..=4,
        1u64..=4,
        1u32..=3,
        prop::sample::select(vec![0u64, 50]),
        proptest::option::of((
            1u64..=3,
            prop::sample::select(vec!["fail-open", "fail-closed", "local-fallback"]),
        )),
        any::<bool>(),
        1u32..=2,
        proptest::option::of(prop::sample::select(vec![100u64, 1_000])),
    )
        .prop_map(
            |(
                backends,
                healthy,
                per_backend,
                max_attempts,
                budget,
                gate,
                queue_ms,
                rate,
                shared,
                route_limit,
                header_timeout_ms,
            )| Setup {
                backends,
                healthy,
                per_backend,
                max_attempts,
                budget,
                gate,
                queue_ms,
                rate,
                shared,
                route_limit,
                header_timeout_ms,
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    New {
        route: bool,
        path: u8,
        method: u8,
        body: u8,
    },
    Feed(u8, Input),
    /// Feed `Timeout` exactly at the exchange's deadline (time moves there).
    Fire(u8),
    Advance(u16),
    Back(u8),
    Reload,
    /// The adapter drops the exchange (first telling it the client left when `polite`).
    Drop(u8, bool),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        Just(Input::Timeout),
        Just(Input::GateHandoff),
        (0u64..3).prop_map(|remaining| Input::StoreAnswer(Ok(Take::Allowed { remaining }))),
        Just(Input::StoreAnswer(Ok(Take::Denied {
            retry_after: core::time::Duration::from_millis(300)
        }))),
        Just(Input::StoreAnswer(Err(StoreFailure::Error))),
        Just(Input::StoreAnswer(Err(StoreFailure::Partial))),
        Just(Input::BodyBuffered),
        Just(Input::BodyUnreadable),
        Just(Input::BodyTimeout),
        prop::sample::select(vec![200u16, 101, 404, 500, 502, 503, 504])
            .prop_map(|status| Input::ResponseHead { status }),
        Just(Input::SendFailed(SendFailure::Connect)),
        Just(Input::SendFailed(SendFailure::Saturated)),
        any::<bool>().prop_map(|held| Input::SendFailed(SendFailure::Refused { held })),
        any::<bool>().prop_map(
            |client_body_failed| Input::SendFailed(SendFailure::Transport { client_body_failed })
        ),
        Just(Input::TargetTooLong),
        prop::sample::select(vec![BodyEnd::Complete, BodyEnd::Error, BodyEnd::ClientGone])
            .prop_map(Input::BodyEnd),
        (0u8..17).prop_map(Input::GrpcStatus),
        Just(Input::ClientGone),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<bool>(), 0u8..8, 0u8..3, 0u8..4).prop_map(
            |(route, path, method, body)| Op::New { route, path, method, body }
        ),
        8 => (any::<u8>(), input()).prop_map(|(i, x)| Op::Feed(i, x)),
        3 => any::<u8>().prop_map(Op::Fire),
        2 => (1u16..500).prop_map(Op::Advance),
        1 => (1u8..50).prop_map(Op::Back),
        1 => Just(Op::Reload),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(i, p)| Op::Drop(i, p)),
    ]
}

/// What the checker knows of one exchange from its outputs.
#[derive(Debug)]
struct Seen {
    x: Option<Exchange>,
    rt: Arc<Runtime>,
    replayable: bool,
    route: bool,
    ticket: Option<u64>,
    responses: u32,
    records: Vec<u16>,
    sends: u32,
    tried: Vec<usize>,
    max_attempts: u32,
    /// The latest input fed said nothing of the attempt was sent (C-RETRY-9).
    nothing_sent: bool,
}

struct World {
    f: Fixture,
    setup: Setup,
    generation: usize,
    now: Instant,
    seen: Vec<Seen>,
    retries: u64,
    rude_drops: u32,
    backends: Vec<Arc<crate::pool::Backend>>,
}

impl World {
    fn new(setup: Setup) -> World {
        let storage = if setup.shared {
            StorageKind::Redis
        } else {
            StorageKind::Local
        };
        let mut f = Fixture::new(&setup.yaml(0), storage);
        for (i, (_, b)) in f.rt.backends().enumerate() {
            b.set_healthy(setup.healthy[i], Instant::ZERO);
        }
        f.rng = WyRand::new(17);
        let backends = f.rt.backends().map(|(_, b)| Arc::clone(b)).collect();
        World {
            f,
            setup,
            generation: 0,
            now: at(1),
            seen: Vec::new(),
            retries: 0,
            rude_drops: 0,
            backends,
        }
    }

    fn live(&self, i: u8) -> Option<usize> {
        let live: Vec<usize> = (0..self.seen.len())
            .filter(|&k| self.seen[k].x.is_some())
            .collect();
        (!live.is_empty()).then(|| live[usize::from(i) % live.len()])
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::New {
                route,
                path,
                method,
                body,
            } => self.new_exchange(route, path, method, body)?,
            Op::Feed(i, input) => {
                if let Some(k) = self.live(i) {
                    self.feed(k, input)?;
                }
            }
            Op::Fire(i) => {
                if let Some(k) = self.live(i)
                    && let Some(t) = self.seen[k].x.as_ref().and_then(Exchange::poll_timeout)
                {
                    self.now = self.now.max(t);
                    self.feed(k, Input::Timeout)?;
                }
            }
            Op::Advance(ms) => self.now = self.now + core::time::Duration::from_millis(ms.into()),
            Op::Back(ms) => {
                self.now = self
                    .now
                    .saturating_sub(core::time::Duration::from_millis(ms.into()));
            }
            Op::Reload => {
                self.generation += 1;
                let next = runtime(&self.setup.yaml(self.generation), Some(&self.f.rt));
                for (_, b) in next.backends() {
                    if !self.backends.iter().any(|k| Arc::ptr_eq(k, b)) {
                        b.set_healthy(true, Instant::ZERO);
                        self.backends.push(Arc::clone(b));
                    }
                }
                self.f.rt = next;
            }
            Op::Drop(i, polite) => {
                if let Some(k) = self.live(i) {
                    if polite {
                        self.feed(k, Input::ClientGone)?;
                    }
                    if self.seen[k].x.take().is_some_and(|x| !x.is_done()) {
                        self.rude_drops += 1;
                    }
                }
            }
        }
        self.check_held()
    }

    fn new_exchange(
        &mut self,
        route: bool,
        path: u8,
        method: u8,
        body: u8,
    ) -> Result<(), TestCaseError> {
        let base = if route { "/r/x" } else { "/x" };
        let path = match path {
            0 => "/healthz",
            1 => "/readyz",
            _ => base,
        };
        let method = [Method::GET, Method::POST, Method::PUT][usize::from(method)].clone();
        let body = [
            BodyInfo::Empty,
            BodyInfo::Sized(10),
            BodyInfo::Sized(1_000),
            BodyInfo::Unsized,
        ][usize::from(body)];
        let req = Req::get(path).with(method.clone(), body);
        let (x, out) = self.f.start(&req, self.now);
        let retry = self.f.rt.retry();
        let kind = match body {
            BodyInfo::Empty => crate::retry::BodyKind::None,
            BodyInfo::Sized(n) => crate::retry::BodyKind::Sized(n),
            BodyInfo::Unsized => crate::retry::BodyKind::Streaming,
        };
        self.seen.push(Seen {
            rt: Arc::clone(&self.f.rt),
            replayable: retry.allows_method(method.as_str()) && retry.body_replayable(kind),
            route,
            max_attempts: retry.max_attempts(),
            x: Some(x),
            ticket: None,
            responses: 0,
            records: Vec::new(),
            sends: 0,
            tried: Vec::new(),
            nothing_sent: false,
        });
        let k = self.seen.len() - 1;
        self.observe(k, out)
    }

    fn feed(&mut self, k: usize, input: Input) -> Result<(), TestCaseError> {
        let Some(x) = self.seen[k].x.as_mut() else {
            return Ok(());
        };
        let done_before = x.is_done();
        self.seen[k].nothing_sent = matches!(
            input,
            Input::SendFailed(
                SendFailure::Connect | SendFailure::Refused { held: true } | SendFailure::Saturated
            )
        );
        let Some(x) = self.seen[k].x.as_mut() else {
            return Ok(());
        };
        x.handle_input(input, self.now, &mut self.f.rng);
        let out = drain(x);
        if done_before {
            prop_assert!(out.is_empty(), "exchange {k} acted after its end: {out:?}");
        }
        self.observe(k, out)
    }

    /// Check each output and carry out gate wake-ups at once, as an adapter does.
    fn observe(&mut self, k: usize, out: Vec<Output>) -> Result<(), TestCaseError> {
        for o in out {
            let s = &mut self.seen[k];
            if let Some(x) = &s.x {
                prop_assert!(
                    Arc::ptr_eq(x.runtime(), &s.rt),
                    "exchange {k} changed snapshot"
                );
            }
            match o {
                // These configurations leave hedging off (`hedge_delay` 0s): the hedging
                // property is `hedging.rs`'s.
                Output::Cancel { attempt } => {
                    prop_assert!(
                        false,
                        "exchange {k}: attempt {attempt} cancelled, no hedging"
                    );
                }
                Output::GateWait { ticket } => s.ticket = Some(ticket),
                Output::Send(send) => {
                    s.sends += 1;
                    prop_assert!(
                        s.sends <= s.max_attempts,
                        "exchange {k}: {} attempts > max {}",
                        s.sends,
                        s.max_attempts
                    );
                    prop_assert_eq!(send.attempt, s.sends);
                    prop_assert_eq!(send.retry, s.sends > 1);
                    prop_assert!(
                        send.backend < s.rt.pool(0).map_or(0, |p| p.backends().len()),
                        "backend outside the snapshot"
                    );
                    prop_assert!(
                        !s.tried.contains(&send.backend),
                        "exchange {k} revisited backend {}",
                        send.backend
                    );
                    s.tried.push(send.backend);
                    if send.retry {
                        prop_assert!(
                            s.replayable || s.nothing_sent,
                            "exchange {k} retried a request that is not replayable after it \
                             was sent"
                        );
                        self.retries += 1;
                    }
                    prop_assert_eq!(send.last, send.attempt >= s.max_attempts);
                    prop_assert_eq!(send.replayable, s.replayable);
                }
                Output::Answer(_) | Output::Deliver(_) => {
                    s.responses += 1;
                    prop_assert!(s.responses == 1, "exchange {k}: a second response");
                    prop_assert!(
                        s.records.is_empty(),
                        "exchange {k}: response after its record"
                    );
                }
                Output::Record(r) => {
                    s.records.push(r.status);
                    prop_assert!(s.records.len() == 1, "exchange {k}: a second record");
                    prop_assert!(
                        s.responses == 1 || r.status == 499,
                        "record {} without a response",
                        r.status
                    );
                }
                Output::GateWake { ticket } => {
                    let waiter = self.seen.iter().position(|w| {
                        w.ticket == Some(ticket)
                            && w.x
                                .as_ref()
                                .is_some_and(|x| matches!(x.stage(), Stage::Queued { .. }))
                    });
                    if let Some(w) = waiter {
                        self.feed(w, Input::GateHandoff)?;
                    }
                }
                Output::StoreTake { .. }
                | Output::BufferBody { .. }
                | Output::AbortBody
                | Output::Metric(_)
                | Output::Mirror(_)
                | Output::Outliers(_) => {}
            }
        }
        Ok(())
    }

    /// Shared state matches what the exchanges hold, so each was taken and released once.
    fn check_held(&self) -> Result<(), TestCaseError> {
        let live = || {
            self.seen
                .iter()
                .filter_map(|s| s.x.as_ref().map(|x| (s, x)))
        };
        let holders = live().filter(|(_, x)| x.holds_gate()).count() as u32;
        let queued = live()
            .filter(|(_, x)| matches!(x.stage(), Stage::Queued { .. }))
            .count() as u32;
        let gate = self.f.services.gate().in_flight();
        if self.rude_drops == 0 {
            prop_assert_eq!(gate, holders, "gate slots");
        } else {
            // A slot that `Drop` handed to a waiter cannot be announced: the waiter holds it
            // unknowingly until its deadline (see the module doc of `exchange`).
            prop_assert!(
                holders <= gate && gate <= holders + queued,
                "gate slots {} for {} holders and {} waiters",
                gate,
                holders,
                queued
            );
        }
        let slots = |route_only: bool| {
            live()
                .filter(|(s, x)| {
                    (!route_only || s.route)
                        && matches!(x.stage(), Stage::Awaiting { .. } | Stage::Streaming { .. })
                })
                .count() as u32
        };
        let held: u32 = self.backends.iter().map(|b| b.in_flight()).sum();
        prop_assert_eq!(held, slots(false), "backend slots");
        let bulkhead = self.f.rt.bulkhead(0).map_or(0, |b| b.in_flight());
        prop_assert_eq!(bulkhead, slots(true), "bulkhead permits");
        let budget = self.f.rt.budget();
        let bound = budget.capacity() + 1;
        prop_assert!(
            self.retries <= bound,
            "{} retries over a budget of {}",
            self.retries,
            bound
        );
        Ok(())
    }

    /// End everything: the remaining clients leave; then nothing may be held.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        for k in 0..self.seen.len() {
            self.feed(k, Input::ClientGone)?;
            self.check_held()?;
        }
        for (k, s) in self.seen.iter_mut().enumerate() {
            if let Some(x) = s.x.take() {
                prop_assert!(x.is_done(), "exchange {k} not done after the client left");
                prop_assert_eq!(s.records.len(), 1, "exchange {}: one record", k);
                prop_assert!(s.responses == 1 || s.records[0] == 499);
            }
        }
        let gate = self.f.services.gate();
        prop_assert_eq!((gate.in_flight(), gate.queued()), (0, 0));
        prop_assert!(self.backends.iter().all(|b| b.in_flight() == 0));
        prop_assert_eq!(self.f.rt.bulkhead(0).map_or(0, |b| b.in_flight()), 0);
        prop_assert!(!self.f.services.circuit().trial_in_flight());
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn c_path_2_the_engine_keeps_the_contract_for_any_sequence_of_inputs(
        setup in setup(),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut w = World::new(setup);
        for op in &ops {
            w.apply(op)?;
        }
        w.finish()?;
    }
}
