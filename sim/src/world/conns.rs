//! Client connections and their watchdog (C-PATH-12): the world plays the client side of a
//! keep-alive connection (heads that arrive fast, slowly or never, requests served, idle gaps)
//! and drives `weir_core::conn_watch::ConnWatch`, the machine weir-proxy's connection driver
//! asks, exactly as the proxy does: after every change of phase it arms a timer at
//! `poll_timeout(phase, now)`, and when the timer fires it carries out `poll_action(phase, now)`
//! (close, idle close, park) or arms the next look. Parking is HTTP/1's: the connection's state
//! is dropped at once (or, in a planted fault, never lets go), and the parked socket waits for
//! its next request until `idle_timeout` after the last response, as the proxy's parked wait does.
//!
//! The invariant (`connection_timers`) is an oracle of the contract, not of the machine: a head
//! is closed exactly `read_header_timeout` after its first byte and never once it is complete;
//! an idle connection is parked exactly `park_after` after its last response and closed exactly
//! `idle_timeout` after it; stuck parking ends within one `read_header_timeout`; no connection
//! is closed while a request is served, and none outlives its deadline.

use core::time::Duration;

use weir_core::conn_watch::{ConnPhase, ConnWatch, WatchAction};

mod plan;

use plan::End;
pub(super) use plan::{Conns, Step};

use super::{Ev, World};
use crate::report::Invariant;

