//! C-RATE-3: when the Sentinel store moves to another master, without sockets.

use super::*;

fn a(port: u16) -> Addr {
    Addr::new("10.0.0.1", port)
}

/// The master on `port` with configuration epoch `epoch`.
fn v(port: u16, epoch: u64) -> Option<View> {
    Some(View {
        addr: a(port),
        epoch,
    })
}

/// Three sentinels subscribed, all naming `port` with `epoch`, the store's connections there.
fn settled(port: u16, epoch: u64) -> Follow {
    let mut f = Follow::new(3);
    assert_eq!(f.using(Some(a(port))), None);
    for i in 0..3 {
        assert_eq!(f.said(i, v(port, epoch)), None);
    }
    f
}

#[test]
fn c_rate_3_only_switches_of_the_configured_master() {
    assert!(about("mymaster", "mymaster 10.0.0.1 6379 10.0.0.2 6380"));
    assert!(about("mymaster", "mymaster ::1 6379 2001:db8::7 6379"));
    assert!(about(
        "mymaster",
        "mymaster redis-0.svc 6379 redis-1.svc 6379"
    ));
    for other in [
        "othermaster 10.0.0.1 6379 10.0.0.2 6380",
        "mymaster2 10.0.0.1 6379 10.0.0.2 6380",
        "mymaster 10.0.0.1 6379 10.0.0.2",
        "mymaster 10.0.0.1 6379 10.0.0.2 6380 extra",
        "mymaster 10.0.0.1 6379 10.0.0.2 port",
        "mymaster 10.0.0.1 6379 10.0.0.2 70000",
        "mymaster 10.0.0.1 old 10.0.0.2 6380",
        "",
    ] {
        assert!(!about("mymaster", other), "{other:?}");
    }
}

