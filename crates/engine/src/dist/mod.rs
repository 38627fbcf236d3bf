//! Distributed transactions across the islands of one process.
//!
//! A [`Cluster`] is a deployment running in this process: its islands, the
//! number of worker threads of each, the [`Transport`] between them and the
//! [`Router`] that says which island holds a key. Every worker thread owns an
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
//! its home worker in its low 8 bits, so replies and votes reach the worker
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
//! [`InProc`] needs none, and its path pays nothing for them.
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

pub mod fault;
#[cfg(test)]
mod power_tests;
pub mod run;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::cc::CcKind;
use crate::coord::{
    self, home_of, Action, Coordinator, Gtid, LogRec, LogToken, Msg, Participant, Timeouts, Vote,
    GTID_SEQ_BITS,
};
use crate::island::{InDoubt, Island, RecoveryReport};
use crate::phases;
use crate::route::{IslandId, Router};
use crate::transport::{frames, push_frame, push_frame_with, Endpoint, InProc, Outbox, Transport};
use crate::txn::{Dist, Early, LockWait, Txn};
use crate::wal::BatchSeq;
use crate::{Abort, AbortReason, Error};
use wire::{Frame, Status};

/// Bits of a gtid's sequence that name the home worker.
const WORKER_BITS: u32 = 8;
/// Most workers per island (the gtid has 8 bits for it).
pub const MAX_WORKERS_PER_ISLAND: usize = 1 << WORKER_BITS;
/// Most transaction contexts per worker (request tags have 12 bits for it).
const MAX_CONTEXTS: usize = 1 << (32 - crate::txn::TAG_SEQ_BITS);

/// How a cluster runs.
#[derive(Clone)]
pub struct ClusterOptions {
    /// Home transactions a worker keeps executing (polling their procedures).
    pub inflight: usize,
    /// Distributed commits a worker keeps in flight beyond `inflight`: a
    /// transaction whose procedure finished and whose two-phase commit is
    /// under way gives its slot to the next transaction (its request is kept
    /// for a retry should the commit abort). With a log, each such commit
    /// waits for a participant's forced prepare (a group commit), and a slot
    /// held across it would leave the worker idle or need a deep window of
    /// executing transactions (whose rows go cold, and whose locks collide).
    /// 0: a transaction holds its slot until its outcome.
    pub commit_window: usize,
    /// Branches of other islands' transactions a worker holds at once.
    pub max_branches: usize,
    pub timeouts: Timeouts,
    /// A home transaction waiting this long for a remote reply aborts (lost
    /// messages, a crashed island).
    pub op_timeout: Duration,
    /// Mailbox depth (batches) of the default in-process transport.
    pub mailbox_depth: usize,
    /// The transport; `None` is an [`InProc`] with one mailbox per worker.
    pub transport: Option<Arc<dyn Transport>>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            inflight: 8,
            commit_window: 16,
            max_branches: 64,
            timeouts: Timeouts::default(),
            op_timeout: Duration::from_millis(200),
            mailbox_depth: 1024,
            transport: None,
        }
    }
}

impl ClusterOptions {
    /// Transaction contexts an island with `workers` workers must have beyond
    /// one per worker ([`crate::island::IslandConfig::contexts`]).
    pub fn contexts_needed(&self, workers: usize) -> usize {
        workers * self.contexts_per_worker()
    }

    /// Transaction contexts one worker's executor may take: its executing
    /// transactions, the home branches of its commits in flight, and the
    /// branches it holds for other workers' transactions.
    fn contexts_per_worker(&self) -> usize {
        self.inflight + self.commit_window + self.max_branches
    }
}

/// Counters of one cluster. The rare events are shared; those counted on
/// every remote operation or distributed commit are per worker, each on its
/// own cache line and written only by its worker, and summed when read.
#[derive(Debug, Default)]
pub struct ClusterStats {
    /// Frames or batches that failed to decode: counted, never executed.
    pub malformed: AtomicU64,
    pub protocol_violations: AtomicU64,
    /// Requests refused because they continue a branch that was aborted
    /// meanwhile (idle too long): their transactions abort and retry.
    pub lost_branches: AtomicU64,
    /// By endpoint.
    workers: Box<[crossbeam_utils::CachePadded<WorkerCounts>]>,
}

/// One worker's counts (see [`ClusterStats`]).
#[derive(Debug, Default)]
pub(crate) struct WorkerCounts {
    distributed_commits: AtomicU64,
    remote_ops: AtomicU64,
    /// Attempts of its home transactions aborted by the engine, by
    /// [`AbortReason::index`].
    aborts: [AtomicU64; AbortReason::ALL.len()],
    /// Home transactions rolled back by their procedure.
    user_aborts: AtomicU64,
    /// Home transactions given up once their attempts ran out.
    gave_up: AtomicU64,
}

impl WorkerCounts {
    /// An aborted attempt of a home transaction (see [`IslandCounts`]).
    pub(crate) fn abort(&self, reason: AbortReason) {
        bump(&self.aborts[reason.index()]);
    }

    /// A home transaction its procedure rolled back.
    pub(crate) fn user_abort(&self) {
        bump(&self.user_aborts);
    }

    /// A home transaction given up after its last attempt.
    pub(crate) fn gave_up(&self) {
        bump(&self.gave_up);
    }
}

/// One island's counters: its workers' [`ClusterStats`], summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IslandCounts {
    /// Committed transactions this island coordinated with two-phase
    /// commit (or released read-only participants of).
    pub distributed_commits: u64,
    /// Operations of other islands' transactions this island served.
    pub remote_ops: u64,
    /// Aborted attempts of transactions homed here, by
    /// [`AbortReason::index`]: a transaction retried three times counts three.
    pub aborts: [u64; AbortReason::ALL.len()],
    /// Transactions homed here that their procedure rolled back.
    pub user_aborts: u64,
    /// Transactions homed here given up after their last attempt aborted
    /// (a caller's serialization failure).
    pub gave_up: u64,
}

/// Adds one to a counter only its owner thread writes: a plain store, no
/// atomic read-modify-write.
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl ClusterStats {
    fn new(endpoints: usize) -> ClusterStats {
        ClusterStats {
            workers: (0..endpoints).map(|_| Default::default()).collect(),
            ..Default::default()
        }
    }

    /// Committed transactions that ran two-phase commit.
    pub fn distributed_commits(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.distributed_commits.load(Ordering::Relaxed))
            .sum()
    }

    /// Remote operations served.
    pub fn remote_ops(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.remote_ops.load(Ordering::Relaxed))
            .sum()
    }

    /// The counts of endpoints `endpoints`, summed.
    fn sum(&self, endpoints: std::ops::Range<usize>) -> IslandCounts {
        let mut c = IslandCounts::default();
        for w in &self.workers[endpoints] {
            let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
            c.distributed_commits += load(&w.distributed_commits);
            c.remote_ops += load(&w.remote_ops);
            for (sum, a) in c.aborts.iter_mut().zip(&w.aborts) {
                *sum += load(a);
            }
            c.user_aborts += load(&w.user_aborts);
            c.gave_up += load(&w.gave_up);
        }
        c
    }
}

/// A deployment of islands in this process. See the module documentation.
pub struct Cluster {
    islands: Vec<Island>,
    workers: Vec<usize>,
    base: Vec<u32>,
    transport: Arc<dyn Transport>,
    /// `None`: no transaction crosses islands (one island, or islands whose
    /// transactions each touch only their own rows). Contexts then carry no
    /// routing state and no executor sends a message (see [`Executor::messages`]).
    router: Option<Arc<dyn Router>>,
    recovered: Vec<RecoveryReport>,
    /// Executors take their share of `recovered` when they start (see
    /// [`Cluster::executor`]); a [`Cluster::local`] made without reports does not.
    recovers: bool,
    opts: ClusterOptions,
    /// Workers still running client transactions: the others keep serving.
    clients: AtomicUsize,
    /// Workers of the run that still hold or expect something (see
    /// `run::executor_loop`'s exit): a worker leaves only when every worker
    /// has been settled for a while, since a settled worker's peer may still
    /// resend it a commit whose acknowledgement was lost.
    unsettled: AtomicUsize,
    /// Per worker (by endpoint): its executor has recovered. When all of an
    /// island's have, they hold their own pins on the log records recovery
    /// found unfinished, and the island's recovery pins go
    /// (`Shared::release_recovery_pins`).
    recovered_worker: Vec<AtomicBool>,
    /// Per worker (by endpoint): an executor was made for it. Each takes
    /// the worker's share of `recovered` when it starts: a second one would
    /// replay what the first resolved.
    has_executor: Vec<AtomicBool>,
    pub stats: ClusterStats,
}

impl Cluster {
    /// A cluster over islands opened with their recovery reports (in-doubt
    /// branches are resolved by the executors), `workers[i]` worker threads
    /// on island `i`, `router` saying which island holds a key. A cluster of
    /// one island has nowhere to route to and keeps no router.
    pub fn new(
        islands: Vec<(Island, RecoveryReport)>,
        workers: Vec<usize>,
        router: Arc<dyn Router>,
        opts: ClusterOptions,
    ) -> Result<Arc<Cluster>, Error> {
        let router = (islands.len() > 1).then_some(router);
        Cluster::build(islands, workers, router, true, opts)
    }

    /// A cluster whose transactions never cross islands: one island, or
    /// several whose workloads each keep to their own island's rows (a key
    /// of another island is simply not found here). Its executors never
    /// message each other, so every concurrency control scheme serves, and
    /// an island may have no workers. The islands' recovery is left as
    /// their opening made it: branches in doubt stay pinned in their logs
    /// for a cluster that routes across islands to resolve.
    pub fn local(
        islands: Vec<Island>,
        workers: Vec<usize>,
        opts: ClusterOptions,
    ) -> Result<Arc<Cluster>, Error> {
        let islands = islands
            .into_iter()
            .map(|i| (i, RecoveryReport::default()))
            .collect();
        Cluster::build(islands, workers, None, false, opts)
    }

