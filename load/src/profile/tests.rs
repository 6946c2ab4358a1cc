use super::*;

fn tally(statuses: &[(u16, u64)], backends: &[(&str, u64)], transport: u64) -> Tally {
    let mut t = Tally {
        seconds: 10.0,
        transition: true,
        ..Tally::default()
    };
    for (code, n) in statuses {
        t.statuses.insert(code.to_string(), *n);
        t.requests += n;
    }
    for (b, n) in backends {
        t.backends.insert((*b).to_owned(), *n);
    }
    t.errors.read = transport;
    t
}

fn passes(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.ok)
}

#[test]
fn smoke_needs_more_than_99_percent_200() {
    let c = Criteria::default();
    assert!(passes(&verdict(
        Profile::Smoke,
        &tally(&[(200, 1000), (503, 9)], &[], 0),
        &c
    )));
    assert!(!passes(&verdict(
        Profile::Smoke,
        &tally(&[(200, 990), (503, 10)], &[], 0),
        &c
    )));
    // A transport failure counts against the share like a bad status.
    assert!(!passes(&verdict(
        Profile::Soak,
        &tally(&[(200, 99)], &[], 1),
        &c
    )));
    // Nothing at all is a failure, not a vacuous pass.
    assert!(!passes(&verdict(
        Profile::Recovery,
        &tally(&[], &[], 0),
        &c
    )));
}

#[test]
fn throughput_also_needs_min_rps() {
    let t = tally(&[(200, 2000)], &[], 0); // 200 req/s
    assert!(passes(&verdict(
        Profile::Throughput,
        &t,
        &Criteria::default()
    )));
    let c = Criteria {
        min_rps: Some(500.0),
        ..Criteria::default()
    };
    let checks = verdict(Profile::Throughput, &t, &c);
    assert!(!passes(&checks));
    assert_eq!(checks.iter().filter(|c| !c.ok).count(), 1);
}

#[test]
fn rate_limit_needs_200_then_429_and_never_503() {
    let c = Criteria::default();
    assert!(passes(&verdict(
        Profile::RateLimit,
        &tally(&[(200, 50), (429, 900)], &[], 0),
        &c
    )));
    assert!(!passes(&verdict(
        Profile::RateLimit,
        &tally(&[(200, 50)], &[], 0),
        &c
    )));
    assert!(!passes(&verdict(
        Profile::RateLimit,
        &tally(&[(429, 50)], &[], 0),
        &c
    )));
    assert!(!passes(&verdict(
        Profile::RateLimit,
        &tally(&[(200, 50), (429, 9), (503, 1)], &[], 0),
        &c
    )));
    let mut no_switch = tally(&[(200, 50), (429, 900)], &[], 0);
    no_switch.transition = false;
    assert!(!passes(&verdict(Profile::RateLimit, &no_switch, &c)));
}

#[test]
fn overload_and_spike_need_200_and_503_and_nothing_else() {
    let c = Criteria::default();
    for p in [Profile::Overload, Profile::Spike] {
        assert!(passes(&verdict(
            p,
            &tally(&[(200, 50), (503, 900)], &[], 0),
            &c
        )));
        assert!(
            !passes(&verdict(p, &tally(&[(200, 50)], &[], 0), &c)),
            "{p}"
        );
        assert!(
            !passes(&verdict(p, &tally(&[(503, 50)], &[], 0), &c)),
            "{p}"
        );
        assert!(
            !passes(&verdict(
                p,
                &tally(&[(200, 5), (503, 5), (502, 1)], &[], 0),
                &c
            )),
            "{p}"
        );
        assert!(
            !passes(&verdict(p, &tally(&[(200, 5), (503, 5)], &[], 1), &c)),
            "{p}"
        );
    }
}

#[test]
fn expected_backends_need_each_one_and_no_stranger() {
    let c = Criteria {
        expected_backends: vec!["b1".into(), "b2".into()],
        ..Criteria::default()
    };
    let ok = tally(&[(200, 10)], &[("b1", 5), ("b2", 5)], 0);
    assert!(passes(&verdict(Profile::Smoke, &ok, &c)));
    let missing = tally(&[(200, 10)], &[("b1", 10)], 0);
    assert!(!passes(&verdict(Profile::Smoke, &missing, &c)));
    let stranger = tally(&[(200, 10)], &[("b1", 5), ("b2", 4), ("(unnamed)", 1)], 0);
    assert!(!passes(&verdict(Profile::Smoke, &stranger, &c)));
}

#[test]
fn plans_apply_the_knobs() {
    let knobs = Knobs {
        duration: Some(Duration::from_secs(4)),
        connections: Some(64),
        rate: None,
    };
    let p = Profile::Spike.plan(&knobs);
    assert_eq!(
        p.iter().map(|p| p.connections).collect::<Vec<_>>(),
        [2, 64, 2]
    );
    assert_eq!(
        p.iter().map(|p| p.duration).sum::<Duration>(),
        Duration::from_secs(4)
    );
    let r = Profile::Recovery.plan(&knobs);
    assert_eq!((r[0].judged, r[1].judged), (false, true));
    assert!(r[0].connections > r[1].connections);
    assert_eq!(
        Profile::Smoke.plan(&Knobs::default())[0].duration,
        Duration::from_secs(10)
    );
}

#[test]
fn rate_becomes_a_per_connection_pause() {
    assert_eq!(delay_ms(None, 10), 0);
    assert_eq!(delay_ms(Some(1000.0), 10), 10);
    assert_eq!(delay_ms(Some(1e9), 10), 1);
}
