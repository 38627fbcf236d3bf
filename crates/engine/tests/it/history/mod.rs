//! A history checker: randomized transactions over a small key set, every
//! committed one recording what it read and wrote, and a check that the
//! dependency graph of the history is acyclic (see [`graph`]).
//!
//! The schema: a hash-indexed table and an ordered one with a secondary
//! index on a group column, each row holding the id of the transaction that
//! wrote it and its group; and a table of *tombstone* rows, one per key of
//! the other two, holding the id of the key's last delete. A delete writes
//! the tombstone; a transaction that finds a key absent reads it, which
//! names the absence it saw (an insert replaces that absence). Nothing but
//! deletes writes tombstones, so reading one protects nothing an insert
//! could change: misses and scans stay exposed to the phantoms the engine
//! must catch.
//!
//! Transactions mix reads, reads for update, updates (with or without the
//! write lock at the read, some moving the row to another group), inserts
//! (alone, or over a miss), deletes (some followed by a re-insert of the
//! key), point misses on both tables, range scans with limits (ascending
//! and descending), secondary scans while groups change, and read-only
//! audits of a whole table. They run on one island ([`one_island`]) and
//! through the distributed executor with the keys spread over several
//! islands ([`cross_island`]).
//!
//! Runs are seeded: `ISLANDS_HISTORY_SEED=n` replays the plans of a printed
//! seed (the interleaving is the threads'); `ISLANDS_LONG=1` runs twenty
//! times as many transactions. Each run prints what it checked: the
//! transactions, the versions, the edges (how many inferred from scans) and
//! the cycles found; a cycle is printed with its transactions, starting
//! with the first edge that closed one.
//!
//! Some runs churn ([`Mix::CHURN`]): half the operations delete a key, most
//! then re-insert it, and every attempt, committed or not, is checked never
//! to have been told that a key it had just deleted exists.
//!
//! Across islands, some runs mix every operation and others only those
//! whose locks are all taken at the read ([`Mix::LOCKED`]); some run over a
//! transport that loses, duplicates and delays batches, or one that only
//! delays them, which widens the windows between one branch's prepare and
//! another's (where a late lock, or a secondary entry added late, let
//! cycles through: issue 22).

mod checks;
mod cross_island;
pub mod graph;
mod one_island;

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;

use islands::island::Island;
use islands::proc::rng::FastRng;
use islands::storage::{Col, ColType, PrimaryKind, RowRef, SecondaryId, TableDef};
use islands::txn::{RowH, Txn};
use islands::Abort;

use graph::{Done, Pred, State, Tk, Write};

pub const HKV: u16 = 0;
pub const OKV: u16 = 1;
pub const TOMB: u16 = 2;
const WID: Col = Col(0);
const G: Col = Col(1);
const BY_G: SecondaryId = SecondaryId(0);
/// Keys of each of the two data tables.
pub const KEYS: u64 = 12;
const GROUPS: u64 = 3;

fn group_of(r: &RowRef) -> u64 {
    r.u64(G)
}

pub fn tables() -> Vec<TableDef> {
    let cols: &[(&str, ColType)] = &[
        ("wid", ColType::U64),
        ("g", ColType::U64),
        ("pad", ColType::Str(20)),
    ];
    // Transaction contexts claim row slots 64 at a time, and a deleted slot
    // goes back to its deleter only: room for a block in every context of
    // an island's executors (up to 84 a worker with the default options),
    // which a long run over a slow transport comes to use.
    let capacity = 1 << 14;
    vec![
        TableDef::new("hkv", cols, capacity, PrimaryKind::Hash),
        TableDef::new("okv", cols, capacity, PrimaryKind::Ordered).with_secondary("by_g", group_of),
        TableDef::new("tomb", cols, capacity, PrimaryKind::Hash),
    ]
}

/// The tombstone row of key `k` of data table `t`.
pub fn tomb_key(t: u16, k: u64) -> u64 {
    t as u64 * KEYS + k
}

