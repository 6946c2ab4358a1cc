//! C-PATH-12: the connection watchdog's deadlines.

use core::time::Duration;

use super::*;

const RHT: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_secs(60);
const PARK: Duration = Duration::from_secs(1);

fn at(s: u64) -> Instant {
    Instant::from_secs(s)
}

#[test]
fn c_path_12_slow_head_is_closed_at_read_header_timeout() {
    let w = ConnWatch::new(RHT, IDLE, None);
    let phase = ConnPhase::Head { started: at(100) };
    assert_eq!(w.poll_action(phase, at(109)), None);
    assert_eq!(w.poll_timeout(phase, at(101)), at(110));
    assert_eq!(w.poll_action(phase, at(110)), Some(WatchAction::Close));
    // With parking, a head looks again within park_after.
    let p = ConnWatch::new(RHT, IDLE, Some(PARK));
    assert_eq!(p.poll_timeout(phase, at(101)), at(102));
    assert_eq!(p.poll_timeout(phase, at(109)), at(110));
}

#[test]
fn c_path_12_idle_connection_parks_then_closes() {
    let w = ConnWatch::new(RHT, IDLE, Some(PARK));
    let phase = ConnPhase::Idle { since: at(100) };
    assert_eq!(w.poll_action(phase, at(100)), None);
    assert_eq!(w.poll_timeout(phase, at(100)), at(101));
    assert_eq!(w.poll_action(phase, at(101)), Some(WatchAction::Park));
    assert_eq!(
        w.poll_action(phase, at(160)),
        Some(WatchAction::Idle),
        "idle wins over park"
    );
    // Without parking: the idle deadline, looked at at least every read_header_timeout.
    let np = ConnWatch::new(RHT, IDLE, None);
    assert_eq!(np.poll_action(phase, at(101)), None);
    assert_eq!(np.poll_timeout(phase, at(100)), at(110));
    assert_eq!(np.poll_timeout(phase, at(155)), at(160));
    assert_eq!(np.poll_action(phase, at(160)), Some(WatchAction::Idle));
}

#[test]
fn c_path_12_busy_and_parking() {
    let w = ConnWatch::new(RHT, IDLE, Some(PARK));
    assert_eq!(w.poll_action(ConnPhase::Busy, at(5)), None);
    assert_eq!(w.poll_timeout(ConnPhase::Busy, at(5)), at(6));
    assert_eq!(
        ConnWatch::new(RHT, IDLE, None).poll_timeout(ConnPhase::Busy, at(5)),
        at(15)
    );
    assert_eq!(
        w.poll_action(ConnPhase::Parking, at(5)),
        Some(WatchAction::Close)
    );
}

#[test]
fn deadlines_saturate_instead_of_overflowing() {
    let w = ConnWatch::new(Duration::MAX, Duration::MAX, Some(Duration::MAX));
    let far = ConnPhase::Idle { since: at(1) };
    assert_eq!(w.poll_action(far, at(2)), None);
    assert!(w.poll_timeout(far, at(2)) > at(2));
}

#[test]
fn c_path_12_a_parked_connection_waits_for_its_idle_timeout_only() {
    let w = ConnWatch::new(RHT, IDLE, Some(PARK));
    let idle = ConnPhase::Idle { since: at(100) };
    // Not the park look, nor the read_header_timeout one: idle_timeout from `since`.
    assert_eq!(w.parked_timeout(idle, at(102)), at(100) + IDLE);
    let head = ConnPhase::Head { started: at(5) };
    assert_eq!(w.parked_timeout(head, at(5)), w.poll_timeout(head, at(5)));
}
