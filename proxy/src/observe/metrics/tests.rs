use super::*;

#[test]
fn histogram_buckets_are_le() {
    let h = AtomicHistogram::default();
    h.observe(Duration::from_millis(1));
    h.observe(Duration::from_micros(1001));
    h.observe(Duration::from_secs(100));
    let s = h.snapshot();
    assert_eq!(s.count, 3);
    assert_eq!(s.buckets[0], (0.001, 1));
    assert_eq!(s.buckets[1], (0.0025, 1));
    assert_eq!(s.buckets.last().map(|b| b.1), Some(1));
    assert!((s.sum - 100.002_001).abs() < 1e-6);
}

#[test]
fn backend_handles_survive_a_rebuild_by_id() {
    let m = Metrics::new();
    m.set_backends(["a", "b"].into_iter());
    let a = m.backend("a").expect("a");
    a.attempt(AttemptOutcome::Success, Duration::from_millis(3));
    m.set_backends(["a", "c"].into_iter());
    let again = m.backend("a").expect("a kept");
    assert!(Arc::ptr_eq(&a, &again));
    assert!(m.backend("b").is_none());
    assert!(m.backend("c").is_some());
}

#[test]
fn c_grpc_2_grpc_calls_are_counted_once_with_a_bounded_grpc_status() {
    let m = Metrics::new();
    let public = &m.requests[Listener::Public.index()];
    m.request(Listener::Public, 200, Duration::ZERO, None);
    m.request(Listener::Public, 200, Duration::ZERO, Some(0));
    m.request(Listener::Public, 504, Duration::ZERO, Some(4));
    // Out of range codes stay in range; a status without gRPC series counts in the plain one.
    m.request(Listener::Public, 200, Duration::ZERO, Some(99));
    m.request(Listener::Public, 404, Duration::ZERO, Some(5));
    assert_eq!(public.codes[200].load(Ordering::Relaxed), 1);
    assert_eq!(public.codes[404].load(Ordering::Relaxed), 1);
    assert_eq!(public.codes[504].load(Ordering::Relaxed), 0);
    let series: Vec<_> = public.grpc.series().collect();
    assert_eq!(series, [(200, 0, 1), (200, 16, 1), (504, 4, 1)]);
}
