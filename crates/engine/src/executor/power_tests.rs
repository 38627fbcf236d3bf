//! Power cuts, not only SIGKILL: a bank on one island (several workers, checkpoints
//! while it runs) and a bank across two islands (two-phase commit, transactions in
//! flight), each stopped by a simulated power cut ([`crate::wal::sim`]) at a moment a seed
//! chooses: the unsynced end of every file is lost or torn at a 512-byte boundary, and
//! directory entries not yet fsync'ed are undone. Then:
//!
//! - recovery accepts what the cut left (torn tails are cut and reported);
//! - every transfer acknowledged before the cut (its commit durable) is there;
//! - no transfer is half applied: the total is conserved and every balance is its initial
//!   balance plus what the surviving receipts moved in, minus what they moved out;
//! - on two islands, resolving the branches in doubt in memory from the logs (what
//!   `islands check` does, writing nothing) gives the same database as the executors'
//!   recovery;
//! - separately, a byte flipped in a record that a later batch follows is refused, and
//!   every file is left as it was.
//!
//! Each test runs rounds for about two seconds (`ISLANDS_LONG=1`: a minute), each round
//! with its own seed, printed with the first one (`ISLANDS_POWER_SEED=n` replays from n).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::tests::run_by_hand;
use super::*;
use crate::cc::CcKind;
use crate::island::{Island, IslandConfig, RecoveryReport};
use crate::route::Router;
use crate::storage::{Col, ColType, PrimaryKind, TableDef};
use crate::txn::{poll_local, Txn};
use crate::wal::sim::{damage_mid_log, SimDevice};
use crate::wal::{Durability, Recovery};
use crate::{Abort, Error};

const ACCOUNTS: u16 = 0;
const RECEIPTS: u16 = 1;
const BAL: Col = Col(0);
const FROM: Col = Col(0);
const TO: Col = Col(1);
const AMOUNT: Col = Col(2);
const MEMO: Col = Col(3);
const N: u64 = 16;
const INITIAL: i64 = 1000;

fn tables() -> Vec<TableDef> {
    vec![
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            N,
            PrimaryKind::Hash,
        ),
        TableDef::new(
            "receipts",
            &[
                ("from", ColType::U64),
                ("to", ColType::U64),
                ("amount", ColType::I64),
                // Receipts of several sectors, so that a write a power cut tears
                // often ends inside a record.
                ("memo", ColType::Str(700)),
            ],
            1 << 16,
            PrimaryKind::Hash,
        ),
    ]
}

/// Accounts 0..N/2 on island 0, the rest on island 1; a receipt lives with its source
/// account (kept in the key's low 32 bits).
struct Halves;

impl Router for Halves {
    fn island_of(&self, table: u16, key: u64) -> Option<u16> {
        let account = if table == RECEIPTS {
            key & 0xffff_ffff
        } else {
            key
        };
        Some(u16::from(account >= N / 2))
    }
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// How long each test runs its rounds, and the first seed.
fn budget_and_seed(what: &str) -> (Duration, u64) {
    let long = std::env::var("ISLANDS_LONG").is_ok_and(|v| v != "0");
    let seed = std::env::var("ISLANDS_POWER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                % 1_000_000_000
        });
    println!("{what}: first seed {seed} (replay with ISLANDS_POWER_SEED={seed})");
    let budget = if long {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(2)
    };
    (budget, seed)
}

#[derive(Default, Debug)]
struct Tally {
    cuts: u64,
    /// Cuts that found unsynced bytes in some file, and bytes they lost.
    cuts_with_unsynced: u64,
    unsynced_bytes_lost: u64,
    acknowledged: u64,
    lost: u64,
    torn_tails: u64,
    damage_refused: u64,
}

