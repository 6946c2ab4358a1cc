//! The adaptive concurrency scenario (C-LOAD-4): one backend of finite capacity behind weir's
//! pool, driven by more closed-loop clients than it can serve, in a discrete-event world of its
//! own (a virtual clock, one seed).
//!
//! The backend has `capacity` workers and an unbounded FIFO queue: with `n` requests in flight
//! beyond its workers, latency grows with the queue, as a real server's does. Every request
//! reserves a slot through the real [`Pool::select`] (so the adaptive limit caps it exactly as
//! in production, `503 adaptive concurrency limit` when it is reached) and feeds its end to the
//! backend's machine through [`Slot::record_load`], as the flow does. Health probes are not
//! modelled: they hold no slot and never feed the machine.
//!
//! The run has three phases: *converge* (from `min_limit` to the backend's capacity), *step*
//! (every service time ×3) and *recover* (back to normal). It records the limit at every window
//! boundary and checks it against `[min_limit, max_limit]` after every event; the caller checks
//! the figures ([`AdaptiveRun`]) and that a second run of the seed is bit-identical (its digest
//! of every event).

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use weir_core::adaptive::{AdaptiveParams, Signal};
use weir_core::pool::{BackendSpec, Pool, PoolParams, Slot};
use weir_core::select::{NoBackend, PickContext, PolicyKind, Selection, Tried};
use weir_core::slow_start::SlowStart;
use weir_core::{Instant, Rng, WyRand};

/// What one seed's run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveRun {
    /// The seed.
    pub seed: u64,
    /// The backend's workers.
    pub capacity: u32,
    /// Its mean service time.
    pub service: Duration,
    /// The limit at every window boundary.
    pub limits: Vec<u32>,
    /// Window boundaries of the converge and step phases (the recover phase is the rest).
    pub converge_windows: usize,
    /// See `converge_windows`.
    pub step_windows: usize,
    /// Requests answered by the backend.
    pub answered: u64,
    /// Requests turned away at the adaptive limit.
    pub shed: u64,
    /// Events handled.
    pub events: u64,
    /// A hash of every event, its time and the limit after it.
    pub digest: u64,
}

impl AdaptiveRun {
    /// How many windows a phase's figure averages over: 3 C, several periods of the limit's
    /// saw-tooth (it grows one per window, so a period is about half the capacity).
    #[must_use]
    pub fn tail(&self) -> usize {
        (3 * self.capacity as usize).max(10)
    }

    /// The mean limit over the last [`AdaptiveRun::tail`] windows of the converge phase.
    #[must_use]
    pub fn converged(&self) -> f64 {
        mean(&self.limits[self.converge_windows - self.tail()..self.converge_windows])
    }

    /// The lowest limit within 3 windows of the step's start, as a share of the converged mean.
    #[must_use]
    pub fn step_share(&self) -> f64 {
        let low = self.limits[self.converge_windows..self.converge_windows + 3]
            .iter()
            .copied()
            .min()
            .unwrap_or(0);
        f64::from(low) / self.converged()
    }

    /// The mean limit over the last [`AdaptiveRun::tail`] windows of the recover phase, as a
    /// share of the converged mean.
    #[must_use]
    pub fn recovered_share(&self) -> f64 {
        mean(&self.limits[self.limits.len() - self.tail()..]) / self.converged()
    }
}

fn mean(xs: &[u32]) -> f64 {
    xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len().max(1) as f64
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// A client sends a request.
    Send(usize),
    /// A worker finished request `id`.
    Done(u64),
    /// A window boundary: record the limit.
    Tick,
}

struct Request {
    client: usize,
    slot: Slot,
}

struct World {
    now: Instant,
    seq: u64,
    events: BTreeMap<(Instant, u64), Event>,
    rng: WyRand,
    pool: Pool,
    params: PoolParams,
    capacity: u32,
    service: Duration,
    /// Service times ×`slow` while the step lasts.
    slow: u32,
    busy: u32,
    queue: VecDeque<u64>,
    requests: BTreeMap<u64, Request>,
    next_id: u64,
    run: AdaptiveRun,
}

impl World {
    fn at(&mut self, at: Instant, event: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }

    fn service_time(&mut self) -> Duration {
        // Uniform within ±25 % of the mean.
        let base = u64::try_from(self.service.as_nanos()).unwrap_or(u64::MAX);
        let jitter = self.rng.below(base / 2 + 1);
        Duration::from_nanos((base * 3 / 4 + jitter) * u64::from(self.slow))
    }

    fn start_work(&mut self, id: u64) {
        self.busy += 1;
        let t = self.now + self.service_time();
        self.at(t, Event::Done(id));
    }

    fn send(&mut self, client: usize) {
        let ctx = PickContext::default();
        match self
            .pool
            .select(&ctx, &Tried::new(), self.now, &mut self.rng)
        {
            Selection::Selected { slot, .. } => {
                let id = self.next_id;
                self.next_id += 1;
                self.requests.insert(id, Request { client, slot });
                if self.busy < self.capacity {
                    self.start_work(id);
                } else {
                    self.queue.push_back(id);
                }
            }
            Selection::Unavailable(why) => {
                assert_eq!(
                    why,
                    NoBackend::AdaptiveLimit,
                    "only the adaptive limit sheds"
                );
                self.run.shed += 1;
                // A shed client waits a couple of service times (its `Retry-After`, scaled).
                let wait = self.service * 2;
                self.at(self.now + wait, Event::Send(client));
            }
        }
    }

