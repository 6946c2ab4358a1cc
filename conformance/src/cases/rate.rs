//! C-RATE: the local token bucket, its headers, client keys and the bounded local store.

use std::net::{IpAddr, Ipv4Addr};
use std::ops::RangeInclusive;
use std::time::Instant;

use super::{expect_status, expect_weir_error};
use crate::backend::Backend;
use crate::client::{Req, Resp, get, send};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::{ms, secs};

/// Checks the rate-limit headers; `remaining` is the whole tokens left, within a range where
/// the refill since the first take depends on how fast the case ran.
#[track_caller]
fn expect_rate_headers(
    r: &Resp,
    limit: &str,
    remaining: RangeInclusive<u64>,
    refill: &str,
    what: &str,
) {
    assert_eq!(
        r.header("x-ratelimit-limit").as_deref(),
        Some(limit),
        "{what}: X-RateLimit-Limit"
    );
    let left = r.header("x-ratelimit-remaining");
    assert!(
        left.as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| remaining.contains(&n)),
        "{what}: X-RateLimit-Remaining {left:?}, want {remaining:?}"
    );
    assert_eq!(
        r.header("x-ratelimit-refill-per-second").as_deref(),
        Some(refill),
        "{what}: X-RateLimit-Refill-Per-Second"
    );
    assert_eq!(
        r.header("x-ratelimit-storage").as_deref(),
        Some("local"),
        "{what}: X-RateLimit-Storage"
    );
    assert!(
        r.header("x-ratelimit-degraded").is_none(),
        "{what}: degraded with the local store"
    );
}

