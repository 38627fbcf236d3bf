//! SQL statements on the catalog's tables: a small subset of SELECT,
//! INSERT, UPDATE and DELETE, compiled once ([`plan`]) into a [`TablePlan`]
//! that runs against a transaction ([`TablePlan::run`]).
//!
//! Tables show as their catalog's SQL views ([`crate::api::SqlTable`]): key
//! columns packed into the 64-bit primary key, stored columns with SQL
//! types. The forms (anything else on a table is `0A000`, naming it):
//! - `SELECT cols | * | expressions | count(*), sum(c), min(c), max(c)
//!   FROM t [WHERE ...] [ORDER BY key [ASC|DESC]] [LIMIT n]`, where the
//!   WHERE is equality on every key column (a point), equality on a prefix
//!   of the key columns and a range (`BETWEEN`, `>=`, `>`, `<=`, `<`) on the
//!   next, equality on a secondary key's columns, or absent (the whole
//!   table, when the view declares its keys' domain or the table is
//!   ordered and local);
//! - `INSERT INTO t [(cols)] VALUES (...), ...`;
//! - `UPDATE t SET col = expr, ... WHERE <every key column> = expr`;
//! - `DELETE FROM t WHERE <every key column> = expr`.
//!
//! A range whose rows may lie on several islands is read as every key of
//! it (point reads, each routed to its island), or one prefix at a time,
//! so that no row is missed; a range too large for that is refused.
//! Columns are not nullable: an INSERT gives omitted columns zero or the
//! empty string, and a NULL stored is `23502`. Runtime errors are user
//! aborts whose messages [`crate::api::sql_abort_state`] maps to SQLSTATEs,
//! or [`crate::Error::OutOfRange`] (`22003`).

use std::sync::Arc;

use sqlparser::ast as sql;

use super::sql::SqlError;
use crate::api::{sql_abort, Catalog, Row, SqlSource, SqlTable, Type, Value};
use crate::storage::schema::SqlType;
use crate::storage::{ColType, PrimaryKind, RowMut, RowRef, TableId};
use crate::txn::{RowH, Txn};
use crate::{Abort, Error};

/// Most keys a range read as point reads may cover.
const POINT_RANGE_MAX: u64 = 1 << 22;

/// A compiled statement on the catalog's tables (SELECT / INSERT / UPDATE / DELETE).
pub(crate) struct TablePlan {
    table: TableId,
    view: Arc<SqlTable>,
    ordered: bool,
    tag: &'static str,
    columns: Vec<(String, Type)>,
    /// The SQL type of each result column (timestamps are formatted).
    out_types: Vec<SqlType>,
    param_types: Vec<Type>,
    param_sql: Vec<SqlType>,
    kind: Kind,
}

impl std::fmt::Debug for TablePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TablePlan")
            .field("table", &self.table)
            .field("tag", &self.tag)
            .field("columns", &self.columns)
            .finish()
    }
}

enum Kind {
    Select {
        set: RowSet,
        out: Output,
        limit: Option<E>,
    },
    Insert {
        /// Per row, per view column: its expression, or its default.
        rows: Vec<Vec<Option<E>>>,
    },
    Update {
        key: Vec<E>,
        sets: Vec<(usize, E)>,
    },
    Delete {
        key: Vec<E>,
    },
}

/// The rows a SELECT reads.
enum RowSet {
    /// Every key part given.
    Point(Vec<E>),
    /// Equality on the first `prefix.len()` key parts, and bounds on the next.
    Range {
        prefix: Vec<E>,
        lo: Option<(E, bool)>,
        hi: Option<(E, bool)>,
        reverse: bool,
        how: RangeHow,
    },
    /// Equality on a secondary key's columns (view columns `cols`).
    Secondary {
        sec: usize,
        vals: Vec<E>,
        cols: Vec<usize>,
        reverse: bool,
    },
}

/// How a range is read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RangeHow {
    /// One scan of the ordered index: the range lies on one island.
    Scan,
    /// One scan per value of the first key part in the view's domain.
    PerPrefix,
    /// A point read of every key in it.
    Points,
}

enum Output {
    Rows(Vec<E>),
    Aggs(Vec<Agg>),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum AggKind {
    Count,
    Sum,
    Min,
    Max,
}

struct Agg {
    kind: AggKind,
    arg: Option<E>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// An expression: over the row's columns (by view position), parameters
/// and literals.
#[derive(Clone, Debug)]
enum E {
    Col(usize),
    Param(usize),
    Lit(Value),
    Now,
    Neg(Box<E>),
    Bin(Op, Box<E>, Box<E>),
    Cast(Box<E>, SqlType),
}

fn err(code: &'static str, message: String) -> SqlError {
    SqlError { code, message }
}

fn unsupported(what: impl std::fmt::Display) -> SqlError {
    err(
        "0A000",
        format!(
            "{what} is not supported on tables (statements on tables: SELECT by primary key, \
             key range or secondary key with count/sum/min/max, ORDER BY the key and LIMIT; \
             INSERT ... VALUES; UPDATE and DELETE by primary key)"
        ),
    )
}

/// An identifier as PostgreSQL reads it: unquoted folds to lower case.
fn ident(i: &sql::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

/// The table a name refers to: `Ok(None)` when it is none of this catalog's
/// and belongs to the system catalogs (`pg_*`, `information_schema`), which
/// others answer.
fn table_of(name: &sql::ObjectName, catalog: &Catalog) -> Result<Option<TableId>, SqlError> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p {
            sql::ObjectNamePart::Identifier(i) => Ok(ident(i)),
            sql::ObjectNamePart::Function(_) => Err(unsupported(format!("the name {name}"))),
        })
        .collect::<Result<_, _>>()?;
    let (schema, table) = match parts.as_slice() {
        [t] => (None, t.as_str()),
        [s, t] => (Some(s.as_str()), t.as_str()),
        _ => return Ok(None),
    };
    match schema {
        None | Some("public") => {}
        Some(_) => return Ok(None),
    }
    if let Some(id) = catalog.table_named(table) {
        return Ok(Some(id));
    }
    if table.starts_with("pg_") || schema.is_some() && schema != Some("public") {
        return Ok(None);
    }
    Err(err("42P01", format!("relation \"{table}\" does not exist")))
}

/// Compiles `stmt` if it is a statement on a table of `catalog`.
/// `Ok(None)`: not a statement on a table of this catalog.
pub(crate) fn plan(
    stmt: &sql::Statement,
    catalog: &Catalog,
) -> Result<Option<TablePlan>, SqlError> {
    match stmt {
        sql::Statement::Query(q) => plan_select(q, catalog),
        sql::Statement::Insert(i) => plan_insert(i, catalog).map(Some),
        sql::Statement::Update(u) => plan_update(u, catalog).map(Some),
        sql::Statement::Delete(d) => plan_delete(d, catalog).map(Some),
        _ => Ok(None),
    }
}

/// What planning one statement gathers.
struct Planner<'c> {
    catalog: &'c Catalog,
    table: TableId,
    view: Arc<SqlTable>,
    /// Names the table may be qualified with (its name, its alias).
    quals: Vec<String>,
    params: Vec<Option<SqlType>>,
}

