//! What a run produced: a [`Report`], written as JSON for plots and scripts
//! and rendered as a short table for people.
//!
//! The report is built once, after the run, from the merged [`WorkerStats`]
//! and the durations the driver measured; nothing here is on a hot path.
//! Units are last in field names (`_s`, `_us`, `_ms`, `_tps`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::fmt::thousands;
use crate::stats::TxnTypes;
use hdrhistogram::Histogram;
use islands::error::AbortReason;
use islands::proc::stats::WorkerStats;

/// One transaction type's share of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TypeReport {
    pub name: String,
    pub committed: u64,
    pub throughput_tps: f64,
    pub user_aborts: u64,
}

/// Engine aborts of one reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbortReport {
    pub reason: String,
    pub count: u64,
    /// `count` over all attempts (commits + engine aborts + user aborts).
    pub rate: f64,
}

/// Commit latency, first start to commit, retries included.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyReport {
    pub samples: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

/// The commit latency histogram itself, so that reports of runs that ran
/// apart (one process per island) merge exactly ([`Report::merge`]): the
/// percentiles of a merged run come from the merged histogram, never from
/// averaged percentiles. The workers' hdrhistogram, as its bounds and its
/// recorded buckets: `buckets` lists each non-empty bucket as
/// `value_ns:count` (the bucket's highest equivalent value), separated by
/// spaces, values ascending. Recording those values back into a histogram of
/// the same bounds gives the same buckets, hence the same percentiles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    pub low_ns: u64,
    pub high_ns: u64,
    pub sigfig: u8,
    pub buckets: String,
}

impl LatencyHistogram {
    /// The recorded buckets of `h`.
    pub fn of(h: &Histogram<u64>) -> LatencyHistogram {
        let mut buckets = String::new();
        for v in h.iter_recorded() {
            if !buckets.is_empty() {
                buckets.push(' ');
            }
            let _ = write!(buckets, "{}:{}", v.value_iterated_to(), v.count_at_value());
        }
        LatencyHistogram {
            low_ns: h.low(),
            high_ns: h.high(),
            sigfig: h.sigfig(),
            buckets,
        }
    }

    /// The histogram back, or what is wrong with the text.
    pub fn histogram(&self) -> Result<Histogram<u64>, String> {
        let mut h = Histogram::new_with_bounds(self.low_ns.max(1), self.high_ns, self.sigfig)
            .map_err(|e| {
                format!(
                    "a latency histogram with bounds {}..{} ns and {} significant figures: {e:?}",
                    self.low_ns, self.high_ns, self.sigfig
                )
            })?;
        for pair in self.buckets.split_ascii_whitespace() {
            let bad = || format!("latency bucket '{pair}' is not value_ns:count");
            let (v, n) = pair.split_once(':').ok_or_else(bad)?;
            let v: u64 = v.parse().map_err(|_| bad())?;
            let n: u64 = n.parse().map_err(|_| bad())?;
            h.record_n(v, n)
                .map_err(|e| format!("latency bucket '{pair}' is outside the histogram: {e:?}"))?;
        }
        Ok(h)
    }
}

/// Write-ahead log figures, summed over islands: bytes and fdatasyncs over
/// the measured interval, checkpoints over the whole run (warm-up included),
/// and what the log directories hold at its end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogReport {
    pub bytes: u64,
    pub fdatasyncs: u64,
    pub fdatasync_mean_ms: f64,
    /// Periodic checkpoints taken while the run went, the time they took,
    /// and how many failed.
    #[serde(default)]
    pub checkpoints: u64,
    #[serde(default)]
    pub checkpoint_s: f64,
    #[serde(default)]
    pub checkpoints_failed: u64,
    /// Bytes of log segments and of checkpoint files in the log directories
    /// at the end of the run: what a recovery reads.
    #[serde(default)]
    pub segment_bytes_end: u64,
    #[serde(default)]
    pub checkpoint_bytes_end: u64,
}

/// Counters of a cluster's traffic at one moment: the islands' workers'
/// frames, batches and bytes sent (summed [`islands::executor::IslandCounts`]),
/// their distributed commits, and the transport's system calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficSample {
    pub distributed_commits: u64,
    pub frames: u64,
    pub batches: u64,
    pub bytes: u64,
    pub send_syscalls: u64,
    pub recv_syscalls: u64,
}

impl TrafficSample {
    /// Each counter of `self` combined with the same of `o` by `f`.
    fn with(&self, o: &TrafficSample, f: fn(u64, u64) -> u64) -> TrafficSample {
        TrafficSample {
            distributed_commits: f(self.distributed_commits, o.distributed_commits),
            frames: f(self.frames, o.frames),
            batches: f(self.batches, o.batches),
            bytes: f(self.bytes, o.bytes),
            send_syscalls: f(self.send_syscalls, o.send_syscalls),
            recv_syscalls: f(self.recv_syscalls, o.recv_syscalls),
        }
    }
}

/// What crossed between workers over the measured interval, in all and per
/// distributed commit (two-phase commits the islands coordinated in that
/// interval; the per-commit figures are 0 when there were none). Frames
/// and batches are those the workers' outboxes handed to the transport;
/// bytes are the batches' own, without a transport's stream or ring
/// headers; system calls are the transport's (none for `inproc`). A frame
/// sent on behalf of a transaction that aborted counts too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrafficReport {
    pub distributed_commits: u64,
    pub frames: u64,
    pub batches: u64,
    pub bytes: u64,
    pub send_syscalls: u64,
    pub recv_syscalls: u64,
    pub frames_per_distributed_commit: f64,
    pub batches_per_distributed_commit: f64,
    pub bytes_per_distributed_commit: f64,
    pub send_syscalls_per_distributed_commit: f64,
    pub recv_syscalls_per_distributed_commit: f64,
}

impl TrafficReport {
    /// The traffic between two samples of the same cluster.
    pub fn between(before: &TrafficSample, after: &TrafficSample) -> TrafficReport {
        TrafficReport::of_totals(&after.with(before, u64::saturating_sub))
    }

