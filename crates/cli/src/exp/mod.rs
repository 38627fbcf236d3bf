//! `islands experiment NAME`: the seeds' experiments as sweeps. Each one builds
//! its points (deployments × parameters), runs them through [`sweep::Runner`]
//! (a fresh `islands bench` per run, repetitions interleaved), and writes
//! `NAME.csv` (median and spread per point), `NAME-runs.csv` (every run, written
//! as it finishes), `NAME.json`, `NAME.svg` and `NAME.png`, and prints a table
//! and a verdict: the paper's claim next to what this machine measured.
//! `islands experiment all --quick` runs them all, small, and writes `report.md`.

pub mod breakdown;
pub mod cost;
pub mod counters;
pub mod inserts;
pub mod local_tpcc;
pub mod multisite;
pub mod placement;
pub mod plot;
pub mod scaling;
pub mod skew;
pub mod sweep;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use islands::topology::{CpuId, Topology};
use serde::Serialize;

use plot::{Bar, BarFigure, BarPanel, Figure, LineFigure, LinePanel, Series};
use sweep::{Measured, Point, Runner, Spread, PHASES};

/// Experiments from Section 3 of the paper.
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    experiment: ExperimentCmd,
}

#[derive(Subcommand, Debug)]
enum ExperimentCmd {
    /// Threads increment lock-protected counters: one counter, one per socket or one
    /// per core, under spread, grouped and OS placement (paper Table 1 and Fig. 2).
    Counters(counters::CountersArgs),
    /// The paper's microbenchmark (read-only and update) on one shared-everything island
    /// whose workers are placed spread, grouped or by the OS: the counters experiment with
    /// real transactions (paper Fig. 3).
    Placement(placement::PlacementArgs),
    /// TPC-C Payment, local only: fine-grained islands vs shared-everything, by active cores
    /// (paper Fig. 7).
    #[command(name = "local-tpcc")]
    LocalTpcc(SweepArgs),
    /// Read / update 10 rows, throughput vs % multisite, for 1ISL … NISL (paper Fig. 9).
    Multisite(SweepArgs),
    /// Cost per transaction vs rows touched (2-100), local and multisite, read and update,
    /// per deployment (paper Fig. 10).
    Cost(SweepArgs),
    /// Time of a 4-row transaction split into execution, transaction management,
    /// communication, locking and logging at 0/50/100% multisite (paper Fig. 11).
    Breakdown(SweepArgs),
    /// 20% multisite, throughput vs active cores, FG / CG / SE (paper Fig. 12).
    Scaling(SweepArgs),
    /// Zipfian skew θ 0-0.99 at 0/20/50% multisite, read and update, fine / coarse / one
    /// island (paper Fig. 13).
    Skew(SweepArgs),
    /// Insert-only clients with private tables: one shared log vs a log per island, log on vs
    /// off, by clients (Xi et al.).
    Inserts(SweepArgs),
    /// The seven sweeps above, local-tpcc to inserts (use --quick for a few minutes), then
    /// report.md beside the results: each plot next to the paper's claim and whether this
    /// machine shows the trend. Run counters and placement on their own.
    All(SweepArgs),
}

