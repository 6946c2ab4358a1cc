//! weir-wasm: the console's demo (issue 15; frontend/README.md). The real weir-core and
//! weir-sim's virtual backends ([`world::World`]), compiled to `wasm32-unknown-unknown` and
//! exported to the page with wasm-bindgen; the page's clock advances the world's virtual time.
//! Everything the demo shows (selection, breaker, slow start, retries and their budget, the gate,
//! the rate limiter, the management API's answers) is decided by weir-core itself.

pub mod world;

use core::time::Duration;

use wasm_bindgen::prelude::wasm_bindgen;
use weir_core::Instant;

/// The demo instance, as the page sees it.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Demo {
    world: world::World,
}

#[wasm_bindgen]
impl Demo {
    /// A new instance; `seed` decides every draw (the same seed replays the same run).
    ///
    /// # Panics
    /// If the embedded configuration were invalid (a bug caught by the host tests).
    #[wasm_bindgen(constructor)]
    #[must_use]
    pub fn new(_backends: u32, seed: u64) -> Demo {
        match world::World::new(seed) {
            Ok(world) => Demo { world },
            Err(e) => panic!("the demo's configuration is invalid: {e}"),
        }
    }

    /// Run the world up to `ms` milliseconds of page time.
    pub fn advance(&mut self, ms: f64) {
        let ns = (ms.max(0.0) * 1e6) as u64;
        self.world.advance(Instant::ZERO + Duration::from_nanos(ns));
    }

    /// The status document (JSON), as `GET /api/dashboard/status` answers.
    #[must_use]
    pub fn status(&self) -> String {
        self.world.status()
    }

    /// Start one request; its id comes back with its result from [`Demo::take_log`].
    pub fn request(&mut self) -> u32 {
        self.world.start_request(false) as u32
    }

    /// The requests finished since the last call, as JSON.
    pub fn take_log(&mut self) -> String {
        let list: Vec<serde_json::Value> = self
            .world
            .take_finished()
            .into_iter()
            .map(|f| {
                serde_json::json!({
                    "id": f.id,
                    "steady": f.steady,
                    "status": f.status,
                    "backend": f.backend,
                    "attempts": f.attempts.len(),
                    "attempt_list": f.attempts.iter().map(|(b, o)| serde_json::json!({"backend": b, "outcome": o})).collect::<Vec<_>>(),
                    "request_id": f.request_id,
                    "duration_ms": f.duration_ms,
                })
            })
            .collect();
        serde_json::Value::Array(list).to_string()
    }

    /// One management call (`{"status": n, "body": "…"}`), through weir-core's `mgmt::handle`.
    pub fn management(&mut self, method: &str, path: &str, body: &str) -> String {
        let (status, body) = self.world.management(method, path, body);
        serde_json::json!({"status": status, "body": body}).to_string()
    }

    /// Virtual backend `index`'s behaviour (`up`, `slow`, `503`, `reset`, `down`) and latency.
    pub fn set_backend(&mut self, index: u32, mode: &str, latency_ms: f64) {
        self.world.set_backend(index as usize, mode, latency_ms);
    }

    /// Steady traffic at `rps` requests per second (0 stops it).
    pub fn set_steady(&mut self, rps: f64) {
        self.world.set_steady(rps);
    }
}
