//! A master found through Redis Sentinel, and followed when the sentinels move it.
//!
//! The first call (and any call after the connections were dropped) asks the sentinels for the
//! master of `sentinel_master` with the redis crate's sentinel client and opens a [`Conns`] set
//! to it, one caller at a time.
//!
//! Moving is led by the sentinels' announcements: one task per configured sentinel keeps a
//! subscription to its `+switch-master` channel (made again, with a short backoff, when it
//! ends). When the subscription is made, and whenever that sentinel announces a switch of
//! this master, the task asks it `SENTINEL MASTER <name>`: the master's address and the epoch
//! of that configuration. As soon as a sentinel names another master with a newer epoch than
//! the one in use, the store's connections are replaced by a set to that master ([`follow`]
//! decides, without IO). This is what a planned failover (`SENTINEL FAILOVER`) needs: the old
//! master keeps answering, as a master, until the sentinels demote it seconds later, and
//! everything written to it meanwhile is lost when it resyncs from the new one (C-RATE-3).
//!
//! The fallback stays: a connection failure or a `READONLY` answer (a demoted master) drops the
//! connections, and the next call asks the sentinels again. It covers a store that hears no
//! sentinel (all unreachable from weir) and a master that failed rather than moved.
//!
//! With `redis.tls` the sentinels are spoken to over TLS as well, and
//! `redis.sentinel_password` is their own `AUTH` (Sentinel's `requirepass`), apart from the
//! master's.

mod follow;

use core::time::Duration;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use futures_util::StreamExt as _;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Client, Cmd, ConnectionAddr, ErrorKind, RedisError, RedisResult, TlsCertificates, TlsMode,
    Value,
};

use self::follow::{Addr, Follow, View, about, resubscribe_delay, view_of};

use super::options::{RedisOptions, is_connection_error, tls_config_error};
use super::standalone::Conns;
use crate::error::StoreError;

/// The channel on which a sentinel announces that a master moved.
const SWITCH_MASTER: &str = "+switch-master";

/// How often a quiet subscription is checked with a `PING`: a sentinel whose host vanished
/// (no reset, no error) is found out within this plus the answer's bound, and a task whose
/// store is gone ends within it.
const PING_EVERY: Duration = Duration::from_secs(1);

/// The sentinels, and the connections to the master in use.
pub(super) struct Sentinel {
    master: String,
    shared: Arc<Shared>,
    /// A caller is asking the sentinels.
    resolving: AtomicBool,
}

/// What the store and the subscription tasks share. The tasks hold it weakly: they end once
/// the store is dropped.
struct Shared {
    opts: RedisOptions,
    /// The TLS material, read once at start (`None` without TLS).
    certs: Option<TlsCertificates>,
    state: Mutex<State>,
}

struct State {
    /// Whether to move (no IO).
    follow: Follow,
    /// The connections to the master in use, if any; `follow` knows that master's address.
    current: Option<Arc<Conns>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open connections to `to` and make them the ones in use: calls from now on go there,
    /// calls under way finish on the connections they hold.
    fn move_to(&self, state: &mut State, to: Addr) {
        let conns = self
            .opts
            .client_at(&to.host, to.port, self.certs.clone())
            .and_then(|client| Conns::new(&client, &self.opts));
        // The same settings built a client at start, so this does not fail; if it did, the
        // store stays where it is and the READONLY fallback still applies.
        if let Ok(conns) = conns {
            state.current = Some(Arc::new(conns));
            // Returns nothing: `to` is the newest master.
            let _ = state.follow.using(Some(to));
        }
    }

    /// Apply what `event` makes of the state: a move, when there is one.
    fn apply(&self, event: impl FnOnce(&mut Follow) -> Option<Addr>) {
        let mut state = self.lock();
        if let Some(to) = event(&mut state.follow) {
            self.move_to(&mut state, to);
        }
    }
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

/// The address of a client's server.
fn addr_of(client: &Client) -> Option<Addr> {
    match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some(Addr::new(host.clone(), *port))
        }
        // A Unix socket (the sentinels never name one) and what later crate versions add.
        _ => None,
    }
}

impl Sentinel {
    /// Nothing connects here; the subscription tasks start (on the caller's runtime) and
    /// connect in the background.
    pub(super) fn new(opts: &RedisOptions) -> Result<Sentinel, StoreError> {
        let master = opts
            .sentinel_master
            .clone()
            .ok_or_else(|| StoreError::Config("sentinel mode needs sentinel_master".into()))?;
        if opts.nodes.is_empty() {
            return Err(StoreError::Config("sentinel mode needs sentinels".into()));
        }
        let certs = opts.tls_certificates()?;
        let s = Sentinel {
            master: master.clone(),
            shared: Arc::new(Shared {
                opts: opts.clone(),
                certs: certs.clone(),
                state: Mutex::new(State {
                    follow: Follow::new(opts.nodes.len()),
                    current: None,
                }),
            }),
            resolving: AtomicBool::new(false),
        };
        // Built once here so that a bad TLS file stops the start (C-CONF-1) instead of failing
        // every call; each resolution builds it again (the sentinels' answer is not kept).
        s.client()?;
        for (i, (host, port)) in opts.nodes.iter().enumerate() {
            let client = opts.sentinel_client_at(host, *port, certs.clone())?;
            let watch = Watch {
                index: i,
                client,
                master: master.clone(),
                answer: opts.dial_timeout.max(opts.response_timeout),
                shared: Arc::downgrade(&s.shared),
            };
            crate::rt::spawn(watch.run());
        }
        Ok(s)
    }

