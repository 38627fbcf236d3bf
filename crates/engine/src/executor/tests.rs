//! Distributed transactions through the real engine: a bank across islands.

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use super::fault::{Faults, FaultyTransport, Lossy};
use super::run::{run_to_completion, ClusterWorker};
use super::*;
use crate::cc::CcKind;
use crate::coord::{self, LogRec};
use crate::island::IslandConfig;
use crate::island::{Island, RecoveryReport};
use crate::proc::rng::FastRng;
use crate::proc::Workload;
use crate::route::RangeRouter;
use crate::route::Router;
use crate::storage::{Col, ColType, PrimaryKind, TableDef};
use crate::transport::frames;
use crate::transport::wire::{self, Frame};
use crate::txn::Txn;
use crate::{Abort, Error};

const ACCOUNTS: u16 = 0;
const RECEIPTS: u16 = 1;
const BAL: Col = Col(0);
const NAME: Col = Col(1);
/// Transfers in or out of the account: with the balance at the row's start
/// and the name between, a transfer changes two runs of words apart, which
/// the log records as two patches of the stored row (the name must survive
/// them, also when recovery restores a branch in doubt from its Prepare).
const TRANSFERS: Col = Col(2);
const INITIAL: i64 = 1000;

fn account_name(k: u64) -> Vec<u8> {
    format!("account number {k}, a name that spans several words").into_bytes()
}

/// Loads account `k` with the initial balance, its name and no transfers.
fn new_account(r: &mut crate::storage::schema::RowMut<'_>, k: u64) {
    r.set_i64(BAL, INITIAL);
    r.set_str(NAME, &account_name(k));
}

fn tables(accounts: u64) -> Vec<TableDef> {
    vec![
        TableDef::new(
            "accounts",
            &[
                ("balance", ColType::I64),
                ("name", ColType::Str(64)),
                ("transfers", ColType::I64),
            ],
            // Room for accounts closed and opened again: each transaction
            // context of an executor claims slots for its inserts in blocks
            // of 64, and a deleted row's slot goes back to the context that
            // deleted it.
            (1 << 16).max(2 * accounts),
            PrimaryKind::Hash,
        ),
        TableDef::new(
            "receipts",
            &[("amount", ColType::I64)],
            1 << 16,
            PrimaryKind::Hash,
        ),
    ]
}

/// Transfers between random accounts (anywhere), each writing a receipt on
/// the island of the source account, keyed by a number unique per request;
/// and, one request in ten, the close of an account (see
/// [`close_or_reopen`]). Money is conserved, and so is the number of
/// transfers the accounts count (two per receipt).
struct Bank {
    accounts: u64,
    requests: std::sync::atomic::AtomicU64,
}

fn bank(accounts: u64) -> Arc<Bank> {
    Arc::new(Bank {
        accounts,
        requests: Default::default(),
    })
}

#[derive(Default)]
struct Transfer {
    /// Close `from` into `to` (or open it again), instead of a transfer.
    close: bool,
    from: u64,
    to: u64,
    amount: i64,
    receipt: u64,
}

/// [`Bank`]'s transaction types.
const TRANSFER: usize = 0;
const CLOSE: usize = 1;

/// Closes account `from`, moving its balance and transfer count to account
/// `to`, and deletes it; if `from` is closed, opens it again, empty. `from`
/// is read without its write lock, so its delete takes the lock late (a
/// pending lock: see the `txn` module, "Locks and versions by operation"),
/// on whichever island holds it.
async fn close_or_reopen(tx: &mut Txn, from: u64, to: u64) -> Result<(), Abort> {
    let Some(a) = tx.get(ACCOUNTS, from).await? else {
        let h = tx
            .insert(ACCOUNTS, from)
            .await?
            .ok_or(Abort::User("the account was opened meanwhile"))?;
        tx.row_mut(h).set_str(NAME, &account_name(from));
        return Ok(());
    };
    let b = tx
        .get_for_update(ACCOUNTS, to)
        .await?
        .ok_or(Abort::User("no target account"))?;
    let (balance, transfers) = (tx.row(a).i64(BAL), tx.row(a).i64(TRANSFERS));
    let (to_balance, to_transfers) = (tx.row(b).i64(BAL), tx.row(b).i64(TRANSFERS));
    let mut row = tx.row_mut(b);
    row.set_i64(BAL, to_balance + balance);
    row.set_i64(TRANSFERS, to_transfers + transfers);
    tx.delete(a).await
}

impl Workload for Bank {
    type Req = Transfer;

    fn types(&self) -> Vec<&'static str> {
        vec!["transfer", "close"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Transfer) -> usize {
        req.close = rng.percent(10);
        req.from = rng.below(self.accounts);
        req.to = (req.from + 1 + rng.below(self.accounts - 1)) % self.accounts;
        req.amount = 1 + rng.below(50) as i64;
        // Receipt keys: the source account in the low bits (so it routes
        // with the account), a request number above (unique per request).
        let _ = worker;
        let n = self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        req.receipt = (n << 32) | req.from;
        if req.close {
            CLOSE
        } else {
            TRANSFER
        }
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a Transfer) -> Result<(), Abort> {
        if req.close {
            return close_or_reopen(tx, req.from, req.to).await;
        }
        transfer(tx, req).await
    }
}

/// Moves `req.amount` from `req.from` to `req.to`, counting the transfer on
/// both, and writes its receipt.
async fn transfer(tx: &mut Txn, req: &Transfer) -> Result<(), Abort> {
    let a = tx
        .get_for_update(ACCOUNTS, req.from)
        .await?
        .ok_or(Abort::User("no source account"))?;
    let b = tx
        .get_for_update(ACCOUNTS, req.to)
        .await?
        .ok_or(Abort::User("no target account"))?;
    for (h, delta) in [(a, -req.amount), (b, req.amount)] {
        let (balance, transfers) = (tx.row(h).i64(BAL), tx.row(h).i64(TRANSFERS));
        let mut row = tx.row_mut(h);
        row.set_i64(BAL, balance + delta);
        row.set_i64(TRANSFERS, transfers + 1);
    }
    if let Some(r) = tx.insert(RECEIPTS, req.receipt).await? {
        tx.row_mut(r).set_i64(BAL, req.amount);
    }
    Ok(())
}

/// Accounts and receipts live on the island of the account number (receipt
/// keys carry it in their low 32 bits).
struct BankRouter {
    per_island: u64,
    islands: u16,
}

impl Router for BankRouter {
    fn island_of(&self, table: u16, key: u64) -> Option<u16> {
        let account = if table == RECEIPTS {
            key & 0xffff_ffff
        } else {
            key
        };
        Some(((account / self.per_island) as u16).min(self.islands - 1))
    }
}

/// Island 0 runs one transaction; island 1 only serves.
fn client_and_server() -> Vec<ClusterWorker> {
    let mut w = clients(2, 1);
    w[1].limit = Some(0);
    w
}

/// One worker per island, each running `limit` transactions.
fn clients(islands: usize, limit: u64) -> Vec<ClusterWorker> {
    (0..islands)
        .map(|i| ClusterWorker {
            island: i,
            worker: 0,
            cpu: None,
            limit: Some(limit),
        })
        .collect()
}

fn open_cluster(
    islands: usize,
    accounts: u64,
    opts: ClusterOptions,
) -> (Arc<Cluster>, Vec<Island>) {
    open_cluster_with_workers(&vec![1; islands], accounts, opts)
}

/// Every account balance (0 for a closed account) and receipt of every
/// island, read after the run by fresh transactions (which also proves no
/// lock was left behind: no_wait would refuse a locked row).
fn contents(islands: &[Island], accounts: u64) -> (Vec<i64>, usize) {
    let (balances, _, receipts) = accounts_and_receipts(islands, accounts);
    (balances, receipts)
}

/// [`contents`], with each account's transfer count; checks that every
/// account kept its name.
fn accounts_and_receipts(islands: &[Island], accounts: u64) -> (Vec<i64>, Vec<i64>, usize) {
    let mut balances = vec![0; accounts as usize];
    let mut transfers = vec![0; accounts as usize];
    let mut receipts = 0;
    for island in islands {
        let t = island.catalog().table(ACCOUNTS);
        let mut keys = Vec::new();
        t.for_each_row(|k, _, _| keys.push(k));
        receipts += {
            let mut n = 0;
            island
                .catalog()
                .table(RECEIPTS)
                .for_each_row(|_, _, _| n += 1);
            n
        };
        let mut tx = island.worker().unwrap();
        for k in keys {
            let (balance, count, name) = tx
                .execute(0, |tx| {
                    Box::pin(async move {
                        let h = tx.get(ACCOUNTS, k).await?.expect("present");
                        let row = tx.row(h);
                        Ok((row.i64(BAL), row.i64(TRANSFERS), row.str(NAME).to_vec()))
                    })
                })
                .unwrap_or_else(|e| panic!("account {k} is not readable after the run: {e}"));
            assert_eq!(name, account_name(k), "account {k} lost its name");
            balances[k as usize] = balance;
            transfers[k as usize] = count;
        }
    }
    (balances, transfers, receipts)
}

fn check_bank(islands: &[Island], accounts: u64, stats: &[crate::proc::stats::WorkerStats]) {
    let (balances, transfers, receipts) = accounts_and_receipts(islands, accounts);
    assert_eq!(
        transfers.iter().sum::<i64>(),
        2 * receipts as i64,
        "every committed transfer (and only those) counted itself on both its accounts"
    );
    let total: i64 = balances.iter().sum();
    assert_eq!(
        total,
        INITIAL * accounts as i64,
        "money was created or destroyed"
    );
    let commits: u64 = stats.iter().map(|s| s.commits[TRANSFER]).sum();
    assert_eq!(
        receipts as u64, commits,
        "every committed transfer (and only those) left its receipt"
    );
}

#[test]
fn transfers_across_three_islands_conserve_money() {
    let opts = ClusterOptions {
        inflight: 4,
        ..Default::default()
    };
    let (cl, islands) = open_cluster(3, 90, opts);
    let workers = clients(3, 400);
    let stats = run_to_completion(&cl, &workers, bank(90), 7).unwrap();
    let distributed: u64 = stats.iter().map(|s| s.distributed).sum();
    let commits: u64 = stats.iter().map(|s| s.total_commits()).sum();
    let refused: u64 = stats.iter().map(|s| s.total_user_aborts()).sum();
    assert_eq!(
        commits + refused,
        1200,
        "every request commits eventually, or finds its account closed"
    );
    assert!(
        distributed > commits / 2,
        "most transfers span islands ({distributed} of {commits})"
    );
    let closes: u64 = stats.iter().map(|s| s.commits[CLOSE]).sum();
    assert!(closes > 50, "{closes} accounts closed or opened again");
    check_bank(&islands, 90, &stats);
}

/// A transport between 3 islands that drops, duplicates and delays batches
/// (seed from `ISLANDS_DIST_SEED`, else the process id ^ `salt`, printed),
/// and cluster options with timeouts short enough for the losses.
fn faulty_cluster(salt: u64) -> (u64, Arc<FaultyTransport>, ClusterOptions) {
    let seed: u64 = std::env::var("ISLANDS_DIST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64 ^ salt);
    eprintln!("fault seed {seed} (replay with ISLANDS_DIST_SEED={seed})");
    let faults = Faults {
        drop_pct: 3,
        duplicate_pct: 3,
        delay_pct: 10,
        max_delay: Duration::from_micros(500),
    };
    let transport = Arc::new(FaultyTransport::new(3, 4096, faults, seed));
    let opts = ClusterOptions {
        inflight: 4,
        op_timeout: Duration::from_millis(5),
        timeouts: coord::Timeouts {
            prepare_us: 5_000,
            commit_retry_us: 2_000,
            decision_retry_us: 3_000,
            branch_idle_us: 20_000,
        },
        transport: Some(transport.clone()),
        ..Default::default()
    };
    (seed, transport, opts)
}

#[test]
fn transfers_survive_lost_duplicated_and_reordered_messages() {
    let (seed, transport, opts) = faulty_cluster(0);
    let (cl, islands) = open_cluster(3, 60, opts);
    let workers = clients(3, 150);
    let stats = run_to_completion(&cl, &workers, bank(60), seed).unwrap();
    let dropped = transport.dropped.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        dropped > 0,
        "the transport dropped nothing: the test tests nothing"
    );
    check_bank(&islands, 60, &stats);
}

/// Remote operations that time out about as often as they are answered: a
/// reply may then wake a context whose attempt gave up in the same round and
/// whose next attempt already waits for a reply of its own. That wake is
/// spurious, not an error: the worker neither fails the request as one that
/// awaited something no executor delivers nor leaves the run hanging.
#[test]
fn replies_racing_timeouts_are_spurious_wakes_not_errors() {
    let (seed, transport, mut opts) = faulty_cluster(3);
    opts.op_timeout = Duration::from_micros(40);
    let (cl, islands) = open_cluster(3, 60, opts);
    let stats = run_to_completion(&cl, &clients(3, 150), bank(60), seed).unwrap();
    assert!(transport.dropped.load(std::sync::atomic::Ordering::Relaxed) > 0);
    let timed_out: u64 = stats
        .iter()
        .map(|s| s.aborts[crate::AbortReason::Remote.index()])
        .sum();
    assert!(
        timed_out > 0,
        "no operation timed out: the test tests nothing"
    );
    check_bank(&islands, 60, &stats);
}

#[test]
fn one_island_and_three_islands_end_in_the_same_state() {
    let mut results = Vec::new();
    for n in [1usize, 3] {
        // One transaction at a time, commit included: the same sequence.
        let opts = ClusterOptions {
            inflight: 1,
            commit_window: 0,
            ..Default::default()
        };
        let (cl, islands) = open_cluster(n, 60, opts);
        let workers: Vec<ClusterWorker> = (0..n)
            .map(|i| ClusterWorker {
                island: i,
                worker: 0,
                cpu: None,
                limit: Some(if i == 0 { 300 } else { 0 }),
            })
            .collect();
        let stats = run_to_completion(&cl, &workers, bank(60), 99).unwrap();
        assert_eq!(stats[0].total_commits() + stats[0].total_user_aborts(), 300);
        results.push(contents(&islands, 60));
    }
    assert_eq!(results[0], results[1], "1ISL and 3ISL disagree");
}

