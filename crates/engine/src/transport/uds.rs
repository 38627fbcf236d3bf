//! Islands as processes joined by Unix domain sockets: [`Uds`] is the
//! [`Transport`] of one island ([`Layout::me`]).
//!
//! Local endpoints have in-process mailboxes (a bounded queue and a [`Bell`]
//! each, as in [`super::InProc`]): a batch between two workers of this island
//! never touches a socket. A batch for another island goes into that peer's
//! bounded send queue; the peer's send thread (asleep on its own bell while
//! the queue is empty) writes every queued batch behind its stream header
//! ([`super::stream`]) with one `writev`. The peer's receive thread decodes
//! frames, maps (peer island, worker) to the sender's endpoint through the
//! layout (the island comes from the authenticated connection, never from the
//! frame), pushes the batch into the destination's mailbox (waiting while it
//! is full: the socket then pushes back on the sender) and rings its bell.
//!
//! Connections: island `i` listens on `paths[i]`. Between two islands there is
//! one connection: the lower island connects, with a backoff, until the
//! higher is up, and again after a loss; every connection starts with the
//! handshake ([`super::handshake`]), and no frame is read before it passed.
//! A frame that breaks the stream's rules closes the connection and counts a
//! refusal.
//!
//! Leaving: [`Uds::shutdown`] writes what is queued, then each send thread
//! ends its connection with a goodbye ([`stream::FLAG_GOODBYE`]) before the
//! connection closes. A receive thread that reads a goodbye closes the
//! connection and marks the peer down at once, as a closed connection does
//! (and counts it in [`PeerStats::goodbyes`]): a peer that stops cleanly is
//! down for the executors in the round that reads its goodbye, never after
//! `dead_after`. A goodbye is a frame: before the handshake it is refused
//! like any other.
//!
//! Loss: the engine tolerates lost batches, so a peer that is not up gets
//! its batches queued only up to the queue's cap; past it they are dropped
//! and counted. Batches still queued when the peer comes back as a new
//! incarnation are dropped too (they were for the one that died). While a
//! peer is up, a full queue is back-pressure ([`Full`]).

use super::handshake::{self, Expect, Hello, Refused, Secret};
use super::layout::Layout;
use super::peer::{PeerCounters, PeerState, PeerStats};
use super::stream::{self, Decoder, StreamError, FLAG_GOODBYE, FLAG_HEARTBEAT, HEADER};
use super::BufferPool;
use super::{Bell, Endpoint, Full, Transport};
use crate::route::IslandId;
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A transport that carries its batches by other means over the
/// connections of a [`Uds`] (shared memory: `super::shm`): the [`Uds`] then
/// does the handshake, the liveness (heartbeats, `peer_down`, `peer_epoch`)
/// and the reconnects, and hands each authenticated connection to it.
pub trait Attach: Send + Sync {
    /// Runs on a connection with `peer` that passed the handshake, before it
    /// is installed (before the peer counts as up): whatever is set up over
    /// `s` here is in place once [`Transport::peer_down`] says the peer is
    /// up. `initiator`: we dialled. Returns a token for [`Attach::closed`];
    /// an error refuses the connection (counted and logged as a refusal).
    fn connected(&self, peer: &Hello, s: &mut UnixStream, initiator: bool) -> Result<u64, String>;
    /// The connection `connected` returned `token` for is closed (it was
    /// installed, and lost or shut down).
    fn closed(&self, island: IslandId, token: u64);
}

/// How to run a [`Uds`].
pub struct UdsConfig {
    pub layout: Layout,
    /// The socket path of each island (`paths[layout.me()]` is ours).
    pub paths: Vec<PathBuf>,
    pub secret: Secret,
    /// What we say in the handshake; peers must match it (see [`Expect::matching`]).
    pub hello: Hello,
    /// Batches each local mailbox holds.
    pub mailbox_depth: usize,
    /// Batches each peer's send queue holds.
    pub send_queue: usize,
    /// Longest a handshake may take.
    pub handshake_timeout: Duration,
    /// A send thread with nothing to send writes a heartbeat this often.
    pub heartbeat: Duration,
    /// A connection that carried nothing (not even a heartbeat) for this
    /// long is closed as dead.
    pub dead_after: Duration,
    /// Longest wait between two connection attempts.
    pub backoff_max: Duration,
    /// Set: each authenticated connection is handed to it (see [`Attach`]).
    pub attach: Option<Arc<dyn Attach>>,
}

