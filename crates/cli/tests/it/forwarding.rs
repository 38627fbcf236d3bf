//! Table statements and transaction blocks forwarded between island
//! processes: two `islands island` children over Unix sockets with the bank
//! data set. A statement by key sent to the server of the island that does
//! not hold the key runs at the key's home island, in the other process, and
//! answers with the rows and the command tag it would give there; a block
//! whose first statement is homed there runs there, and its rollback undoes
//! it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use islands_workloads::served::BANK_INITIAL;
use tokio_postgres::SimpleQueryMessage;

use super::common::{deployment_file, free_ports, peer_count, spawn_island};
use super::serve::{connect, runtime, temp, Served};

const ACCOUNTS: i64 = 64;

/// The deployment file: two islands as processes over uds, durability off.
fn config(dir: &Path, ports: &[u16]) -> PathBuf {
    deployment_file(dir, ports, "uds", "off")
}

/// `islands island --id k --init bank` as a child, once it printed its
/// ready line.
fn island(cfg: &Path, dir: &Path, k: usize) -> Served {
    let accounts = ACCOUNTS.to_string();
    let args = [
        "--topology",
        "1x2",
        "--init",
        "bank",
        "--accounts",
        &accounts,
    ];
    spawn_island(cfg, dir, k, &args)
}

