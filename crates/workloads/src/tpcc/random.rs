//! TPC-C's random functions (Clause 2.1.6 and 4.3.2): uniform ranges,
//! NURand with its C constants, last names from syllables, random strings.

use islands::proc::rng::FastRng;

/// The run-time C constants of NURand (Clause 2.1.6). Fixed rather than drawn,
/// so runs are reproducible; they satisfy Clause 2.1.6.1 against [`C_LOAD_LAST`]:
/// `C_RUN_LAST - C_LOAD_LAST = 66`, in 65..=119 and neither 96 nor 112.
pub const C_LOAD_LAST: u64 = 157;
pub const C_RUN_LAST: u64 = 223;
/// C for customer ids (A = 1023) and item ids (A = 8191).
pub const C_ID: u64 = 259;
pub const C_OL_I_ID: u64 = 7911;

const SYLLABLES: [&[u8]; 10] = [
    b"BAR", b"OUGHT", b"ABLE", b"PRI", b"PRES", b"ESE", b"ANTI", b"CALLY", b"ATION", b"EING",
];

/// Uniform in `[lo, hi]`.
#[inline]
pub fn uniform(rng: &mut FastRng, lo: u64, hi: u64) -> u64 {
    debug_assert!(lo <= hi);
    lo + rng.below(hi - lo + 1)
}

/// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
#[inline]
pub fn nurand(rng: &mut FastRng, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((uniform(rng, 0, a) | uniform(rng, x, y)) + c) % (y - x + 1)) + x
}

/// The last name of number `n` (0..=999): three syllables, one per digit.
/// Writes into `out` and returns the length (at most 15 bytes).
pub fn last_name(n: u64, out: &mut [u8; 16]) -> usize {
    debug_assert!(n < 1000);
    let mut len = 0;
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        let s = SYLLABLES[digit as usize];
        out[len..len + s.len()].copy_from_slice(s);
        len += s.len();
    }
    out[len..].fill(0);
    len
}

/// Random alphanumeric string of length in `[lo, hi]` (Clause 4.3.2.2 a-string).
pub fn astring(rng: &mut FastRng, lo: usize, hi: usize, out: &mut [u8]) -> usize {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let n = uniform(rng, lo as u64, hi as u64) as usize;
    for b in &mut out[..n] {
        *b = CHARS[rng.below(CHARS.len() as u64) as usize];
    }
    n
}

/// Random numeric string of length in `[lo, hi]` (n-string).
pub fn nstring(rng: &mut FastRng, lo: usize, hi: usize, out: &mut [u8]) -> usize {
    let n = uniform(rng, lo as u64, hi as u64) as usize;
    for b in &mut out[..n] {
        *b = b'0' + rng.below(10) as u8;
    }
    n
}

/// A zip code: four random digits and "11111" (Clause 4.3.2.7).
pub fn zip(rng: &mut FastRng) -> [u8; 9] {
    let mut z = *b"000011111";
    nstring(rng, 4, 4, &mut z[..4]);
    z
}

/// An a-string of 26..=50 characters, 10% of which contain "ORIGINAL" at a
/// random position (I_DATA and S_DATA, Clause 4.3.3.1).
pub fn data_with_original(rng: &mut FastRng, out: &mut [u8; 50]) -> usize {
    let n = astring(rng, 26, 50, out);
    if rng.percent(10) {
        let at = rng.below((n - 8 + 1) as u64) as usize;
        out[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_follow_the_syllables() {
        let mut b = [0u8; 16];
        let n = last_name(371, &mut b);
        assert_eq!(&b[..n], b"PRICALLYOUGHT");
        let n = last_name(0, &mut b);
        assert_eq!(&b[..n], b"BARBARBAR");
        let n = last_name(999, &mut b);
        assert_eq!(&b[..n], b"EINGEINGEING");
    }

    #[test]
    fn nurand_stays_in_range() {
        let mut r = FastRng::new(3);
        for _ in 0..10_000 {
            let v = nurand(&mut r, 1023, C_ID, 1, 3000);
            assert!((1..=3000).contains(&v));
            let v = nurand(&mut r, 255, C_RUN_LAST, 0, 999);
            assert!(v <= 999);
        }
        let d = C_RUN_LAST - C_LOAD_LAST;
        assert!((65..=119).contains(&d) && d != 96 && d != 112);
    }
}
