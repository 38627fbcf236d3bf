//! TPC-C's five transactions as a served catalog ([`islands::api::Catalog`]),
//! for `islands serve --init tpcc`.
//!
//! The tables are [`super::schema::tables`] at the spec's scale (100,000
//! items, 3,000 customers per district), so `islands tpcc check` rebuilds
//! them from the logs. Warehouse `w` is site `w - 1`, and every table but
//! ITEM (on every island) lives with its warehouse; so do the customers of
//! a last name and the orders of a customer, which the secondary scans of
//! Payment and OrderStatus read on the warehouse's island. Every procedure
//! takes `w_id` first and runs on that warehouse's island.
//!
//! The procedures take what a terminal sends (Clause 2.x.1), as plain
//! values; each argument must lie in the range the spec's terminals draw it
//! from, or the call rolls back (`P0001`) saying which one is not:
//!
//! - `new_order(w_id, d_id, c_id, i_ids int8[], supply_w_ids int8[],
//!   quantities int8[])` → `o_id`, `o_entry_d`, `total_amount`: one order of
//!   5 to 15 lines, line `k` being item `i_ids[k]` from warehouse
//!   `supply_w_ids[k]`, `quantities[k]` (1 to 10) of it. An item id that is
//!   not an item rolls the order back, as the spec's 1% do.
//! - `payment(w_id, d_id, c_w_id, c_d_id, c_id, c_last, h_amount)` →
//!   `c_id`, `c_balance`, `c_credit`: the customer by id, or with `c_id` 0
//!   by last name (the middle one by first name, Clause 2.5.2.2);
//!   `h_amount` in cents (100 to 500,000).
//! - `order_status(w_id, d_id, c_id, c_last)` → the customer's last order,
//!   one row per line: `c_id`, `c_balance`, `o_id`, `o_entry_d`,
//!   `o_carrier_id`, `ol_i_id`, `ol_supply_w_id`, `ol_quantity`,
//!   `ol_amount`, `ol_delivery_d` (null: not delivered).
//! - `delivery(w_id, o_carrier_id)` → one row per district: `d_id`, the
//!   `o_id` it delivered (null: none was waiting).
//! - `stock_level(w_id, d_id, threshold)` → `low_stock`.
//!
//! Money is in cents and dates in microseconds since the epoch, as the
//! schema keeps them. A served Payment numbers its history row after the
//! last of its warehouse's slot 0 (see [`super::TpccReq::history_key`]).

use std::ops::RangeInclusive;

use islands::api::{Args, Catalog, Load, Partition, ProcDef, Row, SiteOf, Type, Value};
use islands::Abort;
use islands::Error;

use super::schema::{
    self, CUSTOMER, CUSTOMER_BY_LAST, DISTRICT, DISTRICTS, HISTORY, ITEM, MAX_OL, NEW_ORDER,
    ORDERS, ORDERS_BY_CUSTOMER, ORDER_LINE, STOCK, WAREHOUSE,
};
use super::{txns, Tpcc, TpccConfig, TpccReq};

/// The served database's configuration: the spec's scale, `warehouses`
/// warehouses, room for `max_orders_per_district` orders per district.
pub fn config(warehouses: u32, max_orders_per_district: u32) -> TpccConfig {
    TpccConfig {
        warehouses,
        max_orders_per_district,
        ..TpccConfig::default()
    }
}

// The site of each table's key: its warehouse, less one (see `schema`).
fn site_of_warehouse(w: u64) -> u32 {
    w.saturating_sub(1) as u32
}
fn warehouse_site(k: u64) -> u32 {
    site_of_warehouse(k)
}
fn district_site(k: u64) -> u32 {
    site_of_warehouse(k >> 4)
}
fn customer_site(k: u64) -> u32 {
    site_of_warehouse(k >> 20)
}
fn history_site(k: u64) -> u32 {
    site_of_warehouse(k >> 48)
}
fn order_site(k: u64) -> u32 {
    site_of_warehouse(k >> 36)
}
fn order_line_site(k: u64) -> u32 {
    site_of_warehouse(k >> 40)
}
fn stock_site(k: u64) -> u32 {
    site_of_warehouse(k >> 32)
}
/// `by_last`: `dk << 32 | hash`.
fn by_last_site(skey: u64) -> u32 {
    site_of_warehouse(skey >> 36)
}
/// `by_customer`: `dk << 16 | c`.
fn by_customer_site(skey: u64) -> u32 {
    site_of_warehouse(skey >> 20)
}

