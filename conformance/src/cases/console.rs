//! `weir console` beyond loopback (docs/console.md, "Who reaches the console"). The console adds
//! the admin token to every call it forwards, so whoever reaches it is an administrator
//! (C-MGMT-1 is the closest id: the management plane answers only to the token, and the console
//! holds it). A non-loopback `--listen` is refused unless the operator says how the console is
//! protected: `--allow-remote` (an authenticating proxy in front) or the console's own bearer
//! token (`--auth-token-env`), which every request must then carry.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::expect_status;
use crate::backend::Backend;
use crate::client::{Req, send};
use crate::config::ADMIN_TOKEN;
use crate::harness::Binary;

/// The console's own token in the cases below.
const CONSOLE_TOKEN: &str = "conformance-console-token";
/// The variable it is passed in.
const CONSOLE_TOKEN_ENV: &str = "WEIR_CONFORMANCE_CONSOLE_TOKEN";

/// A running `weir console`, killed on drop.
struct Console {
    child: Child,
    /// Where to reach it (the loopback address of its port, whatever it bound).
    addr: SocketAddr,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `weir console --management http://<management> <args>` with the admin token and, when
/// `console_token`, the console's own token in the environment.
fn command(
    bin: &Binary,
    management: SocketAddr,
    args: &[&str],
    console_token: bool,
) -> std::process::Command {
    let m = format!("http://{management}");
    let mut all = vec!["console", "--management", m.as_str()];
    all.extend_from_slice(args);
    let mut cmd = bin.command(&all);
    cmd.env("BALANCER_ADMIN_TOKEN", ADMIN_TOKEN)
        .env_remove("BALANCER_ADMIN_TOKEN_FILE")
        .env_remove("WEIR_MANAGEMENT_URL")
        .env_remove(CONSOLE_TOKEN_ENV)
        .env("RUST_LOG", "error");
    if console_token {
        cmd.env(CONSOLE_TOKEN_ENV, CONSOLE_TOKEN);
    }
    cmd
}

/// Starts a console and waits for the line naming its address.
async fn start(bin: &Binary, management: SocketAddr, args: &[&str], token: bool) -> Console {
    let mut cmd = command(bin, management, args, token);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn weir console");
    let stdout = child.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        line
    });
    let line = tokio::time::timeout(Duration::from_secs(20), line)
        .await
        .unwrap_or_else(|_| panic!("weir console {args:?} printed no address within 20 s"))
        .expect("read the console's line");
    let port = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .map(|a| a.port());
    let Some(port) = port else {
        let _ = child.kill();
        let err = child
            .wait_with_output()
            .map(|o| o.stderr)
            .unwrap_or_default();
        panic!(
            "weir console {args:?} printed {line:?}; stderr: {}",
            String::from_utf8_lossy(&err)
        )
    };
    Console {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

/// Runs a console that must refuse to start: its exit status and stderr (within 20 s).
async fn refused(bin: &Binary, management: SocketAddr, args: &[&str], token: bool) -> String {
    let mut cmd = command(bin, management, args, token);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn weir console");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("weir console {args:?} did not exit within 20 s (it should refuse to start)");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stderr = child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default();
    assert!(
        !status.success(),
        "weir console {args:?} exited {status} (want non-zero); stderr: {stderr}"
    );
    stderr
}

/// A console API call as its own page makes it.
fn api(console: &Console) -> Req {
    Req::get("/api/dashboard/status").header("host", &console.addr.to_string())
}

/// C-MGMT-1 (refined, docs/console.md): `--listen` beyond loopback without a protection exits
/// non-zero with a message naming the safe options; `--allow-remote` or `--auth-token-env`
/// lets it start (and a token variable that is not set is itself an error); a loopback
/// `--listen` needs neither.
pub async fn c_mgmt_1_console_beyond_loopback_needs_a_protection(bin: Binary) {
    let m = Backend::start("management").await;
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let why = refused(&bin, m.addr(), &["--listen", listen], false).await;
        for option in ["loopback", "--auth-token-env", "--allow-remote"] {
            assert!(
                why.contains(option),
                "the refusal of {listen} does not name {option}: {why}"
            );
        }
    }
    let why = refused(
        &bin,
        m.addr(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--auth-token-env",
            CONSOLE_TOKEN_ENV,
        ],
        false,
    )
    .await;
    assert!(
        why.contains(CONSOLE_TOKEN_ENV),
        "an unset token variable: {why}"
    );
    assert_eq!(m.count(), 0, "a refused console forwarded something");

    let remote = start(
        &bin,
        m.addr(),
        &["--listen", "0.0.0.0:0", "--allow-remote"],
        false,
    )
    .await;
    let r = send(remote.addr, &api(&remote)).await;
    expect_status(&r, 200, "--allow-remote: forwarded");
    let authed = start(
        &bin,
        m.addr(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--auth-token-env",
            CONSOLE_TOKEN_ENV,
        ],
        true,
    )
    .await;
    let r = send(
        authed.addr,
        &api(&authed).header("authorization", &format!("Bearer {CONSOLE_TOKEN}")),
    )
    .await;
    expect_status(&r, 200, "--auth-token-env: forwarded with the token");
    let local = start(&bin, m.addr(), &["--listen", "127.0.0.1:0"], false).await;
    let r = send(local.addr, &api(&local)).await;
    expect_status(&r, 200, "loopback: forwarded");
    assert_eq!(m.count(), 3, "one forwarded call per console");
    for rec in m.requests() {
        assert_eq!(
            rec.header("authorization").as_deref(),
            Some(format!("Bearer {ADMIN_TOKEN}").as_str()),
            "the management plane gets the admin token"
        );
    }
}

