//! The seam through which the engine reads request headers by name ([`HeaderLines`]): an
//! `http::HeaderMap` (the HTTP/2 path, tests) or the flat, borrowed header list of weir's own
//! HTTP/1 codec (`[h1::Header]`, which is `httparse::Header`: named here by its own crate, so
//! this module does not import `h1`, which imports it), so the HTTP/1 path builds no map per request (issue 14).

use http::{HeaderMap, HeaderName, HeaderValue};

/// Request headers looked up by name.
pub trait HeaderLines {
    /// The values of every line named `name` (ASCII case-insensitive), in the order received.
    fn lines<'s>(&'s self, name: &HeaderName) -> impl DoubleEndedIterator<Item = &'s [u8]>;

    /// The value of the first line named `name`.
    fn first_line<'s>(&'s self, name: &HeaderName) -> Option<&'s [u8]> {
        self.lines(name).next()
    }
}

impl HeaderLines for HeaderMap {
    fn lines<'s>(&'s self, name: &HeaderName) -> impl DoubleEndedIterator<Item = &'s [u8]> {
        self.get_all(name).into_iter().map(HeaderValue::as_bytes)
    }
}

impl HeaderLines for [httparse::Header<'_>] {
    fn lines<'s>(&'s self, name: &HeaderName) -> impl DoubleEndedIterator<Item = &'s [u8]> {
        // `HeaderName`s are lower case; the list keeps the names as received.
        let name = name.as_str();
        self.iter()
            .filter(move |h| h.name.len() == name.len() && h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }
}

#[cfg(test)]
mod tests;
