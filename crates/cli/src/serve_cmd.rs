//! `islands serve`: open a deployment from a data directory and serve it
//! over the PostgreSQL wire protocol until SIGINT or SIGTERM.
//!
//! The data directory holds the islands' logs and checkpoints
//! (`island-<i>/`) and `served.toml`, which names the built-in data set
//! and its size. `--init` writes that file into an empty directory once
//! the options are checked (a refused start writes nothing) and before the
//! load, so every later start (`islands serve` without `--init`, after a
//! clean stop or a SIGKILL) opens the same catalog and recovers the logs;
//! an island whose log holds nothing (a start killed during the load) is
//! loaded again. The islands' control files record the data set too
//! ([`Builtin::workload`]), so `islands check` (and, for TPC-C, `islands
//! tpcc check`) checks a stopped server's directory.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use islands::api::open::Expect;
use islands::api::{Deployment, Options};
use islands::deploy::{DeploySpec, Islands, Placement};
use islands::server::{serve, ServerOptions};
use islands::Error;
use islands_workloads::served::Builtin;

#[derive(Args, Clone)]
pub struct ServeArgs {
    /// Address to listen on. Any address but a loopback one requires a password
    /// (--password-file or ISLANDS_PASSWORD).
    #[arg(long, default_value = islands::server::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The data directory: the islands' logs and checkpoints, and served.toml (which
    /// built-in data set it holds). Default: ./islands-data, or log_dir in --config.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    data: DataSetArgs,
    /// Islands: `1` (the default), `per-socket`, `per-l3`, `per-core`, a number N, or
    /// CPU lists `0-5;6-11` (see `islands plan`).
    #[arg(long, allow_negative_numbers = true)]
    islands: Option<String>,
    /// Placement of the islands on the cores: grouped (the default), spread, os.
    #[arg(long)]
    placement: Option<String>,
    /// Worker (executor) threads per island, 1 to 1024 (default: one per core).
    #[arg(long)]
    workers_per_island: Option<u32>,
    /// Durability: sync (the default: a commit is acknowledged after its log's
    /// fdatasync), async (acknowledged before: a crash may lose it), off (no log:
    /// nothing survives a restart).
    #[arg(long)]
    durability: Option<String>,
    /// A TOML deployment file, as `islands plan --config` reads it. Options given on
    /// the command line override it.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    #[command(flatten)]
    server: ServerArgs,
}

/// The built-in data set `--init` loads, and its size.
#[derive(Args, Clone, Default)]
pub struct DataSetArgs {
    /// Load a built-in data set into an empty data directory first, with its
    /// procedures: tpcb (pgbench's TPC-B, --scale): tpcb(aid, tid, bid, delta),
    /// tpcb_balance(aid); ycsb (--rows): ycsb_read(key), ycsb_update(key, value),
    /// ycsb_rmw(key), ycsb_multi_read(keys int8[]); tpcc (--warehouses):
    /// new_order(w_id, d_id, c_id, i_ids int8[], supply_w_ids int8[], quantities int8[]),
    /// payment(w_id, d_id, c_w_id, c_d_id, c_id, c_last, h_amount),
    /// order_status(w_id, d_id, c_id, c_last), delivery(w_id, o_carrier_id),
    /// stock_level(w_id, d_id, threshold); micro (--rows): micro_read(keys int8[]),
    /// micro_update(keys int8[]); bank (--accounts): transfer(id, src, dst, amount),
    /// bank_balance(account), bank_transfer(id), bank_total(). See docs/server.md. A
    /// directory that is not empty is refused. Without --init, the server recovers
    /// what the directory holds.
    #[arg(long, value_name = "WORKLOAD")]
    pub(crate) init: Option<String>,
    /// tpcb: branches (100,000 accounts and 10 tellers each), as pgbench -i --scale.
    /// Default 1.
    #[arg(long)]
    pub(crate) scale: Option<u32>,
    /// ycsb, micro: rows of the table. Default: ycsb 1,000,000; micro 240,000.
    #[arg(long)]
    pub(crate) rows: Option<u64>,
    /// tpcc: warehouses, at the spec's scale (100,000 items; 10 districts of 3,000
    /// customers each). They are the deployment's sites. Default 1.
    #[arg(long)]
    pub(crate) warehouses: Option<u32>,
    /// bank: accounts (default 1000), each opened with a balance of 1000.
    #[arg(long)]
    pub(crate) accounts: Option<u64>,
}

