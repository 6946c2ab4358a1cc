//! Health-check settings: as configured ([`HealthSpec`]), validated ([`HealthParams`]), and why
//! they were refused ([`HealthError`]).

use core::fmt;
use core::time::Duration;

/// Errors in health-check settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthError {
    /// interval must be above zero
    ZeroInterval,
    /// timeout must be above zero
    ZeroTimeout,
    /// failure_threshold must be at least 1
    ZeroFailureThreshold,
    /// success_threshold must be at least 1
    ZeroSuccessThreshold,
    /// max_concurrency must be at least 1
    ZeroMaxConcurrency,
    /// expected_statuses must list at least one status
    NoExpectedStatuses,
    /// an expected status is outside 100..=599
    BadStatus(u16),
}

impl fmt::Display for HealthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HealthError::ZeroInterval => write!(f, "health_check.interval must be above zero"),
            HealthError::ZeroTimeout => write!(f, "health_check.timeout must be above zero"),
            HealthError::ZeroFailureThreshold => {
                write!(f, "health_check.failure_threshold must be at least 1")
            }
            HealthError::ZeroSuccessThreshold => {
                write!(f, "health_check.success_threshold must be at least 1")
            }
            HealthError::ZeroMaxConcurrency => {
                write!(f, "health_check.max_concurrency must be at least 1")
            }
            HealthError::NoExpectedStatuses => {
                write!(f, "health_check.expected_statuses must not be empty")
            }
            HealthError::BadStatus(s) => write!(
                f,
                "health_check.expected_statuses: {s} is not a status code (100..=599)"
            ),
        }
    }
}

impl std::error::Error for HealthError {}

/// Unvalidated health-check settings as configured; [`HealthParams::new`] checks them.
/// `Default` is the contract's defaults (C-HEALTH-1, C-HEALTH-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSpec {
    /// Pause between the end of one cycle and the start of the next, before jitter
    /// (default 5s).
    pub interval: Duration,
    /// Upper bound of the uniform random delay added to each pause (default 500ms); zero
    /// disables it.
    pub jitter: Duration,
    /// Time a probe may take before it counts as a failure (default 2s).
    pub timeout: Duration,
    /// Consecutive failures that make a healthy backend unhealthy (default 2).
    pub failure_threshold: u32,
    /// Consecutive successes that make an unhealthy backend healthy (default 1).
    pub success_threshold: u32,
    /// Probes in flight at once, across all backends of the schedule (default 16).
    pub max_concurrency: u32,
    /// HTTP(S) statuses that count as a success (default 200, 204).
    pub expected_statuses: Vec<u16>,
}

impl Default for HealthSpec {
    fn default() -> HealthSpec {
        HealthSpec {
            interval: Duration::from_secs(5),
            jitter: Duration::from_millis(500),
            timeout: Duration::from_secs(2),
            failure_threshold: 2,
            success_threshold: 1,
            max_concurrency: 16,
            expected_statuses: vec![200, 204],
        }
    }
}

/// Lowest status code `expected_statuses` accepts.
const STATUS_MIN: u16 = 100;
/// Highest status code `expected_statuses` accepts.
const STATUS_MAX: u16 = 599;

/// Validated health-check settings. `Copy` (the status set is a bitmap), so every machine can
/// hold its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthParams {
    interval: Duration,
    jitter: Duration,
    timeout: Duration,
    failure_threshold: u32,
    success_threshold: u32,
    max_concurrency: u32,
    /// Bit `s - 100` is set when status `s` is expected (500 statuses fit in 8 words).
    statuses: [u64; 8],
}

impl HealthParams {
    /// Checks `spec`: interval, timeout, both thresholds and max_concurrency above zero, and at
    /// least one expected status, each in 100..=599. Jitter may be zero.
    pub fn new(spec: &HealthSpec) -> Result<HealthParams, HealthError> {
        if spec.interval.is_zero() {
            return Err(HealthError::ZeroInterval);
        }
        if spec.timeout.is_zero() {
            return Err(HealthError::ZeroTimeout);
        }
        if spec.failure_threshold == 0 {
            return Err(HealthError::ZeroFailureThreshold);
        }
        if spec.success_threshold == 0 {
            return Err(HealthError::ZeroSuccessThreshold);
        }
        if spec.max_concurrency == 0 {
            return Err(HealthError::ZeroMaxConcurrency);
        }
        if spec.expected_statuses.is_empty() {
            return Err(HealthError::NoExpectedStatuses);
        }
        let mut statuses = [0u64; 8];
        for &s in &spec.expected_statuses {
            if !(STATUS_MIN..=STATUS_MAX).contains(&s) {
                return Err(HealthError::BadStatus(s));
            }
            let bit = usize::from(s - STATUS_MIN);
            statuses[bit / 64] |= 1 << (bit % 64);
        }
        Ok(HealthParams {
            interval: spec.interval,
            jitter: spec.jitter,
            timeout: spec.timeout,
            failure_threshold: spec.failure_threshold,
            success_threshold: spec.success_threshold,
            max_concurrency: spec.max_concurrency,
            statuses,
        })
    }

    /// Pause between cycles, before jitter.
    #[must_use]
    pub const fn interval(&self) -> Duration {
        self.interval
    }

    /// Upper bound of the random delay added to each pause.
    #[must_use]
    pub const fn jitter(&self) -> Duration {
        self.jitter
    }

    /// Time a probe may take before it counts as a failure.
    #[must_use]
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Consecutive failures that make a healthy backend unhealthy.
    #[must_use]
    pub const fn failure_threshold(&self) -> u32 {
        self.failure_threshold
    }

    /// Consecutive successes that make an unhealthy backend healthy.
    #[must_use]
    pub const fn success_threshold(&self) -> u32 {
        self.success_threshold
    }

    /// Probes in flight at once.
    #[must_use]
    pub const fn max_concurrency(&self) -> u32 {
        self.max_concurrency
    }

    /// Whether an HTTP(S) probe answered with `status` counts as a success (C-HEALTH-1).
    #[must_use]
    pub const fn probe_status_ok(&self, status: u16) -> bool {
        if status < STATUS_MIN || status > STATUS_MAX {
            return false;
        }
        let bit = (status - STATUS_MIN) as usize;
        self.statuses[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The expected statuses, ascending.
    pub fn expected_statuses(&self) -> impl Iterator<Item = u16> + '_ {
        (STATUS_MIN..=STATUS_MAX).filter(|&s| self.probe_status_ok(s))
    }
}

impl Default for HealthParams {
    fn default() -> HealthParams {
        // The defaults pass every check in `new` (tested in `defaults_are_the_contracts`).
        HealthParams {
            interval: Duration::from_secs(5),
            jitter: Duration::from_millis(500),
            timeout: Duration::from_secs(2),
            failure_threshold: 2,
            success_threshold: 1,
            max_concurrency: 16,
            // 200 and 204: bits 100 and 104, both in word 1 (bits 36 and 40).
            statuses: [0, (1 << 36) | (1 << 40), 0, 0, 0, 0, 0, 0],
        }
    }
}
