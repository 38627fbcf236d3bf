//! `islands experiment placement`: the counters experiment (the paper's
//! Table 1 / Figure 2) with real transactions, in the spirit of its Figure 3.
//!
//! One shared-everything island (`--islands 1`, cc `no_wait` unless told,
//! durability off) holds the paper's microbenchmark table. Its N workers
//! (default: one per allowed CPU) are pinned where [`deploy::plan`] puts an
//! island's workers under each placement ([`IslandPlan::worker_cpu`]):
//! `grouped` fills a socket before the next, `spread` deals consecutive
//! workers to different sockets, `os` pins nothing. The same workers run
//! read-only and update transactions of `--n` rows of their home site.
//!
//! The table is loaded once, by a thread on grouped worker 0's CPU (so its
//! memory is first touched on that CPU's NUMA node), and every run reuses it.
//! Runs are interleaved: repetition r runs every placement before
//! repetition r + 1 starts, so the drift of a shared machine is spread over
//! the placements instead of biasing one of them.
//!
//! What a machine can show is said in the notes: on one socket spread and
//! grouped put the workers on the same CPUs, and with one worker per allowed
//! CPU they use the same CPUs on any machine (in another order). A described
//! machine (`--topology 4x6`) is planned only: threads cannot run on CPUs
//! that do not exist.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use islands::cc::CcKind;
use islands::deploy::{self, DeploySpec, IslandPlan, Islands, Placement, Plan};
use islands::island::{Island, IslandConfig};
use islands::topology::{pin_to, CpuId, CpuSet, Topology};
use islands_bench::driver::{self, DriverConfig, WorkerSpec};
use islands_bench::fmt::{human_rate, thousands};
use islands_bench::progress::DisplayMode;
use islands_workloads::micro::{self, Micro, MicroConfig};
use serde::Serialize;

use super::sweep::Spread;
use super::{ratio, times, Findings, Verdict, AHEAD};
use crate::args::{list, seconds};

/// Runs the microbenchmark on one island with its workers placed spread,
/// grouped and by the OS.
#[derive(Args, Debug)]
#[command(
    after_help = "Worker i runs where `islands bench --islands 1 --placement P` would put it: grouped \
fills a socket (one worker per core, then SMT siblings) before the next, spread deals consecutive \
workers to different sockets, os does not pin. Worker i's home site is site i, so with 0% multisite \
the workers share no rows (worker i's home is site i modulo the sites, one site per core); --multisite P makes P% of the transactions read rows of every site. \
With one worker per allowed CPU, spread and grouped use the same CPUs: use fewer workers than CPUs \
(4 on a 4-socket machine, as in the paper's Figure 3) to see the difference."
)]
pub struct PlacementArgs {
    /// Placements, comma-separated: spread, grouped, os (no pinning).
    #[arg(long, value_name = "LIST", default_value = "spread,grouped,os")]
    placements: String,
    /// Transactions, comma-separated: read-only, update.
    #[arg(long, value_name = "LIST", default_value = "read-only,update")]
    modes: String,
    /// Worker threads of the island (default: one per allowed CPU).
    #[arg(long)]
    workers: Option<usize>,
    /// Concurrency control of the island: no_wait, wait_die, occ (none needs --workers 1).
    #[arg(long, default_value = "no_wait")]
    cc: String,
    /// Rows in the table (the paper: 240,000).
    #[arg(long, default_value_t = 240_000)]
    rows: u64,
    /// Rows read or updated per transaction.
    #[arg(long = "n", default_value_t = 10)]
    n: usize,
    /// Percentage of multisite transactions (one row of the home site, the others from
    /// the whole table): rows the workers share.
    #[arg(long, default_value_t = 0)]
    multisite: u32,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 1.5)]
    duration: f64,
    /// Seconds of warm-up before each run.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Runs per transaction kind and placement.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Seed of the request generators (repetition r uses seed + r, the same for every placement).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the results as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Print which worker goes where (CPU, socket, core) and do not run.
    #[arg(long)]
    plan: bool,
    /// Plan on a described machine (4x6, 2x12x2, sockets=…); only plans, like --plan.
    #[arg(long, value_name = "SPEC")]
    topology: Option<String>,
    /// No per-run progress lines.
    #[arg(long)]
    quiet: bool,
}

/// What to run, checked.
#[derive(Clone, Debug)]
pub struct PlacementConfig {
    pub placements: Vec<Placement>,
    /// `false`: read-only, `true`: update; in run order.
    pub modes: Vec<bool>,
    pub workers: usize,
    pub cc: CcKind,
    pub rows: u64,
    pub n: usize,
    pub multisite: u32,
    pub warmup: Duration,
    pub duration: Duration,
    pub reps: usize,
    pub seed: u64,
}

