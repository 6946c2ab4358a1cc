//! TLS and PROXY protocol helpers for the C-TLS cases: certificates generated with rcgen and
//! written as PEM, a TLS client that records which certificate the proxy presented (it
//! accepts any, with real signature checks, so that SNI and default selection can be seen
//! even for names the certificate does not cover), and PROXY headers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Request;
use http_body_util::BodyExt as _;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme, SupportedProtocolVersion};
use tokio::io::AsyncWriteExt as _;

use crate::backend::TestBody;
use crate::client::{Resp, connect};

/// A self-signed certificate and its key, as PEM.
#[derive(Debug, Clone)]
pub struct Cert {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The private key (PEM).
    pub key_pem: String,
    /// The certificate (DER), to recognise it.
    pub der: Vec<u8>,
}

impl Cert {
    /// A new certificate for `names` (DNS names or IP addresses).
    pub fn new(names: &[&str]) -> Cert {
        let c = rcgen::generate_simple_self_signed(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .expect("rcgen certificate");
        Cert {
            cert_pem: c.cert.pem(),
            key_pem: c.signing_key.serialize_pem(),
            der: c.cert.der().to_vec(),
        }
    }

    /// Writes `<name>.crt` and `<name>.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let c = dir.join(format!("{name}.crt"));
        let k = dir.join(format!("{name}.key"));
        std::fs::write(&c, &self.cert_pem).expect("write cert");
        std::fs::write(&k, &self.key_pem).expect("write key");
        (c, k)
    }
}

/// `server.tls.certificates` entries for these pairs.
pub fn certificates(pairs: &[(PathBuf, PathBuf)]) -> serde_json::Value {
    serde_json::Value::Array(
        pairs
            .iter()
            .map(|(c, k)| serde_json::json!({"cert_file": c, "key_file": k}))
            .collect(),
    )
}

/// Accepts any certificate (signatures still verified) and records the leaf it saw.
#[derive(Debug)]
struct Recorder {
    seen: Mutex<Option<Vec<u8>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap() = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct Client {
    /// SNI to send (`None`: none).
    pub sni: Option<String>,
    /// Versions offered.
    pub versions: Vec<&'static SupportedProtocolVersion>,
    /// ALPN offered.
    pub alpn: Vec<Vec<u8>>,
    /// Bytes written on the TCP connection before the ClientHello (a PROXY header).
    pub preface: Vec<u8>,
}

impl Client {
    /// TLS 1.2 and 1.3, ALPN `http/1.1`, SNI `sni`.
    pub fn new(sni: Option<&str>) -> Client {
        Client {
            sni: sni.map(str::to_owned),
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            alpn: vec![b"http/1.1".to_vec()],
            preface: Vec::new(),
        }
    }

    /// Sends `header` (a PROXY v1 or v2 header) on the connection before the handshake.
    pub fn proxy_header(mut self, header: &[u8]) -> Client {
        self.preface = header.to_vec();
        self
    }

    /// Only `version`.
    pub fn only(mut self, version: &'static SupportedProtocolVersion) -> Client {
        self.versions = vec![version];
        self
    }

    /// ALPN `h2` only.
    pub fn h2(mut self) -> Client {
        self.alpn = vec![b"h2".to_vec()];
        self
    }
}

/// What one TLS exchange saw.
#[derive(Debug)]
pub struct Seen {
    /// The leaf certificate presented (DER).
    pub cert: Vec<u8>,
    /// The version agreed.
    pub version: Option<rustls::ProtocolVersion>,
    /// The ALPN protocol agreed.
    pub alpn: Option<Vec<u8>>,
    /// The response to `GET target`, when one was asked for.
    pub resp: Option<Resp>,
}

/// Handshake with `addr` as `client` says and, when `target` is set, send `GET target` over
/// the session (HTTP/2 when ALPN agreed `h2`).
pub async fn exchange(
    addr: SocketAddr,
    client: &Client,
    target: Option<&str>,
) -> Result<Seen, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let recorder = Arc::new(Recorder {
        seen: Mutex::new(None),
        provider: Arc::clone(&provider),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&client.versions)
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::clone(&recorder) as _)
        .with_no_client_auth();
    config.alpn_protocols.clone_from(&client.alpn);
    config.enable_sni = client.sni.is_some();
    let name = ServerName::try_from(
        client
            .sni
            .clone()
            .unwrap_or_else(|| "no-sni.invalid".into()),
    )
    .map_err(|e| e.to_string())?;
    let fut = async {
        let mut tcp = connect(addr, None)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        if !client.preface.is_empty() {
            tcp.write_all(&client.preface)
                .await
                .map_err(|e| format!("write the preface: {e}"))?;
        }
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (version, alpn) = {
            let c = tls.get_ref().1;
            (c.protocol_version(), c.alpn_protocol().map(<[u8]>::to_vec))
        };
        let cert = recorder.seen.lock().unwrap().clone().unwrap_or_default();
        let resp = match target {
            None => None,
            Some(t) => Some(request(tls, alpn.as_deref() == Some(b"h2"), client, t).await?),
        };
        Ok(Seen {
            cert,
            version,
            alpn,
            resp,
        })
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| "TLS exchange timed out".to_string())?
}

