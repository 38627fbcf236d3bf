//! Running an experiment's points: each run is a fresh `islands bench` process
//! (its own memory, its own load, nothing left from the previous point), the
//! repetitions are interleaved (rep 1 of every point, then rep 2, …) so that a
//! slow minute of a shared machine spreads over all points instead of biasing
//! one, and every finished run is appended to a CSV at once, so an interrupted
//! sweep (Ctrl-C, or a kill) keeps the points already measured.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

/// One point of a sweep: a panel of the figure, a series (line) in it, an x
/// value, and the `islands bench` arguments that measure it.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub panel: String,
    pub series: String,
    pub x: f64,
    pub args: Vec<String>,
}

/// The figures one run reports (from `islands bench --json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub rep: usize,
    pub throughput_tps: f64,
    pub committed: u64,
    pub threads: usize,
    pub measured_s: f64,
    /// Percent of commits that ran 2PC across islands.
    pub distributed_pct: f64,
    /// Engine aborts over all attempts.
    pub abort_rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Core time per committed transaction: threads x measured seconds / committed, in µs.
    pub cost_us: f64,
    /// Phase name -> µs per committed transaction (when the engine reported phases).
    pub phases: BTreeMap<String, f64>,
    pub deployment: String,
    /// The host probe's cross-core round trip before and after the run, in
    /// ns (see `islands_bench::report::HostProbe`): which host state the run
    /// saw, and whether it changed during the run.
    pub host_rt_ns: Option<u64>,
    pub host_rt_after_ns: Option<u64>,
}

/// The phases of a transaction's time, in the order the breakdown stacks them.
pub const PHASES: [&str; 5] = [
    "execution",
    "management",
    "communication",
    "locking",
    "logging",
];

impl Sample {
    /// Reads the figures of a bench JSON report.
    pub fn from_json(v: &Value, rep: usize) -> Result<Sample, String> {
        let f = |k: &str| -> Result<f64, String> {
            v.get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| format!("the bench report has no number '{k}'"))
        };
        let committed = f("committed")? as u64;
        let threads = f("threads")? as usize;
        let measured_s = f("measured_s")?;
        let distributed = v.get("distributed").and_then(Value::as_f64).unwrap_or(0.0);
        let lat = |k: &str| {
            v.get("latency")
                .and_then(|l| l.get(k))
                .and_then(Value::as_f64)
                .unwrap_or(0.0)
        };
        let mut phases = BTreeMap::new();
        if let Some(p) = v.get("phases").filter(|p| !p.is_null()) {
            for name in PHASES {
                if let Some(x) = p.get(format!("{name}_us_per_txn")).and_then(Value::as_f64) {
                    phases.insert(name.to_string(), x);
                }
            }
        }
        let host = |k: &str| v.get("host").and_then(|h| h.get(k)).and_then(Value::as_u64);
        Ok(Sample {
            rep,
            throughput_tps: f("throughput_tps")?,
            committed,
            threads,
            measured_s,
            distributed_pct: if committed > 0 {
                100.0 * distributed / committed as f64
            } else {
                0.0
            },
            abort_rate: f("abort_rate").unwrap_or(0.0),
            p50_us: lat("p50_us"),
            p99_us: lat("p99_us"),
            cost_us: if committed > 0 {
                threads as f64 * measured_s * 1e6 / committed as f64
            } else {
                f64::INFINITY
            },
            phases,
            deployment: v
                .get("deployment")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            host_rt_ns: host("round_trip_ns_before"),
            host_rt_after_ns: host("round_trip_ns_after"),
        })
    }
}

/// Median, spread and count of one metric over a point's repetitions.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Sample standard deviation (n − 1); 0 with one value.
    pub std: f64,
    /// `std` over `mean`, in percent (the paper's Table 1 column); 0 when
    /// the mean is not positive.
    pub std_pct: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Spread::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let std = var.sqrt();
        Spread {
            n,
            median,
            mean,
            min: v[0],
            max: v[n - 1],
            std,
            std_pct: if mean > 0.0 { std / mean * 100.0 } else { 0.0 },
        }
    }

    /// `median,mean,std,std_pct`, for a CSV row under [`Spread::csv_header`].
    pub fn csv(&self) -> String {
        format!(
            "{:.0},{:.0},{:.0},{:.3}",
            self.median, self.mean, self.std, self.std_pct
        )
    }

    /// The header of [`Spread::csv`]'s columns, each named with `unit`.
    pub fn csv_header(unit: &str) -> String {
        format!("median_{unit},mean_{unit},stddev_{unit},stddev_pct")
    }
}

