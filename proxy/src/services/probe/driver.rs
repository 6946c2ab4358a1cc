//! The health driver: a task that runs weir-core's [`ProbeSchedule`] over real probes
//! (C-HEALTH-1, C-HEALTH-2, C-HEALTH-5, C-HEALTH-6).

use core::fmt;
use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;

use std::task::Poll;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use rustls::ClientConfig;
use weir_core::WyRand;
use weir_core::health::{HealthParams, ProbeSchedule, ProbeToken};

use super::exec::probe_until;
use super::target::ProbeTarget;
use crate::base::clock::Clock;
use crate::base::rt::{self, JoinError, JoinHandle, watch};

/// The flip callback: `(backend_index, healthy, now)`, with `backend_index` a position in the
/// target list most recently given to the driver. The data plane calls `Backend::set_healthy`.
pub type OnChange = Box<dyn FnMut(usize, bool, weir_core::Instant) + Send>;

/// The driver task has ended (shut down, or its handle's channel closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverStopped;

impl fmt::Display for DriverStopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the health driver has stopped")
    }
}

impl std::error::Error for DriverStopped {}

/// How the driver performs one probe: target, expected statuses, deadline → success. The real
/// one is [`probe_until`]; tests put in scripted backends.
pub type ProbeFn = Arc<
    dyn Fn(
            Arc<ProbeTarget>,
            HealthParams,
            std::time::Instant,
        ) -> Pin<Box<dyn Future<Output = bool> + Send>>
        + Send
        + Sync,
>;

enum Command {
    Reload {
        targets: Vec<ProbeTarget>,
        params: HealthParams,
        on_change: OnChange,
    },
    Shutdown,
}

/// Handle of the health-check task (C-HEALTH-1).
///
/// The task owns a [`ProbeSchedule`] over the targets it was given and loops: start every probe
/// the schedule hands out (each a task bounded by the probe's deadline; the schedule never
/// hands out more than `max_concurrency` at once), apply every flip through the callback, publish
/// the number of completed cycles, then sleep until the schedule's next deadline, a probe result
/// or a command. It probes every target it is given, enabled or not (C-HEALTH-5): pass disabled
/// backends too. A probe that overruns its deadline is a failure at the deadline and its task
/// ends there, so a hung backend holds one slot for one timeout (C-HEALTH-6).
///
/// Flips are applied before the cycle count that includes them is published, so once
/// [`first_cycle`](Self::first_cycle) resolves every backend's first verdict is in place and the
/// listeners may open (C-HEALTH-1).
///
/// Dropping the handle stops the task too (its command channel closes); probes in flight are
/// aborted and their sockets closed either way.
#[derive(Debug)]
pub struct HealthDriver {
    commands: async_channel::Sender<Command>,
    cycles: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Reload { targets, .. } => f
                .debug_struct("Reload")
                .field("targets", &targets.len())
                .finish_non_exhaustive(),
            Command::Shutdown => f.write_str("Shutdown"),
        }
    }
}

impl HealthDriver {
    /// Starts probing `targets` with `params` on the clock's runtime (the current thread's executor); the first cycle
    /// starts at once. `tls` is the client configuration of TLS probes
    /// ([`tls::native_client_config`](super::client_tls::native_client_config) in production), `clock`
    /// the process clock, and `on_change(backend_index, healthy, now)` is called from the task
    /// for every flip (C-HEALTH-2). The jitter's random source is seeded from OS entropy.
    pub fn spawn<F>(
        targets: Vec<ProbeTarget>,
        params: HealthParams,
        tls: Arc<ClientConfig>,
        clock: Clock,
        on_change: F,
    ) -> HealthDriver
    where
        F: FnMut(usize, bool, weir_core::Instant) + Send + 'static,
    {
        HealthDriver::spawn_observed(targets, params, tls, clock, on_change, |_, _| {})
    }

    /// [`spawn`](Self::spawn), and `on_probe(target, success)` is called once per finished
    /// probe (the `load_balancer_health_checks_total` metric, C-OBS-1).
    pub fn spawn_observed<F, P>(
        targets: Vec<ProbeTarget>,
        params: HealthParams,
        tls: Arc<ClientConfig>,
        clock: Clock,
        on_change: F,
        on_probe: P,
    ) -> HealthDriver
    where
        F: FnMut(usize, bool, weir_core::Instant) + Send + 'static,
        P: Fn(&ProbeTarget, bool) + Send + Sync + 'static,
    {
        let on_probe = Arc::new(on_probe);
        let probe: ProbeFn = Arc::new(move |target, params, deadline| {
            let tls = Arc::clone(&tls);
            let on_probe = Arc::clone(&on_probe);
            Box::pin(async move {
                let outcome = probe_until(clock.rt(), &target, &tls, &params, deadline).await;
                on_probe(&target, outcome.is_success());
                target.note_result((!outcome.is_success()).then(|| outcome.to_string()));
                if !outcome.is_success() {
                    tracing::debug!(
                        backend = target.key(),
                        url = target.url(),
                        %outcome,
                        "health probe failed"
                    );
                }
                outcome.is_success()
            })
        });
        HealthDriver::spawn_with(
            targets,
            params,
            probe,
            clock,
            entropy_seed(),
            Box::new(on_change),
        )
    }

