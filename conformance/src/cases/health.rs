//! C-HEALTH: active checks, thresholds, the passive circuit breaker, slow start, disabled
//! backends, probe concurrency.

use std::time::{Duration, Instant};

use super::{expect_status, expect_weir_error, spawn_send};
use crate::backend::{Backend, Mode, ProbeMeter};
use crate::client::{Conn, Req, get};
use crate::config::{Config, entry};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs, wait_until};

/// C-HEALTH-1: probes `GET` the backend URL's path joined with `health_check.path` (query kept),
/// and one check cycle runs before the listeners open: backends start unhealthy, and a healthy
/// one serves the very first request.
pub async fn c_health_1_probe_path_and_first_cycle_before_ready(bin: Binary) {
    let b = Backend::start("based").await;
    b.set_health_path("/base/hc");
    let sick = Backend::start("sick").await;
    sick.set_health_path("/base/hc");
    sick.set_health(500);
    let cfg = Config::with_entries(vec![
        entry(&b).url(&format!("{}/base", b.url())),
        entry(&sick).url(&format!("{}/base", sick.url())),
    ])
    .set("health_check.path", "/hc?deep=1")
    .set("health_check.interval", "60s");
    let p = Proxy::start(&bin, &cfg).await;
    let probes = b.probes();
    assert!(
        !probes.is_empty(),
        "ready before the first check cycle reached the backend"
    );
    assert_eq!(probes[0].target, "/base/hc?deep=1", "probe target");
    for _ in 0..6 {
        let r = get(p.public, "/x").await;
        expect_status(&r, 200, "first requests after ready");
        assert_eq!(
            r.backend().as_deref(),
            Some("based"),
            "an unchecked or failing backend got traffic"
        );
    }
    assert_eq!(
        b.last().map(|x| x.target.clone()).as_deref(),
        Some("/base/x"),
        "backend base path"
    );
    assert_eq!(sick.count(), 0);
}

/// C-HEALTH-1: a probe succeeds only with a status in `expected_statuses`.
pub async fn c_health_1_expected_statuses(bin: Binary) {
    let a = Backend::start("no-content").await;
    a.set_health(204);
    let b = Backend::start("plain-ok").await;
    let cfg =
        Config::new(&[&a, &b]).set("health_check.expected_statuses", serde_json::json!([204]));
    let p = Proxy::start(&bin, &cfg).await;
    for _ in 0..6 {
        let r = get(p.public, "/x").await;
        expect_status(&r, 200, "request");
        assert_eq!(
            r.backend().as_deref(),
            Some("no-content"),
            "200 is not an expected status here"
        );
    }
}

/// C-HEALTH-1: `tcp` mode checks with a connect only.
pub async fn c_health_1_tcp_mode(bin: Binary) {
    let a = Backend::start("tcp-up").await;
    a.set_health(500);
    let b = Backend::start("tcp-down").await;
    b.down().await;
    let cfg = Config::new(&[&a, &b]).set("health_check.mode", "tcp");
    let p = Proxy::start(&bin, &cfg).await;
    for _ in 0..6 {
        let r = get(p.public, "/x").await;
        expect_status(&r, 200, "request");
        assert_eq!(r.backend().as_deref(), Some("tcp-up"));
    }
    assert_eq!(a.probe_count(), 0, "tcp mode sent HTTP probes");
}

/// C-HEALTH-1: `https` mode needs a TLS server whose certificate validates; a plain HTTP server
/// fails the check.
pub async fn c_health_1_https_probe_needs_valid_tls(bin: Binary) {
    let a = Backend::start("plain").await;
    let cfg = Config::new(&[&a]).set("health_check.mode", "https");
    let p = Proxy::start(&bin, &cfg).await;
    let r = get(p.public, "/x").await;
    expect_weir_error(&r, 503, "https probe of a plain HTTP backend must fail");
    let r = get(p.public, "/readyz").await;
    expect_status(&r, 503, "/readyz with no healthy backend");
}

