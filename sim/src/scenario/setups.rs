//! The scenarios' setups: each a function of the seed's generator (see the parent module).

use core::time::Duration;

use weir_core::Instant;
use weir_core::admission::GateParams;
use weir_core::breaker::BreakerParams;
use weir_core::health::HealthSpec;
use weir_core::outlier::OutlierParams;
use weir_core::rate::FailureMode;
use weir_core::retry::RetryParams;
use weir_core::rng::{Rng, WyRand};
use weir_core::select::PolicyKind;

use super::setup::{
    Checks, ConnTimers, Generation, H2Setup, PoolSetup, ReloadSetup, RouteSetup, Setup, StoreSetup,
    StoreState, Stream, Timers,
};
use crate::backend::{Fault, H2Model, Latency, Mode, SimBackend, uniform};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at_ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// Uniform in `lo..=hi`.
fn between(rng: &mut WyRand, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi - lo + 1)
}

const PATHS: &[&str] = &["/", "/api/items", "/api/users/7?expand=1", "/static/app.js"];

/// The shared defaults of every scenario: `n` backends in one pool with `policy`, generous
/// limits, a background stream of 40 clients.
fn base(rng: &mut WyRand, n: usize, policy: PolicyKind) -> Setup {
    let backends: Vec<SimBackend> = (0..n)
        .map(|i| {
            let mut b = SimBackend::new(
                &format!("b{i}"),
                Latency::new(ms(between(rng, 3, 25)), ms(between(rng, 5, 40))),
            );
            b.weight = between(rng, 1, 5) as u32;
            b
        })
        .collect();
    let threshold = between(rng, 2, 4) as u32;
    let cooldown = ms(between(rng, 300, 1500));
    let max_cooldown = cooldown * between(rng, 2, 6) as u32;
    let half_open = between(rng, 1, 2) as u32;
    let breaker =
        BreakerParams::new(threshold, half_open, cooldown, max_cooldown).unwrap_or_default();
    let health = HealthSpec {
        interval: ms(between(rng, 500, 1500)),
        jitter: ms(between(rng, 0, 300)),
        timeout: ms(between(rng, 200, 600)),
        failure_threshold: between(rng, 1, 3) as u32,
        success_threshold: between(rng, 1, 2) as u32,
        max_concurrency: between(rng, 1, 8) as u32,
        expected_statuses: vec![200, 204],
    };
    let retry = RetryParams {
        max_attempts: between(rng, 2, (n as u64).clamp(2, 4)) as u32,
        per_try_timeout: ms(between(rng, 400, 1200)),
        body_limit: 64 * 1024,
        methods: vec!["GET".into(), "HEAD".into(), "OPTIONS".into(), "PUT".into()],
        statuses: vec![502, 503, 504],
        budget_capacity: between(rng, 20, 60),
        budget_refill_per_second: between(rng, 5, 20) as f64,
        // C-RETRY-10: off for some seeds, up to 50 ms doubling to at most 300 ms for others.
        backoff_base: ms(between(rng, 0, 50)),
        backoff_max: ms(between(rng, 50, 300)),
        // The simulated adapter runs one attempt at a time: no hedging (C-HEDGE-1 is checked
        // by weir-core's tests and the conformance suite).
        hedge_delay: Duration::ZERO,
    };
    let gate = GateParams::new(256, Some(64), ms(50)).unwrap_or_default();
    Setup {
        backends,
        pools: vec![PoolSetup {
            backends: (0..n).collect(),
            policy,
        }],
        routes: vec![RouteSetup {
            prefix: "/api",
            pool: 0,
            limit: None,
        }],
        max_concurrent_requests: 64,
        breaker,
        breaker_threshold: threshold,
        slow_start_window: ms(between(rng, 2000, 8000)),
        slow_start_minimum_percent: between(rng, 5, 50) as u8,
        health,
        retry,
        gate,
        rate: Some((200, 100.0)),
        streams: vec![Stream {
            clients: 0..40,
            v6: false,
            rate: vec![(Instant::ZERO, between(rng, 15, 30) as u32)],
            paths: PATHS,
        }],
        faults: Vec::new(),
        reloads: Vec::new(),
        drains: Vec::new(),
        fault_end: Instant::ZERO,
        patience: Duration::from_secs(20),
        disconnect_permille: 20,
        checks: Checks::default(),
        // Off: the other scenarios' invariants and liveness bound predate it; the outlier
        // scenarios turn it on with short intervals.
        outlier: OutlierParams {
            enabled: false,
            ..OutlierParams::default()
        },
        retry_after_max: weir_core::backend::DEFAULT_RETRY_AFTER_MAX,
        store: None,
        config_reloads: Vec::new(),
        generations: Vec::new(),
        timers: None,
        conn_timers: None,
        h2: None,
    }
}

