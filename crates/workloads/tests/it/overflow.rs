//! Every built-in procedure checks its arithmetic on stored values: a call
//! that would overflow a column rolls back with `CallError::OutOfRange`
//! (SQLSTATE 22003 on a server) and leaves every value as it was (issue 29,
//! item 3); TPC-C's transactions abort with `Error::OutOfRange`.

use islands::api::{CallError, Catalog, Client, Deployment, Options, ProcDef, Type, Value};
use islands::cc::CcKind;
use islands::deploy::{DeploySpec, Islands};
use islands::island::{Island, IslandConfig};
use islands::storage::Col;
use islands::{Abort, Error};
use islands_workloads::served::Builtin;
use islands_workloads::tpcc::schema::{self, cust, customer_key, stock, stock_key, wh};
use islands_workloads::tpcc::{self, txns, Line, TpccConfig, TpccReq, PAYMENT};

/// Adds `poke(table, key, col, v)` (sets an `I64` column, `u64` ones by
/// their bits when `unsigned`) and `peek(table, key, col)` to a catalog.
fn with_poke(mut c: Catalog) -> Catalog {
    for unsigned in [false, true] {
        let name = if unsigned { "poke_u64" } else { "poke_i64" };
        c.procedure(
            ProcDef::new(name, move |tx, a, _| {
                Box::pin(async move {
                    let (t, k, col, v) = (a.int(0) as u16, a.int(1) as u64, a.int(2), a.int(3));
                    let h = tx
                        .get_for_update(t, k)
                        .await?
                        .ok_or(Abort::User("no row"))?;
                    let col = Col(col as u16);
                    if unsigned {
                        tx.row_mut(h).set_u64(col, v as u64);
                    } else {
                        tx.row_mut(h).set_i64(col, v);
                    }
                    Ok(())
                })
            })
            .param("table", Type::Int)
            .param("key", Type::Int)
            .param("col", Type::Int)
            .param("v", Type::Int),
        )
        .unwrap();
    }
    c.procedure(
        ProcDef::new("peek", |tx, a, out| {
            Box::pin(async move {
                let (t, k, col) = (a.int(0) as u16, a.int(1) as u64, a.int(2));
                let h = tx.get(t, k).await?.ok_or(Abort::User("no row"))?;
                let at = col as usize * 8;
                let row = tx.row(h);
                let v = i64::from_le_bytes(row.as_bytes()[at..at + 8].try_into().unwrap());
                out.push(vec![Value::Int(v)]);
                Ok(())
            })
        })
        .param("table", Type::Int)
        .param("key", Type::Int)
        .param("col", Type::Int)
        .column("v", Type::Int),
    )
    .unwrap();
    c
}

fn open(b: Builtin) -> Deployment {
    let mut spec = DeploySpec::new(Islands::Count(1));
    spec.workers_per_island = Some(1);
    spec.durability = "off".into();
    b.place(&mut spec).unwrap();
    let mut o = Options::new(spec);
    o.pin = false;
    Deployment::open(o, with_poke(b.catalog()), move |l| b.load(l)).unwrap()
}

fn call(c: &Client, name: &str, args: &[i64]) -> Result<Vec<Vec<Value>>, CallError> {
    let args: Vec<Value> = args.iter().map(|&v| Value::Int(v)).collect();
    c.call(name, &args)
}

fn peek(c: &Client, table: i64, key: i64, col: i64) -> i64 {
    call(c, "peek", &[table, key, col]).unwrap()[0][0]
        .as_int()
        .unwrap()
}

/// `name(args)` fails with `OutOfRange` naming `column`.
fn overflows(c: &Client, name: &str, args: &[i64], column: &str) {
    match call(c, name, args) {
        Err(CallError::OutOfRange { why, .. }) => {
            assert!(why.contains(column), "{name}{args:?}: {why}")
        }
        r => panic!("{name}{args:?}: expected an out-of-range rollback, got {r:?}"),
    }
}

#[test]
fn tpcb_rolls_back_an_overflowing_balance() {
    let db = open(Builtin::Tpcb { scale: 1 });
    let c = db.client();
    call(&c, "tpcb", &[1, 1, 1, i64::MAX]).unwrap();
    overflows(&c, "tpcb", &[1, 1, 1, 1], "balance");
    // Account 2 and teller 2 take the delta; the branch overflows: all undone.
    overflows(&c, "tpcb", &[2, 2, 1, 1], "balance");
    assert_eq!(peek(&c, 2, 1, 0), i64::MAX, "account 1");
    assert_eq!(peek(&c, 2, 2, 0), 0, "account 2");
    assert_eq!(peek(&c, 1, 2, 0), 0, "teller 2");
    assert_eq!(peek(&c, 0, 1, 0), i64::MAX, "branch 1");
    // The branch's history count: one row, the first call's.
    assert_eq!(peek(&c, 0, 1, 1), 1, "branch 1's hist_seq");
    // Below the minimum, too.
    call(&c, "tpcb", &[2, 2, 1, i64::MIN]).unwrap();
    overflows(&c, "tpcb", &[2, 2, 1, -1], "balance");
    assert_eq!(peek(&c, 2, 2, 0), i64::MIN, "account 2");
    drop(c);
    db.shutdown().unwrap();
}

#[test]
fn bank_rolls_back_an_overflowing_transfer() {
    let db = open(Builtin::Bank { accounts: 64 });
    let c = db.client();
    call(&c, "poke_i64", &[0, 1, 0, i64::MAX - 10]).unwrap();
    overflows(&c, "transfer", &[7, 0, 1, 11], "balance");
    assert_eq!(peek(&c, 0, 0, 0), 1_000, "the source");
    assert_eq!(peek(&c, 0, 1, 0), i64::MAX - 10, "the destination");
    assert!(
        matches!(
            call(&c, "bank_transfer", &[7]),
            Err(CallError::Rollback { .. })
        ),
        "the transfer is not recorded"
    );
    call(&c, "transfer", &[8, 0, 1, 10]).unwrap();
    assert_eq!(peek(&c, 0, 1, 0), i64::MAX);
    drop(c);
    db.shutdown().unwrap();
}