    /// The report of traffic totals `t` (its figures per distributed commit
    /// divided out here).
    pub fn of_totals(t: &TrafficSample) -> TrafficReport {
        let commits = t.distributed_commits;
        let per = |n: u64| {
            if commits == 0 {
                0.0
            } else {
                n as f64 / commits as f64
            }
        };
        TrafficReport {
            distributed_commits: commits,
            frames: t.frames,
            batches: t.batches,
            bytes: t.bytes,
            send_syscalls: t.send_syscalls,
            recv_syscalls: t.recv_syscalls,
            frames_per_distributed_commit: per(t.frames),
            batches_per_distributed_commit: per(t.batches),
            bytes_per_distributed_commit: per(t.bytes),
            send_syscalls_per_distributed_commit: per(t.send_syscalls),
            recv_syscalls_per_distributed_commit: per(t.recv_syscalls),
        }
    }

    /// The totals this report counts.
    fn totals(&self) -> TrafficSample {
        TrafficSample {
            distributed_commits: self.distributed_commits,
            frames: self.frames,
            batches: self.batches,
            bytes: self.bytes,
            send_syscalls: self.send_syscalls,
            recv_syscalls: self.recv_syscalls,
        }
    }
}

/// A reading of the host's cross-core state around a run: the median round
/// trip of a spin-queue ping-pong between two of the run's worker CPUs
/// (those of two islands when there are several), taken just before the
/// warm-up and again just after the run (see [`crate::ipc::probe`]).
///
/// Why: on a virtual machine the hypervisor may place two vCPUs on cores
/// that share a last-level cache or on cores that do not, and move them
/// while the guest runs. The guest's `/sys` cannot tell, yet message-heavy
/// runs change by a factor of 1.3 to 1.7 between the two (this project's 2-vCPU
/// AMD VM read 0.3 µs in one state and 1.2 µs in the other). The reading
/// says which state a figure was measured in; a run whose two readings
/// differ saw the state change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostProbe {
    /// The two CPUs of the ping-pong.
    pub cpus: [usize; 2],
    pub round_trip_ns_before: u64,
    pub round_trip_ns_after: Option<u64>,
}

/// The machine the run was on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    /// CPUs this process may run on (like `nproc`).
    pub nproc: usize,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
}

impl Machine {
    /// Reads the description from `/proc`; what cannot be read is "unknown" (or 0).
    pub fn detect() -> Machine {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".to_string())
        };
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model_of(&s))
            .unwrap_or_else(|| "unknown".to_string());
        Machine {
            hostname: read("/proc/sys/kernel/hostname"),
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease"),
            cpu_model,
        }
    }
}

fn cpu_model_of(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// What the driver knows about a run besides the statistics.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub workload: String,
    pub parameters: BTreeMap<String, String>,
    pub deployment: String,
    pub threads: usize,
    pub warmup: Duration,
    pub measured: Duration,
    /// Process CPU time over the measured interval ([`islands::cpu::CpuTime::process_now`] difference).
    pub cpu_process: Duration,
    /// Cores the run was given, the denominator of the CPU utilisation.
    pub cores: usize,
    pub started: SystemTime,
    pub log: Option<LogReport>,
    pub machine: Machine,
}

/// The outcome of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub workload: String,
    pub parameters: BTreeMap<String, String>,
    pub deployment: String,
    pub threads: usize,
    pub warmup_s: f64,
    pub measured_s: f64,
    pub committed: u64,
    pub throughput_tps: f64,
    /// In the order of the workload's [`TxnTypes`].
    pub per_type: Vec<TypeReport>,
    pub user_aborts: u64,
    pub aborts: u64,
    /// Engine aborts over all attempts.
    pub abort_rate: f64,
    /// Every reason, zero or not, so the JSON has the same shape in every run.
    pub aborts_by_reason: Vec<AbortReport>,
    pub retries: u64,
    /// Committed transactions that ran two-phase commit across islands.
    pub distributed: u64,
    pub latency: LatencyReport,
    /// The histogram `latency` was read from (`None` in reports written
    /// before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_histogram: Option<LatencyHistogram>,
    pub cpu_process_s: f64,
    /// `cpu_process_s / (measured_s * cores)`.
    pub cpu_utilisation: f64,
    pub cores: usize,
    pub log: Option<LogReport>,
    pub machine: Machine,
    /// The host's cross-core round trip around the run (`None`: not probed,
    /// e.g. unpinned workers or a single CPU).
    #[serde(default)]
    pub host: Option<HostProbe>,
    pub started_unix_s: u64,
    /// The clock the workers time with and the distributed executors' timeouts
    /// count on ([`islands::phases::clock`]): the time-stamp counter,
    /// checked invariant and synchronised across CPUs, or the monotonic
    /// clock, and why.
    #[serde(default)]
    pub clock: String,
    /// Where the workers' time went, per committed transaction (`--phases`).
    pub phases: Option<PhaseReport>,
    /// Messages between workers (a cluster that routes across islands).
    #[serde(default)]
    pub traffic: Option<TrafficReport>,
    pub notes: Vec<String>,
    /// The run stopped before its planned end, for this reason (a log that
    /// failed, a worker's error); the figures cover the time up to the stop.
    #[serde(default)]
    pub stopped: Option<String>,
    /// A run of one process per island (`islands bench --processes`): how
    /// many processes' reports this one merges ([`Report::merge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<usize>,
    /// Each process's own figures, in island order (empty unless `processes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_process: Vec<ProcessShare>,
}

/// One process's share of a merged run (see [`Report::merge`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessShare {
    pub island: usize,
    pub committed: u64,
    pub throughput_tps: f64,
    pub aborts: u64,
    pub distributed: u64,
    pub measured_s: f64,
    pub cpu_process_s: f64,
}