/// A random misbehaviour for a window, ending with a recovery.
fn misbehave(rng: &mut WyRand, setup: &mut Setup, backend: usize, from: Instant, len: Duration) {
    let fault = match rng.below(6) {
        0 => Fault::Mode(Mode::HeadThenHang),
        1 => Fault::Mode(Mode::SlowHeaders),
        2 => Fault::Mode(Mode::Burst503(between(rng, 300, 900) as u32)),
        3 => Fault::Mode(Mode::TrafficFails(between(rng, 300, 1000) as u32)),
        4 => Fault::ProbesFail(true),
        _ => Fault::Refuse,
    };
    setup.faults.push((from, backend, fault));
    setup.faults.push((from + len, backend, Fault::Recover));
}

fn finish(mut setup: Setup) -> Setup {
    setup.faults.sort_by_key(|(t, b, _)| (*t, *b));
    setup.fault_end = setup
        .faults
        .iter()
        .map(|(t, _, _)| *t)
        .chain(setup.reloads.iter().map(|r| r.at))
        .max()
        .unwrap_or(Instant::ZERO);
    setup
}

pub(super) fn backend_crash(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 5) as usize;
    let mut s = base(rng, n, policy);
    let victim = rng.below(n as u64) as usize;
    let crash = at_ms(between(rng, 4000, 9000));
    s.faults.push((crash, victim, Fault::Crash));
    s.faults
        .push((crash + ms(between(rng, 3000, 8000)), victim, Fault::Recover));
    if rng.chance_permille(600) {
        let other = (victim + 1 + rng.below(n as u64 - 1) as usize) % n;
        let from = at_ms(between(rng, 3000, 10000));
        let len = ms(between(rng, 1500, 5000));
        misbehave(rng, &mut s, other, from, len);
    }
    finish(s)
}

pub(super) fn flapping_backend(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 5) as usize;
    let mut s = base(rng, n, policy);
    let flappers = between(rng, 1, 2) as usize;
    let first = rng.below(n as u64) as usize;
    for k in 0..flappers {
        let b = (first + k) % n;
        let (off, on) = match rng.below(4) {
            0 => (Fault::Crash, Fault::Recover),
            1 => (Fault::Refuse, Fault::Recover),
            2 => (Fault::ProbesFail(true), Fault::ProbesFail(false)),
            _ => (Fault::Mode(Mode::TrafficFails(1000)), Fault::Recover),
        };
        let mut t = at_ms(between(rng, 3000, 5000));
        let end = t + ms(between(rng, 8000, 14000));
        let mut down = true;
        while t < end {
            s.faults.push((t, b, if down { off } else { on }));
            down = !down;
            t = t + ms(between(rng, 150, 2500));
        }
        s.faults.push((t, b, Fault::Recover));
    }
    finish(s)
}

pub(super) fn slow_start_recovery(rng: &mut WyRand) -> Setup {
    let mut s = base(rng, 2, PolicyKind::RoundRobin);
    s.slow_start_window = ms(between(rng, 8000, 14000));
    s.slow_start_minimum_percent = between(rng, 5, 20) as u8;
    let cooldown = ms(between(rng, 300, 800));
    s.breaker =
        BreakerParams::new(s.breaker_threshold, 1, cooldown, cooldown * 2).unwrap_or_default();
    s.max_concurrent_requests = 512;
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 40, 60) as u32)];
    let victim = rng.below(2) as usize;
    // After both initial ramps are over, so only the victim's ramp is measured.
    let crash = at_ms(between(rng, 1000, 3000)) + s.slow_start_window;
    s.faults.push((crash, victim, Fault::Crash));
    s.faults
        .push((crash + ms(between(rng, 2000, 4000)), victim, Fault::Recover));
    s.checks.slow_start_watch = Some(victim);
    let mut s = finish(s);
    // Keep traffic flowing through the whole ramp after the recovery.
    s.fault_end = s.fault_end + s.slow_start_window;
    s
}

