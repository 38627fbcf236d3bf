//! A small read-only `pg_catalog`, answered from the deployment's
//! [`Catalog`]: what psql (`\d`, `\dt`, `\d NAME`, `\df`, `\l`), asyncpg's
//! and postgres.js's type introspection and pgbench's startup query ask.
//!
//! A statement is a catalog query when a relation of its `FROM` clauses (or
//! of its `WITH` queries) is in `pg_catalog` or `information_schema`
//! (qualified, or an unqualified `pg_…` name). Each query this server knows
//! is recognised on its normalised text (lower case outside quotes,
//! whitespace collapsed, `pg_catalog.` dropped) and on the names of its
//! result columns, and answered with PostgreSQL's column names and types.
//! A query whose rows all come from a relation that is always empty here
//! (`pg_inherits`, `pg_policy`, `pg_trigger`, …: no inheritance, policies,
//! triggers, publications, indexes, constraints are described) answers no
//! rows, whatever it projects. Any other catalog query is refused with
//! `0A000` naming its relations: never a wrong answer.
//!
//! The catalog it describes: one database, schema `public` (oid 2200)
//! holding each table (oid `TABLE_OID + i`, columns in order) and each
//! procedure; the types the server speaks and their array types
//! ([`TYPES`]). A table's columns are those of its SQL view, as `SELECT *`
//! shows them, key columns among them; no primary key constraint is shown.

use std::sync::Arc;

use pgwire::api::Type as PgType;
use sqlparser::ast::{
    Expr, JoinOperator, Query, Select, SelectItem, SetExpr, Statement, TableFactor, TableWithJoins,
};

use super::sql::SqlError;
use crate::api::{Catalog, SqlSource, SqlTable, Type, Value};
use crate::storage::schema::SqlType;

/// Rows answered to a catalog query: the columns (name, type) and each
/// row's values as text (`None`: NULL).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CatalogRows {
    pub columns: Vec<(String, PgType)>,
    pub rows: Vec<Vec<Option<String>>>,
}

/// The oid of table `i` is `TABLE_OID + i`.
const TABLE_OID: u32 = 16384;
/// The schema every table and procedure is in, and its oid.
const SCHEMA: &str = "public";
/// The owner of everything.
const OWNER: &str = "islands";
/// The one database.
const DATABASE: &str = "islands";

/// A type the server speaks: (oid, typname, array type's oid, format_type).
/// An array type's entry follows from its element's.
const TYPES: &[(u32, &str, u32, &str)] = &[
    (16, "bool", 1000, "boolean"),
    (17, "bytea", 1001, "bytea"),
    (18, "char", 1002, "\"char\""),
    (19, "name", 1003, "name"),
    (20, "int8", 1016, "bigint"),
    (21, "int2", 1005, "smallint"),
    (23, "int4", 1007, "integer"),
    (25, "text", 1009, "text"),
    (26, "oid", 1028, "oid"),
    (700, "float4", 1021, "real"),
    (701, "float8", 1022, "double precision"),
    (1043, "varchar", 1015, "character varying"),
];

/// Relations that are always empty here: a query whose rows must come
/// from one of them answers no rows.
const EMPTY: &[&str] = &[
    "pg_inherits",
    "pg_partitioned_table",
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_rel",
    "pg_publication_namespace",
    "pg_trigger",
    "pg_rewrite",
    "pg_index",
    "pg_constraint",
    "pg_attrdef",
    "pg_foreign_table",
    "pg_event_trigger",
    "pg_description",
    "pg_sequence",
];

/// Aggregates: over no rows, one row (without GROUP BY).
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
];

