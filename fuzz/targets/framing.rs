//! `RequestFraming` (C-PATH-12): any byte stream, fed whole and split at points taken from the
//! input, gives the same verdicts in the same order, and never panics.

use weir_core::framing::{RequestFraming, Verdict};

fn verdicts(pieces: &[&[u8]]) -> Vec<Verdict> {
    let mut f = RequestFraming::new();
    for p in pieces {
        f.handle_bytes(p);
    }
    std::iter::from_fn(|| f.poll_verdict()).collect()
}

/// The first byte says how many split points follow (at most 8), each one byte (a position in
/// the stream modulo its length + 1); the rest is the client's byte stream.
pub fn run(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 9).min(rest.len());
    let (cuts, stream) = rest.split_at(n);
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|&c| usize::from(c) % (stream.len() + 1))
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for i in at {
        pieces.push(&stream[start..i]);
        start = i;
    }
    pieces.push(&stream[start..]);
    assert_eq!(
        verdicts(&pieces),
        verdicts(&[stream]),
        "verdicts depend on how the reads split the stream"
    );
}
