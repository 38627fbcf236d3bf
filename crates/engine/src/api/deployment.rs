//! Opening, serving and shutting down a deployment.

use crate::transport::{Bell, Endpoint, Transport};
use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::{ArrayQueue, SegQueue};
use crossbeam_utils::CachePadded;

use super::block::{self, BlockRun, BlockShared, Current, Statement};
use super::catalog::{Catalog, Home, Partition, ProcDef, SiteOf};
use super::open::{load_islands, open_islands, Expect};
use super::value::{Args, Row, Value};
use super::CallError;
use crate::cc::CcKind;
use crate::deploy::{self, DeploySpec, Plan};
use crate::executor::run::ClusterWorker;
use crate::executor::{Cluster, ClusterOptions, Member};
use crate::island::{Island, IslandConfig, Opening, RecoveryReport};
use crate::proc::rng::FastRng;
use crate::proc::run::{log_failure, watch_until, FAILED, MEASURE, STOP};
use crate::proc::stats::ProgressCounter;
use crate::proc::{Both, Outcome, Suspend, Workload};
use crate::route::{IslandId, Router};
use crate::storage::{RowMut, TableId};
use crate::threads::{Role, ThreadRegistry};
use crate::topology::Topology;
use crate::transport::peer::PeerState;
use crate::txn::Txn;
use crate::wal::Durability;
use crate::{Abort, Error};

/// How to open a deployment, beyond the plan.
#[derive(Clone)]
pub struct Options {
    /// The islands, their placement and workers, the sites, the durability
    /// mode and the log directory (island `i` logs to `log_dir/island-<i>`),
    /// as `islands plan` and the TOML deployment file describe them. The
    /// concurrency control must be `no_wait` or left out: executors
    /// interleave transactions, which only `no_wait` allows.
    pub spec: DeploySpec,
    /// The machine to plan on; `None`: this one.
    pub topology: Option<Topology>,
    /// Calls waiting in each executor's queue before callers wait for room.
    pub queue_depth: usize,
    /// Attempts of a transaction that keeps aborting on conflicts before
    /// its call fails with [`CallError::Serialization`].
    pub max_attempts: u32,
    /// Transactions each executor keeps executing at once.
    pub txns_per_worker: usize,
    /// Distributed commits each executor keeps in flight beyond those.
    pub commits_per_worker: usize,
    /// Pin executor threads to the plan's CPUs.
    pub pin: bool,
    /// The logs' I/O seam; `None` is the file system. Tests hold back or
    /// fail writes and fdatasyncs here.
    pub log_device: Option<Arc<dyn crate::wal::LogDevice>>,
    /// The workload description every island's control file records (see
    /// [`crate::island::IslandConfig::workload`]); a reopen must give the
    /// same. `api` (the default) names no workload `islands check` knows; a
    /// catalog whose tables are a built-in workload's names it (`tpcc
    /// warehouses=2 max_orders_per_district=1000000`), so the check can
    /// rebuild its tables from the logs.
    pub workload: String,
    /// Interactive transactions ([`super::Block`]) each executor keeps open
    /// at once, in slots of their own beside `txns_per_worker`: a block
    /// holds its slot while its client thinks, so idle blocks never starve
    /// calls. A block that finds every executor of its home island full
    /// fails to begin ([`CallError::TooManyBlocks`]). At most 1024.
    pub blocks_per_worker: usize,
    /// How long a statement of a block waits for a local row's lock before
    /// it fails with [`CallError::Deadlock`] (and aborts its block).
    pub deadlock_timeout: Duration,
    /// Run only this island of the deployment in this process: the others
    /// are processes of their own, reached over the transport of the spec's
    /// `processes` settings (which it requires). `None`: every island here.
    pub island: Option<IslandId>,
    /// What the log directories of the islands opened here may hold: a new
    /// database ([`Expect::Fresh`]: loaded), a loaded one (recovered), or
    /// either ([`Expect::Either`], the default). An island opened alone
    /// cannot see its peers' directories, so a process that must not load a
    /// lost island afresh beside loaded peers says [`Expect::Recover`].
    pub expect: Expect,
    /// How long a call or statement forwarded to an island of another
    /// process waits for its answer before it fails with
    /// [`CallError::OutcomeUnknown`] (10 s): the bound on a lost CALL or
    /// CALL_REPLY while both processes stay up. Long enough for any call
    /// that runs; a home that goes down fails its calls sooner
    /// ([`CallError::IslandDown`]).
    pub forward_timeout: Duration,
    /// Wraps the transport to the deployment's other processes (with
    /// [`Options::island`]) before the executors use it: a seam for tests
    /// that lose chosen batches. `None`: the transport as it is.
    #[doc(hidden)]
    pub wrap_transport: Option<TransportWrap>,
    /// With [`Options::island`]: how long a clean stop ([`Deployment::shutdown`])
    /// waits for the two-phase commits in flight to finish (decisions sent
    /// and acknowledged by live participants, prepared branches decided by
    /// their live coordinators) before it leaves anyway, leaving what is
    /// undecided in the log for recovery.
    pub drain_timeout: Duration,
    /// With [`Options::island`]: a peer process that sent nothing, not even
    /// a heartbeat, for this long counts as down (`None`: the transport's
    /// default, 5 s). A peer that stops cleanly says goodbye and is down at
    /// once; one that dies is down once its connection closes.
    pub peer_dead_after: Option<Duration>,
}

/// See [`Options::wrap_transport`].
pub type TransportWrap = Arc<dyn Fn(Arc<dyn Transport>) -> Arc<dyn Transport> + Send + Sync>;

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("spec", &self.spec)
            .field("queue_depth", &self.queue_depth)
            .field("max_attempts", &self.max_attempts)
            .field("txns_per_worker", &self.txns_per_worker)
            .field("commits_per_worker", &self.commits_per_worker)
            .field("pin", &self.pin)
            .field("log_device", &self.log_device.is_some())
            .field("workload", &self.workload)
            .field("blocks_per_worker", &self.blocks_per_worker)
            .field("deadlock_timeout", &self.deadlock_timeout)
            .field("island", &self.island)
            .field("expect", &self.expect)
            .field("forward_timeout", &self.forward_timeout)
            .field("wrap_transport", &self.wrap_transport.is_some())
            .field("drain_timeout", &self.drain_timeout)
            .field("peer_dead_after", &self.peer_dead_after)
            .finish()
    }
}

impl Options {
    pub fn new(spec: DeploySpec) -> Options {
        Options {
            spec,
            topology: None,
            queue_depth: 1024,
            max_attempts: 100,
            txns_per_worker: 16,
            commits_per_worker: 64,
            pin: true,
            log_device: None,
            workload: "api".into(),
            blocks_per_worker: 128,
            deadlock_timeout: Duration::from_secs(1),
            island: None,
            expect: Expect::Either,
            forward_timeout: Duration::from_secs(10),
            wrap_transport: None,
            drain_timeout: Duration::from_secs(2),
            peer_dead_after: None,
        }
    }
}

/// What a load function gets: one island of a new database, the sites it
/// holds, and a loader that puts rows into it (only rows the island holds).
pub struct Load<'a> {
    island: usize,
    sites: Range<u32>,
    loader: crate::island::Loader,
    router: &'a SiteRouter,
    catalog: &'a Catalog,
}

