//! Workloads for islands: stored procedures, loaders and request generators.
//! One codebase drives the benchmarks, the tests and the examples.
//!
//! - [`ycsb`]: YCSB-style key-value transactions (DBx1000's and Silo's configurations).
//! - [`micro`]: the paper's partition-sensitive microbenchmark (read or update N rows).
//! - [`tpcc`]: TPC-C: all five transactions, the consistency checker.
//! - [`inserts`]: Xi et al.'s insert microbenchmark (a private table per client).

pub mod inserts;
pub mod micro;
pub mod served;
pub mod spec;
pub mod tpcc;
pub mod ycsb;

use islands::Error;

/// Prints load progress on stderr every `step` rows (plain lines: loads are
/// short next to a run, and this works on a terminal and in a log alike).
pub(crate) struct LoadProgress {
    label: String,
    total: u64,
    step: u64,
    next: u64,
    start: std::time::Instant,
    quiet: bool,
}

impl LoadProgress {
    pub(crate) fn new(label: &str, total: u64, quiet: bool) -> LoadProgress {
        let step = (total / 10).max(1);
        LoadProgress {
            label: label.into(),
            total,
            step,
            next: step,
            start: std::time::Instant::now(),
            quiet,
        }
    }

    #[inline]
    pub(crate) fn tick(&mut self, done: u64) {
        if done >= self.next {
            self.next += self.step;
            if !self.quiet && self.total >= 100_000 {
                eprintln!(
                    "[load] {}: {}% of {:.2}M rows ({:.1}s)",
                    self.label,
                    done.min(self.total) * 100 / self.total,
                    self.total as f64 / 1e6,
                    self.start.elapsed().as_secs_f64()
                );
            }
        }
    }
}

/// The check word of a row of the update workloads (micro, YCSB): a mix of its key and
/// its counter, written with every update of the counter, so that a check can tell a row
/// whose image is torn, stale in one word, or another key's (a recovery bug) from one that
/// a whole number of updates made. One multiplication on the hot path.
#[inline]
pub fn row_check(key: u64, counter: u64) -> u64 {
    (key ^ counter.rotate_left(29) ^ 0x5bd1_e995_a3c4_f00d).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Violations of a workload's invariants kept (in words), at most.
pub(crate) const VIOLATIONS_MAX: usize = 20;

/// Checks that `island`'s `table` holds exactly the keys of `keys`, and each row with
/// `row(key, words)` (which says what is wrong with a row, or `None`); appends what it
/// finds to `out` (the first bad row in words, then how many there were).
pub(crate) fn check_key_range(
    what: &str,
    island: &islands::island::Island,
    table: u16,
    keys: &std::ops::Range<u64>,
    mut row: impl FnMut(u64, &[u64]) -> Option<String>,
    out: &mut Vec<String>,
) {
    let name = &island.config().name;
    let (mut present, mut outside, mut bad) = (0u64, 0u64, 0u64);
    island.catalog().table(table).for_each_row(|key, _, words| {
        if !keys.contains(&key) {
            outside += 1;
        } else {
            present += 1;
        }
        if let Some(why) = row(key, words) {
            if bad == 0 {
                out.push(format!("{what}: {name}: {why}"));
            }
            bad += 1;
        }
    });
    let want = keys.end - keys.start;
    if present != want {
        out.push(format!(
            "{what}: {name}: {present} of the {want} rows of keys {}..{} are present",
            keys.start, keys.end
        ));
    }
    if outside > 0 {
        out.push(format!(
            "{what}: {name}: {outside} row(s) outside its keys {}..{}",
            keys.start, keys.end
        ));
    }
    if bad > 1 {
        out.push(format!("{what}: {name}: {bad} bad rows in all"));
    }
}

/// Checks a row count given on the command line.
pub(crate) fn check_rows(rows: u64) -> Result<(), Error> {
    if rows == 0 {
        return Err(Error::Config("--rows must be at least 1".into()));
    }
    if rows > 1 << 36 {
        return Err(Error::Config(format!(
            "--rows {rows} is more than this engine supports (2^36)"
        )));
    }
    Ok(())
}
