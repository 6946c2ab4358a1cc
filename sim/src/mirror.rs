//! The `mirror_isolation` scenario (C-MIRROR-1): a mirror pool that hangs or dies never changes a
//! primary response or its timing.
//!
//! A differential run, in the manner of madsim's `check_determinism`: one seed draws a setup
//! (the primary pool's size and policy, `max_attempts`, `per_try_timeout`, the share mirrored,
//! `mirror_max_in_flight`, `retry.body_limit`, the arrivals and the primary backends' answers)
//! and the same setup runs three times with the real request engine
//! (`weir_core::exchange::Exchange`), once per fate of the mirror pool from a drawn instant on:
//! it answers (`healthy`), it never answers (`hangs`: each mirror ends at its own deadline), it
//! refuses connections (`dies`: its circuit opens, later mirrors are dropped). Every primary
//! request's outcome (status, backend, attempt, the instant of its response head) must be the
//! same in the three runs, to the nanosecond: the invariant `mirror_isolated`. Each run also
//! checks that the mirrors in flight never exceed `mirror_max_in_flight` and are all given back
//! at the end, that every mirror is counted once as sent, dropped or skipped, that no primary
//! attempt reaches a mirror backend, and that no mirror outcome reaches the primary pool
//! (its backends' passive failures are the same in the three runs).
//!
//! It is a world of its own, smaller than `world.rs`: the primary backends' answers come from
//! their own generator, drawn per attempt in the order attempts are sent (identical in the three
//! runs when isolation holds), and the mirror backends' from another, so the mirror pool's fate
//! cannot move the primary's draws through the simulator either.

use core::time::Duration;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use http::{HeaderMap, Method};
use weir_core::Instant;
use weir_core::admission::Gate;
use weir_core::config::{MapSecrets, load};
use weir_core::exchange::{BodyInfo, Exchange, Head, Input, Metric, Output, Services};
use weir_core::flow::BodyEnd;
use weir_core::mirror::{Mirror, MirrorEnd, MirrorResult};
use weir_core::rate::{LocalStore, LocalStoreParams, StorageKind, StoreCircuit};
use weir_core::rng::{Rng, WyRand};
use weir_core::runtime::Runtime;
use weir_core::select::PolicyKind;

/// What happens to the mirror pool from the fault on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShadowFate {
    /// It keeps answering.
    Healthy,
    /// It never answers again.
    Hangs,
    /// It refuses every connection.
    Dies,
}

impl ShadowFate {
    /// The three fates, the first being the reference.
    pub const ALL: [ShadowFate; 3] = [ShadowFate::Healthy, ShadowFate::Hangs, ShadowFate::Dies];
}

/// One primary request's outcome, compared across fates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The status the client got.
    pub status: u16,
    /// When its response head was ready (nanoseconds of virtual time).
    pub at: u64,
    /// The backend that answered (index in the primary pool), if one did.
    pub backend: Option<usize>,
    /// The attempt that answered.
    pub attempt: u32,
}

/// What one fate's run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// Per request, in arrival order.
    pub outcomes: Vec<Option<Outcome>>,
    /// Mirrors counted `sent`, `dropped`, `skipped`.
    pub mirrors: [u64; 3],
    /// The primary backends' passive failures at the end.
    pub primary_failures: Vec<u64>,
}

/// The seed's summary: requests, and the mirror counts of each fate.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Primary requests per run.
    pub requests: u64,
    /// `[sent, dropped, skipped]` per fate, in [`ShadowFate::ALL`] order.
    pub mirrors: [[u64; 3]; 3],
}

