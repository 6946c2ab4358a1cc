//! Walking a forwarding chain from the right without collecting it (C-FWD-1, C-FWD-3).
//!
//! Both chains are lists spread over one or more header lines; the list is the lines' elements
//! in order (RFC 9110 §5.3). The walk starts at the right (the hop nearest to weir) and stops at
//! the first untrusted address, so its cost depends on the number of trusted hops, never on
//! what a client prepended further left.
//!
//! Bounds on hostile input:
//! - at most [`MAX_HOPS`] elements are examined (empty ones included); a chain with more
//!   elements right of its first untrusted address resolves to the peer, as a malformed one;
//! - an `X-Forwarded-For` element is found by scanning back at most [`MAX_ELEMENT_BYTES`] bytes
//!   for its comma; a longer element is not an address;
//! - an RFC 7239 `Forwarded` line may contain quoted strings (which may contain commas), so it is
//!   parsed forwards into a fixed ring of its last [`MAX_HOPS`] elements; a line over
//!   [`MAX_FORWARDED_LINE_BYTES`] is not parsed and counts as one malformed element.
//!
//! Nothing here allocates.

use std::net::IpAddr;

use super::node::{MAX_NODE_BYTES, parse_node};

/// The most chain elements examined, counted from the right.
pub const MAX_HOPS: usize = 64;

/// The longest `X-Forwarded-For` element (between commas, whitespace included).
pub const MAX_ELEMENT_BYTES: usize = 256;

/// The longest `Forwarded` header line that is parsed.
pub const MAX_FORWARDED_LINE_BYTES: usize = 16 * 1024;

/// One element of a chain, as seen by the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Element {
    /// An empty list element (`a,,b`), ignored as RFC 9110 §5.6.1 asks.
    Empty,
    /// An IP address (unmapped).
    Addr(IpAddr),
    /// Anything else: garbage, a host name, `unknown`, an obfuscated node, a `Forwarded`
    /// element without `for=` or with bad syntax, an over-long element.
    NotAnAddress,
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Walk {
    /// The first untrusted address from the right.
    Client(IpAddr),
    /// Every element was trusted: the leftmost one.
    AllTrusted(IpAddr),
    /// No element at all, or only empty ones.
    NoAddress,
    /// An examined element was not an IP address.
    Malformed,
    /// More than [`MAX_HOPS`] elements would have to be examined.
    TooManyHops,
}

/// Walks `elements` (given right to left) skipping trusted addresses.
pub(crate) fn walk(
    elements: impl Iterator<Item = Element>,
    trusted: impl Fn(IpAddr) -> bool,
) -> Walk {
    let mut leftmost = None;
    for (examined, element) in elements.enumerate() {
        if examined == MAX_HOPS {
            return Walk::TooManyHops;
        }
        match element {
            Element::Empty => {}
            Element::NotAnAddress => return Walk::Malformed,
            Element::Addr(ip) => {
                if !trusted(ip) {
                    return Walk::Client(ip);
                }
                leftmost = Some(ip);
            }
        }
    }
    leftmost.map_or(Walk::NoAddress, Walk::AllTrusted)
}

/// OWS (RFC 9110 §5.6.3): space and horizontal tab.
fn trim_ows(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

/// Classifies one `X-Forwarded-For` element (the bytes between two commas).
fn xff_element(raw: &[u8]) -> Element {
    let node = trim_ows(raw);
    if node.is_empty() {
        Element::Empty
    } else {
        parse_node(node).map_or(Element::NotAnAddress, Element::Addr)
    }
}

/// The elements of `X-Forwarded-For` lines, right to left, found lazily by scanning back.
pub(crate) struct XffRev<'a, L: Iterator<Item = &'a [u8]>> {
    /// Remaining lines, last line first.
    lines: L,
    /// The unscanned front part of the current line; `None` between lines.
    rest: Option<&'a [u8]>,
    /// Set after an over-long element: the walk stops there anyway, so the scan does not go on.
    done: bool,
}

impl<'a, L: Iterator<Item = &'a [u8]>> XffRev<'a, L> {
    /// `lines` must yield the header lines last first.
    pub(crate) fn new(lines: L) -> Self {
        XffRev {
            lines,
            rest: None,
            done: false,
        }
    }
}

