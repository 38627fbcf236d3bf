//! Crash recovery: a child process killed with SIGKILL while it commits in
//! `sync` mode, a corrupt log tail, a failed fdatasync, and checkpoints taken
//! while workers run.
//!
//! The bank here keeps an invariant that any partial transaction breaks: every
//! transfer inserts a receipt (from, to, amount) in the same transaction, and a
//! cancel deletes a receipt and moves its amount back. So each account's
//! balance is its initial balance plus what the present receipts moved into it
//! minus what they moved out of it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::txn::{backoff_retry, poll_local, Txn};
use islands::wal::{Durability, FsDevice, LogDevice, LogFile};
use islands::{Abort, Error};

use crate::common::temp_dir;

const ACCOUNTS: u16 = 0;
const RECEIPTS: u16 = 1;
const BALANCE: Col = Col(0);
const FROM: Col = Col(0);
const TO: Col = Col(1);
const AMOUNT: Col = Col(2);

const N_ACCOUNTS: u64 = 64;
const INITIAL: i64 = 1_000;
const RECEIPTS_MAX: u64 = 1 << 20;

/// Set in the child's environment as `dir|seed|cycle`.
const CHILD_ENV: &str = "ISLANDS_CRASH_CHILD";
/// Every line the child means for the parent starts with this marker (the
/// test harness may print on the same line before it).
const MARK: &str = "@@";

fn tables() -> Vec<TableDef> {
    vec![
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            N_ACCOUNTS * 2,
            PrimaryKind::Hash,
        ),
        TableDef::new(
            "receipts",
            &[
                ("from", ColType::U64),
                ("to", ColType::U64),
                ("amount", ColType::I64),
            ],
            RECEIPTS_MAX,
            PrimaryKind::Ordered,
        ),
    ]
}

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

type Proc<'a, T> = Pin<Box<dyn Future<Output = Result<T, Abort>> + 'a>>;

/// Runs a procedure and acknowledges it only once `commit_durable` returns:
/// conflicts are retried, anything else is returned.
fn run_durable<T>(
    tx: &mut Txn,
    mut f: impl for<'a> FnMut(&'a mut Txn) -> Proc<'a, T>,
) -> Result<T, Abort> {
    let mut attempt = 0u32;
    loop {
        tx.begin(attempt > 0);
        match poll_local(f(tx)) {
            Ok(v) => match tx.commit_durable() {
                Ok(_) => return Ok(v),
                Err(Abort::Conflict(_)) => {}
                Err(e) => return Err(e),
            },
            Err(Abort::Conflict(_)) => tx.abort(),
            Err(e) => {
                tx.abort();
                return Err(e);
            }
        }
        attempt += 1;
        backoff_retry(attempt);
    }
}

/// Creates the accounts in one durable transaction unless recovery brought them back.
fn create_accounts(tx: &mut Txn) -> Result<(), Abort> {
    run_durable(tx, |tx| {
        Box::pin(async move {
            if tx.get(ACCOUNTS, 0).await?.is_some() {
                return Ok(());
            }
            for k in 0..N_ACCOUNTS {
                let h = tx.insert(ACCOUNTS, k).await?.ok_or(Abort::User("dup"))?;
                tx.row_mut(h).set_i64(BALANCE, INITIAL);
            }
            Ok(())
        })
    })
}

/// Moves `amount` from `from` to `to` and records receipt `id`.
fn transfer(tx: &mut Txn, id: u64, from: u64, to: u64, amount: i64) -> Result<(), Abort> {
    run_durable(tx, |tx| {
        Box::pin(async move {
            let r = tx
                .insert(RECEIPTS, id)
                .await?
                .ok_or(Abort::User("receipt id taken"))?;
            tx.row_mut(r).set_u64(FROM, from);
            tx.row_mut(r).set_u64(TO, to);
            tx.row_mut(r).set_i64(AMOUNT, amount);
            move_money(tx, from, to, amount).await
        })
    })
}

/// Deletes receipt `id` and moves its amount back.
fn cancel(tx: &mut Txn, id: u64) -> Result<(), Abort> {
    run_durable(tx, |tx| {
        Box::pin(async move {
            let r = tx
                .get_for_update(RECEIPTS, id)
                .await?
                .ok_or(Abort::User("receipt to cancel is missing"))?;
            let (from, to, amount) = {
                let row = tx.row(r);
                (row.u64(FROM), row.u64(TO), row.i64(AMOUNT))
            };
            tx.delete(r).await?;
            move_money(tx, to, from, amount).await
        })
    })
}

