//! Serializability under every concurrency-control scheme with several threads:
//! bank transfers whose total must stay constant (checked by concurrent
//! auditors and at the end), and a history check whose serialization graph
//! must be acyclic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use islands::cc::CcKind;
use islands::Abort;

use islands::island::{Island, IslandConfig};
use islands::txn::Txn;

use crate::common::{accounts, open_bank, ALL_CC, BALANCE};

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn workers_for(cc: CcKind) -> usize {
    if cc == CcKind::None {
        1
    } else {
        3
    }
}

/// Moves `amount` from account `a` to `b`: a user abort if either is
/// missing or `a` holds less.
async fn transfer(tx: &mut Txn, a: u64, b: u64, amount: i64) -> Result<(), Abort> {
    let ha = tx
        .get_for_update(0, a)
        .await?
        .ok_or(Abort::User("missing"))?;
    let hb = tx
        .get_for_update(0, b)
        .await?
        .ok_or(Abort::User("missing"))?;
    let ba = tx.row(ha).i64(BALANCE);
    if ba < amount {
        return Err(Abort::User("insufficient funds"));
    }
    tx.row_mut(ha).set_i64(BALANCE, ba - amount);
    let bb = tx.row(hb).i64(BALANCE);
    tx.row_mut(hb).set_i64(BALANCE, bb + amount);
    Ok(())
}

#[test]
fn transfers_conserve_money_under_every_scheme() {
    for cc in ALL_CC {
        let n_accounts = 16u64;
        let island = open_bank(
            cc,
            if cc == CcKind::None {
                1
            } else {
                workers_for(cc) + 2
            },
            n_accounts,
            1_000,
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = vec![];
        for w in 0..workers_for(cc) {
            let island = island.clone();
            handles.push(std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut r = rng(w as u64 + 7);
                let mut done = 0;
                for _ in 0..4_000 {
                    let a = r() % n_accounts;
                    let b = (a + 1 + r() % (n_accounts - 1)) % n_accounts;
                    let amt = (r() % 50) as i64;
                    let res = tx.execute(1_000, |tx| Box::pin(transfer(tx, a, b, amt)));
                    match res {
                        Ok(()) => done += 1,
                        // Rolled back, or still conflicting after every retry
                        // (a lock holder descheduled on a loaded machine):
                        // either way nothing changed, and the totals check it.
                        Err(Abort::User(_) | Abort::Conflict(_)) => {}
                        Err(e) => panic!("{cc}: transfer failed: {e}"),
                    }
                }
                done
            }));
        }
        // An auditor reads every account in one transaction while transfers run.
        let auditor = if cc == CcKind::None {
            None
        } else {
            let island = island.clone();
            let stop = stop.clone();
            Some(std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut audits = 0;
                while !stop.load(Ordering::Relaxed) {
                    let total = tx
                        .execute(10_000, |tx| {
                            Box::pin(async move {
                                let mut sum = 0;
                                for k in 0..n_accounts {
                                    let h = tx.get(0, k).await?.expect("account exists");
                                    sum += tx.row(h).i64(BALANCE);
                                }
                                Ok(sum)
                            })
                        })
                        .unwrap();
                    assert_eq!(
                        total,
                        1_000 * n_accounts as i64,
                        "{cc}: an auditor saw money appear or vanish"
                    );
                    audits += 1;
                }
                audits
            }))
        };
        let committed: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        if let Some(a) = auditor {
            a.join().unwrap();
        }
        assert!(
            committed > 1000,
            "{cc}: too few transfers committed: {committed}"
        );
        let mut tx = island.worker().unwrap();
        let total: i64 = tx
            .execute(0, |tx| {
                Box::pin(async move {
                    let mut sum = 0;
                    for k in 0..n_accounts {
                        let h = tx.get(0, k).await?.unwrap();
                        sum += tx.row(h).i64(BALANCE);
                    }
                    Ok(sum)
                })
            })
            .unwrap();
        assert_eq!(
            total,
            1_000 * n_accounts as i64,
            "{cc}: money not conserved"
        );
    }
}

/// One committed transaction of the history test: what it read and wrote.
#[derive(Clone, Debug)]
struct Done {
    id: u64,
    reads: Vec<(u64, u64)>,  // (key, version count read)
    writes: Vec<(u64, u64)>, // (key, version count written)
}

