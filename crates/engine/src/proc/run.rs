//! How a run of executors is controlled: the run's phase, which every
//! executor reads once per round and which a failure sets to [`FAILED`], the
//! watch for a failed log, and the log-buffer hand-off limits of the executor
//! loop. The benchmark driver, tests and the application API's deployment run
//! executors under the same phase.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::stats::{ProgressCounter, WorkerStats};
use crate::island::Island;
use crate::Error;

/// The run's phase ([`AtomicU8`]) while the executors warm up: they run, and
/// their statistics are cleared when it ends.
pub const WARMUP: u8 = 0;
/// The measured phase (and the only phase of a run with no warm-up).
pub const MEASURE: u8 = 1;
/// The measured phase is over: workers finish what they hold and leave.
pub const STOP: u8 = 2;
/// A worker failed or a log died: every worker leaves at its next round,
/// without finishing what it has in flight (a log that will never be durable
/// again cannot finish it; what is in doubt on disk stays for recovery).
pub const FAILED: u8 = 3;

/// How often [`watch`] (the thread that runs the executors) looks for a failed log while the
/// workers run: a worker whose island's log died notices when it next hands
/// the log a batch or waits for one, but a worker of another island may be
/// waiting only for messages that will never come.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// Commits between hand-offs of a worker's log buffer.
pub(crate) const FLUSH_EVERY: usize = 1024;
/// Longest a worker waits before handing the island's log buffer over while
/// it has acknowledgements pending (`sync`).
pub(crate) const FLUSH_AFTER: Duration = Duration::from_micros(500);
/// The same in `async` mode, where nobody waits for the flush.
pub(crate) const ASYNC_FLUSH_AFTER: Duration = Duration::from_millis(1);

/// One worker thread's work: given the run's phase and its progress counter,
/// it returns its statistics, also when it stopped on an error.
pub type WorkerBody =
    Box<dyn FnOnce(&AtomicU8, &ProgressCounter) -> (WorkerStats, Result<(), Error>) + Send>;

/// Sets the run's phase to [`FAILED`] when dropped by a panicking thread, so
/// that the other workers leave too.
pub struct FailOnPanic<'a>(pub &'a AtomicU8);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(FAILED, Ordering::Release);
        }
    }
}

/// The first failure of one of `islands`' logs, as the error of a run.
pub fn log_failure(islands: &[Island]) -> Option<Error> {
    islands
        .iter()
        .find_map(|i| i.wal().and_then(|w| w.failed()))
        .map(Error::from)
}

/// Sleeps until `until`, looking every [`WATCH_EVERY`] for a worker that
/// set [`FAILED`] and for a failed log (then it sets [`FAILED`] itself).
/// Returns whether the run failed.
pub fn watch(islands: &[Island], phase: &AtomicU8, until: Instant) -> bool {
    loop {
        if phase.load(Ordering::Acquire) == FAILED {
            return true;
        }
        if islands
            .iter()
            .any(|i| i.wal().is_some_and(|w| w.failed().is_some()))
        {
            phase.store(FAILED, Ordering::Release);
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep((until - now).min(WATCH_EVERY));
    }
}

/// Waits until `done` holds (the workers have all returned), watching as
/// [`watch`] does, so that a log that dies while the workers finish what
/// they hold stops them too. Returns whether the run failed.
pub fn watch_until(islands: &[Island], phase: &AtomicU8, done: impl Fn() -> bool) -> bool {
    let mut failed = false;
    while !done() {
        if watch(islands, phase, Instant::now() + WATCH_EVERY) {
            failed = true;
            std::thread::sleep(WATCH_EVERY);
        }
    }
    failed
}

/// The seed of worker `w`'s request generator.
pub fn worker_seed(seed: u64, w: usize) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (w as u64 + 1)
}
