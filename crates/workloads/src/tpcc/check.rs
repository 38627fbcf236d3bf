//! The consistency conditions of Clause 3.3.2, checked on a quiescent island.
//!
//! The checker reads every row of the TPC-C tables once with
//! `Table::for_each_row` (consistent per row, no transaction) and decodes the
//! columns through the table's public schema offsets. It checks the
//! warehouses present in this island:
//!
//! 1. W_YTD = sum(D_YTD) of the warehouse's districts.
//! 2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) of the district.
//! 3. max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW-ORDER of the district.
//! 4. sum(O_OL_CNT) = rows in ORDER-LINE of the district.
//! 5. O_CARRIER_ID is null iff the order has a NEW-ORDER row.
//! 6. O_OL_CNT = rows in ORDER-LINE of the order.
//! 7. OL_DELIVERY_D is null iff the order's O_CARRIER_ID is null.
//! 8. W_YTD = sum(H_AMOUNT) with H_W_ID = the warehouse.
//! 9. D_YTD = sum(H_AMOUNT) with (H_W_ID, H_D_ID) = the district.
//! 10. C_BALANCE = sum(delivered OL_AMOUNT of the customer's orders) - sum(H_AMOUNT of the customer).
//! 11. (initial state only, [`check_initial`]) rows in ORDER - rows in NEW-ORDER = 2,100 per district
//!     (70% of the initial orders at a scaled population).
//! 12. C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT of the customer's orders).
//!
//! Conditions 10 and 12 need the customer's history and orders, which live with
//! the customer's warehouse except for remote Payments' history rows: checked
//! on one island that does not hold all warehouses they are only meaningful
//! with `local_only` runs; [`check_islands`] checks a whole deployment.
//!
//! A violation is reported once per condition and district (or warehouse),
//! with the number of offending rows and the first one found.

use std::collections::{BTreeMap, HashMap};

use islands::island::Island;
use islands::storage::schema::row_bytes;
use islands::storage::{Col, Schema, TableId};
use islands::Error;

use super::schema::{
    cust, customer_key, dist, district_key, hist, no, ol, ord, order_key, wh, CUSTOMER, DISTRICT,
    DISTRICTS, HISTORY, NEW_ORDER, ORDERS, ORDER_LINE, WAREHOUSE,
};
use super::TpccConfig;

/// A failed consistency condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The condition's number in Clause 3.3.2 (1..=12).
    pub condition: u8,
    pub warehouse: u32,
    /// The district, for per-district conditions.
    pub district: Option<u32>,
    /// Offending rows (1 for per-district or per-warehouse sums).
    pub count: u64,
    /// The first offending case, in words.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "condition {} fails in warehouse {}",
            self.condition, self.warehouse
        )?;
        if let Some(d) = self.district {
            write!(f, ", district {d}")?;
        }
        write!(f, ": {}", self.detail)?;
        if self.count > 1 {
            write!(f, " (and {} more)", self.count - 1)?;
        }
        Ok(())
    }
}

/// Reads columns of a raw row image through the table's schema.
struct Raw<'a> {
    b: &'a [u8],
    s: &'a Schema,
}

impl Raw<'_> {
    fn at(&self, c: Col, n: usize) -> &[u8] {
        let o = self.s.column(c).offset;
        &self.b[o..o + n]
    }
    fn i32(&self, c: Col) -> i32 {
        i32::from_le_bytes(self.at(c, 4).try_into().expect("4 bytes"))
    }
    fn i64(&self, c: Col) -> i64 {
        i64::from_le_bytes(self.at(c, 8).try_into().expect("8 bytes"))
    }
}

/// Every row of `table` on every island of `islands`.
fn for_each(islands: &[&Island], table: TableId, mut f: impl FnMut(Raw)) {
    for island in islands {
        let t = island.catalog().table(table);
        t.for_each_row(|_, _, words| {
            f(Raw {
                b: row_bytes(words),
                s: &t.schema,
            })
        });
    }
}

#[derive(Default)]
struct Found(BTreeMap<(u8, u32, Option<u32>), (u64, String)>);

