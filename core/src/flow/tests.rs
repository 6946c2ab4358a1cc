//! Tests of the flow machine: one unit test per rule, then the state-machine property test over
//! arbitrary pools, budgets and event sequences. The strategies ([`scenario`], [`events`]) and
//! [`Built`] are `pub(crate)` so other tests (and a later fuzz target's corpus generator) reuse them.

use core::time::Duration;

use proptest::prelude::*;

mod status;

use super::*;
use crate::bucket::BucketParams;
use crate::pool::{BackendSpec, PoolParams};
use crate::response::{SyntheticResponse, delivered_headers, header};
use crate::retry::RetryParams;
use crate::rng::WyRand;
use crate::select::PolicyKind;
use crate::slow_start::SlowStart;

const T0: Instant = Instant::from_secs(100);

/// A budget that refills so slowly (one token per 10 000 s) that a test's span never adds one.
fn budget(capacity: u64, drained: u64) -> Arc<RetryBudget> {
    let b = RetryBudget::new(BucketParams::new(capacity, 0.0001).expect("valid budget"));
    for _ in 0..drained {
        assert!(b.try_withdraw(Instant::ZERO));
    }
    Arc::new(b)
}

/// A policy with `max_attempts` and no backoff (C-RETRY-10 has tests of its own).
fn policy(max_attempts: u32) -> Arc<RetryPolicy> {
    Arc::new(
        RetryPolicy::new(RetryParams {
            max_attempts,
            backoff_base: Duration::ZERO,
            ..RetryParams::default()
        })
        .expect("valid policy"),
    )
}

/// C-RETRY-10: a retry after a retryable status waits a full-jitter backoff below
/// `backoff_base` × 2^(k−1) capped by `backoff_max` for retry k; its header deadline counts from
/// the send; a retry of which nothing was sent (C-RETRY-9) does not wait. Deterministic per seed.
#[test]
fn c_retry_10_a_retry_waits_its_backoff_and_an_unsent_one_does_not() {
    let p = pool(4);
    let pol = Arc::new(
        RetryPolicy::new(RetryParams {
            max_attempts: 4,
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(300),
            ..RetryParams::default()
        })
        .expect("valid policy"),
    );
    let bud = budget(100, 0);
    let run = |seed: u64| {
        let rng = &mut WyRand::new(seed);
        let (mut flow, first) = start(&p, &pol, &bud, meta("GET", BodyKind::None), rng);
        assert_eq!(first.at, T0, "no wait before the first attempt");
        let mut ats = Vec::new();
        let mut now = T0;
        for k in 1..=3u32 {
            let a = match flow.handle_response_head(503, now, rng) {
                Action::Retry(a) => a,
                other => panic!("retry {k}: {other:?}"),
            };
            let waited = a.at.saturating_since(now);
            let cap = Duration::from_millis((100u64 << (k - 1)).min(300));
            assert!(waited < cap, "retry {k}: waited {waited:?}, cap {cap:?}");
            assert_eq!(a.header_deadline, pol.header_deadline(a.at));
            ats.push(waited);
            now = a.at;
        }
        let _ = flow.handle_response_head(200, now, rng);
        let _ = flow.handle_body_end(BodyEnd::Complete, now);
        ats
    };
    assert_eq!(run(3), run(3), "the same seed waits the same");
    assert_ne!(run(3), run(4), "the seed is used");
    let rng = &mut WyRand::new(5);
    let (mut flow, _) = start(&p, &pol, &bud, meta("POST", BodyKind::Streaming), rng);
    match flow.handle_error(AttemptError::Connect, T0, rng) {
        Action::Retry(a) => assert_eq!(a.at, T0, "C-RETRY-9: no backoff"),
        other => panic!("{other:?}"),
    }
    let _ = flow.handle_error(AttemptError::ClientGone, T0, rng);
    assert_eq!(in_flight(&p), [0, 0, 0, 0]);
}

fn pool_with(n: usize, max_concurrent_requests: u32) -> Arc<Pool> {
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| BackendSpec::new(format!("b{i}"), format!("http://10.0.0.{i}:80")))
        .collect();
    let params = PoolParams {
        max_concurrent_requests,
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(
        &specs,
        PolicyKind::RoundRobin,
        params,
        None,
        Instant::ZERO,
        &mut WyRand::new(7),
    )
    .expect("valid pool");
    for b in pool.backends() {
        b.set_healthy(true, Instant::ZERO);
    }
    Arc::new(pool)
}

fn pool(n: usize) -> Arc<Pool> {
    pool_with(n, 512)
}

fn get() -> RequestMeta {
    meta("GET", BodyKind::None)
}

fn meta(method: &str, body: BodyKind) -> RequestMeta {
    RequestMeta {
        method: http::Method::from_bytes(method.as_bytes()).expect("valid method"),
        body,
        ctx: PickContext::default(),
    }
}

fn target(pool: &Arc<Pool>) -> FlowTarget {
    FlowTarget {
        pool: Arc::clone(pool),
        bulkhead: None,
    }
}

fn in_flight(pool: &Pool) -> Vec<u32> {
    pool.backends().iter().map(|b| b.in_flight()).collect()
}

fn attempt(action: Action) -> Attempt {
    match action {
        Action::Attempt(a) | Action::Retry(a) => a,
        other => panic!("expected an attempt, got {other:?}"),
    }
}

fn start(
    pool: &Arc<Pool>,
    policy: &Arc<RetryPolicy>,
    budget: &Arc<RetryBudget>,
    meta: RequestMeta,
    rng: &mut WyRand,
) -> (Flow, Attempt) {
    let (flow, action) = Flow::start(target(pool), policy, budget, meta, T0, rng);
    (flow, attempt(action))
}