/// C-HEALTH-1: cycles never overlap; a probe slower than `timeout` fails.
pub async fn c_health_1_cycles_never_overlap_and_probes_time_out(bin: Binary) {
    let a = Backend::start("slowish").await;
    a.set_health_delay(ms(300));
    let b = Backend::start("too-slow").await;
    b.set_health_delay(secs(5));
    let cfg = Config::new(&[&a, &b])
        .set("health_check.interval", "100ms")
        .set("health_check.timeout", "800ms");
    let p = Proxy::start(&bin, &cfg).await;
    a.wait_probes(5, secs(10)).await;
    assert_eq!(
        a.max_probes_in_flight(),
        1,
        "two probes of one backend overlapped"
    );
    let probes = a.probes();
    for w in probes.windows(2) {
        let gap = w[1].at - w[0].at;
        // A cycle ends when its slowest probe does (too-slow's, cut at 800ms); the next starts
        // 100ms later.
        assert!(
            gap >= ms(800),
            "next probe {gap:?} after the previous began: cycles overlap"
        );
    }
    for _ in 0..6 {
        let r = get(p.public, "/x").await;
        expect_status(&r, 200, "request");
        assert_eq!(
            r.backend().as_deref(),
            Some("slowish"),
            "a backend whose probes time out got traffic"
        );
    }
}

/// C-HEALTH-1 / C-HEALTH-6: at most `max_concurrency` probes at once.
pub async fn c_health_1_max_concurrency_bounds_probes(bin: Binary) {
    let meter = ProbeMeter::new();
    let bs = Backend::start_many("mc", 5).await;
    for b in &bs {
        b.set_health_delay(ms(150));
        b.set_probe_meter(meter.clone());
    }
    let refs: Vec<&Backend> = bs.iter().collect();
    let cfg = Config::new(&refs)
        .set("health_check.max_concurrency", 2)
        .set("health_check.interval", "100ms");
    let _p = Proxy::start(&bin, &cfg).await;
    for b in &bs {
        b.wait_probes(2, secs(10)).await;
    }
    assert!(
        meter.max() <= 2,
        "{} probes in flight at once with max_concurrency 2",
        meter.max()
    );
    assert!(meter.max() >= 1);
}

/// C-HEALTH-2: unhealthy after `failure_threshold` consecutive failed probes, healthy after
/// `success_threshold` consecutive successes, not before.
pub async fn c_health_2_thresholds(bin: Binary) {
    let a = Backend::start("th-1").await;
    let b = Backend::start("th-2").await;
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("health_check.failure_threshold", 2)
        .set("health_check.success_threshold", 2)
        .set("health_check.interval", "400ms")
        .set("health_check.timeout", "300ms");
    let p = Proxy::start(&bin, &cfg).await;
    // Backends start unhealthy and the first cycle gives one success of the two needed.
    eventually(
        secs(5),
        "th-1 healthy after two successful probes",
        || async { (get(p.public, "/x").await.backend().as_deref() == Some("th-1")).then_some(()) },
    )
    .await;
    let ok_probes = a.probes().iter().filter(|x| x.status == 200).count();
    assert!(
        ok_probes >= 2,
        "healthy after {ok_probes} successful probe(s) (success_threshold 2)"
    );

    let mark = Instant::now();
    a.set_health(500);
    let failed_since = |t: Instant| {
        a.probes()
            .iter()
            .filter(|x| x.at >= t && x.status == 500)
            .count()
    };
    wait_until(secs(5), "first failed probe", || failed_since(mark) >= 1).await;
    let r = get(p.public, "/x").await;
    assert_eq!(
        r.backend().as_deref(),
        Some("th-1"),
        "unhealthy after one failure (threshold 2)"
    );
    eventually(secs(5), "traffic to leave th-1", || async {
        (get(p.public, "/x").await.backend().as_deref() == Some("th-2")).then_some(())
    })
    .await;
    assert!(
        failed_since(mark) >= 2,
        "unhealthy after {} failed probes (threshold 2)",
        failed_since(mark)
    );

    let mark = Instant::now();
    a.set_health(200);
    let ok_since = |t: Instant| {
        a.probes()
            .iter()
            .filter(|x| x.at >= t && x.status == 200)
            .count()
    };
    wait_until(secs(5), "first successful probe", || ok_since(mark) >= 1).await;
    let r = get(p.public, "/x").await;
    assert_eq!(
        r.backend().as_deref(),
        Some("th-2"),
        "healthy after one success (threshold 2)"
    );
    eventually(secs(5), "traffic to return to th-1", || async {
        (get(p.public, "/x").await.backend().as_deref() == Some("th-1")).then_some(())
    })
    .await;
    assert!(
        ok_since(mark) >= 2,
        "healthy after {} successful probes (threshold 2)",
        ok_since(mark)
    );
}

