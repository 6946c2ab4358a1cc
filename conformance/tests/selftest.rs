//! Self-tests of the suite's own machinery (backends, clients, config builder), without a proxy:
//! a conformance case is only as good as the backend behaviour it relies on.

use std::time::Duration;

use weir_conformance::backend::{Backend, End, Mode};
use weir_conformance::client::{Raw, Req, get, send, try_send};
use weir_conformance::config::{Config, entry};
use weir_conformance::util::{secs, wait_until};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn ok_mode_records_the_request_and_probes_apart() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        let r = send(
            b.addr(),
            &Req::post("/a%2Fb?q=1", "body")
                .header("x-one", "1")
                .header("x-one", "2"),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "backend b-1\n");
        let rec = b.last().expect("recorded");
        assert_eq!(rec.target, "/a%2Fb?q=1");
        assert_eq!(rec.method, "POST");
        assert_eq!(&rec.body[..], b"body");
        assert_eq!(rec.header_all("x-one"), ["1", "2"]);
        assert!(matches!(rec.end(), Some((End::Completed, _))));
        let r = get(b.addr(), "/health").await;
        assert_eq!(r.status, 200);
        b.set_health(503);
        assert_eq!(get(b.addr(), "/health").await.status, 503);
        assert_eq!(b.count(), 1);
        assert_eq!(b.probe_count(), 2);
    });
}

#[test]
fn reset_and_close_fail_the_client() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        b.set_mode(Mode::Reset);
        let e = try_send(b.addr(), &Req::get("/r"))
            .await
            .expect_err("reset");
        assert!(e.contains("request failed"), "{e}");
        b.set_mode(Mode::CloseWithoutAnswer);
        let e = try_send(b.addr(), &Req::get("/c"))
            .await
            .expect_err("closed");
        assert!(e.contains("request failed"), "{e}");
        assert_eq!(b.count(), 2);
        // Probes still answer in these modes.
        assert_eq!(get(b.addr(), "/health").await.status, 200);
    });
}

#[test]
fn hanging_body_is_cancelled_when_the_client_leaves() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        b.set_mode(Mode::StatusThenHang(503));
        let mut c = weir_conformance::client::Conn::open(b.addr(), None)
            .await
            .expect("connect");
        let head = c.send_head(&Req::get("/h")).await.expect("head");
        assert_eq!(head.status(), 503);
        assert_eq!(b.in_flight(), 1);
        drop(head);
        drop(c);
        let rec = b.last().expect("recorded");
        wait_until(secs(5), "cancelled", || {
            matches!(rec.end(), Some((End::Cancelled, _)))
        })
        .await;
        wait_until(secs(5), "in flight 0", || b.in_flight() == 0).await;
    });
}

#[test]
fn hold_waits_for_release() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        b.set_mode(Mode::Hold);
        let addr = b.addr();
        let h = tokio::spawn(async move { get(addr, "/held").await });
        b.wait_in_flight(1, secs(5)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!h.is_finished());
        b.release_all();
        let r = h.await.expect("join");
        assert_eq!(r.status, 200);
    });
}

#[test]
fn upgrade_echoes() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        let mut c = Raw::connect(b.addr()).await;
        c.write(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        )
        .await
        .unwrap();
        let head = c.read_head(secs(5)).await.expect("head");
        assert_eq!(head.status, 101);
        c.write(b"ping").await.unwrap();
        assert_eq!(c.read_exact(4, secs(5)).await.unwrap(), b"ping");
        assert_eq!(b.in_flight(), 1);
        drop(c);
        wait_until(secs(5), "tunnel closed", || b.in_flight() == 0).await;
    });
}

#[test]
fn down_refuses_and_up_serves_again() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        assert_eq!(get(b.addr(), "/x").await.status, 200);
        b.down().await;
        assert!(tokio::net::TcpStream::connect(b.addr()).await.is_err());
        b.up().await;
        assert_eq!(get(b.addr(), "/x").await.status, 200);
    });
}

#[test]
fn slow_body_and_sse_stream() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        b.set_mode(Mode::SlowBody {
            chunks: 3,
            interval: Duration::from_millis(20),
        });
        assert_eq!(
            get(b.addr(), "/s").await.text(),
            "chunk 0\nchunk 1\nchunk 2\n"
        );
        b.set_mode(Mode::Sse {
            events: 2,
            interval: Duration::from_millis(20),
        });
        let r = get(b.addr(), "/e").await;
        assert_eq!(r.text(), "data: 0\n\ndata: 1\n\n");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/event-stream")
        );
    });
}

#[test]
fn raw_client_reads_chunked_and_sized_responses() {
    rt().block_on(async {
        let b = Backend::start("b-1").await;
        let mut c = Raw::connect(b.addr()).await;
        c.write(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (head, body) = c.read_response(secs(5)).await.expect("response");
        assert_eq!(head.status, 200);
        assert_eq!(body, b"backend b-1\n");
        b.set_mode(Mode::SlowBody {
            chunks: 2,
            interval: Duration::from_millis(5),
        });
        c.write(b"GET /y HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (_, body) = c.read_response(secs(5)).await.expect("chunked");
        assert_eq!(body, b"chunk 0\nchunk 1\n");
    });
}

#[test]
fn generated_configs_are_valid() {
    rt().block_on(async {
        let a = Backend::start("a").await;
        let b = Backend::start("b").await;
        let c = Backend::start("c").await;
        let secrets = weir_core::config::MapSecrets::new().with_env(
            "BALANCER_ADMIN_TOKEN",
            weir_conformance::config::ADMIN_TOKEN,
        );
        let configs = vec![
            Config::new(&[&a, &b]),
            Config::new(&[&a])
                .passive_off()
                .rate_limit(3, 0.5)
                .trusted(&["127.0.0.2/32", "10.0.0.0/8"]),
            Config::with_entries(vec![
                entry(&a).weight(5),
                entry(&b).disabled(),
                entry(&c).url(&format!("{}/base", c.url())),
            ])
            .policy("weighted_round_robin")
            .set("health_check.path", "/hc?deep=1")
            .set("health_check.expected_statuses", serde_json::json!([204])),
            Config::new(&[&a])
                .management()
                .pool("slow", "least_request", &[&b])
                .route("/slow", "slow", Some(1))
                .set("server.overload.max_queue", 1)
                .set("server.overload.queue_timeout", "0s")
                .set("server.retry.methods", serde_json::json!(["get", "Post"]))
                .set("server.retry.budget_refill_per_second", 0.001)
                .set("rate_limit.local_max_buckets", 2)
                .set("rate_limit.local_shards", 1),
            Config::new(&[&a, &b])
                .policy("consistent_hash")
                .hash_key("header:X-User"),
            Config::new(&[&a])
                .set("health_check.mode", "tcp")
                .set("server.max_header_bytes", 4096),
        ];
        for cfg in configs {
            let yaml = cfg.yaml();
            if let Err(e) = weir_core::config::load(&yaml, &secrets) {
                panic!("{e}\n{yaml}");
            }
        }
    });
}

#[test]
fn case_list_is_complete_and_documented() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/conformance.md"
    ))
    .expect("docs/conformance.md");
    for case in weir_conformance::CASES {
        assert!(
            docs.contains(case),
            "docs/conformance.md does not list {case}"
        );
    }
    let mut sorted = weir_conformance::CASES.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        weir_conformance::CASES.len(),
        "duplicate case names"
    );
}