    fn build(
        islands: Vec<(Island, RecoveryReport)>,
        workers: Vec<usize>,
        router: Option<Arc<dyn Router>>,
        recovers: bool,
        opts: ClusterOptions,
    ) -> Result<Arc<Cluster>, Error> {
        let routes = router.is_some();
        if islands.is_empty() || islands.len() != workers.len() {
            return Err(Error::Config(
                "a cluster needs one worker count per island".into(),
            ));
        }
        if routes && islands.len() > coord::MAX_ISLANDS {
            return Err(Error::Config(format!(
                "{} islands: at most {} can run two-phase commit together",
                islands.len(),
                coord::MAX_ISLANDS
            )));
        }
        if opts.inflight == 0 || opts.max_branches == 0 {
            return Err(Error::Config(
                "a worker needs at least one transaction and one branch in flight".into(),
            ));
        }
        if opts.contexts_per_worker() > MAX_CONTEXTS {
            return Err(Error::Config(format!(
                "{} transactions + {} commits + {} branches in flight per worker: at most {MAX_CONTEXTS} contexts",
                opts.inflight, opts.commit_window, opts.max_branches
            )));
        }
        check_identities(&islands)?;
        let mut base = Vec::with_capacity(islands.len());
        let mut n = 0u32;
        for (i, ((island, _), &w)) in islands.iter().zip(&workers).enumerate() {
            let cfg = island.config();
            if (w == 0 && routes) || w > MAX_WORKERS_PER_ISLAND || w > cfg.workers {
                return Err(Error::Config(format!(
                    "island {i}: {w} workers (the island was opened for {}, at most {MAX_WORKERS_PER_ISLAND})",
                    cfg.workers
                )));
            }
            if routes && cfg.cc != CcKind::NoWait {
                return Err(Error::Config(format!(
                    "island {i} runs '{}': islands that take part in distributed transactions run no_wait \
                     (a worker interleaves transactions, so it cannot wait for a lock; OCC validation at \
                     each island's prepare is not serializable across islands)",
                    cfg.cc
                )));
            }
            if routes && cfg.contexts < opts.contexts_needed(w) {
                return Err(Error::Config(format!(
                    "island {i} was opened with {} extra transaction contexts; its executors need {}",
                    cfg.contexts,
                    opts.contexts_needed(w)
                )));
            }
            base.push(n);
            n += w as u32;
        }
        let transport = match &opts.transport {
            Some(t) => {
                if t.endpoints() < n as usize {
                    return Err(Error::Config(format!(
                        "the transport has {} endpoints; the cluster needs {n}",
                        t.endpoints()
                    )));
                }
                Arc::clone(t)
            }
            None => Arc::new(InProc::new(n as usize, opts.mailbox_depth)) as Arc<dyn Transport>,
        };
        let (islands, recovered) = islands.into_iter().unzip();
        Ok(Arc::new(Cluster {
            recovered_worker: (0..n).map(|_| AtomicBool::new(false)).collect(),
            has_executor: (0..n).map(|_| AtomicBool::new(false)).collect(),
            islands,
            workers,
            base,
            transport,
            router,
            recovered,
            recovers,
            opts,
            clients: AtomicUsize::new(0),
            unsettled: AtomicUsize::new(0),
            stats: ClusterStats::new(n as usize),
        }))
    }

    pub fn islands(&self) -> &[Island] {
        &self.islands
    }

    pub fn workers(&self, island: usize) -> usize {
        self.workers[island]
    }

    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// Whether transactions may cross islands here (see [`Cluster::local`]).
    pub fn routes(&self) -> bool {
        self.router.is_some()
    }

    /// The counts of the worker at endpoint `e`, which only that worker
    /// writes.
    pub(crate) fn worker_counts(&self, e: Endpoint) -> &WorkerCounts {
        &self.stats.workers[e.0 as usize]
    }

    /// Island `island`'s counters, its workers' summed (zero for an island
    /// it does not have).
    pub fn island_counts(&self, island: usize) -> IslandCounts {
        match (self.base.get(island), self.workers.get(island)) {
            (Some(&b), Some(&w)) => self.stats.sum(b as usize..b as usize + w),
            _ => IslandCounts::default(),
        }
    }

    fn endpoint(&self, island: IslandId, worker: usize) -> Endpoint {
        Endpoint(self.base[island as usize] + worker as u32)
    }

    fn island_of_endpoint(&self, e: Endpoint) -> Option<IslandId> {
        let i = self.base.partition_point(|&b| b <= e.0);
        (i > 0 && (e.0 - self.base[i - 1]) < self.workers[i - 1] as u32)
            .then(|| (i - 1) as IslandId)
    }

    /// The worker of `island` that holds the branch of `gtid`: the home worker
    /// on the home island, a hash of the gtid elsewhere.
    fn branch_worker(&self, island: IslandId, gtid: Gtid) -> usize {
        if island == home_of(gtid) {
            self.home_worker(gtid)
        } else {
            (crate::storage::hash::hash_key(gtid) % self.workers[island as usize] as u64) as usize
        }
    }

    /// The worker of its home island that coordinates `gtid`: the one that
    /// began it, or, for a transaction of an earlier run with more workers
    /// there (found by recovery), one of today's, the same on every island.
    fn home_worker(&self, gtid: Gtid) -> usize {
        let w = home_worker(gtid);
        self.workers
            .get(home_of(gtid) as usize)
            .map_or(w, |&n| w % n.max(1))
    }

    /// Starts the executor of worker `worker` of island `island`; it takes
    /// over that worker's share of recovery (in-doubt branches, undecided
    /// commits) at once. A worker has one executor in the cluster's life: a
    /// second one is refused (it would replay a recovery the first one
    /// resolved, and undo what came after). A new run opens the islands
    /// again and makes a new cluster.
    pub fn executor(self: &Arc<Self>, island: usize, worker: usize) -> Result<Executor, Error> {
        if island >= self.islands.len() || worker >= self.workers[island] {
            return Err(Error::Config(format!(
                "no worker {worker} on island {island}"
            )));
        }
        let id = island as IslandId;
        let e = self.endpoint(id, worker).0 as usize;
        if self.has_executor[e].swap(true, Ordering::AcqRel) {
            return Err(Error::Config(format!(
                "worker {worker} of island {island} already had an executor in this cluster: \
                 each worker takes its share of the recovery report once (open the islands \
                 again for a new cluster)"
            )));
        }
        let cfg = coord::Config {
            island: id,
            islands: self.islands.len(),
            // A branch outlives its context: after the engine commits it, the
            // participant still waits for its decision record to be durable;
            // and the home island's own branches count here too.
            max_in_flight: 4 * self.opts.contexts_per_worker(),
            timeouts: self.opts.timeouts,
        };
        let mut ex = Executor {
            cl: Arc::clone(self),
            transport: Arc::clone(&self.transport),
            shared: Arc::clone(self.islands[island].shared()),
            island: id,
            worker,
            me: self.endpoint(id, worker),
            pool: Pool {
                cl: Arc::clone(self),
                island: id,
                ctxs: Vec::new(),
                free: Vec::new(),
                branches: GtidMap::default(),
                in_doubt: GtidMap::default(),
                decided: GtidMap::default(),
                failed: None,
            },
            coord: Coordinator::new(coord::Config {
                max_in_flight: (self.opts.inflight + self.opts.commit_window).max(1) * 4,
                ..cfg
            }),
            part: {
                let mut p = Participant::new(cfg);
                if let Some(window) = self.transport.redelivery_window() {
                    p.keep_tombstones(tombstone_us(window));
                }
                p
            },
            outbox: Outbox::new(self.transport.endpoints()),
            actions: Vec::new(),
            local: VecDeque::new(),
            forces: Vec::new(),
            coord_pins: GtidMap::default(),
            deferred: Vec::new(),
            waiting_from: BatchSeq::MAX,
            early_stale: false,
            next_seq: 1,
            ticks_per_us: (phases::ticks_per_us().round() as u64).max(1),
            now: 0,
            last_tick: 0,
            woken: Vec::new(),
            outcomes: Vec::new(),
            confirmed: Vec::new(),
            reported: Vec::new(),
            flush_due: false,
            early: Vec::new(),
            locking: Vec::new(),
        };
        if self.router.is_none() {
            // Its one context, taken now so that an island without a free
            // worker slot is refused before the run rather than stalling it.
            let c = ex.pool.alloc_ctx().ok_or_else(|| {
                Error::Config(format!(
                    "island {island} has no free worker slot for worker {worker}'s executor"
                ))
            })?;
            ex.pool.free_ctx(c);
        }
        if !self.recovers {
            return Ok(ex);
        }
        ex.recover()?;
        let base = self.base[island] as usize;
        let mine = &self.recovered_worker[base..base + self.workers[island]];
        mine[worker].store(true, Ordering::Release);
        // Releasing twice (two workers finishing at once) is harmless.
        if mine.iter().all(|r| r.load(Ordering::Acquire)) {
            self.islands[island].shared().release_recovery_pins();
        }
        Ok(ex)
    }
}

/// Islands opened as numbered islands of a deployment (`IslandConfig::islands` above 1)
/// must be the cluster's islands in their order, and all of one deployment: the one their
/// configurations name, or else the one their log directories hold. (Islands opened
/// without numbers, each the only island of its own log, are not checked.)
fn check_identities(islands: &[(Island, RecoveryReport)]) -> Result<(), Error> {
    let mut deployment = None;
    for (i, (island, report)) in islands.iter().enumerate() {
        let c = island.config();
        if c.islands <= 1 {
            continue;
        }
        if c.islands as usize != islands.len() || c.island_id as usize != i {
            return Err(Error::Config(format!(
                "{} was opened as island {} of {}, but it is island {i} of this cluster of {}",
                c.name,
                c.island_id,
                c.islands,
                islands.len()
            )));
        }
        let d = c
            .deployment
            .or_else(|| report.control.as_ref().map(|ctl| ctl.deployment));
        match (deployment, d) {
            (Some(a), Some(b)) if a != b => {
                return Err(Error::Config(format!(
                    "{} belongs to deployment {b:032x}, island 0 of this cluster to {a:032x}",
                    c.name
                )))
            }
            (None, Some(b)) => deployment = Some(b),
            _ => {}
        }
    }
    Ok(())
}

/// Lines of a received batch prefetched before it is read (a few KiB: more
/// would only evict what the frames' work needs).
const PREFETCH_BATCH_LINES: usize = 64;

