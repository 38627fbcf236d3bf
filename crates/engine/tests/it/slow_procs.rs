//! Slow stored procedures across islands: an executor's round lasts as long
//! as the procedures it polls, and no protocol timer may count that time
//! against a transaction or a peer that had no chance to answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use islands::api::{
    CallError, CallFuture, Catalog, Client, Deployment, Options, Partition, ProcDef, Type, Value,
};
use islands::deploy::{DeploySpec, Islands};
use islands::storage::{Col, ColType, PrimaryKind, TableDef, TableId};
use islands::txn::Txn;
use islands::Abort;

const ACCOUNTS: TableId = 0;
const BAL: Col = Col(0);
const PER_SITE: u64 = 100;
/// Four sites on two islands: accounts `0..200` on island 0, `200..400` on island 1.
const N: u64 = 4 * PER_SITE;
const INITIAL: i64 = 1000;

/// The procedure's work: the executor's thread is taken for `us`
/// microseconds (a sleep, so that tests on a small machine leave the cores
/// to the executors that answer).
fn work(us: i64) {
    std::thread::sleep(Duration::from_micros(us.max(0) as u64));
}

/// Gates of `gated_transfer`, each held closed until its test opens it,
/// and how many times each gate's procedure body began (one gate per test
/// case: the tests run at once).
static GATES: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];
static GATED_RUNS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// Holds the executor's thread until gate `g` opens (or a minute passes,
/// so that a failing test ends).
fn wait_for_gate(g: usize) {
    let until = Instant::now() + Duration::from_secs(60);
    while !GATES[g].load(Ordering::Acquire) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until the body of gate `g`'s procedure has begun `n` times.
fn wait_for_runs(g: usize, n: usize) {
    let until = Instant::now() + Duration::from_secs(20);
    while GATED_RUNS[g].load(Ordering::Acquire) < n {
        assert!(Instant::now() < until, "gate {g}'s procedure never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
}

async fn add(tx: &mut Txn, key: u64, amount: i64) -> Result<i64, Abort> {
    let h = tx
        .get_for_update(ACCOUNTS, key)
        .await?
        .ok_or(Abort::User("no such account"))?;
    let b = tx.row(h).i64(BAL) + amount;
    tx.row_mut(h).set_i64(BAL, b);
    Ok(b)
}

fn catalog() -> Catalog {
    let mut c = Catalog::new();
    let t = c.table(
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            1 << 12,
            PrimaryKind::Ordered,
        ),
        Partition::BySite(|k| (k / PER_SITE) as u32),
    );
    assert_eq!(t, ACCOUNTS);
    // Moves `amount` from `from` to `to`, then works `us` microseconds.
    c.procedure(
        ProcDef::new("slow_transfer", |tx, a, _| {
            Box::pin(async move {
                add(tx, a.int(0) as u64, -a.int(2)).await?;
                add(tx, a.int(1) as u64, a.int(2)).await?;
                work(a.int(3));
                Ok(())
            })
        })
        .param("from", Type::Int)
        .param("to", Type::Int)
        .param("amount", Type::Int)
        .param("us", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    // Moves `amount` from `from` to `to`, then holds its executor until
    // gate `gate` opens.
    c.procedure(
        ProcDef::new("gated_transfer", |tx, a, _| {
            Box::pin(async move {
                let g = a.int(3) as usize;
                GATED_RUNS[g].fetch_add(1, Ordering::AcqRel);
                add(tx, a.int(0) as u64, -a.int(2)).await?;
                add(tx, a.int(1) as u64, a.int(2)).await?;
                wait_for_gate(g);
                Ok(())
            })
        })
        .param("from", Type::Int)
        .param("to", Type::Int)
        .param("amount", Type::Int)
        .param("gate", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    // Reads `home`, works `us` microseconds, then reads `other`.
    c.procedure(
        ProcDef::new("work_then_read", |tx, a, out| {
            Box::pin(async move {
                let mut sum = 0;
                for (i, key) in [a.int(0), a.int(1)].into_iter().enumerate() {
                    if i == 1 {
                        work(a.int(2));
                    }
                    let h = tx
                        .get(ACCOUNTS, key as u64)
                        .await?
                        .ok_or(Abort::User("no such account"))?;
                    sum += tx.row(h).i64(BAL);
                }
                out.push(vec![Value::Int(sum)]);
                Ok(())
            })
        })
        .param("home", Type::Int)
        .param("other", Type::Int)
        .param("us", Type::Int)
        .column("sum", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    // Takes `from` and `to` for update, works `us` microseconds, and rolls back.
    c.procedure(
        ProcDef::new("slow_rollback", |tx, a, _| {
            Box::pin(async move {
                add(tx, a.int(0) as u64, -1).await?;
                add(tx, a.int(1) as u64, 1).await?;
                work(a.int(2));
                Err(Abort::User("changed my mind"))
            })
        })
        .param("from", Type::Int)
        .param("to", Type::Int)
        .param("us", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    // Reads `key`, then awaits a future that no executor wakes.
    c.procedure(
        ProcDef::new("foreign_await", |tx, a, _| {
            Box::pin(async move {
                add(tx, a.int(0) as u64, 1).await?;
                std::future::pending::<()>().await;
                Ok(())
            })
        })
        .param("key", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("total", |tx, _, out| {
            Box::pin(async move {
                let mut total = 0;
                for k in 0..N {
                    if let Some(h) = tx.get(ACCOUNTS, k).await? {
                        total += tx.row(h).i64(BAL);
                    }
                }
                out.push(vec![Value::Int(total)]);
                Ok(())
            })
        })
        .column("total", Type::Int),
    )
    .unwrap();
    c
}

/// Two islands of one executor each (so every slow procedure of an island
/// shares one round), `txns` transactions in flight per executor, and few
/// attempts per call: a call that keeps aborting fails fast instead of
/// hiding in retries.
fn open(txns: usize) -> Deployment {
    open_islands(2, txns)
}

fn open_islands(islands: u32, txns: usize) -> Deployment {
    open_with(islands, txns, 1024)
}

fn open_with(islands: u32, txns: usize, queue_depth: usize) -> Deployment {
    open_logged(islands, txns, queue_depth, None)
}

/// [`open_with`], with a `sync` log in `log_dir` if given.
fn open_logged(
    islands: u32,
    txns: usize,
    queue_depth: usize,
    log_dir: Option<&std::path::Path>,
) -> Deployment {
    let mut s = DeploySpec::new(Islands::Count(islands));
    s.durability = "off".into();
    if let Some(d) = log_dir {
        s.durability = "sync".into();
        s.log_dir = d.to_path_buf();
    }
    s.sites = Some(4);
    s.workers_per_island = Some(1);
    let mut o = Options::new(s);
    o.pin = false;
    o.txns_per_worker = txns;
    o.max_attempts = 8;
    o.queue_depth = queue_depth;
    Deployment::open(o, catalog(), |load| {
        for site in load.sites() {
            for k in site as u64 * PER_SITE..(site as u64 + 1) * PER_SITE {
                load.put(ACCOUNTS, k, |r| r.set_i64(BAL, INITIAL))?;
            }
        }
        Ok(())
    })
    .unwrap()
}

/// Polls every future to its end, one thread, as a minimal executor would.
fn wait_all(mut futs: Vec<CallFuture>, limit: Duration) -> Vec<Result<Vec<Vec<Value>>, CallError>> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut results: Vec<Option<_>> = futs.iter().map(|_| None).collect();
    let deadline = Instant::now() + limit;
    while results.iter().any(Option::is_none) {
        assert!(
            Instant::now() < deadline,
            "calls did not finish within {limit:?}"
        );
        for (f, r) in futs.iter_mut().zip(results.iter_mut()) {
            if r.is_none() {
                if let Poll::Ready(x) = Pin::new(f).poll(&mut cx) {
                    *r = Some(x);
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    results.into_iter().map(|r| r.unwrap()).collect()
}

fn total(c: &Client) -> i64 {
    c.call("total", &[]).unwrap()[0][0].as_int().unwrap()
}

/// `calls` transfers, each between accounts of its own (no two conflict),
/// homed on both islands and each reaching the other, working `us` each.
fn transfers(c: &Client, calls: i64, us: i64) -> Vec<CallFuture> {
    (0..calls)
        .map(|i| {
            // Even calls go from island 0 to island 1, odd ones back.
            let (from, to) = if i % 2 == 0 {
                (i / 2, 200 + i / 2)
            } else {
                (399 - i / 2, 199 - i / 2)
            };
            c.call_async(
                "slow_transfer",
                vec![
                    Value::Int(from),
                    Value::Int(to),
                    Value::Int(1),
                    Value::Int(us),
                ],
            )
        })
        .collect()
}

/// Issue 33, item 1: with 16 transactions per executor, a round of procedures
/// of 8–12 ms lasts longer than the prepare timeout. Every commit must count
/// from when it began, and the home branch's vote must not wait for the
/// round's timers: all commit.
#[test]
fn a_round_of_slow_distributed_procedures_all_commit() {
    let db = open(16);
    let c = db.client();
    let futs = (0..32i64)
        .map(|i| {
            let us = 8_000 + (i % 5) * 1_000;
            // Homed on island 0, each with its own pair of accounts.
            c.call_async(
                "slow_transfer",
                vec![
                    Value::Int(i),
                    Value::Int(200 + i),
                    Value::Int(1),
                    Value::Int(us),
                ],
            )
        })
        .collect();
    for (i, r) in wait_all(futs, Duration::from_secs(60))
        .into_iter()
        .enumerate()
    {
        assert_eq!(r, Ok(vec![]), "call {i}");
    }
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

/// Issue 33, item 1: one procedure with 150 ms of work after its last remote
/// access commits (its prepare timer starts when its commit does).
#[test]
fn a_procedure_working_150ms_after_its_last_remote_access_commits() {
    let db = open(16);
    let c = db.client();
    let r = c.call(
        "slow_transfer",
        &[
            Value::Int(5),
            Value::Int(205),
            Value::Int(7),
            Value::Int(150_000),
        ],
    );
    assert_eq!(r, Ok(vec![]));
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

/// Issue 33, item 2: a procedure that works 250 ms (longer than the remote
/// operation timeout) and then reads another island gets its reply.
#[test]
fn a_procedure_working_250ms_then_reading_another_island_gets_its_reply() {
    let db = open(16);
    let c = db.client();
    let r = c.call(
        "work_then_read",
        &[Value::Int(3), Value::Int(203), Value::Int(250_000)],
    );
    assert_eq!(r, Ok(vec![vec![Value::Int(2 * INITIAL)]]));
    db.shutdown().unwrap();
}

/// Issue 33, item 2: a slow distributed procedure that rolls back reaches its
/// caller as its own rollback, promptly (not as a serialization failure
/// after many retries).
#[test]
fn a_slow_distributed_rollback_reaches_its_caller_as_its_rollback() {
    let db = open(16);
    let c = db.client();
    for us in [250_000, 600_000] {
        let start = Instant::now();
        let r = c.call(
            "slow_rollback",
            &[Value::Int(9), Value::Int(209), Value::Int(us)],
        );
        assert_eq!(
            r,
            Err(CallError::Rollback {
                procedure: "slow_rollback".into(),
                why: "changed my mind".into()
            }),
            "{us} µs of work"
        );
        // One attempt, then its confirmation: well under the time of two.
        let took = start.elapsed();
        assert!(
            took < Duration::from_micros(2 * us as u64),
            "{us} µs of work: the rollback took {took:?}"
        );
    }
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

/// Every distributed call commits, whatever its procedure's duration: 1, 5,
/// 10, 50 and 200 ms of work, calls homed on both islands (so each island's
/// executor is busy while the other waits for its votes and replies), fewer
/// calls at the long durations.
#[test]
fn distributed_calls_commit_whatever_their_procedures_duration() {
    let db = open(16);
    let c = db.client();
    for (ms, calls) in [(1, 64), (5, 32), (10, 32), (50, 12), (200, 4)] {
        let futs = transfers(&c, calls, ms * 1000);
        for (i, r) in wait_all(futs, Duration::from_secs(60))
            .into_iter()
            .enumerate()
        {
            assert_eq!(r, Ok(vec![]), "{ms} ms per procedure, call {i}");
        }
    }
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

/// With a `sync` log, a participant's vote waits for its forced prepare
/// record, and then for the exchange after its next poll: a participant
/// polling slow procedures owes that vote for a whole poll. Owing it, it
/// is busy, not silent, and every distributed call commits.
#[test]
fn with_a_log_distributed_calls_commit_whatever_their_procedures_duration() {
    let dir = crate::common::temp_dir("slow-procs-sync");
    let db = open_logged(2, 16, 1024, Some(&dir));
    let c = db.client();
    for (ms, calls) in [(10, 16), (60, 8), (150, 4)] {
        let futs = transfers(&c, calls, ms * 1000);
        for (i, r) in wait_all(futs, Duration::from_secs(60))
            .into_iter()
            .enumerate()
        {
            assert_eq!(r, Ok(vec![]), "{ms} ms per procedure, call {i}");
        }
    }
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A procedure that awaits something other than the engine's operations
/// fails its own call with a clear error, and rolls back; the deployment
/// goes on serving every other call (on one island, where procedures run
/// inline, and on two, where they run in slots).
#[test]
fn a_procedure_awaiting_a_foreign_future_fails_only_its_own_call() {
    for islands in [1, 2] {
        let db = open_islands(islands, 4);
        let c = db.client();
        for key in [10, 210] {
            let e = c.call("foreign_await", &[Value::Int(key)]).unwrap_err();
            assert!(
                matches!(&e, CallError::Failed { procedure, error }
                    if procedure == "foreign_await" && error.contains("no executor wakes")),
                "{islands} island(s): {e}"
            );
        }
        // Nothing it did stays, and calls on both islands still commit.
        assert_eq!(total(&c), N as i64 * INITIAL, "{islands} island(s)");
        let r = c.call(
            "slow_transfer",
            &[
                Value::Int(11),
                Value::Int(211),
                Value::Int(1),
                Value::Int(0),
            ],
        );
        assert_eq!(r, Ok(vec![]), "{islands} island(s)");
        db.shutdown().unwrap();
    }
}

/// Counts its wakes.
#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_once(f: &mut CallFuture, waker: &Waker) -> Poll<Result<Vec<Vec<Value>>, CallError>> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// 2 × the balance of `key` (read by `work_then_read` with no work).
fn twice_balance(c: &Client, key: i64) -> i64 {
    let r = c.call(
        "work_then_read",
        &[Value::Int(key), Value::Int(key), Value::Int(0)],
    );
    r.unwrap()[0][0].as_int().unwrap()
}

/// A call whose executor's queue is full waits to be woken when the
/// executor takes a call from it, instead of waking itself at once (a task
/// polled again and again: a thread spinning at 100% for the whole wait).
#[test]
fn a_call_waiting_for_room_in_a_full_queue_is_woken_by_the_executor() {
    // One executor, a queue of one call.
    let db = open_with(1, 1, 1);
    let c = db.client();
    let transfer = |from: i64, us: i64| {
        c.call_async(
            "slow_transfer",
            vec![
                Value::Int(from),
                Value::Int(from + 1),
                Value::Int(1),
                Value::Int(us),
            ],
        )
    };
    let noop = Waker::noop();
    // The executor takes a call held at a gate, the queue fills with a
    // second.
    const GATE: usize = 2;
    let mut running = c.call_async(
        "gated_transfer",
        vec![
            Value::Int(20),
            Value::Int(21),
            Value::Int(1),
            Value::Int(GATE as i64),
        ],
    );
    assert!(poll_once(&mut running, noop).is_pending());
    wait_for_runs(GATE, 1);
    let mut queued = transfer(30, 0);
    assert!(poll_once(&mut queued, noop).is_pending());
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    let mut waiting = transfer(40, 0);
    assert!(poll_once(&mut waiting, &waker).is_pending());
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        0,
        "a call waiting for room woke itself at once"
    );
    // The executor takes the queued call once the gated one is done: that
    // wakes the waiting call, which then queues and commits.
    GATES[GATE].store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(20);
    while counter.0.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the waiting call was never woken"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for r in wait_all(vec![running, queued, waiting], Duration::from_secs(20)) {
        assert_eq!(r, Ok(vec![]));
    }
    assert_eq!(twice_balance(&c, 40), 2 * (INITIAL - 1));
    db.shutdown().unwrap();
}

/// Dropping a call's future after its first poll cancels the call: one
/// whose procedure runs is rolled back when it returns, and one still
/// queued never runs.
#[test]
fn dropping_a_calls_future_cancels_the_call() {
    for islands in [1, 2] {
        // One executor per island: a queued call waits behind a slow one.
        let db = open_with(islands, 1, 16);
        let c = db.client();
        let noop = Waker::noop();
        let gate = (islands - 1) as usize;
        let gated = |from: i64, to: i64| {
            c.call_async(
                "gated_transfer",
                vec![
                    Value::Int(from),
                    Value::Int(to),
                    Value::Int(5),
                    Value::Int(gate as i64),
                ],
            )
        };
        let mut running = gated(50, 250);
        assert!(poll_once(&mut running, noop).is_pending());
        wait_for_runs(gate, 1);
        let mut queued = gated(60, 260);
        assert!(poll_once(&mut queued, noop).is_pending());
        drop(running);
        drop(queued);
        GATES[gate].store(true, Ordering::Release);
        // A call behind them answers once both are done; neither left a trace.
        assert_eq!(twice_balance(&c, 61), 2 * INITIAL);
        for key in [50, 250, 60, 260] {
            assert_eq!(
                twice_balance(&c, key),
                2 * INITIAL,
                "{islands} island(s), account {key}"
            );
        }
        assert_eq!(
            GATED_RUNS[gate].load(Ordering::Acquire),
            1,
            "{islands} island(s): the queued call ran"
        );
        db.shutdown().unwrap();
    }
}

/// An executor that only serves other islands parks only after a run of
/// idle rounds, counted from its last work of any kind (batches it served
/// included), not from the last call it took: it does not park for a
/// millisecond after nearly every request it serves.
#[test]
fn an_executor_serving_only_other_islands_does_not_park_after_each_request() {
    let db = open(4);
    let c = db.client();
    // Island 1 takes no call: let its executor go idle and park.
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.executor_parks(1) == 0 {
        assert!(
            Instant::now() < deadline,
            "island 1's executor never parked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = db.executor_parks(1);
    let calls = 200;
    for i in 0..calls {
        // Homed on island 0, each reads a row of island 1.
        let r = c.call(
            "work_then_read",
            &[
                Value::Int(i % 200),
                Value::Int(200 + i % 200),
                Value::Int(0),
            ],
        );
        assert_eq!(r, Ok(vec![vec![Value::Int(2 * INITIAL)]]));
    }
    // A park lasts up to a millisecond and a request arriving meanwhile
    // waits for its end: one per request would be `calls`.
    let parks = db.executor_parks(1) - before;
    assert!(
        parks < calls as u64 / 4,
        "island 1's executor parked {parks} times while serving {calls} requests"
    );
    db.shutdown().unwrap();
}
