//! The Redis store: one Lua script, run with EVALSHA (reloaded on NOSCRIPT), steps the bucket on
//! the Redis server's clock and sets the key TTL (C-RATE-3); a handful of lazily connecting,
//! self-reconnecting connection managers carry the calls (C-RATE-5); `maxmemory` refusals are
//! store errors (C-RATE-6).
//!
//! Why a script and not `WATCH`/`MULTI` or client-side time: the script runs atomically on the
//! server, so concurrent replicas need no retry loop, and it reads `TIME` inside, so every
//! replica's takes are ordered on one clock (Redis-Cell and the Stripe/GitHub limiters do the
//! same). The key is `<prefix><ClientKey as CIDR>`, e.g. `weir:rl:203.0.113.0/24`: readable
//! with `redis-cli`, and the host part of an address is never in it (C-RATE-2).

use core::fmt;
use core::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};
use redis::{Script, ScriptInvocation, Value};
use weir_core::bucket::{BucketParams, Take};
use weir_core::config::RedisSettings;
use weir_core::rate::{ClientKey, StorageKind};
use weir_core::time::Instant;

use crate::error::StoreError;
use crate::store::{Store, check_params, ttl_ms};

/// The bucket script (also printed in docs/storage.md).
pub const BUCKET_SCRIPT: &str = include_str!("redis_store/bucket.lua");

/// The default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "weir:rl:";

/// How to reach Redis.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// `AUTH` password, if any.
    pub password: Option<String>,
    /// Database number.
    pub database: u32,
    /// Multiplexed connections; calls are spread over them round-robin (at least 1).
    pub connections: u32,
    /// Deadline for one connection attempt.
    pub dial_timeout: Duration,
    /// Deadline for one answer on an established connection.
    pub response_timeout: Duration,
    /// Prepended to every bucket key (tests use a unique one).
    pub key_prefix: String,
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field("database", &self.database)
            .field("connections", &self.connections)
            .field("dial_timeout", &self.dial_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

impl RedisOptions {
    /// Defaults for `host:port`: no password, database 0, 4 connections, 1 s dial and response
    /// deadlines, prefix `weir:rl:`.
    #[must_use]
    pub fn new(host: impl Into<String>, port: u16) -> RedisOptions {
        RedisOptions {
            host: host.into(),
            port,
            password: None,
            database: 0,
            connections: 4,
            dial_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// From the validated `redis` settings: `pool_size` connections, `dial_timeout`, and the
    /// larger of `read_timeout` and `write_timeout` as the answer deadline.
    #[must_use]
    pub fn from_settings(s: &RedisSettings) -> RedisOptions {
        RedisOptions {
            host: s.address.host.clone(),
            port: s.address.port,
            password: s.password.as_ref().map(|p| p.expose().to_owned()),
            database: s.database,
            connections: s.pool_size,
            dial_timeout: s.dial_timeout,
            response_timeout: s.read_timeout.max(s.write_timeout),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    fn connection_info(&self) -> Result<ConnectionInfo, StoreError> {
        let mut redis = RedisConnectionInfo::default().set_db(i64::from(self.database));
        if let Some(p) = &self.password {
            redis = redis.set_password(p);
        }
        let info = ConnectionAddr::Tcp(self.host.clone(), self.port)
            .into_connection_info()
            .map_err(|e| StoreError::Config(e.to_string()))?;
        Ok(info.set_redis_settings(redis))
    }
}

/// The Redis bucket store (C-RATE-3, C-RATE-5, C-RATE-6). Cheap to share by reference; every
/// method takes `&self`.
pub struct RedisStore {
    conns: Box<[ConnectionManager]>,
    next: AtomicUsize,
    /// A [`RedisStore::heal`] round is running.
    healing: Arc<AtomicBool>,
    script: Script,
    prefix: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connections", &self.conns.len())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store that connects on first use and reconnects by itself after a connection breaks
    /// (the process may start with Redis down, C-RATE-5). Must be called in a tokio runtime.
    ///
    /// Each connection manager makes one connection attempt per reconnect (no internal retry
    /// loop): while Redis is down a call fails fast, and the first call after it is back
    /// starts a fresh attempt. The [`RateLimiter`](crate::RateLimiter) spaces those calls out.
    pub fn new(opts: RedisOptions) -> Result<RedisStore, StoreError> {
        let client = Client::open(opts.connection_info()?)?;
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
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
        Ok(RedisStore {
            conns: conns.into_boxed_slice(),
            next: AtomicUsize::new(0),
            healing: Arc::new(AtomicBool::new(false)),
            script: Script::new(BUCKET_SCRIPT),
            prefix: opts.key_prefix,
        })
    }

    /// The Redis key of `key`'s bucket: `<prefix><network>/<bits>`.
    #[must_use]
    pub fn redis_key(&self, key: ClientKey) -> String {
        format!("{}{key}", self.prefix)
    }

    fn conn(&self) -> ConnectionManager {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        // Cloning a manager clones an Arc: it shares the one multiplexed connection.
        self.conns[i].clone()
    }

    /// Run the script (EVALSHA; on NOSCRIPT the script is loaded and run again).
    ///
    /// A connection manager whose last connection attempt failed hands that failure to the
    /// next call and only then starts a new attempt; when the failure was a refused
    /// connection the command was never sent, so it is sent once more on the fresh attempt.
    /// That makes the first call after Redis returns succeed instead of discovering the old
    /// failure (C-RATE-5 recovery). A command that may have reached the server is never
    /// repeated: a take is not idempotent.
    async fn invoke(&self, inv: &ScriptInvocation<'_>) -> Result<Value, StoreError> {
        let mut conn = self.conn();
        let r = match inv.invoke_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => inv.invoke_async(&mut conn).await,
            r => r,
        };
        self.checked(r)
    }

    /// Run a command, with the same one retry on a refused connection as [`Self::invoke`].
    async fn query(&self, cmd: &redis::Cmd) -> Result<Value, StoreError> {
        let mut conn = self.conn();
        let r = match cmd.query_async(&mut conn).await {
            Err(e) if e.is_connection_refusal() => cmd.query_async(&mut conn).await,
            r => r,
        };
        self.checked(r)
    }

    /// Map a result; on a connection failure, heal the other connections too.
    fn checked(&self, r: redis::RedisResult<Value>) -> Result<Value, StoreError> {
        let e = match r {
            Ok(v) => return Ok(v),
            Err(e) => StoreError::from(e),
        };
        if matches!(e, StoreError::Connection(_)) {
            self.heal();
        }
        Err(e)
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
                let _: redis::RedisResult<Value> = redis::cmd("PING").query_async(&mut c).await;
            }
            healing.store(false, Ordering::Release);
        });
    }

    /// [`Store::take`], also returning the server's now (nanoseconds since the Unix epoch, as a
    /// core [`Instant`]) the script used: what tests replay against the core arithmetic.
    pub async fn take_traced(
        &self,
        key: ClientKey,
        params: &BucketParams,
    ) -> Result<(Take, Instant), StoreError> {
        check_params(params)?;
        let mut inv = self.script.key(self.redis_key(key));
        inv.arg("take")
            .arg(params.interval().as_nanos() as u64)
            .arg(params.full_refill().as_nanos() as u64)
            .arg(ttl_ms(params));
        let reply = self.invoke(&inv).await?;
        let (tag, value, now) = parse_reply(&reply)?;
        let take = match tag {
            1 => Take::Allowed {
                remaining: int(value)?,
            },
            0 => Take::Denied {
                retry_after: Duration::from_nanos(int(value)?),
            },
            _ => return Err(protocol(&reply)),
        };
        Ok((take, now))
    }
}

fn protocol(v: &Value) -> StoreError {
    StoreError::Protocol(format!("{v:?}"))
}

fn int(v: &Value) -> Result<u64, StoreError> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| protocol(v)),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol(v)),
        Value::SimpleString(s) => s.parse().map_err(|_| protocol(v)),
        _ => Err(protocol(v)),
    }
}