/// How long a participant remembers a finished branch over a transport that
/// may deliver a copy of a batch up to `window` late: the copy was sent
/// before the branch finished, so `window` would do on one clock; the
/// protocol clock (calibrated TSC ticks) and the transport's may disagree, so
/// twice as long, plus a millisecond for the participant's timer tick.
pub fn tombstone_us(window: Duration) -> u64 {
    u64::try_from(window.as_micros())
        .unwrap_or(u64::MAX)
        .saturating_mul(2)
        .saturating_add(1_000)
}

/// Per-gtid maps of the executor: foldhash, not SipHash (they are touched
/// for every remote operation and 2PC message; gtids come from the
/// deployment's own islands).
type GtidMap<V> = HashMap<Gtid, V, foldhash::fast::FixedState>;

/// The home worker of a gtid.
fn home_worker(gtid: Gtid) -> usize {
    (gtid & ((1 << WORKER_BITS) - 1)) as usize
}

/// What a registered branch context knows beyond the transaction itself.
struct Branch {
    ctx: u32,
    /// From PREP: WRITE/DELETE frames to expect, and whether to hold at prepare.
    expect: Option<(u32, bool)>,
    applied: u32,
    /// A WRITE/DELETE could not be applied: the branch votes no.
    bad: bool,
    /// The tag of the newest request (or LOCK) served. The home sends one at
    /// a time, each with a newer tag, so a request whose tag is not newer is
    /// a copy (a transport that duplicates) and is not served again: an
    /// INSERT run twice would answer "present", for the branch's own row.
    last_tag: u32,
}

impl Branch {
    fn new(ctx: u32, expect: Option<(u32, bool)>) -> Branch {
        Branch {
            ctx,
            expect,
            applied: 0,
            bad: false,
            last_tag: 0,
        }
    }

    /// Records `tag` as served; false if it is not newer than the last one
    /// (same context bits; sequence numbers compared modulo their width).
    fn serve_once(&mut self, tag: u32) -> bool {
        let mask = (1u32 << crate::txn::TAG_SEQ_BITS) - 1;
        let ahead = tag.wrapping_sub(self.last_tag) & mask;
        if self.last_tag != 0 && (ahead == 0 || ahead > mask / 2) {
            return false;
        }
        self.last_tag = tag;
        true
    }
}

/// A home transaction whose commit waits for its LOCK round (see
/// `Executor::commit_home`).
struct Locking {
    gtid: Gtid,
    ctx: u32,
    /// The round's request tag, which the replies echo.
    tag: u32,
    /// Islands whose reply has not arrived.
    waiting: coord::IslandSet,
    /// The protocol clock when the round began.
    since_us: u64,
    /// A round of [`Executor::end_home`]: it asks only whether every branch
    /// still holds, and aborts the transaction either way.
    confirm: bool,
}

/// How a home transaction's commit went.
#[derive(Debug)]
pub enum HomeCommit {
    /// It touched only this island and committed.
    Local(crate::txn::Committed),
    /// Two-phase commit started; the outcome arrives in [`Executor::outcomes`].
    Distributed(Gtid),
    /// It read on several islands and wrote nothing, none of its branches
    /// validates reads at commit, and none read data its island had not made
    /// durable or written yet ([`wire::Status::Ok`]): it committed here, and
    /// its remote branches were told to release (one-way). All its locks were
    /// held at once before the first release, which is all two-phase locking
    /// asks of a reader.
    Released(crate::txn::Committed),
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
    /// Forced records not yet durable: (batch, by the coordinator?, token).
    forces: Vec<(BatchSeq, bool, LogToken)>,
    /// Pinned batches of commit decisions, until their End.
    coord_pins: GtidMap<BatchSeq>,
    /// Read-only votes waiting for the batch they could have read from.
    deferred: Vec<(BatchSeq, IslandId, Msg)>,
    /// The lowest batch any entry of `forces` or `deferred` waits for
    /// (`BatchSeq::MAX`: none): a round whose durable batch is below it has
    /// nothing to complete and skips the scan (with 128 transactions in
    /// flight per worker the scan of every round was 9% of the CPU).
    waiting_from: BatchSeq,
    /// Home transactions whose remote branches are being prepared early
    /// ([`Txn::prepare_remote`]): (gtid, context), until every remote vote is in.
    early: Vec<(Gtid, u32)>,
    /// Home transactions taking their remote write locks before their
    /// two-phase commit (usually none).
    locking: Vec<Locking>,
    /// The coordinator took a message or a tick since `early` was last
    /// checked: only then can a vote have come in (the check is a lookup per
    /// entry, too dear for every round).
    early_stale: bool,
    next_seq: u64,
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
    flush_due: bool,
}

/// The executor's transaction contexts and the branches among them.
struct Pool {
    cl: Arc<Cluster>,
    island: IslandId,
    /// Transaction contexts, owned through raw pointers: a suspended stored
    /// procedure holds `&mut Txn` into one of them (see [`run`]), while the
    /// executor delivers replies into the same context between polls.
    ctxs: Vec<*mut Txn>,
    free: Vec<u32>,
    branches: GtidMap<Branch>,
    in_doubt: GtidMap<InDoubt>,
    /// Commit decisions a participant logged before installing its branch
    /// (see `Engine::commit`): the batch each went to, for its force.
    decided: GtidMap<BatchSeq>,
    failed: Option<Error>,
}

// SAFETY: the raw context pointers are owned by the executor and only used
// by the thread that owns it; an executor moves to its worker thread once.
unsafe impl Send for Executor {}

