//! C-POOL: the idle upstream connection policy.

use core::time::Duration;

use super::*;

fn params(per_host: usize, total: usize) -> IdleParams {
    IdleParams {
        per_host,
        total,
        timeout: Some(Duration::from_secs(90)),
        window: Duration::from_secs(10),
    }
}

fn at(s: u64) -> Instant {
    Instant::from_secs(s)
}

/// Lends `n` new connections to `host` (ids from `first`) and returns them.
fn open(pool: &mut IdlePool<u32>, host: &str, first: u32, n: u32, now: Instant) -> Vec<u32> {
    (first..first + n)
        .inspect(|_| pool.handle_opened(host, now))
        .collect()
}

#[test]
fn c_pool_idle_reuse_is_last_in_first_out() {
    let mut pool = IdlePool::<_>::new(params(8, 16));
    for c in open(&mut pool, "a", 1, 3, at(1)) {
        assert_eq!(pool.release("a", c, at(1)), None);
    }
    assert_eq!(pool.idle_count(), 3);
    assert_eq!(pool.checkout("a", at(2)), Some(3));
    assert_eq!(pool.checkout("a", at(2)), Some(2));
    assert_eq!(
        pool.checkout("b", at(2)),
        None,
        "no connection to another backend"
    );
    assert_eq!(pool.idle_count(), 1);
}

#[test]
fn c_pool_expired_idle_connections_are_never_reused() {
    let mut pool = IdlePool::<_>::new(params(8, 16));
    let cs = open(&mut pool, "a", 1, 2, at(0));
    assert_eq!(pool.release("a", cs[0], at(0)), None);
    assert_eq!(pool.release("a", cs[1], at(50)), None);
    assert_eq!(pool.poll_timeout(), Some(at(90)));
    // At 100 s the first (idle since 0) expired, the second (since 50) not.
    assert_eq!(pool.checkout("a", at(100)), Some(2));
    assert_eq!(pool.idle_count(), 0);
    let c = open(&mut pool, "a", 3, 1, at(100))[0];
    assert_eq!(pool.release("a", c, at(100)), None);
    pool.sweep(at(190), |_| true);
    assert_eq!(pool.idle_count(), 0, "the sweep expires too");
}

#[test]
fn c_pool_sweep_drops_dead_connections() {
    let mut pool = IdlePool::<_>::new(params(8, 16));
    for c in open(&mut pool, "a", 1, 4, at(0)) {
        pool.release("a", c, at(0));
    }
    pool.sweep(at(1), |c| *c % 2 == 0);
    assert_eq!(pool.idle_count(), 2);
    assert_eq!(pool.checkout("a", at(1)), Some(4));
}

#[test]
fn c_pool_caps_bound_idle_connections_without_demand() {
    // Cap 1, one connection idle; a quiet window later a request opens a second one while the
    // idle one is not reused (demand 1): the second release is refused, nothing load reused.
    let mut pool = IdlePool::<_>::new(params(1, 16));
    let cs = open(&mut pool, "a", 1, 1, at(0));
    assert_eq!(pool.release("a", cs[0], at(0)), None);
    let late = open(&mut pool, "a", 2, 1, at(30))[0];
    assert_eq!(pool.cap_for("a"), 1);
    assert_eq!(pool.release("a", late, at(30)), Some(late));
    assert_eq!(pool.idle_count(), 1);
    // The total cap (2) with three backends at demand 1 each: the summed demand (3) wins.
    let mut pool = IdlePool::<_>::new(params(1, 2));
    for (i, h) in ["a", "b", "c"].into_iter().enumerate() {
        let c = open(&mut pool, h, i as u32, 1, at(0))[0];
        assert_eq!(pool.release(h, c, at(0)), None, "{h}");
    }
    assert_eq!(pool.idle_count(), 3);
    // Off means off.
    let mut off = IdlePool::<_>::new(params(0, 16));
    let c = open(&mut off, "a", 1, 1, at(0))[0];
    assert_eq!(off.release("a", c, at(0)), Some(c));
}

/// With 128 requests at once on a backend and a configured cap of 64, every
/// connection the steady load opened is kept, and the next round opens none.
#[test]
fn c_pool_adaptive_cap_keeps_what_steady_load_reuses() {
    let mut pool = IdlePool::<_>::new(params(64, 256));
    let mut opened = 0;
    for round in 0..20u64 {
        let now = Instant::from_millis(round * 100);
        let mut lent = Vec::new();
        for _ in 0..128 {
            match pool.checkout("a", now) {
                Some(c) => lent.push(c),
                None => {
                    pool.handle_opened("a", now);
                    opened += 1;
                    lent.push(opened);
                }
            }
        }
        for c in lent {
            assert_eq!(pool.release("a", c, now), None, "round {round}");
        }
    }
    assert_eq!(opened, 128, "only the first round opened connections");
    assert_eq!(pool.cap_for("a"), 128);
    // The demand is forgotten after two quiet windows; the configured cap is back.
    let c = pool.checkout("a", at(25)).unwrap();
    pool.release("a", c, at(25));
    pool.sweep(at(36), |_| true);
    assert_eq!(pool.cap_for("a"), 64);
}