/// Each row holds (version count, writer id). Every write is read-modify-write,
/// so the count orders each key's versions. The serialization graph built from
/// wr, ww and rw edges must be acyclic, and no two commits may write the same
/// version of a key (a lost update).
#[test]
fn histories_are_serializable() {
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let keys = 6u64;
        let island = open_bank(cc, 3, keys, 0);
        let log = Arc::new(Mutex::new(Vec::<Done>::new()));
        let mut handles = vec![];
        for w in 0..3u64 {
            let island = island.clone();
            let log = log.clone();
            handles.push(std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut r = rng(100 + w);
                for i in 0..3_000u64 {
                    let id = (w << 32) | (i + 1);
                    let n = 1 + r() % 3;
                    let ks: Vec<u64> = (0..n).map(|_| r() % keys).collect();
                    let write_mask = r();
                    let res = tx.execute(10_000, |tx| {
                        let ks = ks.clone();
                        Box::pin(async move {
                            let mut reads = vec![];
                            let mut writes = vec![];
                            for (j, k) in ks.iter().enumerate() {
                                if reads.iter().any(|(rk, _)| rk == k) {
                                    continue;
                                }
                                let write = (write_mask >> j) & 1 == 1;
                                let h = if write {
                                    tx.get_for_update(0, *k).await?
                                } else {
                                    tx.get(0, *k).await?
                                };
                                let h = h.unwrap();
                                let v = tx.row(h).i64(BALANCE) as u64;
                                reads.push((*k, v));
                                if write {
                                    tx.row_mut(h).set_i64(BALANCE, (v + 1) as i64);
                                    writes.push((*k, v + 1));
                                }
                            }
                            Ok((reads, writes))
                        })
                    });
                    let (reads, writes) = res.unwrap();
                    log.lock().unwrap().push(Done { id, reads, writes });
                }
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        let done = log.lock().unwrap().clone();
        check_serializable(cc, &done);
    }
}

fn check_serializable(cc: CcKind, done: &[Done]) {
    // writer[(key, count)] = txn index
    let mut writer: HashMap<(u64, u64), usize> = HashMap::new();
    for (i, d) in done.iter().enumerate() {
        for w in &d.writes {
            if let Some(j) = writer.insert(*w, i) {
                panic!(
                    "{cc}: lost update: txns {} and {} both wrote version {} of key {}",
                    done[j].id, d.id, w.1, w.0
                );
            }
        }
    }
    let n = done.len();
    let mut edges: Vec<Vec<usize>> = vec![vec![]; n];
    for (i, d) in done.iter().enumerate() {
        for &(k, c) in &d.reads {
            // wr: the writer of the version read precedes the reader.
            if c > 0 {
                let &w = writer
                    .get(&(k, c))
                    .unwrap_or_else(|| panic!("{cc}: read of version {c} of key {k} nobody wrote"));
                if w != i {
                    edges[w].push(i);
                }
            }
            // rw: the reader precedes the writer of the next version.
            if let Some(&w) = writer.get(&(k, c + 1)) {
                if w != i {
                    edges[i].push(w);
                }
            }
        }
        for &(k, c) in &d.writes {
            // ww: version c-1's writer precedes version c's writer.
            if c > 1 {
                if let Some(&w) = writer.get(&(k, c - 1)) {
                    edges[w].push(i);
                }
            }
        }
    }
    // Kahn's algorithm: every node must be removed.
    let mut indeg = vec![0usize; n];
    for e in &edges {
        for &j in e {
            indeg[j] += 1;
        }
    }
    let mut queue: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = queue.pop() {
        seen += 1;
        for &j in &edges[i] {
            indeg[j] -= 1;
            if indeg[j] == 0 {
                queue.push(j);
            }
        }
    }
    assert_eq!(
        seen, n,
        "{cc}: the serialization graph of {n} transactions has a cycle"
    );
}

/// Two transactions read the same balance for update; the first commits.
/// The second must not commit a value computed from the balance it read (a
/// lost update): 2PL refuses its read or its commit, OCC its commit, where
/// the write set is checked against the versions read.
#[test]
fn concurrent_updates_of_one_row_lose_nothing() {
    use islands::txn::poll_local;
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let island = open_bank(cc, 2, 1, 100);
        let (mut a, mut b) = (island.worker().unwrap(), island.worker().unwrap());
        a.begin(false);
        let ha = poll_local(a.get_for_update(0, 0)).unwrap().unwrap();
        b.begin(false);
        let hb = match poll_local(b.get_for_update(0, 0)) {
            Ok(h) => Some(h.unwrap()),
            Err(Abort::Conflict(_)) => {
                b.abort();
                None
            }
            Err(e) => panic!("{cc}: {e}"),
        };
        let bal = a.row(ha).i64(BALANCE);
        a.row_mut(ha).set_i64(BALANCE, bal + 10);
        a.commit().unwrap();
        if let Some(hb) = hb {
            assert_eq!(b.row(hb).i64(BALANCE), 100);
            b.row_mut(hb).set_i64(BALANCE, 100 + 20);
            let r = b.commit();
            assert!(
                matches!(r, Err(Abort::Conflict(_))),
                "{cc}: an update computed from a stale balance committed (lost update): {r:?}"
            );
        }
        let total = a
            .execute(0, |tx| {
                Box::pin(async move {
                    let h = tx.get(0, 0).await?.unwrap();
                    Ok(tx.row(h).i64(BALANCE))
                })
            })
            .unwrap();
        assert_eq!(total, 110, "{cc}");
    }
}

