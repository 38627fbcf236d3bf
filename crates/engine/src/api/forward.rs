//! Calls forwarded between the processes of a deployment: a call of a
//! procedure, or a statement run alone, homed on an island that another
//! process runs goes there over the island transport, and its answer comes
//! back.
//!
//! The caller's side: [`super::Client`] puts such a call in the `forwards`
//! queue of one of this process's mailboxes (spread as calls are); that
//! mailbox's executor, in its next round ([`Port::round`]), sends it as a
//! CALL frame to an executor of the home island and keeps it in `pending`
//! under an id of its own until the CALL_REPLY with that id comes back to it
//! (replies go to the endpoint that sent the CALL). A canceled call (its
//! [`CancelFlag`] set, or its future dropped) sends CALL_CANCEL; a call whose
//! home island goes down fails with [`CallError::IslandDown`] in the round
//! that sees it down, and a new one fails at once ([`super::Client`]). A
//! call whose answer does not come within the port's timeout
//! ([`crate::executor::ClusterOptions::forward_timeout`]) while its island
//! stays up (a CALL or CALL_REPLY lost: the engine tolerates lost batches)
//! fails with [`CallError::OutcomeUnknown`]: it may have committed at its
//! home, so it is not an error its caller may retry blindly. The deadline is
//! checked in the same scan as cancels, every [`SCAN_US`] while calls are in
//! flight, over the calls in flight only.
//!
//! Statements: a [`Statement`] that has a source ([`Statement::source`]:
//! its SQL text and bound parameters) goes as a STMT frame; the home
//! rebuilds it with the deployment's [`StatementCompiler`] (installed by the
//! server) and runs it as a call, and its answer carries, after its rows,
//! the count of rows it affected, which the caller's statement is told
//! ([`Statement::set_affected`]) for its command tag.
//!
//! The home's side: the executor that receives a CALL pushes it into its own
//! mailbox's call queue, as a local caller would, with a cancel flag that a
//! CALL_CANCEL sets: it then runs, retries, cancels and fails exactly as a
//! local call. Its answer goes into the mailbox's `answers` queue (see
//! [`super::deployment::Reply`]), and the next round sends it back.
//!
//! Blocks: a block whose home island runs in another process runs there as
//! a hosted block (see `block.rs`'s `Remote`), one operation at a time, on
//! the executor its first operation reached. Its home holds its locks and
//! slot until it ends, so a caller that goes silent must not keep them: a
//! block lives on a lease. The forwarding executor renews the leases of all
//! the blocks it has open every period P ([`lease_period`]: a tenth of the
//! forward timeout, between 100 ms and 1 s), with one RENEW frame per
//! executor that hosts some; the host rolls back a block (as when its
//! caller's process goes down) that no RENEW and no operation touched for
//! [`LEASE_PERIODS`] of the caller's periods. A block that only idles, its
//! caller alive, keeps its lease; one whose ROLLBACK was lost, or whose
//! caller's messages stop coming while its process still seems up, is
//! rolled back within the lease. A later operation of a lapsed block finds
//! none and fails as any block its home no longer holds.
//!
//! Nothing here is on the path of a call that is not forwarded: a process
//! that runs every island has no port, and a port's round looks at two
//! empty queues and two empty maps.
//!
//! Ids: each port numbers its calls from a random start, so a reply that a
//! previous incarnation of this process was owed, delivered to this one,
//! matches no call (and a call whose island went down is forgotten, so a
//! late reply to it matches nothing either).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::block::{self, Block, Statement, Step};
use super::client::Client;
use super::deployment::{Answer, Call, CancelFlag, Inner, Reply};
use super::value::{Args, Value};
use super::CallError;
use crate::coord::IslandSet;
use crate::executor::forward::{ForwardPort, Forwarding, Frames};
use crate::route::IslandId;
use crate::transport::wire::{self, ErrorParts, Frame};
use crate::transport::{Endpoint, MAX_FRAME};

/// How often (µs of the executor's clock) a port looks for canceled calls
/// and for calls past their deadline.
const SCAN_US: u64 = 100;

/// How many of its caller's renewal periods a hosted block lives without a
/// renewal or an operation before its home rolls it back.
const LEASE_PERIODS: u64 = 5;

/// How often (µs) a port looks for hosted blocks whose lease lapsed.
const LEASE_SCAN_US: u64 = 10_000;

