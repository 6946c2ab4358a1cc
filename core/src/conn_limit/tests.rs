use super::*;

use proptest::prelude::*;

fn reserve(gate: u64) -> FdReserve {
    FdReserve {
        fixed: 72,
        management: 64,
        probes: 16,
        store: 0,
        idle_upstream: 256,
        gate,
    }
}

#[test]
fn high_limit_reserves_for_every_request_in_flight() {
    let r = reserve(2048);
    let b = budget(1 << 20, &r, None);
    assert_eq!(b.max_connections, (1 << 20) - r.total());
    assert!(b.covers_gate && b.covers_base && !b.configured);
}

#[test]
fn low_limit_splits_what_is_left_evenly() {
    // 1024 - 408 = 616 left; 616 - 2048 < 308: half for clients, half for their upstreams.
    let b = budget(1024, &reserve(2048), None);
    assert_eq!(b.max_connections, 308);
    assert!(!b.covers_gate && b.covers_base);
}

#[test]
fn a_limit_below_the_reserve_still_accepts_one() {
    let b = budget(100, &reserve(2048), None);
    assert_eq!(b.max_connections, 1);
    assert!(!b.covers_base);
}

#[test]
fn configured_cap_is_kept_and_judged() {
    let b = budget(20_000, &reserve(2048), Some(200));
    assert_eq!(b.max_connections, 200);
    assert!(b.configured && b.covers_gate);
    let too_many = budget(20_000, &reserve(2048), Some(19_900));
    assert_eq!(too_many.max_connections, 19_900);
    assert!(!too_many.covers_base);
}

proptest! {
    /// The derived cap never eats into the base reserve when the limit can hold it, and covers
    /// one upstream connection per client connection (HTTP/1) up to the gate.
    #[test]
    fn derived_cap_leaves_the_reserve(limit in 0u64..4_000_000, gate in 1u64..100_000) {
        let r = reserve(gate);
        let b = budget(limit, &r, None);
        prop_assert!(b.max_connections >= 1);
        if limit >= r.base() + 2 {
            let upstream = b.max_connections.min(gate);
            prop_assert!(b.max_connections + upstream + r.base() <= limit);
            prop_assert!(b.covers_base);
        }
        if limit >= r.total() * 2 {
            prop_assert!(b.covers_gate);
        }
    }
}
