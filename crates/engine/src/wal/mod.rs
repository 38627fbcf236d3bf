//! The island's write-ahead log: group commit, checksummed records, checkpoints, recovery.
//!
//! One island owns one [`Wal`]. Workers serialize redo records into their own [`LogBuffer`]
//! without any lock and hand it over with [`Wal::submit`], which assigns the batch a sequence
//! number ([`BatchSeq`], first is 1) under a short mutex and queues it. One writer thread
//! writes queued batches in seq order, calls fdatasync once for all it wrote (group commit)
//! and then publishes [`Wal::durable_seq`]. Any write or fdatasync failure poisons the log for
//! good: [`Wal::failed`] reports it and `submit` refuses further batches.
//!
//! # On-disk format (all integers little-endian)
//!
//! The log directory holds segment files `wal-<first seq, 20 digits>.log`, checkpoints
//! `ckpt-<start seq, 20 digits>.ckp` (see `checkpoint.rs`), the control file `CONTROL` (see
//! `control.rs`), transiently `ckpt-*.tmp` and `CONTROL.tmp`, and `LOCK`, flock'ed
//! exclusively while a [`Wal`] has the directory open. A segment is a sequence of records;
//! every record is framed as
//!
//! ```text
//! [len u32][crc u32][body: len bytes]     crc = crc32c(len as 4 LE bytes ++ body), len >= 1
//! body[0] = record type:
//!   0x01 batch header  [seq u64]                        starts every batch
//!   0x02 commit        [tid u64]  entry*                 one transaction's writes
//!   0x03 prepare       [gtid u64][tid u64] entry*        2PC participant prepare
//!   0x04 decision      [gtid u64][commit u8: 0|1]        2PC coordinator decision
//!   0x05 end           [gtid u64]                        2PC end
//! entry = [0x01 put][table u16][key u64][row_len u32][row bytes]
//!       | [0x02 delete][table u16][key u64]
//!       | [0x03 patch][table u16][key u64][offset u32][len u32][bytes]
//!
//! A patch is an update that changed only bytes `offset..offset+len` of a
//! row (a TPC-C stock update changes 4 of its 40 words): it is applied to the
//! row as recovery has it at that point, which holds every earlier write of
//! the row (writers of a row append in the order of their tids, under its
//! lock, and a checkpoint's image of a row holds every write up to its tid).
//! ```
//!
//! Invariants: segments only roll over at batch boundaries (once a segment reaches
//! `segment_bytes`), and a segment is named after its first batch; batch seqs are
//! consecutive through the log (every submitted batch is written, in order, even an empty
//! one), so each segment starts with the batch after the previous segment's last. A segment
//! is written and fdatasync'ed before the next one is made, so only the newest segment can
//! hold unsynced bytes.
//!
//! # Recovery: a torn tail is cut, anything else is refused
//!
//! A crash (or a power cut) can only tear the unsynced end of the newest segment: the log
//! assumes a device that persists a file's unsynced writes in order (a power cut keeps a
//! prefix of them, cut anywhere, possibly in the middle of a record), and leaves after the
//! tear what was there before: nothing, zeros (a preallocated segment) or an older file's
//! bytes. Recovery reads the control file, the newest checkpoint and every segment without
//! writing, and then judges how the records end:
//!
//! - at the end of the newest segment, or at a run of zeros to its end (the unused part of
//!   a preallocated segment): clean, unless that is before the synced mark (below);
//! - at a bad frame (partial, past the end, a crc mismatch, a body that does not decode, a
//!   record outside a batch, a batch seq that is not the next) in the newest segment, at or
//!   after the synced mark, with no evidence of a later write after it: a torn tail. Evidence of a later write is a
//!   batch header frame, anywhere after the bad one in that segment, whose crc checks and
//!   whose seq is above the last good batch's: a torn write never leaves one behind (older
//!   bytes hold older batches), while a bad byte in records that were followed by later
//!   batches always does. The tail is cut (truncated durably) and reported as a
//!   [`Truncation`]. Damage to the last batch of the log looks the same as a torn write and
//!   is cut the same way; a device that writes the unsynced tail back out of order can
//!   leave a hole with a later batch after it, which is refused as damage.
//! - anything else is damage and is refused ([`WalError::Damaged`], [`WalError::Missing`]):
//!   a bad frame with a later batch after it, a bad frame in an older segment, a segment
//!   that does not start with the batch after the previous one's last (a deleted, renamed or
//!   stray segment), a file named like a log file that is none, a segment or checkpoint the
//!   control file names that is missing, a log that ends before the batch the control file
//!   says was durable, a log whose records end before the synced mark in `SYNCED` (see
//!   `synced.rs`: a crash cannot shorten a file below what was fdatasync'ed, so a torn
//!   tail can only begin after the mark). The error names the file and offset; no file is
//!   changed.
//!
//! Records are recovered one by one: a torn batch yields its complete records (they belong
//! to transactions that were never acknowledged, so either outcome is correct).
//!
//! With [`OnDamage::Truncate`] (the explicit repair, `islands repair --truncate-damaged-log`)
//! the log is repaired instead, and no file is deleted: what leaves the log is moved into
//! the directory's [`SET_ASIDE_DIR`]. First the segment files are sorted out
//! ([`recovery::sort_out`]): one whose first batch disagrees with its name is renamed to the
//! name that batch gives where the log needs it, and set aside otherwise; one at whose
//! start the log breaks is set aside when the log reads on past it without it (a stray).
//! Then the log is cut at the damage: that segment is copied aside and truncated there (or
//! set aside whole, if the damage is its start), every later segment is set aside, and
//! [`Recovery::repaired`] says how many records of which transactions were dropped. [`read_only`] recovers without writing
//! anything at all (no lock file, no cut, no removal): for checks.
//!
//! # The control file
//!
//! `CONTROL` says whose log this is (deployment id, island id and count, schema
//! fingerprint, workload; [`LogIdentity`]) and how far it reaches (newest checkpoint, the
//! oldest and newest segments, the newest batch known durable). It is rewritten atomically
//! when the log opens, when it rolls over to a new segment and when a checkpoint is written,
//! never per batch. An open whose identity differs is refused (another island's directory,
//! another deployment's, another schema). A directory with segments or checkpoints but no
//! control file (written by an older islands) is refused: without it a missing segment
//! cannot be told from the end of the log.
//!
//! Nothing is written or read when durability is `off`.
//!
//! With [`WalConfig::preallocate`], a thread keeps a file of zeros (`wal-spare.tmp`,
//! removed when the log opens) ready for the next segment, and the writer rolls over to it
//! (a rename), so its fdatasyncs overwrite blocks instead of growing the file. Such a
//! segment ends in zeros after its last record; recovery takes a tail of nothing but zeros
//! for the end of the records (no record has length 0, so a torn write is never all zeros
//! unless none of it reached the disk) and trims it from the last segment.
//!
//! A checkpoint with start seq S stands for every batch below S: once it is durable, older
//! checkpoints and every segment whose batches are all below S are deleted. Recovery returns
//! the checkpoint and the records of batches >= S; replaying them over the checkpoint must be
//! idempotent (puts are after-images; the snapshot may already hold some of their effects;
//! a patch applies only over an image older than itself).

mod capped;
mod checkpoint;
pub(crate) mod control;
mod device;
mod format;
mod recovery;
pub mod sim;
pub(crate) mod synced;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::threads::{enter, Role, ThreadRegistry};

pub use capped::CappedDevice;
pub use control::{
    new_deployment_id, read as read_control, rebuild as rebuild_control, Control, LogIdentity,
    Rebuilt, CONTROL_VERSION,
};
pub use device::{FsDevice, LogDevice, LogFile};
pub use format::LogBuffer;

/// Sequence number of a submitted batch. The first batch is 1; 0 means "none".
pub type BatchSeq = u64;

/// In `async` mode the writer fdatasyncs at least this often while it has unsynced bytes.
pub const ASYNC_SYNC_INTERVAL: Duration = Duration::from_millis(5);

/// At most this many emptied batch buffers are kept for reuse by `submit`.
const POOL_BUFFERS_MAX: usize = 256;

/// The writer copies a group's batches into one staging buffer and writes it with one call,
/// flushing early once it holds this many bytes (bounds the staging memory).
const STAGING_FLUSH_BYTES: usize = 1 << 20;

/// How a committed transaction is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `durable_seq` covers batches that were written and fdatasync'ed.
    Sync,
    /// `durable_seq` covers batches that were written; fdatasync follows within a few ms.
    Async,
    /// No log at all: no files are read or written.
    Off,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
            Durability::Off => "off",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Durability {
    type Err = WalError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            "off" => Ok(Durability::Off),
            _ => Err(WalError::Config(format!(
                "unknown durability '{s}': valid values are sync, async, off"
            ))),
        }
    }
}

/// Configuration of one island's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalConfig {
    pub dir: PathBuf,
    pub durability: Durability,
    /// A segment rolls over once it holds at least this many bytes.
    pub segment_bytes: u64,
    /// `sync` mode: the writer waits this long after an fdatasync before it
    /// takes the next group, so groups grow (a commit delay). Zero: none.
    pub group_delay: Duration,
    /// Write segments over files of zeros made ahead of time (see
    /// [`LogDevice::preallocate`]): an fdatasync then commits no file-system
    /// metadata, which halves its latency here, but every log byte is written
    /// twice. It pays where transactions wait for forced records and the log
    /// is light (two-phase commit: micro update at 100% multisite, sync, 1.26,
    /// 1.06, 1.08 times as fast), and costs where the disk and the cores are
    /// busy with the log itself (TPC-C 50/50, sync: 0.73, 0.82, 0.93). Off by default.
    pub preallocate: bool,
    /// Whose log the directory must hold (checked against its control file; a new
    /// directory records it).
    pub identity: LogIdentity,
    /// What recovery does with damage that is not a torn tail.
    pub on_damage: OnDamage,
    /// Where the log's threads (its writer, its preallocator) register;
    /// `None`: nowhere.
    pub threads: Option<ThreadRegistry>,
    /// Gtid sequence numbers reserved at open, per worker (see [`Wal::gtid_start`]): at
    /// least 2. [`crate::coord::GTID_RESERVE`] unless a test wants reservations often.
    pub gtid_reserve: u64,
}

