//! Idle keep-alive client connections: open N, one request each, then hold them.
//!
//! This is the client side of the memory measurement: a proxy that keeps per-connection state
//! small holds tens of thousands of idle keep-alive clients cheaply. Each connection sends one
//! `GET /` and reads the whole response, so the proxy has gone through its full request path
//! (buffers grown, upstream picked) before the connection turns idle — the realistic idle state,
//! not a never-used socket.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

/// Largest response head accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// A response read by [`read_response`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleResponse {
    /// Status code.
    pub status: u16,
    /// The body (de-chunked when chunked).
    pub body: Bytes,
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// Where the head ends (index just past `\r\n\r\n`).
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: n`.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body runs to the end of the connection (not keep-alive).
    UntilClose,
}

/// Status and framing of a response head (`head` ends with the blank line).
pub fn parse_head(head: &[u8]) -> io::Result<(u16, Framing)> {
    let text = std::str::from_utf8(head).map_err(|_| invalid("response head is not utf-8"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.split(' ');
    if !parts.next().unwrap_or("").starts_with("HTTP/1.") {
        return Err(invalid("not an HTTP/1 response"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad status code"))?;
    let mut framing = if status == 204 || status == 304 || (100..200).contains(&status) {
        Framing::Length(0)
    } else {
        Framing::UntilClose
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n = value.parse().map_err(|_| invalid("bad content-length"))?;
            framing = Framing::Length(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().ends_with("chunked")
        {
            framing = Framing::Chunked;
            break;
        }
    }
    Ok((status, framing))
}

/// Decodes a complete chunked body; `None` while more bytes are needed.
pub fn dechunk(buf: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut pos = 0;
    loop {
        let Some(line_end) = buf[pos..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&buf[pos..pos + line_end])
            .map_err(|_| invalid("bad chunk size"))?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| invalid("bad chunk size"))?;
        pos += line_end + 2;
        if size == 0 {
            // Trailers (none expected) end with a blank line.
            return Ok(if buf[pos..].windows(2).any(|w| w == b"\r\n") {
                Some(out)
            } else {
                None
            });
        }
        if buf.len() < pos + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

/// Reads one whole HTTP/1.1 response from `conn`.
pub async fn read_response(conn: &mut TcpStream) -> io::Result<SimpleResponse> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_len = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(invalid("response head too large"));
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let (status, framing) = parse_head(&buf[..head_len])?;
    let mut body = buf.split_off(head_len);
    loop {
        match framing {
            Framing::Length(n) if body.len() >= n => {
                body.truncate(n);
                return Ok(SimpleResponse {
                    status,
                    body: body.into(),
                });
            }
            Framing::Chunked => {
                if let Some(decoded) = dechunk(&body)? {
                    return Ok(SimpleResponse {
                        status,
                        body: decoded.into(),
                    });
                }
            }
            _ => {}
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return match framing {
                Framing::UntilClose => Ok(SimpleResponse {
                    status,
                    body: body.into(),
                }),
                _ => Err(io::ErrorKind::UnexpectedEof.into()),
            };
        }
        body.extend_from_slice(&chunk[..n]);
    }
}

/// Source addresses to spread `n` connections over: one address per `per_source`
/// connections, 127.0.0.1 first, then 127.0.0.2, ... (all loopback).
pub fn sources(n: usize, per_source: usize) -> Vec<IpAddr> {
    let count = n.div_ceil(per_source.max(1)).clamp(1, 250);
    (0..count)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + i as u8)))
        .collect()
}

/// What [`open`] achieved.
#[derive(Debug)]
pub struct Opened {
    /// Connections that got a response and are now idle.
    pub streams: Vec<TcpStream>,
    /// Connections that failed, with the first few reasons.
    pub failures: usize,
    /// Up to five failure messages.
    pub sample_errors: Vec<String>,
}

/// Which protocol the idle clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 keep-alive.
    Http1,
    /// HTTP/2 with prior knowledge (h2c): one stream, then the connection stays open.
    H2c,
}

/// The client preface, SETTINGS and a `GET /` on stream 1; then reads frames, acknowledging the
/// server's SETTINGS, until stream 1 ends with a `200`.
async fn h2_exchange(conn: &mut TcpStream) -> io::Result<()> {
    use weir_conformance::h2raw;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&h2raw::settings(&[]));
    hello.extend_from_slice(&h2raw::get(1, "/"));
    conn.write_all(&hello).await?;
    let mut status_ok = false;
    loop {
        let mut head = [0u8; 9];
        conn.read_exact(&mut head).await?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        conn.read_exact(&mut payload).await?;
        match kind {
            h2raw::kind::SETTINGS if flags & 0x1 == 0 => {
                conn.write_all(&h2raw::frame(h2raw::kind::SETTINGS, 0x1, 0, &[]))
                    .await?;
            }
            h2raw::kind::PING if flags & 0x1 == 0 => {
                conn.write_all(&h2raw::frame(h2raw::kind::PING, 0x1, 0, &payload))
                    .await?;
            }
            h2raw::kind::GOAWAY => return Err(invalid("GOAWAY before the response")),
            h2raw::kind::RST_STREAM if stream == 1 => return Err(invalid("stream 1 reset")),
            h2raw::kind::HEADERS if stream == 1 && !status_ok => {
                // `:status: 200` is HPACK static-table entry 8 (0x88): every proxy measured sends
                // it indexed. A cheap check, not a decoder: a load client, not a test oracle.
                status_ok = payload.contains(&0x88);
                if !status_ok {
                    return Err(invalid("stream 1 did not answer 200"));
                }
            }
            _ => {}
        }
        if stream == 1 && flags & h2raw::END_STREAM != 0 && (kind == 0 || kind == 1) {
            return if status_ok {
                Ok(())
            } else {
                Err(invalid("stream 1 ended without a head"))
            };
        }
    }
}

async fn one(
    target: SocketAddr,
    source: Option<IpAddr>,
    host: String,
    proto: Proto,
) -> io::Result<TcpStream> {
    let mut conn = match source {
        None => TcpStream::connect(target).await?,
        Some(ip) => {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(target).await?
        }
    };
    if proto == Proto::H2c {
        tokio::time::timeout(Duration::from_secs(30), h2_exchange(&mut conn))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response in 30s"))??;
        return Ok(conn);
    }
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nUser-Agent: weir-load-idle\r\n\r\n");
    conn.write_all(req.as_bytes()).await?;
    let resp = tokio::time::timeout(Duration::from_secs(30), read_response(&mut conn))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no response in 30s"))??;
    if resp.status != 200 {
        return Err(invalid(&format!("status {}", resp.status)));
    }
    Ok(conn)
}

/// How many idle connections [`open`] makes, and how.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Connections to open.
    pub n: usize,
    /// Connections per loopback source address (see [`sources`]).
    pub per_source: usize,
    /// Connections being set up at once.
    pub parallel: usize,
    /// The protocol they speak.
    pub proto: Proto,
}

/// Opens `shape.n` connections to `target` (at most `shape.parallel` being set up at once), sends
/// one request on each, reads the response and keeps the connection.
pub async fn open(target: SocketAddr, shape: Shape) -> Opened {
    let Shape {
        n,
        per_source,
        parallel,
        proto,
    } = shape;
    let srcs = sources(n, per_source);
    let bind = srcs.len() > 1;
    let host = target.to_string();
    let mut set = JoinSet::new();
    let mut out = Opened {
        streams: Vec::with_capacity(n),
        failures: 0,
        sample_errors: Vec::new(),
    };
    let mut started = 0;
    while started < n || !set.is_empty() {
        while started < n && set.len() < parallel.max(1) {
            let source = bind.then(|| srcs[started / per_source.max(1) % srcs.len()]);
            set.spawn(one(target, source, host.clone(), proto));
            started += 1;
        }
        let Some(joined) = set.join_next().await else {
            break;
        };
        match joined {
            Ok(Ok(stream)) => out.streams.push(stream),
            Ok(Err(e)) => {
                out.failures += 1;
                if out.sample_errors.len() < 5 {
                    out.sample_errors.push(e.to_string());
                }
            }
            Err(e) => {
                out.failures += 1;
                if out.sample_errors.len() < 5 {
                    out.sample_errors.push(e.to_string());
                }
            }
        }
    }
    out
}

/// How many of `streams` the peer has not closed (a read would block, no EOF, no error).
pub fn still_open(streams: &[TcpStream]) -> usize {
    let mut buf = [0u8; 64];
    streams
        .iter()
        .filter(|s| matches!(s.try_read(&mut buf), Err(e) if e.kind() == io::ErrorKind::WouldBlock))
        .count()
}

#[cfg(test)]
mod tests;
