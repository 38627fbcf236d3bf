//! One island: a database instance with its tables, its concurrency control
//! scheme, its write-ahead log and its worker handles.
//!
//! Opening an island recovers it: the newest checkpoint is loaded and the log
//! after it replayed. Replay applies a logged write only if its transaction id
//! is newer than the row's (the per-row version order), so batches that
//! different workers handed to the log in any order replay to the same state.
//!
//! Invariant for a single-worker island (`cc = none`): at most one
//! [`Txn`](crate::txn::Txn) exists at a time. Its tables use single-owner
//! indexes and plain stores, so a second worker would race;
//! [`Island::worker`] refuses to create one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cc::{CcKind, ConcurrencyControl};
use crate::storage::arena::Prefaulter;
use crate::storage::{Catalog, PrefaultStats, RowCache, TableDef, TableId};
use crate::threads::{enter, Role, ThreadRegistry};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};

use crate::phases::{self, Phase};
use crate::wal::{
    BatchSeq, Durability, FsDevice, LogBuffer, LogDevice, LogIdentity, LogRecord, Wal, WalConfig,
    WalError,
};
use crate::Error;

/// How to open an island.
#[derive(Clone)]
pub struct IslandConfig {
    /// A name for messages and reports, e.g. `island-0`.
    pub name: String,
    pub cc: CcKind,
    /// Worker threads that will run transactions on this island.
    pub workers: usize,
    pub durability: Durability,
    /// Where the log and checkpoints live. Required unless durability is `off`.
    pub log_dir: Option<PathBuf>,
    /// Log segment size in bytes.
    pub segment_bytes: u64,
    /// `sync` mode: the log writer's pause between fdatasyncs, to grow groups.
    pub group_delay: std::time::Duration,
    /// Log segments written over preallocated files ([`WalConfig::preallocate`]).
    pub preallocate_log: bool,
    /// `sync` mode: a forced 2PC record (a participant's Prepare, a
    /// coordinator's decision) cuts the writer's group-commit pause short
    /// ([`Wal::expedite`]), so the locks that wait on it go sooner, at the
    /// price of more, smaller groups. Off by default: on the 2-core VM we
    /// measure on, the extra fdatasyncs cost more CPU than the shorter lock
    /// holds gave back (TPC-C across 2 islands: 71-72K txn/s with it, 96-100K
    /// without, in interleaved runs).
    pub expedite_2pc: bool,
    /// The log's I/O seam; `None` is the real file system. Tests inject
    /// write and fdatasync failures here.
    pub device: Option<Arc<dyn LogDevice>>,
    /// Transaction contexts beyond one per worker: a distributed executor
    /// keeps several transactions (and other islands' branches) in flight
    /// per worker thread.
    pub contexts: usize,
    /// This island's number in its deployment, and how many islands the deployment has:
    /// recorded in the log directory's control file when it is made, and checked against it
    /// on every later open (swapped island directories are refused).
    pub island_id: u32,
    pub islands: u32,
    /// The deployment the island belongs to (every island of one database shares it).
    /// `None`: whatever the log directory holds; a new directory gets a random one. A
    /// deployment opens its first island with `None` and the others with its id.
    pub deployment: Option<u128>,
    /// The workload and the parameters that shape its data, recorded in the control file
    /// and checked on later opens; empty: not known, not checked.
    pub workload: String,
    /// How many sites the deployment's keys are spread over: recorded in the control file
    /// when it is made, and a reopen that plans another count is refused. 0: not known,
    /// not checked.
    pub sites: u32,
    /// Checkpoints the island takes by itself while it runs (with a log):
    /// on by default. A tool that only reads a database sets it `OFF`, or a
    /// recovered log longer than the threshold gets a checkpoint at once.
    pub checkpoint: CheckpointPolicy,
    /// Where the island's own threads (its log writer, its checkpointer)
    /// register; `None`: nowhere.
    pub threads: Option<ThreadRegistry>,
    /// Gtid sequence numbers the log reserves at a time, per worker (see
    /// `coord/gtids.rs`): [`crate::coord::GTID_RESERVE`]; tests make it small
    /// to reserve often.
    pub gtid_reserve: u64,
    /// A background thread maps the arenas' chunks ahead of the workers that
    /// fill them, so that inserts take no page faults (see
    /// `storage/arena.rs`). On by default; the thread holds the tables,
    /// never the island, so a dropped island closes its log at once. Off,
    /// every chunk is faulted in by the thread that first claims rows in it.
    pub prefault: bool,
}

/// When an island with a log checkpoints by itself, from a background thread
/// ([`Island::checkpoint`] can be called besides). Each checkpoint bounds
/// what a recovery replays and lets the log before it be deleted; without
/// them a busy log grows without bound (TPC-C in `sync` mode writes tens of
/// megabytes a second), and so does recovery time. A checkpoint scans every
/// table and writes it out, off the workers' path but on the machine's cores
/// and disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Checkpoint once the log has grown this many bytes since the last
    /// checkpoint began, and at least as many as that checkpoint's file
    /// holds: a database larger than the threshold is then written out no
    /// more often than the log writes as much, which bounds the cost to the
    /// log's own. 0: not by size.
    pub every_bytes: u64,
    /// Checkpoint once this long has passed since the last checkpoint, if
    /// the log grew meanwhile. Zero: not by time.
    pub every: Duration,
}

impl CheckpointPolicy {
    /// No checkpoints but those asked for.
    pub const OFF: CheckpointPolicy = CheckpointPolicy {
        every_bytes: 0,
        every: Duration::ZERO,
    };
    /// Every 512 MiB of log, or every 5 minutes.
    pub const DEFAULT: CheckpointPolicy = CheckpointPolicy {
        every_bytes: 512 << 20,
        every: Duration::from_secs(300),
    };

    pub fn is_off(&self) -> bool {
        self.every_bytes == 0 && self.every.is_zero()
    }
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy::DEFAULT
    }
}

/// What an island's checkpoints did since it opened ([`Island::checkpoint_stats`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointStats {
    /// Checkpoints written, asked for or periodic.
    pub taken: u64,
    /// Of those, taken by the island's [`CheckpointPolicy`].
    pub periodic: u64,
    /// Periodic checkpoints that failed (each is retried once the log has
    /// grown as much again); the last one's error.
    pub failed: u64,
    pub last_error: Option<String>,
    /// Time spent in checkpoints, from the start of the scan to the deletion
    /// of the log they made redundant.
    pub seconds: f64,
    /// The newest checkpoint's file size.
    pub last_bytes: u64,
}

impl std::fmt::Debug for IslandConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IslandConfig")
            .field("name", &self.name)
            .field("cc", &self.cc)
            .field("workers", &self.workers)
            .field("durability", &self.durability)
            .field("log_dir", &self.log_dir)
            .field("segment_bytes", &self.segment_bytes)
            .field("group_delay", &self.group_delay)
            .field("preallocate_log", &self.preallocate_log)
            .field("expedite_2pc", &self.expedite_2pc)
            .field("device", &self.device.as_ref().map(|_| "custom"))
            .field("contexts", &self.contexts)
            .field("island_id", &self.island_id)
            .field("islands", &self.islands)
            .field("deployment", &self.deployment)
            .field("workload", &self.workload)
            .field("checkpoint", &self.checkpoint)
            .field("threads", &self.threads.is_some())
            .field("gtid_reserve", &self.gtid_reserve)
            .field("prefault", &self.prefault)
            .finish()
    }
}