/// The data key a row of `table` stands for (a tombstone's is its key's).
pub fn data_key(table: u16, key: u64) -> u64 {
    if table == TOMB {
        key % KEYS
    } else {
        key
    }
}

/// Every key's state before a run: two thirds of the data keys present
/// (group = key mod 3), every tombstone present (no delete yet: id 0).
pub fn initial() -> HashMap<Tk, State> {
    let mut m = HashMap::new();
    for t in [HKV, OKV] {
        for k in 0..KEYS {
            m.insert((t, k), (k % 3 != 0).then_some(k % GROUPS));
            m.insert((TOMB, tomb_key(t, k)), Some(0));
        }
    }
    m
}

/// Loads the initial rows whose data key `holds` says are this island's,
/// and checkpoints them where there is a log (loads are not logged).
pub fn load(island: &Island, holds: impl Fn(u64) -> bool) {
    let mut l = island.loader().unwrap();
    for ((t, k), state) in initial() {
        if let Some(g) = state {
            if holds(data_key(t, k)) {
                l.put(t, k, |r| r.set_u64(G, g)).unwrap();
            }
        }
    }
    drop(l);
    island.checkpoint().unwrap();
}

/// The rows of `islands` as (version id, state), read outside transactions
/// once the run is over.
pub fn rows(islands: &[Island]) -> HashMap<Tk, (u64, State)> {
    let mut m = HashMap::new();
    for island in islands {
        for t in [HKV, OKV, TOMB] {
            let table = island.catalog().table(t);
            let word = |c: Col| table.schema.column(c).offset / 8;
            let (wid, g) = (word(WID), word(G));
            table.for_each_row(|k, _, d| {
                m.insert((t, k), (d[wid], Some(d[g])));
            });
        }
    }
    m
}

/// Checks the history and that the rows left are each key's last version;
/// prints what was checked and panics with the problems found.
pub fn check(what: &str, seed: u64, done: &[Done], left: &HashMap<Tk, (u64, State)>) {
    let report = graph::check(&initial(), done);
    let mut problems = report.violations.clone();
    problems.extend(graph::check_final(done, &initial(), left));
    eprintln!("history {what} (seed {seed}): {report}");
    if report.ok() && problems.is_empty() {
        return;
    }
    for c in &report.cycle_reports {
        eprintln!("{c}");
    }
    // Every committed transaction, in commit order, for a look at what the
    // summary leaves out.
    let dump = std::env::temp_dir().join(format!("islands-history-{seed}.txt"));
    let mut text = String::new();
    for d in done {
        text.push_str(&format!("{d:?}\n"));
    }
    let dumped = match std::fs::write(&dump, text) {
        Ok(()) => format!("every committed transaction is in {}", dump.display()),
        Err(e) => format!("writing the history to {} failed: {e}", dump.display()),
    };
    panic!(
        "history {what} is not serializable ({} cycles; replay the plans with \
         ISLANDS_HISTORY_SEED={seed}; {dumped}); {} other problems: {:#?}",
        report.cycles,
        problems.len(),
        &problems[..problems.len().min(10)]
    );
}