async fn move_money(tx: &mut Txn, from: u64, to: u64, amount: i64) -> Result<(), Abort> {
    let a = tx
        .get_for_update(ACCOUNTS, from)
        .await?
        .ok_or(Abort::User("no such account"))?;
    let b = tx
        .get_for_update(ACCOUNTS, to)
        .await?
        .ok_or(Abort::User("no such account"))?;
    let ba = tx.row(a).i64(BALANCE);
    tx.row_mut(a).set_i64(BALANCE, ba - amount);
    let bb = tx.row(b).i64(BALANCE);
    tx.row_mut(b).set_i64(BALANCE, bb + amount);
    Ok(())
}

/// The whole database as one transaction sees it.
#[derive(Debug, Default, PartialEq)]
struct State {
    balances: Vec<(u64, i64)>,
    receipts: Vec<(u64, (u64, u64, i64))>,
}

fn read_state(island: &Island) -> State {
    let mut tx = island.worker().unwrap();
    tx.execute(100, |tx| {
        Box::pin(async move {
            let mut s = State::default();
            for k in 0..N_ACCOUNTS {
                if let Some(h) = tx.get(ACCOUNTS, k).await? {
                    s.balances.push((k, tx.row(h).i64(BALANCE)));
                }
            }
            let n = tx
                .scan(RECEIPTS, 0, u64::MAX, RECEIPTS_MAX as usize, false)
                .await?;
            for i in 0..n {
                let h = tx.scan_row(i);
                let r = tx.row(h);
                s.receipts
                    .push((tx.key(h), (r.u64(FROM), r.u64(TO), r.i64(AMOUNT))));
            }
            Ok(s)
        })
    })
    .unwrap()
}

/// Checks the bank invariant: money is conserved and every account's balance
/// is explained by the receipts present. Returns a description of the first violation.
fn check_invariant(s: &State) -> Result<(), String> {
    if s.balances.len() as u64 != N_ACCOUNTS {
        return Err(format!(
            "{} of {N_ACCOUNTS} accounts present",
            s.balances.len()
        ));
    }
    let total: i64 = s.balances.iter().map(|(_, b)| b).sum();
    if total != INITIAL * N_ACCOUNTS as i64 {
        return Err(format!(
            "total balance {total}, expected {}",
            INITIAL * N_ACCOUNTS as i64
        ));
    }
    let mut expect: HashMap<u64, i64> = (0..N_ACCOUNTS).map(|k| (k, INITIAL)).collect();
    for (id, (from, to, amount)) in &s.receipts {
        let (Some(_), Some(_)) = (expect.get(from), expect.get(to)) else {
            return Err(format!("receipt {id:#x} names a missing account"));
        };
        *expect.get_mut(from).unwrap() -= amount;
        *expect.get_mut(to).unwrap() += amount;
    }
    for (k, b) in &s.balances {
        if expect[k] != *b {
            return Err(format!(
                "account {k} holds {b} but its receipts explain {} (a partial transaction)",
                expect[k]
            ));
        }
    }
    Ok(())
}

fn crash_config(cc: CcKind, workers: usize, dir: &Path, segment_bytes: u64) -> IslandConfig {
    let mut cfg = IslandConfig::new(cc, workers).durable(Durability::Sync, dir);
    cfg.segment_bytes = segment_bytes;
    cfg
}

// ---------------------------------------------------------------------------
// 1. A real crash: SIGKILL of a child process.

/// The child process of [`sigkill_recovery`]. Does nothing unless the parent
/// re-executed this binary with `ISLANDS_CRASH_CHILD` set.
#[test]
#[ignore = "the child of crash::sigkill_recovery; runs only when re-executed by it"]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let dir = PathBuf::from(parts.next().expect("dir"));
    let seed: u64 = parts.next().expect("seed").parse().expect("seed");
    let cycle: u64 = parts.next().expect("cycle").parse().expect("cycle");
    run_child(&dir, seed, cycle);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{line}").unwrap();
    out.flush().unwrap();
}

