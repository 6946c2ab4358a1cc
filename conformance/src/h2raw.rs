//! A hand-built HTTP/2 client (RFC 9113) for abuse cases: it writes frames no well-behaved
//! client library would (rapid resets, endless CONTINUATION, SETTINGS and PING floods, a zero
//! receive window) and reads what the server answers, GOAWAY in particular.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::task::JoinHandle;

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    /// DATA
    pub const DATA: u8 = 0;
    /// HEADERS
    pub const HEADERS: u8 = 1;
    /// RST_STREAM
    pub const RST_STREAM: u8 = 3;
    /// SETTINGS
    pub const SETTINGS: u8 = 4;
    /// PING
    pub const PING: u8 = 6;
    /// GOAWAY
    pub const GOAWAY: u8 = 7;
    /// WINDOW_UPDATE
    pub const WINDOW_UPDATE: u8 = 8;
    /// CONTINUATION
    pub const CONTINUATION: u8 = 9;
}

/// `END_STREAM` (DATA, HEADERS) / `ACK` (SETTINGS, PING).
pub const END_STREAM: u8 = 0x1;
/// `END_HEADERS` (HEADERS, CONTINUATION).
pub const END_HEADERS: u8 = 0x4;

/// Error codes.
pub const PROTOCOL_ERROR: u32 = 0x1;
/// `CANCEL`.
pub const CANCEL: u32 = 0x8;
/// `ENHANCE_YOUR_CALM`.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame: its 9-byte header and `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("frame payload fits 24 bits");
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A SETTINGS frame with `(id, value)` pairs.
pub fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in pairs {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(kind::SETTINGS, 0, 0, &p)
}

/// The HPACK block of `GET <path>` with `:authority: localhost` (static-table references and
/// literals without indexing: no dynamic-table state).
pub fn get_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86]; // :method GET, :scheme http
    b.push(0x04); // :path, literal without indexing (name index 4)
    b.push(u8::try_from(path.len()).expect("short path"));
    b.extend_from_slice(path.as_bytes());
    b.push(0x01); // :authority, literal without indexing (name index 1)
    b.push(9);
    b.extend_from_slice(b"localhost");
    b
}

/// A complete `GET <path>` on `stream` (HEADERS with END_HEADERS and END_STREAM).
pub fn get(stream: u32, path: &str) -> Vec<u8> {
    frame(
        kind::HEADERS,
        END_HEADERS | END_STREAM,
        stream,
        &get_block(path),
    )
}

/// `RST_STREAM(code)` on `stream`.
pub fn rst(stream: u32, code: u32) -> Vec<u8> {
    frame(kind::RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// A literal header field without indexing with a new name (HPACK, RFC 7541 §6.2.2): any
/// name, pseudo-header fields included, with no dynamic-table state.
pub fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0x00, u8::try_from(name.len()).expect("short name")];
    b.extend_from_slice(name.as_bytes());
    b.push(u8::try_from(value.len()).expect("short value"));
    b.extend_from_slice(value.as_bytes());
    b
}

/// The HPACK block of `POST <path>` with `:authority: localhost` and `extra` fields.
pub fn post_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    b.extend(literal(":path", path));
    b.extend(literal(":authority", "localhost"));
    for (n, v) in extra {
        b.extend(literal(n, v));
    }
    b
}

/// What the server sent on one stream until it ended it or reset it (or the wait ended).
#[derive(Debug, Default, Clone)]
pub struct StreamSeen {
    /// The payloads of its HEADERS frames (the response head first).
    pub headers: Vec<Vec<u8>>,
    /// DATA bytes.
    pub data: usize,
    /// The stream ended with END_STREAM.
    pub ended: bool,
    /// Its RST_STREAM's error code.
    pub reset: Option<u32>,
    /// A GOAWAY's error code, when one came.
    pub goaway: Option<u32>,
}

/// What the server sent until it went away (or the wait ended).
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The GOAWAY's error code, when one came.
    pub goaway: Option<u32>,
    /// The server closed the connection (EOF or reset).
    pub closed: bool,
    /// Frames read, by type (index = type, 0..=9).
    pub frames: [u64; 10],
    /// Bytes read.
    pub bytes: u64,
}

/// A raw HTTP/2 connection.
#[derive(Debug)]
pub struct H2Raw {
    rd: OwnedReadHalf,
    /// `None` while a [`H2Raw::flood`] has it.
    wr: Option<OwnedWriteHalf>,
    buf: Vec<u8>,
}