/// What recovery does with damage it cannot explain as a torn tail (see the module
/// documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnDamage {
    /// Refuse to open, naming the file and offset, and change no file.
    #[default]
    Refuse,
    /// Repair the log: set aside files that are not part of it, rename misnamed segments
    /// back, and cut the log at the damage: truncate that segment there (a copy set aside
    /// first; set aside whole, if the damage is its start) and set every later segment
    /// aside, reporting what was done and dropped in [`Recovery::repaired`]. Deletes no
    /// file. Acknowledged transactions may be lost: a repair, never a default.
    Truncate,
}

impl WalConfig {
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
    pub const DEFAULT_GROUP_DELAY: Duration = Duration::from_micros(1000);

    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Self {
        WalConfig {
            dir: dir.into(),
            durability,
            segment_bytes: Self::DEFAULT_SEGMENT_BYTES,
            group_delay: Self::DEFAULT_GROUP_DELAY,
            preallocate: false,
            identity: LogIdentity::default(),
            on_damage: OnDamage::Refuse,
            threads: None,
            gtid_reserve: crate::coord::GTID_RESERVE,
        }
    }
}

/// Errors of the log. `Clone` so that the failure that poisoned the log can be handed to
/// every later caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    #[error("{op} {path}: {message}")]
    Io {
        op: &'static str,
        path: PathBuf,
        kind: io::ErrorKind,
        message: String,
    },
    #[error("the write-ahead log failed earlier and refuses further work: {0}")]
    Poisoned(Box<WalError>),
    #[error("the write-ahead log is shut down")]
    ShutDown,
    #[error("batch {seq} was never submitted (next seq is {next})")]
    NotSubmitted { seq: BatchSeq, next: BatchSeq },
    #[error("submit of a log buffer with an unfinished record (record_end missing)")]
    OpenRecord,
    #[error("invalid log configuration: {0}")]
    Config(String),
    #[error("log recovery failed: {0}")]
    Recovery(String),
    /// Damage that no crash explains; nothing was changed.
    #[error(
        "log damaged: {file} at offset {offset}: {reason} (every file was left as it is)",
        file = file.display()
    )]
    Damaged {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A file the log needs is gone; nothing was changed.
    #[error(
        "log incomplete: {file} is missing: {reason} (every file was left as it is)",
        file = file.display()
    )]
    Missing { file: PathBuf, reason: String },
    /// The directory holds another island's, deployment's or schema's log.
    #[error("log directory of another database: {file}: {reason}", file = file.display())]
    Identity { file: PathBuf, reason: String },
    #[error(
        "corrupt control file {file}: {reason} (`islands repair --log-dir DIR --rebuild-control` \
         rebuilds it from the checkpoint and the segments)",
        file = file.display()
    )]
    CorruptControl { file: PathBuf, reason: String },
    #[error(
        "log directory {dir} holds a log but no control file (CONTROL): it was written by an \
         older islands, or CONTROL was removed; this islands cannot tell whether segments are \
         missing, so it does not open it (`islands repair --log-dir DIR --rebuild-control` \
         rebuilds it from the checkpoint and the segments)",
        dir = dir.display()
    )]
    NoControl { dir: PathBuf },
    #[error("corrupt checkpoint {file}: {reason}", file = file.display())]
    CorruptCheckpoint { file: PathBuf, reason: String },
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: &Path, e: io::Error) -> Self {
        WalError::Io {
            op,
            path: path.to_path_buf(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl From<WalError> for crate::Error {
    fn from(e: WalError) -> Self {
        match e {
            WalError::Config(m) => crate::Error::Config(m),
            WalError::Recovery(m) => crate::Error::Recovery(m),
            e @ (WalError::Damaged { .. } | WalError::Missing { .. }) => {
                crate::Error::Damaged(e.to_string())
            }
            e @ (WalError::Identity { .. }
            | WalError::CorruptControl { .. }
            | WalError::NoControl { .. }
            | WalError::CorruptCheckpoint { .. }) => crate::Error::Recovery(e.to_string()),
            other => crate::Error::LogFailed(other.to_string()),
        }
    }
}

/// One row write inside a commit or prepare record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteEntry {
    pub table: u16,
    pub key: u64,
    /// `None` is a delete.
    pub row: Option<Vec<u8>>,
    /// `Some(offset)`: a patch, `row` holds bytes `offset..offset + len` of
    /// the row image only (an update of an existing row).
    pub patch_at: Option<u32>,
}

/// A recovered log record, tagged with the batch it was submitted in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRecord {
    Commit {
        seq: BatchSeq,
        tid: u64,
        writes: Vec<WriteEntry>,
    },
    Prepare {
        seq: BatchSeq,
        gtid: u64,
        /// The transaction id the branch's writes carry (per-row version order in replay).
        tid: u64,
        writes: Vec<WriteEntry>,
    },
    Decision {
        seq: BatchSeq,
        gtid: u64,
        commit: bool,
    },
    End {
        seq: BatchSeq,
        gtid: u64,
    },
}

impl LogRecord {
    pub fn seq(&self) -> BatchSeq {
        match self {
            LogRecord::Commit { seq, .. }
            | LogRecord::Prepare { seq, .. }
            | LogRecord::Decision { seq, .. }
            | LogRecord::End { seq, .. } => *seq,
        }
    }
}

/// A loaded checkpoint: rows as (table, key, tid, row bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointData {
    pub start_seq: BatchSeq,
    pub rows: Vec<(u16, u64, u64, Vec<u8>)>,
}

/// A torn tail: the newest segment's end, cut by a crash in the middle of a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// The newest segment.
    pub file: PathBuf,
    /// Offset of the first bad record: the log's records end here.
    pub offset: u64,
    pub reason: String,
    /// Bytes from `offset` to the end of the file.
    pub bytes_truncated: u64,
    /// Whether the segment was cut there (`false`: a recovery that only reads left it).
    pub cut: bool,
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "log segment {}: torn tail at offset {} ({}), ",
            self.file.display(),
            self.offset,
            self.reason,
        )?;
        if self.cut {
            write!(f, "truncated {} bytes", self.bytes_truncated)
        } else {
            write!(
                f,
                "{} bytes ignored (left as they are: this recovery writes nothing)",
                self.bytes_truncated
            )
        }
    }
}

/// What a recovery with [`OnDamage::Truncate`] (the repair) changed. It deletes no file:
/// what leaves the log is moved into the directory's [`SET_ASIDE_DIR`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Repair {
    /// Where the log was cut at damage, and what it dropped there.
    pub cut: Option<Cut>,
    /// Files moved out of the log: named like segments but not part of it (a copy, an
    /// empty file, garbage), or segments after the cut.
    pub set_aside: Vec<SetAside>,
    /// Segments whose name disagreed with their first batch, renamed to the name it gives
    /// (from, to), where the log needed them.
    pub renamed: Vec<(PathBuf, PathBuf)>,
    /// The log ends before what `CONTROL` or `SYNCED` say was durable: what is lost, in words.
    pub shortfall: Option<String>,
}

impl Repair {
    /// Whether records the log held (or said it held) were dropped: acknowledged
    /// transactions may be lost.
    pub fn lost(&self) -> bool {
        self.cut.is_some() || self.shortfall.is_some()
    }
}

/// The cut of a repair: the log now ends at `offset` of `file`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub file: PathBuf,
    pub offset: u64,
    pub reason: String,
    /// Bytes cut from `file` and in the segments set aside after it.
    pub bytes_dropped: u64,
    /// Records after the damage that still decoded (found again at later batch headers),
    /// and the transactions they belong to: tids of commits, gtids of 2PC records.
    pub records_dropped: u64,
    pub tids: Vec<u64>,
    pub gtids: Vec<u64>,
    /// A copy of `file` as it was before the cut (`None`: the whole file was set aside).
    pub copy: Option<PathBuf>,
}

/// A file a repair moved out of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    pub file: PathBuf,
    /// Where it is now.
    pub to: PathBuf,
    pub reason: String,
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "log cut at {} offset {} ({}): dropped {} bytes, {} decodable record(s) of {} \
             transaction(s) and {} distributed transaction(s)",
            self.file.display(),
            self.offset,
            self.reason,
            self.bytes_dropped,
            self.records_dropped,
            self.tids.len(),
            self.gtids.len()
        )?;
        if let Some(copy) = &self.copy {
            write!(
                f,
                "; its bytes before the cut are kept in {}",
                copy.display()
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for SetAside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "set aside {} as {}: {}",
            self.file.display(),
            self.to.display(),
            self.reason
        )
    }
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(c) = &self.cut {
            parts.push(c.to_string());
        }
        if let Some(s) = &self.shortfall {
            parts.push(s.clone());
        }
        for (from, to) in &self.renamed {
            parts.push(format!(
                "renamed {} to {} (the name its first batch gives)",
                from.display(),
                to.display()
            ));
        }
        for a in &self.set_aside {
            parts.push(a.to_string());
        }
        f.write_str(&parts.join("; "))
    }
}

/// What `Wal::open` (or [`read_only`]) found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    pub checkpoint: Option<CheckpointData>,
    /// Records of batches with seq >= the checkpoint's start seq (all if none), in log order.
    pub records: Vec<LogRecord>,
    pub truncated: Option<Truncation>,
    /// What [`OnDamage::Truncate`] cut.
    pub repaired: Option<Repair>,
    /// The directory's control file as recovery found it (`None`: a new directory).
    pub control: Option<Control>,
}