#[test]
fn malformed_batches_and_frames_are_counted_not_executed() {
    let faults = Faults::NONE;
    let transport = Arc::new(FaultyTransport::new(2, 64, faults, 1));
    let opts = ClusterOptions {
        transport: Some(transport.clone()),
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 10, opts);
    let mut ex = cl.executor(1, 0).unwrap();
    // A frame of an unknown kind, a GET for a table that does not exist,
    // a write for an account (valid but for no branch), then a truncated frame.
    let mut batch = Vec::new();
    crate::transport::push_frame(&mut batch, &[0x7f, 1, 2]);
    crate::transport::push_frame_with(&mut batch, |b| wire::get(b, 1, 0, 9, 7, false));
    crate::transport::push_frame_with(&mut batch, |b| wire::write(b, 1, ACCOUNTS, 7, &[0; 8]));
    batch.extend_from_slice(&[200, 0, 0, 0, 1]);
    transport.send(Endpoint(0), Endpoint(1), batch).unwrap();
    ex.pump().unwrap();
    assert_eq!(
        cl.stats
            .malformed
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
    assert_eq!(cl.stats.remote_ops(), 0);
    // The write for no branch changed nothing.
    let (balances, _) = contents(&islands, 10);
    assert!(balances.iter().all(|&b| b == INITIAL));
}

#[test]
fn islands_in_a_cluster_must_run_no_wait() {
    let defs = tables(10);
    let opts = ClusterOptions::default();
    let mut cfg = IslandConfig::new(CcKind::Occ, 1);
    cfg.contexts = opts.contexts_needed(1);
    let a = Island::open(cfg.clone(), &defs).unwrap();
    let b = Island::open(cfg, &defs).unwrap();
    let router = Arc::new(BankRouter {
        per_island: 5,
        islands: 2,
    });
    let err = Cluster::new(vec![a, b], vec![1, 1], router, opts)
        .err()
        .expect("occ islands refused");
    assert!(err.to_string().contains("no_wait"), "{err}");
}

/// Transfers between the accounts of each worker's own island (`per_island`
/// accounts each, workers island after island).
struct IslandBank {
    per_island: u64,
    workers_per_island: usize,
    requests: std::sync::atomic::AtomicU64,
}

impl Workload for IslandBank {
    type Req = Transfer;

    fn types(&self) -> Vec<&'static str> {
        vec!["transfer"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Transfer) -> usize {
        let base = (worker / self.workers_per_island) as u64 * self.per_island;
        let from = rng.below(self.per_island);
        req.from = base + from;
        req.to = base + (from + 1 + rng.below(self.per_island - 1)) % self.per_island;
        req.amount = 1 + rng.below(50) as i64;
        let n = self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        req.receipt = (n << 32) | req.from;
        TRANSFER
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a Transfer) -> Result<(), Abort> {
        transfer(tx, req).await
    }
}

#[test]
fn every_scheme_serves_islands_whose_transactions_keep_to_their_own_rows() {
    let per_island = 20;
    for cc in [CcKind::None, CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let w = if cc == CcKind::None { 1 } else { 2 };
        let islands: Vec<Island> = (0..2u64)
            .map(|i| {
                let mut cfg = IslandConfig::new(cc, w);
                cfg.name = format!("island-{i}");
                let (island, _) = Island::open(cfg, &tables(2 * per_island)).unwrap();
                let mut l = island.loader().unwrap();
                for k in i * per_island..(i + 1) * per_island {
                    l.put(ACCOUNTS, k, |r| new_account(r, k)).unwrap();
                }
                drop(l);
                island
            })
            .collect();
        let cl = Cluster::local(islands.clone(), vec![w, w], ClusterOptions::default())
            .unwrap_or_else(|e| panic!("{cc}: {e}"));
        let workers: Vec<ClusterWorker> = (0..2)
            .flat_map(|i| {
                (0..w).map(move |worker| ClusterWorker {
                    island: i,
                    worker,
                    cpu: None,
                    limit: Some(300),
                })
            })
            .collect();
        let wl = Arc::new(IslandBank {
            per_island,
            workers_per_island: w,
            requests: Default::default(),
        });
        let stats = run_to_completion(&cl, &workers, wl, 5).unwrap_or_else(|e| panic!("{cc}: {e}"));
        let commits: u64 = stats.iter().map(|s| s.total_commits()).sum();
        assert_eq!(commits, 300 * 2 * w as u64, "{cc}: every transfer commits");
        assert_eq!(cl.stats.remote_ops(), 0);
        // Each island's money stays on it, and every transfer left its receipt.
        let (balances, receipts) = contents(&islands, 2 * per_island);
        for (i, island) in balances.chunks(per_island as usize).enumerate() {
            let total: i64 = island.iter().sum();
            assert_eq!(total, INITIAL * per_island as i64, "{cc}: island {i}");
        }
        assert_eq!(receipts as u64, commits, "{cc}");
    }
}

#[test]
fn a_worker_with_nothing_to_run_leaves_a_cluster_without_a_router() {
    let mut cfg = IslandConfig::new(CcKind::Occ, 2);
    cfg.name = "island-0".into();
    let (island, _) = Island::open(cfg, &tables(20)).unwrap();
    let mut l = island.loader().unwrap();
    for k in 0..20 {
        l.put(ACCOUNTS, k, |r| new_account(r, k)).unwrap();
    }
    drop(l);
    let cl = Cluster::local(vec![island], vec![2], ClusterOptions::default()).unwrap();
    let workers = [Some(50), Some(0)].map(|limit| ClusterWorker {
        island: 0,
        worker: limit.map_or(0, |l: u64| usize::from(l == 0)),
        cpu: None,
        limit,
    });
    let wl = Arc::new(IslandBank {
        per_island: 20,
        workers_per_island: 2,
        requests: Default::default(),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_to_completion(&cl, &workers, wl, 1).map(|s| s[0].total_commits()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the run ends once its one client is done");
    assert_eq!(r.unwrap(), 50);
}

/// Transfers and audits: an audit reads every account of every island in one
/// transaction (a read-only distributed transaction, committed with one-way
/// releases when nothing is synced) and must see the exact total.
struct Audited {
    bank: Arc<Bank>,
    all: Vec<u64>,
}

#[derive(Default)]
struct AuditReq {
    audit: bool,
    t: Transfer,
    seen: std::cell::Cell<i64>,
}

impl Workload for Audited {
    type Req = AuditReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["transfer", "audit", "close"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut AuditReq) -> usize {
        req.audit = rng.percent(25);
        let ty = self.bank.next(worker, rng, &mut req.t);
        match (req.audit, ty) {
            (true, _) => 1,
            (false, CLOSE) => 2,
            (false, _) => 0,
        }
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a AuditReq) -> Result<(), Abort> {
        if !req.audit {
            return self.bank.run(tx, &req.t).await;
        }
        tx.get_many(ACCOUNTS, &self.all, false).await?;
        let mut sum = 0;
        for i in 0..self.all.len() {
            // A closed account holds nothing.
            if let Some(h) = tx.many_row(i) {
                sum += tx.row(h).i64(BAL);
            }
        }
        req.seen.set(sum);
        Ok(())
    }

    /// What a committed audit saw is checked; a running one may see a total
    /// that no serial order shows when a branch it read from was aborted
    /// after idling, and it then does not commit.
    fn committed(&self, _w: usize, req: &AuditReq) {
        assert!(
            !req.audit || req.seen.get() == INITIAL * self.all.len() as i64,
            "a committed audit saw a total of {}",
            req.seen.get()
        );
    }
}

#[test]
fn audits_across_islands_see_a_constant_total() {
    let opts = ClusterOptions {
        inflight: 4,
        ..Default::default()
    };
    let (cl, islands) = open_cluster(3, 60, opts);
    let workers = clients(3, 300);
    let w = Arc::new(Audited {
        bank: bank(60),
        all: (0..60).collect(),
    });
    let stats = run_to_completion(&cl, &workers, w, 11).expect("no audit saw a wrong total");
    let audits: u64 = stats.iter().map(|s| s.commits[1]).sum();
    assert!(audits > 50, "audits committed: {audits}");
    let closes: u64 = stats.iter().map(|s| s.commits[2]).sum();
    assert!(closes > 10, "{closes} accounts closed or opened again");
    let (balances, _) = contents(&islands, 60);
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * 60);
}

/// The same audits with every timeout of the commit path a few hundred
/// microseconds to a few milliseconds: operations, prepares and idle branches
/// time out all the time, as they do rarely on a loaded machine with the
/// defaults, and every such path must keep the total constant.
#[test]
fn audits_across_islands_see_a_constant_total_when_everything_times_out() {
    let opts = ClusterOptions {
        inflight: 4,
        op_timeout: Duration::from_micros(300),
        timeouts: coord::Timeouts {
            prepare_us: 400,
            commit_retry_us: 300,
            decision_retry_us: 500,
            branch_idle_us: 1_500,
        },
        ..Default::default()
    };
    let (cl, islands) = open_cluster(3, 60, opts);
    let workers = clients(3, 400);
    let w = Arc::new(Audited {
        bank: bank(60),
        all: (0..60).collect(),
    });
    let stats = run_to_completion(&cl, &workers, w, 12).expect("no audit saw a wrong total");
    let audits: u64 = stats.iter().map(|s| s.commits[1]).sum();
    assert!(audits > 10, "audits committed: {audits}");
    let (balances, _) = contents(&islands, 60);
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * 60);
}

/// Transfers that prepare their remote side first ([`Txn::prepare_remote`]):
/// the source account is on the worker's own island, the target anywhere;
/// the target (maybe remote) is updated and prepared, then the source and the
/// receipt. Audits read every account of other islands, prepare, then read
/// this island's accounts: the remote branches must hold their read locks
/// until the decision, or a transfer committing in between shows in the sum.
struct EarlyBank {
    bank: Arc<Bank>,
    per_island: u64,
    islands: u64,
    audit_pct: u64,
}

#[derive(Default)]
struct EarlyReq {
    audit: bool,
    t: Transfer,
    home: Vec<u64>,
    away: Vec<u64>,
}

impl Workload for EarlyBank {
    type Req = EarlyReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["transfer", "audit"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut EarlyReq) -> usize {
        // One worker per island in these tests: worker i is on island i.
        let island = worker as u64;
        let lo = island * self.per_island;
        let hi = ((island + 1) * self.per_island).min(self.bank.accounts);
        self.bank.next(worker, rng, &mut req.t);
        req.t.from = lo + rng.below(hi - lo);
        if req.t.to == req.t.from {
            req.t.to = (req.t.from + 1) % self.bank.accounts;
        }
        req.t.receipt = (req.t.receipt & !0xffff_ffff) | req.t.from;
        req.audit = rng.percent(self.audit_pct as u32);
        req.home = (lo..hi).collect();
        req.away = (0..self.bank.accounts)
            .filter(|k| !(lo..hi).contains(k))
            .collect();
        let _ = self.islands;
        req.audit as usize
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a EarlyReq) -> Result<(), Abort> {
        if req.audit {
            tx.get_many(ACCOUNTS, &req.away, false).await?;
            let mut sum = 0;
            for i in 0..req.away.len() {
                sum += tx
                    .row(tx.many_row(i).ok_or(Abort::User("no account"))?)
                    .i64(BAL);
            }
            tx.prepare_remote().await?;
            tx.get_many(ACCOUNTS, &req.home, false).await?;
            for i in 0..req.home.len() {
                sum += tx
                    .row(tx.many_row(i).ok_or(Abort::User("no account"))?)
                    .i64(BAL);
            }
            let all = (req.home.len() + req.away.len()) as i64;
            if sum != INITIAL * all {
                return Err(Abort::Failed(Error::Config(format!(
                    "an audit saw a total of {sum}, not {}",
                    INITIAL * all
                ))));
            }
            return Ok(());
        }
        let t = &req.t;
        let b = tx
            .get_for_update(ACCOUNTS, t.to)
            .await?
            .ok_or(Abort::User("no target account"))?;
        let bb = tx.row(b).i64(BAL);
        tx.row_mut(b).set_i64(BAL, bb + t.amount);
        tx.prepare_remote().await?;
        let a = tx
            .get_for_update(ACCOUNTS, t.from)
            .await?
            .ok_or(Abort::User("no source account"))?;
        let ba = tx.row(a).i64(BAL);
        tx.row_mut(a).set_i64(BAL, ba - t.amount);
        if let Some(r) = tx.insert(RECEIPTS, t.receipt).await? {
            tx.row_mut(r).set_i64(BAL, t.amount);
        }
        Ok(())
    }
}

fn early_bank(accounts: u64, islands: u64, audit_pct: u64) -> Arc<EarlyBank> {
    Arc::new(EarlyBank {
        bank: bank(accounts),
        per_island: accounts.div_ceil(islands),
        islands,
        audit_pct,
    })
}

#[test]
fn early_prepared_transfers_and_audits_conserve_money() {
    let opts = ClusterOptions {
        inflight: 4,
        ..Default::default()
    };
    let (cl, islands) = open_cluster(3, 120, opts);
    let workers = clients(3, 300);
    let stats = run_to_completion(&cl, &workers, early_bank(120, 3, 10), 5)
        .expect("no audit saw a wrong total");
    let audits: u64 = stats.iter().map(|s| s.commits[1]).sum();
    let transfers: u64 = stats.iter().map(|s| s.commits[0]).sum();
    let distributed: u64 = stats.iter().map(|s| s.distributed).sum();
    assert_eq!(audits + transfers, 900);
    assert!(
        audits > 40 && transfers > 600,
        "{audits} audits, {transfers} transfers"
    );
    assert!(
        distributed > 600,
        "only {distributed} commits were distributed"
    );
    let (balances, receipts) = contents(&islands, 120);
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * 120);
    assert_eq!(
        receipts as u64, transfers,
        "one receipt per committed transfer"
    );
}

#[test]
fn early_prepared_transfers_survive_lost_duplicated_and_reordered_messages() {
    let (seed, transport, opts) = faulty_cluster(0x5eed);
    let (cl, islands) = open_cluster(3, 120, opts);
    let workers = clients(3, 150);
    let stats = run_to_completion(&cl, &workers, early_bank(120, 3, 10), seed)
        .expect("no audit saw a wrong total");
    assert!(
        transport.dropped.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the transport dropped nothing: the test tests nothing"
    );
    let transfers: u64 = stats.iter().map(|s| s.commits[0]).sum();
    let (balances, receipts) = contents(&islands, 120);
    assert_eq!(
        balances.iter().sum::<i64>(),
        INITIAL * 120,
        "money was created or destroyed"
    );
    assert_eq!(
        receipts as u64, transfers,
        "one receipt per committed transfer"
    );
}

/// After `prepare_remote`, what could not reach the other islands any more.
struct Misuse {
    /// 0: a remote read after prepare_remote; 1: a change to a remote row.
    what: u8,
}

impl Workload for Misuse {
    type Req = Transfer;

    fn types(&self) -> Vec<&'static str> {
        vec!["misuse"]
    }

    fn next(&self, _: usize, _: &mut FastRng, _: &mut Transfer) -> usize {
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, _: &'a Transfer) -> Result<(), Abort> {
        // Island 0 runs it; accounts 5..10 are on island 1.
        let h = tx
            .get_for_update(ACCOUNTS, 7)
            .await?
            .ok_or(Abort::User("no account"))?;
        tx.prepare_remote().await?;
        if self.what == 0 {
            tx.get(ACCOUNTS, 8).await?;
        } else {
            tx.row_mut(h).set_i64(BAL, 0);
        }
        Ok(())
    }
}

#[test]
fn remote_work_after_prepare_remote_fails_with_a_clear_error() {
    for (what, expect) in [
        (0u8, "after prepare_remote"),
        (1, "changed after prepare_remote"),
    ] {
        let (cl, islands) = open_cluster(2, 10, ClusterOptions::default());
        let workers = client_and_server();
        let Err(err) = run_to_completion(&cl, &workers, Arc::new(Misuse { what }), 1) else {
            panic!("the misuse fails the run");
        };
        assert!(err.to_string().contains(expect), "{err}");
        // Nothing was applied and no lock was left behind.
        let (balances, _) = contents(&islands, 10);
        assert!(balances.iter().all(|&b| b == INITIAL), "{balances:?}");
    }
}

/// Runs right after a participant installs a committed branch (and released
/// its locks), on that participant's worker thread: the window in which a
/// later transaction of the island can write the same row.
/// Only the cluster it names (by address) calls it: tests run in parallel.
type InstallHook = (usize, Box<dyn FnMut(Gtid) + Send>);
static AFTER_INSTALL: std::sync::Mutex<Option<InstallHook>> = std::sync::Mutex::new(None);

pub(super) fn after_branch_install(cl: &Arc<Cluster>, gtid: Gtid) {
    let mut hook = AFTER_INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((target, f)) = hook.as_mut() {
        if *target == Arc::as_ptr(cl) as usize {
            f(gtid);
        }
    }
}

/// Columns the test sets: the first and the last of a wide row.
const WIDE: u16 = 0;
const COL_A: Col = Col(0);
const COL_B: Col = Col(7);

/// One distributed transaction: sets column A of key 0 (island 0, home) and
/// of key 5 (island 1).
struct SetA;

impl Workload for SetA {
    type Req = Transfer;
    fn types(&self) -> Vec<&'static str> {
        vec!["set-a"]
    }
    fn next(&self, _: usize, _: &mut FastRng, _: &mut Transfer) -> usize {
        0
    }
    async fn run<'a>(&'a self, tx: &'a mut Txn, _: &'a Transfer) -> Result<(), Abort> {
        for (k, v) in [(0u64, 1i64), (5, 7)] {
            let h = tx
                .get_for_update(WIDE, k)
                .await?
                .ok_or(Abort::User("missing row"))?;
            tx.row_mut(h).set_i64(COL_A, v);
        }
        Ok(())
    }
}

struct SplitRouter;

impl Router for SplitRouter {
    fn island_of(&self, _: u16, key: u64) -> Option<u16> {
        Some(u16::from(key >= 4))
    }
}

/// The configuration of island `i` of a one-worker `no_wait` cluster that
/// logs in `sync` mode to `dir/island-<i>`.
fn sync_island_config(
    dir: &std::path::Path,
    contexts: usize,
) -> impl Fn(usize) -> IslandConfig + '_ {
    logged_island_config(dir, contexts, crate::wal::Durability::Sync)
}

/// [`sync_island_config`] with another durability mode.
fn logged_island_config(
    dir: &std::path::Path,
    contexts: usize,
    durability: crate::wal::Durability,
) -> impl Fn(usize) -> IslandConfig + '_ {
    move |i| {
        let mut cfg = IslandConfig::new(CcKind::NoWait, 1)
            .durable(durability, dir.join(format!("island-{i}")));
        cfg.name = format!("island-{i}");
        cfg.contexts = contexts;
        cfg
    }
}

