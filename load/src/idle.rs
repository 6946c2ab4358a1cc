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

async fn one(target: SocketAddr, source: Option<IpAddr>, host: String) -> io::Result<TcpStream> {
    let mut conn = match source {
        None => TcpStream::connect(target).await?,
        Some(ip) => {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(target).await?
        }
    };
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

/// Opens `n` connections to `target` (at most `parallel` being set up at once), sends one
/// request on each, reads the response and keeps the connection.
pub async fn open(target: SocketAddr, n: usize, per_source: usize, parallel: usize) -> Opened {
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
            set.spawn(one(target, source, host.clone()));
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
