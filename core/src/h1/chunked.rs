//! The chunked transfer coding (RFC 9112 §7.1), one machine for every reader: the streaming
//! guard skips chunked request bodies with it, and the data path either re-frames the body
//! (both sides HTTP/1.1: [`ChunkedDecoder::rechunk`]) or decodes it (forward only
//! [`Decoded::data`], e.g. to an HTTP/1.0 client).
//!
//! Strict, because weir must end the body exactly where the next hop does: every line of the
//! coding ends in CRLF (a bare LF is an error — a chunk extension ended by a bare LF is a known
//! desynchronisation vector), a chunk size is 1 to 16 hex digits (more would overflow 64 bits),
//! whitespace is allowed only between the size and `;`, an extension holds no control bytes, a
//! size line is at most [`MAX_CHUNK_LINE`] bytes and the trailer section at most
//! [`MAX_TRAILER_BYTES`].
//!
//! **Re-framing** (C-PATH-12). What weir sends on is never the sender's framing bytes, but its
//! own, from what it parsed ([`ChunkedDecoder::next`] yields the pieces, [`ChunkedDecoder::rechunk`]
//! writes them): each size line canonical (lower-case hex, no leading zeros, no extensions:
//! [`write_chunk_size`]), the data as it arrives, then `0`, the trailer fields and the final
//! CRLF. Trailer lines are parsed like header lines (a token name, `:` with no whitespace
//! before it, no obs-fold, no control bytes in the value) and a field that must not be a
//! trailer is dropped ([`trailer_forwarded`]: framing, routing, hop-by-hop, authentication,
//! forwarding names), so no odd spelling of the framing reaches the next hop. Nothing is
//! allocated: the pieces borrow the input, the writer appends to the caller's buffer. A reader
//! that only skips a body ([`ChunkedDecoder::decode`]) follows the trailer lines byte by byte
//! and does not parse them.

use core::fmt;

/// Longest size line (size, extensions and CRLF).
pub const MAX_CHUNK_LINE: u32 = 4096;
/// Most trailer bytes after the last chunk.
pub const MAX_TRAILER_BYTES: u32 = 16 * 1024;
/// Longest trailer line (its CRLF included) [`ChunkedDecoder::next`] takes: a line is parsed
/// whole, so the caller's buffer must be able to hold this many bytes.
pub const MAX_TRAILER_LINE: usize = 8 * 1024;

/// Why a chunked body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A byte the coding does not allow where it appeared (including an overflowing size).
    Malformed,
    /// A size line over [`MAX_CHUNK_LINE`].
    LineTooLong,
    /// A trailer section over [`MAX_TRAILER_BYTES`].
    TrailersTooLarge,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::Malformed => "malformed chunked body",
            ChunkError::LineTooLong => "chunk size line too long",
            ChunkError::TrailersTooLarge => "chunked trailers too large",
        })
    }
}

/// One piece of a chunked body, as [`ChunkedDecoder::next`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A chunk of this many data bytes begins (its size line was read; extensions dropped).
    Chunk(u64),
    /// Data of the current chunk, as much of it as the input holds.
    Data(&'a [u8]),
    /// The current chunk's data and its CRLF were read.
    ChunkEnd,
    /// The last chunk (`0`) was read: trailer fields, then [`Piece::End`], follow.
    Last,
    /// One trailer field, whole and well-formed: the name as sent, the value trimmed. It may
    /// still be one that must not be forwarded ([`trailer_forwarded`]).
    Trailer {
        /// The field name.
        name: &'a [u8],
        /// The field value, without surrounding whitespace.
        value: &'a [u8],
    },
    /// The trailer section ended: the message is complete.
    End,
}