impl H2Raw {
    /// Connects and sends the preface and `settings` (empty: the defaults).
    ///
    /// # Errors
    /// The connection or the write failed.
    pub async fn connect(addr: SocketAddr, settings_pairs: &[(u16, u32)]) -> io::Result<H2Raw> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&settings(settings_pairs));
        stream.write_all(&hello).await?;
        let (rd, wr) = stream.into_split();
        Ok(H2Raw {
            rd,
            wr: Some(wr),
            buf: Vec::new(),
        })
    }

    /// Writes `chunk` up to `times` times in the background (while this side reads), stopping
    /// at the first failed write; the task returns how many were written in full.
    ///
    /// # Panics
    /// A flood is already running.
    pub fn flood(&mut self, chunk: Vec<u8>, times: usize) -> JoinHandle<usize> {
        let mut wr = self.wr.take().expect("one flood at a time");
        tokio::spawn(async move {
            let mut n = 0;
            while n < times && wr.write_all(&chunk).await.is_ok() {
                n += 1;
            }
            // Keep the write side open (no FIN): the server decides when the connection ends.
            wr.forget();
            n
        })
    }

    /// Writes `bytes` (fails once the server has closed).
    ///
    /// # Errors
    /// The write failed.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self.wr.as_mut() {
            Some(w) => w.write_all(bytes).await,
            None => Err(io::Error::other("a flood holds the write side")),
        }
    }

    /// Writes `bytes` for at most `timeout`; `false` when the write did not finish (the server
    /// stopped reading) or failed (it closed).
    pub async fn try_write(&mut self, bytes: &[u8], timeout: Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.write(bytes)).await,
            Ok(Ok(()))
        )
    }

    /// Reads frames for at most `timeout`, until a GOAWAY or the end of the connection.
    pub async fn read_until_goaway(&mut self, timeout: Duration) -> Seen {
        let mut seen = Seen::default();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tmp = vec![0u8; 64 * 1024];
        loop {
            while let Some((kind, payload)) = self.next_frame() {
                if let Some(n) = seen.frames.get_mut(usize::from(kind)) {
                    *n += 1;
                }
                if kind == kind::GOAWAY && payload.len() >= 8 {
                    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    seen.goaway = Some(code);
                    return seen;
                }
            }
            match tokio::time::timeout_at(deadline, self.rd.read(&mut tmp)).await {
                Err(_) => return seen,
                Ok(Ok(0) | Err(_)) => {
                    seen.closed = true;
                    return seen;
                }
                Ok(Ok(n)) => {
                    seen.bytes += n as u64;
                    self.buf.extend_from_slice(&tmp[..n]);
                }
            }
        }
    }

    /// Waits at most `timeout` for the server to close the connection, discarding what it sends.
    pub async fn wait_closed(&mut self, timeout: Duration) -> Seen {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = Seen::default();
        loop {
            let s = self
                .read_until_goaway(deadline.saturating_duration_since(tokio::time::Instant::now()))
                .await;
            for (a, b) in seen.frames.iter_mut().zip(s.frames) {
                *a += b;
            }
            seen.bytes += s.bytes;
            seen.goaway = seen.goaway.or(s.goaway);
            if s.closed {
                seen.closed = true;
                return seen;
            }
            if s.goaway.is_none() {
                return seen;
            }
        }
    }

    /// Reads frames for at most `timeout`, until `stream` ends or is reset, or the connection
    /// ends; frames of other streams are skipped.
    pub async fn read_stream(&mut self, stream: u32, timeout: Duration) -> StreamSeen {
        let mut seen = StreamSeen::default();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut tmp = vec![0u8; 64 * 1024];
        loop {
            while let Some((kind, flags, id, payload)) = self.next_frame_full() {
                if kind == kind::GOAWAY && payload.len() >= 8 {
                    let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                    seen.goaway = Some(code);
                    return seen;
                }
                if id != stream {
                    continue;
                }
                match kind {
                    kind::HEADERS => seen.headers.push(payload),
                    kind::DATA => seen.data += payload.len(),
                    kind::RST_STREAM if payload.len() >= 4 => {
                        seen.reset = Some(u32::from_be_bytes([
                            payload[0], payload[1], payload[2], payload[3],
                        ]));
                        return seen;
                    }
                    _ => {}
                }
                if flags & END_STREAM != 0 && (kind == kind::HEADERS || kind == kind::DATA) {
                    seen.ended = true;
                    return seen;
                }
            }
            match tokio::time::timeout_at(deadline, self.rd.read(&mut tmp)).await {
                Err(_) | Ok(Ok(0) | Err(_)) => return seen,
                Ok(Ok(n)) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }

    fn next_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        self.next_frame_full()
            .map(|(kind, _, _, payload)| (kind, payload))
    }

    /// The next whole frame read: its type, flags, stream and payload.
    fn next_frame_full(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        if self.buf.len() < 9 {
            return None;
        }
        let len = usize::from(self.buf[0]) << 16
            | usize::from(self.buf[1]) << 8
            | usize::from(self.buf[2]);
        if self.buf.len() < 9 + len {
            return None;
        }
        let (kind, flags) = (self.buf[3], self.buf[4]);
        let stream =
            u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]]) & 0x7fff_ffff;
        let payload = self.buf[9..9 + len].to_vec();
        self.buf.drain(..9 + len);
        Some((kind, flags, stream, payload))
    }
}
