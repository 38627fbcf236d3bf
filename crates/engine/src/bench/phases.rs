//! Where a worker's time goes (the paper's Fig. 11): execution, transaction
//! management, communication, locking and logging.
//!
//! Each worker thread has a clock of its own (thread-local, so no sharing and
//! no atomics). Code at a phase boundary calls [`switch`]: the time since the
//! last switch goes to the phase that was current, and the new one starts. A
//! switch reads the processor's time-stamp counter once (tens of cycles) on
//! x86-64, a monotonic clock elsewhere. Off unless a run asks for it
//! (`islands bench --phases`); off, a switch is one thread-local flag test.
//!
//! What each phase holds:
//! - execution: stored-procedure code, index lookups, row copies;
//! - locking: concurrency control: lock acquisition at read (not under
//!   `none`), and at commit locking the write set, validation and install;
//! - logging: appending redo records and handing batches to the log writer;
//! - communication: the executor's message loop: receiving and decoding
//!   batches, serving other islands' requests (less their own locking),
//!   sending, and waiting for replies;
//! - management: the rest of begin, commit and abort: 2PC state machines,
//!   contexts, bookkeeping of the driver;
//! - idle: a worker with nothing to do that gave its core away (not counted).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Phase {
    Idle = 0,
    Execution = 1,
    Management = 2,
    Communication = 3,
    Locking = 4,
    Logging = 5,
}

pub const PHASES: usize = 6;
/// Names in index order (`Phase as usize`).
pub const NAMES: [&str; PHASES] = [
    "idle",
    "execution",
    "management",
    "communication",
    "locking",
    "logging",
];

const ALL: [Phase; PHASES] = [
    Phase::Idle,
    Phase::Execution,
    Phase::Management,
    Phase::Communication,
    Phase::Locking,
    Phase::Logging,
];

struct Clock {
    on: Cell<bool>,
    current: Cell<Phase>,
    since: Cell<u64>,
    ticks: [Cell<u64>; PHASES],
}

thread_local! {
    static CLOCK: Clock = const {
        Clock {
            on: Cell::new(false),
            current: Cell::new(Phase::Idle),
            since: Cell::new(0),
            ticks: [const { Cell::new(0) }; PHASES],
        }
    };
}

#[inline]
fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; it reads a counter.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// The raw clock the phases use (time-stamp counter ticks on x86-64): for
/// hot loops that time many short things, where a monotonic-clock read and
/// a `timespec` subtraction cost several times more. Convert with
/// [`ticks_per_us`]. The worker threads that compare readings are pinned,
/// and the kernel only uses the counter as its own clock source when it is
/// synchronised across cores.
#[inline]
pub fn ticks() -> u64 {
    now()
}

/// Makes `p` the calling thread's current phase; returns the one it ends.
#[inline]
pub fn switch(p: Phase) -> Phase {
    CLOCK.with(|c| {
        if !c.on.get() {
            return Phase::Idle;
        }
        let t = now();
        let cur = c.current.get();
        let slot = &c.ticks[cur as usize];
        slot.set(slot.get() + t.wrapping_sub(c.since.get()));
        c.since.set(t);
        c.current.set(p);
        cur
    })
}

/// Turns the calling thread's clock on or off; either way its counts restart.
pub fn enable(on: bool) {
    CLOCK.with(|c| {
        c.on.set(on);
        c.current.set(Phase::Idle);
        c.since.set(now());
        for t in &c.ticks {
            t.set(0);
        }
    });
}

/// Whether the calling thread's clock runs.
pub fn enabled() -> bool {
    CLOCK.with(|c| c.on.get())
}

/// The calling thread's counts since [`enable`] or the last `take` (the
/// current interval closed), in clock ticks; the counts restart.
pub fn take() -> [u64; PHASES] {
    let cur = switch(Phase::Idle);
    let out = CLOCK.with(|c| {
        let mut out = [0; PHASES];
        for (o, t) in out.iter_mut().zip(&c.ticks) {
            *o = t.replace(0);
        }
        out
    });
    switch(cur);
    out
}

/// Clock ticks per microsecond, measured once against the monotonic clock.
pub fn ticks_per_us() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let (t0, c0) = (Instant::now(), now());
        std::thread::sleep(Duration::from_millis(20));
        let (t1, c1) = (Instant::now(), now());
        let us = (t1 - t0).as_secs_f64() * 1e6;
        (c1.wrapping_sub(c0) as f64 / us).max(1e-9)
    })
}

/// The phases in index order.
pub fn all() -> [Phase; PHASES] {
    ALL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_goes_to_the_phase_that_was_current() {
        enable(true);
        switch(Phase::Execution);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {}
        let prev = switch(Phase::Logging);
        assert_eq!(prev, Phase::Execution);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(5) {}
        switch(Phase::Idle);
        let ticks = take();
        let us = |p: Phase| ticks[p as usize] as f64 / ticks_per_us();
        assert!(
            (15_000.0..60_000.0).contains(&us(Phase::Execution)),
            "{}",
            us(Phase::Execution)
        );
        assert!((3_000.0..30_000.0).contains(&us(Phase::Logging)));
        assert!(us(Phase::Execution) > us(Phase::Logging));
        assert_eq!(ticks[Phase::Locking as usize], 0);
        // Off: nothing is counted.
        enable(false);
        switch(Phase::Execution);
        switch(Phase::Idle);
        assert_eq!(take(), [0; PHASES]);
    }
}