impl UdsConfig {
    pub fn new(layout: Layout, paths: Vec<PathBuf>, secret: Secret, hello: Hello) -> UdsConfig {
        UdsConfig {
            layout,
            paths,
            secret,
            hello,
            mailbox_depth: 256,
            send_queue: 1024,
            handshake_timeout: Duration::from_secs(5),
            heartbeat: Duration::from_millis(200),
            dead_after: Duration::from_secs(5),
            backoff_max: Duration::from_millis(200),
            attach: None,
        }
    }
}

/// A local endpoint's mailbox.
struct Inbox {
    queue: ArrayQueue<(Endpoint, Vec<u8>)>,
    bell: Bell,
}

/// A batch waiting for a peer's send thread: the sender's worker index
/// within this island, the destination, the batch.
type Outgoing = (u32, Endpoint, Vec<u8>);

/// The current connection with a peer, if any.
struct Link {
    /// Bumped at each new connection.
    generation: u64,
    stream: Option<UnixStream>,
    /// What [`Attach::connected`] returned for `stream`.
    token: u64,
}

struct Peer {
    queue: ArrayQueue<Outgoing>,
    /// The send thread sleeps on it; rung by a send and by a new connection.
    bell: Bell,
    link: Mutex<Link>,
    /// Signalled when `link` changes (the accepting side's receive thread
    /// waits for a connection on it).
    changed: Condvar,
    /// `link.generation`, readable without the lock.
    generation: AtomicU64,
    /// The send thread holds batches taken from the queue and not yet
    /// written (set before it takes them).
    busy: AtomicBool,
    counters: PeerCounters,
    /// The last refusal logged, so that one reason is logged once.
    logged: Mutex<String>,
    /// The transport's peer epoch ([`Transport::peer_epoch`]), bumped at
    /// each change of this peer's state.
    epoch: Arc<AtomicU64>,
    /// The peer was never connected and `dead_after` has passed since the
    /// transport started: it counts as down (the epoch was bumped once).
    late: AtomicBool,
    attach: Option<Arc<dyn Attach>>,
}