impl Tally {
    fn count_cut(&mut self, files: &[crate::wal::sim::CutFile]) {
        self.cuts += 1;
        self.cuts_with_unsynced += u64::from(!files.is_empty());
        self.unsynced_bytes_lost += files.iter().map(|f| f.unsynced - f.kept).sum::<u64>();
    }
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("islands-power-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Balances by account, and receipts (from, to, amount) by id.
type Bank = (BTreeMap<u64, i64>, BTreeMap<u64, (u64, u64, i64)>);

/// The receipts and balances of every island, read row by row.
fn state(islands: &[&Island]) -> Bank {
    let mut balances = BTreeMap::new();
    let mut receipts = BTreeMap::new();
    for island in islands {
        island.catalog().table(ACCOUNTS).for_each_row(|k, _, w| {
            balances.insert(k, w[0] as i64);
        });
        island.catalog().table(RECEIPTS).for_each_row(|k, _, w| {
            receipts.insert(k, (w[0], w[1], w[2] as i64));
        });
    }
    (balances, receipts)
}

/// The bank's invariant, and every acknowledged receipt present; panics naming `seed`.
fn check_bank(islands: &[&Island], acked: &[u64], seed: u64, tally: &mut Tally) {
    let (balances, receipts) = state(islands);
    assert_eq!(balances.len() as u64, N, "seed {seed}: accounts missing");
    let mut expect: BTreeMap<u64, i64> = (0..N).map(|k| (k, INITIAL)).collect();
    for (id, &(from, to, amount)) in &receipts {
        assert!(
            from < N && to < N,
            "seed {seed}: receipt {id:#x} names no account"
        );
        *expect.get_mut(&from).unwrap() -= amount;
        *expect.get_mut(&to).unwrap() += amount;
    }
    assert_eq!(
        balances, expect,
        "seed {seed}: a transfer is half applied (balances against what the receipts explain)"
    );
    let lost: Vec<&u64> = acked
        .iter()
        .filter(|id| !receipts.contains_key(id))
        .collect();
    tally.acknowledged += acked.len() as u64;
    tally.lost += lost.len() as u64;
    assert!(
        lost.is_empty(),
        "seed {seed}: {} acknowledged transfer(s) lost after a power cut, first {:#x}",
        lost.len(),
        lost[0]
    );
}

/// Moves `amount` from `from` to `to` and records receipt `id`.
async fn transfer(tx: &mut Txn, id: u64, from: u64, to: u64, amount: i64) -> Result<(), Abort> {
    let r = tx
        .insert(RECEIPTS, id)
        .await?
        .ok_or(Abort::User("receipt id taken"))?;
    let mut row = tx.row_mut(r);
    row.set_u64(FROM, from);
    row.set_u64(TO, to);
    row.set_i64(AMOUNT, amount);
    row.set_str(MEMO, &[b'm'; 700]);
    for (k, d) in [(from, -amount), (to, amount)] {
        let h = tx
            .get_for_update(ACCOUNTS, k)
            .await?
            .ok_or(Abort::User("no account"))?;
        let b = tx.row(h).i64(BAL);
        tx.row_mut(h).set_i64(BAL, b + d);
    }
    Ok(())
}

fn load(island: &Island, keys: std::ops::Range<u64>) {
    let mut l = island.loader().unwrap();
    for k in keys {
        l.put(ACCOUNTS, k, |r| r.set_i64(BAL, INITIAL)).unwrap();
    }
    drop(l);
    island.checkpoint().unwrap();
}

/// Every file of `dir` with a checksum of its bytes.
fn checksums(dir: &Path) -> BTreeMap<String, u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                crc32c::crc32c(&std::fs::read(e.path()).unwrap()),
            )
        })
        .collect()
}

/// Flips a byte in the middle of the log in `dir`; opening it must be refused, naming
/// the file, and change nothing.
fn damage_is_refused(dir: &Path, open: impl Fn() -> Result<(), Error>, seed: u64, t: &mut Tally) {
    let Some((file, at)) = damage_mid_log(dir, seed).unwrap() else {
        return;
    };
    let before = checksums(dir);
    match open() {
        Err(Error::Damaged(m)) => assert!(
            m.contains(&file.display().to_string()) && m.contains(&format!("offset {at}")),
            "seed {seed}: {m}"
        ),
        Err(e) => panic!("seed {seed}: damage at {} offset {at}: {e}", file.display()),
        Ok(()) => panic!(
            "seed {seed}: a byte flipped at {} offset {at}, before a later batch, was accepted",
            file.display()
        ),
    }
    assert_eq!(
        checksums(dir),
        before,
        "seed {seed}: a refusal changed files"
    );
    t.damage_refused += 1;
}