impl Found {
    fn add(&mut self, cond: u8, w: u32, d: Option<u32>, detail: impl FnOnce() -> String) {
        self.0
            .entry((cond, w, d))
            .and_modify(|e| e.0 += 1)
            .or_insert_with(|| (1, detail()));
    }
    fn into_vec(self) -> Vec<Violation> {
        self.0
            .into_iter()
            .map(
                |((condition, warehouse, district), (count, detail))| Violation {
                    condition,
                    warehouse,
                    district,
                    count,
                    detail,
                },
            )
            .collect()
    }
}

#[derive(Default)]
struct DistrictAgg {
    ytd: i64,
    next_o_id: i64,
    present: bool,
    hist_sum: i64,
    o_count: u64,
    o_max: i64,
    ol_cnt_sum: i64,
    ol_count: i64,
    no_count: i64,
    no_min: i64,
    no_max: i64,
}

struct OrderAgg {
    c_id: u32,
    carrier: i32,
    ol_cnt: i32,
    lines: i32,
    null_lines: i32,
    delivered_sum: i64,
    has_no: bool,
}

#[derive(Default)]
struct CustomerAgg {
    balance: i64,
    ytd_payment: i64,
    hist_sum: i64,
    delivered_sum: i64,
}

/// Checks conditions 1–10 and 12 on `island`. Empty when consistent.
pub fn check(island: &Island, cfg: &TpccConfig) -> Result<Vec<Violation>, Error> {
    Ok(run(&[island], cfg, false)?.into_vec())
}

/// Checks conditions 1–10 and 12 over a deployment: the islands' rows
/// together, so a remote Payment's history row on one island counts for its
/// customer on another.
pub fn check_islands(islands: &[Island], cfg: &TpccConfig) -> Result<Vec<Violation>, Error> {
    let all: Vec<&Island> = islands.iter().collect();
    Ok(run(&all, cfg, false)?.into_vec())
}

/// Checks the initial population: [`check`] plus condition 11.
pub fn check_initial(island: &Island, cfg: &TpccConfig) -> Result<Vec<Violation>, Error> {
    Ok(run(&[island], cfg, true)?.into_vec())
}

