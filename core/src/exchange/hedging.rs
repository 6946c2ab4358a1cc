//! Tests of hedging (C-HEDGE-1): when the hedge goes out, which head wins, what the loser
//! costs its backend (nothing), and the property that holds over any order of facts: at most
//! two attempts in flight, never more than `max_attempts`, and only the winner's response
//! delivered.

use http::Method;
use proptest::prelude::*;

use super::tests::{Fixture, Req, T0, at, drain};
use super::*;
use crate::flow::BodyEnd;

const HEDGING: &str = "
server:
  retry:
    max_attempts: 2
    per_try_timeout: 5s
    body_limit: 100
    backoff_base: 0s
    hedge_delay: 100ms
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
  - id: c
    url: http://10.0.0.3:80
";

fn sends(out: &[Output]) -> Vec<Send> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send(s) => Some(*s),
            _ => None,
        })
        .collect()
}

fn delivered(out: &[Output]) -> Option<Delivery> {
    out.iter().find_map(|o| match o {
        Output::Deliver(d) => Some(*d),
        _ => None,
    })
}

fn cancels(out: &[Output]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Output::Cancel { attempt } => Some(*attempt),
            _ => None,
        })
        .collect()
}

fn hedges(out: &[Output]) -> Vec<HedgeResult> {
    out.iter()
        .filter_map(|o| match o {
            Output::Metric(Metric::Hedge(h)) => Some(*h),
            _ => None,
        })
        .collect()
}

fn attempt_results(out: &[Output]) -> Vec<(usize, AttemptResult)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Metric(Metric::Attempt {
                backend, result, ..
            }) => Some((*backend, *result)),
            _ => None,
        })
        .collect()
}

fn head(attempt: u32, status: u16) -> Input {
    AttemptFact::Head { status }.about(attempt)
}

/// Start a GET and let the hedge go out at 100 ms: the first and the hedge `Send`.
fn hedged(f: &mut Fixture) -> (Exchange, Send, Send) {
    let (mut x, out) = f.start(&Req::get("/x"), T0);
    let first = sends(&out)[0];
    assert_eq!(
        x.poll_timeout(),
        Some(at(100)),
        "the hedge is the first timer"
    );
    let out = f.feed(&mut x, Input::Timeout, at(100));
    assert_eq!(hedges(&out), [HedgeResult::Sent]);
    let hedge = sends(&out)[0];
    (x, first, hedge)
}

#[test]
fn c_hedge_1_off_by_default_nothing_is_sent_beside_a_slow_attempt() {
    let mut f = Fixture::new(
        &HEDGING.replace("hedge_delay: 100ms", "hedge_delay: 0s"),
        StorageKind::Local,
    );
    let (mut x, _) = f.start(&Req::get("/x"), T0);
    assert_eq!(
        x.poll_timeout(),
        Some(at(5_000)),
        "only the per-try deadline"
    );
    assert!(f.feed(&mut x, Input::Timeout, at(100)).is_empty());
}

#[test]
fn c_hedge_1_a_get_without_a_head_after_the_delay_gets_one_more_attempt_elsewhere() {
    let mut f = Fixture::new(HEDGING, StorageKind::Local);
    let tokens = f.rt.budget().tokens_milli(T0);
    let (mut x, first, hedge) = hedged(&mut f);
    assert!(!first.hedge && hedge.hedge && !hedge.retry);
    assert_eq!((first.attempt, hedge.attempt), (1, 2));
    assert_ne!(first.backend, hedge.backend, "another backend");
    assert_eq!(hedge.at, at(100));
    assert!(hedge.last && hedge.replayable);
    assert_eq!(x.attempts(), 2);
    assert_eq!(
        f.rt.budget().tokens_milli(at(100)),
        tokens - 1000,
        "a budget token"
    );
    assert_eq!(f.in_flight().iter().sum::<u32>(), 2, "both slots held");
    // Each attempt keeps its own header deadline; no second hedge is armed.
    assert_eq!(x.poll_timeout(), Some(at(5_000)));
    assert!(f.feed(&mut x, Input::Timeout, at(200)).is_empty());

    // The hedge's head wins: the first attempt is cancelled, neutral for its backend.
    let out = f.feed(&mut x, head(2, 200), at(150));
    assert_eq!(cancels(&out), [1]);
    assert_eq!(hedges(&out), [HedgeResult::Won]);
    assert_eq!(
        attempt_results(&out),
        [
            (hedge.backend, AttemptResult::Success),
            (first.backend, AttemptResult::Cancelled)
        ]
    );
    let d = delivered(&out).expect("the hedge's response is delivered");
    assert_eq!((d.deliver.attempt, d.deliver.backend), (2, hedge.backend));
    let cancel_at = out.iter().position(|o| matches!(o, Output::Cancel { .. }));
    let deliver_at = out.iter().position(|o| matches!(o, Output::Deliver(_)));
    assert!(
        cancel_at < deliver_at,
        "the loser is cancelled before the winner's bytes go"
    );
    assert_eq!(
        f.in_flight().iter().sum::<u32>(),
        1,
        "the loser's slot is back"
    );
    // A late fact about the cancelled attempt changes nothing.
    assert!(f.feed(&mut x, head(1, 200), at(160)).is_empty());
    f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(170));
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0, 0]);
    for (_, b) in f.rt.backends() {
        assert_eq!(b.passive_failures(), 0, "the loser is no passive failure");
    }
}

