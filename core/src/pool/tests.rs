use super::*;
use crate::backend::Backend;
use crate::select::{MAX_TRIED, Tried};

#[test]
fn c_conf_6_carry_over_keeps_state_when_id_and_url_are_unchanged() {
    let p = PoolParams::default();
    let t = Instant::from_secs(1);
    let a = BackendSpec::new("a", "http://a");
    let b = BackendSpec::new("b", "http://b");
    let first = carry_over(&[a.clone(), b.clone()], &[], &p, t).unwrap();
    first[0].set_healthy(true, t);
    let held = Backend::try_reserve(&first[0], &p, t, false).unwrap();
    first[1].start_drain(t);
    let moved = BackendSpec::new("b", "http://b2");
    let mut disabled_a = a.clone();
    disabled_a.disabled = true;
    let second = carry_over(&[disabled_a, moved], &first, &p, t).unwrap();
    assert!(Arc::ptr_eq(&first[0], &second[0]));
    assert_eq!(second[0].in_flight(), 1, "in-flight survives the swap");
    assert!(!second[0].is_enabled(), "declarative disabled wins");
    assert!(
        !Arc::ptr_eq(&first[1], &second[1]),
        "a new url is a new backend"
    );
    assert!(!second[1].is_healthy());
    drop(held);
    assert_eq!(second[0].in_flight(), 0);
    // A declarative enable cancels an administrative drain.
    let third = carry_over(&[a.clone(), b.clone()], &first, &p, t).unwrap();
    assert!(third[1].is_enabled() && !third[1].is_draining());
}

#[test]
fn c_pool_1_ids_are_unique_and_weights_bounded() {
    let p = PoolParams::default();
    let t = Instant::ZERO;
    let a = BackendSpec::new("a", "http://a");
    assert_eq!(
        carry_over(&[a.clone(), a.clone()], &[], &p, t).unwrap_err(),
        PoolError::DuplicateId("a".into())
    );
    let mut heavy = a.clone();
    heavy.weight = 101;
    assert!(matches!(
        carry_over(&[heavy], &[], &p, t),
        Err(PoolError::Weight(..))
    ));
    assert_eq!(
        carry_over(&[BackendSpec::new("", "http://x")], &[], &p, t).unwrap_err(),
        PoolError::EmptyId
    );
}

#[test]
fn tried_is_a_bounded_set() {
    let mut t = Tried::new();
    assert!(t.is_empty());
    for i in 0..MAX_TRIED {
        assert!(t.insert(i * 3));
    }
    assert!(t.insert(3), "already present");
    assert!(!t.insert(1000), "full");
    assert!(t.contains(21) && !t.contains(1));
    assert_eq!(t.len(), MAX_TRIED);
}
