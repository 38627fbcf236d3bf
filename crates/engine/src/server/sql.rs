//! The statements the server runs, and how a query string becomes them.
//!
//! A query string is split into statements at the `;`s outside quotes and
//! comments ([`split`]); each is parsed by `sqlparser` (PostgreSQL's
//! dialect) and turned into a [`Stmt`]:
//! - `CALL name(arg, …)`, `SELECT * FROM name(arg, …) [AS t(a, …)]`,
//!   `SELECT col, … FROM name(…)`, `SELECT name(…)`: a procedure call;
//! - `SELECT` of constants and of the functions drivers call on their own
//!   (`version()`, `current_setting(…)`, `set_config(…)`,
//!   `pg_advisory_unlock_all()`, …);
//! - `SHOW`, `SET`, `RESET`, `DISCARD`, `DEALLOCATE`, `CLOSE`: the session;
//! - `BEGIN`/`START TRANSACTION`, `COMMIT`/`END`, `ROLLBACK`/`ABORT`: a
//!   transaction block ([`Stmt::Begin`], [`Stmt::Commit`],
//!   [`Stmt::Rollback`]); savepoints are refused (`0A000`);
//! - `UNLISTEN`: accepted ([`Stmt::NoOp`]);
//! - statements on tables and on `pg_catalog`: the two seams
//!   ([`Stmt::Tables`], [`Stmt::Catalog`]).
//!
//! One form skips sqlparser: `CALL name(literal, …)` and `SELECT * FROM
//! name(literal, …)` with plain literals, placeholders and `ARRAY[…]` of
//! integers go through a hand-written parser ([`fast`]). pgbench's
//! `-M simple` parses a call per transaction; sqlparser takes about ten
//! times as long for it, and no crate parses that one form as fast. The
//! fast path answers only statements sqlparser answers the same way (a
//! property test checks it); anything it does not take goes to sqlparser.
//!
//! An argument is a literal: an integer, a float, a `'string'` (untyped, as
//! in PostgreSQL: it takes the type of the parameter it is passed to),
//! `NULL`, `TRUE`/`FALSE` (1/0), a cast of one (`1::int8`, `'5'::bigint`,
//! `CAST('{1,2}' AS int8[])`), a placeholder `$n`, or `ARRAY[…]` of integers
//! and placeholders.
//!
//! Bounds: nesting deeper than [`MAX_NESTING`] is refused with `54001`
//! (sqlparser's recursion limit), and so is a statement of more than
//! [`MAX_TOKENS`] tokens (a long chain of operators nests as deep as it is
//! long); a query string of more than [`MAX_STATEMENTS`] statements is
//! refused with `54000` before any of it is parsed.

use sqlparser::ast::{self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser as SqlParser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::api::{Type, Value};

/// One argument of a call, as written.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A typed literal (a number, `NULL`, a cast).
    Lit(Value),
    /// A quoted literal without a cast: it takes its parameter's type when
    /// the call is bound ([`coerce`]).
    Text(String),
    /// `$n`, 1-based.
    Param(usize),
    /// `ARRAY[…]`: integer literals and placeholders.
    Array(Vec<Arg>),
}

/// What `SHOW` shows besides settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Procedures,
    Islands,
    Peers,
    Threads,
    Stats,
}

/// The select list and aliases of a call written as a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Projection {
    /// `*`, or named columns (with their output names).
    pub items: Vec<Item>,
    /// `AS t(a, b)`: new names for the first columns, in order.
    pub renames: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Star,
    Column { name: String, alias: Option<String> },
}

/// A function a constant `SELECT` may call (what drivers and pools send).
#[derive(Clone, Debug, PartialEq)]
pub enum Func {
    Version,
    CurrentSetting(String),
    SetConfig {
        name: String,
        value: String,
        local: bool,
    },
    AdvisoryUnlockAll,
    CurrentDatabase,
    CurrentSchema,
    CurrentUser,
    BackendPid,
}

/// One column of a `SELECT` without `FROM`.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Value(Value),
    Func(Func),
    /// A constant over placeholders (the extended protocol's `SELECT $1`,
    /// `SELECT $1::int8`, `SELECT $1 + 1`): evaluated when bound.
    Param(ParamExpr),
}

/// A constant expression over placeholders, typed as PostgreSQL types
/// it: a placeholder takes the type of its cast or of the other operand
/// of its operator, and is `text` when nothing says (as PostgreSQL
/// resolves an unknown); two unknown operands of arithmetic are integers.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamExpr {
    expr: Box<Expr>,
    /// The type of each placeholder, `$1` first.
    pub params: Vec<Type>,
    /// The type of its value.
    pub result: Type,
}

impl ParamExpr {
    /// Types `e`, which holds a placeholder.
    fn new(e: &Expr) -> Result<ParamExpr, SqlError> {
        let mut params = Vec::new();
        let result = infer(e, None, &mut params)?.unwrap_or(Type::Str);
        Ok(ParamExpr {
            expr: Box::new(e.clone()),
            params: params.into_iter().map(|t| t.unwrap_or(Type::Str)).collect(),
            result,
        })
    }

    /// Its value with `params` bound (each decoded as its type says).
    pub fn eval(&self, params: &[Value]) -> Result<Value, SqlError> {
        eval(&self.expr, params)
    }
}

/// Whether `e` holds a placeholder (in the forms a constant takes).
fn has_param(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(v.value, ast::Value::Placeholder(_)),
        Expr::Nested(e) | Expr::UnaryOp { expr: e, .. } | Expr::Cast { expr: e, .. } => {
            has_param(e)
        }
        Expr::BinaryOp { left, right, .. } => has_param(left) || has_param(right),
        _ => false,
    }
}

/// The type of `e` (`None`: unknown), typing each placeholder in it as
/// `want` says where nothing else does.
fn infer(
    e: &Expr,
    want: Option<Type>,
    params: &mut Vec<Option<Type>>,
) -> Result<Option<Type>, SqlError> {
    use ast::BinaryOperator as B;
    Ok(match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(_) => {
                let Arg::Param(n) = literal(e)? else {
                    return Err(syntax(format!("the placeholder {e}")));
                };
                if params.len() < n {
                    params.resize(n, None);
                }
                if params[n - 1].is_none() {
                    params[n - 1] = want;
                }
                params[n - 1]
            }
            _ => match literal(e)? {
                Arg::Lit(Value::Int(_)) => Some(Type::Int),
                Arg::Lit(Value::Float(_)) => Some(Type::Float),
                _ => None,
            },
        },
        Expr::Nested(e) => infer(e, want, params)?,
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus,
            expr,
        } => infer(expr, want.or(Some(Type::Int)), params)?,
        Expr::Cast {
            expr, data_type, ..
        } => {
            let name = data_type.to_string();
            let t = match cast_to(&name) {
                Some(CastTo::Int(_) | CastTo::Bool) => Type::Int,
                Some(CastTo::Float) => Type::Float,
                Some(CastTo::Text) => Type::Str,
                Some(CastTo::Ints) => Type::Ints,
                None => {
                    return Err(unsupported(format!(
                        "a cast to {name}: this server casts to integers, floats, text, bool and int8[]"
                    )))
                }
            };
            infer(expr, Some(t), params)?;
            Some(t)
        }
        Expr::BinaryOp {
            left,
            op: B::StringConcat,
            right,
        } => {
            infer(left, Some(Type::Str), params)?;
            infer(right, Some(Type::Str), params)?;
            Some(Type::Str)
        }
        Expr::BinaryOp { left, op, right }
            if matches!(op, B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo) =>
        {
            let l = infer(left, None, params)?;
            let r = infer(right, l, params)?;
            let both = l.or(r).unwrap_or(Type::Int);
            let l = infer(left, Some(both), params)?;
            let r = infer(right, Some(both), params)?;
            match (l, r) {
                (Some(Type::Float), _) | (_, Some(Type::Float)) => Some(Type::Float),
                (Some(Type::Int), Some(Type::Int)) => Some(Type::Int),
                (l, r) => {
                    return Err(SqlError::new(
                        "42883",
                        format!(
                            "operator does not exist: {} {op} {}",
                            operand_type(l),
                            operand_type(r)
                        ),
                    ))
                }
            }
        }
        e => {
            return Err(unsupported(format!(
                "{e} in a SELECT of constants with placeholders (this server answers \
                 placeholders, casts, arithmetic and ||)"
            )))
        }
    })
}

/// PostgreSQL's name of an operand's type (`unknown`: not known).
fn operand_type(t: Option<Type>) -> &'static str {
    t.map_or("unknown", type_name)
}

/// The value of a constant expression with its placeholders bound.
fn eval(e: &Expr, params: &[Value]) -> Result<Value, SqlError> {
    match e {
        Expr::Nested(e) => eval(e, params),
        Expr::BinaryOp { left, op, right } => {
            let (l, r) = (eval(left, params)?, eval(right, params)?);
            binary(l, op, r)
        }
        Expr::Cast {
            expr, data_type, ..
        } => match cast(Arg::Lit(eval(expr, params)?), &data_type.to_string())? {
            Arg::Lit(v) => Ok(v),
            a => Err(unsupported(format!("the cast of {a:?}"))),
        },
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => match negate(Arg::Lit(eval(expr, params)?))? {
            Arg::Lit(v) => Ok(v),
            a => Err(unsupported(format!("the negation of {a:?}"))),
        },
        Expr::UnaryOp {
            op: ast::UnaryOperator::Plus,
            expr,
        } => eval(expr, params),
        e => match literal(e)? {
            Arg::Param(n) => params
                .get(n - 1)
                .cloned()
                .ok_or_else(|| SqlError::new("08P01", format!("there is no parameter ${n}"))),
            _ => constant(e),
        },
    }
}

/// One parsed statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Call {
        proc: String,
        args: Vec<Arg>,
        /// `None`: `CALL` or `SELECT * FROM f(…)` without aliases.
        projection: Option<Projection>,
    },
    /// Accepted; the command tag to answer with.
    NoOp(&'static str),
    /// `BEGIN`, `START TRANSACTION` (serializable, read-write): opens a
    /// transaction block.
    Begin,
    /// `COMMIT`, `END`: commits the block.
    Commit,
    /// `ROLLBACK`, `ABORT`: rolls the block back.
    Rollback,
    Show(Show),
    /// `SHOW name` (lower case) and `SHOW ALL` (`None`).
    ShowSetting(Option<String>),
    /// `SET [SESSION | LOCAL] name { = | TO } value`; `None`: `DEFAULT`.
    Set {
        name: String,
        value: Option<String>,
        local: bool,
    },
    /// `RESET name`, `RESET ALL` (`None`).
    Reset(Option<String>),
    /// `DISCARD ALL`: the session as it was at login.
    DiscardAll,
    /// `DEALLOCATE [PREPARE] name | ALL` (`None`).
    Deallocate(Option<String>),
    /// `CLOSE name | ALL` (`None`).
    Close(Option<String>),
    /// `SELECT` without `FROM`: one row of named columns.
    Select(Vec<(String, Scalar)>),
    /// Seam: a statement on tables (`SELECT … FROM t`, `INSERT`, `UPDATE`,
    /// `DELETE`), for `tables::plan`.
    Tables(Box<ast::Statement>),
    /// Seam: a query naming `pg_catalog`, `information_schema` or a `pg_*`
    /// relation, for `pg_catalog::answer` (with the statement's text).
    Catalog {
        sql: String,
        stmt: Box<ast::Statement>,
    },
}

