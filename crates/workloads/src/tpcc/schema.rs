//! The TPC-C schema (Clause 1.3): nine tables, their columns, indexes and keys.
//!
//! Representation choices (deviations of form, not of content):
//! - Money is `I64` in cents and rates (tax, discount) are `I64` in basis
//!   points (1/10,000), so sums are exact and the consistency conditions
//!   compare with `==`, not with a tolerance.
//! - NULL is 0: `O_CARRIER_ID` (valid carriers are 1..=10) and
//!   `OL_DELIVERY_D` (dates are microseconds since the Unix epoch, positive).
//! - Strings are fixed-length `Str(n)` of the spec's maximum length; they
//!   never contain a zero byte (the engine's string terminator).
//!
//! Keys are `u64`, packed from the spec's composite keys. Layout (bits, from
//! the most significant end), with the checked ranges in [`super::TpccConfig::check`]:
//!
//! | table      | index                | key                                              |
//! |------------|----------------------|--------------------------------------------------|
//! | warehouse  | hash                 | `w` (1..=65,535)                                 |
//! | district   | hash                 | `dk = w << 4 \| d` (d 1..=10), 20 bits           |
//! | customer   | hash                 | `dk << 16 \| c` (c 1..=65,535)                   |
//! | customer   | secondary `by_last`  | `dk << 32 \| fnv32(C_LAST)` (filter by C_LAST)   |
//! | history    | ordered              | `w << 48 \| slot << 36 \| seq` (slot 0: loader; worker i: i + 1 < 4,096; seq < 2^36) |
//! | new_order  | ordered              | `dk << 32 \| o` (o 1..2^32)                      |
//! | orders     | ordered              | `dk << 32 \| o`                                  |
//! | orders     | secondary `by_customer` | `dk << 16 \| c` (rows in o order: last = newest) |
//! | order_line | ordered              | `(dk << 32 \| o) << 4 \| ol` (ol 1..=15), 56 bits |
//! | item       | hash                 | `i` (1..=items)                                  |
//! | stock      | hash                 | `w << 32 \| i`                                   |

use islands::api::{SqlTable, Value};
use islands::storage::schema::SqlType;
use islands::storage::{PrimaryKind, RowRef, SecondaryId, TableDef, TableId};

use super::TpccConfig;

/// Declares a table's columns once: `COLUMNS` for the table definition and one
/// `Col` constant per column, numbered in declaration order (so they cannot
/// drift apart).
macro_rules! columns {
    ($m:ident { $($c:ident : $t:expr),* $(,)? }) => {
        #[allow(dead_code)]
        pub mod $m {
            use islands::storage::{Col, ColType};
            #[allow(non_camel_case_types, clippy::upper_case_acronyms, clippy::enum_variant_names)]
            #[repr(u16)]
            enum I { $($c),* }
            $(pub const $c: Col = Col(I::$c as u16);)*
            pub const COLUMNS: &[(&str, ColType)] = &[$((stringify!($c), $t)),*];
        }
    };
}

columns!(wh {
    W_ID: ColType::I32,
    W_NAME: ColType::Str(10),
    W_STREET_1: ColType::Str(20),
    W_STREET_2: ColType::Str(20),
    W_CITY: ColType::Str(20),
    W_STATE: ColType::Str(2),
    W_ZIP: ColType::Str(9),
    W_TAX: ColType::I64,
    W_YTD: ColType::I64,
});

columns!(dist {
    D_ID: ColType::I32,
    D_W_ID: ColType::I32,
    D_NAME: ColType::Str(10),
    D_STREET_1: ColType::Str(20),
    D_STREET_2: ColType::Str(20),
    D_CITY: ColType::Str(20),
    D_STATE: ColType::Str(2),
    D_ZIP: ColType::Str(9),
    D_TAX: ColType::I64,
    D_YTD: ColType::I64,
    D_NEXT_O_ID: ColType::I32,
});

