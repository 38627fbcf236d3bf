//! Calls and statements forwarded between two island processes (two
//! [`islands::api::Deployment`]s of one island each in this test process,
//! joined over Unix sockets, as `processes.rs` opens them): a forwarded call
//! whose CALL or CALL_REPLY is lost fails within the deployment's forward
//! timeout with `OutcomeUnknown` while its home stays consistent, a
//! statement with a source is rebuilt and run at its home, and a block homed
//! there runs there: each of its steps answered or failed within the bound,
//! rolled back there when its client or its caller's process goes, failing
//! with `IslandDown` when its home goes, and never keeping a block slot; a
//! block lives on a lease its caller renews: one whose ROLLBACK was lost, or
//! whose renewals stop, is rolled back at its home within the lease, and
//! one that idles longer than the lease while its caller renews keeps its
//! locks and commits.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use islands::api::open::Expect;
use islands::api::{CallError, ProcFuture, Row, Statement, Value};
use islands::executor::fault::Lossy;
use islands::transport::join::Kind;
use islands::transport::{frames, Transport};
use islands::txn::Txn;

use super::processes::{
    balance, block_on, island_of, open_both_with, total, write_secret, ACCOUNTS, N,
};
use crate::common::{temp_dir, BAL, INITIAL};

/// A process's transport that loses the batches it sends that carry a
/// frame of kind `kind` (its first byte), as many as it is armed for.
struct Lose {
    lossy: Arc<Lossy>,
    armed: Arc<AtomicU32>,
}

impl Lose {
    fn new(inner: Arc<dyn Transport>, kind: u8) -> Lose {
        let armed = Arc::new(AtomicU32::new(0));
        let a = Arc::clone(&armed);
        let lossy = Arc::new(Lossy::new(inner, move |_, batch| {
            a.load(Ordering::SeqCst) > 0
                && frames(batch).any(|f| f.is_ok_and(|p| p.first() == Some(&kind)))
                && a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
        }));
        Lose { lossy, armed }
    }

    fn arm(&self, n: u32) {
        self.armed.store(n, Ordering::SeqCst);
    }
}

const K_CALL: u8 = 0x40;
const K_CALL_REPLY: u8 = 0x41;

/// A [`Lose`] for the transport of each island (0: it loses CALLs, 1: it
/// loses CALL_REPLYs), filled when the islands open.
type Slots = Arc<[OnceLock<Arc<Lose>>; 2]>;