impl<'c> Planner<'c> {
    fn new(catalog: &'c Catalog, table: TableId) -> Planner<'c> {
        let view = catalog.sql_view(table).unwrap_or_default();
        let name = catalog.tables()[table as usize].name.clone();
        Planner {
            catalog,
            table,
            view,
            quals: vec![name],
            params: Vec::new(),
        }
    }

    fn table_name(&self) -> &str {
        &self.catalog.tables()[self.table as usize].name
    }

    fn ordered(&self) -> bool {
        self.catalog.tables()[self.table as usize].primary == PrimaryKind::Ordered
    }

    fn fixed_keys(&self) -> bool {
        self.catalog.tables()[self.table as usize].fixed_keys
    }

    /// The view column named `name`.
    fn column(&self, name: &str) -> Result<usize, SqlError> {
        self.view
            .columns()
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                err(
                    "42703",
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        self.table_name()
                    ),
                )
            })
    }

    /// The view column an expression names, if it is a column reference.
    fn column_ref(&self, e: &sql::Expr) -> Result<Option<usize>, SqlError> {
        match e {
            sql::Expr::Identifier(i) => self.column(&ident(i)).map(Some),
            sql::Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [t, c] if self.quals.contains(&ident(t)) => self.column(&ident(c)).map(Some),
                [t, _] => Err(err(
                    "42P01",
                    format!("missing FROM-clause entry for table \"{}\"", ident(t)),
                )),
                _ => Err(unsupported(format!("the name {e}"))),
            },
            sql::Expr::Nested(inner) => self.column_ref(inner),
            _ => Ok(None),
        }
    }

    fn col_type(&self, c: usize) -> SqlType {
        self.view.columns()[c].ty
    }

    /// Records that parameter `n` (1-based) has type `ty` unless it has one.
    fn param(&mut self, n: usize, ty: Option<SqlType>) -> usize {
        if self.params.len() < n {
            self.params.resize(n, None);
        }
        if self.params[n - 1].is_none() {
            self.params[n - 1] = ty;
        }
        n - 1
    }

    /// The static type of `e` (`None`: untyped, a parameter not yet typed).
    fn type_of(&self, e: &E) -> Option<SqlType> {
        match e {
            E::Col(c) => Some(self.col_type(*c)),
            E::Param(i) => self.params.get(*i).copied().flatten(),
            E::Lit(Value::Int(_)) => Some(SqlType::Int8),
            E::Lit(Value::Float(_)) => Some(SqlType::Float8),
            E::Lit(Value::Str(_)) => Some(SqlType::Varchar(u16::MAX)),
            E::Lit(_) => None,
            E::Now => Some(SqlType::Timestamp),
            E::Neg(x) => self.type_of(x),
            E::Bin(_, a, b) => match (self.type_of(a), self.type_of(b)) {
                (Some(SqlType::Float8), _) | (_, Some(SqlType::Float8)) => Some(SqlType::Float8),
                (Some(t), _) | (None, Some(t)) => Some(t),
                (None, None) => None,
            },
            E::Cast(_, t) => Some(*t),
        }
    }

    /// Compiles an expression; `want` is the type its context expects (a
    /// column it is compared with or assigned to); `row`: whether columns
    /// may appear.
    fn expr(&mut self, e: &sql::Expr, want: Option<SqlType>, row: bool) -> Result<E, SqlError> {
        if let Some(c) = self.column_ref(e)? {
            if !row {
                return Err(unsupported(format!("a column ({e}) in this position")));
            }
            return Ok(E::Col(c));
        }
        Ok(match e {
            sql::Expr::Nested(inner) => self.expr(inner, want, row)?,
            sql::Expr::Value(v) => self.literal(&v.value, want)?,
            sql::Expr::UnaryOp { op, expr } => match op {
                sql::UnaryOperator::Minus => match self.expr(expr, want, row)? {
                    E::Lit(Value::Int(v)) => {
                        E::Lit(Value::Int(v.checked_neg().ok_or_else(|| {
                            err("22003", format!("-{v} is out of range for type bigint"))
                        })?))
                    }
                    E::Lit(Value::Float(v)) => E::Lit(Value::Float(-v)),
                    x => E::Neg(Box::new(x)),
                },
                sql::UnaryOperator::Plus => self.expr(expr, want, row)?,
                _ => return Err(unsupported(format!("the operator {op}"))),
            },
            sql::Expr::BinaryOp { left, op, right } => {
                let op = match op {
                    sql::BinaryOperator::Plus => Op::Add,
                    sql::BinaryOperator::Minus => Op::Sub,
                    sql::BinaryOperator::Multiply => Op::Mul,
                    sql::BinaryOperator::Divide => Op::Div,
                    _ => return Err(unsupported(format!("the operator {op} in {e}"))),
                };
                let want =
                    want.filter(|t| matches!(t, SqlType::Int8 | SqlType::Int4 | SqlType::Float8));
                let mut a = self.expr(left, want, row)?;
                let tb = self.type_of(&a).or(want);
                let b = self.expr(right, tb, row)?;
                if self.type_of(&a).is_none() {
                    let ta = self.type_of(&b).or(want);
                    a = self.expr(left, ta, row)?;
                }
                for x in [&a, &b] {
                    match self.type_of(x) {
                        Some(SqlType::Int8 | SqlType::Int4 | SqlType::Float8) | None => {}
                        Some(t) => {
                            return Err(err(
                                "42883",
                                format!("operator does not exist: {} in {e}", t.name()),
                            ))
                        }
                    }
                }
                E::Bin(op, Box::new(a), Box::new(b))
            }
            sql::Expr::Cast {
                kind,
                expr,
                data_type,
                format,
            } => {
                if !matches!(kind, sql::CastKind::Cast | sql::CastKind::DoubleColon)
                    || format.is_some()
                {
                    return Err(unsupported(format!("the cast {e}")));
                }
                let ty = cast_type(data_type)?;
                let inner = self.expr(expr, Some(ty), row)?;
                match inner {
                    E::Lit(v) => E::Lit(cast_value(v, ty).map_err(|m| err(state_of(m), m.into()))?),
                    E::Param(i) if self.params[i] == Some(ty) => E::Param(i),
                    x => E::Cast(Box::new(x), ty),
                }
            }
            sql::Expr::Function(f) if is_now(f) => E::Now,
            _ => return Err(unsupported(format!("the expression {e}"))),
        })
    }

    fn literal(&mut self, v: &sql::Value, want: Option<SqlType>) -> Result<E, SqlError> {
        Ok(match v {
            sql::Value::Number(n, _) => {
                let v = if let Ok(i) = n.parse::<i64>() {
                    Value::Int(i)
                } else if n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("22003", format!("{n} is out of range for type bigint")));
                } else {
                    Value::Float(n.parse::<f64>().map_err(|_| {
                        err("22P02", format!("invalid input syntax for a number: {n}"))
                    })?)
                };
                match want {
                    Some(SqlType::Float8) => E::Lit(
                        cast_value(v, SqlType::Float8).map_err(|m| err(state_of(m), m.into()))?,
                    ),
                    _ => E::Lit(v),
                }
            }
            sql::Value::SingleQuotedString(s) => match want {
                Some(t) => E::Lit(
                    cast_value(Value::Str(s.clone()), t)
                        .map_err(|m| err(state_of(m), format!("{m}: '{s}'")))?,
                ),
                None => E::Lit(Value::Str(s.clone())),
            },
            sql::Value::Null => E::Lit(Value::Null),
            sql::Value::Placeholder(p) => {
                let n = p
                    .strip_prefix('$')
                    .and_then(|d| d.parse::<usize>().ok())
                    .filter(|&n| (1..=65_535).contains(&n))
                    .ok_or_else(|| unsupported(format!("the placeholder {p}")))?;
                E::Param(self.param(n, want))
            }
            sql::Value::Boolean(_) => return Err(unsupported("a boolean")),
            other => return Err(unsupported(format!("the literal {other}"))),
        })
    }

    /// An expression that needs no row: a key value, a bound, a limit.
    fn const_expr(&mut self, e: &sql::Expr, want: Option<SqlType>) -> Result<E, SqlError> {
        self.expr(e, want, false)
    }

    fn finish(self, tag: &'static str, kind: Kind, outputs: Vec<(String, SqlType)>) -> TablePlan {
        let param_sql: Vec<SqlType> = self
            .params
            .iter()
            .map(|t| t.unwrap_or(SqlType::Varchar(u16::MAX)))
            .collect();
        TablePlan {
            table: self.table,
            ordered: self.ordered(),
            view: self.view,
            tag,
            columns: outputs
                .iter()
                .map(|(n, t)| (n.clone(), api_type(*t)))
                .collect(),
            out_types: outputs.iter().map(|(_, t)| *t).collect(),
            param_types: param_sql.iter().map(|t| api_type(*t)).collect(),
            param_sql,
            kind,
        }
    }

    /// The key parts SQL names (a keyless table has none).
    fn key_columns(&self) -> Result<Vec<usize>, SqlError> {
        let mut out = Vec::new();
        for (i, p) in self.view.key().iter().enumerate() {
            if p.hidden {
                return Err(unsupported(format!(
                    "a statement by key on {} (it has no primary key)",
                    self.table_name()
                )));
            }
            out.push(
                self.view
                    .columns()
                    .iter()
                    .position(|c| c.source == SqlSource::Key(i))
                    .ok_or_else(|| unsupported("a key part without a column"))?,
            );
        }
        Ok(out)
    }

    /// The key expressions of a WHERE that gives every key column by equality.
    fn point_where(
        &mut self,
        selection: Option<&sql::Expr>,
        what: &str,
    ) -> Result<Vec<E>, SqlError> {
        let keys = self.key_columns()?;
        let names: Vec<String> = keys
            .iter()
            .map(|&c| self.view.columns()[c].name.clone())
            .collect();
        let need = || {
            unsupported(format!(
                "{what} without equality on the primary key ({} = ...)",
                names.join(" = ... AND ")
            ))
        };
        let Some(selection) = selection else {
            return Err(need());
        };
        let preds = self.predicates(selection)?;
        let mut key: Vec<Option<E>> = vec![None; keys.len()];
        for p in preds {
            match p {
                Pred::Eq(c, e) => match keys.iter().position(|&k| k == c) {
                    Some(i) if key[i].is_none() => key[i] = Some(e),
                    _ => return Err(need()),
                },
                _ => return Err(need()),
            }
        }
        key.into_iter().map(|k| k.ok_or_else(need)).collect()
    }

    /// Splits a WHERE into its conjuncts, each a comparison of a column
    /// with a value.
    fn predicates(&mut self, e: &sql::Expr) -> Result<Vec<Pred>, SqlError> {
        let mut out = Vec::new();
        self.conjuncts(e, &mut out)?;
        Ok(out)
    }

    fn conjuncts(&mut self, e: &sql::Expr, out: &mut Vec<Pred>) -> Result<(), SqlError> {
        match e {
            sql::Expr::Nested(inner) => self.conjuncts(inner, out),
            sql::Expr::BinaryOp {
                left,
                op: sql::BinaryOperator::And,
                right,
            } => {
                self.conjuncts(left, out)?;
                self.conjuncts(right, out)
            }
            sql::Expr::Between {
                expr,
                negated: false,
                low,
                high,
            } => {
                let c = self
                    .column_ref(expr)?
                    .ok_or_else(|| unsupported(format!("the condition {e}")))?;
                let t = Some(self.col_type(c));
                let lo = self.const_expr(low, t)?;
                let hi = self.const_expr(high, t)?;
                out.push(Pred::Lo(c, lo, true));
                out.push(Pred::Hi(c, hi, true));
                Ok(())
            }
            sql::Expr::BinaryOp { left, op, right } => {
                use sql::BinaryOperator as B;
                let (c, v, op) = match (self.column_ref(left)?, self.column_ref(right)?) {
                    (Some(c), None) => (c, right, op.clone()),
                    (None, Some(c)) => (
                        c,
                        left,
                        match op {
                            B::Lt => B::Gt,
                            B::LtEq => B::GtEq,
                            B::Gt => B::Lt,
                            B::GtEq => B::LtEq,
                            o => o.clone(),
                        },
                    ),
                    _ => return Err(unsupported(format!("the condition {e}"))),
                };
                let t = Some(self.col_type(c));
                let v = self.const_expr(v, t)?;
                out.push(match op {
                    B::Eq => Pred::Eq(c, v),
                    B::Gt => Pred::Lo(c, v, false),
                    B::GtEq => Pred::Lo(c, v, true),
                    B::Lt => Pred::Hi(c, v, false),
                    B::LtEq => Pred::Hi(c, v, true),
                    _ => return Err(unsupported(format!("the condition {e}"))),
                });
                Ok(())
            }
            _ => Err(unsupported(format!("the condition {e}"))),
        }
    }
}

/// One conjunct of a WHERE: column `c` compared with a value.
enum Pred {
    Eq(usize, E),
    Lo(usize, E, bool),
    Hi(usize, E, bool),
}

fn is_now(f: &sql::Function) -> bool {
    let name = f.name.to_string().to_lowercase();
    let no_args = match &f.args {
        sql::FunctionArguments::None => true,
        sql::FunctionArguments::List(l) => l.args.is_empty() && l.clauses.is_empty(),
        sql::FunctionArguments::Subquery(_) => false,
    };
    no_args
        && f.filter.is_none()
        && f.over.is_none()
        && matches!(
            name.as_str(),
            "now" | "current_timestamp" | "localtimestamp" | "transaction_timestamp"
        )
}

fn cast_type(t: &sql::DataType) -> Result<SqlType, SqlError> {
    use sql::DataType as D;
    Ok(match t {
        D::Int8(_) | D::BigInt(_) => SqlType::Int8,
        D::Int4(_) | D::Int(_) | D::Integer(_) | D::Int2(_) | D::SmallInt(_) => SqlType::Int4,
        D::Float8 | D::DoublePrecision | D::Double(_) | D::Float4 | D::Real => SqlType::Float8,
        D::Text | D::Varchar(None) | D::CharacterVarying(None) | D::String(None) => {
            SqlType::Varchar(u16::MAX)
        }
        D::Timestamp(_, sql::TimezoneInfo::None | sql::TimezoneInfo::WithoutTimeZone) => {
            SqlType::Timestamp
        }
        other => return Err(unsupported(format!("the type {other}"))),
    })
}

/// The API type a SQL type travels as (a timestamp as its text).
fn api_type(t: SqlType) -> Type {
    match t {
        SqlType::Int8 | SqlType::Int4 => Type::Int,
        SqlType::Float8 => Type::Float,
        SqlType::Varchar(_) | SqlType::Timestamp => Type::Str,
    }
}

/// The SQLSTATE of one of [`sql_abort`]'s messages, else `22003` (range).
fn state_of(m: &'static str) -> &'static str {
    if m == BAD_NUMBER {
        return "22P02";
    }
    crate::api::sql_abort_state(m).unwrap_or("22003")
}

const OUT_OF_RANGE: &str = "value out of range for its type";
const BAD_NUMBER: &str = "invalid input syntax for a number";

/// `v` as type `t` (PostgreSQL's assignment casts): an error message of
/// [`sql_abort`] (or [`OUT_OF_RANGE`], [`BAD_NUMBER`]) when it cannot be.
fn cast_value(v: Value, t: SqlType) -> Result<Value, &'static str> {
    Ok(match (v, t) {
        (Value::Null, _) => Value::Null,
        (Value::Int(i), SqlType::Int8) => Value::Int(i),
        (Value::Int(i), SqlType::Int4) => {
            i32::try_from(i).map_err(|_| OUT_OF_RANGE)?;
            Value::Int(i)
        }
        (Value::Float(f), SqlType::Int8 | SqlType::Int4) => {
            let r = f.round();
            if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&r) {
                return Err(OUT_OF_RANGE);
            }
            return cast_value(Value::Int(r as i64), t);
        }
        (Value::Int(i), SqlType::Float8) => Value::Float(i as f64),
        (Value::Float(f), SqlType::Float8) => Value::Float(f),
        (Value::Str(s), SqlType::Int8 | SqlType::Int4) => {
            let i = s.trim().parse::<i64>().map_err(|_| BAD_NUMBER)?;
            return cast_value(Value::Int(i), t);
        }
        (Value::Str(s), SqlType::Float8) => {
            Value::Float(s.trim().parse::<f64>().map_err(|_| BAD_NUMBER)?)
        }
        (Value::Str(s), SqlType::Varchar(n)) => {
            if s.len() > n as usize {
                return Err(sql_abort::TOO_LONG);
            }
            Value::Str(s)
        }
        (v @ (Value::Int(_) | Value::Float(_)), SqlType::Varchar(_)) => Value::Str(v.to_string()),
        (Value::Str(s), SqlType::Timestamp) => {
            Value::Int(parse_timestamp(&s).ok_or(sql_abort::BAD_TIMESTAMP)?)
        }
        (Value::Int(i), SqlType::Timestamp) => Value::Int(i),
        _ => return Err(sql_abort::PARAM_TYPE),
    })
}

