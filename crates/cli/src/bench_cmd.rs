//! `islands bench`: open an island, load a workload, drive it, report.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use islands::api::open::{load_islands, open_islands, Expect};
use islands::cc::CcKind;
use islands::deploy::{self, DeploySpec, EvenSplit, Islands, Placement, Plan};
use islands::executor::{Cluster, ClusterOptions};
use islands::island::{CheckpointPolicy, Island, IslandConfig, RecoveryReport};
use islands::proc::Workload;
use islands::route::{IslandId, RangeRouter, Router};
use islands::storage::{PrefaultStats, TableDef};
use islands::topology::memory;
use islands::topology::{allowed_cpus, CpuId, Topology};
use islands::transport::join::{self, Kind};
use islands::wal::{CappedDevice, Durability};
use islands::Error;
use islands_bench::driver::{self, DriverConfig, WorkerSpec};
use islands_bench::driver::{run_cluster, RunError};
use islands_bench::ipc;
use islands_bench::progress::DisplayMode;
use islands_bench::report::HostProbe;
use islands_workloads::inserts::{self, Inserts, InsertsConfig};
use islands_workloads::micro::{self, Micro, MicroConfig};
use islands_workloads::spec::WorkloadSpec;
use islands_workloads::tpcc::{self, Mix, Tpcc, TpccConfig};
use islands_workloads::ycsb::{self, Homes, Ycsb, YcsbConfig};

use crate::bench_procs::{self, Procs};

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
    /// Islands: `1` (shared-everything, the default), `per-socket`, `per-l3`, `per-core`,
    /// a number N, or explicit CPU lists `0-5;6-11`. Sites (key ranges) are split evenly
    /// over the islands; see `islands plan`. Default: 1, or what --config says.
    #[arg(long, global = true, allow_negative_numbers = true)]
    islands: Option<String>,
    /// Placement of the islands on the cores: grouped (topology-aware, the default), spread
    /// (across sockets), os (no pinning).
    #[arg(long, global = true)]
    placement: Option<String>,
    /// A TOML deployment file, as `islands plan --config` reads it ([deployment] islands,
    /// placement, workers_per_island, sites, cc, durability, log_dir; [[island]] cpus).
    /// Options given on the command line override it; what it does not name keeps
    /// bench's defaults (a temporary log directory; durability off, or sync when it names
    /// log_dir).
    #[arg(long, global = true, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Worker threads per island, 1 to 1024 (default: one per core of the island).
    #[arg(long, global = true)]
    workers_per_island: Option<u32>,
    /// Worker threads of a single island (shared-everything); the same as
    /// --workers-per-island when --islands is 1. Default: one per CPU this process may use.
    #[arg(long, global = true)]
    workers: Option<usize>,
    /// Concurrency control: none (one worker only: no locks, no latches), no_wait, wait_die, occ (Silo-style).
    /// Default: none for an island with one worker, occ for an island with several.
    #[arg(long, global = true)]
    cc: Option<String>,
    /// Durability: off (no log, as DBx1000 and Silo report), async (acknowledge before the flush),
    /// sync (acknowledge after the group-commit fdatasync). Default: what --config says; else
    /// sync when a log directory is given (--log-dir, or log_dir in --config), off otherwise.
    /// `off` writes no log, whatever --log-dir says.
    #[arg(long, global = true)]
    durability: Option<String>,
    /// Base directory of the logs and checkpoints: island i logs to DIR/island-<i>. Given
    /// without --durability, it turns the log on (sync). Default: a fresh directory under the
    /// system temp dir, removed after the run (a given one is kept, so `islands check`
    /// can recover it).
    #[arg(long, global = true)]
    log_dir: Option<PathBuf>,
    /// Go on from the database in --log-dir instead of loading a new one: recover it (its
    /// control files must say it is this deployment's: as many islands, the same workload
    /// and data parameters) and run the workload on it. Without it, a non-empty --log-dir
    /// is refused.
    #[arg(long, global = true)]
    resume: bool,
    /// Seconds of warm-up before measuring.
    #[arg(
        long,
        global = true,
        default_value_t = 2.0,
        allow_negative_numbers = true
    )]
    warmup: f64,
    /// Seconds of the measured phase.
    #[arg(
        long,
        global = true,
        default_value_t = 10.0,
        allow_negative_numbers = true
    )]
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
    #[arg(long, global = true, default_value_t = 1000)]
    group_delay_us: u64,
    /// Periodic checkpoints while the run goes, with a log (sync or async): one once the
    /// log has grown N MiB since the last (and at least as much as that checkpoint's file,
    /// so checkpoints never write more than the log does); the log before it is deleted.
    /// 0: none by size. Default: 512 (or checkpoint_every_mb in --config).
    #[arg(long, global = true)]
    checkpoint_every_mb: Option<u64>,
    /// Periodic checkpoints by time: one every S seconds while the log grows. 0: none by
    /// time. Default: 300 (or checkpoint_every_s in --config). Both 0: the load's
    /// checkpoint only, and the log grows without bound.
    #[arg(long, global = true, allow_negative_numbers = true)]
    checkpoint_every_s: Option<f64>,
    /// Write log segments over files of zeros that a background thread makes ahead of
    /// time: an fdatasync then commits no file-system metadata (about half the latency
    /// on ext4), but every log byte is written twice. Pays when transactions wait for
    /// forced two-phase-commit records and the log is light; costs when the log itself
    /// keeps the disk and the cores busy (TPC-C).
    #[arg(long, global = true)]
    log_preallocate: bool,
    /// Bytes after which a log segment rolls over to the next (for tests that need a log of
    /// several segments; default 64 MiB).
    #[arg(long, global = true, hide = true)]
    log_segment_bytes: Option<u64>,
    /// In sync mode, a forced two-phase-commit record (a participant's prepare, a
    /// coordinator's decision) cuts the log writer's pause short: locks wait on it, so
    /// they go sooner, but groups are smaller and fdatasyncs more frequent. Off by
    /// default: on a 2-core machine the extra fdatasyncs cost more than they give.
    #[arg(long, global = true)]
    expedite_2pc: bool,
    /// On several islands: transactions each worker keeps executing. A worker runs
    /// another transaction (and serves other islands' requests) while one waits for a
    /// remote island.
    /// Default: micro 8; TPC-C 4 (64 with a log: a worker's transactions share its warehouse).
    #[arg(long, global = true)]
    txns_per_worker: Option<usize>,
    /// On several islands: distributed commits each worker keeps in flight beyond
    /// --txns-per-worker. A transaction whose procedure is done gives its slot to the next
    /// while its two-phase commit waits for the participants' forced prepares (with a log,
    /// a group commit each); it counts once its outcome is durable, and is retried if the
    /// commit aborts. 0: a transaction keeps its slot until its outcome.
    /// Default: as many as --txns-per-worker; with a log (sync or async), micro 256 and TPC-C 64.
    #[arg(long, global = true)]
    commits_per_worker: Option<usize>,
    /// Count where the workers' time goes: execution, management, communication, locking,
    /// logging (µs per transaction, in the report and the JSON). Reads the processor's
    /// time-stamp counter at every phase boundary, so leave it off for peak figures.
    #[arg(long, global = true)]
    phases: bool,
    /// Do not pin worker threads to CPUs.
    #[arg(long, global = true)]
    no_pin: bool,
    /// How a multi-island run's islands exchange messages: inproc (in-process
    /// queues, the default), shm (shared-memory rings) or uds (Unix domain sockets
    /// with I/O threads). With shm and uds each island has the transport a process
    /// of its own would have, in this one process. Given, a multi-island run uses
    /// the distributed executor even without multisite transactions, so that a run
    /// with none measures what the transport costs when nothing crosses.
    #[arg(long, global = true, value_name = "KIND")]
    transport: Option<Kind>,
    /// Run each island as an OS process of its own (micro, ycsb, tpcc; at least 2
    /// islands), joined by --transport shm or uds (default uds; inproc is refused):
    /// this program is started once per island, each process opens, loads and runs
    /// its own island on its own cores, and their reports are merged (throughput
    /// and counts summed, latency histograms added, traffic per distributed commit
    /// from the sums). The JSON adds `processes` and each process's `per_process`.
    #[arg(long, global = true)]
    processes: bool,
    /// Set by --processes on the process it starts for island K.
    #[arg(long, global = true, hide = true, value_name = "K")]
    island_process: Option<usize>,
    /// Set by --processes: the run directory (deployment file, secret, sockets).
    #[arg(long, global = true, hide = true, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// Plan for a described machine instead of this one: `4x6` (sockets x cores),
    /// `2x12x2` (x threads per core), or `sockets=2,numa=1,l3=1,cores=12,threads=2`.
    /// Workers are not pinned.
    #[arg(long, global = true, value_name = "SPEC")]
    topology: Option<String>,
    /// Drive a running `islands serve` at ADDR over the network instead of an
    /// in-process deployment (ycsb, tpcb, tpcc or micro): PostgreSQL connections with prepared
    /// statements. The deployment options do not apply; the password, if the server
    /// has one, is read from ISLANDS_PASSWORD.
    #[arg(long, global = true, value_name = "ADDR")]
    connect: Option<std::net::SocketAddr>,
    /// With --connect: client connections.
    #[arg(long, global = true, default_value_t = 16)]
    connections: usize,
    /// With --connect: calls each connection keeps in flight (pipelined).
    #[arg(long, global = true, default_value_t = 1)]
    pipeline: usize,
    /// Progress display: auto (a bar on a terminal, plain lines otherwise), bar, plain, quiet.
    #[arg(long, global = true, default_value = "auto")]
    progress: String,
}