impl Stmt {
    /// The highest placeholder number it uses (0: none).
    pub fn params(&self) -> usize {
        fn max(args: &[Arg]) -> usize {
            args.iter()
                .map(|a| match a {
                    Arg::Param(n) => *n,
                    Arg::Array(v) => max(v),
                    Arg::Lit(_) | Arg::Text(_) => 0,
                })
                .max()
                .unwrap_or(0)
        }
        match self {
            Stmt::Call { args, .. } => max(args),
            Stmt::Select(cols) => cols
                .iter()
                .map(|(_, c)| match c {
                    Scalar::Param(p) => p.params.len(),
                    _ => 0,
                })
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }
}

/// Why a statement does not parse or run: a SQLSTATE and a message naming
/// what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    pub code: &'static str,
    pub message: String,
}

impl SqlError {
    pub fn new(code: &'static str, message: impl Into<String>) -> SqlError {
        SqlError {
            code,
            message: message.into(),
        }
    }
}

fn unsupported(message: impl Into<String>) -> SqlError {
    SqlError::new("0A000", message)
}

/// Transaction modes of `BEGIN` or `SET TRANSACTION` (`what`): every
/// transaction here is serializable and read-write, so those are accepted
/// and any other is `0A000`, as the session's settings refuse them.
fn serializable_read_write(what: &str, modes: &[ast::TransactionMode]) -> Result<(), SqlError> {
    for m in modes {
        match m {
            ast::TransactionMode::IsolationLevel(ast::TransactionIsolationLevel::Serializable)
            | ast::TransactionMode::AccessMode(ast::TransactionAccessMode::ReadWrite) => {}
            m => {
                return Err(unsupported(format!(
                    "{what} {m}: every transaction here is SERIALIZABLE READ WRITE"
                )))
            }
        }
    }
    Ok(())
}

/// Placeholders above this are refused (PostgreSQL's own limit is 65535).
const MAX_PARAM: usize = 65_535;

/// Nesting deeper than this (parentheses, `ARRAY[`, subqueries) is refused
/// with `54001` (statement too complex): the parser's stack stays bounded
/// whatever a client sends.
pub const MAX_NESTING: usize = 32;

/// Tokens one statement may hold; more are refused with `54001`.
pub const MAX_TOKENS: usize = 20_000;

/// Operators one statement may hold; more are refused with `54001`. A
/// chain of binary operators parses without recursion but builds a tree as
/// deep as it is long, which is walked (and dropped) recursively: this
/// bounds that depth well inside a server thread's stack.
pub const MAX_OPERATORS: usize = 1_000;

/// Statements one query string may hold; more are refused with `54000`
/// before any runs, so one message bounds the work it queues.
pub const MAX_STATEMENTS: usize = 1000;

fn syntax(message: String) -> SqlError {
    SqlError {
        code: "42601",
        message,
    }
}