/// C-HEALTH-3: `failure_threshold` consecutive failed attempts open the circuit for `cooldown`;
/// passing probes do not close it; after the cooldown a successful trial closes it.
pub async fn c_health_3_breaker_opens_and_probes_do_not_close_it(bin: Binary) {
    let a = Backend::start("br-1").await;
    let b = Backend::start("br-2").await;
    a.set_mode(Mode::Status(503));
    let cooldown = ms(1500);
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("server.retry.max_attempts", 1)
        .set("health_check.failure_threshold", 2)
        .set("health_check.cooldown", "1500ms")
        .set("health_check.interval", "100ms");
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..2 {
        let r = get(p.public, "/x").await;
        expect_status(&r, 503, &format!("failure {i}"));
        assert_eq!(r.backend().as_deref(), Some("br-1"));
    }
    let opened = a.last().expect("second failure").at;
    let probes_before = a.probe_count();
    while opened.elapsed() < cooldown - ms(300) {
        let r = get(p.public, "/x").await;
        expect_status(&r, 200, "while br-1's circuit is open");
        assert_eq!(
            r.backend().as_deref(),
            Some("br-2"),
            "open circuit got traffic after {:?}",
            opened.elapsed()
        );
        tokio::time::sleep(ms(20)).await;
    }
    assert!(
        a.probe_count() > probes_before,
        "no probe passed while open: the case proves nothing"
    );
    a.set_mode(Mode::Ok);
    eventually(
        secs(10),
        "br-1 to get a trial after the cooldown",
        || async { (get(p.public, "/x").await.backend().as_deref() == Some("br-1")).then_some(()) },
    )
    .await;
    let trial = a.last().expect("trial").at;
    assert!(
        trial - opened >= cooldown,
        "trial {:?} after opening, cooldown {cooldown:?}",
        trial - opened
    );
    for _ in 0..5 {
        assert_eq!(
            get(p.public, "/x").await.backend().as_deref(),
            Some("br-1"),
            "circuit closed again"
        );
    }
}

/// C-HEALTH-3 (and C-RETRY-1): a success resets the failure count, and `500` is a success.
pub async fn c_health_3_success_resets_failure_count(bin: Binary) {
    let a = Backend::start("rs-1").await;
    let b = Backend::start("rs-2").await;
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("server.retry.max_attempts", 1)
        .set("health_check.failure_threshold", 2)
        .set("health_check.cooldown", "30s")
        .set("health_check.max_cooldown", "30s");
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..10 {
        let (mode, want) = if i % 2 == 0 {
            (Mode::Status(503), 503)
        } else {
            (Mode::Status(500), 500)
        };
        a.set_mode(mode);
        let r = get(p.public, "/x").await;
        expect_status(&r, want, &format!("request {i}"));
        assert_eq!(
            r.backend().as_deref(),
            Some("rs-1"),
            "request {i}: circuit opened without consecutive failures"
        );
    }
    assert_eq!(b.count(), 0);
}

/// Opens `dbl-1`'s circuit with a `503` and fails `failed_trials` half-open trials, then lets
/// the next trial succeed; returns the gaps between the backend's requests (open → trial 1 → ...).
async fn trial_gaps(
    bin: &Binary,
    cooldown: &str,
    max_cooldown: &str,
    failed_trials: usize,
) -> Vec<Duration> {
    let a = Backend::start("dbl-1").await;
    let b = Backend::start("dbl-2").await;
    a.set_mode(Mode::Status(503));
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("server.retry.max_attempts", 1)
        .set("health_check.failure_threshold", 1)
        .set("health_check.cooldown", cooldown)
        .set("health_check.max_cooldown", max_cooldown);
    let p = Proxy::start(bin, &cfg).await;
    let driver = {
        let addr = p.public;
        tokio::spawn(async move {
            let mut c = Conn::open(addr, None).await.expect("connect");
            loop {
                let _ = c.send(&Req::get("/d")).await;
                tokio::time::sleep(ms(10)).await;
            }
        })
    };
    wait_until(secs(15), "the open and the failed trials", || {
        a.count() > failed_trials
    })
    .await;
    a.set_mode(Mode::Ok);
    wait_until(secs(15), "a successful trial", || {
        a.count() > failed_trials + 1
    })
    .await;
    driver.abort();
    let t: Vec<Instant> = a.requests().iter().map(|r| r.at).collect();
    t.windows(2).map(|w| w[1] - w[0]).collect()
}

