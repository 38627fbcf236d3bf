//! The protocol handlers: a statement (simple or extended query protocol)
//! becomes a procedure call through the [`Client`], a session statement
//! (`SET`, `SHOW`, …), a constant `SELECT`, or a no-op, and its answer
//! becomes rows or an error with a SQLSTATE.
//!
//! Dispatch is [`prepare`] (what a statement is, its parameters and
//! columns) then [`Handler::answer`] (running it). Two seams are marked
//! there: statements on tables ([`Stmt::Tables`], for `tables::plan`) and
//! queries on `pg_catalog` ([`Stmt::Catalog`], for `pg_catalog::answer`);
//! until they are plugged in, both answer `0A000`.
//!
//! Transaction blocks: `BEGIN` gives the connection a [`Block`] (kept in
//! [`Handler::block`], taken out while one of its statements runs), and
//! the session's [`BlockStatus`] says `T`. Calls and statements on tables
//! run in the block; `COMMIT` commits it (answered once durable),
//! `ROLLBACK` rolls it back. Any error inside a block rolls it back at once
//! (its locks released) and makes the status `E`: every later statement but
//! `ROLLBACK` (or `COMMIT`, answered `ROLLBACK`) is refused with `25P02`.
//! Portals end with the block. Outside a block every statement is its own
//! transaction.
//!
//! Cancel: a cancel request sets [`Handler::cancel`], which stays set
//! until the next query string (simple protocol) or pipeline (extended:
//! the first Execute after a Sync) begins. Every statement checks it
//! before it runs, so a cancel stops the rest of the string or pipeline,
//! not only the statement running when it lands. `statement_timeout` sets
//! the same flag when a statement runs longer.

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{stream, Sink, SinkExt, StreamExt};
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, PgWireConnectionState, Type as PgType, DEFAULT_NAME,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::{DataRow, FieldDescription, NoData, RowDescription};
use pgwire::messages::extendedquery::{
    Describe, Execute, Parse, ParseComplete, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL,
};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, NoticeResponse, ReadyForQuery,
};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::PgWireBackendMessage;

use super::metrics::Figures;
use super::session::{self, BlockStatus, Report, Session};
use super::shared::Shared;
use super::sql::{self, Arg, Func, Item, Projection, Scalar, Show, SqlError, Stmt};

use super::pg_catalog;
use super::tables::{self, TablePlan};
use crate::api::{Block, CallError, CancelFlag, Home, ProcDef, Row, Statement, Type, Value};
use crate::transport::peer::PeerState;

/// A statement prepared by Parse: the procedure a call names is resolved
/// then (an unknown one is an error at once, as PostgreSQL's is), and what
/// each of its executions would otherwise build again is kept.
#[derive(Debug)]
pub(crate) struct Prepared {
    stmt: Stmt,
    proc: Option<usize>,
    /// A statement on tables: its plan, made once.
    table: Option<Arc<TablePlan>>,
    /// The procedure's columns a call answers with, in order (`None`: all).
    project: Option<Vec<usize>>,
    /// The type of each placeholder ([`param_types`]).
    params: Vec<PgType>,
    /// The columns it answers with ([`columns`]).
    cols: Vec<(String, PgType)>,
    /// `cols` as fields all in text format: the schema of its rows unless
    /// the client asks for binary columns.
    text_schema: Arc<Vec<FieldInfo>>,
    /// A statement on tables: its SQL text, from which another process of
    /// the deployment rebuilds it ([`Statement::source`]).
    sql: Option<Arc<str>>,
}

pub(crate) fn user_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

fn sql_error(e: SqlError) -> PgWireError {
    user_error(e.code, e.message)
}

pub(crate) fn fatal_info(code: &str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo::new("FATAL".to_owned(), code.to_owned(), message.into())
}

/// The SQLSTATE and severity of a failed call.
fn call_error(e: CallError) -> PgWireError {
    let (code, fatal) = match &e {
        CallError::UnknownProcedure(_) => ("42883", false),
        CallError::BadArguments { .. } => ("42804", false),
        CallError::Rollback { why, .. } => (tables::abort_sqlstate(why).unwrap_or("P0001"), false),
        CallError::Serialization { .. } => ("40001", false),
        CallError::Deadlock { .. } => ("40P01", false),
        CallError::TooManyBlocks { .. } => ("53000", false),
        CallError::Busy { .. } => ("53000", false),
        CallError::Elsewhere { .. } => ("0A000", false),
        CallError::Canceled { .. } => ("57014", false),
        CallError::OutOfRange { .. } => ("22003", false),
        CallError::IslandDown { .. } => ("57P03", false),
        CallError::OutcomeUnknown { .. } => ("40003", false),
        CallError::Panicked { .. } | CallError::Failed { .. } => ("XX000", false),
        CallError::ShutDown => ("57P01", true),
        CallError::Stopped(_) => ("58030", true),
    };
    let message = match e {
        // A user abort's message is the procedure's own words.
        CallError::Rollback { why, .. } => why,
        CallError::ShutDown => "terminating connection: the server is shutting down".into(),
        CallError::Canceled { procedure } => {
            format!("canceling statement due to user request: {procedure} was rolled back")
        }
        e => e.to_string(),
    };
    if fatal {
        PgWireError::UserError(Box::new(fatal_info(code, message)))
    } else {
        user_error(code, message)
    }
}

fn pg_type(t: Type) -> PgType {
    match t {
        Type::Int => PgType::INT8,
        Type::Float => PgType::FLOAT8,
        Type::Str => PgType::TEXT,
        Type::Ints => PgType::INT8_ARRAY,
    }
}

/// A type as PostgreSQL's users write it: `int8`, `float8`, `text`, and
/// `int8[]` for the array whose catalog name is `_int8`.
fn sql_name(t: &PgType) -> String {
    match t.name().strip_prefix('_') {
        Some(element) => format!("{element}[]"),
        None => t.name().to_string(),
    }
}

/// A procedure's name and parameters, in PostgreSQL's type names.
fn sql_signature(p: &ProcDef) -> String {
    format!("{}({})", p.name(), sql_params(p.params()))
}

