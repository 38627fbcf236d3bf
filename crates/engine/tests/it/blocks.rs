//! Interactive transactions (blocks) and statements run as transactions of
//! their own: a block's statements commit together or not at all, a failed
//! statement aborts its block and frees its locks, a statement waits for a
//! row another block holds (and fails with a deadlock past the timeout),
//! concurrent blocks keep the bank's total, committed blocks survive a
//! SIGKILL whole and the others leave nothing, and a shutdown ends idle
//! blocks.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::api::{
    Block, CallError, CancelFlag, Catalog, Client, Deployment, Options, Partition, ProcDef,
    ProcFuture, Row, Statement, Type, Value,
};
use islands::proc::rng::FastRng;
use islands::storage::{Col, ColType, PrimaryKind, TableDef, TableId};
use islands::txn::Txn;
use islands::Abort;

use crate::common::{
    balance_proc, load_site_accounts, site_accounts, site_options as spec, temp_dir, BAL, INITIAL,
    PER_SITE, SITES,
};

const ACCOUNTS: TableId = 0;
const MARKS: TableId = 1;
const N: u64 = SITES * PER_SITE;

/// Accounts spread over the sites (100 per site), and marks that blocks
/// insert (a mark's site is its key's low two bits).
fn catalog() -> Catalog {
    let mut c = Catalog::new();
    assert_eq!(site_accounts(&mut c, 1 << 12), ACCOUNTS);
    let m = c.table(
        TableDef::new(
            "marks",
            &[("block", ColType::I64)],
            1 << 16,
            PrimaryKind::Hash,
        ),
        Partition::BySite(|k| (k % SITES) as u32),
    );
    assert_eq!(m, MARKS);
    c.procedure(
        ProcDef::new("deposit", |tx, a, out| {
            Box::pin(async move {
                let b = add(tx, a.int(0) as u64, a.int(1)).await?;
                out.push(vec![Value::Int(b)]);
                Ok(())
            })
        })
        .param("account", Type::Int)
        .param("amount", Type::Int)
        .column("balance", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(balance_proc(ACCOUNTS)).unwrap();
    c.procedure(
        ProcDef::new("mark", |tx, a, _| {
            Box::pin(async move {
                let key = a.int(0) as u64;
                let h = tx
                    .insert(MARKS, key)
                    .await?
                    .ok_or(Abort::User("mark exists"))?;
                tx.row_mut(h).set_i64(Col(0), a.int(1));
                Ok(())
            })
        })
        .param("key", Type::Int)
        .param("block", Type::Int)
        .home_by(0, MARKS),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("has_mark", |tx, a, out| {
            Box::pin(async move {
                let found = tx.get(MARKS, a.int(0) as u64).await?.is_some();
                out.push(vec![Value::Int(found as i64)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .column("found", Type::Int)
        .home_by(0, MARKS),
    )
    .unwrap();
    c
}

/// Adds `amount` to account `key` (locked for update); its new balance.
async fn add(tx: &mut Txn, key: u64, amount: i64) -> Result<i64, Abort> {
    let h = tx
        .get_for_update(ACCOUNTS, key)
        .await?
        .ok_or(Abort::User("no such account"))?;
    let b = tx.row(h).i64(BAL) + amount;
    tx.row_mut(h).set_i64(BAL, b);
    Ok(b)
}

/// A statement: adds `amount` to account `key`, answering the new balance.
struct Add {
    key: u64,
    amount: i64,
}

impl Statement for Add {
    fn run<'a>(&'a self, tx: &'a mut Txn, out: &'a mut Vec<Row>) -> ProcFuture<'a> {
        Box::pin(async move {
            let b = add(tx, self.key, self.amount).await?;
            out.push(vec![Value::Int(b)]);
            Ok(())
        })
    }

    fn name(&self) -> &str {
        "add"
    }
}

fn add_stmt(key: u64, amount: i64) -> Arc<dyn Statement> {
    Arc::new(Add { key, amount })
}

/// A statement: moves `amount` from account `from` to account `to`, locking
/// `from` first.
struct Move {
    from: u64,
    to: u64,
    amount: i64,
}

impl Statement for Move {
    fn run<'a>(&'a self, tx: &'a mut Txn, _: &'a mut Vec<Row>) -> ProcFuture<'a> {
        Box::pin(async move {
            add(tx, self.from, -self.amount).await?;
            add(tx, self.to, self.amount).await?;
            Ok(())
        })
    }
}

/// A statement that fails on purpose.
struct Refuse;

impl Statement for Refuse {
    fn run<'a>(&'a self, _: &'a mut Txn, _: &'a mut Vec<Row>) -> ProcFuture<'a> {
        Box::pin(async move { Err(Abort::User("refused on purpose")) })
    }
}

fn open(o: Options) -> Deployment {
    Deployment::open(o, catalog(), |load| load_site_accounts(load, ACCOUNTS)).unwrap()
}

/// Runs a future to its end on this thread.
fn wait<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let std::task::Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "a block's operation did not finish"
        );
        std::thread::yield_now();
    }
}

