//! The health driver (C-HEALTH-1, C-HEALTH-2, C-HEALTH-5, C-HEALTH-6): scripted probes in paused
//! tokio time (exact instants), then real backends on 127.0.0.1 in real time.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_core::Instant;
use weir_core::health::{HealthParams, HealthSpec};

#[path = "support/probe_backend.rs"]
#[allow(dead_code)]
mod probe_backend;

use probe_backend::{Flips, HANG, http_server};
use weir_tokio::base::clock::Clock;
use weir_tokio::services::probe::{
    DriverStopped, HealthDriver, ProbeFn, ProbeMode, ProbeTarget, client_tls,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn at_ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn params(f: impl FnOnce(&mut HealthSpec)) -> HealthParams {
    let mut spec = HealthSpec {
        interval: Duration::from_secs(1),
        jitter: Duration::ZERO,
        timeout: Duration::from_secs(2),
        ..HealthSpec::default()
    };
    f(&mut spec);
    HealthParams::new(&spec).unwrap()
}

fn targets(keys: &[&str]) -> Vec<ProbeTarget> {
    keys.iter()
        .map(|k| ProbeTarget::new(k, &format!("http://{k}.test"), ProbeMode::Http, "/").unwrap())
        .collect()
}

/// What a scripted backend does when probed.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Succeeds after this long.
    Up(Duration),
    /// Fails after this long.
    Down(Duration),
    /// Never answers.
    Hang,
}

/// Scripted backends: per key a queue of steps, then a default step.
#[derive(Default)]
struct Script {
    defaults: Mutex<HashMap<String, Step>>,
    queues: Mutex<HashMap<String, VecDeque<Step>>>,
    /// (key, start) of every probe, in start order.
    starts: Mutex<Vec<(String, tokio::time::Instant)>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Probe futures dropped before they finished (aborted).
    aborted: AtomicUsize,
}

impl Script {
    fn set(&self, key: &str, step: Step) {
        self.defaults.lock().unwrap().insert(key.to_owned(), step);
    }

    fn queue(&self, key: &str, steps: &[Step]) {
        self.queues
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .extend(steps.iter().copied());
    }

    fn starts_of(&self, key: &str) -> Vec<tokio::time::Instant> {
        self.starts
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| *t)
            .collect()
    }

    fn next_step(&self, key: &str) -> Step {
        if let Some(step) = self
            .queues
            .lock()
            .unwrap()
            .get_mut(key)
            .and_then(VecDeque::pop_front)
        {
            return step;
        }
        self.defaults
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or(Step::Up(Duration::ZERO))
    }

    fn probe_fn(self: &Arc<Self>) -> ProbeFn {
        let script = Arc::clone(self);
        Arc::new(move |target, _params, deadline| {
            let script = Arc::clone(&script);
            Box::pin(async move {
                let key = target.key().to_owned();
                let step = script.next_step(&key);
                script
                    .starts
                    .lock()
                    .unwrap()
                    .push((key, tokio::time::Instant::now()));
                let n = script.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                script.max_in_flight.fetch_max(n, Ordering::SeqCst);
                let guard = InFlight {
                    script: Arc::clone(&script),
                    done: false,
                };
                let ok = match step {
                    Step::Up(d) | Step::Down(d) => {
                        let ok = matches!(step, Step::Up(_));
                        tokio::time::timeout_at(
                            tokio::time::Instant::from_std(deadline),
                            tokio::time::sleep(d),
                        )
                        .await
                        .is_ok()
                            && ok
                    }
                    Step::Hang => {
                        tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
                        false
                    }
                };
                let mut guard = guard;
                guard.done = true;
                ok
            })
        })
    }
}

