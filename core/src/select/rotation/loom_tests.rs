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

/// Round robin over three healthy backends, slow start off.
fn pool() -> Arc<Pool> {
    let specs: Vec<BackendSpec> = ["a", "b", "c"]
        .iter()
        .map(|id| BackendSpec::new(*id, format!("http://{id}")))
        .collect();
    let params = PoolParams {
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(
        &specs,
        PolicyKind::RoundRobin,
        params,
        None,
        Instant::ZERO,
        &mut WyRand::new(1),
    )
    .unwrap();
    for backend in pool.backends() {
        backend.set_healthy(true, Instant::ZERO);
    }
    // Walk the rotation (from its random start) until a is next, so that the first pick of
    // the concurrent part is the one that meets a down and rebuilds while the other reads.
    let ctx = PickContext { hash: None };
    let mut rng = WyRand::new(9);
    while pool.choose(&ctx, &Tried::new(), Instant::ZERO, &mut rng) != Ok(2) {}
    Arc::new(pool)
}

/// After the concurrent part: within one period the down backend's turn has come (or the
/// recheck has seen it), and from then on picks alternate strictly between the other two.
fn settles_on_b_and_c(pool: &Pool) {
    let warm: Vec<usize> = (0..3).map(|s| pick(pool, 10 + s)).collect();
    assert!(!warm.contains(&0), "{warm:?}");
    let seq: Vec<usize> = (0..4).map(|s| pick(pool, 20 + s)).collect();
    assert!(!seq.contains(&0), "{seq:?}");
    assert!(seq.windows(2).all(|w| w[0] != w[1]), "{seq:?}");
}

/// Two picks race, the first meeting a down: it rebuilds while the other reads the view (the
/// rotation's loom assertion: a published table is read whole, never before its entries are
/// written), neither waits, neither returns a, and the published sequence is then the rotation
/// of b and c.
#[test]
fn loom_rotation_concurrent_picks_notice_a_down_backend() {
    loom::model(|| {
        let pool = pool();
        pool.backends()[0].set_healthy(false, Instant::ZERO);
        let other = Arc::clone(&pool);
        let h = loom::thread::spawn(move || pick(&other, 2));
        let mine = pick(&pool, 3);
        let theirs = h.join().unwrap();
        assert!(mine != 0 && theirs != 0, "{mine} {theirs}");
        settles_on_b_and_c(&pool);
    });
}

/// a goes down while two picks run (the first of which is a's turn): whichever notices it
/// rebuilds, the table it publishes is never read half-written, and once the change has been
/// noticed the picks alternate b and c.
#[test]
fn loom_rotation_change_races_picks() {
    loom::model(|| {
        let pool = pool();
        let health = Arc::clone(&pool);
        let picker = Arc::clone(&pool);
        let h1 =
            loom::thread::spawn(move || health.backends()[0].set_healthy(false, Instant::ZERO));
        let h2 = loom::thread::spawn(move || pick(&picker, 2));
        let mine = pick(&pool, 3);
        h1.join().unwrap();
        let theirs = h2.join().unwrap();
        assert!(mine < 3 && theirs < 3);
        settles_on_b_and_c(&pool);
    });
}
