//! The initial population (Clause 4.3.3.1), for a range of warehouses.
//!
//! Items are loaded whole into every island (they are read-only and every
//! warehouse's orders use them). Each warehouse is generated from its own
//! seeded generator, so loading warehouses 1..3 on one island or 1..2 and
//! 2..3 on two gives the same rows.
//!
//! Scaled populations (tests only) keep the spec's proportions: D_YTD is
//! 10.00 per customer (30,000.00 at 3,000), W_YTD ten times that, 30% of the
//! initial orders undelivered.

use std::ops::Range;

use islands::island::{Island, Loader};
use islands::proc::rng::FastRng;
use islands::storage::{RowMut, TableId};
use islands::Error;

use super::random::{
    astring, data_with_original, last_name, nstring, nurand, uniform, zip, C_LOAD_LAST,
};
use super::schema::{
    cust, customer_key, dist, district_key, hist, history_key, item, no, ol, ord, order_key,
    order_line_key, s_dist, stock, stock_key, wh, CUSTOMER, DISTRICT, DISTRICTS, HISTORY, ITEM,
    NEW_ORDER, ORDERS, ORDER_LINE, STOCK, WAREHOUSE,
};
use super::TpccConfig;
use crate::LoadProgress;

const SEED: u64 = 0x7063_6321;

/// Loads the items and warehouses `warehouses` (1-based, end exclusive).
pub fn load(
    island: &Island,
    cfg: &TpccConfig,
    warehouses: Range<u32>,
    quiet: bool,
) -> Result<(), Error> {
    cfg.check()?;
    if warehouses.is_empty() || warehouses.start == 0 || warehouses.end > cfg.warehouses + 1 {
        return Err(Error::Config(format!(
            "cannot load warehouses {warehouses:?}: the database has warehouses 1..={}",
            cfg.warehouses
        )));
    }
    let ws: Vec<u32> = warehouses.collect();
    load_into(&mut island.loader()?, cfg, &ws, quiet)
}

/// Where the loader puts rows: an island's own [`Loader`] (the benchmark), or
/// a deployment's [`islands::api::Load`] (a served database), which refuses a
/// row that belongs on another island.
pub trait Sink {
    /// Puts row `key` of `table`, built in `img` by `fill`.
    fn put_row(
        &mut self,
        table: TableId,
        key: u64,
        img: &mut Vec<u64>,
        fill: impl FnOnce(&mut RowMut),
    ) -> Result<(), Error>;
}

impl Sink for Loader {
    fn put_row(
        &mut self,
        table: TableId,
        key: u64,
        img: &mut Vec<u64>,
        fill: impl FnOnce(&mut RowMut),
    ) -> Result<(), Error> {
        self.put_with(table, key, img, fill)
    }
}

impl Sink for islands::api::Load<'_> {
    fn put_row(
        &mut self,
        table: TableId,
        key: u64,
        img: &mut Vec<u64>,
        fill: impl FnOnce(&mut RowMut),
    ) -> Result<(), Error> {
        self.put_with(table, key, img, fill)
    }
}

/// Loads every item and the warehouses `warehouses` (each in 1..=the
/// database's) through `l`.
pub fn load_into(
    l: &mut impl Sink,
    cfg: &TpccConfig,
    warehouses: &[u32],
    quiet: bool,
) -> Result<(), Error> {
    if let Some(w) = warehouses.iter().find(|&&w| w == 0 || w > cfg.warehouses) {
        return Err(Error::Config(format!(
            "cannot load warehouse {w}: the database has warehouses 1..={}",
            cfg.warehouses
        )));
    }
    let now = now_us();
    let mut img = Vec::new();
    load_items(l, &mut img, cfg)?;
    let mut progress = LoadProgress::new("tpcc warehouses", warehouses.len() as u64, quiet);
    for (i, &w) in warehouses.iter().enumerate() {
        let mut rng = FastRng::new(SEED ^ (u64::from(w) << 20));
        load_warehouse(l, &mut img, &mut rng, cfg, w)?;
        load_stock(l, &mut img, &mut rng, cfg, w)?;
        for d in 1..=DISTRICTS {
            load_district(l, &mut img, &mut rng, cfg, w, d, now)?;
        }
        progress.tick(i as u64 + 1);
    }
    Ok(())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as i64)
        .max(1)
}

/// Sets a string column to a random a-string of length `lo..=hi`.
fn set_astr(r: &mut RowMut, rng: &mut FastRng, c: islands::storage::Col, lo: usize, hi: usize) {
    let mut b = [0u8; 500];
    let n = astring(rng, lo, hi, &mut b);
    r.set_str(c, &b[..n]);
}