#[test]
fn c_retry_1_a_503_is_retried_on_another_backend_and_the_retry_delivered() {
    let (p, pol, bud, rng) = (pool(3), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    assert_eq!(first.attempt, 1);
    assert_eq!(flow.phase(), Phase::AwaitingHead);
    assert_eq!(flow.backend_id(), Some(p.backends()[first.backend].id()));
    assert_eq!(p.backends()[first.backend].in_flight(), 1);

    let t1 = T0 + Duration::from_millis(20);
    let second = attempt(flow.handle_response_head(503, t1, rng));
    assert_eq!(second.attempt, 2);
    assert_ne!(second.backend, first.backend, "C-RETRY-2");
    assert_eq!(second.header_deadline, t1 + Duration::from_secs(5));
    assert_eq!(
        p.backends()[first.backend].in_flight(),
        0,
        "the old slot is released when the flow moves on (C-RETRY-6)"
    );
    assert_eq!(p.backends()[first.backend].passive_failures(), 1);
    assert_eq!(bud.tokens(t1), 9, "one token per retry (C-RETRY-7)");

    let d = match flow.handle_response_head(200, t1, rng) {
        Action::Deliver(d) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        d,
        Deliver {
            backend: second.backend,
            attempt: 2,
            status: 200,
            budget_exhausted: false,
            protection: None,
        }
    );
    assert_eq!(flow.phase(), Phase::Streaming);
    assert_eq!(
        flow.poll_timeout(),
        None,
        "a started body is never cut (C-RETRY-5)"
    );
    assert_eq!(
        p.backends()[second.backend].in_flight(),
        1,
        "held while streaming (C-POOL-6)"
    );
    assert_eq!(flow.handle_body_end(BodyEnd::Complete, t1), Action::Nothing);
    assert_eq!(flow.phase(), Phase::Finished);
    assert_eq!(in_flight(&p), [0, 0, 0]);
}

#[test]
fn c_retry_1_a_500_is_a_success_and_is_delivered() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let a = flow.handle_response_head(500, T0, rng);
    assert!(
        matches!(
            a,
            Action::Deliver(Deliver {
                status: 500,
                attempt: 1,
                ..
            })
        ),
        "{a:?}"
    );
    assert_eq!(p.backends()[first.backend].passive_failures(), 0);
    assert_eq!(bud.tokens(T0), 10);
}

#[test]
fn c_retry_1_post_is_not_retried() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, _) = start(&p, &pol, &bud, meta("POST", BodyKind::None), rng);
    let a = flow.handle_response_head(503, T0, rng);
    assert!(
        matches!(
            a,
            Action::Deliver(Deliver {
                status: 503,
                attempt: 1,
                ..
            })
        ),
        "{a:?}"
    );
    let _ = flow.handle_body_end(BodyEnd::Complete, T0);

    // A transport error: the request reached the backend (a connect error would be
    // C-RETRY-9's, retried whatever the method).
    let (mut flow, first) = start(&p, &pol, &bud, meta("POST", BodyKind::Sized(10)), rng);
    match flow.handle_error(AttemptError::Transport, T0, rng) {
        Action::Fail(f) => {
            assert_eq!(f.status, 502);
            assert_eq!(f.no_retry, NoRetryReason::MethodNotAllowed);
            assert_eq!(f.backend, first.backend);
            assert_eq!(f.attempts, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bud.tokens(T0), 10);
    assert_eq!(in_flight(&p), [0, 0]);
}

#[test]
fn c_retry_9_a_post_nothing_of_which_was_sent_is_retried_with_a_token() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    for error in [AttemptError::Connect, AttemptError::Refused] {
        let (mut flow, first) = start(&p, &pol, &bud, meta("POST", BodyKind::Streaming), rng);
        let tokens = bud.tokens(T0);
        match flow.handle_error(error, T0, rng) {
            Action::Retry(a) => {
                assert_ne!(a.backend, first.backend, "C-RETRY-2");
                assert_eq!(a.attempt, 2);
            }
            other => panic!("{error:?}: {other:?}"),
        }
        assert_eq!(bud.tokens(T0), tokens - 1, "C-RETRY-7: a token spent");
        let a = flow.handle_response_head(200, T0, rng);
        assert!(matches!(a, Action::Deliver(_)), "{a:?}");
        let _ = flow.handle_body_end(BodyEnd::Complete, T0);
    }
    assert_eq!(in_flight(&p), [0, 0]);
}

#[test]
fn c_retry_1_a_streaming_or_oversized_body_is_not_retried() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    for body in [BodyKind::Streaming, BodyKind::Sized(pol.body_limit() + 1)] {
        let (mut flow, _) = start(&p, &pol, &bud, meta("PUT", body), rng);
        let _ = flow.handle_body_end(BodyEnd::Complete, T0); // ignored: not streaming
        let (mut flow2, _) = start(&p, &pol, &bud, meta("GET", body), rng);
        match flow2.handle_error(AttemptError::Transport, T0, rng) {
            Action::Fail(f) => assert_eq!(f.no_retry, NoRetryReason::BodyNotReplayable),
            other => panic!("{other:?}"),
        }
        drop(flow);
    }
    let (mut flow, _) = start(&p, &pol, &bud, meta("GET", BodyKind::Sized(10)), rng);
    assert!(matches!(
        flow.handle_error(AttemptError::Transport, T0, rng),
        Action::Retry(_)
    ));
}