/// `name type, …`, in PostgreSQL's type names.
fn sql_params(v: &[(String, Type)]) -> String {
    v.iter()
        .map(|(n, t)| format!("{n} {}", sql_name(&pg_type(*t))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The format of field `i` under `f`; a list of codes of the wrong length
/// is the client's error, not a panic.
fn format_of(f: &Format, i: usize) -> PgWireResult<FieldFormat> {
    match f {
        Format::Individual(codes) => match codes.get(i) {
            Some(c) => Ok(FieldFormat::from(*c)),
            None => Err(user_error(
                "08P01",
                format!(
                    "{} format code(s) given for field {} and more",
                    codes.len(),
                    i + 1
                ),
            )),
        },
        f => Ok(f.format_for(i)),
    }
}

fn fields(cols: &[(String, PgType)], format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
    cols.iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let fmt = match format {
                Some(f) => format_of(f, i)?,
                None => FieldFormat::Text,
            };
            Ok(FieldInfo::new(name.clone(), None, None, t.clone(), fmt))
        })
        .collect()
}

fn text(s: &str) -> (String, PgType) {
    (s.to_string(), PgType::TEXT)
}

fn int(s: &str) -> (String, PgType) {
    (s.to_string(), PgType::INT8)
}

fn float(s: &str) -> (String, PgType) {
    (s.to_string(), PgType::FLOAT8)
}

impl Show {
    fn columns(self) -> Vec<(String, PgType)> {
        match self {
            Show::Procedures => vec![
                text("name"),
                text("parameters"),
                text("columns"),
                text("home"),
            ],
            Show::Islands => vec![
                int("island"),
                text("cpus"),
                int("cores"),
                int("workers"),
                text("sites"),
                int("numa_node"),
                text("durability"),
                text("log_dir"),
                int("incarnation"),
                text("process"),
                text("state"),
                int("last_heard_ms"),
            ],
            Show::Peers => vec![
                int("island"),
                text("state"),
                int("bytes_in"),
                int("bytes_out"),
                int("batches_in"),
                int("batches_out"),
                int("dropped"),
                int("dropped_unlinked"),
                int("dropped_stale"),
                int("parked"),
                int("reconnects"),
                int("refusals"),
                int("goodbyes"),
                int("last_heard_ms"),
                int("incarnation"),
                text("error"),
            ],
            Show::Threads => vec![
                text("thread"),
                text("role"),
                int("island"),
                int("tid"),
                text("cpus"),
                int("last_cpu"),
                float("user_s"),
                float("system_s"),
                float("utilisation_pct"),
                float("running_s"),
            ],
            Show::Stats => vec![text("scope"), text("counter"), int("value")],
        }
    }
}

/// The type of a constant column.
fn scalar_type(s: &Scalar) -> PgType {
    match s {
        Scalar::Value(Value::Int(_)) | Scalar::Func(Func::BackendPid) => PgType::INT8,
        Scalar::Value(Value::Float(_)) => PgType::FLOAT8,
        Scalar::Value(Value::Ints(_)) => PgType::INT8_ARRAY,
        Scalar::Param(p) => pg_type(p.result),
        _ => PgType::TEXT,
    }
}

/// The columns a statement answers with (none: a command tag only), and
/// for a call with a select list, the procedure's columns it takes.
type Columns = (Vec<(String, PgType)>, Option<Vec<usize>>);

fn columns(sh: &Shared, stmt: &Stmt, proc: Option<usize>) -> PgWireResult<Columns> {
    Ok(match (stmt, proc) {
        (Stmt::Call { projection, .. }, Some(i)) => {
            let all: Vec<(String, PgType)> = sh.procs[i]
                .columns()
                .iter()
                .map(|(n, t)| (n.clone(), pg_type(*t)))
                .collect();
            match projection {
                None => (all, None),
                Some(p) => project(sh.procs[i].name(), all, p)?,
            }
        }
        (Stmt::Show(s), _) => (s.columns(), None),
        (Stmt::ShowSetting(Some(name)), _) => (vec![text(name)], None),
        (Stmt::ShowSetting(None), _) => (
            vec![text("name"), text("setting"), text("description")],
            None,
        ),
        (Stmt::Select(cols), _) => (
            cols.iter()
                .map(|(n, s)| (n.clone(), scalar_type(s)))
                .collect(),
            None,
        ),
        _ => (Vec::new(), None),
    })
}

/// A call's select list and aliases over the procedure's columns `all`:
/// the columns it answers with and where each comes from. A name not
/// among the columns is `42703`.
fn project(proc: &str, mut all: Vec<(String, PgType)>, p: &Projection) -> PgWireResult<Columns> {
    if p.renames.len() > all.len() {
        return Err(user_error(
            "42P10",
            format!(
                "{proc} has {} column(s) available but {} are named",
                all.len(),
                p.renames.len()
            ),
        ));
    }
    for (c, name) in all.iter_mut().zip(&p.renames) {
        c.0 = name.clone();
    }
    let mut cols = Vec::new();
    let mut from = Vec::new();
    for it in &p.items {
        match it {
            Item::Star => {
                cols.extend(all.iter().cloned());
                from.extend(0..all.len());
            }
            Item::Column { name, alias } => {
                let Some(i) = all.iter().position(|(n, _)| n == name) else {
                    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(user_error(
                        "42703",
                        format!(
                            "column \"{name}\" does not exist; {proc} answers with: {}",
                            names.join(", ")
                        ),
                    ));
                };
                cols.push((
                    alias.clone().unwrap_or_else(|| name.clone()),
                    all[i].1.clone(),
                ));
                from.push(i);
            }
        }
    }
    Ok((cols, Some(from)))
}

/// The type each placeholder stands for: the parameter it is passed as
/// (an element of an `ARRAY[…]` is an int8), or as a constant's
/// expression types it; text for one not used.
fn param_types(sh: &Shared, stmt: &Stmt, proc: Option<usize>) -> Vec<PgType> {
    let mut out = vec![PgType::TEXT; stmt.params()];
    if let Stmt::Select(cols) = stmt {
        for (_, c) in cols {
            if let Scalar::Param(p) = c {
                for (o, t) in out.iter_mut().zip(&p.params) {
                    *o = pg_type(*t);
                }
            }
        }
    }
    if let (Stmt::Call { args, .. }, Some(i)) = (stmt, proc) {
        for (arg, (_, t)) in args.iter().zip(sh.procs[i].params()) {
            match arg {
                Arg::Param(n) => out[n - 1] = pg_type(*t),
                Arg::Array(items) => {
                    for a in items {
                        if let Arg::Param(n) = a {
                            out[n - 1] = PgType::INT8;
                        }
                    }
                }
                Arg::Lit(_) | Arg::Text(_) => {}
            }
        }
    }
    out
}

/// Resolves a parsed statement: the procedure of a call must exist and
/// take as many arguments as given.
fn prepare(sh: &Shared, stmt: Stmt) -> PgWireResult<Prepared> {
    let proc = match &stmt {
        Stmt::Tables(s) => {
            let plan = match tables::plan(s, &sh.catalog).map_err(sql_error)? {
                Some(plan) => plan,
                None => return Err(user_error("0A000", format!("not supported: {s}"))),
            };
            let params = plan.param_types().iter().map(|&t| pg_type(t)).collect();
            let cols: Vec<(String, PgType)> = plan
                .columns()
                .iter()
                .map(|(n, t)| (n.clone(), pg_type(*t)))
                .collect();
            let text_schema = Arc::new(fields(&cols, None)?);
            // The parsed statement, printed: what its home's process parses
            // and plans again when the statement is forwarded there.
            let sql = Some(Arc::from(s.to_string()));
            return Ok(Prepared {
                stmt,
                proc: None,
                table: Some(Arc::new(plan)),
                project: None,
                params,
                cols,
                text_schema,
                sql,
            });
        }
        Stmt::Catalog { sql, stmt: ast } => {
            // Known or refused when prepared; answered with its parameters
            // when run.
            let Some(rows) = pg_catalog::answer(sql, ast, &[], &sh.catalog).map_err(sql_error)?
            else {
                return Err(user_error("0A000", format!("not supported: {ast}")));
            };
            // The catalog queries answered with parameters take lists of
            // type oids (asyncpg's introspection: `$1::oid[]`); `oid[]` is
            // a type drivers decode without introspecting it.
            let params = vec![PgType::OID_ARRAY; placeholders(sql)];
            let text_schema = Arc::new(fields(&rows.columns, None)?);
            return Ok(Prepared {
                stmt,
                proc: None,
                table: None,
                project: None,
                params,
                cols: rows.columns,
                text_schema,
                sql: None,
            });
        }
        Stmt::Call { proc, args, .. } => {
            let Some(i) = sh.lookup(proc) else {
                let names: Vec<&str> = sh.procs.iter().map(|p| p.name()).collect();
                return Err(user_error(
                    "42883",
                    format!(
                        "no procedure named {proc:?}; this server has: {} (SHOW procedures lists their parameters)",
                        names.join(", ")
                    ),
                ));
            };
            let def = &sh.procs[i];
            if def.params().len() != args.len() {
                return Err(user_error(
                    "42804",
                    format!(
                        "{} argument(s) given, {} takes {}",
                        args.len(),
                        sql_signature(def),
                        def.params().len()
                    ),
                ));
            }
            Some(i)
        }
        _ => None,
    };
    let params = param_types(sh, &stmt, proc);
    let (cols, project) = columns(sh, &stmt, proc)?;
    let text_schema = Arc::new(fields(&cols, None)?);
    Ok(Prepared {
        stmt,
        proc,
        table: None,
        project,
        params,
        cols,
        text_schema,
        sql: None,
    })
}

/// The highest `$n` in `sql` outside quotes and comments (0: none): the
/// parameters a catalog query takes.
fn placeholders(sql: &str) -> usize {
    let b = sql.as_bytes();
    let (mut i, mut max) = (0, 0);
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'$' => {
                let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
                if digits > 0 && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
                    let n = sql[i + 1..i + 1 + digits].parse::<usize>().unwrap_or(0);
                    max = max.max(n.min(usize::from(u16::MAX)));
                }
                i += digits;
            }
            _ => {}
        }
        i += 1;
    }
    max
}

/// A statement on tables with its parameters bound, as the engine runs it
/// (as a transaction of its own, or inside a block). `count` is what its
/// last run affected or returned, for the command tag (or what its copy
/// affected at its home, when it was forwarded).
struct TableStmt {
    plan: Arc<TablePlan>,
    params: Vec<Value>,
    count: std::sync::atomic::AtomicU64,
    /// Its SQL text, when it may be forwarded to another process.
    sql: Option<Arc<str>>,
}

impl Statement for TableStmt {
    fn run<'a>(
        &'a self,
        tx: &'a mut crate::txn::Txn,
        out: &'a mut Vec<Row>,
    ) -> crate::api::ProcFuture<'a> {
        Box::pin(async move {
            let n = self.plan.run(tx, &self.params, out).await?;
            self.count.store(n, Ordering::Relaxed);
            Ok(())
        })
    }

    fn name(&self) -> &str {
        self.plan.tag()
    }

    fn source(&self) -> Option<(&str, &[Value])> {
        Some((self.sql.as_deref()?, &self.params))
    }

    fn affected(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn set_affected(&self, n: u64) {
        self.count.store(n, Ordering::Relaxed);
    }
}

/// The server's [`crate::api::StatementCompiler`]: rebuilds a statement on
/// `catalog`'s tables that another process of the deployment forwarded
/// (its SQL text, as [`Prepared`] printed it, and its bound parameters).
/// The processes run the same catalog (their handshake compares it), so
/// the text plans here as it did there; what does not is refused with why.
pub(crate) fn statement_compiler(catalog: crate::api::Catalog) -> crate::api::StatementCompiler {
    Arc::new(move |text: &str, params: &[Value]| {
        let refuse = |why: String| CallError::BadArguments {
            procedure: "statement".into(),
            why: format!("a statement forwarded from another process: {why}"),
        };
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        let parsed = sqlparser::parser::Parser::new(&dialect)
            .with_recursion_limit(64)
            .try_with_sql(text)
            .and_then(|mut p| p.parse_statements())
            .map_err(|e| refuse(e.to_string()))?;
        let [one] = parsed.as_slice() else {
            return Err(refuse(format!("{} statements, not one", parsed.len())));
        };
        let plan = tables::plan(one, &catalog)
            .map_err(|e| refuse(format!("{} ({})", e.message, e.code)))?
            .ok_or_else(|| refuse("not a statement on a table".into()))?;
        if params.len() != plan.param_types().len() {
            return Err(refuse(format!(
                "{} parameter(s) given, it takes {}",
                params.len(),
                plan.param_types().len()
            )));
        }
        Ok(Arc::new(TableStmt {
            plan: Arc::new(plan),
            params: params.to_vec(),
            count: Default::default(),
            sql: None,
        }) as Arc<dyn Statement>)
    })
}

