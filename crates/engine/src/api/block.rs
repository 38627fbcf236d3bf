//! Statements and interactive transactions (blocks).
//!
//! A [`Statement`] is work on rows that is not a catalog procedure: a
//! compiled SQL statement with its parameters bound, say. Outside a block it
//! runs as a transaction of its own ([`Client::run_async`]), queued and
//! retried as a call is.
//!
//! A [`Block`] is an interactive transaction: its client hands it one
//! statement (a call or a [`Statement`]) at a time, and every statement runs
//! in the block's one transaction. On the executor a block is a request
//! whose procedure awaits its client's next operation ([`BlockOp`]): the
//! executor keeps it in a slot of its own (`ClusterOptions::blocks`, from
//! [`super::Options::blocks_per_worker`]), parked while the client thinks
//! ([`crate::proc::Suspend::Client`]); the client's operation sets
//! [`BlockShared::handed`] and wakes the executor. The block begins at its
//! first statement, on that statement's home island, and reaches other
//! islands as procedures do (two-phase commit at its end when it touched
//! them).
//!
//! Conflicts: the engine cannot replay a client's block, so a block is never
//! retried. A statement that runs into a local row's lock before it did
//! anything ([`Txn::footprint`] unchanged) waits for the row and runs again,
//! up to [`super::Options::deadlock_timeout`] ([`CallError::Deadlock`]).
//! Any other conflict, of a statement or of the commit, aborts the block
//! with [`CallError::Serialization`], and so does a statement's own error
//! (with that error). An aborted block refuses every later statement with
//! the error that aborted it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use super::catalog::ProcFuture;
use super::client::Client;
use super::deployment::{CallReq, CancelFlag, Inner};
use super::value::{Args, Row, Value};
use super::CallError;
use crate::proc::Suspend;
use crate::storage::TableId;
use crate::txn::{LockWait, Txn};
use crate::{Abort, AbortReason, Error};

/// A statement the engine runs inside a transaction: a compiled SQL statement
/// with its parameters bound, or anything else that works on rows. Its rows
/// go to `out`. It may be run more than once (a retried transaction, a
/// statement that waited for a row lock in a block), so it must not keep
/// state of its own between runs.
pub trait Statement: Send + Sync + 'static {
    fn run<'a>(&'a self, tx: &'a mut Txn, out: &'a mut Vec<Row>) -> ProcFuture<'a>;

    /// What errors call it (where a call's errors name its procedure).
    fn name(&self) -> &str {
        "statement"
    }

    /// The SQL text and bound parameters that rebuild this statement in
    /// another process of the deployment, through the compiler installed
    /// there ([`super::Deployment::set_statement_compiler`]). Run alone
    /// with its home on an island of another process, a statement is
    /// forwarded there only if it has them; `None` (the default): it fails
    /// with [`CallError::Elsewhere`].
    fn source(&self) -> Option<(&str, &[Value])> {
        None
    }

    /// Rows its last run affected (a command tag's count): what the home
    /// of a forwarded statement sends back beside its rows. 0 by default.
    fn affected(&self) -> u64 {
        0
    }

    /// It was forwarded, and its copy at its home affected `n` rows: what
    /// [`Statement::affected`] answers from now on. Nothing by default.
    fn set_affected(&self, _n: u64) {}
}

/// What a statement of a block runs.
pub(crate) enum What {
    Proc { proc: u32, args: Args },
    Stmt(Arc<dyn Statement>),
}

type Reply = oneshot::Sender<Result<Vec<Row>, CallError>>;

/// An operation a block's client hands its executor.
pub(crate) enum BlockOp {
    Statement {
        what: What,
        cancel: Option<CancelFlag>,
        reply: Reply,
    },
    Commit {
        reply: Reply,
    },
    /// `reply` is `None` for a block dropped without an ending.
    Rollback {
        reply: Option<Reply>,
    },
}

/// What the client and the executor of a block share.
pub(crate) struct BlockShared {
    /// The mailbox (executor) the block runs on.
    pub(crate) mailbox: usize,
    /// An operation waits in `state.op` for the executor.
    handed: AtomicBool,
    state: Mutex<BlockState>,
}

