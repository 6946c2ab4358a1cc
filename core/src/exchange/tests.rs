//! Tests of the request engine, one per rule, with explicit instants from zero. The fixtures
//! ([`Fixture`], [`Req`], [`drain`]) are `pub(crate)` for the property test.

use core::time::Duration;
use std::net::{IpAddr, Ipv4Addr};

use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::admission::Overloaded;
use crate::bucket::Take;
use crate::config::{MapSecrets, load};
use crate::flow::BodyEnd;
use crate::rate::{LocalStoreParams, RateDecision};
use crate::response::{NotReady, ProtectionReason, Reject, header};
use crate::retry::NoRetryReason;
use crate::rng::WyRand;

pub(crate) const T0: Instant = Instant::ZERO;

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn at(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// A runtime built from `yaml` with every backend healthy, and its services.
#[derive(Debug)]
pub(crate) struct Fixture {
    pub(crate) rt: Arc<Runtime>,
    pub(crate) services: Arc<Services>,
    pub(crate) rng: WyRand,
}

pub(crate) fn runtime(yaml: &str, previous: Option<&Runtime>) -> Arc<Runtime> {
    let cfg = match load(yaml, &MapSecrets::new()) {
        Ok(c) => c,
        Err(e) => panic!("invalid test config:\n{e}"),
    };
    let rt = Runtime::build(cfg, previous, T0, &mut WyRand::new(3)).expect("runtime");
    for (_, b) in rt.backends() {
        b.set_healthy(true, T0);
    }
    Arc::new(rt)
}

impl Fixture {
    pub(crate) fn new(yaml: &str, storage: StorageKind) -> Fixture {
        let rt = runtime(yaml, None);
        let local = LocalStore::new(
            LocalStoreParams {
                shards: 2,
                max_buckets: 64,
            },
            9,
        )
        .expect("local store");
        let services = Services::new(
            Arc::new(Gate::new(rt.config().gate)),
            storage,
            Arc::new(local),
            Arc::new(StoreCircuit::new(ms(200))),
        );
        Fixture {
            rt,
            services: Arc::new(services),
            rng: WyRand::new(11),
        }
    }

    pub(crate) fn start(&mut self, req: &Req, now: Instant) -> (Exchange, Vec<Output>) {
        let mut x = Exchange::new(
            Arc::clone(&self.rt),
            Arc::clone(&self.services),
            &req.head(),
            now,
            &mut self.rng,
        );
        let out = drain(&mut x);
        (x, out)
    }

    pub(crate) fn feed(&mut self, x: &mut Exchange, input: Input, now: Instant) -> Vec<Output> {
        x.handle_input(input, now, &mut self.rng);
        drain(x)
    }

    pub(crate) fn in_flight(&self) -> Vec<u32> {
        self.rt.backends().map(|(_, b)| b.in_flight()).collect()
    }
}

pub(crate) fn drain(x: &mut Exchange) -> Vec<Output> {
    core::iter::from_fn(|| x.poll_output()).collect()
}

/// A request as the adapter parsed it.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) target: String,
    pub(crate) headers: HeaderMap,
    pub(crate) peer: IpAddr,
    pub(crate) tls: bool,
    pub(crate) body: BodyInfo,
    /// An HTTP/2 request's `:authority` (`:scheme` http).
    pub(crate) authority: Option<&'static str>,
}

impl Req {
    pub(crate) fn get(path: &str) -> Req {
        Req {
            method: Method::GET,
            path: path.to_owned(),
            target: path.to_owned(),
            headers: HeaderMap::new(),
            peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
            tls: false,
            body: BodyInfo::Empty,
            authority: None,
        }
    }

    pub(crate) fn with(mut self, method: Method, body: BodyInfo) -> Req {
        self.method = method;
        self.body = body;
        self
    }

    fn header(mut self, name: &'static str, value: &'static str) -> Req {
        self.headers.insert(name, HeaderValue::from_static(value));
        self
    }

    pub(crate) fn head(&self) -> Head<'_> {
        Head {
            method: &self.method,
            path: &self.path,
            target: &self.target,
            headers: &self.headers,
            peer: self.peer,
            tls: self.tls,
            body: self.body,
            authority: self.authority.map(|value| crate::h2::Authority {
                https: false,
                value,
            }),
        }
    }
}

pub(crate) const TWO: &str = "
server:
  overload:
    max_concurrent_requests: 1
    queue_timeout: 50ms
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";