impl Peer {
    fn set_state(&self, s: PeerState) {
        if self.counters.state() != s {
            self.counters.set_state(s);
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }
}

struct Shared {
    layout: Layout,
    /// First local endpoint.
    first: u32,
    inboxes: Vec<CachePadded<Inbox>>,
    pool: BufferPool,
    /// One per island; ours is never used.
    peers: Vec<Peer>,
    paths: Vec<PathBuf>,
    secret: Secret,
    hello: Hello,
    handshake_timeout: Duration,
    heartbeat: Duration,
    dead_after: Duration,
    backoff_max: Duration,
    stop: AtomicBool,
    /// Refusals on the listener from connections that did not name an
    /// island of the deployment.
    unattributed: AtomicU64,
    /// System calls that move batches out: the send threads' writes, and
    /// the wake-ups a send makes (of a peer's send thread, of a local
    /// worker). Added to only after a system call, which costs far more.
    send_syscalls: CachePadded<AtomicU64>,
    /// System calls that take batches in: the receive threads' reads, and
    /// their wake-ups of the local workers they deliver to.
    recv_syscalls: CachePadded<AtomicU64>,
    /// See [`Transport::peer_epoch`].
    epoch: Arc<AtomicU64>,
    started: Instant,
}

/// The Unix-socket transport of one island (see the module documentation).
pub struct Uds {
    shared: Arc<Shared>,
    /// The send threads (joined first at a shutdown: each writes its
    /// goodbye before the connections close), and the other I/O threads.
    senders: Mutex<Vec<JoinHandle<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A thread that panicked holding the lock left plain data behind.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Uds {
    /// Listens on our path and starts the I/O threads. Refuses a config
    /// whose parts disagree.
    pub fn new(cfg: UdsConfig) -> io::Result<Uds> {
        let layout = cfg.layout;
        let me = layout.me();
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if cfg.paths.len() != layout.islands() {
            return Err(bad(format!(
                "uds: {} socket paths for {} islands",
                cfg.paths.len(),
                layout.islands()
            )));
        }
        let workers: Vec<u32> = (0..layout.islands())
            .map(|i| layout.workers(i as IslandId))
            .collect();
        if cfg.hello.island != me || cfg.hello.workers != workers {
            return Err(bad(format!(
                "uds: the hello says island {} with workers {:?}, the layout island {me} with {workers:?}",
                cfg.hello.island, cfg.hello.workers
            )));
        }
        let path = &cfg.paths[usize::from(me)];
        remove_stale_socket(path)?;
        let listener = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("uds: bind {}: {e}", path.display())))?;
        let epoch = Instant::now();
        let range = layout.range(me);
        let depth = cfg.mailbox_depth.max(1);
        let peer_epoch = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(Shared {
            first: range.start,
            inboxes: range
                .map(|_| {
                    CachePadded::new(Inbox {
                        queue: ArrayQueue::new(depth),
                        bell: Bell::new(),
                    })
                })
                .collect(),
            pool: BufferPool::new(layout.endpoints(), depth),
            peers: (0..layout.islands())
                .map(|i| Peer {
                    queue: ArrayQueue::new(cfg.send_queue.max(1)),
                    bell: Bell::new(),
                    link: Mutex::new(Link {
                        generation: 0,
                        stream: None,
                        token: 0,
                    }),
                    changed: Condvar::new(),
                    generation: AtomicU64::new(0),
                    busy: AtomicBool::new(false),
                    counters: PeerCounters::new(i as IslandId, epoch),
                    logged: Mutex::new(String::new()),
                    epoch: Arc::clone(&peer_epoch),
                    late: AtomicBool::new(false),
                    attach: cfg.attach.clone(),
                })
                .collect(),
            layout,
            paths: cfg.paths,
            secret: cfg.secret,
            hello: cfg.hello,
            handshake_timeout: cfg.handshake_timeout,
            heartbeat: cfg.heartbeat,
            dead_after: cfg.dead_after.max(cfg.heartbeat * 2),
            backoff_max: cfg.backoff_max,
            stop: AtomicBool::new(false),
            unattributed: AtomicU64::new(0),
            send_syscalls: Default::default(),
            recv_syscalls: Default::default(),
            epoch: peer_epoch,
            started: epoch,
        });
        let uds = Uds {
            shared: Arc::clone(&shared),
            senders: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        };
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| -> io::Result<()> {
            let sender = name.starts_with("uds-send-");
            let h = std::thread::Builder::new().name(name).spawn(f)?;
            if sender {
                locked(&uds.senders).push(h);
            } else {
                locked(&uds.threads).push(h);
            }
            Ok(())
        };
        let sh = Arc::clone(&shared);
        spawn(
            format!("uds-accept-{me}"),
            Box::new(move || accept_loop(&sh, listener)),
        )?;
        for p in 0..shared.layout.islands() as IslandId {
            if p == me {
                continue;
            }
            let sh = Arc::clone(&shared);
            spawn(
                format!("uds-recv-{me}-{p}"),
                Box::new(move || recv_loop(&sh, p)),
            )?;
            let sh = Arc::clone(&shared);
            spawn(
                format!("uds-send-{me}-{p}"),
                Box::new(move || send_loop(&sh, p)),
            )?;
        }
        Ok(uds)
    }

    /// Each peer island's connection (ours is left out).
    pub fn peers(&self) -> Vec<PeerStats> {
        let me = self.shared.layout.me();
        self.shared
            .peers
            .iter()
            .filter(|p| p.counters.island != me)
            .map(|p| p.counters.snapshot())
            .collect()
    }