#[test]
fn a_forwarded_call_whose_answer_is_lost_fails_within_the_bound_as_unknown() {
    let dir = temp_dir("forwarding-lost");
    write_secret(&dir);
    let bound = Duration::from_millis(400);
    let slots: Slots = Arc::new([OnceLock::new(), OnceLock::new()]);
    let s = Arc::clone(&slots);
    let (a, b) = open_both_with(
        &dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
        move |k, o| {
            o.forward_timeout = bound;
            let s = Arc::clone(&s);
            o.wrap_transport = Some(Arc::new(
                move |inner: Arc<dyn Transport>| -> Arc<dyn Transport> {
                    let kind = [K_CALL, K_CALL_REPLY][usize::from(k)];
                    let l = Arc::new(Lose::new(inner, kind));
                    let _ = s[usize::from(k)].set(Arc::clone(&l));
                    Arc::clone(&l.lossy) as Arc<dyn Transport>
                },
            ));
        },
    );
    let (lose_call, lose_reply) = (slots[0].get().unwrap(), slots[1].get().unwrap());
    let client = a.client();
    let (from, to) = (N - 1, N - 2);
    assert_eq!((island_of(from), island_of(to)), (1, 1));
    let transfer = |amount: i64| {
        let t = Instant::now();
        let r = client.call(
            "transfer",
            &[
                Value::Int(from as i64),
                Value::Int(to as i64),
                Value::Int(amount),
            ],
        );
        (r, t.elapsed())
    };
    let unknown = |r: Result<Vec<Row>, CallError>, took: Duration| match r {
        Err(CallError::OutcomeUnknown {
            procedure,
            island: 1,
            waited_ms,
        }) => {
            assert_eq!(procedure, "transfer");
            assert!(waited_ms >= bound.as_millis() as u64, "{waited_ms} ms");
            assert!(
                // The executor's clock and this one may differ a little.
                took >= bound * 9 / 10 && took < bound + Duration::from_millis(1500),
                "answered after {took:?}, the bound is {bound:?}"
            );
        }
        r => panic!("a forwarded call whose answer was lost answered {r:?}"),
    };

    // Its CALL_REPLY lost: the transfer committed at its home once, and
    // its caller hears that it cannot know.
    let before = (balance(&client, from), balance(&client, to));
    lose_reply.arm(1);
    let (r, took) = transfer(7);
    unknown(r, took);
    assert_eq!(lose_reply.lossy.lost(), 1);
    assert_eq!(
        (balance(&client, from), balance(&client, to)),
        (before.0 - 7, before.1 + 7)
    );
    // Its CALL lost: it never ran.
    lose_call.arm(1);
    let (r, took) = transfer(5);
    unknown(r, took);
    assert_eq!(lose_call.lossy.lost(), 1);
    assert_eq!(
        (balance(&client, from), balance(&client, to)),
        (before.0 - 7, before.1 + 7)
    );
    // Nothing lost: answered as ever, and the home's books balance.
    let (r, took) = transfer(3);
    assert!(r.is_ok(), "{r:?}");
    assert!(took < bound, "{took:?}");
    assert_eq!(total(&client), N as i64 * INITIAL);
    assert_eq!(total(&b.client()), N as i64 * INITIAL);
    drop(client);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Adds `params[1]` to the balance of account `params[0]`: a statement
/// whose source is the name `bump` and its parameters, which the compiler
/// installed at its home rebuilds.
struct Bump {
    params: Vec<Value>,
    affected: AtomicU64,
    /// Whether it has a source (may be forwarded).
    forwardable: bool,
}

impl Bump {
    fn new(params: &[Value], forwardable: bool) -> Arc<Bump> {
        Arc::new(Bump {
            params: params.to_vec(),
            affected: AtomicU64::new(u64::MAX),
            forwardable,
        })
    }
}

impl Statement for Bump {
    fn run<'a>(&'a self, tx: &'a mut Txn, _: &'a mut Vec<Row>) -> ProcFuture<'a> {
        Box::pin(async move {
            let key = self.params[0].as_int().unwrap_or(-1) as u64;
            let amount = self.params[1].as_int().unwrap_or(0);
            let n = match tx.get_for_update(ACCOUNTS, key).await? {
                Some(h) => {
                    let b = tx.row(h).i64(BAL);
                    tx.row_mut(h).set_i64(BAL, b + amount);
                    1
                }
                None => 0,
            };
            self.affected.store(n, Ordering::Relaxed);
            Ok(())
        })
    }

    fn name(&self) -> &str {
        "bump"
    }

    fn source(&self) -> Option<(&str, &[Value])> {
        self.forwardable.then_some(("bump", &self.params[..]))
    }

    fn affected(&self) -> u64 {
        self.affected.load(Ordering::Relaxed)
    }

    fn set_affected(&self, n: u64) {
        self.affected.store(n, Ordering::Relaxed);
    }
}

