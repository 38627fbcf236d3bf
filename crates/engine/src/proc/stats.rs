//! Per-worker statistics that the executor loop fills, and the progress
//! counters a monitor reads.
//!
//! A [`WorkerStats`] belongs to one worker thread: it is updated with plain
//! (non-atomic) adds and read by whoever ran the worker only after it has stopped,
//! when all of them are [`WorkerStats::merge`]d. Its hot counters sit in their
//! own 128-byte-aligned block (two cache lines: adjacent-line prefetch pairs
//! lines on x86), so two workers' stats never share a line. Create it on the
//! worker thread, so that its histogram's buckets are first touched there.
//!
//! While workers run, each also owns an `Arc<ProgressCounter>` it stores its
//! lifetime commit count into every [`PUBLISH_EVERY`] commits; a monitor sums
//! them. Those are relaxed stores to a line only that
//! worker writes, so the cost on the worker is one store per `PUBLISH_EVERY`
//! commits and one cache miss per monitor read (a few per second).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::error::AbortReason;

/// At most this many transaction types per workload (TPC-C has 5).
pub const MAX_TXN_TYPES: usize = 8;

/// Number of engine abort reasons, the length of [`WorkerStats::aborts`].
pub const ABORT_REASONS: usize = AbortReason::ALL.len();

/// Latency histogram range: 1 ns to 100 s, 3 significant digits (0.1% error).
pub const LATENCY_NS_MIN: u64 = 1;
pub const LATENCY_NS_MAX: u64 = 100_000_000_000;
pub const LATENCY_SIGFIG: u8 = 3;

/// How often (in commits) a worker publishes its progress.
pub const PUBLISH_EVERY: u64 = 256;

/// One worker's counters and latency histogram. See the module comment for ownership.
#[repr(align(128))]
#[derive(Clone, Debug)]
pub struct WorkerStats {
    /// Commits per transaction type.
    pub commits: [u64; MAX_TXN_TYPES],
    /// Roll-backs asked for by the procedure (not retried), per transaction type.
    pub user_aborts: [u64; MAX_TXN_TYPES],
    /// Engine aborts by [`AbortReason::index`].
    pub aborts: [u64; ABORT_REASONS],
    /// Re-executions after an engine abort (the driver may give up, so this can
    /// be less than the sum of `aborts`).
    pub retries: u64,
    /// Commits that ran two-phase commit across islands.
    pub distributed: u64,
    /// Commits since the stats were created, not cleared by [`WorkerStats::reset`]:
    /// what the worker publishes, so the monitor sees a count that never goes back.
    lifetime_commits: u64,
    /// The lifetime commit count last published.
    published: u64,
    /// Commit latency in nanoseconds, first attempt to commit (retries included).
    latency_ns: Histogram<u64>,
    /// Clock ticks per phase ([`crate::phases`]), when the run counts them.
    pub phase_ticks: [u64; crate::phases::PHASES],
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats::new()
    }
}

impl WorkerStats {
    pub fn new() -> WorkerStats {
        let latency_ns =
            match Histogram::new_with_bounds(LATENCY_NS_MIN, LATENCY_NS_MAX, LATENCY_SIGFIG) {
                Ok(h) => h,
                // The bounds are constants that satisfy hdrhistogram's rules
                // (low >= 1, high >= 2 * low, sigfig <= 5); failing here is a bug.
                Err(e) => panic!("latency histogram bounds are invalid: {e:?}"),
            };
        WorkerStats {
            commits: [0; MAX_TXN_TYPES],
            user_aborts: [0; MAX_TXN_TYPES],
            aborts: [0; ABORT_REASONS],
            retries: 0,
            distributed: 0,
            lifetime_commits: 0,
            published: 0,
            latency_ns,
            phase_ticks: [0; crate::phases::PHASES],
        }
    }

    /// A commit of type `ty` that took `latency_ns` from its first start.
    /// Latencies above 100 s are counted as 100 s.
    #[inline]
    pub fn record_commit(&mut self, ty: usize, latency_ns: u64) {
        self.commits[ty] += 1;
        self.lifetime_commits += 1;
        self.latency_ns.saturating_record(latency_ns);
    }