impl DataSetArgs {
    /// The flags as they were given, for a child process.
    pub(crate) fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(x) = value {
                v.push(flag.to_string());
                v.push(x);
            }
        };
        push("--init", self.init.clone());
        push("--scale", self.scale.map(|x| x.to_string()));
        push("--rows", self.rows.map(|x| x.to_string()));
        push("--warehouses", self.warehouses.map(|x| x.to_string()));
        push("--accounts", self.accounts.map(|x| x.to_string()));
        v
    }

    fn sized(&self) -> bool {
        self.scale.is_some()
            || self.rows.is_some()
            || self.warehouses.is_some()
            || self.accounts.is_some()
    }
}

/// How the server speaks to its clients: limits, password, threads, TLS, metrics.
#[derive(Args, Clone)]
pub struct ServerArgs {
    /// Connections served at once.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// The largest message a client may send, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_message_bytes: usize,
    /// Seconds a connection may stay idle before it is closed (0: no limit).
    #[arg(long, default_value_t = 3600)]
    idle_timeout_s: u64,
    /// Seconds a connection may stay idle inside a transaction block before
    /// it is closed (25P03) and its block rolled back, so that no lock is
    /// held forever (0: no limit).
    #[arg(
        long = "idle-in-transaction-timeout",
        value_name = "SECS",
        default_value_t = 60
    )]
    idle_in_transaction_timeout_s: u64,
    /// Seconds a connection may take to log in before it is closed (0: no
    /// limit), as PostgreSQL's authentication_timeout.
    #[arg(long, default_value_t = 60)]
    auth_timeout_s: u64,
    /// A file holding the password clients must give (SCRAM-SHA-256); the
    /// ISLANDS_PASSWORD environment variable is read when it is not given. Never
    /// on the command line.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// Do not pin executor threads to CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Server threads speaking the protocol, 1 to 256; connections are spread over
    /// them (each to the thread with the fewest). Default: one per four cores of the
    /// deployment (one on up to four cores).
    #[arg(long, value_name = "N")]
    server_threads: Option<usize>,
    /// CPUs to pin the server threads to, thread i to the i-th CPU of the list
    /// (e.g. `0-3,8`, wrapping around). Default: not pinned: the deployment's
    /// placement gives CPUs to its executors, none to the server.
    #[arg(long, value_name = "CPUS")]
    server_cpus: Option<String>,
    /// Serve Prometheus metrics (the figures of SHOW stats and SHOW threads) over
    /// HTTP at GET /metrics on this address; a port alone means 127.0.0.1:PORT.
    /// Scrapes need no password. Default: no metrics.
    #[arg(long, value_name = "ADDR", value_parser = metrics_addr)]
    metrics: Option<SocketAddr>,
    /// The server's TLS certificate chain (PEM, its own certificate first). With
    /// --tls-key, clients that ask for TLS (sslmode=require) get it; without, they
    /// are told the server has none. Both files are checked at start.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// `--metrics`: an address, or a port on loopback.
fn metrics_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("{s:?} is neither an address (127.0.0.1:9187) nor a port number"))
}

/// The file naming the data set a data directory holds.
const MARKER: &str = "served.toml";

/// What `served.toml` says.
fn write_marker(dir: &Path, b: &Builtin) -> Result<(), Error> {
    let (key, value) = b.size();
    let text = format!("workload = \"{}\"\n{key} = {value}\n", b.name());
    // A name of its own per process: islands started together may each write it.
    let tmp = dir.join(format!("{MARKER}.{}.tmp", std::process::id()));
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", tmp.display()));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, dir.join(MARKER)).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::Io(format!("{}: {e}", dir.display())))
}

