//! TPC-C: the population is consistent, planted inconsistencies are found by
//! the right condition, and runs of the full mix under each concurrency
//! control scheme leave a consistent database.

use std::sync::Arc;
use std::time::Duration;

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::txn::Txn;
use islands::{Abort, Error};
use islands_bench::driver::{self, DriverConfig};
use islands_bench::progress::DisplayMode;
use islands_workloads::tpcc::schema::{
    self, cust, customer_key, dist, district_key, ol, ord, order_key, order_line_key, wh, CUSTOMER,
    DISTRICT, NEW_ORDER, ORDERS, ORDER_LINE, WAREHOUSE,
};
use islands_workloads::tpcc::{
    self, check, check_initial, txns, Mix, Tpcc, TpccConfig, TpccReq, Violation, PAYMENT,
};

/// A small population: the spec's shape at a fraction of its size.
fn small(warehouses: u32, customers: u32) -> TpccConfig {
    TpccConfig {
        warehouses,
        items: 1_000,
        customers_per_district: customers,
        max_orders_per_district: 1_000_000,
        ..Default::default()
    }
}

fn open(cfg: &TpccConfig, cc: CcKind, workers: usize) -> Island {
    let (island, _) =
        Island::open(IslandConfig::new(cc, workers), &schema::tables(cfg)).expect("open");
    tpcc::load(&island, cfg, 1..cfg.warehouses + 1, true).expect("load");
    island
}

fn conditions(v: &[Violation]) -> Vec<u8> {
    let mut c: Vec<u8> = v.iter().map(|v| v.condition).collect();
    c.dedup();
    c
}

/// Changes the database with one transaction.
fn plant(island: &Island, f: impl Fn(&mut Txn) -> Result<(), Abort>) {
    let mut tx = island.worker().expect("worker");
    tx.execute(0, |tx| {
        let r = f(tx);
        Box::pin(async move { r })
    })
    .expect("plant");
}

fn update_i64(tx: &mut Txn, table: u16, key: u64, col: islands::storage::Col, delta: i64) {
    let h = islands::txn::poll_local(tx.get_for_update(table, key))
        .expect("get")
        .expect("row");
    let v = tx.row(h).i64(col);
    tx.row_mut(h).set_i64(col, v + delta);
}

fn set_i32(tx: &mut Txn, table: u16, key: u64, col: islands::storage::Col, v: i32) {
    let h = islands::txn::poll_local(tx.get_for_update(table, key))
        .expect("get")
        .expect("row");
    tx.row_mut(h).set_i32(col, v);
}

/// Loads one warehouse, applies `f` and returns the violations found.
fn planted(f: impl Fn(&mut Txn) -> Result<(), Abort>) -> (TpccConfig, Vec<Violation>) {
    let cfg = small(1, 30);
    let island = open(&cfg, CcKind::Occ, 2);
    assert!(check_initial(&island, &cfg).unwrap().is_empty());
    plant(&island, f);
    let v = check(&island, &cfg).unwrap();
    (cfg, v)
}

#[test]
fn initial_population_is_consistent() {
    let cfg = small(2, 60);
    let island = open(&cfg, CcKind::Occ, 2);
    let v = check_initial(&island, &cfg).unwrap();
    assert!(v.is_empty(), "{v:?}");
    let c = island.catalog();
    assert_eq!(c.table(WAREHOUSE).count_rows(), 2);
    assert_eq!(c.table(DISTRICT).count_rows(), 20);
    assert_eq!(c.table(CUSTOMER).count_rows(), 2 * 10 * 60);
    assert_eq!(c.table(ORDERS).count_rows(), 2 * 10 * 60);
    // The last 30% undelivered: orders 43..=60 of each district.
    assert_eq!(c.table(NEW_ORDER).count_rows(), 2 * 10 * 18);
    assert_eq!(cfg.first_undelivered(), 43);
    // The secondary indexes are where the schema says.
    let t = c.table(CUSTOMER);
    assert_eq!(
        t.secondary(schema::CUSTOMER_BY_LAST_NAME),
        Some(schema::CUSTOMER_BY_LAST)
    );
    assert_eq!(
        c.table(ORDERS).secondary(schema::ORDERS_BY_CUSTOMER_NAME),
        Some(schema::ORDERS_BY_CUSTOMER)
    );
}