#[test]
fn c_retry_1_max_attempts_bounds_the_attempts() {
    let (p, pol, bud, rng) = (pool(5), policy(3), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let mut seen = vec![first.backend];
    for n in 2..=3 {
        let a = attempt(flow.handle_response_head(502, T0, rng));
        assert_eq!(a.attempt, n);
        seen.push(a.backend);
    }
    match flow.handle_response_head(504, T0, rng) {
        Action::Deliver(d) => {
            assert_eq!(d.attempt, 3);
            assert_eq!(d.status, 504);
            assert!(!d.budget_exhausted);
        }
        other => panic!("{other:?}"),
    }
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 3, "C-RETRY-2");
    assert_eq!(bud.tokens(T0), 8);
}

#[test]
fn c_retry_3_an_empty_budget_delivers_the_last_response_and_keeps_the_reservation_free() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(1, 1), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let d = match flow.handle_response_head(503, T0, rng) {
        Action::Deliver(d) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        d.backend, first.backend,
        "the last response as it was (C-RETRY-4)"
    );
    assert!(d.budget_exhausted);
    assert_eq!(d.protection, Some(ProtectionReason::RetryBudgetExhausted));
    assert_eq!(
        Action::Deliver(d).protection_reason(),
        Some(ProtectionReason::RetryBudgetExhausted)
    );
    let other = 1 - first.backend;
    assert_eq!(
        p.backends()[other].in_flight(),
        0,
        "the reserved slot was given back"
    );
    assert_eq!(
        p.backends()[other].requests(),
        0,
        "a reservation given back is not an attempt"
    );
    let headers: Vec<(&str, String)> = delivered_headers(
        &d,
        "b0",
        &crate::request_id::RequestId::parse(b"req-1").unwrap(),
    )
    .map(|(n, v)| (n, v.to_string()))
    .collect();
    assert!(
        headers.contains(&(header::RETRY_BUDGET, "exhausted".into())),
        "C-PATH-4"
    );
}

