//! The chunked transfer coding (RFC 9112 §7.1), one machine for every reader: the streaming
//! guard skips chunked request bodies with it, and the data path either passes the framing
//! through unchanged (both sides HTTP/1.1: forward `buf[..consumed]`) or decodes it (forward
//! only [`Decoded::data`], e.g. to an HTTP/1.0 client).
//!
//! Strict, because weir passes the framing through and must end the body exactly where the
//! next hop does: every line of the coding ends in CRLF (a bare LF is an error — a chunk
//! extension ended by a bare LF is a known desynchronisation vector), a chunk size is 1 to 16
//! hex digits (more would overflow 64 bits), whitespace is allowed only between the size and
//! `;`, an extension holds no control bytes, a size line is at most [`MAX_CHUNK_LINE`] bytes
//! and the trailer section at most [`MAX_TRAILER_BYTES`]. Trailer lines are followed (so the
//! end of the message is found) but not parsed: a decoding reader drops them.

use core::fmt;

/// Longest size line (size, extensions and CRLF).
pub const MAX_CHUNK_LINE: u32 = 4096;
/// Most trailer bytes after the last chunk.
pub const MAX_TRAILER_BYTES: u32 = 16 * 1024;

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
