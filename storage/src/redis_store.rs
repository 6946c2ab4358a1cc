//! The Redis store: one Lua script, run with EVALSHA (reloaded on NOSCRIPT), steps the bucket on
//! the Redis server's clock and sets the key TTL (C-RATE-3); a handful of lazily connecting,
//! self-reconnecting connection managers carry the calls (C-RATE-5); `maxmemory` refusals are
//! store errors (C-RATE-6). `redis.mode` picks the topology: one server
//! ([`standalone`]), a Redis Cluster ([`cluster`], the redis crate's cluster client) or a master
//! found through Sentinel ([`sentinel`], the redis crate's sentinel client). The script touches
//! one key per call, so it runs on whichever node holds that key's slot.
//!
//! Why a script and not `WATCH`/`MULTI` or client-side time: the script runs atomically on the
//! server, so concurrent replicas need no retry loop, and it reads `TIME` inside, so every
//! replica's takes are ordered on one clock (Redis-Cell and the Stripe/GitHub limiters do the
//! same). The key is `<prefix><ClientKey as CIDR>`, e.g. `weir:rl:203.0.113.0/24`: readable
//! with `redis-cli`, and the host part of an address is never in it (C-RATE-2).

use core::fmt;
use core::time::Duration;

use redis::{Cmd, RedisError, RedisResult, Script, Value};
use weir_core::bucket::{BucketParams, Take};
use weir_core::config::RedisMode;
use weir_core::rate::{ClientKey, StorageKind};
use weir_core::time::Instant;

use crate::error::StoreError;
use crate::store::{Store, check_params, ttl_ms};

/// The bucket script (also printed in docs/storage.md).
pub const BUCKET_SCRIPT: &str = include_str!("redis_store/bucket.lua");

mod cluster;
mod options;
mod sentinel;
mod standalone;

use options::is_connection_error;
pub use options::{DEFAULT_KEY_PREFIX, RedisOptions};

/// Where the calls go.
enum Backend {
    Standalone(standalone::Conns),
    Cluster(Box<cluster::Cluster>),
    Sentinel(Box<sentinel::Sentinel>),
}

/// Whether a cluster call's error is the failure of the node(s) holding its key only: the
/// connection to that node, the cluster saying it cannot serve that slot now, or a redirection
/// still pending when the client's retries ran out (the slot is moving to a promoted replica).
fn is_node_failure(e: &RedisError) -> bool {
    is_connection_error(e)
        || matches!(
            e.code(),
            Some("CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN" | "LOADING" | "MOVED" | "ASK")
        )
}

