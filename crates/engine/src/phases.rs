//! Where a worker's time goes (the paper's Fig. 11): execution, transaction
//! management, communication, locking and logging.
//!
//! Each worker thread has a clock of its own (thread-local, so no sharing and
//! no atomics). Code at a phase boundary calls [`switch`]: the time since the
//! last switch goes to the phase that was current, and the new one starts. A
//! switch reads the clock once: the processor's time-stamp counter (tens of
//! cycles) where it can serve, a monotonic clock otherwise (see [`clock`]).
//! Off unless a run asks for it (`islands bench --phases`); off, a switch is
//! one thread-local flag test.
//!
//! The same clock, [`ticks`], is the distributed executors' protocol clock,
//! and there readings of different threads, so of different CPUs, are
//! compared: a participant's idle-abort deadline for a branch against the
//! home's reading of when the transaction began (`executor::Executor::
//! commit_home`), and an unpinned thread's readings as it migrates. That
//! needs a counter that ticks at one rate always (`constant_tsc`), also in
//! deep sleep states (`nonstop_tsc`), and that reads the same on every CPU
//! at once. The first use checks all three, the last by measuring: threads
//! pinned to the first CPU this process may run on and to each other one
//! pass a reading back and forth, and the reading taken after receiving one
//! must not be below it (beyond [`MAX_SKEW_NS`]). If any check fails, the
//! clock is the monotonic clock (nanoseconds), and [`clock`] says why.
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
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
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

/// The largest skew between two CPUs' time-stamp counters that the check
/// accepts: far below the protocol's timeouts (milliseconds) and the
/// microseconds its clock counts in.
pub const MAX_SKEW_NS: u64 = 1_000;

/// Which clock [`ticks`] reads; chosen once per process (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq)]
pub enum ClockSource {
    /// The time-stamp counter, invariant and, measured across the `cpus`
    /// CPUs this process may run on, never seen to go back by more than
    /// `skew_ns` from one CPU to another.
    Tsc {
        cpus: usize,
        skew_ns: u64,
        ticks_per_us: f64,
    },
    /// The monotonic clock, in nanoseconds; `why` the counter is not used.
    Monotonic { why: String },
}

impl fmt::Display for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClockSource::Tsc {
                cpus,
                skew_ns,
                ticks_per_us,
            } => write!(
                f,
                "tsc ({ticks_per_us:.0} MHz, invariant; synchronised across {cpus} cpus: a \
                 reading passed between them went back {skew_ns} ns at most)"
            ),
            ClockSource::Monotonic { why } => write!(f, "monotonic ({why})"),
        }
    }
}

const MODE_UNCHECKED: u8 = 0;
const MODE_TSC: u8 = 1;
const MODE_MONOTONIC: u8 = 2;
/// [`clock`]'s choice, for the hot path: one relaxed load.
static MODE: AtomicU8 = AtomicU8::new(MODE_UNCHECKED);
static SOURCE: OnceLock<ClockSource> = OnceLock::new();

/// The clock [`ticks`] reads, checked on first use (see the module
/// documentation). `ISLANDS_CLOCK=monotonic` skips the counter.
pub fn clock() -> &'static ClockSource {
    SOURCE.get_or_init(|| {
        let s = choose();
        let mode = match s {
            ClockSource::Tsc { .. } => MODE_TSC,
            ClockSource::Monotonic { .. } => MODE_MONOTONIC,
        };
        MODE.store(mode, Ordering::Release);
        s
    })
}

#[inline]
fn now() -> u64 {
    match MODE.load(Ordering::Relaxed) {
        MODE_TSC => tsc(),
        MODE_MONOTONIC => monotonic_ns(),
        _ => {
            clock();
            now()
        }
    }
}

#[inline]
fn tsc() -> u64 {
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
        unreachable!("the time-stamp counter is only chosen on x86-64")
    }
}

