//! The engine's part of request mirroring (C-MIRROR-1): the draw, the body, the bound, the
//! mirror pool's selection, and that the primary's attempts are what they would be without it.

use http::Method;

use super::tests::{Fixture, Req, T0, at};
use super::*;
use crate::mirror::{MirrorEnd, MirrorResult};

/// A default pool of one backend, a shadow pool of two, the route `/` mirrored to it.
fn config(mirror: &str, extra_server: &str) -> String {
    format!(
        "
server:
  upstream:
    mirror_max_in_flight: 2
{extra_server}
backends:
  - id: a
    url: http://10.0.0.1:80
pools:
  shadow:
    backends:
      - id: s1
        url: http://10.0.9.1:80
      - id: s2
        url: http://10.0.9.2:80
routes:
  - prefix: /
    pool: default
    mirror: {mirror}
"
    )
}

fn mirrors(out: &[Output]) -> Vec<MirrorSend> {
    out.iter()
        .filter_map(|o| match o {
            Output::Mirror(m) => Some(*m),
            _ => None,
        })
        .collect()
}

fn counted(out: &[Output]) -> Vec<MirrorResult> {
    out.iter()
        .filter_map(|o| match o {
            Output::Metric(Metric::Mirror(r)) => Some(*r),
            _ => None,
        })
        .collect()
}

fn sends(out: &[Output]) -> Vec<Send> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send(s) => Some(*s),
            _ => None,
        })
        .collect()
}

fn shadow_in_flight(f: &Fixture) -> u32 {
    let pool = f.rt.pool(1).expect("shadow pool");
    pool.backends().iter().map(|b| b.in_flight()).sum()
}

#[test]
fn c_mirror_1_a_post_body_is_buffered_and_the_mirror_goes_out_before_the_first_attempt() {
    let mut f = Fixture::new(&config("{pool: shadow}", ""), StorageKind::Local);
    let post = Req::get("/orders").with(Method::POST, BodyInfo::Sized(5));
    let (mut x, out) = f.start(&post, T0);
    // POST is not retryable, yet its body is buffered: the mirror needs the same bytes.
    assert!(out.contains(&Output::BufferBody { len: 5 }), "{out:?}");
    assert!(mirrors(&out).is_empty(), "no mirror before the body is in");
    let out = f.feed(&mut x, Input::BodyBuffered, at(1));
    let m = mirrors(&out);
    assert_eq!(m.len(), 1, "{out:?}");
    assert_eq!(m[0].pool, 1);
    assert_eq!(m[0].body, SendBody::Buffered);
    assert_eq!(counted(&out), vec![MirrorResult::Sent]);
    let pos_mirror = out.iter().position(|o| matches!(o, Output::Mirror(_)));
    let pos_send = out.iter().position(|o| matches!(o, Output::Send(_)));
    assert!(
        pos_mirror < pos_send,
        "the mirror is announced before the attempt"
    );
    // The primary attempt is as before: buffered, but not replayable (POST, C-RETRY-1).
    let s = sends(&out);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].body, SendBody::Buffered);
    assert!(!s[0].replayable);
    let mirror = x.take_mirror().expect("the mirror is the adapter's");
    assert!(x.take_mirror().is_none(), "taken once");
    assert_eq!(shadow_in_flight(&f), 1);
    assert_eq!(f.services.mirrors().current(), 1);
    let _ = mirror.finish(MirrorEnd::Status(200), f.rt.retry(), at(2));
    assert_eq!(shadow_in_flight(&f), 0);
    assert_eq!(f.services.mirrors().current(), 0);
}

#[test]
fn c_mirror_1_a_body_over_the_limit_or_unannounced_skips_the_mirror_and_streams() {
    let yaml = config("{pool: shadow}", "  retry:\n    body_limit: 10");
    let mut f = Fixture::new(&yaml, StorageKind::Local);
    for body in [BodyInfo::Sized(11), BodyInfo::Unsized] {
        let post = Req::get("/up").with(Method::POST, body);
        let (mut x, out) = f.start(&post, T0);
        assert_eq!(counted(&out), vec![MirrorResult::Skipped], "{body:?}");
        assert!(mirrors(&out).is_empty());
        let s = sends(&out);
        assert!(
            matches!(s[0].body, SendBody::Stream { .. }),
            "the primary streams as before"
        );
        assert!(x.take_mirror().is_none());
        assert_eq!(shadow_in_flight(&f), 0);
    }
}