#[test]
fn c_retry_3_no_other_backend_costs_no_token() {
    let (p, pol, bud, rng) = (pool(1), policy(3), budget(5, 0), &mut WyRand::new(1));
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    match flow.handle_response_head(503, T0, rng) {
        Action::Deliver(d) => {
            assert!(!d.budget_exhausted);
            assert_eq!(d.protection, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bud.tokens(T0), 5, "C-RETRY-3");
    // The same with an error: a synthetic 502 naming why.
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    match flow.handle_error(AttemptError::Connect, T0, rng) {
        Action::Fail(f) => {
            assert_eq!(f.no_retry, NoRetryReason::NoOtherBackend);
            assert!(!f.budget_exhausted);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bud.tokens(T0), 5, "C-RETRY-3");
}

#[test]
fn c_retry_4_an_empty_budget_on_an_error_fails_with_the_exhausted_header() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(1, 1), &mut WyRand::new(1));
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    let f = match flow.handle_error(AttemptError::Transport, T0, rng) {
        Action::Fail(f) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(f.status, 502);
    assert!(f.budget_exhausted);
    assert_eq!(f.protection, Some(ProtectionReason::RetryBudgetExhausted));
    assert_eq!(flow.phase(), Phase::Finished);
    assert_eq!(in_flight(&p), [0, 0]);
    let r = SyntheticResponse::failure(&f, "req-1");
    assert_eq!(r.status(), 502);
    assert!(
        r.headers()
            .any(|(n, v)| n == header::RETRY_BUDGET && v.to_string() == "exhausted")
    );
}

#[test]
fn c_retry_5_a_per_try_timeout_is_retried_then_answers_504() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let deadline = T0 + Duration::from_secs(5);
    assert_eq!(first.header_deadline, deadline);
    assert_eq!(flow.poll_timeout(), Some(deadline));
    let early = deadline - Duration::from_nanos(1);
    assert_eq!(
        flow.handle_timeout(early, rng),
        Action::Nothing,
        "early is a no-op"
    );
    assert_eq!(flow.attempts(), 1);
    let second = attempt(flow.handle_timeout(deadline, rng));
    assert_eq!(second.header_deadline, deadline + Duration::from_secs(5));
    assert_eq!(flow.poll_timeout(), Some(second.header_deadline));
    let late = second.header_deadline + Duration::from_secs(1);
    match flow.handle_timeout(late, rng) {
        Action::Fail(f) => {
            assert_eq!(f.status, 504);
            assert_eq!(f.cause, AttemptError::PerTryTimeout);
            assert_eq!(f.no_retry, NoRetryReason::AttemptsExhausted);
            assert_eq!(f.attempts, 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(flow.poll_timeout(), None);
    assert_eq!(flow.handle_timeout(late, rng), Action::Nothing);
    for b in p.backends() {
        assert_eq!(
            b.passive_failures(),
            1,
            "a per-try timeout is a failure (C-RETRY-8)"
        );
        assert_eq!(b.in_flight(), 0);
    }
}

#[test]
fn c_retry_5_the_deadline_bounds_headers_only() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    assert!(matches!(
        flow.handle_response_head(200, T0, rng),
        Action::Deliver(_)
    ));
    let much_later = T0 + Duration::from_secs(3600);
    assert_eq!(flow.handle_timeout(much_later, rng), Action::Nothing);
    assert_eq!(flow.phase(), Phase::Streaming);
    let _ = flow.handle_body_end(BodyEnd::Complete, much_later);
    assert_eq!(in_flight(&p), [0, 0]);
}

#[test]
fn c_path_9_client_gone_abandons_and_is_neutral_for_the_breaker() {
    let (p, pol, bud, rng) = (pool(1), policy(2), budget(10, 0), &mut WyRand::new(1));
    let b = &p.backends()[0];
    // One failure on record: a neutral outcome must neither add to it nor reset it.
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    let _ = flow.handle_response_head(503, T0, rng);
    let _ = flow.handle_body_end(BodyEnd::Complete, T0);
    assert_eq!(b.breaker().consecutive_failures(), 1);
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    assert_eq!(
        flow.handle_error(AttemptError::ClientGone, T0, rng),
        Action::Abandon
    );
    assert_eq!(flow.phase(), Phase::Finished);
    assert_eq!(b.in_flight(), 0);
    assert_eq!(b.passive_failures(), 1);
    assert_eq!(b.breaker().consecutive_failures(), 1, "neutral (C-RETRY-8)");
    assert_eq!(bud.tokens(T0), 10);
}

#[test]
fn c_path_9_client_gone_frees_a_half_open_trial() {
    let (p, pol, bud, rng) = (pool(1), policy(1), budget(10, 0), &mut WyRand::new(1));
    let b = &p.backends()[0];
    for _ in 0..2 {
        let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
        let _ = flow.handle_error(AttemptError::Connect, T0, rng);
    }
    assert_eq!(b.circuit_state(T0), crate::breaker::CircuitState::Open);
    let later = T0 + Duration::from_secs(11);
    let (mut flow, _) = {
        let (f, a) = Flow::start(target(&p), &pol, &bud, get(), later, rng);
        (f, attempt(a))
    };
    assert_eq!(
        b.circuit_state(later),
        crate::breaker::CircuitState::HalfOpen
    );
    assert_eq!(
        flow.handle_error(AttemptError::ClientGone, later, rng),
        Action::Abandon
    );
    assert_eq!(
        b.circuit_state(later),
        crate::breaker::CircuitState::HalfOpen
    );
    // The trial is free again: the next request may be the trial.
    let (f, a) = Flow::start(target(&p), &pol, &bud, get(), later, rng);
    assert!(
        matches!(a, Action::Attempt(Attempt { panic: false, .. })),
        "{a:?}"
    );
    drop(f);
}

#[test]
fn c_pool_5_panic_routing_is_flagged_on_the_attempt() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    for b in p.backends() {
        for _ in 0..2 {
            let mut s = Backend::try_reserve(b, p.params(), T0, false).unwrap();
            let _ = s.record(crate::breaker::Outcome::Failure, p.params(), T0);
        }
    }
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    assert!(first.panic, "every circuit open: panic routing (select.rs)");
    let second = attempt(flow.handle_error(AttemptError::Connect, T0, rng));
    assert!(second.panic);
    assert_ne!(second.backend, first.backend);
}

#[test]
fn c_retry_2_retries_never_revisit_a_backend() {
    let (p, pol, bud, rng) = (pool(3), policy(5), budget(10, 0), &mut WyRand::new(3));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let mut seen = vec![first.backend];
    loop {
        match flow.handle_error(AttemptError::Transport, T0, rng) {
            Action::Retry(a) => {
                assert!(
                    !seen.contains(&a.backend),
                    "revisited {} after {seen:?}",
                    a.backend
                );
                seen.push(a.backend);
            }
            Action::Fail(f) => {
                assert_eq!(f.no_retry, NoRetryReason::NoOtherBackend);
                assert_eq!(f.attempts, 3);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen.len(), 3);
    assert_eq!(flow.tried().len(), 3);
    assert_eq!(
        bud.tokens(T0),
        8,
        "two retries, two tokens; the third found nothing (C-RETRY-3)"
    );
}

#[test]
fn c_load_2_a_full_bulkhead_rejects_and_permits_are_held_until_the_end() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let bulkhead = Arc::new(Bulkhead::new(Some(1)).unwrap());
    let t = || FlowTarget {
        pool: Arc::clone(&p),
        bulkhead: Some(Arc::clone(&bulkhead)),
    };
    let (mut first, a) = Flow::start(t(), &pol, &bud, get(), T0, rng);
    assert!(matches!(a, Action::Attempt(_)));
    let (second, r) = Flow::start(t(), &pol, &bud, get(), T0, rng);
    assert_eq!(
        r,
        Action::Reject(Reject::BulkheadFull(crate::bulkhead::BulkheadFull {
            limit: 1
        }))
    );
    assert_eq!(r.protection_reason(), Some(ProtectionReason::BulkheadFull));
    assert_eq!(second.phase(), Phase::Finished);
    assert_eq!(second.attempts(), 0);
    assert_eq!(
        in_flight(&p).iter().sum::<u32>(),
        1,
        "the rejected request reserved no slot"
    );
    let _ = first.handle_response_head(200, T0, rng);
    assert_eq!(bulkhead.in_flight(), 1, "held while the body streams");
    let _ = first.handle_body_end(BodyEnd::Error, T0);
    assert_eq!(bulkhead.in_flight(), 0);
}

#[test]
fn c_pool_5_no_backend_is_a_typed_reject() {
    let (pol, bud, rng) = (policy(2), budget(10, 0), &mut WyRand::new(1));
    let empty = pool(0);
    let (_, a) = Flow::start(target(&empty), &pol, &bud, get(), T0, rng);
    assert_eq!(a, Action::Reject(Reject::NoBackend(NoBackend::EmptyPool)));

    let down = pool(2);
    for b in down.backends() {
        b.set_healthy(false, T0);
    }
    let bulkhead = Arc::new(Bulkhead::new(Some(3)).unwrap());
    let (flow, a) = Flow::start(
        FlowTarget {
            pool: Arc::clone(&down),
            bulkhead: Some(Arc::clone(&bulkhead)),
        },
        &pol,
        &bud,
        get(),
        T0,
        rng,
    );
    assert_eq!(a, Action::Reject(Reject::NoBackend(NoBackend::NoHealthy)));
    assert_eq!(a.protection_reason(), None);
    assert_eq!(
        bulkhead.in_flight(),
        0,
        "the permit is released with the reject"
    );
    assert_eq!(flow.phase(), Phase::Finished);
    assert!(flow.backend().is_none());

    let busy = pool_with(2, 1);
    let held: Vec<_> = busy
        .backends()
        .iter()
        .map(|b| Backend::try_reserve(b, busy.params(), T0, false).unwrap())
        .collect();
    let (_, a) = Flow::start(target(&busy), &pol, &bud, get(), T0, rng);
    assert_eq!(
        a,
        Action::Reject(Reject::NoBackend(NoBackend::AllSaturated))
    );
    assert_eq!(
        a.protection_reason(),
        Some(ProtectionReason::BackendSaturated),
        "C-LOAD-3"
    );
    let body = SyntheticResponse::reject(&Reject::NoBackend(NoBackend::AllSaturated), "r").body();
    assert!(body.contains("all_backends_saturated"), "{body}");
    drop(held);
}

#[test]
fn c_load_3_a_retry_stopped_by_saturation_counts_backend_saturated_and_costs_nothing() {
    let (p, pol, bud, rng) = (
        pool_with(2, 1),
        policy(2),
        budget(10, 0),
        &mut WyRand::new(1),
    );
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let other = &p.backends()[1 - first.backend];
    let hold = Backend::try_reserve(other, p.params(), T0, false).unwrap();
    match flow.handle_response_head(503, T0, rng) {
        Action::Deliver(d) => {
            assert_eq!(d.protection, Some(ProtectionReason::BackendSaturated));
            assert!(!d.budget_exhausted);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bud.tokens(T0), 10);
    drop(hold);
}

#[test]
fn c_pool_6_dropping_the_flow_releases_everything() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let bulkhead = Arc::new(Bulkhead::new(None).unwrap());
    let t = || FlowTarget {
        pool: Arc::clone(&p),
        bulkhead: Some(Arc::clone(&bulkhead)),
    };
    let (awaiting, _) = Flow::start(t(), &pol, &bud, get(), T0, rng);
    let (mut streaming, _) = Flow::start(t(), &pol, &bud, get(), T0, rng);
    let _ = streaming.handle_response_head(200, T0, rng);
    assert_eq!(in_flight(&p).iter().sum::<u32>(), 2);
    assert_eq!(bulkhead.in_flight(), 2);
    drop(awaiting);
    drop(streaming);
    assert_eq!(in_flight(&p), [0, 0]);
    assert_eq!(bulkhead.in_flight(), 0);
}

#[test]
fn health_is_judged_at_the_head_a_broken_body_after_a_success_does_not_count() {
    let (p, pol, bud, rng) = (pool(1), policy(1), budget(10, 0), &mut WyRand::new(1));
    let b = &p.backends()[0];
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    let _ = flow.handle_response_head(503, T0, rng);
    let _ = flow.handle_body_end(BodyEnd::Complete, T0);
    assert_eq!(b.breaker().consecutive_failures(), 1);
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    let _ = flow.handle_response_head(200, T0, rng);
    assert_eq!(
        b.breaker().consecutive_failures(),
        0,
        "recorded at the head"
    );
    let _ = flow.handle_body_end(BodyEnd::Error, T0);
    assert_eq!(b.breaker().consecutive_failures(), 0);
    assert_eq!(b.passive_failures(), 1);
}

#[test]
fn events_outside_their_phase_are_ignored() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
    assert_eq!(flow.handle_body_end(BodyEnd::Complete, T0), Action::Nothing);
    assert_eq!(
        flow.phase(),
        Phase::AwaitingHead,
        "a body end before a head is ignored"
    );
    let _ = flow.handle_response_head(200, T0, rng);
    assert_eq!(flow.handle_response_head(503, T0, rng), Action::Nothing);
    assert_eq!(
        flow.handle_error(AttemptError::ClientGone, T0, rng),
        Action::Nothing
    );
    assert_eq!(flow.phase(), Phase::Streaming);
    let _ = flow.handle_body_end(BodyEnd::ClientGone, T0);
    for e in [
        FlowEvent::ResponseHead(200),
        FlowEvent::Error(AttemptError::Transport),
        FlowEvent::Timeout,
        FlowEvent::BodyEnd(BodyEnd::Complete),
    ] {
        assert_eq!(
            flow.handle(e, T0 + Duration::from_secs(60), rng),
            Action::Nothing
        );
    }
    assert_eq!(in_flight(&p), [0, 0]);
}

#[test]
fn time_going_backwards_is_clamped() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    assert_eq!(flow.handle_timeout(Instant::ZERO, rng), Action::Nothing);
    let a = attempt(flow.handle_error(AttemptError::Connect, Instant::ZERO, rng));
    assert_eq!(
        a.header_deadline, first.header_deadline,
        "deadline from the clamped now"
    );
}

#[test]
fn drive_replays_deterministically() {
    let run = || {
        let (p, pol, bud) = (pool(4), policy(3), budget(10, 0));
        let mut rng = WyRand::new(42);
        let (mut flow, first) = Flow::start(target(&p), &pol, &bud, get(), T0, &mut rng);
        let events = [
            (T0, FlowEvent::ResponseHead(503)),
            (T0 + Duration::from_secs(6), FlowEvent::Timeout),
            (T0 + Duration::from_secs(7), FlowEvent::ResponseHead(200)),
            (
                T0 + Duration::from_secs(8),
                FlowEvent::BodyEnd(BodyEnd::Complete),
            ),
        ];
        let mut actions = vec![first];
        actions.extend(drive(&mut flow, &events, &mut rng));
        actions
    };
    let a = run();
    assert_eq!(a, run());
    assert!(
        matches!(a[1], Action::Retry(Attempt { attempt: 2, .. })),
        "{a:?}"
    );
    assert!(
        matches!(a[2], Action::Retry(Attempt { attempt: 3, .. })),
        "{a:?}"
    );
    assert!(
        matches!(a[3], Action::Deliver(Deliver { attempt: 3, .. })),
        "{a:?}"
    );
    assert_eq!(a[4], Action::Nothing);
}

#[test]
fn flow_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Flow>();
    check::<Action>();
}

