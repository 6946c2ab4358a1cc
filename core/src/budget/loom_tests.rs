use super::*;
use crate::sync::AtomicUsize;

/// C-RETRY-7: three threads withdraw at one instant from a budget of 2: exactly two succeed,
/// the budget ends empty, and no thread ever sees it below 0 or above capacity.
#[test]
fn loom_budget_never_overdrawn() {
    loom::model(|| {
        let budget = Arc::new(RetryBudget::new(BucketParams::new(2, 1.0).unwrap()));
        let granted = Arc::new(AtomicUsize::new(0));
        let now = Instant::from_secs(1);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let budget = Arc::clone(&budget);
                let granted = Arc::clone(&granted);
                loom::thread::spawn(move || {
                    if budget.try_withdraw(now) {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                    let held = budget.tokens_milli(now);
                    assert!(held <= 2000, "held {held}");
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(granted.load(Ordering::Relaxed), 2);
        assert_eq!(budget.tokens_milli(now), 0);
    });
}

/// C-RETRY-7 with C-CONF-7: a reload racing withdrawals through the old handle counts every
/// token once: with 2 tokens and 3 withdrawals (two via the old handle, one via the new),
/// exactly 2 succeed in every interleaving.
#[test]
fn loom_budget_reload_hands_over_exactly() {
    loom::model(|| {
        let old = Arc::new(RetryBudget::new(BucketParams::new(2, 1.0).unwrap()));
        let now = Instant::from_secs(1);
        let stale = {
            let old = Arc::clone(&old);
            loom::thread::spawn(move || {
                usize::from(old.try_withdraw(now)) + usize::from(old.try_withdraw(now))
            })
        };
        let next = old.reload(BucketParams::new(2, 1.0).unwrap(), now);
        let fresh = usize::from(next.try_withdraw(now));
        let total = stale.join().unwrap() + fresh;
        assert_eq!(total, 2);
        assert_eq!(next.tokens_milli(now), 0);
        assert_eq!(old.tokens_milli(now), 0);
    });
}