/// C-HEALTH-3: a failed half-open trial re-opens the circuit with a doubled cooldown.
pub async fn c_health_3_reopen_doubles_cooldown(bin: Binary) {
    let gaps = trial_gaps(&bin, "400ms", "10s", 2).await;
    assert!(
        gaps[0] >= ms(400),
        "first trial {:?} after opening (cooldown 400ms)",
        gaps[0]
    );
    assert!(
        gaps[1] >= ms(800),
        "second trial {:?} after re-opening (doubled: 800ms)",
        gaps[1]
    );
    assert!(
        gaps[2] >= ms(1600),
        "third trial {:?} after re-opening (doubled: 1600ms)",
        gaps[2]
    );
    assert!(
        gaps[1] < ms(1600),
        "second cooldown {:?}: more than doubled",
        gaps[1]
    );
}

/// C-HEALTH-3: the doubling stops at `max_cooldown`.
pub async fn c_health_3_cooldown_capped_at_max_cooldown(bin: Binary) {
    let gaps = trial_gaps(&bin, "200ms", "400ms", 2).await;
    assert!(
        gaps[0] >= ms(200),
        "first trial {:?} after opening (cooldown 200ms)",
        gaps[0]
    );
    assert!(
        gaps[1] >= ms(400),
        "second trial {:?} (doubled: 400ms)",
        gaps[1]
    );
    assert!(
        gaps[2] >= ms(400),
        "third trial {:?} (capped: 400ms)",
        gaps[2]
    );
    assert!(
        gaps[2] < ms(750),
        "third trial {:?} after re-opening: not capped at max_cooldown 400ms",
        gaps[2]
    );
}

/// C-HEALTH-3: half-open admits at most `half_open_requests` (1) trial at a time.
pub async fn c_health_3_half_open_admits_one_trial(bin: Binary) {
    let a = Backend::start("ho-1").await;
    let b = Backend::start("ho-2").await;
    a.set_mode(Mode::Status(503));
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("server.retry.max_attempts", 1)
        .set("health_check.failure_threshold", 1)
        .set("health_check.cooldown", "300ms");
    let p = Proxy::start(&bin, &cfg).await;
    expect_status(&get(p.public, "/open").await, 503, "opening failure");
    let opened = Instant::now();
    a.set_mode(Mode::Hold);
    tokio::time::sleep_until((opened + ms(400)).into()).await;
    let bg: Vec<_> = (0..6)
        .map(|i| spawn_send(p.public, Req::get(&format!("/c{i}"))))
        .collect();
    wait_until(secs(5), "the trial to reach ho-1", || a.in_flight() == 1).await;
    wait_until(secs(5), "the other requests to go to ho-2", || {
        b.count() >= 5
    })
    .await;
    assert_eq!(
        a.max_in_flight(),
        1,
        "more than one half-open trial at a time"
    );
    a.set_mode(Mode::Ok);
    a.release_all();
    for h in bg {
        expect_status(
            &super::join(h, "concurrent").await,
            200,
            "concurrent request",
        );
    }
}

