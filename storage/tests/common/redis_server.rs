//! A private `redis-server` on its own port, killed on drop, and the names and ports tests pick:
//! std only, so that other crates' tests can include this file (`#[path]`) without the storage
//! tests' other helpers (adapter-smol's `tests/redis_tls.rs` does). Used by every storage test
//! that starts servers (`common`, `topologies/servers.rs`, `tls/setup.rs`, `tls.rs`).
#![allow(dead_code)]

use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant as StdInstant};

/// A name no other test (in this or a parallel run) uses.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{tag}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A private `redis-server` on its own port, killed on drop.
pub struct RedisServer {
    pub port: u16,
    extra: Vec<String>,
    /// A sentinel's configuration file: this server runs in sentinel mode.
    sentinel: Option<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Start one on a free port (or `port`), waiting until it answers PING.
    pub fn start(port: Option<u16>, extra: &[&str]) -> RedisServer {
        let mut s = RedisServer {
            port: port.unwrap_or_else(free_port),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            sentinel: None,
            child: None,
        };
        s.restart();
        s
    }

    /// A sentinel on `port` with the (writable) configuration file `conf`.
    pub fn start_sentinel(port: u16, conf: &str) -> RedisServer {
        let mut s = RedisServer {
            port,
            extra: Vec::new(),
            sentinel: Some(conf.to_owned()),
            child: None,
        };
        s.restart();
        s
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// A server that is not running yet: [`Self::restart`] starts it on `port`.
    pub fn not_started(port: u16, extra: &[&str]) -> RedisServer {
        RedisServer {
            port,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            sentinel: None,
            child: None,
        }
    }

    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let mut cmd = Command::new("redis-server");
        if let Some(conf) = &self.sentinel {
            cmd.args([conf.as_str(), "--sentinel"]);
        } else {
            cmd.args(["--save", "", "--appendonly", "no"]);
        }
        let child = cmd
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--protected-mode",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = StdInstant::now() + Duration::from_secs(5);
        while !ping(self.port) {
            assert!(StdInstant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a server answers `PING` on 127.0.0.1:`port`.
pub fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    // `+PONG`, or `-NOAUTH` from a server with `requirepass`: either way it is up.
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && (&buf == b"+PONG\r\n" || buf.starts_with(b"-NOAUTH"))
}
