//! The wire form of remote operations, and how 2PC messages ride beside them.
//!
//! Every frame (see [`crate::transport`]) starts with a kind byte. Kinds below
//! [`FIRST_DATA_KIND`] are 2PC messages in [`Msg`]'s own encoding; the rest are
//! the remote-operation layer's, all little-endian and fixed-layout:
//!
//! ```text
//! GET     0x20 [gtid u64][tag u32][table u16][key u64][for_update u8: 0|1]
//! INSERT  0x21 [gtid u64][tag u32][table u16][key u64]
//! MGET    0x23 [gtid u64][tag u32][table u16][for_update u8: 0|1][n u32] n × [key u64]
//! SCAN    0x22 [gtid u64][tag u32][table u16][index u16: 0xffff = primary]
//!              [lo u128][hi u128][limit u32][reverse u8: 0|1]
//! REPLY   0x28 [tag u32][status u8][reason u8][table u16][row_bytes u32][n u32]
//!              n × ([key u64][row: row_bytes])
//!              status 0 (done): reason is flags, bit 0 validated, bit 1 undurable
//!              ([`Status::Ok`]); 1 (conflict): reason is the abort reason;
//!              2: refused
//! WRITE   0x30 [gtid u64][table u16][key u64][row: rest of the frame]
//! DELETE  0x31 [gtid u64][table u16][key u64]
//! PREP    0x32 [gtid u64][writes u32][hold u8: 0|1]
//! RELEASE 0x33 [gtid u64]
//! LOCK    0x38 [gtid u64][tag u32][writes u32][n u32] n × ([table u16][key u64])
//! CALL        0x40 [id u64][proc u32][n u16] n × value
//! CALL_REPLY  0x41 [id u64][status u8] then, status 0 (rows): [rows u32]
//!                  rows × ([n u16] n × value); status 1 (error): [code u8]
//!                  [a u64][b u64] 2 × ([len u32][UTF-8: len bytes])
//! CALL_CANCEL 0x42 [id u64]
//! STMT        0x43 [id u64][len u32][SQL, UTF-8: len bytes][n u16] n × value
//! BLOCK       0x44 [block u64][id u64][begins u8: 0|1][op u8] then, op 0
//!                  (call): [proc u32][n u16] n × value; op 1 (statement):
//!                  [len u32][SQL: len bytes][n u16] n × value; op 2
//!                  (commit), 3 (rollback): nothing
//! RENEW       0x45 [period_ms u32][n u32] n × [block u64]
//! value: [tag u8] then 0 null; 1 int [i64]; 2 float [f64 bits u64];
//!        3 string [len u32][UTF-8: len bytes]; 4 ints [n u32] n × [i64]
//! ```
//!
//! CALL carries a call of stored procedure `proc` (an index into the
//! catalog, which both processes share: the handshake compares the
//! catalogs' fingerprints) from a process that does not run its home island
//! to an executor of that island; the answer comes back in a CALL_REPLY with
//! the same `id`, to the endpoint that sent the CALL. CALL_CANCEL asks the
//! home to cancel the call as a local cancel would. Ids are the caller's
//! (see `api/forward.rs`): a receiver keys the calls it runs by the sending
//! endpoint and the id.
//!
//! STMT carries one SQL statement on tables run alone (its text and its
//! bound parameters) to an executor of its home island, where the
//! deployment's statement compiler (`Deployment::set_statement_compiler`)
//! rebuilds it. It shares CALL's ids, and CALL_CANCEL cancels it; its
//! answer is a CALL_REPLY whose rows, on success, are the statement's rows
//! followed by one more, `[int]`: the number of rows it affected (the count
//! of its command tag).
//!
//! BLOCK carries one operation of a transaction block whose home island
//! runs in the receiver's process: `block` names the block among those of
//! the sending endpoint, which sends every operation of a block to the same
//! executor, one at a time; `begins` marks its first statement (a block the
//! receiver does not hold is begun only by that). Its answer is a CALL_REPLY with the operation's
//! `id` (a statement's with its count, as STMT's), and CALL_CANCEL with that
//! id cancels a statement.
//!
//! RENEW renews the lease of the blocks it lists, all of the sending
//! endpoint and run by the receiving executor: the sender keeps a block it
//! forwards alive by sending RENEW every `period_ms` while the block is open,
//! and the receiver rolls back a block that neither a RENEW nor an operation
//! touched for a few such periods (see `api/forward.rs`). A block id the
//! receiver does not hold is ignored.
//!
//! A request (GET, INSERT, SCAN, MGET) has bit [`CONTINUES`] of its kind set
//! when its transaction sent an earlier request to the same island: the
//! participant must hold a branch of that gtid already, and one that holds
//! none refuses the request instead of opening a new branch (it aborted the
//! old one, which sat idle too long; a new one would not hold the old one's
//! locks, and the home would commit reads that nothing protected any more).
//!
//! Requests carry the gtid of the distributed transaction (the participant
//! keys its branch by it) and a `tag` that the reply echoes, so the home
//! worker finds the waiting transaction and can tell a stale reply (from an
//! earlier, aborted attempt) from the one it waits for. A home transaction
//! has one request outstanding at a time, each with a newer tag than the
//! last, so a branch serves a request (or LOCK) only if its tag is newer than
//! the last it served: a copy from a transport that duplicates gets no
//! second answer (a second INSERT would answer "present" for the branch's
//! own row). WRITE and DELETE ship
//! the home transaction's changes to remote rows ahead of the PrepareReq on
//! the same channel (frames of one sender to one receiver stay in order).
//! PREP precedes the PrepareReq: it says how many WRITE / DELETE frames the
//! branch must have received (a participant that got a different number, or
//! no PREP at all because frames were lost or reordered, votes no), and with
//! `hold` asks it not to release at prepare even if it wrote nothing (an
//! early prepare, `Txn::prepare_remote`: the home branch takes locks after
//! the others prepared, and none may have released before, or two-phase
//! locking breaks).
//!
//! LOCK asks a branch to take the write lock of rows it read for the home
//! transaction without it, which the home then changed or deleted, and then
//! to add the secondary-index entries of its inserted rows and of rows
//! whose indexed columns changed. The home ships the branch's changes
//! (WRITE / DELETE) ahead of it, `writes` of them, all there will be; a
//! branch that did not receive exactly those refuses the LOCK, and accepts
//! no change after it. The home sends it, and waits for every reply (a
//! REPLY with no rows), before it asks any island to prepare, so that no
//! branch takes a lock or adds an entry at prepare after another released
//! its own locks or validated its reads (two-phase locking, and no scan
//! validated before an entry of a writer it follows). It always continues
//! a branch: a participant that holds none refuses it. PREP's `writes`
//! counts the changes shipped ahead of a LOCK too. A LOCK with no rows and
//! no changes asks only whether the branch still holds (see
//! `Executor::end_home`).
//!
//! Decoding checks every length and value and never panics: a malformed frame
//! is an error the receiver counts and does not execute.

