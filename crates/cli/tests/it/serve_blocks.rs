//! Transaction blocks over the server: ReadyForQuery's status (`I`, `T`,
//! `E`), `25P02` after an error, `ROLLBACK` undoing calls and statements
//! on tables, a block waiting for another's row, and the idle in
//! transaction timeout releasing what a quiet client held.

use std::time::{Duration, Instant};

use islands::api::{Deployment, Options};
use islands::server::{serve, Server, ServerOptions};
use islands_workloads::served::{Builtin, BANK_INITIAL};

use super::raw::{bind_msg, errors, execute_msg, of, parse_msg, Raw};
use super::serve::{
    code, connect, local, runtime, sigterm, simple_one, spawn_serve, spec, temp, Served,
};

const ACCOUNTS: u64 = 64;

/// A bank of [`ACCOUNTS`] accounts served with `opts`; a block waits up
/// to 10 s for a row another holds (a loaded machine stays under it).
fn bank(opts: ServerOptions) -> Server {
    let b = Builtin::Bank { accounts: ACCOUNTS };
    let mut o = Options::new(spec(None));
    o.pin = false;
    o.deadlock_timeout = Duration::from_secs(10);
    let db = Deployment::open(o, b.catalog(), move |l| b.load(l)).unwrap();
    serve(db, opts).unwrap()
}

/// The status byte of the ReadyForQuery that ends `msgs`.
fn status(msgs: &[(u8, String)]) -> &str {
    match msgs.last() {
        Some((b'Z', s)) => s,
        m => panic!("no ReadyForQuery at the end: {m:?} in {msgs:?}"),
    }
}

fn balance_sql(account: i64) -> String {
    format!("SELECT balance FROM accounts WHERE id = {account}")
}

#[test]
fn ready_for_query_reports_the_block_and_an_aborted_block_refuses_all_but_its_end() {
    let server = bank(local());
    let mut r = Raw::connect(server.local_addr());
    let m = r.query("SELECT 1");
    assert_eq!(status(&m), "I");
    let m = r.query("BEGIN");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["BEGIN"], "T"), "{m:?}");
    let m = r.query("SELECT 1");
    assert_eq!(status(&m), "T");
    // An error inside the block: E, and every later statement 25P02.
    let m = r.query("CALL nope()");
    assert_eq!((errors(&m), status(&m)), (vec!["42883"], "E"), "{m:?}");
    for sql in [
        "SELECT 1",
        "SHOW server_version",
        "CALL bank_balance(1)",
        "BEGIN",
    ] {
        let m = r.query(sql);
        assert_eq!(
            (errors(&m), status(&m)),
            (vec!["25P02"], "E"),
            "{sql}: {m:?}"
        );
    }
    // COMMIT of a failed block rolls it back, as PostgreSQL answers it.
    let m = r.query("COMMIT");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["ROLLBACK"], "I"), "{m:?}");
    // BEGIN in a block, an ending outside one: a warning, the tag as usual.
    let m = r.query("BEGIN; BEGIN");
    assert_eq!(of(b'N', &m).len(), 1, "{m:?}");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["BEGIN", "BEGIN"], "T"));
    let m = r.query("ROLLBACK");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["ROLLBACK"], "I"), "{m:?}");
    for (sql, tag) in [
        ("COMMIT", "COMMIT"),
        ("ROLLBACK", "ROLLBACK"),
        ("END", "COMMIT"),
    ] {
        let m = r.query(sql);
        assert_eq!(of(b'N', &m).len(), 1, "{sql}: {m:?}");
        assert_eq!((of(b'C', &m), status(&m)), (vec![tag], "I"), "{sql}");
    }
    // Savepoints are refused, and inside a block that fails it.
    let m = r.query("BEGIN");
    assert_eq!(status(&m), "T", "{m:?}");
    let m = r.query("SAVEPOINT a");
    assert_eq!((errors(&m), status(&m)), (vec!["0A000"], "E"), "{m:?}");
    let m = r.query("ABORT");
    assert_eq!(status(&m), "I");
    // Other isolation levels are refused; serializable read write is taken.
    let m = r.query("BEGIN ISOLATION LEVEL READ COMMITTED");
    assert_eq!((errors(&m), status(&m)), (vec!["0A000"], "I"), "{m:?}");
    let m = r.query("START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE");
    assert_eq!(status(&m), "T", "{m:?}");
    let m = r.query("COMMIT");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["COMMIT"], "I"));

    // The extended protocol: the status after Sync; an error in a pipeline
    // inside a block makes it E.
    let ext = |r: &mut Raw, sql: &str| {
        r.send(b'P', &parse_msg("", sql));
        r.send(b'B', &bind_msg("", "", &[]));
        r.send(b'E', &execute_msg(""));
        r.send(b'S', &[]);
        r.until_ready()
    };
    let m = ext(&mut r, "BEGIN");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["BEGIN"], "T"), "{m:?}");
    let m = ext(&mut r, "CALL bank_balance(1)");
    assert_eq!(status(&m), "T", "{m:?}");
    let m = ext(&mut r, "CALL transfer(1, 1, 2, 1000000)");
    assert_eq!((errors(&m), status(&m)), (vec!["P0001"], "E"), "{m:?}");
    let m = ext(&mut r, "CALL bank_balance(1)");
    assert_eq!((errors(&m), status(&m)), (vec!["25P02"], "E"), "{m:?}");
    let m = ext(&mut r, "ROLLBACK");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["ROLLBACK"], "I"), "{m:?}");
    // A statement that does not parse inside a block fails it too.
    let m = ext(&mut r, "BEGIN");
    assert_eq!(status(&m), "T");
    let m = ext(&mut r, "SELEC 1");
    assert_eq!(status(&m), "E", "{m:?}");
    let m = ext(&mut r, "END");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["ROLLBACK"], "I"), "{m:?}");
    server.shutdown().unwrap();
}