#[derive(Subcommand, Clone)]
enum WorkloadCmd {
    /// YCSB-style transactions over one table. On several islands its keys are split
    /// evenly over them; keys are drawn from the whole table, so a transaction is
    /// distributed whenever one of its keys lies on another island.
    Ycsb(YcsbArgs),
    /// The paper's partition-sensitive microbenchmark: read or update N rows of a site.
    /// With --connect, against `islands serve --init micro --rows ROWS`: --sites defaults
    /// to the server's (SHOW islands), and --row-bytes is the server's.
    Micro(MicroArgs),
    /// TPC-C: all five transactions, warehouses as sites, a home warehouse per worker.
    /// Measured without keying and think times: not a compliant tpmC. With --connect,
    /// against `islands serve --init tpcc`.
    Tpcc(TpccArgs),
    /// Message round trips between two pinned threads (spin queue, the islands' in-process
    /// transport, crossbeam channel, std mpsc).
    Ipc(crate::ipc_cmd::IpcArgs),
    /// Xi et al.'s insert microbenchmark: each worker (client) inserts one record per
    /// transaction into a private table. No logical contention: what limits it is the log
    /// the clients share (one per island) and the engine itself (try --durability off).
    Inserts(InsertsArgs),
    /// pgbench's TPC-B against `islands serve --init tpcb` (with --connect only):
    /// `CALL tpcb(aid, tid, bid, delta)` with pgbench's random choices, or with
    /// --select-only `CALL tpcb_balance(aid)` (pgbench -S).
    Tpcb(TpcbArgs),
    /// The application API: the round trip of a blocking call on an idle deployment, then
    /// Silo's YCSB called from application threads with calls in flight, against the same
    /// transactions generated on the executors' threads (same plan, same cores, no_wait).
    Calls(crate::calls_cmd::CallsArgs),
}

#[derive(Args, Clone)]
struct InsertsArgs {
    /// Bytes per record.
    #[arg(long, default_value_t = 100)]
    row_bytes: usize,
    /// Most records a client's table holds; a run that fills it stops with an error
    /// (memory is taken only as records come).
    #[arg(long, default_value_t = 1 << 26)]
    rows_per_client: u64,
}

#[derive(Args, Clone)]
struct TpccArgs {
    /// Warehouses, split over the islands as their sites (default: one per core of the
    /// deployment, as `islands plan` shows). With --connect: the server's (required);
    /// connection i is a terminal of warehouse i mod N + 1.
    #[arg(long)]
    warehouses: Option<u32>,
    /// Transaction mix: full (45/43/4/4/4), payment, neworder, no-pay (50/50), or five
    /// percentages NewOrder,Payment,OrderStatus,Delivery,StockLevel summing to 100.
    #[arg(long, default_value = "full")]
    mix: String,
    /// No remote order lines and no remote Payment customers (perfectly partitionable).
    #[arg(long)]
    local_only: bool,
    /// Most orders a district may hold (initial 3,000 included): the capacity of the
    /// order tables, fixed at start. Memory is taken only as orders arrive.
    #[arg(long, default_value_t = 1_000_000)]
    max_orders_per_district: u32,
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
    #[arg(long, alias = "skew", allow_negative_numbers = true)]
    theta: Option<f64>,
    /// Do not issue cache prefetch hints for a transaction's keys before reading them
    /// (they overlap the cache misses of multi-request transactions).
    #[arg(long)]
    no_prefetch: bool,
    /// Give each worker a home island: a transaction draws every key from its home
    /// island's, except PCT% of them, which touch one other island (first key home,
    /// second on the other, the rest on either). 0: nothing crosses islands (as micro's
    /// --multisite 0, H-Store's partitioned YCSB). Without it, every key is drawn from the
    /// whole table, so on several islands a transaction is distributed whenever one of
    /// its keys is another island's.
    #[arg(long, value_name = "PCT")]
    multisite: Option<u32>,
}

#[derive(Args, Clone)]
struct TpcbArgs {
    /// The server's scale (branches), as it was loaded with.
    #[arg(long, default_value_t = 1)]
    scale: u32,
    /// Only read an account's balance (pgbench -S).
    #[arg(long, short = 'S')]
    select_only: bool,
}