fn read_marker(dir: &Path) -> Result<Option<Builtin>, Error> {
    let path = dir.join(MARKER);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Io(format!("{}: {e}", path.display()))),
    };
    let bad = |why: String| Error::Config(format!("{}: {why}", path.display()));
    let v: toml::Table = text.parse().map_err(|e| bad(format!("{e}")))?;
    let name = v
        .get("workload")
        .and_then(|w| w.as_str())
        .ok_or_else(|| bad(format!("no workload ({BUILTINS})")))?;
    // The one size `write_marker` wrote: `Builtin::size`'s key.
    let (key, value) = ["scale", "rows", "warehouses", "accounts"]
        .into_iter()
        .find_map(|k| v.get(k).map(|x| (k, x)))
        .ok_or_else(|| bad("no scale, rows, warehouses or accounts".into()))?;
    let value = value
        .as_integer()
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| bad(format!("{key} is not a count")))?;
    Builtin::with_size(name, key, value)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

/// The names `--init` takes.
const BUILTINS: &str = "tpcb, ycsb, tpcc, micro or bank";

/// The built-in data set `--init` names, with its size.
pub(crate) fn init_builtin(a: &DataSetArgs, name: &str) -> Result<Builtin, Error> {
    // Which size flag each takes; another one given is refused.
    let (b, takes) = match name {
        "tpcb" => (
            Builtin::Tpcb {
                scale: a.scale.unwrap_or(1),
            },
            "--scale",
        ),
        "ycsb" => (
            Builtin::Ycsb {
                rows: a.rows.unwrap_or(1_000_000),
            },
            "--rows",
        ),
        "tpcc" => (
            Builtin::Tpcc {
                warehouses: a.warehouses.unwrap_or(1),
            },
            "--warehouses",
        ),
        "micro" => (
            Builtin::Micro {
                rows: a.rows.unwrap_or(240_000),
            },
            "--rows",
        ),
        "bank" => (
            Builtin::Bank {
                accounts: a.accounts.unwrap_or(1000),
            },
            "--accounts",
        ),
        other => {
            return Err(Error::Config(format!(
                "--init {other}: the built-in data sets are {BUILTINS}"
            )))
        }
    };
    let given = [
        ("--scale", a.scale.is_some()),
        ("--rows", a.rows.is_some()),
        ("--warehouses", a.warehouses.is_some()),
        ("--accounts", a.accounts.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(f, g)| *g && *f != takes) {
        return Err(Error::Config(format!(
            "{flag} does not size --init {name}, which takes {takes}"
        )));
    }
    b.check()?;
    Ok(b)
}

pub(crate) fn is_empty_dir(dir: &Path) -> Result<bool, Error> {
    match std::fs::read_dir(dir) {
        Ok(mut it) => Ok(it.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::Io(format!("{}: {e}", dir.display()))),
    }
}

fn password(a: &ServerArgs) -> Result<Option<String>, Error> {
    let pw = match &a.password_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| Error::Config(format!("--password-file {}: {e}", p.display())))?,
        ),
        None => std::env::var("ISLANDS_PASSWORD").ok(),
    };
    // A file's final newline is not part of the password.
    Ok(pw.map(|p| p.trim_end_matches(['\n', '\r']).to_string()))
}

/// Refuses an address the server could not listen on (in use, not this
/// host's) by binding it for a moment; port 0 binds any free port.
fn can_bind(addr: SocketAddr, what: &str) -> Result<(), Error> {
    std::net::TcpListener::bind(addr)
        .map(drop)
        .map_err(|e| Error::Config(format!("cannot {what} {addr}: {e}")))
}