/// Answers a query on pg_catalog (or information_schema) from the
/// deployment's catalog, if it is one this server knows (psql's `\d`
/// `\dt` `\df` `\l`, asyncpg's and postgres.js's type introspection,
/// pgbench's startup query). `Ok(None)`: not a catalog query. An unknown
/// catalog query is `0A000`.
pub(crate) fn answer(
    sql: &str,
    stmt: &Statement,
    params: &[Value],
    catalog: &Catalog,
) -> Result<Option<CatalogRows>, SqlError> {
    let Statement::Query(query) = stmt else {
        return Ok(None);
    };
    let mut relations = Vec::new();
    query_relations(query, &mut relations);
    let catalog_rels: Vec<&String> = relations.iter().filter(|r| is_catalog(r)).collect();
    if catalog_rels.is_empty() {
        return Ok(None);
    }
    let text = normalize(sql);
    let names = projection_names(query);
    let known = psql_list_relations(&text, &names, catalog)
        .or_else(|| psql_find_relation(&text, catalog))
        .or_else(|| psql_relation_details(&text, &names, catalog))
        .or_else(|| psql_columns(&text, &names, catalog))
        .or_else(|| psql_functions(&text, &names, catalog))
        .or_else(|| psql_databases(&text, &names))
        .or_else(|| asyncpg_types(&text, params))
        .or_else(|| postgresjs_arrays(&text))
        .or_else(|| pgbench_partitions(&text, catalog));
    if let Some(rows) = known {
        return Ok(Some(rows));
    }
    if let Some(names) = names.filter(|_| always_empty(&query.body)) {
        return Ok(Some(CatalogRows {
            columns: names.into_iter().map(|n| (n, PgType::TEXT)).collect(),
            rows: vec![],
        }));
    }
    let mut rels: Vec<String> = catalog_rels.iter().map(|r| r.to_string()).collect();
    rels.sort();
    rels.dedup();
    Err(SqlError {
        code: "0A000",
        message: format!(
            "this query on {} is not one this server's read-only pg_catalog answers \
             (it answers psql's \\d, \\dt, \\df and \\l, and drivers' type introspection)",
            rels.join(", ")
        ),
    })
}

/// Whether `rel` (lower case, as written) names a relation of pg_catalog
/// or information_schema.
fn is_catalog(rel: &str) -> bool {
    let (schema, name) = match rel.rsplit_once('.') {
        Some((s, n)) => (Some(s.rsplit('.').next().unwrap_or(s)), n),
        None => (None, rel),
    };
    match schema {
        Some("pg_catalog" | "information_schema") => true,
        Some(_) => false,
        None => name.starts_with("pg_"),
    }
}

/// Every relation named in the FROM clauses of `q`, its WITH queries and
/// its subqueries in FROM, lower case, as written (`schema.name`).
fn query_relations(q: &Query, out: &mut Vec<String>) {
    if let Some(with) = &q.with {
        for cte in &with.cte_tables {
            query_relations(&cte.query, out);
        }
    }
    set_relations(&q.body, out);
}

fn set_relations(s: &SetExpr, out: &mut Vec<String>) {
    match s {
        SetExpr::Select(sel) => {
            for t in &sel.from {
                factor_relations(&t.relation, out);
                for j in &t.joins {
                    factor_relations(&j.relation, out);
                }
            }
        }
        SetExpr::Query(q) => query_relations(q, out),
        SetExpr::SetOperation { left, right, .. } => {
            set_relations(left, out);
            set_relations(right, out);
        }
        _ => {}
    }
}

fn factor_relations(f: &TableFactor, out: &mut Vec<String>) {
    match f {
        TableFactor::Table { name, .. } => out.push(
            name.0
                .iter()
                .map(|p| unquote(&p.to_string()))
                .collect::<Vec<_>>()
                .join("."),
        ),
        TableFactor::Derived { subquery, .. } => query_relations(subquery, out),
        TableFactor::NestedJoin {
            table_with_joins, ..
        } => {
            factor_relations(&table_with_joins.relation, out);
            for j in &table_with_joins.joins {
                factor_relations(&j.relation, out);
            }
        }
        _ => {}
    }
}

fn unquote(s: &str) -> String {
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) => inner.replace("\"\"", "\""),
        None => s.to_lowercase(),
    }
}

/// The result column names of the query's (first) SELECT, as PostgreSQL
/// names them; `None` with a `*`.
fn projection_names(q: &Query) -> Option<Vec<String>> {
    let mut body = &*q.body;
    loop {
        match body {
            SetExpr::Select(sel) => return select_names(sel),
            SetExpr::SetOperation { left, .. } => body = left,
            SetExpr::Query(q) => body = &q.body,
            _ => return None,
        }
    }
}

