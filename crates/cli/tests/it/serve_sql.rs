//! What drivers, pools and tools send, on the raw protocol and through
//! tokio-postgres: quoted literals and casts typed as PostgreSQL types
//! them, every array form, aliases and column lists on calls, the
//! statements pools send on their own (`SELECT 1`, `version()`, `SHOW`,
//! `SET`, `RESET ALL`, `DEALLOCATE ALL`, `DISCARD ALL`, …), the statement
//! timeout, and a cancel that stops the rest of a query string.

use std::time::Duration;

use islands::api::{Deployment, ProcDef, Type, Value};
use islands::server::serve;
use islands::Abort;

use super::raw::{bind_msg, errors, execute_msg, of, parse_msg, Raw};
use super::serve::{cancel_raw, code, connect, local, runtime};
use super::support::{counters, open_counters, slow_bump};

/// Counters 0..16 at 0, and procedures: `bump(key, ms)` adds 1 and takes
/// `ms` more before it commits; `value(key)`; `echo(i, f, s)` answers its
/// arguments; `sum(keys int8[])` answers their count and sum; `rows(n)`
/// answers `n` rows of 1 KiB.
fn deployment() -> Deployment {
    let (mut c, t) = counters();
    c.procedure(slow_bump(t)).unwrap();
    c.procedure(
        ProcDef::new("echo", |_, a, out| {
            Box::pin(async move {
                out.push(vec![
                    a.get(0).clone(),
                    a.get(1).clone(),
                    Value::Str(a.str(2).to_string()),
                ]);
                Ok(())
            })
        })
        .param("i", Type::Int)
        .param("f", Type::Float)
        .param("s", Type::Str)
        .column("i", Type::Int)
        .column("f", Type::Float)
        .column("s", Type::Str),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("sum", |_, a, out| {
            Box::pin(async move {
                let Value::Ints(v) = a.get(0) else {
                    return Err(Abort::User("not an array"));
                };
                out.push(vec![Value::Int(v.len() as i64), Value::Int(v.iter().sum())]);
                Ok(())
            })
        })
        .param("keys", Type::Ints)
        .column("n", Type::Int)
        .column("total", Type::Int),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("rows", |_, a, out| {
            Box::pin(async move {
                for _ in 0..a.int(0) {
                    out.push(vec![Value::Str("x".repeat(1024))]);
                }
                Ok(())
            })
        })
        .param("n", Type::Int)
        .column("s", Type::Str),
    )
    .unwrap();
    open_counters(c, t)
}

/// The one DataRow of `sql`, asserting there is no error.
fn row(r: &mut Raw, sql: &str) -> String {
    let msgs = r.query(sql);
    assert!(errors(&msgs).is_empty(), "{sql}: {msgs:?}");
    let rows = of(b'D', &msgs);
    assert_eq!(rows.len(), 1, "{sql}: {msgs:?}");
    rows[0].to_string()
}

fn error(r: &mut Raw, sql: &str) -> String {
    let msgs = r.query(sql);
    let e = errors(&msgs);
    assert_eq!(e.len(), 1, "{sql}: {msgs:?}");
    e[0].to_string()
}

/// A Parse with declared parameter types (oids).
fn parse_typed(name: &str, sql: &str, oids: &[u32]) -> Vec<u8> {
    let mut b = name.as_bytes().to_vec();
    b.push(0);
    b.extend_from_slice(sql.as_bytes());
    b.push(0);
    b.extend_from_slice(&(oids.len() as u16).to_be_bytes());
    for o in oids {
        b.extend_from_slice(&o.to_be_bytes());
    }
    b
}

/// A Bind of one binary parameter, text results.
fn bind_binary(stmt: &str, param: &[u8]) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(stmt.as_bytes());
    b.push(0);
    b.extend_from_slice(&1u16.to_be_bytes());
    b.extend_from_slice(&1u16.to_be_bytes());
    b.extend_from_slice(&1u16.to_be_bytes());
    b.extend_from_slice(&(param.len() as u32).to_be_bytes());
    b.extend_from_slice(param);
    b.extend_from_slice(&0u16.to_be_bytes());
    b
}

/// PostgreSQL's binary one-dimensional `int2[]`.
fn int2_array(v: &[i16]) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [1i32, 0, 21, v.len() as i32, 1] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    for x in v {
        b.extend_from_slice(&2i32.to_be_bytes());
        b.extend_from_slice(&x.to_be_bytes());
    }
    b
}

