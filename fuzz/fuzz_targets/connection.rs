//! Whole connections to one in-process server: each input is what one
//! client sends, before login (no startup message) or after a trust
//! login. The server must not panic (a panic hook aborts the process, so
//! a panic the server would catch is still a finding) and must answer a
//! fresh client's call within a bound after each input.
//!
//! The first input byte picks the start (bit 0: a valid startup message
//! and its answers first); the rest is written as one client's bytes.

#![no_main]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use islands::api::{Catalog, Deployment, Options, Partition, ProcDef, Type, Value};
use islands::deploy::{DeploySpec, Islands};
use islands::server::{serve, Server, ServerOptions};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::Abort;
use libfuzzer_sys::fuzz_target;

const COUNTERS: u64 = 16;

/// How long a fresh client may wait for its call's answer.
const ANSWER_BOUND: Duration = Duration::from_secs(10);

/// How long the fuzzed client waits for more of the server's answers.
const QUIET: Duration = Duration::from_millis(10);

/// The address of this process's server, started on first use and never
/// stopped: it lives in a static as long as the process (so the leak
/// checker sees it reachable).
fn server() -> SocketAddr {
    static SERVER: OnceLock<Mutex<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| Mutex::new(start()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .local_addr()
}

fn start() -> Server {
    // Any panic, on any thread, is a finding: abort before the server's
    // `catch_unwind` can turn it into a closed connection.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
    // Writes to a client that has gone must fail, not kill the process
    // (libFuzzer's `main` does not set SIGPIPE aside as Rust's does).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let mut catalog = Catalog::new();
    let counters = catalog.table(
        TableDef::new(
            "counters",
            &[("value", ColType::I64)],
            COUNTERS,
            PrimaryKind::Hash,
        ),
        Partition::BySite(|key| (key % 2) as u32),
    );
    catalog
        .procedure(
            ProcDef::new("bump", move |tx, args, out| {
                Box::pin(async move {
                    let key =
                        u64::try_from(args.int(0)).map_err(|_| Abort::User("no such counter"))?;
                    let h = tx
                        .get_for_update(counters, key)
                        .await?
                        .ok_or(Abort::User("no such counter"))?;
                    let v = tx.row(h).i64(Col(0)).wrapping_add(args.int(1));
                    tx.row_mut(h).set_i64(Col(0), v);
                    out.push(vec![Value::Int(v)]);
                    Ok(())
                })
            })
            .param("key", Type::Int)
            .param("by", Type::Int)
            .column("value", Type::Int)
            .home_by(0, counters),
        )
        .expect("the procedure bump");
    catalog
        .procedure(
            ProcDef::new("counter", move |tx, args, out| {
                Box::pin(async move {
                    let key =
                        u64::try_from(args.int(0)).map_err(|_| Abort::User("no such counter"))?;
                    let h = tx
                        .get(counters, key)
                        .await?
                        .ok_or(Abort::User("no such counter"))?;
                    out.push(vec![Value::Int(tx.row(h).i64(Col(0)))]);
                    Ok(())
                })
            })
            .param("key", Type::Int)
            .column("value", Type::Int)
            .home_by(0, counters),
        )
        .expect("the procedure counter");
    let mut spec = DeploySpec::new(Islands::Count(1));
    spec.workers_per_island = Some(1);
    spec.durability = "off".into();
    let mut opts = Options::new(spec);
    opts.pin = false;
    let db = Deployment::open(opts, catalog, |load| {
        for key in 0..COUNTERS {
            if load.owns(counters, key) {
                load.put(counters, key, |r| r.set_i64(Col(0), 0))?;
            }
        }
        Ok(())
    })
    .expect("a deployment");
    serve(
        db,
        ServerOptions {
            listen: "127.0.0.1:0".parse().expect("an address"),
            threads: Some(1),
            ..ServerOptions::default()
        },
    )
    .expect("a server")
}

/// A startup message of protocol 3.0 for user `fuzz`.
fn startup() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0fuzz\0database\0fuzz\0\0");
    let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

/// A simple-protocol Query.
fn query(sql: &str) -> Vec<u8> {
    let mut m = vec![b'Q'];
    m.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
    m.extend_from_slice(sql.as_bytes());
    m.push(0);
    m
}

/// Reads messages until one of type `want` (true) or the end of the
/// stream or `by` (false); an ErrorResponse (`E`) is returned as `Err`.
fn read_until(s: &mut TcpStream, want: u8, by: Instant) -> Result<bool, String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while got.len() >= 5 {
            let len = u32::from_be_bytes([got[1], got[2], got[3], got[4]]) as usize;
            if got.len() < 1 + len {
                break;
            }
            let ty = got[0];
            if ty == b'E' {
                return Err(String::from_utf8_lossy(&got[5..1 + len]).into_owned());
            }
            got.drain(..1 + len);
            if ty == want {
                return Ok(true);
            }
        }
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        s.set_read_timeout(Some(left)).expect("a read timeout");
        match s.read(&mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(false)
            }
            Err(_) => return Ok(false),
        }
    }
}

/// A fresh client logs in and calls; the server must answer in time.
fn probe(addr: SocketAddr) {
    let by = Instant::now() + ANSWER_BOUND;
    let mut s = TcpStream::connect(addr).expect("the server accepts a connection");
    s.set_nodelay(true).ok();
    s.write_all(&startup()).expect("a startup message written");
    match read_until(&mut s, b'Z', by) {
        Ok(true) => {}
        other => panic!("the server did not log a fresh client in: {other:?}"),
    }
    s.write_all(&query("SELECT * FROM counter(1)"))
        .expect("a query written");
    match read_until(&mut s, b'Z', by) {
        Ok(true) => {}
        other => panic!("the server did not answer a fresh client's call: {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let addr = server();
    let mut s = TcpStream::connect(addr).expect("the server accepts a connection");
    s.set_nodelay(true).ok();
    if head & 1 == 1 {
        s.write_all(&startup()).expect("a startup message written");
        match read_until(&mut s, b'Z', Instant::now() + ANSWER_BOUND) {
            Ok(true) => {}
            other => panic!("the server did not log the client in: {other:?}"),
        }
    }
    // The server may close the connection part way: a failed write ends
    // the input, it is not a finding.
    let _ = s.write_all(rest);
    // Drain the answers until the server closes or goes quiet.
    let mut buf = [0u8; 4096];
    s.set_read_timeout(Some(QUIET)).expect("a read timeout");
    while let Ok(1..) = s.read(&mut buf) {}
    let _ = s.shutdown(Shutdown::Both);
    drop(s);
    probe(addr);
});
