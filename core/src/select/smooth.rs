//! nginx's smooth weighted round-robin sequence, computed once per weight set: the weighted
//! policy walks it over all backends, the rotation over the available ones.

/// Weight-proportional random draws offered after the sequence's own entry.
pub const FALLBACK_DRAWS: usize = 4;

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// nginx's smooth weighted round-robin sequence for `weights` (each ≥ 1), one period long:
/// `sum / gcd` entries. Backends of equal weight form one queue, served in index order; each
/// step compares the queue heads' nginx `current` values, `t × w − total × picks`, ties to the
/// lowest index, which is exactly nginx's choice among all backends.
pub(super) fn smooth_sequence(weights: &[u32]) -> Vec<u32> {
    let g = weights.iter().copied().fold(0, gcd).max(1);
    struct Queue {
        weight: i64,
        members: Vec<u32>,
        picks: usize,
    }
    let mut queues: Vec<Queue> = Vec::new();
    for (i, &w) in weights.iter().enumerate() {
        let w = i64::from(w / g);
        // Indices come from a slice of backends the pool caps far below u32::MAX.
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        match queues.iter_mut().find(|q| q.weight == w) {
            Some(q) => q.members.push(i),
            None => queues.push(Queue {
                weight: w,
                members: vec![i],
                picks: 0,
            }),
        }
    }
    let total: i64 = weights.iter().map(|&w| i64::from(w / g)).sum();
    let len = usize::try_from(total).unwrap_or(0);
    let mut out = Vec::with_capacity(len);
    for t in 1..=total {
        let mut best: Option<(i64, u32, usize)> = None;
        for (qi, q) in queues.iter().enumerate() {
            let head = q.members[q.picks % q.members.len()];
            let rounds = (q.picks / q.members.len()) as i64;
            let current = t * q.weight - total * rounds;
            let better = match best {
                None => true,
                Some((c, i, _)) => current > c || (current == c && head < i),
            };
            if better {
                best = Some((current, head, qi));
            }
        }
        if let Some((_, head, qi)) = best {
            out.push(head);
            queues[qi].picks += 1;
        }
    }
    out
}