pub(super) fn retry_storm(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 4, 6) as usize;
    let mut s = base(rng, n, policy);
    s.breaker_threshold = between(rng, 4, 8) as u32;
    let cooldown = ms(between(rng, 300, 1000));
    s.breaker =
        BreakerParams::new(s.breaker_threshold, 1, cooldown, cooldown * 4).unwrap_or_default();
    s.retry.max_attempts = between(rng, 2, (n as u64 - 1).min(5)) as u32;
    s.retry.budget_capacity = between(rng, 5, 20);
    s.retry.budget_refill_per_second = between(rng, 1, 5) as f64;
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 30, 50) as u32)];
    let from = at_ms(between(rng, 3000, 5000));
    let len = ms(between(rng, 6000, 10000));
    for b in 0..n {
        let p = between(rng, 500, 900) as u32;
        s.faults.push((from, b, Fault::Mode(Mode::Burst503(p))));
        s.faults.push((from + len, b, Fault::Recover));
    }
    finish(s)
}

pub(super) fn all_down_then_back(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 2, 4) as usize;
    let mut s = base(rng, n, policy);
    let down = at_ms(between(rng, 4000, 7000));
    let up = down + ms(between(rng, 3000, 8000));
    for b in 0..n {
        let stop = if rng.chance_permille(500) {
            Fault::Crash
        } else {
            Fault::Refuse
        };
        s.faults.push((down + uniform(rng, ms(500)), b, stop));
        s.faults
            .push((up + uniform(rng, ms(1500)), b, Fault::Recover));
    }
    finish(s)
}

pub(super) fn overload_spike(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 4) as usize;
    let mut s = base(rng, n, policy);
    for b in &mut s.backends {
        b.latency = Latency::new(ms(between(rng, 30, 80)), ms(between(rng, 40, 120)));
    }
    s.max_concurrent_requests = between(rng, 3, 8) as u32;
    let max = between(rng, 12, 40) as u32;
    let queue = between(rng, 2, 16) as u32;
    let wait = ms(between(rng, 20, 120));
    s.gate = GateParams::new(max, Some(queue), wait).unwrap_or_default();
    let baseline = between(rng, 15, 25) as u32;
    let spike = at_ms(between(rng, 4000, 7000));
    let spike_len = ms(between(rng, 1500, 3000));
    s.streams[0].rate = vec![
        (Instant::ZERO, baseline),
        (spike, between(rng, 150, 300) as u32),
        (spike + spike_len, baseline),
    ];
    s.disconnect_permille = 40;
    let mut s = finish(s);
    s.fault_end = spike + spike_len;
    s
}

pub(super) fn hot_client(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let mut s = base(rng, 3, policy);
    let capacity = between(rng, 10, 30);
    let refill = between(rng, 5, 20) as f64;
    s.rate = Some((capacity, refill));
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 10, 20) as u32)];
    let from = at_ms(between(rng, 2000, 4000));
    let until = from + ms(between(rng, 6000, 10000));
    s.streams.push(Stream {
        clients: 1000..1001,
        v6: false,
        rate: vec![
            (Instant::ZERO, 0),
            (from, between(rng, 60, 150) as u32),
            (until, 0),
        ],
        paths: PATHS,
    });
    s.streams.push(Stream {
        clients: 2000..2004,
        v6: true,
        rate: vec![
            (Instant::ZERO, 0),
            (from + ms(500), between(rng, 30, 80) as u32),
            (until, 0),
        ],
        paths: PATHS,
    });
    let mut s = finish(s);
    s.fault_end = until;
    s
}

pub(super) fn reload_warmup(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let mut s = base(rng, 3, policy);
    // Spare servers: d0..d2 up (the replacement), g0..g1 down (a bad reload), n0 up (added by
    // a reload that keeps the others).
    let lat = |rng: &mut WyRand| Latency::new(ms(between(rng, 3, 25)), ms(between(rng, 5, 40)));
    for id in ["d0", "d1", "d2", "g0", "g1", "n0"] {
        let mut b = SimBackend::new(id, lat(rng));
        if id.starts_with('g') {
            b.mode = Mode::Down;
        }
        s.backends.push(b);
    }
    // d1 again, moved to another url: the same id with a new url is a new backend (C-CONF-6).
    let mut moved = SimBackend::new("d1", lat(rng));
    moved.url = "http://d1-moved.sim:8080".to_owned();
    s.backends.push(moved);
    let (d, g, n0, d1_moved) = ([3, 4, 5], [6, 7], 8, 9);
    let mut t = at_ms(between(rng, 3000, 5000));
    if rng.chance_permille(400) {
        s.reloads.push(ReloadSetup {
            at: t,
            pool: 0,
            backends: g.to_vec(),
            decommission_after: None,
        });
        t = t + ms(between(rng, 2000, 4000));
    }
    s.reloads.push(ReloadSetup {
        at: t,
        pool: 0,
        backends: d.to_vec(),
        decommission_after: Some(ms(between(rng, 2000, 5000))),
    });
    // The operator drains d0 (C-POOL-7), then a reload drops it, keeps d2 (so it applies at
    // once), adds n0, and keeps or moves d1.
    let third = t + ms(between(rng, 6000, 9000));
    s.drains.push((third - ms(between(rng, 500, 3000)), d[0]));
    let d1 = if rng.chance_permille(500) {
        d1_moved
    } else {
        d[1]
    };
    s.reloads.push(ReloadSetup {
        at: third,
        pool: 0,
        backends: vec![d1, d[2], n0],
        decommission_after: Some(ms(between(rng, 1000, 3000))),
    });
    s.checks.reload_no_gap = true;
    let mut s = finish(s);
    s.fault_end = s.fault_end + Duration::from_secs(6);
    s
}

