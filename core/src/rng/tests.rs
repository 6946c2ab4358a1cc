use super::*;

#[test]
fn same_seed_same_stream() {
    let mut a = WyRand::new(42);
    let mut b = WyRand::new(42);
    for _ in 0..100 {
        assert_eq!(a.next_u64(), b.next_u64());
    }
    assert_ne!(WyRand::new(1).next_u64(), WyRand::new(2).next_u64());
}

#[test]
fn below_is_in_range_and_covers_it() {
    let mut r = WyRand::new(7);
    let mut seen = [0u32; 7];
    for _ in 0..7000 {
        let v = r.below(7);
        assert!(v < 7);
        seen[v as usize] += 1;
    }
    assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
    assert_eq!(r.below(0), 0);
    assert_eq!(r.below(1), 0);
}

#[test]
fn chance_permille_edges() {
    let mut r = WyRand::new(9);
    assert!((0..1000).all(|_| !r.chance_permille(0)));
    assert!((0..1000).all(|_| r.chance_permille(1000)));
    let hits = (0..10_000).filter(|_| r.chance_permille(250)).count();
    assert!((2200..2800).contains(&hits), "{hits}");
}
