//! The transaction handle that stored procedures run against.
//!
//! A [`Txn`] is a worker thread's transaction context: it is created once per
//! worker and reused for every transaction, so its access set, row buffers and
//! log buffer stop allocating after warm-up.
//!
//! Stored procedures are `async` Rust functions over `&mut Txn`:
//!
//! ```ignore
//! async fn transfer(tx: &mut Txn, from: u64, to: u64, amount: i64) -> Result<(), Abort> {
//!     let a = tx.get_for_update(ACCOUNTS, from).await?.ok_or(Abort::User("no such account"))?;
//!     let b = tx.get_for_update(ACCOUNTS, to).await?.ok_or(Abort::User("no such account"))?;
//!     let bal = tx.row(a).i64(BALANCE);
//!     tx.row_mut(a).set_i64(BALANCE, bal - amount);
//!     let bal = tx.row(b).i64(BALANCE);
//!     tx.row_mut(b).set_i64(BALANCE, bal + amount);
//!     Ok(())
//! }
//! ```
//!
//! Why `async`: an island with one worker thread must keep executing other
//! transactions and serving requests while one of its transactions waits for a
//! remote island's reply. With `async` procedures the compiler writes the
//! continuation state machine: a remote operation returns `Pending`, the
//! island's executor parks that transaction and polls another one. Local
//! operations complete on the first poll, so a local-only transaction costs no
//! more than a plain function call. Hand-written continuation state machines
//! would give the same behaviour at the cost of turning every procedure (TPC-C
//! has five) inside out.
//!
//! Writes are buffered in the transaction and installed at commit (deferred
//! update), so an abort never undoes a row in place. Rows are addressed by
//! handles ([`RowH`]) into the access set, which keeps the borrow checker out
//! of the way of procedures that hold several rows at once.
//!
//! ## Locks and versions by operation
//!
//! ### On one island
//!
//! On one island, what each operation takes and when. 2PL is `no_wait` and
//! `wait_die`; `none` takes nothing (one thread runs every transaction) and
//! validates nothing. A commit runs these steps in order: (1) lock the write
//! set, (2) add the new secondary-index entries, (3) validate the reads,
//! misses and scans, (4) pick the tid, (5) log, (6) install every write,
//! then release the read locks.
//!
//! - **Read** (`get`, `get_many`, and every row a scan returns). 2PL: a
//!   shared lock, taken at the read and held until step 6 has installed
//!   every write. OCC: no lock; a consistent copy and its version word,
//!   checked at step 3 (unchanged and not locked by another transaction).
//!   A key indexed but absent (an uncommitted insert, a delete being
//!   installed) reads as a miss; under OCC its slot's version is checked too.
//!   A slot this transaction read under another key (freed and taken again
//!   since) fails the read at once.
//! - **Read for update** (`get_for_update`). 2PL: the exclusive lock, at the
//!   read. OCC: as a read; step 1 locks the version word if it still holds
//!   the version read.
//! - **Update** (`row_mut` on a row read). 2PL: a plain read's shared lock
//!   is upgraded at step 1 (`no_wait` fails if another reader holds it,
//!   `wait_die` waits only when older than every holder). OCC: step 1
//!   version-locks the row if unchanged. If an indexed column changed, the
//!   new secondary entry is added at step 2 and the old one removed at
//!   step 6, before the row is released.
//! - **Insert over a miss** (`insert`). A slot is claimed (2PL: its exclusive
//!   lock; OCC: its version word's lock bit, while absent) and then entered
//!   in the primary index at once, which moves the key's hash stripe
//!   version: others find an uncommitted row, which 2PL readers conflict on
//!   and OCC readers read as absent (their step 3 fails once it commits).
//!   Its secondary entries are added at step 2. Step 6 publishes the row.
//! - **Delete** (of a row read). 2PL: the exclusive lock at step 1 (an
//!   upgrade after a plain read). OCC: the version lock at step 1. Step 6
//!   removes its secondary entries, then its primary entry (the stripe
//!   version moves), publishes it absent and frees the slot.
//! - **Point miss**. No lock. Hash table: the key's stripe version is read
//!   (waiting while a change of the stripe is under way) *before* the lookup
//!   that finds the key absent, and compared at step 3, net of this
//!   transaction's own inserts on the stripe. Ordered table: an empty scan
//!   of the key, re-walked at step 3.
//! - **Scan** (ordered primary or secondary index). Each row returned is a
//!   read. The range walked (up to the last entry visited when the limit
//!   cut it short) is recorded with a count and digest of its entries and
//!   re-walked at step 3, skipping the entries this transaction added. A
//!   secondary entry whose row's image has another key is not returned.
//!
//! Fixed-key tables (`TableDef::with_fixed_keys`) record no misses or scans
//! and have no secondary changes to add. Under [`Txn::read_committed`],
//! reads after the call take no lock and record nothing to validate.
//!
//! ### Across islands
//!
//! Islands that run distributed transactions run `no_wait` 2PL. A row of
//! another island is read by a request that its owner serves on the
//! transaction's *branch* there, with the same code as a local read, so the
//! owner holds the lock; the home keeps a copy whose `held` says what the
//! owner holds. Per operation, on a row of the home island and on a row of
//! another island:
//!
//! | operation | lock, and when it is taken | validated at prepare |
//! |---|---|---|
//! | `get` | shared, at the read (the owner's, when it serves the request) | nothing |
//! | `get_for_update` | exclusive, at the read | nothing |
//! | `get_many` | as `get` / `get_for_update`, per key | nothing |
//! | change (`row_mut`) of a row read by `get_for_update`, or inserted | none more: exclusive already | nothing |
//! | change or `delete` of a row read by `get` (or by a scan, or read by `get` and then again by `get_for_update`, which reuses the entry) | shared at the read; exclusive **pending** | nothing |
//! | `insert` of a free key | exclusive, on the new slot before it is indexed | nothing |
//! | `insert` of a key the transaction deleted | the deleted row becomes an update: its lock as read (pending if shared) | nothing |
//! | `insert` of a committed key (answers `None`) | shared, on the row found | nothing |
//! | point miss (`get` of an absent key) | none | the hash stripe's version (an ordered table: an empty scan); every other branch holds its locks until the decision |
//! | `scan`, `scan_secondary` | shared, on each row returned | the range's entries (count and digest); every other branch holds its locks until the decision |
//! | read after [`Txn::read_committed`] | none | nothing |
//! | new secondary entries (an `insert` into a table with secondary indexes, a change of an indexed column) | added once the row's write lock is held, before any branch prepares | nothing |
//!
//! A row's write lock is *pending* (`Access::lock_pending`, the one rule)
//! when the row is in the write set (changed, inserted or deleted) and the
//! transaction does not hold its exclusive lock. A row *adds secondary
//! entries* (`Txn::adds_secondary_entries`, the one rule for those) when it
//! is inserted into a table with secondary indexes, or changed in an
//! indexed column, and its table's keys are not fixed. On one island,
//! commit takes the pending locks and adds the entries, then validates,
//! then installs and releases, so at the validation all locks are held and
//! every entry is in. Across islands each branch prepares on its own, in
//! parallel, and at its prepare a branch validates its scans and misses (a
//! check at one instant, which no lock holds on) and a read-only branch
//! releases its locks. A lock taken at one branch's prepare could come
//! after another branch released a lock or validated, and two-phase
//! locking would break (two transactions each deleting its row if the
//! other's is present both committed); an entry added at one branch's
//! prepare could come after another branch validated a scan, or released a
//! row that a second transaction then wrote, while that second transaction
//! scanned the entry's group without it (each then missed the other's
//! write: a cycle).
//!
//! So across islands the rule is: **every branch's write locks are held,
//! and every new secondary entry of the transaction is in its island's
//! index, before any branch validates or releases anything; and every
//! branch has validated before any branch releases anything.** The home's
//! commit (`dist::Executor::commit_home`) takes the pending locks of its own
//! island and adds its own entries (`Txn::add_secondary_entries`), then
//! runs a LOCK round over the other islands where a row's lock is pending
//! or a row adds entries (`Txn::lock_round_islands`): the changes to that
//! island's rows go out ahead of the request, and its owner takes the locks
//! and adds the entries before it answers. Only then does the home ask any
//! branch to prepare, and prepare finds both done. A distributed
//! transaction with neither has no LOCK round (TPC-C's tables have fixed
//! keys; the multisite microbenchmark has no secondary index). An abort
//! from the LOCK round on (a conflict on another island, no answer in time,
//! a branch that idles out or votes no) takes the entries out again, on
//! every island that added them (`Txn::abort`); a branch accepts no change
//! of its rows after it added their entries.
//!
//! Releases: a read-only branch releases at its prepare (it votes
//! read-only) when no other branch of the transaction validates a scan or
//! a miss at its prepare; otherwise it holds its locks until the decision
//! (PREP with hold, set by `dist::Executor::start_commit`), because the
//! branches prepare in parallel and a release before another branch's
//! validation lets a writer slip in between and restore what that scan
//! saw (a row inserted and deleted again: a cycle). A writing branch
//! releases when it installs its writes (the home island's own branch at
//! the commit decision, the others at the CommitReq). A
//! read-only transaction whose branches validate nothing and read only
//! durable data releases them without a vote. [`Txn::prepare_remote`]
//! prepares the remote branches first, each holding every lock (shared ones
//! too) until the decision and adding its entries at its prepare; the home
//! branch, which may still take locks and add entries, prepares last. That
//! keeps the rule only because no remote branch validates anything there:
//! the early prepare is refused (a no-op) when a remote branch validates a
//! scan or a miss, which would then be checked before the home's locks and
//! entries; the home's own validation comes after every lock and entry.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::cc::{CcKind, Held, Observed, TxnMeta, WriteLock};
use crate::island::Shared;
use crate::phases::{self, Phase};
use crate::route::IslandId;
use crate::storage::hash::HashIndex;
use crate::storage::ordered::{key_of, pair};
use crate::storage::{
    tid_of, RowCache, RowId, RowMut, RowRef, SecondaryDef, SecondaryId, Table, TableId,
};
use crate::wal::BatchSeq;
use crate::{Abort, AbortReason, Error};

