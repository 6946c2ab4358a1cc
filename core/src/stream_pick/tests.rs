use super::*;

fn conn(streams: u32, max_streams: u32, accepting: bool) -> ConnLoad {
    ConnLoad {
        streams,
        max_streams,
        accepting,
    }
}

#[test]
fn c_grpc_1_first_connection_with_a_stream_to_spare() {
    assert_eq!(pick(&[], None), Pick::Open);
    assert_eq!(
        pick(&[conn(2, 2, true), conn(1, 2, true)], None),
        Pick::Use(1)
    );
    assert_eq!(
        pick(&[conn(0, 2, true), conn(1, 2, true)], None),
        Pick::Use(0)
    );
}

#[test]
fn c_grpc_1_never_more_streams_than_the_backend_allows() {
    assert_eq!(
        pick(&[conn(2, 2, true), conn(3, 3, true)], None),
        Pick::Open
    );
    // The backend lowered its limit below what is open: no new stream there.
    assert_eq!(pick(&[conn(4, 2, true)], None), Pick::Open);
    // Before the first SETTINGS an adapter may assume one.
    assert_eq!(pick(&[conn(1, 1, true)], Some(2)), Pick::Open);
}

#[test]
fn c_retry_9_a_connection_after_goaway_takes_no_new_stream() {
    assert_eq!(
        pick(&[conn(0, 100, false), conn(5, 100, true)], None),
        Pick::Use(1)
    );
    assert_eq!(pick(&[conn(0, 100, false)], None), Pick::Open);
}

#[test]
fn max_conns_per_host_bounds_the_connections() {
    let full = [conn(2, 2, true), conn(2, 2, true)];
    assert_eq!(pick(&full, Some(2)), Pick::Full);
    assert_eq!(pick(&full, Some(3)), Pick::Open);
    assert_eq!(pick(&full, None), Pick::Open);
    // A draining connection still holds its socket: it counts.
    assert_eq!(
        pick(&[conn(1, 2, false), conn(2, 2, true)], Some(2)),
        Pick::Full
    );
    assert!(may_open(0, Some(1)));
    assert!(!may_open(1, Some(1)));
    assert!(may_open(usize::MAX, None));
}

#[test]
fn c_grpc_1_pick_in_reads_connections_only_up_to_the_first_with_room() {
    let first_full = [conn(2, 2, true), conn(0, 2, true)];
    // Past the connection it picks, the adapter's descriptions are never asked for.
    let lazy = first_full
        .iter()
        .copied()
        .chain(std::iter::from_fn(|| -> Option<ConnLoad> {
            panic!("read past the connection picked")
        }));
    assert_eq!(pick_in(lazy, None), Pick::Use(1));
    // With no room anywhere every connection counts against the bound, as `pick` says.
    for (conns, max) in [
        (&[][..], None),
        (&[conn(2, 2, true), conn(1, 2, false)][..], Some(2)),
        (&[conn(2, 2, true), conn(1, 2, false)][..], Some(3)),
        (&[conn(0, 1, false)][..], Some(1)),
    ] {
        assert_eq!(pick_in(conns.iter().copied(), max), pick(conns, max));
    }
}
