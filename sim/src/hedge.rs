//! The `hedge_slow` scenario (C-HEDGE-1): a pool with hedging on (`retry.hedge_delay` > 0)
//! and one backend that turns slow, driven through the real request engine
//! (`weir_core::exchange::Exchange`) by a small world of its own.
//!
//! The main world (`world.rs`) plays one attempt per request at a time, as the proxy did before
//! hedging; this one plays what an adapter does with two: each attempt has its own connection
//! (an entry of the request's open attempts), the facts about it go back as
//! `Input::Attempt { attempt, .. }`, `Output::Cancel` closes its connection (a late answer on it
//! goes nowhere), a retry closes the previous attempt's connection (C-RETRY-6), and the
//! delivered attempt's body is the only one the client reads.
//!
//! One seed draws 3–5 backends (the policy rotating with `seed % 5`), `hedge_delay` 20–150 ms,
//! `max_attempts` 1–4, `per_try_timeout` 0.4–1.5 s, a small retry budget (2–12 tokens, 0.5–4
//! per second, so hedges and retries run into it), `backoff_base` 10–50 ms and `backoff_max`
//! one to two times it, and 150–400 requests over 3–8 s: `GET`s, `HEAD`s, `GET`s with a small
//! sized body, `POST`s and `PUT`s with sized bodies below and above `body_limit`, chunked `PUT`s.
//! Backends answer in 2–60 ms, with 4 % `503`s, 2 % broken connections and 1 % refused ones;
//! from a drawn instant one backend (two in a fifth of the seeds) answers in 0.15–2 s for 1.5–4
//! s, so first attempts there get hedged, and some run into their per-try timeout. 4 % of the
//! clients leave at a random moment.
//!
//! After every call into an exchange the world checks:
//! - `hedge_budget` (C-HEDGE-1, C-RETRY-7, C-RETRY-1): every retry and every hedge takes a token
//!   of an independent model of the budget (a grant the model refuses is a violation), no
//!   request sends more than `max_attempts` attempts, never more than two at once;
//! - `hedge_safe` (C-HEDGE-1, C-RETRY-1): a hedge goes out only for a method of `retry.methods`
//!   that is safe (`GET`, `HEAD`, `OPTIONS`; never `POST`) with no body or a buffered one, beside
//!   exactly one attempt still waiting for its head, and at once (`Send::at` is now);
//! - `loser_silent` (C-HEDGE-1, C-RETRY-4): the delivered attempt is one whose connection is
//!   open and whose head the world fed with that status; from that call on no other attempt's
//!   connection of the request is open (the loser was cancelled, so none of its bytes can reach
//!   the client), and a body end comes from the delivered attempt only;
//! - `loser_neutral` (C-HEDGE-1, C-HEALTH-3, C-OUT-1): each backend's passive failures equal
//!   the failures (retryable status, connect, transport, timeout) the engine reported for it: an
//!   attempt that lost the race or was cancelled is never one;
//! - `backoff_bounds` (C-RETRY-10): a first attempt and a hedge are sent at once; retry `k`
//!   after a wait below `min(backoff_max, backoff_base × 2^(k−1))`, computed here again.
//!
//! At the end every request has exactly one response (or its client left), every exchange
//! ended and every backend slot is back.

use core::time::Duration;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use http::{HeaderMap, Method};
use weir_core::Instant;
use weir_core::admission::Gate;
use weir_core::config::{MapSecrets, load};
use weir_core::exchange::{
    AttemptFact, AttemptResult, BodyInfo, Exchange, Head, HedgeResult, Input, Metric, Output,
    SendBody, SendFailure, Services,
};
use weir_core::flow::BodyEnd;
use weir_core::rate::{LocalStore, LocalStoreParams, StorageKind, StoreCircuit};
use weir_core::rng::{Rng, WyRand};
use weir_core::runtime::Runtime;
use weir_core::select::PolicyKind;

use crate::model::BucketModel;
use crate::report::{Invariant, Violation};

/// The scenario's name (test name, replay command).
pub const NAME: &str = "hedge_slow";

