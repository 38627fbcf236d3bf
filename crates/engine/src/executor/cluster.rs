//! The [`Cluster`]: the islands of a deployment as this process sees them,
//! the options it runs with, its counters, where each worker is reached (its
//! endpoint, the worker that holds a gtid's branch), and the making of each
//! worker's [`Executor`].
//!
//! Each island of the deployment is a [`Member`]: local (opened here, its
//! executors run here) or remote (another process runs it; this cluster
//! knows only its worker count, which fixes its endpoints). Endpoints are
//! numbered over every island, local or remote, as
//! [`crate::transport::Layout`] numbers them: island `i`'s workers are
//! `first[i]..first[i] + workers[i]`. A local island's executors send and
//! receive on that island's transport ([`Cluster::transport_of`]), which
//! reaches the remote islands' endpoints across the process boundary.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::pool::Pool;
use super::{home_worker, Executor, GtidMap, MAX_CONTEXTS, MAX_WORKERS_PER_ISLAND};
use crate::cc::CcKind;
use crate::coord::{self, home_of, Coordinator, Gtid, Participant, Timeouts};
use crate::island::{Island, RecoveryReport};
use crate::phases;
use crate::route::{IslandId, Router};
use crate::transport::{Endpoint, InProc, Outbox, Transport};
use crate::wal::BatchSeq;
use crate::{AbortReason, Error};

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
    /// Suspending requests a worker keeps open at once beyond `inflight`
    /// (interactive transactions waiting for their clients, see
    /// [`crate::proc::Workload::poll_suspending`]), each in a slot of its own.
    pub blocks: usize,
    pub timeouts: Timeouts,
    /// A home transaction waiting this long for a remote reply aborts (lost
    /// messages, a crashed island), once the worker it waits for has served
    /// its mailbox since (see [`ClusterOptions::busy_peer_max`]).
    pub op_timeout: Duration,
    /// The longest a wait on another worker (a remote reply, a LOCK round, a
    /// prepare vote) outlasts its timeout because that worker is busy: one
    /// that is polling a long procedure has not read its mailbox, so it is
    /// not silent yet. Past this, a worker that still has not served counts
    /// as silent (a stuck procedure, a worker that is gone).
    pub busy_peer_max: Duration,
    /// Mailbox depth (batches) of the default in-process transport.
    pub mailbox_depth: usize,
    /// The transport of every local island; `None` is an [`InProc`] with
    /// one mailbox per worker (only when every island is local). Unused
    /// when `transports` is not empty.
    pub transport: Option<Arc<dyn Transport>>,
    /// One transport per island (index = island id), each serving its own
    /// island's endpoints (a `Uds` or `Shm` whose `Layout::me` is that
    /// island); the entries of remote members are not used (any transport
    /// fills their place). Empty: `transport` serves every local island.
    pub transports: Vec<Arc<dyn Transport>>,
    /// Calls forwarded between this process and the deployment's others
    /// (see `executor/forward.rs`): each executor takes its port here.
    pub forward: Option<Arc<dyn super::forward::Forwarding>>,
    /// How long a call forwarded to another process waits for its answer
    /// before it fails with [`crate::api::CallError::OutcomeUnknown`] (a
    /// lost CALL or CALL_REPLY while both processes stay up; a home that
    /// goes down fails it sooner, with `IslandDown`).
    pub forward_timeout: Duration,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            inflight: 8,
            commit_window: 16,
            max_branches: 64,
            blocks: 0,
            timeouts: Timeouts::default(),
            op_timeout: Duration::from_millis(200),
            busy_peer_max: Duration::from_secs(10),
            mailbox_depth: 1024,
            transport: None,
            transports: Vec::new(),
            forward: None,
            forward_timeout: Duration::from_secs(10),
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
    pub(super) fn contexts_per_worker(&self) -> usize {
        self.inflight + self.commit_window + self.max_branches + self.blocks
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
    pub(super) workers: Box<[crossbeam_utils::CachePadded<WorkerCounts>]>,
}