struct BlockState {
    op: Option<BlockOp>,
    /// Why later operations are refused: the block ended or failed.
    refused: Option<CallError>,
    /// The block left its executor (counted out of its mailbox's blocks).
    closed: bool,
}

impl BlockShared {
    fn lock(&self) -> MutexGuard<'_, BlockState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `op` to the executor, unless the block ended (then its error).
    fn hand(&self, inner: &Inner, op: BlockOp) -> Result<(), CallError> {
        {
            let mut st = self.lock();
            if let Some(e) = &st.refused {
                return Err(e.clone());
            }
            // An operation still there was never taken (its future was
            // dropped): it is replaced, its caller gone.
            st.op = Some(op);
            self.handed.store(true, Ordering::Release);
        }
        inner.mailboxes[self.mailbox].kick();
        Ok(())
    }

    /// Takes the operation handed, if any (the executor's side).
    fn take(&self) -> Option<BlockOp> {
        if !self.handed.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.lock().op.take()
    }

    /// Later operations are refused with `e` (the first reason stands).
    fn refuse(&self, e: CallError) {
        let mut st = self.lock();
        st.refused.get_or_insert(e);
    }

    /// The block left its executor, or never reached one: later operations
    /// are refused (with `e` unless a reason was given before), one handed
    /// and not taken is answered so, and the block no longer counts against
    /// its mailbox's limit. Once only.
    pub(crate) fn close(&self, inner: &Inner, e: CallError) {
        let op = {
            let mut st = self.lock();
            if st.closed {
                return;
            }
            st.closed = true;
            let e = st.refused.get_or_insert(e).clone();
            st.op.take().map(|op| (op, e))
        };
        if let Some((op, e)) = op {
            let reply = match op {
                BlockOp::Statement { reply, .. } | BlockOp::Commit { reply } => Some(reply),
                BlockOp::Rollback { reply } => reply,
            };
            if let Some(r) = reply {
                let _ = r.send(Err(e));
            }
        }
        inner.mailboxes[self.mailbox].block_closed();
    }

    /// Whether an operation waits for the executor (an atomic load).
    pub(crate) fn is_handed(&self) -> bool {
        self.handed.load(Ordering::Acquire)
    }

    fn refused(&self) -> bool {
        self.lock().refused.is_some()
    }
}

/// A block as its executor holds it (in its [`CallReq`]): dropped with the
/// request (the executor ended it, or left), it closes the block.
pub(crate) struct BlockRun {
    pub(crate) shared: Arc<BlockShared>,
    pub(crate) inner: Arc<Inner>,
}

impl Drop for BlockRun {
    fn drop(&mut self) {
        self.shared.close(&self.inner, self.inner.closed_error());
    }
}

/// Who a block's current operation is, for the errors that name it.
pub(crate) enum Who {
    Proc(u32),
    Stmt(Arc<dyn Statement>),
    Commit,
    Rollback,
}

impl Who {
    pub(crate) fn name(&self, inner: &Inner) -> String {
        match self {
            Who::Proc(p) => inner.catalog.procs[*p as usize].name.clone(),
            Who::Stmt(s) => s.name().to_string(),
            Who::Commit => "COMMIT".into(),
            Who::Rollback => "ROLLBACK".into(),
        }
    }
}

/// The executor's side of a block: what a block request's `run` awaits.
/// The current operation's reply waits in `req.current` while it runs, so
/// that an ending the executor reports (a commit, a panic, a conflict at
/// commit) answers it.
pub(crate) mod serve {
    use super::*;

    /// The abort of a block whose statement failed (the statement was
    /// answered with its error).
    pub(crate) const FAILED: &str = "a statement of the block failed";
    /// The abort of a block its client rolled back.
    pub(crate) const ROLLBACK: &str = "rolled back by its client";

    /// Why a statement of a block stopped without rows.
    enum Ended {
        Abort(Abort),
        Canceled,
        Deadlock { waited_ms: u64 },
    }