/// The base seed: `ISLANDS_HISTORY_SEED`, else the clock (printed by each run).
pub fn base_seed() -> u64 {
    std::env::var("ISLANDS_HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Transactions per worker: `n`, twenty times as many with `ISLANDS_LONG`.
pub fn per_worker(n: u64) -> u64 {
    if std::env::var_os("ISLANDS_LONG").is_some() {
        20 * n
    } else {
        n
    }
}

/// One operation of a transaction.
#[derive(Clone, Debug)]
pub enum Op {
    Get {
        t: u16,
        k: u64,
    },
    /// Read (for update unless `late`: then the lock comes at commit) and
    /// write, maybe into group `g`; if absent, insert it when `insert`.
    Update {
        t: u16,
        k: u64,
        late: bool,
        g: Option<u64>,
        insert: bool,
    },
    Insert {
        t: u16,
        k: u64,
        g: u64,
    },
    /// Read (for update unless `late`) and delete; then insert the key
    /// again into group `reinsert`, if given.
    Delete {
        t: u16,
        k: u64,
        late: bool,
        reinsert: Option<u64>,
    },
    /// Range scan of the ordered table.
    Scan {
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
    },
    /// Secondary scan of group `g` of the ordered table (on the home island).
    ScanGroup {
        g: u64,
        limit: usize,
        reverse: bool,
    },
    /// Reads every key of the hash table (a read-only transaction).
    Audit,
}

/// Which operations a run's transactions mix.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// Updates and deletes of rows read without the write lock (a plain
    /// read first, or a write after a read of the same key in the
    /// transaction): their locks are taken at commit.
    pub late_writes: bool,
    /// Secondary scans.
    pub group_scans: bool,
    /// Keys of each table the operations pick from (`0..keys`, at most
    /// [`KEYS`]): fewer keys, more conflicts.
    pub keys: u64,
    /// Most operations per transaction.
    pub ops: u64,
    /// Half the operations are deletes, most of them followed by a re-insert
    /// of the key (issue 33, item 7: it must never be told the key exists).
    pub churn: bool,
}

impl Mix {
    pub const ALL: Mix = Mix {
        late_writes: true,
        group_scans: true,
        keys: KEYS,
        ops: 4,
        churn: false,
    };
    /// Every write locks its row when it first reads it; no secondary scans.
    pub const LOCKED: Mix = Mix {
        late_writes: false,
        group_scans: false,
        ..Mix::ALL
    };
    /// Short transactions over a third of the keys: the races of two
    /// transactions over one key (a miss and an insert, a scan and a move)
    /// come often.
    pub const HOT: Mix = Mix {
        keys: 4,
        ops: 2,
        ..Mix::ALL
    };
    /// Deletes and re-inserts over ten keys, reads of those keys before
    /// them: a key is often deleted and inserted again by others between a
    /// transaction's read of it and its own re-insert.
    pub const CHURN: Mix = Mix {
        keys: 10,
        ops: 4,
        churn: true,
        ..Mix::ALL
    };
}

/// A random transaction. `parts[i]` are the data keys of island `i` (a
/// range scan stays within one).
pub fn plan(rng: &mut FastRng, parts: &[Range<u64>], mix: Mix) -> Vec<Op> {
    if rng.percent(8) {
        return vec![Op::Audit];
    }
    let n = 1 + rng.below(mix.ops);
    let mut ops = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = if rng.percent(50) { HKV } else { OKV };
        let k = rng.below(mix.keys);
        let limit = |rng: &mut FastRng| {
            if rng.percent(30) {
                100
            } else {
                1 + rng.below(3) as usize
            }
        };
        let pick = if mix.churn && rng.percent(50) {
            60
        } else {
            rng.below(100)
        };
        let op = match pick {
            0..25 => Op::Get { t, k },
            25..48 => Op::Update {
                t,
                k,
                late: mix.late_writes && rng.percent(30),
                g: rng.percent(40).then(|| rng.below(GROUPS)),
                insert: rng.percent(30),
            },
            48..60 => Op::Insert {
                t,
                k,
                g: rng.below(GROUPS),
            },
            60..72 => Op::Delete {
                t,
                k,
                late: mix.late_writes && rng.percent(30),
                reinsert: rng
                    .percent(if mix.churn { 60 } else { 25 })
                    .then(|| rng.below(GROUPS)),
            },
            72..86 => {
                let p = &parts[rng.below(parts.len() as u64) as usize];
                let p = if p.start < mix.keys {
                    p.start..p.end.min(mix.keys)
                } else {
                    p.clone()
                };
                let a = p.start + rng.below(p.end - p.start);
                let b = p.start + rng.below(p.end - p.start);
                Op::Scan {
                    lo: a.min(b),
                    hi: a.max(b),
                    limit: limit(rng),
                    reverse: rng.percent(30),
                }
            }
            _ if !mix.group_scans => Op::Get { t, k },
            _ => Op::ScanGroup {
                g: rng.below(GROUPS),
                limit: limit(rng),
                reverse: rng.percent(30),
            },
        };
        ops.push(op);
    }
    ops
}

