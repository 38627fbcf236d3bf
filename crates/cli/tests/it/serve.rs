//! `islands serve` and `islands::server`: PostgreSQL clients call the
//! built-in procedures over the simple and the extended protocol; errors
//! come with their SQLSTATEs and leave the connection usable where
//! PostgreSQL's would be; limits close what they should; a shutdown
//! answers the calls in flight; a SIGKILLed server recovers every
//! acknowledged call.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::api::{Catalog, Deployment, Options, Partition, ProcDef, Type, Value};
use islands::deploy::{DeploySpec, Islands};
use islands::server::{serve, Server, ServerOptions};
use islands::storage::{ColType, PrimaryKind, TableDef};
use islands::{Abort, AbortReason};
use islands_workloads::served::Builtin;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::raw::{errors, Raw};
use super::support::{counters, open_counters, slow_bump};

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub(super) fn spec(dir: Option<&Path>) -> DeploySpec {
    let mut s = DeploySpec::new(Islands::Count(1));
    s.workers_per_island = Some(2);
    match dir {
        Some(d) => {
            s.durability = "sync".into();
            s.log_dir = d.to_path_buf();
        }
        None => s.durability = "off".into(),
    }
    s
}

pub(super) fn open(catalog: Catalog, b: Option<Builtin>, dir: Option<&Path>) -> Deployment {
    let mut o = Options::new(spec(dir));
    o.pin = false;
    Deployment::open(o, catalog, move |l| match b {
        Some(b) => b.load(l),
        None => Ok(()),
    })
    .unwrap()
}

fn start(b: Builtin, opts: ServerOptions) -> Server {
    let db = open(b.catalog(), Some(b), None);
    serve(db, opts).unwrap()
}

pub(super) fn local() -> ServerOptions {
    ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        // One server thread, whatever the machine (the default follows its cores).
        threads: Some(1),
        ..ServerOptions::default()
    }
}

/// Loopback with `threads` server threads: the tests that run on one and
/// on three show that every behaviour holds across threads.
fn on_threads(threads: usize) -> ServerOptions {
    ServerOptions {
        threads: Some(threads),
        ..local()
    }
}

pub(super) async fn connect(addr: SocketAddr) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(
        &format!(
            "host={} port={} user=tester dbname=islands connect_timeout=5",
            addr.ip(),
            addr.port()
        ),
        NoTls,
    )
    .await?;
    tokio::spawn(conn);
    Ok(client)
}

pub(super) fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// The single value of a one-row, one-column simple query.
pub(super) async fn simple_one(c: &Client, sql: &str) -> String {
    let msgs = c.simple_query(sql).await.unwrap();
    let rows: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("NULL").to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0].clone()
}

#[test]
fn tpcb_procedures_answer_over_both_protocols() {
    for threads in [1, 3] {
        tpcb_procedures_answer_over_both_protocols_on(threads);
    }
}

fn tpcb_procedures_answer_over_both_protocols_on(threads: usize) {
    let server = start(Builtin::Tpcb { scale: 2 }, on_threads(threads));
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        // Simple protocol, literals; the CALL form returns abalance.
        assert_eq!(simple_one(&c, "CALL tpcb(7, 3, 1, 100)").await, "100");
        // Several statements in one query, with driver chatter around.
        let msgs = c
            .simple_query("BEGIN; CALL tpcb(7, 3, 1, -30); COMMIT; SET x = 'y'")
            .await
            .unwrap();
        let tags: Vec<u64> = msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(tags.len(), 4, "{tags:?}");
        assert_eq!(simple_one(&c, "SELECT * FROM tpcb_balance(7)").await, "70");
        // Extended protocol: prepared, binary int8 parameters and results.
        let st = c.prepare("CALL tpcb($1, $2, $3, $4)").await.unwrap();
        assert_eq!(st.params().len(), 4);
        assert_eq!(st.columns()[0].name(), "abalance");
        let rows = c.query(&st, &[&7i64, &11i64, &2i64, &5i64]).await.unwrap();
        assert_eq!(rows[0].get::<_, i64>(0), 75);
        let bal = c
            .query_one("SELECT * FROM tpcb_balance($1)", &[&7i64])
            .await
            .unwrap();
        assert_eq!(bal.get::<_, i64>("abalance"), 75);
        // A teller's and a branch's balances moved by the same deltas: the
        // history keeps one row per call (SHOW stats counts the commits).
        let stats = c.simple_query("SHOW stats").await.unwrap();
        let committed = stats.iter().any(|m| match m {
            SimpleQueryMessage::Row(r) => {
                r.get(0) == Some("tpcb") && r.get(1) == Some("committed") && r.get(2) == Some("3")
            }
            _ => false,
        });
        assert!(committed, "SHOW stats should count 3 tpcb commits");
        let procs = c.simple_query("SHOW procedures").await.unwrap();
        assert!(procs.iter().any(|m| matches!(m,
            SimpleQueryMessage::Row(r) if r.get(0) == Some("tpcb")
                && r.get(1) == Some("aid int8, tid int8, bid int8, delta int8"))));
        let islands = c.simple_query("SHOW islands").await.unwrap();
        assert!(islands.iter().any(|m| matches!(m,
            SimpleQueryMessage::Row(r) if r.get(0) == Some("0") && r.get(3) == Some("2"))));
    });
    server.shutdown().unwrap();
}

#[test]
fn ycsb_procedures_answer_with_arrays_of_keys() {
    let server = start(Builtin::Ycsb { rows: 1000 }, local());
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        assert_eq!(simple_one(&c, "CALL ycsb_read(42)").await, "42");
        c.execute("CALL ycsb_update($1, $2)", &[&42i64, &1000i64])
            .await
            .unwrap();
        assert_eq!(simple_one(&c, "SELECT * FROM ycsb_read(42)").await, "1000");
        let r = c.query_one("CALL ycsb_rmw($1)", &[&42i64]).await.unwrap();
        assert_eq!(r.get::<_, i64>("f0"), 1001);
        // A binary int8[] parameter: one row per key, in the order given.
        let keys: Vec<i64> = vec![5, 42, 999, 0];
        let rows = c
            .query("SELECT * FROM ycsb_multi_read($1)", &[&keys])
            .await
            .unwrap();
        let got: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(got, vec![(5, 5), (42, 1001), (999, 999), (0, 0)]);
        // The same with an ARRAY literal over the simple protocol.
        let msgs = c
            .simple_query("CALL ycsb_multi_read(ARRAY[7, 8])")
            .await
            .unwrap();
        let n = msgs
            .iter()
            .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
            .count();
        assert_eq!(n, 2);
        // SHOW procedures gives types as PostgreSQL's users write them.
        let procs = c.simple_query("SHOW procedures").await.unwrap();
        let multi = procs.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(r) if r.get(0) == Some("ycsb_multi_read") => {
                Some((r.get(1).map(str::to_string), r.get(2).map(str::to_string)))
            }
            _ => None,
        });
        assert_eq!(
            multi,
            Some((Some("keys int8[]".into()), Some("key int8, f0 int8".into())))
        );
        // A key that does not exist: the procedure's rollback, P0001.
        let e = c
            .query("SELECT * FROM ycsb_multi_read($1)", &[&vec![1i64, 5000]])
            .await
            .unwrap_err();
        assert_eq!(code(&e), "P0001");
        assert_eq!(e.as_db_error().unwrap().message(), "missing key");
    });
    server.shutdown().unwrap();
}

