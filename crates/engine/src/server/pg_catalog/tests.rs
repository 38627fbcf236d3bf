//! Each query captured from a tool (`captured/`: psql 15 with `-E`
//! against PostgreSQL 15, asyncpg 0.31 and pgbench 15 from PostgreSQL's
//! statement log, postgres.js from its source) answered against a catalog
//! like the bank data set's.

use pgwire::api::Type as PgType;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use super::*;
use crate::api::{Catalog, Partition, ProcDef, SqlTable, Type, Value};
use crate::storage::schema::SqlType;
use crate::storage::{ColType, PrimaryKind, TableDef};

fn catalog() -> Catalog {
    let mut c = Catalog::new();
    let accounts = c.table(
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            1000,
            PrimaryKind::Hash,
        ),
        Partition::Range { keys: 1000 },
    );
    // As bank's: the key shows as column `id`.
    c.sql(
        accounts,
        SqlTable::new()
            .key_column("id", SqlType::Int8, 0, 63)
            .column("balance", SqlType::Int8, "balance"),
    )
    .unwrap();
    // No view given: the key shows as column `key`.
    c.table(
        TableDef::new(
            "history",
            &[("note", ColType::Str(20))],
            1000,
            PrimaryKind::Ordered,
        ),
        Partition::Replicated,
    );
    c.procedure(
        ProcDef::new("transfer", |_, _, _| Box::pin(async { Ok(()) }))
            .param("from_id", Type::Int)
            .param("to_id", Type::Int)
            .param("amount", Type::Int),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("bank_balance", |_, _, _| Box::pin(async { Ok(()) }))
            .param("id", Type::Int)
            .column("balance", Type::Int),
    )
    .unwrap();
    c
}

fn ask(sql: &str, params: &[Value]) -> Result<Option<CatalogRows>, SqlError> {
    let stmts = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(64)
        .try_with_sql(sql)
        .unwrap()
        .parse_statements()
        .unwrap_or_else(|e| panic!("{e}: {sql}"));
    assert_eq!(stmts.len(), 1);
    answer(sql, &stmts[0], params, &catalog())
}

fn rows_of(sql: &str) -> CatalogRows {
    ask(sql, &[]).unwrap().expect("a catalog query")
}

fn cell(r: &CatalogRows, row: usize, col: &str) -> Option<String> {
    let i = r.columns.iter().position(|(n, _)| n == col).unwrap();
    r.rows[row][i].clone()
}