#[test]
fn quoted_literals_casts_and_every_array_form_take_their_parameter_types() {
    let server = serve(deployment(), local()).unwrap();
    let mut r = Raw::connect(server.local_addr());
    for (sql, want) in [
        ("CALL echo('1', '2.5', 'x')", "1|2.5|x"),
        (
            "CALL echo(1::int8, '5'::bigint, CAST(7 AS text))",
            "1|5.0|7",
        ),
        (
            "CALL echo(CAST('3' AS int4), 1.5::float8, 'it''s')",
            "3|1.5|it's",
        ),
        ("CALL sum(ARRAY[1, 2])", "2|3"),
        ("CALL sum(ARRAY['1', '2'])", "2|3"),
        ("CALL sum('{1,2,3}')", "3|6"),
        ("CALL sum('{\"11\",\"22\"}')", "2|33"),
        ("CALL sum('{}')", "0|0"),
        ("CALL sum(ARRAY[]::int8[])", "0|0"),
        ("CALL sum('{4}'::bigint[])", "1|4"),
    ] {
        assert_eq!(row(&mut r, sql), want, "{sql}");
    }
    for (sql, want) in [
        ("CALL echo('x', 1, 'y')", "22P02"),
        ("CALL sum('{1,x}')", "22P02"),
        ("CALL echo('x'::int8, 1, 'y')", "22P02"),
        ("CALL echo(1, 2, 3)", "42804"),
    ] {
        assert_eq!(error(&mut r, sql), want, "{sql}");
    }
    // node-postgres sends every parameter as text: {"11","22"} for an int8[].
    r.send(b'P', &parse_msg("", "CALL sum($1)"));
    r.send(b'B', &bind_msg("", "", &["{\"11\",\"22\"}"]));
    r.send(b'E', &execute_msg(""));
    r.send(b'S', b"");
    let msgs = r.until_ready();
    assert_eq!(of(b'D', &msgs), vec!["2|33"], "{msgs:?}");
    // psycopg sends a small list as a binary int2[].
    r.send(b'P', &parse_typed("", "CALL sum($1)", &[1005]));
    r.send(b'B', &bind_binary("", &int2_array(&[5, -1, 300])));
    r.send(b'E', &execute_msg(""));
    r.send(b'S', b"");
    let msgs = r.until_ready();
    assert_eq!(of(b'D', &msgs), vec!["3|304"], "{msgs:?}");
    server.shutdown().unwrap();
}

#[test]
fn calls_take_aliases_and_column_lists() {
    let server = serve(deployment(), local()).unwrap();
    let addr = server.local_addr();
    let mut r = Raw::connect(addr);
    for (sql, cols, want) in [
        (
            "SELECT * FROM echo(1, 2, 'a') AS result",
            "i,f,s",
            "1|2.0|a",
        ),
        (
            "SELECT * FROM echo(1, 2, 'a') AS t(a, b)",
            "a,b,s",
            "1|2.0|a",
        ),
        ("SELECT s, i AS n FROM echo(1, 2, 'a')", "s,n", "a|1"),
        ("SELECT t.f FROM public.echo(1, 2, 'a') t", "f", "2.0"),
        ("SELECT echo(1, 2, 'a')", "i,f,s", "1|2.0|a"),
    ] {
        let msgs = r.query(sql);
        assert_eq!(of(b'T', &msgs), vec![cols], "{sql}: {msgs:?}");
        assert_eq!(of(b'D', &msgs), vec![want], "{sql}: {msgs:?}");
    }
    assert_eq!(error(&mut r, "SELECT nope FROM echo(1, 2, 'a')"), "42703");
    assert_eq!(error(&mut r, "SELECT * FROM t"), "0A000");
    // pgjdbc's {call f(?)}, over the extended protocol.
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        let row = c
            .query_one(
                "SELECT * FROM echo($1, $2, $3) AS result",
                &[&7i64, &0.5f64, &"z"],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 7);
        let row = c
            .query_one("SELECT s FROM echo($1, 1, 'q')", &[&1i64])
            .await
            .unwrap();
        assert_eq!(row.get::<_, &str>(0), "q");
    });
    server.shutdown().unwrap();
}