mod remote;
#[cfg(test)]
pub(crate) mod sched;
#[cfg(test)]
mod tests;
pub(crate) use remote::{Dist, Early, TAG_SEQ_BITS};

/// `Access::island` of a row of this island.
pub(crate) const LOCAL: IslandId = IslandId::MAX;
/// `Access::rid` of a remote row's copy: no local row id ever equals it.
pub(crate) const REMOTE_RID: RowId = RowId::MAX;

/// Access sets up to this size are searched linearly (they fit in a few cache lines).
const SMALL_ACCESS_SET: usize = 16;

/// A row the transaction accessed: an index into its access set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowH(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Insert,
    Delete,
}

#[derive(Clone, Copy, Debug)]
struct Access {
    table: TableId,
    rid: RowId,
    key: u64,
    /// [`LOCAL`], or the island that holds the row (a copy of a remote row:
    /// `rid` is [`REMOTE_RID`], and the owner holds the lock).
    island: IslandId,
    kind: Kind,
    /// The image was changed (updates and inserts).
    dirty: bool,
    seen: Observed,
    held: Held,
    /// Offset of the working image in `buf`.
    off: u32,
    /// Offset of the image as read, kept for tables with secondary indexes
    /// (to move index entries when indexed columns change); `u32::MAX` if none.
    orig: u32,
    /// Commit added this row's new secondary-index entries (an insert's, or
    /// an update's that changed an indexed column) before validating: see
    /// [`Txn::index_secondary_early`]. Abort takes them out again; install
    /// removes the entries they replace.
    indexed: bool,
}

impl Access {
    /// Whether commit has still to take this row's write lock: the row is in
    /// the write set (changed, inserted or deleted) and what the transaction
    /// holds on it is less (a shared lock, or nothing: a plain read that was
    /// then changed or deleted). For a copy of another island's row this says
    /// what its owner holds for the transaction. The one rule for *when* a
    /// lock is taken late; see "Locks and versions by operation".
    #[inline]
    fn lock_pending(&self) -> bool {
        (self.dirty || self.kind == Kind::Delete) && !self.held.is_write_lock()
    }

    /// The row as the scheme's `lock_write_set` takes it.
    fn write_lock(&self) -> WriteLock {
        WriteLock {
            table: self.table,
            rid: self.rid,
            held: self.held,
            seen: self.seen.version,
            inserted: self.kind == Kind::Insert,
        }
    }
}

/// A point miss: the key was absent; validated through its hash stripe.
#[derive(Clone, Copy, Debug)]
struct Miss {
    table: TableId,
    stripe: u32,
    version: u64,
}

/// A range scan, remembered so commit can check that it would see the same entries.
#[derive(Clone, Copy, Debug)]
struct Scan {
    table: TableId,
    secondary: Option<SecondaryId>,
    lo: u128,
    hi: u128,
    reverse: bool,
    /// Index entries visited (not counting the transaction's own inserts).
    visited: u32,
    /// The scan reached the end of its range before its limit.
    exhausted: bool,
    digest: u64,
}

/// What a commit produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    pub tid: u64,
    /// The transaction wrote log records.
    pub logged: bool,
    /// The log batch that must be durable (`sync`) or written (`async`)
    /// before the transaction may be acknowledged ([`Txn::wait_durable`]):
    /// the batch of its own record, or for a read-only transaction the batch
    /// of the newest record it could have read from. 0 when there is nothing
    /// to wait for.
    pub ack: BatchSeq,
}

/// A row whose lock an attempt ran into, and how it asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockWait {
    pub table: TableId,
    pub rid: RowId,
    /// Asked for exclusively (a read for update); else shared.
    pub exclusive: bool,
}

/// [`Txn::still_locked`], for holders of the island's shared state.
pub(crate) fn still_locked(shared: &Shared, w: LockWait) -> bool {
    shared
        .cc
        .is_locked(shared.catalog.table(w.table), w.rid, w.exclusive)
}

/// A worker's transaction context. See the module documentation.
pub struct Txn {
    shared: Arc<Shared>,
    worker: u16,
    meta: TxnMeta,
    acc: Vec<Access>,
    buf: Vec<u64>,
    misses: Vec<Miss>,
    scans: Vec<Scan>,
    scan_out: Vec<RowH>,
    many_out: Vec<Option<RowH>>,
    many_keys: Vec<u64>,
    /// The island of each key of the last `get_many` (`LOCAL` for this one):
    /// routed once, not once per pass (the router is a dynamic call).
    many_route: Vec<IslandId>,
    acc_index: HashMap<(TableId, RowId), u32, foldhash::fast::FixedState>,
    locks: Vec<WriteLock>,
    caches: Vec<RowCache>,
    /// Log bytes this worker appended since it last handed the island's
    /// buffer over (a hint: other workers hand it over too).
    unflushed_bytes: usize,
    last_tid: u64,
    validate: bool,
    /// [`Txn::read_committed`]: reads from the call on take no locks and
    /// record nothing to validate.
    read_committed: bool,
    has_inserts: bool,
    /// Some update moved a row to another secondary key, whose new entry
    /// commit added before validating (see [`Txn::index_secondary_early`]).
    has_moves: bool,
    /// Commit step 2 ran ([`Txn::add_secondary_entries`]): the new
    /// secondary entries of this island's rows are in, and the images they
    /// were computed from must not change any more.
    secondary_added: bool,
    /// With `read_committed`: the access entries before this one were read
    /// before the call, and are validated at commit.
    rc_from: u32,
    /// The row whose lock this attempt ran into (a local read that
    /// conflicted), kept after the abort: the driver retries once that row
    /// is free ([`Txn::conflict_row`]).
    conflict: Option<LockWait>,
    /// Set when the transaction runs under a distributed executor: routing and
    /// the state of its remote operations (see `remote.rs`).
    pub(crate) dist: Option<Box<remote::Dist>>,
    /// A prepared branch: the tid its writes will carry, and the log batch
    /// its Prepare record pins (0: none).
    pub(crate) prepared: Option<(u64, BatchSeq)>,
}

impl Txn {
    pub(crate) fn new(shared: Arc<Shared>, worker: u16, last_tid: u64) -> Txn {
        let n = shared.catalog.tables.len();
        let validate = shared.cc.kind() != CcKind::None;
        Txn {
            shared,
            worker,
            meta: TxnMeta { ts: 0 },
            acc: Vec::with_capacity(64),
            buf: Vec::with_capacity(4096),
            misses: Vec::new(),
            scans: Vec::new(),
            scan_out: Vec::new(),
            many_out: Vec::new(),
            many_keys: Vec::new(),
            many_route: Vec::new(),
            acc_index: HashMap::default(),
            locks: Vec::new(),
            caches: (0..n).map(|_| RowCache::default()).collect(),
            unflushed_bytes: 0,
            last_tid,
            validate,
            read_committed: false,
            has_inserts: false,
            has_moves: false,
            secondary_added: false,
            rc_from: 0,
            conflict: None,
            dist: None,
            prepared: None,
        }
    }

