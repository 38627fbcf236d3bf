//! Message round trips between two pinned threads: the harness behind
//! `islands bench ipc`.
//!
//! A transport is a pair of [`Endpoint`]s. The client, on the first CPU, sends
//! `batch` messages and then waits for `batch` replies; the server, on the
//! second CPU, echoes every message it receives. One round trip is the time
//! from the first send to the last reply, recorded in a histogram.
//!
//! Transports measured here:
//! - `spin`: two `crossbeam_queue::ArrayQueue`s, both sides spinning (the floor:
//!   nothing but the cache-line transfers of the queue);
//! - `inproc`: the islands' own transport ([`islands::transport::InProc`]) used
//!   as a worker uses it: each message is a 16-byte frame (the `u64` and
//!   padding, the size of a small 2PC message), the client's frames go out as
//!   one batch from its [`Outbox`], the server decodes the batch with
//!   [`frames`], echoes every message in one batch and recycles the buffers;
//!   both sides spin. Its ratio to `spin` is what batching, framing and the
//!   buffer pool cost over the bare queue;
//! - `channel`: two `crossbeam_channel::bounded` channels with blocking `recv`;
//! - `mpsc`: two `std::sync::mpsc` channels, for reference;
//! - `shm-ring`: two bare [`shm::Ring`]s in one shared mapping, one per
//!   direction: a round's messages go as one record (16 bytes each, as
//!   `inproc`'s frames), both sides spinning. The floor of `shm`;
//! - `shm`: two [`Shm`] transports (islands 0 and 1 of one worker each,
//!   joined by a segment and bells under `/dev/shm`) used as `inproc` is:
//!   frames, one batch per round each way, the receiver draining the ring
//!   into its mailbox. Its ratio to `shm-ring` is what the transport adds
//!   over the bare ring;
//! - `socketpair`: a bare `UnixStream::pair()` between the two threads, each
//!   round's messages written with one `write` and echoed with one (the floor
//!   of any transport over a Unix socket: two system calls and two wake-ups
//!   each way);
//! - `uds`: the islands' Unix-socket transport ([`Uds`]), two islands of one
//!   worker each in this process, used as a worker uses it (frames in one
//!   batch per round each way, the worker asleep on its bell while it waits);
//!   each batch crosses a send thread, the socket and a receive thread. Its
//!   ratio to `socketpair` is what the stream layer and the I/O threads cost
//!   over the bare socket.
//!
//! Another transport plugs in by implementing [`Endpoint`] for its two ends
//! and calling [`measure_round_trips`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use serde::Serialize;

use islands::topology::pin_to;
use islands::topology::CpuId;
use islands::transport::handshake::{build_id, Hello, Secret, WIRE_VERSION};
use islands::transport::shm::{self, Shm, ShmConfig};
use islands::transport::uds::{Uds, UdsConfig};
use islands::transport::{self, frames, push_frame, InProc, Layout, Outbox, PeerState, Transport};
use islands::Error;

/// The end-of-run message; a transport never sees it as a payload.
pub const STOP: u64 = u64::MAX;

/// One end of a two-way link carrying `u64` messages.
pub trait Endpoint: Send + 'static {
    /// Sends a message; may block or spin while the link is full. A batching
    /// end may keep it until [`Endpoint::flush`] or its next `recv`.
    fn send(&mut self, msg: u64);
    /// Hands every message kept by `send` to the link. The client calls it
    /// after each round's sends, the server after its last echo.
    fn flush(&mut self) {}
    /// Waits for the next message.
    fn recv(&mut self) -> u64;
    /// Malformed input this end received and dropped (counted, not executed).
    fn malformed(&self) -> u64 {
        0
    }
}

/// How to measure.
#[derive(Clone, Debug)]
pub struct IpcConfig {
    /// Client and server CPUs; `None`: do not pin.
    pub cpus: Option<(CpuId, CpuId)>,
    /// Messages per round trip (1 or more).
    pub batch: usize,
    /// Unmeasured round trips first.
    pub warmup: Duration,
    /// Measure for this long, unless `round_trips` is given.
    pub duration: Duration,
    /// Measure exactly this many round trips instead.
    pub round_trips: Option<u64>,
}

/// What one transport did.
#[derive(Clone, Debug, Serialize)]
pub struct IpcResult {
    /// What the transport is, for people (`spin (ArrayQueue)`).
    pub transport: String,
    /// Its name in [`TRANSPORTS`] (`spin`) when measured by [`measure`];
    /// otherwise the same as `transport`.
    pub key: String,
    pub batch: usize,
    /// Measured round trips.
    pub round_trips: u64,
    /// Messages the server echoed in the measured phase (= round_trips × batch).
    pub messages: u64,
    pub seconds: f64,
    pub round_trips_per_s: f64,
    pub median_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// Median round trip divided by the batch.
    pub median_ns_per_msg: f64,
    /// Malformed frames or batches either end dropped (always 0 unless the
    /// transport is broken; transports without framing report 0).
    pub malformed: u64,
}