/// What one attempt read and wrote, as it runs.
#[derive(Debug, Default)]
pub struct Rec {
    pub id: u64,
    reads: Vec<(Tk, u64, State)>,
    negs: Vec<(Tk, Pred)>,
    writes: Vec<Write>,
    /// This attempt's own state of the keys it wrote.
    own: HashMap<Tk, State>,
    /// The first version of each key it read (what its write replaces).
    first: HashMap<Tk, u64>,
    anomalies: Vec<String>,
    /// A re-insert of a key this attempt had just deleted answered that the
    /// key exists. Wrong whether or not the attempt commits: the runs check
    /// it after every attempt.
    pub refused: Option<String>,
}

impl Rec {
    pub fn new(id: u64) -> Rec {
        Rec {
            id,
            ..Rec::default()
        }
    }

    /// It read version `id` of `tk` in state `state` (its own write, if any,
    /// must be what it reads).
    fn observe(&mut self, tk: Tk, id: u64, state: State) {
        if let Some(&own) = self.own.get(&tk) {
            if own != state {
                self.anomalies.push(format!(
                    "read {tk:?} as {state:?} after writing it as {own:?}"
                ));
            }
            return;
        }
        if !self.reads.contains(&(tk, id, state)) {
            self.reads.push((tk, id, state));
        }
        self.first.entry(tk).or_insert(id);
    }

    /// It saw `tk` not satisfy `pred`.
    fn not(&mut self, tk: Tk, pred: Pred) {
        if let Some(&own) = self.own.get(&tk) {
            let holds = match pred {
                Pred::Present => own.is_some(),
                Pred::Group(g) => own == Some(g),
            };
            if holds {
                self.anomalies
                    .push(format!("a scan missed its own {tk:?} ({own:?})"));
            }
            return;
        }
        self.negs.push((tk, pred));
    }

    /// It wrote `tk` (which it read first) to `state`.
    fn write(&mut self, tk: Tk, state: State) {
        self.own.insert(tk, state);
        if let Some(w) = self.writes.iter_mut().find(|w| w.tk == tk) {
            w.state = state;
            return;
        }
        let Some(&prev) = self.first.get(&tk) else {
            self.anomalies
                .push(format!("wrote {tk:?} without reading it first"));
            return;
        };
        self.writes.push(Write { tk, prev, state });
    }

    pub fn done(self, seq: u64, ops: &[Op]) -> Done {
        Done {
            id: self.id,
            seq,
            plan: format!("{ops:?}"),
            reads: self.reads,
            negs: self.negs,
            writes: self.writes,
            anomalies: self.anomalies,
        }
    }
}

fn seen(tx: &Txn, h: RowH) -> (u64, u64) {
    let r = tx.row(h);
    (r.u64(WID), r.u64(G))
}

fn stamp(tx: &mut Txn, h: RowH, id: u64, g: u64) {
    let mut r = tx.row_mut(h);
    r.set_u64(WID, id);
    r.set_u64(G, g);
}

/// Reads the tombstone of key `k` of table `t` (for update: to write it).
async fn tombstone(
    tx: &mut Txn,
    rec: &mut Rec,
    t: u16,
    k: u64,
    for_update: bool,
) -> Result<Option<(RowH, u64)>, Abort> {
    let tk = (TOMB, tomb_key(t, k));
    let h = if for_update {
        tx.get_for_update(tk.0, tk.1).await?
    } else {
        tx.get(tk.0, tk.1).await?
    };
    let Some(h) = h else {
        rec.anomalies.push(format!("tombstone {tk:?} is missing"));
        return Ok(None);
    };
    let (id, g) = seen(tx, h);
    rec.observe(tk, id, Some(g));
    Ok(Some((h, id)))
}

