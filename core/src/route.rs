//! The route table: which pool serves a request path (C-ROUTE-1).
//!
//! A route maps a path prefix to a pool. The longest matching prefix wins, and a prefix matches
//! only on a path-segment boundary: `/api` matches `/api`, `/api/` and `/api/x`, never `/apix`.
//! This is Envoy's `path_separated_prefix` and nginx's `location /api/` without the redirect;
//! the gateway in reference/002 sorted its routes by prefix length and used a bare
//! `strings.HasPrefix`, which sends `/apix` to `/api` — the bug segment alignment removes.
//!
//! Decisions (docs/routing.md):
//! - a trailing `/` carries no meaning: `/api/` and `/api` are the same route, and a config that
//!   lists both is rejected as a duplicate. With segment-aligned matching the only thing a trailing
//!   slash could still do is exclude the bare `/api`, which nobody means;
//! - `/` matches every request path, so it is an explicit catch-all (the default pool catches
//!   whatever no route matched anyway);
//! - matching is on the raw request path as the client sent it, byte for byte and case-sensitive:
//!   `/api%2Fx` is one segment and does not match the route `/api/x`, and nothing is decoded or
//!   normalised into another route (C-PATH-5). A query string or fragment, if the caller passes
//!   one along, is ignored.
//!
//! Lookup is a scan of the routes sorted by prefix length, longest first: the first hit is the
//! longest match (two different prefixes of the same length cannot both be prefixes of one path).
//! Route tables have a handful of entries, so a linear scan of a contiguous array beats a trie,
//! and it never allocates.

use core::fmt;

/// Why a route table was rejected. `route` is the position of the offending route in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// a route prefix must start with `/`
    NotAbsolute {
        /// Position of the route in the input.
        route: usize,
    },
    /// a route prefix must not contain `?` or `#`: it is matched against the path only
    QueryOrFragment {
        /// Position of the route in the input.
        route: usize,
    },
    /// a route prefix must not contain an empty path segment (`//`)
    EmptySegment {
        /// Position of the route in the input.
        route: usize,
    },
    /// two routes have the same prefix (a trailing `/` is ignored when comparing)
    Duplicate {
        /// Position of the later route in the input.
        route: usize,
        /// Position of the earlier route with the same prefix.
        first: usize,
    },
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::NotAbsolute { route } => {
                write!(f, "route {route}: prefix must start with '/'")
            }
            RouteError::QueryOrFragment { route } => {
                write!(f, "route {route}: prefix must not contain '?' or '#'")
            }
            RouteError::EmptySegment { route } => {
                write!(
                    f,
                    "route {route}: prefix must not contain an empty segment ('//')"
                )
            }
            RouteError::Duplicate { route, first } => write!(
                f,
                "route {route}: prefix duplicates route {first} (a trailing '/' is ignored)"
            ),
        }
    }
}

impl std::error::Error for RouteError {}

/// The answer to a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteMatch {
    /// Position (in the table's input) of the route that matched; `None` when no route matched
    /// and the request goes to the default pool.
    pub route: Option<usize>,
    /// The pool that serves the request.
    pub pool: usize,
}

#[derive(Debug, Clone)]
struct Route {
    /// Normalised prefix: starts with `/`, no trailing `/` unless it is exactly `/`.
    prefix: Box<str>,
    /// Position in the input.
    index: usize,
    pool: usize,
}

/// An immutable route table (C-ROUTE-1). Built once per config; `lookup` is a getter.
#[derive(Debug, Clone)]
pub struct RouteTable {
    /// Sorted by prefix length, longest first; ties (which cannot both match) by input position.
    routes: Vec<Route>,
    /// `by_index[input position]` = position in `routes`, for [`RouteTable::prefix`].
    by_index: Vec<usize>,
    default_pool: usize,
}

impl RouteTable {
    /// A table of `(prefix, pool)` routes; paths no route matches go to `default_pool`.
    ///
    /// Prefixes must start with `/`, contain no `?`, `#` or `//`, and be unique once a trailing
    /// `/` is dropped (`/api/` is the route `/api`). Pool indices are not checked here: the
    /// config layer knows how many pools there are.
    pub fn new<I, S>(routes: I, default_pool: usize) -> Result<RouteTable, RouteError>
    where
        I: IntoIterator<Item = (S, usize)>,
        S: AsRef<str>,
    {
        let mut table: Vec<Route> = Vec::new();
        for (index, (prefix, pool)) in routes.into_iter().enumerate() {
            let prefix = normalise(prefix.as_ref(), index)?;
            if let Some(first) = table.iter().find(|r| r.prefix == prefix) {
                return Err(RouteError::Duplicate {
                    route: index,
                    first: first.index,
                });
            }
            table.push(Route {
                prefix,
                index,
                pool,
            });
        }
        let mut by_index = vec![0; table.len()];
        table.sort_by(|a, b| {
            b.prefix
                .len()
                .cmp(&a.prefix.len())
                .then(a.index.cmp(&b.index))
        });
        for (pos, route) in table.iter().enumerate() {
            by_index[route.index] = pos;
        }
        Ok(RouteTable {
            routes: table,
            by_index,
            default_pool,
        })
    }

    /// The route and pool for a request path (C-ROUTE-1): the longest prefix that matches on a
    /// segment boundary, else the default pool. `raw_path` is the path as the client sent it,
    /// undecoded (C-PATH-5); anything from the first `?` or `#` on is ignored. Never allocates.
    #[must_use]
    pub fn lookup(&self, raw_path: &str) -> RouteMatch {
        let bytes = raw_path.as_bytes();
        let end = bytes
            .iter()
            .position(|&b| b == b'?' || b == b'#')
            .unwrap_or(bytes.len());
        let path = &bytes[..end];
        for route in &self.routes {
            if segment_prefix(route.prefix.as_bytes(), path) {
                return RouteMatch {
                    route: Some(route.index),
                    pool: route.pool,
                };
            }
        }
        RouteMatch {
            route: None,
            pool: self.default_pool,
        }
    }

    /// The pool for paths that no route matches.
    #[must_use]
    pub fn default_pool(&self) -> usize {
        self.default_pool
    }

    /// Number of routes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// True when there are no routes (everything goes to the default pool).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The normalised prefix of the route at input position `route` (`/api/` reads back as `/api`).
    #[must_use]
    pub fn prefix(&self, route: usize) -> Option<&str> {
        let pos = *self.by_index.get(route)?;
        self.routes.get(pos).map(|r| &*r.prefix)
    }
}

/// Validate a configured prefix and drop its trailing `/` (except for the root).
fn normalise(prefix: &str, route: usize) -> Result<Box<str>, RouteError> {
    if !prefix.starts_with('/') {
        return Err(RouteError::NotAbsolute { route });
    }
    if prefix.contains(['?', '#']) {
        return Err(RouteError::QueryOrFragment { route });
    }
    if prefix.contains("//") {
        return Err(RouteError::EmptySegment { route });
    }
    let trimmed = match prefix.strip_suffix('/') {
        Some(rest) if !rest.is_empty() => rest,
        _ => prefix,
    };
    Ok(trimmed.into())
}

/// Does the normalised `prefix` match `path` on a segment boundary?
fn segment_prefix(prefix: &[u8], path: &[u8]) -> bool {
    if prefix == b"/" {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest[0] == b'/',
        None => false,
    }
}

#[cfg(test)]
mod tests;