/// One worker's counts (see [`ClusterStats`]).
#[derive(Debug, Default)]
pub(crate) struct WorkerCounts {
    pub(super) distributed_commits: AtomicU64,
    pub(super) remote_ops: AtomicU64,
    /// Attempts of its home transactions aborted by the engine, by
    /// [`AbortReason::index`].
    aborts: [AtomicU64; AbortReason::ALL.len()],
    /// Home transactions rolled back by their procedure.
    user_aborts: AtomicU64,
    /// Home transactions given up once their attempts ran out.
    gave_up: AtomicU64,
    /// Batches its outbox dropped: their destination refused them until
    /// they reached [`crate::transport::MAX_PENDING`].
    pub(super) dropped_batches: AtomicU64,
    /// Frames, batches and bytes its outbox handed to the transport
    /// ([`crate::transport::Sent`]), published (stored, not added) after
    /// each round's flush.
    pub(super) frames_out: AtomicU64,
    pub(super) batches_out: AtomicU64,
    pub(super) bytes_out: AtomicU64,
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
    /// Batches this island's workers dropped because their destination
    /// kept refusing them (a full mailbox, a peer that is down).
    pub dropped_batches: u64,
    /// Frames, batches and bytes this island's workers sent to other
    /// workers (of any island, their own included) through the transport:
    /// the messages of remote operations and of two-phase commit. Bytes
    /// are the batches' own, without a transport's stream or ring headers.
    pub frames_out: u64,
    pub batches_out: u64,
    pub bytes_out: u64,
}

/// Adds one to a counter only its owner thread writes: a plain store, no
/// atomic read-modify-write.
pub(super) fn bump(c: &AtomicU64) {
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
            c.dropped_batches += load(&w.dropped_batches);
            c.frames_out += load(&w.frames_out);
            c.batches_out += load(&w.batches_out);
            c.bytes_out += load(&w.bytes_out);
        }
        c
    }
}

/// One island of a cluster (see the module documentation).
// A few per cluster, moved once into it: the size of a local one's report
// costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Member {
    /// Opened in this process, with its recovery report (its executors
    /// resolve what recovery found in doubt).
    Local(Island, RecoveryReport),
    /// Run by another process, reached over the local islands' transports;
    /// `workers` fixes its endpoints.
    Remote { workers: usize },
}

/// A deployment of islands seen from this process. See the module
/// documentation.
pub struct Cluster {
    /// By island id: `None` for a remote member.
    islands: Vec<Option<Island>>,
    workers: Vec<usize>,
    base: Vec<u32>,
    /// By island id: the transport a local island's executors send and
    /// receive on (a remote member's entry is one of the local ones, never
    /// used for it).
    transports: Vec<Arc<dyn Transport>>,
    /// `None`: no transaction crosses islands (one island, or islands whose
    /// transactions each touch only their own rows). Contexts then carry no
    /// routing state and no executor sends a message (see [`Executor::messages`]).
    pub(super) router: Option<Arc<dyn Router>>,
    pub(super) recovered: Vec<RecoveryReport>,
    /// Executors take their share of `recovered` when they start (see
    /// [`Cluster::executor`]); a [`Cluster::local`] made without reports does not.
    recovers: bool,
    pub(super) opts: ClusterOptions,
    /// Workers still running client transactions: the others keep serving.
    pub(super) clients: AtomicUsize,
    /// Workers of the run that still hold or expect something (see
    /// `run::executor_loop`'s exit): a worker leaves only when every worker
    /// has been settled for a while, since a settled worker's peer may still
    /// resend it a commit whose acknowledgement was lost.
    pub(super) unsettled: AtomicUsize,
    /// This process leaves the deployment (a clean stop of islands run as
    /// processes, see `executor/down.rs`): its executors refuse new branches
    /// of transactions homed in other processes, and settle on their own
    /// state alone.
    leaving: AtomicBool,
    /// Per worker (by endpoint): its executor has recovered. When all of an
    /// island's have, they hold their own pins on the log records recovery
    /// found unfinished, and the island's recovery pins go
    /// (`Shared::release_recovery_pins`).
    recovered_worker: Vec<AtomicBool>,
    /// Per worker (by endpoint): an executor was made for it. Each takes
    /// the worker's share of `recovered` when it starts: a second one would
    /// replay what the first resolved.
    has_executor: Vec<AtomicBool>,
    /// Per worker (by endpoint), on its own cache line and written only by
    /// it: the protocol clock (µs) at the start of the latest step in which
    /// it took in its mailbox and sent what that produced, held back to the
    /// oldest vote it still owes (see `Executor::publish_served`). A wait on
    /// a worker counts as unanswered only once this passed well beyond the
    /// wait's start: until then the worker was busy, not silent. 0: it has
    /// not served yet. An in-process signal: the workers share this memory.
    /// A transport between processes must carry it to the other side (in
    /// its heartbeats, say); without it every remote worker would look
    /// busy until `busy_peer_max`.
    served_us: Box<[crossbeam_utils::CachePadded<AtomicU64>]>,
    pub stats: ClusterStats,
}

