//! A DNS server for the C-DISC cases: UDP on `127.0.0.1:0`, answering A questions from a table
//! the case changes at run time (a set of addresses, SERVFAIL, NXDOMAIN). AAAA questions get
//! no records for a name with addresses. Unknown names are NXDOMAIN.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::net::UdpSocket;
use tokio::task::AbortHandle;

/// What the server says about a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zone {
    /// These A records (empty: the name exists without records).
    Records(Vec<Ipv4Addr>),
    /// SERVFAIL.
    ServFail,
    /// NXDOMAIN.
    NxDomain,
}

#[derive(Debug, Default)]
struct State {
    zones: Mutex<HashMap<String, Zone>>,
    queries: AtomicUsize,
}

/// The running server; stops when dropped.
#[derive(Debug)]
pub struct DnsServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: AbortHandle,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl DnsServer {
    /// Starts a server with no names.
    pub async fn start() -> DnsServer {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind DNS");
        let addr = socket.local_addr().expect("DNS address");
        let state = Arc::new(State::default());
        let s = Arc::clone(&state);
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                    continue;
                };
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                s.queries.fetch_add(1, Ordering::Relaxed);
                let reply = answer(&s, &q);
                if let Ok(bytes) = reply.to_vec() {
                    let _ = socket.send_to(&bytes, peer).await;
                }
            }
        })
        .abort_handle();
        DnsServer { addr, state, task }
    }

    /// Its address (`server.resolver`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, `name` is `zone`.
    pub fn set(&self, name: &str, zone: Zone) {
        self.state
            .zones
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key(name), zone);
    }

    /// Questions received so far.
    pub fn queries(&self) -> usize {
        self.state.queries.load(Ordering::Relaxed)
    }
}

fn answer(s: &State, q: &Message) -> Message {
    let mut m = Message::response(q.metadata.id, OpCode::Query);
    m.metadata.recursion_desired = q.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.add_queries(q.queries.iter().cloned());
    let Some(question) = q.queries.first() else {
        m.metadata.response_code = ResponseCode::FormErr;
        return m;
    };
    let zone = s
        .zones
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key(&question.name().to_ascii()))
        .cloned()
        .unwrap_or(Zone::NxDomain);
    match zone {
        Zone::ServFail => m.metadata.response_code = ResponseCode::ServFail,
        Zone::NxDomain => m.metadata.response_code = ResponseCode::NXDomain,
        Zone::Records(addrs) => {
            if question.query_type() == RecordType::A {
                for a in addrs {
                    m.add_answer(Record::from_rdata(
                        question.name().clone(),
                        1,
                        RData::A(A(a)),
                    ));
                }
            }
        }
    }
    m
}