#[test]
fn asyncpg_type_introspection_takes_a_binary_oid_array() {
    let server = serve(deployment(), local()).unwrap();
    let mut r = Raw::connect(server.local_addr());
    // asyncpg prepares its introspection without parameter types, and
    // introspects again any parameter type it does not know: `$1::oid[]`
    // must be described as oid[] (1028), not int8[], or it loops forever.
    let sql = "WITH RECURSIVE typeinfo_tree(oid, depth) AS (\
               SELECT t.oid, 0 FROM pg_catalog.pg_type t WHERE t.oid = any($1::oid[])) \
               SELECT * FROM typeinfo_tree";
    r.send(b'P', &parse_msg("", sql));
    r.send(b'D', b"S\0");
    let mut oids = Vec::new();
    for w in [1i32, 0, 26, 1, 1, 4] {
        oids.extend_from_slice(&w.to_be_bytes());
    }
    oids.extend_from_slice(&1016u32.to_be_bytes());
    r.send(b'B', &bind_binary("", &oids));
    r.send(b'E', &execute_msg(""));
    r.send(b'S', b"");
    let msgs = r.until_ready();
    assert!(errors(&msgs).is_empty(), "{msgs:?}");
    assert_eq!(of(b't', &msgs), vec!["1028"], "{msgs:?}");
    let rows = of(b'D', &msgs);
    assert_eq!(rows.len(), 2, "{msgs:?}");
    assert!(rows[0].starts_with("20|pg_catalog|int8|"), "{rows:?}");
    assert!(rows[1].starts_with("1016|pg_catalog|_int8|"), "{rows:?}");
    server.shutdown().unwrap();
}