use crate::api::Value;
use crate::coord::Msg;
use crate::AbortReason;

pub const FIRST_DATA_KIND: u8 = 0x20;
const K_GET: u8 = 0x20;
const K_INSERT: u8 = 0x21;
const K_SCAN: u8 = 0x22;
const K_MGET: u8 = 0x23;
/// Bit of a request's kind: see the module documentation.
pub const CONTINUES: u8 = 0x04;
const K_REPLY: u8 = 0x28;
const K_WRITE: u8 = 0x30;
const K_DELETE: u8 = 0x31;
const K_PREP: u8 = 0x32;
const K_RELEASE: u8 = 0x33;
const K_LOCK: u8 = 0x38;
const K_CALL: u8 = 0x40;
const K_CALL_REPLY: u8 = 0x41;
const K_CALL_CANCEL: u8 = 0x42;
const K_STMT: u8 = 0x43;
const K_BLOCK: u8 = 0x44;
const K_RENEW: u8 = 0x45;
/// Bytes of one entry of a LOCK frame.
pub const LOCK_ENTRY_BYTES: usize = 2 + 8;

/// `index` value of a primary-key scan.
pub const PRIMARY: u16 = u16::MAX;

/// How a remote operation went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Done. `validated`: the branch now holds reads that it validates at
    /// commit (index misses, range scans), so it must take part in the
    /// commit. `undurable`: the participant's log held records not yet
    /// durable (`sync`) or written (`async`) after the reads, so they may
    /// have read writes a crash would lose; the branch must then vote (its
    /// read-only vote waits for them), not merely be released.
    Ok { validated: bool, undurable: bool },
    /// A concurrency-control conflict: the home transaction aborts and retries.
    Conflict(AbortReason),
    /// The participant could not take the branch (full, or its log failed).
    Refused,
}

/// A decoded frame. Borrowed parts point into the received batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Coord(Msg),
    Get {
        gtid: u64,
        tag: u32,
        table: u16,
        key: u64,
        for_update: bool,
    },
    Insert {
        gtid: u64,
        tag: u32,
        table: u16,
        key: u64,
    },
    /// Several point reads of one table in one request (absent keys are
    /// missing from the reply). `keys` is `n` little-endian u64s.
    MultiGet {
        gtid: u64,
        tag: u32,
        table: u16,
        for_update: bool,
        keys: &'a [u8],
    },
    Scan {
        gtid: u64,
        tag: u32,
        table: u16,
        index: u16,
        lo: u128,
        hi: u128,
        limit: u32,
        reverse: bool,
    },
    Reply {
        tag: u32,
        status: Status,
        table: u16,
        row_bytes: u32,
        n: u32,
        rows: &'a [u8],
    },
    Write {
        gtid: u64,
        table: u16,
        key: u64,
        row: &'a [u8],
    },
    Delete {
        gtid: u64,
        table: u16,
        key: u64,
    },
    Prep {
        gtid: u64,
        writes: u32,
        hold: bool,
    },
    /// The home transaction committed without writing anything anywhere and
    /// no branch of it validates reads at commit: release the branch; no reply.
    Release {
        gtid: u64,
    },
    /// Take these rows' write locks, then add the branch's new secondary
    /// entries, once `writes` WRITE / DELETE frames have arrived (see the
    /// module documentation). `entries` is `n` × [`LOCK_ENTRY_BYTES`] (read
    /// with [`lock_entry_of`]).
    Lock {
        gtid: u64,
        tag: u32,
        writes: u32,
        entries: &'a [u8],
    },
    /// A forwarded call of procedure `proc` with `n` arguments, encoded in
    /// `args` (checked: read them with [`call_args`]).
    Call {
        id: u64,
        proc: u32,
        n: u16,
        args: &'a [u8],
    },
    /// The answer to CALL `id` (checked: read it with [`call_answer`]).
    CallReply {
        id: u64,
        answer: Answer<'a>,
    },
    /// Cancel forwarded call `id`.
    CallCancel {
        id: u64,
    },
    /// A forwarded SQL statement `sql` with `n` parameters, encoded in
    /// `params` (checked: read them with [`call_args`]).
    Stmt {
        id: u64,
        sql: &'a str,
        n: u16,
        params: &'a [u8],
    },
    /// Operation `id` of forwarded block `block`; `begins`: its first.
    Block {
        block: u64,
        id: u64,
        begins: bool,
        op: BlockOp<'a>,
    },
    /// The lease of forwarded blocks renewed for `period_ms` periods:
    /// `blocks` is their ids (read them with [`renewed`]).
    Renew {
        period_ms: u32,
        blocks: &'a [u8],
    },
}

/// A BLOCK frame's operation, as decoded (values checked, not yet read:
/// read them with [`call_args`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOp<'a> {
    Call {
        proc: u32,
        n: u16,
        args: &'a [u8],
    },
    Stmt {
        sql: &'a str,
        n: u16,
        params: &'a [u8],
    },
    Commit,
    Rollback,
}

/// A CALL_REPLY's answer, as decoded (checked, not yet built).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// `rows` result rows, encoded in `body`.
    Rows { rows: u32, body: &'a [u8] },
    /// A failed call: an error of the caller's kind `code` with its numbers
    /// and texts (what they mean is the caller's, see `api/forward.rs`).
    Error(ErrorParts<'a>),
}

/// The parts of a forwarded call's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorParts<'a> {
    pub code: u8,
    pub a: u64,
    pub b: u64,
    pub texts: [&'a str; 2],
}

/// Why a frame was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("2PC message: {0}")]
    Coord(#[from] crate::coord::DecodeError),
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    #[error("frame kind {kind:#04x} is {got} bytes, expected {want}")]
    BadLength { kind: u8, want: usize, got: usize },
    #[error("bad flag byte {0}")]
    BadFlag(u8),
    #[error("unknown status {0}")]
    BadStatus(u8),
    #[error("reply of {n} rows of {row_bytes} bytes does not fit its {got} bytes")]
    BadRows { n: u32, row_bytes: u32, got: usize },
    #[error("value: {0}")]
    BadValue(&'static str),
}

struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.b[self.at..self.at + N]);
        self.at += N;
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.take())
    }
    fn flag(&mut self) -> Result<bool, WireError> {
        match self.u8() {
            0 => Ok(false),
            1 => Ok(true),
            f => Err(WireError::BadFlag(f)),
        }
    }
    fn rest(&self) -> &'a [u8] {
        &self.b[self.at..]
    }
    fn left(&self) -> usize {
        self.b.len() - self.at
    }
    /// `n` bytes, or an error if fewer are left.
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.left() {
            return Err(WireError::BadValue("longer than its frame"));
        }
        let out = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }
    fn u8_checked(&mut self) -> Result<u8, WireError> {
        Ok(self.bytes(1)?[0])
    }
    fn u16_checked(&mut self) -> Result<u16, WireError> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32_checked(&mut self) -> Result<u32, WireError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64_checked(&mut self) -> Result<u64, WireError> {
        let mut out = [0u8; 8];
        out.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(out))
    }
    fn str_checked(&mut self) -> Result<&'a str, WireError> {
        let len = self.u32_checked()? as usize;
        std::str::from_utf8(self.bytes(len)?).map_err(|_| WireError::BadValue("string not UTF-8"))
    }
}