pub(super) fn small_pool(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 2, 3) as usize;
    let mut s = base(rng, n, policy);
    let from = at_ms(between(rng, 3000, 5000));
    let len = ms(between(rng, 2000, 5000));
    for b in 0..n {
        s.faults
            .push((from, b, Fault::Mode(Mode::TrafficFails(1000))));
        s.faults.push((from + len, b, Fault::Recover));
    }
    let victim = rng.below(n as u64) as usize;
    let crash = from + len + ms(between(rng, 500, 3000));
    s.faults.push((crash, victim, Fault::Crash));
    s.faults
        .push((crash + ms(between(rng, 2000, 5000)), victim, Fault::Recover));
    finish(s)
}

pub(super) fn bulkhead_isolation(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let mut s = base(rng, 2, policy);
    for id in ["s0", "s1"] {
        s.backends.push(SimBackend::new(
            id,
            Latency::new(ms(between(rng, 500, 1200)), ms(between(rng, 200, 1000))),
        ));
    }
    s.pools.push(PoolSetup {
        backends: vec![2, 3],
        policy,
    });
    s.retry.per_try_timeout = Duration::from_secs(5);
    let limit = between(rng, 3, 10) as u32;
    s.routes = vec![
        RouteSetup {
            prefix: "/slow",
            pool: 1,
            limit: Some(limit),
        },
        RouteSetup {
            prefix: "/fast",
            pool: 0,
            limit: if rng.chance_permille(500) {
                Some(200)
            } else {
                None
            },
        },
    ];
    s.streams = vec![
        Stream {
            clients: 0..20,
            v6: false,
            rate: vec![(Instant::ZERO, between(rng, 10, 25) as u32)],
            paths: &["/slow/report", "/slow/export?all=1"],
        },
        Stream {
            clients: 100..140,
            v6: false,
            rate: vec![(Instant::ZERO, between(rng, 15, 30) as u32)],
            paths: &["/fast/items", "/fast"],
        },
    ];
    s.checks.isolated_prefix = Some("/fast");
    let mut s = finish(s);
    s.fault_end = at_ms(between(rng, 8000, 12000));
    s
}

/// A hot client against a shared store that fails and recovers one to three times; the failure
/// policy rotates with `seed / 5` so each policy meets every selection policy (C-RATE-5).
pub(super) fn store_outage(rng: &mut WyRand, policy: PolicyKind, seed: u64) -> Setup {
    let mut s = base(rng, 3, policy);
    s.rate = Some((between(rng, 10, 30), between(rng, 5, 20) as f64));
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 20, 40) as u32)];
    s.streams.push(Stream {
        clients: 1000..1001,
        v6: false,
        rate: vec![(Instant::ZERO, between(rng, 30, 80) as u32)],
        paths: PATHS,
    });
    let failure_mode = [
        FailureMode::LocalFallback,
        FailureMode::FailOpen,
        FailureMode::FailClosed,
    ][((seed / 5) % 3) as usize];
    let operation_timeout = ms(between(rng, 20, 80));
    let mut faults = Vec::new();
    let mut t = at_ms(between(rng, 2000, 4000));
    for _ in 0..between(rng, 1, 3) {
        let state = match rng.below(3) {
            0 => StoreState::Errors,
            1 => StoreState::Hang,
            _ => StoreState::Slow,
        };
        faults.push((t, state));
        t = t + ms(between(rng, 800, 5000));
        faults.push((t, StoreState::Up));
        t = t + ms(between(rng, 300, 3000));
    }
    let latency = (
        Duration::from_micros(between(rng, 200, 2000)),
        operation_timeout / 4,
    );
    let store = StoreSetup {
        failure_mode,
        operation_timeout,
        latency,
        faults,
    };
    let end = store.recovered_at();
    s.store = Some(store);
    let mut s = finish(s);
    s.fault_end = s.fault_end.max(end);
    s
}