fn select_names(sel: &Select) -> Option<Vec<String>> {
    sel.projection
        .iter()
        .map(|item| match item {
            SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
            SelectItem::UnnamedExpr(e) => Some(expr_name(e)),
            _ => None,
        })
        .collect()
}

fn expr_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.clone(),
        Expr::CompoundIdentifier(v) => v.last().map_or("?column?".into(), |i| i.value.clone()),
        Expr::Function(f) => f
            .name
            .0
            .last()
            .map_or("?column?".into(), |p| unquote(&p.to_string())),
        Expr::Case { .. } => "case".into(),
        Expr::Cast { expr, .. } => match &**expr {
            Expr::Value(_) => "?column?".into(),
            e => expr_name(e),
        },
        Expr::Nested(e) => expr_name(e),
        _ => "?column?".into(),
    }
}

/// Whether every row of `s` must come from an always-empty relation: each
/// branch of a set operation, or a SELECT with one such relation inner
/// joined (a comma, JOIN, INNER JOIN or CROSS JOIN) and no aggregate
/// without GROUP BY (which would answer one row over no rows).
fn always_empty(s: &SetExpr) -> bool {
    match s {
        SetExpr::Select(sel) => select_empty(sel),
        SetExpr::Query(q) => always_empty(&q.body),
        SetExpr::SetOperation { left, right, .. } => always_empty(left) && always_empty(right),
        _ => false,
    }
}

fn select_empty(sel: &Select) -> bool {
    let grouped = match &sel.group_by {
        sqlparser::ast::GroupByExpr::Expressions(e, _) => !e.is_empty(),
        sqlparser::ast::GroupByExpr::All(_) => true,
    };
    let aggregate = |e: &Expr| match e {
        Expr::Function(f) => f
            .name
            .0
            .last()
            .is_some_and(|p| AGGREGATES.contains(&unquote(&p.to_string()).as_str())),
        _ => false,
    };
    let aggregates = sel.projection.iter().any(|i| match i {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => aggregate(e),
        _ => false,
    });
    if aggregates && !grouped {
        return false;
    }
    sel.from.iter().any(inner_empty)
}

fn inner_empty(t: &TableWithJoins) -> bool {
    let empty = |f: &TableFactor| match f {
        TableFactor::Table { name, .. } => name
            .0
            .last()
            .is_some_and(|p| EMPTY.contains(&unquote(&p.to_string()).as_str())),
        _ => false,
    };
    empty(&t.relation)
        || t.joins.iter().any(|j| {
            matches!(
                j.join_operator,
                JoinOperator::Join(_) | JoinOperator::Inner(_) | JoinOperator::CrossJoin(_)
            ) && empty(&j.relation)
        })
}

/// `sql` in lower case outside quotes, whitespace runs as one space,
/// without `pg_catalog.` qualifiers.
fn normalize(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote = None;
    let mut space = false;
    for c in sql.chars() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c.is_whitespace() => space = true,
            None => {
                if space && !out.is_empty() {
                    out.push(' ');
                }
                space = false;
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.extend(c.to_lowercase());
            }
        }
    }
    out.replace("pg_catalog.", "")
}

/// The first single-quoted literal after `after` in `text`, if `after` is there.
fn literal_after<'t>(text: &'t str, after: &str) -> Option<&'t str> {
    let rest = &text[text.find(after)? + after.len()..];
    let rest = rest.trim_start().strip_prefix('\'')?;
    Some(&rest[..rest.find('\'')?])
}

/// The oid in `… = 'N'` after `after`.
fn oid_after(text: &str, after: &str) -> Option<u32> {
    literal_after(text, after)?.parse().ok()
}