columns!(cust {
    C_ID: ColType::I32,
    C_D_ID: ColType::I32,
    C_W_ID: ColType::I32,
    C_FIRST: ColType::Str(16),
    C_MIDDLE: ColType::Str(2),
    C_LAST: ColType::Str(16),
    C_STREET_1: ColType::Str(20),
    C_STREET_2: ColType::Str(20),
    C_CITY: ColType::Str(20),
    C_STATE: ColType::Str(2),
    C_ZIP: ColType::Str(9),
    C_PHONE: ColType::Str(16),
    C_SINCE: ColType::I64,
    C_CREDIT: ColType::Str(2),
    C_CREDIT_LIM: ColType::I64,
    C_DISCOUNT: ColType::I64,
    C_BALANCE: ColType::I64,
    C_YTD_PAYMENT: ColType::I64,
    C_PAYMENT_CNT: ColType::I32,
    C_DELIVERY_CNT: ColType::I32,
    C_DATA: ColType::Str(500),
});

columns!(hist {
    H_C_ID: ColType::I32,
    H_C_D_ID: ColType::I32,
    H_C_W_ID: ColType::I32,
    H_D_ID: ColType::I32,
    H_W_ID: ColType::I32,
    H_DATE: ColType::I64,
    H_AMOUNT: ColType::I64,
    H_DATA: ColType::Str(24),
});

columns!(no {
    NO_O_ID: ColType::I32,
    NO_D_ID: ColType::I32,
    NO_W_ID: ColType::I32,
});

columns!(ord {
    O_ID: ColType::I32,
    O_D_ID: ColType::I32,
    O_W_ID: ColType::I32,
    O_C_ID: ColType::I32,
    O_ENTRY_D: ColType::I64,
    O_CARRIER_ID: ColType::I32,
    O_OL_CNT: ColType::I32,
    O_ALL_LOCAL: ColType::I32,
});

columns!(ol {
    OL_O_ID: ColType::I32,
    OL_D_ID: ColType::I32,
    OL_W_ID: ColType::I32,
    OL_NUMBER: ColType::I32,
    OL_I_ID: ColType::I32,
    OL_SUPPLY_W_ID: ColType::I32,
    OL_DELIVERY_D: ColType::I64,
    OL_QUANTITY: ColType::I32,
    OL_AMOUNT: ColType::I64,
    OL_DIST_INFO: ColType::Str(24),
});

columns!(item {
    I_ID: ColType::I32,
    I_IM_ID: ColType::I32,
    I_NAME: ColType::Str(24),
    I_PRICE: ColType::I64,
    I_DATA: ColType::Str(50),
});

columns!(stock {
    S_I_ID: ColType::I32,
    S_W_ID: ColType::I32,
    S_QUANTITY: ColType::I32,
    S_DIST_01: ColType::Str(24),
    S_DIST_02: ColType::Str(24),
    S_DIST_03: ColType::Str(24),
    S_DIST_04: ColType::Str(24),
    S_DIST_05: ColType::Str(24),
    S_DIST_06: ColType::Str(24),
    S_DIST_07: ColType::Str(24),
    S_DIST_08: ColType::Str(24),
    S_DIST_09: ColType::Str(24),
    S_DIST_10: ColType::Str(24),
    S_YTD: ColType::I64,
    S_ORDER_CNT: ColType::I32,
    S_REMOTE_CNT: ColType::I32,
    S_DATA: ColType::Str(50),
});

/// `S_DIST_xx` of district `d` (1..=10).
pub fn s_dist(d: u32) -> islands::storage::Col {
    debug_assert!((1..=DISTRICTS).contains(&d));
    islands::storage::Col(stock::S_DIST_01.0 + (d - 1) as u16)
}