#[derive(Args, Clone)]
struct MicroArgs {
    /// Rows in the table (the paper: 240,000).
    #[arg(long, default_value_t = 240_000)]
    rows: u64,
    /// Bytes per row.
    #[arg(long, default_value_t = 256)]
    row_bytes: usize,
    /// Sites (key ranges) the rows are split into and spread over the islands; a worker's
    /// home site is one of its island's. Default: one site per core of the deployment.
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
    #[arg(
        long,
        alias = "theta",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
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

/// The options of `islands bench` that `bench ipc` uses. It measures
/// message round trips between two threads, so the deployment, the log and
/// the engine's options have no meaning for it.
const IPC_USES: [&str; 3] = ["duration", "warmup", "json"];

/// Refuses an option of `islands bench` given to `bench ipc`, which would
/// ignore it (`m`: bench's matches, to tell a given option from a default).
fn refuse_unused_by_ipc(m: Option<&clap::ArgMatches>) -> Result<(), Error> {
    let Some(ipc) = m.and_then(|m| m.subcommand_matches("ipc")) else {
        return Ok(());
    };
    let common = <Common as clap::Args>::augment_args(clap::Command::new("bench"));
    for arg in common.get_arguments() {
        let id = arg.get_id().as_str();
        if !IPC_USES.contains(&id)
            && ipc.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        {
            return Err(Error::Config(format!(
                "--{} is not an option of `bench ipc`: it measures message round trips between two \
                 CPUs, with --cpus, --batch, --transports, --round-trips, --duration, --warmup and --json",
                arg.get_long().unwrap_or(id)
            )));
        }
    }
    Ok(())
}

/// Refuses what a run of one process per island cannot do.
fn refuse_unused_by_processes(c: &Common, workload: Option<&WorkloadCmd>) -> Result<(), Error> {
    let refuse = |why: &str| Err(Error::Config(format!("--processes: {why}")));
    match workload {
        Some(WorkloadCmd::Micro(_) | WorkloadCmd::Ycsb(_) | WorkloadCmd::Tpcc(_)) | None => {}
        Some(_) => {
            return refuse(
                "runs micro, ycsb or tpcc, whose islands exchange messages (inserts, calls, \
                 tpcb and ipc run in one process)",
            )
        }
    }
    if c.connect.is_some() {
        return refuse("drives islands it starts itself; --connect drives a running server");
    }
    if c.resume {
        return refuse("loads a fresh database in each process; --resume is for in-process runs");
    }
    if c.transport == Some(Kind::InProc) {
        return refuse(
            "--transport inproc joins islands of one process: give --transport uds (the \
             default) or shm",
        );
    }
    if c.island_process.is_some() != c.run_dir.is_some() {
        return refuse("--island-process and --run-dir go together (set by --processes)");
    }
    Ok(())
}

/// `m`: bench's own matches (which options were given, not defaulted).
pub fn run(args: &BenchArgs, m: Option<&clap::ArgMatches>) -> Result<(), RunError> {
    let c = args.common.clone();
    if let Some(WorkloadCmd::Ipc(a)) = &args.workload {
        refuse_unused_by_ipc(m)?;
        return crate::ipc_cmd::run_ipc(a, c.duration, c.warmup, c.json.as_deref())
            .map_err(|e| Error::Config(e).into());
    }
    if c.processes || c.island_process.is_some() {
        refuse_unused_by_processes(&c, args.workload.as_ref())?;
    }
    if let Some(addr) = c.connect {
        let w = match &args.workload {
            Some(WorkloadCmd::Tpcb(a)) => crate::connect_cmd::NetWorkload::Tpcb {
                scale: a.scale,
                select_only: a.select_only,
            },
            Some(WorkloadCmd::Ycsb(a)) => {
                let p = YcsbConfig::preset(&a.preset)?;
                if a.multisite.is_some() {
                    return Err(Error::Config(
                        "--connect ycsb draws keys from the whole table: --multisite is for \
                         in-process runs"
                            .into(),
                    )
                    .into());
                }
                if a.ops.unwrap_or(p.ops) != 1 {
                    return Err(Error::Config(
                        "--connect ycsb makes one request per call: --ops 1 (the silo preset)"
                            .into(),
                    )
                    .into());
                }
                crate::connect_cmd::NetWorkload::Ycsb {
                    rows: a.rows.unwrap_or(p.rows),
                    read_pct: a.read_pct.unwrap_or(p.read_pct).min(100),
                }
            }
            Some(WorkloadCmd::Tpcc(a)) => crate::connect_cmd::NetWorkload::Tpcc {
                warehouses: a.warehouses.ok_or_else(|| {
                    Error::Config(
                        "--connect tpcc needs --warehouses: the number the server was loaded \
                         with (islands serve --init tpcc --warehouses N)"
                            .into(),
                    )
                })?,
                mix: Mix::parse(&a.mix)?,
                local_only: a.local_only,
            },
            Some(WorkloadCmd::Micro(a)) => crate::connect_cmd::NetWorkload::Micro {
                rows: a.rows,
                sites: a.sites,
                n: a.n,
                update: a.update,
                multisite_pct: a.multisite,
                theta: a.skew,
            },
            None => {
                return Err(Error::Config(
                    "--connect needs a workload: ycsb, tpcb, tpcc or micro".into(),
                )
                .into())
            }
            Some(_) => {
                return Err(Error::Config(
                    "--connect drives ycsb, tpcb, tpcc or micro (what `islands serve --init` \
                     loads)"
                        .into(),
                )
                .into())
            }
        };
        return crate::connect_cmd::run(
            crate::connect_cmd::NetRun {
                addr,
                connections: c.connections,
                pipeline: c.pipeline,
                warmup: secs("--warmup", c.warmup)?,
                duration: secs("--duration", c.duration)?,
                seed: c.seed,
            },
            w,
        )
        .map_err(RunError::from);
    }
    if let Some(WorkloadCmd::Tpcb(_)) = &args.workload {
        return Err(Error::Config(
            "bench tpcb runs against a server: give --connect ADDR (see `islands serve --init tpcb`)"
                .into(),
        ).into());
    }
    if c.topology.is_some()
        && (c.connect.is_some() || matches!(args.workload, Some(WorkloadCmd::Calls(_))))
    {
        return Err(Error::Config(
            "--topology plans the deployment of an in-process run: not with --connect or calls"
                .into(),
        )
        .into());
    }
    if let Some(WorkloadCmd::Calls(a)) = &args.workload {
        let shape = crate::calls_cmd::Shape {
            islands: c.islands.clone().unwrap_or_else(|| "1".into()),
            workers_per_island: c
                .workers_per_island
                .or(c.workers.map(|w| w.min(u32::MAX as usize) as u32)),
            duration: secs("--duration", c.duration)?,
            warmup: secs("--warmup", c.warmup)?,
            pin: !c.no_pin,
        };
        return crate::calls_cmd::run(a, &shape).map_err(RunError::from);
    }
    let (file, named) = match c.config.as_deref() {
        Some(path) => {
            let (spec, named) = DeploySpec::from_toml_file_named(path).map_err(Error::from)?;
            (Some(spec), named)
        }
        None => (None, deploy::Named::default()),
    };
    // The file's durability and log_dir only where it names them: a
    // DeploySpec fills them with the deployment defaults (sync, islands-data),
    // which would turn the log on and keep it in the working directory,
    // against bench's own defaults (off; a temporary directory).
    let durability: Durability = c
        .durability
        .clone()
        .or_else(|| {
            file.as_ref()
                .filter(|_| named.durability)
                .map(|f| f.durability.clone())
        })
        .unwrap_or_else(|| {
            // A log directory given is a log asked for.
            let log_dir = c.log_dir.is_some() || (file.is_some() && named.log_dir);
            if log_dir { "sync" } else { "off" }.into()
        })
        .parse()
        .map_err(|e| Error::Config(format!("--durability: {e}")))?;
    let cc_choice =
        c.cc.clone()
            .or_else(|| file.as_ref().and_then(|f| f.cc.clone()));
    if let Some(cc) = &cc_choice {
        cc.parse::<CcKind>().map_err(Error::Config)?;
    }
    // What the file says, under what the command line says.
    let c = Common {
        cc: cc_choice,
        log_dir: c.log_dir.clone().or_else(|| {
            file.as_ref()
                .filter(|_| named.log_dir)
                .map(|f| f.log_dir.clone())
        }),
        workers_per_island: c
            .workers_per_island
            .or_else(|| file.as_ref().and_then(|f| f.workers_per_island)),
        ..c
    };
    // One process per island: islands joined by a transport between
    // processes (so the distributed executor, even at 0% multisite), and a
    // child that keeps its stdout for its parent.
    let c = if c.processes || c.island_process.is_some() {
        Common {
            transport: Some(c.transport.unwrap_or(Kind::Uds)),
            progress: if c.island_process.is_some() {
                "quiet".into()
            } else {
                c.progress.clone()
            },
            ..c
        }
    } else {
        c
    };
    // Each worker is a thread: a typo such as 4000000000 would allocate its
    // specs (gigabytes) and then try to start them all.
    if let Some(w) = c.workers_per_island {
        if w == 0 || w > 1024 {
            return Err(Error::Config(format!(
                "--workers-per-island {w} (or workers_per_island in --config) is outside 1..=1024"
            ))
            .into());
        }
    }
    let display = match c.progress.as_str() {
        "auto" => DisplayMode::Auto,
        "bar" => DisplayMode::Bar,
        "plain" => DisplayMode::Plain,
        "quiet" => DisplayMode::Quiet,
        other => {
            return Err(Error::Config(format!(
                "--progress '{other}' is not one of auto, bar, plain, quiet"
            ))
            .into())
        }
    };
    let warmup = secs("warmup", c.warmup)?;
    let measure = secs("duration", c.duration)?;
    if measure.is_zero() {
        return Err(Error::Config("--duration must be more than 0 seconds".into()).into());
    }
    if c.inflight == 0 {
        return Err(Error::Config("--inflight must be at least 1".into()).into());
    }
    if c.resume && (c.log_dir.is_none() || durability == Durability::Off) {
        return Err(Error::Config(
            "--resume goes on from the database in --log-dir: give --log-dir and --durability \
             sync or async"
                .into(),
        )
        .into());
    }
    if c.group_delay_us > 1_000_000 {
        return Err(Error::Config(format!(
            "--group-delay-us {} is more than a second",
            c.group_delay_us
        ))
        .into());
    }
    let quiet = display == DisplayMode::Quiet;
    let checkpoint = checkpoint_policy(&c, file.as_ref())?;

    // The deployment: plan it on this machine's topology.
    let topology = match &c.topology {
        Some(t) => {
            Topology::described(t).map_err(|e| Error::Config(format!("--topology {t}: {e}")))?
        }
        None => Topology::discover().map_err(Error::from)?,
    };
    // A described machine's CPUs need not be this one's.
    let pin = !c.no_pin && c.topology.is_none();
    let islands_label = match (&c.islands, &file) {
        (Some(l), _) => Islands::parse(l).map_err(Error::from)?,
        (None, Some(f)) => f.islands.clone(),
        (None, None) => Islands::Count(1),
    };
    let single = islands_label == Islands::Count(1);
    let mut spec = DeploySpec::new(islands_label);
    spec.placement = match (&c.placement, &file) {
        (Some(p), _) => p.parse::<Placement>().map_err(Error::from)?,
        (None, Some(f)) => f.placement,
        (None, None) => Placement::Grouped,
    };
    spec.sites = file.as_ref().and_then(|f| f.sites);
    spec.workers_per_island =
        match (c.workers_per_island, c.workers) {
            (Some(w), _) => Some(w),
            (None, Some(w)) if single => {
                if w == 0 || w > 1024 {
                    return Err(Error::Config(format!("--workers {w} is outside 1..=1024")).into());
                }
                Some(w as u32)
            }
            (None, Some(_)) => return Err(Error::Config(
                "--workers sizes a single island; with several islands use --workers-per-island"
                    .into(),
            )
            .into()),
            (None, None) if single => Some(allowed_cpus().len().max(1) as u32),
            (None, None) => None,
        };
    spec.cc = c.cc.clone();
    spec.durability = durability.to_string();
    // One process per island: the parent's run directory (made here and
    // removed when the run ends), or a child's reading of the one it is given.
    let procs = match (c.island_process, &c.run_dir) {
        (Some(k), Some(dir)) => Some(bench_procs::child(k, dir)?),
        _ if c.processes => {
            let kind = c.transport.unwrap_or(Kind::Uds);
            Some(Procs::Parent {
                dir: bench_procs::RunDir::create()?,
                kind,
            })
        }
        _ => None,
    };
    // A temporary log directory is ours to remove; a given one is the user's.
    let (log_base, temp_log) = match (&c.log_dir, durability, &procs) {
        (_, Durability::Off, _) => (None, false),
        (Some(d), _, _) => (Some(d.clone()), false),
        // Under the run directory of a run of processes, removed with it.
        (None, _, Some(p)) => (Some(p.run_dir().join("logs")), false),
        (None, _, None) => {
            let d = std::env::temp_dir().join(format!("islands-bench-{}", std::process::id()));
            (Some(d), true)
        }
    };
    if let Some(d) = &log_base {
        spec.log_dir = d.clone();
    }
    let workload = args.workload.clone().unwrap_or(WorkloadCmd::Ycsb(YcsbArgs {
        preset: "silo".into(),
        ..Default::default()
    }));
    if let WorkloadCmd::Micro(a) = &workload {
        if let Some(s) = a.sites {
            spec.sites = Some(
                u32::try_from(s).map_err(|_| Error::Config(format!("--sites {s} is too large")))?,
            );
        }
    }
    // The warehouses are the sites of TPC-C.
    if let WorkloadCmd::Tpcc(a) = &workload {
        if let Some(w) = a.warehouses {
            TpccConfig {
                warehouses: w,
                ..Default::default()
            }
            .check()?;
            spec.sites = Some(w);
        }
    }
    // A resumed database keeps the site count it was made with (its control files record
    // it): planned from this machine's cores, keys would be looked for on other islands.
    if let (Some(base), true, None) = (&log_base, c.resume, spec.sites) {
        if let Some(ctl) =
            islands::wal::read_control(&base.join("island-0")).map_err(Error::from)?
        {
            spec.sites = (ctl.sites != 0).then_some(ctl.sites);
        }
    }
    let plan = deploy::plan(&topology, &spec).map_err(Error::from)?;
    if let Some(p) = &procs {
        let n = plan.islands().len();
        if n < 2 {
            return Err(Error::Config(
                "--processes runs one process per island, and this plan has one island: give \
                 --islands 2 (or per-core, per-l3, ...)"
                    .into(),
            )
            .into());
        }
        if let Procs::Child { island, .. } = p {
            if *island >= n {
                return Err(Error::Config(format!(
                    "--island-process {island}: the plan has {n} islands"
                ))
                .into());
            }
        }
    }
    // Every island of one database shares its deployment id: a new one, the one of
    // the database a run resumes (each island's open checks it against its directory),
    // or the one of a run of processes.
    let deployment = match (&log_base, c.resume, &procs) {
        (Some(base), true, _) => resumed_deployment(base, plan.islands().len())?,
        (_, _, Some(p)) => p.deployment(),
        _ => islands::wal::new_deployment_id(),
    };
    let mut configs: Vec<IslandConfig> = Vec::new();
    for ip in plan.islands() {
        let mut cfg = IslandConfig::new(ip.cc.parse().map_err(Error::Config)?, ip.workers as usize);
        cfg.name = format!("island-{}", ip.id);
        cfg.island_id = u32::from(ip.id);
        cfg.islands = plan.islands().len() as u32;
        cfg.deployment = Some(deployment);
        cfg.sites = plan.sites();
        cfg.durability = durability;
        cfg.log_dir = log_base.as_ref().map(|_| ip.log_dir.clone());
        cfg.group_delay = Duration::from_micros(c.group_delay_us);
        cfg.preallocate_log = c.log_preallocate;
        if let Some(b) = c.log_segment_bytes {
            cfg.segment_bytes = b.max(1);
        }
        cfg.expedite_2pc = c.expedite_2pc;
        cfg.checkpoint = checkpoint;
        configs.push(cfg);
    }
    if let Some(dev) = test_log_device()? {
        for cfg in &mut configs {
            cfg.device = Some(Arc::new(dev.clone()));
        }
    }
    let mut workers = Vec::new();
    for (i, ip) in plan.islands().iter().enumerate() {
        for j in 0..ip.workers as usize {
            workers.push(WorkerSpec {
                island: i,
                // In the placement's order: under spread, consecutive workers
                // of one island run on different sockets.
                cpu: ip.worker_cpu(j).filter(|_| pin).map(|c| c as usize),
            });
        }
    }
    let mut dcfg = DriverConfig {
        workers: workers.len(),
        warmup,
        measure,
        inflight: c.inflight,
        seed: c.seed,
        display,
        pin,
        phases: c.phases,
        workload_name: String::new(),
        parameters: Default::default(),
        deployment: deployment_line(&plan, &configs, durability, &log_base),
    };
    let n_islands = plan.islands().len();
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
            // YCSB has no sites: the keys are split evenly over the islands.
            // They are drawn from the whole table, so on several islands a
            // transaction is distributed whenever one of its keys is remote.
            let split = EvenSplit::new(y.rows, n_islands as u32).ok_or_else(|| {
                Error::Config(format!(
                    "--rows {} is fewer than the {n_islands} islands: each island needs at least one row",
                    y.rows
                ))
            })?;
            let keys_of = |i: usize| split.range(i as u32);
            // As micro's: YCSB's transactions are as short.
            let defaults = match durability {
                Durability::Off => (8, 8),
                Durability::Sync | Durability::Async => (8, 256),
            };
            let copts = cluster_options(&c, defaults, workers.len())?;
            // Homed with nothing crossing: the islands run as micro's do at
            // 0% (no router), unless a locking scheme was asked for.
            let distributed =
                n_islands > 1 && (a.multisite.is_none_or(|p| p > 0) || explicit_locking(&c));
            let router: Option<Arc<dyn Router>> = if distributed {
                cluster_cc(&mut configs, &c, &copts)?;
                dcfg.deployment = deployment_line(&plan, &configs, durability, &log_base);
                let starts: Vec<u64> = (0..n_islands).map(|i| keys_of(i).start).collect();
                Some(Arc::new(RangeRouter::new(&starts, &[])?))
            } else {
                None
            };
            dcfg.workload_name = format!("ycsb ({})", a.preset);
            dcfg.parameters = y.parameters();
            if let Some(pct) = a.multisite {
                dcfg.parameters
                    .insert("multisite_pct".into(), pct.to_string());
            }
            for (i, cfg) in configs.iter_mut().enumerate() {
                cfg.workload = WorkloadSpec::Ycsb {
                    rows: y.rows,
                    row_bytes: y.row_bytes,
                    keys: keys_of(i),
                }
                .to_string();
            }
            let w = match a.multisite {
                None => Ycsb::new(y.clone())?,
                Some(pct) => Ycsb::homed(
                    y.clone(),
                    Homes {
                        islands: n_islands as u32,
                        multisite_pct: pct,
                        of_worker: workers.iter().map(|w| w.island as u32).collect(),
                    },
                )?,
            };
            execute(
                configs,
                |i| {
                    let k = keys_of(i);
                    ycsb::tables(&y, k.end - k.start)
                },
                Sizing {
                    rows: &|i| vec![keys_of(i).end - keys_of(i).start],
                    growth: None,
                },
                |i, island| ycsb::load(island, &y, keys_of(i), quiet),
                &plan,
                &workers,
                w,
                &dcfg,
                &c.json,
                quiet,
                router.map(|r| (r, copts, c.transport.unwrap_or_default())),
                c.resume,
                procs.as_ref(),
                |_, _| {},
            )
        }
        WorkloadCmd::Micro(a) => {
            let m = MicroConfig {
                rows: a.rows,
                row_bytes: a.row_bytes,
                sites: plan.sites() as u64,
                n: a.n,
                update: a.update && !a.read_only,
                multisite_pct: a.multisite,
                theta: a.skew,
            };
            m.check()?;
            let distributed = n_islands > 1 && (m.multisite_pct > 0 || explicit_locking(&c));
            // Forced 2PC records wait for the log writer in `async` mode too
            // (for its write; atomicity across islands needs them in the
            // log), so both log modes want a deep window of commits; the
            // executing window stays small (see `commit_window`).
            let defaults = match durability {
                Durability::Off => (8, 8),
                Durability::Sync | Durability::Async => (8, 256),
            };
            let copts = cluster_options(&c, defaults, workers.len())?;
            if distributed {
                cluster_cc(&mut configs, &c, &copts)?;
                dcfg.deployment = deployment_line(&plan, &configs, durability, &log_base);
            }
            dcfg.workload_name =
                format!("micro ({})", if m.update { "update" } else { "read-only" });
            dcfg.parameters = m.parameters();
            for (i, cfg) in configs.iter_mut().enumerate() {
                let s = plan.sites_of(i as IslandId);
                cfg.workload = WorkloadSpec::Micro {
                    rows: m.rows,
                    row_bytes: m.row_bytes,
                    n: m.n,
                    keys: m.keys_of_sites(s.start as u64..s.end as u64),
                }
                .to_string();
            }
            // Worker j of island i has a home site among island i's sites.
            let mut homes = Vec::new();
            let mut next = vec![0u32; n_islands];
            for w in &workers {
                let sites = plan.sites_of(w.island as IslandId);
                let n = sites.end - sites.start;
                homes.push((sites.start + next[w.island] % n) as u64);
                next[w.island] += 1;
            }
            let keys_of = |i: usize| {
                let s = plan.sites_of(i as IslandId);
                m.keys_of_sites(s.start as u64..s.end as u64)
            };
            let w = Micro::new(m.clone(), homes)?;
            let router: Option<Arc<dyn Router>> = if distributed {
                let starts: Vec<u64> = (0..n_islands).map(|i| keys_of(i).start).collect();
                Some(Arc::new(RangeRouter::new(&starts, &[])?))
            } else {
                None
            };
            execute(
                configs,
                |i| {
                    let k = keys_of(i);
                    micro::tables(&m, k.end - k.start)
                },
                Sizing {
                    rows: &|i| vec![keys_of(i).end - keys_of(i).start],
                    growth: None,
                },
                |i, island| micro::load(island, &m, keys_of(i), quiet),
                &plan,
                &workers,
                w,
                &dcfg,
                &c.json,
                quiet,
                router.map(|r| (r, copts, c.transport.unwrap_or_default())),
                c.resume,
                procs.as_ref(),
                |_, _| {},
            )
        }
        WorkloadCmd::Tpcc(a) => {
            let t = TpccConfig {
                warehouses: plan.sites(),
                mix: Mix::parse(&a.mix)?,
                local_only: a.local_only,
                max_orders_per_district: a.max_orders_per_district,
                ..Default::default()
            };
            t.check()?;
            let configs_workers: Vec<usize> = configs.iter().map(|c| c.workers).collect();
            let distributed = n_islands > 1 && (!t.local_only || explicit_locking(&c));
            // One warehouse per worker: transactions interleaved on a worker
            // collide on its hot rows (stock of NURand's popular items,
            // customers), so keep few in flight: enough to cover a remote
            // round trip (off: 1 -> 4 is +12%), or the two group commits of
            // 2PC in sync mode (16 -> 32 is +20%, with more lock conflicts).
            // With a log, a distributed transaction holds its slot across
            // its remote branches' forced prepare, and so do the 2PC waits of
            // up to a quarter of the slots: 64 keeps the worker busy even when
            // an fdatasync takes a millisecond (pairs against 32, 50/50 mix:
            // 1.06, 0.85, 1.02, 1.05; full mix 1.01, 1.10, 1.03; 128 gained
            // nothing over 64 and aborted more). Its early prepare is part of
            // its execution, so 64 executing stay (16 and 32 ran 0.72 and
            // 0.82 times as fast, 50/50 sync); its commit gives the slot up
            // (64 + 64 against 64 held through the commit: 1.22, 1.10, 0.99).
            let defaults = match durability {
                Durability::Off => (4, 4),
                Durability::Sync | Durability::Async => (64, 64),
            };
            let copts = cluster_options(&c, defaults, workers.len())?;
            if distributed {
                cluster_cc(&mut configs, &c, &copts)?;
                dcfg.deployment = deployment_line(&plan, &configs, durability, &log_base);
            }
            dcfg.workload_name = format!("tpcc (mix {})", t.mix);
            dcfg.parameters = t.parameters();
            for cfg in configs.iter_mut() {
                cfg.workload = WorkloadSpec::Tpcc {
                    warehouses: t.warehouses,
                    max_orders_per_district: t.max_orders_per_district,
                }
                .to_string();
            }
            // Worker j of island i has a home warehouse among island i's (sites are warehouses - 1).
            let mut homes = Vec::new();
            let mut next = vec![0u32; n_islands];
            for w in &workers {
                let sites = plan.sites_of(w.island as IslandId);
                let n = sites.end - sites.start;
                homes.push(sites.start + next[w.island] % n + 1);
                next[w.island] += 1;
            }
            let wh_of = |i: usize| {
                let s = plan.sites_of(i as IslandId);
                s.start + 1..s.end + 1
            };
            let w = Tpcc::new(t.clone(), homes)?;
            let router: Option<Arc<dyn Router>> = if distributed {
                let ranges: Vec<_> = (0..n_islands).map(wh_of).collect();
                Some(Arc::new(tpcc::TpccRouter::new(&ranges)?))
            } else {
                None
            };
            execute(
                configs,
                |_| tpcc::schema::tables(&t),
                Sizing {
                    rows: &|i| tpcc::schema::rows_after_load(&t, wh_of(i).len() as u32),
                    growth: Some(tpcc_growth(&t, &configs_workers)),
                },
                |i, island| tpcc::load(island, &t, wh_of(i), quiet),
                &plan,
                &workers,
                w,
                &dcfg,
                &c.json,
                quiet,
                router.map(|r| (r, copts, c.transport.unwrap_or_default())),
                c.resume,
                procs.as_ref(),
                // Payments number their history rows after those the database holds.
                |w, islands| w.continue_history(&islands.iter().collect::<Vec<_>>()),
            )
        }
        WorkloadCmd::Inserts(a) => {
            let cfg = InsertsConfig {
                row_bytes: a.row_bytes,
                rows_per_client: a.rows_per_client,
            };
            cfg.check()?;
            dcfg.workload_name = "inserts (one private table per client)".into();
            dcfg.parameters = cfg.parameters();
            // A worker's table is its rank among its island's workers.
            let mut rank = vec![0u16; n_islands];
            let table_of: Vec<u16> = workers
                .iter()
                .map(|w| {
                    rank[w.island] += 1;
                    rank[w.island] - 1
                })
                .collect();
            let clients: Vec<usize> = rank.iter().map(|&r| r as usize).collect();
            for (i, c) in configs.iter_mut().enumerate() {
                c.workload = WorkloadSpec::Inserts {
                    row_bytes: cfg.row_bytes,
                    rows_per_client: cfg.rows_per_client,
                    clients: clients[i],
                }
                .to_string();
            }
            let w = Inserts::new(cfg.clone(), table_of.clone())?;
            execute(
                configs,
                |i| inserts::tables(&cfg, clients[i]),
                Sizing {
                    rows: &|i| vec![0; clients[i]],
                    growth: None,
                },
                |_, _| Ok(()),
                &plan,
                &workers,
                w,
                &dcfg,
                &c.json,
                quiet,
                None,
                c.resume,
                None,
                // Each client goes on after the records its table holds.
                |w, islands| {
                    for (i, spec) in workers.iter().enumerate() {
                        let table = islands[spec.island].catalog().table(table_of[i]);
                        w.start_at(i, table.count_rows());
                    }
                },
            )
        }
        WorkloadCmd::Ipc(_) | WorkloadCmd::Calls(_) | WorkloadCmd::Tpcb(_) => {
            unreachable!("handled at the top of run")
        }
    };
    if temp_log {
        if let Some(d) = &log_base {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    result
}

/// The periodic checkpoints: the command line's, else the file's, else the default.
fn checkpoint_policy(c: &Common, file: Option<&DeploySpec>) -> Result<CheckpointPolicy, Error> {
    let mut policy = CheckpointPolicy::DEFAULT;
    match (
        c.checkpoint_every_mb,
        file.and_then(|f| f.checkpoint_every_mb),
    ) {
        (Some(mb), _) | (None, Some(mb)) => {
            policy.every_bytes = mb
                .checked_mul(1 << 20)
                .ok_or_else(|| Error::Config(format!("--checkpoint-every-mb {mb} is too large")))?;
        }
        (None, None) => {}
    }
    if let Some(s) = c.checkpoint_every_s {
        policy.every = secs("checkpoint-every-s", s)?;
    } else if let Some(d) = file.and_then(|f| f.checkpoint_every) {
        policy.every = d;
    }
    Ok(policy)
}

/// The test hook `ISLANDS_TEST_LOG_CAPACITY=BYTES` (an environment variable,
/// not an option): every island's log goes through one device that fails
/// writes with ENOSPC once BYTES have been written through it in all, as a
/// small file system that fills up would ([`CappedDevice`]). The CLI tests
/// use it to fill a log without root or a loop device.
pub(crate) fn test_log_device() -> Result<Option<CappedDevice>, Error> {
    let Ok(v) = std::env::var("ISLANDS_TEST_LOG_CAPACITY") else {
        return Ok(None);
    };
    let bytes: u64 = v.parse().map_err(|_| {
        Error::Config(format!(
            "ISLANDS_TEST_LOG_CAPACITY={v} is not a number of bytes"
        ))
    })?;
    Ok(Some(CappedDevice::new(bytes)))
}

/// Opens every island of the plan, loads each from a thread pinned to the
/// island's first CPU (so its rows are first touched on its NUMA node), makes
/// the load durable with a checkpoint when the log is on, and runs the workload.
/// With `resume`, the islands are recovered from their logs instead of loaded, and
/// `on_resume` sets the workload up to go on from what they hold.
///
/// With `procs` (`--processes`), the parent opens no island: it starts one
/// process per island and merges their reports; a child opens, loads and
/// runs only its own island (see [`bench_procs`]).
#[allow(clippy::too_many_arguments)]
fn execute<W: Workload + 'static>(
    configs: Vec<IslandConfig>,
    tables: impl Fn(usize) -> Vec<islands::storage::TableDef>,
    sizing: Sizing<'_>,
    load: impl Fn(usize, &Island) -> Result<(), Error> + Sync,
    plan: &Plan,
    workers: &[WorkerSpec],
    workload: W,
    dcfg: &DriverConfig,
    json: &Option<PathBuf>,
    quiet: bool,
    cluster: Option<(Arc<dyn Router>, ClusterOptions, Kind)>,
    resume: bool,
    procs: Option<&Procs>,
    on_resume: impl FnOnce(&W, &[Island]),
) -> Result<(), RunError> {
    // A child of a run of processes has one island of the deployment.
    let configs: Vec<IslandConfig> = match procs {
        Some(Procs::Child { island, .. }) => configs
            .into_iter()
            .filter(|c| c.island_id as usize == *island)
            .collect(),
        _ => configs,
    };
    // Every refusal before any island opens: opening one creates its
    // directory, a lock file and a segment.
    let holds = |d: &std::path::Path| {
        d.exists()
            && std::fs::read_dir(d)
                .map(|mut r| r.next().is_some())
                .unwrap_or(false)
    };
    for d in configs.iter().filter_map(|c| c.log_dir.as_deref()) {
        if !resume && holds(d) {
            return Err(Error::Config(format!(
                "log directory {} is not empty: the benchmark loads a fresh database (remove it or pick another)",
                d.display()
            )).into());
        }
        if resume && !holds(d) {
            return Err(Error::Config(format!(
                "--resume: log directory {} holds no database to go on from (leave --resume out to \
                 load a new one)",
                d.display()
            ))
            .into());
        }
    }
    if resume {
        // A database whose load never completed, or one of whose islands' logs is lost, is
        // refused here, before anything runs on it.
        let dirs: Vec<PathBuf> = configs.iter().filter_map(|c| c.log_dir.clone()).collect();
        let opening = islands::island::judge_deployment_dirs(&dirs, dirs.len())?;
        if let islands::island::Opening::Recover { sites } = opening {
            let planned = configs.first().map_or(0, |c| c.sites);
            if sites != 0 && sites != planned {
                return Err(Error::Config(format!(
                    "--resume: the database was made with its keys spread over {sites} sites, \
                     and this run plans {planned}: give the --sites (or --warehouses) it was \
                     made with"
                ))
                .into());
            }
        }
    }
    let needed = check_memory(&configs, &tables, sizing.rows)?;
    let memory_note = format!(
        "memory: the data took about {} after the load (estimated; {} available){}",
        memory::gib(needed),
        memory::available()
            .bytes()
            .map_or_else(|| "unknown".into(), memory::gib),
        sizing.growth.map(|g| format!("; {g}")).unwrap_or_default()
    );
    if let Some(Procs::Parent { dir, kind }) = procs {
        let probe_at = if dcfg.pin { probe_cpus(workers) } else { None };
        return bench_procs::run_parent(
            dir,
            *kind,
            plan.islands().len(),
            probe_at,
            json,
            quiet,
            vec![memory_note],
        );
    }
    let names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
    let expect = if resume {
        Expect::Recover
    } else {
        Expect::Fresh
    };
    let opened = open_islands(configs, &tables, expect)?.islands;
    if resume && !quiet {
        for (name, (_, report)) in names.iter().zip(&opened) {
            eprintln!("[resume] {name}: {report}");
        }
    }
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    if let Some(Procs::Child { island, processes }) = procs {
        let Some((router, opts, _)) = cluster else {
            return Err(Error::Config(
                "--processes: this run's islands exchange no messages".into(),
            )
            .into());
        };
        let n = plan.islands().len();
        let first = islands
            .first()
            .ok_or_else(|| Error::Config(format!("island {island} was not opened")))?;
        // Linked before the load, so that the peers connect meanwhile.
        let linked = bench_procs::link(*island, processes, first, workers, n, opts.mailbox_depth)?;
        let cpu = plan.islands()[*island]
            .cpus
            .as_ref()
            .and_then(|s| s.iter().next())
            .map(|c| c as usize)
            .filter(|_| dcfg.pin);
        load_islands(&islands, |_| cpu, &load)?;
        return bench_procs::run_child(
            *island, opened, linked, workers, n, workload, dcfg, router, opts,
        );
    }
    if resume {
        let in_doubt: usize = opened.iter().map(|(_, r)| r.in_doubt.len()).sum();
        if in_doubt > 0 && cluster.is_none() {
            return Err(Error::Config(format!(
                "--resume: the logs hold {in_doubt} branch(es) of distributed transactions in doubt, \
                 and this run does not run two-phase commit to resolve them: resume with options \
                 that do (e.g. --multisite above 0), or check the database with `islands check`"
            )).into());
        }
        on_resume(&workload, &islands);
        return run_loaded(
            opened,
            workers,
            workload,
            dcfg,
            json,
            quiet,
            cluster,
            memory_note,
        );
    }
    let t = std::time::Instant::now();
    let first_cpu: Vec<Option<usize>> = plan
        .islands()
        .iter()
        .map(|ip| {
            ip.cpus
                .as_ref()
                .and_then(|s| s.iter().next())
                .map(|c| c as usize)
        })
        .collect();
    load_islands(&islands, |i| first_cpu[i].filter(|_| dcfg.pin), &load)?;
    if !quiet {
        eprintln!(
            "[load] {} island(s) loaded in {:.1}s",
            islands.len(),
            t.elapsed().as_secs_f64()
        );
    }
    run_loaded(
        opened,
        workers,
        workload,
        dcfg,
        json,
        quiet,
        cluster,
        memory_note,
    )
}