fn col_names(r: &CatalogRows) -> Vec<&str> {
    r.columns.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn psql_dt_and_d_list_the_tables() {
    for q in [
        include_str!("captured/psql15_dt.sql"),
        include_str!("captured/psql15_d.sql"),
    ] {
        let r = rows_of(q);
        assert_eq!(col_names(&r), ["Schema", "Name", "Type", "Owner"]);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(cell(&r, 0, "Name").as_deref(), Some("accounts"));
        assert_eq!(cell(&r, 1, "Name").as_deref(), Some("history"));
        assert_eq!(cell(&r, 0, "Type").as_deref(), Some("table"));
        assert_eq!(cell(&r, 0, "Schema").as_deref(), Some("public"));
    }
    // \dv: views only; none here.
    let dv = include_str!("captured/psql15_dt.sql").replace("('r','p','')", "('v','')");
    assert!(rows_of(&dv).rows.is_empty());
    // \dt acc*: psql's pattern.
    let pat = include_str!("captured/psql15_dt.sql").replace(
        "AND pg_catalog.pg_table_is_visible",
        "AND c.relname OPERATOR(pg_catalog.~) '^(acc.*)$' COLLATE pg_catalog.default\n  AND pg_catalog.pg_table_is_visible",
    );
    let r = rows_of(&pat);
    assert_eq!(r.rows.len(), 1);
    assert_eq!(cell(&r, 0, "Name").as_deref(), Some("accounts"));
}

#[test]
fn psql_d_name_finds_the_table_and_describes_its_columns() {
    let r = rows_of(include_str!("captured/psql15_d_accounts_1.sql"));
    assert_eq!(
        r.columns,
        vec![
            ("oid".to_string(), PgType::OID),
            ("nspname".to_string(), PgType::NAME),
            ("relname".to_string(), PgType::NAME)
        ]
    );
    assert_eq!(
        r.rows,
        vec![vec![
            Some("16384".to_string()),
            Some("public".to_string()),
            Some("accounts".to_string())
        ]]
    );
    let missing = include_str!("captured/psql15_d_accounts_1.sql").replace("accounts", "nosuch");
    assert!(rows_of(&missing).rows.is_empty());

    let r = rows_of(include_str!("captured/psql15_d_accounts_2.sql"));
    assert_eq!(r.columns.len(), 15, "{:?}", col_names(&r));
    assert_eq!(r.rows.len(), 1);
    assert_eq!(cell(&r, 0, "relkind").as_deref(), Some("r"));
    assert_eq!(cell(&r, 0, "relchecks").as_deref(), Some("0"));
    assert_eq!(cell(&r, 0, "relhasindex").as_deref(), Some("f"));
    assert_eq!(cell(&r, 0, "amname").as_deref(), Some("heap"));

    let r = rows_of(include_str!("captured/psql15_d_accounts_3.sql"));
    assert_eq!(r.columns.len(), 7, "{:?}", col_names(&r));
    assert_eq!(r.rows.len(), 2);
    // The key column first, as `SELECT *` shows it, and not null.
    assert_eq!(r.rows[0][0].as_deref(), Some("id"));
    assert_eq!(r.rows[0][1].as_deref(), Some("bigint"));
    assert_eq!(cell(&r, 0, "attnotnull").as_deref(), Some("t"));
    assert_eq!(r.rows[1][0].as_deref(), Some("balance"));
    assert_eq!(cell(&r, 1, "attnotnull").as_deref(), Some("f"));
    // The second table's columns, by its oid: its default view's key first.
    let second = include_str!("captured/psql15_d_accounts_3.sql").replace("'16384'", "'16385'");
    let r = rows_of(&second);
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.rows[0][0].as_deref(), Some("key"));
    assert_eq!(r.rows[1][0].as_deref(), Some("note"));
    assert_eq!(r.rows[1][1].as_deref(), Some("character varying(20)"));
    // \d+ asks for storage and more: plain for integers, extended for strings.
    let r = rows_of(include_str!("captured/psql15_d_plus_accounts_3.sql"));
    assert_eq!(r.columns.len(), 11, "{:?}", col_names(&r));
    assert_eq!(cell(&r, 0, "attstorage").as_deref(), Some("p"));
    assert_eq!(cell(&r, 0, "attstattarget"), None);
    let r = rows_of(
        &include_str!("captured/psql15_d_plus_accounts_3.sql").replace("'16384'", "'16385'"),
    );
    assert_eq!(cell(&r, 1, "attstorage").as_deref(), Some("x"));
    // An oid that is no table: no columns.
    let none = include_str!("captured/psql15_d_accounts_3.sql").replace("'16384'", "'99'");
    assert!(rows_of(&none).rows.is_empty());

    // Indexes, policies, statistics, publications, inheritance: none.
    for (q, cols) in [
        (include_str!("captured/psql15_d_accounts_4.sql"), 12),
        (include_str!("captured/psql15_d_accounts_5.sql"), 6),
        (include_str!("captured/psql15_d_accounts_6.sql"), 9),
        (include_str!("captured/psql15_d_accounts_7.sql"), 3),
        (include_str!("captured/psql15_d_accounts_8.sql"), 1),
        (include_str!("captured/psql15_d_accounts_9.sql"), 4),
    ] {
        let r = rows_of(q);
        assert!(r.rows.is_empty(), "{q}");
        assert_eq!(r.columns.len(), cols, "{q}");
    }
}

#[test]
fn psql_df_lists_the_procedures_with_their_arguments_and_results() {
    let r = rows_of(include_str!("captured/psql15_df.sql"));
    assert_eq!(
        col_names(&r),
        [
            "Schema",
            "Name",
            "Result data type",
            "Argument data types",
            "Type"
        ]
    );
    assert_eq!(r.rows.len(), 2);
    assert_eq!(cell(&r, 0, "Name").as_deref(), Some("bank_balance"));
    assert_eq!(
        cell(&r, 0, "Result data type").as_deref(),
        Some("TABLE(balance bigint)")
    );
    assert_eq!(
        cell(&r, 0, "Argument data types").as_deref(),
        Some("id bigint")
    );
    assert_eq!(cell(&r, 1, "Name").as_deref(), Some("transfer"));
    assert_eq!(cell(&r, 1, "Result data type").as_deref(), Some("void"));
    assert_eq!(
        cell(&r, 1, "Argument data types").as_deref(),
        Some("from_id bigint, to_id bigint, amount bigint")
    );
}

#[test]
fn psql_l_lists_the_one_database() {
    let r = rows_of(include_str!("captured/psql15_l.sql"));
    assert_eq!(r.columns.len(), 8, "{:?}", col_names(&r));
    assert_eq!(r.rows.len(), 1);
    assert_eq!(cell(&r, 0, "Name").as_deref(), Some("islands"));
    assert_eq!(cell(&r, 0, "Encoding").as_deref(), Some("UTF8"));
}