/// Splits a query string into its statements' texts at the `;`s outside
/// quotes (`'…'`, `E'…'`, `"…"`, `$tag$…$tag$`) and comments (`--`,
/// nested `/* */`); blank statements are dropped. An unterminated quote or
/// comment runs to the end (the parser then names it). More than
/// [`MAX_STATEMENTS`] statements is `54000`, found without parsing any.
pub fn split<'a>(sql: &'a str) -> Result<Vec<&'a str>, SqlError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let push = |from: usize, to: usize, out: &mut Vec<&'a str>| -> Result<(), SqlError> {
        let s = sql[from..to].trim();
        if !s.is_empty() && !only_comments(s) {
            if out.len() == MAX_STATEMENTS {
                return Err(SqlError::new(
                    "54000",
                    format!(
                        "a query string holds at most {MAX_STATEMENTS} statements; statement {} \
                         starts at offset {from} (send the rest in another query)",
                        MAX_STATEMENTS + 1
                    ),
                ));
            }
            out.push(s);
        }
        Ok(())
    };
    while i < b.len() {
        match b[i] {
            b';' => {
                push(start, i, &mut out)?;
                i += 1;
                start = i;
            }
            b'\'' => {
                // E'…' takes backslash escapes; '' is a quote in both.
                let escapes = i > 0
                    && matches!(b[i - 1], b'e' | b'E')
                    && (i < 2 || !(b[i - 2].is_ascii_alphanumeric() || b[i - 2] == b'_'));
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\\' if escapes => i += 2,
                        b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
                        b'\'' => break,
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            b'"' => {
                i += 1;
                while i < b.len() {
                    if b[i] == b'"' {
                        if b.get(i + 1) == Some(&b'"') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(b.len(), |n| i + n + 1);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0usize;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'$' if i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') => {
                // $tag$ … $tag$ (a tag is empty or a name); $1 is a placeholder.
                let tag_len = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    .map(|n| n + 1);
                match tag_len {
                    Some(n)
                        if b[i + n] == b'$'
                            && !b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) =>
                    {
                        let tag = &sql[i..=i + n];
                        let body = i + n + 1;
                        i = sql[body..]
                            .find(tag)
                            .map_or(b.len(), |at| body + at + tag.len());
                    }
                    _ => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    push(start, b.len().min(sql.len()), &mut out)?;
    Ok(out)
}

/// Whether `s` holds nothing but comments (and white space).
fn only_comments(s: &str) -> bool {
    let mut r = s.trim_start();
    loop {
        if r.is_empty() {
            return true;
        }
        if let Some(rest) = r.strip_prefix("--") {
            r = rest.find('\n').map_or("", |n| &rest[n + 1..]).trim_start();
        } else if r.starts_with("/*") {
            let mut depth = 0usize;
            let b = r.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            if depth != 0 {
                return false;
            }
            r = r[i..].trim_start();
        } else {
            return false;
        }
    }
}

/// Parses a query string into its statements. A syntax error anywhere, or
/// more than [`MAX_STATEMENTS`] statements, fails the whole string, so
/// nothing of it runs.
pub fn parse(sql: &str) -> Result<Vec<Stmt>, SqlError> {
    if let Some(v) = fast::parse(sql) {
        return Ok(v);
    }
    split(sql)?.into_iter().map(parse_statement).collect()
}

/// Parses exactly one statement (the extended protocol's Parse): `None`
/// for an empty one.
pub fn parse_one(sql: &str) -> Result<Option<Stmt>, SqlError> {
    if let Some(mut v) = fast::parse(sql) {
        if v.len() == 1 {
            return Ok(v.pop());
        }
    }
    let texts = split(sql)?;
    match texts.len() {
        0 => Ok(None),
        1 => parse_statement(texts[0]).map(Some),
        n => Err(syntax(format!(
            "cannot insert multiple commands into a prepared statement (this one has {n})"
        ))),
    }
}

fn parser_error(e: ParserError) -> SqlError {
    match e {
        ParserError::RecursionLimitExceeded => SqlError::new(
            "54001",
            format!("statement too complex: nested more than {MAX_NESTING} deep"),
        ),
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => {
            syntax(format!("syntax error: {m}"))
        }
    }
}

/// Parses a simple query's string as PostgreSQL does before running any
/// of it: a syntax error anywhere (`42601`, or a bound: `54000`, `54001`)
/// is the whole string's error; a statement that parses but is refused
/// (`0A000`, …) is kept as its error, in its place, for the caller to
/// answer when the statements before it have run.
pub fn parse_each(sql: &str) -> Result<Vec<Result<Stmt, SqlError>>, SqlError> {
    if let Some(v) = fast::parse(sql) {
        return Ok(v.into_iter().map(Ok).collect());
    }
    let mut out = Vec::new();
    for text in split(sql)? {
        let (stmt, catalog) = parse_ast(text)?;
        match convert(stmt, text, catalog) {
            Err(e) if e.code == "42601" => return Err(e),
            r => out.push(r),
        }
    }
    Ok(out)
}

/// Which statements of a simple query's string run, given the first one
/// refused ([`parse_each`]), so that what stays is what PostgreSQL would
/// keep: PostgreSQL runs the statements before a refusal and then rolls
/// back the transaction open at it. Statements settled before it (up to a
/// `COMMIT` or `ROLLBACK`) run. Of the transaction open at the refusal,
/// the statements of an explicit block (opened by a `BEGIN` in the string
/// or before it, `in_block`) run, and the refusal then fails the block; the
/// statements of PostgreSQL's implicit transaction (since the last
/// `COMMIT`/`ROLLBACK`, before any `BEGIN`), which here would each commit
/// on their own, do not run. Every statement runs when none is refused.
pub fn runs_before_refusal(stmts: &[Result<Stmt, SqlError>], in_block: bool) -> Vec<bool> {
    let mut run = vec![true; stmts.len()];
    let Some(refused) = stmts.iter().position(Result::is_err) else {
        return run;
    };
    let mut open_from = 0;
    let mut block_from = in_block.then_some(0);
    for (i, s) in stmts[..refused].iter().enumerate() {
        match s {
            Ok(Stmt::Begin) if block_from.is_none() => block_from = Some(i),
            Ok(Stmt::Commit | Stmt::Rollback) => {
                block_from = None;
                open_from = i + 1;
            }
            _ => {}
        }
    }
    for r in &mut run[open_from..block_from.unwrap_or(refused).max(open_from)] {
        *r = false;
    }
    run
}

/// Parses one statement's text (no `;` outside quotes) with sqlparser.
pub fn parse_statement(text: &str) -> Result<Stmt, SqlError> {
    let (stmt, catalog) = parse_ast(text)?;
    convert(stmt, text, catalog)
}

/// Parses one statement's text into sqlparser's tree, within the bounds,
/// and says whether it names a catalog relation.
fn parse_ast(text: &str) -> Result<(ast::Statement, bool), SqlError> {
    let dialect = PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .with_unescape(true)
        .tokenize_with_location()
        .map_err(|e| syntax(format!("syntax error: {e}")))?;
    let words = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .count();
    if words > MAX_TOKENS {
        return Err(SqlError::new(
            "54001",
            format!("statement too complex: {words} tokens, at most {MAX_TOKENS}"),
        ));
    }
    let operators = tokens.iter().filter(|t| is_operator(&t.token)).count();
    if operators > MAX_OPERATORS {
        return Err(SqlError::new(
            "54001",
            format!("statement too complex: {operators} operators, at most {MAX_OPERATORS}"),
        ));
    }
    let catalog = names_catalog(&tokens);
    let mut p = SqlParser::new(&dialect)
        .with_recursion_limit(MAX_NESTING)
        .with_tokens_with_locations(tokens);
    let stmt = p.parse_statement().map_err(parser_error)?;
    let next = p.peek_token();
    if next.token != Token::EOF {
        return Err(syntax(format!(
            "syntax error at or near \"{}\" (line {}, column {}): expected the end of the statement",
            next.token, next.span.start.line, next.span.start.column
        )));
    }
    Ok((stmt, catalog))
}

/// Whether a token may join two expressions (an operator, `AND`, `OR`).
fn is_operator(t: &Token) -> bool {
    match t {
        Token::Word(w) => matches!(
            w.keyword,
            sqlparser::keywords::Keyword::AND
                | sqlparser::keywords::Keyword::OR
                | sqlparser::keywords::Keyword::IS
                | sqlparser::keywords::Keyword::LIKE
                | sqlparser::keywords::Keyword::ILIKE
                | sqlparser::keywords::Keyword::IN
                | sqlparser::keywords::Keyword::BETWEEN
        ),
        Token::Whitespace(_)
        | Token::Number(..)
        | Token::Char(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::EscapedStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Comma
        | Token::LParen
        | Token::RParen
        | Token::LBracket
        | Token::RBracket
        | Token::Period
        | Token::SemiColon
        | Token::Placeholder(_)
        | Token::EOF => false,
        _ => true,
    }
}

/// Whether the tokens name `pg_catalog`, `information_schema`, or a
/// `pg_*` relation (a `pg_*` name not called as a function).
fn names_catalog(tokens: &[sqlparser::tokenizer::TokenWithSpan]) -> bool {
    let mut it = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .peekable();
    while let Some(t) = it.next() {
        if let Token::Word(w) = &t.token {
            let v = w.value.to_ascii_lowercase();
            if v == "pg_catalog" || v == "information_schema" {
                return true;
            }
            if v.starts_with("pg_") && !matches!(it.peek().map(|t| &t.token), Some(Token::LParen)) {
                return true;
            }
        }
    }
    false
}

/// A name as PostgreSQL folds it: unquoted names in lower case.
fn ident(i: &ast::Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    }
}

/// A function's (procedure's) name: `name` or `public.name`.
fn object_name(n: &ast::ObjectName) -> Result<String, SqlError> {
    let parts: Vec<String> =
        n.0.iter()
            .map(|p| p.as_ident().map(ident).unwrap_or_else(|| p.to_string()))
            .collect();
    match parts.as_slice() {
        [name] => Ok(name.clone()),
        [schema, name] if schema == "public" => Ok(name.clone()),
        _ => Err(unsupported(format!(
            "{n}: procedures live in schema public"
        ))),
    }
}

/// The first word of a statement, for messages.
fn first_word(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .find(|w| !w.is_empty())
        .unwrap_or("")
        .to_ascii_uppercase()
}

fn convert(stmt: ast::Statement, text: &str, catalog: bool) -> Result<Stmt, SqlError> {
    use ast::Statement as S;
    Ok(match stmt {
        S::Call(f) => {
            let proc = object_name(&f.name)?;
            let args = function_args(&f.args, &proc)?;
            Stmt::Call {
                proc,
                args,
                projection: None,
            }
        }
        S::Query(q) if catalog => Stmt::Catalog {
            sql: text.to_string(),
            stmt: Box::new(S::Query(q)),
        },
        S::Query(q) => query(q)?,
        s @ (S::Insert(_) | S::Update(_) | S::Delete(_)) => Stmt::Tables(Box::new(s)),
        S::StartTransaction { modes, .. } => {
            serializable_read_write("BEGIN", &modes)?;
            Stmt::Begin
        }
        S::Commit { chain: true, .. } | S::Rollback { chain: true, .. } => {
            return Err(unsupported("AND CHAIN is not supported"))
        }
        S::Commit { .. } => Stmt::Commit,
        S::Rollback {
            savepoint: None, ..
        } => Stmt::Rollback,
        S::Rollback {
            savepoint: Some(_), ..
        }
        | S::Savepoint { .. }
        | S::ReleaseSavepoint { .. } => {
            return Err(unsupported(
                "savepoints are not supported: a failed statement aborts the whole block",
            ))
        }
        S::Set(s) => set(s)?,
        S::Reset(r) => match r.reset {
            ast::Reset::ALL => Stmt::Reset(None),
            ast::Reset::ConfigurationParameter(n) => Stmt::Reset(Some(setting_name(&n))),
            ast::Reset::SessionAuthorization => Stmt::NoOp("RESET"),
        },
        // PostgreSQL reads `SHOW tables` as a setting's name.
        S::ShowTables { .. } => Stmt::ShowSetting(Some("tables".into())),
        S::ShowVariable { variable } => {
            let words: Vec<String> = variable.iter().map(ident).collect();
            match words.join(" ").as_str() {
                "all" => Stmt::ShowSetting(None),
                "procedures" => Stmt::Show(Show::Procedures),
                "islands" => Stmt::Show(Show::Islands),
                "peers" => Stmt::Show(Show::Peers),
                "threads" => Stmt::Show(Show::Threads),
                "stats" => Stmt::Show(Show::Stats),
                "transaction isolation level" => {
                    Stmt::ShowSetting(Some("transaction_isolation".into()))
                }
                "time zone" => Stmt::ShowSetting(Some("timezone".into())),
                "session authorization" => Stmt::ShowSetting(Some("session_authorization".into())),
                _ => Stmt::ShowSetting(Some(words.join("."))),
            }
        }
        S::Discard { object_type } => match object_type {
            ast::DiscardObject::ALL => Stmt::DiscardAll,
            ast::DiscardObject::PLANS => Stmt::NoOp("DISCARD PLANS"),
            ast::DiscardObject::SEQUENCES => Stmt::NoOp("DISCARD SEQUENCES"),
            ast::DiscardObject::TEMP => Stmt::NoOp("DISCARD TEMP"),
        },
        S::Deallocate { name, .. } => {
            if name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all") {
                Stmt::Deallocate(None)
            } else {
                Stmt::Deallocate(Some(name.value))
            }
        }
        S::Close { cursor } => match cursor {
            ast::CloseCursor::All => Stmt::Close(None),
            ast::CloseCursor::Specific { name } => Stmt::Close(Some(name.value)),
        },
        S::UNLISTEN { .. } => Stmt::NoOp("UNLISTEN"),
        _ => {
            return Err(unsupported(format!(
                "{} is not supported: this server runs procedures (CALL name(...), SELECT * FROM \
                 name(...)), session statements (SET, SHOW, RESET, DISCARD) and transaction \
                 statements",
                first_word(text)
            )))
        }
    })
}

/// A setting's name as SHOW and SET take it: lower case, dotted.
fn setting_name(n: &ast::ObjectName) -> String {
    n.0.iter()
        .map(|p| p.as_ident().map(ident).unwrap_or_else(|| p.to_string()))
        .collect::<Vec<_>>()
        .join(".")
}

/// A setting's value as written: strings unquoted, names as written, lists
/// joined with `, `.
fn setting_value(e: &Expr) -> Result<String, SqlError> {
    Ok(match e {
        Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s)
            | ast::Value::EscapedStringLiteral(s)
            | ast::Value::DoubleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.clone(),
            ast::Value::Boolean(b) => if *b { "on" } else { "off" }.to_string(),
            v => v.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => format!("-{}", setting_value(expr)?),
        e => {
            return Err(syntax(format!(
                "a setting's value is a name, a number or a 'string', not {e}"
            )))
        }
    })
}

fn set(s: ast::Set) -> Result<Stmt, SqlError> {
    use ast::Set as T;
    match s {
        T::SingleAssignment {
            scope,
            variable,
            values,
            ..
        } => {
            let name = setting_name(&variable);
            let value = match values.as_slice() {
                [Expr::Identifier(i)]
                    if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default") =>
                {
                    None
                }
                v => Some(
                    v.iter()
                        .map(setting_value)
                        .collect::<Result<Vec<_>, _>>()?
                        .join(", "),
                ),
            };
            Ok(Stmt::Set {
                name,
                value,
                local: matches!(scope, Some(ast::ContextModifier::Local)),
            })
        }
        T::SetTimeZone { local, value } => Ok(Stmt::Set {
            name: "timezone".into(),
            value: Some(setting_value(&value)?),
            local,
        }),
        T::SetNames { charset_name, .. } => Ok(Stmt::Set {
            name: "client_encoding".into(),
            value: Some(charset_name.value),
            local: false,
        }),
        T::SetTransaction { modes, .. } => {
            serializable_read_write("SET TRANSACTION", &modes)?;
            Ok(Stmt::NoOp("SET"))
        }
        s => Err(unsupported(format!("{s} is not supported"))),
    }
}

/// The arguments of a call: literals, casts, placeholders, arrays.
fn function_args(args: &FunctionArguments, proc: &str) -> Result<Vec<Arg>, SqlError> {
    match args {
        FunctionArguments::None => Err(syntax(format!(
            "{proc} is called with its arguments in parentheses: {proc}(...)"
        ))),
        FunctionArguments::Subquery(_) => {
            Err(unsupported(format!("a subquery as the argument of {proc}")))
        }
        FunctionArguments::List(l) => {
            if l.duplicate_treatment.is_some() || !l.clauses.is_empty() {
                return Err(unsupported(format!(
                    "DISTINCT, ORDER BY or other clauses in the arguments of {proc}"
                )));
            }
            l.args.iter().map(|a| function_arg(a, proc)).collect()
        }
    }
}

fn function_arg(a: &FunctionArg, proc: &str) -> Result<Arg, SqlError> {
    match a {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => literal(e),
        _ => Err(unsupported(format!(
            "{a} as an argument of {proc}: arguments are passed by position"
        ))),
    }
}

fn number(n: &str, negative: bool) -> Result<Value, SqlError> {
    if n.contains(['.', 'e', 'E']) {
        let v: f64 = n
            .parse()
            .map_err(|_| syntax(format!("{n:?} is not a number")))?;
        return Ok(Value::Float(if negative { -v } else { v }));
    }
    let text = if negative {
        format!("-{n}")
    } else {
        n.to_string()
    };
    text.parse::<i64>().map(Value::Int).map_err(|_| {
        SqlError::new(
            "22003",
            format!("integer {text} is out of range for a 64-bit integer"),
        )
    })
}

/// An argument (or a constant): a literal, a cast of one, a placeholder,
/// or `ARRAY[…]`.
pub fn literal(e: &Expr) -> Result<Arg, SqlError> {
    Ok(match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Arg::Lit(number(n, false)?),
            ast::Value::SingleQuotedString(s)
            | ast::Value::EscapedStringLiteral(s)
            | ast::Value::UnicodeStringLiteral(s) => Arg::Text(s.clone()),
            ast::Value::DollarQuotedString(d) => Arg::Text(d.value.clone()),
            ast::Value::Null => Arg::Lit(Value::Null),
            ast::Value::Boolean(b) => Arg::Lit(Value::Int(i64::from(*b))),
            ast::Value::Placeholder(p) => {
                match p.strip_prefix('$').and_then(|d| d.parse::<usize>().ok()) {
                    Some(n) if (1..=MAX_PARAM).contains(&n) => Arg::Param(n),
                    _ => {
                        return Err(syntax(format!(
                            "placeholder {p}: placeholders are $1 to ${MAX_PARAM}"
                        )))
                    }
                }
            }
            v => return Err(unsupported(format!("the literal {v}"))),
        },
        Expr::Nested(e) => literal(e)?,
        Expr::UnaryOp { op, expr } => match (op, &**expr) {
            (ast::UnaryOperator::Minus, Expr::Value(v)) => match &v.value {
                ast::Value::Number(n, _) => Arg::Lit(number(n, true)?),
                _ => negate(literal(expr)?)?,
            },
            (ast::UnaryOperator::Minus, e) => negate(literal(e)?)?,
            (ast::UnaryOperator::Plus, e) => literal(e)?,
            _ => return Err(unsupported(format!("the operator {op} in an argument"))),
        },
        Expr::Cast {
            expr, data_type, ..
        } => cast(literal(expr)?, &data_type.to_string())?,
        Expr::Array(a) => {
            let mut items = Vec::with_capacity(a.elem.len());
            for e in &a.elem {
                items.push(match literal(e)? {
                    a @ (Arg::Param(_) | Arg::Lit(Value::Int(_))) => a,
                    Arg::Text(s) => Arg::Lit(coerce(&s, Type::Int)?),
                    _ => {
                        return Err(syntax(format!(
                            "an ARRAY holds integers and placeholders only, not {e}"
                        )))
                    }
                });
            }
            Arg::Array(items)
        }
        e => {
            return Err(unsupported(format!(
                "{e} as an argument: an argument is a literal, a cast of one, $n or ARRAY[...]"
            )))
        }
    })
}

fn negate(a: Arg) -> Result<Arg, SqlError> {
    match a {
        Arg::Lit(Value::Int(i)) => {
            i.checked_neg()
                .map(|v| Arg::Lit(Value::Int(v)))
                .ok_or_else(|| {
                    SqlError::new(
                        "22003",
                        format!("-({i}) is out of range for a 64-bit integer"),
                    )
                })
        }
        Arg::Lit(Value::Float(f)) => Ok(Arg::Lit(Value::Float(-f))),
        a => Err(unsupported(format!("the negation of {a:?}"))),
    }
}

/// What a cast's type name stands for here.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CastTo {
    Int(u32),
    Float,
    Text,
    Ints,
    Bool,
}

