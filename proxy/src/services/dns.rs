//! The DNS client of DNS pools and of backend URLs with a host name (C-DISC-1, C-DISC-2): A and
//! AAAA questions to `server.resolver`'s servers (or the system's resolv.conf), over UDP with a
//! retry over TCP when the answer is truncated, as nginx's `resolver` does.
//!
//! The messages are hickory-proto's (the DNS wire format of the hickory project). Its networking
//! (hickory-net, behind hickory-resolver) needs a runtime provider with asynchronous UDP, which
//! weir's runtime seam (`base::rt`) does not have and the smol binary must not get from tokio;
//! so the sockets here are the standard library's, with deadlines, on the blocking pool
//! (`rt::unblock`). A resolution is two small exchanges every few seconds per name: a blocking
//! thread costs nothing that matters there, and it works the same under both runtimes.
//!
//! What to do with the answer is core's (`weir_core::discovery`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use weir_core::discovery::Answer;

use crate::base::rt::{self, Rt};

/// The longest one server is waited for, per question (UDP, then TCP when truncated).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the system's servers are listed.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The DNS servers asked, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    servers: Vec<SocketAddr>,
    timeout: Duration,
}

impl Resolver {
    /// The servers of `server.resolver`, or (empty) those of the system's resolv.conf, or
    /// (none there either) `127.0.0.1:53`, as the C library does.
    #[must_use]
    pub fn new(configured: &[SocketAddr]) -> Resolver {
        let servers = if configured.is_empty() {
            system_servers()
        } else {
            configured.to_vec()
        };
        Resolver {
            servers,
            timeout: QUERY_TIMEOUT,
        }
    }

    /// The servers asked, in order.
    #[must_use]
    pub fn servers(&self) -> &[SocketAddr] {
        &self.servers
    }

    /// Every A and AAAA address of `name`, on the blocking pool.
    pub async fn lookup(&self, rt: Rt, name: &str) -> Answer {
        if let Ok(ip) = name.parse::<IpAddr>() {
            return Answer::Addresses(vec![ip]);
        }
        let this = self.clone();
        let name = name.to_owned();
        rt::unblock(rt, move || this.lookup_blocking(&name))
            .await
            .unwrap_or(Answer::Error)
    }

    /// [`Resolver::lookup`] on the calling thread (it blocks up to `timeout` per server and
    /// question).
    #[must_use]
    pub fn lookup_blocking(&self, name: &str) -> Answer {
        let Ok(mut fqdn) = Name::from_ascii(name) else {
            return Answer::Error;
        };
        fqdn.set_fqdn(true);
        let a = self.ask(&fqdn, RecordType::A);
        let aaaa = self.ask(&fqdn, RecordType::AAAA);
        combine(a, aaaa)
    }

    /// One question to each server in turn until one answers (a SERVFAIL or a timeout moves on
    /// to the next server; NXDOMAIN and answers are final).
    fn ask(&self, name: &Name, kind: RecordType) -> Answer {
        let mut worst = Answer::Error;
        for server in &self.servers {
            let answer = match exchange(*server, name, kind, self.timeout) {
                Ok(m) => read_answer(&m, kind),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => Answer::Timeout,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Answer::Timeout,
                Err(_) => Answer::Error,
            };
            match answer {
                Answer::Addresses(_) | Answer::NxDomain => return answer,
                other => worst = rank(worst, other),
            }
        }
        worst
    }
}

/// Of two failures, the one to report: a server's own word (SERVFAIL) over a timeout over
/// anything else.
fn rank(a: Answer, b: Answer) -> Answer {
    let score = |x: &Answer| match x {
        Answer::ServFail => 2,
        Answer::Timeout => 1,
        _ => 0,
    };
    if score(&b) > score(&a) { b } else { a }
}

/// The A and AAAA answers as one: every address of either; else no records when both said the
/// name exists; else NXDOMAIN when either said so; else the A question's failure.
fn combine(a: Answer, aaaa: Answer) -> Answer {
    match (a, aaaa) {
        (Answer::Addresses(mut x), Answer::Addresses(y)) => {
            x.extend(y);
            Answer::Addresses(x)
        }
        (Answer::Addresses(x), _) | (_, Answer::Addresses(x)) if !x.is_empty() => {
            Answer::Addresses(x)
        }
        (Answer::Addresses(_), _) | (_, Answer::Addresses(_)) => Answer::Addresses(Vec::new()),
        (Answer::NxDomain, _) | (_, Answer::NxDomain) => Answer::NxDomain,
        (a, _) => a,
    }
}

