//! Set-ups the server tests share: a table of 16 counters on one island,
//! and the procedures over it that several tests call.

use std::time::Duration;

use islands::api::{Catalog, Deployment, Options, Partition, ProcDef, Type, Value};
use islands::storage::{Col, ColType, PrimaryKind, TableDef, TableId};
use islands::txn::Txn;
use islands::Abort;

use super::serve::spec;

/// Counters `0..COUNTERS`, each opened at 0.
pub(super) const COUNTERS: u64 = 16;

/// A catalog with the counters' table `t` (one `int8` column `v`, on one
/// island) and `value(key)`, which answers a counter's value.
pub(super) fn counters() -> (Catalog, TableId) {
    let mut c = Catalog::new();
    let t = c.table(
        TableDef::new("t", &[("v", ColType::I64)], COUNTERS, PrimaryKind::Hash),
        Partition::BySite(|_| 0),
    );
    c.procedure(
        ProcDef::new("value", move |tx, a, out| {
            Box::pin(async move {
                let v = read(tx, t, a.int(0) as u64).await?;
                out.push(vec![Value::Int(v)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .column("v", Type::Int),
    )
    .unwrap();
    (c, t)
}

/// The value of counter `key` of table `t`.
pub(super) async fn read(tx: &mut Txn, t: TableId, key: u64) -> Result<i64, Abort> {
    let h = tx
        .get(t, key)
        .await?
        .ok_or(Abort::User("no such counter"))?;
    Ok(tx.row(h).i64(Col(0)))
}

/// Adds 1 to counter `key` of table `t`; its new value.
pub(super) async fn add_one(tx: &mut Txn, t: TableId, key: u64) -> Result<i64, Abort> {
    let h = tx
        .get_for_update(t, key)
        .await?
        .ok_or(Abort::User("no such counter"))?;
    let v = tx.row(h).i64(Col(0)) + 1;
    tx.row_mut(h).set_i64(Col(0), v);
    Ok(v)
}

/// `bump(key, ms)` on table `t`: adds 1 to counter `key`, takes `ms`
/// milliseconds more before it commits, and answers the new value.
pub(super) fn slow_bump(t: TableId) -> ProcDef {
    ProcDef::new("bump", move |tx, a, out| {
        Box::pin(async move {
            let v = add_one(tx, t, a.int(0) as u64).await?;
            std::thread::sleep(Duration::from_millis(a.int(1) as u64));
            out.push(vec![Value::Int(v)]);
            Ok(())
        })
    })
    .param("key", Type::Int)
    .param("ms", Type::Int)
    .column("v", Type::Int)
}

/// The deployment of catalog `c` (from [`counters`]) without a log, the
/// counters of its table `t` at 0.
pub(super) fn open_counters(c: Catalog, t: TableId) -> Deployment {
    let mut o = Options::new(spec(None));
    o.pin = false;
    Deployment::open(o, c, move |l| {
        for k in 0..COUNTERS {
            l.put(t, k, |r| r.set_i64(Col(0), 0))?;
        }
        Ok(())
    })
    .unwrap()
}