/// Reads key `k` of table `t`; an absent key is read with its tombstone.
async fn read(
    tx: &mut Txn,
    rec: &mut Rec,
    t: u16,
    k: u64,
    for_update: bool,
) -> Result<Option<RowH>, Abort> {
    let h = if for_update {
        tx.get_for_update(t, k).await?
    } else {
        tx.get(t, k).await?
    };
    match h {
        Some(h) => {
            let (id, g) = seen(tx, h);
            rec.observe((t, k), id, Some(g));
        }
        None if rec.own.contains_key(&(t, k)) => rec.observe((t, k), 0, None),
        None => {
            if let Some((_, absent)) = tombstone(tx, rec, t, k, false).await? {
                rec.observe((t, k), absent, None);
            }
        }
    }
    Ok(h)
}

/// Runs `ops`, recording into `rec`. `home_keys`: the ordered table's keys
/// a secondary scan covers (those of the island it runs on).
pub async fn run(
    tx: &mut Txn,
    ops: &[Op],
    rec: &mut Rec,
    home_keys: Range<u64>,
    mix: Mix,
) -> Result<(), Abort> {
    let id = rec.id;
    for op in ops {
        match *op {
            Op::Get { t, k } => {
                read(tx, rec, t, k, false).await?;
            }
            Op::Update { t, k, .. } | Op::Insert { t, k, .. } | Op::Delete { t, k, .. }
                if rec.own.contains_key(&(t, k)) => {}
            // Read before without the write lock, which the write would
            // then take at commit.
            Op::Update { t, k, .. } | Op::Delete { t, k, .. }
                if !mix.late_writes && rec.first.contains_key(&(t, k)) => {}
            Op::Update {
                t,
                k,
                late,
                g,
                insert,
            } => match read(tx, rec, t, k, !late).await? {
                Some(h) => {
                    let g = g.unwrap_or(seen(tx, h).1);
                    stamp(tx, h, id, g);
                    rec.write((t, k), Some(g));
                }
                None if insert => insert_absent(tx, rec, t, k, g.unwrap_or(0)).await?,
                None => {}
            },
            Op::Insert { t, k, g } => {
                if let Some((_, absent)) = tombstone(tx, rec, t, k, false).await? {
                    match tx.insert(t, k).await? {
                        Some(h) => {
                            rec.observe((t, k), absent, None);
                            stamp(tx, h, id, g);
                            rec.write((t, k), Some(g));
                        }
                        None => {
                            read(tx, rec, t, k, false).await?;
                        }
                    }
                }
            }
            Op::Delete {
                t,
                k,
                late,
                reinsert,
            } => {
                if let Some(h) = read(tx, rec, t, k, !late).await? {
                    if mix.churn {
                        // Room for other workers to delete the key and insert
                        // it again between this read and the re-insert.
                        pause(std::time::Duration::from_micros(30));
                    }
                    tx.delete(h).await?;
                    rec.write((t, k), None);
                    if let Some(g) = reinsert {
                        match tx.insert(t, k).await? {
                            Some(h) => {
                                stamp(tx, h, id, g);
                                rec.write((t, k), Some(g));
                            }
                            None => {
                                let why = format!(
                                    "re-insert of ({t}, {k}) after its own delete was refused \
                                     as a duplicate"
                                );
                                rec.anomalies.push(why.clone());
                                rec.refused = Some(why);
                            }
                        }
                    } else if let Some((h, _)) = tombstone(tx, rec, t, k, true).await? {
                        stamp(tx, h, id, 0);
                        rec.write((TOMB, tomb_key(t, k)), Some(0));
                    }
                }
            }
            Op::Scan {
                lo,
                hi,
                limit,
                reverse,
            } => {
                let n = tx.scan(OKV, lo, hi, limit, reverse).await?;
                let got = scanned(tx, rec, n, None);
                // A scan served by another island counts this
                // transaction's own deletes there toward its limit (they
                // reach that island only at commit): with one in the range,
                // fewer rows than the limit do not mean the range ran out.
                let cut = n == limit
                    || (lo..=hi).any(|k| rec.own.get(&(OKV, k)).is_some_and(Option::is_none));
                let covered = match got.last() {
                    Some(&last) if cut && !reverse => lo..last + 1,
                    Some(&last) if cut => last..hi + 1,
                    None if cut => 0..0,
                    _ => lo..hi + 1,
                };
                for k in covered.filter(|k| !got.contains(k)) {
                    rec.not((OKV, k), Pred::Present);
                }
            }
            Op::ScanGroup { g, limit, reverse } => {
                let n = tx.scan_secondary(OKV, BY_G, g, limit, reverse).await?;
                let got = scanned(tx, rec, n, Some(g));
                let covered = match got.last() {
                    Some(&last) if n == limit && !reverse => home_keys.start..last + 1,
                    Some(&last) if n == limit => last..home_keys.end,
                    _ => home_keys.clone(),
                };
                for k in covered.filter(|k| !got.contains(k)) {
                    rec.not((OKV, k), Pred::Group(g));
                }
            }
            Op::Audit => audit(tx, rec).await?,
        }
    }
    Ok(())
}