/// A served TPC-C database of `warehouses` warehouses on two islands
/// (warehouse w on island (w - 1) * 2 / warehouses), without a log.
fn tpcc_server(warehouses: u32) -> Server {
    let b = Builtin::Tpcc { warehouses };
    let mut s = DeploySpec::new(Islands::Count(2));
    s.workers_per_island = Some(1);
    s.durability = "off".into();
    s.sites = b.sites();
    let mut o = Options::new(s);
    o.pin = false;
    o.workload = b.workload();
    let db = Deployment::open(o, b.catalog(), move |l| b.load(l)).unwrap();
    serve(db, local()).unwrap()
}

/// The rows of a simple query, each as its columns' text (None: NULL).
async fn simple_rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| {
            let why = e.as_db_error().map_or("", |d| d.message()).to_string();
            panic!("{sql}: {} {why}", code(&e))
        })
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn tpcc_procedures_answer_over_both_protocols() {
    let server = tpcc_server(2);
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        // NewOrder, simple protocol: the district's first order after the
        // 3,000 loaded ones.
        let r = simple_rows(
            &c,
            "CALL new_order(1, 1, 1, ARRAY[1, 2, 3, 4, 5], ARRAY[1, 1, 1, 1, 1], \
             ARRAY[1, 2, 3, 4, 5])",
        )
        .await;
        assert_eq!(r.len(), 1);
        assert_eq!(r[0][0].as_deref(), Some("3001"));
        // Extended protocol, binary int8[]; one line supplied by warehouse 2,
        // on the other island (a distributed transaction).
        let no = c
            .prepare("CALL new_order($1, $2, $3, $4, $5, $6)")
            .await
            .unwrap();
        let cols: Vec<&str> = no.columns().iter().map(|c| c.name()).collect();
        assert_eq!(cols, ["o_id", "o_entry_d", "total_amount"]);
        let items: Vec<i64> = vec![10, 20, 30, 40, 50, 60];
        let supply: Vec<i64> = vec![1, 1, 2, 1, 1, 1];
        let qty: Vec<i64> = vec![1, 1, 1, 1, 1, 10];
        let row = c
            .query_one(&no, &[&1i64, &1i64, &7i64, &items, &supply, &qty])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>("o_id"), 3002);
        assert!(row.get::<_, i64>("total_amount") > 0);
        assert!(row.get::<_, i64>("o_entry_d") > 1_600_000_000_000_000);
        // The spec's rollback: an id that is no item. P0001 with the
        // procedure's message, and the order's id is not used up.
        let bad: Vec<i64> = vec![10, 20, 30, 40, 100_001];
        let five: Vec<i64> = vec![1; 5];
        let e = c
            .query_one(&no, &[&1i64, &1i64, &7i64, &bad, &five, &five])
            .await
            .unwrap_err();
        assert_eq!(code(&e), "P0001", "{e}");
        assert!(
            e.as_db_error().unwrap().message().contains("invalid item"),
            "{e}"
        );
        let e = c
            .simple_query(
                "CALL new_order(1, 1, 7, ARRAY[1, 2, 3, 4, 100001], ARRAY[1, 1, 1, 1, 1], \
                 ARRAY[1, 1, 1, 1, 1])",
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), "P0001", "{e}");
        let row = c
            .query_one(&no, &[&1i64, &1i64, &7i64, &items, &supply, &qty])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>("o_id"), 3003);
        // OrderStatus: customer 7's last order is 3003, one row per line,
        // undelivered (NULL carrier and delivery date).
        let os = c
            .query(
                "CALL order_status($1, $2, $3, $4)",
                &[&1i64, &1i64, &7i64, &""],
            )
            .await
            .unwrap();
        assert_eq!(os.len(), 6);
        for (r, (&i, (&s, &q))) in os.iter().zip(items.iter().zip(supply.iter().zip(&qty))) {
            assert_eq!(r.get::<_, i64>("o_id"), 3003);
            assert_eq!(r.get::<_, Option<i64>>("o_carrier_id"), None);
            assert_eq!(r.get::<_, Option<i64>>("ol_delivery_d"), None);
            let line: (i64, i64, i64) = (
                r.get("ol_i_id"),
                r.get("ol_supply_w_id"),
                r.get("ol_quantity"),
            );
            assert_eq!(line, (i, s, q));
        }
        // Payment by id, twice: the balance falls by each amount.
        let pay = c
            .prepare("CALL payment($1, $2, $3, $4, $5, $6, $7)")
            .await
            .unwrap();
        let mut balances = Vec::new();
        for _ in 0..2 {
            let r = c
                .query_one(&pay, &[&1i64, &2i64, &1i64, &2i64, &5i64, &"", &1234i64])
                .await
                .unwrap();
            assert_eq!(r.get::<_, i64>("c_id"), 5);
            let credit: String = r.get("c_credit");
            assert!(credit == "GC" || credit == "BC", "{credit}");
            balances.push(r.get::<_, i64>("c_balance"));
        }
        assert_eq!(balances[0] - balances[1], 1234);
        // Payment of warehouse 1 for a customer of warehouse 2 (the other
        // island), by last name: the name's customers are scanned where
        // they live. OrderStatus there finds the same customer and balance.
        let r = simple_rows(&c, "CALL payment(1, 2, 2, 3, 0, 'BARBARBAR', 1000)").await;
        let (c_id, bal) = (r[0][0].clone().unwrap(), r[0][1].clone().unwrap());
        let s = simple_rows(&c, "SELECT * FROM order_status(2, 3, 0, 'BARBARBAR')").await;
        assert!(!s.is_empty());
        assert_eq!(
            (s[0][0].clone().unwrap(), s[0][1].clone().unwrap()),
            (c_id, bal)
        );
        // A name no customer has is the caller's mistake: P0001.
        let e = c
            .query(
                &pay,
                &[&1i64, &2i64, &2i64, &3i64, &0i64, &"NOSUCH", &1000i64],
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), "P0001", "{e}");
        // Delivery: the oldest undelivered order of each district, 2101
        // (the first of the loaded ones without a carrier), then 2102.
        for want in ["2101", "2102"] {
            let d = simple_rows(&c, "CALL delivery(1, 3)").await;
            assert_eq!(d.len(), 10);
            for (i, r) in d.iter().enumerate() {
                assert_eq!(r[0], Some((i + 1).to_string()));
                assert_eq!(r[1].as_deref(), Some(want));
            }
        }
        // StockLevel: a count of distinct items, at most 20 orders' lines.
        let low: i64 = c
            .query_one("CALL stock_level($1, $2, $3)", &[&1i64, &1i64, &15i64])
            .await
            .unwrap()
            .get("low_stock");
        assert!((0..=300).contains(&low), "{low}");
        assert_eq!(
            simple_rows(&c, "CALL stock_level(2, 10, 20)").await.len(),
            1
        );
        // Wrong argument count or type: 42804, over both protocols; values
        // outside the spec's ranges: the procedure's P0001.
        let cases: &[(&str, &str)] = &[
            ("CALL new_order(1, 2)", "42804"),
            ("CALL new_order(1, 1, 1, 5, 1, 1)", "42804"),
            ("CALL payment(1, 1, 1, 1, 'x', '', 500)", "22P02"),
            ("CALL order_status(1, 1, 1, 2)", "42804"),
            ("CALL delivery(1)", "42804"),
            ("CALL stock_level(1, 1, 15.5)", "42804"),
            ("CALL delivery(3, 1)", "P0001"),
            ("CALL stock_level(1, 11, 15)", "P0001"),
            ("CALL payment(1, 1, 1, 1, 0, '', 500)", "P0001"),
            ("CALL payment(1, 1, 1, 1, 1, '', 50)", "P0001"),
            (
                "CALL new_order(1, 1, 1, ARRAY[1, 2], ARRAY[1, 1], ARRAY[1, 1])",
                "P0001",
            ),
            (
                "CALL new_order(1, 1, 1, ARRAY[1, 2, 3, 4, 5], ARRAY[1, 1, 1, 1, 9], \
                 ARRAY[1, 1, 1, 1, 1])",
                "P0001",
            ),
        ];
        for (sql, want) in cases {
            let e = c.simple_query(sql).await.unwrap_err();
            assert_eq!(code(&e), *want, "{sql}: {e}");
            let e = c.query(*sql, &[]).await.unwrap_err();
            assert_eq!(code(&e), *want, "{sql} (extended): {e}");
        }
        // None of that took an order id: the next is 3004.
        let row = c
            .query_one(&no, &[&1i64, &1i64, &7i64, &items, &supply, &qty])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>("o_id"), 3004);
    });
    server.shutdown().unwrap();
}

