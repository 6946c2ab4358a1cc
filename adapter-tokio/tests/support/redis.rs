//! A `redis-server` of a test's own (never the shared one on 6379), killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The running server.
pub struct OwnRedis(Child);

impl OwnRedis {
    /// Start `redis-server` on 127.0.0.1:`port`, without persistence; wait until it accepts.
    pub fn start(port: u16) -> OwnRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        OwnRedis(child)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
