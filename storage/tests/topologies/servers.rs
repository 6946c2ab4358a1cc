//! Private Redis topologies for the tests, from Debian's `redis-server` and `redis-cli`: a
//! 3-master Redis Cluster with one replica each (`redis-cli --cluster create`), and a master,
//! a replica and three sentinels. Ports come from the ranges reserved for these tests
//! (7000-7199 plus the cluster bus at +10000, 26400-26499 for sentinels); every process is
//! killed on drop and every wait is bounded. The TLS tests (`tls.rs`) use the cluster too.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{RedisServer, free_port};

/// Poll `f` every 20 ms until it is true, or panic with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One synchronous command to 127.0.0.1:`port`; `None` when the server does not answer.
pub fn cmd(port: u16, args: &[&str]) -> Option<redis::Value> {
    cmd_at(&format!("redis://127.0.0.1:{port}/"), args)
}

/// One synchronous command to the server at `url` (`redis://:password@host:port/`); `None`
/// when it does not answer.
pub fn cmd_at(url: &str, args: &[&str]) -> Option<redis::Value> {
    let client = redis::Client::open(url).ok()?;
    let mut c = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut c).ok()
}

/// A command whose answer is text (INFO, CLUSTER NODES, ...).
pub fn text(port: u16, args: &[&str]) -> String {
    match cmd(port, args) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Some(redis::Value::SimpleString(s))
        | Some(redis::Value::VerbatimString { text: s, .. }) => s,
        _ => String::new(),
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(crate::common::unique(tag));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A Redis Cluster of `masters` masters with one replica each on ports `base..`.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    dir: PathBuf,
}

/// A cluster spoken to over TLS (`tls-cluster yes`): node `i` (plain on `base + i`) listens
/// for TLS on `tls_base + i` and has its bus on `bus_base + i`; `args` are the certificate
/// options, `cli` what `redis-cli` needs to speak TLS.
pub struct ClusterTls {
    pub tls_base: u16,
    pub bus_base: u16,
    pub args: Vec<String>,
    pub cli: Vec<String>,
}

impl Cluster {
    pub fn start(base: u16, masters: u16) -> Cluster {
        Cluster::start_with(base, masters, 1, None)
    }

