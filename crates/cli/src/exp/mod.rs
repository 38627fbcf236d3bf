//! `islands experiment NAME`: the seeds' experiments as sweeps. Each one builds
//! its points (deployments × parameters), runs them through [`sweep::Runner`]
//! (a fresh `islands bench` per run, repetitions interleaved), and writes
//! `NAME.csv` (median and spread per point), `NAME-runs.csv` (every run, written
//! as it finishes), `NAME.json`, `NAME.svg` and `NAME.png`, and prints a table
//! and a verdict: the paper's claim next to what this machine measured.
//! `islands experiment all --quick` runs them all, small, and writes `report.md`.

pub mod plot;
pub mod sweep;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use islands::topology::{CpuId, Topology};
use serde::Serialize;

use plot::{Bar, BarFigure, BarPanel, Figure, LineFigure, LinePanel, Series};
use sweep::{Measured, Point, Runner, Spread, PHASES};

/// The experiments this module runs, in the order `all` runs them.
pub const NAMES: [&str; 7] = [
    "local-tpcc",
    "multisite",
    "cost",
    "breakdown",
    "scaling",
    "skew",
    "inserts",
];

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

struct Ctx {
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

/// The points of an experiment.
fn points(name: &str, c: &Ctx) -> Result<Vec<Point>, String> {
    let k = c.k;
    let fine = || islands_of(&c.m, k, k);
    let mut v = Vec::new();
    match name {
        "local-tpcc" => {
            let cores = c.xs(
                &(1..=k).map(|i| i as f64).collect::<Vec<_>>(),
                &if k > 1 {
                    vec![1.0, k as f64]
                } else {
                    vec![1.0]
                },
            );
            for x in cores {
                let kk = check_cores(x, k)?;
                for (label, d) in [
                    ("fine-grained (1 island per core)", islands_of(&c.m, kk, kk)),
                    ("shared-everything (1 island)", islands_of(&c.m, kk, 1)),
                ] {
                    v.push(point(
                        "TPC-C Payment, local only".into(),
                        label,
                        x,
                        &[d.args(), s(&["tpcc", "--mix", "payment", "--local-only"])],
                    ));
                }
            }
        }
        "multisite" => {
            let xs = c.xs(&[0.0, 20.0, 40.0, 60.0, 80.0, 100.0], &[0.0, 50.0, 100.0]);
            for &u in &c.modes {
                for d in divisors(k) {
                    let dep = islands_of(&c.m, k, d);
                    for &x in &xs {
                        check_pct(x)?;
                        v.push(point(
                            format!("{} 10 rows", mode_name(u)),
                            &dep.label,
                            x,
                            &[dep.args(), c.mode_args(u), micro(u, 10, x, 0.0)],
                        ));
                    }
                }
            }
        }
        "cost" => {
            let xs = c.xs(
                &[
                    2.0, 4.0, 8.0, 12.0, 18.0, 24.0, 30.0, 40.0, 60.0, 80.0, 100.0,
                ],
                &[2.0, 10.0, 100.0],
            );
            for &u in &c.modes {
                for (kind, ms) in [("local", 0.0), ("multisite", 100.0)] {
                    for d in divisors(k) {
                        let dep = islands_of(&c.m, k, d);
                        for &x in &xs {
                            let n = check_rows(x)?;
                            v.push(point(
                                format!("{kind} {}", mode_name(u)),
                                &dep.label,
                                x,
                                &[dep.args(), c.mode_args(u), micro(u, n, ms, 0.0)],
                            ));
                        }
                    }
                }
            }
        }
        "breakdown" => {
            let xs = c.xs(&[0.0, 50.0, 100.0], &[0.0, 50.0, 100.0]);
            let dep = fine();
            for &u in &c.modes {
                for &x in &xs {
                    check_pct(x)?;
                    v.push(point(
                        format!("{} 4 rows", mode_name(u)),
                        &dep.label,
                        x,
                        &[
                            dep.args(),
                            c.mode_args(u),
                            s(&["--phases"]),
                            micro(u, 4, x, 0.0),
                        ],
                    ));
                }
            }
        }
        "scaling" => {
            let cores = c.xs(
                &(1..=k).map(|i| i as f64).collect::<Vec<_>>(),
                &if k > 1 {
                    vec![1.0, k as f64]
                } else {
                    vec![1.0]
                },
            );
            for &u in &c.modes {
                for &x in &cores {
                    let kk = check_cores(x, k)?;
                    let mut deps = vec![
                        ("FG (1 island per core)", islands_of(&c.m, kk, kk)),
                        ("CG (1 island per socket)", per_socket(&c.m, kk)),
                        ("SE (1 island)", islands_of(&c.m, kk, 1)),
                    ];
                    // On one socket CG is SE: run it once (the notes say so).
                    if deps[1].1.groups == deps[2].1.groups {
                        deps.remove(1);
                    }
                    for (label, d) in deps {
                        v.push(point(
                            format!("{} 10 rows, 20% multisite", mode_name(u)),
                            label,
                            x,
                            &[d.args(), c.mode_args(u), micro(u, 10, 20.0, 0.0)],
                        ));
                    }
                }
            }
        }
        "skew" => {
            let xs = c.xs(&[0.0, 0.25, 0.5, 0.75, 0.99], &[0.0, 0.5, 0.99]);
            let pcts: &[f64] = if c.quick {
                &[0.0, 50.0]
            } else {
                &[0.0, 20.0, 50.0]
            };
            let mut deps = vec![
                islands_of(&c.m, k, k),
                per_socket(&c.m, k),
                islands_of(&c.m, k, 1),
            ];
            deps[0].label = format!("{k}ISL (fine)");
            deps[2].label = "1ISL".into();
            dedup_deployments(&mut deps);
            for &u in &c.modes {
                for &pct in pcts {
                    for d in &deps {
                        for &x in &xs {
                            if !(0.0..1.0).contains(&x) {
                                return Err(format!(
                                    "--x {x}: a skew θ must be at least 0 and less than 1"
                                ));
                            }
                            v.push(point(
                                format!("{} 2 rows, {}% multisite", mode_name(u), num(pct)),
                                &d.label,
                                x,
                                &[d.args(), c.mode_args(u), micro(u, 2, pct, x)],
                            ));
                        }
                    }
                }
            }
        }
        "inserts" => {
            let clients = c.xs(
                &(1..=k).map(|i| i as f64).collect::<Vec<_>>(),
                &if k > 1 {
                    vec![1.0, k as f64]
                } else {
                    vec![1.0]
                },
            );
            for &x in &clients {
                let kk = check_cores(x, k)?;
                for (log, dur) in [("log on (sync)", c.durability.as_str()), ("log off", "off")] {
                    for (label, d) in [
                        ("one shared log (1 island)", islands_of(&c.m, kk, 1)),
                        ("a log per island (1 per client)", islands_of(&c.m, kk, kk)),
                    ] {
                        v.push(point(
                            log.to_string(),
                            label,
                            x,
                            &[d.args(), s(&["--durability", dur, "inserts"])],
                        ));
                    }
                }
            }
        }
        other => return Err(unknown(other)),
    }
    Ok(v)
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

pub fn unknown(name: &str) -> String {
    format!(
        "no experiment '{name}'; the experiments are: counters, placement, {}, all",
        NAMES.join(", ")
    )
}

/// What each experiment shows, the seed's figure and claim, and what this
/// machine cannot show.
struct About {
    figure: &'static str,
    claim: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    cost: bool,
}

fn about(name: &str) -> About {
    match name {
        "local-tpcc" => About {
            figure: "paper Fig. 7",
            claim: "TPC-C Payment with only local transactions: fine-grained shared-nothing (one island per core) is 4.5x faster than shared-everything on 24 cores, mostly from contention on the Warehouse table.",
            x_label: "active cores",
            y_label: "K txn/s",
            cost: false,
        },
        "multisite" => About {
            figure: "paper Fig. 9",
            claim: "Reading or updating 10 rows: shared-everything (1ISL) is not affected by the share of multisite transactions; shared-nothing deployments lose throughput as it grows, the fine-grained ones most.",
            x_label: "% multisite transactions",
            y_label: "K txn/s",
            cost: false,
        },
        "cost" => About {
            figure: "paper Fig. 10",
            claim: "Local transactions cost least on the finest islands (single-threaded, no locks); multisite transactions cost most there, and less on coarser islands, because fewer islands take part in each one.",
            x_label: "rows per transaction",
            y_label: "core time per transaction (us)",
            cost: true,
        },
        "breakdown" => About {
            figure: "paper Fig. 11",
            claim: "For a 4-row transaction, communication dominates the extra cost of distributed read-only transactions; for updates the overhead splits between communication and additional logging.",
            x_label: "% multisite transactions",
            y_label: "time per transaction (us)",
            cost: false,
        },
        "scaling" => About {
            figure: "paper Fig. 12",
            claim: "At 20% multisite, shared-nothing deployments scale linearly with the active cores and coarse-grained islands are competitive with the best; shared-everything does not scale linearly on many sockets.",
            x_label: "active cores",
            y_label: "K txn/s",
            cost: false,
        },
        "skew" => About {
            figure: "paper Fig. 13",
            claim: "As Zipfian skew grows, shared-everything suffers from contention (mostly for updates) and fine-grained islands from one overloaded island that slows the others; coarse-grained islands cope best.",
            x_label: "skew θ",
            y_label: "K txn/s",
            cost: false,
        },
        "inserts" => About {
            figure: "Xi et al., Figs. 1-5",
            claim: "Insert-only clients with private tables: with one shared log, log writing is the bottleneck as clients grow; an instance (and log) per client group removes it; with the log off, both scale.",
            x_label: "clients",
            y_label: "K txn/s",
            cost: false,
        },
        _ => unreachable!("names are checked before"),
    }
}

fn metric(a: &About) -> impl Fn(&sweep::Sample) -> f64 {
    let cost = a.cost;
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

fn figure(name: &str, measured: &[Measured], machine: &str, k: usize) -> Figure {
    let a = about(name);
    let title = format!(
        "islands experiment {name} ({}), {machine}, {k} cores",
        a.figure
    );
    if name == "breakdown" {
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
            y_label: a.y_label.into(),
            segments: PHASES.iter().map(|p| p.to_string()).collect(),
            panels,
        });
    }
    let f = metric(&a);
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
        x_label: a.x_label.into(),
        y_label: a.y_label.into(),
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

fn verdict(name: &str, measured: &[Measured], k: usize, sockets: usize) -> Verdict {
    let tput = |s: &sweep::Sample| s.throughput_tps / 1e3;
    let cost = |s: &sweep::Sample| s.cost_us;
    let mut obs = Vec::new();
    let mut cav = Vec::new();
    let mut ok: Vec<bool> = Vec::new();
    if k < 2 {
        cav.push("one core: every deployment is the same single island, so no trend between deployments can show".into());
    }
    if sockets < 2 {
        cav.push(format!(
            "one socket: no island boundary crosses a socket here, so the paper's cross-socket costs (and coarse- versus fine-grained islands, CG = SE) cannot show; {k} cores compare 1 island against {k}"
        ));
    }
    let fine = format!("{k}ISL");
    match name {
        "local-tpcc" => {
            let p = "TPC-C Payment, local only";
            let x = k as f64;
            if let (Some(fg), Some(se)) = (
                at(measured, p, "fine-grained (1 island per core)", x, &tput),
                at(measured, p, "shared-everything (1 island)", x, &tput),
            ) {
                obs.push(format!("at {k} cores fine-grained {fg:.1} K txn/s vs shared-everything {se:.1} K: {:.2}x (paper: 4.5x on 24 cores)", fg / se));
                ok.push(fg > se * 1.05);
            }
        }
        "multisite" => {
            for panel in panels_of(measured) {
                let xs = xs_of(measured, &panel);
                let (Some(&lo), Some(&hi)) = (xs.first(), xs.last()) else {
                    continue;
                };
                for series in ["1ISL", fine.as_str()] {
                    if let (Some(a), Some(b)) = (
                        at(measured, &panel, series, lo, &tput),
                        at(measured, &panel, series, hi, &tput),
                    ) {
                        obs.push(format!("{panel}, {series}: {a:.1} K at {}% -> {b:.1} K at {}% multisite ({:.2}x)", num(lo), num(hi), b / a));
                        if k > 1 && lo == 0.0 && hi == 100.0 {
                            ok.push(if series == "1ISL" {
                                b / a > 0.8
                            } else {
                                b / a < 0.8
                            });
                        }
                    }
                }
            }
        }
        "cost" => {
            for panel in panels_of(measured) {
                let xs = xs_of(measured, &panel);
                let Some(&x) = xs.last() else { continue };
                if let (Some(one), Some(f)) = (
                    at(measured, &panel, "1ISL", x, &cost),
                    at(measured, &panel, &fine, x, &cost),
                ) {
                    obs.push(format!(
                        "{panel}, {} rows: 1ISL {one:.1} us, {fine} {f:.1} us per transaction",
                        num(x)
                    ));
                    if k > 1 {
                        ok.push(if panel.starts_with("local") {
                            f <= one * 1.05
                        } else {
                            f > one
                        });
                    }
                }
            }
        }
        "breakdown" => {
            for panel in panels_of(measured) {
                let c0 = phase(measured, &panel, 0.0, "communication");
                let c1 = phase(measured, &panel, 100.0, "communication");
                if let (Some(c0), Some(c1)) = (c0, c1) {
                    obs.push(format!(
                        "{panel}: communication {c0:.2} us at 0% -> {c1:.2} us at 100% multisite"
                    ));
                    ok.push(c1 > c0);
                }
                if panel.starts_with("update") {
                    let l0 = phase(measured, &panel, 0.0, "logging");
                    let l1 = phase(measured, &panel, 100.0, "logging");
                    if let (Some(l0), Some(l1)) = (l0, l1) {
                        obs.push(format!(
                            "{panel}: logging {l0:.2} us at 0% -> {l1:.2} us at 100% multisite"
                        ));
                        ok.push(l1 > l0);
                    }
                }
            }
            if measured
                .iter()
                .all(|m| m.samples.iter().all(|s| s.phases.is_empty()))
            {
                cav.push("the bench reports carried no phase counters".into());
            }
        }
        "scaling" => {
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
                        obs.push(format!(
                            "{panel}, {series}: {a:.1} K at {} core(s) -> {b:.1} K at {} ({:.2}x)",
                            num(lo),
                            num(hi),
                            b / a
                        ));
                        if series.starts_with("FG") && hi > lo {
                            ok.push(b > a * 1.2);
                        }
                    }
                }
            }
            cav.push("the paper's point is on 24 and 80 cores of 4 and 8 sockets; 2 cores show only the first step".into());
        }
        "skew" => {
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
                        obs.push(format!(
                            "{panel}, {series}: {a:.1} K at θ={} -> {b:.1} K at θ={} ({:.2}x)",
                            num(lo),
                            num(hi),
                            b / a
                        ));
                        if series.starts_with("1ISL") && panel.starts_with("update") && hi >= 0.9 {
                            ok.push(b < a);
                        }
                    }
                }
            }
        }
        "inserts" => {
            let x = k as f64;
            for panel in panels_of(measured) {
                if let (Some(shared), Some(per)) = (
                    at(measured, &panel, "one shared log (1 island)", x, &tput),
                    at(
                        measured,
                        &panel,
                        "a log per island (1 per client)",
                        x,
                        &tput,
                    ),
                ) {
                    obs.push(format!("{panel}, {k} clients: one shared log {shared:.1} K, a log per island {per:.1} K ({:.2}x)", per / shared));
                    if panel.starts_with("log on") && k > 1 {
                        ok.push(per > shared);
                    }
                }
            }
            cav.push("Xi et al. measured up to 64 clients on a 4-socket machine with separate log devices; here every log shares one virtual disk".into());
        }
        _ => {}
    }
    Verdict {
        reproduced: if ok.is_empty() {
            None
        } else {
            Some(ok.iter().all(|&b| b))
        },
        observed: obs,
        caveats: cav,
    }
}