// ---------------------------------------------------------------------------------------------
// State-machine property test.

/// The state a backend is put in before the request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setup {
    Healthy,
    Unhealthy,
    Disabled,
    Draining,
    /// Every slot held by other requests.
    Saturated,
    /// Circuit opened at time zero (cooldown 10 s; half-open from then on).
    Open,
}

/// An arbitrary world for one request.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(crate) backends: Vec<Setup>,
    pub(crate) max_concurrent_requests: u32,
    pub(crate) max_attempts: u32,
    pub(crate) method: &'static str,
    pub(crate) body: BodyKind,
    pub(crate) budget_capacity: u64,
    pub(crate) budget_drained: u64,
    /// `Some((limit, held))`: a bulkhead with `held` permits already taken.
    pub(crate) bulkhead: Option<(u32, u32)>,
    pub(crate) start_ms: u64,
    pub(crate) seed: u64,
}

pub(crate) fn scenario() -> impl Strategy<Value = Scenario> {
    let setup = prop_oneof![
        5 => Just(Setup::Healthy),
        1 => Just(Setup::Unhealthy),
        1 => Just(Setup::Disabled),
        1 => Just(Setup::Draining),
        1 => Just(Setup::Saturated),
        1 => Just(Setup::Open),
    ];
    let body = prop_oneof![
        Just(BodyKind::None),
        Just(BodyKind::Streaming),
        (0u64..2_000_000).prop_map(BodyKind::Sized),
    ];
    (
        prop_oneof![1 => proptest::collection::vec(setup.clone(), 0..2), 9 => proptest::collection::vec(setup, 2..7)],
        1u32..3,
        1u32..=5,
        prop::sample::select(vec!["GET", "get", "HEAD", "OPTIONS", "POST", "PUT"]),
        body,
        (1u64..5, 0u64..5),
        proptest::option::weighted(0.3, (1u32..3, 0u32..3)),
        0u64..30_000,
        any::<u64>(),
    )
        .prop_map(
            |(
                backends,
                max_concurrent_requests,
                max_attempts,
                method,
                body,
                (cap, drained),
                bulkhead,
                start_ms,
                seed,
            )| {
                Scenario {
                    backends,
                    max_concurrent_requests,
                    max_attempts,
                    method,
                    body,
                    budget_capacity: cap,
                    budget_drained: drained.min(cap),
                    bulkhead,
                    start_ms,
                    seed,
                }
            },
        )
}