#[test]
fn micro_procedures_read_and_update_batches_of_keys() {
    let server = start(Builtin::Micro { rows: 1000 }, local());
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        // A key given twice is updated twice.
        let r = simple_rows(&c, "CALL micro_update(ARRAY[1, 2, 2, 999])").await;
        let got: Vec<(String, String)> = r
            .iter()
            .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
            .collect();
        let want = [("1", "1"), ("2", "1"), ("2", "2"), ("999", "1")];
        assert_eq!(got, want.map(|(k, v)| (k.to_string(), v.to_string())));
        let keys: Vec<i64> = vec![2, 3, 999];
        let rows = c
            .query("SELECT * FROM micro_read($1)", &[&keys])
            .await
            .unwrap();
        let got: Vec<(i64, i64)> = rows.iter().map(|r| (r.get("key"), r.get("val"))).collect();
        assert_eq!(got, [(2, 2), (3, 0), (999, 1)]);
        // A key past the table: the procedure's rollback, nothing applied.
        let e = c
            .query("CALL micro_update($1)", &[&vec![5i64, 1000]])
            .await
            .unwrap_err();
        assert_eq!(code(&e), "P0001", "{e}");
        assert_eq!(
            simple_rows(&c, "CALL micro_read(ARRAY[5])").await[0][1].as_deref(),
            Some("0")
        );
        let e = c.simple_query("CALL micro_read(5)").await.unwrap_err();
        assert_eq!(code(&e), "42804", "{e}");
    });
    server.shutdown().unwrap();
}

