//! A transport that loses, duplicates, delays and reorders batches: the
//! in-process transport with seeded faults, for tests of two-phase commit
//! through the real engine; and [`Lossy`], any transport with the batches a
//! test picks lost and the islands it says down reported down.
//!
//! Faults act on whole batches (a batch is what one worker sends one other
//! in one round); a delayed batch is overtaken by later ones, which is how
//! reordering happens. The seed is printed by the tests that use it, so a
//! failure replays.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::proc::rng::FastRng;
use crate::route::IslandId;
use crate::transport::{Endpoint, Full, InProc, Transport};

/// Fault rates, in percent of batches sent.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub drop_pct: u32,
    pub duplicate_pct: u32,
    pub delay_pct: u32,
    /// A delayed batch arrives after up to this long.
    pub max_delay: Duration,
}

impl Faults {
    /// No random faults (for deterministic ones, see [`FaultyTransport::lose_once`]).
    pub const NONE: Faults = Faults {
        drop_pct: 0,
        duplicate_pct: 0,
        delay_pct: 0,
        max_delay: Duration::from_micros(1),
    };
}

/// A delayed batch: due time, sender, receiver, bytes.
type Delayed = (Instant, Endpoint, Endpoint, Vec<u8>);

/// Picks batches by their bytes: the one [`FaultyTransport::lose_once`]
/// loses, those [`FaultyTransport::copy_matching`] keeps a copy of.
type Pick = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// A kept copy: sender, receiver, bytes.
type Kept = (Endpoint, Endpoint, Vec<u8>);

/// See the module documentation.
pub struct FaultyTransport {
    inner: InProc,
    faults: Faults,
    rng: Mutex<FastRng>,
    delayed: Mutex<Vec<Delayed>>,
    lose_once: Mutex<Option<Pick>>,
    /// [`FaultyTransport::copy_matching`]: what to copy, and the copies kept.
    copies: Mutex<(Option<Pick>, Vec<Kept>)>,
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    pub delayed_batches: AtomicU64,
}

impl FaultyTransport {
    pub fn new(endpoints: usize, depth: usize, faults: Faults, seed: u64) -> FaultyTransport {
        FaultyTransport {
            inner: InProc::new(endpoints, depth),
            faults,
            rng: Mutex::new(FastRng::new(seed)),
            delayed: Mutex::new(Vec::new()),
            lose_once: Mutex::new(None),
            copies: Mutex::new((None, Vec::new())),
            dropped: AtomicU64::new(0),
            duplicated: AtomicU64::new(0),
            delayed_batches: AtomicU64::new(0),
        }
    }

    /// Besides the random faults, loses the first batch for which `pick`
    /// holds (a deterministic fault for one scenario).
    pub fn lose_once(&self, pick: impl Fn(&[u8]) -> bool + Send + Sync + 'static) {
        *self.lose_once.lock() = Some(Box::new(pick));
    }

    /// Besides the random faults, keeps a copy of every batch for which
    /// `pick` holds, for [`FaultyTransport::redeliver_copies`]: a
    /// deterministic duplicate whose original was held back (the random
    /// faults' duplicate, delayed up to `max_delay`).
    pub fn copy_matching(&self, pick: impl Fn(&[u8]) -> bool + Send + Sync + 'static) {
        *self.copies.lock() = (Some(Box::new(pick)), Vec::new());
    }

    /// Delivers the copies kept so far, in the order they were sent, and
    /// stops copying; returns how many. Like a delayed batch, a copy may
    /// arrive up to `max_delay` after it was sent, not later: the engine
    /// relies on that bound ([`Transport::redelivery_window`]), so a test
    /// that redelivers later must say so with a larger `max_delay`.
    pub fn redeliver_copies(&self) -> usize {
        let copies = std::mem::take(&mut *self.copies.lock()).1;
        let n = copies.len();
        for (from, to, batch) in copies {
            self.inner
                .send(from, to, batch)
                .expect("room in the mailbox for a redelivered copy");
        }
        n
    }
}

impl Transport for FaultyTransport {
    fn bell(&self, me: Endpoint) -> &crate::transport::Bell {
        self.inner.bell(me)
    }

    fn send(&self, from: Endpoint, to: Endpoint, batch: Vec<u8>) -> Result<(), Full> {
        {
            let mut once = self.lose_once.lock();
            if once.as_ref().is_some_and(|pick| pick(&batch)) {
                *once = None;
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.inner.recycle(batch);
                return Ok(());
            }
        }
        {
            let mut copies = self.copies.lock();
            if copies.0.as_ref().is_some_and(|pick| pick(&batch)) {
                copies.1.push((from, to, batch.clone()));
            }
        }
        let (drop, dup, delay) = {
            let mut r = self.rng.lock();
            let delay_us = r.below(self.faults.max_delay.as_micros().max(1) as u64);
            (
                r.percent(self.faults.drop_pct),
                r.percent(self.faults.duplicate_pct),
                r.percent(self.faults.delay_pct).then_some(delay_us),
            )
        };
        if drop {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.inner.recycle(batch);
            return Ok(());
        }
        if dup {
            self.duplicated.fetch_add(1, Ordering::Relaxed);
            let copy = batch.clone();
            let _ = self.inner.send(from, to, copy);
        }
        if let Some(us) = delay {
            self.delayed_batches.fetch_add(1, Ordering::Relaxed);
            self.delayed
                .lock()
                .push((Instant::now() + Duration::from_micros(us), from, to, batch));
            return Ok(());
        }
        self.inner.send(from, to, batch)
    }