/// Decodes placeholder `i` (0-based) sent as `bytes` in `format`, of the
/// client's declared type or else `expected`.
fn decode_param(
    i: usize,
    bytes: Option<&Bytes>,
    binary: bool,
    declared: Option<&PgType>,
    expected: &PgType,
) -> PgWireResult<Value> {
    let Some(b) = bytes else {
        return Ok(Value::Null);
    };
    let n = i + 1;
    let bad_len = |t: &PgType| {
        user_error(
            "22P03",
            format!(
                "parameter ${n}: {} byte(s) is not a binary {}",
                b.len(),
                sql_name(t)
            ),
        )
    };
    if binary {
        let t = declared
            .filter(|t| **t != PgType::UNKNOWN)
            .unwrap_or(expected);
        let fixed = |len: usize| -> PgWireResult<&[u8]> {
            if b.len() == len {
                Ok(&b[..])
            } else {
                Err(bad_len(t))
            }
        };
        return Ok(match *t {
            PgType::INT8 => Value::Int(i64::from_be_bytes(fixed(8)?.try_into().expect("8"))),
            PgType::INT4 => Value::Int(i32::from_be_bytes(fixed(4)?.try_into().expect("4")).into()),
            PgType::INT2 => Value::Int(i16::from_be_bytes(fixed(2)?.try_into().expect("2")).into()),
            PgType::BOOL => Value::Int(i64::from(fixed(1)?[0] != 0)),
            PgType::FLOAT8 => Value::Float(f64::from_be_bytes(fixed(8)?.try_into().expect("8"))),
            PgType::FLOAT4 => {
                Value::Float(f32::from_be_bytes(fixed(4)?.try_into().expect("4")).into())
            }
            PgType::TEXT | PgType::VARCHAR | PgType::BPCHAR | PgType::NAME | PgType::UNKNOWN => {
                Value::Str(String::from_utf8(b.to_vec()).map_err(|_| {
                    user_error("22021", format!("parameter ${n} is not valid UTF-8"))
                })?)
            }
            PgType::INT8_ARRAY | PgType::INT4_ARRAY | PgType::INT2_ARRAY | PgType::OID_ARRAY => {
                Value::Ints(decode_int_array(b).map_err(|why| {
                    user_error("22P03", format!("parameter ${n}: binary int array: {why}"))
                })?)
            }
            ref t => {
                return Err(user_error(
                    "42804",
                    format!(
                        "parameter ${n} is sent as {}; this server takes int2/4/8, float4/8, bool, text and int2/4/8[]",
                        sql_name(t)
                    ),
                ))
            }
        });
    }
    let s = std::str::from_utf8(b)
        .map_err(|_| user_error("22021", format!("parameter ${n} is not valid UTF-8")))?;
    let t = match *expected {
        PgType::INT8 => Type::Int,
        PgType::FLOAT8 => Type::Float,
        PgType::INT8_ARRAY => Type::Ints,
        _ => return Ok(Value::Str(s.to_string())),
    };
    sql::coerce(s, t).map_err(|e| user_error(e.code, format!("parameter ${n}: {}", e.message)))
}

/// PostgreSQL's binary array: dimensions, a null flag, the element type,
/// per dimension its length and lower bound, then each element as a length
/// and its bytes. One dimension (or none: empty) of int2, int4, int8 or oid
/// (unsigned), no nulls.
fn decode_int_array(b: &[u8]) -> Result<Vec<i64>, String> {
    let word = |at: usize| -> Result<i32, String> {
        b.get(at..at + 4)
            .map(|w| i32::from_be_bytes(w.try_into().expect("4")))
            .ok_or_else(|| format!("truncated at byte {at} of {}", b.len()))
    };
    let ndim = word(0)?;
    let elem = word(8)? as u32;
    if ndim == 0 {
        return Ok(Vec::new());
    }
    if ndim != 1 {
        return Err(format!("{ndim} dimensions; one is supported"));
    }
    let width = match elem {
        20 => 8,
        23 | 26 => 4,
        21 => 2,
        o => {
            return Err(format!(
                "element type oid {o}; int2, int4, int8 or oid expected"
            ))
        }
    };
    let len = word(12)?;
    if len < 0 || len as usize > b.len() / 4 {
        return Err(format!("{len} elements do not fit in {} bytes", b.len()));
    }
    let mut at = 20;
    let mut out = Vec::with_capacity(len as usize);
    for _ in 0..len {
        let l = word(at)?;
        if l == -1 {
            return Err("a null element; keys are not nullable".into());
        }
        if l != width {
            return Err(format!("an element of {l} bytes, expected {width}"));
        }
        at += 4;
        let e = b.get(at..at + width as usize).ok_or("truncated element")?;
        out.push(match width {
            8 => i64::from_be_bytes(e.try_into().expect("8")),
            4 if elem == 26 => u32::from_be_bytes(e.try_into().expect("4")).into(),
            4 => i32::from_be_bytes(e.try_into().expect("4")).into(),
            _ => i16::from_be_bytes(e.try_into().expect("2")).into(),
        });
        at += width as usize;
    }
    if at != b.len() {
        return Err(format!("{} trailing byte(s)", b.len() - at));
    }
    Ok(out)
}

/// The arguments of a call: literals as written (an integer passed as a
/// float parameter becomes a float), placeholders from `params`. An
/// argument of another type than its parameter is refused here, in
/// PostgreSQL's type names (a null is left to the call to refuse).
fn bind_args(def: &ProcDef, args: &[Arg], mut params: Vec<Value>) -> PgWireResult<Vec<Value>> {
    // Each placeholder once and in order ($1, $2, …): the arguments are
    // the parameters themselves, checked in place.
    let in_order = args.len() == params.len()
        && args
            .iter()
            .enumerate()
            .all(|(i, a)| matches!(a, Arg::Param(n) if *n == i + 1));
    if in_order {
        for (i, (v, (name, t))) in params.iter_mut().zip(def.params()).enumerate() {
            *v = check_arg(def, i, name, *t, std::mem::replace(v, Value::Null))?;
        }
        return Ok(params);
    }
    let param = |n: usize| -> PgWireResult<Value> {
        params.get(n - 1).cloned().ok_or_else(|| {
            user_error(
                "08P01",
                format!(
                    "the statement uses ${n}, and {} parameter(s) were bound",
                    params.len()
                ),
            )
        })
    };
    args.iter()
        .zip(def.params())
        .enumerate()
        .map(|(i, (a, (name, t)))| {
            let v = match a {
                Arg::Lit(v) => v.clone(),
                // An untyped literal takes its parameter's type.
                Arg::Text(s) => sql::coerce(s, *t).map_err(|e| {
                    user_error(
                        e.code,
                        format!(
                            "argument {} ({name}) of {}: {}",
                            i + 1,
                            sql_signature(def),
                            e.message
                        ),
                    )
                })?,
                Arg::Param(n) => param(*n)?,
                Arg::Array(items) => {
                    let mut keys = Vec::with_capacity(items.len());
                    for it in items {
                        let v = match it {
                            Arg::Param(n) => param(*n)?,
                            Arg::Lit(v) => v.clone(),
                            Arg::Text(s) => sql::coerce(s, Type::Int).map_err(sql_error)?,
                            Arg::Array(_) => Value::Null,
                        };
                        match v {
                            Value::Int(k) => keys.push(k),
                            v => {
                                return Err(user_error(
                                    "42804",
                                    format!("an ARRAY element is {v}; elements are integers"),
                                ))
                            }
                        }
                    }
                    Value::Ints(keys)
                }
            };
            check_arg(def, i, name, *t, v)
        })
        .collect()
}

/// Argument `i` (0-based, parameter `name` of type `t`) of a call to
/// `def`: an integer for a float parameter becomes a float; another type
/// than the parameter's is refused.
fn check_arg(def: &ProcDef, i: usize, name: &str, t: Type, v: Value) -> PgWireResult<Value> {
    let v = match (v, t) {
        (Value::Int(i), Type::Float) => Value::Float(i as f64),
        (v, _) => v,
    };
    match v.type_of() {
        Some(vt) if vt != t => Err(user_error(
            "42804",
            format!(
                "argument {} ({name}) of {} is {} {v}; the parameter is {}",
                i + 1,
                sql_signature(def),
                sql_name(&pg_type(vt)),
                sql_name(&pg_type(t))
            ),
        )),
        _ => Ok(v),
    }
}