/// Runs the workload on islands that are loaded (or recovered), and reports.
#[allow(clippy::too_many_arguments)]
fn run_loaded<W: Workload + 'static>(
    opened: Vec<(Island, RecoveryReport)>,
    workers: &[WorkerSpec],
    workload: W,
    dcfg: &DriverConfig,
    json: &Option<PathBuf>,
    quiet: bool,
    cluster: Option<(Arc<dyn Router>, ClusterOptions, Kind)>,
    memory_note: String,
) -> Result<(), RunError> {
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let chunks_at = |islands: &[Island]| {
        islands.iter().fold(PrefaultStats::default(), |mut s, i| {
            s += i.prefault_stats();
            s
        })
    };
    let chunks_before = chunks_at(&islands);
    let probe_at = probe_cpus(workers);
    let probe = || probe_at.and_then(|(a, b)| ipc::probe(a as CpuId, b as CpuId));
    let probe_before = probe();
    let run = match cluster {
        None => driver::run_islands(&islands, workers, Arc::new(workload), dcfg),
        Some((router, mut opts, kind)) => {
            let (inflight, commits) = (opts.inflight, opts.commit_window);
            let (cws, per_island) = driver::cluster_workers(workers, islands.len());
            let joined = join_islands(kind, &islands, &per_island, opts.mailbox_depth)?;
            opts.transports = joined.transports.clone();
            let cl = Cluster::new(opened, per_island, router, opts)?;
            let note = format!(
                "{inflight} transactions executing and up to {commits} more committing per worker; multi-island transactions commit with two-phase commit (presumed abort); transport {kind}"
            );
            let run = run_cluster(&cl, &cws, Arc::new(workload), dcfg).map(|mut r| {
                r.notes.push(note);
                r
            });
            drop(cl);
            drop(joined);
            run
        }
    };
    // A run that stopped early (a log that died) still reports what it
    // measured up to then; its error comes after the report.
    let (mut report, stopped) = match run {
        Ok(r) => (r, None),
        Err(RunError::Stopped { cause, partial }) => (*partial, Some(cause)),
        Err(e) => return Err(e),
    };
    if let (Some((a, b)), Some(before)) = (probe_at, probe_before) {
        report.host = Some(HostProbe {
            cpus: [a, b],
            round_trip_ns_before: before,
            round_trip_ns_after: probe(),
        });
    }
    let chunks = chunks_at(&islands);
    for i in &islands {
        i.shutdown();
    }
    report.notes.push(memory_note);
    report.notes.push(format!(
        "arena chunks during the run: {} mapped ahead by the prefault threads, {} faulted in by the workers themselves (fallbacks)",
        chunks.prefaulted - chunks_before.prefaulted,
        chunks.fallbacks - chunks_before.fallbacks
    ));
    publish(&mut report, json.as_deref(), quiet)?;
    match stopped {
        Some(cause) => Err(RunError::Stopped {
            cause,
            partial: Box::new(report),
        }),
        None => Ok(()),
    }
}

