//! Upstream status validity (C-PATH-12 refinement in docs/proxy.md): a status outside
//! 100..=599 is an invalid response, `502` (or a retry) and a passive failure of the backend.

use super::*;

#[test]
fn only_100_to_599_are_valid_upstream_statuses() {
    for s in [100, 101, 200, 204, 399, 404, 500, 599] {
        assert!(valid_upstream_status(s), "{s}");
    }
    for s in [0, 1, 99, 600, 700, 999, 1000, u16::MAX] {
        assert!(!valid_upstream_status(s), "{s}");
    }
}

#[test]
fn a_status_999_without_a_retry_is_a_502_and_a_passive_failure() {
    // POST: not retryable, so the client gets the synthetic 502 at once.
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, meta("POST", BodyKind::None), rng);
    let f = match flow.handle_response_head(999, T0, rng) {
        Action::Fail(f) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(f.status, 502);
    assert_eq!(f.cause, AttemptError::InvalidResponse);
    assert_eq!(f.no_retry, NoRetryReason::MethodNotAllowed);
    let b = &p.backends()[first.backend];
    assert_eq!(b.passive_failures(), 1, "counts against the backend");
    assert_eq!(b.breaker().consecutive_failures(), 1);
    assert_eq!(flow.phase(), Phase::Finished);
    assert_eq!(in_flight(&p), [0, 0], "the slot is released");
    let r = SyntheticResponse::failure(&f, "rid");
    assert_eq!(r.status(), 502);
    assert!(r.message().contains("invalid response"), "{}", r.message());
}

#[test]
fn a_status_600_on_a_get_is_retried_on_another_backend() {
    let (p, pol, bud, rng) = (pool(2), policy(2), budget(10, 0), &mut WyRand::new(1));
    let (mut flow, first) = start(&p, &pol, &bud, get(), rng);
    let second = attempt(flow.handle_response_head(600, T0, rng));
    assert_ne!(second.backend, first.backend, "C-RETRY-2");
    assert_eq!(p.backends()[first.backend].passive_failures(), 1);
    assert_eq!(bud.tokens(T0), 9, "a retry like any other (C-RETRY-7)");
    match flow.handle_response_head(200, T0, rng) {
        Action::Deliver(d) => assert_eq!((d.status, d.attempt), (200, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn repeated_invalid_statuses_open_the_circuit() {
    let (p, pol, bud, rng) = (pool(1), policy(1), budget(10, 0), &mut WyRand::new(1));
    for _ in 0..2 {
        let (mut flow, _) = start(&p, &pol, &bud, get(), rng);
        assert!(matches!(
            flow.handle_response_head(999, T0, rng),
            Action::Fail(Failure { status: 502, .. })
        ));
    }
    // failure_threshold 2 (the default): the circuit opens (C-HEALTH-3).
    assert_eq!(
        p.backends()[0].circuit_state(T0),
        crate::breaker::CircuitState::Open
    );
}
