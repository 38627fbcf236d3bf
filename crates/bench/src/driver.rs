//! The benchmark driver: runs a [`Workload`] for a warm-up and a measured
//! phase and reports what the measured phase did.
//!
//! The workers are executors of a [`islands::executor::Cluster`] and run its one
//! loop ([`islands::executor::run`]): each generates its own requests on its own
//! thread, runs them, retries what aborts on a conflict, and acknowledges a
//! commit once its log batch is durable (`sync`), keeping at most `inflight`
//! commits waiting. [`run`] and [`run_islands`] run islands whose
//! transactions never cross ([`islands::executor::Cluster::local`]);
//! [`run_cluster`] runs a cluster that routes keys across
//! islands. After the warm-up the statistics are reset and the measured
//! phase runs for a fixed time.
//!
//! A failure stops the whole run: a worker that fails sets the run's phase
//! to `FAILED`, and the main thread, which looks for a failed log every
//! 10 ms while the workers run, does the same. Every worker reads the phase
//! once per round anyway and leaves; the run returns [`RunError::Stopped`] with
//! the figures up to then. No worker waits for a log that will not become
//! durable again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::progress::{DisplayMode, ProgressDisplay};
use crate::report::{LogReport, Machine, Report, RunInfo, TrafficReport, TrafficSample};
use crate::stats::TxnTypes;
use islands::cpu::CpuTime;
use islands::executor::run::{executor_bodies, ClusterWorker};
use islands::executor::{Cluster, ClusterOptions};
use islands::island::Island;
use islands::proc::run::{
    log_failure, watch, watch_until, FailOnPanic, WorkerBody, FAILED, MEASURE, STOP, WARMUP,
};
use islands::proc::stats::{ProgressCounter, WorkerStats};
use islands::proc::Workload;
use islands::topology::{allowed_cpus, pin_to};
use islands::wal::Durability;
use islands::Error;

/// Why a run gave no full report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run could not start (bad configuration, a thread that could not
    /// be spawned, an executor that could not be made).
    #[error(transparent)]
    Engine(#[from] Error),
    /// The run stopped before its end because of `cause` (a log that
    /// failed, a worker's error): every worker left within a bounded time,
    /// and `partial` holds the figures measured up to the stop (its
    /// `stopped` says why). The islands' in-memory state is then not to be
    /// trusted further (branches that were in flight still hold their
    /// locks): reopen them, and recovery resolves what was in doubt.
    #[error("{cause}")]
    Stopped {
        cause: Box<Error>,
        partial: Box<Report>,
    },
}

impl RunError {
    /// The engine's error: the cause of a stopped run, whose partial report
    /// is dropped.
    pub fn into_cause(self) -> Error {
        match self {
            RunError::Engine(e) => e,
            RunError::Stopped { cause, .. } => *cause,
        }
    }
}

/// How to drive a run.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    pub workers: usize,
    pub warmup: Duration,
    pub measure: Duration,
    /// Transactions a worker may keep waiting for their log flush (`sync`):
    /// its acknowledgement window.
    pub inflight: usize,
    pub seed: u64,
    pub display: DisplayMode,
    /// Pin worker `i` to the i-th CPU this process may use.
    pub pin: bool,
    /// Count where the workers' time goes ([`islands::phases`]; costs a
    /// time-stamp read at every phase boundary).
    pub phases: bool,
    /// Shown in the report.
    pub workload_name: String,
    pub parameters: BTreeMap<String, String>,
    pub deployment: String,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            workers: 1,
            warmup: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            inflight: 4096,
            seed: 1,
            display: DisplayMode::Auto,
            pin: true,
            phases: false,
            workload_name: String::new(),
            parameters: BTreeMap::new(),
            deployment: String::new(),
        }
    }
}

/// Runs `workload` on `island` and reports what the measured phase did.
pub fn run<W: Workload + 'static>(
    island: &Island,
    workload: Arc<W>,
    cfg: &DriverConfig,
) -> Result<Report, RunError>
where
    W::Req: 'static,
{
    let cpus = allowed_cpus();
    let workers: Vec<WorkerSpec> = (0..cfg.workers)
        .map(|w| WorkerSpec {
            island: 0,
            cpu: (cfg.pin && !cpus.is_empty()).then(|| cpus[w % cpus.len()]),
        })
        .collect();
    run_islands(std::slice::from_ref(island), &workers, workload, cfg)
}

/// Where one worker runs: on which island, pinned to which CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSpec {
    pub island: usize,
    pub cpu: Option<usize>,
}

/// Attempts a worker of [`run_islands`] runs per round of its loop before it
/// looks at the log, its acknowledgements and the run's phase again.
const LOCAL_PER_ROUND: usize = 8;

