//! C-DISC: pools fed by DNS, against a DNS server the case runs ([`crate::dns`]) and backends
//! on loopback aliases (127.0.0.2, 127.0.0.3, ...: Linux routes all of 127/8 to `lo`), all on
//! one port, as the addresses of one name are.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;

use super::expect_status;
use super::obs::metrics;
use crate::backend::Backend;
use crate::client::get;
use crate::config::Config;
use crate::dns::{DnsServer, Zone};
use crate::harness::{Binary, Proxy};
use crate::util::{metric, ms, secs};

const NAME: &str = "svc.weir.test";

/// `127.0.0.<last>`.
fn lo(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// Backends on `127.0.0.<first..first+n>`, all on one port (chosen by the OS for the first, tried
/// again with another when an alias has it taken).
async fn backends_on_one_port(prefix: &str, first: u8, n: u8) -> (u16, Vec<Backend>) {
    'again: for _ in 0..20 {
        let b0 = Backend::start_at(
            &format!("{prefix}-{first}"),
            SocketAddr::new(lo(first).into(), 0),
        )
        .await
        .expect("bind loopback alias");
        let port = b0.addr().port();
        let mut all = vec![b0];
        for last in first + 1..first + n {
            match Backend::start_at(
                &format!("{prefix}-{last}"),
                SocketAddr::new(lo(last).into(), port),
            )
            .await
            {
                Ok(b) => all.push(b),
                Err(_) => continue 'again,
            }
        }
        return (port, all);
    }
    panic!("no port free on every loopback alias");
}

/// A proxy whose only pool `svc` is fed by `NAME` at `dns`, every `interval`.
fn dns_config(dns: &DnsServer, port: u16, interval: &str) -> Config {
    Config::new(&[])
        .set("server.resolver", json!([dns.addr().to_string()]))
        .set(
            "pools.svc.dns",
            json!({"name": NAME, "port": port, "interval": interval}),
        )
        .route("/", "svc", None)
        .management()
}

/// The `event` lines logged so far (docs/operations.md, "Log events").
fn events(p: &Proxy, event: &str) -> Vec<serde_json::Value> {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["event"] == event)
        .collect()
}

/// `GET /` every 10 ms for `d`, each answered `200`; returns how many were sent.
async fn all_200_for(p: &Proxy, d: Duration, what: &str) -> usize {
    let end = Instant::now() + d;
    let mut n = 0;
    while Instant::now() < end {
        let r = get(p.public, "/").await;
        expect_status(&r, 200, what);
        n += 1;
        tokio::time::sleep(ms(10)).await;
    }
    n
}

/// C-DISC-1: a name with three A records spreads requests over all three; after the answer
/// changes (one address removed, one added) the added one gets traffic and the removed one none
/// within two intervals, every request meanwhile answered `200`.
pub async fn c_disc_1_every_address_is_a_backend_and_changes_follow_within_two_intervals(
    bin: Binary,
) {
    let dns = DnsServer::start().await;
    let (port, b) = backends_on_one_port("disc", 2, 4).await;
    dns.set(NAME, Zone::Records(vec![lo(2), lo(3), lo(4)]));
    let interval = secs(1);
    let p = Proxy::start(&bin, &dns_config(&dns, port, "1s")).await;
    for _ in 0..60 {
        expect_status(&get(p.public, "/").await, 200, "three A records");
    }
    for x in &b[..3] {
        assert!(
            x.count() >= 10,
            "{} got {} of 60: {}",
            x.id(),
            x.count(),
            x.summary()
        );
    }
    assert_eq!(b[3].count(), 0, "127.0.0.5 is not in the answer");

    // 127.0.0.2 leaves, 127.0.0.5 joins.
    dns.set(NAME, Zone::Records(vec![lo(3), lo(4), lo(5)]));
    let changed = Instant::now();
    let mut added_at = None;
    let mut removed_last = changed;
    let mut removed_count = b[0].count();
    while changed.elapsed() < interval * 2 + secs(1) {
        let r = get(p.public, "/").await;
        expect_status(&r, 200, "while the answer changes");
        if added_at.is_none() && b[3].count() > 0 {
            added_at = Some(changed.elapsed());
        }
        if b[0].count() != removed_count {
            removed_count = b[0].count();
            removed_last = Instant::now();
        }
        tokio::time::sleep(ms(10)).await;
    }
    let added = added_at.expect("the added address got no request");
    let removed = removed_last.saturating_duration_since(changed);
    eprintln!(
        "C-DISC-1 figures: added address served after {added:?}, removed one's last request after {removed:?} (interval {interval:?})"
    );
    assert!(
        added <= interval * 2,
        "added address first served after {added:?}"
    );
    assert!(
        removed <= interval * 2,
        "removed address served until {removed:?}"
    );
    // And from now on, none for the removed one; the others share.
    let before = [b[0].count(), b[1].count(), b[2].count(), b[3].count()];
    for _ in 0..60 {
        expect_status(&get(p.public, "/").await, 200, "after the change");
    }
    assert_eq!(b[0].count(), before[0], "removed address got a request");
    for (i, x) in b.iter().enumerate().skip(1) {
        assert!(x.count() >= before[i] + 10, "{}: {}", x.id(), x.summary());
    }
    let m = metrics(&p).await;
    let ok = metric(&m, "load_balancer_dns_resolutions_total", "result=\"ok\"").unwrap_or(0.0);
    assert!(ok >= 2.0, "ok resolutions: {ok}\n{m}");
    assert_eq!(
        events(&p, "dns_changed").len(),
        2,
        "the first answer and the change"
    );
}