/// Core time per committed transaction in each phase (see
/// [`islands::phases`]), in microseconds, summed over the workers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub execution_us_per_txn: f64,
    pub management_us_per_txn: f64,
    pub communication_us_per_txn: f64,
    pub locking_us_per_txn: f64,
    pub logging_us_per_txn: f64,
    /// Time workers gave their core away with nothing to do (not a cost).
    pub idle_us_per_txn: f64,
}

impl PhaseReport {
    /// From the workers' merged ticks and the transactions they committed.
    pub fn new(ticks: &[u64; islands::phases::PHASES], committed: u64) -> PhaseReport {
        use islands::phases::{ticks_per_us, Phase};
        let per = |p: Phase| {
            if committed == 0 {
                0.0
            } else {
                ticks[p as usize] as f64 / ticks_per_us() / committed as f64
            }
        };
        PhaseReport {
            execution_us_per_txn: per(Phase::Execution),
            management_us_per_txn: per(Phase::Management),
            communication_us_per_txn: per(Phase::Communication),
            locking_us_per_txn: per(Phase::Locking),
            logging_us_per_txn: per(Phase::Logging),
            idle_us_per_txn: per(Phase::Idle),
        }
    }
}

impl Report {
    /// Builds the report from the workers' merged statistics.
    pub fn from_stats(types: &TxnTypes, stats: &WorkerStats, run: RunInfo) -> Report {
        let measured_s = run.measured.as_secs_f64();
        let per_s = |n: u64| {
            if measured_s > 0.0 {
                n as f64 / measured_s
            } else {
                0.0
            }
        };
        let committed = stats.total_commits();
        let user_aborts = stats.total_user_aborts();
        let aborts = stats.total_aborts();
        let attempts = committed + aborts + user_aborts;
        let rate = |n: u64| {
            if attempts > 0 {
                n as f64 / attempts as f64
            } else {
                0.0
            }
        };
        let per_type = (0..types.len())
            .map(|ty| TypeReport {
                name: types.name(ty).to_string(),
                committed: stats.commits[ty],
                throughput_tps: per_s(stats.commits[ty]),
                user_aborts: stats.user_aborts[ty],
            })
            .collect();
        let aborts_by_reason = AbortReason::ALL
            .iter()
            .map(|&r| AbortReport {
                reason: r.name().to_string(),
                count: stats.aborts_for(r),
                rate: rate(stats.aborts_for(r)),
            })
            .collect();
        let cpu_process_s = run.cpu_process.as_secs_f64();
        let cpu_capacity_s = measured_s * run.cores as f64;
        Report {
            workload: run.workload,
            parameters: run.parameters,
            deployment: run.deployment,
            threads: run.threads,
            warmup_s: run.warmup.as_secs_f64(),
            measured_s,
            committed,
            throughput_tps: per_s(committed),
            per_type,
            user_aborts,
            aborts,
            abort_rate: rate(aborts),
            aborts_by_reason,
            retries: stats.retries,
            distributed: stats.distributed,
            latency: latency_report(stats.latency_ns()),
            latency_histogram: Some(LatencyHistogram::of(stats.latency_ns())),
            cpu_process_s,
            cpu_utilisation: if cpu_capacity_s > 0.0 {
                cpu_process_s / cpu_capacity_s
            } else {
                0.0
            },
            cores: run.cores,
            log: run.log,
            machine: run.machine,
            host: None,
            started_unix_s: run
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            clock: islands::phases::clock().to_string(),
            phases: None,
            traffic: None,
            notes: Vec::new(),
            stopped: None,
            processes: None,
            per_process: Vec::new(),
        }
    }

