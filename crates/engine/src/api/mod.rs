//! The application API: open a deployment, call stored procedures by name.
//!
//! A [`Catalog`] declares the tables, how each is partitioned over the
//! islands ([`Partition`]), and named stored procedures with typed
//! parameters and result columns ([`ProcDef`]). [`Deployment::open`] plans
//! the islands on the machine ([`crate::deploy::DeploySpec`]), opens or
//! recovers each one, loads a new database with pinned first-touch threads,
//! and starts one executor thread per worker. A [`Client`], cheap to clone
//! and usable from any thread, calls a procedure: the call goes to a worker
//! of its home island ([`Home`]) through a bounded queue, runs there as a
//! transaction (two-phase commit when it touches other islands), and is
//! answered once its commit is acknowledged under the deployment's
//! durability mode (`sync`: after the fdatasync of its log batch).
//!
//! The executor threads run the engine's one executor loop (`executor::run`),
//! the same that runs a benchmark's generated requests;
//! [`Deployment::open_generating`] gives them both sources at once. On
//! several islands a worker interleaves several transactions, and every
//! island runs `no_wait` two-phase locking. A transaction that aborts on a
//! conflict is retried inside the engine with back-off; the caller sees
//! [`CallError::Serialization`] only after `Options::max_attempts`.
//!
//! Beside procedures, a client runs [`Statement`]s (work on rows that is
//! not in the catalog, such as a compiled SQL statement) as transactions of
//! their own ([`Client::run_async`]), and opens interactive transactions
//! ([`Client::begin`], a [`Block`]) whose statements run one after another
//! in one transaction. A block is never retried by the engine: a conflict
//! aborts it ([`CallError::Serialization`], or [`CallError::Deadlock`] after
//! a lock wait longer than [`Options::deadlock_timeout`]) and its client
//! retries it, as PostgreSQL's clients do.
//!
//! Arithmetic on stored values is checked: a procedure changes a number
//! with [`crate::storage::RowMut::add_i64`] (and `sub_i64`, `add_i32`,
//! `add_u64`), which returns the new value or, when the result leaves the
//! column's type, [`crate::Error::OutOfRange`]. Returned with `?`, it rolls
//! the transaction back and the caller gets [`CallError::OutOfRange`] (a
//! server answers SQLSTATE `22003`); nothing is stored wrapped around.
//!
//! ```no_run
//! use islands::api::{Catalog, Client, Deployment, Options, Partition, ProcDef, Type, Value};
//! use islands::deploy::{DeploySpec, Islands};
//! use islands::storage::{ColType, PrimaryKind, TableDef};
//!
//! let mut catalog = Catalog::new();
//! let accounts = catalog.table(
//!     TableDef::new("accounts", &[("balance", ColType::I64)], 1 << 16, PrimaryKind::Hash),
//!     Partition::BySite(|key| (key / 1000) as u32),
//! );
//! catalog
//!     .procedure(
//!         ProcDef::new("balance", move |tx, args, out| {
//!             Box::pin(async move {
//!                 let key = args.int(0) as u64;
//!                 if let Some(h) = tx.get(accounts, key).await? {
//!                     let b = tx.row(h).i64(islands::storage::Col(0));
//!                     out.push(vec![Value::Int(b)]);
//!                 }
//!                 Ok(())
//!             })
//!         })
//!         .param("account", Type::Int)
//!         .column("balance", Type::Int)
//!         .home_by(0, accounts),
//!     )
//!     .unwrap();
//! let mut spec = DeploySpec::new(Islands::Count(2));
//! spec.durability = "off".into();
//! let db = Deployment::open(Options::new(spec), catalog, |load| {
//!     for site in load.sites() {
//!         for k in site as u64 * 1000..site as u64 * 1000 + 1000 {
//!             load.put(accounts, k, |r| r.set_i64(islands::storage::Col(0), 100))?;
//!         }
//!     }
//!     Ok(())
//! })
//! .unwrap();
//! let client: Client = db.client();
//! let rows = client.call("balance", &[Value::Int(42)]).unwrap();
//! assert_eq!(rows, vec![vec![Value::Int(100)]]);
//! db.shutdown().unwrap();
//! ```

mod block;
mod catalog;
mod client;
mod deployment;
mod forward;
pub mod open;
mod value;

pub use block::{Block, Statement};
pub use catalog::{
    sql_abort, sql_abort_state, KeyAlloc, KeyAllocFn, KeyPart, SqlColumn, SqlSecondary, SqlSource,
    SqlTable,
};
pub use catalog::{Catalog, Home, Partition, ProcBody, ProcDef, ProcFuture, SiteOf};
pub use client::{CallFuture, Client};
pub use deployment::{
    CancelFlag, Deployment, IslandState, IslandsView, Load, Options, TransportWrap,
};
pub use forward::StatementCompiler;
pub use value::{Args, Row, Type, Value};

