//! Pools, active health checks, faults and reloads: the adapter's background work.
//!
//! Each published pool has a probe schedule ([`ProbeSchedule`]) over its backends in pool order;
//! the world drains `poll_probe` and `poll_change` after every call, publishes each flip with
//! `Backend::set_healthy`, and arms a timer for `poll_timeout`. A reload builds the new snapshot
//! with `Pool::new(.., previous: Some(&old), ..)` (state carried over for the same id and url,
//! C-CONF-6). When the new list keeps none of the currently healthy backends, the candidate gets
//! its own schedule and is published only after its first cycle found a healthy backend; if none
//! is, the reload is rejected and the old pool keeps serving (C-CONF-5).

use core::time::Duration;

use weir_core::flow::BodyEnd;
use weir_core::health::ProbeSchedule;
use weir_core::health::ProbeToken;
use weir_core::pool::{BackendSpec, Pool};

mod runner;

use runner::Warmup;
pub(super) use runner::{PoolSlot, Runner};

use super::{Arc, Ev, Snapshot, Stage, Tracked, World};
use crate::backend::Fault;
use crate::trace::Rec;

/// The key a backend has in a probe schedule: its id *and* url. `ProbeSchedule::replace_backends`
/// keeps the health of a kept *id*, while `Pool::new` keeps a backend's state only for the same
/// id *and* url (C-CONF-6); keyed by id alone, a backend moved to a new url would be a new,
/// unhealthy `Backend` whose schedule entry still reads healthy, so no flip would ever publish
/// its first successful probe (found by `reload_warmup` seed 4; docs/simulation.md).
fn schedule_key(id: &str, url: &str) -> String {
    format!("{id} {url}")
}