/// The setup one seed draws.
#[derive(Debug, Clone)]
struct Setup {
    yaml: String,
    /// `(arrival, method, body)` per request.
    arrivals: Vec<(Instant, Method, BodyInfo)>,
    fault_at: Instant,
    max_in_flight: u32,
    seed: u64,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn between(rng: &mut WyRand, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

fn setup(seed: u64) -> Setup {
    let mut rng = WyRand::new(seed ^ 0x6d69_7272_6f72);
    let policy = PolicyKind::ALL[(seed % PolicyKind::ALL.len() as u64) as usize];
    let primaries = between(&mut rng, 2, 4);
    let shadows = between(&mut rng, 1, 3);
    let percent = between(&mut rng, 10, 100);
    let max_in_flight = between(&mut rng, 1, 16) as u32;
    let body_limit = between(&mut rng, 256, 2048);
    let per_try = between(&mut rng, 150, 600);
    let max_attempts = between(&mut rng, 1, 3);
    let mut yaml = format!(
        "server:\n  upstream:\n    mirror_max_in_flight: {max_in_flight}\n  retry:\n    \
         max_attempts: {max_attempts}\n    per_try_timeout: {per_try}ms\n    body_limit: \
         {body_limit}\n    backoff_base: 10ms\n    backoff_max: 40ms\nhealth_check:\n  \
         slow_start: 0s\n  failure_threshold: 2\n  cooldown: 500ms\nbalancing:\n  policy: {}\n",
        policy.as_str()
    );
    if policy == PolicyKind::ConsistentHash {
        yaml.push_str("  hash_key: client_address\n");
    }
    yaml.push_str("backends:\n");
    for i in 0..primaries {
        yaml.push_str(&format!(
            "  - id: p{i}\n    url: http://10.0.0.{}:80\n",
            i + 1
        ));
    }
    yaml.push_str("pools:\n  shadow:\n    backends:\n");
    for i in 0..shadows {
        yaml.push_str(&format!(
            "      - id: s{i}\n        url: http://10.0.9.{}:80\n",
            i + 1
        ));
    }
    yaml.push_str(&format!(
        "routes:\n  - prefix: /\n    pool: default\n    mirror: {{pool: shadow, percent: {percent}}}\n"
    ));
    let n = between(&mut rng, 150, 400);
    let span = between(&mut rng, 3_000, 8_000);
    let mut arrivals = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let at = Instant::from_millis(rng.below(span));
        let (method, body) = match rng.below(10) {
            0..=4 => (Method::GET, BodyInfo::Empty),
            5..=7 => (Method::POST, BodyInfo::Sized(rng.below(body_limit * 2))),
            8 => (Method::PUT, BodyInfo::Unsized),
            _ => (Method::GET, BodyInfo::Sized(rng.below(body_limit))),
        };
        arrivals.push((at, method, body));
    }
    arrivals.sort_by_key(|(at, _, _)| *at);
    Setup {
        yaml,
        arrivals,
        fault_at: Instant::from_millis(between(&mut rng, 0, span / 2)),
        max_in_flight,
        seed,
    }
}

/// A future fact of the run.
#[derive(Debug)]
enum Ev {
    Arrive(usize),
    /// The exchange's own deadline.
    Timer(usize),
    /// The answer to attempt `attempt` of request `req`.
    Head {
        req: usize,
        attempt: u32,
        status: u16,
    },
    /// The delivered body ends.
    BodyEnd(usize),
    /// Mirror `id` ends so.
    MirrorEnd {
        id: usize,
        end: MirrorEnd,
    },
}

struct State<'s> {
    s: &'s Setup,
    fate: ShadowFate,
    rt: Arc<Runtime>,
    services: Arc<Services>,
    now: Instant,
    seq: u64,
    queue: BTreeMap<(Instant, u64), Ev>,
    core: WyRand,
    primary_rng: WyRand,
    mirror_rng: WyRand,
    exchanges: Vec<Option<Exchange>>,
    attempt: Vec<u32>,
    tickets: BTreeMap<u64, usize>,
    mirrors: Vec<Option<Mirror>>,
    run: Run,
}