fn mode_name(update: bool) -> &'static str {
    if update {
        "update"
    } else {
        "read-only"
    }
}

/// Where the workers of one placement go.
struct Placed {
    placement: Placement,
    plan: Plan,
    /// Worker i's CPU; `None` when not pinned.
    cpus: Vec<Option<CpuId>>,
}

impl Placed {
    fn island(&self) -> &IslandPlan {
        &self.plan.islands()[0]
    }

    fn workers(&self) -> Vec<WorkerSpec> {
        self.cpus
            .iter()
            .map(|c| WorkerSpec {
                island: 0,
                cpu: c.map(|c| c as usize),
            })
            .collect()
    }

    /// Distinct sockets the workers are pinned on; `None` when not pinned.
    fn sockets(&self, t: &Topology) -> Option<usize> {
        if self.cpus.iter().any(Option::is_none) {
            return None;
        }
        let mut s: Vec<usize> = self
            .cpus
            .iter()
            .flatten()
            .filter_map(|&c| t.socket_of(c))
            .collect();
        s.sort_unstable();
        s.dedup();
        Some(s.len())
    }
}

/// Plans one shared-everything island of `cfg.workers` workers under `placement`.
fn place(t: &Topology, cfg: &PlacementConfig, placement: Placement) -> Result<Placed, String> {
    let mut spec = DeploySpec::new(Islands::Count(1));
    spec.placement = placement;
    spec.workers_per_island = Some(cfg.workers as u32);
    spec.cc = Some(cfg.cc.name().to_string());
    spec.durability = "off".to_string();
    let plan = deploy::plan(t, &spec).map_err(|e| e.to_string())?;
    let ip = &plan.islands()[0];
    let cpus = (0..cfg.workers).map(|w| ip.worker_cpu(w)).collect();
    Ok(Placed {
        placement,
        plan,
        cpus,
    })
}

/// Worker CPUs for a table cell: the first few, in worker order; none: not pinned.
fn cpus_label(cpus: &[CpuId]) -> String {
    const SHOWN: usize = 6;
    if cpus.is_empty() {
        return "(not pinned)".to_string();
    }
    let shown: Vec<String> = cpus.iter().take(SHOWN).map(|c| c.to_string()).collect();
    match cpus.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{} +{more}", shown.join(",")),
        _ => shown.join(","),
    }
}

/// Sockets with at least one allowed CPU.
fn allowed_sockets(t: &Topology) -> usize {
    t.sockets()
        .iter()
        .filter(|s| s.cpus.iter().any(|c| t.is_allowed(c)))
        .count()
}

/// Notes on what this machine (or plan) can and cannot show.
fn machine_notes(t: &Topology, cfg: &PlacementConfig, placed: &[Placed]) -> Vec<String> {
    let mut notes = Vec::new();
    let cpus_of = |p: Placement| placed.iter().find(|x| x.placement == p).map(|x| &x.cpus);
    let sockets = allowed_sockets(t);
    if let (Some(s), Some(g)) = (cpus_of(Placement::Spread), cpus_of(Placement::Grouped)) {
        let mut ss = s.clone();
        let mut gs = g.clone();
        ss.sort_unstable();
        gs.sort_unstable();
        if s == g {
            let why = if sockets == 1 {
                format!(
                    "this machine has 1 socket ({} allowed CPUs), so they measure the same thing; \
                     the islands effect needs several sockets (see a plan with --topology 4x6)",
                    t.allowed_cpus().len()
                )
            } else {
                "they measure the same thing with so few workers".to_string()
            };
            notes.push(format!(
                "spread and grouped put the {} worker{} on the same CPUs in the same order: {why}",
                cfg.workers,
                if cfg.workers == 1 { "" } else { "s" }
            ));
        } else if ss == gs {
            notes.push(format!(
                "spread and grouped use the same {} CPUs, in another order (one worker per allowed \
                 CPU): use --workers fewer than the CPUs (4 on a 4-socket machine, as in the \
                 paper's Figure 3) to put them on different sockets",
                cfg.workers
            ));
        }
    }
    let cpus = t.allowed_cpus().len();
    if cfg.workers > cpus {
        notes.push(format!(
            "{} workers on {cpus} CPUs: oversubscribed, pinned workers share CPUs",
            cfg.workers
        ));
    }
    if cfg.placements.contains(&Placement::Os) {
        notes.push("os: workers are not pinned; the kernel places them".to_string());
    }
    notes
}

