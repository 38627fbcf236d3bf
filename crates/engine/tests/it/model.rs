//! Tables and transactions against a plain `BTreeMap` model: random sequences
//! of inserts, updates, deletes, point reads and range scans, each transaction
//! committed or aborted at random, under every scheme with one worker.

use std::collections::BTreeMap;

use islands::island::{Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::Abort;
use proptest::prelude::*;

use crate::common::ALL_CC;

const VAL: Col = Col(0);
const TAG: Col = Col(1);

fn tables() -> Vec<TableDef> {
    vec![
        TableDef::new(
            "hashed",
            &[("val", ColType::I64), ("tag", ColType::U64)],
            256,
            PrimaryKind::Hash,
        ),
        TableDef::new(
            "ordered",
            &[("val", ColType::I64), ("tag", ColType::U64)],
            256,
            PrimaryKind::Ordered,
        )
        .with_secondary("by_tag", |r| r.u64(TAG)),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Get(u8, u64),
    Put(u8, u64, i64),
    Del(u8, u64),
    Scan(u64, u64, u8, bool),
    ByTag(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..2, 0u64..40).prop_map(|(t, k)| Op::Get(t, k)),
        (0u8..2, 0u64..40, -100i64..100).prop_map(|(t, k, v)| Op::Put(t, k, v)),
        (0u8..2, 0u64..40).prop_map(|(t, k)| Op::Del(t, k)),
        (0u64..40, 0u64..40, 1u8..8, any::<bool>()).prop_map(|(a, b, l, r)| Op::Scan(
            a.min(b),
            a.max(b),
            l,
            r
        )),
        (0u64..4).prop_map(Op::ByTag),
    ]
}

type Model = [BTreeMap<u64, i64>; 2];

/// Runs one transaction's ops against the island and a copy of the model;
/// returns the observations so both sides can be compared.
async fn run_ops(
    tx: &mut islands::txn::Txn,
    ops: &[Op],
    model: &mut Model,
) -> Result<Vec<String>, Abort> {
    let mut seen = vec![];
    for op in ops {
        match *op {
            Op::Get(t, k) => {
                let got = tx.get(t as u16, k).await?.map(|h| tx.row(h).i64(VAL));
                assert_eq!(got, model[t as usize].get(&k).copied(), "get({t},{k})");
                seen.push(format!("{got:?}"));
            }
            Op::Put(t, k, v) => {
                if model[t as usize].contains_key(&k) {
                    let h = tx
                        .get_for_update(t as u16, k)
                        .await?
                        .expect("model says present");
                    tx.row_mut(h).set_i64(VAL, v);
                    tx.row_mut(h).set_u64(TAG, (v.unsigned_abs()) % 4);
                } else {
                    let h = tx.insert(t as u16, k).await?.expect("model says absent");
                    tx.row_mut(h).set_i64(VAL, v);
                    tx.row_mut(h).set_u64(TAG, (v.unsigned_abs()) % 4);
                }
                model[t as usize].insert(k, v);
            }
            Op::Del(t, k) => {
                // Rows inserted in this transaction cannot be deleted in it (documented).
                if let Some(h) = tx.get_for_update(t as u16, k).await? {
                    if tx.delete(h).await.is_ok() {
                        model[t as usize].remove(&k);
                    }
                }
            }
            Op::Scan(lo, hi, limit, rev) => {
                let n = tx.scan(1, lo, hi, limit as usize, rev).await?;
                let got: Vec<(u64, i64)> = (0..n)
                    .map(|i| tx.scan_row(i))
                    .map(|h| (tx.key(h), tx.row(h).i64(VAL)))
                    .collect();
                let mut want: Vec<(u64, i64)> =
                    model[1].range(lo..=hi).map(|(k, v)| (*k, *v)).collect();
                if rev {
                    want.reverse();
                }
                want.truncate(limit as usize);
                assert_eq!(got, want, "scan {lo}..={hi} limit {limit} rev {rev}");
            }
            Op::ByTag(tag) => {
                let by_tag = tx.catalog_secondary(1, "by_tag");
                let n = tx.scan_secondary(1, by_tag, tag, 1000, false).await?;
                let got: Vec<u64> = (0..n).map(|i| tx.key(tx.scan_row(i))).collect();
                let want: Vec<u64> = model[1]
                    .iter()
                    .filter(|(_, v)| v.unsigned_abs() % 4 == tag)
                    .map(|(k, _)| *k)
                    .collect();
                assert_eq!(got, want, "by_tag {tag}");
            }
        }
    }
    Ok(seen)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn transactions_match_a_model(txns in proptest::collection::vec((proptest::collection::vec(op(), 1..8), any::<bool>()), 1..30), cc_i in 0usize..4) {
        let cc = ALL_CC[cc_i];
        let (island, _) = Island::open(IslandConfig::new(cc, 1), &tables()).unwrap();
        let mut tx = island.worker().unwrap();
        let mut model: Model = [BTreeMap::new(), BTreeMap::new()];
        for (ops, commit) in txns {
            let mut scratch = model.clone();
            tx.begin(false);
            let r = islands::txn::poll_local(run_ops(&mut tx, &ops, &mut scratch));
            prop_assert!(r.is_ok(), "{cc}: unexpected abort {:?}", r.err());
            if commit {
                prop_assert!(tx.commit().is_ok());
                model = scratch;
            } else {
                tx.abort();
            }
            // The committed state equals the model, read in a fresh transaction.
            let mut check = model.clone();
            let all: Vec<Op> = (0..40).flat_map(|k| [Op::Get(0, k), Op::Get(1, k)]).chain([Op::Scan(0, 40, 100, false), Op::ByTag(0), Op::ByTag(1)]).collect();
            tx.begin(false);
            let r = islands::txn::poll_local(run_ops(&mut tx, &all, &mut check));
            prop_assert!(r.is_ok());
            prop_assert!(tx.commit().is_ok());
        }
        prop_assert_eq!(island.catalog().table(0).count_rows(), model[0].len() as u64);
        prop_assert_eq!(island.catalog().table(1).count_rows(), model[1].len() as u64);
    }
}
