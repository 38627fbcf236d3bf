//! A deployment run as processes: three `islands island` children joined
//! over Unix sockets or over shared memory (`transport = "uds"` or `"shm"`;
//! durability sync, the bank data set), while the test SIGKILLs a random
//! island at random moments and starts it again without `--init`. Clients
//! send each transfer to the server of a guessed island and, answered 0A000
//! naming its home island, to that island's server. At the end every island
//! lists every island up (`SHOW islands`), every acknowledged transfer is
//! recorded once, every refused one is not, each account is its opening
//! balance plus what the recorded transfers moved, and the total is
//! conserved. Then every island is SIGKILLed at once and `islands check`
//! passes over the crashed data directory, its two-phase-commit check
//! included: every island logged the same decision for each distributed
//! transaction in the logs, and no gtid names two transactions (each
//! incarnation of an island draws gtids above its earlier ones' reservations,
//! which its control file records and the test follows). Last, the islands
//! start again, stop cleanly, and the check passes once more. While an
//! island is down clients hear only 57P03, 40001, a user abort (P0001) or a
//! lost connection, never another error.
//!
//! 5 kills by default; `ISLANDS_LONG=1`: 1000; `ISLANDS_KILLS=N`: N. The
//! choices come from a seed printed at the start (`ISLANDS_SEED=N` replays
//! them; the interleaving is the machine's). With `--nocapture` a summary
//! line gives the kills, acknowledged transfers, restarts, distributed
//! transactions checked and seconds.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands_workloads::served::BANK_INITIAL;
use tokio_postgres::Client;

use super::common::{deployment_file, free_ports, peer_count, spawn_island};
use super::serve::{code, connect, runtime, temp, Served};
use super::serve_bank::{Attempt, Heard, Rng};

const ISLANDS: usize = 3;
const ACCOUNTS: i64 = 64;
const CLIENTS: i64 = 4;
/// Longest a call may wait for its answer: a server answers every call,
/// 57P03 when an island it needs is down, however loaded the machine.
const CALL_ANSWER: Duration = Duration::from_secs(60);

/// The deployment file: three islands as processes over `transport` (`uds`
/// or `shm`), durability sync.
fn config(dir: &Path, ports: &[u16], transport: &str) -> PathBuf {
    deployment_file(dir, ports, transport, "sync")
}

/// `islands island --id k` as a child, once it printed its ready line; its
/// stderr goes to `dir/island-k.log` (appended).
fn island(cfg: &Path, dir: &Path, k: usize, init: bool) -> Served {
    let accounts = ACCOUNTS.to_string();
    let mut args = vec!["--topology", "1x3"];
    if init {
        args.extend(["--init", "bank", "--accounts", &accounts]);
    }
    spawn_island(cfg, dir, k, &args)
}