/// One transaction kind × placement over its repetitions.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub mode: &'static str,
    pub placement: Placement,
    pub workers: usize,
    /// Worker i's CPU; empty under `os`.
    pub cpus: Vec<CpuId>,
    /// Sockets the workers are pinned on; `None` under `os`.
    pub sockets: Option<usize>,
    /// Committed transactions per second of each repetition.
    pub rates_tps: Vec<f64>,
    /// Median, mean and standard deviation of `rates_tps`.
    #[serde(rename = "throughput_tps")]
    pub stats: Spread,
    /// Median over the repetitions of the engine aborts over all attempts.
    pub abort_rate: f64,
    /// Median over the grouped median of the same transaction kind, if run.
    pub vs_grouped: Option<f64>,
}

/// The whole experiment.
#[derive(Clone, Debug, Serialize)]
pub struct PlacementReport {
    pub machine: String,
    pub topology: String,
    pub workers: usize,
    pub cc: &'static str,
    pub parameters: BTreeMap<String, String>,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub reps: usize,
    /// The CPU of the thread that loaded (first touched) the table; `None` if it could not be pinned.
    pub loaded_on_cpu: Option<CpuId>,
    /// Sockets with an allowed CPU.
    pub sockets: usize,
    pub cells: Vec<Cell>,
    pub notes: Vec<String>,
    pub verdict: Verdict,
}

/// The paper's figure this experiment repeats.
pub const FIGURE: &str = "paper Fig. 3";

/// The paper's claim, from its Section 3 (TPC-C Payment, 4 workers, 4 sockets of 6 cores).
pub const CLAIM: &str = "A database's workers placed topology-aware run faster and vary less: \
4 workers all on one socket give 20-30% more throughput than one worker per socket or the OS's \
placement.";

/// What the cells show of [`CLAIM`] on a machine with `sockets` sockets.
///
/// Checks, for each transaction kind, that grouped is [`AHEAD`] of spread
/// when spread put the workers on more sockets than grouped did, and ahead
/// of the OS when grouped left a socket of a machine of two or more free.
/// What this machine or these options cannot tell apart is said, not
/// checked; so is the variation.
pub fn verdict(cells: &[Cell], sockets: usize, reps: usize) -> Verdict {
    let mut f = Findings::default();
    let mut untested = false;
    for g in cells.iter().filter(|c| c.placement == Placement::Grouped) {
        for o in cells
            .iter()
            .filter(|c| c.mode == g.mode && c.placement != Placement::Grouped)
        {
            let x = ratio(o.stats.median, g.stats.median);
            f.observed.push(format!(
                "{}: {} {} txn/s = {} grouped's {} txn/s; std. dev. {:.2}% against {:.2}%",
                g.mode,
                o.placement,
                thousands(o.stats.median.round() as u64),
                times(x),
                thousands(g.stats.median.round() as u64),
                o.stats.std_pct,
                g.stats.std_pct
            ));
            let testable = match o.placement {
                Placement::Os => sockets >= 2 && g.sockets.is_some_and(|s| s < sockets),
                _ => o.sockets > g.sockets,
            };
            match x {
                Some(x) if testable => f.checks.push(x * AHEAD < 1.0),
                _ => untested = true,
            }
        }
    }
    if !cells.is_empty() && !cells.iter().any(|c| c.placement == Placement::Grouped) {
        f.caveats.push(
            "grouped was not run: the other placements have nothing to compare against".into(),
        );
    }
    if untested {
        f.caveats.push(if sockets < 2 {
            "on one socket every placement keeps the workers and the table there, so the \
             paper's cross-socket cost is not tested; --plan --topology 4x6 shows where the \
             workers would go on four sockets"
                .to_string()
        } else {
            "grouped spreads the workers over as many sockets as spread does, or over every \
             socket: run fewer workers than CPUs (--workers 4 on a 4-socket machine, as in the \
             paper) to test it"
                .to_string()
        });
    }
    f.caveats.push(
        "the paper ran TPC-C Payment; this runs the microbenchmark on one shared-everything island"
            .into(),
    );
    f.few_reps(reps);
    f.verdict()
}

/// An engine error as one line, without the `invalid configuration:` prefix.
fn message(e: islands::Error) -> String {
    match e {
        islands::Error::Config(s) => s,
        e => e.to_string(),
    }
}

fn micro_config(cfg: &PlacementConfig, sites: u32, update: bool) -> MicroConfig {
    MicroConfig {
        rows: cfg.rows,
        sites: sites as u64,
        n: cfg.n,
        update,
        multisite_pct: cfg.multisite,
        ..MicroConfig::default()
    }
}

