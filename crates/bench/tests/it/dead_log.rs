//! A log that dies in the middle of a run (its file system fills up) stops
//! the whole run within a bounded time, with the error and the figures
//! measured up to then: on one island, and on two islands with two-phase
//! commit in flight (where a worker used to wait for ever for branches of an
//! island whose workers had left).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::cc::CcKind;
use islands::executor::run::{run_to_completion, ClusterWorker};
use islands::executor::{Cluster, ClusterOptions};
use islands::island::{Island, IslandConfig, RecoveryReport};
use islands::proc::rng::FastRng;
use islands::proc::Workload;
use islands::route::RangeRouter;
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::txn::Txn;
use islands::wal::{CappedDevice, Durability};
use islands::Abort;
use islands_bench::driver::{self, DriverConfig};
use islands_bench::driver::{run_cluster, RunError};
use islands_bench::progress::DisplayMode;

use crate::temp_dir;

const COUNTERS: u64 = 400;
const VALUE: Col = Col(0);

fn tables() -> Vec<TableDef> {
    vec![TableDef::new(
        "counters",
        &[("value", ColType::U64), ("pad", ColType::Str(48))],
        COUNTERS,
        PrimaryKind::Hash,
    )]
}

/// Adds one to four counters drawn from all of them (on two islands, most
/// transactions touch both).
struct Bump;

impl Workload for Bump {
    type Req = [u64; 4];

    fn types(&self) -> Vec<&'static str> {
        vec!["bump"]
    }

    fn next(&self, _worker: usize, rng: &mut FastRng, req: &mut [u64; 4]) -> usize {
        for k in req.iter_mut() {
            *k = rng.below(COUNTERS);
        }
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a [u64; 4]) -> Result<(), Abort> {
        for &k in req {
            if let Some(h) = tx.get_for_update(0, k).await? {
                let v = tx.row(h).u64(VALUE);
                tx.row_mut(h).set_u64(VALUE, v + 1);
            }
        }
        Ok(())
    }
}

/// Opens island `i` of `n` (sync log in `dir/island-<i>`, through `device`
/// when given), recovering what the directory holds.
fn reopen(
    dir: &std::path::Path,
    i: u64,
    n: u64,
    device: Option<CappedDevice>,
) -> (Island, RecoveryReport) {
    let mut cfg = IslandConfig::new(CcKind::NoWait, 1)
        .durable(Durability::Sync, dir.join(format!("island-{i}")));
    cfg.name = format!("island-{i}");
    if n > 1 {
        cfg.contexts = ClusterOptions::default().contexts_needed(1);
    }
    if let Some(d) = device {
        cfg.device = Some(Arc::new(d));
    }
    Island::open(cfg, &tables()).unwrap()
}

/// Opens island `i` of `n` fresh and loads its counters (durable as a
/// checkpoint, as the benchmark makes its load).
fn open(dir: &std::path::Path, i: u64, n: u64, device: Option<CappedDevice>) -> Island {
    let (island, _) = reopen(dir, i, n, device);
    let per = COUNTERS / n;
    let mut l = island.loader().unwrap();
    for k in i * per..(i + 1) * per {
        l.put(0, k, |_| {}).unwrap();
    }
    drop(l);
    island.checkpoint().unwrap();
    island
}

fn driver_config(measure: Duration) -> DriverConfig {
    DriverConfig {
        workers: 1,
        warmup: Duration::ZERO,
        measure,
        display: DisplayMode::Quiet,
        pin: false,
        ..Default::default()
    }
}

/// Runs `f` on a thread and waits at most `limit` for it: a hang fails the
/// test instead of hanging it.
fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("the run did not stop within {limit:?} of its log dying"))
}

/// The error of a stopped run names the full device, and carries what the
/// run measured before it stopped.
fn assert_stopped_on_enospc(r: Result<islands_bench::report::Report, RunError>) {
    match r {
        Err(RunError::Stopped { cause, partial }) => {
            let msg = cause.to_string();
            assert!(
                msg.contains("No space left on device"),
                "the cause names the full device: {msg}"
            );
            assert!(
                partial.stopped.as_deref() == Some(msg.as_str()),
                "the partial report says why it stopped: {:?}",
                partial.stopped
            );
            assert!(
                partial.measured_s < 5.0,
                "measured up to the stop, not to the planned end: {} s",
                partial.measured_s
            );
        }
        Err(e) => panic!("stopped with another error: {e}"),
        Ok(r) => panic!(
            "a run on a dead log reported success ({} committed)",
            r.committed
        ),
    }
}