/// One event with a time step: `(step_ms, backwards, event)`.
pub(crate) type Step = (u64, bool, FlowEvent);

pub(crate) fn flow_event() -> impl Strategy<Value = FlowEvent> {
    prop_oneof![
        4 => prop_oneof![
            Just(200u16), Just(500), Just(502), Just(503), Just(504), 0u16..1000
        ].prop_map(FlowEvent::ResponseHead),
        3 => prop::sample::select(AttemptError::ALL.to_vec()).prop_map(FlowEvent::Error),
        2 => Just(FlowEvent::Timeout),
        1 => prop::sample::select(vec![BodyEnd::Complete, BodyEnd::Error, BodyEnd::ClientGone])
            .prop_map(FlowEvent::BodyEnd),
    ]
}

pub(crate) fn events() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (0u64..8_000, prop::bool::weighted(0.1), flow_event()),
        0..24,
    )
}

/// A scenario made real: the shared objects and what other requests hold.
pub(crate) struct Built {
    pub(crate) pool: Arc<Pool>,
    pub(crate) policy: Arc<RetryPolicy>,
    pub(crate) budget: Arc<RetryBudget>,
    pub(crate) bulkhead: Option<Arc<Bulkhead>>,
    pub(crate) held_slots: Vec<Slot>,
    pub(crate) held_permits: Vec<BulkheadPermit>,
    pub(crate) meta: RequestMeta,
    pub(crate) start: Instant,
}

impl Scenario {
    pub(crate) fn build(&self) -> Built {
        let p = pool_with(self.backends.len(), self.max_concurrent_requests);
        let params = *p.params();
        let mut held_slots = Vec::new();
        for (b, setup) in p.backends().iter().zip(&self.backends) {
            match setup {
                Setup::Healthy => {}
                Setup::Unhealthy => {
                    b.set_healthy(false, Instant::ZERO);
                }
                Setup::Disabled => {
                    b.set_enabled(false, Instant::ZERO);
                }
                Setup::Draining => {
                    b.start_drain(Instant::ZERO);
                }
                Setup::Saturated => {
                    for _ in 0..self.max_concurrent_requests {
                        held_slots
                            .push(Backend::try_reserve(b, &params, Instant::ZERO, false).unwrap());
                    }
                }
                Setup::Open => {
                    for _ in 0..2 {
                        let mut s = Backend::try_reserve(b, &params, Instant::ZERO, false).unwrap();
                        let _ = s.record(crate::breaker::Outcome::Failure, &params, Instant::ZERO);
                    }
                }
            }
        }
        let bulkhead = self
            .bulkhead
            .map(|(limit, _)| Arc::new(Bulkhead::new(Some(limit)).unwrap()));
        let held_permits = match (&bulkhead, self.bulkhead) {
            (Some(b), Some((_, held))) => (0..held)
                .filter_map(|_| Bulkhead::try_acquire(b).ok())
                .collect(),
            _ => Vec::new(),
        };
        Built {
            pool: p,
            policy: policy(self.max_attempts),
            budget: budget(self.budget_capacity, self.budget_drained),
            bulkhead,
            held_slots,
            held_permits,
            meta: meta(self.method, self.body),
            start: Instant::from_millis(self.start_ms),
        }
    }
}

