//! State-machine proptests of [`ProbeSchedule`] (C-HEALTH-1, C-HEALTH-2, C-HEALTH-6): arbitrary
//! interleavings of `poll_probe`, probe results (ok or failed, on time, late or repeated), time
//! steps and `handle_timeout`, with the invariants checked after every operation against a
//! model kept by the test.

use core::time::Duration;

use proptest::prelude::*;

use super::{Health, HealthChange, HealthParams, HealthSpec, Probe, ProbeSchedule};
use crate::rng::WyRand;
use crate::time::Instant;

const T0: Instant = Instant::from_secs(1);

#[derive(Debug, Clone)]
enum Op {
    /// `poll_probe(now)`.
    Poll,
    /// Report a result for a probe picked among all ever handed out (so also answered, timed
    /// out or overdue ones).
    Answer { pick: usize, ok: bool },
    /// Advance the clock.
    Step { millis: u64 },
    /// `handle_timeout(now)`.
    Timeout,
    /// Advance the clock to `poll_timeout()` (if later) and `handle_timeout` there.
    JumpToTimeout,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Poll),
        4 => (any::<usize>(), any::<bool>()).prop_map(|(pick, ok)| Op::Answer { pick, ok }),
        2 => (0u64..3000).prop_map(|millis| Op::Step { millis }),
        1 => Just(Op::Timeout),
        2 => Just(Op::JumpToTimeout),
    ]
}

fn spec() -> impl Strategy<Value = HealthSpec> {
    (
        1u64..6000,
        prop_oneof![Just(0u64), 1u64..1000],
        1u64..3000,
        1u32..4,
        1u32..4,
        1u32..5,
    )
        .prop_map(
            |(interval, jitter, timeout, failures, successes, conc)| HealthSpec {
                interval: Duration::from_millis(interval),
                jitter: Duration::from_millis(jitter),
                timeout: Duration::from_millis(timeout),
                failure_threshold: failures,
                success_threshold: successes,
                max_concurrency: conc,
                ..HealthSpec::default()
            },
        )
}

/// What the test expects of the schedule, computed independently of it.
struct Model {
    params: HealthParams,
    n: usize,
    now: Instant,
    /// Every probe handed out, for late and repeated answers.
    issued: Vec<Probe>,
    /// Probes the model believes in flight, in hand-out order.
    outstanding: Vec<Probe>,
    /// Probes per backend handed out since the last cycle ended.
    handed: Vec<u32>,
    /// Latest result or timeout instant in the running cycle.
    last_event: Instant,
    next_start: Instant,
    completed: u64,
    healthy: Vec<bool>,
    streak: Vec<u32>,
}

impl Model {
    /// Reference thresholds (C-HEALTH-2): the flip this effective result causes, if any.
    fn result(&mut self, index: usize, ok: bool, at: Instant) -> Option<HealthChange> {
        self.last_event = self.last_event.max(at);
        let healthy = self.healthy[index];
        if ok == healthy {
            self.streak[index] = 0;
            return None;
        }
        self.streak[index] += 1;
        let n = if healthy {
            self.params.failure_threshold()
        } else {
            self.params.success_threshold()
        };
        if self.streak[index] < n {
            return None;
        }
        self.streak[index] = 0;
        self.healthy[index] = !healthy;
        let health = if healthy {
            Health::Unhealthy
        } else {
            Health::Healthy
        };
        Some(HealthChange {
            backend_index: index,
            health,
        })
    }
}