/// Configuration reloads every 0.3–1.5 s alternate two retry settings (attempts and per-try
/// timeout) while a backend answers slowly or with 503s: every exchange keeps the snapshot it
/// was created from (C-CONF-4), whatever is published meanwhile.
pub(super) fn reload_mid_request(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 4) as usize;
    let mut s = base(rng, n, policy);
    s.retry.max_attempts = 2;
    s.retry.per_try_timeout = ms(between(rng, 200, 500));
    s.generations = vec![
        Generation {
            max_attempts: s.retry.max_attempts,
            per_try_timeout: s.retry.per_try_timeout,
        },
        Generation {
            max_attempts: n as u32,
            per_try_timeout: ms(between(rng, 900, 2000)),
        },
    ];
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 30, 60) as u32)];
    let from = at_ms(between(rng, 2000, 3000));
    let until = from + ms(between(rng, 6000, 10000));
    let slow = rng.below(n as u64) as usize;
    s.faults.push((from, slow, Fault::Mode(Mode::SlowHeaders)));
    s.faults.push((until, slow, Fault::Recover));
    let burst = (slow + 1) % n;
    let p = between(rng, 300, 800) as u32;
    s.faults.push((from, burst, Fault::Mode(Mode::Burst503(p))));
    s.faults.push((until, burst, Fault::Recover));
    let mut t = from;
    let mut g = 0;
    while t < until {
        t = t + ms(between(rng, 300, 1500));
        g = 1 - g;
        s.config_reloads.push((t, g));
    }
    let mut s = finish(s);
    s.fault_end = s.fault_end.max(t);
    s
}

/// The request timers: some clients send their bodies slowly (past `read_timeout`), response
/// bodies run 1 ms to 5 s against a `write_timeout` of 0.5–3 s, and a backend sends slow headers
/// while `response_header_timeout` is sometimes below the per-try timeout (C-PATH-12, C-PATH-7,
/// C-RETRY-5). Besides, 20–60 client connections go through core's connection watchdog
/// (`ConnWatch`): heads that are fast, slow but in time, or never complete, idle gaps on both
/// sides of the park delay and of `idle_timeout`, and a tenth of them whose parking is stuck.
pub(super) fn connection_timers(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 4) as usize;
    let mut s = base(rng, n, policy);
    let read_timeout = ms(between(rng, 100, 800));
    s.timers = Some(Timers {
        read_timeout,
        write_timeout: ms(between(rng, 500, 3000)),
        response_header_timeout: if rng.chance_permille(500) {
            s.retry.per_try_timeout / 2
        } else {
            s.retry.per_try_timeout * 2
        },
        upload: read_timeout * 2,
    });
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 30, 50) as u32)];
    let from = at_ms(between(rng, 2000, 4000));
    let len = ms(between(rng, 3000, 6000));
    let slow = rng.below(n as u64) as usize;
    s.faults.push((from, slow, Fault::Mode(Mode::SlowHeaders)));
    s.faults.push((from + len, slow, Fault::Recover));
    let hang = (slow + 1) % n;
    let at = from + ms(between(rng, 0, 2000));
    s.faults.push((at, hang, Fault::Mode(Mode::HeadThenHang)));
    s.faults.push((at + len, hang, Fault::Recover));
    s.conn_timers = Some(ConnTimers {
        read_header_timeout: ms(between(rng, 200, 1000)),
        idle_timeout: ms(between(rng, 500, 4000)),
        park_after: Duration::from_secs(1),
        connections: between(rng, 20, 60) as u32,
    });
    finish(s)
}

/// Outlier detection with a short interval and small volumes, drawn from the seed.
fn outlier_on(rng: &mut WyRand) -> OutlierParams {
    let base = ms(between(rng, 1000, 4000));
    OutlierParams {
        enabled: true,
        interval: ms(between(rng, 300, 1000)),
        base_ejection_time: base,
        max_ejection_time: base * between(rng, 1, 5) as u32,
        max_ejection_percent: between(rng, 10, 60) as u32,
        failure_percentage_request_volume: between(rng, 3, 8) as u32,
        success_rate_request_volume: between(rng, 3, 10) as u32,
        success_rate_minimum_hosts: between(rng, 2, 5) as u32,
        ..OutlierParams::default()
    }
}