pub fn run_experiment(args: &ExperimentArgs) -> Result<(), String> {
    match &args.experiment {
        ExperimentCmd::Counters(a) => counters::run_counters(a),
        ExperimentCmd::Placement(a) => placement::run_placement(a),
        ExperimentCmd::LocalTpcc(a) => run(&local_tpcc::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::Multisite(a) => run(&multisite::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::Cost(a) => run(&cost::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::Breakdown(a) => run(&breakdown::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::Scaling(a) => run(&scaling::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::Skew(a) => run(&skew::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::Inserts(a) => run(&inserts::EXPERIMENT, a).map(|_| ()),
        ExperimentCmd::All(a) => run_all(a),
    }
}

/// The sweeps, in the order `all` runs them.
pub const SWEEPS: [&Experiment; 7] = [
    &local_tpcc::EXPERIMENT,
    &multisite::EXPERIMENT,
    &cost::EXPERIMENT,
    &breakdown::EXPERIMENT,
    &scaling::EXPERIMENT,
    &skew::EXPERIMENT,
    &inserts::EXPERIMENT,
];

/// A sweep experiment: its points, the paper's claim, and its verdict on what
/// this machine measured. One module per experiment defines one.
pub struct Experiment {
    /// Its name on the command line and in file names.
    pub name: &'static str,
    /// The paper's figure it repeats.
    pub figure: &'static str,
    /// The paper's claim.
    pub claim: &'static str,
    pub x_label: &'static str,
    pub y_label: &'static str,
    /// Its metric is core time per transaction rather than throughput.
    pub cost: bool,
    /// It shows where a transaction's time goes ([`PHASES`]) as bars, rather
    /// than its metric as lines.
    pub phases: bool,
    /// Its points on this machine, or why the options given do not fit.
    pub points: fn(&Ctx) -> Result<Vec<Point>, String>,
    /// What it observed in `measured` on `k` cores: the numbers, the caveats,
    /// and each check of the paper's trend.
    pub verdict: fn(&[Measured], usize, &mut Findings),
}

/// What an experiment's verdict found.
#[derive(Default)]
pub struct Findings {
    pub observed: Vec<String>,
    pub caveats: Vec<String>,
    /// One entry per check of the paper's trend: whether it held.
    pub checks: Vec<bool>,
}

/// Options every sweep takes.
#[derive(Args, Clone, Debug)]
pub struct SweepArgs {
    /// Repetitions of each point (median and spread are reported).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds measured per run (default 4; 0.8 with --quick).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds of warm-up per run (default 1; 0.2 with --quick).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Fewer points and shorter runs: minutes instead of an hour.
    #[arg(long)]
    pub quick: bool,
    /// Directory of the results (created if needed).
    #[arg(long, value_name = "DIR", default_value = "islands-results")]
    pub out: PathBuf,
    /// Durability of update runs: off, async or sync (the paper logs: sync, the default).
    #[arg(long, default_value = "sync")]
    pub durability: String,
    /// Active cores: use the first K cores of this machine (default: every allowed core).
    #[arg(long, value_name = "K")]
    pub cores: Option<usize>,
    /// Override the swept x values (comma-separated): % multisite, rows, cores, θ or
    /// clients, depending on the experiment.
    #[arg(long, value_name = "LIST")]
    pub x: Option<String>,
    /// Modes to run, comma-separated: read, update (experiments with both).
    #[arg(long, default_value = "read,update")]
    pub modes: String,
    /// No per-run progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// The machine as the experiments see it: one CPU per allowed core, in tree
/// (socket, L3, core) order, with each one's socket.
struct Machine {
    name: String,
    cpus: Vec<CpuId>,
    sockets: Vec<usize>,
}

impl Machine {
    fn discover() -> Result<Machine, String> {
        let t = Topology::discover().map_err(|e| e.to_string())?;
        let mut cpus = Vec::new();
        let mut sockets = Vec::new();
        for c in t.allowed_cores() {
            if let Some(cpu) = t.allowed_cpus_of_core(c).first() {
                cpus.push(cpu);
                sockets.push(t.cores()[c].socket);
            }
        }
        if cpus.is_empty() {
            return Err("this process may use no CPU".into());
        }
        Ok(Machine {
            name: t.name().to_string(),
            cpus,
            sockets,
        })
    }
}

/// A deployment of the first k cores: its islands as CPU groups.
#[derive(Clone, Debug, PartialEq)]
struct Deployment {
    label: String,
    groups: Vec<Vec<CpuId>>,
}

impl Deployment {
    fn args(&self) -> Vec<String> {
        let s = self
            .groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(";");
        // A trailing `;` keeps a single CPU list a list: `--islands 0` would
        // be a count of islands (and refused), `--islands 1` one island of
        // every core.
        let end = if self.groups.len() == 1 { ";" } else { "" };
        vec!["--islands".into(), format!("{s}{end}")]
    }
}

/// `d` islands of equal size over the first `k` cores.
fn islands_of(m: &Machine, k: usize, d: usize) -> Deployment {
    let per = k / d;
    Deployment {
        label: format!("{d}ISL"),
        groups: (0..d)
            .map(|i| m.cpus[i * per..(i + 1) * per].to_vec())
            .collect(),
    }
}

/// One island per socket over the first `k` cores (coarse-grained).
fn per_socket(m: &Machine, k: usize) -> Deployment {
    let mut groups: Vec<Vec<CpuId>> = Vec::new();
    for i in 0..k {
        if i == 0 || m.sockets[i] != m.sockets[i - 1] {
            groups.push(Vec::new());
        }
        groups.last_mut().expect("pushed").push(m.cpus[i]);
    }
    Deployment {
        label: "CG (per socket)".into(),
        groups,
    }
}

/// The islands counts that divide `k` cores evenly: 1ISL … kISL.
fn divisors(k: usize) -> Vec<usize> {
    (1..=k).filter(|d| k.is_multiple_of(*d)).collect()
}

/// What an experiment's points are made for: the machine, the first `k` cores,
/// and the options given.
pub struct Ctx {
    m: Machine,
    k: usize,
    quick: bool,
    durability: String,
    modes: Vec<bool>,
    x: Option<Vec<f64>>,
}

impl Ctx {
    fn xs(&self, full: &[f64], quick: &[f64]) -> Vec<f64> {
        match &self.x {
            Some(x) => x.clone(),
            None if self.quick => quick.to_vec(),
            None => full.to_vec(),
        }
    }
    /// Counts of cores (or clients) as x: 1 to `k`; with `--quick`, 1 and `k`.
    fn xs_up_to_k(&self) -> Vec<f64> {
        let k = self.k;
        self.xs(
            &(1..=k).map(|i| i as f64).collect::<Vec<_>>(),
            &if k > 1 {
                vec![1.0, k as f64]
            } else {
                vec![1.0]
            },
        )
    }
    fn mode_args(&self, update: bool) -> Vec<String> {
        if update {
            vec!["--durability".into(), self.durability.clone()]
        } else {
            vec![]
        }
    }
}

fn mode_name(update: bool) -> &'static str {
    if update {
        "update"
    } else {
        "read"
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

fn micro(update: bool, n: usize, multisite: f64, theta: f64) -> Vec<String> {
    let mut a = s(&["micro", "--n"]);
    a.push(n.to_string());
    a.push("--multisite".into());
    a.push(num(multisite));
    if update {
        a.push("--update".into());
    }
    if theta > 0.0 {
        a.push("--skew".into());
        a.push(num(theta));
    }
    a
}

fn point(panel: String, series: &str, x: f64, parts: &[Vec<String>]) -> Point {
    Point {
        panel,
        series: series.to_string(),
        x,
        args: parts.concat(),
    }
}

fn dedup_deployments(deps: &mut Vec<Deployment>) {
    let mut seen: Vec<Vec<Vec<CpuId>>> = Vec::new();
    deps.retain(|d| {
        if seen.contains(&d.groups) {
            false
        } else {
            seen.push(d.groups.clone());
            true
        }
    });
}

fn check_cores(x: f64, k: usize) -> Result<usize, String> {
    if x.fract() != 0.0 || x < 1.0 || x > k as f64 {
        return Err(format!(
            "--x {x}: a number of cores must be a whole number in 1..={k}"
        ));
    }
    Ok(x as usize)
}

fn check_pct(x: f64) -> Result<(), String> {
    if !(0.0..=100.0).contains(&x) || x.fract() != 0.0 {
        return Err(format!(
            "--x {x}: a percentage of multisite transactions must be a whole number in 0..=100"
        ));
    }
    Ok(())
}

fn check_rows(x: f64) -> Result<usize, String> {
    if x.fract() != 0.0 || !(1.0..=1000.0).contains(&x) {
        return Err(format!(
            "--x {x}: rows per transaction must be a whole number in 1..=1000"
        ));
    }
    Ok(x as usize)
}

/// Whether `name` names an experiment (or `all`).
pub fn known(name: &str) -> bool {
    ["counters", "placement", "all"].contains(&name) || SWEEPS.iter().any(|e| e.name == name)
}

/// The error for an experiment name that does not exist.
pub fn unknown(name: &str) -> String {
    let names: Vec<&str> = SWEEPS.iter().map(|e| e.name).collect();
    format!(
        "no experiment '{name}'; the experiments are: counters, placement, {}, all",
        names.join(", ")
    )
}

fn metric(e: &Experiment) -> impl Fn(&sweep::Sample) -> f64 {
    let cost = e.cost;
    move |s: &sweep::Sample| {
        if cost {
            s.cost_us
        } else {
            s.throughput_tps / 1e3
        }
    }
}

fn panels_of(measured: &[Measured]) -> Vec<String> {
    let mut p: Vec<String> = Vec::new();
    for m in measured {
        if !p.contains(&m.point.panel) {
            p.push(m.point.panel.clone());
        }
    }
    p
}

fn series_of<'a>(measured: &'a [Measured], panel: &str) -> Vec<&'a str> {
    let mut s: Vec<&str> = Vec::new();
    for m in measured.iter().filter(|m| m.point.panel == panel) {
        if !s.contains(&m.point.series.as_str()) {
            s.push(&m.point.series);
        }
    }
    s
}

fn figure(e: &Experiment, measured: &[Measured], machine: &str, k: usize) -> Figure {
    let title = format!(
        "islands experiment {} ({}), {machine}, {k} cores",
        e.name, e.figure
    );
    if e.phases {
        let panels = panels_of(measured)
            .into_iter()
            .map(|panel| BarPanel {
                bars: measured
                    .iter()
                    .filter(|m| m.point.panel == panel)
                    .map(|m| Bar {
                        label: format!("{}% multisite", num(m.point.x)),
                        values: PHASES
                            .iter()
                            .map(|ph| {
                                let s =
                                    m.spread(|x| x.phases.get(*ph).copied().unwrap_or(f64::NAN));
                                if s.n > 0 {
                                    s.median
                                } else {
                                    0.0
                                }
                            })
                            .collect(),
                    })
                    .collect(),
                title: panel,
            })
            .collect();
        return Figure::Bars(BarFigure {
            title,
            y_label: e.y_label.into(),
            segments: PHASES.iter().map(|p| p.to_string()).collect(),
            panels,
        });
    }
    let f = metric(e);
    let panels = panels_of(measured)
        .into_iter()
        .map(|panel| LinePanel {
            series: series_of(measured, &panel)
                .into_iter()
                .map(|series| Series {
                    name: series.to_string(),
                    points: measured
                        .iter()
                        .filter(|m| m.point.panel == panel && m.point.series == series)
                        .map(|m| {
                            let s = m.spread(&f);
                            (m.point.x, s.median, s.min, s.max)
                        })
                        .collect(),
                })
                .collect(),
            title: panel,
        })
        .collect();
    Figure::Lines(LineFigure {
        title,
        x_label: e.x_label.into(),
        y_label: e.y_label.into(),
        panels,
    })
}

/// The median of the metric at (panel, series, x), if measured.
fn at(
    measured: &[Measured],
    panel: &str,
    series: &str,
    x: f64,
    f: &dyn Fn(&sweep::Sample) -> f64,
) -> Option<f64> {
    measured
        .iter()
        .find(|m| m.point.panel == panel && m.point.series == series && m.point.x == x)
        .map(|m| m.spread(f).median)
}

fn phase(measured: &[Measured], panel: &str, x: f64, ph: &str) -> Option<f64> {
    measured
        .iter()
        .find(|m| m.point.panel == panel && m.point.x == x)
        .map(|m| m.spread(|s| s.phases.get(ph).copied().unwrap_or(f64::NAN)))
        .filter(|s| s.n > 0)
        .map(|s| s.median)
}

/// Whether this machine showed the paper's trend, and the numbers that say so.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// Some(true): the trend shows; Some(false): it does not; None: this machine cannot tell.
    pub reproduced: Option<bool>,
    pub observed: Vec<String>,
    pub caveats: Vec<String>,
}

fn xs_of(measured: &[Measured], panel: &str) -> Vec<f64> {
    let mut v: Vec<f64> = measured
        .iter()
        .filter(|m| m.point.panel == panel)
        .map(|m| m.point.x)
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v.dedup();
    v
}

fn verdict(e: &Experiment, measured: &[Measured], k: usize, sockets: usize) -> Verdict {
    let mut f = Findings::default();
    if k < 2 {
        f.caveats.push("one core: every deployment is the same single island, so no trend between deployments can show".into());
    }
    if sockets < 2 {
        f.caveats.push(format!(
            "one socket: no island boundary crosses a socket here, so the paper's cross-socket costs (and coarse- versus fine-grained islands, CG = SE) cannot show; {k} cores compare 1 island against {k}"
        ));
    }
    (e.verdict)(measured, k, &mut f);
    f.verdict()
}

impl Findings {
    /// The trend shows when every check held, does not when one failed, and
    /// this machine cannot tell when nothing could be checked.
    pub fn verdict(self) -> Verdict {
        Verdict {
            reproduced: if self.checks.is_empty() {
                None
            } else {
                Some(self.checks.iter().all(|&b| b))
            },
            observed: self.observed,
            caveats: self.caveats,
        }
    }
}

impl Verdict {
    /// The verdict as a sentence, without its full stop.
    pub fn says(&self) -> &'static str {
        match self.reproduced {
            Some(true) => "the trend shows on this machine",
            Some(false) => "the trend does not show on this machine",
            None => "this machine cannot tell",
        }
    }

    /// The paper's claim, what this machine measured, the caveats and the
    /// verdict, a line each (`paper:`, `here:`, `note:`, `verdict:`).
    pub fn render(&self, figure: &str, claim: &str) -> String {
        let mut out = format!("paper ({figure}): {claim}\n");
        for o in &self.observed {
            let _ = writeln!(out, "here: {o}");
        }
        for c in &self.caveats {
            let _ = writeln!(out, "note: {c}");
        }
        let _ = writeln!(out, "verdict: {}", self.says());
        out
    }
}

/// How far ahead a placement's median must be for a check that it is
/// faster to hold: a smaller lead is within the run-to-run spread of a
/// shared machine, so an absent effect reads "does not show", not a coin toss.
pub const AHEAD: f64 = 1.1;

/// `a / b`, if both are finite and `b` is positive.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (a.is_finite() && b.is_finite() && b > 0.0).then(|| a / b)
}

/// `x` as `1.23x`, or `-` when there is no ratio.
pub fn times(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |x| format!("{x:.2}x"))
}

impl Findings {
    /// The caveat of too few repetitions for a standard deviation to mean much.
    pub fn few_reps(&mut self, reps: usize) {
        if reps < 5 {
            self.caveats.push(format!(
                "{reps} repetition{} per cell: the standard deviations are rough, and reported, not checked",
                if reps == 1 { "" } else { "s" }
            ));
        }
    }
}

/// A progress line per run on stderr, unless `quiet`.
pub fn progress_lines(quiet: bool) -> impl FnMut(&str) {
    move |line| {
        if !quiet {
            eprintln!("{line}");
        }
    }
}

/// Prints a report's `table`, then writes its CSV and JSON to the files
/// asked for (each built only when asked).
pub fn print_and_write(
    table: &str,
    csv: Option<&Path>,
    to_csv: impl FnOnce() -> String,
    json: Option<&Path>,
    to_json: impl FnOnce() -> String,
) -> Result<(), String> {
    print!("{table}");
    if let Some(p) = csv {
        crate::args::write_file(p, &to_csv())?;
    }
    if let Some(p) = json {
        crate::args::write_file(p, &to_json())?;
    }
    Ok(())
}

/// What follows a table that ends with a newline: a blank line, its notes
/// (a `note:` line each), and, after another blank line if there were
/// notes, the paper's claim and the verdict ([`Verdict::render`]).
pub fn notes_and_verdict(notes: &[String], v: &Verdict, figure: &str, claim: &str) -> String {
    let mut out = String::from("\n");
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    if !notes.is_empty() {
        out.push('\n');
    }
    out + &v.render(figure, claim)
}

/// Per-repetition rates for a CSV cell: whole numbers joined by `;`.
pub fn rates_csv(rates: &[f64]) -> String {
    rates
        .iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join(";")
}

/// A series' median throughput (K txn/s) at the smallest and at the largest
/// x measured in its panel.
struct Ends {
    panel: String,
    series: String,
    lo: f64,
    hi: f64,
    /// At `lo`.
    a: f64,
    /// At `hi`.
    b: f64,
}

impl Ends {
    /// "panel, series: a K at `lo` -> b K at `hi` (b/a x)", with `lo` and
    /// `hi` the ends as the experiment names them.
    fn said(&self, lo: &str, hi: &str) -> String {
        format!(
            "{}, {}: {:.1} K at {lo} -> {:.1} K at {hi} ({:.2}x)",
            self.panel,
            self.series,
            self.a,
            self.b,
            self.b / self.a
        )
    }
}

/// [`Ends`] of every series of every panel, in the order measured.
fn throughput_ends(measured: &[Measured]) -> Vec<Ends> {
    let tput = |s: &sweep::Sample| s.throughput_tps / 1e3;
    let mut v = Vec::new();
    for panel in panels_of(measured) {
        let xs = xs_of(measured, &panel);
        let (Some(&lo), Some(&hi)) = (xs.first(), xs.last()) else {
            continue;
        };
        for series in series_of(measured, &panel) {
            if let (Some(a), Some(b)) = (
                at(measured, &panel, series, lo, &tput),
                at(measured, &panel, series, hi, &tput),
            ) {
                v.push(Ends {
                    panel: panel.clone(),
                    series: series.to_string(),
                    lo,
                    hi,
                    a,
                    b,
                });
            }
        }
    }
    v
}

fn table(e: &Experiment, measured: &[Measured]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<34} {:<34} {:>7} {:>10} {:>9} {:>11} {:>6}",
        "panel", "series", "x", "K txn/s", "± std", "us/txn(core)", "dist%"
    );
    for m in measured {
        let tp = m.spread(|s| s.throughput_tps / 1e3);
        let c = m.spread(|s| s.cost_us);
        let d = m.spread(|s| s.distributed_pct);
        let _ = writeln!(
            t,
            "{:<34} {:<34} {:>7} {:>10.1} {:>9.1} {:>11.2} {:>6.1}",
            m.point.panel,
            m.point.series,
            num(m.point.x),
            tp.median,
            tp.std,
            c.median,
            d.median
        );
        if e.phases {
            let parts: Vec<String> = PHASES
                .iter()
                .map(|ph| {
                    let s = m.spread(|x| x.phases.get(*ph).copied().unwrap_or(f64::NAN));
                    format!("{ph} {:.2}", if s.n > 0 { s.median } else { f64::NAN })
                })
                .collect();
            let _ = writeln!(t, "{:>36}us/txn: {}", "", parts.join("  "));
        }
    }
    t
}

