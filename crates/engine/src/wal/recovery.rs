//! Reading an existing log: list the directory, load the newest checkpoint, and scan the
//! segments in order. Nothing here writes: the scan says how the records end (cleanly, in
//! a preallocated segment's zeros, in a torn tail, or in damage) and `Wal::open` decides
//! what to do about it (see the module documentation of `wal`).

use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint;
use super::format::{decode_log_body, read_frame, Decoded, HEADER_BYTES, REC_BATCH};
use super::{BatchSeq, CheckpointData, LogRecord, WalError};

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
    /// Temporary files a crash may leave (`ckpt-*.tmp`, `CONTROL.tmp`, the spare segment).
    pub temps: Vec<PathBuf>,
    /// Files named like the log's own (`wal-…`, `ckpt-…`) that are none of them.
    pub strays: Vec<PathBuf>,
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
        } else if parse_seq(name, "ckpt-", ".tmp").is_some()
            || name == super::SPARE_NAME
            || name == super::control::CONTROL_TMP
            || name == super::synced::SYNCED_TMP
        {
            out.temps.push(entry.path());
        } else if name.starts_with("wal-") || name.starts_with("ckpt-") {
            out.strays.push(entry.path());
        }
    }
    out.segments.sort();
    out.checkpoints.sort();
    out.strays.sort();
    Ok(out)
}

/// Where a segment's records stop being good, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    /// Index of the segment in [`Scan::segments`].
    pub segment: usize,
    pub offset: u64,
    pub reason: String,
}

/// How the log's records end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// At the end of the newest segment.
    Clean,
    /// The newest segment's records end at `offset`, and zeros follow to its end: the
    /// unused part of a preallocated segment ([`super::LogDevice::preallocate`]).
    Zeros { offset: u64 },
    /// The newest segment ends in a bad frame with no trace of a later write after it:
    /// the unsynced end of the log, torn by a crash.
    Torn(Fault),
    /// A fault no crash explains: in an older segment, followed by a later batch, or a
    /// break in the chain of batch seqs.
    Damaged(Fault),
}

/// Result of scanning the log segments.
#[derive(Debug)]
pub(crate) struct Scan {
    /// The good records, up to the end or fault.
    pub records: Vec<LogRecord>,
    /// Lowest and highest batch seq of the good records (0 if none).
    pub first_seq: BatchSeq,
    pub max_seq: BatchSeq,
    /// Every segment listed, in order.
    pub segments: Vec<(BatchSeq, PathBuf)>,
    pub end: End,
}

/// How one segment's frames end.
enum SegEnd {
    Clean,
    Zeros(usize),
    Bad(usize, String),
}

/// Scans one segment's bytes, appending its records to `out`. Its first frame must be
/// the header of batch `name` (a segment is named after its first batch); every later
/// batch header must carry the next seq.
fn scan_segment(data: &[u8], name: BatchSeq, out: &mut Scan) -> SegEnd {
    let mut off = 0usize;
    let mut in_batch = false;
    loop {
        let (body, next) = match read_frame(data, off) {
            Ok(Some(frame)) => frame,
            Ok(None) => return SegEnd::Clean,
            // No record has a zero length, so a torn write is never all
            // zeros unless none of it reached the disk.
            Err(_) if data[off..].iter().all(|&b| b == 0) => return SegEnd::Zeros(off),
            Err(e) => return SegEnd::Bad(off, e.to_string()),
        };
        match decode_log_body(body, out.max_seq) {
            Ok(Decoded::Batch(seq)) => {
                let due = if in_batch { out.max_seq + 1 } else { name };
                if seq != due {
                    let why = if in_batch {
                        format!("batch seq {seq} where batch {due} was due")
                    } else {
                        format!(
                            "the segment starts with batch {seq}, but its name says batch {name}"
                        )
                    };
                    return SegEnd::Bad(off, why);
                }
                if out.first_seq == 0 {
                    out.first_seq = seq;
                }
                out.max_seq = seq;
                in_batch = true;
            }
            Ok(Decoded::Record(rec)) => {
                if !in_batch {
                    return SegEnd::Bad(off, "record outside a batch".into());
                }
                out.records.push(rec);
            }
            Err(why) => return SegEnd::Bad(off, why.into()),
        }
        off = next;
    }
}

/// Bytes of a batch header frame: `[len = 9][crc][0x01][seq u64]`.
const BATCH_FRAME_BYTES: usize = HEADER_BYTES + 9;

/// The first batch header at or after `from` whose frame checks and whose seq is above
/// `after`: evidence that something was written after the log's good part ended there
/// (a torn write leaves only what was there before it: zeros, nothing, or an older file's
/// bytes, whose batches are older). Returns its offset and seq.
pub(crate) fn later_batch(data: &[u8], from: usize, after: BatchSeq) -> Option<(usize, BatchSeq)> {
    let mut o = from;
    while o + BATCH_FRAME_BYTES <= data.len() {
        if data[o..o + 4] == [9, 0, 0, 0] && data[o + HEADER_BYTES] == REC_BATCH {
            if let Ok(Some((body, _))) = read_frame(data, o) {
                let seq = u64::from_le_bytes(body[1..9].try_into().expect("8 bytes"));
                if seq > after {
                    return Some((o, seq));
                }
            }
        }
        o += 1;
    }
    None
}

