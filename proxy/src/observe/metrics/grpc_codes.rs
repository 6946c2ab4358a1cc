//! The request counter's gRPC series: `load_balancer_http_requests_total{listener, code,
//! grpc_status}` for gRPC calls whose status is known (C-GRPC-2's observability). Lock-free
//! like every request-path metric: a fixed table of atomics for the HTTP statuses a gRPC call
//! is recorded with (`200` from a backend; weir's own answers keep their outcome status,
//! C-GRPC-3) × the 17 gRPC codes. A gRPC status under any other HTTP status (a backend that
//! answered a gRPC call with a `404` and a `grpc-status`) is counted in the plain series, as a
//! request without one is: the label stays bounded and the table small (1.6 KiB).

use std::sync::atomic::{AtomicU64, Ordering};

/// The HTTP statuses that have gRPC series.
const STATUSES: [u16; 13] = [
    200, 400, 405, 408, 413, 414, 429, 431, 499, 502, 503, 504, 500,
];
/// `0..=16`.
const CODES: usize = weir_core::grpc::MAX_CODE as usize + 1;

/// Counts per (HTTP status, gRPC code).
#[derive(Debug)]
pub(super) struct GrpcCodes {
    counts: [[AtomicU64; CODES]; STATUSES.len()],
}

impl GrpcCodes {
    pub(super) fn new() -> GrpcCodes {
        GrpcCodes {
            counts: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// Count one request of `status` with gRPC status `code`: `false` when the status has no
    /// gRPC series (the caller counts it in the plain one).
    pub(super) fn add(&self, status: u16, code: u8) -> bool {
        let Some(row) = STATUSES.iter().position(|s| *s == status) else {
            return false;
        };
        let code = usize::from(code.min(weir_core::grpc::MAX_CODE));
        self.counts[row][code].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Every series counted so far: (HTTP status, gRPC code, count), counts above zero only.
    pub(super) fn series(&self) -> impl Iterator<Item = (u16, usize, u64)> + '_ {
        STATUSES.iter().zip(&self.counts).flat_map(|(status, row)| {
            row.iter()
                .enumerate()
                .map(move |(code, c)| (*status, code, c.load(Ordering::Relaxed)))
                .filter(|(_, _, n)| *n > 0)
        })
    }
}