#[test]
fn c_mirror_1_over_mirror_max_in_flight_a_mirror_is_dropped_and_counted() {
    let mut f = Fixture::new(&config("{pool: shadow}", ""), StorageKind::Local);
    let mut held = Vec::new();
    for i in 0..3 {
        let (mut x, out) = f.start(&Req::get("/a"), at(i));
        let expect = if i < 2 {
            MirrorResult::Sent
        } else {
            MirrorResult::Dropped
        };
        assert_eq!(counted(&out), vec![expect], "request {i}");
        assert_eq!(sends(&out).len(), 1, "the primary is sent either way");
        if let Some(m) = x.take_mirror() {
            held.push(m);
        }
    }
    assert_eq!(f.services.mirrors().current(), 2);
    drop(held);
    assert_eq!(f.services.mirrors().current(), 0);
    let (_x, out) = f.start(&Req::get("/a"), at(9));
    assert_eq!(
        counted(&out),
        vec![MirrorResult::Sent],
        "a place is free again"
    );
}

#[test]
fn c_mirror_1_percent_draws_that_share_from_the_engines_random_source() {
    let mut f = Fixture::new(
        &config("{pool: shadow, percent: 25}", ""),
        StorageKind::Local,
    );
    let mut sent = 0;
    for i in 0..2000 {
        let (_x, out) = f.start(&Req::get("/p"), at(i));
        sent += counted(&out).len();
    }
    assert!((400..=600).contains(&sent), "25 % of 2000, got {sent}");
    let mut none = Fixture::new(
        &config("{pool: shadow, percent: 0}", ""),
        StorageKind::Local,
    );
    let (_x, out) = none.start(&Req::get("/p"), T0);
    assert!(counted(&out).is_empty() && mirrors(&out).is_empty());
}

#[test]
fn c_mirror_1_a_dead_mirror_pool_drops_the_mirror_and_leaves_the_primary_alone() {
    let yaml = config("{pool: shadow}", "");
    let mut f = Fixture::new(&yaml, StorageKind::Local);
    let mut plain = Fixture::new(
        &yaml.replace("    mirror: {pool: shadow}\n", ""),
        StorageKind::Local,
    );
    for b in f.rt.pool(1).expect("shadow").backends() {
        b.set_healthy(false, T0);
    }
    let (_x, out) = f.start(&Req::get("/d"), T0);
    assert_eq!(counted(&out), vec![MirrorResult::Dropped]);
    let (_y, base) = plain.start(&Req::get("/d"), T0);
    assert_eq!(sends(&out), sends(&base), "the primary attempt is the same");
}

#[test]
fn c_mirror_1_a_mirror_outcome_feeds_only_the_mirror_pools_backend() {
    let mut f = Fixture::new(&config("{pool: shadow}", ""), StorageKind::Local);
    for i in 0..2 {
        let (mut x, _) = f.start(&Req::get("/h"), at(i));
        let m = x.take_mirror().expect("mirror");
        let _ = m.finish(MirrorEnd::Status(503), f.rt.retry(), at(i + 1));
    }
    let shadow = f.rt.pool(1).expect("shadow");
    let failures: u64 = shadow.backends().iter().map(|b| b.passive_failures()).sum();
    assert_eq!(
        failures, 2,
        "each 503 is a passive failure of a shadow backend"
    );
    let primary = f.rt.pool(0).expect("default");
    assert_eq!(primary.backends()[0].passive_failures(), 0);
}

#[test]
fn c_mirror_1_a_request_answered_before_its_first_attempt_gives_the_mirror_back() {
    let yaml = config("{pool: shadow}", "");
    let mut f = Fixture::new(&yaml, StorageKind::Local);
    let post = Req::get("/b").with(Method::POST, BodyInfo::Sized(3));
    let (mut x, _) = f.start(&post, T0);
    assert_eq!(
        f.services.mirrors().current(),
        1,
        "reserved while the body is read"
    );
    let out = f.feed(&mut x, Input::BodyUnreadable, at(1));
    assert!(mirrors(&out).is_empty());
    assert!(x.take_mirror().is_none());
    assert_eq!(f.services.mirrors().current(), 0);
    assert_eq!(shadow_in_flight(&f), 0);
}
