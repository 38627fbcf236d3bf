//! `islands bench`: open an island, load a workload, drive it, report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use islands::bench::driver::{self, DriverConfig, Workload};
use islands::bench::progress::DisplayMode;
use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::wal::Durability;
use islands::Error;
use islands_workloads::micro::{self, Micro, MicroConfig};
use islands_workloads::ycsb::{self, Ycsb, YcsbConfig};

#[derive(Args)]
#[command(
    after_help = "With no workload, runs YCSB with Silo's configuration (10,000,000 rows, 1 request per \
transaction, 80% reads, uniform keys) on every CPU this process may use."
)]
pub struct BenchArgs {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    workload: Option<WorkloadCmd>,
}

#[derive(Args, Clone)]
struct Common {
    /// Worker threads (default: one per CPU this process may use).
    #[arg(long, global = true)]
    workers: Option<usize>,
    /// Concurrency control: none (one worker only: no locks, no latches), no_wait, wait_die, occ (Silo-style).
    /// Default: none with one worker, occ with several.
    #[arg(long, global = true)]
    cc: Option<String>,
    /// Durability: off (no log, as DBx1000 and Silo report), async (acknowledge before the flush),
    /// sync (acknowledge after the group-commit fdatasync).
    #[arg(long, global = true, default_value = "off")]
    durability: String,
    /// Directory of the island's log and checkpoints. Default: a fresh directory under the
    /// system temp dir, removed after the run.
    #[arg(long, global = true)]
    log_dir: Option<PathBuf>,
    /// Seconds of warm-up before measuring.
    #[arg(long, global = true, default_value_t = 2.0)]
    warmup: f64,
    /// Seconds of the measured phase.
    #[arg(long, global = true, default_value_t = 10.0)]
    duration: f64,
    /// Write the result as JSON to this file.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Seed of the request generators (runs with the same seed make the same requests).
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// In sync mode, transactions a worker may keep waiting for their log flush.
    #[arg(long, global = true, default_value_t = 4096)]
    inflight: usize,
    /// In sync mode, microseconds the log writer pauses after each fdatasync so that
    /// more commits join the next group (fewer fdatasyncs, less kernel CPU). 0: none.
    #[arg(long, global = true, default_value_t = 200)]
    group_delay_us: u64,
    /// Do not pin worker threads to CPUs.
    #[arg(long, global = true)]
    no_pin: bool,
    /// Progress display: auto (a bar on a terminal, plain lines otherwise), bar, plain, quiet.
    #[arg(long, global = true, default_value = "auto")]
    progress: String,
}

#[derive(Subcommand, Clone)]
enum WorkloadCmd {
    /// YCSB-style transactions over one table.
    Ycsb(YcsbArgs),
    /// The paper's partition-sensitive microbenchmark: read or update N rows of a site.
    Micro(MicroArgs),
    /// Message round trips between two pinned threads (spin queue, crossbeam channel, std mpsc).
    Ipc(crate::experiment_cmd::IpcArgs),
}

#[derive(Args, Default, Clone)]
struct YcsbArgs {
    /// Start from a reference configuration: `silo` (10,000,000 rows, 1 request, 80% reads,
    /// uniform) or `dbx1000` (10,485,760 rows of 100 bytes, 16 requests, 90% reads, θ = 0.6).
    /// Other flags override it.
    #[arg(long, default_value = "silo")]
    preset: String,
    /// Rows in the table.
    #[arg(long)]
    rows: Option<u64>,
    /// Bytes per row (a u64 field plus padding).
    #[arg(long)]
    row_bytes: Option<usize>,
    /// Requests per transaction (1..=64).
    #[arg(long)]
    ops: Option<usize>,
    /// Percentage of requests that are reads; the rest are read-modify-writes.
    #[arg(long)]
    read_pct: Option<u32>,
    /// Zipfian skew θ of the keys, from 0 (uniform) to just under 1.
    #[arg(long, alias = "skew")]
    theta: Option<f64>,
    /// Do not issue cache prefetch hints for a transaction's keys before reading them
    /// (they overlap the cache misses of multi-request transactions).
    #[arg(long)]
    no_prefetch: bool,
}