/// Where [`Wal::write_checkpoint_with`]'s rows go.
pub struct CheckpointSink<'a> {
    file: Option<&'a mut checkpoint::Writer>,
    rows: u64,
}

impl CheckpointSink<'_> {
    /// Appends one row (table, key, tid, row bytes) to the checkpoint.
    pub fn row(&mut self, table: u16, key: u64, tid: u64, row: &[u8]) -> Result<(), WalError> {
        self.rows += 1;
        match self.file.as_mut() {
            Some(w) => w
                .row(table, key, tid, row)
                .map_err(|(op, path, e)| WalError::io(op, &path, e)),
            None => Ok(()),
        }
    }
}

/// What `write_checkpoint` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub start_seq: BatchSeq,
    /// The checkpoint file; `None` when durability is off (nothing is written).
    pub path: Option<PathBuf>,
    pub rows: u64,
    pub bytes: u64,
    pub segments_deleted: usize,
}

/// What a log directory holds on disk ([`Wal::disk_usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub segments: u64,
    pub segment_bytes: u64,
    pub checkpoint_bytes: u64,
}

/// Counters of the writer, read with `Wal::stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    pub bytes_written: u64,
    pub batches_written: u64,
    pub syncs: u64,
    pub sync_nanos: u64,
    /// Segments rolled over to, and how many of them were preallocated.
    pub segments_created: u64,
    pub segments_preallocated: u64,
}

/// Guarded by `Shared::queue`: seq assignment and the hand-off to the writer.
struct Queue {
    next_seq: BatchSeq,
    pending: Vec<(BatchSeq, Vec<u8>)>,
    /// Emptied batch buffers, swapped into workers' `LogBuffer`s by `submit`.
    pool: Vec<Vec<u8>>,
    shutdown: bool,
    /// Someone holds locks until a pending batch is durable (a 2PC prepare or
    /// decision): the writer cuts its group-commit pause short. Cleared when
    /// the writer takes the pending batches.
    urgent: bool,
    /// The gtid reservation asked for ([`Wal::reserve_gtids`]): the writer makes the
    /// control file's reach at least this far.
    gtid_want: u64,
    /// The writer is in its group-commit pause (so `expedite` must wake it;
    /// `submit` does not, or every commit would cut the pause short).
    pausing: bool,
}

#[derive(Default)]
struct Stats {
    bytes_written: AtomicU64,
    batches_written: AtomicU64,
    syncs: AtomicU64,
    sync_nanos: AtomicU64,
    segments_created: AtomicU64,
    segments_preallocated: AtomicU64,
}

/// The file of zeros that the preallocator keeps ready for the next segment.
pub(crate) const SPARE_NAME: &str = "wal-spare.tmp";

/// Bytes a log writes into a segment that was not preallocated before it asks
/// for a spare (at most): a log that stays small (a test, a quiet island)
/// never writes a segment of zeros.
const PREALLOCATE_AFTER: u64 = 1 << 20;

/// Hand-off between the writer and the preallocator thread, which keeps one
/// spare segment ready (see [`LogDevice::preallocate`]).
#[derive(Default)]
struct Spare {
    /// The spare file is complete and durable.
    ready: AtomicBool,
    /// The writer wants a spare: make one. Guarded, with `cv`.
    wanted: Mutex<bool>,
    /// The writer has asked for spares (writer only): after the first ask, each adopted
    /// spare asks for the next.
    asked: AtomicBool,
    cv: Condvar,
    /// Shutdown: stop, even in the middle of a file.
    stop: AtomicBool,
}

struct Shared {
    cfg: WalConfig,
    device: Arc<dyn LogDevice>,
    queue: Mutex<Queue>,
    work_cv: Condvar,
    durable: AtomicU64,
    /// Batches up to this one are written and fdatasync'ed (the writer's; for the control file).
    synced: AtomicU64,
    /// The directory's control file as last written (`None` when durability is off).
    control: Mutex<Option<Control>>,
    /// This open's incarnation (see `control.rs`; 0 when durability is off).
    incarnation: u64,
    /// The gtid reservation as this open found it: where this incarnation's workers start.
    gtid_start: u64,
    /// The gtid reservation the control file holds durably (exclusive; `u64::MAX` when
    /// durability is off: nothing survives a restart to be confused with).
    gtid_reserved: AtomicU64,
    /// Taken by the writer around publishing progress or failure, so waiters never miss it.
    durable_lock: Mutex<()>,
    durable_cv: Condvar,
    /// Called after the durable mark moves, the log fails or the writer
    /// stops (see [`Wal::on_durable`]).
    on_durable: parking_lot::RwLock<Option<DurableHook>>,
    failed_flag: AtomicBool,
    failed: Mutex<Option<WalError>>,
    /// Set once the writer thread has exited.
    stopped: AtomicBool,
    /// Live segments, in order; the last is the one being written.
    segments: Mutex<Vec<(BatchSeq, PathBuf)>>,
    checkpoint_lock: Mutex<()>,
    stats: Stats,
    spare: Spare,
    /// Holds the exclusive flock on `<dir>/LOCK` while the log is open;
    /// [`Wal::shutdown`] closes it, so the directory is free once it returns
    /// (whatever still holds the shared state).
    dir_lock: Mutex<Option<std::fs::File>>,
}

/// What a log calls when its durable mark moves (see [`Wal::on_durable`]).
pub type DurableHook = Arc<dyn Fn() + Send + Sync>;

impl Shared {
    fn durable_moved(&self) {
        if let Some(f) = &*self.on_durable.read() {
            f();
        }
    }

    fn poison(&self, e: WalError) {
        {
            let mut failed = self.failed.lock();
            if failed.is_none() {
                *failed = Some(e);
            }
            self.failed_flag.store(true, Ordering::Release);
        }
        {
            let _g = self.durable_lock.lock();
            self.durable_cv.notify_all();
        }
        self.durable_moved();
    }

    /// Blocks until `done()` holds (checked under `durable_lock`, which the
    /// writer takes around publishing progress). Err if the log failed or
    /// its writer stopped first.
    fn wait_for(&self, done: impl Fn() -> bool) -> Result<(), WalError> {
        let mut g = self.durable_lock.lock();
        loop {
            if done() {
                return Ok(());
            }
            if let Some(e) = self.failure() {
                return Err(WalError::Poisoned(Box::new(e)));
            }
            if self.stopped.load(Ordering::Acquire) {
                return Err(WalError::ShutDown);
            }
            self.durable_cv.wait(&mut g);
        }
    }

    fn failure(&self) -> Option<WalError> {
        if !self.failed_flag.load(Ordering::Acquire) {
            return None;
        }
        self.failed.lock().clone()
    }

    fn publish(&self, seq: BatchSeq) {
        self.durable.store(seq, Ordering::Release);
        {
            let _g = self.durable_lock.lock();
            self.durable_cv.notify_all();
        }
        self.durable_moved();
    }
}

/// Takes an exclusive advisory lock on `<dir>/LOCK`: two logs writing one directory would
/// interleave batches and destroy both.
fn lock_dir(dir: &Path) -> Result<std::fs::File, WalError> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| WalError::io("create lock file", &path, e))?;
    if let Err(e) = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        let holder = lock_holder(&file).map_or_else(
            || "another open log".to_string(),
            |pid| format!("an open log of process {pid}"),
        );
        return Err(WalError::Config(format!(
            "log directory {} is in use by {holder} ({e})",
            dir.display()
        )));
    }
    Ok(file)
}

/// The process holding the flock on `file`, as the kernel lists it in
/// `/proc/locks` (read, never written: a refused open changes no file).
fn lock_holder(file: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let ino = file.metadata().ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        // `1: FLOCK  ADVISORY  WRITE 28926 fe:00:9978044 0 EOF`
        let f: Vec<&str> = l.split_whitespace().collect();
        let at_ino = f.get(5)?.rsplit(':').next()?.parse::<u64>().ok()?;
        (f.get(1) == Some(&"FLOCK") && at_ino == ino).then(|| f.get(4)?.parse().ok())?
    })
}

/// One island's write-ahead log. Shared as `Arc<Wal>`.
pub struct Wal {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    preallocator: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("cfg", &self.shared.cfg)
            .field("durable_seq", &self.durable_seq())
            .finish()
    }
}

/// Whether `dir` holds a log segment or a checkpoint, the files [`Wal::open`]
/// recovers from. A tool that only reads a database (a consistency check)
/// asks first: opening a directory without them creates a lock file and an
/// empty segment in it.
pub fn holds_log(dir: &Path) -> Result<bool, WalError> {
    let listing = recovery::list_dir(dir)?;
    Ok(!listing.segments.is_empty() || !listing.checkpoints.is_empty())
}

/// Everything recovery read and judged, before anything is written.
struct Inspected {
    listing: recovery::DirListing,
    control: Option<Control>,
    checkpoint: Option<CheckpointData>,
    /// The scan of the log's segments; with [`OnDamage::Truncate`], of the chain
    /// [`recovery::sort_out`] made of them (each entry the name it is to have, and the
    /// file's present path).
    scan: recovery::Scan,
    /// [`OnDamage::Truncate`]: segments to rename to the name their first batch gives, and
    /// files to move out of the log.
    renames: Vec<(PathBuf, PathBuf)>,
    aside: Vec<recovery::Aside>,
    /// [`OnDamage::Truncate`]: the log ends before what the control file says was durable
    /// (its newest segments are gone); what is lost, in words.
    shortfall: Option<String>,
}