/// C-DISC-1: SERVFAIL, then NXDOMAIN, each for several intervals: the pool keeps serving on its
/// last good set; one WARN per change of result; every resolution counted by result.
pub async fn c_disc_1_servfail_then_nxdomain_keep_the_last_good_set(bin: Binary) {
    let dns = DnsServer::start().await;
    let (port, b) = backends_on_one_port("fail", 6, 2).await;
    dns.set(NAME, Zone::Records(vec![lo(6), lo(7)]));
    let p = Proxy::start(&bin, &dns_config(&dns, port, "1s")).await;
    all_200_for(&p, ms(300), "before").await;
    let served = |b: &[Backend]| [b[0].count(), b[1].count()];

    for (zone, result) in [(Zone::ServFail, "servfail"), (Zone::NxDomain, "nxdomain")] {
        dns.set(NAME, zone);
        let before = served(&b);
        all_200_for(&p, ms(3500), result).await;
        let after = served(&b);
        assert!(
            after[0] > before[0] + 10 && after[1] > before[1] + 10,
            "{result}: both backends keep serving: {before:?} -> {after:?}"
        );
        let m = metrics(&p).await;
        let label = format!("pool=\"svc\",result=\"{result}\"");
        let n = metric(&m, "load_balancer_dns_resolutions_total", &label).unwrap_or(0.0);
        assert!(n >= 2.0, "{result} resolutions counted: {n}\n{m}");
    }
    let warns = events(&p, "dns_failed");
    let results: Vec<&str> = warns
        .iter()
        .filter_map(|v| v["fields"]["result"].as_str())
        .collect();
    assert_eq!(
        results,
        ["servfail", "nxdomain"],
        "one WARN per change of result"
    );
    assert!(warns.iter().all(|v| v["level"] == "WARN"), "{warns:?}");

    dns.set(NAME, Zone::Records(vec![lo(6), lo(7)]));
    crate::util::eventually(secs(5), "a dns_recovered line", || {
        let found = !events(&p, "dns_recovered").is_empty();
        async move { found.then_some(()) }
    })
    .await;
    assert!(dns.queries() >= 8, "asked {} times", dns.queries());
}

/// C-DISC-2: a backend whose URL has a host name follows the name: with `health_check.interval`
/// at its default 5 s, the traffic moves to the name's new address within 8 s of the change,
/// every request answered `200`, and the old address gets nothing after (its pooled
/// connections closed).
pub async fn c_disc_2_backend_host_name_moving_moves_the_traffic(bin: Binary) {
    let dns = DnsServer::start().await;
    let (port, b) = backends_on_one_port("host", 8, 2).await;
    let host = "app.weir.test";
    dns.set(host, Zone::Records(vec![lo(8)]));
    let cfg = Config::with_entries(vec![
        crate::config::entry(&b[0]).url(&format!("http://{host}:{port}")),
    ])
    .set("server.resolver", json!([dns.addr().to_string()]))
    .set("health_check.interval", "5s");
    let p = Proxy::start(&bin, &cfg).await;
    all_200_for(&p, ms(300), "before the move").await;
    assert!(
        b[0].count() > 5 && b[1].count() == 0,
        "{} / {}",
        b[0].summary(),
        b[1].summary()
    );

    dns.set(host, Zone::Records(vec![lo(9)]));
    let moved = Instant::now();
    let mut first_new = None;
    let mut last_old = moved;
    let mut old = b[0].count();
    while moved.elapsed() < secs(9) {
        let r = get(p.public, "/").await;
        expect_status(&r, 200, "while the name moves");
        if first_new.is_none() && b[1].count() > 0 {
            first_new = Some(moved.elapsed());
        }
        if b[0].count() != old {
            old = b[0].count();
            last_old = Instant::now();
        }
        tokio::time::sleep(ms(20)).await;
    }
    let first_new = first_new.expect("the new address got no request within 9 s");
    let last_old = last_old.saturating_duration_since(moved);
    eprintln!(
        "C-DISC-2 figures: new address served after {first_new:?}, old one's last request after {last_old:?}"
    );
    assert!(first_new <= secs(8), "moved after {first_new:?}");
    assert!(last_old <= secs(8), "old address served until {last_old:?}");
}