#[derive(Serialize)]
struct ExperimentJson<'a> {
    experiment: &'a str,
    figure: &'a str,
    claim: &'a str,
    machine: &'a str,
    cores: usize,
    reps: usize,
    warmup_s: f64,
    duration_s: f64,
    quick: bool,
    interrupted: bool,
    /// Every run: `islands bench <common> <point args>`.
    common_args: &'a [String],
    points: Vec<PointJson<'a>>,
    verdict: &'a Verdict,
}

#[derive(Serialize)]
struct PointJson<'a> {
    panel: &'a str,
    series: &'a str,
    x: f64,
    args: &'a [String],
    throughput_tps: Spread,
    cost_us: Spread,
    distributed_pct: Spread,
    samples: &'a [sweep::Sample],
}

/// What one experiment produced.
pub struct Outcome {
    pub experiment: &'static Experiment,
    pub png: PathBuf,
    pub verdict: Verdict,
    /// [`sweep::host_summary`] of its runs.
    pub host: Option<String>,
    pub interrupted: bool,
    pub points: usize,
}

/// Runs experiment `e` with `a`, writing into `a.out`.
pub fn run(e: &'static Experiment, a: &SweepArgs) -> Result<Outcome, String> {
    let name = e.name;
    if a.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let m = Machine::discover()?;
    let sockets = {
        let mut s = m.sockets.clone();
        s.dedup();
        s.len()
    };
    let k = match a.cores {
        Some(0) => return Err("--cores must be at least 1".into()),
        Some(c) if c > m.cpus.len() => {
            return Err(format!(
                "--cores {c}: this process may use {} core(s)",
                m.cpus.len()
            ))
        }
        Some(c) => c,
        None => m.cpus.len(),
    };
    match a.durability.as_str() {
        "off" | "async" | "sync" => {}
        d => return Err(format!("--durability '{d}' is not one of off, async, sync")),
    }
    let modes = crate::args::list("modes", &a.modes, |p| match p {
        "read" | "read-only" => Ok(false),
        "update" => Ok(true),
        o => Err(format!("--modes: '{o}' is not read or update")),
    })?;
    let x =
        a.x.as_deref()
            .map(|l| {
                crate::args::list("x", l, |p| {
                    p.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| format!("--x: '{p}' is not a number"))
                })
            })
            .transpose()?;
    let warmup = a.warmup.unwrap_or(if a.quick { 0.2 } else { 1.0 });
    let duration = a.duration.unwrap_or(if a.quick { 0.8 } else { 4.0 });
    crate::args::seconds("duration", duration)?;
    if !(0.0..=1e6).contains(&warmup) {
        return Err(format!(
            "--warmup {warmup} is not between 0 and 1e6 seconds"
        ));
    }
    let machine_name = m.name.clone();
    let ctx = Ctx {
        m,
        k,
        quick: a.quick,
        durability: a.durability.clone(),
        modes,
        x,
    };
    let pts = (e.points)(&ctx)?;
    let out_dir = a.out.join(name);
    let common = vec![
        "--warmup".to_string(),
        warmup.to_string(),
        "--duration".into(),
        duration.to_string(),
        "--progress".into(),
        "quiet".into(),
    ];
    let runner = Runner {
        exe: std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?,
        reps: a.reps,
        common: common.clone(),
        out_dir: out_dir.clone(),
        name: name.to_string(),
        quiet: a.quiet,
    };
    // A results directory that cannot be made is refused before the plan
    // line, which would announce a run that never starts.
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    if !a.quiet {
        eprintln!(
            "experiment {name} ({}): {} points x {} reps, {warmup} s warm-up + {duration} s each, on {machine_name} ({k} cores); results in {}",
            e.figure,
            pts.len(),
            a.reps,
            out_dir.display()
        );
    }
    let (measured, interrupted) = runner.run(&pts)?;
    let v = verdict(e, &measured, k, sockets);
    sweep::write(
        &out_dir,
        &format!("{name}.csv"),
        &sweep::summary_csv(&measured),
    )?;
    let json = ExperimentJson {
        experiment: name,
        figure: e.figure,
        claim: e.claim,
        machine: &machine_name,
        cores: k,
        reps: a.reps,
        warmup_s: warmup,
        duration_s: duration,
        quick: a.quick,
        interrupted,
        common_args: &common,
        points: measured
            .iter()
            .map(|m| PointJson {
                panel: &m.point.panel,
                series: &m.point.series,
                x: m.point.x,
                args: &m.point.args,
                throughput_tps: m.spread(|s| s.throughput_tps),
                cost_us: m.spread(|s| s.cost_us),
                distributed_pct: m.spread(|s| s.distributed_pct),
                samples: &m.samples,
            })
            .collect(),
        verdict: &v,
    };
    sweep::write(
        &out_dir,
        &format!("{name}.json"),
        &serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )?;
    let stem = out_dir.join(name);
    let (svg, png) = if measured.is_empty() {
        (stem.with_extension("svg"), stem.with_extension("png"))
    } else {
        plot::save(&figure(e, &measured, &machine_name, k), &stem)?
    };
    print!("{}", table(e, &measured));
    print!("{}", v.render(e.figure, e.claim));
    let host = sweep::host_summary(&measured);
    if let Some(h) = &host {
        println!("host: {h}");
    }
    if interrupted {
        println!(
            "interrupted: {} of {} points measured",
            measured.len(),
            pts.len()
        );
    }
    if !measured.is_empty() {
        println!(
            "wrote {}, {}, {}, {} and {}",
            out_dir.join(format!("{name}.csv")).display(),
            runner.runs_csv().display(),
            out_dir.join(format!("{name}.json")).display(),
            svg.display(),
            png.display()
        );
    }
    Ok(Outcome {
        experiment: e,
        png,
        verdict: v,
        host,
        interrupted,
        points: measured.len(),
    })
}

