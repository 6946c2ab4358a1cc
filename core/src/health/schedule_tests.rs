//! Unit tests of [`ProbeSchedule`], one rule each (C-HEALTH-1, C-HEALTH-2, C-HEALTH-5, C-HEALTH-6).

use core::time::Duration;

use super::{Health, HealthChange, HealthParams, HealthSpec, Probe, ProbeSchedule};
use crate::rng::WyRand;
use crate::time::Instant;

const T0: Instant = Instant::from_secs(100);

fn params(f: impl FnOnce(&mut HealthSpec)) -> HealthParams {
    let mut spec = HealthSpec::default();
    f(&mut spec);
    HealthParams::new(&spec).unwrap()
}

fn no_jitter() -> HealthParams {
    params(|s| s.jitter = Duration::ZERO)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Hands out every probe available at `now`.
fn drain(s: &mut ProbeSchedule, now: Instant) -> Vec<Probe> {
    core::iter::from_fn(|| s.poll_probe(now)).collect()
}

/// Runs one cycle in which every backend answers `ok` at `now`.
fn answer_all(s: &mut ProbeSchedule, ok: bool, now: Instant, rng: &mut WyRand) {
    for p in drain(s, now) {
        s.handle_result(p.token, ok, now, rng);
    }
}

#[test]
fn c_health_1_first_cycle_starts_at_creation_in_list_order() {
    let mut s = ProbeSchedule::new(["a", "b", "c"], HealthParams::default(), T0);
    assert_eq!(s.poll_timeout(), Some(T0));
    assert_eq!(s.due(), T0);
    assert!(!s.is_running());
    let probes = drain(&mut s, T0);
    let indices: Vec<_> = probes.iter().map(|p| p.backend_index).collect();
    assert_eq!(indices, vec![0, 1, 2]);
    assert!(
        probes
            .iter()
            .all(|p| p.deadline == T0 + Duration::from_secs(2))
    );
    assert_eq!(s.id(1), Some("b"));
    assert_eq!(s.index_of("c"), Some(2));
    assert_eq!(s.in_flight().len(), 3);
    assert_eq!(s.poll_timeout(), Some(T0 + Duration::from_secs(2)));
}

#[test]
fn c_health_1_backends_start_unhealthy_and_listeners_wait_for_one_cycle() {
    let mut rng = WyRand::new(1);
    let mut s = ProbeSchedule::new(["a", "b"], HealthParams::default(), T0);
    assert!(!s.is_healthy(0) && !s.is_healthy(1));
    assert_eq!(s.health(0), Some(Health::Unhealthy));
    assert_eq!(s.cycles_completed(), 0);
    let probes = drain(&mut s, T0);
    let change = s.handle_result(probes[0].token, true, T0 + ms(5), &mut rng);
    assert_eq!(
        change,
        Some(HealthChange {
            backend_index: 0,
            health: Health::Healthy
        })
    );
    assert_eq!(s.cycles_completed(), 0, "b has not answered yet");
    assert_eq!(
        s.handle_result(probes[1].token, false, T0 + ms(7), &mut rng),
        None
    );
    assert_eq!(s.cycles_completed(), 1);
    assert_eq!(s.last_cycle_end(), Some(T0 + ms(7)));
    assert!(s.is_healthy(0) && !s.is_healthy(1));
    assert!(!s.is_healthy(9), "unknown index is not healthy");
    assert_eq!(s.health(9), None);
}

#[test]
fn c_health_1_at_most_max_concurrency_probes_in_flight() {
    let mut rng = WyRand::new(2);
    let p = params(|s| s.max_concurrency = 2);
    let mut s = ProbeSchedule::new(["a", "b", "c", "d", "e"], p, T0);
    let first = drain(&mut s, T0);
    assert_eq!(first.len(), 2);
    assert_eq!(s.poll_probe(T0), None);
    s.handle_result(first[1].token, true, T0 + ms(1), &mut rng);
    let next = drain(&mut s, T0 + ms(1));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].backend_index, 2);
    assert_eq!(next[0].deadline, T0 + ms(1) + Duration::from_secs(2));
}

#[test]
fn c_health_1_next_cycle_is_interval_after_the_end_without_jitter() {
    let mut rng = WyRand::new(3);
    let mut s = ProbeSchedule::new(["a", "b"], no_jitter(), T0);
    answer_all(&mut s, true, T0 + ms(30), &mut rng);
    let end = T0 + ms(30);
    assert_eq!(s.last_cycle_end(), Some(end));
    let start = end + Duration::from_secs(5);
    assert_eq!(s.next_cycle_start(), Some(start));
    assert_eq!(s.poll_timeout(), Some(start));
    // Cycles never overlap: nothing is handed out until the next start.
    assert_eq!(s.poll_probe(start - Duration::from_nanos(1)), None);
    s.handle_timeout(start - Duration::from_nanos(1), &mut rng);
    assert_eq!(
        s.next_cycle_start(),
        Some(start),
        "early timeout is a no-op"
    );
    assert_eq!(drain(&mut s, start).len(), 2);
    assert_eq!(s.next_cycle_start(), None);
    assert!(s.is_running());
}

