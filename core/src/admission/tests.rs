//! Tests of the overload gate (C-LOAD-1). Instants are explicit, from zero.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const MS: u64 = 1_000_000;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn gate(max: u32, max_queue: u32, timeout_ms: u64) -> Gate {
    let params = GateParams::new(max, Some(max_queue), Duration::from_millis(timeout_ms))
        .expect("valid params");
    Gate::new(params)
}

fn queued(entry: Entry) -> Ticket {
    match entry {
        Entry::Queued(t) => t,
        other => panic!("expected Queued, got {other:?}"),
    }
}

#[test]
fn params_are_validated_and_default_to_the_contract() {
    let d = GateParams::default();
    assert_eq!(d.max_concurrent_requests(), 2048);
    assert_eq!(d.max_queue(), 2048);
    assert_eq!(d.queue_timeout(), Duration::from_millis(50));
    assert!(d.queues());
    assert_eq!(
        GateParams::new(0, None, Duration::ZERO),
        Err(GateError::ZeroConcurrency)
    );
    assert_eq!(
        GateParams::new(10, Some(MAX_QUEUE + 1), Duration::ZERO),
        Err(GateError::QueueTooLarge(MAX_QUEUE + 1))
    );
    let p = GateParams::new(7, None, Duration::from_millis(5)).expect("valid");
    assert_eq!(
        p.max_queue(),
        7,
        "max_queue defaults to max_concurrent_requests"
    );
    let big = GateParams::new(u32::MAX, None, Duration::from_millis(5)).expect("valid");
    assert_eq!(big.max_queue(), MAX_QUEUE, "the default is capped");
    let off = GateParams::new(7, Some(0), Duration::from_millis(5)).expect("0 = no queue");
    assert!(!off.queues());
    let no_wait = GateParams::new(7, None, Duration::ZERO).expect("0s = no wait");
    assert!(!no_wait.queues());
}

#[test]
fn c_load_1_admits_up_to_max_then_queues_then_rejects() {
    let g = gate(2, 1, 50);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    assert_eq!(g.in_flight(), 2);
    let t = queued(g.enter(at(1)));
    assert_eq!(t.deadline, at(51));
    assert_eq!(g.queued(), 1);
    assert_eq!(g.enter(at(1)), Entry::Rejected(Overloaded::QueueFull));
    assert_eq!(g.in_flight(), 2);
    assert_eq!(g.queued(), 1);
}

#[test]
fn c_load_1_no_wait_rejects_at_once() {
    for g in [gate(1, 5, 0), gate(1, 0, 50)] {
        assert_eq!(g.enter(at(0)), Entry::Admitted);
        assert_eq!(g.enter(at(0)), Entry::Rejected(Overloaded::NoWait));
        assert_eq!(g.queued(), 0);
        assert_eq!(g.leave(at(0)), None);
        assert_eq!(g.enter(at(0)), Entry::Admitted);
    }
}

#[test]
fn c_load_1_leave_hands_slot_to_head_in_fifo_order() {
    let g = gate(1, 3, 50);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let a = queued(g.enter(at(1)));
    let b = queued(g.enter(at(2)));
    let c = queued(g.enter(at(3)));
    assert_eq!(g.leave(at(4)), Some(a.id));
    assert_eq!(g.in_flight(), 1, "the slot changed hands, it was not freed");
    assert_eq!(g.queued(), 2);
    assert_eq!(g.cancel(a.id, at(4)), Cancel::AlreadyAdmitted);
    assert_eq!(g.leave(at(5)), Some(b.id));
    assert_eq!(g.cancel(b.id, at(5)), Cancel::AlreadyAdmitted);
    assert_eq!(g.leave(at(6)), Some(c.id));
    assert_eq!(g.cancel(c.id, at(6)), Cancel::AlreadyAdmitted);
    assert_eq!(g.leave(at(7)), None);
    assert_eq!((g.in_flight(), g.queued()), (0, 0));
    assert_eq!(
        g.check_consistent().0,
        0,
        "every record settled and dropped"
    );
}