    /// Handshakes refused on the listener from connections that named no
    /// island of the deployment (or sent nothing decodable).
    pub fn unattributed_refusals(&self) -> u64 {
        self.shared.unattributed.load(Ordering::Relaxed)
    }

    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// Gives the send threads up to [`DRAIN`] to write what is queued for
    /// peers that are up, then stops the I/O threads: each send thread
    /// writes a goodbye on its connection and leaves, then every connection
    /// closes and our socket path is removed. Batches still queued then are
    /// lost. Idempotent.
    pub fn shutdown(&self) {
        let sh = &self.shared;
        let until = Instant::now() + DRAIN;
        for p in &sh.peers {
            while p.counters.state() == PeerState::Up
                && (!p.queue.is_empty() || p.busy.load(Ordering::SeqCst))
                && Instant::now() < until
                && !sh.stopping()
            {
                p.bell.ring();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if sh.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        let here = std::thread::current().id();
        let join = |threads: &Mutex<Vec<JoinHandle<()>>>| {
            let threads: Vec<_> = locked(threads).drain(..).collect();
            for t in threads {
                // A thread of ours may end the transport that owns us
                // (through an `Attach`): it cannot wait for itself, and
                // leaves on `stop`.
                if t.thread().id() != here {
                    let _ = t.join();
                }
            }
        };
        // The send threads say goodbye on the connections before they close.
        for p in &sh.peers {
            p.bell.ring();
        }
        join(&self.senders);
        for p in &sh.peers {
            close(p, None);
            p.bell.ring();
        }
        // Wake the acceptor out of `accept`.
        let path = &sh.paths[usize::from(sh.layout.me())];
        drop(UnixStream::connect(path));
        join(&self.threads);
        let _ = std::fs::remove_file(path);
    }
}

impl Drop for Uds {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Longest [`Uds::shutdown`] waits for queued batches to be written.
const DRAIN: Duration = Duration::from_secs(1);

/// Longest a send thread waits to write its goodbye (a peer that does not
/// read learns of the stop when the connection closes instead).
const GOODBYE_WAIT: Duration = Duration::from_millis(200);

/// Removes a socket file left by a process that died; refuses to remove
/// anything that is not a socket.
fn remove_stale_socket(path: &std::path::Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("uds: {} exists and is not a socket", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

impl Transport for Uds {
    #[inline]
    fn send(&self, from: Endpoint, to: Endpoint, batch: Vec<u8>) -> Result<(), Full> {
        let sh = &*self.shared;
        if let Some(inbox) =
            to.0.checked_sub(sh.first)
                .and_then(|i| sh.inboxes.get(i as usize))
        {
            return match inbox.queue.push((from, batch)) {
                Ok(()) => {
                    if inbox.bell.ring() {
                        sh.send_syscalls.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                }
                Err((_, b)) => Err(Full(b)),
            };
        }
        let (Some(island), Some(worker)) = (
            sh.layout.island_of(to),
            from.0
                .checked_sub(sh.first)
                .filter(|&w| (w as usize) < sh.inboxes.len()),
        ) else {
            debug_assert!(
                false,
                "a batch from {from:?} to {to:?}: not ours or nobody's"
            );
            self.recycle(batch);
            return Ok(());
        };
        let peer = &sh.peers[usize::from(island)];
        match peer.queue.push((worker, to, batch)) {
            Ok(()) => {
                if peer.bell.ring() {
                    sh.send_syscalls.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
            Err((_, _, b)) if peer.counters.state() == PeerState::Up => Err(Full(b)),
            Err((_, _, b)) => {
                PeerCounters::add(&peer.counters.dropped, 1);
                self.recycle(b);
                Ok(())
            }
        }
    }

    #[inline]
    fn recv(&self, me: Endpoint) -> Option<(Endpoint, Vec<u8>)> {
        self.shared.inboxes[(me.0 - self.shared.first) as usize]
            .queue
            .pop()
    }

    #[inline]
    fn buffer(&self) -> Vec<u8> {
        self.shared.pool.take()
    }

    #[inline]
    fn recycle(&self, buf: Vec<u8>) {
        self.shared.pool.give(buf);
    }

    fn endpoints(&self) -> usize {
        self.shared.layout.endpoints()
    }

    #[inline]
    fn bell(&self, me: Endpoint) -> &Bell {
        &self.shared.inboxes[(me.0 - self.shared.first) as usize].bell
    }

    fn syscalls(&self) -> (u64, u64) {
        let sh = &*self.shared;
        (
            sh.send_syscalls.load(Ordering::Relaxed),
            sh.recv_syscalls.load(Ordering::Relaxed),
        )
    }

    /// Down: its connection closed after it had been up (and no new one
    /// passed the handshake since), it was refused for good, or it never
    /// connected within `dead_after` of our start. A connection that carries
    /// nothing, not even a heartbeat, for `dead_after` is closed, so a hung
    /// peer counts as down too.
    fn peer_down(&self, island: IslandId) -> bool {
        let sh = &*self.shared;
        if island == sh.layout.me() {
            return false;
        }
        let Some(p) = sh.peers.get(usize::from(island)) else {
            return false;
        };
        match p.counters.state() {
            PeerState::Up => false,
            PeerState::Down | PeerState::Broken => true,
            PeerState::Connecting => p.late.load(Ordering::Acquire),
        }
    }

    #[inline]
    fn peer_epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Relaxed)
    }

    fn peer_incarnation(&self, island: IslandId) -> u64 {
        self.shared
            .peers
            .get(usize::from(island))
            .map_or(0, |p| p.counters.incarnation.load(Ordering::Relaxed))
    }
}

/// Closes the peer's connection (if it is still generation `generation`, or
/// whatever it is with `None`) and marks the peer down.
fn close(p: &Peer, generation: Option<u64>) {
    let mut l = locked(&p.link);
    if generation.is_some_and(|g| g != l.generation) {
        return;
    }
    if let Some(s) = l.stream.take() {
        let _ = s.shutdown(std::net::Shutdown::Both);
        // A new generation tells the send thread to drop its handle.
        l.generation += 1;
        p.generation.store(l.generation, Ordering::Release);
        // Unlinked first: whoever sees the epoch move then sees it down.
        if let Some(a) = &p.attach {
            a.closed(p.counters.island, l.token);
        }
        p.set_state(PeerState::Down);
    }
    p.changed.notify_all();
    p.bell.ring();
}

/// Installs a connection that passed the handshake (and [`Attach::connected`],
/// which returned `token`).
fn install(p: &Peer, s: UnixStream, hello: &Hello, token: u64) {
    let mut l = locked(&p.link);
    let old = p
        .counters
        .incarnation
        .swap(hello.incarnation, Ordering::Relaxed);
    if old != 0 && old != hello.incarnation {
        // Batches queued for the incarnation that died are not for this one
        // (dropped before the send thread can see the new connection).
        let mut n = 0;
        while p.queue.pop().is_some() {
            n += 1;
        }
        PeerCounters::add(&p.counters.dropped, n);
    }
    if p.counters.state() != PeerState::Connecting {
        PeerCounters::add(&p.counters.reconnects, 1);
    }
    l.generation += 1;
    l.stream = Some(s);
    l.token = token;
    p.generation.store(l.generation, Ordering::Release);
    p.set_state(PeerState::Up);
    p.counters.heard();
    p.changed.notify_all();
    p.bell.ring();
}

impl Shared {
    fn refused(&self, p: &Peer, why: &Refused) {
        if !why.is_refusal() {
            return;
        }
        PeerCounters::add(&p.counters.refusals, 1);
        self.log(p, &format!("refused: {why}"));
    }

    /// Logs a line about a peer, once per distinct line in a row.
    fn log(&self, p: &Peer, line: &str) {
        let mut last = locked(&p.logged);
        if *last != line {
            eprintln!(
                "islands uds: island {} with island {}: {line}",
                self.layout.me(),
                p.counters.island
            );
            line.clone_into(&mut last);
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Runs the handshake on `s` with timeouts, leaving the stream ready for
    /// frames (its read timeout then catches a silent peer).
    fn handshake(
        &self,
        s: &mut UnixStream,
        expect: &Expect,
        initiator: bool,
    ) -> Result<Hello, Refused> {
        s.set_read_timeout(Some(self.handshake_timeout))?;
        s.set_write_timeout(Some(self.handshake_timeout))?;
        let peer = handshake::handshake(s, &self.hello, expect, &self.secret, initiator)?;
        s.set_read_timeout(Some(self.dead_after))?;
        s.set_write_timeout(Some(self.dead_after))?;
        Ok(peer)
    }

    /// Hands a connection that passed the handshake to the [`Attach`], if
    /// any: its token, or why it refused the connection.
    fn attach(&self, s: &mut UnixStream, peer: &Hello, initiator: bool) -> Result<u64, Refused> {
        match &self.peers[usize::from(peer.island)].attach {
            None => Ok(0),
            Some(a) => a
                .connected(peer, s, initiator)
                .map_err(|why| Refused::Malformed(format!("setting the connection up: {why}"))),
        }
    }
}

/// Accepts connections from lower islands.
fn accept_loop(sh: &Shared, listener: UnixListener) {
    let me = sh.layout.me();
    for conn in listener.incoming() {
        if sh.stopping() {
            return;
        }
        let Ok(mut s) = conn else { continue };
        let mut expect = Expect::matching(&sh.hello);
        // Higher islands are dialled from here; a live one is connected.
        expect.connected = (0..sh.layout.islands() as IslandId)
            .filter(|&i| i > me || sh.peers[usize::from(i)].counters.state() == PeerState::Up)
            .collect();
        match sh.handshake(&mut s, &expect, false) {
            Ok(hello) => {
                let peer = &sh.peers[usize::from(hello.island)];
                match sh.attach(&mut s, &hello, false) {
                    Ok(token) => install(peer, s, &hello, token),
                    Err(why) => sh.refused(peer, &why),
                }
            }
            Err(why) => {
                let claimed = claimed_island(&why).filter(|&i| usize::from(i) < sh.peers.len());
                match claimed {
                    Some(i) if i != me => sh.refused(&sh.peers[usize::from(i)], &why),
                    _ if why.is_refusal() => {
                        sh.unattributed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("islands uds: island {me}: a connection refused: {why}");
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The island a refused peer claimed to be, when the refusal names it.
fn claimed_island(why: &Refused) -> Option<IslandId> {
    match why {
        Refused::Duplicate { island } | Refused::IslandOutOfRange { island, .. } => Some(*island),
        Refused::WrongIsland { theirs, .. } => Some(*theirs),
        _ => None,
    }
}

/// Connects to a higher island, with a backoff, until the handshake passes
/// or we stop.
fn connect(sh: &Shared, p: IslandId) -> Option<()> {
    let peer = &sh.peers[usize::from(p)];
    let mut expect = Expect::matching(&sh.hello);
    expect.peer = Some(p);
    let mut delay = Duration::from_millis(2);
    loop {
        if sh.stopping() {
            return None;
        }
        if let Ok(mut s) = UnixStream::connect(&sh.paths[usize::from(p)]) {
            let passed = sh
                .handshake(&mut s, &expect, true)
                .and_then(|hello| Ok((sh.attach(&mut s, &hello, true)?, hello)));
            match passed {
                Ok((token, hello)) => {
                    install(peer, s, &hello, token);
                    return Some(());
                }
                Err(why) => sh.refused(peer, &why),
            }
        }
        // Sleep in short steps so that a shutdown is not held up.
        let until = Instant::now() + delay;
        while Instant::now() < until && !sh.stopping() {
            std::thread::sleep(Duration::from_millis(5).min(delay));
        }
        delay = (delay * 2).min(sh.backoff_max);
    }
}

/// Waits for a connection with `p` (made by [`connect`] or the acceptor):
/// returns a handle on it and its generation.
fn wait_link(sh: &Shared, p: IslandId) -> Option<(UnixStream, u64)> {
    let peer = &sh.peers[usize::from(p)];
    loop {
        if sh.stopping() {
            return None;
        }
        let up = {
            let l = locked(&peer.link);
            l.stream.as_ref().map(|s| (s.try_clone(), l.generation))
        };
        match up {
            Some((Ok(s), g)) => return Some((s, g)),
            Some((Err(_), g)) => close(peer, Some(g)),
            None if sh.layout.me() < p => {
                connect(sh, p)?;
            }
            None => {
                let l = locked(&peer.link);
                if l.stream.is_none() && !sh.stopping() {
                    let _ = peer.changed.wait_timeout(l, Duration::from_millis(100));
                }
            }
        }
    }
}

/// Reads frames from `p`'s connections, one connection after another.
fn recv_loop(sh: &Shared, p: IslandId) {
    let peer = &sh.peers[usize::from(p)];
    while let Some((mut s, generation)) = wait_link(sh, p) {
        let why = read_frames(sh, p, &mut s);
        if !sh.stopping() {
            match why {
                Err(e) => {
                    PeerCounters::add(&peer.counters.refusals, 1);
                    sh.log(peer, &format!("connection closed: {e}"));
                }
                Ok(Ended::Goodbye) => {
                    PeerCounters::add(&peer.counters.goodbyes, 1);
                    sh.log(peer, "left: it said goodbye (a clean stop)");
                }
                Ok(Ended::Lost(e)) => sh.log(peer, &format!("connection lost: {e}")),
            }
        }
        close(peer, Some(generation));
    }
}

/// How a connection that kept the stream's rules ended.
enum Ended {
    /// The peer said goodbye: it stops cleanly.
    Goodbye,
    /// It failed or closed, for the reason given.
    Lost(String),
}

/// Delivers frames until the peer says goodbye, the connection fails (both
/// `Ok`) or breaks a rule of the stream (`Err`).
fn read_frames(sh: &Shared, p: IslandId, s: &mut UnixStream) -> Result<Ended, StreamError> {
    let peer = &sh.peers[usize::from(p)];
    let c = &peer.counters;
    let mut d = Decoder::new();
    loop {
        while let Some((h, payload)) = d.next_frame()? {
            c.heard();
            PeerCounters::add(&c.bytes_in, (HEADER + payload.len()) as u64);
            if h.flags & FLAG_HEARTBEAT != 0 {
                continue;
            }
            if h.flags & FLAG_GOODBYE != 0 {
                // Nothing follows a goodbye: the peer is down from here on.
                return Ok(Ended::Goodbye);
            }
            let from = stream::sender(&sh.layout, p, h.worker)?;
            let to = stream::destination(&sh.layout, h.to)?;
            let mut b = sh.pool.take();
            b.extend_from_slice(payload);
            let inbox = &sh.inboxes[(to.0 - sh.first) as usize];
            // Counted before the push: whoever takes the batch sees it counted.
            PeerCounters::add(&c.batches_in, 1);
            let mut item = (from, b);
            let mut waits = 0u32;
            // Back-pressure: wait while the mailbox is full (the socket's
            // buffer fills behind us and the sender's writes wait).
            while let Err(back) = inbox.queue.push(item) {
                if sh.stopping() {
                    return Ok(Ended::Lost("stopping".into()));
                }
                item = back;
                if inbox.bell.ring() {
                    sh.recv_syscalls.fetch_add(1, Ordering::Relaxed);
                }
                waits += 1;
                if waits < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            if inbox.bell.ring() {
                sh.recv_syscalls.fetch_add(1, Ordering::Relaxed);
            }
        }
        let read = d.read_from(s);
        sh.recv_syscalls.fetch_add(1, Ordering::Relaxed);
        match read {
            Ok(0) => return Ok(Ended::Lost("closed by the peer".into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // The header's own error comes back from `next_frame`.
                d.next_frame()?;
                return Ok(Ended::Lost(e.to_string()));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Ended::Lost(format!(
                    "nothing heard for {:?}",
                    sh.dead_after
                )));
            }
            Err(e) => return Ok(Ended::Lost(e.to_string())),
        }
    }
}

/// Most batches written with one `writev`.
const WRITE_BATCHES: usize = 64;

/// Writes `p`'s queued batches on its connection, several per `writev`, and
/// a heartbeat when idle.
fn send_loop(sh: &Shared, p: IslandId) {
    let peer = &sh.peers[usize::from(p)];
    let c = &peer.counters;
    let mut conn: Option<(UnixStream, u64)> = None;
    let mut taken: Vec<Outgoing> = Vec::with_capacity(WRITE_BATCHES);
    let mut headers = [[0u8; HEADER]; WRITE_BATCHES];
    let mut last_write = Instant::now();
    while !sh.stopping() {
        let generation = peer.generation.load(Ordering::Acquire);
        if conn.as_ref().is_none_or(|(_, g)| *g != generation) {
            conn = locked(&peer.link)
                .stream
                .as_ref()
                .and_then(|s| s.try_clone().ok())
                .map(|s| (s, generation));
        }
        let Some((s, g)) = conn.as_mut() else {
            if c.state() == PeerState::Connecting
                && sh.started.elapsed() >= sh.dead_after
                && !peer.late.swap(true, Ordering::AcqRel)
            {
                // Never heard of within the dead interval: down for the
                // executors (`peer_down`), until it connects.
                peer.epoch.fetch_add(1, Ordering::AcqRel);
            }
            // Down: batches wait in the queue (up to its cap) for a connection.
            peer.bell.prepare_sleep();
            if peer.generation.load(Ordering::Acquire) != generation || sh.stopping() {
                peer.bell.cancel_sleep();
            } else {
                peer.bell.sleep(sh.heartbeat);
            }
            continue;
        };
        peer.busy.store(true, Ordering::SeqCst);
        while taken.len() < WRITE_BATCHES {
            match peer.queue.pop() {
                Some(b) if b.2.len() > stream::MAX_BATCH => {
                    // No header can carry it; the engine tolerates the loss.
                    PeerCounters::add(&c.dropped, 1);
                    sh.log(peer, &format!("a batch of {} bytes dropped", b.2.len()));
                }
                Some(b) => taken.push(b),
                None => break,
            }
        }
        if taken.is_empty() {
            peer.busy.store(false, Ordering::SeqCst);
            if last_write.elapsed() >= sh.heartbeat {
                sh.send_syscalls.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = s.write_all(&stream::heartbeat()) {
                    sh.log(peer, &format!("heartbeat failed: {e}"));
                    close(peer, Some(*g));
                    conn = None;
                    continue;
                }
                PeerCounters::add(&c.bytes_out, HEADER as u64);
                last_write = Instant::now();
            }
            peer.bell.prepare_sleep();
            if !peer.queue.is_empty()
                || peer.generation.load(Ordering::Acquire) != generation
                || sh.stopping()
            {
                peer.bell.cancel_sleep();
            } else {
                peer.bell.sleep(sh.heartbeat);
            }
            continue;
        }
        // Counted before the write, so that a reply to these batches never
        // finds them uncounted; taken back if the write fails.
        let n = taken.len() as u64;
        let bytes: u64 = taken.iter().map(|b| (HEADER + b.2.len()) as u64).sum();
        PeerCounters::add(&c.batches_out, n);
        PeerCounters::add(&c.bytes_out, bytes);
        match write_batches(s, &taken, &mut headers, &sh.send_syscalls) {
            Ok(()) => last_write = Instant::now(),
            Err(e) => {
                c.batches_out.fetch_sub(n, Ordering::Relaxed);
                c.bytes_out.fetch_sub(bytes, Ordering::Relaxed);
                PeerCounters::add(&c.dropped, n);
                sh.log(peer, &format!("write failed: {e}"));
                close(peer, Some(*g));
                conn = None;
            }
        }
        for (_, _, b) in taken.drain(..) {
            sh.pool.give(b);
        }
        peer.busy.store(false, Ordering::SeqCst);
    }
    // Stopping: the connection this thread wrote on, if it is still the
    // current one, ends with a goodbye (after every batch written above).
    if let Some((mut s, g)) = conn {
        if peer.generation.load(Ordering::Acquire) == g {
            let _ = s.set_write_timeout(Some(GOODBYE_WAIT));
            sh.send_syscalls.fetch_add(1, Ordering::Relaxed);
            match s.write_all(&stream::goodbye()) {
                Ok(()) => PeerCounters::add(&c.bytes_out, HEADER as u64),
                Err(e) => sh.log(peer, &format!("goodbye failed: {e}")),
            }
        }
    }
}

/// Writes every batch behind its header with as few `writev`s as the socket
/// allows, counting each in `syscalls`.
fn write_batches(
    s: &mut UnixStream,
    batches: &[Outgoing],
    headers: &mut [[u8; HEADER]; WRITE_BATCHES],
    syscalls: &AtomicU64,
) -> io::Result<()> {
    let mut slices = [IoSlice::new(&[]); 2 * WRITE_BATCHES];
    for (i, (worker, to, b)) in batches.iter().enumerate() {
        headers[i] = stream::header(0, *worker, *to, b)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    }
    for (i, (_, _, b)) in batches.iter().enumerate() {
        slices[2 * i] = IoSlice::new(&headers[i]);
        slices[2 * i + 1] = IoSlice::new(b);
    }
    let mut bufs = &mut slices[..2 * batches.len()];
    while !bufs.is_empty() {
        let wrote = s.write_vectored(bufs);
        syscalls.fetch_add(1, Ordering::Relaxed);
        match wrote {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
