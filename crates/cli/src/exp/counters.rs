//! `islands experiment counters`: the paper's Section 3 counter experiment
//! (Table 1 and Figure 2): threads increment counters in a tight loop, each
//! counter protected by its own lock.
//!
//! - [`CounterSetup`]: one counter for all threads, one per socket, one per core.
//! - [`Placement`]: `grouped` fills a socket before the next, `spread` deals
//!   consecutive threads round-robin across sockets, `os` does not pin.
//!
//! **Which counter a thread uses.** Thread `i` has a *home slot*: the CPU it
//! would get under grouped placement (the `i`-th allowed CPU in tree order:
//! socket → L3 → core → hardware thread). Its counter is the counter of the
//! home slot's socket (per-socket) or core (per-core), and that counter's
//! memory is first touched by a thread pinned to the counter's home socket.
//! Under `grouped` the thread runs on its home slot, so a per-socket counter is
//! used only by threads of its own socket. Under `spread` the same groups of
//! threads run scattered across the sockets, so every lock hand-off crosses the
//! inter-socket link: this is Figure 2's "Spread" bar. Under `os` the kernel
//! decides. On a machine with one socket spread and grouped are the same.
//!
//! **The lock** is a `parking_lot::Mutex<u64>`. Its uncontended path is one
//! compare-and-swap to acquire and one release store, the same cache-line
//! traffic as a test-and-set spinlock, so the experiment still measures the
//! cost of moving the lock's line between cores. Under contention it spins a
//! little and then parks, so under `os` placement, or with more threads than
//! CPUs, a preempted holder does not make its waiters burn their time slices
//! spinning: a pure spinlock would measure the scheduler there, not the
//! hardware. It is also the lock the engine itself uses.
//!
//! **Padding.** Each counter (lock and value together, as in the paper) is
//! aligned to and fills a 4 KiB page: its own cache line, no false sharing,
//! and its own page, so that first touch puts it on its home socket's NUMA node.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use islands::deploy::Placement;
use islands::topology::pin_to;
use islands::topology::{CpuId, CpuSet, Topology};
use islands::Error;
use islands_bench::fmt::human_rate;
use parking_lot::Mutex;
use serde::Serialize;

use super::sweep::Spread;
use super::{ratio, times, Findings, Verdict, AHEAD};
use crate::args::{list, seconds};

/// How many counters, and which threads share one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CounterSetup {
    /// One counter shared by every thread.
    Single,
    /// One counter per socket, shared by the threads whose home slot is on it.
    PerSocket,
    /// One counter per core, shared by the threads whose home slot is on it
    /// (SMT siblings share one).
    PerCore,
}

impl CounterSetup {
    pub const ALL: [CounterSetup; 3] = [
        CounterSetup::Single,
        CounterSetup::PerSocket,
        CounterSetup::PerCore,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CounterSetup::Single => "single",
            CounterSetup::PerSocket => "per-socket",
            CounterSetup::PerCore => "per-core",
        }
    }
}

impl std::fmt::Display for CounterSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CounterSetup {
    type Err = Error;
    fn from_str(s: &str) -> Result<CounterSetup, Error> {
        match s.trim() {
            "1" | "single" | "one" => Ok(CounterSetup::Single),
            "per-socket" | "socket" => Ok(CounterSetup::PerSocket),
            "per-core" | "core" => Ok(CounterSetup::PerCore),
            other => Err(Error::Config(format!(
                "unknown counter configuration '{other}' (expected 1, per-socket or per-core)"
            ))),
        }
    }
}

/// One thread of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadSlot {
    pub thread: usize,
    /// The CPU the thread is pinned to; `None` under `os` placement.
    pub cpu: Option<CpuId>,
    /// Index of the counter it increments.
    pub counter: usize,
    /// The CPU of its home slot (where grouped placement would put it).
    pub home_cpu: CpuId,
}

/// Which thread runs where and increments which counter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CounterPlan {
    pub setup: CounterSetup,
    pub placement: Placement,
    /// The CPU whose socket holds each counter's memory (first touch).
    pub counter_home: Vec<CpuId>,
    pub threads: Vec<ThreadSlot>,
    /// Sockets with at least one allowed CPU.
    pub sockets: usize,
    pub machine: String,
}

/// Allowed CPUs in tree order (socket → L3 → core → thread), one list per
/// socket that has any.
fn per_socket_cpus(t: &Topology) -> Vec<Vec<CpuId>> {
    t.sockets()
        .iter()
        .map(|s| {
            s.cores
                .iter()
                .flat_map(|&c| t.allowed_cpus_of_core(c).ids().to_vec())
                .collect::<Vec<_>>()
        })
        .filter(|v| !v.is_empty())
        .collect()
}

/// Grouped order: fill a socket before the next.
pub fn grouped_order(t: &Topology) -> Vec<CpuId> {
    per_socket_cpus(t).concat()
}