#[test]
fn c_health_1_jitter_is_uniform_within_its_bound() {
    let p = params(|s| s.jitter = ms(500));
    let mut gaps = Vec::new();
    for seed in 0..200 {
        let mut rng = WyRand::new(seed);
        let mut s = ProbeSchedule::new(["a"], p, T0);
        answer_all(&mut s, true, T0, &mut rng);
        let gap = s.next_cycle_start().unwrap() - T0;
        assert!(gap >= Duration::from_secs(5) && gap <= Duration::from_millis(5500));
        gaps.push(gap);
    }
    let low = gaps
        .iter()
        .filter(|g| **g < Duration::from_millis(5250))
        .count();
    assert!((60..140).contains(&low), "{low} of 200 in the lower half");
}

#[test]
fn c_health_1_timeout_starts_the_next_cycle_when_due() {
    let mut rng = WyRand::new(4);
    let mut s = ProbeSchedule::new(["a"], no_jitter(), T0);
    answer_all(&mut s, true, T0, &mut rng);
    let start = T0 + Duration::from_secs(5);
    s.handle_timeout(start, &mut rng);
    assert_eq!(
        s.next_cycle_start(),
        None,
        "handle_timeout started the cycle"
    );
    assert_eq!(s.poll_timeout(), None, "probes are ready to hand out");
    assert_eq!(drain(&mut s, start).len(), 1);
}

#[test]
fn c_health_6_unanswered_probe_fails_at_its_deadline_and_frees_its_slot() {
    let mut rng = WyRand::new(5);
    let p = params(|s| {
        s.max_concurrency = 1;
        s.jitter = Duration::ZERO;
    });
    let mut s = ProbeSchedule::new(["slow", "fast"], p, T0);
    let slow = s.poll_probe(T0).unwrap();
    assert_eq!(s.poll_probe(T0), None);
    let deadline = T0 + Duration::from_secs(2);
    s.handle_timeout(deadline - Duration::from_nanos(1), &mut rng);
    assert_eq!(s.in_flight().len(), 1, "early timeout is a no-op");
    // The adapter is 300 ms late; the failure still counts at the deadline.
    s.handle_timeout(deadline + ms(300), &mut rng);
    assert!(s.in_flight().is_empty());
    let fast = s.poll_probe(deadline + ms(300)).unwrap();
    assert_eq!(fast.backend_index, 1);
    // The late answer of the slow probe is ignored.
    assert_eq!(
        s.handle_result(slow.token, true, deadline + ms(301), &mut rng),
        None
    );
    assert!(!s.is_healthy(0));
    s.handle_result(fast.token, true, deadline + ms(310), &mut rng);
    assert_eq!(s.cycles_completed(), 1);
    assert_eq!(s.last_cycle_end(), Some(deadline + ms(310)));
}

#[test]
fn c_health_6_cycle_ending_in_timeouts_ends_at_the_last_deadline() {
    let mut rng = WyRand::new(6);
    let mut s = ProbeSchedule::new(["a", "b"], no_jitter(), T0);
    let probes = drain(&mut s, T0);
    s.handle_result(probes[0].token, true, T0 + ms(1), &mut rng);
    // The adapter handles the timeout late; the cycle still ends at the deadline.
    s.handle_timeout(T0 + Duration::from_secs(3), &mut rng);
    assert_eq!(s.last_cycle_end(), Some(probes[1].deadline));
    let next = probes[1].deadline + Duration::from_secs(5);
    assert_eq!(s.next_cycle_start(), Some(next));
    // Later still, past the next start: the same call ends nothing new and starts the cycle.
    s.handle_timeout(next + Duration::from_secs(1), &mut rng);
    assert_eq!(s.next_cycle_start(), None);
    assert_eq!(s.due(), next);
    assert_eq!(drain(&mut s, next + Duration::from_secs(1)).len(), 2);
}

#[test]
fn c_health_6_result_after_deadline_counts_as_failure() {
    let mut rng = WyRand::new(7);
    let p = params(|s| s.failure_threshold = 1);
    let mut s = ProbeSchedule::new(["a"], p, T0);
    answer_all(&mut s, true, T0, &mut rng);
    assert!(s.is_healthy(0));
    let start = s.next_cycle_start().unwrap();
    let probe = s.poll_probe(start).unwrap();
    // Arrives 1 ns late, before the adapter ran handle_timeout: too late all the same.
    let change = s.handle_result(
        probe.token,
        true,
        probe.deadline + Duration::from_nanos(1),
        &mut rng,
    );
    assert_eq!(
        change,
        Some(HealthChange {
            backend_index: 0,
            health: Health::Unhealthy
        })
    );
    assert_eq!(s.last_cycle_end(), Some(probe.deadline));
}