fn run(spec: HealthSpec, n: usize, seed: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let params = HealthParams::new(&spec).unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let mut s = ProbeSchedule::new(&ids, params, T0);
    let mut rng = WyRand::new(seed);
    let max = params.max_concurrency() as usize;
    let mut m = Model {
        params,
        n,
        now: T0,
        issued: Vec::new(),
        outstanding: Vec::new(),
        handed: vec![0; n],
        last_event: T0,
        next_start: T0,
        completed: 0,
        healthy: vec![false; n],
        streak: vec![0; n],
    };
    for op in ops {
        let mut expired_at = None;
        let mut expected_changes = Vec::new();
        match op {
            Op::Poll => match s.poll_probe(m.now) {
                Some(p) => {
                    prop_assert!(m.now >= m.next_start, "probe before the cycle start");
                    prop_assert!(
                        m.outstanding.len() < max,
                        "C-HEALTH-1: over max_concurrency"
                    );
                    prop_assert!(p.backend_index < m.n);
                    prop_assert_eq!(p.deadline, m.now + params.timeout());
                    m.handed[p.backend_index] += 1;
                    prop_assert_eq!(m.handed[p.backend_index], 1, "probed twice in a cycle");
                    m.issued.push(p);
                    m.outstanding.push(p);
                }
                None => prop_assert!(
                    m.now < m.next_start
                        || m.outstanding.len() >= max
                        || m.handed.iter().all(|&c| c == 1),
                    "a due probe was withheld"
                ),
            },
            Op::Answer { pick, ok } => {
                if m.issued.is_empty() {
                    continue;
                }
                let probe = m.issued[pick % m.issued.len()];
                let got = s.handle_result(probe.token, ok, m.now, &mut rng);
                match m.outstanding.iter().position(|p| p.token == probe.token) {
                    Some(i) => {
                        m.outstanding.remove(i);
                        // C-HEALTH-6: an answer after the deadline is a failure at the deadline.
                        let (ok, at) = if m.now > probe.deadline {
                            (false, probe.deadline)
                        } else {
                            (ok, m.now)
                        };
                        let want = m.result(probe.backend_index, ok, at);
                        prop_assert_eq!(got, want);
                    }
                    None => prop_assert_eq!(got, None, "late or repeated answer not ignored"),
                }
            }
            Op::Step { millis } => m.now = m.now + Duration::from_millis(millis),
            Op::Timeout | Op::JumpToTimeout => {
                if let (Op::JumpToTimeout, Some(t)) = (&op, s.poll_timeout()) {
                    m.now = m.now.max(t);
                }
                s.handle_timeout(m.now, &mut rng);
                expired_at = Some(m.now);
                let mut i = 0;
                while i < m.outstanding.len() {
                    let p = m.outstanding[i];
                    if p.deadline <= m.now {
                        m.outstanding.remove(i);
                        expected_changes.extend(m.result(p.backend_index, false, p.deadline));
                    } else {
                        i += 1;
                    }
                }
            }
        }
        // Flips found by timeouts come out of poll_change, in the order the probes expired.
        let changes: Vec<_> = core::iter::from_fn(|| s.poll_change()).collect();
        prop_assert_eq!(changes, expected_changes);
        check(&s, &mut m, expired_at)?;
    }
    Ok(())
}