    /// The island's shared state, borrowed apart from `self` so a method can
    /// hold it while it changes the transaction's own fields. Cloning the
    /// `Arc` instead would be two atomic read-modify-writes on a cache line
    /// every worker of the island shares, on every commit.
    #[inline]
    fn island<'a>(&self) -> &'a Shared {
        // SAFETY: `self.shared` is an `Arc` held for the Txn's whole life and
        // never replaced, so the `Shared` outlives the Txn; every caller keeps
        // the reference local to one method call on `self`.
        unsafe { &*Arc::as_ptr(&self.shared) }
    }

    /// After an attempt that aborted on a lock conflict of a local read: the
    /// row it ran into (`None`: no such conflict, or it was on another
    /// island). Kept until the context begins again.
    pub fn conflict_row(&self) -> Option<LockWait> {
        self.conflict
    }

    /// Whether the request of `w` (a [`Txn::conflict_row`]) would still
    /// conflict now (see [`crate::cc::ConcurrencyControl::is_locked`]): a
    /// hint for when to retry the attempt that ran into it.
    pub fn still_locked(&self, w: LockWait) -> bool {
        still_locked(&self.shared, w)
    }

    pub fn worker_id(&self) -> u16 {
        self.worker
    }

    pub fn cc_kind(&self) -> CcKind {
        self.shared.cc.kind()
    }

    /// Starts a transaction. `retry` keeps the wait-die timestamp of the
    /// previous attempt, so a retried transaction ages and eventually wins.
    pub fn begin(&mut self, retry: bool) {
        debug_assert!(self.acc.is_empty(), "begin inside a transaction");
        self.conflict = None;
        if !retry || self.meta.ts == 0 {
            self.meta.ts = self.shared.next_ts();
        }
    }

    /// The transaction's entry for a row, if it has one. A short access set is
    /// searched linearly; past [`SMALL_ACCESS_SET`] entries a hash map (kept
    /// from then on, cleared but not freed between transactions) answers, so
    /// transactions of hundreds of rows (TPC-C StockLevel, Delivery) do not
    /// go quadratic.
    #[inline]
    fn find(&self, table: TableId, rid: RowId) -> Option<RowH> {
        if self.acc.len() <= SMALL_ACCESS_SET {
            return self
                .acc
                .iter()
                .rposition(|a| a.rid == rid && a.table == table)
                .map(|i| RowH(i as u32));
        }
        self.acc_index.get(&(table, rid)).map(|&i| RowH(i))
    }

    /// Appends an access entry (and indexes it once the set is large).
    fn push_access(&mut self, a: Access) -> RowH {
        let i = self.acc.len() as u32;
        self.acc.push(a);
        if self.acc.len() == SMALL_ACCESS_SET + 1 {
            for (j, e) in self.acc.iter().enumerate() {
                self.acc_index.insert((e.table, e.rid), j as u32);
            }
        } else if self.acc.len() > SMALL_ACCESS_SET + 1 {
            self.acc_index.insert((a.table, a.rid), i);
        }
        RowH(i)
    }

    fn push_image(&mut self, words: usize) -> u32 {
        let off = self.buf.len();
        self.buf.resize(off + words, 0);
        off as u32
    }

    /// Hints that the transaction will soon access `key` (see
    /// [`crate::storage::Table::prefetch`]): a procedure that knows its keys up
    /// front issues `Index` hints for all of them, then `Row` hints, then
    /// reads, so the cache misses overlap.
    #[inline]
    pub fn prefetch(&self, table: TableId, key: u64, what: crate::storage::Prefetch) {
        self.shared.catalog.table(table).prefetch(key, what);
    }

    /// Reads a row by primary key. `None` if absent.
    pub async fn get(&mut self, table: TableId, key: u64) -> Result<Option<RowH>, Abort> {
        if let Some(island) = self.route(table, key) {
            return self.remote_point(island, table, key, false).await;
        }
        self.point(table, key, false)
    }

    /// Reads a row by primary key with the intent to update it (2PL takes the
    /// exclusive lock now). Change it through [`Txn::row_mut`].
    pub async fn get_for_update(
        &mut self,
        table: TableId,
        key: u64,
    ) -> Result<Option<RowH>, Abort> {
        if let Some(island) = self.route(table, key) {
            return self.remote_point(island, table, key, true).await;
        }
        self.point(table, key, true)
    }

    pub(crate) fn point(
        &mut self,
        table: TableId,
        key: u64,
        for_update: bool,
    ) -> Result<Option<RowH>, Abort> {
        let t = self.island().catalog.table(table);
        let mut rid = t.lookup(key);
        // A miss on a hash table is validated through its key's stripe
        // version, which must be read *before* the lookup that finds the key
        // absent: an insert between a lookup and a later version read would
        // be inside the version recorded, invisible to validation. Hits need
        // no stripe version, so the first lookup goes without: on a miss the
        // version is read (waiting while odd) and the key looked up again,
        // and that second lookup is the one the answer rests on.
        let mut stripe = None;
        loop {
            let Some(r) = rid else {
                #[cfg(test)]
                sched::at(sched::Point::LookupMissed);
                if stripe.is_none() {
                    stripe = self.miss_stripe(t, key);
                    if stripe.is_some() {
                        rid = t.lookup(key);
                        continue;
                    }
                }
                self.record_miss(t, key, stripe);
                return Ok(None);
            };
            if let Some(h) = self.find(table, r) {
                let a = &self.acc[h.0 as usize];
                if a.key != key {
                    // This transaction read the slot under another key, and
                    // the index now names it for `key`: it was freed and
                    // taken again since. The earlier read fails validation
                    // unless the reuse was undone (an insert that aborted),
                    // and then nothing would validate this answer.
                    return Err(Abort::Conflict(AbortReason::ReadValidation));
                }
                if a.kind != Kind::Delete && (a.seen.present || a.kind == Kind::Insert) {
                    return Ok(Some(h));
                }
                return Ok(None);
            }
            match self.read_rid(table, r, key, for_update) {
                // Indexed but absent (an uncommitted insert, a delete being
                // installed, a reused slot): the answer is "no such key", and
                // it is validated like an index miss (the slot's version does
                // not move when the key is inserted again into another slot).
                // Its stripe version, too, must precede a lookup that still
                // finds no present row under the key.
                Ok(None) => {
                    #[cfg(test)]
                    sched::at(sched::Point::ReadAbsent);
                    if stripe.is_none() {
                        stripe = self.miss_stripe(t, key);
                        if stripe.is_some() {
                            let now = t.lookup(key);
                            if now != Some(r) {
                                rid = now;
                                continue;
                            }
                        }
                    }
                    self.record_miss(t, key, stripe);
                    return Ok(None);
                }
                res => return res.map_err(Abort::Conflict),
            }
        }
    }

    /// For a miss on `t` that commit must validate through a hash stripe:
    /// the key's stripe and its version, read once no insert or delete on
    /// the stripe is under way. `None` if the miss needs no stripe (not
    /// validated, no hash index, or a fixed key set).
    fn miss_stripe(&self, t: &Table, key: u64) -> Option<(usize, u64)> {
        if !self.validate || self.read_committed || t.fixed_keys {
            return None;
        }
        let h = t.hash.as_ref()?;
        let stripe = HashIndex::stripe_of(key);
        let mut version = h.stripe_version(stripe);
        let mut spins = 0;
        while version & 1 == 1 {
            spins += 1;
            crate::cc::backoff(spins);
            version = h.stripe_version(stripe);
        }
        Some((stripe, version))
    }

    /// Records a point miss for validation at commit: through `stripe` (from
    /// [`Txn::miss_stripe`], read before the lookup) on a hash table, as an
    /// empty scan of the key on an ordered one.
    fn record_miss(&mut self, t: &Table, key: u64, stripe: Option<(usize, u64)>) {
        if let Some((stripe, version)) = stripe {
            // Validation takes every own insert on the stripe back out of
            // the version it finds; the ones made before this miss are
            // already in `version`, so take them out here too. Otherwise a
            // foreign insert (of this very key) would be cancelled out.
            let own = self
                .acc
                .iter()
                .filter(|a| {
                    a.kind == Kind::Insert
                        && a.island == LOCAL
                        && a.table == t.id
                        && HashIndex::stripe_of(a.key) == stripe
                })
                .count() as u64;
            self.misses.push(Miss {
                table: t.id,
                stripe: stripe as u32,
                version: version.wrapping_sub(2 * own),
            });
            return;
        }
        // A hash table's miss to validate always comes with its stripe.
        if !self.validate || self.read_committed || t.fixed_keys || t.hash.is_some() {
            return;
        }
        // Nothing is indexed under the key: validated as an empty scan.
        let k = key_of(key);
        self.scans.push(Scan {
            table: t.id,
            secondary: None,
            lo: k,
            hi: k,
            reverse: false,
            visited: 0,
            exhausted: true,
            digest: DIGEST_SEED,
        });
    }

