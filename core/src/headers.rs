//! The seam through which the engine reads request headers by name ([`HeaderLines`]): an
//! `http::HeaderMap` (the HTTP/2 path, tests) or the flat, borrowed header list of weir's own
//! HTTP/1 codec (`[h1::Header]`, which is `httparse::Header`: named here by its own crate, so
//! this module does not import `h1`, which imports it), so the HTTP/1 path builds no map per request.

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

/// Whether `name` is `lower` in any case, `lower` being the lower-case name of a header weir
/// looks for: ASCII lower-case letters, digits and `-` only. A letter is compared with its case
/// bit set on `name`'s side, any other byte as it is: the answers of `eq_ignore_ascii_case`, in
/// a few wide operations once `N` and `lower` are constants (names are compared on
/// every line of every head).
#[inline(always)]
pub(crate) fn is_name<const N: usize>(name: &[u8], lower: &[u8; N]) -> bool {
    let Ok(name) = <&[u8; N]>::try_from(name) else {
        return false;
    };
    let mut diff = 0u8;
    for i in 0..N {
        diff |= (name[i] | ((lower[i] & 0x40) >> 1)) ^ lower[i];
    }
    diff == 0
}

#[cfg(test)]
mod tests;
