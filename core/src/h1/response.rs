//! The upstream's response head: parsed with the request side's strictness; any defect is a
//! [`BadResponse`] (C-PATH-12: `502` to the client, and that upstream connection is not reused;
//! a transport-class failure for retries, C-RETRY-1).

use core::fmt;
use core::mem::MaybeUninit;

use super::head::reusable;
use super::write::{self, ClientSide, ResponseOut};
use super::{
    BodyFraming, Facts, FramingError, Header, Limits, Parsed, ResponseHead, Version, facts_of,
    malformed,
};

/// What the response answers, which decides its framing (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseContext {
    /// The request was `HEAD`: the response has no body whatever its headers say.
    pub head: bool,
    /// The request asked for an upgrade: a `101` is allowed.
    pub upgrade: bool,
}

/// Why an upstream response head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadResponse {
    /// Not HTTP/1 syntax (httparse's reason).
    Malformed(&'static str),
    /// A status outside 100–599.
    Status(u16),
    /// A `101` to a request that asked for no upgrade, or one naming no protocol weir
    /// offered (none, or only `h2c`).
    UnrequestedSwitch,
    /// Framing rules broken.
    Framing(FramingError),
    /// The head is over the byte limit, or has more lines than the storage holds.
    TooLarge,
}

impl BadResponse {
    /// The status the client gets: always `502`.
    pub const STATUS: u16 = 502;

    /// A lower-case description (logs, the error body).
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            BadResponse::Malformed(m) => m,
            BadResponse::Status(_) => "upstream status outside 100-599",
            BadResponse::UnrequestedSwitch => "upstream switched protocols unasked",
            BadResponse::Framing(f) => f.message(),
            BadResponse::TooLarge => "upstream response head too large",
        }
    }
}

impl fmt::Display for BadResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// Parses a response head at the start of `buf` into `headers`.
pub fn parse_response<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
    limits: &Limits,
    ctx: ResponseContext,
) -> Result<Parsed<ResponseHead<'h, 'b>>, BadResponse> {
    // As for requests: httparse sees the bytes up to the limit only (stream order).
    let view = &buf[..buf.len().min(limits.max_head_bytes)];
    let mut res = httparse::Response::new(headers);
    let status = res.parse(view);
    response_head(res, status, view, limits, ctx)
}

/// [`parse_response`] into storage that need not be initialised first
/// ([`super::header_slots`]): the same answers.
pub fn parse_response_in<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<Header<'b>>],
    limits: &Limits,
    ctx: ResponseContext,
) -> Result<Parsed<ResponseHead<'h, 'b>>, BadResponse> {
    let view = &buf[..buf.len().min(limits.max_head_bytes)];
    let mut res = httparse::Response::new(&mut []);
    let status =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, view, slots);
    response_head(res, status, view, limits, ctx)
}

/// The response head httparse read (its answer `status` on `view_len` bytes), by weir's rules.
fn response_head<'h, 'b>(
    res: httparse::Response<'h, 'b>,
    status: httparse::Result<usize>,
    view: &'b [u8],
    limits: &Limits,
    ctx: ResponseContext,
) -> Result<Parsed<ResponseHead<'h, 'b>>, BadResponse> {
    let head_len = match status {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if view.len() >= limits.max_head_bytes => {
            return Err(BadResponse::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(BadResponse::TooLarge),
        Err(e) => return Err(BadResponse::Malformed(malformed(e))),
    };
    let httparse::Response {
        version,
        code,
        reason,
        headers,
    } = res;
    let (Some(version), Some(status)) = (version, code) else {
        return Err(BadResponse::Malformed("incomplete status line"));
    };
    if !(100..=599).contains(&status) {
        return Err(BadResponse::Status(status));
    }
    let headers: &'h [Header<'b>] = headers;
    let facts = facts_of(headers);
    // A 101 must name the protocol it switches to (RFC 9110 §15.2.2), and that cannot be h2c:
    // weir never offers it (`forward::is_h2c`).
    if status == 101 && !(ctx.upgrade && facts.upgrade_header) {
        return Err(BadResponse::UnrequestedSwitch);
    }
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let bodiless = ctx.head || status < 200 || status == 204 || status == 304;
    let body = facts
        .response_body(bodiless, version == Version::Http10)
        .map_err(BadResponse::Framing)?;
    Ok(Parsed::Complete(ResponseHead {
        status,
        reason: reason.unwrap_or(""),
        version,
        headers,
        head_len,
        raw: &view[..head_len],
        body,
        facts,
    }))
}

/// Where a slice of a head's bytes stands in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    at: u32,
    len: u32,
}

impl Span {
    /// `s`'s place in `raw` (empty slices anywhere: an empty span).
    fn of(raw: &[u8], s: &[u8]) -> Option<Span> {
        if s.is_empty() {
            return Some(Span::default());
        }
        let at = (s.as_ptr() as usize).checked_sub(raw.as_ptr() as usize)?;
        if at.checked_add(s.len())? > raw.len() {
            return None;
        }
        Some(Span {
            at: u32::try_from(at).ok()?,
            len: u32::try_from(s.len()).ok()?,
        })
    }