    /// Runs the block of `req` on `tx`: its client's operations, one after
    /// another, until a commit (`Ok`), a rollback or a failure (`Err`).
    pub(crate) async fn block(
        inner: &Inner,
        tx: &mut Txn,
        req: &CallReq,
        b: &BlockShared,
    ) -> Result<(), Abort> {
        loop {
            let op = NextOp {
                shared: b,
                wait: &req.wait,
            }
            .await;
            let (what, cancel, reply) = match op {
                BlockOp::Statement {
                    what,
                    cancel,
                    reply,
                } => (what, cancel, reply),
                BlockOp::Commit { reply } => {
                    *req.current.borrow_mut() = Some((Some(reply), Who::Commit));
                    return Ok(());
                }
                BlockOp::Rollback { reply } => {
                    *req.current.borrow_mut() = Some((reply, Who::Rollback));
                    return Err(Abort::User(ROLLBACK));
                }
            };
            let who = match &what {
                What::Proc { proc, .. } => Who::Proc(*proc),
                What::Stmt(s) => Who::Stmt(Arc::clone(s)),
            };
            *req.current.borrow_mut() = Some((Some(reply), who));
            let r = statement(inner, tx, &req.wait, &what, cancel.as_ref()).await;
            let Some((Some(reply), who)) = req.current.borrow_mut().take() else {
                // Only the statement's own answer takes it.
                continue;
            };
            let e = match r {
                Ok(rows) => {
                    let _ = reply.send(Ok(rows));
                    continue;
                }
                Err(ended) => ended,
            };
            let procedure = who.name(inner);
            let (err, abort) = match e {
                Ended::Canceled => (CallError::Canceled { procedure }, None),
                Ended::Deadlock { waited_ms } => (CallError::Deadlock { waited_ms }, None),
                Ended::Abort(Abort::User(why)) => (
                    CallError::Rollback {
                        procedure,
                        why: why.to_string(),
                    },
                    None,
                ),
                Ended::Abort(Abort::Conflict(reason)) => (
                    CallError::Serialization {
                        procedure,
                        attempts: 1,
                        last: reason.to_string(),
                    },
                    None,
                ),
                Ended::Abort(Abort::Failed(Error::OutOfRange(why))) => {
                    (CallError::OutOfRange { procedure, why }, None)
                }
                // A dead log stops the deployment: the run ends on it.
                Ended::Abort(Abort::Failed(e @ Error::LogFailed(_))) => {
                    (CallError::Stopped(e.to_string()), Some(Abort::Failed(e)))
                }
                Ended::Abort(Abort::Failed(e)) => (
                    CallError::Failed {
                        procedure,
                        error: e.to_string(),
                    },
                    None,
                ),
            };
            b.refuse(err.clone());
            let _ = reply.send(Err(err));
            return Err(abort.unwrap_or(Abort::User(FAILED)));
        }
    }

    /// Runs one statement of a block. One that runs into a local row's lock
    /// before it changed anything waits for the row (suspended as
    /// [`Suspend::Lock`]) and runs again, until the deadlock timeout.
    async fn statement(
        inner: &Inner,
        tx: &mut Txn,
        wait: &Cell<Option<Suspend>>,
        what: &What,
        cancel: Option<&CancelFlag>,
    ) -> Result<Vec<Row>, Ended> {
        let canceled = || cancel.is_some_and(CancelFlag::is_canceled);
        let mut out = Vec::new();
        let start = tx.footprint();
        let mut waiting_since: Option<Instant> = None;
        loop {
            if canceled() {
                return Err(Ended::Canceled);
            }
            tx.clear_conflict();
            out.clear();
            let r = match what {
                What::Proc { proc, args } => {
                    let def = &inner.catalog.procs[*proc as usize];
                    match (def.body)(&mut *tx, args, &mut out).await {
                        Ok(()) => def.check_rows(&out).map_err(|why| {
                            Abort::Failed(Error::Config(format!("procedure {}: {why}", def.name)))
                        }),
                        Err(e) => Err(e),
                    }
                }
                What::Stmt(s) => s.run(&mut *tx, &mut out).await,
            };
            match r {
                Ok(()) if canceled() => return Err(Ended::Canceled),
                Ok(()) => return Ok(out),
                Err(Abort::Conflict(AbortReason::LockConflict)) if tx.footprint() == start => {
                    let Some(w) = tx.conflict_row() else {
                        return Err(Ended::Abort(Abort::Conflict(AbortReason::LockConflict)));
                    };
                    let since = *waiting_since.get_or_insert_with(Instant::now);
                    let waited = since.elapsed();
                    if waited >= inner.deadlock_timeout {
                        return Err(Ended::Deadlock {
                            waited_ms: waited.as_millis() as u64,
                        });
                    }
                    LockPause {
                        wait,
                        w,
                        paused: false,
                    }
                    .await;
                }
                Err(e) => return Err(Ended::Abort(e)),
            }
        }
    }