/// What one seed's run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HedgeSummary {
    /// Requests.
    pub requests: u64,
    /// Attempts sent, hedges included.
    pub attempts: u64,
    /// Retries sent.
    pub retries: u64,
    /// Hedges sent.
    pub hedges: u64,
    /// Hedges whose response was delivered.
    pub hedges_won: u64,
    /// Attempts cancelled (`Output::Cancel`).
    pub cancelled: u64,
    /// Responses from a backend.
    pub delivered: u64,
    /// Answers weir made itself (a failure or a rejection).
    pub answered: u64,
    /// Clients that left before a response.
    pub left: u64,
    /// Events handled.
    pub events: u64,
}

#[derive(Debug, Clone)]
struct Setup {
    yaml: String,
    backends: usize,
    /// `(arrival, method, body, the client leaves after)` per request.
    arrivals: Vec<(Instant, Method, BodyInfo, Option<Duration>)>,
    /// The slow backends, and when they are slow.
    slow: Vec<usize>,
    slow_from: Instant,
    slow_until: Instant,
    body_limit: u64,
    backoff_base: Duration,
    backoff_max: Duration,
    seed: u64,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn between(rng: &mut WyRand, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

fn setup(seed: u64) -> Setup {
    let mut rng = WyRand::new(seed ^ 0x6865_6467_6573);
    let policy = PolicyKind::ALL[(seed % PolicyKind::ALL.len() as u64) as usize];
    let n = between(&mut rng, 3, 5) as usize;
    let hedge_delay = between(&mut rng, 20, 150);
    let max_attempts = between(&mut rng, 1, 4);
    let per_try = between(&mut rng, 400, 1500);
    let capacity = between(&mut rng, 2, 12);
    let refill = between(&mut rng, 5, 40) as f64 / 10.0;
    let base = between(&mut rng, 10, 50);
    let max = between(&mut rng, base, 2 * base);
    let body_limit = between(&mut rng, 256, 2048);
    let mut yaml = format!(
        "server:\n  retry:\n    max_attempts: {max_attempts}\n    per_try_timeout: \
         {per_try}ms\n    body_limit: {body_limit}\n    backoff_base: {base}ms\n    \
         backoff_max: {max}ms\n    hedge_delay: {hedge_delay}ms\n    budget_capacity: \
         {capacity}\n    budget_refill_per_second: {refill}\nhealth_check:\n  slow_start: 0s\n  \
         failure_threshold: {}\n  cooldown: 500ms\nbalancing:\n  policy: {}\n",
        between(&mut rng, 3, 6),
        policy.as_str()
    );
    if policy == PolicyKind::ConsistentHash {
        yaml.push_str("  hash_key: client_address\n");
    }
    yaml.push_str("backends:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - id: b{i}\n    url: http://10.0.0.{}:80\n",
            i + 1
        ));
    }
    let count = between(&mut rng, 150, 400);
    let span = between(&mut rng, 3_000, 8_000);
    let mut arrivals = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let at = Instant::from_millis(rng.below(span));
        let (method, body) = match rng.below(20) {
            0..=8 => (Method::GET, BodyInfo::Empty),
            9 => (Method::HEAD, BodyInfo::Empty),
            10 => (Method::OPTIONS, BodyInfo::Empty),
            11 => (Method::GET, BodyInfo::Sized(rng.below(body_limit))),
            12..=14 => (Method::POST, BodyInfo::Sized(rng.below(body_limit * 2))),
            15..=16 => (Method::PUT, BodyInfo::Sized(rng.below(body_limit * 2))),
            17 => (Method::PUT, BodyInfo::Unsized),
            _ => (Method::DELETE, BodyInfo::Empty),
        };
        let leaves = rng
            .chance_permille(40)
            .then(|| ms(between(&mut rng, 1, 1500)));
        arrivals.push((at, method, body, leaves));
    }
    arrivals.sort_by_key(|(at, ..)| *at);
    let first = rng.below(n as u64) as usize;
    let mut slow = vec![first];
    if rng.chance_permille(200) {
        slow.push((first + 1) % n);
    }
    let slow_from = Instant::from_millis(between(&mut rng, 0, span / 2));
    let slow_until = slow_from + ms(between(&mut rng, 1500, 4000));
    Setup {
        yaml,
        backends: n,
        arrivals,
        slow,
        slow_from,
        slow_until,
        body_limit,
        backoff_base: ms(base),
        backoff_max: ms(max),
        seed,
    }
}