/// Plans every placement and checks the workload before anything is loaded.
fn plan_all(t: &Topology, cfg: &PlacementConfig) -> Result<Vec<Placed>, String> {
    let placed = cfg
        .placements
        .iter()
        .map(|&p| place(t, cfg, p))
        .collect::<Result<Vec<_>, String>>()?;
    let sites = placed[0].plan.sites();
    // The sites come from the machine, not from an option of this command:
    // MicroConfig's "--sites N must be between 1 and --rows" would name an
    // option it does not have. (0 rows gets MicroConfig's own error.)
    if cfg.rows > 0 && cfg.rows < u64::from(sites) {
        return Err(format!(
            "--rows {} is fewer than the {sites} sites (one per core, a home site per worker): give --rows {sites} or more",
            cfg.rows
        ));
    }
    for &update in &cfg.modes {
        micro_config(cfg, sites, update).check().map_err(message)?;
    }
    Ok(placed)
}

/// Loads the table once and runs every kind × placement `reps` times;
/// `progress` gets a line per run.
pub fn run_experiment(
    t: &Topology,
    cfg: &PlacementConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<PlacementReport, String> {
    let placed = plan_all(t, cfg)?;
    let sites = placed[0].plan.sites();
    let base = micro_config(cfg, sites, false);
    let (island, _) = Island::open(
        IslandConfig::new(cfg.cc, cfg.workers),
        &micro::tables(&base, cfg.rows),
    )
    .map_err(message)?;
    // First touch next to grouped worker 0 (the first allowed CPU in tree order).
    let grouped = place(t, cfg, Placement::Grouped)?;
    let load_cpu = grouped.island().worker_cpu(0);
    let loaded_on_cpu = std::thread::scope(|s| {
        s.spawn(|| -> Result<Option<CpuId>, String> {
            let pinned = load_cpu.filter(|&c| pin_to(c as usize).is_ok());
            micro::load(&island, &base, 0..cfg.rows, true).map_err(message)?;
            Ok(pinned)
        })
        .join()
        .map_err(|_| "the loader thread panicked".to_string())?
    })?;

    let mut rates: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cfg.modes.len() * placed.len()];
    for (m, &update) in cfg.modes.iter().enumerate() {
        let mc = micro_config(cfg, sites, update);
        let homes = (0..cfg.workers).map(|w| (w as u64) % mc.sites).collect();
        let workload = Arc::new(Micro::new(mc.clone(), homes).map_err(message)?);
        for rep in 0..cfg.reps {
            for (k, p) in placed.iter().enumerate() {
                let dcfg = DriverConfig {
                    workers: cfg.workers,
                    warmup: cfg.warmup,
                    measure: cfg.duration,
                    inflight: 1,
                    seed: cfg.seed.wrapping_add(rep as u64),
                    display: DisplayMode::Quiet,
                    pin: p.placement != Placement::Os,
                    phases: false,
                    workload_name: format!("micro ({})", mode_name(update)),
                    parameters: mc.parameters(),
                    deployment: p.summary(t),
                };
                let r = driver::run_islands(
                    std::slice::from_ref(&island),
                    &p.workers(),
                    Arc::clone(&workload),
                    &dcfg,
                )
                .map_err(|e| message(e.into_cause()))?;
                if r.committed == 0 {
                    return Err(format!(
                        "{} / {}: no transaction committed in {} s",
                        mode_name(update),
                        p.placement,
                        cfg.duration.as_secs_f64()
                    ));
                }
                progress(&format!(
                    "{} / {}: run {}/{}: {} txn/s, {:.2}% aborts",
                    mode_name(update),
                    p.placement,
                    rep + 1,
                    cfg.reps,
                    human_rate(r.throughput_tps),
                    r.abort_rate * 100.0
                ));
                rates[m * placed.len() + k].push((r.throughput_tps, r.abort_rate));
            }
        }
    }
    island.shutdown();

    let mut cells = Vec::new();
    for (m, &update) in cfg.modes.iter().enumerate() {
        for (k, p) in placed.iter().enumerate() {
            let runs = &rates[m * placed.len() + k];
            let tps: Vec<f64> = runs.iter().map(|r| r.0).collect();
            let aborts: Vec<f64> = runs.iter().map(|r| r.1).collect();
            cells.push(Cell {
                mode: mode_name(update),
                placement: p.placement,
                workers: cfg.workers,
                cpus: p.cpus.iter().flatten().copied().collect(),
                sockets: p.sockets(t),
                stats: Spread::of(&tps),
                rates_tps: tps,
                abort_rate: Spread::of(&aborts).median,
                vs_grouped: None,
            });
        }
    }
    let grouped_median: Vec<(&str, f64)> = cells
        .iter()
        .filter(|c| c.placement == Placement::Grouped)
        .map(|c| (c.mode, c.stats.median))
        .collect();
    for c in &mut cells {
        c.vs_grouped = grouped_median
            .iter()
            .find(|(m, g)| *m == c.mode && *g > 0.0)
            .map(|(_, g)| c.stats.median / g);
    }
    let mut notes = machine_notes(t, cfg, &placed);
    let same = |a: Placement, b: Placement| {
        let cpus = |p| placed.iter().find(|x| x.placement == p).map(|x| &x.cpus);
        cpus(a).is_some() && cpus(a) == cpus(b)
    };
    if same(Placement::Spread, Placement::Grouped) {
        for c in cells.iter().filter(|c| c.placement == Placement::Spread) {
            if let Some(x) = c.vs_grouped {
                notes.push(format!(
                    "{}: spread / grouped = {x:.2} on the same CPUs: the run-to-run noise of this machine",
                    c.mode
                ));
            }
        }
    }
    notes.push(match loaded_on_cpu {
        Some(c) => format!(
            "the table was loaded by a thread on CPU {c} (socket {}), so its memory is there",
            t.socket_of(c).map_or("?".to_string(), |s| s.to_string())
        ),
        None => "the table was loaded by an unpinned thread".to_string(),
    });
    let mut parameters = base.parameters();
    parameters.remove("mode");
    let sockets = allowed_sockets(t);
    Ok(PlacementReport {
        sockets,
        verdict: verdict(&cells, sockets, cfg.reps),
        machine: t.name().to_string(),
        topology: t.summary(),
        workers: cfg.workers,
        cc: cfg.cc.name(),
        parameters,
        warmup_s: cfg.warmup.as_secs_f64(),
        duration_s: cfg.duration.as_secs_f64(),
        reps: cfg.reps,
        loaded_on_cpu,
        cells,
        notes,
    })
}