/// A point with its samples.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    pub point: Point,
    pub samples: Vec<Sample>,
}

impl Measured {
    pub fn spread(&self, metric: impl Fn(&Sample) -> f64) -> Spread {
        Spread::of(&self.samples.iter().map(metric).collect::<Vec<_>>())
    }
}

/// How to run a sweep.
pub struct Runner {
    pub exe: PathBuf,
    pub reps: usize,
    /// Arguments every run gets (warm-up, duration, progress, …), before the point's.
    pub common: Vec<String>,
    pub out_dir: PathBuf,
    pub name: String,
    pub quiet: bool,
}

/// Set by Ctrl-C: the sweep stops after the run in progress (which the child,
/// interrupted too, does not finish) and writes what it has.
pub fn interrupted() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        let g = Arc::clone(&f);
        // Only one handler per process; if another part set one, Ctrl-C ends the
        // process and the per-run CSV still holds every finished run.
        let _ = ctrlc::set_handler(move || {
            if g.swap(true, Ordering::SeqCst) {
                eprintln!("\nsecond interrupt: stopping now");
                std::process::exit(130);
            }
            eprintln!("\ninterrupted: keeping the points measured so far");
        });
        f
    })
    .clone()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub const RUNS_HEADER: &str = "panel,series,x,rep,throughput_tps,committed,threads,cost_us,distributed_pct,abort_rate,p50_us,p99_us,phases,deployment,host_rt_ns,host_rt_after_ns";

fn run_line(p: &Point, s: &Sample) -> String {
    let phases = s
        .phases
        .iter()
        .map(|(k, v)| format!("{k}={v:.3}"))
        .collect::<Vec<_>>()
        .join(";");
    format!(
        "{},{},{},{},{:.1},{},{},{:.3},{:.2},{:.4},{:.1},{:.1},{},{},{},{}",
        csv_field(&p.panel),
        csv_field(&p.series),
        p.x,
        s.rep,
        s.throughput_tps,
        s.committed,
        s.threads,
        s.cost_us,
        s.distributed_pct,
        s.abort_rate,
        s.p50_us,
        s.p99_us,
        csv_field(&phases),
        csv_field(&s.deployment),
        s.host_rt_ns.map_or(String::new(), |n| n.to_string()),
        s.host_rt_after_ns.map_or(String::new(), |n| n.to_string())
    )
}

impl Runner {
    pub fn runs_csv(&self) -> PathBuf {
        self.out_dir.join(format!("{}-runs.csv", self.name))
    }

