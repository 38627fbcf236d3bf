//! Deterministic interleavings of two transactions on one island, driven
//! from one thread. Where the race lies inside one call (a lookup and the
//! version it records; the rows of one install), a schedule point
//! ([`super::sched`]) runs the other transaction right there.

use std::cell::RefCell;
use std::rc::Rc;

use super::sched::{self, Point};
use super::{poll_local, Txn};
use crate::cc::CcKind;
use crate::island::{Island, IslandConfig};
use crate::storage::{Col, ColType, PrimaryKind, RowRef, SecondaryId, TableDef};
use crate::{Abort, AbortReason};

const VAL: Col = Col(0);
const G: Col = Col(1);
const BY_G: SecondaryId = SecondaryId(0);
/// A flag row both transactions touch: the one read by the writer, written
/// by the reader (the other half of each write skew below).
const X: u64 = 0;

const LOCKING: [CcKind; 3] = [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ];

fn by_g(r: &RowRef) -> u64 {
    r.u64(G)
}

/// One table of (val, g) rows, `primary`-indexed, with a secondary index on
/// g; row X holds val 0 in group 100, and `rows` are loaded as (key, g).
fn island(cc: CcKind, primary: PrimaryKind, rows: &[(u64, u64)]) -> Island {
    let def = TableDef::new(
        "t",
        &[("val", ColType::U64), ("g", ColType::U64)],
        1 << 10,
        primary,
    )
    .with_secondary("by_g", by_g);
    let (island, _) = Island::open(IslandConfig::new(cc, 3), &[def]).unwrap();
    {
        let mut l = island.loader().unwrap();
        l.put(0, X, |r| r.set_u64(G, 100)).unwrap();
        for &(k, g) in rows {
            l.put(0, k, |r| r.set_u64(G, g)).unwrap();
        }
    }
    island
}

/// The reader's side of the skews: sets X to 1 (read for update). `Err` if
/// it conflicted (then it is aborted).
fn set_x(b: &mut Txn) -> Result<(), Abort> {
    match poll_local(b.get_for_update(0, X)) {
        Ok(h) => {
            let h = h.expect("X is loaded");
            b.row_mut(h).set_u64(VAL, 1);
            Ok(())
        }
        Err(e) => {
            b.abort();
            Err(e)
        }
    }
}

fn is_conflict<T: std::fmt::Debug>(r: &Result<T, Abort>) -> bool {
    matches!(r, Err(Abort::Conflict(_)))
}

/// A point miss on a hash-indexed table, raced by an insert of the same key
/// between the index lookup and the miss's record (schedule A of issue 22).
///
/// `a` looks K up and finds nothing; right then `b` inserts K, reads X = 0
/// and commits. If `a` answers "no K" it must not commit a write of X: `b`
/// read X before `a` wrote it (b before a), and `a` read K as absent, which
/// `b` inserted (a before b).
#[test]
fn a_point_miss_raced_by_an_insert_is_validated() {
    const K: u64 = 9;
    let mut skews = Vec::new();
    for cc in LOCKING {
        let island = island(cc, PrimaryKind::Hash, &[]);
        let (mut a, b) = (island.worker().unwrap(), island.worker().unwrap());
        let b = Rc::new(RefCell::new(b));
        let b_done = Rc::new(RefCell::new(None));
        {
            let (b, b_done) = (b.clone(), b_done.clone());
            sched::set(move |p| {
                if p != Point::LookupMissed {
                    return false;
                }
                let mut b = b.borrow_mut();
                b.begin(false);
                assert!(poll_local(b.insert(0, K)).unwrap().is_some(), "{cc}");
                let x = poll_local(b.get(0, X)).unwrap().unwrap();
                assert_eq!(b.row(x).u64(VAL), 0);
                *b_done.borrow_mut() = Some(b.commit().is_ok());
                true
            });
        }
        a.begin(false);
        let got = poll_local(a.get(0, K));
        sched::clear();
        assert_eq!(*b_done.borrow(), Some(true), "{cc}: b ran and committed");
        match got {
            Ok(Some(_)) => a.abort(), // a saw b's insert: no skew
            Ok(None) => {
                let r = set_x(&mut a).and_then(|()| a.commit().map(|_| ()));
                if !is_conflict(&r) {
                    skews.push(cc);
                }
            }
            Err(e) => panic!("{cc}: {e}"),
        }
    }
    assert!(
        skews.is_empty(),
        "a committed a write of X after reading K as absent, though K was inserted by b, \
         which read X before a wrote it (write skew), under {skews:?}"
    );
}

/// What the reader of a secondary-index phantom saw.
#[derive(Debug, Default)]
struct Scanner {
    /// Keys its scan of group `r` returned, if it got that far.
    scanned: Option<Vec<u64>>,
    committed: bool,
}

