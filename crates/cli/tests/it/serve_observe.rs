//! What a server tells about itself: `SHOW threads` (every thread of the
//! deployment with its CPU time), aborts by reason and island in `SHOW
//! stats`, the same figures for Prometheus over HTTP; and a server whose
//! log dies stops by itself and says which log and why.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::api::{Deployment, Options};
use islands::cpu::CpuTime;
use islands::deploy::{DeploySpec, Islands};
use islands::server::{serve, ServerOptions};
use islands::wal::{CappedDevice, LogDevice};
use islands_workloads::served::Builtin;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::serve::{code, conflicting, connect, local, open, runtime, spawn_serve_env, temp};

const ACCOUNTS: u64 = 64;

/// A bank of 64 accounts on two islands of one executor each, logged
/// (`sync`) in `dir` through `device` if given.
fn bank(dir: &Path, device: Option<CappedDevice>) -> Deployment {
    let mut s = DeploySpec::new(Islands::Count(2));
    s.workers_per_island = Some(1);
    s.durability = "sync".into();
    s.log_dir = dir.to_path_buf();
    let mut o = Options::new(s);
    o.pin = false;
    o.log_device = device.map(|d| Arc::new(d) as Arc<dyn LogDevice>);
    let b = Builtin::Bank { accounts: ACCOUNTS };
    Deployment::open(o, b.catalog(), move |l| b.load(l)).unwrap()
}

/// The island that holds account `a` (accounts are spread by `a % 64`).
fn island_of(db: &Deployment, a: u64) -> u32 {
    let sites = db.plan().sites() as u64;
    u32::from(db.plan().island_of_site(((a % 64) % sites) as u32))
}

/// Two accounts on different islands.
fn across(db: &Deployment) -> (u64, u64) {
    let a = 0;
    let b = (1..ACCOUNTS)
        .find(|&b| island_of(db, b) != island_of(db, a))
        .expect("an account on the other island");
    (a, b)
}