/// The command tags, the errors' SQLSTATEs and the final status of `m`.
fn answered(m: &[(u8, String)]) -> (Vec<&str>, Vec<&str>, &str) {
    (of(b'C', m), errors(m), status(m))
}

/// The one DataRow of `sql` on `r`.
fn one_row(r: &mut Raw, sql: &str) -> String {
    let m = r.query(sql);
    assert!(errors(&m).is_empty(), "{sql}: {m:?}");
    of(b'D', &m).concat()
}

#[test]
fn a_refused_statement_fails_where_it_stands_and_a_syntax_error_runs_nothing() {
    let server = bank(local());
    let mut r = Raw::connect(server.local_addr());
    let bump = |id: i64| format!("UPDATE accounts SET balance = balance + 1 WHERE id = {id}");
    // BEGIN runs; the refused SAVEPOINT fails the block it opened.
    let m = r.query("BEGIN; SAVEPOINT a; SELECT 1");
    assert_eq!(answered(&m), (vec!["BEGIN"], vec!["0A000"], "E"), "{m:?}");
    assert_eq!(errors(&r.query("SELECT 1")), vec!["25P02"]);
    let m = r.query("ROLLBACK");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["ROLLBACK"], "I"));
    // In an open block, the statements before the refusal run in it, and
    // go with it.
    r.query("BEGIN");
    let m = r.query(&format!("{}; SAVEPOINT a", bump(1)));
    assert_eq!(
        answered(&m),
        (vec!["UPDATE 1"], vec!["0A000"], "E"),
        "{m:?}"
    );
    r.query("ROLLBACK");
    assert_eq!(one_row(&mut r, &balance_sql(1)), "1000");
    // Outside a block, PostgreSQL's implicit transaction would roll back
    // what comes before the refusal: it does not run.
    let m = r.query(&format!("{}; SAVEPOINT a", bump(1)));
    assert_eq!(answered(&m), (vec![], vec!["0A000"], "I"), "{m:?}");
    assert_eq!(one_row(&mut r, &balance_sql(1)), "1000");
    // What a COMMIT settled before it stays.
    let m = r.query(&format!(
        "BEGIN; {}; COMMIT; {}; SAVEPOINT a",
        bump(1),
        bump(2)
    ));
    assert_eq!(
        answered(&m),
        (vec!["BEGIN", "UPDATE 1", "COMMIT"], vec!["0A000"], "I"),
        "{m:?}"
    );
    assert_eq!(one_row(&mut r, &balance_sql(1)), "1001");
    assert_eq!(one_row(&mut r, &balance_sql(2)), "1000");
    // $n in a simple query is refused the same way.
    let m = r.query(&format!("BEGIN; {}; CALL bank_balance($1)", bump(2)));
    assert_eq!((errors(&m), status(&m)), (vec!["42P02"], "E"), "{m:?}");
    r.query("ROLLBACK");
    // A syntax error anywhere: none of the string runs, no block opens.
    let m = r.query(&format!("BEGIN; {}; SELEC 1", bump(2)));
    assert_eq!(answered(&m), (vec![], vec!["42601"], "I"), "{m:?}");
    assert_eq!(one_row(&mut r, &balance_sql(2)), "1000");
    server.shutdown().unwrap();
}

