//! Record framing and encoding: the only place that knows the byte layout.
//!
//! Every record is `[len: u32][crc: u32][body: len bytes]`, little-endian, where
//! `crc = crc32c(len.to_le_bytes() ++ body)` and `body[0]` is the record type.
//! See the module documentation in `wal/mod.rs` for the bodies.

use super::{BatchSeq, LogRecord, WriteEntry};

/// Bytes of the frame header (`len` + `crc`).
pub(crate) const HEADER_BYTES: usize = 8;
/// No record body is larger than this; a larger length on disk is corruption.
pub(crate) const MAX_BODY_BYTES: usize = 1 << 30;

pub(crate) const REC_BATCH: u8 = 0x01;
pub(crate) const REC_COMMIT: u8 = 0x02;
pub(crate) const REC_PREPARE: u8 = 0x03;
pub(crate) const REC_DECISION: u8 = 0x04;
pub(crate) const REC_END: u8 = 0x05;
pub(crate) const REC_CKPT_HEADER: u8 = 0x20;
pub(crate) const REC_CKPT_ROW: u8 = 0x21;
pub(crate) const REC_CKPT_FOOTER: u8 = 0x22;

const ENTRY_PUT: u8 = 0x01;
const ENTRY_DELETE: u8 = 0x02;
const ENTRY_PATCH: u8 = 0x03;

/// Checkpoint files start with this magic in their header record.
pub(crate) const CKPT_MAGIC: &[u8; 8] = b"ISLCKPT1";

fn crc_of(len_le: [u8; 4], body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len_le), body)
}

/// Opens a record of type `kind` at the end of `out`; returns its start offset.
pub(crate) fn begin_record(out: &mut Vec<u8>, kind: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_BYTES]);
    out.push(kind);
    start
}

/// Closes the record opened at `start`: fills in its length and checksum.
pub(crate) fn finish_record(out: &mut [u8], start: usize) {
    let body_len = out.len() - start - HEADER_BYTES;
    assert!(
        body_len <= MAX_BODY_BYTES,
        "log record of {body_len} bytes exceeds the {MAX_BODY_BYTES} byte limit"
    );
    let len_le = (body_len as u32).to_le_bytes();
    let crc = crc_of(len_le, &out[start + HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&len_le);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a complete batch header record for `seq`.
pub(crate) fn push_batch_header(out: &mut Vec<u8>, seq: BatchSeq) {
    let start = begin_record(out, REC_BATCH);
    out.extend_from_slice(&seq.to_le_bytes());
    finish_record(out, start);
}

/// Why a frame could not be read. The reader stops at the first bad frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    PartialHeader { have: usize },
    EmptyBody,
    TooLong { len: u64 },
    PastEnd { len: u64, have: usize },
    CrcMismatch,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::PartialHeader { have } => {
                write!(f, "partial record header ({have} of {HEADER_BYTES} bytes)")
            }
            FrameError::EmptyBody => f.write_str("record of length 0"),
            FrameError::TooLong { len } => write!(f, "record length {len} exceeds the limit"),
            FrameError::PastEnd { len, have } => {
                write!(
                    f,
                    "record length {len} runs past the end ({have} bytes left)"
                )
            }
            FrameError::CrcMismatch => f.write_str("crc mismatch"),
        }
    }
}

/// Reads the frame at `off`. `Ok(None)` at exactly the end of `data`.
/// On success returns the body (type byte first) and the offset of the next frame.
pub(crate) fn read_frame(data: &[u8], off: usize) -> Result<Option<(&[u8], usize)>, FrameError> {
    let rest = data.get(off..).unwrap_or(&[]);
    if rest.is_empty() {
        return Ok(None);
    }
    if rest.len() < HEADER_BYTES {
        return Err(FrameError::PartialHeader { have: rest.len() });
    }
    let len_le = [rest[0], rest[1], rest[2], rest[3]];
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    let len = u32::from_le_bytes(len_le) as usize;
    if len == 0 {
        return Err(FrameError::EmptyBody);
    }
    if len > MAX_BODY_BYTES {
        return Err(FrameError::TooLong { len: len as u64 });
    }
    let have = rest.len() - HEADER_BYTES;
    if len > have {
        return Err(FrameError::PastEnd {
            len: len as u64,
            have,
        });
    }
    let body = &rest[HEADER_BYTES..HEADER_BYTES + len];
    if crc_of(len_le, body) != crc {
        return Err(FrameError::CrcMismatch);
    }
    Ok(Some((body, off + HEADER_BYTES + len)))
}

