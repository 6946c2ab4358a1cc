use super::*;
use crate::sync::Arc;

/// Two requests find the same boundary passed while a third records an attempt: exactly one
/// of them judges the interval, and the attempt's single `fetch_add` is never counted twice
/// nor split (attempts and failures stay in one word).
#[test]
fn loom_outlier_one_judge_per_boundary() {
    loom::model(|| {
        let p = OutlierParams {
            interval: Duration::from_secs(1),
            ..OutlierParams::default()
        };
        let clock = Arc::new(OutlierClock::default());
        let cell = Arc::new(OutlierCell::default());
        // The first request starts the first interval.
        assert_eq!(clock.due(&p, Instant::ZERO), None);
        let later = Instant::from_millis(1500);
        let judge = |clock: Arc<OutlierClock>, cell: Arc<OutlierCell>| {
            move || {
                clock
                    .due(&p, later)
                    .map(|_| run_interval([(&*cell, true)].into_iter(), &p, 1, later).len())
                    .map(|_| cell.peek())
            }
        };
        let t1 = loom::thread::spawn(judge(clock.clone(), cell.clone()));
        let t2 = {
            let cell = cell.clone();
            loom::thread::spawn(move || cell.record(Verdict::Failed))
        };
        let mine = judge(clock.clone(), cell.clone())();
        let theirs = t1.join().unwrap();
        t2.join().unwrap();
        assert!(mine.is_some() != theirs.is_some(), "exactly one judge");
        // Whatever the interleaving, the failure is in the counters left for the next
        // interval (both halves) or was taken by the judgment (then nothing is left).
        let (attempts, failures) = cell.peek();
        assert_eq!(attempts, failures);
        assert!(attempts <= 1);
    });
}