    fn recv(&self, me: Endpoint) -> Option<(Endpoint, Vec<u8>)> {
        {
            let mut d = self.delayed.lock();
            if !d.is_empty() {
                let now = Instant::now();
                if let Some(i) = d.iter().position(|(at, _, to, _)| *to == me && *at <= now) {
                    let (_, from, _, b) = d.swap_remove(i);
                    return Some((from, b));
                }
            }
        }
        self.inner.recv(me)
    }

    fn buffer(&self) -> Vec<u8> {
        self.inner.buffer()
    }

    fn recycle(&self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }

    fn endpoints(&self) -> usize {
        self.inner.endpoints()
    }

    /// It duplicates and delays (and its tests redeliver copies): up to
    /// `max_delay` late.
    fn redelivery_window(&self) -> Option<Duration> {
        Some(self.faults.max_delay)
    }
}

/// Picks the batches a [`Lossy`] loses, by destination and bytes.
type LosePick = Box<dyn Fn(Endpoint, &[u8]) -> bool + Send + Sync>;

/// Islands [`Lossy`] can report down or restarted: a bit each in a word.
const LOSSY_ISLANDS: usize = 64;

/// Wraps a transport (in-process, or one to other processes through
/// `Options::wrap_transport`): loses, and counts, the batches its `lose`
/// picks, reports islands down at will besides those the inner transport
/// does, and restarts islands at will (a new incarnation); everything else
/// is the inner transport's. For tests that lose chosen batches, cut an
/// island off or bounce it.
#[doc(hidden)]
pub struct Lossy {
    inner: Arc<dyn Transport>,
    lose: LosePick,
    lost: AtomicU64,
    /// Islands reported down by [`Lossy::report_down`], a bit each.
    down: AtomicU64,
    /// Moves with each [`Lossy::report_down`] and [`Lossy::restart`], on
    /// top of the inner epoch.
    epoch: AtomicU64,
    /// Restarts of each island ([`Lossy::restart`]), added to the inner
    /// transport's incarnation.
    restarts: [AtomicU64; LOSSY_ISLANDS],
}

impl Lossy {
    pub fn new(
        inner: Arc<dyn Transport>,
        lose: impl Fn(Endpoint, &[u8]) -> bool + Send + Sync + 'static,
    ) -> Lossy {
        Lossy {
            inner,
            lose: Box::new(lose),
            lost: AtomicU64::new(0),
            down: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            restarts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Batches lost so far.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::SeqCst)
    }

    /// From now on `peer_down(island)` holds (`island` below 64), and the
    /// peer epoch moves so that the executors look.
    pub fn report_down(&self, island: IslandId) {
        Self::check(island);
        self.down.fetch_or(1 << island, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// `island`'s process dies and comes back, a new incarnation, between
    /// two looks of the executors: from now on `peer_incarnation(island)`
    /// says one more, and the peer epoch moves twice (down, then up), so
    /// that the executors look. Before the executors' first look, it sets
    /// the incarnation they take as the one they know.
    pub fn restart(&self, island: IslandId) {
        Self::check(island);
        self.restarts[usize::from(island)].fetch_add(1, Ordering::SeqCst);
        self.epoch.fetch_add(2, Ordering::SeqCst);
    }

    fn check(island: IslandId) {
        assert!(
            usize::from(island) < LOSSY_ISLANDS,
            "island {island}: Lossy reports islands 0..{LOSSY_ISLANDS}"
        );
    }
}

impl Transport for Lossy {
    fn send(&self, from: Endpoint, to: Endpoint, batch: Vec<u8>) -> Result<(), Full> {
        if (self.lose)(to, &batch) {
            self.lost.fetch_add(1, Ordering::SeqCst);
            self.inner.recycle(batch);
            return Ok(());
        }
        self.inner.send(from, to, batch)
    }
    fn recv(&self, me: Endpoint) -> Option<(Endpoint, Vec<u8>)> {
        self.inner.recv(me)
    }
    fn buffer(&self) -> Vec<u8> {
        self.inner.buffer()
    }
    fn recycle(&self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }
    fn endpoints(&self) -> usize {
        self.inner.endpoints()
    }
    fn bell(&self, me: Endpoint) -> &crate::transport::Bell {
        self.inner.bell(me)
    }
    fn redelivery_window(&self) -> Option<Duration> {
        self.inner.redelivery_window()
    }
    fn syscalls(&self) -> (u64, u64) {
        self.inner.syscalls()
    }
    fn peer_down(&self, island: IslandId) -> bool {
        (usize::from(island) < LOSSY_ISLANDS
            && self.down.load(Ordering::SeqCst) & (1 << island) != 0)
            || self.inner.peer_down(island)
    }
    fn peer_epoch(&self) -> u64 {
        self.epoch
            .load(Ordering::SeqCst)
            .wrapping_add(self.inner.peer_epoch())
    }
    fn peer_incarnation(&self, island: IslandId) -> u64 {
        let restarts = self
            .restarts
            .get(usize::from(island))
            .map_or(0, |r| r.load(Ordering::SeqCst));
        self.inner.peer_incarnation(island).wrapping_add(restarts)
    }
}