#[test]
fn c_load_1_newcomer_does_not_overtake_a_waiter() {
    let g = gate(1, 2, 50);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let first = queued(g.enter(at(1)));
    // The holder leaves: the slot goes to `first`, who has not woken up yet.
    assert_eq!(g.leave(at(2)), Some(first.id));
    let second = queued(g.enter(at(2)));
    assert_eq!(g.cancel(first.id, at(3)), Cancel::AlreadyAdmitted);
    assert_eq!(g.leave(at(4)), Some(second.id));
}

#[test]
fn c_load_1_expired_waiter_is_never_admitted() {
    let g = gate(1, 3, 10);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let late = queued(g.enter(at(0))); // deadline 10
    let fresh = queued(g.enter(at(5))); // deadline 15
    // At exactly its deadline the first waiter is past saving: the slot goes to the second.
    assert_eq!(g.leave(at(10)), Some(fresh.id));
    assert_eq!(g.queued(), 0);
    assert_eq!(g.cancel(late.id, at(11)), Cancel::Expired);
    assert_eq!(g.cancel(fresh.id, at(11)), Cancel::AlreadyAdmitted);
    // Both expired: the slot is freed instead.
    let x = queued(g.enter(at(20)));
    let y = queued(g.enter(at(21)));
    assert_eq!(g.leave(at(40)), None);
    assert_eq!(g.in_flight(), 0);
    let mut woken = Vec::new();
    assert_eq!(g.expire(at(40), |id| woken.push(id)), 2);
    assert_eq!(
        woken,
        [x.id, y.id],
        "expired waiters are reported once, in order"
    );
    assert_eq!(g.expire(at(41), |_| panic!("reported twice")), 0);
    assert_eq!(g.cancel(x.id, at(41)), Cancel::Expired);
    assert_eq!(g.cancel(y.id, at(41)), Cancel::Expired);
    assert_eq!(g.enter(at(41)), Entry::Admitted);
}

#[test]
fn c_load_1_disconnected_waiter_leaves_the_queue_at_once() {
    let g = gate(1, 2, 50);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let a = queued(g.enter(at(1)));
    let b = queued(g.enter(at(2)));
    assert_eq!(g.enter(at(2)), Entry::Rejected(Overloaded::QueueFull));
    assert_eq!(g.cancel(b.id, at(3)), Cancel::Removed);
    assert_eq!(g.queued(), 1);
    let c = queued(g.enter(at(3)));
    assert_eq!(g.cancel(a.id, at(4)), Cancel::Removed, "from the head");
    assert_eq!(g.leave(at(5)), Some(c.id), "b and a are gone, c is next");
}

#[test]
fn unknown_ids_and_double_cancel_are_unknown() {
    let g = gate(1, 2, 50);
    assert_eq!(g.cancel(0, at(0)), Cancel::Unknown);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let t = queued(g.enter(at(0)));
    assert_eq!(g.cancel(t.id + 1, at(0)), Cancel::Unknown);
    assert_eq!(g.cancel(t.id, at(0)), Cancel::Removed);
    assert_eq!(g.cancel(t.id, at(0)), Cancel::Unknown);
    assert_eq!(g.leave(at(0)), None);
    assert_eq!(
        g.leave(at(0)),
        None,
        "an unmatched leave on an empty gate is ignored"
    );
    assert_eq!(g.in_flight(), 0);
}

#[test]
fn poll_timeout_is_the_earliest_deadline_and_early_expire_is_a_noop() {
    let g = gate(1, 3, 10);
    assert_eq!(g.poll_timeout(), None);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let a = queued(g.enter(at(1)));
    let b = queued(g.enter(at(4)));
    assert_eq!(g.poll_timeout(), Some(a.deadline));
    assert_eq!(g.expire(at(10), |_| panic!("early")), 0);
    assert_eq!(g.queued(), 2);
    assert_eq!(g.cancel(a.id, at(10)), Cancel::Removed);
    assert_eq!(g.poll_timeout(), Some(b.deadline));
    // A leave notices b expired; poll_timeout then asks for an expire at once.
    assert_eq!(g.leave(at(20)), None);
    assert!(g.poll_timeout().is_some_and(|t| t <= at(20)));
    assert_eq!(g.expire(at(20), |id| assert_eq!(id, b.id)), 1);
    assert_eq!(g.poll_timeout(), None);
}

