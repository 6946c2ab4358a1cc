//! `weir-load probe`: one `GET` every few milliseconds, each on a new connection, printing when it
//! was sent, its status and the rate-limit headers that say which store decided
//! (`X-RateLimit-Storage`, `X-RateLimit-Degraded`, C-RATE-5). The store drills read it to see the
//! answers during an outage and the moment weir is back on the shared store. It measures; the
//! load comes from wrk.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One probe answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 0 when no answer came (connect or read failed, or the timeout passed).
    pub status: u16,
    pub storage: String,
    pub degraded: String,
}

/// Reads the status and the two rate-limit headers out of a response head.
pub fn parse_head(head: &str) -> Answer {
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (mut storage, mut degraded) = ("-".to_owned(), "-".to_owned());
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("x-ratelimit-storage") {
                storage = v.trim().to_owned();
            } else if k.eq_ignore_ascii_case("x-ratelimit-degraded") {
                degraded = v.trim().to_owned();
            }
        }
    }
    Answer {
        status,
        storage,
        degraded,
    }
}

async fn once(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    let mut conn = TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = conn.read(&mut chunk).await?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(parse_head(&String::from_utf8_lossy(&buf[..end])));
        }
        if n == 0 || buf.len() > 64 * 1024 {
            return Ok(parse_head(""));
        }
    }
}

/// Probes `addr` every `interval` for `duration`, printing `ms status storage degraded latency_ms`
/// lines (tab-separated; ms since the Unix epoch, so a script can line them up with its own clock).
pub async fn run(
    addr: SocketAddr,
    path: &str,
    interval: Duration,
    duration: Duration,
    timeout: Duration,
    out: &mut impl std::io::Write,
) -> std::io::Result<()> {
    let start = Instant::now();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while start.elapsed() < duration {
        tick.tick().await;
        let sent = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let t0 = Instant::now();
        let a = match tokio::time::timeout(timeout, once(addr, path)).await {
            Ok(Ok(a)) => a,
            _ => parse_head(""),
        };
        writeln!(
            out,
            "{sent}\t{}\t{}\t{}\t{:.1}",
            a.status,
            a.storage,
            a.degraded,
            t0.elapsed().as_secs_f64() * 1000.0
        )?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
