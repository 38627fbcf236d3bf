//! How a worker with nothing to do sleeps, and how whoever brings it work
//! wakes it: a [`Bell`], one 32-bit word and a futex.
//!
//! The word is all the state, so a bell works the same in a process's own
//! memory and inside a shared mapping that several processes map (the futex
//! is not `PRIVATE`): a sender in another process rings the bell of the
//! endpoint it delivered to, and the owner wakes.
//!
//! Protocol (the owner is the one thread that sleeps on the bell):
//! - a producer first makes its work visible (a push), then calls
//!   [`Bell::ring`];
//! - the owner, out of work, calls [`Bell::prepare_sleep`]. It answers
//!   `false` if the bell rang since the owner last slept (or last tried to):
//!   work may have come meanwhile, so the owner looks again instead of
//!   sleeping. Otherwise the owner may look at its sources once more, then
//!   [`Bell::sleep`]s (which returns at once if a ring came after
//!   `prepare_sleep`) or [`Bell::cancel_sleep`]s.
//!
//! A ring is remembered until the owner's next `prepare_sleep`, so a
//! producer whose ring lands while the owner is busy, or between its last
//! look and its sleep, is never lost: the owner need not look at every
//! source again before it sleeps. A ring that finds the bell already rung
//! costs a fence and one load; the first ring after the owner's
//! `prepare_sleep` costs a swap, and a `futex` wake if the owner sleeps.

use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

const AWAKE: u32 = 0;
const SLEEPING: u32 = 1;
const RUNG: u32 = 2;

/// A wake-up word (see the module documentation). `#[repr(C)]` so that its
/// layout is the same in every process that maps it.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Bell {
    word: AtomicU32,
}

impl Bell {
    pub const fn new() -> Bell {
        Bell {
            word: AtomicU32::new(AWAKE),
        }
    }

    /// Wakes the owner if it sleeps, or makes its next
    /// [`Bell::prepare_sleep`] answer `false`. Call after making the work it
    /// is woken for visible. Returns whether it made a system call (a
    /// `futex` wake of a sleeping owner), for transports that count theirs.
    #[inline]
    pub fn ring(&self) -> bool {
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::Relaxed) == RUNG {
            return false;
        }
        if self.word.swap(RUNG, Ordering::SeqCst) == SLEEPING {
            wake(&self.word);
            return true;
        }
        false
    }

    /// Owner: announces a sleep. `false`: the bell rang since the owner's
    /// last `prepare_sleep`, so work may be waiting: it must look again (the
    /// bell is then awake and unrung). `true`: the owner may look at its
    /// sources once more, then [`Bell::sleep`] or [`Bell::cancel_sleep`].
    #[inline]
    pub fn prepare_sleep(&self) -> bool {
        if self.word.swap(SLEEPING, Ordering::SeqCst) == RUNG {
            self.word.swap(AWAKE, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Owner: found work after a successful [`Bell::prepare_sleep`]; stays
    /// awake (a ring since is kept for the next `prepare_sleep`).
    #[inline]
    pub fn cancel_sleep(&self) {
        let _ = self
            .word
            .compare_exchange(SLEEPING, AWAKE, Ordering::SeqCst, Ordering::Relaxed);
    }

    /// Owner: sleeps until rung or until `timeout` passes, after a
    /// successful [`Bell::prepare_sleep`] (returns at once if a ring came
    /// after it). Returns whether it was rung; the bell is then awake.
    pub fn sleep(&self, timeout: Duration) -> bool {
        if self.word.load(Ordering::Acquire) == SLEEPING {
            wait(&self.word, SLEEPING, timeout);
        }
        self.word.swap(AWAKE, Ordering::SeqCst) == RUNG
    }

    /// [`Bell::prepare_sleep`] then [`Bell::sleep`]: sleeps unless rung
    /// since the last call. Returns whether it was rung.
    pub fn sleep_unless_rung(&self, timeout: Duration) -> bool {
        if !self.prepare_sleep() {
            return true;
        }
        self.sleep(timeout)
    }

    /// Whether the owner sleeps (or is about to): for counters and tests.
    pub fn is_sleeping(&self) -> bool {
        self.word.load(Ordering::Relaxed) == SLEEPING
    }
}

#[cfg(target_os = "linux")]
fn wait(word: &AtomicU32, expect: u32, timeout: Duration) {
    use rustix::thread::futex;
    let ts = futex::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    // EAGAIN (the word changed: rung), EINTR and ETIMEDOUT all mean "look again".
    let _ = futex::wait(word, futex::Flags::empty(), expect, Some(&ts));
}

#[cfg(target_os = "linux")]
fn wake(word: &AtomicU32) {
    use rustix::thread::futex;
    let _ = futex::wake(word, futex::Flags::empty(), 1);
}

#[cfg(not(target_os = "linux"))]
fn wait(word: &AtomicU32, expect: u32, timeout: Duration) {
    let end = std::time::Instant::now() + timeout;
    while word.load(Ordering::Acquire) == expect && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[cfg(not(target_os = "linux"))]
fn wake(_: &AtomicU32) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_before_the_sleep_is_not_lost() {
        let b = Bell::new();
        assert!(b.prepare_sleep());
        assert!(b.ring(), "the owner announced its sleep: a futex wake");
        assert!(!b.ring(), "already rung: no second wake");
        let t = Instant::now();
        assert!(b.sleep(Duration::from_secs(5)), "woken by the ring");
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(!b.is_sleeping());
    }

    #[test]
    fn an_unrung_sleep_times_out() {
        let b = Bell::new();
        assert!(b.prepare_sleep());
        assert!(!b.sleep(Duration::from_millis(5)));
    }

    #[test]
    fn a_ring_while_awake_costs_nothing_and_wakes_nothing() {
        let b = Bell::new();
        assert!(!b.ring(), "the owner is awake: no system call");
        b.prepare_sleep();
        assert!(
            !b.sleep(Duration::from_millis(2)),
            "a ring before prepare_sleep is for work already looked at"
        );
    }

    #[test]
    fn no_wakeup_is_lost_across_threads() {
        // A producer pushes then rings; the consumer prepares, looks, sleeps.
        // Every item must be seen without waiting for the long timeout.
        let bell = Arc::new(Bell::new());
        let q = Arc::new(crossbeam_queue::ArrayQueue::<u32>::new(4));
        let done = Arc::new(AtomicBool::new(false));
        let n = 20_000u32;
        let (b2, q2, d2) = (bell.clone(), q.clone(), done.clone());
        let consumer = std::thread::spawn(move || {
            let mut got = 0u32;
            let mut slept_long = 0;
            while got < n {
                if q2.pop().is_some() {
                    got += 1;
                    continue;
                }
                // No second look at the queue: a ring since the last
                // prepare_sleep is remembered.
                let t = Instant::now();
                b2.sleep_unless_rung(Duration::from_secs(2));
                if t.elapsed() >= Duration::from_secs(2) {
                    slept_long += 1;
                }
            }
            d2.store(true, Ordering::SeqCst);
            slept_long
        });
        for i in 0..n {
            while q.push(i).is_err() {
                std::hint::spin_loop();
            }
            bell.ring();
        }
        let slept_long = consumer.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(slept_long, 0, "a sleep ran to its timeout with work queued");
    }
}
