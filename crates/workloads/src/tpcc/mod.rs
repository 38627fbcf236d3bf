//! TPC-C (revision 5.11): the full schema, the initial population, the five
//! transactions with the spec's mix, and the consistency checker.
//!
//! - [`schema`]: tables, columns, key layout.
//! - [`load`]: the initial population of a range of warehouses (Clause 4.3).
//! - [`txns`]: NewOrder, Payment, OrderStatus, Delivery, StockLevel (Clause 2).
//! - [`check`]: the consistency conditions of Clause 3.3.2.
//! - [`random`]: NURand, last names, random strings.
//!
//! Warehouses are the sites: an island holds a range of warehouses, and each
//! worker has a home warehouse (as in Shore-Kits and Silo). Transactions run
//! back to back, without keying and think times: throughput figures are *not*
//! a compliant tpmC.

pub mod check;
pub mod load;
pub mod random;
pub mod schema;
pub mod served;
pub mod txns;

use std::collections::BTreeMap;

use islands::proc::rng::FastRng;
use islands::proc::Workload;
use islands::txn::Txn;
use islands::{Abort, Error};

use random::{nurand, uniform, C_ID, C_OL_I_ID, C_RUN_LAST};
use schema::{DISTRICTS, HIST_MAX_SLOT, HIST_SEQ_BITS, MAX_CUSTOMERS, MAX_OL, MAX_WAREHOUSES};

pub use check::{check, check_initial, Violation};
pub use load::load;

/// Transaction type indexes, in the order of [`Workload::types`].
pub const NEW_ORDER: usize = 0;
pub const PAYMENT: usize = 1;
pub const ORDER_STATUS: usize = 2;
pub const DELIVERY: usize = 3;
pub const STOCK_LEVEL: usize = 4;
pub const TYPE_NAMES: [&str; 5] = [
    "NewOrder",
    "Payment",
    "OrderStatus",
    "Delivery",
    "StockLevel",
];

/// The transaction mix: percentages of NewOrder, Payment, OrderStatus,
/// Delivery and StockLevel, summing to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix(pub [u32; 5]);

impl Mix {
    /// The spec's minimum mix (Clause 5.2.3), with NewOrder taking the rest.
    pub const FULL: Mix = Mix([45, 43, 4, 4, 4]);
    pub const NAMES: &'static str =
        "full (45,43,4,4,4), payment, neworder, no-pay (50/50 NewOrder/Payment), \
         or five percentages NewOrder,Payment,OrderStatus,Delivery,StockLevel summing to 100";

    pub fn parse(s: &str) -> Result<Mix, Error> {
        let m = match s {
            "full" => Mix::FULL,
            "payment" => Mix([0, 100, 0, 0, 0]),
            "neworder" => Mix([100, 0, 0, 0, 0]),
            "no-pay" => Mix([50, 50, 0, 0, 0]),
            _ => {
                let parts: Vec<&str> = s.split(',').map(str::trim).collect();
                let nums: Option<Vec<u32>> = parts.iter().map(|p| p.parse().ok()).collect();
                match nums {
                    Some(v) if v.len() == 5 => Mix([v[0], v[1], v[2], v[3], v[4]]),
                    _ => {
                        return Err(Error::Config(format!(
                            "--mix '{s}' is not a mix; valid values: {}",
                            Mix::NAMES
                        )))
                    }
                }
            }
        };
        let sum: u64 = m.0.iter().map(|&p| u64::from(p)).sum();
        if sum != 100 {
            return Err(Error::Config(format!(
                "--mix '{s}' sums to {sum}, not 100; valid values: {}",
                Mix::NAMES
            )));
        }
        Ok(m)
    }

    /// Picks a transaction type for a draw `r` in `0..100`.
    #[inline]
    fn pick(&self, r: u32) -> usize {
        let mut acc = 0;
        for (i, &p) in self.0.iter().enumerate() {
            acc += p;
            if r < acc {
                return i;
            }
        }
        NEW_ORDER
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e] = self.0;
        write!(f, "{a},{b},{c},{d},{e}")
    }
}

#[derive(Clone, Debug)]
pub struct TpccConfig {
    pub warehouses: u32,
    /// Items (the spec: 100,000). Smaller only to make tests fast.
    pub items: u32,
    /// Customers per district, and initial orders per district (the spec: 3,000).
    /// Smaller only to make tests fast; the last 30% of the initial orders are
    /// undelivered (900 of 3,000).
    pub customers_per_district: u32,
    /// Most orders a district may hold, initial ones included: the capacity
    /// of orders, new_order and order_line (fixed at start). A NewOrder
    /// beyond it fails the run with an error that says so.
    pub max_orders_per_district: u32,
    pub mix: Mix,
    /// No remote order lines and no remote Payment customers.
    pub local_only: bool,
}