// ---- timestamps: microseconds since 1970-01-01 00:00:00 UTC --------------

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DD[( |T)HH:MM[:SS[.ffffff]]]`.
fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    let mut d = date.split('-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    if d.next().is_some()
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(1..=9999).contains(&y)
    {
        return None;
    }
    let mut micros = 0i64;
    if !time.is_empty() {
        let mut t = time.split(':');
        let h: i64 = t.next()?.parse().ok()?;
        let min: i64 = t.next()?.parse().ok()?;
        let (sec, frac) = match t.next() {
            Some(sf) => match sf.split_once('.') {
                Some((a, b)) => {
                    if b.is_empty() || b.len() > 6 || !b.bytes().all(|c| c.is_ascii_digit()) {
                        return None;
                    }
                    (
                        a.parse::<i64>().ok()?,
                        format!("{b:0<6}").parse::<i64>().ok()?,
                    )
                }
                None => (sf.parse::<i64>().ok()?, 0),
            },
            None => (0, 0),
        };
        if t.next().is_some()
            || !(0..24).contains(&h)
            || !(0..60).contains(&min)
            || !(0..60).contains(&sec)
        {
            return None;
        }
        micros = ((h * 60 + min) * 60 + sec) * 1_000_000 + frac;
    }
    Some(days_from_civil(y, m, day) * 86_400_000_000 + micros)
}

/// PostgreSQL's text of a timestamp: `2026-11-29 07:19:22.5`.
fn format_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(86_400_000_000);
    let rest = micros.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    let secs = rest / 1_000_000;
    let frac = rest % 1_000_000;
    let mut s = format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if frac != 0 {
        let f = format!("{frac:06}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

// ---- planning the statements ---------------------------------------------

fn plan_select(q: &sql::Query, catalog: &Catalog) -> Result<Option<TablePlan>, SqlError> {
    let sql::SetExpr::Select(s) = q.body.as_ref() else {
        return Ok(None);
    };
    // Which table: one plain table name among this catalog's.
    let Some(first) = s.from.first() else {
        return Ok(None);
    };
    let sql::TableFactor::Table {
        name, alias, args, ..
    } = &first.relation
    else {
        return Ok(None);
    };
    if args.is_some() {
        return Ok(None);
    }
    let Some(table) = table_of(name, catalog)? else {
        return Ok(None);
    };
    let mut p = Planner::new(catalog, table);
    if s.from.len() > 1 || !first.joins.is_empty() {
        return Err(unsupported("a join"));
    }
    if let sql::TableFactor::Table {
        with_hints,
        version,
        with_ordinality,
        partitions,
        json_path,
        sample,
        index_directives,
        ..
    } = &first.relation
    {
        if !with_hints.is_empty()
            || version.is_some()
            || *with_ordinality
            || !partitions.is_empty()
            || json_path.is_some()
            || sample.is_some()
            || !index_directives.is_empty()
        {
            return Err(unsupported(format!(
                "the table reference {}",
                first.relation
            )));
        }
    }
    if let Some(a) = alias {
        if !a.columns.is_empty() {
            return Err(unsupported("column aliases on a table"));
        }
        p.quals = vec![ident(&a.name)];
    }
    if q.with.is_some() {
        return Err(unsupported("WITH"));
    }
    if q.fetch.is_some() {
        return Err(unsupported("FETCH"));
    }
    if !q.locks.is_empty() {
        return Err(unsupported("FOR UPDATE/SHARE"));
    }
    if q.for_clause.is_some()
        || q.settings.is_some()
        || q.format_clause.is_some()
        || !q.pipe_operators.is_empty()
    {
        return Err(unsupported("this query clause"));
    }
    if s.distinct.is_some() {
        return Err(unsupported("DISTINCT"));
    }
    if s.top.is_some() || s.into.is_some() || s.prewhere.is_some() || !s.lateral_views.is_empty() {
        return Err(unsupported("this SELECT clause"));
    }
    match &s.group_by {
        sql::GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty() => {}
        _ => return Err(unsupported("GROUP BY")),
    }
    if s.having.is_some() {
        return Err(unsupported("HAVING"));
    }
    if !s.cluster_by.is_empty()
        || !s.distribute_by.is_empty()
        || !s.sort_by.is_empty()
        || !s.named_window.is_empty()
        || s.qualify.is_some()
        || !s.connect_by.is_empty()
        || s.value_table_mode.is_some()
        || s.exclude.is_some()
        || s.select_modifiers.is_some()
        || !s.optimizer_hints.is_empty()
    {
        return Err(unsupported("this SELECT clause"));
    }

    // The result columns.
    let mut outs: Vec<(String, SqlType)> = Vec::new();
    let mut exprs: Vec<E> = Vec::new();
    let mut aggs: Vec<Agg> = Vec::new();
    for item in &s.projection {
        let (e, alias) = match item {
            sql::SelectItem::Wildcard(o) => {
                if o.opt_ilike.is_some()
                    || o.opt_exclude.is_some()
                    || o.opt_except.is_some()
                    || o.opt_replace.is_some()
                    || o.opt_rename.is_some()
                    || o.opt_alias.is_some()
                {
                    return Err(unsupported(format!("{item}")));
                }
                for (i, c) in p.view.columns().iter().enumerate() {
                    outs.push((c.name.clone(), c.ty));
                    exprs.push(E::Col(i));
                }
                continue;
            }
            sql::SelectItem::QualifiedWildcard(
                sql::SelectItemQualifiedWildcardKind::ObjectName(n),
                o,
            ) if p.quals.contains(&n.to_string().to_lowercase())
                && o.opt_exclude.is_none()
                && o.opt_except.is_none()
                && o.opt_replace.is_none()
                && o.opt_rename.is_none()
                && o.opt_ilike.is_none() =>
            {
                for (i, c) in p.view.columns().iter().enumerate() {
                    outs.push((c.name.clone(), c.ty));
                    exprs.push(E::Col(i));
                }
                continue;
            }
            sql::SelectItem::UnnamedExpr(e) => (e, None),
            sql::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(ident(alias))),
            other => return Err(unsupported(format!("the result column {other}"))),
        };
        if let sql::Expr::Function(f) = e {
            if !is_now(f) {
                let (agg, ty, name) = aggregate(&mut p, f)?;
                outs.push((alias.unwrap_or(name), ty));
                aggs.push(agg);
                continue;
            }
        }
        let x = p.expr(e, None, true)?;
        let ty = p.type_of(&x).unwrap_or(SqlType::Varchar(u16::MAX));
        let name = alias.unwrap_or_else(|| match &x {
            E::Col(c) => p.view.columns()[*c].name.clone(),
            E::Now => "now".into(),
            _ => "?column?".into(),
        });
        outs.push((name, ty));
        exprs.push(x);
    }
    if !aggs.is_empty() && !exprs.is_empty() {
        return Err(err(
            "42803",
            "a column outside an aggregate needs GROUP BY, which is not supported".into(),
        ));
    }

    // ORDER BY: key columns in key order, one direction.
    let mut reverse = None;
    let mut order_from: Option<usize> = None;
    if let Some(ob) = &q.order_by {
        if ob.interpolate.is_some() {
            return Err(unsupported("INTERPOLATE"));
        }
        let sql::OrderByKind::Expressions(list) = &ob.kind else {
            return Err(unsupported("ORDER BY ALL"));
        };
        if !aggs.is_empty() && !list.is_empty() {
            return Err(unsupported("ORDER BY with aggregates"));
        }
        let keys = p.key_columns()?;
        let mut next: Option<usize> = None;
        for o in list {
            if o.with_fill.is_some() || o.options.nulls_first.is_some() {
                return Err(unsupported(format!("ORDER BY {o}")));
            }
            let desc = match o.options.sort {
                None | Some(sql::OrderBySort::Asc) => false,
                Some(sql::OrderBySort::Desc) => true,
                Some(_) => return Err(unsupported(format!("ORDER BY {o}"))),
            };
            let c = p
                .column_ref(&o.expr)?
                .ok_or_else(|| unsupported(format!("ORDER BY {} (only key columns)", o.expr)))?;
            let part = keys
                .iter()
                .position(|&k| k == c)
                .ok_or_else(|| unsupported(format!("ORDER BY {} (only key columns)", o.expr)))?;
            match next {
                None => order_from = Some(part),
                Some(n) if n == part => {}
                Some(_) => {
                    return Err(unsupported(format!(
                        "ORDER BY {} (key columns in key order)",
                        o.expr
                    )))
                }
            }
            next = Some(part + 1);
            if reverse.is_some_and(|r| r != desc) {
                return Err(unsupported("ORDER BY in mixed directions"));
            }
            reverse = Some(desc);
        }
    }
    let reverse = reverse.unwrap_or(false);

    // LIMIT.
    let mut limit = None;
    if let Some(lc) = &q.limit_clause {
        match lc {
            sql::LimitClause::LimitOffset {
                limit: l,
                offset: None,
                limit_by,
            } if limit_by.is_empty() => {
                if let Some(l) = l {
                    limit = Some(p.const_expr(l, Some(SqlType::Int8))?);
                }
            }
            _ => return Err(unsupported("OFFSET")),
        }
    }

    let set = row_set(&mut p, s.selection.as_ref(), reverse)?;
    // ORDER BY from part i holds when parts before i are fixed by equality.
    if let Some(i) = order_from {
        let fixed = match &set {
            RowSet::Point(_) => usize::MAX,
            RowSet::Range { prefix, .. } => prefix.len(),
            RowSet::Secondary { .. } => 0,
        };
        if i > fixed {
            return Err(unsupported(
                "ORDER BY a key column whose leading key columns are not all given by equality",
            ));
        }
    }
    let out = if aggs.is_empty() {
        Output::Rows(exprs)
    } else {
        Output::Aggs(aggs)
    };
    Ok(Some(p.finish(
        "SELECT",
        Kind::Select { set, out, limit },
        outs,
    )))
}

/// `count(*)`, `sum(e)`, `min(e)`, `max(e)`: the aggregate, its type, its name.
fn aggregate(p: &mut Planner, f: &sql::Function) -> Result<(Agg, SqlType, String), SqlError> {
    let name = f.name.to_string().to_lowercase();
    let kind = match name.as_str() {
        "count" => AggKind::Count,
        "sum" => AggKind::Sum,
        "min" => AggKind::Min,
        "max" => AggKind::Max,
        _ => return Err(unsupported(format!("the function {}", f.name))),
    };
    if f.filter.is_some()
        || f.over.is_some()
        || !f.within_group.is_empty()
        || f.null_treatment.is_some()
        || !matches!(f.parameters, sql::FunctionArguments::None)
    {
        return Err(unsupported(format!("{f}")));
    }
    let sql::FunctionArguments::List(l) = &f.args else {
        return Err(unsupported(format!("{f}")));
    };
    if l.duplicate_treatment.is_some() || !l.clauses.is_empty() || l.args.len() != 1 {
        return Err(unsupported(format!("{f}")));
    }
    let arg = match &l.args[0] {
        sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Wildcard) if kind == AggKind::Count => None,
        sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(e)) => Some(p.expr(e, None, true)?),
        _ => return Err(unsupported(format!("{f}"))),
    };
    let ty = match (&arg, kind) {
        (_, AggKind::Count) => SqlType::Int8,
        (Some(a), _) => match p.type_of(a) {
            Some(SqlType::Int4) if kind == AggKind::Sum => SqlType::Int8,
            Some(t @ (SqlType::Int8 | SqlType::Int4 | SqlType::Float8)) => t,
            Some(t @ (SqlType::Varchar(_) | SqlType::Timestamp)) if kind != AggKind::Sum => t,
            Some(t) => {
                return Err(err(
                    "42883",
                    format!("function {name}({}) does not exist", t.name()),
                ))
            }
            None => return Err(err("42P18", format!("could not determine the type of {f}"))),
        },
        (None, _) => return Err(unsupported(format!("{f}"))),
    };
    // count(e) counts rows: no column is null.
    let arg = if kind == AggKind::Count { None } else { arg };
    Ok((Agg { kind, arg }, ty, name))
}

/// The rows a WHERE selects.
fn row_set(
    p: &mut Planner,
    selection: Option<&sql::Expr>,
    reverse: bool,
) -> Result<RowSet, SqlError> {
    let preds = match selection {
        Some(e) => p.predicates(e)?,
        None => Vec::new(),
    };
    let keyless = p.view.key().iter().any(|k| k.hidden);
    let keys = if keyless {
        Vec::new()
    } else {
        p.key_columns()?
    };
    // Equalities on a prefix of the key parts, bounds on the next.
    let mut eq: Vec<Option<E>> = vec![None; keys.len()];
    let mut lo = None;
    let mut hi = None;
    let mut range_part = None;
    let mut fits_key = !keyless || preds.is_empty();
    for pr in &preds {
        let c = match pr {
            Pred::Eq(c, _) | Pred::Lo(c, ..) | Pred::Hi(c, ..) => *c,
        };
        let Some(part) = keys.iter().position(|&k| k == c) else {
            fits_key = false;
            break;
        };
        match pr {
            Pred::Eq(_, e) if eq[part].is_none() => eq[part] = Some(e.clone()),
            Pred::Lo(_, e, inc) if lo.is_none() && range_part.is_none_or(|r| r == part) => {
                lo = Some((e.clone(), *inc));
                range_part = Some(part);
            }
            Pred::Hi(_, e, inc) if hi.is_none() && range_part.is_none_or(|r| r == part) => {
                hi = Some((e.clone(), *inc));
                range_part = Some(part);
            }
            _ => {
                fits_key = false;
                break;
            }
        }
    }
    if fits_key {
        let prefix_len = eq.iter().take_while(|e| e.is_some()).count();
        let eqs_ok = eq.iter().skip(prefix_len).all(Option::is_none);
        if eqs_ok {
            if prefix_len == keys.len() && !keys.is_empty() && range_part.is_none() {
                return Ok(RowSet::Point(eq.into_iter().flatten().collect()));
            }
            if range_part.is_none_or(|r| r == prefix_len) {
                let prefix: Vec<E> = eq.into_iter().flatten().collect();
                let how = range_how(p, prefix.len(), lo.is_some() || hi.is_some())?;
                return Ok(RowSet::Range {
                    prefix,
                    lo,
                    hi,
                    reverse,
                    how,
                });
            }
        }
    }
    // Equality on a secondary key's columns.
    if preds.iter().all(|pr| matches!(pr, Pred::Eq(..))) && !preds.is_empty() {
        for (si, s) in p.view.secondary.iter().enumerate() {
            let cols: Vec<usize> = s
                .columns
                .iter()
                .filter_map(|n| p.view.columns().iter().position(|c| &c.name == n))
                .collect();
            if cols.len() != preds.len() {
                continue;
            }
            let mut vals: Vec<Option<E>> = vec![None; cols.len()];
            for pr in &preds {
                if let Pred::Eq(c, e) = pr {
                    if let Some(i) = cols.iter().position(|x| x == c) {
                        vals[i] = Some(e.clone());
                    }
                }
            }
            if vals.iter().all(Option::is_some) {
                if !p.catalog.secondary_is_routed(p.table, s.index) {
                    return Err(unsupported(format!(
                        "a lookup by {} on {} (its rows are not placed by that key)",
                        s.columns.join(", "),
                        p.table_name()
                    )));
                }
                return Ok(RowSet::Secondary {
                    sec: si,
                    vals: vals.into_iter().flatten().collect(),
                    cols,
                    reverse,
                });
            }
        }
    }
    let keys: Vec<&str> = keys
        .iter()
        .map(|&c| p.view.columns()[c].name.as_str())
        .collect();
    Err(unsupported(format!(
        "this WHERE on {} (conditions go on the primary key ({}), a prefix of it and a range \
         on the next key column, or a secondary key's columns)",
        p.table_name(),
        keys.join(", ")
    )))
}

/// How a range on the key part after an equality prefix of `prefix` parts
/// is read; `bounded`: whether it has a bound.
fn range_how(p: &Planner, prefix: usize, bounded: bool) -> Result<RangeHow, SqlError> {
    let local = p.view.local_prefix.is_some_and(|n| prefix >= n);
    if p.ordered() && local {
        return Ok(RangeHow::Scan);
    }
    if p.ordered() && p.view.local_prefix == Some(1) && p.view.domain.is_some() && prefix == 0 {
        return Ok(RangeHow::PerPrefix);
    }
    if prefix == 0 && !bounded && p.view.domain.is_none() {
        return Err(unsupported(format!(
            "a read of all of {} (its rows lie on several islands and it declares no key domain)",
            p.table_name()
        )));
    }
    Ok(RangeHow::Points)
}

/// The columns of an INSERT or UPDATE target, resolved.
fn target_columns(p: &Planner, names: &[sql::ObjectName]) -> Result<Vec<usize>, SqlError> {
    let mut out = Vec::new();
    for n in names {
        let name = match n.0.as_slice() {
            [sql::ObjectNamePart::Identifier(i)] => ident(i),
            _ => return Err(unsupported(format!("the column {n}"))),
        };
        let c = p.column(&name)?;
        if out.contains(&c) {
            return Err(err(
                "42701",
                format!("column \"{name}\" specified more than once"),
            ));
        }
        out.push(c);
    }
    Ok(out)
}

fn plan_insert(i: &sql::Insert, catalog: &Catalog) -> Result<TablePlan, SqlError> {
    let sql::TableObject::TableName(name) = &i.table else {
        return Err(unsupported("INSERT INTO a function"));
    };
    let table = table_of(name, catalog)?
        .ok_or_else(|| err("42501", format!("{name} is a system catalog, read-only")))?;
    let p_ = Planner::new(catalog, table);
    let mut p = p_;
    if i.returning.is_some() {
        return Err(unsupported("RETURNING"));
    }
    if i.on.is_some() {
        return Err(unsupported("ON CONFLICT"));
    }
    if i.or.is_some()
        || i.ignore
        || i.overwrite
        || !i.assignments.is_empty()
        || i.partitioned.is_some()
        || !i.after_columns.is_empty()
        || i.output.is_some()
        || i.replace_into
        || i.priority.is_some()
        || i.insert_alias.is_some()
        || i.settings.is_some()
        || i.overriding.is_some()
        || i.by_name
        || i.has_table_keyword
    {
        return Err(unsupported("this INSERT clause"));
    }
    if p.fixed_keys() {
        return Err(unsupported(format!(
            "INSERT into {} (its rows are fixed: only updated)",
            p.table_name()
        )));
    }
    if p.view.key().iter().any(|k| k.hidden) && !p.view.is_keyless() {
        return Err(unsupported(format!(
            "INSERT into {} (it has no key SQL can give or allocate)",
            p.table_name()
        )));
    }
    let Some(src) = &i.source else {
        return Err(unsupported("INSERT without VALUES"));
    };
    if src.with.is_some()
        || src.order_by.is_some()
        || src.limit_clause.is_some()
        || src.fetch.is_some()
    {
        return Err(unsupported("INSERT ... SELECT"));
    }
    let sql::SetExpr::Values(values) = src.body.as_ref() else {
        return Err(unsupported("INSERT ... SELECT"));
    };
    let cols = if i.columns.is_empty() {
        (0..p.view.columns().len()).collect()
    } else {
        target_columns(&p, &i.columns)?
    };
    if p.view.is_keyless() {
        if let Some(a) = &p.view.alloc {
            if !cols.contains(&a.home_column) {
                let n = p.view.columns()[a.home_column].name.clone();
                return Err(err(
                    "23502",
                    format!(
                        "null value in column \"{n}\" of relation \"{}\"",
                        p.table_name()
                    ),
                ));
            }
        }
    }
    let mut rows = Vec::with_capacity(values.rows.len());
    for r in &values.rows {
        let r = &r.content;
        if r.len() > cols.len() {
            return Err(err(
                "42601",
                "INSERT has more expressions than target columns".into(),
            ));
        }
        let mut row: Vec<Option<E>> = vec![None; p.view.columns().len()];
        for (e, &c) in r.iter().zip(&cols) {
            let t = p.col_type(c);
            row[c] = Some(p.const_expr(e, Some(t))?);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(unsupported("INSERT without rows"));
    }
    Ok(p.finish("INSERT 0", Kind::Insert { rows }, Vec::new()))
}

fn plan_update(u: &sql::Update, catalog: &Catalog) -> Result<TablePlan, SqlError> {
    let sql::TableFactor::Table {
        name,
        alias,
        args: None,
        ..
    } = &u.table.relation
    else {
        return Err(unsupported(format!("UPDATE of {}", u.table.relation)));
    };
    let table = table_of(name, catalog)?
        .ok_or_else(|| err("42501", format!("{name} is a system catalog, read-only")))?;
    let mut p = Planner::new(catalog, table);
    if let Some(a) = alias {
        p.quals = vec![ident(&a.name)];
    }
    if u.returning.is_some() {
        return Err(unsupported("RETURNING"));
    }
    if !u.table.joins.is_empty() || u.from.is_some() {
        return Err(unsupported("UPDATE ... FROM"));
    }
    if u.on_cluster.is_some()
        || u.output.is_some()
        || u.or.is_some()
        || !u.order_by.is_empty()
        || u.limit.is_some()
        || u.settings.is_some()
    {
        return Err(unsupported("this UPDATE clause"));
    }
    let mut sets = Vec::new();
    for a in &u.assignments {
        let sql::AssignmentTarget::ColumnName(n) = &a.target else {
            return Err(unsupported("a tuple assignment"));
        };
        let c = target_columns(&p, std::slice::from_ref(n))?[0];
        if sets.iter().any(|(x, _)| *x == c) {
            return Err(err(
                "42601",
                format!("multiple assignments to the same column \"{n}\""),
            ));
        }
        if matches!(p.view.columns()[c].source, SqlSource::Key(_)) {
            return Err(unsupported(format!("an UPDATE of key column {n}")));
        }
        let t = p.col_type(c);
        sets.push((c, p.expr(&a.value, Some(t), true)?));
    }
    let key = p.point_where(u.selection.as_ref(), "UPDATE")?;
    Ok(p.finish("UPDATE", Kind::Update { key, sets }, Vec::new()))
}

fn plan_delete(d: &sql::Delete, catalog: &Catalog) -> Result<TablePlan, SqlError> {
    let from = match &d.from {
        sql::FromTable::WithFromKeyword(f) | sql::FromTable::WithoutKeyword(f) => f,
    };
    let [t] = from.as_slice() else {
        return Err(unsupported("DELETE from several tables"));
    };
    let sql::TableFactor::Table {
        name,
        alias,
        args: None,
        ..
    } = &t.relation
    else {
        return Err(unsupported(format!("DELETE from {}", t.relation)));
    };
    let table = table_of(name, catalog)?
        .ok_or_else(|| err("42501", format!("{name} is a system catalog, read-only")))?;
    let mut p = Planner::new(catalog, table);
    if let Some(a) = alias {
        p.quals = vec![ident(&a.name)];
    }
    if d.returning.is_some() {
        return Err(unsupported("RETURNING"));
    }
    if !t.joins.is_empty() || d.using.is_some() || !d.tables.is_empty() {
        return Err(unsupported("DELETE ... USING"));
    }
    if d.on_cluster.is_some()
        || d.output.is_some()
        || !d.order_by.is_empty()
        || d.limit.is_some()
        || d.settings.is_some()
    {
        return Err(unsupported("this DELETE clause"));
    }
    if p.fixed_keys() {
        return Err(unsupported(format!(
            "DELETE from {} (its rows are fixed: only updated)",
            p.table_name()
        )));
    }
    let key = p.point_where(d.selection.as_ref(), "DELETE")?;
    Ok(p.finish("DELETE", Kind::Delete { key }, Vec::new()))
}

// ---- running -------------------------------------------------------------

/// What an expression is evaluated against.
struct Ctx<'a> {
    params: &'a [Value],
    param_sql: &'a [SqlType],
    now: i64,
}

fn user(m: &'static str) -> Abort {
    if m == OUT_OF_RANGE {
        Abort::Failed(Error::OutOfRange(
            "value out of range for its column's type".into(),
        ))
    } else if m == BAD_NUMBER {
        Abort::User(sql_abort::PARAM_TYPE)
    } else {
        Abort::User(m)
    }
}

fn range_err(what: impl std::fmt::Display) -> Abort {
    Abort::Failed(Error::OutOfRange(what.to_string()))
}

/// A view column's value in a row (a timestamp as its microseconds).
fn read_col(view: &SqlTable, c: usize, key: u64, r: RowRef<'_>) -> Result<Value, Abort> {
    let col = &view.columns()[c];
    Ok(match col.source {
        SqlSource::Key(i) => {
            let part = &view.key()[i];
            let v = (key >> part.shift) & part.max();
            Value::Int(i64::try_from(v).map_err(|_| range_err(format!("key {v} exceeds int8")))?)
        }
        SqlSource::Stored(s) => match r.schema.columns[s.0 as usize].ty {
            ColType::I32 => Value::Int(r.i32(s).into()),
            ColType::I64 => Value::Int(r.i64(s)),
            ColType::U64 => {
                let v = r.u64(s);
                Value::Int(
                    i64::try_from(v)
                        .map_err(|_| range_err(format!("{} {v} exceeds int8", col.name)))?,
                )
            }
            ColType::F64 => Value::Float(r.f64(s)),
            ColType::Str(_) => Value::Str(String::from_utf8_lossy(r.str(s)).into_owned()),
        },
    })
}

/// Stores `v` into a view column of a row (keys are not stored here).
fn store(view: &SqlTable, c: usize, v: Value, w: &mut RowMut<'_>) -> Result<(), Abort> {
    let col = &view.columns()[c];
    let SqlSource::Stored(s) = col.source else {
        return Ok(());
    };
    let v = cast_value(v, col.ty).map_err(user)?;
    let ct = w.schema.columns[s.0 as usize].ty;
    match (v, ct) {
        (Value::Null, _) => return Err(Abort::User(sql_abort::NOT_NULL)),
        (Value::Int(i), ColType::I64) => w.set_i64(s, i),
        (Value::Int(i), ColType::I32) => w.set_i32(
            s,
            i32::try_from(i).map_err(|_| range_err(format!("{} {i} exceeds int4", col.name)))?,
        ),
        (Value::Int(i), ColType::U64) => w.set_u64(
            s,
            u64::try_from(i).map_err(|_| range_err(format!("{} {i} is negative", col.name)))?,
        ),
        (Value::Float(f), ColType::F64) => w.set_f64(s, f),
        (Value::Str(t), ColType::Str(n)) => {
            if t.len() > n as usize {
                return Err(Abort::User(sql_abort::TOO_LONG));
            }
            if t.as_bytes().contains(&0) {
                return Err(Abort::User(sql_abort::PARAM_TYPE));
            }
            w.set_str(s, t.as_bytes())
        }
        _ => return Err(Abort::User(sql_abort::PARAM_TYPE)),
    }
    Ok(())
}

fn arith(op: Op, a: Value, b: Value) -> Result<Value, Abort> {
    Ok(match (a, b) {
        (Value::Null, _) | (_, Value::Null) => Value::Null,
        (Value::Int(x), Value::Int(y)) => {
            let r = match op {
                Op::Add => x.checked_add(y),
                Op::Sub => x.checked_sub(y),
                Op::Mul => x.checked_mul(y),
                Op::Div => {
                    if y == 0 {
                        return Err(Abort::User(sql_abort::DIVISION_BY_ZERO));
                    }
                    x.checked_div(y)
                }
            };
            Value::Int(r.ok_or_else(|| range_err(format!("bigint out of range: {x} {op:?} {y}")))?)
        }
        (a, b) => {
            let f = |v: Value| match v {
                Value::Int(i) => Ok(i as f64),
                Value::Float(f) => Ok(f),
                _ => Err(Abort::User(sql_abort::PARAM_TYPE)),
            };
            let (x, y) = (f(a)?, f(b)?);
            if op == Op::Div && y == 0.0 {
                return Err(Abort::User(sql_abort::DIVISION_BY_ZERO));
            }
            let r = match op {
                Op::Add => x + y,
                Op::Sub => x - y,
                Op::Mul => x * y,
                Op::Div => x / y,
            };
            if !r.is_finite() {
                return Err(range_err("double precision out of range"));
            }
            Value::Float(r)
        }
    })
}

impl E {
    /// Its value, given the row it is evaluated on (if any).
    fn eval(
        &self,
        cx: &Ctx,
        view: &SqlTable,
        row: Option<(u64, RowRef<'_>)>,
    ) -> Result<Value, Abort> {
        match self {
            E::Col(c) => match row {
                Some((k, r)) => read_col(view, *c, k, r),
                None => Err(Abort::User(sql_abort::PARAM_TYPE)),
            },
            E::Param(i) => {
                let v = cx
                    .params
                    .get(*i)
                    .ok_or(Abort::User(sql_abort::PARAM_TYPE))?;
                match (v, cx.param_sql[*i]) {
                    (Value::Int(x), SqlType::Int8 | SqlType::Int4 | SqlType::Timestamp) => {
                        Ok(Value::Int(*x))
                    }
                    (Value::Float(x), SqlType::Float8) => Ok(Value::Float(*x)),
                    (Value::Null, _) => Ok(Value::Null),
                    (v, t) => cast_value(v.clone(), t).map_err(user),
                }
            }
            E::Lit(v) => Ok(v.clone()),
            E::Now => Ok(Value::Int(cx.now)),
            E::Neg(x) => match x.eval(cx, view, row)? {
                Value::Int(i) => Ok(Value::Int(
                    i.checked_neg()
                        .ok_or_else(|| range_err("bigint out of range"))?,
                )),
                Value::Float(f) => Ok(Value::Float(-f)),
                Value::Null => Ok(Value::Null),
                _ => Err(Abort::User(sql_abort::PARAM_TYPE)),
            },
            E::Bin(op, a, b) => arith(*op, a.eval(cx, view, row)?, b.eval(cx, view, row)?),
            E::Cast(x, t) => cast_value(x.eval(cx, view, row)?, *t).map_err(user),
        }
    }

    /// Its value as a key part `part` (`None`: no key holds it).
    fn key_part(&self, cx: &Ctx, view: &SqlTable, part: usize) -> Result<Option<u64>, Abort> {
        match self.eval(cx, view, None)? {
            Value::Int(v) => Ok(u64::try_from(v)
                .ok()
                .filter(|&v| v <= view.key()[part].max())),
            Value::Null => Ok(None),
            _ => Err(Abort::User(sql_abort::PARAM_TYPE)),
        }
    }
}

/// A running aggregate.
enum Acc {
    Count(i64),
    Sum(Option<Value>),
    Min(Option<Value>),
    Max(Option<Value>),
}

fn less(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x < y,
        (Value::Float(x), Value::Float(y)) => x < y,
        (Value::Str(x), Value::Str(y)) => x < y,
        _ => false,
    }
}

impl Acc {
    fn new(k: AggKind) -> Acc {
        match k {
            AggKind::Count => Acc::Count(0),
            AggKind::Sum => Acc::Sum(None),
            AggKind::Min => Acc::Min(None),
            AggKind::Max => Acc::Max(None),
        }
    }

    fn add(&mut self, v: Option<Value>) -> Result<(), Abort> {
        match (self, v) {
            (Acc::Count(n), _) => *n += 1,
            (Acc::Sum(s), Some(v)) => {
                *s = Some(match s.take() {
                    None => v,
                    Some(t) => arith(Op::Add, t, v)?,
                })
            }
            (Acc::Min(m), Some(v)) if m.as_ref().is_none_or(|x| less(&v, x)) => *m = Some(v),
            (Acc::Max(m), Some(v)) if m.as_ref().is_none_or(|x| less(x, &v)) => *m = Some(v),
            _ => {}
        }
        Ok(())
    }

    fn value(self) -> Value {
        match self {
            Acc::Count(n) => Value::Int(n),
            Acc::Sum(v) | Acc::Min(v) | Acc::Max(v) => v.unwrap_or(Value::Null),
        }
    }
}

/// The key range `[lo, hi]` of an equality prefix and bounds on the next
/// part, and that part's value bounds; `None`: empty.
struct KeyRange {
    base: u64,
    part: Option<usize>,
    lo: u64,
    hi: u64,
}

impl KeyRange {
    fn keys(&self, view: &SqlTable, v_lo: u64, v_hi: u64) -> (u64, u64) {
        match self.part {
            Some(p) => {
                let part = &view.key()[p];
                let low = if part.shift == 0 {
                    0
                } else {
                    (1u64 << part.shift) - 1
                };
                (
                    self.base | v_lo << part.shift,
                    self.base | v_hi << part.shift | low,
                )
            }
            None => (self.base, self.base),
        }
    }
}

impl TablePlan {
    /// The type of each `$n` (inferred from the column it is compared to or assigned).
    pub(crate) fn param_types(&self) -> &[Type] {
        &self.param_types
    }

    /// Result columns (name, type); empty for INSERT/UPDATE/DELETE.
    pub(crate) fn columns(&self) -> &[(String, Type)] {
        &self.columns
    }

    /// The command tag: "SELECT", "INSERT 0", "UPDATE", "DELETE" (the row count is added by the caller).
    pub(crate) fn tag(&self) -> &'static str {
        self.tag
    }

    /// The table the statement works on.
    #[cfg(test)]
    pub(crate) fn table(&self) -> TableId {
        self.table
    }

    fn ctx<'a>(&'a self, params: &'a [Value]) -> Ctx<'a> {
        Ctx {
            params,
            param_sql: &self.param_sql,
            now: 0,
        }
    }

    /// The packed key of a full set of key-part expressions (`None`: no key holds it).
    fn pack(&self, cx: &Ctx, key: &[E]) -> Result<Option<u64>, Abort> {
        let mut k = 0u64;
        for (i, e) in key.iter().enumerate() {
            let Some(v) = e.key_part(cx, &self.view, i)? else {
                return Ok(None);
            };
            if i == 0 && self.view.domain.is_some_and(|(lo, hi)| v < lo || v > hi) {
                return Ok(None);
            }
            k |= v << self.view.key()[i].shift;
        }
        Ok(Some(k))
    }

    /// The table and key that decide the statement's home island, given its parameters.
    pub(crate) fn home_key(&self, params: &[Value]) -> Option<(TableId, u64)> {
        let cx = self.ctx(params);
        match &self.kind {
            Kind::Select { set, .. } => match set {
                RowSet::Point(key) => Some((self.table, self.pack(&cx, key).ok()??)),
                RowSet::Range { .. } => {
                    let r = self.key_range(&cx, set).ok()??;
                    Some((self.table, r.keys(&self.view, r.lo, r.hi).0))
                }
                RowSet::Secondary { .. } => None,
            },
            Kind::Update { key, .. } | Kind::Delete { key } => {
                Some((self.table, self.pack(&cx, key).ok()??))
            }
            Kind::Insert { rows } => {
                let row = rows.first()?;
                if let Some(a) = &self.view.alloc {
                    let v = row[a.home_column]
                        .as_ref()?
                        .eval(&cx, &self.view, None)
                        .ok()?;
                    return Some((a.home_table, u64::try_from(v.as_int()?).ok()?));
                }
                let mut k = 0u64;
                for (i, part) in self.view.key().iter().enumerate() {
                    let c = self
                        .view
                        .columns()
                        .iter()
                        .position(|c| c.source == SqlSource::Key(i))?;
                    let v = row[c].as_ref()?.key_part(&cx, &self.view, i).ok()??;
                    k |= v << part.shift;
                }
                Some((self.table, k))
            }
        }
    }

    /// The keys of a range row set (`None`: empty).
    fn key_range(&self, cx: &Ctx, set: &RowSet) -> Result<Option<KeyRange>, Abort> {
        let RowSet::Range { prefix, lo, hi, .. } = set else {
            return Ok(None);
        };
        let mut base = 0u64;
        for (i, e) in prefix.iter().enumerate() {
            let Some(v) = e.key_part(cx, &self.view, i)? else {
                return Ok(None);
            };
            if i == 0 && self.view.domain.is_some_and(|(a, b)| v < a || v > b) {
                return Ok(None);
            }
            base |= v << self.view.key()[i].shift;
        }
        let p = prefix.len();
        if p >= self.view.key().len() {
            return Ok(Some(KeyRange {
                base,
                part: None,
                lo: 0,
                hi: 0,
            }));
        }
        let max = self.view.key()[p].max();
        let (mut vlo, mut vhi) = (0u64, max);
        if p == 0 {
            if let Some((a, b)) = self.view.domain {
                vlo = a;
                vhi = b.min(max);
            }
        }
        let bound = |e: &E| -> Result<Option<i128>, Abort> {
            match e.eval(cx, &self.view, None)? {
                Value::Int(v) => Ok(Some(v.into())),
                Value::Float(f) => Ok(Some(f as i128)),
                Value::Null => Ok(None),
                _ => Err(Abort::User(sql_abort::PARAM_TYPE)),
            }
        };
        if let Some((e, inc)) = lo {
            // A NULL bound selects nothing, as in SQL.
            let Some(v) = bound(e)? else { return Ok(None) };
            let v = if *inc { v } else { v + 1 };
            if v > i128::from(max) {
                return Ok(None);
            }
            vlo = vlo.max(v.max(0) as u64);
        }
        if let Some((e, inc)) = hi {
            let Some(v) = bound(e)? else { return Ok(None) };
            let v = if *inc { v } else { v - 1 };
            if v < 0 {
                return Ok(None);
            }
            vhi = vhi.min(v.min(i128::from(max)) as u64);
        }
        if vlo > vhi {
            return Ok(None);
        }
        Ok(Some(KeyRange {
            base,
            part: Some(p),
            lo: vlo,
            hi: vhi,
        }))
    }

    /// Runs it; pushes result rows to `out`; returns the number of rows affected/returned.
    pub(crate) async fn run(
        &self,
        tx: &mut Txn,
        params: &[Value],
        out: &mut Vec<Row>,
    ) -> Result<u64, Abort> {
        if params.len() < self.param_sql.len() {
            return Err(Abort::User(sql_abort::PARAM_TYPE));
        }
        let mut cx = self.ctx(params);
        cx.now = now_micros();
        let view = &*self.view;
        match &self.kind {
            Kind::Select { set, out: o, limit } => {
                let limit = match limit {
                    None => u64::MAX,
                    Some(e) => match e.eval(&cx, view, None)? {
                        Value::Int(n) if n >= 0 => n as u64,
                        Value::Null => u64::MAX,
                        Value::Int(_) => return Err(range_err("LIMIT must not be negative")),
                        _ => return Err(Abort::User(sql_abort::PARAM_TYPE)),
                    },
                };
                match o {
                    Output::Rows(exprs) => {
                        let mut n = 0u64;
                        if limit == 0 {
                            return Ok(0);
                        }
                        self.for_rows(tx, &cx, set, limit, &mut |tx, h| {
                            let r = tx.row(h);
                            let k = tx.key(h);
                            let mut row = Vec::with_capacity(exprs.len());
                            for (e, t) in exprs.iter().zip(&self.out_types) {
                                row.push(output(e.eval(&cx, view, Some((k, r)))?, *t));
                            }
                            out.push(row);
                            n += 1;
                            Ok(())
                        })
                        .await?;
                        Ok(n)
                    }
                    Output::Aggs(aggs) => {
                        let mut acc: Vec<Acc> = aggs.iter().map(|a| Acc::new(a.kind)).collect();
                        self.for_rows(tx, &cx, set, u64::MAX, &mut |tx, h| {
                            let r = tx.row(h);
                            let k = tx.key(h);
                            for (a, x) in aggs.iter().zip(acc.iter_mut()) {
                                let v = match &a.arg {
                                    Some(e) => Some(e.eval(&cx, view, Some((k, r)))?),
                                    None => None,
                                };
                                x.add(v)?;
                            }
                            Ok(())
                        })
                        .await?;
                        if limit == 0 {
                            return Ok(0);
                        }
                        out.push(
                            acc.into_iter()
                                .zip(&self.out_types)
                                .map(|(a, t)| output(a.value(), *t))
                                .collect(),
                        );
                        Ok(1)
                    }
                }
            }
            Kind::Update { key, sets } => {
                let Some(k) = self.pack(&cx, key)? else {
                    return Ok(0);
                };
                let Some(h) = tx.get_for_update(self.table, k).await? else {
                    return Ok(0);
                };
                if let [(c, e)] = sets.as_slice() {
                    let v = e.eval(&cx, view, Some((k, tx.row(h))))?;
                    store(view, *c, v, &mut tx.row_mut(h))?;
                } else {
                    let r = tx.row(h);
                    let vals = sets
                        .iter()
                        .map(|(_, e)| e.eval(&cx, view, Some((k, r))))
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut w = tx.row_mut(h);
                    for ((c, _), v) in sets.iter().zip(vals) {
                        store(view, *c, v, &mut w)?;
                    }
                }
                if let Some(f) = view.on_write {
                    f(k, &mut tx.row_mut(h));
                }
                Ok(1)
            }
            Kind::Delete { key } => {
                let Some(k) = self.pack(&cx, key)? else {
                    return Ok(0);
                };
                let Some(h) = tx.get_for_update(self.table, k).await? else {
                    return Ok(0);
                };
                tx.delete(h).await?;
                Ok(1)
            }
            Kind::Insert { rows } => {
                let mut keys: Vec<u64> = Vec::new();
                for row in rows {
                    let mut vals = Vec::with_capacity(row.len());
                    for (c, e) in row.iter().enumerate() {
                        let ty = view.columns()[c].ty;
                        let v = match e {
                            Some(e) => cast_value(e.eval(&cx, view, None)?, ty).map_err(user)?,
                            // A key column has no default.
                            None if matches!(view.columns()[c].source, SqlSource::Key(_)) => {
                                return Err(Abort::User(sql_abort::NOT_NULL))
                            }
                            None => default_of(ty),
                        };
                        vals.push(v);
                    }
                    let k = match &view.alloc {
                        Some(a) => {
                            if vals[a.home_column] == Value::Null {
                                return Err(Abort::User(sql_abort::NOT_NULL));
                            }
                            (a.alloc)(tx, &vals).await?
                        }
                        None => {
                            let mut k = 0u64;
                            for (i, part) in view.key().iter().enumerate() {
                                let c = view
                                    .columns()
                                    .iter()
                                    .position(|c| c.source == SqlSource::Key(i))
                                    .ok_or(Abort::User(sql_abort::NOT_NULL))?;
                                let v = match &vals[c] {
                                    Value::Int(v) => u64::try_from(*v)
                                        .ok()
                                        .filter(|&v| v <= part.max())
                                        .ok_or_else(|| {
                                            range_err(format!(
                                                "key column {} value {v} is outside 0..={}",
                                                part.name,
                                                part.max()
                                            ))
                                        })?,
                                    Value::Null => return Err(Abort::User(sql_abort::NOT_NULL)),
                                    _ => return Err(Abort::User(sql_abort::PARAM_TYPE)),
                                };
                                if i == 0 && view.domain.is_some_and(|(lo, hi)| v < lo || v > hi) {
                                    return Err(Abort::User(sql_abort::CHECK));
                                }
                                k |= v << part.shift;
                            }
                            k
                        }
                    };
                    if rows.len() > 1 {
                        if keys.contains(&k) {
                            return Err(Abort::User(sql_abort::DUPLICATE_KEY));
                        }
                        keys.push(k);
                    }
                    let h = tx
                        .insert(self.table, k)
                        .await?
                        .ok_or(Abort::User(sql_abort::DUPLICATE_KEY))?;
                    let mut w = tx.row_mut(h);
                    for (c, v) in vals.into_iter().enumerate() {
                        store(view, c, v, &mut w)?;
                    }
                    for (i, part) in view.key().iter().enumerate() {
                        if let Some(s) = part.stored {
                            let v = (k >> part.shift) & part.max();
                            match w.schema.columns[s.0 as usize].ty {
                                ColType::I32 => w.set_i32(s, v as i32),
                                ColType::I64 => w.set_i64(s, v as i64),
                                ColType::U64 => w.set_u64(s, v),
                                _ => {}
                            }
                            let _ = i;
                        }
                    }
                    if let Some(f) = view.on_write {
                        f(k, &mut w);
                    }
                }
                Ok(rows.len() as u64)
            }
        }
    }

    /// Calls `f` on each row of `set`, in key order (reversed if asked), at
    /// most `limit` of them.
    async fn for_rows(
        &self,
        tx: &mut Txn,
        cx: &Ctx<'_>,
        set: &RowSet,
        limit: u64,
        f: &mut dyn FnMut(&mut Txn, RowH) -> Result<(), Abort>,
    ) -> Result<(), Abort> {
        match set {
            RowSet::Point(key) => {
                if let Some(k) = self.pack(cx, key)? {
                    if let Some(h) = tx.get(self.table, k).await? {
                        f(tx, h)?;
                    }
                }
                Ok(())
            }
            RowSet::Range { reverse, how, .. } => {
                let Some(r) = self.key_range(cx, set)? else {
                    return Ok(());
                };
                let mut left = limit;
                let reverse = *reverse;
                match how {
                    RangeHow::Scan => {
                        let (lo, hi) = r.keys(&self.view, r.lo, r.hi);
                        self.scan(tx, lo, hi, &mut left, reverse, f).await
                    }
                    RangeHow::PerPrefix => {
                        let part = &self.view.key()[0];
                        let low = if part.shift == 0 {
                            0
                        } else {
                            (1u64 << part.shift) - 1
                        };
                        let mut v = if reverse { r.hi } else { r.lo };
                        loop {
                            if left == 0 {
                                return Ok(());
                            }
                            let base = v << part.shift;
                            self.scan(tx, base, base | low, &mut left, reverse, f)
                                .await?;
                            if reverse {
                                if v == r.lo {
                                    return Ok(());
                                }
                                v -= 1;
                            } else {
                                if v == r.hi {
                                    return Ok(());
                                }
                                v += 1;
                            }
                        }
                    }
                    RangeHow::Points => {
                        let (lo, hi) = r.keys(&self.view, r.lo, r.hi);
                        if hi - lo >= POINT_RANGE_MAX {
                            return Err(Abort::User(RANGE_TOO_LARGE));
                        }
                        let mut k = if reverse { hi } else { lo };
                        loop {
                            if left == 0 {
                                return Ok(());
                            }
                            if let Some(h) = tx.get(self.table, k).await? {
                                f(tx, h)?;
                                left -= 1;
                            }
                            if reverse {
                                if k == lo {
                                    return Ok(());
                                }
                                k -= 1;
                            } else {
                                if k == hi {
                                    return Ok(());
                                }
                                k += 1;
                            }
                        }
                    }
                }
            }
            RowSet::Secondary {
                sec,
                vals,
                cols,
                reverse,
            } => {
                let s = &self.view.secondary[*sec];
                let want = vals
                    .iter()
                    .zip(cols)
                    .map(|(e, &c)| {
                        cast_value(e.eval(cx, &self.view, None)?, self.view.columns()[c].ty)
                            .map_err(user)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let Some(skey) = (s.pack)(&want) else {
                    return Ok(());
                };
                let n = tx
                    .scan_secondary(self.table, s.index, skey, usize::MAX, *reverse)
                    .await?;
                let hs: Vec<RowH> = (0..n).map(|i| tx.scan_row(i)).collect();
                let mut left = limit;
                for h in hs {
                    if left == 0 {
                        break;
                    }
                    let k = tx.key(h);
                    let mut all = true;
                    for (&c, w) in cols.iter().zip(&want) {
                        if read_col(&self.view, c, k, tx.row(h))? != *w {
                            all = false;
                            break;
                        }
                    }
                    if all {
                        f(tx, h)?;
                        left -= 1;
                    }
                }
                Ok(())
            }
        }
    }

    /// One ordered scan of keys `[lo, hi]`, at most `left` rows (counted down).
    async fn scan(
        &self,
        tx: &mut Txn,
        lo: u64,
        hi: u64,
        left: &mut u64,
        reverse: bool,
        f: &mut dyn FnMut(&mut Txn, RowH) -> Result<(), Abort>,
    ) -> Result<(), Abort> {
        let n = tx
            .scan(
                self.table,
                lo,
                hi,
                usize::try_from(*left).unwrap_or(usize::MAX),
                reverse,
            )
            .await?;
        if n == 0 {
            return Ok(());
        }
        let hs: Vec<RowH> = (0..n).map(|i| tx.scan_row(i)).collect();
        for h in hs {
            f(tx, h)?;
            *left -= 1;
        }
        let _ = self.ordered;
        Ok(())
    }
}

/// The message of a range read refused as too large.
pub(crate) const RANGE_TOO_LARGE: &str =
    "a key range whose rows lie on several islands covers more than 4194304 keys";

/// A result value as the client sees it (a timestamp as its text).
fn output(v: Value, t: SqlType) -> Value {
    match (v, t) {
        (Value::Int(m), SqlType::Timestamp) => Value::Str(format_timestamp(m)),
        (v, _) => v,
    }
}

/// An omitted column's value: zero, or the empty string.
fn default_of(t: SqlType) -> Value {
    match t {
        SqlType::Int8 | SqlType::Int4 | SqlType::Timestamp => Value::Int(0),
        SqlType::Float8 => Value::Float(0.0),
        SqlType::Varchar(_) => Value::Str(String::new()),
    }
}

/// The SQLSTATE a server answers for a user abort of a table statement
/// (`None`: not one of theirs; the caller's default applies).
pub(crate) fn abort_sqlstate(why: &str) -> Option<&'static str> {
    if why == RANGE_TOO_LARGE {
        return Some("54000");
    }
    crate::api::sql_abort_state(why)
}

/// Plans `sql` (one statement) on `catalog`'s tables and runs it in `tx`:
/// what a data set's tests use to run SQL inside a procedure. A statement
/// that does not plan fails the transaction with its SQLSTATE and message.
#[doc(hidden)]
pub async fn run_sql(
    tx: &mut Txn,
    catalog: &Catalog,
    sql: &str,
    params: &[Value],
    out: &mut Vec<Row>,
) -> Result<u64, Abort> {
    let failed = |code: &str, m: &str| Abort::Failed(Error::Config(format!("{code}: {m}")));
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let stmts = sqlparser::parser::Parser::new(&dialect)
        .with_recursion_limit(64)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| failed("42601", &e.to_string()))?;
    let [stmt] = stmts.as_slice() else {
        return Err(failed("42601", "one statement expected"));
    };
    let plan = plan(stmt, catalog)
        .map_err(|e| failed(e.code, &e.message))?
        .ok_or_else(|| failed("42P01", "not a statement on a table"))?;
    plan.run(tx, params, out).await
}

/// The result columns and parameter types of `sql` (one statement) on
/// `catalog`'s tables, or its SQLSTATE and message: what a data set's tests
/// use to check the names its tables show.
#[doc(hidden)]
pub fn describe(sql: &str, catalog: &Catalog) -> Result<DescribedSql, (String, String)> {
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let stmt = sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statement())
        .map_err(|e| ("42601".to_string(), e.to_string()))?;
    let p = plan(&stmt, catalog)
        .map_err(|e| (e.code.to_string(), e.message))?
        .ok_or_else(|| {
            (
                "42P01".to_string(),
                "not a statement on a table".to_string(),
            )
        })?;
    Ok((p.columns().to_vec(), p.param_types().to_vec()))
}

/// What [`describe`] tells: result columns and parameter types.
pub type DescribedSql = (Vec<(String, Type)>, Vec<Type>);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use sqlparser::dialect::PostgreSqlDialect;
    use sqlparser::parser::Parser;

    use super::*;
    use crate::api::{Partition, SqlTable};
    use crate::cc::CcKind;
    use crate::island::{Island, IslandConfig};
    use crate::storage::{ColType, TableDef};

    const KV: TableId = 0;
    const H: TableId = 1;
    const C: TableId = 2;

    /// Tables: `kv` (ordered; k, v int8, s varchar(8), f float8, n int4,
    /// ts timestamp), `h` (hash, keys 0..=99; k, v), `c` (ordered, key
    /// (a, b) packed a << 16 | b, a in 0..=9; x).
    fn catalog() -> Catalog {
        let mut c = Catalog::new();
        let kv = c.table(
            TableDef::new(
                "kv",
                &[
                    ("v", ColType::I64),
                    ("s", ColType::Str(8)),
                    ("f", ColType::F64),
                    ("n", ColType::I32),
                    ("ts", ColType::I64),
                ],
                1 << 12,
                PrimaryKind::Ordered,
            ),
            Partition::BySite(|_| 0),
        );
        c.sql(
            kv,
            SqlTable::new()
                .key_column("k", SqlType::Int8, 0, 63)
                .column("v", SqlType::Int8, "v")
                .column("s", SqlType::Varchar(8), "s")
                .column("f", SqlType::Float8, "f")
                .column("n", SqlType::Int4, "n")
                .column("ts", SqlType::Timestamp, "ts")
                .local_prefix(0),
        )
        .unwrap();
        let h = c.table(
            TableDef::new("h", &[("v", ColType::I64)], 1024, PrimaryKind::Hash),
            Partition::BySite(|_| 0),
        );
        c.sql(
            h,
            SqlTable::new()
                .key_column("k", SqlType::Int8, 0, 63)
                .column("v", SqlType::Int8, "v")
                .domain(0, 99),
        )
        .unwrap();
        let t = c.table(
            TableDef::new("c", &[("x", ColType::I64)], 1 << 12, PrimaryKind::Ordered),
            Partition::BySite(|_| 0),
        );
        c.sql(
            t,
            SqlTable::new()
                .key_column("a", SqlType::Int4, 16, 16)
                .key_column("b", SqlType::Int4, 0, 16)
                .column("x", SqlType::Int8, "x")
                .local_prefix(1)
                .domain(0, 9),
        )
        .unwrap();
        assert_eq!((kv, h, t), (KV, H, C));
        c
    }

    struct Db {
        catalog: Catalog,
        island: Island,
    }

    fn db() -> Db {
        let catalog = catalog();
        let (island, _) =
            Island::open(IslandConfig::new(CcKind::NoWait, 1), catalog.tables()).unwrap();
        Db { catalog, island }
    }

    fn parse(sql: &str) -> sql::Statement {
        Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .unwrap()
            .parse_statement()
            .unwrap()
    }

    fn plan_of(db: &Db, sql: &str) -> Result<TablePlan, SqlError> {
        Ok(plan(&parse(sql), &db.catalog)?.expect("a statement on a table"))
    }

    /// The SQLSTATE a statement is refused with at planning.
    fn refused(db: &Db, sql: &str) -> &'static str {
        match plan(&parse(sql), &db.catalog) {
            Err(e) => e.code,
            Ok(_) => panic!("{sql} planned"),
        }
    }

    /// Runs `sql` in a transaction of its own; its rows, or the abort.
    fn run(db: &Db, sql: &str, params: &[Value]) -> Result<(u64, Vec<Row>), Abort> {
        let plan = plan_of(db, sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        let plan = Arc::new(plan);
        let params = params.to_vec();
        let mut tx = db.island.worker().unwrap();
        tx.execute(0, move |tx| {
            let (plan, params) = (plan.clone(), params.clone());
            Box::pin(async move {
                let mut out = Vec::new();
                let n = plan.run(tx, &params, &mut out).await?;
                Ok((n, out))
            })
        })
    }

    fn rows(db: &Db, sql: &str, params: &[Value]) -> Vec<Row> {
        run(db, sql, params)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .1
    }

    fn ints(r: &[Row]) -> Vec<Vec<i64>> {
        r.iter()
            .map(|r| r.iter().map(|v| v.as_int().unwrap()).collect())
            .collect()
    }

    fn state(a: &Abort) -> &'static str {
        match a {
            Abort::User(m) => abort_sqlstate(m).unwrap_or("P0001"),
            Abort::Failed(Error::OutOfRange(_)) => "22003",
            other => panic!("unexpected abort {other}"),
        }
    }

    /// Fills `kv` with keys `keys`, v = 10 * k, s = "s{k}"; the model.
    fn fill(db: &Db, keys: impl IntoIterator<Item = u64>) -> BTreeMap<u64, i64> {
        let mut model = BTreeMap::new();
        for k in keys {
            let (n, _) = run(
                db,
                "INSERT INTO kv (k, v, s) VALUES ($1, $2, $3)",
                &[
                    Value::Int(k as i64),
                    Value::Int(10 * k as i64),
                    Value::Str(format!("s{k}")),
                ],
            )
            .unwrap();
            assert_eq!(n, 1);
            model.insert(k, 10 * k as i64);
        }
        model
    }

    #[test]
    fn point_select_insert_update_delete_agree_with_a_model() {
        let db = db();
        let mut model = fill(&db, [1, 2, 3, 5, 8, 13]);
        let p = plan_of(&db, "SELECT v, s, k FROM kv WHERE k = $1").unwrap();
        assert_eq!(p.param_types(), &[Type::Int]);
        assert_eq!(
            p.columns(),
            &[
                ("v".to_string(), Type::Int),
                ("s".to_string(), Type::Str),
                ("k".to_string(), Type::Int)
            ]
        );
        assert_eq!(p.tag(), "SELECT");
        assert_eq!(p.home_key(&[Value::Int(8)]), Some((KV, 8)));
        assert_eq!(
            rows(&db, "SELECT v, s, k FROM kv WHERE k = $1", &[Value::Int(8)]),
            vec![vec![Value::Int(80), Value::Str("s8".into()), Value::Int(8)]]
        );
        assert!(rows(&db, "SELECT v FROM kv WHERE k = 4", &[]).is_empty());
        // A negative key is no key: no row, not an error.
        assert!(rows(&db, "SELECT v FROM kv WHERE k = -4", &[]).is_empty());
        // UPDATE with arithmetic on the column and a parameter.
        let (n, _) = run(
            &db,
            "UPDATE kv SET v = v + $1 * 2, s = 'x' WHERE k = $2",
            &[Value::Int(7), Value::Int(5)],
        )
        .unwrap();
        assert_eq!(n, 1);
        *model.get_mut(&5).unwrap() += 14;
        assert_eq!(
            rows(&db, "SELECT v, s FROM kv WHERE k = 5", &[]),
            vec![vec![Value::Int(64), Value::Str("x".into())]]
        );
        // UPDATE or DELETE of a missing key affects nothing.
        assert_eq!(
            run(&db, "UPDATE kv SET v = 1 WHERE k = 4", &[]).unwrap().0,
            0
        );
        assert_eq!(run(&db, "DELETE FROM kv WHERE k = 4", &[]).unwrap().0, 0);
        assert_eq!(run(&db, "DELETE FROM kv WHERE k = 3", &[]).unwrap().0, 1);
        model.remove(&3);
        // Several rows at once; omitted columns are zero and empty.
        assert_eq!(
            run(&db, "INSERT INTO kv (k, v) VALUES (20, 1), (21, 2)", &[])
                .unwrap()
                .0,
            2
        );
        model.insert(20, 1);
        model.insert(21, 2);
        assert_eq!(
            rows(&db, "SELECT s, f, n, ts FROM kv WHERE k = 21", &[]),
            vec![vec![
                Value::Str(String::new()),
                Value::Float(0.0),
                Value::Int(0),
                Value::Str("1970-01-01 00:00:00".into())
            ]]
        );
        let all = rows(&db, "SELECT k, v FROM kv", &[]);
        let want: Vec<Vec<i64>> = model.iter().map(|(&k, &v)| vec![k as i64, v]).collect();
        assert_eq!(ints(&all), want);
        // `*` is every column, key first.
        let star = plan_of(&db, "SELECT * FROM kv WHERE k = 1").unwrap();
        let names: Vec<&str> = star.columns().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["k", "v", "s", "f", "n", "ts"]);
    }

    #[test]
    fn ranges_aggregates_order_and_limit_agree_with_a_model() {
        let db = db();
        let model = fill(&db, (0..40).map(|i| i * 3));
        let range = |lo: u64, hi: u64| -> Vec<Vec<i64>> {
            model
                .range(lo..=hi)
                .map(|(&k, &v)| vec![k as i64, v])
                .collect()
        };
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT k, v FROM kv WHERE k BETWEEN 10 AND 31",
                &[]
            )),
            range(10, 31)
        );
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT k, v FROM kv WHERE k >= $1 AND k < $2",
                &[Value::Int(9), Value::Int(21)]
            )),
            range(9, 20)
        );
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT k, v FROM kv WHERE 30 < k AND k <= 36",
                &[]
            )),
            range(31, 36)
        );
        let mut desc = range(0, 200);
        desc.reverse();
        desc.truncate(4);
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT k, v FROM kv ORDER BY k DESC LIMIT 4",
                &[]
            )),
            desc
        );
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT k, v FROM kv WHERE k > 5 ORDER BY k ASC LIMIT $1",
                &[Value::Int(2)]
            )),
            range(6, 9)
        );
        let sum: i64 = model.range(10..=60).map(|(_, v)| v).sum();
        let n = model.range(10..=60).count() as i64;
        assert_eq!(
            rows(
                &db,
                "SELECT count(*), sum(v), min(v), max(k) FROM kv WHERE k BETWEEN 10 AND 60",
                &[]
            ),
            vec![vec![
                Value::Int(n),
                Value::Int(sum),
                Value::Int(120),
                Value::Int(60)
            ]]
        );
        // An empty set: count 0, the others NULL.
        assert_eq!(
            rows(
                &db,
                "SELECT count(*), sum(v), max(v) FROM kv WHERE k > 1000",
                &[]
            ),
            vec![vec![Value::Int(0), Value::Null, Value::Null]]
        );
        // Expressions and aliases.
        let p = plan_of(&db, "SELECT v * 2 + 1 AS w, k FROM kv WHERE k = 3").unwrap();
        assert_eq!(p.columns()[0], ("w".to_string(), Type::Int));
        assert_eq!(
            rows(&db, "SELECT v * 2 + 1 AS w, k FROM kv WHERE k = 3", &[]),
            vec![vec![Value::Int(61), Value::Int(3)]]
        );
    }

    #[test]
    fn hash_table_whole_reads_and_composite_keys() {
        let db = db();
        for k in [0i64, 7, 99] {
            run(
                &db,
                "INSERT INTO h VALUES ($1, $2)",
                &[Value::Int(k), Value::Int(k + 1)],
            )
            .unwrap();
        }
        assert_eq!(
            rows(&db, "select count(*), sum(v) from h", &[]),
            vec![vec![Value::Int(3), Value::Int(109)]]
        );
        assert_eq!(
            ints(&rows(&db, "SELECT k FROM h WHERE k BETWEEN 5 AND 200", &[])),
            vec![vec![7], vec![99]]
        );
        // A key outside the table's domain is refused.
        let e = run(&db, "INSERT INTO h VALUES (100, 1)", &[]).unwrap_err();
        assert_eq!(state(&e), "23514");
        // Composite keys: (a, b) packed a << 16 | b.
        for (a, b) in [(1, 1), (1, 5), (2, 0), (2, 9), (9, 65_535)] {
            run(
                &db,
                "INSERT INTO c (a, b, x) VALUES ($1, $2, $3)",
                &[Value::Int(a), Value::Int(b), Value::Int(a * 100 + b)],
            )
            .unwrap();
        }
        let p = plan_of(&db, "SELECT x FROM c WHERE a = $1 AND b = $2").unwrap();
        assert_eq!(
            p.home_key(&[Value::Int(2), Value::Int(9)]),
            Some((C, 2 << 16 | 9))
        );
        assert_eq!(
            ints(&rows(&db, "SELECT x FROM c WHERE b = 9 AND a = 2", &[])),
            vec![vec![209]]
        );
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT b FROM c WHERE a = 1 ORDER BY b DESC",
                &[]
            )),
            vec![vec![5], vec![1]]
        );
        assert_eq!(
            ints(&rows(&db, "SELECT a, b FROM c WHERE a = 2 AND b > 0", &[])),
            vec![vec![2, 9]]
        );
        // The whole table, one prefix after another, in key order.
        assert_eq!(
            ints(&rows(&db, "SELECT a, b FROM c ORDER BY a, b", &[])),
            vec![
                vec![1, 1],
                vec![1, 5],
                vec![2, 0],
                vec![2, 9],
                vec![9, 65_535]
            ]
        );
        assert_eq!(
            ints(&rows(
                &db,
                "SELECT a FROM c WHERE a BETWEEN 2 AND 9 ORDER BY a DESC LIMIT 2",
                &[]
            )),
            vec![vec![9], vec![2]]
        );
        // A key part past its bits is no key.
        assert!(rows(&db, "SELECT x FROM c WHERE a = 1 AND b = 65536", &[]).is_empty());
        let e = run(&db, "INSERT INTO c VALUES (1, 65536, 0)", &[]).unwrap_err();
        assert_eq!(state(&e), "22003");
    }

    #[test]
    fn runtime_errors_have_their_sqlstates() {
        let db = db();
        fill(&db, [1, 2]);
        let e = run(&db, "INSERT INTO kv (k) VALUES (1)", &[]).unwrap_err();
        assert_eq!(state(&e), "23505");
        let e = run(&db, "INSERT INTO kv (k) VALUES (7), (7)", &[]).unwrap_err();
        assert_eq!(state(&e), "23505");
        assert!(rows(&db, "SELECT k FROM kv WHERE k = 7", &[]).is_empty());
        run(
            &db,
            "UPDATE kv SET v = $1 WHERE k = 1",
            &[Value::Int(i64::MAX)],
        )
        .unwrap();
        let e = run(&db, "UPDATE kv SET v = v + 1 WHERE k = 1", &[]).unwrap_err();
        assert_eq!(state(&e), "22003");
        assert_eq!(
            rows(&db, "SELECT v FROM kv WHERE k = 1", &[]),
            vec![vec![Value::Int(i64::MAX)]]
        );
        let e = run(&db, "UPDATE kv SET v = v / 0 WHERE k = 2", &[]).unwrap_err();
        assert_eq!(state(&e), "22012");
        let e = run(&db, "UPDATE kv SET n = 3000000000 WHERE k = 2", &[]).unwrap_err();
        assert_eq!(state(&e), "22003");
        let e = run(
            &db,
            "UPDATE kv SET s = $1 WHERE k = 2",
            &[Value::Str("ninechars".into())],
        )
        .unwrap_err();
        assert_eq!(state(&e), "22001");
        let e = run(&db, "UPDATE kv SET v = NULL WHERE k = 2", &[]).unwrap_err();
        assert_eq!(state(&e), "23502");
        let e = run(&db, "INSERT INTO kv (v) VALUES (1)", &[]).unwrap_err();
        assert_eq!(state(&e), "23502");
        let e = run(&db, "SELECT sum(v) FROM kv", &[]).unwrap_err();
        assert_eq!(state(&e), "22003");
        // Nothing of the failed statements stayed.
        assert_eq!(
            ints(&rows(&db, "SELECT k, v FROM kv WHERE k = 2", &[])),
            vec![vec![2, 20]]
        );
    }

    #[test]
    fn literals_casts_and_timestamps() {
        let db = db();
        run(
            &db,
            "INSERT INTO kv (k, v, f, ts) VALUES ('4', '12'::int8, 2, '2024-02-29 13:05:09.25')",
            &[],
        )
        .unwrap();
        assert_eq!(
            rows(&db, "SELECT v, f, ts FROM kv WHERE k = '4'::int8", &[]),
            vec![vec![
                Value::Int(12),
                Value::Float(2.0),
                Value::Str("2024-02-29 13:05:09.25".into())
            ]]
        );
        run(
            &db,
            "UPDATE kv SET ts = CURRENT_TIMESTAMP, f = f / 4 WHERE k = 4",
            &[],
        )
        .unwrap();
        let r = rows(&db, "SELECT ts, f FROM kv WHERE k = 4", &[]);
        let ts = r[0][0].as_str().unwrap().to_string();
        assert!(ts.starts_with("20"), "{ts}");
        assert_eq!(parse_timestamp(&ts).map(format_timestamp), Some(ts.clone()));
        assert_eq!(r[0][1], Value::Float(0.5));
        run(
            &db,
            "UPDATE kv SET ts = $1 WHERE k = 4",
            &[Value::Str("1999-12-31".into())],
        )
        .unwrap();
        assert_eq!(
            rows(&db, "SELECT ts FROM kv WHERE k = 4", &[]),
            vec![vec![Value::Str("1999-12-31 00:00:00".into())]]
        );
        let e = run(
            &db,
            "UPDATE kv SET ts = $1 WHERE k = 4",
            &[Value::Str("yesterday".into())],
        )
        .unwrap_err();
        assert_eq!(state(&e), "22007");
        assert_eq!(refused(&db, "SELECT v FROM kv WHERE k = 'x'"), "22P02");
        for (y, m, d) in [(1970, 1, 1), (2000, 2, 29), (1900, 3, 1), (2400, 12, 31)] {
            assert_eq!(civil_from_days(days_from_civil(y, m, d)), (y, m, d));
        }
    }

    #[test]
    fn parameters_take_the_types_of_their_columns() {
        let db = db();
        let p = plan_of(
            &db,
            "UPDATE kv SET s = $1, f = $2, n = n + $3, ts = $5 WHERE k = $4",
        )
        .unwrap();
        assert_eq!(
            p.param_types(),
            &[Type::Str, Type::Float, Type::Int, Type::Int, Type::Str]
        );
        assert_eq!((p.tag(), p.table()), ("UPDATE", KV));
        let p = plan_of(&db, "INSERT INTO kv (s, k) VALUES ($1, $2)").unwrap();
        assert_eq!(p.param_types(), &[Type::Str, Type::Int]);
        assert_eq!(p.tag(), "INSERT 0");
        assert_eq!(
            p.home_key(&[Value::Str("a".into()), Value::Int(77)]),
            Some((KV, 77))
        );
        let p = plan_of(&db, "DELETE FROM kv WHERE k = $1").unwrap();
        assert_eq!((p.tag(), p.param_types()), ("DELETE", &[Type::Int][..]));
    }

    #[test]
    fn everything_outside_the_subset_is_refused_with_its_sqlstate() {
        let db = db();
        for (sql, code) in [
            ("SELECT * FROM nope", "42P01"),
            ("INSERT INTO nope VALUES (1)", "42P01"),
            ("SELECT nope FROM kv WHERE k = 1", "42703"),
            ("UPDATE kv SET nope = 1 WHERE k = 1", "42703"),
            ("SELECT v FROM kv WHERE v = 1", "0A000"),
            ("SELECT v FROM kv WHERE k = 1 OR k = 2", "0A000"),
            ("SELECT v FROM kv WHERE k <> 1", "0A000"),
            ("SELECT v FROM kv a JOIN kv b ON a.k = b.k", "0A000"),
            ("SELECT v FROM kv, h", "0A000"),
            ("SELECT DISTINCT v FROM kv", "0A000"),
            ("SELECT v FROM kv GROUP BY v", "0A000"),
            ("SELECT v FROM kv ORDER BY v", "0A000"),
            ("SELECT v FROM kv LIMIT 1 OFFSET 2", "0A000"),
            ("SELECT v FROM kv FOR UPDATE", "0A000"),
            ("SELECT k, count(*) FROM kv", "42803"),
            ("SELECT avg(v) FROM kv", "0A000"),
            ("SELECT count(DISTINCT v) FROM kv", "0A000"),
            ("SELECT sum(s) FROM kv", "42883"),
            ("SELECT b FROM c WHERE b = 1", "0A000"),
            ("SELECT x FROM c WHERE a > 1 AND b = 2", "0A000"),
            ("SELECT x FROM c ORDER BY b", "0A000"),
            ("UPDATE kv SET v = 1", "0A000"),
            ("UPDATE kv SET v = 1 WHERE k > 1", "0A000"),
            ("UPDATE kv SET k = 2 WHERE k = 1", "0A000"),
            ("UPDATE kv SET v = 1 WHERE k = 1 RETURNING v", "0A000"),
            ("DELETE FROM kv", "0A000"),
            ("DELETE FROM kv WHERE k = 1 RETURNING k", "0A000"),
            ("INSERT INTO kv SELECT * FROM kv", "0A000"),
            ("INSERT INTO kv VALUES (1) ON CONFLICT DO NOTHING", "0A000"),
            ("INSERT INTO kv VALUES (1) RETURNING k", "0A000"),
            ("INSERT INTO kv (k, k) VALUES (1, 2)", "42701"),
            ("INSERT INTO kv (k) VALUES (1, 2)", "42601"),
            ("SELECT v FROM kv WHERE k = 1 + v", "0A000"),
            ("SELECT v || 'x' FROM kv", "0A000"),
            ("SELECT s + 1 FROM kv", "42883"),
            ("SELECT v FROM kv WHERE k = 99999999999999999999", "22003"),
        ] {
            assert_eq!(refused(&db, sql), code, "{sql}");
        }
        // Not statements on tables: others answer them.
        for sql in [
            "SELECT 1",
            "SELECT version()",
            "SELECT * FROM pg_catalog.pg_type",
            "SELECT * FROM pg_type",
            "SELECT * FROM f(1)",
            "CALL p(1)",
            "SHOW server_version",
        ] {
            assert!(plan(&parse(sql), &db.catalog).unwrap().is_none(), "{sql}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random point and range reads of an ordered table agree with a
        /// model of its rows.
        #[test]
        fn random_point_and_range_selects_agree_with_a_model(
            keys in proptest::collection::btree_set(0u64..200, 0..40),
            queries in proptest::collection::vec((0u64..220, 0u64..220, 0usize..6, proptest::option::of(0u64..8), any::<bool>()), 1..12),
        ) {
            let db = db();
            let model = fill(&db, keys);
            for (a, b, form, limit, desc) in queries {
                let (lo, hi) = (a.min(b), a.max(b));
                let (sql, want): (String, Vec<u64>) = match form {
                    0 => (format!("SELECT k FROM kv WHERE k = {a}"), model.range(a..=a).map(|(&k, _)| k).collect()),
                    1 => (format!("SELECT k FROM kv WHERE k BETWEEN {lo} AND {hi}"), model.range(lo..=hi).map(|(&k, _)| k).collect()),
                    2 => (format!("SELECT k FROM kv WHERE k >= {lo} AND k < {hi}"), model.range(lo..hi).map(|(&k, _)| k).collect()),
                    3 => (format!("SELECT k FROM kv WHERE k > {lo} AND k <= {hi}"), model.range(lo..=hi).filter(|(&k, _)| k > lo).map(|(&k, _)| k).collect()),
                    4 => (format!("SELECT k FROM kv WHERE k < {a}"), model.range(..a).map(|(&k, _)| k).collect()),
                    _ => (format!("SELECT k FROM kv WHERE k >= {a}"), model.range(a..).map(|(&k, _)| k).collect()),
                };
                // The same set's count, before ORDER BY and LIMIT.
                let count = rows(&db, &sql.replace("SELECT k", "SELECT count(*)"), &[]);
                prop_assert_eq!(count, vec![vec![Value::Int(want.len() as i64)]], "{}", sql);
                let mut want = want;
                let mut sql = sql;
                if desc {
                    want.reverse();
                    sql.push_str(" ORDER BY k DESC");
                }
                if let Some(l) = limit {
                    want.truncate(l as usize);
                    sql.push_str(&format!(" LIMIT {l}"));
                }
                let got: Vec<u64> = rows(&db, &sql, &[]).iter().map(|r| r[0].as_int().unwrap() as u64).collect();
                prop_assert_eq!(&got, &want, "{}", sql);
            }
        }
    }
}