#[test]
fn ycsb_rmw_rolls_back_an_overflowing_counter() {
    let db = open(Builtin::Ycsb { rows: 100 });
    let c = db.client();
    call(&c, "ycsb_update", &[5, -1]).unwrap(); // f0 = u64::MAX
    overflows(&c, "ycsb_rmw", &[5], "f0");
    assert_eq!(peek(&c, 0, 5, 0), -1, "f0 is still u64::MAX");
    drop(c);
    db.shutdown().unwrap();
}

#[test]
fn micro_update_rolls_back_an_overflowing_value() {
    let db = open(Builtin::Micro { rows: 100 });
    let c = db.client();
    call(&c, "poke_i64", &[0, 9, 0, i64::MAX]).unwrap();
    let keys = Value::Ints(vec![3, 9]);
    match c.call("micro_update", &[keys]) {
        Err(CallError::OutOfRange { why, .. }) => assert!(why.contains("val"), "{why}"),
        r => panic!("expected an out-of-range rollback, got {r:?}"),
    }
    assert_eq!(
        peek(&c, 0, 3, 0),
        0,
        "key 3, updated before key 9 overflowed"
    );
    assert_eq!(peek(&c, 0, 9, 0), i64::MAX);
    drop(c);
    db.shutdown().unwrap();
}

fn tpcc_island() -> (Island, TpccConfig) {
    let cfg = TpccConfig {
        warehouses: 1,
        items: 1_000,
        customers_per_district: 30,
        max_orders_per_district: 1_000_000,
        ..Default::default()
    };
    let (island, _) =
        Island::open(IslandConfig::new(CcKind::Occ, 1), &schema::tables(&cfg)).unwrap();
    tpcc::load(&island, &cfg, 1..2, true).unwrap();
    (island, cfg)
}

fn set_i64(island: &Island, table: u16, key: u64, col: Col, v: i64) {
    let mut tx = island.worker().unwrap();
    tx.execute(0, |tx| {
        Box::pin(async move {
            let h = tx.get_for_update(table, key).await?.unwrap();
            tx.row_mut(h).set_i64(col, v);
            Ok(())
        })
    })
    .unwrap();
}

fn get_i64(island: &Island, table: u16, key: u64, col: Col) -> i64 {
    let mut tx = island.worker().unwrap();
    tx.execute(0, |tx| {
        Box::pin(async move {
            let h = tx.get(table, key).await?.unwrap();
            Ok(tx.row(h).i64(col))
        })
    })
    .unwrap()
}

fn is_out_of_range<T: std::fmt::Debug>(r: &Result<T, Abort>) -> bool {
    matches!(r, Err(Abort::Failed(Error::OutOfRange(_))))
}

#[test]
fn tpcc_payment_rolls_back_an_overflowing_ytd() {
    let (island, cfg) = tpcc_island();
    let ytd = get_i64(&island, schema::WAREHOUSE, 1, wh::W_YTD);
    set_i64(&island, schema::WAREHOUSE, 1, wh::W_YTD, i64::MAX);
    let ck = customer_key(1, 1, 1);
    let before = get_i64(&island, schema::CUSTOMER, ck, cust::C_BALANCE);
    let req = TpccReq {
        ty: PAYMENT,
        amount: 100,
        history_key: schema::history_key(1, 7, 1),
        ..Default::default()
    };
    let mut tx = island.worker().unwrap();
    let r = tx.execute(0, |tx| {
        let req = req.clone();
        Box::pin(async move { txns::payment(tx, &req).await })
    });
    assert!(is_out_of_range(&r), "{r:?}");
    drop(tx);
    assert_eq!(
        get_i64(&island, schema::CUSTOMER, ck, cust::C_BALANCE),
        before
    );
    assert_eq!(get_i64(&island, schema::WAREHOUSE, 1, wh::W_YTD), i64::MAX);
    set_i64(&island, schema::WAREHOUSE, 1, wh::W_YTD, ytd);
    assert!(
        tpcc::check(&island, &cfg).unwrap().is_empty(),
        "rolled back whole"
    );
}

#[test]
fn tpcc_new_order_rolls_back_an_overflowing_stock_ytd() {
    let (island, cfg) = tpcc_island();
    let mut req = TpccReq {
        ol_cnt: 2,
        ..Default::default()
    };
    req.lines[0] = Line {
        i_id: 5,
        supply_w: 1,
        quantity: 3,
    };
    req.lines[1] = Line {
        i_id: 6,
        supply_w: 1,
        quantity: 4,
    };
    // The second line overflows, after the first changed its stock row.
    let sk = stock_key(1, 6);
    set_i64(&island, schema::STOCK, sk, stock::S_YTD, i64::MAX);
    let mut tx = island.worker().unwrap();
    let r = tx.execute(0, |tx| {
        let req = req.clone();
        let cfg = cfg.clone();
        Box::pin(async move { txns::new_order(tx, &cfg, &req).await })
    });
    assert!(is_out_of_range(&r), "{r:?}");
    drop(tx);
    assert_eq!(
        get_i64(&island, schema::STOCK, stock_key(1, 5), stock::S_YTD),
        0,
        "the first line's stock row rolled back"
    );
    set_i64(&island, schema::STOCK, sk, stock::S_YTD, 0);
    assert!(
        tpcc::check(&island, &cfg).unwrap().is_empty(),
        "rolled back whole"
    );
}