/// Argument `i`, which must lie in `range`; else the call rolls back with `why`.
fn arg_in(a: &Args, i: usize, range: RangeInclusive<i64>, why: &'static str) -> Result<u32, Abort> {
    let v = a.int(i);
    if range.contains(&v) {
        Ok(v as u32)
    } else {
        Err(Abort::User(why))
    }
}

/// The customer of a Payment or an OrderStatus: `c_id` (1..=3000) with an
/// empty `c_last`, or `c_id` 0 and a last name.
fn customer(a: &Args, id: usize, last: usize, req: &mut TpccReq) -> Result<(), Abort> {
    let (c_id, name) = (a.int(id), a.str(last).as_bytes());
    match (c_id, name.is_empty()) {
        (0, true) => Err(Abort::User(
            "give a customer: a c_id, or c_id 0 and a c_last",
        )),
        (0, false) if name.len() > req.c_last.len() => {
            Err(Abort::User("c_last is longer than 16 bytes"))
        }
        (0, false) => {
            req.by_last = true;
            req.c_last[..name.len()].copy_from_slice(name);
            req.c_last_len = name.len();
            Ok(())
        }
        (_, true) => {
            req.c_id = arg_in(a, id, 1..=3000, "c_id is outside 1..=3000")?;
            Ok(())
        }
        (_, false) => Err(Abort::User(
            "give a c_id or a c_last, not both (c_id 0 selects by c_last)",
        )),
    }
}

/// An integer result that is null when it is 0 (the schema's null).
fn or_null(v: i64) -> Value {
    if v == 0 {
        Value::Null
    } else {
        Value::Int(v)
    }
}

