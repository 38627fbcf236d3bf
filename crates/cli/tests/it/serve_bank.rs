//! A bank served over the network survives SIGKILLs: clients make
//! transfers between the accounts of two islands (so many commit with
//! two-phase commit) through `islands serve`, while the test SIGKILLs the
//! server at random moments and starts it again on the same data
//! directory. After the last restart, every transfer acknowledged to a
//! client is recorded, every refused one is not, each account's balance is
//! its opening balance plus what the recorded transfers moved (so no
//! transfer is half applied), and the total is what the bank opened with.
//!
//! 4 kills by default (a few seconds); `ISLANDS_LONG=1`: 20. The kill
//! moments come from a seed printed at the start (`ISLANDS_SEED=N` replays
//! the choice; the interleaving is the machine's).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use islands_workloads::served::BANK_INITIAL;

use super::serve::{code, connect, runtime, sigterm, spawn_serve, temp, Served};

const ACCOUNTS: i64 = 64;
const CLIENTS: i64 = 6;

/// What a client heard of one transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Acknowledged: it must be recorded.
    Acked,
    /// Refused (an overdraft, or given up on conflicts): it must not be.
    Refused,
    /// The connection went before the answer, or an island it needed was
    /// down: either.
    Unknown,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Attempt {
    pub(super) id: i64,
    pub(super) src: i64,
    pub(super) dst: i64,
    pub(super) amount: i64,
    pub(super) heard: Heard,
}

/// A small generator for the test's choices (xorshift64*).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Client `k` of round `round` makes transfers until its connection goes;
/// returns what it heard of each.
async fn client(addr: SocketAddr, round: i64, k: i64, seed: u64) -> Vec<Attempt> {
    let mut out = Vec::new();
    let Ok(c) = connect(addr).await else {
        return out;
    };
    let Ok(st) = c.prepare("CALL transfer($1, $2, $3, $4)").await else {
        return out;
    };
    let mut rng = Rng(seed | 1);
    for n in 0.. {
        let src = rng.below(ACCOUNTS as u64) as i64;
        let dst = (src + 1 + rng.below(ACCOUNTS as u64 - 1) as i64) % ACCOUNTS;
        let amount = 1 + rng.below(400) as i64;
        let id = round << 40 | k << 32 | n;
        let heard = match c.execute(&st, &[&id, &src, &dst, &amount]).await {
            Ok(_) => Heard::Acked,
            Err(e) if ["P0001", "40001"].contains(&code(&e).as_str()) => Heard::Refused,
            Err(_) => Heard::Unknown,
        };
        out.push(Attempt {
            id,
            src,
            dst,
            amount,
            heard,
        });
        if heard == Heard::Unknown {
            break;
        }
    }
    out
}

fn start(dir: &str, init: bool) -> (Served, SocketAddr) {
    let mut args = vec!["--islands", "2", "--data-dir", dir];
    if init {
        args.extend(["--init", "bank", "--accounts", "64"]);
    }
    let (child, addr, _) = spawn_serve(&args);
    (child, addr)
}

#[test]
fn acknowledged_transfers_survive_sigkills_of_the_server() {
    let long = std::env::var("ISLANDS_LONG").is_ok_and(|v| v != "0");
    let kills = if long { 20 } else { 4 };
    let seed: u64 = match std::env::var("ISLANDS_SEED") {
        Ok(s) => s.parse().expect("ISLANDS_SEED is a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    eprintln!("bank over the network: {kills} kills, ISLANDS_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let dir = temp("bank-kill");
    let d = dir.to_str().unwrap().to_string();
    let rt = runtime();
    let t = Instant::now();
    let mut attempts: Vec<Attempt> = Vec::new();
    let (mut server, mut addr) = start(&d, true);
    for round in 0..kills {
        let run_for = Duration::from_millis(100 + rng.below(500));
        let seeds: Vec<u64> = (0..CLIENTS).map(|_| rng.below(u64::MAX)).collect();
        let heard = rt.block_on(async {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|k| tokio::spawn(client(addr, round, k, seeds[k as usize])))
                .collect();
            tokio::time::sleep(run_for).await;
            server.child().kill().unwrap(); // SIGKILL
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        });
        let _ = server.child().wait();
        attempts.extend(heard);
        (server, addr) = start(&d, false);
    }
    let acked = attempts.iter().filter(|a| a.heard == Heard::Acked).count();
    assert!(
        acked as i64 >= kills,
        "only {acked} transfers were acknowledged in {kills} rounds"
    );
    // The audit, on the server as the last restart recovered it.
    let (balances, total) = rt.block_on(async {
        let c = connect(addr).await.unwrap();
        let get = c.prepare("CALL bank_transfer($1)").await.unwrap();
        let mut recorded = Vec::new();
        for a in &attempts {
            match c.query(&get, &[&a.id]).await {
                Ok(rows) => {
                    let r = &rows[0];
                    let got: (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
                    assert_eq!(got, (a.src, a.dst, a.amount), "transfer {}", a.id);
                    assert!(
                        a.heard != Heard::Refused,
                        "refused transfer {a:?} is recorded"
                    );
                    recorded.push(*a);
                }
                Err(e) => {
                    assert_eq!(code(&e), "P0001", "{e}");
                    assert!(
                        a.heard != Heard::Acked,
                        "acknowledged transfer {a:?} is lost (ISLANDS_SEED={seed})"
                    );
                }
            }
        }
        let mut want: HashMap<i64, i64> = (0..ACCOUNTS).map(|a| (a, BANK_INITIAL)).collect();
        for a in &recorded {
            *want.get_mut(&a.src).unwrap() -= a.amount;
            *want.get_mut(&a.dst).unwrap() += a.amount;
        }
        let mut balances = Vec::new();
        for a in 0..ACCOUNTS {
            let b: i64 = c
                .query_one("CALL bank_balance($1)", &[&a])
                .await
                .unwrap()
                .get(0);
            assert_eq!(
                b, want[&a],
                "account {a}: what its recorded transfers moved"
            );
            assert!(b >= 0, "account {a} is overdrawn: {b}");
            balances.push(b);
        }
        let r = c.query_one("CALL bank_total()", &[]).await.unwrap();
        let total: i64 = r.get("total");
        assert_eq!(r.get::<_, i64>("accounts"), ACCOUNTS);
        (balances, total)
    });
    assert_eq!(total, ACCOUNTS * BANK_INITIAL);
    assert_eq!(balances.iter().sum::<i64>(), total);
    sigterm(&mut server);
    let out = server.take().wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    eprintln!(
        "bank over the network: {} transfers tried, {acked} acknowledged, {kills} kills, {:.1} s",
        attempts.len(),
        t.elapsed().as_secs_f64()
    );
    if !long {
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