/// Reads the log in `dir` and judges it against its control file and `identity`, writing
/// nothing: damage is an error unless `on_damage` says to cut it (the caller does).
fn inspect(dir: &Path, identity: &LogIdentity, on_damage: OnDamage) -> Result<Inspected, WalError> {
    let listing = recovery::list_dir(dir)?;
    let repair = on_damage == OnDamage::Truncate;
    let mut aside_mark = None;
    const STRAY: &str = "it is named like a log file (wal-<20 digits>.log, ckpt-<20 digits>.ckp) \
                         but is none";
    if let (false, Some(stray)) = (repair, listing.strays.first()) {
        return Err(WalError::Damaged {
            file: stray.clone(),
            offset: 0,
            reason: format!("{STRAY}: move it out of the log directory"),
        });
    }
    let control = control::read(dir)?;
    let ctl_path = control::path(dir);
    match &control {
        Some(c) => c.check(&ctl_path, identity)?,
        None if !listing.segments.is_empty() || !listing.checkpoints.is_empty() => {
            return Err(WalError::NoControl {
                dir: dir.to_path_buf(),
            })
        }
        None => {}
    }
    let checkpoint = recovery::load_checkpoint(&listing.checkpoints)?;
    let start_seq = checkpoint.as_ref().map_or(0, |c| c.start_seq);
    let mark = match synced::read(dir) {
        // A repair sets a mark that does not check aside, and the open writes a new one.
        Err(WalError::CorruptControl { file, reason }) if repair => {
            aside_mark = Some(recovery::Aside {
                path: file,
                reason: format!("it does not check ({reason})"),
            });
            None
        }
        r => r?,
    };
    let (scan, renames, mut aside) = if repair {
        let sorted = recovery::sort_out(listing.segments.clone(), start_seq)?;
        (sorted.scan, sorted.renames, sorted.aside)
    } else {
        let scan = recovery::scan(listing.segments.clone())?;
        (scan, Vec::new(), Vec::new())
    };
    if repair {
        aside.extend(listing.strays.iter().map(|p| recovery::Aside {
            path: p.clone(),
            reason: STRAY.into(),
        }));
        aside.extend(aside_mark);
    }
    let mut shortfall = match &control {
        Some(c) => check_extent(dir, c, &listing.checkpoints, &scan.segments, on_damage)?,
        None => None,
    };
    if scan.first_seq > start_seq.max(1) {
        let first = &scan.segments[0].1;
        return Err(WalError::Missing {
            file: dir.join(recovery::segment_name(start_seq.max(1))),
            reason: format!(
                "the log's first segment {} starts at batch {}, but batches from {} on are in no \
                 checkpoint (segments before it were deleted)",
                first.display(),
                scan.first_seq,
                start_seq.max(1)
            ),
        });
    }
    if let recovery::End::Damaged(f) = &scan.end {
        if on_damage == OnDamage::Refuse {
            return Err(WalError::Damaged {
                file: scan.segments[f.segment].1.clone(),
                offset: f.offset,
                reason: f.reason.clone(),
            });
        }
    } else if let Some(c) = &control {
        // The log and the checkpoint reach every batch that was durable when the control
        // file was written.
        let reach = scan.max_seq.max(start_seq.saturating_sub(1));
        if c.durable > reach {
            let last = scan.segments.last().map_or_else(
                || dir.join(recovery::segment_name(reach + 1)),
                |s| s.1.clone(),
            );
            let reason = format!(
                "the log ends at batch {reach} (in {}), but batch {} was durable when {} was \
                 written: the end of the log is gone",
                last.display(),
                c.durable,
                ctl_path.display()
            );
            if on_damage == OnDamage::Refuse {
                return Err(WalError::Missing {
                    file: dir.join(recovery::segment_name(reach + 1)),
                    reason,
                });
            }
            shortfall = shortfall.or(Some(reason));
        }
    }
    if let Some(m) = &mark {
        if let Some((file, offset, reason)) = below_mark(dir, &scan, start_seq, m)? {
            if on_damage == OnDamage::Refuse {
                return Err(WalError::Damaged {
                    file,
                    offset,
                    reason,
                });
            }
            shortfall = shortfall.or(Some(reason));
        }
    }
    Ok(Inspected {
        listing,
        control,
        checkpoint,
        scan,
        renames,
        aside,
        shortfall,
    })
}

/// Where the log's records end, if that is before the synced mark `m`: records that an
/// fdatasync made durable are gone, which no crash explains (a crash cannot shorten a file
/// below what was synced). Returns the file and offset where the records end, and why
/// that is damage. A log that ends in damage is judged by its damage instead.
fn below_mark(
    dir: &Path,
    scan: &recovery::Scan,
    start_seq: BatchSeq,
    m: &synced::Mark,
) -> Result<Option<(PathBuf, u64, String)>, WalError> {
    let at = |i: usize, offset: u64| (scan.segments[i].0, scan.segments[i].1.clone(), offset);
    let last = scan.segments.len().checked_sub(1);
    let end = match (&scan.end, last) {
        (recovery::End::Damaged(_), _) => return Ok(None),
        (recovery::End::Torn(f), _) => Some(at(f.segment, f.offset)),
        (recovery::End::Zeros { offset }, Some(i)) => Some(at(i, *offset)),
        (_, Some(i)) => {
            let p = &scan.segments[i].1;
            let len = std::fs::metadata(p)
                .map_err(|e| WalError::io("stat log segment", p, e))?
                .len();
            Some(at(i, len))
        }
        (_, None) => None,
    };
    let said = format!(
        "{} says every batch up to {} was fdatasync'ed, through offset {} of {}; a crash cannot \
         lose synced bytes, so records the log acknowledged are gone (a segment cut short, \
         deleted or overwritten)",
        synced::path(dir).display(),
        m.seq,
        m.offset,
        recovery::segment_name(m.segment)
    );
    Ok(match end {
        Some((seg, file, offset)) if (m.segment, m.offset) > (seg, offset) => Some((
            file,
            offset,
            format!("the log's records end here, but {said}"),
        )),
        None if m.seq > start_seq.saturating_sub(1) => Some((
            dir.join(recovery::segment_name(m.segment)),
            0,
            format!("the log holds no segment, but {said}"),
        )),
        _ => None,
    })
}

/// The files the control file says must exist do. A repair ([`OnDamage::Truncate`])
/// accepts a log whose newest segments are gone, and gets back what is lost, in words;
/// nothing accepts one whose oldest segment or checkpoint is gone.
fn check_extent(
    dir: &Path,
    c: &Control,
    checkpoints: &[(BatchSeq, PathBuf)],
    segments: &[(BatchSeq, PathBuf)],
    on_damage: OnDamage,
) -> Result<Option<String>, WalError> {
    let ctl = control::path(dir);
    let missing = |file: PathBuf, which: &str| WalError::Missing {
        file,
        reason: format!("{} names it as {which}", ctl.display()),
    };
    if c.checkpoint != 0 && checkpoints.last().is_none_or(|l| l.0 < c.checkpoint) {
        return Err(missing(
            dir.join(checkpoint::checkpoint_name(c.checkpoint)),
            "the newest checkpoint, and no newer one is there",
        ));
    }
    let has = |seq: BatchSeq| seq == 0 || segments.iter().any(|s| s.0 == seq);
    if !has(c.first_segment) {
        return Err(missing(
            dir.join(recovery::segment_name(c.first_segment)),
            "the oldest segment that must exist",
        ));
    }
    if !has(c.last_segment) {
        let file = dir.join(recovery::segment_name(c.last_segment));
        return match on_damage {
            OnDamage::Refuse => Err(missing(
                file,
                "the newest segment the log made (renamed or deleted?)",
            )),
            OnDamage::Truncate => Ok(Some(format!(
                "{} is missing ({} names it as the newest segment): the batches from {} on are lost",
                file.display(),
                ctl.display(),
                c.last_segment
            ))),
        };
    }
    Ok(None)
}

/// Where a repair moves the files it takes out of a log directory: nothing it does
/// deletes a file.
pub const SET_ASIDE_DIR: &str = "set-aside";

/// The set-aside directory of `dir`, made (durably) if it is not there.
fn aside_dir(dev: &dyn LogDevice, dir: &Path) -> Result<PathBuf, WalError> {
    let aside = dir.join(SET_ASIDE_DIR);
    if !aside.is_dir() {
        std::fs::create_dir(&aside).map_err(|e| WalError::io("create directory", &aside, e))?;
        dev.sync_dir(dir)
            .map_err(|e| WalError::io("fsync log directory", dir, e))?;
    }
    Ok(aside)
}

/// A name in the set-aside directory for `file` that no file has: its own, or its own
/// with `.1`, `.2`, ... after it.
fn aside_name(aside: &Path, file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let mut to = aside.join(&name);
    let mut n = 0;
    while to.exists() {
        n += 1;
        to = aside.join(format!("{name}.{n}"));
    }
    to
}

/// Moves `file` into the set-aside directory of `dir` (durable after [`sync_dirs`]).
fn set_aside(dev: &dyn LogDevice, dir: &Path, file: &Path) -> Result<PathBuf, WalError> {
    let to = aside_name(&aside_dir(dev, dir)?, file);
    dev.rename(file, &to)
        .map_err(|e| WalError::io("set aside", file, e))?;
    Ok(to)
}

/// Copies `file` into the set-aside directory of `dir`, durably, before a repair cuts it.
fn copy_aside(dev: &dyn LogDevice, dir: &Path, file: &Path) -> Result<PathBuf, WalError> {
    let to = aside_name(&aside_dir(dev, dir)?, file);
    let bytes = std::fs::read(file).map_err(|e| WalError::io("read log segment", file, e))?;
    let mut out = dev
        .create(&to)
        .map_err(|e| WalError::io("create copy of log segment", &to, e))?;
    out.write_all(&bytes)
        .and_then(|()| out.sync_data())
        .map_err(|e| WalError::io("write copy of log segment", &to, e))?;
    dev.sync_dir(to.parent().unwrap_or(dir))
        .map_err(|e| WalError::io("fsync directory", &to, e))?;
    Ok(to)
}