impl Load<'_> {
    /// The island being loaded (0-based).
    pub fn island(&self) -> usize {
        self.island
    }

    /// The sites it holds.
    pub fn sites(&self) -> Range<u32> {
        self.sites.clone()
    }

    /// Whether row `key` of `table` belongs on this island (a replicated
    /// table's rows belong on every island).
    pub fn owns(&self, table: TableId, key: u64) -> bool {
        self.router
            .island_of(table, key)
            .is_none_or(|i| i as usize == self.island)
    }

    /// Puts row `key` of `table`, filling its columns with `fill`. A row
    /// that belongs on another island is refused.
    pub fn put(
        &mut self,
        table: TableId,
        key: u64,
        fill: impl FnOnce(&mut RowMut),
    ) -> Result<(), Error> {
        self.check_put(table, key)?;
        self.loader.put(table, key, fill)
    }

    /// Like [`Load::put`], building the row in `img` (a buffer reused from
    /// row to row, so a large load does not allocate per row).
    pub fn put_with(
        &mut self,
        table: TableId,
        key: u64,
        img: &mut Vec<u64>,
        fill: impl FnOnce(&mut RowMut),
    ) -> Result<(), Error> {
        self.check_put(table, key)?;
        self.loader.put_with(table, key, img, fill)
    }

    fn check_put(&self, table: TableId, key: u64) -> Result<(), Error> {
        if table as usize >= self.catalog.tables.len() {
            return Err(Error::NoSuchTable(table));
        }
        if !self.owns(table, key) {
            return Err(Error::Config(format!(
                "load: row {key} of table {} belongs on island {}, not on island {}",
                self.catalog.tables[table as usize].name,
                self.router.island_of(table, key).unwrap_or_default(),
                self.island
            )));
        }
        Ok(())
    }
}

/// Routes rows to islands by the catalog's partitioning and the plan's sites.
#[derive(Clone)]
pub(crate) struct SiteRouter {
    /// How each table's keys map to sites.
    routes: Vec<Route>,
    /// The island of each site.
    site_island: Vec<IslandId>,
    /// Per table, the site of each secondary index's keys (`None`: a scan
    /// reads the calling island's rows).
    secondary: Vec<Vec<Option<SiteOf>>>,
}

/// A table's [`Partition`], resolved against the plan's sites.
#[derive(Clone, Copy)]
enum Route {
    BySite(SiteOf),
    Range(deploy::KeyPartition),
    Replicated,
}

impl SiteRouter {
    fn new(catalog: &Catalog, plan: &Plan) -> Result<SiteRouter, Error> {
        let sites = plan.sites();
        let site_island = (0..sites).map(|s| plan.island_of_site(s)).collect();
        let routes = catalog
            .partitions
            .iter()
            .zip(&catalog.tables)
            .map(|(p, t)| match *p {
                Partition::BySite(f) => Ok(Route::BySite(f)),
                Partition::Range { keys } => deploy::partition_keys(keys, sites)
                    .map(Route::Range)
                    .map_err(|e| Error::Config(format!("table {}: {e}", t.name))),
                Partition::Replicated => Ok(Route::Replicated),
            })
            .collect::<Result<_, _>>()?;
        let mut secondary: Vec<Vec<Option<SiteOf>>> = catalog
            .tables
            .iter()
            .map(|t| vec![None; t.secondary.len()])
            .collect();
        for &(table, index, site) in &catalog.secondary_sites {
            secondary[table as usize][index.0 as usize] = Some(site);
        }
        Ok(SiteRouter {
            routes,
            site_island,
            secondary,
        })
    }

    fn island_of_site(&self, site: u32) -> IslandId {
        self.site_island[site as usize % self.site_island.len()]
    }
}

impl Router for SiteRouter {
    fn island_of(&self, table: TableId, key: u64) -> Option<IslandId> {
        match self.routes.get(table as usize)? {
            Route::BySite(site) => Some(self.island_of_site(site(key))),
            Route::Range(p) => Some(self.island_of_site(p.site_of_key(key.min(p.keys() - 1)))),
            Route::Replicated => None,
        }
    }

    fn island_of_secondary(
        &self,
        table: TableId,
        index: crate::storage::SecondaryId,
        skey: u64,
    ) -> Option<u16> {
        let site = (*self.secondary.get(table as usize)?.get(index.0 as usize)?)?;
        Some(self.island_of_site(site(skey)))
    }
}

/// Cancels the calls it goes with ([`super::Client::call_async_cancelable`]): a
/// call whose flag is set before its transaction commits is rolled back and
/// answered [`CallError::Canceled`]; a call that committed is answered with
/// its rows as usual, so a cancel never loses or fakes a commit. The
/// executor reads the flag when it begins each attempt of the call's
/// transaction (a call still queued is never run) and when the procedure
/// returns, just before the commit; a procedure's body, once begun, runs to
/// its end. Cheap to clone (clones share the flag); one flag may serve many
/// calls one after another, cleared between them ([`CancelFlag::clear`]).
#[derive(Clone, Debug, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn new() -> CancelFlag {
        CancelFlag::default()
    }

    /// Cancels the call (or calls) in flight with this flag.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Unsets the flag, for the next call. A read first: the flag's line
    /// stays shared with the executors that read it when nobody canceled.
    pub fn clear(&self) {
        if self.0.load(Ordering::Relaxed) {
            self.0.store(false, Ordering::Relaxed);
        }
    }

    pub fn is_canceled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A call on its way to an executor.
pub(crate) struct Call {
    /// The procedure to call, unless `stmt` is given.
    pub(crate) proc: u32,
    pub(crate) args: Vec<Value>,
    /// A statement to run as the transaction instead of a procedure.
    pub(crate) stmt: Option<Arc<dyn Statement>>,
    pub(crate) reply: Reply,
    pub(crate) cancel: Option<CancelFlag>,
    /// The call's home island runs in another process: the executor of
    /// this mailbox forwards it there (see `forward.rs`).
    pub(crate) forward: Option<usize>,
    /// With `forward`: it is an operation of the forwarded block of this id
    /// (see `block.rs`'s `Remote`).
    pub(crate) block: Option<(u64, block::Step)>,
}

/// A call's answer, and who waits for it.
pub(crate) type Answer = Result<Vec<Row>, CallError>;

/// Where a call's answer goes.
pub(crate) enum Reply {
    /// A caller of this process.
    Caller(oneshot::Sender<Answer>),
    /// A call forwarded by another process: the executor sends the answer
    /// back to endpoint `to` as the CALL_REPLY of call `id`.
    Peer { to: Endpoint, id: u64 },
}

impl Reply {
    /// Whether nobody waits for the answer any more (a dropped future).
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Reply::Caller(tx) => tx.is_closed(),
            Reply::Peer { .. } => false,
        }
    }

    /// Answers the call; `mb` is the mailbox of the executor that ran it.
    pub(crate) fn send(self, mb: &Mailbox, r: Answer) {
        match self {
            // A caller that stopped waiting does not want the answer.
            Reply::Caller(tx) => {
                let _ = tx.send(r);
            }
            Reply::Peer { to, id } => mb.answers.push((to, id, r)),
        }
    }
}

/// One executor's queue of calls, and how a caller wakes it.
pub(crate) struct Mailbox {
    pub(crate) queue: ArrayQueue<Call>,
    /// Blocks waiting to begin on this executor (their first operation
    /// handed), in at most `blocks_per_worker` places: a block reserves its
    /// place first ([`Mailbox::reserve_block`]).
    blocks: ArrayQueue<Arc<BlockShared>>,
    /// Blocks begun here and not yet closed (queued or running).
    open_blocks: AtomicUsize,
    /// Its executor's endpoint on the deployment's transport, whose bell
    /// the executor sleeps on: a push here, a peer's batch and a durable log
    /// batch ring it.
    transport: Arc<dyn Transport>,
    endpoint: Endpoint,
    /// Rounds in a row its executor found nothing to do (its own counter).
    idle: AtomicU32,
    /// When those rounds reached the deployment's `park_after`, in
    /// nanoseconds since `Inner::epoch` (written by its executor only).
    idle_since: AtomicU64,
    /// Callers waiting for room in `queue` ([`Mailbox::wait_for_room`]):
    /// how many, read by the executor after each pop, and their wakers.
    room_waiters: AtomicUsize,
    room_wakers: Mutex<Vec<Waker>>,
    /// Times its executor parked (its own counter).
    parks: AtomicU64,
    /// Calls homed on islands of other processes, which its executor
    /// forwards (see `forward.rs`); bounded as `queue` is.
    pub(crate) forwards: ArrayQueue<Call>,
    /// Answers of calls forwarded here by other processes, which its
    /// executor sends back (pushed by the executor itself as calls finish).
    pub(crate) answers: SegQueue<(Endpoint, u64, Answer)>,
}

