//! Clusters of one island each, joined by a real transport: three
//! [`Cluster`]s in one process, each running ONE local island (its own log
//! directory, its own executors) with the two others as
//! [`Member::Remote`], every batch between islands crossing a Unix socket
//! (`Uds`) or a shared-memory ring (`Shm`). Bank transfers between accounts of all three islands, most of
//! them multisite, run through two-phase commit between the clusters. At the
//! end: the total is conserved, every transfer is whole (each account's
//! balance is its initial one plus what the receipts moved in and out), every
//! acknowledged transfer's receipt is present (once: receipts are keyed), and
//! each island holds only its own rows.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use islands::cc::CcKind;
use islands::executor::run::{serve, ClusterWorker};
use islands::executor::{Cluster, ClusterOptions, Member};
use islands::island::{Island, IslandConfig, RecoveryReport};
use islands::proc::rng::FastRng;
use islands::proc::run::{FAILED, MEASURE, STOP};
use islands::proc::stats::ProgressCounter;
use islands::proc::{Outcome, Workload};
use islands::route::Router;
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::transport::handshake::{build_id, Hello, Secret, WIRE_VERSION};
use islands::transport::join::{Kind, Linked};
use islands::transport::peer::PeerState;
use islands::transport::shm::{Shm, ShmConfig};
use islands::transport::uds::{Uds, UdsConfig};
use islands::transport::{Layout, Transport};
use islands::txn::Txn;
use islands::wal::Durability;
use islands::Abort;

use crate::common::temp_dir;

const ISLANDS: usize = 3;
const ACCOUNTS: u16 = 0;
const RECEIPTS: u16 = 1;
const BAL: Col = Col(0);
const FROM: Col = Col(0);
const TO: Col = Col(1);
const AMOUNT: Col = Col(2);
/// Accounts per island: enough that the rows a dead island's in-doubt
/// branches keep locked leave most transfers between the live ones free.
const PER: u64 = 200;
const N: u64 = PER * ISLANDS as u64;
const INITIAL: i64 = 1_000;

fn tables() -> Vec<TableDef> {
    vec![
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            1 << 12,
            PrimaryKind::Hash,
        ),
        TableDef::new(
            "receipts",
            &[
                ("from", ColType::U64),
                ("to", ColType::U64),
                ("amount", ColType::I64),
            ],
            1 << 16,
            PrimaryKind::Hash,
        ),
    ]
}

/// Account `k` lives on island `k / PER`; a receipt with its source account
/// (kept in the key's low 32 bits).
struct Thirds;

impl Router for Thirds {
    fn island_of(&self, table: u16, key: u64) -> Option<u16> {
        let account = if table == RECEIPTS {
            key & 0xffff_ffff
        } else {
            key
        };
        Some((account / PER) as u16)
    }
}

/// What the three clusters' workloads share: the transfers left to start,
/// the receipt numbers, and what came of them.
#[derive(Default)]
struct Ledger {
    left: AtomicI64,
    next: AtomicU64,
    /// By home island.
    started: [AtomicU64; ISLANDS],
    finished: [AtomicU64; ISLANDS],
    acked: Mutex<Vec<u64>>,
    /// Transfers that failed because an island was down, with the time
    /// they failed and the island their `to` account is on.
    down: Mutex<Vec<(Instant, u64)>>,
    /// Committed transfers whose `to` is on each island, by home island.
    crossed: [[AtomicU64; ISLANDS]; ISLANDS],
}

impl Ledger {
    fn finished(&self) -> u64 {
        self.finished
            .iter()
            .map(|f| f.load(Ordering::Acquire))
            .sum()
    }
}

/// Transfers from an account of the worker's island to any account.
struct Transfers {
    /// The island of every worker (a cluster of one local island); `None`:
    /// worker `w` runs on island `w`.
    island: Option<u64>,
    ledger: Arc<Ledger>,
}

impl Transfers {
    fn home(&self, w: usize) -> u64 {
        self.island.unwrap_or(w as u64)
    }
}

#[derive(Default)]
struct Req {
    from: u64,
    to: u64,
    amount: i64,
    receipt: u64,
}