impl PlacementReport {
    /// A table, one row per transaction kind × placement, then the notes,
    /// the paper's claim and the verdict.
    pub fn render_table(&self) -> String {
        let p = |k: &str| self.parameters.get(k).map_or("?", String::as_str);
        let mut out = format!(
            "placement: micro on {} ({}); 1 island, {} workers, cc {}, durability off; \
             {} rows, {} rows per txn, {}% multisite; {} x {} s per cell after {} s warm-up\n\n",
            self.machine,
            self.topology,
            self.workers,
            self.cc,
            p("rows").parse().map_or(p("rows").to_string(), thousands),
            p("rows_per_txn"),
            p("multisite_pct"),
            self.reps,
            self.duration_s,
            self.warmup_s
        );
        out.push_str(
            "mode       placement  sockets  worker cpus       median (txn/s)  std.dev (txn/s)  std.dev (%)  aborts (%)  vs grouped\n",
        );
        for c in &self.cells {
            let _ = writeln!(
                out,
                "{:<10} {:<9} {:>8}  {:<16} {:>15} {:>16} {:>12.2} {:>11.2} {:>11}",
                c.mode,
                c.placement.name(),
                c.sockets.map_or("-".to_string(), |s| s.to_string()),
                cpus_label(&c.cpus),
                thousands(c.stats.median.round() as u64),
                thousands(c.stats.std.round() as u64),
                c.stats.std_pct,
                c.abort_rate * 100.0,
                c.vs_grouped.map_or("-".to_string(), |x| format!("{x:.2}x"))
            );
        }
        out + &super::notes_and_verdict(&self.notes, &self.verdict, FIGURE, CLAIM)
    }

    /// CSV, one row per cell; the worker CPUs joined by spaces, the rates by `;`.
    pub fn to_csv(&self) -> String {
        let mut out = format!(
            "mode,placement,workers,cpus,sockets,reps,duration_s,{},abort_rate,vs_grouped,rates_tps\n",
            Spread::csv_header("tps")
        );
        for c in &self.cells {
            let cpus: Vec<String> = c.cpus.iter().map(|x| x.to_string()).collect();
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{:.6},{},{}",
                c.mode,
                c.placement,
                c.workers,
                cpus.join(" "),
                c.sockets.map_or(String::new(), |s| s.to_string()),
                self.reps,
                self.duration_s,
                c.stats.csv(),
                c.abort_rate,
                c.vs_grouped.map_or(String::new(), |x| format!("{x:.4}")),
                super::rates_csv(&c.rates_tps)
            );
        }
        out
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes")
    }
}