    /// An engine abort (a conflict); the driver counts the re-execution with
    /// [`WorkerStats::record_retry`] if it retries.
    #[inline]
    pub fn record_abort(&mut self, reason: AbortReason) {
        self.aborts[reason.index()] += 1;
    }

    #[inline]
    pub fn record_retry(&mut self) {
        self.retries += 1;
    }

    /// A roll-back the procedure asked for (TPC-C's 1% of NewOrder).
    #[inline]
    pub fn record_user_abort(&mut self, ty: usize) {
        self.user_aborts[ty] += 1;
    }

    /// Publishes the lifetime commit count to `counter` once it has grown by
    /// [`PUBLISH_EVERY`] commits since the last publication. A worker that
    /// records many commits at once (the outcomes of a log batch) steps over
    /// multiples of `PUBLISH_EVERY`, so this compares with what was published
    /// rather than testing for a multiple. Call [`WorkerStats::publish`] once at the end.
    #[inline]
    pub fn maybe_publish(&mut self, counter: &ProgressCounter) {
        if self.lifetime_commits - self.published >= PUBLISH_EVERY {
            self.publish(counter);
        }
    }

    pub fn publish(&mut self, counter: &ProgressCounter) {
        counter.publish(self.lifetime_commits);
        self.published = self.lifetime_commits;
    }

    /// Clears everything measured (at the end of warm-up). The lifetime commit
    /// count is kept: progress counters must not go backwards.
    pub fn reset(&mut self) {
        self.commits = [0; MAX_TXN_TYPES];
        self.user_aborts = [0; MAX_TXN_TYPES];
        self.aborts = [0; ABORT_REASONS];
        self.retries = 0;
        self.distributed = 0;
        self.latency_ns.reset();
        self.phase_ticks = [0; crate::phases::PHASES];
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &WorkerStats) {
        for (a, b) in self.commits.iter_mut().zip(other.commits) {
            *a += b;
        }
        for (a, b) in self.user_aborts.iter_mut().zip(other.user_aborts) {
            *a += b;
        }
        for (a, b) in self.aborts.iter_mut().zip(other.aborts) {
            *a += b;
        }
        self.retries += other.retries;
        self.distributed += other.distributed;
        for (a, b) in self.phase_ticks.iter_mut().zip(other.phase_ticks) {
            *a += b;
        }
        self.lifetime_commits += other.lifetime_commits;
        // Both histograms have the same constant bounds, so adding cannot fail.
        if let Err(e) = self.latency_ns.add(&other.latency_ns) {
            panic!("latency histograms with equal bounds failed to add: {e:?}");
        }
    }

    /// Commits of all types since the last reset.
    pub fn total_commits(&self) -> u64 {
        self.commits.iter().sum()
    }

    pub fn total_user_aborts(&self) -> u64 {
        self.user_aborts.iter().sum()
    }

    /// Engine aborts of all reasons since the last reset.
    pub fn total_aborts(&self) -> u64 {
        self.aborts.iter().sum()
    }

    pub fn aborts_for(&self, reason: AbortReason) -> u64 {
        self.aborts[reason.index()]
    }

    pub fn lifetime_commits(&self) -> u64 {
        self.lifetime_commits
    }

    pub fn latency_ns(&self) -> &Histogram<u64> {
        &self.latency_ns
    }
}

/// One worker's published commit count, alone in its cache line.
/// Written only by its worker (relaxed), read by the monitor.
#[derive(Debug, Default)]
pub struct ProgressCounter {
    committed: CachePadded<AtomicU64>,
}

impl ProgressCounter {
    pub fn new() -> Arc<ProgressCounter> {
        Arc::new(ProgressCounter::default())
    }

    /// Stores the worker's lifetime commit count. Relaxed: the monitor needs a
    /// recent value, not an ordering with anything else.
    #[inline]
    pub fn publish(&self, total_commits: u64) {
        self.committed.store(total_commits, Ordering::Relaxed);
    }

