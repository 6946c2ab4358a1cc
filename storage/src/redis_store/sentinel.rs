//! A master found through Redis Sentinel with the redis crate's own sentinel client: the
//! sentinels are asked for the master of `sentinel_master`, a [`Conns`] set is opened to it,
//! and the sentinels are asked again when that master stops answering or answers `READONLY`
//! (a failover demoted it). Asking happens on the next call, one at a time (issue 19). With
//! `redis.tls` the sentinels are spoken to over TLS as well, and `redis.sentinel_password` is
//! their own `AUTH` (Sentinel's `requirepass`), apart from the master's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, ErrorKind, RedisError, RedisResult, TlsMode, Value};

use super::options::{RedisOptions, is_connection_error, tls_config_error};
use super::standalone::Conns;
use crate::error::StoreError;

/// The sentinels, and the connections to the master they named last.
pub(super) struct Sentinel {
    opts: RedisOptions,
    master: String,
    current: Mutex<Option<Arc<Conns>>>,
    /// A caller is asking the sentinels.
    resolving: AtomicBool,
}

/// Clears the `resolving` flag however the resolving call ends (its future may be dropped by
/// the caller's timeout).
struct Resolving<'a>(&'a AtomicBool);

impl Drop for Resolving<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn unavailable(what: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::NotConnected, what))
}

impl Sentinel {
    /// Nothing connects here.
    pub(super) fn new(opts: &RedisOptions) -> Result<Sentinel, StoreError> {
        let master = opts
            .sentinel_master
            .clone()
            .ok_or_else(|| StoreError::Config("sentinel mode needs sentinel_master".into()))?;
        if opts.nodes.is_empty() {
            return Err(StoreError::Config("sentinel mode needs sentinels".into()));
        }
        let s = Sentinel {
            opts: opts.clone(),
            master,
            current: Mutex::new(None),
            resolving: AtomicBool::new(false),
        };
        // Built once here so that a bad TLS file stops the start (C-CONF-1) instead of failing
        // every call; each resolution builds it again (the sentinels' answer is not kept).
        s.client()?;
        Ok(s)
    }

    /// The sentinel client: TLS (the same CA and client certificate) to the sentinels and to
    /// the master they name when `tls`; the sentinels' own password, then the master's.
    fn client(&self) -> Result<SentinelClient, StoreError> {
        let o = &self.opts;
        let sentinels = o.nodes.iter().map(|(h, p)| o.addr(h, *p));
        let mut b = SentinelClientBuilder::new(sentinels, &self.master, SentinelServerType::Master)
            .map_err(|e| tls_config_error(&e))?
            .set_client_to_redis_db(i64::from(o.database));
        if let Some(p) = &o.password {
            b = b.set_client_to_redis_password(p);
        }
        if let Some(p) = &o.sentinel_password {
            b = b.set_client_to_sentinel_password(p);
        }
        if let Some(certs) = o.tls_certificates()? {
            b = b
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_redis_certificates(certs.clone())
                .set_client_to_sentinel_certificates(certs);
        }
        b.build().map_err(|e| tls_config_error(&e))
    }

    fn current(&self) -> Option<Arc<Conns>> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forget `conns` (if they are still the current set): the next call asks the sentinels.
    fn forget(&self, conns: &Arc<Conns>) {
        let mut cur = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, conns)) {
            *cur = None;
        }
    }

    /// The connections to the current master, asking the sentinels first when there are none.
    /// While another call is asking, this one fails at once (the policy decides it).
    async fn conns(&self) -> RedisResult<Arc<Conns>> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        if self.resolving.swap(true, Ordering::AcqRel) {
            return Err(unavailable("asking the sentinels for the master"));
        }
        let _resolving = Resolving(&self.resolving);
        let mut sentinel = self.client().map_err(|e| {
            RedisError::from((ErrorKind::InvalidClientConfig, "sentinel", e.to_string()))
        })?;
        let asked = crate::rt::timeout(self.opts.dial_timeout, sentinel.async_get_client()).await;
        let client = asked.ok_or_else(|| unavailable("the sentinels did not answer in time"))??;
        let conns = Arc::new(Conns::new(&client, &self.opts).map_err(|e| {
            RedisError::from((ErrorKind::InvalidClientConfig, "master", e.to_string()))
        })?);
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&conns));
        Ok(conns)
    }

    /// Run a command on the current master. A connection failure or a `READONLY` answer (the
    /// server is a replica now) makes the next call ask the sentinels again.
    pub(super) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let conns = self.conns().await?;
        let r = conns.query(cmd).await;
        if let Err(e) = &r
            && (is_connection_error(e) || e.code() == Some("READONLY"))
        {
            self.forget(&conns);
        }
        r
    }

    /// Connections per master.
    pub(super) fn connections(&self) -> usize {
        self.current()
            .map_or(self.opts.connections as usize, |c| c.len())
    }
}
