//! Outcomes and errors.
//!
//! An abort is an *outcome* of a transaction, not an error: a stored procedure
//! returns `Err(Abort)` and the driver decides what to do (retry a conflict with
//! back-off, count a user abort). Operating errors (a log that can no longer be
//! synced, a table that is full, bad configuration) are [`Error`]s.

use std::fmt;

/// Why a transaction was aborted by the engine. Conflicts are retried by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortReason {
    /// 2PL no_wait: a lock was held in a conflicting mode.
    LockConflict,
    /// 2PL wait_die: the requester was younger than a holder and died.
    WaitDie,
    /// OCC: a row read by the transaction changed or was locked at validation.
    ReadValidation,
    /// OCC: a write lock could not be taken at commit.
    WriteLocked,
    /// A range scan saw an uncommitted insert or delete, or its result changed before commit.
    Phantom,
    /// An insert found the key already present (uncommitted or committed by another transaction).
    DuplicateKey,
    /// A remote participant voted no or did not answer (islands with two-phase commit).
    Remote,
    /// The transaction needs an island whose process is down (its
    /// connection closed, or its heartbeats stopped): not retried, the caller
    /// hears [`Error::IslandDown`].
    IslandDown,
}

impl AbortReason {
    pub const ALL: [AbortReason; 8] = [
        AbortReason::LockConflict,
        AbortReason::WaitDie,
        AbortReason::ReadValidation,
        AbortReason::WriteLocked,
        AbortReason::Phantom,
        AbortReason::DuplicateKey,
        AbortReason::Remote,
        AbortReason::IslandDown,
    ];

    /// Dense index, for per-thread counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            AbortReason::LockConflict => "lock-conflict",
            AbortReason::WaitDie => "wait-die",
            AbortReason::ReadValidation => "read-validation",
            AbortReason::WriteLocked => "write-locked",
            AbortReason::Phantom => "phantom",
            AbortReason::DuplicateKey => "duplicate-key",
            AbortReason::Remote => "remote",
            AbortReason::IslandDown => "island-down",
        }
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a transaction ended short of commit.
#[derive(Debug)]
pub enum Abort {
    /// The engine aborted it; the driver retries with back-off.
    Conflict(AbortReason),
    /// The procedure asked to roll back (for example TPC-C's 1% NewOrder with an
    /// invalid item). Not retried: it is the transaction's intended outcome.
    User(&'static str),
    /// An operating error; the transaction cannot go on and is not retried.
    Failed(Error),
}

impl From<Error> for Abort {
    fn from(e: Error) -> Self {
        Abort::Failed(e)
    }
}

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Abort::Conflict(r) => write!(f, "aborted: {r}"),
            Abort::User(why) => write!(f, "rolled back by the procedure: {why}"),
            Abort::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

/// Operating errors of the engine.
#[derive(Debug, thiserror::Error, Clone)]
#[non_exhaustive]
pub enum Error {
    #[error("table '{table}' is full: its capacity is {capacity} rows (raise it in the schema)")]
    TableFull { table: String, capacity: u64 },
    #[error("unknown table id {0}")]
    NoSuchTable(u16),
    #[error("key {key:#x} does not fit the key layout of table '{table}': {why}")]
    BadKey {
        table: String,
        key: u64,
        why: String,
    },
    #[error("row of {got} bytes given to table '{table}', whose rows are {want} bytes")]
    RowSize {
        table: String,
        got: usize,
        want: usize,
    },
    #[error("write-ahead log failed, the island refuses further writes: {0}")]
    LogFailed(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A transaction needed island `island`, whose process is down (see
    /// [`AbortReason::IslandDown`]); a server answers SQLSTATE 57P03.
    #[error("island {island} is down: the transaction needed it and was rolled back")]
    IslandDown { island: u16 },
    #[error("recovery failed: {0}")]
    Recovery(String),
    /// The log is damaged where no crash explains it (see `wal`); nothing was changed.
    #[error("{0}")]
    Damaged(String),
    #[error("I/O error: {0}")]
    Io(String),
    #[error("protocol error between islands: {0}")]
    Protocol(String),
    /// Arithmetic on a stored value left its column's type (the checked
    /// helpers of [`crate::storage::RowMut`], e.g. `add_i64`). The transaction
    /// rolls back; a server answers SQLSTATE 22003.
    #[error("numeric value out of range: {0}")]
    OutOfRange(String),
}

impl Error {
    /// The same error with `context` in front of its message (e.g. which island).
    pub fn context(self, context: &str) -> Error {
        let pre = |m: String| format!("{context}: {m}");
        match self {
            Error::LogFailed(m) => Error::LogFailed(pre(m)),
            Error::Config(m) => Error::Config(pre(m)),
            Error::Recovery(m) => Error::Recovery(pre(m)),
            Error::Damaged(m) => Error::Damaged(pre(m)),
            Error::Io(m) => Error::Io(pre(m)),
            Error::Protocol(m) => Error::Protocol(pre(m)),
            other => other,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}
