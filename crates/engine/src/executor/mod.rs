//! Distributed transactions across the islands of one process.
//!
//! A [`Cluster`] is a deployment running in this process: its islands, the
//! number of worker threads of each, the [`Transport`] between them and the
//! [`Router`](crate::route::Router) that says which island holds a key. Every worker thread owns an
//! [`Executor`]: a pool of transaction contexts, the island's 2PC
//! [`Coordinator`] and [`Participant`] for the transactions that land on this
//! worker, and an outbox with one batch per destination.
//!
//! Every worker thread, whether it runs a benchmark's generated requests or
//! the application API's calls, runs the one executor loop of [`run`]. A
//! cluster whose transactions never cross islands (one island, or
//! [`Cluster::local`]) has no router: its contexts route nothing, its
//! executors exchange no messages, and the loop runs each procedure to
//! completion on its first poll.
//!
//! A worker never blocks on another island. Its loop polls the
//! stored procedures of several home transactions; one that touches a key of
//! another island suspends (its request goes out in the next batch) and the
//! worker goes on with the others, and with the requests that other islands'
//! transactions send it: those run on *branch* contexts here, with the same
//! local code paths (locks, validation), so remote accesses follow the
//! island's concurrency control. A transaction that touched only its home
//! island commits locally; one that touched others commits with presumed-abort
//! two-phase commit, its home island coordinating (and participating, if it
//! holds a part of it).
//!
//! Endpoints: worker `w` of island `i` is endpoint `base[i] + w`. A gtid names
//! its home worker in its low 8 bits (above them, the worker's own count,
//! drawn below the island's durable gtid reservation, so that no incarnation
//! of the island repeats one: `coord/gtids.rs`), so replies and votes reach the worker
//! that coordinates it; its branch on another island lives on the worker
//! chosen by a hash of the gtid, so every message about one branch reaches
//! the one worker that holds it (and recovery can find it again).
//!
//! What the engine assumes of the transport: batches may be lost, but not
//! duplicated nor delivered late (after batches sent after them), unless the
//! transport says so ([`Transport::redelivery_window`]). The reason is the
//! branch: a participant opens one on the first remote operation of a gtid it
//! does not hold, and forgets it once it has committed or aborted. A late copy
//! of a finished branch's operation would open a second branch; late copies of
//! its WRITE/PREP/PrepareReq would prepare it, and if the participant's
//! CommitConf was lost, the coordinator's resent CommitReq would commit it,
//! installing the transaction's old after-images over later updates. Over a
//! transport with a redelivery window, each worker's [`Participant`] keeps a
//! tombstone of every branch it finished for longer than the window
//! ([`tombstone_us`]), and a remote operation of a tombstoned gtid is refused.
//! [`InProc`](crate::transport::InProc) needs none, and its path pays nothing for them.
//!
//! Concurrency control: a worker interleaves many transactions on one thread,
//! so a lock wait would wait for itself. Distributed islands therefore run
//! `no_wait` 2PL: a conflict aborts and the transaction retries (no
//! distributed deadlock). OCC cannot serve as is: validating reads at each
//! participant's prepare without a global lock point is not serializable
//! across islands (write skew between two islands), and `none` cannot hold a
//! branch while other transactions run. A cluster without a router runs one
//! transaction at a time per worker, from begin to commit, so every scheme
//! serves there (`wait_die` waits only for other workers).
//!
//! Branches that idle: a participant aborts a branch that waits longer than
//! `branch_idle_us` for more work, and its locks go with it. The home
//! transaction can then no longer commit (its next request, LOCK or prepare
//! there is refused), but a procedure that read there and went on elsewhere
//! may have seen a state that no serial order shows, and may end on it (a
//! user abort, a failure). So an attempt older than half the idle timeout
//! asks its branches before its outcome counts: a read-only commit asks for
//! votes instead of releasing ([`Executor::commit_home`]), and any other
//! ending is reported only once every branch confirmed it still held
//! ([`Executor::end_home`]); otherwise the attempt is retried.

mod cluster;
mod down;
pub mod fault;
pub mod forward;
mod home;
mod pool;
#[cfg(test)]
mod power_tests;
mod pump;
mod recovery;
pub mod run;
mod serve;
#[cfg(test)]
mod tests;

pub(crate) use cluster::WorkerCounts;
pub use cluster::{tombstone_us, Cluster, ClusterOptions, ClusterStats, IslandCounts, Member};
pub use home::HomeCommit;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::coord::{Action, Coordinator, Gtid, LogToken, Msg, Participant, SeqDraw};
use crate::phases;
use crate::route::IslandId;
use crate::transport::{Endpoint, Outbox, Transport};
use crate::wal::BatchSeq;
use home::Locking;
use pool::Pool;