/// The invariants, after every operation.
fn check(
    s: &ProbeSchedule,
    m: &mut Model,
    expired_at: Option<Instant>,
) -> Result<(), TestCaseError> {
    let max = m.params.max_concurrency() as usize;
    prop_assert!(
        s.in_flight().len() <= max,
        "C-HEALTH-1: over max_concurrency"
    );
    prop_assert_eq!(s.in_flight(), &m.outstanding[..]);
    if let Some(now) = expired_at {
        // C-HEALTH-6: nothing stays in flight past its deadline once timeouts are handled.
        prop_assert!(s.in_flight().iter().all(|p| p.deadline > now));
    }
    for i in 0..m.n {
        prop_assert_eq!(s.is_healthy(i), m.healthy[i], "C-HEALTH-2: health of {}", i);
    }
    let all_done = m.handed.iter().all(|&c| c == 1) && m.outstanding.is_empty();
    if all_done {
        // The cycle ended with its last result or timeout: exactly one more completed, and
        // no probe of it is left (cycles never overlap).
        prop_assert_eq!(s.cycles_completed(), m.completed + 1);
        prop_assert_eq!(s.last_cycle_end(), Some(m.last_event));
        // The next cycle may already have begun, if handle_timeout ran past its start.
        let start = s.due();
        prop_assert!(s.next_cycle_start() == Some(start) || m.now >= start);
        let earliest = m.last_event + m.params.interval();
        // C-HEALTH-1: next start in [end + interval, end + interval + jitter]; exact if no jitter.
        prop_assert!(start >= earliest && start <= earliest + m.params.jitter());
        m.completed += 1;
        m.next_start = start;
        m.handed.iter_mut().for_each(|c| *c = 0);
    } else {
        prop_assert_eq!(s.cycles_completed(), m.completed);
    }
    match s.poll_timeout() {
        Some(t) if !m.outstanding.is_empty() => {
            let earliest = m.outstanding.iter().map(|p| p.deadline).min();
            prop_assert_eq!(Some(t), earliest);
        }
        Some(t) => {
            prop_assert_eq!(t, m.next_start);
            prop_assert!(m.handed.iter().all(|&c| c == 0), "waiting mid-cycle");
        }
        None => prop_assert!(
            m.outstanding.is_empty() && m.now >= m.next_start,
            "no timer while probes are in flight or before the next cycle"
        ),
    }
    prop_assert_eq!(s.due(), m.next_start);
    prop_assert_eq!(s.is_running(), s.next_cycle_start().is_none());
    if let Some(start) = s.next_cycle_start() {
        prop_assert_eq!(start, m.next_start);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C-HEALTH-1, C-HEALTH-2, C-HEALTH-6: after every operation of an arbitrary interleaving,
    /// probes in flight <= max_concurrency; none outlives its deadline once handle_timeout ran;
    /// cycles never overlap and probe each backend exactly once; the next cycle starts within
    /// [end + interval, end + interval + jitter] (exactly end + interval without jitter); late
    /// answers count as failures or are ignored; health follows the thresholds.
    #[test]
    fn c_health_1_2_6_schedule_invariants_hold_after_every_op(
        spec in spec(),
        n in 1usize..6,
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        run(spec, n, seed, ops)?;
    }

    /// C-HEALTH-1: a long run in which every probe is answered or expired always completes
    /// cycles (the schedule never stalls).
    #[test]
    fn c_health_1_cycles_keep_completing(
        spec in spec(),
        n in 1usize..6,
        seed in any::<u64>(),
        oks in proptest::collection::vec(any::<bool>(), 50),
    ) {
        let params = HealthParams::new(&spec).unwrap();
        let ids: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
        let mut s = ProbeSchedule::new(&ids, params, T0);
        let mut rng = WyRand::new(seed);
        let mut now = T0;
        for (step, ok) in oks.into_iter().enumerate() {
            while let Some(p) = s.poll_probe(now) {
                if step % 3 != 0 {
                    s.handle_result(p.token, ok, now, &mut rng);
                }
            }
            let t = s.poll_timeout();
            prop_assert!(t.is_some());
            now = now.max(t.unwrap_or(now));
            s.handle_timeout(now, &mut rng);
        }
        prop_assert!(s.cycles_completed() >= 10, "{} cycles", s.cycles_completed());
    }

    /// Reloads in the middle of anything never panic, never hand out more than
    /// max_concurrency probes, and never leave a probe for an unknown backend in flight.
    #[test]
    fn reloads_keep_the_schedule_consistent(
        spec in spec(),
        seed in any::<u64>(),
        ops in proptest::collection::vec(
            (0u8..6, proptest::collection::vec(0u8..6, 0..6), any::<bool>(), 0u64..3000),
            1..200,
        ),
    ) {
        let params = HealthParams::new(&spec).unwrap();
        let mut s = ProbeSchedule::new(["b0", "b1", "b2"], params, T0);
        let mut rng = WyRand::new(seed);
        let mut now = T0;
        let mut issued = Vec::new();
        for (kind, ids, ok, millis) in ops {
            match kind {
                0 => {
                    let before = s.in_flight().len();
                    if let Some(p) = s.poll_probe(now) {
                        prop_assert!(before < s.params().max_concurrency() as usize);
                        issued.push(p.token);
                    }
                }
                1 => {
                    if !issued.is_empty() {
                        let token = issued[millis as usize % issued.len()];
                        let _ = s.handle_result(token, ok, now, &mut rng);
                    }
                }
                2 => now = now + Duration::from_millis(millis),
                3 => {
                    s.handle_timeout(now, &mut rng);
                    prop_assert!(s.in_flight().iter().all(|p| p.deadline > now));
                }
                4 => {
                    let names: Vec<String> = ids.iter().map(|i| format!("b{i}")).collect();
                    s.replace_backends(&names, now);
                    prop_assert_eq!(s.len(), names.len());
                }
                _ => {
                    let mut spec = spec.clone();
                    spec.max_concurrency = u32::from(ids.len() as u8).max(1);
                    spec.failure_threshold = u32::from(ok) + 1;
                    s.set_params(HealthParams::new(&spec).unwrap());
                }
            }
            while s.poll_change().is_some() {}
            prop_assert!(s.in_flight().iter().all(|p| p.backend_index < s.len()));
            let cycles = s.cycles_completed();
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now, &mut rng);
                prop_assert!(s.cycles_completed() >= cycles);
            }
        }
    }
}
