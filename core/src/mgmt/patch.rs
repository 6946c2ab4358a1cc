//! The body of `PATCH /api/dashboard/config` (C-MGMT-4): any of `rate_limit` (`capacity`,
//! `refill_per_second`, `failure_mode`, `dry_run`), `health_check` (every field, all dynamic, C-CONF-7) and
//! `retry` (every field of `server.retry`). Field names and value formats are the YAML file's:
//! durations are strings such as `"5s"` or `"250ms"`, so the console can send back what the
//! status document shows. An absent or `null` field keeps its value. Unknown fields are refused
//! (`400`, C-MGMT-2) by serde's `deny_unknown_fields`.

use serde::Deserialize;

use super::FieldError;
use crate::config::{Config, ProbeMode, parse_duration};

/// The whole `PATCH` body.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigPatch {
    /// `rate_limit` fields.
    pub rate_limit: Option<RatePatch>,
    /// `health_check` fields.
    pub health_check: Option<HealthPatch>,
    /// `server.retry` fields.
    pub retry: Option<RetryPatch>,
}

/// `rate_limit` fields a `PATCH` may change.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatePatch {
    /// `rate_limit.capacity`.
    pub capacity: Option<u64>,
    /// `rate_limit.refill_per_second`.
    pub refill_per_second: Option<f64>,
    /// `rate_limit.failure_mode`: fail-open, fail-closed or local-fallback.
    pub failure_mode: Option<String>,
    /// `rate_limit.dry_run` (C-RATE-8).
    pub dry_run: Option<bool>,
}

/// `health_check` fields a `PATCH` may change (all of them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthPatch {
    /// `mode`: http, https, tcp or grpc.
    pub mode: Option<String>,
    /// `path`.
    pub path: Option<String>,
    /// `grpc_service`.
    pub grpc_service: Option<String>,
    /// `interval` (duration).
    pub interval: Option<String>,
    /// `timeout` (duration).
    pub timeout: Option<String>,
    /// `failure_threshold`.
    pub failure_threshold: Option<u32>,
    /// `success_threshold`.
    pub success_threshold: Option<u32>,
    /// `max_concurrency`.
    pub max_concurrency: Option<u32>,
    /// `jitter` (duration).
    pub jitter: Option<String>,
    /// `cooldown` (duration).
    pub cooldown: Option<String>,
    /// `max_cooldown` (duration).
    pub max_cooldown: Option<String>,
    /// `half_open_requests`.
    pub half_open_requests: Option<u32>,
    /// `slow_start` (duration).
    pub slow_start: Option<String>,
    /// `slow_start_minimum_percent`.
    pub slow_start_minimum_percent: Option<u32>,
    /// `expected_statuses`.
    pub expected_statuses: Option<Vec<u16>>,
}

/// `server.retry` fields a `PATCH` may change (all of them).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPatch {
    /// `max_attempts`.
    pub max_attempts: Option<u32>,
    /// `per_try_timeout` (duration).
    pub per_try_timeout: Option<String>,
    /// `body_limit`.
    pub body_limit: Option<u64>,
    /// `methods`.
    pub methods: Option<Vec<String>>,
    /// `statuses`.
    pub statuses: Option<Vec<u16>>,
    /// `budget_capacity`.
    pub budget_capacity: Option<u64>,
    /// `budget_refill_per_second`.
    pub budget_refill_per_second: Option<f64>,
}

/// Set `*slot` from a duration string, or record why not.
fn set_duration(
    slot: &mut core::time::Duration,
    value: Option<&String>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(text) = value {
        match parse_duration(text) {
            Ok(d) => *slot = d,
            Err(message) => errors.push(FieldError {
                path: path.to_owned(),
                message,
            }),
        }
    }
}

fn set<T: Clone>(slot: &mut T, value: Option<&T>) {
    if let Some(v) = value {
        slot.clone_from(v);
    }
}

impl ConfigPatch {
    /// Write the patch into `cfg`. Returns the errors of values that cannot even be written
    /// (an unparsable duration, an unknown mode); ranges and cross-field rules are checked
    /// afterwards by [`validate_config`](crate::config::validate_config), like a reload.
    pub fn apply_to(&self, cfg: &mut Config) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if let Some(r) = &self.rate_limit {
            let c = &mut cfg.rate_limit;
            set(&mut c.capacity, r.capacity.as_ref());
            set(&mut c.refill_per_second, r.refill_per_second.as_ref());
            set(&mut c.failure_mode, r.failure_mode.as_ref());
            set(&mut c.dry_run, r.dry_run.as_ref());
        }
        if let Some(h) = &self.health_check {
            let c = &mut cfg.health_check;
            if let Some(mode) = &h.mode {
                match ProbeMode::from_name(mode) {
                    Some(m) => c.mode = m,
                    None => errors.push(FieldError {
                        path: "health_check.mode".to_owned(),
                        message: format!("mode must be {}, got {mode:?}", ProbeMode::NAMES),
                    }),
                }
            }
            set(&mut c.path, h.path.as_ref());
            set(&mut c.grpc_service, h.grpc_service.as_ref());
            let e = &mut errors;
            set_duration(
                &mut c.interval,
                h.interval.as_ref(),
                "health_check.interval",
                e,
            );
            set_duration(
                &mut c.timeout,
                h.timeout.as_ref(),
                "health_check.timeout",
                e,
            );
            set(&mut c.failure_threshold, h.failure_threshold.as_ref());
            set(&mut c.success_threshold, h.success_threshold.as_ref());
            set(&mut c.max_concurrency, h.max_concurrency.as_ref());
            set_duration(&mut c.jitter, h.jitter.as_ref(), "health_check.jitter", e);
            set_duration(
                &mut c.cooldown,
                h.cooldown.as_ref(),
                "health_check.cooldown",
                e,
            );
            set_duration(
                &mut c.max_cooldown,
                h.max_cooldown.as_ref(),
                "health_check.max_cooldown",
                e,
            );
            set(&mut c.half_open_requests, h.half_open_requests.as_ref());
            set_duration(
                &mut c.slow_start,
                h.slow_start.as_ref(),
                "health_check.slow_start",
                e,
            );
            set(
                &mut c.slow_start_minimum_percent,
                h.slow_start_minimum_percent.as_ref(),
            );
            set(&mut c.expected_statuses, h.expected_statuses.as_ref());
        }
        if let Some(r) = &self.retry {
            let c = &mut cfg.server.retry;
            set(&mut c.max_attempts, r.max_attempts.as_ref());
            set_duration(
                &mut c.per_try_timeout,
                r.per_try_timeout.as_ref(),
                "server.retry.per_try_timeout",
                &mut errors,
            );
            set(&mut c.body_limit, r.body_limit.as_ref());
            set(&mut c.methods, r.methods.as_ref());
            set(&mut c.statuses, r.statuses.as_ref());
            set(&mut c.budget_capacity, r.budget_capacity.as_ref());
            set(
                &mut c.budget_refill_per_second,
                r.budget_refill_per_second.as_ref(),
            );
        }
        errors
    }
}