    /// Waits for the client's next operation: `Pending` (suspended as
    /// [`Suspend::Client`]) until one is handed.
    struct NextOp<'a> {
        shared: &'a BlockShared,
        wait: &'a Cell<Option<Suspend>>,
    }

    impl Future for NextOp<'_> {
        type Output = BlockOp;

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<BlockOp> {
            match self.shared.take() {
                Some(op) => Poll::Ready(op),
                None => {
                    self.wait.set(Some(Suspend::Client));
                    Poll::Pending
                }
            }
        }
    }

    /// Suspends once, as waiting for the lock of `w`.
    struct LockPause<'a> {
        wait: &'a Cell<Option<Suspend>>,
        w: LockWait,
        paused: bool,
    }

    impl Future for LockPause<'_> {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if self.paused {
                return Poll::Ready(());
            }
            self.paused = true;
            self.wait.set(Some(Suspend::Lock(self.w)));
            Poll::Pending
        }
    }
}

/// An interactive transaction: each statement runs in the one transaction,
/// which lives at the home island of its first statement (and reaches other
/// islands as procedures do). `Send`; dropping it rolls back.
///
/// A statement's rows come back as soon as it ran; [`Block::commit`] is
/// answered once the commit is durable (in `sync` mode), like a call. Any
/// failed statement (its own error, a conflict, a lock wait past the
/// deadlock timeout, a cancel) aborts the whole block at once, releasing its
/// locks: [`Block::is_aborted`] is then true, and every later statement is
/// refused with the error that aborted it. A block whose client stays away
/// longer than the participants' idle timer (1 s) after touching another
/// island loses its branch there, and fails at the next statement that
/// reaches that island or at its commit ([`CallError::Serialization`]):
/// it never commits in part. When the deployment shuts down, open blocks
/// are rolled back and their next operation answers
/// [`CallError::ShutDown`].
///
/// Each executor keeps at most [`super::Options::blocks_per_worker`] blocks
/// open, in slots of their own beside its ordinary calls (which idle blocks
/// therefore never starve); a block that would exceed that on every worker
/// of its home island fails to begin with [`CallError::TooManyBlocks`].
pub struct Block {
    inner: Arc<Inner>,
    /// Set once the first statement began the block on an executor.
    shared: Option<Arc<BlockShared>>,
    /// Set once the first statement began the block on an island of
    /// another process, which runs it (see `forward.rs`).
    remote: Option<Remote>,
    /// The mailbox its first statement tries before the others of its
    /// island (a block hosted for another process runs on the executor
    /// that forwards its answers, so they leave in the round they come).
    prefer: Option<usize>,
    /// Why the block is dead, as this client knows it.
    failed: Option<CallError>,
    /// A statement was handed and its answer not yet received: if its
    /// future was dropped, the block cannot know what it did.
    in_flight: bool,
    /// Committed or rolled back: nothing to roll back on drop.
    ended: bool,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("begun", &self.begun())
            .field("remote", &self.remote.is_some())
            .field("aborted", &self.is_aborted())
            .finish()
    }
}

impl Client {
    /// An interactive transaction (a block): see [`Block`]. Nothing happens
    /// until its first statement.
    pub fn begin(&self) -> Block {
        Block {
            inner: Arc::clone(&self.inner),
            shared: None,
            remote: None,
            prefer: None,
            failed: None,
            in_flight: false,
            ended: false,
        }
    }

