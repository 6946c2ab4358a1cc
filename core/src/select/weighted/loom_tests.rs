use crate::pool::{BackendSpec, Pool, PoolParams, Tried};
use crate::rng::WyRand;
use crate::select::{PickContext, PolicyKind, Selection};
use crate::slow_start::SlowStart;
use crate::sync::Arc;
use crate::time::Instant;

fn pick(pool: &Pool, seed: u64) -> usize {
    let ctx = PickContext { hash: None };
    match pool.select(&ctx, &Tried::new(), Instant::ZERO, &mut WyRand::new(seed)) {
        Selection::Selected { index, .. } => index,
        Selection::Unavailable(why) => panic!("{why:?}"),
    }
}

/// Two threads pick concurrently on the one cursor: three picks cover exactly one period
/// of the smooth sequence for weights 2, 1 (C-POOL-4), so no position is lost or repeated.
#[test]
fn loom_weighted_concurrent_picks_walk_one_period() {
    loom::model(|| {
        let mut a = BackendSpec::new("a", "http://a");
        a.weight = 2;
        let b = BackendSpec::new("b", "http://b");
        let params = PoolParams {
            slow_start: SlowStart::off(),
            ..PoolParams::default()
        };
        let pool = Pool::new(
            &[a, b],
            PolicyKind::WeightedRoundRobin,
            params,
            None,
            Instant::ZERO,
            &mut WyRand::new(1),
        )
        .unwrap();
        for backend in pool.backends() {
            backend.set_healthy(true, Instant::ZERO);
        }
        let pool = Arc::new(pool);
        let other = Arc::clone(&pool);
        let h = loom::thread::spawn(move || pick(&other, 2));
        let mine = [pick(&pool, 3), pick(&pool, 4)];
        let theirs = h.join().unwrap();
        let on_a = mine.iter().chain([&theirs]).filter(|&&i| i == 0).count();
        assert_eq!(on_a, 2, "one period of a a b: {mine:?} {theirs}");
    });
}