    /// Runs every point `reps` times, interleaved. Returns the measured points
    /// (those with at least one sample) and whether the sweep was interrupted.
    pub fn run(&self, points: &[Point]) -> Result<(Vec<Measured>, bool), String> {
        std::fs::create_dir_all(&self.out_dir)
            .map_err(|e| format!("cannot create {}: {e}", self.out_dir.display()))?;
        let runs_path = self.runs_csv();
        let mut runs = std::fs::File::create(&runs_path)
            .map_err(|e| format!("cannot write {}: {e}", runs_path.display()))?;
        writeln!(runs, "{RUNS_HEADER}").map_err(|e| e.to_string())?;
        let stop = interrupted();
        let mut measured: Vec<Measured> = points
            .iter()
            .map(|p| Measured {
                point: p.clone(),
                samples: Vec::new(),
            })
            .collect();
        let total = points.len() * self.reps;
        let started = Instant::now();
        let json = std::env::temp_dir().join(format!("islands-exp-{}.json", std::process::id()));
        let mut done = 0;
        let mut was_interrupted = false;
        'outer: for rep in 1..=self.reps {
            for (i, p) in points.iter().enumerate() {
                if stop.load(Ordering::SeqCst) {
                    was_interrupted = true;
                    break 'outer;
                }
                let _ = std::fs::remove_file(&json);
                let mut cmd = Command::new(&self.exe);
                cmd.arg("bench")
                    .args(&self.common)
                    .arg("--json")
                    .arg(&json)
                    .args(&p.args);
                let out = cmd
                    .output()
                    .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
                if stop.load(Ordering::SeqCst) {
                    was_interrupted = true;
                    break 'outer;
                }
                if !out.status.success() {
                    return Err(format!(
                        "run failed: islands bench {} {}\n{}",
                        self.common.join(" "),
                        p.args.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let text = std::fs::read_to_string(&json)
                    .map_err(|e| format!("the run wrote no report {}: {e}", json.display()))?;
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| format!("the run's report is not JSON: {e}"))?;
                let s = Sample::from_json(&v, rep)?;
                writeln!(runs, "{}", run_line(p, &s)).map_err(|e| e.to_string())?;
                runs.flush().map_err(|e| e.to_string())?;
                done += 1;
                if !self.quiet {
                    let el = started.elapsed().as_secs_f64();
                    let eta = el / done as f64 * (total - done) as f64;
                    eprintln!(
                        "[{done}/{total}, {}s left] {} | {} | x={} rep {rep}: {:.1} K txn/s, {:.1} us/txn{}",
                        eta.round(),
                        p.panel,
                        p.series,
                        p.x,
                        s.throughput_tps / 1e3,
                        s.cost_us,
                        if s.distributed_pct > 0.0 {
                            format!(", {:.0}% distributed", s.distributed_pct)
                        } else {
                            String::new()
                        }
                    );
                }
                measured[i].samples.push(s);
            }
        }
        let _ = std::fs::remove_file(&json);
        measured.retain(|m| !m.samples.is_empty());
        Ok((measured, was_interrupted))
    }
}

/// What the host probe read over an experiment's runs (see
/// `islands_bench::report::HostProbe`): the range and median of the
/// cross-core round trip before the runs, and how many runs saw it move by
/// more than half between before and after. `None` when no run was probed.
pub fn host_summary(measured: &[Measured]) -> Option<String> {
    let samples = measured.iter().flat_map(|m| &m.samples);
    let mut before: Vec<u64> = samples.clone().filter_map(|s| s.host_rt_ns).collect();
    if before.is_empty() {
        return None;
    }
    before.sort_unstable();
    let changed = samples
        .filter_map(|s| Some((s.host_rt_ns?, s.host_rt_after_ns?)))
        .filter(|&(b, a)| {
            let (lo, hi) = (b.min(a).max(1) as f64, b.max(a) as f64);
            hi / lo > 1.5
        })
        .count();
    Some(format!(
        "the host's cross-core round trip read {}-{} ns before the runs (median {} ns over {} runs); \
         {changed} run(s) saw it move by more than half during the run. Runs in different host \
         states are not comparable (docs/measuring.md; every run's readings \
         are in the runs CSV)",
        before[0],
        before[before.len() - 1],
        before[before.len() / 2],
        before.len()
    ))
}

/// The summary CSV: one line per point, median and spread of throughput and
/// cost, and the median of each phase.
pub fn summary_csv(measured: &[Measured]) -> String {
    let mut s = String::from(
        "panel,series,x,reps,throughput_median_tps,throughput_min_tps,throughput_max_tps,throughput_std_tps,cost_median_us,cost_min_us,cost_max_us,distributed_pct,abort_rate",
    );
    for ph in PHASES {
        s.push_str(&format!(",{ph}_us"));
    }
    s.push('\n');
    for m in measured {
        let t = m.spread(|x| x.throughput_tps);
        let c = m.spread(|x| x.cost_us);
        let d = m.spread(|x| x.distributed_pct);
        let a = m.spread(|x| x.abort_rate);
        s.push_str(&format!(
            "{},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.3},{:.3},{:.3},{:.2},{:.4}",
            csv_field(&m.point.panel),
            csv_field(&m.point.series),
            m.point.x,
            t.n,
            t.median,
            t.min,
            t.max,
            t.std,
            c.median,
            c.min,
            c.max,
            d.median,
            a.median
        ));
        for ph in PHASES {
            let p = m.spread(|x| x.phases.get(ph).copied().unwrap_or(f64::NAN));
            if p.n > 0 {
                s.push_str(&format!(",{:.3}", p.median));
            } else {
                s.push(',');
            }
        }
        s.push('\n');
    }
    s
}

/// Writes `text` to `dir/file`.
pub fn write(dir: &Path, file: &str, text: &str) -> Result<PathBuf, String> {
    let p = dir.join(file);
    crate::args::write_file(&p, text)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_and_std() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!(
            (s.n, s.median, s.mean, s.min, s.max),
            (3, 2.0, 2.0, 1.0, 3.0)
        );
        assert!((s.std - 1.0).abs() < 1e-12);
        assert!((s.std_pct - 50.0).abs() < 1e-9);
        assert_eq!(s.csv(), "2,2,1,50.000");
        assert_eq!(Spread::of(&[5.0]).std, 0.0);
        let s = Spread::of(&[4.0, 1.0]);
        assert_eq!(s.median, 2.5);
        assert_eq!(Spread::of(&[f64::NAN]).n, 0);
    }