impl Default for TpccConfig {
    fn default() -> Self {
        TpccConfig {
            warehouses: 1,
            items: 100_000,
            customers_per_district: 3_000,
            max_orders_per_district: 1_000_000,
            mix: Mix::FULL,
            local_only: false,
        }
    }
}

impl TpccConfig {
    pub fn check(&self) -> Result<(), Error> {
        if self.warehouses == 0 || self.warehouses > MAX_WAREHOUSES {
            return Err(Error::Config(format!(
                "--warehouses {} is outside 1..={MAX_WAREHOUSES}",
                self.warehouses
            )));
        }
        if self.items < MAX_OL || self.items > 1 << 24 {
            return Err(Error::Config(format!(
                "items {} is outside {MAX_OL}..={}",
                self.items,
                1 << 24
            )));
        }
        if self.customers_per_district < 10 || self.customers_per_district > MAX_CUSTOMERS {
            return Err(Error::Config(format!(
                "customers per district {} is outside 10..={MAX_CUSTOMERS}",
                self.customers_per_district
            )));
        }
        if self.max_orders_per_district <= self.customers_per_district
            || self.max_orders_per_district > i32::MAX as u32
        {
            return Err(Error::Config(format!(
                "--max-orders-per-district {} must be above the initial orders per district ({}) and at most {}",
                self.max_orders_per_district,
                self.customers_per_district,
                i32::MAX
            )));
        }
        Ok(())
    }

    /// Initial orders per district (one per customer).
    pub fn initial_orders(&self) -> u32 {
        self.customers_per_district
    }

    /// The first undelivered initial order: orders from it on have a
    /// new_order row (2,101 of 3,000 in the spec).
    pub fn first_undelivered(&self) -> u32 {
        self.initial_orders() - self.initial_orders() * 3 / 10 + 1
    }

    /// History rows the run may add: Payments roughly match NewOrders in
    /// the mix; twice the order capacity leaves room for Payment-only runs.
    pub fn history_capacity(&self) -> u64 {
        u64::from(self.warehouses)
            * u64::from(DISTRICTS)
            * 2
            * u64::from(self.max_orders_per_district)
    }