/// Runs the client on `cfg.cpus.0` and the server (an echo loop) on `cfg.cpus.1`.
pub fn measure_round_trips<C: Endpoint, S: Endpoint>(
    name: &str,
    mut client: C,
    mut server: S,
    cfg: &IpcConfig,
) -> Result<IpcResult, Error> {
    if cfg.batch == 0 {
        return Err(Error::Config("--batch must be at least 1".into()));
    }
    if cfg.round_trips.is_none() && cfg.duration.is_zero() {
        return Err(Error::Config(
            "--duration must be more than 0 seconds".into(),
        ));
    }
    if let Some((a, b)) = cfg.cpus {
        if a == b {
            return Err(Error::Config(format!(
                "the two threads need two different CPUs, not {a} and {b}"
            )));
        }
    }
    let server_cpu = cfg.cpus.map(|(_, b)| b);
    let server = std::thread::Builder::new()
        .name("ipc-server".into())
        .spawn(move || -> Result<(u64, u64), Error> {
            if let Some(cpu) = server_cpu {
                if let Err(e) = pin_to(cpu as usize) {
                    // Unblock the client before failing.
                    server.send(STOP);
                    server.flush();
                    return Err(e);
                }
            }
            let mut echoed = 0u64;
            loop {
                let m = server.recv();
                server.send(m);
                if m == STOP {
                    server.flush();
                    return Ok((echoed, server.malformed()));
                }
                echoed += 1;
            }
        })
        .map_err(|e| Error::Config(format!("cannot start the server thread: {e}")))?;

    let mut server_stopped = false;
    let run = client_loop(&mut client, cfg, &mut server_stopped);
    if !server_stopped {
        client.send(STOP);
        client.flush();
        // The server echoes STOP last; drain until it arrives.
        while client.recv() != STOP {}
    }
    let (echoed, server_malformed) = server
        .join()
        .map_err(|_| Error::Config("the server thread panicked".into()))??;
    let (hist, rts, warm_msgs, secs) = run?;
    let messages = echoed - warm_msgs;
    Ok(IpcResult {
        transport: name.to_string(),
        key: name.to_string(),
        batch: cfg.batch,
        round_trips: rts,
        messages,
        seconds: secs,
        round_trips_per_s: rts as f64 / secs.max(1e-9),
        median_ns: hist.value_at_quantile(0.5),
        p99_ns: hist.value_at_quantile(0.99),
        max_ns: hist.max(),
        mean_ns: hist.mean(),
        median_ns_per_msg: hist.value_at_quantile(0.5) as f64 / cfg.batch as f64,
        malformed: server_malformed + client.malformed(),
    })
}

/// The client's side: warm-up, then measured round trips. Returns the
/// histogram, the measured round trips, the messages sent in the warm-up and
/// the measured seconds. Sets `server_stopped` if the server sent STOP.
fn client_loop<C: Endpoint>(
    client: &mut C,
    cfg: &IpcConfig,
    server_stopped: &mut bool,
) -> Result<(Histogram<u64>, u64, u64, f64), Error> {
    if let Some((a, _)) = cfg.cpus {
        pin_to(a as usize)?;
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| Error::Config(format!("histogram: {e}")))?;
    let batch = cfg.batch as u64;
    let mut seq = 0u64;
    let mut round = |seq: u64, server_stopped: &mut bool| -> Result<u64, Error> {
        let t0 = Instant::now();
        for k in 0..batch {
            client.send(seq + k);
        }
        client.flush();
        for k in 0..batch {
            let got = client.recv();
            if got != seq + k {
                if got == STOP {
                    *server_stopped = true;
                    return Err(Error::Config(
                        "the server thread stopped (could it not be pinned?)".into(),
                    ));
                }
                return Err(Error::Config(format!(
                    "reply {got} where {} was expected",
                    seq + k
                )));
            }
        }
        Ok((t0.elapsed().as_nanos() as u64).max(1))
    };
    let warm_until = Instant::now() + cfg.warmup;
    while Instant::now() < warm_until {
        round(seq, server_stopped)?;
        seq += batch;
    }
    let warm_msgs = seq;
    let start = Instant::now();
    let mut rts = 0u64;
    loop {
        match cfg.round_trips {
            Some(n) if rts >= n => break,
            None if start.elapsed() >= cfg.duration => break,
            _ => {}
        }
        let ns = round(seq, server_stopped)?;
        hist.saturating_record(ns);
        seq += batch;
        rts += 1;
    }
    Ok((hist, rts, warm_msgs, start.elapsed().as_secs_f64()))
}

/// One end of a spinning `ArrayQueue` pair.
pub struct SpinEnd {
    tx: Arc<ArrayQueue<u64>>,
    rx: Arc<ArrayQueue<u64>>,
}

impl Endpoint for SpinEnd {
    fn send(&mut self, mut msg: u64) {
        while let Err(m) = self.tx.push(msg) {
            msg = m;
            std::hint::spin_loop();
        }
    }
    fn recv(&mut self) -> u64 {
        loop {
            if let Some(m) = self.rx.pop() {
                return m;
            }
            std::hint::spin_loop();
        }
    }
}