fn table(name: &str, measured: &[Measured]) -> String {
    let a = about(name);
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
        if name == "breakdown" {
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
    let _ = a;
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
    pub name: String,
    pub png: PathBuf,
    pub verdict: Verdict,
    /// [`sweep::host_summary`] of its runs.
    pub host: Option<String>,
    pub interrupted: bool,
    pub points: usize,
}

/// Runs experiment `name` with `a`, writing into `a.out`.
pub fn run(name: &str, a: &SweepArgs) -> Result<Outcome, String> {
    if !NAMES.contains(&name) {
        return Err(unknown(name));
    }
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
    let pts = points(name, &ctx)?;
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
    let about = about(name);
    if !a.quiet {
        eprintln!(
            "experiment {name} ({}): {} points x {} reps, {warmup} s warm-up + {duration} s each, on {machine_name} ({k} cores); results in {}",
            about.figure,
            pts.len(),
            a.reps,
            out_dir.display()
        );
    }
    let (measured, interrupted) = runner.run(&pts)?;
    let v = verdict(name, &measured, k, sockets);
    sweep::write(
        &out_dir,
        &format!("{name}.csv"),
        &sweep::summary_csv(&measured),
    )?;
    let json = ExperimentJson {
        experiment: name,
        figure: about.figure,
        claim: about.claim,
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
        plot::save(&figure(name, &measured, &machine_name, k), &stem)?
    };
    print!("{}", table(name, &measured));
    println!("paper ({}): {}", about.figure, about.claim);
    for o in &v.observed {
        println!("here: {o}");
    }
    for c in &v.caveats {
        println!("note: {c}");
    }
    println!(
        "verdict: {}",
        match v.reproduced {
            Some(true) => "the trend shows on this machine",
            Some(false) => "the trend does not show on this machine",
            None => "this machine cannot tell",
        }
    );
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
        name: name.to_string(),
        png,
        verdict: v,
        host,
        interrupted,
        points: measured.len(),
    })
}