/// C-MGMT-1 (refined, docs/console.md): with `--auth-token-env`, a request without the
/// console's token, or with another, is `401` with `WWW-Authenticate: Bearer` and reaches
/// nothing (the bundle included); with it, the call is forwarded with the admin token in its
/// place (the console's token never reaches the management plane).
pub async fn c_mgmt_1_console_bearer_token_required(bin: Binary) {
    let m = Backend::start("management").await;
    let c = start(
        &bin,
        m.addr(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--auth-token-env",
            CONSOLE_TOKEN_ENV,
        ],
        true,
    )
    .await;
    let host = c.addr.to_string();
    for (what, req) in [
        ("no token", api(&c)),
        (
            "another token",
            api(&c).header("authorization", "Bearer not-the-token"),
        ),
        (
            "the admin token",
            api(&c).header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
        ),
        (
            "not bearer",
            api(&c).header("authorization", &format!("Basic {CONSOLE_TOKEN}")),
        ),
        ("the page", Req::get("/").header("host", &host)),
    ] {
        let r = send(c.addr, &req).await;
        expect_status(&r, 401, what);
        assert!(
            r.header("www-authenticate")
                .is_some_and(|v| v.starts_with("Bearer")),
            "{what}: WWW-Authenticate {:?}",
            r.header("www-authenticate")
        );
    }
    assert_eq!(m.count(), 0, "an unauthenticated call was forwarded");

    let r = send(
        c.addr,
        &api(&c).header("authorization", &format!("Bearer {CONSOLE_TOKEN}")),
    )
    .await;
    expect_status(&r, 200, "with the console's token");
    let r = send(
        c.addr,
        &Req::get("/")
            .header("host", &host)
            .header("authorization", &format!("Bearer {CONSOLE_TOKEN}")),
    )
    .await;
    expect_status(&r, 200, "the page with the console's token");
    let seen = m.requests();
    assert_eq!(seen.len(), 1, "one call forwarded");
    assert_eq!(seen[0].target, "/api/dashboard/status");
    assert_eq!(
        seen[0].header_all("authorization"),
        [format!("Bearer {ADMIN_TOKEN}")],
        "the admin token replaces the console's"
    );
}