    /// One report of a run made of one process per island (`islands bench
    /// --processes`): `parts[k]` is island `k`'s process's own report, each
    /// run for the same warm-up and measured time from the same start.
    ///
    /// Counts are summed (commits, aborts by reason, retries, log bytes,
    /// traffic), and so is throughput (each process's own rate over its own
    /// measured time); rates and figures per transaction or per distributed
    /// commit are divided again from the sums; the latency percentiles are
    /// read from the sum of the processes' histograms. Notes every process
    /// made are kept once, the others with their island. Refused: no parts,
    /// parts of different workloads, or one without its latency histogram.
    pub fn merge(parts: &[Report]) -> Result<Report, String> {
        let Some(first) = parts.first() else {
            return Err("no process reported".into());
        };
        let names = |r: &Report| {
            r.per_type
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
        };
        let reasons = |r: &Report| {
            r.aborts_by_reason
                .iter()
                .map(|a| a.reason.clone())
                .collect::<Vec<_>>()
        };
        for (k, p) in parts.iter().enumerate() {
            if p.workload != first.workload || names(p) != names(first) {
                return Err(format!(
                    "island {k} ran '{}' ({}), island 0 '{}' ({})",
                    p.workload,
                    names(p).join(", "),
                    first.workload,
                    names(first).join(", ")
                ));
            }
            if reasons(p) != reasons(first) {
                return Err(format!(
                    "island {k} counts other abort reasons than island 0"
                ));
            }
        }
        let mut latency: Option<Histogram<u64>> = None;
        for (k, p) in parts.iter().enumerate() {
            let h = p
                .latency_histogram
                .as_ref()
                .ok_or_else(|| format!("island {k}'s report carries no latency histogram"))?
                .histogram()
                .map_err(|e| format!("island {k}: {e}"))?;
            match &mut latency {
                None => latency = Some(h),
                Some(sum) => sum
                    .add(&h)
                    .map_err(|e| format!("island {k}'s latency histogram: {e:?}"))?,
            }
        }
        let latency = latency.ok_or("no process reported")?;
        let sum = |f: fn(&Report) -> u64| parts.iter().map(f).sum::<u64>();
        let sum_f = |f: fn(&Report) -> f64| parts.iter().map(f).sum::<f64>();
        let mut m = first.clone();
        m.threads = parts.iter().map(|p| p.threads).sum();
        m.measured_s = parts.iter().map(|p| p.measured_s).fold(0.0, f64::max);
        m.committed = sum(|p| p.committed);
        m.throughput_tps = sum_f(|p| p.throughput_tps);
        for (ty, t) in m.per_type.iter_mut().enumerate() {
            t.committed = parts.iter().map(|p| p.per_type[ty].committed).sum();
            t.throughput_tps = parts.iter().map(|p| p.per_type[ty].throughput_tps).sum();
            t.user_aborts = parts.iter().map(|p| p.per_type[ty].user_aborts).sum();
        }
        m.user_aborts = sum(|p| p.user_aborts);
        m.aborts = sum(|p| p.aborts);
        m.retries = sum(|p| p.retries);
        m.distributed = sum(|p| p.distributed);
        let attempts = m.committed + m.aborts + m.user_aborts;
        let rate = |n: u64| {
            if attempts > 0 {
                n as f64 / attempts as f64
            } else {
                0.0
            }
        };
        m.abort_rate = rate(m.aborts);
        for (i, a) in m.aborts_by_reason.iter_mut().enumerate() {
            a.count = parts.iter().map(|p| p.aborts_by_reason[i].count).sum();
            a.rate = rate(a.count);
        }
        m.latency = latency_report(&latency);
        m.latency_histogram = Some(LatencyHistogram::of(&latency));
        m.cpu_process_s = sum_f(|p| p.cpu_process_s);
        m.cores = parts.iter().map(|p| p.cores).max().unwrap_or(0);
        let capacity_s = m.measured_s * m.cores as f64;
        m.cpu_utilisation = if capacity_s > 0.0 {
            m.cpu_process_s / capacity_s
        } else {
            0.0
        };
        m.log = merge_logs(parts);
        m.host = None;
        m.started_unix_s = parts.iter().map(|p| p.started_unix_s).min().unwrap_or(0);
        m.phases = merge_phases(parts);
        m.traffic = parts.iter().any(|p| p.traffic.is_some()).then(|| {
            let t: Vec<TrafficSample> = parts
                .iter()
                .filter_map(|p| p.traffic.as_ref().map(TrafficReport::totals))
                .collect();
            let sum = t.iter().fold(TrafficSample::default(), |a, b| {
                a.with(b, u64::saturating_add)
            });
            TrafficReport::of_totals(&sum)
        });
        m.notes = Vec::new();
        for (k, p) in parts.iter().enumerate() {
            for n in &p.notes {
                if parts.iter().all(|q| q.notes.contains(n)) {
                    if !m.notes.contains(n) {
                        m.notes.push(n.clone());
                    }
                } else {
                    m.notes.push(format!("island {k}: {n}"));
                }
            }
        }
        m.stopped = parts
            .iter()
            .enumerate()
            .find_map(|(k, p)| p.stopped.as_ref().map(|s| format!("island {k}: {s}")));
        m.processes = Some(parts.len());
        m.per_process = parts
            .iter()
            .enumerate()
            .map(|(k, p)| ProcessShare {
                island: k,
                committed: p.committed,
                throughput_tps: p.throughput_tps,
                aborts: p.aborts,
                distributed: p.distributed,
                measured_s: p.measured_s,
                cpu_process_s: p.cpu_process_s,
            })
            .collect();
        Ok(m)
    }

    pub fn to_json_pretty(&self) -> String {
        // A Report is plain data (strings, numbers, maps with string keys);
        // serde_json cannot fail on it. Non-finite floats become null.
        match serde_json::to_string_pretty(self) {
            Ok(s) => s,
            Err(e) => panic!("serialising a Report failed: {e}"),
        }
    }

    pub fn from_json(json: &str) -> Result<Report, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// Writes the pretty JSON and a final newline, replacing `path`.
    pub fn write_json(&self, path: impl AsRef<Path>) -> io::Result<()> {
        let mut json = self.to_json_pretty();
        json.push('\n');
        std::fs::write(path, json)
    }