fn send(out: &[Output]) -> Send {
    out.iter()
        .find_map(|o| match o {
            Output::Send(s) => Some(*s),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected a Send in {out:?}"))
}

fn answer(out: &[Output]) -> Answer {
    out.iter()
        .find_map(|o| match o {
            Output::Answer(a) => Some(*a),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected an Answer in {out:?}"))
}

fn record(out: &[Output]) -> Record {
    out.iter()
        .find_map(|o| match o {
            Output::Record(r) => Some(*r),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected a Record in {out:?}"))
}

fn protections(out: &[Output]) -> Vec<ProtectionReason> {
    out.iter()
        .filter_map(|o| match o {
            Output::Metric(Metric::Protection(p)) => Some(*p),
            _ => None,
        })
        .collect()
}

#[test]
fn c_path_2_a_get_is_sent_delivered_and_released_at_the_body_end() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (mut x, out) = f.start(&Req::get("/x"), T0);
    let s = send(&out);
    assert_eq!((s.attempt, s.retry, s.body), (1, false, SendBody::Empty));
    assert!(x.holds_gate());
    assert_eq!(f.services.gate().in_flight(), 1);
    // C-RETRY-5: the header deadline is per_try_timeout (5s) from arrival.
    assert_eq!(x.poll_timeout(), Some(T0 + Duration::from_secs(5)));
    let out = f.feed(&mut x, Input::ResponseHead { status: 200 }, at(30));
    assert!(matches!(
        out.as_slice(),
        [
            Output::Metric(Metric::Attempt {
                result: AttemptResult::Success,
                ..
            }),
            Output::Deliver(_),
            Output::Record(_)
        ]
    ));
    let r = record(&out);
    assert_eq!((r.status, r.attempts, r.duration), (200, 1, ms(30)));
    assert_eq!(x.poll_timeout(), None, "no server.write_timeout by default");
    let d = match out[1] {
        Output::Deliver(d) => d,
        _ => unreachable!(),
    };
    let headers: Vec<_> = x
        .response_headers(Some(&d), 200)
        .map(|(n, v)| (n, v.to_string()))
        .collect();
    let id = x
        .backend(d.deliver.backend)
        .expect("backend")
        .id()
        .to_owned();
    assert_eq!(headers[0], (header::BACKEND, id));
    assert_eq!(headers[1], (header::ATTEMPTS, "1".to_owned()));
    assert_eq!(
        headers[2],
        (header::REQUEST_ID, x.request_id().as_str().to_owned())
    );
    assert_eq!(
        f.in_flight().iter().sum::<u32>(),
        1,
        "slot held while streaming"
    );
    let out = f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(40));
    assert!(out.is_empty(), "{out:?}");
    assert!(x.is_done() && !x.holds_gate());
    assert_eq!(f.services.gate().in_flight(), 0);
    assert_eq!(f.in_flight(), [0, 0]);
}

/// C-TLS-1: a request over weir's TLS is `https` upstream, even from an untrusted peer that
/// says otherwise; over plain HTTP an untrusted peer's claim is ignored (C-FWD-2).
#[test]
fn c_tls_1_a_request_over_weirs_tls_is_https_upstream() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let claim = Req::get("/x").header("x-forwarded-proto", "http");
    let (x, _) = f.start(&claim, T0);
    assert_eq!(x.proto(), crate::forward::Proto::Http);
    let mut over_tls = claim.clone();
    over_tls.tls = true;
    let (x, _) = f.start(&over_tls, T0);
    assert_eq!(x.proto(), crate::forward::Proto::Https);
    let (x, _) = f.start(&Req::get("/x").header("x-forwarded-proto", "https"), T0);
    assert_eq!(x.proto(), crate::forward::Proto::Http, "untrusted claim");
}

#[test]
fn c_path_3_a_valid_id_is_kept_an_invalid_one_replaced_and_every_answer_carries_it() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (x, _) = f.start(&Req::get("/healthz").header("x-request-id", "abc-1"), T0);
    assert!(x.request_id_kept());
    assert_eq!(x.request_id().as_str(), "abc-1");
    let (x, out) = f.start(&Req::get("/x?q").header("x-request-id", "bad id"), T0);
    assert!(!x.request_id_kept());
    assert_eq!(x.request_id().len(), 32);
    drop(out);
    // A rejection's synthetic response carries the id in force.
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (_held, _) = f.start(&Req::get("/x"), T0);
    let mut full = f.services.gate().enter(T0);
    while !matches!(full, crate::admission::Entry::Rejected(_)) {
        full = f.services.gate().enter(T0);
    }
    let (x, out) = f.start(&Req::get("/x").header("x-request-id", "r-9"), T0);
    let a = answer(&out);
    let s = x.synthetic(&a).expect("synthetic");
    assert!(
        s.headers()
            .any(|(n, v)| n == header::REQUEST_ID && v.to_string() == "r-9")
    );
}

#[test]
fn c_obs_4_healthz_and_readyz_pass_neither_the_gate_nor_the_limiter() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (_busy, out) = f.start(&Req::get("/x"), T0);
    send(&out);
    let (_, out) = f.start(&Req::get("/healthz"), T0);
    assert_eq!(answer(&out), Answer::Live);
    assert_eq!(Answer::Live.health_body(), Some("{\"status\":\"ok\"}"));
    let (_, out) = f.start(&Req::get("/readyz"), T0);
    assert_eq!(answer(&out), Answer::Ready);
    for (_, b) in f.rt.backends() {
        b.set_healthy(false, T0);
    }
    let (_, out) = f.start(&Req::get("/readyz"), T0);
    assert_eq!(
        answer(&out),
        Answer::Client(ClientError::NotReady(NotReady::NoBackendAvailable))
    );
    for (_, b) in f.rt.backends() {
        b.set_healthy(true, T0);
    }
    f.services.begin_shutdown();
    let (_, out) = f.start(&Req::get("/readyz"), T0);
    assert_eq!(
        answer(&out),
        Answer::Client(ClientError::NotReady(NotReady::ShuttingDown)),
        "C-PATH-10: not ready while shutting down, and the answer says so"
    );
    let body = SyntheticResponse::client_error(&ClientError::NotReady(NotReady::ShuttingDown), "r");
    assert!(body.body().contains("(shutting_down)"), "{}", body.body());
}

#[test]
fn c_load_1_a_queued_request_is_handed_the_slot_of_a_leaving_one() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (mut first, _) = f.start(&Req::get("/x"), T0);
    let (mut second, out) = f.start(&Req::get("/y"), at(1));
    let ticket = match out.as_slice() {
        [Output::GateWait { ticket }] => *ticket,
        other => panic!("expected a gate wait, got {other:?}"),
    };
    assert_eq!(
        second.poll_timeout(),
        Some(at(51)),
        "queue_timeout after arrival"
    );
    assert!(
        f.feed(&mut second, Input::Timeout, at(50)).is_empty(),
        "early"
    );
    f.feed(&mut first, Input::ResponseHead { status: 204 }, at(10));
    let out = f.feed(&mut first, Input::BodyEnd(BodyEnd::Complete), at(10));
    assert_eq!(out, [Output::GateWake { ticket }]);
    let out = f.feed(&mut second, Input::GateHandoff, at(10));
    assert_eq!(send(&out).attempt, 1);
    assert!(second.holds_gate());
    assert_eq!(f.services.gate().in_flight(), 1);
}

#[test]
fn c_load_1_the_queue_deadline_answers_503_overloaded_and_counts_it() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (_first, _) = f.start(&Req::get("/x"), T0);
    let (mut second, _) = f.start(&Req::get("/y"), T0);
    let out = f.feed(&mut second, Input::Timeout, at(50));
    assert_eq!(
        answer(&out),
        Answer::Reject(Reject::Overloaded(Overloaded::QueueFull))
    );
    assert_eq!(protections(&out), [ProtectionReason::Overload]);
    assert!(
        out.contains(&Output::Metric(Metric::QueueWait(ms(50)))),
        "the wait is measured where it is decided: {out:?}"
    );
    let s = second.synthetic(&answer(&out)).expect("synthetic");
    assert!(s.headers().any(|(n, _)| n == header::OVERLOADED));
    assert_eq!(f.services.gate().queued(), 0);
    assert_eq!(f.services.gate().in_flight(), 1);
}

#[test]
fn c_load_1_a_client_that_leaves_the_queue_leaves_at_once_and_is_logged_499() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (_first, _) = f.start(&Req::get("/x"), T0);
    let (mut second, _) = f.start(&Req::get("/y"), T0);
    assert_eq!(f.services.gate().queued(), 1);
    let out = f.feed(&mut second, Input::ClientGone, at(5));
    assert_eq!(record(&out).status, 499);
    assert!(!out.iter().any(|o| matches!(o, Output::Answer(_))));
    assert_eq!(f.services.gate().queued(), 0);
    assert!(second.is_done());
}

const LIMITED: &str = "
rate_limit:
  enabled: true
  capacity: 1
  refill_per_second: 1
  failure_mode: FAILURE
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";

fn limited(mode: &str, storage: StorageKind) -> Fixture {
    Fixture::new(&LIMITED.replace("FAILURE", mode), storage)
}

#[test]
fn c_rate_1_the_local_store_allows_then_denies_with_429_and_the_gate_slot_back() {
    let mut f = limited("local-fallback", StorageKind::Local);
    let (x, out) = f.start(&Req::get("/x"), T0);
    send(&out);
    let rate = x.rate_outcome().expect("allowed");
    assert_eq!((rate.remaining, rate.storage), (0, StorageKind::Local));
    let names: Vec<_> = x.response_headers(None, 200).map(|(n, _)| n).collect();
    assert!(names.contains(&"x-ratelimit-limit"), "{names:?}");
    let (y, out) = f.start(&Req::get("/x"), at(1));
    let a = answer(&out);
    assert_eq!(a.status(), 429);
    assert_eq!(protections(&out), [ProtectionReason::RateLimited]);
    assert!(
        y.synthetic(&a)
            .is_some_and(|s| s.headers().any(|(n, _)| n == "retry-after"))
    );
    assert_eq!(
        f.services.gate().in_flight(),
        1,
        "the denied request left the gate"
    );
}

#[test]
fn c_rate_5_a_store_answer_decides_and_names_the_store() {
    let mut f = limited("fail-closed", StorageKind::Redis);
    let (mut x, out) = f.start(&Req::get("/x"), T0);
    assert!(
        matches!(out.as_slice(), [Output::StoreTake { .. }]),
        "{out:?}"
    );
    assert_eq!(x.poll_timeout(), Some(at(50)), "operation_timeout (50ms)");
    let out = f.feed(
        &mut x,
        Input::StoreAnswer(Ok(Take::Allowed { remaining: 0 })),
        at(3),
    );
    send(&out);
    assert!(
        out.contains(&Output::Metric(Metric::Store {
            storage: StorageKind::Redis,
            result: StoreResult::Ok,
            duration: Some(ms(3)),
        })),
        "one store call, timed from the call: {out:?}"
    );
    let rate = x.rate_outcome().expect("allowed");
    assert_eq!((rate.storage, rate.degraded), (StorageKind::Redis, false));
    assert!(f.services.circuit().is_up());
}