pub const WAREHOUSE: TableId = 0;
pub const DISTRICT: TableId = 1;
pub const CUSTOMER: TableId = 2;
pub const HISTORY: TableId = 3;
pub const NEW_ORDER: TableId = 4;
pub const ORDERS: TableId = 5;
pub const ORDER_LINE: TableId = 6;
pub const ITEM: TableId = 7;
pub const STOCK: TableId = 8;

/// Names of the secondary indexes; their ids are their declaration order.
pub const CUSTOMER_BY_LAST_NAME: &str = "by_last";
pub const CUSTOMER_BY_LAST: SecondaryId = SecondaryId(0);
pub const ORDERS_BY_CUSTOMER_NAME: &str = "by_customer";
pub const ORDERS_BY_CUSTOMER: SecondaryId = SecondaryId(0);

pub const DISTRICTS: u32 = 10;
/// Most order lines per order (Clause 2.4.1.3: 5..=15).
pub const MAX_OL: u32 = 15;
pub const MAX_WAREHOUSES: u32 = u16::MAX as u32;
pub const MAX_CUSTOMERS: u32 = u16::MAX as u32;
/// History keys: sequence numbers per (warehouse, slot) below 2^36.
pub const HIST_SEQ_BITS: u32 = 36;
/// History keys: slot 0 is the loader, worker i uses slot i + 1.
pub const HIST_MAX_SLOT: u64 = (1 << 12) - 1;

#[inline]
pub fn district_key(w: u32, d: u32) -> u64 {
    debug_assert!(w <= MAX_WAREHOUSES && d < 16);
    (u64::from(w) << 4) | u64::from(d)
}

#[inline]
pub fn customer_key(w: u32, d: u32, c: u32) -> u64 {
    debug_assert!(c <= MAX_CUSTOMERS);
    (district_key(w, d) << 16) | u64::from(c)
}

#[inline]
pub fn order_key(w: u32, d: u32, o: u32) -> u64 {
    (district_key(w, d) << 32) | u64::from(o)
}

#[inline]
pub fn order_line_key(w: u32, d: u32, o: u32, ol: u32) -> u64 {
    debug_assert!(ol < 16);
    (order_key(w, d, o) << 4) | u64::from(ol)
}

#[inline]
pub fn stock_key(w: u32, i: u32) -> u64 {
    (u64::from(w) << 32) | u64::from(i)
}

#[inline]
pub fn history_key(w: u32, slot: u64, seq: u64) -> u64 {
    debug_assert!(slot <= HIST_MAX_SLOT && seq < 1 << HIST_SEQ_BITS);
    (u64::from(w) << 48) | (slot << HIST_SEQ_BITS) | seq
}

/// FNV-1a, folded to 32 bits: the last-name part of the `by_last` key.
#[inline]
pub fn name_hash(s: &[u8]) -> u64 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in s {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    u64::from(h)
}

/// `by_last` key of a customer named `last` in district (w, d).
#[inline]
pub fn last_name_key(w: u32, d: u32, last: &[u8]) -> u64 {
    (district_key(w, d) << 32) | name_hash(last)
}

fn customer_by_last(r: &RowRef) -> u64 {
    last_name_key(
        r.i32(cust::C_W_ID) as u32,
        r.i32(cust::C_D_ID) as u32,
        r.str(cust::C_LAST),
    )
}

fn orders_by_customer(r: &RowRef) -> u64 {
    customer_key(
        r.i32(ord::O_W_ID) as u32,
        r.i32(ord::O_D_ID) as u32,
        r.i32(ord::O_C_ID) as u32,
    )
}

