//! A check that a structure meant for one thread at a time (a single-worker
//! island's owned ordered index, its lock words and rows written with plain
//! stores) is never used by two threads at once.
//!
//! Each use enters the structure's [`SoleUser`] for its own length; entering
//! one that another thread is inside panics, naming the structure. Ownership
//! may pass between threads (a loader, then the worker, then a checker), so
//! the check is "not at once", not "always the same thread". It runs in debug
//! builds and in the engine's own unit tests; in a release build it is empty
//! and costs nothing.

#[cfg(any(debug_assertions, test))]
use std::sync::atomic::{AtomicU64, Ordering};

/// See the module documentation.
#[derive(Default)]
pub struct SoleUser {
    /// The thread inside (its token), or 0.
    #[cfg(any(debug_assertions, test))]
    user: AtomicU64,
}

/// Inside a [`SoleUser`] until dropped.
pub struct SoleGuard<'a> {
    #[cfg(any(debug_assertions, test))]
    user: Option<&'a SoleUser>,
    #[cfg(not(any(debug_assertions, test)))]
    _user: std::marker::PhantomData<&'a SoleUser>,
}

#[cfg(any(debug_assertions, test))]
fn thread_token() -> u64 {
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    // The address of a thread-local is unique among live threads, and never 0.
    TOKEN.with(|t| t as *const u8 as u64)
}

impl SoleUser {
    /// Enters for one use by this thread (again, if it is inside already:
    /// a use nested in another of the same thread). Panics if another
    /// thread is inside: `what` names the structure.
    #[inline]
    pub fn enter(&self, what: &'static str) -> SoleGuard<'_> {
        #[cfg(any(debug_assertions, test))]
        {
            let me = thread_token();
            match self
                .user
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => SoleGuard { user: Some(self) },
                Err(other) if other == me => SoleGuard { user: None },
                Err(_) => panic!("{what}: two threads use a single-owner structure at once"),
            }
        }
        #[cfg(not(any(debug_assertions, test)))]
        {
            let _ = what;
            SoleGuard {
                _user: std::marker::PhantomData,
            }
        }
    }
}

impl Drop for SoleGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(any(debug_assertions, test))]
        if let Some(u) = self.user {
            u.user.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SoleUser;
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_second_thread_inside_at_once_is_caught() {
        let u = Arc::new(SoleUser::default());
        let (inside, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let holder = {
            let (u, inside, done) = (Arc::clone(&u), Arc::clone(&inside), Arc::clone(&done));
            std::thread::spawn(move || {
                let _g = u.enter("test structure");
                inside.wait();
                done.wait();
            })
        };
        inside.wait();
        let u2 = Arc::clone(&u);
        let second = std::thread::spawn(move || {
            let _g = u2.enter("test structure");
        })
        .join();
        done.wait();
        holder.join().unwrap();
        let msg = second.expect_err("a second thread inside must panic");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("test structure"), "{msg}");
    }

    #[test]
    fn one_thread_after_another_and_nested_uses_pass() {
        let u = Arc::new(SoleUser::default());
        {
            let _a = u.enter("s");
            let _nested = u.enter("s");
        }
        let u2 = Arc::clone(&u);
        std::thread::spawn(move || drop(u2.enter("s")))
            .join()
            .unwrap();
        drop(u.enter("s"));
    }
}