#[inline]
fn monotonic_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The raw clock the phases and the distributed executors use (see
/// [`clock`]): for hot loops that time many short things, where a
/// monotonic-clock read and a `timespec` subtraction cost several times
/// more. Convert with [`ticks_per_us`].
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

/// Clock ticks per microsecond (the counter's rate, measured once against
/// the monotonic clock; 1000 for the monotonic clock itself).
pub fn ticks_per_us() -> f64 {
    match clock() {
        ClockSource::Tsc { ticks_per_us, .. } => *ticks_per_us,
        ClockSource::Monotonic { .. } => 1e3,
    }
}

/// The check of the module documentation.
fn choose() -> ClockSource {
    if std::env::var("ISLANDS_CLOCK").is_ok_and(|v| v == "monotonic") {
        return ClockSource::Monotonic {
            why: "ISLANDS_CLOCK=monotonic".into(),
        };
    }
    if !cfg!(target_arch = "x86_64") {
        return ClockSource::Monotonic {
            why: "no time-stamp counter on this architecture".into(),
        };
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if let Err(why) = invariant_tsc(&cpuinfo) {
        return ClockSource::Monotonic { why };
    }
    let rate = tsc_ticks_per_us();
    let cpus = crate::topology::allowed_cpus();
    decide(cpus.len(), rate, tsc_skew_ticks(&cpus))
}

/// The choice, given the counter's rate and the skew measured across `cpus`
/// CPUs (or why it could not be measured).
fn decide(cpus: usize, ticks_per_us: f64, skew: Result<u64, String>) -> ClockSource {
    let skew_ns = match skew {
        Ok(ticks) => (ticks as f64 * 1e3 / ticks_per_us) as u64,
        Err(why) => return ClockSource::Monotonic { why },
    };
    if skew_ns > MAX_SKEW_NS {
        return ClockSource::Monotonic {
            why: format!(
                "the time-stamp counters of this process's {cpus} cpus differ by {:.2} µs or more",
                skew_ns as f64 / 1e3
            ),
        };
    }
    ClockSource::Tsc {
        cpus,
        skew_ns,
        ticks_per_us,
    }
}

/// Whether `/proc/cpuinfo` says every CPU's counter is invariant; if not,
/// which flag is missing.
fn invariant_tsc(cpuinfo: &str) -> Result<(), String> {
    let mut lines = 0;
    for line in cpuinfo.lines().filter(|l| l.starts_with("flags")) {
        lines += 1;
        let flags: Vec<&str> = line.split_whitespace().collect();
        for want in ["constant_tsc", "nonstop_tsc"] {
            if !flags.contains(&want) {
                return Err(format!("the cpu flags lack {want}"));
            }
        }
    }
    if lines == 0 {
        return Err("/proc/cpuinfo lists no cpu flags".into());
    }
    Ok(())
}

fn tsc_ticks_per_us() -> f64 {
    let (t0, c0) = (Instant::now(), tsc());
    std::thread::sleep(Duration::from_millis(20));
    let (t1, c1) = (Instant::now(), tsc());
    let us = (t1 - t0).as_secs_f64() * 1e6;
    (c1.wrapping_sub(c0) as f64 / us).max(1e-9)
}

/// The counter read after every earlier instruction and before every later
/// one (a hand-off's receiver must read it after it saw the message).
#[inline]
fn tsc_ordered() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: LFENCE and RDTSC have no preconditions.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_lfence();
            let t = _rdtsc();
            _mm_lfence();
            t
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        unreachable!("the time-stamp counter is only measured on x86-64")
    }
}

/// Hand-offs between two CPUs for the skew check.
const SKEW_ROUNDS: u64 = 500;
/// Fewest hand-offs a pair must have done for the check to count.
const SKEW_MIN_ROUNDS: u64 = 20;
/// The most one pair's check may take (a loaded machine runs the two
/// threads by turns, and each hand-off may wait for a time slice).
const SKEW_PAIR_LIMIT: Duration = Duration::from_millis(200);

/// The largest step back, in ticks, seen when a counter reading passes from
/// `cpus[0]` to each other CPU and back.
fn tsc_skew_ticks(cpus: &[usize]) -> Result<u64, String> {
    let Some((&first, rest)) = cpus.split_first() else {
        return Ok(0);
    };
    let mut worst = 0;
    for &other in rest {
        worst = worst.max(pair_skew_ticks(first, other)?);
    }
    Ok(worst)
}

fn pair_skew_ticks(a: usize, b: usize) -> Result<u64, String> {
    // `turn` counts hand-offs: odd ones go from `a` to `b`, even ones back.
    // The sender stores its reading in `stamp`, then the turn; the receiver
    // reads the counter once it sees the turn, and no later than that
    // reading may the sender's be, on synchronised counters.
    let turn = AtomicU64::new(0);
    let stamp = AtomicU64::new(0);
    let back = AtomicU64::new(0);
    let deadline = Instant::now() + SKEW_PAIR_LIMIT;
    let player = |cpu: usize, first: u64| -> Result<u64, String> {
        crate::topology::pin_to(cpu).map_err(|e| e.to_string())?;
        let mut mine = first;
        while mine <= 2 * SKEW_ROUNDS {
            let mut spins = 0u32;
            while turn.load(Ordering::Acquire) != mine - 1 {
                spins += 1;
                if spins.is_multiple_of(64) {
                    if Instant::now() > deadline {
                        return Ok(mine);
                    }
                    std::thread::yield_now();
                }
                std::hint::spin_loop();
            }
            let t = tsc_ordered();
            let sent = stamp.load(Ordering::Relaxed);
            if sent > t {
                back.fetch_max(sent - t, Ordering::Relaxed);
            }
            stamp.store(tsc_ordered(), Ordering::Relaxed);
            turn.store(mine, Ordering::Release);
            mine += 2;
        }
        Ok(mine)
    };
    let (ra, rb) = std::thread::scope(|s| {
        let ha = s.spawn(|| player(a, 1));
        let hb = s.spawn(|| player(b, 2));
        (ha.join(), hb.join())
    });
    let joined = |r: std::thread::Result<Result<u64, String>>| {
        r.map_err(|_| "the cross-cpu check panicked".to_string())?
    };
    let (ra, rb) = (joined(ra)?, joined(rb)?);
    let rounds = ra.min(rb) / 2;
    if rounds < SKEW_MIN_ROUNDS {
        return Err(format!(
            "cpus {a} and {b} passed the counter back and forth only {rounds} times in {} ms",
            SKEW_PAIR_LIMIT.as_millis()
        ));
    }
    Ok(back.load(Ordering::Relaxed))
}

