//! The checker itself, on histories written by hand: the anomalies of issue
//! 22 are cycles, a broken version chain is a violation, and a serial
//! history passes.

use std::collections::HashMap;

use super::graph::{check, check_final, Done, Pred, State, Tk, Write};
use super::{tomb_key, HKV, OKV, TOMB};

const X: Tk = (HKV, 0);

fn initial() -> HashMap<Tk, State> {
    let mut m = HashMap::new();
    m.insert(X, Some(0));
    for (t, k) in [(HKV, 9), (OKV, 5)] {
        m.insert((TOMB, tomb_key(t, k)), Some(0));
    }
    m
}

fn txn(
    id: u64,
    reads: &[(Tk, u64, State)],
    negs: &[(Tk, Pred)],
    writes: &[(Tk, u64, State)],
) -> Done {
    Done {
        id,
        seq: id,
        plan: format!("hand-written {id}"),
        reads: reads.to_vec(),
        negs: negs.to_vec(),
        writes: writes
            .iter()
            .map(|&(tk, prev, state)| Write { tk, prev, state })
            .collect(),
        anomalies: vec![],
    }
}

/// Schedule A: `a` reads K absent and writes X; `b` inserts K and reads X
/// as it was before `a`.
#[test]
fn the_checker_finds_a_write_skew_through_a_point_miss() {
    let k = (HKV, 9);
    let tomb = (TOMB, tomb_key(HKV, 9));
    let a = txn(
        1,
        &[(tomb, 0, Some(0)), (k, 0, None), (X, 0, Some(0))],
        &[],
        &[(X, 0, Some(0))],
    );
    let b = txn(
        2,
        &[(tomb, 0, Some(0)), (k, 0, None), (X, 0, Some(0))],
        &[],
        &[(k, 0, Some(1))],
    );
    let r = check(&initial(), &[a.clone(), b.clone()]);
    assert_eq!((r.cycles, r.explicit_cycles), (1, 1), "{r}");
    assert!(r.cycle_reports[0].contains("0x1") && r.cycle_reports[0].contains("0x2"));
    // Either order alone is fine: b after a reads X as a wrote it.
    let b_after = txn(
        2,
        &[(tomb, 0, Some(0)), (k, 0, None), (X, 1, Some(0))],
        &[],
        &[(k, 0, Some(1))],
    );
    let r = check(&initial(), &[a, b_after]);
    assert!(r.ok(), "{r}: {:?}", r.violations);
}

/// Schedule B: `a` reads X and inserts row 5 into group 7; `b` scans group
/// 7 without finding it and writes X. Nothing but the scan's negative
/// observation orders `b` before `a`.
#[test]
fn the_checker_finds_a_secondary_phantom_from_what_a_scan_did_not_return() {
    let row = (OKV, 5);
    let tomb = (TOMB, tomb_key(OKV, 5));
    let a = txn(
        1,
        &[(X, 0, Some(0)), (tomb, 0, Some(0)), (row, 0, None)],
        &[],
        &[(row, 0, Some(7))],
    );
    let b = txn(
        2,
        &[(X, 0, Some(0))],
        &[(row, Pred::Group(7))],
        &[(X, 0, Some(0))],
    );
    let r = check(&initial(), &[a.clone(), b]);
    assert_eq!((r.cycles, r.explicit_cycles), (1, 0), "{r}");
    // After a, b's scan returns the row.
    let b_after = txn(
        2,
        &[(X, 0, Some(0)), (row, 1, Some(7))],
        &[],
        &[(X, 0, Some(0))],
    );
    let r = check(&initial(), &[a.clone(), b_after]);
    assert!(r.ok(), "{r}: {:?}", r.violations);
    // Before a, in a serial order: b's scan is empty, and a reads b's X.
    let b_before = txn(
        2,
        &[(X, 0, Some(0))],
        &[(row, Pred::Group(7))],
        &[(X, 0, Some(0))],
    );
    let a_after = txn(
        1,
        &[(X, 2, Some(0)), (tomb, 0, Some(0)), (row, 0, None)],
        &[],
        &[(row, 0, Some(7))],
    );
    let r = check(&initial(), &[a_after, b_before]);
    assert!(r.ok(), "{r}: {:?}", r.violations);
}

/// The inference follows the graph: `c` wrote row 5 into group 7 and `m`
/// then moved it out; `b` read what `c` wrote elsewhere (so it follows `c`)
/// and did not see row 5 in group 7, so it follows `m` too; reading X as it
/// was before `m` wrote it closes a cycle.
#[test]
fn the_checker_orders_a_scan_after_the_end_of_what_it_missed() {
    let row = (OKV, 5);
    let tomb = (TOMB, tomb_key(OKV, 5));
    let y = (HKV, 1);
    let mut init = initial();
    init.insert(y, Some(0));
    let c = txn(
        1,
        &[(tomb, 0, Some(0)), (row, 0, None), (y, 0, Some(0))],
        &[],
        &[(row, 0, Some(7)), (y, 0, Some(1))],
    );
    let m = txn(
        3,
        &[(row, 1, Some(7)), (X, 0, Some(0))],
        &[],
        &[(row, 1, Some(2)), (X, 0, Some(0))],
    );
    let b = txn(
        2,
        &[(y, 1, Some(1)), (X, 0, Some(0))],
        &[(row, Pred::Group(7))],
        &[],
    );
    let r = check(&init, &[c, m, b]);
    assert_eq!((r.cycles, r.explicit_cycles), (1, 0), "{r}");
}

#[test]
fn the_checker_reports_lost_updates_and_reads_of_versions_nobody_committed() {
    let a = txn(1, &[(X, 0, Some(0))], &[], &[(X, 0, Some(1))]);
    let b = txn(2, &[(X, 0, Some(0))], &[], &[(X, 0, Some(2))]);
    let r = check(&initial(), &[a.clone(), b]);
    assert!(
        r.violations.iter().any(|v| v.contains("lost update")),
        "{:?}",
        r.violations
    );
    let dirty = txn(3, &[(X, 99, Some(0))], &[], &[]);
    let r = check(&initial(), &[a.clone(), dirty]);
    assert!(
        r.violations.iter().any(|v| v.contains("no committed")),
        "{:?}",
        r.violations
    );
    let wrong = txn(4, &[(X, 1, Some(5))], &[], &[]);
    let r = check(&initial(), &[a.clone(), wrong]);
    assert!(
        r.violations.iter().any(|v| v.contains("its writer left")),
        "{:?}",
        r.violations
    );
    // The rows left must be the last versions.
    let mut left: HashMap<Tk, (u64, State)> = initial()
        .into_iter()
        .filter_map(|(tk, s)| s.map(|g| (tk, (0, Some(g)))))
        .collect();
    left.insert(X, (1, Some(1)));
    assert!(check_final(std::slice::from_ref(&a), &initial(), &left).is_empty());
    left.insert(X, (0, Some(0)));
    assert_eq!(check_final(&[a], &initial(), &left).len(), 1);
}
