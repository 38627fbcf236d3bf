//! The statements the server runs, and their strict parser.
//!
//! A statement is one of:
//! - `CALL name(arg, …)` or `SELECT * FROM name(arg, …)`: a procedure call;
//! - `BEGIN`, `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK`, `ABORT`,
//!   `SET …`, `DISCARD …`: driver chatter, accepted and ignored (every call
//!   is its own transaction);
//! - `SHOW procedures`, `SHOW islands`, `SHOW stats`.
//!
//! An argument is an integer, a float (`1.5`, `1e3`), a `'string'` (`''`
//! is a quote), `NULL`, `TRUE`/`FALSE` (1/0), a placeholder `$n`, or
//! `ARRAY[…]` of integers or placeholders. Keywords and unquoted names are
//! case-insensitive (names fold to lower case, as PostgreSQL's do); a
//! `"quoted"` name is taken as written. Anything else is a syntax error
//! that names what was expected and where.
//!
//! Bounds: `ARRAY[` nested more than [`MAX_NESTING`] deep is refused with
//! `54001` (the parser recurses once per level, so this bounds its stack),
//! and a query string of more than [`MAX_STATEMENTS`] statements with
//! `54000`, before any of it runs.

use crate::api::Value;

/// One argument of a call, as written.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Lit(Value),
    /// `$n`, 1-based.
    Param(usize),
    /// `ARRAY[…]`: integer literals and placeholders.
    Array(Vec<Arg>),
}

/// What `SHOW` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Procedures,
    Islands,
    Threads,
    Stats,
}

/// One parsed statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Call {
        proc: String,
        args: Vec<Arg>,
    },
    /// Accepted and ignored; the command tag to answer with.
    NoOp(&'static str),
    Show(Show),
}

impl Stmt {
    /// The highest placeholder number it uses (0: none).
    pub fn params(&self) -> usize {
        fn max(args: &[Arg]) -> usize {
            args.iter()
                .map(|a| match a {
                    Arg::Param(n) => *n,
                    Arg::Array(v) => max(v),
                    Arg::Lit(_) => 0,
                })
                .max()
                .unwrap_or(0)
        }
        match self {
            Stmt::Call { args, .. } => max(args),
            _ => 0,
        }
    }
}

/// Why a statement does not parse: a message for SQLSTATE 42601 (syntax
/// error) or 0A000 (a statement the server does not run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    pub code: &'static str,
    pub message: String,
}

/// What the server runs, for error messages.
pub const SUPPORTED: &str = "this server runs stored procedures only: CALL name(arg, ...) or \
     SELECT * FROM name(arg, ...); SHOW procedures | islands | threads | stats; BEGIN, COMMIT, ROLLBACK \
     and SET are accepted and ignored (each call is its own transaction)";

/// Placeholders above this are refused (PostgreSQL's own limit is 65535).
const MAX_PARAM: usize = 65_535;

/// `ARRAY[…]` nested deeper than this is refused with `54001` (statement
/// too complex) before the parser recurses further: the parser's stack
/// stays bounded whatever a client sends.
pub const MAX_NESTING: usize = 32;