async fn request<S>(io: S, h2: bool, client: &Client, target: &str) -> Result<Resp, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let start = Instant::now();
    let host = client.sni.clone().unwrap_or_else(|| "localhost".into());
    let resp = if h2 {
        let (mut sender, conn) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .handshake::<_, TestBody>(TokioIo::new(io))
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::get(format!("https://{host}{target}"))
            .body(TestBody::Full(None))
            .map_err(|e| e.to_string())?;
        sender
            .send_request(req)
            .await
            .map_err(|e| format!("h2 request: {e}"))?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake::<_, TestBody>(TokioIo::new(io))
            .await
            .map_err(|e| format!("http/1.1 handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::get(target)
            .header("host", host)
            .body(TestBody::Full(None))
            .map_err(|e| e.to_string())?;
        sender
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?
    };
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
        elapsed: start.elapsed(),
    })
}

/// A TLS 1.0 (`minor` 1) or 1.1 (`minor` 2) ClientHello, built by hand (rustls cannot send
/// one): no `supported_versions` extension, two TLS 1.0-era cipher suites, SNI `localhost`.
pub fn legacy_client_hello(minor: u8) -> Vec<u8> {
    let sni_name = b"localhost";
    let mut sni = Vec::new();
    let list_len = 3 + sni_name.len();
    sni.extend_from_slice(&[0x00, 0x00]); // server_name
    sni.extend_from_slice(&u16::try_from(list_len + 2).unwrap().to_be_bytes());
    sni.extend_from_slice(&u16::try_from(list_len).unwrap().to_be_bytes());
    sni.push(0); // host_name
    sni.extend_from_slice(&u16::try_from(sni_name.len()).unwrap().to_be_bytes());
    sni.extend_from_slice(sni_name);
    let mut body = vec![0x03, minor];
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0x00, 0x04, 0xc0, 0x13, 0x00, 0x2f]); // cipher suites
    body.extend_from_slice(&[0x01, 0x00]); // compression: null
    body.extend_from_slice(&u16::try_from(sni.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&sni);
    let mut hs = vec![0x01];
    hs.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&u16::try_from(hs.len()).unwrap().to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A PROXY v2 header (`PROXY` command, TCP over IPv4) carrying `src`.
pub fn proxy_v2(src: std::net::SocketAddrV4) -> Vec<u8> {
    let mut v = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v.extend_from_slice(&[0x21, 0x11, 0x00, 12]);
    v.extend_from_slice(&src.ip().octets());
    v.extend_from_slice(&[127, 0, 0, 1]);
    v.extend_from_slice(&src.port().to_be_bytes());
    v.extend_from_slice(&80u16.to_be_bytes());
    v
}

/// One connection a [`ProxyBackend`] accepted: the PROXY header it began with, and the paths
/// of the requests served on it.
#[derive(Debug, Clone, Default)]
pub struct ProxyConn {
    /// The header's bytes (empty: the connection began with something else).
    pub header: Vec<u8>,
    /// Request paths, in order.
    pub paths: Vec<String>,
}

/// A raw HTTP/1.1 backend on 127.0.0.1 that expects every connection to begin with a PROXY
/// header (v1 or v2) and records it, as nginx's `listen ... proxy_protocol` would; it answers
/// every request `200` with keep-alive. For `backends[].send_proxy_protocol`.
#[derive(Debug, Clone)]
pub struct ProxyBackend {
    /// Its address.
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<ProxyConn>>>,
}

impl ProxyBackend {
    /// Listens on an ephemeral port of 127.0.0.1.
    pub async fn start() -> ProxyBackend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the PROXY backend");
        let addr = listener.local_addr().expect("local addr");
        let conns = Arc::new(Mutex::new(Vec::new()));
        let all = Arc::clone(&conns);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let all = Arc::clone(&all);
                tokio::spawn(proxy_backend_conn(stream, all));
            }
        });
        ProxyBackend { addr, conns }
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The connections so far.
    pub fn conns(&self) -> Vec<ProxyConn> {
        self.conns.lock().unwrap().clone()
    }
}