/// 3–5 backends; one answers `500` to everything for 6–12 s (and in half the seeds a second
/// one answers 30–70 % `500`): outlier detection ejects it within the cap (C-OUT-1, C-OUT-2).
pub(super) fn outlier_500(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 5) as usize;
    let mut s = base(rng, n, policy);
    s.outlier = outlier_on(rng);
    let from = at_ms(between(rng, 2000, 4000));
    let len = ms(between(rng, 6000, 12000));
    let victim = rng.below(n as u64) as usize;
    s.faults
        .push((from, victim, Fault::Mode(Mode::Status500(1000))));
    s.faults.push((from + len, victim, Fault::Recover));
    if rng.chance_permille(500) {
        let other = (victim + 1) % n;
        let p = between(rng, 300, 700) as u32;
        s.faults
            .push((from, other, Fault::Mode(Mode::Status500(p))));
        s.faults.push((from + len, other, Fault::Recover));
    }
    finish(s)
}

/// Six backends; one answers `500` to 30 % of its requests for 8–14 s, below the failure
/// percentage threshold (85 %): success rate (its minimum of hosts 2–5, the five others
/// healthy) is what can eject it, within the cap (C-OUT-1, C-OUT-2).
pub(super) fn outlier_six(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let mut s = base(rng, 6, policy);
    s.outlier = outlier_on(rng);
    let from = at_ms(between(rng, 2000, 4000));
    let len = ms(between(rng, 8000, 14000));
    let victim = rng.below(6) as usize;
    s.faults
        .push((from, victim, Fault::Mode(Mode::Status500(300))));
    s.faults.push((from + len, victim, Fault::Recover));
    finish(s)
}

/// A pool of two whose backends both answer `500` to everything for 5–10 s: at most one is
/// ejected at a time and the pool keeps serving (C-OUT-2).
pub(super) fn outlier_pair(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let mut s = base(rng, 2, policy);
    s.outlier = outlier_on(rng);
    let from = at_ms(between(rng, 2000, 4000));
    let len = ms(between(rng, 5000, 10000));
    for b in 0..2 {
        s.faults.push((from, b, Fault::Mode(Mode::Status500(1000))));
        s.faults.push((from + len, b, Fault::Recover));
    }
    finish(s)
}

/// 2–5 backends; one (in a third of the seeds every one) answers `503` with `Retry-After` for
/// 6–12 s, asking for 1–6 s as delta-seconds or an HTTP-date, against a `retry_after_max` of
/// 1–4 s, with outlier detection on in half the seeds: each is pushed back for as long as it
/// asked (capped), within the outlier cap, and gets no request meanwhile (C-RETRY-11).
pub(super) fn pushback_503(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 2, 5) as usize;
    let mut s = base(rng, n, policy);
    s.retry_after_max = Duration::from_secs(between(rng, 1, 4));
    if rng.chance_permille(500) {
        s.outlier = outlier_on(rng);
    }
    let from = at_ms(between(rng, 2000, 4000));
    let len = ms(between(rng, 6000, 12000));
    let victim = rng.below(n as u64) as usize;
    let pushing: Vec<usize> = if rng.chance_permille(333) {
        (0..n).collect()
    } else {
        vec![victim]
    };
    for b in pushing {
        let mode = Mode::PushBack {
            permille: between(rng, 500, 1000) as u32,
            secs: between(rng, 1, 6),
            date: rng.chance_permille(500),
        };
        s.faults.push((from, b, Fault::Mode(mode)));
        s.faults.push((from + len, b, Fault::Recover));
    }
    finish(s)
}

/// Every backend of `s` speaks HTTP/2 and advertises `SETTINGS_MAX_CONCURRENT_STREAMS` drawn
/// from `streams`; weir's `max_conns_per_host` is `max_conns`.
fn h2_on(rng: &mut WyRand, s: &mut Setup, streams: (u64, u64), max_conns: Option<u32>) {
    for b in &mut s.backends {
        b.h2 = Some(H2Model::new(between(rng, streams.0, streams.1) as u32));
    }
    s.h2 = Some(H2Setup {
        max_conns_per_host: max_conns,
        connect_timeout: ms(between(rng, 150, 500)),
        settings_after: ms(between(rng, 1, 5)),
    });
}

/// `max_conns_per_host`: unlimited in a fifth of the seeds, else `lo..=hi`.
fn h2_max_conns(rng: &mut WyRand, lo: u64, hi: u64) -> Option<u32> {
    if rng.chance_permille(200) {
        None
    } else {
        Some(between(rng, lo, hi) as u32)
    }
}