/// The island a 0A000 answer names as the call's home.
fn home_named(e: &tokio_postgres::Error) -> Option<usize> {
    let m = e.as_db_error()?.message();
    m.split("island ")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Connections to each island's server, opened as needed.
struct Routes {
    addrs: Vec<SocketAddr>,
    conns: Vec<Option<Client>>,
}

/// How a routed call ended.
enum Routed {
    Rows(Vec<tokio_postgres::Row>),
    Failed(String),
    /// No connection to the island, or it went.
    Lost,
}

impl Routes {
    fn new(addrs: Vec<SocketAddr>) -> Routes {
        let conns = addrs.iter().map(|_| None).collect();
        Routes { addrs, conns }
    }

    /// Runs `sql` at island `guess`, and at the island a 0A000 names.
    async fn call(
        &mut self,
        guess: usize,
        sql: &str,
        args: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Routed {
        let mut at = guess;
        for _ in 0..ISLANDS {
            if self.conns[at].as_ref().is_none_or(|c| c.is_closed()) {
                self.conns[at] = connect(self.addrs[at]).await.ok();
            }
            let Some(c) = &self.conns[at] else {
                return Routed::Lost;
            };
            let answer = match tokio::time::timeout(CALL_ANSWER, c.query(sql, args)).await {
                Ok(a) => a,
                Err(_) => {
                    self.conns[at] = None;
                    return Routed::Failed(format!(
                        "no answer from island {at} in {} s",
                        CALL_ANSWER.as_secs()
                    ));
                }
            };
            match answer {
                Ok(rows) => return Routed::Rows(rows),
                Err(e) if code(&e) == "0A000" => match home_named(&e) {
                    Some(h) if h < ISLANDS && h != at => at = h,
                    _ => return Routed::Failed(format!("0A000 naming no other island: {e}")),
                },
                Err(e) if e.as_db_error().is_some() => return Routed::Failed(code(&e)),
                Err(_) => {
                    self.conns[at] = None;
                    return Routed::Lost;
                }
            }
        }
        Routed::Failed("0A000 at every island".into())
    }
}

/// Client `k` makes transfers until `stop`; returns what it heard of each,
/// and any answer a client must never hear.
async fn client(
    addrs: Vec<SocketAddr>,
    k: i64,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> (Vec<Attempt>, Vec<String>) {
    let mut routes = Routes::new(addrs);
    let (mut out, mut wrong) = (Vec::new(), Vec::new());
    let mut rng = Rng(seed | 1);
    let mut n = 0i64;
    while !stop.load(Ordering::Relaxed) {
        let src = rng.below(ACCOUNTS as u64) as i64;
        let dst = (src + 1 + rng.below(ACCOUNTS as u64 - 1) as i64) % ACCOUNTS;
        let amount = 1 + rng.below(200) as i64;
        let id = k << 40 | n;
        n += 1;
        let guess = rng.below(ISLANDS as u64) as usize;
        let heard = match routes
            .call(
                guess,
                "CALL transfer($1, $2, $3, $4)",
                &[&id, &src, &dst, &amount],
            )
            .await
        {
            Routed::Rows(_) => Heard::Acked,
            Routed::Failed(c) if c == "P0001" || c == "40001" => Heard::Refused,
            Routed::Failed(c) if c == "57P03" => Heard::Unknown,
            Routed::Failed(c) => {
                wrong.push(format!("transfer {id}: {c}"));
                Heard::Unknown
            }
            Routed::Lost => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Heard::Unknown
            }
        };
        out.push(Attempt {
            id,
            src,
            dst,
            amount,
            heard,
        });
    }
    (out, wrong)
}

/// `SHOW islands` at island `k`: (island, process, state) per row.
async fn show_islands(c: &Client) -> Vec<(String, String, String)> {
    let mut v = Vec::new();
    for m in c.simple_query("SHOW islands").await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            v.push((
                r.get("island").unwrap().to_string(),
                r.get("process").unwrap().to_string(),
                r.get("state").unwrap().to_string(),
            ));
        }
    }
    v
}

#[test]
fn three_island_processes_over_uds_keep_every_acknowledged_transfer_across_sigkills() {
    sigkills("uds");
}

#[test]
fn three_island_processes_over_shm_keep_every_acknowledged_transfer_across_sigkills() {
    sigkills("shm");
}

/// Every island, started together: each waits for its peers only in the
/// background.
fn start_all(cfg: &Path, dir: &Path, init: bool) -> Vec<Served> {
    let starts: Vec<_> = (0..ISLANDS)
        .map(|k| {
            let (cfg, dir) = (cfg.to_path_buf(), dir.to_path_buf());
            std::thread::spawn(move || island(&cfg, &dir, k, init))
        })
        .collect();
    starts.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Starts island `k` (of the deployment in `cfg`) again without `--init`.
async fn restart(cfg: &Path, dir: &Path, k: usize) -> Served {
    let (cfg, dir) = (cfg.to_path_buf(), dir.to_path_buf());
    tokio::task::spawn_blocking(move || island(&cfg, &dir, k, false))
        .await
        .unwrap()
}

/// SIGKILLs an island process and waits for it.
fn kill(p: Served) {
    let mut c = p.take();
    c.kill().unwrap(); // SIGKILL
    let _ = c.wait();
}

/// `islands check --log-dir data`, which must pass; its output.
fn check(data: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["check", "--log-dir"])
        .arg(data)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "islands check: {text}");
    text
}

/// The distributed transactions `islands check` says its two-phase-commit
/// check found every island to agree on (`None`: no such line).
fn two_pc_checked(text: &str) -> Option<usize> {
    text.lines().find_map(|l| {
        l.strip_prefix("2PC: ")?
            .strip_suffix(" distributed transactions, every island agrees")?
            .parse()
            .ok()
    })
}

/// Island `k`'s control file (its directory under `data`).
fn control(data: &Path, k: usize) -> islands::wal::Control {
    islands::wal::read_control(&data.join(format!("island-{k}")))
        .unwrap()
        .unwrap_or_else(|| panic!("island {k} has no control file"))
}

