//! Workloads for islands: stored procedures, loaders and request generators.
//! One codebase drives the benchmarks, the tests and the examples.
//!
//! - [`ycsb`]: YCSB-style key-value transactions (DBx1000's and Silo's configurations).
//! - [`micro`]: the paper's partition-sensitive microbenchmark (read or update N rows).
//! - [`tpcc`]: TPC-C: all five transactions, the consistency checker.
//! - [`inserts`]: Xi et al.'s insert microbenchmark (a private table per client).

pub mod inserts;
pub mod micro;
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
                    "[load] {}: {}/{} rows ({:.1}s)",
                    self.label,
                    islands::bench::fmt::thousands(done),
                    islands::bench::fmt::thousands(self.total),
                    self.start.elapsed().as_secs_f64()
                );
            }
        }
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