#[test]
fn c_hedge_1_the_first_attempt_may_win_and_the_hedge_is_cancelled() {
    let mut f = Fixture::new(HEDGING, StorageKind::Local);
    let (mut x, first, hedge) = hedged(&mut f);
    // A `500` is an answer, not retryable: it wins.
    let out = f.feed(&mut x, Input::ResponseHead { status: 500 }, at(120));
    assert_eq!(cancels(&out), [2]);
    assert!(hedges(&out).is_empty(), "the hedge did not win");
    let d = delivered(&out).expect("delivered");
    assert_eq!((d.deliver.attempt, d.deliver.backend), (1, first.backend));
    assert_eq!(d.deliver.status, 500);
    assert!(attempt_results(&out).contains(&(hedge.backend, AttemptResult::Cancelled)));
    f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(130));
    assert_eq!(f.in_flight(), [0, 0, 0]);
}

/// A retryable head (`503`) while the other attempt is still out does not end the request: that
/// attempt is given up (a failure of its backend, as any `503` is) and the other one is waited
/// for; no retry is sent meanwhile.
#[test]
fn c_hedge_1_a_retryable_head_while_the_other_is_out_waits_for_the_other() {
    let mut f = Fixture::new(HEDGING, StorageKind::Local);
    let (mut x, first, hedge) = hedged(&mut f);
    let out = f.feed(&mut x, head(1, 503), at(130));
    assert!(sends(&out).is_empty() && delivered(&out).is_none());
    assert!(!out.iter().any(|o| matches!(o, Output::Answer(_))));
    assert_eq!(cancels(&out), [1], "its connection is closed unread");
    assert_eq!(
        attempt_results(&out),
        [(first.backend, AttemptResult::FailureStatus)]
    );
    assert!(matches!(x.stage(), Stage::Awaiting { sent } if sent == at(100)));
    let out = f.feed(&mut x, head(2, 200), at(140));
    let d = delivered(&out).expect("the other is delivered");
    assert_eq!((d.deliver.attempt, d.deliver.backend), (2, hedge.backend));
    assert_eq!(hedges(&out), [HedgeResult::Won]);
    assert!(cancels(&out).is_empty());
}

#[test]
fn c_hedge_1_when_both_fail_the_last_failure_answers() {
    let mut f = Fixture::new(HEDGING, StorageKind::Local);
    let (mut x, _, _) = hedged(&mut f);
    let out = f.feed(
        &mut x,
        AttemptFact::Failed(SendFailure::Connect).about(2),
        at(110),
    );
    assert_eq!(cancels(&out), [2]);
    assert!(sends(&out).is_empty());
    // The first attempt's per-try deadline: no attempt is left (max_attempts 2), so `504`.
    assert_eq!(x.poll_timeout(), Some(at(5_000)));
    let out = f.feed(&mut x, Input::Timeout, at(5_000));
    let a = out.iter().find_map(|o| match o {
        Output::Answer(a) => Some(*a),
        _ => None,
    });
    assert!(
        matches!(a, Some(Answer::Failure(ff)) if ff.status == 504 && ff.attempts == 2),
        "{a:?}"
    );
    assert_eq!(f.in_flight(), [0, 0, 0]);
}

#[test]
fn c_hedge_1_a_client_that_leaves_cancels_both_neutrally() {
    let mut f = Fixture::new(HEDGING, StorageKind::Local);
    let (mut x, _, _) = hedged(&mut f);
    let out = f.feed(&mut x, Input::ClientGone, at(150));
    let results = attempt_results(&out);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(_, r)| *r == AttemptResult::Cancelled));
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0, 0]);
    for (_, b) in f.rt.backends() {
        assert_eq!(b.passive_failures(), 0);
    }
}

#[test]
fn c_hedge_1_never_for_a_post_a_streamed_body_or_a_single_attempt() {
    let mut f = Fixture::new(HEDGING, StorageKind::Local);
    for req in [
        Req::get("/x").with(Method::POST, BodyInfo::Sized(10)),
        Req::get("/x").with(Method::POST, BodyInfo::Empty),
        Req::get("/x").with(Method::PUT, BodyInfo::Unsized),
    ] {
        let (mut x, out) = f.start(&req, T0);
        if out.contains(&Output::BufferBody { len: 10 }) {
            f.feed(&mut x, Input::BodyBuffered, T0);
        }
        assert_eq!(x.poll_timeout().map(|t| t > at(100)), Some(true), "{req:?}");
        let out = f.feed(&mut x, Input::Timeout, at(100));
        assert!(sends(&out).is_empty(), "{req:?}: {out:?}");
        f.feed(&mut x, Input::ClientGone, at(101));
    }
    let mut g = Fixture::new(
        &HEDGING.replace("max_attempts: 2", "max_attempts: 1"),
        StorageKind::Local,
    );
    let (mut x, _) = g.start(&Req::get("/x"), T0);
    let out = g.feed(&mut x, Input::Timeout, at(100));
    assert!(sends(&out).is_empty(), "max_attempts 1: no hedge");
    assert_eq!(x.poll_timeout(), Some(at(5_000)), "and none armed again");
}

