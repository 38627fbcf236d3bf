//! `islands bench --connect ADDR ycsb|tpcb|tpcc|micro`: drive a running `islands
//! serve` over the network with PostgreSQL connections (tokio-postgres,
//! prepared statements), each keeping `--pipeline` calls in flight, and
//! report throughput (per procedure too), latency percentiles, the
//! procedures' own rollbacks (`P0001`: TPC-C's 1% of NewOrders) and the
//! other errors by SQLSTATE (`40001`: out of retries on conflicts).
//!
//! TPC-C's calls come from the benchmark's own generator
//! ([`islands_workloads::tpcc::Tpcc`]): connection `i` is a terminal of
//! home warehouse `i mod W + 1`, running the mix asked for. The
//! microbenchmark's come from its own generator too
//! ([`islands_workloads::micro::Micro`]): connection `i`'s home site is
//! `i mod S`, with S the server's sites (what `SHOW islands` lists, unless
//! `--sites` says), and a call reads or updates its keys with
//! `micro_read` or `micro_update`.
//!
//! All connections run on one thread (a single-threaded tokio runtime), so
//! the generator takes one core of the machine; its own CPU time is
//! reported beside the throughput.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use islands::proc::rng::FastRng;
use islands::proc::Workload;
use islands::Error;
use islands_bench::fmt::thousands;
use islands_workloads::micro::{Micro, MicroConfig, MicroReq};
use islands_workloads::tpcc::{self, Mix, Tpcc, TpccConfig, TpccReq};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// What each call is.
#[derive(Clone, Copy, Debug)]
pub enum NetWorkload {
    /// Silo's YCSB: `read_pct`% `ycsb_read`, the rest `ycsb_rmw`, uniform
    /// keys over `rows`.
    Ycsb { rows: u64, read_pct: u32 },
    /// pgbench's TPC-B script (`tpcb`), or its `-S` select (`tpcb_balance`).
    Tpcb { scale: u32, select_only: bool },
    /// TPC-C's five transactions in `mix`, against `islands serve --init
    /// tpcc --warehouses W`.
    Tpcc {
        warehouses: u32,
        mix: Mix,
        local_only: bool,
    },
    /// The paper's microbenchmark against `islands serve --init micro
    /// --rows ROWS`: `n` keys per call, of the connection's home site (of
    /// `sites`; `None`: the server's), or with `multisite_pct`% one of it
    /// and the rest from the whole table; `micro_update` or `micro_read`.
    Micro {
        rows: u64,
        sites: Option<u64>,
        n: usize,
        update: bool,
        multisite_pct: u32,
        theta: f64,
    },
}

/// How to drive it.
pub struct NetRun {
    pub addr: SocketAddr,
    pub connections: usize,
    pub pipeline: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
}

/// One procedure's results over the measured phase.
#[derive(Default)]
struct Tally {
    ok: u64,
    /// Calls the procedure rolled back (`P0001`).
    rollbacks: u64,
    /// Other errors, by SQLSTATE.
    errors: BTreeMap<String, u64>,
    lat_ns: Vec<u64>,
}

impl Tally {
    fn add(&mut self, t: Tally) {
        self.ok += t.ok;
        self.rollbacks += t.rollbacks;
        self.lat_ns.extend(t.lat_ns);
        for (k, v) in t.errors {
            *self.errors.entry(k).or_default() += v;
        }
    }
}

/// The procedure of each statement of [`sql`], for the report.
fn names(w: NetWorkload) -> &'static [&'static str] {
    match w {
        NetWorkload::Ycsb { .. } => &["ycsb_read", "ycsb_rmw"],
        NetWorkload::Tpcb { .. } => &["tpcb", "tpcb_balance"],
        NetWorkload::Tpcc { .. } => &tpcc::TYPE_NAMES,
        NetWorkload::Micro { .. } => &["local", "multisite"],
    }
}

/// The statements a connection prepares; a call runs one of them.
fn sql(w: NetWorkload) -> &'static [&'static str] {
    match w {
        NetWorkload::Ycsb { .. } => &["CALL ycsb_read($1)", "CALL ycsb_rmw($1)"],
        NetWorkload::Tpcb { .. } => &["CALL tpcb($1, $2, $3, $4)", "CALL tpcb_balance($1)"],
        // In the order of tpcc::TYPE_NAMES.
        NetWorkload::Tpcc { .. } => &[
            "CALL new_order($1, $2, $3, $4, $5, $6)",
            "CALL payment($1, $2, $3, $4, $5, $6, $7)",
            "CALL order_status($1, $2, $3, $4)",
            "CALL delivery($1, $2)",
            "CALL stock_level($1, $2, $3)",
        ],
        // Local and multisite calls (islands_workloads::micro::{LOCAL, MULTISITE}).
        NetWorkload::Micro { update: true, .. } => {
            &["CALL micro_update($1)", "CALL micro_update($1)"]
        }
        NetWorkload::Micro { update: false, .. } => &["CALL micro_read($1)", "CALL micro_read($1)"],
    }
}

