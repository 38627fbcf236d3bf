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
use std::sync::Arc;

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

/// An I/O failure of a checkpoint: what was being done, and to which file.
pub(crate) type CkptIoError = (&'static str, PathBuf, io::Error);

/// Bytes of checkpoint records gathered before each write to the file.
const WRITE_CHUNK: usize = 1 << 20;

/// A checkpoint being written: rows go to `ckpt-<seq>.tmp` through the log's
/// device as they come (nothing of the snapshot is held in memory beyond one
/// write chunk), and [`Writer::publish`] makes it the checkpoint. A writer
/// dropped unpublished removes its file, so a failed or abandoned checkpoint
/// leaves nothing behind (a full disk keeps the room the log needs).
pub(crate) struct Writer {
    device: Arc<dyn LogDevice>,
    dir: PathBuf,
    tmp: PathBuf,
    path: PathBuf,
    file: Option<Box<dyn LogFile>>,
    out: Vec<u8>,
    bytes: u64,
    count: u64,
}

impl Writer {
    /// Creates the temporary file and writes the header.
    pub(crate) fn create(
        device: Arc<dyn LogDevice>,
        dir: &Path,
        start_seq: BatchSeq,
    ) -> Result<Writer, CkptIoError> {
        let tmp = dir.join(temp_name(start_seq));
        remove_if_present(device.as_ref(), &tmp)
            .map_err(|e| ("remove old temporary checkpoint", tmp.clone(), e))?;
        let file = device
            .create(&tmp)
            .map_err(|e| ("create checkpoint", tmp.clone(), e))?;
        let mut w = Writer {
            device,
            dir: dir.to_path_buf(),
            path: dir.join(checkpoint_name(start_seq)),
            tmp,
            file: Some(file),
            out: Vec::with_capacity(WRITE_CHUNK + 4096),
            bytes: 0,
            count: 0,
        };
        let start = begin_record(&mut w.out, REC_CKPT_HEADER);
        w.out.extend_from_slice(CKPT_MAGIC);
        w.out.extend_from_slice(&start_seq.to_le_bytes());
        finish_record(&mut w.out, start);
        Ok(w)
    }

    /// Writes the gathered records once a chunk is full (or `last`).
    fn put(&mut self, last: bool) -> Result<(), CkptIoError> {
        let due = self.out.len() >= WRITE_CHUNK || (last && !self.out.is_empty());
        if !due {
            return Ok(());
        }
        let file = self
            .file
            .as_mut()
            .expect("an unpublished writer has its file");
        file.write_all(&self.out)
            .map_err(|e| ("write checkpoint", self.tmp.clone(), e))?;
        self.bytes += self.out.len() as u64;
        self.out.clear();
        Ok(())
    }

    /// Appends one row.
    pub(crate) fn row(
        &mut self,
        table: u16,
        key: u64,
        tid: u64,
        row: &[u8],
    ) -> Result<(), CkptIoError> {
        let start = begin_record(&mut self.out, REC_CKPT_ROW);
        self.out.extend_from_slice(&table.to_le_bytes());
        self.out.extend_from_slice(&key.to_le_bytes());
        self.out.extend_from_slice(&tid.to_le_bytes());
        self.out.extend_from_slice(row);
        finish_record(&mut self.out, start);
        self.count += 1;
        self.put(false)
    }

    /// Writes the footer and makes the file durable, but does not publish it
    /// yet. Returns (rows, bytes).
    pub(crate) fn seal(&mut self) -> Result<(u64, u64), CkptIoError> {
        let start = begin_record(&mut self.out, REC_CKPT_FOOTER);
        self.out.extend_from_slice(&self.count.to_le_bytes());
        finish_record(&mut self.out, start);
        self.put(true)?;
        self.file
            .as_mut()
            .expect("an unpublished writer has its file")
            .sync_data()
            .map_err(|e| ("fdatasync checkpoint", self.tmp.clone(), e))?;
        Ok((self.count, self.bytes))
    }

    /// Publishes a sealed checkpoint: renames it to its name and syncs the
    /// directory, so a valid name means a complete file. Returns its path.
    pub(crate) fn publish(mut self) -> Result<PathBuf, CkptIoError> {
        drop(self.file.take());
        self.device
            .rename(&self.tmp, &self.path)
            .map_err(|e| ("rename checkpoint", self.path.clone(), e))?;
        self.device
            .sync_dir(&self.dir)
            .map_err(|e| ("fsync log directory", self.dir.clone(), e))?;
        Ok(self.path.clone())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = self.device.remove(&self.tmp);
        }
    }
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
