//! C-OBS-4 with a proxy started in-process on tokio (`weir_tokio::start`): readiness follows a
//! fail-closed shared store and shutdown. The black-box management tests are in management.rs.

use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, Resp, get, send};

fn resp_ok(r: &Resp) -> bool {
    (200..300).contains(&r.status)
}

/// C-OBS-4 (in-process): `/readyz` is `503` when the fail-closed shared store is down, and
/// while shutting down; `/healthz` stays `200`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_4_readiness_follows_fail_closed_store_and_shutdown() {
    use weir_core::config::MapSecrets;

    let a = Backend::start("r-a").await;
    let yaml = format!(
        "server:\n  read_header_timeout: 2s\n  shutdown_timeout: 2s\n\
         health_check:\n  interval: 100ms\n  timeout: 500ms\n  jitter: 0s\n  failure_threshold: 1\n  success_threshold: 1\n\
         rate_limit:\n  enabled: true\n  storage: redis\n  failure_mode: fail-closed\n\
         redis:\n  address: 127.0.0.1:1\n\
         management:\n  enabled: true\n  address: 127.0.0.1:9090\n  auth_token_env: T\n\
         backends:\n  - id: r-a\n    url: {}\n",
        a.url()
    );
    let cfg = weir_core::config::load(&yaml, &MapSecrets::new().with_env("T", "tok"))
        .unwrap_or_else(|e| panic!("{e}"));
    let handle = weir_tokio::start(
        cfg,
        weir_tokio::Options {
            public_bind: Some("127.0.0.1:0".parse().expect("addr")),
            management_bind: Some("127.0.0.1:0".parse().expect("addr")),
            workers: Some(1),
            rate_limiter: None,
        },
    )
    .await
    .expect("start");
    let public = handle.public_addr();
    let m = handle.management_addr().expect("management");
    let readyz = |addr| async move {
        send(
            addr,
            &Req::get("/readyz").header("authorization", "Bearer tok"),
        )
        .await
        .status
    };
    let r = get(public, "/x").await;
    assert_eq!(r.status, 503, "fail-closed: {}", r.summary());
    assert_eq!(readyz(public).await, 503);
    assert_eq!(readyz(m).await, 503);
    let h = get(public, "/healthz").await;
    assert!(resp_ok(&h));
    handle.shutdown();
    assert!(
        !handle.proxy_state().data_plane.ready(),
        "not ready while shutting down"
    );
    handle.wait().await;
}