/// A call's arguments.
type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// What makes the calls: random choices, or TPC-C's or the
/// microbenchmark's generator.
enum Gen {
    Plain(NetWorkload),
    Tpcc(Tpcc),
    Micro(Micro),
}

/// A connection's requests, which a generator fills.
#[derive(Default)]
struct Reqs {
    tpcc: TpccReq,
    micro: MicroReq,
}

impl Gen {
    /// The generator of `w`, whose sites, if it has any, are known.
    fn new(w: NetWorkload, connections: usize) -> Result<Gen, Error> {
        match w {
            NetWorkload::Tpcc {
                warehouses,
                mix,
                local_only,
            } => {
                let cfg = TpccConfig {
                    warehouses,
                    mix,
                    local_only,
                    ..TpccConfig::default()
                };
                let homes = Tpcc::default_homes(connections, warehouses);
                Ok(Gen::Tpcc(Tpcc::new(cfg, homes)?))
            }
            NetWorkload::Micro {
                rows,
                sites,
                n,
                update,
                multisite_pct,
                theta,
            } => {
                let sites = sites.expect("the server's sites are known");
                let cfg = MicroConfig {
                    rows,
                    sites,
                    n,
                    update,
                    multisite_pct,
                    theta,
                    ..MicroConfig::default()
                };
                let homes = (0..connections as u64).map(|c| c % sites.max(1)).collect();
                Ok(Gen::Micro(Micro::new(cfg, homes)?))
            }
            _ => Ok(Gen::Plain(w)),
        }
    }

    /// The statement (an index into [`sql`]) and arguments of connection
    /// `conn`'s next call.
    fn next(&self, conn: usize, rng: &mut FastRng, req: &mut Reqs) -> (usize, Params) {
        let ints = |v: &[i64]| -> Params {
            v.iter()
                .map(|&x| Box::new(x) as Box<dyn ToSql + Sync + Send>)
                .collect()
        };
        match self {
            Gen::Plain(NetWorkload::Ycsb { rows, read_pct }) => {
                let key = rng.below(*rows) as i64;
                (usize::from(!rng.percent(*read_pct)), ints(&[key]))
            }
            Gen::Plain(NetWorkload::Tpcb { scale, select_only }) => {
                let s = *scale as u64;
                let aid = 1 + rng.below(100_000 * s) as i64;
                if *select_only {
                    return (1, ints(&[aid]));
                }
                let bid = 1 + rng.below(s) as i64;
                let tid = 1 + rng.below(10 * s) as i64;
                let delta = rng.below(10_001) as i64 - 5000;
                (0, ints(&[aid, tid, bid, delta]))
            }
            Gen::Plain(NetWorkload::Tpcc { .. } | NetWorkload::Micro { .. }) => {
                unreachable!("TPC-C and the microbenchmark have their generators")
            }
            Gen::Tpcc(t) => {
                let ty = t.next(conn, rng, &mut req.tpcc);
                (ty, tpcc_params(&req.tpcc))
            }
            Gen::Micro(m) => {
                let ty = m.next(conn, rng, &mut req.micro);
                let keys: Vec<i64> = req.micro.keys.iter().map(|&k| k as i64).collect();
                (ty, vec![Box::new(keys)])
            }
        }
    }
}

/// The arguments of the served procedure of TPC-C request `r` (see
/// `islands_workloads::tpcc::served`).
fn tpcc_params(r: &TpccReq) -> Params {
    fn b<T: ToSql + Sync + Send + 'static>(v: T) -> Box<dyn ToSql + Sync + Send> {
        Box::new(v)
    }
    let int = |v: u32| b(i64::from(v));
    // A customer: by id, or (c_id 0) by last name.
    let (c_id, c_last) = if r.by_last {
        (0, String::from_utf8_lossy(r.c_last()).into_owned())
    } else {
        (r.c_id, String::new())
    };
    match r.ty {
        tpcc::NEW_ORDER => {
            let col = |f: fn(&tpcc::Line) -> u32| -> Vec<i64> {
                r.lines().iter().map(|l| i64::from(f(l))).collect()
            };
            vec![
                int(r.w),
                int(r.d),
                int(r.c_id),
                b(col(|l| l.i_id)),
                b(col(|l| l.supply_w)),
                b(col(|l| l.quantity)),
            ]
        }
        tpcc::PAYMENT => vec![
            int(r.w),
            int(r.d),
            int(r.c_w),
            int(r.c_d),
            int(c_id),
            b(c_last),
            b(r.amount),
        ],
        tpcc::ORDER_STATUS => vec![int(r.w), int(r.d), int(c_id), b(c_last)],
        tpcc::DELIVERY => vec![int(r.w), int(r.carrier)],
        _ => vec![int(r.w), int(r.d), b(i64::from(r.threshold))],
    }
}