/// What a response says about `kind` records.
fn read_answer(m: &Message, kind: RecordType) -> Answer {
    match m.metadata.response_code {
        ResponseCode::NoError => Answer::Addresses(
            m.answers
                .iter()
                .filter_map(|r| match (&r.data, kind) {
                    (RData::A(a), RecordType::A) => Some(IpAddr::V4(a.0)),
                    (RData::AAAA(a), RecordType::AAAA) => Some(IpAddr::V6(a.0)),
                    _ => None,
                })
                .collect(),
        ),
        ResponseCode::NXDomain => Answer::NxDomain,
        _ => Answer::ServFail,
    }
}

/// One question to `server`: over UDP, and again over TCP when the answer is truncated.
fn exchange(
    server: SocketAddr,
    name: &Name,
    kind: RecordType,
    timeout: Duration,
) -> io::Result<Message> {
    let id = fastrand::u16(..);
    let mut q = Message::new(id, MessageType::Query, OpCode::Query);
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(name.clone(), kind));
    let bytes = q.to_vec().map_err(io::Error::other)?;
    let deadline = Instant::now() + timeout;
    let m = udp(server, &bytes, id, name, kind, deadline)?;
    if !m.metadata.truncation {
        return Ok(m);
    }
    tcp(server, &bytes, id, deadline)
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(io::ErrorKind::TimedOut.into())
    } else {
        Ok(d)
    }
}

fn udp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &Name,
    kind: RecordType,
    deadline: Instant,
) -> io::Result<Message> {
    let local: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)?;
    // Connected: datagrams from any other address are dropped by the kernel.
    socket.connect(server)?;
    socket.send(query)?;
    let mut buf = [0u8; 4096];
    loop {
        socket.set_read_timeout(Some(left(deadline)?))?;
        let n = socket.recv(&mut buf)?;
        let Ok(m) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        // Only the answer to this question (a late answer to an earlier one is skipped).
        let same = m.metadata.id == id
            && m.metadata.message_type == MessageType::Response
            && m.queries
                .first()
                .is_some_and(|q| q.name() == name && q.query_type() == kind);
        if same {
            return Ok(m);
        }
    }
}

fn tcp(server: SocketAddr, query: &[u8], id: u16, deadline: Instant) -> io::Result<Message> {
    let mut stream = TcpStream::connect_timeout(&server, left(deadline)?)?;
    stream.set_write_timeout(Some(left(deadline)?))?;
    let len = u16::try_from(query.len()).map_err(io::Error::other)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed)?;
    stream.set_read_timeout(Some(left(deadline)?))?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.set_read_timeout(Some(left(deadline)?))?;
    stream.read_exact(&mut buf)?;
    let m = Message::from_vec(&buf).map_err(io::Error::other)?;
    if m.metadata.id != id {
        return Err(io::Error::other("DNS answer to another question"));
    }
    Ok(m)
}

/// The `nameserver` lines of the system's resolv.conf (port 53), or `127.0.0.1:53`.
fn system_servers() -> Vec<SocketAddr> {
    let servers: Vec<SocketAddr> = std::fs::read(RESOLV_CONF)
        .ok()
        .map(|bytes| resolv_conf::Config::parse_with_errors(&bytes).0)
        .map(|c| {
            c.nameservers
                .iter()
                .map(|ip| SocketAddr::new(IpAddr::from(ip), 53))
                .collect()
        })
        .unwrap_or_default();
    if servers.is_empty() {
        vec![SocketAddr::from(([127, 0, 0, 1], 53))]
    } else {
        servers
    }
}

/// The addresses of backend URLs' host names (C-DISC-2), kept by the control plane's refresh
/// (`control::discovery::refresh_hosts`, every `health_check.interval`), each with a generation
/// that changes with the set. Process-wide: a name has the same addresses for every pool and
/// worker. A name not in the table is resolved by the runtime at each new connection, as before.
static HOSTS: std::sync::LazyLock<std::sync::RwLock<HostTable>> =
    std::sync::LazyLock::new(Default::default);

/// Host name → (generation, addresses).
type HostTable = HashMap<String, (u64, Vec<IpAddr>)>;

/// The generation of `host`'s addresses (0 for a name never resolved here).
#[must_use]
pub fn host_generation(host: &str) -> u64 {
    HOSTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(host)
        .map_or(0, |(g, _)| *g)
}

/// The current addresses of `host`, if it was resolved here.
#[must_use]
pub fn host_addresses(host: &str) -> Option<Vec<IpAddr>> {
    HOSTS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(host)
        .map(|(_, a)| a.clone())
}