/// Scans `segments` in order, reading only, and says how the records end.
pub(crate) fn scan(segments: Vec<(BatchSeq, PathBuf)>) -> Result<Scan, WalError> {
    let mut out = Scan {
        records: Vec::new(),
        first_seq: 0,
        max_seq: 0,
        segments,
        end: End::Clean,
    };
    let n = out.segments.len();
    for i in 0..n {
        let (name, path) = out.segments[i].clone();
        let newest = i + 1 == n;
        let fault = |offset: usize, reason: String| Fault {
            segment: i,
            offset: offset as u64,
            reason,
        };
        if out.max_seq != 0 && name != out.max_seq + 1 {
            let reason = if name > out.max_seq + 1 {
                format!(
                    "it starts at batch {name}, but the segment before it ends at batch {}: \
                     batches {}..={} are missing (a deleted or renamed segment)",
                    out.max_seq,
                    out.max_seq + 1,
                    name - 1
                )
            } else {
                format!(
                    "its name says it starts at batch {name}, but the segments before it already \
                     hold batches up to {}",
                    out.max_seq
                )
            };
            out.end = End::Damaged(fault(0, reason));
            return Ok(out);
        }
        let data = fs::read(&path).map_err(|e| WalError::io("read log segment", &path, e))?;
        let before = out.max_seq;
        match scan_segment(&data, name, &mut out) {
            SegEnd::Clean | SegEnd::Zeros(_) if !newest && out.max_seq == before => {
                out.end = End::Damaged(fault(
                    0,
                    "it holds no batch, but later segments follow it (the log only moves to a \
                     new segment to write a batch there)"
                        .into(),
                ));
                return Ok(out);
            }
            SegEnd::Clean => {}
            SegEnd::Zeros(off) => {
                if newest {
                    out.end = End::Zeros { offset: off as u64 };
                }
            }
            SegEnd::Bad(off, reason) => {
                out.end = if !newest {
                    End::Damaged(fault(
                        off,
                        format!(
                            "{reason}; this is not the newest segment, so it was synced before the \
                             next one was made and no crash can have torn it"
                        ),
                    ))
                } else if let Some((at, seq)) = later_batch(&data, off, out.max_seq) {
                    End::Damaged(fault(
                        off,
                        format!(
                            "{reason}; a valid header of batch {seq} follows at offset {at}, so \
                             this is not the torn end of the log"
                        ),
                    ))
                } else {
                    End::Torn(fault(off, reason))
                };
                return Ok(out);
            }
        }
    }
    Ok(out)
}

/// The seq of the batch header a segment file starts with, if its first frame is one
/// whose checksum holds: what the file's contents say its name should be.
pub(crate) fn first_batch(path: &Path) -> Result<Option<BatchSeq>, WalError> {
    use std::io::Read;
    let mut head = Vec::with_capacity(BATCH_FRAME_BYTES);
    fs::File::open(path)
        .and_then(|f| f.take(BATCH_FRAME_BYTES as u64).read_to_end(&mut head))
        .map_err(|e| WalError::io("read log segment", path, e))?;
    Ok(match read_frame(&head, 0) {
        Ok(Some((body, _))) if body.len() == 9 && body[0] == REC_BATCH => {
            body[1..9].try_into().ok().map(u64::from_le_bytes)
        }
        _ => None,
    })
}

/// A file a repair moves out of the log's directory into [`super::SET_ASIDE_DIR`], and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Aside {
    pub path: PathBuf,
    pub reason: String,
}

/// What a repair makes of a directory's segment files before it judges the log: the chain
/// it reads (each entry the seq its name must have and the file's present path), the
/// files it renames to the name their first batch gives, and the files that are not part
/// of the log.
#[derive(Debug)]
pub(crate) struct Sorted {
    pub scan: Scan,
    pub renames: Vec<(PathBuf, PathBuf)>,
    pub aside: Vec<Aside>,
}