/// What a backend does with one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Head(u16),
    Broken,
    Refused,
}

#[derive(Debug)]
enum Ev {
    Arrive(usize),
    /// The exchange's own deadline.
    Timer(usize),
    /// The backend's reply to attempt `attempt` of request `req`.
    Reply {
        req: usize,
        attempt: u32,
        reply: Reply,
    },
    /// The delivered body of attempt `attempt` ends.
    BodyEnd {
        req: usize,
        attempt: u32,
    },
    /// The client leaves.
    Leave(usize),
}

/// An attempt whose connection is open.
#[derive(Debug, Clone, Copy)]
struct Open {
    backend: usize,
    /// The head fed for it.
    head: Option<u16>,
}

#[derive(Debug, Default)]
struct Req {
    x: Option<Exchange>,
    /// Attempts whose connection is open, by attempt number.
    open: BTreeMap<u32, Open>,
    sent: u32,
    delivered: Option<u32>,
    responded: bool,
    left: bool,
}

struct State<'s> {
    s: &'s Setup,
    rt: Arc<Runtime>,
    services: Arc<Services>,
    max_attempts: u32,
    now: Instant,
    seq: u64,
    queue: BTreeMap<(Instant, u64), Ev>,
    core: WyRand,
    backend_rng: WyRand,
    reqs: Vec<Req>,
    tickets: BTreeMap<u64, usize>,
    budget: BucketModel,
    /// Failures the engine reported per backend (`Metric::Attempt`).
    failures: Vec<u64>,
    summary: HedgeSummary,
}

