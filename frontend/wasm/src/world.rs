//! The demo's world: one weir instance made of weir-core's own machines (the runtime snapshot,
//! the global gate, the local rate-limit store, one `Exchange` per request, the probe schedule)
//! in front of weir-sim's virtual backends ([`SimBackend`]), on a virtual clock that the page
//! advances. Every decision is the core's; this file only carries out the exchange's outputs as
//! an adapter does (weir-proxy's `proxy.rs`, weir-sim's world), and answers management calls
//! with `mgmt::handle` and `mgmt::status_document`, exactly as weir-proxy's `management.rs`.

use core::time::Duration;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use weir_core::Instant;
use weir_core::admission::Gate;
use weir_core::config::{BackendConfig, Config, MapSecrets, validate_config};
use weir_core::exchange::Services;
use weir_core::exchange::{Answer, BodyInfo, Exchange, Head, Input, Metric, Output, SendFailure};
use weir_core::flow::BodyEnd;
use weir_core::health::{ProbeSchedule, ProbeToken};
use weir_core::mgmt::{self, BucketFacts, Decision, MgmtRequest, StatusFacts};
use weir_core::rate::{LocalStore, LocalStoreParams, StorageKind, StoreCircuit};
use weir_core::rng::{Rng, WyRand};
use weir_core::runtime::Runtime;
use weir_sim::backend::{Latency, Mode, Reply, SimBackend};

/// Most virtual backends (the count selector's range).
pub const MAX_BACKENDS: usize = 8;
/// The visitor's address (the status document's `client_ip`, the bucket the demo limits).
const VISITOR: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));

/// A future fact.
#[derive(Debug, Clone, Copy)]
enum Ev {
    Reply {
        req: u64,
        attempt: u32,
        reply: Reply,
    },
    BodyEnd {
        req: u64,
        attempt: u32,
    },
    Timer {
        req: u64,
    },
    Probe {
        token: ProbeToken,
        ok: bool,
    },
    HealthTimer,
    Steady,
}