    fn done(&mut self, id: u64) {
        self.busy -= 1;
        if let Some(next) = self.queue.pop_front() {
            self.start_work(next);
        }
        let Some(mut req) = self.requests.remove(&id) else {
            return;
        };
        req.slot.record_load(Signal::Answer, &self.params, self.now);
        drop(req.slot);
        self.run.answered += 1;
        // A little think time keeps the clients from moving in lockstep.
        let think = self.rng.below(self.service.as_nanos() as u64 / 10 + 1);
        self.at(
            self.now + Duration::from_nanos(think),
            Event::Send(req.client),
        );
    }

    fn limit(&self) -> u32 {
        self.pool.backends()[0]
            .concurrency_limit(&self.params)
            .unwrap_or(0)
    }
}

/// Run the scenario for `seed`, checking after every event that the limit stays within
/// `[min_limit, max_limit]`.
///
/// # Errors
/// The first event after which the limit was out of bounds.
pub fn run(seed: u64, rtt_tolerance: f64) -> Result<AdaptiveRun, String> {
    let mut master = WyRand::new(seed ^ 0xada9_7105);
    let mut rng = master.fork();
    let capacity = 6 + u32::try_from(rng.below(11)).unwrap_or(0); // 6..=16
    let service = Duration::from_millis(5 + rng.below(16)); // 5..=20 ms
    let clients = 3 * capacity as usize + 8;
    // The window is what matters relative to latency: 20 service times, as 1 s is to 50 ms.
    let window = service * 20;
    let adaptive = AdaptiveParams::new(true, 3, None, 256, window, rtt_tolerance, 0.9)
        .map_err(|e| format!("seed {seed}: {e}"))?;
    let params = PoolParams {
        max_concurrent_requests: 256,
        slow_start: SlowStart::off(),
        adaptive,
        ..PoolParams::default()
    };
    let mut core_rng = master.fork();
    let pool = Pool::new(
        &[BackendSpec::new("b0", "http://10.0.0.1:80")],
        PolicyKind::RoundRobin,
        params,
        None,
        Instant::ZERO,
        &mut core_rng,
    )
    .map_err(|e| format!("seed {seed}: {e}"))?;
    pool.backends()[0].set_healthy(true, Instant::ZERO);
    let converge_windows = 4 * capacity as usize + 20;
    let step_windows = 5;
    let recover_windows = 4 * capacity as usize + 20;
    let total = converge_windows + step_windows + recover_windows;
    let mut w = World {
        now: Instant::ZERO,
        seq: 0,
        events: BTreeMap::new(),
        rng: master.fork(),
        pool,
        params,
        capacity,
        service,
        slow: 1,
        busy: 0,
        queue: VecDeque::new(),
        requests: BTreeMap::new(),
        next_id: 0,
        run: AdaptiveRun {
            seed,
            capacity,
            service,
            limits: Vec::with_capacity(total),
            converge_windows,
            step_windows,
            answered: 0,
            shed: 0,
            events: 0,
            digest: 0xcbf2_9ce4_8422_2325,
        },
    };
    for c in 0..clients {
        let start = Duration::from_nanos(w.rng.below(service.as_nanos() as u64));
        w.at(Instant::ZERO + start, Event::Send(c));
    }
    w.at(Instant::ZERO + window, Event::Tick);
    while let Some(((at, _), event)) = w.events.pop_first() {
        w.now = at;
        w.run.events += 1;
        match event {
            Event::Send(c) => w.send(c),
            Event::Done(id) => w.done(id),
            Event::Tick => {
                w.run.limits.push(w.limit());
                let n = w.run.limits.len();
                w.slow = if (converge_windows..converge_windows + step_windows).contains(&n) {
                    3
                } else {
                    1
                };
                if n == total {
                    break;
                }
                w.at(at + window, Event::Tick);
            }
        }
        let limit = w.limit();
        if !(adaptive.min_limit..=adaptive.max_limit).contains(&limit) {
            return Err(format!(
                "seed {seed}: limit {limit} outside [{}, {}] at {at:?} after {event:?}",
                adaptive.min_limit, adaptive.max_limit
            ));
        }
        let code = match event {
            Event::Send(c) => c as u64,
            Event::Done(id) => id | 1 << 62,
            Event::Tick => 1 << 63,
        };
        for x in [at.as_nanos(), code, u64::from(limit)] {
            w.run.digest = (w.run.digest ^ x).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(w.run)
}

#[cfg(test)]
mod tests {
    /// One seed's figures hold and replay bit for bit (the full sweep is sim/tests/adaptive.rs).
    #[test]
    fn c_load_4_one_seed() {
        let a = super::run(1, 1.5).expect("in bounds");
        let b = super::run(1, 1.5).expect("in bounds");
        assert_eq!(a, b);
        assert!(a.shed > 0 && a.answered > 0);
    }
}