impl World<'_> {
    /// The initial pools, each with its schedule (the first cycle starts at once, C-HEALTH-1).
    pub(super) fn build_pools(&mut self) -> Result<(), String> {
        for p in 0..self.s.pools.len() {
            let ids = self.s.pools[p].backends.clone();
            let pool = self.new_pool(p, &ids, None)?;
            let snapshot = self.add_snapshot(pool);
            let runner = self.new_runner(snapshot, None);
            self.pools.push(PoolSlot { snapshot, runner });
        }
        Ok(())
    }

    fn specs(&self, sims: &[usize]) -> Vec<BackendSpec> {
        sims.iter()
            .map(|&i| {
                let b = &self.backends[i];
                BackendSpec {
                    id: b.id.clone(),
                    url: b.url.clone(),
                    weight: b.weight,
                    disabled: false,
                    send_proxy: None,
                    protocol: weir_core::backend::Protocol::Http1,
                }
            })
            .collect()
    }

    pub(super) fn new_pool(
        &mut self,
        pool: usize,
        sims: &[usize],
        previous: Option<&Pool>,
    ) -> Result<Arc<Pool>, String> {
        let specs = self.specs(sims);
        Pool::new(
            &specs,
            self.s.pools[pool].policy,
            self.pool_params,
            previous,
            self.now,
            &mut self.rng_core,
        )
        .map(Arc::new)
        .map_err(|e| e.to_string())
    }

    /// Remember a snapshot and track each of its backends (a kept backend is the same `Arc`).
    pub(super) fn add_snapshot(&mut self, pool: Arc<Pool>) -> usize {
        let mut tracked = Vec::with_capacity(pool.backends().len());
        for b in pool.backends() {
            let index = match self.tracked.iter().position(|t| Arc::ptr_eq(&t.arc, b)) {
                Some(i) => i,
                None => {
                    let sim = self
                        .backends
                        .iter()
                        .position(|s| s.id == b.id() && s.url == b.url())
                        .unwrap_or(0);
                    self.tracked.push(Tracked {
                        arc: Arc::clone(b),
                        sim,
                        slots: 0,
                        state: b.circuit_state(self.now),
                        eligible: false,
                        warm_since: self.now,
                        trial_successes: 0,
                        pushed_until: weir_core::Instant::ZERO,
                    });
                    self.tracked.len() - 1
                }
            };
            tracked.push(index);
        }
        self.snapshots.push(Snapshot { pool, tracked });
        self.snapshots.len() - 1
    }

    fn new_runner(&mut self, snapshot: usize, warmup: Option<Warmup>) -> u64 {
        let ids: Vec<String> = self.snapshots[snapshot]
            .pool
            .backends()
            .iter()
            .map(|b| schedule_key(b.id(), b.url()))
            .collect();
        let schedule = ProbeSchedule::new(ids, self.health_params, self.now);
        let rid = self.next_runner;
        self.next_runner += 1;
        self.runners.insert(
            rid,
            Runner {
                schedule,
                snapshot,
                timer: None,
                timer_gen: 0,
                warmup,
            },
        );
        rid
    }

    /// After any call on a schedule: start due probes, publish flips, re-arm the timer, and
    /// finish a warm-up or open the listeners when their first cycle is done.
    pub(super) fn drive_runner(&mut self, rid: u64) {
        let now = self.now;
        let mut probes = Vec::new();
        let mut changes = Vec::new();
        let Some(runner) = self.runners.get_mut(&rid) else {
            return;
        };
        while let Some(probe) = runner.schedule.poll_probe(now) {
            probes.push(probe);
        }
        while let Some(change) = runner.schedule.poll_change() {
            changes.push(change);
        }
        let snapshot = runner.snapshot;
        for probe in probes {
            let Some(&t) = self.snapshots[snapshot].tracked.get(probe.backend_index) else {
                continue;
            };
            let sim = self.tracked[t].sim;
            if let Some((after, ok)) = self.backends[sim].probe(&mut self.rng_backends) {
                self.schedule(
                    now + after,
                    Ev::ProbeReply {
                        runner: rid,
                        token: probe.token,
                        backend: sim,
                        ok,
                    },
                );
            }
        }
        for change in changes {
            self.health_change(snapshot, change);
        }
        self.arm_runner(rid);
        self.finish_warmup(rid);
        self.maybe_listen();
    }

    fn arm_runner(&mut self, rid: u64) {
        let Some(runner) = self.runners.get_mut(&rid) else {
            return;
        };
        let next = runner.schedule.poll_timeout();
        if next == runner.timer {
            return;
        }
        runner.timer = next;
        runner.timer_gen += 1;
        let generation = runner.timer_gen;
        if let Some(t) = next {
            self.schedule(
                t,
                Ev::HealthTimer {
                    runner: rid,
                    generation,
                },
            );
        }
    }

    fn health_change(&mut self, snapshot: usize, change: weir_core::health::HealthChange) {
        let Some(&t) = self.snapshots[snapshot].tracked.get(change.backend_index) else {
            return;
        };
        let healthy = change.health.is_healthy();
        self.tracked[t].arc.set_healthy(healthy, self.now);
        self.stats.health_flips += 1;
        let backend = self.tracked[t].sim as u32;
        self.record(Rec::Health { backend, healthy });
    }

    pub(super) fn probe_reply(&mut self, rid: u64, token: ProbeToken, backend: usize, ok: bool) {
        let now = self.now;
        let Some(runner) = self.runners.get_mut(&rid) else {
            return; // the schedule was dropped (a rejected warm-up or a replaced pool)
        };
        let snapshot = runner.snapshot;
        let change = runner
            .schedule
            .handle_result(token, ok, now, &mut self.rng_core);
        self.record(Rec::Probe {
            backend: backend as u32,
            ok,
        });
        if let Some(change) = change {
            self.health_change(snapshot, change);
        }
        self.drive_runner(rid);
    }

    pub(super) fn health_timer(&mut self, rid: u64, generation: u64) {
        let now = self.now;
        let Some(runner) = self.runners.get_mut(&rid) else {
            return;
        };
        if runner.timer_gen != generation {
            return;
        }
        runner.timer = None;
        runner.schedule.handle_timeout(now, &mut self.rng_core);
        self.drive_runner(rid);
    }

    /// Publish a warm-up whose first cycle is done, or reject it (C-CONF-5).
    fn finish_warmup(&mut self, rid: u64) {
        let Some(runner) = self.runners.get(&rid) else {
            return;
        };
        let Some(warmup) = runner.warmup else {
            return;
        };
        let snapshot = runner.snapshot;
        let any_healthy = self.snapshots[snapshot]
            .pool
            .backends()
            .iter()
            .any(|b| b.is_healthy());
        // Publish after a full cycle that found a healthy backend; give up once
        // `success_threshold` cycles (what an up backend needs to turn healthy) found none.
        let cycles = runner.schedule.cycles_completed();
        let needed = u64::from(self.health_params.success_threshold());
        if cycles < 1 || (!any_healthy && cycles < needed) {
            return;
        }
        let pool = warmup.pool as u32;
        if any_healthy {
            let old = self.pools[warmup.pool];
            self.runners.remove(&old.runner);
            if let Some(r) = self.runners.get_mut(&rid) {
                r.warmup = None;
            }
            self.pools[warmup.pool] = super::health::PoolSlot {
                snapshot,
                runner: rid,
            };
            self.publish();
            self.stats.reloads_published += 1;
            self.record(Rec::Reload {
                pool,
                step: "published",
            });
            self.decommission(old.snapshot, snapshot, warmup.decommission_after);
        } else {
            self.runners.remove(&rid);
            self.stats.reloads_rejected += 1;
            self.record(Rec::Reload {
                pool,
                step: "rejected",
            });
        }
    }

    /// Stop, `after` from now, the servers of `old` that `new` dropped.
    fn decommission(&mut self, old: usize, new: usize, after: Option<Duration>) {
        let Some(after) = after else {
            return;
        };
        let keep: Vec<usize> = self.snapshots[new]
            .tracked
            .iter()
            .map(|&t| self.tracked[t].sim)
            .collect();
        let gone: Vec<usize> = self.snapshots[old]
            .tracked
            .iter()
            .map(|&t| self.tracked[t].sim)
            .filter(|s| !keep.contains(s))
            .collect();
        for backend in gone {
            self.schedule(
                self.now + after,
                Ev::Fault {
                    backend,
                    fault: Fault::Refuse,
                },
            );
        }
    }

    /// A scheduled reload of one pool (C-CONF-4..6).
    pub(super) fn reload(&mut self, index: usize) {
        let spec = self.s.reloads[index].clone();
        let slot = self.pools[spec.pool];
        let old = Arc::clone(&self.snapshots[slot.snapshot].pool);
        let ids: Vec<String> = spec
            .backends
            .iter()
            .map(|&i| schedule_key(&self.backends[i].id, &self.backends[i].url))
            .collect();
        let kept_healthy = old.backends().iter().any(|b| {
            b.is_healthy()
                && spec
                    .backends
                    .iter()
                    .any(|&i| self.backends[i].id == b.id() && self.backends[i].url == b.url())
        });
        let pool = match self.new_pool(spec.pool, &spec.backends, Some(&old)) {
            Ok(p) => p,
            Err(e) => {
                self.fail(
                    crate::report::Invariant::ReloadNoGap,
                    format!("reload {index} failed to build: {e}"),
                );
                return;
            }
        };
        let snapshot = self.add_snapshot(pool);
        if kept_healthy {
            // Some healthy backend stays: publish now; the schedule takes the new list.
            if let Some(r) = self.runners.get_mut(&slot.runner) {
                r.schedule.replace_backends(ids, self.now);
                r.snapshot = snapshot;
            }
            self.pools[spec.pool].snapshot = snapshot;
            self.publish();
            self.stats.reloads_published += 1;
            self.record(Rec::Reload {
                pool: spec.pool as u32,
                step: "applied",
            });
            self.decommission(slot.snapshot, snapshot, spec.decommission_after);
            self.drive_runner(slot.runner);
        } else {
            // C-CONF-5: check the candidate first, publish in one switch.
            let rid = self.new_runner(
                snapshot,
                Some(Warmup {
                    pool: spec.pool,
                    decommission_after: spec.decommission_after,
                }),
            );
            self.record(Rec::Reload {
                pool: spec.pool as u32,
                step: "warmup",
            });
            self.drive_runner(rid);
        }
    }

    /// The operator drains a backend of its current pool (C-POOL-7).
    pub(super) fn drain(&mut self, backend: usize) {
        let Some(&t) = self.pools.iter().find_map(|p| {
            self.snapshots[p.snapshot]
                .tracked
                .iter()
                .find(|&&t| self.tracked[t].sim == backend)
        }) else {
            return;
        };
        self.tracked[t].arc.start_drain(self.now);
        self.record(Rec::Fault {
            backend: backend as u32,
            fault: "drain",
        });
    }

    /// A fault hits a simulated backend; a crash breaks its open connections now.
    pub(super) fn fault(&mut self, backend: usize, fault: Fault) {
        let crash = self.backends[backend].apply(fault);
        self.record(Rec::Fault {
            backend: backend as u32,
            fault: fault.as_str(),
        });
        if self.h2_fault(backend, fault) || !crash {
            return;
        }
        let conns: Vec<(usize, u32)> = self.backends[backend].conns.iter().copied().collect();
        for (req, n) in conns {
            let r = &self.requests[req];
            if r.current.is_none_or(|c| c.n != n) {
                continue;
            }
            match r.stage {
                Stage::Waiting => self.attempt_input(
                    req,
                    weir_core::exchange::Input::SendFailed(
                        weir_core::exchange::SendFailure::Transport {
                            client_body_failed: false,
                        },
                    ),
                ),
                Stage::Streaming => self.end_body(req, BodyEnd::Error),
                _ => {}
            }
        }
    }
}