/// A street/city/state/zip address in four consecutive columns from `street1`.
fn set_address(r: &mut RowMut, rng: &mut FastRng, street1: islands::storage::Col) {
    let c = |k: u16| islands::storage::Col(street1.0 + k);
    set_astr(r, rng, c(0), 10, 20);
    set_astr(r, rng, c(1), 10, 20);
    set_astr(r, rng, c(2), 10, 20);
    let state = [b'A' + rng.below(26) as u8, b'A' + rng.below(26) as u8];
    r.set_str(c(3), &state);
    r.set_str(c(4), &zip(rng));
}

fn load_items(l: &mut impl Sink, img: &mut Vec<u64>, cfg: &TpccConfig) -> Result<(), Error> {
    let mut rng = FastRng::new(SEED);
    for i in 1..=cfg.items {
        l.put_row(ITEM, u64::from(i), img, |r| {
            r.set_i32(item::I_ID, i as i32);
            r.set_i32(item::I_IM_ID, uniform(&mut rng, 1, 10_000) as i32);
            set_astr(r, &mut rng, item::I_NAME, 14, 24);
            r.set_i64(item::I_PRICE, uniform(&mut rng, 100, 10_000) as i64);
            let mut data = [0u8; 50];
            let n = data_with_original(&mut rng, &mut data);
            r.set_str(item::I_DATA, &data[..n]);
        })?;
    }
    Ok(())
}

fn load_warehouse(
    l: &mut impl Sink,
    img: &mut Vec<u64>,
    rng: &mut FastRng,
    cfg: &TpccConfig,
    w: u32,
) -> Result<(), Error> {
    l.put_row(WAREHOUSE, u64::from(w), img, |r| {
        r.set_i32(wh::W_ID, w as i32);
        set_astr(r, rng, wh::W_NAME, 6, 10);
        set_address(r, rng, wh::W_STREET_1);
        r.set_i64(wh::W_TAX, uniform(rng, 0, 2000) as i64);
        r.set_i64(wh::W_YTD, i64::from(DISTRICTS) * district_ytd(cfg));
    })
}

/// D_YTD at load: 10.00 for each customer's initial payment.
fn district_ytd(cfg: &TpccConfig) -> i64 {
    i64::from(cfg.customers_per_district) * 1000
}

fn load_stock(
    l: &mut impl Sink,
    img: &mut Vec<u64>,
    rng: &mut FastRng,
    cfg: &TpccConfig,
    w: u32,
) -> Result<(), Error> {
    for i in 1..=cfg.items {
        l.put_row(STOCK, stock_key(w, i), img, |r| {
            r.set_i32(stock::S_I_ID, i as i32);
            r.set_i32(stock::S_W_ID, w as i32);
            r.set_i32(stock::S_QUANTITY, uniform(rng, 10, 100) as i32);
            for d in 1..=DISTRICTS {
                set_astr(r, rng, s_dist(d), 24, 24);
            }
            r.set_i64(stock::S_YTD, 0);
            r.set_i32(stock::S_ORDER_CNT, 0);
            r.set_i32(stock::S_REMOTE_CNT, 0);
            let mut data = [0u8; 50];
            let n = data_with_original(rng, &mut data);
            r.set_str(stock::S_DATA, &data[..n]);
        })?;
    }
    Ok(())
}