/// The server's options from its flags, with everything the server would
/// refuse refused now (a non-loopback address without a password, an
/// address in use), before any directory is touched.
fn server_options(a: &ServerArgs, listen: SocketAddr) -> Result<ServerOptions, Error> {
    let idle = (a.idle_timeout_s > 0).then(|| Duration::from_secs(a.idle_timeout_s));
    let sopts = ServerOptions {
        listen,
        max_connections: a.max_connections,
        max_message_bytes: a.max_message_bytes,
        idle_timeout: idle,
        idle_in_transaction_timeout: (a.idle_in_transaction_timeout_s > 0)
            .then(|| Duration::from_secs(a.idle_in_transaction_timeout_s)),
        auth_timeout: (a.auth_timeout_s > 0).then(|| Duration::from_secs(a.auth_timeout_s)),
        password: password(a)?,
        threads: a.server_threads,
        cpus: a
            .server_cpus
            .as_deref()
            .map(|l| {
                islands::topology::CpuSet::parse(l)
                    .map_err(|e| Error::Config(format!("--server-cpus {l}: {e}")))
            })
            .transpose()?,
        metrics: a.metrics,
        tls_cert: a.tls_cert.clone(),
        tls_key: a.tls_key.clone(),
        ..ServerOptions::default()
    };
    if !sopts.listen.ip().is_loopback() && sopts.password.is_none() {
        return Err(Error::Config(format!(
            "--listen {}: a non-loopback address requires a password (--password-file FILE or \
             the ISLANDS_PASSWORD environment variable)",
            sopts.listen
        )));
    }
    sopts.check()?;
    can_bind(sopts.listen, "listen on")?;
    if let Some(m) = sopts.metrics {
        can_bind(m, "serve metrics on")?;
    }
    Ok(sopts)
}

/// Catches SIGINT and SIGTERM from here on: each sends on the channel.
fn catch_signals() -> Result<Receiver<()>, Error> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| Error::Config(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    Ok(rx)
}

/// Checks that the deployment can be planned on this machine for `builtin`
/// (a refused plan writes nothing), then writes `served.toml` into `dir`.
pub(crate) fn record_data_set(
    spec: &DeploySpec,
    dir: &Path,
    builtin: &Builtin,
    described: Option<&str>,
) -> Result<(), Error> {
    let topology = match described {
        Some(d) => islands::topology::Topology::described(d),
        None => islands::topology::Topology::discover(),
    }
    .map_err(|e| Error::Config(e.to_string()))?;
    islands::deploy::plan(&topology, spec).map_err(|e| builtin.plan_error(e))?;
    std::fs::create_dir_all(dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    write_marker(dir, builtin)
}

/// Serves `db` until SIGINT/SIGTERM (`signals`) or until the deployment
/// fails (a log that died), then shuts it down. Prints
/// `{who}: ready on ADDR ({what}[; metrics on URL])` on stdout once it
/// serves: scripts and `islands up` wait for that line.
fn serve_until_stopped(
    db: Deployment,
    sopts: ServerOptions,
    who: &str,
    what: String,
    signals: Receiver<()>,
) -> Result<(), Error> {
    let tls = sopts.tls_enabled();
    let server = serve(db, sopts)?;
    // Said before the ready line, which scripts wait for.
    if !server.local_addr().ip().is_loopback() {
        if tls {
            println!("{who}: TLS on: clients that ask for it (sslmode=require) get it");
        } else {
            println!("{who}: traffic is not encrypted: give --tls-cert and --tls-key");
        }
    }
    let metrics = server
        .metrics_addr()
        .map_or_else(String::new, |m| format!("; metrics on http://{m}/metrics"));
    println!("{who}: ready on {} ({what}{metrics})", server.local_addr());
    let _ = std::io::stdout().flush();
    // Until a signal, or until the deployment fails (a log that died).
    let failure = loop {
        match signals.recv_timeout(FAILURE_POLL) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break None,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(cause) = server.failure() {
                    break Some(cause);
                }
            }
        }
    };
    if let Some(cause) = failure {
        eprintln!("{who}: stopping: the deployment failed and serves no more calls");
        // The log's own error, naming the island's log and what failed.
        return Err(server.shutdown().err().unwrap_or(Error::LogFailed(cause)));
    }
    eprintln!("{who}: stopping (finishing calls in flight, then a checkpoint)");
    server.shutdown()?;
    eprintln!("{who}: stopped");
    Ok(())
}