/// Runs `workload` with the given workers spread over several islands of one
/// process (each worker runs transactions on its own island, which no
/// transaction leaves: [`Cluster::local`]) and reports the measured phase of
/// all of them together. `cfg.workers` and `cfg.pin` are ignored: `workers`
/// says it all.
pub fn run_islands<W: Workload + 'static>(
    islands: &[Island],
    workers: &[WorkerSpec],
    workload: Arc<W>,
    cfg: &DriverConfig,
) -> Result<Report, RunError>
where
    W::Req: 'static,
{
    if workers.is_empty() {
        return Err(Error::Config("the driver needs at least one worker".into()).into());
    }
    if let Some(w) = workers.iter().find(|w| w.island >= islands.len()) {
        return Err(Error::Config(format!(
            "a worker is placed on island {}, which does not exist",
            w.island
        ))
        .into());
    }
    if cfg.measure.is_zero() {
        return Err(Error::Config("the measured phase must be longer than zero".into()).into());
    }
    let (cws, per_island) = cluster_workers(workers, islands.len());
    let opts = ClusterOptions {
        inflight: LOCAL_PER_ROUND,
        commit_window: 0,
        ..Default::default()
    };
    let cl = Cluster::local(islands.to_vec(), per_island, opts)?;
    run_cluster(&cl, &cws, workload, cfg)
}

/// The executors of `workers` (placed on `islands` islands), numbered
/// within each island in the order given, with no transaction limit; and
/// how many each island has.
pub fn cluster_workers(workers: &[WorkerSpec], islands: usize) -> (Vec<ClusterWorker>, Vec<usize>) {
    let mut per_island = vec![0usize; islands];
    let mut cws = Vec::with_capacity(workers.len());
    for w in workers {
        cws.push(ClusterWorker {
            island: w.island,
            worker: per_island[w.island],
            cpu: w.cpu,
            limit: None,
        });
        per_island[w.island] += 1;
    }
    (cws, per_island)
}

/// Runs `workload` on every worker of `cl` and reports the measured phase.
/// `cfg.workers` and `cfg.pin` are ignored: `workers` says it all.
pub fn run_cluster<W: Workload + 'static>(
    cl: &Arc<Cluster>,
    workers: &[ClusterWorker],
    workload: Arc<W>,
    cfg: &DriverConfig,
) -> Result<Report, RunError>
where
    W::Req: 'static,
{
    let bodies = executor_bodies(cl, workers, &workload, cfg.seed, cfg.inflight)?;
    let specs: Vec<WorkerSpec> = workers
        .iter()
        .map(|w| WorkerSpec {
            island: w.island,
            cpu: w.cpu,
        })
        .collect();
    let local: Vec<Island> = cl.local_islands().map(|(_, i)| i.clone()).collect();
    let traffic = || {
        let c = cl.total_counts();
        let (send_syscalls, recv_syscalls) = cl.syscalls();
        TrafficSample {
            distributed_commits: c.distributed_commits,
            frames: c.frames_out,
            batches: c.batches_out,
            bytes: c.bytes_out,
            send_syscalls,
            recv_syscalls,
        }
    };
    let mut report = run_threads(
        &local,
        &specs,
        bodies,
        &workload.types(),
        cfg,
        cl.routes()
            .then_some(&traffic as &dyn Fn() -> TrafficSample),
    )?;
    if cl.routes() {
        let s = &cl.stats;
        report.notes.push(format!(
            "islands: {} remote operations served, {} malformed frames rejected, {} protocol violations",
            s.remote_ops(),
            s.malformed.load(Ordering::Relaxed),
            s.protocol_violations.load(Ordering::Relaxed)
        ));
    }
    Ok(report)
}