impl IslandConfig {
    pub fn new(cc: CcKind, workers: usize) -> IslandConfig {
        IslandConfig {
            name: "island-0".into(),
            cc,
            workers,
            durability: Durability::Off,
            log_dir: None,
            segment_bytes: 64 << 20,
            group_delay: WalConfig::DEFAULT_GROUP_DELAY,
            preallocate_log: false,
            expedite_2pc: false,
            device: None,
            contexts: 0,
            island_id: 0,
            islands: 1,
            deployment: None,
            workload: String::new(),
            sites: 0,
            checkpoint: CheckpointPolicy::DEFAULT,
            threads: None,
            gtid_reserve: crate::coord::GTID_RESERVE,
            prefault: true,
        }
    }

    /// The identity the island's log directory must have ([`LogIdentity`]).
    pub fn log_identity(&self, tables: &[TableDef]) -> LogIdentity {
        LogIdentity {
            deployment: self.deployment,
            island: self.island_id,
            islands: self.islands,
            schema: crate::storage::schema_fingerprint(tables),
            workload: self.workload.clone(),
            sites: self.sites,
        }
    }

    pub fn durable(mut self, durability: Durability, dir: impl Into<PathBuf>) -> IslandConfig {
        self.durability = durability;
        self.log_dir = Some(dir.into());
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.workers == 0 {
            return Err(Error::Config(format!(
                "{}: an island needs at least one worker",
                self.name
            )));
        }
        if self.cc == CcKind::None && self.contexts != 0 {
            return Err(Error::Config(format!(
                "{}: concurrency control 'none' runs one transaction at a time; an island that serves other islands' transactions needs no_wait",
                self.name
            )));
        }
        if let Err(e) = check_cc_workers(self.cc, self.workers) {
            return Err(Error::Config(format!("{}: {e}", self.name)));
        }
        if self.island_id >= self.islands {
            return Err(Error::Config(format!(
                "{}: island {} of a deployment of {} islands",
                self.name, self.island_id, self.islands
            )));
        }
        if self.durability != Durability::Off && self.log_dir.is_none() {
            return Err(Error::Config(format!(
                "{}: durability '{}' needs a log directory",
                self.name, self.durability
            )));
        }
        Ok(())
    }
}

/// Whether concurrency control `cc` can run `workers` worker threads on one
/// island (`islands plan` asks too, so that it prints no plan a run refuses).
pub fn check_cc_workers(cc: CcKind, workers: usize) -> Result<(), String> {
    if cc == CcKind::None && workers != 1 {
        return Err(format!(
            "concurrency control 'none' needs exactly one worker per island (got {workers}); use no_wait, wait_die or occ"
        ));
    }
    Ok(())
}

/// What recovery found and did.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    pub checkpoint_rows: u64,
    pub log_records: u64,
    pub applied_writes: u64,
    pub skipped_writes: u64,
    /// A torn log tail that was cut off (or, by a recovery that only reads, ignored), as
    /// the log reported it.
    pub truncated: Option<String>,
    /// The log directory's control file as recovery found it (`None`: a new directory or
    /// no log).
    pub control: Option<crate::wal::Control>,
    /// Branches in doubt that [`Island::open_in_memory`] resolved from the decisions it
    /// was given: committed, aborted (presumed abort: no commit decision anywhere).
    /// Without a decision function they stay in `in_doubt`.
    pub resolved: (u64, u64),
    pub max_tid: u64,
    /// The 2PC records of the log, in log order (for the coordinator's and
    /// participant's recovery).
    pub two_pc: Vec<crate::coord::LogRec>,
    /// The batch of each gtid's first commit decision in the log. A recovered
    /// coordinator pins it again until the End, so that a checkpoint taken
    /// before every participant acknowledged cannot drop the decision.
    pub decision_batches: HashMap<u64, BatchSeq>,
    /// Prepared branches without a decision: in doubt until their
    /// coordinator answers. Their writes are not applied.
    pub in_doubt: Vec<InDoubt>,
    /// How long opening the log, loading the checkpoint and replaying the
    /// log took.
    pub duration: Duration,
}

/// A prepared branch found in the log without a decision.
#[derive(Clone, Debug)]
pub struct InDoubt {
    pub gtid: u64,
    pub tid: u64,
    /// The batch of its Prepare record (pinned until it is decided).
    pub seq: BatchSeq,
    pub writes: Vec<crate::wal::WriteEntry>,
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recovered {} checkpoint rows and {} log records ({} writes applied, {} superseded) in {:.2} s",
            self.checkpoint_rows,
            self.log_records,
            self.applied_writes,
            self.skipped_writes,
            self.duration.as_secs_f64()
        )?;
        if let Some(t) = &self.truncated {
            write!(f, "; {t}")?;
        }
        Ok(())
    }
}

/// State shared by an island's workers.
pub(crate) struct Shared {
    pub(crate) catalog: Catalog,
    /// [`crate::storage::schema_fingerprint`] of the island's tables.
    schema: u64,
    pub(crate) cc: Box<dyn ConcurrencyControl>,
    pub(crate) wal: Option<Arc<Wal>>,
    ts: AtomicU64,
    /// The largest tid of a committed delete. An insert reads no version of
    /// the deleted row it replaces, so its tid is taken above this: replay
    /// orders a key's versions by tid and would otherwise drop the re-insert.
    pub(crate) delete_tid: AtomicU64,
    /// The island's log buffer. Committing transactions append their redo
    /// records here under the lock, *before* they install their writes, so
    /// the log order respects every read-from dependency: a transaction that
    /// read another's writes has its record later in the log, and is
    /// acknowledged after it. Held only for the append (a few hundred bytes);
    /// an island has few workers, which is the point of islands (one log per
    /// island, as Xi et al. argue).
    pub(crate) log: CachePadded<Mutex<LogSlot>>,
    /// The batch that the newest appended record will be written in. A
    /// read-only transaction is acknowledged once this batch (read after its
    /// reads) is durable: everything it read from is then durable too.
    pub(crate) append_seq: AtomicU64,
    /// Per worker: odd while a commit is between its log append and the end
    /// of its install. The checkpointer waits for these to move (quiescence).
    pub(crate) committing: Vec<CachePadded<AtomicU64>>,
    /// Which worker handles are taken.
    slot_used: Vec<AtomicBool>,
    pub(crate) recovered_tid: u64,
    ckpt: CkptState,
    /// The thread that maps the arenas' chunks ahead of the workers
    /// (`None` with `cfg.prefault` off).
    prefaulter: Option<Arc<Prefaulter>>,
    pub(crate) cfg: IslandConfig,
}

