//! The mirror decision's own rules (C-MIRROR-1); the engine's use of it is tested in
//! `exchange/mirror_tests.rs`.

use super::*;
use crate::rng::WyRand;

#[test]
fn c_mirror_1_the_in_flight_bound_gives_places_back_on_drop() {
    let in_flight = Arc::new(InFlight::new());
    let a = InFlight::take(&in_flight, 2).expect("first");
    let b = InFlight::take(&in_flight, 2).expect("second");
    assert!(InFlight::take(&in_flight, 2).is_none(), "over the bound");
    assert_eq!(in_flight.current(), 2);
    drop(a);
    assert_eq!(in_flight.current(), 1);
    let _c = InFlight::take(&in_flight, 2).expect("a place again");
    drop(b);
    assert_eq!(in_flight.current(), 1);
    assert!(
        InFlight::take(&in_flight, 0).is_none(),
        "a bound of 0 sends none"
    );
}

#[test]
fn c_mirror_1_draws_the_share() {
    let mut rng = WyRand::new(5);
    assert!(drawn(100, &mut rng));
    assert!(!drawn(0, &mut rng));
    let hits = (0..10_000).filter(|_| drawn(25, &mut rng)).count();
    assert!((2_300..=2_700).contains(&hits), "{hits}");
}

#[test]
fn c_mirror_1_labels() {
    let labels: Vec<&str> = MirrorResult::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, ["sent", "dropped", "skipped"]);
}

#[test]
fn c_mirror_1_shadow_host_appends_to_the_name_and_keeps_the_port() {
    assert_eq!(shadow_host("api.example"), "api.example-shadow");
    assert_eq!(shadow_host("api.example:8080"), "api.example-shadow:8080");
    assert_eq!(shadow_host("127.0.0.1:9"), "127.0.0.1-shadow:9");
    assert_eq!(shadow_host("[::1]:80"), "[::1]-shadow:80");
    assert_eq!(shadow_host("[::1]"), "[::1]-shadow");
}
