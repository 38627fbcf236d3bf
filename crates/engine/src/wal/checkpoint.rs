//! Checkpoint files: a snapshot of rows that replaces every log batch before `start_seq`.
//!
//! Layout (same framing as the log): a header record `[0x20][magic "ISLCKPT1"][start_seq u64]`,
//! one row record per row `[0x21][table u16][key u64][tid u64][row bytes…]`, and a footer
//! `[0x22][rows u64]`. A checkpoint is valid only if every record checks and the footer's
//! row count matches and ends the file. It is written to `ckpt-<seq>.tmp`, fdatasync'ed,
//! renamed to `ckpt-<seq>.ckp` and the directory is fsync'ed, so a valid name means a complete file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::format::{
    begin_record, finish_record, read_frame, Cursor, CKPT_MAGIC, REC_CKPT_FOOTER, REC_CKPT_HEADER,
    REC_CKPT_ROW,
};
use super::{BatchSeq, CheckpointData};

pub(crate) fn checkpoint_name(start_seq: BatchSeq) -> String {
    format!("ckpt-{start_seq:020}.ckp")
}

fn temp_name(start_seq: BatchSeq) -> String {
    format!("ckpt-{start_seq:020}.tmp")
}

/// Writes, syncs and atomically publishes a checkpoint. Returns (path, rows, bytes).
pub(crate) fn write<'a>(
    dir: &Path,
    start_seq: BatchSeq,
    rows: impl Iterator<Item = (u16, u64, u64, &'a [u8])>,
) -> Result<(PathBuf, u64, u64), (&'static str, PathBuf, io::Error)> {
    let tmp = dir.join(temp_name(start_seq));
    let path = dir.join(checkpoint_name(start_seq));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| ("create checkpoint", tmp.clone(), e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut rec = Vec::with_capacity(4096);
    let mut bytes = 0u64;
    let mut put = |rec: &mut Vec<u8>, out: &mut BufWriter<File>| -> io::Result<()> {
        bytes += rec.len() as u64;
        out.write_all(rec)?;
        rec.clear();
        Ok(())
    };

    let start = begin_record(&mut rec, REC_CKPT_HEADER);
    rec.extend_from_slice(CKPT_MAGIC);
    rec.extend_from_slice(&start_seq.to_le_bytes());
    finish_record(&mut rec, start);
    put(&mut rec, &mut out).map_err(|e| ("write checkpoint", tmp.clone(), e))?;

    let mut count = 0u64;
    for (table, key, tid, row) in rows {
        let start = begin_record(&mut rec, REC_CKPT_ROW);
        rec.extend_from_slice(&table.to_le_bytes());
        rec.extend_from_slice(&key.to_le_bytes());
        rec.extend_from_slice(&tid.to_le_bytes());
        rec.extend_from_slice(row);
        finish_record(&mut rec, start);
        put(&mut rec, &mut out).map_err(|e| ("write checkpoint", tmp.clone(), e))?;
        count += 1;
    }

    let start = begin_record(&mut rec, REC_CKPT_FOOTER);
    rec.extend_from_slice(&count.to_le_bytes());
    finish_record(&mut rec, start);
    put(&mut rec, &mut out).map_err(|e| ("write checkpoint", tmp.clone(), e))?;

    let file = out
        .into_inner()
        .map_err(|e| ("write checkpoint", tmp.clone(), e.into_error()))?;
    rustix::fs::fdatasync(&file).map_err(|e| ("fdatasync checkpoint", tmp.clone(), e.into()))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(|e| ("rename checkpoint", path.clone(), e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ("fsync log directory", dir.to_path_buf(), e))?;
    Ok((path, count, bytes))
}

/// Reads and validates a checkpoint file. The error says what is wrong and where.
pub(crate) fn read(path: &Path) -> Result<CheckpointData, String> {
    let data = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = |off: usize, why: &dyn std::fmt::Display| {
        format!("checkpoint {}: offset {off}: {why}", path.display())
    };
    let mut off = 0usize;
    let next = |off: &mut usize| -> Result<Option<&[u8]>, String> {
        match read_frame(&data, *off) {
            Ok(Some((body, n))) => {
                *off = n;
                Ok(Some(body))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(bad(*off, &e)),
        }
    };

    let header = next(&mut off)?.ok_or_else(|| bad(0, &"empty file"))?;
    let mut c = Cursor::new(header);
    if c.u8() != Some(REC_CKPT_HEADER) || c.take(8) != Some(&CKPT_MAGIC[..]) {
        return Err(bad(0, &"not a checkpoint header"));
    }
    let start_seq = c.u64().ok_or_else(|| bad(0, &"truncated header"))?;
    let mut rows = Vec::new();
    loop {
        let at = off;
        let body = next(&mut off)?.ok_or_else(|| bad(at, &"missing footer"))?;
        let mut c = Cursor::new(body);
        match c.u8() {
            Some(REC_CKPT_ROW) => {
                let fields = (c.u16(), c.u64(), c.u64());
                let (Some(table), Some(key), Some(tid)) = fields else {
                    return Err(bad(at, &"truncated row record"));
                };
                rows.push((table, key, tid, c.rest().to_vec()));
            }
            Some(REC_CKPT_FOOTER) => {
                let count = c.u64().ok_or_else(|| bad(at, &"truncated footer"))?;
                if count != rows.len() as u64 {
                    return Err(bad(
                        at,
                        &format!("footer counts {count} rows, file has {}", rows.len()),
                    ));
                }
                if off != data.len() {
                    return Err(bad(off, &"bytes after the footer"));
                }
                return Ok(CheckpointData { start_seq, rows });
            }
            _ => return Err(bad(at, &"unexpected record type")),
        }
    }
}