/// `islands experiment all`: the seven sweeps of [`SWEEPS`], then `report.md` beside them.
pub fn run_all(a: &SweepArgs) -> Result<(), String> {
    let mut outcomes = Vec::new();
    for e in SWEEPS {
        let o = run(e, a)?;
        let stop = o.interrupted;
        outcomes.push(o);
        if stop {
            break;
        }
    }
    let report = report_md(&outcomes, a)?;
    let p = sweep::write(&a.out, "report.md", &report)?;
    println!("wrote {}", p.display());
    Ok(())
}

fn report_md(outcomes: &[Outcome], a: &SweepArgs) -> Result<String, String> {
    let m = Machine::discover()?;
    let mut r = String::new();
    let _ = writeln!(r, "# islands: the seeds' experiments on {}\n", m.name);
    let _ = writeln!(
        r,
        "{} core(s) used; {} repetitions per point{}; each run is a fresh `islands bench` process, repetitions interleaved. Figures are medians, error bars min-max. Absolute numbers belong to this machine only; compare ratios.\n",
        a.cores.unwrap_or(m.cpus.len()),
        a.reps,
        if a.quick { " (--quick: fewer points, 0.8 s runs)" } else { "" }
    );
    let _ = writeln!(
        r,
        "| experiment | seed | trend on this machine |\n|---|---|---|"
    );
    for o in outcomes {
        let _ = writeln!(
            r,
            "| [{}](#{}) | {} | {} |",
            o.experiment.name,
            o.experiment.name,
            o.experiment.figure,
            match o.verdict.reproduced {
                Some(true) => "shows",
                Some(false) => "does not show",
                None => "cannot tell here",
            }
        );
    }
    for o in outcomes {
        let ab = o.experiment;
        let _ = writeln!(r, "\n## {}\n", ab.name);
        let rel = o
            .png
            .strip_prefix(&a.out)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| o.png.clone());
        let _ = writeln!(r, "![{}]({})\n", ab.name, rel.display());
        let _ = writeln!(r, "**The seed ({}):** {}\n", ab.figure, ab.claim);
        let _ = writeln!(r, "**Here:**\n");
        for ob in &o.verdict.observed {
            let _ = writeln!(r, "- {ob}");
        }
        let _ = writeln!(r, "\n**Verdict:** {}.\n", o.verdict.says());
        for c in &o.verdict.caveats {
            let _ = writeln!(r, "- Note: {c}");
        }
        if let Some(h) = &o.host {
            let _ = writeln!(r, "- Host: {h}.");
        }
        if o.interrupted {
            let _ = writeln!(r, "- Interrupted: {} points measured.", o.points);
        }
        let _ = writeln!(
            r,
            "\nData: `{0}/{0}.csv` (medians), `{0}/{0}-runs.csv` (every run), `{0}/{0}.json`.",
            ab.name
        );
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(sockets: &[usize]) -> Machine {
        Machine {
            name: "t".into(),
            cpus: (0..sockets.len() as u32).collect(),
            sockets: sockets.to_vec(),
        }
    }

    #[test]
    fn deployments_of_the_first_k_cores() {
        let m = machine(&[0, 0, 0, 1, 1, 1]);
        assert_eq!(islands_of(&m, 6, 2).args()[1], "0,1,2;3,4,5");
        assert_eq!(islands_of(&m, 4, 4).args()[1], "0;1;2;3");
        // One island of one CPU stays a CPU list, not "0 islands".
        let one = islands_of(&m, 1, 1).args()[1].clone();
        assert_eq!(one, "0;");
        assert_eq!(
            islands::deploy::Islands::parse(&one).unwrap(),
            islands::deploy::Islands::Explicit(
                vec![islands::topology::CpuSet::parse("0").unwrap()]
            )
        );
        assert_eq!(per_socket(&m, 4).groups, vec![vec![0, 1, 2], vec![3]]);
        assert_eq!(divisors(6), vec![1, 2, 3, 6]);
        let mut deps = vec![islands_of(&m, 2, 1), per_socket(&m, 2)];
        dedup_deployments(&mut deps);
        assert_eq!(deps.len(), 1, "on one socket CG is SE");
    }

    fn measured(panel: &str, series: &str, x: f64, tps: f64) -> Measured {
        Measured {
            point: Point {
                panel: panel.into(),
                series: series.into(),
                x,
                args: Vec::new(),
            },
            samples: vec![sweep::Sample {
                rep: 0,
                throughput_tps: tps,
                committed: 1,
                threads: 1,
                measured_s: 1.0,
                distributed_pct: 0.0,
                abort_rate: 0.0,
                cost_us: 1.0,
                p50_us: 1.0,
                p99_us: 1.0,
                phases: Default::default(),
                deployment: String::new(),
                host_rt_ns: None,
                host_rt_after_ns: None,
            }],
        }
    }

    #[test]
    fn sweep_verdicts_compare_each_series_at_its_ends() {
        let p = "update 10 rows, 20% multisite";
        let scaling = |fg_at_2: f64| {
            vec![
                measured(p, "FG (1 island per core)", 1.0, 100e3),
                measured(p, "SE (1 island)", 1.0, 90e3),
                measured(p, "FG (1 island per core)", 2.0, fg_at_2),
                measured(p, "SE (1 island)", 2.0, 95e3),
            ]
        };
        let ends = throughput_ends(&scaling(190e3));
        assert_eq!(ends.len(), 2);
        assert_eq!(
            (ends[0].lo, ends[0].hi, ends[0].a, ends[0].b),
            (1.0, 2.0, 100.0, 190.0)
        );
        let v = verdict(&scaling::EXPERIMENT, &scaling(190e3), 2, 1);
        assert_eq!(v.reproduced, Some(true), "{v:?}");
        assert!(v.observed[0].ends_with("100.0 K at 1 core(s) -> 190.0 K at 2 (1.90x)"));
        assert!(v.caveats.iter().any(|c| c.starts_with("one socket")));
        let v = verdict(&scaling::EXPERIMENT, &scaling(110e3), 2, 1);
        assert_eq!(v.reproduced, Some(false), "FG did not scale: {v:?}");
        let multi = |fine_at_100: f64| {
            let q = "read 10 rows";
            vec![
                measured(q, "1ISL", 0.0, 100e3),
                measured(q, "2ISL", 0.0, 180e3),
                measured(q, "1ISL", 100.0, 95e3),
                measured(q, "2ISL", 100.0, fine_at_100),
            ]
        };
        assert_eq!(
            verdict(&multisite::EXPERIMENT, &multi(60e3), 2, 1).reproduced,
            Some(true)
        );
        assert_eq!(
            verdict(&multisite::EXPERIMENT, &multi(170e3), 2, 1).reproduced,
            Some(false)
        );
        assert_eq!(verdict(&skew::EXPERIMENT, &[], 2, 1).reproduced, None);
        // Skew: one island's updates must slow down at θ 0.99.
        let skew = |at_99: f64| {
            let q = "update 2 rows, 0% multisite";
            vec![
                measured(q, "1ISL", 0.0, 100e3),
                measured(q, "1ISL", 0.99, at_99),
            ]
        };
        assert_eq!(
            verdict(&skew::EXPERIMENT, &skew(40e3), 2, 1).reproduced,
            Some(true)
        );
        assert_eq!(
            verdict(&skew::EXPERIMENT, &skew(120e3), 2, 1).reproduced,
            Some(false)
        );
        // Multisite: 1ISL must not fall below 0.8 of itself at 100%.
        let mut m = multi(60e3);
        m[2] = measured("read 10 rows", "1ISL", 100.0, 50e3);
        assert_eq!(
            verdict(&multisite::EXPERIMENT, &m, 2, 1).reproduced,
            Some(false)
        );
        // One core: one island, no trend between deployments can be checked.
        let one = vec![
            measured("read 10 rows", "1ISL", 0.0, 100e3),
            measured("read 10 rows", "1ISL", 100.0, 50e3),
        ];
        let v = verdict(&multisite::EXPERIMENT, &one, 1, 1);
        assert_eq!(v.reproduced, None, "{v:?}");
        assert_eq!(
            v.observed.len(),
            1,
            "1ISL is the fine-grained one too: {v:?}"
        );
        let v = Findings::default().verdict();
        assert_eq!(
            v.render("F", "C"),
            "paper (F): C\nverdict: this machine cannot tell\n"
        );
        assert_eq!(
            notes_and_verdict(&[], &v, "F", "C"),
            "\npaper (F): C\nverdict: this machine cannot tell\n"
        );
        assert_eq!(
            notes_and_verdict(&["n1".into()], &v, "F", "C"),
            "\nnote: n1\n\npaper (F): C\nverdict: this machine cannot tell\n"
        );
    }

    #[test]
    fn points_follow_the_paper_and_check_x() {
        let ctx = Ctx {
            m: machine(&[0, 0]),
            k: 2,
            quick: false,
            durability: "sync".into(),
            modes: vec![false, true],
            x: None,
        };
        let p = (multisite::EXPERIMENT.points)(&ctx).unwrap();
        // 2 modes x (1ISL, 2ISL) x 6 percentages.
        assert_eq!(p.len(), 24);
        assert!(p.iter().any(|p| p.args.join(" ").contains("--update")
            && p.args.join(" ").contains("--durability sync")));
        let c = (cost::EXPERIMENT.points)(&ctx).unwrap();
        assert_eq!(c.len(), 2 * 2 * 2 * 11);
        let s = (scaling::EXPERIMENT.points)(&ctx).unwrap();
        assert!(
            s.iter().all(|p| !p.series.starts_with("CG")),
            "CG = SE here"
        );
        // Skew keeps the one island its verdict checks, not its twin CG.
        let sk = (skew::EXPERIMENT.points)(&ctx).unwrap();
        assert!(sk.iter().any(|p| p.series == "1ISL"));
        assert!(
            sk.iter().all(|p| !p.series.starts_with("CG")),
            "CG = 1ISL here"
        );
        let bad = Ctx {
            x: Some(vec![150.0]),
            ..ctx
        };
        assert!((multisite::EXPERIMENT.points)(&bad)
            .unwrap_err()
            .contains("0..=100"));
        assert!(!known("nope"));
        assert!(unknown("nope").contains("local-tpcc"));
    }
}