fn encode_row(enc: &mut DataRowEncoder, fields: &[FieldInfo], row: Row) -> PgWireResult<DataRow> {
    for (i, v) in row.into_iter().enumerate() {
        match v {
            Value::Null => enc.encode_field(&None::<i64>)?,
            Value::Int(i) => enc.encode_field(&i)?,
            Value::Float(f) => enc.encode_field(&f)?,
            // A text value in a column of another type (pg_catalog's
            // answers) is that type's text form: sent as it is in text, and
            // encoded as the type in binary.
            Value::Str(s) => match fields.get(i) {
                Some(f) if f.format() == FieldFormat::Binary && !is_text(f.datatype()) => {
                    encode_text_as(enc, f.datatype(), &s)?
                }
                _ => enc.encode_field(&s)?,
            },
            Value::Ints(v) => enc.encode_field(&v)?,
        }
    }
    Ok(enc.take_row())
}

fn is_text(t: &PgType) -> bool {
    matches!(
        *t,
        PgType::TEXT | PgType::VARCHAR | PgType::BPCHAR | PgType::NAME | PgType::UNKNOWN
    )
}

/// Encodes `s`, the text form of a value of type `t`, in `t`'s binary
/// format (an `oid` is four bytes, a `"char"` one).
fn encode_text_as(enc: &mut DataRowEncoder, t: &PgType, s: &str) -> PgWireResult<()> {
    let bad = || user_error("XX000", format!("internal error: {s:?} is not a {t}"));
    fn list<T: std::str::FromStr>(s: &str) -> Option<Vec<T>> {
        let inner = s.strip_prefix('{')?.strip_suffix('}')?;
        if inner.is_empty() {
            return Some(Vec::new());
        }
        inner
            .split(',')
            .map(|x| x.trim().trim_matches('"').parse().ok())
            .collect()
    }
    match *t {
        PgType::OID => enc.encode_field(&s.parse::<u32>().map_err(|_| bad())?),
        PgType::INT2 => enc.encode_field(&s.parse::<i16>().map_err(|_| bad())?),
        PgType::INT4 => enc.encode_field(&s.parse::<i32>().map_err(|_| bad())?),
        PgType::INT8 => enc.encode_field(&s.parse::<i64>().map_err(|_| bad())?),
        PgType::FLOAT8 => enc.encode_field(&s.parse::<f64>().map_err(|_| bad())?),
        PgType::BOOL => enc.encode_field(&matches!(s, "t" | "true" | "on" | "1")),
        PgType::CHAR => enc.encode_field(&(s.bytes().next().unwrap_or(0) as i8)),
        PgType::OID_ARRAY => enc.encode_field(&list::<u32>(s).ok_or_else(bad)?),
        PgType::INT2_ARRAY => enc.encode_field(&list::<i16>(s).ok_or_else(bad)?),
        PgType::INT4_ARRAY => enc.encode_field(&list::<i32>(s).ok_or_else(bad)?),
        PgType::INT8_ARRAY => enc.encode_field(&list::<i64>(s).ok_or_else(bad)?),
        PgType::TEXT_ARRAY | PgType::NAME_ARRAY | PgType::CHAR_ARRAY => {
            enc.encode_field(&list::<String>(s).ok_or_else(bad)?)
        }
        _ => enc.encode_field(&s),
    }
}

/// Rows encoded and fed to the client between two yields to the server
/// thread's other connections.
const ROWS_PER_CHUNK: usize = 256;

/// Encodes `rows` in `schema` and feeds them to `client` one at a time,
/// yielding after every [`ROWS_PER_CHUNK`]: a result of any size holds the
/// server thread for one chunk at a time, and what waits to be written is
/// bounded by the connection's write buffer, not the result. Returns the
/// rows sent.
async fn send_rows<C>(
    client: &mut C,
    schema: Arc<Vec<FieldInfo>>,
    rows: Vec<Row>,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let n = rows.len();
    let mut enc = DataRowEncoder::new(Arc::clone(&schema));
    for (i, row) in rows.into_iter().enumerate() {
        if i > 0 && i % ROWS_PER_CHUNK == 0 {
            tokio::task::yield_now().await;
        }
        let data = encode_row(&mut enc, &schema, row)?;
        client.feed(PgWireBackendMessage::DataRow(data)).await?;
    }
    Ok(n)
}

/// The schema of `p`'s rows in `format`: its text schema, shared, when
/// every column is asked for in text as one format code (or none); built
/// for any other list of format codes.
fn schema(p: &Prepared, format: Option<&Format>) -> PgWireResult<Arc<Vec<FieldInfo>>> {
    match format {
        None | Some(Format::UnifiedText) => Ok(Arc::clone(&p.text_schema)),
        Some(f) => Ok(Arc::new(fields(&p.cols, Some(f))?)),
    }
}

/// The rows as a [`Response`] whose stream encodes each row as it is
/// fetched (a portal suspended at `max_rows` holds them unencoded).
fn rows_response(schema: Arc<Vec<FieldInfo>>, tag: &str, rows: Vec<Row>) -> PgWireResult<Response> {
    let mut enc = DataRowEncoder::new(Arc::clone(&schema));
    let fields = Arc::clone(&schema);
    let data = stream::iter(rows).map(move |row| encode_row(&mut enc, &fields, row));
    let mut r = QueryResponse::new(schema, data);
    r.set_command_tag(tag);
    Ok(Response::Query(r))
}

/// What a statement answers: a command tag alone, or rows (in `schema`)
/// and then a command tag with their count. `reports` are the settings it
/// changed that the client is told of (ParameterStatus, before the tag).
enum Answer {
    Done(Cow<'static, str>, Vec<Report>),
    Rows {
        schema: Arc<Vec<FieldInfo>>,
        tag: &'static str,
        rows: Vec<Row>,
        reports: Vec<Report>,
    },
}

impl Answer {
    fn done(tag: &'static str) -> Answer {
        Answer::Done(Cow::Borrowed(tag), Vec::new())
    }

    fn into_response(self) -> PgWireResult<Response> {
        match self {
            Answer::Done(tag, _) => Ok(Response::Execution(Tag::new(&tag))),
            Answer::Rows {
                schema, tag, rows, ..
            } => rows_response(schema, tag, rows),
        }
    }
}

/// Sends ParameterStatus for each setting `reports` names.
async fn send_reports<C>(client: &mut C, reports: Vec<Report>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for (name, value) in reports {
        client
            .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                name, value,
            )))
            .await?;
    }
    Ok(())
}

/// A connection's handler.
pub(crate) struct Handler {
    pub(crate) shared: Arc<Shared>,
    /// The server thread serving the connection.
    pub(crate) thread: usize,
    /// Set by a cancel request with the connection's key, or by the
    /// statement timeout: cancels the statement in flight and every later
    /// one of its query string or pipeline (cleared as the next begins).
    pub(crate) cancel: CancelFlag,
    /// The connection's settings and transaction status. Locked only
    /// between awaits.
    session: Mutex<Session>,
    /// An extended-protocol pipeline is open: an Execute came since the
    /// last Sync.
    in_pipeline: AtomicBool,
    /// The open transaction block, while the session's status is `Open`
    /// (taken out while one of its statements runs). Locked after
    /// `session` when both are, and only between awaits.
    block: Mutex<Option<Block>>,
    /// The procedures (indexes) of the calls the open block ran: counted
    /// in `SHOW stats` when the block ends, as it ends.
    block_calls: Mutex<Vec<usize>>,
    /// Warnings for the client, sent before the next command tag (or
    /// ReadyForQuery).
    notices: Mutex<Vec<ErrorInfo>>,
}

/// How a transaction block ended, for the counts of its calls.
#[derive(Clone, Copy)]
enum BlockEnd<'a> {
    Committed,
    RolledBack,
    Failed(&'a CallError),
}