#[test]
fn c_rate_5_a_store_timeout_applies_each_failure_policy() {
    for mode in ["fail-open", "fail-closed", "local-fallback"] {
        let mut f = limited(mode, StorageKind::Redis);
        let (mut x, _) = f.start(&Req::get("/x"), T0);
        assert!(f.feed(&mut x, Input::Timeout, at(49)).is_empty(), "early");
        let out = f.feed(&mut x, Input::Timeout, at(50));
        assert!(!f.services.circuit().is_up(), "{mode}: the store is down");
        assert!(
            out.contains(&Output::Metric(Metric::Store {
                storage: StorageKind::Redis,
                result: StoreResult::Timeout,
                duration: Some(ms(50)),
            })),
            "{mode}: {out:?}"
        );
        assert_eq!(
            out.contains(&Output::Metric(Metric::Store {
                storage: StorageKind::Local,
                result: StoreResult::Ok,
                duration: None,
            })),
            mode == "local-fallback",
            "{mode}: the fallback's take counts under local"
        );
        match mode {
            "fail-closed" => {
                assert_eq!(answer(&out), Answer::Reject(Reject::StoreUnavailable));
                assert!(protections(&out).is_empty(), "not a protection event");
                assert!(!f.services.rate_ready(&f.rt), "fail-closed: not ready");
            }
            "fail-open" => {
                send(&out);
                let r = x.rate_outcome().expect("allowed");
                assert!(r.degraded && r.storage == StorageKind::Redis);
            }
            _ => {
                send(&out);
                let r = x.rate_outcome().expect("allowed");
                assert!(r.degraded && r.storage == StorageKind::Local);
            }
        }
        // While down, the next request does not wait on the store until a trial is due.
        let (_, out) = f.start(&Req::get("/x"), at(60));
        assert!(
            !out.iter().any(|o| matches!(o, Output::StoreTake { .. })),
            "{mode}"
        );
        let (mut trial, out) = f.start(&Req::get("/x"), at(250));
        assert!(
            matches!(out.as_slice(), [Output::StoreTake { .. }]),
            "{mode}: the trial goes to the store: {out:?}"
        );
        f.feed(
            &mut trial,
            Input::StoreAnswer(Ok(Take::Allowed { remaining: 0 })),
            at(251),
        );
        assert!(f.services.circuit().is_up(), "{mode}: recovered");
        assert_eq!(f.services.circuit().counters().recoveries_total, 1);
    }
}

/// C-RATE-5: a failure of the one node holding the key (a cluster master) is decided
/// by the policy, and the store stays up and ready for every other key.
#[test]
fn c_rate_5_a_partial_failure_decides_by_policy_and_keeps_the_store_up() {
    for mode in ["fail-open", "fail-closed", "local-fallback"] {
        let mut f = limited(mode, StorageKind::Redis);
        let (mut x, _) = f.start(&Req::get("/x"), T0);
        let out = f.feed(
            &mut x,
            Input::StoreAnswer(Err(StoreFailure::Partial)),
            at(1),
        );
        if mode == "fail-closed" {
            assert_eq!(answer(&out), Answer::Reject(Reject::StoreUnavailable));
        } else {
            send(&out);
            assert!(x.rate_outcome().expect("allowed").degraded, "{mode}");
        }
        assert!(f.services.circuit().is_up(), "{mode}: still up");
        assert!(f.services.rate_ready(&f.rt), "{mode}: still ready");
        assert_eq!(f.services.circuit().counters().policy_decisions_total, 1);
        let (_, out) = f.start(&Req::get("/x"), at(2));
        assert!(
            matches!(out.as_slice(), [Output::StoreTake { .. }]),
            "{mode}: the next key goes to the store: {out:?}"
        );
    }
}

#[test]
fn c_rate_5_a_client_gone_during_a_trial_frees_the_trial() {
    let mut f = limited("local-fallback", StorageKind::Redis);
    let (mut x, _) = f.start(&Req::get("/x"), T0);
    f.feed(&mut x, Input::StoreAnswer(Err(StoreFailure::Error)), at(1));
    let (mut t, _) = f.start(&Req::get("/x"), at(300));
    assert!(f.services.circuit().trial_in_flight());
    let out = f.feed(&mut t, Input::ClientGone, at(301));
    assert_eq!(record(&out).status, 499);
    assert!(!f.services.circuit().trial_in_flight());
}

const RETRYING: &str = "
server:
  upstream:
    response_header_timeout: 1s
  retry:
    max_attempts: 2
    body_limit: 100
    backoff_base: 0s
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";

#[test]
fn c_retry_1_a_small_body_is_buffered_and_replayed_on_another_backend() {
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    let req = Req::get("/x").with(Method::GET, BodyInfo::Sized(10));
    let (mut x, out) = f.start(&req, T0);
    assert_eq!(out, [Output::BufferBody { len: 10 }]);
    assert_eq!(
        x.poll_timeout(),
        Some(at(15_000)),
        "read_timeout from arrival"
    );
    let first = send(&f.feed(&mut x, Input::BodyBuffered, at(5)));
    assert_eq!((first.body, first.last), (SendBody::Buffered, false));
    assert!(first.replayable);
    let out = f.feed(&mut x, Input::ResponseHead { status: 503 }, at(10));
    let retry = send(&out);
    assert!(retry.retry && retry.last && retry.backend != first.backend);
    assert!(matches!(
        out[0],
        Output::Metric(Metric::Attempt {
            result: AttemptResult::FailureStatus,
            ..
        })
    ));
    let out = f.feed(&mut x, Input::ResponseHead { status: 503 }, at(20));
    assert!(
        out.iter().any(|o| matches!(o, Output::Deliver(_))),
        "{out:?}"
    );
    assert_eq!(record(&out).attempts, 2);
}

#[test]
fn c_retry_1_a_streamed_body_is_never_retried() {
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    for body in [BodyInfo::Unsized, BodyInfo::Sized(101)] {
        let (mut x, out) = f.start(&Req::get("/x").with(Method::PUT, body), T0);
        let s = send(&out);
        assert!(
            !s.replayable && !s.last && matches!(s.body, SendBody::Stream { .. }),
            "{body:?}"
        );
        let out = f.feed(&mut x, Input::ResponseHead { status: 503 }, at(1));
        assert!(
            out.iter().any(|o| matches!(o, Output::Deliver(_))),
            "{body:?}"
        );
        f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(2));
    }
}

const THREE: &str = "
server:
  retry:
    max_attempts: 3
    body_limit: 100
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
  - id: c
    url: http://10.0.0.3:80
";