impl Mailbox {
    /// Registers `waker` to be woken when the executor next takes a call
    /// from the queue, which a push found full. The caller tries its push
    /// again after this: a pop between its failed push and this
    /// registration woke nobody.
    pub(crate) fn wait_for_room(&self, waker: &Waker) {
        let mut wakers = self.room_wakers.lock().unwrap_or_else(|p| p.into_inner());
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
        self.room_waiters.store(wakers.len(), Ordering::SeqCst);
    }

    /// Pushes `call` into the `forwards` queue, waiting while it is full
    /// for its executor to take calls from it (the executor's pops wake the
    /// waiters, [`Mailbox::popped`]), with this thread parked meanwhile,
    /// until `deadline`: the call back if the queue is still full then.
    pub(crate) fn push_forward_until(&self, call: Call, deadline: Instant) -> Result<(), Call> {
        let mut call = match self.forwards.push(call) {
            Ok(()) => return Ok(()),
            Err(c) => c,
        };
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        loop {
            // Registered before the push is tried again: a pop after the
            // failed push wakes this thread, or the retry finds its room.
            self.wait_for_room(&waker);
            call = match self.forwards.push(call) {
                Ok(()) => return Ok(()),
                Err(c) => c,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(call);
            }
            std::thread::park_timeout(deadline - now);
        }
    }