struct InFlight {
    script: Arc<Script>,
    done: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.script.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.done {
            self.script.aborted.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn spawn(
    keys: &[&str],
    params: HealthParams,
    script: &Arc<Script>,
    flips: &Flips,
) -> (HealthDriver, tokio::time::Instant) {
    let clock = Clock::new(weir_tokio::rt());
    let origin = tokio::time::Instant::now();
    let driver = HealthDriver::spawn_with(
        targets(keys),
        params,
        script.probe_fn(),
        clock,
        42,
        Box::new(flips.recorder()),
    );
    (driver, origin)
}

#[tokio::test(start_paused = true)]
async fn c_health_1_first_cycle_resolves_after_every_backend_answered_and_its_flips() {
    let script = Arc::new(Script::default());
    script.set("a", Step::Up(ms(10)));
    script.set("b", Step::Down(ms(20)));
    script.set("c", Step::Hang);
    let mut flips = Flips::new();
    let (driver, origin) = spawn(&["a", "b", "c"], params(|_| {}), &script, &flips);
    driver.first_cycle().await.unwrap();
    // c hangs until its 2 s timeout: the cycle ends then, not before.
    assert_eq!(origin.elapsed(), Duration::from_secs(2));
    assert_eq!(driver.cycles().get(), 1);
    // Backends start unhealthy: only a flipped, and its flip was applied before the cycle ended.
    assert_eq!(flips.drain(), vec![(0, true, at_ms(10))]);
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_1_no_backends_completes_the_first_cycle_at_once() {
    let script = Arc::new(Script::default());
    let flips = Flips::new();
    let (driver, origin) = spawn(&[], params(|_| {}), &script, &flips);
    driver.first_cycle().await.unwrap();
    assert_eq!(origin.elapsed(), Duration::ZERO);
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_2_thresholds_flip_after_consecutive_results() {
    let script = Arc::new(Script::default());
    let up = Step::Up(Duration::ZERO);
    let down = Step::Down(Duration::ZERO);
    // Cycle k starts at k seconds (interval 1 s after an instant end, no jitter).
    script.queue(
        "a",
        &[down, up, up, down, down, up, down, down, down, up, up],
    );
    let mut flips = Flips::new();
    let p = params(|s| {
        s.failure_threshold = 3;
        s.success_threshold = 2;
    });
    let (driver, _) = spawn(&["a"], p, &script, &flips);
    let mut cycles = driver.cycles();
    cycles.wait_for(|&n| n >= 11).await.unwrap();
    let secs = |n| Instant::from_secs(n);
    assert_eq!(
        flips.drain(),
        vec![
            // Two successes in a row (cycles 1 and 2).
            (0, true, secs(2)),
            // Three failures in a row (cycles 6, 7, 8); the pair at 3-4 was not enough.
            (0, false, secs(8)),
            (0, true, secs(10)),
        ]
    );
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_2_timeouts_count_as_failures() {
    let script = Arc::new(Script::default());
    script.queue("a", &[Step::Up(Duration::ZERO)]);
    script.set("a", Step::Hang);
    let mut flips = Flips::new();
    let p = params(|s| s.timeout = ms(500));
    let (driver, _) = spawn(&["a"], p, &script, &flips);
    let mut cycles = driver.cycles();
    cycles.wait_for(|&n| n >= 3).await.unwrap();
    // Up at 0; hangs at 1.0 (fails 1.5) and 2.5 (fails 3.0): the second failure flips it.
    assert_eq!(
        flips.drain(),
        vec![(0, true, at_ms(0)), (0, false, at_ms(3000))]
    );
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_6_slow_probe_delays_another_by_at_most_its_timeout() {
    // One worker: the fast backend waits for the slow one's timeout, and no longer.
    let script = Arc::new(Script::default());
    script.set("slow", Step::Hang);
    script.set("fast", Step::Up(ms(3)));
    let mut flips = Flips::new();
    let p = params(|s| {
        s.max_concurrency = 1;
        s.timeout = ms(700);
    });
    let (driver, _) = spawn(&["slow", "fast"], p, &script, &flips);
    driver.first_cycle().await.unwrap();
    assert_eq!(flips.drain(), vec![(1, true, at_ms(703))]);
    driver.shutdown().await;

    // Two workers: the fast one is not delayed at all.
    let script = Arc::new(Script::default());
    script.set("slow", Step::Hang);
    script.set("fast", Step::Up(ms(3)));
    let p = params(|s| {
        s.max_concurrency = 2;
        s.timeout = ms(700);
    });
    let (driver, _) = spawn(&["slow", "fast"], p, &script, &flips);
    driver.first_cycle().await.unwrap();
    assert_eq!(flips.drain(), vec![(1, true, at_ms(3))]);
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_1_never_more_than_max_concurrency_probes_in_flight() {
    let script = Arc::new(Script::default());
    let keys: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    for (i, k) in keys.iter().enumerate() {
        script.set(k, Step::Up(ms(10 + 7 * i as u64)));
    }
    let flips = Flips::new();
    let (driver, _) = spawn(
        &key_refs,
        params(|s| s.max_concurrency = 3),
        &script,
        &flips,
    );
    driver.cycles().wait_for(|&n| n >= 3).await.unwrap();
    assert_eq!(script.max_in_flight.load(Ordering::SeqCst), 3);
    // C-HEALTH-5: every backend it was given (the data plane passes disabled ones too) is
    // probed once per cycle.
    for k in &keys {
        assert_eq!(script.starts_of(k).len(), 3, "{k}");
    }
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_1_cycles_are_an_interval_apart_without_jitter() {
    let script = Arc::new(Script::default());
    script.set("a", Step::Up(ms(40)));
    let flips = Flips::new();
    let (driver, origin) = spawn(&["a"], params(|s| s.interval = ms(250)), &script, &flips);
    driver.cycles().wait_for(|&n| n >= 5).await.unwrap();
    let starts: Vec<Duration> = script.starts_of("a").iter().map(|t| *t - origin).collect();
    // Measured from the end of the previous cycle: 40 ms probe + 250 ms interval.
    assert_eq!(starts[..5], [ms(0), ms(290), ms(580), ms(870), ms(1160)]);
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn c_health_1_jitter_spreads_cycles_within_its_bound() {
    let script = Arc::new(Script::default());
    let flips = Flips::new();
    let p = params(|s| {
        s.interval = ms(100);
        s.jitter = ms(50);
    });
    let (driver, _) = spawn(&["a"], p, &script, &flips);
    driver.cycles().wait_for(|&n| n >= 41).await.unwrap();
    let starts = script.starts_of("a");
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 40);
    for g in &gaps {
        assert!(*g >= ms(100) && *g <= ms(150), "{g:?}");
    }
    let mut distinct = gaps.clone();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() >= 10, "jitter varies: {distinct:?}");
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reload_keeps_the_state_of_kept_backends_and_starts_new_ones_unhealthy() {
    let script = Arc::new(Script::default());
    let up = Step::Up(Duration::ZERO);
    let down = Step::Down(Duration::ZERO);
    script.queue("a", &[up, down]);
    script.set("a", down);
    script.set("b", up);
    script.set("c", up);
    let mut flips = Flips::new();
    let (driver, _) = spawn(&["a", "b"], params(|_| {}), &script, &flips);
    // Cycle 1 (t=0): a and b healthy. Cycle 2 (t=1s): a fails once (1 of 2).
    driver.cycles().wait_for(|&n| n >= 2).await.unwrap();
    let mut first = flips.drain();
    first.sort_by_key(|f| f.0);
    assert_eq!(first, vec![(0, true, at_ms(0)), (1, true, at_ms(0))]);
    tokio::time::sleep(ms(100)).await;

    // Reload: b removed, c added in front, a kept; a new callback.
    let mut flips2 = Flips::new();
    driver
        .reload(targets(&["c", "a"]), params(|_| {}), flips2.recorder())
        .unwrap();
    // The driver first reports the current state under the new indices: c new and unhealthy,
    // a still healthy.
    assert_eq!(flips2.next().await, (0, false, at_ms(1100)));
    assert_eq!(flips2.next().await, (1, true, at_ms(1100)));
    // Next cycle (t=2s): c succeeds; a fails a second time: its counter was kept, so it flips.
    driver.cycles().wait_for(|&n| n >= 3).await.unwrap();
    let mut after = flips2.drain();
    after.sort_by_key(|f| f.0);
    assert_eq!(after, vec![(0, true, at_ms(2000)), (1, false, at_ms(2000))]);
    assert!(
        flips.drain().is_empty(),
        "the old callback is no longer used"
    );
    assert_eq!(script.starts_of("b").len(), 2, "b is no longer probed");

    // A backend whose URL changes starts over, even under the same key.
    let moved = vec![ProbeTarget::new("c", "http://elsewhere.test", ProbeMode::Http, "/").unwrap()];
    let mut flips3 = Flips::new();
    driver
        .reload(moved, params(|_| {}), flips3.recorder())
        .unwrap();
    assert!(!flips3.next().await.1, "moved backend starts unhealthy");
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reload_applies_new_settings_from_the_next_cycle() {
    let script = Arc::new(Script::default());
    let flips = Flips::new();
    let (driver, origin) = spawn(&["a"], params(|_| {}), &script, &flips);
    driver.cycles().wait_for(|&n| n >= 1).await.unwrap();
    // Between cycles (next due at 1 s): the new 300 ms interval applies from this cycle's end.
    driver
        .reload(
            targets(&["a"]),
            params(|s| s.interval = ms(300)),
            |_, _, _| {},
        )
        .unwrap();
    driver.cycles().wait_for(|&n| n >= 4).await.unwrap();
    let starts: Vec<Duration> = script.starts_of("a").iter().map(|t| *t - origin).collect();
    assert_eq!(starts[..4], [ms(0), ms(1000), ms(1300), ms(1600)]);
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_aborts_probes_in_flight_and_stops_the_callbacks() {
    let script = Arc::new(Script::default());
    script.set("a", Step::Hang);
    let mut flips = Flips::new();
    let (driver, origin) = spawn(&["a"], params(|s| s.timeout = ms(5000)), &script, &flips);
    tokio::time::sleep(ms(10)).await;
    assert_eq!(script.in_flight.load(Ordering::SeqCst), 1);
    let cycles = driver.cycles();
    driver.shutdown().await;
    assert_eq!(
        origin.elapsed(),
        ms(10),
        "shutdown does not wait for the probe"
    );
    assert_eq!(script.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(script.aborted.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(flips.drain().is_empty());
    assert!(cycles.is_closed(), "the driver is gone");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_stops_the_driver() {
    let script = Arc::new(Script::default());
    script.set("a", Step::Hang);
    let flips = Flips::new();
    let (driver, _) = spawn(&["a"], params(|_| {}), &script, &flips);
    tokio::time::sleep(ms(10)).await;
    let cycles = driver.cycles();
    drop(driver);
    tokio::time::sleep(ms(10)).await;
    assert_eq!(script.in_flight.load(Ordering::SeqCst), 0);
    assert!(cycles.is_closed(), "the driver is gone");
}

#[tokio::test(start_paused = true)]
async fn first_cycle_errs_when_the_driver_stopped_before() {
    let script = Arc::new(Script::default());
    script.set("a", Step::Hang);
    // A panicking callback kills the task; first_cycle must not wait forever.
    let bad = HealthDriver::spawn_with(
        targets(&["a"]),
        params(|_| {}),
        script.probe_fn(),
        Clock::new(weir_tokio::rt()),
        1,
        Box::new(|_, _, _| panic!("callback bug")),
    );
    bad.reload(targets(&["a"]), params(|_| {}), |_, _, _| {
        panic!("callback bug")
    })
    .unwrap();
    assert_eq!(bad.first_cycle().await, Err(DriverStopped));
    assert_eq!(
        bad.reload(targets(&["a"]), params(|_| {}), |_, _, _| {}),
        Err(DriverStopped)
    );
}

// ---- Real backends on 127.0.0.1, real time (short intervals). ----

fn real_target(key: &str, url: &str) -> ProbeTarget {
    ProbeTarget::new(key, url, ProbeMode::Http, "/health").unwrap()
}

#[tokio::test]
async fn c_health_2_driver_over_real_backends_flips_both_ways() {
    let up = http_server(200).await;
    let down = http_server(503).await;
    let mut flips = Flips::new();
    let p = params(|s| {
        s.interval = ms(30);
        s.timeout = ms(1000);
        s.failure_threshold = 2;
    });
    let driver = HealthDriver::spawn(
        vec![
            real_target("up", &up.url("http")),
            real_target("down", &down.url("http")),
        ],
        p,
        client_tls::native_client_config().unwrap(),
        Clock::new(weir_tokio::rt()),
        flips.recorder(),
    );
    tokio::time::timeout(Duration::from_secs(5), driver.first_cycle())
        .await
        .unwrap()
        .unwrap();
    let first: Vec<_> = flips.drain().into_iter().map(|(i, h, _)| (i, h)).collect();
    assert_eq!(first, vec![(0, true)]);
    down.set_status(204);
    let f = tokio::time::timeout(Duration::from_secs(5), flips.next())
        .await
        .unwrap();
    assert_eq!((f.0, f.1), (1, true));
    let before = driver.cycles().get();
    up.set_status(500);
    let f = tokio::time::timeout(Duration::from_secs(5), flips.next())
        .await
        .unwrap();
    assert_eq!((f.0, f.1), (0, false));
    assert!(
        driver.cycles().get() > before,
        "two failures take at least one more cycle"
    );
    assert!(up.requests().len() >= 3);
    driver.shutdown().await;
}

/// The fast backend's result comes while the hung probe still holds the cycle (none has ended
/// yet), that is before the hung probe's deadline: the order, not how soon. The deadline is a
/// generous 5 s so that a fast local probe is done well before it even on a loaded machine.
#[tokio::test]
async fn c_health_6_real_hung_backend_does_not_delay_the_fast_one() {
    let hung = http_server(HANG).await;
    let fast = http_server(200).await;
    let mut flips = Flips::new();
    let timeout = ms(5000);
    let p = params(|s| s.timeout = timeout);
    let started = tokio::time::Instant::now();
    let driver = HealthDriver::spawn(
        vec![
            real_target("hung", &hung.url("http")),
            real_target("fast", &fast.url("http")),
        ],
        p,
        client_tls::native_client_config().unwrap(),
        Clock::new(weir_tokio::rt()),
        flips.recorder(),
    );
    let f = tokio::time::timeout(Duration::from_secs(30), flips.next())
        .await
        .unwrap();
    assert_eq!((f.0, f.1), (1, true));
    assert_eq!(
        driver.cycles().get(),
        0,
        "the fast result came only after the hung probe's deadline ended the cycle ({:?})",
        started.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(30), driver.first_cycle())
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= timeout);
    // The hung probe's socket was closed at its deadline.
    assert!(hung.wait_closed(1).await);
    driver.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn clock_maps_both_ways_and_follows_paused_time() {
    let rt = weir_tokio::rt();
    let clock = Clock::new(rt);
    assert_eq!(clock.now(), Instant::ZERO);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(clock.now(), Instant::from_millis(1500));
    let t = Instant::from_secs(7);
    assert_eq!(clock.at(clock.deadline(t)), t);
    // Before the origin clamps to zero; beyond the representable goes to the far future.
    let later = tokio::time::Instant::now().into_std() + Duration::from_secs(1);
    let earlier = Clock::with_origin(rt, later);
    assert_eq!(earlier.now(), Instant::ZERO);
    let far = clock.deadline(Instant::MAX);
    assert!(far > tokio::time::Instant::now().into_std() + Duration::from_secs(86_400 * 365));
}