/// An island's checkpoint bookkeeping.
struct CkptState {
    /// One checkpoint at a time: of two at once, the one with the older
    /// start could publish last and delete the newer one, whose publication
    /// had already deleted log segments that the older one needs.
    lock: Mutex<()>,
    /// The log's `bytes_written` when the last checkpoint (or failed
    /// periodic attempt) began, and the bytes of the log found at open that
    /// no checkpoint of this run covers yet: the periodic trigger's measure
    /// of the log a recovery would replay.
    base_written: AtomicU64,
    carried: AtomicU64,
    last_at: Mutex<Instant>,
    stats: Mutex<CheckpointStats>,
    signal: Arc<CkptSignal>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Stops the periodic checkpointer (also in the middle of a checkpoint).
#[derive(Default)]
struct CkptSignal {
    stop: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl CkptSignal {
    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _g = self.lock.lock();
        self.cv.notify_all();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The checkpointer and the prefaulter hold only a weak handle
        // between their passes; they leave at their next wake-up (joined by
        // `Island::shutdown` only).
        self.ckpt.signal.stop();
        if let Some(p) = &self.prefaulter {
            p.stop();
        }
    }
}

/// How often the periodic checkpointer looks at the log's growth.
const CHECKPOINT_POLL: Duration = Duration::from_millis(100);

/// The periodic checkpointer: takes a checkpoint whenever `policy` says so,
/// until the island shuts down or is dropped, or its log fails.
fn checkpointer(island: Weak<Shared>, signal: Arc<CkptSignal>, policy: CheckpointPolicy) {
    loop {
        {
            let mut g = signal.lock.lock();
            if !signal.stop.load(Ordering::Acquire) {
                signal.cv.wait_for(&mut g, CHECKPOINT_POLL);
            }
        }
        if signal.stop.load(Ordering::Acquire) {
            return;
        }
        let Some(shared) = island.upgrade() else {
            return;
        };
        let Some(wal) = shared.wal.as_ref() else {
            return;
        };
        if wal.failed().is_some() {
            return;
        }
        let ck = &shared.ckpt;
        let written = wal.stats().bytes_written;
        let grown = ck.carried.load(Ordering::Acquire)
            + written.saturating_sub(ck.base_written.load(Ordering::Acquire));
        let last_bytes = ck.stats.lock().last_bytes;
        let by_size = policy.every_bytes > 0 && grown >= policy.every_bytes.max(last_bytes);
        let by_time =
            !policy.every.is_zero() && grown > 0 && ck.last_at.lock().elapsed() >= policy.every;
        if !(by_size || by_time) {
            continue;
        }
        let island = Island {
            shared: Arc::clone(&shared),
        };
        match island.checkpoint_until(Some(&signal.stop)) {
            Ok(_) => ck.stats.lock().periodic += 1,
            Err(_) if signal.stop.load(Ordering::Acquire) => return,
            Err(e) => {
                // Retried once the log has grown as much again, not at once:
                // on a full disk every attempt writes a file in vain.
                let mut st = ck.stats.lock();
                st.failed += 1;
                st.last_error = Some(e.to_string());
                drop(st);
                ck.base_written.store(written, Ordering::Release);
                ck.carried.store(0, Ordering::Release);
                *ck.last_at.lock() = Instant::now();
            }
        }
    }
}

impl Shared {
    #[inline]
    pub(crate) fn next_ts(&self) -> u64 {
        self.ts.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn claim_slot(&self) -> Option<usize> {
        self.slot_used.iter().position(|u| {
            u.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    pub(crate) fn release_slot(&self, slot: usize) {
        self.slot_used[slot].store(false, Ordering::Release);
    }

    /// Appends a complete 2PC record (decision, end) to the island's log
    /// buffer; returns the batch it will be in (0 without a log). With `pin`
    /// the batch stays pinned against checkpoint truncation until `unpin`.
    pub(crate) fn log_record(&self, f: impl FnOnce(&mut LogBuffer), pin: bool) -> BatchSeq {
        if self.wal.is_none() {
            return 0;
        }
        let prev = phases::switch(Phase::Logging);
        let mut slot = self.log.lock();
        f(&mut slot.buf);
        let seq = slot.next_seq;
        if pin {
            slot.pin(seq);
        }
        // A commit decision makes writes visible (early lock release): a
        // read-only transaction that reads them must wait for this batch.
        if self.append_seq.load(Ordering::Relaxed) < seq {
            self.append_seq.store(seq, Ordering::Release);
        }
        drop(slot);
        phases::switch(prev);
        seq
    }

    pub(crate) fn unpin(&self, seq: BatchSeq) {
        if seq != 0 {
            self.log.lock().unpin(seq);
        }
    }

    /// Drops the pins [`Island::open`] took for what recovery found
    /// unfinished: every executor of the island has taken its own by now
    /// (see `LogSlot::pin_recovered`).
    pub(crate) fn release_recovery_pins(&self) {
        let mut slot = self.log.lock();
        for seq in std::mem::take(&mut slot.recovery_pins) {
            slot.unpin(seq);
        }
    }

    /// Hands the log buffer to the log writer (if there is one and it holds records).
    pub(crate) fn flush(&self) -> Result<(), Error> {
        if let Some(w) = &self.wal {
            let prev = phases::switch(Phase::Logging);
            let r = self.log.lock().hand_off(w);
            phases::switch(prev);
            r?;
        }
        Ok(())
    }

    /// Hands the log buffer over for a forced 2PC record (locks are held
    /// until it is durable) and, if the island is configured so
    /// (`expedite_2pc`), asks the writer not to pause before syncing it
    /// ([`Wal::expedite`]).
    pub(crate) fn flush_urgent(&self) -> Result<(), Error> {
        if let Some(w) = &self.wal {
            let prev = phases::switch(Phase::Logging);
            let r = self.log.lock().hand_off(w);
            if self.cfg.expedite_2pc {
                w.expedite();
            }
            phases::switch(prev);
            r?;
        }
        Ok(())
    }

    /// The newest durable batch; everything when there is no log.
    pub(crate) fn durable_seq(&self) -> BatchSeq {
        self.wal.as_ref().map_or(BatchSeq::MAX, |w| w.durable_seq())
    }

    pub(crate) fn log_failure(&self) -> Option<Error> {
        self.wal.as_ref().and_then(|w| w.failed()).map(Error::from)
    }
}

/// What the log directories of a deployment's islands (island `i` in `dirs[i]`) hold,
/// judged before any of them is opened ([`judge_deployment_dirs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opening {
    /// No directory holds anything of a database: every island is loaded.
    Fresh,
    /// Every island holds a completely loaded database: every island is recovered, and
    /// none is loaded. `sites`: the site count the database was made with (0: not
    /// recorded, as by a version-1 control file).
    Recover { sites: u32 },
}

/// Decides whether a deployment's islands are loaded afresh or recovered, from their
/// control files, before any is opened (opening one writes its control file). The rule
/// keeps one database whole: all islands are loaded together, or all are recovered.
///
/// - No directory holds a control file, a segment or a checkpoint: [`Opening::Fresh`].
/// - Some control file says the initial load never completed (a process that stopped
///   during the load: the load is marked complete, [`Island::mark_loaded`], only once
///   every island's is checkpointed, and nothing is served before that): refused, naming
///   the directories; nothing but the interrupted load was ever written there, so the
///   way out is to remove the directory and load again.
/// - Some island holds a loaded database and another's directory holds no control file:
///   refused. Without segments or a checkpoint that island's log is lost, and loading it
///   afresh beside the others' recovered logs would leave distributed transactions half
///   applied; no repair makes it up. With them, only its control file is lost, which
///   `islands repair --rebuild-control` rebuilds.
/// - Otherwise every island is recovered ([`Opening::Recover`]); the control files must
///   agree on the site count they record.
///
/// `dirs` may be those of some islands only (the islands one process of the
/// deployment runs); `islands` is the deployment's island count, which each
/// control file must record.
pub fn judge_deployment_dirs(dirs: &[PathBuf], islands: usize) -> Result<Opening, Error> {
    let mut controls = Vec::with_capacity(dirs.len());
    for d in dirs {
        let c = if d.is_dir() {
            crate::wal::read_control(d)?
        } else {
            None
        };
        let holds = d.is_dir() && crate::wal::holds_log(d)?;
        controls.push((d, c, holds));
    }
    if controls.iter().all(|(_, c, holds)| c.is_none() && !holds) {
        return Ok(Opening::Fresh);
    }
    if let Some((d, Some(c), _)) = controls
        .iter()
        .find(|(_, c, _)| c.as_ref().is_some_and(|c| c.islands as usize != islands))
    {
        return Err(Error::Config(format!(
            "{} belongs to a database of {} island(s), and this deployment has {}: open it \
             with the islands it was made with",
            d.display(),
            c.islands,
            islands
        )));
    }
    let unloaded: Vec<String> = controls
        .iter()
        .filter(|(_, c, _)| c.as_ref().is_some_and(|c| !c.loaded))
        .map(|(d, _, _)| d.display().to_string())
        .collect();
    if !unloaded.is_empty() {
        let base = dirs[0].parent().map_or_else(
            || dirs[0].display().to_string(),
            |p| p.display().to_string(),
        );
        return Err(Error::Recovery(format!(
            "the database in {base} was never completely loaded: the control file of {} says \
             its initial load did not complete (the process that made it stopped during the \
             load). It holds nothing but that unfinished load and is not served: remove {base} \
             and start again to load a new database (e.g. `islands serve --init ...` into an \
             empty directory)",
            unloaded.join(", ")
        )));
    }
    let mut sites = 0;
    let mut sites_from = None;
    for (i, (d, c, holds)) in controls.iter().enumerate() {
        let Some(c) = c else {
            // `dirs` may be some islands' only: the directory's own name
            // (`island-K`) says which island it is, its place in `dirs` not.
            let i = d
                .file_name()
                .and_then(|n| n.to_str()?.strip_prefix("island-")?.parse::<usize>().ok())
                .unwrap_or(i);
            if *holds {
                return Err(crate::wal::WalError::NoControl {
                    dir: d.to_path_buf(),
                }
                .into());
            }
            let other = controls
                .iter()
                .find(|(_, c, _)| c.is_some())
                .map_or_else(String::new, |(o, _, _)| o.display().to_string());
            return Err(Error::Recovery(format!(
                "island {i}'s log directory {} holds no log (missing or empty), but {other} \
                 holds a loaded database of the same deployment: island {i}'s log is lost. \
                 Loading it afresh beside the other islands' recovered logs would leave \
                 distributed transactions half applied, so it is not opened; restore {} from \
                 a copy of the whole deployment",
                d.display(),
                d.display()
            )));
        };
        if c.sites == 0 {
            continue;
        }
        match sites_from {
            None => {
                sites = c.sites;
                sites_from = Some(d);
            }
            Some(f) if sites != c.sites => {
                return Err(Error::Recovery(format!(
                    "the control files disagree on the site count: {} says {sites}, {} says {}: \
                     they are not of one database",
                    f.display(),
                    d.display(),
                    c.sites
                )))
            }
            Some(_) => {}
        }
    }
    Ok(Opening::Recover { sites })
}

/// A database instance. Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Island {
    shared: Arc<Shared>,
}

impl Island {
    /// Opens an island with these tables, recovering from its log directory.
    pub fn open(cfg: IslandConfig, tables: &[TableDef]) -> Result<(Island, RecoveryReport), Error> {
        cfg.check()?;
        let concurrent = cfg.workers > 1;
        let catalog = Catalog::new(tables, concurrent)?;
        let mut report = RecoveryReport::default();
        let t = Instant::now();
        let wal = match (cfg.durability, &cfg.log_dir) {
            (Durability::Off, _) | (_, None) => None,
            (d, Some(dir)) => {
                let device: Arc<dyn LogDevice> = match &cfg.device {
                    Some(dev) => Arc::clone(dev),
                    None => Arc::new(FsDevice),
                };
                let wal_cfg = WalConfig {
                    dir: dir.clone(),
                    durability: d,
                    segment_bytes: cfg.segment_bytes,
                    group_delay: cfg.group_delay,
                    preallocate: cfg.preallocate_log,
                    identity: cfg.log_identity(tables),
                    on_damage: crate::wal::OnDamage::Refuse,
                    threads: cfg.threads.clone(),
                    gtid_reserve: cfg.gtid_reserve,
                };
                let (wal, rec) = Wal::open_with_device(wal_cfg, device).map_err(|e| {
                    Error::from(e).context(&format!(
                        "{}: cannot open the log in {}",
                        cfg.name,
                        dir.display()
                    ))
                })?;
                report = recover(&catalog, rec, None).map_err(|e| e.context(&cfg.name))?;
                report.duration = t.elapsed();
                Some(wal)
            }
        };
        let next_seq = wal.as_ref().map_or(1, |w| w.next_seq());
        // The log found at open counts toward the first periodic checkpoint.
        let recovered_log_bytes = match &wal {
            Some(w) => w.disk_usage().map_or(0, |u| u.segment_bytes),
            None => 0,
        };
        let prefaulter = cfg.prefault.then(|| {
            let p = Prefaulter::new();
            for t in catalog.tables.iter() {
                t.arena.attach(&p);
            }
            p
        });
        let shared = Arc::new(Shared {
            catalog,
            schema: crate::storage::schema_fingerprint(tables),
            cc: cfg.cc.build(concurrent),
            wal,
            ts: AtomicU64::new(0),
            delete_tid: AtomicU64::new(0),
            log: CachePadded::new(Mutex::new(LogSlot {
                buf: LogBuffer::new(),
                next_seq,
                pins: Default::default(),
                recovery_pins: Vec::new(),
            })),
            append_seq: AtomicU64::new(0),
            committing: (0..cfg.workers + cfg.contexts)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            slot_used: (0..cfg.workers + cfg.contexts)
                .map(|_| AtomicBool::new(false))
                .collect(),
            recovered_tid: report.max_tid,
            ckpt: CkptState {
                lock: Mutex::new(()),
                base_written: AtomicU64::new(0),
                carried: AtomicU64::new(recovered_log_bytes),
                last_at: Mutex::new(Instant::now()),
                stats: Mutex::new(CheckpointStats::default()),
                signal: Arc::new(CkptSignal::default()),
                thread: Mutex::new(None),
            },
            prefaulter,
            cfg,
        });
        shared.log.lock().pin_recovered(&report);
        if let Some(p) = &shared.prefaulter {
            // The thread holds the tables only while it maps: a dropped
            // island closes its log at once, whatever the thread is doing.
            let weak = Arc::downgrade(&shared.catalog.tables);
            let (threads, id) = (shared.cfg.threads.clone(), shared.cfg.island_id);
            p.spawn(
                format!("{}-prefault", shared.cfg.name),
                move || enter(threads.as_ref(), Role::Prefaulter, Some(id)),
                move || match weak.upgrade() {
                    Some(tables) => {
                        for t in tables.iter() {
                            t.arena.prefault_ahead();
                        }
                        true
                    }
                    None => false,
                },
            )
            .map_err(|e| {
                Error::Config(format!(
                    "{}: cannot start the prefault thread: {e}",
                    shared.cfg.name
                ))
            })?;
        }
        if shared.wal.is_some() && !shared.cfg.checkpoint.is_off() {
            let weak = Arc::downgrade(&shared);
            let signal = Arc::clone(&shared.ckpt.signal);
            let policy = shared.cfg.checkpoint;
            let (threads, id) = (shared.cfg.threads.clone(), shared.cfg.island_id);
            let handle = std::thread::Builder::new()
                .name(format!("{}-ckpt", shared.cfg.name))
                .spawn(move || {
                    let _registered = enter(threads.as_ref(), Role::Checkpointer, Some(id));
                    checkpointer(weak, signal, policy)
                })
                .map_err(|e| {
                    Error::Config(format!(
                        "{}: cannot start the checkpoint thread: {e}",
                        shared.cfg.name
                    ))
                })?;
            *shared.ckpt.thread.lock() = Some(handle);
        }
        Ok((Island { shared }, report))
    }

    /// Builds an island in memory from a log that was read without writing
    /// ([`crate::wal::read_only`]): it has no log of its own (`cfg`'s durability is
    /// ignored), so nothing it does reaches the directory. Branches in doubt are resolved
    /// at once: `decision(gtid)` is the outcome their coordinator logged (any island's
    /// commit decision for the gtid); `None` (no decision anywhere) aborts them, as
    /// presumed abort does; without `decision` they stay in doubt (in the report, their
    /// writes not applied). For checks of a database as its log left it.
    pub fn open_in_memory(
        mut cfg: IslandConfig,
        tables: &[TableDef],
        rec: crate::wal::Recovery,
        decision: Option<&dyn Fn(u64) -> Option<bool>>,
    ) -> Result<(Island, RecoveryReport), Error> {
        cfg.durability = Durability::Off;
        cfg.log_dir = None;
        cfg.checkpoint = CheckpointPolicy::OFF;
        let t = Instant::now();
        let (island, _) = Island::open(cfg, tables)?;
        let mut report = recover(&island.shared.catalog, rec, decision)
            .map_err(|e| e.context(&island.shared.cfg.name))?;
        report.duration = t.elapsed();
        Ok((island, report))
    }

    pub fn config(&self) -> &IslandConfig {
        &self.shared.cfg
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The newest log batch known durable (`BatchSeq::MAX` without a log).
    pub fn durable_batch(&self) -> BatchSeq {
        self.shared.durable_seq()
    }

    pub fn catalog(&self) -> &Catalog {
        &self.shared.catalog
    }

    /// Looks up a table id by name.
    pub fn table_id(&self, name: &str) -> Result<TableId, Error> {
        self.shared
            .catalog
            .by_name(name)
            .map(|t| t.id)
            .ok_or_else(|| Error::Config(format!("no table named '{name}'")))
    }

    /// A bulk loader: puts rows directly, outside transactions. It counts as a
    /// worker handle, so it cannot run beside a single-worker island's worker.
    pub fn loader(&self) -> Result<Loader, Error> {
        let slot = self.shared.claim_slot().ok_or_else(|| {
            Error::Config("a loader cannot run while all worker handles are in use".into())
        })?;
        Ok(Loader {
            shared: Arc::clone(&self.shared),
            slot,
            caches: (0..self.shared.catalog.tables.len())
                .map(|_| RowCache::default())
                .collect(),
        })
    }

    /// Writes a checkpoint of every table and drops the log it makes redundant.
    /// Safe while workers run (a fuzzy snapshot: recovery replays the log from
    /// the checkpoint's start, and per-row versions make the replay idempotent).
    ///
    /// The snapshot may hold effects of transactions whose log records are not
    /// durable yet; were the checkpoint published before them, a crash would
    /// keep half of such a transaction. So after the scan (written to a
    /// temporary file as it goes) the checkpointer hands the island's
    /// buffered records to the log and waits until all of it is durable, and
    /// only then publishes the checkpoint. Before the scan it
    /// waits for commits that appended a record before `start` to finish
    /// installing, so that no record older than `start` has effects the scan
    /// could miss.
    pub fn checkpoint(&self) -> Result<u64, Error> {
        self.checkpoint_until(None)
    }

    /// [`Island::checkpoint`], abandoned (an error, no file left behind) as
    /// soon as `stop` is set.
    fn checkpoint_until(&self, stop: Option<&AtomicBool>) -> Result<u64, Error> {
        let sh = &*self.shared;
        let Some(wal) = &sh.wal else {
            return Ok(0);
        };
        let _one_at_a_time = sh.ckpt.lock.lock();
        let stopped = || stop.is_some_and(|s| s.load(Ordering::Acquire));
        let t = Instant::now();
        let written = wal.stats().bytes_written;
        let start = sh.log.lock().checkpoint_start();
        for c in &sh.committing {
            let v = c.load(Ordering::Acquire);
            if v & 1 == 1 {
                let mut spins = 0;
                while c.load(Ordering::Acquire) == v {
                    if stopped() {
                        return Err(Error::from(WalError::ShutDown));
                    }
                    spins += 1;
                    crate::cc::backoff(spins);
                }
            }
        }
        // A commit appends its record before it installs: the hand-off after
        // the scan gives the log every record whose effects the scan may hold.
        let info = wal.write_checkpoint_with(
            start,
            |sink| {
                let mut n = 0u64;
                for t in sh.catalog.tables.iter() {
                    t.try_for_each_row(|key, tid, data| {
                        n += 1;
                        if n.is_multiple_of(4096) && stopped() {
                            return Err(WalError::ShutDown);
                        }
                        sink.row(t.id, key, tid, crate::storage::schema::row_bytes(data))
                    })?;
                }
                Ok(())
            },
            || {
                sh.log.lock().submit(wal)?;
                let last = wal.next_seq() - 1;
                if last > 0 {
                    wal.wait_durable(last)?;
                }
                Ok(())
            },
        );
        let info = info.map_err(|e| match e {
            // The checkpoint's own file: the log itself is fine.
            e @ WalError::Io { .. } => {
                Error::Io(format!("{}: checkpoint failed: {e}", sh.cfg.name))
            }
            e => Error::from(e),
        })?;
        sh.ckpt.base_written.store(written, Ordering::Release);
        sh.ckpt.carried.store(0, Ordering::Release);
        *sh.ckpt.last_at.lock() = Instant::now();
        let mut st = sh.ckpt.stats.lock();
        st.taken += 1;
        st.seconds += t.elapsed().as_secs_f64();
        st.last_bytes = info.bytes;
        Ok(info.rows)
    }

    /// What the island's checkpoints did since it opened.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.shared.ckpt.stats.lock().clone()
    }

    /// Stops the periodic checkpointer (a checkpoint under way is
    /// abandoned) and the prefault thread, waits until everything submitted
    /// to the log is durable, then stops the log writer. Rows inserted after
    /// it fault their chunks in themselves.
    pub fn shutdown(&self) {
        if let Some(p) = &self.shared.prefaulter {
            p.shutdown();
        }
        self.shared.ckpt.signal.stop();
        let checkpointer = self.shared.ckpt.thread.lock().take();
        if let Some(h) = checkpointer {
            let _ = h.join();
        }
        if let Some(w) = &self.shared.wal {
            let _ = self.shared.log.lock().hand_off(w);
            w.shutdown();
        }
    }

    /// How the island's arena chunks were mapped since it opened: ahead of
    /// need by the prefault thread, or on a claimer's path (the fallbacks:
    /// page faults in an insert, or in the load and recovery).
    pub fn prefault_stats(&self) -> PrefaultStats {
        let mut s = PrefaultStats::default();
        for t in self.shared.catalog.tables.iter() {
            s += t.arena.prefault_stats();
        }
        s
    }

    /// The island's log, if it has one (for statistics).
    pub fn wal(&self) -> Option<&Arc<Wal>> {
        self.shared.wal.as_ref()
    }

    /// How many times the island's log was opened, this open included: a
    /// new incarnation at each open, durable before the island hands out a
    /// gtid (0: the island has no log). See [`Wal::incarnation`].
    /// The fingerprint of its tables ([`crate::storage::schema_fingerprint`]):
    /// islands of one deployment that exchange transactions must agree on it.
    pub fn schema_fingerprint(&self) -> u64 {
        self.shared.schema
    }

    pub fn incarnation(&self) -> u64 {
        self.shared.wal.as_ref().map_or(0, |w| w.incarnation())
    }

    /// Records in the log's control file that the database's initial load is complete
    /// ([`crate::wal::Wal::mark_loaded`]); nothing without a log. A deployment calls it on
    /// every island once all of them are loaded and checkpointed.
    pub fn mark_loaded(&self) -> Result<(), Error> {
        match &self.shared.wal {
            Some(w) => w.mark_loaded().map_err(Error::from),
            None => Ok(()),
        }
    }
}

/// Direct row access for bulk loading (see [`Island::loader`]).
pub struct Loader {
    shared: Arc<Shared>,
    slot: usize,
    caches: Vec<RowCache>,
}

impl Loader {
    /// Puts a row with `key`, filling its columns with `fill`.
    pub fn put(
        &mut self,
        table: TableId,
        key: u64,
        fill: impl FnOnce(&mut crate::storage::RowMut),
    ) -> Result<(), Error> {
        let t = self.shared.catalog.table(table);
        let mut img = vec![0u64; t.schema.row_words()];
        fill(&mut crate::storage::RowMut {
            words: &mut img,
            schema: &t.schema,
        });
        t.put_direct(&mut self.caches[table as usize], key, 0, &img)?;
        Ok(())
    }

    /// Like [`Loader::put`] with a reusable image buffer, for large loads.
    pub fn put_with(
        &mut self,
        table: TableId,
        key: u64,
        img: &mut Vec<u64>,
        fill: impl FnOnce(&mut crate::storage::RowMut),
    ) -> Result<(), Error> {
        let t = self.shared.catalog.table(table);
        img.clear();
        img.resize(t.schema.row_words(), 0);
        fill(&mut crate::storage::RowMut {
            words: img,
            schema: &t.schema,
        });
        t.put_direct(&mut self.caches[table as usize], key, 0, img)?;
        Ok(())
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.shared.release_slot(self.slot);
    }
}

/// The island's log buffer. Every hand-off to the log goes through it, so
/// the records appended now will be in batch `wal.next_seq()`.
pub(crate) struct LogSlot {
    pub(crate) buf: LogBuffer,
    /// The batch the buffer will become: kept here so a commit need not ask
    /// the log (whose queue lock the writer thread shares).
    pub(crate) next_seq: BatchSeq,
    /// Batches holding 2PC records that are still needed after a crash: a
    /// prepared branch's Prepare record (until the branch is decided) and a
    /// coordinator's commit decision (until its End). A checkpoint never
    /// drops the log from the oldest pinned batch on.
    pins: std::collections::BTreeMap<BatchSeq, u32>,
    /// The pins recovery took (see [`LogSlot::pin_recovered`]), until
    /// [`Shared::release_recovery_pins`].
    recovery_pins: Vec<BatchSeq>,
}

impl LogSlot {
    /// Pins what recovery found unfinished: the Prepare of every branch in
    /// doubt and every commit decision without its End. The executors pin
    /// what they take over when they start, but a checkpoint may come before
    /// that (or before the cluster is built at all); without these pins it
    /// would drop those records, and a second crash would forget a prepared
    /// branch (whose coordinator may have decided commit) or a commit decision
    /// (which presumed abort would then answer "abort").
    fn pin_recovered(&mut self, report: &RecoveryReport) {
        let ended: std::collections::HashSet<u64> = report
            .two_pc
            .iter()
            .filter_map(|r| match *r {
                crate::coord::LogRec::End { gtid } => Some(gtid),
                _ => None,
            })
            .collect();
        let decisions = report
            .decision_batches
            .iter()
            .filter(|(g, _)| !ended.contains(g))
            .map(|(_, &seq)| seq);
        let prepares = report.in_doubt.iter().map(|d| d.seq);
        for seq in prepares.chain(decisions).filter(|&s| s != 0) {
            self.pin(seq);
            self.recovery_pins.push(seq);
        }
    }

    /// Batches pinned now (tests).
    #[cfg(test)]
    pub(crate) fn pinned(&self) -> usize {
        self.pins.values().map(|&n| n as usize).sum()
    }

    pub(crate) fn pin(&mut self, seq: BatchSeq) {
        *self.pins.entry(seq).or_insert(0) += 1;
    }

    pub(crate) fn unpin(&mut self, seq: BatchSeq) {
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.pins.entry(seq) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// Where a checkpoint taken now may start its log: the next batch, or the
    /// oldest pinned one.
    fn checkpoint_start(&self) -> BatchSeq {
        self.pins
            .keys()
            .next()
            .map_or(self.next_seq, |&p| p.min(self.next_seq))
    }

    /// Submits the buffer if it holds records; returns the batch it became.
    pub(crate) fn hand_off(&mut self, wal: &Wal) -> Result<Option<BatchSeq>, Error> {
        self.submit(wal).map_err(Error::from)
    }

    /// [`LogSlot::hand_off`] with the log's own error.
    fn submit(&mut self, wal: &Wal) -> Result<Option<BatchSeq>, WalError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let seq = wal.submit(&mut self.buf)?;
        debug_assert_eq!(
            seq, self.next_seq,
            "every hand-off goes through the island's log slot"
        );
        self.next_seq = seq + 1;
        Ok(Some(seq))
    }
}

/// The distributed transactions that some island of a deployment logged a commit
/// decision for (the coordinator before anyone commits, a participant before it
/// installs): what [`Island::open_in_memory`] commits of the branches in doubt. A
/// transaction with no commit decision in any log was not committed (presumed abort).
pub fn commit_decisions(recoveries: &[crate::wal::Recovery]) -> std::collections::HashSet<u64> {
    recoveries
        .iter()
        .flat_map(|r| &r.records)
        .filter_map(|r| match *r {
            LogRecord::Decision {
                gtid, commit: true, ..
            } => Some(gtid),
            _ => None,
        })
        .collect()
}

/// Loads the checkpoint, then replays the log with the per-row version rule. With
/// `resolve`, branches left in doubt are decided by it (see [`Island::open_in_memory`]).
fn recover(
    catalog: &Catalog,
    rec: crate::wal::Recovery,
    resolve: Option<&dyn Fn(u64) -> Option<bool>>,
) -> Result<RecoveryReport, Error> {
    let mut report = RecoveryReport {
        truncated: rec.truncated.as_ref().map(|t| t.to_string()),
        control: rec.control.clone(),
        ..Default::default()
    };
    let mut caches: Vec<RowCache> = (0..catalog.tables.len())
        .map(|_| RowCache::default())
        .collect();
    let table = |id: u16| -> Result<&crate::storage::Table, Error> {
        catalog.tables.get(id as usize).ok_or_else(|| {
            Error::Recovery(format!(
                "the log names table {id}, which this schema does not have"
            ))
        })
    };
    // Every image the log and checkpoints hold is a whole row (rows have a
    // fixed size; partial updates are patches, checked on their own). One of
    // another size was written under another schema: copying it would cut
    // it short or pad it with zeros, and the database would open with rows
    // that no transaction wrote.
    let fill = |img: &mut Vec<u64>,
                t: &crate::storage::Table,
                key: u64,
                bytes: &[u8],
                from: &str|
     -> Result<(), Error> {
        let words = t.schema.row_words();
        if bytes.len() != words * 8 {
            return Err(Error::Recovery(format!(
                "the {from} holds a {}-byte row of table {} (key {key}), but this schema's rows of it are {} bytes: \
                 it was written with another schema (another row size); open it with the one it was written with",
                bytes.len(),
                t.name,
                words * 8
            )));
        }
        img.clear();
        img.resize(words, 0);
        crate::storage::schema::fill_words(img, bytes);
        Ok(())
    };
    let mut img: Vec<u64> = Vec::new();
    if let Some(cp) = &rec.checkpoint {
        for (tid_table, key, tid, bytes) in cp.rows.iter() {
            let t = table(*tid_table)?;
            fill(&mut img, t, *key, bytes, "checkpoint")?;
            t.put_direct(&mut caches[*tid_table as usize], *key, *tid, &img)?;
            report.checkpoint_rows += 1;
            report.max_tid = report.max_tid.max(*tid);
        }
    }
    // Deleted keys with the tid that deleted them, so an older put replayed
    // later cannot bring a row back.
    let mut tombstones: HashMap<(u16, u64), u64> = HashMap::new();
    let mut apply = |tid: u64,
                     writes: &[crate::wal::WriteEntry],
                     report: &mut RecoveryReport|
     -> Result<(), Error> {
        report.max_tid = report.max_tid.max(tid);
        for w in writes {
            let t = table(w.table)?;
            let current = match t.lookup(w.key) {
                Some(rid) => crate::storage::tid_of(t.version(rid).load(Ordering::Acquire)),
                None => tombstones.get(&(w.table, w.key)).copied().unwrap_or(0),
            };
            // A patch at the tid the row already has is this transaction's
            // next patch of it (one update may log several), or one the
            // checkpoint image already holds: applying it again is a no-op.
            let patch = w.patch_at.is_some();
            if current != 0 && (current > tid || (current == tid && !patch)) {
                report.skipped_writes += 1;
                continue;
            }
            if let (Some(at), Some(bytes)) = (w.patch_at, &w.row) {
                // An update of part of the row, over the image that holds
                // every earlier write of it. No row: a later delete (in the
                // checkpoint) removed it, and the delete wins.
                let Some(rid) = t.lookup(w.key) else {
                    report.skipped_writes += 1;
                    continue;
                };
                let (at, words) = (at as usize, t.schema.row_words());
                if at + bytes.len() > words * 8 {
                    return Err(Error::Recovery(format!(
                        "a log patch of key {} of table {} (bytes {at}..{}) runs past its {}-byte row",
                        w.key,
                        t.name,
                        at + bytes.len(),
                        words * 8
                    )));
                }
                img.clear();
                img.resize(words, 0);
                t.copy_out(rid, &mut img);
                crate::storage::schema::row_bytes_mut(&mut img)[at..at + bytes.len()]
                    .copy_from_slice(bytes);
                report.applied_writes += 1;
                t.put_direct(&mut caches[w.table as usize], w.key, tid, &img)?;
                continue;
            }
            report.applied_writes += 1;
            match &w.row {
                Some(bytes) => {
                    fill(&mut img, t, w.key, bytes, "log")?;
                    t.put_direct(&mut caches[w.table as usize], w.key, tid, &img)?;
                }
                None => {
                    t.delete_direct(&mut caches[w.table as usize], w.key);
                    tombstones.insert((w.table, w.key), tid);
                }
            }
        }
        Ok(())
    };
    // Prepared 2PC branches: applied when a commit decision follows (the
    // participant's own, or on the home island the coordinator's).
    let mut prepared: HashMap<u64, InDoubt> = HashMap::new();
    for r in &rec.records {
        report.log_records += 1;
        match r {
            LogRecord::Commit { tid, writes, .. } => apply(*tid, writes, &mut report)?,
            LogRecord::Prepare {
                seq,
                gtid,
                tid,
                writes,
            } => {
                report
                    .two_pc
                    .push(crate::coord::LogRec::Prepare { gtid: *gtid });
                report.max_tid = report.max_tid.max(*tid);
                prepared.insert(
                    *gtid,
                    InDoubt {
                        gtid: *gtid,
                        tid: *tid,
                        seq: *seq,
                        writes: writes.clone(),
                    },
                );
            }
            LogRecord::Decision { seq, gtid, commit } => {
                report.two_pc.push(crate::coord::LogRec::Decision {
                    gtid: *gtid,
                    commit: *commit,
                });
                if *commit {
                    report.decision_batches.entry(*gtid).or_insert(*seq);
                }
                if let Some(p) = prepared.remove(gtid) {
                    if *commit {
                        apply(p.tid, &p.writes, &mut report)?;
                    }
                }
            }
            LogRecord::End { gtid, .. } => {
                report
                    .two_pc
                    .push(crate::coord::LogRec::End { gtid: *gtid });
            }
        }
    }
    let mut in_doubt: Vec<InDoubt> = prepared.into_values().collect();
    in_doubt.sort_by_key(|p| p.seq);
    if let Some(decide) = resolve {
        // A prepared branch held its locks until its decision, so no later write of its
        // rows is in the log: applying it last is applying it in its place.
        for d in in_doubt.drain(..) {
            if decide(d.gtid) == Some(true) {
                apply(d.tid, &d.writes, &mut report)?;
                report.resolved.0 += 1;
            } else {
                report.resolved.1 += 1;
            }
        }
    }
    report.in_doubt = in_doubt;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Col, ColType, PrimaryKind};
    use crate::txn::poll_local;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("islands-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn value(island: &Island, key: u64) -> Option<u64> {
        let mut tx = island.worker().unwrap();
        tx.execute(0, |tx| {
            Box::pin(async move { Ok(tx.get(0, key).await?.map(|h| tx.row(h).u64(Col(0)))) })
        })
        .unwrap()
    }

    /// A commit whose record went to the log before the checkpoint's start
    /// seq but whose install has not happened yet: the snapshot must not miss
    /// it, since replay starts at the checkpoint's start. Under 2PL nothing
    /// on the row itself tells the checkpointer (the row lock is not the
    /// version word), only the worker's `committing` flag does. The commit is
    /// stopped between its steps 4 and 5 (see `Txn::commit`) by doing them by hand.
    /// Waits (10 s at most: a loaded machine) until `f` holds.
    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn one_column(capacity: u64) -> [TableDef; 1] {
        [TableDef::new(
            "t",
            &[("v", ColType::U64)],
            capacity,
            PrimaryKind::Hash,
        )]
    }

    /// The island's prefault thread runs (registered) while it is open and
    /// has ended when `shutdown` returns.
    #[test]
    fn the_prefault_thread_ends_at_shutdown() {
        let reg = ThreadRegistry::new();
        let mut cfg = IslandConfig::new(CcKind::Occ, 2);
        cfg.threads = Some(reg.clone());
        cfg.prefault = true;
        let (island, _) = Island::open(cfg, &one_column(1 << 16)).unwrap();
        let prefaulters = || {
            reg.snapshot()
                .iter()
                .filter(|t| t.role == Role::Prefaulter)
                .count()
        };
        wait_for("the prefault thread to start", || prefaulters() == 1);
        island.shutdown();
        assert_eq!(prefaulters(), 0);
    }

    /// Loaded rows at a steady pace (each chunk once the thread had its
    /// chance) find every chunk after the first mapped by the prefault
    /// thread; with `prefault` off each chunk is a counted fallback.
    #[test]
    fn loaded_rows_find_their_chunks_prefaulted() {
        let chunks = 4;
        for prefault in [false, true] {
            let mut cfg = IslandConfig::new(CcKind::Occ, 2);
            cfg.prefault = prefault;
            let (island, _) = Island::open(cfg, &one_column(1 << 20)).unwrap();
            let arena = &island.shared.catalog.tables[0].arena;
            let per_chunk = arena.rows_per_chunk();
            let mut loader = island.loader().unwrap();
            for key in 0..chunks * per_chunk {
                loader.put(0, key, |r| r.set_u64(Col(0), key)).unwrap();
                let c = key / per_chunk;
                if prefault && key % per_chunk == 0 {
                    wait_for("the next chunk", || arena.chunk_mapped(c as usize + 1));
                }
            }
            let s = island.prefault_stats();
            if prefault {
                assert_eq!(s.fallbacks, 1, "{s:?}");
                assert!(s.prefaulted >= chunks, "{s:?}");
            } else {
                assert_eq!(
                    s,
                    PrefaultStats {
                        prefaulted: 0,
                        fallbacks: chunks
                    }
                );
            }
            drop(loader);
            assert_eq!(
                value(&island, chunks * per_chunk - 1),
                Some(chunks * per_chunk - 1)
            );
            island.shutdown();
        }
    }

    #[test]
    fn checkpoint_waits_for_a_commit_between_log_append_and_install() {
        let dir = temp_dir("ckpt-committing");
        let defs = [TableDef::new(
            "t",
            &[("v", ColType::U64)],
            64,
            PrimaryKind::Hash,
        )];
        let cfg = IslandConfig::new(CcKind::NoWait, 2).durable(crate::wal::Durability::Sync, &dir);
        let (island, _) = Island::open(cfg.clone(), &defs).unwrap();
        let mut tx = island.worker().unwrap();
        tx.begin(false);
        let h = poll_local(tx.insert(0, 1)).unwrap().unwrap();
        tx.row_mut(h).set_u64(Col(0), 1);
        let first = tx.commit_durable().unwrap();
        drop(tx);

        let sh = Arc::clone(&island.shared);
        let wal = sh.wal.as_ref().unwrap();
        let t = sh.catalog.table(0);
        let rid = t.lookup(1).unwrap();
        let tid = first.tid + 1;
        let flag = &sh.committing[1];
        flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        {
            let mut slot = sh.log.lock();
            slot.buf.commit_begin(tid);
            slot.buf.put(0, 1, crate::storage::schema::row_bytes(&[2]));
            slot.buf.record_end();
            // Another worker hands the buffer over before the install.
            slot.hand_off(wal).unwrap();
        }
        let ckpt = {
            let island = island.clone();
            std::thread::spawn(move || island.checkpoint().unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        crate::cc::publish(t, rid, tid, Some(&[2]), true);
        flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        ckpt.join().unwrap();
        assert_eq!(value(&island, 1), Some(2));
        island.shutdown();
        drop((island, sh));

        let (island, report) = Island::open(cfg, &defs).unwrap();
        assert_eq!(
            value(&island, 1),
            Some(2),
            "the checkpoint missed a commit logged before its start ({report})"
        );
        drop(island);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A log or checkpoint written with rows of another size: recovery cut
    /// the images short or padded them with zeros, and opened a database
    /// whose rows no transaction wrote.
    #[test]
    fn recovery_refuses_row_images_of_another_size() {
        let dir = temp_dir("row-size");
        let schema = |cols: &[(&str, ColType)]| [TableDef::new("t", cols, 64, PrimaryKind::Hash)];
        let two = schema(&[("v", ColType::U64), ("w", ColType::U64)]);
        let one = schema(&[("v", ColType::U64)]);
        let three = schema(&[
            ("v", ColType::U64),
            ("w", ColType::U64),
            ("x", ColType::U64),
        ]);
        let cfg = IslandConfig::new(CcKind::NoWait, 1).durable(crate::wal::Durability::Sync, &dir);
        let (island, _) = Island::open(cfg.clone(), &two).unwrap();
        let mut tx = island.worker().unwrap();
        tx.begin(false);
        let h = poll_local(tx.insert(0, 7)).unwrap().unwrap();
        tx.row_mut(h).set_u64(Col(0), 1);
        tx.commit_durable().unwrap();
        drop(tx);
        island.shutdown();
        drop(island);
        // The control file's schema fingerprint refuses the other schema
        // first; with the fingerprint made to match (as an older directory
        // might), replay still refuses the row images.
        let refused = |defs: &[TableDef], want: &str| {
            let Err(e) = Island::open(cfg.clone(), defs) else {
                panic!("a 16-byte row recovered into another schema");
            };
            let e = e.to_string();
            assert!(e.contains("schema") && e.contains("CONTROL"), "{e}");
            let mut ctl = crate::wal::read_control(&dir).unwrap().unwrap();
            let right = ctl.schema;
            ctl.schema = crate::storage::schema_fingerprint(defs);
            crate::wal::control::write(&FsDevice, &dir, &ctl).unwrap();
            let Err(e) = Island::open(cfg.clone(), defs) else {
                panic!("a 16-byte row recovered into another schema");
            };
            let e = e.to_string();
            assert!(e.contains(want) && e.contains("table t (key 7)"), "{e}");
            ctl.schema = right;
            crate::wal::control::write(&FsDevice, &dir, &ctl).unwrap();
        };
        // The row is in the log.
        refused(&one, "the log holds a 16-byte row");
        refused(&three, "the log holds a 16-byte row");
        // The row is in a checkpoint.
        let (island, _) = Island::open(cfg.clone(), &two).unwrap();
        assert_eq!(value(&island, 7), Some(1));
        island.checkpoint().unwrap();
        island.shutdown();
        drop(island);
        refused(&three, "the checkpoint holds a 16-byte row");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A checkpoint whose bytes do not check is reported as a corrupt
    /// checkpoint, naming the file (it said "invalid configuration").
    #[test]
    fn a_corrupt_checkpoint_is_named() {
        let dir = temp_dir("bad-ckpt");
        let defs = [TableDef::new(
            "t",
            &[("v", ColType::U64)],
            64,
            PrimaryKind::Hash,
        )];
        let cfg = IslandConfig::new(CcKind::NoWait, 1).durable(crate::wal::Durability::Sync, &dir);
        let (island, _) = Island::open(cfg.clone(), &defs).unwrap();
        island
            .loader()
            .unwrap()
            .put(0, 1, |r| r.set_u64(Col(0), 5))
            .unwrap();
        island.checkpoint().unwrap();
        island.shutdown();
        drop(island);
        let ckpt = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "ckp"))
            .unwrap();
        let mut bytes = std::fs::read(&ckpt).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0x20;
        std::fs::write(&ckpt, &bytes).unwrap();
        let Err(e) = Island::open(cfg, &defs) else {
            panic!("a corrupt checkpoint was accepted");
        };
        let msg = e.to_string();
        assert!(
            msg.contains("corrupt checkpoint") && msg.contains(&ckpt.display().to_string()),
            "{msg}"
        );
        assert!(!msg.contains("invalid configuration"), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
