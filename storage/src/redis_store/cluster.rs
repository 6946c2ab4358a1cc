//! A Redis Cluster through the redis crate's own async cluster client: it reads the slot map
//! from the seed nodes, routes each call by its one key, follows MOVED/ASK and refreshes the
//! map after a failover. `redis.pool_size` cluster connections, calls spread
//! round-robin: each is one multiplexed connection per node, so every node gets `pool_size`
//! connections, as the one server does in standalone mode.

use std::sync::atomic::{AtomicUsize, Ordering};

use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, TlsMode, Value};

use super::options::{RedisOptions, tls_config_error};
use crate::error::StoreError;

/// Redirections and reconnects one call may make before its error is returned: enough to
/// follow a MOVED after a failover, few enough that a dead master's keys fail fast and are
/// decided by the policy well inside `operation_timeout`.
const RETRIES: u32 = 2;

/// The cluster connections (each cheap to clone: a handle on one background task).
pub(super) struct Cluster {
    conns: Box<[ClusterConnection]>,
    next: AtomicUsize,
    /// A plain client per seed node, to say why the cluster is unreachable (below).
    seeds: Vec<(String, Client)>,
    dial: AsyncConnectionConfig,
}

impl Cluster {
    /// Nothing connects here: the connection to the seeds is made in the background, and a
    /// call while no node answers fails (C-RATE-5: the process may start with Redis down).
    pub(super) fn new(opts: &RedisOptions) -> Result<Cluster, StoreError> {
        let nodes: Vec<(String, u16)> = opts.nodes.clone();
        let mut b = ClusterClientBuilder::new(nodes)
            .retries(RETRIES)
            .min_retry_wait(5)
            .max_retry_wait(50)
            .connection_timeout(opts.dial_timeout)
            .response_timeout(opts.response_timeout);
        if let Some(p) = &opts.password {
            b = b.password(p);
        }
        let certs = opts.tls_certificates()?;
        let mut seeds = Vec::new();
        for (h, p) in &opts.nodes {
            let info = redis::IntoConnectionInfo::into_connection_info(opts.addr(h, *p))
                .map_err(|e| tls_config_error(&e))?;
            let client = match &certs {
                Some(c) => Client::build_with_tls(info, c.clone()),
                None => Client::open(info),
            };
            seeds.push((
                format!("{h}:{p}"),
                client.map_err(|e| tls_config_error(&e))?,
            ));
        }
        if let Some(certs) = certs {
            b = b.tls(TlsMode::Secure).certs(certs);
        }
        let client = b.build().map_err(|e| tls_config_error(&e))?;
        let config = ClusterConfig::new()
            .set_connection_timeout(opts.dial_timeout)
            .set_response_timeout(opts.response_timeout);
        let conns = (0..opts.connections.max(1))
            .map(|_| client.get_pending_async_connection_with_config(config.clone()))
            .collect();
        Ok(Cluster {
            conns,
            next: AtomicUsize::new(0),
            seeds,
            dial: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(opts.dial_timeout))
                .set_response_timeout(Some(opts.response_timeout)),
        })
    }

    /// How many cluster connections there are.
    pub(super) fn len(&self) -> usize {
        self.conns.len()
    }

    fn conn(&self) -> ClusterConnection {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }

    /// Run a command on the master that holds `key`'s slot (a command without a key goes
    /// where the client's own routing sends it). The route is given, not found by the client
    /// from the command's words (which copies the command, upper-cases its name and parses the
    /// key count on every call); the same route: the key's slot, on its master.
    pub(super) async fn query(&self, cmd: Cmd, key: Option<&str>) -> RedisResult<Value> {
        let mut conn = self.conn();
        match key {
            Some(k) => {
                let route = Route::with_key(k, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                // An error reply (NOSCRIPT, OOM) is a value here; `query_async` makes it an
                // error, and so must this.
                conn.route_command(cmd, routing)
                    .await
                    .and_then(Value::extract_error)
            }
            None => cmd.query_async(&mut conn).await,
        }
    }

    /// `PING` every master; healthy when at least one answers. A partial outage (one master
    /// of several) keeps the store up and `/readyz` ready; the keys of the missing master
    /// fail one by one (C-RATE-5).
    ///
    /// When no node answers, the cluster client says only that it has no connection; the
    /// seeds are then dialled directly so that the probe's error (logged, and in the status
    /// API) names the cause: a refused connection, an untrusted certificate, a bad password.
    pub(super) async fn ping_any(&self) -> RedisResult<Value> {
        let mut conn = self.conn();
        let r = conn
            .route_command(
                redis::cmd("PING"),
                RoutingInfo::MultiNode((
                    MultipleNodeRoutingInfo::AllMasters,
                    Some(ResponsePolicy::OneSucceeded),
                )),
            )
            .await
            // An error reply (NOAUTH, LOADING) is a value here, as in `query`: the server's own
            // error, not a protocol error, is what the probe reports.
            .and_then(Value::extract_error);
        match r {
            Err(e) if e.code().is_none() => Err(self.why_unreachable().await.unwrap_or(e)),
            r => r,
        }
    }

    /// The first seed's own connection error, if no seed can be reached and pinged.
    async fn why_unreachable(&self) -> Option<RedisError> {
        let mut first = None;
        for (addr, client) in &self.seeds {
            let r = match client
                .get_multiplexed_async_connection_with_config(&self.dial)
                .await
            {
                Ok(mut c) => redis::cmd("PING").query_async::<Value>(&mut c).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(_) => return None,
                Err(e) if first.is_none() => {
                    let text = format!("seed {addr}: {e}");
                    first = Some(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        text,
                    )));
                }
                Err(_) => {}
            }
        }
        first
    }
}
