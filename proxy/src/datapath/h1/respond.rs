//! Sending a response on: a delivered body under the engine's `write_timeout`, its end
//! reported, an upgrade tunnelled, a request body read whole, and the few head lines weir writes
//! itself.

use std::future::poll_fn;
use std::io;

use weir_core::exchange::{Input, Output};
use weir_core::flow::BodyEnd;
use weir_core::h1::Version;
use weir_core::response::SyntheticResponse;

use super::downstream_conn::DownstreamConn;
use super::io::{push_text, write_all};
use super::relay::{BODY_CHUNK, Reader, RelayError};
use super::upstream_conn::UpConn;
use crate::base::rt;
use crate::datapath::{drive, effects};
use crate::services::snapshot::Bound;
use crate::services::state::DataPlane;

/// Relay a delivered body under the engine's `write_timeout` (C-PATH-7): how it ended.
pub(super) async fn stream_body<F>(
    data_plane: &DataPlane,
    x: &mut Bound,
    mut relay: std::pin::Pin<&mut F>,
) -> BodyEnd
where
    F: std::future::Future<Output = Result<(), RelayError>>,
{
    loop {
        let r = match x.poll_timeout() {
            None => relay.as_mut().await,
            Some(d) => {
                let at = data_plane.clock.deadline(d);
                match rt::timeout_at(data_plane.rt, at, relay.as_mut()).await {
                    Ok(r) => r,
                    Err(_) => {
                        drive::feed(data_plane, x, Input::Timeout);
                        let mut abort = false;
                        while let Some(out) = x.poll_output() {
                            if let Some(Output::AbortBody) =
                                effects::perform(data_plane, x, out, None)
                            {
                                abort = true;
                            }
                        }
                        if abort {
                            return BodyEnd::Error;
                        }
                        continue;
                    }
                }
            }
        };
        return match r {
            Ok(()) => BodyEnd::Complete,
            Err(RelayError::Source(_) | RelayError::Malformed(_)) => BodyEnd::Error,
            Err(RelayError::Sink(_)) => BodyEnd::ClientGone,
        };
    }
}

/// Report the body's end and perform what it releases.
pub(super) fn finish(data_plane: &DataPlane, x: &mut Bound, end: BodyEnd) {
    drive::feed(data_plane, x, Input::BodyEnd(end));
    effects::drain(data_plane, x, None);
}

/// C-PATH-8: write the `101` head, then tunnel both ways (bytes already read on either side
/// first); the exchange (backend slot, gate slot) is held until the tunnel closes.
pub(super) async fn tunnel(
    data_plane: &DataPlane,
    c: &mut DownstreamConn,
    mut conn: UpConn,
    mut x: Bound,
) {
    let r = async {
        write_all(&mut c.io, &c.out).await?;
        if !c.buf.is_empty() {
            write_all(&mut conn.io, c.buf.bytes()).await?;
            c.buf.consume(c.buf.len());
        }
        if !conn.buf.is_empty() {
            write_all(&mut c.io, conn.buf.bytes()).await?;
            conn.buf.consume(conn.buf.len());
        }
        rt::copy_bidirectional(&mut c.io, &mut conn.io).await
    }
    .await;
    let end = if r.is_ok() {
        BodyEnd::Complete
    } else {
        BodyEnd::Error
    };
    finish(data_plane, &mut x, end);
}

/// Read a whole request body (framing included) into `out`; `data` counts its own bytes.
pub(super) async fn read_body(
    c: &mut DownstreamConn,
    reader: &mut Reader,
    out: &mut Vec<u8>,
    data: &mut u64,
) -> io::Result<()> {
    loop {
        if reader
            .take(&mut c.buf, true, out, data)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
        {
            return Ok(());
        }
        let n = poll_fn(|cx| c.buf.poll_fill(&mut c.io, cx, BODY_CHUNK)).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// The head of one of weir's own answers built whole by weir-core (`SyntheticResponse`,
/// C-PATH-11): its status line and headers, `content-length: body_len` and the connection line.
pub(super) fn synthetic_head(
    out: &mut Vec<u8>,
    s: &SyntheticResponse<'_>,
    body_len: usize,
    keep: bool,
    version: Version,
) {
    status_line(out, s.status());
    for (name, value) in s.headers() {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        push_text(out, &value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    weir_core::h1::push_decimal(out, body_len as u64);
    out.extend_from_slice(b"\r\n");
    connection_line(out, keep, version);
    out.extend_from_slice(b"\r\n");
}

pub(super) fn status_line(out: &mut Vec<u8>, status: u16) {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(super) fn connection_line(out: &mut Vec<u8>, keep: bool, version: Version) {
    if !keep {
        out.extend_from_slice(b"connection: close\r\n");
    } else if version == Version::Http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
}

pub(super) fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