    /// The island that holds `key` of `table` (`None`: replicated, on every
    /// island; or no such table).
    pub fn island_of(&self, table: TableId, key: u64) -> Option<usize> {
        use crate::route::Router;
        self.inner.router.island_of(table, key).map(usize::from)
    }
}

impl Block {
    /// Calls procedure `name` with `args` inside the block: its rows once
    /// it ran. The block begins here if this is its first statement, on the
    /// procedure's home island.
    pub fn call(
        &mut self,
        name: &str,
        args: Vec<Value>,
        cancel: Option<&CancelFlag>,
    ) -> impl Future<Output = Result<Vec<Row>, CallError>> + Send + '_ {
        let checked = match self.inner.catalog.lookup(name) {
            None => Err(CallError::UnknownProcedure(name.to_string())),
            Some((proc, def)) => def.check_args(&args).map(|()| {
                let home = self.inner.home_island(def, &args);
                (
                    What::Proc {
                        proc,
                        args: Args(args),
                    },
                    home,
                )
            }),
        };
        let cancel = cancel.cloned();
        async move {
            let (what, home) = checked?;
            self.statement(what, home, cancel).await
        }
    }

    /// Runs `stmt` inside the block: its rows once it ran. The block begins
    /// here if this is its first statement, on island `home` (`None`: any).
    pub fn run(
        &mut self,
        stmt: Arc<dyn Statement>,
        home: Option<usize>,
        cancel: Option<&CancelFlag>,
    ) -> impl Future<Output = Result<Vec<Row>, CallError>> + Send + '_ {
        let cancel = cancel.cloned();
        async move { self.statement(What::Stmt(stmt), home, cancel).await }
    }

    /// Commits; answered once durable (`sync`). An aborted block answers
    /// its abort (and is rolled back); a block without a statement commits
    /// nothing.
    // Written out, so the signature promises `Send`.
    #[allow(clippy::manual_async_fn)]
    pub fn commit(mut self) -> impl Future<Output = Result<(), CallError>> + Send {
        async move {
            match self.hand_commit()? {
                None => Ok(()),
                Some(rx) => match rx.await {
                    Ok(r) => r.map(|_| ()),
                    Err(_) => Err(self.inner.closed_error()),
                },
            }
        }
    }

    /// Rolls back: every lock the block holds is released at once. A block
    /// already aborted answers `Ok` (there is nothing left to undo).
    #[allow(clippy::manual_async_fn)]
    pub fn rollback(mut self) -> impl Future<Output = Result<(), CallError>> + Send {
        async move {
            match self.hand_rollback()? {
                None => Ok(()),
                Some(rx) => match rx.await {
                    Ok(r) => r.map(|_| ()),
                    Err(_) => Err(self.inner.closed_error()),
                },
            }
        }
    }

    /// Hands the commit: the receiver of its answer (`None`: nothing to
    /// commit).
    pub(crate) fn hand_commit(&mut self) -> Result<Option<Receiver>, CallError> {
        self.check_alive()?;
        self.end();
        if !self.begun() {
            return Ok(None);
        }
        let (reply, rx) = oneshot::channel();
        self.hand(BlockOp::Commit { reply })?;
        Ok(Some(rx))
    }

    /// Hands the rollback: the receiver of its answer (`None`: nothing to
    /// wait for, the block never began or had ended).
    pub(crate) fn hand_rollback(&mut self) -> Result<Option<Receiver>, CallError> {
        self.end();
        if !self.begun() {
            return Ok(None);
        }
        if self.failed.is_some() || self.shared.as_ref().is_some_and(|s| s.refused()) {
            // Ended on its executor already, or about to be (a dropped
            // statement): hand the rollback in case it is not.
            let _ = self.hand(BlockOp::Rollback { reply: None });
            return Ok(None);
        }
        let (reply, rx) = oneshot::channel();
        self.hand(BlockOp::Rollback { reply: Some(reply) })?;
        Ok(Some(rx))
    }

    /// Whether the block is dead (a statement failed, a conflict, a
    /// timeout, a shutdown): every later statement is refused; only
    /// rollback (or commit, which answers the abort) ends it.
    pub fn is_aborted(&self) -> bool {
        self.failed.is_some() || self.in_flight || self.shared.as_ref().is_some_and(|s| s.refused())
    }

    /// The block's ending was handed (or there is nothing to end): dropping
    /// it hands nothing more.
    fn end(&mut self) {
        self.ended = true;
    }

    /// Its first statement tries the executor of `mailbox` first, if that
    /// is one of its home island's.
    pub(crate) fn prefer(&mut self, mailbox: usize) {
        self.prefer = Some(mailbox);
    }

    /// Whether its first statement began it, here or in another process.
    fn begun(&self) -> bool {
        self.shared.is_some() || self.remote.is_some()
    }

    /// Hands `op` to the block's executor, here or in another process.
    fn hand(&self, op: BlockOp) -> Result<(), CallError> {
        match (&self.shared, &self.remote) {
            (Some(s), _) => s.hand(&self.inner, op),
            (None, Some(r)) => r.hand(&self.inner, op, false),
            (None, None) => Err(CallError::Failed {
                procedure: "block".into(),
                error: "the block has not begun".into(),
            }),
        }
    }

    /// Refuses a statement on a dead block, with the reason it died.
    fn check_alive(&mut self) -> Result<(), CallError> {
        if self.in_flight && self.failed.is_none() {
            // A statement's future was dropped before its answer: what it
            // did is unknown, so the block cannot go on.
            let e = CallError::Canceled {
                procedure: "statement".into(),
            };
            self.failed = Some(e.clone());
            if let Some(s) = &self.shared {
                s.refuse(e);
            }
            if self.begun() {
                let _ = self.hand(BlockOp::Rollback { reply: None });
            }
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Some(s) = &self.shared {
            if let Some(e) = s.lock().refused.clone() {
                self.failed = Some(e.clone());
                return Err(e);
            }
        }
        if !self.inner.open.load(Ordering::Acquire) {
            let e = self.inner.closed_error();
            self.failed = Some(e.clone());
            return Err(e);
        }
        Ok(())
    }

    async fn statement(
        &mut self,
        what: What,
        home: Option<usize>,
        cancel: Option<CancelFlag>,
    ) -> Result<Vec<Row>, CallError> {
        let rx = self.hand_statement(what, home, cancel)?;
        self.in_flight = true;
        let r = match rx.await {
            Ok(r) => r,
            Err(_) => Err(self.inner.closed_error()),
        };
        self.in_flight = false;
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// Hands a statement (beginning the block with it on island `home`,
    /// `None`: any, if it is the first): the receiver of its answer.
    pub(crate) fn hand_statement(
        &mut self,
        what: What,
        home: Option<usize>,
        cancel: Option<CancelFlag>,
    ) -> Result<Receiver, CallError> {
        self.check_alive()?;
        let (reply, rx) = oneshot::channel();
        let op = BlockOp::Statement {
            what,
            cancel,
            reply,
        };
        let handed = match self.begun() {
            true => self.hand(op),
            false => self.start(op, home),
        };
        if let Err(e) = handed {
            self.failed = Some(e.clone());
            return Err(e);
        }
        Ok(rx)
    }

    /// Begins the block with its first operation on an executor of island
    /// `home` (`None`: any) that has room for one more block; on an island
    /// of another process, that process's executor runs it (when `op` can
    /// travel there).
    fn start(&mut self, op: BlockOp, home: Option<usize>) -> Result<(), CallError> {
        let inner = &self.inner;
        let n = super::client::next_spread();
        let island = match inner.island_for(home, n, "statement") {
            Ok(island) => island,
            Err(CallError::Elsewhere { island }) if inner.forwards && op.travels() => {
                if inner.mailboxes[0].island_down(island) {
                    return Err(CallError::IslandDown {
                        procedure: "statement".into(),
                        island: island as u16,
                    });
                }
                let r = Remote {
                    id: crate::wal::new_deployment_id() as u64,
                    mailbox: n % inner.mailboxes.len(),
                    island,
                };
                self.remote = Some(r);
                return r.hand(inner, op, true);
            }
            Err(e) => return Err(e),
        };
        let (lo, hi) = (inner.first[island], inner.first[island + 1]);
        let workers = hi - lo;
        let preferred = self.prefer.filter(|m| (lo..hi).contains(m));
        let Some(mailbox) = preferred
            .into_iter()
            .chain((0..workers).map(|k| lo + (n + k) % workers))
            .find(|&m| inner.mailboxes[m].reserve_block(inner.blocks_per_worker))
        else {
            return Err(CallError::TooManyBlocks {
                island,
                limit: inner.blocks_per_worker,
            });
        };
        let shared = Arc::new(BlockShared {
            mailbox,
            handed: AtomicBool::new(true),
            state: Mutex::new(BlockState {
                op: Some(op),
                refused: None,
                closed: false,
            }),
        });
        self.shared = Some(Arc::clone(&shared));
        inner.push_block(shared);
        Ok(())
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.ended || !self.begun() {
            return;
        }
        let _ = self.hand(BlockOp::Rollback { reply: None });
    }
}

type Receiver = oneshot::Receiver<Result<Vec<Row>, CallError>>;

/// A block whose home island runs in another process: its operations go to
/// this process's executor of mailbox `mailbox`, which forwards them, in
/// order, to the one executor of island `island` that runs the block there
/// (see `forward.rs`). `id` names it among that executor's blocks.
#[derive(Clone, Copy, Debug)]
struct Remote {
    id: u64,
    mailbox: usize,
    island: usize,
}

/// Which operation of a forwarded block a [`super::deployment::Call`]
/// carries (its statement is the call's procedure or statement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Its first statement, which begins it.
    Begin,
    Run,
    Commit,
    Rollback,
}

