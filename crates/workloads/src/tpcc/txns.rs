//! The five TPC-C transactions (Clause 2.4 – 2.8) as stored procedures.
//!
//! Each takes its inputs from a [`TpccReq`] (made by the generator, or from a
//! served procedure's arguments) and returns the outputs a caller uses
//! ([`NewOrderOut`], [`PaymentOut`], [`OrderStatusOut`], [`DeliveryOut`], the
//! StockLevel count), fixed-size values, so the benchmark's path allocates
//! nothing. The rest of what the spec asks a terminal to display is computed
//! and dropped into `black_box`, so the reads it needs are not optimised away.
//!
//! A missing warehouse, district, customer, item-for-stock or stock row is a
//! broken database (those tables only grow at load): the run fails with an
//! error. An order missing under a new_order row that a concurrent scheme
//! just showed us is an inconsistent read, retried as a conflict; with
//! `cc none` nothing runs concurrently, so there it is an error too.

use std::hint::black_box;
use std::io::Write;

use islands::cc::CcKind;
use islands::storage::Prefetch;
use islands::txn::{RowH, Txn};
use islands::{Abort, AbortReason, Error};

use super::schema::{
    cust, customer_key, dist, district_key, hist, history_key, item, last_name_key, no, ol, ord,
    order_key, order_line_key, s_dist, stock, stock_key, wh, CUSTOMER, CUSTOMER_BY_LAST, DISTRICT,
    DISTRICTS, HISTORY, HIST_SEQ_BITS, ITEM, MAX_OL, NEW_ORDER, ORDERS, ORDERS_BY_CUSTOMER,
    ORDER_LINE, STOCK, WAREHOUSE,
};
use super::{Line, TpccConfig, TpccReq};

/// Orders StockLevel looks back over (Clause 2.8.2.2).
const STOCK_LEVEL_ORDERS: u32 = 20;

/// What NewOrder returns: the order's id, its entry date (µs since the
/// epoch) and its total in cents after discount and taxes (Clause 2.4.2.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NewOrderOut {
    pub o_id: u32,
    pub entry_d: i64,
    pub total: i64,
}

/// What Payment returns: the customer it found and their balance after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaymentOut {
    pub c_id: u32,
    pub c_balance: i64,
    /// C_CREDIT is "BC".
    pub bad_credit: bool,
}

/// One line of the order OrderStatus shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderLineOut {
    pub i_id: u32,
    pub supply_w: u32,
    pub quantity: u32,
    pub amount: i64,
    /// 0: not delivered.
    pub delivery_d: i64,
}

/// What OrderStatus returns: the customer, their last order (`o_id` 0: they
/// have none) and its lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderStatusOut {
    pub c_id: u32,
    pub c_balance: i64,
    pub o_id: u32,
    pub entry_d: i64,
    /// 0: not delivered.
    pub carrier: u32,
    pub lines: [OrderLineOut; MAX_OL as usize],
    pub ol_cnt: usize,
}

impl OrderStatusOut {
    pub fn lines(&self) -> &[OrderLineOut] {
        &self.lines[..self.ol_cnt]
    }
}

/// What Delivery returns: the order it delivered in each district
/// (`o_ids[d - 1]`; 0: the district had no undelivered order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryOut {
    pub o_ids: [u32; DISTRICTS as usize],
}

fn broken(what: &str, key: u64) -> Abort {
    Abort::Failed(Error::Config(format!(
        "TPC-C: {what} with key {key:#x} is missing: the database is not a TPC-C population"
    )))
}

/// A row that must exist given what the transaction read before it.
fn inconsistent(tx: &Txn, what: &str, key: u64) -> Abort {
    if tx.cc_kind() == CcKind::None {
        broken(what, key)
    } else {
        Abort::Conflict(AbortReason::ReadValidation)
    }
}