/// C-RETRY-9: a streamed `POST` whose connect failed, or whose stream the backend refused with
/// all of it still held, is sent again on another backend, its body streamed again; a refusal
/// the adapter could not resend from, or a transport error after the body went out, is not
/// retried.
#[test]
fn c_retry_9_a_streamed_post_nothing_of_which_was_sent_goes_to_another_backend() {
    let mut f = Fixture::new(THREE, StorageKind::Local);
    let post = Req::get("/x").with(Method::POST, BodyInfo::Unsized);
    let (mut x, out) = f.start(&post, T0);
    let first = send(&out);
    assert!(!first.replayable && !first.last);
    let out = f.feed(&mut x, Input::SendFailed(SendFailure::Connect), at(1));
    let second = send(&out);
    assert!(second.retry && second.backend != first.backend);
    assert!(matches!(second.body, SendBody::Stream { .. }));
    let out = f.feed(
        &mut x,
        Input::SendFailed(SendFailure::Refused { held: true }),
        at(2),
    );
    let third = send(&out);
    assert!(third.retry && third.last);
    assert!(third.backend != first.backend && third.backend != second.backend);
    let out = f.feed(&mut x, Input::ResponseHead { status: 200 }, at(3));
    assert!(out.iter().any(|o| matches!(o, Output::Deliver(_))));
    assert_eq!(record(&out).attempts, 3);
    f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(4));

    // max_attempts still bounds it: the third refusal is answered 502.
    let (mut y, _) = f.start(&post, at(10));
    f.feed(&mut y, Input::SendFailed(SendFailure::Connect), at(11));
    f.feed(&mut y, Input::SendFailed(SendFailure::Connect), at(12));
    let out = f.feed(&mut y, Input::SendFailed(SendFailure::Connect), at(13));
    assert_eq!(answer(&out).status(), 502);
    assert!(!out.iter().any(|o| matches!(o, Output::Send(_))));

    for failure in [
        SendFailure::Refused { held: false },
        SendFailure::Transport {
            client_body_failed: false,
        },
    ] {
        let (mut z, _) = f.start(&post, at(20));
        let out = f.feed(&mut z, Input::SendFailed(failure), at(21));
        assert!(
            !out.iter().any(|o| matches!(o, Output::Send(_))),
            "{failure:?}: something was sent, not retried"
        );
        assert_eq!(answer(&out).status(), 502);
    }
    assert_eq!(f.in_flight(), [0, 0, 0]);
}

/// C-RETRY-9 within C-RETRY-2 and C-RETRY-7: a retry of an unsent attempt still needs another
/// untried backend and a budget token.
#[test]
fn c_retry_9_needs_another_backend_and_a_budget_token() {
    const ONE: &str = "
server:
  retry:
    max_attempts: 3
backends:
  - id: a
    url: http://10.0.0.1:80
";
    let mut f = Fixture::new(ONE, StorageKind::Local);
    let post = Req::get("/x").with(Method::POST, BodyInfo::Unsized);
    let (mut x, _) = f.start(&post, T0);
    let out = f.feed(&mut x, Input::SendFailed(SendFailure::Connect), at(1));
    let a = answer(&out);
    assert!(
        matches!(a, Answer::Failure(ff) if ff.no_retry == NoRetryReason::NoOtherBackend),
        "{a:?}"
    );
    const EMPTY: &str = "
server:
  retry:
    max_attempts: 3
    budget_capacity: 1
    budget_refill_per_second: 0.001
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
  - id: c
    url: http://10.0.0.3:80
";
    let mut f = Fixture::new(EMPTY, StorageKind::Local);
    let (mut x, _) = f.start(&post, T0);
    let out = f.feed(&mut x, Input::SendFailed(SendFailure::Connect), at(1));
    assert!(send(&out).retry, "the one token");
    let out = f.feed(&mut x, Input::SendFailed(SendFailure::Connect), at(2));
    let a = answer(&out);
    assert!(
        matches!(a, Answer::Failure(ff) if ff.budget_exhausted),
        "{a:?}"
    );
}

/// C-RETRY-10: a retry's `Send` is due after its backoff (the adapter waits until `at`), and
/// its header deadline counts from then; the first attempt is due at once.
#[test]
fn c_retry_10_a_retry_is_sent_after_its_backoff() {
    const BACKOFF: &str = "
server:
  retry:
    max_attempts: 2
    per_try_timeout: 1s
    backoff_base: 200ms
    backoff_max: 200ms
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";
    let mut f = Fixture::new(BACKOFF, StorageKind::Local);
    let mut waits = Vec::new();
    for i in 0..20u64 {
        let t = at(i * 10_000);
        let (mut x, out) = f.start(&Req::get("/x"), t);
        assert_eq!(send(&out).at, t, "no wait before the first attempt");
        let failed = at(i * 10_000 + 10);
        let retry = send(&f.feed(&mut x, Input::ResponseHead { status: 503 }, failed));
        let waited = retry.at.saturating_since(failed);
        assert!(waited < Duration::from_millis(200), "{waited:?}");
        assert_eq!(x.poll_timeout(), Some(retry.at + Duration::from_secs(1)));
        waits.push(waited);
        f.feed(&mut x, Input::ClientGone, retry.at);
    }
    assert!(
        waits.iter().any(|w| *w > Duration::from_millis(20)),
        "full jitter over [0, 200ms) is not all near zero: {waits:?}"
    );
    assert_eq!(f.in_flight(), [0, 0]);
}

#[test]
fn c_retry_5_the_header_deadline_is_the_earlier_of_per_try_and_response_header_timeout() {
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/x"), at(100));
    assert_eq!(
        x.poll_timeout(),
        Some(at(1_100)),
        "response_header_timeout 1s"
    );
    assert!(f.feed(&mut x, Input::Timeout, at(1_099)).is_empty());
    let out = f.feed(&mut x, Input::Timeout, at(1_100));
    assert!(matches!(
        out[0],
        Output::Metric(Metric::Attempt {
            result: AttemptResult::Timeout,
            ..
        })
    ));
    assert!(send(&out).retry);
    let out = f.feed(&mut x, Input::Timeout, at(2_100));
    let a = answer(&out);
    assert_eq!(a.status(), 504);
    assert!(matches!(a, Answer::Failure(ff) if ff.attempts == 2));
    assert_eq!(f.in_flight(), [0, 0]);
}

/// Found by weir-sim's `request_timers` check: the first attempt's `per_try_timeout` once
/// counted from the request's arrival, so time spent reading a buffered body (or in the gate's
/// queue, or on the store call) was taken from the first attempt only.
#[test]
fn c_retry_5_the_first_per_try_timeout_counts_from_sending_not_from_arrival() {
    const PER_TRY: &str = "
server:
  retry:
    max_attempts: 2
    per_try_timeout: 500ms
    body_limit: 100
    backoff_base: 0s
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";
    let mut f = Fixture::new(PER_TRY, StorageKind::Local);
    let req = Req::get("/x").with(Method::GET, BodyInfo::Sized(10));
    let (mut x, out) = f.start(&req, T0);
    assert_eq!(out, [Output::BufferBody { len: 10 }]);
    // The body takes 300 ms to arrive; the first attempt still has its whole 500 ms.
    send(&f.feed(&mut x, Input::BodyBuffered, at(300)));
    assert_eq!(
        x.poll_timeout(),
        Some(at(800)),
        "per_try_timeout from sending"
    );
    assert!(f.feed(&mut x, Input::Timeout, at(500)).is_empty());
    let retry = send(&f.feed(&mut x, Input::Timeout, at(800)));
    assert!(retry.retry);
    assert_eq!(x.poll_timeout(), Some(at(1_300)));
}

#[test]
fn c_path_9_a_client_gone_during_an_attempt_is_cancelled_and_neutral() {
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/x").with(Method::PUT, BodyInfo::Unsized), T0);
    let out = f.feed(
        &mut x,
        Input::SendFailed(SendFailure::Transport {
            client_body_failed: true,
        }),
        at(5),
    );
    assert!(matches!(
        out[0],
        Output::Metric(Metric::Attempt {
            result: AttemptResult::Cancelled,
            ..
        })
    ));
    assert_eq!(record(&out).status, 499);
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0]);
    for (_, b) in f.rt.backends() {
        assert_eq!(b.passive_failures(), 0, "C-RETRY-8: neutral");
    }
    // A connect error is a failure and a retry (GET).
    let (mut y, _) = f.start(&Req::get("/x"), at(10));
    let out = f.feed(&mut y, Input::SendFailed(SendFailure::Connect), at(11));
    assert!(send(&out).retry);
}

