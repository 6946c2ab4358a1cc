use super::*;
use crate::sync::Arc;

/// Concurrent success and failure reports from two threads against a closed breaker with
/// threshold 2, plus a third failure: every interleaving ends in a consistent state, and the
/// circuit is open exactly when two failures were consecutive in the CAS order.
#[test]
fn loom_breaker_concurrent_transitions() {
    loom::model(|| {
        let p = BreakerParams::new(2, 1, Duration::from_secs(1), Duration::from_secs(4)).unwrap();
        let b = Arc::new(Breaker::new());
        let now = Instant::from_secs(1);
        let t1 = {
            let b = b.clone();
            loom::thread::spawn(move || {
                let permit = b.try_acquire(&p, now);
                permit.map(|x| b.record(x, Outcome::Failure, &p, now))
            })
        };
        let t2 = {
            let b = b.clone();
            loom::thread::spawn(move || {
                let permit = b.try_acquire(&p, now);
                permit.map(|x| b.record(x, Outcome::Success, &p, now))
            })
        };
        let permit = b.try_acquire(&p, now);
        let r3 = permit.map(|x| b.record(x, Outcome::Failure, &p, now));
        let r1 = t1.join().unwrap();
        let r2 = t2.join().unwrap();
        let opened = [r1, r3]
            .iter()
            .filter(|r| matches!(r, Some(Some(Transition::Opened { .. }))))
            .count();
        assert_eq!(r2.flatten(), None);
        assert!(opened <= 1, "opened twice");
        let w = b.load();
        match b.state(now) {
            CircuitState::Open => assert_eq!(opened, 1),
            CircuitState::Closed => {
                assert_eq!(opened, 0);
                assert!(w.failures() <= 1);
            }
            CircuitState::HalfOpen => panic!("cannot be half-open without time passing"),
        }
    });
}

/// Two threads race for the single half-open trial: exactly one gets it.
#[test]
fn loom_breaker_single_half_open_trial() {
    loom::model(|| {
        let p = BreakerParams::new(1, 1, Duration::from_secs(1), Duration::from_secs(4)).unwrap();
        let b = Arc::new(Breaker::new());
        let t0 = Instant::from_secs(1);
        let x = b.try_acquire(&p, t0).unwrap();
        b.record(x, Outcome::Failure, &p, t0);
        let later = t0 + Duration::from_secs(1);
        let other = {
            let b = b.clone();
            loom::thread::spawn(move || b.try_acquire(&p, later).is_some())
        };
        let mine = b.try_acquire(&p, later).is_some();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "exactly one trial");
    });
}
