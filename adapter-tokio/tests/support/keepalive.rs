//! What the counting-allocator tests (`alloc.rs`, `idle_alloc.rs`) measure through: a
//! keep-alive backend on its own threads (outside the proxy's runtime) and an in-process weir,
//! one worker, in front of it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use weir_core::config::MapSecrets;
use weir_tokio::Options;

/// What the backend answers to every request.
pub const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\nhello";

/// Whether `buf` holds a whole head (the backend's requests carry no body).
pub fn has_head(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n")
}

/// A keep-alive backend answering every head with [`RESPONSE`], one thread per connection.
pub fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                let mut n = 0;
                loop {
                    match s.read(&mut buf[n..]) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => n += k,
                    }
                    if has_head(&buf[..n]) {
                        n = 0;
                        if s.write_all(RESPONSE).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// weir with one worker in front of [`backend`] (health checks hourly, so no probe runs during
/// a measurement), listening on a free port.
pub async fn weir_in_front_of_a_backend() -> weir_proxy::ProxyHandle {
    let backend = backend();
    let text = format!(
        "health_check:\n  interval: 3600s\nbackends:\n  - id: b1\n    url: http://{backend}\n"
    );
    let cfg = weir_core::config::load(&text, &MapSecrets::new()).expect("valid test config");
    weir_tokio::start(
        cfg,
        Options {
            public_bind: Some("127.0.0.1:0".parse().unwrap()),
            workers: Some(1),
            ..Options::default()
        },
    )
    .await
    .expect("proxy starts")
}