    /// A call was taken from the queue: wakes the callers waiting for room.
    /// One load when none waits (the executor's path).
    pub(crate) fn popped(&self) {
        if self.room_waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        let wakers = {
            let mut w = self.room_wakers.lock().unwrap_or_else(|p| p.into_inner());
            self.room_waiters.store(0, Ordering::SeqCst);
            std::mem::take(&mut *w)
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Takes a place for one more block, if fewer than `limit` are open.
    pub(crate) fn reserve_block(&self, limit: usize) -> bool {
        self.open_blocks
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// A block of this executor closed: its place is free.
    pub(crate) fn block_closed(&self) {
        self.open_blocks.fetch_sub(1, Ordering::AcqRel);
    }

    /// A block's client handed it an operation: the executor looks at its
    /// blocks before it sleeps, and wakes if it sleeps.
    pub(crate) fn kick(&self) {
        self.notify();
    }

    /// Wakes the executor if it sleeps, or keeps it from sleeping before
    /// it looks again: called after a push.
    #[inline]
    pub(crate) fn notify(&self) {
        self.bell().ring();
    }

    /// Whether island `island`'s process is known to be down (by the
    /// transport this mailbox's executor serves on).
    pub(crate) fn island_down(&self, island: usize) -> bool {
        IslandId::try_from(island).is_ok_and(|i| self.transport.peer_down(i))
    }

    #[inline]
    fn bell(&self) -> &Bell {
        self.transport.bell(self.endpoint)
    }
}

/// Wakes a thread that waits for room in a mailbox's queue, parked
/// ([`Mailbox::push_forward_until`]).
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Idle rounds before an executor with nothing in flight parks, when its
/// peers may message it: a batch rings its bell, but a sleeping executor
/// takes a wake-up (a system call, a reschedule) to answer, so short bursts
/// of peers' requests keep it spinning.
const PARK_AFTER: u32 = 20_000;
/// The same on one island, and for an executor whose transactions wait
/// (for the log writer, for a peer's reply, for their clients): a few dozen
/// rounds and [`PARK_SOON_IDLE`]. A caller's push, a peer's batch and a
/// durable log batch ring the executor's bell, and one that spins longer
/// takes its core from the callers (the server's threads, the clients, the
/// log writer) when they share the cores, as they do on a small machine.
const PARK_SOON: u32 = 64;
/// How long such an executor stays idle before it parks, once it has idled
/// [`PARK_SOON`] rounds (which at durability `off` take well under a
/// microsecond): callers that keep calls in flight refill its queue within
/// that time, so they do not pay a wake-up per call.
const PARK_SOON_IDLE: Duration = Duration::from_micros(200);
/// How long a parked executor sleeps at most (its bell wakes it at once):
/// timers (an operation's timeout, a resend) run at this grain while it
/// sleeps.
const PARK_FOR: Duration = Duration::from_millis(1);

/// What clients and executors share.
pub(crate) struct Inner {
    pub(crate) catalog: Catalog,
    pub(crate) router: SiteRouter,
    pub(crate) mailboxes: Box<[CachePadded<Mailbox>]>,
    /// Island `i`'s executors are mailboxes `first[i]..first[i + 1]`.
    pub(crate) first: Vec<usize>,
    /// The islands whose executors run in this process (every island but
    /// where [`Options::island`] runs one alone).
    local: Vec<usize>,
    /// Accepting calls.
    pub(crate) open: AtomicBool,
    /// Why the deployment stopped, if it failed.
    pub(crate) failure: Mutex<Option<String>>,
    /// Its islands' logs: one that died is the cause of a failure before
    /// the watcher has recorded it. Weak, so that a client that outlives
    /// the deployment does not keep a log (and its directory's lock).
    logs: Vec<std::sync::Weak<crate::wal::Wal>>,
    max_attempts: u32,
    /// [`Options::blocks_per_worker`] and [`Options::deadlock_timeout`].
    pub(crate) blocks_per_worker: usize,
    pub(crate) deadlock_timeout: Duration,
    /// [`Options::forward_timeout`]: also how long a blocking call or an
    /// operation of a block homed on another process's island waits for
    /// room in the queue of the executor that forwards it.
    pub(crate) forward_timeout: Duration,
    /// Idle rounds before an executor with nothing in flight parks
    /// ([`PARK_AFTER`], [`PARK_SOON`]).
    park_after: u32,
    /// How long past those rounds it stays idle first ([`PARK_SOON_IDLE`],
    /// or zero).
    park_idle_ns: u64,
    /// The origin of `Mailbox::idle_since`.
    epoch: Instant,
    /// Each executor's published commit count (in mailbox order).
    pub(crate) committed: Vec<Arc<ProgressCounter>>,
    /// Calls homed on another process's island are forwarded there (some
    /// islands run in other processes).
    pub(crate) forwards: bool,
    /// Rebuilds the statements other processes forward here
    /// ([`Deployment::set_statement_compiler`]).
    pub(crate) compiler: std::sync::OnceLock<super::forward::StatementCompiler>,
}

impl Inner {
    /// The error of a call that the deployment did not answer.
    pub(crate) fn closed_error(&self) -> CallError {
        match self.failure() {
            Some(cause) => CallError::Stopped(cause),
            None => CallError::ShutDown,
        }
    }

    /// Why the deployment failed, if it did: what the watcher recorded, or
    /// a log that died (the executors leave at once, dropping the calls
    /// they held, before the watcher sees it).
    pub(crate) fn failure(&self) -> Option<String> {
        let recorded = self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        recorded.or_else(|| {
            self.logs.iter().find_map(|w| {
                let failed = w.upgrade()?.failed()?;
                Some(Error::from(failed).to_string())
            })
        })
    }

    /// Each island's executors' published commit counts, summed.
    pub(crate) fn committed_per_island(&self) -> Vec<u64> {
        self.first
            .windows(2)
            .map(|w| self.committed[w[0]..w[1]].iter().map(|c| c.load()).sum())
            .collect()
    }

    /// Drops every queued call and block (their callers hear
    /// [`Inner::closed_error`]).
    pub(crate) fn drain(&self) {
        for mb in self.mailboxes.iter() {
            while let Some(call) = mb.queue.pop().or_else(|| mb.forwards.pop()) {
                call.reply.send(mb, Err(self.closed_error()));
            }
            mb.popped();
            while let Some(b) = mb.blocks.pop() {
                b.close(self, self.closed_error());
            }
        }
    }

    /// Queues a new block on its mailbox (its place reserved). A block
    /// queued while the deployment closes is closed with the closing error.
    pub(crate) fn push_block(&self, b: Arc<BlockShared>) {
        let mb = &self.mailboxes[b.mailbox];
        // The reservation bounds the queue: it has room.
        if let Err(b) = mb.blocks.push(b) {
            b.close(
                self,
                CallError::Failed {
                    procedure: "BEGIN".into(),
                    error: "the executor's queue of blocks is full".into(),
                },
            );
            return;
        }
        mb.kick();
        if !self.open.load(Ordering::SeqCst) {
            self.drain();
        }
    }

    /// The home island of a call of `def` with `args` (checked), or `None`
    /// for any island.
    /// The island a call, statement or block whose home is `home` runs on
    /// (`None`: any island; one of this process's, picked by `n`).
    pub(crate) fn island_for(
        &self,
        home: Option<usize>,
        n: usize,
        procedure: &str,
    ) -> Result<usize, CallError> {
        let islands = self.first.len() - 1;
        match home {
            Some(i) if i >= islands => Err(CallError::BadArguments {
                procedure: procedure.to_string(),
                why: format!("no island {i} (the deployment has {islands})"),
            }),
            Some(i) if self.local.contains(&i) => Ok(i),
            Some(i) => Err(CallError::Elsewhere { island: i }),
            None => Ok(self.local[n % self.local.len()]),
        }
    }

    pub(crate) fn home_island(&self, def: &ProcDef, args: &[Value]) -> Option<usize> {
        match def.home {
            Home::Key { param, table } => {
                let key = match &args[param] {
                    Value::Ints(keys) => keys.first().copied().unwrap_or_default(),
                    v => v.as_int().unwrap_or_default(),
                } as u64;
                self.router.island_of(table, key).map(usize::from)
            }
            Home::Any => None,
        }
    }
}

/// A call as the executor runs it.
#[derive(Default)]
pub(crate) struct CallReq {
    proc: u32,
    args: Args,
    out: RefCell<Vec<Row>>,
    reply: Option<Reply>,
    cancel: Option<CancelFlag>,
    /// Its last attempt was rolled back for its [`CancelFlag`].
    canceled: Cell<bool>,
    /// The statement it runs instead of procedure `proc`.
    stmt: Option<Arc<dyn Statement>>,
    /// The block it runs (then `proc`, `args`, `reply` and `stmt` are unused).
    block: Option<BlockRun>,
    /// What the block's procedure suspended for ([`Workload::suspended`]).
    pub(crate) wait: Cell<Option<Suspend>>,
    /// The reply of the block's operation under way.
    pub(crate) current: Current,
}

impl CallReq {
    /// Whether the call was canceled: its [`CancelFlag`] is set, or its
    /// caller dropped the future that would have received the answer (a
    /// [`super::CallFuture`] dropped after its first poll). If so, it ends
    /// as canceled.
    fn cancel_now(&self) -> bool {
        let c = self.cancel.as_ref().is_some_and(CancelFlag::is_canceled)
            || self.reply.as_ref().is_some_and(|r| r.is_closed());
        self.canceled.set(c);
        c
    }
}

/// The abort of a canceled call (its outcome says [`CallError::Canceled`]).
const CANCELED: &str = "canceled";

/// The executors' workload: calls from their mailboxes.
struct Calls(Arc<Inner>);

impl Workload for Calls {
    type Req = CallReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["call"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut CallReq) -> usize {
        loop {
            if let Some(ty) = self.poll_next(worker, rng, req) {
                return ty;
            }
            self.idle(worker, false);
        }
    }

    fn poll_next(&self, worker: usize, _: &mut FastRng, req: &mut CallReq) -> Option<usize> {
        let mb = &self.0.mailboxes[worker];
        let call = mb.queue.pop()?;
        mb.popped();
        mb.idle.store(0, Ordering::Relaxed);
        req.proc = call.proc;
        req.args = Args(call.args);
        req.reply = Some(call.reply);
        req.cancel = call.cancel;
        req.stmt = call.stmt;
        req.canceled.set(false);
        Some(0)
    }

    fn poll_suspending(&self, worker: usize, req: &mut CallReq) -> Option<usize> {
        let mb = &self.0.mailboxes[worker];
        let shared = mb.blocks.pop()?;
        mb.idle.store(0, Ordering::Relaxed);
        req.block = Some(BlockRun {
            shared,
            inner: Arc::clone(&self.0),
        });
        req.reply = None;
        req.cancel = None;
        req.stmt = None;
        req.canceled.set(false);
        req.wait.set(None);
        Some(0)
    }

    fn suspended(&self, req: &CallReq) -> Option<Suspend> {
        req.wait.take()
    }

    fn resumable(&self, req: &CallReq) -> bool {
        req.block.as_ref().is_some_and(|b| b.shared.is_handed())
    }

    // The future is the only borrower of `req.out` while it lives;
    // `finished` borrows it after the future is dropped.
    #[allow(clippy::await_holding_refcell_ref)]
    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a CallReq) -> Result<(), Abort> {
        if let Some(b) = &req.block {
            // Boxed: a call's future stays as small as it was.
            return Box::pin(block::serve::block(&self.0, tx, req, &b.shared)).await;
        }
        if req.cancel_now() {
            return Err(Abort::User(CANCELED));
        }
        let mut out = req.out.borrow_mut();
        out.clear();
        match &req.stmt {
            None => {
                let def = &self.0.catalog.procs[req.proc as usize];
                (def.body)(tx, &req.args, &mut out).await?;
                def.check_rows(&out).map_err(|why| {
                    Abort::Failed(Error::Config(format!("procedure {}: {why}", def.name)))
                })?;
            }
            Some(stmt) => stmt.run(tx, &mut out).await?,
        }
        // The last moment a cancel takes effect: what follows is the commit.
        if req.cancel_now() {
            return Err(Abort::User(CANCELED));
        }
        Ok(())
    }

    fn finished(&self, worker: usize, req: &mut CallReq, outcome: Outcome) {
        if let Some(b) = req.block.take() {
            self.block_finished(req, b, outcome);
            return;
        }
        let Some(reply) = req.reply.take() else {
            return;
        };
        let stmt = req.stmt.take();
        let procedure = || match &stmt {
            Some(s) => s.name().to_string(),
            None => self.0.catalog.procs[req.proc as usize].name.clone(),
        };
        let r = match outcome {
            Outcome::Committed => Ok(std::mem::take(&mut *req.out.borrow_mut())),
            Outcome::UserAbort(_) if req.canceled.get() => Err(CallError::Canceled {
                procedure: procedure(),
            }),
            Outcome::UserAbort(why) => Err(CallError::Rollback {
                procedure: procedure(),
                why: why.to_string(),
            }),
            Outcome::GaveUp { attempts, last } => Err(CallError::Serialization {
                procedure: procedure(),
                attempts,
                last: last.to_string(),
            }),
            Outcome::Panicked(message) => Err(CallError::Panicked {
                procedure: procedure(),
                message,
            }),
            Outcome::Failed(Error::OutOfRange(why)) => Err(CallError::OutOfRange {
                procedure: procedure(),
                why,
            }),
            Outcome::Failed(Error::IslandDown { island }) => Err(CallError::IslandDown {
                procedure: procedure(),
                island,
            }),
            Outcome::Failed(e) => Err(CallError::Failed {
                procedure: procedure(),
                error: e.to_string(),
            }),
        };
        req.args.0.clear();
        req.cancel = None;
        reply.send(&self.0.mailboxes[worker], r);
    }

    fn max_attempts(&self, req: &CallReq) -> Option<u32> {
        // A block cannot be replayed: its client retries it.
        Some(if req.block.is_some() {
            1
        } else {
            self.0.max_attempts
        })
    }

    fn isolates_failures(&self, _: &CallReq) -> bool {
        true
    }

    fn busy_again(&self, worker: usize) {
        self.0.mailboxes[worker].idle.store(0, Ordering::Relaxed);
    }

    fn idle(&self, worker: usize, waiting: bool) {
        let mb = &self.0.mailboxes[worker];
        let (park_after, park_idle_ns) = if waiting {
            (PARK_SOON, PARK_SOON_IDLE.as_nanos() as u64)
        } else {
            (self.0.park_after, self.0.park_idle_ns)
        };
        let rounds = mb.idle.fetch_add(1, Ordering::Relaxed);
        if rounds < park_after {
            return;
        }
        if park_idle_ns > 0 {
            let now = self.0.epoch.elapsed().as_nanos() as u64;
            if rounds == park_after {
                mb.idle_since.store(now, Ordering::Relaxed);
                return;
            }
            if now.saturating_sub(mb.idle_since.load(Ordering::Relaxed)) < park_idle_ns {
                return;
            }
        }
        // A push, a block's operation, a peer's batch or a durable log
        // batch rings the bell after it is visible: one since the last
        // sleep keeps the executor awake for another look.
        let bell = mb.bell();
        if bell.prepare_sleep() {
            let quiet = mb.queue.is_empty()
                && mb.blocks.is_empty()
                && mb.forwards.is_empty()
                && mb.answers.is_empty();
            if quiet && self.0.open.load(Ordering::SeqCst) {
                mb.parks.fetch_add(1, Ordering::Relaxed);
                bell.sleep(PARK_FOR);
            } else {
                bell.cancel_sleep();
            }
        }
    }
}

impl Calls {
    /// A block's request ended as `outcome`: the operation under way (a
    /// commit, a rollback, a statement ended by the executor) is answered,
    /// and the block closed (its later operations refused).
    fn block_finished(&self, req: &mut CallReq, b: BlockRun, outcome: Outcome) {
        let current = req.current.get_mut().take();
        let rolling_back = matches!(current, Some((_, block::Who::Rollback)));
        let procedure = || match &current {
            Some((_, who)) => who.name(&self.0),
            None => "BEGIN".to_string(),
        };
        let r = match outcome {
            Outcome::Committed => Ok(Vec::new()),
            Outcome::UserAbort(block::serve::ROLLBACK) => Ok(Vec::new()),
            Outcome::UserAbort(crate::executor::run::STOPPED) => Err(CallError::ShutDown),
            // A rollback needs no view of the data: it stands whatever the
            // branches say.
            _ if rolling_back => Ok(Vec::new()),
            Outcome::UserAbort(why) => Err(CallError::Rollback {
                procedure: procedure(),
                why: why.to_string(),
            }),
            Outcome::GaveUp { attempts, last } => Err(CallError::Serialization {
                procedure: procedure(),
                attempts,
                last: last.to_string(),
            }),
            Outcome::Panicked(message) => Err(CallError::Panicked {
                procedure: procedure(),
                message,
            }),
            Outcome::Failed(Error::OutOfRange(why)) => Err(CallError::OutOfRange {
                procedure: procedure(),
                why,
            }),
            Outcome::Failed(Error::IslandDown { island }) => Err(CallError::IslandDown {
                procedure: procedure(),
                island,
            }),
            Outcome::Failed(e) => Err(CallError::Failed {
                procedure: procedure(),
                error: e.to_string(),
            }),
        };
        let closing = match &r {
            Err(e) => e.clone(),
            Ok(_) => CallError::Failed {
                procedure: "block".into(),
                error: "the transaction block has ended".into(),
            },
        };
        b.shared.close(&self.0, closing);
        if let Some((Some(reply), _)) = current {
            let _ = reply.send(r);
        }
        req.wait.set(None);
    }
}

/// An open deployment: islands, their executors, and the queues that
/// clients call through. [`Deployment::shutdown`] (or dropping it) stops
/// accepting calls, finishes what is in flight, flushes the logs and joins
/// every thread.
pub struct Deployment {
    pub(super) inner: Arc<Inner>,
    plan: Plan,
    islands: Vec<Island>,
    cluster: Arc<Cluster>,
    phase: Arc<AtomicU8>,
    executors: Vec<JoinHandle<Result<(), Error>>>,
    watcher: Option<JoinHandle<()>>,
    recovered: Vec<RecoveryReport>,
    threads: ThreadRegistry,
    /// The transport to the deployment's other processes (with
    /// [`Options::island`]): its I/O threads stop after the executors.
    peers: Option<crate::transport::join::Linked>,
    /// [`Options::drain_timeout`].
    drain_timeout: Duration,
}

/// One island of a deployment as this process sees it
/// ([`Deployment::islands_state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IslandState {
    pub island: IslandId,
    /// Run by this process.
    pub local: bool,
    /// Serving: a local island while the deployment has not failed; an
    /// island of another process while its connection is up.
    pub up: bool,
    /// Milliseconds since a batch or a heartbeat last came from it (islands
    /// of other processes; `None`: never heard, or a local island).
    pub last_heard_ms: Option<u64>,
    /// Its incarnation: a local island's own; another process's from its
    /// last handshake (`None`: never connected).
    pub incarnation: Option<u64>,
}

/// Reads the state of a deployment's islands and of its connections to
/// other processes; cheap to clone, kept by whoever reports them.
#[derive(Clone)]
pub struct IslandsView {
    count: usize,
    /// This process's islands.
    local: Vec<Island>,
    peers: Option<crate::transport::join::Linked>,
    inner: Arc<Inner>,
}

impl IslandsView {
    /// See [`Deployment::islands_state`].
    pub fn states(&self) -> Vec<IslandState> {
        let peers = self.peers();
        let failed = self.inner.failure().is_some();
        (0..self.count)
            .map(|i| {
                let island = i as IslandId;
                if let Some(l) = self
                    .local
                    .iter()
                    .find(|l| l.config().island_id as usize == i)
                {
                    return IslandState {
                        island,
                        local: true,
                        up: !failed,
                        last_heard_ms: None,
                        incarnation: Some(l.incarnation()),
                    };
                }
                let p = peers.iter().find(|p| p.island == island);
                IslandState {
                    island,
                    local: false,
                    up: p.is_some_and(|p| p.state == PeerState::Up),
                    last_heard_ms: p
                        .and_then(|p| p.last_heard)
                        .map(|t| t.elapsed().as_millis().min(u128::from(u64::MAX)) as u64),
                    incarnation: p.map(|p| p.incarnation).filter(|&n| n > 0),
                }
            })
            .collect()
    }

