//! Ordered-index candidates on TPC-C's access pattern, outside the engine.
//!
//! `cargo bench -p islands --bench ordered [-- ROUNDS]` prints one line per
//! (candidate, phase): million operations per second over all threads.
//!
//! The pattern is TPC-C's, on one warehouse of ten districts: keys are the
//! engine's (`key_of(k)` = `k << 64` for a primary key, `pair(s, p)` for a
//! secondary entry), and each thread owns five districts, as the workers of
//! one island split the warehouse's districts between them.
//! - `load`: appends per district (order, ten order lines, a new order),
//!   monotone keys within a district's prefix;
//! - `get`: point gets of order lines;
//! - `newest`: a reverse scan, limit 1, of a district's orders (the newest
//!   order, as Order-Status and the `by_customer` lookup do);
//! - `lines`: a forward scan of one order's lines (ten entries);
//! - `by_name`: a secondary scan of customers by last name (about three
//!   entries, keys `pair(dk << 32 | name, customer)`);
//! - `mix`: New-Order and Delivery together: per step, one order, ten lines
//!   and one new order appended, the oldest new order found by a forward scan
//!   (limit 1) and removed, one `by_name` scan and one `newest` scan.
//!
//! Shared candidates run with two threads (an island of two workers): the
//! crossbeam skip list (`SkipMap`, bare and as the engine wraps it), the
//! engine's B+tree with optimistic lock coupling (`olc-btree`),
//! `scc::TreeIndex` (a B+tree whose reads
//! take no lock) and `congee` (an ART with optimistic lock coupling; its keys
//! are `u64`, so it runs the phases whose keys fit: primary keys shifted
//! back down, no secondary pairs, and it has no reverse scan). Owned
//! candidates run with one thread (a single-worker island's index): `BTreeMap`
//! with the engine's `u128` keys, and with primary keys packed into a `u64`.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::ops::Bound;
use std::sync::Barrier;
use std::time::Instant;

use islands::storage::ordered::{Kind, OrderedIndex};

const DISTRICTS: u64 = 10;
const ORDERS: u64 = 3_000;
const NEW_ORDERS: u64 = 900;
const CUSTOMERS: u64 = 3_000;
const NAMES: u64 = 1_000;
const LINES: u64 = 10;
const OPS: u64 = 200_000;
const MIX_STEPS: u64 = 20_000;

fn key_of(k: u64) -> u128 {
    (k as u128) << 64
}
fn pair(s: u64, p: u64) -> u128 {
    ((s as u128) << 64) | p as u128
}
fn dk(d: u64) -> u64 {
    (1 << 4) | (d + 1)
}
fn order(d: u64, o: u64) -> u64 {
    dk(d) << 32 | o
}
fn line(d: u64, o: u64, l: u64) -> u64 {
    order(d, o) << 4 | l
}
fn name_key(d: u64, n: u64) -> u64 {
    dk(d) << 32 | (n.wrapping_mul(0x9E37_79B9) & 0xFFFF_FFFF)
}

/// What each candidate offers: the engine's `OrderedIndex` operations.
trait Ix: Sync {
    fn name(&self) -> &'static str;
    /// Whether the candidate takes keys that do not fit a `u64`
    /// (secondary pairs) and scans in reverse.
    fn full(&self) -> bool {
        true
    }
    fn get(&self, k: u128) -> Option<u64>;
    fn insert(&self, k: u128, v: u64);
    fn remove(&self, k: u128) -> bool;
    /// Visits `[lo, hi]` up to `limit` entries; returns (count, sum of values).
    fn scan(&self, lo: u128, hi: u128, rev: bool, limit: usize) -> (usize, u64);
}

struct Skip(crossbeam_skiplist::SkipMap<u128, u64>);
impl Ix for Skip {
    fn name(&self) -> &'static str {
        "skiplist"
    }
    fn get(&self, k: u128) -> Option<u64> {
        self.0.get(&k).map(|e| *e.value())
    }
    fn insert(&self, k: u128, v: u64) {
        self.0.get_or_insert(k, v);
    }
    fn remove(&self, k: u128) -> bool {
        self.0.remove(&k).is_some()
    }
    fn scan(&self, lo: u128, hi: u128, rev: bool, limit: usize) -> (usize, u64) {
        let r = self.0.range((Bound::Included(lo), Bound::Included(hi)));
        let f = |(n, s): (usize, u64), v: u64| (n + 1, s.wrapping_add(v));
        if rev {
            r.rev().take(limit).map(|e| *e.value()).fold((0, 0), f)
        } else {
            r.take(limit).map(|e| *e.value()).fold((0, 0), f)
        }
    }
}