/// The tables and the five procedures for `cfg` (which must be [`config`]'s:
/// the argument checks name the spec's 3,000 customers per district).
pub fn catalog(cfg: &TpccConfig) -> Catalog {
    assert_eq!(
        cfg.customers_per_district, 3000,
        "a served TPC-C database has the spec's 3,000 customers per district"
    );
    let mut c = Catalog::new();
    let sites: [SiteOf; 9] = [
        warehouse_site,
        district_site,
        customer_site,
        history_site,
        order_site,
        order_site,
        order_line_site,
        warehouse_site, // ITEM: replicated below
        stock_site,
    ];
    for (id, (def, site)) in schema::tables(cfg).into_iter().zip(sites).enumerate() {
        let p = if id as u16 == ITEM {
            Partition::Replicated
        } else {
            Partition::BySite(site)
        };
        let t = c.table(def, p);
        debug_assert_eq!(t, id as u16);
    }
    debug_assert_eq!(
        [WAREHOUSE, DISTRICT, CUSTOMER, HISTORY, NEW_ORDER, ORDERS, ORDER_LINE, STOCK],
        [0, 1, 2, 3, 4, 5, 6, 8]
    );
    c.secondary_by_site(CUSTOMER, CUSTOMER_BY_LAST, by_last_site)
        .expect("a fresh catalog");
    c.secondary_by_site(ORDERS, ORDERS_BY_CUSTOMER, by_customer_site)
        .expect("a fresh catalog");
    for (id, view) in schema::sql_views(cfg).into_iter().enumerate() {
        c.sql(id as u16, view)
            .expect("TPC-C's SQL views fit its tables");
    }
    let wmax = i64::from(cfg.warehouses);
    let warehouse = move |a: &Args, i: usize, why: &'static str| arg_in(a, i, 1..=wmax, why);
    let district =
        |a: &Args, i: usize, why: &'static str| arg_in(a, i, 1..=i64::from(DISTRICTS), why);

    let new_order_cfg = cfg.clone();
    let procs = [
        ProcDef::new("new_order", move |tx, a, out| {
            let cfg = new_order_cfg.clone();
            Box::pin(async move {
                let w = warehouse(a, 0, "w_id is not a warehouse of the database")?;
                let d = district(a, 1, "d_id is outside 1..=10")?;
                let c_id = arg_in(a, 2, 1..=3000, "c_id is outside 1..=3000")?;
                let (items, supply, qty) = (a.ints(3), a.ints(4), a.ints(5));
                if supply.len() != items.len() || qty.len() != items.len() {
                    return Err(Abort::User(
                        "i_ids, supply_w_ids and quantities differ in length",
                    ));
                }
                if !(5..=MAX_OL as usize).contains(&items.len()) {
                    return Err(Abort::User("an order has 5 to 15 lines"));
                }
                let mut req = TpccReq {
                    ty: super::NEW_ORDER,
                    w,
                    d,
                    c_w: w,
                    c_d: d,
                    c_id,
                    ol_cnt: items.len(),
                    now_us: Tpcc::now_us(),
                    ..TpccReq::default()
                };
                for (k, line) in req.lines[..items.len()].iter_mut().enumerate() {
                    line.supply_w = u32::try_from(supply[k])
                        .ok()
                        .filter(|s| (1..=cfg.warehouses).contains(s))
                        .ok_or(Abort::User(
                            "a supply_w_id is not a warehouse of the database",
                        ))?;
                    line.quantity = u32::try_from(qty[k])
                        .ok()
                        .filter(|q| (1..=10).contains(q))
                        .ok_or(Abort::User("a quantity is outside 1..=10"))?;
                    // Any id that is not an item's rolls the order back at
                    // its line (Clause 2.4.2.3); 0 is none.
                    line.i_id = u32::try_from(items[k]).unwrap_or(0);
                    req.all_local &= line.supply_w == w;
                }
                let o = txns::new_order(tx, &cfg, &req).await?;
                out.push(vec![
                    Value::Int(i64::from(o.o_id)),
                    Value::Int(o.entry_d),
                    Value::Int(o.total),
                ]);
                Ok(())
            })
        })
        .param("w_id", Type::Int)
        .param("d_id", Type::Int)
        .param("c_id", Type::Int)
        .param("i_ids", Type::Ints)
        .param("supply_w_ids", Type::Ints)
        .param("quantities", Type::Ints)
        .column("o_id", Type::Int)
        .column("o_entry_d", Type::Int)
        .column("total_amount", Type::Int),
        ProcDef::new("payment", move |tx, a, out| {
            Box::pin(async move {
                let mut req = TpccReq {
                    ty: super::PAYMENT,
                    w: warehouse(a, 0, "w_id is not a warehouse of the database")?,
                    d: district(a, 1, "d_id is outside 1..=10")?,
                    c_w: warehouse(a, 2, "c_w_id is not a warehouse of the database")?,
                    c_d: district(a, 3, "c_d_id is outside 1..=10")?,
                    amount: i64::from(arg_in(
                        a,
                        6,
                        100..=500_000,
                        "h_amount is outside 100..=500000 (cents)",
                    )?),
                    now_us: Tpcc::now_us(),
                    // The next of the warehouse's own numbering.
                    history_key: 0,
                    ..TpccReq::default()
                };
                customer(a, 4, 5, &mut req)?;
                let p = txns::payment(tx, &req).await?;
                out.push(vec![
                    Value::Int(i64::from(p.c_id)),
                    Value::Int(p.c_balance),
                    Value::Str(if p.bad_credit { "BC" } else { "GC" }.into()),
                ]);
                Ok(())
            })
        })
        .param("w_id", Type::Int)
        .param("d_id", Type::Int)
        .param("c_w_id", Type::Int)
        .param("c_d_id", Type::Int)
        .param("c_id", Type::Int)
        .param("c_last", Type::Str)
        .param("h_amount", Type::Int)
        .column("c_id", Type::Int)
        .column("c_balance", Type::Int)
        .column("c_credit", Type::Str),
        ProcDef::new("order_status", move |tx, a, out| {
            Box::pin(async move {
                let w = warehouse(a, 0, "w_id is not a warehouse of the database")?;
                let d = district(a, 1, "d_id is outside 1..=10")?;
                let mut req = TpccReq {
                    ty: super::ORDER_STATUS,
                    w,
                    d,
                    c_w: w,
                    c_d: d,
                    ..TpccReq::default()
                };
                customer(a, 2, 3, &mut req)?;
                let s = txns::order_status(tx, &req).await?;
                let head = [
                    Value::Int(i64::from(s.c_id)),
                    Value::Int(s.c_balance),
                    or_null(i64::from(s.o_id)),
                    or_null(s.entry_d),
                    or_null(i64::from(s.carrier)),
                ];
                if s.lines().is_empty() {
                    let mut row: Row = head.to_vec();
                    row.resize(10, Value::Null);
                    out.push(row);
                }
                for l in s.lines() {
                    let mut row: Row = head.to_vec();
                    row.extend([
                        Value::Int(i64::from(l.i_id)),
                        Value::Int(i64::from(l.supply_w)),
                        Value::Int(i64::from(l.quantity)),
                        Value::Int(l.amount),
                        or_null(l.delivery_d),
                    ]);
                    out.push(row);
                }
                Ok(())
            })
        })
        .param("w_id", Type::Int)
        .param("d_id", Type::Int)
        .param("c_id", Type::Int)
        .param("c_last", Type::Str)
        .column("c_id", Type::Int)
        .column("c_balance", Type::Int)
        .column("o_id", Type::Int)
        .column("o_entry_d", Type::Int)
        .column("o_carrier_id", Type::Int)
        .column("ol_i_id", Type::Int)
        .column("ol_supply_w_id", Type::Int)
        .column("ol_quantity", Type::Int)
        .column("ol_amount", Type::Int)
        .column("ol_delivery_d", Type::Int),
        ProcDef::new("delivery", move |tx, a, out| {
            Box::pin(async move {
                let req = TpccReq {
                    ty: super::DELIVERY,
                    w: warehouse(a, 0, "w_id is not a warehouse of the database")?,
                    carrier: arg_in(a, 1, 1..=10, "o_carrier_id is outside 1..=10")?,
                    now_us: Tpcc::now_us(),
                    ..TpccReq::default()
                };
                let o = txns::delivery(tx, &req).await?;
                for (d, &o_id) in o.o_ids.iter().enumerate() {
                    out.push(vec![Value::Int(d as i64 + 1), or_null(i64::from(o_id))]);
                }
                Ok(())
            })
        })
        .param("w_id", Type::Int)
        .param("o_carrier_id", Type::Int)
        .column("d_id", Type::Int)
        .column("o_id", Type::Int),
        ProcDef::new("stock_level", move |tx, a, out| {
            Box::pin(async move {
                let req = TpccReq {
                    ty: super::STOCK_LEVEL,
                    w: warehouse(a, 0, "w_id is not a warehouse of the database")?,
                    d: district(a, 1, "d_id is outside 1..=10")?,
                    threshold: arg_in(a, 2, 10..=20, "threshold is outside 10..=20")? as i32,
                    ..TpccReq::default()
                };
                let low = txns::stock_level(tx, &req).await?;
                out.push(vec![Value::Int(i64::from(low))]);
                Ok(())
            })
        })
        .param("w_id", Type::Int)
        .param("d_id", Type::Int)
        .param("threshold", Type::Int)
        .column("low_stock", Type::Int),
    ];
    for p in procs {
        c.procedure(p.home_by(0, WAREHOUSE))
            .expect("a fresh catalog");
    }
    c
}

/// Loads every item and the warehouses `load`'s island holds.
pub fn load(load: &mut Load<'_>, cfg: &TpccConfig) -> Result<(), Error> {
    let mine: Vec<u32> = (1..=cfg.warehouses)
        .filter(|&w| load.owns(WAREHOUSE, u64::from(w)))
        .collect();
    super::load::load_into(load, cfg, &mine, true)
}