/// The period at which a port renews the leases of the blocks it forwards,
/// for a forward timeout of `timeout`: a tenth of it, between 100 ms and 1 s
/// (1 s, and leases of 5 s, by default).
fn lease_period(timeout: Duration) -> Duration {
    (timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Builds, in the process of a statement's home island, the statement that
/// another process forwarded as its SQL text and bound parameters
/// ([`Statement::source`]); installed with
/// [`super::Deployment::set_statement_compiler`] (a server installs its
/// own). Its error answers the statement's caller.
pub type StatementCompiler =
    Arc<dyn Fn(&str, &[Value]) -> Result<Arc<dyn Statement>, CallError> + Send + Sync>;

/// The deployment's [`Forwarding`]: made before the executors' cluster,
/// attached to the deployment once its mailboxes exist.
pub(crate) struct Forwarder {
    setup: OnceLock<Setup>,
}

struct Setup {
    inner: Arc<Inner>,
    /// Every island's executor endpoints, local or not.
    endpoints: Arc<Vec<Vec<Endpoint>>>,
}

impl Forwarder {
    pub(crate) fn new() -> Forwarder {
        Forwarder {
            setup: OnceLock::new(),
        }
    }

    /// Gives the forwarder the deployment it serves; before this, no
    /// executor gets a port (so it must come before the executors start).
    pub(crate) fn attach(&self, inner: Arc<Inner>, endpoints: Vec<Vec<Endpoint>>) {
        let _ = self.setup.set(Setup {
            inner,
            endpoints: Arc::new(endpoints),
        });
    }
}

impl Forwarding for Forwarder {
    fn port(&self, me: Endpoint, timeout: Duration) -> Option<Box<dyn ForwardPort>> {
        let s = self.setup.get()?;
        let (island, worker) = s
            .endpoints
            .iter()
            .enumerate()
            .find_map(|(i, eps)| Some((i, eps.iter().position(|&e| e == me)?)))?;
        let first = *s.inner.first.get(island)?;
        // The island has executors here (a remote island has none).
        if first + worker >= *s.inner.first.get(island + 1)? {
            return None;
        }
        let period_us = u64::try_from(lease_period(timeout).as_micros()).unwrap_or(u64::MAX);
        Some(Box::new(Port {
            inner: Arc::clone(&s.inner),
            island,
            mailbox: first + worker,
            endpoints: Arc::clone(&s.endpoints),
            next_id: random_start(),
            spread: worker,
            timeout_us: u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX),
            pending: HashMap::new(),
            running: HashMap::new(),
            backlog: VecDeque::new(),
            scan_at_us: 0,
            expired: Vec::new(),
            blocks: HashMap::new(),
            hosted: HashMap::new(),
            hosted_ops: 0,
            finished: Vec::new(),
            scratch: Vec::new(),
            period_us,
            renew_at_us: 0,
            lease_scan_at_us: 0,
            renewing: Vec::new(),
            renew_ids: Vec::new(),
            lapsed: Vec::new(),
        }))
    }
}

/// A random start for a port's call ids, leaving room below 2^64 for
/// more calls than a process ever makes.
fn random_start() -> u64 {
    (crate::wal::new_deployment_id() as u64) >> 1
}

/// What a forwarded call runs: a procedure of the catalog, a statement, or
/// the end of a forwarded block (named `COMMIT` or `ROLLBACK`).
#[derive(Clone)]
enum What {
    Proc(u32),
    Stmt(Arc<dyn Statement>),
    Named(&'static str),
}

/// A block that a caller of another process runs on this executor's
/// island (see `block.rs`'s `Remote`): the block, as a local client's.
struct Hosted {
    block: Block,
    /// The caller's island: its blocks are rolled back when it goes down.
    island: IslandId,
    /// The caller's process's incarnation when the block began here (0:
    /// unknown): a block of a later incarnation outlives a bounce.
    incarnation: u64,
    /// The operation under way (one at a time).
    op: Option<HostedOp>,
    /// A RENEW or an operation came since the last lease scan.
    touched: bool,
    /// The scan that last found it touched (the executor's clock).
    since_us: u64,
    /// How long it lives untouched: [`LEASE_PERIODS`] of its caller's
    /// renewal periods.
    lease_us: u64,
}

impl Drop for Hosted {
    /// A hosted block dropped with an operation under way (its caller's
    /// process went down, or this one stops): the operation is canceled, so
    /// that a statement waiting for a lock gives up now, and dropping the
    /// block then rolls it back, which frees its slot and its locks.
    fn drop(&mut self) {
        if let Some(op) = &self.op {
            op.cancel.cancel();
        }
    }
}

/// A hosted block's operation under way.
struct HostedOp {
    id: u64,
    rx: oneshot::Receiver<Answer>,
    /// A statement's, whose answer carries its count.
    what: Option<What>,
    cancel: CancelFlag,
    /// A commit or rollback: the block is forgotten once it is answered.
    ends: bool,
}

/// What a BLOCK frame asks of a hosted block, checked.
enum Work {
    Run(block::What),
    Commit,
    Rollback,
}

/// A hosted block's operation that finished: the caller's endpoint and
/// block, the operation's id, what it ran, whether it ended the block, and
/// its answer.
type Finished = ((Endpoint, u64), u64, Option<What>, bool, Answer);

/// A call this executor forwarded and waits the answer of.
struct Pending {
    reply: Reply,
    /// The executor it went to (where a cancel goes).
    to: Endpoint,
    cancel: Option<CancelFlag>,
    island: usize,
    what: What,
    cancel_sent: bool,
    /// When it was sent (the executor's clock): past `timeout_us` after,
    /// it fails with [`CallError::OutcomeUnknown`].
    sent_us: u64,
    /// The COMMIT of this forwarded block: if it expires, a ROLLBACK
    /// follows it, so that a block whose COMMIT was lost does not stay
    /// open at its home (one that committed there is past a rollback).
    commits: Option<u64>,
}

/// Where a CALL, STMT or BLOCK frame came from: the caller's island (as
/// the transport authenticated it) and its process's incarnation as the
/// transport knows it when the frame is handled (0: unknown).
#[derive(Clone, Copy)]
struct Origin {
    island: IslandId,
    incarnation: u64,
}

impl Origin {
    fn of(island: IslandId, out: &Frames<'_>) -> Origin {
        Origin {
            island,
            incarnation: out.transport().peer_incarnation(island),
        }
    }
}

/// A call of another process that this executor runs.
struct Running {
    cancel: CancelFlag,
    island: IslandId,
    /// The caller's process's incarnation when the call arrived (0:
    /// unknown).
    incarnation: u64,
    what: What,
}

/// One executor's forwarded calls (see the module documentation).
struct Port {
    inner: Arc<Inner>,
    /// Its executor's island.
    island: usize,
    /// Its executor's mailbox.
    mailbox: usize,
    endpoints: Arc<Vec<Vec<Endpoint>>>,
    next_id: u64,
    /// Spreads its calls over the home island's executors.
    spread: usize,
    /// How long a forwarded call waits for its answer
    /// ([`crate::executor::ClusterOptions::forward_timeout`]).
    timeout_us: u64,
    pending: HashMap<u64, Pending>,
    running: HashMap<(Endpoint, u64), Running>,
    /// Calls of other processes waiting for room in the mailbox's queue.
    backlog: VecDeque<Call>,
    /// The clock at which it next looks for canceled and late calls.
    scan_at_us: u64,
    /// The ids of the calls a scan found past their deadline (kept, so a
    /// scan allocates nothing once it has grown).
    expired: Vec<u64>,
    /// Blocks of this process that it forwards: by block id, the executor
    /// of the other process that runs each, and its island.
    blocks: HashMap<u64, (Endpoint, usize)>,
    /// Blocks of other processes that run on this island, by caller
    /// endpoint and block id.
    hosted: HashMap<(Endpoint, u64), Hosted>,
    /// Hosted blocks with an operation under way.
    hosted_ops: usize,
    /// Hosted operations a round found finished (kept, as `expired`).
    finished: Vec<Finished>,
    /// Where a frame is encoded before its size is checked.
    scratch: Vec<u8>,
    /// The lease period ([`lease_period`]) at which it renews the blocks it
    /// forwards, and which leases of blocks it hosts start with.
    period_us: u64,
    /// The clock at which it next renews the blocks it forwards.
    renew_at_us: u64,
    /// The clock at which it next looks for hosted blocks whose lease lapsed.
    lease_scan_at_us: u64,
    /// The blocks a renewal covers, by executor (kept, as `expired`).
    renewing: Vec<(Endpoint, u64)>,
    renew_ids: Vec<u64>,
    /// Hosted blocks a lease scan found lapsed (kept, as `expired`).
    lapsed: Vec<(Endpoint, u64)>,
}

impl Port {
    /// The name errors give to what a call runs.
    fn name(&self, what: &What) -> String {
        match what {
            What::Proc(proc) => self
                .inner
                .catalog
                .procs
                .get(*proc as usize)
                .map_or_else(|| format!("#{proc}"), |d| d.name.clone()),
            What::Stmt(s) => s.name().to_string(),
            What::Named(n) => n.to_string(),
        }
    }

    /// Sends `call` (homed on `call.forward`) to its island, or answers it
    /// at once if it cannot go.
    fn send_call(&mut self, call: Call, now_us: u64, down: IslandSet, out: &mut Frames<'_>) {
        let island = call.forward.unwrap_or_default();
        let mb = &self.inner.mailboxes[self.mailbox];
        let what = match (&call.stmt, call.block) {
            (_, Some((_, Step::Commit))) => What::Named("COMMIT"),
            (_, Some((_, Step::Rollback))) => What::Named("ROLLBACK"),
            (Some(s), _) => What::Stmt(Arc::clone(s)),
            (None, _) => What::Proc(call.proc),
        };
        let ends = matches!(call.block, Some((_, Step::Commit | Step::Rollback)));
        let targets = self.endpoints.get(island).map_or(&[][..], |e| &e[..]);
        if targets.is_empty() || down.contains(island as IslandId) {
            let e = CallError::IslandDown {
                procedure: self.name(&what),
                island: island as u16,
            };
            return call.reply.send(mb, Err(e));
        }
        if !ends
            && (call.cancel.as_ref().is_some_and(CancelFlag::is_canceled) || call.reply.is_closed())
        {
            // Canceled before it left: it never runs, as a local call
            // canceled in its queue. (A block's end goes all the same.)
            let e = CallError::Canceled {
                procedure: self.name(&what),
            };
            return call.reply.send(mb, Err(e));
        }
        // Every operation of a block goes to the executor its first went to.
        let pick = targets[self.spread % targets.len()];
        let to = match call.block {
            Some((b, _)) => self.blocks.entry(b).or_insert((pick, island)).0,
            None => pick,
        };
        let id = self.next_id;
        self.scratch.clear();
        let out_buf = &mut self.scratch;
        let encoded = match (call.block, &what) {
            (Some((b, Step::Commit)), _) => {
                wire::block(out_buf, b, id, false, wire::BlockAsk::Commit)
            }
            (Some((b, Step::Rollback)), _) => {
                wire::block(out_buf, b, id, false, wire::BlockAsk::Rollback)
            }
            (Some((b, step)), What::Proc(proc)) => {
                let ask = wire::BlockAsk::Call {
                    proc: *proc,
                    args: &call.args,
                };
                wire::block(out_buf, b, id, step == Step::Begin, ask)
            }
            (Some((b, step)), What::Stmt(s)) => match s.source() {
                Some((sql, params)) => {
                    let ask = wire::BlockAsk::Stmt { sql, params };
                    wire::block(out_buf, b, id, step == Step::Begin, ask)
                }
                None => return call.reply.send(mb, Err(CallError::Elsewhere { island })),
            },
            (None, What::Proc(proc)) => wire::call(out_buf, id, *proc, &call.args),
            (None, What::Stmt(s)) => match s.source() {
                Some((sql, params)) => wire::stmt(out_buf, id, sql, params),
                // `Client` forwards only statements with a source.
                None => return call.reply.send(mb, Err(CallError::Elsewhere { island })),
            },
            (_, What::Named(_)) => false,
        };
        if !encoded || self.scratch.len() > MAX_FRAME {
            let e = CallError::BadArguments {
                procedure: self.name(&what),
                why: format!(
                    "the arguments are too large to forward to island {island} (at most \
                     {MAX_FRAME} bytes and 65535 values)"
                ),
            };
            return call.reply.send(mb, Err(e));
        }
        self.spread = self.spread.wrapping_add(1);
        self.next_id = self.next_id.wrapping_add(1);
        if let (Some((b, _)), true) = (call.block, ends) {
            self.blocks.remove(&b);
        }
        let frame = &self.scratch;
        out.push(to, |b| b.extend_from_slice(frame));
        self.pending.insert(
            id,
            Pending {
                reply: call.reply,
                to,
                cancel: call.cancel,
                island,
                what,
                cancel_sent: false,
                sent_us: now_us,
                commits: match call.block {
                    Some((b, Step::Commit)) => Some(b),
                    _ => None,
                },
            },
        );
    }

    /// Sends the answer of call `id` back to `to`. The answer of a
    /// statement carries the count of rows it affected as one more row
    /// (see `transport/wire.rs`).
    fn answer(
        &mut self,
        to: Endpoint,
        id: u64,
        what: Option<&What>,
        r: Answer,
        out: &mut Frames<'_>,
    ) {
        self.scratch.clear();
        let fits = match r {
            Ok(mut rows) => {
                if let Some(What::Stmt(s)) = what {
                    let n = i64::try_from(s.affected()).unwrap_or(i64::MAX);
                    rows.push(vec![Value::Int(n)]);
                }
                wire::call_reply_rows(&mut self.scratch, id, &rows)
                    && self.scratch.len() <= MAX_FRAME
            }
            Err(e) => {
                error_parts(&e, |p| wire::call_reply_error(&mut self.scratch, id, p));
                self.scratch.len() <= MAX_FRAME
            }
        };
        if !fits {
            // Its transaction stands (it committed, or it failed); only its
            // answer is too large for a frame.
            let e = CallError::Failed {
                procedure: what.map_or_else(|| "call".to_string(), |w| self.name(w)),
                error: format!(
                    "its answer is larger than the {MAX_FRAME} bytes a call forwarded between \
                     processes may return (call it at its home island's server)"
                ),
            };
            self.scratch.clear();
            error_parts(&e, |p| wire::call_reply_error(&mut self.scratch, id, p));
        }
        let frame = &self.scratch;
        out.push(to, |b| b.extend_from_slice(frame));
    }

    /// A CALL or STMT from `from`: queued on this executor as a local call.
    fn on_call(&mut self, from: Endpoint, origin: Origin, id: u64, what: What, args: Vec<Value>) {
        let key = (from, id);
        if self.running.contains_key(&key) {
            // A copy: the call runs once.
            return;
        }
        let cancel = CancelFlag::new();
        let (proc, stmt) = match &what {
            What::Stmt(s) => (0, Some(Arc::clone(s))),
            What::Proc(proc) => (*proc, None),
            // Only procedures and statements come here: nothing to run.
            What::Named(_) => return,
        };
        self.running.insert(
            key,
            Running {
                cancel: cancel.clone(),
                island: origin.island,
                incarnation: origin.incarnation,
                what,
            },
        );
        let call = Call {
            proc,
            args,
            stmt,
            reply: Reply::Peer { to: from, id },
            cancel: Some(cancel),
            forward: None,
            block: None,
        };
        let mb = &self.inner.mailboxes[self.mailbox];
        if !self.inner.open.load(std::sync::atomic::Ordering::Acquire) {
            return call.reply.send(mb, Err(self.inner.closed_error()));
        }
        if !self.backlog.is_empty() {
            self.backlog.push_back(call);
        } else if let Err(call) = mb.queue.push(call) {
            self.backlog.push_back(call);
        }
    }

    /// A STMT: rebuilt by the deployment's statement compiler, then queued
    /// as a call; one that cannot be rebuilt is answered with why.
    fn on_stmt(
        &mut self,
        from: Endpoint,
        origin: Origin,
        id: u64,
        sql: &str,
        params: Result<Vec<Value>, wire::WireError>,
        out: &mut Frames<'_>,
    ) {
        match self.compile(sql, params) {
            Ok(stmt) => self.on_call(from, origin, id, What::Stmt(stmt), Vec::new()),
            Err(e) => self.answer(from, id, None, Err(e), out),
        }
    }

    /// Operation `id` of block `block` of `from` (see `block.rs`'s
    /// `Remote`): handed to the block, begun here by its first statement;
    /// its answer goes back once the block's executor gives it
    /// ([`Port::poll_hosted`]).
    #[allow(clippy::too_many_arguments)]
    fn on_block(
        &mut self,
        from: Endpoint,
        origin: Origin,
        block_id: u64,
        id: u64,
        begins: bool,
        op: wire::BlockOp<'_>,
        out: &mut Frames<'_>,
    ) {
        let key = (from, block_id);
        let known = self.hosted.get(&key).map(|h| h.op.is_some());
        let rollback = matches!(op, wire::BlockOp::Rollback);
        let refused = match known {
            Some(true) if !rollback => Some(CallError::Failed {
                procedure: "block".into(),
                error: "an operation of the block is still running".into(),
            }),
            None if !begins && !rollback => Some(no_such_block(self.island)),
            Some(_) if begins => Some(CallError::Failed {
                procedure: "block".into(),
                error: "the block had begun already".into(),
            }),
            _ => None,
        };
        if let Some(e) = refused {
            return self.answer(from, id, None, Err(e), out);
        }
        let work = match op {
            wire::BlockOp::Call { proc, n, args } => {
                match self.inner.catalog.procs.get(proc as usize) {
                    None => Err(CallError::UnknownProcedure(format!("#{proc}"))),
                    Some(def) => match wire::call_args(n, args) {
                        Ok(args) => def.check_args(&args).map(|()| {
                            (
                                Some(What::Proc(proc)),
                                Work::Run(block::What::Proc {
                                    proc,
                                    args: Args(args),
                                }),
                            )
                        }),
                        Err(e) => Err(CallError::BadArguments {
                            procedure: def.name.clone(),
                            why: format!("forwarded arguments: {e}"),
                        }),
                    },
                }
            }
            wire::BlockOp::Stmt { sql, n, params } => {
                self.compile(sql, wire::call_args(n, params)).map(|s| {
                    (
                        Some(What::Stmt(Arc::clone(&s))),
                        Work::Run(block::What::Stmt(s)),
                    )
                })
            }
            wire::BlockOp::Commit => Ok((None, Work::Commit)),
            wire::BlockOp::Rollback => Ok((None, Work::Rollback)),
        };
        let (what, work) = match work {
            Ok(w) => w,
            Err(e) => {
                // A failed statement aborts its block, as at a local
                // client: dropping the block rolls it back, and a later
                // operation finds no block.
                self.hosted.remove(&key);
                return self.answer(from, id, None, Err(e), out);
            }
        };
        let home = Some(self.island);
        let inner = &self.inner;
        let mailbox = self.mailbox;
        let period_us = self.period_us;
        let h = self.hosted.entry(key).or_insert_with(|| {
            let mut block = Client {
                inner: Arc::clone(inner),
            }
            .begin();
            block.prefer(mailbox);
            Hosted {
                block,
                island: origin.island,
                incarnation: origin.incarnation,
                op: None,
                touched: true,
                since_us: 0,
                lease_us: LEASE_PERIODS.saturating_mul(period_us),
            }
        });
        h.touched = true;
        if let Some(running) = h.op.take() {
            // A rollback while a statement runs (its caller stopped
            // waiting): the statement is canceled, the rollback follows it.
            running.cancel.cancel();
            self.hosted_ops -= 1;
        }
        let cancel = CancelFlag::new();
        let ends = !matches!(work, Work::Run(_));
        let handed = match work {
            Work::Run(w) => h
                .block
                .hand_statement(w, home, Some(cancel.clone()))
                .map(Some),
            Work::Commit => h.block.hand_commit(),
            Work::Rollback => h.block.hand_rollback(),
        };
        let now: Option<Answer> = match handed {
            Ok(Some(rx)) => {
                h.op = Some(HostedOp {
                    id,
                    rx,
                    what: what.clone(),
                    cancel,
                    ends,
                });
                self.hosted_ops += 1;
                None
            }
            Ok(None) => Some(Ok(Vec::new())),
            Err(e) => Some(Err(e)),
        };
        if let Some(r) = now {
            if ends {
                self.hosted.remove(&key);
            }
            self.answer(from, id, what.as_ref(), r, out);
        }
    }

    /// Answers the hosted blocks' operations that finished.
    fn poll_hosted(&mut self, out: &mut Frames<'_>) {
        for (key, h) in self.hosted.iter_mut() {
            let Some(op) = &mut h.op else {
                continue;
            };
            let r = match op.rx.try_recv() {
                Ok(r) => r,
                Err(oneshot::TryRecvError::Empty) => continue,
                Err(oneshot::TryRecvError::Disconnected) => Err(self.inner.closed_error()),
            };
            if let Some(op) = h.op.take() {
                self.finished.push((*key, op.id, op.what, op.ends, r));
            }
        }
        let mut finished = std::mem::take(&mut self.finished);
        for (key, id, what, ends, r) in finished.drain(..) {
            self.hosted_ops -= 1;
            if ends {
                self.hosted.remove(&key);
            }
            self.answer(key.0, id, what.as_ref(), r, out);
        }
        self.finished = finished;
    }

    /// Rebuilds a forwarded statement with the deployment's compiler.
    fn compile(
        &self,
        sql: &str,
        params: Result<Vec<Value>, wire::WireError>,
    ) -> Result<Arc<dyn Statement>, CallError> {
        match params {
            Err(e) => Err(CallError::BadArguments {
                procedure: "statement".into(),
                why: format!("forwarded parameters: {e}"),
            }),
            Ok(params) => match self.inner.compiler.get() {
                Some(compile) => compile(sql, &params),
                None => Err(CallError::Failed {
                    procedure: "statement".into(),
                    error: "the process of its home island runs no SQL server, so it cannot \
                            rebuild a statement forwarded to it"
                        .into(),
                }),
            },
        }
    }

    /// The CALL_REPLY of forwarded call `p`, from island `from_island`.
    fn on_reply(&self, p: Pending, from_island: IslandId, answer: wire::Answer<'_>) {
        let procedure = self.name(&p.what);
        let malformed = |e: String| CallError::Failed {
            procedure: procedure.clone(),
            error: format!("a malformed answer from island {from_island}: {e}"),
        };
        let r = match answer {
            wire::Answer::Rows { rows, body } => match wire::call_rows(rows, body) {
                Err(e) => Err(malformed(e.to_string())),
                Ok(rows) => match &p.what {
                    What::Proc(_) | What::Named(_) => Ok(rows),
                    What::Stmt(s) => {
                        let mut rows = rows;
                        match rows.pop().as_deref() {
                            Some([Value::Int(n)]) => {
                                s.set_affected(u64::try_from(*n).unwrap_or(0));
                                Ok(rows)
                            }
                            _ => Err(malformed("a statement's answer without its count".into())),
                        }
                    }
                },
            },
            wire::Answer::Error(parts) => Err(error_of(&parts, &procedure, p.island)),
        };
        p.reply.send(&self.inner.mailboxes[self.mailbox], r);
    }

    /// Looks at the calls in flight (every [`SCAN_US`]): sends CALL_CANCEL
    /// for those canceled, and fails those unanswered for `timeout_us` with
    /// [`CallError::OutcomeUnknown`] (after a CALL_CANCEL, so that one still
    /// queued at its home does not run later).
    fn scan(&mut self, now_us: u64, out: &mut Frames<'_>) {
        self.scan_at_us = now_us.saturating_add(SCAN_US);
        let timeout_us = self.timeout_us;
        for (&id, p) in self.pending.iter_mut() {
            let canceled =
                p.cancel.as_ref().is_some_and(CancelFlag::is_canceled) || p.reply.is_closed();
            let late = now_us >= p.sent_us.saturating_add(timeout_us);
            if (canceled || late) && !p.cancel_sent {
                p.cancel_sent = true;
                out.push(p.to, |b| wire::call_cancel(b, id));
            }
            if late {
                self.expired.push(id);
            }
        }
        let mut expired = std::mem::take(&mut self.expired);
        for id in expired.drain(..) {
            if let Some(p) = self.pending.remove(&id) {
                if let Some(b) = p.commits {
                    // Nobody waits for its answer: it matches no call.
                    let rollback = self.next_id;
                    self.next_id = self.next_id.wrapping_add(1);
                    out.push(p.to, |f| {
                        wire::block(f, b, rollback, false, wire::BlockAsk::Rollback);
                    });
                }
                let e = CallError::OutcomeUnknown {
                    procedure: self.name(&p.what),
                    island: p.island as u16,
                    waited_ms: now_us.saturating_sub(p.sent_us) / 1000,
                };
                p.reply.send(&self.inner.mailboxes[self.mailbox], Err(e));
            }
        }
        self.expired = expired;
    }

    /// Renews the lease of every block this executor forwards and that is
    /// open: one RENEW frame (or more, past [`wire::RENEW_MAX`] blocks) to
    /// each executor that hosts some.
    fn renew(&mut self, now_us: u64, out: &mut Frames<'_>) {
        self.renew_at_us = now_us.saturating_add(self.period_us);
        let mut open = std::mem::take(&mut self.renewing);
        open.clear();
        open.extend(self.blocks.iter().map(|(&b, &(to, _))| (to, b)));
        open.sort_unstable();
        let period_ms = u32::try_from(self.period_us / 1000).unwrap_or(u32::MAX);
        for host in open.chunk_by(|a, b| a.0 == b.0) {
            for part in host.chunks(wire::RENEW_MAX) {
                self.renew_ids.clear();
                self.renew_ids.extend(part.iter().map(|&(_, b)| b));
                let ids = &self.renew_ids;
                out.push(part[0].0, |f| {
                    wire::renew(f, period_ms, ids);
                });
            }
        }
        self.renewing = open;
    }

    /// A RENEW from `from`: the leases of its blocks listed that run here
    /// are renewed for [`LEASE_PERIODS`] of its period.
    fn on_renew(&mut self, from: Endpoint, period_ms: u32, blocks: &[u8]) {
        let lease_us = LEASE_PERIODS.saturating_mul(u64::from(period_ms.max(1)) * 1000);
        for id in wire::renewed(blocks) {
            if let Some(h) = self.hosted.get_mut(&(from, id)) {
                h.touched = true;
                h.lease_us = lease_us;
            }
        }
    }

    /// Looks at the hosted blocks' leases (every [`LEASE_SCAN_US`]): a block
    /// touched since the last look starts its lease again; one untouched
    /// for its lease, and not ending already, is dropped (which cancels its
    /// operation under way, whose caller is told, and rolls it back), so
    /// its locks and its slot are free.
    fn expire_leases(&mut self, now_us: u64, out: &mut Frames<'_>) {
        self.lease_scan_at_us = now_us.saturating_add(LEASE_SCAN_US);
        let mut lapsed = std::mem::take(&mut self.lapsed);
        for (key, h) in self.hosted.iter_mut() {
            if std::mem::take(&mut h.touched) {
                h.since_us = now_us;
            } else if h.op.as_ref().is_some_and(|op| op.ends) {
                // Its commit or rollback is under way (its caller stopped
                // renewing it when it sent it): it ends by itself, and a
                // commit must not be answered as rolled back.
            } else if now_us.saturating_sub(h.since_us) >= h.lease_us {
                lapsed.push(*key);
            }
        }
        for key in lapsed.drain(..) {
            let Some(mut h) = self.hosted.remove(&key) else {
                continue;
            };
            if let Some(op) = h.op.take() {
                op.cancel.cancel();
                self.hosted_ops -= 1;
                let e = no_such_block(self.island);
                self.answer(key.0, op.id, None, Err(e), out);
            }
            drop(h);
        }
        self.lapsed = lapsed;
    }
}

/// The error of an operation of a block that island `island` does not hold
/// (any more): it was rolled back there, so the whole block may be retried.
fn no_such_block(island: usize) -> CallError {
    CallError::Serialization {
        procedure: "block".into(),
        attempts: 1,
        last: format!(
            "island {island} holds no such block: it was rolled back there (its caller's process \
             seemed down, its lease lapsed unrenewed, or a message was lost)"
        ),
    }
}

impl ForwardPort for Port {
    fn on_frame(
        &mut self,
        from: Endpoint,
        from_island: IslandId,
        frame: Frame<'_>,
        out: &mut Frames<'_>,
    ) {
        match frame {
            Frame::Call { id, proc, n, args } => {
                let checked = match self.inner.catalog.procs.get(proc as usize) {
                    None => Err(CallError::UnknownProcedure(format!("#{proc}"))),
                    Some(def) => match wire::call_args(n, args) {
                        Ok(args) => def.check_args(&args).map(|()| args),
                        Err(e) => Err(CallError::BadArguments {
                            procedure: def.name.clone(),
                            why: format!("forwarded arguments: {e}"),
                        }),
                    },
                };
                match checked {
                    Ok(args) => {
                        let origin = Origin::of(from_island, out);
                        self.on_call(from, origin, id, What::Proc(proc), args)
                    }
                    Err(e) => self.answer(from, id, Some(&What::Proc(proc)), Err(e), out),
                }
            }
            Frame::Stmt { id, sql, n, params } => {
                if self.running.contains_key(&(from, id)) {
                    // A copy: the statement runs once.
                    return;
                }
                let params = wire::call_args(n, params);
                let origin = Origin::of(from_island, out);
                self.on_stmt(from, origin, id, sql, params, out);
            }
            Frame::CallReply { id, answer } => {
                let Some(p) = self.pending.remove(&id) else {
                    // Canceled and forgotten, late, or for an earlier
                    // incarnation.
                    return;
                };
                self.on_reply(p, from_island, answer);
            }
            Frame::Block {
                block,
                id,
                begins,
                op,
            } => {
                let origin = Origin::of(from_island, out);
                self.on_block(from, origin, block, id, begins, op, out)
            }
            Frame::Renew { period_ms, blocks } => self.on_renew(from, period_ms, blocks),
            Frame::CallCancel { id } => {
                if let Some(r) = self.running.get(&(from, id)) {
                    r.cancel.cancel();
                } else if self.hosted_ops > 0 {
                    let op = self
                        .hosted
                        .iter()
                        .filter(|((f, _), _)| *f == from)
                        .find_map(|(_, h)| h.op.as_ref().filter(|op| op.id == id));
                    if let Some(op) = op {
                        op.cancel.cancel();
                    }
                }
            }
            _ => {}
        }
    }

    fn round(&mut self, now_us: u64, down: IslandSet, out: &mut Frames<'_>) {
        let idle = {
            let mb = &self.inner.mailboxes[self.mailbox];
            mb.forwards.is_empty()
                && mb.answers.is_empty()
                && self.backlog.is_empty()
                && self.pending.is_empty()
                && self.running.is_empty()
                && self.hosted.is_empty()
                && self.blocks.is_empty()
        };
        if idle {
            // The round of an executor that forwards nothing: no shared
            // count touched.
            return;
        }
        let inner = Arc::clone(&self.inner);
        let mb = &inner.mailboxes[self.mailbox];
        if !mb.forwards.is_empty() {
            while let Some(call) = mb.forwards.pop() {
                self.send_call(call, now_us, down, out);
            }
            mb.popped();
        }
        while let Some((to, id, r)) = mb.answers.pop() {
            let what = self.running.remove(&(to, id)).map(|r| r.what);
            self.answer(to, id, what.as_ref(), r, out);
        }
        while let Some(call) = self.backlog.pop_front() {
            if let Err(call) = mb.queue.push(call) {
                self.backlog.push_front(call);
                break;
            }
        }
        if self.hosted_ops > 0 {
            self.poll_hosted(out);
        }
        if !self.blocks.is_empty() && now_us >= self.renew_at_us {
            self.renew(now_us, out);
        }
        if !self.hosted.is_empty() && now_us >= self.lease_scan_at_us {
            self.expire_leases(now_us, out);
        }
        if self.pending.is_empty() && self.running.is_empty() && self.hosted.is_empty() {
            return;
        }
        if !down.is_empty() {
            // Calls waiting on a down island fail now; a late answer from it
            // matches nothing. Calls it made here are canceled (their
            // transactions may still commit, as a local call whose caller
            // left does).
            let gone: Vec<u64> = self
                .pending
                .iter()
                .filter(|(_, p)| down.contains(p.island as IslandId))
                .map(|(&id, _)| id)
                .collect();
            for id in gone {
                if let Some(p) = self.pending.remove(&id) {
                    let e = CallError::IslandDown {
                        procedure: self.name(&p.what),
                        island: p.island as u16,
                    };
                    p.reply.send(mb, Err(e));
                }
            }
            // What came from an incarnation that is gone: a bounced
            // island (down for a round or two, up again as a new
            // incarnation) keeps the calls and blocks its new one sent.
            let t = out.transport();
            let gone = |island: IslandId, inc: u64| {
                down.contains(island)
                    && (inc == 0 || t.peer_down(island) || t.peer_incarnation(island) != inc)
            };
            for r in self
                .running
                .values()
                .filter(|r| gone(r.island, r.incarnation))
            {
                r.cancel.cancel();
            }
            // Its blocks here roll back (dropping a block rolls it back),
            // releasing their locks; this process's blocks there are gone.
            let before = self.hosted.len();
            self.hosted.retain(|_, h| !gone(h.island, h.incarnation));
            if self.hosted.len() != before {
                self.hosted_ops = self.hosted.values().filter(|h| h.op.is_some()).count();
            }
            self.blocks
                .retain(|_, (_, island)| !down.contains(*island as IslandId));
        }
        if now_us >= self.scan_at_us && !self.pending.is_empty() {
            self.scan(now_us, out);
        }
    }
}

/// Codes of [`CallError`] kinds in a CALL_REPLY (see [`error_parts`]).
mod code {
    pub const UNKNOWN_PROCEDURE: u8 = 0;
    pub const BAD_ARGUMENTS: u8 = 1;
    pub const ROLLBACK: u8 = 2;
    pub const SERIALIZATION: u8 = 3;
    pub const OUT_OF_RANGE: u8 = 4;
    pub const ISLAND_DOWN: u8 = 5;
    pub const PANICKED: u8 = 6;
    pub const FAILED: u8 = 7;
    pub const CANCELED: u8 = 8;
    pub const DEADLOCK: u8 = 9;
    pub const TOO_MANY_BLOCKS: u8 = 10;
    pub const ELSEWHERE: u8 = 11;
    pub const SHUT_DOWN: u8 = 12;
    pub const STOPPED: u8 = 13;
    pub const OUTCOME_UNKNOWN: u8 = 14;
    pub const BUSY: u8 = 15;
}

/// `e` as the parts of a CALL_REPLY error, handed to `write`.
fn error_parts(e: &CallError, write: impl FnOnce(&ErrorParts<'_>)) {
    let (code, a, b, s0, s1): (u8, u64, u64, &str, &str) = match e {
        CallError::UnknownProcedure(name) => (code::UNKNOWN_PROCEDURE, 0, 0, name, ""),
        CallError::BadArguments { procedure, why } => (code::BAD_ARGUMENTS, 0, 0, procedure, why),
        CallError::Rollback { procedure, why } => (code::ROLLBACK, 0, 0, procedure, why),
        CallError::Serialization {
            procedure,
            attempts,
            last,
        } => (
            code::SERIALIZATION,
            u64::from(*attempts),
            0,
            procedure,
            last,
        ),
        CallError::OutOfRange { procedure, why } => (code::OUT_OF_RANGE, 0, 0, procedure, why),
        CallError::IslandDown { procedure, island } => {
            (code::ISLAND_DOWN, u64::from(*island), 0, procedure, "")
        }
        CallError::Panicked { procedure, message } => (code::PANICKED, 0, 0, procedure, message),
        CallError::Failed { procedure, error } => (code::FAILED, 0, 0, procedure, error),
        CallError::Canceled { procedure } => (code::CANCELED, 0, 0, procedure, ""),
        CallError::Deadlock { waited_ms } => (code::DEADLOCK, *waited_ms, 0, "", ""),
        CallError::TooManyBlocks { island, limit } => {
            (code::TOO_MANY_BLOCKS, *island as u64, *limit as u64, "", "")
        }
        CallError::Elsewhere { island } => (code::ELSEWHERE, *island as u64, 0, "", ""),
        CallError::Busy { island, waited_ms } => (code::BUSY, *island as u64, *waited_ms, "", ""),
        CallError::ShutDown => (code::SHUT_DOWN, 0, 0, "", ""),
        CallError::Stopped(why) => (code::STOPPED, 0, 0, why, ""),
        CallError::OutcomeUnknown {
            procedure,
            island,
            waited_ms,
        } => (
            code::OUTCOME_UNKNOWN,
            u64::from(*island),
            *waited_ms,
            procedure,
            "",
        ),
    };
    write(&ErrorParts {
        code,
        a,
        b,
        texts: [s0, s1],
    });
}

/// The error a CALL_REPLY carries, for a call of `procedure` forwarded to
/// `island`. A home that shut down or stopped is, to this process, an
/// island that is down.
fn error_of(p: &ErrorParts<'_>, procedure: &str, island: usize) -> CallError {
    let [s0, s1] = p.texts.map(str::to_string);
    match p.code {
        code::UNKNOWN_PROCEDURE => CallError::UnknownProcedure(s0),
        code::BAD_ARGUMENTS => CallError::BadArguments {
            procedure: s0,
            why: s1,
        },
        code::ROLLBACK => CallError::Rollback {
            procedure: s0,
            why: s1,
        },
        code::SERIALIZATION => CallError::Serialization {
            procedure: s0,
            attempts: u32::try_from(p.a).unwrap_or(u32::MAX),
            last: s1,
        },
        code::OUT_OF_RANGE => CallError::OutOfRange {
            procedure: s0,
            why: s1,
        },
        code::ISLAND_DOWN => CallError::IslandDown {
            procedure: s0,
            island: u16::try_from(p.a).unwrap_or(u16::MAX),
        },
        code::PANICKED => CallError::Panicked {
            procedure: s0,
            message: s1,
        },
        code::FAILED => CallError::Failed {
            procedure: s0,
            error: s1,
        },
        code::CANCELED => CallError::Canceled { procedure: s0 },
        code::DEADLOCK => CallError::Deadlock { waited_ms: p.a },
        code::TOO_MANY_BLOCKS => CallError::TooManyBlocks {
            island: p.a as usize,
            limit: p.b as usize,
        },
        code::ELSEWHERE => CallError::Elsewhere {
            island: p.a as usize,
        },
        code::BUSY => CallError::Busy {
            island: p.a as usize,
            waited_ms: p.b,
        },
        code::OUTCOME_UNKNOWN => CallError::OutcomeUnknown {
            procedure: s0,
            island: u16::try_from(p.a).unwrap_or(u16::MAX),
            waited_ms: p.b,
        },
        code::SHUT_DOWN | code::STOPPED => CallError::IslandDown {
            procedure: procedure.to_string(),
            island: island as u16,
        },
        c => CallError::Failed {
            procedure: procedure.to_string(),
            error: format!("island {island} answered with an unknown error code {c}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_error_crosses_as_itself() {
        let p = || "transfer".to_string();
        let all = [
            CallError::UnknownProcedure("x".into()),
            CallError::BadArguments {
                procedure: p(),
                why: "w".into(),
            },
            CallError::Rollback {
                procedure: p(),
                why: "insufficient funds".into(),
            },
            CallError::Serialization {
                procedure: p(),
                attempts: 100,
                last: "lock".into(),
            },
            CallError::OutOfRange {
                procedure: p(),
                why: "w".into(),
            },
            CallError::IslandDown {
                procedure: p(),
                island: 2,
            },
            CallError::Panicked {
                procedure: p(),
                message: "m".into(),
            },
            CallError::Failed {
                procedure: p(),
                error: "e".into(),
            },
            CallError::Canceled { procedure: p() },
            CallError::Deadlock { waited_ms: 1000 },
            CallError::TooManyBlocks {
                island: 1,
                limit: 128,
            },
            CallError::Elsewhere { island: 3 },
            CallError::Busy {
                island: 2,
                waited_ms: 10_000,
            },
            CallError::OutcomeUnknown {
                procedure: p(),
                island: 1,
                waited_ms: 10_000,
            },
        ];
        for e in all {
            let mut b = Vec::new();
            error_parts(&e, |parts| wire::call_reply_error(&mut b, 1, parts));
            let Ok(Frame::CallReply {
                answer: wire::Answer::Error(parts),
                ..
            }) = wire::decode(&b)
            else {
                panic!("{e:?} does not decode");
            };
            assert_eq!(error_of(&parts, "transfer", 1), e);
        }
        // The home's own ending is, here, an island that went down.
        let mut b = Vec::new();
        error_parts(&CallError::ShutDown, |parts| {
            wire::call_reply_error(&mut b, 1, parts)
        });
        let Ok(Frame::CallReply {
            answer: wire::Answer::Error(parts),
            ..
        }) = wire::decode(&b)
        else {
            panic!("no decode");
        };
        assert_eq!(
            error_of(&parts, "transfer", 1),
            CallError::IslandDown {
                procedure: "transfer".into(),
                island: 1
            }
        );
    }
}