/// Sorts a directory's segment files for a repair, reading only: a file whose first batch
/// disagrees with its name is renamed to the name its contents give when that batch is
/// the one the log needs next and no other file has that name, and set aside otherwise;
/// a file at whose start the log breaks is set aside when the log reads on past it
/// without it (a stray: an empty file, another file's copy, garbage under a segment's
/// name). What is left is scanned; a fault in it is damage, and the repair cuts there.
/// `start_seq` is the newest checkpoint's (0: none).
pub(crate) fn sort_out(
    segments: Vec<(BatchSeq, PathBuf)>,
    start_seq: BatchSeq,
) -> Result<Sorted, WalError> {
    let mut chain = Vec::new();
    // (seq of its first batch, path, seq of its name)
    let mut misnamed: Vec<(BatchSeq, PathBuf, BatchSeq)> = Vec::new();
    for (name, path) in segments {
        match first_batch(&path)? {
            Some(seq) if seq != name => misnamed.push((seq, path, name)),
            _ => chain.push((name, path)),
        }
    }
    let mut renames = Vec::new();
    let mut aside = Vec::new();
    loop {
        let s = scan(chain.clone())?;
        if let End::Damaged(f) = &s.end {
            if f.offset == 0 {
                let mut without = chain.clone();
                let (_, path) = without.remove(f.segment);
                let rest = scan(without.clone())?;
                let stuck = rest.max_seq == s.max_seq
                    && matches!(&rest.end, End::Damaged(g) if g.segment == f.segment && g.offset == 0);
                if !stuck {
                    aside.push(Aside {
                        path,
                        reason: format!(
                            "{}; the log reads on past it without it, so it is not part of the log",
                            f.reason
                        ),
                    });
                    chain = without;
                    continue;
                }
            }
        }
        // The batch the log needs next: a misnamed file that starts with it goes there.
        let next = if s.max_seq == 0 {
            start_seq.max(1)
        } else {
            s.max_seq + 1
        };
        let taken = |seq: BatchSeq| {
            chain.iter().any(|(n, _)| *n == seq) || misnamed.iter().any(|m| m.2 == seq)
        };
        let fits = misnamed.iter().position(|&(seq, _, _)| {
            (seq == next || (s.max_seq == 0 && seq <= next)) && !taken(seq)
        });
        if let Some(i) = fits {
            let (seq, path, _) = misnamed.remove(i);
            renames.push((path.clone(), path.with_file_name(segment_name(seq))));
            chain.push((seq, path));
            chain.sort();
            continue;
        }
        let in_chain: Vec<BatchSeq> = chain.iter().map(|c| c.0).collect();
        for (seq, path, name) in misnamed {
            let why = if in_chain.contains(&seq) {
                format!("{} holds batch {seq}", segment_name(seq))
            } else {
                format!("the log needs batch {next} next")
            };
            aside.push(Aside {
                path,
                reason: format!(
                    "it starts with batch {seq}, but its name says batch {name}, and the log \
                     does not need it there ({why})"
                ),
            });
        }
        return Ok(Sorted {
            scan: s,
            renames,
            aside,
        });
    }
}

/// What the log loses from a fault on: the records after it that still decode (found by
/// resynchronizing at later batch headers), in the faulty segment and every later one.
#[derive(Debug, Default)]
pub(crate) struct Salvage {
    pub records: u64,
    pub tids: Vec<u64>,
    pub gtids: Vec<u64>,
    pub bytes: u64,
}

pub(crate) fn salvage(scan: &Scan, fault: &Fault) -> Result<Salvage, WalError> {
    let mut s = Salvage::default();
    let mut after = scan.max_seq;
    for (i, (_, path)) in scan.segments.iter().enumerate().skip(fault.segment) {
        let data = fs::read(path).map_err(|e| WalError::io("read log segment", path, e))?;
        let mut o = 0;
        if i == fault.segment {
            o = fault.offset as usize;
            // The frames right after the bad one, where its length field says they start
            // (when it still holds a possible length): the rest of its batch.
            if let Some(len) = data.get(o..o + 4) {
                let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                if len > 0 && o + HEADER_BYTES + len <= data.len() {
                    s.decode_run(&data, o + HEADER_BYTES + len, &mut after);
                }
            }
        }
        s.bytes += data.len().saturating_sub(o) as u64;
        while let Some((at, seq)) = later_batch(&data, o, after) {
            after = seq;
            o = s.decode_run(&data, at, &mut after).max(at + 1);
        }
    }
    s.tids.sort_unstable();
    s.tids.dedup();
    s.gtids.sort_unstable();
    s.gtids.dedup();
    Ok(s)
}

impl Salvage {
    /// Decodes frames from `off` until one is bad; returns where it stopped.
    fn decode_run(&mut self, data: &[u8], mut off: usize, batch: &mut BatchSeq) -> usize {
        while let Ok(Some((body, next))) = read_frame(data, off) {
            match decode_log_body(body, *batch) {
                Ok(Decoded::Batch(b)) => *batch = (*batch).max(b),
                Ok(Decoded::Record(r)) => {
                    self.records += 1;
                    match r {
                        LogRecord::Commit { tid, .. } => self.tids.push(tid),
                        LogRecord::Prepare { gtid, .. }
                        | LogRecord::Decision { gtid, .. }
                        | LogRecord::End { gtid, .. } => self.gtids.push(gtid),
                    }
                }
                Err(_) => break,
            }
            off = next;
        }
        off
    }
}

/// Loads the newest checkpoint. A newest checkpoint that does not validate is an error, not
/// a reason to fall back: older log segments may already be gone.
pub(crate) fn load_checkpoint(
    checkpoints: &[(BatchSeq, PathBuf)],
) -> Result<Option<CheckpointData>, WalError> {
    let Some((seq, path)) = checkpoints.last() else {
        return Ok(None);
    };
    let corrupt = |reason: String| WalError::CorruptCheckpoint {
        file: path.clone(),
        reason,
    };
    let data = checkpoint::read(path).map_err(corrupt)?;
    if data.start_seq != *seq {
        return Err(corrupt(format!(
            "it holds start seq {}, its name says {seq}",
            data.start_seq
        )));
    }
    Ok(Some(data))
}
