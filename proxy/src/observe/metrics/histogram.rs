//! The request path's duration histogram: atomics only (module doc of `metrics.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::base::exposition::HistogramSnapshot;

/// Upper bounds (seconds) of the duration histograms: 1 ms to 30 s, Prometheus-style steps.
pub(crate) const DURATION_BOUNDS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A histogram over [`DURATION_BOUNDS`] made of atomics: an observation is two `Relaxed` adds.
/// The count is the sum of the buckets when read, so a snapshot's count and buckets agree.
#[derive(Debug)]
pub struct AtomicHistogram {
    /// Per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; DURATION_BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        AtomicHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl AtomicHistogram {
    /// Record one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        // Prometheus buckets are `le`: a value equal to a bound belongs to that bound's bucket.
        let i = DURATION_BOUNDS.partition_point(|&b| b < secs);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<(f64, u64)> = DURATION_BOUNDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().map(|(_, n)| n).sum(),
            sum: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            buckets,
        }
    }
}
