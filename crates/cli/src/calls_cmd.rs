//! `islands bench calls`: the application API measured against the
//! engine's own request generators, on one deployment shape.
//!
//! Three phases, each on a freshly opened deployment of the same plan
//! (`no_wait`, the executors' loop): (1) the round trip of a blocking
//! 1-row read called by one application thread on an otherwise idle
//! deployment; (2) Silo's YCSB transaction (1 request, 80% reads, uniform
//! keys) called by application threads, each keeping several calls in
//! flight; (3) the same transaction generated on the executors' own
//! threads, as `islands bench ycsb` does. Phases 2 and 3 run on the same
//! cores, so their ratio is what crossing from an application thread costs.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use clap::Args;
use islands::api::open::{load_islands, open_islands, Expect};
use islands::api::{Catalog, Deployment, Options, Partition, ProcDef, Type, Value};
use islands::deploy::{self, DeploySpec, Islands};
use islands::executor::run::ClusterWorker;
use islands::executor::{Cluster, ClusterOptions};
use islands::island::IslandConfig;
use islands::proc::rng::FastRng;
use islands::route::Router;
use islands::storage::{Col, TableId};
use islands::topology::Topology;
use islands::{Abort, Error};
use islands_bench::driver::DriverConfig;
use islands_bench::driver::{run_cluster, RunError};
use islands_bench::progress::DisplayMode;
use islands_workloads::ycsb::{self, Ycsb, YcsbConfig};

/// Sites the key space is spread over (`key % SITES`): enough for any
/// island count this command plans.
const SITES: u32 = 256;
const TABLE: TableId = 0;
const F0: Col = Col(0);

#[derive(Args, Clone)]
pub struct CallsArgs {
    /// Rows in the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Application threads calling through the client (phase 2).
    #[arg(long, default_value_t = 2)]
    app_threads: usize,
    /// Calls each application thread keeps in flight (phase 2).
    #[arg(long, default_value_t = 64)]
    calls_in_flight: usize,
    /// Blocking round trips timed in phase 1.
    #[arg(long, default_value_t = 20_000)]
    round_trips: usize,
}

/// What the common bench options say, for this command.
pub struct Shape {
    pub islands: String,
    pub workers_per_island: Option<u32>,
    pub duration: Duration,
    pub warmup: Duration,
    pub pin: bool,
}

fn site_of(key: u64) -> u32 {
    (key % SITES as u64) as u32
}