fn load_district(
    l: &mut impl Sink,
    img: &mut Vec<u64>,
    rng: &mut FastRng,
    cfg: &TpccConfig,
    w: u32,
    d: u32,
    now: i64,
) -> Result<(), Error> {
    let customers = cfg.customers_per_district;
    let orders = cfg.initial_orders();
    l.put_row(DISTRICT, district_key(w, d), img, |r| {
        r.set_i32(dist::D_ID, d as i32);
        r.set_i32(dist::D_W_ID, w as i32);
        set_astr(r, rng, dist::D_NAME, 6, 10);
        set_address(r, rng, dist::D_STREET_1);
        r.set_i64(dist::D_TAX, uniform(rng, 0, 2000) as i64);
        r.set_i64(dist::D_YTD, district_ytd(cfg));
        r.set_i32(dist::D_NEXT_O_ID, orders as i32 + 1);
    })?;
    for c in 1..=customers {
        let mut last = [0u8; 16];
        let k = if c <= 1000 {
            u64::from(c - 1)
        } else {
            nurand(rng, 255, C_LOAD_LAST, 0, 999)
        };
        let n = last_name(k, &mut last);
        l.put_row(CUSTOMER, customer_key(w, d, c), img, |r| {
            r.set_i32(cust::C_ID, c as i32);
            r.set_i32(cust::C_D_ID, d as i32);
            r.set_i32(cust::C_W_ID, w as i32);
            r.set_str(cust::C_LAST, &last[..n]);
            r.set_str(cust::C_MIDDLE, b"OE");
            set_astr(r, rng, cust::C_FIRST, 8, 16);
            set_address(r, rng, cust::C_STREET_1);
            let mut phone = [0u8; 16];
            nstring(rng, 16, 16, &mut phone);
            r.set_str(cust::C_PHONE, &phone);
            r.set_i64(cust::C_SINCE, now);
            r.set_str(cust::C_CREDIT, if rng.percent(10) { b"BC" } else { b"GC" });
            r.set_i64(cust::C_CREDIT_LIM, 5_000_000);
            r.set_i64(cust::C_DISCOUNT, uniform(rng, 0, 5000) as i64);
            r.set_i64(cust::C_BALANCE, -1000);
            r.set_i64(cust::C_YTD_PAYMENT, 1000);
            r.set_i32(cust::C_PAYMENT_CNT, 1);
            r.set_i32(cust::C_DELIVERY_CNT, 0);
            set_astr(r, rng, cust::C_DATA, 300, 500);
        })?;
        let seq = u64::from(d - 1) * u64::from(customers) + u64::from(c);
        l.put_row(HISTORY, history_key(w, 0, seq), img, |r| {
            r.set_i32(hist::H_C_ID, c as i32);
            r.set_i32(hist::H_C_D_ID, d as i32);
            r.set_i32(hist::H_C_W_ID, w as i32);
            r.set_i32(hist::H_D_ID, d as i32);
            r.set_i32(hist::H_W_ID, w as i32);
            r.set_i64(hist::H_DATE, now);
            r.set_i64(hist::H_AMOUNT, 1000);
            set_astr(r, rng, hist::H_DATA, 12, 24);
        })?;
    }
    // O_C_ID is a random permutation of the customers.
    let mut perm: Vec<u32> = (1..=customers).collect();
    for i in (1..perm.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    let first_undelivered = cfg.first_undelivered();
    for o in 1..=orders {
        let delivered = o < first_undelivered;
        let ol_cnt = uniform(rng, 5, 15) as u32;
        l.put_row(ORDERS, order_key(w, d, o), img, |r| {
            r.set_i32(ord::O_ID, o as i32);
            r.set_i32(ord::O_D_ID, d as i32);
            r.set_i32(ord::O_W_ID, w as i32);
            r.set_i32(ord::O_C_ID, perm[o as usize - 1] as i32);
            r.set_i64(ord::O_ENTRY_D, now);
            let carrier = if delivered {
                uniform(rng, 1, 10) as i32
            } else {
                0
            };
            r.set_i32(ord::O_CARRIER_ID, carrier);
            r.set_i32(ord::O_OL_CNT, ol_cnt as i32);
            r.set_i32(ord::O_ALL_LOCAL, 1);
        })?;
        for n in 1..=ol_cnt {
            l.put_row(ORDER_LINE, order_line_key(w, d, o, n), img, |r| {
                r.set_i32(ol::OL_O_ID, o as i32);
                r.set_i32(ol::OL_D_ID, d as i32);
                r.set_i32(ol::OL_W_ID, w as i32);
                r.set_i32(ol::OL_NUMBER, n as i32);
                r.set_i32(ol::OL_I_ID, uniform(rng, 1, u64::from(cfg.items)) as i32);
                r.set_i32(ol::OL_SUPPLY_W_ID, w as i32);
                r.set_i64(ol::OL_DELIVERY_D, if delivered { now } else { 0 });
                r.set_i32(ol::OL_QUANTITY, 5);
                let amount = if delivered {
                    0
                } else {
                    uniform(rng, 1, 999_999) as i64
                };
                r.set_i64(ol::OL_AMOUNT, amount);
                set_astr(r, rng, ol::OL_DIST_INFO, 24, 24);
            })?;
        }
        if !delivered {
            l.put_row(NEW_ORDER, order_key(w, d, o), img, |r| {
                r.set_i32(no::NO_O_ID, o as i32);
                r.set_i32(no::NO_D_ID, d as i32);
                r.set_i32(no::NO_W_ID, w as i32);
            })?;
        }
    }
    Ok(())
}