fn balance(c: &Client, key: u64) -> i64 {
    c.call("balance", &[Value::Int(key as i64)]).unwrap()[0][0]
        .as_int()
        .unwrap()
}

fn total(c: &Client) -> i64 {
    (0..N).map(|k| balance(c, k)).sum()
}

fn deposit(b: &mut Block, key: u64, amount: i64) -> Result<Vec<Row>, CallError> {
    wait(b.call(
        "deposit",
        vec![Value::Int(key as i64), Value::Int(amount)],
        None,
    ))
}

/// Accounts on different islands (when there are two): the first of site 0
/// and the first of the last site.
fn far_accounts(c: &Client) -> (u64, u64) {
    let (a, b) = (0, (SITES - 1) * PER_SITE);
    let (ia, ib) = (c.island_of(ACCOUNTS, a), c.island_of(ACCOUNTS, b));
    assert!(ia.is_some() && ib.is_some());
    (a, b)
}

fn commit_all_and_roll_back_all(islands: u32) {
    let db = open(spec(islands, "off", None));
    let c = db.client();
    let (a, b) = far_accounts(&c);
    if islands == 2 {
        assert_ne!(c.island_of(ACCOUNTS, a), c.island_of(ACCOUNTS, b));
    }
    let mut model: Vec<i64> = vec![INITIAL; N as usize];
    // Committed: a call and statements homed on both islands.
    let mut blk = c.begin();
    assert_eq!(
        deposit(&mut blk, a, -30).unwrap(),
        vec![vec![Value::Int(970)]]
    );
    let rows = wait(blk.run(add_stmt(b, 30), c.island_of(ACCOUNTS, b), None)).unwrap();
    assert_eq!(rows, vec![vec![Value::Int(1030)]]);
    // A statement sees the block's own writes.
    let rows = wait(blk.run(add_stmt(a, -5), None, None)).unwrap();
    assert_eq!(rows, vec![vec![Value::Int(965)]]);
    deposit(&mut blk, a + 1, 5).unwrap();
    wait(blk.commit()).unwrap();
    model[a as usize] -= 35;
    model[b as usize] += 30;
    model[a as usize + 1] += 5;
    // Rolled back: nothing of it stays, on either island.
    let mut blk = c.begin();
    deposit(&mut blk, b, 500).unwrap();
    wait(blk.run(add_stmt(a, -500), None, None)).unwrap();
    deposit(&mut blk, a + 2, 7).unwrap();
    assert!(!blk.is_aborted());
    wait(blk.rollback()).unwrap();
    // Dropped without an ending: rolled back too.
    let mut blk = c.begin();
    deposit(&mut blk, b + 1, 11).unwrap();
    drop(blk);
    for k in 0..N {
        // The dropped block's rollback may still be on its way: a call that
        // meets its lock is retried by the engine.
        assert_eq!(balance(&c, k), model[k as usize], "account {k}");
    }
    db.shutdown().unwrap();
}

#[test]
fn a_block_commits_all_of_its_statements_or_none_on_one_island() {
    commit_all_and_roll_back_all(1);
}

#[test]
fn a_block_commits_all_of_its_statements_or_none_across_two_islands() {
    commit_all_and_roll_back_all(2);
}