impl State<'_> {
    fn violation(&self, invariant: Invariant, detail: String) -> Violation {
        Violation {
            scenario: NAME,
            seed: self.s.seed,
            invariant,
            at: self.now,
            detail,
        }
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    fn feed(&mut self, req: usize, input: Input) -> Result<(), Violation> {
        let now = self.now;
        let Some(x) = self.reqs[req].x.as_mut() else {
            return Ok(());
        };
        x.handle_input(input, now, &mut self.core);
        self.drain(req)
    }

    fn drain(&mut self, req: usize) -> Result<(), Violation> {
        while let Some(out) = self.reqs[req].x.as_mut().and_then(Exchange::poll_output) {
            self.exec(req, out)?;
        }
        if self.reqs[req].x.as_ref().is_some_and(Exchange::is_done) {
            // The adapter drops whatever the request still held.
            self.reqs[req].x = None;
            self.reqs[req].open.clear();
        }
        if let Some(t) = self.reqs[req].x.as_ref().and_then(Exchange::poll_timeout) {
            self.schedule(t, Ev::Timer(req));
        }
        self.check(req)
    }

    /// The checks that hold after every call.
    fn check(&self, req: usize) -> Result<(), Violation> {
        let r = &self.reqs[req];
        if r.open.len() > 2 {
            return Err(self.violation(
                Invariant::HedgeBudget,
                format!("request {req}: {} attempts open at once", r.open.len()),
            ));
        }
        if let Some(d) = r.delivered
            && let Some((&a, o)) = r.open.iter().find(|(a, _)| **a != d)
        {
            return Err(self.violation(
                Invariant::LoserSilent,
                format!(
                    "request {req}: attempt {d} delivered while attempt {a}'s connection to \
                     backend {} is still open (never cancelled)",
                    o.backend
                ),
            ));
        }
        if let Some(pool) = self.rt.pool(0) {
            for (i, b) in pool.backends().iter().enumerate() {
                if b.passive_failures() != self.failures[i] {
                    return Err(self.violation(
                        Invariant::LoserNeutral,
                        format!(
                            "backend {i}: {} passive failures, but the engine reported {} \
                             failed attempts on it (request {req})",
                            b.passive_failures(),
                            self.failures[i]
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `min(backoff_max, backoff_base × 2^(k−1))`, the bound of retry `k`'s wait (C-RETRY-10),
    /// written again from the contract.
    fn backoff_bound(&self, k: u32) -> Duration {
        let mut cap = self.s.backoff_base;
        for _ in 1..k {
            cap = cap.saturating_mul(2);
        }
        cap.min(self.s.backoff_max)
    }

    fn send(&mut self, req: usize, s: weir_core::exchange::Send) -> Result<(), Violation> {
        let (_, method, body, _) = &self.s.arrivals[req];
        let r = &mut self.reqs[req];
        r.sent += 1;
        self.summary.attempts += 1;
        if s.attempt != r.sent || s.attempt > self.max_attempts {
            return Err(self.violation(
                Invariant::HedgeBudget,
                format!(
                    "request {req}: attempt {} sent ({} so far), max_attempts {}",
                    s.attempt, self.reqs[req].sent, self.max_attempts
                ),
            ));
        }
        if (s.retry || s.hedge) && !self.budget.take(self.now) {
            return Err(self.violation(
                Invariant::HedgeBudget,
                format!(
                    "request {req}: {} {} granted while the budget model holds {} milli-tokens",
                    if s.hedge { "hedge" } else { "retry" },
                    s.attempt,
                    self.budget.tokens_milli(self.now)
                ),
            ));
        }
        if s.hedge {
            self.summary.hedges += 1;
            let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
            let held = match body {
                BodyInfo::Empty => true,
                BodyInfo::Sized(n) => *n <= self.s.body_limit,
                BodyInfo::Unsized => false,
            };
            if !safe || !held || matches!(s.body, SendBody::Stream { .. }) || !s.replayable {
                return Err(self.violation(
                    Invariant::HedgeSafe,
                    format!("request {req}: {method} with {body:?} hedged ({s:?})"),
                ));
            }
            let waiting = self.reqs[req]
                .open
                .values()
                .filter(|o| o.head.is_none())
                .count();
            if waiting != 1 || self.reqs[req].open.len() != 1 {
                return Err(self.violation(
                    Invariant::HedgeSafe,
                    format!(
                        "request {req}: hedge {} sent beside {} open attempts, {waiting} \
                         awaiting a head",
                        s.attempt,
                        self.reqs[req].open.len()
                    ),
                ));
            }
        }
        if s.hedge || s.attempt == 1 {
            if s.at != self.now {
                return Err(self.violation(
                    Invariant::BackoffBounds,
                    format!(
                        "request {req}: attempt {} (hedge: {}) sent at {:?}, not at once",
                        s.attempt, s.hedge, s.at
                    ),
                ));
            }
        } else {
            let bound = self.backoff_bound(s.attempt - 1);
            let wait = s.at.saturating_since(self.now);
            if s.at < self.now || (wait >= bound && !wait.is_zero()) {
                return Err(self.violation(
                    Invariant::BackoffBounds,
                    format!(
                        "request {req}: retry {} waits {wait:?}, bound {bound:?}",
                        s.attempt - 1
                    ),
                ));
            }
        }
        if s.retry {
            self.summary.retries += 1;
            // C-RETRY-6: the previous attempt's connection is closed, unread.
            self.reqs[req].open.clear();
        }
        self.reqs[req].open.insert(
            s.attempt,
            Open {
                backend: s.backend,
                head: None,
            },
        );
        let slow = self.s.slow.contains(&s.backend)
            && s.at >= self.s.slow_from
            && s.at < self.s.slow_until;
        let rng = &mut self.backend_rng;
        let latency = if slow {
            ms(between(rng, 150, 2000))
        } else {
            ms(between(rng, 2, 60))
        };
        let reply = match rng.below(100) {
            0..=3 => Reply::Head(503),
            4..=5 => Reply::Broken,
            6 => Reply::Refused,
            _ => Reply::Head(200),
        };
        let latency = if reply == Reply::Refused {
            ms(1)
        } else {
            latency
        };
        self.schedule(
            s.at.max(self.now) + latency,
            Ev::Reply {
                req,
                attempt: s.attempt,
                reply,
            },
        );
        Ok(())
    }

    fn exec(&mut self, req: usize, out: Output) -> Result<(), Violation> {
        match out {
            Output::GateWait { ticket } => {
                self.tickets.insert(ticket, req);
            }
            Output::GateWake { ticket } => {
                if let Some(w) = self.tickets.remove(&ticket) {
                    self.feed(w, Input::GateHandoff)?;
                }
            }
            Output::BufferBody { .. } => self.feed(req, Input::BodyBuffered)?,
            Output::Send(s) => self.send(req, s)?,
            Output::Cancel { attempt } => {
                self.summary.cancelled += 1;
                self.reqs[req].open.remove(&attempt);
            }
            Output::Deliver(d) => {
                let a = d.deliver.attempt;
                let open = self.reqs[req].open.get(&a).copied();
                if open.is_none_or(|o| o.head != Some(d.deliver.status)) {
                    return Err(self.violation(
                        Invariant::LoserSilent,
                        format!(
                            "request {req}: attempt {a}'s {} delivered, but its connection is \
                             {open:?}",
                            d.deliver.status
                        ),
                    ));
                }
                self.respond(req)?;
                self.summary.delivered += 1;
                self.reqs[req].delivered = Some(a);
                let body = ms(between(&mut self.backend_rng, 1, 20));
                self.schedule(self.now + body, Ev::BodyEnd { req, attempt: a });
            }
            Output::Answer(_) => {
                self.respond(req)?;
                self.summary.answered += 1;
            }
            Output::Metric(Metric::Attempt {
                backend, result, ..
            }) => {
                if matches!(
                    result,
                    AttemptResult::FailureStatus
                        | AttemptResult::ConnectError
                        | AttemptResult::TransportError
                        | AttemptResult::Timeout
                ) && let Some(f) = self.failures.get_mut(backend)
                {
                    *f += 1;
                }
            }
            Output::Metric(Metric::Hedge(HedgeResult::Won)) => self.summary.hedges_won += 1,
            Output::Mirror(_)
            | Output::StoreTake { .. }
            | Output::AbortBody
            | Output::Metric(_)
            | Output::Outliers(_)
            | Output::Record(_) => {}
        }
        Ok(())
    }

    fn respond(&mut self, req: usize) -> Result<(), Violation> {
        if self.reqs[req].responded {
            return Err(self.violation(
                Invariant::OneResponse,
                format!("request {req} got a second response"),
            ));
        }
        self.reqs[req].responded = true;
        Ok(())
    }

    fn step(&mut self, ev: Ev) -> Result<(), Violation> {
        match ev {
            Ev::Arrive(req) => {
                let (_, method, body, leaves) = &self.s.arrivals[req];
                let client = IpAddr::V4(Ipv4Addr::new(10, 1, (req / 250) as u8, (req % 250) as u8));
                let headers = HeaderMap::new();
                let head = Head {
                    method,
                    path: "/a",
                    target: "/a",
                    headers: &headers,
                    peer: client,
                    tls: false,
                    body: *body,
                    authority: None,
                };
                let x = Exchange::new(
                    Arc::clone(&self.rt),
                    Arc::clone(&self.services),
                    &head,
                    self.now,
                    &mut self.core,
                );
                self.reqs[req].x = Some(x);
                if let Some(after) = leaves {
                    self.schedule(self.now + *after, Ev::Leave(req));
                }
                self.drain(req)
            }
            Ev::Timer(req) => {
                let due = self.reqs[req]
                    .x
                    .as_ref()
                    .and_then(Exchange::poll_timeout)
                    .is_some_and(|t| t <= self.now);
                if due {
                    self.feed(req, Input::Timeout)?;
                }
                Ok(())
            }
            Ev::Reply {
                req,
                attempt,
                reply,
            } => {
                // A closed connection's answer goes nowhere.
                let Some(open) = self.reqs[req].open.get_mut(&attempt) else {
                    return Ok(());
                };
                let fact = match reply {
                    Reply::Head(status) => {
                        open.head = Some(status);
                        AttemptFact::Head { status }
                    }
                    Reply::Broken => AttemptFact::Failed(SendFailure::Transport {
                        client_body_failed: false,
                    }),
                    Reply::Refused => AttemptFact::Failed(SendFailure::Connect),
                };
                if !matches!(reply, Reply::Head(_)) {
                    self.reqs[req].open.remove(&attempt);
                }
                self.feed(req, fact.about(attempt))
            }
            Ev::BodyEnd { req, attempt } => {
                if self.reqs[req].x.is_none() {
                    return Ok(());
                }
                if self.reqs[req].delivered != Some(attempt)
                    || !self.reqs[req].open.contains_key(&attempt)
                {
                    return Err(self.violation(
                        Invariant::LoserSilent,
                        format!(
                            "request {req}: body bytes of attempt {attempt}, delivered {:?}, \
                             open {:?}",
                            self.reqs[req].delivered,
                            self.reqs[req].open.keys().collect::<Vec<_>>()
                        ),
                    ));
                }
                self.reqs[req].open.remove(&attempt);
                self.feed(req, Input::BodyEnd(BodyEnd::Complete))
            }
            Ev::Leave(req) => {
                let r = &mut self.reqs[req];
                if r.x.is_none() || r.responded {
                    return Ok(());
                }
                r.left = true;
                self.summary.left += 1;
                self.feed(req, Input::ClientGone)
            }
        }
    }
}

/// Run `hedge_slow` for `seed`: its summary, or the first invariant it broke.
///
/// # Errors
/// The first broken invariant.
///
/// # Panics
/// On a setup the core refuses (a bug of the scenario).
pub fn run(seed: u64) -> Result<HedgeSummary, Violation> {
    let s = setup(seed);
    let cfg = load(&s.yaml, &MapSecrets::new())
        .unwrap_or_else(|e| panic!("{NAME} seed {seed}: invalid setup: {e}"));
    let mut core = WyRand::new(s.seed ^ 0xc0de);
    let rt = Runtime::build(cfg, None, Instant::ZERO, &mut core)
        .unwrap_or_else(|e| panic!("{NAME} seed {seed}: invalid setup: {e}"));
    for (_, b) in rt.backends() {
        b.set_healthy(true, Instant::ZERO);
    }
    let local = LocalStore::new(
        LocalStoreParams {
            shards: 2,
            max_buckets: 64,
        },
        s.seed,
    )
    .unwrap_or_else(|e| panic!("{NAME} seed {seed}: {e}"));
    let services = Services::new(
        Arc::new(Gate::new(rt.config().gate)),
        StorageKind::Local,
        Arc::new(local),
        Arc::new(StoreCircuit::new(ms(200))),
    );
    let policy = rt.retry();
    let budget = BucketModel::new(
        policy.budget_params().capacity(),
        policy.budget_params().interval(),
    );
    let max_attempts = policy.max_attempts();
    let n = s.arrivals.len();
    let mut st = State {
        s: &s,
        rt: Arc::new(rt),
        services: Arc::new(services),
        max_attempts,
        now: Instant::ZERO,
        seq: 0,
        queue: BTreeMap::new(),
        core,
        backend_rng: WyRand::new(s.seed ^ 0x6261_636b),
        reqs: (0..n).map(|_| Req::default()).collect(),
        tickets: BTreeMap::new(),
        budget,
        failures: vec![0; s.backends],
        summary: HedgeSummary {
            requests: n as u64,
            ..HedgeSummary::default()
        },
    };
    for (i, (at, ..)) in s.arrivals.iter().enumerate() {
        st.schedule(*at, Ev::Arrive(i));
    }
    while let Some(((at, _), ev)) = st.queue.pop_first() {
        st.now = at;
        st.summary.events += 1;
        st.step(ev)?;
    }
    if let Some(i) = st.reqs.iter().position(|r| r.x.is_some()) {
        return Err(st.violation(Invariant::OneResponse, format!("request {i} never ended")));
    }
    if let Some(i) = st.reqs.iter().position(|r| !r.responded && !r.left) {
        return Err(st.violation(
            Invariant::OneResponse,
            format!("request {i} got no response while its client waited"),
        ));
    }
    if let Some(pool) = st.rt.pool(0)
        && let Some(i) = pool.backends().iter().position(|b| b.in_flight() != 0)
    {
        return Err(st.violation(
            Invariant::BackendSlots,
            format!("backend {i}: slots never given back at the end"),
        ));
    }
    Ok(st.summary)
}