/// The rows of a simple query, each as its columns' text (NULL: `None`).
async fn rows(c: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    c.simple_query(sql)
        .await
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// `SHOW stats` as (scope, counter) → value.
async fn stats(c: &Client) -> HashMap<(String, String), i64> {
    rows(c, "SHOW stats")
        .await
        .into_iter()
        .map(|r| {
            let s = |i: usize| r[i].clone().unwrap();
            ((s(0), s(1)), s(2).parse().unwrap())
        })
        .collect()
}

async fn transfer(c: &Client, id: i64, src: u64, dst: u64, amount: i64) -> Result<(), String> {
    c.execute(
        "CALL transfer($1, $2, $3, $4)",
        &[&id, &(src as i64), &(dst as i64), &amount],
    )
    .await
    .map(|_| ())
    .map_err(|e| code(&e))
}

#[test]
fn show_threads_lists_every_thread_of_the_deployment_with_its_cpu_time() {
    let dir = temp("threads");
    let db = bank(&dir, None);
    let server = serve(db, local()).unwrap();
    let addr = server.local_addr();
    let process_before = CpuTime::process_now();
    let threads = runtime().block_on(async {
        // Four clients make transfers for 300 ms, and at least 500 each,
        // so the executors work for several 10 ms ticks on a loaded machine.
        let mut tasks = Vec::new();
        for k in 0..4i64 {
            tasks.push(tokio::spawn(async move {
                let c = connect(addr).await.unwrap();
                let t = Instant::now();
                let mut n = 0;
                while t.elapsed() < Duration::from_millis(300) || n < 500 {
                    let src = (k * 7 + n) as u64 % ACCOUNTS;
                    let _ = transfer(&c, k << 32 | n, src, (src + 1) % ACCOUNTS, 1).await;
                    n += 1;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let c = connect(addr).await.unwrap();
        rows(&c, "SHOW threads").await
    });
    let process = CpuTime::process_now();
    // Each thread of the deployment, once: an executor, a log writer, a
    // checkpointer and a prefaulter per island, the watcher, the server.
    let mut roles: Vec<(String, Option<String>)> = threads
        .iter()
        .map(|t| (t[1].clone().unwrap(), t[2].clone()))
        .collect();
    roles.sort();
    let s = |r: &str, i: Option<&str>| (r.to_string(), i.map(str::to_string));
    assert_eq!(
        roles,
        vec![
            s("checkpointer", Some("0")),
            s("checkpointer", Some("1")),
            s("executor", Some("0")),
            s("executor", Some("1")),
            s("log-writer", Some("0")),
            s("log-writer", Some("1")),
            s("prefaulter", Some("0")),
            s("prefaulter", Some("1")),
            s("server", None),
            s("watcher", None),
        ],
        "{threads:?}"
    );
    let mut tids: Vec<&str> = threads.iter().map(|t| t[3].as_deref().unwrap()).collect();
    tids.sort();
    tids.dedup();
    assert_eq!(tids.len(), threads.len(), "one tid per thread: {threads:?}");
    let f = |t: &[Option<String>], i: usize| -> f64 {
        t[i].as_deref()
            .unwrap_or_else(|| panic!("column {i} of {t:?}"))
            .parse()
            .unwrap()
    };
    let mut all_cpu = 0.0;
    let mut executors_cpu = 0.0;
    for t in &threads {
        assert!(
            t[4].as_deref().is_some_and(|c| !c.is_empty()),
            "cpus: {t:?}"
        );
        assert!(t[5].is_some(), "last cpu: {t:?}");
        let cpu = f(t, 6) + f(t, 7);
        let pct = f(t, 8);
        // Ticks of 10 ms over a life of at least 300 ms.
        assert!((0.0..=105.0).contains(&pct), "utilisation: {t:?}");
        assert!(f(t, 9) >= 0.3, "running: {t:?}");
        all_cpu += cpu;
        if t[1].as_deref() == Some("executor") {
            executors_cpu += cpu;
        }
    }
    assert!(executors_cpu >= 0.01, "the executors ran: {threads:?}");
    // The deployment's threads are part of the process (10 ms ticks each).
    assert!(
        all_cpu <= process.as_secs_f64() + 0.01 * threads.len() as f64,
        "threads {all_cpu} s, process {process:?}"
    );
    assert!(process > process_before);
    let name = |role: &str| {
        threads
            .iter()
            .find(|t| t[1].as_deref() == Some(role))
            .and_then(|t| t[0].clone())
    };
    assert_eq!(name("server").as_deref(), Some("islands-server-0"));
    server.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn show_stats_counts_aborts_by_reason_and_island() {
    // Each call of `conflict` aborts on a lock conflict until its 100
    // attempts are spent.
    let server = serve(open(conflicting(), None, None), local()).unwrap();
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        for _ in 0..3 {
            let e = c.simple_query("CALL conflict(1)").await.unwrap_err();
            assert_eq!(code(&e), "40001");
        }
        let st = stats(&c).await;
        let get = |k: &str| st[&("island-0".to_string(), k.to_string())];
        assert_eq!(get("aborts_lock_conflict"), 300, "{st:?}");
        assert_eq!(get("gave_up"), 3);
        assert_eq!(get("aborts_remote"), 0);
        assert_eq!(get("user_aborts"), 0);
        assert_eq!(st[&("conflict".into(), "serialization_failures".into())], 3);
    });
    server.shutdown().unwrap();

    // Transfers across islands: each is a distributed commit of the source's
    // island; an overdraft is the procedure's rollback, on its home island.
    let dir = temp("stats");
    let db = bank(&dir, None);
    let (a, b) = across(&db);
    let (ia, ib) = (island_of(&db, a), island_of(&db, b));
    let server = serve(db, local()).unwrap();
    let addr = server.local_addr();
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        for id in 0..5 {
            transfer(&c, id, a, b, 10).await.unwrap();
        }
        assert_eq!(transfer(&c, 5, a, b, 5000).await, Err("P0001".into()));
        let st = stats(&c).await;
        let get = |i: u32, k: &str| st[&(format!("island-{i}"), k.to_string())];
        assert_eq!(get(ia, "distributed_commits"), 5, "{st:?}");
        assert_eq!(get(ib, "distributed_commits"), 0);
        assert_eq!(get(ia, "user_aborts"), 1);
        assert_eq!(get(ib, "user_aborts"), 0);
        assert!(get(ib, "remote_ops") >= 5);
        assert!(get(ia, "log_bytes") > 0 && get(ib, "log_syncs") > 0);
        assert_eq!(st[&("deployment".into(), "distributed_commits".into())], 5);
        // Each transfer sent a request and a prepare from its home, and the
        // other island answered the request and voted, before the commit
        // was acknowledged (a worker publishes its counts at the end of its
        // round: the last transfer's may not be in yet).
        assert!(get(ia, "frames_out") >= 8, "{st:?}");
        assert!(get(ib, "frames_out") >= 8, "{st:?}");
        for i in [ia, ib] {
            assert!(get(i, "frames_out") >= get(i, "batches_out"), "{st:?}");
            assert!(get(i, "bytes_out") >= 13 * get(i, "frames_out"), "{st:?}");
        }
        let dep = |k: &str| st[&("deployment".to_string(), k.to_string())];
        assert_eq!(
            dep("frames_out"),
            get(ia, "frames_out") + get(ib, "frames_out")
        );
        assert_eq!(
            dep("frames_per_distributed_commit_x1000"),
            dep("frames_out") * 1000 / 5
        );
    });
    server.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// One HTTP/1.1 request; the status code and the body.
fn http(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a response head");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a Content-Length")
        .parse()
        .unwrap();
    if !request.starts_with("HEAD") {
        assert_eq!(len, body.len(), "{head}");
    }
    (status, body.to_string())
}

/// A scrape's samples, `name{labels}` → value; checks that each sample
/// follows the HELP and TYPE lines of its family.
fn samples(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    let mut typed = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed = rest.split_whitespace().next().unwrap().to_string();
            assert!(
                rest.ends_with(" counter") || rest.ends_with(" gauge"),
                "{line}"
            );
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (key, v) = line.rsplit_once(' ').expect("name value");
        let name = key.split('{').next().unwrap();
        assert_eq!(name, typed, "a sample outside its family: {line}");
        out.insert(key.to_string(), v.parse().unwrap());
    }
    out
}

#[test]
fn metrics_serve_the_figures_of_show_stats_and_show_threads_over_http() {
    let dir = temp("metrics");
    let db = bank(&dir, None);
    let (a, b) = across(&db);
    let ia = island_of(&db, a);
    let opts = ServerOptions {
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..local()
    };
    let server = serve(db, opts).unwrap();
    let (addr, maddr) = (server.local_addr(), server.metrics_addr().unwrap());
    let st = runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        for id in 0..3 {
            transfer(&c, id, a, b, 10).await.unwrap();
        }
        assert_eq!(transfer(&c, 3, a, b, 5000).await, Err("P0001".into()));
        stats(&c).await
    });
    let (status, body) = http(maddr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200, "{body}");
    let m = samples(&body);
    let calls = |outcome: &str| {
        m[&format!("islands_procedure_calls_total{{procedure=\"transfer\",outcome=\"{outcome}\"}}")]
    };
    assert_eq!((calls("committed"), calls("rollback")), (3.0, 1.0));
    assert_eq!(m["islands_deployment_failed"], 0.0);
    // The per-island figures are SHOW stats' own.
    for i in 0..2 {
        let show = |k: &str| st[&(format!("island-{i}"), k.to_string())] as f64;
        let l = format!("{{island=\"{i}\"}}");
        assert_eq!(
            m[&format!("islands_user_aborts_total{l}")],
            show("user_aborts")
        );
        assert_eq!(
            m[&format!("islands_distributed_commits_total{l}")],
            show("distributed_commits")
        );
        assert!(m[&format!("islands_log_bytes_total{l}")] >= show("log_bytes"));
        assert_eq!(
            m[&format!("islands_aborts_total{{island=\"{i}\",reason=\"lock_conflict\"}}")],
            show("aborts_lock_conflict")
        );
    }
    assert_eq!(
        m[&format!("islands_user_aborts_total{{island=\"{ia}\"}}")],
        1.0
    );
    // A user and a system sample of CPU time per thread, for each role.
    for role in [
        "executor",
        "log-writer",
        "checkpointer",
        "watcher",
        "server",
    ] {
        let n = m
            .keys()
            .filter(|k| {
                k.starts_with("islands_thread_cpu_seconds_total{")
                    && k.contains(&format!("role=\"{role}\""))
            })
            .count();
        let want = if matches!(role, "watcher" | "server") {
            2
        } else {
            4
        };
        assert_eq!(n, want, "{role}: {body}");
    }
    // Only GET and HEAD of /metrics are served.
    let (status, body) = http(maddr, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(http(maddr, "GET / HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http(maddr, "POST /metrics HTTP/1.1\r\n\r\n").0, 405);
    server.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Clients make transfers until the server stops answering; each returns
/// the SQLSTATE (or the driver's error) that stopped it.
async fn transfer_until_refused(addr: SocketAddr, clients: i64) -> Vec<String> {
    let mut tasks = Vec::new();
    for k in 0..clients {
        tasks.push(tokio::spawn(async move {
            let c = connect(addr).await.unwrap();
            let t = Instant::now();
            let mut n = 0;
            loop {
                if t.elapsed() > Duration::from_secs(20) {
                    return "still answering after 20 s".to_string();
                }
                let src = (k * 13 + n) as u64 % ACCOUNTS;
                let r = transfer(&c, k << 32 | n, src, (src + 1) % ACCOUNTS, 1).await;
                n += 1;
                match r {
                    Ok(()) => {}
                    Err(e) if e == "P0001" => {}
                    Err(e) => return e,
                }
            }
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[test]
fn a_dead_log_stops_the_server_and_shutdown_returns_its_error() {
    let dir = temp("deadlog");
    // Room for the load's checkpoints, then a few thousand transfers.
    let db = bank(&dir, Some(CappedDevice::new(256 << 10)));
    let server = serve(db, local()).unwrap();
    let addr = server.local_addr();
    let t = Instant::now();
    let ends = runtime().block_on(transfer_until_refused(addr, 4));
    for e in &ends {
        assert!(
            ["58030", "57P01"].contains(&e.as_str()) || e.contains("closed"),
            "a client stopped on {e}"
        );
    }
    assert!(ends.iter().any(|e| e == "58030"), "{ends:?}");
    // The server stops by itself: no more connections.
    while server.is_serving() {
        assert!(t.elapsed() < Duration::from_secs(30), "still serving");
        std::thread::sleep(Duration::from_millis(20));
    }
    let why = server.failure().expect("the failure is reported");
    assert!(why.contains("No space left on device"), "{why}");
    assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    match server.shutdown() {
        Err(islands::Error::LogFailed(m)) => {
            assert!(
                m.contains("No space left on device") && m.contains("island-"),
                "the error names the island's log and the failure: {m}"
            )
        }
        r => panic!("shutdown of a server whose log died: {r:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn islands_serve_exits_1_naming_the_log_when_it_dies() {
    let dir = temp("deadlog-cli");
    let d = dir.to_str().unwrap();
    let (child, addr, ready) = spawn_serve_env(
        &[
            "--init",
            "bank",
            "--accounts",
            "64",
            "--islands",
            "2",
            "--data-dir",
            d,
            "--metrics",
            "127.0.0.1:0",
        ],
        &[("ISLANDS_TEST_LOG_CAPACITY", &(256u64 << 10).to_string())],
    );
    // The metrics address is on the ready line, and scrapes answer.
    let maddr: SocketAddr = ready
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no metrics address: {ready}"));
    let (status, body) = http(maddr, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(status, 200);
    assert_eq!(samples(&body)["islands_deployment_failed"], 0.0);
    let t = Instant::now();
    let ends = runtime().block_on(transfer_until_refused(addr, 4));
    assert!(
        ends.iter().all(|e| !e.contains("still answering")),
        "{ends:?}"
    );
    let mut child = child.take();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("islands serve still runs 30 s after its log died");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "the error is printed once: {err}");
    assert!(
        errors[0].contains("No space left on device") && errors[0].contains("island-"),
        "the error names the island's log and the failure: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
