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