/// What the islands recovered, or that they were loaded.
fn how_opened(db: &Deployment) -> String {
    let recovered: u64 = db.recovered().iter().map(|r| r.checkpoint_rows).sum();
    let logged: u64 = db.recovered().iter().map(|r| r.log_records).sum();
    if recovered + logged > 0 {
        format!("recovered {recovered} checkpointed rows and {logged} log records")
    } else {
        "loaded".to_string()
    }
}

pub fn run(a: &ServeArgs) -> Result<(), Error> {
    let (file, named) = match &a.config {
        Some(p) => {
            let (s, n) = DeploySpec::from_toml_file_named(p)?;
            (Some(s), n)
        }
        None => (None, Default::default()),
    };
    let islands = match (&a.islands, &file) {
        (Some(l), _) => Islands::parse(l)?,
        (None, Some(f)) => f.islands.clone(),
        (None, None) => Islands::Count(1),
    };
    let mut spec = DeploySpec::new(islands);
    if let Some(f) = &file {
        spec.placement = f.placement;
        spec.sites = f.sites;
        spec.workers_per_island = f.workers_per_island;
        spec.checkpoint_every_mb = f.checkpoint_every_mb;
        spec.checkpoint_every = f.checkpoint_every;
        if named.durability {
            spec.durability = f.durability.clone();
        }
        if named.log_dir {
            spec.log_dir = f.log_dir.clone();
        }
        if f.cc.as_deref().is_some_and(|cc| cc != "no_wait") {
            return Err(Error::Config(format!(
                "{}: cc {}: the server's executors run no_wait (leave cc out)",
                a.config.as_ref().expect("a file").display(),
                f.cc.as_deref().unwrap_or_default()
            )));
        }
    }
    if let Some(p) = &a.placement {
        spec.placement = p.parse::<Placement>()?;
    }
    if let Some(w) = a.workers_per_island {
        if w == 0 || w > 1024 {
            return Err(Error::Config(format!(
                "--workers-per-island {w} is outside 1..=1024"
            )));
        }
        spec.workers_per_island = Some(w);
    }
    if let Some(d) = &a.durability {
        spec.durability = checked_durability(d)?;
    }
    if let Some(d) = &a.data_dir {
        spec.log_dir = d.clone();
    }
    let dir = spec.log_dir.clone();

    let builtin = match &a.data.init {
        Some(name) => {
            let b = init_builtin(&a.data, name)?;
            if !is_empty_dir(&dir)? {
                return Err(Error::Config(format!(
                    "--init {name}: the data directory {} is not empty; --init loads a new \
                     database into an empty directory only (leave --init out to serve what it \
                     holds, or give another --data-dir)",
                    dir.display()
                )));
            }
            b
        }
        None => recorded_builtin(&a.data, &dir, "islands serve --init")?,
    };
    // TPC-C's warehouses and TPC-B's branches are their sites.
    builtin.place(&mut spec)?;
    let sopts = server_options(&a.server, a.listen)?;
    let log_device = crate::bench_cmd::test_log_device()?;
    // Signals are caught from here on: a stop during the load waits for it.
    let signals = catch_signals()?;
    if a.data.init.is_some() {
        // Written once everything else is known to be right: a start refused
        // for its options leaves the directory empty.
        record_data_set(&spec, &dir, &builtin, None)?;
    }

    let mut opts = Options::new(spec.clone());
    opts.pin = !a.server.no_pin;
    // A directory made before the server recorded its data set says `api`
    // and is served as it is (`islands check` cannot tell what it holds).
    opts.workload = match islands::wal::read_control(&dir.join("island-0"))? {
        Some(c) if c.workload == "api" => c.workload,
        _ => builtin.workload(),
    };
    if let Some(dev) = log_device {
        opts.log_device = Some(Arc::new(dev));
    }
    let t = std::time::Instant::now();
    let db = Deployment::open(opts, builtin.catalog(), |load| builtin.load(load))?;
    let what = format!(
        "{builtin}; {}; durability {}; data {}; {} in {:.1} s",
        db.plan().summary(),
        spec.durability,
        dir.display(),
        how_opened(&db),
        t.elapsed().as_secs_f64()
    );
    serve_until_stopped(db, sopts, "islands serve", what, signals)
}

