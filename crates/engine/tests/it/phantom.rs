//! Phantoms: range scans and point misses must stay valid until commit.
//!
//! Row versions cannot protect what a transaction did *not* see: a key that
//! was absent, or a row that appeared inside a range it scanned. These tests
//! build histories where such a phantom makes the outcome impossible in any
//! serial order.

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::txn::poll_local;
use islands::{Abort, AbortReason};

const VAL: Col = Col(0);

fn table(name: &str, primary: PrimaryKind) -> TableDef {
    TableDef::new(name, &[("val", ColType::U64)], 1 << 14, primary)
}

/// Every transaction counts the rows of an ordered table with a range scan
/// and inserts one row (under a key of its own) holding that count. In any
/// serial order the k-th insert sees k rows, so the counts stored are exactly
/// 0, 1, ..., n-1. A scan that misses a concurrent insert (a phantom) makes
/// two transactions store the same count.
#[test]
fn range_count_inserts_are_serializable() {
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let threads = 3u64;
        let per_thread = 250u64;
        let (island, _) = Island::open(
            IslandConfig::new(cc, threads as usize + 1),
            &[table("counts", PrimaryKind::Ordered)],
        )
        .unwrap();
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let island = island.clone();
                std::thread::spawn(move || {
                    let mut tx = island.worker().unwrap();
                    for i in 0..per_thread {
                        let key = (w << 32) | i;
                        tx.execute(100_000, |tx| {
                            Box::pin(async move {
                                let n = tx.scan(0, 0, u64::MAX, usize::MAX, false).await?;
                                let h = tx.insert(0, key).await?.ok_or(Abort::User("dup"))?;
                                tx.row_mut(h).set_u64(VAL, n as u64);
                                Ok(())
                            })
                        })
                        .unwrap_or_else(|e| panic!("{cc}: insert failed: {e}"));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let mut counts = Vec::new();
        island
            .catalog()
            .table(0)
            .for_each_row(|_, _, d| counts.push(d[0]));
        counts.sort_unstable();
        let n = threads * per_thread;
        let dups: Vec<u64> = counts
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        assert_eq!(counts.len() as u64, n, "{cc}: rows lost");
        assert!(
            dups.is_empty(),
            "{cc}: two transactions saw the same count (a phantom): {:?}",
            &dups[..dups.len().min(10)]
        );
        assert_eq!(counts, (0..n).collect::<Vec<_>>(), "{cc}: counts");
    }
}

/// A point read that finds the key in the index but the row absent (another
/// transaction's uncommitted insert, or a delete committing) reads "no such
/// key" just like an index miss, and must be validated like one.
///
/// Write skew on a key and a flag: `a` sets the flag only if key K is absent;
/// `c` inserts K only if the flag is clear. `a` reads K while `b`'s insert of K
/// is uncommitted (then `b` aborts), `c` commits, and `a` commits last. `a`
/// must abort: it read K absent (a before c) and the flag c read (c before a).
#[test]
fn a_key_read_as_absent_is_validated() {
    const FLAG: u64 = 0;
    const K: u64 = 7;
    for primary in [PrimaryKind::Hash, PrimaryKind::Ordered] {
        let (island, _) =
            Island::open(IslandConfig::new(CcKind::Occ, 3), &[table("t", primary)]).unwrap();
        island
            .loader()
            .unwrap()
            .put(0, FLAG, |r| r.set_u64(VAL, 0))
            .unwrap();
        let (mut a, mut b, mut c) = (
            island.worker().unwrap(),
            island.worker().unwrap(),
            island.worker().unwrap(),
        );
        b.begin(false);
        assert!(poll_local(b.insert(0, K)).unwrap().is_some());
        a.begin(false);
        assert!(poll_local(a.get(0, K)).unwrap().is_none(), "{primary:?}");
        b.abort();

        c.begin(false);
        let f = poll_local(c.get(0, FLAG)).unwrap().unwrap();
        assert_eq!(c.row(f).u64(VAL), 0);
        let h = poll_local(c.insert(0, K)).unwrap().unwrap();
        c.row_mut(h).set_u64(VAL, 1);
        c.commit().unwrap();

        let f = poll_local(a.get_for_update(0, FLAG)).unwrap().unwrap();
        a.row_mut(f).set_u64(VAL, 1);
        let r = a.commit();
        assert!(
            matches!(r, Err(Abort::Conflict(_))),
            "{primary:?}: a committed after reading K absent, though K was inserted \
             by a transaction it read from (write skew): {r:?}"
        );
    }
}

/// A scan cut short by its limit reads the range up to its last entry, even
/// when that entry is the transaction's own insert (which the commit-time
/// rescan skips).
///
/// `a` inserts 20 and scans the range with limit 2: [10, 20]. `b` inserts 15
/// and sets a flag; `a` reads the flag `b` set and commits. `a` must abort: it
/// read `b`'s flag (b before a) but not `b`'s row 15 (a before b).
#[test]
fn a_scan_cut_by_its_limit_on_an_own_insert_is_validated() {
    const FLAG: u64 = 1 << 40;
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let (island, _) = Island::open(
            IslandConfig::new(cc, 2),
            &[table("t", PrimaryKind::Ordered)],
        )
        .unwrap();
        {
            let mut l = island.loader().unwrap();
            l.put(0, 10, |r| r.set_u64(VAL, 10)).unwrap();
            l.put(0, FLAG, |r| r.set_u64(VAL, 0)).unwrap();
        }
        let (mut a, mut b) = (island.worker().unwrap(), island.worker().unwrap());
        a.begin(false);
        assert!(poll_local(a.insert(0, 20)).unwrap().is_some());
        let n = poll_local(a.scan(0, 0, 100, 2, false)).unwrap();
        let keys: Vec<u64> = (0..n).map(|i| a.key(a.scan_row(i))).collect();
        assert_eq!(keys, vec![10, 20], "{cc}");

        b.begin(false);
        assert!(poll_local(b.insert(0, 15)).unwrap().is_some());
        let f = poll_local(b.get_for_update(0, FLAG)).unwrap().unwrap();
        b.row_mut(f).set_u64(VAL, 1);
        b.commit().unwrap();

        let f = poll_local(a.get(0, FLAG)).unwrap().unwrap();
        assert_eq!(a.row(f).u64(VAL), 1);
        let r = a.commit();
        assert!(
            matches!(r, Err(Abort::Conflict(AbortReason::Phantom))),
            "{cc}: a's scan [10, 20] missed b's 15 although a read b's flag: {r:?}"
        );
    }
}

/// A point miss is validated through its key's hash stripe, net of the
/// transaction's own inserts on that stripe. An own insert made *before* the
/// miss is already in the stripe version recorded, so it must not be
/// subtracted again: that would hide one foreign insert (here, of the very
/// key read as missing) and let a write skew commit.
#[test]
fn a_miss_after_an_own_insert_on_its_stripe_is_validated() {
    use islands::storage::hash::HashIndex;
    const FLAG: u64 = 0;
    const K1: u64 = 1;
    let k2 = (2..)
        .find(|k| HashIndex::stripe_of(*k) == HashIndex::stripe_of(K1))
        .unwrap();
    for cc in [CcKind::NoWait, CcKind::WaitDie, CcKind::Occ] {
        let (island, _) =
            Island::open(IslandConfig::new(cc, 2), &[table("t", PrimaryKind::Hash)]).unwrap();
        island
            .loader()
            .unwrap()
            .put(0, FLAG, |r| r.set_u64(VAL, 0))
            .unwrap();
        let (mut a, mut c) = (island.worker().unwrap(), island.worker().unwrap());

        a.begin(false);
        assert!(poll_local(a.insert(0, k2)).unwrap().is_some());
        assert!(poll_local(a.get(0, K1)).unwrap().is_none());

        c.begin(false);
        let f = poll_local(c.get(0, FLAG)).unwrap().unwrap();
        assert_eq!(c.row(f).u64(VAL), 0);
        assert!(poll_local(c.insert(0, K1)).unwrap().is_some());
        c.commit().unwrap();

        let f = poll_local(a.get_for_update(0, FLAG)).unwrap().unwrap();
        a.row_mut(f).set_u64(VAL, 1);
        let r = a.commit();
        assert!(
            matches!(r, Err(Abort::Conflict(AbortReason::Phantom))),
            "{cc}: a committed after reading K1 absent, though K1 was inserted by a \
             transaction it read from (write skew): {r:?}"
        );

        // Alone, such a transaction commits.
        let k3 = (k2 + 1..)
            .find(|k| HashIndex::stripe_of(*k) == HashIndex::stripe_of(K1 + 1))
            .unwrap();
        a.begin(false);
        assert!(poll_local(a.insert(0, k3)).unwrap().is_some());
        assert!(poll_local(a.get(0, K1 + 1)).unwrap().is_none());
        a.commit().unwrap_or_else(|e| panic!("{cc}: alone: {e}"));
    }
}

/// A table declared with a fixed key set (its scans and misses go
/// unvalidated) refuses what would make a phantom: an insert, a delete, and an
/// update that moves a row to another secondary key. Updates that keep the
/// secondary key commit, and so does a read of a missing key.
#[test]
fn fixed_key_tables_refuse_what_would_make_a_phantom() {
    fn by_val(r: &islands::storage::RowRef) -> u64 {
        r.u64(VAL)
    }
    let def = TableDef::new(
        "fixed",
        &[("val", ColType::U64), ("other", ColType::U64)],
        64,
        PrimaryKind::Hash,
    )
    .with_secondary("by_val", by_val)
    .with_fixed_keys();
    for cc in [CcKind::NoWait, CcKind::Occ, CcKind::None] {
        let workers = if cc == CcKind::None { 1 } else { 2 };
        let (island, _) =
            Island::open(IslandConfig::new(cc, workers), std::slice::from_ref(&def)).unwrap();
        {
            let mut l = island.loader().unwrap();
            for k in 0..10u64 {
                l.put(0, k, |r| r.set_u64(VAL, k)).unwrap();
            }
        }
        let mut tx = island.worker().unwrap();
        let err = |r: Result<(), Abort>| match r {
            Err(Abort::Failed(e)) => e.to_string(),
            other => panic!("{cc}: expected a failure, got {other:?}"),
        };
        let e = err(tx.execute(0, |tx| {
            Box::pin(async move {
                tx.insert(0, 99).await?;
                Ok(())
            })
        }));
        assert!(e.contains("an insert") && e.contains("fixed"), "{cc}: {e}");
        let e = err(tx.execute(0, |tx| {
            Box::pin(async move {
                let h = tx.get_for_update(0, 3).await?.expect("loaded");
                tx.delete(h).await
            })
        }));
        assert!(e.contains("a delete"), "{cc}: {e}");
        let e = err(tx.execute(0, |tx| {
            Box::pin(async move {
                let h = tx.get_for_update(0, 4).await?.expect("loaded");
                tx.row_mut(h).set_u64(VAL, 40);
                Ok(())
            })
        }));
        assert!(e.contains("secondary key"), "{cc}: {e}");
        // Keeping the secondary key, and reading a key that is not there, commit.
        tx.execute(0, |tx| {
            Box::pin(async move {
                let h = tx.get_for_update(0, 5).await?.expect("loaded");
                tx.row_mut(h).set_u64(Col(1), 7);
                assert!(tx.get(0, 77).await?.is_none());
                let n = tx
                    .scan_secondary(0, islands::storage::SecondaryId(0), 5, 10, false)
                    .await?;
                assert_eq!(n, 1);
                Ok(())
            })
        })
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
        // Nothing the refused transactions did is there; the update is.
        let (v4, o5, n) = tx
            .execute(0, |tx| {
                Box::pin(async move {
                    let v4 = tx.get(0, 4).await?.map(|h| tx.row(h).u64(VAL));
                    let o5 = tx.get(0, 5).await?.map(|h| tx.row(h).u64(Col(1)));
                    let n =
                        tx.get(0, 3).await?.is_some() as u8 + tx.get(0, 99).await?.is_some() as u8;
                    Ok((v4, o5, n))
                })
            })
            .unwrap();
        assert_eq!((v4, o5, n), (Some(4), Some(7), 1), "{cc}");
    }
}