/// Makes a repair's renames durable: the log directory and its set-aside directory.
fn sync_dirs(dev: &dyn LogDevice, dir: &Path) -> Result<(), WalError> {
    let aside = dir.join(SET_ASIDE_DIR);
    if aside.is_dir() {
        dev.sync_dir(&aside)
            .map_err(|e| WalError::io("fsync directory", &aside, e))?;
    }
    dev.sync_dir(dir)
        .map_err(|e| WalError::io("fsync log directory", dir, e))
}

/// Shortens a segment to its first `len` bytes, durably.
fn cut_segment(device: &dyn LogDevice, path: &Path, len: u64) -> Result<(), WalError> {
    let mut file = device
        .open_append(path)
        .map_err(|e| WalError::io("open log segment for truncation", path, e))?;
    file.set_len(len)
        .and_then(|()| file.sync_data())
        .map_err(|e| WalError::io("truncate log segment", path, e))
}

/// Takes a shared lock on `<dir>/LOCK` if the file exists, without creating anything: a
/// log that has the directory open holds it exclusively.
fn lock_dir_shared(dir: &Path) -> Result<Option<std::fs::File>, WalError> {
    let path = dir.join("LOCK");
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WalError::io("open lock file", &path, e)),
    };
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared).map_err(|e| {
        WalError::Config(format!(
            "log directory {} is in use by an open log ({e})",
            dir.display()
        ))
    })?;
    Ok(Some(file))
}

/// Recovers the log in `dir` without writing a byte there: no lock file is created, no
/// torn tail is cut (it is reported with `cut: false`), no temporary file is removed, and
/// damage is refused. The directory must hold a control file matching `identity`. For
/// checks; a log that goes on is opened with [`Wal::open`].
pub fn read_only(dir: &Path, identity: &LogIdentity) -> Result<Recovery, WalError> {
    if !dir.is_dir() {
        return Err(WalError::Config(format!(
            "log directory {} does not exist",
            dir.display()
        )));
    }
    let _lock = lock_dir_shared(dir)?;
    let ins = inspect(dir, identity, OnDamage::Refuse)?;
    if ins.control.is_none() {
        return Err(WalError::Config(format!(
            "{} holds no log (no control file, segment or checkpoint)",
            dir.display()
        )));
    }
    let start_seq = ins.checkpoint.as_ref().map_or(0, |c| c.start_seq);
    let truncated = match &ins.scan.end {
        recovery::End::Torn(f) => {
            let file = ins.scan.segments[f.segment].1.clone();
            let len = std::fs::metadata(&file)
                .map_err(|e| WalError::io("stat log segment", &file, e))?
                .len();
            Some(Truncation {
                file,
                offset: f.offset,
                reason: f.reason.clone(),
                bytes_truncated: len - f.offset,
                cut: false,
            })
        }
        _ => None,
    };
    let mut records = ins.scan.records;
    records.retain(|r| r.seq() >= start_seq);
    Ok(Recovery {
        checkpoint: ins.checkpoint,
        records,
        truncated,
        repaired: None,
        control: ins.control,
    })
}

impl Wal {
    /// Opens (creating if needed) the log directory, checks it against its control file,
    /// loads the newest checkpoint, scans the segments, cuts a torn tail (reported in
    /// `Recovery::truncated`), refuses damage (unless [`WalConfig::on_damage`] says to cut
    /// it), and starts the writer thread. With `Durability::Off` nothing is read or written.
    pub fn open(cfg: WalConfig) -> Result<(Arc<Wal>, Recovery), WalError> {
        Self::open_with_device(cfg, Arc::new(FsDevice))
    }

    /// `open` with the log's writes going through `device` (tests inject failures and
    /// power cuts here).
    pub fn open_with_device(
        cfg: WalConfig,
        device: Arc<dyn LogDevice>,
    ) -> Result<(Arc<Wal>, Recovery), WalError> {
        if cfg.segment_bytes == 0 {
            return Err(WalError::Config("segment_bytes must be at least 1".into()));
        }
        if cfg.gtid_reserve < 2 {
            return Err(WalError::Config("gtid_reserve must be at least 2".into()));
        }
        if cfg.durability == Durability::Off {
            let shared = Self::shared(cfg, device, 1, Vec::new(), None, None, (0, 1, u64::MAX));
            let wal = Wal {
                shared,
                writer: Mutex::new(None),
                preallocator: Mutex::new(None),
            };
            return Ok((Arc::new(wal), Recovery::default()));
        }

        let dir = cfg.dir.clone();
        let existed = dir.is_dir();
        std::fs::create_dir_all(&dir).map_err(|e| WalError::io("create log directory", &dir, e))?;
        if !existed {
            // Make the new directory's own entry durable.
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            device
                .sync_dir(&parent)
                .map_err(|e| WalError::io("fsync parent of log directory", &parent, e))?;
        }
        let lock = lock_dir(&dir)?;
        let ins = inspect(&dir, &cfg.identity, cfg.on_damage)?;
        // Everything was judged: from here on the directory changes.
        let dev = device.as_ref();
        for tmp in &ins.listing.temps {
            dev.remove(tmp)
                .map_err(|e| WalError::io("remove temporary file", tmp, e))?;
        }
        let found_control = ins.control.clone();
        let mut control = match ins.control {
            Some(mut c) => {
                if c.workload.is_empty() {
                    c.workload = cfg.identity.workload.clone();
                }
                if c.sites == 0 {
                    c.sites = cfg.identity.sites;
                }
                c
            }
            None => {
                // Written before the first segment, so that no crash leaves a log
                // without a control file.
                let c = Control::new(&cfg.identity);
                control::write(dev, &dir, &c)?;
                c
            }
        };
        let checkpoint = ins.checkpoint;
        let start_seq = checkpoint.as_ref().map_or(0, |c| c.start_seq);
        let mut scan = ins.scan;
        let mut truncated = None;
        let repair = cfg.on_damage == OnDamage::Truncate;
        let mut repaired = Repair {
            shortfall: ins.shortfall,
            ..Repair::default()
        };
        // The repair's moves first: strays out of the log, misnamed segments to their names.
        for a in ins.aside {
            let to = set_aside(dev, &dir, &a.path)?;
            repaired.set_aside.push(SetAside {
                file: a.path,
                to,
                reason: a.reason,
            });
        }
        for (from, to) in ins.renames {
            if to.exists() {
                return Err(WalError::Recovery(format!(
                    "cannot rename {} to {}: a file has that name",
                    from.display(),
                    to.display()
                )));
            }
            dev.rename(&from, &to)
                .map_err(|e| WalError::io("rename log segment", &from, e))?;
            for seg in scan.segments.iter_mut().filter(|s| s.1 == from) {
                seg.1 = to.clone();
            }
            repaired.renamed.push((from, to));
        }
        if !repaired.set_aside.is_empty() || !repaired.renamed.is_empty() {
            sync_dirs(dev, &dir)?;
        }
        match std::mem::replace(&mut scan.end, recovery::End::Clean) {
            recovery::End::Clean => {}
            // The last segment loses its unused zeros, so that appending goes on where its
            // records end; nothing is reported.
            recovery::End::Zeros { offset } => {
                let path = &scan.segments.last().expect("a segment ends in zeros").1;
                cut_segment(dev, path, offset)?;
            }
            recovery::End::Torn(f) => {
                let file = scan.segments[f.segment].1.clone();
                let len = std::fs::metadata(&file)
                    .map_err(|e| WalError::io("stat log segment", &file, e))?
                    .len();
                if repair {
                    // A repair keeps every byte it cuts.
                    let to = copy_aside(dev, &dir, &file)?;
                    repaired.set_aside.push(SetAside {
                        file: file.clone(),
                        to,
                        reason: format!(
                            "a copy of it before its torn tail (from offset {}) was cut",
                            f.offset
                        ),
                    });
                }
                cut_segment(dev, &file, f.offset)?;
                truncated = Some(Truncation {
                    file,
                    offset: f.offset,
                    reason: f.reason,
                    bytes_truncated: len - f.offset,
                    cut: true,
                });
            }
            recovery::End::Damaged(f) => {
                Self::cut_damage(dev, &dir, &mut scan, &f, &mut repaired)?;
            }
        }
        let repaired = (repaired != Repair::default()).then_some(repaired);
        // The last segment's name is a lower bound of the seqs it may hold.
        let last_name = scan.segments.last().map_or(0, |s| s.0);
        let next_seq = (scan.max_seq + 1).max(start_seq).max(last_name).max(1);
        let mut records = scan.records;
        records.retain(|r| r.seq() >= start_seq);

        // Open the segment to append to now, so an unwritable directory fails here, by name.
        let mut segments = scan.segments;
        let (mut file, file_len) = match segments.last() {
            Some((_, path)) => {
                let len = std::fs::metadata(path)
                    .map_err(|e| WalError::io("stat log segment", path, e))?
                    .len();
                let file = dev
                    .open_append(path)
                    .map_err(|e| WalError::io("open log segment", path, e))?;
                (file, len)
            }
            None => {
                let path = dir.join(recovery::segment_name(next_seq));
                let file = dev
                    .create(&path)
                    .map_err(|e| WalError::io("create log segment", &path, e))?;
                dev.sync_dir(&dir)
                    .map_err(|e| WalError::io("fsync log directory", &dir, e))?;
                segments.push((next_seq, path));
                (file, 0)
            }
        };
        // What recovery read may still be in the page cache only (a killed process's last
        // writes): make it durable before the control file says it is.
        if let Some((_, path)) = segments.last() {
            file.sync_data()
                .map_err(|e| WalError::io("fdatasync log segment", path, e))?;
        }
        control.checkpoint = start_seq;
        control.durable = next_seq - 1;
        control.first_segment = segments.first().map_or(0, |s| s.0);
        control.last_segment = segments.last().map_or(0, |s| s.0);
        // A new incarnation, durable before any gtid of it is handed out, with its first
        // gtid reservation: it starts above every one an earlier incarnation may have used.
        control.incarnation += 1;
        let gtid_start = control.gtid_reserved.max(1);
        control.gtid_reserved = gtid_start.saturating_add(cfg.gtid_reserve);
        let gtids = (control.incarnation, gtid_start, control.gtid_reserved);
        control::write(dev, &dir, &control)?;
        let segment = segments.last().map_or(next_seq, |s| s.0);
        let mark = synced::Mark {
            seq: next_seq - 1,
            segment,
            offset: file_len,
        };
        synced::write(dev, &dir, &mark)?;

        let shared = Self::shared(
            cfg,
            device,
            next_seq,
            segments,
            Some(lock),
            Some(control),
            gtids,
        );
        shared.durable.store(next_seq - 1, Ordering::Release);
        let writer = Writer {
            shared: Arc::clone(&shared),
            file,
            file_len,
            staging: Vec::with_capacity(STAGING_FLUSH_BYTES),
            taken: Vec::new(),
            unsynced: false,
            last_sync: Instant::now(),
            preallocated: false,
            staged_through: next_seq - 1,
            written_through: next_seq - 1,
            segment,
            synced_mark: mark,
            marked: mark,
            last_mark: Instant::now(),
        };
        let (threads, island) = (shared.cfg.threads.clone(), shared.cfg.identity.island);
        let handle = std::thread::Builder::new()
            .name(format!("i{island}-wal"))
            .spawn(move || {
                let _registered = enter(threads.as_ref(), Role::LogWriter, Some(island));
                writer.run()
            })
            .map_err(|e| WalError::io("spawn the log writer for", &dir, e))?;
        // After the writer, so that no early return leaves it waiting for
        // ever; without it the log runs on segments it creates, as when a
        // preallocation fails.
        let preallocator = if shared.cfg.preallocate {
            let pre_shared = Arc::clone(&shared);
            let threads = shared.cfg.threads.clone();
            std::thread::Builder::new()
                .name(format!("i{island}-wal-prealloc"))
                .spawn(move || {
                    let _registered = enter(threads.as_ref(), Role::LogPreallocator, Some(island));
                    preallocate_segments(&pre_shared)
                })
                .ok()
        } else {
            None
        };
        let wal = Wal {
            shared,
            writer: Mutex::new(Some(handle)),
            preallocator: Mutex::new(preallocator),
        };
        let recovery = Recovery {
            checkpoint,
            records,
            truncated,
            repaired,
            control: found_control,
        };
        Ok((Arc::new(wal), recovery))
    }