/// psql's name patterns arrive as `^(REGEX)$` with `.`, `X*`, `\X` and
/// literal characters; `None` if a pattern uses anything else (then no
/// name matches it).
fn pattern_matches(pattern: &str, name: &str) -> bool {
    let Some(inner) = pattern
        .strip_prefix("^(")
        .and_then(|p| p.strip_suffix(")$"))
    else {
        return false;
    };
    // Atoms: (character or None for any, repeated).
    let mut atoms: Vec<(Option<char>, bool)> = Vec::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => match atoms.last_mut() {
                Some(a) => a.1 = true,
                None => return false,
            },
            '.' => atoms.push((None, false)),
            '\\' => match chars.next() {
                Some(e) => atoms.push((Some(e), false)),
                None => return false,
            },
            '|' | '(' | ')' | '[' | ']' | '+' | '?' | '{' | '}' | '^' | '$' => return false,
            c => atoms.push((Some(c), false)),
        }
    }
    fn go(atoms: &[(Option<char>, bool)], s: &[char]) -> bool {
        match atoms.split_first() {
            None => s.is_empty(),
            Some((&(c, star), rest)) => {
                let one = |x: char| c.is_none_or(|c| c == x);
                if star {
                    go(rest, s) || (!s.is_empty() && one(s[0]) && go(atoms, &s[1..]))
                } else {
                    !s.is_empty() && one(s[0]) && go(rest, &s[1..])
                }
            }
        }
    }
    let s: Vec<char> = name.chars().collect();
    go(&atoms, &s)
}

/// The pattern psql puts on `column operator(~) '^(…)$'`, if any.
fn name_pattern<'t>(text: &'t str, column: &str) -> Option<&'t str> {
    literal_after(text, &format!("{column} operator(~)"))
}

/// psql's name of a column's SQL type (`format_type`).
fn sql_format(t: SqlType) -> String {
    match t {
        SqlType::Int4 => "integer".into(),
        SqlType::Int8 => "bigint".into(),
        SqlType::Float8 => "double precision".into(),
        SqlType::Varchar(n) => format!("character varying({n})"),
        SqlType::Timestamp => "timestamp without time zone".into(),
    }
}

fn type_format(t: Type) -> &'static str {
    match t {
        Type::Int => "bigint",
        Type::Float => "double precision",
        Type::Str => "text",
        Type::Ints => "bigint[]",
    }
}

fn val(s: impl Into<String>) -> Option<String> {
    Some(s.into())
}

/// One row: the value of each column, by the column's name.
type RowFn<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// Rows of `names` columns, each value picked by its column's name.
fn by_name(names: &[String], types: impl Fn(&str) -> PgType, rows: Vec<RowFn<'_>>) -> CatalogRows {
    CatalogRows {
        columns: names.iter().map(|n| (n.clone(), types(n))).collect(),
        rows: rows
            .iter()
            .map(|r| names.iter().map(|n| r(n)).collect())
            .collect(),
    }
}

/// psql's `\d`, `\dt` (and `\dv`, `\di`, … which list none here): the
/// relations of kinds asked for, with `Schema`, `Name`, `Type`, `Owner`.
fn psql_list_relations(
    text: &str,
    names: &Option<Vec<String>>,
    catalog: &Catalog,
) -> Option<CatalogRows> {
    if !text.contains("from pg_class c")
        || !text.contains("c.relkind in (")
        || !text.contains("table_is_visible(c.oid)")
    {
        return None;
    }
    let names = names.as_ref()?;
    if !names.iter().any(|n| n == "Name") {
        return None;
    }
    let kinds = &text[text.find("c.relkind in (")?..];
    let kinds = &kinds[..kinds.find(')')?];
    let tables = kinds.contains("'r'");
    let pattern = name_pattern(text, "c.relname");
    let mut list: Vec<&str> = catalog
        .tables()
        .iter()
        .map(|t| t.name.as_str())
        .filter(|_| tables)
        .filter(|n| pattern.is_none_or(|p| pattern_matches(p, n)))
        .collect();
    list.sort();
    let rows = list
        .into_iter()
        .map(|t| {
            Box::new(move |col: &str| match col {
                "Schema" => val(SCHEMA),
                "Name" => val(t),
                "Type" => val("table"),
                "Owner" => val(OWNER),
                "Persistence" => val("permanent"),
                "Access method" => val("heap"),
                _ => None,
            }) as RowFn<'_>
        })
        .collect();
    Some(by_name(
        names,
        |n| match n {
            "Schema" | "Name" | "Owner" => PgType::NAME,
            _ => PgType::TEXT,
        },
        rows,
    ))
}