/// `islands ARGS`, which must succeed; its standard output.
fn islands_ok(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "islands {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The figure before " committed" in `islands bench --connect`'s report.
fn committed(report: &str) -> u64 {
    report
        .split(" committed")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn bench_connect_drives_tpcc_and_the_stopped_server_passes_tpcc_check() {
    let dir = temp("tpcc");
    let d = dir.to_str().unwrap();
    let (mut child, addr, ready) = spawn_serve(&[
        "--init",
        "tpcc",
        "--warehouses",
        "2",
        "--islands",
        "2",
        "--workers-per-island",
        "1",
        "--data-dir",
        d,
    ]);
    assert!(ready.contains("tpcc 2 warehouse(s)"), "{ready}");
    let text = islands_ok(&[
        "bench",
        "--connect",
        &addr.to_string(),
        "--connections",
        "4",
        "--pipeline",
        "2",
        "--warmup",
        "0.2",
        "--duration",
        "1",
        "tpcc",
        "--warehouses",
        "2",
    ]);
    assert!(committed(&text) > 0, "{text}");
    assert!(text.contains("errors      none"), "{text}");
    // Every kind ran; only NewOrder rolls back (a Payment by last name of
    // a remote customer finds them on their island).
    for name in [
        "NewOrder",
        "Payment",
        "OrderStatus",
        "Delivery",
        "StockLevel",
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line: {text}"));
        if name != "NewOrder" {
            assert!(!line.contains("rolled back"), "{line}");
        }
    }
    // Without --warehouses the load generator does not guess.
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["bench", "--connect", &addr.to_string(), "tpcc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--warehouses"));
    sigterm(&mut child);
    let out = child.take().wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The stopped server's data directory passes TPC-C's consistency
    // conditions, through both commands that check it.
    for args in [
        &["tpcc", "check", "--warehouses", "2", "--log-dir", d][..],
        &["check", "--log-dir", d][..],
    ] {
        let text = islands_ok(args);
        assert!(
            text.contains("consistency conditions 1-10 and 12 hold for 2 warehouse(s)"),
            "{text}"
        );
    }
    // A restart serves the same database: served.toml says what it is.
    let (mut child, addr, ready) = spawn_serve(&["--islands", "2", "--data-dir", d]);
    assert!(ready.contains("tpcc 2 warehouse(s)"), "{ready}");
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        let r = simple_rows(&c, "CALL stock_level(2, 1, 20)").await;
        assert_eq!(r.len(), 1);
    });
    sigterm(&mut child);
    assert_eq!(child.take().wait().unwrap().code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_connect_drives_micro_on_the_servers_sites() {
    let dir = temp("micro-bench");
    let d = dir.to_str().unwrap();
    let (mut child, addr, _) = spawn_serve(&[
        "--init",
        "micro",
        "--rows",
        "1000",
        "--islands",
        "2",
        "--data-dir",
        d,
    ]);
    let text = islands_ok(&[
        "bench",
        "--connect",
        &addr.to_string(),
        "--connections",
        "4",
        "--pipeline",
        "2",
        "--warmup",
        "0.2",
        "--duration",
        "1",
        "micro",
        "--rows",
        "1000",
        "--n",
        "4",
        "--update",
        "--multisite",
        "50",
    ]);
    // Its sites are the server's (SHOW islands): 2, one per island.
    assert!(
        text.contains(
            "micro (1000 rows in 2 sites, 4 keys per call, CALL micro_update, 50% multisite"
        ),
        "{text}"
    );
    assert!(committed(&text) > 0, "{text}");
    assert!(text.contains("errors      none"), "{text}");
    for kind in ["local", "multisite"] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(kind) && l.contains("txn/s")),
            "{kind}: {text}"
        );
    }
    sigterm(&mut child);
    assert_eq!(child.take().wait().unwrap().code(), Some(0));
    let text = islands_ok(&["check", "--log-dir", d]);
    assert!(text.contains("micro: 1000 rows present"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn islands_check_verifies_each_served_data_set_of_a_stopped_server() {
    // Each data set, its calls, and what the check says it verified.
    let sets: [(&[&str], &[&str], &str); 4] = [
        (
            &["--init", "tpcb", "--scale", "2", "--islands", "2"],
            &[
                "CALL tpcb(1, 1, 1, 5)",
                "CALL tpcb(150000, 3, 1, -7)",
                "CALL tpcb(7, 12, 2, 40)",
            ],
            "consistent: tpcb scale 2: 2 branches, 20 tellers and 200000 accounts present; the \
             balances of accounts, tellers and branches and the 3 history deltas all sum to 38",
        ),
        (
            &["--init", "bank", "--accounts", "64", "--islands", "2"],
            &["CALL transfer(1, 0, 1, 300)", "CALL transfer(2, 5, 0, 20)"],
            "consistent: bank: 64 accounts, none negative, summing to 64000; each is its opening \
             balance plus what the 2 recorded transfers moved",
        ),
        (
            &["--init", "ycsb", "--rows", "1000"],
            &["CALL ycsb_rmw(3)", "CALL ycsb_update(999, 5)"],
            "consistent: ycsb: 1000 rows present, each with its check word",
        ),
        (
            &["--init", "micro", "--rows", "1000", "--islands", "2"],
            &["CALL micro_update(ARRAY[1, 2, 900])"],
            "consistent: micro: 1000 rows present, each with its check word",
        ),
    ];
    for (init, calls, want) in sets {
        let dir = temp(&format!("check-{}", init[1]));
        let d = dir.to_str().unwrap();
        let mut args = init.to_vec();
        args.extend(["--data-dir", d]);
        let (mut child, addr, _) = spawn_serve(&args);
        runtime().block_on(async {
            let c = connect(addr).await.unwrap();
            for call in calls {
                c.simple_query(call).await.unwrap();
            }
        });
        sigterm(&mut child);
        assert_eq!(child.take().wait().unwrap().code(), Some(0));
        let text = islands_ok(&["check", "--log-dir", d]);
        assert!(text.contains(want), "{init:?}: {text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A catalog whose procedure `conflict` always aborts on a conflict.
pub(super) fn conflicting() -> Catalog {
    let mut c = Catalog::new();
    c.table(
        TableDef::new("t", &[("v", ColType::I64)], 16, PrimaryKind::Hash),
        Partition::BySite(|_| 0),
    );
    c.procedure(
        ProcDef::new("conflict", |_, _, _| {
            Box::pin(async { Err(Abort::Conflict(AbortReason::LockConflict)) })
        })
        .param("x", Type::Int),
    )
    .unwrap();
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
    c
}

#[test]
fn errors_carry_their_sqlstates_and_the_connection_goes_on() {
    for threads in [1, 3] {
        errors_carry_their_sqlstates_and_the_connection_goes_on_on(threads);
    }
}

fn errors_carry_their_sqlstates_and_the_connection_goes_on_on(threads: usize) {
    let db = open(conflicting(), None, None);
    let server = serve(db, on_threads(threads)).unwrap();
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        let cases: &[(&str, &str)] = &[
            ("CALL conflict(1)", "40001"),
            ("CALL nothing(1)", "42883"),
            ("CALL echo(1)", "42804"),
            ("CALL echo('a', 1.5, 'x')", "22P02"),
            ("CALL echo('a'::text, 1.5, 'x')", "42804"),
            ("CALL echo(1, 2", "42601"),
            ("DELETE FROM t", "0A000"),
            ("SELECT 1 +", "42601"),
            ("SHOW tables", "42704"),
            ("SELECT * FROM t", "0A000"),
            ("CALL echo('x', 1, 'y')", "22P02"),
        ];
        for (sql, want) in cases {
            let e = c.simple_query(sql).await.unwrap_err();
            assert_eq!(code(&e), *want, "{sql}: {e}");
            // The same over the extended protocol (Parse or Execute fails).
            let e = c.query(*sql, &[]).await.unwrap_err();
            assert_eq!(code(&e), *want, "{sql} (extended): {e}");
            // The connection is still usable.
            assert_eq!(simple_one(&c, "CALL echo(1, 2, 'ok')").await, "1");
        }
        // Wrong arguments are described in PostgreSQL's type names.
        let message = |e: tokio_postgres::Error| e.as_db_error().unwrap().message().to_string();
        let e = c.simple_query("CALL echo(1)").await.unwrap_err();
        assert!(
            message(e).contains("echo(i int8, f float8, s text) takes 3"),
            "the signature"
        );
        let e = c
            .simple_query("CALL echo('a'::text, 1.5, 'x')")
            .await
            .unwrap_err();
        let m = message(e);
        assert!(
            m.contains("argument 1 (i)") && m.contains("is text \"a\"; the parameter is int8"),
            "{m}"
        );
        // An untyped literal that does not parse as its parameter's type.
        let e = c
            .simple_query("CALL echo('a', 1.5, 'x')")
            .await
            .unwrap_err();
        let m = message(e);
        assert!(
            m.contains("argument 1 (i)")
                && m.contains("invalid input syntax for type bigint: \"a\""),
            "{m}"
        );
        // A float parameter takes an integer literal; strings escape quotes.
        let r = c.query_one("CALL echo(-3, 2, 'it''s')", &[]).await.unwrap();
        assert_eq!(r.get::<_, f64>(1), 2.0);
        assert_eq!(r.get::<_, &str>(2), "it's");
        // Text and binary parameters of all three types.
        let r = c
            .query_one("CALL echo($1, $2, $3)", &[&5i64, &0.25f64, &"é"])
            .await
            .unwrap();
        assert_eq!(
            (r.get::<_, i64>(0), r.get::<_, f64>(1), r.get::<_, &str>(2)),
            (5, 0.25, "é")
        );
        // A null argument is a wrong argument.
        let e = c
            .query("CALL echo($1, 1, 'x')", &[&None::<i64>])
            .await
            .unwrap_err();
        assert_eq!(code(&e), "42804");
        // An empty query is answered as PostgreSQL answers it (EmptyQueryResponse,
        // which tokio-postgres reports as a command of 0 rows).
        let msgs = c.simple_query("  ;  ").await.unwrap();
        assert!(
            matches!(msgs[..], [SimpleQueryMessage::CommandComplete(0)]),
            "{msgs:?}"
        );
    });
    server.shutdown().unwrap();
}

#[test]
fn bad_protocol_input_is_answered_never_panics_the_server() {
    for threads in [1, 3] {
        bad_protocol_input_is_answered_never_panics_the_server_on(threads);
    }
}

fn bad_protocol_input_is_answered_never_panics_the_server_on(threads: usize) {
    let opts = ServerOptions {
        max_message_bytes: 64 * 1024,
        ..on_threads(threads)
    };
    let server = start(Builtin::Tpcb { scale: 1 }, opts);
    let addr = server.local_addr();
    // A parameter of the wrong binary length: 22P03, then Sync, and the
    // connection goes on.
    let mut r = Raw::connect(addr);
    let mut parse = b"\0CALL tpcb_balance($1)\0".to_vec();
    parse.extend_from_slice(&1u16.to_be_bytes());
    parse.extend_from_slice(&20u32.to_be_bytes()); // int8
    r.send(b'P', &parse);
    let mut bind = b"\0\0".to_vec();
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&1u16.to_be_bytes()); // binary
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&3u32.to_be_bytes());
    bind.extend_from_slice(&[0, 0, 1]);
    bind.extend_from_slice(&0u16.to_be_bytes());
    r.send(b'B', &bind);
    r.send(b'E', b"\0\0\0\0\0");
    r.send(b'S', b"");
    let msgs = r.until_ready();
    assert_eq!(errors(&msgs), vec!["22P03"], "{msgs:?}");
    // Format codes that do not match the parameters.
    let mut bind = b"\0\0".to_vec();
    bind.extend_from_slice(&2u16.to_be_bytes());
    bind.extend_from_slice(&[0, 1, 0, 1]);
    bind.extend_from_slice(&1u16.to_be_bytes());
    bind.extend_from_slice(&1u32.to_be_bytes());
    bind.extend_from_slice(b"1");
    bind.extend_from_slice(&0u16.to_be_bytes());
    r.send(b'P', &parse);
    r.send(b'B', &bind);
    r.send(b'E', b"\0\0\0\0\0");
    r.send(b'S', b"");
    let msgs = r.until_ready();
    assert!(!errors(&msgs).is_empty(), "{msgs:?}");
    let msgs = r.query("SELECT * FROM tpcb_balance(1)");
    assert!(
        errors(&msgs).is_empty() && msgs.iter().any(|m| m.0 == b'D'),
        "{msgs:?}"
    );
    // An empty query.
    let msgs = r.query("");
    assert!(msgs.iter().any(|m| m.0 == b'I'), "{msgs:?}");
    // A message over the limit: 54000 and the connection is closed, before
    // the server reads (or buffers) its body.
    let mut big = vec![b'Q'];
    big.extend_from_slice(&(1u32 << 30).to_be_bytes());
    r.s.write_all(&big).unwrap();
    let msgs = r.until_ready();
    assert_eq!(errors(&msgs), vec!["54000"], "{msgs:?}");
    assert_eq!(msgs.last().unwrap().0, b'!');
    // A message of an unknown type: a protocol violation, closed.
    let mut r = Raw::connect(addr);
    r.send(b'y', b"junk");
    let msgs = r.until_ready();
    assert_eq!(errors(&msgs), vec!["08P01"], "{msgs:?}");
    // Garbage in place of a startup message: closed, and the server goes on.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[0, 0, 0, 9, 1, 2, 3, 4, 5]).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let mut r = Raw::connect(addr);
    assert!(errors(&r.query("CALL tpcb_balance(2)")).is_empty());
    server.shutdown().unwrap();
}

/// The types of `msgs`, with each CommandComplete's tag after a `:`.
fn shape(msgs: &[(u8, String)]) -> Vec<String> {
    msgs.iter()
        .map(|(t, c)| match t {
            b'C' => format!("C:{c}"),
            t => (*t as char).to_string(),
        })
        .collect()
}

#[test]
fn extended_execute_describes_answers_and_suspends_at_max_rows() {
    let server = start(Builtin::Tpcb { scale: 1 }, on_threads(1));
    let mut r = Raw::connect(server.local_addr());
    let parse = |sql: &str| {
        let mut b = vec![0];
        b.extend_from_slice(sql.as_bytes());
        b.extend_from_slice(&[0, 0, 0]);
        b
    };
    // Bind of the unnamed statement, text parameters, text results.
    let bind = |params: &[&str]| {
        let mut b = vec![0, 0, 0, 0];
        b.extend_from_slice(&(params.len() as u16).to_be_bytes());
        for p in params {
            b.extend_from_slice(&(p.len() as u32).to_be_bytes());
            b.extend_from_slice(p.as_bytes());
        }
        b.extend_from_slice(&0u16.to_be_bytes());
        b
    };
    let execute = |max_rows: u32| {
        let mut b = vec![0];
        b.extend_from_slice(&max_rows.to_be_bytes());
        b
    };
    // pgbench's sequence for a prepared call: Bind, Describe portal,
    // Execute, Sync; a call's row and its tag with the count.
    r.send(b'P', &parse("CALL tpcb_balance($1)"));
    r.send(b'S', b"");
    assert_eq!(shape(&r.until_ready()), ["1", "Z"]);
    for aid in ["1", "2", "1"] {
        r.send(b'B', &bind(&[aid]));
        r.send(b'D', b"P\0");
        r.send(b'E', &execute(0));
        r.send(b'S', b"");
        assert_eq!(shape(&r.until_ready()), ["2", "T", "D", "C:CALL 1", "Z"]);
    }
    // Arguments not in placeholder order, and a literal among them.
    r.send(b'P', &parse("CALL tpcb($2, 1, 1, $1)"));
    r.send(b'B', &bind(&["7", "3"]));
    r.send(b'E', &execute(0));
    r.send(b'S', b"");
    assert_eq!(shape(&r.until_ready()), ["1", "2", "D", "C:CALL 1", "Z"]);
    // A statement without rows: NoData, its own tag.
    r.send(b'P', &parse("BEGIN"));
    r.send(b'B', &bind(&[]));
    r.send(b'D', b"P\0");
    r.send(b'E', &execute(0));
    r.send(b'S', b"");
    assert_eq!(shape(&r.until_ready()), ["1", "2", "n", "C:BEGIN", "Z"]);
    // More rows than the client asks for: the portal is suspended and the
    // next Execute sends the rest.
    let all = r.query("SHOW procedures");
    let rows = all.iter().filter(|m| m.0 == b'D').count();
    assert!(rows >= 2, "{all:?}");
    r.send(b'P', &parse("SHOW procedures"));
    r.send(b'B', &bind(&[]));
    r.send(b'E', &execute(1));
    r.send(b'E', &execute(0));
    r.send(b'S', b"");
    let mut want = ["1", "2", "D", "s"].map(String::from).to_vec();
    want.extend((1..rows).map(|_| "D".to_string()));
    want.push(format!("C:SHOW {}", rows - 1));
    want.push("Z".into());
    assert_eq!(shape(&r.until_ready()), want);
    // Exactly as many rows as asked for: suspended too, as PostgreSQL does.
    r.send(b'P', &parse("CALL tpcb_balance($1)"));
    r.send(b'B', &bind(&["1"]));
    r.send(b'E', &execute(1));
    r.send(b'S', b"");
    assert_eq!(shape(&r.until_ready()), ["1", "2", "D", "s", "Z"]);
    server.shutdown().unwrap();
}

#[test]
fn limits_refuse_connections_and_close_idle_ones() {
    for threads in [1, 3] {
        limits_refuse_connections_and_close_idle_ones_on(threads);
    }
}

fn limits_refuse_connections_and_close_idle_ones_on(threads: usize) {
    let opts = ServerOptions {
        max_connections: 2,
        idle_timeout: Some(Duration::from_millis(600)),
        ..on_threads(threads)
    };
    let server = start(Builtin::Tpcb { scale: 1 }, opts);
    let addr = server.local_addr();
    runtime().block_on(async {
        let a = connect(addr).await.unwrap();
        let _b = connect(addr).await.unwrap();
        let e = connect(addr).await.unwrap_err();
        assert_eq!(code(&e), "53300");
        assert_eq!(simple_one(&a, "CALL tpcb_balance(1)").await, "0");
        // Idle past the timeout: closed (the next query fails).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(a.simple_query("CALL tpcb_balance(1)").await.is_err());
        // Both slots are free again.
        let c = connect(addr).await.unwrap();
        assert_eq!(simple_one(&c, "CALL tpcb_balance(1)").await, "0");
    });
    // A client that sends and never reads: once the server's answers fill
    // the socket, its writes stall, and after the idle timeout the server
    // closes the connection (the client's writes then fail) while others go on.
    let mut stalled = Raw::connect(addr);
    let writer = std::thread::spawn(move || {
        let mut q = b"SHOW procedures\0".to_vec();
        let mut m = vec![b'Q'];
        m.extend_from_slice(&((q.len() + 4) as u32).to_be_bytes());
        m.append(&mut q);
        // Bounded writes: a write that times out (both sides' buffers full)
        // is tried again; one that fails means the server closed.
        stalled
            .s
            .set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let t = Instant::now();
        let mut at = 0;
        while t.elapsed() < Duration::from_secs(30) {
            match stalled.s.write(&m[at..]) {
                Ok(n) => at = (at + n) % m.len(),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return Some(t.elapsed()),
            }
        }
        None
    });
    let mut other = Raw::connect(addr);
    assert!(errors(&other.query("CALL tpcb_balance(1)")).is_empty());
    let closed = writer.join().unwrap();
    assert!(
        closed.is_some(),
        "a client that never reads kept its connection for 30 s"
    );
    // A non-loopback address without a password is refused.
    let db = open(conflicting(), None, None);
    let e = serve(
        db,
        ServerOptions {
            listen: "0.0.0.0:0".parse().unwrap(),
            ..ServerOptions::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("requires a password"), "{e}");
    server.shutdown().unwrap();
}

#[test]
fn a_password_is_required_when_one_is_set() {
    for threads in [1, 3] {
        a_password_is_required_when_one_is_set_on(threads);
    }
}

fn a_password_is_required_when_one_is_set_on(threads: usize) {
    let opts = ServerOptions {
        password: Some("s3cret".into()),
        ..on_threads(threads)
    };
    let server = start(Builtin::Tpcb { scale: 1 }, opts);
    let addr = server.local_addr();
    runtime().block_on(async {
        let url = |pw: &str| {
            format!(
                "host=127.0.0.1 port={} user=u dbname=d password={pw}",
                addr.port()
            )
        };
        let e = tokio_postgres::connect(&url("wrong"), NoTls)
            .await
            .err()
            .expect("a wrong password is refused");
        assert_eq!(code(&e), "28P01");
        let (c, conn) = tokio_postgres::connect(&url("s3cret"), NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        assert_eq!(simple_one(&c, "CALL tpcb_balance(3)").await, "0");
    });
    server.shutdown().unwrap();
}

#[test]
fn a_hundred_concurrent_connections_all_commit() {
    for threads in [1, 3] {
        a_hundred_concurrent_connections_all_commit_on(threads);
    }
}

fn a_hundred_concurrent_connections_all_commit_on(threads: usize) {
    let opts = ServerOptions {
        max_connections: 128,
        ..on_threads(threads)
    };
    let server = start(Builtin::Tpcb { scale: 2 }, opts);
    let addr = server.local_addr();
    const CALLS: i64 = 10;
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for k in 0..100i64 {
            tasks.push(tokio::spawn(async move {
                let c = connect(addr).await.unwrap();
                let st = c.prepare("CALL tpcb($1, $2, $3, 1)").await.unwrap();
                // Account k+1, a teller and branch of either branch: some
                // calls are distributed, all conflict on two branch rows.
                for i in 0..CALLS {
                    let (tid, bid) = (1 + (k + i) % 20, 1 + (k + i) % 2);
                    c.query(&st, &[&(k + 1), &tid, &bid]).await.unwrap();
                }
                c
            }));
        }
        let mut clients = Vec::new();
        for t in tasks {
            clients.push(t.await.unwrap());
        }
        assert_eq!(server.connections(), 100);
        // The island's executors counted the 1000 commits, each publishing
        // its count every 256 (2 executors: at most 2 × 255 behind).
        let stats = clients[0].simple_query("SHOW stats").await.unwrap();
        let island: i64 = stats
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(r)
                    if r.get(0) == Some("island-0") && r.get(1) == Some("committed") =>
                {
                    r.get(2).and_then(|v| v.parse().ok())
                }
                _ => None,
            })
            .expect("island-0 committed in SHOW stats");
        assert!((1000 - 2 * 255..=1000).contains(&island), "{island}");
        for (k, c) in clients.iter().enumerate() {
            let b = c
                .query_one("CALL tpcb_balance($1)", &[&(k as i64 + 1)])
                .await
                .unwrap();
            assert_eq!(b.get::<_, i64>(0), CALLS);
        }
    });
    server.shutdown().unwrap();
}

