//! The probe schedule: which backend to probe next, and when (C-HEALTH-1, C-HEALTH-5,
//! C-HEALTH-6).

use core::time::Duration;
use std::collections::{HashMap, VecDeque};

use foldhash::quality::FixedState;

use super::{Health, HealthParams, Thresholds};
use crate::rng::Rng;
use crate::time::{Instant, duration_nanos};

/// Names one probe handed out by [`ProbeSchedule::poll_probe`]; its result is reported with it.
/// Tokens are never reused, so a late answer to an old probe cannot be taken for a newer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProbeToken(u64);

/// A probe to start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Pass back to [`ProbeSchedule::handle_result`].
    pub token: ProbeToken,
    /// Position of the backend in the list the schedule was given; [`ProbeSchedule::id`] names it.
    pub backend_index: usize,
    /// Start + timeout: past this the probe counts as failed (C-HEALTH-6). The adapter may
    /// cancel it then.
    pub deadline: Instant,
}

/// A backend's health flipped (C-HEALTH-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthChange {
    /// Position of the backend in the schedule's current list.
    pub backend_index: usize,
    /// Its health from now on.
    pub health: Health,
}

/// Where a backend's probe stands in the current cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Not handed out yet in this cycle.
    Pending,
    /// Handed out, no result yet.
    InFlight,
    /// Answered or timed out in this cycle (or no cycle is running).
    Done,
}

#[derive(Debug, Clone)]
struct Backend {
    id: Box<str>,
    thresholds: Thresholds,
    turn: Turn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between cycles; the next one starts at `due`.
    Waiting,
    /// A cycle is running: some backend is pending or in flight, or the cycle has just finished
    /// and ends at the next `handle_*` call that has an RNG for the jitter.
    Running,
}

/// The active-check cycle machine of one pool (C-HEALTH-1, C-HEALTH-5, C-HEALTH-6).
///
/// A *cycle* probes every backend of the list once, in list order, with at most
/// `max_concurrency` probes in flight. It ends with its last result or timeout; the next cycle
/// starts `interval + uniform(0..=jitter)` later, so cycles never overlap. The first cycle starts
/// at creation. Every probe has a deadline (start + `timeout`); one still unanswered when
/// [`handle_timeout`](Self::handle_timeout) runs at or after its deadline counts as a failure at
/// its deadline and frees its slot, and a result that arrives after the deadline counts as that
/// same failure; so a slow backend holds a slot for at most one timeout (C-HEALTH-6). The
/// schedule knows nothing of enabled/disabled backends and probes all of them (C-HEALTH-5).
///
/// Kinds of methods:
/// - getters (`&self`): [`cycles_completed`](Self::cycles_completed), [`due`](Self::due),
///   [`is_running`](Self::is_running),
///   [`is_healthy`](Self::is_healthy), [`health`](Self::health), [`id`](Self::id),
///   [`index_of`](Self::index_of), [`len`](Self::len), [`in_flight`](Self::in_flight),
///   [`next_cycle_start`](Self::next_cycle_start), [`last_cycle_end`](Self::last_cycle_end),
///   [`params`](Self::params);
/// - facts in: [`handle_result`](Self::handle_result), [`handle_timeout`](Self::handle_timeout);
/// - commands: [`replace_backends`](Self::replace_backends), [`set_params`](Self::set_params);
/// - actions out: [`poll_probe`](Self::poll_probe), [`poll_change`](Self::poll_change),
///   [`poll_timeout`](Self::poll_timeout).
///
/// The adapter's loop: after every event, drain `poll_probe(now)` (start each probe) and
/// `poll_change()` (publish each flip), then sleep until `poll_timeout()` or a probe result; on
/// wake-up call `handle_timeout(now, rng)` or `handle_result(token, ok, now, rng)`. Open the
/// listeners once `cycles_completed() >= 1` (C-HEALTH-1). Time that goes backwards is clamped
/// to the latest `now` seen.
#[derive(Debug, Clone)]
pub struct ProbeSchedule {
    params: HealthParams,
    backends: Vec<Backend>,
    /// Probes in flight, in the order they were handed out.
    in_flight: Vec<Probe>,
    phase: Phase,
    /// When the running cycle was due to start, or the next one is.
    due: Instant,
    /// Backends whose turn is `Pending`.
    pending: usize,
    /// No `Pending` backend sits below this index.
    cursor: usize,
    next_token: u64,
    /// Latest result, timeout or start in the running cycle: its end once nothing is left.
    last_event: Instant,
    last_end: Option<Instant>,
    cycles_completed: u64,
    /// Flips found by `handle_timeout`, for `poll_change`.
    changes: VecDeque<HealthChange>,
    /// Latest `now` seen; earlier ones are clamped to it.
    now: Instant,
}

