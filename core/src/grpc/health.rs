//! The gRPC health-checking protocol as an active probe sees it (C-GRPC-4): the request a
//! `health_check.mode: grpc` probe sends and the verdict on what came back.
//!
//! The service is `grpc.health.v1.Health` (grpc/doc/health-checking.md): a unary `Check` with
//!
//! ```text
//! message HealthCheckRequest  { string service = 1; }
//! message HealthCheckResponse { enum ServingStatus { UNKNOWN = 0; SERVING = 1;
//!                                 NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
//!                               ServingStatus status = 1; }
//! ```
//!
//! Both messages are a single field, so they are encoded and decoded here by hand (protobuf's
//! wire format: a varint key `field << 3 | wire type`, then the value) rather than with a code
//! generator: weir-core stays free of prost and build scripts, and the decoder is small enough
//! to test exhaustively. A message travels in gRPC's length-prefixed framing: one byte of
//! compressed flag, four bytes of big-endian length, the message (PROTOCOL-HTTP2.md).
//!
//! A probe is a success only when the call's `grpc-status` is `0` (OK) and the decoded status is
//! `SERVING`; `NOT_SERVING`, `UNKNOWN`, `SERVICE_UNKNOWN`, any other `grpc-status` (such as
//! `UNIMPLEMENTED` from a server without the health service), an HTTP status other than `200`,
//! and a malformed answer are failures. Pure: the proxy does the IO and hands the pieces in.

use core::fmt;

/// The `:path` of the call.
pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// The most response bytes a probe reads: a `HealthCheckResponse` is a few bytes; anything
/// much longer is not one.
pub const MAX_RESPONSE_BYTES: usize = 1024;

/// The length of gRPC's message prefix (compressed flag + big-endian `u32` length).
pub const PREFIX_LEN: usize = 5;

/// `HealthCheckResponse.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingStatus {
    /// 0: the server does not know.
    Unknown,
    /// 1: the service is up.
    Serving,
    /// 2: the service is down.
    NotServing,
    /// 3: the server has no such service (`Watch` only in the specification, but seen from
    /// `Check` too).
    ServiceUnknown,
    /// A value this version of the protocol does not define.
    Other(u64),
}

impl ServingStatus {
    /// The enum's number.
    #[must_use]
    pub const fn from_number(n: u64) -> ServingStatus {
        match n {
            0 => ServingStatus::Unknown,
            1 => ServingStatus::Serving,
            2 => ServingStatus::NotServing,
            3 => ServingStatus::ServiceUnknown,
            other => ServingStatus::Other(other),
        }
    }
}

impl fmt::Display for ServingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServingStatus::Unknown => f.write_str("UNKNOWN"),
            ServingStatus::Serving => f.write_str("SERVING"),
            ServingStatus::NotServing => f.write_str("NOT_SERVING"),
            ServingStatus::ServiceUnknown => f.write_str("SERVICE_UNKNOWN"),
            ServingStatus::Other(n) => write!(f, "status {n}"),
        }
    }
}

/// Why a health answer is not a `SERVING` one (besides a status other than `SERVING`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// the HTTP status was not 200
    HttpStatus(u16),
    /// the call ended with a grpc-status other than 0 (OK)
    GrpcStatus {
        /// The code.
        code: u32,
        /// `grpc-message`, as received (percent-encoded).
        message: Option<String>,
    },
    /// the call ended without a grpc-status
    MissingGrpcStatus,
    /// the grpc-status is not a number
    BadGrpcStatus,
    /// the body is not one length-prefixed message
    Frame(FrameError),
    /// the message is not a HealthCheckResponse
    Decode(DecodeError),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::HttpStatus(s) => write!(f, "http status {s}"),
            CheckError::GrpcStatus {
                code,
                message: Some(m),
            } => write!(f, "grpc-status {code} ({m})"),
            CheckError::GrpcStatus {
                code,
                message: None,
            } => write!(f, "grpc-status {code}"),
            CheckError::MissingGrpcStatus => f.write_str("no grpc-status"),
            CheckError::BadGrpcStatus => f.write_str("grpc-status is not a number"),
            CheckError::Frame(e) => write!(f, "{e}"),
            CheckError::Decode(e) => write!(f, "HealthCheckResponse: {e}"),
        }
    }
}

/// Why a body is not one gRPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// fewer than 5 bytes, or fewer than the prefix's length
    Truncated,
    /// the message is compressed, which the probe did not ask for
    Compressed,
    /// bytes after the message
    Trailing,
    /// no message at all
    Empty,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameError::Truncated => "truncated grpc message",
            FrameError::Compressed => "compressed grpc message (none was accepted)",
            FrameError::Trailing => "more than one grpc message",
            FrameError::Empty => "no grpc message",
        })
    }
}