    /// `masters` masters with `replicas` replicas each, over TLS with `tls`.
    pub fn start_with(base: u16, masters: u16, replicas: u16, tls: Option<&ClusterTls>) -> Cluster {
        let dir = temp_dir("weircluster");
        let mut nodes = Vec::new();
        let count = masters * (1 + replicas);
        for port in base..base + count {
            let conf = dir.join(format!("nodes-{port}.conf"));
            let conf = conf.to_string_lossy().into_owned();
            let mut args: Vec<String> = Vec::new();
            if let Some(t) = tls {
                let i = port - base;
                args.extend(
                    [
                        "--tls-port".to_owned(),
                        (t.tls_base + i).to_string(),
                        "--cluster-port".to_owned(),
                        (t.bus_base + i).to_string(),
                        "--tls-cluster".to_owned(),
                        "yes".to_owned(),
                    ]
                    .into_iter()
                    .chain(t.args.iter().cloned()),
                );
            }
            let common = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                conf.as_str(),
                "--cluster-node-timeout",
                "1000",
                // One master down must not stop the others (docs/storage.md).
                "--cluster-require-full-coverage",
                "no",
                // A replica idle since the cluster was made is still fit to take over.
                "--cluster-replica-validity-factor",
                "0",
                "--dir",
                dir.to_str().expect("utf-8 temp dir"),
            ];
            args.extend(common.iter().map(|s| (*s).to_owned()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nodes.push(RedisServer::start(Some(port), &args));
        }
        let client_base = tls.map_or(base, |t| t.tls_base);
        let addrs: Vec<String> = (client_base..client_base + count)
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let status = Command::new("redis-cli")
            .args(tls.map_or(&[][..], |t| &t.cli[..]))
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run redis-cli --cluster create");
        assert!(status.success(), "redis-cli --cluster create failed");
        let c = Cluster { nodes, dir };
        c.wait_healthy(masters as usize);
        c
    }

    /// Every running node says `cluster_state:ok` and sees `masters` masters with a replica.
    pub fn wait_healthy(&self, masters: usize) {
        wait_until(Duration::from_secs(20), "cluster state ok", || {
            self.running().all(|p| {
                text(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && self.masters_seen_by(p).len() == masters
            })
        });
    }

    fn running(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().filter(|n| n.is_running()).map(|n| n.port)
    }

    /// The ports of the masters that `port` sees as up, holding slots.
    pub fn masters_seen_by(&self, port: u16) -> Vec<u16> {
        let nodes = text(port, &["CLUSTER", "NODES"]);
        let mut out: Vec<u16> = nodes
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let flags = f.get(2)?;
                let slots = f.len() > 8;
                let up = !flags.contains("fail");
                (flags.contains("master") && up && slots).then(|| {
                    let addr = f[1].split('@').next()?;
                    addr.rsplit(':').next()?.parse().ok()
                })?
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// The port of the master holding `key` (asked of any running node).
    pub fn master_of(&self, key: &str) -> u16 {
        let port = self.running().next().expect("a running node");
        let slot = match cmd(port, &["CLUSTER", "KEYSLOT", key]) {
            Some(redis::Value::Int(s)) => s,
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        };
        let Some(redis::Value::Array(ranges)) = cmd(port, &["CLUSTER", "SLOTS"]) else {
            panic!("CLUSTER SLOTS");
        };
        for r in ranges {
            let redis::Value::Array(r) = r else { continue };
            let (redis::Value::Int(lo), redis::Value::Int(hi)) = (&r[0], &r[1]) else {
                continue;
            };
            if (*lo..=*hi).contains(&slot)
                && let redis::Value::Array(master) = &r[2]
                && let redis::Value::Int(p) = &master[1]
            {
                return u16::try_from(*p).expect("port");
            }
        }
        panic!("slot {slot} of {key} has no master");
    }

    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node on that port")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, one replica, three sentinels monitoring them as `name`.
pub struct Sentinels {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
    pub name: String,
    dir: PathBuf,
}

impl Sentinels {
    pub fn start(master_port: u16, replica_port: u16, sentinel_base: u16) -> Sentinels {
        Sentinels::start_on(
            master_port,
            replica_port,
            [sentinel_base, sentinel_base + 1, sentinel_base + 2],
        )
    }

    /// The same on free ports: nothing else in this or a parallel run uses them.
    pub fn start_free() -> Sentinels {
        let ports = [free_port(), free_port(), free_port()];
        Sentinels::start_on(free_port(), free_port(), ports)
    }

    /// A master on `master_port`, its replica on `replica_port`, sentinels on `sentinel_ports`.
    pub fn start_on(master_port: u16, replica_port: u16, sentinel_ports: [u16; 3]) -> Sentinels {
        let dir = temp_dir("weirsentinel");
        let master = RedisServer::start(Some(master_port), &[]);
        let of = master_port.to_string();
        let replica = RedisServer::start(Some(replica_port), &["--replicaof", "127.0.0.1", &of]);
        wait_until(Duration::from_secs(10), "replica linked", || {
            text(replica_port, &["INFO", "replication"]).contains("master_link_status:up")
        });
        let name = "weirmaster".to_owned();
        let mut sentinels = Vec::new();
        for port in sentinel_ports {
            let conf = dir.join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {name} 1000\n\
                     sentinel failover-timeout {name} 10000\n\
                     sentinel parallel-syncs {name} 1\n"
                ),
            )
            .expect("sentinel config");
            let conf = conf.to_string_lossy().into_owned();
            sentinels.push(RedisServer::start_sentinel(port, &conf));
        }
        wait_until(Duration::from_secs(10), "sentinels see the replica", || {
            sentinel_ports.iter().all(|&p| {
                matches!(cmd(p, &["SENTINEL", "REPLICAS", &name]),
                    Some(redis::Value::Array(r)) if !r.is_empty())
            })
        });
        Sentinels {
            master,
            replica,
            sentinels,
            name,
            dir,
        }
    }

    /// `SENTINEL FAILOVER` at the sentinel on `via`, asked again while it refuses: just after
    /// the start, on a loaded machine, a sentinel may not count the replica as fit yet (it
    /// answers `NOGOODSLAVE` until it has the replica's recent `INFO`).
    pub fn failover(&self, via: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let client = redis::Client::open(format!("redis://127.0.0.1:{via}/")).expect("client");
            let r: redis::RedisResult<redis::Value> = client
                .get_connection_with_timeout(Duration::from_millis(300))
                .and_then(|mut c| {
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(&self.name)
                        .query(&mut c)
                });
            if let Ok(redis::Value::Okay) = r {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "SENTINEL FAILOVER refused for 10 s: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The master's port as the first sentinel reports it.
    pub fn master_port(&self) -> Option<u16> {
        let p = self.sentinels[0].port;
        match cmd(p, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name])? {
            redis::Value::Array(a) => match a.get(1)? {
                redis::Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for s in &mut self.sentinels {
            s.stop();
        }
        self.master.stop();
        self.replica.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the sentinels on some ports announce on `+switch-master`, as the test sees it: one
/// thread per sentinel with a plain subscription, stopped on drop.
pub struct Announcements {
    /// (when, from which sentinel, the message) in the order seen.
    seen: std::sync::Arc<std::sync::Mutex<Vec<(Instant, u16, String)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Announcements {
    /// Subscribed to every sentinel in `ports` when this returns.
    pub fn subscribe(ports: &[u16]) -> Announcements {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex, mpsc};
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &port in ports {
            let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
            let (ready, subscribed) = mpsc::channel();
            threads.push(std::thread::spawn(move || {
                let client =
                    redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
                let mut conn = client.get_connection().expect("connect to the sentinel");
                let mut ps = conn.as_pubsub();
                ps.subscribe("+switch-master").expect("subscribe");
                ps.set_read_timeout(Some(Duration::from_millis(50)))
                    .expect("read timeout");
                let _ = ready.send(());
                while !stop.load(Ordering::Relaxed) {
                    match ps.get_message() {
                        Ok(m) => {
                            let text: String = m.get_payload().unwrap_or_default();
                            seen.lock()
                                .expect("lock")
                                .push((Instant::now(), port, text));
                        }
                        Err(e) if e.is_timeout() => {}
                        Err(_) => return,
                    }
                }
            }));
            subscribed
                .recv_timeout(Duration::from_secs(5))
                .expect("subscribed to the sentinel");
        }
        Announcements {
            seen,
            stop,
            threads,
        }
    }

    /// The first announcement: when, and its text.
    pub fn first(&self) -> Option<(Instant, String)> {
        let seen = self.seen.lock().expect("lock");
        seen.first().map(|(t, _, m)| (*t, m.clone()))
    }

    /// Every announcement so far: (when, from which sentinel, the text).
    pub fn all(&self) -> Vec<(Instant, u16, String)> {
        self.seen.lock().expect("lock").clone()
    }
}

impl Drop for Announcements {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The role `port` reports (`master`, `slave`), `None` when it does not answer.
pub fn role(port: u16) -> Option<String> {
    match cmd(port, &["ROLE"])? {
        redis::Value::Array(r) => match r.first()? {
            redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

/// The clients of `port` in pub/sub mode (`CLIENT LIST` flag `P`).
pub fn subscribers(port: u16) -> usize {
    text(port, &["CLIENT", "LIST"])
        .lines()
        .filter(|l| {
            l.split(' ')
                .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('P')))
        })
        .count()
}