pub(super) fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("islands-serve-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn shutdown_answers_calls_in_flight_and_keeps_what_it_acknowledged() {
    for threads in [1, 3] {
        shutdown_answers_calls_in_flight_and_keeps_what_it_acknowledged_on(threads);
    }
}

fn shutdown_answers_calls_in_flight_and_keeps_what_it_acknowledged_on(threads: usize) {
    let dir = temp("shutdown");
    let b = Builtin::Ycsb { rows: 4096 };
    let server = serve(open(b.catalog(), Some(b), Some(&dir)), on_threads(threads)).unwrap();
    let addr = server.local_addr();
    let rt = runtime();
    let acked = rt.block_on(async {
        let mut tasks = Vec::new();
        for k in 0..16i64 {
            tasks.push(tokio::spawn(async move {
                let c = Arc::new(connect(addr).await.unwrap());
                let st = c.prepare("CALL ycsb_update($1, $2)").await.unwrap();
                let mut acked = Vec::new();
                // Calls pipelined four at a time, each on its own key.
                let mut v = 1i64;
                let outcome = 'run: loop {
                    let mut futs = Vec::new();
                    for j in 0..4i64 {
                        let key = k * 256 + (v + j) % 256;
                        let (c, st) = (Arc::clone(&c), st.clone());
                        let val = 1_000_000 + v + j;
                        futs.push(async move { (key, val, c.execute(&st, &[&key, &val]).await) });
                    }
                    for (key, val, r) in futures::future::join_all(futs).await {
                        match r {
                            Ok(_) => acked.push((key, val)),
                            Err(e) => break 'run code(&e),
                        }
                    }
                    v += 4;
                };
                (acked, outcome)
            }));
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        // The 16 connections went to every thread: calls are in flight on
        // each when the server stops.
        let per = server.connections_per_thread();
        assert_eq!(per.len(), threads);
        assert!(per.iter().all(|&n| n >= 16 / threads as u64), "{per:?}");
        let t = Instant::now();
        let stopper = std::thread::spawn(move || server.shutdown());
        let mut all = Vec::new();
        for t in tasks {
            let (acked, end) = tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .unwrap()
                .unwrap();
            // Each client hears 57P01, or that its connection closed.
            assert!(
                end == "57P01" || end.contains("closed"),
                "a call in flight ended with {end}"
            );
            all.extend(acked);
        }
        stopper.join().unwrap().unwrap();
        assert!(t.elapsed() < Duration::from_secs(20));
        all
    });
    assert!(
        acked.len() > 16,
        "only {} calls were acknowledged",
        acked.len()
    );
    // Reopened, every acknowledged update is there (the last per key wins:
    // a key's calls ran one after another).
    let mut last = std::collections::HashMap::new();
    for (k, v) in acked {
        let e = last.entry(k).or_insert(v);
        *e = (*e).max(v);
    }
    let db = open(b.catalog(), Some(b), Some(&dir));
    let c = db.client();
    for (k, v) in last {
        let rows = c.call("ycsb_read", &[Value::Int(k)]).unwrap();
        let got = rows[0][0].as_int().unwrap();
        assert!(got >= v, "key {k}: acknowledged {v}, recovered {got}");
    }
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child server, killed if the test fails before it stops it.
pub(super) struct Served(Option<Child>);

impl Served {
    pub(super) fn new(c: Child) -> Served {
        Served(Some(c))
    }

    /// A place holder while a child is restarted.
    pub(super) fn none() -> Served {
        Served(None)
    }

    pub(super) fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }

    pub(super) fn take(mut self) -> Child {
        self.0.take().expect("running")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `islands serve …` as a child, the address its ready line names, and the line.
pub(super) fn spawn_serve(args: &[&str]) -> (Served, SocketAddr, String) {
    spawn_serve_env(args, &[])
}

/// [`spawn_serve`] with environment variables set.
pub(super) fn spawn_serve_env(args: &[&str], env: &[(&str, &str)]) -> (Served, SocketAddr, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_islands"))
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--no-pin"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("ready on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("no ready line: {line:?} {err}")
        });
    (Served(Some(child)), addr, line)
}