    /// A compact summary for a terminal. Abort lines appear only when non-zero.
    pub fn render_table(&self) -> String {
        let mut t = String::new();
        // Writing to a String cannot fail; the results are ignored on purpose.
        let _ = writeln!(t, "workload    {}", self.workload);
        if !self.parameters.is_empty() {
            let params: Vec<String> = self
                .parameters
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(t, "parameters  {}", params.join(" "));
        }
        let _ = writeln!(t, "deployment  {}", self.deployment);
        let _ = writeln!(
            t,
            "run         {} threads, warm-up {:.1} s, measured {:.1} s",
            self.threads, self.warmup_s, self.measured_s
        );
        let _ = writeln!(
            t,
            "throughput  {} txn/s  ({} committed)",
            rate_int(self.throughput_tps),
            thousands(self.committed)
        );
        if let Some(n) = self.processes {
            let each: Vec<String> = self
                .per_process
                .iter()
                .map(|p| format!("island {} {} txn/s", p.island, rate_int(p.throughput_tps)))
                .collect();
            let _ = writeln!(
                t,
                "processes   {n}, one per island (throughput summed): {}",
                each.join(", ")
            );
        }
        let name_width = self
            .per_type
            .iter()
            .map(|p| p.name.len())
            .max()
            .unwrap_or(0);
        for p in &self.per_type {
            let share = if self.committed > 0 {
                100.0 * p.committed as f64 / self.committed as f64
            } else {
                0.0
            };
            let _ = write!(
                t,
                "  {:<name_width$}  {:>12} txn/s  {:>14}  {share:5.1}%",
                p.name,
                rate_int(p.throughput_tps),
                thousands(p.committed)
            );
            if p.user_aborts > 0 {
                let _ = write!(t, "  user aborts {}", thousands(p.user_aborts));
            }
            t.push('\n');
        }
        if self.distributed > 0 {
            let _ = writeln!(
                t,
                "distributed {}  ({:.1}% of commits ran two-phase commit across islands)",
                thousands(self.distributed),
                100.0 * self.distributed as f64 / self.committed.max(1) as f64
            );
        }
        if let Some(x) = self.traffic.as_ref().filter(|x| x.frames > 0) {
            let _ = writeln!(
                t,
                "traffic     {} frames, {} batches, {} bytes, {} + {} send + receive syscalls",
                thousands(x.frames),
                thousands(x.batches),
                thousands(x.bytes),
                thousands(x.send_syscalls),
                thousands(x.recv_syscalls)
            );
            if x.distributed_commits > 0 {
                let _ = writeln!(
                    t,
                    "  per distributed commit  {:.2} frames, {:.2} batches, {:.0} bytes, \
                     {:.2} + {:.2} send + receive syscalls",
                    x.frames_per_distributed_commit,
                    x.batches_per_distributed_commit,
                    x.bytes_per_distributed_commit,
                    x.send_syscalls_per_distributed_commit,
                    x.recv_syscalls_per_distributed_commit
                );
            }
        }
        if self.aborts > 0 {
            let _ = writeln!(
                t,
                "aborts      {}  ({:.2}% of attempts), retries {}",
                thousands(self.aborts),
                100.0 * self.abort_rate,
                thousands(self.retries)
            );
            for a in self.aborts_by_reason.iter().filter(|a| a.count > 0) {
                let _ = writeln!(
                    t,
                    "  {:<15}  {:>14}  {:6.2}%",
                    a.reason,
                    thousands(a.count),
                    100.0 * a.rate
                );
            }
        }
        if self.user_aborts > 0 {
            let _ = writeln!(t, "user aborts {}", thousands(self.user_aborts));
        }
        let l = &self.latency;
        let _ = writeln!(
            t,
            "latency us  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us
        );
        let _ = writeln!(
            t,
            "cpu         {:.2} s process, {:.1}% of {} cores",
            self.cpu_process_s,
            100.0 * self.cpu_utilisation,
            self.cores
        );
        if let Some(p) = &self.phases {
            let _ = writeln!(
                t,
                "phases us   execution {:.2}  management {:.2}  communication {:.2}  locking {:.2}  \
                 logging {:.2}  (per transaction; idle {:.2})",
                p.execution_us_per_txn,
                p.management_us_per_txn,
                p.communication_us_per_txn,
                p.locking_us_per_txn,
                p.logging_us_per_txn,
                p.idle_us_per_txn
            );
        }
        if let Some(log) = &self.log {
            let _ = writeln!(
                t,
                "log         {} bytes, {} fdatasyncs, mean {:.3} ms",
                thousands(log.bytes),
                thousands(log.fdatasyncs),
                log.fdatasync_mean_ms
            );
            let mb = |b: u64| b as f64 / (1u64 << 20) as f64;
            let failed = if log.checkpoints_failed > 0 {
                format!(", {} failed", log.checkpoints_failed)
            } else {
                String::new()
            };
            let _ = writeln!(
                t,
                "checkpoint  {} periodic during the run ({:.1} s{failed}); on disk at the end: log {:.1} MB, checkpoints {:.1} MB",
                log.checkpoints,
                log.checkpoint_s,
                mb(log.segment_bytes_end),
                mb(log.checkpoint_bytes_end)
            );
        }
        let m = &self.machine;
        let _ = writeln!(
            t,
            "machine     {} ({} cpus, {}, linux {})",
            m.hostname, m.nproc, m.cpu_model, m.kernel
        );
        if !self.clock.is_empty() {
            let _ = writeln!(t, "clock       {}", self.clock);
        }
        if let Some(h) = &self.host {
            let us = |ns: u64| ns as f64 / 1e3;
            let after = h
                .round_trip_ns_after
                .map_or(String::new(), |a| format!(", {:.2} µs after", us(a)));
            let _ = writeln!(
                t,
                "host        cross-core round trip cpus {}-{}: {:.2} µs before the run{after} \
                 (spin-queue median: the host's state, see docs/measuring.md)",
                h.cpus[0],
                h.cpus[1],
                us(h.round_trip_ns_before)
            );
        }
        for note in &self.notes {
            let _ = writeln!(t, "note        {note}");
        }
        t
    }
}

/// The processes' logs summed (`None` unless every process had one); the
/// mean fdatasync is weighted by each process's fdatasyncs.
fn merge_logs(parts: &[Report]) -> Option<LogReport> {
    let logs: Vec<&LogReport> = parts
        .iter()
        .map(|p| p.log.as_ref())
        .collect::<Option<_>>()?;
    let mut m = LogReport::default();
    let mut sync_ms = 0.0;
    for l in logs {
        m.bytes += l.bytes;
        m.fdatasyncs += l.fdatasyncs;
        sync_ms += l.fdatasync_mean_ms * l.fdatasyncs as f64;
        m.checkpoints += l.checkpoints;
        m.checkpoint_s += l.checkpoint_s;
        m.checkpoints_failed += l.checkpoints_failed;
        m.segment_bytes_end += l.segment_bytes_end;
        m.checkpoint_bytes_end += l.checkpoint_bytes_end;
    }
    if m.fdatasyncs > 0 {
        m.fdatasync_mean_ms = sync_ms / m.fdatasyncs as f64;
    }
    Some(m)
}

/// The processes' phases per transaction, weighted by their commits (`None`
/// unless every process counted them).
fn merge_phases(parts: &[Report]) -> Option<PhaseReport> {
    let phases: Vec<(&PhaseReport, f64)> = parts
        .iter()
        .map(|p| p.phases.as_ref().map(|x| (x, p.committed as f64)))
        .collect::<Option<_>>()?;
    let total: f64 = phases.iter().map(|(_, c)| c).sum();
    let per = |f: fn(&PhaseReport) -> f64| {
        if total > 0.0 {
            phases.iter().map(|(x, c)| f(x) * c).sum::<f64>() / total
        } else {
            0.0
        }
    };
    Some(PhaseReport {
        execution_us_per_txn: per(|x| x.execution_us_per_txn),
        management_us_per_txn: per(|x| x.management_us_per_txn),
        communication_us_per_txn: per(|x| x.communication_us_per_txn),
        locking_us_per_txn: per(|x| x.locking_us_per_txn),
        logging_us_per_txn: per(|x| x.logging_us_per_txn),
        idle_us_per_txn: per(|x| x.idle_us_per_txn),
    })
}