/// `SHOW stats`' value of `counter` for procedure `proc`.
fn proc_stat(r: &mut Raw, proc: &str, counter: &str) -> u64 {
    let m = r.query("SHOW stats");
    let want = format!("{proc}|{counter}|");
    let rows = of(b'D', &m);
    let row = rows
        .iter()
        .find(|row| row.starts_with(&want))
        .unwrap_or_else(|| panic!("{want}: {m:?}"));
    row[want.len()..].parse().unwrap()
}

#[test]
fn show_stats_counts_a_block_s_calls_as_the_block_ends() {
    let server = bank(local());
    let mut r = Raw::connect(server.local_addr());
    let count = |r: &mut Raw| {
        (
            proc_stat(r, "transfer", "committed"),
            proc_stat(r, "transfer", "rollbacks"),
        )
    };
    assert_eq!(count(&mut r), (0, 0));
    // Rolled back: never committed, counted as rolled back.
    r.query("BEGIN; CALL transfer(1, 1, 2, 10); CALL transfer(2, 2, 3, 10)");
    assert_eq!(count(&mut r), (0, 0));
    assert_eq!(status(&r.query("ROLLBACK")), "I");
    assert_eq!(count(&mut r), (0, 2));
    // Failed by an error: rolled back with it (SHOW is refused in the
    // failed block, 25P02, until its ROLLBACK).
    r.query("BEGIN; CALL transfer(3, 1, 2, 10)");
    assert_eq!(errors(&r.query("CALL nope()")), vec!["42883"]);
    r.query("ROLLBACK");
    assert_eq!(count(&mut r), (0, 3));
    // Committed: counted when the block commits.
    r.query("BEGIN; CALL transfer(4, 1, 2, 10)");
    assert_eq!(count(&mut r), (0, 3));
    assert_eq!(of(b'C', &r.query("COMMIT")), vec!["COMMIT"]);
    assert_eq!(count(&mut r), (1, 3));
    // Outside a block, at once.
    r.query("CALL transfer(5, 1, 2, 10)");
    assert_eq!(count(&mut r), (2, 3));
    server.shutdown().unwrap();
}

#[test]
fn rollback_undoes_calls_and_statements_and_commit_keeps_them() {
    let server = bank(local());
    let addr = server.local_addr();
    runtime().block_on(async {
        let mut c = connect(addr).await.unwrap();
        let (one, two) = (
            simple_one(&c, &balance_sql(1)).await,
            simple_one(&c, &balance_sql(2)).await,
        );
        assert_eq!((one.as_str(), two.as_str()), ("1000", "1000"));
        assert_eq!(BANK_INITIAL, 1000);
        // A transfer and an update, rolled back: nothing of either.
        c.batch_execute("BEGIN; CALL transfer(7, 1, 2, 100)")
            .await
            .unwrap();
        c.batch_execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
            .await
            .unwrap();
        assert_eq!(simple_one(&c, &balance_sql(1)).await, "901");
        c.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(simple_one(&c, &balance_sql(1)).await, "1000");
        assert_eq!(simple_one(&c, &balance_sql(2)).await, "1000");
        let e = c.batch_execute("CALL bank_transfer(7)").await.unwrap_err();
        assert_eq!(code(&e), "P0001", "{e}");
        // The same, committed: both there.
        c.batch_execute("BEGIN; CALL transfer(7, 1, 2, 100)")
            .await
            .unwrap();
        c.batch_execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1; COMMIT")
            .await
            .unwrap();
        assert_eq!(simple_one(&c, &balance_sql(1)).await, "901");
        assert_eq!(simple_one(&c, &balance_sql(2)).await, "1100");
        // tokio-postgres's transactions (the extended protocol): one
        // committed, one dropped (rolled back).
        let t = c.transaction().await.unwrap();
        t.execute(
            "UPDATE accounts SET balance = balance + $1 WHERE id = $2",
            &[&5i64, &3i64],
        )
        .await
        .unwrap();
        t.commit().await.unwrap();
        {
            let t = c.transaction().await.unwrap();
            t.execute(
                "UPDATE accounts SET balance = balance + $1 WHERE id = $2",
                &[&5i64, &4i64],
            )
            .await
            .unwrap();
            let row = t
                .query_one("SELECT balance FROM accounts WHERE id = $1", &[&4i64])
                .await
                .unwrap();
            assert_eq!(row.get::<_, i64>(0), 1005);
        }
        assert_eq!(simple_one(&c, &balance_sql(3)).await, "1005");
        assert_eq!(simple_one(&c, &balance_sql(4)).await, "1000");
    });
    server.shutdown().unwrap();
}