/// Why a call has no result rows.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("no procedure named {0:?} in the catalog")]
    UnknownProcedure(String),
    #[error("procedure {procedure}: {why}")]
    BadArguments { procedure: String, why: String },
    /// The procedure rolled the transaction back (its intended outcome).
    #[error("procedure {procedure} rolled back: {why}")]
    Rollback { procedure: String, why: String },
    /// The transaction aborted on conflicts as many times as allowed.
    #[error(
        "procedure {procedure}: serialization failure after {attempts} attempts (last: {last})"
    )]
    Serialization {
        procedure: String,
        attempts: u32,
        last: String,
    },
    /// Arithmetic on a stored value overflowed its column's type (a checked
    /// helper such as [`crate::storage::RowMut::add_i64`] returned
    /// [`crate::Error::OutOfRange`]): the transaction was rolled back and
    /// nothing it wrote is kept. A server answers SQLSTATE 22003.
    #[error("procedure {procedure}: numeric value out of range: {why} (its transaction was rolled back)")]
    OutOfRange { procedure: String, why: String },
    /// The transaction needed an island whose process is down: rolled
    /// back, not retried. A server answers SQLSTATE 57P03.
    #[error("procedure {procedure}: island {island} is down (its transaction was rolled back)")]
    IslandDown { procedure: String, island: u16 },
    #[error("procedure {procedure} panicked: {message} (its transaction was rolled back)")]
    Panicked { procedure: String, message: String },
    #[error("procedure {procedure} failed: {error} (its transaction was rolled back)")]
    Failed { procedure: String, error: String },
    /// The call was canceled ([`CancelFlag`]) before its transaction
    /// committed: it was rolled back (or never began).
    #[error("procedure {procedure}: canceled on request (its transaction was rolled back)")]
    Canceled { procedure: String },
    /// A statement of a transaction block waited longer than the
    /// deadlock timeout ([`Options::deadlock_timeout`]) for a row lock: the
    /// block was rolled back (SQLSTATE 40P01). Its client may retry it.
    #[error("deadlock detected: a statement waited {waited_ms} ms for a row lock (its transaction block was rolled back)")]
    Deadlock { waited_ms: u64 },
    /// Every executor of the block's home island has as many transaction
    /// blocks open as [`Options::blocks_per_worker`] allows.
    #[error("too many open transaction blocks on island {island}: each of its executors keeps at most {limit} (Options::blocks_per_worker)")]
    TooManyBlocks { island: usize, limit: usize },
    /// The home of a transaction block, or of a statement that cannot be
    /// rebuilt in another process ([`Statement::source`] is `None`), is an
    /// island that runs in another process of the deployment: calls of
    /// procedures and statements with a source are forwarded there, these
    /// are not, so it is sent to a server of that island's process.
    #[error("the home is island {island}, which runs in another process: send it to that island's server")]
    Elsewhere { island: usize },
    /// A call or statement forwarded to island `island` of another process
    /// got no answer within [`Options::forward_timeout`], while that
    /// island's process stayed up (a lost CALL or CALL_REPLY, or a home
    /// that kept it that long). It may have committed there or not: unlike
    /// [`CallError::Serialization`], running it again may apply it twice, so
    /// its caller must look before it retries. A server answers SQLSTATE
    /// 40003 (statement_completion_unknown), which drivers do not retry on
    /// their own.
    #[error("procedure {procedure}: no answer from island {island} within {waited_ms} ms, so whether it committed there is unknown (look before running it again)")]
    OutcomeUnknown {
        procedure: String,
        island: u16,
        waited_ms: u64,
    },
    /// A blocking call, or an operation of a transaction block, homed on
    /// island `island` of another process found the queue of this
    /// process's executor that forwards it full, and no room came within
    /// [`Options::forward_timeout`] (the executor is overloaded or stalled):
    /// nothing was sent. A server answers SQLSTATE 53000.
    #[error("too many operations queued for island {island} of another process: none left the forwarding executor's queue within {waited_ms} ms (the executor is overloaded or stalled)")]
    Busy { island: usize, waited_ms: u64 },
    /// The deployment was shut down before the call finished (or began).
    #[error("the deployment is shut down")]
    ShutDown,
    /// The deployment stopped on a failure (a dead log): reopen it, and
    /// recovery resolves what was in flight.
    #[error("the deployment stopped: {0}")]
    Stopped(String),
}