#[test]
fn c_path_12_a_streamed_body_that_breaks_its_framing_is_400_cancelled_and_neutral() {
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    let (mut x, out) = f.start(&Req::get("/x").with(Method::PUT, BodyInfo::Unsized), T0);
    assert!(!send(&out).retry, "streamed: sent at once");
    let out = f.feed(&mut x, Input::BodyUnreadable, at(5));
    assert!(matches!(
        out[0],
        Output::Metric(Metric::Attempt {
            result: AttemptResult::Cancelled,
            ..
        })
    ));
    assert_eq!(answer(&out), Answer::Client(ClientError::BodyUnreadable));
    assert_eq!(record(&out).status, 400);
    assert!(
        !out.iter().any(|o| matches!(o, Output::Send(_))),
        "not retried: {out:?}"
    );
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0]);
    for (_, b) in f.rt.backends() {
        assert_eq!(b.passive_failures(), 0, "the client's fault: neutral");
    }
}

#[test]
fn c_path_9_a_streamed_body_the_client_stops_sending_is_408_cancelled_and_neutral() {
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    let (mut x, out) = f.start(&Req::get("/x").with(Method::PUT, BodyInfo::Sized(100)), T0);
    assert!(!send(&out).retry, "streamed: sent at once");
    let out = f.feed(&mut x, Input::BodyTimeout, at(5));
    assert!(matches!(
        out[0],
        Output::Metric(Metric::Attempt {
            result: AttemptResult::Cancelled,
            ..
        })
    ));
    assert_eq!(answer(&out), Answer::Client(ClientError::BodyTimeout));
    let rec = record(&out);
    assert_eq!((rec.status, rec.reason), (408, Some("body_timeout")));
    assert!(
        !out.iter().any(|o| matches!(o, Output::Send(_))),
        "not retried: {out:?}"
    );
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0]);
    for (_, b) in f.rt.backends() {
        assert_eq!(b.passive_failures(), 0, "the client's fault: neutral");
    }
}

#[test]
fn c_path_8_a_101_goes_through_only_when_asked_for() {
    let with_write_timeout = TWO.replace("server:\n", "server:\n  write_timeout: 1s\n");
    let mut f = Fixture::new(&with_write_timeout, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/ws"), T0);
    let out = f.feed(&mut x, Input::ResponseHead { status: 101 }, at(1));
    assert_eq!(
        answer(&out),
        Answer::Client(ClientError::UnrequestedUpgrade)
    );
    assert_eq!(f.in_flight(), [0, 0]);
    // C-PATH-8: an h2c upgrade is a plain request: the backend's 101 to it is not passed on.
    let h2c = Req::get("/h2c")
        .header("connection", "Upgrade, HTTP2-Settings")
        .header("upgrade", "h2c")
        .header("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA");
    let (mut z, _) = f.start(&h2c, at(2));
    assert!(!z.upgrade_requested());
    let out = f.feed(&mut z, Input::ResponseHead { status: 101 }, at(2));
    assert_eq!(
        answer(&out),
        Answer::Client(ClientError::UnrequestedUpgrade)
    );
    assert_eq!(f.in_flight(), [0, 0]);
    let req = Req::get("/ws")
        .header("connection", "upgrade")
        .header("upgrade", "websocket");
    let (mut y, _) = f.start(&req, at(2));
    assert!(y.upgrade_requested());
    let out = f.feed(&mut y, Input::ResponseHead { status: 101 }, at(3));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Deliver(d) if d.upgrade)),
        "{out:?}"
    );
    assert_eq!(
        f.in_flight().iter().sum::<u32>(),
        1,
        "held until the tunnel closes"
    );
    assert_eq!(
        y.poll_timeout(),
        None,
        "write_timeout does not bound a tunnel"
    );
    f.feed(&mut y, Input::BodyEnd(BodyEnd::Complete), at(9));
    assert_eq!(f.in_flight(), [0, 0]);
}

#[test]
fn the_write_timeout_ends_a_streaming_body() {
    let yaml = TWO.replace("server:\n", "server:\n  write_timeout: 2s\n");
    let mut f = Fixture::new(&yaml, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/x"), T0);
    let out = f.feed(&mut x, Input::ResponseHead { status: 200 }, at(10));
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Deliver(d) if d.write_deadline == Some(at(2_000))))
    );
    assert_eq!(x.poll_timeout(), Some(at(2_000)));
    let out = f.feed(&mut x, Input::Timeout, at(2_000));
    assert_eq!(out, [Output::AbortBody]);
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0]);
}

#[test]
fn targets_that_cannot_be_proxied_are_400() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let mut req = Req::get("*");
    req.path = String::new();
    let (_, out) = f.start(&req, T0);
    assert_eq!(
        answer(&out),
        Answer::Client(ClientError::AsteriskWithoutOptions)
    );
    req.method = Method::OPTIONS;
    let (_, out) = f.start(&req, T0);
    send(&out);
    let mut req = Req::get("");
    req.target = String::new();
    req.method = Method::CONNECT;
    let (_, out) = f.start(&req, T0);
    assert_eq!(answer(&out), Answer::Client(ClientError::UnsupportedTarget));
}

#[test]
fn c_conf_4_a_reload_gives_new_requests_the_new_snapshot_and_old_ones_keep_theirs() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (mut old, out) = f.start(&Req::get("/x"), T0);
    let first = send(&out);
    let next = TWO.replace(
        "id: b\n    url: http://10.0.0.2:80",
        "id: c\n    url: http://10.0.0.3:80",
    );
    let before = Arc::clone(&f.rt);
    f.rt = runtime(&next, Some(&before));
    assert!(Arc::ptr_eq(old.runtime(), &before));
    let out = f.feed(&mut old, Input::ResponseHead { status: 503 }, at(1));
    if let Some(retry) = out.iter().find_map(|o| match o {
        Output::Send(s) => Some(*s),
        _ => None,
    }) {
        let id = old.backend(retry.backend).expect("backend").id();
        assert!(
            id == "a" || id == "b",
            "retries stay in the old snapshot: {id}"
        );
        assert_ne!(retry.backend, first.backend);
    }
    drop(old);
    let (young, _) = f.start(&Req::get("/x"), at(2));
    assert!(Arc::ptr_eq(young.runtime(), &f.rt));
}

#[test]
fn inputs_out_of_stage_are_ignored_and_time_going_backwards_is_clamped() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/x"), at(100));
    for input in [
        Input::GateHandoff,
        Input::BodyBuffered,
        Input::StoreAnswer(Ok(Take::Allowed { remaining: 1 })),
        Input::BodyEnd(BodyEnd::Complete),
        Input::Timeout,
    ] {
        assert!(f.feed(&mut x, input, at(10)).is_empty(), "{input:?}");
    }
    let out = f.feed(&mut x, Input::ResponseHead { status: 200 }, at(50));
    assert_eq!(record(&out).duration, Duration::ZERO, "clamped to 100ms");
    f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(200));
    for input in [Input::ClientGone, Input::ResponseHead { status: 200 }] {
        assert!(f.feed(&mut x, input, at(300)).is_empty(), "after the end");
    }
}

#[test]
fn c_pool_6_dropping_an_exchange_releases_everything() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (x, _) = f.start(&Req::get("/x"), T0);
    let (y, _) = f.start(&Req::get("/x"), T0);
    assert_eq!(f.services.gate().queued(), 1);
    drop(y);
    assert_eq!(f.services.gate().queued(), 0);
    drop(x);
    assert_eq!(f.services.gate().in_flight(), 0);
    assert_eq!(f.in_flight(), [0, 0]);
}

#[test]
fn access_log_sampling_logs_errors_always_and_successes_at_the_rate() {
    let mut rng = WyRand::new(5);
    assert!(should_log(500, false, 0.0, &mut rng));
    assert!(should_log(200, true, 0.0, &mut rng));
    assert!(!should_log(200, false, 0.0, &mut rng));
    assert!(should_log(200, false, 1.0, &mut rng));
    let hits = (0..10_000).filter(|_| sampled(0.25, &mut rng)).count();
    assert!((2_200..2_800).contains(&hits), "{hits}");
}