#[test]
fn what_pools_and_drivers_send_on_their_own_is_answered() {
    let server = serve(deployment(), local()).unwrap();
    let addr = server.local_addr();
    let mut r = Raw::connect(addr);
    assert_eq!(row(&mut r, "SELECT 1"), "1");
    let msgs = r.query("SELECT 1 AS x, 2 * 3");
    assert_eq!(of(b'T', &msgs), vec!["x,?column?"]);
    assert_eq!(of(b'D', &msgs), vec!["1|6"]);
    // One version everywhere, PostgreSQL's number first as drivers parse
    // it (as they parse a distribution's `16.6 (Debian 16.6-1)`).
    let status: Vec<&str> = of(b'S', &r.startup)
        .into_iter()
        .filter_map(|p| p.strip_prefix("server_version="))
        .collect();
    assert_eq!(status.len(), 1, "{:?}", r.startup);
    let version = status[0].to_string();
    let number = version.split(' ').next().unwrap();
    assert_eq!(number, "16.6", "{version}");
    assert!(
        version.starts_with("16.6 (islands ") && version.ends_with(')'),
        "{version}"
    );
    assert_eq!(row(&mut r, "SHOW server_version"), version);
    assert_eq!(row(&mut r, "SHOW server_version_num"), "160006");
    let v = row(&mut r, "SELECT version()");
    assert!(v.starts_with(&format!("PostgreSQL {version} on ")), "{v}");
    assert_eq!(row(&mut r, "SHOW transaction_isolation"), "serializable");
    assert_eq!(
        row(&mut r, "SHOW TRANSACTION ISOLATION LEVEL"),
        "serializable"
    );
    assert_eq!(row(&mut r, "SHOW standard_conforming_strings"), "on");
    assert_eq!(row(&mut r, "SHOW client_encoding"), "UTF8");
    assert!(of(b'D', &r.query("SHOW ALL")).len() > 10);
    assert_eq!(row(&mut r, "SELECT pg_advisory_unlock_all()"), "");
    // SET reports what PostgreSQL reports, and SHOW and current_setting see it.
    let msgs = r.query("SET application_name = 'app'");
    assert_eq!(of(b'S', &msgs), vec!["application_name=app"], "{msgs:?}");
    assert_eq!(of(b'C', &msgs), vec!["SET"]);
    assert_eq!(row(&mut r, "SHOW application_name"), "app");
    assert_eq!(
        row(&mut r, "SELECT current_setting('application_name')"),
        "app"
    );
    assert!(of(b'S', &r.query("SET extra_float_digits = 3")).is_empty());
    assert_eq!(row(&mut r, "SHOW extra_float_digits"), "3");
    assert_eq!(row(&mut r, "SELECT set_config('my.key', 'v', false)"), "v");
    assert_eq!(row(&mut r, "SHOW my.key"), "v");
    assert_eq!(
        error(&mut r, "SET transaction_isolation = 'read committed'"),
        "0A000"
    );
    assert_eq!(error(&mut r, "SHOW no_such_setting"), "42704");
    // RESET ALL goes back to the login's values, and says so.
    let msgs = r.query("RESET ALL");
    assert_eq!(of(b'S', &msgs), vec!["application_name="], "{msgs:?}");
    assert_eq!(of(b'C', &msgs), vec!["RESET"]);
    assert_eq!(row(&mut r, "SHOW extra_float_digits"), "1");
    assert_eq!(error(&mut r, "SHOW my.key"), "42704");
    // DEALLOCATE ALL drops the statements prepared by Parse.
    r.send(b'P', &parse_msg("s1", "CALL value(1)"));
    r.send(b'S', b"");
    assert!(errors(&r.until_ready()).is_empty());
    assert_eq!(of(b'C', &r.query("DEALLOCATE ALL")), vec!["DEALLOCATE ALL"]);
    r.send(b'B', &bind_msg("", "s1", &[]));
    r.send(b'S', b"");
    assert_eq!(errors(&r.until_ready()), vec!["26000"]);
    for (sql, tag) in [
        ("CLOSE ALL", "CLOSE CURSOR ALL"),
        ("UNLISTEN *", "UNLISTEN"),
        ("DISCARD ALL", "DISCARD ALL"),
        ("BEGIN", "BEGIN"),
        ("COMMIT", "COMMIT"),
    ] {
        assert_eq!(of(b'C', &r.query(sql)), vec![tag], "{sql}");
    }
    // DISCARD ALL resets the session.
    r.query("SET statement_timeout = '5s'");
    assert_eq!(row(&mut r, "SHOW statement_timeout"), "5s");
    r.query("DISCARD ALL");
    assert_eq!(row(&mut r, "SHOW statement_timeout"), "0");
    // $n in a simple query is 42P02, and nothing of the string runs.
    let msgs = r.query("CALL bump(1, 0); CALL echo($1, 1, 'a')");
    assert_eq!(errors(&msgs), vec!["42P02"]);
    assert_eq!(row(&mut r, "CALL value(1)"), "0");
    // The same through tokio-postgres, both protocols.
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        let row = c.query_one("SELECT 1", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 1);
        let row = c.query_one("SHOW transaction_isolation", &[]).await.unwrap();
        assert_eq!(row.get::<_, &str>(0), "serializable");
        let row = c.query_one("SELECT version()", &[]).await.unwrap();
        assert!(row.get::<_, &str>(0).starts_with("PostgreSQL"));
        c.batch_execute("SET application_name = 'x'; RESET ALL; DEALLOCATE ALL; CLOSE ALL; UNLISTEN *; DISCARD ALL")
            .await
            .unwrap();
        let e = c.simple_query("SELECT * FROM echo($1, 1, 'a')").await.unwrap_err();
        assert_eq!(code(&e), "42P02");
    });
    server.shutdown().unwrap();
}

/// The body of a Describe or Close of statement `name`.
fn statement_ref(name: &str) -> Vec<u8> {
    let mut b = vec![b'S'];
    b.extend_from_slice(name.as_bytes());
    b.push(0);
    b
}

#[test]
fn select_of_placeholders_is_typed_as_postgresql_types_it_in_the_extended_protocol() {
    let server = serve(deployment(), local()).unwrap();
    let addr = server.local_addr();
    let mut r = Raw::connect(addr);
    // (statement, its parameter's type oid, a value, the answer, the
    // column's type oid is the parameter's)
    for (sql, oid, param, answer) in [
        ("SELECT $1", "25", "hello", "hello"),
        ("SELECT $1::int8", "20", "5", "5"),
        ("SELECT $1 + 1", "20", "41", "42"),
        ("SELECT 2.5 * $1", "701", "3", "7.5"),
        ("SELECT $1 || '!'", "25", "hi", "hi!"),
    ] {
        r.send(b'P', &parse_msg("s", sql));
        r.send(b'D', &statement_ref("s"));
        r.send(b'B', &bind_msg("", "s", &[param]));
        r.send(b'E', &execute_msg(""));
        r.send(b'C', &statement_ref("s"));
        r.send(b'S', b"");
        let m = r.until_ready();
        assert!(errors(&m).is_empty(), "{sql}: {m:?}");
        assert_eq!(of(b't', &m), vec![oid], "{sql}: {m:?}");
        assert_eq!(of(b'D', &m), vec![answer], "{sql}: {m:?}");
    }
    // Out of range: 22003, not a wrong answer.
    r.send(b'P', &parse_msg("", "SELECT $1 + 1"));
    r.send(b'B', &bind_msg("", "", &[&i64::MAX.to_string()]));
    r.send(b'E', &execute_msg(""));
    r.send(b'S', b"");
    assert_eq!(errors(&r.until_ready()), vec!["22003"]);
    // In a simple query, still 42P02.
    assert_eq!(errors(&r.query("SELECT $1")), vec!["42P02"]);
    // tokio-postgres prepares them and sends its parameters typed so.
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        let row = c.query_one("SELECT $1", &[&"x"]).await.unwrap();
        assert_eq!(row.get::<_, &str>(0), "x");
        let row = c.query_one("SELECT $1::int8", &[&7i64]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 7);
        let row = c.query_one("SELECT $1 + 1", &[&41i64]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 42);
    });
    server.shutdown().unwrap();
}

