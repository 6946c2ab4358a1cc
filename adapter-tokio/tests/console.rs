//! `weir console` over real sockets (docs/console.md): a real weir with its management
//! listener, a real `weir console` process in front of it. The token is added by the console and
//! never reaches the browser's side (C-MGMT-1, C-CONF-3); a browser's own `Authorization` is not
//! forwarded; the C-MGMT-2 guards still apply behind the console; every answer carries the CSP;
//! the OpenAPI document is served through it. Runs without npm: with no bundle built, `/` is the
//! "not built" page, and with one, `index.html`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};

use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy};

fn bin() -> Binary {
    Binary::new(env!("CARGO_BIN_EXE_weir"))
}

struct Console {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `weir console --listen 127.0.0.1:0 --management http://<m>`, with `token` in the environment.
fn console(m: SocketAddr, token: Option<&str>) -> Console {
    let mut cmd = bin().command(&[
        "console",
        "--listen",
        "127.0.0.1:0",
        "--management",
        &format!("http://{m}"),
    ]);
    cmd.env_remove("BALANCER_ADMIN_TOKEN")
        .env_remove("BALANCER_ADMIN_TOKEN_FILE")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped());
    if let Some(t) = token {
        cmd.env("BALANCER_ADMIN_TOKEN", t);
    }
    let mut child = cmd.spawn().expect("spawn weir console");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("a line");
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("weir console printed {line:?}"));
    Console { child, addr }
}

fn csp(r: &weir_conformance::client::Resp) {
    let p = r.header("content-security-policy").unwrap_or_default();
    assert!(p.contains("default-src 'self'"), "{p}");
    assert!(p.contains("frame-ancestors 'none'"), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_1_console_adds_the_token_and_the_browser_never_sees_it() {
    let a = Backend::start("c-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("management.runtime_mutations", true);
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let c = console(m, Some(ADMIN_TOKEN));

    let page = send(c.addr, &Req::get("/")).await;
    assert_eq!(page.status, 200, "{}", page.summary());
    csp(&page);
    assert!(page.text().contains("<html"), "{}", page.summary());
    assert!(!page.text().contains(ADMIN_TOKEN));
    assert_eq!(send(c.addr, &Req::get("/no-such-file")).await.status, 404);

    // A browser's own (wrong) Authorization is dropped: the console's token is the one used.
    let st = send(
        c.addr,
        &Req::get("/api/dashboard/status").header("authorization", "Bearer wrong"),
    )
    .await;
    assert_eq!(st.status, 200, "{}", st.summary());
    csp(&st);
    assert!(!st.text().contains(ADMIN_TOKEN));
    assert!(
        st.json()["instance_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );

    // C-MGMT-2 still applies behind the console: no CSRF header, 403; cross-site, 403.
    let drain = "/api/dashboard/backends/c-a/drain";
    let r = send(
        c.addr,
        &Req::post(drain, "{}").header("content-type", "application/json"),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.summary());
    let r = send(
        c.addr,
        &Req::post(drain, "{}")
            .header("content-type", "application/json")
            .header("x-balancer-csrf", "1")
            .header("sec-fetch-site", "cross-site"),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.summary());
    let r = send(
        c.addr,
        &Req::post(drain, "{}")
            .header("content-type", "application/json")
            .header("x-balancer-csrf", "1"),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.summary());
    let st = send(c.addr, &Req::get("/api/dashboard/status"))
        .await
        .json();
    assert_eq!(st["backends"][0]["draining"], true);

    // The OpenAPI document, through the console and on the management listener.
    let doc = send(c.addr, &Req::get("/api/openapi.json")).await;
    assert_eq!(doc.status, 200);
    assert_eq!(doc.text(), weir_proxy::control::console::OPENAPI);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_1_a_console_without_the_token_gets_401() {
    let a = Backend::start("c-b").await;
    let p = Proxy::start(&bin(), &Config::new(&[&a]).management()).await;
    let c = console(p.management.expect("management"), None);
    let st = send(c.addr, &Req::get("/api/dashboard/status")).await;
    assert_eq!(st.status, 401, "{}", st.summary());
    assert_eq!(st.header("www-authenticate").as_deref(), Some("Bearer"));
}

/// C-MGMT-1, C-MGMT-2: a DNS-rebinding page (its own name in `Host`) or another site gets
/// nothing done with the console's token: the drain is refused and the backend keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_2_a_rebound_or_cross_site_page_cannot_use_the_console() {
    let a = Backend::start("c-r").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("management.runtime_mutations", true);
    let p = Proxy::start(&bin(), &cfg).await;
    let c = console(
        p.management.expect("management listener"),
        Some(ADMIN_TOKEN),
    );
    let drain = "/api/dashboard/backends/c-r/drain";
    let mutation = |host: &str| {
        Req::post(drain, "{}")
            .header("host", host)
            .header("content-type", "application/json")
            .header("x-balancer-csrf", "1")
            .header("sec-fetch-site", "same-origin")
    };
    let r = send(c.addr, &mutation("rebind.attacker.example:3000")).await;
    assert_eq!(r.status, 421, "{}", r.summary());
    assert!(!r.text().contains(ADMIN_TOKEN));
    let page = send(
        c.addr,
        &Req::get("/").header("host", "rebind.attacker.example"),
    )
    .await;
    assert_eq!(page.status, 421, "{}", page.summary());
    let st = send(
        c.addr,
        &Req::get("/api/dashboard/status").header("sec-fetch-site", "cross-site"),
    )
    .await;
    assert_eq!(st.status, 403, "{}", st.summary());
    let st = send(c.addr, &Req::get("/api/dashboard/status"))
        .await
        .json();
    assert_eq!(st["backends"][0]["draining"], false, "{st}");
    // The same mutation addressed to the console by its address is carried out.
    let r = send(c.addr, &mutation(&c.addr.to_string())).await;
    assert_eq!(r.status, 202, "{}", r.summary());
    let st = send(c.addr, &Req::get("/api/dashboard/status"))
        .await
        .json();
    assert_eq!(st["backends"][0]["draining"], true, "{st}");
}