#[derive(Debug)]
struct Req {
    x: Exchange,
    started: Instant,
    steady: bool,
    attempt: u32,
    attempts: Vec<(String, Cow<'static, str>)>,
    status: Option<u16>,
    backend: Option<String>,
    timer: Option<Instant>,
}

/// One finished request, for the request log.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub id: u64,
    pub steady: bool,
    pub status: u16,
    pub backend: Option<String>,
    pub attempts: Vec<(String, Cow<'static, str>)>,
    pub request_id: String,
    pub duration_ms: f64,
}

/// The demo instance (module doc).
#[derive(Debug)]
pub struct World {
    now: Instant,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    runtime: Arc<Runtime>,
    services: Arc<Services>,
    schedule: ProbeSchedule,
    health_timer: Option<Instant>,
    backends: Vec<SimBackend>,
    reqs: HashMap<u64, Req>,
    tickets: HashMap<u64, u64>,
    next_id: u64,
    done: Vec<Finished>,
    steady_every: Option<Duration>,
    rng: WyRand,
    rng_backends: WyRand,
    instance_id: String,
    no_headers: http::HeaderMap,
}

/// The demo's configuration: eight virtual backends, the first three enabled, limits small
/// enough to watch (a bucket of 30, a retry budget of 5, a gate of 8 with a queue of 8).
fn config() -> Config {
    let mut cfg = Config {
        backends: (1..=MAX_BACKENDS)
            .map(|i| BackendConfig {
                id: format!("backend-{i}"),
                url: format!("http://10.0.0.{i}:80"),
                weight: 1,
                disabled: i > 3,
                send_proxy_protocol: None,
                protocol: None,
            })
            .collect(),
        ..Config::default()
    };
    cfg.rate_limit.enabled = true;
    cfg.rate_limit.capacity = 30;
    cfg.rate_limit.refill_per_second = 10.0;
    cfg.server.retry.max_attempts = 3;
    cfg.server.retry.per_try_timeout = Duration::from_millis(800);
    cfg.server.retry.budget_capacity = 5;
    cfg.server.retry.budget_refill_per_second = 1.0;
    cfg.server.overload.max_concurrent_requests = 8;
    cfg.server.overload.max_queue = Some(8);
    cfg.server.overload.queue_timeout = Duration::from_millis(300);
    cfg.health_check.interval = Duration::from_secs(1);
    cfg.health_check.timeout = Duration::from_millis(500);
    cfg.health_check.jitter = Duration::from_millis(100);
    cfg.health_check.cooldown = Duration::from_secs(5);
    cfg.health_check.slow_start = Duration::from_secs(15);
    cfg.management.allow_insecure = true;
    cfg.management.runtime_mutations = true;
    cfg
}

impl World {
    /// A new instance with `seed` deciding every draw.
    ///
    /// # Errors
    /// The embedded configuration is invalid (a bug).
    pub fn new(seed: u64) -> Result<World, String> {
        let mut master = WyRand::new(seed);
        let mut rng = master.fork();
        let rng_backends = master.fork();
        let valid = validate_config(config(), &MapSecrets::new()).map_err(|e| e.to_string())?;
        let local = LocalStore::new(
            LocalStoreParams {
                shards: 1,
                max_buckets: 1024,
            },
            rng.next_u64(),
        )
        .map_err(|e| e.to_string())?;
        let services = Arc::new(Services::new(
            Arc::new(Gate::new(valid.gate)),
            StorageKind::Local,
            Arc::new(local),
            Arc::new(StoreCircuit::default()),
        ));
        let health = valid.health.params;
        let runtime = Arc::new(
            Runtime::build(valid, None, Instant::ZERO, &mut rng).map_err(|e| e.to_string())?,
        );
        let ids: Vec<String> = runtime.backend_ids().map(str::to_owned).collect();
        let schedule = ProbeSchedule::new(ids.clone(), health, Instant::ZERO);
        let backends = ids
            .iter()
            .map(|id| {
                let mut b = SimBackend::new(id, latency(20.0));
                b.url = String::new();
                b
            })
            .collect();
        let instance_id = format!("demo-{:08x}", rng.next_u64() as u32);
        let mut w = World {
            now: Instant::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            runtime,
            services,
            schedule,
            health_timer: None,
            backends,
            reqs: HashMap::new(),
            tickets: HashMap::new(),
            next_id: 1,
            done: Vec::new(),
            steady_every: None,
            rng,
            rng_backends,
            instance_id,
            no_headers: http::HeaderMap::new(),
        };
        w.drive_health();
        Ok(w)
    }

    /// Virtual time now.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at.max(self.now), self.seq), ev);
    }