/// A directory of its own for one test's logs (not created).
fn fresh_dir(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "islands-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

/// A participant logs its commit decision before it installs the branch, so
/// a transaction of the same island that writes the row right after the
/// install logs after the decision. Replay applies updates by version and
/// patches (changed words only) on top of the image they were made against:
/// were the later patch logged first, replay would apply it and then skip
/// the branch's older version, losing column A. The hook runs that later
/// transaction (setting column B) in exactly that window, deterministically.
#[test]
fn a_write_right_after_a_branch_installs_recovers_after_it() {
    let dir = fresh_dir("install-order");
    // Wide enough that changing one column logs a patch, not the row.
    let names: Vec<String> = (0..8).map(|c| format!("c{c}")).collect();
    let cols: Vec<(&str, ColType)> = names.iter().map(|n| (n.as_str(), ColType::I64)).collect();
    let defs = vec![TableDef::new("wide", &cols, 16, PrimaryKind::Hash)];
    let opts = ClusterOptions::default();
    let contexts = opts.contexts_needed(1);
    let config = |i: usize| {
        // Island 1 has a spare worker slot for the hook's transaction.
        let mut cfg = IslandConfig::new(CcKind::NoWait, 1 + i).durable(
            crate::wal::Durability::Sync,
            dir.join(format!("island-{i}")),
        );
        cfg.name = format!("island-{i}");
        cfg.contexts = contexts;
        cfg
    };
    let mut opened = Vec::new();
    for i in 0..2usize {
        let (island, _) = Island::open(config(i), &defs).unwrap();
        {
            let mut l = island.loader().unwrap();
            let k = if i == 0 { 0 } else { 5 };
            l.put(WIDE, k, |r| r.set_i64(COL_A, -1)).unwrap();
        }
        // Loaded rows are durable from a checkpoint, not the log.
        island.checkpoint().unwrap();
        opened.push((island, Default::default()));
    }
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let mut later = handles[1].worker().unwrap();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran2 = Arc::clone(&ran);
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(SplitRouter), opts).unwrap();
    let hook: Box<dyn FnMut(Gtid) + Send> = Box::new(move |_| {
        later
            .execute(0, |tx| {
                Box::pin(async move {
                    let h = tx.get_for_update(WIDE, 5).await?.expect("row 5");
                    assert_eq!(tx.row(h).i64(COL_A), 7, "the branch is installed");
                    tx.row_mut(h).set_i64(COL_B, 9);
                    Ok(())
                })
            })
            .expect("the later transaction commits");
        ran2.store(true, std::sync::atomic::Ordering::Release);
    });
    *AFTER_INSTALL.lock().unwrap() = Some((Arc::as_ptr(&cl) as usize, hook));
    let workers = client_and_server();
    let stats = run_to_completion(&cl, &workers, Arc::new(SetA), 7).unwrap();
    *AFTER_INSTALL.lock().unwrap() = None;
    assert!(
        ran.load(std::sync::atomic::Ordering::Acquire),
        "the hook ran"
    );
    assert_eq!(stats.iter().map(|s| s.distributed).sum::<u64>(), 1);
    drop(cl);
    for h in &handles {
        h.shutdown();
    }
    drop(handles);
    // Recover island 1 from its log alone: both columns must be there.
    let (island, report) = Island::open(config(1), &defs).unwrap();
    let mut tx = island.worker().unwrap();
    let (a, b) = tx
        .execute(0, |tx| {
            Box::pin(async move {
                let h = tx.get(WIDE, 5).await?.expect("row 5");
                Ok((tx.row(h).i64(COL_A), tx.row(h).i64(COL_B)))
            })
        })
        .unwrap();
    assert_eq!((a, b), (7, 9), "row 5 after recovery ({report:?})");
    drop(tx);
    island.shutdown();
    drop(island);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A participant that committed its branch and forgot it has nothing left
/// to do, but its acknowledgement was lost: the coordinator resends the
/// commit and needs a second one. The participant's worker must not leave
/// before that, however long it has been idle, or the coordinator's worker
/// waits forever.
#[test]
fn a_lost_commit_acknowledgement_is_resent_before_the_workers_leave() {
    let no_faults = Faults::NONE;
    let transport = Arc::new(FaultyTransport::new(2, 64, no_faults, 1));
    transport.lose_once(|batch| {
        frames(batch).any(|f| {
            matches!(
                f.ok().and_then(|p| wire::decode(p).ok()),
                Some(Frame::Coord(coord::Msg::CommitConf { .. }))
            )
        })
    });
    let opts = ClusterOptions {
        transport: Some(transport.clone()),
        timeouts: coord::Timeouts {
            commit_retry_us: 20_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 10, opts);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let run = {
        let cl = Arc::clone(&cl);
        std::thread::spawn(move || {
            // Account 0 (island 0) pays account 9 (island 1).
            let r = run_to_completion(&cl, &client_and_server(), Arc::new(OneTransfer), 1);
            let _ = done_tx.send(());
            r
        })
    };
    assert!(
        done_rx.recv_timeout(Duration::from_secs(20)).is_ok(),
        "the run did not end: a worker left while its coordinator still waited"
    );
    let stats = run.join().expect("no panic").unwrap();
    assert_eq!(
        transport.dropped.load(Ordering::Relaxed),
        1,
        "no acknowledgement was lost"
    );
    assert_eq!(stats[0].distributed, 1);
    let (balances, _) = contents(&islands, 10);
    assert_eq!(balances[0], INITIAL - 7);
    assert_eq!(balances[9], INITIAL + 7);
}

/// Island 0's account 0 pays 7 to island 1's account 9.
struct OneTransfer;

impl Workload for OneTransfer {
    type Req = ();

    fn types(&self) -> Vec<&'static str> {
        vec!["transfer"]
    }

    fn next(&self, _: usize, _: &mut FastRng, _: &mut ()) -> usize {
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, _: &'a ()) -> Result<(), Abort> {
        move_money(tx, &[(0, -7), (9, 7)]).await
    }
}

/// A coordinator that recovers a commit decision without its End keeps the
/// decision's batch pinned until the End. A checkpoint taken while a
/// participant has not acknowledged must not drop the decision: a second
/// crash would then make the coordinator forget the commit and answer that
/// participant "abort" (presumed abort) while the others committed.
#[test]
fn a_recovered_decision_outlives_a_checkpoint_until_its_end() {
    let dir = fresh_dir("repin");
    let defs = tables(8);
    let opts = ClusterOptions::default();
    let config = sync_island_config(&dir, opts.contexts_needed(1));
    let g = coord::gtid(0, 5 << WORKER_BITS);
    let decided = LogRec::Decision {
        gtid: g,
        commit: true,
    };
    // What a crash left: island 0 (home) decided commit, island 1 prepared.
    {
        let (home, _) = Island::open(config(0), &defs).unwrap();
        home.shared().log_record(|l| l.decision(g, true), false);
        home.shutdown();
        let (part, _) = Island::open(config(1), &defs).unwrap();
        part.shared().log_record(
            |l| {
                l.prepare_begin(g, 1);
                l.record_end();
            },
            false,
        );
        part.shutdown();
    }
    let opened: Vec<(Island, RecoveryReport)> = (0..2)
        .map(|i| Island::open(config(i), &defs).unwrap())
        .collect();
    assert!(opened[0].1.two_pc.contains(&decided));
    assert_eq!(opened[1].1.in_doubt.len(), 1);
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(SplitRouter), opts).unwrap();
    // Island 1 never runs: the commit waits for its acknowledgement.
    let mut ex = cl.executor(0, 0).unwrap();
    ex.pump().unwrap();
    assert_eq!(
        ex.coord.in_flight(),
        1,
        "the recovered commit is unfinished"
    );
    handles[0].checkpoint().unwrap();
    drop(ex);
    drop(cl);
    for h in &handles {
        h.shutdown();
    }
    drop(handles);
    let (home, report) = Island::open(config(0), &defs).unwrap();
    assert!(
        report.two_pc.contains(&decided),
        "the checkpoint dropped the decision of an unfinished commit: {:?}",
        report.two_pc
    );
    home.shutdown();
    drop(home);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens a fresh island, gives each account in `keys` the initial balance
/// and checkpoints it (the starting state of a crash scenario).
fn open_with_accounts(cfg: IslandConfig, defs: &[TableDef], keys: std::ops::Range<u64>) -> Island {
    let (island, _) = Island::open(cfg, defs).unwrap();
    {
        let mut l = island.loader().unwrap();
        for k in keys {
            l.put(ACCOUNTS, k, |r| new_account(r, k)).unwrap();
        }
    }
    island.checkpoint().unwrap();
    island
}

/// Recovery pins what it found unfinished from the moment the island opens,
/// not only once executors take it over: a checkpoint taken in between (an
/// operator's, or one right after opening) must keep a branch in doubt and
/// its coordinator's commit decision; dropping them would let a second
/// crash erase the branch from the participant, and the home's committed
/// transfer would lose its credit on island 1. Once the executors have
/// resolved everything, no pin is left behind to hold the log forever.
#[test]
fn what_recovery_found_in_doubt_outlives_a_checkpoint_before_the_executors() {
    in_doubt_across_a_checkpoint_and_a_restart(0);
}

/// The same, when the transaction's home worker (1) does not exist in the
/// restarted cluster (one worker per island, as `islands tpcc check` runs
/// it): one of today's workers must coordinate it, or island 1's
/// DecisionReq goes to endpoint (0, 1), island 1's own worker, and the
/// branch stays in doubt.
#[test]
fn a_transaction_of_a_worker_that_is_gone_is_resolved_after_a_restart() {
    in_doubt_across_a_checkpoint_and_a_restart(1);
}

/// Leaves in the logs of islands 0 and 1 (configured by `config`, 4
/// accounts each) what a crash leaves of transfer `g` of 70 from account 0
/// to account 5: island 0 (home) debited account 0 and decided commit;
/// island 1 prepared the credit of account 5 and heard nothing.
fn leave_a_transfer_in_doubt(config: &dyn Fn(usize) -> IslandConfig, defs: &[TableDef], g: Gtid) {
    let credited = (INITIAL + 70) as u64;
    for i in 0..2u64 {
        let island = open_with_accounts(config(i as usize), defs, 4 * i..4 * i + 4);
        island.shared().log_record(
            |l| {
                if i == 0 {
                    l.prepare_begin(g, 1);
                    let debited = (INITIAL - 70) as u64;
                    l.patch(
                        ACCOUNTS,
                        0,
                        0,
                        crate::storage::schema::row_bytes(&[debited]),
                    );
                    l.record_end();
                    l.decision(g, true);
                } else {
                    l.prepare_begin(g, 1);
                    l.patch(
                        ACCOUNTS,
                        5,
                        0,
                        crate::storage::schema::row_bytes(&[credited]),
                    );
                    l.record_end();
                }
            },
            false,
        );
        island.shutdown();
    }
}

fn in_doubt_across_a_checkpoint_and_a_restart(home_worker: u64) {
    let dir = fresh_dir(&format!("recovery-pins-{home_worker}"));
    let defs = tables(8);
    let opts = ClusterOptions::default();
    let config = sync_island_config(&dir, opts.contexts_needed(1));
    let g = coord::gtid(0, 5 << WORKER_BITS | home_worker);
    leave_a_transfer_in_doubt(&config, &defs, g);
    // Opened and checkpointed before any executor starts, then a crash.
    for i in 0..2 {
        let (island, report) = Island::open(config(i), &defs).unwrap();
        assert_eq!(report.in_doubt.len(), usize::from(i == 1));
        island.checkpoint().unwrap();
        island.shutdown();
    }
    let opened: Vec<(Island, RecoveryReport)> = (0..2)
        .map(|i| Island::open(config(i), &defs).unwrap())
        .collect();
    assert!(
        opened[0].1.two_pc.contains(&LogRec::Decision {
            gtid: g,
            commit: true
        }),
        "the checkpoint dropped the home's commit decision: {:?}",
        opened[0].1.two_pc
    );
    assert_eq!(
        opened[1].1.in_doubt.len(),
        1,
        "the checkpoint dropped island 1's prepared branch"
    );
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(SplitRouter), opts).unwrap();
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    settle(&mut [&mut home, &mut part], deadline);
    drop((home, part));
    drop(cl);
    let (balances, _) = contents(&handles, 8);
    assert_eq!(
        (balances[0], balances[5]),
        (INITIAL - 70, INITIAL + 70),
        "the transfer committed on both islands"
    );
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(
            h.shared().log.lock().pinned(),
            0,
            "island {i} still pins log batches after everything was resolved"
        );
        h.shutdown();
    }
    drop(handles);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A home island that aborted a transaction logs nothing about it (presumed
/// abort), yet a participant may hold its branch prepared across a crash
/// (the AbortReq was lost, or arrived after the crash). After a restart the
/// home must never hand out that gtid again: the participant's DecisionReq
/// would then reach a coordinator committing a different transaction of the
/// same name, and the aborted branch would commit with it.
#[test]
fn a_restarted_home_never_reuses_the_gtid_of_a_branch_in_doubt() {
    let dir = fresh_dir("gtid-reuse");
    let defs = tables(9);
    let opts = ClusterOptions::default();
    let config = sync_island_config(&dir, opts.contexts_needed(1));
    // The first gtid worker 0 of island 0 hands out in its second
    // incarnation (the first one made the database), were it seeded by its
    // gtid reservation alone: the logs of the other islands must lift it.
    let old = coord::gtid(0, (1 + coord::GTID_RESERVE) << WORKER_BITS);
    // What a crash left: three islands of three accounts each; island 1
    // prepared a branch of `old` that credits account 3 with 500, and the
    // home (island 0) had aborted `old` without a trace in its log.
    for i in 0..3u64 {
        let island = open_with_accounts(config(i as usize), &defs, 3 * i..3 * i + 3);
        if i == 1 {
            let credited = (INITIAL + 500) as u64;
            island.shared().log_record(
                |l| {
                    l.prepare_begin(old, 1);
                    l.patch(
                        ACCOUNTS,
                        3,
                        0,
                        crate::storage::schema::row_bytes(&[credited]),
                    );
                    l.record_end();
                },
                false,
            );
        }
        island.shutdown();
    }
    let opened: Vec<(Island, RecoveryReport)> = (0..3)
        .map(|i| Island::open(config(i), &defs).unwrap())
        .collect();
    assert_eq!(opened[1].1.in_doubt.len(), 1, "island 1 is in doubt");
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let router = Arc::new(BankRouter {
        per_island: 3,
        islands: 3,
    });
    let cl = Cluster::new(opened, vec![1, 1, 1], router, opts).unwrap();
    let mut home = cl.executor(0, 0).unwrap();
    let mut other = cl.executor(2, 0).unwrap();
    // A transfer from account 0 (island 0) to account 6 (island 2), driven
    // by hand until its commit is decided and durable but not acknowledged.
    use std::future::Future;
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context lives as long as the executor, which outlives the
    // procedure; the executor touches it only between polls.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let mut proc = std::pin::pin!(async move {
        for (key, delta) in [(0u64, -7i64), (6, 7)] {
            let h = tx
                .get_for_update(ACCOUNTS, key)
                .await?
                .ok_or(Abort::User("no account"))?;
            let b = tx.row(h).i64(BAL);
            tx.row_mut(h).set_i64(BAL, b + delta);
        }
        Ok::<(), Abort>(())
    });
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match proc.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => break r.unwrap(),
            std::task::Poll::Pending => {
                assert_eq!(home.send_request(c), Some(true));
                while !home.woken.contains(&c) {
                    assert!(std::time::Instant::now() < deadline, "no reply");
                    home.pump().unwrap();
                    other.pump().unwrap();
                }
                home.woken.clear();
            }
        }
    }
    let Ok(HomeCommit::Distributed(g)) = home.commit_home(c) else {
        panic!("the transfer commits with 2PC");
    };
    // Island 2 prepares and votes; the home decides and makes it durable
    // (island 2 is not pumped then, so the commit stays unacknowledged).
    while home.coord.missing_votes(g).is_some() {
        assert!(std::time::Instant::now() < deadline, "no votes");
        home.pump().unwrap();
        other.pump().unwrap();
    }
    while !home.forces.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no decision");
        home.pump().unwrap();
    }
    assert!(home.coord.holds(g), "decided, not yet acknowledged");
    // Island 1's worker starts only now (or its first DecisionReq was
    // lost): it asks the home about `old`.
    let mut part = cl.executor(1, 0).unwrap();
    for _ in 0..3 {
        home.pump().unwrap();
        part.pump().unwrap();
    }
    settle(&mut [&mut home, &mut part, &mut other], deadline);
    drop((home, part, other));
    drop(cl);
    let (balances, _) = contents(&handles, 9);
    assert_eq!(
        (balances[0], balances[6]),
        (INITIAL - 7, INITIAL + 7),
        "the transfer committed"
    );
    assert_eq!(
        balances[3], INITIAL,
        "the branch of the aborted transaction {old:#x} committed (the new transaction is {g:#x})"
    );
    for h in &handles {
        h.shutdown();
    }
    drop(handles);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An island that restarts alone sees only its own log, and a transaction
/// it began and aborted (or lost in a crash) left nothing in it (presumed
/// abort), while a participant may still hold its branch prepared. So the
/// gtids a reopened island hands out must lie above every gtid of its
/// earlier incarnations, whatever its log holds: here no transaction of the
/// first run logged anything anywhere, and the second run's gtids must
/// still be new.
#[test]
fn a_reopened_island_hands_out_no_gtid_of_an_earlier_incarnation() {
    let dir = fresh_dir("gtid-incarnation");
    let defs = tables(8);
    let opts = ClusterOptions::default();
    let sync_config = sync_island_config(&dir, opts.contexts_needed(1));
    // Reservations of 4: the worker runs past several within a run, waiting
    // for the log writer's control-file writes when it catches up with them.
    let config = |i| {
        let mut c = sync_config(i);
        c.gtid_reserve = 4;
        c
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut incarnations = Vec::new();
    for run in 0..3 {
        let opened: Vec<(Island, RecoveryReport)> = (0..2)
            .map(|i| {
                if run == 0 {
                    let island =
                        open_with_accounts(config(i), &defs, 4 * i as u64..4 * i as u64 + 4);
                    island.shutdown();
                }
                Island::open(config(i), &defs).unwrap()
            })
            .collect();
        incarnations.push(opened[0].0.incarnation());
        let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
        let cl = Cluster::new(opened, vec![1, 1], Arc::new(SplitRouter), opts.clone()).unwrap();
        let mut home = cl.executor(0, 0).unwrap();
        for _ in 0..25 {
            let c = home.begin_home(false).unwrap();
            let g = home.pool.ctx_ref(c).dist.as_ref().unwrap().gtid;
            assert!(
                seen.insert(g),
                "run {run} handed out gtid {g:#x} again (an earlier incarnation's)"
            );
            home.abort_home(c);
        }
        drop(home);
        drop(cl);
        for h in handles {
            h.shutdown();
        }
    }
    assert!(
        incarnations.windows(2).all(|w| w[1] > w[0]),
        "every open is a new incarnation: {incarnations:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `proc` on home context `c` of `ex` by hand until it finishes,
/// pumping `ex` and `others` whenever it waits for a remote reply.
pub(super) fn run_by_hand(
    ex: &mut Executor,
    others: &mut [&mut Executor],
    c: u32,
    proc: impl std::future::Future<Output = Result<(), Abort>>,
) -> Result<(), Abort> {
    let mut proc = std::pin::pin!(proc);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match proc.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => return r,
            std::task::Poll::Pending => {
                assert_eq!(ex.send_request(c), Some(true));
                while !ex.woken.contains(&c) {
                    assert!(std::time::Instant::now() < deadline, "no reply");
                    ex.pump().unwrap();
                    for o in others.iter_mut() {
                        o.pump().unwrap();
                    }
                }
                ex.woken.clear();
            }
        }
    }
}

/// Pumps `exs` (handing their logs over) until every one is quiescent;
/// fails at `deadline`.
pub(super) fn settle(exs: &mut [&mut Executor], deadline: std::time::Instant) {
    while !exs.iter().all(|ex| ex.quiescent()) {
        assert!(std::time::Instant::now() < deadline, "no end");
        for ex in exs.iter_mut() {
            ex.pump().unwrap();
            ex.flush_log().unwrap();
        }
    }
}

/// Runs [`move_money`] over accounts of `ex`'s own island and commits it
/// there (no other island takes part).
fn commit_locally(ex: &mut Executor, moves: &[(u64, i64)]) {
    let c = ex.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *ex.ctx_ptr(c) };
    run_by_hand(ex, &mut [], c, move_money(tx, moves)).unwrap();
    assert!(matches!(ex.commit_home(c), Ok(HomeCommit::Local(_))));
}

/// Adds `delta` to each account of `moves`, in order, locking each.
async fn move_money(tx: &mut Txn, moves: &[(u64, i64)]) -> Result<(), Abort> {
    for &(key, delta) in moves {
        let h = tx
            .get_for_update(ACCOUNTS, key)
            .await?
            .ok_or(Abort::User("no account"))?;
        let b = tx.row(h).i64(BAL);
        tx.row_mut(h).set_i64(BAL, b + delta);
    }
    Ok(())
}