#[test]
fn a_failed_statement_aborts_its_block_and_frees_its_locks_at_once() {
    for islands in [1, 2] {
        let mut o = spec(islands, "off", None);
        // A call that met a lock would fail at its first conflict.
        o.max_attempts = 1;
        let db = open(o);
        let c = db.client();
        let (a, b) = far_accounts(&c);
        let mut blk = c.begin();
        deposit(&mut blk, a, 100).unwrap();
        wait(blk.run(add_stmt(b, 100), None, None)).unwrap();
        let e = wait(blk.run(Arc::new(Refuse), None, None)).unwrap_err();
        assert!(
            matches!(&e, CallError::Rollback { why, .. } if why == "refused on purpose"),
            "{e}"
        );
        assert!(blk.is_aborted());
        // Later statements are refused without running.
        assert_eq!(deposit(&mut blk, a + 3, 1).unwrap_err(), e);
        // Its locks are gone: calls get both rows at their first attempt.
        assert_eq!(
            c.call("deposit", &[Value::Int(a as i64), Value::Int(1)])
                .unwrap(),
            vec![vec![Value::Int(INITIAL + 1)]]
        );
        assert_eq!(
            c.call("deposit", &[Value::Int(b as i64), Value::Int(1)])
                .unwrap(),
            vec![vec![Value::Int(INITIAL + 1)]]
        );
        assert_eq!(balance(&c, a + 3), INITIAL);
        // A commit answers the abort; nothing of the block stays.
        assert_eq!(wait(blk.commit()).unwrap_err(), e);
        assert_eq!(balance(&c, a), INITIAL + 1);
        db.shutdown().unwrap();
    }
}

#[test]
fn a_block_waits_for_a_row_another_block_holds_then_goes_on() {
    let db = open(spec(1, "off", None));
    let c = db.client();
    let mut first = c.begin();
    deposit(&mut first, 7, 10).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let second = {
        let (c, done) = (c.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut blk = c.begin();
            let rows = deposit(&mut blk, 7, 20);
            done.store(true, Ordering::SeqCst);
            let rows = rows.unwrap();
            wait(blk.commit()).unwrap();
            rows
        })
    };
    // The second block's statement waits while the first holds the row.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !done.load(Ordering::SeqCst),
        "the second block did not wait"
    );
    wait(first.commit()).unwrap();
    // It then ran on the committed row.
    assert_eq!(second.join().unwrap(), vec![vec![Value::Int(INITIAL + 30)]]);
    assert_eq!(balance(&c, 7), INITIAL + 30);
    db.shutdown().unwrap();
}

#[test]
fn a_statement_that_wrote_before_it_met_a_lock_aborts_its_block_at_once() {
    let db = open(spec(1, "off", None));
    let c = db.client();
    let mut holder = c.begin();
    deposit(&mut holder, 2, 1).unwrap();
    let mut mover = c.begin();
    deposit(&mut mover, 5, 1).unwrap();
    // It locked and wrote account 1 before it met account 2's lock: it
    // cannot be run again as if it never ran, so it does not wait.
    let started = Instant::now();
    let e = wait(mover.run(
        Arc::new(Move {
            from: 1,
            to: 2,
            amount: 10,
        }),
        None,
        None,
    ))
    .unwrap_err();
    assert!(
        matches!(&e, CallError::Serialization { attempts: 1, .. }),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_millis(900), "it waited");
    assert!(mover.is_aborted());
    wait(holder.commit()).unwrap();
    assert_eq!(balance(&c, 1), INITIAL);
    assert_eq!(balance(&c, 2), INITIAL + 1);
    assert_eq!(balance(&c, 5), INITIAL);
    db.shutdown().unwrap();
}

#[test]
fn blocks_locking_two_rows_in_opposite_orders_end_in_one_deadlock() {
    let mut o = spec(1, "off", None);
    o.deadlock_timeout = Duration::from_millis(400);
    let db = open(o);
    let c = db.client();
    let mut x = c.begin();
    let mut y = c.begin();
    deposit(&mut x, 1, 1).unwrap();
    deposit(&mut y, 2, 2).unwrap();
    let xt = std::thread::spawn(move || {
        let r = deposit(&mut x, 2, 1);
        let aborted = x.is_aborted();
        let c = if r.is_ok() {
            Some(wait(x.commit()))
        } else {
            None
        };
        (r, aborted, c)
    });
    // y asks for x's row after x began waiting for y's.
    std::thread::sleep(Duration::from_millis(100));
    let ry = deposit(&mut y, 1, 2);
    let (rx, x_aborted, x_commit) = xt.join().unwrap();
    let deadlocks = [&rx, &ry]
        .iter()
        .filter(|r| matches!(r, Err(CallError::Deadlock { waited_ms }) if *waited_ms >= 400))
        .count();
    assert_eq!(deadlocks, 1, "x: {rx:?}, y: {ry:?}");
    // x waited first, so it times out first, and y gets its row.
    assert!(x_aborted && x_commit.is_none(), "x: {rx:?}");
    assert!(ry.is_ok(), "y: {ry:?}");
    wait(y.commit()).unwrap();
    assert_eq!(balance(&c, 1), INITIAL + 2);
    assert_eq!(balance(&c, 2), INITIAL + 2);
    db.shutdown().unwrap();
}