/// `b` scans group `r`, then sets X and commits.
fn scan_then_set_x(b: &mut Txn, r: u64) -> Scanner {
    b.begin(false);
    let mut out = Scanner::default();
    let n = match poll_local(b.scan_secondary(0, BY_G, r, 100, false)) {
        Ok(n) => n,
        Err(Abort::Conflict(_)) => {
            b.abort();
            return out;
        }
        Err(e) => panic!("{e}"),
    };
    let keys: Vec<u64> = (0..n).map(|i| b.key(b.scan_row(i))).collect();
    for i in 0..n {
        let g = b.row(b.scan_row(i)).u64(G);
        assert_eq!(g, r, "a scan of group {r} returned a row of group {g}");
    }
    out.scanned = Some(keys);
    if set_x(b).is_ok() {
        out.committed = b.commit().is_ok();
    }
    out
}

/// Commits `a`, running `b_scans(b)` when `a`'s install reaches row `at`.
///
/// `b` runs on a thread of its own, started at the schedule point: under
/// OCC a reader waits for a row locked by a committing writer, here `a`,
/// which goes on once `b` has finished or has waited 100 ms.
fn commit_with_scan_during_install(
    a: &mut Txn,
    at: usize,
    b: Txn,
    b_scans: fn(&mut Txn) -> Scanner,
) -> (Result<super::Committed, Abort>, Scanner) {
    let running = Rc::new(RefCell::new(None));
    {
        let running = running.clone();
        let mut b = Some(b);
        sched::set(move |p| {
            if p != Point::Install(at) {
                return false;
            }
            let mut b = b.take().expect("runs once");
            let (tx, rx) = std::sync::mpsc::channel();
            let h = std::thread::spawn(move || {
                let seen = b_scans(&mut b);
                let _ = tx.send(());
                seen
            });
            let _ = rx.recv_timeout(std::time::Duration::from_millis(100));
            *running.borrow_mut() = Some(h);
            true
        });
    }
    let ra = a.commit();
    sched::clear();
    let b = running.borrow_mut().take();
    (
        ra,
        b.expect("the install reached the point").join().unwrap(),
    )
}

/// Schedule B of issue 22, at every point of the writer's install: the
/// writer `a` reads X = 0 and puts row K into group 7 (`change`: an insert,
/// or an update of a row of group 1); while `a` commits, `b` scans group 7,
/// sets X and commits. `a` read X before `b` wrote it (a before b), so if
/// both commit, `b`'s scan must return K.
fn secondary_phantom(change: impl Fn(&mut Txn, u64, u64) + Copy, rows: &[(u64, u64)]) {
    const K: u64 = 5;
    const R: u64 = 7;
    let mut phantoms = Vec::new();
    for cc in LOCKING {
        for at in 0..=2 {
            for primary in [PrimaryKind::Hash, PrimaryKind::Ordered] {
                let island = island(cc, primary, rows);
                let mut a = island.worker().unwrap();
                a.begin(false);
                let x = poll_local(a.get(0, X)).unwrap().unwrap();
                assert_eq!(a.row(x).u64(VAL), 0);
                change(&mut a, K, R);
                let b = island.worker().unwrap();
                let (ra, seen) =
                    commit_with_scan_during_install(&mut a, at, b, |b| scan_then_set_x(b, R));
                let why = format!("{cc}, {primary:?}, b ran before install row {at}");
                if ra.is_ok() && seen.committed && seen.scanned.as_deref() != Some(&[K][..]) {
                    phantoms.push(why.clone());
                }
                // Whatever happened, the index agrees with the rows.
                let mut c = island.worker().unwrap();
                c.begin(false);
                let n = poll_local(c.scan_secondary(0, BY_G, R, 100, false)).unwrap();
                let want = usize::from(ra.is_ok());
                assert_eq!(n, want, "{why}: rows in group {R} after the run");
                c.commit().unwrap();
            }
        }
    }
    assert!(
        phantoms.is_empty(),
        "b committed a scan of group {R} that missed K, though a (which put K there) read X \
         before b wrote it: {phantoms:#?}"
    );
}

#[test]
fn a_secondary_scan_sees_an_insert_ordered_before_it() {
    secondary_phantom(
        |a, k, r| {
            let h = poll_local(a.insert(0, k)).unwrap().unwrap();
            a.row_mut(h).set_u64(G, r);
        },
        &[],
    );
}

#[test]
fn a_secondary_scan_sees_a_row_moved_into_its_key_before_it() {
    secondary_phantom(
        |a, k, r| {
            let h = poll_local(a.get_for_update(0, k)).unwrap().unwrap();
            a.row_mut(h).set_u64(G, r);
        },
        &[(5, 1)],
    );
}