/// A connection to the server (its task spawned on the runtime).
async fn open(run: &NetRun) -> Result<Client, String> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(run.addr.ip().to_string())
        .port(run.addr.port())
        .user("islands")
        .dbname("islands")
        .connect_timeout(Duration::from_secs(10));
    if let Ok(pw) = std::env::var("ISLANDS_PASSWORD") {
        cfg.password(pw);
    }
    let (client, conn) = cfg
        .connect(NoTls)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", run.addr))?;
    tokio::spawn(conn);
    Ok(client)
}

/// The sites of the server's deployment: the largest end of the ranges
/// `SHOW islands` gives (`0..12`).
async fn server_sites(run: &NetRun) -> Result<u64, String> {
    let client = open(run).await?;
    let msgs = client
        .simple_query("SHOW islands")
        .await
        .map_err(|e| format!("SHOW islands: {e}"))?;
    let mut sites = 0;
    for m in &msgs {
        if let SimpleQueryMessage::Row(r) = m {
            let range = r.get("sites").unwrap_or_default();
            let end = range
                .split_once("..")
                .and_then(|(_, end)| end.parse::<u64>().ok())
                .ok_or_else(|| format!("SHOW islands gives sites {range:?}, not a range a..b"))?;
            sites = sites.max(end);
        }
    }
    if sites == 0 {
        return Err("SHOW islands lists no sites: give --sites".into());
    }
    Ok(sites)
}