#[test]
fn a_statement_running_past_statement_timeout_is_canceled_with_57014() {
    let server = serve(deployment(), local()).unwrap();
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        c.batch_execute("SET statement_timeout = '200ms'")
            .await
            .unwrap();
        let e = c.simple_query("CALL bump(1, 1500)").await.unwrap_err();
        assert_eq!(code(&e), "57014");
        let m = e.as_db_error().unwrap().message().to_string();
        assert!(m.contains("statement timeout"), "{m}");
        // Rolled back; the connection goes on, and calls within the timeout commit.
        let row = c.query_one("CALL value(1)", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 0);
        let e = c
            .query("CALL bump($1, $2)", &[&2i64, &1500i64])
            .await
            .unwrap_err();
        assert_eq!(code(&e), "57014");
        c.batch_execute("CALL bump(3, 0); RESET statement_timeout; CALL bump(3, 300)")
            .await
            .unwrap();
        let row = c.query_one("CALL value(3)", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 2);
    });
    server.shutdown().unwrap();
}

#[test]
fn a_cancel_stops_the_rest_of_the_query_string() {
    let server = serve(deployment(), local()).unwrap();
    let addr = server.local_addr();
    let mut r = Raw::connect(addr);
    let (pid, key) = r.key.clone().expect("BackendKeyData");
    // Canceled during its first statement: none of the rest runs.
    r.send(
        b'Q',
        b"CALL bump(1, 600); CALL bump(2, 0); CALL bump(3, 0)\0",
    );
    std::thread::sleep(Duration::from_millis(200));
    cancel_raw(addr, pid, &key);
    assert_eq!(errors(&r.until_ready()), vec!["57014"]);
    // Canceled after its first statement committed, while its answer
    // waits for a client that does not read (20 MiB of rows): the
    // statements after it do not run.
    r.send(
        b'Q',
        b"CALL rows(20000); CALL bump(4, 0); CALL bump(5, 0)\0",
    );
    std::thread::sleep(Duration::from_millis(500));
    cancel_raw(addr, pid, &key);
    let msgs = r.until_ready();
    assert_eq!(of(b'D', &msgs).len(), 20000);
    assert_eq!(errors(&msgs), vec!["57014"], "{:?}", of(b'C', &msgs));
    for k in 1..=5 {
        assert_eq!(row(&mut r, &format!("CALL value({k})")), "0", "counter {k}");
    }
    // The same in a pipeline: the Executes after the cancel are skipped.
    r.send(b'P', &parse_msg("", "CALL rows(20000)"));
    r.send(b'B', &bind_msg("", "", &[]));
    r.send(b'E', &execute_msg(""));
    r.send(b'P', &parse_msg("", "CALL bump(6, 0)"));
    r.send(b'B', &bind_msg("", "", &[]));
    r.send(b'E', &execute_msg(""));
    r.send(b'S', b"");
    std::thread::sleep(Duration::from_millis(500));
    cancel_raw(addr, pid, &key);
    let msgs = r.until_ready();
    assert_eq!(errors(&msgs), vec!["57014"]);
    assert_eq!(row(&mut r, "CALL value(6)"), "0");
    // A cancel while idle cancels nothing after it.
    cancel_raw(addr, pid, &key);
    assert_eq!(row(&mut r, "CALL bump(7, 0)"), "1");
    server.shutdown().unwrap();
}