    /// Run every event due up to `to` (a time before now changes nothing).
    pub fn advance(&mut self, to: Instant) {
        while let Some((&(t, seq), _)) = self.queue.first_key_value() {
            if t > to {
                break;
            }
            let Some(ev) = self.queue.remove(&(t, seq)) else {
                break;
            };
            self.now = t;
            self.handle(ev);
        }
        self.now = self.now.max(to);
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Reply {
                req,
                attempt,
                reply,
            } => self.reply(req, attempt, reply),
            Ev::BodyEnd { req, attempt } => {
                if self.reqs.get(&req).is_some_and(|r| r.attempt == attempt) {
                    self.input(req, Input::BodyEnd(BodyEnd::Complete));
                }
            }
            Ev::Timer { req } => {
                let due = self.reqs.get(&req).and_then(|r| r.timer);
                if due.is_some_and(|d| d <= self.now) {
                    self.input(req, Input::Timeout);
                }
            }
            Ev::Probe { token, ok } => {
                if let Some(c) = self
                    .schedule
                    .handle_result(token, ok, self.now, &mut self.rng)
                {
                    self.publish_health(c);
                }
                self.drive_health();
            }
            Ev::HealthTimer => {
                if self.health_timer.is_some_and(|t| t <= self.now) {
                    self.health_timer = None;
                    self.schedule.handle_timeout(self.now, &mut self.rng);
                    self.drive_health();
                }
            }
            Ev::Steady => {
                if let Some(every) = self.steady_every {
                    self.start_request(true);
                    self.schedule(self.now + every, Ev::Steady);
                }
            }
        }
    }

    // ------------------------------------------------------------------ health

    fn drive_health(&mut self) {
        while let Some(p) = self.schedule.poll_probe(self.now) {
            let answer = self
                .backends
                .get(p.backend_index)
                .and_then(|b| b.probe(&mut self.rng_backends));
            if let Some((after, ok)) = answer {
                self.schedule(self.now + after, Ev::Probe { token: p.token, ok });
            }
        }
        while let Some(c) = self.schedule.poll_change() {
            self.publish_health(c);
        }
        if let Some(t) = self.schedule.poll_timeout()
            && self.health_timer != Some(t)
        {
            self.health_timer = Some(t);
            self.schedule(t, Ev::HealthTimer);
        }
    }

    /// A flip of the active checks, published on the backend (C-HEALTH-2).
    fn publish_health(&self, c: weir_core::health::HealthChange) {
        if let Some(id) = self.schedule.id(c.backend_index)
            && let Some((_, b)) = self.runtime.find_backend(id)
        {
            b.set_healthy(c.health.is_healthy(), self.now);
        }
    }

    // ---------------------------------------------------------------- requests

    /// Start one `GET /` from the visitor; its result comes out of [`World::take_finished`].
    pub fn start_request(&mut self, steady: bool) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let method = http::Method::GET;
        let head = Head {
            method: &method,
            path: "/",
            target: "/",
            headers: &self.no_headers,
            peer: VISITOR,
            tls: false,
            body: BodyInfo::Empty,
            authority: None,
        };
        let x = Exchange::new(
            Arc::clone(&self.runtime),
            Arc::clone(&self.services),
            &head,
            self.now,
            &mut self.rng,
        );
        self.reqs.insert(
            id,
            Req {
                x,
                started: self.now,
                steady,
                attempt: 0,
                attempts: Vec::new(),
                status: None,
                backend: None,
                timer: None,
            },
        );
        self.outputs(id);
        id
    }

    fn input(&mut self, id: u64, input: Input) {
        let now = self.now;
        if let Some(r) = self.reqs.get_mut(&id) {
            r.x.handle_input(input, now, &mut self.rng);
        }
        self.outputs(id);
    }

    fn reply(&mut self, id: u64, attempt: u32, reply: Reply) {
        if self.reqs.get(&id).is_none_or(|r| r.attempt != attempt) {
            return; // a late answer on a closed connection
        }
        let input = match reply {
            Reply::Refused => Input::SendFailed(SendFailure::Connect),
            // The demo's backends speak HTTP/1: no stream to refuse.
            Reply::RefusedStream => Input::SendFailed(SendFailure::Refused { held: true }),
            Reply::Broken => Input::SendFailed(SendFailure::Transport {
                client_body_failed: false,
            }),
            Reply::Head { status, body } => {
                let end = body
                    .unwrap_or(Duration::from_secs(1))
                    .min(Duration::from_millis(50));
                self.schedule(self.now + end, Ev::BodyEnd { req: id, attempt });
                Input::ResponseHead { status }
            }
            Reply::PushBack { secs, .. } => {
                self.schedule(
                    self.now + Duration::from_millis(1),
                    Ev::BodyEnd { req: id, attempt },
                );
                Input::PushbackHead {
                    status: 503,
                    after: Duration::from_secs(secs),
                }
            }
        };
        self.input(id, input);
    }

    /// Carry out the exchange's outputs, as an adapter does; then arm its timer.
    fn outputs(&mut self, id: u64) {
        loop {
            let Some(r) = self.reqs.get_mut(&id) else {
                return;
            };
            let Some(out) = r.x.poll_output() else {
                break;
            };
            self.exec(id, out);
        }
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        if r.x.is_done() {
            self.finish(id);
            return;
        }
        let t = r.x.poll_timeout();
        if t != r.timer {
            r.timer = t;
            if let Some(t) = t {
                self.schedule(t, Ev::Timer { req: id });
            }
        }
    }

    fn exec(&mut self, id: u64, out: Output) {
        match out {
            Output::GateWait { ticket } => {
                self.tickets.insert(ticket, id);
            }
            Output::GateWake { ticket } => {
                if let Some(waiter) = self.tickets.remove(&ticket) {
                    if let Some(r) = self.reqs.get_mut(&waiter) {
                        let now = self.now;
                        r.x.handle_input(Input::GateHandoff, now, &mut self.rng);
                    }
                    self.outputs(waiter);
                }
            }
            Output::BufferBody { .. } => {
                if let Some(r) = self.reqs.get_mut(&id) {
                    let now = self.now;
                    r.x.handle_input(Input::BodyBuffered, now, &mut self.rng);
                }
            }
            Output::Send(s) => self.send(id, s.backend, s.attempt),
            Output::Answer(a) => self.answered(id, &a),
            Output::Deliver(d) => {
                if let Some(r) = self.reqs.get_mut(&id) {
                    r.status = Some(d.deliver.status);
                    r.backend = r.x.backend(d.deliver.backend).map(|b| b.id().to_owned());
                }
            }
            Output::Metric(Metric::Attempt {
                backend,
                result,
                status,
                ..
            }) => {
                if let Some(r) = self.reqs.get_mut(&id) {
                    let name =
                        r.x.backend(backend)
                            .map_or(String::new(), |b| b.id().to_owned());
                    r.attempts.push((name, result.detail(status)));
                }
            }
            // Outlier events become the live proxy's WARN lines and counters; the demo keeps
            // neither an event log nor counters. The demo has no mirror pool: a mirror (never
            // configured there) is not sent. Its pool does not hedge (`hedge_delay` 0s): no
            // attempt is ever cancelled.
            Output::StoreTake { .. }
            | Output::Cancel { .. }
            | Output::AbortBody
            | Output::Metric(_)
            | Output::Mirror(_)
            | Output::Outliers(_)
            | Output::Record(_) => {}
        }
    }

    fn answered(&mut self, id: u64, a: &Answer) {
        if let Some(r) = self.reqs.get_mut(&id) {
            r.status = r.x.synthetic(a).map(|s| s.status());
        }
    }

    fn send(&mut self, id: u64, backend: usize, attempt: u32) {
        let Some(r) = self.reqs.get_mut(&id) else {
            return;
        };
        r.attempt = attempt;
        let per_try = r.x.runtime().config().retry.per_try_timeout();
        let Some(b) = r.x.backend(backend) else {
            return;
        };
        let Some(sim) = self.backends.iter().find(|s| s.id == b.id()) else {
            return;
        };
        let planned = sim.plan_attempt(per_try, &mut self.rng_backends);
        self.schedule(
            self.now + planned.after,
            Ev::Reply {
                req: id,
                attempt,
                reply: planned.reply,
            },
        );
    }

    fn finish(&mut self, id: u64) {
        let Some(r) = self.reqs.remove(&id) else {
            return;
        };
        let elapsed = self.now.saturating_since(r.started);
        self.done.push(Finished {
            id,
            steady: r.steady,
            status: r.status.unwrap_or(0),
            backend: r.backend,
            attempts: r.attempts,
            request_id: r.x.request_id().as_str().to_owned(),
            duration_ms: elapsed.as_secs_f64() * 1000.0,
        });
    }

    /// The requests finished since the last call.
    pub fn take_finished(&mut self) -> Vec<Finished> {
        core::mem::take(&mut self.done)
    }

    /// Steady traffic at `rps` requests per second (0 stops it).
    pub fn set_steady(&mut self, rps: f64) {
        let was = self.steady_every.is_some();
        self.steady_every = (rps > 0.0).then(|| Duration::from_secs_f64(1.0 / rps.min(500.0)));
        if !was && self.steady_every.is_some() {
            self.schedule(self.now, Ev::Steady);
        }
    }

    /// Change virtual backend `index`'s behaviour: `up`, `slow` (headers after the per-try
    /// timeout), `503` (every answer), `reset` (every connection broken), `down` (refused).
    pub fn set_backend(&mut self, index: usize, mode: &str, latency_ms: f64) {
        let Some(b) = self.backends.get_mut(index) else {
            return;
        };
        b.latency = latency(latency_ms);
        b.mode = match mode {
            "slow" => Mode::SlowHeaders,
            "503" => Mode::Burst503(1000),
            "reset" => Mode::TrafficFails(1000),
            "down" => Mode::Down,
            _ => Mode::Up,
        };
        b.probes_fail = false;
    }

    // -------------------------------------------------------------- management

    /// The status document, as `GET /api/dashboard/status` builds it.
    #[must_use]
    pub fn status(&self) -> String {
        let rt = &self.runtime;
        let rate = &rt.config().rate;
        let bucket = if rate.enabled() {
            let key = rate.key().key(VISITOR);
            BucketFacts {
                tokens: self.services.local().peek(key, &rate.bucket(), self.now) / 1000,
                degraded: false,
            }
        } else {
            BucketFacts::default()
        };
        let gate = self.services.gate();
        let facts = StatusFacts {
            instance_id: &self.instance_id,
            ready: self.services.ready(rt, self.now),
            client: VISITOR,
            bucket,
            gate_in_flight: gate.in_flight(),
            gate_queued: gate.queued(),
            dns: &[],
        };
        serde_json::to_string(&mgmt::status_document(rt, &facts, self.now))
            .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// One management call as the console sends it (JSON and the CSRF header, C-MGMT-2),
    /// through `mgmt::handle`: `(status, body)`.
    pub fn management(&mut self, method: &str, path: &str, body: &str) -> (u16, String) {
        let Ok(method) = http::Method::from_bytes(method.as_bytes()) else {
            return (400, "{\"message\":\"bad method\"}".to_owned());
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/json"),
        );
        headers.insert("x-balancer-csrf", http::HeaderValue::from_static("1"));
        let req = MgmtRequest {
            method: &method,
            path,
            headers: &headers,
            body: body.as_bytes(),
            client: VISITOR,
        };
        let rid = format!("demo-{:x}", self.rng.next_u64());
        let decision = mgmt::handle(&req, &self.runtime, self.now, &mut self.rng);
        let reply = match decision {
            Decision::Read(_) => return (200, self.status()),
            Decision::Reply(r) => r,
            Decision::RefillBucket { key, tokens, reply } => {
                let bucket = self.runtime.config().rate.bucket();
                let local = self.services.local();
                local.reset(key);
                for _ in 0..bucket.capacity().saturating_sub(tokens) {
                    let _ = local.take(key, &bucket, self.now);
                }
                reply
            }
            Decision::Publish { runtime, reply } => {
                self.schedule.set_params(runtime.config().health.params);
                self.runtime = Arc::new(*runtime);
                reply
            }
        };
        let resp = reply.to_http(&rid);
        (resp.status().as_u16(), resp.into_body())
    }
}

fn latency(ms: f64) -> Latency {
    let base = Duration::from_secs_f64(ms.clamp(1.0, 60_000.0) / 1000.0);
    Latency::new(base, base / 2)
}

#[cfg(test)]
mod tests;
