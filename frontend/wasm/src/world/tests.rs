use super::*;

fn at(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

fn backend<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["backends"]
        .as_array()
        .and_then(|a| a.iter().find(|b| b["id"] == id))
        .expect("backend in the status")
}

fn status(w: &World) -> serde_json::Value {
    serde_json::from_str(&w.status()).expect("json")
}

#[test]
fn the_first_three_backends_serve_after_the_first_probe_cycle() {
    let mut w = World::new(1).expect("valid");
    w.advance(at(2000));
    let doc = status(&w);
    assert_eq!(backend(&doc, "backend-1")["healthy"], true);
    assert_eq!(backend(&doc, "backend-4")["enabled"], false);
    let id = w.start_request(false);
    w.advance(at(3000));
    let done = w.take_finished();
    let r = done.iter().find(|f| f.id == id).expect("finished");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.backend
            .as_deref()
            .is_some_and(|b| ["backend-1", "backend-2", "backend-3"].contains(&b))
    );
}

#[test]
fn a_backend_answering_503_gets_its_circuit_opened_and_requests_retry_elsewhere() {
    let mut w = World::new(2).expect("valid");
    w.advance(at(2000));
    w.set_backend(0, "503", 5.0);
    let mut t = 2000;
    for _ in 0..60 {
        w.start_request(false);
        t += 50;
        w.advance(at(t));
    }
    let doc = status(&w);
    assert_eq!(backend(&doc, "backend-1")["circuit_state"], "open", "{doc}");
    let done = w.take_finished();
    assert!(
        done.iter()
            .any(|f| f.attempts.len() >= 2 && f.status == 200),
        "a retry moved on"
    );
}

#[test]
fn management_calls_go_through_core_and_change_the_instance() {
    let mut w = World::new(3).expect("valid");
    w.advance(at(1500));
    let (s, body) = w.management("POST", "/api/dashboard/backends", "{\"count\": 5}");
    assert_eq!(s, 200, "{body}");
    assert_eq!(backend(&status(&w), "backend-5")["enabled"], true);
    let (s, _) = w.management("POST", "/api/dashboard/backends/backend-2/drain", "{}");
    assert_eq!(s, 202);
    assert_eq!(backend(&status(&w), "backend-2")["draining"], true);
    let (s, body) = w.management(
        "PATCH",
        "/api/dashboard/config",
        "{\"retry\": {\"max_attempts\": 0}}",
    );
    assert_eq!(s, 400, "{body}");
    let (s, _) = w.management(
        "PATCH",
        "/api/dashboard/config",
        "{\"rate_limit\": {\"capacity\": 12}}",
    );
    assert_eq!(s, 200);
    assert_eq!(status(&w)["rate_limit"]["capacity"], 12);
    let (s, _) = w.management("POST", "/api/dashboard/limit", "{\"capacity\": 0}");
    assert_eq!(s, 200);
    assert_eq!(status(&w)["bucket"]["tokens"], 0);
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let run = |seed| {
        let mut w = World::new(seed).expect("valid");
        w.set_steady(40.0);
        w.set_backend(1, "reset", 10.0);
        w.advance(at(5000));
        w.take_finished()
            .into_iter()
            .map(|f| (f.status, f.backend, f.attempts.len()))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(9), run(9));
}

#[test]
fn slow_backends_fill_the_gate_queue_shed_and_drain_the_retry_budget() {
    let mut w = World::new(4).expect("valid");
    w.advance(at(2000));
    for i in 0..3 {
        w.set_backend(i, "slow", 20.0);
    }
    w.set_steady(50.0);
    let (mut queued, mut budget_empty) = (false, false);
    for step in 1..=80 {
        w.advance(at(2000 + step * 100));
        let doc = status(&w);
        queued |= doc["protection"]["overload"]["queued"].as_u64() > Some(0);
        budget_empty |= doc["retry"]["budget"]["tokens"] == 0;
    }
    let done = w.take_finished();
    assert!(queued, "the gate queued requests (C-LOAD-1)");
    assert!(budget_empty, "the retry budget ran dry (C-RETRY-7)");
    assert!(
        done.iter().any(|f| f.status == 503),
        "the gate shed or the backends timed out"
    );
    assert!(
        done.iter().any(|f| f.status == 429),
        "the bucket ran empty (C-RATE-1)"
    );
}

#[test]
fn a_backend_that_comes_back_ramps_up_through_slow_start() {
    let mut w = World::new(5).expect("valid");
    w.advance(at(20_000));
    assert_eq!(backend(&status(&w), "backend-1")["slow_start_percent"], 100);
    w.set_backend(0, "down", 20.0);
    w.advance(at(25_000));
    assert_eq!(backend(&status(&w), "backend-1")["healthy"], false);
    w.set_backend(0, "up", 20.0);
    w.advance(at(27_000));
    let ramp = backend(&status(&w), "backend-1")["slow_start_percent"].as_u64();
    assert!(
        ramp.is_some_and(|p| p < 100),
        "ramping: {ramp:?} (C-HEALTH-4)"
    );
}

/// The request log's attempt detail says what the backend answered when it is an error status:
/// a `500` passed on (a success for retries and the breaker, C-RETRY-1) reads `answered 500`,
/// a retried `503` `answered 503`; a `200` reads `success`.
#[test]
fn an_attempt_answered_with_an_error_status_is_not_a_success_in_the_log() {
    let mut w = World::new(4).expect("valid");
    w.advance(at(2000));
    let mut t = 2000;
    let mut done = Vec::new();
    // About one answer in a hundred is a `500` (weir-sim's `Mode::Up`).
    while !done.iter().any(|f: &Finished| f.status == 500) && t < 200_000 {
        w.start_request(false);
        t += 20;
        w.advance(at(t));
        done.extend(w.take_finished());
    }
    let five = done
        .iter()
        .find(|f| f.status == 500)
        .expect("a 500 passed on");
    let last = five.attempts.last().expect("an attempt");
    assert_eq!(last.1, "answered 500", "{five:?}");
    let ok = done.iter().find(|f| f.status == 200).expect("a 200");
    assert_eq!(ok.attempts.last().map(|a| a.1.as_ref()), Some("success"));

    // The bucket (30, 10/s) refills before the next request.
    t += 5000;
    w.advance(at(t));
    let _ = w.take_finished();
    w.set_backend(0, "503", 5.0);
    w.set_backend(1, "503", 5.0);
    w.set_backend(2, "503", 5.0);
    w.start_request(false);
    t += 2000;
    w.advance(at(t));
    let retried = w.take_finished();
    let r = retried.first().expect("finished");
    assert!(r.attempts.iter().any(|a| a.1 == "answered 503"), "{r:?}");
}