/// One step of [`ChunkedDecoder::decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Bytes of the input used (framing and data); the rest belongs to what follows.
    pub consumed: usize,
    /// Body data among them (always their tail); empty when only framing was read.
    pub data: &'a [u8],
    /// The message ended (last chunk and trailers read).
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The chunk size, hex digits so far.
    Size { size: u64, digits: u8 },
    /// Whitespace after the size.
    SizeSpace { size: u64 },
    /// A chunk extension, to the CR.
    Extension { size: u64 },
    /// A CR ended the size line; LF must follow.
    SizeLf { size: u64 },
    /// Chunk data: bytes left.
    Data(u64),
    /// The CRLF after the data (`cr` once the CR is seen).
    DataEnd { cr: bool },
    /// A trailer line (`len`: its bytes so far, `cr`: its CR seen).
    Trailer { len: u32, cr: bool },
    /// The message ended.
    Done,
}

/// Follows (and decodes) one chunked body (module doc). A small `Copy` value, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: State,
    /// Bytes of the current size line.
    line: u32,
    /// Bytes of the trailer section.
    trailers: u32,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder::new()
    }
}

impl ChunkedDecoder {
    /// At the start of a chunked body.
    #[must_use]
    pub const fn new() -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size { size: 0, digits: 0 },
            line: 0,
            trailers: 0,
        }
    }

    /// Whether the body ended.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads framing bytes of `buf` up to the next run of chunk data, and that run (as much of
    /// it as `buf` holds). Call again with `buf[consumed..]` until it is empty or `done`.
    /// After an error the decoder must not be fed again (the message is broken).
    pub fn decode<'a>(&mut self, buf: &'a [u8]) -> Result<Decoded<'a>, ChunkError> {
        let mut i = 0;
        while i < buf.len() {
            match self.state {
                State::Done => break,
                State::Data(left) => {
                    let n = usize::try_from(left).map_or(buf.len() - i, |l| l.min(buf.len() - i));
                    self.state = if n as u64 == left {
                        State::DataEnd { cr: false }
                    } else {
                        State::Data(left - n as u64)
                    };
                    return Ok(Decoded {
                        consumed: i + n,
                        data: &buf[i..i + n],
                        done: false,
                    });
                }
                _ => {
                    self.byte(buf[i])?;
                    i += 1;
                }
            }
        }
        Ok(Decoded {
            consumed: i,
            data: &[],
            done: self.is_done(),
        })
    }

    /// Reads the next piece of the body from `buf`: the bytes used, and the piece (`None` when
    /// `buf` holds no whole piece: all of it was used, or a trailer line is not complete yet
    /// and stays unused — call again with it and more bytes). Chunk data comes as it arrives;
    /// a trailer line only whole (at most [`MAX_TRAILER_LINE`] bytes). Use either this (or
    /// [`Self::rechunk`]) or [`Self::decode`] for one body, not both.
    pub fn next<'a>(&mut self, buf: &'a [u8]) -> Result<(usize, Option<Piece<'a>>), ChunkError> {
        let mut i = 0;
        loop {
            match self.state {
                State::Done => return Ok((i, None)),
                State::Data(left) => {
                    if i == buf.len() {
                        return Ok((i, None));
                    }
                    let n = usize::try_from(left).map_or(buf.len() - i, |l| l.min(buf.len() - i));
                    self.state = if n as u64 == left {
                        State::DataEnd { cr: false }
                    } else {
                        State::Data(left - n as u64)
                    };
                    return Ok((i + n, Some(Piece::Data(&buf[i..i + n]))));
                }
                State::Trailer { len: 0, cr: false } => {
                    let rest = &buf[i..];
                    let Some(lf) = rest.iter().position(|&b| b == b'\n') else {
                        if rest.len() >= MAX_TRAILER_LINE {
                            return Err(ChunkError::TrailersTooLarge);
                        }
                        return Ok((i, None));
                    };
                    let line = &rest[..=lf];
                    if line.len() > MAX_TRAILER_LINE {
                        return Err(ChunkError::TrailersTooLarge);
                    }
                    for &b in line {
                        self.byte(b)?;
                    }
                    i += line.len();
                    if self.state == State::Done {
                        return Ok((i, Some(Piece::End)));
                    }
                    // `byte` checked the CRLF and the value bytes; the name and colon here.
                    let (name, value) =
                        trailer_field(&line[..line.len() - 2]).ok_or(ChunkError::Malformed)?;
                    return Ok((i, Some(Piece::Trailer { name, value })));
                }
                before => {
                    if i == buf.len() {
                        return Ok((i, None));
                    }
                    self.byte(buf[i])?;
                    i += 1;
                    match (before, self.state) {
                        (State::SizeLf { .. }, State::Data(n)) => {
                            return Ok((i, Some(Piece::Chunk(n))));
                        }
                        (State::SizeLf { .. }, State::Trailer { .. }) => {
                            return Ok((i, Some(Piece::Last)));
                        }
                        (State::DataEnd { cr: true }, State::Size { .. }) => {
                            return Ok((i, Some(Piece::ChunkEnd)));
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// Reads what `buf` holds of the body and appends weir's own framing of it to `out`
    /// (module doc: canonical size lines, no extensions, trailers parsed and filtered). Returns
    /// the bytes used (a trailer line not complete yet is left: call again with it and more)
    /// and whether the body ended. Never allocates beyond `out`'s growth.
    pub fn rechunk(&mut self, buf: &[u8], out: &mut Vec<u8>) -> Result<Rechunked, ChunkError> {
        let mut used = 0;
        let mut data = 0;
        loop {
            let (n, piece) = self.next(&buf[used..])?;
            used += n;
            match piece {
                None => {
                    return Ok(Rechunked {
                        consumed: used,
                        data,
                        done: false,
                    });
                }
                Some(Piece::Chunk(size)) => write_chunk_size(out, size),
                Some(Piece::Data(d)) => {
                    data += d.len() as u64;
                    out.extend_from_slice(d);
                }
                Some(Piece::ChunkEnd) => out.extend_from_slice(b"\r\n"),
                Some(Piece::Last) => out.extend_from_slice(b"0\r\n"),
                Some(Piece::Trailer { name, value }) => {
                    if trailer_forwarded(name) {
                        out.extend_from_slice(name);
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(value);
                        out.extend_from_slice(b"\r\n");
                    }
                }
                Some(Piece::End) => {
                    out.extend_from_slice(b"\r\n");
                    return Ok(Rechunked {
                        consumed: used,
                        data,
                        done: true,
                    });
                }
            }
        }
    }

    fn byte(&mut self, b: u8) -> Result<(), ChunkError> {
        match self.state {
            State::Size { .. }
            | State::SizeSpace { .. }
            | State::Extension { .. }
            | State::SizeLf { .. } => {
                self.line += 1;
                if self.line > MAX_CHUNK_LINE {
                    return Err(ChunkError::LineTooLong);
                }
            }
            State::Trailer { .. } => {
                self.trailers += 1;
                if self.trailers > MAX_TRAILER_BYTES {
                    return Err(ChunkError::TrailersTooLarge);
                }
            }
            _ => {}
        }
        self.state = step(self.state, b).ok_or(ChunkError::Malformed)?;
        match self.state {
            State::Data(_) | State::Trailer { len: 0, cr: false } => self.line = 0,
            _ => {}
        }
        Ok(())
    }
}

/// One byte outside chunk data; `None`: malformed.
fn step(state: State, b: u8) -> Option<State> {
    let size_line_end = |size: u64| {
        if size == 0 {
            State::Trailer { len: 0, cr: false }
        } else {
            State::Data(size)
        }
    };
    Some(match state {
        State::Size { size, digits } => match b {
            b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                if digits >= 16 {
                    return None; // more than 64 bits
                }
                let d = u64::from((b as char).to_digit(16)?);
                State::Size {
                    size: size << 4 | d,
                    digits: digits + 1,
                }
            }
            _ if digits == 0 => return None,
            b' ' | b'\t' => State::SizeSpace { size },
            b';' => State::Extension { size },
            b'\r' => State::SizeLf { size },
            _ => return None,
        },
        State::SizeSpace { size } => match b {
            b' ' | b'\t' => State::SizeSpace { size },
            b';' => State::Extension { size },
            b'\r' => State::SizeLf { size },
            _ => return None,
        },
        State::Extension { size } => match b {
            b'\r' => State::SizeLf { size },
            b'\t' | b' '..=0x7e | 0x80..=0xff => State::Extension { size },
            _ => return None,
        },
        State::SizeLf { size } => match b {
            b'\n' => size_line_end(size),
            _ => return None,
        },
        State::DataEnd { cr: false } if b == b'\r' => State::DataEnd { cr: true },
        State::DataEnd { cr: true } if b == b'\n' => State::Size { size: 0, digits: 0 },
        State::DataEnd { .. } => return None,
        State::Trailer { len, cr: false } => match b {
            b'\r' => State::Trailer { len, cr: true },
            b'\t' | b' '..=0x7e | 0x80..=0xff => State::Trailer {
                len: len + 1,
                cr: false,
            },
            _ => return None,
        },
        State::Trailer { len, cr: true } => match b {
            b'\n' if len == 0 => State::Done,
            b'\n' => State::Trailer { len: 0, cr: false },
            _ => return None,
        },
        State::Data(_) | State::Done => return None,
    })
}

/// What [`ChunkedDecoder::rechunk`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rechunked {
    /// Bytes of the input used; the rest is a partial trailer line or the next message.
    pub consumed: usize,
    /// Bytes of chunk data among them (the body's own bytes, framing not counted).
    pub data: u64,
    /// The body ended (its re-framing is complete in the output).
    pub done: bool,
}

/// Appends a canonical chunk size line: `size` in lower-case hex without leading zeros (`0`
/// for the last chunk), no extensions, CRLF.
pub fn write_chunk_size(out: &mut Vec<u8>, size: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut line = [0u8; 18];
    let mut at = 16;
    let mut v = size;
    loop {
        at -= 1;
        line[at] = HEX[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    line[16] = b'\r';
    line[17] = b'\n';
    out.extend_from_slice(&line[at..]);
}

/// Whether a trailer field is passed on. RFC 9110 §6.5.1: a trailer must not carry what frames
/// or routes the message or what a recipient would have to see before the content, so these
/// are dropped: the hop-by-hop names (`Connection`, `Transfer-Encoding`, `TE`, `Trailer`,
/// `Upgrade`, ...), `Content-Length`, `Host`, `Content-Encoding`, `Content-Type`,
/// `Content-Range`, `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`, `Expect`,
/// `Max-Forwards`, `X-Request-ID` and the forwarding names weir writes (in either spelling):
/// what weir wrote in the head is not contradicted after the body.
#[must_use]
pub fn trailer_forwarded(name: &[u8]) -> bool {
    const DROPPED: [&[u8]; 12] = [
        b"content-length",
        b"host",
        b"content-encoding",
        b"content-type",
        b"content-range",
        b"authorization",
        b"proxy-authorization",
        b"cookie",
        b"set-cookie",
        b"expect",
        b"max-forwards",
        b"x-request-id",
    ];
    !(crate::forward::is_hop_by_hop(name)
        || crate::forward::is_replaced_forwarding(name)
        || DROPPED
            .iter()
            .any(|d| d.len() == name.len() && d.eq_ignore_ascii_case(name)))
}

/// A trailer line without its CRLF as a field: a token name, `:` right after it, the value
/// trimmed (its bytes were checked by the byte machine). `None`: not a field line (no colon,
/// an empty or invalid name, whitespace before the colon, an obs-fold).
fn trailer_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.iter().all(|&b| tchar(b)) {
        return None;
    }
    Some((name, value.trim_ascii()))
}