/// Spread order: consecutive threads on different sockets, round-robin (a
/// socket that runs out drops out of the rotation).
pub fn spread_order(t: &Topology) -> Vec<CpuId> {
    let lists = per_socket_cpus(t);
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|round| lists.iter().filter_map(move |l| l.get(round).copied()))
        .collect()
}

/// Plans `threads` threads (default: one per allowed CPU; more than that wrap
/// around the CPUs) on `t`.
pub fn plan(
    t: &Topology,
    setup: CounterSetup,
    placement: Placement,
    threads: Option<usize>,
) -> Result<CounterPlan, Error> {
    let grouped = grouped_order(t);
    if grouped.is_empty() {
        return Err(Error::Config("no allowed CPUs".into()));
    }
    let n = threads.unwrap_or(grouped.len());
    if n == 0 || n > 4096 {
        return Err(Error::Config(format!("--threads {n} is outside 1..=4096")));
    }
    let run_order = match placement {
        Placement::Grouped | Placement::Os => grouped.clone(),
        Placement::Spread => spread_order(t),
    };
    let key = |cpu: CpuId| -> usize {
        let core = t.core_of(cpu).expect("allowed CPUs exist");
        match setup {
            CounterSetup::Single => 0,
            CounterSetup::PerSocket => core.socket,
            CounterSetup::PerCore => core.index,
        }
    };
    // Dense counter indices in order of first use by a home slot.
    let mut keys: Vec<usize> = Vec::new();
    let mut counter_home = Vec::new();
    let mut slots = Vec::with_capacity(n);
    for i in 0..n {
        let home = grouped[i % grouped.len()];
        let k = key(home);
        let counter = match keys.iter().position(|&x| x == k) {
            Some(c) => c,
            None => {
                keys.push(k);
                counter_home.push(home);
                keys.len() - 1
            }
        };
        slots.push(ThreadSlot {
            thread: i,
            cpu: (placement != Placement::Os).then(|| run_order[i % run_order.len()]),
            counter,
            home_cpu: home,
        });
    }
    Ok(CounterPlan {
        setup,
        placement,
        counter_home,
        threads: slots,
        sockets: per_socket_cpus(t).len(),
        machine: t.name().to_string(),
    })
}

impl CounterPlan {
    pub fn counters(&self) -> usize {
        self.counter_home.len()
    }

    /// The most sockets that one counter's threads run on; `None` when the
    /// threads are not pinned.
    pub fn span(&self, t: &Topology) -> Option<usize> {
        let mut most = 0;
        for c in 0..self.counters() {
            let mut sockets: Vec<usize> = Vec::new();
            for s in self.threads.iter().filter(|s| s.counter == c) {
                let socket = t.socket_of(s.cpu?)?;
                if !sockets.contains(&socket) {
                    sockets.push(socket);
                }
            }
            most = most.max(sockets.len());
        }
        Some(most)
    }

    /// A table: thread, CPU, socket, core, counter, the counter's socket.
    pub fn render(&self, t: &Topology) -> String {
        let mut out = format!(
            "{} counter(s) ({}), {} placement, {} threads on {} ({})\n",
            self.counters(),
            self.setup,
            self.placement,
            self.threads.len(),
            self.machine,
            t.summary()
        );
        out.push_str("thread   cpu  socket  core  counter  counter-socket\n");
        for s in &self.threads {
            let (cpu, socket, core) = match s.cpu {
                Some(c) => {
                    let core = t.core_of(c).expect("planned CPUs exist");
                    (
                        c.to_string(),
                        core.socket.to_string(),
                        core.index.to_string(),
                    )
                }
                None => ("-".into(), "-".into(), "-".into()),
            };
            let csock = t
                .socket_of(self.counter_home[s.counter])
                .expect("planned CPUs exist");
            let _ = writeln!(
                out,
                "{:>6} {:>5} {:>7} {:>5} {:>8} {:>15}",
                s.thread, cpu, socket, core, s.counter, csock
            );
        }
        out
    }
}

/// A lock-protected counter on its own page (so its own cache line).
#[repr(C, align(4096))]
pub struct PaddedCounter {
    pub value: Mutex<u64>,
}

/// What one run did.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// Increments the threads counted themselves.
    pub increments: u64,
    pub seconds: f64,
    /// Final value of each counter.
    pub per_counter: Vec<u64>,
    /// Increments of each thread.
    pub per_thread: Vec<u64>,
}

impl RunResult {
    pub fn rate(&self) -> f64 {
        self.increments as f64 / self.seconds
    }
}

/// Increments checked for the stop flag at once: long enough that the flag
/// load costs nothing, short enough that stopping is prompt.
const BATCH: u64 = 64;