/// A writer whose commit fails after it made its new secondary entries
/// visible takes them out again: the index holds exactly the committed rows.
/// The writer inserts a row into group 7 and moves another there, after a
/// scan of a range into which another transaction then inserts (a phantom:
/// its commit fails at validation, after the entries went in).
#[test]
fn an_aborted_writer_leaves_no_secondary_entries() {
    for cc in LOCKING {
        let island = island(cc, PrimaryKind::Ordered, &[(5, 1)]);
        let (mut a, mut c) = (island.worker().unwrap(), island.worker().unwrap());
        a.begin(false);
        assert_eq!(poll_local(a.scan(0, 20, 30, 10, false)).unwrap(), 0);
        let h = poll_local(a.insert(0, 9)).unwrap().unwrap();
        a.row_mut(h).set_u64(G, 7);
        let h = poll_local(a.get_for_update(0, 5)).unwrap().unwrap();
        a.row_mut(h).set_u64(G, 7);

        c.begin(false);
        assert!(poll_local(c.insert(0, 25)).unwrap().is_some());
        c.commit().unwrap();

        let r = a.commit();
        assert!(
            matches!(r, Err(Abort::Conflict(AbortReason::Phantom))),
            "{cc}: {r:?}"
        );
        let t = island.catalog().table(0);
        let mut entries = Vec::new();
        t.secondary[0].1.scan(0, u128::MAX, false, |k, _| {
            entries.push(((k >> 64) as u64, k as u64));
            true
        });
        // X (group 100), row 5 still in group 1, row 25 in group 0.
        entries.sort_unstable();
        assert_eq!(entries, vec![(0, 25), (1, 5), (100, X)], "{cc}");
    }
}

/// A transaction that scans a group and then puts rows into it (an insert,
/// a move) commits when nobody else ran: the commit-time rescan skips the
/// entries the transaction itself added before validating. Its scan of the
/// group after the changes sees them.
#[test]
fn own_new_secondary_entries_are_not_phantoms() {
    for cc in LOCKING {
        for primary in [PrimaryKind::Hash, PrimaryKind::Ordered] {
            let island = island(cc, primary, &[(5, 1), (6, 7)]);
            let mut a = island.worker().unwrap();
            a.begin(false);
            assert_eq!(
                poll_local(a.scan_secondary(0, BY_G, 7, 100, false)).unwrap(),
                1
            );
            let h = poll_local(a.insert(0, 9)).unwrap().unwrap();
            a.row_mut(h).set_u64(G, 7);
            let h = poll_local(a.get_for_update(0, 5)).unwrap().unwrap();
            a.row_mut(h).set_u64(G, 7);
            let n = poll_local(a.scan_secondary(0, BY_G, 7, 100, false)).unwrap();
            let keys: Vec<u64> = (0..n).map(|i| a.key(a.scan_row(i))).collect();
            assert_eq!(keys, vec![5, 6, 9], "{cc}, {primary:?}");
            a.commit()
                .unwrap_or_else(|e| panic!("{cc}, {primary:?}: alone, it aborted: {e}"));
        }
    }
}

/// A scan of the group a row leaves, while the writer moving it commits:
/// the entry it leaves stays until install, and the scan must not return
/// the row under it once the row holds its new key (`scan_then_set_x`
/// checks every row returned). A scanner that commits is ordered after the
/// writer, and finds group 1 empty.
#[test]
fn a_scan_of_the_group_a_row_leaves_never_returns_it_with_its_new_key() {
    for cc in LOCKING {
        for at in 0..=1 {
            let island = island(cc, PrimaryKind::Ordered, &[(5, 1)]);
            let mut a = island.worker().unwrap();
            a.begin(false);
            let h = poll_local(a.get_for_update(0, 5)).unwrap().unwrap();
            a.row_mut(h).set_u64(G, 7);
            let b = island.worker().unwrap();
            let (ra, seen) =
                commit_with_scan_during_install(&mut a, at, b, |b| scan_then_set_x(b, 1));
            ra.unwrap_or_else(|e| panic!("{cc}, row {at}: the writer failed: {e}"));
            if seen.committed {
                assert_eq!(seen.scanned, Some(vec![]), "{cc}, row {at}");
            }
        }
    }
}