/// A transport that duplicates may deliver a request twice while its branch
/// is open. Here g (home island 0) inserts receipt `r` on island 1; the
/// INSERT arrives, island 1 inserts the row and replies, and the reply is
/// lost; then the copy of the INSERT arrives. Island 1 ran it again in the
/// same branch: the key was now present (g's own row, not yet written), so
/// it replied "exists", g believed the receipt was there before it, and its
/// commit installed the branch's insert with the zeroed image it held, a
/// row that no transaction wrote. A branch now serves each request once:
/// the copy gets no answer, and g times out and aborts.
#[test]
fn a_copy_of_a_request_is_served_once() {
    let transport = Arc::new(FaultyTransport::new(2, 64, Faults::NONE, 1));
    let has = |batch: &[u8], want: fn(&Frame) -> bool| {
        frames(batch).any(|f| {
            f.ok()
                .and_then(|p| wire::decode(p).ok())
                .is_some_and(|f| want(&f))
        })
    };
    transport.copy_matching(move |b| has(b, |f| matches!(f, Frame::Insert { .. })));
    transport.lose_once(move |b| has(b, |f| matches!(f, Frame::Reply { .. })));
    let opts = ClusterOptions {
        transport: Some(transport.clone()),
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 10, opts);
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    let receipt = (1 << 32) | 9;

    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let proc = async {
        match tx.insert(RECEIPTS, receipt).await? {
            Some(h) => {
                tx.row_mut(h).set_i64(BAL, 42);
                Ok(true)
            }
            None => Ok::<bool, Abort>(false),
        }
    };
    let mut proc = std::pin::pin!(proc);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(std::future::Future::poll(proc.as_mut(), &mut cx).is_pending());
    assert_eq!(home.send_request(c), Some(true));
    home.pump().unwrap(); // the INSERT goes out, and a copy is kept
    part.pump().unwrap(); // island 1 inserts; its reply is lost
    assert_eq!(transport.redeliver_copies(), 1);
    for _ in 0..20 {
        part.pump().unwrap();
        home.pump().unwrap();
    }
    let answered = home.woken.contains(&c);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    if answered {
        home.woken.clear();
        let std::task::Poll::Ready(r) = std::future::Future::poll(proc.as_mut(), &mut cx) else {
            panic!("the procedure has its reply")
        };
        assert!(
            matches!(r, Ok(true)),
            "g heard that the receipt it inserted itself was there before it"
        );
        let r = run_until_decided(&mut home, &mut part, c, async { Ok(()) }, deadline);
        assert!(r.is_ok());
    } else {
        // No answer: g gives up waiting, as the worker loop's timeout does.
        home.abort_home(c);
    }
    settle(&mut [&mut home, &mut part], deadline);
    drop((home, part));
    let mut rows = Vec::new();
    islands[1]
        .catalog()
        .table(RECEIPTS)
        .for_each_row(|k, _, d| rows.push((k, d[0] as i64)));
    assert!(
        rows.is_empty() || rows == [(receipt, 42)],
        "receipts on island 1: {rows:?}"
    );
    drop(cl);
}

/// A transport that duplicates may deliver a copy of a batch late. Here
/// transfer g (island 0's account 0 pays 7 to island 1's account 9) commits
/// on island 1, whose acknowledgement is lost, so the coordinator still
/// commits g; island 1 then runs h (account 8 pays 100 to account 9). Now
/// late copies of g's Get and of its WRITE/PREP/PrepareReq batch reach
/// island 1. Its branch of g is finished and forgotten: the Get must not open
/// a new one. It did: the new branch took g's after-image of account 9,
/// prepared and voted yes (ignored by the coordinator), and the coordinator's
/// resent CommitReq committed it, putting account 9 back to 1007 and erasing
/// h's 100.
#[test]
fn a_late_copy_of_a_finished_branchs_requests_does_not_reopen_it() {
    // Copies may arrive up to a minute late (the test redelivers them
    // within that); no random faults.
    let faults = Faults {
        max_delay: Duration::from_secs(60),
        ..Faults::NONE
    };
    let transport = Arc::new(FaultyTransport::new(2, 64, faults, 1));
    let coord_frame = |batch: &[u8], want: fn(&Frame) -> bool| {
        frames(batch).any(|f| {
            f.ok()
                .and_then(|p| wire::decode(p).ok())
                .is_some_and(|f| want(&f))
        })
    };
    transport.lose_once(move |b| {
        coord_frame(b, |f| {
            matches!(f, Frame::Coord(coord::Msg::CommitConf { .. }))
        })
    });
    transport.copy_matching(move |b| {
        coord_frame(b, |f| matches!(f, Frame::Get { .. } | Frame::Prep { .. }))
    });
    let opts = ClusterOptions {
        transport: Some(transport.clone()),
        timeouts: coord::Timeouts {
            commit_retry_us: 2_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 10, opts);
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);

    // g: 0 → 9, committed on island 1; its acknowledgement is lost.
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    run_by_hand(
        &mut home,
        &mut [&mut part],
        c,
        move_money(tx, &[(0, -7), (9, 7)]),
    )
    .unwrap();
    let Ok(HomeCommit::Distributed(g)) = home.commit_home(c) else {
        panic!("the transfer commits with 2PC");
    };
    while transport.dropped.load(Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "no acknowledgement");
        home.pump().unwrap();
        part.pump().unwrap();
    }
    assert!(home.coord.holds(g), "the coordinator waits for the ack");
    assert!(part.quiescent(), "island 1 committed g and forgot it");

    // h: 8 → 9, local to island 1 (the home of g is not pumped from here
    // on until the copies are handled, so it cannot resend the commit yet).
    commit_locally(&mut part, &[(8, -100), (9, 100)]);

    // The late copies: g's Get, then its WRITE/PREP/PrepareReq batch.
    assert_eq!(transport.redeliver_copies(), 2);
    for _ in 0..5 {
        part.pump().unwrap();
    }
    settle(&mut [&mut home, &mut part], deadline);
    drop((home, part));
    drop(cl);
    let (balances, _) = contents(&islands, 10);
    assert_eq!(
        (balances[0], balances[8], balances[9]),
        (INITIAL - 7, INITIAL - 100, INITIAL + 7 + 100),
        "g committed once, then h; a second branch of g {g:#x} must not undo h"
    );
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * 10);
}

/// Two islands of 5 accounts each whose participants abort a branch idle
/// for 2 ms, and an executor for each (home: island 0).
fn two_islands_idling_out_after_2ms() -> (Arc<Cluster>, Vec<Island>, Executor, Executor) {
    let opts = ClusterOptions {
        timeouts: coord::Timeouts {
            branch_idle_us: 2_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 10, opts);
    let home = cl.executor(0, 0).unwrap();
    let part = cl.executor(1, 0).unwrap();
    (cl, islands, home, part)
}

/// Pumps `part` until it has aborted every branch it held for idling.
fn wait_until_branches_idle_out(part: &mut Executor, deadline: std::time::Instant) {
    while part.branches_in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline, "no idle abort");
        std::thread::sleep(Duration::from_millis(1));
        part.pump().unwrap();
    }
}

/// Account `key`'s balance, read through `tx`.
async fn balance(tx: &mut Txn, key: u64) -> Result<i64, Abort> {
    let h = tx
        .get(ACCOUNTS, key)
        .await?
        .ok_or(Abort::User("no account"))?;
    Ok(tx.row(h).i64(BAL))
}

/// The schedule of the idle-out tests below: audit g (home island 0) reads
/// account 9 on island 1, its branch there idles out, and h (home island 1)
/// moves 100 from account 9 to account 2 and commits across both islands.
/// Returns g's context, still running, and the balance g read.
fn g_reads_9_then_its_branch_idles_out_and_h_moves_9_to_2(
    home: &mut Executor,
    part: &mut Executor,
    deadline: std::time::Instant,
) -> (u32, i64) {
    home.pump().unwrap();
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let mut seen = 0;
    run_by_hand(home, &mut [&mut *part], c, async {
        seen = balance(tx, 9).await?;
        Ok(())
    })
    .unwrap();
    wait_until_branches_idle_out(part, deadline);
    let c2 = part.begin_home(false).unwrap();
    // SAFETY: as above.
    let tx2: &mut Txn = unsafe { &mut *part.ctx_ptr(c2) };
    run_by_hand(
        part,
        &mut [&mut *home],
        c2,
        move_money(tx2, &[(9, -100), (2, 100)]),
    )
    .unwrap();
    assert!(matches!(
        part.commit_home(c2),
        Ok(HomeCommit::Distributed(_))
    ));
    settle(&mut [home, part], deadline);
    (c, seen)
}

/// A participant aborts a branch that waits longer than `branch_idle_us` for
/// more work, and its locks go with it, while the home transaction may still
/// be running. Here audit g (home island 0) reads account 9 on island 1, its
/// branch goes idle and is aborted, island 1 then runs h (account 8 pays 100
/// to account 9), and g goes on to read account 8. Its request opened a
/// fresh branch, which knew nothing of the first one's lock: g saw 1000 +
/// 900, a total that no serial order of g and h shows, and committed. (Had g
/// written account 9, its island would have voted no: a write must find its
/// row in the branch. Reads had no such check.) The request now says it
/// continues a branch (`wire::CONTINUES`); island 1 refuses it and g aborts.
#[test]
fn a_request_that_continues_an_idle_aborted_branch_is_refused() {
    let (cl, islands, mut home, mut part) = two_islands_idling_out_after_2ms();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let read = |tx: &mut Txn, key: u64| {
        let tx: *mut Txn = tx;
        async move {
            // SAFETY: one procedure at a time uses the context.
            let tx = unsafe { &mut *tx };
            let h = tx
                .get(ACCOUNTS, key)
                .await?
                .ok_or(Abort::User("no account"))?;
            Ok::<i64, Abort>(tx.row(h).i64(BAL))
        }
    };

    // g reads account 9 on island 1.
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives each procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let mut seen = Vec::new();
    let first = async {
        seen.push(read(&mut *tx, 9).await?);
        Ok(())
    };
    run_by_hand(&mut home, &mut [&mut part], c, first).unwrap();
    assert_eq!(part.branches_in_flight(), 1, "island 1 holds g's branch");

    // g's branch sits idle until island 1 aborts it.
    wait_until_branches_idle_out(&mut part, deadline);

    // h: 8 → 9, local to island 1; account 9 is no longer locked.
    commit_locally(&mut part, &[(8, -100), (9, 100)]);

    // g goes on and reads account 8.
    let second = async {
        seen.push(read(&mut *tx, 8).await?);
        Ok(())
    };
    let rest = run_by_hand(&mut home, &mut [&mut part], c, second);
    let committed = match rest {
        Ok(()) => home.commit_home(c).is_ok(),
        Err(_) => {
            home.abort_home(c);
            false
        }
    };
    settle(&mut [&mut home, &mut part], deadline);
    assert!(
        !committed || seen.iter().sum::<i64>() == 2 * INITIAL,
        "g committed after seeing accounts 9 and 8 as {seen:?}: no serial order shows that"
    );
    assert!(rest.is_err(), "g's request for account 8 must be refused");
    assert_eq!(cl.stats.lost_branches.load(Ordering::Relaxed), 1);
    drop((home, part));
    drop(cl);
    let (balances, _) = contents(&islands, 10);
    assert_eq!((balances[8], balances[9]), (INITIAL - 100, INITIAL + 100));
}

/// Without a log, a read-only transaction of several islands commits by
/// releasing its remote branches, without their votes. That is only sound
/// while they still hold their read locks: here audit g (home island 0)
/// reads account 9 on island 1, its branch idles out there, h moves 100 from
/// account 9 to account 2 (island 0) and commits, and g reads account 2: it
/// saw 1000 + 1100, which no serial order of g and h shows, so g must not
/// commit by releasing. A transaction older than half the idle timeout asks
/// for votes, island 1 knows no such branch, and g aborts.
#[test]
fn a_read_only_commit_asks_for_votes_once_a_branch_may_have_idled_out() {
    let (cl, islands, mut home, mut part) = two_islands_idling_out_after_2ms();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (c, first) =
        g_reads_9_then_its_branch_idles_out_and_h_moves_9_to_2(&mut home, &mut part, deadline);
    let mut seen = vec![first];
    // SAFETY: g's context outlives its procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let second = async {
        seen.push(balance(tx, 2).await?);
        Ok(())
    };
    run_by_hand(&mut home, &mut [&mut part], c, second).unwrap();
    assert_eq!(seen, [INITIAL, INITIAL + 100], "g read around h");
    let g = match home.commit_home(c) {
        Ok(HomeCommit::Distributed(g)) => g,
        Ok(HomeCommit::Released(_)) => {
            panic!("g committed by releasing a branch that had idled out (it saw {seen:?})")
        }
        other => panic!("g must ask for votes: {:?}", other.map(|_| ())),
    };
    settle(&mut [&mut home, &mut part], deadline);
    assert!(
        home.outcomes.contains(&(g, None)),
        "g must abort (island 1 knows no branch of it): {:?}",
        home.outcomes
    );
    drop((home, part));
    drop(cl);
    let (balances, _) = contents(&islands, 10);
    assert_eq!((balances[2], balances[9]), (INITIAL + 100, INITIAL - 100));
}

/// A procedure's own ending rests on what it read, so it reaches the caller
/// only if that was one view. Audit g (home island 0) reads account 9 on
/// island 1, its branch idles out there, h moves 100 from account 9 to
/// account 2 (island 0), and g reads account 2: 1000 + 1100, a torn total,
/// and g rolls itself back for it. That "torn total" must not reach the
/// caller: the executor asks island 1 whether g's branch still holds; it
/// does not, so the attempt is retried instead.
#[test]
fn a_user_abort_after_a_branch_idled_out_is_retried_not_reported() {
    let (cl, islands, mut home, mut part) = two_islands_idling_out_after_2ms();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (c, first) =
        g_reads_9_then_its_branch_idles_out_and_h_moves_9_to_2(&mut home, &mut part, deadline);
    // SAFETY: g's context outlives its procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let ending = run_by_hand(&mut home, &mut [&mut part], c, async {
        if first + balance(tx, 2).await? != 2 * INITIAL {
            return Err(Abort::User("torn total"));
        }
        Ok(())
    });
    assert!(
        matches!(ending, Err(Abort::User("torn total"))),
        "{ending:?}"
    );
    let g = home
        .end_home(c)
        .expect("an attempt older than half the idle timeout asks its branches");
    settle(&mut [&mut home, &mut part], deadline);
    assert_eq!(
        home.confirmed,
        [(g, false)],
        "island 1 no longer holds g's branch: g's ending must not be reported"
    );
    drop((home, part));
    drop(cl);
    let (balances, _) = contents(&islands, 10);
    assert_eq!((balances[2], balances[9]), (INITIAL + 100, INITIAL - 100));
}

/// Runs on `home` a transaction that moves 100 from account 9 to account 2
/// (a branch on `part`), then, past half of a 60-ms idle timeout and well
/// before all of it, aborts on its own; returns its context, whose ending
/// is not yet asked for.
fn user_abort_after_half_the_idle_timeout(home: &mut Executor, part: &mut Executor) -> u32 {
    home.pump().unwrap();
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let ending = run_by_hand(home, &mut [part], c, async move {
        move_money(&mut *tx, &[(9, -100), (2, 100)]).await?;
        std::thread::sleep(Duration::from_millis(35));
        Err(Abort::User("changed its mind"))
    });
    assert!(matches!(ending, Err(Abort::User(_))), "{ending:?}");
    c
}