#[test]
fn concurrent_blocks_with_rollbacks_across_two_islands_keep_the_total() {
    let db = open(spec(2, "off", None));
    let c = db.client();
    let committed = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (c, committed) = (c.clone(), Arc::clone(&committed));
            std::thread::spawn(move || {
                let mut rng = FastRng::new(t + 1);
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut n = 0;
                while n < 150 && Instant::now() < deadline {
                    let from = rng.next_u64() % N;
                    let to = (from + 1 + rng.next_u64() % (N - 1)) % N;
                    let amount = 1 + (rng.next_u64() % 9) as i64;
                    let mut blk = c.begin();
                    let moved = deposit(&mut blk, from, -amount).and_then(|_| {
                        wait(blk.run(add_stmt(to, amount), c.island_of(ACCOUNTS, to), None))
                    });
                    match moved {
                        Ok(_) if rng.next_u64().is_multiple_of(4) => wait(blk.rollback()).unwrap(),
                        Ok(_) => match wait(blk.commit()) {
                            Ok(()) => {
                                committed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => assert!(e.is_retryable(), "{e}"),
                        },
                        Err(e) => {
                            assert!(e.is_retryable(), "{e}");
                            assert!(blk.is_aborted());
                            wait(blk.rollback()).unwrap();
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let committed = committed.load(Ordering::Relaxed);
    eprintln!("concurrent blocks: {committed} committed");
    assert!(committed > 0, "no block committed");
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

#[test]
fn a_statement_outside_a_block_is_a_transaction_of_its_own() {
    let db = open(spec(2, "off", None));
    let c = db.client();
    let (a, b) = far_accounts(&c);
    let rows = wait(c.run_async(add_stmt(b, 5), c.island_of(ACCOUNTS, b), None)).unwrap();
    assert_eq!(rows, vec![vec![Value::Int(INITIAL + 5)]]);
    // Homed anywhere, it reaches the row where it lives.
    let rows = wait(c.run_async(add_stmt(a, -5), None, None)).unwrap();
    assert_eq!(rows, vec![vec![Value::Int(INITIAL - 5)]]);
    let e = wait(c.run_async(Arc::new(Refuse), None, None)).unwrap_err();
    assert!(
        matches!(&e, CallError::Rollback { procedure, .. } if procedure == "statement"),
        "{e}"
    );
    let e = wait(c.run_async(add_stmt(a, 1), Some(9), None)).unwrap_err();
    assert!(matches!(e, CallError::BadArguments { .. }), "{e}");
    // Cancelled before it ran: nothing happens.
    let cancel = CancelFlag::new();
    cancel.cancel();
    let e = wait(c.run_async(add_stmt(a, 1), None, Some(&cancel))).unwrap_err();
    assert!(matches!(e, CallError::Canceled { .. }), "{e}");
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

#[test]
fn a_canceled_statement_fails_and_aborts_its_block() {
    let db = open(spec(1, "off", None));
    let c = db.client();
    let mut blk = c.begin();
    deposit(&mut blk, 3, 50).unwrap();
    let cancel = CancelFlag::new();
    cancel.cancel();
    let e = wait(blk.run(add_stmt(4, 50), None, Some(&cancel))).unwrap_err();
    assert!(matches!(e, CallError::Canceled { .. }), "{e}");
    assert!(blk.is_aborted());
    assert!(wait(blk.commit()).is_err());
    assert_eq!(balance(&c, 3), INITIAL);
    assert_eq!(balance(&c, 4), INITIAL);
    db.shutdown().unwrap();
}

#[test]
fn idle_blocks_on_one_worker_hold_their_own_slots_up_to_the_limit() {
    let mut o = spec(1, "off", None);
    o.spec.workers_per_island = Some(1);
    o.txns_per_worker = 16;
    o.blocks_per_worker = 64;
    let db = open(o);
    let c = db.client();
    let mut blocks: Vec<Block> = (0..64u64)
        .map(|k| {
            let mut b = c.begin();
            deposit(&mut b, k, 1).unwrap();
            b
        })
        .collect();
    // Calls still run beside 64 idle blocks.
    for k in 100..200 {
        assert_eq!(
            c.call("deposit", &[Value::Int(k), Value::Int(1)]).unwrap(),
            vec![vec![Value::Int(INITIAL + 1)]]
        );
    }
    // A 65th block is refused, naming the limit.
    let mut extra = c.begin();
    let e = deposit(&mut extra, 300, 1).unwrap_err();
    assert_eq!(
        e,
        CallError::TooManyBlocks {
            island: 0,
            limit: 64
        }
    );
    assert!(e.to_string().contains("blocks_per_worker"), "{e}");
    // An ended block frees its place.
    let b = blocks.pop().unwrap();
    wait(b.commit()).unwrap();
    let mut again = c.begin();
    // The place is given back when the executor closes the block.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match deposit(&mut again, 300, 1) {
            Ok(_) => break,
            Err(CallError::TooManyBlocks { .. }) if Instant::now() < deadline => {
                again = c.begin();
                std::thread::yield_now();
            }
            Err(e) => panic!("{e}"),
        }
    }
    wait(again.commit()).unwrap();
    for b in blocks {
        wait(b.rollback()).unwrap();
    }
    assert_eq!(balance(&c, 63), INITIAL + 1);
    assert_eq!(balance(&c, 0), INITIAL);
    db.shutdown().unwrap();
}

#[test]
fn shutdown_ends_idle_blocks_and_their_next_operation_hears_it() {
    for islands in [1, 2] {
        let db = open(spec(islands, "off", None));
        let c = db.client();
        let (a, b) = far_accounts(&c);
        let mut idle = c.begin();
        deposit(&mut idle, a, 1).unwrap();
        wait(idle.run(add_stmt(b, 1), None, None)).unwrap();
        let mut waiting = c.begin();
        let started = Instant::now();
        db.shutdown().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(deposit(&mut idle, a, 1).unwrap_err(), CallError::ShutDown);
        assert!(idle.is_aborted());
        assert_eq!(
            deposit(&mut waiting, a, 1).unwrap_err(),
            CallError::ShutDown
        );
        assert_eq!(wait(idle.commit()).unwrap_err(), CallError::ShutDown);
    }
}

#[test]
fn a_block_whose_remote_branch_idled_out_fails_at_commit() {
    let db = open(spec(2, "off", None));
    let c = db.client();
    let (a, b) = far_accounts(&c);
    let mut blk = c.begin();
    deposit(&mut blk, a, -9).unwrap();
    wait(blk.run(add_stmt(b, 9), None, None)).unwrap();
    // Longer than the participants' idle timer (1 s): b's branch is gone.
    std::thread::sleep(Duration::from_millis(1600));
    let e = wait(blk.commit()).unwrap_err();
    assert!(matches!(e, CallError::Serialization { .. }), "{e}");
    assert!(e.is_retryable());
    assert_eq!(balance(&c, a), INITIAL);
    assert_eq!(balance(&c, b), INITIAL);
    db.shutdown().unwrap();
}

const CHILD_ENV: &str = "ISLANDS_BLOCKS_CRASH_CHILD";
const MARK: &str = "@@";

/// The marks block `id` inserts: one per site, so on both islands.
fn marks_of(id: u64) -> [u64; 4] {
    std::array::from_fn(|j| id * SITES + j as u64)
}

/// Child of the SIGKILL test: blocks that insert marks on both islands and
/// commit, roll back, or stay open; each says how it ended once it did.
#[test]
#[ignore]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let db = open(spec(2, "sync", Some(&dir)));
    let say = |line: String| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{MARK}{line}").unwrap();
        out.flush().unwrap();
    };
    say("READY".into());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = db.client();
            std::thread::spawn(move || {
                let mut open_blocks = Vec::new();
                for n in 0u64.. {
                    let id = n * 4 + t;
                    let mut blk = c.begin();
                    let mut ok = true;
                    for key in marks_of(id) {
                        let args = vec![Value::Int(key as i64), Value::Int(id as i64)];
                        ok &= wait(blk.call("mark", args, None)).is_ok();
                    }
                    ok &= deposit(&mut blk, id % N, 1).is_ok();
                    if !ok {
                        continue;
                    }
                    let ended = match id % 3 {
                        0 => wait(blk.rollback()).is_ok().then_some("ROLLBACK"),
                        1 => wait(blk.commit()).is_ok().then_some("COMMIT"),
                        _ if open_blocks.len() < 8 => {
                            open_blocks.push(blk);
                            Some("OPEN")
                        }
                        _ => None,
                    };
                    if let Some(how) = ended {
                        say(format!("{how} {id}"));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

#[test]
fn after_a_sigkill_committed_blocks_are_whole_and_the_others_left_nothing() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let dir = temp_dir("blocks-crash");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "blocks::crash_child", "--nocapture", "--ignored"])
        .env(CHILD_ENV, &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut r = std::io::BufReader::new(stdout);
        let mut line = String::new();
        while matches!(r.read_line(&mut line), Ok(n) if n > 0) {
            if !line.ends_with('\n') {
                break;
            }
            if line.contains("@@READY") {
                let _ = ready_tx.send(());
            }
            lines.push(std::mem::take(&mut line));
        }
        lines
    });
    ready_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the child never became ready");
    std::thread::sleep(Duration::from_millis(600));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the child ended before the kill");
    let (mut committed, mut undone) = (Vec::new(), Vec::new());
    let mut highest = 0;
    for l in reader.join().unwrap() {
        let l = l.trim().trim_start_matches(MARK);
        let mut parts = l.split(' ');
        let (what, id) = (parts.next().unwrap(), parts.next());
        let Some(id) = id.map(|x| x.parse::<u64>().unwrap()) else {
            continue;
        };
        highest = highest.max(id);
        match what {
            "COMMIT" => committed.push(id),
            "ROLLBACK" | "OPEN" => undone.push(id),
            _ => {}
        }
    }
    assert!(
        !committed.is_empty() && !undone.is_empty(),
        "the child ended no block: the test proved nothing"
    );
    let db = Deployment::open(spec(2, "sync", Some(&dir)), catalog(), |_| {
        panic!("a database with a log is not loaded again")
    })
    .unwrap();
    let c = db.client();
    let marks = |id: u64| {
        marks_of(id)
            .iter()
            .filter(|&&k| {
                c.call("has_mark", &[Value::Int(k as i64)]).unwrap()[0][0] == Value::Int(1)
            })
            .count()
    };
    for &id in &committed {
        assert_eq!(marks(id), 4, "committed block {id} is not whole");
    }
    for &id in &undone {
        assert_eq!(marks(id), 0, "block {id} was not committed and left marks");
    }
    // Blocks in flight at the kill: all or nothing.
    for id in 0..highest + 8 {
        let m = marks(id);
        assert!(m == 0 || m == 4, "block {id} left {m} of its 4 marks");
    }
    // Each committed block deposited 1; no other money appeared.
    let extra: i64 = (0..N).map(|k| balance(&c, k) - INITIAL).sum();
    let whole = (0..highest + 8).filter(|&id| marks(id) == 4).count() as i64;
    assert_eq!(extra, whole);
    eprintln!(
        "blocks crash: {} committed and {} rolled back or open blocks checked, {whole} whole",
        committed.len(),
        undone.len()
    );
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

mod histories {
    //! The history checker over interactive transactions: concurrent blocks
    //! across two islands, each operation of a random transaction one
    //! statement, with rollbacks and the blocks' own aborts (conflicts,
    //! deadlock timeouts); the committed ones must form an acyclic
    //! dependency graph, and the rows left must be their last versions.

    use std::ops::Range;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use islands::api::{Catalog, Deployment, Partition, ProcFuture, Row, Statement};
    use islands::proc::rng::FastRng;
    use islands::storage::Col;
    use islands::txn::Txn;

    use super::{spec, wait};
    use crate::history::graph::Done;
    use crate::history::{
        base_seed, check, initial, per_worker, plan, rows, run, tables, Mix, Op, Rec, KEYS,
    };

    /// Keys per island: island 0 holds data keys 0..6, island 1 the rest,
    /// each tombstone with its key.
    const PER: u64 = KEYS / 2;

    /// One operation of a block's transaction, recording into the block's
    /// [`Rec`].
    struct HistOp {
        op: Op,
        rec: Arc<Mutex<Rec>>,
        home: Range<u64>,
        mix: Mix,
    }

    impl Statement for HistOp {
        fn run<'a>(&'a self, tx: &'a mut Txn, _: &'a mut Vec<Row>) -> ProcFuture<'a> {
            Box::pin(async move {
                let mut rec = std::mem::take(&mut *self.rec.lock().unwrap());
                let r = run(
                    tx,
                    std::slice::from_ref(&self.op),
                    &mut rec,
                    self.home.clone(),
                    self.mix,
                )
                .await;
                *self.rec.lock().unwrap() = rec;
                r
            })
        }
    }

    fn catalog() -> Catalog {
        let mut c = Catalog::new();
        let mut defs = tables().into_iter();
        for site in [
            (|k| (k / PER) as u32) as fn(u64) -> u32,
            |k| (k / PER) as u32,
            |k| ((k % KEYS) / PER) as u32,
        ] {
            c.table(defs.next().unwrap(), Partition::BySite(site));
        }
        c
    }

    #[test]
    fn concurrent_blocks_across_two_islands_give_serializable_histories() {
        let seed = base_seed();
        let mut o = spec(2, "off", None);
        o.spec.sites = Some(2);
        o.deadlock_timeout = std::time::Duration::from_millis(100);
        let db = Deployment::open(o, catalog(), |load| {
            for ((t, k), state) in initial() {
                if let (Some(g), true) = (state, load.owns(t, k)) {
                    load.put(t, k, |r| r.set_u64(Col(1), g))?;
                }
            }
            Ok(())
        })
        .unwrap();
        let c = db.client();
        let parts: Vec<Range<u64>> = vec![0..PER, PER..KEYS];
        let ids = Arc::new(AtomicU64::new(1));
        let seq = Arc::new(AtomicU64::new(0));
        let done: Arc<Mutex<Vec<Done>>> = Arc::default();
        let (mut rolled_back, mut failed) = (0, 0);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (c, ids, seq, done) = (c.clone(), ids.clone(), seq.clone(), done.clone());
                let parts = parts.clone();
                std::thread::spawn(move || {
                    let mut rng = FastRng::new(seed.wrapping_add(t));
                    let (mut rolled_back, mut failed) = (0, 0);
                    for n in 0..per_worker(80) {
                        let mix = if n % 2 == 0 { Mix::ALL } else { Mix::HOT };
                        let ops = plan(&mut rng, &parts, mix);
                        let home = parts[rng.below(2) as usize].clone();
                        let rec =
                            Arc::new(Mutex::new(Rec::new(ids.fetch_add(1, Ordering::Relaxed))));
                        let mut blk = c.begin();
                        let mut ok = true;
                        for op in &ops {
                            let stmt = Arc::new(HistOp {
                                op: op.clone(),
                                rec: Arc::clone(&rec),
                                home: home.clone(),
                                mix,
                            });
                            if wait(blk.run(stmt, Some((home.start / PER) as usize), None)).is_err()
                            {
                                ok = false;
                                break;
                            }
                        }
                        if !ok {
                            failed += 1;
                            wait(blk.rollback()).unwrap();
                        } else if rng.percent(20) {
                            rolled_back += 1;
                            wait(blk.rollback()).unwrap();
                        } else if wait(blk.commit()).is_ok() {
                            let rec = std::mem::take(&mut *rec.lock().unwrap());
                            let d = rec.done(seq.fetch_add(1, Ordering::Relaxed), &ops);
                            done.lock().unwrap().push(d);
                        } else {
                            failed += 1;
                        }
                    }
                    (rolled_back, failed)
                })
            })
            .collect();
        for t in threads {
            let (r, f) = t.join().unwrap();
            rolled_back += r;
            failed += f;
        }
        let done = std::mem::take(&mut *done.lock().unwrap());
        eprintln!(
            "blocks history: {} committed, {rolled_back} rolled back, {failed} aborted",
            done.len()
        );
        assert!(!done.is_empty() && rolled_back > 0);
        // A participant installs a commit when its decision arrives, which
        // may be after the client heard of it: the rows are read once every
        // executor settled.
        let islands = db.islands().to_vec();
        db.shutdown().unwrap();
        let left = rows(&islands);
        check("blocks across 2 islands", seed, &done, &left);
    }
}