impl Workload for Transfers {
    type Req = Req;
    fn types(&self) -> Vec<&'static str> {
        vec!["transfer"]
    }
    fn next(&self, w: usize, rng: &mut FastRng, r: &mut Req) -> usize {
        r.from = self.home(w) * PER + rng.below(PER);
        r.to = (r.from + 1 + rng.below(N - 1)) % N;
        r.amount = 1 + rng.below(20) as i64;
        r.receipt = (self.ledger.next.fetch_add(1, Ordering::Relaxed) << 32) | r.from;
        0
    }
    fn poll_next(&self, w: usize, rng: &mut FastRng, r: &mut Req) -> Option<usize> {
        if self.ledger.left.fetch_sub(1, Ordering::AcqRel) <= 0 {
            return None;
        }
        self.ledger.started[self.home(w) as usize].fetch_add(1, Ordering::AcqRel);
        Some(self.next(w, rng, r))
    }
    fn finished(&self, _w: usize, r: &mut Req, outcome: Outcome) {
        let l = &self.ledger;
        match outcome {
            Outcome::Committed => {
                l.acked.lock().unwrap().push(r.receipt);
                l.crossed[(r.from / PER) as usize][(r.to / PER) as usize]
                    .fetch_add(1, Ordering::AcqRel);
            }
            Outcome::Failed(islands::Error::IslandDown { island }) => {
                assert_eq!(
                    u64::from(island),
                    r.to / PER,
                    "the island down is the one it needs"
                );
                l.down.lock().unwrap().push((Instant::now(), r.to / PER));
            }
            _ => {}
        }
        l.finished[(r.from / PER) as usize].fetch_add(1, Ordering::AcqRel);
    }
    async fn run<'a>(&'a self, tx: &'a mut Txn, r: &'a Req) -> Result<(), Abort> {
        let a = tx
            .get_for_update(ACCOUNTS, r.from)
            .await?
            .ok_or(Abort::User("no account"))?;
        let b = tx
            .get_for_update(ACCOUNTS, r.to)
            .await?
            .ok_or(Abort::User("no account"))?;
        let v = tx.row(a).i64(BAL);
        tx.row_mut(a).set_i64(BAL, v - r.amount);
        let v = tx.row(b).i64(BAL);
        tx.row_mut(b).set_i64(BAL, v + r.amount);
        let h = tx
            .insert(RECEIPTS, r.receipt)
            .await?
            .ok_or(Abort::User("receipt exists"))?;
        let mut row = tx.row_mut(h);
        row.set_u64(FROM, r.from);
        row.set_u64(TO, r.to);
        row.set_i64(AMOUNT, r.amount);
        Ok(())
    }
}

fn options() -> ClusterOptions {
    ClusterOptions {
        inflight: 4,
        ..Default::default()
    }
}

/// Opens island `i` in `dir/island-i` (loading its accounts if it is new).
fn open_island(dir: &Path, i: usize, durability: Durability) -> (Island, RecoveryReport) {
    let mut cfg = IslandConfig::new(CcKind::NoWait, 1);
    if durability != Durability::Off {
        cfg = cfg.durable(durability, dir.join(format!("island-{i}")));
    }
    cfg.name = format!("island-{i}");
    cfg.contexts = options().contexts_needed(1);
    let fresh = !dir.join(format!("island-{i}")).exists() || durability == Durability::Off;
    let (island, report) = Island::open(cfg, &tables()).unwrap();
    if fresh {
        let mut l = island.loader().unwrap();
        for k in i as u64 * PER..(i as u64 + 1) * PER {
            l.put(ACCOUNTS, k, |r| r.set_i64(BAL, INITIAL)).unwrap();
        }
    }
    if fresh && durability != Durability::Off {
        // The load is durable only in a checkpoint: a reopened island
        // recovers from it.
        island.checkpoint().unwrap();
    }
    (island, report)
}

const SECRET: &str = "clusters-test-secret-0123456789";