/// Statements one query string may hold; more are refused with `54000`
/// before any runs, so one message bounds the work it queues.
pub const MAX_STATEMENTS: usize = 1000;

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
                Tok::Float(
                    text.parse().map_err(|_| {
                        syntax(format!("{text:?} at offset {start} is not a number"))
                    })?,
                )
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
            let (out, n) = quoted(r, '\'')
                .ok_or_else(|| syntax(format!("unterminated quoted string at offset {start}")))?;
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
    /// `ARRAY[` levels open around the argument being parsed (at most
    /// [`MAX_NESTING`]).
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

    /// Skips the rest of an ignored statement (`SET x = 'y'`, `BEGIN
    /// ISOLATION LEVEL …`): any text up to a `;` outside quotes.
    fn skip_statement(&mut self) -> Result<(), SqlError> {
        if let Some(Some((at, _))) = self.peeked.take() {
            self.lex.at = at;
        }
        let r = self.lex.rest();
        let mut quote: Option<char> = None;
        for (i, c) in r.char_indices() {
            match (quote, c) {
                (None, ';') => {
                    self.lex.at += i;
                    return Ok(());
                }
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                _ => {}
            }
        }
        if quote.is_some() {
            return Err(syntax("unterminated quoted string".into()));
        }
        self.lex.at += r.len();
        Ok(())
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
            Some((_, Tok::Str(s))) => Arg::Lit(Value::Str(s)),
            Some((_, Tok::Param(p))) => Arg::Param(p),
            Some((_, Tok::Word(w))) if w == "null" => Arg::Lit(Value::Null),
            Some((_, Tok::Word(w))) if w == "true" => Arg::Lit(Value::Int(1)),
            Some((_, Tok::Word(w))) if w == "false" => Arg::Lit(Value::Int(0)),
            Some((at, Tok::Word(w))) if w == "array" => {
                if self.depth >= MAX_NESTING {
                    return Err(SqlError {
                        code: "54001",
                        message: format!(
                            "statement too complex: ARRAY[...] nested more than {MAX_NESTING} deep \
                             at offset {at}"
                        ),
                    });
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
        Ok(Stmt::Call { proc, args })
    }

    fn statement(&mut self) -> Result<Stmt, SqlError> {
        let t = self.next()?;
        let Some((at, Tok::Word(w))) = &t else {
            return Err(syntax(format!(
                "expected a statement, found {}; {SUPPORTED}",
                describe(&t)
            )));
        };
        Ok(match w.as_str() {
            "call" => self.call()?,
            "select" => {
                self.expect_sym('*', "* after SELECT (SELECT * FROM name(...))")?;
                self.expect_word("from")?;
                self.call()?
            }
            "begin" | "start" => {
                self.skip_statement()?;
                Stmt::NoOp("BEGIN")
            }
            "commit" | "end" => {
                self.skip_statement()?;
                Stmt::NoOp("COMMIT")
            }
            "rollback" | "abort" => {
                self.skip_statement()?;
                Stmt::NoOp("ROLLBACK")
            }
            "set" => {
                self.skip_statement()?;
                Stmt::NoOp("SET")
            }
            "discard" => {
                self.skip_statement()?;
                Stmt::NoOp("DISCARD ALL")
            }
            "show" => {
                let what = self.next()?;
                match &what {
                    Some((_, Tok::Word(w))) if w == "procedures" => Stmt::Show(Show::Procedures),
                    Some((_, Tok::Word(w))) if w == "islands" => Stmt::Show(Show::Islands),
                    Some((_, Tok::Word(w))) if w == "threads" => Stmt::Show(Show::Threads),
                    Some((_, Tok::Word(w))) if w == "stats" => Stmt::Show(Show::Stats),
                    _ => {
                        return Err(SqlError {
                            code: "0A000",
                            message: format!(
                                "SHOW {}: this server shows procedures, islands, threads or stats",
                                describe(&what)
                            ),
                        })
                    }
                }
            }
            other => {
                return Err(SqlError {
                    code: if is_sql_keyword(other) {
                        "0A000"
                    } else {
                        "42601"
                    },
                    message: format!("{} at offset {at}: {SUPPORTED}", other.to_uppercase()),
                })
            }
        })
    }
}

/// Statements PostgreSQL has that this server does not run (a clearer
/// code than a syntax error).
fn is_sql_keyword(w: &str) -> bool {
    matches!(
        w,
        "insert"
            | "update"
            | "delete"
            | "create"
            | "drop"
            | "alter"
            | "with"
            | "values"
            | "copy"
            | "prepare"
            | "execute"
            | "deallocate"
            | "explain"
            | "vacuum"
            | "analyze"
            | "truncate"
            | "grant"
            | "revoke"
            | "listen"
            | "notify"
            | "declare"
            | "fetch"
            | "close"
            | "lock"
            | "savepoint"
            | "release"
            | "table"
    )
}

/// Parses a query string into its statements (`;`-separated; empty
/// statements are dropped). A syntax error anywhere, or more than
/// [`MAX_STATEMENTS`] statements, fails the whole string, so nothing of it
/// runs.
pub fn parse(sql: &str) -> Result<Vec<Stmt>, SqlError> {
    let mut p = Parser {
        lex: Lexer { s: sql, at: 0 },
        peeked: None,
        depth: 0,
    };
    let mut out = Vec::new();
    loop {
        match p.peek()? {
            None => return Ok(out),
            Some((_, Tok::Sym(';'))) => {
                p.next()?;
                continue;
            }
            Some((at, _)) => {
                if out.len() == MAX_STATEMENTS {
                    return Err(SqlError {
                        code: "54000",
                        message: format!(
                            "a query string holds at most {MAX_STATEMENTS} statements; statement \
                             {} starts at offset {at} (send the rest in another query)",
                            MAX_STATEMENTS + 1
                        ),
                    });
                }
            }
        }
        out.push(p.statement()?);
        let t = p.next()?;
        match &t {
            None | Some((_, Tok::Sym(';'))) => {}
            _ => {
                return Err(syntax(format!(
                    "expected ; or the end after the statement, found {}",
                    describe(&t)
                )))
            }
        }
    }
}

/// Parses exactly one statement (the extended protocol's Parse): `None`
/// for an empty one.
pub fn parse_one(sql: &str) -> Result<Option<Stmt>, SqlError> {
    let mut v = parse(sql)?;
    match v.len() {
        0 => Ok(None),
        1 => Ok(v.pop()),
        n => Err(syntax(format!(
            "a prepared statement is one statement; this one has {n}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(proc: &str, args: Vec<Arg>) -> Stmt {
        Stmt::Call {
            proc: proc.into(),
            args,
        }
    }

    #[test]
    fn calls_parse() {
        assert_eq!(
            parse("CALL tpcb(1, -2, 3.5, 'it''s', NULL, $2)").unwrap(),
            vec![call(
                "tpcb",
                vec![
                    Arg::Lit(Value::Int(1)),
                    Arg::Lit(Value::Int(-2)),
                    Arg::Lit(Value::Float(3.5)),
                    Arg::Lit(Value::Str("it's".into())),
                    Arg::Lit(Value::Null),
                    Arg::Param(2),
                ]
            )]
        );
        assert_eq!(
            parse("select * FROM \"MixedCase\"();").unwrap(),
            vec![call("MixedCase", vec![])]
        );
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
        assert_eq!(
            parse("call x(-9223372036854775808, 1e3)").unwrap(),
            vec![call(
                "x",
                vec![
                    Arg::Lit(Value::Int(i64::MIN)),
                    Arg::Lit(Value::Float(1000.0))
                ]
            )]
        );
        assert_eq!(parse("call x($3, ARRAY[$7])").unwrap()[0].params(), 7);
    }

    #[test]
    fn scripts_split_and_chatter_is_accepted() {
        let v = parse("BEGIN; -- a comment\n CALL a(1); /* more */ COMMIT;;").unwrap();
        assert_eq!(
            v,
            vec![
                Stmt::NoOp("BEGIN"),
                call("a", vec![Arg::Lit(Value::Int(1))]),
                Stmt::NoOp("COMMIT")
            ]
        );
        assert_eq!(parse(" ; ").unwrap(), vec![]);
        assert_eq!(
            parse("SET extra_float_digits = 3; set x = 'a;b'").unwrap()[..1],
            [Stmt::NoOp("SET")]
        );
        assert_eq!(parse("set x = 'a;b'; SET y TO 1").unwrap().len(), 2);
        assert_eq!(parse("show STATS").unwrap(), vec![Stmt::Show(Show::Stats)]);
        assert_eq!(
            parse("SHOW threads").unwrap(),
            vec![Stmt::Show(Show::Threads)]
        );
    }

    #[test]
    fn bad_statements_are_refused_with_their_reason() {
        for (sql, code, needle) in [
            ("CALL", "42601", "procedure name"),
            ("CALL x(1", "42601", ", or )"),
            ("CALL x(1 2)", "42601", ", or )"),
            ("CALL x('abc)", "42601", "unterminated quoted string"),
            ("CALL x(1) junk", "42601", "expected ; or the end"),
            ("CALL x(12abc)", "42601", "trailing junk"),
            ("CALL x($0)", "42601", "placeholders are $1"),
            ("CALL x(99999999999999999999)", "22003", "out of range"),
            ("CALL x(9223372036854775808)", "22003", "out of range"),
            ("CALL x(ARRAY['a'])", "42601", "integers and placeholders"),
            (
                "INSERT INTO t VALUES (1)",
                "0A000",
                "stored procedures only",
            ),
            ("frobnicate", "42601", "stored procedures only"),
            (
                "SHOW tables",
                "0A000",
                "procedures, islands, threads or stats",
            ),
            ("SELECT 1", "42601", "* after SELECT"),
            ("CALL x(1) /* open", "42601", "unterminated /*"),
            ("CALL x(#)", "42601", "unexpected character"),
        ] {
            let e = parse(sql).unwrap_err();
            assert_eq!(e.code, code, "{sql}: {e:?}");
            assert!(e.message.contains(needle), "{sql}: {}", e.message);
        }
        assert!(parse_one("CALL a(); CALL b()").is_err());
        assert_eq!(parse_one("").unwrap(), None);
    }

    #[test]
    fn deep_nesting_is_refused_with_54001_not_a_stack_overflow() {
        // Far deeper than any stack holds frames of a recursive parser.
        let deep = format!(
            "CALL transfer({}1{},1,2,3)",
            "ARRAY[".repeat(200_000),
            "]".repeat(200_000)
        );
        let e = parse(&deep).unwrap_err();
        assert_eq!(e.code, "54001", "{e:?}");
        assert!(e.message.contains("nested more than"), "{}", e.message);
        // At the limit, the parser reaches the array's items (and refuses
        // an array of arrays as a syntax error).
        let at_limit = format!(
            "CALL x({}1{})",
            "ARRAY[".repeat(MAX_NESTING),
            "]".repeat(MAX_NESTING)
        );
        assert_eq!(parse(&at_limit).unwrap_err().code, "42601");
        let over = format!(
            "CALL x({}1{})",
            "ARRAY[".repeat(MAX_NESTING + 1),
            "]".repeat(MAX_NESTING + 1)
        );
        assert_eq!(parse(&over).unwrap_err().code, "54001");
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
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let alphabet: Vec<char> = "CALL x(),$1'\"-.e9[]ARRAY;/*-\n é".chars().collect();
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
}