impl Cluster {
    /// A cluster over islands opened with their recovery reports (in-doubt
    /// branches are resolved by the executors), `workers[i]` worker threads
    /// on island `i`, `router` saying which island holds a key: every island
    /// of the deployment is local. A cluster of one island has nowhere to
    /// route to and keeps no router.
    pub fn new(
        islands: Vec<(Island, RecoveryReport)>,
        workers: Vec<usize>,
        router: Arc<dyn Router>,
        opts: ClusterOptions,
    ) -> Result<Arc<Cluster>, Error> {
        if islands.len() != workers.len() {
            return Err(Error::Config(
                "a cluster needs one worker count per island".into(),
            ));
        }
        let members = islands
            .into_iter()
            .map(|(i, r)| Member::Local(i, r))
            .collect();
        let router = (workers.len() > 1).then_some(router);
        Cluster::build(members, workers, router, true, opts)
    }

    /// A cluster over `members` (island `i` is `members[i]`), some of them
    /// local and the others run by other processes. The local islands run
    /// `island.config().workers` workers each. A cluster with a remote
    /// member needs a transport that reaches it (`opts.transport` or
    /// `opts.transports`): the default in-process one reaches no other
    /// process.
    pub fn with_members(
        members: Vec<Member>,
        router: Arc<dyn Router>,
        opts: ClusterOptions,
    ) -> Result<Arc<Cluster>, Error> {
        let workers: Vec<usize> = members
            .iter()
            .map(|m| match m {
                Member::Local(i, _) => i.config().workers,
                Member::Remote { workers } => *workers,
            })
            .collect();
        let remote = members.iter().any(|m| matches!(m, Member::Remote { .. }));
        if remote && opts.transport.is_none() && opts.transports.is_empty() {
            return Err(Error::Config(
                "a cluster with remote islands needs a transport that reaches them \
                 (ClusterOptions::transport or ::transports)"
                    .into(),
            ));
        }
        if !members.iter().any(|m| matches!(m, Member::Local(..))) {
            return Err(Error::Config(
                "a cluster needs at least one local island".into(),
            ));
        }
        let router = (members.len() > 1).then_some(router);
        Cluster::build(members, workers, router, true, opts)
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
        let members = islands
            .into_iter()
            .map(|i| Member::Local(i, RecoveryReport::default()))
            .collect();
        Cluster::build(members, workers, None, false, opts)
    }