/// The settings of the Unix-socket transport of island `me` of three
/// one-worker islands, with sockets in `dir`.
fn uds_config(dir: &Path, me: usize, incarnation: u64) -> UdsConfig {
    let workers = vec![1u32; ISLANDS];
    let hello = Hello {
        wire_version: WIRE_VERSION,
        transport: islands::transport::join::Kind::Uds,
        build_id: build_id(),
        deployment: 0xc105,
        island: me as u16,
        incarnation,
        schema: 1,
        catalog: 2,
        workers: workers.clone(),
    };
    let paths: Vec<PathBuf> = (0..ISLANDS)
        .map(|i| dir.join(format!("i{i}.sock")))
        .collect();
    let mut cfg = UdsConfig::new(
        Layout::new(&workers, me as u16),
        paths,
        Secret::new(SECRET.as_bytes().to_vec()).unwrap(),
        hello,
    );
    cfg.heartbeat = Duration::from_millis(50);
    cfg.dead_after = Duration::from_millis(500);
    cfg
}

/// The Unix-socket transport of island `me` of three one-worker islands,
/// with sockets in `dir`.
fn uds(dir: &Path, me: usize, incarnation: u64) -> Arc<Uds> {
    Arc::new(Uds::new(uds_config(dir, me, incarnation)).unwrap())
}

/// The transport of island `me` as a process of its own would have it:
/// Unix sockets, or shared-memory rings set up over them.
fn linked(kind: Kind, dir: &Path, me: usize, incarnation: u64) -> Linked {
    match kind {
        Kind::Shm => Linked::Shm(
            Shm::for_process(uds_config(dir, me, incarnation), 0xc105, 1 << 20, 256).unwrap(),
        ),
        _ => Linked::Uds(uds(dir, me, incarnation)),
    }
}

/// A cluster running island `me` only (opened with its recovery report),
/// over `t`.
fn cluster_of(me: usize, opened: (Island, RecoveryReport), t: Arc<dyn Transport>) -> Arc<Cluster> {
    let mut opened = Some(opened);
    let members = (0..ISLANDS)
        .map(|i| match (i == me, opened.take()) {
            (true, Some((island, report))) => Member::Local(island, report),
            (_, o) => {
                opened = o;
                Member::Remote { workers: 1 }
            }
        })
        .collect();
    let opts = ClusterOptions {
        transport: Some(t),
        ..options()
    };
    Cluster::with_members(members, Arc::new(Thirds), opts).unwrap()
}

/// One cluster serving its island's transfers until its phase is `STOP`.
struct Running {
    phase: Arc<AtomicU8>,
    threads: Vec<std::thread::JoinHandle<Result<(), islands::Error>>>,
}

fn start(cl: &Arc<Cluster>, me: usize, ledger: &Arc<Ledger>) -> Running {
    let phase = Arc::new(AtomicU8::new(MEASURE));
    let workers = [ClusterWorker {
        island: me,
        worker: 0,
        cpu: None,
        limit: None,
    }];
    let w = Arc::new(Transfers {
        island: Some(me as u64),
        ledger: Arc::clone(ledger),
    });
    let threads = serve(cl, &workers, w, &phase, &[ProgressCounter::new()], |_| ()).unwrap();
    Running { phase, threads }
}

fn stop(r: Running) {
    r.phase.store(STOP, Ordering::Release);
    for t in r.threads {
        t.join().unwrap().unwrap();
    }
}