/// One island, two transfer threads and a checkpointer, cut at a random moment.
fn one_island_round(seed: u64, t: &mut Tally) {
    let mut rng = Rng::new(seed);
    let dir = fresh_dir(&format!("one-{seed}"));
    let sim = SimDevice::with_sync_delay(Duration::from_micros(rng.below(400)));
    let mut cfg = IslandConfig::new(CcKind::NoWait, 3).durable(Durability::Sync, &dir);
    cfg.device = Some(Arc::new(sim.clone()));
    cfg.segment_bytes = 1024 + rng.below(16 << 10);
    cfg.preallocate_log = rng.below(2) == 0;
    cfg.group_delay = Duration::from_micros(rng.below(300));
    let defs = tables();
    let (island, _) = Island::open(cfg.clone(), &defs).unwrap();
    load(&island, 0..N);
    let stop = AtomicBool::new(false);
    let acked: Vec<parking_lot::Mutex<Vec<u64>>> = (0..2).map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for (w, acked) in acked.iter().enumerate() {
            let island = &island;
            let stop = &stop;
            s.spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut r = Rng::new(seed ^ (w as u64 + 1) << 40);
                for i in 0.. {
                    let id = (w as u64) << 32 | i;
                    let (from, to) = (r.below(N), r.below(N));
                    let amount = 1 + r.below(20) as i64;
                    let done = loop {
                        tx.begin(false);
                        let ran = poll_local(transfer(&mut tx, id, from, to, amount));
                        let r = match ran {
                            Ok(()) => tx.commit_durable().map(|_| ()),
                            Err(e) => {
                                tx.abort();
                                Err(e)
                            }
                        };
                        match r {
                            Err(Abort::Conflict(_)) if !stop.load(Ordering::Relaxed) => continue,
                            r => break r.is_ok(),
                        }
                    };
                    if !done {
                        return;
                    }
                    acked.lock().push(id);
                }
            });
        }
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
                if island.checkpoint().is_err() {
                    return;
                }
            }
        });
        std::thread::sleep(Duration::from_millis(1 + rng.below(40)));
        // Acknowledged before the cut: their fdatasync returned before it.
        let before: Vec<u64> = acked.iter().flat_map(|a| a.lock().clone()).collect();
        t.count_cut(&sim.power_cut(seed));
        stop.store(true, Ordering::Relaxed);
        // The threads stop on their logs' failures.
        *acked[0].lock() = before;
    });
    island.shutdown();
    drop(island);

    cfg.device = None;
    let (island, report) = Island::open(cfg.clone(), &defs)
        .unwrap_or_else(|e| panic!("seed {seed}: recovery after a power cut: {e}"));
    t.torn_tails += u64::from(report.truncated.is_some());
    check_bank(&[&island], &acked[0].lock(), seed, t);
    island.shutdown();
    drop(island);
    damage_is_refused(
        &dir,
        || Island::open(cfg.clone(), &defs).map(|_| ()),
        seed,
        t,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `round` with one seed after another for the test's time budget (at least three).
fn rounds(what: &str, round: fn(u64, &mut Tally)) {
    let (budget, first) = budget_and_seed(what);
    let mut t = Tally::default();
    let start = Instant::now();
    let mut seed = first;
    while start.elapsed() < budget || t.cuts < 3 {
        round(seed, &mut t);
        seed += 1;
    }
    println!("{what}: {t:?}");
    assert_eq!(t.lost, 0);
    assert!(t.acknowledged > 0, "{t:?}");
}

#[test]
fn power_cuts_keep_every_acknowledged_commit_of_one_island() {
    rounds("one island, power cuts", one_island_round);
}

/// Two islands' configurations: one worker each, `no_wait`, room for the executors.
fn two_configs(dir: &Path, sim: &SimDevice, rng: &mut Rng) -> Vec<IslandConfig> {
    let contexts = ClusterOptions::default().contexts_needed(1);
    let segment_bytes = 1024 + rng.below(16 << 10);
    let preallocate = rng.below(2) == 0;
    let delay = Duration::from_micros(rng.below(300));
    (0..2u32)
        .map(|i| {
            let mut cfg = IslandConfig::new(CcKind::NoWait, 1)
                .durable(Durability::Sync, dir.join(format!("island-{i}")));
            cfg.name = format!("island-{i}");
            cfg.contexts = contexts;
            cfg.island_id = i;
            cfg.islands = 2;
            cfg.deployment = Some(0x15_1a4d);
            cfg.device = Some(Arc::new(sim.clone()));
            cfg.segment_bytes = segment_bytes;
            cfg.preallocate_log = preallocate;
            cfg.group_delay = delay;
            cfg
        })
        .collect()
}

/// Two islands, transfers between them driven by hand (two-phase commit, several commits
/// in flight, checkpoints between them), cut after a number of transfers a seed chooses.
fn two_island_round(seed: u64, t: &mut Tally) {
    let mut rng = Rng::new(seed);
    let dir = fresh_dir(&format!("two-{seed}"));
    let sim = SimDevice::with_sync_delay(Duration::from_micros(rng.below(400)));
    let configs = two_configs(&dir, &sim, &mut rng);
    let defs = tables();
    let opened: Vec<(Island, RecoveryReport)> = configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (island, rep) = Island::open(c.clone(), &defs).unwrap();
            load(&island, i as u64 * N / 2..(i as u64 + 1) * N / 2);
            (island, rep)
        })
        .collect();
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(Halves), Default::default()).unwrap();
    let mut exs = [cl.executor(0, 0).unwrap(), cl.executor(1, 0).unwrap()];
    let transfers = 5 + rng.below(60);
    // (receipt, home island, batch that must be durable there)
    let mut waiting: Vec<(u64, usize, BatchSeq)> = Vec::new();
    let mut gtids: Vec<(Gtid, u64, usize)> = Vec::new();
    let mut acked = Vec::new();
    for n in 0..transfers {
        let home = rng.below(2) as usize;
        let from = home as u64 * N / 2 + rng.below(N / 2);
        let to = rng.below(N);
        let id = n << 32 | from;
        let (a, b) = exs.split_at_mut(1);
        let (ex, other) = if home == 0 {
            (&mut a[0], &mut b[0])
        } else {
            (&mut b[0], &mut a[0])
        };
        let Some(c) = ex.begin_home(false) else {
            continue;
        };
        // SAFETY: the context outlives the procedure, which runs to its end before the
        // executor touches the context again.
        let tx: &mut Txn = unsafe { &mut *ex.ctx_ptr(c) };
        let amount = 1 + rng.below(20) as i64;
        match run_by_hand(ex, &mut [other], c, transfer(tx, id, from, to, amount)) {
            Ok(()) => match ex.commit_home(c) {
                Ok(HomeCommit::Local(done)) => waiting.push((id, home, done.ack)),
                Ok(HomeCommit::Distributed(g)) => gtids.push((g, id, home)),
                Ok(HomeCommit::Released(_)) => unreachable!("a transfer writes"),
                Err(_) => {}
            },
            Err(_) => ex.abort_home(c),
        }
        if rng.below(8) == 0 {
            islands[rng.below(2) as usize].checkpoint().unwrap();
        }
        // Pump a little: some commits finish, others stay in flight.
        for _ in 0..rng.below(4) {
            for ex in exs.iter_mut() {
                ex.pump().unwrap();
                ex.flush_log().unwrap();
            }
        }
        for (i, ex) in exs.iter_mut().enumerate() {
            for (g, ack) in ex.outcomes.drain(..) {
                if let Some(p) = gtids.iter().position(|&(x, _, _)| x == g) {
                    let (_, id, _) = gtids.swap_remove(p);
                    if let Some(ack) = ack {
                        waiting.push((id, i, ack));
                    }
                }
            }
        }
        waiting.retain(|&(id, i, ack)| {
            let durable = islands[i].durable_batch() >= ack;
            if durable {
                acked.push(id);
            }
            !durable
        });
    }
    t.count_cut(&sim.power_cut(seed));
    drop(exs);
    drop(cl);
    for i in &islands {
        i.shutdown();
    }
    drop(islands);

    // What `islands check` does: read the logs, resolve branches in doubt in memory.
    let identity = |c: &IslandConfig| c.log_identity(&defs);
    let recs: Vec<Recovery> = configs
        .iter()
        .map(|c| {
            crate::wal::read_only(c.log_dir.as_ref().unwrap(), &identity(c))
                .unwrap_or_else(|e| panic!("seed {seed}: read-only recovery: {e}"))
        })
        .collect();
    let committed = crate::island::commit_decisions(&recs);
    let decide = |g: u64| Some(committed.contains(&g));
    let in_memory: Vec<Island> = configs
        .iter()
        .zip(recs)
        .map(|(c, rec)| {
            Island::open_in_memory(c.clone(), &defs, rec, Some(&decide))
                .unwrap()
                .0
        })
        .collect();

    // The executors' recovery, which writes.
    let opened: Vec<(Island, RecoveryReport)> = configs
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c.device = None;
            Island::open(c, &defs).unwrap_or_else(|e| panic!("seed {seed}: recovery: {e}"))
        })
        .collect();
    t.torn_tails += opened.iter().filter(|(_, r)| r.truncated.is_some()).count() as u64;
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(Halves), Default::default()).unwrap();
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    super::tests::settle(
        &mut [&mut home, &mut part],
        Instant::now() + Duration::from_secs(20),
    );
    drop((home, part, cl));
    let refs: Vec<&Island> = islands.iter().collect();
    check_bank(&refs, &acked, seed, t);
    let mem: Vec<&Island> = in_memory.iter().collect();
    assert_eq!(
        state(&mem),
        state(&refs),
        "seed {seed}: resolving in doubt branches in memory and by the executors differ"
    );
    for i in &islands {
        i.shutdown();
    }
    drop(islands);
    let victim = rng.below(2) as usize;
    let mut cfg = configs[victim].clone();
    cfg.device = None;
    damage_is_refused(
        cfg.log_dir.clone().unwrap().as_path(),
        || Island::open(cfg.clone(), &defs).map(|_| ()),
        seed,
        t,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn power_cuts_leave_no_distributed_transfer_half_applied() {
    rounds("two islands, power cuts", two_island_round);
}

/// A cluster refuses islands opened as other islands of the deployment than their place
/// in it, or of two deployments.
#[test]
fn a_cluster_checks_its_islands_identities() {
    let dir = fresh_dir("identities");
    let sim = SimDevice::new();
    let mut configs = two_configs(&dir, &sim, &mut Rng::new(1));
    for c in &mut configs {
        c.device = None;
    }
    let open = |configs: &[IslandConfig]| -> Vec<(Island, RecoveryReport)> {
        configs
            .iter()
            .map(|c| Island::open(c.clone(), &tables()).unwrap())
            .collect()
    };
    let cluster = |opened| Cluster::new(opened, vec![1, 1], Arc::new(Halves), Default::default());
    let opened = open(&configs);
    assert!(cluster(opened).is_ok());
    let mut swapped = open(&configs);
    swapped.swap(0, 1);
    let e = cluster(swapped).err().unwrap().to_string();
    assert!(e.contains("opened as island 1 of 2"), "{e}");
    let mut other = configs.clone();
    other[1].deployment = Some(1);
    other[1].log_dir = Some(dir.join("elsewhere"));
    let e = cluster(open(&other)).err().unwrap().to_string();
    assert!(e.contains("belongs to deployment"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