    /// [`OnDamage::Truncate`]: cuts the log at fault `f`: the faulty segment is cut there
    /// (a copy of it kept first), or set aside whole when the fault is its start and it is
    /// not the first; every later segment is set aside. Records what it did in `repaired`.
    fn cut_damage(
        dev: &dyn LogDevice,
        dir: &Path,
        scan: &mut recovery::Scan,
        f: &recovery::Fault,
        repaired: &mut Repair,
    ) -> Result<(), WalError> {
        let lost = recovery::salvage(scan, f)?;
        let file = scan.segments[f.segment].1.clone();
        let (keep, copy) = if f.offset == 0 && f.segment > 0 {
            (f.segment, None)
        } else {
            let copy = copy_aside(dev, dir, &file)?;
            cut_segment(dev, &file, f.offset)?;
            (f.segment + 1, Some(copy))
        };
        for (_, later) in scan.segments.drain(keep..) {
            let to = set_aside(dev, dir, &later)?;
            let reason = if later == file {
                format!("the log breaks at its start: {}", f.reason)
            } else {
                format!(
                    "it follows the damage in {} at offset {}",
                    file.display(),
                    f.offset
                )
            };
            repaired.set_aside.push(SetAside {
                file: later,
                to,
                reason,
            });
        }
        sync_dirs(dev, dir)?;
        repaired.cut = Some(Cut {
            file,
            offset: f.offset,
            reason: f.reason.clone(),
            bytes_dropped: lost.bytes,
            records_dropped: lost.records,
            tids: lost.tids,
            gtids: lost.gtids,
            copy,
        });
        Ok(())
    }

    fn shared(
        cfg: WalConfig,
        device: Arc<dyn LogDevice>,
        next_seq: BatchSeq,
        segments: Vec<(BatchSeq, PathBuf)>,
        lock: Option<std::fs::File>,
        control: Option<Control>,
        (incarnation, gtid_start, gtid_reserved): (u64, u64, u64),
    ) -> Arc<Shared> {
        Arc::new(Shared {
            cfg,
            device,
            queue: Mutex::new(Queue {
                next_seq,
                pending: Vec::new(),
                pool: Vec::new(),
                shutdown: false,
                urgent: false,
                pausing: false,
                gtid_want: 0,
            }),
            work_cv: Condvar::new(),
            durable: AtomicU64::new(next_seq - 1),
            synced: AtomicU64::new(next_seq - 1),
            control: Mutex::new(control),
            incarnation,
            gtid_start,
            gtid_reserved: AtomicU64::new(gtid_reserved),
            durable_lock: Mutex::new(()),
            durable_cv: Condvar::new(),
            on_durable: parking_lot::RwLock::new(None),
            failed_flag: AtomicBool::new(false),
            failed: Mutex::new(None),
            stopped: AtomicBool::new(false),
            segments: Mutex::new(segments),
            checkpoint_lock: Mutex::new(()),
            stats: Stats::default(),
            spare: Spare::default(),
            dir_lock: Mutex::new(lock),
        })
    }

    pub fn config(&self) -> &WalConfig {
        &self.shared.cfg
    }

    /// Hands the buffer's records to the log as one batch and leaves `buf` empty (swapped
    /// with a recycled buffer, so steady state does not allocate). Returns the batch's seq;
    /// the batch is durable once `durable_seq() >= seq`. An empty buffer is a valid batch.
    pub fn submit(&self, buf: &mut LogBuffer) -> Result<BatchSeq, WalError> {
        if buf.in_record() {
            return Err(WalError::OpenRecord);
        }
        let sh = &*self.shared;
        let mut q = sh.queue.lock();
        if let Some(e) = sh.failure() {
            return Err(WalError::Poisoned(Box::new(e)));
        }
        if q.shutdown {
            return Err(WalError::ShutDown);
        }
        let seq = q.next_seq;
        q.next_seq += 1;
        if sh.cfg.durability == Durability::Off {
            buf.clear();
            sh.durable.store(seq, Ordering::Release);
            return Ok(seq);
        }
        let mut bytes = q.pool.pop().unwrap_or_default();
        buf.swap_bytes(&mut bytes);
        q.pending.push((seq, bytes));
        let wake = !q.pausing;
        drop(q);
        if wake {
            sh.work_cv.notify_one();
        }
        Ok(seq)
    }

    /// Asks the writer to write and sync what is pending now, without the
    /// rest of its group-commit pause: for records whose transaction holds
    /// locks until they are durable (2PC prepares and decisions). Commits
    /// that only wait for their acknowledgement keep the pause, which is what
    /// makes their groups large.
    pub fn expedite(&self) {
        let sh = &*self.shared;
        let mut q = sh.queue.lock();
        if q.pending.is_empty() || q.urgent {
            return;
        }
        q.urgent = true;
        let wake = q.pausing;
        drop(q);
        if wake {
            sh.work_cv.notify_one();
        }
    }

    /// Sync: batches <= this are written and fdatasync'ed. Async: written. Off: submitted.
    /// Calls `hook` (from the log writer's thread) each time the durable
    /// mark moves, the log fails or its writer stops: executors that wait
    /// for durability sleep, and the hook wakes them. Replaces an earlier
    /// hook. The hook must be short and must not call into this log.
    pub fn on_durable(&self, hook: Option<DurableHook>) {
        *self.shared.on_durable.write() = hook;
    }