/// Waits until `f` holds, failing after a bound generous for a loaded machine.
fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Checks the invariants over the three islands (see the module
/// documentation); returns the number of receipts.
fn check(islands: &[Island], acked: &[u64]) -> usize {
    let mut balance = vec![None; N as usize];
    let mut expected = vec![INITIAL; N as usize];
    let mut receipts = HashSet::new();
    for (i, island) in islands.iter().enumerate() {
        island.catalog().table(ACCOUNTS).for_each_row(|k, _, row| {
            assert_eq!(k / PER, i as u64, "account {k} on island {i}");
            assert!(balance[k as usize].replace(row[0] as i64).is_none());
        });
        island.catalog().table(RECEIPTS).for_each_row(|k, _, row| {
            let (from, to, amount) = (row[0], row[1], row[2] as i64);
            assert_eq!(from / PER, i as u64, "receipt {k:x} on island {i}");
            assert!(receipts.insert(k), "receipt {k:x} twice");
            expected[from as usize] -= amount;
            expected[to as usize] += amount;
        });
    }
    let balance: Vec<i64> = balance
        .into_iter()
        .map(|b| b.expect("every account present"))
        .collect();
    assert_eq!(balance, expected, "a transfer is half-applied");
    assert_eq!(balance.iter().sum::<i64>(), INITIAL * N as i64);
    for r in acked {
        assert!(
            receipts.contains(r),
            "acknowledged transfer {r:x} is missing"
        );
    }
    receipts.len()
}

/// The shared-memory transports of the three islands, with their files in
/// `dir` (opened together: each waits for the others' files).
fn shms(dir: &Path) -> Vec<Arc<Shm>> {
    let mut cfg = ShmConfig::new(0x5111);
    cfg.dir = dir.to_path_buf();
    cfg.ring_bytes = 1 << 20;
    let hs: Vec<_> = (0..ISLANDS)
        .map(|i| {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                Shm::open(Layout::new(&[1; ISLANDS], i as u16), &cfg).map(Arc::new)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
}

/// Three clusters of one island each over `Uds`: `transfers` transfers.
fn bank_over_uds(durability: Durability, transfers: i64) {
    let dir = temp_dir(&format!("clusters-uds-{durability:?}"));
    let ts: Vec<Arc<Uds>> = (0..ISLANDS).map(|i| uds(&dir, i, 1)).collect();
    let dyn_ts = ts
        .iter()
        .map(|t| Arc::clone(t) as Arc<dyn Transport>)
        .collect();
    bank(&dir, dyn_ts, durability, transfers);
    for t in &ts {
        t.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three clusters of one island each over `Shm`: `transfers` transfers.
fn bank_over_shm(durability: Durability, transfers: i64) {
    let dir = temp_dir(&format!("clusters-shm-{durability:?}"));
    let ts = shms(&dir);
    let dyn_ts = ts
        .iter()
        .map(|t| Arc::clone(t) as Arc<dyn Transport>)
        .collect();
    bank(&dir, dyn_ts, durability, transfers);
    drop(ts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three clusters of one island each, island `i` over `ts[i]`: `transfers`
/// transfers, then the checks.
fn bank(dir: &Path, ts: Vec<Arc<dyn Transport>>, durability: Durability, transfers: i64) {
    let opened: Vec<(Island, RecoveryReport)> = (0..ISLANDS)
        .map(|i| open_island(dir, i, durability))
        .collect();
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let ledger = Arc::new(Ledger {
        left: AtomicI64::new(transfers),
        ..Default::default()
    });
    let clusters: Vec<Arc<Cluster>> = opened
        .into_iter()
        .enumerate()
        .map(|(i, o)| cluster_of(i, o, Arc::clone(&ts[i])))
        .collect();
    let t0 = Instant::now();
    let running: Vec<Running> = clusters
        .iter()
        .enumerate()
        .map(|(i, cl)| start(cl, i, &ledger))
        .collect();
    until("every transfer finished", 120, || {
        ledger.finished() == transfers as u64
    });
    let elapsed = t0.elapsed();
    for r in running {
        stop(r);
    }
    let acked = ledger.acked.lock().unwrap().clone();
    let distributed: u64 = clusters.iter().map(|c| c.stats.distributed_commits()).sum();
    let n = check(&islands, &acked);
    eprintln!(
        "{durability:?}: {} of {transfers} transfers acknowledged, {n} receipts, \
         {distributed} distributed commits, in {elapsed:?}",
        acked.len()
    );
    assert!(acked.len() as i64 >= transfers / 2, "most transfers commit");
    assert!(
        distributed as usize >= acked.len() / 2,
        "most transfers are multisite"
    );
    for i in &islands {
        i.shutdown();
    }
}

#[test]
fn bank_over_uds_without_a_log() {
    bank_over_uds(Durability::Off, 3_000);
}

#[test]
fn bank_over_uds_with_sync_logs() {
    bank_over_uds(Durability::Sync, 1_500);
}

#[test]
fn bank_over_shm_without_a_log() {
    bank_over_shm(Durability::Off, 3_000);
}

#[test]
fn bank_over_shm_with_sync_logs() {
    bank_over_shm(Durability::Sync, 1_500);
}
/// Stops the cluster of island 2 as a crash would (its executors leave at
/// once, its transport closes, its log keeps what it had made durable):
/// the transfers of islands 0 and 1 that need island 2 fail with
/// `IslandDown` within a bound, the others keep committing. Then island 2
/// opens again (a new incarnation, a new transport), recovers, resolves
/// what was in doubt with the coordinators, and transfers to and from it
/// resume. At the end the usual checks hold over all three islands.
#[test]
fn a_dead_island_fails_its_transactions_fast_and_rejoins() {
    a_dead_island_rejoins(Kind::Uds);
}

/// The same with the islands joined as processes by shared memory: island
/// 2's rings and bells go with it, and its new incarnation's replace them.
#[test]
fn a_dead_island_over_shm_fails_its_transactions_fast_and_rejoins() {
    a_dead_island_rejoins(Kind::Shm);
}

fn a_dead_island_rejoins(kind: Kind) {
    let dir = temp_dir(&format!("clusters-dead-{kind}"));
    let durability = Durability::Sync;
    let ledger = Arc::new(Ledger {
        left: AtomicI64::new(i64::MAX),
        ..Default::default()
    });
    let mut ts: Vec<Linked> = Vec::new();
    let mut islands: Vec<Island> = Vec::new();
    let mut running: Vec<Option<Running>> = Vec::new();
    for i in 0..ISLANDS {
        let opened = open_island(&dir, i, durability);
        let t = linked(kind, &dir, i, opened.0.incarnation());
        islands.push(opened.0.clone());
        let cl = cluster_of(i, opened, t.transport());
        running.push(Some(start(&cl, i, &ledger)));
        ts.push(t);
    }
    let crossed = |home: usize, to: usize| ledger.crossed[home][to].load(Ordering::Acquire);
    until("transfers cross to island 2", 60, || {
        crossed(0, 2) > 20 && crossed(1, 2) > 20 && crossed(2, 0) > 20
    });

    // Island 2 dies.
    let dead = running[2].take().unwrap();
    dead.phase.store(FAILED, Ordering::Release);
    for t in dead.threads {
        let _ = t.join().unwrap();
    }
    let killed = Instant::now();
    ts[2].shutdown();
    islands[2].shutdown();
    for t in &ts[..2] {
        let t = t.transport();
        until("island 2 is down for the others", 10, || t.peer_down(2));
    }
    let lost =
        ledger.started[2].load(Ordering::Acquire) - ledger.finished[2].load(Ordering::Acquire);
    until("a transfer to island 2 fails with IslandDown", 30, || {
        !ledger.down.lock().unwrap().is_empty()
    });
    let first_down = ledger.down.lock().unwrap()[0].0.duration_since(killed);
    let (local0, local1) = (crossed(0, 1), crossed(1, 0));
    let down_before = ledger.down.lock().unwrap().len();
    until("transfers between islands 0 and 1 go on", 30, || {
        crossed(0, 1) > local0 + 20 && crossed(1, 0) > local1 + 20
    });
    let (to2_0, to2_1) = (crossed(0, 2), crossed(1, 2));
    until("more transfers to island 2 fail", 30, || {
        ledger.down.lock().unwrap().len() > down_before + 20
    });
    assert_eq!(
        (crossed(0, 2), crossed(1, 2)),
        (to2_0, to2_1),
        "no transfer to island 2 commits while it is down"
    );
    eprintln!(
        "island 2 down: the first transfer needing it failed {first_down:?} after; \
         {lost} of its own in flight lost"
    );
    // A call that needs a dead island fails within 1 s of its death.
    assert!(
        first_down < Duration::from_secs(1),
        "a transfer waited {first_down:?} for a dead island"
    );

    // Island 2 comes back.
    let opened = open_island(&dir, 2, durability);
    let in_doubt = opened.1.in_doubt.len();
    assert!(opened.0.incarnation() > islands[2].incarnation());
    ts[2] = linked(kind, &dir, 2, opened.0.incarnation());
    islands[2] = opened.0.clone();
    let cl = cluster_of(2, opened, ts[2].transport());
    running[2] = Some(start(&cl, 2, &ledger));
    let (a, b, c) = (crossed(0, 2), crossed(1, 2), crossed(2, 0));
    until("transfers to and from island 2 resume", 60, || {
        crossed(0, 2) > a + 20 && crossed(1, 2) > b + 20 && crossed(2, 0) > c + 20
    });
    for t in &ts[..2] {
        let p = t.peers().into_iter().find(|p| p.island == 2).unwrap();
        assert_eq!(p.incarnation, islands[2].incarnation(), "{p:?}");
        assert!(p.state == PeerState::Up && p.reconnects >= 1, "{p:?}");
    }

    ledger.left.store(0, Ordering::Release);
    until("every transfer still running finished", 60, || {
        (0..ISLANDS).all(|i| {
            let lost = if i == 2 { lost } else { 0 };
            ledger.finished[i].load(Ordering::Acquire) + lost
                == ledger.started[i].load(Ordering::Acquire)
        })
    });
    for r in running.into_iter().flatten() {
        stop(r);
    }
    let acked = ledger.acked.lock().unwrap().clone();
    let n = check(&islands, &acked);
    eprintln!(
        "{} transfers acknowledged, {n} receipts, {} failed as island 2 was down, \
         {in_doubt} branches of island 2 in doubt at its recovery",
        acked.len(),
        ledger.down.lock().unwrap().len()
    );
    for t in &ts {
        t.shutdown();
    }
    for i in &islands {
        i.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One cluster with all three islands local, each on its own `Uds` (the
/// `transports` form: a process running islands as thread groups joined by
/// sockets): every batch between islands crosses a socket even though the
/// islands share the process.
#[test]
fn one_cluster_with_a_uds_per_island() {
    let dir = temp_dir("clusters-per-island");
    let transfers = 2_000;
    let ts: Vec<Arc<Uds>> = (0..ISLANDS).map(|i| uds(&dir, i, 1)).collect();
    let opened: Vec<(Island, RecoveryReport)> = (0..ISLANDS)
        .map(|i| open_island(&dir, i, Durability::Off))
        .collect();
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let opts = ClusterOptions {
        transports: ts
            .iter()
            .map(|t| Arc::clone(t) as Arc<dyn Transport>)
            .collect(),
        ..options()
    };
    let cl = Cluster::new(opened, vec![1; ISLANDS], Arc::new(Thirds), opts).unwrap();
    for (i, t) in ts.iter().enumerate() {
        assert!(Arc::ptr_eq(
            cl.transport_of(i),
            &(Arc::clone(t) as Arc<dyn Transport>)
        ));
    }
    let ledger = Arc::new(Ledger {
        left: AtomicI64::new(transfers),
        ..Default::default()
    });
    let phase = Arc::new(AtomicU8::new(MEASURE));
    let workers: Vec<ClusterWorker> = (0..ISLANDS)
        .map(|i| ClusterWorker {
            island: i,
            worker: 0,
            cpu: None,
            limit: None,
        })
        .collect();
    let w = Arc::new(Transfers {
        island: None,
        ledger: Arc::clone(&ledger),
    });
    let counters: Vec<_> = (0..ISLANDS).map(|_| ProgressCounter::new()).collect();
    let threads = serve(&cl, &workers, w, &phase, &counters, |_| ()).unwrap();
    until("every transfer finished", 120, || {
        ledger.finished() == transfers as u64
    });
    stop(Running { phase, threads });
    let acked = ledger.acked.lock().unwrap().clone();
    check(&islands, &acked);
    let crossed: u64 = ts
        .iter()
        .flat_map(|t| t.peers())
        .map(|p| p.batches_out)
        .sum();
    assert!(
        crossed as usize >= acked.len() / 2,
        "{crossed} batches crossed the sockets for {} transfers",
        acked.len()
    );
    for t in &ts {
        t.shutdown();
    }
    for i in &islands {
        i.shutdown();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
