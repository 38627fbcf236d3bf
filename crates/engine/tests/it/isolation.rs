//! Read committed (`Txn::read_committed`): what a transaction that lowers
//! its isolation may and may not see, under every scheme that locks or
//! validates.

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::txn::{poll_local, Txn};
use islands::{Abort, AbortReason};

const VAL: Col = Col(0);

fn island(cc: CcKind) -> Island {
    let def = TableDef::new("t", &[("val", ColType::U64)], 1 << 10, PrimaryKind::Ordered);
    let workers = if cc == CcKind::None { 1 } else { 3 };
    let (island, _) = Island::open(IslandConfig::new(cc, workers), &[def]).unwrap();
    {
        let mut l = island.loader().unwrap();
        for k in 0..4u64 {
            l.put(0, k, |r| r.set_u64(VAL, 10 * k)).unwrap();
        }
    }
    island
}

fn three_workers(island: &Island) -> (Txn, Txn, Txn) {
    (
        island.worker().unwrap(),
        island.worker().unwrap(),
        island.worker().unwrap(),
    )
}

/// `w` begins and holds row `key` for update with a new (uncommitted) value.
fn writer_holds(w: &mut Txn, key: u64, val: u64) {
    w.begin(false);
    let h = poll_local(w.get_for_update(0, key)).unwrap().unwrap();
    w.row_mut(h).set_u64(VAL, val);
}

/// A writer holds row 1 (locked, or about to commit under OCC) with a new
/// value. A read-committed reader sees the old committed value and commits;
/// it neither sees the uncommitted value (P1) nor aborts the writer. Once the
/// writer commits, the reader's next read sees the new value (no repeatable
/// read is promised). Another writer's uncommitted insert is invisible to the
/// reader's scan. A plain reader of the locked row conflicts, as before.
#[test]
fn read_committed_sees_only_committed_rows_and_blocks_nobody() {
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let island = island(cc);
        let (mut w, mut r, mut p) = three_workers(&island);
        writer_holds(&mut w, 1, 111);
        let ins = poll_local(w.insert(0, 9)).unwrap().unwrap();
        w.row_mut(ins).set_u64(VAL, 999);

        r.begin(false);
        r.read_committed();
        let h = poll_local(r.get(0, 1)).unwrap().unwrap();
        assert_eq!(r.row(h).u64(VAL), 10, "{cc}: read an uncommitted value");
        let n = poll_local(r.scan(0, 0, u64::MAX, 100, false)).unwrap();
        let keys: Vec<u64> = (0..n).map(|i| r.row(r.scan_row(i)).u64(VAL)).collect();
        assert_eq!(
            keys,
            vec![0, 10, 20, 30],
            "{cc}: the scan saw an uncommitted insert"
        );

        if cc != CcKind::Occ {
            // A plain read of the locked row conflicts (no_wait aborts; under
            // wait-die the younger reader dies).
            p.begin(false);
            let plain = poll_local(p.get(0, 1));
            assert!(
                matches!(
                    plain,
                    Err(Abort::Conflict(
                        AbortReason::LockConflict | AbortReason::WaitDie
                    ))
                ),
                "{cc}: {plain:?}"
            );
            p.abort();
        }

        w.commit()
            .unwrap_or_else(|e| panic!("{cc}: the writer was hurt: {e}"));
        // A later read of the same row in the same transaction: the reader
        // has it already (its own copy), so read a fresh transaction instead.
        r.commit()
            .unwrap_or_else(|e| panic!("{cc}: the reader failed: {e}"));
        r.begin(false);
        r.read_committed();
        let h = poll_local(r.get(0, 1)).unwrap().unwrap();
        assert_eq!(r.row(h).u64(VAL), 111, "{cc}");
        assert!(poll_local(r.get(0, 9)).unwrap().is_some(), "{cc}");
        r.commit().unwrap();
    }
}

/// Only read-only transactions may lower their isolation: a write fails the
/// commit with an error and changes nothing.
#[test]
fn a_read_committed_transaction_that_writes_fails() {
    for cc in [CcKind::None, CcKind::NoWait, CcKind::Occ] {
        let island = island(cc);
        let mut t = island.worker().unwrap();
        t.begin(false);
        t.read_committed();
        let h = poll_local(t.get_for_update(0, 2)).unwrap().unwrap();
        t.row_mut(h).set_u64(VAL, 5);
        let e = t
            .commit()
            .expect_err("a write under read committed committed");
        assert!(
            matches!(&e, Abort::Failed(err) if err.to_string().contains("read-committed")),
            "{cc}: {e}"
        );
        t.begin(false);
        let h = poll_local(t.get(0, 2)).unwrap().unwrap();
        assert_eq!(t.row(h).u64(VAL), 20, "{cc}: the refused write was applied");
        t.commit().unwrap();
        // The mode ends with the transaction.
        t.begin(false);
        let h = poll_local(t.get_for_update(0, 2)).unwrap().unwrap();
        t.row_mut(h).set_u64(VAL, 7);
        t.commit().unwrap();
    }
}