fn run_child(dir: &Path, seed: u64, cycle: u64) {
    let cc = if seed.is_multiple_of(2) {
        CcKind::Occ
    } else {
        CcKind::NoWait
    };
    let (island, report) = Island::open(crash_config(cc, 2, dir, 32 << 10), &tables()).unwrap();
    eprintln!("crash child (seed {seed}, cycle {cycle}, {cc}): {report}");
    create_accounts(&mut island.worker().unwrap()).unwrap();
    say("READY");

    // Nothing here stops on its own before the deadline: the parent kills us.
    let deadline = Instant::now() + Duration::from_secs(30);
    if !seed.is_multiple_of(3) {
        let island = island.clone();
        std::thread::spawn(move || {
            let mut r = rng(seed ^ 0xc4c4);
            for n in 1.. {
                std::thread::sleep(Duration::from_millis(10 + r() % 40));
                let rows = island.checkpoint().unwrap();
                say(&format!("CKPT {n} {rows}"));
            }
        });
    }
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let island = island.clone();
            std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut r = rng(seed ^ (cycle << 20) ^ (w << 8) ^ 0x5eed);
                let mut live: Vec<u64> = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline && n < RECEIPTS_MAX / 8 {
                    if !live.is_empty() && r().is_multiple_of(4) {
                        let id = live.swap_remove((r() % live.len() as u64) as usize);
                        // The intent comes first: a cancel that is durable but
                        // unacknowledged when the kill lands may take the receipt.
                        say(&format!("c {id}"));
                        cancel(&mut tx, id).unwrap();
                        say(&format!("C {id}"));
                    } else {
                        n += 1;
                        let id = (cycle << 48) | (w << 40) | n;
                        let from = r() % N_ACCOUNTS;
                        let to = (from + 1 + r() % (N_ACCOUNTS - 1)) % N_ACCOUNTS;
                        let amount = 1 + (r() % 100) as i64;
                        transfer(&mut tx, id, from, to, amount).unwrap();
                        say(&format!("T {id} {from} {to} {amount}"));
                        live.push(id);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // Not killed in time: the parent sees a normal exit and fails.
    std::process::exit(3);
}

/// Acknowledgements the parent read from its children, over all cycles.
#[derive(Default)]
struct Acks {
    transfers: HashMap<u64, (u64, u64, i64)>,
    cancels: HashSet<u64>,
    /// Cancels started but not acknowledged (at most one per worker is in flight).
    intents: HashSet<u64>,
    checkpoints: u64,
}

impl Acks {
    fn parse(&mut self, line: &str) {
        let Some(at) = line.find(MARK) else { return };
        let f: Vec<&str> = line[at + MARK.len()..].split_whitespace().collect();
        let num = |i: usize| -> u64 {
            f[i].parse()
                .unwrap_or_else(|_| panic!("bad ack line {line:?}"))
        };
        match f.first().copied() {
            Some("T") => {
                let prev = self
                    .transfers
                    .insert(num(1), (num(2), num(3), num(4) as i64));
                assert!(prev.is_none(), "transfer id acknowledged twice: {line}");
            }
            Some("c") => {
                assert!(
                    self.transfers.contains_key(&num(1)),
                    "cancel of an unknown receipt: {line}"
                );
                assert!(self.intents.insert(num(1)), "cancel started twice: {line}");
            }
            Some("C") => {
                assert!(
                    self.intents.remove(&num(1)),
                    "cancel acknowledged without intent: {line}"
                );
                assert!(
                    self.cancels.insert(num(1)),
                    "cancel acknowledged twice: {line}"
                );
            }
            Some("CKPT") => self.checkpoints += 1,
            Some("READY") => {}
            _ => panic!("unexpected line from the child: {line:?}"),
        }
    }
}

/// Spawns the child, waits until its accounts exist, lets it run `run_ms`,
/// kills it with SIGKILL and collects its complete acknowledgement lines.
fn run_and_kill(dir: &Path, seed: u64, cycle: u64, run_ms: u64, acks: &mut Acks) {
    use std::os::unix::process::ExitStatusExt;
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args(["--exact", "crash::child_entry", "--nocapture", "--ignored"])
        .env(CHILD_ENV, format!("{}|{seed}|{cycle}", dir.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut r = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                // A line cut by the kill has no newline: it was never a full ack.
                Ok(_) if !line.ends_with('\n') => break,
                Ok(_) => {
                    if line.contains(&format!("{MARK}READY")) {
                        let _ = ready_tx.send(());
                    }
                    lines.push(line.clone());
                }
            }
        }
        lines
    });
    if ready_rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("seed {seed} cycle {cycle}: the child never became ready");
    }
    std::thread::sleep(Duration::from_millis(run_ms));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let lines = reader.join().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "seed {seed} cycle {cycle}: the child ended before the kill: {status}"
    );
    for l in &lines {
        acks.parse(l);
    }
}