/// Two spinning ends; each queue holds `cap` messages (at least 1).
pub fn spin_pair(cap: usize) -> (SpinEnd, SpinEnd) {
    let a = Arc::new(ArrayQueue::new(cap.max(1)));
    let b = Arc::new(ArrayQueue::new(cap.max(1)));
    (
        SpinEnd {
            tx: a.clone(),
            rx: b.clone(),
        },
        SpinEnd { tx: b, rx: a },
    )
}

/// One end of a `crossbeam_channel::bounded` pair.
pub struct ChannelEnd {
    tx: crossbeam_channel::Sender<u64>,
    rx: crossbeam_channel::Receiver<u64>,
}

impl Endpoint for ChannelEnd {
    fn send(&mut self, msg: u64) {
        // A gone peer reads as STOP on the other side; nothing to do here.
        let _ = self.tx.send(msg);
    }
    fn recv(&mut self) -> u64 {
        self.rx.recv().unwrap_or(STOP)
    }
}

pub fn channel_pair(cap: usize) -> (ChannelEnd, ChannelEnd) {
    let (atx, arx) = crossbeam_channel::bounded(cap.max(1));
    let (btx, brx) = crossbeam_channel::bounded(cap.max(1));
    (
        ChannelEnd { tx: atx, rx: brx },
        ChannelEnd { tx: btx, rx: arx },
    )
}

/// One end of a `std::sync::mpsc` pair (unbounded).
pub struct MpscEnd {
    tx: std::sync::mpsc::Sender<u64>,
    rx: std::sync::mpsc::Receiver<u64>,
}

impl Endpoint for MpscEnd {
    fn send(&mut self, msg: u64) {
        // A gone peer reads as STOP on the other side; nothing to do here.
        let _ = self.tx.send(msg);
    }
    fn recv(&mut self) -> u64 {
        self.rx.recv().unwrap_or(STOP)
    }
}

pub fn mpsc_pair() -> (MpscEnd, MpscEnd) {
    let (atx, arx) = std::sync::mpsc::channel();
    let (btx, brx) = std::sync::mpsc::channel();
    (MpscEnd { tx: atx, rx: brx }, MpscEnd { tx: btx, rx: arx })
}

/// Bytes of one `inproc` message: the `u64`, then zero padding, about the
/// size of a small two-phase-commit message (a transaction id and a vote).
pub const INPROC_MSG_BYTES: usize = 16;

/// Batches a mailbox of the `inproc` pair holds: one round's batch in each
/// direction at a time, so more is only slack.
const INPROC_DEPTH: usize = 4;

/// How a [`TransportEnd`] waits for its mailbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waits {
    /// Spins (both threads own a CPU and nothing else runs for the link).
    Spin,
    /// Sleeps on its bell, as a worker with nothing to do does (the I/O
    /// threads that deliver to it need a CPU too).
    Bell,
}

/// One end of an island transport, used as a worker uses it: the one shape
/// of the `inproc`, `shm` and `uds` pairs.
///
/// `send` appends a frame to the batch for the peer in this end's [`Outbox`];
/// `flush` sends that batch (waiting while the transport pushes back). `recv`
/// returns the next decoded message; when none is left it first flushes
/// (the replies to the batch just consumed go out as one batch, as at the
/// end of a worker's round), then takes its next batch (waiting as
/// [`Waits`] says), decodes it with [`frames`] and gives the buffer back
/// through the outbox, as a worker does. A frame that is malformed, or is
/// not [`INPROC_MSG_BYTES`] long, is counted and dropped, and nothing after
/// it in its batch is executed.
pub struct TransportEnd<T: Transport> {
    t: Arc<T>,
    me: transport::Endpoint,
    peer: transport::Endpoint,
    out: Outbox,
    /// The messages of the last batch received; `next` is the first not yet returned.
    inbox: Vec<u64>,
    next: usize,
    malformed: u64,
    waits: Waits,
    /// Whether the other side can still answer (asked after a sleep that
    /// timed out: `false` ends the wait with [`STOP`]).
    alive: fn(&T) -> bool,
    /// Declared last: removed after this end's transport is gone.
    _dir: Option<Arc<TempDir>>,
}

/// The `inproc` end.
pub type InProcEnd = TransportEnd<InProc>;
/// The `shm` end.
pub type ShmEnd = TransportEnd<Shm>;
/// The `uds` end.
pub type UdsEnd = TransportEnd<Uds>;

impl<T: Transport> TransportEnd<T> {
    fn new(t: Arc<T>, me: u32, peer: u32, waits: Waits, alive: fn(&T) -> bool) -> Self {
        TransportEnd {
            out: Outbox::new(t.endpoints()),
            t,
            me: transport::Endpoint(me),
            peer: transport::Endpoint(peer),
            inbox: Vec::new(),
            next: 0,
            malformed: 0,
            waits,
            alive,
            _dir: None,
        }
    }

    /// The next batch for this end, or `None` once the peer is gone.
    fn next_batch(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some((_, b)) = self.t.recv(self.me) {
                return Some(b);
            }
            match self.waits {
                Waits::Spin => std::hint::spin_loop(),
                Waits::Bell => {
                    let bell = self.t.bell(self.me);
                    if !bell.prepare_sleep() {
                        continue;
                    }
                    if let Some((_, b)) = self.t.recv(self.me) {
                        bell.cancel_sleep();
                        return Some(b);
                    }
                    if !bell.sleep(Duration::from_millis(100)) && !(self.alive)(&self.t) {
                        return None;
                    }
                }
            }
        }
    }
}

