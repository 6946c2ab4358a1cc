//! Simulated backends and the fault library.
//!
//! A simulated backend is a server, not a core `Backend`: it answers attempts and probes the way
//! its current [`Mode`] says, with latencies drawn from the world's backend RNG. Faults are
//! scheduled changes of mode ([`Fault`]); a crash also breaks the connections it holds.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use weir_core::rng::Rng;

/// How a backend treats real traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Serves normally (a few `500`/`404` among the `200`s: successes for the breaker).
    Up,
    /// Refuses connections (crashed or stopped): attempts fail to connect, probes are refused.
    Down,
    /// Answers `503` to this share of requests (permille), fast; probes still pass.
    Burst503(u32),
    /// Breaks this share of connections (permille) before the response head; probes still pass.
    TrafficFails(u32),
    /// Answers `500` to this share of requests (permille): an answer to retries and the
    /// breaker, a failure to outlier detection (C-OUT-1); probes still pass.
    Status500(u32),
    /// Sends `503` headers and then never finishes the body (C-RETRY-6); probes pass.
    HeadThenHang,
    /// Sends headers only after the per-try timeout (C-RETRY-5); probes time out too.
    SlowHeaders,
    /// Answers `503` with `Retry-After` to this share of requests (permille), asking for
    /// `secs` seconds as delta-seconds or, when `date`, as an HTTP-date (C-RETRY-11); probes
    /// still pass.
    PushBack {
        /// Share of requests answered so, permille.
        permille: u32,
        /// The delay asked for.
        secs: u64,
        /// Written as an HTTP-date rather than delta-seconds.
        date: bool,
    },
    /// An HTTP/2 backend resets this share of new streams (permille) with `REFUSED_STREAM`
    /// before processing them (RFC 9113 §8.7); probes still pass.
    RefuseStreams(u32),
}

impl Mode {
    /// A stable label for the trace.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Up => "up",
            Mode::Down => "down",
            Mode::Burst503(_) => "burst_503",
            Mode::TrafficFails(_) => "traffic_fails",
            Mode::Status500(_) => "status_500",
            Mode::HeadThenHang => "head_then_hang",
            Mode::SlowHeaders => "slow_headers",
            Mode::PushBack { .. } => "push_back",
            Mode::RefuseStreams(_) => "refuse_streams",
        }
    }
}

/// A scheduled change of a backend's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Crash: every open connection breaks now, new ones are refused until `Recover`.
    Crash,
    /// Refuse new connections; open ones finish normally.
    Refuse,
    /// Back to normal service (ends every mode and the probe fault).
    Recover,
    /// Switch the traffic mode (probes follow the mode, see [`SimBackend::probe`]).
    Mode(Mode),
    /// The health endpoint fails (`true`) or answers again (`false`) while traffic is unchanged.
    ProbesFail(bool),
    /// An HTTP/2 backend sends `GOAWAY` on every connection, each with a `last_stream_id` at
    /// or above every stream it answered: streams above it were not processed (refused), those
    /// at or below finish; the connection takes no new stream and closes when empty.
    GoAway,
    /// An HTTP/2 backend's busiest connection is lost with every stream on it (a reset, a
    /// network failure): those streams fail as transport errors.
    LoseConn,
}

impl Fault {
    /// A stable label for the trace.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::Refuse => "refuse",
            Fault::Recover => "recover",
            Fault::Mode(m) => m.as_str(),
            Fault::ProbesFail(true) => "probes_fail",
            Fault::ProbesFail(false) => "probes_pass",
            Fault::GoAway => "goaway",
            Fault::LoseConn => "lose_conn",
        }
    }
}

/// A latency distribution: `base + uniform(0..spread)`, and with probability `tail_permille` an
/// extra `uniform(0..tail)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// The fastest answer.
    pub base: Duration,
    /// Uniform spread above the base.
    pub spread: Duration,
    /// Chance of a slow answer, in permille.
    pub tail_permille: u32,
    /// Extra delay of a slow answer, uniform up to this.
    pub tail: Duration,
}