    /// See [`Deployment::peers`].
    pub fn peers(&self) -> Vec<crate::transport::peer::PeerStats> {
        self.peers.as_ref().map_or_else(Vec::new, |t| t.peers())
    }
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deployment")
            .field("plan", &self.plan.summary())
            .field("executors", &self.executors.len())
            .finish()
    }
}

impl Deployment {
    /// Plans the deployment, opens (or recovers) every island, loads a new
    /// database with `load` (called once per island, on a thread pinned to
    /// the island's first CPU, when no island's log directory holds
    /// anything), resolves branches left in doubt, starts the executors and
    /// returns once they serve. With a log, a new database is checkpointed
    /// after its load and then marked loaded in every island's control file;
    /// an open refuses a database whose load never completed, or one of
    /// whose islands' logs is lost ([`crate::island::judge_deployment_dirs`]).
    /// A recovered database keeps the site count it was made with (recorded
    /// in its control files) when the spec leaves `sites` out, and refuses
    /// another one given.
    pub fn open(
        opts: Options,
        catalog: Catalog,
        load: impl Fn(&mut Load<'_>) -> Result<(), Error> + Sync,
    ) -> Result<Deployment, Error> {
        Deployment::start(opts, catalog, load, |calls| calls)
    }

    /// [`Deployment::open`], with a second source of work on every executor:
    /// the requests `generator` makes on the executor's own thread, as a
    /// benchmark's are made ([`Workload::poll_next`], with the executor's
    /// index: island after island, its workers in order). An executor takes
    /// a queued call first, then a generated request; both run in its one
    /// loop and commit alike. For a deployment served under a background
    /// load, or to measure calls beside generated requests on the same
    /// executors. The generator's procedures reach the catalog's tables by
    /// their ids; it runs until the deployment shuts down or it has no
    /// request left to make.
    pub fn open_generating<G: Workload + 'static>(
        opts: Options,
        catalog: Catalog,
        load: impl Fn(&mut Load<'_>) -> Result<(), Error> + Sync,
        generator: G,
    ) -> Result<Deployment, Error> {
        Deployment::start(opts, catalog, load, move |calls| {
            Both::new(calls, generator)
        })
    }

    fn start<W: Workload + 'static>(
        opts: Options,
        catalog: Catalog,
        load: impl Fn(&mut Load<'_>) -> Result<(), Error> + Sync,
        workload: impl FnOnce(Calls) -> W,
    ) -> Result<Deployment, Error> {
        if catalog.tables.is_empty() {
            return Err(Error::Config("the catalog has no tables".into()));
        }
        if opts.queue_depth == 0 || opts.max_attempts == 0 {
            return Err(Error::Config(
                "queue_depth and max_attempts must be at least 1".into(),
            ));
        }
        if !(1..=1024).contains(&opts.txns_per_worker)
            || opts.commits_per_worker > 1024
            || opts.blocks_per_worker > 1024
        {
            return Err(Error::Config(format!(
                "txns_per_worker {} must be in 1..=1024, and commits_per_worker {} and \
                 blocks_per_worker {} at most 1024",
                opts.txns_per_worker, opts.commits_per_worker, opts.blocks_per_worker
            )));
        }
        if let Some(cc) = &opts.spec.cc {
            let kind: CcKind = cc.parse().map_err(Error::Config)?;
            if kind != CcKind::NoWait {
                return Err(Error::Config(format!(
                    "cc {kind}: a deployment's executors interleave transactions, which only \
                     no_wait allows (leave cc out)"
                )));
            }
        }
        let durability: Durability =
            opts.spec
                .durability
                .parse()
                .map_err(|e: crate::wal::WalError| match e {
                    // Said once: "invalid configuration: unknown durability ...".
                    crate::wal::WalError::Config(m) => Error::Config(m),
                    e => Error::Config(e.to_string()),
                })?;
        let topology = match opts.topology.clone() {
            Some(t) => t,
            None => Topology::discover().map_err(|e| Error::Config(e.to_string()))?,
        };
        let logged = durability != Durability::Off;
        let mut plan = deploy::plan(&topology, &opts.spec)?;
        let dir_of = |i: usize| super::open::island_dir(&opts.spec.log_dir, i);
        // Fresh or recovered as a whole, decided before any island's open writes to its
        // directory; a recovered database routes keys over the sites it was made with.
        let opening = if logged {
            // An island run alone judges its own directory only: its peers'
            // are theirs to judge (one may be loading while this one opens).
            let n = plan.islands().len();
            let dirs: Vec<_> = (0..n)
                .filter(|&i| opts.island.is_none_or(|k| usize::from(k) == i))
                .map(dir_of)
                .collect();
            crate::island::judge_deployment_dirs(&dirs, n)?
        } else {
            Opening::Fresh
        };
        if let Opening::Recover { sites } = opening {
            if sites != 0 && plan.sites() != sites {
                if let Some(given) = opts.spec.sites {
                    return Err(Error::Config(format!(
                        "the database in {} was made with its keys spread over {sites} sites, \
                         and the deployment gives sites = {given}: every key would be looked \
                         for on another island than the one that holds it (give sites = {sites}, \
                         or leave sites out)",
                        opts.spec.log_dir.display()
                    )));
                }
                let mut spec = opts.spec.clone();
                spec.sites = Some(sites);
                plan = deploy::plan(&topology, &spec)?;
            }
        }
        let n = plan.islands().len();
        let workers: Vec<usize> = plan.islands().iter().map(|i| i.workers as usize).collect();
        let total: usize = workers.iter().sum();
        let copts = ClusterOptions {
            inflight: opts.txns_per_worker,
            commit_window: opts.commits_per_worker,
            max_branches: ((opts.txns_per_worker + opts.commits_per_worker) * total)
                .clamp(64, 3000),
            blocks: opts.blocks_per_worker,
            forward_timeout: opts.forward_timeout,
            ..Default::default()
        };
        // The islands this process runs.
        let local: Vec<bool> = match opts.island {
            None => vec![true; n],
            Some(k) => {
                if opts.spec.processes.is_none() {
                    return Err(Error::Config(format!(
                        "island {k} alone: the deployment runs its islands as processes only \
                         when it names a transport, an id and a secret file (see the deployment \
                         file's [deployment] settings)"
                    )));
                }
                if usize::from(k) >= n {
                    return Err(Error::Config(format!(
                        "island {k}: the deployment has {n} island(s) (0 to {})",
                        n - 1
                    )));
                }
                (0..n).map(|i| i == usize::from(k)).collect()
            }
        };
        let dirs: Vec<_> = (0..n).filter(|&i| local[i]).map(dir_of).collect();
        let recorded = match logged {
            true => super::open::recorded_deployment(&dirs)?,
            false => None,
        };
        let deployment = match (&opts.spec.processes, recorded) {
            (Some(p), Some(r)) if p.id != r => {
                return Err(Error::Config(format!(
                    "{} holds deployment {r:032x}, and the deployment file says id = \"{:032x}\"",
                    dirs[0].display(),
                    p.id
                )))
            }
            (Some(p), _) => p.id,
            (None, r) => r.unwrap_or_else(crate::wal::new_deployment_id),
        };
        let threads = ThreadRegistry::new();
        let mut configs = Vec::with_capacity(n);
        for (i, ip) in plan.islands().iter().enumerate() {
            if !local[i] {
                continue;
            }
            let mut cfg = IslandConfig::new(CcKind::NoWait, ip.workers as usize);
            cfg.name = format!("island-{i}");
            cfg.island_id = i as u32;
            cfg.islands = n as u32;
            cfg.deployment = Some(deployment);
            cfg.workload = opts.workload.clone();
            cfg.sites = plan.sites();
            cfg.durability = durability;
            cfg.log_dir = logged.then(|| dir_of(i));
            cfg.contexts = copts.contexts_needed(ip.workers as usize);
            cfg.device = opts.log_device.clone();
            cfg.threads = Some(threads.clone());
            if let Some(mb) = opts.spec.checkpoint_every_mb {
                cfg.checkpoint.every_bytes = mb << 20;
            }
            if let Some(t) = opts.spec.checkpoint_every {
                cfg.checkpoint.every = t;
            }
            configs.push(cfg);
        }
        let opened = open_islands(configs, |_| catalog.tables.clone(), opts.expect)?;
        let router = SiteRouter::new(&catalog, &plan)?;
        if opened.fresh() {
            load_islands(
                &opened.islands(),
                |i| {
                    plan.islands()[i]
                        .worker_cpu(0)
                        .filter(|_| opts.pin)
                        .map(|c| c as usize)
                },
                |i, island| {
                    let mut l = Load {
                        island: i,
                        sites: plan.sites_of(i as IslandId),
                        loader: island.loader()?,
                        router: &router,
                        catalog: &catalog,
                    };
                    load(&mut l)
                },
            )?;
        }
        let mut opened = opened.islands.into_iter().peekable();
        let islands: Vec<Island> = opened.clone().map(|(i, _)| i).collect();
        let recovered: Vec<RecoveryReport> = opened.clone().map(|(_, r)| r).collect();
        let mut copts = copts;
        let mut process_transport = None;
        let mut forwarder = None;
        if let (Some(k), Some(p)) = (opts.island, &opts.spec.processes) {
            let island = &islands[0];
            let w32: Vec<u32> = workers.iter().map(|&w| w as u32).collect();
            let id = crate::transport::join::Identity {
                deployment,
                incarnations: (0..n)
                    .map(|i| {
                        if i == usize::from(k) {
                            island.incarnation()
                        } else {
                            0
                        }
                    })
                    .collect(),
                schema: island.schema_fingerprint(),
                catalog: catalog.fingerprint(),
            };
            let t = crate::transport::join::for_process_with(
                p,
                &w32,
                id.hello(k, &w32),
                copts.mailbox_depth,
                opts.peer_dead_after,
            )?;
            let transport = match &opts.wrap_transport {
                Some(wrap) => wrap(t.transport()),
                None => t.transport(),
            };
            copts.transports = vec![transport; n];
            process_transport = Some(t);
            let f = Arc::new(super::forward::Forwarder::new());
            copts.forward = Some(Arc::clone(&f) as Arc<dyn crate::executor::forward::Forwarding>);
            forwarder = Some(f);
        }
        let mut members = Vec::with_capacity(n);
        for (i, &w) in workers.iter().enumerate() {
            members.push(match (local[i], opened.next_if(|_| local[i])) {
                (_, Some((island, r))) => Member::Local(island, r),
                (false, None) => Member::Remote { workers: w },
                (true, None) => {
                    return Err(Error::Config(format!("island {i} was not opened")));
                }
            });
        }
        let cluster = Cluster::with_members(members, Arc::new(router.clone()), copts)?;
        // The mailboxes of this process's executors, island after island (an
        // island run by another process has none): executor `w` of
        // `executor::run::serve` takes mailbox `w`.
        let mut first = Vec::with_capacity(n + 1);
        let mut ends = Vec::new();
        let mut at = 0;
        for (i, &w) in workers.iter().enumerate() {
            first.push(at);
            if local[i] {
                let island = i as IslandId;
                ends.extend((0..w).map(|j| (i, cluster.endpoint(island, j))));
                at += w;
            }
        }
        first.push(at);
        let mailboxes: Box<[CachePadded<Mailbox>]> = ends
            .iter()
            .map(|&(i, endpoint)| {
                CachePadded::new(Mailbox {
                    queue: ArrayQueue::new(opts.queue_depth),
                    blocks: ArrayQueue::new(opts.blocks_per_worker.max(1)),
                    open_blocks: AtomicUsize::new(0),
                    transport: Arc::clone(cluster.transport_of(i)),
                    endpoint,
                    idle: AtomicU32::new(0),
                    idle_since: AtomicU64::new(0),
                    room_waiters: AtomicUsize::new(0),
                    room_wakers: Mutex::new(Vec::new()),
                    parks: AtomicU64::new(0),
                    forwards: ArrayQueue::new(opts.queue_depth),
                    answers: SegQueue::new(),
                })
            })
            .collect();
        let inner = Arc::new(Inner {
            catalog,
            router,
            mailboxes,
            first,
            local: (0..n).filter(|&i| local[i]).collect(),
            open: AtomicBool::new(true),
            failure: Mutex::new(None),
            logs: islands
                .iter()
                .filter_map(|i| i.wal().map(Arc::downgrade))
                .collect(),
            max_attempts: opts.max_attempts,
            blocks_per_worker: opts.blocks_per_worker,
            deadlock_timeout: opts.deadlock_timeout,
            forward_timeout: opts.forward_timeout,
            park_after: if n == 1 { PARK_SOON } else { PARK_AFTER },
            park_idle_ns: if n == 1 {
                PARK_SOON_IDLE.as_nanos() as u64
            } else {
                0
            },
            epoch: Instant::now(),
            committed: (0..ends.len()).map(|_| ProgressCounter::new()).collect(),
            forwards: forwarder.is_some(),
            compiler: std::sync::OnceLock::new(),
        });
        if let Some(f) = &forwarder {
            let endpoints = (0..n)
                .map(|i| {
                    (0..workers[i])
                        .map(|w| cluster.endpoint(i as IslandId, w))
                        .collect()
                })
                .collect();
            f.attach(Arc::clone(&inner), endpoints);
        }
        let mut cws = Vec::with_capacity(total);
        for (i, ip) in plan.islands().iter().enumerate() {
            if !local[i] {
                continue;
            }
            for w in 0..workers[i] {
                cws.push(ClusterWorker {
                    island: i,
                    worker: w,
                    cpu: ip.worker_cpu(w).filter(|_| opts.pin).map(|c| c as usize),
                    limit: None,
                });
            }
        }
        let phase = Arc::new(AtomicU8::new(MEASURE));
        let calls = Arc::new(workload(Calls(Arc::clone(&inner))));
        let registry = threads.clone();
        let island_of: Vec<u32> = cws.iter().map(|c| c.island as u32).collect();
        let executors = crate::executor::run::serve(
            &cluster,
            &cws,
            calls,
            &phase,
            &inner.committed,
            move |w| registry.enter(Role::Executor, Some(island_of[w])),
        )?;
        let watcher = {
            let (islands, phase, inner) = (islands.clone(), Arc::clone(&phase), Arc::clone(&inner));
            let registry = threads.clone();
            std::thread::Builder::new()
                .name("islands-watch".into())
                .spawn(move || {
                    let _registered = registry.enter(Role::Watcher, None);
                    watch_until(&islands, &phase, || phase.load(Ordering::Acquire) >= STOP);
                    if phase.load(Ordering::Acquire) == FAILED {
                        let cause = log_failure(&islands)
                            .map_or_else(|| "an executor failed".to_string(), |e| e.to_string());
                        *inner.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause);
                        inner.open.store(false, Ordering::SeqCst);
                        inner.drain();
                    }
                })
                .map_err(|e| Error::Config(format!("cannot start the watcher thread: {e}")))?
        };
        Ok(Deployment {
            inner,
            plan,
            islands,
            cluster,
            phase,
            executors,
            watcher: Some(watcher),
            recovered,
            threads,
            peers: process_transport,
            drain_timeout: opts.drain_timeout,
        })
    }

