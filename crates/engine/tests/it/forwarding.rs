//! Calls and statements forwarded between two island processes (two
//! [`islands::api::Deployment`]s of one island each in this test process,
//! joined over Unix sockets, as `processes.rs` opens them): a forwarded call
//! whose CALL or CALL_REPLY is lost fails within the deployment's forward
//! timeout with `OutcomeUnknown` while its home stays consistent, and a
//! statement with a source is rebuilt and run at its home.

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