fn always(_: &impl Transport) -> bool {
    true
}

impl<T: Transport + 'static> Endpoint for TransportEnd<T> {
    #[inline]
    fn send(&mut self, msg: u64) {
        let mut frame = [0u8; INPROC_MSG_BYTES];
        frame[..8].copy_from_slice(&msg.to_le_bytes());
        push_frame(self.out.batch(&*self.t, self.peer), &frame);
    }

    #[inline]
    fn flush(&mut self) {
        while self.out.flush(&*self.t, self.me) > 0 {
            match self.waits {
                Waits::Spin => std::hint::spin_loop(),
                Waits::Bell => std::thread::yield_now(),
            }
        }
    }

    fn recv(&mut self) -> u64 {
        loop {
            if let Some(&m) = self.inbox.get(self.next) {
                self.next += 1;
                return m;
            }
            self.flush();
            self.inbox.clear();
            self.next = 0;
            let Some(batch) = self.next_batch() else {
                // The other island is gone: nothing more comes.
                return STOP;
            };
            decode_messages(&batch, &mut self.inbox, &mut self.malformed);
            self.out.recycle(&*self.t, batch);
        }
    }

    fn malformed(&self) -> u64 {
        self.malformed
    }
}

/// Two ends of one two-endpoint [`InProc`] transport (client 0, server 1).
pub fn inproc_pair() -> (InProcEnd, InProcEnd) {
    let t = Arc::new(InProc::new(2, INPROC_DEPTH));
    (
        TransportEnd::new(Arc::clone(&t), 0, 1, Waits::Spin, always),
        TransportEnd::new(t, 1, 0, Waits::Spin, always),
    )
}

/// One end of a bare Unix socket pair: `send` appends 8 bytes to a buffer,
/// `flush` writes it with one `write`; `recv` takes the next message from
/// what the last `read` brought, and when none is left it first flushes
/// (the echoes of a round leave together) and then blocks in `read`.
pub struct SocketEnd {
    s: std::os::unix::net::UnixStream,
    out: Vec<u8>,
    input: Vec<u8>,
    at: usize,
}

impl Endpoint for SocketEnd {
    fn send(&mut self, msg: u64) {
        self.out.extend_from_slice(&msg.to_le_bytes());
    }

    fn flush(&mut self) {
        use std::io::Write;
        if !self.out.is_empty() {
            // A gone peer reads as STOP on the other side; nothing to do here.
            let _ = self.s.write_all(&self.out);
            self.out.clear();
        }
    }

    fn recv(&mut self) -> u64 {
        use std::io::Read;
        loop {
            if self.input.len() - self.at >= 8 {
                let mut w = [0u8; 8];
                w.copy_from_slice(&self.input[self.at..self.at + 8]);
                self.at += 8;
                return u64::from_le_bytes(w);
            }
            self.flush();
            self.input.drain(..self.at);
            self.at = 0;
            let have = self.input.len();
            self.input.resize(have + 64 * 1024, 0);
            match self.s.read(&mut self.input[have..]) {
                Ok(n) if n > 0 => self.input.truncate(have + n),
                _ => return STOP,
            }
        }
    }
}

/// Two ends of `UnixStream::pair()`.
pub fn socket_pair() -> Result<(SocketEnd, SocketEnd), Error> {
    let (a, b) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::Io(format!("socketpair: {e}")))?;
    let end = |s| SocketEnd {
        s,
        out: Vec::new(),
        input: Vec::new(),
        at: 0,
    };
    Ok((end(a), end(b)))
}

/// A directory removed when the last end using it is gone.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Appends the messages of a batch of [`INPROC_MSG_BYTES`]-byte frames to
/// `inbox`; counts a frame of another size, or a batch that stops adding up
/// (the iterator yields no frame after its error).
fn decode_messages(batch: &[u8], inbox: &mut Vec<u64>, malformed: &mut u64) {
    for frame in frames(batch) {
        match frame {
            Ok(p) if p.len() == INPROC_MSG_BYTES => {
                let mut word = [0u8; 8];
                word.copy_from_slice(&p[..8]);
                inbox.push(u64::from_le_bytes(word));
            }
            Ok(_) | Err(_) => *malformed += 1,
        }
    }
}