/// Bits of a gtid's sequence that name the home worker.
const WORKER_BITS: u32 = 8;
/// Most workers per island (the gtid has 8 bits for it).
pub const MAX_WORKERS_PER_ISLAND: usize = 1 << WORKER_BITS;
/// Most transaction contexts per worker (request tags have 12 bits for it).
const MAX_CONTEXTS: usize = 1 << (32 - crate::txn::TAG_SEQ_BITS);

/// Per-gtid maps of the executor: foldhash, not SipHash (they are touched
/// for every remote operation and 2PC message; gtids come from the
/// deployment's own islands).
type GtidMap<V> = HashMap<Gtid, V, foldhash::fast::FixedState>;

/// The home worker of a gtid.
fn home_worker(gtid: Gtid) -> usize {
    (gtid & ((1 << WORKER_BITS) - 1)) as usize
}

/// One worker's executor. See the module documentation.
pub struct Executor {
    cl: Arc<Cluster>,
    /// Own handles, so the hot path never touches the reference counts that
    /// every worker shares.
    transport: Arc<dyn Transport>,
    shared: Arc<crate::island::Shared>,
    island: IslandId,
    worker: usize,
    me: Endpoint,
    pool: Pool,
    coord: Coordinator,
    part: Participant,
    outbox: Outbox,
    actions: Vec<Action>,
    /// Messages to this very worker (the home island's own branch).
    local: VecDeque<(IslandId, Msg)>,
    /// Forced records not yet durable: (batch, by the coordinator?, token,
    /// the protocol clock when it was asked for).
    forces: Vec<(BatchSeq, bool, LogToken, u64)>,
    /// Pinned batches of commit decisions, until their End.
    coord_pins: GtidMap<BatchSeq>,
    /// Read-only votes waiting for the batch they could have read from,
    /// with the protocol clock when they were cast.
    deferred: Vec<(BatchSeq, IslandId, Msg, u64)>,
    /// The oldest clock of a participant's entry in `forces` or of one in
    /// `deferred` (`u64::MAX`: none): a vote this worker owes since then.
    owed_since: u64,
    /// The lowest batch any entry of `forces` or `deferred` waits for
    /// (`BatchSeq::MAX`: none): a round whose durable batch is below it has
    /// nothing to complete and skips the scan.
    waiting_from: BatchSeq,
    /// Home transactions whose remote branches are being prepared early
    /// ([`Txn::prepare_remote`](crate::txn::Txn::prepare_remote)): (gtid, context), until every remote vote is in.
    early: Vec<(Gtid, u32)>,
    /// Home transactions taking their remote write locks before their
    /// two-phase commit (usually none).
    locking: Vec<Locking>,
    /// The coordinator took a message or a tick since `early` was last
    /// checked: only then can a vote have come in (the check is a lookup per
    /// entry, too dear for every round).
    early_stale: bool,
    /// This worker's gtid sequence numbers (see `coord/gtids.rs`).
    gtids: SeqDraw,
    /// Converts [`phases::ticks`] to the protocol clock's microseconds.
    ticks_per_us: u64,
    now: u64,
    last_tick: u64,
    /// Contexts whose remote reply arrived: poll their procedure again.
    pub woken: Vec<u32>,
    /// Outcomes of this worker's distributed transactions: `(gtid,
    /// Some(ack))` committed, durable once this island's log is durable
    /// through batch `ack` (0: at once); `(gtid, None)` aborted. A commit is
    /// reported when its decision is appended, not when it is durable: the
    /// home branch's locks are gone by then and the outcome cannot change, so
    /// the client's slot is free for the next transaction while the decision
    /// waits for its group commit, as a local commit's does.
    pub outcomes: Vec<(Gtid, Option<BatchSeq>)>,
    /// Ends of home transactions whose procedure stopped without asking to
    /// commit, once [`Executor::end_home`] has asked their branches: `(gtid,
    /// true)` every branch held its locks throughout, so the procedure's own
    /// ending (a user abort, a failure) stands; `(gtid, false)` one did not,
    /// so what it read may be no one view and the attempt is to be retried.
    /// The transaction is aborted everywhere either way.
    pub confirmed: Vec<(Gtid, bool)>,
    /// Commits already reported at their decision (see `outcomes`).
    reported: Vec<Gtid>,
    /// A forced record waits for the log buffer to be handed over.
    flush_due: bool,
    /// The step (µs) at which the current round began or at which
    /// [`Executor::exchange`] last handed the log buffer over.
    handed_off_us: u64,
    /// What this worker last published as its served step.
    published_us: u64,
    /// The transport's peer epoch when `down` was last computed.
    peer_epoch: u64,
    /// Islands whose process is down (see `down.rs`).
    down: crate::coord::IslandSet,
    /// Per island, its incarnation when `down` was last computed (0: none
    /// known), and the rounds left for which the islands that restarted
    /// unseen still count as down (see `down.rs`).
    incarnations: Vec<u64>,
    bounced: crate::coord::IslandSet,
    bounce_rounds: u8,
    /// Transactions the coordinator aborted because an island of `down`
    /// owed a vote, with that island, until the worker loop takes their
    /// outcome.
    down_aborted: GtidMap<IslandId>,
    /// Calls forwarded to and from other processes (see `forward.rs`);
    /// `None` when every island runs here.
    forward: Option<Box<dyn forward::ForwardPort>>,
}