fn cast_to(name: &str) -> Option<CastTo> {
    let n = name.to_ascii_lowercase();
    let base = n.split('(').next().unwrap_or("").trim();
    Some(match base {
        "int2" | "smallint" => CastTo::Int(16),
        "int4" | "int" | "integer" => CastTo::Int(32),
        "int8" | "bigint" => CastTo::Int(64),
        "float4" | "real" | "float8" | "double precision" | "float" | "numeric" | "decimal" => {
            CastTo::Float
        }
        "text" | "varchar" | "character varying" | "char" | "character" | "bpchar" | "name"
        | "unknown" => CastTo::Text,
        "bool" | "boolean" => CastTo::Bool,
        "int2[]" | "smallint[]" | "int4[]" | "int[]" | "integer[]" | "int8[]" | "bigint[]"
        | "_int8" | "_int4" | "_int2" => CastTo::Ints,
        _ => return None,
    })
}

/// `arg::name`: a literal converted now (a quoted one parsed as the type,
/// `22P02` if it does not parse); a placeholder stays one (its parameter's
/// type decides).
fn cast(arg: Arg, name: &str) -> Result<Arg, SqlError> {
    let Some(to) = cast_to(name) else {
        return Err(unsupported(format!(
            "a cast to {name}: this server casts to integers, floats, text, bool and int8[]"
        )));
    };
    let cannot = |from: &str| SqlError::new("42846", format!("cannot cast type {from} to {name}"));
    let v = match arg {
        Arg::Param(n) => return Ok(Arg::Param(n)),
        Arg::Lit(Value::Null) => Value::Null,
        Arg::Text(s) | Arg::Lit(Value::Str(s)) => match to {
            CastTo::Int(bits) => check_bits(coerce(&s, Type::Int)?, bits, name)?,
            CastTo::Float => coerce(&s, Type::Float)?,
            CastTo::Text => Value::Str(s),
            CastTo::Ints => coerce(&s, Type::Ints)?,
            CastTo::Bool => Value::Int(i64::from(parse_bool(&s).ok_or_else(|| {
                SqlError::new(
                    "22P02",
                    format!("invalid input syntax for type boolean: {s:?}"),
                )
            })?)),
        },
        Arg::Lit(Value::Int(i)) => match to {
            CastTo::Int(bits) => check_bits(Value::Int(i), bits, name)?,
            CastTo::Float => Value::Float(i as f64),
            CastTo::Text => Value::Str(i.to_string()),
            CastTo::Bool => Value::Int(i64::from(i != 0)),
            CastTo::Ints => return Err(cannot("integer")),
        },
        Arg::Lit(Value::Float(f)) => match to {
            CastTo::Int(bits) => {
                let r = f.round_ties_even();
                if !(-(i64::MAX as f64)..(i64::MAX as f64)).contains(&r) {
                    return Err(SqlError::new(
                        "22003",
                        format!("{f} is out of range for type {name}"),
                    ));
                }
                check_bits(Value::Int(r as i64), bits, name)?
            }
            CastTo::Float => Value::Float(f),
            CastTo::Text => Value::Str(f.to_string()),
            _ => return Err(cannot("double precision")),
        },
        Arg::Lit(Value::Ints(v)) => match to {
            CastTo::Ints => Value::Ints(v),
            _ => return Err(cannot("bigint[]")),
        },
        Arg::Array(items) => match to {
            CastTo::Ints => return Ok(Arg::Array(items)),
            _ => return Err(cannot("bigint[]")),
        },
    };
    Ok(Arg::Lit(v))
}

fn check_bits(v: Value, bits: u32, name: &str) -> Result<Value, SqlError> {
    if let Value::Int(i) = v {
        let ok = match bits {
            16 => i16::try_from(i).is_ok(),
            32 => i32::try_from(i).is_ok(),
            _ => true,
        };
        if !ok {
            return Err(SqlError::new(
                "22003",
                format!("{i} is out of range for type {name}"),
            ));
        }
    }
    Ok(v)
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// PostgreSQL's name of a parameter type, for `22P02` messages.
fn type_name(t: Type) -> &'static str {
    match t {
        Type::Int => "bigint",
        Type::Float => "double precision",
        Type::Str => "text",
        Type::Ints => "bigint[]",
    }
}

/// An untyped literal (a quoted one, or a parameter sent in text) taken as
/// type `t`, as PostgreSQL's input functions take it: `22P02` naming the
/// text if it does not parse. Arrays are `{1,2}`, `{"1","2"}` or `{}`.
pub fn coerce(s: &str, t: Type) -> Result<Value, SqlError> {
    let invalid = || {
        SqlError::new(
            "22P02",
            format!("invalid input syntax for type {}: {s:?}", type_name(t)),
        )
    };
    Ok(match t {
        Type::Int => Value::Int(s.trim().parse().map_err(|_| {
            if s.trim()
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'-' || b == b'+')
                && !s.trim().is_empty()
            {
                SqlError::new(
                    "22003",
                    format!("value {:?} is out of range for type bigint", s.trim()),
                )
            } else {
                invalid()
            }
        })?),
        Type::Float => Value::Float(s.trim().parse().map_err(|_| invalid())?),
        Type::Str => Value::Str(s.to_string()),
        Type::Ints => Value::Ints(int_array(s).ok_or_else(invalid)?),
    })
}

/// `{1,2}`, `{"1", "2"}`, `{}`: a one-dimensional array of integers.
fn int_array(s: &str) -> Option<Vec<i64>> {
    let inner = s.trim().strip_prefix('{')?.strip_suffix('}')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    inner
        .split(',')
        .map(|item| {
            let item = item.trim();
            let item = match item.strip_prefix('"') {
                Some(r) => r.strip_suffix('"')?,
                None => item,
            };
            item.trim().parse().ok()
        })
        .collect()
}

/// A query: a call written as a `SELECT`, a `SELECT` of constants, or (a
/// seam) a query on tables.
fn query(q: Box<ast::Query>) -> Result<Stmt, SqlError> {
    let plain_query = q.with.is_none()
        && q.order_by.is_none()
        && q.limit_clause.is_none()
        && q.fetch.is_none()
        && q.locks.is_empty();
    let ast::SetExpr::Select(s) = &*q.body else {
        return Err(unsupported(format!(
            "{}: this server answers SELECT of procedures and constants",
            q.body
        )));
    };
    let from_table = matches!(
        s.from.as_slice(),
        [
            ast::TableWithJoins {
                relation: ast::TableFactor::Table { args: None, .. },
                ..
            },
            ..
        ]
    );
    if from_table || s.from.len() > 1 {
        return Ok(Stmt::Tables(Box::new(ast::Statement::Query(q))));
    }
    let plain_select = s.distinct.is_none()
        && s.top.is_none()
        && s.into.is_none()
        && s.selection.is_none()
        && s.having.is_none()
        && s.qualify.is_none()
        && s.prewhere.is_none()
        && s.lateral_views.is_empty()
        && s.named_window.is_empty()
        && s.sort_by.is_empty()
        && matches!(&s.group_by, ast::GroupByExpr::Expressions(v, m) if v.is_empty() && m.is_empty());
    if !(plain_query && plain_select) {
        return Err(unsupported(
            "WITH, WHERE, GROUP BY, ORDER BY, LIMIT or DISTINCT on a procedure call or constants",
        ));
    }
    match s.from.as_slice() {
        [] => select_constants(&s.projection),
        [ast::TableWithJoins { relation, joins }] if joins.is_empty() => match relation {
            ast::TableFactor::Table {
                name,
                alias,
                args: Some(targs),
                with_ordinality: false,
                ..
            } => {
                let proc = object_name(name)?;
                let args = targs
                    .args
                    .iter()
                    .map(|a| function_arg(a, &proc))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut items = Vec::new();
                for it in &s.projection {
                    items.push(match it {
                        SelectItem::Wildcard(_) => Item::Star,
                        SelectItem::QualifiedWildcard(..) => Item::Star,
                        SelectItem::UnnamedExpr(e) => Item::Column {
                            name: column_name(e)?,
                            alias: None,
                        },
                        SelectItem::ExprWithAlias { expr, alias } => Item::Column {
                            name: column_name(expr)?,
                            alias: Some(ident(alias)),
                        },
                        it => return Err(unsupported(format!("{it} in a select list"))),
                    });
                }
                let renames: Vec<String> = alias
                    .as_ref()
                    .map(|a| a.columns.iter().map(|c| ident(&c.name)).collect())
                    .unwrap_or_default();
                let projection = if renames.is_empty() && items == [Item::Star] {
                    None
                } else {
                    Some(Projection { items, renames })
                };
                Ok(Stmt::Call {
                    proc,
                    args,
                    projection,
                })
            }
            r => Err(unsupported(format!(
                "FROM {r}: this server answers SELECT from one procedure call"
            ))),
        },
        _ => Err(unsupported("joins")),
    }
}