impl<'a, L: Iterator<Item = &'a [u8]>> Iterator for XffRev<'a, L> {
    type Item = Element;

    fn next(&mut self) -> Option<Element> {
        if self.done {
            return None;
        }
        let rest = match self.rest.take() {
            Some(rest) => rest,
            None => self.lines.next()?,
        };
        // Look back at most MAX_ELEMENT_BYTES + 1 bytes for the separating comma.
        let window = rest.len().saturating_sub(MAX_ELEMENT_BYTES + 1);
        match rest[window..].iter().rposition(|&b| b == b',') {
            Some(at) => {
                let comma = window + at;
                self.rest = Some(&rest[..comma]);
                Some(xff_element(&rest[comma + 1..]))
            }
            None if rest.len() <= MAX_ELEMENT_BYTES => Some(xff_element(rest)),
            None => {
                self.done = true;
                Some(Element::NotAnAddress)
            }
        }
    }
}

/// What one RFC 7239 element says about the hop that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ForwardedElement {
    /// The `for=` node.
    pub(crate) node: Element,
    /// `proto=https` (case-insensitive) was present.
    pub(crate) https: bool,
}

impl ForwardedElement {
    const EMPTY: ForwardedElement = ForwardedElement {
        node: Element::Empty,
        https: false,
    };
    const MALFORMED: ForwardedElement = ForwardedElement {
        node: Element::NotAnAddress,
        https: false,
    };
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A forward parser of one `Forwarded` line (RFC 7239 §4):
/// `element *( OWS "," OWS element )`, `element = [pair] *( OWS ";" OWS [pair] )`,
/// `pair = token "=" ( token / quoted-string )`. Parameter names are case-insensitive; a
/// parameter that appears twice, a pair with bad syntax or an unterminated quote makes the
/// element malformed, and parsing resumes after the next comma outside quotes.
struct ForwardedParser<'a> {
    line: &'a [u8],
    pos: usize,
}

impl<'a> ForwardedParser<'a> {
    fn peek(&self) -> Option<u8> {
        self.line.get(self.pos).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn token(&mut self) -> &'a [u8] {
        let start = self.pos;
        while self.peek().is_some_and(is_tchar) {
            self.pos += 1;
        }
        &self.line[start..self.pos]
    }

    /// A quoted string after its opening quote, unescaped into `buf`; `None` when unterminated
    /// or longer than `buf` (then it cannot be a node anyway, and is skipped).
    fn quoted(&mut self, buf: &mut [u8; MAX_NODE_BYTES]) -> Result<Option<usize>, ()> {
        let mut len = 0usize;
        let mut fits = true;
        loop {
            let Some(b) = self.peek() else { return Err(()) };
            self.pos += 1;
            let c = match b {
                b'"' => return Ok(fits.then_some(len)),
                b'\\' => {
                    let Some(escaped) = self.peek() else {
                        return Err(());
                    };
                    self.pos += 1;
                    escaped
                }
                other => other,
            };
            if len < buf.len() {
                buf[len] = c;
                len += 1;
            } else {
                fits = false;
            }
        }
    }

    /// Skips to just past the next comma outside a quoted string (or to the end); `true` when
    /// a comma was found (another element follows).
    fn recover(&mut self) -> bool {
        let mut quoted = false;
        while let Some(b) = self.peek() {
            self.pos += 1;
            match b {
                b'\\' if quoted => self.pos += 1,
                b'"' => quoted = !quoted,
                b',' if !quoted => return true,
                _ => {}
            }
        }
        false
    }

    /// Parses one element starting at `pos` and consumes its trailing comma, if any; the flag
    /// is `true` when there was one (another element, possibly empty, follows).
    fn element(&mut self) -> (ForwardedElement, bool) {
        match self.element_inner() {
            Ok(done) => done,
            Err(()) => (ForwardedElement::MALFORMED, self.recover()),
        }
    }

