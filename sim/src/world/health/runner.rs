//! The pools and probe schedules the world holds ([`PoolSlot`], [`Runner`]): the world's state
//! names them; the parent module runs them.

use core::time::Duration;

use weir_core::health::ProbeSchedule;

/// One published pool: its current snapshot and the schedule that checks it.
#[derive(Debug, Clone, Copy)]
pub(in crate::world) struct PoolSlot {
    pub snapshot: usize,
    pub runner: u64,
}

/// A pending warm-up: publish into `pool` once the first cycle found a healthy backend.
#[derive(Debug, Clone, Copy)]
pub(super) struct Warmup {
    pub pool: usize,
    pub decommission_after: Option<Duration>,
}

/// A probe schedule and the snapshot whose backends it checks.
#[derive(Debug)]
pub(in crate::world) struct Runner {
    pub schedule: ProbeSchedule,
    pub snapshot: usize,
    pub(super) timer: Option<weir_core::Instant>,
    pub(super) timer_gen: u64,
    pub(super) warmup: Option<Warmup>,
}
