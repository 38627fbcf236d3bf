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
//!     // Checked: an overflow is an error (`Error::OutOfRange`), and `?` rolls back.
//!     tx.row_mut(a).sub_i64(BALANCE, amount)?;
//!     tx.row_mut(b).add_i64(BALANCE, amount)?;
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
//! ## Files
//!
//! - `mod.rs`: the [`Txn`] context and its life (begin, a procedure run to
//!   completion, drop), what a commit returns, back-off between attempts.
//! - `access.rs`: the access set: point reads, inserts, deletes, the row
//!   images procedures read and change, the misses and scans recorded for
//!   validation, read committed.
//! - `scan.rs`: range scans over ordered indexes, and their re-walk at commit.
//! - `commit.rs`: commit steps 1–6 on one island (below), a branch's prepare
//!   and commit, abort.
//! - `redo.rs`: the redo records a commit or a prepare appends, and handing
//!   the log buffer over and waiting for it to be durable.
//! - `remote.rs`: operations on rows of other islands, and the side of the
//!   island that serves them.
//! - `sched.rs`: schedule points for deterministic interleaving tests (test
//!   builds only).
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
//!   An insert of a key the transaction deleted overwrites the deleted row
//!   (its lock as read). If the key is found in a slot the transaction never
//!   read while it holds an entry for the key in another slot (deleted, or
//!   read), the key was deleted and inserted again since: the insert aborts
//!   as a conflict (that read would fail validation) rather than answer that
//!   the key exists. A slot read as absent and now holding the key likewise.
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
//! commit (`executor::Executor::commit_home`) takes the pending locks of its own
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
//! (PREP with hold, set by `executor::Executor::start_commit`), because the
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
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::cc::{CcKind, TxnMeta, WriteLock};
use crate::island::{Island, Shared};
use crate::route::IslandId;
use crate::storage::{RowCache, RowId, Table, TableId};
use crate::wal::BatchSeq;
use crate::{Abort, Error};

mod access;
mod commit;
mod redo;
mod remote;
mod scan;
#[cfg(test)]
pub(crate) mod sched;
#[cfg(test)]
mod tests;

use access::{Access, Miss, Scan};
pub(crate) use remote::{Dist, Early, TAG_SEQ_BITS};

/// `Access::island` of a row of this island.
pub(crate) const LOCAL: IslandId = IslandId::MAX;
/// `Access::rid` of a remote row's copy: no local row id ever equals it.
pub(crate) const REMOTE_RID: RowId = RowId::MAX;

/// A row the transaction accessed: an index into its access set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowH(u32);

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
    /// conflicted), kept after the abort: the executor loop retries once
    /// that row is free ([`Txn::conflict_row`]).
    conflict: Option<LockWait>,
    /// Writes asked of rows already held (`row_mut`, `delete`, an insert
    /// over an own delete), since the transaction began: with the lengths
    /// of the access, miss and scan sets, its [`Txn::footprint`].
    changes: u64,
    /// Set when the transaction runs under a distributed executor: routing and
    /// the state of its remote operations (see `remote.rs`).
    pub(crate) dist: Option<Box<remote::Dist>>,
    /// A prepared branch: the tid its writes will carry, and the log batch
    /// its Prepare record pins (0: none).
    pub(crate) prepared: Option<(u64, BatchSeq)>,
}

// Defined here rather than in `island`, which then needs nothing of `txn`.
impl Island {
    /// A transaction context for one worker thread. At most `workers` exist at once.
    pub fn worker(&self) -> Result<Txn, Error> {
        let shared = self.shared();
        let slot = shared.claim_slot().ok_or_else(|| {
            Error::Config(format!(
                "{}: all {} worker handles are in use",
                shared.cfg.name, shared.cfg.workers
            ))
        })?;
        Ok(Txn::new(
            Arc::clone(shared),
            slot as u16,
            shared.recovered_tid,
        ))
    }
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
            changes: 0,
            dist: None,
            prepared: None,
        }
    }

    /// The island's shared state, borrowed apart from `self`, so that a
    /// method can hold it while it changes the transaction's own fields or
    /// calls its `&mut self` methods. Cloning the `Arc` instead would be two
    /// atomic read-modify-writes on a cache line every worker of the island
    /// shares, on every commit; where a borrow of `self.shared` does not get
    /// in the way, use that.
    ///
    /// # Safety
    ///
    /// The caller chooses the lifetime `'a`, and it must not outlive the
    /// `Txn`: the reference is used only inside the body of the method that
    /// took it from `self` (it is not returned, stored, or moved into
    /// anything that outlives that call), and that body neither drops the
    /// `Txn` nor replaces it (`mem::swap`, `mem::replace`). `self.shared` is
    /// private, set once in [`Txn::new`] and never assigned again, so the
    /// `Shared` it points to then lives at least as long as the reference.
    #[inline]
    unsafe fn island<'a>(&self) -> &'a Shared {
        // SAFETY: the `Arc` keeps the `Shared` alive while the Txn lives; the
        // caller keeps the reference within that (see # Safety above).
        unsafe { &*Arc::as_ptr(&self.shared) }
    }

    /// After an attempt that aborted on a lock conflict of a local read: the
    /// row it ran into (`None`: no such conflict, or it was on another
    /// island). Kept until the context begins again.
    pub fn conflict_row(&self) -> Option<LockWait> {
        self.conflict
    }

    /// Forgets the row a conflict ran into, so that a later
    /// [`Txn::conflict_row`] names only a conflict that came after.
    pub fn clear_conflict(&mut self) {
        self.conflict = None;
    }

    /// A count that grows with everything the transaction did to itself:
    /// rows read, locked or written, misses and scans recorded. Two equal
    /// readings mean nothing was added between them (a statement that ran
    /// into a lock before doing anything may be run again as if it never ran).
    pub fn footprint(&self) -> u64 {
        (self.acc.len() + self.misses.len() + self.scans.len()) as u64 + self.changes
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
        self.changes = 0;
        if !retry || self.meta.ts == 0 {
            self.meta.ts = self.shared.next_ts();
        }
    }

    /// Starts the retry of an attempt whose timestamp was `ts` (from
    /// [`Txn::timestamp`], possibly on another context): it keeps its
    /// wait-die age. A `ts` of 0 takes a new one.
    pub(crate) fn begin_at(&mut self, ts: u64) {
        self.meta.ts = ts;
        self.begin(true);
    }

    /// The wait-die timestamp of the current (or last) attempt.
    pub(crate) fn timestamp(&self) -> u64 {
        self.meta.ts
    }
    /// Runs a stored procedure to completion on this worker, retrying conflicts
    /// (with back-off) up to `max_retries` times. A convenience for tests,
    /// examples and loaders; everything else runs in the executor loop
    /// (`executor::run`).
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

fn fixed_keys_error(t: &Table, what: &str) -> Abort {
    Abort::Failed(Error::Config(format!(
        "{what} on table '{}', whose key set is fixed after load (TableDef::with_fixed_keys)",
        t.name
    )))
}