impl State<'_> {
    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    fn feed(&mut self, req: usize, input: Input) -> Result<(), String> {
        let now = self.now;
        let Some(x) = self.exchanges[req].as_mut() else {
            return Ok(());
        };
        x.handle_input(input, now, &mut self.core);
        self.drain(req)
    }

    fn drain(&mut self, req: usize) -> Result<(), String> {
        loop {
            let Some(x) = self.exchanges[req].as_mut() else {
                return Ok(());
            };
            let Some(out) = x.poll_output() else {
                break;
            };
            self.exec(req, out)?;
        }
        if self.exchanges[req].as_ref().is_some_and(Exchange::is_done) {
            self.exchanges[req] = None;
        }
        if let Some(t) = self.exchanges[req]
            .as_ref()
            .and_then(Exchange::poll_timeout)
        {
            self.schedule(t, Ev::Timer(req));
        }
        let held = self.services.mirrors().current();
        if held > self.s.max_in_flight {
            return Err(format!(
                "{held} mirrors in flight, over mirror_max_in_flight {}",
                self.s.max_in_flight
            ));
        }
        Ok(())
    }

    fn exec(&mut self, req: usize, out: Output) -> Result<(), String> {
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
            Output::Send(send) => {
                if send.backend >= self.rt.pool(0).map_or(0, |p| p.backends().len()) {
                    return Err(format!(
                        "request {req}: an attempt outside the primary pool"
                    ));
                }
                self.attempt[req] = send.attempt;
                let latency = ms(2 + self.primary_rng.below(120));
                let status = if self.primary_rng.below(100) < 8 {
                    503
                } else {
                    200
                };
                self.schedule(
                    send.at + latency,
                    Ev::Head {
                        req,
                        attempt: send.attempt,
                        status,
                    },
                );
            }
            Output::Mirror(send) => self.mirror(req, send.pool)?,
            Output::Deliver(d) => {
                let status = d.deliver.status;
                self.run.outcomes[req] = Some(Outcome {
                    status,
                    at: self.now.as_nanos(),
                    backend: Some(d.deliver.backend),
                    attempt: d.deliver.attempt,
                });
                self.schedule(self.now + ms(1), Ev::BodyEnd(req));
            }
            Output::Answer(a) => {
                self.run.outcomes[req] = Some(Outcome {
                    status: a.status(),
                    at: self.now.as_nanos(),
                    backend: None,
                    attempt: 0,
                });
            }
            Output::Metric(Metric::Mirror(r)) => {
                let i = MirrorResult::ALL.iter().position(|x| *x == r).unwrap_or(0);
                self.run.mirrors[i] += 1;
            }
            // Hedging is off here (`hedge_delay` 0s): a cancelled attempt is a leak of it.
            Output::Cancel { attempt } => {
                return Err(format!(
                    "request {req}: attempt {attempt} cancelled, but this world never hedges"
                ));
            }
            Output::StoreTake { .. }
            | Output::AbortBody
            | Output::Metric(_)
            | Output::Outliers(_)
            | Output::Record(_) => {}
        }
        Ok(())
    }

    /// Take the announced mirror and play the mirror pool's fate.
    fn mirror(&mut self, req: usize, pool: usize) -> Result<(), String> {
        if pool == 0 {
            return Err(format!("request {req}: mirrored to the primary pool"));
        }
        let Some(m) = self.exchanges[req].as_mut().and_then(Exchange::take_mirror) else {
            return Err(format!("request {req}: a mirror announced but not there"));
        };
        let deadline = m.deadline(self.rt.retry(), None);
        let faulty = self.now >= self.s.fault_at;
        let (at, end) = match (self.fate, faulty) {
            (ShadowFate::Healthy, _) | (_, false) => {
                let latency = ms(1 + self.mirror_rng.below(300));
                if self.now + latency >= deadline {
                    (deadline, MirrorEnd::Timeout)
                } else {
                    (self.now + latency, MirrorEnd::Status(200))
                }
            }
            (ShadowFate::Hangs, true) => (deadline, MirrorEnd::Timeout),
            (ShadowFate::Dies, true) => (self.now + ms(1), MirrorEnd::Connect),
        };
        self.mirrors.push(Some(m));
        let id = self.mirrors.len() - 1;
        self.schedule(at, Ev::MirrorEnd { id, end });
        Ok(())
    }

    fn step(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Arrive(req) => {
                let (_, method, body) = &self.s.arrivals[req];
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
                self.exchanges[req] = Some(x);
                self.drain(req)
            }
            Ev::Timer(req) => {
                let due = self.exchanges[req]
                    .as_ref()
                    .and_then(Exchange::poll_timeout)
                    .is_some_and(|t| t <= self.now);
                if due {
                    self.feed(req, Input::Timeout)?;
                }
                Ok(())
            }
            Ev::Head {
                req,
                attempt,
                status,
            } => {
                let current = self.attempt[req] == attempt
                    && self.exchanges[req].as_ref().is_some_and(|x| {
                        matches!(x.stage(), weir_core::exchange::Stage::Awaiting { .. })
                    });
                if current {
                    self.feed(req, Input::ResponseHead { status })?;
                }
                Ok(())
            }
            Ev::BodyEnd(req) => self.feed(req, Input::BodyEnd(BodyEnd::Complete)),
            Ev::MirrorEnd { id, end } => {
                if let Some(m) = self.mirrors[id].take() {
                    let _ = m.finish(end, self.rt.retry(), self.now);
                }
                Ok(())
            }
        }
    }
}