    /// Reads row `rid` (known to the index under `key`) into a new access entry.
    fn read_rid(
        &mut self,
        table: TableId,
        rid: RowId,
        key: u64,
        for_update: bool,
    ) -> Result<Option<RowH>, AbortReason> {
        let shared = &*self.shared;
        let t = shared.catalog.table(table);
        let words = t.schema.row_words();
        let off = self.buf.len();
        self.buf.resize(off + words, 0);
        // Under `none` a read is a copy: execution, not locking.
        let prev = if self.validate {
            phases::switch(Phase::Locking)
        } else {
            Phase::Idle
        };
        let read = if self.read_committed && !for_update {
            // The row in the table is always a committed image (writes are
            // buffered until commit installs them), so a consistent copy of
            // it, without a lock, is a committed read.
            let seen = crate::cc::committed_read(t, rid, key, &mut self.buf[off..off + words]);
            Ok((seen, crate::cc::Held::Nothing))
        } else {
            shared.cc.read(
                t,
                rid,
                key,
                &mut self.buf[off..off + words],
                for_update,
                &self.meta,
            )
        };
        if self.validate {
            phases::switch(prev);
        }
        if let Err(AbortReason::LockConflict) = read {
            self.conflict = Some(LockWait {
                table,
                rid,
                exclusive: for_update,
            });
        }
        let (seen, held) = read?;
        let orig = if seen.present && !t.secondary.is_empty() {
            let o = self.buf.len();
            self.buf.extend_from_within(off..off + words);
            o as u32
        } else {
            u32::MAX
        };
        let h = self.push_access(Access {
            table,
            rid,
            key,
            island: LOCAL,
            kind: Kind::Read,
            dirty: false,
            seen,
            held,
            off: off as u32,
            orig,
            indexed: false,
        });
        Ok(seen.present.then_some(h))
    }

    /// Inserts a row with `key`; its columns start zeroed: set them through
    /// [`Txn::row_mut`]. `Ok(None)` if a committed row with that key exists.
    pub async fn insert(&mut self, table: TableId, key: u64) -> Result<Option<RowH>, Abort> {
        if let Some(island) = self.route(table, key) {
            return self.remote_insert(island, table, key).await;
        }
        self.insert_local(table, key)
    }

    pub(crate) fn insert_local(&mut self, table: TableId, key: u64) -> Result<Option<RowH>, Abort> {
        let shared = self.island();
        let t = shared.catalog.table(table);
        if t.fixed_keys {
            return Err(fixed_keys_error(t, "an insert"));
        }
        let rid = t.alloc(&mut self.caches[table as usize])?;
        let old = t.version(rid).load(std::sync::atomic::Ordering::Acquire);
        let held = shared.cc.claim_insert(t, rid, &self.meta);
        t.key_word(rid)
            .store(key, std::sync::atomic::Ordering::Release);
        match t.index_primary(key, rid) {
            Ok(None) => {}
            Ok(Some(existing)) => {
                self.undo_claim(t, rid, held);
                if let Some(h) = self.find(table, existing) {
                    if self.acc[h.0 as usize].key != key {
                        // Read under another key: the slot was reused since
                        // (see `Txn::point`).
                        return Err(Abort::Conflict(AbortReason::ReadValidation));
                    }
                    // Our own row: present unless we deleted it.
                    let a = &mut self.acc[h.0 as usize];
                    if a.kind != Kind::Delete {
                        return Ok(None);
                    }
                    // Deleted earlier in this transaction: the insert becomes an
                    // overwrite of that row with a fresh (zeroed) image.
                    a.kind = Kind::Read;
                    a.dirty = true;
                    let off = a.off as usize;
                    self.buf[off..off + t.schema.row_words()].fill(0);
                    return Ok(Some(h));
                }
                // Someone else's row: a committed duplicate is an answer (and is
                // validated like a read); an uncommitted one is a conflict.
                return match self.read_rid(table, existing, key, false) {
                    Ok(Some(_)) => Ok(None),
                    Ok(None) => Err(Abort::Conflict(AbortReason::DuplicateKey)),
                    Err(r) => Err(Abort::Conflict(r)),
                };
            }
            Err(e) => {
                self.undo_claim(t, rid, held);
                return Err(e.into());
            }
        }
        let off = self.push_image(t.schema.row_words());
        let h = self.push_access(Access {
            table,
            rid,
            key,
            island: LOCAL,
            kind: Kind::Insert,
            dirty: true,
            seen: Observed {
                version: old,
                present: false,
            },
            held,
            off,
            orig: u32::MAX,
            indexed: false,
        });
        self.has_inserts = true;
        Ok(Some(h))
    }

    fn undo_claim(&mut self, t: &Table, rid: RowId, held: Held) {
        self.shared.cc.release(t, rid, held);
        t.arena.free(&mut self.caches[t.id as usize], rid);
    }

    /// Deletes a row the transaction has read (or inserted).
    pub async fn delete(&mut self, h: RowH) -> Result<(), Abort> {
        let t = self.island().catalog.table(self.acc[h.0 as usize].table);
        if t.fixed_keys {
            return Err(fixed_keys_error(t, "a delete"));
        }
        let a = &mut self.acc[h.0 as usize];
        match a.kind {
            Kind::Read => {
                a.kind = Kind::Delete;
                a.dirty = false;
                Ok(())
            }
            Kind::Insert => Err(Abort::Failed(Error::Config(
                "deleting a row inserted by the same transaction is not supported".into(),
            ))),
            Kind::Delete => Ok(()),
        }
    }