#[test]
fn spec_scale_population_of_one_warehouse_is_consistent() {
    // The default (spec) scale, one warehouse: 100,000 items, 30,000 customers.
    let cfg = TpccConfig {
        max_orders_per_district: 4_000,
        ..Default::default()
    };
    let island = open(&cfg, CcKind::None, 1);
    let v = check_initial(&island, &cfg).unwrap();
    assert!(v.is_empty(), "{v:?}");
    let c = island.catalog();
    assert_eq!(c.table(schema::ITEM).count_rows(), 100_000);
    assert_eq!(c.table(schema::STOCK).count_rows(), 100_000);
    assert_eq!(c.table(NEW_ORDER).count_rows(), 9_000);
}

#[test]
fn condition_1_and_9_find_a_changed_d_ytd() {
    let (_, v) = planted(|tx| {
        update_i64(tx, DISTRICT, district_key(1, 3), dist::D_YTD, 5);
        Ok(())
    });
    assert_eq!(conditions(&v), vec![1, 9], "{v:?}");
    assert_eq!(v[1].district, Some(3));
}

#[test]
fn condition_1_and_8_find_a_changed_w_ytd() {
    let (_, v) = planted(|tx| {
        update_i64(tx, WAREHOUSE, 1, wh::W_YTD, -1);
        Ok(())
    });
    assert_eq!(conditions(&v), vec![1, 8], "{v:?}");
}

#[test]
fn condition_2_finds_a_changed_next_order_id() {
    let (_, v) = planted(|tx| {
        set_i32(tx, DISTRICT, district_key(1, 7), dist::D_NEXT_O_ID, 99);
        Ok(())
    });
    assert_eq!(conditions(&v), vec![2], "{v:?}");
    assert_eq!((v[0].warehouse, v[0].district), (1, Some(7)));
}

#[test]
fn condition_3_finds_a_deleted_new_order_row() {
    // Orders 22..=30 are undelivered; delete one in the middle.
    let (_, v) = planted(|tx| {
        let h = islands::txn::poll_local(tx.get(NEW_ORDER, order_key(1, 2, 25)))?.expect("row");
        islands::txn::poll_local(tx.delete(h))
    });
    // Its order now has a null carrier without a new_order row: condition 5 too.
    assert_eq!(conditions(&v), vec![3, 5], "{v:?}");
    assert_eq!(v[0].district, Some(2));
}

#[test]
fn condition_4_and_6_find_a_changed_order_line_count() {
    let (_, v) = planted(|tx| {
        let k = order_key(1, 4, 10);
        let h = islands::txn::poll_local(tx.get_for_update(ORDERS, k))?.expect("row");
        let n = tx.row(h).i32(ord::O_OL_CNT);
        tx.row_mut(h).set_i32(ord::O_OL_CNT, n + 1);
        Ok(())
    });
    assert_eq!(conditions(&v), vec![4, 6], "{v:?}");
    assert_eq!(v[0].district, Some(4));
}

#[test]
fn condition_5_and_7_find_a_carrier_on_an_undelivered_order() {
    let (_, v) = planted(|tx| {
        set_i32(tx, ORDERS, order_key(1, 1, 28), ord::O_CARRIER_ID, 3);
        Ok(())
    });
    assert_eq!(conditions(&v), vec![5, 7], "{v:?}");
}