/// Keys accounts may have in
/// [`accounts_open_and_close_conserving_money_and_their_count`]; the count
/// row sits above them.
const KEY_SPACE: u64 = 24;
const COUNT: u64 = 1_000;

/// One banking operation of
/// [`accounts_open_and_close_conserving_money_and_their_count`].
async fn bank_op(tx: &mut Txn, op: u64, a: u64, b: u64) -> Result<(), Abort> {
    match op % 4 {
        // Transfer from a to b (both open).
        0 | 1 => transfer(tx, a, b, (op >> 8) as i64 % 50).await?,
        // Open account a with half of b's balance.
        2 => {
            if tx.get(0, a).await?.is_some() {
                return Err(Abort::User("open"));
            }
            let hb = tx
                .get_for_update(0, b)
                .await?
                .ok_or(Abort::User("closed"))?;
            let ha = tx
                .insert(0, a)
                .await?
                .ok_or(Abort::User("opened meanwhile"))?;
            let bb = tx.row(hb).i64(BALANCE);
            tx.row_mut(hb).set_i64(BALANCE, bb - bb / 2);
            tx.row_mut(ha).set_i64(BALANCE, bb / 2);
            count_accounts(tx, 1).await?;
        }
        // Close account a, paying its balance into b; some reopen it at once.
        _ => {
            let ha = tx
                .get_for_update(0, a)
                .await?
                .ok_or(Abort::User("closed"))?;
            let hb = tx
                .get_for_update(0, b)
                .await?
                .ok_or(Abort::User("closed"))?;
            let (ba, bb) = (tx.row(ha).i64(BALANCE), tx.row(hb).i64(BALANCE));
            tx.row_mut(hb).set_i64(BALANCE, bb + ba);
            tx.delete(ha).await?;
            if (a ^ b).is_multiple_of(5) {
                // Deleted and inserted again: an account with nothing in it.
                let h = tx.insert(0, a).await?.ok_or(Abort::User("reopen"))?;
                assert_eq!(tx.row(h).i64(BALANCE), 0, "a re-inserted row starts zeroed");
            } else {
                count_accounts(tx, -1).await?;
            }
        }
    }
    Ok(())
}

async fn count_accounts(tx: &mut Txn, delta: i64) -> Result<(), Abort> {
    let h = tx.get_for_update(0, COUNT).await?.expect("the count row");
    let n = tx.row(h).i64(BALANCE);
    tx.row_mut(h).set_i64(BALANCE, n + delta);
    Ok(())
}

