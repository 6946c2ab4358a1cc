//! Admission families (C-LOAD-1, C-LOAD-2): the global overload gate's in-flight,
//! queued and capacity gauges, the time requests waited in its queue (measured where the
//! request engine decides it: `Metric::QueueWait`), and each route bulkhead's in-flight and
//! limit. Labels: one `route` (its prefix) per route that sets a bulkhead: bounded by the
//! configuration.

use weir_core::runtime::Runtime;

use crate::base::exposition::seconds_histogram;
use crate::base::exposition::{FamilySnapshot, gauge, labels};
use crate::observe::metrics::AtomicHistogram;
use crate::services::state::ProxyState;

fn one(v: f64) -> Vec<(crate::base::exposition::Labels, f64)> {
    vec![(Vec::new(), v)]
}

/// The admission families, read now; `queue_wait` is the process's queue-wait histogram.
pub(super) fn families(
    proxy_state: &ProxyState,
    rt: &Runtime,
    queue_wait: &AtomicHistogram,
    out: &mut Vec<FamilySnapshot>,
) {
    let gate = proxy_state.data_plane.admission.gate();
    out.push(gauge(
        "load_balancer_inflight_requests",
        "Data-plane requests inside the global overload gate now.",
        one(f64::from(gate.in_flight())),
    ));
    out.push(gauge(
        "load_balancer_queued_requests",
        "Data-plane requests waiting at the global overload gate now.",
        one(f64::from(gate.queued())),
    ));
    let params = gate.params();
    out.push(gauge(
        "load_balancer_overload_capacity_requests",
        "Requests the global overload gate lets in at once (server.overload.max_concurrent_requests).",
        one(f64::from(params.max_concurrent_requests())),
    ));
    out.push(gauge(
        "load_balancer_overload_queue_capacity_requests",
        "Requests that may wait at the global overload gate (server.overload.max_queue).",
        one(f64::from(params.max_queue())),
    ));
    out.push(seconds_histogram(
        "load_balancer_overload_queue_wait",
        "Time requests waited in the global overload gate's queue, whether they were then admitted, timed out or left (requests admitted at once are not observed).",
        vec![(Vec::new(), queue_wait.snapshot())],
    ));
    let (mut inflight, mut limit) = (Vec::new(), Vec::new());
    for (i, route) in rt.config().routes.iter().enumerate() {
        let Some(b) = rt.bulkhead(i) else {
            continue;
        };
        let Some(max) = b.limit() else {
            continue;
        };
        let l = labels([("route", route.prefix.as_str())]);
        inflight.push((l.clone(), f64::from(b.in_flight())));
        limit.push((l, f64::from(max)));
    }
    out.push(gauge(
        "load_balancer_route_inflight_requests",
        "Requests holding a permit of the route's bulkhead now, by route prefix (routes with max_concurrent_requests only).",
        inflight,
    ));
    out.push(gauge(
        "load_balancer_route_capacity_requests",
        "The route bulkhead's limit (routes[].max_concurrent_requests), by route prefix.",
        limit,
    ));
}
