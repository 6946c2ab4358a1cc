//! C-DISC-1: the answer machine, by example and by property.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;
use crate::backend::Protocol;

const T0: Instant = Instant::from_secs(100);

fn spec() -> DnsSpec {
    DnsSpec {
        name: "api.internal".to_owned(),
        port: 8080,
        interval: core::time::Duration::from_secs(5),
        https: false,
        protocol: Protocol::Http1,
    }
}

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn ids(b: &[BackendSpec]) -> Vec<&str> {
    b.iter().map(|b| b.id.as_str()).collect()
}

#[test]
fn c_disc_1_every_address_is_a_backend_with_a_stable_id() {
    let mut d = Discovery::new("api", &spec(), &[], T0);
    assert!(d.due(T0));
    let out = d.on_answer(Answer::Addresses(vec![v4(3), v4(1), v4(2), v4(1)]), T0);
    assert_eq!(out.outcome, Outcome::Ok);
    let set = out.apply.expect("a first answer fills the pool");
    assert_eq!(
        ids(&set),
        [
            "api/10.0.0.1:8080",
            "api/10.0.0.2:8080",
            "api/10.0.0.3:8080"
        ]
    );
    assert_eq!(set[0].url, "http://10.0.0.1:8080");
    assert_eq!(out.added.len(), 3);
    assert!(!out.warn && !out.recovered);
    // Due again one interval later, not before.
    assert!(!d.due(T0.saturating_add(core::time::Duration::from_secs(4))));
    assert!(d.due(T0.saturating_add(core::time::Duration::from_secs(5))));
}

#[test]
fn c_disc_1_ipv6_and_https_h2() {
    let mut s = spec();
    s.https = true;
    s.protocol = Protocol::H2;
    let mut d = Discovery::new("grpc", &s, &[], T0);
    let set = d
        .on_answer(Answer::Addresses(vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]), T0)
        .apply
        .expect("filled");
    assert_eq!(set[0].id, "grpc/[::1]:8080");
    assert_eq!(set[0].url, "https://[::1]:8080");
    assert_eq!(set[0].protocol, Protocol::H2);
    assert_eq!(
        address_of("grpc", &set[0].id),
        Some("[::1]:8080".parse().expect("addr"))
    );
}

#[test]
fn c_disc_1_changes_add_and_drain() {
    let mut d = Discovery::new("api", &spec(), &[], T0);
    let _ = d.on_answer(Answer::Addresses(vec![v4(1), v4(2)]), T0);
    let out = d.on_answer(Answer::Addresses(vec![v4(2), v4(3)]), T0);
    assert_eq!(out.added, ["api/10.0.0.3:8080"]);
    assert_eq!(out.removed, ["api/10.0.0.1:8080"]);
    assert_eq!(
        ids(&out.apply.expect("changed")),
        ["api/10.0.0.2:8080", "api/10.0.0.3:8080"]
    );
    // The same set in another order changes nothing.
    let out = d.on_answer(Answer::Addresses(vec![v4(3), v4(2), v4(3)]), T0);
    assert_eq!(out.apply, None);
}

#[test]
fn c_disc_1_failures_keep_the_last_good_set_and_warn_once_per_change() {
    let mut d = Discovery::new("api", &spec(), &[], T0);
    let _ = d.on_answer(Answer::Addresses(vec![v4(1)]), T0);
    let seq = [
        (Answer::ServFail, Outcome::ServFail, true),
        (Answer::ServFail, Outcome::ServFail, false),
        (Answer::NxDomain, Outcome::NxDomain, true),
        (Answer::NxDomain, Outcome::NxDomain, false),
        (Answer::Addresses(vec![]), Outcome::NoRecords, true),
        (Answer::Timeout, Outcome::Timeout, true),
        (Answer::Error, Outcome::Error, true),
    ];
    for (answer, outcome, warn) in seq {
        let out = d.on_answer(answer, T0);
        assert_eq!(out.outcome, outcome);
        assert_eq!(out.warn, warn, "{outcome}");
        assert_eq!(out.apply, None, "{outcome} must not change the pool");
        assert_eq!(d.addresses(), [v4(1)]);
    }
    let out = d.on_answer(Answer::Addresses(vec![v4(1)]), T0);
    assert!(out.recovered && !out.warn);
    assert_eq!(out.apply, None);
    assert_eq!(d.last().map(|l| l.outcome), Some(Outcome::Ok));
}

#[test]
fn c_disc_1_a_failure_before_any_answer_warns_and_leaves_the_pool_empty() {
    let mut d = Discovery::new("api", &spec(), &[], T0);
    let out = d.on_answer(Answer::Timeout, T0);
    assert!(out.warn);
    assert_eq!(out.apply, None);
    assert!(d.backends().is_empty());
}