impl BlockOp {
    /// Whether it can be forwarded to another process: a statement needs
    /// a source ([`Statement::source`]).
    fn travels(&self) -> bool {
        match self {
            BlockOp::Statement {
                what: What::Stmt(s),
                ..
            } => s.source().is_some(),
            _ => true,
        }
    }
}

impl Remote {
    /// Queues `op` (`first`: the block's first statement) for the
    /// forwarding executor. Its answer goes to the op's reply; a rollback
    /// nobody waits for is sent all the same.
    fn hand(&self, inner: &Inner, op: BlockOp, first: bool) -> Result<(), CallError> {
        if !op.travels() {
            return Err(CallError::Elsewhere {
                island: self.island,
            });
        }
        let run = if first { Step::Begin } else { Step::Run };
        let (proc, args, stmt, step, reply, cancel) = match op {
            BlockOp::Statement {
                what: What::Proc { proc, args },
                cancel,
                reply,
            } => (proc, args.0, None, run, reply, cancel),
            BlockOp::Statement {
                what: What::Stmt(s),
                cancel,
                reply,
            } => (0, Vec::new(), Some(s), run, reply, cancel),
            BlockOp::Commit { reply } => (0, Vec::new(), None, Step::Commit, reply, None),
            BlockOp::Rollback { reply } => {
                // Nobody waits: the answer goes to a receiver dropped now.
                let reply = reply.unwrap_or_else(|| oneshot::channel().0);
                (0, Vec::new(), None, Step::Rollback, reply, None)
            }
        };
        let call = super::deployment::Call {
            proc,
            args,
            stmt,
            reply: super::deployment::Reply::Caller(reply),
            cancel,
            forward: Some(self.island),
            block: Some((self.id, step)),
        };
        // The forwards queue is bounded; an operation of a block must not be
        // lost, so a full queue is waited out (asleep) up to the forward
        // timeout, then refused.
        inner.forward(self.mailbox, call, self.island)
    }
}

impl CallError {
    /// Whether this error aborted a transaction block because of a
    /// conflict the client may retry (the whole block): SQLSTATE 40001 or 40P01.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CallError::Serialization { .. } | CallError::Deadlock { .. }
        )
    }
}

/// A statement's state while a block request runs it (`CallReq`'s fields):
/// what it suspended for, and the reply of the operation under way.
pub(crate) type Current = RefCell<Option<(Option<Reply>, Who)>>;