    #[test]
    fn sample_reads_a_bench_report() {
        let v: Value = serde_json::from_str(
            r#"{"committed": 1000, "threads": 2, "measured_s": 0.5, "throughput_tps": 2000.0,
                "distributed": 250, "abort_rate": 0.1, "latency": {"p50_us": 3.0, "p99_us": 9.0},
                "phases": {"execution_us_per_txn": 1.5, "logging_us_per_txn": 0.5},
                "deployment": "2 islands"}"#,
        )
        .unwrap();
        let s = Sample::from_json(&v, 1).unwrap();
        assert_eq!(s.distributed_pct, 25.0);
        assert_eq!(s.cost_us, 1000.0); // 2 threads x 0.5 s / 1000 txns
        assert_eq!(s.phases.get("execution"), Some(&1.5));
        assert_eq!(s.phases.get("locking"), None);
        assert_eq!((s.host_rt_ns, s.host_rt_after_ns), (None, None));
        let probed: Value = serde_json::from_str(
            r#"{"committed": 1, "threads": 1, "measured_s": 1.0, "throughput_tps": 1.0,
                "host": {"cpus": [0, 1], "round_trip_ns_before": 1210, "round_trip_ns_after": 250}}"#,
        )
        .unwrap();
        let s = Sample::from_json(&probed, 1).unwrap();
        assert_eq!((s.host_rt_ns, s.host_rt_after_ns), (Some(1210), Some(250)));
        let bad: Value = serde_json::from_str(r#"{"threads": 2}"#).unwrap();
        assert!(Sample::from_json(&bad, 1)
            .unwrap_err()
            .contains("committed"));
    }

    #[test]
    fn the_host_summary_gives_the_range_and_the_runs_that_changed_state() {
        let s = |b: Option<u64>, a: Option<u64>| Sample {
            host_rt_ns: b,
            host_rt_after_ns: a,
            ..Sample::default()
        };
        let point = Point {
            panel: "p".into(),
            series: "s".into(),
            x: 0.0,
            args: Vec::new(),
        };
        let m = |samples| Measured {
            point: point.clone(),
            samples,
        };
        assert_eq!(host_summary(&[m(vec![s(None, None)])]), None);
        let text = host_summary(&[
            m(vec![s(Some(250), Some(260)), s(Some(1_210), Some(240))]),
            m(vec![s(Some(1_250), Some(1_230)), s(Some(240), None)]),
        ])
        .unwrap();
        assert!(
            text.contains("read 240-1250 ns before the runs (median 1210 ns over 4 runs)"),
            "{text}"
        );
        assert!(text.contains("1 run(s) saw it move"), "{text}");
    }

    #[test]
    fn csv_quotes_fields_with_commas() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