    fn build(
        members: Vec<Member>,
        workers: Vec<usize>,
        router: Option<Arc<dyn Router>>,
        recovers: bool,
        opts: ClusterOptions,
    ) -> Result<Arc<Cluster>, Error> {
        let routes = router.is_some();
        if members.is_empty() || members.len() != workers.len() {
            return Err(Error::Config(
                "a cluster needs one worker count per island".into(),
            ));
        }
        if routes && members.len() > coord::MAX_ISLANDS {
            return Err(Error::Config(format!(
                "{} islands: at most {} can run two-phase commit together",
                members.len(),
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
                "{} transactions + {} commits + {} branches + {} blocks in flight per worker: at most {MAX_CONTEXTS} contexts",
                opts.inflight, opts.commit_window, opts.max_branches, opts.blocks
            )));
        }
        check_identities(&members)?;
        let mut base = Vec::with_capacity(members.len());
        let mut n = 0u32;
        for (i, (m, &w)) in members.iter().zip(&workers).enumerate() {
            if (w == 0 && routes) || w > MAX_WORKERS_PER_ISLAND {
                return Err(Error::Config(format!(
                    "island {i}: {w} workers (at least one on an island that takes part in \
                     distributed transactions, at most {MAX_WORKERS_PER_ISLAND})"
                )));
            }
            if let Member::Local(island, _) = m {
                let cfg = island.config();
                if w > cfg.workers {
                    return Err(Error::Config(format!(
                        "island {i}: {w} workers (the island was opened for {})",
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
            }
            base.push(n);
            n += w as u32;
        }
        let transports = Cluster::transports(&members, &opts, n as usize)?;
        let (islands, recovered): (Vec<Option<Island>>, Vec<RecoveryReport>) = members
            .into_iter()
            .map(|m| match m {
                Member::Local(i, r) => (Some(i), r),
                Member::Remote { .. } => (None, RecoveryReport::default()),
            })
            .unzip();
        // An executor whose transactions wait only for the log sleeps on its
        // bell: the log writer rings the island's bells (on the island's own
        // transport) when a batch is durable.
        for (i, island) in islands.iter().enumerate() {
            if let Some(wal) = island.as_ref().and_then(|i| i.wal()) {
                let t = Arc::clone(&transports[i]);
                let eps = base[i]..base[i] + workers[i] as u32;
                wal.on_durable(Some(Arc::new(move || {
                    for e in eps.clone() {
                        t.bell(Endpoint(e)).ring();
                    }
                })));
            }
        }
        Ok(Arc::new(Cluster {
            recovered_worker: (0..n).map(|_| AtomicBool::new(false)).collect(),
            has_executor: (0..n).map(|_| AtomicBool::new(false)).collect(),
            served_us: (0..n).map(|_| Default::default()).collect(),
            islands,
            workers,
            base,
            transports,
            router,
            recovered,
            recovers,
            opts,
            clients: AtomicUsize::new(0),
            unsettled: AtomicUsize::new(0),
            leaving: AtomicBool::new(false),
            stats: ClusterStats::new(n as usize),
        }))
    }

    /// The transport of each island: the one given for it, the one given
    /// for all, or a new [`InProc`] (every island local). Each must number
    /// the cluster's `n` endpoints.
    fn transports(
        members: &[Member],
        opts: &ClusterOptions,
        n: usize,
    ) -> Result<Vec<Arc<dyn Transport>>, Error> {
        let ts: Vec<Arc<dyn Transport>> = if !opts.transports.is_empty() {
            if opts.transports.len() != members.len() {
                return Err(Error::Config(format!(
                    "{} transports for {} islands: one per island (index = island id)",
                    opts.transports.len(),
                    members.len()
                )));
            }
            opts.transports.clone()
        } else {
            let t = match &opts.transport {
                Some(t) => Arc::clone(t),
                None => Arc::new(InProc::new(n, opts.mailbox_depth)) as Arc<dyn Transport>,
            };
            vec![t; members.len()]
        };
        for (i, (t, m)) in ts.iter().zip(members).enumerate() {
            if matches!(m, Member::Local(..)) && t.endpoints() != n {
                return Err(Error::Config(format!(
                    "the transport of island {i} has {} endpoints; the cluster has {n}",
                    t.endpoints()
                )));
            }
        }
        Ok(ts)
    }

    /// Island `i`, if it is local (`None` for a remote member or no such
    /// island).
    pub fn island(&self, i: usize) -> Option<&Island> {
        self.islands.get(i).and_then(Option::as_ref)
    }

    /// Starts a clean stop of this process's islands (see `leaving`); set
    /// before the run's phase moves to its end.
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::Release);
    }

    /// Whether this process leaves (see [`Cluster::leave`]).
    #[inline]
    pub fn leaving(&self) -> bool {
        self.leaving.load(Ordering::Acquire)
    }

    /// The local islands with their ids, in order.
    pub fn local_islands(&self) -> impl Iterator<Item = (usize, &Island)> {
        self.islands
            .iter()
            .enumerate()
            .filter_map(|(i, isl)| isl.as_ref().map(|isl| (i, isl)))
    }

    /// Islands of the deployment, local and remote.
    pub fn island_count(&self) -> usize {
        self.islands.len()
    }

    /// The transport local island `island`'s executors send and receive on
    /// (for a remote member, a local island's: it is not used for it).
    /// Panics past the last island.
    pub fn transport_of(&self, island: usize) -> &Arc<dyn Transport> {
        &self.transports[island]
    }

    pub fn workers(&self, island: usize) -> usize {
        self.workers[island]
    }

    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// The transport's system calls, as (send, receive) (see
    /// [`Transport::syscalls`]).
    pub fn syscalls(&self) -> (u64, u64) {
        // The local islands' transports, each once (islands of one process
        // may share one).
        let mut seen: Vec<*const ()> = Vec::new();
        let (mut send, mut recv) = (0, 0);
        for (i, _) in self.local_islands() {
            let t = &self.transports[i];
            let p = Arc::as_ptr(t) as *const ();
            if !seen.contains(&p) {
                seen.push(p);
                let (s, r) = t.syscalls();
                send += s;
                recv += r;
            }
        }
        (send, recv)
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

    /// Every worker's counters, summed.
    pub fn total_counts(&self) -> IslandCounts {
        self.stats.sum(0..self.stats.workers.len())
    }

    /// Whether worker `e` has served its mailbox in a step that began at
    /// `us` or later, or has never served it (`served_us` 0: no step of
    /// its is known, so nothing shows it busy). See `served_us`.
    pub(super) fn silent_since(&self, e: Endpoint, us: u64) -> bool {
        let served = self.served_us[e.0 as usize].load(Ordering::Acquire);
        served == 0 || served >= us
    }

    pub(super) fn publish_served_us(&self, e: Endpoint, us: u64) {
        self.served_us[e.0 as usize].store(us, Ordering::Release);
    }

    pub(crate) fn endpoint(&self, island: IslandId, worker: usize) -> Endpoint {
        Endpoint(self.base[island as usize] + worker as u32)
    }

    pub(super) fn island_of_endpoint(&self, e: Endpoint) -> Option<IslandId> {
        let i = self.base.partition_point(|&b| b <= e.0);
        (i > 0 && (e.0 - self.base[i - 1]) < self.workers[i - 1] as u32)
            .then(|| (i - 1) as IslandId)
    }

    /// The worker of `island` that holds the branch of `gtid`: the home worker
    /// on the home island, a hash of the gtid elsewhere.
    pub(super) fn branch_worker(&self, island: IslandId, gtid: Gtid) -> usize {
        if island == home_of(gtid) {
            self.home_worker(gtid)
        } else {
            (crate::storage::hash::hash_key(gtid) % self.workers[island as usize] as u64) as usize
        }
    }

    /// The worker of its home island that coordinates `gtid`: the one that
    /// began it, or, for a transaction of an earlier run with more workers
    /// there (found by recovery), one of today's, the same on every island.
    pub(super) fn home_worker(&self, gtid: Gtid) -> usize {
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
        let Some(own) = self.island(island).cloned() else {
            return Err(Error::Config(format!(
                "island {island} is remote: its executors run in its own process"
            )));
        };
        let transport = Arc::clone(&self.transports[island]);
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
            shared: Arc::clone(own.shared()),
            island: id,
            worker,
            me: self.endpoint(id, worker),
            pool: Pool {
                cl: Arc::clone(self),
                island: id,
                own: own.clone(),
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
                if let Some(window) = transport.redelivery_window() {
                    p.keep_tombstones(tombstone_us(window));
                }
                p
            },
            outbox: Outbox::new(transport.endpoints()),
            actions: Vec::new(),
            local: VecDeque::new(),
            forces: Vec::new(),
            coord_pins: GtidMap::default(),
            deferred: Vec::new(),
            waiting_from: BatchSeq::MAX,
            owed_since: u64::MAX,
            early_stale: false,
            gtids: {
                let shared = own.shared();
                let start = shared.wal.as_ref().map_or(1, |w| w.gtid_start());
                crate::coord::SeqDraw::new(start.max(1), shared.cfg.gtid_reserve.max(2))
            },
            ticks_per_us: (phases::ticks_per_us().round() as u64).max(1),
            now: 0,
            last_tick: 0,
            woken: Vec::new(),
            outcomes: Vec::new(),
            confirmed: Vec::new(),
            reported: Vec::new(),
            flush_due: false,
            handed_off_us: 0,
            published_us: 0,
            early: Vec::new(),
            locking: Vec::new(),
            peer_epoch: u64::MAX,
            down: coord::IslandSet::EMPTY,
            incarnations: vec![0; self.island_count()],
            bounced: coord::IslandSet::EMPTY,
            bounce_rounds: 0,
            down_aborted: GtidMap::default(),
            forward: self
                .opts
                .forward
                .as_ref()
                .and_then(|f| f.port(self.endpoint(id, worker), self.opts.forward_timeout)),
            transport,
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
            own.shared().release_recovery_pins();
        }
        Ok(ex)
    }
}

/// Islands opened as numbered islands of a deployment (`IslandConfig::islands` above 1)
/// must be the cluster's local islands at their places, and all of one deployment: the
/// one their configurations name, or else the one their log directories hold. (Islands
/// opened without numbers, each the only island of its own log, are not checked; nor
/// are remote members, whose handshake checks them.)
fn check_identities(members: &[Member]) -> Result<(), Error> {
    let mut deployment = None;
    for (i, m) in members.iter().enumerate() {
        let Member::Local(island, report) = m else {
            continue;
        };
        let c = island.config();
        if c.islands <= 1 {
            continue;
        }
        if c.islands as usize != members.len() || c.island_id as usize != i {
            return Err(Error::Config(format!(
                "{} was opened as island {} of {}, but it is island {i} of this cluster of {}",
                c.name,
                c.island_id,
                c.islands,
                members.len()
            )));
        }
        let d = c
            .deployment
            .or_else(|| report.control.as_ref().map(|ctl| ctl.deployment));
        match (deployment, d) {
            (Some(a), Some(b)) if a != b => {
                return Err(Error::Config(format!(
                    "{} belongs to deployment {b:032x}, the first local island of this cluster to {a:032x}",
                    c.name
                )))
            }
            (None, Some(b)) => deployment = Some(b),
            _ => {}
        }
    }
    Ok(())
}

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