/// RFC 9113 §8.3.1 (C-PATH-12 refined, docs/proxy.md "HTTP/2 requests"): an HTTP/2 request
/// whose `host` names another entity than its `:authority` is a `400` before `/healthz`, the
/// gate and any backend; the same entity in another spelling passes.
#[test]
fn h2_host_naming_another_authority_is_400_first() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let mut req = Req::get("/healthz").header("host", "evil.example");
    req.authority = Some("good.example");
    let (x, out) = f.start(&req, T0);
    assert_eq!(answer(&out), Answer::Client(ClientError::HostMismatch));
    assert!(x.synthetic(&answer(&out)).is_some());
    assert_eq!(record(&out).status, 400);
    assert_eq!(f.services.gate().in_flight(), 0);
    assert!(!out.iter().any(|o| matches!(o, Output::Send(_))));

    let mut req = Req::get("/healthz").header("host", "GOOD.example:80");
    req.authority = Some("good.example");
    let (_x, out) = f.start(&req, T0);
    assert_eq!(answer(&out), Answer::Live);
}

/// docs/proxy.md, "Methods": TRACE is 405 with `Allow`, right after the framing
/// checks (even for `/healthz`), past neither the gate nor a backend, unless
/// `server.allow_trace`.
#[test]
fn trace_is_refused_with_405_before_the_gate_unless_allowed() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let trace = Req::get("/healthz").with(Method::TRACE, BodyInfo::Empty);
    let (x, out) = f.start(&trace, T0);
    assert_eq!(answer(&out), Answer::Client(ClientError::MethodNotAllowed));
    let s = x.synthetic(&answer(&out)).expect("synthetic");
    assert!(s.headers().any(|(n, _)| n == header::ALLOW));
    assert_eq!(record(&out).status, 405);
    assert_eq!(f.services.gate().in_flight(), 0);
    let allowed = TWO.replace("server:\n", "server:\n  allow_trace: true\n");
    let mut f = Fixture::new(&allowed, StorageKind::Local);
    let (_x, out) = f.start(&Req::get("/x").with(Method::TRACE, BodyInfo::Empty), T0);
    assert_eq!(send(&out).attempt, 1);
}

/// docs/proxy.md, "Upstream status validity": a status outside 100..=599 is an
/// invalid response: counted as a transport error, retried like one, answered 502, never
/// delivered.
#[test]
fn an_upstream_status_outside_100_599_is_a_502_counted_as_transport_error() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/x"), T0);
    let transport = |out: &[Output]| {
        out.iter().any(|o| {
            matches!(
                o,
                Output::Metric(Metric::Attempt {
                    result: AttemptResult::TransportError,
                    ..
                })
            )
        })
    };
    let out = f.feed(&mut x, Input::ResponseHead { status: 999 }, at(5));
    assert!(transport(&out));
    assert!(send(&out).retry, "retried on the other backend: {out:?}");
    let out = f.feed(&mut x, Input::ResponseHead { status: 600 }, at(9));
    assert!(transport(&out));
    assert!(!out.iter().any(|o| matches!(o, Output::Deliver(_))));
    assert_eq!(answer(&out).status(), 502);
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0]);
}

#[test]
fn exchange_is_send_and_sync() {
    fn check<T: core::marker::Send + Sync>() {}
    check::<Exchange>();
    check::<Output>();
    let _ = RateDecision::Allowed;
}

/// C-OBS-2, C-OBS-3, C-PATH-12: a head the HTTP/1 codec refused has a record of its own: its
/// status and reason, no attempt, no path, always logged.
#[test]
fn c_obs_3_a_refused_head_is_recorded_and_always_logged() {
    let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
    for (e, status, reason) in [
        (
            crate::h1::HeadError::Malformed("x"),
            400,
            "malformed_request",
        ),
        (crate::h1::HeadError::Target, 400, "bad_target"),
        (
            crate::h1::HeadError::RequestLineTooLong,
            414,
            "uri_too_long",
        ),
        (crate::h1::HeadError::HeadTooLarge, 431, "header_too_large"),
        (
            crate::h1::HeadError::TooManyHeaders,
            431,
            "header_too_large",
        ),
    ] {
        let r = Record::refused_head(&e, Duration::from_millis(3), client);
        assert_eq!(
            (r.status, r.reason, r.client, r.duration),
            (status, Some(reason), client, Duration::from_millis(3))
        );
        assert!(r.log && !r.include_path, "{r:?}");
        assert_eq!((r.attempts, r.backend, r.upstream_status), (0, None, None));
    }
}

/// The attempt metric carries the status of the head it got, and its words say what the
/// backend answered: a `500` passed on is a success for retries and the breaker (C-RETRY-1) but
/// reads `answered 500`; a `200` reads `success`; a timeout, its label.
#[test]
fn c_retry_1_an_attempt_answered_500_is_counted_a_success_but_reads_answered_500() {
    let attempt = |out: &[Output]| {
        out.iter()
            .find_map(|o| match o {
                Output::Metric(Metric::Attempt { result, status, .. }) => Some((*result, *status)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("an attempt metric in {out:?}"))
    };
    let mut f = Fixture::new(TWO, StorageKind::Local);
    for (status, words) in [
        (500, "answered 500"),
        (200, "success"),
        (404, "answered 404"),
    ] {
        let (mut x, _) = f.start(&Req::get("/x"), T0);
        let out = f.feed(&mut x, Input::ResponseHead { status }, at(30));
        let (result, got) = attempt(&out);
        assert_eq!((result, got), (AttemptResult::Success, Some(status)));
        assert_eq!(result.detail(got), words);
        let _ = f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(40));
    }
    assert_eq!(
        AttemptResult::FailureStatus.detail(Some(503)),
        "answered 503"
    );
    assert_eq!(
        AttemptResult::TransportError.detail(Some(999)),
        "invalid status 999"
    );
    assert_eq!(AttemptResult::Timeout.detail(None), "timeout");
    assert_eq!(AttemptResult::ConnectError.detail(None), "connect_error");
}

#[test]
fn c_grpc_3_a_grpc_request_gets_weir_answers_in_the_grpc_form() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (_held, _) = f.start(&Req::get("/x"), T0);
    let mut full = f.services.gate().enter(T0);
    while !matches!(full, crate::admission::Entry::Rejected(_)) {
        full = f.services.gate().enter(T0);
    }
    let grpc = Req::get("/x")
        .header("content-type", "application/grpc")
        .header("x-request-id", "g-1");
    let (x, out) = f.start(&grpc, T0);
    assert!(x.is_grpc());
    let a = answer(&out);
    assert_eq!(
        a.status(),
        503,
        "the outcome's status, for the log and metrics"
    );
    assert_eq!(
        record(&out).status,
        503,
        "the access log keeps weir's own status"
    );
    let s = x.synthetic(&a).expect("synthetic");
    assert!(s.is_grpc());
    assert_eq!(s.status(), 200);
    let get = |name: &str| {
        s.headers()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    };
    assert_eq!(get("grpc-status").as_deref(), Some("14"));
    assert_eq!(get("content-type").as_deref(), Some("application/grpc"));
    let message = get("grpc-message").expect("grpc-message");
    assert!(message.starts_with("overloaded"), "{message}");
    assert!(message.ends_with("(request id g-1)"), "{message}");
    assert_eq!(get("retry-after").as_deref(), Some("1"));
    assert!(s.body().is_empty());
    // The same request without a gRPC content type: the JSON form.
    let (x, out) = f.start(&Req::get("/x"), T0);
    assert!(!x.is_grpc());
    assert_eq!(x.synthetic(&answer(&out)).expect("synthetic").status(), 503);
}