/// The total and the number of open accounts, read in one transaction,
/// with the count row's number (each account a point read; closed ones
/// are point misses).
async fn audit(tx: &mut Txn) -> Result<(i64, i64, i64), Abort> {
    let (mut total, mut open) = (0, 0);
    for k in 0..KEY_SPACE {
        if let Some(h) = tx.get(0, k).await? {
            total += tx.row(h).i64(BALANCE);
            open += 1;
        }
    }
    let h = tx.get(0, COUNT).await?.expect("the count row");
    Ok((total, open, tx.row(h).i64(BALANCE)))
}

/// Transfers, accounts opened (an insert over a miss, funded by another
/// account) and closed (a delete that pays out, sometimes re-inserting the
/// key), with a count row of open accounts: the money is conserved and the
/// accounts found equal the count, for auditors that run alongside (their
/// misses race the opens) and at the end.
#[test]
fn accounts_open_and_close_conserving_money_and_their_count() {
    for cc in ALL_CC {
        let workers = workers_for(cc);
        let initial = 16u64;
        let total = 1_000 * initial as i64;
        // Workers claim row slots 64 at a time, and a closed account's slot
        // goes back to the worker that closed it: room for many blocks.
        let threads = if cc == CcKind::None { 1 } else { workers + 2 };
        let (island, _) = Island::open(IslandConfig::new(cc, threads), &[accounts(4096)]).unwrap();
        {
            let mut l = island.loader().unwrap();
            for k in 0..initial {
                l.put(0, k, |r| r.set_i64(BALANCE, 1_000)).unwrap();
            }
            l.put(0, COUNT, |r| r.set_i64(BALANCE, initial as i64))
                .unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        // Concurrent audits done: the workers go on until there are a few.
        let audited = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut handles = vec![];
        for w in 0..workers {
            let (island, audited) = (island.clone(), audited.clone());
            handles.push(std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut r = rng(w as u64 + 41);
                let (mut done, mut audits) = (0, 0);
                let mut i = 0;
                while i < 3_000
                    || (cc != CcKind::None && audited.load(Ordering::Relaxed) < 20 && i < 300_000)
                {
                    i += 1;
                    let (op, a) = (r(), r() % KEY_SPACE);
                    let b = (a + 1 + r() % (KEY_SPACE - 1)) % KEY_SPACE;
                    match tx.execute(1_000, |tx| Box::pin(bank_op(tx, op, a, b))) {
                        Ok(()) => done += 1,
                        // Refused, or still conflicting after all retries.
                        Err(Abort::User(_) | Abort::Conflict(_)) => {}
                        Err(e) => panic!("{cc}: {e}"),
                    }
                    // With one worker, it audits too.
                    if cc == CcKind::None && i % 50 == 0 {
                        let (t, open, count) = tx.execute(0, |tx| Box::pin(audit(tx))).unwrap();
                        assert_eq!((t, open), (total, count), "{cc}: an audit");
                        audits += 1;
                    }
                }
                (done, audits)
            }));
        }
        let auditor = (cc != CcKind::None).then(|| {
            let (island, stop, audited) = (island.clone(), stop.clone(), audited.clone());
            std::thread::spawn(move || {
                let mut tx = island.worker().unwrap();
                let mut audits = 0;
                while !stop.load(Ordering::Relaxed) {
                    let (t, open, count) = tx.execute(100_000, |tx| Box::pin(audit(tx))).unwrap();
                    assert_eq!(t, total, "{cc}: an auditor saw money appear or vanish");
                    assert_eq!(
                        open, count,
                        "{cc}: an auditor found {open} accounts, counted {count}"
                    );
                    audits += 1;
                    audited.store(audits, Ordering::Relaxed);
                }
                audits
            })
        });
        let (mut done, mut audits) = (0, 0);
        for h in handles {
            let (d, a) = h.join().unwrap();
            done += d;
            audits += a;
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(a) = auditor {
            audits += a.join().unwrap();
        }
        let mut tx = island.worker().unwrap();
        let (t, open, count) = tx.execute(0, |tx| Box::pin(audit(tx))).unwrap();
        assert_eq!((t, open), (total, count), "{cc}: at the end");
        assert!(
            done > 400 * workers && audits > 10,
            "{cc}: {done} operations, {audits} audits"
        );
        eprintln!("{cc}: {done} operations committed, {audits} audits");
        let rows = island.catalog().table(0).count_rows();
        assert_eq!(rows, open as u64 + 1, "{cc}: rows in the table");
    }
}