/// C-RATE-1: a full bucket of `capacity`, one token per request, headers on allowed and denied
/// responses, `429` with `Retry-After` rounded up, and refill over time.
///
/// Tokens come back at 0.5/s from the first take, which is no earlier than the first request
/// was sent: a response read `t` after that may see up to `0.5 t` tokens more than the takes
/// alone leave (none when the case runs at normal speed), and no request is allowed again
/// before 2 s. Every expectation below allows for that refill, so it holds however slowly the
/// requests go.
pub async fn c_rate_1_bucket_headers_and_429(bin: Binary) {
    let b = Backend::start("rl-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b]).rate_limit(3, 0.5)).await;
    let first_sent = Instant::now();
    let refilled = || (0.5 * first_sent.elapsed().as_secs_f64()) as u64;
    for (i, least) in [2, 1, 0].into_iter().enumerate() {
        let r = get(p.public, "/r").await;
        expect_status(&r, 200, &format!("request {i}"));
        let most = (least + refilled()).min(2);
        expect_rate_headers(
            &r,
            "3",
            least..=most,
            "0.5",
            &format!("allowed request {i}"),
        );
    }
    // Denied until a token came back (at normal speed, the first request after the three).
    let mut allowed = 3;
    let (r, since_first) = loop {
        let r = send(p.public, &Req::get("/r").header("x-request-id", "denied-1")).await;
        let since_first = first_sent.elapsed();
        if r.status != 200 {
            break (r, since_first);
        }
        assert!(
            since_first >= ms(1900),
            "request {allowed} allowed {since_first:?} after the first, at 0.5 tokens/s"
        );
        assert!(since_first < secs(30), "never denied");
        allowed += 1;
    };
    let denied_at = Instant::now();
    expect_weir_error(&r, 429, "bucket empty");
    expect_rate_headers(&r, "3", 0..=0, "0.5", "denied request");
    // Retry-After is the time to one token, 2 s less the refill since the first take, rounded
    // up: 2 while less than 1 s has passed.
    let want: &[&str] = if since_first < secs(1) {
        &["2"]
    } else {
        &["1", "2"]
    };
    let retry_after = r.header("retry-after");
    assert!(
        retry_after.as_deref().is_some_and(|v| want.contains(&v)),
        "Retry-After {retry_after:?} {since_first:?} after the first take, want one of {want:?}"
    );
    assert_eq!(r.header("x-request-id").as_deref(), Some("denied-1"));
    assert_eq!(b.count(), allowed, "a denied request reached the backend");
    // Refill is continuous: allowed again about 2s after the bucket emptied.
    loop {
        let r = get(p.public, "/r").await;
        if r.status == 200 {
            let most = refilled().saturating_sub(1).min(2);
            expect_rate_headers(&r, "3", 0..=most, "0.5", "allowed after refill");
            break;
        }
        expect_status(&r, 429, "still empty");
        assert!(
            denied_at.elapsed() < secs(30),
            "no refill after 30s at 0.5 tokens/s"
        );
        tokio::time::sleep(ms(100)).await;
    }
    let waited = first_sent.elapsed();
    assert!(
        waited >= ms(1900),
        "a token came back {waited:?} after the first take, at 0.5/s"
    );
}

/// C-RATE-1: with `rate_limit.enabled: false` nothing is limited and no rate-limit headers are sent.
pub async fn c_rate_1_disabled_means_no_limit(bin: Binary) {
    let b = Backend::start("rl-1").await;
    let cfg = Config::new(&[&b])
        .set("rate_limit.enabled", false)
        .set("rate_limit.capacity", 1);
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..10 {
        let r = get(p.public, "/r").await;
        expect_status(&r, 200, &format!("request {i}"));
        assert!(
            r.header("x-ratelimit-limit").is_none(),
            "rate-limit headers with the limiter off"
        );
    }
}

/// C-RATE-2 (and C-FWD-1): IPv4 clients are keyed by `ipv4_prefix_bits`.
pub async fn c_rate_2_ipv4_prefix_aggregation(bin: Binary) {
    let b = Backend::start("rl-1").await;
    let two = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    for (bits, second) in [(32, 200), (24, 429)] {
        let cfg = Config::new(&[&b])
            .rate_limit(1, 0.001)
            .set("rate_limit.ipv4_prefix_bits", bits);
        let p = Proxy::start(&bin, &cfg).await;
        expect_status(
            &get(p.public, "/one").await,
            200,
            &format!("/{bits}: 127.0.0.1"),
        );
        let r = send(p.public, &Req::get("/two").from_ip(two)).await;
        expect_status(&r, second, &format!("/{bits}: 127.0.0.2 after 127.0.0.1"));
    }
}

/// C-RATE-2 (and C-FWD-1): clients behind a trusted proxy have their own buckets; IPv6 clients
/// are keyed by `ipv6_prefix_bits` (64).
pub async fn c_rate_2_keys_behind_trusted_proxy_and_ipv6_prefix(bin: Binary) {
    let b = Backend::start("rl-1").await;
    let cfg = Config::new(&[&b])
        .rate_limit(1, 0.001)
        .trusted(&["127.0.0.2/32"]);
    let p = Proxy::start(&bin, &cfg).await;
    let via = |xff: &str| {
        Req::get("/k")
            .header("x-forwarded-for", xff)
            .from_127_0_0_2()
    };
    for (xff, want) in [
        ("203.0.113.1", 200),
        ("203.0.113.2", 200),
        ("203.0.113.1", 429),
        ("2001:db8::1", 200),
        ("2001:db8::2", 429),
        ("2001:db8:0:0:ffff::9", 429),
        ("2001:db8:0:1::1", 200),
    ] {
        let r = send(p.public, &via(xff)).await;
        expect_status(&r, want, &format!("client {xff}"));
    }
    // An untrusted peer's header is ignored: both requests share the peer's bucket.
    expect_status(
        &send(
            p.public,
            &Req::get("/k").header("x-forwarded-for", "198.51.100.1"),
        )
        .await,
        200,
        "peer",
    );
    expect_status(
        &send(
            p.public,
            &Req::get("/k").header("x-forwarded-for", "198.51.100.2"),
        )
        .await,
        429,
        "peer again",
    );
}

/// C-RATE-4: the local store holds at most `local_max_buckets`; when full it evicts (old
/// buckets go, and a returning client starts full).
pub async fn c_rate_4_local_store_evicts_when_full(bin: Binary) {
    let b = Backend::start("rl-1").await;
    let cfg = Config::new(&[&b])
        .rate_limit(1, 0.001)
        .trusted(&["127.0.0.2/32"])
        .set("rate_limit.local_max_buckets", 2)
        .set("rate_limit.local_shards", 1);
    let p = Proxy::start(&bin, &cfg).await;
    let via = |xff: String| {
        Req::get("/e")
            .header("x-forwarded-for", &xff)
            .from_127_0_0_2()
    };
    expect_status(
        &send(p.public, &via("203.0.113.1".into())).await,
        200,
        "first client",
    );
    expect_status(
        &send(p.public, &via("203.0.113.1".into())).await,
        429,
        "first client, bucket kept",
    );
    for i in 2..12 {
        expect_status(
            &send(p.public, &via(format!("203.0.113.{i}"))).await,
            200,
            &format!("client {i}"),
        );
    }
    expect_status(
        &send(p.public, &via("203.0.113.1".into())).await,
        200,
        "first client after 10 newer clients filled a 2-bucket store: evicted, starts full",
    );
}

/// C-RATE-8, the issue's acceptance figure: `rate_limit.dry_run` with a capacity of 5 and a slow
/// refill lets all of 12 requests through (`200`), 7 of them counted as
/// `load_balancer_rate_limit_decisions_total{result="dry_run_limited"}` and marked in the
/// access log; every response carries `RateLimit-Policy: "default";q=5;...` and `RateLimit`.
/// Then `PATCH` of `dry_run: false` enforces: `429` with `Retry-After` and `r=0`.
pub async fn c_rate_8_dry_run_counts_and_passes_then_patch_enforces(bin: Binary) {
    let b = Backend::start("dr-1").await;
    let cfg = Config::new(&[&b])
        .rate_limit(5, 0.01)
        .set("rate_limit.dry_run", true)
        .management()
        .set("management.runtime_mutations", true);
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..12 {
        let rid = format!("dry-{i}");
        let r = send(p.public, &Req::get("/d").header("x-request-id", &rid)).await;
        expect_status(&r, 200, &format!("dry-run request {i}"));
        assert_eq!(
            r.header("ratelimit-policy").as_deref(),
            Some("\"default\";q=5;w=500"),
            "request {i}"
        );
        let left = 4u64.saturating_sub(i);
        assert_eq!(
            r.header("ratelimit").as_deref(),
            Some(format!("\"default\";r={left};t=100").as_str()),
            "request {i}"
        );
        assert!(r.header("retry-after").is_none(), "request {i}");
    }
    assert_eq!(b.count(), 12, "dry run passed every request on");
    let text = super::obs::metrics(&p).await;
    let count = |result: &str| {
        crate::util::metric(
            &text,
            "load_balancer_rate_limit_decisions_total",
            &format!("result=\"{result}\""),
        )
    };
    assert_eq!(count("dry_run_limited"), Some(7.0), "{text}");
    assert_eq!(count("allowed"), Some(5.0), "{text}");
    assert_eq!(count("limited"), Some(0.0), "{text}");
    // The access log marks the seven (successes are sampled; these lines are always written).
    let marked = crate::util::eventually(secs(5), "seven marked access lines", || {
        let n = p
            .logs()
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "weir::access" && v["fields"]["reason"] == "dry_run_limited")
            .count();
        async move { (n >= 7).then_some(n) }
    })
    .await;
    assert_eq!(marked, 7);
    // Enforce: the bucket is as dry run left it, empty.
    let m = p.management.expect("management listener");
    let auth = format!("Bearer {}", crate::config::ADMIN_TOKEN);
    let patch = Req::new("PATCH", "/api/dashboard/config")
        .header("authorization", &auth)
        .header("content-type", "application/json")
        .header("x-balancer-csrf", "1")
        .body(r#"{"rate_limit": {"dry_run": false}}"#);
    let r = send(m, &patch).await;
    assert!(r.status < 300, "PATCH dry_run: {} {}", r.status, r.text());
    let r = get(p.public, "/d").await;
    expect_weir_error(&r, 429, "enforced after the PATCH");
    let retry_after = r.header("retry-after");
    assert!(
        retry_after
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "Retry-After {retry_after:?}"
    );
    let state = r.header("ratelimit").unwrap_or_default();
    assert!(
        state.starts_with("\"default\";r=0;t="),
        "RateLimit {state:?}"
    );
    assert_eq!(b.count(), 12, "the denied request reached the backend");
}