    pub fn parameters(&self) -> BTreeMap<String, String> {
        [
            ("warehouses", self.warehouses.to_string()),
            ("items", self.items.to_string()),
            (
                "customers_per_district",
                self.customers_per_district.to_string(),
            ),
            (
                "max_orders_per_district",
                self.max_orders_per_district.to_string(),
            ),
            ("mix", self.mix.to_string()),
            ("local_only", self.local_only.to_string()),
            (
                "note",
                "no keying or think time: not a compliant tpmC".to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// One order line of a NewOrder request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Line {
    pub i_id: u32,
    pub supply_w: u32,
    pub quantity: u32,
}

/// One request: the inputs of any of the five transactions (Clause 2.x.1).
#[derive(Clone, Debug)]
pub struct TpccReq {
    pub ty: usize,
    /// Home warehouse and district.
    pub w: u32,
    pub d: u32,
    /// Customer: warehouse, district, and id or last name.
    pub c_w: u32,
    pub c_d: u32,
    pub c_id: u32,
    pub by_last: bool,
    pub c_last: [u8; 16],
    pub c_last_len: usize,
    /// NewOrder.
    pub lines: [Line; MAX_OL as usize],
    pub ol_cnt: usize,
    pub all_local: bool,
    /// Payment, in cents.
    pub amount: i64,
    /// Delivery.
    pub carrier: u32,
    /// StockLevel.
    pub threshold: i32,
    /// Entry / payment / delivery date, microseconds since the epoch.
    pub now_us: i64,
    /// Payment: the history row's key (unique per worker); 0: the next
    /// one of the home warehouse's slot 0, found under the warehouse's lock
    /// (a served Payment, whose caller has no slot of its own).
    pub history_key: u64,
    /// Generator state: the worker's last history sequence number.
    pub seq: u64,
}

impl Default for TpccReq {
    fn default() -> Self {
        TpccReq {
            ty: NEW_ORDER,
            w: 1,
            d: 1,
            c_w: 1,
            c_d: 1,
            c_id: 1,
            by_last: false,
            c_last: [0; 16],
            c_last_len: 0,
            lines: [Line::default(); MAX_OL as usize],
            ol_cnt: 0,
            all_local: true,
            amount: 0,
            carrier: 1,
            threshold: 10,
            now_us: 0,
            history_key: 0,
            seq: 0,
        }
    }
}

impl TpccReq {
    pub fn c_last(&self) -> &[u8] {
        &self.c_last[..self.c_last_len]
    }
    pub fn lines(&self) -> &[Line] {
        &self.lines[..self.ol_cnt]
    }
}

pub struct Tpcc {
    pub cfg: TpccConfig,
    /// Home warehouse of each worker (1-based).
    homes: Vec<u32>,
    /// History row numbers, per worker.
    hist_seq: Vec<crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>>,
}

impl Tpcc {
    /// `homes[w]` is worker `w`'s home warehouse (1-based); see [`Tpcc::default_homes`].
    pub fn new(cfg: TpccConfig, homes: Vec<u32>) -> Result<Tpcc, Error> {
        cfg.check()?;
        if homes.is_empty() {
            return Err(Error::Config(
                "TPC-C needs at least one home warehouse".into(),
            ));
        }
        if let Some(h) = homes.iter().find(|&&h| h == 0 || h > cfg.warehouses) {
            return Err(Error::Config(format!(
                "home warehouse {h} does not exist (warehouses 1..={})",
                cfg.warehouses
            )));
        }
        let hist_seq = (0..homes.len()).map(|_| Default::default()).collect();
        Ok(Tpcc {
            cfg,
            homes,
            hist_seq,
        })
    }

    /// Makes each worker's Payments go on after the history rows `islands` hold (a run
    /// over a recovered database): a worker numbers its history rows in its own slot of
    /// its home warehouse, and would otherwise take numbers that are taken.
    pub fn continue_history(&self, islands: &[&islands::island::Island]) {
        let mut last: std::collections::HashMap<u64, u64> = Default::default();
        for island in islands {
            island
                .catalog()
                .table(schema::HISTORY)
                .for_each_row(|key, _, _| {
                    let prefix = key >> HIST_SEQ_BITS;
                    let seq = key & ((1 << HIST_SEQ_BITS) - 1);
                    let e = last.entry(prefix).or_insert(0);
                    *e = (*e).max(seq);
                });
        }
        for (worker, counter) in self.hist_seq.iter().enumerate() {
            let w = self.homes[worker % self.homes.len()];
            let slot = (worker as u64 % HIST_MAX_SLOT) + 1;
            let prefix = schema::history_key(w, slot, 0) >> HIST_SEQ_BITS;
            let seq = last.get(&prefix).copied().unwrap_or(0);
            counter.store(seq, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Worker w's home is warehouse `w mod W + 1`.
    pub fn default_homes(workers: usize, warehouses: u32) -> Vec<u32> {
        (0..workers)
            .map(|w| (w as u64 % u64::from(warehouses)) as u32 + 1)
            .collect()
    }

    fn other_warehouse(&self, rng: &mut FastRng, home: u32) -> u32 {
        let o = uniform(rng, 1, u64::from(self.cfg.warehouses) - 1) as u32;
        if o >= home {
            o + 1
        } else {
            o
        }
    }

    fn pick_customer(&self, rng: &mut FastRng, req: &mut TpccReq) {
        let n = u64::from(self.cfg.customers_per_district);
        req.by_last = rng.percent(60);
        if req.by_last {
            // Only names that the population can hold (all 1,000 at spec scale).
            let names = n.min(1000);
            let k = nurand(rng, 255, C_RUN_LAST, 0, names - 1);
            req.c_last_len = random::last_name(k, &mut req.c_last);
        } else {
            req.c_id = nurand(rng, 1023, C_ID, 1, n) as u32;
            req.c_last_len = 0;
        }
    }

    pub(crate) fn now_us() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as i64)
            .max(1)
    }
}

impl Workload for Tpcc {
    type Req = TpccReq;

    fn types(&self) -> Vec<&'static str> {
        TYPE_NAMES.to_vec()
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut TpccReq) -> usize {
        let w = self.homes[worker % self.homes.len()];
        let remote_ok = self.cfg.warehouses > 1 && !self.cfg.local_only;
        req.ty = self.cfg.mix.pick(rng.below(100) as u32);
        req.w = w;
        req.d = uniform(rng, 1, u64::from(DISTRICTS)) as u32;
        req.now_us = Tpcc::now_us();
        match req.ty {
            NEW_ORDER => {
                req.c_w = w;
                req.c_d = req.d;
                req.by_last = false;
                req.c_id = nurand(
                    rng,
                    1023,
                    C_ID,
                    1,
                    u64::from(self.cfg.customers_per_district),
                ) as u32;
                req.ol_cnt = uniform(rng, 5, u64::from(MAX_OL)) as usize;
                let rollback = rng.percent(1);
                req.all_local = true;
                for i in 0..req.ol_cnt {
                    let l = &mut req.lines[i];
                    l.i_id = nurand(rng, 8191, C_OL_I_ID, 1, u64::from(self.cfg.items)) as u32;
                    l.quantity = uniform(rng, 1, 10) as u32;
                    l.supply_w = if remote_ok && rng.percent(1) {
                        req.all_local = false;
                        self.other_warehouse(rng, w)
                    } else {
                        w
                    };
                }
                if rollback {
                    // An unused item id makes the last line fail (Clause 2.4.1.4).
                    req.lines[req.ol_cnt - 1].i_id = self.cfg.items + 1;
                }
            }
            PAYMENT => {
                req.amount = uniform(rng, 100, 500_000) as i64;
                if remote_ok && rng.percent(15) {
                    req.c_w = self.other_warehouse(rng, w);
                    req.c_d = uniform(rng, 1, u64::from(DISTRICTS)) as u32;
                } else {
                    req.c_w = w;
                    req.c_d = req.d;
                }
                self.pick_customer(rng, req);
                // Per worker, not per request object: a worker may keep
                // several requests in flight (islands), each with its own.
                let seq = self.hist_seq[worker % self.hist_seq.len()]
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                req.seq = seq;
                let slot = (worker as u64 % HIST_MAX_SLOT) + 1;
                req.history_key = schema::history_key(w, slot, seq & ((1 << HIST_SEQ_BITS) - 1));
            }
            ORDER_STATUS => {
                req.c_w = w;
                req.c_d = req.d;
                self.pick_customer(rng, req);
            }
            DELIVERY => {
                req.carrier = uniform(rng, 1, 10) as u32;
            }
            _ => {
                req.threshold = uniform(rng, 10, 20) as i32;
            }
        }
        req.ty
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a TpccReq) -> Result<(), Abort> {
        use std::hint::black_box;
        match req.ty {
            NEW_ORDER => txns::new_order(tx, &self.cfg, req).await.map(|o| {
                black_box(o);
            }),
            PAYMENT => txns::payment(tx, req).await.map(|o| {
                black_box(o);
            }),
            ORDER_STATUS => txns::order_status(tx, req).await.map(|o| {
                black_box(o);
            }),
            DELIVERY => txns::delivery(tx, req).await.map(|o| {
                black_box(o);
            }),
            _ => txns::stock_level(tx, req).await.map(|o| {
                black_box(o);
            }),
        }
    }
}

/// Which island holds a TPC-C row: warehouses are the sites, and every key
/// layout (see [`schema`]) carries its warehouse in known bits. ITEM is on
/// every island.
pub struct TpccRouter {
    /// `island_of_wh[w]` for warehouse `w` (1-based; index 0 unused).
    island_of_wh: Vec<u16>,
}

impl TpccRouter {
    /// `islands[i]` holds warehouses `ranges[i]` (1-based, half-open).
    pub fn new(ranges: &[std::ops::Range<u32>]) -> Result<TpccRouter, Error> {
        let max = ranges.iter().map(|r| r.end).max().unwrap_or(1);
        let mut island_of_wh = vec![u16::MAX; max as usize];
        for (i, r) in ranges.iter().enumerate() {
            for w in r.clone() {
                island_of_wh[w as usize] = i as u16;
            }
        }
        if let Some(w) = (1..max).find(|&w| island_of_wh[w as usize] == u16::MAX) {
            return Err(Error::Config(format!("warehouse {w} is held by no island")));
        }
        Ok(TpccRouter { island_of_wh })
    }

    #[inline]
    fn of(&self, w: u64) -> Option<u16> {
        // A key outside every range routes to island 0, whose index answers
        // "no such row" like any missing key.
        Some(*self.island_of_wh.get(w as usize).unwrap_or(&0))
    }
}

impl islands::route::Router for TpccRouter {
    fn island_of(&self, table: u16, key: u64) -> Option<u16> {
        use schema::*;
        let w = match table {
            WAREHOUSE => key,
            DISTRICT => key >> 4,
            CUSTOMER => key >> 20,
            HISTORY => key >> 48,
            NEW_ORDER | ORDERS => key >> 36,
            ORDER_LINE => key >> 40,
            STOCK => key >> 32,
            _ => return None,
        };
        self.of(w)
    }

    fn island_of_secondary(
        &self,
        table: u16,
        _index: islands::storage::SecondaryId,
        skey: u64,
    ) -> Option<u16> {
        use schema::*;
        match table {
            // by_last: dk << 32 | hash; by_customer: dk << 16 | c.
            CUSTOMER => self.of(skey >> 36),
            ORDERS => self.of(skey >> 20),
            _ => None,
        }
    }
}
