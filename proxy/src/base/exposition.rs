//! The building blocks of the OpenMetrics exposition (C-OBS-1, C-OBS-2): owned metric families
//! (name, help, labelled samples), the helpers that build them, their encoding through
//! `prometheus-client`, and the `listener` label. Every module that contributes families
//! (`limits`, `tls::metrics`, `metrics` itself) builds them from here; [`crate::observe::metrics`]
//! collects them into one scrape. This module depends on no other module of the crate, so the
//! contributors do not depend on the collector (and the collector on them) in a cycle.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// A histogram read: per-bucket counts (not cumulative), their sum, and the sum of values.
#[derive(Debug, Clone)]
pub(crate) struct HistogramSnapshot {
    pub(crate) count: u64,
    pub(crate) sum: f64,
    pub(crate) buckets: Vec<(f64, u64)>,
}

pub(crate) type Labels = Vec<(&'static str, String)>;

#[derive(Debug)]
pub(crate) enum Samples {
    Counter(Vec<(Labels, u64)>),
    Gauge(Vec<(Labels, f64)>),
    Histogram(Vec<(Labels, HistogramSnapshot)>),
}

#[derive(Debug)]
pub(crate) struct FamilySnapshot {
    /// The name without the type's suffixes (`_total`) and without the unit.
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    samples: Samples,
}

pub(crate) fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

pub(crate) fn counter(
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, u64)>,
) -> FamilySnapshot {
    FamilySnapshot {
        name,
        help,
        unit: None,
        samples: Samples::Counter(samples),
    }
}

pub(crate) fn gauge(
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, f64)>,
) -> FamilySnapshot {
    FamilySnapshot {
        name,
        help,
        unit: None,
        samples: Samples::Gauge(samples),
    }
}

pub(crate) fn seconds_histogram(
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, HistogramSnapshot)>,
) -> FamilySnapshot {
    FamilySnapshot {
        name,
        help,
        unit: Some(Unit::Seconds),
        samples: Samples::Histogram(samples),
    }
}

pub(crate) fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// Encode `families` (an owned snapshot: encoding reads no request-path atomic, C-OBS-2).
pub(crate) fn encode(
    families: &[FamilySnapshot],
    mut encoder: DescriptorEncoder,
) -> Result<(), fmt::Error> {
    for f in families {
        let kind = match f.samples {
            Samples::Counter(_) => MetricType::Counter,
            Samples::Gauge(_) => MetricType::Gauge,
            Samples::Histogram(_) => MetricType::Histogram,
        };
        let mut metric = encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), kind)?;
        match &f.samples {
            Samples::Counter(s) => {
                for (l, v) in s {
                    metric
                        .encode_family(l)?
                        .encode_counter::<NoLabelSet, u64, u64>(v, None)?;
                }
            }
            Samples::Gauge(s) => {
                for (l, v) in s {
                    metric.encode_family(l)?.encode_gauge(v)?;
                }
            }
            Samples::Histogram(s) => {
                for (l, h) in s {
                    metric
                        .encode_family(l)?
                        .encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?;
                }
            }
        }
    }
    Ok(())
}

/// Which listener answered (`listener` label, C-OBS-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The data plane.
    Public,
    /// The management plane.
    Management,
}

impl Listener {
    /// The label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Listener::Public => "public",
            Listener::Management => "management",
        }
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            Listener::Public => 0,
            Listener::Management => 1,
        }
    }
}