    /// [`spawn`](Self::spawn) with the probe executor and the jitter seed given (tests script
    /// their backends through it).
    pub fn spawn_with(
        targets: Vec<ProbeTarget>,
        params: HealthParams,
        probe: ProbeFn,
        clock: Clock,
        seed: u64,
        on_change: OnChange,
    ) -> HealthDriver {
        let (commands, command_rx) = async_channel::unbounded();
        let (cycles_tx, cycles) = watch::channel(0);
        let schedule = ProbeSchedule::new(
            targets.iter().map(ProbeTarget::schedule_id),
            params,
            clock.now(),
        );
        let driver = Driver {
            schedule,
            targets: targets.into_iter().map(Arc::new).collect(),
            probe,
            clock,
            rng: WyRand::new(seed),
            on_change,
            probes: FuturesUnordered::new(),
            cycles: cycles_tx,
        };
        let task = rt::spawn_handle(clock.rt(), driver.run(command_rx));
        HealthDriver {
            commands,
            cycles,
            task,
        }
    }

    /// Resolves once the first check cycle has completed and its flips have been applied
    /// (C-HEALTH-1): open the listeners then. Errs if the driver stopped before.
    pub async fn first_cycle(&self) -> Result<(), DriverStopped> {
        let mut cycles = self.cycles.clone();
        cycles
            .wait_for(|&n| n >= 1)
            .await
            .map(|_| ())
            .map_err(|_| DriverStopped)
    }

    /// The number of completed cycles, updated after each cycle's flips are applied.
    #[must_use]
    pub fn cycles(&self) -> watch::Receiver<u64> {
        self.cycles.clone()
    }

    /// Replaces the targets, settings and callback (a reload). Backends whose key and URL are
    /// kept keep their health and counters; new ones start unhealthy and are probed in the
    /// running cycle if there is one; removed ones are forgotten with their probes in flight.
    /// `on_change` indices refer to `targets`; right after the swap the driver reports every
    /// backend's current health through it once, so a freshly built pool agrees with the
    /// schedule. The new timeout and thresholds apply from the next probe and result.
    pub fn reload<F>(
        &self,
        targets: Vec<ProbeTarget>,
        params: HealthParams,
        on_change: F,
    ) -> Result<(), DriverStopped>
    where
        F: FnMut(usize, bool, weir_core::Instant) + Send + 'static,
    {
        self.reloader().reload(targets, params, on_change)
    }

    /// A handle that can [`reload`](HealthReloader::reload) this driver from elsewhere (the
    /// management plane and SIGHUP share one), without owning it.
    #[must_use]
    pub fn reloader(&self) -> HealthReloader {
        HealthReloader {
            commands: self.commands.clone(),
        }
    }

    /// Stops the task: probes in flight are aborted (their sockets closed) and no callback runs
    /// after this returns.
    pub async fn shutdown(self) {
        let _ = self.commands.try_send(Command::Shutdown);
        // A panic in the callback ends the task early; there is nothing left to stop then.
        let _ = self.task.await;
    }
}

/// A cloneable handle that reloads a [`HealthDriver`] (see [`HealthDriver::reload`]); it does
/// not keep the driver running.
#[derive(Debug, Clone)]
pub struct HealthReloader {
    commands: async_channel::Sender<Command>,
}

impl HealthReloader {
    /// [`HealthDriver::reload`].
    pub fn reload<F>(
        &self,
        targets: Vec<ProbeTarget>,
        params: HealthParams,
        on_change: F,
    ) -> Result<(), DriverStopped>
    where
        F: FnMut(usize, bool, weir_core::Instant) + Send + 'static,
    {
        self.commands
            .try_send(Command::Reload {
                targets,
                params,
                on_change: Box::new(on_change),
            })
            .map_err(|_| DriverStopped)
    }
}

/// A seed for the jitter from the OS's entropy (std's `RandomState` keys are drawn from it).
fn entropy_seed() -> u64 {
    RandomState::new().hash_one(0x5765_6972_u64)
}

