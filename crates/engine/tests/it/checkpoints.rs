//! Periodic checkpoints (`IslandConfig::checkpoint`): taken while workers
//! commit, they bound the log on disk, and recovery from them loses nothing.

use std::time::{Duration, Instant};

use islands::cc::CcKind;
use islands::island::{CheckpointPolicy, Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::wal::Durability;

use crate::common::temp_dir;

const VALUE: Col = Col(0);

fn tables(rows: u64) -> Vec<TableDef> {
    vec![TableDef::new(
        "counters",
        &[("value", ColType::U64), ("pad", ColType::Str(200))],
        rows,
        PrimaryKind::Hash,
    )]
}

fn config(dir: &std::path::Path, policy: CheckpointPolicy) -> IslandConfig {
    let mut cfg = IslandConfig::new(CcKind::NoWait, 1).durable(Durability::Async, dir);
    cfg.segment_bytes = 256 << 10;
    cfg.checkpoint = policy;
    cfg
}

fn open_loaded(dir: &std::path::Path, rows: u64, policy: CheckpointPolicy) -> Island {
    let (island, _) = Island::open(config(dir, policy), &tables(rows)).unwrap();
    let mut l = island.loader().unwrap();
    for k in 0..rows {
        l.put(0, k, |_| {}).unwrap();
    }
    drop(l);
    // The load becomes durable as a checkpoint, as the benchmark makes it.
    island.checkpoint().unwrap();
    island
}

/// Adds one to counter `k` and waits until the log has written it.
fn bump(tx: &mut islands::txn::Txn, k: u64) {
    tx.execute(0, |tx| {
        Box::pin(async move {
            let h = tx.get_for_update(0, k).await?.expect("loaded");
            let v = tx.row(h).u64(VALUE);
            tx.row_mut(h).set_u64(VALUE, v + 1);
            Ok(())
        })
    })
    .unwrap();
    if let Some(seq) = tx.flush_log().unwrap() {
        tx.wait_durable(seq).unwrap();
    }
}

fn written(island: &Island) -> u64 {
    island.wal().unwrap().stats().bytes_written
}

fn values(island: &Island) -> Vec<u64> {
    let mut v = Vec::new();
    island
        .catalog()
        .table(0)
        .for_each_row(|k, _, row| v.push((k, row[0])));
    v.sort_unstable();
    v.into_iter().map(|(_, x)| x).collect()
}

#[test]
fn periodic_checkpoints_bound_the_log_and_recovery_loses_nothing() {
    let dir = temp_dir("ckpt-periodic");
    let rows = 100;
    let policy = CheckpointPolicy {
        every_bytes: 512 << 10,
        every: Duration::ZERO,
    };
    let island = open_loaded(&dir, rows, policy);
    let mut tx = island.worker().unwrap();
    let mut expected = vec![0u64; rows as usize];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0u64;
    while written(&island) < (6 << 20) || island.checkpoint_stats().periodic < 3 {
        assert!(
            Instant::now() < deadline,
            "{:?} after {} bytes of log",
            island.checkpoint_stats(),
            written(&island)
        );
        let k = n * 7 % rows;
        bump(&mut tx, k);
        expected[k as usize] += 1;
        n += 1;
    }
    let usage = island.wal().unwrap().disk_usage().unwrap();
    let stats = island.checkpoint_stats();
    assert!(stats.failed == 0 && stats.last_error.is_none(), "{stats:?}");
    assert!(
        usage.segment_bytes < written(&island) / 4,
        "the checkpoints deleted the log before them: {usage:?} on disk of {} written",
        written(&island)
    );
    drop(tx);
    island.shutdown();
    drop(island);

    let (island, report) = Island::open(config(&dir, policy), &tables(rows)).unwrap();
    assert_eq!(
        values(&island),
        expected,
        "recovered from the newest periodic checkpoint and the log after it ({report})"
    );
    assert!(
        report.log_records < n / 2,
        "recovery replayed {} of {n} commits: the checkpoints did not shorten it",
        report.log_records
    );
    island.shutdown();
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A database larger than the size threshold is written out only once the
/// log has grown as much as its last checkpoint: checkpoints never write
/// more than the log does.
#[test]
fn a_periodic_checkpoint_waits_for_as_much_log_as_the_last_checkpoint_holds() {
    let dir = temp_dir("ckpt-large");
    let rows = 8_000; // about 2 MB of checkpoint
    let policy = CheckpointPolicy {
        every_bytes: 16 << 10,
        every: Duration::ZERO,
    };
    let island = open_loaded(&dir, rows, policy);
    let last = island.checkpoint_stats().last_bytes;
    assert!(last > 1 << 20, "the load's checkpoint holds {last} bytes");
    let mut tx = island.worker().unwrap();
    let mut n = 0;
    while written(&island) < last / 2 {
        bump(&mut tx, n % rows);
        n += 1;
    }
    // Give the checkpointer several looks at a log below the threshold.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        island.checkpoint_stats().periodic,
        0,
        "checkpointed after {} bytes of log, less than the {last} of the last checkpoint",
        written(&island)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while island.checkpoint_stats().periodic == 0 {
        assert!(
            Instant::now() < deadline,
            "no checkpoint after {} bytes",
            written(&island)
        );
        bump(&mut tx, n % rows);
        n += 1;
    }
    assert!(written(&island) >= last, "{} < {last}", written(&island));
    drop(tx);
    island.shutdown();
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checkpoints_by_time_are_taken_only_while_the_log_grows() {
    let dir = temp_dir("ckpt-time");
    let policy = CheckpointPolicy {
        every_bytes: 0,
        every: Duration::from_millis(150),
    };
    let island = open_loaded(&dir, 10, policy);
    let mut tx = island.worker().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    while island.checkpoint_stats().periodic < 2 {
        assert!(Instant::now() < deadline, "{:?}", island.checkpoint_stats());
        bump(&mut tx, n % 10);
        n += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    // Idle: the log does not grow. The last checkpoint may have begun before
    // the last writes, so one more may cover them (however late a loaded
    // machine runs it); after that none is due. A checkpoint every period
    // would take about eight in this time.
    let stopped = island.checkpoint_stats().periodic;
    std::thread::sleep(Duration::from_millis(1200));
    let idle = island.checkpoint_stats().periodic;
    assert!(
        idle <= stopped + 1,
        "{} checkpoints of a log that did not grow",
        idle - stopped
    );
    drop(tx);
    island.shutdown();
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_periodic_checkpoints_when_off() {
    let dir = temp_dir("ckpt-off");
    let island = open_loaded(&dir, 10, CheckpointPolicy::OFF);
    let mut tx = island.worker().unwrap();
    for n in 0..2_000 {
        bump(&mut tx, n % 10);
    }
    std::thread::sleep(Duration::from_millis(300));
    let stats = island.checkpoint_stats();
    assert_eq!((stats.taken, stats.periodic), (1, 0), "{stats:?}");
    drop(tx);
    island.shutdown();
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}