// SAFETY: the raw context pointers are owned by the executor and only used
// by the thread that owns it; an executor moves to its worker thread once.
unsafe impl Send for Executor {}

impl Executor {
    pub fn island(&self) -> usize {
        self.island as usize
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cl
    }

    /// Whether this executor exchanges messages with others: its cluster
    /// routes keys across islands. When it does not, no procedure can
    /// suspend (every row it reaches is local) and there is nothing to pump.
    pub fn messages(&self) -> bool {
        self.cl.routes()
    }

    /// This worker's endpoint: where its counts are ([`Cluster::worker_counts`]).
    pub(crate) fn endpoint(&self) -> Endpoint {
        self.me
    }

    /// This worker's counts in [`ClusterStats`].
    /// Forced log records (prepares, decisions) of this worker wait in the
    /// island's log buffer for it to hand the buffer over (once handed,
    /// they wait for the log writer, which rings the worker's bell).
    pub(super) fn hand_off_due(&self) -> bool {
        self.flush_due
    }

    pub(super) fn counts(&self) -> &WorkerCounts {
        self.cl.worker_counts(self.me)
    }

    /// The protocol clock as of the current step: read at the start of each
    /// round of [`Executor::pump`] and of each [`Executor::exchange`]
    /// between two polls, for the messages that step handles (a clock read
    /// per message was a tenth of a worker's time). A step is short, but a
    /// round is not: it polls up to `inflight` procedures, each as long as
    /// its application makes it. So a timer started by a procedure's own
    /// progress (a request, a commit, a LOCK round) takes
    /// [`Executor::fresh_now_us`] instead.
    fn now_us(&self) -> u64 {
        self.now
    }

    /// The clock read now; it becomes the current step's reading too.
    fn fresh_now_us(&mut self) -> u64 {
        self.now = self.now.max(phases::ticks() / self.ticks_per_us);
        self.now
    }

    /// Whether a wait on `peer`, begun at `since_us` with timeout
    /// `timeout_us`, has gone unanswered at `now_us`: its time is up, and
    /// `peer` has since served its mailbox (and sent every vote it owed) in
    /// a step that began at least half the timeout after the wait did (or
    /// has never served: see [`Cluster::silent_since`]). A
    /// peer polling a long procedure has not read its mailbox yet: it is
    /// busy, not silent, and the wait goes on, up to
    /// [`ClusterOptions::busy_peer_max`]. This worker itself is never
    /// silent to its own waits: whatever it owes itself is handled within
    /// its step.
    fn unanswered(&self, peer: Endpoint, since_us: u64, timeout_us: u64, now_us: u64) -> bool {
        if now_us < since_us.saturating_add(timeout_us) {
            return false;
        }
        let busy_max_us = u64::try_from(self.cl.opts.busy_peer_max.as_micros()).unwrap_or(u64::MAX);
        if now_us >= since_us.saturating_add(busy_max_us.max(timeout_us)) {
            return true;
        }
        peer != self.me
            && self
                .cl
                .silent_since(peer, since_us.saturating_add(timeout_us / 2))
    }

    /// Ends a step begun at `step_us` in which this worker took in its
    /// mailbox and flushed what that produced: peers that wait on it learn
    /// that it served (see [`Executor::unanswered`]). A vote it still owes
    /// (a forced prepare record not yet durable) was asked for in a step
    /// that has not answered everything it took in: then only the steps
    /// before that one count as served.
    /// It writes the shared word only when the value changed.
    fn publish_served(&mut self, step_us: u64) {
        let served = step_us.min(self.owed_since.saturating_sub(1));
        if served != self.published_us {
            self.published_us = served;
            self.cl.publish_served_us(self.me, served);
        }
    }

    /// Branches this worker holds for other islands' (and its own) transactions.
    pub fn branches_in_flight(&self) -> usize {
        self.pool.branches.len()
    }
}