/// `25P02`: the block failed; only its end is taken.
fn aborted() -> PgWireError {
    user_error(
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

/// Why the cancel flag was set, for the message of `57014`.
fn canceled(timed_out: bool) -> PgWireError {
    if timed_out {
        user_error("57014", "canceling statement due to statement timeout")
    } else {
        user_error("57014", "canceling statement due to user request")
    }
}

impl Handler {
    pub(crate) fn new(shared: Arc<Shared>, thread: usize) -> Handler {
        Handler {
            shared,
            thread,
            cancel: CancelFlag::new(),
            session: Mutex::new(Session::default()),
            in_pipeline: AtomicBool::new(false),
            block: Mutex::new(None),
            block_calls: Mutex::new(Vec::new()),
            notices: Mutex::new(Vec::new()),
        }
    }

    /// A WARNING for the client (NoticeResponse), sent before the command
    /// tag of the statement that raised it.
    fn warn(&self, code: &str, message: &str) {
        self.notices.lock().push(ErrorInfo::new(
            "WARNING".to_owned(),
            code.to_owned(),
            message.to_owned(),
        ));
    }

    /// Sends the warnings raised so far.
    async fn send_notices<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let notices = std::mem::take(&mut *self.notices.lock());
        for n in notices {
            client
                .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
                    n,
                )))
                .await?;
        }
        Ok(())
    }

    /// The block's statements go to the block: taken out of the handler
    /// while one runs (`None` outside a block).
    fn take_block(&self) -> PgWireResult<Option<Block>> {
        let s = self.session.lock();
        if s.block == BlockStatus::Idle {
            return Ok(None);
        }
        match self.block.lock().take() {
            Some(b) => Ok(Some(b)),
            None => Err(user_error(
                "XX000",
                "internal error: the connection's transaction block is missing",
            )),
        }
    }

    /// Puts a block back after its statement ran.
    fn put_block(&self, b: Block) {
        *self.block.lock() = Some(b);
    }

    /// Counts the calls the block ran, now that it ended: as committed
    /// when it committed, as rolled back when it rolled back, and as its
    /// commit failed when that failed.
    fn count_block_calls(&self, ended: BlockEnd<'_>) {
        let sh = &self.shared;
        for i in self.block_calls.lock().drain(..) {
            let c = &sh.counters[self.thread * sh.procs.len() + i];
            match ended {
                BlockEnd::Committed => &c.committed,
                BlockEnd::RolledBack => &c.rollbacks,
                BlockEnd::Failed(CallError::Serialization { .. }) => &c.serialization,
                BlockEnd::Failed(CallError::Rollback { .. } | CallError::Canceled { .. }) => {
                    &c.rollbacks
                }
                BlockEnd::Failed(_) => &c.errors,
            }
            .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An error inside an open block: the block is rolled back at once
    /// (its locks released) and the status becomes `E`. Nothing outside a
    /// block, or in one already failed.
    pub(crate) async fn fail_block(&self) {
        let block = {
            let mut s = self.session.lock();
            if s.block != BlockStatus::Open {
                return;
            }
            s.block = BlockStatus::Failed;
            self.block.lock().take()
        };
        self.count_block_calls(BlockEnd::RolledBack);
        if let Some(b) = block {
            let _ = b.rollback().await;
        }
    }

    /// Leaves the block (status `I`): its `SET LOCAL` values and its
    /// portals end with it. Returns the block (if one still runs) and the
    /// settings to report.
    fn leave_block<S: PortalStore>(&self, store: &S) -> (Option<Block>, Vec<Report>) {
        let mut s = self.session.lock();
        s.block = BlockStatus::Idle;
        let ended = s.end_transaction();
        store.clear_portals();
        (self.block.lock().take(), ended)
    }

    /// Rolls back the block of a connection that is closing (the idle in
    /// transaction timeout); the status becomes `I`.
    pub(crate) async fn end_block(&self) {
        let block = {
            let mut s = self.session.lock();
            s.block = BlockStatus::Idle;
            s.end_transaction();
            self.block.lock().take()
        };
        self.count_block_calls(BlockEnd::RolledBack);
        if let Some(b) = block {
            let _ = b.rollback().await;
        }
    }

    /// How long the connection may wait for its client while in a block
    /// (`T` or `E`): the session's `idle_in_transaction_session_timeout`
    /// or else `server`. `None` outside a block.
    pub(crate) fn idle_in_block_timeout(&self, server: Option<Duration>) -> Option<Duration> {
        let s = self.session.lock();
        if s.block == BlockStatus::Idle {
            return None;
        }
        s.idle_in_transaction_timeout(server)
    }

    /// `BEGIN`, `COMMIT`, `ROLLBACK`, with PostgreSQL's answers: `BEGIN`
    /// in a block and an ending outside one are warnings; `COMMIT` of a
    /// failed block rolls it back and answers `ROLLBACK`.
    async fn block_control<S: PortalStore>(&self, stmt: &Stmt, store: &S) -> PgWireResult<Answer> {
        let status = self.session.lock().block;
        match (stmt, status) {
            (Stmt::Begin, BlockStatus::Idle) => {
                let b = self.shared.client.begin();
                let mut s = self.session.lock();
                s.block = BlockStatus::Open;
                *self.block.lock() = Some(b);
                Ok(Answer::done("BEGIN"))
            }
            (Stmt::Begin, BlockStatus::Open) => {
                self.warn("25001", "there is already a transaction in progress");
                Ok(Answer::done("BEGIN"))
            }
            (Stmt::Commit | Stmt::Rollback, BlockStatus::Idle) => {
                self.warn("25P01", "there is no transaction in progress");
                let ended = self.session.lock().end_transaction();
                let tag = if matches!(stmt, Stmt::Commit) {
                    "COMMIT"
                } else {
                    "ROLLBACK"
                };
                Ok(Answer::Done(Cow::Borrowed(tag), ended))
            }
            (Stmt::Commit, BlockStatus::Open) => {
                let (b, ended) = self.leave_block(store);
                if let Some(b) = b {
                    if let Err(e) = b.commit().await {
                        self.count_block_calls(BlockEnd::Failed(&e));
                        return Err(call_error(e));
                    }
                }
                self.count_block_calls(BlockEnd::Committed);
                Ok(Answer::Done(Cow::Borrowed("COMMIT"), ended))
            }
            (Stmt::Commit | Stmt::Rollback, _) => {
                let (b, ended) = self.leave_block(store);
                self.count_block_calls(BlockEnd::RolledBack);
                if let Some(b) = b {
                    b.rollback().await.map_err(call_error)?;
                }
                Ok(Answer::Done(Cow::Borrowed("ROLLBACK"), ended))
            }
            _ => Err(aborted()),
        }
    }

    /// Takes the client's startup settings into the session (once).
    fn start_session<C: ClientInfo>(&self, client: &C) {
        let mut s = self.session.lock();
        s.start(client.metadata());
    }

    /// Sends ReadyForQuery with the session's transaction status: the one
    /// place the status byte is decided (pgwire's own ReadyForQuery after
    /// an error reads the same status, kept in the client).
    async fn ready<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.send_notices(client).await?;
        let status = self.session.lock().status();
        client.set_transaction_status(status);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    /// Runs one statement; `params` are its decoded placeholders.
    async fn run<S: PortalStore>(
        &self,
        p: &Prepared,
        params: Vec<Value>,
        format: Option<&Format>,
        store: &S,
        pid: i32,
    ) -> PgWireResult<Response> {
        self.answer(p, params, format, store, pid)
            .await?
            .into_response()
    }

    /// Runs one statement: [`Handler::run`]'s answer before it becomes a
    /// [`Response`]. `store` holds the connection's prepared statements
    /// and portals (`DEALLOCATE`, `CLOSE`); `pid` is its process id.
    async fn answer<S: PortalStore>(
        &self,
        p: &Prepared,
        params: Vec<Value>,
        format: Option<&Format>,
        store: &S,
        pid: i32,
    ) -> PgWireResult<Answer> {
        // A cancel that landed earlier in this query string or pipeline
        // (or a statement timeout) stops the statements after it.
        if self.cancel.is_canceled() {
            self.fail_block().await;
            return Err(canceled(false));
        }
        if matches!(p.stmt, Stmt::Begin | Stmt::Commit | Stmt::Rollback) {
            return self.block_control(&p.stmt, store).await;
        }
        let status = self.session.lock().block;
        if status == BlockStatus::Failed {
            return Err(aborted());
        }
        let answer = self.answer_now(p, params, format, store, pid).await;
        let ended = if status == BlockStatus::Idle {
            // Each statement is its own transaction: SET LOCAL ends with it.
            self.session.lock().end_transaction()
        } else {
            if answer.is_err() {
                self.fail_block().await;
            }
            Vec::new()
        };
        match answer {
            Ok(Answer::Done(tag, mut reports)) => {
                reports.extend(ended);
                Ok(Answer::Done(tag, reports))
            }
            Ok(Answer::Rows {
                schema,
                tag,
                rows,
                mut reports,
            }) => {
                reports.extend(ended);
                Ok(Answer::Rows {
                    schema,
                    tag,
                    rows,
                    reports,
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn answer_now<S: PortalStore>(
        &self,
        p: &Prepared,
        params: Vec<Value>,
        format: Option<&Format>,
        store: &S,
        pid: i32,
    ) -> PgWireResult<Answer> {
        let sh = &*self.shared;
        let rows = |rows: Vec<Row>, tag: &'static str, reports: Vec<Report>| {
            Ok(Answer::Rows {
                schema: schema(p, format)?,
                tag,
                rows,
                reports,
            })
        };
        match &p.stmt {
            Stmt::NoOp(tag) => Ok(Answer::done(tag)),
            Stmt::Begin | Stmt::Commit | Stmt::Rollback => self.block_control(&p.stmt, store).await,
            Stmt::Show(s) => rows(self.show(*s), "SHOW", Vec::new()),
            Stmt::ShowSetting(Some(name)) => {
                let v = self.session.lock().show(name).map_err(sql_error)?;
                rows(vec![vec![Value::Str(v)]], "SHOW", Vec::new())
            }
            Stmt::ShowSetting(None) => {
                let all = self.session.lock().all();
                let all = all
                    .into_iter()
                    .map(|(n, v, d)| vec![Value::Str(n), Value::Str(v), Value::Str(d)])
                    .collect();
                rows(all, "SHOW", Vec::new())
            }
            Stmt::Set { name, value, local } => {
                let r = self
                    .session
                    .lock()
                    .set(name, value.as_deref(), *local)
                    .map_err(sql_error)?;
                Ok(Answer::Done(Cow::Borrowed("SET"), r.into_iter().collect()))
            }
            Stmt::Reset(Some(name)) => {
                let r = self.session.lock().reset(name).map_err(sql_error)?;
                Ok(Answer::Done(
                    Cow::Borrowed("RESET"),
                    r.into_iter().collect(),
                ))
            }
            Stmt::Reset(None) => Ok(Answer::Done(
                Cow::Borrowed("RESET"),
                self.session.lock().reset_all(),
            )),
            Stmt::DiscardAll => {
                // As PostgreSQL's: CLOSE ALL, RESET ALL, DEALLOCATE ALL
                // (locks and listens: there are none).
                store.clear_portals();
                let mut s = self.session.lock();
                for name in std::mem::take(&mut s.prepared) {
                    store.rm_statement(&name);
                }
                Ok(Answer::Done(Cow::Borrowed("DISCARD ALL"), s.reset_all()))
            }
            Stmt::Deallocate(None) => {
                for name in std::mem::take(&mut self.session.lock().prepared) {
                    store.rm_statement(&name);
                }
                Ok(Answer::done("DEALLOCATE ALL"))
            }
            Stmt::Deallocate(Some(name)) => {
                if store.get_statement(name).is_none() {
                    return Err(user_error(
                        "26000",
                        format!("prepared statement \"{name}\" does not exist"),
                    ));
                }
                store.rm_statement(name);
                self.session.lock().prepared.remove(name);
                Ok(Answer::done("DEALLOCATE"))
            }
            Stmt::Close(None) => {
                store.clear_portals();
                Ok(Answer::done("CLOSE CURSOR ALL"))
            }
            Stmt::Close(Some(name)) => {
                if store.get_portal(name).is_none() {
                    return Err(user_error(
                        "34000",
                        format!("cursor \"{name}\" does not exist"),
                    ));
                }
                store.rm_portal(name);
                Ok(Answer::done("CLOSE CURSOR"))
            }
            Stmt::Select(cols) => {
                let mut reports = Vec::new();
                let mut row = Vec::with_capacity(cols.len());
                for (_, s) in cols {
                    row.push(self.scalar(s, &params, pid, &mut reports)?);
                }
                rows(vec![row], "SELECT", reports)
            }
            Stmt::Catalog { sql, stmt } => {
                let Some(found) =
                    pg_catalog::answer(sql, stmt, &params, &sh.catalog).map_err(sql_error)?
                else {
                    return Err(user_error("0A000", format!("not supported: {stmt}")));
                };
                let out = found
                    .rows
                    .into_iter()
                    .map(|r| {
                        r.into_iter()
                            .map(|v| v.map_or(Value::Null, Value::Str))
                            .collect()
                    })
                    .collect();
                rows(out, "SELECT", Vec::new())
            }
            Stmt::Tables(_) => {
                let plan = p
                    .table
                    .as_ref()
                    .expect("a prepared table statement has its plan");
                let home = plan
                    .home_key(&params)
                    .and_then(|(t, k)| sh.client.island_of(t, k));
                let stmt = Arc::new(TableStmt {
                    plan: Arc::clone(plan),
                    params,
                    count: Default::default(),
                    sql: p.sql.clone(),
                });
                let dyn_stmt = Arc::clone(&stmt) as Arc<dyn Statement>;
                let out = match self.take_block()? {
                    Some(mut b) => {
                        let r = self.timed(b.run(dyn_stmt, home, Some(&self.cancel))).await;
                        self.put_block(b);
                        r?
                    }
                    None => {
                        let run = sh.client.run_async(dyn_stmt, home, Some(&self.cancel));
                        self.timed(run).await?
                    }
                };
                let n = stmt.count.load(Ordering::Relaxed);
                match plan.tag() {
                    "SELECT" => rows(out, "SELECT", Vec::new()),
                    tag => Ok(Answer::Done(Cow::Owned(format!("{tag} {n}")), Vec::new())),
                }
            }
            Stmt::Call { proc, args, .. } => {
                let i = p.proc.expect("a prepared call has its procedure");
                let def = &sh.procs[i];
                let values = bind_args(def, args, params)?;
                let counters = &sh.counters[self.thread * sh.procs.len() + i];
                let (r, timed_out, in_block) = match self.take_block()? {
                    Some(mut b) => {
                        let call = b.call(proc, values, Some(&self.cancel));
                        let (r, timed_out) = self.under_timeout(call).await;
                        self.put_block(b);
                        (r, timed_out, true)
                    }
                    None => {
                        let call = sh.client.call_async_cancelable(proc, values, &self.cancel);
                        let (r, timed_out) = self.under_timeout(call).await;
                        (r, timed_out, false)
                    }
                };
                let rows_out = match r {
                    // A call inside a block is counted as the block ends.
                    Ok(rows) if in_block => {
                        self.block_calls.lock().push(i);
                        rows
                    }
                    Ok(rows) => {
                        counters.committed.fetch_add(1, Ordering::Relaxed);
                        rows
                    }
                    Err(e) => {
                        match &e {
                            CallError::Serialization { .. } => &counters.serialization,
                            CallError::Rollback { .. } => &counters.rollbacks,
                            _ => &counters.errors,
                        }
                        .fetch_add(1, Ordering::Relaxed);
                        if let CallError::Canceled { .. } = e {
                            if timed_out {
                                return Err(canceled(true));
                            }
                        }
                        return Err(call_error(e));
                    }
                };
                if def.columns().is_empty() {
                    return Ok(Answer::done("CALL"));
                }
                let rows_out = match &p.project {
                    None => rows_out,
                    Some(from) => rows_out
                        .into_iter()
                        .map(|r| from.iter().map(|&i| r[i].clone()).collect())
                        .collect(),
                };
                rows(rows_out, "CALL", Vec::new())
            }
        }
    }

    /// Awaits a call or a statement under the session's
    /// `statement_timeout`: past it, the call is canceled as a cancel
    /// request cancels it (it rolls back unless it already committed).
    /// Returns its answer and whether the timeout fired.
    async fn under_timeout<F>(&self, call: F) -> (Result<Vec<Row>, CallError>, bool)
    where
        F: std::future::Future<Output = Result<Vec<Row>, CallError>>,
    {
        let timeout = self.session.lock().statement_timeout();
        match timeout {
            None => (call.await, false),
            Some(t) => {
                tokio::pin!(call);
                tokio::select! {
                    r = &mut call => (r, false),
                    _ = tokio::time::sleep(t) => {
                        self.cancel.cancel();
                        (call.await, true)
                    }
                }
            }
        }
    }

    /// [`Handler::under_timeout`], its error as the client sees it.
    async fn timed<F>(&self, call: F) -> PgWireResult<Vec<Row>>
    where
        F: std::future::Future<Output = Result<Vec<Row>, CallError>>,
    {
        match self.under_timeout(call).await {
            (Ok(rows), _) => Ok(rows),
            (Err(CallError::Canceled { .. }), true) => Err(canceled(true)),
            (Err(e), _) => Err(call_error(e)),
        }
    }

    /// One column of a constant `SELECT`.
    fn scalar(
        &self,
        s: &Scalar,
        params: &[Value],
        pid: i32,
        reports: &mut Vec<Report>,
    ) -> PgWireResult<Value> {
        let str = |s: String| Ok(Value::Str(s));
        match s {
            Scalar::Value(v) => Ok(v.clone()),
            Scalar::Param(p) => p.eval(params).map_err(sql_error),
            Scalar::Func(f) => match f {
                Func::Version => str(session::version()),
                Func::CurrentSetting(name) => {
                    str(self.session.lock().show(name).map_err(sql_error)?)
                }
                Func::SetConfig { name, value, local } => {
                    let mut s = self.session.lock();
                    reports.extend(s.set(name, Some(value), *local).map_err(sql_error)?);
                    str(s.show(name).map_err(sql_error)?)
                }
                // This server takes no advisory locks: none to release.
                Func::AdvisoryUnlockAll => str(String::new()),
                Func::CurrentDatabase => str(self.session.lock().database()),
                Func::CurrentSchema => str("public".into()),
                Func::CurrentUser => str(self.session.lock().user()),
                Func::BackendPid => Ok(Value::Int(pid.into())),
            },
        }
    }

    fn show(&self, s: Show) -> Vec<Row> {
        let sh = &*self.shared;
        let str = |s: String| Value::Str(s);
        match s {
            Show::Procedures => sh
                .procs
                .iter()
                .map(|p| {
                    let home = match p.home() {
                        Home::Any => "any island".to_string(),
                        Home::Key { param, .. } => {
                            format!("the island of {}", p.params()[param].0)
                        }
                    };
                    vec![
                        str(p.name().to_string()),
                        str(sql_params(p.params())),
                        str(sql_params(p.columns())),
                        str(home),
                    ]
                })
                .collect(),
            Show::Islands => {
                let states = sh.view.states();
                sh.plan
                    .islands()
                    .iter()
                    .map(|ip| {
                        let st = states.iter().find(|s| s.island == ip.id);
                        let int = |v: Option<u64>| {
                            v.map_or(Value::Null, |v| {
                                Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
                            })
                        };
                        let cpus = if ip.worker_cpus.is_empty() {
                            "not pinned".to_string()
                        } else {
                            let v: Vec<String> =
                                ip.worker_cpus.iter().map(|c| c.to_string()).collect();
                            v.join(",")
                        };
                        vec![
                            Value::Int(i64::from(ip.id)),
                            str(cpus),
                            Value::Int(ip.cores as i64),
                            Value::Int(ip.workers as i64),
                            str(format!("{}..{}", ip.sites.start, ip.sites.end)),
                            ip.numa_node.map_or(Value::Null, |n| Value::Int(n as i64)),
                            str(ip.durability.clone()),
                            str(ip.log_dir.display().to_string()),
                            int(st.and_then(|s| s.incarnation)),
                            str(if st.is_some_and(|s| s.local) {
                                "this"
                            } else {
                                "other"
                            }
                            .into()),
                            str(if st.is_some_and(|s| s.up) {
                                "up"
                            } else {
                                "down"
                            }
                            .into()),
                            int(st.and_then(|s| s.last_heard_ms)),
                        ]
                    })
                    .collect()
            }
            Show::Peers => sh
                .view
                .peers()
                .into_iter()
                .map(|p| {
                    let n = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
                    let state = match p.state {
                        PeerState::Connecting => "connecting",
                        PeerState::Up => "up",
                        PeerState::Down => "down",
                        PeerState::Broken => "broken",
                    };
                    vec![
                        Value::Int(i64::from(p.island)),
                        str(state.into()),
                        n(p.bytes_in),
                        n(p.bytes_out),
                        n(p.batches_in),
                        n(p.batches_out),
                        n(p.dropped),
                        n(p.dropped_unlinked),
                        n(p.dropped_stale),
                        n(p.parked),
                        n(p.reconnects),
                        n(p.refusals),
                        n(p.goodbyes),
                        p.last_heard
                            .map_or(Value::Null, |t| n(t.elapsed().as_millis() as u64)),
                        n(p.incarnation),
                        p.error.map_or(Value::Null, str),
                    ]
                })
                .collect(),
            Show::Stats => Figures::read(sh)
                .rows()
                .into_iter()
                .map(|(scope, counter, v)| vec![str(scope), str(counter), Value::Int(v as i64)])
                .collect(),
            Show::Threads => sh
                .threads
                .snapshot()
                .into_iter()
                .map(|t| {
                    let secs = |d: Option<std::time::Duration>| {
                        d.map_or(Value::Null, |d| Value::Float(d.as_secs_f64()))
                    };
                    vec![
                        str(t.name.clone()),
                        str(t.role.name().to_string()),
                        t.island.map_or(Value::Null, |i| Value::Int(i.into())),
                        Value::Int(t.tid.into()),
                        t.cpus.as_ref().map_or(Value::Null, |c| str(c.to_string())),
                        t.last_cpu.map_or(Value::Null, |c| Value::Int(c.into())),
                        secs(t.user),
                        secs(t.system),
                        t.utilisation()
                            .map_or(Value::Null, |u| Value::Float((u * 1000.0).round() / 10.0)),
                        Value::Float(t.alive_for.as_millis() as f64 / 1000.0),
                    ]
                })
                .collect(),
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for Handler {
    /// Runs a query string's statements one after another, each answered
    /// (its rows encoded and written out) before the next runs, so what a
    /// query holds at once is one statement's answer, however many
    /// statements it has ([`sql::MAX_STATEMENTS`] at most). Like
    /// PostgreSQL, the statements after a failed one do not run; a syntax
    /// error anywhere runs none, and so does a placeholder (`42P02`: a
    /// simple query has no parameters). A cancel stops the rest.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        // A new query string: a cancel that came before it cancels nothing.
        self.cancel.clear();
        self.start_session(client);
        client.set_state(PgWireConnectionState::QueryInProgress);
        // A syntax error anywhere runs none of the string; a statement
        // refused (unsupported, `$n`) fails where it stands, once the
        // statements PostgreSQL would keep before it have run.
        let parsed = sql::parse_each(&query.query).map_err(sql_error);
        let (stmts, failed) = match parsed {
            Ok(v) => (v, false),
            Err(PgWireError::UserError(info)) => {
                self.fail_block().await;
                client
                    .feed(PgWireBackendMessage::ErrorResponse((*info).into()))
                    .await?;
                (Vec::new(), true)
            }
            Err(e) => return Err(e),
        };
        let stmts: Vec<Result<Stmt, SqlError>> = stmts
            .into_iter()
            .map(|s| match s {
                Ok(s) if s.params() > 0 => Err(SqlError::new(
                    "42P02",
                    format!(
                        "there is no parameter ${}: a simple query has no parameters",
                        s.params()
                    ),
                )),
                s => s,
            })
            .collect();
        if stmts.is_empty() && !failed {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        let in_block = self.session.lock().block != BlockStatus::Idle;
        let runs = sql::runs_before_refusal(&stmts, in_block);
        let (pid, _) = client.pid_and_secret_key();
        for (stmt, run) in stmts.into_iter().zip(runs) {
            if !run {
                continue;
            }
            let answer = match stmt
                .map_err(sql_error)
                .and_then(|s| prepare(&self.shared, s))
            {
                Ok(p) => {
                    self.answer(&p, Vec::new(), None, client.portal_store(), pid)
                        .await
                }
                Err(e) => Err(e),
            };
            self.send_notices(client).await?;
            match answer {
                Ok(Answer::Done(tag, reports)) => {
                    send_reports(client, reports).await?;
                    let done = CommandComplete::new(tag.into_owned());
                    client
                        .feed(PgWireBackendMessage::CommandComplete(done))
                        .await?;
                }
                Ok(Answer::Rows {
                    schema,
                    tag,
                    rows,
                    reports,
                }) => {
                    let fields = schema.iter().map(FieldDescription::from).collect();
                    client
                        .feed(PgWireBackendMessage::RowDescription(RowDescription::new(
                            fields,
                        )))
                        .await?;
                    let n = send_rows(client, schema, rows).await?;
                    send_reports(client, reports).await?;
                    let done = CommandComplete::new(format!("{tag} {n}"));
                    client
                        .feed(PgWireBackendMessage::CommandComplete(done))
                        .await?;
                }
                // A fatal error closes the connection: it goes alone.
                Err(e) if e.is_fatal() => return Err(e),
                Err(PgWireError::UserError(info)) => {
                    self.fail_block().await;
                    client
                        .feed(PgWireBackendMessage::ErrorResponse((*info).into()))
                        .await?;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        self.ready(client).await
    }

    /// Not called: [`Handler::on_query`] answers each statement as it
    /// runs instead of collecting [`Response`]s.
    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Err(user_error(
            "XX000",
            "internal error: simple queries are answered by on_query",
        ))
    }
}

/// Parses statements for the extended protocol.
pub(crate) struct Parser {
    pub(crate) shared: Arc<Shared>,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Arc<Prepared>;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<PgType>],
    ) -> PgWireResult<Option<Arc<Prepared>>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        match sql::parse_one(sql).map_err(|e| user_error(e.code, e.message))? {
            None => Ok(None),
            Some(stmt) => Ok(Some(Arc::new(prepare(&self.shared, stmt)?))),
        }
    }

    fn get_parameter_types(&self, stmt: &Arc<Prepared>) -> PgWireResult<Vec<PgType>> {
        Ok(stmt.params.clone())
    }

    fn get_result_schema(
        &self,
        stmt: &Arc<Prepared>,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        fields(&stmt.cols, column_format)
    }
}

/// The extended protocol's handler: a [`Handler`] and its parser.
pub(crate) struct Extended {
    pub(crate) handler: Arc<Handler>,
    pub(crate) parser: Arc<Parser>,
}

#[async_trait]
impl ExtendedQueryHandler for Extended {
    type Statement = Arc<Prepared>;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::clone(&self.parser)
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Arc<Prepared>>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let params = bind_params(portal)?;
        let (pid, _) = _client.pid_and_secret_key();
        self.handler
            .run(
                &portal.statement.statement,
                params,
                Some(&portal.result_column_format),
                _client.portal_store(),
                pid,
            )
            .await
    }

    /// Executes a portal as pgwire's default does, without building the
    /// [`Response`] and the portal's row stream when the answer fits: a
    /// command tag, or rows fewer than `max_rows` (or any number when it
    /// is 0), go out at once. Rows to suspend at `max_rows` start the
    /// portal and take the default path, which fetches them; so does a
    /// client not ready, or a portal that is missing or empty.
    ///
    /// A portal's statement runs once: the portal is marked finished
    /// before its call is sent, so a second Execute never calls again. As
    /// in PostgreSQL, executing a finished portal whose statement returns
    /// rows answers no more rows and its tag with a count of 0; one whose
    /// statement returns none (a call without result columns, `BEGIN`) is
    /// refused with `55000`. The default's cancel receiver is not polled:
    /// this server registers no connection manager, so it never has one (a
    /// cancel request sets [`Handler::cancel`]).
    ///
    /// An error inside a block fails the block ([`Handler::fail_block`]).
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let r = self.execute(client, message).await;
        if r.is_err() {
            self.handler.fail_block().await;
        }
        r
    }

    /// Parses as pgwire's default does, and keeps the statement's name in
    /// the session (for `DEALLOCATE ALL` and `DISCARD ALL`). A statement
    /// that does not parse inside a block fails the block.
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let r = self.parse(client, message).await;
        if r.is_err() {
            self.handler.fail_block().await;
        }
        r
    }

    /// Ends the pipeline: the unnamed portal goes, and ReadyForQuery is
    /// sent with the session's status ([`Handler::ready`]).
    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(DEFAULT_NAME);
        self.handler.in_pipeline.store(false, Ordering::Relaxed);
        self.handler.ready(client).await?;
        client.flush().await?;
        Ok(())
    }

    /// Describes a portal whose columns are all in text format from its
    /// statement's text schema (what pgwire's default would build from
    /// [`Parser::get_result_schema`]); anything else as the default does.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_PORTAL {
            let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
            if let Some(Entry::Value(portal)) = client.portal_store().get_portal(name) {
                if matches!(portal.result_column_format, Format::UnifiedText) {
                    let schema = &portal.statement.statement.text_schema;
                    let msg = if schema.is_empty() {
                        PgWireBackendMessage::NoData(NoData::new())
                    } else {
                        let fields = schema.iter().map(FieldDescription::from).collect();
                        PgWireBackendMessage::RowDescription(RowDescription::new(fields))
                    };
                    client.send(msg).await?;
                    return Ok(());
                }
            }
        }
        self._on_describe(client, message).await
    }
}

impl Extended {
    /// [`ExtendedQueryHandler::on_execute`]'s work.
    async fn execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // The first Execute of a pipeline: a cancel that came before it
        // cancels nothing.
        if !self.handler.in_pipeline.swap(true, Ordering::Relaxed) {
            self.handler.cancel.clear();
        }
        self.handler.start_session(client);
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return self._on_execute(client, message).await;
        }
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let Some(Entry::Value(portal)) = client.portal_store().get_portal(name) else {
            return self._on_execute(client, message).await;
        };
        {
            let mut state = portal.state.lock().await;
            match &*state {
                PortalExecutionState::Initial => *state = PortalExecutionState::Finished,
                PortalExecutionState::Finished => {
                    drop(state);
                    return finished_again(client, name, &portal.statement.statement).await;
                }
                PortalExecutionState::Suspended(_) => {
                    drop(state);
                    return self._on_execute(client, message).await;
                }
            }
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let max_rows = message.max_rows as usize;
        let params = bind_params(&portal)?;
        let (pid, _) = client.pid_and_secret_key();
        let answer = self
            .handler
            .answer(
                &portal.statement.statement,
                params,
                Some(&portal.result_column_format),
                client.portal_store(),
                pid,
            )
            .await?;
        self.handler.send_notices(client).await?;
        match answer {
            Answer::Done(tag, reports) => {
                send_reports(client, reports).await?;
                let done = CommandComplete::new(tag.into_owned());
                client
                    .feed(PgWireBackendMessage::CommandComplete(done))
                    .await?;
            }
            Answer::Rows {
                schema,
                tag,
                rows,
                reports,
            } if max_rows == 0 || rows.len() < max_rows => {
                let n = send_rows(client, schema, rows).await?;
                send_reports(client, reports).await?;
                let done = CommandComplete::new(format!("{tag} {n}"));
                client
                    .send(PgWireBackendMessage::CommandComplete(done))
                    .await?;
            }
            rows => {
                // The default fetches from the started portal and
                // suspends it at `max_rows`.
                let Response::Query(r) = rows.into_response()? else {
                    unreachable!("rows answer as a query response");
                };
                portal.start(r).await;
                client.set_state(PgWireConnectionState::ReadyForQuery);
                return self._on_execute(client, message).await;
            }
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(())
    }

    /// Parses as pgwire's default does, and keeps the statement's name in
    /// the session (for `DEALLOCATE ALL` and `DISCARD ALL`).
    async fn parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        match StoredStatement::parse(client, &message, self.query_parser()).await? {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        if !name.is_empty() {
            self.handler.session.lock().prepared.insert(name);
        }
        client
            .send(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }
}

/// Answers an Execute of portal `name`, whose statement `p` already ran
/// to its end: no rows and the tag with a count of 0 for a statement that
/// returns rows, `55000` for one that returns none (as PostgreSQL answers
/// a finished portal). Its statement does not run again.
async fn finished_again<C>(client: &mut C, name: &str, p: &Prepared) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let tag = match &p.stmt {
        Stmt::Show(_) | Stmt::ShowSetting(_) => "SHOW",
        Stmt::Select(_) => "SELECT",
        Stmt::Call { .. } if !p.cols.is_empty() => "CALL",
        _ => {
            return Err(user_error(
                "55000",
                format!("portal {name:?} cannot be run: its statement already ran"),
            ))
        }
    };
    let done = CommandComplete::new(format!("{tag} 0"));
    client
        .feed(PgWireBackendMessage::CommandComplete(done))
        .await?;
    Ok(())
}

/// Decodes a portal's parameters: as many as its statement takes, each in
/// its format and type.
fn bind_params(portal: &Portal<Arc<Prepared>>) -> PgWireResult<Vec<Value>> {
    let stored: &StoredStatement<Arc<Prepared>> = &portal.statement;
    let p = &*stored.statement;
    let expected = &p.params;
    if portal.parameters.len() != expected.len() {
        return Err(user_error(
            "08P01",
            format!(
                "bind message supplies {} parameter(s), the statement takes {}",
                portal.parameters.len(),
                expected.len()
            ),
        ));
    }
    let mut params = Vec::with_capacity(expected.len());
    for (i, (bytes, want)) in portal.parameters.iter().zip(expected).enumerate() {
        let binary = format_of(&portal.parameter_format, i)? == FieldFormat::Binary;
        let declared = stored.parameter_types.get(i).and_then(|t| t.as_ref());
        params.push(decode_param(i, bytes.as_ref(), binary, declared, want)?);
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_needs_a_dead_island_answers_57p03_naming_it() {
        let e = call_error(CallError::IslandDown {
            procedure: "transfer".into(),
            island: 2,
        });
        let PgWireError::UserError(info) = e else {
            panic!("not a user error: {e:?}");
        };
        assert_eq!(info.code, "57P03");
        assert_eq!(info.severity, "ERROR", "the session goes on");
        assert!(
            info.message.contains("island 2 is down"),
            "{}",
            info.message
        );
    }

    #[test]
    fn binary_int_arrays_decode_and_bad_ones_are_refused() {
        let mut b = Vec::new();
        for w in [1i32, 0, 20, 3, 1] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        for k in [5i64, -1, 7] {
            b.extend_from_slice(&8i32.to_be_bytes());
            b.extend_from_slice(&k.to_be_bytes());
        }
        assert_eq!(decode_int_array(&b).unwrap(), vec![5, -1, 7]);
        for cut in 0..b.len() {
            assert!(decode_int_array(&b[..cut]).is_err() || cut < 12);
        }
        let mut huge = b.clone();
        huge[12..16].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_int_array(&huge).is_err());
        let mut trailing = b.clone();
        trailing.push(0);
        assert!(decode_int_array(&trailing).is_err());
    }

    #[test]
    fn types_are_named_as_postgresql_users_write_them() {
        let names = [Type::Int, Type::Float, Type::Str, Type::Ints].map(|t| sql_name(&pg_type(t)));
        assert_eq!(names, ["int8", "float8", "text", "int8[]"]);
        assert_eq!(sql_name(&PgType::INT4_ARRAY), "int4[]");
    }

    #[test]
    fn params_decode_by_format_and_type() {
        let b = |v: &[u8]| Some(Bytes::copy_from_slice(v));
        let int8 = &PgType::INT8;
        assert_eq!(
            decode_param(0, b(&7i64.to_be_bytes()).as_ref(), true, None, int8).unwrap(),
            Value::Int(7)
        );
        assert_eq!(
            decode_param(
                0,
                b(&7i32.to_be_bytes()).as_ref(),
                true,
                Some(&PgType::INT4),
                int8
            )
            .unwrap(),
            Value::Int(7)
        );
        let e = decode_param(0, b(&[1, 2, 3]).as_ref(), true, None, int8).unwrap_err();
        assert!(matches!(e, PgWireError::UserError(i) if i.code == "22P03"));
        assert_eq!(
            decode_param(0, b(b" 42 ").as_ref(), false, None, int8).unwrap(),
            Value::Int(42)
        );
        let e = decode_param(0, b(b"4x").as_ref(), false, None, int8).unwrap_err();
        assert!(matches!(e, PgWireError::UserError(i) if i.code == "22P02"));
        assert_eq!(
            decode_param(0, b(b"{1, 2}").as_ref(), false, None, &PgType::INT8_ARRAY).unwrap(),
            Value::Ints(vec![1, 2])
        );
        assert_eq!(
            decode_param(0, None, false, None, int8).unwrap(),
            Value::Null
        );
    }
}