#[test]
fn a_block_waits_for_the_row_another_block_holds_until_it_commits() {
    let server = bank(local());
    let addr = server.local_addr();
    runtime().block_on(async {
        let c1 = connect(addr).await.unwrap();
        let c2 = connect(addr).await.unwrap();
        c1.batch_execute("BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = 5")
            .await
            .unwrap();
        c2.batch_execute("BEGIN").await.unwrap();
        let second = tokio::spawn(async move {
            c2.batch_execute("UPDATE accounts SET balance = balance + 10 WHERE id = 5")
                .await
                .map(|()| c2)
        });
        // The second waits: it has not answered while the first holds the row.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !second.is_finished(),
            "the second block did not wait for the row"
        );
        c1.batch_execute("COMMIT").await.unwrap();
        let c2 = second.await.unwrap().unwrap();
        c2.batch_execute("COMMIT").await.unwrap();
        assert_eq!(simple_one(&c1, &balance_sql(5)).await, "1011");
    });
    server.shutdown().unwrap();
}

/// Waits (up to 20 s) for the connection to end; returns its last messages.
fn until_closed(r: &mut Raw) -> Vec<(u8, String)> {
    let mut out = Vec::new();
    loop {
        let m = r.next();
        let end = m.0 == b'!';
        out.push(m);
        if end {
            return out;
        }
    }
}