#[test]
fn c_hedge_1_an_empty_budget_sends_no_hedge() {
    let yaml = HEDGING.replace(
        "    hedge_delay: 100ms",
        "    hedge_delay: 100ms\n    budget_capacity: 1\n    budget_refill_per_second: 0.001",
    );
    let mut f = Fixture::new(&yaml, StorageKind::Local);
    let (_x, _, _) = hedged(&mut f);
    let (mut y, _) = f.start(&Req::get("/y"), at(100));
    let out = f.feed(&mut y, Input::Timeout, at(200));
    assert!(
        sends(&out).is_empty(),
        "the one token went to the first hedge"
    );
    assert!(hedges(&out).is_empty());
}

/// A fact of the property test: which attempt (by order among those in flight), what.
#[derive(Debug, Clone, Copy)]
enum Fact {
    Time(u64),
    Head(bool, u16),
    Fail(bool),
    Gone,
}

fn fact() -> impl Strategy<Value = Fact> {
    prop_oneof![
        (1u64..3_000).prop_map(Fact::Time),
        (
            any::<bool>(),
            prop::sample::select(vec![200u16, 404, 500, 502, 503, 504])
        )
            .prop_map(|(second, s)| Fact::Head(second, s)),
        any::<bool>().prop_map(Fact::Fail),
        Just(Fact::Gone),
    ]
}

proptest! {
    /// Whatever the order of heads, failures and time: at most two attempts are in flight, never
    /// more than `max_attempts` are sent, one response at most is delivered and it is one of an
    /// attempt still in flight (never a cancelled one's), every slot is back at the end.
    #[test]
    fn c_hedge_1_two_in_flight_at_most_and_only_the_winner_delivered(
        max_attempts in 1u32..=4,
        facts in proptest::collection::vec(fact(), 1..12),
    ) {
        let yaml = HEDGING
            .replace("max_attempts: 2", &format!("max_attempts: {max_attempts}"))
            .replace("per_try_timeout: 5s", "per_try_timeout: 1s");
        let mut f = Fixture::new(&yaml, StorageKind::Local);
        let (mut x, out) = f.start(&Req::get("/x"), T0);
        let mut live: Vec<u32> = sends(&out).iter().map(|s| s.attempt).collect();
        let mut sent = live.len() as u32;
        let mut cancelled: Vec<u32> = Vec::new();
        let mut delivered_n = 0;
        let mut now = 0u64;
        for fact in facts {
            if x.is_done() || matches!(x.stage(), Stage::Streaming { .. }) {
                break;
            }
            let input = match fact {
                Fact::Time(d) => {
                    now += d;
                    Input::Timeout
                }
                Fact::Head(second, status) => {
                    let Some(&a) = live.get(usize::from(second)).or(live.first()) else { continue };
                    head(a, status)
                }
                Fact::Fail(second) => {
                    let Some(&a) = live.get(usize::from(second)).or(live.first()) else { continue };
                    AttemptFact::Failed(SendFailure::Transport { client_body_failed: false }).about(a)
                }
                Fact::Gone => Input::ClientGone,
            };
            let out = f.feed(&mut x, input, at(now));
            for o in &out {
                match o {
                    Output::Cancel { attempt } => {
                        live.retain(|a| a != attempt);
                        cancelled.push(*attempt);
                    }
                    Output::Send(s) => {
                        if !s.hedge {
                            live.clear();
                        }
                        live.push(s.attempt);
                        sent += 1;
                        prop_assert_eq!(s.attempt, sent);
                    }
                    Output::Deliver(d) => {
                        delivered_n += 1;
                        prop_assert!(live.contains(&d.deliver.attempt), "{:?} not in flight {:?}", d, live);
                        prop_assert!(!cancelled.contains(&d.deliver.attempt));
                    }
                    _ => {}
                }
            }
            prop_assert!(live.len() <= 2, "in flight: {:?}", live);
            prop_assert!(sent <= max_attempts, "{} sent, max {}", sent, max_attempts);
            prop_assert!(f.in_flight().iter().sum::<u32>() <= 2);
            prop_assert!(delivered_n <= 1);
        }
        f.feed(&mut x, Input::ClientGone, at(now + 1));
        f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(now + 2));
        drop(drain(&mut x));
        prop_assert_eq!(f.in_flight(), vec![0, 0, 0]);
    }
}