    /// Installs how this process rebuilds a statement that another process
    /// of the deployment forwards here (its SQL text and parameters, see
    /// [`Statement::source`]); a server installs its SQL compiler. Until
    /// one is installed, such a statement fails with
    /// [`CallError::Failed`]. The first one installed stays: `false` if one
    /// was installed before.
    pub fn set_statement_compiler(&self, compile: super::forward::StatementCompiler) -> bool {
        self.inner.compiler.set(compile).is_ok()
    }

    /// The plan the deployment runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The catalog it serves.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// Its islands.
    pub fn islands(&self) -> &[Island] {
        &self.islands
    }

    /// What opening each island recovered from its log.
    pub fn recovered(&self) -> &[RecoveryReport] {
        &self.recovered
    }

    /// See [`Client::committed_per_island`](super::Client::committed_per_island).
    pub fn committed_per_island(&self) -> Vec<u64> {
        self.inner.committed_per_island()
    }

    /// The cluster its executors run on.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// The connections to the deployment's other processes, one per island
    /// (empty when every island runs here).
    pub fn peers(&self) -> Vec<crate::transport::peer::PeerStats> {
        self.peers.as_ref().map_or_else(Vec::new, |t| t.peers())
    }

    /// Every island of the deployment, this process's and the others', in
    /// island order, as this process sees it now.
    pub fn islands_state(&self) -> Vec<IslandState> {
        self.islands_view().states()
    }