/// How TPC-C's data grows while it runs, and how far
/// `--max-orders-per-district` lets it grow (a note for the report).
fn tpcc_growth(t: &TpccConfig, workers: &[usize]) -> String {
    let concurrent = workers.iter().any(|&w| w > 1);
    let per = tpcc::schema::bytes_per_new_order(t, concurrent);
    let ceiling = u64::from(t.warehouses)
        * u64::from(tpcc::schema::DISTRICTS)
        * u64::from(t.max_orders_per_district - t.initial_orders());
    format!(
        "each NewOrder adds about {per} bytes (orders, order lines and history), {} more if every \
         district reached --max-orders-per-district",
        memory::gib(ceiling.saturating_mul(per))
    )
}

/// What a workload's data needs: the rows of each table (in the order of
/// its table definitions) on island `i` once loaded, and how it grows
/// while the run goes (a note for the report).
struct Sizing<'a> {
    rows: &'a dyn Fn(usize) -> Vec<u64>,
    growth: Option<String>,
}

/// Refuses a run whose data cannot fit: the estimate of every island's
/// tables once loaded ([`TableDef::memory_bytes`], what creating them
/// reserves included) against the memory this process may still take
/// (MemAvailable, and the cgroup's limit when one is set). Returns the
/// estimate.
fn check_memory(
    configs: &[IslandConfig],
    tables: &dyn Fn(usize) -> Vec<TableDef>,
    rows: &dyn Fn(usize) -> Vec<u64>,
) -> Result<u64, Error> {
    let mut by_table: std::collections::BTreeMap<String, u64> = Default::default();
    let mut total = 0u64;
    for cfg in configs {
        let (i, concurrent) = (cfg.island_id as usize, cfg.workers > 1);
        for (def, n) in tables(i).iter().zip(rows(i)) {
            let b = def.memory_bytes(n, concurrent);
            total = total.saturating_add(b);
            let t = by_table.entry(def.name.clone()).or_default();
            *t = t.saturating_add(b);
        }
    }
    let avail = memory::available();
    match avail.bytes() {
        Some(left) if total > left => {
            let mut largest: Vec<(String, u64)> = by_table.into_iter().collect();
            largest.sort_by_key(|t| std::cmp::Reverse(t.1));
            let largest: Vec<String> = largest
                .iter()
                .take(3)
                .map(|(n, b)| format!("{n} {}", memory::gib(*b)))
                .collect();
            Err(Error::Config(format!(
                "the data of this run needs about {} once loaded (largest tables: {}), more than the {} \
                 this process may still take ({avail}): use fewer rows or warehouses",
                memory::gib(total),
                largest.join(", "),
                memory::gib(left)
            )))
        }
        _ => Ok(total),
    }
}

