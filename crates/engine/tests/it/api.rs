//! The application API: a deployment opened from the library, procedures
//! called by name from application threads.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use islands::api::{
    CallError, CallFuture, CancelFlag, Catalog, Client, Deployment, Options, Partition, ProcDef,
    Type, Value,
};
use islands::proc::rng::FastRng;
use islands::proc::{Outcome, Workload};
use islands::storage::{Col, ColType, PrimaryKind, SecondaryId, TableDef, TableId};
use islands::txn::Txn;
use islands::Abort;

use crate::common::{
    load_site_accounts, site_accounts, site_options as spec, temp_dir, transfer_proc, BAL, INITIAL,
    PER_SITE,
};

const ACCOUNTS: TableId = 0;
const RECEIPTS: TableId = 1;

/// The receipt of transfer `id` out of account `from`: on `from`'s site.
fn receipt_key(from: u64, id: u64) -> u64 {
    (from / PER_SITE) << 32 | id
}

/// The bank: accounts spread over the sites (100 per site), a transfer
/// homed at its source account, an audit that sums every account, a
/// balance lookup, and procedures that misbehave on purpose.
fn bank() -> Catalog {
    let mut c = Catalog::new();
    assert_eq!(site_accounts(&mut c, 1 << 14), ACCOUNTS);
    let r = c.table(
        TableDef::new(
            "receipts",
            &[
                ("from", ColType::I64),
                ("to", ColType::I64),
                ("amount", ColType::I64),
            ],
            1 << 18,
            PrimaryKind::Hash,
        ),
        // A receipt's key carries its source account's site in its high bits.
        Partition::BySite(|k| (k >> 32) as u32),
    );
    assert_eq!(r, RECEIPTS);
    c.procedure(
        ProcDef::new("logged_transfer", |tx, a, _| {
            Box::pin(async move {
                let (from, to, amount) = (a.int(0) as u64, a.int(1) as u64, a.int(2));
                let receipt = receipt_key(from, a.int(3) as u64);
                let f = tx
                    .get_for_update(ACCOUNTS, from)
                    .await?
                    .ok_or(Abort::User("no source"))?;
                let t = tx
                    .get_for_update(ACCOUNTS, to)
                    .await?
                    .ok_or(Abort::User("no target"))?;
                let fb = tx.row(f).i64(BAL);
                tx.row_mut(f).set_i64(BAL, fb - amount);
                let tb = tx.row(t).i64(BAL);
                tx.row_mut(t).set_i64(BAL, tb + amount);
                let h = tx
                    .insert(RECEIPTS, receipt)
                    .await?
                    .ok_or(Abort::User("receipt exists"))?;
                let mut row = tx.row_mut(h);
                row.set_i64(Col(0), from as i64);
                row.set_i64(Col(1), to as i64);
                row.set_i64(Col(2), amount);
                Ok(())
            })
        })
        .param("from", Type::Int)
        .param("to", Type::Int)
        .param("amount", Type::Int)
        .param("id", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("receipt", |tx, a, out| {
            Box::pin(async move {
                let key = receipt_key(a.int(0) as u64, a.int(1) as u64);
                if let Some(h) = tx.get(RECEIPTS, key).await? {
                    let row = tx.row(h);
                    out.push((0..3).map(|c| Value::Int(row.i64(Col(c)))).collect());
                }
                Ok(())
            })
        })
        .param("from", Type::Int)
        .param("id", Type::Int)
        .column("from", Type::Int)
        .column("to", Type::Int)
        .column("amount", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(transfer_proc(ACCOUNTS)).unwrap();
    c.procedure(
        ProcDef::new("deposit", |tx, a, _| {
            Box::pin(async move {
                deposit(tx, a.int(0) as u64, a.int(1)).await?;
                Ok(())
            })
        })
        .param("account", Type::Int)
        .param("amount", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(
        // A deposit whose procedure then takes `ms` milliseconds more.
        ProcDef::new("slow_deposit", |tx, a, _| {
            Box::pin(async move {
                deposit(tx, a.int(0) as u64, a.int(1)).await?;
                std::thread::sleep(Duration::from_millis(a.int(2) as u64));
                Ok(())
            })
        })
        .param("account", Type::Int)
        .param("amount", Type::Int)
        .param("ms", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("balance", |tx, a, out| {
            Box::pin(async move {
                if let Some(h) = tx.get(ACCOUNTS, a.int(0) as u64).await? {
                    out.push(vec![Value::Int(tx.row(h).i64(BAL))]);
                }
                Ok(())
            })
        })
        .param("account", Type::Int)
        .column("balance", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("audit", |tx, a, out| {
            Box::pin(async move {
                let mut total = 0;
                for k in 0..a.int(0) as u64 {
                    if let Some(h) = tx.get(ACCOUNTS, k).await? {
                        total += tx.row(h).i64(BAL);
                    }
                }
                out.push(vec![Value::Int(total)]);
                Ok(())
            })
        })
        .param("accounts", Type::Int)
        .column("total", Type::Int),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("panics", |_, a, _| {
            Box::pin(async move {
                if a.int(0) > 0 {
                    panic!("asked to panic");
                }
                Ok(())
            })
        })
        .param("really", Type::Int),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("bad_result", |_, _, out| {
            Box::pin(async move {
                out.push(vec![Value::Str("not an int".into())]);
                Ok(())
            })
        })
        .column("n", Type::Int),
    )
    .unwrap();
    c
}

/// Adds `amount` to account `key`.
async fn deposit(tx: &mut Txn, key: u64, amount: i64) -> Result<(), Abort> {
    let h = tx
        .get_for_update(ACCOUNTS, key)
        .await?
        .ok_or(Abort::User("no such account"))?;
    let b = tx.row(h).i64(BAL);
    tx.row_mut(h).set_i64(BAL, b + amount);
    Ok(())
}

fn load_accounts(load: &mut islands::api::Load<'_>) -> Result<(), islands::Error> {
    load_site_accounts(load, ACCOUNTS)
}

fn open(o: Options) -> Deployment {
    Deployment::open(o, bank(), load_accounts).unwrap()
}

const N: u64 = 4 * PER_SITE;

fn total(c: &Client) -> i64 {
    loop {
        // An audit reads every account: on a loaded machine it may run out
        // of retries against the transfers, and is then asked again.
        match c.call("audit", &[Value::Int(N as i64)]) {
            Ok(rows) => return rows[0][0].as_int().unwrap(),
            Err(CallError::Serialization { .. }) => continue,
            Err(e) => panic!("audit failed: {e}"),
        }
    }
}

fn balances(c: &Client) -> Vec<i64> {
    (0..N)
        .map(|k| {
            c.call("balance", &[Value::Int(k as i64)]).unwrap()[0][0]
                .as_int()
                .unwrap()
        })
        .collect()
}

#[test]
fn transfers_and_audits_from_many_threads_conserve_the_total() {
    let db = open(spec(2, "off", None));
    assert_eq!(db.islands().len(), 2);
    let client = db.client();
    assert_eq!(total(&client), N as i64 * INITIAL);
    let stop = Arc::new(AtomicBool::new(false));
    let audits = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..4u64 {
        let c = client.clone();
        let (stop, audits) = (Arc::clone(&stop), Arc::clone(&audits));
        threads.push(std::thread::spawn(move || {
            let mut rng = t * 7919 + 1;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut done = 0u64;
            while !stop.load(Ordering::Relaxed) || done < 200 {
                if t == 0 && done.is_multiple_of(10) {
                    assert_eq!(
                        total(&c),
                        N as i64 * INITIAL,
                        "an audit saw money appear or vanish"
                    );
                    audits.fetch_add(1, Ordering::Relaxed);
                }
                let (from, to) = (next() % N, next() % N);
                if from == to {
                    continue;
                }
                let amount = (next() % 50) as i64;
                match c.call(
                    "transfer",
                    &[
                        Value::Int(from as i64),
                        Value::Int(to as i64),
                        Value::Int(amount),
                    ],
                ) {
                    Ok(rows) => assert!(rows.is_empty()),
                    // Nothing changed: the totals below show it.
                    Err(CallError::Rollback { .. } | CallError::Serialization { .. }) => {}
                    Err(e) => panic!("transfer failed: {e}"),
                }
                done += 1;
            }
            done
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let done: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(done >= 800, "{done} transfers");
    assert!(audits.load(Ordering::Relaxed) > 0);
    assert_eq!(total(&client), N as i64 * INITIAL);
    assert_eq!(balances(&client).iter().sum::<i64>(), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

/// Polls `f` to its end (the first poll queues the call).
fn wait<F: Future + Unpin>(mut f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let std::task::Poll::Ready(r) = std::pin::Pin::new(&mut f).poll(&mut cx) {
            return r;
        }
        assert!(Instant::now() < deadline, "a call did not finish");
        std::thread::yield_now();
    }
}

fn balance(c: &Client, account: i64) -> i64 {
    c.call("balance", &[Value::Int(account)]).unwrap()[0][0]
        .as_int()
        .unwrap()
}

#[test]
fn a_cancelled_call_rolls_back_unless_it_committed() {
    let dir = temp_dir("api-cancel");
    let mut o = spec(1, "sync", Some(&dir));
    // One executor: a queued call waits behind a slow one.
    o.spec.workers_per_island = Some(1);
    let db = open(o);
    let c = db.client();
    let slow = |account: i64, ms: i64, flag: &CancelFlag| {
        c.call_async_cancelable(
            "slow_deposit",
            vec![Value::Int(account), Value::Int(10), Value::Int(ms)],
            flag,
        )
    };
    let poll_once = |f: &mut CallFuture| {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::pin::Pin::new(f).poll(&mut cx).is_pending());
    };
    // Canceled while its procedure runs: rolled back when it returns.
    let running = CancelFlag::new();
    let mut f = slow(1, 300, &running);
    poll_once(&mut f);
    std::thread::sleep(Duration::from_millis(100));
    running.cancel();
    assert!(
        matches!(wait(f), Err(CallError::Canceled { ref procedure }) if procedure == "slow_deposit")
    );
    assert_eq!(balance(&c, 1), INITIAL);
    // Canceled while queued behind another call: it never runs; the call
    // ahead of it, not canceled, commits.
    let (ahead_flag, queued) = (CancelFlag::new(), CancelFlag::new());
    let mut ahead = slow(2, 200, &ahead_flag);
    poll_once(&mut ahead);
    let mut behind = slow(3, 0, &queued);
    poll_once(&mut behind);
    queued.cancel();
    assert_eq!(wait(ahead), Ok(vec![]));
    assert!(matches!(wait(behind), Err(CallError::Canceled { .. })));
    assert_eq!((balance(&c, 2), balance(&c, 3)), (INITIAL + 10, INITIAL));
    // A flag cleared after a cancel serves the next call.
    queued.clear();
    assert_eq!(wait(slow(3, 0, &queued)), Ok(vec![]));
    assert_eq!(balance(&c, 3), INITIAL + 10);
    // Cancels fired at any moment, durable commits: each call either
    // committed and says so, or was canceled and left no trace.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut outcomes = [0u32; 2];
    for account in 10..110i64 {
        let flag = CancelFlag::new();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = Duration::from_micros(rng % 4000);
        let canceller = {
            let flag = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                flag.cancel();
            })
        };
        // A procedure of 0 to 2 ms: some cancels land while it runs.
        let r = wait(slow(account, (rng >> 32) as i64 % 3, &flag));
        canceller.join().unwrap();
        let b = balance(&c, account);
        match r {
            Ok(_) => {
                outcomes[0] += 1;
                assert_eq!(b, INITIAL + 10, "account {account}: acknowledged");
            }
            Err(CallError::Canceled { .. }) => {
                outcomes[1] += 1;
                assert_eq!(b, INITIAL, "account {account}: canceled");
            }
            Err(e) => panic!("account {account}: {e}"),
        }
    }
    // Both outcomes happen.
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn async_calls_pipeline_and_give_the_same_answers() {
    let db = open(spec(2, "off", None));
    let client = db.client();
    // 200 transfers in flight at once from one thread, driven by a minimal
    // executor that polls every future in turn.
    let mut futs: Vec<_> = (0..200i64)
        .map(|i| {
            client.call_async(
                "transfer",
                vec![
                    Value::Int(i),
                    Value::Int((i + 150) % N as i64),
                    Value::Int(1),
                ],
            )
        })
        .collect();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut results = vec![None; futs.len()];
    let deadline = Instant::now() + Duration::from_secs(30);
    while results.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "async calls did not finish");
        for (i, f) in futs.iter_mut().enumerate() {
            if results[i].is_none() {
                if let std::task::Poll::Ready(r) = std::pin::Pin::new(f).poll(&mut cx) {
                    results[i] = Some(r);
                }
            }
        }
        std::thread::yield_now();
    }
    for r in results {
        assert_eq!(r.unwrap(), Ok(vec![]));
    }
    assert_eq!(total(&client), N as i64 * INITIAL);
    db.shutdown().unwrap();
}

#[test]
fn bad_calls_get_clear_errors_and_the_executors_go_on() {
    let db = open(spec(2, "off", None));
    let c = db.client();
    assert_eq!(
        c.call("nope", &[]),
        Err(CallError::UnknownProcedure("nope".into()))
    );
    let e = c.call("transfer", &[Value::Int(1)]).unwrap_err();
    assert!(
        matches!(&e, CallError::BadArguments { procedure, why } if procedure == "transfer"
            && why.contains("1 argument(s) given, it takes 3")),
        "{e}"
    );
    let e = c
        .call("balance", &[Value::Str("seven".into())])
        .unwrap_err();
    assert!(
        e.to_string().contains("argument 1 (account) is string"),
        "{e}"
    );
    let e = c.call("balance", &[Value::Null]).unwrap_err();
    assert!(e.to_string().contains("is null"), "{e}");
    // A user abort is the call's answer, not a failure.
    let e = c
        .call(
            "transfer",
            &[Value::Int(1), Value::Int(2), Value::Int(1 << 40)],
        )
        .unwrap_err();
    assert_eq!(
        e,
        CallError::Rollback {
            procedure: "transfer".into(),
            why: "insufficient funds".into()
        }
    );
    // A panicking procedure fails its call; every executor still serves.
    for _ in 0..4 {
        let e = c.call("panics", &[Value::Int(1)]).unwrap_err();
        assert!(
            matches!(&e, CallError::Panicked { message, .. } if message == "asked to panic"),
            "{e}"
        );
    }
    assert_eq!(c.call("panics", &[Value::Int(0)]), Ok(vec![]));
    let e = c.call("bad_result", &[]).unwrap_err();
    assert!(e.to_string().contains("column n is declared int"), "{e}");
    assert_eq!(total(&c), N as i64 * INITIAL);
    db.shutdown().unwrap();
    assert_eq!(
        c.call("balance", &[Value::Int(1)]),
        Err(CallError::ShutDown)
    );
}

#[test]
fn one_island_and_two_islands_end_with_the_same_contents() {
    let run = |islands: u32| {
        let db = open(spec(islands, "off", None));
        let c = db.client();
        let mut x = 12345u64;
        for _ in 0..600 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (from, to, amount) = ((x >> 20) % N, (x >> 40) % N, ((x >> 8) % 700) as i64);
            if from == to {
                continue;
            }
            let r = c.call(
                "transfer",
                &[
                    Value::Int(from as i64),
                    Value::Int(to as i64),
                    Value::Int(amount),
                ],
            );
            assert!(
                matches!(r, Ok(_) | Err(CallError::Rollback { .. })),
                "{r:?}"
            );
        }
        let b = balances(&c);
        db.shutdown().unwrap();
        b
    };
    let one = run(1);
    assert_eq!(one.iter().sum::<i64>(), N as i64 * INITIAL);
    assert!(one.iter().any(|&b| b != INITIAL));
    assert_eq!(one, run(2));
}

#[test]
fn shutdown_with_calls_in_flight_answers_every_call() {
    let db = open(spec(2, "off", None));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = db.client();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let (mut ok, mut shut) = (0u64, 0u64);
                loop {
                    let from = (t * 37 + ok) % N;
                    match c.call(
                        "transfer",
                        &[
                            Value::Int(from as i64),
                            Value::Int(((from + 1) % N) as i64),
                            Value::Int(1),
                        ],
                    ) {
                        Ok(_) | Err(CallError::Rollback { .. }) => ok += 1,
                        Err(CallError::ShutDown) => {
                            shut += 1;
                            if stop.load(Ordering::Relaxed) {
                                return (ok, shut);
                            }
                        }
                        Err(e) => panic!("unexpected: {e}"),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let t = Instant::now();
    db.shutdown().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        t.elapsed()
    );
    for th in threads {
        let (ok, shut) = th.join().unwrap();
        assert!(ok > 0 && shut > 0);
    }
}

#[test]
fn a_log_directory_in_use_is_refused_naming_it() {
    let dir = temp_dir("api-busy");
    let db = open(spec(1, "sync", Some(&dir)));
    let e = Deployment::open(spec(1, "sync", Some(&dir)), bank(), |_| Ok(())).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&dir.join("island-0").display().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("process {}", std::process::id())),
        "{msg}"
    );
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reopened_deployment_recovers_what_was_acknowledged() {
    let dir = temp_dir("api-reopen");
    let moved = {
        let db = open(spec(2, "sync", Some(&dir)));
        let c = db.client();
        for i in 0..50 {
            c.call(
                "transfer",
                &[Value::Int(i), Value::Int(399 - i), Value::Int(10)],
            )
            .unwrap();
        }
        let b = balances(&c);
        db.shutdown().unwrap();
        b
    };
    // Reopened: the load function is not called again.
    let db = Deployment::open(spec(2, "sync", Some(&dir)), bank(), |_| {
        panic!("a database with a log is not loaded again")
    })
    .unwrap();
    assert_eq!(balances(&db.client()), moved);
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A log device whose writes and fdatasyncs wait while `hold` is set.
struct Gated {
    hold: Arc<AtomicBool>,
}

struct GatedFile {
    inner: Box<dyn islands::wal::LogFile>,
    hold: Arc<AtomicBool>,
}

impl GatedFile {
    fn wait(&self) {
        while self.hold.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl islands::wal::LogFile for GatedFile {
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.wait();
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> std::io::Result<()> {
        self.wait();
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
}

impl islands::wal::LogDevice for Gated {
    fn create(&self, path: &std::path::Path) -> std::io::Result<Box<dyn islands::wal::LogFile>> {
        Ok(Box::new(GatedFile {
            inner: islands::wal::FsDevice.create(path)?,
            hold: Arc::clone(&self.hold),
        }))
    }
    fn open_append(
        &self,
        path: &std::path::Path,
    ) -> std::io::Result<Box<dyn islands::wal::LogFile>> {
        Ok(Box::new(GatedFile {
            inner: islands::wal::FsDevice.open_append(path)?,
            hold: Arc::clone(&self.hold),
        }))
    }
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        islands::wal::FsDevice.sync_dir(dir)
    }
}

/// Opens the gate of a [`Gated`] device when dropped.
struct OpenGate(Arc<AtomicBool>);

impl Drop for OpenGate {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[test]
fn in_sync_mode_a_call_returns_only_once_its_commit_is_durable() {
    for islands in [1, 2] {
        let dir = temp_dir("api-gated");
        let hold = Arc::new(AtomicBool::new(false));
        let mut o = spec(islands, "sync", Some(&dir));
        o.log_device = Some(Arc::new(Gated {
            hold: Arc::clone(&hold),
        }));
        let db = open(o);
        // Dropped before `db` (also when an assertion fails): its shutdown
        // flushes the logs, which must not be held back then.
        let _open_at_exit = OpenGate(Arc::clone(&hold));
        let c = db.client();
        // Accounts 0 and 399 lie on different islands when there are two.
        let args = [Value::Int(0), Value::Int(399), Value::Int(5)];
        c.call("transfer", &args).unwrap();
        hold.store(true, Ordering::Release);
        let returned = Arc::new(AtomicBool::new(false));
        let caller = {
            let (c, returned) = (c.clone(), Arc::clone(&returned));
            std::thread::spawn(move || {
                let r = c.call("transfer", &args);
                returned.store(true, Ordering::Release);
                r
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        // The commit waits for the log alone: its executor sleeps, woken by
        // its 1 ms timeout here (by the log writer once the batch is
        // durable), instead of spinning until then.
        let parks_before = db.executor_parks(0);
        std::thread::sleep(Duration::from_millis(250));
        let parks = db.executor_parks(0) - parks_before;
        assert!(
            !returned.load(Ordering::Acquire),
            "{islands} island(s): the call returned while its log was held back"
        );
        assert!(
            parks >= 10,
            "{islands} island(s): the executor parked {parks} times in 250 ms of waiting for the log"
        );
        hold.store(false, Ordering::Release);
        assert_eq!(caller.join().unwrap(), Ok(vec![]));
        assert_eq!(
            c.call("balance", &[Value::Int(399)]).unwrap(),
            vec![vec![Value::Int(INITIAL + 10)]]
        );
        db.shutdown().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

const CHILD_ENV: &str = "ISLANDS_API_CRASH_CHILD";
const MARK: &str = "@@";

/// The child of [`acknowledged_calls_survive_a_sigkill`]: calls logged
/// transfers from 4 threads until it is killed, printing each one the
/// deployment acknowledged.
#[test]
#[ignore = "the child of api::acknowledged_calls_survive_a_sigkill; runs only when re-executed by it"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let reopen = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some());
    let db = if reopen {
        Deployment::open(spec(2, "sync", Some(&dir)), bank(), |_| {
            panic!("a database with a log is not loaded again")
        })
        .unwrap()
    } else {
        open(spec(2, "sync", Some(&dir)))
    };
    let say = |line: String| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{MARK}{line}").unwrap();
        out.flush().unwrap();
    };
    say("READY".into());
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
        & 0xffff_ffff;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = db.client();
            std::thread::spawn(move || {
                for n in 0u64.. {
                    let id = (base + n * 4 + t) & 0xffff_ffff;
                    let from = (n * 13 + t * 101) % N;
                    let to = (from + 1 + n % 300) % N;
                    let args = [
                        Value::Int(from as i64),
                        Value::Int(to as i64),
                        Value::Int(1 + (n % 7) as i64),
                        Value::Int(id as i64),
                    ];
                    if c.call("logged_transfer", &args).is_ok() {
                        say(format!("ACK {from} {id} {to} {}", 1 + n % 7));
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
fn acknowledged_calls_survive_a_sigkill() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let dir = temp_dir("api-crash");
    let mut acked: Vec<[i64; 4]> = Vec::new();
    for round in 0..2 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "api::crash_child", "--nocapture", "--ignored"])
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
                // A line the kill cut has no newline: it was never a whole ack.
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
        std::thread::sleep(Duration::from_millis(400));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "round {round}: the child ended before the kill"
        );
        for l in reader.join().unwrap() {
            if let Some(rest) = l.trim().strip_prefix("@@ACK ") {
                let v: Vec<i64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                acked.push([v[0], v[1], v[2], v[3]]);
            }
        }
        assert!(
            !acked.is_empty(),
            "round {round}: nothing was acknowledged; the test proved nothing"
        );
        let db = Deployment::open(spec(2, "sync", Some(&dir)), bank(), |_| {
            panic!("a database with a log is not loaded again")
        })
        .unwrap();
        let c = db.client();
        assert_eq!(
            total(&c),
            N as i64 * INITIAL,
            "round {round}: money appeared or vanished"
        );
        for [from, id, to, amount] in &acked {
            let rows = c
                .call("receipt", &[Value::Int(*from), Value::Int(*id)])
                .unwrap();
            assert_eq!(
                rows,
                vec![vec![
                    Value::Int(*from),
                    Value::Int(*to),
                    Value::Int(*amount)
                ]],
                "round {round}: acknowledged transfer {id} from {from} is lost"
            );
        }
        db.shutdown().unwrap();
    }
    eprintln!(
        "api crash: {} acknowledged transfers checked after 2 SIGKILLs",
        acked.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_durability_is_named_once() {
    let e = match Deployment::open(spec(1, "fsync", None), bank(), |_| Ok(())) {
        Ok(_) => panic!("a deployment opened with durability 'fsync'"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        e,
        "invalid configuration: unknown durability 'fsync': valid values are sync, async, off"
    );
}

/// A generator of deposits of 1 into random accounts: each executor makes
/// `per_worker` of them, on its own thread.
#[derive(Clone)]
struct Deposits {
    per_worker: u64,
    made: Arc<[AtomicU64; 16]>,
    committed: Arc<AtomicU64>,
    /// A generated request ran on a thread that was not an executor.
    off_executor: Arc<AtomicBool>,
}

impl Workload for Deposits {
    type Req = u64;

    fn types(&self) -> Vec<&'static str> {
        vec!["deposit"]
    }

    fn next(&self, _: usize, rng: &mut FastRng, key: &mut u64) -> usize {
        *key = rng.below(N);
        0
    }

    fn poll_next(&self, w: usize, rng: &mut FastRng, key: &mut u64) -> Option<usize> {
        let made = &self.made[w];
        if made.load(Ordering::Relaxed) == self.per_worker {
            return None;
        }
        made.fetch_add(1, Ordering::Relaxed);
        Some(self.next(w, rng, key))
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, key: &'a u64) -> Result<(), Abort> {
        let name = std::thread::current().name().map(String::from);
        if !name.is_some_and(|n| n.contains("-exec-")) {
            self.off_executor.store(true, Ordering::Relaxed);
        }
        deposit(tx, *key, 1).await
    }

    fn finished(&self, _: usize, _: &mut u64, outcome: Outcome) {
        assert!(matches!(outcome, Outcome::Committed), "{outcome:?}");
        self.committed.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn calls_and_generated_requests_commit_side_by_side_on_the_executors() {
    // One executor (both sources on the same thread), then two islands
    // (generated deposits that cross islands, calls routed to their home).
    for (islands, workers) in [(1, Some(1)), (2, None)] {
        let mut o = spec(islands, "off", None);
        o.spec.workers_per_island = workers;
        let gen = Deposits {
            per_worker: 300,
            made: Arc::new(Default::default()),
            committed: Arc::new(AtomicU64::new(0)),
            off_executor: Arc::new(AtomicBool::new(false)),
        };
        let db = Deployment::open_generating(o, bank(), load_accounts, gen.clone()).unwrap();
        let executors: usize = db.plan().islands().iter().map(|i| i.workers as usize).sum();
        assert!(executors <= 16);
        let client = db.client();
        let callers: Vec<_> = (0..2u64)
            .map(|t| {
                let c = client.clone();
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let key = (t * 7 + i * 13) % N;
                        let args = [Value::Int(key as i64), Value::Int(1)];
                        // Generated deposits may collide with it: ask again.
                        while let Err(e) = c.call("deposit", &args) {
                            assert!(matches!(e, CallError::Serialization { .. }), "{e}");
                        }
                    }
                })
            })
            .collect();
        for h in callers {
            h.join().unwrap();
        }
        let generated = 300 * executors as u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while gen.committed.load(Ordering::Relaxed) < generated {
            assert!(
                Instant::now() < deadline,
                "the generated requests did not all commit"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(gen.committed.load(Ordering::Relaxed), generated);
        assert!(!gen.off_executor.load(Ordering::Relaxed));
        // Every deposit, called or generated, is in the balances.
        assert_eq!(total(&client), N as i64 * INITIAL + 400 + generated as i64);
        db.shutdown().unwrap();
        // And each executor counted both kinds: 400 calls, the generated
        // deposits and the audit.
        let counted: u64 = client.committed_per_island().iter().sum();
        assert_eq!(counted, 400 + generated + 1, "{islands} island(s)");
    }
}

/// Rows of `groups`: keys 0..400, range-partitioned over the sites; a
/// secondary index by group (key / 100), whose keys live on the group's site.
fn groups() -> Catalog {
    let mut c = Catalog::new();
    let t = c.table(
        TableDef::new("groups", &[("g", ColType::I64)], 1024, PrimaryKind::Hash)
            .with_secondary("by_group", |r| r.i64(Col(0)) as u64),
        Partition::Range { keys: 400 },
    );
    c.secondary_by_site(t, SecondaryId(0), |g| g as u32)
        .unwrap();
    c.procedure(
        ProcDef::new("members", move |tx, a, out| {
            Box::pin(async move {
                let n = tx
                    .scan_secondary(t, SecondaryId(0), a.int(0) as u64, 1000, false)
                    .await?;
                out.push(vec![Value::Int(n as i64)]);
                Ok(())
            })
        })
        .param("g", Type::Int)
        .column("n", Type::Int),
    )
    .unwrap();
    c.procedure(
        ProcDef::new("group_of", move |tx, a, out| {
            Box::pin(async move {
                for &k in a.ints(0) {
                    let h = tx.get(t, k as u64).await?.ok_or(Abort::User("no row"))?;
                    out.push(vec![Value::Int(tx.row(h).i64(Col(0)))]);
                }
                Ok(())
            })
        })
        .param("keys", Type::Ints)
        .column("g", Type::Int)
        .home_by(0, t),
    )
    .unwrap();
    c
}

#[test]
fn range_partitions_and_secondary_keys_route_to_the_island_holding_them() {
    let owned = std::sync::Mutex::new(vec![Vec::new(); 2]);
    let db = Deployment::open(spec(2, "off", None), groups(), |load| {
        let mine: Vec<u64> = (0..400).filter(|&k| load.owns(0, k)).collect();
        for &k in &mine {
            load.put(0, k, |r| r.set_i64(Col(0), (k / 100) as i64))?;
        }
        // A key past the range belongs to the last site.
        assert_eq!(load.owns(0, 1000), load.island() == 1);
        owned.lock().unwrap()[load.island()] = mine;
        Ok(())
    })
    .unwrap();
    // Four sites of 100 keys, two a island: contiguous halves.
    let owned = owned.into_inner().unwrap();
    assert_eq!(owned[0], (0..200).collect::<Vec<u64>>());
    assert_eq!(owned[1], (200..400).collect::<Vec<u64>>());
    let c = db.client();
    // Calls homed on any island (spread over both) find each group's 100
    // rows, on the island that holds them.
    for round in 0..4 {
        for g in 0..4 {
            let rows = c.call("members", &[Value::Int(g)]).unwrap();
            assert_eq!(
                rows,
                vec![vec![Value::Int(100)]],
                "round {round}, group {g}"
            );
        }
    }
    // A batch homed by its first key reads keys of both islands.
    let rows = c
        .call("group_of", &[Value::Ints(vec![399, 0, 250])])
        .unwrap();
    assert_eq!(
        rows,
        vec![
            vec![Value::Int(3)],
            vec![Value::Int(0)],
            vec![Value::Int(2)]
        ]
    );
    db.shutdown().unwrap();
}

#[test]
fn a_secondary_index_is_placed_only_where_it_can_be() {
    let mut c = Catalog::new();
    let t = c.table(
        TableDef::new("t", &[("v", ColType::I64)], 16, PrimaryKind::Hash),
        Partition::Replicated,
    );
    let e = c.secondary_by_site(t, SecondaryId(0), |_| 0).unwrap_err();
    assert!(e.to_string().contains("has 0 secondary index(es)"), "{e}");
    let e = c.secondary_by_site(7, SecondaryId(0), |_| 0).unwrap_err();
    assert!(e.to_string().contains("not in the catalog"), "{e}");
    let mut c = groups();
    let e = c.secondary_by_site(0, SecondaryId(0), |_| 0).unwrap_err();
    assert!(e.to_string().contains("placed twice"), "{e}");
}

/// Each account's balance, `None` where the account is not found.
fn found_balances(c: &Client) -> Vec<Option<i64>> {
    (0..N)
        .map(|k| {
            let rows = c.call("balance", &[Value::Int(k as i64)]).unwrap();
            rows.first().map(|r| r[0].as_int().unwrap())
        })
        .collect()
}

/// A load that stops midway (here island 1's load fails after island 0's
/// was checkpointed) leaves a database that is never served: every later
/// open refuses it, naming the directory and what to do, rather than
/// serving empty or half-loaded tables.
#[test]
fn a_load_that_stopped_midway_is_never_served() {
    let dir = temp_dir("api-half-load");
    let e = Deployment::open(spec(2, "sync", Some(&dir)), bank(), |l| {
        load_accounts(l)?;
        if l.island() == 1 {
            return Err(islands::Error::Config("the load failed".into()));
        }
        Ok(())
    })
    .unwrap_err();
    assert!(e.to_string().contains("the load failed"), "{e}");
    for _ in 0..2 {
        let e = Deployment::open(spec(2, "sync", Some(&dir)), bank(), load_accounts)
            .map(|db| db.shutdown())
            .expect_err("a database whose load never completed was opened");
        let msg = e.to_string();
        assert!(
            msg.contains("never completely loaded")
                && msg.contains(&dir.display().to_string())
                && msg.contains("remove"),
            "{msg}"
        );
    }
    // Loaded in full, it opens, and its load is not run again.
    let _ = std::fs::remove_dir_all(&dir);
    open(spec(2, "sync", Some(&dir))).shutdown().unwrap();
    let db = Deployment::open(spec(2, "sync", Some(&dir)), bank(), |_| {
        panic!("a loaded database is not loaded again")
    })
    .unwrap();
    assert_eq!(total(&db.client()), N as i64 * INITIAL);
    db.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A deployment that leaves `sites` out spreads its keys over as many
/// sites as the machine it was made on has cores. Reopened where the
/// process sees another number of cores (another machine, a narrower CPU
/// set, a described topology), it keeps the site count its control files
/// recorded: every acknowledged row is found where it was written. A site
/// count given that differs is refused.
#[test]
fn a_reopen_on_another_core_count_keeps_the_site_map() {
    let dir = temp_dir("api-sites");
    let on = |machine: &str, sites: Option<u32>| {
        let mut o = spec(2, "sync", Some(&dir));
        o.spec.sites = sites;
        o.spec.workers_per_island = Some(1);
        o.topology = Some(islands::topology::Topology::described(machine).unwrap());
        o
    };
    let moved = {
        let db = Deployment::open(on("1x4", None), bank(), load_accounts).unwrap();
        assert_eq!(db.plan().sites(), 4);
        let c = db.client();
        for i in 0..20 {
            c.call(
                "transfer",
                &[Value::Int(i * 7), Value::Int(399 - i * 3), Value::Int(5)],
            )
            .unwrap();
        }
        let b = found_balances(&c);
        assert!(b.iter().all(Option::is_some));
        db.shutdown().unwrap();
        b
    };
    for (id, machine) in ["1x8", "2x3", "1x2"].into_iter().enumerate() {
        let db = Deployment::open(on(machine, None), bank(), |_| {
            panic!("a loaded database is not loaded again")
        })
        .unwrap();
        assert_eq!(db.plan().sites(), 4, "on {machine}");
        let c = db.client();
        assert_eq!(found_balances(&c), moved, "reopened on {machine}");
        // New rows land on the island that holds their site, and are found
        // there; the transfer there and back leaves the balances as they were.
        let id = id as i64;
        for (from, to) in [(350, 10), (10, 350)] {
            c.call(
                "logged_transfer",
                &[
                    Value::Int(from),
                    Value::Int(to),
                    Value::Int(1),
                    Value::Int(id),
                ],
            )
            .unwrap();
            let r = c
                .call("receipt", &[Value::Int(from), Value::Int(id)])
                .unwrap();
            assert_eq!(r.len(), 1, "receipt of {from} on {machine}");
        }
        assert_eq!(found_balances(&c), moved, "on {machine}");
        db.shutdown().unwrap();
    }
    let e = Deployment::open(on("1x8", Some(8)), bank(), |_| Ok(())).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("4 sites") && msg.contains("sites = 8"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// When any island of a deployment holds a database, no island is loaded
/// afresh: a lost island directory (island 1's as much as island 0's) is
/// refused, and the refusal suggests no repair (none can make it up). An
/// island that lost only its control file is told how to rebuild it.
#[test]
fn a_lost_island_directory_is_refused_not_loaded_afresh() {
    let dir = temp_dir("api-lost-island");
    for lost in [1, 0] {
        let _ = std::fs::remove_dir_all(&dir);
        let db = open(spec(2, "sync", Some(&dir)));
        let c = db.client();
        for i in 0..20 {
            c.call(
                "transfer",
                &[Value::Int(i), Value::Int(399 - i), Value::Int(10)],
            )
            .unwrap();
        }
        db.shutdown().unwrap();
        let island = dir.join(format!("island-{lost}"));
        let kept = temp_dir(&format!("api-lost-island-kept-{lost}"));
        let _ = std::fs::remove_dir_all(&kept);
        std::fs::rename(&island, &kept).unwrap();
        let e = Deployment::open(spec(2, "sync", Some(&dir)), bank(), load_accounts)
            .map(|db| db.shutdown())
            .expect_err("a deployment with a lost island directory was opened");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("island {lost}'s log is lost"))
                && msg.contains(&island.display().to_string())
                && !msg.contains("islands repair"),
            "{msg}"
        );
        // Judged in another order (as a process that runs some islands
        // only may list them), the lost island is still named by its own
        // number, not by its place in the list.
        let other = dir.join(format!("island-{}", 1 - lost));
        let listed = if lost == 1 {
            [island.clone(), other]
        } else {
            [other, island.clone()]
        };
        let msg = islands::island::judge_deployment_dirs(&listed, 2)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(&format!("island {lost}'s log is lost")),
            "{msg}"
        );
        // An empty directory in its place is refused the same way.
        std::fs::create_dir(&island).unwrap();
        let e = Deployment::open(spec(2, "sync", Some(&dir)), bank(), load_accounts)
            .map(|db| db.shutdown())
            .expect_err("a deployment with an emptied island directory was opened");
        assert!(e.to_string().contains("log is lost"), "{e}");
        // Only its control file gone: rebuild it.
        std::fs::remove_dir(&island).unwrap();
        std::fs::rename(&kept, &island).unwrap();
        std::fs::remove_file(island.join("CONTROL")).unwrap();
        let e = Deployment::open(spec(2, "sync", Some(&dir)), bank(), load_accounts)
            .map(|db| db.shutdown())
            .expect_err("a deployment with a lost control file was opened");
        assert!(e.to_string().contains("--rebuild-control"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