pub(super) fn h2_stream_limit(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 2, 4) as usize;
    let mut s = base(rng, n, policy);
    for b in &mut s.backends {
        b.latency = Latency::new(ms(between(rng, 10, 50)), ms(between(rng, 20, 80)));
    }
    let max_conns = h2_max_conns(rng, 1, 4);
    h2_on(rng, &mut s, (2, 8), max_conns);
    let baseline = between(rng, 20, 40) as u32;
    let spike = at_ms(between(rng, 4000, 7000));
    let spike_len = ms(between(rng, 1500, 3000));
    s.streams[0].rate = vec![
        (Instant::ZERO, baseline),
        (spike, between(rng, 80, 200) as u32),
        (spike + spike_len, baseline),
    ];
    let mut s = finish(s);
    s.fault_end = spike + spike_len;
    s
}

pub(super) fn h2_refused_goaway(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 5) as usize;
    let mut s = base(rng, n, policy);
    let max_conns = h2_max_conns(rng, 2, 4);
    h2_on(rng, &mut s, (4, 50), max_conns);
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 30, 80) as u32)];
    let refuser = rng.below(n as u64) as usize;
    let from = at_ms(between(rng, 3000, 6000));
    s.faults.push((
        from,
        refuser,
        Fault::Mode(Mode::RefuseStreams(between(rng, 100, 600) as u32)),
    ));
    s.faults.push((
        from + ms(between(rng, 4000, 10000)),
        refuser,
        Fault::Recover,
    ));
    for _ in 0..between(rng, 3, 8) {
        let b = rng.below(n as u64) as usize;
        s.faults
            .push((at_ms(between(rng, 3000, 14000)), b, Fault::GoAway));
    }
    // A rolling restart: a graceful GOAWAY, refused connections, back.
    let restarted = rng.below(n as u64) as usize;
    let at = at_ms(between(rng, 4000, 12000));
    s.faults.push((at, restarted, Fault::Refuse));
    s.faults
        .push((at + ms(between(rng, 500, 2500)), restarted, Fault::Recover));
    finish(s)
}

pub(super) fn h2_conn_lost(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let n = between(rng, 3, 5) as usize;
    let mut s = base(rng, n, policy);
    let max_conns = h2_max_conns(rng, 2, 4);
    h2_on(rng, &mut s, (4, 50), max_conns);
    s.streams[0].rate = vec![(Instant::ZERO, between(rng, 30, 80) as u32)];
    for _ in 0..between(rng, 3, 10) {
        let b = rng.below(n as u64) as usize;
        s.faults
            .push((at_ms(between(rng, 3000, 14000)), b, Fault::LoseConn));
    }
    if rng.chance_permille(500) {
        let victim = rng.below(n as u64) as usize;
        let crash = at_ms(between(rng, 4000, 9000));
        s.faults.push((crash, victim, Fault::Crash));
        s.faults
            .push((crash + ms(between(rng, 2000, 5000)), victim, Fault::Recover));
    }
    finish(s)
}

/// The sim backend behind `ip` (`10.0.0.<index + 1>`).
fn dns_backend(ip: std::net::IpAddr) -> Option<usize> {
    match ip {
        std::net::IpAddr::V4(v4) => v4.octets()[3].checked_sub(1).map(usize::from),
        std::net::IpAddr::V6(_) => None,
    }
}

fn dns_ip(index: usize) -> std::net::IpAddr {
    std::net::IpAddr::from([10, 0, 0, u8::try_from(index + 1).unwrap_or(u8::MAX)])
}

/// C-DISC-1: the default pool fed by DNS. `answers` (time, answer) go through weir-core's
/// `discovery::Discovery`, exactly as the proxy's resolver task feeds it; each set it decides to
/// apply becomes a reload of the pool (the proxy's path: warm-up when no healthy backend stays,
/// C-CONF-5). An empty set would be a reload to no backend: the world fails it as a gap.
fn dns_reloads(
    s: &mut Setup,
    initial: &[usize],
    answers: Vec<(Instant, weir_core::discovery::Answer)>,
) {
    use weir_core::config::DnsSpec;
    use weir_core::discovery::{Discovery, address_of, backends_for};
    let spec = DnsSpec {
        name: "pool.sim".to_owned(),
        port: 8080,
        interval: Duration::from_secs(1),
        https: false,
        protocol: weir_core::backend::Protocol::Http1,
    };
    let ips: Vec<std::net::IpAddr> = initial.iter().map(|&i| dns_ip(i)).collect();
    let current = backends_for("default", &spec, &ips);
    let mut machine = Discovery::new("default", &spec, &current, Instant::ZERO);
    for (at, answer) in answers {
        let Some(set) = machine.on_answer(answer, at).apply else {
            continue;
        };
        let backends = set
            .iter()
            .filter_map(|b| address_of("default", &b.id))
            .filter_map(|a| dns_backend(a.ip()))
            .collect();
        s.reloads.push(ReloadSetup {
            at,
            pool: 0,
            backends,
            // Removed addresses are pods that still run for a while: their requests finish.
            decommission_after: None,
        });
    }
    s.checks.reload_no_gap = true;
}