#[test]
fn c_health_2_timeouts_flip_a_healthy_backend_through_poll_change() {
    let mut rng = WyRand::new(8);
    let mut s = ProbeSchedule::new(["a", "b"], no_jitter(), T0);
    answer_all(&mut s, true, T0, &mut rng);
    assert!(s.is_healthy(0) && s.is_healthy(1));
    for cycle in 0..2 {
        let start = s.next_cycle_start().unwrap();
        let probes = drain(&mut s, start);
        s.handle_result(probes[1].token, true, start, &mut rng);
        s.handle_timeout(probes[0].deadline, &mut rng);
        if cycle == 0 {
            assert_eq!(s.poll_change(), None, "one failure of two");
            assert!(s.is_healthy(0));
        }
    }
    assert_eq!(
        s.poll_change(),
        Some(HealthChange {
            backend_index: 0,
            health: Health::Unhealthy
        })
    );
    assert_eq!(s.poll_change(), None);
    assert!(!s.is_healthy(0) && s.is_healthy(1));
}

#[test]
fn c_health_5_every_backend_is_probed_once_per_cycle() {
    // The schedule has no notion of disabled backends: a list of 20 gives 20 probes per cycle.
    let mut rng = WyRand::new(9);
    let ids: Vec<String> = (0..20).map(|i| format!("b{i}")).collect();
    let p = params(|s| s.max_concurrency = 3);
    let mut s = ProbeSchedule::new(&ids, p, T0);
    for cycle in 0..3u64 {
        let mut now = s.next_cycle_start().unwrap();
        let mut seen = vec![0u32; 20];
        while s.cycles_completed() == cycle {
            let probes = drain(&mut s, now);
            assert!(!probes.is_empty() && probes.len() <= 3);
            now = now + ms(10);
            for p in probes {
                seen[p.backend_index] += 1;
                s.handle_result(p.token, cycle % 2 == 0, now, &mut rng);
            }
        }
        assert_eq!(seen, vec![1; 20]);
    }
}

#[test]
fn replace_backends_keeps_state_of_kept_ids_and_probes_new_ones() {
    let mut rng = WyRand::new(10);
    let mut s = ProbeSchedule::new(["a", "b", "c"], no_jitter(), T0);
    answer_all(&mut s, true, T0, &mut rng);
    let start = s.next_cycle_start().unwrap();
    let probes = drain(&mut s, start);
    // b fails once (counter 1 of 2), then the reload lands mid-cycle.
    s.handle_result(probes[1].token, false, start, &mut rng);
    s.replace_backends(["d", "b", "a"], start + ms(1));
    assert_eq!(s.len(), 3);
    assert_eq!(s.index_of("b"), Some(1));
    assert!(
        s.is_healthy(1) && s.is_healthy(2),
        "kept ids keep their health"
    );
    assert!(!s.is_healthy(0), "new backends start unhealthy");
    // a's probe is still in flight under its new index; c's is forgotten.
    let in_flight: Vec<_> = s.in_flight().iter().map(|p| p.backend_index).collect();
    assert_eq!(in_flight, vec![2]);
    assert_eq!(
        s.handle_result(probes[2].token, true, start + ms(2), &mut rng),
        None,
        "c's answer is ignored"
    );
    assert_eq!(s.in_flight().len(), 1);
    assert_eq!(
        s.handle_result(probes[0].token, true, start + ms(2), &mut rng),
        None
    );
    // d is probed in this cycle.
    let d = s.poll_probe(start + ms(2)).unwrap();
    assert_eq!(d.backend_index, 0);
    assert_eq!(s.poll_probe(start + ms(2)), None);
    s.handle_result(d.token, true, start + ms(3), &mut rng);
    assert_eq!(s.cycles_completed(), 2);
    // b's failure counter survived: one more failure flips it.
    let next = s.next_cycle_start().unwrap();
    let probes = drain(&mut s, next);
    let change = s.handle_result(probes[1].token, false, next, &mut rng);
    assert_eq!(
        change,
        Some(HealthChange {
            backend_index: 1,
            health: Health::Unhealthy
        })
    );
}