/// A bounds-checked little-endian reader over a record body. Never panics.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }
    pub(crate) fn is_done(&self) -> bool {
        self.pos == self.bytes.len()
    }
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        s
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// What one log body decodes to.
pub(crate) enum Decoded {
    Batch(BatchSeq),
    Record(LogRecord),
}

fn decode_writes(c: &mut Cursor<'_>) -> Result<Vec<WriteEntry>, &'static str> {
    let mut writes = Vec::new();
    while !c.is_done() {
        let kind = c.u8().ok_or("truncated write entry")?;
        let table = c.u16().ok_or("truncated write entry")?;
        let key = c.u64().ok_or("truncated write entry")?;
        let (row, patch_at) = match kind {
            ENTRY_PUT => {
                let n = c.u32().ok_or("truncated write entry")? as usize;
                let row = c.take(n).ok_or("row length runs past the record")?;
                (Some(row.to_vec()), None)
            }
            ENTRY_DELETE => (None, None),
            ENTRY_PATCH => {
                let at = c.u32().ok_or("truncated patch entry")?;
                let n = c.u32().ok_or("truncated patch entry")? as usize;
                let bytes = c.take(n).ok_or("patch length runs past the record")?;
                (Some(bytes.to_vec()), Some(at))
            }
            _ => return Err("unknown write entry kind"),
        };
        writes.push(WriteEntry {
            table,
            key,
            row,
            patch_at,
        });
    }
    Ok(writes)
}

/// Decodes a log record body (type byte first). `seq` is the batch the record belongs to
/// (ignored for batch headers). Errors name what was malformed.
pub(crate) fn decode_log_body(body: &[u8], seq: BatchSeq) -> Result<Decoded, &'static str> {
    let mut c = Cursor::new(body);
    let kind = c.u8().ok_or("empty record")?;
    let decoded = match kind {
        REC_BATCH => Decoded::Batch(c.u64().ok_or("truncated batch header")?),
        REC_COMMIT => {
            let tid = c.u64().ok_or("truncated commit record")?;
            let writes = decode_writes(&mut c)?;
            Decoded::Record(LogRecord::Commit { seq, tid, writes })
        }
        REC_PREPARE => {
            let gtid = c.u64().ok_or("truncated prepare record")?;
            let tid = c.u64().ok_or("truncated prepare record")?;
            let writes = decode_writes(&mut c)?;
            Decoded::Record(LogRecord::Prepare {
                seq,
                gtid,
                tid,
                writes,
            })
        }
        REC_DECISION => {
            let gtid = c.u64().ok_or("truncated decision record")?;
            let commit = match c.u8().ok_or("truncated decision record")? {
                0 => false,
                1 => true,
                _ => return Err("bad decision value"),
            };
            Decoded::Record(LogRecord::Decision { seq, gtid, commit })
        }
        REC_END => {
            let gtid = c.u64().ok_or("truncated end record")?;
            Decoded::Record(LogRecord::End { seq, gtid })
        }
        _ => return Err("unknown record type"),
    };
    if !c.is_done() {
        return Err("trailing bytes in record");
    }
    Ok(decoded)
}

/// A worker's private redo buffer: records are serialized here without any lock and handed
/// to the log in one piece by [`super::Wal::submit`], which swaps in a recycled empty buffer.
///
/// Invariant: outside an open record (`commit_begin` / `prepare_begin` … `record_end`),
/// `bytes` holds only complete, checksummed records.
#[derive(Debug, Default)]
pub struct LogBuffer {
    pub(crate) bytes: Vec<u8>,
    pub(crate) records: usize,
    /// Start offset of the open commit / prepare record, if any.
    open: Option<usize>,
}

impl LogBuffer {
    pub fn new() -> Self {
        LogBuffer::default()
    }

    /// A buffer that will not allocate until it holds `bytes` bytes.
    pub fn with_capacity(bytes: usize) -> Self {
        LogBuffer {
            bytes: Vec::with_capacity(bytes),
            records: 0,
            open: None,
        }
    }