/// psql's `\d NAME`, first query: the oid, schema and name of each
/// relation whose name matches.
fn psql_find_relation(text: &str, catalog: &Catalog) -> Option<CatalogRows> {
    if !text.starts_with("select c.oid, n.nspname, c.relname from pg_class c") {
        return None;
    }
    let pattern = name_pattern(text, "c.relname");
    let mut rows: Vec<Vec<Option<String>>> = catalog
        .tables()
        .iter()
        .enumerate()
        .filter(|(_, t)| pattern.is_none_or(|p| pattern_matches(p, &t.name)))
        .map(|(i, t)| {
            vec![
                val((TABLE_OID + i as u32).to_string()),
                val(SCHEMA),
                val(t.name.clone()),
            ]
        })
        .collect();
    rows.sort_by(|a, b| a[2].cmp(&b[2]));
    Some(CatalogRows {
        columns: vec![
            ("oid".into(), PgType::OID),
            ("nspname".into(), PgType::NAME),
            ("relname".into(), PgType::NAME),
        ],
        rows,
    })
}

/// The table of oid `oid`, if it is one.
fn table_of(catalog: &Catalog, oid: u32) -> Option<&crate::storage::TableDef> {
    catalog
        .tables()
        .get(usize::try_from(oid.checked_sub(TABLE_OID)?).ok()?)
}

/// The SQL view (the columns `SELECT *` shows) of the table of oid `oid`.
fn view_of(catalog: &Catalog, oid: u32) -> Option<Arc<SqlTable>> {
    let table = oid.checked_sub(TABLE_OID)?;
    catalog.sql_view(table.try_into().ok()?)
}

/// psql's `\d NAME`, second query: the relation's kind and flags.
fn psql_relation_details(
    text: &str,
    names: &Option<Vec<String>>,
    catalog: &Catalog,
) -> Option<CatalogRows> {
    if !text.starts_with("select c.relchecks, c.relkind") {
        return None;
    }
    let names = names.as_ref()?;
    let found = oid_after(text, "where c.oid =").and_then(|o| table_of(catalog, o));
    let rows: Vec<RowFn<'_>> = match found {
        None => vec![],
        Some(_) => vec![Box::new(|col: &str| match col {
            "relchecks" | "reltablespace" => val("0"),
            "relkind" => val("r"),
            "relpersistence" => val("p"),
            "relreplident" => val("d"),
            "amname" => val("heap"),
            "?column?" | "case" => val(""),
            c if c.starts_with("relhas") || c.starts_with("relis") || c.contains("security") => {
                val("f")
            }
            _ => None,
        })],
    };
    Some(by_name(
        names,
        |n| match n {
            "relchecks" => PgType::INT2,
            "relkind" | "relpersistence" | "relreplident" => PgType::CHAR,
            "reltablespace" => PgType::OID,
            "amname" => PgType::NAME,
            c if c.starts_with("relhas") || c.starts_with("relis") || c.contains("security") => {
                PgType::BOOL
            }
            _ => PgType::TEXT,
        },
        rows,
    ))
}

/// psql's `\d NAME`, third query: the relation's columns and their types,
/// as `SELECT *` shows them (the key columns among them, not null).
fn psql_columns(text: &str, names: &Option<Vec<String>>, catalog: &Catalog) -> Option<CatalogRows> {
    if !text.contains("from pg_attribute a where a.attrelid =") || !text.contains("a.attnum > 0") {
        return None;
    }
    let names = names.as_ref()?;
    let view = oid_after(text, "a.attrelid =").and_then(|o| view_of(catalog, o));
    let rows: Vec<RowFn<'_>> = view
        .map(|v| {
            v.columns()
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (name, ty) = (c.name.clone(), c.ty);
                    let key = matches!(c.source, SqlSource::Key(_));
                    Box::new(move |col: &str| match col {
                        "attname" => val(name.clone()),
                        "format_type" => val(sql_format(ty)),
                        "attnum" => val((i + 1).to_string()),
                        "attnotnull" => val(if key { "t" } else { "f" }),
                        "attidentity" | "attgenerated" | "attcompression" => val(""),
                        // \d+: fixed-size values are stored plain, strings extended.
                        "attstorage" => val(match ty {
                            SqlType::Varchar(_) => "x",
                            _ => "p",
                        }),
                        _ => None,
                    }) as RowFn<'static>
                })
                .collect()
        })
        .unwrap_or_default();
    Some(by_name(
        names,
        |n| match n {
            "attname" => PgType::NAME,
            "attnotnull" => PgType::BOOL,
            "attnum" => PgType::INT2,
            "attidentity" | "attgenerated" | "attcompression" | "attstorage" => PgType::CHAR,
            _ => PgType::TEXT,
        },
        rows,
    ))
}