/// Spins for `d` (a procedure's work between two of its operations; a
/// sleep would give the thread up for far longer than that).
fn pause(d: std::time::Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Inserts key `k` of table `t`, just read as absent.
async fn insert_absent(tx: &mut Txn, rec: &mut Rec, t: u16, k: u64, g: u64) -> Result<(), Abort> {
    match tx.insert(t, k).await? {
        Some(h) => {
            stamp(tx, h, rec.id, g);
            rec.write((t, k), Some(g));
        }
        // Present after all: a read that contradicts the miss (the commit
        // must fail, and the checker says so if it does not).
        None => {
            read(tx, rec, t, k, false).await?;
        }
    }
    Ok(())
}

/// Records the rows of the last scan; returns their keys in scan order.
fn scanned(tx: &Txn, rec: &mut Rec, n: usize, group: Option<u64>) -> Vec<u64> {
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        let h = tx.scan_row(i);
        let k = tx.key(h);
        let (id, g) = seen(tx, h);
        if group.is_some_and(|want| want != g) {
            rec.anomalies.push(format!(
                "a scan of group {group:?} returned ({OKV}, {k}) of group {g}"
            ));
        }
        rec.observe((OKV, k), id, Some(g));
        keys.push(k);
    }
    keys
}

/// Reads every key of the hash table in one batch, and the tombstones of
/// those absent in another.
async fn audit(tx: &mut Txn, rec: &mut Rec) -> Result<(), Abort> {
    let keys: Vec<u64> = (0..KEYS).collect();
    tx.get_many(HKV, &keys, false).await?;
    let mut absent = Vec::new();
    for (i, &k) in keys.iter().enumerate() {
        match tx.many_row(i) {
            Some(h) => {
                let (id, g) = seen(tx, h);
                rec.observe((HKV, k), id, Some(g));
            }
            None => absent.push(k),
        }
    }
    if absent.is_empty() {
        return Ok(());
    }
    let tombs: Vec<u64> = absent.iter().map(|&k| tomb_key(HKV, k)).collect();
    tx.get_many(TOMB, &tombs, false).await?;
    for (i, &k) in absent.iter().enumerate() {
        match tx.many_row(i) {
            Some(h) => {
                let (id, g) = seen(tx, h);
                rec.observe((TOMB, tombs[i]), id, Some(g));
                rec.observe((HKV, k), id, None);
            }
            None => rec
                .anomalies
                .push(format!("tombstone of ({HKV}, {k}) is missing")),
        }
    }
    Ok(())
}

/// A cell for an attempt's record inside a request (see `cross_island`).
pub type RecCell = RefCell<Option<Rec>>;