/// `islands experiment all`: the seven sweeps of `NAMES`, then `report.md` beside them.
pub fn run_all(a: &SweepArgs) -> Result<(), String> {
    let mut outcomes = Vec::new();
    for name in NAMES {
        let o = run(name, a)?;
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
            o.name,
            o.name,
            about(&o.name).figure,
            match o.verdict.reproduced {
                Some(true) => "shows",
                Some(false) => "does not show",
                None => "cannot tell here",
            }
        );
    }
    for o in outcomes {
        let ab = about(&o.name);
        let _ = writeln!(r, "\n## {}\n", o.name);
        let rel = o
            .png
            .strip_prefix(&a.out)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| o.png.clone());
        let _ = writeln!(r, "![{}]({})\n", o.name, rel.display());
        let _ = writeln!(r, "**The seed ({}):** {}\n", ab.figure, ab.claim);
        let _ = writeln!(r, "**Here:**\n");
        for ob in &o.verdict.observed {
            let _ = writeln!(r, "- {ob}");
        }
        let _ = writeln!(
            r,
            "\n**Verdict:** {}\n",
            match o.verdict.reproduced {
                Some(true) => "the trend shows on this machine.",
                Some(false) => "the trend does not show on this machine.",
                None => "this machine cannot tell.",
            }
        );
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
            o.name
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
        let p = points("multisite", &ctx).unwrap();
        // 2 modes x (1ISL, 2ISL) x 6 percentages.
        assert_eq!(p.len(), 24);
        assert!(p.iter().any(|p| p.args.join(" ").contains("--update")
            && p.args.join(" ").contains("--durability sync")));
        let c = points("cost", &ctx).unwrap();
        assert_eq!(c.len(), 2 * 2 * 2 * 11);
        let s = points("scaling", &ctx).unwrap();
        assert!(
            s.iter().all(|p| !p.series.starts_with("CG")),
            "CG = SE here"
        );
        let bad = Ctx {
            x: Some(vec![150.0]),
            ..ctx
        };
        assert!(points("multisite", &bad).unwrap_err().contains("0..=100"));
        assert!(points("nope", &bad).unwrap_err().contains("local-tpcc"));
    }
}
