use super::*;
use weir_core::WyRand;

/// C-OBS-3: errors and mutations always; successes at the sample rate.
#[test]
fn c_obs_3_sampling() {
    let mut rng = WyRand::new(7);
    assert!(should_log(500, false, 0.0, &mut rng));
    assert!(should_log(404, false, 0.0, &mut rng));
    assert!(should_log(200, true, 0.0, &mut rng));
    assert!(!should_log(200, false, 0.0, &mut rng));
    assert!(should_log(200, false, 1.0, &mut rng));
    let hits = (0..100_000)
        .filter(|_| should_log(200, false, 0.01, &mut rng))
        .count();
    assert!((700..1300).contains(&hits), "{hits}");
    assert!(!sampled(f64::NAN, &mut rng));
}
