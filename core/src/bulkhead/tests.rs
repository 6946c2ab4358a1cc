use super::*;
use proptest::prelude::*;

#[test]
fn c_load_2_overflow_is_typed_and_release_reopens() {
    let b = Arc::new(Bulkhead::new(Some(2)).expect("valid"));
    let p1 = Bulkhead::try_acquire(&b).expect("slot 1");
    let p2 = Bulkhead::try_acquire(&b).expect("slot 2");
    assert_eq!(b.in_flight(), 2);
    assert_eq!(
        Bulkhead::try_acquire(&b).unwrap_err(),
        BulkheadFull { limit: 2 }
    );
    drop(p1);
    assert_eq!(b.in_flight(), 1);
    let p3 = Bulkhead::try_acquire(&b).expect("slot freed by drop");
    drop((p2, p3));
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn c_load_2_routes_are_independent() {
    let slow = Arc::new(Bulkhead::new(Some(1)).expect("valid"));
    let fast = Arc::new(Bulkhead::new(Some(1)).expect("valid"));
    let _held = Bulkhead::try_acquire(&slow).expect("slot");
    assert!(Bulkhead::try_acquire(&slow).is_err());
    assert!(Bulkhead::try_acquire(&fast).is_ok());
}

#[test]
fn unlimited_counts_without_limiting() {
    let b = Arc::new(Bulkhead::new(None).expect("valid"));
    assert_eq!(b.limit(), None);
    let permits: Vec<_> = (0..1000)
        .map(|_| Bulkhead::try_acquire(&b).expect("unlimited"))
        .collect();
    assert_eq!(b.in_flight(), 1000);
    drop(permits);
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn zero_limit_is_rejected() {
    assert_eq!(
        Bulkhead::new(Some(0)).unwrap_err(),
        BulkheadError::ZeroLimit
    );
    assert_eq!(Bulkhead::new(Some(3)).expect("valid").limit(), Some(3));
}

proptest! {
    /// C-LOAD-2: over any sequence of acquires and drops the bulkhead never holds more than
    /// its limit, grants whenever it is below the limit, and every drop releases its slot.
    #[test]
    fn c_load_2_never_exceeds_limit_and_drop_releases(
        limit in 1u32..6,
        ops in prop::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 0..200),
    ) {
        let b = Arc::new(Bulkhead::new(Some(limit)).expect("valid"));
        let mut held = Vec::new();
        for (acquire, which) in ops {
            if acquire {
                let below = (held.len() as u32) < limit;
                match Bulkhead::try_acquire(&b) {
                    Ok(p) => { prop_assert!(below); held.push(p); }
                    Err(full) => { prop_assert!(!below); prop_assert_eq!(full.limit, limit); }
                }
            } else if !held.is_empty() {
                drop(held.swap_remove(which.index(held.len())));
            }
            prop_assert_eq!(b.in_flight(), held.len() as u32);
            prop_assert!(b.in_flight() <= limit);
        }
        drop(held);
        prop_assert_eq!(b.in_flight(), 0);
    }
}
