//! One Redis server: a handful of lazily connecting, self-reconnecting connection managers,
//! calls spread round-robin, and the other connections healed after one breaks (C-RATE-5).
//! Sentinel mode uses the same set for the master it was told about.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, RedisResult, Value};

use super::options::{RedisOptions, is_connection_error};
use crate::error::StoreError;

/// The connections to one server.
pub(super) struct Conns {
    conns: Box<[ConnectionManager]>,
    next: AtomicUsize,
    /// A [`Conns::heal`] round is running.
    healing: Arc<AtomicBool>,
}

impl Conns {
    /// `opts.connections` managers for `client`; nothing connects here. Must be called in a
    /// runtime.
    ///
    /// Each connection manager makes one connection attempt per reconnect (no internal retry
    /// loop): while Redis is down a call fails fast, and the first call after it is back
    /// starts a fresh attempt. The [`RateLimiter`](crate::RateLimiter) spaces those calls out.
    pub(super) fn new(client: &Client, opts: &RedisOptions) -> Result<Conns, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_min_delay(core::time::Duration::from_millis(10))
            .set_max_delay(core::time::Duration::from_millis(100))
            .set_connection_timeout(Some(opts.dial_timeout))
            .set_response_timeout(Some(opts.response_timeout));
        let n = opts.connections.max(1);
        let mut conns = Vec::with_capacity(n as usize);
        for _ in 0..n {
            conns.push(ConnectionManager::new_lazy_with_config(
                client.clone(),
                config.clone(),
            )?);
        }
        Ok(Conns {
            conns: conns.into_boxed_slice(),
            next: AtomicUsize::new(0),
            healing: Arc::new(AtomicBool::new(false)),
        })
    }

    /// How many connection managers there are.
    pub(super) fn len(&self) -> usize {
        self.conns.len()
    }

    fn conn(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        // Cloning a manager clones an Arc: it shares the one multiplexed connection.
        self.conns[i].clone()
    }

    /// Run a command.
    ///
    /// A connection manager whose last connection attempt failed hands that failure to the
    /// next call and only then starts a new attempt; when the failure was a refused
    /// connection the command was never sent, so it is sent once more on the fresh attempt.
    /// That makes the first call after Redis returns succeed instead of discovering the old
    /// failure (C-RATE-5 recovery). A command that may have reached the server is never
    /// repeated: a take is not idempotent. On a connection failure the other connections are
    /// healed.
    pub(super) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut conn = self.conn();
        let r = match cmd.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => cmd.query_async(&mut conn).await,
            r => r,
        };
        if let Err(e) = &r
            && is_connection_error(e)
        {
            self.heal();
        }
        r
    }

    /// After one connection failed, the others are likely broken too (Redis restarted, or
    /// `CLIENT KILL`), but an idle RESP2 connection only learns that on its next command, which
    /// would then fail a request. So send each one a `PING` in the background now: a broken one
    /// fails it and starts reconnecting at once, and by the next recovery trial every
    /// connection is fresh (C-RATE-5). One round at a time.
    fn heal(&self) {
        if self.healing.swap(true, Ordering::AcqRel) {
            return;
        }
        let conns: Vec<ConnectionManager> = self.conns.to_vec();
        let healing = Arc::clone(&self.healing);
        crate::rt::spawn(async move {
            for mut c in conns {
                let _: RedisResult<Value> = redis::cmd("PING").query_async(&mut c).await;
            }
            healing.store(false, Ordering::Release);
        });
    }
}