impl Latency {
    /// `base..base+spread`, with a 1% tail of up to `4 × spread`.
    #[must_use]
    pub const fn new(base: Duration, spread: Duration) -> Latency {
        Latency {
            base,
            spread,
            tail_permille: 10,
            tail: Duration::from_nanos(spread.as_nanos() as u64 * 4),
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut dyn Rng) -> Duration {
        let mut d = self.base + uniform(rng, self.spread);
        if rng.chance_permille(self.tail_permille) {
            d += uniform(rng, self.tail);
        }
        d
    }
}

/// Uniform in `0..max` (zero for a zero max).
pub fn uniform(rng: &mut dyn Rng, max: Duration) -> Duration {
    let n = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.below(n))
}

/// What happens to one attempt, decided when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The connection is refused after `after`.
    Refused,
    /// The connection breaks before the response head.
    Broken,
    /// A response head with this status; then the body takes `body` (`None`: it never ends).
    Head {
        /// The status.
        status: u16,
        /// How long the body streams after the head; `None` for a body that hangs.
        body: Option<Duration>,
    },
    /// The HTTP/2 stream is reset with `REFUSED_STREAM` (or is above a `GOAWAY`'s
    /// `last_stream_id`): the backend processed none of it.
    RefusedStream,
    /// A `503` head with `Retry-After` asking for `secs` seconds (an HTTP-date when `date`);
    /// its body takes a millisecond.
    PushBack {
        /// The delay asked for.
        secs: u64,
        /// Written as an HTTP-date.
        date: bool,
    },
}

/// An attempt's fate and when it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// After this long.
    pub after: Duration,
    /// This happens.
    pub reply: Reply,
}

/// One simulated server.
#[derive(Debug, Clone)]
pub struct SimBackend {
    /// Its id (unique over the whole run, reloads included).
    pub id: String,
    /// Its url.
    pub url: String,
    /// Weight for `weighted_round_robin`.
    pub weight: u32,
    /// Its latency when healthy.
    pub latency: Latency,
    /// How it treats traffic now.
    pub mode: Mode,
    /// The health endpoint fails regardless of the mode.
    pub probes_fail: bool,
    /// Open connections: (request, attempt number), for a crash to break.
    pub conns: BTreeSet<(usize, u32)>,
    /// It speaks HTTP/2 (`protocol: h2c`): its connections and streams.
    pub h2: Option<H2Model>,
}

/// One HTTP/2 connection to a simulated backend.
#[derive(Debug, Clone)]
pub struct H2Conn {
    /// Unique per backend.
    pub id: u32,
    /// Open streams by stream id: (request, attempt).
    pub streams: BTreeMap<u32, (usize, u32)>,
    /// The next client stream id (odd, increasing).
    pub next_stream: u32,
    /// The `SETTINGS_MAX_CONCURRENT_STREAMS` weir knows: one until the backend's SETTINGS
    /// arrive (as weir-proxy assumes), then the backend's.
    pub known_max: u32,
    /// The `last_stream_id` of the backend's `GOAWAY`, once sent.
    pub goaway: Option<u32>,
}

/// The HTTP/2 side of a simulated backend.
#[derive(Debug, Clone)]
pub struct H2Model {
    /// The `SETTINGS_MAX_CONCURRENT_STREAMS` it advertises.
    pub max_streams: u32,
    /// Its connections, in the order they were opened.
    pub conns: Vec<H2Conn>,
    /// The next connection id.
    pub next_conn: u32,
    /// Attempts waiting for a stream (every connection full at `max_conns_per_host`), oldest
    /// first.
    pub waiters: VecDeque<(usize, u32)>,
}

impl H2Model {
    /// A backend advertising `max_streams`, with no connection yet.
    #[must_use]
    pub fn new(max_streams: u32) -> H2Model {
        H2Model {
            max_streams,
            conns: Vec::new(),
            next_conn: 0,
            waiters: VecDeque::new(),
        }
    }

    /// The connection with id `id`.
    pub fn conn_mut(&mut self, id: u32) -> Option<&mut H2Conn> {
        self.conns.iter_mut().find(|c| c.id == id)
    }
}

impl SimBackend {
    /// An up, healthy server.
    #[must_use]
    pub fn new(id: &str, latency: Latency) -> SimBackend {
        SimBackend {
            id: id.to_owned(),
            url: format!("http://{id}.sim:8080"),
            weight: 1,
            latency,
            mode: Mode::Up,
            probes_fail: false,
            conns: BTreeSet::new(),
            h2: None,
        }
    }