impl World<'_> {
    /// Open the planned connections (their first head starts at accept).
    pub(super) fn start_conns(&mut self) {
        let Some(limits) = self.s.conn_timers else {
            return;
        };
        let watch = ConnWatch::new(
            self.base.config().server.read_header_timeout,
            self.base.config().server.idle_timeout,
            Some(limits.park_after),
        );
        let (conns, opens) = Conns::plan(limits, watch, &mut self.rng_conns);
        self.conns = Some(conns);
        for (conn, at) in opens.into_iter().enumerate() {
            self.schedule(
                at,
                Ev::ConnStep {
                    conn,
                    step: Step::HeadStart,
                },
            );
        }
    }

    /// The client of `conn` takes its next step (one is pending at a time; none once closed).
    pub(super) fn conn_step(&mut self, conn: usize, step: Step) {
        let now = self.now;
        let Some(cs) = self.conns.as_mut() else {
            return;
        };
        let c = &mut cs.conns[conn];
        if c.ended.is_some() {
            return;
        }
        let next = match step {
            Step::HeadStart => {
                if c.park_at.is_some() {
                    // Bytes while parking: the stuck connection never reads them.
                    return;
                }
                c.parked = None;
                c.phase = ConnPhase::Head { started: now };
                c.visits[c.next].head.map(|h| (now + h, Step::HeadDone))
            }
            Step::HeadDone => {
                c.phase = ConnPhase::Busy;
                Some((now + c.visits[c.next].serve, Step::Served))
            }
            Step::Served => {
                c.phase = ConnPhase::Idle { since: now };
                c.next += 1;
                c.visits.get(c.next).map(|v| (now + v.gap, Step::HeadStart))
            }
        };
        c.generation += 1;
        let generation = c.generation;
        self.trace.mix((conn, generation, step as u8));
        if let Some((at, step)) = next {
            self.schedule(at, Ev::ConnStep { conn, step });
        }
        self.arm_conn(conn);
    }

    /// Arm the watchdog's next look at `conn` (`poll_timeout`), unless it is parked or closed.
    fn arm_conn(&mut self, conn: usize) {
        let now = self.now;
        let Some(cs) = self.conns.as_ref() else {
            return;
        };
        let c = &cs.conns[conn];
        if c.ended.is_some() || c.parked.is_some() {
            return;
        }
        // A timer armed at or before `now` would fire again at once, for ever (a runtime would
        // spin): never earlier than the next instant, so a watchdog that lets a deadline pass
        // (the HEAD_TIMEOUT_IGNORED mutation) is seen past it instead of hanging the world.
        let at = cs
            .watch
            .poll_timeout(c.phase, now)
            .max(now.saturating_add(Duration::from_nanos(1)));
        let generation = c.generation;
        self.schedule(at, Ev::ConnTimer { conn, generation });
    }

    /// The watchdog's timer for `conn`: carry out `poll_action`, or look again later.
    pub(super) fn conn_timer(&mut self, conn: usize, generation: u64) {
        let now = self.now;
        let Some(cs) = self.conns.as_mut() else {
            return;
        };
        let (watch, limits) = (cs.watch, cs.limits);
        let c = &mut cs.conns[conn];
        if c.ended.is_some() || c.parked.is_some() || c.generation != generation {
            return;
        }
        let phase = c.phase;
        let action = watch.poll_action(phase, now);
        let mut broke = None;
        match (action, phase) {
            (None, _) => {}
            (Some(_), ConnPhase::Busy) => {
                broke = Some(format!(
                    "connection {conn} closed while serving a request ({action:?})"
                ));
            }
            (Some(WatchAction::Close), ConnPhase::Head { started }) => {
                let due = started + limits.read_header_timeout;
                if now != due {
                    broke = Some(format!(
                        "connection {conn}: head from t={started:?} closed at {now:?}, read_header_timeout ends {due:?}"
                    ));
                }
                c.ended = Some(End::HeadTimeout);
            }
            (Some(WatchAction::Close), ConnPhase::Parking) => {
                let told = c.park_at.unwrap_or(now);
                if now <= told || now > told + limits.read_header_timeout || !c.stuck {
                    broke = Some(format!(
                        "connection {conn}: parking from {told:?} closed at {now:?} (stuck: {})",
                        c.stuck
                    ));
                }
                c.ended = Some(End::ParkingStuck);
            }
            (Some(WatchAction::Idle), ConnPhase::Idle { since }) => {
                let due = since + limits.idle_timeout;
                if now != due {
                    broke = Some(format!(
                        "connection {conn}: idle since {since:?} closed at {now:?}, idle_timeout ends {due:?}"
                    ));
                }
                c.ended = Some(End::Idle);
            }
            (Some(WatchAction::Park), ConnPhase::Idle { since }) => {
                let due = since + limits.park_after;
                if now != due || due >= since + limits.idle_timeout {
                    broke = Some(format!(
                        "connection {conn}: idle since {since:?} parked at {now:?}, park_after ends {due:?}"
                    ));
                }
                cs.parks += 1;
                c.generation += 1;
                if c.stuck {
                    c.phase = ConnPhase::Parking;
                    c.park_at = Some(now);
                } else {
                    // The HTTP/1 state lets go at once; the socket waits until idle_timeout.
                    c.parked = Some(since);
                    let generation = c.generation;
                    let at = since + limits.idle_timeout;
                    self.schedule(at, Ev::ConnParkedExpiry { conn, generation });
                }
            }
            (Some(a), p) => {
                broke = Some(format!(
                    "connection {conn}: watchdog said {a:?} in phase {p:?}"
                ));
            }
        }
        self.trace.mix((conn, generation, action.map(|a| a as u8)));
        if let Some(detail) = broke {
            self.fail(Invariant::ConnectionTimers, detail);
        }
        self.after_conn_change(conn);
    }

    /// A parked connection's wait ended without a request: closed (idle).
    pub(super) fn conn_parked_expiry(&mut self, conn: usize, generation: u64) {
        let Some(cs) = self.conns.as_mut() else {
            return;
        };
        let c = &mut cs.conns[conn];
        if c.ended.is_none() && c.generation == generation && c.parked.is_some() {
            c.ended = Some(End::ParkedExpired);
        }
        self.after_conn_change(conn);
    }

    fn after_conn_change(&mut self, conn: usize) {
        let Some(cs) = self.conns.as_mut() else {
            return;
        };
        let c = &mut cs.conns[conn];
        if c.ended.is_some() {
            if !c.counted {
                c.counted = true;
                cs.open -= 1;
                cs.closes += 1;
            }
            return;
        }
        if c.parked.is_none() {
            self.arm_conn(conn);
        }
    }

    /// After every event: no open connection is past its deadline (a head past
    /// `read_header_timeout`, an idle or parked connection past `idle_timeout`, parking past one
    /// `read_header_timeout`).
    pub(super) fn check_conns(&mut self) {
        let now = self.now;
        let Some(cs) = self.conns.as_ref() else {
            return;
        };
        let l = cs.limits;
        for (i, c) in cs.conns.iter().enumerate() {
            if c.ended.is_some() {
                continue;
            }
            let due = match (c.parked, c.phase) {
                (Some(since), _) | (None, ConnPhase::Idle { since }) => since + l.idle_timeout,
                (None, ConnPhase::Head { started }) => started + l.read_header_timeout,
                (None, ConnPhase::Parking) => c.park_at.unwrap_or(now) + l.read_header_timeout,
                (None, ConnPhase::Busy) => continue,
            };
            if now > due {
                let detail = format!(
                    "connection {i} outlived its deadline {due:?} ({:?})",
                    c.phase
                );
                self.fail(Invariant::ConnectionTimers, detail);
                return;
            }
        }
    }
}