/// The length of the PROXY header at the start of `buf`, once it is whole.
fn proxy_header_len(buf: &[u8]) -> Option<usize> {
    const V2: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
    if buf.starts_with(V2) {
        let len = usize::from(u16::from_be_bytes([*buf.get(14)?, *buf.get(15)?]));
        return (buf.len() >= 16 + len).then_some(16 + len);
    }
    if buf.starts_with(b"PROXY ") {
        return buf.windows(2).position(|w| w == b"\r\n").map(|i| i + 2);
    }
    // Not a header (or not yet one): wait for more unless it can no longer be one.
    let n = buf.len().min(V2.len());
    if buf[..n] != V2[..n] && buf[..buf.len().min(6)] != b"PROXY "[..buf.len().min(6)] {
        return Some(0);
    }
    None
}

async fn proxy_backend_conn(mut stream: tokio::net::TcpStream, all: Arc<Mutex<Vec<ProxyConn>>>) {
    use tokio::io::AsyncReadExt as _;
    let index = {
        let mut all = all.lock().unwrap();
        all.push(ProxyConn::default());
        all.len() - 1
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut header_done = false;
    loop {
        if !header_done && let Some(n) = proxy_header_len(&buf) {
            all.lock().unwrap()[index].header = buf.drain(..n).collect();
            header_done = true;
            if n == 0 {
                return; // no PROXY header: refused, as a strict receiver does
            }
        }
        if header_done && let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let path = head.split(' ').nth(1).unwrap_or("").to_owned();
            all.lock().unwrap()[index].paths.push(path);
            let answer =
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Backend: proxy-backend\r\n\r\nok";
            if stream.write_all(answer).await.is_err() {
                return;
            }
            continue;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The source address a PROXY header carries (`None`: `UNKNOWN`, `LOCAL`, or unreadable).
pub fn proxy_header_source(header: &[u8]) -> Option<SocketAddr> {
    proxy_header_addresses(header).map(|(source, _)| source)
}

/// The destination address a PROXY header carries (`None`: `UNKNOWN`, `LOCAL`, or unreadable).
pub fn proxy_header_destination(header: &[u8]) -> Option<SocketAddr> {
    proxy_header_addresses(header).map(|(_, destination)| destination)
}

/// The source and destination a PROXY header carries.
fn proxy_header_addresses(header: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    if let Some(line) = header.strip_prefix(b"PROXY ") {
        let line = std::str::from_utf8(line).ok()?.trim_end();
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.len() != 5 || !matches!(parts[0], "TCP4" | "TCP6") {
            return None;
        }
        let src: std::net::IpAddr = parts[1].parse().ok()?;
        let dst: std::net::IpAddr = parts[2].parse().ok()?;
        return Some((
            SocketAddr::new(src, parts[3].parse().ok()?),
            SocketAddr::new(dst, parts[4].parse().ok()?),
        ));
    }
    // v2: the PROXY command (0x21), TCP over IPv4 (0x11) or IPv6 (0x21).
    let p = header.get(16..)?;
    match (header.get(12..14)?, p.len()) {
        ([0x21, 0x11], 12) => {
            let src = std::net::Ipv4Addr::new(p[0], p[1], p[2], p[3]);
            let dst = std::net::Ipv4Addr::new(p[4], p[5], p[6], p[7]);
            Some((
                SocketAddr::from((src, u16::from_be_bytes([p[8], p[9]]))),
                SocketAddr::from((dst, u16::from_be_bytes([p[10], p[11]]))),
            ))
        }
        ([0x21, 0x21], 36) => {
            let src = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&p[..16]).ok()?);
            let dst = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&p[16..32]).ok()?);
            Some((
                SocketAddr::from((src, u16::from_be_bytes([p[32], p[33]]))),
                SocketAddr::from((dst, u16::from_be_bytes([p[34], p[35]]))),
            ))
        }
        _ => None,
    }
}