pub(super) fn sigterm(child: &mut Served) {
    let child = child.child();
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn serve_recovers_acknowledged_calls_after_sigkill_and_stops_cleanly_on_sigterm() {
    let dir = temp("kill");
    let d = dir.to_str().unwrap();
    let (mut child, addr, _) = spawn_serve(&["--init", "tpcb", "--scale", "1", "--data-dir", d]);
    // 8 clients, each on its own account, delta 1 per call. The kill comes
    // once 64 calls are acknowledged (not after a fixed time, which a loaded
    // machine may spend connecting), or after 20 s.
    let total = Arc::new(AtomicU64::new(0));
    let acked: Vec<i64> = runtime().block_on(async {
        let mut tasks = Vec::new();
        for k in 1..=8i64 {
            let total = Arc::clone(&total);
            tasks.push(tokio::spawn(async move {
                let c = connect(addr).await.unwrap();
                let mut n = 0i64;
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(30) {
                    let tid = 1 + k % 10;
                    match c.execute("CALL tpcb($1, $2, 1, 1)", &[&k, &tid]).await {
                        Ok(_) => {
                            n += 1;
                            total.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => break,
                    }
                }
                n
            }));
        }
        let t = Instant::now();
        while total.load(Ordering::Relaxed) < 64 && t.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.child().kill().unwrap(); // SIGKILL
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let _ = child.child().wait();
    assert!(acked.iter().sum::<i64>() > 8, "{acked:?}");
    // --init on what is now a non-empty directory is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args([
            "serve",
            "--init",
            "tpcb",
            "--data-dir",
            d,
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));
    // Restart without --init: every acknowledged call is there; at most the
    // one in flight at the kill is there too.
    let (mut child, addr, ready) = spawn_serve(&["--data-dir", d]);
    assert!(!ready.contains(" 0 log records"), "{ready}");
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        for (i, n) in acked.iter().enumerate() {
            let k = i as i64 + 1;
            let b: i64 = c
                .query_one("CALL tpcb_balance($1)", &[&k])
                .await
                .unwrap()
                .get(0);
            assert!(
                b == *n || b == *n + 1,
                "account {k}: {n} calls acknowledged, balance {b}"
            );
        }
    });
    // SIGTERM: exit 0 after a checkpoint; the next start replays no log.
    sigterm(&mut child);
    let out = child.take().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("stopped"), "{err}");
    let (mut child, _, ready) = spawn_serve(&["--data-dir", d]);
    assert!(ready.contains(" 0 log records"), "{ready}");
    sigterm(&mut child);
    let out = child.take().wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_refuses_what_it_cannot_serve() {
    let dir = temp("refuse");
    let d = dir.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_islands"))
            .arg("serve")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (c, e) = run(&["--data-dir", d, "--listen", "127.0.0.1:0"]);
    assert_eq!(c, Some(2));
    assert!(
        e.contains("holds no database") && e.contains("--init"),
        "{e}"
    );
    let (c, e) = run(&["--init", "tpcb", "--data-dir", d, "--listen", "0.0.0.0:0"]);
    assert_eq!(c, Some(2));
    assert!(e.contains("requires a password"), "{e}");
    // A start refused for its options leaves the directory as it was.
    assert!(
        std::fs::read_dir(&dir).map_or(true, |mut r| r.next().is_none()),
        "a refused --init wrote into {d}"
    );
    let (c, e) = run(&["--init", "nope", "--data-dir", d]);
    assert_eq!(c, Some(2));
    assert!(e.contains("tpcb, ycsb, tpcc, micro or bank"), "{e}");
    let (c, e) = run(&["--init", "tpcc", "--rows", "5", "--data-dir", d]);
    assert_eq!(c, Some(2));
    assert!(e.contains("--rows does not size --init tpcc"), "{e}");
    let (c, e) = run(&["--init", "tpcc", "--warehouses", "0", "--data-dir", d]);
    assert_eq!(c, Some(2));
    assert!(e.contains("outside"), "{e}");
    // TPC-C's warehouses are its sites: two islands need two of them.
    let (c, e) = run(&[
        "--init",
        "tpcc",
        "--islands",
        "2",
        "--data-dir",
        d,
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(c, Some(2));
    assert!(e.contains("2 islands but only 1 sites"), "{e}");
    let (c, e) = run(&["--init", "bank", "--rows", "5", "--data-dir", d]);
    assert_eq!(c, Some(2));
    assert!(e.contains("--rows does not size --init bank"), "{e}");
    let (c, e) = run(&["--init", "bank", "--accounts", "1", "--data-dir", d]);
    assert_eq!(c, Some(2));
    assert!(e.contains("outside"), "{e}");
    let (c, e) = run(&["--init", "tpcb", "--scale", "0", "--data-dir", d]);
    assert_eq!(c, Some(2));
    assert!(e.contains("outside"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn on_path(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn psql_and_pgbench_run_against_the_server() {
    if !on_path("psql") || !on_path("pgbench") {
        println!(
            "SKIPPED psql_and_pgbench_run_against_the_server: psql or pgbench is not on PATH \
             (apt-get install postgresql-client)"
        );
        return;
    }
    let server = start(Builtin::Tpcb { scale: 1 }, local());
    let port = server.local_addr().port().to_string();
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port, "-U", "x", "-d", "x", "-At"])
        .args(["-c", "CALL tpcb(1, 1, 1, 42)"])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    let script = temp("pgbench.sql");
    std::fs::write(
        &script,
        "\\set aid random(1, 100000)\n\\set tid random(1, 10)\n\\set delta random(-5000, 5000)\n\
         CALL tpcb(:aid, :tid, 1, :delta);\n",
    )
    .unwrap();
    for mode in ["simple", "prepared"] {
        let out = Command::new("pgbench")
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "x", "-n", "-T", "5"])
            .args(["-c", "8", "-j", "2", "-M", mode, "-f"])
            .arg(&script)
            .arg("x")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("number of failed transactions: 0 (0.000%)"),
            "{text}"
        );
        let processed = text
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        assert!(processed > 0, "{text}");
    }
    let _ = std::fs::remove_file(&script);
    server.shutdown().unwrap();
}

#[test]
fn bench_connect_drives_a_server_over_the_network() {
    let server = start(Builtin::Tpcb { scale: 1 }, local());
    let addr = server.local_addr().to_string();
    for extra in [&[][..], &["-S"][..]] {
        let mut args = vec!["bench", "--connect", &addr, "--connections", "4"];
        args.extend(["--pipeline", "2", "--warmup", "0.1", "--duration", "0.5"]);
        args.extend(["tpcb", "--scale", "1"]);
        args.extend(extra);
        let text = islands_ok(&args);
        assert!(text.contains("errors      none"), "{text}");
        assert!(text.contains("rollbacks   0 "), "{text}");
        assert!(committed(&text) > 0, "{text}");
    }
    // Without a server to drive, tpcb is refused with the reason.
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["bench", "tpcb"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--connect"));
    server.shutdown().unwrap();
}

#[test]
fn connections_spread_over_the_server_threads() {
    let server = start(Builtin::Tpcb { scale: 1 }, on_threads(3));
    let addr = server.local_addr();
    runtime().block_on(async {
        let mut clients = Vec::new();
        for _ in 0..7 {
            clients.push(connect(addr).await.unwrap());
        }
        // Each goes to the thread with the fewest: 3, 2 and 2.
        assert_eq!(server.connections_per_thread(), vec![3, 2, 2]);
        for (k, c) in clients.iter().enumerate() {
            let sql = format!("CALL tpcb({}, 1, 1, 1)", k + 1);
            assert_eq!(simple_one(c, &sql).await, "1");
        }
        let rows = simple_rows(&clients[0], "SHOW stats").await;
        let stat = |scope: &str, counter: &str| {
            rows.iter()
                .find(|r| r[0].as_deref() == Some(scope) && r[1].as_deref() == Some(counter))
                .and_then(|r| r[2].clone())
                .unwrap_or_else(|| panic!("no {scope} {counter} in {rows:?}"))
        };
        assert_eq!(stat("server-thread-0", "connections_open"), "3");
        assert_eq!(stat("server-thread-2", "connections_open"), "2");
        // Commits counted on every thread, summed.
        assert_eq!(stat("tpcb", "committed"), "7");
        // SHOW threads lists the three, each registered as a server thread.
        let mut names: Vec<String> = simple_rows(&clients[0], "SHOW threads")
            .await
            .into_iter()
            .filter(|r| r[1].as_deref() == Some("server"))
            .map(|r| r[0].clone().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec!["islands-server-0", "islands-server-1", "islands-server-2"]
        );
        // A thread whose connections closed takes the next ones.
        clients.truncate(3);
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.connections() != 3 {
            assert!(
                Instant::now() < deadline,
                "{:?}",
                server.connections_per_thread()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let per = server.connections_per_thread();
        clients.push(connect(addr).await.unwrap());
        let after = server.connections_per_thread();
        let least = per.iter().min().unwrap();
        let to = (0..3).find(|&t| per[t] == *least).unwrap();
        assert_eq!(after[to], per[to] + 1, "{per:?} -> {after:?}");
    });
    server.shutdown().unwrap();
}

/// The counters of [`counters`], with `bump(key, ms)`.
fn slow_bumps() -> Deployment {
    let (mut c, t) = counters();
    c.procedure(slow_bump(t)).unwrap();
    open_counters(c, t)
}

/// Sends a CancelRequest for process `pid` with `key` on a connection of
/// its own, which the server closes without an answer.
pub(super) fn cancel_raw(addr: SocketAddr, pid: i32, key: &[u8]) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut m = ((12 + key.len()) as u32).to_be_bytes().to_vec();
    m.extend_from_slice(&80_877_102u32.to_be_bytes());
    m.extend_from_slice(&pid.to_be_bytes());
    m.extend_from_slice(key);
    s.write_all(&m).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "a cancel request is not answered: {rest:?}"
    );
}

#[test]
fn a_cancel_request_rolls_back_the_call_in_flight_and_bad_keys_are_ignored() {
    let server = serve(slow_bumps(), on_threads(2)).unwrap();
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        let token = c.cancel_token();
        let cancel_soon = || async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            token.cancel_query(NoTls).await.unwrap();
        };
        // Canceled while its procedure runs: 57014, nothing of it stays,
        // and the connection goes on.
        let (r, ()) = tokio::join!(c.simple_query("CALL bump(1, 800)"), cancel_soon());
        assert_eq!(code(&r.unwrap_err()), "57014");
        assert_eq!(simple_one(&c, "CALL value(1)").await, "0");
        // The same over the extended protocol.
        let st = c.prepare("CALL bump($1, $2)").await.unwrap();
        let (r, ()) = tokio::join!(c.query(&st, &[&2i64, &800i64]), cancel_soon());
        assert_eq!(code(&r.unwrap_err()), "57014");
        assert_eq!(simple_one(&c, "CALL value(2)").await, "0");
    });
    // A cancel with a wrong key, or another connection's process id, is
    // ignored: the call commits.
    let mut r = Raw::connect(addr);
    let (pid, key) = r.key.clone().expect("BackendKeyData");
    let mut wrong = key.clone();
    wrong[0] ^= 1;
    r.send(b'Q', b"CALL bump(4, 400)\0");
    std::thread::sleep(Duration::from_millis(100));
    cancel_raw(addr, pid, &wrong);
    cancel_raw(addr, pid.wrapping_add(1000), &key);
    let msgs = r.until_ready();
    assert!(
        errors(&msgs).is_empty() && msgs.iter().any(|m| m.0 == b'D'),
        "{msgs:?}"
    );
    // A call that finished before the cancel came keeps its commit, and
    // the cancel (processed once the server closed its connection), come
    // between calls, cancels none after it.
    assert!(errors(&r.query("CALL bump(5, 0)")).is_empty());
    cancel_raw(addr, pid, &key);
    let msgs = r.query("CALL bump(5, 0)");
    assert!(errors(&msgs).is_empty(), "{msgs:?}");
    // Its own key cancels a call in flight.
    r.send(b'Q', b"CALL bump(4, 400)\0");
    std::thread::sleep(Duration::from_millis(100));
    cancel_raw(addr, pid, &key);
    assert_eq!(errors(&r.until_ready()), vec!["57014"]);
    let msgs = r.query("CALL value(4)");
    assert!(errors(&msgs).is_empty(), "{msgs:?}");
    server.shutdown().unwrap();
}
