//! How to reach Redis ([`RedisOptions`], C-RATE-3): the topology, TLS, credentials, deadlines
//! and key prefix, and the clients and addresses every topology builds from them.

use core::fmt;
use core::time::Duration;
use std::path::{Path, PathBuf};

use redis::{Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
use redis::{RedisError, TlsCertificates};
use weir_core::config::{RedisMode, RedisSettings};

use crate::error::StoreError;

/// The default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "weir:rl:";

/// How to reach Redis.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// The topology.
    pub mode: RedisMode,
    /// Host name or address (standalone).
    pub host: String,
    /// Port (standalone).
    pub port: u16,
    /// The seed nodes (cluster) or the sentinels (sentinel).
    pub nodes: Vec<(String, u16)>,
    /// The master's name the sentinels monitor (sentinel).
    pub sentinel_master: Option<String>,
    /// TLS (rustls, the workspace's ring provider) to every Redis node and to the sentinels;
    /// the server's certificate is verified against `tls_ca_file` or the system's roots.
    pub tls: bool,
    /// PEM CA certificates to verify the servers against instead of the system's roots.
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate chain and private key, for servers with `tls-auth-clients`.
    pub tls_client: Option<(PathBuf, PathBuf)>,
    /// `AUTH` password, if any.
    pub password: Option<String>,
    /// The sentinels' own `AUTH` password (sentinel mode; `requirepass` in sentinel.conf).
    pub sentinel_password: Option<String>,
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
            .field("mode", &self.mode)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("nodes", &self.nodes)
            .field("sentinel_master", &self.sentinel_master)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_client", &self.tls_client)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "[redacted]"),
            )
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
            mode: RedisMode::Standalone,
            host: host.into(),
            port,
            nodes: Vec::new(),
            sentinel_master: None,
            tls: false,
            tls_ca_file: None,
            tls_client: None,
            password: None,
            sentinel_password: None,
            database: 0,
            connections: 4,
            dial_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// A Redis Cluster reached through `seeds` (other defaults as [`RedisOptions::new`]).
    #[must_use]
    pub fn cluster(seeds: impl IntoIterator<Item = (String, u16)>) -> RedisOptions {
        let nodes: Vec<(String, u16)> = seeds.into_iter().collect();
        let (host, port) = nodes.first().cloned().unwrap_or_default();
        RedisOptions {
            mode: RedisMode::Cluster,
            nodes,
            ..RedisOptions::new(host, port)
        }
    }

    /// The master named `master` found through `sentinels`.
    #[must_use]
    pub fn sentinel(
        sentinels: impl IntoIterator<Item = (String, u16)>,
        master: impl Into<String>,
    ) -> RedisOptions {
        RedisOptions {
            mode: RedisMode::Sentinel,
            sentinel_master: Some(master.into()),
            ..RedisOptions::cluster(sentinels)
        }
    }

    /// From the validated `redis` settings: `pool_size` connections, `dial_timeout`, and the
    /// larger of `read_timeout` and `write_timeout` as the answer deadline.
    #[must_use]
    pub fn from_settings(s: &RedisSettings) -> RedisOptions {
        RedisOptions {
            mode: s.mode,
            host: s.address.host.clone(),
            port: s.address.port,
            nodes: s
                .addresses
                .iter()
                .map(|a| (a.host.clone(), a.port))
                .collect(),
            sentinel_master: s.sentinel_master.clone(),
            tls: s.tls,
            tls_ca_file: s.tls_ca_file.clone(),
            tls_client: s.tls_client.clone(),
            password: s.password.as_ref().map(|p| p.expose().to_owned()),
            sentinel_password: s.sentinel_password.as_ref().map(|p| p.expose().to_owned()),
            database: s.database,
            connections: s.pool_size,
            dial_timeout: s.dial_timeout,
            response_timeout: s.read_timeout.max(s.write_timeout),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// `host:port` as the redis crate's address: TLS (certificate and host name verified)
    /// when `tls`.
    pub(super) fn addr(&self, host: &str, port: u16) -> ConnectionAddr {
        if self.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        }
    }

    /// The TLS material, read now so that a missing or unreadable file stops the start with
    /// its name (the redis crate parses the PEM when the client is built). `None` without TLS.
    pub(super) fn tls_certificates(&self) -> Result<Option<TlsCertificates>, StoreError> {
        if !self.tls {
            return Ok(None);
        }
        // The redis crate builds its rustls configuration on the process-default provider;
        // make that ring (the workspace's only one) unless the process chose already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        /// The file, which must hold a PEM block whose label ends with `label` (never quoted:
        /// a key file is a secret).
        fn read(what: &str, path: &Path, label: &str) -> Result<Vec<u8>, StoreError> {
            let bytes = std::fs::read(path)
                .map_err(|e| StoreError::Config(format!("redis.{what} {}: {e}", path.display())))?;
            let text = String::from_utf8_lossy(&bytes);
            let end = format!("{label}-----");
            let found = text
                .lines()
                .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&end));
            if !found {
                return Err(StoreError::Config(format!(
                    "redis.{what} {}: no PEM {label} in it (-----BEGIN ...{label}-----)",
                    path.display()
                )));
            }
            Ok(bytes)
        }
        let root_cert = match &self.tls_ca_file {
            Some(p) => Some(read("tls_ca_file", p, "CERTIFICATE")?),
            None => None,
        };
        let client_tls = match &self.tls_client {
            Some((cert, key)) => Some(ClientTlsConfig {
                client_cert: read("tls_cert_file", cert, "CERTIFICATE")?,
                client_key: read("tls_key_file", key, "PRIVATE KEY")?,
            }),
            None => None,
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// The client for the standalone server.
    pub(super) fn client(&self) -> Result<Client, StoreError> {
        self.client_at(&self.host, self.port, self.tls_certificates()?)
    }

    /// A client for the Redis server at `host:port` (the database and password of the
    /// settings), over TLS with `certs` when `tls`.
    pub(super) fn client_at(
        &self,
        host: &str,
        port: u16,
        certs: Option<TlsCertificates>,
    ) -> Result<Client, StoreError> {
        let mut redis = RedisConnectionInfo::default().set_db(i64::from(self.database));
        if let Some(p) = &self.password {
            redis = redis.set_password(p);
        }
        self.open(host, port, redis, certs)
    }

    /// A client for the sentinel at `host:port`: its own password (`sentinel_password`), over
    /// TLS with `certs` when `tls`.
    pub(super) fn sentinel_client_at(
        &self,
        host: &str,
        port: u16,
        certs: Option<TlsCertificates>,
    ) -> Result<Client, StoreError> {
        let mut redis = RedisConnectionInfo::default();
        if let Some(p) = &self.sentinel_password {
            redis = redis.set_password(p);
        }
        self.open(host, port, redis, certs)
    }

    fn open(
        &self,
        host: &str,
        port: u16,
        redis: RedisConnectionInfo,
        certs: Option<TlsCertificates>,
    ) -> Result<Client, StoreError> {
        let info = self
            .addr(host, port)
            .into_connection_info()
            .map_err(|e| StoreError::Config(e.to_string()))?
            .set_redis_settings(redis);
        let client = match certs {
            Some(certs) => Client::build_with_tls(info, certs),
            None => Client::open(info),
        };
        client.map_err(|e| tls_config_error(&e))
    }
}

/// A client that could not be built from the settings (a PEM file the redis crate cannot
/// parse, a bad address): a configuration error, so the start stops with it.
pub(super) fn tls_config_error(e: &RedisError) -> StoreError {
    StoreError::Config(format!("redis: {e}"))
}
/// Whether `e` says the connection (not the command) failed.
pub(super) fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}