    /// Starts a commit record for transaction `tid`; add writes with `put` / `delete`,
    /// then close it with `record_end`.
    pub fn commit_begin(&mut self, tid: u64) {
        self.open_record(REC_COMMIT, tid);
    }

    /// Starts a two-phase-commit prepare record (participant side) of branch `gtid`,
    /// whose writes will be installed with transaction id `tid` if it commits; closed by
    /// `record_end`.
    pub fn prepare_begin(&mut self, gtid: u64, tid: u64) {
        self.open_record(REC_PREPARE, gtid);
        self.bytes.extend_from_slice(&tid.to_le_bytes());
    }

    fn open_record(&mut self, kind: u8, id: u64) {
        assert!(
            self.open.is_none(),
            "log record opened while another is open"
        );
        let start = begin_record(&mut self.bytes, kind);
        self.bytes.extend_from_slice(&id.to_le_bytes());
        self.open = Some(start);
    }

    /// Insert-or-overwrite: the after-image of a row.
    pub fn put(&mut self, table: u16, key: u64, row: &[u8]) {
        assert!(self.open.is_some(), "put outside a commit/prepare record");
        assert!(row.len() <= MAX_BODY_BYTES, "row too large for the log");
        self.bytes.push(ENTRY_PUT);
        self.bytes.extend_from_slice(&table.to_le_bytes());
        self.bytes.extend_from_slice(&key.to_le_bytes());
        self.bytes
            .extend_from_slice(&(row.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(row);
    }

    /// An update that changed only `bytes`, at byte `offset` of the row image.
    pub fn patch(&mut self, table: u16, key: u64, offset: u32, bytes: &[u8]) {
        assert!(self.open.is_some(), "patch outside a commit/prepare record");
        assert!(bytes.len() <= MAX_BODY_BYTES, "patch too large for the log");
        self.bytes.push(ENTRY_PATCH);
        self.bytes.extend_from_slice(&table.to_le_bytes());
        self.bytes.extend_from_slice(&key.to_le_bytes());
        self.bytes.extend_from_slice(&offset.to_le_bytes());
        self.bytes
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(bytes);
    }

    pub fn delete(&mut self, table: u16, key: u64) {
        assert!(
            self.open.is_some(),
            "delete outside a commit/prepare record"
        );
        self.bytes.push(ENTRY_DELETE);
        self.bytes.extend_from_slice(&table.to_le_bytes());
        self.bytes.extend_from_slice(&key.to_le_bytes());
    }

    /// Closes the open record: writes its length and crc32c.
    pub fn record_end(&mut self) {
        let start = self.open.take().expect("record_end without an open record");
        finish_record(&mut self.bytes, start);
        self.records += 1;
    }

    /// Two-phase-commit coordinator decision (a complete record).
    pub fn decision(&mut self, gtid: u64, commit: bool) {
        assert!(self.open.is_none(), "decision record inside an open record");
        let start = begin_record(&mut self.bytes, REC_DECISION);
        self.bytes.extend_from_slice(&gtid.to_le_bytes());
        self.bytes.push(commit as u8);
        finish_record(&mut self.bytes, start);
        self.records += 1;
    }

    /// Two-phase-commit end record (a complete record).
    pub fn end(&mut self, gtid: u64) {
        assert!(self.open.is_none(), "end record inside an open record");
        let start = begin_record(&mut self.bytes, REC_END);
        self.bytes.extend_from_slice(&gtid.to_le_bytes());
        finish_record(&mut self.bytes, start);
        self.records += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Complete records in the buffer.
    pub fn records(&self) -> usize {
        self.records
    }

    /// True while a commit / prepare record is open.
    pub fn in_record(&self) -> bool {
        self.open.is_some()
    }

    /// Drops the contents, keeping the capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records = 0;
        self.open = None;
    }

    /// Gives the bytes away and takes `recycled` (cleared) in their place.
    pub(crate) fn swap_bytes(&mut self, recycled: &mut Vec<u8>) {
        recycled.clear();
        std::mem::swap(&mut self.bytes, recycled);
        self.records = 0;
    }
}