/// Runs one thread per body (pinned as `workers` says), times the warm-up
/// and measured phases, and reports.
pub(crate) fn run_threads(
    islands: &[Island],
    workers: &[WorkerSpec],
    bodies: Vec<WorkerBody>,
    type_names: &[&str],
    cfg: &DriverConfig,
    traffic: Option<&dyn Fn() -> TrafficSample>,
) -> Result<Report, RunError> {
    let types = TxnTypes::new(type_names).map_err(Error::Config)?;
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let counters: Vec<Arc<ProgressCounter>> =
        (0..workers.len()).map(|_| ProgressCounter::new()).collect();
    let cpus = allowed_cpus();
    let started = SystemTime::now();
    let checkpoints = || -> Vec<islands::island::CheckpointStats> {
        islands.iter().map(|i| i.checkpoint_stats()).collect()
    };
    let checkpoints_before = checkpoints();
    let mut handles = Vec::with_capacity(workers.len());
    for ((w, spec), body) in workers.iter().enumerate().zip(bodies) {
        let phase = Arc::clone(&phase);
        let counter = Arc::clone(&counters[w]);
        let cpu = spec.cpu;
        let count_phases = cfg.phases;
        handles.push(
            std::thread::Builder::new()
                .name(format!("i{}-worker-{w}", spec.island))
                .spawn(move || {
                    let _fail = FailOnPanic(&phase);
                    if let Some(c) = cpu {
                        // Pinning can fail in a restricted container; the run goes on unpinned.
                        let _ = pin_to(c);
                    }
                    islands::phases::enable(count_phases);
                    let (stats, r) = body(&phase, &counter);
                    if r.is_err() {
                        phase.store(FAILED, Ordering::Release);
                    }
                    (stats, r)
                })
                .map_err(|e| Error::Config(format!("cannot start a worker thread: {e}")))?,
        );
    }
    let total = cfg.warmup + cfg.measure;
    let display =
        ProgressDisplay::start_with(cfg.display, total, &cfg.workload_name, counters.clone());
    display.set_phase("warm-up");
    let t_start = Instant::now();
    // A failure stops the run at once: the figures cover the phase it
    // stopped in, up to the failure.
    let mut failed = watch(islands, &phase, t_start + cfg.warmup);
    let in_warmup = failed;
    let wal_stats = || -> Option<Vec<islands::wal::WalStats>> {
        islands.iter().map(|i| i.wal().map(|w| w.stats())).collect()
    };
    let wal_before = wal_stats();
    let traffic_before = traffic.map(|f| f());
    let cpu0 = CpuTime::process_now();
    let t0 = if in_warmup { t_start } else { Instant::now() };
    if !failed {
        failed = phase
            .compare_exchange(WARMUP, MEASURE, Ordering::AcqRel, Ordering::Acquire)
            .is_err();
        display.set_phase("measure");
    }
    if !failed {
        failed = watch(islands, &phase, t0 + cfg.measure);
    }
    if !failed {
        failed = phase
            .compare_exchange(MEASURE, STOP, Ordering::AcqRel, Ordering::Acquire)
            .is_err();
    }
    let measured = t0.elapsed();
    let cpu = CpuTime::process_now().saturating_sub(cpu0);
    let wal_after = wal_stats();
    let traffic_after = traffic.map(|f| f());
    display.finish();
    failed |= watch_until(islands, &phase, || handles.iter().all(|h| h.is_finished()));
    let mut merged = WorkerStats::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok((s, r)) => {
                merged.merge(&s);
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            Err(_) => {
                first_err.get_or_insert(Error::Config("a worker thread panicked".into()));
            }
        }
    }
    // The log's own failure is the cause: a worker's error about it only
    // says that the log refused its batch.
    let cause = log_failure(islands).or(first_err);
    let log = match (wal_before, wal_after) {
        (Some(a), Some(b)) => {
            let sum = |v: &[islands::wal::WalStats], f: fn(&islands::wal::WalStats) -> u64| {
                v.iter().map(f).sum::<u64>()
            };
            let syncs = sum(&b, |s| s.syncs) - sum(&a, |s| s.syncs);
            let nanos = sum(&b, |s| s.sync_nanos) - sum(&a, |s| s.sync_nanos);
            let mut log = LogReport {
                bytes: sum(&b, |s| s.bytes_written) - sum(&a, |s| s.bytes_written),
                fdatasyncs: syncs,
                fdatasync_mean_ms: if syncs == 0 {
                    0.0
                } else {
                    nanos as f64 / syncs as f64 / 1e6
                },
                ..Default::default()
            };
            for (a, b) in checkpoints_before.iter().zip(checkpoints()) {
                log.checkpoints += b.periodic - a.periodic;
                log.checkpoints_failed += b.failed - a.failed;
                log.checkpoint_s += b.seconds - a.seconds;
            }
            for w in islands.iter().filter_map(|i| i.wal()) {
                // What is on disk now; a directory that cannot be read
                // counts nothing rather than failing the report.
                let u = w.disk_usage().unwrap_or_default();
                log.segment_bytes_end += u.segment_bytes;
                log.checkpoint_bytes_end += u.checkpoint_bytes;
            }
            Some(log)
        }
        _ => None,
    };
    let durability = islands[0].config().durability;
    let warmup = if in_warmup {
        Duration::ZERO
    } else {
        cfg.warmup
    };
    let mut report = Report::from_stats(
        &types,
        &merged,
        RunInfo {
            workload: cfg.workload_name.clone(),
            parameters: cfg.parameters.clone(),
            deployment: cfg.deployment.clone(),
            threads: workers.len(),
            warmup,
            measured,
            cpu_process: cpu,
            cores: cpus.len().max(1),
            started,
            log,
            machine: Machine::detect(),
        },
    );
    if let (Some(a), Some(b)) = (traffic_before, traffic_after) {
        report.traffic = Some(TrafficReport::between(&a, &b));
    }
    if cfg.phases {
        report.phases = Some(crate::report::PhaseReport::new(
            &merged.phase_ticks,
            merged.total_commits(),
        ));
    }
    report.notes.push(format!(
        "durability {durability}: {}",
        match durability {
            Durability::Sync =>
                "a transaction counts once its log batch is fdatasync'ed (group commit)",
            Durability::Async =>
                "a transaction counts at commit; the log is written and synced in the background",
            Durability::Off => "no log",
        }
    ));
    if let Some(cause) = cause.or_else(|| failed.then(|| Error::Config("the run failed".into()))) {
        report.stopped = Some(cause.to_string());
        report.notes.push(format!(
            "the run stopped after {:.2} s of its {}: the figures cover that time only",
            measured.as_secs_f64(),
            if in_warmup {
                "warm-up"
            } else {
                "measured phase"
            }
        ));
        return Err(RunError::Stopped {
            cause: Box::new(cause),
            partial: Box::new(report),
        });
    }
    Ok(report)
}