/// C-POOL: once load falls, the sweep trims the idle connections back to the
/// configured cap, oldest first, also with `idle_conn_timeout: 0s` (no expiry by age), and the
/// total cap the same way.
#[test]
fn c_pool_sweep_trims_back_to_the_cap_without_a_timeout() {
    for timeout in [None, Some(Duration::from_secs(90))] {
        let mut pool = IdlePool::<_>::new(IdleParams {
            timeout,
            ..params(4, 8)
        });
        for c in open(&mut pool, "a", 0, 10, at(0)) {
            assert_eq!(pool.release("a", c, at(0)), None);
        }
        assert_eq!(pool.idle_for("a"), 10, "a burst of 10: all kept");
        pool.sweep(at(5), |_| true);
        assert_eq!(pool.idle_for("a"), 10, "the burst is recent: kept");
        // Two quiet windows later the demand is 0: back to `per_host`, the newest kept.
        pool.sweep(at(25), |_| true);
        assert_eq!(pool.idle_for("a"), 4, "timeout {timeout:?}");
        assert_eq!(pool.idle_count(), 4);
        assert_eq!(pool.checkout("a", at(25)), Some(9));
        assert_eq!(pool.poll_timeout().is_some(), timeout.is_some());
    }
    // The total cap: three backends, 4 each within `per_host`, 8 in all once demand is gone;
    // the oldest (backend "a", released first) go.
    let mut pool = IdlePool::<_>::new(IdleParams {
        timeout: None,
        ..params(4, 8)
    });
    for (i, host) in ["a", "b", "c"].into_iter().enumerate() {
        let now = at(i as u64);
        for c in open(&mut pool, host, 10 * i as u32, 4, now) {
            assert_eq!(pool.release(host, c, now), None);
        }
    }
    assert_eq!(pool.idle_count(), 12);
    pool.sweep(at(30), |_| true);
    assert_eq!(pool.idle_count(), 8);
    assert_eq!(
        (pool.idle_for("a"), pool.idle_for("b"), pool.idle_for("c")),
        (0, 4, 4)
    );
}

#[test]
fn c_pool_closed_connections_leave_the_demand() {
    let mut pool: IdlePool<u32> = IdlePool::<_>::new(params(1, 4));
    pool.handle_opened("a", at(0));
    pool.handle_opened("a", at(0));
    pool.handle_closed("a");
    pool.handle_closed("a");
    pool.handle_closed("a"); // one too many: saturates
    pool.handle_opened("a", at(0));
    assert_eq!(pool.release("a", 9, at(0)), None);
    assert_eq!(pool.cap_for("a"), 2, "the peak of the window stays");
    pool.sweep(at(25), |_| true);
    assert_eq!(pool.cap_for("a"), 1);
}

#[test]
fn clear_drops_everything() {
    let mut pool = IdlePool::<_>::new(params(4, 4));
    let c = open(&mut pool, "a", 1, 1, at(0))[0];
    pool.release("a", c, at(0));
    pool.clear();
    assert_eq!(
        (pool.idle_count(), pool.idle_for("a"), pool.poll_timeout()),
        (0, 0, None)
    );
}

#[test]
fn a_connection_that_began_with_a_proxy_header_is_never_pooled() {
    use crate::proxy_proto::Version;
    assert!(poolable(None));
    assert!(!poolable(Some(Version::V1)));
    assert!(!poolable(Some(Version::V2)));
}

#[test]
fn c_path_7_a_connection_is_reused_only_after_a_complete_clean_exchange() {
    let clean = Ended {
        response_complete: true,
        response_reusable: true,
        request_sent: true,
        stray_bytes: false,
        send_proxy: None,
    };
    assert!(reusable_after(clean));
    for broken in [
        Ended {
            response_complete: false,
            ..clean
        },
        Ended {
            response_reusable: false,
            ..clean
        },
        // The backend answered early; the rest of the request body is still owed.
        Ended {
            request_sent: false,
            ..clean
        },
        Ended {
            stray_bytes: true,
            ..clean
        },
        Ended {
            send_proxy: Some(crate::proxy_proto::Version::V2),
            ..clean
        },
    ] {
        assert!(!reusable_after(broken), "{broken:?}");
    }
}

proptest::proptest! {
    /// C-POOL: the pool's integer span checks give the answers of the `Duration`
    /// comparisons they replace (`now.saturating_since(since) >= span`, `window * 2`).
    #[test]
    fn spans_compare_as_durations(
        now in proptest::prelude::any::<u64>(),
        since in proptest::prelude::any::<u64>(),
        secs in proptest::prelude::any::<u64>(),
        nanos in 0u32..1_000_000_000,
        small in 0u64..1_000_000_000_000,
    ) {
        let (now, since) = (Instant::from_nanos(now), Instant::from_nanos(since));
        for span in [Duration::new(secs, nanos), Duration::from_nanos(small), Duration::ZERO] {
            let elapsed = now.saturating_since(since);
            proptest::prop_assert_eq!(passed(now, since, span.as_nanos()), elapsed >= span);
            let params = IdleParams { per_host: 1, total: 1, timeout: Some(span), window: span };
            let spans = Spans::of(&params);
            proptest::prop_assert_eq!(
                passed(now, since, spans.double),
                elapsed >= span.saturating_mul(2)
            );
            proptest::prop_assert_eq!(spans.timeout, Some(span.as_nanos()));
        }
    }
}