/// `{tag, value, now_s, now_us}` → `(tag, value, now)`.
fn parse_reply(reply: &Value) -> Result<(u64, &Value, Instant), StoreError> {
    let Value::Array(items) = reply else {
        return Err(protocol(reply));
    };
    let [tag, value, secs, micros] = items.as_slice() else {
        return Err(protocol(reply));
    };
    let (secs, micros) = (int(secs)?, int(micros)?);
    let now_ns = secs
        .checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(micros.checked_mul(1000)?))
        .ok_or_else(|| protocol(reply))?;
    Ok((int(tag)?, value, Instant::from_nanos(now_ns)))
}

impl Store for RedisStore {
    fn storage(&self) -> StorageKind {
        StorageKind::Redis
    }

    async fn take(&self, key: ClientKey, params: &BucketParams) -> Result<Take, StoreError> {
        self.take_traced(key, params).await.map(|(t, _)| t)
    }

    async fn peek(&self, key: ClientKey, params: &BucketParams) -> Result<u64, StoreError> {
        let mut inv = self.script.key(self.redis_key(key));
        inv.arg("peek").arg(0u64).arg(0u64).arg(0u64);
        let reply = self.invoke(&inv).await?;
        let (tag, tat, now) = parse_reply(&reply)?;
        if tag != 2 {
            return Err(protocol(&reply));
        }
        Ok(params.tokens_milli(int(tat)?, now))
    }

    async fn reset(&self, key: ClientKey) -> Result<(), StoreError> {
        let mut del = redis::cmd("DEL");
        del.arg(self.redis_key(key));
        self.query(&del).await.map(|_| ())
    }

    async fn set_tokens(
        &self,
        key: ClientKey,
        params: &BucketParams,
        tokens: u64,
    ) -> Result<(), StoreError> {
        check_params(params)?;
        let mut inv = self.script.key(self.redis_key(key));
        inv.arg("set")
            .arg(params.interval().as_nanos() as u64)
            .arg(params.full_refill().as_nanos() as u64)
            .arg(ttl_ms(params))
            .arg(tokens.min(params.capacity()));
        let reply = self.invoke(&inv).await?;
        match parse_reply(&reply)? {
            (3, _, _) => Ok(()),
            _ => Err(protocol(&reply)),
        }
    }

    async fn health(&self) -> Result<(), StoreError> {
        match self.query(&redis::cmd("PING")).await? {
            Value::SimpleString(s) if s == "PONG" => Ok(()),
            other => Err(protocol(&other)),
        }
    }
}