#[test]
fn an_idle_block_is_ended_with_25p03_and_its_locks_released() {
    let server = bank(ServerOptions {
        idle_in_transaction_timeout: Some(Duration::from_secs(1)),
        ..local()
    });
    let addr = server.local_addr();
    let mut quiet = Raw::connect(addr);
    let m = quiet.query("BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = 7");
    assert_eq!(status(&m), "T", "{m:?}");
    let t = Instant::now();
    let m = until_closed(&mut quiet);
    assert_eq!(errors(&m), vec!["25P03"], "{m:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    // Its row is free at once, and its update rolled back.
    let mut other = Raw::connect(addr);
    let t = Instant::now();
    let m = other.query("UPDATE accounts SET balance = balance + 1 WHERE id = 7");
    assert_eq!(of(b'C', &m), vec!["UPDATE 1"], "{m:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let m = other.query(&balance_sql(7));
    assert_eq!(of(b'D', &m), vec!["1001"], "{m:?}");
    // Idle outside a block: not ended.
    std::thread::sleep(Duration::from_millis(1500));
    let m = other.query("SELECT 1");
    assert_eq!(status(&m), "I", "{m:?}");
    // A failed block is idle in a transaction too.
    let m = other.query("BEGIN; CALL nope()");
    assert_eq!(status(&m), "E", "{m:?}");
    let m = until_closed(&mut other);
    assert_eq!(errors(&m), vec!["25P03"], "{m:?}");
    server.shutdown().unwrap();

    // The session's setting replaces the server's.
    let server = bank(local());
    let mut r = Raw::connect(server.local_addr());
    let m = r.query("SET idle_in_transaction_session_timeout = '300ms'; BEGIN");
    assert_eq!(status(&m), "T", "{m:?}");
    let m = until_closed(&mut r);
    assert_eq!(errors(&m), vec!["25P03"], "{m:?}");
    server.shutdown().unwrap();
}

fn on_path(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Stops the served child with SIGTERM and runs `islands check` on its
/// data directory `d`, asserting both succeed; the check's report.
fn stop_and_check(mut child: Served, d: &str) -> String {
    sigterm(&mut child);
    assert!(child.take().wait().unwrap().success());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["check", "--log-dir", d])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// pgbench's built-in scripts, unchanged (BEGIN … END blocks of SQL on its
/// tables), in every query mode: no failed transaction, and the stopped
/// directory passes `islands check` (branch, teller and account sums agree
/// with the history).
#[test]
fn pgbench_builtin_scripts_run_unchanged_in_blocks() {
    if !on_path("pgbench") {
        println!(
            "SKIPPED pgbench_builtin_scripts_run_unchanged_in_blocks: pgbench is not on PATH \
             (apt-get install postgresql-client)"
        );
        return;
    }
    let dir = temp("blocks-pgbench");
    let d = dir.to_str().unwrap();
    let (child, addr, _) = spawn_serve(&["--init", "tpcb", "--scale", "1", "--data-dir", d]);
    let port = addr.port().to_string();
    for (script, mode) in [
        ("tpcb-like", "simple"),
        ("tpcb-like", "extended"),
        ("tpcb-like", "prepared"),
        ("select-only", "prepared"),
    ] {
        let out = std::process::Command::new("pgbench")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "x",
                "-n",
                "-b",
                script,
            ])
            .args(["-c", "4", "-j", "2", "-t", "100", "-M", mode, "x"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{script} {mode}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("number of transactions actually processed: 400/400")
                && text.contains("number of failed transactions: 0 (0.000%)"),
            "{script} {mode}: {text}"
        );
    }
    let text = stop_and_check(child, d);
    // 400 transactions in each tpcb-like mode, each one history row.
    assert!(text.contains("the 1200 history deltas"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGKILL with blocks in every state: after recovery a committed block is
/// there entirely, a rolled-back one and one still open are not there at
/// all, the total is conserved and `islands check` passes.
#[test]
fn after_sigkill_a_committed_block_is_there_whole_and_other_blocks_are_not() {
    let dir = temp("blocks-kill");
    let d = dir.to_str().unwrap();
    let init = ["--init", "bank", "--accounts", "64", "--durability", "sync"];
    let (mut child, addr, _) = spawn_serve(&[&init[..], &["--data-dir", d]].concat());
    // (block, transfer id, from, to, amount): A commits, B rolls back, C
    // stays open at the kill. The blocks touch accounts of their own: they
    // are open side by side, and one waiting for another's row would end
    // in a deadlock (40P01).
    let transfers = [
        ('A', 1, 1, 2, 100),
        ('A', 2, 3, 4, 50),
        ('B', 3, 5, 6, 70),
        ('B', 4, 7, 8, 30),
        ('C', 5, 9, 10, 40),
        ('C', 6, 11, 12, 20),
    ];
    let calls = |block: char| -> String {
        transfers
            .iter()
            .filter(|t| t.0 == block)
            .map(|(_, id, src, dst, amount)| {
                format!("CALL transfer({id}, {src}, {dst}, {amount});")
            })
            .collect()
    };
    let (mut a, mut b, mut c) = (Raw::connect(addr), Raw::connect(addr), Raw::connect(addr));
    for (r, block) in [(&mut a, 'A'), (&mut b, 'B'), (&mut c, 'C')] {
        let m = r.query("BEGIN");
        assert_eq!(status(&m), "T");
        let m = r.query(&calls(block));
        assert!(errors(&m).is_empty(), "{block}: {m:?}");
        assert_eq!(status(&m), "T");
    }
    let m = a.query("COMMIT");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["COMMIT"], "I"), "{m:?}");
    let m = b.query("ROLLBACK");
    assert_eq!((of(b'C', &m), status(&m)), (vec!["ROLLBACK"], "I"), "{m:?}");
    // C's block is open, its rows locked, when the server is killed.
    child.child().kill().unwrap(); // SIGKILL
    let _ = child.child().wait();
    drop((a, b, c));
    let (child, addr, _) = spawn_serve(&["--data-dir", d]);
    let mut r = Raw::connect(addr);
    let mut expect: Vec<i64> = vec![BANK_INITIAL; ACCOUNTS as usize];
    for (block, id, src, dst, amount) in transfers {
        let m = r.query(&format!("CALL bank_transfer({id})"));
        if block == 'A' {
            assert_eq!(
                of(b'D', &m),
                vec![format!("{src}|{dst}|{amount}")],
                "{id}: {m:?}"
            );
            expect[src as usize] -= amount;
            expect[dst as usize] += amount;
        } else {
            assert_eq!(
                errors(&m),
                vec!["P0001"],
                "transfer {id} of block {block}: {m:?}"
            );
        }
    }
    for (account, want) in expect.iter().enumerate() {
        assert_eq!(
            one_row(&mut r, &balance_sql(account as i64)),
            want.to_string(),
            "account {account}"
        );
    }
    let total = BANK_INITIAL * ACCOUNTS as i64;
    assert_eq!(
        one_row(&mut r, "CALL bank_total()"),
        format!("{total}|{ACCOUNTS}")
    );
    stop_and_check(child, d);
    let _ = std::fs::remove_dir_all(&dir);
}