/// Runs `plan` on this machine for `duration`. Errors: zero duration, a CPU
/// that cannot be pinned, or lost increments (the threads' counts disagree
/// with the counters: a broken lock).
pub fn run_once(plan: &CounterPlan, duration: Duration) -> Result<RunResult, Error> {
    if duration.is_zero() {
        return Err(Error::Config("the duration must be more than 0".into()));
    }
    let pin = plan.placement != Placement::Os;
    // First touch of every counter by a thread on its home CPU.
    let counters: Vec<Box<PaddedCounter>> = std::thread::scope(|s| {
        let hs: Vec<_> = plan
            .counter_home
            .iter()
            .map(|&home| {
                s.spawn(move || -> Result<Box<PaddedCounter>, Error> {
                    if pin {
                        pin_to(home as usize)?;
                    }
                    Ok(Box::new(PaddedCounter {
                        value: Mutex::new(0),
                    }))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("counter allocation thread panicked"))
            .collect::<Result<Vec<_>, Error>>()
    })?;
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(plan.threads.len() + 1);
    let (per_thread, seconds) = std::thread::scope(|s| {
        let hs: Vec<_> = plan
            .threads
            .iter()
            .map(|slot| {
                let counter = &counters[slot.counter].value;
                let (stop, barrier) = (&stop, &barrier);
                s.spawn(move || -> Result<u64, Error> {
                    let pinned = match slot.cpu {
                        Some(cpu) => pin_to(cpu as usize),
                        None => Ok(()),
                    };
                    barrier.wait();
                    pinned?;
                    let mut mine = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..BATCH {
                            *counter.lock() += 1;
                        }
                        mine += BATCH;
                    }
                    Ok(mine)
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let counts = hs
            .into_iter()
            .map(|h| h.join().expect("counter thread panicked"))
            .collect::<Result<Vec<u64>, Error>>();
        (counts, t0.elapsed().as_secs_f64())
    });
    let per_thread = per_thread?;
    let per_counter: Vec<u64> = counters.iter().map(|c| *c.value.lock()).collect();
    let increments: u64 = per_thread.iter().sum();
    let on_counters: u64 = per_counter.iter().sum();
    if increments != on_counters {
        return Err(Error::Config(format!(
            "lost increments: the threads counted {increments}, the counters hold {on_counters}"
        )));
    }
    Ok(RunResult {
        increments,
        seconds,
        per_counter,
        per_thread,
    })
}

/// What to run.
#[derive(Clone, Debug)]
pub struct ExperimentConfig {
    pub setups: Vec<CounterSetup>,
    pub placements: Vec<Placement>,
    /// Default: one per allowed CPU.
    pub threads: Option<usize>,
    pub duration: Duration,
    pub reps: usize,
}

impl Default for ExperimentConfig {
    fn default() -> ExperimentConfig {
        ExperimentConfig {
            setups: CounterSetup::ALL.to_vec(),
            placements: vec![Placement::Spread, Placement::Grouped, Placement::Os],
            threads: None,
            duration: Duration::from_secs(2),
            reps: 3,
        }
    }
}

impl ExperimentConfig {
    pub fn validate(&self) -> Result<(), Error> {
        if self.duration.is_zero() {
            return Err(Error::Config(
                "--duration must be more than 0 seconds".into(),
            ));
        }
        if self.reps == 0 {
            return Err(Error::Config("--reps must be at least 1".into()));
        }
        if self.setups.is_empty() || self.placements.is_empty() {
            return Err(Error::Config(
                "at least one configuration and one placement are needed".into(),
            ));
        }
        Ok(())
    }
}

/// One configuration × placement over its repetitions.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub setup: CounterSetup,
    pub placement: Placement,
    pub counters: usize,
    pub threads: usize,
    /// Increments per second of each repetition.
    pub rates: Vec<f64>,
    /// Median, mean and standard deviation of `rates`.
    #[serde(rename = "increments_per_s")]
    pub stats: Spread,
    /// Median over the single-counter median of the same placement, if run.
    pub speedup: Option<f64>,
    /// The most sockets that one counter's threads run on; `None` when the
    /// threads are not pinned.
    pub span: Option<usize>,
}

/// The whole experiment.
#[derive(Clone, Debug, Serialize)]
pub struct CounterReport {
    pub machine: String,
    pub topology: String,
    pub sockets: usize,
    pub duration_s: f64,
    pub reps: usize,
    pub lock: &'static str,
    pub cells: Vec<Cell>,
    pub notes: Vec<String>,
    pub verdict: Verdict,
}

/// The paper's figures this experiment repeats.
pub const FIGURE: &str = "paper Table 1 and Fig. 2";

/// The paper's claim, from its Section 3 (80 threads on 8 sockets of 10 cores).
pub const CLAIM: &str = "More counters, each behind its own lock, give super-linear speedups: \
a counter per socket 18.5x one counter, a counter per core 517x, and less variation (std. dev. \
9.3%, 0.9%, 0.03%). With a counter per socket, threads grouped on their counter's socket beat \
threads spread over the sockets, and the OS's placement is slower and varies more.";

/// What the cells show of [`CLAIM`] on a machine with `sockets` sockets.
///
/// Table 1: for each placement, every setup with more counters than the one
/// before it (single, per socket, per core) must speed up super-linearly, by
/// more than its ratio of counters. Figure 2: with per-socket counters,
/// grouped must be [`AHEAD`] of spread when spread runs a counter's threads
/// on more sockets than grouped does, and ahead of the OS on a machine of two
/// sockets or more. What this machine or these options cannot tell apart is
/// said, not checked; so is the variation.
pub fn verdict(cells: &[Cell], sockets: usize, reps: usize) -> Verdict {
    let mut f = Findings::default();
    let cell =
        |s: CounterSetup, p: Placement| cells.iter().find(|c| c.setup == s && c.placement == p);
    let mut placements: Vec<Placement> = Vec::new();
    for c in cells {
        if !placements.contains(&c.placement) {
            placements.push(c.placement);
        }
    }
    let (mut table1, mut fig2) = (0, 0);
    let mut same_counters: Vec<String> = Vec::new();
    for &p in &placements {
        let row: Vec<&Cell> = CounterSetup::ALL
            .iter()
            .filter_map(|&s| cell(s, p))
            .collect();
        if row.len() < 2 {
            continue;
        }
        let parts: Vec<String> = row
            .iter()
            .map(|c| {
                format!(
                    "{} ({} counter{}) {} M/s, std. dev. {:.2}%",
                    c.setup,
                    c.counters,
                    if c.counters == 1 { "" } else { "s" },
                    millions(c.stats.median),
                    c.stats.std_pct
                )
            })
            .collect();
        f.observed.push(format!("{p}: {}", parts.join("; ")));
        for w in row.windows(2) {
            if w[1].counters > w[0].counters {
                if let Some(x) = ratio(w[1].stats.median, w[0].stats.median) {
                    f.checks
                        .push(x > w[1].counters as f64 / w[0].counters as f64);
                    table1 += 1;
                }
            } else {
                let why = format!(
                    "{} has as many counters as {} here ({}), so the two measure the same thing",
                    w[1].setup, w[0].setup, w[1].counters
                );
                if !same_counters.contains(&why) {
                    same_counters.push(why);
                }
            }
        }
    }
    f.caveats.extend(same_counters);
    let mut untested = false;
    match cell(CounterSetup::PerSocket, Placement::Grouped) {
        Some(g) => {
            for other in [Placement::Spread, Placement::Os] {
                let Some(o) = cell(CounterSetup::PerSocket, other) else {
                    continue;
                };
                let x = ratio(o.stats.median, g.stats.median);
                f.observed.push(format!(
                    "per-socket counters: {other} {} M/s = {} grouped's {} M/s; std. dev. {:.2}% against {:.2}%",
                    millions(o.stats.median),
                    times(x),
                    millions(g.stats.median),
                    o.stats.std_pct,
                    g.stats.std_pct
                ));
                let testable = match other {
                    Placement::Os => sockets >= 2,
                    _ => o.span > g.span,
                };
                match x {
                    Some(x) if testable => {
                        f.checks.push(x * AHEAD < 1.0);
                        fig2 += 1;
                    }
                    _ => untested = true,
                }
            }
        }
        None if placements.len() > 1 => f
            .caveats
            .push("per-socket counters with grouped threads were not run: Figure 2 has nothing to compare against".into()),
        None => {}
    }
    if untested {
        f.caveats.push(if sockets < 2 {
            "Figure 2 (grouped against spread and the OS) is not tested on one socket; \
             --plan --topology 4x6 shows where the threads would go on four sockets"
                .to_string()
        } else {
            "grouped against spread is not tested: spread runs each counter's threads on no more \
             sockets than grouped (too few threads for the sockets; the default is one per CPU)"
                .to_string()
        });
    }
    f.observed.push(format!(
        "checked: {table1} Table 1 speedup(s), each more than its ratio of counters; {fig2} Figure 2 placement(s), grouped {:.0}% ahead or more",
        (AHEAD - 1.0) * 100.0
    ));
    f.few_reps(reps);
    f.verdict()
}

/// A rate per second in millions: two decimals, four below 0.1 M.
fn millions(rate: f64) -> String {
    let m = rate / 1e6;
    if m < 0.1 {
        format!("{m:.4}")
    } else {
        format!("{m:.2}")
    }
}

/// Notes on what this machine can and cannot show.
pub fn machine_notes(t: &Topology, cfg: &ExperimentConfig) -> Vec<String> {
    let mut notes = Vec::new();
    let sockets = per_socket_cpus(t).len();
    if sockets == 1 {
        notes.push(
            "this machine has 1 socket: spread and grouped place threads identically; \
             the islands effect needs several sockets"
                .to_string(),
        );
    }
    let cpus = grouped_order(t).len();
    let threads = cfg.threads.unwrap_or(cpus);
    if threads > cpus {
        notes.push(format!(
            "{threads} threads on {cpus} CPUs: oversubscribed, threads share CPUs"
        ));
    }
    if cfg.setups.contains(&CounterSetup::PerCore)
        && threads <= t.allowed_cores().len()
        && threads <= cpus
    {
        notes.push("per-core: one thread per counter, so no lock is ever contended".to_string());
    }
    if cfg.placements.contains(&Placement::Os) {
        notes.push("os: threads are not pinned; the kernel places them".to_string());
    }
    notes
}

/// Runs every configuration × placement `reps` times; `progress` gets a line per run.
pub fn run_experiment(
    t: &Topology,
    cfg: &ExperimentConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<CounterReport, Error> {
    cfg.validate()?;
    let mut cells = Vec::new();
    for &setup in &cfg.setups {
        for &placement in &cfg.placements {
            let p = plan(t, setup, placement, cfg.threads)?;
            let mut rates = Vec::with_capacity(cfg.reps);
            for rep in 0..cfg.reps {
                let r = run_once(&p, cfg.duration)?;
                rates.push(r.rate());
                progress(&format!(
                    "{setup} / {placement}: run {}/{}: {} increments/s",
                    rep + 1,
                    cfg.reps,
                    human_rate(r.rate())
                ));
            }
            cells.push(Cell {
                setup,
                placement,
                counters: p.counters(),
                threads: p.threads.len(),
                stats: Spread::of(&rates),
                rates,
                speedup: None,
                span: p.span(t),
            });
        }
    }
    let base: Vec<(Placement, f64)> = cells
        .iter()
        .filter(|c| c.setup == CounterSetup::Single)
        .map(|c| (c.placement, c.stats.median))
        .collect();
    for c in &mut cells {
        c.speedup = base
            .iter()
            .find(|(p, _)| *p == c.placement)
            .filter(|(_, m)| *m > 0.0)
            .map(|(_, m)| c.stats.median / m);
    }
    let sockets = per_socket_cpus(t).len();
    Ok(CounterReport {
        machine: t.name().to_string(),
        topology: t.summary(),
        verdict: verdict(&cells, sockets, cfg.reps),
        sockets,
        duration_s: cfg.duration.as_secs_f64(),
        reps: cfg.reps,
        lock: "parking_lot::Mutex<u64>, one per 4 KiB page",
        cells,
        notes: machine_notes(t, cfg),
    })
}

impl CounterReport {
    /// A table like the paper's Table 1, one row per configuration × placement,
    /// then the notes, the paper's claim and the verdict.
    pub fn render_table(&self) -> String {
        let mut out = format!(
            "counters: {} ({}); {} x {} s per cell; lock: {}\n\n",
            self.machine, self.topology, self.reps, self.duration_s, self.lock
        );
        out.push_str(
            "setup       placement  counters  threads  median (M/s)  speedup  std.dev (M/s)  std.dev (%)\n",
        );
        for c in &self.cells {
            let speedup = c.speedup.map_or("-".to_string(), |s| format!("{s:.1}x"));
            let _ = writeln!(
                out,
                "{:<11} {:<9} {:>9} {:>8} {:>13.2} {:>8} {:>14.3} {:>12.2}",
                c.setup.name(),
                c.placement.name(),
                c.counters,
                c.threads,
                c.stats.median / 1e6,
                speedup,
                c.stats.std / 1e6,
                c.stats.std_pct
            );
        }
        out + &super::notes_and_verdict(&self.notes, &self.verdict, FIGURE, CLAIM)
    }

    /// CSV, one row per cell, the repetitions' rates joined by `;`.
    pub fn to_csv(&self) -> String {
        let mut out = format!(
            "setup,placement,counters,threads,reps,duration_s,{},speedup,rates_per_s\n",
            Spread::csv_header("per_s")
        );
        for c in &self.cells {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{}",
                c.setup,
                c.placement,
                c.counters,
                c.threads,
                self.reps,
                self.duration_s,
                c.stats.csv(),
                c.speedup.map_or(String::new(), |s| format!("{s:.3}")),
                super::rates_csv(&c.rates)
            );
        }
        out
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes")
    }
}

#[derive(Args, Debug)]
#[command(
    after_help = "Thread i's counter is the counter of the socket (or core) where grouped \
placement puts thread i; spread runs the same groups scattered across the sockets, as in the \
paper's Figure 2. The lock is a parking_lot::Mutex, one counter per 4 KiB page."
)]
pub struct CountersArgs {
    /// Counter configurations, comma-separated: 1 (one shared counter), per-socket, per-core.
    #[arg(long, value_name = "LIST", default_value = "1,per-socket,per-core")]
    configs: String,
    /// Placements, comma-separated: spread, grouped, os (no pinning).
    #[arg(long, value_name = "LIST", default_value = "spread,grouped,os")]
    placements: String,
    /// Threads (default: one per allowed CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// Seconds per run.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Runs per configuration and placement.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write the results as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Print which thread goes where (CPU, socket, core, counter) and do not run.
    #[arg(long)]
    plan: bool,
    /// Plan on a described machine (4x6, 2x12x2, sockets=…); only with --plan.
    #[arg(long, value_name = "SPEC")]
    topology: Option<String>,
    /// Use only these CPUs (numactl syntax, e.g. 0-5,12-17).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// No per-run progress lines.
    #[arg(long)]
    quiet: bool,
}

fn machine(topology: Option<&str>, cpus: Option<&str>) -> Result<Topology, String> {
    let t = match topology {
        Some(spec) => Topology::described(spec),
        None => Topology::discover(),
    }
    .map_err(|e| e.to_string())?;
    match cpus {
        None => Ok(t),
        Some(list) => {
            let set = if topology.is_some() {
                CpuSet::parse(list).map_err(|e| e.to_string())?
            } else {
                t.parse_cpu_list(list).map_err(|e| e.to_string())?
            };
            if set.is_empty() {
                return Err(format!("--cpus '{list}' names no CPU"));
            }
            t.with_allowed(&set).map_err(|e| e.to_string())
        }
    }
}

pub fn run_counters(a: &CountersArgs) -> Result<(), String> {
    let setups = list("configs", &a.configs, |p| {
        p.parse::<CounterSetup>().map_err(|e| match e {
            islands::Error::Config(s) => s,
            e => e.to_string(),
        })
    })?;
    let placements = list("placements", &a.placements, |p| {
        p.parse::<Placement>().map_err(|e| e.to_string())
    })?;
    let duration = seconds("duration", a.duration)?;
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if a.topology.is_some() && !a.plan {
        return Err(
            "--topology describes a machine this process does not run on: add --plan to print \
             where the threads would go, or drop --topology to run here"
                .into(),
        );
    }
    let t = machine(a.topology.as_deref(), a.cpus.as_deref())?;
    let cfg = ExperimentConfig {
        setups,
        placements,
        threads: a.threads,
        duration,
        reps: a.reps,
    };
    cfg.validate().map_err(|e| e.to_string())?;
    if a.plan {
        for (i, &setup) in cfg.setups.iter().enumerate() {
            for (j, &placement) in cfg.placements.iter().enumerate() {
                let p = plan(&t, setup, placement, cfg.threads).map_err(|e| e.to_string())?;
                if i + j > 0 {
                    println!();
                }
                print!("{}", p.render(&t));
            }
        }
        for n in machine_notes(&t, &cfg) {
            println!("\nnote: {n}");
        }
        return Ok(());
    }
    let report =
        run_experiment(&t, &cfg, &mut super::progress_lines(a.quiet)).map_err(|e| e.to_string())?;
    super::print_and_write(
        &report.render_table(),
        a.csv.as_deref(),
        || report.to_csv(),
        a.json.as_deref(),
        || report.to_json_pretty(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(t: &Topology, cpu: CpuId) -> usize {
        t.socket_of(cpu).unwrap()
    }

    #[test]
    fn grouped_per_socket_counters_get_the_threads_of_their_socket() {
        let t = Topology::described("4x6").unwrap();
        let p = plan(&t, CounterSetup::PerSocket, Placement::Grouped, None).unwrap();
        assert_eq!(p.threads.len(), 24);
        assert_eq!(p.counters(), 4);
        for s in &p.threads {
            let cpu = s.cpu.unwrap();
            assert_eq!(
                s.thread / 6,
                socket(&t, cpu),
                "grouped fills socket by socket"
            );
            assert_eq!(socket(&t, p.counter_home[s.counter]), socket(&t, cpu));
        }
        // Each counter has exactly the 6 threads of its socket.
        for c in 0..4 {
            let users: Vec<usize> = p
                .threads
                .iter()
                .filter(|s| s.counter == c)
                .map(|s| socket(&t, s.cpu.unwrap()))
                .collect();
            assert_eq!(users, vec![c; 6]);
        }
    }

    #[test]
    fn spread_puts_consecutive_threads_on_different_sockets() {
        let t = Topology::described("4x6").unwrap();
        let p = plan(&t, CounterSetup::PerSocket, Placement::Spread, None).unwrap();
        assert_eq!(p.counters(), 4);
        let cpus: Vec<CpuId> = p.threads.iter().map(|s| s.cpu.unwrap()).collect();
        for w in cpus.windows(2) {
            assert_ne!(socket(&t, w[0]), socket(&t, w[1]));
        }
        for (i, &c) in cpus.iter().enumerate() {
            assert_eq!(socket(&t, c), i % 4);
        }
        // Every CPU used once.
        let mut sorted = cpus.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..24).collect::<Vec<_>>());
        // A counter's 6 threads are the same groups as under grouped, but run on all 4 sockets.
        for c in 0..4 {
            let mut sockets: Vec<usize> = p
                .threads
                .iter()
                .filter(|s| s.counter == c)
                .map(|s| socket(&t, s.cpu.unwrap()))
                .collect();
            assert_eq!(sockets.len(), 6);
            sockets.sort_unstable();
            sockets.dedup();
            assert_eq!(sockets, vec![0, 1, 2, 3]);
        }
    }

    #[test]
    fn single_per_core_and_os_plans() {
        let t = Topology::described("4x6").unwrap();
        let single = plan(&t, CounterSetup::Single, Placement::Spread, None).unwrap();
        assert_eq!(single.counters(), 1);
        assert!(single.threads.iter().all(|s| s.counter == 0));
        let core = plan(&t, CounterSetup::PerCore, Placement::Grouped, None).unwrap();
        assert_eq!(core.counters(), 24);
        for s in &core.threads {
            assert_eq!(s.counter, s.thread);
            assert_eq!(
                t.core_of(s.cpu.unwrap()).unwrap().index,
                t.core_of(core.counter_home[s.counter]).unwrap().index
            );
        }
        let os = plan(&t, CounterSetup::PerSocket, Placement::Os, Some(8)).unwrap();
        assert!(os.threads.iter().all(|s| s.cpu.is_none()));
        assert_eq!(os.counters(), 2);
        // SMT: siblings share a per-core counter under grouped placement.
        let smt = Topology::described("2x2x2").unwrap();
        let p = plan(&smt, CounterSetup::PerCore, Placement::Grouped, None).unwrap();
        assert_eq!(p.counters(), 4);
        assert_eq!(p.threads[0].counter, p.threads[1].counter);
        assert_ne!(p.threads[1].counter, p.threads[2].counter);
    }

    #[test]
    fn one_socket_spread_equals_grouped() {
        let t = Topology::described("1x4").unwrap();
        assert_eq!(spread_order(&t), grouped_order(&t));
        let notes = machine_notes(&t, &ExperimentConfig::default());
        assert!(notes[0].contains("1 socket"));
    }

    #[test]
    fn names_parse_and_bad_ones_fail() {
        assert_eq!("1".parse::<CounterSetup>().unwrap(), CounterSetup::Single);
        assert_eq!(
            "per-socket".parse::<CounterSetup>().unwrap(),
            CounterSetup::PerSocket
        );
        assert_eq!(
            "per-core".parse::<CounterSetup>().unwrap(),
            CounterSetup::PerCore
        );
        assert!("per-rack".parse::<CounterSetup>().is_err());
        let t = Topology::described("1x2").unwrap();
        assert!(plan(&t, CounterSetup::Single, Placement::Grouped, Some(0)).is_err());
        let cfg = ExperimentConfig {
            reps: 0,
            ..ExperimentConfig::default()
        };
        assert!(cfg.validate().is_err());
        let cfg = ExperimentConfig {
            duration: Duration::ZERO,
            ..ExperimentConfig::default()
        };
        assert!(cfg.validate().is_err());
    }

    fn cell(setup: CounterSetup, placement: Placement, counters: usize, rates: &[f64]) -> Cell {
        // A counter's threads: one socket when grouped, all 8 when spread.
        let span = match placement {
            Placement::Grouped => Some(1),
            Placement::Spread => Some(8),
            Placement::Os => None,
        };
        Cell {
            setup,
            placement,
            counters,
            threads: 80,
            rates: rates.to_vec(),
            stats: Spread::of(rates),
            speedup: None,
            span,
        }
    }

    /// Table 1 and Figure 2's cells, in millions per second.
    fn paper_cells(spread_per_socket: f64) -> Vec<Cell> {
        use CounterSetup::*;
        let m = |x: f64| [x * 0.98e6, x * 1e6, x * 1.03e6];
        vec![
            cell(Single, Placement::Grouped, 1, &m(18.4)),
            cell(PerSocket, Placement::Grouped, 8, &m(341.7)),
            cell(PerCore, Placement::Grouped, 80, &m(9527.8)),
            cell(PerSocket, Placement::Spread, 8, &m(spread_per_socket)),
            cell(PerSocket, Placement::Os, 8, &m(200.0)),
        ]
    }

    #[test]
    fn the_verdict_shows_the_papers_trend_and_fails_without_it() {
        let v = verdict(&paper_cells(120.0), 8, 5);
        assert_eq!(v.reproduced, Some(true), "{v:?}");
        assert!(v.observed[0].starts_with("grouped: single (1 counter) 18.40 M/s"));
        assert!(
            v.observed
                .last()
                .unwrap()
                .starts_with("checked: 2 Table 1 speedup(s)")
                && v.observed
                    .last()
                    .unwrap()
                    .contains("; 2 Figure 2 placement(s)"),
            "{v:?}"
        );
        assert!(v.caveats.is_empty(), "{v:?}");
        // Faster, but not super-linear: 2x the counters, 1.5x the rate.
        let linear = [
            cell(CounterSetup::PerSocket, Placement::Grouped, 4, &[10e6]),
            cell(CounterSetup::PerCore, Placement::Grouped, 8, &[15e6]),
        ];
        assert_eq!(verdict(&linear, 8, 5).reproduced, Some(false));
        // Grouped only 5% ahead of spread: within the noise, not the paper's effect.
        assert_eq!(verdict(&paper_cells(325.0), 8, 5).reproduced, Some(false));
        // Spread beating grouped on 8 sockets contradicts Figure 2.
        let v = verdict(&paper_cells(400.0), 8, 5);
        assert_eq!(v.reproduced, Some(false), "{v:?}");
        // A counter per core slower than one counter contradicts Table 1.
        let mut cells = paper_cells(120.0);
        cells[2].stats = Spread::of(&[10e6]);
        assert_eq!(verdict(&cells, 8, 5).reproduced, Some(false));
    }

    #[test]
    fn one_socket_tests_only_what_has_more_counters() {
        use CounterSetup::*;
        // This machine's shape: 1 socket of 2 cores; per-socket is one counter too.
        let mut cells = vec![
            cell(Single, Placement::Grouped, 1, &[30e6, 31e6]),
            cell(PerSocket, Placement::Grouped, 1, &[35e6, 29e6]),
            cell(PerSocket, Placement::Spread, 1, &[40e6]),
        ];
        cells[2].span = Some(1);
        let v = verdict(&cells, 1, 2);
        assert_eq!(v.reproduced, None, "nothing here can be tested: {v:?}");
        assert!(v.caveats[0].contains("per-socket has as many counters as single here (1)"));
        assert!(v
            .caveats
            .iter()
            .any(|c| c.contains("not tested on one socket")));
        assert!(v.caveats.iter().any(|c| c.contains("2 repetitions")));
        cells.push(cell(PerCore, Placement::Grouped, 2, &[300e6]));
        assert_eq!(verdict(&cells, 1, 2).reproduced, Some(true));
        cells[3].stats = Spread::of(&[20e6]);
        assert_eq!(verdict(&cells, 1, 2).reproduced, Some(false));
    }

    #[test]
    fn spread_that_runs_where_grouped_does_is_not_tested() {
        use CounterSetup::*;
        // Two sockets, but one thread per counter: spread's threads sit on
        // one socket per counter, as grouped's do.
        let mut same = vec![
            cell(PerSocket, Placement::Grouped, 2, &[300e6]),
            cell(PerSocket, Placement::Spread, 2, &[330e6]),
        ];
        same[1].span = Some(1);
        let v = verdict(&same, 2, 5);
        assert_eq!(v.reproduced, None, "{v:?}");
        assert!(
            v.caveats
                .iter()
                .any(|c| c.contains("no more sockets than grouped")),
            "{v:?}"
        );
        // Spread over both sockets and slower: tested, and it shows.
        same[1].span = Some(2);
        same[1].stats = Spread::of(&[100e6]);
        assert_eq!(verdict(&same, 2, 5).reproduced, Some(true));
    }

    #[test]
    fn a_short_run_loses_no_increments() {
        let t = Topology::discover().unwrap();
        for setup in CounterSetup::ALL {
            for placement in [Placement::Grouped, Placement::Os] {
                // Four threads even on a small machine, so locks are contended.
                let p = plan(&t, setup, placement, Some(4)).unwrap();
                let r = run_once(&p, Duration::from_millis(200)).unwrap();
                assert!(r.increments > 0);
                assert!(r.per_thread.iter().all(|&n| n > 0), "{:?}", r.per_thread);
                assert_eq!(r.per_counter.iter().sum::<u64>(), r.increments);
                assert_eq!(r.per_counter.len(), p.counters());
                // Each counter holds exactly the increments of its threads.
                for (c, &v) in r.per_counter.iter().enumerate() {
                    let mine: u64 = p
                        .threads
                        .iter()
                        .zip(&r.per_thread)
                        .filter(|(s, _)| s.counter == c)
                        .map(|(_, n)| n)
                        .sum();
                    assert_eq!(mine, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod cli_tests {
    use crate::exp::{run_experiment, ExperimentArgs};
    use clap::{CommandFactory, Parser, Subcommand};

    /// The shape main.rs gives the command.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        Experiment(ExperimentArgs),
    }

    fn run(argv: &[&str]) -> Result<(), String> {
        let mut full = vec!["islands", "experiment", "counters", "--quiet"];
        full.extend_from_slice(argv);
        let Cmd::Experiment(a) = Cli::try_parse_from(full).unwrap().command;
        run_experiment(&a)
    }

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_input_is_one_error() {
        for (argv, want) in [
            (&["--configs", "per-rack"][..], "per-rack"),
            (&["--duration", "0"], "--duration"),
            (&["--reps", "0"], "--reps"),
            (&["--cpus", "9999"], "9999"),
            (&["--placements", "wild"], "wild"),
            (&["--topology", "4x6"], "--plan"),
            (&["--topology", "4x6", "--plan", "--cpus", "30"], "30"),
        ] {
            let e = run(argv).unwrap_err();
            assert!(e.contains(want), "{argv:?}: {e}");
            assert!(!e.contains('\n'), "{argv:?}: one line: {e}");
        }
    }

    #[test]
    fn plans_on_a_described_machine_and_runs_here() {
        run(&["--topology", "4x6", "--plan"]).unwrap();
        let dir = std::env::temp_dir().join(format!("islands-counters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (csv, json) = (dir.join("c.csv"), dir.join("c.json"));
        run(&[
            "--duration",
            "0.1",
            "--reps",
            "2",
            "--configs",
            "1,per-core",
            "--placements",
            "grouped",
            "--csv",
            csv.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .unwrap();
        let csv = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(json["cells"].as_array().unwrap().len(), 2);
        assert_eq!(json["verdict"]["observed"].as_array().unwrap().len(), 2);
        assert!(
            json["cells"][0]["increments_per_s"]["median"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