impl ProbeSchedule {
    /// A schedule over backends `ids` (in probe order), all unhealthy, whose first cycle starts
    /// at `now` (C-HEALTH-1).
    pub fn new<I, S>(ids: I, params: HealthParams, now: Instant) -> ProbeSchedule
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let backends: Vec<Backend> = ids
            .into_iter()
            .map(|id| Backend {
                id: Box::from(id.as_ref()),
                thresholds: Thresholds::new(&params),
                turn: Turn::Done,
            })
            .collect();
        let slots = slots_for(&params, backends.len());
        let changes = VecDeque::with_capacity(backends.len());
        ProbeSchedule {
            params,
            backends,
            in_flight: Vec::with_capacity(slots),
            phase: Phase::Waiting,
            due: now,
            pending: 0,
            cursor: 0,
            next_token: 0,
            last_event: now,
            last_end: None,
            cycles_completed: 0,
            changes,
            now,
        }
    }

    /// The settings in force.
    #[must_use]
    pub const fn params(&self) -> &HealthParams {
        &self.params
    }

    /// Number of backends.
    #[must_use]
    pub fn len(&self) -> usize {
        self.backends.len()
    }

    /// Whether the schedule has no backends.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.backends.is_empty()
    }

    /// The id of backend `index`.
    #[must_use]
    pub fn id(&self, index: usize) -> Option<&str> {
        self.backends.get(index).map(|b| &*b.id)
    }

    /// The index of the first backend named `id` (a linear scan).
    #[must_use]
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.backends.iter().position(|b| &*b.id == id)
    }

    /// Health of backend `index`; `None` for an unknown index.
    #[must_use]
    pub fn health(&self, index: usize) -> Option<Health> {
        self.backends.get(index).map(|b| b.thresholds.health())
    }

    /// Whether backend `index` is healthy; an unknown index is not.
    #[must_use]
    pub fn is_healthy(&self, index: usize) -> bool {
        self.health(index).is_some_and(Health::is_healthy)
    }

    /// Cycles finished so far; the adapter opens its listeners once this is at least 1
    /// (C-HEALTH-1).
    #[must_use]
    pub const fn cycles_completed(&self) -> u64 {
        self.cycles_completed
    }

    /// Probes handed out and not yet answered or timed out, oldest first.
    #[must_use]
    pub fn in_flight(&self) -> &[Probe] {
        &self.in_flight
    }

    /// When the next cycle starts, if none is running.
    #[must_use]
    pub const fn next_cycle_start(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting => Some(self.due),
            Phase::Running => None,
        }
    }

    /// When the running cycle was due to start (it began at the first call at or after this),
    /// or, between cycles, when the next one is: creation time for the first cycle, then the
    /// previous end + interval + jitter.
    #[must_use]
    pub const fn due(&self) -> Instant {
        self.due
    }

    /// Whether a cycle is running.
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// When the latest completed cycle ended (its last result or timeout).
    #[must_use]
    pub const fn last_cycle_end(&self) -> Option<Instant> {
        self.last_end
    }

    /// The next instant at which [`handle_timeout`](Self::handle_timeout) has work: the start
    /// of the next cycle, or the earliest deadline of a probe in flight. `None` while a cycle
    /// runs with nothing in flight: then [`poll_probe`](Self::poll_probe) has probes to hand out.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting => Some(self.due),
            Phase::Running if self.pending == 0 && self.in_flight.is_empty() => {
                // Finished (backends removed by a reload): due now, to end it with jitter.
                Some(self.last_event)
            }
            Phase::Running => self.in_flight.iter().map(|p| p.deadline).min(),
        }
    }

    /// The next probe to start now: `None` when no cycle is due, every backend of the cycle has
    /// been handed out, or `max_concurrency` probes are in flight (C-HEALTH-1, C-HEALTH-6).
    /// Starts a cycle that is due.
    pub fn poll_probe(&mut self, now: Instant) -> Option<Probe> {
        let now = self.clamp(now);
        if !self.backends.is_empty() {
            self.start_cycle_if_due(now);
        }
        if self.phase != Phase::Running
            || self.pending == 0
            || self.in_flight.len() >= self.params.max_concurrency() as usize
        {
            return None;
        }
        let offset = self.backends[self.cursor..]
            .iter()
            .position(|b| b.turn == Turn::Pending)?;
        let index = self.cursor + offset;
        self.backends[index].turn = Turn::InFlight;
        self.pending -= 1;
        self.cursor = index + 1;
        let probe = Probe {
            token: ProbeToken(self.next_token),
            backend_index: index,
            deadline: now + self.params.timeout(),
        };
        self.next_token = self.next_token.wrapping_add(1);
        self.in_flight.push(probe);
        Some(probe)
    }

    /// The next health flip found by [`handle_timeout`](Self::handle_timeout), oldest first.
    pub fn poll_change(&mut self) -> Option<HealthChange> {
        self.changes.pop_front()
    }

    /// The result of probe `token` (`ok` = success). Returns the flip it causes, if any
    /// (C-HEALTH-2). A result after the probe's deadline counts as a failure (the probe did not
    /// answer in time, C-HEALTH-6); a result for a probe already timed out or answered, or
    /// forgotten by a reload, is ignored. Ends the cycle when this was its last probe.
    pub fn handle_result(
        &mut self,
        token: ProbeToken,
        ok: bool,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Option<HealthChange> {
        let now = self.clamp(now);
        let pos = self.in_flight.iter().position(|p| p.token == token)?;
        let probe = self.in_flight.remove(pos);
        let (ok, at) = if now > probe.deadline {
            (false, probe.deadline)
        } else {
            (ok, now)
        };
        let change = self.record(probe.backend_index, ok, at);
        self.end_cycle_if_done(rng);
        change
    }

    /// Expires the probes whose deadline has passed (each counts as a failure at its deadline;
    /// flips go to [`poll_change`](Self::poll_change)), ends a finished cycle, and starts a due
    /// one. Early calls do nothing.
    pub fn handle_timeout(&mut self, now: Instant, rng: &mut dyn Rng) {
        let now = self.clamp(now);
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].deadline <= now {
                let probe = self.in_flight.remove(i);
                if let Some(change) = self.record(probe.backend_index, false, probe.deadline) {
                    self.changes.push_back(change);
                }
            } else {
                i += 1;
            }
        }
        self.end_cycle_if_done(rng);
        self.start_cycle_if_due(now);
        // A cycle over no backends ends where it starts.
        self.end_cycle_if_done(rng);
    }

    /// Takes a new backend list (a reload). Backends whose id is kept keep their health,
    /// counters and place in the running cycle; new ones start unhealthy and, if a cycle is
    /// running, are probed in it; removed ones are dropped with their probes in flight and
    /// unpolled flips. Duplicate ids are matched in order. Indices refer to the new list.
    pub fn replace_backends<I, S>(&mut self, ids: I, now: Instant)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let now = self.clamp(now);
        let running = self.phase == Phase::Running;
        let old = core::mem::take(&mut self.backends);
        let mut by_id: HashMap<&str, Vec<usize>, FixedState> =
            HashMap::with_capacity_and_hasher(old.len(), FixedState::with_seed(0));
        for (i, b) in old.iter().enumerate().rev() {
            by_id.entry(&*b.id).or_default().push(i);
        }
        let mut new_index = vec![None; old.len()];
        for id in ids {
            let id = id.as_ref();
            let kept = by_id.get_mut(id).and_then(Vec::pop);
            let backend = match kept {
                Some(i) => {
                    new_index[i] = Some(self.backends.len());
                    Backend {
                        id: old[i].id.clone(),
                        ..old[i]
                    }
                }
                None => Backend {
                    id: Box::from(id),
                    thresholds: Thresholds::new(&self.params),
                    turn: if running { Turn::Pending } else { Turn::Done },
                },
            };
            self.backends.push(backend);
        }
        let remap = |i: usize| new_index.get(i).copied().flatten();
        self.in_flight.retain_mut(|p| match remap(p.backend_index) {
            Some(n) => {
                p.backend_index = n;
                true
            }
            None => false,
        });
        self.changes.retain_mut(|c| match remap(c.backend_index) {
            Some(n) => {
                c.backend_index = n;
                true
            }
            None => false,
        });
        self.pending = self
            .backends
            .iter()
            .filter(|b| b.turn == Turn::Pending)
            .count();
        self.cursor = 0;
        if running {
            self.last_event = self.last_event.max(now);
        }
        let slots = slots_for(&self.params, self.backends.len());
        self.in_flight
            .reserve(slots.saturating_sub(self.in_flight.len()));
    }

    /// Takes new settings (a reload). Health and counters are kept; probes in flight keep their
    /// deadlines and the next cycle keeps its start; the new timeout, concurrency and interval
    /// apply from the next probe and the next cycle end.
    pub fn set_params(&mut self, params: HealthParams) {
        self.params = params;
        for b in &mut self.backends {
            b.thresholds.set_params(&params);
        }
        let slots = slots_for(&params, self.backends.len());
        self.in_flight
            .reserve(slots.saturating_sub(self.in_flight.len()));
    }

    fn clamp(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    fn start_cycle_if_due(&mut self, now: Instant) {
        if self.phase != Phase::Waiting || now < self.due {
            return;
        }
        self.phase = Phase::Running;
        for b in &mut self.backends {
            b.turn = Turn::Pending;
        }
        self.pending = self.backends.len();
        self.cursor = 0;
        self.last_event = now;
    }

    /// Counts one result of backend `index`'s probe, which happened at `at`.
    fn record(&mut self, index: usize, ok: bool, at: Instant) -> Option<HealthChange> {
        self.last_event = self.last_event.max(at);
        let backend = self.backends.get_mut(index)?;
        backend.turn = Turn::Done;
        let health = backend.thresholds.handle_result(ok)?;
        Some(HealthChange {
            backend_index: index,
            health,
        })
    }

    fn end_cycle_if_done(&mut self, rng: &mut dyn Rng) {
        if self.phase != Phase::Running || self.pending != 0 || !self.in_flight.is_empty() {
            return;
        }
        let end = self.last_event;
        self.due = end + self.params.interval() + self.draw_jitter(rng);
        self.phase = Phase::Waiting;
        self.last_end = Some(end);
        self.cycles_completed += 1;
    }

    /// Uniform in `0..=jitter`; draws nothing when jitter is zero.
    fn draw_jitter(&self, rng: &mut dyn Rng) -> Duration {
        let nanos = match duration_nanos(self.params.jitter()) {
            0 => 0,
            u64::MAX => rng.next_u64(),
            j => rng.below(j + 1),
        };
        Duration::from_nanos(nanos)
    }
}

/// Slots to reserve for probes in flight: no more than there are backends, whatever the limit.
fn slots_for(params: &HealthParams, backends: usize) -> usize {
    backends.min(params.max_concurrency() as usize)
}