async fn connection(
    run: Arc<NetRun>,
    w: NetWorkload,
    gen: Arc<Gen>,
    id: usize,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Tally>, String> {
    let client = open(&run).await?;
    let mut st = Vec::new();
    for q in sql(w) {
        st.push(client.prepare(q).await.map_err(|e| format!("{q}: {e}"))?);
    }
    let mut rng = FastRng::new(run.seed.wrapping_mul(1_000_003) + id as u64);
    let mut req = Reqs::default();
    let mut tally: Vec<Tally> = st.iter().map(|_| Tally::default()).collect();
    let mut inflight = FuturesUnordered::new();
    let mut issue = |rng: &mut FastRng| {
        let (s, args) = gen.next(id, rng, &mut req);
        let st = st[s].clone();
        let client = &client;
        async move {
            let t = Instant::now();
            let params: Vec<&(dyn ToSql + Sync)> = args
                .iter()
                .map(|v| v.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let r = client.query(&st, &params).await;
            (s, t, r)
        }
    };
    for _ in 0..run.pipeline {
        inflight.push(issue(&mut rng));
    }
    while let Some((s, t, r)) = inflight.next().await {
        let ns = t.elapsed().as_nanos() as u64;
        if measuring.load(Ordering::Relaxed) {
            let tally = &mut tally[s];
            match r {
                Ok(_) => {
                    tally.ok += 1;
                    tally.lat_ns.push(ns);
                }
                Err(e) => match e.as_db_error().map(|d| d.code().code()) {
                    None => return Err(format!("connection {id}: {e}")),
                    Some("P0001") => tally.rollbacks += 1,
                    Some(code) => *tally.errors.entry(code.to_string()).or_default() += 1,
                },
            }
        } else if let Err(e) = r {
            if e.as_db_error().is_none() {
                return Err(format!("connection {id}: {e}"));
            }
        }
        if !stop.load(Ordering::Relaxed) {
            inflight.push(issue(&mut rng));
        }
    }
    Ok(tally)
}

fn cpu_seconds() -> f64 {
    islands::cpu::CpuTime::process_now().as_secs_f64()
}

pub fn run(run: NetRun, mut w: NetWorkload) -> Result<(), Error> {
    if run.connections == 0 || run.connections > 10_000 || run.pipeline == 0 || run.pipeline > 1024
    {
        return Err(Error::Config(
            "--connections must be in 1..=10000 and --pipeline in 1..=1024".into(),
        ));
    }
    if run.duration.is_zero() {
        return Err(Error::Config(
            "--duration must be more than 0 seconds".into(),
        ));
    }
    match w {
        NetWorkload::Ycsb { rows: 0, .. } => {
            return Err(Error::Config("--rows must be at least 1".into()))
        }
        NetWorkload::Tpcb { scale: 0, .. } => {
            return Err(Error::Config("--scale must be at least 1".into()))
        }
        _ => {}
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Config(format!("cannot start a runtime: {e}")))?;
    if let NetWorkload::Micro {
        sites: s @ None, ..
    } = &mut w
    {
        *s = Some(rt.block_on(server_sites(&run)).map_err(Error::Config)?);
    }
    let gen = Arc::new(Gen::new(w, run.connections)?);
    let run = Arc::new(run);
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (tallies, secs, cpu) = rt.block_on(async {
        let tasks: Vec<_> = (0..run.connections)
            .map(|id| {
                tokio::spawn(connection(
                    Arc::clone(&run),
                    w,
                    Arc::clone(&gen),
                    id,
                    Arc::clone(&measuring),
                    Arc::clone(&stop),
                ))
            })
            .collect();
        tokio::time::sleep(run.warmup).await;
        let (t0, c0) = (Instant::now(), cpu_seconds());
        measuring.store(true, Ordering::Relaxed);
        tokio::time::sleep(run.duration).await;
        measuring.store(false, Ordering::Relaxed);
        let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
        stop.store(true, Ordering::Relaxed);
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.map_err(|e| e.to_string()).and_then(|r| r));
        }
        (out, secs, cpu)
    });
    // Per procedure, over every connection.
    let mut per: Vec<Tally> = sql(w).iter().map(|_| Tally::default()).collect();
    for t in tallies {
        for (p, t) in per.iter_mut().zip(t.map_err(Error::Config)?) {
            p.add(t);
        }
    }
    let mut total = Tally::default();
    for p in &per {
        total.ok += p.ok;
        total.rollbacks += p.rollbacks;
        total.lat_ns.extend(&p.lat_ns);
        for (k, v) in &p.errors {
            *total.errors.entry(k.clone()).or_default() += v;
        }
    }
    total.lat_ns.sort_unstable();
    let pct = |q: f64| {
        total
            .lat_ns
            .get(((total.lat_ns.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |&ns| ns as f64 / 1000.0)
    };
    let name = match w {
        NetWorkload::Ycsb { rows, read_pct } => {
            format!("ycsb ({rows} rows, {read_pct}% ycsb_read, the rest ycsb_rmw)")
        }
        NetWorkload::Tpcb {
            scale,
            select_only: false,
        } => format!("tpcb (scale {scale}, CALL tpcb)"),
        NetWorkload::Tpcb {
            scale,
            select_only: true,
        } => format!("tpcb -S (scale {scale}, CALL tpcb_balance)"),
        NetWorkload::Tpcc {
            warehouses,
            mix,
            local_only,
        } => format!(
            "tpcc ({warehouses} warehouse(s), mix {mix}{}; no keying or think time: not a \
             compliant tpmC)",
            if local_only { ", local only" } else { "" }
        ),
        NetWorkload::Micro {
            rows,
            sites,
            n,
            update,
            multisite_pct,
            theta,
        } => format!(
            "micro ({rows} rows in {} sites, {n} keys per call, CALL {}, {multisite_pct}% \
             multisite, skew {theta})",
            sites.unwrap_or_default(),
            if update { "micro_update" } else { "micro_read" }
        ),
    };
    println!(
        "server      {} ({} connections, {} call(s) in flight each)",
        run.addr, run.connections, run.pipeline
    );
    println!("workload    {name}");
    println!(
        "throughput  {:.0} txn/s ({} committed in {:.1} s)",
        total.ok as f64 / secs,
        total.ok,
        secs
    );
    let width = names(w).iter().map(|n| n.len()).max().unwrap_or(0);
    for (n, p) in names(w).iter().zip(&per) {
        let share = 100.0 * p.ok as f64 / total.ok.max(1) as f64;
        let mut line = format!(
            "  {n:<width$}  {:>10.0} txn/s  {:>12}  {share:5.1}%",
            p.ok as f64 / secs,
            thousands(p.ok)
        );
        if p.rollbacks > 0 {
            line += &format!("  rolled back {}", thousands(p.rollbacks));
        }
        println!("{line}");
    }
    println!(
        "latency     median {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs",
        pct(0.5),
        pct(0.99),
        pct(0.999)
    );
    // The procedures' own rollbacks (TPC-C's 1% of NewOrders) are outcomes,
    // not failures: apart from the errors, 40001 (out of retries) among them.
    println!(
        "rollbacks   {} (P0001: the procedure rolled its transaction back)",
        thousands(total.rollbacks)
    );
    let errors: Vec<String> = total
        .errors
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!(
        "errors      {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join(", ")
        }
    );
    println!(
        "client cpu  {:.2} cores (this process, all connections on one thread)",
        cpu / secs
    );
    Ok(())
}