/// Recovers the directory in-process and checks it against the acknowledgements.
fn verify_recovered(dir: &Path, seed: u64, cycle: u64, acks: &mut Acks) {
    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, dir, 32 << 10), &tables()).unwrap();
    let s = read_state(&island);
    let ctx = format!("seed {seed} cycle {cycle} ({report})");
    check_invariant(&s).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let present: HashMap<u64, (u64, u64, i64)> = s.receipts.iter().copied().collect();
    assert!(
        acks.intents.len() <= 2,
        "{ctx}: more cancels in flight than workers: {:?}",
        acks.intents
    );
    // An unacknowledged cancel went either way; from now on its outcome is fixed.
    for id in std::mem::take(&mut acks.intents) {
        if !present.contains_key(&id) {
            acks.cancels.insert(id);
        }
    }
    for (id, r) in &acks.transfers {
        if acks.cancels.contains(id) {
            assert!(
                !present.contains_key(id),
                "{ctx}: receipt {id:#x} is back after its acknowledged cancel"
            );
        } else {
            assert_eq!(
                present.get(id),
                Some(r),
                "{ctx}: acknowledged transfer {id:#x} lost or changed"
            );
        }
    }
    for id in present.keys() {
        assert!(
            id >> 48 <= cycle && (id >> 40) & 0xff < 2,
            "{ctx}: receipt id {id:#x} was never generated"
        );
    }
    eprintln!(
        "crash seed {seed} cycle {cycle}: {} transfers and {} cancels acknowledged, \
         {} checkpoints; recovered {} receipts; {report}",
        acks.transfers.len(),
        acks.cancels.len(),
        acks.checkpoints,
        s.receipts.len()
    );
}

/// The "crash recovery as a real crash". Replay a failure with
/// `ISLANDS_CRASH_SEED=<seed> ISLANDS_CRASH_ROUNDS=1`.
#[test]
fn sigkill_recovery() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let base = env("ISLANDS_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            % 1_000_000
    });
    let rounds = env("ISLANDS_CRASH_ROUNDS").unwrap_or(10);
    for round in 0..rounds {
        let seed = base + round;
        eprintln!("crash round {round}: seed {seed} (replay: ISLANDS_CRASH_SEED={seed} ISLANDS_CRASH_ROUNDS=1)");
        let dir = temp_dir("crash");
        let mut r = rng(seed);
        // Every odd seed, and always the first round, crashes twice: recovery after recovery.
        let cycles = if round == 0 || seed % 2 == 1 { 2 } else { 1 };
        let mut acks = Acks::default();
        for cycle in 0..cycles {
            let run_ms = 50 + r() % 351;
            run_and_kill(&dir, seed, cycle, run_ms, &mut acks);
            verify_recovered(&dir, seed, cycle, &mut acks);
        }
        // A loaded machine may kill the child before its first
        // acknowledgement: crash it again, later, until it has made some.
        let mut cycle = cycles;
        while acks.transfers.is_empty() && cycle < cycles + 3 {
            run_and_kill(&dir, seed, cycle, 2_000, &mut acks);
            verify_recovered(&dir, seed, cycle, &mut acks);
            cycle += 1;
        }
        assert!(
            !acks.transfers.is_empty(),
            "seed {seed}: the child acknowledged nothing; the test proved nothing"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

// ---------------------------------------------------------------------------
// 2. A corrupt log tail.

/// Frames of a segment: (offset, body).
fn frames(data: &[u8]) -> Vec<(usize, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 8 <= data.len() {
        let len = u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        if off + 8 + len > data.len() {
            break;
        }
        out.push((off, &data[off + 8..off + 8 + len]));
        off += 8 + len;
    }
    assert_eq!(off, data.len(), "segment has a partial frame before damage");
    out
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("wal-") && n.ends_with(".log")
        })
        .collect();
    v.sort();
    v
}