/// `host` now has `addresses` (not empty: a failed or empty answer keeps the last good set).
/// Returns whether the set changed (its generation then moved on, so pooled connections made
/// before are closed at their next checkout).
pub fn set_host_addresses(host: &str, mut addresses: Vec<IpAddr>) -> bool {
    if addresses.is_empty() {
        return false;
    }
    addresses.sort_unstable();
    addresses.dedup();
    let mut hosts = HOSTS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    match hosts.get_mut(host) {
        Some((_, a)) if *a == addresses => false,
        Some(entry) => {
            *entry = (
                GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
                addresses,
            );
            true
        }
        None => {
            let g = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            hosts.insert(host.to_owned(), (g, addresses));
            // The first answer is not a change: connections made before it went to the
            // runtime's resolution, which the answer may well agree with.
            false
        }
    }
}

/// TCP connect to `host:port` (C-DISC-2): to the addresses this module keeps for `host` when it
/// has them, else as `rt::dial` does (an address literal, or the runtime's resolution).
///
/// # Errors
/// No address accepted the connection.
pub async fn dial(rt: Rt, host: &str, port: u16) -> io::Result<Box<dyn rt::TcpConn>> {
    let Some(addresses) = host_addresses(host) else {
        return rt::dial(rt, host, port).await;
    };
    let mut last = None;
    for ip in addresses {
        match rt.connect(SocketAddr::new(ip, port)).await {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address for host")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn c_disc_1_a_and_aaaa_combine() {
        let six = IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
        assert_eq!(
            combine(Answer::Addresses(vec![v4(1)]), Answer::Addresses(vec![six])),
            Answer::Addresses(vec![v4(1), six])
        );
        assert_eq!(
            combine(Answer::Addresses(vec![v4(1)]), Answer::ServFail),
            Answer::Addresses(vec![v4(1)])
        );
        assert_eq!(
            combine(Answer::Addresses(vec![]), Answer::Addresses(vec![])),
            Answer::Addresses(vec![])
        );
        assert_eq!(
            combine(Answer::NxDomain, Answer::NxDomain),
            Answer::NxDomain
        );
        assert_eq!(combine(Answer::ServFail, Answer::Timeout), Answer::ServFail);
        assert_eq!(rank(Answer::Timeout, Answer::ServFail), Answer::ServFail);
        assert_eq!(rank(Answer::Error, Answer::Timeout), Answer::Timeout);
    }

    /// A server on the loopback that answers one A question with two records; the client reads
    /// them, and a truncated answer is asked again over TCP.
    #[test]
    fn c_disc_1_udp_answer_and_tcp_fallback() {
        use hickory_proto::rr::Record;
        use hickory_proto::rr::rdata::A;
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = udp.local_addr().expect("addr");
        let tcp = std::net::TcpListener::bind(addr).expect("bind tcp");
        let answer = |q: &Message| {
            let mut m = Message::response(q.metadata.id, OpCode::Query);
            m.add_queries(q.queries.iter().cloned());
            if q.queries[0].query_type() == RecordType::A {
                for n in [1, 2] {
                    m.add_answer(Record::from_rdata(
                        q.queries[0].name().clone(),
                        5,
                        RData::A(A(std::net::Ipv4Addr::new(10, 0, 0, n))),
                    ));
                }
            }
            m
        };
        let server = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            // A over UDP: truncated; then AAAA over UDP: empty.
            for i in 0..2 {
                let (n, peer) = udp.recv_from(&mut buf).expect("recv");
                let q = Message::from_vec(&buf[..n]).expect("query");
                let mut m = answer(&q);
                if i == 0 {
                    m.answers.clear();
                    m.metadata.truncation = true;
                }
                udp.send_to(&m.to_vec().expect("encode"), peer)
                    .expect("send");
                if i == 0 {
                    let (mut s, _) = tcp.accept().expect("accept");
                    let mut len = [0u8; 2];
                    s.read_exact(&mut len).expect("len");
                    let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    s.read_exact(&mut q).expect("query");
                    let q = Message::from_vec(&q).expect("query");
                    let bytes = answer(&q).to_vec().expect("encode");
                    let len = u16::try_from(bytes.len()).expect("len").to_be_bytes();
                    s.write_all(&len).expect("write");
                    s.write_all(&bytes).expect("write");
                }
            }
        });
        let r = Resolver::new(&[addr]);
        let got = r.lookup_blocking("api.test");
        server.join().expect("server");
        assert_eq!(got, Answer::Addresses(vec![v4(1), v4(2)]));
    }

    #[test]
    fn c_disc_1_no_server_is_a_timeout_or_an_error() {
        // A bound socket that never answers.
        let quiet = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let mut r = Resolver::new(&[quiet.local_addr().expect("addr")]);
        r.timeout = Duration::from_millis(50);
        assert_eq!(r.lookup_blocking("api.test"), Answer::Timeout);
    }
}
