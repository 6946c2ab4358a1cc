//! The client's bytes of an HTTP/2 connection, read before h2 reads them, for the one rule h2
//! 0.4 does not keep: trailers must not carry pseudo-header fields (RFC 9113 §8.1). h2 drops
//! such fields from the trailers it hands on and reports the request complete, so a request
//! whose trailer block says `:path` after its body reached the backend as a whole request.
//!
//! [`Inbound`] follows the frames (their headers; the payloads of header blocks) and every
//! header block through an HPACK table of its own ([`super::hpack`]), in the order h2 reads
//! them, so it knows each field's name as h2 does. A HEADERS frame on a stream the client has
//! already opened is a trailer block: it is held back, with its CONTINUATION frames, until the
//! block is complete. A trailer block with a pseudo-header field has its HEADERS frame's
//! `END_STREAM` flag cleared before h2 reads it: trailers without `END_STREAM` are malformed
//! for h2 itself (RFC 9113 §8.1), which resets the stream with `PROTOCOL_ERROR`, counts it
//! against its local-reset limit, and ends the request body with an error, so the request is
//! never complete (the block is still decoded, so h2's HPACK state stays right). Blocks h2
//! will refuse anyway (a frame over the size weir advertised, a padding longer than its frame,
//! a block broken by another frame) are let through as they are, to h2's connection error.
//!
//! Fail closed: once the HPACK table cannot be followed (a block over the size bound, a
//! decoding error h2 would also end the connection for), every later trailer block of the
//! connection is treated as malformed.

use super::hpack::Table;

/// `SETTINGS_HEADER_TABLE_SIZE` weir's HTTP/2 server advertises (h2's default, set explicitly
/// by the server so that it cannot drift from what [`Inbound`] assumes).
pub const HEADER_TABLE_SIZE: u32 = 4096;

/// `SETTINGS_MAX_FRAME_SIZE` weir's HTTP/2 server advertises (the protocol's minimum, hyper's
/// default; set explicitly by the server for the same reason).
pub const MAX_FRAME_SIZE: u32 = 16 * 1024;

const PREFACE_LEN: usize = 24;
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The client-to-server half of one HTTP/2 connection, between the socket and h2 (module doc).
///
/// The adapter keeps the bytes it read and h2 has not had yet (the *pending* bytes) and calls
/// [`Inbound::scan`] on them after every read; h2 may then have as many of them as `scan`
/// returned, from their start, and the adapter passes the rest to the next call, followed by
/// what it reads next.
#[derive(Debug)]
pub struct Inbound {
    /// Preface bytes still to pass.
    preface: usize,
    /// Pending bytes already read through.
    scanned: usize,
    /// Payload bytes of the current frame (not a header block) still to pass.
    skip: usize,
    /// The highest stream a HEADERS frame opened.
    last_stream: u32,
    block: Option<Block>,
    table: Table,
    /// The HPACK table can no longer be followed: every later trailer block is malformed.
    lost: bool,
    /// The framing can no longer be followed (h2 ends the connection at that frame).
    passthrough: bool,
    /// Bytes a header block (and a held trailer block's frames) may take.
    max_block: usize,
    /// Trailer blocks marked malformed.
    refused: u64,
}

/// A header block being read.
#[derive(Debug)]
struct Block {
    trailers: bool,
    /// A trailer block's HEADERS frame's place in the pending bytes, while it is held.
    held_at: Option<usize>,
    fragments: Vec<u8>,
    /// The block outgrew the bound: not decoded.
    over: bool,
}

impl Inbound {
    /// The state at the start of a connection (its first pending bytes are the preface);
    /// `max_block`: the most bytes one header block may take (`server.max_header_bytes` or
    /// more: h2 refuses larger ones itself).
    #[must_use]
    pub fn new(max_block: usize) -> Inbound {
        Inbound {
            preface: PREFACE_LEN,
            scanned: 0,
            skip: 0,
            last_stream: 0,
            block: None,
            table: Table::new(HEADER_TABLE_SIZE as usize),
            lost: false,
            passthrough: false,
            max_block,
            refused: 0,
        }
    }