    fn get(self, buf: &[u8]) -> Option<&[u8]> {
        let at = self.at as usize;
        buf.get(at..at + self.len as usize)
    }
}

/// A [`ResponseHead`] kept as places in the bytes it was parsed from (no borrow), for a head
/// of at most `N` lines: the proxy checks that a head is whole and valid when it arrives and
/// writes it once the engine has decided, from this, without parsing it a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptHead<const N: usize> {
    status: u16,
    version: Version,
    head_len: usize,
    body: BodyFraming,
    facts: Facts,
    reason: Span,
    lines: [(Span, Span); N],
    count: usize,
}

impl ResponseHead<'_, '_> {
    /// This head as places in its bytes; `None` with more than `N` lines.
    #[must_use]
    pub fn keep<const N: usize>(&self) -> Option<KeptHead<N>> {
        let mut slot = None;
        self.keep_in(&mut slot);
        slot
    }

    /// [`keep`](Self::keep) into `slot` (the same value), written in place rather than returned
    /// (a kept head of 24 lines is about 460 bytes).
    pub fn keep_in<const N: usize>(&self, slot: &mut Option<KeptHead<N>>) {
        let reason = if self.headers.len() > N {
            None
        } else {
            Span::of(self.raw, self.reason.as_bytes())
        };
        let Some(reason) = reason else {
            *slot = None;
            return;
        };
        let kept = slot.insert(KeptHead {
            status: self.status,
            version: self.version,
            head_len: self.head_len,
            body: self.body,
            facts: self.facts,
            reason,
            lines: [(Span::default(), Span::default()); N],
            count: self.headers.len(),
        });
        let mut whole = true;
        for (line, h) in kept.lines.iter_mut().zip(self.headers) {
            match (
                Span::of(self.raw, h.name.as_bytes()),
                Span::of(self.raw, h.value),
            ) {
                (Some(name), Some(value)) => *line = (name, value),
                _ => {
                    whole = false;
                    break;
                }
            }
        }
        if !whole {
            *slot = None;
        }
    }
}

impl<const N: usize> KeptHead<N> {
    /// How the body is framed.
    #[must_use]
    pub const fn body(&self) -> BodyFraming {
        self.body
    }

    /// [`ResponseHead::reusable`] of the head kept.
    #[must_use]
    pub const fn reusable(&self) -> bool {
        reusable(self.status, self.body, &self.facts, self.version)
    }

    /// [`super::write_response_head`] of the head kept, from `buf`, the bytes it was kept from
    /// (still at its start): the same bytes and answer as for the head parsed, without
    /// rebuilding its lines (no `str` of a name or of the reason is needed to write them).
    /// `None` if `buf` is shorter than the head.
    pub fn write_response_head(
        &self,
        buf: &[u8],
        client: ClientSide,
        extra: &[(&str, &[u8])],
        out: &mut Vec<u8>,
    ) -> Option<ResponseOut> {
        let raw = buf.get(..self.head_len)?;
        // Every span was taken inside a head of `head_len` bytes ([`Span::of`]).
        let at = |s: Span| &raw[s.at as usize..s.at as usize + s.len as usize];
        let head = write::Response {
            status: self.status,
            reason: at(self.reason),
            raw,
            body: self.body,
            facts: self.facts,
        };
        let lines = self.lines[..self.count]
            .iter()
            .map(move |&(name, value)| (at(name), at(value)));
        Some(write::response_out(&head, lines, client, extra, out))
    }

    /// The head again, from `buf`, the bytes it was kept from (still at its start), its lines
    /// in `storage`: what [`parse_response`] gives for them. `None` if `buf` is not those bytes
    /// any more.
    pub fn head<'h, 'b>(
        &self,
        buf: &'b [u8],
        storage: &'h mut [Header<'b>; N],
    ) -> Option<ResponseHead<'h, 'b>> {
        let raw = buf.get(..self.head_len)?;
        // One check of the whole head (names are tokens, so a head of UTF-8 values needs no
        // other), else one per name.
        let text = core::str::from_utf8(raw).ok();
        let str_of = |s: Span| match text {
            Some(t) => t.get(s.at as usize..s.at as usize + s.len as usize),
            None => core::str::from_utf8(s.get(raw)?).ok(),
        };
        for (slot, (name, value)) in storage.iter_mut().zip(&self.lines[..self.count]) {
            *slot = Header {
                name: str_of(*name)?,
                value: value.get(raw)?,
            };
        }
        Some(ResponseHead {
            status: self.status,
            reason: str_of(self.reason)?,
            version: self.version,
            headers: &storage[..self.count],
            head_len: self.head_len,
            raw,
            body: self.body,
            facts: self.facts,
        })
    }
}