/// The rows of a simple query, each column as text.
fn rows(msgs: &[SimpleQueryMessage]) -> Vec<Vec<String>> {
    msgs.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The count of a simple query's command tag.
fn count(msgs: &[SimpleQueryMessage]) -> Option<u64> {
    msgs.iter().find_map(|m| match m {
        SimpleQueryMessage::CommandComplete(n) => Some(*n),
        _ => None,
    })
}

/// Account `id`'s balance, read through `c`.
async fn balance(c: &tokio_postgres::Client, id: i64) -> i64 {
    let msgs = c
        .simple_query(&format!("SELECT balance FROM accounts WHERE id = {id}"))
        .await
        .unwrap();
    rows(&msgs)[0][0].parse().unwrap()
}

#[test]
fn table_statements_homed_on_another_process_run_there() {
    let dir = temp("forwarding");
    std::fs::create_dir_all(&dir).unwrap();
    let ports = free_ports(2);
    let cfg = config(&dir, &ports);
    let starts: Vec<_> = (0..2)
        .map(|k| {
            let (cfg, dir) = (cfg.clone(), dir.clone());
            std::thread::spawn(move || island(&cfg, &dir, k))
        })
        .collect();
    let procs: Vec<Served> = starts.into_iter().map(|h| h.join().unwrap()).collect();
    let addr = |k: usize| SocketAddr::from(([127, 0, 0, 1], ports[k]));
    runtime().block_on(async {
        let (c0, c1) = (
            connect(addr(0)).await.unwrap(),
            connect(addr(1)).await.unwrap(),
        );
        // Both up, as each sees the other.
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let mut up = 0;
            for c in [&c0, &c1] {
                let msgs = c.simple_query("SHOW peers").await.unwrap();
                up += rows(&msgs).iter().filter(|r| r[1] == "up").count();
            }
            if up == 2 {
                break;
            }
            assert!(Instant::now() < end, "the islands did not connect");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Each peer's counters, by name: the shared-memory ones (parked
        // batches, and the drops among `dropped` for an unlinked peer or a
        // stale incarnation) are counted over uds as none.
        for c in [&c0, &c1] {
            for m in c.simple_query("SHOW peers").await.unwrap() {
                if let SimpleQueryMessage::Row(r) = m {
                    let n = |col: &str| peer_count(&r, col);
                    assert_eq!(
                        (n("parked"), n("dropped_unlinked"), n("dropped_stale")),
                        (0, 0, 0)
                    );
                    assert!(n("dropped") >= n("dropped_unlinked") + n("dropped_stale"));
                }
            }
        }
        // The accounts island 1 holds: the bank puts account `id` on its
        // site `id % 64`, which wraps onto the deployment's `sites` as
        // `id % 64 % sites`; `SHOW islands` gives each island's sites as
        // `lo..hi`.
        let msgs = c0.simple_query("SHOW islands").await.unwrap();
        let ranges: Vec<(i64, i64)> = rows(&msgs)
            .iter()
            .map(|r| {
                let (lo, hi) = r[4].split_once("..").unwrap();
                (lo.parse().unwrap(), hi.parse().unwrap())
            })
            .collect();
        let sites_n = ranges.iter().map(|r| r.1).max().unwrap();
        let (lo, hi) = ranges[1];
        let sites = format!("{lo}..{hi} of {sites_n}");
        let theirs: Vec<i64> = (0..ACCOUNTS)
            .filter(|id| (lo..hi).contains(&(id % 64 % sites_n)))
            .collect();
        assert!(
            theirs.len() >= 2 && theirs.len() < ACCOUNTS as usize,
            "island 1 holds {sites}"
        );
        for &id in &theirs {
            // Extended protocol: the rows, and the count of the tag.
            let got = c0
                .query("SELECT id, balance FROM accounts WHERE id = $1", &[&id])
                .await
                .unwrap();
            assert_eq!(got.len(), 1, "account {id}");
            assert_eq!(
                (got[0].get::<_, i64>(0), got[0].get::<_, i64>(1)),
                (id, BANK_INITIAL)
            );
            let n = c0
                .execute(
                    "UPDATE accounts SET balance = balance + 5 WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            assert_eq!(n, 1, "UPDATE of account {id}");
            // Simple protocol: `UPDATE 1`.
            let msgs = c0
                .simple_query(&format!(
                    "UPDATE accounts SET balance = balance - 2 WHERE id = {id}"
                ))
                .await
                .unwrap();
            assert_eq!(count(&msgs), Some(1), "{id}");
            // Its home's own server reads what the other's wrote.
            let msgs = c1
                .simple_query(&format!("SELECT balance FROM accounts WHERE id = {id}"))
                .await
                .unwrap();
            assert_eq!(rows(&msgs), [[(BANK_INITIAL + 3).to_string()]], "{id}");
        }
        // The other way round, in one go: island 1's server reads island
        // 0's accounts through island 0.
        let mine = (0..ACCOUNTS).find(|id| !theirs.contains(id)).unwrap();
        let msgs = c1
            .simple_query(&format!("SELECT balance FROM accounts WHERE id = {mine}"))
            .await
            .unwrap();
        assert_eq!(rows(&msgs), [[BANK_INITIAL.to_string()]]);

        // Blocks begun on island 1 from island 0's server: a rollback
        // undoes, a commit keeps.
        let (id, other) = (theirs[0], theirs[1]);
        let read = |id: i64| format!("SELECT balance FROM accounts WHERE id = {id}");
        let before = rows(&c1.simple_query(&read(id)).await.unwrap());
        c0.batch_execute("BEGIN").await.unwrap();
        let n = c0
            .execute(
                "UPDATE accounts SET balance = balance + 100 WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        let got = c0
            .query("SELECT balance FROM accounts WHERE id = $1", &[&id])
            .await
            .unwrap();
        // The block reads its own write, at its home.
        let seen: i64 = got[0].get(0);
        assert_eq!(seen - 100, before[0][0].parse::<i64>().unwrap());
        c0.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(rows(&c1.simple_query(&read(id)).await.unwrap()), before);
        // The rolled-back block released its lock: island 1's own server
        // updates the row at once.
        let msgs = c1
            .simple_query(&format!(
                "UPDATE accounts SET balance = balance + 0 WHERE id = {id}"
            ))
            .await
            .unwrap();
        assert_eq!(count(&msgs), Some(1));

        let msgs = c0
            .simple_query(&format!(
                "BEGIN; UPDATE accounts SET balance = balance - 10 WHERE id = {id}; \
                 UPDATE accounts SET balance = balance + 10 WHERE id = {other}; \
                 UPDATE accounts SET balance = balance + 1 WHERE id = {mine}; COMMIT"
            ))
            .await
            .unwrap();
        let tags: Vec<u64> = msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(tags, [0, 1, 1, 1, 0], "BEGIN, three UPDATEs, COMMIT");
        let b: i64 = before[0][0].parse().unwrap();
        assert_eq!(balance(&c1, id).await, b - 10);
        assert_eq!(balance(&c1, other).await, BANK_INITIAL + 3 + 10);
        assert_eq!(balance(&c1, mine).await, BANK_INITIAL + 1);

        // A client that disconnects mid-block: its block, open at island 1
        // with a row locked, is rolled back there, and the row is free.
        let c2 = connect(addr(0)).await.unwrap();
        c2.batch_execute(&format!(
            "BEGIN; UPDATE accounts SET balance = balance + 1000 WHERE id = {id}"
        ))
        .await
        .unwrap();
        drop(c2);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let r = c1
                .simple_query(&format!(
                    "UPDATE accounts SET balance = balance + 0 WHERE id = {id}"
                ))
                .await;
            match r {
                Ok(msgs) => {
                    assert_eq!(count(&msgs), Some(1));
                    break;
                }
                Err(e) => assert!(
                    Instant::now() < end,
                    "the row of a disconnected client's block stays locked: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(balance(&c1, id).await, b - 10);
    });
    // Island 1 stops cleanly: island 0 counts its goodbye in `SHOW peers`.
    let mut procs = procs;
    super::serve::sigterm(&mut procs[1]);
    let status = procs[1].child().wait().unwrap();
    assert!(status.success(), "island 1 stopped with {status}");
    runtime().block_on(async {
        let c0 = connect(addr(0)).await.unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let msgs = c0.simple_query("SHOW peers").await.unwrap();
            let peer = msgs
                .iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(r) if r.get("island") == Some("1") => Some((
                        r.get("goodbyes").map(str::to_string),
                        r.get("state").map(str::to_string),
                    )),
                    _ => None,
                })
                .expect("island 1 in SHOW peers");
            if peer.0.as_deref() == Some("1") && peer.1.as_deref() != Some("up") {
                break;
            }
            assert_eq!(
                peer.0.as_deref().map(|g| g == "0" || g == "1"),
                Some(true),
                "{peer:?}"
            );
            assert!(
                Instant::now() < end,
                "SHOW peers after island 1's goodbye: {peer:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}