    /// How many trailer blocks were marked malformed so far.
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Read through `pending` (the bytes h2 has not had, as the previous call left them, then
    /// the new ones) and return how many of them, from the start, h2 may have now. A malformed
    /// trailer block is changed in place (its `END_STREAM` flag cleared) before it is released.
    pub fn scan(&mut self, pending: &mut [u8]) -> usize {
        loop {
            let avail = pending.len() - self.scanned;
            if self.passthrough {
                self.scanned = pending.len();
                break;
            }
            if self.preface > 0 || self.skip > 0 {
                let left = if self.preface > 0 {
                    &mut self.preface
                } else {
                    &mut self.skip
                };
                let n = (*left).min(avail);
                *left -= n;
                self.scanned += n;
                if *left > 0 {
                    break;
                }
                continue;
            }
            if avail < FRAME_HEADER {
                break;
            }
            let at = self.scanned;
            let h = &pending[at..at + FRAME_HEADER];
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            if self.block.is_some() && kind != CONTINUATION {
                // h2 ends the connection: a header block must not be interrupted.
                self.give_up(pending);
                continue;
            }
            if kind != HEADERS && !(kind == CONTINUATION && self.block.is_some()) {
                self.scanned += FRAME_HEADER;
                self.skip = len;
                continue;
            }
            if len > MAX_FRAME_SIZE as usize {
                // h2 ends the connection (FRAME_SIZE_ERROR).
                self.give_up(pending);
                continue;
            }
            if avail < FRAME_HEADER + len {
                break;
            }
            let payload = &pending[at + FRAME_HEADER..at + FRAME_HEADER + len];
            if kind == HEADERS {
                let Some(fragment) = fragment(payload, flags) else {
                    // h2 ends the connection: padding longer than the frame.
                    self.give_up(pending);
                    continue;
                };
                let trailers = stream != 0 && stream <= self.last_stream;
                self.last_stream = self.last_stream.max(stream);
                self.block = Some(Block {
                    trailers,
                    held_at: trailers.then_some(at),
                    fragments: Vec::new(),
                    over: false,
                });
                self.append(fragment);
            } else {
                self.append(payload);
            }
            self.scanned = at + FRAME_HEADER + len;
            if flags & END_HEADERS != 0 {
                self.finish(pending);
            } else if self
                .block
                .as_ref()
                .and_then(|b| b.held_at)
                .is_some_and(|held| self.scanned - held > self.max_block)
            {
                // A held trailer block may not grow without bound (zero-length CONTINUATION
                // frames included): decided now, as malformed.
                self.decide(pending, true);
            }
        }
        let release = self
            .block
            .as_ref()
            .and_then(|b| b.held_at)
            .unwrap_or(self.scanned);
        self.scanned -= release;
        if let Some(held) = self.block.as_mut().and_then(|b| b.held_at.as_mut()) {
            *held -= release;
        }
        release
    }

    /// Copy a header-block fragment into the block, up to the bound.
    fn append(&mut self, fragment: &[u8]) {
        let Some(block) = self.block.as_mut() else {
            return;
        };
        if block.over || block.fragments.len() + fragment.len() > self.max_block {
            block.over = true;
            block.fragments = Vec::new();
        } else {
            block.fragments.extend_from_slice(fragment);
        }
    }

    /// The block is complete: follow it through the table; a trailer block with a
    /// pseudo-header field (or that cannot be read) is malformed.
    fn finish(&mut self, pending: &mut [u8]) {
        let Some(block) = self.block.as_ref() else {
            return;
        };
        let mut pseudo = false;
        if block.over {
            self.lost = true;
        } else if !self.lost {
            match self.table.block(&block.fragments) {
                Ok(p) => pseudo = p,
                Err(_) => self.lost = true,
            }
        }
        let malformed = block.trailers && (pseudo || self.lost);
        self.decide(pending, malformed);
        self.block = None;
    }

    /// Release a held trailer block, its `END_STREAM` cleared when `malformed`; a block that
    /// goes on (decided before its end) is no longer decoded.
    fn decide(&mut self, pending: &mut [u8], malformed: bool) {
        let Some(block) = self.block.as_mut() else {
            return;
        };
        if block.trailers && malformed {
            self.refused += 1;
            if let Some(held) = block.held_at {
                pending[held + 4] &= !END_STREAM;
            }
            // Decided, so not decided again at its end.
            block.trailers = false;
        }
        block.held_at = None;
        if !block.over {
            block.over = true;
            block.fragments = Vec::new();
        }
    }

    /// The framing can no longer be followed (h2 ends the connection at this frame): a held
    /// trailer block goes as malformed, and everything after passes as it is.
    fn give_up(&mut self, pending: &mut [u8]) {
        if self.block.as_ref().is_some_and(|b| b.trailers) {
            self.decide(pending, true);
        }
        self.block = None;
        self.lost = true;
        self.passthrough = true;
    }
}

/// A HEADERS frame's header-block fragment: the payload without its pad length, priority and
/// padding; `None` when the padding does not fit.
fn fragment(payload: &[u8], flags: u8) -> Option<&[u8]> {
    let mut p = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        let (&n, rest) = p.split_first()?;
        pad = usize::from(n);
        p = rest;
    }
    if flags & PRIORITY != 0 {
        p = p.get(5..)?;
    }
    p.get(..p.len().checked_sub(pad)?)
}