/// The other side: an attempt older than half the idle timeout whose branch
/// still holds has its ending confirmed, and nothing it did stays.
#[test]
fn a_user_abort_whose_branches_held_is_confirmed() {
    let opts = ClusterOptions {
        timeouts: coord::Timeouts {
            branch_idle_us: 60_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 10, opts);
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let c = user_abort_after_half_the_idle_timeout(&mut home, &mut part);
    let g = home.end_home(c).expect("an old attempt asks its branches");
    settle(&mut [&mut home, &mut part], deadline);
    assert_eq!(home.confirmed, [(g, true)], "island 1 held g's branch");
    assert_eq!(part.branches_in_flight(), 0, "and aborted it since");
    drop((home, part));
    drop(cl);
    let (balances, _) = contents(&islands, 10);
    assert_eq!((balances[2], balances[9]), (INITIAL, INITIAL));
}

/// Options whose timeouts (a branch idle 60 ms, an operation a minute) never
/// end a wait that an island going down should end, over `t`.
fn slow_timeouts_over(t: &Arc<Lossy>) -> ClusterOptions {
    ClusterOptions {
        timeouts: coord::Timeouts {
            branch_idle_us: 60_000,
            ..Default::default()
        },
        op_timeout: Duration::from_secs(60),
        transport: Some(Arc::clone(t) as Arc<dyn Transport>),
        ..Default::default()
    }
}

/// The in-process transport of two one-worker islands under a [`Lossy`],
/// which can report island 1 down or restart it, and a switch that, once
/// set, loses every batch for island 1 (its process is gone).
fn island_1_at_will() -> (Arc<Lossy>, Arc<std::sync::atomic::AtomicBool>) {
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lose = Arc::clone(&gone);
    let inner = Arc::new(crate::transport::InProc::new(2, 64));
    let t = Lossy::new(inner, move |to, _| {
        to == Endpoint(1) && lose.load(Ordering::Acquire)
    });
    (Arc::new(t), gone)
}

/// An ending's LOCK round that waits for the reply of an island whose
/// process goes down fails in the first round that sees it down, not after
/// the operation timeout (a minute here): the ending is not confirmed, and
/// the transaction is noted as aborted for island 1, so that its caller
/// hears `IslandDown` rather than a retry.
#[test]
fn a_lock_round_waiting_on_a_down_island_fails_in_the_round_that_sees_it() {
    let (t, gone) = island_1_at_will();
    let opts = slow_timeouts_over(&t);
    let (cl, _islands) = open_cluster(2, 10, opts);
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    let c = user_abort_after_half_the_idle_timeout(&mut home, &mut part);
    gone.store(true, Ordering::Release);
    t.report_down(1);
    let g = home.end_home(c).expect("an old attempt asks its branches");
    assert_eq!(home.locking.len(), 1, "a LOCK round to island 1");
    home.pump().unwrap();
    assert_eq!(
        home.confirmed,
        [(g, false)],
        "the round that sees island 1 down ends the wait"
    );
    assert!(home.locking.is_empty());
    assert_eq!(home.aborted_for_down(g), Some(1));
}

/// As above, but island 1 dies and comes back between two rounds of the
/// home executor, which never sees it down: its new incarnation tells, and
/// the LOCK round that waited on the one that died fails in the round that
/// sees it. Island 1 counts as down for two rounds only.
#[test]
fn a_lock_round_waiting_on_an_island_that_restarted_unseen_fails_in_the_round_that_sees_it() {
    let (t, _) = island_1_at_will();
    // Its first incarnation, as the executors first see it.
    t.restart(1);
    let opts = slow_timeouts_over(&t);
    let (cl, _islands) = open_cluster(2, 10, opts);
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    home.pump().unwrap();
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let ending = run_by_hand(&mut home, &mut [&mut part], c, async move {
        move_money(&mut *tx, &[(9, -100), (2, 100)]).await?;
        std::thread::sleep(Duration::from_millis(35));
        Err(Abort::User("changed its mind"))
    });
    assert!(matches!(ending, Err(Abort::User(_))), "{ending:?}");
    let g = home.end_home(c).expect("an old attempt asks its branches");
    assert_eq!(home.locking.len(), 1, "a LOCK round to island 1");
    t.restart(1);
    home.pump().unwrap();
    assert_eq!(
        home.confirmed,
        [(g, false)],
        "the round that sees island 1's new incarnation ends the wait"
    );
    assert!(home.locking.is_empty());
    assert_eq!(home.aborted_for_down(g), Some(1));
    assert!(home.down_islands().contains(1));
    home.pump().unwrap();
    home.pump().unwrap();
    assert!(home.down_islands().is_empty(), "up again after two rounds");
}

/// Audits that roll themselves back when the total they saw is wrong, read
/// island 1's accounts first and, on a first attempt, dawdle (3 ms, twice
/// the idle timeout below) before they read the others: an audit of another
/// home then sees its branch on island 1 idle out, transfers move money
/// through island 1's accounts, and the total it reads is torn. No caller
/// may hear of that; the attempt is retried instead.
struct TornAudits {
    bank: Arc<Bank>,
    first: Vec<u64>,
    rest: Vec<u64>,
    reported: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct TornReq {
    audit: bool,
    t: Transfer,
    attempts: std::cell::Cell<u32>,
}

impl TornAudits {
    async fn sum(tx: &mut Txn, keys: &[u64]) -> Result<i64, Abort> {
        tx.get_many(ACCOUNTS, keys, false).await?;
        Ok((0..keys.len())
            .filter_map(|i| tx.many_row(i))
            .map(|h| tx.row(h).i64(BAL))
            .sum())
    }
}

impl Workload for TornAudits {
    type Req = TornReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["transfer", "audit"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut TornReq) -> usize {
        req.audit = rng.percent(25);
        req.attempts.set(0);
        self.bank.next(worker, rng, &mut req.t);
        usize::from(req.audit)
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a TornReq) -> Result<(), Abort> {
        if !req.audit {
            return self.bank.run(tx, &req.t).await;
        }
        let attempt = req.attempts.get();
        req.attempts.set(attempt + 1);
        let mut total = Self::sum(tx, &self.first).await?;
        if attempt == 0 {
            std::thread::sleep(Duration::from_millis(3));
        }
        total += Self::sum(tx, &self.rest).await?;
        if total != INITIAL * (self.first.len() + self.rest.len()) as i64 {
            return Err(Abort::User("torn total"));
        }
        Ok(())
    }

    fn finished(&self, _w: usize, _req: &mut TornReq, outcome: crate::proc::Outcome) {
        if matches!(outcome, crate::proc::Outcome::UserAbort("torn total")) {
            self.reported.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn no_caller_hears_of_a_torn_total_when_branches_idle_out() {
    let opts = ClusterOptions {
        inflight: 4,
        op_timeout: Duration::from_micros(300),
        timeouts: coord::Timeouts {
            prepare_us: 400,
            commit_retry_us: 300,
            decision_retry_us: 500,
            branch_idle_us: 1_500,
        },
        ..Default::default()
    };
    let (cl, islands) = open_cluster(3, 60, opts);
    let w = Arc::new(TornAudits {
        bank: bank(60),
        first: (20..40).collect(),
        rest: (0..20).chain(40..60).collect(),
        reported: Default::default(),
    });
    let stats = run_to_completion(&cl, &clients(3, 400), Arc::clone(&w), 13).expect("run");
    let audits: u64 = stats.iter().map(|s| s.commits[1]).sum();
    assert!(audits > 10, "audits committed: {audits}");
    assert_eq!(
        w.reported.load(Ordering::Relaxed),
        0,
        "a caller heard of a torn total"
    );
    let (balances, _) = contents(&islands, 60);
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * 60);
}

/// Runs, on `home`'s clock just read (so the attempt is young), a home
/// transaction that reads `account` on `part`'s island, and asks to commit it.
fn read_on_a_fresh_clock(
    home: &mut Executor,
    part: &mut Executor,
    account: u64,
) -> Result<HomeCommit, Abort> {
    home.pump().unwrap();
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let read = async move {
        tx.get(ACCOUNTS, account)
            .await?
            .ok_or(Abort::User("no account"))?;
        Ok(())
    };
    run_by_hand(home, &mut [part], c, read).unwrap();
    home.commit_home(c)
}

/// The other side of the test above: a read-only transaction well within
/// half the idle timeout (1 s by default) still commits by releasing, without
/// a round of votes.
#[test]
fn a_young_read_only_commit_releases_without_votes() {
    let (cl, _islands) = open_cluster(2, 10, ClusterOptions::default());
    let mut home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    assert!(
        matches!(
            read_on_a_fresh_clock(&mut home, &mut part, 8),
            Ok(HomeCommit::Released(_))
        ),
        "a young read-only transaction releases its branches without votes"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    settle(&mut [&mut home, &mut part], deadline);
    assert_eq!(part.branches_in_flight(), 0, "island 1 released the branch");
}

/// A log device whose writes and fdatasyncs wait while `hold` is set: a log
/// whose appended batches stay unwritten (so not durable either) for as long
/// as a test wants.
struct GatedDevice {
    hold: Arc<std::sync::atomic::AtomicBool>,
}

struct GatedFile {
    inner: Box<dyn crate::wal::LogFile>,
    hold: Arc<std::sync::atomic::AtomicBool>,
}

impl crate::wal::LogFile for GatedFile {
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.wait();
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> std::io::Result<()> {
        self.wait();
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
}

impl GatedFile {
    fn wait(&self) {
        while self.hold.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Opens the gate of a [`GatedDevice`] when dropped.
struct OpenGate(Arc<std::sync::atomic::AtomicBool>);

impl Drop for OpenGate {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl crate::wal::LogDevice for GatedDevice {
    fn create(&self, path: &std::path::Path) -> std::io::Result<Box<dyn crate::wal::LogFile>> {
        Ok(Box::new(GatedFile {
            inner: crate::wal::FsDevice.create(path)?,
            hold: Arc::clone(&self.hold),
        }))
    }
    fn open_append(&self, path: &std::path::Path) -> std::io::Result<Box<dyn crate::wal::LogFile>> {
        Ok(Box::new(GatedFile {
            inner: crate::wal::FsDevice.open_append(path)?,
            hold: Arc::clone(&self.hold),
        }))
    }
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        crate::wal::FsDevice.sync_dir(dir)
    }
}

/// A read-only vote waits until everything its branch could have read is
/// durable (`sync`) or written (`async`), and a branch that may have read
/// data not yet so must vote (not merely be released). A local commit on
/// island 1 releases its rows when its record is appended, before the
/// record is written; here island 1's log is held back, transfer h (account
/// 4 pays 100 to account 5) commits there, and audit g (home island 0) reads
/// account 5 and votes read-only on island 1. Had that vote gone out at
/// once, g would commit, and its client hear so, having seen 1100 in a log
/// that a crash could still lose.
#[test]
fn a_read_only_vote_waits_for_what_its_branch_read_to_be_durable() {
    read_only_vote_waits_for_its_reads(crate::wal::Durability::Sync);
}

/// The same in `async` mode, where a write survives a process crash.
#[test]
fn a_read_only_vote_waits_for_what_its_branch_read_to_be_written() {
    read_only_vote_waits_for_its_reads(crate::wal::Durability::Async);
}

/// Two islands of 4 accounts each (checkpointed), logging in `durability`
/// mode under `dir`, island 1's log on a [`GatedDevice`] that `hold` holds
/// back; the cluster and an executor of each. Votes decide its commits, not
/// the prepare timeout (a loaded machine may stretch a test's rounds past
/// the default 100 ms).
fn two_islands_with_a_gated_log(
    dir: &std::path::Path,
    durability: crate::wal::Durability,
    hold: &Arc<std::sync::atomic::AtomicBool>,
) -> (Arc<Cluster>, Vec<Island>, Executor, Executor) {
    let opts = ClusterOptions {
        timeouts: coord::Timeouts {
            prepare_us: 60_000_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let config = logged_island_config(dir, opts.contexts_needed(1), durability);
    let defs = tables(8);
    let opened: Vec<(Island, RecoveryReport)> = (0..2)
        .map(|i| {
            let mut cfg = config(i);
            if i == 1 {
                cfg.device = Some(Arc::new(GatedDevice {
                    hold: Arc::clone(hold),
                }));
            }
            let island = open_with_accounts(cfg, &defs, 4 * i as u64..4 * i as u64 + 4);
            (island, RecoveryReport::default())
        })
        .collect();
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(SplitRouter), opts).unwrap();
    let home = cl.executor(0, 0).unwrap();
    let part = cl.executor(1, 0).unwrap();
    (cl, handles, home, part)
}

fn read_only_vote_waits_for_its_reads(durability: crate::wal::Durability) {
    let dir = fresh_dir(&format!("ro-vote-{durability}"));
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (cl, handles, mut home, mut part) = two_islands_with_a_gated_log(&dir, durability, &hold);
    // Dropped first, also when an assertion fails: the islands' shutdown
    // waits for their logs, so island 1's must not be held back then.
    let _open_at_exit = OpenGate(Arc::clone(&hold));

    // h commits on island 1; its record is appended but not durable.
    hold.store(true, Ordering::Release);
    commit_locally(&mut part, &[(4, -100), (5, 100)]);
    part.flush_log().unwrap();

    // g reads account 5 on island 1 and asks to commit. (A fresh clock, so
    // that g is young: only what it read keeps it from releasing.)
    home.pump().unwrap();
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let mut seen = 0;
    let audit = async {
        let h = tx
            .get(ACCOUNTS, 5)
            .await?
            .ok_or(Abort::User("no account"))?;
        seen = tx.row(h).i64(BAL);
        Ok(())
    };
    run_by_hand(&mut home, &mut [&mut part], c, audit).unwrap();
    assert_eq!(seen, INITIAL + 100, "g read h's (not yet durable) write");
    let Ok(HomeCommit::Distributed(g)) = home.commit_home(c) else {
        panic!("g, whose read on island 1 was not durable yet, commits with two-phase commit");
    };
    let decided = |home: &Executor| home.outcomes.iter().any(|&(o, _)| o == g);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(1));
        home.pump().unwrap();
        part.pump().unwrap();
        assert!(
            !decided(&home),
            "g was decided while island 1's log held back what g read: {:?}",
            home.outcomes
        );
    }

    // Island 1's log becomes durable: the vote goes out, g commits.
    hold.store(false, Ordering::Release);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !decided(&home) {
        assert!(std::time::Instant::now() < deadline, "g never decided");
        home.pump().unwrap();
        part.pump().unwrap();
    }
    assert!(home
        .outcomes
        .iter()
        .any(|&(o, ack)| o == g && ack.is_some()));

    // Once everything island 1 appended is durable, the same audit reads
    // only durable data there, and commits by releasing its branch.
    let shared = Arc::clone(handles[1].shared());
    while super::serve::undurable_reads(&shared) {
        assert!(
            std::time::Instant::now() < deadline,
            "island 1 never synced"
        );
        part.pump().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        matches!(
            read_on_a_fresh_clock(&mut home, &mut part, 5),
            Ok(HomeCommit::Released(_))
        ),
        "a read-only transaction that read only durable data releases its branches"
    );
    settle(&mut [&mut home, &mut part], deadline);
    assert_eq!(part.branches_in_flight(), 0, "island 1 released the branch");
    drop((home, part));
    drop(cl);
    shut_down_and_remove(handles, &dir);
}

/// Reads account `other` (on any island); if it is there, reads account
/// `mine` and deletes it. Says whether it deleted. Of two such transactions
/// over the same pair, run in either serial order, exactly one deletes.
async fn delete_mine_if_other(tx: &mut Txn, mine: u64, other: u64) -> Result<bool, Abort> {
    if tx.get(ACCOUNTS, other).await?.is_none() {
        return Ok(false);
    }
    let h = tx
        .get(ACCOUNTS, mine)
        .await?
        .ok_or(Abort::User("my account is gone"))?;
    tx.delete(h).await?;
    Ok(true)
}

/// The accounts still present on `islands` (read from the tables, so rows
/// locked by a transaction still count).
fn present_accounts(islands: &[Island]) -> std::collections::BTreeSet<u64> {
    let mut keys = std::collections::BTreeSet::new();
    for island in islands {
        island.catalog().table(ACCOUNTS).for_each_row(|k, _, _| {
            keys.insert(k);
        });
    }
    keys
}

/// The outcome of a home transaction that went through `commit_home`:
/// committed (`Local`/`Released`, or a distributed commit `ex` reported).
fn committed(ex: &Executor, r: &Result<HomeCommit, Abort>) -> bool {
    match r {
        Ok(HomeCommit::Local(_) | HomeCommit::Released(_)) => true,
        Ok(HomeCommit::Distributed(g)) => ex.outcomes.iter().any(|&(o, a)| o == *g && a.is_some()),
        Err(_) => false,
    }
}

/// Schedule 1a of issue 22, forced step by step. T (home island 0) reads
/// account 9 (island 1), reads account 0 and deletes it; U (home island 1)
/// reads account 0 (island 0), reads account 9 and deletes it. Both finish
/// executing, both ask to commit, and each island then handles the other's
/// PrepareReq (its read-only branch: released at once) before its own home
/// branch's, which upgrades its delete's lock only then. Were both to
/// commit, both accounts would be gone: no serial order deletes both.
#[test]
fn two_deletes_each_conditioned_on_the_others_row_do_not_both_commit() {
    let (cl, islands) = open_cluster(2, 10, ClusterOptions::default());
    let mut ex0 = cl.executor(0, 0).unwrap();
    let mut ex1 = cl.executor(1, 0).unwrap();
    let t = ex0.begin_home(false).unwrap();
    // SAFETY: each context outlives its procedure, which runs to its end
    // before its executor touches the context again.
    let tx_t: &mut Txn = unsafe { &mut *ex0.ctx_ptr(t) };
    run_by_hand(&mut ex0, &mut [&mut ex1], t, async move {
        assert!(delete_mine_if_other(tx_t, 0, 9).await?);
        Ok(())
    })
    .unwrap();
    let u = ex1.begin_home(false).unwrap();
    // SAFETY: as above.
    let tx_u: &mut Txn = unsafe { &mut *ex1.ctx_ptr(u) };
    run_by_hand(&mut ex1, &mut [&mut ex0], u, async move {
        assert!(delete_mine_if_other(tx_u, 9, 0).await?);
        Ok(())
    })
    .unwrap();
    let rt = ex0.commit_home(t);
    let ru = ex1.commit_home(u);
    // Each worker's round: its outbox goes out, then it reads its mailbox
    // (the other's PrepareReq) before its own local queue.
    ex0.outbox.flush(&*ex0.transport, ex0.me);
    ex1.outbox.flush(&*ex1.transport, ex1.me);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    settle(&mut [&mut ex0, &mut ex1], deadline);
    let (ct, cu) = (committed(&ex0, &rt), committed(&ex1, &ru));
    let left = present_accounts(&islands);
    assert!(
        !(ct && cu),
        "T and U both committed: accounts 0 and 9 are {}",
        if left.contains(&0) || left.contains(&9) {
            "not both gone (?)"
        } else {
            "both gone"
        }
    );
    assert_eq!(left.contains(&0), !ct, "account 0 is gone iff T committed");
    assert_eq!(left.contains(&9), !cu, "account 9 is gone iff U committed");
}

/// Opens `workers.len()` islands of `accounts` accounts in all (split
/// evenly, as [`open_cluster`]) with `workers[i]` workers on island `i`.
fn open_cluster_with_workers(
    workers: &[usize],
    accounts: u64,
    opts: ClusterOptions,
) -> (Arc<Cluster>, Vec<Island>) {
    let islands = workers.len();
    let per = accounts.div_ceil(islands as u64);
    let router = Arc::new(BankRouter {
        per_island: per,
        islands: islands as u16,
    });
    open_loaded_cluster(workers, &tables(accounts), opts, router, |i, l| {
        for k in (i as u64 * per)..((i as u64 + 1) * per).min(accounts) {
            l.put(ACCOUNTS, k, |r| new_account(r, k)).unwrap();
        }
    })
}

/// Opens `workers.len()` `no_wait` islands of tables `defs`, `workers[i]`
/// workers on island `i`, loaded by `load(i, loader)`, and a cluster of
/// them whose keys `router` places.
fn open_loaded_cluster(
    workers: &[usize],
    defs: &[TableDef],
    opts: ClusterOptions,
    router: Arc<dyn Router>,
    load: impl Fn(usize, &mut crate::island::Loader),
) -> (Arc<Cluster>, Vec<Island>) {
    let mut opened = Vec::new();
    for (i, &w) in workers.iter().enumerate() {
        let mut cfg = IslandConfig::new(CcKind::NoWait, w);
        cfg.name = format!("island-{i}");
        cfg.contexts = opts.contexts_needed(w);
        let (island, rep) = Island::open(cfg, defs).unwrap();
        load(i, &mut island.loader().unwrap());
        opened.push((island, rep));
    }
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, workers.to_vec(), router, opts).unwrap();
    (cl, handles)
}

/// Schedule 1b of issue 22, forced step by step: island 1 has two workers.
/// T (home island 0) reads account 0, reads account 9 (island 1) and deletes
/// it; its commit reaches island 1's worker that holds its branch, which
/// does not run yet. T's home branch, read-only, must not release account 0
/// meanwhile: U, on island 1's other worker, reads account 9 (still there),
/// pays 100 out of account 0 and commits; T's branch then takes account 9's
/// lock and commits too. T saw account 0 before U (T → U) and U saw account
/// 9 before T deleted it (U → T): a cycle.
#[test]
fn a_remote_delete_keeps_its_read_only_siblings_locked_until_it_is_locked() {
    let (cl, islands) = open_cluster_with_workers(&[1, 2], 10, ClusterOptions::default());
    let mut t_saw = 0;
    let t_saw_at: *mut i64 = &mut t_saw;
    let (ct, cu) = t_then_u_beside_ts_branch(
        &cl,
        |tx| async move {
            let h = tx.get(ACCOUNTS, 0).await?.expect("account 0");
            // SAFETY: `t_saw` outlives the schedule, which runs T to its end.
            unsafe { *t_saw_at = tx.row(h).i64(BAL) };
            let h = tx.get(ACCOUNTS, 9).await?.expect("account 9");
            tx.delete(h).await
        },
        |tx| async move {
            tx.get(ACCOUNTS, 9)
                .await?
                .expect("account 9 is there for U");
            let h = tx
                .get_for_update(ACCOUNTS, 0)
                .await?
                .ok_or(Abort::User("no account 0"))?;
            let b = tx.row(h).i64(BAL);
            tx.row_mut(h).set_i64(BAL, b - 100);
            Ok(())
        },
    );
    assert_eq!(t_saw, INITIAL);
    assert!(
        !(ct && cu),
        "T (saw account 0 = {t_saw}, deleted account 9) and U (saw account 9, paid out of \
         account 0) both committed: a cycle"
    );
    let left = present_accounts(&islands);
    assert_eq!(left.contains(&9), !ct, "account 9 is gone iff T committed");
}

/// A point miss is validated at its branch's prepare: a check at one
/// instant, which no lock holds on afterwards. So a lock that another branch
/// takes later is not two-phase locking either, even when every branch
/// holds its locks until the decision. T (home island 0) reads account 9
/// (island 1), finds receipt K absent (island 0) and adds 1 to account 9,
/// whose write lock is pending; it asks to commit. U, on island 1's other
/// worker, inserts receipt K and reads account 9, and commits. T's branch
/// on island 1 runs only then. T saw K absent before U inserted it (T → U);
/// U read account 9 before T wrote it (U → T): both must not commit.
#[test]
fn a_miss_is_validated_after_every_pending_lock_is_taken() {
    let (cl, _islands) = open_cluster_with_workers(&[1, 2], 10, ClusterOptions::default());
    // A receipt key of account 3: it lives on island 0.
    let k = (1 << 32) | 3;
    let (ct, cu) = t_then_u_beside_ts_branch(
        &cl,
        |tx| async move {
            let h = tx.get(ACCOUNTS, 9).await?.expect("account 9");
            assert!(tx.get(RECEIPTS, k).await?.is_none(), "no receipt K yet");
            let b = tx.row(h).i64(BAL);
            tx.row_mut(h).set_i64(BAL, b + 1);
            Ok(())
        },
        |tx| async move {
            let r = tx
                .insert(RECEIPTS, k)
                .await?
                .ok_or(Abort::User("K exists"))?;
            tx.row_mut(r).set_i64(BAL, 1);
            tx.get(ACCOUNTS, 9).await?.expect("account 9");
            Ok(())
        },
    );
    assert!(
        !(ct && cu),
        "T (found receipt K absent, wrote account 9) and U (inserted K, read account 9 \
         before T's write) both committed: a cycle"
    );
}

/// The skeleton of the schedules above, on a cluster whose island 1 has two
/// workers: T (home island 0) runs `t` and asks to commit, and island 0 runs
/// a round; then U (home island 1, on the worker that does not hold T's
/// branch) runs `u` and commits or aborts; only then does T's branch's
/// worker run, and everything settles. Returns whether T and U committed.
fn t_then_u_beside_ts_branch<FT, FU>(
    cl: &Arc<Cluster>,
    t: impl FnOnce(&'static mut Txn) -> FT,
    u: impl FnOnce(&'static mut Txn) -> FU,
) -> (bool, bool)
where
    FT: std::future::Future<Output = Result<(), Abort>>,
    FU: std::future::Future<Output = Result<(), Abort>>,
{
    let mut ex0 = cl.executor(0, 0).unwrap();
    let mut ex1 = [cl.executor(1, 0).unwrap(), cl.executor(1, 1).unwrap()];
    let ct = ex0.begin_home(false).unwrap();
    let (ext, exu) = branch_and_other(cl, &mut ex1, &ex0, ct);
    // SAFETY: each context outlives its procedure, which runs to its end
    // before its executor touches the context again.
    let tx_t: &'static mut Txn = unsafe { &mut *ex0.ctx_ptr(ct) };
    run_by_hand(&mut ex0, &mut [&mut *ext], ct, t(tx_t)).unwrap();
    let rt = ex0.commit_home(ct);
    // T's requests to island 1 wait in the mailbox of its branch's worker,
    // which runs only once U is decided.
    ex0.pump().unwrap();
    let cu = exu.begin_home(false).unwrap();
    // SAFETY: as above.
    let tx_u: &'static mut Txn = unsafe { &mut *exu.ctx_ptr(cu) };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let ru = run_until_decided(exu, &mut ex0, cu, u(tx_u), deadline);
    settle(&mut [&mut ex0, &mut *exu, &mut *ext], deadline);
    (committed(&ex0, &rt), committed(exu, &ru))
}

/// Of island 1's two executors `ex1`: the one whose worker holds the
/// branch of home context `c` of `ex0`, and the other.
fn branch_and_other<'a>(
    cl: &Cluster,
    ex1: &'a mut [Executor; 2],
    ex0: &Executor,
    c: u32,
) -> (&'a mut Executor, &'a mut Executor) {
    let gtid = ex0.pool.ctx_ref(c).dist.as_ref().unwrap().gtid;
    let [a, b] = ex1;
    if cl.branch_worker(1, gtid) == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// Runs `proc` on home context `c` of `ex` by hand (pumping `other` while
/// it waits) and commits it, or aborts it if it failed; then pumps `ex` and
/// `other` only, until a distributed commit is decided. Returns what the
/// commit said.
fn run_until_decided(
    ex: &mut Executor,
    other: &mut Executor,
    c: u32,
    proc: impl std::future::Future<Output = Result<(), Abort>>,
    deadline: std::time::Instant,
) -> Result<HomeCommit, Abort> {
    let r = match run_by_hand(ex, &mut [&mut *other], c, proc) {
        Ok(()) => ex.commit_home(c),
        Err(e) => {
            ex.abort_home(c);
            Err(e)
        }
    };
    if let Ok(HomeCommit::Distributed(g)) = r {
        while !ex.outcomes.iter().any(|&(o, _)| o == g) {
            assert!(std::time::Instant::now() < deadline, "never decided");
            ex.pump().unwrap();
            other.pump().unwrap();
        }
    }
    r
}

/// Pairs of "delete my account if the other's is present", one account of
/// each pair per island, run by the real worker loop: worker `i` runs, for
/// its k-th request, the transaction of pair k whose own account is on its
/// island. The two workers start together (so that they meet on the same
/// pairs). Whatever the interleaving, exactly one of each pair's accounts
/// must be gone at the end.
struct DeletePairs {
    pairs: u64,
    next: [std::sync::atomic::AtomicU64; 2],
    start: std::sync::Barrier,
}

impl Workload for DeletePairs {
    type Req = (u64, u64);

    fn types(&self) -> Vec<&'static str> {
        vec!["delete-if-other"]
    }

    fn next(&self, worker: usize, _: &mut FastRng, req: &mut (u64, u64)) -> usize {
        let k = self.next[worker].fetch_add(1, Ordering::Relaxed);
        if k == 0 {
            // Before either worker has a transaction: neither waits for the
            // other to serve it.
            self.start.wait();
        }
        let k = k % self.pairs;
        let (a, b) = (k, self.pairs + k);
        *req = if worker == 0 { (a, b) } else { (b, a) };
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a (u64, u64)) -> Result<(), Abort> {
        delete_mine_if_other(tx, req.0, req.1).await.map(|_| ())
    }
}

#[test]
fn pairs_of_conditional_deletes_across_islands_lose_one_row_each() {
    let pairs = if std::env::var_os("ISLANDS_LONG").is_some() {
        6_000
    } else {
        1_500
    };
    let opts = ClusterOptions {
        inflight: 8,
        ..Default::default()
    };
    let (cl, islands) = open_cluster(2, 2 * pairs, opts);
    let w = Arc::new(DeletePairs {
        pairs,
        next: Default::default(),
        start: std::sync::Barrier::new(2),
    });
    let stats = run_to_completion(&cl, &clients(2, pairs), w, 3).unwrap();
    let commits: u64 = stats.iter().map(|s| s.total_commits()).sum();
    assert_eq!(commits, 2 * pairs, "every transaction committed once");
    let left = present_accounts(&islands);
    let both = (0..pairs)
        .filter(|&k| !left.contains(&k) && !left.contains(&(pairs + k)))
        .count();
    let neither = (0..pairs)
        .filter(|&k| left.contains(&k) && left.contains(&(pairs + k)))
        .count();
    assert_eq!(
        (both, neither),
        (0, 0),
        "of {pairs} pairs, {both} lost both accounts and {neither} lost none"
    );
}

/// Copies the files of `from` into a new directory `to`: what a process
/// crash at this instant leaves of a log directory (written bytes survive
/// it; records still in an island's log buffer, or submitted to a writer
/// held back by a [`GatedDevice`], do not).
fn copy_log_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Issue 22's `async` crash: transfer L (account 4 pays 100 to account 5,
/// local to island 1) commits and its record stays in island 1's log. W
/// (home island 0) reads account 5 there (1100), sets account 0 to that
/// value and commits. Then the process dies: what each island's log had
/// written survives. A W that survives must not have read from an L that
/// did not: either both, or account 0 = 1000.
#[test]
fn after_an_async_crash_no_surviving_commit_read_a_lost_one() {
    let dir = fresh_dir("async-crash");
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let durability = crate::wal::Durability::Async;
    let (cl, handles, mut home, mut part) = two_islands_with_a_gated_log(&dir, durability, &hold);
    let _open_at_exit = OpenGate(Arc::clone(&hold));

    // L commits on island 1; its record is not written.
    hold.store(true, Ordering::Release);
    commit_locally(&mut part, &[(4, -100), (5, 100)]);

    // W: account 0 := account 5.
    let c = home.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *home.ctx_ptr(c) };
    let w = async move {
        let h = tx.get(ACCOUNTS, 5).await?.ok_or(Abort::User("no 5"))?;
        let seen = tx.row(h).i64(BAL);
        assert_eq!(seen, INITIAL + 100, "W reads L's write");
        let h = tx
            .get_for_update(ACCOUNTS, 0)
            .await?
            .ok_or(Abort::User("no 0"))?;
        tx.row_mut(h).set_i64(BAL, seen);
        Ok(())
    };
    run_by_hand(&mut home, &mut [&mut part], c, w).unwrap();
    let Ok(HomeCommit::Distributed(g)) = home.commit_home(c) else {
        panic!("W commits with two-phase commit");
    };
    // Give W every chance to commit while island 1 writes nothing; once it
    // has, wait until its decision is written on island 0.
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(1));
        home.pump().unwrap();
        part.pump().unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    if let Some(&(_, Some(ack))) = home.outcomes.iter().find(|&&(o, _)| o == g) {
        home.flush_log().unwrap();
        while handles[0].durable_batch() < ack {
            assert!(
                std::time::Instant::now() < deadline,
                "W's decision never written"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    // The crash: what both logs have written now is all that survives.
    let crashed = dir.join("crashed");
    for i in 0..2 {
        copy_log_dir(
            &dir.join(format!("island-{i}")),
            &crashed.join(format!("island-{i}")),
        );
    }
    let recovered = logged_island_config(&crashed, 0, durability);
    let mut balance = [0i64; 8];
    for i in 0..2 {
        let (island, _) = Island::open(recovered(i), &tables(8)).unwrap();
        island
            .catalog()
            .table(ACCOUNTS)
            .for_each_row(|k, _, row| balance[k as usize] = row[0] as i64);
        island.shutdown();
    }
    if balance[0] != INITIAL {
        assert_eq!(
            (balance[0], balance[4], balance[5]),
            (INITIAL + 100, INITIAL - 100, INITIAL + 100),
            "W survived the crash (account 0 = {}), L, which it read from, did not",
            balance[0]
        );
    }

    // The run goes on: island 1 writes, W commits.
    hold.store(false, Ordering::Release);
    settle(&mut [&mut home, &mut part], deadline);
    drop((home, part));
    drop(cl);
    shut_down_and_remove(handles, &dir);
}

/// Shuts the islands of a test down (their logs written) and removes the
/// test's directory.
fn shut_down_and_remove(islands: Vec<Island>, dir: &std::path::Path) {
    for i in &islands {
        i.shutdown();
    }
    drop(islands);
    let _ = std::fs::remove_dir_all(dir);
}

/// Each worker takes its share of the recovery report once. Here recovery
/// resolves an in-doubt credit (account 5 = 1070) and a later local
/// transaction makes it 1071. A second executor for island 1's worker (and
/// for the home's) must not replay the same report: that would restore the
/// old branch, the home would re-send its commit, and account 5 would go
/// back to 1070.
#[test]
fn a_second_executor_for_a_worker_is_refused() {
    let dir = fresh_dir("second-executor");
    let defs = tables(8);
    let opts = ClusterOptions::default();
    let config = sync_island_config(&dir, opts.contexts_needed(1));
    let g = coord::gtid(0, 5 << WORKER_BITS);
    leave_a_transfer_in_doubt(&config, &defs, g);
    let opened: Vec<(Island, RecoveryReport)> = (0..2)
        .map(|i| Island::open(config(i), &defs).unwrap())
        .collect();
    let handles: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let cl = Cluster::new(opened, vec![1, 1], Arc::new(SplitRouter), opts).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    {
        let mut home = cl.executor(0, 0).unwrap();
        let mut part = cl.executor(1, 0).unwrap();
        settle(&mut [&mut home, &mut part], deadline);
        commit_locally(&mut part, &[(5, 1)]);
        settle(&mut [&mut home, &mut part], deadline);
    }
    let balance_5 = |islands: &[Island]| contents(islands, 8).0[5];
    assert_eq!(balance_5(&handles), INITIAL + 71);
    match (cl.executor(0, 0), cl.executor(1, 0)) {
        (Err(e0), Err(e1)) => {
            for (w, e) in [("worker 0 of island 0", e0), ("worker 0 of island 1", e1)] {
                assert!(
                    e.to_string().contains(w) && e.to_string().contains("recovery"),
                    "{e}"
                );
            }
        }
        (Ok(mut home), Ok(mut part)) => {
            settle(&mut [&mut home, &mut part], deadline);
            drop((home, part));
            assert_eq!(
                balance_5(&handles),
                INITIAL + 71,
                "second executors replayed a recovery that was already resolved"
            );
            panic!("second executors for workers that had one were not refused");
        }
        (a, b) => panic!(
            "one second executor refused, not the other: {:?}, {:?}",
            a.err(),
            b.err()
        ),
    }
    drop(cl);
    shut_down_and_remove(handles, &dir);
}

/// Items: an ordered table whose rows have a group, indexed by a secondary
/// index. A row can move to another group (its entry moves with it).
const ITEMS: u16 = 0;
const ITEM_GROUP: Col = Col(0);
const BY_GROUP: crate::storage::SecondaryId = crate::storage::SecondaryId(0);

fn item_group(r: &crate::storage::RowRef) -> u64 {
    r.u64(ITEM_GROUP)
}

/// Opens two islands of items, `workers[i]` workers on island `i`: keys
/// below 10 live on island 0, the others on island 1. Island 0 holds items
/// 0, 1 and 2, island 1 items 10, 11 and 12, all in group 0.
fn open_items_cluster(workers: &[usize], opts: ClusterOptions) -> (Arc<Cluster>, Vec<Island>) {
    let defs = vec![TableDef::new(
        "items",
        &[("group", ColType::U64), ("pad", ColType::Str(16))],
        1 << 12,
        PrimaryKind::Ordered,
    )
    .with_secondary("by_group", item_group)];
    let router = Arc::new(RangeRouter::new(&[0, 10], &[]).unwrap());
    open_loaded_cluster(workers, &defs, opts, router, |i, l| {
        for k in 0..3 {
            l.put(ITEMS, 10 * i as u64 + k, |r| r.set_u64(ITEM_GROUP, 0))
                .unwrap();
        }
    })
}

/// The items that `island`'s secondary index lists in group `g` (entries
/// of uncommitted changes included).
fn group_entries(island: &Island, g: u64) -> Vec<u64> {
    let t = island.catalog().table(ITEMS);
    let mut keys = Vec::new();
    t.secondary[BY_GROUP.0 as usize].1.scan(
        crate::storage::ordered::pair(g, 0),
        crate::storage::ordered::pair(g, u64::MAX),
        false,
        |k, _| {
            keys.push(k as u64);
            true
        },
    );
    keys
}

/// The group of each item of `island` in `keys`, read by a fresh
/// transaction (which fails if a lock was left behind).
fn item_groups(island: &Island, keys: &[u64]) -> Vec<u64> {
    let mut tx = island.worker().unwrap();
    keys.iter()
        .map(|&k| {
            tx.execute(0, |tx| {
                Box::pin(async move {
                    let h = tx.get(ITEMS, k).await?.expect("present");
                    Ok(tx.row(h).u64(ITEM_GROUP))
                })
            })
            .unwrap_or_else(|e| panic!("item {k} is not readable: {e}"))
        })
        .collect()
}

/// A secondary entry that a branch adds is in its island's index before any
/// branch of the transaction validates a scan or a miss, or releases. Here
/// T (home island 0) scans items 3 to 4 on island 0 (none) and moves item
/// 10 (island 1) into group 7, and asks to commit; its home branch, which
/// only validates that scan, runs at once. U, on island 1's other worker,
/// inserts item 3 (island 0) and scans group 7 on island 1, where T's
/// branch has not run: item 10's entry in group 7 was added only at that
/// branch's prepare. T missed U's item 3 (T → U) and U missed T's item 10
/// (U → T): both must not commit.
#[test]
fn a_remote_branchs_secondary_entries_are_in_before_any_branch_validates() {
    let (cl, islands) = open_items_cluster(&[1, 2], ClusterOptions::default());
    let mut u_saw = usize::MAX;
    let u_saw_at: *mut usize = &mut u_saw;
    let (ct, cu) = t_then_u_beside_ts_branch(
        &cl,
        |tx| async move {
            assert_eq!(tx.scan(ITEMS, 3, 4, 10, false).await?, 0, "no item 3 yet");
            let h = tx.get_for_update(ITEMS, 10).await?.expect("item 10");
            tx.row_mut(h).set_u64(ITEM_GROUP, 7);
            Ok(())
        },
        |tx| async move {
            let h = tx
                .insert(ITEMS, 3)
                .await?
                .ok_or(Abort::User("item 3 exists"))?;
            tx.row_mut(h).set_u64(ITEM_GROUP, 1);
            let n = tx.scan_secondary(ITEMS, BY_GROUP, 7, 10, false).await?;
            // SAFETY: `u_saw` outlives the schedule, which runs U to its end.
            unsafe { *u_saw_at = n };
            Ok(())
        },
    );
    assert!(
        !(ct && cu),
        "T (scanned items 3-4 empty, moved item 10 into group 7) and U (inserted item 3, \
         found {u_saw} items in group 7) both committed: a cycle"
    );
    let g = if ct { 7 } else { 0 };
    assert_eq!(item_groups(&islands[1], &[10]), [g]);
    assert_eq!(
        group_entries(&islands[1], 7),
        if ct { vec![10] } else { vec![] }
    );
    assert!(group_entries(&islands[1], 0).contains(&10) != ct);
}

/// The same with the home island's own entries: T (home island 0) scans
/// items 13 to 14 on island 1 (none) and moves item 1 (island 0) into group
/// 7, and asks to commit; island 1's branch validates the scan and votes
/// read-only, while T's home branch waits in its worker's queue. U, on
/// island 0's other worker, inserts item 13 (island 1) and scans group 7 on
/// island 0: item 1's entry was added only at the home branch's prepare.
#[test]
fn the_home_islands_secondary_entries_are_in_before_any_branch_validates() {
    let (cl, islands) = open_items_cluster(&[2, 1], ClusterOptions::default());
    let mut ex0 = cl.executor(0, 0).unwrap();
    let mut ex0u = cl.executor(0, 1).unwrap();
    let mut ex1 = cl.executor(1, 0).unwrap();
    let t = ex0.begin_home(false).unwrap();
    // SAFETY: each context outlives its procedure, which runs to its end
    // before its executor touches the context again.
    let tx_t: &mut Txn = unsafe { &mut *ex0.ctx_ptr(t) };
    run_by_hand(&mut ex0, &mut [&mut ex1], t, async move {
        assert_eq!(tx_t.scan(ITEMS, 13, 14, 10, false).await?, 0);
        let h = tx_t.get_for_update(ITEMS, 1).await?.expect("item 1");
        tx_t.row_mut(h).set_u64(ITEM_GROUP, 7);
        Ok(())
    })
    .unwrap();
    let rt = ex0.commit_home(t);
    // T's PrepareReq goes to island 1, whose branch prepares; the home
    // branch's waits in ex0's own queue, which runs only once U is decided.
    ex0.outbox.flush(&*ex0.transport, ex0.me);
    ex1.pump().unwrap();
    let u = ex0u.begin_home(false).unwrap();
    // SAFETY: as above.
    let tx_u: &mut Txn = unsafe { &mut *ex0u.ctx_ptr(u) };
    let mut u_saw = usize::MAX;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let u_proc = async {
        let h = tx_u
            .insert(ITEMS, 13)
            .await?
            .ok_or(Abort::User("item 13 exists"))?;
        tx_u.row_mut(h).set_u64(ITEM_GROUP, 1);
        u_saw = tx_u.scan_secondary(ITEMS, BY_GROUP, 7, 10, false).await?;
        Ok(())
    };
    let ru = run_until_decided(&mut ex0u, &mut ex1, u, u_proc, deadline);
    settle(&mut [&mut ex0, &mut ex0u, &mut ex1], deadline);
    let (ct, cu) = (committed(&ex0, &rt), committed(&ex0u, &ru));
    assert!(
        !(ct && cu),
        "T (scanned items 13-14 empty, moved item 1 into group 7) and U (inserted item 13, \
         found {u_saw} items in group 7) both committed: a cycle"
    );
    assert_eq!(item_groups(&islands[0], &[1]), [if ct { 7 } else { 0 }]);
    assert_eq!(
        group_entries(&islands[0], 7),
        if ct { vec![1] } else { vec![] }
    );
}

/// A branch adds its new secondary entries when the home locks it (its
/// LOCK round, before any branch prepares), and takes them out if it
/// aborts before it prepares: here T (home island 0) moves item 10
/// (island 1) into group 7, island 1 answers T's LOCK round, and T's branch
/// there then idles out before the home hears the answer.
#[test]
fn a_branch_that_aborts_after_its_lock_round_takes_its_secondary_entries_out() {
    let opts = ClusterOptions {
        timeouts: coord::Timeouts {
            branch_idle_us: 2_000,
            ..Default::default()
        },
        ..Default::default()
    };
    let (cl, islands) = open_items_cluster(&[1, 1], opts);
    let mut ex0 = cl.executor(0, 0).unwrap();
    let mut ex1 = cl.executor(1, 0).unwrap();
    let t = ex0.begin_home(false).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *ex0.ctx_ptr(t) };
    run_by_hand(&mut ex0, &mut [&mut ex1], t, async move {
        let h = tx.get_for_update(ITEMS, 10).await?.expect("item 10");
        tx.row_mut(h).set_u64(ITEM_GROUP, 7);
        Ok(())
    })
    .unwrap();
    // A LOCK that counts a change the branch never received is refused:
    // the entries it would add would not be those of the image to commit.
    let gtid = ex0.pool.ctx(t).dist.as_ref().unwrap().gtid;
    assert_eq!(ex1.lock_branch(gtid, 1, &[]), wire::Status::Refused);
    assert_eq!(group_entries(&islands[1], 7), Vec::<u64>::new());
    let rt = ex0.commit_home(t);
    ex0.outbox.flush(&*ex0.transport, ex0.me);
    ex1.pump().unwrap();
    assert_eq!(
        group_entries(&islands[1], 7),
        [10],
        "item 10's entry in group 7 is not in island 1's index after T's lock round"
    );
    assert_eq!(ex1.branches_in_flight(), 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    wait_until_branches_idle_out(&mut ex1, deadline);
    assert_eq!(
        group_entries(&islands[1], 7),
        Vec::<u64>::new(),
        "the aborted branch left item 10's entry in group 7"
    );
    assert!(group_entries(&islands[1], 0).contains(&10));
    settle(&mut [&mut ex0, &mut ex1], deadline);
    assert!(!committed(&ex0, &rt), "T committed without its branch");
    assert_eq!(item_groups(&islands[1], &[10]), [0]);
    assert_eq!(group_entries(&islands[1], 7), Vec::<u64>::new());
}

/// A LOCK round costs a round trip before the two-phase commit: only a
/// transaction with a pending write lock or a new secondary entry on
/// another island has one. Changes of remote rows read for update, of a
/// table without secondary indexes (the multisite microbenchmark's) or
/// that leave the indexed column as it was, start the commit at once; a
/// change that moves a remote row to another group, or an insert into a
/// table with a secondary index, does not.
#[test]
fn only_a_pending_lock_or_a_new_secondary_entry_elsewhere_takes_a_lock_round() {
    let (bank, _) = open_cluster(2, 10, ClusterOptions::default());
    let mut ex = [bank.executor(0, 0).unwrap(), bank.executor(1, 0).unwrap()];
    let (c, tx) = home_context(&mut ex[0]);
    assert!(!takes_a_lock_round(
        &mut ex,
        c,
        move_money(tx, &[(1, -5), (9, 5)])
    ));
    let (cl, _) = open_items_cluster(&[1, 1], ClusterOptions::default());
    let mut ex = [cl.executor(0, 0).unwrap(), cl.executor(1, 0).unwrap()];
    let (c, tx) = home_context(&mut ex[0]);
    assert!(!takes_a_lock_round(
        &mut ex,
        c,
        set_item(tx, 10, 0, b"same group")
    ));
    let (c, tx) = home_context(&mut ex[0]);
    assert!(takes_a_lock_round(
        &mut ex,
        c,
        set_item(tx, 10, 4, b"another group")
    ));
    let (c, tx) = home_context(&mut ex[0]);
    assert!(takes_a_lock_round(&mut ex, c, async move {
        let h = tx.insert(ITEMS, 15).await?.expect("no item 15 yet");
        tx.row_mut(h).set_u64(ITEM_GROUP, 2);
        Ok(())
    }));
}

/// A new home context of `ex`, and its transaction for a procedure.
fn home_context(ex: &mut Executor) -> (u32, &'static mut Txn) {
    let c = ex.begin_home(false).unwrap();
    // SAFETY: the context lives as long as the executor, and the procedure
    // that borrows it runs to its end before the executor touches the
    // context again (the callers run it by hand, then commit).
    (c, unsafe { &mut *ex.ctx_ptr(c) })
}

/// Runs `proc` on home context `c` of `ex[0]` (island 0) by hand and
/// commits it, which must succeed; says whether the commit took a LOCK round.
fn takes_a_lock_round(
    ex: &mut [Executor; 2],
    c: u32,
    proc: impl std::future::Future<Output = Result<(), Abort>>,
) -> bool {
    let [ex0, ex1] = ex;
    run_by_hand(ex0, &mut [&mut *ex1], c, proc).unwrap();
    let r = ex0.commit_home(c);
    let round = !ex0.locking.is_empty();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    settle(&mut [&mut *ex0, &mut *ex1], deadline);
    assert!(committed(ex0, &r), "the transaction did not commit: {r:?}");
    round
}

/// Sets the group and the padding of item `k`, read for update.
async fn set_item(tx: &mut Txn, k: u64, g: u64, pad: &[u8]) -> Result<(), Abort> {
    let h = tx.get_for_update(ITEMS, k).await?.expect("the item");
    let mut r = tx.row_mut(h);
    r.set_u64(ITEM_GROUP, g);
    r.set_str(Col(1), pad);
    Ok(())
}

/// A scan validated at one branch's prepare is a check at one instant,
/// which must come before any branch of the transaction releases a lock:
/// otherwise a writer can slip in between and restore what the scan saw.
/// T (home island 0) scans items 13 to 14 on island 1 (none). V, local to
/// island 1, inserts item 13 and changes item 11. T reads item 11 (V's) and
/// item 1 (island 0), and asks to commit; its home branch, read-only,
/// prepares at once, while its branch on island 1 waits in its worker's
/// mailbox. U, on island 1's other worker, changes item 1 and deletes item
/// 13, and commits. T's branch on island 1 runs only then: items 13 to 14
/// are empty again. T read V's item 11 (V → T), V's item 13 is what U
/// deleted (V → U), and T read item 1 before U changed it (T → U): T saw
/// item 13 absent after V inserted it and before U deleted it, which no
/// serial order explains. Both must not commit.
#[test]
fn no_branch_releases_before_every_branch_has_validated() {
    let (cl, islands) = open_items_cluster(&[1, 2], ClusterOptions::default());
    let mut ex0 = cl.executor(0, 0).unwrap();
    let mut ex1 = [cl.executor(1, 0).unwrap(), cl.executor(1, 1).unwrap()];
    let t = ex0.begin_home(false).unwrap();
    let (ext, exu) = branch_and_other(&cl, &mut ex1, &ex0, t);
    // SAFETY: the context outlives T's procedure (run in two parts), which
    // runs to its end before the executor touches the context again.
    let tx_t: &mut Txn = unsafe { &mut *ex0.ctx_ptr(t) };
    run_by_hand(&mut ex0, &mut [&mut *ext], t, async {
        assert_eq!(
            tx_t.scan(ITEMS, 13, 14, 10, false).await?,
            0,
            "no item 13 yet"
        );
        Ok(())
    })
    .unwrap();
    let (v, tx_v) = home_context(exu);
    run_by_hand(exu, &mut [], v, async {
        set_item(tx_v, 11, 0, b"V").await?;
        let h = tx_v.insert(ITEMS, 13).await?.expect("no item 13 yet");
        tx_v.row_mut(h).set_u64(ITEM_GROUP, 0);
        Ok(())
    })
    .unwrap();
    assert!(matches!(exu.commit_home(v), Ok(HomeCommit::Local(_))));
    let mut t_saw = Vec::new();
    run_by_hand(&mut ex0, &mut [&mut *ext], t, async {
        let h = tx_t.get(ITEMS, 11).await?.expect("item 11");
        t_saw = tx_t.row(h).str(Col(1)).to_vec();
        tx_t.get(ITEMS, 1).await?.expect("item 1");
        Ok(())
    })
    .unwrap();
    assert_eq!(t_saw, b"V", "T read V's item 11");
    let rt = ex0.commit_home(t);
    // The home branch prepares in this round; island 1's PrepareReq waits
    // in the mailbox of T's branch's worker, which runs once U is decided.
    ex0.pump().unwrap();
    let (u, tx_u) = home_context(exu);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let u_proc = async {
        set_item(tx_u, 1, 0, b"U").await?;
        let h = tx_u.get_for_update(ITEMS, 13).await?.expect("V's item 13");
        tx_u.delete(h).await
    };
    let ru = run_until_decided(exu, &mut ex0, u, u_proc, deadline);
    settle(&mut [&mut ex0, &mut *exu, &mut *ext], deadline);
    let (ct, cu) = (committed(&ex0, &rt), committed(exu, &ru));
    assert!(
        !(ct && cu),
        "T (scanned items 13-14 empty, read V's item 11 and item 1) and U (changed item 1, \
         deleted V's item 13) both committed: a cycle"
    );
    assert_eq!(
        group_entries(&islands[1], 0).contains(&13),
        !cu,
        "item 13 is gone iff U committed"
    );
}

/// Requests that abort on a conflict until they are given up (every third,
/// from the first), that their procedure rolls back (the second), and that
/// commit (the third).
struct Refusals {
    next: std::sync::atomic::AtomicUsize,
}

impl Workload for Refusals {
    type Req = usize;

    fn types(&self) -> Vec<&'static str> {
        vec!["conflict", "rollback", "commit"]
    }

    fn next(&self, _: usize, _: &mut FastRng, req: &mut usize) -> usize {
        *req = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3;
        *req
    }

    async fn run<'a>(&'a self, _: &'a mut Txn, req: &'a usize) -> Result<(), Abort> {
        match *req {
            0 => Err(Abort::Conflict(crate::AbortReason::ReadValidation)),
            1 => Err(Abort::User("refused")),
            _ => Ok(()),
        }
    }

    fn max_attempts(&self, _: &usize) -> Option<u32> {
        Some(3)
    }
}

#[test]
fn every_aborted_attempt_is_counted_by_reason_inline_and_in_slots() {
    use crate::AbortReason;
    let open = |i: usize| {
        let mut cfg = IslandConfig::new(CcKind::NoWait, 1);
        cfg.name = format!("island-{i}");
        cfg.contexts = ClusterOptions::default().contexts_needed(1);
        Island::open(cfg, &tables(8)).unwrap()
    };
    // Without a router the executors run attempts inline; with one, in slots.
    for routed in [false, true] {
        let lane = if routed { "slots" } else { "inline" };
        let cl = if routed {
            let opened = vec![open(0), open(1)];
            Cluster::new(
                opened,
                vec![1, 1],
                Arc::new(SplitRouter),
                Default::default(),
            )
        } else {
            Cluster::local(vec![open(0).0, open(1).0], vec![1, 1], Default::default())
        }
        .unwrap();
        assert_eq!(cl.routes(), routed);
        let workers: Vec<ClusterWorker> = [Some(30), Some(0)]
            .iter()
            .enumerate()
            .map(|(island, &limit)| ClusterWorker {
                island,
                worker: 0,
                cpu: None,
                limit,
            })
            .collect();
        let wl = Arc::new(Refusals {
            next: Default::default(),
        });
        let stats = run_to_completion(&cl, &workers, wl, 3).unwrap();
        let c = cl.island_counts(0);
        let by = |r: AbortReason| c.aborts[r.index()];
        assert_eq!(
            by(AbortReason::ReadValidation),
            30,
            "{lane}: 10 requests of 3 attempts each ({c:?})"
        );
        assert_eq!(c.aborts.iter().sum::<u64>(), 30, "{lane}: {c:?}");
        assert_eq!(c.gave_up, 10, "{lane}: {c:?}");
        assert_eq!(c.user_aborts, 10, "{lane}: {c:?}");
        // The run's own statistics say the same.
        assert_eq!(stats[0].aborts_for(AbortReason::ReadValidation), 30);
        assert_eq!(stats[0].user_aborts.iter().sum::<u64>(), 10);
        assert_eq!(stats[0].total_commits(), 10, "{lane}");
        assert_eq!(cl.island_counts(1), IslandCounts::default(), "{lane}");
        assert_eq!(cl.island_counts(2), IslandCounts::default(), "no island 2");
    }
}

/// Frames, batches and bytes are counted per worker where the outbox
/// hands a batch to the transport: a run whose transfers cross islands
/// counts them on both islands, consistently (a batch holds one frame or
/// more, a frame at least a 2PC message behind its length); a run on the
/// same routed cluster whose transactions keep to their home island
/// counts nothing.
#[test]
fn traffic_is_counted_per_worker_and_only_when_transactions_cross() {
    // The smallest frame: its length, then a 2PC message (kind + gtid).
    const MIN_FRAME_BYTES: u64 = 4 + 9;
    let accounts = 40;
    let (cl, _islands) = open_cluster(2, accounts, ClusterOptions::default());
    let wl = Arc::new(IslandBank {
        per_island: accounts / 2,
        workers_per_island: 1,
        requests: Default::default(),
    });
    run_to_completion(&cl, &clients(2, 100), wl, 3).unwrap();
    for i in 0..2 {
        let c = cl.island_counts(i);
        assert_eq!(c.distributed_commits, 0, "island {i}: {c:?}");
        assert_eq!(
            (c.frames_out, c.batches_out, c.bytes_out),
            (0, 0, 0),
            "island {i}: nothing crossed, nothing was sent ({c:?})"
        );
    }
    assert_eq!(cl.syscalls(), (0, 0), "in-process: no system call");

    let (cl, _islands) = open_cluster(2, accounts, ClusterOptions::default());
    let stats = run_to_completion(&cl, &clients(2, 300), bank(accounts), 3).unwrap();
    let distributed: u64 = stats.iter().map(|s| s.distributed).sum();
    let counts = [cl.island_counts(0), cl.island_counts(1)];
    assert_eq!(
        counts.iter().map(|c| c.distributed_commits).sum::<u64>(),
        distributed,
        "{counts:?}"
    );
    assert!(distributed > 100, "{distributed} distributed commits");
    for (i, c) in counts.iter().enumerate() {
        assert!(c.batches_out > 0, "island {i}: {c:?}");
        assert!(c.frames_out >= c.batches_out, "island {i}: {c:?}");
        assert!(
            c.bytes_out >= c.frames_out * MIN_FRAME_BYTES,
            "island {i}: {c:?}"
        );
    }
    // Each distributed transfer sends at least a remote request and its
    // reply, a prepare, its vote and the decision.
    let frames: u64 = counts.iter().map(|c| c.frames_out).sum();
    assert!(
        frames >= 5 * distributed,
        "{frames} frames for {distributed} distributed commits"
    );
}

/// A wait on a worker that has never served its mailbox (it published no
/// step) is unanswered once its time is up: nothing shows that worker busy,
/// and a lost message to it must cost the wait's timeout, not
/// `busy_peer_max`.
#[test]
fn a_wait_on_a_worker_that_never_served_is_unanswered_after_its_timeout() {
    let (cl, _islands) = open_cluster(2, 10, ClusterOptions::default());
    let home = cl.executor(0, 0).unwrap();
    let peer = cl.endpoint(1, 0);
    let (since, timeout) = (1_000, 20_000);
    assert!(!home.unanswered(peer, since, timeout, since + timeout - 1));
    assert!(home.unanswered(peer, since, timeout, since + timeout));
}

/// A worker that served once and then froze (a procedure that never
/// yields, a worker that is gone) is busy to the waits begun after its last
/// step, past their timeout, but only until `busy_peer_max`: then it is
/// silent and the wait ends.
#[test]
fn a_wait_on_a_frozen_worker_ends_at_busy_peer_max() {
    let opts = ClusterOptions {
        busy_peer_max: Duration::from_millis(50),
        ..Default::default()
    };
    let (cl, _islands) = open_cluster(2, 10, opts);
    let home = cl.executor(0, 0).unwrap();
    let mut part = cl.executor(1, 0).unwrap();
    part.pump().unwrap();
    let peer = part.endpoint();
    let since = part.now_us() + 1;
    let timeout = 20_000;
    assert!(!home.unanswered(peer, since, timeout, since + timeout));
    assert!(!home.unanswered(peer, since, timeout, since + 49_999));
    assert!(home.unanswered(peer, since, timeout, since + 50_000));
    // Had it served half the timeout after the wait began, the wait would
    // end at its timeout.
    cl.publish_served_us(peer, since + timeout / 2);
    assert!(home.unanswered(peer, since, timeout, since + timeout));
}

/// [`Bank`]'s transfers, noting each worker's thread id and counting the
/// acknowledged commits: for tests that watch the worker threads.
struct WatchedBank {
    bank: Arc<Bank>,
    /// Each worker's thread id (0: not seen yet).
    tids: Vec<std::sync::atomic::AtomicI32>,
    acknowledged: std::sync::atomic::AtomicU64,
}

impl WatchedBank {
    fn new(accounts: u64, workers: usize) -> Arc<WatchedBank> {
        Arc::new(WatchedBank {
            bank: bank(accounts),
            tids: (0..workers).map(|_| Default::default()).collect(),
            acknowledged: Default::default(),
        })
    }

    fn acknowledged(&self) -> u64 {
        self.acknowledged.load(Ordering::Acquire)
    }

    /// The worker threads' ids, once every worker has asked for a request.
    fn tids(&self) -> Option<Vec<i32>> {
        let tids: Vec<i32> = self
            .tids
            .iter()
            .map(|t| t.load(Ordering::Acquire))
            .collect();
        tids.iter().all(|&t| t != 0).then_some(tids)
    }
}

impl Workload for WatchedBank {
    type Req = Transfer;

    fn types(&self) -> Vec<&'static str> {
        self.bank.types()
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Transfer) -> usize {
        if self.tids[worker].load(Ordering::Relaxed) == 0 {
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            self.tids[worker].store(tid, Ordering::Release);
        }
        self.bank.next(worker, rng, req)
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a Transfer) -> Result<(), Abort> {
        self.bank.run(tx, req).await
    }

    fn finished(&self, _: usize, _: &mut Transfer, outcome: crate::proc::Outcome) {
        if matches!(outcome, crate::proc::Outcome::Committed) {
            self.acknowledged.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Sets a run's phase to `FAILED` when dropped while it is still
/// `MEASURE` (an assertion of the thread that runs the workers failed), so
/// that the workers leave at once and the test ends.
struct FailAtExit<'a>(&'a std::sync::atomic::AtomicU8);

impl Drop for FailAtExit<'_> {
    fn drop(&mut self) {
        let _ = self.0.compare_exchange(
            crate::proc::run::MEASURE,
            crate::proc::run::FAILED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// A worker's statistics and result at the end of its run.
type WorkerEnd = (crate::proc::stats::WorkerStats, Result<(), Error>);

/// Runs `bodies` (workers from [`super::run::executor_bodies`]), a thread
/// each, in the `MEASURE` phase while `drive` runs on this thread, then
/// stops them (`STOP`) and joins them. Returns what `drive` returned, and
/// each worker's statistics and result. Should `drive` fail an assertion,
/// the workers leave at once.
fn run_while<T>(
    bodies: Vec<crate::proc::run::WorkerBody>,
    drive: impl FnOnce() -> T,
) -> (T, Vec<WorkerEnd>) {
    let phase = std::sync::atomic::AtomicU8::new(crate::proc::run::MEASURE);
    std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .into_iter()
            .map(|body| {
                let phase = &phase;
                s.spawn(move || body(phase, &crate::proc::stats::ProgressCounter::new()))
            })
            .collect();
        let leave = FailAtExit(&phase);
        let out = drive();
        phase.store(crate::proc::run::STOP, Ordering::Release);
        drop(leave);
        let results = handles
            .into_iter()
            .map(|h| h.join().expect("no worker panicked"))
            .collect();
        (out, results)
    })
}

/// Waits until `done` holds; fails, saying `what` did not happen, after
/// `limit`.
fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The CPU time (user and system) each thread of `tids` has used so far.
fn threads_cpu(tids: &[i32]) -> Vec<Duration> {
    tids.iter()
        .map(|&tid| {
            let t = crate::cpu::CpuTime::task_from_proc_stat(tid)
                .unwrap_or_else(|e| panic!("CPU time of worker thread {tid}: {e}"));
            t.user + t.system
        })
        .collect()
}

/// Rows of `islands`' accounts and receipts that a transaction still holds
/// a lock on, as (island, table, key).
fn locked_rows(islands: &[Island]) -> Vec<(usize, u16, u64)> {
    let mut locked = Vec::new();
    for (i, island) in islands.iter().enumerate() {
        for table in [ACCOUNTS, RECEIPTS] {
            let t = island.catalog().table(table);
            let mut keys = Vec::new();
            t.for_each_row(|k, _, _| keys.push(k));
            for k in keys {
                let held = t
                    .lookup(k)
                    .is_some_and(|rid| island.shared().cc.is_locked(t, rid, true));
                if held {
                    locked.push((i, table, k));
                }
            }
        }
    }
    locked
}

/// Workers of a logged deployment of several islands that wait only for
/// their log sleep rather than spin: here both islands' logs stall (their
/// writes and fdatasyncs held back) for 300 ms, three times, under a
/// `sync` bank whose transfers cross the islands, and over the stalls each
/// worker thread may use at most 30% of a core. A worker that yielded in a
/// loop instead kept a core busy, which on a machine with no more cores
/// than busy threads starves the very `fdatasync` it waits for. After each
/// stall the run commits again, and it ends with commits, no row locked and
/// the money conserved.
#[test]
fn workers_that_wait_only_for_a_stalled_log_sleep() {
    const ACCOUNTS_N: u64 = 64;
    const STALLS: usize = 3;
    const STALL: Duration = Duration::from_millis(300);
    // The first part of each stall is not measured: the workers fill their
    // windows with commits that wait for the log.
    const SETTLE: Duration = Duration::from_millis(50);
    const MAX_SHARE: f64 = 0.3;
    let dir = fresh_dir("log-stall");
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opts = ClusterOptions::default();
    let config = sync_island_config(&dir, opts.contexts_needed(1));
    let defs = tables(ACCOUNTS_N);
    let per = ACCOUNTS_N / 2;
    let opened: Vec<(Island, RecoveryReport)> = (0..2u64)
        .map(|i| {
            let mut cfg = config(i as usize);
            cfg.device = Some(Arc::new(GatedDevice {
                hold: Arc::clone(&hold),
            }));
            let island = open_with_accounts(cfg, &defs, per * i..per * (i + 1));
            (island, RecoveryReport::default())
        })
        .collect();
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let router = Arc::new(BankRouter {
        per_island: per,
        islands: 2,
    });
    let cl = Cluster::new(opened, vec![1, 1], router, opts).unwrap();
    let workload = WatchedBank::new(ACCOUNTS_N, 2);
    let workers: Vec<ClusterWorker> = (0..2)
        .map(|island| ClusterWorker {
            island,
            worker: 0,
            cpu: None,
            limit: None,
        })
        .collect();
    let bodies = super::run::executor_bodies(&cl, &workers, &workload, 11, 16).unwrap();
    let mut cpu = [Duration::ZERO; 2];
    let mut measured = Duration::ZERO;
    let ((), results) = run_while(bodies, || {
        // The logs go on before the workers leave (a worker that leaves
        // may wait for its log), also after a failed assertion.
        let _open = OpenGate(Arc::clone(&hold));
        let limit = Duration::from_secs(30);
        wait_for("no commit before the first stall", limit, || {
            workload.acknowledged() >= 20 && workload.tids().is_some()
        });
        let tids = workload.tids().expect("every worker asked for a request");
        for _ in 0..STALLS {
            hold.store(true, Ordering::Release);
            std::thread::sleep(SETTLE);
            let (t0, cpu0) = (std::time::Instant::now(), threads_cpu(&tids));
            std::thread::sleep(STALL - SETTLE);
            let cpu1 = threads_cpu(&tids);
            measured += t0.elapsed();
            hold.store(false, Ordering::Release);
            for (c, (c0, c1)) in cpu.iter_mut().zip(cpu0.iter().zip(&cpu1)) {
                *c += c1.saturating_sub(*c0);
            }
            let before = workload.acknowledged();
            wait_for("no commit after a stall", limit, || {
                workload.acknowledged() > before + 10
            });
        }
    });
    for (w, (_, r)) in results.iter().enumerate() {
        assert!(r.is_ok(), "worker {w} failed: {r:?}");
    }
    let shares: Vec<f64> = cpu
        .iter()
        .map(|c| c.as_secs_f64() / measured.as_secs_f64())
        .collect();
    eprintln!(
        "worker CPU over {STALLS} stalls ({measured:?} measured): {cpu:?}, {shares:.3?} of a core"
    );
    for (w, share) in shares.iter().enumerate() {
        assert!(
            *share < MAX_SHARE,
            "worker {w} used {:.0}% of a core while it waited only for its stalled log",
            share * 100.0
        );
    }
    let commits: u64 = results.iter().map(|(s, _)| s.total_commits()).sum();
    assert!(commits > 0, "the run counted no commit");
    drop(cl);
    assert_eq!(locked_rows(&islands), [], "rows still locked after the run");
    let (balances, _) = contents(&islands, ACCOUNTS_N);
    assert_eq!(
        balances.iter().sum::<i64>(),
        INITIAL * ACCOUNTS_N as i64,
        "money was created or destroyed"
    );
    shut_down_and_remove(islands, &dir);
}

/// Requests of island 1 of a cluster of 40 accounts (20..40 on island 1)
/// beside a branch that holds accounts 20..24 there: the first `blocked`
/// requests pay into one of those accounts from a free one, the rest move
/// money between free accounts (24..40). Counts the commits of each kind.
struct BesideDoubt {
    blocked: u64,
    requests: std::sync::atomic::AtomicU64,
    blocked_commits: std::sync::atomic::AtomicU64,
    free_commits: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct BesideReq {
    blocked: bool,
    moves: [(u64, i64); 2],
}

impl BesideDoubt {
    fn count(c: &std::sync::atomic::AtomicU64) -> u64 {
        c.load(Ordering::Acquire)
    }
}

impl Workload for BesideDoubt {
    type Req = BesideReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["blocked", "free"]
    }

    fn next(&self, _: usize, _: &mut FastRng, req: &mut BesideReq) -> usize {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        req.blocked = n < self.blocked;
        let free = 24 + n % 16;
        req.moves = if req.blocked {
            // The held account first: the attempt ends there.
            [(20 + n % 4, 1), (free, -1)]
        } else {
            [(free, 1), (24 + (n + 1) % 16, -1)]
        };
        usize::from(!req.blocked)
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a BesideReq) -> Result<(), Abort> {
        move_money(tx, &req.moves).await
    }

    fn finished(&self, _: usize, req: &mut BesideReq, outcome: crate::proc::Outcome) {
        if matches!(outcome, crate::proc::Outcome::Committed) {
            let kind = if req.blocked {
                &self.blocked_commits
            } else {
                &self.free_commits
            };
            kind.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Retries that wait for rows held in doubt leave room for new work: T
/// (home island 0) holds accounts 20..24 of island 1 in a prepared branch
/// whose decision waits, unread, in the mailbox of that branch's worker,
/// while island 1's other worker runs requests whose first ones (more than
/// its window of begun transactions) pay into those accounts, and the rest
/// move money between free accounts. The free ones commit while the
/// blocked ones wait; once T's decision is read, the blocked ones commit
/// too. Were the waiting retries counted whole against the window, they
/// would fill it and nothing more would start until T's decision.
#[test]
fn retries_blocked_by_a_branch_in_doubt_leave_room_for_new_requests() {
    let opts = ClusterOptions::default();
    let window = opts.inflight + opts.commit_window;
    let (cl, islands) = open_cluster_with_workers(&[1, 2], 40, opts);
    let mut ex0 = cl.executor(0, 0).unwrap();
    let ct = ex0.begin_home(false).unwrap();
    let gtid = ex0.pool.ctx_ref(ct).dist.as_ref().unwrap().gtid;
    let held_by = cl.branch_worker(1, gtid);
    let mut branch = cl.executor(1, held_by).unwrap();
    // SAFETY: the context outlives the procedure, which runs to its end
    // before the executor touches the context again.
    let tx: &mut Txn = unsafe { &mut *ex0.ctx_ptr(ct) };
    let moves = [(0, -4), (20, 1), (21, 1), (22, 1), (23, 1)];
    run_by_hand(&mut ex0, &mut [&mut branch], ct, move_money(tx, &moves)).unwrap();
    let Ok(HomeCommit::Distributed(g)) = ex0.commit_home(ct) else {
        panic!("T commits with 2PC");
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // The branch's worker runs before the home in each round, so that it
    // does not read the decision the home sends once the vote is in.
    while ex0.coord.missing_votes(g).is_some() {
        assert!(std::time::Instant::now() < deadline, "no vote");
        branch.pump().unwrap();
        ex0.pump().unwrap();
    }
    // T's branch is prepared and holds accounts 20..24 until `branch` is
    // pumped again.
    let workload = Arc::new(BesideDoubt {
        blocked: window as u64 + 4,
        requests: Default::default(),
        blocked_commits: Default::default(),
        free_commits: Default::default(),
    });
    let stream = [ClusterWorker {
        island: 1,
        worker: 1 - held_by,
        cpu: None,
        limit: None,
    }];
    let bodies = super::run::executor_bodies(&cl, &stream, &workload, 3, 64).unwrap();
    let (free_in_doubt, results) = run_while(bodies, || {
        let limit = Duration::from_secs(10);
        wait_for(
            "no transaction on free rows committed beside the blocked retries",
            limit,
            || BesideDoubt::count(&workload.free_commits) >= 200,
        );
        let free_in_doubt = BesideDoubt::count(&workload.free_commits);
        assert_eq!(
            BesideDoubt::count(&workload.blocked_commits),
            0,
            "T's branch held its rows"
        );
        let deadline = std::time::Instant::now() + limit;
        settle(&mut [&mut ex0, &mut branch], deadline);
        wait_for(
            "the blocked transactions did not commit once T's branch committed",
            limit,
            || BesideDoubt::count(&workload.blocked_commits) == workload.blocked,
        );
        free_in_doubt
    });
    for (_, r) in results {
        r.unwrap();
    }
    eprintln!("{free_in_doubt} free-row commits while T was in doubt");
    drop((ex0, branch));
    drop(cl);
    assert_eq!(locked_rows(&islands), [], "rows still locked after the run");
    let (balances, _) = contents(&islands, 40);
    assert_eq!(balances.iter().sum::<i64>(), INITIAL * 40);
    assert_eq!(balances[0], INITIAL - 4, "T moved 4 out of account 0");
}