/// psql's `\df`: each procedure, its result and its arguments.
fn psql_functions(
    text: &str,
    names: &Option<Vec<String>>,
    catalog: &Catalog,
) -> Option<CatalogRows> {
    if !text.contains("from pg_proc p") || !text.contains("function_is_visible(p.oid)") {
        return None;
    }
    let names = names.as_ref()?;
    if !names.iter().any(|n| n == "Name") {
        return None;
    }
    let pattern = name_pattern(text, "p.proname");
    let mut procs: Vec<_> = catalog
        .procedures()
        .iter()
        .filter(|p| pattern.is_none_or(|pat| pattern_matches(pat, p.name())))
        .collect();
    procs.sort_by(|a, b| a.name().cmp(b.name()));
    let rows = procs
        .into_iter()
        .map(|p| {
            let args = p
                .params()
                .iter()
                .map(|(n, t)| format!("{n} {}", type_format(*t)))
                .collect::<Vec<_>>()
                .join(", ");
            let result = if p.columns().is_empty() {
                "void".to_string()
            } else {
                let cols = p
                    .columns()
                    .iter()
                    .map(|(n, t)| format!("{n} {}", type_format(*t)))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("TABLE({cols})")
            };
            Box::new(move |col: &str| match col {
                "Schema" => val(SCHEMA),
                "Name" => val(p.name()),
                "Result data type" => val(result.clone()),
                "Argument data types" => val(args.clone()),
                "Type" => val("func"),
                _ => None,
            }) as RowFn<'_>
        })
        .collect();
    Some(by_name(
        names,
        |n| match n {
            "Schema" | "Name" => PgType::NAME,
            _ => PgType::TEXT,
        },
        rows,
    ))
}

/// psql's `\l`: the one database.
fn psql_databases(text: &str, names: &Option<Vec<String>>) -> Option<CatalogRows> {
    if !text.contains("from pg_database d") {
        return None;
    }
    let names = names.as_ref()?;
    if !names.iter().any(|n| n == "Name") {
        return None;
    }
    let row = Box::new(|col: &str| match col {
        "Name" => val(DATABASE),
        "Owner" => val(OWNER),
        "Encoding" => val("UTF8"),
        "Collate" | "Ctype" => val("C"),
        "Locale Provider" => val("libc"),
        _ => None,
    }) as RowFn<'_>;
    Some(by_name(
        names,
        |n| match n {
            "Name" => PgType::NAME,
            _ => PgType::TEXT,
        },
        vec![row],
    ))
}

/// The oids of an `oid[]` parameter, sent as an array of integers or as
/// text (`{1016,1005}`).
fn oid_list(v: &Value) -> Vec<u32> {
    match v {
        Value::Ints(v) => v.iter().filter_map(|&o| u32::try_from(o).ok()).collect(),
        Value::Int(o) => u32::try_from(*o).ok().into_iter().collect(),
        Value::Str(s) => s
            .trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .filter_map(|o| o.trim().trim_matches('"').parse().ok())
            .collect(),
        _ => vec![],
    }
}

/// (oid, typname, element oid (0: none), format_type) of a known type or
/// array type.
fn type_info(oid: u32) -> Option<(u32, String, u32, String)> {
    TYPES.iter().find_map(|&(o, name, array, fmt)| {
        if o == oid {
            Some((o, name.to_string(), 0, fmt.to_string()))
        } else if array == oid {
            Some((array, format!("_{name}"), o, format!("{fmt}[]")))
        } else {
            None
        }
    })
}