/// Under OCC a transaction may hold a read of a slot as absent (an insert
/// not yet committed there), and that slot may be freed and taken again
/// for another key. A later lookup of that other key leads to the slot,
/// where the transaction's own entry is about the first key: "absent" read
/// from it would be validated by nothing once the second insert aborts too.
///
/// `o` inserts K1 into slot s; `a` reads K1 there as absent while `o`
/// aborts (s goes back to `o`'s free list); `o` inserts K2, which takes s;
/// `a` looks K2 up; `o` aborts again; `c` inserts K2 elsewhere, sets X and
/// commits; `a` reads X = 1. `a` read X after `c` and must not commit
/// having read K2 as absent (before `c`).
#[test]
fn a_slot_reused_for_another_key_is_not_read_as_that_keys_absence() {
    const K1: u64 = 7;
    const K2: u64 = 8;
    let island = island(CcKind::Occ, PrimaryKind::Hash, &[]);
    let (mut a, mut c) = (island.worker().unwrap(), island.worker().unwrap());
    let o = Rc::new(RefCell::new(island.worker().unwrap()));
    o.borrow_mut().begin(false);
    assert!(poll_local(o.borrow_mut().insert(0, K1)).unwrap().is_some());
    let slot = o.borrow().acc[0].rid;
    {
        let o = o.clone();
        sched::set(move |p| {
            if p != Point::ReadAbsent {
                return false;
            }
            o.borrow_mut().abort();
            true
        });
    }
    a.begin(false);
    assert!(poll_local(a.get(0, K1)).unwrap().is_none());
    sched::clear();
    o.borrow_mut().begin(false);
    assert!(poll_local(o.borrow_mut().insert(0, K2)).unwrap().is_some());
    assert_eq!(o.borrow().acc[0].rid, slot, "the slot is taken again");
    let got = poll_local(a.get(0, K2));
    o.borrow_mut().abort();
    let Ok(None) = got else {
        // Refused (or found): nothing to check.
        a.abort();
        return;
    };
    c.begin(false);
    assert!(poll_local(c.insert(0, K2)).unwrap().is_some());
    set_x(&mut c).unwrap();
    c.commit().unwrap();
    let x = poll_local(a.get(0, X)).unwrap().unwrap();
    assert_eq!(a.row(x).u64(VAL), 1);
    let r = a.commit();
    assert!(
        is_conflict(&r),
        "a committed having read K2 as absent and X as c set it, though c inserted K2: {r:?}"
    );
}

/// A re-insert over the transaction's own delete, after the key moved to
/// another slot (issue 33, item 7): `a` reads K; `b` deletes K and commits;
/// `c` inserts K again (into a slot of its own) and commits; then `a`
/// deletes its row and inserts K. Within `a` the key is gone (it deleted
/// it), so the insert must succeed, or the attempt abort as a conflict (its
/// read of K is stale): the procedure is never told that K exists. Under
/// 2PL `a`'s lock on K keeps `b` out, and the insert overwrites its row.
#[test]
fn a_reinsert_after_its_own_delete_is_never_refused() {
    const K: u64 = 5;
    for cc in LOCKING {
        for primary in [PrimaryKind::Hash, PrimaryKind::Ordered] {
            for for_update in [false, true] {
                let island = island(cc, primary, &[(K, 1)]);
                let (mut a, mut b, mut c) = (
                    island.worker().unwrap(),
                    island.worker().unwrap(),
                    island.worker().unwrap(),
                );
                a.begin(false);
                let h = if for_update {
                    poll_local(a.get_for_update(0, K))
                } else {
                    poll_local(a.get(0, K))
                };
                let h = h.unwrap().expect("K is loaded");

                b.begin(false);
                let b_deleted = match poll_local(b.get_for_update(0, K)) {
                    Ok(Some(hb)) => poll_local(b.delete(hb)).is_ok() && b.commit().is_ok(),
                    Ok(None) => panic!("{cc}: K is loaded"),
                    Err(_) => false,
                };
                if !b_deleted {
                    b.abort();
                }
                if b_deleted {
                    c.begin(false);
                    let hc = poll_local(c.insert(0, K)).unwrap().expect("K was deleted");
                    c.row_mut(hc).set_u64(G, 2);
                    c.commit().unwrap();
                }

                let what =
                    format!("{cc}, {primary:?}, for update {for_update}, b deleted K {b_deleted}");
                poll_local(a.delete(h)).unwrap();
                match poll_local(a.insert(0, K)) {
                    Ok(Some(h)) => {
                        a.row_mut(h).set_u64(G, 3);
                        let r = a.commit();
                        assert!(
                            !b_deleted || is_conflict(&r),
                            "{what}: a committed over a read of K that b's delete made stale"
                        );
                        if !b_deleted {
                            assert!(r.is_ok(), "{what}: {r:?}");
                        }
                    }
                    Ok(None) => panic!("{what}: the re-insert after a's own delete was refused"),
                    Err(Abort::Conflict(_)) => {
                        assert!(b_deleted, "{what}: a conflict with nobody");
                        a.abort();
                    }
                    Err(e) => panic!("{what}: {e}"),
                }
            }
        }
    }
}