/// The harness over `transport`; see the module's doc.
fn sigkills(transport: &str) {
    let long = std::env::var("ISLANDS_LONG").is_ok_and(|v| v != "0");
    let kills: usize = match std::env::var("ISLANDS_KILLS") {
        Ok(n) => n.parse().expect("ISLANDS_KILLS is a number"),
        Err(_) if long => 1000,
        Err(_) => 5,
    };
    let seed: u64 = match std::env::var("ISLANDS_SEED") {
        Ok(s) => s.parse().expect("ISLANDS_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    eprintln!("islands as processes over {transport}: {kills} kills, ISLANDS_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let dir = temp(&format!("processes-{transport}"));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data");
    let ports = free_ports(ISLANDS);
    let cfg = config(&dir, &ports, transport);
    let addrs: Vec<SocketAddr> = ports
        .iter()
        .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
        .collect();
    let t = Instant::now();
    let mut procs = start_all(&cfg, &dir, true);
    let mut restarts = 0;
    // Per island, the (incarnation, gtid reservation) its control file held
    // when each of its incarnations died: the gtids an incarnation drew lie
    // below its reservation, and the next one draws above it.
    let mut incarnations: Vec<Vec<(u64, u64)>> = vec![Vec::new(); ISLANDS];
    let died = |k: usize, incarnations: &mut [Vec<(u64, u64)>]| {
        let c = control(&data, k);
        if let Some(&(inc, reserved)) = incarnations[k].last() {
            assert!(
                c.incarnation > inc,
                "island {k}: incarnation {} after {inc}",
                c.incarnation
            );
            assert!(
                c.gtid_reserved > reserved,
                "island {k}: incarnation {} reserved gtids below {}, under its predecessor's {reserved}",
                c.incarnation,
                c.gtid_reserved
            );
        }
        incarnations[k].push((c.incarnation, c.gtid_reserved));
    };
    let rt = runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let (attempts, wrong) = rt.block_on(async {
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|k| {
                let seed = rng.below(u64::MAX);
                tokio::spawn(client(addrs.clone(), k, seed, Arc::clone(&stop)))
            })
            .collect();
        for _ in 0..kills {
            tokio::time::sleep(Duration::from_millis(150 + rng.below(450))).await;
            let k = rng.below(ISLANDS as u64) as usize;
            kill(std::mem::replace(&mut procs[k], Served::none()));
            died(k, &mut incarnations);
            tokio::time::sleep(Duration::from_millis(rng.below(300))).await;
            procs[k] = restart(&cfg, &dir, k).await;
            restarts += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.store(true, Ordering::Relaxed);
        let (mut all, mut wrong) = (Vec::new(), Vec::new());
        for t in tasks {
            let (a, w) = t.await.unwrap();
            all.extend(a);
            wrong.extend(w);
        }
        (all, wrong)
    });
    assert!(
        wrong.is_empty(),
        "answers a client must not hear: {wrong:?}"
    );
    let acked = attempts.iter().filter(|a| a.heard == Heard::Acked).count();
    assert!(acked >= 20, "only {acked} transfers were acknowledged");

    rt.block_on(async {
        // Every island sees every island up again, each numbered right.
        let end = Instant::now() + Duration::from_secs(30);
        for (k, addr) in addrs.iter().enumerate() {
            let c = connect(*addr).await.unwrap();
            loop {
                let rows = show_islands(&c).await;
                let want: Vec<(String, String, String)> = (0..ISLANDS)
                    .map(|i| {
                        let who = if i == k { "this" } else { "other" };
                        (i.to_string(), who.to_string(), "up".to_string())
                    })
                    .collect();
                if rows == want {
                    break;
                }
                assert!(Instant::now() < end, "island {k}: SHOW islands {rows:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Each of the others' connections, with what crossed it.
            let mut peers = 0;
            for m in c.simple_query("SHOW peers").await.unwrap() {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                    assert_eq!(r.get("state"), Some("up"));
                    assert_ne!(r.get("island"), Some(k.to_string().as_str()));
                    // The drops for an unlinked or stale peer (shm) are
                    // among the drops, and the batches parked for it are
                    // counted (any number: a peer just up drains them).
                    let n = |col: &str| peer_count(&r, col);
                    assert!(
                        n("dropped") >= n("dropped_unlinked") + n("dropped_stale"),
                        "island {k}: SHOW peers"
                    );
                    let _ = n("parked");
                    peers += 1;
                }
            }
            assert_eq!(peers, ISLANDS - 1, "island {k}: SHOW peers");
        }
        // The audit.
        let mut routes = Routes::new(addrs.clone());
        let mut recorded = Vec::new();
        for a in &attempts {
            let got = loop {
                match routes.call(0, "CALL bank_transfer($1)", &[&a.id]).await {
                    Routed::Rows(rows) => break Some(rows),
                    Routed::Failed(c) if c == "P0001" => break None,
                    Routed::Failed(c) if c == "40001" => continue,
                    Routed::Failed(c) => panic!("transfer {}: {c}", a.id),
                    Routed::Lost => panic!("transfer {}: a server went", a.id),
                }
            };
            match got {
                Some(rows) => {
                    let r = &rows[0];
                    let got: (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
                    assert_eq!(got, (a.src, a.dst, a.amount), "transfer {}", a.id);
                    assert_ne!(a.heard, Heard::Refused, "refused {a:?} is recorded");
                    recorded.push(*a);
                }
                None => assert_ne!(
                    a.heard,
                    Heard::Acked,
                    "acknowledged {a:?} is lost (ISLANDS_SEED={seed})"
                ),
            }
        }
        let mut want: HashMap<i64, i64> = (0..ACCOUNTS).map(|a| (a, BANK_INITIAL)).collect();
        for a in &recorded {
            *want.get_mut(&a.src).unwrap() -= a.amount;
            *want.get_mut(&a.dst).unwrap() += a.amount;
        }
        let mut total = 0;
        for a in 0..ACCOUNTS {
            let b: i64 = match routes.call(0, "CALL bank_balance($1)", &[&a]).await {
                Routed::Rows(rows) => rows[0].get(0),
                Routed::Failed(c) => panic!("account {a}: {c}"),
                Routed::Lost => panic!("account {a}: a server went"),
            };
            assert_eq!(
                b, want[&a],
                "account {a}: what its recorded transfers moved"
            );
            total += b;
        }
        assert_eq!(total, ACCOUNTS * BANK_INITIAL);
        eprintln!(
            "islands as processes over {transport}: {} transfers tried, {acked} acknowledged, \
             {} recorded, {kills} kills",
            attempts.len(),
            recorded.len()
        );
    });
    // Every island crashes at once: the logs keep their two-phase-commit
    // records (a clean stop's checkpoint would cut them), and the check
    // reads them all.
    for (k, p) in procs.iter_mut().enumerate() {
        kill(std::mem::replace(p, Served::none()));
        died(k, &mut incarnations);
    }
    let text = check(&data);
    let checked =
        two_pc_checked(&text).unwrap_or_else(|| panic!("islands check ran no 2PC check: {text}"));
    assert!(
        checked > 0,
        "the logs hold no distributed transaction: {text}"
    );
    // Started again together, then a clean stop of each, and the stopped
    // directory passes the check too.
    procs = start_all(&cfg, &dir, false);
    restarts += ISLANDS;
    for p in &mut procs {
        super::serve::sigterm(p);
    }
    for (k, p) in procs.into_iter().enumerate() {
        let out = p.take().wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "island {k} did not stop cleanly"
        );
    }
    let text = check(&data);
    assert!(two_pc_checked(&text).is_some(), "{text}");
    let secs = t.elapsed().as_secs_f64();
    for (k, inc) in incarnations.iter().enumerate() {
        if let (Some(first), Some(last)) = (inc.first(), inc.last()) {
            eprintln!(
                "islands as processes over {transport}: island {k}: incarnations {} to {}, \
                 gtid reservations from {:#x} to {:#x}",
                first.0, last.0, first.1, last.1
            );
        }
    }
    eprintln!(
        "islands as processes over {transport}: {kills} kills, {acked} acknowledged, \
         {restarts} restarts, {checked} distributed transactions checked, {secs:.1} s"
    );
    if kills <= 5 {
        assert!(secs < 90.0, "{secs:.1} s");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run directory whose socket paths are longer than a Unix socket's
/// address holds: `islands up` and `islands island` refuse the deployment
/// file when they read it, naming the island, its path and the limit, and
/// start nothing.
#[test]
fn a_socket_path_too_long_is_refused_when_the_deployment_file_is_read() {
    let dir = temp("long-run-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = config(&dir, &free_ports(ISLANDS), "uds");
    let run = dir.join("run");
    let long = dir.join("r".repeat(islands::deploy::SOCKET_PATH_MAX));
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        &format!("run_dir = \"{}\"", run.display()),
        &format!("run_dir = \"{}\"", long.display()),
    );
    assert!(text.contains(&long.display().to_string()), "{text}");
    std::fs::write(&cfg, text).unwrap();
    let path = long.join("island-0.sock");
    let want = format!(
        "island 0: its socket path {} is {} bytes, more than the {}",
        path.display(),
        path.as_os_str().len(),
        islands::deploy::SOCKET_PATH_MAX
    );
    for args in [&["up"][..], &["island", "--id", "1"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_islands"))
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .args(["--topology", "1x3", "--init", "bank", "--accounts", "64"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(&want), "{args:?}: {err}");
        assert!(!long.exists(), "{args:?} created {}", long.display());
        assert!(!dir.join("data").exists(), "{args:?} opened an island");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `islands up` starts every island, says so in one line, and stops them
/// all cleanly on SIGTERM.
#[test]
fn islands_up_runs_every_island_and_stops_them_on_sigterm() {
    let dir = temp("up");
    std::fs::create_dir_all(&dir).unwrap();
    let ports = free_ports(ISLANDS);
    let cfg = config(&dir, &ports, "uds");
    let mut child = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["up", "--config"])
        .arg(&cfg)
        .args(["--topology", "1x3", "--init", "bank", "--accounts", "64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut up = Served::new(child);
    let mut line = String::new();
    BufReader::new(up.child().stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("islands up: ready: "), "{line:?}");
    for (k, p) in ports.iter().enumerate() {
        assert!(
            line.contains(&format!("island {k} on 127.0.0.1:{p}")),
            "{line:?}"
        );
    }
    let rt = runtime();
    rt.block_on(async {
        let c = connect(SocketAddr::from(([127, 0, 0, 1], ports[1])))
            .await
            .unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let rows = show_islands(&c).await;
            if rows.len() == ISLANDS && rows.iter().all(|r| r.2 == "up") {
                assert_eq!(rows[1].1, "this");
                break;
            }
            assert!(Instant::now() < end, "SHOW islands {rows:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    super::serve::sigterm(&mut up);
    child = up.take();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    // No island outlived `up`.
    for p in &ports {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", *p)).is_err(),
            "port {p} still served"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `islands check` over the logs of a bank served by two islands passes
/// and names how many distributed transactions they hold; with records
/// written into them with the wal API (island 0 logs a commit decision and
/// island 1 an abort of one gtid; island 1 prepares another gtid twice) it
/// fails, naming each gtid, the islands and what they logged.
#[test]
fn islands_check_names_a_2pc_disagreement_and_a_gtid_used_twice() {
    use islands::wal::{Durability, LogBuffer, Wal, WalConfig};

    let dir = temp("check-2pc");
    let d = dir.to_str().unwrap();
    let (served, addr, _) = super::serve::spawn_serve(&[
        "--init",
        "bank",
        "--accounts",
        "64",
        "--islands",
        "2",
        "--data-dir",
        d,
    ]);
    runtime().block_on(async {
        let c = connect(addr).await.unwrap();
        for i in 0..30i64 {
            let (src, dst) = (i % ACCOUNTS, (i * 7 + 5) % ACCOUNTS);
            c.simple_query(&format!("CALL transfer({i}, {src}, {dst}, 1)"))
                .await
                .unwrap();
        }
    });
    // A crash keeps the 2PC records in the logs (a clean stop checkpoints).
    kill(served);
    let text = check(&dir);
    let n = two_pc_checked(&text).unwrap_or_else(|| panic!("no 2PC line: {text}"));
    assert!(n > 0, "{text}");

    // Appends `write`'s records to island `k`'s log.
    let append = |k: usize, write: &dyn Fn(&mut LogBuffer)| {
        let at = dir.join(format!("island-{k}"));
        let c = control(&dir, k);
        let mut cfg = WalConfig::new(&at, Durability::Sync);
        cfg.identity = c.identity();
        let (log, _) = Wal::open(cfg).unwrap();
        let mut buf = LogBuffer::new();
        write(&mut buf);
        let seq = log.submit(&mut buf).unwrap();
        log.wait_durable(seq).unwrap();
        log.shutdown();
    };
    let split = islands::coord::gtid(0, 1 << 40);
    let twice = islands::coord::gtid(0, (1 << 40) + 1);
    append(0, &|b| b.decision(split, true));
    append(1, &|b| {
        b.decision(split, false);
        for _ in 0..2 {
            b.prepare_begin(twice, 1);
            b.record_end();
        }
    });
    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["check", "--log-dir", d])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for want in [
        format!(
            "violation: 2PC: gtid {split:#x} (home island 0): the islands disagree: commit \
             logged by island-0, abort logged by island-1"
        ),
        format!(
            "violation: 2PC: gtid {twice:#x} (home island 0): island-1's log prepares it 2 \
             times: one gtid names several transactions"
        ),
        format!("2PC: 2 violation(s) in {} distributed transactions", n + 2),
    ] {
        assert!(text.lines().any(|l| l == want), "{want:?} in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
