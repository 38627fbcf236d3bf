//! How a worker with nothing to do sleeps, and how whoever brings it work
//! wakes it: a [`Bell`], one 32-bit word and a futex.
//!
//! The word is all the state, so a bell works the same in a process's own
//! memory and inside a shared mapping that several processes map (the futex
//! is not `PRIVATE`): a sender in another process rings the bell of the
//! endpoint it delivered to, and the owner wakes.
//!
//! Protocol (the owner is the one thread that sleeps on the bell):
//! 1. the owner calls [`Bell::prepare_sleep`], then looks once more at every
//!    source of work (mailboxes, rings, queues);
//! 2. if it found work, [`Bell::cancel_sleep`]; otherwise [`Bell::sleep`];
//! 3. a producer first makes its work visible (a push), then calls
//!    [`Bell::ring`].
//!
//! The fences on both sides (the owner's store of `SLEEPING` before its last
//! look, the producer's fence before it reads the word) make sure that either
//! the owner's last look sees the work or the producer sees `SLEEPING` and
//! wakes it: no wake-up is lost, whatever the producer's push was made of.
//! A ring while the owner is awake costs a fence and one load.

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

    /// Wakes the owner if it sleeps or is about to. Call after making the
    /// work it is woken for visible.
    #[inline]
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::Relaxed) == AWAKE {
            return;
        }
        if self.word.swap(RUNG, Ordering::SeqCst) == SLEEPING {
            wake(&self.word);
        }
    }

    /// Owner: announces a sleep. Look at every source of work after this,
    /// then [`Bell::sleep`] or [`Bell::cancel_sleep`].
    #[inline]
    pub fn prepare_sleep(&self) {
        self.word.store(SLEEPING, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Owner: found work after [`Bell::prepare_sleep`]; stays awake.
    #[inline]
    pub fn cancel_sleep(&self) {
        self.word.store(AWAKE, Ordering::Relaxed);
    }

    /// Owner: sleeps until rung (since [`Bell::prepare_sleep`]) or until
    /// `timeout` passes. Returns whether it was rung. Returns at once if a
    /// ring came after `prepare_sleep`.
    pub fn sleep(&self, timeout: Duration) -> bool {
        if self.word.load(Ordering::Acquire) == SLEEPING {
            wait(&self.word, SLEEPING, timeout);
        }
        self.word.swap(AWAKE, Ordering::Acquire) == RUNG
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
        b.prepare_sleep();
        b.ring();
        let t = Instant::now();
        assert!(b.sleep(Duration::from_secs(5)), "woken by the ring");
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!(!b.is_sleeping());
    }

    #[test]
    fn an_unrung_sleep_times_out() {
        let b = Bell::new();
        b.prepare_sleep();
        assert!(!b.sleep(Duration::from_millis(5)));
    }

    #[test]
    fn a_ring_while_awake_costs_nothing_and_wakes_nothing() {
        let b = Bell::new();
        b.ring();
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
                b2.prepare_sleep();
                if !q2.is_empty() {
                    b2.cancel_sleep();
                    continue;
                }
                let t = Instant::now();
                b2.sleep(Duration::from_secs(2));
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