fn need(kind: u8, b: &[u8], want: usize, exact: bool) -> Result<(), WireError> {
    if b.len() < want || (exact && b.len() != want) {
        return Err(WireError::BadLength {
            kind,
            want,
            got: b.len(),
        });
    }
    Ok(())
}

/// Decodes one frame payload.
pub fn decode(b: &[u8]) -> Result<Frame<'_>, WireError> {
    let Some(&kind) = b.first() else {
        return Err(crate::coord::DecodeError::Empty.into());
    };
    if kind < FIRST_DATA_KIND {
        return Ok(Frame::Coord(Msg::decode(b)?));
    }
    let kind = if is_request(kind) {
        kind & !CONTINUES
    } else {
        kind
    };
    let mut c = Cur { b, at: 1 };
    Ok(match kind {
        K_GET => {
            need(kind, b, 1 + 8 + 4 + 2 + 8 + 1, true)?;
            Frame::Get {
                gtid: c.u64(),
                tag: c.u32(),
                table: c.u16(),
                key: c.u64(),
                for_update: c.flag()?,
            }
        }
        K_INSERT => {
            need(kind, b, 1 + 8 + 4 + 2 + 8, true)?;
            Frame::Insert {
                gtid: c.u64(),
                tag: c.u32(),
                table: c.u16(),
                key: c.u64(),
            }
        }
        K_MGET => {
            need(kind, b, 1 + 8 + 4 + 2 + 1 + 4, false)?;
            let gtid = c.u64();
            let tag = c.u32();
            let table = c.u16();
            let for_update = c.flag()?;
            let n = c.u32() as usize;
            let keys = c.rest();
            if keys.len() != n * 8 {
                return Err(WireError::BadLength {
                    kind,
                    want: 1 + 8 + 4 + 2 + 1 + 4 + n * 8,
                    got: b.len(),
                });
            }
            Frame::MultiGet {
                gtid,
                tag,
                table,
                for_update,
                keys,
            }
        }
        K_SCAN => {
            need(kind, b, 1 + 8 + 4 + 2 + 2 + 16 + 16 + 4 + 1, true)?;
            Frame::Scan {
                gtid: c.u64(),
                tag: c.u32(),
                table: c.u16(),
                index: c.u16(),
                lo: c.u128(),
                hi: c.u128(),
                limit: c.u32(),
                reverse: c.flag()?,
            }
        }
        K_REPLY => {
            need(kind, b, 1 + 4 + 1 + 1 + 2 + 4 + 4, false)?;
            let tag = c.u32();
            let s = c.u8();
            let reason = c.u8();
            let status = match s {
                0 if reason & !(OK_VALIDATED | OK_UNDURABLE) == 0 => Status::Ok {
                    validated: reason & OK_VALIDATED != 0,
                    undurable: reason & OK_UNDURABLE != 0,
                },
                0 => return Err(WireError::BadStatus(reason)),
                1 => Status::Conflict(
                    *AbortReason::ALL
                        .get(reason as usize)
                        .ok_or(WireError::BadStatus(reason))?,
                ),
                2 => Status::Refused,
                _ => return Err(WireError::BadStatus(s)),
            };
            let table = c.u16();
            let row_bytes = c.u32();
            let n = c.u32();
            let rows = c.rest();
            let want = (n as u64) * (8 + row_bytes as u64);
            if want != rows.len() as u64 {
                return Err(WireError::BadRows {
                    n,
                    row_bytes,
                    got: rows.len(),
                });
            }
            Frame::Reply {
                tag,
                status,
                table,
                row_bytes,
                n,
                rows,
            }
        }
        K_WRITE => {
            need(kind, b, 1 + 8 + 2 + 8, false)?;
            Frame::Write {
                gtid: c.u64(),
                table: c.u16(),
                key: c.u64(),
                row: c.rest(),
            }
        }
        K_DELETE => {
            need(kind, b, 1 + 8 + 2 + 8, true)?;
            Frame::Delete {
                gtid: c.u64(),
                table: c.u16(),
                key: c.u64(),
            }
        }
        K_RELEASE => {
            need(kind, b, 1 + 8, true)?;
            Frame::Release { gtid: c.u64() }
        }
        K_LOCK => {
            need(kind, b, 1 + 8 + 4 + 4 + 4, false)?;
            let gtid = c.u64();
            let tag = c.u32();
            let writes = c.u32();
            let n = c.u32() as u64;
            let entries = c.rest();
            if entries.len() as u64 != n * LOCK_ENTRY_BYTES as u64 {
                return Err(WireError::BadLength {
                    kind,
                    want: (n as usize)
                        .saturating_mul(LOCK_ENTRY_BYTES)
                        .saturating_add(1 + 8 + 4 + 4 + 4),
                    got: b.len(),
                });
            }
            Frame::Lock {
                gtid,
                tag,
                writes,
                entries,
            }
        }
        K_PREP => {
            need(kind, b, 1 + 8 + 4 + 1, true)?;
            Frame::Prep {
                gtid: c.u64(),
                writes: c.u32(),
                hold: c.flag()?,
            }
        }
        K_CALL => {
            need(kind, b, 1 + 8 + 4 + 2, false)?;
            let id = c.u64();
            let proc = c.u32();
            let n = c.u16();
            let args = c.rest();
            check_values(n, args)?;
            Frame::Call { id, proc, n, args }
        }
        K_CALL_REPLY => {
            need(kind, b, 1 + 8 + 1, false)?;
            let id = c.u64();
            let answer = match c.u8() {
                0 => {
                    let rows = c.u32_checked()?;
                    let body = c.rest();
                    let mut v = Cur { b: body, at: 0 };
                    for _ in 0..rows {
                        let n = v.u16_checked()?;
                        for _ in 0..n {
                            skip_value(&mut v)?;
                        }
                    }
                    if v.left() != 0 {
                        return Err(WireError::BadValue("bytes past the last row"));
                    }
                    Answer::Rows { rows, body }
                }
                1 => {
                    let parts = ErrorParts {
                        code: c.u8_checked()?,
                        a: c.u64_checked()?,
                        b: c.u64_checked()?,
                        texts: [c.str_checked()?, c.str_checked()?],
                    };
                    if c.left() != 0 {
                        return Err(WireError::BadValue("bytes past the error"));
                    }
                    Answer::Error(parts)
                }
                s => return Err(WireError::BadStatus(s)),
            };
            Frame::CallReply { id, answer }
        }
        K_CALL_CANCEL => {
            need(kind, b, 1 + 8, true)?;
            Frame::CallCancel { id: c.u64() }
        }
        K_STMT => {
            need(kind, b, 1 + 8 + 4, false)?;
            let id = c.u64();
            // A length past the frame is refused before anything is read.
            let sql = c.str_checked()?;
            let n = c.u16_checked()?;
            let params = c.rest();
            check_values(n, params)?;
            Frame::Stmt { id, sql, n, params }
        }
        K_BLOCK => {
            need(kind, b, 1 + 8 + 8 + 1 + 1, false)?;
            let block = c.u64();
            let id = c.u64();
            let begins = c.flag()?;
            let op = match c.u8() {
                0 => {
                    let proc = c.u32_checked()?;
                    let n = c.u16_checked()?;
                    let args = c.rest();
                    check_values(n, args)?;
                    BlockOp::Call { proc, n, args }
                }
                1 => {
                    let sql = c.str_checked()?;
                    let n = c.u16_checked()?;
                    let params = c.rest();
                    check_values(n, params)?;
                    BlockOp::Stmt { sql, n, params }
                }
                op @ (2 | 3) => {
                    if c.left() != 0 {
                        return Err(WireError::BadLength {
                            kind,
                            want: 1 + 8 + 8 + 1 + 1,
                            got: b.len(),
                        });
                    }
                    if op == 2 {
                        BlockOp::Commit
                    } else {
                        BlockOp::Rollback
                    }
                }
                op => return Err(WireError::BadStatus(op)),
            };
            Frame::Block {
                block,
                id,
                begins,
                op,
            }
        }
        K_RENEW => {
            need(kind, b, 1 + 4 + 4, false)?;
            let period_ms = c.u32();
            let n = u64::from(c.u32());
            let blocks = c.rest();
            if blocks.len() as u64 != n * 8 {
                return Err(WireError::BadLength {
                    kind,
                    want: (n as usize).saturating_mul(8).saturating_add(1 + 4 + 4),
                    got: b.len(),
                });
            }
            Frame::Renew { period_ms, blocks }
        }
        k => return Err(WireError::UnknownKind(k)),
    })
}

