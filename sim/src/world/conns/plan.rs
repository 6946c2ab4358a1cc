//! The connections the world holds ([`Conns`]): each connection's planned visits, phase and
//! end, and the watchdog they share, planned from the seed. The parent module plays them.

use core::time::Duration;

use weir_core::Instant;
use weir_core::conn_watch::{ConnPhase, ConnWatch};
use weir_core::rng::{Rng, WyRand};

use crate::scenario::ConnTimers;

/// One request on a connection, as its client plays it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Visit {
    /// Idle time before the head's first byte (zero for the first: it starts at accept).
    pub(super) gap: Duration,
    /// How long the head takes to arrive (`None`: it never completes).
    pub(super) head: Option<Duration>,
    /// How long the request is served, from its complete head to the end of its response.
    pub(super) serve: Duration,
}

/// What a connection's client does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::world) enum Step {
    /// The head of the next request starts (its first byte).
    HeadStart,
    /// The head is complete.
    HeadDone,
    /// The response ended.
    Served,
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    HeadTimeout,
    Idle,
    ParkingStuck,
    ParkedExpired,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) phase: ConnPhase,
    /// Parked since the end of the last response (the socket alone waits).
    pub(super) parked: Option<Instant>,
    /// When it was told to park (parking in progress).
    pub(super) park_at: Option<Instant>,
    /// Its parking never lets go (a planted fault).
    pub(super) stuck: bool,
    pub(super) visits: Vec<Visit>,
    pub(super) next: usize,
    /// Bumped at every change of phase, so an older watchdog timer is stale.
    pub(super) generation: u64,
    pub(super) ended: Option<End>,
    /// Counted among the closed ones.
    pub(super) counted: bool,
}

/// The connections of a run and the watchdog they share.
#[derive(Debug)]
pub(in crate::world) struct Conns {
    pub(super) watch: ConnWatch,
    pub(super) limits: ConnTimers,
    pub(super) conns: Vec<Conn>,
    pub(in crate::world) open: usize,
    pub(in crate::world) closes: u64,
    pub(in crate::world) parks: u64,
}

impl Conns {
    /// Plan `limits.connections` connections from `rng`; each opens within the first seconds.
    pub(super) fn plan(
        limits: ConnTimers,
        watch: ConnWatch,
        rng: &mut WyRand,
    ) -> (Conns, Vec<Instant>) {
        let rht = limits.read_header_timeout;
        let mut conns = Vec::new();
        let mut opens = Vec::new();
        for _ in 0..limits.connections {
            let n = 1 + rng.below(4) as usize;
            let visits = (0..n)
                .map(|i| {
                    let gap = if i == 0 {
                        Duration::ZERO
                    } else {
                        ms(rng.below(limits.idle_timeout.as_millis() as u64 * 3 / 2 + 1))
                    };
                    let head = match rng.below(10) {
                        0 => None,
                        1 | 2 => Some(ms(
                            rht.as_millis() as u64 / 2 + rng.below(rht.as_millis() as u64 / 2)
                        )),
                        _ => Some(ms(1 + rng.below(50))),
                    };
                    Visit {
                        gap,
                        head,
                        serve: ms(1 + rng.below(300)),
                    }
                })
                .collect();
            opens.push(Instant::ZERO + ms(rng.below(3000)));
            conns.push(Conn {
                phase: ConnPhase::Busy,
                parked: None,
                park_at: None,
                stuck: rng.chance_permille(100),
                visits,
                next: 0,
                generation: 0,
                ended: None,
                counted: false,
            });
        }
        let open = conns.len();
        let c = Conns {
            watch,
            limits,
            conns,
            open,
            closes: 0,
            parks: 0,
        };
        (c, opens)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
