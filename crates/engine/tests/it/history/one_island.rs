//! Histories on one island: worker threads each run their own transactions
//! (retrying conflicts) under each scheme, with and without a log.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::proc::rng::FastRng;
use islands::txn::{backoff_retry, poll_local};
use islands::wal::Durability;
use islands::Abort;

use super::graph::Done;
use super::{base_seed, check, load, per_worker, plan, rows, tables, Mix, Rec, KEYS};
use crate::common::temp_dir;

/// Runs `n` transactions on each of `workers` threads; returns what
/// committed, and the rows left.
fn run_island(island: &Island, run_cfg: &Run, n: u64, seed: u64) -> Vec<Done> {
    let ids = AtomicU64::new(1);
    let seq = AtomicU64::new(0);
    let log = Mutex::new(Vec::new());
    let (workers, mix) = (run_cfg.workers, run_cfg.mix);
    let start = Barrier::new(workers);
    std::thread::scope(|s| {
        for w in 0..workers {
            let (ids, seq, log, start) = (&ids, &seq, &log, &start);
            let lockstep = run_cfg.lockstep;
            s.spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut rng = FastRng::new(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9));
                for i in 0..n {
                    let ops = plan(&mut rng, std::slice::from_ref(&(0..KEYS)), mix);
                    if lockstep {
                        start.wait();
                    }
                    let mut attempt = 0;
                    loop {
                        tx.begin(attempt > 0);
                        let mut rec = Rec::new(ids.fetch_add(1, Ordering::Relaxed));
                        let r = poll_local(super::run(&mut tx, &ops, &mut rec, 0..KEYS, mix));
                        if let Some(why) = &rec.refused {
                            panic!("{run_cfg:?}: {ops:?}: {why}");
                        }
                        match r.and_then(|()| tx.commit().map(|_| ())) {
                            Ok(()) => {
                                let d = rec.done(seq.fetch_add(1, Ordering::Relaxed), &ops);
                                log.lock().unwrap().push(d);
                                break;
                            }
                            Err(Abort::Conflict(_)) => {
                                tx.abort();
                                attempt += 1;
                                assert!(attempt < 1_000_000, "{ops:?} never commits");
                                backoff_retry(attempt.min(12));
                            }
                            Err(e) => panic!("{ops:?}: {e}"),
                        }
                    }
                    if i % 32 == 0 {
                        tx.flush_log().unwrap();
                    }
                }
            });
        }
    });
    log.into_inner().unwrap()
}

/// How one run on one island goes.
#[derive(Clone, Copy, Debug)]
struct Run {
    cc: CcKind,
    workers: usize,
    durability: Durability,
    mix: Mix,
    /// The workers start each transaction together (a barrier between
    /// transactions): two transactions' commits overlap far more often.
    lockstep: bool,
}

fn run(cc: CcKind, workers: usize, durability: Durability) -> Run {
    Run {
        cc,
        workers,
        durability,
        mix: Mix::ALL,
        lockstep: false,
    }
}

fn config(r: &Run, workers: usize, dir: &Option<PathBuf>) -> IslandConfig {
    let cfg = IslandConfig::new(r.cc, workers);
    match dir {
        Some(d) => cfg.durable(r.durability, d),
        None => cfg,
    }
}

/// One run of `n` transactions per worker: checks the history, the rows
/// left and, with a log, that recovery brings back exactly those rows.
fn history(r: Run, n: u64, salt: u64) {
    let seed = base_seed() ^ salt;
    let dir = (r.durability != Durability::Off).then(|| temp_dir("history"));
    let (island, _) = Island::open(config(&r, r.workers, &dir), &tables()).unwrap();
    load(&island, |_| true);
    let done = run_island(&island, &r, per_worker(n), seed);
    let left = rows(std::slice::from_ref(&island));
    let what = format!("{r:?}");
    check(&what, seed, &done, &left);
    if let Some(dir) = dir {
        island.shutdown();
        drop(island);
        let (again, _) = Island::open(config(&r, 1, &Some(dir.clone())), &tables()).unwrap();
        assert_eq!(
            rows(std::slice::from_ref(&again)),
            left,
            "{what}: recovery did not bring back the rows the run left"
        );
        again.shutdown();
        drop(again);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn one_island_histories_are_serializable() {
    history(run(CcKind::Occ, 3, Durability::Off), 600, 1);
    history(run(CcKind::NoWait, 2, Durability::Off), 600, 2);
    history(run(CcKind::WaitDie, 4, Durability::Off), 450, 3);
    history(run(CcKind::None, 1, Durability::Off), 1000, 4);
}

#[test]
fn one_island_histories_with_a_log_are_serializable_and_recover() {
    for (i, durability) in [Durability::Async, Durability::Sync]
        .into_iter()
        .enumerate()
    {
        let i = i as u64;
        history(run(CcKind::Occ, 2, durability), 300, 10 + i);
        history(run(CcKind::WaitDie, 3, durability), 200, 20 + i);
        history(run(CcKind::None, 1, durability), 300, 30 + i);
    }
}

/// Three workers deleting and re-inserting ten keys, under each scheme: a
/// re-insert after the transaction's own delete succeeds or aborts as a
/// conflict, and is never refused as a duplicate (issue 33, item 7).
#[test]
fn one_island_reinserts_after_own_deletes_are_never_refused() {
    for (i, cc) in [CcKind::Occ, CcKind::NoWait, CcKind::WaitDie]
        .into_iter()
        .enumerate()
    {
        let r = Run {
            mix: Mix::CHURN,
            ..run(cc, 3, Durability::Off)
        };
        history(r, 2000, 60 + i as u64);
    }
}

/// Two workers in lockstep over a few hot keys, under each scheme.
#[test]
fn one_island_hot_histories_in_lockstep_are_serializable() {
    let n: u64 = std::env::var("HOT_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    for (i, cc) in [CcKind::Occ, CcKind::NoWait, CcKind::WaitDie]
        .into_iter()
        .enumerate()
    {
        let r = Run {
            mix: Mix::HOT,
            lockstep: true,
            ..run(cc, 2, Durability::Off)
        };
        history(r, n, 50 + i as u64);
    }
}
