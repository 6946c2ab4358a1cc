use super::*;

/// Three threads race for two slots on one backend while it is being drained: never more
/// than two slots are held at once, and every slot is returned (no leak).
#[test]
fn loom_slot_reservation_never_over_admits_or_leaks() {
    loom::model(|| {
        let p = PoolParams {
            max_concurrent_requests: 2,
            ..PoolParams::default()
        };
        let t = Instant::from_secs(1);
        let b = Arc::new(Backend::new(&BackendSpec::new("a", "http://a"), t));
        b.set_healthy(true, t);
        let peak = Arc::new(AtomicU32::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (b, peak) = (b.clone(), peak.clone());
                loom::thread::spawn(move || {
                    if let Ok(slot) = Backend::try_reserve(&b, &p, t, false) {
                        peak.fetch_max(b.in_flight(), Ordering::AcqRel);
                        drop(slot);
                    }
                })
            })
            .collect();
        let mine = Backend::try_reserve(&b, &p, t, false);
        b.start_drain(t);
        assert!(b.in_flight() <= 2);
        drop(mine);
        for h in handles {
            h.join().unwrap();
        }
        assert!(peak.load(Ordering::Acquire) <= 2);
        assert_eq!(b.in_flight(), 0, "a slot leaked");
        assert_eq!(b.availability(&p, t), Availability::Draining);
    });
}