#[test]
fn condition_7_finds_a_delivery_date_on_an_undelivered_line() {
    let (_, v) = planted(|tx| {
        let k = order_line_key(1, 1, 29, 1);
        let h = islands::txn::poll_local(tx.get_for_update(ORDER_LINE, k))?.expect("row");
        tx.row_mut(h).set_i64(ol::OL_DELIVERY_D, 12345);
        Ok(())
    });
    // The line's amount now counts as delivered for its customer: 10 and 12 too.
    assert!(conditions(&v).starts_with(&[7]), "{v:?}");
    assert!(!conditions(&v).iter().any(|c| *c < 7), "{v:?}");
}

#[test]
fn condition_10_and_12_find_a_changed_balance() {
    let (_, v) = planted(|tx| {
        update_i64(tx, CUSTOMER, customer_key(1, 5, 17), cust::C_BALANCE, 100);
        Ok(())
    });
    assert_eq!(conditions(&v), vec![10, 12], "{v:?}");
    assert!(v[0].detail.contains("customer 17"), "{}", v[0]);
}

#[test]
fn condition_11_holds_initially_only() {
    let cfg = small(1, 30);
    let island = open(&cfg, CcKind::None, 1);
    plant(&island, |tx| {
        let h = islands::txn::poll_local(tx.get(NEW_ORDER, order_key(1, 6, 22)))?.expect("row");
        islands::txn::poll_local(tx.delete(h))?;
        set_i32(tx, ORDERS, order_key(1, 6, 22), ord::O_CARRIER_ID, 1);
        Ok(())
    });
    let v = check_initial(&island, &cfg).unwrap();
    assert!(conditions(&v).contains(&11), "{v:?}");
}

#[test]
fn payment_by_last_name_takes_the_middle_customer_by_first_name() {
    // 1,100 customers per district: names repeat beyond the first 1,000.
    let cfg = TpccConfig {
        warehouses: 1,
        items: 1_000,
        customers_per_district: 1_100,
        max_orders_per_district: 2_000,
        ..Default::default()
    };
    let island = open(&cfg, CcKind::None, 1);
    let mut tx = island.worker().unwrap();
    // All customers of district (1, 1): (last, first, id).
    let all: Vec<(Vec<u8>, Vec<u8>, u32)> = tx
        .execute(0, |tx| {
            Box::pin(async move {
                let mut v = Vec::new();
                for c in 1..=1_100 {
                    let h = tx.get(CUSTOMER, customer_key(1, 1, c)).await?.unwrap();
                    let r = tx.row(h);
                    v.push((
                        r.str(cust::C_LAST).to_vec(),
                        r.str(cust::C_FIRST).to_vec(),
                        c,
                    ));
                }
                Ok(v)
            })
        })
        .unwrap();
    let mut groups: std::collections::BTreeMap<Vec<u8>, Vec<(Vec<u8>, u32)>> = Default::default();
    for (l, f, c) in all {
        groups.entry(l).or_default().push((f, c));
    }
    let (name, mut members) = groups.into_iter().max_by_key(|(_, m)| m.len()).unwrap();
    assert!(members.len() >= 3, "{}", members.len());
    members.sort();
    let expected = members[members.len().div_ceil(2) - 1].1;
    let mut req = TpccReq {
        ty: PAYMENT,
        by_last: true,
        amount: 777,
        history_key: schema::history_key(1, 7, 1),
        ..Default::default()
    };
    req.c_last[..name.len()].copy_from_slice(&name);
    req.c_last_len = name.len();
    tx.execute(0, |tx| {
        let req = req.clone();
        Box::pin(async move { txns::payment(tx, &req).await })
    })
    .unwrap();
    for (_, c) in &members {
        let cnt = tx
            .execute(0, |tx| {
                let c = *c;
                Box::pin(async move {
                    let h = tx.get(CUSTOMER, customer_key(1, 1, c)).await?.unwrap();
                    Ok(tx.row(h).i32(cust::C_PAYMENT_CNT))
                })
            })
            .unwrap();
        assert_eq!(cnt, if *c == expected { 2 } else { 1 }, "customer {c}");
    }
    drop(tx);
    assert!(check(&island, &cfg).unwrap().is_empty());
}