/// A read that conflicts names the row it ran into and how it asked for it,
/// and the row reads as locked for that request until the holder ends: what
/// a driver waits on before it retries (instead of blind backoffs). A shared
/// holder blocks a writer's retry but not a reader's. A fresh attempt forgets
/// the conflict. (Only no_wait names the row: wait-die waits or dies.)
#[test]
fn a_conflict_names_its_row_which_stays_locked_until_the_holder_ends() {
    let island = island(CcKind::NoWait);
    let (mut w, mut p, mut q) = three_workers(&island);
    writer_holds(&mut w, 2, 7);

    // A shared read of row 2 conflicts with the writer.
    p.begin(false);
    assert_eq!(p.conflict_row(), None);
    let _ = poll_local(p.get(0, 1)).unwrap().unwrap();
    let r = poll_local(p.get(0, 2));
    assert!(
        matches!(r, Err(Abort::Conflict(AbortReason::LockConflict))),
        "{r:?}"
    );
    let shared = p.conflict_row().expect("the conflict names its row");
    assert_eq!((shared.table, shared.exclusive), (0, false));
    p.abort();
    // The reader let go of row 1; row 2 is still the writer's.
    assert!(p.still_locked(shared));

    // A read for update of row 2 conflicts too, as an exclusive request.
    q.begin(false);
    let r = poll_local(q.get_for_update(0, 2));
    assert!(r.is_err(), "{r:?}");
    let excl = q.conflict_row().expect("the conflict names its row");
    assert_eq!(excl.rid, shared.rid, "both ran into row 2");
    assert!(excl.exclusive);
    q.abort();

    w.commit().unwrap();
    assert!(
        !p.still_locked(shared),
        "still locked after the holder committed"
    );
    assert!(!q.still_locked(excl));

    // A reader holds row 2 now: the writer's retry would conflict, the
    // reader's not.
    p.begin(false);
    assert_eq!(
        p.conflict_row(),
        None,
        "a new attempt keeps the old conflict"
    );
    let h = poll_local(p.get(0, 2)).unwrap().unwrap();
    assert_eq!(p.row(h).u64(VAL), 7);
    assert!(q.still_locked(excl), "a shared holder must block a writer");
    assert!(
        !q.still_locked(shared),
        "a shared holder must not block a reader"
    );
    p.commit().unwrap();
    assert!(!q.still_locked(excl));
}

/// A transaction that lowers its isolation partway still validates what it
/// read before the call: a read (OCC; under 2PL its lock keeps writers
/// out), a scan and a point miss on an ordered table, and a point miss on a
/// hash table. The reader `r` reads one of them, calls `read_committed`,
/// then reads row 2 after `w` changed both and committed: `r` read row 2
/// after `w` (w before r) and the other before `w` (r before w), so its
/// commit must fail. Reads after the call stay unvalidated: without the
/// earlier read, the same commit goes through.
#[test]
fn reads_before_read_committed_are_still_validated() {
    let defs = [
        TableDef::new("o", &[("val", ColType::U64)], 1 << 10, PrimaryKind::Ordered),
        TableDef::new("h", &[("val", ColType::U64)], 1 << 10, PrimaryKind::Hash),
    ];
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Before {
        Read,
        Scan,
        OrderedMiss,
        HashMiss,
        Nothing,
    }
    let mut unvalidated = Vec::new();
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        for before in [
            Before::Read,
            Before::Scan,
            Before::OrderedMiss,
            Before::HashMiss,
            Before::Nothing,
        ] {
            if before == Before::Read && cc != CcKind::Occ {
                continue;
            }
            let (island, _) = Island::open(IslandConfig::new(cc, 2), &defs).unwrap();
            {
                let mut l = island.loader().unwrap();
                for k in 0..4u64 {
                    l.put(0, k, |r| r.set_u64(VAL, 10 * k)).unwrap();
                }
            }
            let (mut r, mut w) = (island.worker().unwrap(), island.worker().unwrap());
            r.begin(false);
            match before {
                Before::Read => {
                    let h = poll_local(r.get(0, 1)).unwrap().unwrap();
                    assert_eq!(r.row(h).u64(VAL), 10);
                }
                Before::Scan => assert_eq!(poll_local(r.scan(0, 100, 200, 10, false)).unwrap(), 0),
                Before::OrderedMiss => assert!(poll_local(r.get(0, 50)).unwrap().is_none()),
                Before::HashMiss => assert!(poll_local(r.get(1, 50)).unwrap().is_none()),
                Before::Nothing => {}
            }
            r.read_committed();

            w.begin(false);
            let h = poll_local(w.get_for_update(0, 2)).unwrap().unwrap();
            w.row_mut(h).set_u64(VAL, 99);
            match before {
                Before::Read => {
                    let h = poll_local(w.get_for_update(0, 1)).unwrap().unwrap();
                    w.row_mut(h).set_u64(VAL, 11);
                }
                Before::Scan => assert!(poll_local(w.insert(0, 150)).unwrap().is_some()),
                Before::OrderedMiss => assert!(poll_local(w.insert(0, 50)).unwrap().is_some()),
                Before::HashMiss => assert!(poll_local(w.insert(1, 50)).unwrap().is_some()),
                Before::Nothing => {}
            }
            w.commit().unwrap();

            let h = poll_local(r.get(0, 2)).unwrap().unwrap();
            assert_eq!(r.row(h).u64(VAL), 99, "{cc}, {before:?}");
            let res = r.commit();
            if before == Before::Nothing {
                res.unwrap_or_else(|e| panic!("{cc}: a read-committed read was validated: {e}"));
            } else if !matches!(res, Err(Abort::Conflict(_))) {
                unvalidated.push(format!("{cc}, {before:?}"));
            }
        }
    }
    assert!(
        unvalidated.is_empty(),
        "a read made before read_committed() was not validated (the reader saw the state \
         before the writer and after it): {unvalidated:?}"
    );
}
