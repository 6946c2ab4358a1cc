use super::*;

/// C-LOAD-2: three tasks race for two slots, each holding its permit for a moment and
/// releasing it by drop; no more than two ever hold one at once and the count ends at zero.
#[test]
fn loom_bulkhead_permits() {
    loom::model(|| {
        let b = Arc::new(Bulkhead::new(Some(2)).expect("valid"));
        let holders = Arc::new(AtomicU32::new(0));
        let task = |b: Arc<Bulkhead>, holders: Arc<AtomicU32>| {
            if let Ok(p) = Bulkhead::try_acquire(&b) {
                let now_holding = holders.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now_holding <= 2, "{now_holding} permits out of 2");
                assert!(b.in_flight() <= 2);
                holders.fetch_sub(1, Ordering::SeqCst);
                drop(p);
            }
        };
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (b, holders) = (Arc::clone(&b), Arc::clone(&holders));
                loom::thread::spawn(move || task(b, holders))
            })
            .collect();
        task(Arc::clone(&b), Arc::clone(&holders));
        for h in handles {
            h.join().expect("no panic");
        }
        assert_eq!(b.in_flight(), 0);
    });
}