#[test]
fn c_rate_3_sentinel_master_reply_gives_the_view() {
    let reply: Vec<String> = [
        "name",
        "mymaster",
        "ip",
        "10.0.0.2",
        "port",
        "6380",
        "runid",
        "abc",
        "flags",
        "master",
        "config-epoch",
        "7",
        "quorum",
        "2",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(
        view_of(&reply),
        Some(View {
            addr: Addr::new("10.0.0.2", 6380),
            epoch: 7
        })
    );
    // A field missing or not a number: no view.
    for drop in ["ip", "port", "config-epoch"] {
        let without: Vec<String> = reply
            .chunks_exact(2)
            .filter(|kv| kv[0] != drop)
            .flatten()
            .cloned()
            .collect();
        assert_eq!(view_of(&without), None, "{drop}");
    }
    let mut bad = reply.clone();
    bad[11] = "seven".to_owned();
    assert_eq!(view_of(&bad), None);
    assert_eq!(view_of(&[]), None);
}

/// The failover's leader is the first to say where the master went, with a greater epoch: the
/// store moves then, once; the others saying the same later changes nothing.
#[test]
fn c_rate_3_moves_on_the_first_newer_word() {
    let mut f = settled(6379, 4);
    assert_eq!(f.said(1, v(6380, 5)), Some(a(6380)));
    // The store moved.
    assert_eq!(f.using(Some(a(6380))), None);
    assert_eq!(f.said(0, v(6380, 5)), None);
    assert_eq!(f.said(2, v(6380, 5)), None);
    assert_eq!(f.said(1, v(6380, 5)), None);
}

/// Until the store has moved, every word that finds the newest master elsewhere says so again
/// (whoever sees it first moves the store).
#[test]
fn c_rate_3_repeats_until_the_store_moved() {
    let mut f = settled(6379, 0);
    assert_eq!(f.said(0, v(6380, 1)), Some(a(6380)));
    assert_eq!(f.said(1, v(6380, 1)), Some(a(6380)));
    assert_eq!(f.using(Some(a(6380))), None);
    assert_eq!(f.said(2, v(6380, 1)), None);
}

/// A sentinel that lags (it still names an earlier master, or announces an earlier switch
/// after the others announced a later one) is outvoted by the greater epoch, also when the
/// sentinel that gave the greater epoch is no longer subscribed: the store never goes back to
/// an older configuration.
#[test]
fn c_rate_3_never_back_to_an_older_configuration() {
    let mut f = settled(6380, 5);
    assert_eq!(f.said(0, v(6381, 6)), Some(a(6381)));
    assert_eq!(f.using(Some(a(6381))), None);
    // Sentinel 2 announces the earlier 6379 -> 6380 late.
    assert_eq!(f.said(2, v(6380, 5)), None);
    assert_eq!(f.newest().map(|n| n.addr.port), Some(6381));
    // The only sentinel with epoch 6 goes away; the two that lag name 6380 (epoch 5).
    f.lost(0);
    assert_eq!(f.newest().map(|n| n.addr.port), Some(6380));
    assert_eq!(f.said(1, v(6380, 5)), None, "the store stays on 6381");
    // They catch up.
    assert_eq!(f.said(1, v(6381, 6)), None);
    assert_eq!(f.said(2, v(6381, 6)), None);
}

/// The sentinel the redis crate asked named a master the others have replaced: the store
/// moves to the newest as soon as it opened its connections.
#[test]
fn c_rate_3_resolved_elsewhere_moves_to_the_newest() {
    let mut f = Follow::new(3);
    f.said(0, v(6379, 3));
    f.said(1, v(6380, 4));
    f.said(2, v(6379, 3));
    assert_eq!(f.using(Some(a(6379))), Some(a(6380)));
    assert_eq!(f.using(Some(a(6380))), None);
    // Resolved where the newest is: nothing to do.
    assert_eq!(f.using(None), None);
    assert_eq!(f.using(Some(a(6380))), None);
}

/// With no connections nothing moves (the next call opens them where the sentinels say); a
/// switch heard meanwhile is applied when they are opened.
#[test]
fn c_rate_3_nothing_moves_without_connections() {
    let mut f = settled(6379, 0);
    assert_eq!(f.using(None), None);
    assert_eq!(f.said(0, v(6380, 1)), None);
    assert_eq!(f.using(Some(a(6379))), Some(a(6380)));
    assert_eq!(f.using(Some(a(6380))), None);
}

/// Connections opened again after the old ones failed (the fallback) are trusted where they
/// are, even when that is an older epoch than the store knew: the sentinels were set up again
/// with their epochs reset, and all say so.
#[test]
fn c_rate_3_sentinels_set_up_again_are_followed_after_the_fallback() {
    let mut f = settled(6380, 9);
    for i in 0..3 {
        f.lost(i);
        assert_eq!(f.said(i, v(7000, 0)), None, "older than the master in use");
    }
    // The old master fails; the next call asks the sentinels, which name 7000.
    assert_eq!(f.using(None), None);
    assert_eq!(f.using(Some(a(7000))), None);
    assert_eq!(f.newest().map(|n| n.addr.port), Some(7000));
    // And from there on, switches are followed again.
    assert_eq!(f.said(2, v(7001, 1)), Some(a(7001)));
}

/// A sentinel whose subscription ended does not count until it is subscribed again; what it
/// says then (a switch made while the store could not hear it) counts.
#[test]
fn c_rate_3_a_lost_subscription_does_not_count() {
    let mut f = settled(6379, 2);
    for i in 0..3 {
        f.lost(i);
    }
    assert_eq!(f.newest(), None);
    assert_eq!(f.said(1, v(6380, 3)), Some(a(6380)));
    assert_eq!(f.using(Some(a(6380))), None);
    // A sentinel that does not know the master does not count either.
    f.lost(1);
    assert_eq!(f.said(1, None), None);
    assert_eq!(f.newest(), None);
}

/// Sentinels that give different addresses with the same epoch (epoch 0: set up to monitor
/// different addresses): the one in use stays; without one in use, the first sentinel's.
#[test]
fn c_rate_3_same_epoch_keeps_the_master_in_use() {
    let mut f = Follow::new(3);
    f.said(0, v(6379, 0));
    f.said(1, v(6380, 0));
    assert_eq!(f.newest().map(|n| n.addr.port), Some(6379));
    assert_eq!(f.using(Some(a(6380))), None);
    assert_eq!(f.newest().map(|n| n.addr.port), Some(6380));
    assert_eq!(f.said(2, v(6379, 0)), None);
}

/// The epoch of the master in use is learned from the sentinels: a later word naming another
/// master with the same epoch (a sentinel set up wrongly) does not move the store.
#[test]
fn c_rate_3_equal_epoch_elsewhere_does_not_move() {
    let mut f = Follow::new(2);
    assert_eq!(f.using(Some(a(6379))), None);
    assert_eq!(f.said(0, v(6379, 3)), None);
    f.lost(0);
    assert_eq!(f.said(1, v(6390, 3)), None);
    assert_eq!(f.said(1, v(6390, 4)), Some(a(6390)));
}

/// An index past the configured sentinels changes nothing (it cannot happen: one task per
/// configured sentinel).
#[test]
fn c_rate_3_unknown_sentinel_is_ignored() {
    let mut f = settled(6379, 0);
    assert_eq!(f.said(7, v(6380, 1)), None);
    f.lost(7);
    assert_eq!(f.newest().map(|n| n.addr.port), Some(6379));
}

#[test]
fn resubscribe_backs_off_to_a_second() {
    let ms: Vec<u128> = (0..8).map(|n| resubscribe_delay(n).as_millis()).collect();
    assert_eq!(ms, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
    assert_eq!(resubscribe_delay(u32::MAX), Duration::from_secs(1));
}