/// Why message bytes are not a `HealthCheckResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// a varint runs past the end or past 10 bytes
    Varint,
    /// a field's value runs past the end
    Truncated,
    /// a wire type protobuf does not define (or a deprecated group)
    WireType(u8),
    /// field 1 is not a varint
    StatusType,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Varint => f.write_str("malformed varint"),
            DecodeError::Truncated => f.write_str("truncated field"),
            DecodeError::WireType(t) => write!(f, "unsupported wire type {t}"),
            DecodeError::StatusType => f.write_str("status is not a varint"),
        }
    }
}

/// The request body of a `Check` for `service` (`""`: the server as a whole): the 5-byte
/// prefix and the encoded `HealthCheckRequest`.
#[must_use]
pub fn encode_request(service: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(service.len() + 11);
    // proto3 leaves a default (empty) string out.
    if !service.is_empty() {
        message.push(0x0A); // field 1, wire type 2 (length-delimited)
        put_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    let mut out = Vec::with_capacity(PREFIX_LEN + message.len());
    out.push(0); // not compressed
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&message);
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The one message of a unary response `body` (prefix checked and removed).
///
/// # Errors
/// The body is empty, cut short, compressed, or holds more than one message.
pub fn unframe(body: &[u8]) -> Result<&[u8], FrameError> {
    if body.is_empty() {
        return Err(FrameError::Empty);
    }
    let Some((prefix, rest)) = body.split_first_chunk::<PREFIX_LEN>() else {
        return Err(FrameError::Truncated);
    };
    if prefix[0] != 0 {
        return Err(FrameError::Compressed);
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    match rest.len().cmp(&len) {
        core::cmp::Ordering::Less => Err(FrameError::Truncated),
        core::cmp::Ordering::Greater => Err(FrameError::Trailing),
        core::cmp::Ordering::Equal => Ok(rest),
    }
}

/// Decode a `HealthCheckResponse` (without its prefix). Unknown fields are skipped, as protobuf
/// requires; a missing `status` is its default, `UNKNOWN`; the last `status` wins.
///
/// # Errors
/// The bytes are not valid protobuf, or field 1 has another wire type.
pub fn decode_response(mut message: &[u8]) -> Result<ServingStatus, DecodeError> {
    let mut status = ServingStatus::Unknown;
    while !message.is_empty() {
        let key = take_varint(&mut message)?;
        let field = key >> 3;
        let wire = (key & 7) as u8;
        match (field, wire) {
            (1, 0) => status = ServingStatus::from_number(take_varint(&mut message)?),
            (1, _) => return Err(DecodeError::StatusType),
            (_, 0) => {
                take_varint(&mut message)?;
            }
            (_, 1) => skip(&mut message, 8)?,
            (_, 2) => {
                let len = usize::try_from(take_varint(&mut message)?)
                    .map_err(|_| DecodeError::Truncated)?;
                skip(&mut message, len)?;
            }
            (_, 5) => skip(&mut message, 4)?,
            (_, other) => return Err(DecodeError::WireType(other)),
        }
    }
    Ok(status)
}

fn take_varint(bytes: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let Some((&b, rest)) = bytes.split_first() else {
            return Err(DecodeError::Varint);
        };
        *bytes = rest;
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError::Varint)
}

fn skip(bytes: &mut &[u8], n: usize) -> Result<(), DecodeError> {
    if bytes.len() < n {
        return Err(DecodeError::Truncated);
    }
    *bytes = &bytes[n..];
    Ok(())
}

/// The verdict on one `Check` call: its HTTP status, the `grpc-status` and `grpc-message` that
/// ended it (from the trailers, or from the head of a trailers-only answer), and its body.
/// `Ok` with the decoded status when the call itself succeeded; the probe is healthy only for
/// `Ok(ServingStatus::Serving)`.
///
/// # Errors
/// The call failed (HTTP status, `grpc-status`), or its answer is malformed.
pub fn check_result(
    http_status: u16,
    grpc_status: Option<&[u8]>,
    grpc_message: Option<&[u8]>,
    body: &[u8],
) -> Result<ServingStatus, CheckError> {
    if http_status != 200 {
        return Err(CheckError::HttpStatus(http_status));
    }
    let code = grpc_status.ok_or(CheckError::MissingGrpcStatus)?;
    let code: u32 = core::str::from_utf8(code.trim_ascii())
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(CheckError::BadGrpcStatus)?;
    if code != 0 {
        return Err(CheckError::GrpcStatus {
            code,
            message: grpc_message.map(|m| String::from_utf8_lossy(m).into_owned()),
        });
    }
    let message = unframe(body).map_err(CheckError::Frame)?;
    decode_response(message).map_err(CheckError::Decode)
}

#[cfg(all(test, not(loom)))]
mod tests;