#[test]
fn c_grpc_3_a_trailers_only_unavailable_is_retried_as_a_503_and_delivered_as_it_is() {
    let mut unavailable = http::HeaderMap::new();
    unavailable.insert("grpc-status", http::HeaderValue::from_static("14"));
    let head = Input::response_head(200, &unavailable, true, Duration::ZERO);
    assert_eq!(head, Input::UnavailableHead { status: 200 });
    assert_eq!(
        Input::response_head(200, &unavailable, false, Duration::ZERO),
        Input::ResponseHead { status: 200 },
        "a head with a body to follow is not judged by grpc-status"
    );
    let mut f = Fixture::new(RETRYING, StorageKind::Local);
    let req = Req::get("/x").with(Method::GET, BodyInfo::Sized(10));
    let (mut x, _) = f.start(&req, T0);
    let first = send(&f.feed(&mut x, Input::BodyBuffered, at(5)));
    let out = f.feed(&mut x, head, at(10));
    let retry = send(&out);
    assert!(retry.retry && retry.backend != first.backend, "{out:?}");
    assert!(matches!(
        out[0],
        Output::Metric(Metric::Attempt {
            result: AttemptResult::FailureStatus,
            ..
        })
    ));
    // The last attempt's trailers-only answer is passed on with its own status.
    let out = f.feed(&mut x, head, at(20));
    let delivered = out
        .iter()
        .find_map(|o| match o {
            Output::Deliver(d) => Some(d.deliver.status),
            _ => None,
        })
        .expect("delivered");
    assert_eq!(delivered, 200);
    assert_eq!(record(&out).attempts, 2);
}

#[test]
fn c_out_1_a_failing_grpc_status_at_the_body_end_counts_for_outlier_detection_alone() {
    // (grpc-status fed, head judged a failure already, failures counted after the call)
    let cases = [
        (Some(13), false, 1),
        (Some(2), false, 1),
        (Some(15), false, 1),
        (Some(14), false, 1),
        (Some(0), false, 0),
        (Some(5), false, 0),
        (None, false, 0),
        // A trailers-only UNAVAILABLE was judged a `503` at its head: counted once.
        (Some(14), true, 1),
    ];
    for (code, unavailable_head, failures) in cases {
        let mut f = Fixture::new(TWO, StorageKind::Local);
        // A POST: not retried, so even the UNAVAILABLE head is delivered.
        let req = Req::get("/pkg.Svc/Call").with(Method::POST, BodyInfo::Empty);
        let (mut x, out) = f.start(&req, T0);
        let s = send(&out);
        let head = if unavailable_head {
            Input::UnavailableHead { status: 200 }
        } else {
            Input::ResponseHead { status: 200 }
        };
        let out = f.feed(&mut x, head, at(10));
        assert!(
            out.iter().any(|o| matches!(o, Output::Deliver(_))),
            "{out:?}"
        );
        if let Some(code) = code {
            f.feed(&mut x, Input::GrpcStatus(code), at(20));
            // Only once, however often it is fed.
            f.feed(&mut x, Input::GrpcStatus(code), at(21));
        }
        f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(30));
        let (_, b) = f.rt.backends().nth(s.backend).expect("the backend");
        assert_eq!(
            b.outlier().peek(),
            (1, failures),
            "{code:?} (trailers-only unavailable: {unavailable_head})"
        );
        let breaker = if unavailable_head { 1 } else { 0 };
        assert_eq!(
            b.passive_failures(),
            breaker,
            "{code:?}: the breaker keeps the head's judgment"
        );
    }
}

/// A gRPC call with `grpc-timeout: <timeout>`.
fn grpc_call(timeout: &'static str) -> Req {
    Req::get("/pkg.Svc/Call")
        .header("content-type", "application/grpc")
        .header("grpc-timeout", timeout)
}

/// The gRPC status of weir's own answer `a` to a gRPC call of `x`.
fn grpc_status_of(x: &Exchange, a: &Answer) -> Option<String> {
    let s = x.synthetic(a).expect("synthetic");
    s.headers()
        .find(|(n, _)| *n == "grpc-status")
        .map(|(_, v)| v.to_string())
}

#[test]
fn c_grpc_2_the_calls_deadline_cancels_the_attempt_and_answers_deadline_exceeded() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (mut x, out) = f.start(&grpc_call("300m"), T0);
    let s = send(&out);
    assert_eq!(x.grpc_deadline(), Some(at(300)));
    assert_eq!(
        x.upstream_grpc_timeout(s.at)
            .map(|t| t.to_string())
            .as_deref(),
        Some("300000u")
    );
    assert_eq!(
        x.poll_timeout(),
        Some(at(300)),
        "earlier than per_try_timeout (5s)"
    );
    assert!(f.feed(&mut x, Input::Timeout, at(299)).is_empty());
    let out = f.feed(&mut x, Input::Timeout, at(300));
    assert!(
        matches!(
            out[0],
            Output::Metric(Metric::Attempt {
                result: AttemptResult::Cancelled,
                ..
            })
        ),
        "{out:?}"
    );
    assert!(
        !out.iter().any(|o| matches!(o, Output::Send(_))),
        "never retried past the call's deadline: {out:?}"
    );
    let a = answer(&out);
    assert_eq!(a, Answer::Client(ClientError::DeadlineExceeded));
    assert_eq!(a.status(), 504);
    assert_eq!(grpc_status_of(&x, &a).as_deref(), Some("4"));
    let r = record(&out);
    assert_eq!((r.status, r.reason), (504, Some("deadline_exceeded")));
    assert_eq!(r.grpc_status, crate::grpc::StatusSource::Known(4));
    assert!(x.is_done());
    assert_eq!(f.in_flight(), [0, 0]);
    for (_, b) in f.rt.backends() {
        assert_eq!(
            b.passive_failures(),
            0,
            "the client's deadline is no backend fault"
        );
    }
}

#[test]
fn c_grpc_2_the_timeout_sent_upstream_is_lowered_by_the_time_spent() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let req = grpc_call("1S").with(Method::GET, BodyInfo::Sized(10));
    let (mut x, out) = f.start(&req, at(1_000));
    assert_eq!(out, [Output::BufferBody { len: 10 }]);
    assert_eq!(x.poll_timeout(), Some(at(2_000)), "reading the body too");
    let s = send(&f.feed(&mut x, Input::BodyBuffered, at(1_250)));
    let t = x.upstream_grpc_timeout(s.at).expect("a timeout to send");
    assert_eq!(t.to_string(), "750000u");
    // Later attempts get what remains then; past the deadline nothing is sent.
    assert_eq!(
        x.upstream_grpc_timeout(at(1_999))
            .map(|t| t.to_string())
            .as_deref(),
        Some("1000000n")
    );
    // A delivered response is bounded by the call's deadline too.
    let out = f.feed(&mut x, Input::ResponseHead { status: 200 }, at(1_300));
    let d = out
        .iter()
        .find_map(|o| match o {
            Output::Deliver(d) => Some(*d),
            _ => None,
        })
        .expect("delivered");
    assert_eq!(d.write_deadline, Some(at(2_000)));
    let out = f.feed(&mut x, Input::Timeout, at(2_000));
    assert_eq!(out.first(), Some(&Output::AbortBody), "{out:?}");
}

#[test]
fn c_grpc_2_the_deadline_ends_a_wait_in_the_gates_queue() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    let (_held, _) = f.start(&Req::get("/x"), T0);
    let (mut x, out) = f.start(&grpc_call("20m"), T0);
    assert!(matches!(out[..], [Output::GateWait { .. }]), "{out:?}");
    assert_eq!(x.poll_timeout(), Some(at(20)), "before the queue's 50 ms");
    let out = f.feed(&mut x, Input::Timeout, at(20));
    assert_eq!(answer(&out), Answer::Client(ClientError::DeadlineExceeded));
    assert!(
        matches!(out[0], Output::Metric(Metric::QueueWait(_))),
        "{out:?}"
    );
    assert!(x.is_done() && !x.holds_gate());
}