const V_NULL: u8 = 0;
const V_INT: u8 = 1;
const V_FLOAT: u8 = 2;
const V_STR: u8 = 3;
const V_INTS: u8 = 4;

/// Checks that `b` is exactly `n` encoded values (no allocation), so that
/// their reader ([`call_args`]) cannot fail on them later.
fn check_values(n: u16, b: &[u8]) -> Result<(), WireError> {
    let mut v = Cur { b, at: 0 };
    for _ in 0..n {
        skip_value(&mut v)?;
    }
    if v.left() != 0 {
        return Err(WireError::BadValue("bytes past the last argument"));
    }
    Ok(())
}

/// Steps over one encoded value, checking it (no allocation).
fn skip_value(c: &mut Cur<'_>) -> Result<(), WireError> {
    match c.u8_checked()? {
        V_NULL => {}
        V_INT | V_FLOAT => {
            c.bytes(8)?;
        }
        V_STR => {
            c.str_checked()?;
        }
        V_INTS => {
            let n = c.u32_checked()? as usize;
            c.bytes(
                n.checked_mul(8)
                    .ok_or(WireError::BadValue("too many ints"))?,
            )?;
        }
        _ => return Err(WireError::BadValue("unknown value tag")),
    }
    Ok(())
}

/// Reads one value that [`skip_value`] accepts. Allocates no more than the
/// frame holds.
fn read_value(c: &mut Cur<'_>) -> Result<Value, WireError> {
    Ok(match c.u8_checked()? {
        V_NULL => Value::Null,
        V_INT => Value::Int(c.u64_checked()? as i64),
        V_FLOAT => Value::Float(f64::from_bits(c.u64_checked()?)),
        V_STR => Value::Str(c.str_checked()?.to_string()),
        V_INTS => {
            let n = c.u32_checked()? as usize;
            let b = c.bytes(
                n.checked_mul(8)
                    .ok_or(WireError::BadValue("too many ints"))?,
            )?;
            Value::Ints(
                b.chunks_exact(8)
                    .map(|k| i64::from_le_bytes(k.try_into().unwrap_or([0; 8])))
                    .collect(),
            )
        }
        _ => return Err(WireError::BadValue("unknown value tag")),
    })
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(V_NULL),
        Value::Int(i) => {
            out.push(V_INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(V_FLOAT);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Str(s) => {
            out.push(V_STR);
            put_str(out, s);
        }
        Value::Ints(v) => {
            out.push(V_INTS);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            for i in v {
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends a CALL payload. `args` has at most `u16::MAX` values (more is
/// refused: `false`, nothing appended); the caller checks the frame's size.
pub fn call(out: &mut Vec<u8>, id: u64, proc: u32, args: &[Value]) -> bool {
    let Ok(n) = u16::try_from(args.len()) else {
        return false;
    };
    out.push(K_CALL);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&proc.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    for v in args {
        put_value(out, v);
    }
    true
}

/// Appends a STMT payload. `params` has at most `u16::MAX` values and `sql`
/// at most `u32::MAX` bytes (more is refused: `false`, nothing appended);
/// the caller checks the frame's size.
pub fn stmt(out: &mut Vec<u8>, id: u64, sql: &str, params: &[Value]) -> bool {
    let (Ok(n), Ok(_)) = (u16::try_from(params.len()), u32::try_from(sql.len())) else {
        return false;
    };
    out.push(K_STMT);
    out.extend_from_slice(&id.to_le_bytes());
    put_str(out, sql);
    out.extend_from_slice(&n.to_le_bytes());
    for v in params {
        put_value(out, v);
    }
    true
}

/// What a BLOCK frame asks (see [`block`]).
#[derive(Clone, Copy, Debug)]
pub enum BlockAsk<'a> {
    Call { proc: u32, args: &'a [Value] },
    Stmt { sql: &'a str, params: &'a [Value] },
    Commit,
    Rollback,
}

/// Appends a BLOCK payload. A call's or statement's values are at most
/// `u16::MAX`, a statement's text at most `u32::MAX` bytes (more is
/// refused: `false`, nothing appended); the caller checks the frame's size.
pub fn block(out: &mut Vec<u8>, block: u64, id: u64, begins: bool, ask: BlockAsk<'_>) -> bool {
    let values = match ask {
        BlockAsk::Call { args, .. } => args,
        BlockAsk::Stmt { sql, params } => {
            if u32::try_from(sql.len()).is_err() {
                return false;
            }
            params
        }
        BlockAsk::Commit | BlockAsk::Rollback => &[],
    };
    let Ok(n) = u16::try_from(values.len()) else {
        return false;
    };
    out.push(K_BLOCK);
    out.extend_from_slice(&block.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.push(u8::from(begins));
    match ask {
        BlockAsk::Call { proc, .. } => {
            out.push(0);
            out.extend_from_slice(&proc.to_le_bytes());
        }
        BlockAsk::Stmt { sql, .. } => {
            out.push(1);
            put_str(out, sql);
        }
        BlockAsk::Commit => {
            out.push(2);
            return true;
        }
        BlockAsk::Rollback => {
            out.push(3);
            return true;
        }
    }
    out.extend_from_slice(&n.to_le_bytes());
    for v in values {
        put_value(out, v);
    }
    true
}

/// Most block ids one RENEW frame carries (a sender with more sends
/// several).
pub const RENEW_MAX: usize = 4096;

/// Appends a RENEW payload for `blocks` (at most [`RENEW_MAX`]; more is
/// refused: `false`, nothing appended) and a lease period of `period_ms`.
pub fn renew(out: &mut Vec<u8>, period_ms: u32, blocks: &[u64]) -> bool {
    if blocks.len() > RENEW_MAX {
        return false;
    }
    out.push(K_RENEW);
    out.extend_from_slice(&period_ms.to_le_bytes());
    out.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    for b in blocks {
        out.extend_from_slice(&b.to_le_bytes());
    }
    true
}

/// The block ids of a decoded RENEW ([`Frame::Renew`]'s `blocks`).
pub fn renewed(blocks: &[u8]) -> impl Iterator<Item = u64> + '_ {
    blocks
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
}

/// The arguments of a decoded CALL ([`Frame::Call`]'s `n` and `args`), or
/// the parameters of a STMT ([`Frame::Stmt`]'s `n` and `params`).
pub fn call_args(n: u16, args: &[u8]) -> Result<Vec<Value>, WireError> {
    let mut c = Cur { b: args, at: 0 };
    // Each value takes at least a byte: the count is bounded by the frame.
    let mut out = Vec::with_capacity(usize::from(n).min(args.len()));
    for _ in 0..n {
        out.push(read_value(&mut c)?);
    }
    Ok(out)
}

/// Appends a CALL_REPLY payload with result rows. A row has at most
/// `u16::MAX` values and there are at most `u32::MAX` rows (more is
/// refused: `false`, with `out` as it was).
pub fn call_reply_rows(out: &mut Vec<u8>, id: u64, rows: &[Vec<Value>]) -> bool {
    if u32::try_from(rows.len()).is_err() || rows.iter().any(|r| r.len() > usize::from(u16::MAX)) {
        return false;
    }
    out.push(K_CALL_REPLY);
    out.extend_from_slice(&id.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for r in rows {
        out.extend_from_slice(&(r.len() as u16).to_le_bytes());
        for v in r {
            put_value(out, v);
        }
    }
    true
}

/// Appends a CALL_REPLY payload with an error.
pub fn call_reply_error(out: &mut Vec<u8>, id: u64, e: &ErrorParts<'_>) {
    out.push(K_CALL_REPLY);
    out.extend_from_slice(&id.to_le_bytes());
    out.push(1);
    out.push(e.code);
    out.extend_from_slice(&e.a.to_le_bytes());
    out.extend_from_slice(&e.b.to_le_bytes());
    for t in e.texts {
        put_str(out, t);
    }
}

/// The rows of a decoded [`Answer::Rows`].
pub fn call_rows(rows: u32, body: &[u8]) -> Result<Vec<Vec<Value>>, WireError> {
    let mut c = Cur { b: body, at: 0 };
    // Each row takes at least two bytes, each value one.
    let mut out = Vec::with_capacity((rows as usize).min(body.len() / 2));
    for _ in 0..rows {
        let n = c.u16_checked()?;
        let mut row = Vec::with_capacity(usize::from(n).min(c.left()));
        for _ in 0..n {
            row.push(read_value(&mut c)?);
        }
        out.push(row);
    }
    Ok(out)
}

pub fn call_cancel(out: &mut Vec<u8>, id: u64) {
    out.push(K_CALL_CANCEL);
    out.extend_from_slice(&id.to_le_bytes());
}

/// Whether `kind` is a request's (GET, INSERT, SCAN, MGET), [`CONTINUES`] or not.
fn is_request(kind: u8) -> bool {
    (K_GET..=K_MGET).contains(&(kind & !CONTINUES))
}

/// Whether the frame `payload` is a request that continues a branch (its
/// kind has [`CONTINUES`] set).
pub fn continues(payload: &[u8]) -> bool {
    payload
        .first()
        .is_some_and(|&k| is_request(k) && k & CONTINUES != 0)
}

/// Appends a GET request payload.
pub fn get(out: &mut Vec<u8>, gtid: u64, tag: u32, table: u16, key: u64, for_update: bool) {
    out.push(K_GET);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
    out.push(for_update as u8);
}

/// Appends a MGET request payload.
pub fn multi_get(
    out: &mut Vec<u8>,
    gtid: u64,
    tag: u32,
    table: u16,
    for_update: bool,
    keys: impl ExactSizeIterator<Item = u64>,
) {
    out.push(K_MGET);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.push(for_update as u8);
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for k in keys {
        out.extend_from_slice(&k.to_le_bytes());
    }
}

pub fn insert(out: &mut Vec<u8>, gtid: u64, tag: u32, table: u16, key: u64) {
    out.push(K_INSERT);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
}

#[allow(clippy::too_many_arguments)]
pub fn scan(
    out: &mut Vec<u8>,
    gtid: u64,
    tag: u32,
    table: u16,
    index: u16,
    lo: u128,
    hi: u128,
    limit: u32,
    reverse: bool,
) {
    out.push(K_SCAN);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&lo.to_le_bytes());
    out.extend_from_slice(&hi.to_le_bytes());
    out.extend_from_slice(&limit.to_le_bytes());
    out.push(reverse as u8);
}

/// Appends a REPLY header; the caller appends `n` rows of `[key][row_bytes]`.
pub fn reply_header(
    out: &mut Vec<u8>,
    tag: u32,
    status: Status,
    table: u16,
    row_bytes: u32,
    n: u32,
) {
    out.push(K_REPLY);
    out.extend_from_slice(&tag.to_le_bytes());
    let (s, r) = match status {
        Status::Ok {
            validated,
            undurable,
        } => (
            0u8,
            if validated { OK_VALIDATED } else { 0 } | if undurable { OK_UNDURABLE } else { 0 },
        ),
        Status::Conflict(reason) => (1, reason.index() as u8),
        Status::Refused => (2, 0),
    };
    out.push(s);
    out.push(r);
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&row_bytes.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
}

/// Offset of the row count in a REPLY payload (to patch it after the rows).
pub const REPLY_N_AT: usize = 1 + 4 + 1 + 1 + 2 + 4;
/// Offset of a REPLY's reason byte: the flags of [`Status::Ok`], patched
/// once the operation is done.
pub const REPLY_FLAGS_AT: usize = 1 + 4 + 1;
/// Bits of [`Status::Ok`]'s flags byte.
pub const OK_VALIDATED: u8 = 1;
pub const OK_UNDURABLE: u8 = 2;
/// [`Status::Ok`] with no flag set.
pub const OK: Status = Status::Ok {
    validated: false,
    undurable: false,
};

pub fn write(out: &mut Vec<u8>, gtid: u64, table: u16, key: u64, row: &[u8]) {
    out.push(K_WRITE);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(row);
}

pub fn delete(out: &mut Vec<u8>, gtid: u64, table: u16, key: u64) {
    out.push(K_DELETE);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
}

pub fn release(out: &mut Vec<u8>, gtid: u64) {
    out.push(K_RELEASE);
    out.extend_from_slice(&gtid.to_le_bytes());
}

/// Appends a LOCK request's header; the caller appends `n` entries with
/// [`lock_entry`]. `writes`: the WRITE / DELETE frames sent ahead of it.
pub fn lock(out: &mut Vec<u8>, gtid: u64, tag: u32, writes: u32, n: u32) {
    out.push(K_LOCK);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    out.extend_from_slice(&writes.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
}

pub fn lock_entry(out: &mut Vec<u8>, table: u16, key: u64) {
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
}

/// (table, key) of a LOCK entry of [`LOCK_ENTRY_BYTES`] bytes.
pub fn lock_entry_of(e: &[u8]) -> (u16, u64) {
    (
        u16::from_le_bytes([e[0], e[1]]),
        u64::from_le_bytes(e[2..10].try_into().expect("a LOCK entry is 10 bytes")),
    )
}

pub fn prep(out: &mut Vec<u8>, gtid: u64, writes: u32, hold: bool) {
    out.push(K_PREP);
    out.extend_from_slice(&gtid.to_le_bytes());
    out.extend_from_slice(&writes.to_le_bytes());
    out.push(hold as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_continued_request_decodes_as_its_kind_and_says_so() {
        let mut b = Vec::new();
        get(&mut b, 7, 9, 2, 11, false);
        assert!(!continues(&b));
        let plain = decode(&b).unwrap();
        let mut c = b.clone();
        c[0] |= CONTINUES;
        assert!(continues(&c));
        assert_eq!(decode(&c).unwrap(), plain);
        b.clear();
        scan(&mut b, 1, 2, 3, PRIMARY, 0, 9, 4, false);
        b[0] |= CONTINUES;
        assert!(continues(&b) && matches!(decode(&b), Ok(Frame::Scan { .. })));
        // The bit means nothing on other kinds: they stay unknown.
        for kind in [K_REPLY, K_WRITE, K_PREP, K_RELEASE, K_LOCK] {
            assert!(!continues(&[kind | CONTINUES]));
            assert!(matches!(
                decode(&[kind | CONTINUES]),
                Err(WireError::UnknownKind(_))
            ));
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let mut b = Vec::new();
        get(&mut b, 7, 9, 2, 11, true);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::Get {
                gtid: 7,
                tag: 9,
                table: 2,
                key: 11,
                for_update: true
            }
        );
        b.clear();
        multi_get(&mut b, 1, 2, 3, true, [5u64, 6].into_iter());
        match decode(&b).unwrap() {
            Frame::MultiGet {
                gtid: 1,
                tag: 2,
                table: 3,
                for_update: true,
                keys,
            } => assert_eq!(keys.len(), 16),
            f => panic!("decoded {f:?}"),
        }
        assert!(decode(&b[..b.len() - 3]).is_err());
        b.clear();
        insert(&mut b, 1, 2, 3, 4);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::Insert {
                gtid: 1,
                tag: 2,
                table: 3,
                key: 4
            }
        );
        b.clear();
        scan(&mut b, 1, 2, 3, PRIMARY, 5, u128::MAX, 10, true);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::Scan {
                gtid: 1,
                tag: 2,
                table: 3,
                index: PRIMARY,
                lo: 5,
                hi: u128::MAX,
                limit: 10,
                reverse: true
            }
        );
        b.clear();
        reply_header(
            &mut b,
            5,
            Status::Conflict(AbortReason::LockConflict),
            1,
            8,
            2,
        );
        b.extend_from_slice(&[1u8; 32]);
        match decode(&b).unwrap() {
            Frame::Reply {
                tag: 5,
                status: Status::Conflict(AbortReason::LockConflict),
                table: 1,
                row_bytes: 8,
                n: 2,
                rows,
            } => assert_eq!(rows.len(), 32),
            f => panic!("decoded {f:?}"),
        }
        b.clear();
        write(&mut b, 3, 1, 2, &[9, 9]);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::Write {
                gtid: 3,
                table: 1,
                key: 2,
                row: &[9, 9]
            }
        );
        b.clear();
        delete(&mut b, 3, 1, 2);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::Delete {
                gtid: 3,
                table: 1,
                key: 2
            }
        );
        b.clear();
        release(&mut b, 43);
        assert_eq!(decode(&b).unwrap(), Frame::Release { gtid: 43 });
        b.clear();
        for (validated, undurable) in [(false, false), (true, false), (false, true), (true, true)] {
            let status = Status::Ok {
                validated,
                undurable,
            };
            b.clear();
            reply_header(&mut b, 9, status, 1, 8, 0);
            assert!(matches!(decode(&b).unwrap(), Frame::Reply { status: s, .. } if s == status));
        }
        b.clear();
        lock(&mut b, 44, 6, 5, 2);
        lock_entry(&mut b, 1, 77);
        lock_entry(&mut b, 3, u64::MAX);
        match decode(&b).unwrap() {
            Frame::Lock {
                gtid: 44,
                tag: 6,
                writes: 5,
                entries,
            } => {
                let got: Vec<_> = entries
                    .chunks_exact(LOCK_ENTRY_BYTES)
                    .map(lock_entry_of)
                    .collect();
                assert_eq!(got, [(1, 77), (3, u64::MAX)]);
            }
            f => panic!("decoded {f:?}"),
        }
        assert!(matches!(
            decode(&b[..b.len() - 1]),
            Err(WireError::BadLength { .. })
        ));
        // A count of entries that the frame does not hold, however large.
        let mut huge = b.clone();
        huge[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&huge), Err(WireError::BadLength { .. })));
        b.clear();
        prep(&mut b, 42, 3, true);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::Prep {
                gtid: 42,
                writes: 3,
                hold: true
            }
        );
        let m = Msg::CommitReq { gtid: 77 };
        b.clear();
        m.encode(&mut b);
        assert_eq!(decode(&b).unwrap(), Frame::Coord(m));
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut b = Vec::new();
        get(&mut b, 7, 9, 2, 11, false);
        assert!(matches!(
            decode(&b[..b.len() - 1]),
            Err(WireError::BadLength { .. })
        ));
        let mut bad = b.clone();
        *bad.last_mut().unwrap() = 2;
        assert_eq!(decode(&bad), Err(WireError::BadFlag(2)));
        b.clear();
        reply_header(&mut b, 1, OK, 0, 8, 3);
        b.extend_from_slice(&[0u8; 47]);
        assert!(matches!(decode(&b), Err(WireError::BadRows { .. })));
        b.clear();
        reply_header(&mut b, 1, OK, 0, 8, 0);
        b[REPLY_FLAGS_AT] = 4;
        assert_eq!(decode(&b), Err(WireError::BadStatus(4)));
        assert_eq!(decode(&[0x7f]), Err(WireError::UnknownKind(0x7f)));
        assert!(decode(&[]).is_err());
    }

    #[test]
    fn forwarded_calls_round_trip() {
        let args = vec![
            Value::Null,
            Value::Int(-5),
            Value::Float(2.5),
            Value::Str("é".into()),
            Value::Ints(vec![1, i64::MIN]),
        ];
        let mut b = Vec::new();
        assert!(call(&mut b, 77, 3, &args));
        match decode(&b).unwrap() {
            Frame::Call {
                id: 77,
                proc: 3,
                n: 5,
                args: a,
            } => assert_eq!(call_args(5, a).unwrap(), args),
            f => panic!("decoded {f:?}"),
        }
        // One byte short, one too many, a bad tag: refused.
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        let mut bad = b.clone();
        bad[15] = 9;
        assert_eq!(decode(&bad), Err(WireError::BadValue("unknown value tag")));
        b.clear();
        let rows = vec![vec![Value::Int(1), Value::Str("x".into())], vec![]];
        assert!(call_reply_rows(&mut b, 8, &rows));
        match decode(&b).unwrap() {
            Frame::CallReply {
                id: 8,
                answer: Answer::Rows { rows: 2, body },
            } => assert_eq!(call_rows(2, body).unwrap(), rows),
            f => panic!("decoded {f:?}"),
        }
        b.clear();
        let e = ErrorParts {
            code: 4,
            a: 1,
            b: u64::MAX,
            texts: ["transfer", "why"],
        };
        call_reply_error(&mut b, 9, &e);
        assert_eq!(
            decode(&b).unwrap(),
            Frame::CallReply {
                id: 9,
                answer: Answer::Error(e)
            }
        );
        // A string that claims more bytes than the frame holds.
        let at = b.len() - 3 - 4 - 8;
        b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&b).is_err());
        b.clear();
        call_cancel(&mut b, 10);
        assert_eq!(decode(&b).unwrap(), Frame::CallCancel { id: 10 });
        assert!(decode(&b[..5]).is_err());
        // Counts far beyond the frame: refused without allocating them.
        b.clear();
        b.push(K_CALL);
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&u16::MAX.to_le_bytes());
        b.push(V_INTS);
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&b).is_err());
        assert!(call_args(u16::MAX, &b[15..]).is_err());
        assert!(call_rows(u32::MAX, &[]).is_err());
    }

    #[test]
    fn block_operations_round_trip_and_refuse_bad_lengths() {
        let args = vec![Value::Int(7), Value::Str("x".into())];
        let mut b = Vec::new();
        assert!(block(
            &mut b,
            3,
            4,
            true,
            BlockAsk::Call {
                proc: 9,
                args: &args
            }
        ));
        match decode(&b).unwrap() {
            Frame::Block {
                block: 3,
                id: 4,
                begins: true,
                op:
                    BlockOp::Call {
                        proc: 9,
                        n: 2,
                        args: a,
                    },
            } => assert_eq!(call_args(2, a).unwrap(), args),
            f => panic!("decoded {f:?}"),
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        b.clear();
        let sql = "SELECT balance FROM accounts WHERE id = $1";
        assert!(block(
            &mut b,
            3,
            5,
            false,
            BlockAsk::Stmt { sql, params: &args }
        ));
        match decode(&b).unwrap() {
            Frame::Block {
                block: 3,
                id: 5,
                begins: false,
                op:
                    BlockOp::Stmt {
                        sql: s,
                        n: 2,
                        params,
                    },
            } => {
                assert_eq!(s, sql);
                assert_eq!(call_args(2, params).unwrap(), args);
            }
            f => panic!("decoded {f:?}"),
        }
        let mut long = b.clone();
        long[19..23].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&long).is_err());
        for (ask, op) in [
            (BlockAsk::Commit, BlockOp::Commit),
            (BlockAsk::Rollback, BlockOp::Rollback),
        ] {
            b.clear();
            assert!(block(&mut b, 1, 2, false, ask));
            assert_eq!(
                decode(&b).unwrap(),
                Frame::Block {
                    block: 1,
                    id: 2,
                    begins: false,
                    op
                }
            );
            b.push(0);
            assert!(decode(&b).is_err());
        }
        b[18] = 4;
        assert_eq!(decode(&b[..19]), Err(WireError::BadStatus(4)));
        b[17] = 2;
        assert_eq!(decode(&b[..19]), Err(WireError::BadFlag(2)));
    }

    #[test]
    fn forwarded_statements_round_trip_and_refuse_bad_lengths() {
        let params = vec![Value::Int(7), Value::Str("x".into()), Value::Null];
        let sql = "UPDATE accounts SET balance = balance + $2 WHERE id = $1";
        let mut b = Vec::new();
        assert!(stmt(&mut b, 11, sql, &params));
        match decode(&b).unwrap() {
            Frame::Stmt {
                id: 11,
                sql: s,
                n: 3,
                params: p,
            } => {
                assert_eq!(s, sql);
                assert_eq!(call_args(3, p).unwrap(), params);
            }
            f => panic!("decoded {f:?}"),
        }
        // A text longer than the frame, or one byte missing or extra: refused.
        let mut long = b.clone();
        long[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&long),
            Err(WireError::BadValue("longer than its frame"))
        );
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut extra = b.clone();
        extra.push(0);
        assert!(decode(&extra).is_err());
        // Text that is not UTF-8.
        let mut bad = b.clone();
        bad[13] = 0xff;
        assert_eq!(decode(&bad), Err(WireError::BadValue("string not UTF-8")));
        // More parameters claimed than the frame holds.
        let at = 13 + sql.len();
        let mut many = b.clone();
        many[at..at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(decode(&many).is_err());
    }

    #[test]
    fn renewals_round_trip_and_refuse_bad_lengths() {
        let ids = [3u64, u64::MAX, 0];
        let mut b = Vec::new();
        assert!(renew(&mut b, 1000, &ids));
        match decode(&b).unwrap() {
            Frame::Renew {
                period_ms: 1000,
                blocks,
            } => assert_eq!(renewed(blocks).collect::<Vec<_>>(), ids),
            f => panic!("decoded {f:?}"),
        }
        // One byte short or extra, or a count past the frame: refused.
        assert!(decode(&b[..b.len() - 1]).is_err());
        let mut extra = b.clone();
        extra.push(0);
        assert!(decode(&extra).is_err());
        let mut many = b.clone();
        many[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&many).is_err());
        // None is a frame; more than a frame's share is refused.
        b.clear();
        assert!(renew(&mut b, 7, &[]));
        assert!(matches!(
            decode(&b),
            Ok(Frame::Renew {
                period_ms: 7,
                blocks: []
            })
        ));
        b.clear();
        assert!(!renew(&mut b, 7, &vec![1; RENEW_MAX + 1]));
        assert!(b.is_empty());
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::Int),
            any::<u64>().prop_map(|b| Value::Float(f64::from_bits(b))),
            ".{0,8}".prop_map(Value::Str),
            proptest::collection::vec(any::<i64>(), 0..4).prop_map(Value::Ints),
        ]
    }

    /// Floats compare by their bits (a NaN travels as itself).
    fn same(a: &[Value], b: &[Value]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| match (x, y) {
                (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
                _ => x == y,
            })
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder.
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode(&bytes);
        }

        /// Garbage behind a forwarded call's kinds: no panic, and whatever
        /// decodes also reads (its arguments, its rows) without error.
        #[test]
        fn forwarded_call_garbage_never_panics(
            kind in K_CALL..=K_RENEW,
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut b = vec![kind];
            b.extend_from_slice(&bytes);
            match decode(&b) {
                Ok(Frame::Call { n, args, .. })
                | Ok(Frame::Stmt { n, params: args, .. })
                | Ok(Frame::Block { op: BlockOp::Call { n, args, .. }, .. })
                | Ok(Frame::Block { op: BlockOp::Stmt { n, params: args, .. }, .. }) => {
                    prop_assert_eq!(call_args(n, args).map(|a| a.len()), Ok(usize::from(n)));
                }
                Ok(Frame::CallReply { answer: Answer::Rows { rows, body }, .. }) => {
                    prop_assert!(call_rows(rows, body).is_ok());
                }
                Ok(Frame::Renew { blocks, .. }) => {
                    prop_assert_eq!(renewed(blocks).count() * 8, blocks.len());
                }
                _ => {}
            }
        }

        /// Any statement and parameters round-trip, and any cut of them,
        /// or a text length past the frame, is refused.
        #[test]
        fn forwarded_statements_round_trip(
            sql in ".{0,40}",
            params in proptest::collection::vec(value(), 0..6),
            cut in any::<usize>(),
            len in any::<u32>(),
        ) {
            let mut b = Vec::new();
            prop_assert!(stmt(&mut b, 5, &sql, &params));
            match decode(&b) {
                Ok(Frame::Stmt { id: 5, sql: s, n, params: p }) => {
                    prop_assert_eq!(s, sql.as_str());
                    prop_assert!(same(&call_args(n, p).unwrap(), &params));
                }
                f => prop_assert!(false, "decoded {:?}", f),
            }
            let short = cut % b.len();
            prop_assert!(decode(&b[..short]).is_err());
            if len as usize > sql.len() {
                let mut long = b.clone();
                long[9..13].copy_from_slice(&len.to_le_bytes());
                prop_assert!(decode(&long).is_err());
            }
        }

        /// Any arguments and rows round-trip, and any cut of them is refused.
        #[test]
        fn forwarded_values_round_trip(
            args in proptest::collection::vec(value(), 0..6),
            rows in proptest::collection::vec(proptest::collection::vec(value(), 0..4), 0..4),
            cut in any::<usize>(),
        ) {
            let mut b = Vec::new();
            prop_assert!(call(&mut b, 1, 2, &args));
            match decode(&b) {
                Ok(Frame::Call { n, args: a, .. }) => {
                    prop_assert!(same(&call_args(n, a).unwrap(), &args));
                }
                f => prop_assert!(false, "decoded {:?}", f),
            }
            let short = 15 + cut % (b.len() - 14);
            if short < b.len() {
                prop_assert!(decode(&b[..short]).is_err());
            }
            b.clear();
            prop_assert!(call_reply_rows(&mut b, 3, &rows));
            match decode(&b) {
                Ok(Frame::CallReply { answer: Answer::Rows { rows: n, body }, .. }) => {
                    let got = call_rows(n, body).unwrap();
                    prop_assert_eq!(got.len(), rows.len());
                    for (g, r) in got.iter().zip(&rows) {
                        prop_assert!(same(g, r));
                    }
                }
                f => prop_assert!(false, "decoded {:?}", f),
            }
        }
    }
}