/// NewOrder (Clause 2.4.2).
///
/// The spec's effects, in an order that suits islands: lines supplied by
/// other warehouses first (they may live on another island), then
/// [`Txn::prepare_remote`], then the home warehouse's own stock rows (NURand
/// makes a few items hot), its district (D_NEXT_O_ID: the hottest row),
/// customer and the inserts. Across islands, this island's rows are then
/// locked only while its part runs, not across the remote branches' forced
/// prepare records.
pub async fn new_order(
    tx: &mut Txn,
    cfg: &TpccConfig,
    req: &TpccReq,
) -> Result<NewOrderOut, Abort> {
    let (w, d) = (req.w, req.d);
    // Per line: amount and S_DIST_xx, kept for the ORDER_LINE rows.
    let mut amounts = [0i64; MAX_OL as usize];
    let mut dist_infos = [[0u8; 24]; MAX_OL as usize];
    // Lines supplied by another warehouse first (it may be on another
    // island), then those of the home warehouse: a hot stock row of this
    // island is locked only after the remote branches prepared.
    prefetch_new_order(tx, req);
    let mut total = 0i64;
    for remote in [true, false] {
        for (i, line) in req.lines().iter().enumerate() {
            if (line.supply_w != w) != remote {
                continue;
            }
            // The 1% rollback (Clause 2.4.2.3) aborts at its item, whichever
            // line it is on: the effect is the spec's.
            let (amount, dist_info) = stock_line(tx, line, w, d).await?;
            amounts[i] = amount;
            dist_infos[i] = dist_info;
            total += amount;
        }
        if remote {
            // Remote stock rows (if any) are prepared, locked until the decision.
            tx.prepare_remote().await?;
        }
    }

    let wk = u64::from(w);
    let wh_h = tx
        .get(WAREHOUSE, wk)
        .await?
        .ok_or_else(|| broken("warehouse", wk))?;
    let w_tax = tx.row(wh_h).i64(wh::W_TAX);
    let dk = district_key(w, d);
    let d_h = tx
        .get_for_update(DISTRICT, dk)
        .await?
        .ok_or_else(|| broken("district", dk))?;
    let d_tax = tx.row(d_h).i64(dist::D_TAX);
    let o_id = tx.row(d_h).i32(dist::D_NEXT_O_ID) as u32;
    if o_id > cfg.max_orders_per_district {
        return Err(Abort::Failed(Error::Config(format!(
            "TPC-C: district {d} of warehouse {w} reached {} orders, the capacity fixed at start \
             (raise --max-orders-per-district or shorten the run)",
            cfg.max_orders_per_district
        ))));
    }
    tx.row_mut(d_h).add_i32(dist::D_NEXT_O_ID, 1)?;
    let ck = customer_key(req.c_w, req.c_d, req.c_id);
    let c_h = tx
        .get(CUSTOMER, ck)
        .await?
        .ok_or_else(|| broken("customer", ck))?;
    let c_discount = tx.row(c_h).i64(cust::C_DISCOUNT);
    black_box((
        tx.row(c_h).str(cust::C_LAST),
        tx.row(c_h).str(cust::C_CREDIT),
    ));

    let ok = order_key(w, d, o_id);
    // A committed order with this id means our D_NEXT_O_ID read is stale.
    let o_h = tx
        .insert(ORDERS, ok)
        .await?
        .ok_or(Abort::Conflict(AbortReason::DuplicateKey))?;
    {
        let mut r = tx.row_mut(o_h);
        r.set_i32(ord::O_ID, o_id as i32);
        r.set_i32(ord::O_D_ID, d as i32);
        r.set_i32(ord::O_W_ID, w as i32);
        r.set_i32(ord::O_C_ID, req.c_id as i32);
        r.set_i64(ord::O_ENTRY_D, req.now_us);
        r.set_i32(ord::O_CARRIER_ID, 0);
        r.set_i32(ord::O_OL_CNT, req.ol_cnt as i32);
        r.set_i32(ord::O_ALL_LOCAL, i32::from(req.all_local));
    }
    let no_h = tx
        .insert(NEW_ORDER, ok)
        .await?
        .ok_or(Abort::Conflict(AbortReason::DuplicateKey))?;
    {
        let mut r = tx.row_mut(no_h);
        r.set_i32(no::NO_O_ID, o_id as i32);
        r.set_i32(no::NO_D_ID, d as i32);
        r.set_i32(no::NO_W_ID, w as i32);
    }
    for (i, line) in req.lines().iter().enumerate() {
        let number = i as u32 + 1;
        let olk = order_line_key(w, d, o_id, number);
        let ol_h = tx
            .insert(ORDER_LINE, olk)
            .await?
            .ok_or(Abort::Conflict(AbortReason::DuplicateKey))?;
        let mut r = tx.row_mut(ol_h);
        r.set_i32(ol::OL_O_ID, o_id as i32);
        r.set_i32(ol::OL_D_ID, d as i32);
        r.set_i32(ol::OL_W_ID, w as i32);
        r.set_i32(ol::OL_NUMBER, number as i32);
        r.set_i32(ol::OL_I_ID, line.i_id as i32);
        r.set_i32(ol::OL_SUPPLY_W_ID, line.supply_w as i32);
        r.set_i64(ol::OL_DELIVERY_D, 0);
        r.set_i32(ol::OL_QUANTITY, line.quantity as i32);
        r.set_i64(ol::OL_AMOUNT, amounts[i]);
        r.set_str(ol::OL_DIST_INFO, &dist_infos[i]);
    }
    // total * (1 - discount) * (1 + w_tax + d_tax), rates in basis points.
    Ok(NewOrderOut {
        o_id,
        entry_d: req.now_us,
        total: total * (10_000 - c_discount) / 10_000 * (10_000 + w_tax + d_tax) / 10_000,
    })
}