/// A column named in the select list of a call: `col` or `t.col`.
fn column_name(e: &Expr) -> Result<String, SqlError> {
    match e {
        Expr::Identifier(i) => Ok(ident(i)),
        Expr::CompoundIdentifier(v) if v.len() == 2 => Ok(ident(&v[1])),
        e => Err(unsupported(format!(
            "{e} in the select list of a procedure call: name its columns"
        ))),
    }
}

/// The functions [`Func`] names, by name.
fn builtin(name: &str) -> bool {
    matches!(
        name,
        "version"
            | "current_setting"
            | "set_config"
            | "pg_advisory_unlock_all"
            | "current_database"
            | "current_schema"
            | "current_user"
            | "session_user"
            | "pg_backend_pid"
    )
}

/// `SELECT` without `FROM`: constants and the functions drivers call, or
/// `SELECT name(…)` of one procedure.
fn select_constants(items: &[SelectItem]) -> Result<Stmt, SqlError> {
    if let [SelectItem::UnnamedExpr(Expr::Function(f))
    | SelectItem::ExprWithAlias {
        expr: Expr::Function(f),
        ..
    }] = items
    {
        let name = object_name(&f.name)?;
        if !builtin(&name) {
            let args = function_args(&f.args, &name)?;
            return Ok(Stmt::Call {
                proc: name,
                args,
                projection: None,
            });
        }
    }
    let mut cols = Vec::with_capacity(items.len());
    for it in items {
        let (e, alias) = match it {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(ident(alias))),
            it => return Err(unsupported(format!("{it} without FROM"))),
        };
        let (default_name, v) = scalar(e)?;
        cols.push((alias.unwrap_or(default_name), v));
    }
    Ok(Stmt::Select(cols))
}

fn text_arg(f: &ast::Function, i: usize) -> Result<String, SqlError> {
    let FunctionArguments::List(l) = &f.args else {
        return Err(syntax(format!("{} takes arguments", f.name)));
    };
    match l.args.get(i) {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => match literal(e)? {
            Arg::Text(s) | Arg::Lit(Value::Str(s)) => Ok(s),
            Arg::Lit(Value::Int(v)) => Ok(v.to_string()),
            Arg::Lit(Value::Float(v)) => Ok(v.to_string()),
            a => Err(unsupported(format!(
                "{a:?} as argument {} of {}",
                i + 1,
                f.name
            ))),
        },
        _ => Err(SqlError::new(
            "42883",
            format!("{}: argument {} is missing or not a literal", f.name, i + 1),
        )),
    }
}

fn arg_count(f: &ast::Function) -> usize {
    match &f.args {
        FunctionArguments::List(l) => l.args.len(),
        _ => 0,
    }
}

/// One constant column: its default name (PostgreSQL's) and value.
fn scalar(e: &Expr) -> Result<(String, Scalar), SqlError> {
    if let Expr::Function(f) = e {
        let name = object_name(&f.name)?;
        let argc = arg_count(f);
        let wrong = |n: usize| {
            SqlError::new(
                "42883",
                format!("function {name} takes {n} argument(s), {argc} given"),
            )
        };
        let func = match name.as_str() {
            "version" if argc == 0 => Func::Version,
            "current_setting" if argc == 1 || argc == 2 => {
                Func::CurrentSetting(text_arg(f, 0)?.to_lowercase())
            }
            "set_config" if argc == 3 => {
                let local = text_arg(f, 2)?;
                Func::SetConfig {
                    name: text_arg(f, 0)?.to_lowercase(),
                    value: text_arg(f, 1)?,
                    local: matches!(local.as_str(), "1" | "true" | "t" | "on"),
                }
            }
            "pg_advisory_unlock_all" if argc == 0 => Func::AdvisoryUnlockAll,
            "current_database" if argc == 0 => Func::CurrentDatabase,
            "current_schema" if argc == 0 => Func::CurrentSchema,
            "pg_backend_pid" if argc == 0 => Func::BackendPid,
            "version"
            | "pg_advisory_unlock_all"
            | "current_database"
            | "current_schema"
            | "pg_backend_pid" => return Err(wrong(0)),
            "current_setting" => return Err(wrong(1)),
            "set_config" => return Err(wrong(3)),
            _ => {
                return Err(unsupported(format!(
                    "function {name} in a SELECT of constants (a procedure is called alone: \
                     SELECT {name}(...))"
                )))
            }
        };
        return Ok((name, Scalar::Func(func)));
    }
    if let Expr::Identifier(i) = e {
        // current_user, session_user, current_schema are keywords without ().
        let n = ident(i);
        if matches!(n.as_str(), "current_user" | "session_user" | "user") {
            return Ok((n, Scalar::Func(Func::CurrentUser)));
        }
        if n == "current_schema" {
            return Ok((n, Scalar::Func(Func::CurrentSchema)));
        }
    }
    let name = match e {
        Expr::Cast { data_type, .. } => data_type.to_string().to_lowercase(),
        _ => "?column?".to_string(),
    };
    if has_param(e) {
        return Ok((name, Scalar::Param(ParamExpr::new(e)?)));
    }
    Ok((name, Scalar::Value(constant(e)?)))
}

/// A constant expression: literals, casts, arithmetic and `||`.
fn constant(e: &Expr) -> Result<Value, SqlError> {
    match e {
        Expr::Nested(e) => constant(e),
        Expr::BinaryOp { left, op, right } => {
            let (l, r) = (constant(left)?, constant(right)?);
            binary(l, op, r)
        }
        Expr::Identifier(i) => Err(SqlError::new(
            "42703",
            format!("column \"{}\" does not exist (there is no FROM)", ident(i)),
        )),
        e => match literal(e)? {
            Arg::Lit(v) => Ok(v),
            Arg::Text(s) => Ok(Value::Str(s)),
            Arg::Param(n) => Err(unsupported(format!(
                "${n} in a SELECT of constants: its type cannot be known"
            ))),
            Arg::Array(items) => Ok(Value::Ints(
                items
                    .into_iter()
                    .map(|a| match a {
                        Arg::Lit(Value::Int(i)) => Ok(i),
                        _ => Err(unsupported("a placeholder in a constant ARRAY")),
                    })
                    .collect::<Result<_, _>>()?,
            )),
        },
    }
}

fn binary(l: Value, op: &ast::BinaryOperator, r: Value) -> Result<Value, SqlError> {
    use ast::BinaryOperator as B;
    let overflow = || SqlError::new("22003", "integer out of range");
    let by_zero = || SqlError::new("22012", "division by zero");
    Ok(match (l, op, r) {
        (Value::Null, _, _) | (_, _, Value::Null) => Value::Null,
        (Value::Int(a), op, Value::Int(b)) => Value::Int(match op {
            B::Plus => a.checked_add(b).ok_or_else(overflow)?,
            B::Minus => a.checked_sub(b).ok_or_else(overflow)?,
            B::Multiply => a.checked_mul(b).ok_or_else(overflow)?,
            B::Divide if b == 0 => return Err(by_zero()),
            B::Divide => a.checked_div(b).ok_or_else(overflow)?,
            B::Modulo if b == 0 => return Err(by_zero()),
            B::Modulo => a.checked_rem(b).unwrap_or(0),
            B::StringConcat => return Ok(Value::Str(format!("{a}{b}"))),
            op => return Err(unsupported(format!("the operator {op} on constants"))),
        }),
        (a @ (Value::Int(_) | Value::Float(_)), op, b @ (Value::Int(_) | Value::Float(_)))
            if !matches!(op, B::StringConcat) =>
        {
            let f = |v: Value| match v {
                Value::Int(i) => i as f64,
                Value::Float(f) => f,
                _ => 0.0,
            };
            let (a, b) = (f(a), f(b));
            Value::Float(match op {
                B::Plus => a + b,
                B::Minus => a - b,
                B::Multiply => a * b,
                B::Divide if b == 0.0 => return Err(by_zero()),
                B::Divide => a / b,
                op => return Err(unsupported(format!("the operator {op} on floats"))),
            })
        }
        (a, B::StringConcat, b) => Value::Str(format!("{}{}", plain(&a), plain(&b))),
        (a, op, b) => {
            return Err(SqlError::new(
                "42883",
                format!("operator does not exist: {a} {op} {b}"),
            ))
        }
    })
}

/// A value's text as `||` joins it.
fn plain(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        v => v.to_string(),
    }
}

/// The hand-written parser of the one hot form (see the module's comment):
/// `None` for anything it does not take, which sqlparser then parses.
mod fast {
    use super::{Arg, SqlError, Stmt, MAX_PARAM, MAX_STATEMENTS};
    use crate::api::Value;

    /// The statements of `sql` if every one is a call of literals (at most
    /// [`MAX_STATEMENTS`]); `None` otherwise.
    pub(super) fn parse(sql: &str) -> Option<Vec<Stmt>> {
        let mut p = Parser {
            lex: Lexer { s: sql, at: 0 },
            peeked: None,
            depth: 0,
        };
        let mut out = Vec::new();
        loop {
            match p.peek().ok()? {
                None => return Some(out),
                Some((_, Tok::Sym(';'))) => {
                    p.next().ok()?;
                    continue;
                }
                Some(_) if out.len() == MAX_STATEMENTS => return None,
                Some(_) => {}
            }
            out.push(p.statement().ok()?);
            match p.next().ok()? {
                None | Some((_, Tok::Sym(';'))) => {}
                _ => return None,
            }
        }
    }

    #[derive(Clone, Debug, PartialEq)]
    enum Tok {
        Word(String),
        Quoted(String),
        Int(i64),
        Float(f64),
        /// 9223372036854775808: an integer only when negated.
        MinMagnitude,
        Str(String),
        Param(usize),
        Sym(char),
    }