    /// Apply a fault. Returns whether open connections must break now (a crash).
    pub fn apply(&mut self, fault: Fault) -> bool {
        match fault {
            Fault::Crash => {
                self.mode = Mode::Down;
                true
            }
            Fault::Refuse => {
                self.mode = Mode::Down;
                false
            }
            Fault::Recover => {
                self.mode = Mode::Up;
                self.probes_fail = false;
                false
            }
            Fault::Mode(m) => {
                self.mode = m;
                false
            }
            Fault::ProbesFail(on) => {
                self.probes_fail = on;
                false
            }
            Fault::GoAway | Fault::LoseConn => false,
        }
    }

    /// How an attempt sent now will end. `per_try` is the per-try timeout (slow headers land
    /// beyond it).
    pub fn plan_attempt(&self, per_try: Duration, rng: &mut dyn Rng) -> Planned {
        let latency = self.latency.sample(rng);
        match self.mode {
            Mode::Down => Planned {
                after: Duration::from_micros(200) + uniform(rng, Duration::from_millis(2)),
                reply: Reply::Refused,
            },
            Mode::Burst503(p) if rng.chance_permille(p) => Planned {
                after: latency / 4,
                reply: Reply::Head {
                    status: 503,
                    body: Some(Duration::from_millis(1)),
                },
            },
            Mode::PushBack {
                permille,
                secs,
                date,
            } if rng.chance_permille(permille) => Planned {
                after: latency / 4,
                reply: Reply::PushBack { secs, date },
            },
            Mode::TrafficFails(p) if rng.chance_permille(p) => Planned {
                after: latency / 2,
                reply: Reply::Broken,
            },
            Mode::Status500(p) if rng.chance_permille(p) => Planned {
                after: latency / 2,
                reply: Reply::Head {
                    status: 500,
                    body: Some(Duration::from_millis(1)),
                },
            },
            Mode::HeadThenHang => Planned {
                after: latency,
                reply: Reply::Head {
                    status: 503,
                    body: None,
                },
            },
            Mode::SlowHeaders => Planned {
                after: per_try + Duration::from_millis(1) + uniform(rng, per_try),
                reply: Reply::Head {
                    status: 200,
                    body: Some(Duration::from_millis(5)),
                },
            },
            Mode::RefuseStreams(p) if self.h2.is_some() && rng.chance_permille(p) => Planned {
                after: Duration::from_micros(100) + uniform(rng, Duration::from_millis(1)),
                reply: Reply::RefusedStream,
            },
            Mode::Up
            | Mode::RefuseStreams(_)
            | Mode::Burst503(_)
            | Mode::TrafficFails(_)
            | Mode::Status500(_)
            | Mode::PushBack { .. } => {
                let roll = rng.below(1000);
                let status = match roll {
                    0..=9 => 500, // a success for retries and the breaker (C-RETRY-1)
                    10..=14 => 404,
                    _ => 200,
                };
                Planned {
                    after: latency,
                    reply: Reply::Head {
                        status,
                        body: Some(body_time(rng)),
                    },
                }
            }
        }
    }

    /// How a probe sent now ends: `Some((after, ok))`, or `None` when it never answers (the
    /// schedule times it out, C-HEALTH-6).
    pub fn probe(&self, rng: &mut dyn Rng) -> Option<(Duration, bool)> {
        let quick = Duration::from_micros(300) + uniform(rng, Duration::from_millis(3));
        if self.mode == Mode::Down {
            return Some((quick, false));
        }
        if self.probes_fail {
            return Some((quick, false));
        }
        match self.mode {
            Mode::SlowHeaders => None,
            _ => Some((
                quick + self.latency.base.min(Duration::from_millis(20)) / 2,
                true,
            )),
        }
    }
}

/// How long a delivered body streams: mostly short, sometimes a long download or stream.
fn body_time(rng: &mut dyn Rng) -> Duration {
    match rng.below(100) {
        0..=79 => Duration::from_millis(1) + uniform(rng, Duration::from_millis(20)),
        80..=97 => Duration::from_millis(20) + uniform(rng, Duration::from_millis(300)),
        _ => Duration::from_secs(1) + uniform(rng, Duration::from_secs(4)),
    }
}