#[test]
fn a_statement_homed_on_another_process_runs_there_and_its_count_comes_back() {
    let dir = temp_dir("forwarding-stmt");
    write_secret(&dir);
    let (a, b) = open_both_with(
        &dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
        |_, _| {},
    );
    let client = a.client();
    let k = N - 1;
    assert_eq!(island_of(k), 1);
    let run = |s: Arc<Bump>| block_on(client.run_async(s, Some(1), None));
    let before = balance(&client, k);
    // No source: not forwarded.
    match run(Bump::new(&[Value::Int(k as i64), Value::Int(4)], false)) {
        Err(CallError::Elsewhere { island: 1 }) => {}
        r => panic!("a statement without a source answered {r:?}"),
    }
    // A home that cannot rebuild statements says so.
    match run(Bump::new(&[Value::Int(k as i64), Value::Int(4)], true)) {
        Err(CallError::Failed { error, .. }) => assert!(error.contains("SQL server"), "{error}"),
        r => panic!("a statement its home cannot rebuild answered {r:?}"),
    }
    assert_eq!(balance(&client, k), before);
    assert!(
        b.set_statement_compiler(Arc::new(|text: &str, params: &[Value]| {
            match text {
                "bump" => Ok(Bump::new(params, false) as Arc<dyn Statement>),
                _ => Err(CallError::UnknownProcedure(text.to_string())),
            }
        }))
    );
    let s = Bump::new(&[Value::Int(k as i64), Value::Int(4)], true);
    assert_eq!(run(Arc::clone(&s)), Ok(Vec::new()));
    assert_eq!(s.affected(), 1, "the count its home's copy affected");
    assert_eq!(balance(&client, k), before + 4);
    assert_eq!(balance(&b.client(), k), before + 4);
    drop(client);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_block_homed_on_another_process_runs_there_and_rolls_back_when_its_caller_goes() {
    let dir = temp_dir("forwarding-block");
    write_secret(&dir);
    let (a, b) = open_both_with(
        &dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
        // A call that the block's locks hold back gives up soon.
        |_, o| o.max_attempts = 20,
    );
    let client = a.client();
    let (from, to) = (N - 1, N - 2);
    assert_eq!((island_of(from), island_of(to)), (1, 1));
    let transfer = |amount: i64| transfer_args((from, to), amount);
    let before = (balance(&client, from), balance(&client, to));
    // Rolled back: nothing moved.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(9), None)).unwrap();
    block_on(blk.rollback()).unwrap();
    assert_eq!((balance(&client, from), balance(&client, to)), before);
    // Committed: moved once, as its home's own client sees.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(9), None)).unwrap();
    block_on(blk.call("transfer", transfer(1), None)).unwrap();
    block_on(blk.commit()).unwrap();
    let after = (before.0 - 10, before.1 + 10);
    assert_eq!(
        (balance(&b.client(), from), balance(&b.client(), to)),
        after
    );
    // A statement's error aborts the block, at its home too.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(2), None)).unwrap();
    match block_on(blk.call("transfer", transfer(INITIAL * 100), None)) {
        Err(CallError::Rollback { why, .. }) => assert_eq!(why, "insufficient funds"),
        r => panic!("an overdraft in a forwarded block answered {r:?}"),
    }
    assert!(blk.is_aborted());
    assert!(block_on(blk.commit()).is_err());
    assert_eq!(
        (balance(&b.client(), from), balance(&b.client(), to)),
        after
    );

    // The caller's process goes away with a block open at island 1: its
    // home rolls it back, and the rows it locked are free again.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(5), None)).unwrap();
    let home = b.client();
    let locked = home.call("transfer", &transfer(1));
    assert!(
        matches!(locked, Err(CallError::Serialization { .. })),
        "the block's rows were not locked: {locked:?}"
    );
    std::mem::forget(blk);
    drop(client);
    a.shutdown().unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match home.call("transfer", &transfer(1)) {
            Ok(_) => break,
            Err(CallError::Serialization { .. }) if Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => panic!("the block of a caller that went away still holds its rows: {r:?}"),
        }
    }
    assert_eq!(
        (balance(&home, from), balance(&home, to)),
        (after.0 - 1, after.1 + 1)
    );
    drop(home);
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const K_BLOCK: u8 = 0x44;

/// The arguments of a transfer of `amount` from account `from` to `to`.
fn transfer_args((from, to): (u64, u64), amount: i64) -> Vec<Value> {
    vec![
        Value::Int(from as i64),
        Value::Int(to as i64),
        Value::Int(amount),
    ]
}

/// Balances of accounts `from` and `to` as `home` reads them, once they
/// read `want` (a block still holding their locks makes a read fail, and
/// one still to roll back shows its writes to nobody): panics naming
/// `what` if they do not within 10 s.
fn settles(home: &islands::api::Client, (from, to): (u64, u64), want: (i64, i64), what: &str) {
    let read = |k: u64| home.call("balance", &[Value::Int(k as i64)]);
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let got = match (read(from), read(to)) {
            (Ok(f), Ok(t)) => Some((f[0][0].as_int().unwrap(), t[0][0].as_int().unwrap())),
            (Err(CallError::Serialization { .. }), _)
            | (_, Err(CallError::Serialization { .. })) => None,
            (f, t) => panic!("{what}: the balances read {f:?}, {t:?}"),
        };
        if got == Some(want) {
            return;
        }
        assert!(
            Instant::now() < end,
            "{what}: the balances read {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many blocks island 1's executors hold open at once: blocks begun by
/// its own client, each reading another of its accounts, until one is
/// refused for want of a slot; then all rolled back.
fn block_capacity(home: &islands::api::Client) -> usize {
    let mut open = Vec::new();
    for k in N / 2..N {
        let mut blk = home.begin();
        match block_on(blk.call("balance", vec![Value::Int(k as i64)], None)) {
            Ok(_) => open.push(blk),
            Err(CallError::TooManyBlocks { .. }) => break,
            Err(e) => panic!("a block reading account {k}: {e:?}"),
        }
    }
    let n = open.len();
    for blk in open {
        block_on(blk.rollback()).unwrap();
    }
    n
}

#[test]
fn every_step_of_a_forwarded_block_is_answered_within_the_bound_and_no_slot_leaks() {
    let dir = temp_dir("forwarding-block-lost");
    write_secret(&dir);
    let bound = Duration::from_millis(400);
    // Island 0 loses BLOCK frames, island 1 CALL_REPLYs, when armed.
    let slots: Slots = Arc::new([OnceLock::new(), OnceLock::new()]);
    let s = Arc::clone(&slots);
    let (a, b) = open_both_with(
        &dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
        move |k, o| {
            o.forward_timeout = bound;
            o.blocks_per_worker = 2;
            o.max_attempts = 20;
            let s = Arc::clone(&s);
            o.wrap_transport = Some(Arc::new(
                move |inner: Arc<dyn Transport>| -> Arc<dyn Transport> {
                    let kind = [K_BLOCK, K_CALL_REPLY][usize::from(k)];
                    let l = Arc::new(Lose::new(inner, kind));
                    let _ = s[usize::from(k)].set(Arc::clone(&l));
                    Arc::clone(&l.lossy) as Arc<dyn Transport>
                },
            ));
        },
    );
    let (lose_block, lose_reply) = (slots[0].get().unwrap(), slots[1].get().unwrap());
    let (client, home) = (a.client(), b.client());
    let capacity = block_capacity(&home);
    assert!(capacity >= 2, "{capacity}");
    let (from, to) = (N - 1, N - 2);
    assert_eq!((island_of(from), island_of(to)), (1, 1));
    let transfer = |amount: i64| transfer_args((from, to), amount);
    let unknown = |r: Result<(), CallError>, took: Duration, what: &str| match r {
        Err(CallError::OutcomeUnknown {
            island: 1,
            waited_ms,
            ..
        }) => {
            assert!(
                waited_ms >= bound.as_millis() as u64,
                "{what}: {waited_ms} ms"
            );
            assert!(
                took >= bound * 9 / 10 && took < bound + Duration::from_millis(1500),
                "{what}: answered after {took:?}, the bound is {bound:?}"
            );
        }
        r => panic!("{what}: answered {r:?}"),
    };
    let before = (balance(&home, from), balance(&home, to));

    // A statement's answer lost: it fails within the bound, the block is
    // dead, and its rollback undoes the statements before it at the home.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(3), None)).unwrap();
    lose_reply.arm(1);
    let t = Instant::now();
    let r = block_on(blk.call("transfer", transfer(4), None)).map(drop);
    unknown(r, t.elapsed(), "a statement whose answer was lost");
    assert!(blk.is_aborted());
    block_on(blk.rollback()).unwrap();
    settles(&home, (from, to), before, "rolled back after a lost answer");

    // The first statement's BLOCK frame lost: the block never began there;
    // its client goes away (as a server's client that disconnects).
    lose_block.arm(1);
    let mut blk = client.begin();
    let t = Instant::now();
    let r = block_on(blk.call("transfer", transfer(5), None)).map(drop);
    unknown(r, t.elapsed(), "a first statement that was lost");
    drop(blk);
    settles(
        &home,
        (from, to),
        before,
        "a block whose beginning was lost",
    );

    // The COMMIT frame lost: its outcome is unknown to the caller, and the
    // block does not stay open at its home (a rollback follows the lost
    // commit), so its rows are free and nothing moved.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(2), None)).unwrap();
    lose_block.arm(1);
    let t = Instant::now();
    let r = block_on(blk.commit());
    unknown(r, t.elapsed(), "a COMMIT that was lost");
    settles(&home, (from, to), before, "a block whose COMMIT was lost");

    // The COMMIT's answer lost: unknown to the caller, committed there.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(2), None)).unwrap();
    lose_reply.arm(1);
    let t = Instant::now();
    let r = block_on(blk.commit());
    unknown(r, t.elapsed(), "a COMMIT whose answer was lost");
    let after = (before.0 - 2, before.1 + 2);
    settles(
        &home,
        (from, to),
        after,
        "a block whose COMMIT's answer was lost",
    );

    // Its client disconnects mid-block: the block rolls back at its home.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(6), None)).unwrap();
    drop(blk);
    settles(&home, (from, to), after, "a block whose client went away");
    assert_eq!((lose_block.lossy.lost(), lose_reply.lossy.lost()), (2, 2));

    // Every block hosted for island 0 left its slot: island 1 opens as many
    // blocks at once as before (a slot is freed just after the answer that
    // ends its block).
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let now = block_capacity(&home);
        if now == capacity {
            break;
        }
        assert!(
            Instant::now() < end,
            "island 1 holds {now} blocks at once, {capacity} before: a forwarded block leaked its slot"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((client, home));
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_forwarded_block_whose_home_goes_down_fails_with_island_down() {
    let dir = temp_dir("forwarding-block-down");
    write_secret(&dir);
    let (a, b) = open_both_with(
        &dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
        |_, _| {},
    );
    let client = a.client();
    let (from, to) = (N - 1, N - 2);
    let transfer = |amount: i64| transfer_args((from, to), amount);
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(3), None)).unwrap();
    b.shutdown().unwrap();
    let t = Instant::now();
    match block_on(blk.call("transfer", transfer(4), None)) {
        Err(CallError::IslandDown { island: 1, .. }) => {}
        r => panic!("a block whose home went down answered {r:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(blk.is_aborted());
    block_on(blk.rollback()).unwrap();
    // A new block homed there fails at once, naming the island.
    let mut blk = client.begin();
    match block_on(blk.call("transfer", transfer(1), None)) {
        Err(CallError::IslandDown { island: 1, .. }) => {}
        r => panic!("a block homed on a down island answered {r:?}"),
    }
    drop((blk, client));
    a.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

const K_RENEW: u8 = 0x45;

/// The forward timeout of the lease tests: leases renewed every 100 ms
/// (a tenth of it), lapsing after [`LEASE`] unrenewed.
const LEASE_TIMEOUT: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_millis(500);

/// Two islands as processes whose forward timeout is [`LEASE_TIMEOUT`];
/// island 0 loses, when armed, BLOCK frames (the first [`Lose`]) and
/// RENEW frames (the second).
fn open_leased(
    dir: &std::path::Path,
) -> (
    islands::api::Deployment,
    islands::api::Deployment,
    Arc<Lose>,
    Arc<Lose>,
) {
    write_secret(dir);
    let slots: Slots = Arc::new([OnceLock::new(), OnceLock::new()]);
    let s = Arc::clone(&slots);
    let (a, b) = open_both_with(
        dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
        move |k, o| {
            o.forward_timeout = LEASE_TIMEOUT;
            o.max_attempts = 20;
            if k == 0 {
                let s = Arc::clone(&s);
                o.wrap_transport = Some(Arc::new(
                    move |inner: Arc<dyn Transport>| -> Arc<dyn Transport> {
                        let blocks = Arc::new(Lose::new(inner, K_BLOCK));
                        let renews = Arc::new(Lose::new(
                            Arc::clone(&blocks.lossy) as Arc<dyn Transport>,
                            K_RENEW,
                        ));
                        let _ = s[0].set(blocks);
                        let _ = s[1].set(Arc::clone(&renews));
                        Arc::clone(&renews.lossy) as Arc<dyn Transport>
                    },
                ));
            }
        },
    );
    let (blocks, renews) = (slots[0].get().unwrap(), slots[1].get().unwrap());
    (a, b, Arc::clone(blocks), Arc::clone(renews))
}

/// How long until `home` can move one unit between accounts `from` and
/// `to` (a block holding their locks makes it fail), at most 10 s.
fn until_free(home: &islands::api::Client, (from, to): (u64, u64)) -> Duration {
    let t = Instant::now();
    let args = transfer_args((from, to), 1);
    loop {
        match home.call("transfer", &args) {
            Ok(_) => return t.elapsed(),
            Err(CallError::Serialization { .. }) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => panic!("the rows stay locked after {:?}: {r:?}", t.elapsed()),
        }
    }
}

#[test]
fn a_forwarded_block_whose_rollback_or_renewals_are_lost_lapses_within_its_lease() {
    let dir = temp_dir("forwarding-lease-lost");
    let (a, b, lose_block, lose_renew) = open_leased(&dir);
    let (client, home) = (a.client(), b.client());
    let (from, to) = (N - 1, N - 2);
    assert_eq!((island_of(from), island_of(to)), (1, 1));
    let transfer = |amount: i64| transfer_args((from, to), amount);
    let before = (balance(&home, from), balance(&home, to));
    // Lapse bound: the lease, a renewal period and a lease scan late, and
    // room for a loaded machine.
    let bound = LEASE + Duration::from_millis(1500);

    // Its ROLLBACK lost, its caller alive: the caller stops renewing the
    // block, and its home rolls it back once the lease lapses.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(5), None)).unwrap();
    lose_block.arm(1);
    drop(blk);
    let took = until_free(&home, (from, to));
    assert_eq!(lose_block.lossy.lost(), 1);
    assert!(
        took < bound,
        "a block whose ROLLBACK was lost held its rows {took:?} (its lease is {LEASE:?})"
    );
    let moved = (before.0 - 1, before.1 + 1);
    assert_eq!((balance(&home, from), balance(&home, to)), moved);

    // Its renewals lost (its caller's messages stop, its process still
    // up): the home rolls it back, and the block's next statement fails
    // with the error of a block its home no longer holds.
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(5), None)).unwrap();
    lose_renew.arm(u32::MAX);
    let took = until_free(&home, (from, to));
    assert!(
        took < bound,
        "a block whose renewals were lost held its rows {took:?} (its lease is {LEASE:?})"
    );
    lose_renew.arm(0);
    assert!(lose_renew.lossy.lost() >= 1);
    match block_on(blk.call("transfer", transfer(1), None)) {
        Err(CallError::Serialization { last, .. }) => {
            assert!(
                last.contains("holds no such block") && last.contains("lease"),
                "{last}"
            )
        }
        r => panic!("a statement of a lapsed block answered {r:?}"),
    }
    assert!(blk.is_aborted());
    block_on(blk.rollback()).unwrap();
    let moved = (moved.0 - 1, moved.1 + 1);
    assert_eq!((balance(&home, from), balance(&home, to)), moved);
    drop((client, home));
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_forwarded_block_idle_past_its_lease_keeps_its_locks_while_its_caller_renews() {
    let dir = temp_dir("forwarding-lease-idle");
    let (a, b, _, _) = open_leased(&dir);
    let (client, home) = (a.client(), b.client());
    let (from, to) = (N - 1, N - 2);
    let transfer = |amount: i64| transfer_args((from, to), amount);
    let before = (balance(&home, from), balance(&home, to));
    let mut blk = client.begin();
    block_on(blk.call("transfer", transfer(5), None)).unwrap();
    // Its client thinks for four leases: the block stays, with its locks.
    std::thread::sleep(LEASE * 4);
    let locked = home.call("transfer", &transfer(1));
    assert!(
        matches!(locked, Err(CallError::Serialization { .. })),
        "an idle block renewed by its caller lost its locks: {locked:?}"
    );
    block_on(blk.call("transfer", transfer(2), None)).unwrap();
    block_on(blk.commit()).unwrap();
    assert_eq!(
        (balance(&home, from), balance(&home, to)),
        (before.0 - 7, before.1 + 7)
    );
    drop((client, home));
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
