//! Histories across islands: the same transactions through the distributed
//! executor's worker loop, with the keys spread over several islands (a
//! contiguous range of keys per island, tombstones with their keys), under
//! each durability mode and over a transport that loses, duplicates, delays
//! and reorders batches within what the engine allows of it.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use islands::cc::CcKind;
use islands::coord::Timeouts;
use islands::executor::fault::{Faults, FaultyTransport};
use islands::executor::run::{run_to_completion, ClusterWorker};
use islands::executor::{Cluster, ClusterOptions};
use islands::island::{Island, IslandConfig};
use islands::proc::rng::FastRng;
use islands::proc::Workload;
use islands::route::Router;
use islands::txn::Txn;
use islands::wal::Durability;
use islands::Abort;

use super::graph::Done;
use super::{
    base_seed, check, data_key, load, per_worker, plan, rows, run, tables, Mix, Op, Rec, RecCell,
    KEYS,
};
use crate::common::temp_dir;

/// Data keys (and their tombstones) by contiguous ranges.
struct Ranges {
    per: u64,
    islands: u16,
}

impl Router for Ranges {
    fn island_of(&self, table: u16, key: u64) -> Option<u16> {
        Some(((data_key(table, key) / self.per) as u16).min(self.islands - 1))
    }
}

struct Histories {
    parts: Vec<Range<u64>>,
    mix: Mix,
    /// The island of each worker of the run, by its index.
    home: Vec<usize>,
    ids: AtomicU64,
    seq: AtomicU64,
    done: Mutex<Vec<Done>>,
    /// Re-inserts after the attempt's own delete that were refused as
    /// duplicates, in any attempt (see `Rec::refused`).
    refused: Mutex<Vec<String>>,
}

#[derive(Default)]
struct Req {
    ops: Vec<Op>,
    home: usize,
    /// What the last attempt recorded.
    rec: RecCell,
}

impl Workload for Histories {
    type Req = Req;

    fn types(&self) -> Vec<&'static str> {
        vec!["history"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Req) -> usize {
        req.home = self.home[worker];
        req.ops = plan(rng, &self.parts, self.mix);
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a Req) -> Result<(), Abort> {
        let mut rec = Rec::new(self.ids.fetch_add(1, Ordering::Relaxed));
        let r = run(
            tx,
            &req.ops,
            &mut rec,
            self.parts[req.home].clone(),
            self.mix,
        )
        .await;
        if let Some(why) = &rec.refused {
            self.refused
                .lock()
                .unwrap()
                .push(format!("{:?}: {why}", req.ops));
        }
        *req.rec.borrow_mut() = Some(rec);
        r
    }

    fn committed(&self, _worker: usize, req: &Req) {
        if let Some(rec) = req.rec.borrow_mut().take() {
            let d = rec.done(self.seq.fetch_add(1, Ordering::Relaxed), &req.ops);
            self.done.lock().unwrap().push(d);
        }
    }
}

/// How one cross-island run is set up.
#[derive(Clone, Copy, Debug)]
struct Setup {
    islands: usize,
    workers: usize,
    durability: Durability,
    /// What the transport does to batches: nothing, or [`LOSSY`] or
    /// [`SLOW`].
    faults: Option<Faults>,
    /// Every timeout of the commit path a few hundred microseconds: requests,
    /// prepares and idle branches time out all the time, as they do now and
    /// then on a loaded machine with the usual ones.
    tight: bool,
    per_worker: u64,
    mix: Mix,
}

/// Loses, duplicates, delays and reorders batches.
const LOSSY: Faults = Faults {
    drop_pct: 2,
    duplicate_pct: 2,
    delay_pct: 15,
    max_delay: Duration::from_micros(400),
};

/// Delays a third of the batches (so reorders some), and loses none: a
/// message of a transaction's commit often arrives well after its
/// siblings', while other transactions run.
const SLOW: Faults = Faults {
    drop_pct: 0,
    duplicate_pct: 0,
    delay_pct: 33,
    max_delay: Duration::from_micros(300),
};