fn catalog(cfg: &YcsbConfig) -> Catalog {
    let mut c = Catalog::new();
    let t = c.table(
        ycsb::tables(cfg, cfg.rows).remove(0),
        Partition::BySite(site_of),
    );
    debug_assert_eq!(t, TABLE);
    c.procedure(
        ProcDef::new("read", |tx, a, out| {
            Box::pin(async move {
                let h = tx
                    .get(TABLE, a.int(0) as u64)
                    .await?
                    .ok_or(Abort::User("missing key"))?;
                out.push(vec![Value::Int(tx.row(h).u64(F0) as i64)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .column("f0", Type::Int)
        .home_by(0, TABLE),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("ycsb", |tx, a, _| {
            Box::pin(ycsb::op(tx, a.int(0) as u64, a.int(1) != 0))
        })
        .param("key", Type::Int)
        .param("write", Type::Int)
        .home_by(0, TABLE),
    )
    .expect("a fresh catalog");
    c
}

fn spec(shape: &Shape) -> Result<DeploySpec, Error> {
    let mut s = DeploySpec::new(Islands::parse(&shape.islands)?);
    s.workers_per_island = shape.workers_per_island;
    s.sites = Some(SITES);
    s.durability = "off".into();
    Ok(s)
}

fn open(cfg: &YcsbConfig, shape: &Shape) -> Result<Deployment, Error> {
    let mut opts = Options::new(spec(shape)?);
    opts.pin = shape.pin;
    let rows = cfg.rows;
    Deployment::open(opts, catalog(cfg), move |load| {
        let sites = load.sites();
        let payload = vec![b'x'; 84];
        for k in (0..rows).filter(|k| sites.contains(&site_of(*k))) {
            load.put(TABLE, k, |r| {
                r.set_u64(F0, k);
                r.set_u64(Col(1), islands_workloads::row_check(k, k));
                r.set_str(Col(2), &payload);
            })?;
        }
        Ok(())
    })
}

/// Median and 99th percentile of `ns` (sorted here), in microseconds.
fn percentiles(ns: &mut [u64]) -> (f64, f64) {
    if ns.is_empty() {
        return (0.0, 0.0);
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

pub fn run(a: &CallsArgs, shape: &Shape) -> Result<(), Error> {
    if a.app_threads == 0 || a.calls_in_flight == 0 || a.round_trips == 0 {
        return Err(Error::Config(
            "--app-threads, --calls-in-flight and --round-trips must be at least 1".into(),
        ));
    }
    let cfg = YcsbConfig {
        rows: a.rows,
        ..YcsbConfig::silo()
    };
    cfg.check()?;
    let plan = deploy::plan(
        &Topology::discover().map_err(|e| Error::Config(e.to_string()))?,
        &spec(shape)?,
    )?;
    println!("deployment  {} (no_wait, durability off)", plan.summary());
    println!("table       {} rows of {} bytes", cfg.rows, cfg.row_bytes);

    // 1. Round trips on an idle deployment.
    let db = open(&cfg, shape)?;
    let client = db.client();
    let mut rng = FastRng::new(7);
    let mut lat = Vec::with_capacity(a.round_trips);
    for i in 0..a.round_trips + a.round_trips / 10 {
        let key = rng.next_u64() % cfg.rows;
        let t = Instant::now();
        let rows = client
            .call("read", &[Value::Int(key as i64)])
            .map_err(|e| Error::Config(e.to_string()))?;
        let ns = t.elapsed().as_nanos() as u64;
        debug_assert_eq!(rows.len(), 1);
        // The first tenth warms caches and wakes the executors.
        if i >= a.round_trips / 10 {
            lat.push(ns);
        }
    }
    let (p50, p99) = percentiles(&mut lat);
    println!(
        "round trip  blocking 1-row read, 1 caller, idle deployment: median {p50:.2} µs, p99 {p99:.2} µs ({} calls)",
        lat.len()
    );

    // 2. Application threads, each with calls in flight.
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..a.app_threads)
        .map(|t| {
            let (c, stop, measuring, done) = (
                db.client(),
                Arc::clone(&stop),
                Arc::clone(&measuring),
                Arc::clone(&done),
            );
            let (inflight, rows) = (a.calls_in_flight, cfg.rows);
            std::thread::spawn(move || -> Result<Vec<u64>, String> {
                let mut rng = FastRng::new(1000 + t as u64);
                let call = |rng: &mut FastRng| {
                    let key = rng.next_u64() % rows;
                    let write = i64::from(!rng.percent(80));
                    (
                        Instant::now(),
                        c.call_async("ycsb", vec![Value::Int(key as i64), Value::Int(write)]),
                    )
                };
                let mut futs: Vec<_> = (0..inflight).map(|_| call(&mut rng)).collect();
                let mut cx = Context::from_waker(Waker::noop());
                let mut lat = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut any = false;
                    for f in futs.iter_mut() {
                        if let Poll::Ready(r) = Pin::new(&mut f.1).poll(&mut cx) {
                            any = true;
                            r.map_err(|e| e.to_string())?;
                            if measuring.load(Ordering::Relaxed) {
                                lat.push(f.0.elapsed().as_nanos() as u64);
                                n += 1;
                            }
                            *f = call(&mut rng);
                        }
                    }
                    if !any {
                        // Nothing answered: the executors need the core.
                        std::thread::yield_now();
                    }
                }
                done.fetch_add(n, Ordering::Relaxed);
                Ok(lat)
            })
        })
        .collect();
    std::thread::sleep(shape.warmup);
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(shape.duration);
    measuring.store(false, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for t in threads {
        let l = t
            .join()
            .map_err(|_| Error::Config("an application thread panicked".into()))?
            .map_err(Error::Config)?;
        lat.extend(l);
    }
    db.shutdown()?;
    let api_tps = done.load(Ordering::Relaxed) as f64 / secs;
    let (p50, p99) = percentiles(&mut lat);
    println!(
        "api         Silo YCSB called by {} application thread(s), {} calls in flight each: {:.0} txn/s, latency median {p50:.1} µs, p99 {p99:.1} µs",
        a.app_threads, a.calls_in_flight, api_tps
    );

    // 3. The same transactions generated on the executors' threads.
    let gen_tps = generated(&cfg, shape, &plan)?;
    println!("generated   Silo YCSB generated on the executors' threads: {gen_tps:.0} txn/s");
    println!(
        "ratio       api / generated = {:.3} (same cores, same executor loop; {:.1} s each)",
        api_tps / gen_tps,
        shape.duration.as_secs_f64()
    );
    Ok(())
}

/// Routes a key to the island of its site.
struct Sites(Vec<u16>);

impl Router for Sites {
    fn island_of(&self, _: TableId, key: u64) -> Option<u16> {
        Some(self.0[site_of(key) as usize])
    }
}

/// Phase 3: YCSB on a cluster of the same plan, requests generated by the
/// executors (the benchmark loop), throughput of the measured phase.
fn generated(cfg: &YcsbConfig, shape: &Shape, plan: &deploy::Plan) -> Result<f64, Error> {
    let copts = ClusterOptions {
        inflight: 16,
        commit_window: 64,
        ..Default::default()
    };
    let site_island: Vec<u16> = (0..SITES).map(|s| plan.island_of_site(s)).collect();
    let mut configs = Vec::new();
    let mut workers = Vec::new();
    let mut cws = Vec::new();
    for (i, ip) in plan.islands().iter().enumerate() {
        let mut c = IslandConfig::new(islands::cc::CcKind::NoWait, ip.workers as usize);
        c.name = format!("island-{i}");
        c.island_id = i as u32;
        c.islands = plan.islands().len() as u32;
        c.contexts = copts.contexts_needed(ip.workers as usize);
        configs.push(c);
        for w in 0..ip.workers as usize {
            cws.push(ClusterWorker {
                island: i,
                worker: w,
                cpu: ip.worker_cpu(w).filter(|_| shape.pin).map(|c| c as usize),
                limit: None,
            });
        }
        workers.push(ip.workers as usize);
    }
    let opened = open_islands(configs, |_| ycsb::tables(cfg, cfg.rows), Expect::Fresh)?;
    let islands = opened.islands();
    let payload = vec![b'x'; 84];
    load_islands(
        &islands,
        |i| {
            plan.islands()[i]
                .worker_cpu(0)
                .filter(|_| shape.pin)
                .map(|c| c as usize)
        },
        |i, island| {
            let mut l = island.loader()?;
            for k in (0..cfg.rows).filter(|k| site_island[site_of(*k) as usize] as usize == i) {
                l.put(TABLE, k, |r| {
                    r.set_u64(F0, k);
                    r.set_u64(Col(1), islands_workloads::row_check(k, k));
                    r.set_str(Col(2), &payload);
                })?;
            }
            Ok(())
        },
    )?;
    let opened = opened.islands;
    let cl = Cluster::new(opened, workers, Arc::new(Sites(site_island)), copts)?;
    let dcfg = DriverConfig {
        warmup: shape.warmup,
        measure: shape.duration,
        display: DisplayMode::Quiet,
        workload_name: "ycsb".into(),
        ..Default::default()
    };
    let report = run_cluster(&cl, &cws, Arc::new(Ycsb::new(cfg.clone())?), &dcfg)
        .map_err(RunError::into_cause)?;
    for i in &islands {
        i.shutdown();
    }
    Ok(report.throughput_tps)
}
