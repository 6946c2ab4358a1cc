use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use http::{HeaderMap, Method};
use weir_core::admission::Gate;
use weir_core::config::{MapSecrets, load};
use weir_core::exchange::{BodyInfo, Head, Input, Output, Send, Services};
use weir_core::rate::{LocalStore, LocalStoreParams, StorageKind, StoreCircuit};
use weir_core::runtime::Runtime;
use weir_core::{Instant, WyRand};

use super::{Bound, Snapshot};
use crate::observe::metrics::{AttemptOutcome, Metrics};

const TWO: &str = "
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";

fn runtime(yaml: &str, previous: Option<&Runtime>) -> Arc<Runtime> {
    let cfg = load(yaml, &MapSecrets::new()).expect("valid test config");
    let rt = Runtime::build(cfg, previous, Instant::ZERO, &mut WyRand::new(3)).expect("runtime");
    for (_, b) in rt.backends() {
        b.set_healthy(true, Instant::ZERO);
    }
    Arc::new(rt)
}

/// Publish `yaml` after `previous` the way `reload::publish` does.
fn publish(yaml: &str, previous: &Snapshot, metrics: &Metrics) -> Snapshot {
    let next = runtime(yaml, Some(previous.core()));
    metrics.set_backends(next.backend_ids());
    Snapshot::build(next, metrics, Some(previous))
}

fn first(yaml: &str, metrics: &Metrics) -> Snapshot {
    let core = runtime(yaml, None);
    metrics.set_backends(core.backend_ids());
    Snapshot::build(core, metrics, None)
}

fn services(rt: &Runtime) -> Arc<Services> {
    let local = LocalStore::new(
        LocalStoreParams {
            shards: 2,
            max_buckets: 64,
        },
        9,
    )
    .expect("local store");
    Arc::new(Services::new(
        Arc::new(Gate::new(rt.config().gate)),
        StorageKind::Local,
        Arc::new(local),
        Arc::new(StoreCircuit::new(std::time::Duration::from_millis(200))),
    ))
}

fn next_send(x: &mut Bound) -> Option<Send> {
    let mut send = None;
    while let Some(out) = x.poll_output() {
        if let Output::Send(s) = out {
            send = Some(s);
        }
    }
    send
}

#[test]
fn handles_are_indexed_like_the_core_snapshot() {
    let metrics = Metrics::new();
    let snap = first(TWO, &metrics);
    let pool = snap.core().pool(0).expect("pool");
    for (i, b) in pool.backends().iter().enumerate() {
        let h = snap.backend(0, i).expect("handles");
        assert_eq!(h.metrics.id(), b.id());
        let t = h.target.as_ref().expect("target");
        assert_eq!((t.id(), t.url()), (b.id(), b.url()));
    }
    assert!(snap.backend(0, pool.backends().len()).is_none());
    assert!(snap.backend(1, 0).is_none());
}

/// A reload that keeps a backend keeps its handles (the metrics counters
/// continue, the target that keys its idle connections is the same); a changed URL gets a new
/// target and keeps the metrics (same id); a new backend starts at zero.
#[test]
fn c_conf_4_a_reload_keeps_the_handles_of_a_kept_backend() {
    let metrics = Metrics::new();
    let before = first(TWO, &metrics);
    let a = before.backend(0, 0).expect("a");
    let b = before.backend(0, 1).expect("b");
    a.metrics
        .attempt(AttemptOutcome::Success, std::time::Duration::ZERO);
    let next = TWO
        .replace("http://10.0.0.2:80", "http://10.0.0.9:80")
        .replace(
            "backends:\n",
            "backends:\n  - id: c\n    url: http://10.0.0.3:80\n",
        );
    let after = publish(&next, &before, &metrics);
    let (c2, a2, b2) = (
        after.backend(0, 0).expect("c"),
        after.backend(0, 1).expect("a"),
        after.backend(0, 2).expect("b"),
    );
    assert_eq!(c2.metrics.id(), "c");
    assert!(
        Arc::ptr_eq(&a.metrics, &a2.metrics),
        "a's counters continue"
    );
    assert!(Arc::ptr_eq(
        a.target.as_ref().expect("a"),
        a2.target.as_ref().expect("a")
    ));
    assert_eq!(a2.metrics.attempts(AttemptOutcome::Success), 1);
    assert!(
        Arc::ptr_eq(&b.metrics, &b2.metrics),
        "same id, same counters"
    );
    let b2t = b2.target.as_ref().expect("b");
    assert!(!Arc::ptr_eq(b.target.as_ref().expect("b"), b2t));
    assert_eq!(b2t.url(), "http://10.0.0.9:80");
    assert_eq!(c2.metrics.attempts(AttemptOutcome::Success), 0);
}

/// C-POOL-2: a request created before a reload sends every attempt through the snapshot it
/// was created from, though a newer one is published meanwhile.
#[test]
fn c_pool_2_a_request_in_flight_across_a_reload_keeps_its_snapshot() {
    let metrics = Metrics::new();
    let before = Arc::new(first(TWO, &metrics));
    let headers = HeaderMap::new();
    let head = Head {
        method: &Method::GET,
        path: "/x",
        target: "/x",
        headers: &headers,
        peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
        tls: false,
        body: BodyInfo::Empty,
        authority: None,
    };
    let mut rng = WyRand::new(5);
    let services = services(before.core());
    let mut x = Bound::new(
        Arc::clone(&before),
        services,
        &head,
        Instant::ZERO,
        &mut rng,
    );
    let send = next_send(&mut x).expect("first attempt");
    let next = TWO
        .replace("http://10.0.0.1:80", "http://10.0.1.1:80")
        .replace("http://10.0.0.2:80", "http://10.0.1.2:80");
    let after = publish(&next, &before, &metrics);
    assert!(Arc::ptr_eq(x.snapshot(), &before));
    assert!(Arc::ptr_eq(x.runtime(), before.core()));
    let mut sends = vec![send];
    x.handle_input(
        Input::ResponseHead { status: 503 },
        Instant::from_millis(1),
        &mut rng,
    );
    sends.extend(next_send(&mut x));
    assert_eq!(sends.len(), 2, "the 503 is retried");
    for s in sends {
        let url = x
            .handles(s.backend)
            .and_then(|h| h.target.as_ref())
            .expect("target");
        assert!(
            url.url().starts_with("http://10.0.0."),
            "old snapshot: {}",
            url.url()
        );
    }
    assert!(after.backend(0, 0).is_some());
}