/// Commits `n` durable transfers with receipts 1..=n, one per log batch.
fn commit_transfers(dir: &Path, n: u64) {
    let (island, _) = Island::open(crash_config(CcKind::Occ, 1, dir, 64 << 20), &tables()).unwrap();
    let mut tx = island.worker().unwrap();
    create_accounts(&mut tx).unwrap();
    for id in 1..=n {
        transfer(
            &mut tx,
            id,
            id % N_ACCOUNTS,
            (id * 7 + 1) % N_ACCOUNTS,
            id as i64,
        )
        .unwrap();
    }
    drop(tx);
    island.shutdown();
}

fn corrupt_tail(damage: impl FnOnce(&mut Vec<u8>, usize, usize)) {
    let dir = temp_dir("crash-tail");
    let n = 20;
    commit_transfers(&dir, n);
    let segs = segments(&dir);
    let last = segs.last().unwrap();
    let mut data = std::fs::read(last).unwrap();
    let (off, body) = *frames(&data).last().unwrap();
    assert_eq!(body[0], 0x02, "the last record should be the last commit");
    let body_len = body.len();
    damage(&mut data, off, body_len);
    std::fs::write(last, &data).unwrap();
    // The island shut down cleanly, so its `SYNCED` mark covers the last
    // record, and damage below the mark is refused, not cut. A crash leaves
    // the mark up to a second behind the log; removing it stands for a
    // crash before the writer's first mark.
    std::fs::remove_file(dir.join("SYNCED")).unwrap();

    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, &dir, 64 << 20), &tables()).unwrap();
    let t = report
        .truncated
        .clone()
        .unwrap_or_else(|| panic!("damage not reported: {report}"));
    assert!(
        t.contains(&format!("offset {off}")),
        "truncation should name offset {off}: {t}"
    );
    let s = read_state(&island);
    check_invariant(&s).unwrap();
    let ids: Vec<u64> = s.receipts.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (1..n).collect::<Vec<_>>(),
        "exactly the transactions before the bad record"
    );
    assert_eq!(
        std::fs::metadata(last).unwrap().len(),
        off as u64,
        "segment cut at the bad record"
    );
    drop(island);
    // The log stays usable after the cut: new commits recover too.
    commit_transfers(&dir, 0);
    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, &dir, 64 << 20), &tables()).unwrap();
    assert!(report.truncated.is_none(), "second recovery: {report}");
    assert_eq!(read_state(&island), s);
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn torn_last_record_is_cut() {
    corrupt_tail(|data, off, len| data.truncate(off + 8 + len / 2));
}

#[test]
fn flipped_byte_in_last_record_is_cut() {
    corrupt_tail(|data, off, len| data[off + 8 + len - 3] ^= 0x40);
}

// ---------------------------------------------------------------------------
// 3. A failed fdatasync.

struct FailingDevice {
    fail_sync: Arc<AtomicBool>,
}

struct FailingFile {
    inner: Box<dyn LogFile>,
    fail_sync: Arc<AtomicBool>,
}

const INJECTED: &str = "injected fdatasync failure";

impl LogFile for FailingFile {
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> std::io::Result<()> {
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(std::io::Error::other(INJECTED));
        }
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
}

impl LogDevice for FailingDevice {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn LogFile>> {
        Ok(Box::new(FailingFile {
            inner: FsDevice.create(path)?,
            fail_sync: Arc::clone(&self.fail_sync),
        }))
    }
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn LogFile>> {
        Ok(Box::new(FailingFile {
            inner: FsDevice.open_append(path)?,
            fail_sync: Arc::clone(&self.fail_sync),
        }))
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        FsDevice.sync_dir(dir)
    }
}

fn assert_log_failed(r: Result<(), Abort>, what: &str) {
    match r {
        Err(Abort::Failed(Error::LogFailed(m))) => {
            assert!(
                m.contains(INJECTED) && m.contains("fdatasync"),
                "{what}: the error should name the failure: {m}"
            );
        }
        Ok(()) => panic!("{what}: reported success after the log failed"),
        Err(e) => panic!("{what}: wrong error: {e}"),
    }
}