/// The engine's own index, of each kind: the skip list, the B+tree with
/// optimistic lock coupling (`storage/btree.rs`), the owned
/// `BTreeMap<u128, _>`.
struct Engine(OrderedIndex, &'static str);
impl Ix for Engine {
    fn name(&self) -> &'static str {
        self.1
    }
    fn get(&self, k: u128) -> Option<u64> {
        self.0.get(k)
    }
    fn insert(&self, k: u128, v: u64) {
        self.0.insert(k, v);
    }
    fn remove(&self, k: u128) -> bool {
        self.0.remove(k)
    }
    fn scan(&self, lo: u128, hi: u128, rev: bool, limit: usize) -> (usize, u64) {
        let (mut n, mut s) = (0, 0u64);
        self.0.scan(lo, hi, rev, |_, v| {
            n += 1;
            s = s.wrapping_add(v);
            n < limit
        });
        (n, s)
    }
}

/// `scc::TreeIndex` as it comes, reverse scans by `range(..).rev()`.
struct Scc(scc::TreeIndex<u128, u64>);
impl Ix for Scc {
    fn name(&self) -> &'static str {
        "scc-rev"
    }
    fn get(&self, k: u128) -> Option<u64> {
        self.0.peek_with(&k, |_, v| *v)
    }
    fn insert(&self, k: u128, v: u64) {
        let _ = self.0.insert_sync(k, v);
    }
    fn remove(&self, k: u128) -> bool {
        self.0.remove_sync(&k)
    }
    fn scan(&self, lo: u128, hi: u128, rev: bool, limit: usize) -> (usize, u64) {
        let g = scc::Guard::new();
        let r = self.0.range(lo..=hi, &g);
        let f = |(n, s): (usize, u64), v: u64| (n + 1, s.wrapping_add(v));
        if rev {
            r.rev().take(limit).map(|(_, v)| *v).fold((0, 0), f)
        } else {
            r.take(limit).map(|(_, v)| *v).fold((0, 0), f)
        }
    }
}

/// `congee` on primary keys only: `k >> 64` is the engine's `u64` key.
struct Art(congee::U64Congee<usize>);
impl Ix for Art {
    fn name(&self) -> &'static str {
        "congee-u64"
    }
    fn full(&self) -> bool {
        false
    }
    fn get(&self, k: u128) -> Option<u64> {
        let g = congee::epoch::pin();
        self.0.get((k >> 64) as u64, &g).map(|v| v as u64)
    }
    fn insert(&self, k: u128, v: u64) {
        let g = congee::epoch::pin();
        let _ = self.0.insert((k >> 64) as u64, v as usize, &g);
    }
    fn remove(&self, k: u128) -> bool {
        let g = congee::epoch::pin();
        self.0.remove((k >> 64) as u64, &g).is_some()
    }
    fn scan(&self, lo: u128, hi: u128, _rev: bool, limit: usize) -> (usize, u64) {
        let g = congee::epoch::pin();
        let mut buf = [([0u8; 8], 0usize); 16];
        let limit = limit.min(buf.len());
        // congee's end bound is exclusive.
        let end = ((hi >> 64) as u64).saturating_add(1);
        let n = self.0.range((lo >> 64) as u64, end, &mut buf[..limit], &g);
        (n, buf[..n].iter().map(|(_, v)| *v as u64).sum())
    }
}