/// Run the setup of `seed` with the mirror pool's `fate`.
///
/// # Errors
/// A broken invariant of the run itself (the bound, a stray attempt), or an invalid setup.
pub fn run(seed: u64, fate: ShadowFate) -> Result<Run, String> {
    let s = setup(seed);
    run_setup(&s, fate)
}

fn run_setup(s: &Setup, fate: ShadowFate) -> Result<Run, String> {
    let cfg = load(&s.yaml, &MapSecrets::new()).map_err(|e| e.to_string())?;
    let mut core = WyRand::new(s.seed ^ 0xc0de);
    let rt = Runtime::build(cfg, None, Instant::ZERO, &mut core).map_err(|e| e.to_string())?;
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
    .map_err(|e| e.to_string())?;
    let services = Services::new(
        Arc::new(Gate::new(rt.config().gate)),
        StorageKind::Local,
        Arc::new(local),
        Arc::new(StoreCircuit::new(ms(200))),
    );
    let n = s.arrivals.len();
    let mut st = State {
        s,
        fate,
        rt: Arc::new(rt),
        services: Arc::new(services),
        now: Instant::ZERO,
        seq: 0,
        queue: BTreeMap::new(),
        core,
        primary_rng: WyRand::new(s.seed ^ 0x7072_696d),
        mirror_rng: WyRand::new(s.seed ^ 0x7368_6164),
        exchanges: (0..n).map(|_| None).collect(),
        attempt: vec![0; n],
        tickets: BTreeMap::new(),
        mirrors: Vec::new(),
        run: Run {
            outcomes: vec![None; n],
            ..Run::default()
        },
    };
    for (i, (at, _, _)) in s.arrivals.iter().enumerate() {
        st.schedule(*at, Ev::Arrive(i));
    }
    while let Some(((at, _), ev)) = st.queue.pop_first() {
        st.now = at;
        st.step(ev)?;
    }
    if st.exchanges.iter().any(Option::is_some) {
        return Err("a request never ended".to_owned());
    }
    if st.services.mirrors().current() != 0 {
        return Err(format!(
            "{} mirror places never given back",
            st.services.mirrors().current()
        ));
    }
    let pool = st.rt.pool(0).ok_or("no primary pool")?;
    st.run.primary_failures = pool
        .backends()
        .iter()
        .map(|b| b.passive_failures())
        .collect();
    Ok(st.run)
}

/// The scenario for `seed`: the three fates, compared (module doc).
///
/// # Errors
/// The first broken invariant, with the seed and what differed.
pub fn mirror_isolation(seed: u64) -> Result<Summary, String> {
    let s = setup(seed);
    let mut runs = Vec::with_capacity(3);
    for fate in ShadowFate::ALL {
        let run = run_setup(&s, fate)
            .map_err(|e| format!("mirror_isolation seed {seed} ({fate:?}): {e}"))?;
        runs.push(run);
    }
    let reference = &runs[0];
    for (fate, run) in ShadowFate::ALL.iter().zip(&runs).skip(1) {
        if let Some(i) =
            (0..reference.outcomes.len()).find(|&i| reference.outcomes[i] != run.outcomes[i])
        {
            return Err(format!(
                "mirror_isolation seed {seed}: invariant mirror_isolated (C-MIRROR-1) violated: \
                 request {i} got {:?} with a healthy mirror pool, {:?} when it {fate:?}",
                reference.outcomes[i], run.outcomes[i]
            ));
        }
        if run.primary_failures != reference.primary_failures {
            return Err(format!(
                "mirror_isolation seed {seed}: invariant mirror_isolated (C-MIRROR-1) violated: \
                 primary passive failures {:?} vs {:?} ({fate:?})",
                reference.primary_failures, run.primary_failures
            ));
        }
    }
    let mut summary = Summary {
        requests: s.arrivals.len() as u64,
        ..Summary::default()
    };
    for (i, run) in runs.iter().enumerate() {
        summary.mirrors[i] = run.mirrors;
        if run.outcomes.iter().any(Option::is_none) {
            return Err(format!(
                "mirror_isolation seed {seed}: a request got no response"
            ));
        }
    }
    Ok(summary)
}
