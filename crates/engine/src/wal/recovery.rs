//! Opening an existing log: list the directory, load the newest checkpoint, scan segments
//! in order, and cut the log at the first bad record (truncate that segment, delete later ones).

use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint;
use super::device::LogDevice;
use super::format::{decode_log_body, read_frame, Decoded};
use super::{BatchSeq, CheckpointData, LogRecord, Truncation, WalError};

pub(crate) fn segment_name(first_seq: BatchSeq) -> String {
    format!("wal-{first_seq:020}.log")
}

fn parse_seq(name: &str, prefix: &str, suffix: &str) -> Option<BatchSeq> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The files of a log directory, each list sorted by seq.
#[derive(Debug, Default)]
pub(crate) struct DirListing {
    pub segments: Vec<(BatchSeq, PathBuf)>,
    pub checkpoints: Vec<(BatchSeq, PathBuf)>,
    pub temps: Vec<PathBuf>,
}

pub(crate) fn list_dir(dir: &Path) -> Result<DirListing, WalError> {
    let io_err = |e| WalError::io("read log directory", dir, e);
    let mut out = DirListing::default();
    for entry in fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(seq) = parse_seq(name, "wal-", ".log") {
            out.segments.push((seq, entry.path()));
        } else if let Some(seq) = parse_seq(name, "ckpt-", ".ckp") {
            out.checkpoints.push((seq, entry.path()));
        } else if parse_seq(name, "ckpt-", ".tmp").is_some() || name == super::SPARE_NAME {
            out.temps.push(entry.path());
        }
    }
    out.segments.sort();
    out.checkpoints.sort();
    Ok(out)
}

/// Result of scanning the log segments.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub records: Vec<LogRecord>,
    /// Lowest and highest batch seq in the good part of the log (0 if none).
    pub first_seq: BatchSeq,
    pub max_seq: BatchSeq,
    /// Segments that remain after truncation, in order.
    pub segments: Vec<(BatchSeq, PathBuf)>,
    pub truncated: Option<Truncation>,
}

/// Where and why a segment's good prefix ends.
struct Cut {
    offset: usize,
    reason: String,
}

/// How a segment's records end.
enum End {
    /// At the end of the file.
    Clean,
    /// At this offset, with nothing but zero bytes after it: the unused part
    /// of a preallocated segment ([`super::LogDevice::preallocate`]).
    Zeros(usize),
    /// At a bad record: the tail from there is cut.
    Bad(Cut),
}

/// Scans one segment's bytes, appending its records, and says how they end.
fn scan_segment(data: &[u8], first_seq: BatchSeq, out: &mut Scan) -> End {
    let mut off = 0usize;
    let mut batch: Option<BatchSeq> = None;
    loop {
        let (body, next) = match read_frame(data, off) {
            Ok(Some(frame)) => frame,
            Ok(None) => return End::Clean,
            // No record has a zero length, so a torn write is never all
            // zeros unless none of it reached the disk (then it was never
            // acknowledged either).
            Err(_) if data[off..].iter().all(|&b| b == 0) => return End::Zeros(off),
            Err(e) => {
                return End::Bad(Cut {
                    offset: off,
                    reason: e.to_string(),
                })
            }
        };
        let cut = |reason: &str| {
            End::Bad(Cut {
                offset: off,
                reason: reason.to_string(),
            })
        };
        match decode_log_body(body, batch.unwrap_or(0)) {
            Ok(Decoded::Batch(seq)) => {
                // Every submitted batch is written, in order: seqs on disk are consecutive.
                let in_order = if out.max_seq == 0 {
                    seq >= first_seq.max(1)
                } else {
                    seq == out.max_seq + 1
                };
                if !in_order {
                    return cut(&format!(
                        "batch seq {seq} out of order (after {}, segment starts at {first_seq})",
                        out.max_seq
                    ));
                }
                if out.first_seq == 0 {
                    out.first_seq = seq;
                }
                out.max_seq = seq;
                batch = Some(seq);
            }
            Ok(Decoded::Record(rec)) => {
                if batch.is_none() {
                    return cut("record outside a batch");
                }
                out.records.push(rec);
            }
            Err(why) => return cut(why),
        }
        off = next;
    }
}

/// Scans `segments` in order. At the first bad record, truncates that segment to its good
/// prefix (through `device`, synced) and deletes every later segment, reporting both.
pub(crate) fn scan(
    dir: &Path,
    device: &dyn LogDevice,
    segments: Vec<(BatchSeq, PathBuf)>,
) -> Result<Scan, WalError> {
    let mut out = Scan::default();
    let mut iter = segments.into_iter();
    while let Some((first_seq, path)) = iter.next() {
        let data = fs::read(&path).map_err(|e| WalError::io("read log segment", &path, e))?;
        let end = scan_segment(&data, first_seq, &mut out);
        out.segments.push((first_seq, path.clone()));
        let cut = match end {
            End::Clean => continue,
            // The last segment loses its unused zeros, so that appending
            // goes on where its records end; nothing is reported.
            End::Zeros(off) if iter.len() == 0 => {
                cut_segment(device, &path, off)?;
                continue;
            }
            End::Zeros(_) => continue,
            End::Bad(cut) => cut,
        };

        cut_segment(device, &path, cut.offset)?;
        let mut deleted = Vec::new();
        for (_, later) in iter.by_ref() {
            fs::remove_file(&later).map_err(|e| WalError::io("delete log segment", &later, e))?;
            deleted.push(later);
        }
        device
            .sync_dir(dir)
            .map_err(|e| WalError::io("fsync log directory", dir, e))?;
        out.truncated = Some(Truncation {
            file: path,
            offset: cut.offset as u64,
            reason: cut.reason,
            bytes_truncated: (data.len() - cut.offset) as u64,
            segments_deleted: deleted,
        });
        break;
    }
    Ok(out)
}

/// Shortens a segment to its first `len` bytes, durably.
fn cut_segment(device: &dyn LogDevice, path: &Path, len: usize) -> Result<(), WalError> {
    let mut file = device
        .open_append(path)
        .map_err(|e| WalError::io("open log segment for truncation", path, e))?;
    file.set_len(len as u64)
        .and_then(|()| file.sync_data())
        .map_err(|e| WalError::io("truncate log segment", path, e))
}

/// Loads the newest checkpoint. A newest checkpoint that does not validate is an error, not
/// a reason to fall back: older log segments may already be gone.
pub(crate) fn load_checkpoint(
    checkpoints: &[(BatchSeq, PathBuf)],
) -> Result<Option<CheckpointData>, WalError> {
    let Some((seq, path)) = checkpoints.last() else {
        return Ok(None);
    };
    let data = checkpoint::read(path).map_err(WalError::Recovery)?;
    if data.start_seq != *seq {
        return Err(WalError::Recovery(format!(
            "checkpoint {} holds start seq {}, its name says {seq}",
            path.display(),
            data.start_seq
        )));
    }
    Ok(Some(data))
}