fn run_and_check(cfg: TpccConfig, cc: CcKind, workers: usize) -> islands_bench::report::Report {
    let island = open(&cfg, cc, workers);
    let homes = Tpcc::default_homes(workers, cfg.warehouses);
    let w = Tpcc::new(cfg.clone(), homes).unwrap();
    let dcfg = DriverConfig {
        workers,
        warmup: Duration::from_millis(200),
        measure: Duration::from_millis(1_000),
        display: DisplayMode::Quiet,
        pin: false,
        workload_name: "tpcc".into(),
        parameters: cfg.parameters(),
        ..Default::default()
    };
    let report = driver::run(&island, Arc::new(w), &dcfg).expect("run");
    eprintln!("{}", report.render_table());
    let v = check(&island, &cfg).unwrap();
    assert!(v.is_empty(), "after a {cc} run: {v:#?}");
    report
}

fn committed(r: &islands_bench::report::Report, name: &str) -> u64 {
    r.per_type
        .iter()
        .find(|t| t.name == name)
        .map_or(0, |t| t.committed)
}

#[test]
fn full_mix_under_occ_with_four_workers_stays_consistent() {
    let r = run_and_check(small(2, 120), CcKind::Occ, 4);
    for t in tpcc::TYPE_NAMES {
        assert!(
            committed(&r, t) > 0,
            "no {t} committed: {}",
            r.render_table()
        );
    }
}

#[test]
fn full_mix_under_no_wait_with_four_workers_stays_consistent() {
    let r = run_and_check(small(2, 120), CcKind::NoWait, 4);
    for t in tpcc::TYPE_NAMES {
        assert!(
            committed(&r, t) > 0,
            "no {t} committed: {}",
            r.render_table()
        );
    }
}

#[test]
fn full_mix_without_cc_on_one_worker_stays_consistent() {
    let r = run_and_check(small(2, 120), CcKind::None, 1);
    assert!(committed(&r, "NewOrder") > 0);
    // 1% of NewOrders roll back on an invalid item.
    let no = r.per_type.iter().find(|t| t.name == "NewOrder").unwrap();
    assert!(no.user_aborts > 0, "{}", r.render_table());
}

#[test]
fn local_only_new_order_payment_mix_stays_consistent() {
    let cfg = TpccConfig {
        mix: Mix::parse("no-pay").unwrap(),
        local_only: true,
        ..small(2, 120)
    };
    let r = run_and_check(cfg, CcKind::Occ, 2);
    assert_eq!(committed(&r, "Delivery"), 0);
    assert!(committed(&r, "Payment") > 0);
}

#[test]
fn mixes_parse_and_bad_ones_are_refused() {
    assert_eq!(Mix::parse("full").unwrap(), Mix::FULL);
    assert_eq!(Mix::parse("payment").unwrap().0, [0, 100, 0, 0, 0]);
    assert_eq!(Mix::parse("neworder").unwrap().0, [100, 0, 0, 0, 0]);
    assert_eq!(Mix::parse("no-pay").unwrap().0, [50, 50, 0, 0, 0]);
    assert_eq!(Mix::parse("45,43,4,4,4").unwrap(), Mix::FULL);
    for bad in ["45,43,4,4", "50,50,1,0,0", "fast", ""] {
        let e = Mix::parse(bad).unwrap_err().to_string();
        assert!(e.contains("no-pay"), "{bad}: {e}");
    }
    let e = Mix::parse("50,50,1,0,0").unwrap_err().to_string();
    assert!(e.contains("sums to 101"), "{e}");
}