    pub fn load(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_cache_line_aligned() {
        assert_eq!(std::mem::align_of::<WorkerStats>(), 128);
        let v = [WorkerStats::new(), WorkerStats::new()];
        let a = &v[0] as *const WorkerStats as usize;
        let b = &v[1] as *const WorkerStats as usize;
        assert_eq!(a % 128, 0);
        assert!(b - a >= 128);
        assert!(std::mem::size_of::<ProgressCounter>() >= 64);
    }

    #[test]
    fn merge_adds_up() {
        let mut a = WorkerStats::new();
        let mut b = WorkerStats::new();
        for i in 0..100u64 {
            a.record_commit(0, 1_000 + i);
        }
        for i in 0..50u64 {
            b.record_commit(1, 2_000 + i);
        }
        b.record_commit(0, 5_000);
        a.record_abort(AbortReason::LockConflict);
        a.record_retry();
        b.record_abort(AbortReason::LockConflict);
        b.record_abort(AbortReason::Phantom);
        b.record_user_abort(0);
        a.merge(&b);
        assert_eq!(a.commits[0], 101);
        assert_eq!(a.commits[1], 50);
        assert_eq!(a.total_commits(), 151);
        assert_eq!(a.aborts_for(AbortReason::LockConflict), 2);
        assert_eq!(a.aborts_for(AbortReason::Phantom), 1);
        assert_eq!(a.total_aborts(), 3);
        assert_eq!(a.total_user_aborts(), 1);
        assert_eq!(a.retries, 1);
        assert_eq!(a.latency_ns().len(), 151);
        assert_eq!(a.lifetime_commits(), 151);
        // The merged histogram holds both sets: its max is b's 5,000 ns.
        assert!(a.latency_ns().equivalent(a.latency_ns().max(), 5_000));
    }

    #[test]
    fn percentiles_of_a_known_set() {
        let mut s = WorkerStats::new();
        // 1..=1000 microseconds, once each.
        for us in 1..=1000u64 {
            s.record_commit(0, us * 1_000);
        }
        let h = s.latency_ns();
        let close = |got: u64, want: u64| {
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err <= 0.001, "got {got} want {want}");
        };
        close(h.value_at_quantile(0.5), 500_000);
        close(h.value_at_quantile(0.9), 900_000);
        close(h.value_at_quantile(0.99), 990_000);
        close(h.value_at_quantile(0.999), 999_000);
        close(h.max(), 1_000_000);
        assert!((h.mean() - 500_500.0).abs() / 500_500.0 < 0.001);
    }

    #[test]
    fn extreme_latencies_saturate_instead_of_being_lost() {
        let mut s = WorkerStats::new();
        s.record_commit(0, 0);
        s.record_commit(0, u64::MAX);
        assert_eq!(s.latency_ns().len(), 2);
        assert!(s.latency_ns().max() >= LATENCY_NS_MAX);
    }

    #[test]
    fn reset_clears_measurements_but_not_published_progress() {
        let counter = ProgressCounter::new();
        let mut s = WorkerStats::new();
        for _ in 0..PUBLISH_EVERY {
            s.record_commit(2, 10);
            s.maybe_publish(&counter);
        }
        s.record_abort(AbortReason::Remote);
        s.record_user_abort(2);
        assert_eq!(counter.load(), PUBLISH_EVERY);
        s.reset();
        assert_eq!(s.total_commits(), 0);
        assert_eq!(s.total_aborts(), 0);
        assert_eq!(s.total_user_aborts(), 0);
        assert_eq!(s.latency_ns().len(), 0);
        s.record_commit(2, 10);
        s.publish(&counter);
        assert_eq!(counter.load(), PUBLISH_EVERY + 1);
    }

    #[test]
    fn commits_recorded_in_batches_are_still_published() {
        // A worker acknowledges a log batch's commits together and calls
        // `maybe_publish` after the batch, stepping over exact multiples.
        let counter = ProgressCounter::new();
        let mut s = WorkerStats::new();
        for _ in 0..(3 * PUBLISH_EVERY) / 7 {
            for _ in 0..7 {
                s.record_commit(0, 10);
            }
            s.maybe_publish(&counter);
        }
        let recorded = s.lifetime_commits();
        assert!(
            counter.load() + PUBLISH_EVERY > recorded,
            "published {} of {recorded}",
            counter.load()
        );
        assert!(counter.load() >= 2 * PUBLISH_EVERY);
    }
}