    pub fn durable_seq(&self) -> BatchSeq {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// The seq the next `submit` will get.
    pub fn next_seq(&self) -> BatchSeq {
        self.shared.queue.lock().next_seq
    }

    /// Blocks until batch `seq` is durable. Err if the log failed before that, if the log
    /// shut down without it, or if `seq` was never submitted.
    pub fn wait_durable(&self, seq: BatchSeq) -> Result<(), WalError> {
        let sh = &*self.shared;
        let next = self.next_seq();
        if seq >= next {
            return Err(WalError::NotSubmitted { seq, next });
        }
        sh.wait_for(|| sh.durable.load(Ordering::Acquire) >= seq)
    }

    /// The failure that poisoned the log, if any. Once `Some`, always `Some`.
    pub fn failed(&self) -> Option<WalError> {
        self.shared.failure()
    }

    /// The directory's control file as last written (`None` when durability is off).
    pub fn control(&self) -> Option<Control> {
        self.shared.control.lock().clone()
    }

    /// This open's incarnation: how many times the log was opened, this time included (0
    /// when durability is off). Durable before any gtid of this open is handed out.
    pub fn incarnation(&self) -> u64 {
        self.shared.incarnation
    }

    /// Where this incarnation's gtid sequence numbers start (per worker; see
    /// `coord/gtids.rs`): no earlier incarnation used one at or above it.
    pub fn gtid_start(&self) -> u64 {
        self.shared.gtid_start
    }

    /// The gtid reservation the control file holds durably now (exclusive; `u64::MAX` when
    /// durability is off). One atomic load: a worker reads it only when its draw nears it.
    pub fn gtid_reserved(&self) -> u64 {
        self.shared.gtid_reserved.load(Ordering::Acquire)
    }

    /// Asks the log writer to raise the gtid reservation to at least `upto`, durably, off
    /// the caller's path (the writer rewrites the control file after its current group).
    pub fn reserve_gtids(&self, upto: u64) {
        let sh = &*self.shared;
        if upto <= sh.gtid_reserved.load(Ordering::Acquire) {
            return;
        }
        let mut q = sh.queue.lock();
        if upto <= q.gtid_want {
            return;
        }
        q.gtid_want = upto;
        drop(q);
        sh.work_cv.notify_one();
    }

    /// Blocks until the gtid reservation reaches `upto` (ask for it with
    /// [`Wal::reserve_gtids`] first). Err if the log failed or shut down before that.
    pub fn wait_gtids(&self, upto: u64) -> Result<(), WalError> {
        let sh = &*self.shared;
        sh.wait_for(|| sh.gtid_reserved.load(Ordering::Acquire) >= upto)
    }

    /// Records in the control file, durably, that the database's initial load is complete:
    /// call it once every island's load is checkpointed. An opener serves a directory only
    /// once this is recorded ([`Control::loaded`]).
    pub fn mark_loaded(&self) -> Result<(), WalError> {
        if let Some(e) = self.shared.failure() {
            return Err(WalError::Poisoned(Box::new(e)));
        }
        let sh = &*self.shared;
        let mut ctl = sh.control.lock();
        if let Some(c) = ctl.as_mut() {
            if !c.loaded {
                c.loaded = true;
                control::write(sh.device.as_ref(), &sh.cfg.dir, c)?;
            }
        }
        Ok(())
    }

    /// Writes a checkpoint of `rows` (table, key, tid, row), which must reflect every batch
    /// below `start_seq` (read `next_seq()` before taking the snapshot). Once it is durable,
    /// older checkpoints and every segment whose batches are all below `start_seq` are deleted.
    pub fn write_checkpoint<'a>(
        &self,
        start_seq: BatchSeq,
        rows: impl Iterator<Item = (u16, u64, u64, &'a [u8])>,
    ) -> Result<CheckpointInfo, WalError> {
        self.write_checkpoint_with(
            start_seq,
            |sink| {
                for (table, key, tid, row) in rows {
                    sink.row(table, key, tid, row)?;
                }
                Ok(())
            },
            || Ok(()),
        )
    }

    /// [`Wal::write_checkpoint`] with the rows streamed by `fill` into the
    /// file as it makes them (a snapshot of a live database need not be held
    /// in memory), and `before_publish` run once the file is complete and
    /// durable, before it replaces the older checkpoint: a checkpoint of a
    /// running database waits there until every log record its snapshot may
    /// hold effects of is durable. An error of either leaves no file behind.
    pub fn write_checkpoint_with(
        &self,
        start_seq: BatchSeq,
        fill: impl FnOnce(&mut CheckpointSink<'_>) -> Result<(), WalError>,
        before_publish: impl FnOnce() -> Result<(), WalError>,
    ) -> Result<CheckpointInfo, WalError> {
        let sh = &*self.shared;
        let next = self.next_seq();
        if start_seq == 0 || start_seq > next {
            return Err(WalError::Config(format!(
                "checkpoint start seq {start_seq} outside 1..={next}"
            )));
        }
        if sh.cfg.durability == Durability::Off {
            let mut sink = CheckpointSink {
                file: None,
                rows: 0,
            };
            fill(&mut sink)?;
            return Ok(CheckpointInfo {
                start_seq,
                path: None,
                rows: sink.rows,
                bytes: 0,
                segments_deleted: 0,
            });
        }
        if let Some(e) = sh.failure() {
            return Err(WalError::Poisoned(Box::new(e)));
        }
        let _one_at_a_time = sh.checkpoint_lock.lock();
        let dir = &sh.cfg.dir;
        let dev = sh.device.as_ref();
        let io = |(op, path, e): checkpoint::CkptIoError| WalError::io(op, &path, e);
        let mut writer =
            checkpoint::Writer::create(Arc::clone(&sh.device), dir, start_seq).map_err(io)?;
        let mut sink = CheckpointSink {
            file: Some(&mut writer),
            rows: 0,
        };
        fill(&mut sink)?;
        let (rows, bytes) = writer.seal().map_err(io)?;
        before_publish()?;
        let path = writer.publish().map_err(io)?;

        let doomed: Vec<(BatchSeq, PathBuf)> = {
            let mut segs = sh.segments.lock();
            // Segment i holds only batches < the name of segment i+1; never drop the last.
            let n = segs.windows(2).take_while(|w| w[1].0 <= start_seq).count();
            segs.drain(..n).collect()
        };
        // The new checkpoint is durable. The control file says so before older checkpoints
        // and covered segments go, so that it never names a file that is gone.
        {
            let mut ctl = sh.control.lock();
            if let Some(c) = ctl.as_mut() {
                c.checkpoint = start_seq;
                c.durable = c.durable.max(sh.synced.load(Ordering::Acquire));
                c.first_segment = sh.segments.lock().first().map_or(0, |s| s.0);
                control::write(dev, dir, c)?;
            }
        }
        // Only older ones: a file named like a newer checkpoint is none this log wrote.
        for (seq, old) in recovery::list_dir(dir)?.checkpoints {
            if seq < start_seq {
                dev.remove(&old)
                    .map_err(|e| WalError::io("delete old checkpoint", &old, e))?;
            }
        }
        for (_, seg) in &doomed {
            dev.remove(seg)
                .map_err(|e| WalError::io("delete log segment", seg, e))?;
        }
        dev.sync_dir(dir)
            .map_err(|e| WalError::io("fsync log directory", dir, e))?;
        Ok(CheckpointInfo {
            start_seq,
            path: Some(path),
            rows,
            bytes,
            segments_deleted: doomed.len(),
        })
    }

    /// Writes and syncs everything queued, then stops the writer thread. Idempotent.
    pub fn shutdown(&self) {
        self.shared.queue.lock().shutdown = true;
        self.shared.work_cv.notify_all();
        let handle = self.writer.lock().take();
        if let Some(h) = handle {
            // A panicking writer already poisoned the log (see Writer::run).
            let _ = h.join();
        }
        self.shared.spare.stop.store(true, Ordering::Release);
        {
            let _g = self.shared.spare.wanted.lock();
            self.shared.spare.cv.notify_all();
        }
        if let Some(h) = self.preallocator.lock().take() {
            let _ = h.join();
            // A spare nobody will take (a crash leaves it to the next open).
            let _ = self
                .shared
                .device
                .remove(&self.shared.cfg.dir.join(SPARE_NAME));
        }
        self.shared.stopped.store(true, Ordering::Release);
        {
            let _g = self.shared.durable_lock.lock();
            self.shared.durable_cv.notify_all();
        }
        // Nothing writes any more: another open may take the directory.
        drop(self.shared.dir_lock.lock().take());
    }

    pub fn stats(&self) -> WalStats {
        let s = &self.shared.stats;
        WalStats {
            bytes_written: s.bytes_written.load(Ordering::Relaxed),
            batches_written: s.batches_written.load(Ordering::Relaxed),
            syncs: s.syncs.load(Ordering::Relaxed),
            sync_nanos: s.sync_nanos.load(Ordering::Relaxed),
            segments_created: s.segments_created.load(Ordering::Relaxed),
            segments_preallocated: s.segments_preallocated.load(Ordering::Relaxed),
        }
    }

    /// Bytes the log directory holds now: its segments and its checkpoint
    /// files (what a recovery reads). Zero without a log.
    pub fn disk_usage(&self) -> Result<DiskUsage, WalError> {
        if self.shared.cfg.durability == Durability::Off {
            return Ok(DiskUsage::default());
        }
        let dir = &self.shared.cfg.dir;
        let listing = recovery::list_dir(dir)?;
        let size = |files: &[(BatchSeq, PathBuf)]| -> Result<u64, WalError> {
            let mut n = 0;
            for (_, p) in files {
                n += match std::fs::metadata(p) {
                    Ok(m) => m.len(),
                    // Deleted by a checkpoint since the listing.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                    Err(e) => return Err(WalError::io("stat", p, e)),
                };
            }
            Ok(n)
        };
        Ok(DiskUsage {
            segments: listing.segments.len() as u64,
            segment_bytes: size(&listing.segments)?,
            checkpoint_bytes: size(&listing.checkpoints)?,
        })
    }

    /// Live segment files, oldest first (for tests and tools).
    pub fn segments(&self) -> Vec<PathBuf> {
        self.shared
            .segments
            .lock()
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The writer thread's state. Owns the current segment file.
struct Writer {
    shared: Arc<Shared>,
    file: Box<dyn LogFile>,
    /// Bytes in the current segment, including what was written but not synced.
    file_len: u64,
    /// Batches of one group are copied here and written with one write call per segment.
    staging: Vec<u8>,
    taken: Vec<(BatchSeq, Vec<u8>)>,
    unsynced: bool,
    last_sync: Instant,
    /// The current segment was preallocated: writing it changes no metadata.
    preallocated: bool,
    /// The last batch copied into `staging`, and the last one written to the file.
    staged_through: BatchSeq,
    written_through: BatchSeq,
    /// The current segment's name (its first batch).
    segment: BatchSeq,
    /// How far the log is fdatasync'ed, and what `SYNCED` says (see `synced.rs`).
    synced_mark: synced::Mark,
    marked: synced::Mark,
    last_mark: Instant,
}

impl Spare {
    fn ask(&self) {
        self.asked.store(true, Ordering::Relaxed);
        *self.wanted.lock() = true;
        self.cv.notify_one();
    }
}

/// The preallocator thread: keeps one spare segment of zeros ready for the
/// writer's next roll-over, off the writer's path (zero-filling 64 MiB takes
/// a fraction of a second). A failure is not the log's: segments are then
/// created empty, as without preallocation, and the spare file is left for
/// the next open to remove.
fn preallocate_segments(shared: &Shared) {
    let spare = &shared.spare;
    let path = shared.cfg.dir.join(SPARE_NAME);
    loop {
        {
            let mut wanted = spare.wanted.lock();
            while !*wanted && !spare.stop.load(Ordering::Acquire) {
                spare.cv.wait(&mut wanted);
            }
            if spare.stop.load(Ordering::Acquire) {
                return;
            }
            *wanted = false;
        }
        match shared
            .device
            .preallocate(&path, shared.cfg.segment_bytes, &spare.stop)
        {
            Ok(true) => spare.ready.store(true, Ordering::Release),
            Ok(false) | Err(_) => return,
        }
    }
}

impl Writer {
    fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_loop()));
        let err = match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some(WalError::Io {
                op: "log writer thread panicked while writing",
                path: shared.cfg.dir.clone(),
                kind: io::ErrorKind::Other,
                message: "panic".into(),
            }),
        };
        if let Some(e) = err {
            shared.poison(e);
        }
        shared.stopped.store(true, Ordering::Release);
        {
            let _g = shared.durable_lock.lock();
            shared.durable_cv.notify_all();
        }
        shared.durable_moved();
    }