    fn element_inner(&mut self) -> Result<(ForwardedElement, bool), ()> {
        let mut node: Option<Element> = None;
        let mut proto_seen = false;
        let mut https = false;
        let mut any_pair = false;
        let more = loop {
            self.skip_ows();
            match self.peek() {
                None => break false,
                Some(b',') => {
                    self.pos += 1;
                    break true;
                }
                Some(b';') => {
                    self.pos += 1;
                    continue;
                }
                Some(_) => {}
            }
            let name = self.token();
            if name.is_empty() || self.peek() != Some(b'=') {
                return Err(());
            }
            self.pos += 1;
            let mut buf = [0u8; MAX_NODE_BYTES];
            let value: Option<&[u8]> = if self.peek() == Some(b'"') {
                self.pos += 1;
                self.quoted(&mut buf)?.map(|len| &buf[..len])
            } else {
                let t = self.token();
                if t.is_empty() {
                    return Err(());
                }
                Some(t)
            };
            any_pair = true;
            if name.eq_ignore_ascii_case(b"for") {
                if node.is_some() {
                    return Err(());
                }
                node = Some(
                    value
                        .and_then(parse_node)
                        .map_or(Element::NotAnAddress, Element::Addr),
                );
            } else if name.eq_ignore_ascii_case(b"proto") {
                if proto_seen {
                    return Err(());
                }
                proto_seen = true;
                https = value.is_some_and(|v| v.eq_ignore_ascii_case(b"https"));
            }
            self.skip_ows();
            match self.peek() {
                None | Some(b',' | b';') => {}
                Some(_) => return Err(()),
            }
        };
        let element = match (node, any_pair) {
            (Some(node), _) => ForwardedElement { node, https },
            // A hop that did not disclose its client: the chain cannot be followed through it.
            (None, true) => ForwardedElement {
                node: Element::NotAnAddress,
                https,
            },
            (None, false) => ForwardedElement::EMPTY,
        };
        Ok((element, more))
    }
}

/// Calls `each` for every element of one `Forwarded` line, left to right; as in
/// `X-Forwarded-For`, `n` commas outside quotes separate `n + 1` elements, some maybe empty. An
/// over-long line is one malformed element.
pub(crate) fn forwarded_line_elements(line: &[u8], mut each: impl FnMut(ForwardedElement)) {
    if line.len() > MAX_FORWARDED_LINE_BYTES {
        each(ForwardedElement::MALFORMED);
        return;
    }
    let mut parser = ForwardedParser { line, pos: 0 };
    loop {
        let (element, more) = parser.element();
        each(element);
        if !more {
            return;
        }
    }
}

/// The `for=` nodes of `Forwarded` lines, right to left: each line is parsed forwards into a ring
/// of its last [`MAX_HOPS`] elements, which is then replayed backwards.
pub(crate) struct ForwardedRev<'a, L: Iterator<Item = &'a [u8]>> {
    lines: L,
    ring: [Element; MAX_HOPS],
    /// Elements of the current line still to replay.
    pending: usize,
    /// Index of the next element to replay (the newest not yet replayed), plus one.
    cursor: usize,
    /// The current line had more elements than the ring holds.
    overflow: bool,
}

impl<'a, L: Iterator<Item = &'a [u8]>> ForwardedRev<'a, L> {
    /// `lines` must yield the header lines last first.
    pub(crate) fn new(lines: L) -> Self {
        ForwardedRev {
            lines,
            ring: [Element::Empty; MAX_HOPS],
            pending: 0,
            cursor: 0,
            overflow: false,
        }
    }

    fn load(&mut self, line: &[u8]) {
        let mut count = 0usize;
        let ring = &mut self.ring;
        forwarded_line_elements(line, |e| {
            ring[count % MAX_HOPS] = e.node;
            count += 1;
        });
        self.pending = count.min(MAX_HOPS);
        self.cursor = count % MAX_HOPS;
        self.overflow = count > MAX_HOPS;
    }
}

impl<'a, L: Iterator<Item = &'a [u8]>> Iterator for ForwardedRev<'a, L> {
    type Item = Element;

    fn next(&mut self) -> Option<Element> {
        loop {
            if self.pending > 0 {
                self.pending -= 1;
                self.cursor = (self.cursor + MAX_HOPS - 1) % MAX_HOPS;
                return Some(self.ring[self.cursor]);
            }
            if self.overflow {
                // Elements the ring dropped. The walk has examined MAX_HOPS elements by now and
                // stops before looking at this one; it only marks that more exist.
                self.overflow = false;
                return Some(Element::NotAnAddress);
            }
            let line = self.lines.next()?;
            self.load(line);
        }
    }
}

/// The `proto=https` of the last element of the last `Forwarded` line (what the nearest hop said).
pub(crate) fn forwarded_last_https(last_line: &[u8]) -> bool {
    let mut https = false;
    forwarded_line_elements(last_line, |e| https = e.https);
    https
}

/// The last element of a comma-separated line, trimmed, if it is at most `max` bytes long.
pub(crate) fn last_element(line: &[u8], max: usize) -> Option<&[u8]> {
    let window = line.len().saturating_sub(max + 1);
    match line[window..].iter().rposition(|&b| b == b',') {
        Some(at) => Some(trim_ows(&line[window + at + 1..])),
        None if line.len() <= max => Some(trim_ows(line)),
        None => None,
    }
}