impl Placed {
    /// One line: where the workers go.
    fn summary(&self, t: &Topology) -> String {
        let n = self.cpus.len();
        let workers = format!("{n} worker{}", if n == 1 { "" } else { "s" });
        match self.sockets(t) {
            None => format!(
                "{}: {workers}, not pinned: the OS schedules them on the {} allowed CPUs",
                self.placement,
                t.allowed_cpus().len()
            ),
            Some(s) => {
                let set: CpuSet = self.cpus.iter().flatten().copied().collect();
                format!(
                    "{}: {workers} on CPUs {set}, {s} of {} socket{}",
                    self.placement,
                    t.sockets().len(),
                    if t.sockets().len() == 1 { "" } else { "s" }
                )
            }
        }
    }
}

/// Which worker goes where under one placement, as a table.
fn render_plan(t: &Topology, p: &Placed) -> String {
    let mut out = format!("{}\n", p.summary(t));
    if p.sockets(t).is_none() {
        return out;
    }
    out.push_str("worker   cpu  socket  core\n");
    for (w, cpu) in p.cpus.iter().enumerate() {
        if let Some((c, k)) = cpu.and_then(|c| t.core_of(c).map(|k| (c, k))) {
            let _ = writeln!(out, "{w:>6} {c:>5} {:>7} {:>5}", k.socket, k.index);
        }
    }
    out
}

fn config(a: &PlacementArgs, t: &Topology) -> Result<PlacementConfig, String> {
    let placements = list("placements", &a.placements, |p| {
        p.parse::<Placement>().map_err(|e| e.to_string())
    })?;
    let modes = list("modes", &a.modes, |m| match m {
        "read-only" | "read" | "ro" => Ok(false),
        "update" | "rw" => Ok(true),
        other => Err(format!(
            "unknown mode '{other}' in --modes (expected read-only or update)"
        )),
    })?;
    let workers = a.workers.unwrap_or_else(|| t.allowed_cpus().len().max(1));
    if workers == 0 || workers > 1024 {
        return Err(format!("--workers {workers} is outside 1..=1024"));
    }
    let cc: CcKind = a.cc.parse()?;
    if cc == CcKind::None && workers != 1 {
        return Err(format!(
            "--cc none needs exactly one worker (got {workers}); use no_wait, wait_die or occ"
        ));
    }
    let duration = seconds("duration", a.duration)?;
    if !a.warmup.is_finite() || !(0.0..=1e6).contains(&a.warmup) {
        return Err(format!("--warmup {} is not a number of seconds", a.warmup));
    }
    if a.reps == 0 || a.reps > 1000 {
        return Err(format!("--reps {} is outside 1..=1000", a.reps));
    }
    Ok(PlacementConfig {
        placements,
        modes,
        workers,
        cc,
        rows: a.rows,
        n: a.n,
        multisite: a.multisite,
        warmup: Duration::from_secs_f64(a.warmup),
        duration,
        reps: a.reps,
        seed: a.seed,
    })
}