/// The deployment id of the database a run resumes: island 0's, whose control file
/// must say the deployment has `islands` islands (each island's open checks the rest).
fn resumed_deployment(base: &std::path::Path, islands: usize) -> Result<u128, Error> {
    let dir = base.join("island-0");
    let Some(c) = islands::wal::read_control(&dir)? else {
        return Err(Error::Config(format!(
            "--resume: {} holds no control file: there is no database of islands bench to go on from",
            dir.display()
        )));
    };
    if c.islands as usize != islands {
        return Err(Error::Config(format!(
            "--resume: the database in {} has {} island(s); this run's deployment has {islands} \
             (give the --islands it ran with)",
            base.display(),
            c.islands
        )));
    }
    Ok(c.deployment)
}

/// The two CPUs of the host probe ([`HostProbe`]): the first pinned worker's
/// and that of the first pinned worker of another island (where the
/// messages go), or else of another CPU. `None` without two pinned CPUs.
fn probe_cpus(workers: &[WorkerSpec]) -> Option<(usize, usize)> {
    let pinned = || workers.iter().filter_map(|w| w.cpu.map(|c| (w.island, c)));
    let (island, a) = pinned().next()?;
    let other = pinned()
        .find(|&(i, c)| i != island && c != a)
        .or_else(|| pinned().find(|&(_, c)| c != a))?;
    Some((a, other.1))
}