/// Prefetch hints for every row NewOrder reads by key: index slots first,
/// then the rows, so that the cache misses of its ~25 point reads (ITEM and
/// STOCK are far larger than a cache) overlap instead of coming one after
/// another. Rows of another island are not here: their hints only miss.
fn prefetch_new_order(tx: &Txn, req: &TpccReq) {
    let (w, d) = (req.w, req.d);
    let ck = customer_key(req.c_w, req.c_d, req.c_id);
    let dk = district_key(w, d);
    for what in [Prefetch::Index, Prefetch::Row] {
        for line in req.lines() {
            tx.prefetch(ITEM, u64::from(line.i_id), what);
            tx.prefetch(STOCK, stock_key(line.supply_w, line.i_id), what);
        }
        tx.prefetch(DISTRICT, dk, what);
        tx.prefetch(CUSTOMER, ck, what);
    }
}

/// One NewOrder line's item and stock: checks the item (the 1% rollback),
/// updates the stock row, returns OL_AMOUNT and S_DIST_xx.
async fn stock_line(tx: &mut Txn, line: &Line, w: u32, d: u32) -> Result<(i64, [u8; 24]), Abort> {
    let ik = u64::from(line.i_id);
    let Some(i_h) = tx.get(ITEM, ik).await? else {
        return Err(Abort::User(
            "NewOrder: invalid item (the spec's 1% rollback)",
        ));
    };
    let price = tx.row(i_h).i64(item::I_PRICE);
    let i_original = contains(tx.row(i_h).str(item::I_DATA), b"ORIGINAL");
    let sk = stock_key(line.supply_w, line.i_id);
    let s_h = tx
        .get_for_update(STOCK, sk)
        .await?
        .ok_or_else(|| broken("stock", sk))?;
    let qty = line.quantity as i32;
    let mut dist_info = [0u8; 24];
    let s_original;
    {
        let s = tx.row(s_h);
        let di = s.str(s_dist(d));
        dist_info[..di.len()].copy_from_slice(di);
        s_original = contains(s.str(stock::S_DATA), b"ORIGINAL");
    }
    {
        let mut s = tx.row_mut(s_h);
        let q = s.i32(stock::S_QUANTITY);
        s.set_i32(
            stock::S_QUANTITY,
            if q >= qty + 10 { q - qty } else { q - qty + 91 },
        );
        s.add_i64(stock::S_YTD, i64::from(qty))?;
        s.add_i32(stock::S_ORDER_CNT, 1)?;
        if line.supply_w != w {
            s.add_i32(stock::S_REMOTE_CNT, 1)?;
        }
    }
    black_box(i_original && s_original);
    Ok((i64::from(qty) * price, dist_info))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Finds the customer of a Payment or OrderStatus: by id, or by last name,
/// taking the one at position ⌈n/2⌉ of those with that name sorted by
/// C_FIRST (Clause 2.5.2.2). Ties in C_FIRST go by C_ID.
async fn find_customer(tx: &mut Txn, req: &TpccReq, for_update: bool) -> Result<RowH, Abort> {
    if !req.by_last {
        let ck = customer_key(req.c_w, req.c_d, req.c_id);
        let h = if for_update {
            tx.get_for_update(CUSTOMER, ck).await?
        } else {
            tx.get(CUSTOMER, ck).await?
        };
        return h.ok_or_else(|| broken("customer", ck));
    }
    let last = req.c_last();
    let skey = last_name_key(req.c_w, req.c_d, last);
    let n = tx
        .scan_secondary(CUSTOMER, CUSTOMER_BY_LAST, skey, 1 << 16, false)
        .await?;
    let matches = |tx: &Txn, i: usize| tx.row(tx.scan_row(i)).str(cust::C_LAST) == last;
    let m = (0..n).filter(|&i| matches(tx, i)).count();
    if m == 0 {
        // Every district holds every name the generator draws: a name
        // that is not there came from a caller.
        return Err(Abort::User("no customer of that last name in the district"));
    }
    // The (m - 1) / 2-th (0-based) in (C_FIRST, C_ID) order: small groups
    // (a handful of rows), so counting beats sorting into a buffer.
    let want = (m - 1) / 2;
    for i in (0..n).filter(|&i| matches(tx, i)) {
        let hi = tx.scan_row(i);
        let row_i = tx.row(hi);
        let first_i = row_i.str(cust::C_FIRST);
        let key_i = tx.key(hi);
        let rank = (0..n)
            .filter(|&j| matches(tx, j))
            .filter(|&j| {
                let hj = tx.scan_row(j);
                (tx.row(hj).str(cust::C_FIRST), tx.key(hj)) < (first_i, key_i)
            })
            .count();
        if rank == want {
            return Ok(hi);
        }
    }
    unreachable!("a rank in 0..m is always taken")
}

/// Payment (Clause 2.5.2).
///
/// The customer (on another island for 15% of Payments) comes first, then
/// [`Txn::prepare_remote`], then the home warehouse and district rows, whose
/// YTD every Payment of the warehouse updates: across islands they are then
/// locked only while this island's part runs (see [`new_order`]).
pub async fn payment(tx: &mut Txn, req: &TpccReq) -> Result<PaymentOut, Abort> {
    let (w, d) = (req.w, req.d);
    let c_h = find_customer(tx, req, true).await?;
    let c_id = tx.row(c_h).i32(cust::C_ID);
    let bad_credit = tx.row(c_h).str(cust::C_CREDIT) == b"BC";
    let mut data = [0u8; 500];
    let mut data_len = 0;
    if bad_credit {
        // New C_DATA: the payment's ids and amount, then the old data, cut to 500.
        let mut cur = std::io::Cursor::new(&mut data[..]);
        let _ = write!(
            cur,
            "{} {} {} {} {} {}.{:02} ",
            c_id,
            req.c_d,
            req.c_w,
            d,
            w,
            req.amount / 100,
            req.amount % 100
        );
        let at = cur.position() as usize;
        let c_row = tx.row(c_h);
        let old = c_row.str(cust::C_DATA);
        let k = old.len().min(500 - at);
        data[at..at + k].copy_from_slice(&old[..k]);
        data_len = at + k;
    }
    let c_balance = {
        let mut c = tx.row_mut(c_h);
        let c_balance = c.sub_i64(cust::C_BALANCE, req.amount)?;
        c.add_i64(cust::C_YTD_PAYMENT, req.amount)?;
        c.add_i32(cust::C_PAYMENT_CNT, 1)?;
        if bad_credit {
            c.set_str(cust::C_DATA, &data[..data_len]);
        }
        c_balance
    };

    tx.prepare_remote().await?;

    let wk = u64::from(w);
    let wh_h = tx
        .get_for_update(WAREHOUSE, wk)
        .await?
        .ok_or_else(|| broken("warehouse", wk))?;
    tx.row_mut(wh_h).add_i64(wh::W_YTD, req.amount)?;
    let dk = district_key(w, d);
    let d_h = tx
        .get_for_update(DISTRICT, dk)
        .await?
        .ok_or_else(|| broken("district", dk))?;
    tx.row_mut(d_h).add_i64(dist::D_YTD, req.amount)?;

    let mut h_data = [0u8; 24];
    let (w_row, d_row) = (tx.row(wh_h), tx.row(d_h));
    let (w_name, d_name) = (w_row.str(wh::W_NAME), d_row.str(dist::D_NAME));
    let mut cur = std::io::Cursor::new(&mut h_data[..]);
    let _ = cur.write_all(w_name);
    let _ = cur.write_all(b"    ");
    let _ = cur.write_all(d_name);
    let h_key = match req.history_key {
        0 => next_history_key(tx, w).await?,
        k => k,
    };
    let h_h = tx.insert(HISTORY, h_key).await?.ok_or_else(|| {
        Abort::Failed(Error::Config(format!(
            "TPC-C: history key {h_key:#x} is taken: two workers share a history slot"
        )))
    })?;
    let mut h = tx.row_mut(h_h);
    h.set_i32(hist::H_C_ID, c_id);
    h.set_i32(hist::H_C_D_ID, req.c_d as i32);
    h.set_i32(hist::H_C_W_ID, req.c_w as i32);
    h.set_i32(hist::H_D_ID, d as i32);
    h.set_i32(hist::H_W_ID, w as i32);
    h.set_i64(hist::H_DATE, req.now_us);
    h.set_i64(hist::H_AMOUNT, req.amount);
    h.set_str(hist::H_DATA, &h_data);
    Ok(PaymentOut {
        c_id: c_id as u32,
        c_balance,
        bad_credit,
    })
}

/// The key of a Payment's history row in warehouse `w`'s slot 0, which the
/// loader numbers first: one past the slot's last row. The caller holds
/// the warehouse row's exclusive lock, which every Payment of `w` takes
/// before it comes here, so no other one takes the same number.
async fn next_history_key(tx: &mut Txn, w: u32) -> Result<u64, Abort> {
    let max_seq = (1 << HIST_SEQ_BITS) - 1;
    let n = tx
        .scan(
            HISTORY,
            history_key(w, 0, 0),
            history_key(w, 0, max_seq),
            1,
            true,
        )
        .await?;
    let last = if n == 0 {
        0
    } else {
        tx.key(tx.scan_row(0)) & max_seq
    };
    if last == max_seq {
        return Err(Abort::Failed(Error::Config(format!(
            "TPC-C: warehouse {w} numbered 2^{HIST_SEQ_BITS} history rows in its slot 0"
        ))));
    }
    Ok(history_key(w, 0, last + 1))
}

/// OrderStatus (Clause 2.6.2), read-only.
pub async fn order_status(tx: &mut Txn, req: &TpccReq) -> Result<OrderStatusOut, Abort> {
    let c_h = find_customer(tx, req, false).await?;
    let c_id = tx.row(c_h).i32(cust::C_ID) as u32;
    let mut out = OrderStatusOut {
        c_id,
        c_balance: tx.row(c_h).i64(cust::C_BALANCE),
        ..Default::default()
    };
    black_box(tx.row(c_h).str(cust::C_FIRST));
    let n = tx
        .scan_secondary(
            ORDERS,
            ORDERS_BY_CUSTOMER,
            customer_key(req.c_w, req.c_d, c_id),
            1,
            true,
        )
        .await?;
    if n == 0 {
        return Ok(out);
    }
    let o_h = tx.scan_row(0);
    let o_id = tx.row(o_h).i32(ord::O_ID) as u32;
    out.o_id = o_id;
    out.entry_d = tx.row(o_h).i64(ord::O_ENTRY_D);
    out.carrier = tx.row(o_h).i32(ord::O_CARRIER_ID) as u32;
    let n = tx
        .scan(
            ORDER_LINE,
            order_line_key(req.c_w, req.c_d, o_id, 0),
            order_line_key(req.c_w, req.c_d, o_id, MAX_OL),
            MAX_OL as usize,
            false,
        )
        .await?;
    for (i, line) in out.lines.iter_mut().enumerate().take(n) {
        let r = tx.row(tx.scan_row(i));
        *line = OrderLineOut {
            i_id: r.i32(ol::OL_I_ID) as u32,
            supply_w: r.i32(ol::OL_SUPPLY_W_ID) as u32,
            quantity: r.i32(ol::OL_QUANTITY) as u32,
            amount: r.i64(ol::OL_AMOUNT),
            delivery_d: r.i64(ol::OL_DELIVERY_D),
        };
    }
    out.ol_cnt = n.min(MAX_OL as usize);
    Ok(out)
}

/// Delivery (Clause 2.7.4): the oldest undelivered order of each of the ten
/// districts, in one transaction. A district with none is skipped.
pub async fn delivery(tx: &mut Txn, req: &TpccReq) -> Result<DeliveryOut, Abort> {
    let w = req.w;
    let mut out = DeliveryOut::default();
    for d in 1..=DISTRICTS {
        let n = tx
            .scan(
                NEW_ORDER,
                order_key(w, d, 0),
                order_key(w, d, u32::MAX),
                1,
                false,
            )
            .await?;
        if n == 0 {
            continue;
        }
        let no_h = tx.scan_row(0);
        let o_id = tx.row(no_h).i32(no::NO_O_ID) as u32;
        out.o_ids[d as usize - 1] = o_id;
        tx.delete(no_h).await?;
        let ok = order_key(w, d, o_id);
        let o_h = tx
            .get_for_update(ORDERS, ok)
            .await?
            .ok_or_else(|| inconsistent(tx, "order of a new_order row", ok))?;
        let c_id = tx.row(o_h).i32(ord::O_C_ID) as u32;
        tx.row_mut(o_h)
            .set_i32(ord::O_CARRIER_ID, req.carrier as i32);
        let n = tx
            .scan(
                ORDER_LINE,
                order_line_key(w, d, o_id, 0),
                order_line_key(w, d, o_id, MAX_OL),
                MAX_OL as usize,
                false,
            )
            .await?;
        let mut sum = 0i64;
        for i in 0..n {
            let h = tx.scan_row(i);
            sum = sum
                .checked_add(tx.row(h).i64(ol::OL_AMOUNT))
                .ok_or_else(|| {
                    Error::OutOfRange(format!(
                        "the sum of OL_AMOUNT of order {o_id} of district {d} of warehouse {w}"
                    ))
                })?;
            tx.row_mut(h).set_i64(ol::OL_DELIVERY_D, req.now_us);
        }
        let ck = customer_key(w, d, c_id);
        let c_h = tx
            .get_for_update(CUSTOMER, ck)
            .await?
            .ok_or_else(|| broken("customer", ck))?;
        let mut c = tx.row_mut(c_h);
        c.add_i64(cust::C_BALANCE, sum)?;
        c.add_i32(cust::C_DELIVERY_CNT, 1)?;
    }
    Ok(out)
}

/// StockLevel (Clause 2.8.2), read-only: the number of distinct items of
/// the district's last 20 orders whose stock is below the threshold.
pub async fn stock_level(tx: &mut Txn, req: &TpccReq) -> Result<u32, Abort> {
    // Level 1 isolation is all the spec asks of Stock-Level (Clause 3.4.1):
    // committed reads, no read locks. Its ~200 stock rows then never collide
    // with a stock row another island's NewOrder holds prepared across its
    // forced log records, nor make a NewOrder abort.
    tx.read_committed();
    let (w, d) = (req.w, req.d);
    let dk = district_key(w, d);
    let d_h = tx
        .get(DISTRICT, dk)
        .await?
        .ok_or_else(|| broken("district", dk))?;
    let next = tx.row(d_h).i32(dist::D_NEXT_O_ID) as u32;
    let lo = next.saturating_sub(STOCK_LEVEL_ORDERS).max(1);
    const MAX_LINES: usize = (STOCK_LEVEL_ORDERS * MAX_OL) as usize;
    let n = tx
        .scan(
            ORDER_LINE,
            order_line_key(w, d, lo, 0),
            order_line_key(w, d, next - 1, MAX_OL),
            MAX_LINES,
            false,
        )
        .await?;
    let mut items = [0u32; MAX_LINES];
    for (i, slot) in items.iter_mut().enumerate().take(n) {
        *slot = tx.row(tx.scan_row(i)).i32(ol::OL_I_ID) as u32;
    }
    let items = &mut items[..n];
    items.sort_unstable();
    let mut low = 0u32;
    let mut prev = 0;
    for &i in items.iter() {
        if i == prev {
            continue;
        }
        prev = i;
        let sk = stock_key(w, i);
        let s_h = tx
            .get(STOCK, sk)
            .await?
            .ok_or_else(|| broken("stock", sk))?;
        if tx.row(s_h).i32(stock::S_QUANTITY) < req.threshold {
            low += 1;
        }
    }
    Ok(low)
}
