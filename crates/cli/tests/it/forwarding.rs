//! Table statements forwarded between island processes: two `islands
//! island` children over Unix sockets with the bank data set. A statement by
//! key sent to the server of the island that does not hold the key runs at
//! the key's home island, in the other process, and answers with the rows
//! and the command tag it would give there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use islands_workloads::served::BANK_INITIAL;
use tokio_postgres::SimpleQueryMessage;

use super::common::{deployment_file, free_ports, spawn_island};
use super::serve::{code, connect, runtime, temp, Served};

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
        // The accounts island 1 holds: account `id` is on site `id % 64`,
        // and `SHOW islands` gives island 1's sites as `lo..hi`.
        let msgs = c0.simple_query("SHOW islands").await.unwrap();
        let sites = &rows(&msgs)[1][4];
        let (lo, hi) = sites.split_once("..").unwrap();
        let (lo, hi): (i64, i64) = (lo.parse().unwrap(), hi.parse().unwrap());
        let theirs: Vec<i64> = (0..ACCOUNTS)
            .filter(|id| (lo..hi).contains(&(id % 64)))
            .collect();
        assert!(
            !theirs.is_empty() && theirs.len() < ACCOUNTS as usize,
            "island 1 holds {sites}"
        );
        // A block begun there is not forwarded: refused, naming island 1.
        let id = theirs[0];
        c0.batch_execute("BEGIN").await.unwrap();
        let e = c0
            .query("SELECT balance FROM accounts WHERE id = $1", &[&id])
            .await
            .unwrap_err();
        let msg = e
            .as_db_error()
            .map_or(String::new(), |d| d.message().to_string());
        assert_eq!(code(&e), "0A000", "{msg}");
        assert!(msg.contains("island 1"), "{msg}");
        c0.batch_execute("ROLLBACK").await.unwrap();

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
    });
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}