#[test]
fn time_going_backwards_is_clamped() {
    let g = gate(1, 2, 10);
    assert_eq!(g.enter(at(100)), Entry::Admitted);
    let a = queued(g.enter(at(100)));
    assert_eq!(a.deadline, at(110));
    let b = queued(g.enter(at(3)));
    assert_eq!(
        b.deadline,
        at(110),
        "an earlier now is clamped to the latest seen"
    );
    assert_eq!(g.leave(at(0)), Some(a.id));
    assert_eq!(g.cancel(b.id, at(200)), Cancel::Expired);
    assert_eq!(g.cancel(a.id, at(0)), Cancel::AlreadyAdmitted);
}

#[test]
fn steady_churn_never_grows_the_queue() {
    // A full gate, a full queue and a stream of waiters cancelled from the middle: tombstones
    // are compacted in place, the reserved memory is never outgrown.
    let g = gate(1, 4, 50);
    assert_eq!(g.enter(at(0)), Entry::Admitted);
    let mut waiting: Vec<Ticket> = (0..4).map(|_| queued(g.enter(at(0)))).collect();
    let (_, capacity) = g.check_consistent();
    for i in 0..10_000u64 {
        let victim = waiting.remove((i % 3) as usize + 1);
        assert_eq!(g.cancel(victim.id, at(0)), Cancel::Removed);
        waiting.push(queued(g.enter(at(0))));
        let (stored, cap) = g.check_consistent();
        assert_eq!(cap, capacity, "no reallocation");
        assert!(stored <= cap);
    }
    assert_eq!(
        g.leave(at(1)),
        Some(waiting[0].id),
        "FIFO survived compaction"
    );
}

// ---------------------------------------------------------------------------------------------
// State-machine proptest.

#[derive(Debug, Clone)]
enum Op {
    Enter,
    Leave,
    Cancel(prop::sample::Index),
    CancelUnknown(prop::sample::Index),
    Expire,
    Advance(u64),
    Poll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Enter),
        3 => Just(Op::Leave),
        3 => any::<prop::sample::Index>().prop_map(Op::Cancel),
        1 => any::<prop::sample::Index>().prop_map(Op::CancelUnknown),
        1 => Just(Op::Expire),
        3 => (0u64..12).prop_map(Op::Advance),
        1 => Just(Op::Poll),
    ]
}

/// A ticket as the model (the adapter's view) sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wait {
    /// Waiting, as far as the adapter knows (its deadline may have passed).
    Pending,
    /// `leave` returned its id.
    Handed,
    /// `expire` reported it.
    Reported,
}

#[derive(Debug, Default)]
struct Model {
    now: Instant,
    /// Slots held by requests that know they hold one.
    holders: u32,
    /// Unsettled tickets by id: (deadline, state).
    tickets: BTreeMap<u64, (Instant, Wait)>,
    /// Every ticket id issued, settled or not.
    issued: Vec<u64>,
    last_handed: Option<u64>,
    // Accounting: every entered request ends exactly once in one of these.
    entered: u64,
    admitted_at_once: u64,
    rejected: u64,
    handed_claimed: u64,
    removed: u64,
    expired: u64,
}

impl Model {
    fn pending(&self) -> impl Iterator<Item = (u64, Instant)> + '_ {
        self.tickets
            .iter()
            .filter(|(_, (_, w))| *w == Wait::Pending)
            .map(|(id, (d, _))| (*id, *d))
    }
    fn waiting_not_due(&self) -> usize {
        self.pending().filter(|(_, d)| *d > self.now).count()
    }
    fn handed(&self) -> u32 {
        self.tickets
            .values()
            .filter(|(_, w)| *w == Wait::Handed)
            .count() as u32
    }
}