/// The tables, in `TableId` order, sized for `cfg`. Hash tables are sized
/// exactly (their index is allocated up front); the insert-heavy tables are
/// ordered, whose arenas take memory only as rows arrive, so their capacity
/// is the run's limit, not its footprint.
/// Rows of each table of [`tables`] (in its order) on an island that holds
/// `warehouses` of the database's warehouses, once the initial population
/// is loaded (Clause 4.3.3.1; items are loaded on every island). For
/// [`TableDef::memory_bytes`]: what an island needs before its run starts.
pub fn rows_after_load(cfg: &TpccConfig, warehouses: u32) -> Vec<u64> {
    let w = u64::from(warehouses);
    let districts = w * u64::from(DISTRICTS);
    let orders = districts * u64::from(cfg.initial_orders());
    let undelivered = districts * u64::from(cfg.initial_orders() - cfg.first_undelivered() + 1);
    let customers = districts * u64::from(cfg.customers_per_district);
    vec![
        w,
        districts,
        customers,
        customers,
        undelivered,
        orders,
        // 5 to 15 lines an order, 10 on average.
        orders * 10,
        u64::from(cfg.items),
        w * u64::from(cfg.items),
    ]
}

/// About how many bytes the tables grow by per NewOrder while a run goes:
/// an order, a new-order and ten order lines on average, and the history
/// row of the Payment that comes with it in the mix. A run's data grows by
/// this much per NewOrder, up to `--max-orders-per-district` per district.
pub fn bytes_per_new_order(cfg: &TpccConfig, concurrent: bool) -> u64 {
    let t = tables(cfg);
    let row = |id: TableId| t[id as usize].bytes_per_row(concurrent);
    row(ORDERS) + row(NEW_ORDER) + 10 * row(ORDER_LINE) + row(HISTORY)
}

pub fn tables(cfg: &TpccConfig) -> Vec<TableDef> {
    let w = u64::from(cfg.warehouses);
    let districts = w * u64::from(DISTRICTS);
    let customers = districts * u64::from(cfg.customers_per_district);
    let orders = districts * u64::from(cfg.max_orders_per_district);
    vec![
        // Warehouses, districts, customers, items and stock are loaded once
        // and only updated (never a new key or a new last name): their scans
        // and misses need no phantom validation.
        TableDef::new("warehouse", wh::COLUMNS, w, PrimaryKind::Hash).with_fixed_keys(),
        TableDef::new("district", dist::COLUMNS, districts, PrimaryKind::Hash).with_fixed_keys(),
        TableDef::new("customer", cust::COLUMNS, customers, PrimaryKind::Hash)
            .with_secondary(CUSTOMER_BY_LAST_NAME, customer_by_last)
            .with_fixed_keys(),
        TableDef::new(
            "history",
            hist::COLUMNS,
            customers + cfg.history_capacity(),
            PrimaryKind::Ordered,
        ),
        TableDef::new("new_order", no::COLUMNS, orders, PrimaryKind::Ordered),
        TableDef::new("orders", ord::COLUMNS, orders, PrimaryKind::Ordered)
            .with_secondary(ORDERS_BY_CUSTOMER_NAME, orders_by_customer),
        TableDef::new(
            "order_line",
            ol::COLUMNS,
            orders * u64::from(MAX_OL),
            PrimaryKind::Ordered,
        ),
        TableDef::new(
            "item",
            item::COLUMNS,
            u64::from(cfg.items),
            PrimaryKind::Hash,
        )
        .with_fixed_keys(),
        TableDef::new(
            "stock",
            stock::COLUMNS,
            w * u64::from(cfg.items),
            PrimaryKind::Hash,
        )
        .with_fixed_keys(),
    ]
}

/// The SQL type of a stored TPC-C column: dates (microseconds since the
/// epoch) are timestamps, money and rates `int8`, the rest as stored.
fn sql_type(name: &str, ty: islands::storage::ColType) -> SqlType {
    let date = name.ends_with("_DATE") || name.ends_with("_D") || name == "C_SINCE";
    if date && ty == islands::storage::ColType::I64 {
        SqlType::Timestamp
    } else {
        SqlType::of(ty)
    }
}