#[test]
fn a_full_log_device_stops_a_single_island_run_promptly() {
    let dir = temp_dir("dead-log-one");
    // Room for the first few hundred commits only.
    let island = open(&dir, 0, 1, Some(CappedDevice::new(64 << 10)));
    let handle = island.clone();
    let t = Instant::now();
    let r = bounded(Duration::from_secs(8), move || {
        driver::run(
            &handle,
            Arc::new(Bump),
            &driver_config(Duration::from_secs(30)),
        )
    });
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the run went on for {:?} on a dead log",
        t.elapsed()
    );
    assert_stopped_on_enospc(r);
    island.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn two_islands(dir: &std::path::Path, dead: CappedDevice) -> (Arc<Cluster>, Vec<Island>) {
    let islands = vec![open(dir, 0, 2, Some(dead)), open(dir, 1, 2, None)];
    let opened = islands
        .iter()
        .map(|i| (i.clone(), Default::default()))
        .collect();
    (cluster(opened), islands)
}

fn cluster(opened: Vec<(Island, RecoveryReport)>) -> Arc<Cluster> {
    let router = RangeRouter::new(&[0, COUNTERS / 2], &[]).unwrap();
    Cluster::new(
        opened,
        vec![1, 1],
        Arc::new(router),
        ClusterOptions::default(),
    )
    .unwrap()
}

/// Recovers both islands of a stopped run, lets their executors resolve
/// what was in doubt, and checks that no transaction is half applied: each
/// adds 4 to the counters' sum, spread over the islands as its keys fall.
/// Returns the sum.
fn recover_and_check(dir: &std::path::Path) -> u64 {
    let opened: Vec<(Island, RecoveryReport)> = (0..2).map(|i| reopen(dir, i, 2, None)).collect();
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = cluster(opened);
    run_to_completion(&cl, &workers(Some(0)), Arc::new(Bump), 1).unwrap();
    let mut sum = 0;
    for island in &islands {
        island
            .catalog()
            .table(0)
            .for_each_row(|_, _, row| sum += row[0]);
        island.shutdown();
    }
    assert_eq!(
        sum % 4,
        0,
        "a transaction is half applied: the counters sum to {sum}"
    );
    sum
}

fn workers(limit: Option<u64>) -> Vec<ClusterWorker> {
    (0..2)
        .map(|i| ClusterWorker {
            island: i,
            worker: 0,
            cpu: None,
            limit,
        })
        .collect()
}

/// Island 0's log fills up while two-phase commits are in flight; island 1's
/// log is healthy, and its worker holds branches that island 0 coordinates.
#[test]
fn a_full_log_device_stops_a_two_island_run_with_two_phase_commit_in_flight() {
    for round in 0..3 {
        let dir = temp_dir("dead-log-2pc");
        let (cl, islands) = two_islands(&dir, CappedDevice::new((32 + 16 * round) << 10));
        let t = Instant::now();
        let r = bounded(Duration::from_secs(8), move || {
            run_cluster(
                &cl,
                &workers(None),
                Arc::new(Bump),
                &driver_config(Duration::from_secs(30)),
            )
        });
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "round {round}: the run went on for {:?} on a dead log",
            t.elapsed()
        );
        let committed = match &r {
            Err(RunError::Stopped { partial, .. }) => partial.committed,
            _ => 0,
        };
        assert_stopped_on_enospc(r);
        for i in &islands {
            i.shutdown();
        }
        drop(islands);
        // What was in doubt on disk is resolved by the next recovery, and
        // every acknowledged commit is there.
        let sum = recover_and_check(&dir);
        assert!(
            sum >= 4 * committed,
            "round {round}: {committed} commits were acknowledged, the counters hold {sum} / 4"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The same for a run of a fixed number of transactions (what tools and
/// tests use): it ends with the log's error instead of waiting for ever.
#[test]
fn a_full_log_device_ends_a_run_to_completion_with_its_error() {
    let dir = temp_dir("dead-log-completion");
    let (cl, islands) = two_islands(&dir, CappedDevice::new(32 << 10));
    let r = bounded(Duration::from_secs(8), move || {
        run_to_completion(&cl, &workers(Some(1_000_000)), Arc::new(Bump), 3)
    });
    match r {
        Err(e) => assert!(e.to_string().contains("No space left on device"), "{e}"),
        Ok(_) => panic!("a million transactions committed on a 32 KB log"),
    }
    for i in &islands {
        i.shutdown();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
