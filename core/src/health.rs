//! Active health checking (C-HEALTH-1, C-HEALTH-2, C-HEALTH-5, C-HEALTH-6): which backends to
//! probe, when, and what the answers mean.
//!
//! The adapter performs the probes (HTTP, HTTPS or TCP, C-HEALTH-1); this module decides
//! everything else, without IO:
//! - [`HealthParams`]: the validated settings, with the contract's defaults;
//! - [`Thresholds`]: one backend's healthy/unhealthy state with hysteresis (C-HEALTH-2);
//! - [`ProbeSchedule`]: the cycle machine that hands out probes, bounds how many run at once,
//!   expires the ones that overrun their timeout and spaces cycles with jitter (C-HEALTH-1,
//!   C-HEALTH-6).
//!
//! Why this shape:
//! - *Consecutive-result thresholds* rather than a sliding window or an error rate: it is what
//!   Envoy (`healthy_threshold` / `unhealthy_threshold`), HAProxy (`rise` / `fall`) and NGINX
//!   (`passes` / `fails`) do, operators know it, and a flip needs no history beyond one counter.
//! - *Cycles that never overlap, spaced `interval + uniform(0, jitter)` from the end of the
//!   previous one*: Envoy's `interval` + `interval_jitter` (HAProxy's `spread-checks` adds
//!   random spread for the same reason). Measuring from the end means a backend that answers
//!   slowly is never probed faster than the interval, and the jitter spreads the probes of many
//!   weir instances so that they do not hit a backend in lock step.
//! - *A bounded number of probes in flight, each with its own deadline*: a fixed worker budget,
//!   so a large pool never opens hundreds of probe connections at once. A probe that overruns
//!   its timeout counts as a failure at its deadline and frees its slot, so one slow backend
//!   delays another's probe by at most one timeout (C-HEALTH-6).
//! - Backends start unhealthy and the first cycle starts at once; the adapter opens its listeners
//!   once [`ProbeSchedule::cycles_completed`] is at least 1 (C-HEALTH-1). The schedule knows
//!   nothing of enabled/disabled: it probes every backend it is given (C-HEALTH-5).

mod params;
mod schedule;
mod thresholds;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod schedule_tests;

pub use params::{HealthError, HealthParams, HealthSpec};
pub use schedule::{HealthChange, Probe, ProbeSchedule, ProbeToken};
pub use thresholds::{Health, Thresholds};

#[cfg(test)]
mod tests;