fn step(g: &Gate, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let p = *g.params();
    let now = m.now;
    match op {
        Op::Enter => {
            m.entered += 1;
            let live = m.waiting_not_due();
            let in_flight = m.holders + m.handed();
            let got = g.enter(now);
            let want_admit = live == 0 && in_flight < p.max_concurrent_requests();
            match got {
                Entry::Admitted => {
                    prop_assert!(
                        want_admit,
                        "admitted with {live} waiting, {in_flight} in flight"
                    );
                    m.holders += 1;
                    m.admitted_at_once += 1;
                }
                Entry::Rejected(why) => {
                    prop_assert!(!want_admit);
                    let want = if !p.queues() {
                        Overloaded::NoWait
                    } else {
                        prop_assert!(live >= p.max_queue() as usize, "rejected with queue room");
                        Overloaded::QueueFull
                    };
                    prop_assert_eq!(why, want);
                    m.rejected += 1;
                }
                Entry::Queued(t) => {
                    prop_assert!(!want_admit && p.queues() && live < p.max_queue() as usize);
                    prop_assert_eq!(t.deadline, now + p.queue_timeout());
                    prop_assert!(m.issued.last().is_none_or(|&last| t.id > last));
                    m.issued.push(t.id);
                    m.tickets.insert(t.id, (t.deadline, Wait::Pending));
                }
            }
        }
        Op::Leave => {
            if m.holders == 0 {
                return Ok(());
            }
            m.holders -= 1;
            // FIFO: the first waiter whose deadline has not passed, and no other.
            let want = m.pending().find(|(_, d)| *d > now).map(|(id, _)| id);
            let got = g.leave(now);
            prop_assert_eq!(got, want, "hand-off");
            if let Some(id) = got {
                let entry = m.tickets.get_mut(&id).expect("pending ticket");
                prop_assert!(entry.0 > now, "never admitted at or after its deadline");
                entry.1 = Wait::Handed;
                prop_assert!(m.last_handed.is_none_or(|last| id > last), "FIFO");
                m.last_handed = Some(id);
            }
        }
        Op::Cancel(which) => {
            if m.tickets.is_empty() {
                return Ok(());
            }
            let id = *m
                .tickets
                .keys()
                .nth(which.index(m.tickets.len()))
                .expect("in range");
            settle(g, m, id)?;
        }
        Op::CancelUnknown(which) => {
            // A settled ticket, or one never issued.
            let settled: Vec<u64> = m
                .issued
                .iter()
                .copied()
                .filter(|id| !m.tickets.contains_key(id))
                .collect();
            let id = if settled.is_empty() {
                m.issued.last().map_or(0, |l| l + 1)
            } else {
                settled[which.index(settled.len())]
            };
            prop_assert_eq!(g.cancel(id, now), Cancel::Unknown);
        }
        Op::Expire => {
            let want: Vec<u64> = m
                .pending()
                .filter(|(_, d)| *d <= now)
                .map(|(id, _)| id)
                .collect();
            let mut got = Vec::new();
            let n = g.expire(now, |id| got.push(id));
            prop_assert_eq!(n, got.len());
            prop_assert_eq!(&got, &want, "every expired waiter reported once, in order");
            for id in got {
                if let Some(entry) = m.tickets.get_mut(&id) {
                    entry.1 = Wait::Reported;
                }
            }
            prop_assert_eq!(g.queued() as usize, m.waiting_not_due());
        }
        Op::Advance(ms) => m.now = m.now + Duration::from_nanos(ms * MS),
        Op::Poll => {
            let earliest = m.pending().map(|(_, d)| d).min();
            match (g.poll_timeout(), earliest) {
                (None, None) => {}
                (Some(t), Some(e)) if e > now => prop_assert_eq!(t, e),
                (Some(t), Some(_)) => prop_assert!(t <= now, "due now: {t:?} > {now:?}"),
                (got, want) => prop_assert!(false, "poll_timeout {got:?}, pending {want:?}"),
            }
        }
    }
    Ok(())
}