    fn run_loop(&mut self) -> Result<(), WalError> {
        let async_mode = self.shared.cfg.durability == Durability::Async;
        loop {
            if !async_mode && self.shared.cfg.group_delay > Duration::ZERO {
                // Group commit: let more batches arrive before the next
                // write + fdatasync. Each fdatasync costs kernel CPU that the
                // workers share; a short pause buys much larger groups. An
                // `expedite` (locks wait on a pending batch) ends it early.
                let deadline = self.last_sync + self.shared.cfg.group_delay;
                let mut q = self.shared.queue.lock();
                q.pausing = true;
                while !q.urgent && !q.shutdown {
                    if self.shared.work_cv.wait_until(&mut q, deadline).timed_out() {
                        break;
                    }
                }
                q.pausing = false;
            }
            let (shutdown, gtid_want) = {
                let mut q = self.shared.queue.lock();
                while q.pending.is_empty()
                    && !q.shutdown
                    && q.gtid_want <= self.shared.gtid_reserved.load(Ordering::Acquire)
                {
                    if async_mode && self.unsynced {
                        let left = ASYNC_SYNC_INTERVAL.saturating_sub(self.last_sync.elapsed());
                        if left.is_zero() || self.shared.work_cv.wait_for(&mut q, left).timed_out()
                        {
                            break;
                        }
                    } else {
                        self.shared.work_cv.wait(&mut q);
                    }
                }
                std::mem::swap(&mut q.pending, &mut self.taken);
                q.urgent = false;
                (q.shutdown, q.gtid_want)
            };
            if !self.taken.is_empty() {
                self.write_group()?;
            }
            let sync_due = self.unsynced
                && (shutdown || !async_mode || self.last_sync.elapsed() >= ASYNC_SYNC_INTERVAL);
            if sync_due {
                self.sync()?;
            }
            if let Some(&(last, _)) = self.taken.last() {
                // Sync: everything taken is written and fdatasync'ed; async: written.
                // Recycle first, so a worker that saw the publish finds its buffer pooled.
                self.recycle();
                self.shared.publish(last);
            }
            // After the publish: no commit of this group waits for it.
            self.mark(shutdown)?;
            if gtid_want > self.shared.gtid_reserved.load(Ordering::Acquire) {
                self.reserve_gtids(gtid_want)?;
            }
            if shutdown {
                return Ok(());
            }
        }
    }

    /// Writes every taken batch, rolling segments at batch boundaries.
    fn write_group(&mut self) -> Result<(), WalError> {
        let seg_bytes = self.shared.cfg.segment_bytes;
        self.staging.clear();
        for i in 0..self.taken.len() {
            let seq = self.taken[i].0;
            let used = self.file_len + self.staging.len() as u64;
            // A segment that was not preallocated (the first, or one the
            // spare was not ready for) gives way as soon as a spare is.
            if used >= seg_bytes
                || (used > 0
                    && !self.preallocated
                    && self.shared.spare.ready.load(Ordering::Acquire))
            {
                self.roll(seq)?;
            }
            format::push_batch_header(&mut self.staging, seq);
            self.staging.extend_from_slice(&self.taken[i].1);
            self.staged_through = seq;
            if self.staging.len() >= STAGING_FLUSH_BYTES {
                self.flush_staging()?;
            }
        }
        self.flush_staging()?;
        if !self.preallocated
            && self.shared.cfg.preallocate
            && self.file_len >= PREALLOCATE_AFTER.min(seg_bytes / 4)
            && !self.shared.spare.asked.load(Ordering::Relaxed)
        {
            self.shared.spare.ask();
        }
        let n = self.taken.len() as u64;
        self.shared
            .stats
            .batches_written
            .fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    fn current_path(&self) -> PathBuf {
        self.shared
            .segments
            .lock()
            .last()
            .map_or_else(|| self.shared.cfg.dir.clone(), |(_, p)| p.clone())
    }

    fn flush_staging(&mut self) -> Result<(), WalError> {
        if self.staging.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all(&self.staging) {
            return Err(WalError::io("write log segment", &self.current_path(), e));
        }
        let n = self.staging.len() as u64;
        self.file_len += n;
        self.unsynced = true;
        self.written_through = self.staged_through;
        self.shared
            .stats
            .bytes_written
            .fetch_add(n, Ordering::Relaxed);
        self.staging.clear();
        Ok(())
    }

    fn sync(&mut self) -> Result<(), WalError> {
        let t = Instant::now();
        if let Err(e) = self.file.sync_data() {
            return Err(WalError::io(
                "fdatasync log segment",
                &self.current_path(),
                e,
            ));
        }
        let s = &self.shared.stats;
        s.syncs.fetch_add(1, Ordering::Relaxed);
        s.sync_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.shared
            .synced
            .store(self.written_through, Ordering::Release);
        self.synced_mark = synced::Mark {
            seq: self.written_through,
            segment: self.segment,
            offset: self.file_len,
        };
        self.unsynced = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Finishes the current segment (written and synced) and starts `wal-<first_seq>.log`.
    fn roll(&mut self, first_seq: BatchSeq) -> Result<(), WalError> {
        self.flush_staging()?;
        if self.unsynced {
            self.sync()?;
        }
        let dir = &self.shared.cfg.dir;
        let path = dir.join(recovery::segment_name(first_seq));
        let spare = &self.shared.spare;
        let adopted = if spare.ready.swap(false, Ordering::AcqRel) {
            let adopted = self.shared.device.adopt(&dir.join(SPARE_NAME), &path).ok();
            if adopted.is_some() {
                // The next one, while this one fills.
                spare.ask();
            }
            adopted
        } else {
            None
        };
        self.preallocated = adopted.is_some();
        let file = match adopted {
            Some(f) => f,
            None => self
                .shared
                .device
                .create(&path)
                .map_err(|e| WalError::io("create log segment", &path, e))?,
        };
        self.shared
            .device
            .sync_dir(dir)
            .map_err(|e| WalError::io("fsync log directory", dir, e))?;
        self.file = file;
        self.file_len = 0;
        self.segment = first_seq;
        self.shared.segments.lock().push((first_seq, path));
        // Once per segment, not per batch: the control file names the newest segment, so
        // that one renamed or deleted is missed rather than taken for the end of the log.
        // After the directory sync above, so that it never names a segment that a crash
        // can take back.
        {
            let mut ctl = self.shared.control.lock();
            if let Some(c) = ctl.as_mut() {
                c.last_segment = first_seq;
                c.durable = c.durable.max(self.written_through);
                control::write(self.shared.device.as_ref(), dir, c)?;
            }
        }
        self.shared
            .stats
            .segments_created
            .fetch_add(1, Ordering::Relaxed);
        if self.preallocated {
            self.shared
                .stats
                .segments_preallocated
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Raises the control file's gtid reservation to `upto` (durably), then publishes it.
    fn reserve_gtids(&mut self, upto: u64) -> Result<(), WalError> {
        {
            let mut ctl = self.shared.control.lock();
            if let Some(c) = ctl.as_mut() {
                c.gtid_reserved = c.gtid_reserved.max(upto);
                c.durable = c.durable.max(self.shared.synced.load(Ordering::Acquire));
                control::write(self.shared.device.as_ref(), &self.shared.cfg.dir, c)?;
            }
        }
        self.shared.gtid_reserved.fetch_max(upto, Ordering::AcqRel);
        let _g = self.shared.durable_lock.lock();
        self.shared.durable_cv.notify_all();
        Ok(())
    }

    /// Rewrites `SYNCED` with how far the log is fdatasync'ed, if that moved and the last
    /// rewrite is [`synced::MARK_INTERVAL`] old (`now`: whatever its age).
    fn mark(&mut self, now: bool) -> Result<(), WalError> {
        if self.synced_mark == self.marked
            || (!now && self.last_mark.elapsed() < synced::MARK_INTERVAL)
        {
            return Ok(());
        }
        synced::write(
            self.shared.device.as_ref(),
            &self.shared.cfg.dir,
            &self.synced_mark,
        )?;
        self.marked = self.synced_mark;
        self.last_mark = Instant::now();
        Ok(())
    }

    /// Returns the emptied batch buffers to the pool for `submit` to reuse.
    fn recycle(&mut self) {
        let mut q = self.shared.queue.lock();
        for (_, mut bytes) in self.taken.drain(..) {
            if q.pool.len() < POOL_BUFFERS_MAX {
                bytes.clear();
                q.pool.push(bytes);
            }
        }
    }
}