fn dns_failure(rng: &mut WyRand) -> weir_core::discovery::Answer {
    use weir_core::discovery::Answer;
    match rng.below(5) {
        0 => Answer::ServFail,
        1 => Answer::Timeout,
        2 => Answer::NxDomain,
        3 => Answer::Addresses(Vec::new()),
        _ => Answer::Error,
    }
}

/// C-DISC-1: a DNS pool whose answer changes (addresses added and removed), fails (timeout,
/// SERVFAIL) and goes empty (NXDOMAIN, no records) for a while, at a 1–3 s interval.
pub(super) fn dns_changes(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    use weir_core::discovery::Answer;
    let mut s = base(rng, 3, policy);
    let lat = |rng: &mut WyRand| Latency::new(ms(between(rng, 3, 25)), ms(between(rng, 5, 40)));
    for i in 3..7 {
        s.backends.push(SimBackend::new(&format!("b{i}"), lat(rng)));
    }
    let interval = ms(between(rng, 1000, 3000));
    let mut set: Vec<usize> = vec![0, 1, 2];
    let mut answers = Vec::new();
    let mut t = at_ms(between(rng, 2000, 4000));
    for _ in 0..between(rng, 6, 12) {
        let answer = match rng.below(10) {
            0..=4 => {
                // Remove one (never the last), add one not in the set.
                if set.len() > 1 && rng.chance_permille(600) {
                    let gone = rng.below(set.len() as u64) as usize;
                    set.remove(gone);
                }
                let spare: Vec<usize> = (0..7).filter(|i| !set.contains(i)).collect();
                if !spare.is_empty() && (set.len() < 2 || rng.chance_permille(700)) {
                    set.push(spare[rng.below(spare.len() as u64) as usize]);
                }
                let mut v: Vec<_> = set.iter().map(|&i| dns_ip(i)).collect();
                // Any order, sometimes with repeats: the machine takes them as a set.
                if rng.chance_permille(300) {
                    v.reverse();
                    v.push(v[0]);
                }
                Answer::Addresses(v)
            }
            5..=7 => dns_failure(rng),
            _ => Answer::Addresses(set.iter().map(|&i| dns_ip(i)).collect()),
        };
        answers.push((t, answer));
        t = t + interval;
    }
    dns_reloads(&mut s, &[0, 1, 2], answers);
    let mut s = finish(s);
    s.fault_end = s.fault_end.max(t) + Duration::from_secs(2);
    s
}

/// C-DISC-1: a flapping name: every 0.5–1 s the answer swaps between two sets (disjoint in
/// half the seeds, so each swap is warmed up) or fails or goes empty.
pub(super) fn dns_flapping(rng: &mut WyRand, policy: PolicyKind) -> Setup {
    let mut s = base(rng, 2, policy);
    let lat = |rng: &mut WyRand| Latency::new(ms(between(rng, 3, 25)), ms(between(rng, 5, 40)));
    for i in 2..4 {
        s.backends.push(SimBackend::new(&format!("b{i}"), lat(rng)));
    }
    let sets: [Vec<usize>; 2] = if rng.chance_permille(500) {
        [vec![0, 1], vec![2, 3]]
    } else {
        [vec![0, 1], vec![1, 2, 3]]
    };
    let interval = ms(between(rng, 500, 1000));
    let mut answers = Vec::new();
    let mut t = at_ms(between(rng, 2000, 4000));
    for k in 0..between(rng, 12, 24) {
        let answer = if rng.chance_permille(300) {
            dns_failure(rng)
        } else {
            weir_core::discovery::Answer::Addresses(
                sets[(k % 2) as usize].iter().map(|&i| dns_ip(i)).collect(),
            )
        };
        answers.push((t, answer));
        t = t + interval;
    }
    dns_reloads(&mut s, &[0, 1], answers);
    let mut s = finish(s);
    s.fault_end = s.fault_end.max(t) + Duration::from_secs(2);
    s
}
