//! `islands bench --connect ADDR ycsb|tpcb`: drive a running `islands
//! serve` over the network with PostgreSQL connections (tokio-postgres,
//! prepared statements), each keeping `--pipeline` calls in flight, and
//! report throughput, latency percentiles and errors by SQLSTATE.
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
use islands::Error;
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

/// What each call is.
#[derive(Clone, Copy, Debug)]
pub enum NetWorkload {
    /// Silo's YCSB: `read_pct`% `ycsb_read`, the rest `ycsb_rmw`, uniform
    /// keys over `rows`.
    Ycsb { rows: u64, read_pct: u32 },
    /// pgbench's TPC-B script (`tpcb`), or its `-S` select (`tpcb_balance`).
    Tpcb { scale: u32, select_only: bool },
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

/// One connection's results over the measured phase.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: BTreeMap<String, u64>,
    lat_ns: Vec<u64>,
}

fn sql(w: NetWorkload) -> [&'static str; 2] {
    match w {
        NetWorkload::Ycsb { .. } => ["CALL ycsb_read($1)", "CALL ycsb_rmw($1)"],
        NetWorkload::Tpcb { .. } => ["CALL tpcb($1, $2, $3, $4)", "CALL tpcb_balance($1)"],
    }
}

/// The statement (0 or 1 of [`sql`]) and arguments of the next call.
fn next_call(w: NetWorkload, rng: &mut FastRng) -> (usize, Vec<i64>) {
    match w {
        NetWorkload::Ycsb { rows, read_pct } => {
            let key = rng.below(rows) as i64;
            (usize::from(!rng.percent(read_pct)), vec![key])
        }
        NetWorkload::Tpcb { scale, select_only } => {
            let s = scale as u64;
            let aid = 1 + rng.below(100_000 * s) as i64;
            if select_only {
                return (1, vec![aid]);
            }
            let bid = 1 + rng.below(s) as i64;
            let tid = 1 + rng.below(10 * s) as i64;
            let delta = rng.below(10_001) as i64 - 5000;
            (0, vec![aid, tid, bid, delta])
        }
    }
}

async fn connection(
    run: Arc<NetRun>,
    w: NetWorkload,
    id: usize,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Result<Tally, String> {
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
    let [a, b] = sql(w);
    let st = [
        client.prepare(a).await.map_err(|e| format!("{a}: {e}"))?,
        client.prepare(b).await.map_err(|e| format!("{b}: {e}"))?,
    ];
    let mut rng = FastRng::new(run.seed.wrapping_mul(1_000_003) + id as u64);
    let mut tally = Tally::default();
    let mut inflight = FuturesUnordered::new();
    let issue = |rng: &mut FastRng| {
        let (s, args) = next_call(w, rng);
        let st = st[s].clone();
        let client = &client;
        async move {
            let t = Instant::now();
            let params: Vec<&(dyn ToSql + Sync)> =
                args.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            let r = client.query(&st, &params).await;
            (t, r)
        }
    };
    for _ in 0..run.pipeline {
        inflight.push(issue(&mut rng));
    }
    while let Some((t, r)) = inflight.next().await {
        let ns = t.elapsed().as_nanos() as u64;
        if measuring.load(Ordering::Relaxed) {
            match r {
                Ok(_) => {
                    tally.ok += 1;
                    tally.lat_ns.push(ns);
                }
                Err(e) => {
                    let code = e
                        .as_db_error()
                        .map(|d| d.code().code().to_string())
                        .unwrap_or_else(|| "connection".into());
                    if code == "connection" {
                        return Err(format!("connection {id}: {e}"));
                    }
                    *tally.errors.entry(code).or_default() += 1;
                }
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
    islands::bench::cpu::CpuTime::process_now().as_secs_f64()
}

pub fn run(run: NetRun, w: NetWorkload) -> Result<(), Error> {
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
    let run = Arc::new(run);
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (tallies, secs, cpu) = rt.block_on(async {
        let tasks: Vec<_> = (0..run.connections)
            .map(|id| {
                tokio::spawn(connection(
                    Arc::clone(&run),
                    w,
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
    let mut total = Tally::default();
    for t in tallies {
        let t = t.map_err(Error::Config)?;
        total.ok += t.ok;
        total.lat_ns.extend(t.lat_ns);
        for (k, v) in t.errors {
            *total.errors.entry(k).or_default() += v;
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
    println!(
        "latency     median {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs",
        pct(0.5),
        pct(0.99),
        pct(0.999)
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