pub fn run_placement(a: &PlacementArgs) -> Result<(), String> {
    let t = match &a.topology {
        Some(spec) => Topology::described(spec),
        None => Topology::discover(),
    }
    .map_err(|e| e.to_string())?;
    let cfg = config(a, &t)?;
    let placed = plan_all(&t, &cfg)?;
    if a.plan || a.topology.is_some() {
        for (i, p) in placed.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print!("{}", render_plan(&t, p));
        }
        for n in machine_notes(&t, &cfg, &placed) {
            println!("\nnote: {n}");
        }
        if let Some(spec) = &a.topology {
            println!(
                "\nnote: '{spec}' describes a machine this process does not run on: the plan is printed, \
                 not run, since threads cannot run on CPUs that do not exist here; running needs the \
                 real machine (drop --topology there)"
            );
        }
        return Ok(());
    }
    let report = run_experiment(&t, &cfg, &mut super::progress_lines(a.quiet))?;
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
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: PlacementArgs,
    }

    fn args(argv: &[&str]) -> PlacementArgs {
        let mut full = vec!["placement", "--quiet"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).unwrap().args
    }

    fn cfg_on(t: &Topology, argv: &[&str]) -> PlacementConfig {
        config(&args(argv), t).unwrap()
    }

    #[test]
    fn bad_input_is_one_error() {
        for (argv, want) in [
            (&["--placements", "spread,wild"][..], "bad placement 'wild'"),
            (&["--placements", ","], "--placements is empty"),
            (&["--modes", "insert"], "unknown mode 'insert'"),
            (&["--workers", "0"], "--workers 0"),
            (&["--workers", "2", "--cc", "none"], "--cc none"),
            (&["--cc", "2pc"], "'2pc'"),
            (&["--duration", "0"], "--duration"),
            (&["--warmup=-1"], "--warmup"),
            (&["--reps", "0"], "--reps"),
            (&["--rows", "0"], "--rows must be at least 1"),
            (&["--n", "0"], "--n 0"),
            (&["--multisite", "101"], "--multisite 101"),
            (&["--topology", "4y6"], "4y6"),
        ] {
            let e = run_placement(&args(argv)).unwrap_err();
            assert!(e.contains(want), "{argv:?}: {e}");
            assert!(!e.contains('\n'), "{argv:?}: one line: {e}");
            assert!(!e.starts_with("invalid configuration"), "{argv:?}: {e}");
        }
    }

    #[test]
    fn fewer_rows_than_sites_names_rows() {
        // It said "--sites 4 must be between 1 and --rows (3)": this command has no --sites.
        let t = Topology::described("1x4").unwrap();
        let Err(e) = plan_all(&t, &cfg_on(&t, &["--rows", "3"])) else {
            panic!("--rows 3 on 4 sites was accepted");
        };
        assert!(
            e.contains("--rows 3 is fewer than the 4 sites") && e.contains("--rows 4 or more"),
            "{e}"
        );
        assert!(!e.contains("--sites"), "{e}");
    }

    #[test]
    fn described_machines_place_the_workers_as_deploy_does() {
        let t = Topology::described("4x6").unwrap();
        let cfg = cfg_on(&t, &["--workers", "4"]);
        let placed = plan_all(&t, &cfg).unwrap();
        let sockets = |p: &Placed| -> Vec<usize> {
            p.cpus
                .iter()
                .map(|c| t.socket_of(c.unwrap()).unwrap())
                .collect()
        };
        assert_eq!(placed[0].placement, Placement::Spread);
        assert_eq!(
            sockets(&placed[0]),
            vec![0, 1, 2, 3],
            "one worker per socket"
        );
        assert_eq!(
            sockets(&placed[1]),
            vec![0, 0, 0, 0],
            "grouped fills socket 0"
        );
        assert_eq!(placed[2].cpus, vec![None; 4], "os pins nothing");
        assert_eq!(placed[0].sockets(&t), Some(4));
        assert_eq!(placed[2].sockets(&t), None);
        let notes = machine_notes(&t, &cfg, &placed);
        assert!(!notes.iter().any(|n| n.contains("same CPUs")), "{notes:?}");
        // Every CPU: the same CPUs in another order, and the note says so.
        let cfg = cfg_on(&t, &[]);
        assert_eq!(cfg.workers, 24);
        let notes = machine_notes(&t, &cfg, &plan_all(&t, &cfg).unwrap());
        assert!(
            notes[0].contains("same 24 CPUs, in another order"),
            "{notes:?}"
        );
        // One socket: identical, and the note says why.
        let one = Topology::described("1x4").unwrap();
        let cfg = cfg_on(&one, &["--workers", "3"]);
        let placed = plan_all(&one, &cfg).unwrap();
        assert_eq!(placed[0].cpus, placed[1].cpus);
        let notes = machine_notes(&one, &cfg, &placed);
        assert!(notes[0].contains("has 1 socket"), "{notes:?}");
        let plan = render_plan(
            &t,
            &plan_all(&t, &cfg_on(&t, &["--workers", "4"])).unwrap()[0],
        );
        assert!(
            plan.starts_with("spread: 4 workers on CPUs 0,6,12,18, 4 of 4 sockets"),
            "{plan}"
        );
    }

    fn cell(mode: &'static str, placement: Placement, sockets: Option<usize>, tps: f64) -> Cell {
        let rates = [tps * 0.97, tps, tps * 1.02];
        Cell {
            mode,
            placement,
            workers: 4,
            cpus: Vec::new(),
            sockets,
            rates_tps: rates.to_vec(),
            stats: Spread::of(&rates),
            abort_rate: 0.0,
            vs_grouped: None,
        }
    }

    #[test]
    fn the_verdict_checks_grouped_against_what_differs() {
        let paper = |spread: f64| {
            vec![
                cell("update", Placement::Spread, Some(4), spread),
                cell("update", Placement::Grouped, Some(1), 130e3),
                cell("update", Placement::Os, None, 105e3),
            ]
        };
        let v = verdict(&paper(100e3), 4, 5);
        assert_eq!(v.reproduced, Some(true), "{v:?}");
        assert!(
            v.observed[0].starts_with("update: spread 100,000 txn/s = 0.77x grouped's 130,000"),
            "{v:?}"
        );
        assert_eq!(verdict(&paper(150e3), 4, 5).reproduced, Some(false));
        // 5% behind grouped: within the noise, not the paper's 20-30%.
        assert_eq!(verdict(&paper(124e3), 4, 5).reproduced, Some(false));
        // One socket: spread is grouped and the OS keeps to the socket; nothing to test.
        let one = vec![
            cell("update", Placement::Spread, Some(1), 150e3),
            cell("update", Placement::Grouped, Some(1), 130e3),
            cell("update", Placement::Os, None, 90e3),
        ];
        let v = verdict(&one, 1, 3);
        assert_eq!(v.reproduced, None, "{v:?}");
        assert!(v.caveats[0].starts_with("on one socket"), "{v:?}");
        assert!(
            v.caveats.iter().any(|c| c.contains("3 repetitions")),
            "{v:?}"
        );
        // Every CPU of 4 sockets: spread and grouped both cover the 4 sockets, the OS is tested.
        let all = vec![
            cell("read-only", Placement::Spread, Some(4), 150e3),
            cell("read-only", Placement::Grouped, Some(4), 130e3),
            cell("read-only", Placement::Os, None, 90e3),
        ];
        // Every CPU of 4 sockets: grouped covers them all, so neither is tested.
        let v = verdict(&all, 4, 5);
        assert_eq!(v.reproduced, None, "{v:?}");
        assert!(v.caveats[0].contains("or over every socket"), "{v:?}");
        // Grouped on one socket of two: the OS is tested.
        let os = vec![
            cell("update", Placement::Grouped, Some(1), 130e3),
            cell("update", Placement::Os, None, 100e3),
        ];
        assert_eq!(verdict(&os, 2, 5).reproduced, Some(true));
        let missing = vec![cell("update", Placement::Os, None, 100e3)];
        let v = verdict(&missing, 2, 5);
        assert_eq!(v.reproduced, None);
        assert!(v.caveats[0].starts_with("grouped was not run"), "{v:?}");
    }

    #[test]
    fn a_tiny_run_fills_every_cell() {
        let t = Topology::discover().unwrap();
        let cfg = cfg_on(
            &t,
            &[
                "--rows",
                "2000",
                "--duration",
                "0.1",
                "--warmup",
                "0.02",
                "--reps",
                "2",
            ],
        );
        let mut lines = 0;
        let r = run_experiment(&t, &cfg, &mut |_| lines += 1).unwrap();
        assert_eq!(lines, 2 * 3 * 2, "a progress line per run");
        assert_eq!(r.cells.len(), 6);
        let names: Vec<(&str, &str)> = r
            .cells
            .iter()
            .map(|c| (c.mode, c.placement.name()))
            .collect();
        assert_eq!(
            names,
            [
                ("read-only", "spread"),
                ("read-only", "grouped"),
                ("read-only", "os"),
                ("update", "spread"),
                ("update", "grouped"),
                ("update", "os"),
            ]
        );
        for c in &r.cells {
            assert_eq!(c.rates_tps.len(), 2);
            assert!(c.rates_tps.iter().all(|&x| x > 0.0), "{c:?}");
            assert!(
                c.stats.median > 0.0
                    && c.stats.median <= c.rates_tps.iter().cloned().fold(0.0, f64::max)
            );
            assert_eq!(c.workers, cfg.workers);
        }
        for c in r.cells.iter().filter(|c| c.placement == Placement::Grouped) {
            assert_eq!(c.vs_grouped, Some(1.0));
        }
        let csv = r.to_csv();
        assert_eq!(csv.lines().count(), 7, "{csv}");
        let json: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        assert_eq!(json["cells"].as_array().unwrap().len(), 6);
        assert_eq!(json["cells"][2]["placement"], "os");
        let table = r.render_table();
        assert!(table.contains("2,000 rows"), "{table}");
        assert!(
            table.contains("\npaper (paper Fig. 3): ") && table.contains("\nverdict: "),
            "{table}"
        );
        assert_eq!(json["verdict"]["observed"].as_array().unwrap().len(), 4);
        assert_eq!(cpus_label(&[]), "(not pinned)");
        assert_eq!(
            cpus_label(&[0, 6, 12, 18, 1, 7, 13, 19]),
            "0,6,12,18,1,7 +2"
        );
    }
}