#[test]
fn c_disc_1_the_running_set_is_the_last_good_one_after_a_reload() {
    let mut d = Discovery::new("api", &spec(), &[], T0);
    let set = d
        .on_answer(Answer::Addresses(vec![v4(1), v4(2)]), T0)
        .apply
        .expect("filled");
    let mut again = Discovery::new("api", &spec(), &set, T0);
    assert_eq!(again.addresses(), [v4(1), v4(2)]);
    assert_eq!(
        again
            .on_answer(Answer::Addresses(vec![v4(2), v4(1)]), T0)
            .apply,
        None
    );
    assert_eq!(again.on_answer(Answer::NxDomain, T0).apply, None);
    assert_eq!(again.backends(), set);
}

#[test]
fn c_disc_1_a_new_name_is_resolved_at_once_a_new_interval_from_the_last_answer() {
    let mut d = Discovery::new("api", &spec(), &[], T0);
    let _ = d.on_answer(Answer::Addresses(vec![v4(1)]), T0);
    let mut s = spec();
    s.interval = core::time::Duration::from_secs(60);
    let later = T0.saturating_add(core::time::Duration::from_secs(1));
    d.set_spec(&s, later);
    assert_eq!(
        d.next_at(),
        T0.saturating_add(core::time::Duration::from_secs(60))
    );
    s.name = "other.internal".to_owned();
    d.set_spec(&s, later);
    assert!(d.due(later));
    assert_eq!(d.addresses(), [v4(1)], "kept until the new name answers");
}

#[test]
fn c_disc_1_carry_over_keeps_a_dns_pool_filled_across_a_reload() {
    let text = "backends: [{id: a, url: 'http://127.0.0.1:1'}]\n\
                pools: {api: {dns: {name: api.internal, port: 8080}}}\n";
    let mut previous = crate::config::load(text, &crate::config::MapSecrets::new()).expect("valid");
    let spec = previous.pools[1].dns.clone().expect("dns");
    previous.pools[1].backends = backends_for("api", &spec, &[v4(1), v4(2)]);
    let text2 = "backends: [{id: a, url: 'http://127.0.0.1:1'}]\n\
                 pools: {api: {dns: {name: api.internal, port: 9090, protocol: h2c}}}\n";
    let mut next = crate::config::load(text2, &crate::config::MapSecrets::new()).expect("valid");
    assert!(next.pools[1].backends.is_empty());
    carry_over(&previous, &mut next);
    let b = &next.pools[1].backends;
    assert_eq!(ids(b), ["api/10.0.0.1:9090", "api/10.0.0.2:9090"]);
    assert_eq!(b[0].protocol, Protocol::H2c);
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        3 => proptest::collection::vec(0u8..6, 0..6)
            .prop_map(|v| Answer::Addresses(v.into_iter().map(v4).collect())),
        1 => Just(Answer::NxDomain),
        1 => Just(Answer::ServFail),
        1 => Just(Answer::Timeout),
        1 => Just(Answer::Error),
    ]
}

proptest! {
    /// C-DISC-1: whatever the DNS says, a pool once filled is never emptied by it; every
    /// backend id is `<pool>/<address>:<port>` of an address of the last good answer; an answer
    /// equal to the set in force changes nothing; a WARN comes only with a change of state.
    #[test]
    fn c_disc_1_never_empties_ids_idempotent(answers in proptest::collection::vec(answer(), 1..40)) {
        let mut d = Discovery::new("p", &spec(), &[], T0);
        let mut in_force: Vec<BackendSpec> = Vec::new();
        let mut last: Option<Outcome> = None;
        let mut now = T0;
        for a in answers {
            now = now.saturating_add(core::time::Duration::from_secs(5));
            let before = in_force.clone();
            let out = d.on_answer(a.clone(), now);
            if let Some(set) = &out.apply {
                prop_assert!(!set.is_empty(), "DNS emptied the pool");
                in_force.clone_from(set);
            }
            if !before.is_empty() {
                prop_assert!(!in_force.is_empty());
            }
            prop_assert_eq!(out.warn, !out.outcome.is_ok() && last != Some(out.outcome));
            last = Some(out.outcome);
            for b in &in_force {
                let addr = address_of("p", &b.id).expect("id is <pool>/<address>:<port>");
                prop_assert_eq!(addr.port(), 8080);
                prop_assert!(d.addresses().contains(&addr.ip()));
                prop_assert_eq!(&b.url, &format!("http://{addr}"));
            }
            prop_assert_eq!(&d.backends(), &in_force);
            // Asking again with the same addresses is idempotent.
            if out.outcome.is_ok() {
                let again = d.on_answer(a, now);
                prop_assert_eq!(again.apply, None);
                prop_assert!(!again.warn && !again.recovered);
            }
        }
    }
}
