//! A Redis Cluster through the redis crate's own async cluster client: it reads the slot map
//! from the seed nodes, routes each call by its one key, follows MOVED/ASK and refreshes the
//! map after a failover (issue 19). One multiplexed connection per node.

use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Cmd, RedisResult, Value};

use super::RedisOptions;
use crate::error::StoreError;

/// Redirections and reconnects one call may make before its error is returned: enough to
/// follow a MOVED after a failover, few enough that a dead master's keys fail fast and are
/// decided by the policy well inside `operation_timeout`.
const RETRIES: u32 = 2;

/// The cluster connection (cheap to clone: a handle on one background task).
pub(super) struct Cluster {
    conn: ClusterConnection,
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
        let client = b.build()?;
        let config = ClusterConfig::new()
            .set_connection_timeout(opts.dial_timeout)
            .set_response_timeout(opts.response_timeout);
        Ok(Cluster {
            conn: client.get_pending_async_connection_with_config(config),
        })
    }

    /// Run a keyed command on the node that holds its key.
    pub(super) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        cmd.query_async(&mut conn).await
    }

    /// `PING` every master; healthy when at least one answers. A partial outage (one master
    /// of several) keeps the store up and `/readyz` ready; the keys of the missing master
    /// fail one by one (C-RATE-5, issue 19).
    pub(super) async fn ping_any(&self) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        conn.route_command(
            redis::cmd("PING"),
            RoutingInfo::MultiNode((
                MultipleNodeRoutingInfo::AllMasters,
                Some(ResponsePolicy::OneSucceeded),
            )),
        )
        .await
    }
}
