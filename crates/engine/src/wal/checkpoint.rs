//! Checkpoint files: a snapshot of rows that replaces every log batch before `start_seq`.
//!
//! Layout (same framing as the log): a header record `[0x20][magic "ISLCKPT1"][start_seq u64]`,
//! one row record per row `[0x21][table u16][key u64][tid u64][row bytes…]`, and a footer
//! `[0x22][rows u64]`. A checkpoint is valid only if every record checks and the footer's
//! row count matches and ends the file. It is written to `ckpt-<seq>.tmp`, fdatasync'ed,
//! renamed to `ckpt-<seq>.ckp` and the directory is fsync'ed (all through the log's
//! [`LogDevice`]), so a valid name means a complete file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::device::{remove_if_present, LogDevice, LogFile};

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

/// Bytes of checkpoint records gathered before each write to the file.
const WRITE_CHUNK: usize = 1 << 20;

/// Writes, syncs and atomically publishes a checkpoint through `device`.
/// Returns (path, rows, bytes).
pub(crate) fn write<'a>(
    device: &dyn LogDevice,
    dir: &Path,
    start_seq: BatchSeq,
    rows: impl Iterator<Item = (u16, u64, u64, &'a [u8])>,
) -> Result<(PathBuf, u64, u64), (&'static str, PathBuf, io::Error)> {
    let tmp = dir.join(temp_name(start_seq));
    let path = dir.join(checkpoint_name(start_seq));
    remove_if_present(device, &tmp)
        .map_err(|e| ("remove old temporary checkpoint", tmp.clone(), e))?;
    let mut file = device
        .create(&tmp)
        .map_err(|e| ("create checkpoint", tmp.clone(), e))?;
    let mut out: Vec<u8> = Vec::with_capacity(WRITE_CHUNK + 4096);
    let mut bytes = 0u64;
    let mut put = |out: &mut Vec<u8>, file: &mut Box<dyn LogFile>, last: bool| -> io::Result<()> {
        if out.len() >= WRITE_CHUNK || (last && !out.is_empty()) {
            bytes += out.len() as u64;
            file.write_all(out)?;
            out.clear();
        }
        Ok(())
    };
    let write_err = |e| ("write checkpoint", tmp.clone(), e);

    let start = begin_record(&mut out, REC_CKPT_HEADER);
    out.extend_from_slice(CKPT_MAGIC);
    out.extend_from_slice(&start_seq.to_le_bytes());
    finish_record(&mut out, start);

    let mut count = 0u64;
    for (table, key, tid, row) in rows {
        let start = begin_record(&mut out, REC_CKPT_ROW);
        out.extend_from_slice(&table.to_le_bytes());
        out.extend_from_slice(&key.to_le_bytes());
        out.extend_from_slice(&tid.to_le_bytes());
        out.extend_from_slice(row);
        finish_record(&mut out, start);
        put(&mut out, &mut file, false).map_err(write_err)?;
        count += 1;
    }

    let start = begin_record(&mut out, REC_CKPT_FOOTER);
    out.extend_from_slice(&count.to_le_bytes());
    finish_record(&mut out, start);
    put(&mut out, &mut file, true).map_err(write_err)?;

    file.sync_data()
        .map_err(|e| ("fdatasync checkpoint", tmp.clone(), e))?;
    drop(file);
    device
        .rename(&tmp, &path)
        .map_err(|e| ("rename checkpoint", path.clone(), e))?;
    device
        .sync_dir(dir)
        .map_err(|e| ("fsync log directory", dir.to_path_buf(), e))?;
    Ok((path, count, bytes))
}

/// Reads and validates a checkpoint file. The error says what is wrong and where (the
/// caller names the file).
pub(crate) fn read(path: &Path) -> Result<CheckpointData, String> {
    let data = fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    let bad = |off: usize, why: &dyn std::fmt::Display| format!("offset {off}: {why}");
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