#[test]
fn failed_fdatasync_refuses_writes() {
    let dir = temp_dir("crash-fsync");
    let fail_sync = Arc::new(AtomicBool::new(false));
    let mut cfg = crash_config(CcKind::NoWait, 2, &dir, 64 << 20);
    cfg.device = Some(Arc::new(FailingDevice {
        fail_sync: Arc::clone(&fail_sync),
    }));
    let (island, _) = Island::open(cfg, &tables()).unwrap();
    let mut tx = island.worker().unwrap();
    create_accounts(&mut tx).unwrap();
    for id in 1..=5 {
        transfer(&mut tx, id, 1, 2, 10).unwrap();
    }

    fail_sync.store(true, Ordering::SeqCst);
    // In flight when fdatasync fails: its commit must not be acknowledged.
    assert_log_failed(transfer(&mut tx, 6, 1, 2, 10), "commit_durable in flight");
    assert!(island.wal().unwrap().failed().is_some());
    // Later writers are refused at commit, before anything is installed.
    let mut other = island.worker().unwrap();
    assert_log_failed(transfer(&mut other, 7, 3, 4, 10), "a later writer");
    fail_sync.store(false, Ordering::SeqCst);
    assert_log_failed(transfer(&mut tx, 8, 3, 4, 10), "after the device recovers");
    drop(other);
    drop(tx);
    // Readers still work; the refused transactions left nothing behind.
    let s = read_state(&island);
    let ids: Vec<u64> = s.receipts.iter().map(|(id, _)| *id).collect();
    assert!(
        !ids.contains(&7) && !ids.contains(&8),
        "refused commits installed rows: {ids:?}"
    );
    drop(island);

    // What was acknowledged survives.
    let (island, report) =
        Island::open(crash_config(CcKind::NoWait, 1, &dir, 64 << 20), &tables()).unwrap();
    let s = read_state(&island);
    check_invariant(&s).unwrap_or_else(|e| panic!("{report}: {e}"));
    let ids: Vec<u64> = s.receipts.iter().map(|(id, _)| *id).collect();
    for id in 1..=5 {
        assert!(ids.contains(&id), "acknowledged receipt {id} lost: {ids:?}");
    }
    assert!(!ids.contains(&7) && !ids.contains(&8), "{ids:?}");
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// 4. Checkpoints while workers run.

#[test]
fn checkpoint_while_running() {
    let dir = temp_dir("crash-ckpt");
    let per_worker = 600u64;
    let segment_bytes = 4 << 10;
    let (island, _) =
        Island::open(crash_config(CcKind::Occ, 2, &dir, segment_bytes), &tables()).unwrap();
    create_accounts(&mut island.worker().unwrap()).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let island = island.clone();
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut r = rng(w + 99);
                let mut live = Vec::new();
                for n in 1..=per_worker {
                    if !live.is_empty() && r().is_multiple_of(4) {
                        let id = live.swap_remove((r() % live.len() as u64) as usize);
                        cancel(&mut tx, id).unwrap();
                    } else {
                        let id = (w << 40) | n;
                        let from = r() % N_ACCOUNTS;
                        let to = (from + 1 + r() % (N_ACCOUNTS - 1)) % N_ACCOUNTS;
                        transfer(&mut tx, id, from, to, 1 + (r() % 50) as i64).unwrap();
                        live.push(id);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let total = 2 * per_worker;
    let mut dropped = 0;
    for k in 1..=2 {
        while done.load(Ordering::Relaxed) < total * k / 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let before = island.wal().unwrap().segments().len();
        island.checkpoint().unwrap();
        let after = island.wal().unwrap().segments().len();
        assert!(before > 1, "segments should have rolled: {before}");
        assert!(
            after < before,
            "checkpoint {k} dropped no segments ({before} -> {after})"
        );
        // The checkpoint deleted the files of the segments it dropped. The
        // workers go on writing, so the log may be rolling over to a file
        // it does not list yet: only files older than its first are stale
        // (names sort by first batch).
        let listed = island.wal().unwrap().segments();
        let on_disk = segments(&dir);
        assert!(
            on_disk.iter().all(|f| f >= &listed[0]) && listed.iter().all(|f| on_disk.contains(f)),
            "segment files on disk: {on_disk:?}, the log lists {listed:?}"
        );
        dropped += before - after;
    }
    for w in workers {
        w.join().unwrap();
    }
    let live = read_state(&island);
    check_invariant(&live).unwrap();
    island.shutdown();
    drop(island);

    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, &dir, segment_bytes), &tables()).unwrap();
    assert!(report.truncated.is_none(), "{report}");
    assert!(report.checkpoint_rows > N_ACCOUNTS, "{report}");
    assert!(
        report.log_records < total,
        "the checkpoint should replace part of the log: {report}"
    );
    let s = read_state(&island);
    check_invariant(&s).unwrap_or_else(|e| panic!("{report}: {e}"));
    assert_eq!(
        s, live,
        "recovered state differs from the state at shutdown"
    );
    eprintln!("checkpoint_while_running: {dropped} segments dropped; {report}");
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// 5. A key deleted by one worker and inserted again by another.

/// Replay orders a row's versions by tid, so a re-insert must get a larger tid
/// than the delete before it, even when another worker, whose own tids are
/// far behind, runs the insert.
#[test]
fn reinsert_after_delete_by_another_worker_recovers() {
    let dir = temp_dir("crash-reinsert");
    let (island, _) =
        Island::open(crash_config(CcKind::Occ, 2, &dir, 64 << 20), &tables()).unwrap();
    let mut a = island.worker().unwrap();
    let mut b = island.worker().unwrap();
    create_accounts(&mut a).unwrap();
    // Worker a's tids run far ahead of worker b's.
    for id in 1..=50 {
        transfer(&mut a, id, 1, 2, 1).unwrap();
    }
    cancel(&mut a, 7).unwrap();
    // Worker b has committed nothing; it re-inserts receipt 7 on fresh accounts' rows.
    transfer(&mut b, 7, 3, 4, 5).unwrap();
    drop((a, b));
    let live = read_state(&island);
    check_invariant(&live).unwrap();
    island.shutdown();
    drop(island);

    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, &dir, 64 << 20), &tables()).unwrap();
    let s = read_state(&island);
    assert_eq!(s, live, "recovered state differs ({report})");
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// 6. Replay order.

/// Replay applies a logged write only if its tid is newer than the row's (or
/// than the tid that deleted the key), so the state recovered does not depend
/// on the order of the batches in the log: here the newer transaction's batch
/// comes first. After recovery, new commits take tids above every recovered
/// one, so they survive the next recovery too.
#[test]
fn replay_keeps_the_newest_version_whatever_the_log_order() {
    use islands::storage::schema::row_bytes;
    use islands::wal::{LogBuffer, Wal, WalConfig};
    let dir = temp_dir("crash-order");
    {
        // The island's identity, so that it opens the directory as its own.
        let mut cfg = WalConfig::new(&dir, Durability::Sync);
        cfg.identity = crash_config(CcKind::Occ, 1, &dir, 64 << 20).log_identity(&tables());
        let (wal, _) = Wal::open(cfg).unwrap();
        let mut buf = LogBuffer::new();
        buf.commit_begin(9);
        buf.put(ACCOUNTS, 1, row_bytes(&[900]));
        buf.delete(RECEIPTS, 5);
        buf.record_end();
        wal.submit(&mut buf).unwrap();
        // An older transaction's batch, handed to the log later.
        buf.commit_begin(4);
        buf.put(ACCOUNTS, 1, row_bytes(&[400]));
        buf.put(RECEIPTS, 5, row_bytes(&[1, 2, 3]));
        buf.record_end();
        let seq = wal.submit(&mut buf).unwrap();
        wal.wait_durable(seq).unwrap();
    }
    let balance = |island: &Island| {
        let mut tx = island.worker().unwrap();
        tx.execute(0, |tx| {
            Box::pin(async move {
                let a = tx.get(ACCOUNTS, 1).await?.map(|h| tx.row(h).i64(BALANCE));
                let r = tx.get(RECEIPTS, 5).await?.is_some();
                Ok((a, r))
            })
        })
        .unwrap()
    };
    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, &dir, 64 << 20), &tables()).unwrap();
    assert_eq!(
        balance(&island),
        (Some(900), false),
        "the older batch replayed over the newer one ({report})"
    );
    // A new commit after recovery must replay over the recovered versions.
    let mut tx = island.worker().unwrap();
    run_durable(&mut tx, |tx| {
        Box::pin(async move {
            let h = tx.get_for_update(ACCOUNTS, 1).await?.unwrap();
            tx.row_mut(h).set_i64(BALANCE, 950);
            Ok(())
        })
    })
    .unwrap();
    drop(tx);
    island.shutdown();
    drop(island);
    let (island, report) =
        Island::open(crash_config(CcKind::Occ, 1, &dir, 64 << 20), &tables()).unwrap();
    assert_eq!(balance(&island), (Some(950), false), "{report}");
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// 7. Updates logged as patches of the words they changed.