/// `--durability`, checked.
fn checked_durability(d: &str) -> Result<String, Error> {
    d.parse::<islands::wal::Durability>()
        .map_err(|e| Error::Config(format!("--durability: {e}")))?;
    Ok(d.to_string())
}

/// The data set a directory's `served.toml` names, for a start without
/// `--init` (which must not size a data set). `made_by` names the command
/// that writes the file.
pub(crate) fn recorded_builtin(
    a: &DataSetArgs,
    dir: &Path,
    made_by: &str,
) -> Result<Builtin, Error> {
    if a.sized() {
        return Err(Error::Config(
            "--scale, --rows, --warehouses and --accounts size a new data set: they go \
             with --init"
                .into(),
        ));
    }
    match read_marker(dir)? {
        Some(b) => Ok(b),
        None if is_empty_dir(dir)? => Err(Error::Config(format!(
            "the data directory {} holds no database: start with --init tpcb --scale N, \
             --init ycsb --rows N, --init tpcc --warehouses N, --init micro --rows N \
             or --init bank --accounts N to load one",
            dir.display()
        ))),
        None => Err(Error::Config(format!(
            "the data directory {} has no {MARKER}: it was not made by `{made_by}`",
            dir.display()
        ))),
    }
}

/// `islands island`: one island of a deployment run as processes.
#[derive(Args, Clone)]
pub struct IslandArgs {
    /// The island this process serves: 0 to the deployment's island count - 1.
    #[arg(long)]
    pub(crate) id: u16,
    /// The deployment file (as `islands plan --config` reads it). It must run
    /// islands as processes: `transport`, `id` and `secret_file` (or `secret_env`) in
    /// [deployment]. Every island's process reads the same file.
    #[arg(long, value_name = "FILE.toml")]
    pub(crate) config: PathBuf,
    /// The deployment's data directory: served.toml (the data set, once for the
    /// deployment) and island-K/ (this island's log and checkpoints). Default:
    /// log_dir in --config, else ./islands-data.
    #[arg(long, visible_alias = "data-dir", value_name = "DIR")]
    pub(crate) data: Option<PathBuf>,
    /// The base address: island K listens on its port + K, unless the deployment
    /// file gives the island its own (`listen = "ADDR"` in its [[island]] entry).
    /// Any address but a loopback one requires a password.
    #[arg(long, default_value = islands::server::DEFAULT_LISTEN)]
    pub(crate) listen: SocketAddr,
    /// Durability: sync, async or off; overrides the file's (every island should
    /// run the same).
    #[arg(long)]
    pub(crate) durability: Option<String>,
    /// Plan the deployment for a described machine instead of this one (`1x4`: one
    /// socket of 4 cores; see `islands plan --topology`), as on a machine with fewer
    /// cores than the deployment has islands (tests); its executors are not pinned.
    #[arg(long, value_name = "SPEC")]
    pub(crate) topology: Option<String>,
    #[command(flatten)]
    pub(crate) data_set: DataSetArgs,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// The address island `k` serves clients on: its `[[island]] listen` in the
/// file, else the base address's port + `k`.
pub(crate) fn island_listen(
    named: &islands::deploy::Named,
    base: SocketAddr,
    k: u16,
) -> Result<SocketAddr, Error> {
    if let Some(Some(a)) = named.listen.get(usize::from(k)) {
        return Ok(*a);
    }
    let port = base.port().checked_add(k).ok_or_else(|| {
        Error::Config(format!(
            "--listen {base}: island {k}'s port {} + {k} is past 65535",
            base.port()
        ))
    })?;
    Ok(SocketAddr::new(base.ip(), port))
}

/// The deployment file of islands as processes, with `--data` and
/// `--durability` applied.
pub(crate) fn process_spec(
    config: &Path,
    data: Option<&PathBuf>,
    durability: Option<&String>,
) -> Result<(DeploySpec, islands::deploy::Named), Error> {
    let (mut spec, named) = DeploySpec::from_toml_file_named(config)?;
    if spec.processes.is_none() {
        return Err(Error::Config(format!(
            "{}: the deployment does not run its islands as processes: give transport = \
             \"uds\" (or \"shm\"), id and secret_file or secret_env in [deployment]",
            config.display()
        )));
    }
    if spec.cc.as_deref().is_some_and(|cc| cc != "no_wait") {
        return Err(Error::Config(format!(
            "{}: cc {}: the server's executors run no_wait (leave cc out)",
            config.display(),
            spec.cc.as_deref().unwrap_or_default()
        )));
    }
    if let Some(d) = durability {
        spec.durability = checked_durability(d)?;
    }
    if let Some(d) = data {
        spec.log_dir = d.clone();
    }
    Ok((spec, named))
}

/// Serves island `--id` of the deployment in `--config` until SIGINT or
/// SIGTERM.
pub fn run_island(a: &IslandArgs) -> Result<(), Error> {
    let (mut spec, named) = process_spec(&a.config, a.data.as_ref(), a.durability.as_ref())?;
    let k = a.id;
    let dir = spec.log_dir.clone();
    let own = islands::api::open::island_dir(&dir, usize::from(k));
    let builtin = match &a.data_set.init {
        Some(name) => {
            let b = init_builtin(&a.data_set, name)?;
            if !is_empty_dir(&own)? {
                return Err(Error::Config(format!(
                    "--init {name}: island {k}'s directory {} is not empty; --init loads a new \
                     island into an empty directory only (leave --init out to recover it)",
                    own.display()
                )));
            }
            if let Some(recorded) = read_marker(&dir)? {
                if recorded != b {
                    return Err(Error::Config(format!(
                        "--init {b}: the data directory {} holds {recorded} (its {MARKER}); \
                         every island of a deployment loads the same data set",
                        dir.display()
                    )));
                }
            }
            b
        }
        None => recorded_builtin(
            &a.data_set,
            &dir,
            "islands up --init` or `islands island --init",
        )?,
    };
    builtin.place(&mut spec)?;
    let listen = island_listen(&named, a.listen, k)?;
    let sopts = server_options(&a.server, listen)?;
    let log_device = crate::bench_cmd::test_log_device()?;
    let signals = catch_signals()?;
    if a.data_set.init.is_some() && read_marker(&dir)?.is_none() {
        record_data_set(&spec, &dir, &builtin, a.topology.as_deref())?;
    }
    let mut opts = Options::new(spec.clone());
    opts.island = Some(k);
    opts.expect = if a.data_set.init.is_some() {
        Expect::Fresh
    } else {
        Expect::Recover
    };
    opts.pin = !a.server.no_pin;
    if let Some(t) = &a.topology {
        let t = islands::topology::Topology::described(t)
            .map_err(|e| Error::Config(format!("--topology {t}: {e}")))?;
        opts.topology = Some(t);
        opts.pin = false;
    }
    opts.workload = builtin.workload();
    if let Some(dev) = log_device {
        opts.log_device = Some(Arc::new(dev));
    }
    let t = std::time::Instant::now();
    let db = Deployment::open(opts, builtin.catalog(), |load| builtin.load(load))?;
    let what = format!(
        "{builtin}; island {k} of {}; durability {}; data {}; {} in {:.1} s",
        db.plan().islands().len(),
        spec.durability,
        own.display(),
        how_opened(&db),
        t.elapsed().as_secs_f64()
    );
    serve_until_stopped(db, sopts, &format!("islands island {k}"), what, signals)
}

/// How often the command looks whether its deployment failed.
const FAILURE_POLL: Duration = Duration::from_millis(100);