/// The Redis bucket store (C-RATE-3, C-RATE-5, C-RATE-6). Cheap to share by reference; every
/// method takes `&self`.
pub struct RedisStore {
    backend: Backend,
    script: Script,
    prefix: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mode, connections) = match &self.backend {
            Backend::Standalone(c) => (RedisMode::Standalone, c.len()),
            Backend::Cluster(c) => (RedisMode::Cluster, c.len()),
            Backend::Sentinel(s) => (RedisMode::Sentinel, s.connections()),
        };
        f.debug_struct("RedisStore")
            .field("mode", &mode)
            .field("connections", &connections)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store that connects on first use and reconnects by itself after a connection breaks
    /// (the process may start with Redis down, C-RATE-5). Must be called in a runtime.
    pub fn new(opts: RedisOptions) -> Result<RedisStore, StoreError> {
        let backend = match opts.mode {
            RedisMode::Standalone => {
                Backend::Standalone(standalone::Conns::new(&opts.client()?, &opts)?)
            }
            RedisMode::Cluster => Backend::Cluster(Box::new(cluster::Cluster::new(&opts)?)),
            RedisMode::Sentinel => Backend::Sentinel(Box::new(sentinel::Sentinel::new(&opts)?)),
        };
        Ok(RedisStore {
            backend,
            script: Script::new(BUCKET_SCRIPT),
            prefix: opts.key_prefix,
        })
    }

    /// The topology this store speaks to.
    #[must_use]
    pub fn mode(&self) -> RedisMode {
        match self.backend {
            Backend::Standalone(_) => RedisMode::Standalone,
            Backend::Cluster(_) => RedisMode::Cluster,
            Backend::Sentinel(_) => RedisMode::Sentinel,
        }
    }

    /// The Redis key of `key`'s bucket: `<prefix><network>/<bits>`.
    #[must_use]
    pub fn redis_key(&self, key: ClientKey) -> String {
        bucket_key(&self.prefix, key)
    }

    /// One command on the backend; `key` is its one key, if any (a cluster routes by it).
    /// Boxed: the cluster and sentinel clients' futures are deep types, and without the box
    /// every future that holds a store call (the proxy's request and management tasks) makes
    /// the compiler prove `Send` through all of them. The command is moved in: the cluster
    /// client keeps it (behind an `Arc`) while it routes and retries, and would otherwise copy it.
    fn raw<'a>(
        &'a self,
        cmd: Cmd,
        key: Option<&'a str>,
    ) -> core::pin::Pin<Box<dyn Future<Output = RedisResult<Value>> + Send + 'a>> {
        match &self.backend {
            Backend::Standalone(c) => Box::pin(async move { c.query(&cmd).await }),
            Backend::Cluster(c) => Box::pin(c.query(cmd, key)),
            Backend::Sentinel(s) => Box::pin(async move { s.query(&cmd).await }),
        }
    }

    /// Map an error. In a cluster, a keyed call's node failure is [`StoreError::Partial`]:
    /// the other masters' keys are unaffected.
    fn checked(&self, r: RedisResult<Value>, keyed: bool) -> Result<Value, StoreError> {
        r.map_err(|e| {
            let cluster = matches!(self.backend, Backend::Cluster(_));
            if cluster && keyed && is_node_failure(&e) {
                StoreError::Partial(e.to_string())
            } else {
                StoreError::from(e)
            }
        })
    }

    /// Run a command on `key`.
    async fn query(&self, cmd: Cmd, key: &str) -> Result<Value, StoreError> {
        let r = self.raw(cmd, Some(key)).await;
        self.checked(r, true)
    }

    /// Run the bucket script on `key` with `args`: `EVALSHA`, and on `NOSCRIPT` (a restarted
    /// or newly promoted server) `EVAL` with the script's text, which loads it on that node.
    /// Not `SCRIPT LOAD`: in a cluster it goes to every master and fails while one is down.
    async fn eval(&self, key: ClientKey, op: &str, args: &[u64]) -> Result<Value, StoreError> {
        let key = self.redis_key(key);
        // EVALSHA, sha, 1, key, op, up to 4 numbers: sized once (the command's buffer would
        // otherwise grow a few times per call).
        let mut sha = Cmd::with_capacity(5 + args.len(), 96 + key.len() + 20 * args.len());
        sha.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(1)
            .arg(&key)
            .arg(op)
            .arg(args);
        let r = match self.raw(sha, Some(&key)).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(BUCKET_SCRIPT).arg(1).arg(&key).arg(op).arg(args);
                self.raw(eval, Some(&key)).await
            }
            r => r,
        };
        self.checked(r, true)
    }

    /// The script's `op` on `key` with the bucket's shape (interval, full refill, TTL) and
    /// `extra` after them.
    async fn eval_op(
        &self,
        key: ClientKey,
        op: &str,
        params: &BucketParams,
        extra: Option<u64>,
    ) -> Result<Value, StoreError> {
        let shape = [
            params.interval().as_nanos() as u64,
            params.full_refill().as_nanos() as u64,
            ttl_ms(params),
        ];
        match extra {
            Some(x) => self.eval(key, op, &[shape[0], shape[1], shape[2], x]).await,
            None => self.eval(key, op, &shape).await,
        }
    }

    /// [`Store::take`], also returning the server's now (nanoseconds since the Unix epoch, as a
    /// core [`Instant`]) the script used: what tests replay against the core arithmetic.
    pub async fn take_traced(
        &self,
        key: ClientKey,
        params: &BucketParams,
    ) -> Result<(Take, Instant), StoreError> {
        check_params(params)?;
        let reply = self.eval_op(key, "take", params, None).await?;
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

/// `<prefix><key>` (the key as its `Display` writes it, e.g. `weir:rl:203.0.113.0/24`), built
/// once per call: an IPv4 key (the common case) is written digit by digit into a buffer of its
/// final size; `format!` through `Ipv4Addr`'s and the key's `Display` cost about 2 000
/// instructions a call (callgrind), a tenth of a take's client work.
fn bucket_key(prefix: &str, key: ClientKey) -> String {
    /// `n` in decimal, no leading zeros.
    fn push_u8(s: &mut String, n: u8) {
        if n >= 100 {
            s.push(char::from(b'0' + n / 100));
        }
        if n >= 10 {
            s.push(char::from(b'0' + n / 10 % 10));
        }
        s.push(char::from(b'0' + n % 10));
    }
    // "255.255.255.255/32" is 18 bytes; an IPv6 key at most 43.
    let mut s = String::with_capacity(prefix.len() + 44);
    s.push_str(prefix);
    match key.network() {
        std::net::IpAddr::V4(a) => {
            let [a, b, c, d] = a.octets();
            for (i, o) in [a, b, c, d].into_iter().enumerate() {
                if i > 0 {
                    s.push('.');
                }
                push_u8(&mut s, o);
            }
            s.push('/');
            push_u8(&mut s, key.prefix_bits());
        }
        std::net::IpAddr::V6(_) => {
            use core::fmt::Write as _;
            let _ = write!(s, "{key}");
        }
    }
    s
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
        let reply = self.eval(key, "peek", &[0, 0, 0]).await?;
        let (tag, tat, now) = parse_reply(&reply)?;
        if tag != 2 {
            return Err(protocol(&reply));
        }
        Ok(params.tokens_milli(int(tat)?, now))
    }

    async fn reset(&self, key: ClientKey) -> Result<(), StoreError> {
        let key = self.redis_key(key);
        let mut del = redis::cmd("DEL");
        del.arg(&key);
        self.query(del, &key).await.map(|_| ())
    }

    async fn set_tokens(
        &self,
        key: ClientKey,
        params: &BucketParams,
        tokens: u64,
    ) -> Result<(), StoreError> {
        check_params(params)?;
        let reply = self
            .eval_op(key, "set", params, Some(tokens.min(params.capacity())))
            .await?;
        match parse_reply(&reply)? {
            (3, _, _) => Ok(()),
            _ => Err(protocol(&reply)),
        }
    }

    async fn health(&self) -> Result<(), StoreError> {
        let r = match &self.backend {
            Backend::Cluster(c) => Box::pin(c.ping_any()).await,
            _ => self.raw(redis::cmd("PING"), None).await,
        };
        match self.checked(r, false)? {
            Value::SimpleString(s) if s == "PONG" => Ok(()),
            other => Err(protocol(&other)),
        }
    }
}

#[cfg(test)]
mod tests;
