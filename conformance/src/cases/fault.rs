//! Fault behaviour over the failure matrix (docs/operations.md, "Runbook: the failure matrix"): a
//! backend killed under load, every backend down, and recovery.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::{expect_status, expect_weir_error};
use crate::backend::{Backend, End, Mode, lock};
use crate::client::{Conn, Req, get};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs, wait_until};

#[derive(Debug, Default)]
struct Tally {
    ok: AtomicUsize,
    errors: std::sync::Mutex<Vec<String>>,
}

/// Runs `clients` keep-alive client loops sending `req` until `stop`; counts outcomes.
fn load(
    addr: std::net::SocketAddr,
    clients: usize,
    req: Req,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (req, stop, tally) = (req.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let mut conn: Option<Conn> = None;
                while !stop.load(Ordering::SeqCst) {
                    if conn.as_ref().is_none_or(Conn::is_closed) {
                        match Conn::open(addr, None).await {
                            Ok(c) => conn = Some(c),
                            Err(e) => {
                                lock(&tally.errors).push(format!("connect: {e}"));
                                continue;
                            }
                        }
                    }
                    let Some(c) = conn.as_mut() else { continue };
                    match c.send(&req).await {
                        Ok(r) if r.status == 200 => {
                            tally.ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(r) => lock(&tally.errors).push(r.summary()),
                        Err(e) => {
                            lock(&tally.errors).push(e);
                            conn = None;
                        }
                    }
                }
            })
        })
        .collect()
}

/// What a run of load with a backend killed under it gave.
struct KillRun {
    /// Requests answered `200`.
    ok: usize,
    /// Every other outcome, as seen by the clients.
    errors: Vec<String>,
    /// Requests the victim had received but not answered when it was killed.
    cut: usize,
}

/// Eight clients load three backends; once the load is steady and requests are in flight to
/// the victim, it is killed, and the load goes on until 300 more requests succeeded. Every
/// phase ends on an event (with a generous bound), not after a set time.
async fn run_load_with_kill(bin: &Binary, req: Req) -> KillRun {
    let bs = Backend::start_many("k", 3).await;
    for b in &bs {
        b.set_mode(Mode::SlowHeaders(ms(20)));
    }
    let refs: Vec<&Backend> = bs.iter().collect();
    let cfg = Config::new(&refs)
        .set("health_check.interval", "100ms")
        .set("health_check.failure_threshold", 1);
    let p = Proxy::start(bin, &cfg).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let tasks = load(p.public, CLIENTS, req, stop.clone(), tally.clone());
    let victim = &bs[1];
    let ok = || tally.ok.load(Ordering::SeqCst);
    wait_until(secs(30), "the load to run (50 requests answered)", || {
        ok() >= 50
    })
    .await;
    wait_until(secs(30), "requests in flight to the victim", || {
        victim.in_flight() >= 2
    })
    .await;
    victim.down().await;
    let killed = Instant::now();
    let ok_at_kill = ok();
    wait_until(secs(30), "300 requests answered after the kill", || {
        ok() >= ok_at_kill + 300
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = tokio::time::timeout(secs(10), t).await;
    }
    let after_kill = victim.requests().iter().filter(|r| r.at > killed).count();
    assert_eq!(after_kill, 0, "the killed backend received requests");
    // Counted once the victim is down: which requests it had received is then settled, and
    // the kill is what ended those it had not answered.
    let cut = victim
        .requests()
        .iter()
        .filter(|r| r.end().map(|e| e.0) != Some(End::Completed))
        .count();
    let errors = lock(&tally.errors).clone();
    drop(p);
    KillRun {
        ok: ok(),
        errors,
        cut,
    }
}

/// The load's clients, each with one request at a time.
const CLIENTS: usize = 8;

/// Failure matrix "one backend down" (C-RETRY-1, C-HEALTH-2/3): a backend killed under `GET`
/// load costs the clients no errors; the requests in flight to it are retried elsewhere.
pub async fn fault_backend_killed_under_get_load_costs_no_errors(bin: Binary) {
    let run = run_load_with_kill(&bin, Req::get("/load")).await;
    assert!(
        run.errors.is_empty(),
        "{} errors ({} requests were cut by the kill, all retryable GETs): {:?}",
        run.errors.len(),
        run.cut,
        &run.errors[..run.errors.len().min(10)]
    );
    eprintln!("GET load: {} ok, {} cut by the kill", run.ok, run.cut);
}

/// Failure matrix "one backend down" for non-retryable requests: `POST` errors are bounded by
/// the requests the kill cut at the victim plus, at most, one per client racing the breaker
/// (`failure_threshold: 1`).
pub async fn fault_backend_killed_under_post_load_bounded_errors(bin: Binary) {
    let run = run_load_with_kill(&bin, Req::post("/load", "payload")).await;
    let bound = run.cut + CLIENTS;
    assert!(
        run.errors.len() <= bound,
        "{} errors, more than the {} requests cut by the kill + {CLIENTS} clients: {:?}",
        run.errors.len(),
        run.cut,
        &run.errors[..run.errors.len().min(10)]
    );
    eprintln!(
        "POST load: {} ok, {} errors, {} requests cut by the kill",
        run.ok,
        run.errors.len(),
        run.cut
    );
}

/// Failure matrix "all backends down": `503` and `/readyz` `503`; when they come back traffic
/// resumes (with slow start, which never turns a request away) and `/readyz` is `200`.
pub async fn fault_all_backends_down_then_back(bin: Binary) {
    let bs = Backend::start_many("all", 2).await;
    let refs: Vec<&Backend> = bs.iter().collect();
    let cfg = Config::new(&refs).set("health_check.slow_start", "1s");
    let p = Proxy::start(&bin, &cfg).await;
    expect_status(&get(p.public, "/x").await, 200, "all up");
    expect_status(&get(p.public, "/readyz").await, 200, "ready");
    for b in &bs {
        b.down().await;
    }
    eventually(secs(30), "/readyz 503 with every backend down", || async {
        (get(p.public, "/readyz").await.status == 503).then_some(())
    })
    .await;
    let r = get(p.public, "/x").await;
    expect_weir_error(&r, 503, "every backend down");
    expect_status(
        &get(p.public, "/healthz").await,
        200,
        "/healthz while the process runs",
    );
    for b in &bs {
        b.up().await;
    }
    eventually(secs(30), "/readyz 200 once backends are back", || async {
        (get(p.public, "/readyz").await.status == 200).then_some(())
    })
    .await;
    // From the backends' return on every request is answered (slow start never turns one
    // away): at least 50, and until both have served again.
    let before = super::counts(&refs);
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let start = Instant::now();
    let mut sent = 0;
    while sent < 50 || bs.iter().zip(&before).any(|(b, n)| b.count() <= *n) {
        let r = c.send(&Req::get("/back")).await.expect("request");
        expect_status(&r, 200, "traffic resumes during slow start");
        sent += 1;
        assert!(
            start.elapsed() < secs(30),
            "traffic did not resume on both within 30s: {:?} (before: {before:?})",
            super::counts(&refs)
        );
    }
}