/// What the checker tracks across a run.
#[derive(Debug, Default)]
struct Tally {
    attempts: Vec<usize>,
    retries: u64,
    finals: u32,
    expected_failures: u64,
}

/// One property-test run: the world, what it looked like before the flow, and the tally.
struct Run<'a> {
    b: &'a Built,
    baseline: Vec<u32>,
    failures0: u64,
    tokens0: u64,
    tally: Tally,
}

impl Run<'_> {
    /// Check the flow's invariants after one action.
    fn check(
        &mut self,
        flow: &Flow,
        event: Option<FlowEvent>,
        action: Action,
        now: Instant,
    ) -> Result<(), TestCaseError> {
        let Run {
            b,
            baseline,
            failures0,
            tokens0,
            tally,
        } = self;
        let (b, failures0, tokens0) = (*b, *failures0, *tokens0);
        let pol = &b.policy;
        if tally.finals > 0 {
            prop_assert_eq!(action, Action::Nothing, "an action after the final one");
        }
        match action {
            // Hedging is off in these policies (`hedge_delay` 0s).
            Action::Hedge(a) => prop_assert!(false, "a hedge with hedging off: {a:?}"),
            Action::Attempt(a) | Action::Retry(a) => {
                prop_assert!(
                    !tally.attempts.contains(&a.backend),
                    "C-RETRY-2: revisited {}",
                    a.backend
                );
                tally.attempts.push(a.backend);
                prop_assert_eq!(a.attempt as usize, tally.attempts.len());
                if matches!(action, Action::Retry(_)) {
                    tally.retries += 1;
                    // C-RETRY-9: nothing of the attempt was sent; method and body do not matter.
                    let unsent = matches!(
                        event,
                        Some(FlowEvent::Error(
                            AttemptError::Connect | AttemptError::Refused | AttemptError::Saturated
                        ))
                    );
                    prop_assert!(
                        unsent || pol.allows_method(b.meta.method.as_str()),
                        "C-RETRY-1 method"
                    );
                    prop_assert!(unsent || pol.body_replayable(b.meta.body), "C-RETRY-1 body");
                    let retryable = match event {
                        // A status outside 100..=599 is an invalid response: a failure, like a transport error.
                        Some(FlowEvent::ResponseHead(s)) => {
                            !valid_upstream_status(s) || pol.is_retryable_status(s)
                        }
                        Some(FlowEvent::Error(e)) => e != AttemptError::ClientGone,
                        Some(FlowEvent::Timeout) => true,
                        _ => false,
                    };
                    prop_assert!(retryable, "C-RETRY-1 outcome: retried after {:?}", event);
                }
            }
            Action::Deliver(d) => {
                prop_assert_eq!(Some(d.backend), tally.attempts.last().copied());
                prop_assert_eq!(d.attempt as usize, tally.attempts.len());
                prop_assert_eq!(
                    d.budget_exhausted,
                    d.protection == Some(ProtectionReason::RetryBudgetExhausted)
                );
                prop_assert_eq!(flow.phase(), Phase::Streaming);
            }
            Action::Fail(f) => {
                prop_assert_eq!(f.status == 504, f.cause == AttemptError::PerTryTimeout);
                // A saturated backend is answered as a saturated pool is (C-POOL-6).
                prop_assert_eq!(f.status == 503, f.cause == AttemptError::Saturated);
                prop_assert!(f.status == 502 || f.status == 503 || f.status == 504);
                prop_assert_eq!(f.attempts as usize, tally.attempts.len());
                prop_assert_eq!(
                    f.budget_exhausted,
                    f.protection == Some(ProtectionReason::RetryBudgetExhausted)
                );
            }
            Action::Reject(_) => prop_assert!(tally.attempts.is_empty()),
            Action::Abandon | Action::Nothing => {}
        }
        if action.is_final() {
            tally.finals += 1;
        }
        // Passive health: one record per applied outcome, failures as classified (C-RETRY-8).
        if action != Action::Nothing {
            let failed = match event {
                // A status outside 100..=599 is an invalid response: a failure, like a transport error.
                Some(FlowEvent::ResponseHead(s)) => {
                    !valid_upstream_status(s) || pol.is_retryable_status(s)
                }
                // A saturated backend did nothing wrong: neutral, like a client that left.
                Some(FlowEvent::Error(e)) => {
                    !matches!(e, AttemptError::ClientGone | AttemptError::Saturated)
                }
                Some(FlowEvent::Timeout) => true,
                _ => false,
            };
            tally.expected_failures += u64::from(failed);
        }
        let failures: u64 = b.pool.backends().iter().map(|x| x.passive_failures()).sum();
        prop_assert_eq!(
            failures - failures0,
            tally.expected_failures,
            "passive failures"
        );

        prop_assert!(flow.attempts() <= pol.max_attempts(), "max_attempts");
        prop_assert_eq!(flow.attempts() as usize, tally.attempts.len());
        prop_assert_eq!(
            tokens0 - b.budget.tokens(now),
            tally.retries,
            "exactly one budget token per retry issued (C-RETRY-3, C-RETRY-7)"
        );
        // Slots: exactly one while an attempt or a body is in progress, none otherwise (C-POOL-6).
        let extra: Vec<(usize, u32)> = b
            .pool
            .backends()
            .iter()
            .zip(baseline.iter())
            .map(|(x, &base)| x.in_flight() - base)
            .enumerate()
            .filter(|&(_, n)| n > 0)
            .collect();
        match flow.phase() {
            Phase::Finished => prop_assert!(extra.is_empty(), "slot leak: {:?}", extra),
            Phase::AwaitingHead | Phase::Streaming => {
                prop_assert_eq!(extra.len(), 1, "slots {:?}", extra);
                prop_assert_eq!(extra[0], (*tally.attempts.last().unwrap_or(&usize::MAX), 1));
            }
        }
        if let Some(bh) = &b.bulkhead {
            let mine = bh.in_flight() - b.held_permits.len() as u32;
            let expected = u32::from(flow.phase() != Phase::Finished);
            prop_assert_eq!(mine, expected, "bulkhead permit");
        }
        prop_assert_eq!(
            flow.poll_timeout().is_some(),
            flow.phase() == Phase::AwaitingHead
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C-RETRY-1, -2, -3, -5, -7, -8, C-POOL-6, C-LOAD-2: for arbitrary pools, budgets, requests
    /// and event sequences (with time steps, forwards and backwards), after every event: attempts
    /// never exceed `max_attempts`; no backend is attempted twice; exactly one budget token is
    /// spent per retry issued; a retry follows only a retryable outcome of a retryable request;
    /// exactly one slot is held while an attempt or a body is in progress and none after; the
    /// bulkhead permit is held exactly as long; passive failures are recorded once per failed
    /// attempt. Driven to its end, every request has exactly one final outcome, and dropping a
    /// flow at any point releases everything.
    #[test]
    fn c_retry_flow_invariants_hold_for_any_event_sequence(
        s in scenario(),
        steps in events(),
        drop_early in any::<bool>(),
    ) {
        let b = s.build();
        let mut run = Run {
            b: &b,
            baseline: in_flight(&b.pool),
            failures0: b.pool.backends().iter().map(|x| x.passive_failures()).sum(),
            tokens0: b.budget.tokens(b.start),
            tally: Tally::default(),
        };
        prop_assert_eq!(run.baseline.iter().sum::<u32>() as usize, b.held_slots.len());
        let mut rng = WyRand::new(s.seed);
        let mut now = b.start;
        let (mut flow, first) = Flow::start(
            FlowTarget { pool: Arc::clone(&b.pool), bulkhead: b.bulkhead.clone() },
            &b.policy,
            &b.budget,
            b.meta.clone(),
            now,
            &mut rng,
        );
        run.check(&flow, None, first, now)?;
        let mut latest = now;
        for (step, backwards, event) in steps {
            now = if backwards { now - Duration::from_millis(step / 4) } else { now + Duration::from_millis(step) };
            latest = latest.max(now);
            let action = flow.handle(event, now, &mut rng);
            run.check(&flow, Some(event), action, latest)?;
        }
        if drop_early {
            drop(flow);
            prop_assert_eq!(in_flight(&b.pool), run.baseline.clone(), "drop releases every slot");
            if let Some(bh) = &b.bulkhead {
                prop_assert_eq!(bh.in_flight() as usize, b.held_permits.len());
            }
            prop_assert!(run.tally.finals <= 1);
            return Ok(());
        }
        // Drive to the end: timeouts while awaiting a head, then the body's end.
        for _ in 0..=(b.policy.max_attempts() + 1) {
            let event = match flow.phase() {
                Phase::AwaitingHead => FlowEvent::Timeout,
                Phase::Streaming => FlowEvent::BodyEnd(BodyEnd::Complete),
                Phase::Finished => break,
            };
            now = flow.poll_timeout().unwrap_or(now).max(now);
            latest = latest.max(now);
            let action = flow.handle(event, now, &mut rng);
            run.check(&flow, Some(event), action, latest)?;
        }
        prop_assert_eq!(flow.phase(), Phase::Finished);
        prop_assert_eq!(run.tally.finals, 1, "exactly one final outcome");
        prop_assert_eq!(in_flight(&b.pool), run.baseline.clone());
        drop(run);
        drop(b);
    }
}

/// C-LOAD-4: the flow feeds every attempt's end to its backend's adaptive limit (the latency
/// from reservation to response head): three answered requests in a row, one per 1 ms window,
/// grow a limit of 1 to 2 (the first window only learns the long-run latency).
#[test]
fn c_load_4_attempt_ends_feed_the_adaptive_limit() {
    let specs = [BackendSpec::new("b0", "http://10.0.0.1:80")];
    let params = PoolParams {
        max_concurrent_requests: 10,
        slow_start: SlowStart::off(),
        adaptive: crate::adaptive::AdaptiveParams::new(
            true,
            1,
            None,
            10,
            Duration::from_millis(1),
            1.5,
            0.9,
        )
        .expect("valid"),
        ..PoolParams::default()
    };
    let rng = &mut WyRand::new(7);
    let p = Arc::new(
        Pool::new(&specs, PolicyKind::RoundRobin, params, None, T0, rng).expect("valid pool"),
    );
    p.backends()[0].set_healthy(true, T0);
    let (pol, bud) = (policy(1), budget(100, 0));
    assert_eq!(p.backends()[0].concurrency_limit(&params), Some(1));
    for i in 0..3u64 {
        let at = T0 + Duration::from_millis(2 * i);
        let (mut flow, a) = Flow::start(target(&p), &pol, &bud, get(), at, rng);
        assert!(matches!(a, Action::Attempt(_)), "{a:?}");
        let head = flow.handle_response_head(200, at + Duration::from_millis(1), rng);
        assert!(matches!(head, Action::Deliver(_)), "{head:?}");
    }
    assert_eq!(p.backends()[0].concurrency_limit(&params), Some(2));
    assert_eq!(p.backends()[0].slot_limit(&params), 2);
}