/// A rate rounded to a whole number with thousands separators.
fn rate_int(per_s: f64) -> String {
    if per_s.is_finite() && per_s >= 0.0 {
        thousands(per_s.round() as u64)
    } else {
        "-".to_string()
    }
}

fn latency_report(h: &Histogram<u64>) -> LatencyReport {
    if h.is_empty() {
        return LatencyReport::default();
    }
    let us = |ns: u64| ns as f64 / 1_000.0;
    LatencyReport {
        samples: h.len(),
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
        mean_us: h.mean() / 1_000.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_is_the_difference_per_distributed_commit_and_shown_when_there_is_some() {
        let before = TrafficSample {
            distributed_commits: 10,
            frames: 100,
            batches: 50,
            bytes: 4_000,
            send_syscalls: 7,
            recv_syscalls: 3,
        };
        let after = TrafficSample {
            distributed_commits: 110,
            frames: 700,
            batches: 450,
            bytes: 44_000,
            send_syscalls: 207,
            recv_syscalls: 103,
        };
        let x = TrafficReport::between(&before, &after);
        assert_eq!(
            (x.distributed_commits, x.frames, x.batches, x.bytes),
            (100, 600, 400, 40_000)
        );
        assert_eq!((x.send_syscalls, x.recv_syscalls), (200, 100));
        assert_eq!(x.frames_per_distributed_commit, 6.0);
        assert_eq!(x.batches_per_distributed_commit, 4.0);
        assert_eq!(x.bytes_per_distributed_commit, 400.0);
        assert_eq!(x.send_syscalls_per_distributed_commit, 2.0);
        assert_eq!(x.recv_syscalls_per_distributed_commit, 1.0);
        let none = TrafficReport::between(&after, &after);
        assert_eq!(
            none.frames_per_distributed_commit, 0.0,
            "no commit: 0, not NaN"
        );

        let (mut r, _) = sample();
        assert!(!r.render_table().contains("traffic"));
        r.traffic = Some(none);
        assert!(
            !r.render_table().contains("traffic"),
            "nothing sent: no line"
        );
        r.traffic = Some(x);
        let t = r.render_table();
        assert!(t.contains("traffic     600 frames, 400 batches"), "{t}");
        assert!(
            t.contains("per distributed commit  6.00 frames, 4.00 batches, 400 bytes"),
            "{t}"
        );
        let back = Report::from_json(&r.to_json_pretty()).unwrap();
        assert_eq!(back.traffic, r.traffic);
    }

    fn sample() -> (Report, WorkerStats) {
        let types = TxnTypes::new(&["NewOrder", "Payment"]).unwrap();
        let mut a = WorkerStats::new();
        let mut b = WorkerStats::new();
        // 1..=1000 us over two workers; 600,000 NewOrder and 400,000 Payment in all.
        for us in 1..=1000u64 {
            let s = if us % 2 == 0 { &mut a } else { &mut b };
            s.record_commit(0, us * 1_000);
        }
        for _ in 0..599_000 {
            a.record_commit(0, 500_000);
        }
        for _ in 0..400_000 {
            b.record_commit(1, 500_000);
        }
        for _ in 0..1_000 {
            a.record_abort(AbortReason::LockConflict);
            a.record_retry();
        }
        b.record_user_abort(0);
        a.merge(&b);
        let mut params = BTreeMap::new();
        params.insert("warehouses".to_string(), "4".to_string());
        let run = RunInfo {
            workload: "tpcc".to_string(),
            parameters: params,
            deployment: "2 islands x 1 core".to_string(),
            threads: 2,
            warmup: Duration::from_secs(1),
            measured: Duration::from_secs(10),
            cpu_process: Duration::from_secs(15),
            cores: 2,
            started: UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            log: Some(LogReport {
                bytes: 1 << 20,
                fdatasyncs: 3_000,
                fdatasync_mean_ms: 3.1,
                checkpoints: 2,
                checkpoint_s: 0.5,
                checkpoints_failed: 0,
                segment_bytes_end: 3 << 20,
                checkpoint_bytes_end: 5 << 20,
            }),
            machine: Machine {
                hostname: "box".to_string(),
                nproc: 2,
                kernel: "6.1.0".to_string(),
                cpu_model: "Test CPU".to_string(),
            },
        };
        (Report::from_stats(&types, &a, run), a)
    }

    fn run_info(measured_s: u64, log: Option<LogReport>) -> RunInfo {
        RunInfo {
            workload: "micro".to_string(),
            parameters: BTreeMap::new(),
            deployment: "2 islands".to_string(),
            threads: 1,
            warmup: Duration::from_secs(1),
            measured: Duration::from_secs(measured_s),
            cpu_process: Duration::from_secs(measured_s),
            cores: 2,
            started: UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            log,
            machine: Machine::default(),
        }
    }

    #[test]
    fn the_latency_histogram_round_trips_through_json_bucket_for_bucket() {
        let (r, stats) = sample();
        let kept = r.latency_histogram.clone().unwrap();
        let back = kept.histogram().unwrap();
        assert_eq!(back.len(), stats.latency_ns().len());
        for q in [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                back.value_at_quantile(q),
                stats.latency_ns().value_at_quantile(q),
                "quantile {q}"
            );
        }
        let json = Report::from_json(&r.to_json_pretty()).unwrap();
        assert_eq!(json.latency_histogram, Some(kept));
        // Damaged text is refused with what is wrong, never a panic.
        for bad in ["12", "x:1", "5:y", "999999999999999:1"] {
            let h = LatencyHistogram {
                buckets: bad.into(),
                ..r.latency_histogram.clone().unwrap()
            };
            let e = h.histogram().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        // A report written before the histogram was kept still reads.
        let mut v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        v.as_object_mut().unwrap().remove("latency_histogram");
        assert_eq!(
            Report::from_json(&v.to_string()).unwrap().latency_histogram,
            None
        );
    }

    #[test]
    fn reports_of_processes_merge_into_the_report_of_their_summed_stats() {
        let types = TxnTypes::new(&["Read", "Update"]).unwrap();
        // Island 0 fast and busy, island 1 slow: averaged percentiles would
        // put the median far from where the commits are.
        let mut a = WorkerStats::new();
        let mut b = WorkerStats::new();
        for us in 1..=3_000u64 {
            a.record_commit((us % 2) as usize, us * 100);
        }
        for us in 1..=1_000u64 {
            b.record_commit(1, 50_000 + us * 1_000);
        }
        for _ in 0..30 {
            a.record_abort(AbortReason::LockConflict);
        }
        for _ in 0..10 {
            b.record_abort(AbortReason::LockConflict);
            b.record_retry();
        }
        b.record_user_abort(0);
        let log = |bytes, syncs, ms| LogReport {
            bytes,
            fdatasyncs: syncs,
            fdatasync_mean_ms: ms,
            ..Default::default()
        };
        let mut ra = Report::from_stats(&types, &a, run_info(10, Some(log(1_000, 10, 1.0))));
        let mut rb = Report::from_stats(&types, &b, run_info(8, Some(log(3_000, 30, 3.0))));
        ra.traffic = Some(TrafficReport::of_totals(&TrafficSample {
            distributed_commits: 100,
            frames: 1_000,
            batches: 400,
            bytes: 50_000,
            send_syscalls: 200,
            recv_syscalls: 100,
        }));
        rb.traffic = Some(TrafficReport::of_totals(&TrafficSample {
            distributed_commits: 300,
            frames: 3_400,
            batches: 800,
            bytes: 150_000,
            send_syscalls: 600,
            recv_syscalls: 300,
        }));
        ra.notes = vec!["durability off".into(), "served 5".into()];
        rb.notes = vec!["durability off".into(), "served 7".into()];
        let m = Report::merge(&[ra.clone(), rb.clone()]).unwrap();

        let mut both = a.clone();
        both.merge(&b);
        let whole = Report::from_stats(&types, &both, run_info(10, None));
        assert_eq!(m.committed, 4_000);
        assert_eq!(m.committed, whole.committed);
        assert_eq!(
            m.latency, whole.latency,
            "percentiles of the summed histogram"
        );
        assert!(m.latency.p50_us < 250.0, "{:?}", m.latency);
        assert_eq!(m.aborts, 40);
        assert_eq!(m.aborts_by_reason, whole.aborts_by_reason);
        assert_eq!(m.abort_rate, whole.abort_rate);
        assert_eq!(m.retries, 10);
        assert_eq!(m.user_aborts, 1);
        assert_eq!(m.per_type[1].committed, whole.per_type[1].committed);
        assert_eq!(m.per_type[0].user_aborts, 1);
        // Throughput is each process's own rate, summed.
        assert_eq!(m.throughput_tps, 3_000.0 / 10.0 + 1_000.0 / 8.0);
        assert_eq!(m.measured_s, 10.0);
        assert_eq!(m.threads, 2);
        assert_eq!(m.cpu_process_s, 18.0);
        let log = m.log.as_ref().unwrap();
        assert_eq!((log.bytes, log.fdatasyncs), (4_000, 40));
        assert_eq!(log.fdatasync_mean_ms, (10.0 + 90.0) / 40.0);
        // Traffic is summed, then divided.
        let x = m.traffic.as_ref().unwrap();
        assert_eq!((x.distributed_commits, x.frames), (400, 4_400));
        assert_eq!(x.frames_per_distributed_commit, 11.0);
        assert_eq!(x.batches_per_distributed_commit, 3.0);
        assert_eq!(x.send_syscalls_per_distributed_commit, 2.0);
        assert_eq!(
            m.notes,
            vec!["durability off", "island 0: served 5", "island 1: served 7"]
        );
        assert_eq!(m.processes, Some(2));
        assert_eq!(m.per_process.len(), 2);
        assert_eq!(m.per_process[1].committed, 1_000);
        assert!(m.render_table().contains("processes   2, one per island"));
        let back = Report::from_json(&m.to_json_pretty()).unwrap();
        assert_eq!(back, m);

        // What cannot be merged is refused.
        assert!(Report::merge(&[]).is_err());
        let mut other = rb.clone();
        other.workload = "ycsb".into();
        assert!(Report::merge(&[ra.clone(), other])
            .unwrap_err()
            .contains("island 1"));
        let mut old = rb;
        old.latency_histogram = None;
        assert!(Report::merge(&[ra, old])
            .unwrap_err()
            .contains("no latency histogram"));
    }

    #[test]
    fn figures_come_from_the_stats() {
        let (r, _) = sample();
        assert_eq!(r.committed, 1_000_000);
        assert_eq!(r.throughput_tps, 100_000.0);
        assert_eq!(r.per_type[0].name, "NewOrder");
        assert_eq!(r.per_type[0].committed, 600_000);
        assert_eq!(r.per_type[0].throughput_tps, 60_000.0);
        assert_eq!(r.per_type[0].user_aborts, 1);
        assert_eq!(r.per_type[1].committed, 400_000);
        assert_eq!(r.aborts, 1_000);
        assert_eq!(r.retries, 1_000);
        assert_eq!(r.user_aborts, 1);
        assert_eq!(r.aborts_by_reason.len(), AbortReason::ALL.len());
        let lock = &r.aborts_by_reason[AbortReason::LockConflict.index()];
        assert_eq!(lock.reason, "lock-conflict");
        assert_eq!(lock.count, 1_000);
        assert!((lock.rate - 1_000.0 / 1_001_001.0).abs() < 1e-12);
        assert_eq!(r.cpu_process_s, 15.0);
        assert_eq!(r.cpu_utilisation, 0.75);
        assert_eq!(r.started_unix_s, 1_795_000_000);
        // 1,000,000 samples: 999,000 at 500 us plus 1..=1000 us once each.
        assert_eq!(r.latency.samples, 1_000_000);
        assert!((r.latency.p50_us - 500.0).abs() <= 0.5, "{:?}", r.latency);
        assert!((r.latency.max_us - 1000.0).abs() <= 1.0, "{:?}", r.latency);
        assert!((r.latency.mean_us - 500.0).abs() <= 0.6, "{:?}", r.latency);
    }

    #[test]
    fn json_round_trips() {
        let (mut r, _) = sample();
        r.notes.push("first run after reboot".to_string());
        let json = r.to_json_pretty();
        assert_eq!(Report::from_json(&json).unwrap(), r);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["throughput_tps"], 100_000.0);
        assert_eq!(v["parameters"]["warehouses"], "4");
        assert_eq!(v["log"]["fdatasyncs"], 3_000);
        assert_eq!(v["log"]["checkpoints"], 2);
        assert_eq!(v["log"]["segment_bytes_end"], 3 << 20);

        let dir = std::env::temp_dir().join(format!("islands-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.json");
        r.write_json(&path).unwrap();
        let back = Report::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn the_host_probe_shows_and_round_trips_and_old_json_reads_without_it() {
        let (mut r, _) = sample();
        assert!(!r.render_table().contains("host "));
        r.host = Some(HostProbe {
            cpus: [0, 3],
            round_trip_ns_before: 1_210,
            round_trip_ns_after: Some(320),
        });
        let t = r.render_table();
        assert!(
            t.contains("cross-core round trip cpus 0-3: 1.21 µs before the run, 0.32 µs after"),
            "{t}"
        );
        let json = r.to_json_pretty();
        assert_eq!(Report::from_json(&json).unwrap(), r);
        // A report written before the probe existed still reads.
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v.as_object_mut().unwrap().remove("host");
        let old = Report::from_json(&v.to_string()).unwrap();
        assert_eq!(old.host, None);
    }

    #[test]
    fn table_shows_the_figures() {
        let (r, _) = sample();
        let t = r.render_table();
        assert!(t.contains("100,000 txn/s"), "{t}");
        assert!(t.contains("1,000,000 committed"), "{t}");
        assert!(t.contains("NewOrder"), "{t}");
        assert!(t.contains("60,000 txn/s"), "{t}");
        assert!(t.contains("40,000 txn/s"), "{t}");
        assert!(t.contains("lock-conflict"), "{t}");
        assert!(
            !t.contains("wait-die"),
            "zero abort reasons are left out: {t}"
        );
        assert!(t.contains("p50 500"), "{t}");
        assert!(t.contains("75.0% of 2 cores"), "{t}");
        assert!(t.contains("warehouses=4"), "{t}");
        assert!(t.contains("3,000 fdatasyncs"), "{t}");
        assert!(
            t.contains("2 periodic during the run (0.5 s); on disk at the end: log 3.0 MB, checkpoints 5.0 MB"),
            "{t}"
        );
        // The clock, as this process checked it.
        let clock = islands::phases::clock().to_string();
        assert!(clock.starts_with("tsc (") || clock.starts_with("monotonic ("));
        assert!(t.contains(&format!("clock       {clock}")), "{t}");
    }

    #[test]
    fn the_clock_is_in_the_json_and_old_json_reads_without_it() {
        let (r, _) = sample();
        let v: serde_json::Value = serde_json::from_str(&r.to_json_pretty()).unwrap();
        assert_eq!(v["clock"], islands::phases::clock().to_string());
        let mut v = v;
        v.as_object_mut().unwrap().remove("clock");
        let old = Report::from_json(&v.to_string()).unwrap();
        assert_eq!(old.clock, "");
        assert!(!old.render_table().contains("clock "));
    }

    #[test]
    fn table_leaves_out_aborts_when_there_are_none() {
        let types = TxnTypes::new(&["Read"]).unwrap();
        let mut s = WorkerStats::new();
        s.record_commit(0, 1_000);
        let run = RunInfo {
            workload: "ycsb".to_string(),
            parameters: BTreeMap::new(),
            deployment: "1 island".to_string(),
            threads: 1,
            warmup: Duration::ZERO,
            measured: Duration::from_secs(1),
            cpu_process: Duration::from_millis(500),
            cores: 1,
            started: SystemTime::now(),
            log: None,
            machine: Machine::detect(),
        };
        let r = Report::from_stats(&types, &s, run);
        let t = r.render_table();
        assert!(!t.contains("aborts"), "{t}");
        assert!(t.contains("1 txn/s"), "{t}");
        assert!(!t.contains("log "), "{t}");
    }

    #[test]
    fn empty_run_does_not_divide_by_zero() {
        let types = TxnTypes::new(&["Read"]).unwrap();
        let run = RunInfo {
            workload: "ycsb".to_string(),
            parameters: BTreeMap::new(),
            deployment: String::new(),
            threads: 0,
            warmup: Duration::ZERO,
            measured: Duration::ZERO,
            cpu_process: Duration::ZERO,
            cores: 0,
            started: SystemTime::now(),
            log: None,
            machine: Machine::default(),
        };
        let r = Report::from_stats(&types, &WorkerStats::new(), run);
        assert_eq!(r.throughput_tps, 0.0);
        assert_eq!(r.abort_rate, 0.0);
        assert_eq!(r.cpu_utilisation, 0.0);
        assert_eq!(r.latency, LatencyReport::default());
        assert!(Report::from_json(&r.to_json_pretty()).is_ok());
    }

    #[test]
    fn machine_is_read_from_proc() {
        let m = Machine::detect();
        assert!(m.nproc >= 1);
        assert!(!m.kernel.is_empty() && m.kernel != "unknown");
        assert_eq!(
            cpu_model_of("processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n").as_deref(),
            Some("Some CPU @ 2.0GHz")
        );
        assert_eq!(cpu_model_of("processor : 0\n"), None);
    }
}
