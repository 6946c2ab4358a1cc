//! The per-request flow machine driven by an arbitrary scenario and event sequence. Invariants
//! (C-RETRY-1..3, C-POOL-6): attempts never exceed max_attempts; a retry never revisits a
//! backend; exactly one budget token per retry issued; every slot reserved is released; a flow
//! driven to completion ends in exactly one final outcome.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use weir_core::bucket::BucketParams;
use weir_core::budget::RetryBudget;
use weir_core::flow::{Action, AttemptError, BodyEnd, Flow, FlowEvent, FlowTarget, RequestMeta};
use weir_core::pool::{BackendSpec, Pool, PoolParams};
use weir_core::retry::{BodyKind, RetryParams, RetryPolicy};
use weir_core::select::{PickContext, PolicyKind};
use weir_core::slow_start::SlowStart;
use weir_core::{Instant, WyRand};

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
}

pub fn run(data: &[u8]) {
    let mut b = Bytes(data);
    let n = usize::from(b.next() % 6) + 1;
    let kind = PolicyKind::ALL[usize::from(b.next()) % PolicyKind::ALL.len()];
    let max_attempts = u32::from(b.next() % 5) + 1;
    let capacity = u64::from(b.next() % 4) + 1;
    let params = PoolParams {
        max_concurrent_requests: 2,
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| BackendSpec::new(format!("b{i}"), format!("http://10.0.0.{i}")))
        .collect();
    let t0 = Instant::from_secs(1);
    let pool = Arc::new(Pool::new(&specs, kind, params, None, t0, &mut WyRand::new(1)).unwrap());
    for backend in pool.backends() {
        match b.next() % 4 {
            0 => {}
            1 => {
                backend.set_healthy(true, t0);
            }
            _ => {
                backend.set_healthy(true, t0);
                backend.start_drain(t0);
                if b.next() % 2 == 0 {
                    backend.set_enabled(true, t0);
                }
            }
        }
    }
    let policy = Arc::new(
        RetryPolicy::new(RetryParams {
            max_attempts,
            budget_capacity: capacity,
            ..RetryParams::default()
        })
        .unwrap(),
    );
    // A budget that does not refill within a run (one token per 31 years), so tokens spent are exact.
    let budget = Arc::new(RetryBudget::new(BucketParams::new(capacity, 1e-9).unwrap()));
    let method = [Method::GET, Method::POST, Method::HEAD][usize::from(b.next() % 3)].clone();
    let body =
        [BodyKind::None, BodyKind::Sized(10), BodyKind::Streaming][usize::from(b.next() % 3)];
    let ctx = PickContext {
        hash: Some(u64::from(b.next())),
    };
    let mut rng = WyRand::new(u64::from(b.next()));
    let target = FlowTarget {
        pool: Arc::clone(&pool),
        bulkhead: None,
    };
    let (mut flow, first) = Flow::start(
        target,
        &policy,
        &budget,
        RequestMeta { method, body, ctx },
        t0,
        &mut rng,
    );
    let mut now = t0;
    let tokens_at_start = budget.tokens_milli(now);
    let mut retries = 0u64;
    let mut finals = u32::from(first.is_final());
    let mut seen = Vec::new();
    let mut note = |a: &Action, finals: &mut u32, retries: &mut u64| {
        match a {
            Action::Attempt(x) => seen.push(x.backend),
            Action::Retry(x) => {
                assert!(
                    !seen.contains(&x.backend),
                    "retry revisits backend {} (C-RETRY-2)",
                    x.backend
                );
                seen.push(x.backend);
                *retries += 1;
            }
            _ => {}
        }
        if a.is_final() {
            *finals += 1;
        }
    };
    note(&first, &mut 0, &mut retries);
    while !b.0.is_empty() {
        let event = match b.next() % 6 {
            0 => FlowEvent::ResponseHead([200, 500, 502, 503, 504, 404][usize::from(b.next() % 6)]),
            1 => {
                FlowEvent::Error(AttemptError::ALL[usize::from(b.next()) % AttemptError::ALL.len()])
            }
            2 => FlowEvent::Timeout,
            3 => FlowEvent::BodyEnd(
                [BodyEnd::Complete, BodyEnd::Error, BodyEnd::ClientGone][usize::from(b.next() % 3)],
            ),
            4 => {
                now = now + Duration::from_millis(u64::from(b.next()) * 40);
                continue;
            }
            _ => break,
        };
        let action = flow.handle(event, now, &mut rng);
        note(&action, &mut finals, &mut retries);
        assert!(
            flow.attempts() <= max_attempts,
            "attempts exceed max_attempts (C-RETRY-1)"
        );
        assert!(finals <= 1, "more than one final outcome");
    }
    let spent = tokens_at_start - budget.tokens_milli(now);
    assert_eq!(
        spent,
        retries * 1000,
        "exactly one budget token per retry issued (C-RETRY-3, -7)"
    );
    drop(flow);
    for backend in pool.backends() {
        assert_eq!(
            backend.in_flight(),
            0,
            "slot leaked on {} (C-POOL-6)",
            backend.id()
        );
    }
}