    /// A handle that reads [`Deployment::islands_state`] and
    /// [`Deployment::peers`] for as long as it is kept (a server's `SHOW`).
    pub fn islands_view(&self) -> IslandsView {
        IslandsView {
            count: self.plan.islands().len(),
            local: self.islands.clone(),
            peers: self.peers.clone(),
            inner: Arc::clone(&self.inner),
        }
    }

    /// Its threads: executors, log writers, checkpointers, the watcher,
    /// and whatever else registers there (a server's thread).
    pub fn threads(&self) -> &ThreadRegistry {
        &self.threads
    }

    /// Why the deployment stopped serving, if it failed (a log that
    /// died): every call is then answered [`CallError::Stopped`].
    pub fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    /// Times the executors of island `island` parked for want of work
    /// since the deployment opened (an executor parks after a run of idle
    /// rounds, for at most a millisecond, or until a call is pushed to it).
    pub fn executor_parks(&self, island: usize) -> u64 {
        let first = &self.inner.first;
        let Some(w) = first.get(island..=island + 1) else {
            return 0;
        };
        self.inner.mailboxes[w[0]..w[1]]
            .iter()
            .map(|mb| mb.parks.load(Ordering::Relaxed))
            .sum()
    }

    /// Stops accepting calls, finishes what is in flight (a call that has
    /// not begun is answered [`CallError::ShutDown`]), flushes the logs and
    /// joins every thread. Returns the first executor error, if one failed.
    ///
    /// With [`Options::island`] (islands as processes), a clean stop
    /// drains: calls not begun are answered at once, other processes'
    /// transactions begin no new branch here, the transactions in flight
    /// finish (a coordinator sends its decisions and waits for their
    /// acknowledgements, a prepared branch waits for its coordinator's
    /// decision; neither waits for an island whose process is down, and
    /// what it leaves stays in the log for recovery), up to
    /// [`Options::drain_timeout`]; then the log is flushed
    /// and synced, and every peer is told that this island leaves (a
    /// goodbye: it counts this island down at once) before the connections
    /// close. Past the bound the executors leave at once, and what is still
    /// undecided stays in the log for recovery, as after a crash.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        if self.executors.is_empty() && self.watcher.is_none() {
            return Ok(());
        }
        self.inner.open.store(false, Ordering::SeqCst);
        let leaving = self.peers.is_some();
        if leaving {
            self.cluster.leave();
            self.inner.drain();
        }
        let _ = self
            .phase
            .compare_exchange(MEASURE, STOP, Ordering::AcqRel, Ordering::Acquire);
        for mb in self.inner.mailboxes.iter() {
            mb.notify();
        }
        if leaving {
            self.drain_executors();
        }
        let mut first_err = None;
        for h in self.executors.drain(..) {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(Error::Config("an executor thread panicked".into()));
                }
            }
        }
        // The watcher leaves once the phase is past MEASURE.
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        self.inner.drain();
        // The logs are flushed and synced before the peers hear goodbye:
        // what this island told them (votes, acknowledgements) is durable
        // by the time they count it down.
        for i in &self.islands {
            i.shutdown();
        }
        if let Some(t) = &self.peers {
            t.shutdown();
        }
        match log_failure(&self.islands).or(first_err) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Deployment {
    /// Waits, up to the drain timeout, for the executors of a process that
    /// leaves to finish what is in flight and leave (see
    /// [`Deployment::shutdown`]); past it, makes them leave at once.
    fn drain_executors(&mut self) {
        // The watcher leaves once the phase is past MEASURE; joined first,
        // so that it never takes the forced leave below for a failure.
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        let until = Instant::now() + self.drain_timeout;
        while !self.executors.iter().all(|h| h.is_finished()) {
            if Instant::now() >= until {
                let ids: Vec<String> = self
                    .islands
                    .iter()
                    .map(|i| i.config().island_id.to_string())
                    .collect();
                eprintln!(
                    "islands: island {}: transactions still in flight after the {:?} drain of a \
                     clean stop: leaving anyway (recovery resolves what is undecided)",
                    ids.join(", "),
                    self.drain_timeout
                );
                let _ =
                    self.phase
                        .compare_exchange(STOP, FAILED, Ordering::AcqRel, Ordering::Acquire);
                for mb in self.inner.mailboxes.iter() {
                    mb.notify();
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::InProc;

    /// A mailbox of `depth` calls per queue, on a transport of its own.
    fn mailbox(depth: usize) -> Mailbox {
        Mailbox {
            queue: ArrayQueue::new(depth),
            blocks: ArrayQueue::new(1),
            open_blocks: AtomicUsize::new(0),
            transport: Arc::new(InProc::new(1, 4)),
            endpoint: Endpoint(0),
            idle: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            room_waiters: AtomicUsize::new(0),
            room_wakers: Mutex::new(Vec::new()),
            parks: AtomicU64::new(0),
            forwards: ArrayQueue::new(depth),
            answers: SegQueue::new(),
        }
    }

    fn call() -> Call {
        Call {
            proc: 0,
            args: Vec::new(),
            stmt: None,
            reply: Reply::Caller(oneshot::channel().0),
            cancel: None,
            forward: Some(1),
            block: None,
        }
    }

    /// CPU time this thread has used.
    fn thread_cpu() -> Duration {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    #[test]
    fn a_full_forwards_queue_is_waited_out_asleep_until_room_or_the_deadline() {
        let mb = Arc::new(mailbox(2));
        for _ in 0..2 {
            assert!(mb.forwards.push(call()).is_ok());
        }
        // A slow executor: it takes a call after 300 ms, as its round does.
        let slow = Duration::from_millis(300);
        let executor = {
            let mb = Arc::clone(&mb);
            std::thread::spawn(move || {
                std::thread::sleep(slow);
                assert!(mb.forwards.pop().is_some());
                mb.popped();
            })
        };
        let (t, cpu) = (Instant::now(), thread_cpu());
        let pushed = mb.push_forward_until(call(), t + Duration::from_secs(20));
        let (waited, used) = (t.elapsed(), thread_cpu() - cpu);
        assert!(pushed.is_ok(), "no room after {waited:?}");
        assert!(
            waited >= slow * 9 / 10,
            "pushed after {waited:?} into a full queue"
        );
        assert!(
            waited < Duration::from_secs(10),
            "{waited:?}: the pop did not wake it"
        );
        // A spinning or yielding waiter burns its core for the whole wait.
        assert!(
            used < Duration::from_millis(50),
            "{used:?} of CPU to wait {waited:?}"
        );
        executor.join().unwrap();
        assert_eq!(mb.forwards.len(), 2);

        // Nobody takes a call: refused at the deadline, asleep meanwhile.
        let deadline = Duration::from_millis(300);
        let (t, cpu) = (Instant::now(), thread_cpu());
        let pushed = mb.push_forward_until(call(), t + deadline);
        let (waited, used) = (t.elapsed(), thread_cpu() - cpu);
        assert!(pushed.is_err(), "pushed into a full queue");
        assert!(
            waited >= deadline,
            "refused after {waited:?}, before its deadline"
        );
        assert!(
            waited < deadline + Duration::from_secs(5),
            "refused after {waited:?}"
        );
        assert!(
            used < Duration::from_millis(50),
            "{used:?} of CPU to wait {waited:?}"
        );
    }
}
