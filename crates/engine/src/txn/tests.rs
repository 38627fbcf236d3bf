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
use crate::storage::{Col, ColType, PrimaryKind, RowRef, TableDef};
use crate::Abort;

const VAL: Col = Col(0);
const G: Col = Col(1);
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