/// Wide rows updated in one column, in scattered columns (several patches of
/// one row in one record), in every column (a whole image), written back
/// unchanged, re-inserted after a delete, with a checkpoint in the middle
/// (so some patches replay over checkpoint images at or after their tid):
/// the recovered table equals a model kept beside it.
#[test]
fn updates_logged_as_patches_recover_exactly() {
    const WIDE: u16 = 0;
    const COLS: usize = 24;
    const KEYS: u64 = 40;
    let names: Vec<String> = (0..COLS).map(|c| format!("c{c}")).collect();
    let cols: Vec<(&str, ColType)> = names.iter().map(|n| (n.as_str(), ColType::I64)).collect();
    let defs = vec![TableDef::new("wide", &cols, 256, PrimaryKind::Hash)];
    let insert_row = |tx: &mut Txn, k: u64, row: [i64; COLS]| {
        run_durable(tx, |tx| {
            Box::pin(async move {
                let h = tx.insert(WIDE, k).await?.expect("a free key");
                let mut r = tx.row_mut(h);
                for (c, v) in row.iter().enumerate() {
                    r.set_i64(Col(c as u16), *v);
                }
                Ok(())
            })
        })
        .unwrap()
    };
    let dir = temp_dir("crash-patch");
    let mut model: HashMap<u64, [i64; COLS]> = HashMap::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    {
        let (island, _) =
            Island::open(crash_config(CcKind::NoWait, 1, &dir, 1 << 20), &defs).unwrap();
        let mut tx = island.worker().unwrap();
        for k in 0..KEYS {
            let row: [i64; COLS] = std::array::from_fn(|c| (k * 100 + c as u64) as i64);
            insert_row(&mut tx, k, row);
            model.insert(k, row);
        }
        for step in 0..600u64 {
            if step == 300 {
                island.checkpoint().unwrap();
            }
            let k = next() % KEYS;
            let kind = next() % 6;
            let mut row = model[&k];
            let changed: Vec<usize> = match kind {
                0 => vec![(next() % COLS as u64) as usize],
                1 => vec![0, COLS - 1],
                2 => vec![1, 7, 13, 19, 23],
                3 => (0..COLS).collect(),
                4 => vec![],
                _ => {
                    // Delete, then insert again (two transactions).
                    let del = model.remove(&k).expect("present");
                    run_durable(&mut tx, |tx| {
                        Box::pin(async move {
                            let h = tx.get_for_update(WIDE, k).await?.expect("present");
                            tx.delete(h).await
                        })
                    })
                    .unwrap();
                    let again: [i64; COLS] = std::array::from_fn(|c| del[c] + 1_000_000);
                    insert_row(&mut tx, k, again);
                    model.insert(k, again);
                    continue;
                }
            };
            for &c in &changed {
                row[c] = (next() % 1_000_000) as i64;
            }
            run_durable(&mut tx, |tx| {
                Box::pin(async move {
                    let h = tx.get_for_update(WIDE, k).await?.expect("present");
                    let mut r = tx.row_mut(h);
                    for (c, v) in row.iter().enumerate() {
                        r.set_i64(Col(c as u16), *v);
                    }
                    Ok(())
                })
            })
            .unwrap();
            model.insert(k, row);
        }
        drop(tx);
        island.shutdown();
    }
    let (island, report) =
        Island::open(crash_config(CcKind::NoWait, 1, &dir, 1 << 20), &defs).unwrap();
    let mut tx = island.worker().unwrap();
    for k in 0..KEYS {
        let got = tx
            .execute(0, |tx| {
                Box::pin(async move {
                    let h = tx.get(WIDE, k).await?;
                    Ok(h.map(|h| {
                        let r = tx.row(h);
                        std::array::from_fn::<i64, COLS, _>(|c| r.i64(Col(c as u16)))
                    }))
                })
            })
            .unwrap();
        assert_eq!(
            got.as_ref(),
            model.get(&k),
            "key {k} after recovery ({report})"
        );
    }
    drop(tx);
    drop(island);
    std::fs::remove_dir_all(&dir).unwrap();
}