/// C-HEALTH-4: a backend that comes back gets a share growing from the minimum to 100% over
/// `slow_start`.
pub async fn c_health_4_slow_start_ramps_share(bin: Binary) {
    let ramp = ms(3000);
    let a = Backend::start("ss-1").await;
    let b = Backend::start("ss-2").await;
    a.set_health(500);
    let cfg = Config::new(&[&a, &b])
        .set("health_check.slow_start", "3s")
        .set("health_check.slow_start_minimum_percent", 10)
        .set("health_check.interval", "100ms");
    let p = Proxy::start(&bin, &cfg).await;
    // ss-2, available at start, is not ramped (c_health_4_no_ramp_at_start); ss-1 failed the
    // first cycle, so its recovery below starts a ramp.
    let mut c = Conn::open(p.public, None).await.expect("connect");
    a.set_health(200);
    // Send until ss-1 serves again: its ramp has begun by then.
    let waiting = Instant::now();
    loop {
        let r = c.send(&Req::get("/s")).await.expect("request");
        expect_status(&r, 200, "while ss-1 comes back");
        if r.backend().as_deref() == Some("ss-1") {
            break;
        }
        assert!(
            waiting.elapsed() < secs(5),
            "ss-1 got no traffic within 5s of passing its checks"
        );
    }
    let came_back = a.requests()[0].at;
    // Early: the first quarter of the ramp, where ss-1's share is at most 10% + 90% / 4 = 32.5%
    // of its round-robin half.
    let (mut early, mut early_n) = (0usize, 0usize);
    while came_back.elapsed() < ramp / 4 && early_n < 300 {
        let r = c.send(&Req::get("/s")).await.expect("request");
        expect_status(&r, 200, "during slow start");
        early_n += 1;
        early += usize::from(r.backend().as_deref() == Some("ss-1"));
    }
    tokio::time::sleep_until((came_back + ramp + ms(200)).into()).await;
    let mut late = 0;
    for _ in 0..200 {
        let r = c.send(&Req::get("/s")).await.expect("request");
        expect_status(&r, 200, "after slow start");
        late += usize::from(r.backend().as_deref() == Some("ss-1"));
    }
    eprintln!("slow start: early {early}/{early_n}, late {late}/200");
    assert!(
        early_n >= 30,
        "only {early_n} requests in the first {:?} of the ramp: too slow to measure",
        ramp / 4
    );
    assert!(
        early * 100 < early_n * 30,
        "ss-1 got {early}/{early_n} in the first quarter of a ramp from 10% (round robin alone: half)"
    );
    assert!(
        late > 70,
        "ss-1 got {late}/200 after the ramp (round robin: ~100)"
    );
}

/// C-HEALTH-4 (refined, docs/health.md): backends available when the proxy starts are not
/// ramped: round robin alternates strictly from the first request, with a 30 s slow start
/// configured. (Ramping both from 10% would break the alternation on about 9% of the requests:
/// 40 in a row would alternate with a probability of about 2%.)
pub async fn c_health_4_no_ramp_at_start(bin: Binary) {
    let a = Backend::start("st-1").await;
    let b = Backend::start("st-2").await;
    let cfg = Config::new(&[&a, &b])
        .set("health_check.slow_start", "30s")
        .set("health_check.slow_start_minimum_percent", 10);
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let mut seen = Vec::new();
    for _ in 0..40 {
        let r = c.send(&Req::get("/st")).await.expect("request");
        expect_status(&r, 200, "right after start");
        seen.push(r.backend().unwrap_or_default());
    }
    let alternating = seen.windows(2).all(|w| w[0] != w[1]);
    assert!(
        alternating,
        "round robin right after start did not alternate (backends ramped?): {seen:?}"
    );
}

/// C-HEALTH-5: disabled backends are still health-checked and get no traffic.
pub async fn c_health_5_disabled_backends_are_probed(bin: Binary) {
    let a = Backend::start("en").await;
    let d = Backend::start("dis").await;
    let p = Proxy::start(
        &bin,
        &Config::with_entries(vec![entry(&a), entry(&d).disabled()]),
    )
    .await;
    d.wait_probes(3, secs(5)).await;
    for _ in 0..6 {
        assert_eq!(get(p.public, "/x").await.backend().as_deref(), Some("en"));
    }
    assert_eq!(d.count(), 0);
}

/// C-HEALTH-6: a probe that hangs delays no other backend's probe beyond its own timeout, even
/// with one probe worker, and does not hold back readiness.
pub async fn c_health_6_hanging_probe_delays_no_one(bin: Binary) {
    let hang = Backend::start("hang").await;
    hang.set_health_delay(secs(30));
    let fine = Backend::start("fine").await;
    let cfg = Config::new(&[&hang, &fine])
        .set("health_check.timeout", "300ms")
        .set("health_check.interval", "100ms")
        .set("health_check.max_concurrency", 1);
    let start = Instant::now();
    let p = Proxy::start(&bin, &cfg).await;
    assert!(
        start.elapsed() < secs(3),
        "ready took {:?} with a 300ms probe timeout",
        start.elapsed()
    );
    expect_status(
        &get(p.public, "/x").await,
        200,
        "the other backend is healthy",
    );
    fine.wait_probes(5, secs(10)).await;
    let probes = fine.probes();
    for w in probes.windows(2) {
        let gap = w[1].at - w[0].at;
        assert!(
            gap <= ms(900),
            "fine's probes {gap:?} apart (interval 100ms + hang's timeout 300ms)"
        );
    }
}
