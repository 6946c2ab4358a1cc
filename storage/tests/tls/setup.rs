//! Certificates and TLS servers for the `redis.tls` tests: a test CA (rcgen), a second CA
//! nobody trusts, server and client certificates, written as PEM files; private
//! `redis-server`s with a plain port (for the test's own checks) and a `--tls-port`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use weir_storage::RedisOptions;

use crate::common::{RedisServer, unique};

/// PEM armour for DER bytes (rcgen is built without its `pem` feature here).
fn pem(label: &str, der: &[u8]) -> String {
    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("ascii"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn common_name(name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("weir test {name}"));
    dn
}

/// The files of one test PKI, in a temporary directory removed on drop.
pub struct Pki {
    pub dir: PathBuf,
    /// The CA that signed every certificate below.
    pub ca: PathBuf,
    /// Another CA, which signed nothing here.
    pub other_ca: PathBuf,
    /// The server's certificate (localhost, 127.0.0.1) and key.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A server certificate from the trusted CA for another name (other.example).
    pub wrong_name_cert: PathBuf,
    pub wrong_name_key: PathBuf,
    /// A client certificate and key from the trusted CA.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = std::env::temp_dir().join(unique("weirtls"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("write PEM");
            p
        };
        let ca = |name: &str| {
            let key = KeyPair::generate().expect("key");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name = common_name(name);
            let cert = params.self_signed(&key).expect("CA");
            let path = write(name, pem("CERTIFICATE", cert.der()));
            (Issuer::new(params, key), path)
        };
        let (issuer, ca_path) = ca("ca.pem");
        let (_, other_ca) = ca("other-ca.pem");
        let leaf = |names: &[&str], tag: &str| {
            let key = KeyPair::generate().expect("key");
            let mut params =
                CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                    .expect("params");
            // OpenSSL (redis-server) takes a leaf whose subject is its issuer's for a
            // self-signed certificate: every certificate gets its own name.
            params.distinguished_name = common_name(tag);
            let cert = params.signed_by(&key, &issuer).expect("sign");
            (
                write(&format!("{tag}.pem"), pem("CERTIFICATE", cert.der())),
                write(
                    &format!("{tag}.key"),
                    pem("PRIVATE KEY", &key.serialize_der()),
                ),
            )
        };
        let (server_cert, server_key) = leaf(&["localhost", "127.0.0.1"], "server");
        let (wrong_name_cert, wrong_name_key) = leaf(&["other.example"], "wrong-name");
        let (client_cert, client_key) = leaf(&["weir-client"], "client");
        Pki {
            dir,
            ca: ca_path,
            other_ca,
            server_cert,
            server_key,
            wrong_name_cert,
            wrong_name_key,
            client_cert,
            client_key,
        }
    }

    /// The `redis-server` options for TLS on `tls_port` with the server certificate (or the
    /// wrong-name one), clients verified when `auth_clients` is `yes`.
    pub fn server_args(&self, tls_port: u16, auth_clients: &str, wrong_name: bool) -> Vec<String> {
        let (cert, key) = if wrong_name {
            (&self.wrong_name_cert, &self.wrong_name_key)
        } else {
            (&self.server_cert, &self.server_key)
        };
        [
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path(cert),
            "--tls-key-file",
            &path(key),
            "--tls-ca-cert-file",
            &path(&self.ca),
            "--tls-auth-clients",
            auth_clients,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }

    /// A standalone server: plain on `port`, TLS on `tls_port`.
    pub fn server(&self, port: u16, tls_port: u16, auth_clients: &str) -> RedisServer {
        let args = self.server_args(tls_port, auth_clients, false);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        RedisServer::start(Some(port), &args)
    }

    /// Options for a standalone store on `tls_port` over TLS, verified against the test CA.
    pub fn opts(&self, tls_port: u16) -> RedisOptions {
        let mut o = RedisOptions::new("127.0.0.1", tls_port);
        self.secure(&mut o);
        o
    }

    /// TLS on, the test CA as the only root, a unique key prefix, deadlines that a TLS
    /// handshake in a debug build on a loaded machine meets.
    pub fn secure(&self, o: &mut RedisOptions) {
        o.tls = true;
        o.tls_ca_file = Some(self.ca.clone());
        o.key_prefix = format!("{}:", unique("weirtls"));
        o.dial_timeout = Duration::from_secs(10);
        o.response_timeout = Duration::from_secs(10);
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        if std::env::var_os("WEIR_TEST_KEEP_PKI").is_some() {
            eprintln!("PKI kept in {}", self.dir.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn path(p: &std::path::Path) -> String {
    p.to_str().expect("utf-8 temp path").to_owned()
}