/// Two islands of one worker each, each its own [`Uds`] on a socket in a
/// fresh temporary directory, connected and past their handshake (client:
/// island 0's worker, server: island 1's).
pub fn uds_pair() -> Result<(UdsEnd, UdsEnd), Error> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "islands-ipc-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    let dir = Arc::new(TempDir(dir));
    let workers = [1u32, 1];
    let paths: Vec<_> = (0..2)
        .map(|i| dir.0.join(format!("island-{i}.sock")))
        .collect();
    // Known to this process only: nobody else may join the two islands.
    let secret = Secret::random();
    let open = |me: u16| -> Result<Arc<Uds>, Error> {
        let hello = Hello {
            wire_version: WIRE_VERSION,
            transport: islands::transport::join::Kind::Uds,
            build_id: build_id(),
            deployment: 1,
            island: me,
            incarnation: 1,
            schema: 0,
            catalog: 0,
            workers: workers.to_vec(),
        };
        let mut cfg = UdsConfig::new(
            Layout::new(&workers, me),
            paths.clone(),
            secret.clone(),
            hello,
        );
        cfg.mailbox_depth = INPROC_DEPTH;
        let u = Uds::new(cfg).map_err(|e| Error::Io(e.to_string()))?;
        Ok(Arc::new(u))
    };
    let (a, b) = (open(0)?, open(1)?);
    let end = Instant::now() + Duration::from_secs(10);
    while a.peers().iter().any(|p| p.state != PeerState::Up)
        || b.peers().iter().any(|p| p.state != PeerState::Up)
    {
        if Instant::now() > end {
            return Err(Error::Io(format!(
                "the two uds islands did not connect within 10 s: {:?}",
                a.peers()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Each end sleeps on its bell while its mailbox is empty: the receive
    // thread that delivers to it needs a CPU too.
    let up = |u: &Uds| u.peers().iter().all(|p| p.state == PeerState::Up);
    let end = |t: Arc<Uds>, me: u32, peer: u32| UdsEnd {
        _dir: Some(Arc::clone(&dir)),
        ..TransportEnd::new(t, me, peer, Waits::Bell, up)
    };
    Ok((end(a, 0, 1), end(b, 1, 0)))
}

/// The built-in transports, by name, in the order `islands bench ipc` runs them.
pub const TRANSPORTS: [&str; 8] = [
    "spin",
    "inproc",
    "channel",
    "mpsc",
    "shm-ring",
    "shm",
    "socketpair",
    "uds",
];

/// Measures a built-in transport by name.
pub fn measure(name: &str, cfg: &IpcConfig) -> Result<IpcResult, Error> {
    // Room for one batch plus the STOP echo.
    let cap = cfg.batch + 1;
    let r = match name {
        "spin" => {
            let (c, s) = spin_pair(cap);
            measure_round_trips("spin (ArrayQueue)", c, s, cfg)
        }
        "inproc" => {
            let (c, s) = inproc_pair();
            measure_round_trips("inproc (islands)", c, s, cfg)
        }
        "channel" => {
            let (c, s) = channel_pair(cap);
            measure_round_trips("crossbeam bounded", c, s, cfg)
        }
        "mpsc" => {
            let (c, s) = mpsc_pair();
            measure_round_trips("std mpsc", c, s, cfg)
        }
        "shm-ring" => {
            let (c, s) = shm_ring_pair(cfg.batch)?;
            measure_round_trips("shm ring (bare)", c, s, cfg)
        }
        "shm" => {
            let (c, s) = shm_pair()?;
            measure_round_trips("shm (islands)", c, s, cfg)
        }
        "socketpair" => {
            let (c, s) = socket_pair()?;
            measure_round_trips("socketpair (bare)", c, s, cfg)
        }
        "uds" => {
            let (c, s) = uds_pair()?;
            measure_round_trips("uds (islands)", c, s, cfg)
        }
        other => Err(Error::Config(format!(
            "unknown transport '{other}' (expected one of {})",
            TRANSPORTS.join(", ")
        ))),
    };
    r.map(|r| IpcResult {
        key: name.to_string(),
        ..r
    })
}

/// Reads the host's cross-core state: the median round trip of a spin-queue
/// ping-pong between CPUs `a` and `b` for a few tens of milliseconds (see
/// [`crate::report::HostProbe`]). `None` if it could not run (the
/// same CPU twice, or pinning refused).
pub fn probe(a: CpuId, b: CpuId) -> Option<u64> {
    let cfg = IpcConfig {
        cpus: Some((a, b)),
        batch: 1,
        warmup: Duration::from_millis(5),
        duration: Duration::from_millis(30),
        round_trips: None,
    };
    // The client side pins the thread it runs on: a thread of its own, so
    // the caller (and every thread it spawns later) keeps its affinity.
    std::thread::Builder::new()
        .name("host-probe".into())
        .spawn(move || measure("spin", &cfg).ok().map(|r| r.median_ns))
        .ok()?
        .join()
        .ok()
        .flatten()
}

/// The target for the island transport: a message round trip between
/// two islands of one process under 2 µs at the median.
pub const INPROC_TARGET_NS: u64 = 2_000;

/// `results[a].median_ns / results[b].median_ns` for the transports keyed `a`
/// and `b`, if both were measured.
pub fn median_ratio(results: &[IpcResult], a: &str, b: &str) -> Option<f64> {
    let median = |k: &str| results.iter().find(|r| r.key == k).map(|r| r.median_ns);
    match (median(a), median(b)) {
        (Some(x), Some(y)) if y > 0 => Some(x as f64 / y as f64),
        _ => None,
    }
}

/// A table of results.
pub fn render_table(results: &[IpcResult], header: &str) -> String {
    use std::fmt::Write as _;
    let mut out = format!("{header}\n\n");
    out.push_str(
        "transport             batch  round trips   rt/s        median ns   p99 ns      ns/msg (median)  x spin\n",
    );
    for r in results {
        let vs_spin =
            median_ratio(results, &r.key, "spin").map_or("-".to_string(), |x| format!("{x:.2}"));
        let _ = writeln!(
            out,
            "{:<21} {:>5} {:>12} {:>10} {:>11} {:>8} {:>17.1} {:>7}",
            r.transport,
            r.batch,
            crate::fmt::thousands(r.round_trips),
            crate::fmt::human_rate(r.round_trips_per_s),
            crate::fmt::thousands(r.median_ns),
            crate::fmt::thousands(r.p99_ns),
            r.median_ns_per_msg,
            vs_spin
        );
    }
    if let Some(r) = results.iter().find(|r| r.key == "inproc") {
        if let Some(x) = median_ratio(results, "inproc", "spin") {
            let _ = write!(
                out,
                "\ninproc / spin: {x:.2}x at the median (framing, batching and the buffer pool over the bare queue)"
            );
        }
        if r.batch == 1 {
            let _ = write!(
                out,
                "\ninproc: median round trip {} ns, target under {} ns: {}",
                crate::fmt::thousands(r.median_ns),
                crate::fmt::thousands(INPROC_TARGET_NS),
                if r.median_ns < INPROC_TARGET_NS {
                    "met"
                } else {
                    "not met"
                }
            );
        }
        out.push('\n');
    }
    shm_lines(results, &mut out);
    if let Some(x) = median_ratio(results, "uds", "socketpair") {
        let _ = writeln!(
            out,
            "\nuds / socketpair: {x:.2}x at the median (the stream layer and the I/O threads over the bare socket)"
        );
    }
    out
}

/// The ratio of `shm` to its floor `shm-ring`, if both were measured.
fn shm_lines(results: &[IpcResult], out: &mut String) {
    use std::fmt::Write as _;
    if let Some(x) = median_ratio(results, "shm", "shm-ring") {
        let rate = |k: &str| {
            results
                .iter()
                .find(|r| r.key == k)
                .map_or(0.0, |r| r.round_trips_per_s)
        };
        let _ = writeln!(
            out,
            "shm / shm-ring: {x:.2}x at the median; {:.2} of the bare ring's round trips per second (issue target: at least 0.8)",
            rate("shm") / rate("shm-ring").max(1e-9)
        );
    }
}

/// Bytes of the shared mapping of a `shm-ring` pair: two rings, each with
/// room for a few rounds of `batch` 16-byte messages.
fn shm_ring_capacity(batch: usize) -> usize {
    (4 * shm::record_bytes((batch + 1) * INPROC_MSG_BYTES))
        .next_power_of_two()
        .max(4096)
}

/// One end of a bare ring pair: `send` appends a 16-byte message to the
/// round's record, `flush` pushes it (spinning while the ring is full),
/// `recv` pops a record and returns its messages one by one.
pub struct ShmRingEnd {
    tx: shm::Producer,
    rx: shm::Consumer,
    out: Vec<u8>,
    buf: Vec<u8>,
    next: usize,
    malformed: u64,
}

impl Endpoint for ShmRingEnd {
    #[inline]
    fn send(&mut self, msg: u64) {
        let mut m = [0u8; INPROC_MSG_BYTES];
        m[..8].copy_from_slice(&msg.to_le_bytes());
        self.out.extend_from_slice(&m);
    }

    #[inline]
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        loop {
            match self.tx.try_push(0, 1, &self.out) {
                Ok(()) => break,
                Err(shm::PushError::Full) => std::hint::spin_loop(),
                // A round larger than the ring, or a broken ring: the
                // messages are lost, and the client reports the missing reply.
                Err(_) => {
                    self.malformed += 1;
                    break;
                }
            }
        }
        self.out.clear();
    }

    fn recv(&mut self) -> u64 {
        loop {
            if self.next + INPROC_MSG_BYTES <= self.buf.len() {
                let mut word = [0u8; 8];
                word.copy_from_slice(&self.buf[self.next..self.next + 8]);
                self.next += INPROC_MSG_BYTES;
                return u64::from_le_bytes(word);
            }
            self.flush();
            self.next = 0;
            match self.rx.pop_into(&mut self.buf) {
                Ok(Some(r)) if (r.len as usize).is_multiple_of(INPROC_MSG_BYTES) => {}
                Ok(Some(_)) => {
                    self.malformed += 1;
                    self.buf.clear();
                }
                Ok(None) => {
                    self.buf.clear();
                    std::hint::spin_loop();
                }
                Err(_) => {
                    self.malformed += 1;
                    self.buf.clear();
                    return STOP;
                }
            }
        }
    }

    fn malformed(&self) -> u64 {
        self.malformed
    }
}

/// Two ends of a bare ring pair in one anonymous shared mapping, each ring
/// with room for a few rounds of `batch` messages.
pub fn shm_ring_pair(batch: usize) -> Result<(ShmRingEnd, ShmRingEnd), Error> {
    let cap = shm_ring_capacity(batch);
    let map = Arc::new(
        shm::Mapping::anonymous(2 * shm::Ring::bytes(cap))
            .map_err(|e| Error::Config(format!("shared mapping: {e}")))?,
    );
    let ring = |at: usize| -> Result<shm::Ring, Error> {
        let r = shm::Ring::at(Arc::clone(&map), at, cap).map_err(Error::Config)?;
        r.reset();
        Ok(r)
    };
    let (ab, ba) = (ring(0)?, ring(shm::Ring::bytes(cap))?);
    let bad = |e: shm::RingError| Error::Config(format!("ring: {e}"));
    let end = |tx: &shm::Ring, rx: &shm::Ring| -> Result<ShmRingEnd, Error> {
        Ok(ShmRingEnd {
            tx: tx.producer().map_err(bad)?,
            rx: rx.consumer().map_err(bad)?,
            out: Vec::with_capacity(batch * INPROC_MSG_BYTES),
            buf: Vec::new(),
            next: 0,
            malformed: 0,
        })
    };
    Ok((end(&ab, &ba)?, end(&ba, &ab)?))
}

/// Two islands of one worker each joined by [`Shm`] under `/dev/shm`
/// (client: island 0's endpoint 0, server: island 1's endpoint 1). The
/// files are removed when both ends are dropped.
pub fn shm_pair() -> Result<(ShmEnd, ShmEnd), Error> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut cfg = ShmConfig::new(nanos ^ (u128::from(std::process::id()) << 96));
    cfg.ring_bytes = 1 << 16;
    cfg.mailbox_depth = INPROC_DEPTH;
    cfg.wait = Duration::from_secs(10);
    let open = |island: u16| {
        let cfg = cfg.clone();
        std::thread::spawn(move || Shm::open(Layout::new(&[1, 1], island), &cfg))
    };
    let (a, b) = (open(0), open(1));
    let join = |h: std::thread::JoinHandle<Result<Shm, shm::ShmError>>| -> Result<Arc<Shm>, Error> {
        h.join()
            .map_err(|_| Error::Config("opening a shm island panicked".into()))?
            .map(Arc::new)
            .map_err(|e| Error::Config(format!("shm: {e}")))
    };
    let (a, b) = (join(a)?, join(b)?);
    Ok((
        TransportEnd::new(a, 0, 1, Waits::Spin, always),
        TransportEnd::new(b, 1, 0, Waits::Spin, always),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(batch: usize, n: u64) -> IpcConfig {
        IpcConfig {
            cpus: None,
            batch,
            warmup: Duration::from_millis(20),
            duration: Duration::from_secs(1),
            round_trips: Some(n),
        }
    }

    #[test]
    fn every_transport_round_trips_the_right_number_of_messages() {
        for name in TRANSPORTS {
            for batch in [1, 7] {
                let r = measure(name, &cfg(batch, 500)).unwrap();
                assert_eq!(r.round_trips, 500, "{name}");
                assert_eq!(r.messages, 500 * batch as u64, "{name} batch {batch}");
                assert!(r.median_ns > 0 && r.p99_ns >= r.median_ns, "{r:?}");
            }
        }
    }

    #[test]
    fn a_timed_run_and_pinning() {
        let cpus = islands::topology::allowed_cpus();
        let mut c = cfg(2, 0);
        c.round_trips = None;
        c.duration = Duration::from_millis(100);
        if cpus.len() >= 2 {
            c.cpus = Some((cpus[0] as CpuId, cpus[1] as CpuId));
        }
        let r = measure("channel", &c).unwrap();
        assert!(r.round_trips > 0);
        assert_eq!(r.messages, r.round_trips * 2);
    }

    #[test]
    fn inproc_ends_round_trip_values_in_one_batch_each_way() {
        // Takes the one batch waiting for `to`, checks that it holds `n`
        // frames and that no other batch waits, and puts it back.
        fn one_batch_of(t: &InProc, from: transport::Endpoint, to: transport::Endpoint, n: usize) {
            let (sender, batch) = t.recv(to).expect("a batch waits");
            assert_eq!(sender, from);
            assert_eq!(frames(&batch).count(), n, "every message in one batch");
            assert!(t.recv(to).is_none(), "only one batch");
            t.send(from, to, batch).unwrap();
        }
        let (mut client, mut server) = inproc_pair();
        let sent = [7u64, 0, u64::MAX - 1, 123_456_789];
        for &m in &sent {
            client.send(m);
        }
        assert!(
            client.t.recv(server.me).is_none(),
            "send only appends to the outbox"
        );
        client.flush();
        one_batch_of(&client.t, client.me, server.me, sent.len());
        for &m in &sent {
            let got = server.recv();
            assert_eq!(got, m);
            server.send(got);
        }
        server.flush();
        one_batch_of(&server.t, server.me, client.me, sent.len());
        let back: Vec<u64> = sent.iter().map(|_| client.recv()).collect();
        assert_eq!(back, sent);
        assert_eq!((client.malformed(), server.malformed()), (0, 0));
        assert!(client.t.recv(client.me).is_none() && client.t.recv(server.me).is_none());
    }

    #[test]
    fn inproc_counts_malformed_batches_and_does_not_execute_them() {
        let (mut client, mut server) = inproc_pair();
        let t = Arc::clone(&client.t);
        let good = |m: u64| {
            let mut f = [0u8; INPROC_MSG_BYTES];
            f[..8].copy_from_slice(&m.to_le_bytes());
            f
        };
        let (from, to) = (client.me, server.me);
        // A frame that claims 16 bytes where the batch has 10 left: nothing runs.
        let mut b = Vec::new();
        push_frame(&mut b, &good(1));
        b.truncate(4 + 10);
        t.send(from, to, b).unwrap();
        // A good frame, then a torn header: the good one runs, the rest is counted.
        let mut b = Vec::new();
        push_frame(&mut b, &good(42));
        b.extend_from_slice(&[16, 0]);
        t.send(from, to, b).unwrap();
        // A well-framed message of the wrong size is dropped; the next frame runs.
        let mut b = Vec::new();
        push_frame(&mut b, b"abc");
        push_frame(&mut b, &good(9));
        t.send(from, to, b).unwrap();
        // Then the client's own batch.
        client.send(5);
        client.send(6);
        client.flush();

        let mut executed = Vec::new();
        for _ in 0..4 {
            let m = server.recv();
            executed.push(m);
            server.send(m);
        }
        server.flush();
        assert_eq!(executed, vec![42, 9, 5, 6], "no value of a bad frame runs");
        assert_eq!(
            server.malformed(),
            3,
            "truncated frame, torn header, wrong size"
        );
        assert!(t.recv(to).is_none(), "every batch was consumed");
        let echoed: Vec<u64> = (0..4).map(|_| client.recv()).collect();
        assert_eq!(echoed, executed);
        assert_eq!(client.malformed(), 0);
    }

    #[test]
    fn inproc_reports_its_ratio_to_spin() {
        let c = cfg(1, 300);
        let results = vec![measure("spin", &c).unwrap(), measure("inproc", &c).unwrap()];
        assert_eq!(results[1].key, "inproc");
        assert_eq!(results[1].messages, 300);
        assert_eq!(results[1].malformed, 0);
        let x = median_ratio(&results, "inproc", "spin").unwrap();
        assert!(
            (x - results[1].median_ns as f64 / results[0].median_ns as f64).abs() < 1e-9,
            "{x}"
        );
        let table = render_table(&results, "h");
        assert!(table.contains("inproc (islands)"), "{table}");
        assert!(
            table.contains(&format!("inproc / spin: {x:.2}x")),
            "{table}"
        );
        assert!(table.contains("target under 2,000 ns"), "{table}");
        assert!(median_ratio(&results, "inproc", "mpsc").is_none());
    }

    #[test]
    fn shm_ends_round_trip_and_report_their_ratio_to_the_bare_ring() {
        let c = cfg(3, 300);
        let results = vec![
            measure("shm-ring", &c).unwrap(),
            measure("shm", &c).unwrap(),
        ];
        for r in &results {
            assert_eq!((r.messages, r.malformed), (900, 0), "{r:?}");
        }
        let x = median_ratio(&results, "shm", "shm-ring").unwrap();
        let table = render_table(&results, "h");
        assert!(
            table.contains(&format!("shm / shm-ring: {x:.2}x")),
            "{table}"
        );
        // A round larger than the bare ring is lost and counted, not a hang.
        let (mut a, _b) = shm_ring_pair(1).unwrap();
        for i in 0..1_000 {
            a.send(i);
        }
        a.flush();
        assert_eq!(a.malformed(), 1);
    }

    #[test]
    fn uds_ends_cross_the_socket_in_one_batch_each_way() {
        let (mut client, mut server) = uds_pair().unwrap();
        let sent = [3u64, 1 << 40, 17];
        for &m in &sent {
            client.send(m);
        }
        client.flush();
        for &m in &sent {
            let got = server.recv();
            assert_eq!(got, m);
            server.send(got);
        }
        server.flush();
        let back: Vec<u64> = sent.iter().map(|_| client.recv()).collect();
        assert_eq!(back, sent);
        let (c, s) = (&client.t.peers()[0], &server.t.peers()[0]);
        assert_eq!((c.batches_out, c.batches_in), (1, 1), "{c:?}");
        assert_eq!((s.batches_out, s.batches_in), (1, 1), "{s:?}");
        assert_eq!((client.malformed(), server.malformed()), (0, 0));
    }

    #[test]
    fn socketpair_and_uds_report_their_ratio() {
        let c = cfg(2, 200);
        let results = vec![
            measure("socketpair", &c).unwrap(),
            measure("uds", &c).unwrap(),
        ];
        assert_eq!(results[1].messages, 400);
        assert_eq!(results[1].malformed, 0);
        let x = median_ratio(&results, "uds", "socketpair").unwrap();
        let table = render_table(&results, "h");
        assert!(table.contains("socketpair (bare)"), "{table}");
        assert!(
            table.contains(&format!("uds / socketpair: {x:.2}x")),
            "{table}"
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(measure("carrier-pigeon", &cfg(1, 1)).is_err());
        assert!(measure("spin", &cfg(0, 1)).is_err());
        let mut c = cfg(1, 1);
        c.cpus = Some((0, 0));
        assert!(measure("spin", &c).is_err());
    }
}