/// The phases in index order.
pub fn all() -> [Phase; PHASES] {
    ALL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invariant_counter_needs_both_flags_on_every_cpu() {
        let both = "processor : 0\nflags : fpu tsc constant_tsc nonstop_tsc\n\
                    processor : 1\nflags : fpu tsc constant_tsc nonstop_tsc\n";
        assert_eq!(invariant_tsc(both), Ok(()));
        let one_lacks = format!("{both}processor : 2\nflags : tsc constant_tsc\n");
        assert_eq!(
            invariant_tsc(&one_lacks),
            Err("the cpu flags lack nonstop_tsc".to_string())
        );
        assert!(invariant_tsc("processor : 0\n").is_err());
    }

    #[test]
    fn a_skewed_or_unmeasured_counter_falls_back_to_the_monotonic_clock() {
        // 1000 ticks per µs: a tick is a nanosecond.
        assert!(matches!(
            decide(4, 1e3, Ok(MAX_SKEW_NS)),
            ClockSource::Tsc { cpus: 4, skew_ns, .. } if skew_ns == MAX_SKEW_NS
        ));
        let skewed = decide(4, 1e3, Ok(MAX_SKEW_NS + 1));
        assert!(
            matches!(&skewed, ClockSource::Monotonic { why } if why.contains("differ")),
            "{skewed}"
        );
        let unmeasured = decide(4, 1e3, Err("no answer".into()));
        assert_eq!(unmeasured.to_string(), "monotonic (no answer)");
    }

    /// Whatever clock was chosen, a reading passed to a thread on another
    /// CPU is never after that thread's own reading taken once it has it:
    /// what the protocol's cross-thread comparisons assume.
    #[test]
    fn a_reading_handed_to_another_cpu_is_not_in_its_future() {
        let src = clock();
        eprintln!("clock: {src}");
        if let ClockSource::Tsc { cpus, .. } = src {
            assert_eq!(*cpus, crate::topology::allowed_cpus().len());
        }
        let cpus = crate::topology::allowed_cpus();
        let (a, b) = (cpus[0], *cpus.last().expect("a cpu"));
        let (tx, rx) = std::sync::mpsc::channel::<u64>();
        let (back_tx, back_rx) = std::sync::mpsc::channel::<u64>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let _ = crate::topology::pin_to(a);
                for _ in 0..200 {
                    tx.send(ticks()).unwrap();
                    let theirs = back_rx.recv().unwrap();
                    assert!(
                        ticks() >= theirs,
                        "{src}: cpu {a} read before cpu {b}'s reading"
                    );
                }
            });
            s.spawn(move || {
                let _ = crate::topology::pin_to(b);
                for t in rx.iter() {
                    assert!(ticks() >= t, "{src}: cpu {b} read before cpu {a}'s reading");
                    back_tx.send(ticks()).unwrap();
                }
            });
        });
    }

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
        // Lower bounds are the spins; the upper ones only catch a unit
        // error (a loaded machine may deschedule a spinner for a while).
        // The bounds also catch time given to the wrong phase: Execution's
        // 15 ms floor is above the 5 ms spin in Logging.
        assert!(
            (15_000.0..1_000_000.0).contains(&us(Phase::Execution)),
            "{}",
            us(Phase::Execution)
        );
        assert!((3_000.0..1_000_000.0).contains(&us(Phase::Logging)));
        assert_eq!(ticks[Phase::Locking as usize], 0);
        // Off: nothing is counted.
        enable(false);
        switch(Phase::Execution);
        switch(Phase::Idle);
        assert_eq!(take(), [0; PHASES]);
    }
}
