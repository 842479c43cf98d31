//! Seeded, repeatable randomness for the fault and fuzz suites (issue 12): [`Rng`], a small
//! deterministic generator, and [`from_env`], a run's knob (seed, size) from the environment
//! with a default, so a failure that prints its seed repeats with `LINEAGE_..._SEED=<seed>`.

/// A small deterministic generator (xorshift64*): the same seed gives the same sequence.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }
}

/// The value of environment variable `name` parsed, or `default` when it is unset; a value
/// that does not parse panics with a line naming the variable (a test knob, not input data).
pub fn from_env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a valid value; unset it or fix it")),
        Err(_) => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_numbers_in_range() {
        let (mut a, mut b) = (Rng::new(12), Rng::new(12));
        let xs: Vec<usize> = (0..100).map(|_| a.below(7)).collect();
        let ys: Vec<usize> = (0..100).map(|_| b.below(7)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| *x < 7));
        assert!((0..7).all(|v| xs.contains(&v)), "{xs:?}");
        assert_eq!(Rng::new(0).below(0), 0);
        assert_eq!(from_env("LINEAGE_TESTKIT_UNSET_KNOB", 15u64), 15);
    }
}