fn history(s: Setup, salt: u64) {
    let seed = base_seed() ^ salt;
    let per = KEYS.div_ceil(s.islands as u64);
    let parts: Vec<Range<u64>> = (0..s.islands as u64)
        .map(|i| i * per..((i + 1) * per).min(KEYS))
        .collect();
    let mut opts = ClusterOptions {
        inflight: 4,
        ..Default::default()
    };
    let transport = s.faults.map(|faults| {
        Arc::new(FaultyTransport::new(
            s.islands * s.workers,
            4096,
            faults,
            seed,
        ))
    });
    if let Some(t) = &transport {
        opts.transport = Some(t.clone());
    }
    if s.faults.is_some_and(|f| f.drop_pct > 0) {
        opts.op_timeout = Duration::from_millis(5);
        opts.timeouts = Timeouts {
            prepare_us: 5_000,
            commit_retry_us: 2_000,
            decision_retry_us: 3_000,
            branch_idle_us: 20_000,
        };
    }
    if s.tight {
        opts.op_timeout = Duration::from_micros(300);
        opts.timeouts = Timeouts {
            prepare_us: 400,
            commit_retry_us: 300,
            decision_retry_us: 500,
            branch_idle_us: 1_500,
        };
    }
    let dirs: Vec<Option<PathBuf>> = (0..s.islands)
        .map(|_| (s.durability != Durability::Off).then(|| temp_dir("history-dist")))
        .collect();
    let mut opened = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let mut cfg = IslandConfig::new(CcKind::NoWait, s.workers);
        if let Some(d) = dir {
            cfg = cfg.durable(s.durability, d);
        }
        cfg.name = format!("island-{i}");
        cfg.contexts = opts.contexts_needed(s.workers);
        let (island, rep) = Island::open(cfg, &tables()).unwrap();
        load(&island, |k| parts[i].contains(&k));
        opened.push((island, rep));
    }
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let router = Arc::new(Ranges {
        per,
        islands: s.islands as u16,
    });
    let cl = Cluster::new(opened, vec![s.workers; s.islands], router, opts).unwrap();
    let workers: Vec<ClusterWorker> = (0..s.islands)
        .flat_map(|i| {
            (0..s.workers).map(move |w| ClusterWorker {
                island: i,
                worker: w,
                cpu: None,
                limit: Some(per_worker(s.per_worker)),
            })
        })
        .collect();
    let load = Arc::new(Histories {
        parts: parts.clone(),
        mix: s.mix,
        home: workers.iter().map(|w| w.island).collect(),
        ids: AtomicU64::new(1),
        seq: AtomicU64::new(0),
        done: Mutex::new(Vec::new()),
        refused: Mutex::new(Vec::new()),
    });
    run_to_completion(&cl, &workers, load.clone(), seed).unwrap();
    drop(cl);
    let done = std::mem::take(&mut *load.done.lock().unwrap());
    let left = rows(&handles);
    let what = format!("{s:?}");
    if let Some(t) = &transport {
        eprintln!(
            "history {what}: the transport dropped {}, duplicated {} and delayed {} batches",
            t.dropped.load(Ordering::Relaxed),
            t.duplicated.load(Ordering::Relaxed),
            t.delayed_batches.load(Ordering::Relaxed)
        );
    }
    let refused = std::mem::take(&mut *load.refused.lock().unwrap());
    assert!(
        refused.is_empty(),
        "{what} (seed {seed}): {} re-inserts after the attempt's own delete were refused: {:#?}",
        refused.len(),
        &refused[..refused.len().min(5)]
    );
    check(&what, seed, &done, &left);
    for h in &handles {
        h.shutdown();
    }
    drop(handles);
    for d in dirs.into_iter().flatten() {
        let _ = std::fs::remove_dir_all(d);
    }
}

fn setup(islands: usize, workers: usize, durability: Durability, per_worker: u64) -> Setup {
    Setup {
        islands,
        workers,
        durability,
        faults: None,
        tight: false,
        per_worker,
        mix: Mix::LOCKED,
    }
}

#[test]
fn cross_island_histories_are_serializable() {
    history(setup(2, 1, Durability::Off, 500), 101);
    history(setup(3, 1, Durability::Off, 400), 102);
    history(setup(2, 2, Durability::Off, 300), 103);
}

#[test]
fn cross_island_histories_with_a_log_are_serializable() {
    history(setup(2, 1, Durability::Async, 300), 111);
    history(setup(3, 1, Durability::Sync, 150), 112);
}

#[test]
fn cross_island_histories_over_a_faulty_transport_are_serializable() {
    let s = Setup {
        faults: Some(LOSSY),
        ..setup(3, 1, Durability::Off, 250)
    };
    history(s, 121);
}

/// Every operation over a lossy transport, with timeouts that fire all the
/// time. A copy of an INSERT served twice in one branch answered "present"
/// for the branch's own row, and a zeroed row committed (see
/// `executor::tests::a_copy_of_a_request_is_served_once`); this run is the one
/// that exposes such timeout paths.
#[test]
fn cross_island_histories_over_a_faulty_transport_with_timeouts_are_serializable() {
    let s = Setup {
        faults: Some(LOSSY),
        tight: true,
        mix: Mix::ALL,
        ..setup(3, 1, Durability::Off, 300)
    };
    history(s, 122);
}

/// Writes whose lock is taken at commit: a delete of a row read under a
/// shared lock, across islands, is issue 22's item 1.
#[test]
fn cross_island_histories_with_late_writes_are_serializable() {
    let mix = Mix {
        group_scans: false,
        ..Mix::ALL
    };
    for (i, islands, workers) in [(0, 2, 2), (1, 3, 1), (2, 2, 2)] {
        let s = Setup {
            mix,
            ..setup(islands, workers, Durability::Off, 400)
        };
        history(s, 131 + i);
    }
}

/// Secondary scans while groups change, with every other operation.
#[test]
fn cross_island_histories_with_secondary_scans_are_serializable() {
    history(
        Setup {
            mix: Mix::ALL,
            ..setup(2, 2, Durability::Off, 400)
        },
        141,
    );
    history(
        Setup {
            mix: Mix::ALL,
            faults: Some(LOSSY),
            ..setup(3, 1, Durability::Off, 300)
        },
        142,
    );
}

/// Secondary scans while groups change, over a transport that delays
/// batches: a branch's PrepareReq often arrives long after its siblings
/// validated and released, and meanwhile other transactions scan and write
/// on both islands. A branch that added its new secondary entries only at
/// its own prepare let cycles through in that window (issue 22: every entry
/// must be in before any branch validates or releases).
#[test]
fn cross_island_histories_with_secondary_scans_and_slow_messages_are_serializable() {
    history(
        Setup {
            mix: Mix::ALL,
            faults: Some(SLOW),
            ..setup(2, 2, Durability::Off, 400)
        },
        143,
    );
}

/// Deletes and re-inserts of keys spread over two islands (remote inserts
/// after remote deletes): a re-insert after the transaction's own delete is
/// never refused as a duplicate (issue 33, item 7).
#[test]
fn cross_island_reinserts_after_own_deletes_are_never_refused() {
    let s = Setup {
        mix: Mix {
            group_scans: false,
            ..Mix::CHURN
        },
        ..setup(2, 2, Durability::Off, 300)
    };
    history(s, 151);
}
