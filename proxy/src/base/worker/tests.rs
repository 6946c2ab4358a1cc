use super::*;
use weir_core::Rng as _;

#[test]
fn seeds_differ_between_threads_and_calls() {
    let a = entropy_seed();
    let b = std::thread::spawn(entropy_seed).join().unwrap_or(a);
    assert_ne!(a, b);
    let x = with_rng(|r| r.next_u64());
    let y = with_rng(|r| r.next_u64());
    assert_ne!(x, y);
}