#[derive(Args, Clone)]
struct MicroArgs {
    /// Rows in the table (the paper: 240,000).
    #[arg(long, default_value_t = 240_000)]
    rows: u64,
    /// Bytes per row.
    #[arg(long, default_value_t = 256)]
    row_bytes: usize,
    /// Sites (key ranges) the rows are split into; worker w's home site is w mod sites.
    /// Default: one site per worker.
    #[arg(long)]
    sites: Option<u64>,
    /// Rows read or updated per transaction (the paper's Fig. 9: 10).
    #[arg(long = "n", alias = "rows-per-txn", default_value_t = 10)]
    n: usize,
    /// Read-only transactions (the default).
    #[arg(long, conflicts_with = "update")]
    read_only: bool,
    /// Update transactions: each row is read and written.
    #[arg(long)]
    update: bool,
    /// Percentage of multisite transactions: 1 row of the home site and N-1 from the whole range.
    /// On one island they are not distributed; across islands they are (see `islands plan`).
    #[arg(long, default_value_t = 0)]
    multisite: u32,
    /// Zipfian skew θ of the keys within their range, 0 (uniform) to just under 1.
    #[arg(long, alias = "theta", default_value_t = 0.0)]
    skew: f64,
}

fn secs(what: &str, v: f64) -> Result<Duration, Error> {
    if !v.is_finite() || !(0.0..=1e6).contains(&v) {
        return Err(Error::Config(format!(
            "--{what} {v} is not a number of seconds between 0 and 1e6"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

pub fn run(args: &BenchArgs) -> Result<(), Error> {
    let c = args.common.clone();
    if let Some(WorkloadCmd::Ipc(a)) = &args.workload {
        return crate::experiment_cmd::run_ipc(a, c.duration, c.warmup, c.json.as_deref())
            .map_err(Error::Config);
    }
    let cpus = driver::allowed_cpus().len().max(1);
    let workers = c.workers.unwrap_or(cpus);
    if workers == 0 || workers > 1024 {
        return Err(Error::Config(format!(
            "--workers {workers} is outside 1..=1024"
        )));
    }
    let cc: CcKind = match &c.cc {
        Some(s) => s.parse().map_err(Error::Config)?,
        None if workers == 1 => CcKind::None,
        None => CcKind::Occ,
    };
    let durability: Durability = c
        .durability
        .parse()
        .map_err(|e| Error::Config(format!("--durability: {e}")))?;
    let display = match c.progress.as_str() {
        "auto" => DisplayMode::Auto,
        "bar" => DisplayMode::Bar,
        "plain" => DisplayMode::Plain,
        "quiet" => DisplayMode::Quiet,
        other => {
            return Err(Error::Config(format!(
                "--progress '{other}' is not one of auto, bar, plain, quiet"
            )))
        }
    };
    let warmup = secs("warmup", c.warmup)?;
    let measure = secs("duration", c.duration)?;
    if measure.is_zero() {
        return Err(Error::Config(
            "--duration must be more than 0 seconds".into(),
        ));
    }
    if c.inflight == 0 {
        return Err(Error::Config("--inflight must be at least 1".into()));
    }
    let quiet = display == DisplayMode::Quiet;
    // A temporary log directory is ours to remove; a given one is the user's.
    let (log_dir, temp_log) = match (&c.log_dir, durability) {
        (_, Durability::Off) => (None, false),
        (Some(d), _) => (Some(d.clone()), false),
        (None, _) => {
            let d = std::env::temp_dir().join(format!("islands-bench-{}", std::process::id()));
            (Some(d), true)
        }
    };
    let mut island_cfg = IslandConfig::new(cc, workers);
    island_cfg.durability = durability;
    island_cfg.log_dir = log_dir.clone();
    if c.group_delay_us > 1_000_000 {
        return Err(Error::Config(format!(
            "--group-delay-us {} is more than a second",
            c.group_delay_us
        )));
    }
    island_cfg.group_delay = Duration::from_micros(c.group_delay_us);
    let mut dcfg = DriverConfig {
        workers,
        warmup,
        measure,
        inflight: c.inflight,
        seed: c.seed,
        display,
        pin: !c.no_pin,
        workload_name: String::new(),
        parameters: Default::default(),
        deployment: format!(
            "1 island, {workers} worker(s), cc {cc}, durability {durability}{}",
            log_dir
                .as_ref()
                .map(|d| format!(", log in {}", d.display()))
                .unwrap_or_default()
        ),
    };
    let workload = args.workload.clone().unwrap_or(WorkloadCmd::Ycsb(YcsbArgs {
        preset: "silo".into(),
        ..Default::default()
    }));
    let result = match workload {
        WorkloadCmd::Ycsb(a) => {
            let mut y = YcsbConfig::preset(&a.preset)?;
            y.rows = a.rows.unwrap_or(y.rows);
            y.row_bytes = a.row_bytes.unwrap_or(y.row_bytes);
            y.ops = a.ops.unwrap_or(y.ops);
            y.read_pct = a.read_pct.unwrap_or(y.read_pct);
            y.theta = a.theta.unwrap_or(y.theta);
            y.prefetch = !a.no_prefetch;
            y.check()?;
            dcfg.workload_name = format!("ycsb ({})", a.preset);
            dcfg.parameters = y.parameters();
            let w = Ycsb::new(y.clone())?;
            execute(
                island_cfg,
                &ycsb::tables(&y),
                |i| ycsb::load(i, &y, quiet),
                w,
                &dcfg,
                &c.json,
                quiet,
            )
        }
        WorkloadCmd::Micro(a) => {
            let sites = a.sites.unwrap_or(workers as u64);
            let m = MicroConfig {
                rows: a.rows,
                row_bytes: a.row_bytes,
                sites,
                n: a.n,
                update: a.update && !a.read_only,
                multisite_pct: a.multisite,
                theta: a.skew,
            };
            m.check()?;
            dcfg.workload_name =
                format!("micro ({})", if m.update { "update" } else { "read-only" });
            dcfg.parameters = m.parameters();
            let homes = (0..workers as u64).map(|w| w % sites).collect();
            let w = Micro::new(m.clone(), homes)?;
            execute(
                island_cfg,
                &micro::tables(&m),
                |i| micro::load(i, &m, 0..m.rows, quiet),
                w,
                &dcfg,
                &c.json,
                quiet,
            )
        }
        WorkloadCmd::Ipc(_) => unreachable!("handled at the top of run"),
    };
    if temp_log {
        if let Some(d) = &log_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    result
}

fn execute<W: Workload + 'static>(
    island_cfg: IslandConfig,
    tables: &[islands::storage::TableDef],
    load: impl FnOnce(&Island) -> Result<(), Error>,
    workload: W,
    dcfg: &DriverConfig,
    json: &Option<PathBuf>,
    quiet: bool,
) -> Result<(), Error> {
    if let Some(d) = &island_cfg.log_dir {
        if d.exists()
            && std::fs::read_dir(d)
                .map(|mut r| r.next().is_some())
                .unwrap_or(false)
        {
            return Err(Error::Config(format!(
                "log directory {} is not empty: the benchmark loads a fresh database (remove it or pick another)",
                d.display()
            )));
        }
    }
    let (island, _) = Island::open(island_cfg, tables)?;
    let t = std::time::Instant::now();
    load(&island)?;
    if !quiet {
        eprintln!("[load] done in {:.1}s", t.elapsed().as_secs_f64());
    }
    if island.wal().is_some() {
        // The initial population becomes durable as a checkpoint, not as log records.
        let t = std::time::Instant::now();
        let rows = island.checkpoint()?;
        if !quiet {
            eprintln!(
                "[load] checkpoint of {rows} rows written in {:.1}s",
                t.elapsed().as_secs_f64()
            );
        }
    }
    let report = driver::run(&island, Arc::new(workload), dcfg)?;
    island.shutdown();
    println!("{}", report.render_table());
    if let Some(path) = json {
        report
            .write_json(path)
            .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))?;
        if !quiet {
            eprintln!("[result] written to {}", path.display());
        }
    }
    Ok(())
}