/// The adapter settles ticket `id`; check the answer against the model.
fn settle(g: &Gate, m: &mut Model, id: u64) -> Result<(), TestCaseError> {
    let (deadline, wait) = m.tickets.remove(&id).expect("unsettled ticket");
    let want = match wait {
        Wait::Handed => Cancel::AlreadyAdmitted,
        Wait::Reported => Cancel::Expired,
        Wait::Pending if deadline <= m.now => Cancel::Expired,
        Wait::Pending => Cancel::Removed,
    };
    prop_assert_eq!(g.cancel(id, m.now), want, "ticket {}", id);
    match want {
        Cancel::AlreadyAdmitted => {
            m.holders += 1;
            m.handed_claimed += 1;
        }
        Cancel::Expired => m.expired += 1,
        _ => m.removed += 1,
    }
    Ok(())
}

fn check(g: &Gate, m: &Model) -> Result<(), TestCaseError> {
    let p = g.params();
    let (in_flight, queued) = (g.in_flight(), g.queued());
    prop_assert!(in_flight <= p.max_concurrent_requests(), "over max");
    prop_assert_eq!(
        in_flight,
        m.holders + m.handed(),
        "every slot has one owner"
    );
    prop_assert!(queued <= p.max_queue(), "queue over max_queue");
    let pending = m.pending().count();
    prop_assert!(m.waiting_not_due() <= queued as usize && queued as usize <= pending);
    prop_assert!(
        queued == 0 || in_flight == p.max_concurrent_requests(),
        "a waiter while a slot is free"
    );
    g.check_consistent();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C-LOAD-1: arbitrary sequences of enter/leave/cancel/expire/poll with time steps. After every
    /// op: in-flight ≤ max, queued ≤ max_queue, a waiter only while the gate is full; hand-offs go
    /// to the first waiter whose deadline has not passed (FIFO, never at or after its deadline);
    /// answers match the model exactly. At the end everything drains and every entered request is
    /// accounted for exactly once.
    #[test]
    fn c_load_1_gate_state_machine(
        max in 1u32..4,
        max_queue in 0u32..5,
        timeout_ms in prop_oneof![Just(0u64), Just(5), Just(20)],
        ops in prop::collection::vec(op(), 0..150),
    ) {
        let g = gate(max, max_queue, timeout_ms);
        let mut m = Model::default();
        for op in &ops {
            step(&g, &mut m, op)?;
            check(&g, &m)?;
        }
        // Drain: wake-ups are claimed, holders leave (handing slots on), the rest times out.
        loop {
            let handed: Vec<u64> = m
                .tickets
                .iter()
                .filter(|(_, (_, w))| *w == Wait::Handed)
                .map(|(id, _)| *id)
                .collect();
            for id in handed {
                settle(&g, &mut m, id)?;
            }
            if m.holders == 0 {
                break;
            }
            step(&g, &mut m, &Op::Leave)?;
            check(&g, &m)?;
        }
        m.now = m.now + Duration::from_secs(1);
        step(&g, &mut m, &Op::Expire)?;
        let rest: Vec<u64> = m.tickets.keys().copied().collect();
        for id in rest {
            settle(&g, &mut m, id)?;
        }
        check(&g, &m)?;
        prop_assert_eq!((g.in_flight(), g.queued()), (0, 0));
        prop_assert_eq!(g.poll_timeout(), None);
        prop_assert_eq!(g.check_consistent().0, 0, "all records dropped");
        prop_assert_eq!(
            m.entered,
            m.admitted_at_once + m.rejected + m.handed_claimed + m.removed + m.expired,
            "every entered request accounted for exactly once"
        );
    }
}