/// A TPC-C table as SQL sees it: every column under its spec name in lower
/// case (`w_id`, `d_next_o_id`, ...), in the spec's order; the key columns
/// (`key`: stored name, shift, bits; most significant first) pack into the
/// 64-bit key as this module's `*_key` functions do.
fn view(columns: &[(&str, islands::storage::ColType)], key: &[(&str, u8, u8)]) -> SqlTable {
    let mut v = SqlTable::new();
    for &(stored, shift, bits) in key {
        let ty = columns
            .iter()
            .find(|(n, _)| *n == stored)
            .map_or(SqlType::Int4, |&(n, t)| sql_type(n, t));
        v = v.key_column_stored(&stored.to_lowercase(), ty, shift, bits, stored);
    }
    for &(name, ty) in columns {
        if !key.iter().any(|k| k.0 == name) {
            v = v.column(&name.to_lowercase(), sql_type(name, ty), name);
        }
    }
    let order: Vec<String> = columns.iter().map(|(n, _)| n.to_lowercase()).collect();
    let order: Vec<&str> = order.iter().map(String::as_str).collect();
    v.column_order(&order)
}

fn int_arg(v: &Value) -> Option<u32> {
    v.as_int().and_then(|i| u32::try_from(i).ok())
}

/// The SQL views of the tables of [`tables`], in `TableId` order: rows of
/// one warehouse lie on one island (key prefix `w_id`); ITEM is on every
/// island; HISTORY has no key SQL names (rows are read, not written).
pub fn sql_views(cfg: &TpccConfig) -> Vec<SqlTable> {
    let w = u64::from(cfg.warehouses);
    let by_w = |v: SqlTable| v.local_prefix(1).domain(1, w);
    vec![
        by_w(view(wh::COLUMNS, &[("W_ID", 0, 16)])),
        by_w(view(dist::COLUMNS, &[("D_W_ID", 4, 16), ("D_ID", 0, 4)])),
        by_w(view(
            cust::COLUMNS,
            &[("C_W_ID", 20, 16), ("C_D_ID", 16, 4), ("C_ID", 0, 16)],
        ))
        .secondary(CUSTOMER_BY_LAST, &["c_w_id", "c_d_id", "c_last"], |v| {
            let (w, d) = (int_arg(&v[0])?, int_arg(&v[1])?);
            (w <= MAX_WAREHOUSES && d < 16)
                .then(|| last_name_key(w, d, v[2].as_str().unwrap_or("").as_bytes()))
        }),
        by_w(
            SqlTable::new()
                .hidden_key("h_w_id", 48, 16)
                .hidden_key("h_seq", 0, 48),
        )
        .columns_of(&view(hist::COLUMNS, &[])),
        by_w(view(
            no::COLUMNS,
            &[("NO_W_ID", 36, 16), ("NO_D_ID", 32, 4), ("NO_O_ID", 0, 32)],
        )),
        by_w(view(
            ord::COLUMNS,
            &[("O_W_ID", 36, 16), ("O_D_ID", 32, 4), ("O_ID", 0, 32)],
        ))
        .secondary(ORDERS_BY_CUSTOMER, &["o_w_id", "o_d_id", "o_c_id"], |v| {
            let (w, d, c) = (int_arg(&v[0])?, int_arg(&v[1])?, int_arg(&v[2])?);
            (w <= MAX_WAREHOUSES && d < 16 && c <= MAX_CUSTOMERS).then(|| customer_key(w, d, c))
        }),
        by_w(view(
            ol::COLUMNS,
            &[
                ("OL_W_ID", 40, 16),
                ("OL_D_ID", 36, 4),
                ("OL_O_ID", 4, 32),
                ("OL_NUMBER", 0, 4),
            ],
        )),
        view(item::COLUMNS, &[("I_ID", 0, 32)])
            .local_prefix(0)
            .domain(1, u64::from(cfg.items)),
        by_w(view(
            stock::COLUMNS,
            &[("S_W_ID", 32, 16), ("S_I_ID", 0, 32)],
        )),
    ]
}
