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
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
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
    init: Option<String>,
    /// tpcb: branches (100,000 accounts and 10 tellers each), as pgbench -i --scale.
    /// Default 1.
    #[arg(long)]
    scale: Option<u32>,
    /// ycsb, micro: rows of the table. Default: ycsb 1,000,000; micro 240,000.
    #[arg(long)]
    rows: Option<u64>,
    /// tpcc: warehouses, at the spec's scale (100,000 items; 10 districts of 3,000
    /// customers each). They are the deployment's sites. Default 1.
    #[arg(long)]
    warehouses: Option<u32>,
    /// bank: accounts (default 1000), each opened with a balance of 1000.
    #[arg(long)]
    accounts: Option<u64>,
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
    let tmp = dir.join(format!("{MARKER}.tmp"));
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
fn init_builtin(a: &ServeArgs, name: &str) -> Result<Builtin, Error> {
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

fn is_empty_dir(dir: &Path) -> Result<bool, Error> {
    match std::fs::read_dir(dir) {
        Ok(mut it) => Ok(it.next().is_none()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(Error::Io(format!("{}: {e}", dir.display()))),
    }
}

fn password(a: &ServeArgs) -> Result<Option<String>, Error> {
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
        d.parse::<islands::wal::Durability>()
            .map_err(|e| Error::Config(format!("--durability: {e}")))?;
        spec.durability = d.clone();
    }
    if let Some(d) = &a.data_dir {
        spec.log_dir = d.clone();
    }
    let dir = spec.log_dir.clone();

    let builtin = match &a.init {
        Some(name) => {
            let b = init_builtin(a, name)?;
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
        None => {
            if a.scale.is_some()
                || a.rows.is_some()
                || a.warehouses.is_some()
                || a.accounts.is_some()
            {
                return Err(Error::Config(
                    "--scale, --rows, --warehouses and --accounts size a new data set: they go \
                     with --init"
                        .into(),
                ));
            }
            match read_marker(&dir)? {
                Some(b) => b,
                None if is_empty_dir(&dir)? => {
                    return Err(Error::Config(format!(
                    "the data directory {} holds no database: start with --init tpcb --scale N, \
                         --init ycsb --rows N, --init tpcc --warehouses N, --init micro --rows N \
                         or --init bank --accounts N to load one",
                    dir.display()
                )))
                }
                None => {
                    return Err(Error::Config(format!(
                        "the data directory {} has no {MARKER}: it was not made by `islands serve \
                         --init`",
                        dir.display()
                    )))
                }
            }
        }
    };
    // TPC-C's warehouses and TPC-B's branches are their sites.
    builtin.place(&mut spec)?;
    let idle = (a.idle_timeout_s > 0).then(|| Duration::from_secs(a.idle_timeout_s));
    let sopts = ServerOptions {
        listen: a.listen,
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
    // Everything the server would refuse, refused before the directory is
    // touched: a start refused for its options writes nothing.
    sopts.check()?;
    can_bind(sopts.listen, "listen on")?;
    if let Some(m) = sopts.metrics {
        can_bind(m, "serve metrics on")?;
    }
    let log_device = crate::bench_cmd::test_log_device()?;
    // Signals are caught from here on: a stop during the load waits for it.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| Error::Config(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    if a.init.is_some() {
        // Written once everything else is known to be right: a start refused
        // for its options leaves the directory empty.
        let topology =
            islands::topology::Topology::discover().map_err(|e| Error::Config(e.to_string()))?;
        islands::deploy::plan(&topology, &spec).map_err(|e| builtin.plan_error(e))?;
        std::fs::create_dir_all(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
        write_marker(&dir, &builtin)?;
    }

    let mut opts = Options::new(spec.clone());
    opts.pin = !a.no_pin;
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
    let recovered: u64 = db.recovered().iter().map(|r| r.checkpoint_rows).sum();
    let logged: u64 = db.recovered().iter().map(|r| r.log_records).sum();
    let summary = db.plan().summary();
    let tls = sopts.tls_enabled();
    let server = serve(db, sopts)?;
    let how = if recovered + logged > 0 {
        format!("recovered {recovered} checkpointed rows and {logged} log records")
    } else {
        "loaded".to_string()
    };
    // Said before the ready line, which scripts wait for.
    if !server.local_addr().ip().is_loopback() {
        if tls {
            println!("islands serve: TLS on: clients that ask for it (sslmode=require) get it");
        } else {
            println!("islands serve: traffic is not encrypted: give --tls-cert and --tls-key");
        }
    }
    let metrics = server
        .metrics_addr()
        .map_or_else(String::new, |m| format!("; metrics on http://{m}/metrics"));
    println!(
        "islands serve: ready on {} ({builtin}; {summary}; durability {}; data {}; {how} in {:.1} s{metrics})",
        server.local_addr(),
        spec.durability,
        dir.display(),
        t.elapsed().as_secs_f64()
    );
    let _ = std::io::stdout().flush();
    // Until a signal, or until the deployment fails (a log that died).
    let failure = loop {
        match rx.recv_timeout(FAILURE_POLL) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break None,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(cause) = server.failure() {
                    break Some(cause);
                }
            }
        }
    };
    if let Some(cause) = failure {
        eprintln!("islands serve: stopping: the deployment failed and serves no more calls");
        // The log's own error, naming the island's log and what failed.
        return Err(server.shutdown().err().unwrap_or(Error::LogFailed(cause)));
    }
    eprintln!("islands serve: stopping (finishing calls in flight, then a checkpoint)");
    server.shutdown()?;
    eprintln!("islands serve: stopped");
    Ok(())
}

/// How often the command looks whether its deployment failed.
const FAILURE_POLL: Duration = Duration::from_millis(100);