    struct Lexer<'a> {
        s: &'a str,
        at: usize,
    }

    fn syntax(message: String) -> SqlError {
        SqlError {
            code: "42601",
            message,
        }
    }

    impl<'a> Lexer<'a> {
        fn rest(&self) -> &'a str {
            &self.s[self.at..]
        }

        /// Skips white space and `--` / `/* */` comments.
        fn skip(&mut self) -> Result<(), SqlError> {
            loop {
                let r = self.rest();
                let t = r.trim_start();
                self.at += r.len() - t.len();
                if t.starts_with("--") {
                    self.at += t.find('\n').unwrap_or(t.len());
                } else if let Some(body) = t.strip_prefix("/*") {
                    match body.find("*/") {
                        Some(end) => self.at += end + 4,
                        None => return Err(syntax("unterminated /* comment".into())),
                    }
                } else {
                    return Ok(());
                }
            }
        }

        /// The next token and the byte offset it starts at; `None` at the end.
        fn next(&mut self) -> Result<Option<(usize, Tok)>, SqlError> {
            self.skip()?;
            let start = self.at;
            let r = self.rest();
            let Some(c) = r.chars().next() else {
                return Ok(None);
            };
            let tok = if c.is_ascii_alphabetic() || c == '_' {
                let n = r
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(r.len());
                self.at += n;
                Tok::Word(r[..n].to_ascii_lowercase())
            } else if c.is_ascii_digit()
                || (c == '.' && r[1..].starts_with(|d: char| d.is_ascii_digit()))
            {
                let mut n = r
                    .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
                    .unwrap_or(r.len());
                // An exponent: e, an optional sign, digits.
                let b = r.as_bytes();
                if n < b.len() && (b[n] == b'e' || b[n] == b'E') {
                    let mut m = n + 1;
                    if m < b.len() && (b[m] == b'+' || b[m] == b'-') {
                        m += 1;
                    }
                    if m < b.len() && b[m].is_ascii_digit() {
                        while m < b.len() && b[m].is_ascii_digit() {
                            m += 1;
                        }
                        n = m;
                    }
                }
                let text = &r[..n];
                self.at += n;
                if r[n..].starts_with(|ch: char| ch.is_ascii_alphabetic() || ch == '_') {
                    return Err(syntax(format!(
                        "trailing junk after numeric literal {text:?} at offset {start}"
                    )));
                }
                if text.contains(['.', 'e', 'E']) {
                    Tok::Float(text.parse().map_err(|_| {
                        syntax(format!("{text:?} at offset {start} is not a number"))
                    })?)
                } else {
                    match text.parse::<i64>() {
                        Ok(v) => Tok::Int(v),
                        Err(_) if text == "9223372036854775808" => Tok::MinMagnitude,
                        Err(_) => {
                            return Err(SqlError {
                                code: "22003",
                                message: format!(
                                "integer {text} at offset {start} is out of range for a 64-bit integer"
                            ),
                            })
                        }
                    }
                }
            } else if c == '\'' {
                let (out, n) = quoted(r, '\'').ok_or_else(|| {
                    syntax(format!("unterminated quoted string at offset {start}"))
                })?;
                self.at += n;
                Tok::Str(out)
            } else if c == '"' {
                let (out, n) = quoted(r, '"')
                    .ok_or_else(|| syntax(format!("unterminated quoted name at offset {start}")))?;
                self.at += n;
                if out.is_empty() {
                    return Err(syntax(format!("empty quoted name at offset {start}")));
                }
                Tok::Quoted(out)
            } else if c == '$' {
                let n = r[1..]
                    .find(|ch: char| !ch.is_ascii_digit())
                    .unwrap_or(r.len() - 1);
                let digits = &r[1..1 + n];
                self.at += 1 + n;
                match digits.parse::<usize>() {
                    Ok(p) if (1..=MAX_PARAM).contains(&p) => Tok::Param(p),
                    _ => {
                        return Err(syntax(format!(
                        "placeholder ${digits} at offset {start}: placeholders are $1 to ${MAX_PARAM}"
                    )))
                    }
                }
            } else if "(),;[]*-.".contains(c) {
                self.at += 1;
                Tok::Sym(c)
            } else {
                return Err(syntax(format!(
                    "unexpected character {c:?} at offset {start}"
                )));
            };
            Ok(Some((start, tok)))
        }
    }

    /// The text between the quote `q` that starts `r` and the quote that ends
    /// it (a doubled quote stands for one), and the bytes taken; `None` if it
    /// does not end.
    fn quoted(r: &str, q: char) -> Option<(String, usize)> {
        let mut out = String::new();
        let mut i = 1;
        loop {
            let at = r[i..].find(q)?;
            out.push_str(&r[i..i + at]);
            i += at + 1;
            if r[i..].starts_with(q) {
                out.push(q);
                i += 1;
            } else {
                return Some((out, i));
            }
        }
    }

    /// A token stream with one token of look-ahead.
    struct Parser<'a> {
        lex: Lexer<'a>,
        peeked: Option<Option<(usize, Tok)>>,
        /// `ARRAY[` levels open around the argument being parsed (at most 1:
        /// nested arrays are left to sqlparser).
        depth: usize,
    }

    fn describe(t: &Option<(usize, Tok)>) -> String {
        match t {
            None => "the end of the statement".into(),
            Some((at, tok)) => {
                let what = match tok {
                    Tok::Word(w) => w.clone(),
                    Tok::Quoted(w) => format!("\"{w}\""),
                    Tok::Int(v) => v.to_string(),
                    Tok::Float(v) => v.to_string(),
                    Tok::MinMagnitude => "9223372036854775808".into(),
                    Tok::Str(s) => format!("'{s}'"),
                    Tok::Param(p) => format!("${p}"),
                    Tok::Sym(c) => c.to_string(),
                };
                format!("{what:?} at offset {at}")
            }
        }
    }

    impl<'a> Parser<'a> {
        fn peek(&mut self) -> Result<&Option<(usize, Tok)>, SqlError> {
            if self.peeked.is_none() {
                self.peeked = Some(self.lex.next()?);
            }
            Ok(self.peeked.as_ref().expect("just filled"))
        }

        fn next(&mut self) -> Result<Option<(usize, Tok)>, SqlError> {
            match self.peeked.take() {
                Some(t) => Ok(t),
                None => self.lex.next(),
            }
        }

        fn expect_sym(&mut self, c: char, what: &str) -> Result<(), SqlError> {
            let t = self.next()?;
            match &t {
                Some((_, Tok::Sym(s))) if *s == c => Ok(()),
                _ => Err(syntax(format!("expected {what}, found {}", describe(&t)))),
            }
        }

        fn expect_word(&mut self, w: &str) -> Result<(), SqlError> {
            let t = self.next()?;
            match &t {
                Some((_, Tok::Word(s))) if s == w => Ok(()),
                _ => Err(syntax(format!(
                    "expected {}, found {}",
                    w.to_uppercase(),
                    describe(&t)
                ))),
            }
        }

        fn name(&mut self) -> Result<String, SqlError> {
            let t = self.next()?;
            match t {
                Some((_, Tok::Word(w))) => Ok(w),
                Some((_, Tok::Quoted(w))) => Ok(w),
                t => Err(syntax(format!(
                    "expected a procedure name, found {}",
                    describe(&t)
                ))),
            }
        }

        fn arg(&mut self) -> Result<Arg, SqlError> {
            let t = self.next()?;
            Ok(match t {
                Some((_, Tok::Int(v))) => Arg::Lit(Value::Int(v)),
                Some((_, Tok::Float(v))) => Arg::Lit(Value::Float(v)),
                Some((_, Tok::Str(s))) => Arg::Text(s),
                Some((_, Tok::Param(p))) => Arg::Param(p),
                Some((_, Tok::Word(w))) if w == "null" => Arg::Lit(Value::Null),
                Some((_, Tok::Word(w))) if w == "true" => Arg::Lit(Value::Int(1)),
                Some((_, Tok::Word(w))) if w == "false" => Arg::Lit(Value::Int(0)),
                Some((at, Tok::Word(w))) if w == "array" => {
                    if self.depth >= 1 {
                        return Err(syntax(format!("nested ARRAY at offset {at}")));
                    }
                    self.depth += 1;
                    let items = self.array_items()?;
                    self.depth -= 1;
                    Arg::Array(items)
                }
                Some((_, Tok::Sym('-'))) => match self.next()? {
                    Some((_, Tok::Int(v))) => Arg::Lit(Value::Int(-v)),
                    Some((_, Tok::MinMagnitude)) => Arg::Lit(Value::Int(i64::MIN)),
                    Some((_, Tok::Float(v))) => Arg::Lit(Value::Float(-v)),
                    t => {
                        return Err(syntax(format!(
                            "expected a number after -, found {}",
                            describe(&t)
                        )))
                    }
                },
                Some((at, Tok::MinMagnitude)) => {
                    return Err(SqlError {
                        code: "22003",
                        message: format!(
                            "integer 9223372036854775808 at offset {at} is out of range for a 64-bit integer"
                        ),
                    })
                }
                t => {
                    return Err(syntax(format!(
                        "expected an argument (a number, a 'string', NULL, $n or ARRAY[...]), found {}",
                        describe(&t)
                    )))
                }
            })
        }

        /// The items of `ARRAY[…]` after the keyword, through the closing `]`.
        fn array_items(&mut self) -> Result<Vec<Arg>, SqlError> {
            self.expect_sym('[', "[ after ARRAY")?;
            let mut items = Vec::new();
            if !matches!(self.peek()?, Some((_, Tok::Sym(']')))) {
                loop {
                    let at = self.peek()?.as_ref().map(|(at, _)| *at);
                    match self.arg()? {
                        a @ (Arg::Lit(Value::Int(_)) | Arg::Param(_)) => items.push(a),
                        _ => {
                            return Err(syntax(format!(
                            "an ARRAY holds integers and placeholders only (the item at offset {})",
                            at.unwrap_or_default()
                        )))
                        }
                    }
                    if matches!(self.peek()?, Some((_, Tok::Sym(',')))) {
                        self.next()?;
                    } else {
                        break;
                    }
                }
            }
            self.expect_sym(']', "] or , in ARRAY[...]")?;
            Ok(items)
        }

        /// `name(arg, …)`.
        fn call(&mut self) -> Result<Stmt, SqlError> {
            let proc = self.name()?;
            self.expect_sym('(', "( after the procedure name")?;
            let mut args = Vec::new();
            if !matches!(self.peek()?, Some((_, Tok::Sym(')')))) {
                loop {
                    args.push(self.arg()?);
                    let t = self.next()?;
                    match &t {
                        Some((_, Tok::Sym(','))) => {}
                        Some((_, Tok::Sym(')'))) => break,
                        _ => {
                            return Err(syntax(format!(
                                "expected , or ) in the argument list, found {}",
                                describe(&t)
                            )))
                        }
                    }
                }
            } else {
                self.next()?;
            }
            Ok(Stmt::Call {
                proc,
                args,
                projection: None,
            })
        }

        /// `CALL name(…)` or `SELECT * FROM name(…)`; anything else is left
        /// to sqlparser (an error here only means "not the fast path").
        fn statement(&mut self) -> Result<Stmt, SqlError> {
            let t = self.next()?;
            let Some((_, Tok::Word(w))) = &t else {
                return Err(syntax(String::new()));
            };
            match w.as_str() {
                "call" => self.call(),
                "select" => {
                    self.expect_sym('*', "*")?;
                    self.expect_word("from")?;
                    self.call()
                }
                _ => Err(syntax(String::new())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn call(proc: &str, args: Vec<Arg>) -> Stmt {
        Stmt::Call {
            proc: proc.into(),
            args,
            projection: None,
        }
    }

    /// The statements of `sql` as sqlparser's path reads them (no fast path).
    fn slow(sql: &str) -> Result<Vec<Stmt>, SqlError> {
        split(sql)?.into_iter().map(parse_statement).collect()
    }

    fn one(sql: &str) -> Stmt {
        let mut v = parse(sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(v.len(), 1, "{sql}");
        v.pop().unwrap()
    }

    #[test]
    fn calls_parse_on_both_paths() {
        let tpcb = "CALL tpcb(1, -2, 3.5, 'it''s', NULL, $2)";
        let want = vec![call(
            "tpcb",
            vec![
                Arg::Lit(Value::Int(1)),
                Arg::Lit(Value::Int(-2)),
                Arg::Lit(Value::Float(3.5)),
                Arg::Text("it's".into()),
                Arg::Lit(Value::Null),
                Arg::Param(2),
            ],
        )];
        assert_eq!(fast::parse(tpcb), Some(want.clone()));
        assert_eq!(slow(tpcb).unwrap(), want);
        for sql in [
            "select * FROM \"MixedCase\"();",
            "SELECT * FROM public.\"MixedCase\"()",
        ] {
            assert_eq!(
                parse(sql).unwrap(),
                vec![call("MixedCase", vec![])],
                "{sql}"
            );
        }
        assert_eq!(
            parse("call Read(ARRAY[1,$1, 3])").unwrap(),
            vec![call(
                "read",
                vec![Arg::Array(vec![
                    Arg::Lit(Value::Int(1)),
                    Arg::Param(1),
                    Arg::Lit(Value::Int(3))
                ])]
            )]
        );
        for sql in [
            "call x(-9223372036854775808, 1e3)",
            "call x((-9223372036854775808)::int8, 1E3)",
        ] {
            assert_eq!(
                parse(sql).unwrap(),
                vec![call(
                    "x",
                    vec![
                        Arg::Lit(Value::Int(i64::MIN)),
                        Arg::Lit(Value::Float(1000.0))
                    ]
                )],
                "{sql}"
            );
        }
        assert_eq!(parse("call x($3, ARRAY[$7])").unwrap()[0].params(), 7);
    }

    #[test]
    fn casts_and_quoted_literals_type_as_postgresql_types_them() {
        let Stmt::Call { args, .. } = one(
            "CALL f('1', 1::int8, '5'::bigint, CAST('7' AS int4), '{1,2}'::int8[], \
             ARRAY['3', 4], $1::int8, '{\"11\",\"22\"}', 2.5::int8, 7::text, ARRAY[]::bigint[])",
        ) else {
            panic!()
        };
        assert_eq!(
            args,
            vec![
                Arg::Text("1".into()),
                Arg::Lit(Value::Int(1)),
                Arg::Lit(Value::Int(5)),
                Arg::Lit(Value::Int(7)),
                Arg::Lit(Value::Ints(vec![1, 2])),
                Arg::Array(vec![Arg::Lit(Value::Int(3)), Arg::Lit(Value::Int(4))]),
                Arg::Param(1),
                Arg::Text("{\"11\",\"22\"}".into()),
                Arg::Lit(Value::Int(2)),
                Arg::Lit(Value::Str("7".into())),
                Arg::Array(vec![]),
            ]
        );
        assert_eq!(
            coerce("{\"11\", \"22\"}", Type::Ints),
            Ok(Value::Ints(vec![11, 22]))
        );
        assert_eq!(coerce(" {} ", Type::Ints), Ok(Value::Ints(vec![])));
        assert_eq!(coerce(" 42 ", Type::Int), Ok(Value::Int(42)));
        let e = coerce("4x", Type::Int).unwrap_err();
        assert_eq!(e.code, "22P02");
        assert!(e.message.contains("bigint: \"4x\""), "{}", e.message);
        assert_eq!(coerce("{1,x}", Type::Ints).unwrap_err().code, "22P02");
        for (sql, code) in [
            ("CALL f('x'::int8)", "22P02"),
            ("CALL f(70000::int2)", "22003"),
            ("CALL f(1::regclass)", "0A000"),
            ("CALL f(ARRAY['a'])", "22P02"),
            ("CALL f(ARRAY[1.5])", "42601"),
        ] {
            assert_eq!(parse(sql).unwrap_err().code, code, "{sql}");
        }
    }

    #[test]
    fn selects_of_calls_take_aliases_and_column_lists() {
        assert_eq!(
            one("SELECT * FROM f($1) AS result"),
            Stmt::Call {
                proc: "f".into(),
                args: vec![Arg::Param(1)],
                projection: None
            }
        );
        assert_eq!(
            one("SELECT * FROM f(1) AS t(a)"),
            Stmt::Call {
                proc: "f".into(),
                args: vec![Arg::Lit(Value::Int(1))],
                projection: Some(Projection {
                    items: vec![Item::Star],
                    renames: vec!["a".into()]
                })
            }
        );
        assert_eq!(
            one("SELECT b, t.a AS x FROM f('1') t"),
            Stmt::Call {
                proc: "f".into(),
                args: vec![Arg::Text("1".into())],
                projection: Some(Projection {
                    items: vec![
                        Item::Column {
                            name: "b".into(),
                            alias: None
                        },
                        Item::Column {
                            name: "a".into(),
                            alias: Some("x".into())
                        }
                    ],
                    renames: vec![]
                })
            }
        );
        assert_eq!(one("SELECT f(2)"), call("f", vec![Arg::Lit(Value::Int(2))]));
        assert_eq!(
            parse("SELECT * FROM f(1) WHERE a = 1").unwrap_err().code,
            "0A000"
        );
    }

    #[test]
    fn a_syntax_error_fails_the_whole_string_and_a_refusal_fails_where_it_stands() {
        // A syntax error anywhere: nothing of the string is kept.
        assert_eq!(parse_each("BEGIN; SELEC 1").unwrap_err().code, "42601");
        // A refusal is kept in its place.
        let v = parse_each("BEGIN; SAVEPOINT a; SELECT 1").unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], Ok(Stmt::Begin));
        assert_eq!(v[1].as_ref().unwrap_err().code, "0A000");
        let runs =
            |sql: &str, in_block: bool| runs_before_refusal(&parse_each(sql).unwrap(), in_block);
        // In a block (opened in the string or before it), the statements
        // before the refusal run: the refusal then fails the block.
        assert_eq!(runs("BEGIN; SAVEPOINT a", false), [true, true]);
        assert_eq!(runs("SELECT 1; SAVEPOINT a", true), [true, true]);
        // PostgreSQL's implicit transaction rolls back what came before
        // the refusal since the last COMMIT or ROLLBACK: it does not run.
        assert_eq!(runs("SELECT 1; SAVEPOINT a", false), [false, true]);
        assert_eq!(
            runs("SELECT 1; COMMIT; SELECT 2; SAVEPOINT a", false),
            [true, true, false, true]
        );
        assert_eq!(
            runs("SELECT 1; BEGIN; SELECT 2; SAVEPOINT a", false),
            [false, true, true, true]
        );
        assert_eq!(
            runs("BEGIN; SELECT 1; ROLLBACK; SELECT 2; SAVEPOINT a", false),
            [true, true, true, false, true]
        );
        // Nothing refused: everything runs.
        assert_eq!(runs("SELECT 1; SELECT 2", false), [true, true]);
    }

    #[test]
    fn constants_over_placeholders_type_as_postgresql_types_them() {
        let one = |sql: &str| match parse(sql).unwrap().pop() {
            Some(Stmt::Select(mut cols)) => match cols.pop() {
                Some((name, Scalar::Param(p))) => (name, p),
                c => panic!("{sql}: {c:?}"),
            },
            s => panic!("{sql}: {s:?}"),
        };
        let (name, p) = one("SELECT $1");
        assert_eq!(
            (name.as_str(), &p.params[..], p.result),
            ("?column?", &[Type::Str][..], Type::Str)
        );
        assert_eq!(
            p.eval(&[Value::Str("x".into())]).unwrap(),
            Value::Str("x".into())
        );
        let (name, p) = one("SELECT $1::int8");
        assert_eq!(
            (name.as_str(), &p.params[..], p.result),
            ("int8", &[Type::Int][..], Type::Int)
        );
        assert_eq!(p.eval(&[Value::Int(7)]).unwrap(), Value::Int(7));
        let (_, p) = one("SELECT $1 + 1");
        assert_eq!((&p.params[..], p.result), (&[Type::Int][..], Type::Int));
        assert_eq!(p.eval(&[Value::Int(41)]).unwrap(), Value::Int(42));
        assert_eq!(p.eval(&[Value::Int(i64::MAX)]).unwrap_err().code, "22003");
        let (_, p) = one("SELECT 1.5 * $1");
        assert_eq!((&p.params[..], p.result), (&[Type::Float][..], Type::Float));
        let (_, p) = one("SELECT $1 || 'a'");
        assert_eq!((&p.params[..], p.result), (&[Type::Str][..], Type::Str));
        let (_, p) = one("SELECT $2::int4 - $1");
        assert_eq!(
            (&p.params[..], p.result),
            (&[Type::Int, Type::Int][..], Type::Int)
        );
        assert_eq!(
            p.eval(&[Value::Int(1), Value::Int(3)]).unwrap(),
            Value::Int(2)
        );
        assert_eq!(parse("SELECT 1, $3").unwrap()[0].params(), 3);
        // Outside the forms a constant takes: refused, naming it.
        assert_eq!(parse("SELECT $1 = 1").unwrap_err().code, "0A000");
    }

    #[test]
    fn what_drivers_send_on_their_own_parses() {
        assert_eq!(
            one("SELECT 1"),
            Stmt::Select(vec![("?column?".into(), Scalar::Value(Value::Int(1)))])
        );
        assert_eq!(
            one("select 1 + 2 * 3 AS x, 'a' || 'b', 1::int8"),
            Stmt::Select(vec![
                ("x".into(), Scalar::Value(Value::Int(7))),
                ("?column?".into(), Scalar::Value(Value::Str("ab".into()))),
                ("int8".into(), Scalar::Value(Value::Int(1))),
            ])
        );
        assert_eq!(
            one("SELECT version()"),
            Stmt::Select(vec![("version".into(), Scalar::Func(Func::Version))])
        );
        assert_eq!(
            one("SELECT current_setting('TimeZone')"),
            Stmt::Select(vec![(
                "current_setting".into(),
                Scalar::Func(Func::CurrentSetting("timezone".into()))
            )])
        );
        assert_eq!(
            one("SELECT pg_advisory_unlock_all()"),
            Stmt::Select(vec![(
                "pg_advisory_unlock_all".into(),
                Scalar::Func(Func::AdvisoryUnlockAll)
            )])
        );
        let set = |name: &str, value: Option<&str>, local: bool| Stmt::Set {
            name: name.into(),
            value: value.map(Into::into),
            local,
        };
        for (sql, want) in [
            (
                "SHOW transaction_isolation",
                Stmt::ShowSetting(Some("transaction_isolation".into())),
            ),
            (
                "SHOW TRANSACTION ISOLATION LEVEL",
                Stmt::ShowSetting(Some("transaction_isolation".into())),
            ),
            (
                "SHOW DateStyle",
                Stmt::ShowSetting(Some("datestyle".into())),
            ),
            ("SHOW ALL", Stmt::ShowSetting(None)),
            ("show STATS", Stmt::Show(Show::Stats)),
            ("SHOW threads", Stmt::Show(Show::Threads)),
            ("SHOW peers", Stmt::Show(Show::Peers)),
            (
                "SET application_name = 'a;b'",
                set("application_name", Some("a;b"), false),
            ),
            (
                "SET SESSION statement_timeout TO '5s'",
                set("statement_timeout", Some("5s"), false),
            ),
            (
                "SET LOCAL statement_timeout = 100",
                set("statement_timeout", Some("100"), true),
            ),
            (
                "SET search_path TO public, x",
                set("search_path", Some("public, x"), false),
            ),
            (
                "SET statement_timeout TO DEFAULT",
                set("statement_timeout", None, false),
            ),
            ("SET TIME ZONE 'UTC'", set("timezone", Some("UTC"), false)),
            ("SET my.custom = 1", set("my.custom", Some("1"), false)),
            (
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                Stmt::NoOp("SET"),
            ),
            ("RESET ALL", Stmt::Reset(None)),
            (
                "RESET statement_timeout",
                Stmt::Reset(Some("statement_timeout".into())),
            ),
            ("DEALLOCATE ALL", Stmt::Deallocate(None)),
            ("DEALLOCATE PREPARE s1", Stmt::Deallocate(Some("s1".into()))),
            ("CLOSE ALL", Stmt::Close(None)),
            ("CLOSE c", Stmt::Close(Some("c".into()))),
            ("UNLISTEN *", Stmt::NoOp("UNLISTEN")),
            ("DISCARD ALL", Stmt::DiscardAll),
            ("BEGIN ISOLATION LEVEL SERIALIZABLE", Stmt::Begin),
            ("BEGIN READ WRITE", Stmt::Begin),
            ("START TRANSACTION", Stmt::Begin),
            ("BEGIN", Stmt::Begin),
            ("COMMIT", Stmt::Commit),
            ("END", Stmt::Commit),
            ("ROLLBACK", Stmt::Rollback),
            ("ABORT", Stmt::Rollback),
        ] {
            assert_eq!(one(sql), want, "{sql}");
        }
        assert!(matches!(
            one("SELECT * FROM accounts WHERE id = 1"),
            Stmt::Tables(_)
        ));
        assert!(matches!(one("INSERT INTO t VALUES (1)"), Stmt::Tables(_)));
        assert!(matches!(
            one("UPDATE t SET v = 1 WHERE k = 2"),
            Stmt::Tables(_)
        ));
        for sql in [
            "SELECT typname FROM pg_catalog.pg_type WHERE oid = $1",
            "SELECT * FROM pg_type",
            "SELECT table_name FROM information_schema.tables",
        ] {
            assert!(matches!(one(sql), Stmt::Catalog { .. }), "{sql}");
        }
        for sql in [
            "SAVEPOINT a",
            "ROLLBACK TO SAVEPOINT a",
            "RELEASE SAVEPOINT a",
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
            "BEGIN ISOLATION LEVEL READ COMMITTED",
            "START TRANSACTION READ ONLY",
            "COMMIT AND CHAIN",
            "CREATE TABLE t (a int)",
            "LISTEN x",
        ] {
            assert_eq!(parse(sql).unwrap_err().code, "0A000", "{sql}");
        }
    }

    #[test]
    fn scripts_split_at_semicolons_outside_quotes_and_comments() {
        let v = parse("BEGIN; -- a comment; still\n CALL a(1); /* more; /* nested; */ */ COMMIT;;")
            .unwrap();
        assert_eq!(
            v,
            vec![
                Stmt::Begin,
                call("a", vec![Arg::Lit(Value::Int(1))]),
                Stmt::Commit
            ]
        );
        assert_eq!(parse(" ; ").unwrap(), vec![]);
        assert_eq!(parse("-- only a comment").unwrap(), vec![]);
        assert_eq!(
            split("SET a = 'x;''y'; SET \"b;\" = $q$;$q$; SET c = E'\\';'; CALL f($1)").unwrap(),
            vec![
                "SET a = 'x;''y'",
                "SET \"b;\" = $q$;$q$",
                "SET c = E'\\';'",
                "CALL f($1)"
            ]
        );
    }

    #[test]
    fn bad_statements_are_refused_with_their_reason() {
        for (sql, code) in [
            ("CALL", "42601"),
            ("CALL x(1", "42601"),
            ("CALL x(1 2)", "42601"),
            ("CALL x('abc)", "42601"),
            ("CALL x(1) junk", "42601"),
            ("CALL x($0)", "42601"),
            ("CALL x(99999999999999999999)", "22003"),
            ("CALL x(9223372036854775808)", "22003"),
            ("frobnicate", "42601"),
            ("CALL x(1) /* open", "42601"),
            ("SELECT 1 +", "42601"),
            ("SELECT nothing", "42703"),
            ("SELECT 1/0", "22012"),
        ] {
            let e = parse(sql).unwrap_err();
            assert_eq!(e.code, code, "{sql}: {e:?}");
            assert!(!e.message.is_empty());
        }
        let e = parse("CALL x(1) junk").unwrap_err();
        assert!(e.message.contains("junk"), "{}", e.message);
        assert!(parse_one("CALL a(); CALL b()").is_err());
        assert_eq!(parse_one("").unwrap(), None);
        assert_eq!(parse_one(" ; -- c").unwrap(), None);
    }

    #[test]
    fn deep_nesting_is_refused_with_54001_not_a_stack_overflow() {
        // In a thread with a small stack, as a server thread's might be.
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let deep = format!(
                    "CALL transfer({}1{},1,2,3)",
                    "ARRAY[".repeat(200_000),
                    "]".repeat(200_000)
                );
                assert_eq!(parse(&deep).unwrap_err().code, "54001");
                // Under the token limit, the recursion limit refuses it.
                for open in ["ARRAY[", "(", "ARRAY[("] {
                    let close: String = open
                        .chars()
                        .rev()
                        .filter_map(|c| match c {
                            '[' => Some(']'),
                            '(' => Some(')'),
                            _ => None,
                        })
                        .collect();
                    let sql = format!("CALL x({}1{})", open.repeat(1000), close.repeat(1000));
                    let e = parse(&sql).unwrap_err();
                    assert_eq!(e.code, "54001", "{open}: {e:?}");
                }
                // A long chain of operators nests as deep as it is long.
                let chain = format!("SELECT 1{}", "+1".repeat(300_000));
                assert_eq!(parse(&chain).unwrap_err().code, "54001");
                let chain = format!("SELECT 1{}", "+1".repeat(MAX_OPERATORS));
                assert_eq!(
                    parse(&chain).unwrap(),
                    vec![Stmt::Select(vec![(
                        "?column?".into(),
                        Scalar::Value(Value::Int(MAX_OPERATORS as i64 + 1))
                    )])]
                );
                let chain = format!("SELECT 1{}", "*1".repeat(MAX_OPERATORS + 1));
                assert_eq!(parse(&chain).unwrap_err().code, "54001");
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_query_string_holds_at_most_max_statements() {
        let full = "SHOW stats;".repeat(MAX_STATEMENTS);
        assert_eq!(parse(&full).unwrap().len(), MAX_STATEMENTS);
        // Empty statements do not count.
        assert_eq!(parse(&format!("{full};;;")).unwrap().len(), MAX_STATEMENTS);
        let e = parse(&format!("{full} CALL x(1)")).unwrap_err();
        assert_eq!(e.code, "54000", "{e:?}");
        assert!(e.message.contains("at most"), "{}", e.message);
        // Refused before parsing: a statement past the limit is not read.
        let e = parse(&format!("{full} CALL x(1); garbage (")).unwrap_err();
        assert_eq!(e.code, "54000", "{e:?}");
        let calls = "CALL x(1);".repeat(MAX_STATEMENTS + 1);
        assert_eq!(parse(&calls).unwrap_err().code, "54000");
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let alphabet: Vec<char> = "CALL SELECT * FROM x(),$1'\"-.e9[]ARRAY;/*-\n é:$q$E\\"
            .chars()
            .collect();
        let mut state = 12345u64;
        for _ in 0..20_000 {
            let len = (state % 24) as usize;
            let s: String = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    alphabet[(state >> 33) as usize % alphabet.len()]
                })
                .collect();
            let _ = parse(&s);
        }
    }

    /// An argument as the fast path takes it, written out.
    fn arg_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            (-1e6f64..1e6).prop_map(|v| format!("{v:?}")),
            any::<f64>()
                .prop_filter("finite", |v| v.is_finite())
                .prop_map(|v| format!("{v:e}")),
            "[ -~é]{0,8}".prop_map(|s| format!("'{}'", s.replace('\'', "''"))),
            (1usize..100).prop_map(|n| format!("${n}")),
            Just("NULL".to_string()),
            Just("true".to_string()),
            Just("FALSE".to_string()),
        ];
        let item = prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            (1usize..100).prop_map(|n| format!("${n}")),
        ];
        prop_oneof![
            4 => leaf,
            1 => prop::collection::vec(item, 0..4).prop_map(|v| format!("ARRAY[{}]", v.join(", "))),
        ]
    }

    fn call_text() -> impl Strategy<Value = String> {
        (
            prop_oneof![
                Just("CALL "),
                Just("call "),
                Just("SELECT * FROM "),
                Just("select *from ")
            ],
            prop_oneof!["p_[a-z0-9_]{0,6}", "\"[A-Za-z ]{1,6}\""],
            prop::collection::vec(arg_text(), 0..5),
            prop_oneof![Just(""), Just(" "), Just(" -- c\n"), Just(" /* c */ ")],
        )
            .prop_map(|(head, name, args, pad)| format!("{head}{name}({}){pad}", args.join(",")))
    }

    proptest! {
        /// The fast path answers only what sqlparser answers the same way.
        #[test]
        fn the_fast_path_agrees_with_sqlparser(
            calls in prop::collection::vec(call_text(), 1..4),
        ) {
            let sql = calls.join(";");
            let fast = fast::parse(&sql);
            prop_assert!(fast.is_some(), "the fast path takes {sql}");
            prop_assert_eq!(fast.unwrap(), slow(&sql).unwrap(), "{}", sql);
        }
    }
}