    /// The current image of a row the transaction holds.
    #[inline]
    pub fn row(&self, h: RowH) -> RowRef<'_> {
        let a = &self.acc[h.0 as usize];
        let t = self.shared.catalog.table(a.table);
        let off = a.off as usize;
        RowRef {
            words: &self.buf[off..off + t.schema.row_words()],
            schema: &t.schema,
        }
    }

    /// Write access to a row's image; the change is installed at commit.
    #[inline]
    pub fn row_mut(&mut self, h: RowH) -> RowMut<'_> {
        let a = &mut self.acc[h.0 as usize];
        debug_assert!(a.kind != Kind::Delete, "writing a deleted row");
        a.dirty = true;
        let t = self.shared.catalog.table(a.table);
        let off = a.off as usize;
        RowMut {
            words: &mut self.buf[off..off + t.schema.row_words()],
            schema: &t.schema,
        }
    }

    /// The primary key of a row the transaction holds.
    pub fn key(&self, h: RowH) -> u64 {
        self.acc[h.0 as usize].key
    }

    /// Scans the primary ordered index over keys `[lo, hi]`, ascending or
    /// descending, returning at most `limit` present rows. Read them with
    /// [`Txn::scan_row`]`(0..n)`.
    pub async fn scan(
        &mut self,
        table: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        if let Some(island) = self.route(table, lo) {
            return self
                .remote_scan(
                    island,
                    table,
                    None,
                    key_of(lo),
                    key_of(hi) | u64::MAX as u128,
                    limit,
                    reverse,
                )
                .await;
        }
        self.scan_index(
            table,
            None,
            key_of(lo),
            key_of(hi) | u64::MAX as u128,
            limit,
            reverse,
        )
    }

    /// Rows whose secondary key equals `skey`, in primary-key order (at most `limit`).
    pub async fn scan_secondary(
        &mut self,
        table: TableId,
        idx: SecondaryId,
        skey: u64,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        if let Some(island) = self.route_secondary(table, idx, skey) {
            return self
                .remote_scan(
                    island,
                    table,
                    Some(idx),
                    pair(skey, 0),
                    pair(skey, u64::MAX),
                    limit,
                    reverse,
                )
                .await;
        }
        self.scan_index(
            table,
            Some(idx),
            pair(skey, 0),
            pair(skey, u64::MAX),
            limit,
            reverse,
        )
    }

    /// Resolves a secondary index by name (do it once, outside the hot path).
    /// Panics if the table has no such index: that is a schema/program mismatch.
    pub fn catalog_secondary(&self, table: TableId, name: &str) -> SecondaryId {
        let t = self.shared.catalog.table(table);
        t.secondary(name)
            .unwrap_or_else(|| panic!("table '{}' has no secondary index '{name}'", t.name))
    }

    /// The i-th row of the last scan.
    pub fn scan_row(&self, i: usize) -> RowH {
        self.scan_out[i]
    }

    pub(crate) fn scan_index(
        &mut self,
        table: TableId,
        sec: Option<SecondaryId>,
        lo: u128,
        hi: u128,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        let shared = self.island();
        let t = shared.catalog.table(table);
        let idx = match sec {
            Some(s) => &t.secondary[s.0 as usize].1,
            None => match &t.ordered {
                Some(o) => o,
                None => {
                    return Err(Abort::Failed(Error::Config(format!(
                        "table '{}' has a hash primary index: it cannot be range-scanned",
                        t.name
                    ))))
                }
            },
        };
        let want = limit.max(1);
        // A secondary scan must see this transaction's own changes to indexed
        // columns, which reach the index only at commit: scan the whole key
        // group, then correct it with the rows this transaction changed.
        let own_changes = sec.is_some()
            && self.acc.iter().any(|a| {
                a.table == table && a.island == LOCAL && (a.dirty || a.kind == Kind::Delete)
            });
        let limit = if own_changes { usize::MAX } else { want };
        // An entry of a secondary index may name a row whose image has
        // another key: the entry a committing writer added before it
        // installed (then aborted), or the one it replaces, removed only at
        // install. Such a row is not returned (the entry still counts for
        // validation). Rows of a fixed-key table never change keys.
        let check = sec
            .filter(|_| !t.fixed_keys)
            .map(|s| &t.secondary[s.0 as usize].0);
        let mut out = std::mem::take(&mut self.scan_out);
        out.clear();
        let mut visited = 0u32;
        let mut digest = DIGEST_SEED;
        let mut exhausted = true;
        let mut last = lo;
        let mut failed = None;
        idx.scan(lo, hi, reverse, |k, rid| {
            last = k;
            let pk = if sec.is_some() {
                k as u64
            } else {
                (k >> 64) as u64
            };
            let h = match self.find(table, rid) {
                Some(h) if self.acc[h.0 as usize].key != pk => {
                    // Read under another key: the slot was reused since
                    // (see `Txn::point`).
                    failed = Some(AbortReason::ReadValidation);
                    return false;
                }
                Some(h) => {
                    let a = &self.acc[h.0 as usize];
                    if a.kind != Kind::Insert {
                        visited += 1;
                        digest = mix(digest, k, rid);
                    }
                    (a.kind != Kind::Delete && (a.seen.present || a.kind == Kind::Insert))
                        .then_some(h)
                }
                None => {
                    visited += 1;
                    digest = mix(digest, k, rid);
                    match self.read_rid(table, rid, pk, false) {
                        Ok(h) => h,
                        Err(r) => {
                            failed = Some(r);
                            return false;
                        }
                    }
                }
            };
            let h =
                h.filter(|&h| check.is_none_or(|def| (def.key)(&self.row(h)) == (k >> 64) as u64));
            if let Some(h) = h {
                out.push(h);
                if out.len() == limit {
                    exhausted = false;
                    return false;
                }
            }
            true
        });
        if let Some(r) = failed {
            self.scan_out = out;
            return Err(Abort::Conflict(r));
        }
        if own_changes {
            let (def, _) = &t.secondary[sec.map_or(0, |s| s.0 as usize)];
            let skey = (lo >> 64) as u64;
            let words = t.schema.row_words();
            let image_key = |a: &Access, buf: &[u64]| {
                let o = a.off as usize;
                (def.key)(&RowRef {
                    words: &buf[o..o + words],
                    schema: &t.schema,
                })
            };
            out.retain(|h| {
                let a = &self.acc[h.0 as usize];
                !(a.dirty && image_key(a, &self.buf) != skey)
            });
            for (i, a) in self.acc.iter().enumerate() {
                let h = RowH(i as u32);
                if a.table == table
                    && a.island == LOCAL
                    && a.dirty
                    && a.kind != Kind::Delete
                    && image_key(a, &self.buf) == skey
                    && !out.contains(&h)
                {
                    out.push(h);
                }
            }
            out.sort_unstable_by_key(|h| self.acc[h.0 as usize].key);
            if reverse {
                out.reverse();
            }
            out.truncate(want);
        }
        self.scan_out = out;
        // A scan cut short by its limit has read its range up to the last
        // entry it visited: validate that whole range. Counting entries is not
        // enough: the rescan skips the transaction's own inserts, so when the
        // last row returned is an own insert, a foreign insert before it would
        // leave the count and digest of the other entries unchanged.
        let (lo, hi) = match (exhausted, reverse) {
            (true, _) => (lo, hi),
            (false, false) => (lo, last),
            (false, true) => (last, hi),
        };
        let exhausted = true;
        // A table whose key set is fixed has no phantoms to validate against.
        if self.validate && !self.read_committed && !self.island().catalog.table(table).fixed_keys {
            self.scans.push(Scan {
                table,
                secondary: sec,
                lo,
                hi,
                reverse,
                visited,
                exhausted,
                digest,
            });
        }
        Ok(self.scan_out.len())
    }

    /// Whether the transaction changed rows of this island.
    pub(crate) fn has_local_writes(&self) -> bool {
        self.acc
            .iter()
            .any(|a| a.island == LOCAL && (a.dirty || a.kind == Kind::Delete))
    }

    /// Commits: locks the write set, validates reads, misses and scans, writes
    /// the redo record to the island's log buffer and installs the writes.
    /// For a transaction that touched only this island; one that touched
    /// others commits through its executor's two-phase commit.
    pub fn commit(&mut self) -> Result<Committed, Abort> {
        if let Some(e) = self.read_committed_wrote() {
            self.abort();
            return Err(e);
        }
        if self.dist.as_ref().is_some_and(|d| !d.touched.is_empty()) {
            self.abort();
            return Err(Abort::Failed(Error::Config(
                "a transaction that touched other islands commits through its executor".into(),
            )));
        }
        let writes = self.has_local_writes();
        self.check_fixed_keys(writes)?;
        let prev = phases::switch(Phase::Locking);
        let tid = self.lock_and_validate(writes);
        let tid = tid.inspect_err(|_| {
            phases::switch(prev);
        })?;
        let shared = self.island();
        // 5. Log, before installing: see `island::Shared::log`.
        let logged = writes && shared.wal.is_some();
        let mut ack = 0;
        let flag = &shared.committing[self.worker as usize];
        if logged {
            phases::switch(Phase::Logging);
            flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
            let mut slot = shared.log.lock();
            let before = slot.buf.len_bytes();
            slot.buf.commit_begin(tid);
            self.log_writes(&mut slot.buf);
            slot.buf.record_end();
            self.unflushed_bytes += slot.buf.len_bytes().saturating_sub(before);
            ack = slot.next_seq;
            // Changes once per hand-off, not per commit: skip the store when
            // unchanged, so read-only commits on other cores keep the line cached.
            if shared.append_seq.load(Ordering::Relaxed) != ack {
                shared.append_seq.store(ack, Ordering::Release);
            }
        } else if shared.wal.is_some() {
            // Read-only: durable once everything it could have read from is.
            ack = shared.append_seq.load(Ordering::Acquire);
        }
        // 6. Install and release.
        phases::switch(Phase::Locking);
        self.install(tid);
        if logged {
            flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        }
        self.clear();
        phases::switch(prev);
        Ok(Committed { tid, logged, ack })
    }

    /// Commit steps 1–4: locks the write set, adds new secondary entries, validates, picks the tid. On
    /// failure everything is released and the reason returned.
    fn lock_and_validate(&mut self, writes: bool) -> Result<u64, Abort> {
        let shared = self.island();
        if writes {
            if let Some(e) = shared.log_failure() {
                self.abort();
                return Err(Abort::Failed(e));
            }
        }
        // 1. Lock the write set.
        if let Err(reason) = self.lock_pending_rows() {
            self.abort();
            return Err(Abort::Conflict(reason));
        }
        // 2. Make the new secondary entries visible, then validate: a scan
        // validated from here on meets them (see `index_secondary_early`).
        // A distributed commit has done it already, before any branch
        // prepared (see "Across islands" in the module documentation).
        self.add_secondary_entries();
        // 3. Validate (under read committed, what was read before the call).
        if self.validate {
            if let Err(reason) = self.validate_all() {
                self.abort();
                return Err(Abort::Conflict(reason));
            }
        }
        // 4. The commit tid: above every version seen and this worker's last.
        let mut tid = self.last_tid;
        for a in &self.acc {
            if a.island == LOCAL {
                tid = tid.max(tid_of(a.seen.version));
            }
        }
        if self.has_inserts {
            tid = tid.max(shared.delete_tid.load(std::sync::atomic::Ordering::Acquire));
        }
        tid += 1;
        self.last_tid = tid;
        // Published before the delete unindexes its key, so an insert that
        // finds the key gone sees this tid (see `Shared::delete_tid`).
        if self
            .acc
            .iter()
            .any(|a| a.island == LOCAL && a.kind == Kind::Delete)
        {
            shared
                .delete_tid
                .fetch_max(tid, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(tid)
    }

    /// Takes the write lock of every row of this island whose lock is still
    /// pending ([`Access::lock_pending`]). On a conflict returns its reason,
    /// releasing nothing (the caller aborts).
    pub(crate) fn lock_pending_rows(&mut self) -> Result<(), AbortReason> {
        self.locks.clear();
        for a in self.acc.iter() {
            if a.island == LOCAL && a.lock_pending() {
                self.locks.push(a.write_lock());
            }
        }
        self.lock_listed()
    }

    /// Takes the write locks of the rows in `locks` and records what the
    /// transaction holds on each. On a conflict returns its reason.
    fn lock_listed(&mut self) -> Result<(), AbortReason> {
        if self.locks.is_empty() {
            return Ok(());
        }
        let shared = self.island();
        // The scheme may reorder `locks`; map results back by (table, rid).
        let r = shared
            .cc
            .lock_write_set(&shared.catalog.tables, &mut self.locks, &self.meta);
        for l in &self.locks {
            if let Some(h) = self.find(l.table, l.rid) {
                self.acc[h.0 as usize].held = l.held;
            }
        }
        r
    }

    /// Appends the transaction's local writes to an open commit or prepare record.
    fn log_writes(&self, log: &mut crate::wal::LogBuffer) {
        let tables = &self.island().catalog.tables;
        for a in &self.acc {
            if a.island != LOCAL {
                continue;
            }
            let t = &tables[a.table as usize];
            if a.kind == Kind::Delete {
                log.delete(a.table, a.key);
            } else if a.dirty {
                let off = a.off as usize;
                let img = &self.buf[off..off + t.schema.row_words()];
                if a.kind == Kind::Read {
                    log_update(log, t, a.rid, a.key, img);
                } else {
                    log.put(a.table, a.key, crate::storage::schema::row_bytes(img));
                }
            }
        }
    }

    /// Commit step 6: installs the local writes with `tid` and releases
    /// every lock: all writes first, then the read locks, so under 2PL no
    /// row this transaction read is free while one of its writes (or index
    /// changes) is still to come.
    fn install(&mut self, tid: u64) {
        let shared = self.island();
        let cc = &*shared.cc;
        let tables = &shared.catalog.tables;
        for a in &self.acc {
            if a.island == LOCAL {
                let all = a.dirty || matches!(a.kind, Kind::Insert | Kind::Delete);
                tables[a.table as usize].prefetch_rid(a.rid, all);
            }
        }
        #[cfg(test)]
        let mut step = 0;
        for i in 0..self.acc.len() {
            let a = self.acc[i];
            if a.island != LOCAL || (a.kind == Kind::Read && !a.dirty) {
                continue;
            }
            #[cfg(test)]
            {
                sched::at(sched::Point::Install(step));
                step += 1;
            }
            let t = &tables[a.table as usize];
            let words = t.schema.row_words();
            let off = a.off as usize;
            match a.kind {
                Kind::Delete => {
                    if let Some(old) = self.orig_image(t, &a) {
                        t.unindex_secondary(a.key, &old);
                    }
                    t.unindex_primary(a.key, a.rid);
                    cc.install(t, a.rid, tid, None, a.held);
                    t.arena.free(&mut self.caches[a.table as usize], a.rid);
                }
                // Its secondary entries went in at lock time.
                Kind::Insert => {
                    cc.install(t, a.rid, tid, Some(&self.buf[off..off + words]), a.held)
                }
                Kind::Read => {
                    // The entries of the changed keys went in at lock time;
                    // the ones they replace go now, before the row is free.
                    if a.indexed {
                        if let Some(old) = self.orig_image(t, &a) {
                            let new = self.image(t, &a);
                            for (def, idx) in &t.secondary {
                                let ko = (def.key)(&old);
                                if ko != (def.key)(&new) {
                                    idx.remove(pair(ko, a.key));
                                }
                            }
                        }
                    }
                    cc.install(t, a.rid, tid, Some(&self.buf[off..off + words]), a.held);
                }
            }
        }
        for a in &self.acc {
            if a.island == LOCAL && a.kind == Kind::Read && !a.dirty {
                #[cfg(test)]
                {
                    sched::at(sched::Point::Install(step));
                    step += 1;
                }
                cc.release(&tables[a.table as usize], a.rid, a.held);
            }
        }
        #[cfg(test)]
        sched::at(sched::Point::Install(step));
    }

    /// The working image of local row `a` of table `t`.
    fn image<'b>(&'b self, t: &'b Table, a: &Access) -> RowRef<'b> {
        let o = a.off as usize;
        RowRef {
            words: &self.buf[o..o + t.schema.row_words()],
            schema: &t.schema,
        }
    }

    /// The image of local row `a` of table `t` as it was read, if it was
    /// kept (tables with secondary indexes).
    fn orig_image<'b>(&'b self, t: &'b Table, a: &Access) -> Option<RowRef<'b>> {
        (a.orig != u32::MAX).then(|| {
            let o = a.orig as usize;
            RowRef {
                words: &self.buf[o..o + t.schema.row_words()],
                schema: &t.schema,
            }
        })
    }

    /// Commit step 2, once: with this island's write set locked and before
    /// any validation, adds the new secondary entries of its rows
    /// ([`Txn::index_secondary_early`]). On one island, commit calls it
    /// between locking and validating; across islands, the home calls it
    /// for its own island and each branch at the home's LOCK round, before
    /// any branch is asked to prepare, and prepare finds it done. After it,
    /// a change of this island's rows is refused ([`Txn::apply_write`]):
    /// the entries stand for the images as they were.
    pub(crate) fn add_secondary_entries(&mut self) {
        if self.secondary_added {
            return;
        }
        self.secondary_added = true;
        self.index_secondary_early();
    }

    /// Whether commit must add secondary entries for row `a` of table `t`
    /// (here or, for a copy, on the row's island): an insert into a table
    /// with secondary indexes, or an update that changed an indexed column,
    /// of a table whose keys are not fixed. The one rule for which rows
    /// have entries to add before any validation.
    fn adds_secondary_entries(&self, t: &Table, a: &Access) -> bool {
        a.dirty
            && a.kind != Kind::Delete
            && !t.secondary.is_empty()
            && !t.fixed_keys
            && (a.kind == Kind::Insert || self.secondary_moved(t, a))
    }

    /// Whether the working image of row `a` of table `t` has another key
    /// than the image as read in some secondary index of `t` (false if the
    /// image as read was not kept).
    fn secondary_moved(&self, t: &Table, a: &Access) -> bool {
        let Some(old) = self.orig_image(t, a) else {
            return false;
        };
        let new = self.image(t, a);
        t.secondary
            .iter()
            .any(|(def, _)| (def.key)(&old) != (def.key)(&new))
    }

    /// Adds, with the write set locked and before validation, the
    /// secondary-index entries of every row of this island for which
    /// [`Txn::adds_secondary_entries`] holds: an inserted row's, and an
    /// updated row's whose indexed column changed. A scan of another
    /// transaction validated after this point meets them, so a writer
    /// ordered before that scan (it validated first) is never missed by it;
    /// until install they name a row this transaction holds (locked under
    /// 2PL; under OCC an insert's slot is claimed and an update's row
    /// version-locked), so a scan that meets one waits for it, conflicts,
    /// or fails its validation. The entries they replace stay until
    /// install; an abort removes the new ones
    /// ([`Txn::unindex_secondary_early`]).
    fn index_secondary_early(&mut self) {
        let tables = &self.island().catalog.tables;
        let mut added = false;
        for i in 0..self.acc.len() {
            let a = &self.acc[i];
            let t = &tables[a.table as usize];
            if a.island != LOCAL || !self.adds_secondary_entries(t, a) {
                continue;
            }
            let a = *a;
            let new = self.image(t, &a);
            if a.kind == Kind::Insert {
                t.index_secondary(a.key, a.rid, &new);
            } else if let Some(old) = self.orig_image(t, &a) {
                for (def, idx) in &t.secondary {
                    let kn = (def.key)(&new);
                    if (def.key)(&old) != kn {
                        idx.insert(pair(kn, a.key), a.rid);
                    }
                }
                self.has_moves = true;
            }
            self.acc[i].indexed = true;
            added = true;
        }
        if added {
            // The entries are stores that the validation's loads must not
            // pass (the other side of a scanner's write lock and its rescan).
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// Abort: removes the entries [`Txn::index_secondary_early`] added.
    fn unindex_secondary_early(&mut self) {
        let tables = &self.island().catalog.tables;
        for a in &self.acc {
            if !a.indexed {
                continue;
            }
            let t = &tables[a.table as usize];
            let new = self.image(t, a);
            match (a.kind, self.orig_image(t, a)) {
                (Kind::Read, Some(old)) => {
                    for (def, idx) in &t.secondary {
                        let kn = (def.key)(&new);
                        if (def.key)(&old) != kn {
                            idx.remove(pair(kn, a.key));
                        }
                    }
                }
                (Kind::Insert, _) => t.unindex_secondary(a.key, &new),
                _ => {}
            }
        }
    }

    /// Two-phase commit, participant side: locks and validates this island's
    /// part of the transaction and keeps it locked. Returns whether it wrote
    /// anything here. On failure the branch is already aborted.
    pub(crate) fn prepare_branch(&mut self) -> Result<bool, Abort> {
        debug_assert!(self.prepared.is_none(), "prepared twice");
        let writes = self.has_local_writes();
        self.check_fixed_keys(writes)?;
        let prev = phases::switch(Phase::Locking);
        let tid = self.lock_and_validate(writes);
        phases::switch(prev);
        self.prepared = Some((tid?, 0));
        Ok(writes)
    }

    /// Appends the prepared branch's Prepare record (its redo writes and tid)
    /// to the island's log; returns the batch it will be in (0 without a log).
    /// The batch stays pinned against checkpoint truncation until the branch
    /// is decided.
    pub(crate) fn log_prepare(&mut self, gtid: u64) -> BatchSeq {
        let shared = self.island();
        let Some((tid, _)) = self.prepared else {
            debug_assert!(false, "log_prepare of an unprepared branch");
            return 0;
        };
        if shared.wal.is_none() {
            return 0;
        }
        let prev = phases::switch(Phase::Logging);
        let mut slot = shared.log.lock();
        slot.buf.prepare_begin(gtid, tid);
        self.log_writes(&mut slot.buf);
        slot.buf.record_end();
        let seq = slot.next_seq;
        slot.pin(seq);
        drop(slot);
        phases::switch(prev);
        self.prepared = Some((tid, seq));
        seq
    }

    /// Installs a prepared branch (the decision was commit) and releases it.
    pub(crate) fn commit_prepared(&mut self) {
        let Some((tid, pin)) = self.prepared.take() else {
            debug_assert!(false, "commit of an unprepared branch");
            return;
        };
        let shared = self.island();
        let flag = &shared.committing[self.worker as usize];
        flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        if pin != 0 {
            shared.log.lock().unpin(pin);
        }
        let prev = phases::switch(Phase::Locking);
        self.install(tid);
        phases::switch(prev);
        flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        self.clear();
    }

    /// Validates the reads, misses and scans recorded: under
    /// [`Txn::read_committed`], those made before the call (later misses and
    /// scans are not recorded).
    fn validate_all(&self) -> Result<(), AbortReason> {
        let shared = &*self.shared;
        let reads = if self.read_committed {
            &self.acc[..self.rc_from as usize]
        } else {
            &self.acc[..]
        };
        for a in reads {
            if a.kind == Kind::Read && !a.dirty && a.island == LOCAL {
                let t = shared.catalog.table(a.table);
                if !shared.cc.validate_read(t, a.rid, &a.seen, a.held) {
                    return Err(AbortReason::ReadValidation);
                }
            }
        }
        for m in &self.misses {
            let t = shared.catalog.table(m.table);
            let h = t.hash.as_ref().expect("miss recorded on a hash table");
            let mut now = h.stripe_version(m.stripe as usize);
            // Our own inserts on that stripe moved it by two each.
            for a in &self.acc {
                if a.kind == Kind::Insert
                    && a.island == LOCAL
                    && a.table == m.table
                    && HashIndex::stripe_of(a.key) == m.stripe as usize
                {
                    now = now.wrapping_sub(2);
                }
            }
            if now != m.version {
                return Err(AbortReason::Phantom);
            }
        }
        for s in &self.scans {
            let t = shared.catalog.table(s.table);
            // Visit one entry more than the scan did when it ran to the end of
            // its range, to catch an insert after the last entry.
            let limit = if s.exhausted {
                s.visited.saturating_add(1)
            } else {
                s.visited
            };
            if self.rescan(t, s, limit) != (s.visited, s.digest) {
                return Err(AbortReason::Phantom);
            }
        }
        Ok(())
    }

    /// Re-walks a scan's range, skipping this transaction's own inserts.
    fn rescan(&self, t: &Table, s: &Scan, limit: u32) -> (u32, u64) {
        let idx = match s.secondary {
            Some(sec) => &t.secondary[sec.0 as usize].1,
            None => t.ordered.as_ref().expect("scan on an ordered table"),
        };
        let mut visited = 0u32;
        let mut digest = DIGEST_SEED;
        if limit == 0 {
            return (0, digest);
        }
        let def = s.secondary.map(|sec| &t.secondary[sec.0 as usize].0);
        idx.scan(s.lo, s.hi, s.reverse, |k, rid| {
            if self.own_new_entry(t, def, k, rid) {
                return true;
            }
            visited += 1;
            digest = mix(digest, k, rid);
            visited < limit
        });
        (visited, digest)
    }

    /// Whether index entry `k → rid` (of the secondary index `def`, or the
    /// primary index) was added by this transaction: an insert's, or one
    /// [`Txn::index_secondary_early`] added for a changed key. A rescan
    /// skips them: the scan they validate ran before they existed.
    fn own_new_entry(&self, t: &Table, def: Option<&SecondaryDef>, k: u128, rid: RowId) -> bool {
        if !self.has_inserts && !self.has_moves {
            return false;
        }
        let Some(h) = self.find(t.id, rid) else {
            return false;
        };
        let a = &self.acc[h.0 as usize];
        match (a.kind, def) {
            (Kind::Insert, _) => true,
            (Kind::Read, Some(def)) if a.indexed => self
                .orig_image(t, a)
                .is_some_and(|old| (def.key)(&old) != (k >> 64) as u64),
            _ => false,
        }
    }

    /// Aborts: releases everything and forgets the transaction's writes.
    pub fn abort(&mut self) {
        let shared = self.island();
        if let Some((_, pin)) = self.prepared.take() {
            if pin != 0 {
                shared.log.lock().unpin(pin);
            }
        }
        // Before any row is released: nobody else may move these rows yet.
        if self.acc.iter().any(|a| a.indexed) {
            self.unindex_secondary_early();
        }
        for a in &self.acc {
            if a.island != LOCAL {
                continue;
            }
            let t = shared.catalog.table(a.table);
            if a.kind == Kind::Insert {
                t.unindex_primary(a.key, a.rid);
                shared.cc.release(t, a.rid, a.held);
                t.arena.free(&mut self.caches[a.table as usize], a.rid);
            } else {
                shared.cc.release(t, a.rid, a.held);
            }
        }
        self.clear();
    }

    fn clear(&mut self) {
        self.read_committed = false;
        self.acc.clear();
        self.acc_index.clear();
        self.buf.clear();
        self.misses.clear();
        self.scans.clear();
        self.scan_out.clear();
        self.has_inserts = false;
        self.has_moves = false;
        self.secondary_added = false;
        if let Some(d) = &mut self.dist {
            d.reset();
        }
    }

    /// Hands the island's buffered log records to the log writer. Any worker
    /// may do it; commits are durable once [`Txn::durable_batch`] reaches their
    /// [`Committed::ack`]. Returns the batch submitted, if there was anything.
    pub fn flush_log(&mut self) -> Result<Option<BatchSeq>, Error> {
        let Some(w) = &self.shared.wal else {
            return Ok(None);
        };
        self.unflushed_bytes = 0;
        self.shared.log.lock().hand_off(w)
    }

    /// Blocks until batch `seq` is durable (`sync`) or written (`async`).
    /// For callers that acknowledge one transaction at a time; the benchmark
    /// driver polls [`Txn::durable_batch`] instead and never blocks.
    pub fn wait_durable(&self, seq: BatchSeq) -> Result<(), Error> {
        match &self.shared.wal {
            Some(w) => w.wait_durable(seq).map_err(Error::from),
            None => Ok(()),
        }
    }

    /// Commits and, if the transaction wrote to the log, waits until it is
    /// durable: the simple, one-at-a-time acknowledgement.
    pub fn commit_durable(&mut self) -> Result<Committed, Abort> {
        let c = self.commit()?;
        if c.ack > 0 {
            self.flush_log()?;
            self.wait_durable(c.ack)?;
        }
        Ok(c)
    }

    /// The island's log failure, if its log has failed (it then refuses writes).
    pub fn log_failure(&self) -> Option<Error> {
        self.shared.log_failure()
    }

    /// Bytes of log records buffered and not yet handed to the log.
    pub fn log_pending_bytes(&self) -> usize {
        self.unflushed_bytes
    }

    /// The newest batch known durable (in `async` mode: written).
    #[inline]
    pub fn durable_batch(&self) -> BatchSeq {
        match &self.shared.wal {
            Some(w) => w.durable_seq(),
            None => BatchSeq::MAX,
        }
    }

    /// Runs a stored procedure to completion on this worker, retrying conflicts
    /// (with back-off) up to `max_retries` times. A convenience for tests,
    /// examples and loaders; the benchmark driver has its own loop.
    pub fn execute<T>(
        &mut self,
        max_retries: u32,
        mut f: impl for<'a> FnMut(
            &'a mut Txn,
        )
            -> std::pin::Pin<Box<dyn Future<Output = Result<T, Abort>> + 'a>>,
    ) -> Result<T, Abort> {
        let mut attempt = 0;
        loop {
            self.begin(attempt > 0);
            let r = poll_local(f(self));
            match r {
                Ok(v) => match self.commit() {
                    Ok(_) => return Ok(v),
                    Err(Abort::Conflict(r)) if attempt < max_retries => {
                        let _ = r;
                    }
                    Err(e) => return Err(e),
                },
                Err(Abort::Conflict(r)) if attempt < max_retries => {
                    let _ = r;
                    self.abort();
                }
                Err(e) => {
                    self.abort();
                    return Err(e);
                }
            }
            attempt += 1;
            backoff_retry(attempt);
        }
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if !self.acc.is_empty() {
            self.abort();
        }
        // Committed records must not wait for another worker to hand them over.
        let _ = self.flush_log();
        self.shared.release_slot(self.worker as usize);
    }
}

/// Exponential back-off between retries of an aborted transaction.
pub fn backoff_retry(attempt: u32) {
    let spins = 1u32 << attempt.min(10);
    for _ in 0..spins {
        std::hint::spin_loop();
    }
    if attempt > 8 {
        std::thread::yield_now();
    }
}

/// Polls a procedure that only touches this island: it completes on the first
/// poll. A procedure that suspends here is waiting for a remote island, which a
/// local worker cannot serve: that is reported as an error.
pub fn poll_local<T>(fut: impl Future<Output = Result<T, Abort>>) -> Result<T, Abort> {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(Abort::Failed(Error::Config(
            "a stored procedure suspended (remote operation) on a worker without an executor"
                .into(),
        ))),
    }
}

const DIGEST_SEED: u64 = 0x243f_6a88_85a3_08d3;

#[inline]
fn mix(d: u64, k: u128, rid: RowId) -> u64 {
    let x = (k as u64) ^ ((k >> 64) as u64).rotate_left(17) ^ rid.rotate_left(41);
    crate::storage::hash::hash_key(d ^ x)
}

/// Logs an update of stored row `rid` to `img`: as patches of the runs of
/// words that differ from the stored row, when they are smaller than the
/// whole row (TPC-C's updates change a few counters of rows of 40-80 words:
/// the log, and so the group commit's write and fdatasync, shrink). Runs
/// closer than [`PATCH_GAP_WORDS`] are one patch (a patch header costs more).
/// The caller holds the row locked (or validated, under OCC) and has not
/// installed it, so the stored row is the image this change applies to, as
/// it will be in recovery when the patches are replayed.
fn log_update(log: &mut crate::wal::LogBuffer, t: &Table, rid: RowId, key: u64, img: &[u64]) {
    let stored = t.data(rid);
    let differs = |i: usize| img[i] != stored[i].load(Ordering::Relaxed);
    // Runs [start, end) of changed words, at most a few per row.
    let mut runs = [(0usize, 0usize); MAX_PATCHES];
    let mut n = 0;
    let mut patch_bytes = 0;
    let mut i = 0;
    while i < img.len() {
        if !differs(i) {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        let mut j = end;
        while j < img.len() && j < end + PATCH_GAP_WORDS + 1 {
            if differs(j) {
                end = j + 1;
            }
            j += 1;
        }
        if n == MAX_PATCHES {
            n = usize::MAX; // too scattered: the whole row
            break;
        }
        runs[n] = (start, end);
        n += 1;
        patch_bytes += PATCH_HEADER_BYTES + (end - start) * 8;
        i = end;
    }
    if n == 0 {
        // Written back unchanged: an empty patch still carries the new tid.
        log.patch(t.id, key, 0, &[]);
    } else if n == usize::MAX || patch_bytes >= img.len() * 8 {
        log.put(t.id, key, crate::storage::schema::row_bytes(img));
    } else {
        for &(start, end) in &runs[..n] {
            log.patch(
                t.id,
                key,
                (start * 8) as u32,
                crate::storage::schema::row_bytes(&img[start..end]),
            );
        }
    }
}

/// Unchanged words between two changed ones that still make one patch.
const PATCH_GAP_WORDS: usize = 2;
/// Most patches of one row update before it is logged whole.
const MAX_PATCHES: usize = 4;
/// Log bytes of a patch beyond its data (kind, table, key, offset, length).
const PATCH_HEADER_BYTES: usize = 19;

fn fixed_keys_error(t: &Table, what: &str) -> Abort {
    Abort::Failed(Error::Config(format!(
        "{what} on table '{}', whose key set is fixed after load (TableDef::with_fixed_keys)",
        t.name
    )))
}

impl Txn {
    /// Lowers this transaction's isolation to *read committed* (ANSI P0 and
    /// P1 excluded; TPC-C's Level 1, which its Stock-Level transaction may
    /// run at, Clause 3.4.1): from here on its local reads take no lock and
    /// are not validated at commit, and neither are its scans and misses. It
    /// sees only committed rows, but two reads of one row may differ, and
    /// phantoms may appear. From here on it never makes another transaction
    /// abort or wait. Reads for update still lock, and its reads on other
    /// islands keep their island's scheme. A read-committed transaction must
    /// not write: its commit fails with an error.
    ///
    /// Called partway through a transaction, it leaves what was read before
    /// the call as it was: those reads keep their locks (2PL) and are
    /// validated at commit with the misses and scans made before the call,
    /// so the commit fails if any of them changed. A row read before the
    /// call and read again after it is the transaction's own copy, as ever.
    pub fn read_committed(&mut self) {
        if !self.read_committed {
            self.read_committed = true;
            self.rc_from = self.acc.len() as u32;
        }
    }

    /// A write in a read-committed transaction: the error its commit gives.
    pub(crate) fn read_committed_wrote(&self) -> Option<Abort> {
        (self.read_committed && (self.has_writes() || self.has_inserts)).then(|| {
            Abort::Failed(Error::Config(
                "a read-committed transaction (Txn::read_committed) wrote: only read-only \
                 transactions may lower their isolation"
                    .into(),
            ))
        })
    }

    /// Refuses an update that moves a row of a fixed-key table to another
    /// secondary key: its scans are not validated, so that would be a phantom.
    /// On `Err` the transaction is aborted. `writes`: it wrote here.
    fn check_fixed_keys(&mut self, writes: bool) -> Result<(), Abort> {
        if !writes {
            return Ok(());
        }
        if let Err(e) = self.fixed_key_change() {
            self.abort();
            return Err(e);
        }
        Ok(())
    }

    fn fixed_key_change(&self) -> Result<(), Abort> {
        let tables = &self.island().catalog.tables;
        for a in &self.acc {
            let t = &tables[a.table as usize];
            if a.island == LOCAL && a.dirty && t.fixed_keys && self.secondary_moved(t, a) {
                return Err(fixed_keys_error(t, "a change of a secondary key"));
            }
        }
        Ok(())
    }
}