impl Drop for Pool {
    fn drop(&mut self) {
        for &p in &self.ctxs {
            // SAFETY: allocated by `Box::into_raw` in `alloc_ctx`, freed once here.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

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
    fn counts(&self) -> &WorkerCounts {
        self.cl.worker_counts(self.me)
    }

    /// The protocol clock, read once per round of [`Executor::pump`]: the
    /// state machines' timeouts are milliseconds, and a clock read per
    /// message was a tenth of a worker's time.
    fn now_us(&self) -> u64 {
        self.now
    }

    /// The clock read now, not at the start of the round ([`Executor::now_us`]).
    fn fresh_now_us(&self) -> u64 {
        phases::ticks() / self.ticks_per_us
    }

    /// After the attempt on context `c` aborted: the local row whose lock it
    /// ran into ([`Txn::conflict_row`]), if any, and whether it had touched
    /// another island (whose branch hears of the abort by a message that a
    /// retry must not overtake). Valid until `c` is taken again.
    pub(crate) fn conflict_of(&self, c: u32) -> Option<(LockWait, bool)> {
        let tx = self.pool.ctx_ref(c);
        let touched = tx.dist.as_ref().is_some_and(|d| !d.touched.is_empty());
        tx.conflict_row().map(|w| (w, touched))
    }

    /// Whether the request of `w` would still conflict now: a hint for when
    /// to retry an attempt that ran into it.
    pub(crate) fn still_locked(&self, w: LockWait) -> bool {
        crate::txn::still_locked(&self.shared, w)
    }

    /// A raw pointer to context `c`, for a stored procedure's future.
    pub(crate) fn ctx_ptr(&self, c: u32) -> *mut Txn {
        self.pool.ctx_ptr(c)
    }

    fn new_gtid(&mut self) -> Gtid {
        let seq = (self.next_seq << WORKER_BITS) | self.worker as u64;
        self.next_seq += 1;
        coord::gtid(self.island, seq & ((1 << GTID_SEQ_BITS) - 1))
    }

    /// Takes a context for a new home transaction (attempt): `None` when all
    /// are busy. `retry` keeps the context's previous wait-die age.
    pub fn begin_home(&mut self, retry: bool) -> Option<u32> {
        let c = self.pool.alloc_ctx()?;
        self.pool.ctx(c).begin(retry);
        self.start_home(c);
        Some(c)
    }

    /// [`Executor::begin_home`] for the retry of an attempt whose timestamp
    /// was `ts` ([`Executor::timestamp_of`]): under wait-die a retried
    /// transaction keeps its age, so it eventually wins, whichever context
    /// it runs on.
    pub(crate) fn begin_retry(&mut self, ts: u64) -> Option<u32> {
        let c = self.pool.alloc_ctx()?;
        self.pool.ctx(c).begin_at(ts);
        self.start_home(c);
        Some(c)
    }

    /// Names the transaction just begun on `c`, if it may cross islands.
    #[inline]
    fn start_home(&mut self, c: u32) {
        if self.cl.router.is_none() {
            return;
        }
        let gtid = self.new_gtid();
        let now = self.now;
        let d = self.pool.ctx(c).dist.as_mut();
        let d = d.expect("contexts of a routing cluster are distributed");
        d.gtid = gtid;
        d.reset();
        d.begin_us = now;
    }

    /// The timestamp of the attempt last begun on context `c`. Valid until
    /// `c` is taken again.
    pub(crate) fn timestamp_of(&self, c: u32) -> u64 {
        self.pool.ctx_ref(c).timestamp()
    }

    /// Home context `c`, lent for a procedure polled to completion while
    /// the borrow lasts (the inline attempts of `run`).
    pub(crate) fn home_ctx(&mut self, c: u32) -> &mut Txn {
        self.pool.ctx(c)
    }

    /// After a poll returned `Pending`: sends the request the procedure
    /// queued (`Some(true)`), or finds that it still waits for an earlier
    /// one (`Some(false)`: the wake was spurious). `None` if it waits for
    /// nothing the executor can deliver (a procedure waiting on something
    /// else: an error the caller reports).
    pub fn send_request(&mut self, c: u32) -> Option<bool> {
        let tx = self.pool.ctx(c);
        let d = tx.dist.as_mut()?;
        if d.early == Early::Requested {
            self.prepare_early(c);
            return Some(true);
        }
        if !d.req_ready {
            // A spurious wake: it still waits for its reply or its early
            // votes. A wake pushed for an attempt that then timed out in
            // the same round reaches the next attempt on the same context.
            return (d.tag != 0 || d.early == Early::Voting).then_some(false);
        }
        d.req_ready = false;
        let to = self
            .cl
            .endpoint(d.req_to, self.cl.branch_worker(d.req_to, d.gtid));
        push_frame(self.outbox.batch(&*self.cl.transport, to), &d.req);
        Some(true)
    }

    /// The procedure of home context `c` finished: commit it, locally or with 2PC.
    /// On `Err` the transaction is aborted everywhere and `c` is free again.
    pub fn commit_home(&mut self, c: u32) -> Result<HomeCommit, Abort> {
        if let Some(e) = self.pool.ctx(c).read_committed_wrote() {
            self.abort_home(c);
            return Err(e);
        }
        let tx = self.pool.ctx(c);
        let Some(d) = tx.dist.as_ref().filter(|d| !d.touched.is_empty()) else {
            let r = tx.commit();
            self.pool.free_ctx(c);
            return r.map(HomeCommit::Local);
        };
        let gtid = d.gtid;
        let touched = d.touched;
        if d.early == Early::Prepared {
            return self.commit_home_early(c, gtid);
        }
        // A read-only transaction need not ask its remote branches for votes
        // when none read data that is not durable yet (`Status::Ok`'s
        // `undurable`): they only release. But a participant aborts a
        // branch that idles for `branch_idle_us`, and its read locks go with
        // it; had that happened before this transaction's last lock here,
        // committing would break two-phase locking. No branch began before
        // `begin_us` (one clock for every island of the process: the
        // time-stamp counter only where it was checked to read the same on
        // every CPU, see `phases::clock`), so within half that time none can
        // have idled out; after it, the votes say. No remote branch
        // validates anything; the home's own scans and misses are validated
        // by the commit below, before the releases leave (with the next
        // flush of the outbox), so no branch releases before that check.
        if d.validating.is_empty()
            && !d.remote_undurable
            && !tx.has_writes()
            && no_branch_idled_out(self.ticks_per_us, &self.cl.opts.timeouts, d.begin_us)
        {
            for island in touched.iter() {
                let to = self
                    .cl
                    .endpoint(island, self.cl.branch_worker(island, gtid));
                push_frame_with(self.outbox.batch_lazy(&*self.transport, to), |b| {
                    wire::release(b, gtid)
                });
            }
            if let Some(d) = tx.dist.as_mut() {
                d.touched = coord::IslandSet::EMPTY;
            }
            let r = tx.commit();
            self.pool.free_ctx(c);
            if r.is_ok() {
                bump(&self.counts().distributed_commits);
            }
            return r.map(HomeCommit::Released);
        }
        // Every write lock is taken, and every new secondary-index entry
        // added, on every island, before any branch is asked to prepare: at
        // prepare a read-only branch releases its locks and a branch
        // validates its scans and misses, so a lock taken or an entry added
        // at another branch's prepare could come after them, and two-phase
        // locking would break (issue 22's write skew between two deletes),
        // or a scan validated in between would miss a writer it follows.
        // This island's rows are locked and indexed now; other islands' by
        // a LOCK round first, which starts the two-phase commit once every
        // island has answered.
        let prev = phases::switch(phases::Phase::Locking);
        let locked = tx.lock_pending_rows();
        if locked.is_ok() {
            tx.add_secondary_entries();
        }
        phases::switch(prev);
        if let Err(reason) = locked {
            self.abort_home(c);
            return Err(Abort::Conflict(reason));
        }
        let round = tx.lock_round_islands();
        if !round.is_empty() {
            self.lock_remote(c, gtid, round);
            return Ok(HomeCommit::Distributed(gtid));
        }
        self.start_commit(c, gtid)
    }

    /// Starts the two-phase commit of home context `c`, every lock of which
    /// is held: ships its remote changes, makes it the home island's branch
    /// if it holds anything here, and asks every branch to prepare. On `Err`
    /// the transaction is aborted everywhere and `c` is free again.
    fn start_commit(&mut self, c: u32, gtid: Gtid) -> Result<HomeCommit, Abort> {
        let tx = self.pool.ctx(c);
        debug_assert!(
            !tx.has_pending_locks(),
            "a branch would take a lock at prepare"
        );
        let (touched, mut validating) = tx
            .dist
            .as_ref()
            .map_or((coord::IslandSet::EMPTY, coord::IslandSet::EMPTY), |d| {
                (d.touched, d.validating)
            });
        let local = tx.has_local_part();
        if local && tx.has_validated_reads() {
            validating.insert(self.island);
        }
        // A branch validates its scans and misses at its prepare: a check at
        // one instant, which must come before any branch releases a lock,
        // or a writer could slip in between and restore what a scan saw
        // (a cycle). Branches prepare in parallel, so a branch releases at
        // its prepare (votes read-only) only when no other branch
        // validates; otherwise it holds every lock until the decision.
        let holds = |island: IslandId| {
            let mut others = validating;
            others.remove(island);
            !others.is_empty()
        };
        let mut hold = coord::IslandSet::EMPTY;
        for island in touched.iter().filter(|&i| holds(i)) {
            hold.insert(island);
        }
        let now = self.now_us();
        self.ship_remote(c, hold);
        let mut parts: Vec<IslandId> = touched.iter().collect();
        if local {
            self.home_branch(c, gtid, now, holds(self.island))?;
            parts.push(self.island);
        } else {
            self.pool.ctx(c).abort();
            self.pool.free_ctx(c);
        }
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        if let Err(e) = self.coord.begin_commit(gtid, &parts, now, &mut actions) {
            // Full: abort every branch; nothing was decided.
            for island in parts {
                actions.push(Action::Send {
                    to: island,
                    msg: Msg::AbortReq { gtid },
                });
            }
            self.run_actions(&mut actions, true);
            self.actions = actions;
            let _ = e;
            return Err(Abort::Conflict(AbortReason::Remote));
        }
        self.run_actions(&mut actions, true);
        self.actions = actions;
        Ok(HomeCommit::Distributed(gtid))
    }

    /// Sends the LOCK round of home context `c` to `islands` (see
    /// `commit_home`), each LOCK after the changes to that island's rows;
    /// its two-phase commit starts once every one answered.
    fn lock_remote(&mut self, c: u32, gtid: Gtid, islands: coord::IslandSet) {
        let counts = self.ship_changes(c, gtid, islands);
        let tx = self.pool.ctx(c);
        let tag = tx.begin_lock_round();
        if let Some(d) = tx.dist.as_mut() {
            d.shipped = islands;
        }
        let cl = &self.cl;
        for island in islands.iter() {
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(self.outbox.batch(&*cl.transport, to), |b| {
                tx.encode_lock(b, island, gtid, tag, counts[island as usize])
            });
        }
        self.locking.push(Locking {
            gtid,
            ctx: c,
            tag,
            waiting: islands,
            since_us: self.now_us(),
            confirm: false,
        });
    }

    /// The reply of `island` to entry `i` of `locking`.
    fn on_lock_reply(&mut self, i: usize, island: IslandId, status: Status) {
        if !matches!(status, Status::Ok { .. }) {
            return self.fail_locking(i);
        }
        let l = &mut self.locking[i];
        if !l.waiting.contains(island) {
            return; // a duplicate
        }
        l.waiting.remove(island);
        let (c, gtid, done) = (l.ctx, l.gtid, l.waiting.is_empty());
        self.pool.ctx(c).locked_on(island);
        if !done {
            return;
        }
        let l = self.locking.swap_remove(i);
        if l.confirm {
            self.abort_home(c);
            self.confirmed.push((gtid, true));
            return;
        }
        if let Some(d) = self.pool.ctx(c).dist.as_mut() {
            d.tag = 0;
        }
        if self.start_commit(c, gtid).is_err() {
            self.outcomes.push((gtid, None));
        }
    }

    /// Entry `i` of `locking` failed (a conflict, a refusal, no answer in
    /// time): the transaction aborts everywhere, and its client hears so.
    fn fail_locking(&mut self, i: usize) {
        let l = self.locking.swap_remove(i);
        self.abort_home(l.ctx);
        if l.confirm {
            self.confirmed.push((l.gtid, false));
        } else {
            self.outcomes.push((l.gtid, None));
        }
    }

    /// Fails the LOCK rounds that have waited longer than the operation
    /// timeout (a lost request or reply, a crashed island).
    fn expire_locking(&mut self, now: u64) {
        let timeout_us = u64::try_from(self.cl.opts.op_timeout.as_micros()).unwrap_or(u64::MAX);
        let mut i = 0;
        while i < self.locking.len() {
            if now.saturating_sub(self.locking[i].since_us) >= timeout_us {
                self.fail_locking(i);
            } else {
                i += 1;
            }
        }
    }

    /// Participant: a LOCK request of the branch of `gtid` (see
    /// `commit_home`), after `writes` changes to its rows. The branch must
    /// be executing here still, with exactly those changes applied.
    fn lock_branch(&mut self, gtid: Gtid, writes: u32, entries: &[u8]) -> Status {
        let now = self.fresh_now_us();
        let Some(b) = self.pool.branches.get(&gtid) else {
            // Aborted after idling (or never begun): its reads are unprotected.
            self.cl.stats.lost_branches.fetch_add(1, Ordering::Relaxed);
            return Status::Refused;
        };
        // Every change shipped ahead of the LOCK must be here: with one
        // lost or overtaken, the entries added would not be those of the
        // images that commit.
        if b.expect.is_some()
            || b.bad
            || b.applied != writes
            || self.part.on_branch_begin(gtid, now).is_err()
        {
            return Status::Refused;
        }
        let prev = phases::switch(phases::Phase::Locking);
        let r = self.pool.ctx(b.ctx).lock_rows(entries);
        phases::switch(prev);
        match r {
            Ok(()) => wire::OK,
            Err(Abort::Conflict(reason)) => Status::Conflict(reason),
            Err(_) => {
                self.cl
                    .stats
                    .protocol_violations
                    .fetch_add(1, Ordering::Relaxed);
                Status::Refused
            }
        }
    }

    /// Makes home context `c` the home island's own branch of `gtid` (its
    /// participant prepares it like any other). On `Err` (the participant's
    /// table is full) the transaction is aborted everywhere and `c` is free.
    fn home_branch(&mut self, c: u32, gtid: Gtid, now: u64, hold: bool) -> Result<(), Abort> {
        if self.part.on_branch_begin(gtid, now).is_err() {
            self.abort_home(c);
            return Err(Abort::Conflict(AbortReason::Remote));
        }
        self.pool
            .branches
            .insert(gtid, Branch::new(c, Some((0, hold))));
        Ok(())
    }

    /// Sends the changes context `c` made to rows of other islands (those
    /// the LOCK round has not sent), then a PREP to every island it
    /// touched, ahead of the PrepareReqs; those to the islands in `hold`
    /// ask the branch to hold its locks until the decision.
    fn ship_remote(&mut self, c: u32, hold: coord::IslandSet) {
        let Some(d) = self.pool.ctx(c).dist.as_ref() else {
            return;
        };
        let (gtid, touched, shipped) = (d.gtid, d.touched, d.shipped);
        let counts = self.ship_changes(c, gtid, touched.minus(shipped));
        let cl = &self.cl;
        let outbox = &mut self.outbox;
        for island in touched.iter() {
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(outbox.batch(&*cl.transport, to), |b| {
                wire::prep(b, gtid, counts[island as usize], hold.contains(island))
            });
        }
    }

    /// Sends the changes context `c` made to rows of `islands` (WRITE /
    /// DELETE frames). Returns, per island, how many changes the context
    /// made there, shipped now or not.
    fn ship_changes(
        &mut self,
        c: u32,
        gtid: Gtid,
        islands: coord::IslandSet,
    ) -> [u32; coord::MAX_ISLANDS] {
        let tx = self.pool.ctx(c);
        let mut counts = [0u32; coord::MAX_ISLANDS];
        let cl = &self.cl;
        let outbox = &mut self.outbox;
        tx.for_each_remote_change(|island, table, key, row| {
            counts[island as usize] += 1;
            if !islands.contains(island) {
                return;
            }
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(outbox.batch(&*cl.transport, to), |b| match row {
                Some(row) => wire::write(b, gtid, table, key, row),
                None => wire::delete(b, gtid, table, key),
            });
        });
        counts
    }

    /// [`Txn::prepare_remote`]: starts 2PC over the islands context `c`
    /// touched and this one, holding back this island's PrepareReq until the
    /// procedure is done ([`Executor::commit_home`]). The remote branches hold
    /// every lock, read locks too, until the decision (PREP with hold): the
    /// home branch takes its locks after they prepared.
    fn prepare_early(&mut self, c: u32) {
        let tx = self.pool.ctx(c);
        let d = tx.dist.as_mut().expect("distributed context");
        let (gtid, touched) = (d.gtid, d.touched);
        d.early = Early::Voting;
        self.ship_remote(c, touched);
        self.pool.ctx(c).mark_remote_shipped();
        let mut parts: Vec<IslandId> = touched.iter().collect();
        parts.push(self.island);
        let now = self.now_us();
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let home = self.island;
        match self.coord.begin_commit(gtid, &parts, now, &mut actions) {
            Ok(()) => {
                actions.retain(|a| {
                    !matches!(a, Action::Send { to, msg: Msg::PrepareReq { .. } } if *to == home)
                });
                self.early.push((gtid, c));
            }
            Err(_) => {
                // Full: nothing was decided; the branches learn it by AbortReq.
                actions.clear();
                for island in touched.iter() {
                    actions.push(Action::Send {
                        to: island,
                        msg: Msg::AbortReq { gtid },
                    });
                }
                if let Some(d) = self.pool.ctx(c).dist.as_mut() {
                    d.early = Early::Failed;
                }
                self.woken.push(c);
            }
        }
        self.run_actions(&mut actions, true);
        self.actions = actions;
    }

    /// Early prepares whose remote votes are all in (wake the procedure: it
    /// goes on with its home work) or that were aborted (wake it to fail).
    fn check_early(&mut self) {
        let mut i = 0;
        while i < self.early.len() {
            let (gtid, c) = self.early[i];
            let state = match self.coord.missing_votes(gtid) {
                Some(m) if m.iter().all(|p| p == self.island) => Early::Prepared,
                Some(_) => {
                    i += 1;
                    continue;
                }
                None => Early::Failed,
            };
            self.early.swap_remove(i);
            if let Some(d) = self.pool.ctx(c).dist.as_mut() {
                d.early = state;
            }
            self.woken.push(c);
        }
    }

    /// Commit of a home transaction whose remote branches are prepared: the
    /// home branch prepares now (its own PrepareReq, held back until here),
    /// or votes read-only if it holds nothing, and the coordinator decides.
    fn commit_home_early(&mut self, c: u32, gtid: Gtid) -> Result<HomeCommit, Abort> {
        let tx = self.pool.ctx(c);
        if tx.remote_changed_after_prepare() {
            self.abort_home(c);
            return Err(Abort::Failed(Error::Config(
                "a row of another island changed after prepare_remote: its island never \
                 received the change"
                    .into(),
            )));
        }
        let home = self.island;
        if self
            .coord
            .missing_votes(gtid)
            .is_none_or(|m| !m.contains(home))
        {
            // The coordinator gave up on it (prepare timeout) after its
            // remote votes woke the procedure: it aborted and told everyone.
            tx.abort();
            self.pool.free_ctx(c);
            return Err(Abort::Conflict(AbortReason::Remote));
        }
        let now = self.now;
        if tx.has_local_part() {
            // Prepared last: every other branch holds its locks until the
            // decision, so this one may take some at prepare, and release.
            self.home_branch(c, gtid, now, false)?;
            self.local.push_back((home, Msg::PrepareReq { gtid }));
        } else {
            // Everything the branch could have read is in this island's log
            // before the decision, so a read-only vote needs no wait here.
            tx.abort();
            self.pool.free_ctx(c);
            self.local.push_back((
                home,
                Msg::PrepareConf {
                    gtid,
                    read_only: true,
                },
            ));
        }
        // Prepare, vote and decide now, not in the next round: until the
        // decision is logged the home branch holds its (hot) rows, and this
        // worker's other transactions, polled in between, would find them
        // locked. The home Prepare needs no force (see `run_actions`).
        self.drain_local();
        let _ = self.complete_forces(); // a log failure resurfaces in `pump`
        Ok(HomeCommit::Distributed(gtid))
    }

    /// Aborts home context `c` (its procedure failed, or gave up waiting):
    /// releases it here and tells every island it touched. `c` is free again.
    pub fn abort_home(&mut self, c: u32) {
        let tx = self.pool.ctx(c);
        if let Some(d) = tx.dist.as_ref() {
            let gtid = d.gtid;
            if matches!(d.early, Early::Voting | Early::Prepared) {
                // 2PC started early: the coordinator tells every branch.
                self.early.retain(|&(g, _)| g != gtid);
                let mut actions = std::mem::take(&mut self.actions);
                actions.clear();
                self.coord.abort_preparing(gtid, &mut actions);
                self.run_actions(&mut actions, true);
                self.actions = actions;
                let tx = self.pool.ctx(c);
                tx.abort();
                self.pool.free_ctx(c);
                return;
            }
            for island in d.touched.iter() {
                let to = self
                    .cl
                    .endpoint(island, self.cl.branch_worker(island, gtid));
                push_frame_with(self.outbox.batch(&*self.cl.transport, to), |b| {
                    Msg::AbortReq { gtid }.encode(b)
                });
            }
        }
        tx.abort();
        self.pool.free_ctx(c);
    }

    /// The procedure of home context `c` stopped without asking to commit (a
    /// user abort, a failure, a panic): aborts the transaction everywhere,
    /// at once or after a confirmation, and frees `c`.
    ///
    /// Its ending tells the caller something only if what the procedure read
    /// was one view. A participant aborts a branch that idles for
    /// `branch_idle_us`, and its read locks go with it; a procedure that read
    /// on that island and went on elsewhere may have seen a state that no
    /// serial order shows (a torn total), and stopped because of it. Nothing
    /// it did commits, but its "insufficient funds" would be a lie.
    ///
    /// So an attempt on one island, younger than half the idle timeout, or
    /// whose remote branches prepared early (each held its locks from its
    /// yes vote on) is aborted at once: `None`, report the ending. Any other
    /// asks every island it touched whether its branch still holds (a LOCK
    /// round with no rows: a branch that idled out is gone, and refuses) and
    /// returns `Some(gtid)`; the answer arrives in [`Executor::confirmed`].
    pub fn end_home(&mut self, c: u32) -> Option<Gtid> {
        let tx = self.pool.ctx(c);
        let Some(d) = tx.dist.as_ref() else {
            self.abort_home(c);
            return None;
        };
        let (gtid, touched, early) = (d.gtid, d.touched, d.early);
        if touched.is_empty()
            || early == Early::Prepared
            || no_branch_idled_out(self.ticks_per_us, &self.cl.opts.timeouts, d.begin_us)
        {
            self.abort_home(c);
            return None;
        }
        if matches!(early, Early::Voting | Early::Failed) {
            // A branch asked to prepare refuses a LOCK: whether each held
            // cannot be asked before the votes are in. Retry instead.
            self.abort_home(c);
            self.confirmed.push((gtid, false));
            return Some(gtid);
        }
        let tag = tx.begin_lock_round();
        let cl = &self.cl;
        for island in touched.iter() {
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(self.outbox.batch(&*cl.transport, to), |b| {
                wire::lock(b, gtid, tag, 0, 0)
            });
        }
        self.locking.push(Locking {
            gtid,
            ctx: c,
            tag,
            waiting: touched,
            since_us: self.now_us(),
            confirm: true,
        });
        Some(gtid)
    }

    /// One round of the worker's service loop: receives every batch waiting
    /// in its mailbox, runs what they ask, completes forced log records that
    /// became durable, fires timers, and sends the outgoing batches.
    /// Returns the number of batches received.
    pub fn pump(&mut self) -> Result<usize, Error> {
        self.pump_at(phases::ticks())
    }

    /// [`Executor::pump`] with the caller's reading of [`phases::ticks`]
    /// (a worker loop reads the clock once per round, and an executor that
    /// waits for replies runs many rounds per transaction).
    pub fn pump_at(&mut self, now_ticks: u64) -> Result<usize, Error> {
        if let Some(e) = &self.pool.failed {
            return Err(e.clone());
        }
        self.now = now_ticks / self.ticks_per_us;
        let received = self.receive();
        let now = self.now_us();
        if now >= self.last_tick + 1000 {
            self.last_tick = now;
            let mut actions = std::mem::take(&mut self.actions);
            actions.clear();
            self.coord.on_tick(now, &mut actions);
            self.early_stale = true;
            self.run_actions(&mut actions, true);
            actions.clear();
            let mut eng = Engine(&mut self.pool);
            self.part.on_tick(now, &mut eng, &mut actions);
            self.run_actions(&mut actions, false);
            self.actions = actions;
            if !self.locking.is_empty() {
                self.expire_locking(now);
            }
        }
        self.complete_forces()?;
        if self.early_stale && !self.early.is_empty() {
            self.early_stale = false;
            self.check_early();
        }
        self.outbox.flush(&*self.transport, self.me);
        Ok(received)
    }

    /// Handles every batch waiting in this worker's mailbox (and the
    /// messages it sent itself); returns how many batches it took.
    fn receive(&mut self) -> usize {
        let mut received = 0;
        while let Some((from, batch)) = self.transport.recv(self.me) {
            received += 1;
            // The batch was written on another core: ask for all of its
            // lines at once rather than missing on each frame in turn.
            for line in batch.iter().step_by(64).take(PREFETCH_BATCH_LINES) {
                crate::storage::prefetch(line);
            }
            for f in frames(&batch) {
                match f {
                    Ok(payload) => self.on_frame(from, payload),
                    Err(_) => {
                        self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            self.outbox.recycle(&*self.transport, batch);
        }
        self.drain_local();
        received
    }

    /// Between two polls of home transactions: sends what they queued and
    /// serves what arrived, so that neither a request of this worker nor a
    /// reply it owes waits for the rest of the round (a round polls up to
    /// `inflight` procedures). Cheaper than [`Executor::pump_at`]: no timers,
    /// no log hand-off. Returns the batches it took.
    pub fn exchange(&mut self) -> usize {
        if self.outbox.urgent() {
            self.outbox.flush(&*self.transport, self.me);
        }
        let received = self.receive();
        if self.outbox.urgent() {
            self.outbox.flush(&*self.transport, self.me);
        }
        received
    }

    /// Hands the island's log buffer over if forced records wait for it.
    fn complete_forces(&mut self) -> Result<(), Error> {
        if self.forces.is_empty() && self.deferred.is_empty() {
            return Ok(());
        }
        let shared = self.cl.islands[self.island as usize].shared();
        if self.flush_due {
            shared.flush_urgent()?;
            self.flush_due = false;
        }
        if let Some(e) = shared.log_failure() {
            self.pool.failed = Some(e.clone());
            return Err(e);
        }
        let durable = shared.durable_seq();
        if durable < self.waiting_from {
            return Ok(());
        }
        let mut i = 0;
        while i < self.deferred.len() {
            if self.deferred[i].0 > durable {
                i += 1;
                continue;
            }
            let (_, to, msg) = self.deferred.swap_remove(i);
            self.send_msg(to, msg);
        }
        let mut i = 0;
        let mut actions = std::mem::take(&mut self.actions);
        while i < self.forces.len() {
            let (seq, by_coord, token) = self.forces[i];
            if seq > durable {
                i += 1;
                continue;
            }
            self.forces.swap_remove(i);
            actions.clear();
            let now = self.now_us();
            if by_coord {
                self.coord.on_log_durable(token, now, &mut actions);
            } else {
                self.part.on_log_durable(token, now, &mut actions);
            }
            self.run_actions(&mut actions, by_coord);
        }
        self.actions = actions;
        self.drain_local();
        self.waiting_from = self
            .forces
            .iter()
            .map(|f| f.0)
            .chain(self.deferred.iter().map(|d| d.0))
            .min()
            .unwrap_or(BatchSeq::MAX);
        Ok(())
    }

    /// Records that `forces` or `deferred` got an entry waiting for `seq`.
    fn waits_for(&mut self, seq: BatchSeq) {
        self.waiting_from = self.waiting_from.min(seq);
    }

    /// Whether this worker holds no transaction state (for a clean stop).
    pub fn quiescent(&self) -> bool {
        self.coord.in_flight() == 0
            && self.part.in_flight() == 0
            && self.pool.branches.is_empty()
            && self.forces.is_empty()
            && self.deferred.is_empty()
            && self.locking.is_empty()
            && self.outbox.is_empty()
    }

    /// Hands the island's log buffer to the log writer.
    pub fn flush_log(&mut self) -> Result<(), Error> {
        self.cl.islands[self.island as usize].shared().flush()
    }

    fn drain_local(&mut self) {
        let mut actions = std::mem::take(&mut self.actions);
        while let Some((from, msg)) = self.local.pop_front() {
            actions.clear();
            let now = self.now_us();
            if msg.to_participant() {
                let mut eng = Engine(&mut self.pool);
                self.part.on_message(from, msg, now, &mut eng, &mut actions);
                self.run_actions(&mut actions, false);
            } else {
                self.coord.on_message(from, msg, now, &mut actions);
                self.early_stale = true;
                self.run_actions(&mut actions, true);
            }
        }
        self.actions = actions;
    }

    /// Performs the actions of a state machine (`by_coord`: the coordinator's).
    fn run_actions(&mut self, actions: &mut Vec<Action>, by_coord: bool) {
        let mut i = 0;
        while i < actions.len() {
            match actions[i] {
                Action::Send {
                    to,
                    msg:
                        msg @ Msg::PrepareConf {
                            read_only: true, ..
                        },
                } if self.shared.wal.is_some() && to != self.island => {
                    // A read-only vote waits until everything the branch
                    // could have read from is durable (`sync`) or written
                    // (`async`: a process crash keeps it), as a local
                    // read-only commit's acknowledgement does: the decision
                    // that follows is forced to another island's log, and a
                    // transaction that survives a crash must not have read
                    // from one that did not. (The home island's own branch
                    // need not wait: the decision goes to this very log,
                    // after what the branch read, and the client hears of
                    // the commit once the decision is durable.)
                    let need = self.shared.append_seq.load(Ordering::Acquire);
                    if need > self.shared.durable_seq() {
                        self.deferred.push((need, to, msg));
                        self.waits_for(need);
                        self.flush_due = true;
                    } else {
                        self.send_msg(to, msg);
                    }
                }
                Action::Send { to, msg } => self.send_msg(to, msg),
                Action::Log { rec, force, token } => {
                    let seq = match rec {
                        LogRec::Prepare { gtid } => match self.pool.branches.get(&gtid) {
                            Some(b) => {
                                let c = b.ctx;
                                self.pool.ctx(c).log_prepare(gtid)
                            }
                            None => 0,
                        },
                        LogRec::Decision { gtid, commit } => {
                            let logged = if by_coord {
                                None
                            } else {
                                self.pool.decided.remove(&gtid)
                            };
                            let seq = match logged {
                                Some(seq) => seq,
                                None => self
                                    .shared
                                    .log_record(|l| l.decision(gtid, commit), by_coord),
                            };
                            if by_coord && seq != 0 {
                                self.coord_pins.insert(gtid, seq);
                            }
                            if by_coord && commit {
                                // Decided: the client hears it now (see
                                // `outcomes`), the durable Outcome is skipped.
                                self.outcomes.push((gtid, Some(seq)));
                                self.reported.push(gtid);
                                // Early lock release of the home island's own
                                // branch: the decision record is in this log, so
                                // every transaction that sees these writes is
                                // logged after it and acknowledged only once it
                                // is durable (a crash before that loses them
                                // all, and presumed abort agrees). The
                                // participant's CommitReq then finds nothing left.
                                if let Some(b) = self.pool.branches.get(&gtid) {
                                    let c = b.ctx;
                                    if self.pool.ctx(c).prepared.is_some() {
                                        self.pool.branches.remove(&gtid);
                                        self.pool.ctx(c).commit_prepared();
                                        self.pool.free_ctx(c);
                                    }
                                }
                            }
                            seq
                        }
                        LogRec::End { gtid } => {
                            let seq = self.shared.log_record(|l| l.end(gtid), false);
                            if let Some(p) = self.coord_pins.remove(&gtid) {
                                self.shared.unpin(p);
                            }
                            seq
                        }
                    };
                    // The home island's own branch needs no force of its
                    // Prepare: the commit decision goes to this same log
                    // after it, so the decision is durable only with it, and
                    // without a durable decision the branch aborts anyway
                    // (presumed abort). Its vote goes out at once.
                    let own_prepare = !by_coord
                        && matches!(rec, LogRec::Prepare { gtid } if home_of(gtid) == self.island);
                    if force && own_prepare {
                        self.forces.push((0, false, token));
                        self.waits_for(0);
                    } else if force {
                        if seq == 0 {
                            // No log: durable at once.
                            self.forces.push((0, by_coord, token));
                            self.waits_for(0);
                        } else {
                            self.forces.push((seq, by_coord, token));
                            self.waits_for(seq);
                            self.flush_due = true;
                        }
                    }
                }
                Action::Outcome { gtid, committed } => {
                    if committed {
                        bump(&self.counts().distributed_commits);
                    }
                    if !committed {
                        self.outcomes.push((gtid, None));
                    } else if let Some(i) = self.reported.iter().position(|&g| g == gtid) {
                        self.reported.swap_remove(i);
                    } else {
                        self.outcomes.push((gtid, Some(0)));
                    }
                }
                Action::Forget { .. } => {}
            }
            i += 1;
        }
        actions.clear();
    }

    /// Sends a 2PC message to the worker that handles it (this one: locally).
    fn send_msg(&mut self, to: IslandId, msg: Msg) {
        let gtid = msg.gtid();
        let worker = if msg.to_participant() {
            self.cl.branch_worker(to, gtid)
        } else {
            self.cl.home_worker(gtid)
        };
        let ep = self.cl.endpoint(to, worker);
        if ep == self.me {
            self.local.push_back((self.island, msg));
        } else {
            push_frame_with(self.outbox.batch(&*self.transport, ep), |b| msg.encode(b));
        }
    }

    fn reply(&mut self, to: Endpoint, tag: u32, status: Status, table: u16) {
        push_frame_with(self.outbox.batch(&*self.cl.transport, to), |b| {
            wire::reply_header(b, tag, status, table, 0, 0)
        });
    }

    fn on_frame(&mut self, from: Endpoint, payload: &[u8]) {
        let frame = match wire::decode(payload) {
            Ok(f) => f,
            Err(_) => {
                self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let Some(from_island) = self.cl.island_of_endpoint(from) else {
            self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let ntables = self.cl.islands[self.island as usize].catalog().tables.len();
        match frame {
            Frame::Coord(msg) => {
                let mut actions = std::mem::take(&mut self.actions);
                actions.clear();
                let now = self.now_us();
                if msg.to_participant() {
                    let mut eng = Engine(&mut self.pool);
                    self.part
                        .on_message(from_island, msg, now, &mut eng, &mut actions);
                    self.run_actions(&mut actions, false);
                } else {
                    self.coord.on_message(from_island, msg, now, &mut actions);
                    self.early_stale = true;
                    self.run_actions(&mut actions, true);
                }
                self.actions = actions;
            }
            Frame::Get {
                gtid, tag, table, ..
            }
            | Frame::MultiGet {
                gtid, tag, table, ..
            }
            | Frame::Insert {
                gtid, tag, table, ..
            }
            | Frame::Scan {
                gtid, tag, table, ..
            } => {
                if table as usize >= ntables || home_of(gtid) != from_island {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    self.reply(from, tag, Status::Refused, table);
                    return;
                }
                self.serve(from, gtid, tag, frame, wire::continues(payload));
            }
            Frame::Reply { tag, status, .. } => {
                let c = tag >> crate::txn::TAG_SEQ_BITS;
                if c as usize >= self.pool.ctxs.len() {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if !self.locking.is_empty() {
                    if let Some(i) = self.locking.iter().position(|l| l.tag == tag) {
                        return self.on_lock_reply(i, from_island, status);
                    }
                }
                let tx = self.pool.ctx(c);
                let Some(d) = tx.dist.as_mut() else { return };
                // Only the reply to the outstanding request counts; stale
                // and duplicated ones are dropped.
                if d.tag == tag && !d.reply_ready && !d.req_ready && d.tag != 0 {
                    d.reply.clear();
                    d.reply.extend_from_slice(payload);
                    d.reply_ready = true;
                    d.tag = 0;
                    self.woken.push(c);
                }
            }
            Frame::Write {
                gtid,
                table,
                key,
                row,
            } => {
                if let Some(b) = self.pool.branches.get_mut(&gtid) {
                    let ok = (table as usize) < ntables
                        && b.expect.is_none()
                        // SAFETY: a branch context has no procedure future.
                        && unsafe { &mut *self.pool.ctxs[b.ctx as usize] }.apply_write(table, key, row);
                    if ok {
                        b.applied += 1;
                    } else {
                        b.bad = true;
                    }
                }
            }
            Frame::Delete { gtid, table, key } => {
                if let Some(b) = self.pool.branches.get_mut(&gtid) {
                    let ok = (table as usize) < ntables
                        && b.expect.is_none()
                        // SAFETY: as above.
                        && unsafe { &mut *self.pool.ctxs[b.ctx as usize] }.apply_delete(table, key);
                    if ok {
                        b.applied += 1;
                    } else {
                        b.bad = true;
                    }
                }
            }
            Frame::Release { gtid } => {
                if self
                    .pool
                    .branches
                    .get(&gtid)
                    .is_some_and(|b| b.expect.is_none())
                {
                    // An abort of a branch that wrote nothing is a release;
                    // the home wants no answer.
                    let mut actions = std::mem::take(&mut self.actions);
                    actions.clear();
                    let now = self.now_us();
                    let mut eng = Engine(&mut self.pool);
                    self.part.on_message(
                        from_island,
                        Msg::AbortReq { gtid },
                        now,
                        &mut eng,
                        &mut actions,
                    );
                    actions.retain(|a| !matches!(a, Action::Send { .. }));
                    self.run_actions(&mut actions, false);
                    self.actions = actions;
                }
            }
            Frame::Lock {
                gtid,
                tag,
                writes,
                entries,
            } => {
                if self.pool.is_copy(gtid, tag) {
                    return;
                }
                let status = if home_of(gtid) == from_island {
                    self.lock_branch(gtid, writes, entries)
                } else {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    Status::Refused
                };
                self.reply(from, tag, status, 0);
            }
            Frame::Prep { gtid, writes, hold } => {
                if let Some(b) = self.pool.branches.get_mut(&gtid) {
                    if b.expect.is_none() {
                        b.expect = Some((writes, hold));
                    }
                }
            }
        }
    }

    /// Runs a remote operation on the branch of `gtid` (started on first use;
    /// a request that `continues` a branch this worker no longer holds is
    /// refused, see [`wire::CONTINUES`]).
    fn serve(&mut self, from: Endpoint, gtid: Gtid, tag: u32, frame: Frame<'_>, continues: bool) {
        // Read now, not at the round's start: a branch never seems to begin
        // before the home transaction did (the read-only shortcut in
        // `commit_home` relies on it), however long the round has run.
        let now = self.fresh_now_us();
        let table = match frame {
            Frame::Get { table, .. }
            | Frame::MultiGet { table, .. }
            | Frame::Insert { table, .. }
            | Frame::Scan { table, .. } => table,
            _ => unreachable!("serve is called for requests"),
        };
        if self.pool.is_copy(gtid, tag) {
            return;
        }
        let c = match self.pool.branches.get(&gtid) {
            Some(b) if b.expect.is_none() => {
                let c = b.ctx;
                if self.part.on_branch_begin(gtid, now).is_err() {
                    return self.reply(from, tag, Status::Refused, table);
                }
                c
            }
            // Prepared or preparing: too late for more work.
            Some(_) => return self.reply(from, tag, Status::Refused, table),
            // The branch the earlier requests made is gone (aborted after
            // sitting idle): a new one would lack its locks.
            None if continues => {
                self.cl.stats.lost_branches.fetch_add(1, Ordering::Relaxed);
                return self.reply(from, tag, Status::Refused, table);
            }
            None => {
                // Refused when full, and for a gtid whose branch finished
                // here lately: a late copy (see the module documentation).
                if self.part.on_branch_begin(gtid, now).is_err() {
                    return self.reply(from, tag, Status::Refused, table);
                }
                let Some(c) = self.pool.alloc_ctx() else {
                    let mut actions = std::mem::take(&mut self.actions);
                    actions.clear();
                    let mut eng = Engine(&mut self.pool);
                    self.part.on_message(
                        home_of(gtid),
                        Msg::AbortReq { gtid },
                        now,
                        &mut eng,
                        &mut actions,
                    );
                    // The AbortConf goes nowhere useful; the home learns from the refusal.
                    actions.retain(|a| !matches!(a, Action::Send { .. }));
                    self.run_actions(&mut actions, false);
                    self.actions = actions;
                    return self.reply(from, tag, Status::Refused, table);
                };
                self.pool.ctx(c).begin(false);
                let mut b = Branch::new(c, None);
                b.serve_once(tag);
                self.pool.branches.insert(gtid, b);
                c
            }
        };
        bump(&self.counts().remote_ops);
        let tx = self.pool.ctx(c);
        let t = self.cl.islands[self.island as usize].catalog().table(table);
        let row_bytes = (t.schema.row_words() * 8) as u32;
        let batch = self.outbox.batch(&*self.transport, from);
        let frame_at = batch.len();
        let result: Result<(), Abort> = (|| {
            match frame {
                Frame::Get {
                    key, for_update, ..
                } => {
                    let h = tx.point(table, key, for_update)?;
                    reply_row(batch, tx, tag, table, row_bytes, key, h);
                }
                Frame::MultiGet {
                    for_update, keys, ..
                } => {
                    let at = batch.len();
                    batch.extend_from_slice(&[0; 4]);
                    let start = batch.len();
                    wire::reply_header(batch, tag, wire::OK, table, row_bytes, 0);
                    let mut n = 0u32;
                    for k in keys.chunks_exact(8) {
                        let key = u64::from_le_bytes(k.try_into().expect("8 bytes"));
                        t.prefetch(key, crate::storage::Prefetch::Index);
                    }
                    for k in keys.chunks_exact(8) {
                        let key = u64::from_le_bytes(k.try_into().expect("8 bytes"));
                        t.prefetch(key, crate::storage::Prefetch::Row);
                    }
                    for k in keys.chunks_exact(8) {
                        let key = u64::from_le_bytes(k.try_into().expect("8 bytes"));
                        match tx.point(table, key, for_update) {
                            Ok(Some(h)) => {
                                batch.extend_from_slice(&key.to_le_bytes());
                                batch.extend_from_slice(tx.row_bytes(h));
                                n += 1;
                            }
                            Ok(None) => {}
                            Err(e) => {
                                batch.truncate(at);
                                return Err(e);
                            }
                        }
                    }
                    let len = (batch.len() - start) as u32;
                    batch[at..at + 4].copy_from_slice(&len.to_le_bytes());
                    batch[start + wire::REPLY_N_AT..start + wire::REPLY_N_AT + 4]
                        .copy_from_slice(&n.to_le_bytes());
                }
                Frame::Insert { key, .. } => {
                    let h = tx.insert_local(table, key)?;
                    reply_row(batch, tx, tag, table, row_bytes, key, h);
                }
                Frame::Scan {
                    index,
                    lo,
                    hi,
                    limit,
                    reverse,
                    ..
                } => {
                    let sec = if index == wire::PRIMARY {
                        None
                    } else if (index as usize) < t.secondary.len() {
                        Some(crate::storage::SecondaryId(index))
                    } else {
                        return Err(Abort::Failed(Error::Protocol(format!(
                            "scan of secondary index {index} of table {table}, which has {}",
                            t.secondary.len()
                        ))));
                    };
                    let n = tx.scan_index(table, sec, lo, hi, limit as usize, reverse)?;
                    push_frame_with(batch, |b| {
                        wire::reply_header(b, tag, wire::OK, table, row_bytes, n as u32);
                        for i in 0..n {
                            let h = tx.scan_row(i);
                            b.extend_from_slice(&tx.key(h).to_le_bytes());
                            b.extend_from_slice(tx.row_bytes(h));
                        }
                    });
                }
                _ => unreachable!(),
            }
            // The flags of Status::Ok, after the frame's length word.
            let mut flags = 0;
            if tx.has_validated_reads() {
                flags |= wire::OK_VALIDATED;
            }
            if undurable_reads(&self.shared) {
                flags |= wire::OK_UNDURABLE;
            }
            batch[frame_at + 4 + wire::REPLY_FLAGS_AT] = flags;
            Ok(())
        })();
        match result {
            Ok(()) => {}
            Err(Abort::Conflict(r)) => self.reply(from, tag, Status::Conflict(r), table),
            Err(_) => self.reply(from, tag, Status::Refused, table),
        }
    }

    /// Recovery: this worker's in-doubt branches and undecided commits.
    fn recover(&mut self) -> Result<(), Error> {
        let now = self.now_us();
        let rep = &self.cl.recovered[self.island as usize];
        let mine_as_home =
            |g: Gtid| home_of(g) == self.island && self.cl.home_worker(g) == self.worker;
        // Never reuse a gtid found in any island's log, not only this one's:
        // a home that aborted a transaction logged nothing about it (presumed
        // abort), while a participant may still hold its branch prepared. A
        // new transaction of that name would answer the participant's
        // DecisionReq, and the aborted branch would commit with it. The
        // whole cluster restarts together, so every island's log is here;
        // a gtid in none of them is unknown everywhere (messages die with
        // the process), and reusing it is harmless.
        for r in self.cl.recovered.iter().flat_map(|rep| &rep.two_pc) {
            let g = r.gtid();
            if mine_as_home(g) {
                let seq = (g & ((1 << GTID_SEQ_BITS) - 1)) >> WORKER_BITS;
                self.next_seq = self.next_seq.max(seq + 1);
            }
        }
        let coord_recs: Vec<LogRec> = rep
            .two_pc
            .iter()
            .filter(|r| mine_as_home(r.gtid()))
            .copied()
            .collect();
        let part_recs: Vec<LogRec> = rep
            .two_pc
            .iter()
            .filter(|r| self.cl.branch_worker(self.island, r.gtid()) == self.worker)
            .copied()
            .collect();
        for d in &rep.in_doubt {
            if self.cl.branch_worker(self.island, d.gtid) == self.worker {
                self.pool.in_doubt.insert(d.gtid, d.clone());
            }
        }
        let mut actions = Vec::new();
        self.coord
            .recover(&coord_recs, now, &mut actions)
            .map_err(|e| Error::Recovery(format!("coordinator: {e}")))?;
        // The decisions the coordinator still has to finish stay pinned
        // until their End, as in the run that made them: a checkpoint before
        // every participant acknowledged would drop them otherwise, and a
        // second crash would turn those commits into presumed aborts.
        for r in &coord_recs {
            let LogRec::Decision { gtid, commit: true } = *r else {
                continue;
            };
            if !self.coord.holds(gtid) || self.coord_pins.contains_key(&gtid) {
                continue;
            }
            if let Some(&seq) = rep.decision_batches.get(&gtid) {
                if seq != 0 {
                    self.shared.log.lock().pin(seq);
                    self.coord_pins.insert(gtid, seq);
                }
            }
        }
        self.run_actions(&mut actions, true);
        let mut eng = Engine(&mut self.pool);
        self.part
            .recover(&part_recs, now, &mut eng, &mut actions)
            .map_err(|e| Error::Recovery(format!("participant: {e}")))?;
        self.run_actions(&mut actions, false);
        if let Some(e) = self.pool.failed.take() {
            return Err(e);
        }
        self.outbox.flush(&*self.cl.transport, self.me);
        Ok(())
    }

    /// Branches this worker holds for other islands' (and its own) transactions.
    pub fn branches_in_flight(&self) -> usize {
        self.pool.branches.len()
    }
}

impl Pool {
    /// Whether a request or LOCK with `tag` for the branch of `gtid` is a
    /// copy of one the branch has served (and answered) already; if not,
    /// the branch records it as served.
    fn is_copy(&mut self, gtid: Gtid, tag: u32) -> bool {
        self.branches
            .get_mut(&gtid)
            .is_some_and(|b| !b.serve_once(tag))
    }

    /// The context `i`. Through `&mut self` the pool lends one context at a
    /// time; the only other reference to a context is the `&mut Txn` of its
    /// suspended procedure ([`Pool::ctx_ptr`]), which is never polled while
    /// the executor runs, so the two are never used at once.
    pub(crate) fn ctx(&mut self, i: u32) -> &mut Txn {
        // SAFETY: allocated in `alloc_ctx`, freed only when the pool drops;
        // unaliased while used, as above.
        unsafe { &mut *self.ctxs[i as usize] }
    }

    /// The context `i`, to read (as [`Pool::ctx`], shared).
    pub(crate) fn ctx_ref(&self, i: u32) -> &Txn {
        // SAFETY: as in `ctx`.
        unsafe { &*self.ctxs[i as usize] }
    }

    /// A raw pointer to context `i`, for a stored procedure's future.
    pub(crate) fn ctx_ptr(&self, i: u32) -> *mut Txn {
        self.ctxs[i as usize]
    }

    fn alloc_ctx(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        if self.ctxs.len() >= self.cl.opts.contexts_per_worker() {
            return None;
        }
        let island = &self.cl.islands[self.island as usize];
        let mut tx = island.worker().ok()?;
        let id = self.ctxs.len() as u32;
        tx.dist = self
            .cl
            .router
            .as_ref()
            .map(|r| Dist::new(Arc::clone(r), self.island, id << crate::txn::TAG_SEQ_BITS));
        self.ctxs.push(Box::into_raw(Box::new(tx)));
        Some(id)
    }

    fn free_ctx(&mut self, i: u32) {
        debug_assert!(!self.free.contains(&i));
        self.free.push(i);
    }
}

/// Whether reads just done on this island may have seen writes that a crash
/// would lose: its newest appended record (read after the reads, as a local
/// read-only commit's acknowledgement is) is not durable (`sync`) or written
/// (`async`) yet. A remote branch that read such data must vote, which waits
/// for it, rather than be released. Without a log (`off`) nothing survives a
/// crash, and nothing is waited for.
/// Whether no branch of a transaction begun at `begin_us` (the protocol
/// clock, `ticks_per_us` ticks of [`phases::ticks`] each) can have been
/// aborted for idling yet: it is younger than half the idle timeout (see
/// `Executor::commit_home` on the clock this relies on).
fn no_branch_idled_out(ticks_per_us: u64, t: &Timeouts, begin_us: u64) -> bool {
    (phases::ticks() / ticks_per_us).saturating_sub(begin_us) < t.branch_idle_us / 2
}

fn undurable_reads(shared: &crate::island::Shared) -> bool {
    shared.append_seq.load(Ordering::Acquire) > shared.durable_seq()
}

/// Appends a reply with row `key` (`None`: no such row) to `batch`.
fn reply_row(
    batch: &mut Vec<u8>,
    tx: &Txn,
    tag: u32,
    table: u16,
    row_bytes: u32,
    key: u64,
    h: Option<crate::txn::RowH>,
) {
    push_frame_with(batch, |b| {
        wire::reply_header(b, tag, wire::OK, table, row_bytes, h.is_some() as u32);
        if let Some(h) = h {
            b.extend_from_slice(&key.to_le_bytes());
            b.extend_from_slice(tx.row_bytes(h));
        }
    });
}

/// The engine as the participant state machine sees it ([`coord::Branches`]):
/// the executor's contexts, borrowed apart from the machine itself.
struct Engine<'a>(&'a mut Pool);

impl coord::Branches for Engine<'_> {
    fn prepare(&mut self, gtid: Gtid) -> Vote {
        let ex = &mut *self.0;
        let Some(b) = ex.branches.get(&gtid) else {
            return Vote::No;
        };
        let Some((writes, hold)) = b.expect else {
            // PREP lost or overtaken: the branch cannot know it has all writes.
            return Vote::No;
        };
        if b.bad || b.applied != writes {
            return Vote::No;
        }
        let c = b.ctx;
        match ex.ctx(c).prepare_branch() {
            Ok(wrote) if wrote || hold => Vote::Yes,
            Ok(_) => Vote::ReadOnly,
            Err(_) => Vote::No,
        }
    }

    fn commit(&mut self, gtid: Gtid) {
        let ex = &mut *self.0;
        if let Some(b) = ex.branches.remove(&gtid) {
            // A branch with writes logs its decision before it installs and
            // releases, as every commit's record does: a transaction that
            // then sees these writes logs after them, so replay applies them
            // first (its patches are diffed against an image that holds
            // them). The participant's Log action that follows finds it
            // logged. A read-only branch (released at prepare, or held) has
            // nothing to order.
            if ex.ctx(b.ctx).has_local_writes() {
                let seq = ex.cl.islands[ex.island as usize]
                    .shared()
                    .log_record(|l| l.decision(gtid, true), false);
                ex.decided.insert(gtid, seq);
            }
            ex.ctx(b.ctx).commit_prepared();
            #[cfg(test)]
            tests::after_branch_install(&ex.cl, gtid);
            ex.free_ctx(b.ctx);
        }
    }

    fn abort(&mut self, gtid: Gtid) {
        let ex = &mut *self.0;
        if let Some(b) = ex.branches.remove(&gtid) {
            ex.ctx(b.ctx).abort();
            ex.free_ctx(b.ctx);
        }
    }

    fn restore(&mut self, gtid: Gtid) {
        let ex = &mut *self.0;
        let Some(d) = ex.in_doubt.remove(&gtid) else {
            return;
        };
        let Some(c) = ex.alloc_ctx() else {
            ex.failed = Some(Error::Recovery(format!(
                "no transaction context left to restore in-doubt branch {gtid:#x}"
            )));
            return;
        };
        let tx = ex.ctx(c);
        tx.begin(false);
        match tx.restore_branch(d.tid, d.seq, &d.writes) {
            Ok(()) => {
                ex.branches.insert(gtid, Branch::new(c, Some((0, true))));
            }
            Err(e) => {
                tx.abort();
                ex.free_ctx(c);
                ex.failed = Some(Error::Recovery(format!(
                    "cannot restore in-doubt branch {gtid:#x}: {e}"
                )));
            }
        }
    }
}