#[test]
fn c_grpc_2_a_malformed_grpc_timeout_is_internal_and_reaches_no_backend() {
    let mut f = Fixture::new(TWO, StorageKind::Local);
    for bad in ["10", "1.5S", "123456789m", "-1S", "1s"] {
        let req = Req::get("/x")
            .header("content-type", "application/grpc")
            .header("grpc-timeout", bad);
        let (x, out) = f.start(&req, T0);
        assert!(!out.iter().any(|o| matches!(o, Output::Send(_))), "{bad}");
        let a = answer(&out);
        assert_eq!(
            a,
            Answer::Client(ClientError::MalformedGrpcTimeout),
            "{bad}"
        );
        assert_eq!(grpc_status_of(&x, &a).as_deref(), Some("13"), "{bad}");
        assert_eq!(record(&out).reason, Some("malformed_grpc_timeout"));
    }
    // Not a gRPC call: its grpc-timeout means nothing to weir and is passed on as it is.
    let req = Req::get("/x").header("grpc-timeout", "1m");
    let (x, out) = f.start(&req, T0);
    send(&out);
    assert_eq!(x.grpc_deadline(), None);
    assert_eq!(x.upstream_grpc_timeout(T0), None);
    assert_eq!(x.poll_timeout(), Some(at(5_000)));
}

const PUSHED: &str = "
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
  - id: c
    url: http://10.0.0.3:80
health_check:
  retry_after_max: 10s
";

#[test]
fn c_retry_11_a_503_with_retry_after_pushes_its_backend_back_and_is_retried_elsewhere() {
    let mut h = http::HeaderMap::new();
    h.insert("retry-after", http::HeaderValue::from_static("60"));
    let head = Input::response_head(503, &h, false, Duration::ZERO);
    assert_eq!(
        head,
        Input::PushbackHead {
            status: 503,
            after: Duration::from_secs(60)
        }
    );
    let mut f = Fixture::new(PUSHED, StorageKind::Local);
    let (mut x, out) = f.start(&Req::get("/x"), T0);
    let first = send(&out);
    let out = f.feed(&mut x, head, at(10));
    let ejection = out
        .iter()
        .find_map(|o| match o {
            Output::Outliers(e) => Some(e[0]),
            _ => None,
        })
        .unwrap_or_else(|| panic!("an ejection in {out:?}"));
    assert_eq!(ejection.backend, first.backend);
    assert_eq!(
        ejection.change,
        crate::outlier::OutlierChange::Ejected {
            reason: crate::outlier::EjectReason::RetryAfter,
            duration: Duration::from_secs(10),
        },
        "capped at retry_after_max"
    );
    let retry = send(&out);
    assert!(retry.retry && retry.backend != first.backend);
    f.feed(&mut x, Input::ResponseHead { status: 200 }, at(20));
    f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(30));
    // No request goes to it for the next 10 s, and then one does.
    let mut sent_to = Vec::new();
    for t in [
        100, 5_000, 9_999, 10_010, 10_020, 10_030, 10_040, 10_050, 10_060,
    ] {
        let (mut x, out) = f.start(&Req::get("/x"), at(t));
        sent_to.push((t, send(&out).backend));
        f.feed(&mut x, Input::ResponseHead { status: 200 }, at(t));
        f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(t));
    }
    assert!(
        sent_to[..3].iter().all(|&(_, b)| b != first.backend),
        "{sent_to:?}"
    );
    assert!(
        sent_to[3..].iter().any(|&(_, b)| b == first.backend),
        "{sent_to:?}"
    );
}

#[test]
fn c_retry_11_a_pool_of_one_passes_the_503_on() {
    let one = "
backends:
  - id: a
    url: http://10.0.0.1:80
";
    let mut h = http::HeaderMap::new();
    h.insert("retry-after", http::HeaderValue::from_static("2"));
    let mut f = Fixture::new(one, StorageKind::Local);
    let (mut x, _) = f.start(&Req::get("/x"), T0);
    let out = f.feed(
        &mut x,
        Input::response_head(503, &h, false, Duration::ZERO),
        at(10),
    );
    assert!(
        !out.iter().any(|o| matches!(o, Output::Outliers(_))),
        "{out:?}"
    );
    let delivered = out.iter().find_map(|o| match o {
        Output::Deliver(d) => Some(d.deliver.status),
        _ => None,
    });
    assert_eq!(delivered, Some(503));
}

#[test]
fn c_grpc_2_the_record_says_where_the_grpc_status_comes_from() {
    use crate::grpc::StatusSource;
    let mut f = Fixture::new(TWO, StorageKind::Local);
    // A delivered response to a gRPC call: the backend's grpc-status, read by the adapter.
    let (mut x, _) = f.start(&grpc_call("5S"), T0);
    let out = f.feed(&mut x, Input::ResponseHead { status: 200 }, at(1));
    assert_eq!(record(&out).grpc_status, StatusSource::Response);
    let _ = f.feed(&mut x, Input::BodyEnd(BodyEnd::Complete), at(2));
    // A gRPC client that leaves before a head: CANCELLED.
    let (mut x, _) = f.start(&grpc_call("5S"), T0);
    let out = f.feed(&mut x, Input::ClientGone, at(1));
    assert_eq!(record(&out).grpc_status, StatusSource::Known(1));
    // weir's own answer: its code (a full gate: UNAVAILABLE).
    let (_held, _) = f.start(&Req::get("/x"), T0);
    let mut full = f.services.gate().enter(T0);
    while !matches!(full, crate::admission::Entry::Rejected(_)) {
        full = f.services.gate().enter(T0);
    }
    let (_, out) = f.start(&grpc_call("5S"), T0);
    assert_eq!(record(&out).grpc_status, StatusSource::Known(14));
    // Not gRPC: none.
    let (_, out) = f.start(&Req::get("/x"), T0);
    assert_eq!(record(&out).grpc_status, StatusSource::NotGrpc);
}

#[test]
fn c_rate_8_dry_run_sends_an_over_limit_request_on_counted_and_marked() {
    let yaml = LIMITED
        .replace("FAILURE", "local-fallback")
        .replace("  capacity: 1\n", "  capacity: 1\n  dry_run: true\n");
    let mut f = Fixture::new(&yaml, StorageKind::Local);
    let decisions = |out: &[Output]| -> Vec<crate::rate::DecisionResult> {
        out.iter()
            .filter_map(|o| match o {
                Output::Metric(Metric::RateDecision(r)) => Some(*r),
                _ => None,
            })
            .collect()
    };
    let (_, out) = f.start(&Req::get("/x"), T0);
    assert_eq!(decisions(&out), [crate::rate::DecisionResult::Allowed]);
    // The bucket is empty: enforced, this would be a 429.
    let (mut y, out) = f.start(&Req::get("/x"), at(1));
    assert_eq!(
        decisions(&out),
        [crate::rate::DecisionResult::DryRunLimited]
    );
    assert!(protections(&out).is_empty(), "{out:?}");
    send(&out);
    let rate = y.rate_outcome().expect("let through");
    assert!(rate.is_allowed() && rate.remaining == 0);
    let names: Vec<_> = y.response_headers(None, 200).map(|(n, _)| n).collect();
    assert!(!names.contains(&"retry-after"), "{names:?}");
    assert!(names.contains(&"ratelimit"), "{names:?}");
    let mut out = f.feed(&mut y, Input::ResponseHead { status: 200 }, at(2));
    out.extend(f.feed(&mut y, Input::BodyEnd(BodyEnd::Complete), at(3)));
    let r = record(&out);
    assert_eq!(r.reason, Some("dry_run_limited"));
    assert!(r.log, "always logged");
}