fn run(island: &[&Island], cfg: &TpccConfig, initial: bool) -> Result<Found, Error> {
    cfg.check()?;
    let mut found = Found::default();
    let mut warehouses: BTreeMap<u32, (i64, i64)> = BTreeMap::new(); // w -> (W_YTD, sum H_AMOUNT)
    for_each(island, WAREHOUSE, |r| {
        warehouses.insert(r.i32(wh::W_ID) as u32, (r.i64(wh::W_YTD), 0));
    });
    let mut districts: HashMap<u64, DistrictAgg> = HashMap::new();
    for &w in warehouses.keys() {
        for d in 1..=DISTRICTS {
            districts.insert(district_key(w, d), DistrictAgg::default());
        }
    }
    for_each(island, DISTRICT, |r| {
        let (w, d) = (r.i32(dist::D_W_ID) as u32, r.i32(dist::D_ID) as u32);
        if let Some(a) = districts.get_mut(&district_key(w, d)) {
            a.present = true;
            a.ytd = r.i64(dist::D_YTD);
            a.next_o_id = i64::from(r.i32(dist::D_NEXT_O_ID));
        }
    });
    let mut customers: HashMap<u64, CustomerAgg> = HashMap::new();
    for_each(island, CUSTOMER, |r| {
        let k = customer_key(
            r.i32(cust::C_W_ID) as u32,
            r.i32(cust::C_D_ID) as u32,
            r.i32(cust::C_ID) as u32,
        );
        customers.insert(
            k,
            CustomerAgg {
                balance: r.i64(cust::C_BALANCE),
                ytd_payment: r.i64(cust::C_YTD_PAYMENT),
                ..Default::default()
            },
        );
    });
    for_each(island, HISTORY, |r| {
        let amount = r.i64(hist::H_AMOUNT);
        let (w, d) = (r.i32(hist::H_W_ID) as u32, r.i32(hist::H_D_ID) as u32);
        if let Some(x) = warehouses.get_mut(&w) {
            x.1 += amount;
        }
        if let Some(a) = districts.get_mut(&district_key(w, d)) {
            a.hist_sum += amount;
        }
        let ck = customer_key(
            r.i32(hist::H_C_W_ID) as u32,
            r.i32(hist::H_C_D_ID) as u32,
            r.i32(hist::H_C_ID) as u32,
        );
        if let Some(c) = customers.get_mut(&ck) {
            c.hist_sum += amount;
        }
    });
    let mut orders: HashMap<u64, OrderAgg> = HashMap::new();
    for_each(island, ORDERS, |r| {
        let (w, d, o) = (
            r.i32(ord::O_W_ID) as u32,
            r.i32(ord::O_D_ID) as u32,
            r.i32(ord::O_ID) as u32,
        );
        let ol_cnt = r.i32(ord::O_OL_CNT);
        if let Some(a) = districts.get_mut(&district_key(w, d)) {
            a.o_count += 1;
            a.o_max = a.o_max.max(i64::from(o));
            a.ol_cnt_sum += i64::from(ol_cnt);
        }
        orders.insert(
            order_key(w, d, o),
            OrderAgg {
                c_id: r.i32(ord::O_C_ID) as u32,
                carrier: r.i32(ord::O_CARRIER_ID),
                ol_cnt,
                lines: 0,
                null_lines: 0,
                delivered_sum: 0,
                has_no: false,
            },
        );
    });
    for_each(island, NEW_ORDER, |r| {
        let (w, d, o) = (
            r.i32(no::NO_W_ID) as u32,
            r.i32(no::NO_D_ID) as u32,
            r.i32(no::NO_O_ID) as u32,
        );
        if let Some(a) = districts.get_mut(&district_key(w, d)) {
            let o = i64::from(o);
            a.no_min = if a.no_count == 0 { o } else { a.no_min.min(o) };
            a.no_max = a.no_max.max(o);
            a.no_count += 1;
        }
        match orders.get_mut(&order_key(w, d, o)) {
            Some(x) => x.has_no = true,
            None => found.add(5, w, Some(d), || {
                format!("new_order row of order {o} has no order")
            }),
        }
    });
    for_each(island, ORDER_LINE, |r| {
        let (w, d, o) = (
            r.i32(ol::OL_W_ID) as u32,
            r.i32(ol::OL_D_ID) as u32,
            r.i32(ol::OL_O_ID) as u32,
        );
        if let Some(a) = districts.get_mut(&district_key(w, d)) {
            a.ol_count += 1;
        }
        match orders.get_mut(&order_key(w, d, o)) {
            Some(x) => {
                x.lines += 1;
                if r.i64(ol::OL_DELIVERY_D) == 0 {
                    x.null_lines += 1;
                } else {
                    x.delivered_sum += r.i64(ol::OL_AMOUNT);
                }
            }
            None => found.add(6, w, Some(d), || {
                format!(
                    "order line {} of order {o} has no order",
                    r.i32(ol::OL_NUMBER)
                )
            }),
        }
    });

    // Per warehouse: 1 and 8.
    for (&w, &(w_ytd, hist_sum)) in &warehouses {
        let d_sum: i64 = (1..=DISTRICTS)
            .filter_map(|d| districts.get(&district_key(w, d)))
            .map(|a| a.ytd)
            .sum();
        if w_ytd != d_sum {
            found.add(1, w, None, || {
                format!("W_YTD {w_ytd} != sum(D_YTD) {d_sum}")
            });
        }
        if w_ytd != hist_sum {
            found.add(8, w, None, || {
                format!("W_YTD {w_ytd} != sum(H_AMOUNT) {hist_sum}")
            });
        }
    }
    // Per district: 2, 3, 4, 9, 11.
    let first_undelivered = i64::from(cfg.first_undelivered());
    for &w in warehouses.keys() {
        for d in 1..=DISTRICTS {
            let a = &districts[&district_key(w, d)];
            let ds = Some(d);
            if !a.present {
                found.add(2, w, ds, || "the district row is missing".into());
                continue;
            }
            if a.next_o_id - 1 != a.o_max || (a.no_count > 0 && a.no_max != a.o_max) {
                found.add(2, w, ds, || {
                    format!(
                        "D_NEXT_O_ID - 1 = {}, max(O_ID) = {}, max(NO_O_ID) = {}",
                        a.next_o_id - 1,
                        a.o_max,
                        if a.no_count > 0 {
                            a.no_max.to_string()
                        } else {
                            "none".into()
                        }
                    )
                });
            }
            if a.no_count > 0 && a.no_max - a.no_min + 1 != a.no_count {
                found.add(3, w, ds, || {
                    format!(
                        "max(NO_O_ID) - min(NO_O_ID) + 1 = {} but NEW-ORDER has {} rows",
                        a.no_max - a.no_min + 1,
                        a.no_count
                    )
                });
            }
            if a.ol_cnt_sum != a.ol_count {
                found.add(4, w, ds, || {
                    format!(
                        "sum(O_OL_CNT) = {} but ORDER-LINE has {} rows",
                        a.ol_cnt_sum, a.ol_count
                    )
                });
            }
            if a.ytd != a.hist_sum {
                found.add(9, w, ds, || {
                    format!("D_YTD {} != sum(H_AMOUNT) {}", a.ytd, a.hist_sum)
                });
            }
            if initial && a.o_count as i64 - a.no_count != first_undelivered - 1 {
                found.add(11, w, ds, || {
                    format!(
                        "ORDER has {} rows and NEW-ORDER {}: the difference is not {}",
                        a.o_count,
                        a.no_count,
                        first_undelivered - 1
                    )
                });
            }
        }
    }
    // Per order: 5, 6, 7; and the customers' delivered amounts.
    for (&ok, o) in &orders {
        let (w, d, o_id) = ((ok >> 36) as u32, ((ok >> 32) & 0xf) as u32, ok as u32);
        if !warehouses.contains_key(&w) {
            continue;
        }
        let ds = Some(d);
        if (o.carrier == 0) != o.has_no {
            found.add(5, w, ds, || {
                format!(
                    "order {o_id} has O_CARRIER_ID {} and {} new_order row",
                    o.carrier,
                    if o.has_no { "a" } else { "no" }
                )
            });
        }
        if o.ol_cnt != o.lines {
            found.add(6, w, ds, || {
                format!(
                    "order {o_id} has O_OL_CNT {} but {} order lines",
                    o.ol_cnt, o.lines
                )
            });
        }
        let bad_lines = if o.carrier == 0 {
            o.lines - o.null_lines
        } else {
            o.null_lines
        };
        if bad_lines != 0 {
            found.add(7, w, ds, || {
                format!(
                    "order {o_id} has O_CARRIER_ID {} and {bad_lines} order lines with{} OL_DELIVERY_D",
                    o.carrier,
                    if o.carrier == 0 { "" } else { "out" }
                )
            });
        }
        if let Some(c) = customers.get_mut(&customer_key(w, d, o.c_id)) {
            c.delivered_sum += o.delivered_sum;
        }
    }
    // Per customer: 10 and 12.
    for (&ck, c) in &customers {
        let (w, d, c_id) = ((ck >> 20) as u32, ((ck >> 16) & 0xf) as u32, ck as u16);
        if !warehouses.contains_key(&w) {
            continue;
        }
        if c.balance != c.delivered_sum - c.hist_sum {
            found.add(10, w, Some(d), || {
                format!(
                    "customer {c_id}: C_BALANCE {} != delivered {} - paid {}",
                    c.balance, c.delivered_sum, c.hist_sum
                )
            });
        }
        if c.balance + c.ytd_payment != c.delivered_sum {
            found.add(12, w, Some(d), || {
                format!(
                    "customer {c_id}: C_BALANCE {} + C_YTD_PAYMENT {} != delivered {}",
                    c.balance, c.ytd_payment, c.delivered_sum
                )
            });
        }
    }
    Ok(found)
}