/// Every island of the run joined by `kind` (see [`islands::transport::join`]).
fn join_islands(
    kind: Kind,
    islands: &[Island],
    workers: &[usize],
    mailbox_depth: usize,
) -> Result<join::Joined, Error> {
    let first = islands.first().map(|i| i.config());
    let id = join::Identity {
        deployment: first.and_then(|c| c.deployment).unwrap_or(0),
        incarnations: islands.iter().map(|i| i.incarnation()).collect(),
        schema: islands.first().map_or(0, |i| i.schema_fingerprint()),
        catalog: 0,
    };
    let workers: Vec<u32> = workers.iter().map(|&w| w as u32).collect();
    join::in_process(kind, &workers, &id, mailbox_depth, Duration::from_secs(20))
}

/// Whether the user chose a locking scheme (then a multi-island run uses the
/// distributed executor even without multisite transactions, for comparisons
/// at equal concurrency control).
fn explicit_locking(c: &Common) -> bool {
    c.cc.as_deref().is_some_and(|cc| cc != "none") || c.transport.is_some()
}

/// Islands that run distributed transactions: `no_wait`, and room for the
/// executors' transaction contexts. An explicit other choice is an error.
fn cluster_cc(
    configs: &mut [IslandConfig],
    c: &Common,
    opts: &ClusterOptions,
) -> Result<(), Error> {
    if let Some(cc) = &c.cc {
        let kind: CcKind = cc.parse().map_err(Error::Config)?;
        if kind != CcKind::NoWait {
            return Err(Error::Config(format!(
                "--cc {kind}: islands that run distributed transactions use no_wait (a worker interleaves \
                 transactions and cannot wait for a lock; 'none' cannot hold a branch open; OCC validated at \
                 each island's prepare is not serializable across islands). Use --cc no_wait, or leave --cc out"
            )));
        }
    }
    for cfg in configs.iter_mut() {
        cfg.cc = CcKind::NoWait;
        cfg.contexts = opts.contexts_needed(cfg.workers);
    }
    Ok(())
}