#[test]
fn replace_backends_removing_the_last_outstanding_probe_ends_the_cycle() {
    let mut rng = WyRand::new(11);
    let mut s = ProbeSchedule::new(["a", "b"], no_jitter(), T0);
    let probes = drain(&mut s, T0);
    s.handle_result(probes[0].token, true, T0 + ms(1), &mut rng);
    s.replace_backends(["a"], T0 + ms(4));
    assert_eq!(s.poll_timeout(), Some(T0 + ms(4)), "due now");
    s.handle_timeout(T0 + ms(4), &mut rng);
    assert_eq!(s.cycles_completed(), 1);
    assert_eq!(
        s.next_cycle_start(),
        Some(T0 + ms(4) + Duration::from_secs(5))
    );
    // The removed probe's late answer is ignored.
    assert_eq!(
        s.handle_result(probes[1].token, true, T0 + ms(5), &mut rng),
        None
    );
}

#[test]
fn replace_backends_between_cycles_and_with_duplicates() {
    let mut rng = WyRand::new(12);
    let mut s = ProbeSchedule::new(["a", "a"], no_jitter(), T0);
    let probes = drain(&mut s, T0);
    s.handle_result(probes[0].token, true, T0, &mut rng);
    s.handle_result(probes[1].token, false, T0, &mut rng);
    s.replace_backends(["a", "x", "a"], T0 + ms(1));
    assert!(s.is_healthy(0) && !s.is_healthy(1) && !s.is_healthy(2));
    assert_eq!(
        s.poll_probe(T0 + ms(1)),
        None,
        "new backends wait for the next cycle"
    );
    let next = s.next_cycle_start().unwrap();
    assert_eq!(drain(&mut s, next).len(), 3);
}

#[test]
fn set_params_keeps_counters_and_applies_to_the_next_probe() {
    let mut rng = WyRand::new(13);
    let mut s = ProbeSchedule::new(["a"], params(|s| s.success_threshold = 3), T0);
    answer_all(&mut s, true, T0, &mut rng);
    let p = params(|s| {
        s.success_threshold = 2;
        s.timeout = Duration::from_secs(1);
        s.interval = Duration::from_secs(1);
        s.jitter = Duration::ZERO;
    });
    s.set_params(p);
    assert_eq!(s.params(), &p);
    let start = s.next_cycle_start().unwrap();
    let probe = s.poll_probe(start).unwrap();
    assert_eq!(probe.deadline, start + Duration::from_secs(1));
    let change = s.handle_result(probe.token, true, start, &mut rng);
    assert_eq!(
        change.map(|c| c.health),
        Some(Health::Healthy),
        "2nd success of 2"
    );
    assert_eq!(s.next_cycle_start(), Some(start + Duration::from_secs(1)));
}

#[test]
fn c_health_1_empty_list_completes_a_cycle_so_listeners_can_open() {
    let mut rng = WyRand::new(14);
    let mut s = ProbeSchedule::new(Vec::<String>::new(), HealthParams::default(), T0);
    assert!(s.is_empty());
    assert_eq!(s.poll_probe(T0), None);
    assert_eq!(s.poll_timeout(), Some(T0));
    s.handle_timeout(T0, &mut rng);
    assert_eq!(s.cycles_completed(), 1);
    assert_eq!(s.last_cycle_end(), Some(T0));
    assert!(s.poll_timeout().unwrap() >= T0 + Duration::from_secs(5));
}

#[test]
fn time_going_backwards_is_clamped() {
    let mut rng = WyRand::new(15);
    let mut s = ProbeSchedule::new(["a", "b"], no_jitter(), T0);
    let a = s.poll_probe(T0 + Duration::from_secs(1)).unwrap();
    let b = s.poll_probe(T0).unwrap();
    assert_eq!(
        b.deadline, a.deadline,
        "the earlier now is clamped to the latest seen"
    );
    s.handle_result(a.token, true, Instant::ZERO, &mut rng);
    s.handle_result(b.token, true, Instant::ZERO, &mut rng);
    assert_eq!(s.last_cycle_end(), Some(T0 + Duration::from_secs(1)));
}

#[test]
fn foreign_and_repeated_tokens_are_ignored() {
    let mut rng = WyRand::new(16);
    let mut other = ProbeSchedule::new(["z", "y"], HealthParams::default(), T0);
    let _ = other.poll_probe(T0);
    let foreign = other.poll_probe(T0).unwrap();
    let mut s = ProbeSchedule::new(["a"], HealthParams::default(), T0);
    let mine = s.poll_probe(T0).unwrap();
    assert_eq!(s.handle_result(foreign.token, true, T0, &mut rng), None);
    assert_eq!(s.in_flight().len(), 1);
    assert!(s.handle_result(mine.token, true, T0, &mut rng).is_some());
    assert_eq!(s.handle_result(mine.token, false, T0, &mut rng), None);
    assert!(s.is_healthy(0));
}