/// A `BTreeMap` used by one thread only (the bench runs owned candidates
/// with one thread), keyed by `u128` or by a packed `u64`.
struct Owned<K>(UnsafeCell<BTreeMap<K, u64>>, &'static str, fn(u128) -> K);
// SAFETY: owned candidates run on exactly one thread (see `run`).
unsafe impl<K> Sync for Owned<K> {}
impl<K: Ord + Copy> Owned<K> {
    #[allow(clippy::mut_from_ref)]
    fn m(&self) -> &mut BTreeMap<K, u64> {
        // SAFETY: one thread; no reference outlives a call.
        unsafe { &mut *self.0.get() }
    }
}
impl<K: Ord + Copy> Ix for Owned<K> {
    fn name(&self) -> &'static str {
        self.1
    }
    fn full(&self) -> bool {
        std::mem::size_of::<K>() == 16
    }
    fn get(&self, k: u128) -> Option<u64> {
        self.m().get(&(self.2)(k)).copied()
    }
    fn insert(&self, k: u128, v: u64) {
        self.m().entry((self.2)(k)).or_insert(v);
    }
    fn remove(&self, k: u128) -> bool {
        self.m().remove(&(self.2)(k)).is_some()
    }
    fn scan(&self, lo: u128, hi: u128, rev: bool, limit: usize) -> (usize, u64) {
        let r = self.m().range((self.2)(lo)..=(self.2)(hi));
        let f = |(n, s): (usize, u64), v: u64| (n + 1, s.wrapping_add(v));
        if rev {
            r.rev().take(limit).map(|(_, v)| *v).fold((0, 0), f)
        } else {
            r.take(limit).map(|(_, v)| *v).fold((0, 0), f)
        }
    }
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The four indexes of the pattern: orders, order lines, new orders and the
/// customers' `by_name` secondary.
struct Tables<I> {
    orders: I,
    lines: I,
    new_orders: I,
    by_name: I,
}

/// Thread CPU time, in seconds: the machine is shared, so a phase is judged
/// by the CPU its threads spent rather than by the wall clock alone.
fn cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Runs `f(thread, districts)` on `threads` threads at once; returns the
/// wall-clock seconds and the CPU seconds of all threads.
fn run<I: Ix>(
    t: &Tables<I>,
    threads: u64,
    f: impl Fn(&Tables<I>, u64, &[u64]) + Sync,
) -> (f64, f64) {
    let barrier = Barrier::new(threads as usize + 1);
    let (start, cpu) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|th| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    let ds: Vec<u64> = (0..DISTRICTS).filter(|d| d % threads == th).collect();
                    barrier.wait();
                    let c = cpu_secs();
                    f(t, th, &ds);
                    cpu_secs() - c
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let cpu: f64 = hs.into_iter().map(|h| h.join().unwrap_or(f64::NAN)).sum();
        (start, cpu)
    });
    (start.elapsed().as_secs_f64(), cpu)
}

/// Million operations per wall-clock second over all threads, and per CPU
/// second (what one core does).
fn report(name: &str, phase: &str, ops: u64, (wall, cpu): (f64, f64)) {
    let (w, c) = (ops as f64 / wall / 1e6, ops as f64 / cpu / 1e6);
    println!("{name:<12} {phase:<8} {w:>8.2} Mops/s wall {c:>8.2} Mops/cpu-s");
}