/// asyncpg's type introspection (`WITH RECURSIVE typeinfo_tree …`, `$1`
/// the oids it does not know): each known type asked for at depth 0, its
/// element type at depth 1, deepest first.
fn asyncpg_types(text: &str, params: &[Value]) -> Option<CatalogRows> {
    if !text.contains("with recursive typeinfo_tree(") {
        return None;
    }
    let asked = params.first().map(oid_list).unwrap_or_default();
    let mut rows = Vec::new();
    let row = |info: &(u32, String, u32, String), depth: u32| {
        let elem = type_info(info.2);
        vec![
            val(info.0.to_string()),
            val("pg_catalog"),
            val(info.1.clone()),
            val("b"),
            None,
            val(info.2.to_string()),
            elem.as_ref().map(|_| ",".to_string()),
            None,
            None,
            None,
            val(depth.to_string()),
            None,
            Some(elem.map_or("-".to_string(), |e| e.3)),
            None,
        ]
    };
    let mut elems = Vec::new();
    for oid in asked {
        let Some(info) = type_info(oid) else { continue };
        if info.2 != 0 && !elems.contains(&info.2) {
            elems.push(info.2);
        }
        rows.push(row(&info, 0));
    }
    let mut deep: Vec<_> = elems
        .into_iter()
        .filter_map(type_info)
        .map(|i| row(&i, 1))
        .collect();
    deep.extend(rows);
    let columns = [
        ("oid", PgType::OID),
        ("ns", PgType::NAME),
        ("name", PgType::NAME),
        ("kind", PgType::CHAR),
        ("basetype", PgType::OID),
        ("elemtype", PgType::OID),
        ("elemdelim", PgType::CHAR),
        ("range_subtype", PgType::OID),
        ("attrtypoids", PgType::OID_ARRAY),
        ("attrnames", PgType::TEXT_ARRAY),
        ("depth", PgType::INT4),
        ("basetype_name", PgType::TEXT),
        ("elemtype_name", PgType::TEXT),
        ("range_subtype_name", PgType::TEXT),
    ];
    Some(CatalogRows {
        columns: columns
            .into_iter()
            .map(|(n, t)| (n.to_string(), t))
            .collect(),
        rows: deep,
    })
}

/// postgres.js's array types query: each element type and its array type.
fn postgresjs_arrays(text: &str) -> Option<CatalogRows> {
    if !text.contains("from pg_type a left join pg_type b on b.oid = a.typelem")
        || !text.contains("a.typcategory = 'A'")
    {
        return None;
    }
    let mut rows: Vec<(u32, u32)> = TYPES.iter().map(|&(o, _, a, _)| (o, a)).collect();
    rows.sort();
    Some(CatalogRows {
        columns: vec![
            ("oid".into(), PgType::OID),
            ("typarray".into(), PgType::OID),
        ],
        rows: rows
            .into_iter()
            .map(|(o, a)| vec![val(o.to_string()), val(a.to_string())])
            .collect(),
    })
}

/// pgbench's startup query on `pg_class`, `pg_partitioned_table` and
/// `pg_inherits`: for the table it names, found in the search path at
/// position 1, not partitioned, 0 partitions; no row (pgbench then says
/// the table is missing) if there is no such table.
fn pgbench_partitions(text: &str, catalog: &Catalog) -> Option<CatalogRows> {
    if !text.contains("pg_partitioned_table") || !text.contains("pg_inherits") {
        return None;
    }
    let table = literal_after(text, "where c.relname =")?;
    let rows = if catalog.tables().iter().any(|t| t.name == table) {
        vec![vec![val("1"), None, val("0")]]
    } else {
        vec![]
    };
    Some(CatalogRows {
        columns: vec![
            ("n".into(), PgType::INT4),
            ("partstrat".into(), PgType::CHAR),
            ("count".into(), PgType::INT8),
        ],
        rows,
    })
}

#[cfg(test)]
mod tests;
