//! The server under hostile or careless clients: statements built to
//! exhaust the parser's stack or the server's memory, portals executed
//! twice, pipelines that ask for a flush, idle connections to the metrics
//! endpoint, and starts refused for their options.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use islands::api::{Deployment, ProcDef, Type, Value};
use islands::server::{serve, sql, Server, ServerOptions};

use super::raw::{bind_msg, execute_msg, message, parse_msg, Raw};
use super::serve::{local, temp};
use super::support::{self, add_one, open_counters, read};

/// Message types, with each CommandComplete's tag and each error's
/// SQLSTATE after a `:`.
fn shape(msgs: &[(u8, String)]) -> Vec<String> {
    msgs.iter()
        .map(|(t, c)| match t {
            b'C' | b'E' => format!("{}:{c}", *t as char),
            t => (*t as char).to_string(),
        })
        .collect()
}

/// Counters 0..16 at 0, and procedures over them: `bump(key)` adds 1 and
/// answers no rows; `slow(key, ms)` sleeps `ms` in its transaction and
/// answers the value; `value(key)` answers the value.
fn counters() -> Deployment {
    let (mut c, t) = support::counters();
    c.procedure(
        ProcDef::new("bump", move |tx, a, _out| {
            Box::pin(async move {
                add_one(tx, t, a.int(0) as u64).await?;
                Ok(())
            })
        })
        .param("key", Type::Int),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("slow", move |tx, a, out| {
            Box::pin(async move {
                let v = read(tx, t, a.int(0) as u64).await?;
                std::thread::sleep(Duration::from_millis(a.int(1) as u64));
                out.push(vec![Value::Int(v)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .param("ms", Type::Int)
        .column("v", Type::Int),
    )
    .unwrap();
    open_counters(c, t)
}

fn start(opts: ServerOptions) -> Server {
    serve(counters(), opts).unwrap()
}

/// The value of counter `key`, read over the simple protocol.
fn value(r: &mut Raw, key: u64) -> String {
    let sql = format!("SELECT * FROM value({key})");
    let mut b = sql.as_bytes().to_vec();
    b.push(0);
    r.send(b'Q', &b);
    // RowDescription, then the DataRow, read by hand for its one field.
    let mut h = [0u8; 5];
    let mut row = None;
    loop {
        r.s.read_exact(&mut h).unwrap();
        let len = u32::from_be_bytes(h[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        r.s.read_exact(&mut body).unwrap();
        match h[0] {
            b'D' => {
                let n = u32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
                row = Some(String::from_utf8_lossy(&body[6..6 + n]).to_string());
            }
            b'E' => panic!("{sql}: error"),
            b'Z' => return row.expect("a row"),
            _ => {}
        }
    }
}

#[test]
fn nested_arrays_past_the_limit_are_refused_with_54001_and_the_session_goes_on() {
    let server = start(local());
    let mut r = Raw::connect(server.local_addr());
    // 100,000 levels: far past any thread's stack for a recursive parser,
    // and within the 1 MiB message limit.
    let levels = 100_000;
    let deep = format!(
        "CALL bump({}1{})",
        "ARRAY[".repeat(levels),
        "]".repeat(levels)
    );
    assert_eq!(shape(&r.query(&deep)), ["E:54001", "Z"]);
    assert_eq!(shape(&r.query("CALL bump(1)")), ["C:CALL", "Z"]);
    assert_eq!(value(&mut r, 1), "1");
    server.shutdown().unwrap();
}

#[test]
fn a_portal_executed_twice_runs_its_statement_once() {
    let server = start(local());
    let mut r = Raw::connect(server.local_addr());
    // A call without result columns: the second Execute is refused
    // (55000), as PostgreSQL refuses to run a finished portal again.
    r.send(b'P', &parse_msg("b", "CALL bump($1)"));
    r.send(b'B', &bind_msg("p", "b", &["3"]));
    r.send(b'E', &execute_msg("p"));
    r.send(b'E', &execute_msg("p"));
    r.send(b'S', b"");
    assert_eq!(
        shape(&r.until_ready()),
        ["1", "2", "C:CALL", "E:55000", "Z"]
    );
    assert_eq!(value(&mut r, 3), "1");
    // A call with rows: the second Execute answers no more rows.
    r.send(b'P', &parse_msg("s", "CALL slow($1, 0)"));
    r.send(b'B', &bind_msg("q", "s", &["3"]));
    r.send(b'E', &execute_msg("q"));
    r.send(b'E', &execute_msg("q"));
    r.send(b'E', &execute_msg("q"));
    r.send(b'S', b"");
    assert_eq!(
        shape(&r.until_ready()),
        ["1", "2", "D", "C:CALL 1", "C:CALL 0", "C:CALL 0", "Z"]
    );
    // The named portal lives on after Sync, and still does not run again.
    r.send(b'E', &execute_msg("p"));
    r.send(b'S', b"");
    assert_eq!(shape(&r.until_ready()), ["E:55000", "Z"]);
    assert_eq!(value(&mut r, 3), "1");
    // A fresh Bind makes a fresh portal, which runs.
    r.send(b'B', &bind_msg("p", "b", &["3"]));
    r.send(b'E', &execute_msg("p"));
    r.send(b'S', b"");
    assert_eq!(shape(&r.until_ready()), ["2", "C:CALL", "Z"]);
    assert_eq!(value(&mut r, 3), "2");
    server.shutdown().unwrap();
}

#[test]
fn a_query_string_of_too_many_statements_is_refused_before_any_runs() {
    let server = start(local());
    let mut r = Raw::connect(server.local_addr());
    // As many as allowed: every one answered, in order.
    let full = "CALL bump(4);".repeat(sql::MAX_STATEMENTS);
    let msgs = r.query(&full);
    assert_eq!(msgs.len(), sql::MAX_STATEMENTS + 1, "{:?}", &msgs[..4]);
    assert!(msgs[..sql::MAX_STATEMENTS]
        .iter()
        .all(|m| m == &(b'C', "CALL".to_string())));
    assert_eq!(value(&mut r, 4), sql::MAX_STATEMENTS.to_string());
    // One more: refused whole, nothing of it runs.
    let over = format!("{full}CALL bump(4)");
    let answer = shape(&r.query(&over));
    assert_eq!(answer[..answer.len().min(3)], ["E:54000", "Z"]);
    assert_eq!(value(&mut r, 4), sql::MAX_STATEMENTS.to_string());
    // The 1 MiB query of the report: 95,000 SHOW stats.
    let stats = "SHOW stats;".repeat(95_000);
    assert_eq!(shape(&r.query(&stats)), ["E:54000", "Z"]);
    server.shutdown().unwrap();
}

#[test]
fn a_flush_sends_the_answers_before_a_slow_call_pipelined_after_it() {
    let server = start(local());
    let mut r = Raw::connect(server.local_addr());
    // One write: a quick call, Flush, a call of 3 s, Sync.
    let mut w = Vec::new();
    w.extend(message(b'P', &parse_msg("", "CALL value(5)")));
    w.extend(message(b'B', &bind_msg("", "", &[])));
    w.extend(message(b'E', &execute_msg("")));
    w.extend(message(b'H', b""));
    w.extend(message(b'P', &parse_msg("", "CALL slow(5, 3000)")));
    w.extend(message(b'B', &bind_msg("", "", &[])));
    w.extend(message(b'E', &execute_msg("")));
    w.extend(message(b'S', b""));
    let sent = Instant::now();
    r.s.write_all(&w).unwrap();
    let mut first = Vec::new();
    while first.last().map(|m: &(u8, String)| m.0) != Some(b'C') {
        first.push(r.next());
    }
    let flushed = sent.elapsed();
    assert_eq!(shape(&first), ["1", "2", "D", "C:CALL 1"]);
    let rest = r.until_ready();
    let done = sent.elapsed();
    assert_eq!(shape(&rest), ["1", "2", "D", "C:CALL 1", "Z"]);
    assert!(done >= Duration::from_millis(3000), "{done:?}");
    // The first answer did not wait for the slow call.
    assert!(
        flushed + Duration::from_millis(1500) < done,
        "answered after {flushed:?}, the slow call after {done:?}"
    );
    server.shutdown().unwrap();
}

/// The status line of a `GET /metrics` on `addr`.
fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.lines().next().unwrap_or("").to_string()
}

#[test]
fn idle_connections_do_not_starve_metrics_scrapes() {
    let server = start(ServerOptions {
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..local()
    });
    let m = server.metrics_addr().unwrap();
    assert_eq!(scrape(m), "HTTP/1.1 200 OK");
    // Twice as many idle connections as the endpoint keeps open: each
    // scrape after them is answered, within the head timeout they hold.
    let idle: Vec<TcpStream> = (0..32).map(|_| TcpStream::connect(m).unwrap()).collect();
    let t = Instant::now();
    for _ in 0..3 {
        assert_eq!(scrape(m), "HTTP/1.1 200 OK");
    }
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    drop(idle);
    server.shutdown().unwrap();
}

#[test]
fn a_start_refused_for_its_options_leaves_the_data_directory_untouched() {
    let dir = temp("hostile-refuse");
    let d = dir.to_str().unwrap();
    let run = |args: &[&str], password: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_islands"));
        c.arg("serve").args(args).env_remove("ISLANDS_PASSWORD");
        if let Some(p) = password {
            c.env("ISLANDS_PASSWORD", p);
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let untouched = || std::fs::read_dir(&dir).map_or(true, |mut r| r.next().is_none());
    let init = ["--init", "tpcb", "--data-dir", d, "--listen", "127.0.0.1:0"];
    let (c, e) = run(&init, Some(""));
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("the password is empty"), "{e}");
    assert!(untouched(), "an empty password wrote into {d}");
    let mut threads = init.to_vec();
    threads.extend(["--server-threads", "0"]);
    let (c, e) = run(&threads, None);
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("server threads"), "{e}");
    assert!(untouched(), "--server-threads 0 wrote into {d}");
    // An address in use.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (c, e) = run(
        &["--init", "tpcb", "--data-dir", d, "--listen", &addr],
        None,
    );
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("cannot listen on"), "{e}");
    assert!(untouched(), "an address in use wrote into {d}");
    let mut metrics = init.to_vec();
    metrics.extend(["--metrics", &addr]);
    let (c, e) = run(&metrics, None);
    assert_eq!(c, Some(2), "{e}");
    assert!(e.contains("cannot serve metrics on"), "{e}");
    assert!(untouched(), "a metrics address in use wrote into {d}");
    let _ = std::fs::remove_dir_all(&dir);
}