struct Driver {
    schedule: ProbeSchedule,
    /// Parallel to the schedule's backend list.
    targets: Vec<Arc<ProbeTarget>>,
    probe: ProbeFn,
    clock: Clock,
    rng: WyRand,
    on_change: OnChange,
    /// Probes in flight; dropping the set aborts them.
    probes: FuturesUnordered<JoinHandle<(ProbeToken, bool)>>,
    cycles: watch::Sender<u64>,
}

impl Driver {
    async fn run(mut self, commands: async_channel::Receiver<Command>) {
        let rt = self.clock.rt();
        loop {
            self.start_probes();
            self.apply_changes();
            self.publish_cycles();
            let mut wake = self
                .schedule
                .poll_timeout()
                .map(|t| rt.sleep_until(self.clock.deadline(t)));
            let mut command = std::pin::pin!(commands.recv());
            let probes = &mut self.probes;
            let event = std::future::poll_fn(|cx| {
                // Commands first: a shutdown is never starved by a stream of results.
                if let Poll::Ready(c) = command.as_mut().poll(cx) {
                    return Poll::Ready(Event::Command(c.ok()));
                }
                if !probes.is_empty()
                    && let Poll::Ready(Some(joined)) = probes.poll_next_unpin(cx)
                {
                    return Poll::Ready(Event::Probe(joined));
                }
                if let Some(s) = wake.as_mut()
                    && s.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Event::Wake);
                }
                Poll::Pending
            })
            .await;
            match event {
                Event::Command(Some(Command::Reload {
                    targets,
                    params,
                    on_change,
                })) => self.reload(targets, params, on_change),
                Event::Command(Some(Command::Shutdown) | None) => break,
                Event::Probe(joined) => {
                    // A probe task that panicked or was aborted has no result: the schedule
                    // times it out at its deadline.
                    if let Ok((token, ok)) = joined {
                        let now = self.clock.now();
                        if let Some(change) =
                            self.schedule.handle_result(token, ok, now, &mut self.rng)
                        {
                            self.flip(change.backend_index, change.health.is_healthy(), now);
                        }
                    }
                }
                Event::Wake => {
                    let now = self.clock.now();
                    self.schedule.handle_timeout(now, &mut self.rng);
                }
            }
        }
        // Dropping the handles cancels the probes (their sockets close).
        self.probes.clear();
    }

    /// Spawns every probe the schedule hands out now.
    fn start_probes(&mut self) {
        let now = self.clock.now();
        while let Some(p) = self.schedule.poll_probe(now) {
            let Some(target) = self.targets.get(p.backend_index) else {
                // The lists are parallel; an index outside would be a bug. The probe then times
                // out in the schedule like an unanswered one.
                continue;
            };
            let fut = (self.probe)(
                Arc::clone(target),
                *self.schedule.params(),
                self.clock.deadline(p.deadline),
            );
            let token = p.token;
            self.probes
                .push(rt::spawn_handle(self.clock.rt(), async move {
                    (token, fut.await)
                }));
        }
    }

    /// Applies the flips the schedule found on timeouts.
    fn apply_changes(&mut self) {
        if let Some(first) = self.schedule.poll_change() {
            let now = self.clock.now();
            let mut change = Some(first);
            while let Some(c) = change {
                self.flip(c.backend_index, c.health.is_healthy(), now);
                change = self.schedule.poll_change();
            }
        }
    }

    /// Logs a flip and hands it to the callback.
    fn flip(&mut self, index: usize, healthy: bool, now: weir_core::Instant) {
        if let Some(t) = self.targets.get(index) {
            crate::observe::events::health_changed(
                t.key(),
                t.url(),
                healthy,
                t.last_error().as_deref(),
            );
        }
        (self.on_change)(index, healthy, now);
    }

    fn publish_cycles(&self) {
        let n = self.schedule.cycles_completed();
        self.cycles.send_if_modified(|c| {
            let changed = *c != n;
            *c = n;
            changed
        });
    }

    fn reload(&mut self, targets: Vec<ProbeTarget>, params: HealthParams, on_change: OnChange) {
        let now = self.clock.now();
        // Params first, so that new backends start with the new thresholds.
        self.schedule.set_params(params);
        self.schedule
            .replace_backends(targets.iter().map(ProbeTarget::schedule_id), now);
        self.targets = targets.into_iter().map(Arc::new).collect();
        self.on_change = on_change;
        for i in 0..self.schedule.len() {
            (self.on_change)(i, self.schedule.is_healthy(i), now);
        }
    }
}

/// What woke the driver.
enum Event {
    Command(Option<Command>),
    Probe(Result<(ProbeToken, bool), JoinError>),
    Wake,
}