#[test]
fn asyncpg_introspects_array_types_and_their_elements() {
    let q = include_str!("captured/asyncpg_types.sql");
    // As PostgreSQL 15 answered it for '{1016,1005}'.
    for oids in [
        Value::Ints(vec![1016, 1005]),
        Value::Str("{1016,1005}".into()),
    ] {
        let r = ask(q, &[oids]).unwrap().unwrap();
        assert_eq!(r.columns.len(), 14);
        assert_eq!(r.columns[0], ("oid".to_string(), PgType::OID));
        assert_eq!(r.columns[10], ("depth".to_string(), PgType::INT4));
        let brief: Vec<(String, String, String, String)> = r
            .rows
            .iter()
            .map(|row| {
                (
                    row[0].clone().unwrap(),
                    row[2].clone().unwrap(),
                    row[5].clone().unwrap(),
                    row[10].clone().unwrap(),
                )
            })
            .collect();
        let want = [
            ("20", "int8", "0", "1"),
            ("21", "int2", "0", "1"),
            ("1016", "_int8", "20", "0"),
            ("1005", "_int2", "21", "0"),
        ];
        assert_eq!(brief.len(), want.len(), "{brief:?}");
        for w in want {
            assert!(
                brief.contains(&(w.0.into(), w.1.into(), w.2.into(), w.3.into())),
                "{w:?} in {brief:?}"
            );
        }
        // Elements (depth 1) come first, as PostgreSQL orders by depth desc.
        assert_eq!(r.rows[0][10].as_deref(), Some("1"));
        let int8_array = r
            .rows
            .iter()
            .find(|row| row[0].as_deref() == Some("1016"))
            .unwrap();
        assert_eq!(int8_array[6].as_deref(), Some(","));
        assert_eq!(int8_array[12].as_deref(), Some("bigint"));
    }
    // A type this server does not have: no row (asyncpg then says so).
    let r = ask(q, &[Value::Ints(vec![3802])]).unwrap().unwrap();
    assert!(r.rows.is_empty());
}

#[test]
fn postgresjs_gets_each_element_type_and_its_array_type() {
    let r = rows_of(include_str!("captured/postgresjs_arrays.sql"));
    assert_eq!(
        r.columns,
        vec![
            ("oid".to_string(), PgType::OID),
            ("typarray".to_string(), PgType::OID)
        ]
    );
    assert!(r
        .rows
        .contains(&vec![Some("20".to_string()), Some("1016".to_string())]));
    let oids: Vec<u32> = r
        .rows
        .iter()
        .map(|r| r[0].as_ref().unwrap().parse().unwrap())
        .collect();
    let mut sorted = oids.clone();
    sorted.sort();
    assert_eq!(oids, sorted);
}

#[test]
fn pgbench_finds_its_accounts_table_unpartitioned() {
    let q = include_str!("captured/pgbench15_partitions.sql");
    // This catalog has no pgbench_accounts: no row (pgbench says so).
    let r = rows_of(q);
    assert!(r.rows.is_empty());
    assert_eq!(
        r.columns.iter().map(|c| c.1.clone()).collect::<Vec<_>>(),
        vec![PgType::INT4, PgType::CHAR, PgType::INT8]
    );
    let r = rows_of(&q.replace("pgbench_accounts", "accounts"));
    assert_eq!(
        r.rows,
        vec![vec![Some("1".to_string()), None, Some("0".to_string())]]
    );
}

#[test]
fn unknown_catalog_queries_are_0a000_and_others_are_not_catalog_queries() {
    let e = ask("SELECT * FROM pg_catalog.pg_stat_activity", &[]).unwrap_err();
    assert_eq!(e.code, "0A000");
    assert!(e.message.contains("pg_stat_activity"), "{}", e.message);
    let e = ask("SELECT relname FROM pg_class", &[]).unwrap_err();
    assert_eq!(e.code, "0A000");
    let e = ask("SELECT table_name FROM information_schema.tables", &[]).unwrap_err();
    assert!(
        e.message.contains("information_schema.tables"),
        "{}",
        e.message
    );
    // A count over an empty relation is one row, not none: refused.
    let e = ask("SELECT count(*) FROM pg_inherits", &[]).unwrap_err();
    assert_eq!(e.code, "0A000");
    // But its rows, whatever the projection, are none.
    let r =
        rows_of("SELECT inhrelid, inhparent AS p FROM pg_catalog.pg_inherits WHERE inhparent = 1");
    assert_eq!(col_names(&r), ["inhrelid", "p"]);
    assert!(r.rows.is_empty());
    for sql in [
        "SELECT * FROM accounts WHERE id = 1",
        "SELECT * FROM pgbench_accounts",
        "CALL transfer(1, 2, 3)",
        "SELECT 1",
        "SELECT pg_catalog.set_config('search_path', '', false)",
    ] {
        assert_eq!(ask(sql, &[]).unwrap(), None, "{sql}");
    }
}

#[test]
fn psql_patterns_match_as_psql_means_them() {
    assert!(pattern_matches("^(accounts)$", "accounts"));
    assert!(!pattern_matches("^(accounts)$", "accounts2"));
    assert!(pattern_matches("^(acc.*)$", "accounts"));
    assert!(pattern_matches("^(a.count.)$", "accounts"));
    assert!(!pattern_matches("^(b.*)$", "accounts"));
    assert!(pattern_matches(
        "^(pgbench\\_accounts)$",
        "pgbench_accounts"
    ));
    // Anything richer matches nothing rather than something wrong.
    assert!(!pattern_matches("^(a|accounts)$", "accounts"));
}