    /// The sentinel client: TLS (the same CA and client certificate) to the sentinels and to
    /// the master they name when `tls`; the sentinels' own password, then the master's.
    fn client(&self) -> Result<SentinelClient, StoreError> {
        let o = &self.shared.opts;
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
        self.shared.lock().current.clone()
    }

    /// Forget `conns` (if they are still the ones in use): the next call asks the sentinels.
    fn forget(&self, conns: &Arc<Conns>) {
        let mut state = self.shared.lock();
        if state
            .current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, conns))
        {
            state.current = None;
            // Returns nothing: no connections in use.
            let _ = state.follow.using(None);
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
        let asked =
            crate::rt::timeout(self.shared.opts.dial_timeout, sentinel.async_get_client()).await;
        let client = asked.ok_or_else(|| unavailable("the sentinels did not answer in time"))??;
        let conns = Arc::new(Conns::new(&client, &self.shared.opts).map_err(|e| {
            RedisError::from((ErrorKind::InvalidClientConfig, "master", e.to_string()))
        })?);
        let mut state = self.shared.lock();
        state.current = Some(Arc::clone(&conns));
        // The one sentinel the crate asked may lag behind the others: when a subscribed one
        // names a newer master, go there instead.
        if let Some(to) = state.follow.using(addr_of(&client)) {
            self.shared.move_to(&mut state, to);
        }
        Ok(state.current.clone().unwrap_or(conns))
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
            .map_or(self.shared.opts.connections as usize, |c| c.len())
    }
}

/// `fut`, failed as a connection error when it has not answered within `limit`.
async fn bounded<T>(limit: Duration, fut: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
    crate::rt::timeout(limit, fut)
        .await
        .unwrap_or_else(|| Err(unavailable("a sentinel did not answer in time")))
}

/// One sentinel's `+switch-master` subscription, made again whenever it ends, for as long as
/// the store lives.
struct Watch {
    /// The sentinel's place in `redis.addresses`.
    index: usize,
    client: Client,
    master: String,
    /// Bound on connecting, subscribing and each answer.
    answer: Duration,
    shared: Weak<Shared>,
}

impl Watch {
    async fn run(self) {
        let mut failures = 0u32;
        while self.shared.strong_count() > 0 {
            let was_up = self.session().await;
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            shared.lock().follow.lost(self.index);
            drop(shared);
            failures = if was_up {
                0
            } else {
                failures.saturating_add(1)
            };
            crate::rt::sleep(resubscribe_delay(failures)).await;
        }
    }

    /// Subscribe, say what the sentinel names now, then follow its announcements until the
    /// subscription ends or the store is gone. Whether the subscription was up.
    async fn session(&self) -> bool {
        let subscribed = async {
            let mut pubsub = bounded(self.answer, self.client.get_async_pubsub()).await?;
            bounded(self.answer, pubsub.subscribe(SWITCH_MASTER)).await?;
            // A second connection for asking: a subscribed RESP2 connection takes no other
            // command.
            let mut ask =
                bounded(self.answer, self.client.get_multiplexed_async_connection()).await?;
            // Asked after subscribing, and applied before any message: a switch announced in
            // between is either in this answer already or queued behind it.
            let view = bounded(self.answer, self.ask(&mut ask)).await?;
            RedisResult::Ok((pubsub, ask, view))
        };
        let Ok((pubsub, mut ask, view)) = subscribed.await else {
            return false;
        };
        if !self.said(view) {
            return true;
        }
        let (mut sink, mut messages) = pubsub.split();
        loop {
            match crate::rt::timeout(PING_EVERY, messages.next()).await {
                Some(Some(msg)) => {
                    let about_ours = msg
                        .get_payload::<String>()
                        .is_ok_and(|text| about(&self.master, &text));
                    if about_ours {
                        // The message has no epoch: the sentinel's configuration now has one,
                        // and is at least as new as the message.
                        let Ok(view) = bounded(self.answer, self.ask(&mut ask)).await else {
                            return true;
                        };
                        if !self.said(view) {
                            return true;
                        }
                    }
                }
                // The connection ended.
                Some(None) => return true,
                None => {
                    if self.shared.strong_count() == 0 {
                        return true;
                    }
                    let pong = crate::rt::timeout(self.answer, sink.ping::<Value>()).await;
                    if !matches!(pong, Some(Ok(_))) {
                        return true;
                    }
                }
            }
        }
    }

    /// Apply what this sentinel said; false when the store is gone.
    fn said(&self, view: Option<View>) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        shared.apply(|f| f.said(self.index, view));
        true
    }

    /// `SENTINEL MASTER <name>`: where this sentinel says the master is, and the epoch of that
    /// configuration (`None`: it does not monitor that name).
    async fn ask(&self, conn: &mut MultiplexedConnection) -> RedisResult<Option<View>> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("MASTER").arg(&self.master);
        match cmd.query_async::<Vec<String>>(conn).await {
            Ok(reply) => Ok(view_of(&reply)),
            // An error reply ("ERR No such master with that name") is an answer, not a failure
            // of the connection.
            Err(e) if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
