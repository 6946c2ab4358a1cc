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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(routes: &[(&str, usize)]) -> RouteTable {
        RouteTable::new(routes.iter().copied(), 99).expect("valid routes")
    }

    #[test]
    fn c_route_1_segment_boundaries() {
        let t = table(&[("/api", 1)]);
        for hit in ["/api", "/api/", "/api/x", "/api/x/y", "/api?q=1", "/api#f"] {
            assert_eq!(
                t.lookup(hit),
                RouteMatch {
                    route: Some(0),
                    pool: 1
                },
                "{hit}"
            );
        }
        for miss in ["/apix", "/ap", "/", "", "/API", "/v1/api", "api"] {
            assert_eq!(
                t.lookup(miss),
                RouteMatch {
                    route: None,
                    pool: 99
                },
                "{miss}"
            );
        }
    }

    #[test]
    fn c_route_1_longest_prefix_wins_whatever_the_input_order() {
        let t = table(&[("/", 0), ("/api", 1), ("/api/v2", 2), ("/api/v2/admin", 3)]);
        assert_eq!(t.lookup("/api/v2/admin/x").pool, 3);
        assert_eq!(t.lookup("/api/v2/x").pool, 2);
        assert_eq!(t.lookup("/api/v22").pool, 1);
        assert_eq!(t.lookup("/api/v1").pool, 1);
        assert_eq!(t.lookup("/other").pool, 0);
        assert_eq!(t.lookup("*").pool, 0, "the root matches every path");
        assert_eq!(t.lookup("/api/v2").route, Some(2));
    }

    #[test]
    fn c_route_1_no_routes_means_default_pool() {
        let t = RouteTable::new(Vec::<(String, usize)>::new(), 7).expect("empty is valid");
        assert!(t.is_empty());
        assert_eq!(
            t.lookup("/anything"),
            RouteMatch {
                route: None,
                pool: 7
            }
        );
    }

    #[test]
    fn c_path_5_raw_bytes_are_not_decoded() {
        let t = table(&[("/api/x", 1), ("/api", 2)]);
        assert_eq!(t.lookup("/api%2Fx").route, None, "%2F is not a separator");
        assert_eq!(t.lookup("/api%2fx").route, None);
        assert_eq!(t.lookup("/api/%2E%2E/x").pool, 2, "%2E%2E is not '..'");
        assert_eq!(
            t.lookup("/api/x%2Fy").pool,
            2,
            "x%2Fy is one segment, not x"
        );
        assert_eq!(t.lookup("/api/x/y").pool, 1);
        let encoded = table(&[("/a%20b", 3)]);
        assert_eq!(encoded.lookup("/a%20b/c").pool, 3);
        assert_eq!(encoded.lookup("/a b/c").route, None);
    }

    #[test]
    fn trailing_slash_is_the_same_route() {
        let t = table(&[("/api/", 1)]);
        assert_eq!(t.prefix(0), Some("/api"));
        assert_eq!(t.lookup("/api").pool, 1);
        assert_eq!(t.lookup("/api/x").pool, 1);
        assert_eq!(
            RouteTable::new([("/api", 1), ("/api/", 2)], 0).unwrap_err(),
            RouteError::Duplicate { route: 1, first: 0 }
        );
        assert_eq!(table(&[("/", 1)]).prefix(0), Some("/"));
    }

    #[test]
    fn invalid_prefixes_are_rejected() {
        let err = |p: &str| RouteTable::new([("/ok", 0), (p, 1)], 0).unwrap_err();
        assert_eq!(err("api"), RouteError::NotAbsolute { route: 1 });
        assert_eq!(err(""), RouteError::NotAbsolute { route: 1 });
        assert_eq!(err("/api?x"), RouteError::QueryOrFragment { route: 1 });
        assert_eq!(err("/api#x"), RouteError::QueryOrFragment { route: 1 });
        assert_eq!(err("/api//"), RouteError::EmptySegment { route: 1 });
        assert_eq!(err("//"), RouteError::EmptySegment { route: 1 });
        assert_eq!(err("/ok"), RouteError::Duplicate { route: 1, first: 0 });
        assert_eq!(
            err("/ok/").to_string(),
            "route 1: prefix duplicates route 0 (a trailing '/' is ignored)"
        );
    }

    #[test]
    fn prefix_reads_back_in_input_order() {
        let t = table(&[("/a", 0), ("/a/b/c", 1), ("/a/b", 2)]);
        assert_eq!(t.len(), 3);
        assert_eq!(t.prefix(0), Some("/a"));
        assert_eq!(t.prefix(1), Some("/a/b/c"));
        assert_eq!(t.prefix(2), Some("/a/b"));
        assert_eq!(t.prefix(3), None);
    }

    /// The oracle: split into segments and compare segment lists; pick the longest match.
    fn oracle(routes: &[(String, usize)], default_pool: usize, raw: &str) -> RouteMatch {
        let path = raw.split(['?', '#']).next().unwrap_or("");
        let path_segs: Vec<&str> = path.split('/').collect();
        let mut best: Option<(usize, usize)> = None; // (prefix length, input index)
        for (i, (prefix, _)) in routes.iter().enumerate() {
            let p = prefix.strip_suffix('/').unwrap_or(prefix);
            let matches = if p.is_empty() {
                true // the root
            } else {
                let segs: Vec<&str> = p.split('/').collect();
                path_segs.len() >= segs.len() && path_segs[..segs.len()] == segs[..]
            };
            if matches && best.is_none_or(|(len, _)| p.len() > len) {
                best = Some((p.len(), i));
            }
        }
        match best {
            Some((_, i)) => RouteMatch {
                route: Some(i),
                pool: routes[i].1,
            },
            None => RouteMatch {
                route: None,
                pool: default_pool,
            },
        }
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_string()),
            Just("ab".to_string()),
            Just("b".to_string()),
            Just("%2F".to_string()),
            Just("a%2Fb".to_string()),
            Just("".to_string()),
        ]
    }

    fn prefix() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(segment().prop_filter("non-empty", |s| !s.is_empty()), 0..4),
            any::<bool>(),
        )
            .prop_map(|(segs, slash)| {
                let mut p = String::new();
                for s in &segs {
                    p.push('/');
                    p.push_str(s);
                }
                if slash || p.is_empty() {
                    p.push('/');
                }
                p
            })
    }

    fn path() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(segment(), 0..5),
            prop_oneof![Just(""), Just("?q=/a"), Just("#a/b")],
        )
            .prop_map(|(segs, tail)| {
                let mut p = String::new();
                for s in &segs {
                    p.push('/');
                    p.push_str(s);
                }
                p.push_str(tail);
                p
            })
    }

    proptest! {
        /// C-ROUTE-1: lookup equals the brute-force longest segment-aligned prefix, for arbitrary
        /// route sets (duplicates after trailing-slash normalisation are rejected instead) and
        /// arbitrary raw paths, percent-encodings included (C-PATH-5).
        #[test]
        fn c_route_1_lookup_matches_oracle(
            routes in prop::collection::vec((prefix(), 0usize..5), 0..6),
            paths in prop::collection::vec(path(), 1..20),
        ) {
            let norm = |p: &str| p.strip_suffix('/').filter(|r| !r.is_empty()).unwrap_or(p).to_string();
            let mut seen = std::collections::BTreeSet::new();
            let has_dup = !routes.iter().all(|(p, _)| seen.insert(norm(p)));
            match RouteTable::new(routes.iter().map(|(p, i)| (p.as_str(), *i)), 42) {
                Err(e) => {
                    prop_assert!(has_dup, "unexpected error {e}");
                    prop_assert!(matches!(e, RouteError::Duplicate { .. }), "{e}");
                }
                Ok(t) => {
                    prop_assert!(!has_dup);
                    for p in &paths {
                        prop_assert_eq!(t.lookup(p), oracle(&routes, 42, p), "path {}", p);
                    }
                }
            }
        }
    }
}