#[test]
fn bad_configurations_are_refused() {
    let e = TpccConfig {
        warehouses: 0,
        ..Default::default()
    }
    .check()
    .unwrap_err();
    assert!(matches!(e, Error::Config(_)) && e.to_string().contains("--warehouses 0"));
    assert!(Tpcc::new(small(2, 30), vec![3]).is_err());
    let cfg = small(2, 30);
    let (island, _) =
        Island::open(IslandConfig::new(CcKind::Occ, 2), &schema::tables(&cfg)).unwrap();
    assert!(tpcc::load(&island, &cfg, 2..4, true).is_err());
}

#[test]
fn running_out_of_order_capacity_is_a_clear_error() {
    let cfg = TpccConfig {
        max_orders_per_district: 40,
        mix: Mix::parse("neworder").unwrap(),
        ..small(1, 30)
    };
    let island = open(&cfg, CcKind::None, 1);
    let w = Tpcc::new(cfg.clone(), vec![1]).unwrap();
    let dcfg = DriverConfig {
        workers: 1,
        warmup: Duration::from_millis(50),
        measure: Duration::from_millis(300),
        display: DisplayMode::Quiet,
        pin: false,
        ..Default::default()
    };
    let e = driver::run(&island, Arc::new(w), &dcfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--max-orders-per-district"), "{e}");
}

#[test]
fn generator_follows_the_spec_proportions() {
    use islands::proc::rng::FastRng;
    use islands::proc::Workload;
    let gen = |local_only: bool| {
        let cfg = TpccConfig {
            local_only,
            ..small(4, 3_000)
        };
        Tpcc::new(cfg, vec![2]).unwrap()
    };
    let t = gen(false);
    let mut rng = FastRng::new(11);
    let mut req = TpccReq::default();
    let n = 200_000;
    let (mut types, mut lines, mut remote_lines, mut rollbacks) = ([0u64; 5], 0u64, 0u64, 0u64);
    let (mut payments_remote, mut by_last, mut lookups) = (0u64, 0u64, 0u64);
    for _ in 0..n {
        let ty = t.next(0, &mut rng, &mut req);
        types[ty] += 1;
        assert_eq!(req.w, 2);
        assert!((1..=10).contains(&req.d));
        match ty {
            tpcc::NEW_ORDER => {
                assert!((5..=15).contains(&req.ol_cnt));
                lines += req.ol_cnt as u64;
                remote_lines += req.lines().iter().filter(|l| l.supply_w != 2).count() as u64;
                assert_eq!(req.all_local, req.lines().iter().all(|l| l.supply_w == 2));
                rollbacks += (req.lines()[req.ol_cnt - 1].i_id > 1_000) as u64;
            }
            tpcc::PAYMENT | tpcc::ORDER_STATUS => {
                lookups += 1;
                by_last += req.by_last as u64;
                if ty == tpcc::PAYMENT {
                    payments_remote += (req.c_w != 2) as u64;
                    assert!((100..=500_000).contains(&req.amount));
                }
            }
            _ => {}
        }
    }
    let pct = |a: u64, b: u64| 100.0 * a as f64 / b as f64;
    for (i, want) in [45.0, 43.0, 4.0, 4.0, 4.0].iter().enumerate() {
        assert!((pct(types[i], n) - want).abs() < 0.5, "{types:?}");
    }
    assert!(
        (pct(remote_lines, lines) - 1.0).abs() < 0.2,
        "{remote_lines}/{lines}"
    );
    assert!((pct(rollbacks, types[0]) - 1.0).abs() < 0.2, "{rollbacks}");
    assert!((pct(payments_remote, types[1]) - 15.0).abs() < 0.6);
    assert!((pct(by_last, lookups) - 60.0).abs() < 0.6);
    // Local only: no remote line, no remote customer.
    let t = gen(true);
    for _ in 0..20_000 {
        let ty = t.next(0, &mut rng, &mut req);
        if ty == tpcc::NEW_ORDER {
            assert!(req.all_local);
        }
        if ty == tpcc::PAYMENT {
            assert_eq!(req.c_w, 2);
        }
    }
    // History keys of one worker never repeat.
    let mut keys = std::collections::HashSet::new();
    let p = Tpcc::new(
        TpccConfig {
            mix: Mix::parse("payment").unwrap(),
            ..small(1, 30)
        },
        vec![1],
    )
    .unwrap();
    for _ in 0..10_000 {
        p.next(3, &mut rng, &mut req);
        assert!(keys.insert(req.history_key));
    }
}

/// TPC-C on three islands (one warehouse each, remote stock and remote
/// Payment customers through two-phase commit, two transactions in flight per
/// worker so they interleave), then the checker over the whole deployment.
/// The same transactions on one island must also pass, and the committed
/// counts show that distributed transactions really ran.
#[test]
fn full_mix_across_three_islands_with_two_phase_commit_stays_consistent() {
    use islands::executor::run::{run_to_completion, ClusterWorker};
    use islands::executor::{Cluster, ClusterOptions};
    use islands::island::RecoveryReport;
    let cfg = small(3, 120);
    let opts = ClusterOptions {
        inflight: 2,
        ..Default::default()
    };
    let mut opened: Vec<(Island, RecoveryReport)> = Vec::new();
    for i in 0..3u32 {
        let mut icfg = IslandConfig::new(CcKind::NoWait, 1);
        icfg.name = format!("island-{i}");
        icfg.contexts = opts.contexts_needed(1);
        let (island, rep) = Island::open(icfg, &schema::tables(&cfg)).expect("open");
        tpcc::load(&island, &cfg, i + 1..i + 2, true).expect("load");
        opened.push((island, rep));
    }
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    let router = tpcc::TpccRouter::new(&[1..2, 2..3, 3..4]).unwrap();
    let cl = Cluster::new(opened, vec![1, 1, 1], Arc::new(router), opts).unwrap();
    let w = Tpcc::new(cfg.clone(), vec![1, 2, 3]).unwrap();
    let workers: Vec<ClusterWorker> = (0..3)
        .map(|i| ClusterWorker {
            island: i,
            worker: 0,
            cpu: None,
            limit: Some(1_500),
        })
        .collect();
    let stats = run_to_completion(&cl, &workers, Arc::new(w), 5).expect("run");
    let commits: u64 = stats.iter().map(|s| s.total_commits()).sum();
    let distributed: u64 = stats.iter().map(|s| s.distributed).sum();
    eprintln!("{commits} commits, {distributed} distributed");
    assert!(
        distributed > commits / 50,
        "remote stock and customers should make some transactions distributed: {distributed} of {commits}"
    );
    let v = tpcc::check::check_islands(&islands, &cfg).unwrap();
    assert!(v.is_empty(), "after a 3-island run: {v:#?}");
    // One island alone sees remote Payments' effects without their history
    // rows: the per-island check must flag that (the whole-deployment check
    // above is what holds).
    let alone = check(&islands[0], &cfg).unwrap();
    assert!(
        alone
            .iter()
            .any(|v| v.condition == 10 || v.condition == 8 || v.condition == 9)
            || distributed == 0,
        "a single island of a distributed run should not balance on its own"
    );
}

/// The row counts the memory estimate of a run starts from are those the
/// load makes (order lines: 5 to 15 per order, 10 on average).
#[test]
fn rows_after_load_are_what_the_load_makes() {
    let cfg = small(2, 60);
    let island = open(&cfg, CcKind::None, 1);
    let want = schema::rows_after_load(&cfg, 2);
    let defs = schema::tables(&cfg);
    for (t, def) in defs.iter().enumerate() {
        let got = island.catalog().table(t as u16).count_rows();
        if t as u16 == schema::ORDER_LINE {
            let (lo, hi) = (want[t] * 9 / 10, want[t] * 11 / 10);
            assert!(
                (lo..=hi).contains(&got),
                "{}: {got} rows, about {} expected",
                def.name,
                want[t]
            );
        } else {
            assert_eq!(got, want[t], "{}", def.name);
        }
    }
}