fn bench<I: Ix>(make: impl Fn() -> I, threads: u64) {
    let t = Tables {
        orders: make(),
        lines: make(),
        new_orders: make(),
        by_name: make(),
    };
    let name = t.orders.name();
    let full = t.orders.full();
    let per_thread_districts = DISTRICTS / threads;
    // load: appends per district, districts interleaved as a worker's
    // New-Orders would.
    let secs = run(&t, threads, |t, _, ds| {
        for o in 1..=ORDERS {
            for &d in ds {
                t.orders.insert(key_of(order(d, o)), o);
                for l in 1..=LINES {
                    t.lines.insert(key_of(line(d, o, l)), l);
                }
                if o > ORDERS - NEW_ORDERS {
                    t.new_orders.insert(key_of(order(d, o)), o);
                }
            }
        }
        if full {
            for &d in ds {
                for c in 1..=CUSTOMERS {
                    t.by_name
                        .insert(pair(name_key(d, c % NAMES), dk(d) << 16 | c), c);
                }
            }
        }
    });
    let loaded = DISTRICTS * (ORDERS * (2 + LINES) - (ORDERS - NEW_ORDERS));
    report(name, "load", loaded, secs);

    let per = OPS / threads;
    let secs = run(&t, threads, |t, th, ds| {
        let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ (th + 1));
        for _ in 0..per {
            let d = ds[r.below(per_thread_districts) as usize];
            let k = key_of(line(d, 1 + r.below(ORDERS), 1 + r.below(LINES)));
            black_box(t.lines.get(k));
        }
    });
    report(name, "get", OPS, secs);

    if full {
        let secs = run(&t, threads, |t, th, ds| {
            let mut r = Rng(0x1234_5678 ^ (th + 1));
            for _ in 0..per {
                let d = ds[r.below(per_thread_districts) as usize];
                let (lo, hi) = (key_of(order(d, 0)), key_of(order(d, u32::MAX as u64)));
                black_box(t.orders.scan(lo, hi, true, 1));
            }
        });
        report(name, "newest", OPS, secs);
    }

    let secs = run(&t, threads, |t, th, ds| {
        let mut r = Rng(0xDEAD_BEEF ^ (th + 1));
        for _ in 0..per {
            let d = ds[r.below(per_thread_districts) as usize];
            let o = 1 + r.below(ORDERS);
            let (lo, hi) = (key_of(line(d, o, 0)), key_of(line(d, o, 15)));
            black_box(t.lines.scan(lo, hi, false, 16));
        }
    });
    report(name, "lines", OPS, secs);

    if full {
        let secs = run(&t, threads, |t, th, ds| {
            let mut r = Rng(0xC0FF_EE00 ^ (th + 1));
            for _ in 0..per {
                let d = ds[r.below(per_thread_districts) as usize];
                let s = name_key(d, r.below(NAMES));
                black_box(t.by_name.scan(pair(s, 0), pair(s, u64::MAX), false, 16));
            }
        });
        report(name, "by_name", OPS, secs);
    }

    // mix: New-Order and Delivery per district, with Payment's and
    // Order-Status's lookups.
    let steps = MIX_STEPS / threads;
    let secs = run(&t, threads, |t, th, ds| {
        let mut r = Rng(0xABCD_EF01 ^ (th + 1));
        for i in 0..steps {
            let d = ds[(i % per_thread_districts) as usize];
            let o = ORDERS + 1 + i / per_thread_districts;
            t.orders.insert(key_of(order(d, o)), o);
            for l in 1..=LINES {
                t.lines.insert(key_of(line(d, o, l)), l);
            }
            t.new_orders.insert(key_of(order(d, o)), o);
            let (lo, hi) = (key_of(order(d, 0)), key_of(order(d, u32::MAX as u64)));
            let (n, oldest) = t.new_orders.scan(lo, hi, false, 1);
            if n == 1 {
                t.new_orders.remove(key_of(order(d, oldest)));
            }
            if full {
                let s = name_key(d, r.below(NAMES));
                black_box(t.by_name.scan(pair(s, 0), pair(s, u64::MAX), false, 16));
                black_box(t.orders.scan(lo, hi, true, 1));
            }
        }
    });
    let per_step = if full {
        1 + LINES + 1 + 2 + 2
    } else {
        1 + LINES + 1 + 2
    };
    report(name, "mix", MIX_STEPS * per_step, secs);
}

fn main() {
    // `cargo bench` passes `--bench`; a number among the arguments is the
    // number of rounds.
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1);
    // `scc-rev` (the crate's own reverse range) walks from the tree's end:
    // only with `--scc-rev`, as it takes minutes.
    let scc_rev = std::env::args().any(|a| a == "--scc-rev");
    for round in 0..rounds {
        println!("# round {round}: shared candidates, 2 threads");
        bench(|| Skip(crossbeam_skiplist::SkipMap::new()), 2);
        bench(
            || Engine(OrderedIndex::of(Kind::SkipList), "engine-skip"),
            2,
        );
        bench(|| Engine(OrderedIndex::of(Kind::BTree), "olc-btree"), 2);
        if scc_rev {
            bench(|| Scc(scc::TreeIndex::new()), 2);
        }
        bench(|| Art(congee::U64Congee::new()), 2);
        println!("# round {round}: owned candidates, 1 thread");
        bench(|| Engine(OrderedIndex::new(false), "btree-u128"), 1);
        bench(
            || {
                Owned(UnsafeCell::new(BTreeMap::new()), "btree-u64", |k| {
                    (k >> 64) as u64
                })
            },
            1,
        );
        if scc_rev {
            bench(|| Scc(scc::TreeIndex::new()), 1);
        }
    }
}