/// The executors' sizes: transactions in flight per worker, and room for the
/// branches that every other worker's transactions may open here.
fn cluster_options(
    c: &Common,
    (default_inflight, default_commits): (usize, usize),
    total_workers: usize,
) -> Result<ClusterOptions, Error> {
    let inflight = c.txns_per_worker.unwrap_or(default_inflight);
    if inflight == 0 || inflight > 1024 {
        return Err(Error::Config(format!(
            "--txns-per-worker {inflight} is outside 1..=1024"
        )));
    }
    let commit_window = c.commits_per_worker.unwrap_or(default_commits);
    if commit_window > 1024 {
        return Err(Error::Config(format!(
            "--commits-per-worker {commit_window} is outside 0..=1024"
        )));
    }
    Ok(ClusterOptions {
        inflight,
        commit_window,
        // Every other worker's transactions, executing or committing, may
        // hold a branch here.
        max_branches: ((inflight + commit_window) * total_workers).clamp(64, 3000),
        ..Default::default()
    })
}

/// The report's deployment line: the plan, each island's concurrency control, the log.
fn deployment_line(
    plan: &Plan,
    configs: &[IslandConfig],
    durability: Durability,
    log_base: &Option<PathBuf>,
) -> String {
    format!(
        "{}; cc {}; durability {durability}{}",
        plan.summary(),
        configs
            .iter()
            .map(|c| c.cc.name())
            .collect::<Vec<_>>()
            .join("/"),
        log_base
            .as_ref()
            .map(|d| format!(", log in {}", d.display()))
            .unwrap_or_default()
    )
}

/// Adds the NewOrder rate of a TPC-C run to `report`'s notes, prints its
/// table and writes its JSON to `json` if given.
pub(crate) fn publish(
    report: &mut islands_bench::report::Report,
    json: Option<&std::path::Path>,
    quiet: bool,
) -> Result<(), Error> {
    if let Some(no) = report.per_type.iter().find(|t| t.name == "NewOrder") {
        let per_min = no.throughput_tps * 60.0;
        report.notes.push(format!(
            "NewOrders per minute: {per_min:.0} (no keying or think time: not a compliant tpmC)"
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn w(island: usize, cpu: Option<usize>) -> WorkerSpec {
        WorkerSpec { island, cpu }
    }

    #[test]
    fn the_probe_pairs_cpus_of_two_islands_when_there_are_two() {
        let ws = [w(0, Some(0)), w(0, Some(1)), w(1, Some(2)), w(1, Some(3))];
        assert_eq!(probe_cpus(&ws), Some((0, 2)));
        // One island: two of its CPUs.
        assert_eq!(probe_cpus(&ws[..2]), Some((0, 1)));
        // Two workers sharing one CPU, or unpinned workers: nothing to probe.
        assert_eq!(probe_cpus(&[w(0, Some(1)), w(1, Some(1))]), None);
        assert_eq!(probe_cpus(&[w(0, None), w(1, None)]), None);
        assert_eq!(
            probe_cpus(&[w(0, None), w(1, Some(0)), w(1, Some(1))]),
            Some((0, 1))
        );
    }
}
