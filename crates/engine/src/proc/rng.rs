//! A fast, seedable random generator for the workers' hot path.
//!
//! Why not `rand`: rand 0.10 has no small, non-cryptographic generator without
//! extra features, and its `StdRng` (ChaCha) costs several times more per draw
//! than a workload's key choice should. SplitMix64 (Steele, Lea, Flood 2014;
//! the seeder of xoshiro) keeps one `u64` of state, passes BigCrush, and costs
//! an add, two xor-shift-multiplies and a shift. Its period of 2^64 is far
//! beyond any benchmark run. It is *not* for anything that needs
//! unpredictability.

/// SplitMix64. One word of state, so a worker keeps it in a register.
#[derive(Clone, Debug)]
pub struct FastRng {
    state: u64,
}

/// The golden-ratio increment of SplitMix64 (odd, so the state walks all 2^64 values).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl FastRng {
    /// Any seed is fine, 0 included: the output mixer decorrelates nearby seeds,
    /// so workers may use `base_seed + worker_index`.
    pub fn new(seed: u64) -> FastRng {
        FastRng { state: seed }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`, by Lemire's multiply-shift: the high word of
    /// `x * n`. The bias is at most `n / 2^64`, far below anything a benchmark
    /// can observe, so the rejection step is left out. `n` must be positive.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "FastRng::below(0): the range [0, 0) is empty");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`, with 53 random bits (every value is a multiple of 2^-53).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p / 100`; `p >= 100` is always true.
    #[inline]
    pub fn percent(&mut self, p: u32) -> bool {
        self.below(100) < u64::from(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_seeds_differ() {
        let mut a = FastRng::new(42);
        let mut b = FastRng::new(42);
        let mut c = FastRng::new(43);
        let xs: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..16).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn splitmix64_reference_values() {
        // First outputs of the reference C implementation seeded with 1234567.
        let mut r = FastRng::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn below_stays_in_range_and_is_roughly_uniform() {
        let mut r = FastRng::new(7);
        for n in [1u64, 2, 3, 10, 1000, u64::MAX] {
            for _ in 0..10_000 {
                assert!(r.below(n) < n);
            }
        }
        // Chi-square over 10 buckets, 9 degrees of freedom: 27.9 is the 0.1% tail.
        let buckets = 10usize;
        let draws = 100_000u64;
        let mut counts = vec![0u64; buckets];
        for _ in 0..draws {
            counts[r.below(buckets as u64) as usize] += 1;
        }
        let expected = draws as f64 / buckets as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 27.9, "chi-square {chi2} over {counts:?}");
    }

    #[test]
    fn next_f64_in_unit_interval_with_mean_one_half() {
        let mut r = FastRng::new(99);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        let mean = sum / n as f64;
        // Standard error is 0.29 / sqrt(n) = 0.0009; allow 5 of them.
        assert!((mean - 0.5).abs() < 0.0046, "mean {mean}");
    }

    #[test]
    fn percent_matches_its_probability() {
        let mut r = FastRng::new(5);
        assert!((0..1000).all(|_| !r.percent(0)));
        assert!((0..1000).all(|_| r.percent(100)));
        let hits = (0..100_000).filter(|_| r.percent(15)).count();
        // Expected 15,000, standard deviation about 113.
        assert!((14_400..15_600).contains(&hits), "{hits}");
    }

    #[test]
    #[should_panic(expected = "empty")]
    fn below_zero_is_refused() {
        FastRng::new(1).below(0);
    }
}
