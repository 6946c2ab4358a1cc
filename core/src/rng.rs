//! Injected randomness.
//!
//! Core draws every random number from an [`Rng`] the caller hands in: a seeded [`WyRand`] in the
//! simulator and in tests (so a run replays bit for bit from its seed), a per-thread one seeded
//! from OS entropy in the adapters. Core never touches a thread or OS RNG (`core/clippy.toml`).
//!
//! The generator is wyrand (Wang Yi; the one fastrand uses): one `u64` of state, passes
//! BigCrush and PractRand, and is a few instructions per draw. It is written out here, not taken
//! from a crate, so that its output for a seed can never change under a dependency bump.

/// A source of uniformly distributed 64-bit values.
pub trait Rng {
    /// The next uniformly distributed `u64`.
    fn next_u64(&mut self) -> u64;

    /// A uniform value in `0..n`; `0` when `n == 0`. Lemire's multiply-shift with rejection,
    /// so it has no modulo bias.
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// `true` with probability `permille / 1000` (clamped to 0..=1000).
    fn chance_permille(&mut self, permille: u32) -> bool {
        self.below(1000) < u64::from(permille.min(1000))
    }
}

impl<R: Rng + ?Sized> Rng for &mut R {
    fn next_u64(&mut self) -> u64 {
        (**self).next_u64()
    }
}

/// The wyrand generator: deterministic for a seed, fast, not cryptographic.
#[derive(Debug, Clone)]
pub struct WyRand {
    state: u64,
}

impl WyRand {
    /// A generator whose whole output is determined by `seed`.
    #[must_use]
    pub const fn new(seed: u64) -> WyRand {
        WyRand { state: seed }
    }

    /// A child generator for a sub-machine: its seed is drawn from this one, so one engine seed
    /// determines every sub-machine's stream (quinn's `rng_seed` discipline).
    #[must_use]
    pub fn fork(&mut self) -> WyRand {
        WyRand::new(self.next_u64())
    }
}

impl Rng for WyRand {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.state) * u128::from(self.state ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }
}

#[cfg(test)]
mod tests;
